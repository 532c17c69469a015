//! The DynamoDB backend: each append round takes the stream's seq inside its write transaction.
//!
//! # Table
//!
//! One table, partition key `stream_id` (S), sort key `seq` (N), pay-per-request. A stream holds
//! three kinds of item, all under its own partition key:
//!
//! - the **counter** at `seq = 0`, attribute `next_seq`: the last seq this build allocated;
//! - a **claim** per op_id at `seq = claim_key(op_id)`, a negative number derived from a stable
//!   64-bit FNV-1a hash of the op_id, with attributes `op_id`, `claimed_seq` and `payload_sha256`
//!   (B, the SHA-256 of the payload: a re-push with another payload is refused; a claim written
//!   before the digest existed has none and is taken as matching). Claims are negative
//!   so a pull (`seq > cursor >= 0`) never returns one, and a counter can never wrap into them
//!   (next-seq arithmetic is checked: a counter at `i64::MAX` is a loud error);
//! - an **op** at `seq = s >= 1`, attributes `op_id` and `payload` (B).
//!
//! # One append round
//!
//! A round knows a counter value `c` and sends one TransactWriteItems, items in this order:
//!
//! 1. Update counter: `SET next_seq = :seq` (s = c + 1), condition `next_seq = :expected`
//!    (`attribute_not_exists(next_seq) OR next_seq = :expected` for c = 0),
//!    ReturnValuesOnConditionCheckFailure = ALL_OLD;
//! 2. Put claim at `claim_key(op_id)`, condition `attribute_not_exists(stream_id)` (ALL_OLD too, so
//!    a re-push reads its seq from the cancellation reason when the service returns it);
//! 3. for s > 1: ConditionCheck on op s - 1, `attribute_exists(stream_id)` (the predecessor check),
//!    flipped to `attribute_not_exists(stream_id)` for one round over a proven legacy gap;
//! 4. Put op at s, condition `attribute_not_exists(stream_id)`.
//!
//! The cancellation reasons come back one per item in request order and settle the round:
//! claim present -> `Existing(seq)` (from the old image or one read-back; another op_id in the
//! slot is `ClaimForeign`, a claim that cannot be read back `ClaimVanished`); any conflict or a
//! failed counter condition -> `Lost(hint)`, the hint being the counter's ALL_OLD image (no
//! image: the counter item is absent, so 0); counter held but op s present -> `SeqTaken` (floor step: one reverse Query,
//! Limit 1, finds the top occupied seq t and the next round tries t + 1, still expecting the
//! counter it knows, no re-read; its SET moves the counter to t + 1); counter held but op s - 1 absent -> `PredecessorMissing` (flip for that seq).
//!
//! # What AWS documents
//!
//! - TransactWriteItems is serializable against other transactions, single-item writes and
//!   GetItem.
//! - A Query is only read-committed against a transaction: the items of one committed
//!   transaction need not become visible at the same instant.
//! - While a transaction holds an item, another transaction touching it is cancelled with
//!   TransactionConflict; cancellation reasons are per item, in request order; ALL_OLD returns the
//!   failed item's old image.
//!
//! # What the design builds on
//!
//! The counter condition alone orders the transactions but not their visibility: T(n) can show
//! its counter before its op, T(n+1) writes a different item (op n+1) and commits, and a reader in
//! that window is handed n+1 and stores a cursor above op n (R1 broken). The predecessor check
//! puts op n's item into T(n+1): while T(n) still writes op n, T(n+1) is cancelled with
//! TransactionConflict (a lost round); once op n exists, T(n+1) may commit. That is transaction
//! against transaction, the case AWS documents, so a reader is never handed a seq above an op
//! still being written.
//!
//! The check is relaxed only over a proven legacy gap. A failed `attribute_exists` on op c while
//! the counter condition held means: the counter stands at c, no transaction writes op c (that
//! would be a conflict) and op c is absent. Only the transaction that moved the counter to c could
//! write op c in this build, and it writes both atomically, so c is a seq an ADD-era writer burned
//! or still holds. The next round, for that same seq only and with the counter known,
//! checks `attribute_not_exists` on op c instead: the item stays in the transaction, so a writer of
//! it still conflicts, and if op c appears the check fails and the round after goes back to
//! `attribute_exists`. Any other outcome clears the flip. Seq 1 has no predecessor; a floor step
//! lands on top + 1 where top is occupied. A legacy gap costs one extra round, once.
//!
//! With ADD-era writers in the fleet nothing is overwritten (every put is conditional) and the
//! counter never moves back (the SET is conditional on the value read), but R1 and R5 hold only
//! once every writer of a table runs this build.
//!
//! # Carry-forward, budget, deadline
//!
//! The first op of a push reads the counter once (strongly consistent Query of seq 0); every later
//! op expects the seq the previous op was written at, so an uncontended n-op push costs n
//! transactions and one read (R7). A wrong guess costs one lost round, which hands back the real
//! counter via ALL_OLD. The contention budget counts lost rounds *in a row*, reset by any other
//! outcome. After the first lost round in a row the writer retries at once with the hint (it is
//! as fresh as the answer that carried it); after a second and later one it sleeps a jittered,
//! exponentially growing backoff and then reads the counter, because a hint goes stale while
//! others keep committing (retrying on a stale hint after every pause starves a writer). The
//! push deadline is checked before every round and raced against the round in flight
//! (`tokio::time::timeout_at`); a round cut short may still commit, which the re-push finds
//! through its claim. The store owns retries: the SDK is configured for one attempt per request.
//!
//! # Unknown outcomes: one path
//!
//! Every error after which a request may or may not have taken effect (a timeout, a closed or
//! reset connection, a failed dispatch, a 5xx, throttling) is an *unknown outcome*: a
//! transaction committed whole or not at all. For a round it is a lost round without a hint
//! ([`classify`] decides, `send_round` applies it): it counts against `lost_rounds_max` in a
//! row, the counter becomes unknown, and the same op is retried in place; if the lost round had
//! committed, the retry's claim put fails and answers the stored seq (`existing: true`). When the
//! budget runs out on unknown outcomes alone the error is [`StoreError::Unavailable`], otherwise
//! [`StoreError::ContentionBudgetExhausted`]. Reads (counter, claim, floor, batched claims, pull
//! pages) retry an unknown outcome after a jittered backoff, bounded the same way and by their
//! deadline. Anything else (a validation error, access denied, a missing table) is refused at
//! once with a stable message; the raw error goes to the log.
//!
//! # Re-pushes
//!
//! A push whose round finds the op's own claim (a re-push, or a lost round that had committed)
//! reads the claims of all the push's remaining ops with strongly consistent BatchGetItem
//! requests (at most [`BATCH_GET_KEYS_MAX`] keys each, `UnprocessedKeys` retried within the
//! deadline) and answers every op whose claim it finds with the claim's seq, without a round; the
//! others go through rounds as before. A claim, once written, never changes, so the read cannot
//! be stale for the ops it finds. A fresh push never finds a claim and costs n transactions and
//! one counter read, as before.
//!
//! # Checked before the first write
//!
//! [`OpStore::check_op`] (the limits of [`crate::limits`], the same on every backend): an item
//! (op or claim) must fit DynamoDB's 400 KB item size, counted as DynamoDB counts it (attribute
//! names plus values), and the stream id must fit the 2048-byte partition key. One op over a
//! limit refuses the whole push; nothing is sent. Then a push of two ops or more reads the claims
//! of all its ops (the same batched strongly consistent BatchGetItem as a re-push,
//! [`OpStore::check_claims`]) before its first counter read: an op_id stored with another
//! payload refuses the whole push with nothing written. The read does not answer the ops it
//! finds: the rounds that follow are the protocol's, unchanged (a re-push then reads its claims
//! a second time on the fast path). A writer that claims one of the push's op_ids between this
//! read and the push's round for it makes that round refuse the op as before, with the ops
//! before it stored (`specs/relay-append.md`, "Checked before the first write").
//!
//! # IAM
//!
//! On the op table: `dynamodb:Query`, `dynamodb:PutItem`, `dynamodb:UpdateItem`,
//! `dynamodb:ConditionCheckItem`, `dynamodb:BatchGetItem` (re-pushes read claims in batches)
//! (DynamoDB authorises each action inside TransactWriteItems
//! separately; without ConditionCheckItem every append past a stream's first op is denied).
//! `dynamodb:CreateTable` and `dynamodb:DescribeTable` only for [`create_table`].
//!
//! # Cost model
//!
//! Uncontended: one transaction per op of up to four items (counter, claim, predecessor check,
//! op), billed at twice a plain write per item, plus one counter Query per push. Contended on
//! one stream, writers take turns on the counter; cancelled transactions consume capacity like
//! committed ones, so N writers racing on one stream cost up to about N times the capacity per
//! stored op, and a stream's ceiling is about one append per counter round-trip. Appends to
//! different streams never contend.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConditionCheck, KeySchemaElement, KeyType,
    KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
    TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use crate::limits::SHA256_BYTES;
