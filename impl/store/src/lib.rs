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
//! A push is checked whole before its first write ([`check_push`]): every op within the limits
//! that are the same on every backend ([`limits`]: DynamoDB's item size and key length), distinct
//! op_ids, and, for a push of two ops or more, no op_id stored with another payload (one batched
//! read of the push's claims, [`OpStore::check_claims`]). One op that fails refuses the whole push
//! and nothing is stored. The one exception is a race: a concurrent writer that stores one of the
//! push's op_ids with another payload after that read and before this push's write of it; the
//! push then stops at that op with [`StoreError::PayloadConflict`], the ops before it stored and
//! answered, as a deadline would stop it (`specs/relay-append.md`). A pass
//! that stores no new op before its deadline ends with [`StoreError::NoProgress`], distinct from a
//! pass that stored some ([`StoreError::DeadlineExceeded`]), so a client can tell a stalled
//! backend from a slow one.
//!
//! An op_id re-pushed with another payload is refused ([`StoreError::PayloadConflict`], naming the
//! seq the first payload is stored at), never answered as if it were the same op.
//!
//! Errors carry stable messages; a backend logs the raw error it came from (tracing) and never
//! puts SDK or driver dumps into a [`StoreError`].
//!
//! The trait is object safe (methods return boxed futures) so the relay picks its backend at run
//! time as an `Arc<dyn OpStore>`.

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

pub mod dynamodb;
pub mod limits;
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

/// The default pull deadline: a pull retries transient backend errors until it passes.
pub const PULL_DEADLINE_SECS_DEFAULT: u64 = 10;

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
    /// The deadline passed before this op was stored (or, for a pull, before it was answered).
    /// Ops answered before it stay stored; a round cut short may still have committed, which the
    /// re-push finds through the claim.
    #[error("the deadline passed before the operation completed")]
    DeadlineExceeded,
    /// The push deadline passed before the pass stored a single new op (every op it answered, if
    /// any, was stored by an earlier pass). Distinct from [`StoreError::DeadlineExceeded`]: a
    /// re-push that does not progress must not look like one that does.
    #[error("the push deadline passed before any new op was stored")]
    NoProgress,
    /// More lost rounds in a row than the contention budget allows, the last ones lost to other
    /// writers.
    #[error("gave up after {lost_rounds} lost rounds in a row (contention budget)")]
    ContentionBudgetExhausted { lost_rounds: u32 },
    /// The backend did not answer (timeouts, lost connections, 5xx, throttling) for
    /// `attempts` attempts in a row: bounded like contention, reported apart from it.
    #[error("the store backend did not answer {attempts} attempts in a row")]
    Unavailable { attempts: u32 },
    /// The op_id is stored already, at `seq`, with another payload: refused, not answered.
    #[error("op_id {op_id:?} is stored at seq {seq} with another payload")]
    PayloadConflict { op_id: String, seq: Seq },
    /// The same op_id twice in one push (at `first` and `second`, 0-based): nothing stored.
    #[error("ops[{first}] and ops[{second}] have the same op_id {op_id:?}")]
    DuplicateOpId {
        op_id: String,
        first: usize,
        second: usize,
    },
    /// An op exceeds the item size limit (DynamoDB's, on every backend): nothing stored.
    #[error("ops[{index}] is too large for the store: {reason}")]
    TooLarge { index: usize, reason: String },
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
    /// The backend failed in a way a retry does not fix (a refused request, a corrupt item).
    /// `message` is stable text for operators; the raw error was logged where it happened.
    #[error("store backend failure: {message}")]
    Backend { message: String },
}

impl StoreError {
    pub fn backend(message: impl std::fmt::Display) -> StoreError {
        StoreError::Backend {
            message: message.to_string(),
        }
    }

