//! oncecheck-store: one append-only op log per stream, behind the [`OpStore`] trait.
//!
//! An op is appended with a client-chosen `op_id` and answered with the stream's seq it is stored
//! at. Every backend ([`memory`], [`sqlite`], [`dynamodb`]) keeps these invariants:
//!
//! - R2 unique-seq: at most one op per seq; no op is ever overwritten.
//! - R3 once-per-op-id: an op_id is stored at most once; a re-push answers the seq it was stored at.
//! - R5 dense: with writers of this build only, the stored seqs of a stream are exactly 1..n.
//! - R1 no-skip: a pull never returns a seq above an op that is still being written, so a puller
//!   that stores the last seq it received as its cursor never skips an op.
//!
//! A push is a batch of ops under one deadline. The deadline is checked between ops here (in the
//! default [`OpStore::append_batch`]) and inside a backend wherever it can wait (DynamoDB checks it
//! between rounds and races the round in flight). Ops appended before the deadline stay stored; the
//! re-push of the batch finds their claims and answers the same seqs.
//!
//! The trait is object safe (methods return boxed futures) so the relay picks its backend at run
//! time as an `Arc<dyn OpStore>`.

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

pub mod dynamodb;
pub mod memory;
pub mod sqlite;
pub mod sync;

pub use dynamodb::DynamoDbStore;
pub use memory::MemoryStore;
pub use sqlite::SqliteStore;

/// A position in a stream. Seq 0 is "before the first op"; ops live at 1, 2, ...
pub type Seq = i64;

/// The default push deadline: below the ~30 s of the proxies that usually sit in front of a relay
/// and about twice an uncontended 500-op push against DynamoDB.
pub const PUSH_DEADLINE_SECS_DEFAULT: u64 = 20;

/// The environment variable that overrides [`PUSH_DEADLINE_SECS_DEFAULT`] (read by the relay binary).
pub const PUSH_DEADLINE_ENV: &str = "ONCECHECK_RELAY_PUSH_DEADLINE_SECS";

/// A boxed, sendable future: what every [`OpStore`] method returns, so the trait works as `dyn`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An op as a client pushes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOp {
    pub op_id: String,
    pub payload: Vec<u8>,
}

impl NewOp {
    pub fn new(op_id: impl Into<String>, payload: impl Into<Vec<u8>>) -> NewOp {
        NewOp {
            op_id: op_id.into(),
            payload: payload.into(),
        }
    }
}

/// An op as a pull returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOp {
    pub seq: Seq,
    pub op_id: String,
    pub payload: Vec<u8>,
}

/// What one append answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The seq the op is stored at.
    pub seq: Seq,
    /// True when the op_id was already stored (a re-push): nothing was written, `seq` is the
    /// seq of the first append.
    pub existing: bool,
}

/// What a push answered: the ops appended, in request order, and, when it stopped early, why.
/// `appended.len()` ops of the batch are stored; the ops after them were not attempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    pub appended: Vec<Appended>,
    pub error: Option<StoreError>,
}

/// State a backend carries from one op of a push to the next. DynamoDB keeps the counter value it
/// learned here (carry-forward: one counter read per push); the other backends ignore it.
#[derive(Debug, Clone, Default)]
pub struct PushContext {
    /// The stream's counter as last learned in this push, if known.
    pub counter_known: Option<Seq>,
}

/// Errors a caller can handle. The relay maps each one to an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The push deadline passed before this op was stored. Ops answered before it stay stored; a
    /// round cut short may still have committed, which the re-push finds through the claim.
    #[error("the push deadline passed before the op was stored")]
    DeadlineExceeded,
    /// More lost rounds in a row than the contention budget allows.
    #[error("gave up after {lost_rounds} lost rounds in a row (contention budget)")]
    ContentionBudgetExhausted { lost_rounds: u32 },
    /// The stream's counter stands at `counter` and the next seq would overflow i64.
    #[error("the stream's counter is at {counter}; the next seq would overflow")]
    SeqOverflow { counter: Seq },
    /// The claim slot of `op_id` holds another op_id (a claim-key collision): refused, not guessed.
    #[error("the claim slot of op_id {op_id:?} is held by op_id {holder:?}")]
    ClaimForeign { op_id: String, holder: String },
    /// The store reported the claim of `op_id` as present, but reading it back found none.
    #[error("the claim of op_id {op_id:?} was reported present but could not be read back")]
    ClaimVanished { op_id: String },
    /// The request is not valid for this store (empty op_id, empty stream id, ...).
    #[error("invalid input: {reason}")]
    InvalidInput { reason: String },
    /// The backend failed (I/O, service error, corrupt item).
    #[error("store backend failure: {message}")]
    Backend { message: String },
}

