//! oncecheck-tokened: DynamoDB writes that must happen once, made reliable under unknown
//! outcomes (spec: `specs/tokened-writes.md`, section "Implementation: the reliable-write
//! client"; requirements T1-T4).
//!
//! - [`classify`] — the retry table as an API: the pattern of a write, its class, and the retry
//!   a caller may make (a typed refusal for one that could apply an effect twice).
//! - [`client`] — [`ReliableWriter`]: tokened TransactWriteItems journaled before the first
//!   submission, identical resends inside the window, reconciliation (receipt item or a caller's
//!   check) after it; single-item writes retried only when the table allows; BatchWriteItem
//!   resending only `UnprocessedItems`.
//! - [`journal`] — the SQLite journal of intents.
//! - [`wire`] — the journaled request as DynamoDB's JSON, and back.
//!
//! Invariant: nothing is sent that is not journaled first, and nothing is resent that is not the
//! journaled request with its token.

pub mod classify;
pub mod client;
pub mod journal;
pub mod wire;

pub use classify::{
    classify_item, classify_update_expression, retry_plan, Pattern, RetryClass, RetryPlan,
    RetryRefused,
};
pub use client::{
    check_token, client_for, new_token, Answer, BatchOutcome, Intent, Limits, Outcome, Receipt,
    Reconcile, ReconcileCheck, ReliableWriter, RetryAsk, SingleOutcome, TokenError, WriteError,
    WriteReport,
};
pub use journal::{Entry, Journal, JournalError};
