//! oncecheck-conformance: the `oncecheck` command, and (as they land) trace export, the
//! DynamoDB proxy and trace replay against the real implementations.
//!
//! Invariant: this is the only crate that depends on both the model and the implementations.

pub mod diagram;
pub mod models;
pub mod probe;
pub mod proxy;
pub mod replay;
pub mod replay_command;
pub mod replay_dynamodb;
pub mod replay_session;
pub mod traces;