use crate::sync::Arc;
use crate::{
    batch_outcome, check_push, next_seq, validate_append, validate_pull, Appended, BatchOutcome,
    NewOp, OpStore, PushContext, Seq, StoreError, StoreFuture, StoredOp,
};

pub const ATTRIBUTE_STREAM_ID: &str = "stream_id";
pub const ATTRIBUTE_SEQ: &str = "seq";
pub const ATTRIBUTE_NEXT_SEQ: &str = "next_seq";
pub const ATTRIBUTE_OP_ID: &str = "op_id";
pub const ATTRIBUTE_PAYLOAD: &str = "payload";
pub const ATTRIBUTE_CLAIMED_SEQ: &str = "claimed_seq";
/// The SHA-256 of the op's payload, on its claim item.
pub const ATTRIBUTE_PAYLOAD_SHA256: &str = "payload_sha256";
/// The sort key of a stream's counter item.
pub const COUNTER_SEQ: Seq = 0;

/// Lost rounds in a row before an append gives up. With the backoff below this spans a few
/// seconds of solid contention, well inside the push deadline.
pub const LOST_ROUNDS_MAX_DEFAULT: u32 = 32;
const BACKOFF_BASE_MILLIS_DEFAULT: u64 = 2;
const BACKOFF_MAX_MILLIS_DEFAULT: u64 = 200;
/// Per-request limit of the SDK; the push deadline bounds the whole push.
const REQUEST_TIMEOUT_SECS: u64 = 5;
const CONNECT_TIMEOUT_SECS: u64 = 2;
/// Pages of a pull are capped by DynamoDB at 1 MB; this caps our own request size.
const PULL_PAGE_ITEMS_MAX: usize = 1000;
/// DynamoDB's limit of keys per BatchGetItem request.
pub const BATCH_GET_KEYS_MAX: usize = 100;

/// Tuning of an append's retry loop.
#[derive(Debug, Clone)]
pub struct AppendTuning {
    /// Lost rounds in a row before [`StoreError::ContentionBudgetExhausted`].
    pub lost_rounds_max: u32,
    /// First backoff ceiling after a lost round; doubles per lost round in a row.
    pub backoff_base: Duration,
    /// Largest backoff ceiling.
    pub backoff_max: Duration,
}

impl Default for AppendTuning {
    fn default() -> AppendTuning {
        AppendTuning {
            lost_rounds_max: LOST_ROUNDS_MAX_DEFAULT,
            backoff_base: Duration::from_millis(BACKOFF_BASE_MILLIS_DEFAULT),
            backoff_max: Duration::from_millis(BACKOFF_MAX_MILLIS_DEFAULT),
        }
    }
}

/// The claim slot of `op_id`: a negative sort key from a stable 64-bit FNV-1a hash. Stable across
/// builds and platforms (std's hasher is not), in `[-2^62, -1]`, far from any seq.
pub fn claim_key(op_id: &str) -> Seq {
    const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = FNV_OFFSET_BASIS;
    for byte in op_id.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    let magnitude = i64::try_from(hash >> 2).expect("62 bits fit in i64");
    -1 - magnitude
}

/// The SHA-256 of a payload, as the claim item keeps it.
pub fn payload_digest(payload: &[u8]) -> [u8; SHA256_BYTES] {
    use sha2::Digest;
    sha2::Sha256::digest(payload).into()
}

/// Who a round claims for: the op_id and its payload's digest, compared with a found claim.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claimant<'a> {
    op_id: &'a str,
    digest: [u8; SHA256_BYTES],
}

impl<'a> Claimant<'a> {
    fn of(op: &'a NewOp) -> Claimant<'a> {
        Claimant {
            op_id: &op.op_id,
            digest: payload_digest(&op.payload),
        }
    }
}

/// Which condition a round puts on op s - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredecessorCheck {
    /// `attribute_exists`: the normal check, op s - 1 must be stored.
    Exists,
    /// `attribute_not_exists`: the one-round flip over a proven legacy gap.
    NotExists,
}

/// Where a round's expected counter value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSource {
    /// A strongly consistent read of the counter item.
    Read,
    /// The seq the previous op of the same push was written at (carry-forward).
    Carried,
    /// The counter's old image returned by ALL_OLD when this op's previous round lost.
    Hint,
    /// Unchanged from the previous round, which held the counter condition but found its seq
    /// occupied: the round tries the top occupied seq + 1 (the floor step).
    Floor,
    /// Unchanged from the previous round, which held the counter condition.
    Known,
    /// An ADD-era writer's UpdateItem ADD (test seam).
    Add,
}

/// How a round ended, from the transaction's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RoundOutcome {
    Stored,
    /// The op_id's claim exists: the op is stored at `seq`. `counter_after` is what the round
    /// learned about the counter (it held: `expected`; it failed: the ALL_OLD hint).
    Existing {
        seq: Seq,
        counter_after: Option<Seq>,
    },
    /// The claim slot is present but the service returned no image: read it back.
    ClaimPresent {
        counter_after: Option<Seq>,
    },
    /// Another op_id holds the claim slot.
    ClaimForeign {
        holder: String,
    },
    /// The counter moved or an item was held by another transaction.
    Lost {
        hint: Option<Seq>,
    },
    /// The answer was lost or refused for load (timeout, closed connection, 5xx, throttling):
    /// a lost round without a hint, counted apart only to name the error when the budget ends.
    Unknown,
    /// The op_id's claim exists with another payload's digest.
    PayloadConflict {
        seq: Seq,
    },
    /// The counter held but op s is occupied (legacy ops above the counter).
    SeqTaken,
    /// The counter held but op s - 1 is absent: a legacy gap.
    PredecessorMissing,
    /// The flipped check failed: op s - 1 has appeared meanwhile.
    PredecessorAppeared,
}

/// Indexes of the items of one round's transaction, in request order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TransactionLayout {
    counter: usize,
    claim: usize,
    predecessor: Option<usize>,
    op: usize,
}

