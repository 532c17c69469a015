//! The relay's state, role by role: the table (crate::ddb), each writer's round and what it
//! knows of the counter, pullers with their cursors, fold consumers with their watermark, and
//! the record of what happened that only the properties read (answers, anomalies, truncated
//! ops).
//!
//! Invariants: ordered collections only (deterministic actions); a field exists because a step
//! or a property reads it; history no step reads is cleared as soon as it stops telling states
//! apart (see `Writer::retrying_lost_response`).

use super::*;

/// What a writer knows of the counter between rounds (carry-forward).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Counter {
    Unknown,
    Known(Seq),
}

/// The shape of one append round, kept until its response arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Round {
    pub op: OpId,
    /// The counter value the round conditions on (`next_seq = :expected`).
    pub expected: Seq,
    pub seq: Seq,
    /// Whether the round's transaction holds a predecessor check, and which way.
    pub predecessor: Option<Condition>,
    /// A floor step: the seq sits above occupied seqs, not at expected + 1.
    pub floor_step: bool,
}

/// Why an append ended without a seq: each is a typed error the caller can handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AppendError {
    /// Lost rounds in a row over the budget.
    ContentionExhausted,
    /// The next seq would pass SEQ_MAX.
    SeqOverflow,
    /// The claim read-back found a claim of another op id or none at all.
    ClaimUnreadable,
    /// ADD-era: the allocation or the write was refused (conflict, seq taken); the old build
    /// failed the push.
    AddEraWriteRefused,
    /// The push deadline passed (the relay answers 503 with Retry-After; the client re-pushes).
    DeadlineExceeded,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Between rounds: the next step reads the counter (if unknown) or sends a round.
    Ready,
    /// ADD-era: holds the seq UpdateItem ADD answered, about to send claim and op.
    Allocated {
        seq: Seq,
    },
    /// The round's transaction was processed; its response is in flight.
    Sent {
        round: Round,
        outcome: TransactOutcome,
    },
    /// The claim already existed: the writer reads it back (GetItem) to answer its seq.
    ReadingClaim {
        op: OpId,
    },
    /// A round found the op's own claim: one batched read of the claims of the push's remaining
    /// ops answers every one already stored (the re-push fast path).
    ReadingClaims,
    /// The op's seq was taken while the counter held: one reverse Query finds the top.
    QueryingTop,
    Done,
    Failed(AppendError),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Writer {
    /// Index into the writer's push of the op being appended.
    pub next_op: u8,
    pub phase: Phase,
    pub counter: Counter,
    /// Occupied seqs were found above the counter: the next round lands on top + 1.
    pub floor: Option<Seq>,
    /// The seq whose predecessor is a proven legacy gap: its next round checks not_exists.
    pub flip: Option<Seq>,
    pub lost_in_a_row: u8,
    /// Push indices above `next_op` the re-push fast path answered (bit i: op i of the push).
    pub answered_ahead: u8,
    /// Rounds this push has sent; counted only when the push has a deadline (R6).
    pub push_rounds: u8,
    /// The push paid an extra round while uncontended: a wrong counter guess or a legacy gap
    /// (R7). Cleared once the push is contended, so contended pushes share states.
    pub push_paid_extra: bool,
    /// Something but a first-try commit, one wrong counter guess in a row or a legacy gap
    /// happened to this push: R7's cost bound no longer applies.
    pub push_contended: bool,
    /// The response of this op's round was lost and the op is being retried in place; cleared
    /// when the op is answered or the push ends. History, read by no step and no property: it
    /// lets the covering set tell a retry after a loss from a re-push of an op another writer
    /// stored (`coverage_context`), and costs states only after a loss.
    pub retrying_lost_response: bool,
}

impl Writer {
    pub(super) fn new() -> Writer {
        Writer {
            next_op: 0,
            phase: Phase::Ready,
            counter: Counter::Unknown,
            floor: None,
            flip: None,
            lost_in_a_row: 0,
            answered_ahead: 0,
            push_rounds: 0,
            push_paid_extra: false,
            push_contended: false,
            retrying_lost_response: false,
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Failed(_))
    }

    pub(super) fn mark_contended(&mut self) {
        self.push_contended = true;
        self.push_paid_extra = false;
    }
}

/// Protocol-level defects recorded at the step that commits them (the table records its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WriterAnomalies {
    /// An uncontended push cost more than one counter read, or more transactions than one per
    /// op plus one per wrong counter guess and per legacy gap crossed.
    pub carry_forward_broken: bool,
    /// A predecessor check failed twice in a row for one seq: the legacy gap was paid twice.
    pub gap_paid_twice: bool,
    /// A push sent a round past its deadline.
    pub deadline_overrun: bool,
    /// Truncation deleted the op the counter points at.
    pub counter_op_truncated: bool,
    /// A predecessor check failed over a seq that had held an op: a stored op was taken for a
    /// legacy gap.
    pub stored_op_taken_for_gap: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Puller {
    pub cursor: Seq,
    pub received: SeqSet,
    pub pulls_left: u8,
}

/// A fold consumer of the stream feed: one record per op item written, delivered in order per
/// item only, so records of different ops arrive in any order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Folder {
    pub folded: SeqSet,
    /// Every op at or below it is folded (R8).
    pub watermark: Seq,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelayState {
    pub table: Table,
    pub writers: Vec<Writer>,
    pub pullers: Vec<Puller>,
    pub folders: Vec<Folder>,
    /// Every seq answered to a client, per op id (R3).
    pub answers: SortedMap<OpId, SeqSet>,
    pub lost_responses_left: u8,
    /// Seqs absent at the start below the counter: burned by an ADD-era relay (R5 exempts them).
    pub legacy_burned: SeqSet,
    /// Ops truncation deleted, by seq: still stored as far as R1, R3, R5 and R8 are concerned.
    pub truncated: SortedMap<Seq, OpId>,
    pub truncations_left: u8,
    pub anomalies: WriterAnomalies,
}

impl RelayState {
    /// Every op a transaction has stored: visible, pending, or deleted by truncation since.
    pub fn stored_ops(&self) -> SortedMap<Seq, OpId> {
        let mut stored = self.table.committed_ops();
        stored.extend(self.truncated.iter().map(|(seq, op)| (*seq, *op)));
        stored
    }
}