    /// Prefixes the op's index in its push to an input error (`ops[3]: ...`).
    fn at_index(self, index: usize) -> StoreError {
        match self {
            StoreError::InvalidInput { reason } => StoreError::InvalidInput {
                reason: format!("ops[{index}]: {reason}"),
            },
            StoreError::TooLarge { reason, .. } => StoreError::TooLarge { index, reason },
            other => other,
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

    /// Returns up to `limit` ops of `stream` with seq > `after`, in seq order. Transient backend
    /// errors are retried until `deadline`, then [`StoreError::DeadlineExceeded`].
    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>>;

    /// [`OpStore::pull_within`] under the default pull deadline ([`PULL_DEADLINE_SECS_DEFAULT`]).
    fn pull<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        let deadline = Instant::now() + std::time::Duration::from_secs(PULL_DEADLINE_SECS_DEFAULT);
        self.pull_within(stream, after, limit, deadline)
    }

    /// Checks one op against what this backend can store, without touching it: what every
    /// backend requires, the limits ([`limits`]) included.
    fn check_op(&self, stream: &str, op: &NewOp) -> Result<(), StoreError> {
        validate_append(stream, op)
    }

    /// Reads the claims of `ops` in one batched read, before the push writes anything, and
    /// refuses the push when an op_id is stored with another payload
    /// ([`StoreError::PayloadConflict`], naming where) or its claim slot is held by another
    /// op_id. Changes nothing; an op_id stored with the same payload passes (its round answers
    /// it). Bounded by `deadline` ([`StoreError::DeadlineExceeded`]).
    //= specs/relay-append.md#R3
    //# A push of two ops or more reads the claims of all its ops before its first write; an op_id
    //# stored with another payload refuses the whole push, and nothing is written.
    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>>;

    /// Appends a batch in order, stopping at the first error; the whole batch is checked first
    /// ([`check_push`]), and the deadline before every op. The ops answered before a stop stay
    /// stored.
    //= specs/relay-append.md#R6
    //# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
    fn append_batch<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, BatchOutcome> {
        Box::pin(async move {
            if let Err(error) = check_push(self, stream, ops, deadline).await {
                return batch_outcome(Vec::new(), Some(error));
            }
            let mut push = PushContext::default();
            let mut appended = Vec::with_capacity(ops.len());
            for op in ops {
                if Instant::now() >= deadline {
                    return batch_outcome(appended, Some(StoreError::DeadlineExceeded));
                }
                match self.append_op(stream, op, deadline, &mut push).await {
                    Ok(one) => appended.push(one),
                    Err(error) => return batch_outcome(appended, Some(error)),
                }
            }
            batch_outcome(appended, None)
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

/// Checks a whole push before its first write: every op against the backend
/// ([`OpStore::check_op`]) and no op_id twice. An error names the op's index in the push.
pub fn check_batch<S: OpStore + ?Sized>(
    store: &S,
    stream: &str,
    ops: &[NewOp],
) -> Result<(), StoreError> {
    let mut first_index: std::collections::BTreeMap<&str, usize> =
        std::collections::BTreeMap::new();
    for (index, op) in ops.iter().enumerate() {
        store
            .check_op(stream, op)
            .map_err(|error| error.at_index(index))?;
        if let Some(&first) = first_index.get(op.op_id.as_str()) {
            return Err(StoreError::DuplicateOpId {
                op_id: op.op_id.clone(),
                first,
                second: index,
            });
        }
        first_index.insert(&op.op_id, index);
    }
    Ok(())
}

/// Checks a whole push before its first write: [`check_batch`], then, for two ops or more, the
/// stored claims ([`OpStore::check_claims`]; a one-op push needs no read: its own write refuses
/// it before anything is stored).
pub async fn check_push<S: OpStore + ?Sized>(
    store: &S,
    stream: &str,
    ops: &[NewOp],
    deadline: Instant,
) -> Result<(), StoreError> {
    check_batch(store, stream, ops)?;
    if ops.len() > 1 {
        store.check_claims(stream, ops, deadline).await?;
    }
    Ok(())
}

/// The outcome of a pass that answered `appended` and ended with `error`: a deadline that passed
/// before the pass stored a single new op is [`StoreError::NoProgress`].
pub(crate) fn batch_outcome(appended: Vec<Appended>, error: Option<StoreError>) -> BatchOutcome {
    let stored_new = appended.iter().any(|one| !one.existing);
    let error = match error {
        Some(StoreError::DeadlineExceeded) if !stored_new => Some(StoreError::NoProgress),
        other => other,
    };
    BatchOutcome { appended, error }
}

/// Checks what every backend requires of an append's input, the limits ([`limits`]) included.
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
    limits::check_op_limits(stream, op)
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

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        (**self).pull_within(stream, after, limit, deadline)
    }

    fn check_op(&self, stream: &str, op: &NewOp) -> Result<(), StoreError> {
        (**self).check_op(stream, op)
    }

    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        (**self).check_claims(stream, ops, deadline)
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