impl TransactionLayout {
    fn new(with_predecessor: bool) -> TransactionLayout {
        if with_predecessor {
            TransactionLayout {
                counter: 0,
                claim: 1,
                predecessor: Some(2),
                op: 3,
            }
        } else {
            TransactionLayout {
                counter: 0,
                claim: 1,
                predecessor: None,
                op: 2,
            }
        }
    }

    fn len(&self) -> usize {
        self.op + 1
    }
}

/// One cancellation reason, as the service reported it.
#[derive(Debug, Clone, PartialEq)]
struct ItemReason {
    code: String,
    item: Option<HashMap<String, AttributeValue>>,
}

const CODE_NONE: &str = "None";
const CODE_CONDITION_FAILED: &str = "ConditionalCheckFailed";
const CODE_CONFLICT: &str = "TransactionConflict";
const CODES_THROTTLED: [&str; 2] = ["ThrottlingError", "ProvisionedThroughputExceeded"];

fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Option<Seq> {
    match item.get(name) {
        Some(AttributeValue::N(text)) => text.parse().ok(),
        _ => None,
    }
}

fn string<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(text)) => Some(text),
        _ => None,
    }
}

/// The counter value in the ALL_OLD image of a failed counter condition. No image means the
/// counter item does not exist (ALL_OLD returns the item when there is one): the counter is 0.
/// A malformed image gives `None`, and the next round re-reads the counter.
fn counter_hint(item: Option<&HashMap<String, AttributeValue>>) -> Option<Seq> {
    match item {
        None => Some(0),
        Some(item) => number(item, ATTRIBUTE_NEXT_SEQ),
    }
}

/// Settles a claim's image: ours answers its seq, another op_id is refused, our op_id with
/// another payload's digest is a conflict (a claim without a digest predates it: taken as ours).
fn settle_claim(
    item: &HashMap<String, AttributeValue>,
    claimant: &Claimant<'_>,
    counter_after: Option<Seq>,
) -> Result<RoundOutcome, StoreError> {
    let holder = string(item, ATTRIBUTE_OP_ID)
        .ok_or_else(|| StoreError::backend("a claim item lacks its op_id"))?;
    if holder != claimant.op_id {
        return Ok(RoundOutcome::ClaimForeign {
            holder: holder.to_owned(),
        });
    }
    let seq = number(item, ATTRIBUTE_CLAIMED_SEQ)
        .ok_or_else(|| StoreError::backend("a claim item lacks its claimed_seq"))?;
    match item.get(ATTRIBUTE_PAYLOAD_SHA256) {
        Some(AttributeValue::B(digest)) if digest.as_ref() != claimant.digest.as_slice() => {
            Ok(RoundOutcome::PayloadConflict { seq })
        }
        _ => Ok(RoundOutcome::Existing { seq, counter_after }),
    }
}

/// The answer a found claim gives its op: the stored seq, or the typed refusal.
fn claim_answer(
    item: &HashMap<String, AttributeValue>,
    claimant: &Claimant<'_>,
) -> Result<Appended, StoreError> {
    match settle_claim(item, claimant, None)? {
        RoundOutcome::Existing { seq, .. } => Ok(Appended {
            seq,
            existing: true,
        }),
        RoundOutcome::ClaimForeign { holder } => Err(StoreError::ClaimForeign {
            op_id: claimant.op_id.to_owned(),
            holder,
        }),
        RoundOutcome::PayloadConflict { seq } => Err(StoreError::PayloadConflict {
            op_id: claimant.op_id.to_owned(),
            seq,
        }),
        other => unreachable!("settle_claim answered {other:?}"),
    }
}

/// Maps a cancelled round's reasons (one per item, request order) to its outcome. The claim
/// outranks everything (a re-push must answer its own seq and burn none), then the counter, then
/// the op's slot, then the predecessor.
fn settle_cancellation(
    layout: TransactionLayout,
    predecessor: Option<PredecessorCheck>,
    expected: Seq,
    claimant: &Claimant<'_>,
    reasons: &[ItemReason],
) -> Result<RoundOutcome, StoreError> {
    if reasons.len() != layout.len() {
        return Err(StoreError::backend(format!(
            "a cancelled transaction of {} items returned {} reasons",
            layout.len(),
            reasons.len()
        )));
    }
    let counter = &reasons[layout.counter];
    let counter_after = match counter.code.as_str() {
        CODE_NONE => Some(expected),
        CODE_CONDITION_FAILED => counter_hint(counter.item.as_ref()),
        _ => None,
    };
    let claim = &reasons[layout.claim];
    if claim.code == CODE_CONDITION_FAILED {
        return match &claim.item {
            Some(item) => settle_claim(item, claimant, counter_after),
            None => Ok(RoundOutcome::ClaimPresent { counter_after }),
        };
    }
    if counter.code == CODE_CONDITION_FAILED {
        return Ok(RoundOutcome::Lost {
            hint: counter_hint(counter.item.as_ref()),
        });
    }
    // A conflict or a throttled item: the transaction was cancelled whole, nothing committed.
    if reasons.iter().any(|reason| {
        reason.code == CODE_CONFLICT || CODES_THROTTLED.contains(&reason.code.as_str())
    }) {
        return Ok(RoundOutcome::Lost { hint: None });
    }
    let codes: Vec<&str> = reasons.iter().map(|reason| reason.code.as_str()).collect();
    let unexpected = || StoreError::backend(format!("unexpected cancellation reasons {codes:?}"));
    if counter.code != CODE_NONE || claim.code != CODE_NONE {
        return Err(unexpected());
    }
    if reasons[layout.op].code == CODE_CONDITION_FAILED {
        return Ok(RoundOutcome::SeqTaken);
    }
    match (layout.predecessor, predecessor) {
        (Some(index), Some(check)) if reasons[index].code == CODE_CONDITION_FAILED => match check {
            PredecessorCheck::Exists => Ok(RoundOutcome::PredecessorMissing),
            PredecessorCheck::NotExists => Ok(RoundOutcome::PredecessorAppeared),
        },
        _ => Err(unexpected()),
    }
}

/// One round as planned before it is sent.
#[derive(Debug, Clone, Copy)]
struct PlannedRound {
    /// The counter value the round's condition expects.
    expected: Seq,
    /// Where `expected` came from.
    source: CounterSource,
    /// The seq the round tries.
    seq: Seq,
    /// The condition on op `seq - 1`, if the round carries one.
    predecessor: Option<PredecessorCheck>,
}

/// An op's answer and what its last round learned of the counter (the next op's carry-forward).
#[derive(Debug, Clone, Copy)]
struct Answered {
    appended: Appended,
    counter_after: Option<Seq>,
}

/// What the retry loop does after a round.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Next {
    Done(Appended),
    /// Another round; `backoff` after a lost round.
    Again {
        backoff: bool,
    },
    /// Find the top occupied seq, then another round.
    FloorStep,
    ReadBackClaim,
    Fail(StoreError),
}

/// The state of one op's retry loop between rounds.
#[derive(Debug, Clone, Default)]
struct LoopState {
    /// The counter value the next round expects, if known (else it reads the counter).
    counter: Option<(Seq, CounterSource)>,
    /// The seq whose predecessor check is flipped to `attribute_not_exists` for the next round.
    flipped_at: Option<Seq>,
    /// The top occupied seq found by a floor step: later rounds of this op try above it (an
    /// occupied seq never frees up, so the floor stays valid).
    floor: Option<Seq>,
    lost_in_a_row: u32,
    /// How many of the lost rounds in a row were unknown outcomes (all of them: the backend is
    /// unavailable rather than contended).
    unknown_in_a_row: u32,
    /// What the round learned about the counter when it found a claim to read back.
    counter_after_claim: Option<Seq>,
}

