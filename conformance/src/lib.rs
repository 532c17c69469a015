//! oncecheck-conformance: the `oncecheck` command, and (as they land) trace export, the
//! DynamoDB proxy and trace replay against the real implementations.
//!
//! Invariant: this is the only crate that depends on both the model and the implementations.

pub mod models;