impl StoreError {
    pub fn backend(message: impl std::fmt::Display) -> StoreError {
        StoreError::Backend {
            message: message.to_string(),
        }
    }
}

/// One append-only op log per stream.
///
/// Every implementation must answer an op_id's re-push with the seq it was first stored at (R3),
/// store the ops of this build at dense seqs 1..n (R5), and never let a pull return a seq above an
/// op still being written (R1).
pub trait OpStore: Send + Sync {
    /// Appends one op of a push. `push` carries what the backend learned from the previous op of
    /// the same push. Must give up with [`StoreError::DeadlineExceeded`] once `deadline` passes
    /// while it waits.
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>>;

    /// Returns up to `limit` ops of `stream` with seq > `after`, in seq order.
    fn pull<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>>;

    /// Appends a batch in order, stopping at the first error; the deadline is checked before
    /// every op. The ops answered before a stop stay stored.
    //= specs/relay-append.md#R6
    //# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
    fn append_batch<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let mut push = PushContext::default();
            let mut appended = Vec::with_capacity(ops.len());
            for op in ops {
                if Instant::now() >= deadline {
                    return BatchOutcome {
                        appended,
                        error: Some(StoreError::DeadlineExceeded),
                    };
                }
                match self.append_op(stream, op, deadline, &mut push).await {
                    Ok(one) => appended.push(one),
                    Err(error) => {
                        return BatchOutcome {
                            appended,
                            error: Some(error),
                        }
                    }
                }
            }
            BatchOutcome {
                appended,
                error: None,
            }
        })
    }

    /// Test seam: stores `op` at `seq` the way a writer of an older build did, without moving the
    /// stream's counter (a "legacy op"). Used to pin the floor step and the legacy-gap crossing.
    #[cfg(feature = "test-seams")]
    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>>;
}

/// Checks what every backend requires of an append's input.
pub(crate) fn validate_append(stream: &str, op: &NewOp) -> Result<(), StoreError> {
    if stream.is_empty() {
        return Err(StoreError::InvalidInput {
            reason: "the stream id is empty".into(),
        });
    }
    if op.op_id.is_empty() {
        return Err(StoreError::InvalidInput {
            reason: "the op_id is empty".into(),
        });
    }
    Ok(())
}

/// Checks a pull's input: a cursor below 0 names no position.
pub(crate) fn validate_pull(stream: &str, after: Seq) -> Result<(), StoreError> {
    if stream.is_empty() {
        return Err(StoreError::InvalidInput {
            reason: "the stream id is empty".into(),
        });
    }
    if after < 0 {
        return Err(StoreError::InvalidInput {
            reason: format!("the cursor {after} is negative"),
        });
    }
    Ok(())
}

//= specs/relay-append.md#R4
//# Checked arithmetic: a counter at the top of the seq range is a loud error, never a wrap.
/// The seq after `counter`, or the loud overflow error: a wrap would land in the negative range
/// where DynamoDB claims live.
pub(crate) fn next_seq(counter: Seq) -> Result<Seq, StoreError> {
    counter
        .checked_add(1)
        .ok_or(StoreError::SeqOverflow { counter })
}

/// A shared store is a store: the relay holds an `Arc<dyn OpStore>`, tests wrap one.
impl<S: OpStore + ?Sized> OpStore for std::sync::Arc<S> {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        (**self).append_op(stream, op, deadline, push)
    }

    fn pull<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        (**self).pull(stream, after, limit)
    }

    fn append_batch<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, BatchOutcome> {
        (**self).append_batch(stream, ops, deadline)
    }

    #[cfg(feature = "test-seams")]
    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        (**self).put_legacy_op(stream, seq, op)
    }
}