impl LoopState {
    //= specs/relay-append.md#R6
    //# The contention budget counts lost rounds in a row; over it the append ends with a typed
    //# error.
    //# A failed attribute_exists while the counter held proves a legacy gap: the next round, for
    //# that seq only, checks attribute_not_exists instead.
    /// Moves the loop on after a round that expected `expected` and tried `seq`.
    fn after(
        &mut self,
        outcome: RoundOutcome,
        expected: Seq,
        seq: Seq,
        lost_rounds_max: u32,
    ) -> Next {
        // An unknown outcome is a lost round without a hint; it is counted apart only so that a
        // budget spent on unknown outcomes alone is reported as an unavailable backend.
        let outcome = if outcome == RoundOutcome::Unknown {
            self.unknown_in_a_row += 1;
            RoundOutcome::Lost { hint: None }
        } else {
            self.unknown_in_a_row = 0;
            outcome
        };
        if !matches!(outcome, RoundOutcome::Lost { .. }) {
            self.lost_in_a_row = 0;
        }
        match outcome {
            RoundOutcome::Stored => {
                self.counter = Some((seq, CounterSource::Carried));
                Next::Done(Appended {
                    seq,
                    existing: false,
                })
            }
            RoundOutcome::Existing { seq, counter_after } => {
                self.counter = counter_after.map(|value| (value, CounterSource::Carried));
                Next::Done(Appended {
                    seq,
                    existing: true,
                })
            }
            RoundOutcome::ClaimPresent { counter_after } => {
                self.counter_after_claim = counter_after;
                Next::ReadBackClaim
            }
            RoundOutcome::ClaimForeign { .. } | RoundOutcome::PayloadConflict { .. } => {
                Next::Fail(StoreError::backend(
                    "unreachable: foreign and conflicting claims are reported by the caller",
                ))
            }
            RoundOutcome::Unknown => unreachable!("mapped to a lost round above"),
            RoundOutcome::Lost { hint } => self.after_lost(hint, lost_rounds_max),
            RoundOutcome::SeqTaken => {
                // The counter held: it stays known; only the seq moves up past the occupied run.
                self.counter = Some((expected, CounterSource::Floor));
                self.flipped_at = None;
                Next::FloorStep
            }
            RoundOutcome::PredecessorMissing => {
                self.counter = Some((expected, CounterSource::Known));
                self.flipped_at = Some(seq);
                Next::Again { backoff: false }
            }
            RoundOutcome::PredecessorAppeared => {
                self.counter = Some((expected, CounterSource::Known));
                self.flipped_at = None;
                Next::Again { backoff: false }
            }
        }
    }

    /// Moves the loop on after a lost round (`hint`: the counter's old image, if the answer
    /// carried one): another round, at once with the hint after the first lost round in a row,
    /// after a backoff and a counter read after later ones; over the budget, the typed error.
    fn after_lost(&mut self, hint: Option<Seq>, lost_rounds_max: u32) -> Next {
        self.lost_in_a_row += 1;
        self.flipped_at = None;
        //= specs/relay-append.md#R6
        //# The contention budget counts lost rounds in a row; over it the append ends with a typed
        //# error.
        assert!(
            self.unknown_in_a_row <= self.lost_in_a_row,
            "{} unknown outcomes counted in a row of {} lost rounds",
            self.unknown_in_a_row,
            self.lost_in_a_row
        );
        if self.lost_in_a_row > lost_rounds_max {
            if self.unknown_in_a_row >= self.lost_in_a_row {
                return Next::Fail(StoreError::Unavailable {
                    attempts: self.lost_in_a_row,
                });
            }
            return Next::Fail(StoreError::ContentionBudgetExhausted {
                lost_rounds: self.lost_in_a_row,
            });
        }
        if self.lost_in_a_row == 1 {
            // The hint is as fresh as the answer that carried it: use it at once.
            self.counter = hint.map(|value| (value, CounterSource::Hint));
            Next::Again { backoff: false }
        } else {
            // Lost again: back off. A hint gets stale while sleeping (the others keep
            // committing), so the round after the pause reads the counter instead.
            self.counter = None;
            Next::Again { backoff: true }
        }
    }

    /// The seq a round expecting `expected` tries: above the counter and above the floor.
    fn seq_for(&self, expected: Seq) -> Result<Seq, StoreError> {
        next_seq(expected.max(self.floor.unwrap_or(0)))
    }

    /// The predecessor condition of a round at `seq`: none at seq 1, flipped only for the seq it
    /// was flipped for.
    fn predecessor_for(&self, seq: Seq) -> Option<PredecessorCheck> {
        if seq <= 1 {
            None
        } else if self.flipped_at == Some(seq) {
            Some(PredecessorCheck::NotExists)
        } else {
            Some(PredecessorCheck::Exists)
        }
    }
}

/// A full-jitter backoff: uniform in [0, min(max, base * 2^(lost - 1))].
fn jittered_backoff(
    tuning: &AppendTuning,
    lost_in_a_row: u32,
    random: &mut impl rand::Rng,
) -> Duration {
    let doublings = lost_in_a_row.saturating_sub(1).min(20);
    let ceiling = tuning
        .backoff_base
        .saturating_mul(1u32 << doublings)
        .min(tuning.backoff_max);
    let ceiling_micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(random.random_range(0..=ceiling_micros))
}

/// What a failed request means for the caller.
#[derive(Debug)]
enum Failure {
    /// The request may or may not have taken effect, or was refused for load: retry it (a round:
    /// a lost round without a hint).
    Unknown,
    /// Refused for good (validation, access, a missing table): retrying does not help.
    Refused(StoreError),
}

/// Sorts a failed request into [`Failure`], logging the raw error (the only place it goes).
fn classify<E>(operation: &'static str, error: SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let unknown = match &error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(service) => {
            is_retryable_code(service.err().code()) || service.raw().status().is_server_error()
        }
        _ => false,
    };
    if unknown {
        tracing::warn!(operation, error = %DisplayErrorContext(&error), "unknown outcome: retrying");
        Failure::Unknown
    } else {
        Failure::Refused(sdk_error(operation, error))
    }
}

/// A refused request as a [`StoreError`] with a stable message (the operation and the service's
/// error code and message, or the kind of failure); the raw error, SDK internals included, goes
/// to the log only. The relay never shows it to a client (its 500s have a fixed detail).
fn sdk_error<E, R>(operation: &str, error: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    tracing::error!(operation, error = %DisplayErrorContext(&error), "DynamoDB request refused");
    // A service error's code and message are the service's own words, short and stable; every
    // other kind is named, never dumped (its debug form is SDK internals).
    let cause = match &error {
        SdkError::ServiceError(service) => format!(
            "{}: {}",
            service.err().code().unwrap_or("an unnamed error"),
            service.err().message().unwrap_or("no message")
        ),
        SdkError::ConstructionFailure(_) => "the request could not be built".to_owned(),
        SdkError::TimeoutError(_) => "a timeout".to_owned(),
        SdkError::DispatchFailure(_) => "a failed dispatch".to_owned(),
        SdkError::ResponseError(_) => "an unreadable response".to_owned(),
        _ => "an unclassified error".to_owned(),
    };
    StoreError::backend(format!("DynamoDB {operation} failed with {cause}"))
}

