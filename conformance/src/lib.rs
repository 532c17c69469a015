//! oncecheck-conformance: the `oncecheck` command — model checks, the Explorer, diagrams, HTML
//! reports and trace files — and, behind the `replay` feature, the DynamoDB proxy and trace
//! replay against the real implementations.
//!
//! Invariants: this is the only crate that depends on both the model and the implementations;
//! without `replay` it depends on no implementation (no AWS SDK, no sqlx, no aws-lc), so the
//! main job builds the model checker only.

pub mod action_names;
#[cfg(all(test, feature = "replay"))]
mod counting_upstream;
pub mod diagram;
pub mod implemented;
pub mod junit;
pub mod merge;
pub mod model_facts;
pub mod models;
#[cfg(feature = "replay")]
pub mod probe;
#[cfg(feature = "replay")]
pub mod proxy;
pub mod reach;
#[cfg(feature = "replay")]
pub mod replay;
#[cfg(feature = "replay")]
pub mod replay_command;
#[cfg(feature = "replay")]
pub mod replay_dynamodb;
#[cfg(feature = "replay")]
pub mod replay_flags;
#[cfg(feature = "replay")]
pub mod replay_junit;
#[cfg(feature = "replay")]
pub mod replay_log;
pub mod replay_middleware;
#[cfg(feature = "replay")]
pub mod replay_session;
#[cfg(feature = "replay")]
pub mod replay_token;
pub mod report;
pub mod run_info;
pub mod soak;
pub mod spill;
pub mod terminal;
pub mod traces;
pub mod transitions;
pub mod variants;
pub mod verdict_words;
