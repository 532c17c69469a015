//! oncecheck-model: stateright models of the three write paths oncecheck verifies.
//!
//! Invariants (see ARCHITECTURE.md): nothing here is async or does I/O; every action is
//! deterministic (ordered collections only); every property carries a requirement ID of
//! its spec in specs/ and an expected verdict per variant.

pub mod check;
pub mod ddb;
pub mod idempotency;
pub mod relay;
pub mod sorted_map;
pub mod token;
pub mod trace;
pub mod view;