/// Error codes after which the request's outcome is unknown or it was refused for load; the
/// round counts as lost (without a hint) and the claim makes the retry safe.
fn is_retryable_code(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
                | "InternalServerError"
                | "ServiceUnavailable"
                | "TransactionInProgressException"
                | "TransactionConflictException"
        )
    )
}

/// Builds a DynamoDB client for `endpoint_url` (None: the SDK's default endpoint resolution).
/// Region and credentials come from the usual AWS environment; the region falls back to
/// us-east-1 so a local endpoint needs none. The SDK makes one attempt per request: the store owns
/// retries, so every round is visible as one request.
pub async fn client_for(endpoint_url: Option<&str>) -> Client {
    client_with(endpoint_url, |builder| builder).await
}

async fn client_with(
    endpoint_url: Option<&str>,
    customise: impl FnOnce(aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder,
) -> Client {
    let region = aws_config::meta::region::RegionProviderChain::default_provider()
        .or_else(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(region)
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_SECS))
                .operation_attempt_timeout(Duration::from_secs(REQUEST_TIMEOUT_SECS))
                .build(),
        )
        .load()
        .await;
    let mut builder = aws_sdk_dynamodb::config::Builder::from(&shared);
    if let Some(url) = endpoint_url {
        builder = builder.endpoint_url(url);
    }
    Client::from_conf(customise(builder).build())
}

/// Creates the op table (pay-per-request, `stream_id` S / `seq` N) and waits until it is active.
/// An existing table is fine.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(ATTRIBUTE_STREAM_ID)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(StoreError::backend)?,
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(ATTRIBUTE_SEQ)
                .attribute_type(ScalarAttributeType::N)
                .build()
                .map_err(StoreError::backend)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(ATTRIBUTE_STREAM_ID)
                .key_type(KeyType::Hash)
                .build()
                .map_err(StoreError::backend)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(ATTRIBUTE_SEQ)
                .key_type(KeyType::Range)
                .build()
                .map_err(StoreError::backend)?,
        )
        .send()
        .await;
    if let Err(error) = created {
        let exists = matches!(&error, SdkError::ServiceError(service)
            if service.err().code() == Some("ResourceInUseException"));
        if !exists {
            return Err(sdk_error("CreateTable", error));
        }
    }
    // A real table takes a while to become active; moto's is active at once.
    for _attempt in 0..120 {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|error| sdk_error("DescribeTable", error))?;
        let active = described
            .table()
            .and_then(|description| description.table_status())
            .is_some_and(|status| *status == aws_sdk_dynamodb::types::TableStatus::Active);
        if active {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(StoreError::backend(format!(
        "table {table} did not become active"
    )))
}

/// The DynamoDB store. Cloning shares the client (and, with `test-seams`, the seams).
#[derive(Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: Arc<str>,
    tuning: AppendTuning,
    #[cfg(feature = "test-seams")]
    seams: seams::Seams,
}

impl std::fmt::Debug for DynamoDbStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DynamoDbStore")
            .field("table", &self.table)
            .field("tuning", &self.tuning)
            .finish_non_exhaustive()
    }
}

fn key(stream: &str, seq: Seq) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (
            ATTRIBUTE_STREAM_ID.to_owned(),
            AttributeValue::S(stream.to_owned()),
        ),
        (ATTRIBUTE_SEQ.to_owned(), AttributeValue::N(seq.to_string())),
    ])
}

fn stored_op(item: &HashMap<String, AttributeValue>) -> Result<StoredOp, StoreError> {
    let seq =
        number(item, ATTRIBUTE_SEQ).ok_or_else(|| StoreError::backend("an op lacks its seq"))?;
    let op_id = string(item, ATTRIBUTE_OP_ID)
        .ok_or_else(|| StoreError::backend(format!("op {seq} lacks its op_id")))?
        .to_owned();
    let payload = match item.get(ATTRIBUTE_PAYLOAD) {
        Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
        _ => return Err(StoreError::backend(format!("op {seq} lacks its payload"))),
    };
    Ok(StoredOp {
        seq,
        op_id,
        payload,
    })
}

impl DynamoDbStore {
    /// A store on `table`, talking to `endpoint_url` (None: the SDK's default endpoint).
    pub async fn connect(table: impl Into<String>, endpoint_url: Option<&str>) -> DynamoDbStore {
        #[cfg(feature = "test-seams")]
        {
            let requests = seams::RequestCounter::default();
            let counter = requests.clone();
            let client =
                client_with(endpoint_url, move |builder| builder.interceptor(counter)).await;
            let mut store = DynamoDbStore::from_client(client, table);
            store.seams.requests = requests;
            store
        }
        #[cfg(not(feature = "test-seams"))]
        {
            DynamoDbStore::from_client(client_for(endpoint_url).await, table)
        }
    }

    /// A store on `table` over an existing client. (With `test-seams`, requests through a client
    /// built elsewhere are not counted; use [`DynamoDbStore::connect`] to count them.)
    pub fn from_client(client: Client, table: impl Into<String>) -> DynamoDbStore {
        DynamoDbStore {
            client,
            table: Arc::from(table.into()),
            tuning: AppendTuning::default(),
            #[cfg(feature = "test-seams")]
            seams: seams::Seams::default(),
        }
    }

    pub fn with_tuning(mut self, tuning: AppendTuning) -> DynamoDbStore {
        self.tuning = tuning;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates this store's table (see [`create_table`]).
    pub async fn create_table(&self) -> Result<(), StoreError> {
        create_table(&self.client, &self.table).await
    }

    /// Reads the stream's counter with one strongly consistent Query of seq 0; 0 when the stream
    /// has no counter item yet. Unknown outcomes are retried for up to the default pull deadline.
    pub async fn read_counter(&self, stream: &str) -> Result<Seq, StoreError> {
        let deadline = Instant::now() + Duration::from_secs(crate::PULL_DEADLINE_SECS_DEFAULT);
        self.read_counter_within(stream, deadline).await
    }

    async fn read_counter_within(
        &self,
        stream: &str,
        deadline: Instant,
    ) -> Result<Seq, StoreError> {
        let item = self
            .read_item_at(stream, COUNTER_SEQ, ":counter", "Query (counter)", deadline)
            .await?;
        match item {
            None => Ok(0),
            Some(item) => number(&item, ATTRIBUTE_NEXT_SEQ)
                .ok_or_else(|| StoreError::backend("the counter item lacks next_seq")),
        }
    }

    /// Reads the item at `seq` with one strongly consistent Query (`placeholder` names the seq's
    /// value in the key condition, as each read has always named it).
    async fn read_item_at(
        &self,
        stream: &str,
        seq: Seq,
        placeholder: &str,
        operation: &'static str,
        deadline: Instant,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let condition = format!("#stream = :stream AND #seq = {placeholder}");
        let answer = self
            .read_with_retries(operation, deadline, || {
                self.client
                    .query()
                    .table_name(&*self.table)
                    .key_condition_expression(&condition)
                    .expression_attribute_names("#stream", ATTRIBUTE_STREAM_ID)
                    .expression_attribute_names("#seq", ATTRIBUTE_SEQ)
                    .expression_attribute_values(":stream", AttributeValue::S(stream.to_owned()))
                    .expression_attribute_values(placeholder, AttributeValue::N(seq.to_string()))
                    .consistent_read(true)
                    .send()
            })
            .await?;
        Ok(answer.items().first().cloned())
    }

    /// The top occupied seq of the stream (one reverse Query, Limit 1), 0 for an empty stream.
    async fn top_occupied_seq(&self, stream: &str, deadline: Instant) -> Result<Seq, StoreError> {
        let answer = self
            .read_with_retries("Query (top occupied seq)", deadline, || {
                self.client
                    .query()
                    .table_name(&*self.table)
                    .key_condition_expression("#stream = :stream AND #seq > :counter")
                    .expression_attribute_names("#stream", ATTRIBUTE_STREAM_ID)
                    .expression_attribute_names("#seq", ATTRIBUTE_SEQ)
                    .expression_attribute_values(":stream", AttributeValue::S(stream.to_owned()))
                    .expression_attribute_values(
                        ":counter",
                        AttributeValue::N(COUNTER_SEQ.to_string()),
                    )
                    .scan_index_forward(false)
                    .limit(1)
                    .consistent_read(true)
                    .send()
            })
            .await?;
        match answer.items().first() {
            None => Ok(0),
            Some(item) => number(item, ATTRIBUTE_SEQ)
                .ok_or_else(|| StoreError::backend("an op item lacks its seq")),
        }
    }

    /// Reads the claim item of `op_id` back (one strongly consistent Query).
    async fn read_claim(
        &self,
        stream: &str,
        op_id: &str,
        deadline: Instant,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        self.read_item_at(
            stream,
            claim_key(op_id),
            ":claim",
            "Query (claim)",
            deadline,
        )
        .await
    }

    //= specs/relay-append.md#R3
    //# An op_id is stored at most once; every append of it, re-pushes included, answers the same
    //# seq.
    fn claim_put(
        &self,
        stream: &str,
        claimant: &Claimant<'_>,
        seq: Seq,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut item = key(stream, claim_key(claimant.op_id));
        item.insert(
            ATTRIBUTE_OP_ID.to_owned(),
            AttributeValue::S(claimant.op_id.to_owned()),
        );
        item.insert(
            ATTRIBUTE_CLAIMED_SEQ.to_owned(),
            AttributeValue::N(seq.to_string()),
        );
        item.insert(
            ATTRIBUTE_PAYLOAD_SHA256.to_owned(),
            AttributeValue::B(Blob::new(claimant.digest.to_vec())),
        );
        let put = Put::builder()
            .table_name(&*self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#stream)")
            .expression_attribute_names("#stream", ATTRIBUTE_STREAM_ID)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(StoreError::backend)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    //= specs/relay-append.md#R2
    //# At most one op per seq; no op is overwritten.
    fn op_put(&self, stream: &str, op: &NewOp, seq: Seq) -> Result<TransactWriteItem, StoreError> {
        let mut item = key(stream, seq);
        item.insert(
            ATTRIBUTE_OP_ID.to_owned(),
            AttributeValue::S(op.op_id.clone()),
        );
        item.insert(
            ATTRIBUTE_PAYLOAD.to_owned(),
            AttributeValue::B(Blob::new(op.payload.clone())),
        );
        let put = Put::builder()
            .table_name(&*self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#stream)")
            .expression_attribute_names("#stream", ATTRIBUTE_STREAM_ID)
            .build()
            .map_err(StoreError::backend)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    //= specs/relay-append.md#R4
    //# The counter update is conditional on the counter value the round knows.
    //= specs/relay-append.md#R5
    //# With new-build writers only, the stored seqs are exactly 1..n.
    fn counter_update(
        &self,
        stream: &str,
        seq: Seq,
        expected: Seq,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut update = Update::builder()
            .table_name(&*self.table)
            .set_key(Some(key(stream, COUNTER_SEQ)))
            .update_expression("SET #next = :seq")
            .expression_attribute_names("#next", ATTRIBUTE_NEXT_SEQ)
            .expression_attribute_values(":seq", AttributeValue::N(seq.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if !self.mutated(Mutation::UnconditionalCounterSet) {
            let condition = if expected == 0 {
                "attribute_not_exists(#next) OR #next = :expected"
            } else {
                "#next = :expected"
            };
            update = update
                .condition_expression(condition)
                .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()));
        }
        let update = update.build().map_err(StoreError::backend)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    //= specs/relay-append.md#R1
    //# A puller that stored cursor k has received every op that is or will ever be stored at a seq
    //# <= k.
    //= specs/relay-append.md#R10
    //# Every stored op is eventually received by every puller that keeps pulling.
    fn predecessor_check(
        &self,
        stream: &str,
        seq: Seq,
        check: PredecessorCheck,
    ) -> Result<TransactWriteItem, StoreError> {
        //= specs/relay-append.md#R1
        //# For s > 1 the transaction checks the op at s - 1: attribute_exists, or for the one seq
        //# whose predecessor is a proven legacy gap, attribute_not_exists.
        assert!(
            seq > 1,
            "a predecessor check at seq {seq} would check the counter item or a claim, not an op"
        );
        let condition = match check {
            PredecessorCheck::Exists => "attribute_exists(#stream)",
            PredecessorCheck::NotExists => "attribute_not_exists(#stream)",
        };
        let check = ConditionCheck::builder()
            .table_name(&*self.table)
            .set_key(Some(key(stream, seq - 1)))
            .condition_expression(condition)
            .expression_attribute_names("#stream", ATTRIBUTE_STREAM_ID)
            .build()
            .map_err(StoreError::backend)?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// Sends one round's transaction and settles its answer.
    async fn send_round(
        &self,
        stream: &str,
        op: &NewOp,
        seq: Seq,
        expected: Seq,
        predecessor: Option<PredecessorCheck>,
        claimant: &Claimant<'_>,
    ) -> Result<RoundOutcome, StoreError> {
        //= specs/relay-append.md#R4
        //# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
        assert!(
            seq > expected,
            "R4: a round's SET of the counter to {seq} would move it back from {expected}"
        );
        let layout = TransactionLayout::new(predecessor.is_some());
        let mut items = vec![
            self.counter_update(stream, seq, expected)?,
            self.claim_put(stream, claimant, seq)?,
        ];
        if let Some(check) = predecessor {
            items.push(self.predecessor_check(stream, seq, check)?);
        }
        items.push(self.op_put(stream, op, seq)?);
        assert!(items.len() == layout.len(), "the layout names every item");
        let answer = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let error = match answer {
            Ok(_) => return Ok(RoundOutcome::Stored),
            Err(error) => error,
        };
        if let SdkError::ServiceError(service) = &error {
            use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
            if let TransactWriteItemsError::TransactionCanceledException(cancelled) = service.err()
            {
                let reasons: Vec<ItemReason> = cancelled
                    .cancellation_reasons()
                    .iter()
                    .map(|reason| ItemReason {
                        code: reason.code().unwrap_or(CODE_NONE).to_owned(),
                        item: reason.item().cloned(),
                    })
                    .collect();
                return settle_cancellation(layout, predecessor, expected, claimant, &reasons);
            }
        }
        //= specs/relay-append.md#R3
        //# An op_id is stored at most once; every append of it, re-pushes included, answers the same
        //# seq.
        // Any other failure after which the transaction may have committed is a lost round without
        // a hint: the next round re-reads the counter and, if this one committed, finds the claim.
        match classify("TransactWriteItems", error) {
            Failure::Unknown => Ok(RoundOutcome::Unknown),
            Failure::Refused(error) => Err(error),
        }
    }

    /// Appends one op: rounds until stored, existing, or a typed error.
    async fn append_rounds(
        &self,
        stream: &str,
        op: &NewOp,
        deadline: Instant,
        push: &mut PushContext,
    ) -> Result<Appended, StoreError> {
        validate_append(stream, op)?;
        let claimant = Claimant::of(op);
        let mut state = LoopState {
            counter: push
                .counter_known
                .map(|value| (value, CounterSource::Carried)),
            ..LoopState::default()
        };
        //= specs/relay-append.md#R7
        //# Within a push the seq an op was written at is the next op's expected counter.
        if self.mutated(Mutation::ReadCounterEveryOp) {
            state.counter = None;
        }
        let mut round: u32 = 0;
        loop {
            if Instant::now() >= deadline {
                return Err(StoreError::DeadlineExceeded);
            }
            let planned = self.plan_round(stream, &state, deadline).await?;
            round += 1;
            let outcome = self
                .run_round(stream, op, &claimant, round, planned, deadline)
                .await?;
            let next = state.after(
                outcome,
                planned.expected,
                planned.seq,
                self.tuning.lost_rounds_max,
            );
            let answer = self
                .take_next(stream, &claimant, next, &mut state, planned.seq, deadline)
                .await?;
            if let Some(answer) = answer {
                push.counter_known = answer.counter_after;
                return Ok(answer.appended);
            }
        }
    }

    /// What the next round of an op sends: the counter it expects (read when the loop does not
    /// know it), the seq it tries and the condition on that seq's predecessor.
    async fn plan_round(
        &self,
        stream: &str,
        state: &LoopState,
        deadline: Instant,
    ) -> Result<PlannedRound, StoreError> {
        let (expected, source) = match state.counter {
            Some(known) => known,
            None => (
                self.read_counter_within(stream, deadline).await?,
                CounterSource::Read,
            ),
        };
        let seq = state.seq_for(expected)?;
        let mut predecessor = state.predecessor_for(seq);
        if self.mutated(Mutation::NoPredecessorCheck) {
            predecessor = None;
        }
        Ok(PlannedRound {
            expected,
            source,
            seq,
            predecessor,
        })
    }

    /// Sends one planned round (after the test seams' before-write hook), raced against the
    /// deadline. A claim held by another op_id or payload ends the append with its error.
    async fn run_round(
        &self,
        stream: &str,
        op: &NewOp,
        claimant: &Claimant<'_>,
        round: u32,
        planned: PlannedRound,
        deadline: Instant,
    ) -> Result<RoundOutcome, StoreError> {
        let PlannedRound {
            expected,
            source,
            seq,
            predecessor,
        } = planned;
        tracing::trace!(op_id = %op.op_id, round, seq, expected, ?source, ?predecessor, "append round");
        #[cfg(feature = "test-seams")]
        self.seams
            .before_write(seams::WriteAttempt {
                op_id: op.op_id.clone(),
                round,
                seq,
                expected,
                predecessor,
                counter_from: source,
            })
            .await;
        // Checked again just before sending: a round never starts past the deadline (a hook
        // or a slow counter read may have used it up).
        if Instant::now() >= deadline {
            return Err(StoreError::DeadlineExceeded);
        }
        let outcome = within(
            deadline,
            self.send_round(stream, op, seq, expected, predecessor, claimant),
        )
        .await?;
        match outcome {
            RoundOutcome::ClaimForeign { holder } => Err(StoreError::ClaimForeign {
                op_id: op.op_id.clone(),
                holder,
            }),
            RoundOutcome::PayloadConflict { seq } => Err(StoreError::PayloadConflict {
                op_id: op.op_id.clone(),
                seq,
            }),
            other => Ok(other),
        }
    }

    /// Does what the loop decided after the round that tried `seq`: the op's answer, or `None`
    /// for another round (after its backoff, or the floor step's read of the top occupied seq).
    async fn take_next(
        &self,
        stream: &str,
        claimant: &Claimant<'_>,
        next: Next,
        state: &mut LoopState,
        seq: Seq,
        deadline: Instant,
    ) -> Result<Option<Answered>, StoreError> {
        match next {
            Next::Done(appended) => Ok(Some(Answered {
                appended,
                counter_after: state.counter.map(|(value, _)| value),
            })),
            Next::Again { backoff } => {
                if backoff {
                    let pause =
                        jittered_backoff(&self.tuning, state.lost_in_a_row, &mut rand::rng());
                    tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                }
                Ok(None)
            }
            Next::FloorStep => {
                let top = self.top_occupied_seq(stream, deadline).await?;
                // Op `seq` was seen occupied, so the top is at least `seq`.
                state.floor = Some(top.max(seq));
                Ok(None)
            }
            Next::ReadBackClaim => {
                let claim = self.read_claim(stream, claimant.op_id, deadline).await?;
                let Some(item) = claim else {
                    return Err(StoreError::ClaimVanished {
                        op_id: claimant.op_id.to_owned(),
                    });
                };
                Ok(Some(Answered {
                    appended: claim_answer(&item, claimant)?,
                    counter_after: state.counter_after_claim,
                }))
            }
            Next::Fail(error) => Err(error),
        }
    }

    /// Sends a read until it is answered: an unknown outcome is retried after a jittered backoff,
    /// at most `lost_rounds_max` times in a row ([`StoreError::Unavailable`]) and never past
    /// `deadline` ([`StoreError::DeadlineExceeded`]). A refused read fails at once.
    async fn read_with_retries<T, E, Attempt>(
        &self,
        operation: &'static str,
        deadline: Instant,
        mut attempt: impl FnMut() -> Attempt,
    ) -> Result<T, StoreError>
    where
        Attempt: std::future::Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let mut failed_in_a_row: u32 = 0;
        loop {
            if Instant::now() >= deadline {
                return Err(StoreError::DeadlineExceeded);
            }
            let answer = match tokio::time::timeout_at(deadline, attempt()).await {
                Ok(answer) => answer,
                Err(_elapsed) => return Err(StoreError::DeadlineExceeded),
            };
            match answer {
                Ok(value) => return Ok(value),
                Err(error) => match classify(operation, error) {
                    Failure::Refused(error) => return Err(error),
                    Failure::Unknown => {
                        failed_in_a_row += 1;
                        if failed_in_a_row > self.tuning.lost_rounds_max {
                            return Err(StoreError::Unavailable {
                                attempts: failed_in_a_row,
                            });
                        }
                        let pause =
                            jittered_backoff(&self.tuning, failed_in_a_row, &mut rand::rng());
                        tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                    }
                },
            }
        }
    }

    //= specs/relay-append.md#R1
    //# A puller that stored cursor k has received every op that is or will ever be stored at a seq
    //# <= k.
    async fn pull_pages(
        &self,
        stream: &str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> Result<Vec<StoredOp>, StoreError> {
        let mut ops = Vec::new();
        let mut start_key: Option<HashMap<String, AttributeValue>> = None;
        while ops.len() < limit {
            let page_items = (limit - ops.len()).min(PULL_PAGE_ITEMS_MAX);
            let answer = self
                .read_with_retries("Query (pull)", deadline, || {
                    self.client
                        .query()
                        .table_name(&*self.table)
                        .key_condition_expression("#stream = :stream AND #seq > :after")
                        .expression_attribute_names("#stream", ATTRIBUTE_STREAM_ID)
                        .expression_attribute_names("#seq", ATTRIBUTE_SEQ)
                        .expression_attribute_values(
                            ":stream",
                            AttributeValue::S(stream.to_owned()),
                        )
                        .expression_attribute_values(":after", AttributeValue::N(after.to_string()))
                        .consistent_read(true)
                        .limit(i32::try_from(page_items).unwrap_or(i32::MAX))
                        .set_exclusive_start_key(start_key.clone())
                        .send()
                })
                .await?;
            for item in answer.items() {
                ops.push(stored_op(item)?);
            }
            match answer.last_evaluated_key() {
                Some(last) if !last.is_empty() => start_key = Some(last.clone()),
                _ => break,
            }
        }
        ops.truncate(limit);
        Ok(ops)
    }

    /// Reads the claims of `ops` with strongly consistent BatchGetItem requests of at most
    /// [`BATCH_GET_KEYS_MAX`] keys, retrying `UnprocessedKeys` within `deadline`. Answers the
    /// claim item found per claim key.
    async fn read_claims(
        &self,
        stream: &str,
        ops: &[&NewOp],
        deadline: Instant,
    ) -> Result<HashMap<Seq, HashMap<String, AttributeValue>>, StoreError> {
        // Distinct keys: a request naming one key twice is refused (two op_ids can share a claim
        // slot only by a hash collision, which the claim's op_id then tells apart).
        let mut claim_keys: Vec<Seq> = ops.iter().map(|op| claim_key(&op.op_id)).collect();
        claim_keys.sort_unstable();
        claim_keys.dedup();
        let mut found = HashMap::new();
        for chunk in claim_keys.chunks(BATCH_GET_KEYS_MAX) {
            let mut keys: Vec<HashMap<String, AttributeValue>> =
                chunk.iter().map(|seq| key(stream, *seq)).collect();
            let mut unanswered_in_a_row: u32 = 0;
            while !keys.is_empty() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(keys.clone()))
                    .consistent_read(true)
                    .build()
                    .map_err(|error| {
                        tracing::error!(%error, "building a BatchGetItem request");
                        StoreError::backend("a BatchGetItem request could not be built")
                    })?;
                let answer = self
                    .read_with_retries("BatchGetItem (claims)", deadline, || {
                        self.client
                            .batch_get_item()
                            .request_items(&*self.table, request.clone())
                            .send()
                    })
                    .await?;
                if let Some(items) = answer
                    .responses()
                    .and_then(|tables| tables.get(&*self.table))
                {
                    for item in items {
                        let seq = number(item, ATTRIBUTE_SEQ)
                            .ok_or_else(|| StoreError::backend("a claim item lacks its seq"))?;
                        found.insert(seq, item.clone());
                    }
                }
                let unprocessed: Vec<HashMap<String, AttributeValue>> = answer
                    .unprocessed_keys()
                    .and_then(|tables| tables.get(&*self.table))
                    .map(|rest| rest.keys().to_vec())
                    .unwrap_or_default();
                if unprocessed.is_empty() {
                    break;
                }
                // DynamoDB left keys for load: back off like a lost read, within the deadline.
                unanswered_in_a_row += 1;
                if unanswered_in_a_row > self.tuning.lost_rounds_max {
                    return Err(StoreError::Unavailable {
                        attempts: unanswered_in_a_row,
                    });
                }
                let pause = jittered_backoff(&self.tuning, unanswered_in_a_row, &mut rand::rng());
                tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                if Instant::now() >= deadline {
                    return Err(StoreError::DeadlineExceeded);
                }
                keys = unprocessed;
            }
        }
        Ok(found)
    }

    /// The claims of a whole push, read before its first write (see [`OpStore::check_claims`]):
    /// one batched read, and the first op whose claim answers a refusal refuses the push.
    async fn refuse_conflicting_claims(
        &self,
        stream: &str,
        ops: &[NewOp],
        deadline: Instant,
    ) -> Result<(), StoreError> {
        let all: Vec<&NewOp> = ops.iter().collect();
        let found = self.read_claims(stream, &all, deadline).await?;
        for op in ops {
            if let Some(item) = found.get(&claim_key(&op.op_id)) {
                claim_answer(item, &Claimant::of(op))?;
            }
        }
        Ok(())
    }

    /// A push: checked whole, then op by op; once a round finds an op's own claim, the claims of
    /// the rest are read in batches and every op found is answered without a round.
    //= specs/relay-append.md#R7
    //# A round that finds the op's own claim reads the claims of the push's remaining ops in one
    //# batched strongly consistent read.
    async fn append_push(&self, stream: &str, ops: &[NewOp], deadline: Instant) -> BatchOutcome {
        if let Err(error) = check_push(self, stream, ops, deadline).await {
            return batch_outcome(Vec::new(), Some(error));
        }
        let mut push = PushContext::default();
        let mut appended = Vec::with_capacity(ops.len());
        // Claims found by a batched read, per claim key; a claim never changes once written.
        let mut claims_read: HashMap<Seq, HashMap<String, AttributeValue>> = HashMap::new();
        for (index, op) in ops.iter().enumerate() {
            if Instant::now() >= deadline {
                return batch_outcome(appended, Some(StoreError::DeadlineExceeded));
            }
            if let Some(item) = claims_read.get(&claim_key(&op.op_id)) {
                match claim_answer(item, &Claimant::of(op)) {
                    Ok(answer) => {
                        appended.push(answer);
                        continue;
                    }
                    Err(error) => return batch_outcome(appended, Some(error)),
                }
            }
            let answer = match self.append_rounds(stream, op, deadline, &mut push).await {
                Ok(answer) => answer,
                Err(error) => return batch_outcome(appended, Some(error)),
            };
            appended.push(answer);
            if answer.existing && index + 1 < ops.len() {
                let rest: Vec<&NewOp> = ops[index + 1..]
                    .iter()
                    .filter(|later| !claims_read.contains_key(&claim_key(&later.op_id)))
                    .collect();
                match self.read_claims(stream, &rest, deadline).await {
                    Ok(found) => claims_read.extend(found),
                    Err(error) => return batch_outcome(appended, Some(error)),
                }
            }
        }
        batch_outcome(appended, None)
    }

    #[cfg(feature = "test-seams")]
    fn mutated(&self, mutation: Mutation) -> bool {
        self.seams.mutations.contains(&mutation)
    }

    #[cfg(not(feature = "test-seams"))]
    fn mutated(&self, _mutation: Mutation) -> bool {
        false
    }
}

/// Races `future` against the push deadline.
async fn within<T>(
    deadline: Instant,
    future: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout_at(deadline, future).await {
        Ok(result) => result,
        Err(_elapsed) => Err(StoreError::DeadlineExceeded),
    }
}

/// Deliberate defects a test can switch on, to show that the tests notice them (mutation
/// checks). Without `test-seams` none can be switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Omit the predecessor ConditionCheck from every round.
    NoPredecessorCheck,
    /// `SET next_seq = :seq` without its condition.
    UnconditionalCounterSet,
    /// Forget the carried counter: read it before the first round of every op.
    ReadCounterEveryOp,
}

impl OpStore for DynamoDbStore {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        Box::pin(self.append_rounds(stream, op, deadline, push))
    }

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        Box::pin(async move {
            validate_pull(stream, after)?;
            self.pull_pages(stream, after, limit, deadline).await
        })
    }

    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(self.refuse_conflicting_claims(stream, ops, deadline))
    }

    fn append_batch<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, BatchOutcome> {
        Box::pin(self.append_push(stream, ops, deadline))
    }

    #[cfg(feature = "test-seams")]
    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            validate_append(stream, op)?;
            let items = vec![
                self.claim_put(stream, &Claimant::of(op), seq)?,
                self.op_put(stream, op, seq)?,
            ];
            self.client
                .transact_write_items()
                .set_transact_items(Some(items))
                .send()
                .await
                .map_err(|error| sdk_error("TransactWriteItems (legacy op)", error))?;
            Ok(())
        })
    }
}

#[cfg(feature = "test-seams")]
pub mod seams;

#[cfg(test)]
mod tests;
