//! The relay append protocol (specs/relay-append.md): writers that take a stream's
//! seq inside the write transaction, pullers that page with a limit and store the last seq of a
//! page as their cursor, a fold consumer reading a stream feed ordered per item only, and a
//! truncator deleting old ops, all over the DynamoDB semantics of [`crate::ddb`], visibility
//! window included.
//!
//! Granularity: one step per request the real code sends (counter Query, TransactWriteItems,
//! claim GetItem, BatchGetItem of claims, reverse Query, UpdateItem ADD, puller Query, DeleteItem),
//! one step per pending item becoming visible, one step per transaction response delivered or
//! lost, one step per stream record a fold consumer takes. A read and its answer are one step
//! (nothing observes the gap between them); a transaction and its response are two, because a
//! response can be lost after commit. A conformance replay orders real requests by these steps.
//!
//! Lost responses (specs/relay-append.md, "Lost responses"): a committed round whose response
//! is lost is a lost round without a hint; the writer retries the same op in place, re-reading
//! the counter, and the retry answers from the claim.
//!
//! Reductions (specs/relay-append.md, "Reductions"), on unless [`RelayModel::without_reductions`]:
//! a response step that cannot be lost runs right after its send step (no other step may run in
//! between), and a claim item no writer can touch again is applied at commit. Both keep the
//! primitive actions, so paths and exported traces are the same vocabulary either way.
//!
//! Variants:
//! - `add-era`: UpdateItem ADD allocates the seq, then a transaction of claim and op.
//! - `counter-only`: the counter condition in the transaction, no predecessor check.
//! - `fixed`: the whole design (predecessor check and its flip, ALL_OLD hint, floor step, carry,
//!   deadline, re-push fast path, gap-aware fold watermark).
//! - `mixed`: fixed writers beside ADD-era writers.
//!
//! Invariants: actions are deterministic (ordered collections only); state holds only what the
//! protocol and the properties need; every property carries its requirement ID.

use crate::check::{BoundSpec, Bounds, Kind, ModelSpec, PropertyDef, SpecError, Verdict};
use crate::ddb::{
    op_name, Condition, Key, OpId, Operation, Reason, Seq, Table, TransactItem, TransactOutcome,
    Value, SEQ_MAX,
};
use serde::{Deserialize, Serialize};
use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet};

/// Which algorithm a writer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Build {
    /// The seed's design: counter condition, claim, predecessor check, op, in one transaction.
    New,
    /// The legacy allocation: UpdateItem ADD, then a transaction of claim and op.
    AddEra,
}

/// A deliberate defect, to show that a property can fail (the seed's mutation checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mutation {
    /// The predecessor ConditionCheck is left out (what `counter-only` is).
    NoPredecessorCheck,
    /// The counter update carries no condition.
    UnconditionalCounterSet,
    /// A failed predecessor check is retried as is, never flipped.
    NoFlip,
    /// No claim item: an op id is not deduplicated.
    NoClaim,
    /// The op put carries no attribute_not_exists.
    UnconditionalOpPut,
    /// The counter is read before every op instead of carried forward.
    ReadCounterEveryOp,
    /// A lost round's ALL_OLD counter image is ignored: the next round re-reads the counter.
    IgnoreHint,
    /// The push deadline is never checked: a push keeps sending rounds past it.
    NoPushDeadline,
    /// The fold watermark trusts stream order across items: it moves to the highest seq folded.
    TrustingWatermark,
    /// Truncation may delete the op the counter points at.
    TruncateCounterOp,
    /// A lost response re-pushes the whole push (the model before the lost-response decision).
    RepushAfterLostResponse,
    /// The reverse Query's top is not kept as the floor: the next round lands on the same
    /// occupied seq again (the re-query livelock, R6).
    TopQueryForgetsFloor,
    /// An op answered from its claim is sent again instead of the push moving on: the push
    /// re-pushes a stored op forever unless its deadline ends it (R6).
    ClaimAnswerSentAgain,
}

/// Op ids of legacy ops (stored before any writer of the model ran) start here, above every
/// writer's op ids, so the two never collide.
pub const LEGACY_OP_BASE: OpId = 200;

/// The initial table: empty, or legacy data an ADD-era relay left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Legacy {
    Empty,
    /// Counter at 2, op 1 present, op 2 absent: seq 2 was burned by an ADD-era relay.
    Gap,
    /// Counter at 1 with ops 1, 2 and 3 present: a run of occupied seqs above the counter.
    RunAboveCounter,
}

/// The model's bounds, resolved from the `oncecheck` bound table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelayBounds {
    pub new_writers: u8,
    pub add_era_writers: u8,
    pub ops_per_writer: u8,
    /// The last writer's push starts with this many of the first writer's ops (a client
    /// re-push of ops another relay stored).
    pub repush_ops: u8,
    /// Responses that may be lost after commit in one run; each is a lost round of its writer.
    pub lost_responses_max: u8,
    pub pullers: u8,
    pub pulls_per_puller: u8,
    pub page_limit: u8,
    pub legacy: Vec<Legacy>,
    /// The contention budget: lost rounds in a row before an append gives up.
    pub lost_rounds_max: u8,
    /// false: a committed transaction becomes visible at once (no visibility window).
    pub window: bool,
    /// The push deadline, abstractly: the rounds (transactions) a push may send; 0: none.
    pub push_rounds_max: u8,
    /// Fold consumers reading the stream feed (0 or 1).
    pub stream_folders: u8,
    /// Old ops the truncator may delete in one run.
    pub truncations_max: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Variant {
    AddEra,
    CounterOnly,
    Fixed,
    Mixed,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::AddEra => "add-era",
            Variant::CounterOnly => "counter-only",
            Variant::Fixed => "fixed",
            Variant::Mixed => "mixed",
        }
    }
}

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
    fn new() -> Writer {
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

    fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Failed(_))
    }

    fn mark_contended(&mut self) {
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
    pub received: BTreeSet<Seq>,
    pub pulls_left: u8,
}

/// A fold consumer of the stream feed: one record per op item written, delivered in order per
/// item only, so records of different ops arrive in any order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Folder {
    pub folded: BTreeSet<Seq>,
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
    pub answers: BTreeMap<OpId, BTreeSet<Seq>>,
    pub lost_responses_left: u8,
    /// Seqs absent at the start below the counter: burned by an ADD-era relay (R5 exempts them).
    pub legacy_burned: BTreeSet<Seq>,
    /// Ops truncation deleted, by seq: still stored as far as R1, R3, R5 and R8 are concerned.
    pub truncated: BTreeMap<Seq, OpId>,
    pub truncations_left: u8,
    pub anomalies: WriterAnomalies,
}

impl RelayState {
    /// Every op a transaction has stored: visible, pending, or deleted by truncation since.
    pub fn stored_ops(&self) -> BTreeMap<Seq, OpId> {
        let mut stored = self.table.committed_ops();
        stored.extend(self.truncated.iter().map(|(seq, op)| (*seq, *op)));
        stored
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Strongly consistent Query of seq = 0: the counter (the first op of a push, or after a
    /// lost round without a usable hint). A push's first read is preceded by its claim check
    /// when the push has two ops or more ([`RelayModel::checks_claims_first`]).
    WriterReadsCounter {
        writer: u8,
    },
    /// ADD-era: UpdateItem ADD next_seq 1.
    WriterAddsToCounter {
        writer: u8,
    },
    /// TransactWriteItems of the current round, processed by the server.
    WriterSendsRound {
        writer: u8,
    },
    WriterReceivesResponse {
        writer: u8,
    },
    /// The round committed but its response never reaches the writer (unknown outcome).
    ResponseLost {
        writer: u8,
    },
    /// GetItem of the op's claim after the claim condition failed.
    WriterReadsClaim {
        writer: u8,
    },
    /// BatchGetItem (strongly consistent) of the claims of the push's remaining ops.
    WriterReadsClaims {
        writer: u8,
    },
    /// Query seq > 0, ScanIndexForward = false, Limit 1.
    WriterQueriesTop {
        writer: u8,
    },
    /// The push's deadline passed before its next round: the push ends with the typed error.
    PushDeadlinePasses {
        writer: u8,
    },
    /// One pending item of a committed transaction becomes visible.
    ItemApplied {
        key: Key,
    },
    /// Query seq > cursor, Limit page_limit; the puller stores the page's last seq as its cursor.
    PullerQueries {
        puller: u8,
    },
    /// The fold consumer takes the stream record of the op at `seq`.
    FolderReceivesRecord {
        seq: Seq,
    },
    /// DeleteItem of the oldest op (truncation).
    TruncatorDeletes {
        seq: Seq,
    },
}

#[derive(Clone, Debug)]
pub struct RelayModel {
    pub variant: Variant,
    pub bounds: RelayBounds,
    pub mutations: BTreeSet<Mutation>,
    /// Per writer: its build and its push (op ids in order).
    pub writers: Vec<(Build, Vec<OpId>)>,
    /// The sound reductions of specs/relay-append.md ("Reductions"); off only to compare.
    pub reductions: bool,
    resolved: Bounds,
    /// The permutations of interchangeable writers (specs/relay-append.md, "Symmetry").
    symmetry: Vec<scale::WriterPermutation>,
}

pub const BOUNDS: &[BoundSpec] = &[
    BoundSpec {
        key: "new_writers",
        default: 2,
        min: 0,
        max: 4,
        help: "new-build writers",
    },
    BoundSpec {
        key: "add_era_writers",
        default: 1,
        min: 0,
        max: 3,
        help: "ADD-era writers (add-era: all writers; mixed: beside the new ones)",
    },
    BoundSpec {
        key: "ops_per_writer",
        default: 2,
        min: 1,
        max: 4,
        help: "ops in each writer's push",
    },
    BoundSpec {
        key: "repush_ops",
        default: 1,
        min: 0,
        max: 4,
        help: "the last writer's push starts with this many of the first writer's ops (a re-push)",
    },
    BoundSpec {
        key: "lost_responses_max",
        default: 0,
        min: 0,
        max: 3,
        help: "responses lost after commit in one run (each is a lost round, retried in place)",
    },
    BoundSpec {
        key: "pullers",
        default: 1,
        min: 0,
        max: 3,
        help: "pullers",
    },
    BoundSpec {
        key: "pulls_per_puller",
        default: 3,
        min: 0,
        max: 6,
        help: "Query pages per puller",
    },
    BoundSpec {
        key: "page_limit",
        default: 2,
        min: 1,
        max: 8,
        help: "Limit of a puller's Query",
    },
    BoundSpec {
        key: "legacy",
        default: 1,
        min: 0,
        max: 3,
        help: "initial table: 0 empty, 1 legacy gap, 2 run above the counter, 3 all three",
    },
    BoundSpec {
        key: "lost_rounds_max",
        default: 2,
        min: 1,
        max: 6,
        help: "contention budget: lost rounds in a row",
    },
    BoundSpec {
        key: "window",
        default: 1,
        min: 0,
        max: 1,
        help: "1: committed items become visible one at a time (the visibility window)",
    },
    BoundSpec {
        key: "push_rounds_max",
        default: 0,
        min: 0,
        max: 12,
        help: "the push deadline as rounds a push may send (0: no deadline)",
    },
    BoundSpec {
        key: "stream_folders",
        default: 0,
        min: 0,
        max: 1,
        help: "fold consumers of the stream feed (order per item only)",
    },
    BoundSpec {
        key: "truncations_max",
        default: 0,
        min: 0,
        max: 3,
        help: "old ops the truncator may delete",
    },
];

/// CI bounds that differ per variant: the buggy variants need fewer actors to show their bug.
pub const VARIANT_DEFAULTS: &[(&str, &str, u32)] = &[
    // The seed's reproduction needs no visibility window: ADD hands out seqs before the writes.
    ("add-era", "new_writers", 0),
    ("add-era", "add_era_writers", 2),
    ("add-era", "legacy", 0),
    ("add-era", "window", 0),
    ("add-era", "stream_folders", 1),
    // The stream fold where visibility is out of order: the gap-aware watermark holds R8 where
    // the pullers' cursors lose R1.
    ("counter-only", "add_era_writers", 0),
    ("counter-only", "legacy", 0),
    ("counter-only", "stream_folders", 1),
    // The whole design from every initial table: empty, legacy gap, run above the counter, with
    // the push deadline and one lost response (the unknown outcome every write path must
    // survive). The lost response multiplies the state space by 8.9 (59,658 -> 532,650
    // states); the stream fold would multiply it by 2.6 more and runs in its own tests.
    ("fixed", "add_era_writers", 0),
    ("fixed", "legacy", 3),
    ("fixed", "push_rounds_max", 4),
    ("fixed", "lost_responses_max", 1),
    ("mixed", "new_writers", 1),
    ("mixed", "pulls_per_puller", 1),
    ("mixed", "legacy", 0),
    ("mixed", "lost_responses_max", 1),
];

/// The bound set `oncecheck check` runs beside `fixed`'s CI bounds: the stream fold and the
/// truncator, which the CI bounds leave out for time (the fold alone multiplies the state space
/// by 2.6), so that R8 and R9 are checked on reached states. One puller page, no push deadline
/// and no lost response keep it to 98,111 states; every initial table stays.
pub const BOUND_SETS: &[crate::check::BoundSet] = &[crate::check::BoundSet {
    name: "reach",
    variant: "fixed",
    overrides: &[
        ("stream_folders", 1),
        ("truncations_max", 1),
        ("pulls_per_puller", 1),
        ("push_rounds_max", 0),
        ("lost_responses_max", 0),
    ],
    reaches: &["R8", "R9"],
}];

impl RelayModel {
    pub fn new(variant: Variant, bounds: RelayBounds) -> RelayModel {
        let mut mutations = BTreeSet::new();
        if variant == Variant::CounterOnly {
            mutations.insert(Mutation::NoPredecessorCheck);
        }
        let (new_writers, add_era_writers) = match variant {
            Variant::AddEra => (0, bounds.add_era_writers),
            Variant::CounterOnly | Variant::Fixed => (bounds.new_writers, 0),
            Variant::Mixed => (bounds.new_writers, bounds.add_era_writers),
        };
        let builds: Vec<Build> = std::iter::repeat_n(Build::New, new_writers as usize)
            .chain(std::iter::repeat_n(Build::AddEra, add_era_writers as usize))
            .collect();
        let mut writers: Vec<(Build, Vec<OpId>)> = builds
            .iter()
            .enumerate()
            .map(|(index, build)| {
                let first = index as u8 * bounds.ops_per_writer;
                (*build, (first..first + bounds.ops_per_writer).collect())
            })
            .collect();
        if writers.len() >= 2 {
            let last = writers.len() - 1;
            for index in 0..bounds.repush_ops.min(bounds.ops_per_writer) as usize {
                writers[last].1[index] = writers[0].1[index];
            }
        }
        let mut resolved = BTreeMap::new();
        for (key, value) in [
            ("new_writers", new_writers as u32),
            ("add_era_writers", add_era_writers as u32),
            ("ops_per_writer", bounds.ops_per_writer as u32),
            ("repush_ops", bounds.repush_ops as u32),
            ("lost_responses_max", bounds.lost_responses_max as u32),
            ("pullers", bounds.pullers as u32),
            ("pulls_per_puller", bounds.pulls_per_puller as u32),
            ("page_limit", bounds.page_limit as u32),
            ("lost_rounds_max", bounds.lost_rounds_max as u32),
            ("window", bounds.window as u32),
            ("push_rounds_max", bounds.push_rounds_max as u32),
            ("stream_folders", bounds.stream_folders as u32),
            ("truncations_max", bounds.truncations_max as u32),
        ] {
            resolved.insert(key.to_string(), value);
        }
        let legacy_code = match bounds.legacy.as_slice() {
            [Legacy::Empty] => 0,
            [Legacy::Gap] => 1,
            [Legacy::RunAboveCounter] => 2,
            _ => 3,
        };
        resolved.insert("legacy".to_string(), legacy_code);
        RelayModel {
            variant,
            bounds,
            mutations,
            symmetry: scale::writer_symmetries(&writers),
            writers,
            reductions: true,
            resolved: Bounds(resolved),
        }
    }

    /// The same model with a deliberate defect (tests only show properties can fail).
    pub fn with_mutation(mut self, mutation: Mutation) -> RelayModel {
        self.mutations.insert(mutation);
        self
    }

    /// The same model without the reductions: every interleaving of the primitive steps.
    pub fn without_reductions(mut self) -> RelayModel {
        self.reductions = false;
        self
    }

    fn has(&self, mutation: Mutation) -> bool {
        self.mutations.contains(&mutation)
    }

    pub fn build_of(&self, writer: usize) -> Build {
        self.writers[writer].0
    }

    fn push_of(&self, writer: usize) -> &[OpId] {
        &self.writers[writer].1
    }

    /// Whether `writer`'s counter read in `state` is its push's first, which a push of two ops or
    /// more precedes with the claim check: one BatchGetItem of the claims of all its ops, which
    /// refuses the push when an op_id is stored with another payload. The model has one payload
    /// per op id, so the check never refuses here and its answer changes no state; its place
    /// among other actors' steps is invisible to every property, so it is part of this step
    /// (the replay forwards it right before the counter read). Every later counter read of a
    /// push at its first op follows a lost round.
    //= specs/relay-append.md#R3
    //# A push of two ops or more reads the claims of all its ops before its first write; an op_id
    //# stored with another payload refuses the whole push, and nothing is written.
    pub fn checks_claims_first(&self, state: &RelayState, writer: usize) -> bool {
        let current = &state.writers[writer];
        self.build_of(writer) == Build::New
            && self.push_of(writer).len() > 1
            && current.phase == Phase::Ready
            && current.counter == Counter::Unknown
            && current.next_op == 0
            && current.lost_in_a_row == 0
    }

    fn initial_table(legacy: Legacy) -> (Table, BTreeSet<Seq>) {
        let mut table = Table::default();
        let mut burned = BTreeSet::new();
        let legacy_op = |seq: Seq| LEGACY_OP_BASE + seq;
        match legacy {
            Legacy::Empty => {}
            Legacy::Gap => {
                table
                    .applied
                    .insert(Key::Counter, Value::Counter { next_seq: 2 });
                table.applied.insert(
                    Key::Op(1),
                    Value::Op {
                        op_id: legacy_op(1),
                    },
                );
                table
                    .applied
                    .insert(Key::Claim(legacy_op(1)), Value::Claim { seq: 1 });
                burned.insert(2);
            }
            Legacy::RunAboveCounter => {
                table
                    .applied
                    .insert(Key::Counter, Value::Counter { next_seq: 1 });
                for seq in 1..=3 {
                    table.applied.insert(
                        Key::Op(seq),
                        Value::Op {
                            op_id: legacy_op(seq),
                        },
                    );
                    table
                        .applied
                        .insert(Key::Claim(legacy_op(seq)), Value::Claim { seq });
                }
            }
        }
        (table, burned)
    }

    /// The push deadline has passed for a writer about to read the counter or send a round.
    fn deadline_passed(&self, writer: &Writer) -> bool {
        self.bounds.push_rounds_max > 0
            && writer.push_rounds >= self.bounds.push_rounds_max
            && !self.has(Mutation::NoPushDeadline)
    }

    /// Whether some writer other than `except` may still send a request touching `op`'s claim:
    /// the op is in the unanswered rest of its push.
    fn claim_touchable_by_others(&self, state: &RelayState, except: usize, op: OpId) -> bool {
        state.writers.iter().enumerate().any(|(index, writer)| {
            index != except
                && !writer.is_finished()
                && self
                    .push_of(index)
                    .iter()
                    .enumerate()
                    .any(|(position, candidate)| {
                        *candidate == op
                            && position >= writer.next_op as usize
                            && writer.answered_ahead & (1 << position) == 0
                    })
        })
    }
    /// The transaction a new-build writer sends for its next round.
    fn new_build_round(
        &self,
        writer: &Writer,
        op: OpId,
    ) -> Result<(Round, Vec<TransactItem>), AppendError> {
        let Counter::Known(expected) = writer.counter else {
            unreachable!("a round is only sent with a known counter");
        };
        // The floor (top occupied seq) outlives lost rounds of the same op, as in the store: seqs
        // at or below it are occupied whatever the counter says.
        let base = expected.max(writer.floor.unwrap_or(0));
        //= specs/relay-append.md#R4
        //# Checked arithmetic: a counter at the top of the seq range is a loud error, never a wrap.
        let seq = base
            .checked_add(1)
            .filter(|seq| *seq <= SEQ_MAX)
            .ok_or(AppendError::SeqOverflow)?;
        let mut items = Vec::with_capacity(4);
        //= specs/relay-append.md#R4
        //# The counter update is conditional on the counter value the round knows.
        items.push(TransactItem {
            key: Key::Counter,
            condition: if self.has(Mutation::UnconditionalCounterSet) {
                Condition::Always
            } else {
                Condition::NextSeqEquals(expected)
            },
            operation: Operation::Write(Value::Counter { next_seq: seq }),
            return_old_on_failure: true,
        });
        if !self.has(Mutation::NoClaim) {
            //= specs/relay-append.md#R3
            //# The claim put for the op id (attribute_not_exists) is in the same transaction.
            items.push(TransactItem {
                key: Key::Claim(op),
                condition: Condition::AttributeNotExists,
                operation: Operation::Write(Value::Claim { seq }),
                return_old_on_failure: true,
            });
        }
        let mut predecessor = None;
        if seq > 1 && !self.has(Mutation::NoPredecessorCheck) {
            //= specs/relay-append.md#R1
            //# For s > 1 the transaction checks the op at s - 1: attribute_exists, or for the one
            //# seq whose predecessor is a proven legacy gap, attribute_not_exists.
            let condition = if writer.flip == Some(seq) && !self.has(Mutation::NoFlip) {
                Condition::AttributeNotExists
            } else {
                Condition::AttributeExists
            };
            predecessor = Some(condition);
            items.push(TransactItem {
                key: Key::Op(seq - 1),
                condition,
                operation: Operation::ConditionCheck,
                return_old_on_failure: false,
            });
        }
        //= specs/relay-append.md#R2
        //# The op put at s carries attribute_not_exists: no op is overwritten.
        items.push(TransactItem {
            key: Key::Op(seq),
            condition: if self.has(Mutation::UnconditionalOpPut) {
                Condition::Always
            } else {
                Condition::AttributeNotExists
            },
            operation: Operation::Write(Value::Op { op_id: op }),
            return_old_on_failure: false,
        });
        let round = Round {
            op,
            expected,
            seq,
            predecessor,
            floor_step: writer.floor.is_some_and(|floor| floor > expected),
        };
        Ok((round, items))
    }

    /// The transaction an ADD-era writer sends once ADD answered `seq`.
    fn add_era_round(op: OpId, seq: Seq) -> (Round, Vec<TransactItem>) {
        let items = vec![
            TransactItem {
                key: Key::Claim(op),
                condition: Condition::AttributeNotExists,
                operation: Operation::Write(Value::Claim { seq }),
                return_old_on_failure: true,
            },
            TransactItem {
                key: Key::Op(seq),
                condition: Condition::AttributeNotExists,
                operation: Operation::Write(Value::Op { op_id: op }),
                return_old_on_failure: false,
            },
        ];
        (
            Round {
                op,
                expected: seq - 1,
                seq,
                predecessor: None,
                floor_step: false,
            },
            items,
        )
    }

    /// Position of each kind of item in a round's request, for reading cancellation reasons.
    fn layout(&self, build: Build, round: &Round) -> Layout {
        match build {
            Build::AddEra => Layout {
                counter: None,
                claim: Some(0),
                predecessor: None,
                op: 1,
            },
            Build::New => {
                let claim = (!self.has(Mutation::NoClaim)).then_some(1);
                let after_claim = 1 + claim.is_some() as usize;
                let predecessor = round.predecessor.map(|_| after_claim);
                let op = after_claim + predecessor.is_some() as usize;
                Layout {
                    counter: Some(0),
                    claim,
                    predecessor,
                    op,
                }
            }
        }
    }

    fn answer(state: &mut RelayState, op: OpId, seq: Seq) {
        state.answers.entry(op).or_default().insert(seq);
    }

    /// Moves `next_op` past the op just answered and past ops the fast path answered ahead;
    /// answers whether the push is finished.
    fn advance(&self, writer_index: usize, writer: &mut Writer) -> bool {
        let len = self.push_of(writer_index).len();
        writer.next_op += 1;
        while (writer.next_op as usize) < len && writer.answered_ahead & (1 << writer.next_op) != 0
        {
            writer.next_op += 1;
        }
        // Bits below `next_op` say nothing any more: clear them so equal futures share a state.
        writer.answered_ahead &= !((1u8 << writer.next_op).wrapping_sub(1));
        writer.next_op as usize == len
    }

    /// The writer's op was answered (`existing`: from its claim): move to the next op, read the
    /// claims of the rest of the push (the fast path), or finish the push.
    fn op_done(
        &self,
        writer_index: usize,
        writer: &mut Writer,
        anomalies: &mut WriterAnomalies,
        existing: bool,
    ) {
        writer.floor = None;
        writer.flip = None;
        writer.lost_in_a_row = 0;
        if self.advance(writer_index, writer) {
            self.push_done(writer_index, writer, anomalies);
        } else if existing && self.build_of(writer_index) == Build::New {
            //= specs/relay-append.md#R7
            //# A round that finds the op's own claim reads the claims of the push's remaining ops in one batched strongly consistent read.
            writer.phase = Phase::ReadingClaims;
        } else {
            writer.phase = Phase::Ready;
        }
    }

    fn push_done(
        &self,
        _writer_index: usize,
        writer: &mut Writer,
        _anomalies: &mut WriterAnomalies,
    ) {
        writer.phase = Phase::Done;
    }

    /// A round that ended without progress; over the budget, the append gives up. A hint is
    /// used only after the first lost round in a row: after a backoff it is stale, and the next
    /// round reads the counter instead. The first lost round in a row that carries a hint is a
    /// wrong counter guess, the one extra round an otherwise uncontended push may pay for it.
    fn lose_round(&self, writer: &mut Writer, hint: Option<Seq>) {
        writer.flip = None;
        //= specs/relay-append.md#R6
        //# The contention budget counts lost rounds in a row; over it the append ends with a typed error.
        writer.lost_in_a_row += 1;
        let wrong_guess = hint.is_some() && writer.lost_in_a_row == 1;
        if wrong_guess {
            if !writer.push_contended {
                writer.push_paid_extra = true;
            }
        } else {
            writer.mark_contended();
        }
        writer.counter = match hint {
            Some(value) if wrong_guess && !self.has(Mutation::IgnoreHint) => Counter::Known(value),
            _ => Counter::Unknown,
        };
        writer.phase = if writer.lost_in_a_row > self.bounds.lost_rounds_max {
            Phase::Failed(AppendError::ContentionExhausted)
        } else {
            Phase::Ready
        };
    }

    /// What a new-build writer does with a cancelled round: the store's ranking of reasons
    /// (claim, counter, conflict, seq taken, predecessor). Answers the op's seq when the claim's
    /// ALL_OLD image names it. `predecessor_was_stored`: op `seq - 1` was stored once and deleted
    /// by truncation since.
    fn settle_new_build(
        &self,
        writer: &mut Writer,
        round: Round,
        reasons: &[Reason],
        predecessor_was_stored: bool,
        anomalies: &mut WriterAnomalies,
    ) -> Option<Seq> {
        let layout = self.layout(Build::New, &round);
        let reason_at =
            |index: Option<usize>| index.map(|index| reasons[index]).unwrap_or(Reason::None);
        if let Reason::ConditionalCheckFailed { old } = reason_at(layout.claim) {
            //= specs/relay-append.md#R3
            //# Every append of an op id answers the seq it is stored at.
            // The claim outranks every other reason: the op id is stored already. What the next
            // op of the push may assume about the counter follows from the counter's reason.
            writer.mark_contended();
            writer.counter = match reason_at(layout.counter) {
                Reason::None => Counter::Known(round.expected),
                Reason::ConditionalCheckFailed {
                    old: Some(Value::Counter { next_seq }),
                } => Counter::Known(next_seq),
                Reason::ConditionalCheckFailed { .. } => Counter::Known(0),
                Reason::TransactionConflict => Counter::Unknown,
            };
            return match old {
                Some(Value::Claim { seq }) => Some(seq),
                // No image: read the claim back.
                _ => {
                    writer.phase = Phase::ReadingClaim { op: round.op };
                    None
                }
            };
        }
        if let Reason::ConditionalCheckFailed { old } = reason_at(layout.counter) {
            //= specs/relay-append.md#R7
            //# A lost round hands back the real counter through the ALL_OLD image: no re-read.
            let hint = match old {
                Some(Value::Counter { next_seq }) => next_seq,
                _ => 0,
            };
            self.lose_round(writer, Some(hint));
            return None;
        }
        if reasons.contains(&Reason::TransactionConflict) {
            // Another transaction holds one of our items: no hint, re-read the counter.
            self.lose_round(writer, None);
            return None;
        }
        // The counter held: it stands at `expected` and stays known.
        writer.lost_in_a_row = 0;
        writer.phase = Phase::Ready;
        if let Reason::ConditionalCheckFailed { .. } = reasons[layout.op] {
            // Seq taken while the counter held: occupied seqs above the counter.
            writer.mark_contended();
            writer.flip = None;
            writer.phase = Phase::QueryingTop;
            return None;
        }
        if let Reason::ConditionalCheckFailed { .. } = reason_at(layout.predecessor) {
            if round.predecessor == Some(Condition::AttributeNotExists) {
                // The gap filled meanwhile (an ADD-era writer stored it): the next round goes
                // back to attribute_exists.
                writer.mark_contended();
                writer.flip = None;
                return None;
            }
            if writer.flip == Some(round.seq) {
                anomalies.gap_paid_twice = true;
            }
            if predecessor_was_stored {
                anomalies.stored_op_taken_for_gap = true;
            }
            if !writer.push_contended {
                writer.push_paid_extra = true;
            }
            //= specs/relay-append.md#R6
            //# A failed attribute_exists while the counter held proves a legacy gap: the next
            //# round, for that seq only, checks attribute_not_exists instead.
            writer.flip = Some(round.seq);
            return None;
        }
        unreachable!("a cancelled round has a failing reason: {reasons:?}");
    }

    /// The legacy build: a claim that exists is read back; any other cancellation fails the
    /// push (the old build answered it with a 500), burning the allocated seq.
    fn settle_add_era(&self, writer: &mut Writer, round: Round, reasons: &[Reason]) {
        writer.mark_contended();
        writer.phase = match reasons[0] {
            Reason::ConditionalCheckFailed { .. } => Phase::ReadingClaim { op: round.op },
            _ => Phase::Failed(AppendError::AddEraWriteRefused),
        };
    }

    /// The gap-aware fold watermark: it advances only over a dense prefix of folded (or
    /// known-burned) seqs. The `TrustingWatermark` mutation moves it to the highest seq folded.
    fn advance_watermark(&self, folder: &mut Folder, burned: &BTreeSet<Seq>) {
        if self.has(Mutation::TrustingWatermark) {
            folder.watermark = folder
                .folded
                .iter()
                .next_back()
                .copied()
                .unwrap_or(0)
                .max(folder.watermark);
            return;
        }
        //= specs/relay-append.md#R8
        //# The fold watermark never passes an op that was not folded.
        while let Some(next) = folder.watermark.checked_add(1) {
            if folder.folded.contains(&next) || burned.contains(&next) {
                folder.watermark = next;
            } else {
                break;
            }
        }
    }

    /// The model's actions at `state`; `reduced`: with the sound reductions of
    /// specs/relay-append.md ("Reductions"), which prune interleavings.
    fn actions_of(&self, state: &RelayState, actions: &mut Vec<Action>, reduced: bool) {
        if reduced {
            // Reduction (a): a response that cannot be lost is taken before anything else
            // happens (specs/relay-append.md, "Reductions").
            let ready = state
                .writers
                .iter()
                .enumerate()
                .position(|(index, writer)| match &writer.phase {
                    Phase::Sent { outcome, .. } => {
                        *outcome != TransactOutcome::Committed
                            || state.lost_responses_left == 0
                            || self.build_of(index) == Build::AddEra
                    }
                    _ => false,
                });
            if let Some(index) = ready {
                actions.push(Action::WriterReceivesResponse {
                    writer: index as u8,
                });
                return;
            }
        }
        for (index, writer) in state.writers.iter().enumerate() {
            let w = index as u8;
            match (&writer.phase, self.build_of(index)) {
                (Phase::Ready, _) if self.deadline_passed(writer) => {
                    actions.push(Action::PushDeadlinePasses { writer: w })
                }
                (Phase::Ready, Build::New) => match writer.counter {
                    Counter::Unknown => actions.push(Action::WriterReadsCounter { writer: w }),
                    Counter::Known(_) => actions.push(Action::WriterSendsRound { writer: w }),
                },
                (Phase::Ready, Build::AddEra) => {
                    actions.push(Action::WriterAddsToCounter { writer: w })
                }
                (Phase::Allocated { .. }, _) => {
                    actions.push(Action::WriterSendsRound { writer: w })
                }
                (Phase::Sent { outcome, .. }, _) => {
                    actions.push(Action::WriterReceivesResponse { writer: w });
                    // The legacy build's handling of an unknown outcome is not what this model
                    // is about: only new-build responses are lost.
                    if *outcome == TransactOutcome::Committed
                        && state.lost_responses_left > 0
                        && self.build_of(index) == Build::New
                    {
                        actions.push(Action::ResponseLost { writer: w });
                    }
                }
                (Phase::ReadingClaim { .. }, _) => {
                    actions.push(Action::WriterReadsClaim { writer: w })
                }
                (Phase::ReadingClaims, _) => actions.push(Action::WriterReadsClaims { writer: w }),
                (Phase::QueryingTop, _) => actions.push(Action::WriterQueriesTop { writer: w }),
                (Phase::Done | Phase::Failed(_), _) => {}
            }
        }
        for key in state.table.pending.keys() {
            actions.push(Action::ItemApplied { key: *key });
        }
        for (index, puller) in state.pullers.iter().enumerate() {
            // A pull that returns nothing changes nothing: always possible (a self-loop), so a
            // puller can keep pulling; only pages with ops spend `pulls_per_puller` (R10).
            if puller.pulls_left > 0 || self.page_of(state, puller).is_empty() {
                actions.push(Action::PullerQueries {
                    puller: index as u8,
                });
            }
        }
        if let Some(folder) = state.folders.first() {
            for seq in state.table.committed_ops().into_keys() {
                if !folder.folded.contains(&seq) {
                    actions.push(Action::FolderReceivesRecord { seq });
                }
            }
        }
        if let Some(seq) = self.truncatable(state) {
            actions.push(Action::TruncatorDeletes { seq });
        }
    }

    /// The page a puller's next Query answers.
    pub(crate) fn page_of(&self, state: &RelayState, puller: &Puller) -> Vec<(Seq, OpId)> {
        state
            .table
            .query_after(puller.cursor, self.bounds.page_limit as usize)
    }

    /// The op truncation may delete next: the oldest visible op below the op the counter points
    /// at, that every puller and fold consumer is past.
    fn truncatable(&self, state: &RelayState) -> Option<Seq> {
        if state.truncations_left == 0 {
            return None;
        }
        let (seq, _) = state.table.query_after(0, 1).into_iter().next()?;
        let counter = state.table.counter();
        //= specs/relay-append.md#R9
        //# Truncation deletes only ops below the op the counter points at: the op at the counter's seq is kept.
        let below_counter = if self.has(Mutation::TruncateCounterOp) {
            seq <= counter
        } else {
            seq < counter
        };
        let consumed = state.pullers.iter().all(|puller| puller.cursor >= seq)
            && state.folders.iter().all(|folder| folder.watermark >= seq);
        (below_counter && consumed && !state.table.pending.contains_key(&Key::Op(seq)))
            .then_some(seq)
    }
}

#[derive(Clone, Copy, Debug)]
struct Layout {
    counter: Option<usize>,
    claim: Option<usize>,
    predecessor: Option<usize>,
    op: usize,
}

impl Model for RelayModel {
    type State = RelayState;
    type Action = Action;

    fn init_states(&self) -> Vec<RelayState> {
        self.bounds
            .legacy
            .iter()
            .map(|legacy| {
                let (table, legacy_burned) = Self::initial_table(*legacy);
                // A fold consumer starts caught up with what was stored before the run.
                let folders = (0..self.bounds.stream_folders)
                    .map(|_| {
                        let mut folder = Folder {
                            folded: table.committed_ops().into_keys().collect(),
                            watermark: 0,
                        };
                        self.advance_watermark(&mut folder, &legacy_burned);
                        folder
                    })
                    .collect();
                RelayState {
                    table,
                    writers: self.writers.iter().map(|_| Writer::new()).collect(),
                    pullers: (0..self.bounds.pullers)
                        .map(|_| Puller {
                            cursor: 0,
                            received: BTreeSet::new(),
                            pulls_left: self.bounds.pulls_per_puller,
                        })
                        .collect(),
                    folders,
                    answers: BTreeMap::new(),
                    lost_responses_left: self.bounds.lost_responses_max,
                    legacy_burned,
                    truncated: BTreeMap::new(),
                    truncations_left: self.bounds.truncations_max,
                    anomalies: WriterAnomalies::default(),
                }
            })
            .collect()
    }

    fn actions(&self, state: &RelayState, actions: &mut Vec<Action>) {
        self.actions_of(state, actions, self.reductions);
    }

    fn next_state(&self, last: &RelayState, action: Action) -> Option<RelayState> {
        let mut state = last.clone();
        match action {
            Action::WriterReadsCounter { writer } => {
                let index = writer as usize;
                let counter = state.table.counter();
                let writer = &mut state.writers[index];
                //= specs/relay-append.md#R7
                //# A wrong counter guess costs exactly one lost round: the next round uses the counter image, no re-read.
                //= specs/relay-append.md#R7
                //# An uncontended n-op push costs n transactions and one counter read.
                // Uncontended, every round but a wrong guess or a gap commits and every extra round
                // is counted where it happens, so the cost bound reduces to: the only counter read
                // of an uncontended push is the first, before any round.
                if !writer.push_contended && (writer.next_op > 0 || writer.push_paid_extra) {
                    state.anomalies.carry_forward_broken = true;
                }
                writer.counter = Counter::Known(counter);
            }
            Action::WriterAddsToCounter { writer } => {
                let index = writer as usize;
                let outcome = state.table.add_to_counter();
                let writer = &mut state.writers[index];
                match outcome {
                    Ok(seq) => writer.phase = Phase::Allocated { seq },
                    Err(Reason::TransactionConflict) => {
                        writer.mark_contended();
                        writer.phase = Phase::Failed(AppendError::AddEraWriteRefused);
                    }
                    Err(_) => writer.phase = Phase::Failed(AppendError::SeqOverflow),
                }
            }
            Action::WriterSendsRound { writer } => {
                let index = writer as usize;
                let op = self.push_of(index)[state.writers[index].next_op as usize];
                let built = match &state.writers[index].phase {
                    Phase::Allocated { seq } => Ok(Self::add_era_round(op, *seq)),
                    _ => self.new_build_round(&state.writers[index], op),
                };
                match built {
                    Ok((round, items)) => {
                        // Reduction (b): a claim no writer can touch again is applied at commit.
                        let response_losable =
                            state.lost_responses_left > 0 && self.build_of(index) == Build::New;
                        let lone_claim = |key: Key| match key {
                            Key::Claim(claimed) => {
                                self.reductions
                                    && !response_losable
                                    && !self.claim_touchable_by_others(&state, index, claimed)
                            }
                            _ => false,
                        };
                        let apply_now: BTreeSet<Key> = items
                            .iter()
                            .map(|item| item.key)
                            .filter(|key| lone_claim(*key))
                            .collect();
                        let outcome =
                            state
                                .table
                                .transact_applying(&items, self.bounds.window, &apply_now);
                        let rounds_max = self.bounds.push_rounds_max;
                        let writer = &mut state.writers[index];
                        if rounds_max > 0 {
                            //= specs/relay-append.md#R6
                            //# A push sends no round past its deadline; past it the push ends with the typed deadline error.
                            if writer.push_rounds >= rounds_max {
                                state.anomalies.deadline_overrun = true;
                            }
                            // Saturated: a push past its deadline is past it, however far.
                            writer.push_rounds = (writer.push_rounds + 1).min(rounds_max + 1);
                        }
                        writer.phase = Phase::Sent { round, outcome };
                    }
                    Err(error) => state.writers[index].phase = Phase::Failed(error),
                }
            }
            Action::WriterReceivesResponse { writer } => {
                let index = writer as usize;
                let Phase::Sent { round, outcome } = state.writers[index].phase.clone() else {
                    unreachable!("a response arrives only for a sent round");
                };
                match outcome {
                    TransactOutcome::Committed => {
                        //= specs/relay-append.md#R3
                        //# Every append of an op id answers the seq it is stored at.
                        Self::answer(&mut state, round.op, round.seq);
                        let writer = &mut state.writers[index];
                        //= specs/relay-append.md#R7
                        //# Within a push the seq an op was written at is the next op's expected counter.
                        writer.counter = if self.has(Mutation::ReadCounterEveryOp) {
                            Counter::Unknown
                        } else {
                            Counter::Known(round.seq)
                        };
                        self.op_done(index, writer, &mut state.anomalies, false);
                    }
                    TransactOutcome::Cancelled(reasons) => match self.build_of(index) {
                        Build::New => {
                            let predecessor_was_stored =
                                state.truncated.contains_key(&(round.seq - 1));
                            let writer = &mut state.writers[index];
                            let settled = self.settle_new_build(
                                writer,
                                round,
                                &reasons,
                                predecessor_was_stored,
                                &mut state.anomalies,
                            );
                            if let Some(seq) = settled {
                                Self::answer(&mut state, round.op, seq);
                                if self.has(Mutation::ClaimAnswerSentAgain) {
                                    let writer = &mut state.writers[index];
                                    writer.lost_in_a_row = 0;
                                    writer.phase = Phase::Ready;
                                } else {
                                    self.op_done(
                                        index,
                                        &mut state.writers[index],
                                        &mut state.anomalies,
                                        true,
                                    );
                                }
                            }
                        }
                        Build::AddEra => {
                            self.settle_add_era(&mut state.writers[index], round, &reasons)
                        }
                    },
                }
            }
            Action::ResponseLost { writer } => {
                //= specs/relay-append.md#R3
                //# A lost response is a lost round without a hint: the writer retries the same op in place, and a retry of a committed round answers the seq the op was stored at.
                state.lost_responses_left -= 1;
                self.lose_round(&mut state.writers[writer as usize], None);
                state.writers[writer as usize].retrying_lost_response = true;
            }
            Action::WriterReadsClaim { writer } => {
                let index = writer as usize;
                let Phase::ReadingClaim { op } = state.writers[index].phase else {
                    unreachable!("a claim is read back only after its condition failed");
                };
                match state.table.read(Key::Claim(op)) {
                    Some(Value::Claim { seq }) => {
                        Self::answer(&mut state, op, seq);
                        self.op_done(index, &mut state.writers[index], &mut state.anomalies, true);
                    }
                    _ => state.writers[index].phase = Phase::Failed(AppendError::ClaimUnreadable),
                }
            }
            Action::WriterReadsClaims { writer } => {
                let index = writer as usize;
                let start = state.writers[index].next_op as usize;
                for position in start..self.push_of(index).len() {
                    if state.writers[index].answered_ahead & (1 << position) != 0 {
                        continue;
                    }
                    let op = self.push_of(index)[position];
                    // Read-committed: a claim still pending reads as absent.
                    if let Some(Value::Claim { seq }) = state.table.read(Key::Claim(op)) {
                        Self::answer(&mut state, op, seq);
                        state.writers[index].answered_ahead |= 1 << position;
                    }
                }
                let writer = &mut state.writers[index];
                writer.phase = Phase::Ready;
                if writer.answered_ahead & (1 << start) != 0 {
                    // The op due next is answered: step past it and every op answered ahead.
                    if self.advance(index, writer) {
                        self.push_done(index, writer, &mut state.anomalies);
                    }
                }
            }
            Action::WriterQueriesTop { writer } => {
                let top = state.table.query_top();
                let writer = &mut state.writers[writer as usize];
                writer.floor = if self.has(Mutation::TopQueryForgetsFloor) {
                    None
                } else {
                    top
                };
                writer.phase = Phase::Ready;
            }
            Action::PushDeadlinePasses { writer } => {
                state.writers[writer as usize].phase = Phase::Failed(AppendError::DeadlineExceeded);
            }
            Action::ItemApplied { key } => state.table.apply(key),
            Action::PullerQueries { puller } => {
                let puller = &mut state.pullers[puller as usize];
                let page = state
                    .table
                    .query_after(puller.cursor, self.bounds.page_limit as usize);
                if !page.is_empty() {
                    puller.pulls_left -= 1;
                }
                for (seq, _) in &page {
                    puller.received.insert(*seq);
                }
                if let Some((last, _)) = page.last() {
                    puller.cursor = *last;
                }
            }
            Action::FolderReceivesRecord { seq } => {
                let mut folder = state.folders[0].clone();
                folder.folded.insert(seq);
                self.advance_watermark(&mut folder, &state.legacy_burned);
                state.folders[0] = folder;
            }
            Action::TruncatorDeletes { seq } => {
                let Some(Value::Op { op_id }) = state.table.applied.remove(&Key::Op(seq)) else {
                    unreachable!("truncation deletes a visible op");
                };
                if seq == state.table.counter() {
                    state.anomalies.counter_op_truncated = true;
                }
                state.truncated.insert(seq, op_id);
                state.truncations_left -= 1;
            }
        }
        for (writer, was) in state.writers.iter_mut().zip(&last.writers) {
            if writer.next_op != was.next_op {
                writer.retrying_lost_response = false;
            }
        }
        // A finished writer keeps only how it finished: what it knew on the way there no longer
        // matters, so finished pushes that differ only in their history share a state.
        for writer in &mut state.writers {
            if writer.is_finished() {
                *writer = Writer {
                    phase: writer.phase.clone(),
                    next_op: writer.next_op,
                    ..Writer::new()
                };
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.property_defs()
            .iter()
            .map(PropertyDef::to_stateright)
            .collect()
    }

    // The Explorer's vocabulary is the CLI's (crate::view): protocol words, actors from 1.
    fn format_action(&self, action: &Action) -> String {
        encoding::action_words(action)
    }

    fn format_step(&self, last_state: &RelayState, action: Action) -> Option<String> {
        crate::view::step_outcome(self, last_state, action)
    }

    fn as_svg(&self, path: stateright::Path<RelayState, Action>) -> Option<String> {
        Some(crate::view::explorer_svg(self, &path.into_vec()))
    }
}

// ---------------------------------------------------------------------------------------------
// Properties. Each `always` carries its requirement ID; each has a `sometimes` partner that
// shows the fixed design reaches the states the requirement is about.

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
fn r1_no_skip(_: &RelayModel, state: &RelayState) -> bool {
    let stored = state.stored_ops();
    state.pullers.iter().all(|puller| {
        stored
            .range(..=puller.cursor)
            .all(|(seq, _)| puller.received.contains(seq))
    })
}

//= specs/relay-append.md#R2
//# At most one op per seq; no op is overwritten.
fn r2_unique_seq(_: &RelayModel, state: &RelayState) -> bool {
    !state.table.anomalies.op_overwritten
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
fn r3_once_per_op_id(_: &RelayModel, state: &RelayState) -> bool {
    let mut stored: BTreeMap<OpId, Seq> = BTreeMap::new();
    for (seq, op) in state.stored_ops() {
        if stored.insert(op, seq).is_some() {
            return false;
        }
    }
    state
        .answers
        .iter()
        .all(|(op, seqs)| seqs.len() == 1 && seqs.iter().all(|seq| stored.get(op) == Some(seq)))
}

//= specs/relay-append.md#R4
//# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
fn r4_counter_monotonic(_: &RelayModel, state: &RelayState) -> bool {
    !state.table.anomalies.counter_went_back
}

//= specs/relay-append.md#R5
//# With new-build writers only, the stored seqs are exactly 1..n.
fn r5_dense(_: &RelayModel, state: &RelayState) -> bool {
    let stored = state.stored_ops();
    let top = stored.keys().next_back().copied().unwrap_or(0);
    (1..=top).all(|seq| stored.contains_key(&seq) || state.legacy_burned.contains(&seq))
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
fn r6_gap_paid_once(_: &RelayModel, state: &RelayState) -> bool {
    !state.anomalies.gap_paid_twice
}

//= specs/relay-append.md#R6
//# A push sends no round past its deadline; past it the push ends with the typed deadline error.
fn r6_deadline(_: &RelayModel, state: &RelayState) -> bool {
    !state.anomalies.deadline_overrun
}

//= specs/relay-append.md#R7
//# An uncontended n-op push costs n transactions and one counter read.
fn r7_carry_forward(_: &RelayModel, state: &RelayState) -> bool {
    !state.anomalies.carry_forward_broken
}

//= specs/relay-append.md#R8
//# The fold watermark never passes an op that was not folded.
fn r8_fold_safe(_: &RelayModel, state: &RelayState) -> bool {
    let stored = state.stored_ops();
    state.folders.iter().all(|folder| {
        stored
            .range(..=folder.watermark)
            .all(|(seq, _)| folder.folded.contains(seq))
    })
}

//= specs/relay-append.md#R9
//# Truncation deletes only ops below the op the counter points at: the op at the counter's seq is kept.
fn r9_counter_op_kept(_: &RelayModel, state: &RelayState) -> bool {
    !state.anomalies.counter_op_truncated
}

//= specs/relay-append.md#R9
//# A predecessor check never fails over a seq that held an op: truncation is never taken for a legacy gap.
fn r9_no_false_gap(_: &RelayModel, state: &RelayState) -> bool {
    !state.anomalies.stored_op_taken_for_gap
}

fn in_flight<'a>(
    state: &'a RelayState,
) -> impl Iterator<Item = (&'a Round, &'a TransactOutcome)> + 'a {
    state
        .writers
        .iter()
        .filter_map(|writer| match &writer.phase {
            Phase::Sent { round, outcome } => Some((round, outcome)),
            _ => None,
        })
}

fn reach_puller_receives_new_op(_: &RelayModel, state: &RelayState) -> bool {
    let committed = state.table.committed_ops();
    state.pullers.iter().any(|puller| {
        puller
            .received
            .iter()
            .any(|seq| committed.get(seq).is_some_and(|op| *op < LEGACY_OP_BASE))
    })
}

fn reach_round_lost_to_stale_counter(_: &RelayModel, state: &RelayState) -> bool {
    in_flight(state).any(|(_, outcome)| match outcome {
        TransactOutcome::Cancelled(reasons) => matches!(
            reasons.first(),
            Some(Reason::ConditionalCheckFailed {
                old: Some(Value::Counter { .. })
            })
        ),
        _ => false,
    })
}

fn reach_repush_finds_its_claim(_: &RelayModel, state: &RelayState) -> bool {
    let image_names_seq = in_flight(state).any(|(_, outcome)| match outcome {
        TransactOutcome::Cancelled(reasons) => reasons.iter().any(|reason| {
            matches!(
                reason,
                Reason::ConditionalCheckFailed {
                    old: Some(Value::Claim { .. })
                }
            )
        }),
        _ => false,
    });
    let reading_back = state
        .writers
        .iter()
        .any(|writer| matches!(writer.phase, Phase::ReadingClaim { .. }));
    image_names_seq || reading_back
}

fn reach_round_lost_to_conflict(_: &RelayModel, state: &RelayState) -> bool {
    in_flight(state).any(|(_, outcome)| match outcome {
        TransactOutcome::Cancelled(reasons) => reasons.contains(&Reason::TransactionConflict),
        _ => false,
    })
}

fn reach_gap_crossed_by_flip(_: &RelayModel, state: &RelayState) -> bool {
    in_flight(state).any(|(round, outcome)| {
        round.predecessor == Some(Condition::AttributeNotExists)
            && *outcome == TransactOutcome::Committed
    })
}

fn reach_floor_step_commits(_: &RelayModel, state: &RelayState) -> bool {
    in_flight(state)
        .any(|(round, outcome)| round.floor_step && *outcome == TransactOutcome::Committed)
}

fn reach_op_visible_after_later_round_sent(_: &RelayModel, state: &RelayState) -> bool {
    // A round for seq s was sent while op s - 1 was still pending: the visibility window is
    // open and the predecessor check is what held the later round back.
    in_flight(state).any(|(round, outcome)| {
        round.seq > 1
            && state.table.pending.contains_key(&Key::Op(round.seq - 1))
            && matches!(outcome, TransactOutcome::Cancelled(_))
    })
}

fn reach_every_writer_finished(_: &RelayModel, state: &RelayState) -> bool {
    !state.writers.is_empty()
        && state
            .writers
            .iter()
            .all(|writer| writer.phase == Phase::Done)
}

fn reach_fast_path(_: &RelayModel, state: &RelayState) -> bool {
    state
        .writers
        .iter()
        .any(|writer| writer.phase == Phase::ReadingClaims)
}

fn reach_response_lost(model: &RelayModel, state: &RelayState) -> bool {
    state.lost_responses_left < model.bounds.lost_responses_max
}

fn reach_deadline(_: &RelayModel, state: &RelayState) -> bool {
    state
        .writers
        .iter()
        .any(|writer| writer.phase == Phase::Failed(AppendError::DeadlineExceeded))
}

/// A new-build writer is about to receive the commit of its push's last op: the push completes
/// with the response (a finished writer forgets how its push went, so this is the last state
/// that knows).
fn completing_push<'a>(
    model: &'a RelayModel,
    state: &'a RelayState,
) -> impl Iterator<Item = &'a Writer> + 'a {
    state
        .writers
        .iter()
        .enumerate()
        .filter_map(move |(index, writer)| {
            let last_op = writer.next_op as usize + 1 == model.push_of(index).len();
            let committing = matches!(
                &writer.phase,
                Phase::Sent {
                    outcome: TransactOutcome::Committed,
                    ..
                }
            );
            (last_op && committing && model.build_of(index) == Build::New).then_some(writer)
        })
}

fn reach_push_uncontended(model: &RelayModel, state: &RelayState) -> bool {
    completing_push(model, state).any(|writer| !writer.push_contended)
}

fn reach_push_pays_extra_round(model: &RelayModel, state: &RelayState) -> bool {
    completing_push(model, state).any(|writer| !writer.push_contended && writer.push_paid_extra)
}

fn reach_fold_passes_two_new_ops(_: &RelayModel, state: &RelayState) -> bool {
    let stored = state.stored_ops();
    state.folders.iter().any(|folder| {
        stored
            .range(..=folder.watermark)
            .filter(|(_, op)| **op < LEGACY_OP_BASE)
            .count()
            >= 2
    })
}

fn reach_record_out_of_order(_: &RelayModel, state: &RelayState) -> bool {
    let stored = state.stored_ops();
    state.folders.iter().any(|folder| {
        folder.folded.iter().any(|high| {
            stored
                .range(..*high)
                .any(|(seq, _)| !folder.folded.contains(seq))
        })
    })
}

fn reach_truncated(_: &RelayModel, state: &RelayState) -> bool {
    !state.truncated.is_empty()
}

/// A property as declared: requirement ID, name, condition.
type Declared = (
    &'static str,
    &'static str,
    fn(&RelayModel, &RelayState) -> bool,
);

const ALWAYS: &[Declared] = &[
    ("R1", "R1 no-skip", r1_no_skip),
    ("R2", "R2 unique-seq", r2_unique_seq),
    ("R3", "R3 once-per-op-id", r3_once_per_op_id),
    ("R4", "R4 counter-monotonic", r4_counter_monotonic),
    ("R5", "R5 dense", r5_dense),
    ("R6", "R6 gap-paid-once", r6_gap_paid_once),
    ("R6", "R6 deadline", r6_deadline),
    ("R7", "R7 carry-forward", r7_carry_forward),
    ("R8", "R8 fold-safe", r8_fold_safe),
    ("R9", "R9 counter-op-kept", r9_counter_op_kept),
    ("R9", "R9 no-false-gap", r9_no_false_gap),
];

const SOMETIMES: &[Declared] = &[
    (
        "R1",
        "R1 reach: a puller receives a new op",
        reach_puller_receives_new_op,
    ),
    (
        "R1",
        "R1 reach: an op becomes visible after a later op's transaction was sent",
        reach_op_visible_after_later_round_sent,
    ),
    (
        "R2",
        "R2 reach: a round is lost to a stale counter",
        reach_round_lost_to_stale_counter,
    ),
    (
        "R3",
        "R3 reach: a re-push finds its own claim",
        reach_repush_finds_its_claim,
    ),
    (
        "R3",
        "R3 reach: the re-push fast path reads the remaining claims",
        reach_fast_path,
    ),
    (
        "R3",
        "R3 reach: a response is lost after commit",
        reach_response_lost,
    ),
    (
        "R4",
        "R4 reach: a floor step over occupied seqs commits",
        reach_floor_step_commits,
    ),
    (
        "R5",
        "R5 reach: a legacy gap is crossed by a flip",
        reach_gap_crossed_by_flip,
    ),
    (
        "R6",
        "R6 reach: a round is lost to a conflict",
        reach_round_lost_to_conflict,
    ),
    (
        "R6",
        "R6 reach: every writer finishes its push",
        reach_every_writer_finished,
    ),
    (
        "R6",
        "R6 reach: a push ends at its deadline",
        reach_deadline,
    ),
    (
        "R7",
        "R7 reach: a push completes uncontended",
        reach_push_uncontended,
    ),
    (
        "R7",
        "R7 reach: an uncontended push pays one extra round",
        reach_push_pays_extra_round,
    ),
    (
        "R8",
        "R8 reach: the fold watermark passes two new ops",
        reach_fold_passes_two_new_ops,
    ),
    (
        "R8",
        "R8 reach: a stream record arrives before a lower one",
        reach_record_out_of_order,
    ),
    ("R9", "R9 reach: truncation deletes an op", reach_truncated),
];

impl ModelSpec for RelayModel {
    const NAME: &'static str = "relay";
    const VARIANTS: &'static [&'static str] = &["add-era", "counter-only", "fixed", "mixed"];
    const BOUNDS: &'static [BoundSpec] = BOUNDS;
    const VARIANT_DEFAULTS: &'static [(&'static str, &'static str, u32)] = VARIANT_DEFAULTS;
    const BOUND_SETS: &'static [crate::check::BoundSet] = BOUND_SETS;

    fn scale(&self) -> crate::check::Scale<Self> {
        scale::hooks(self)
    }

    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        let variant = match Self::resolve_variant(variant)? {
            "add-era" => Variant::AddEra,
            "counter-only" => Variant::CounterOnly,
            "fixed" => Variant::Fixed,
            _ => Variant::Mixed,
        };
        let legacy = match bounds.get("legacy") {
            0 => vec![Legacy::Empty],
            1 => vec![Legacy::Gap],
            2 => vec![Legacy::RunAboveCounter],
            _ => vec![Legacy::Empty, Legacy::Gap, Legacy::RunAboveCounter],
        };
        let narrow = |key: &str| bounds.get(key) as u8;
        Ok(RelayModel::new(
            variant,
            RelayBounds {
                new_writers: narrow("new_writers"),
                add_era_writers: narrow("add_era_writers"),
                ops_per_writer: narrow("ops_per_writer"),
                repush_ops: narrow("repush_ops"),
                lost_responses_max: narrow("lost_responses_max"),
                pullers: narrow("pullers"),
                pulls_per_puller: narrow("pulls_per_puller"),
                page_limit: narrow("page_limit"),
                legacy,
                lost_rounds_max: narrow("lost_rounds_max"),
                window: bounds.get("window") == 1,
                push_rounds_max: narrow("push_rounds_max"),
                stream_folders: narrow("stream_folders"),
                truncations_max: narrow("truncations_max"),
            },
        ))
    }

    fn variant(&self) -> &'static str {
        self.variant.name()
    }

    fn bounds(&self) -> &Bounds {
        &self.resolved
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        let always = ALWAYS.iter().map(|(id, name, condition)| PropertyDef {
            id,
            name,
            kind: Kind::Always,
            condition: *condition,
        });
        let sometimes = SOMETIMES.iter().map(|(id, name, condition)| PropertyDef {
            id,
            name,
            kind: Kind::Sometimes,
            condition: *condition,
        });
        always.chain(sometimes).collect()
    }

    fn liveness_defs(&self) -> Vec<crate::check::LivenessDef<Self>> {
        liveness::definitions()
    }

    fn fairness(&self, action: &Action) -> Option<&'static str> {
        liveness::family_of(action)
    }

    fn unreduced_actions(&self, state: &RelayState, actions: &mut Vec<Action>) -> bool {
        if !self.reductions {
            return false;
        }
        self.actions_of(state, actions, false);
        true
    }

    fn families_cut(&self, state: &RelayState, cut: &mut Vec<&'static str>) {
        liveness::families_cut(self, state, cut);
    }

    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        if property.kind == Kind::Sometimes {
            return self.expected_reach(property.name);
        }
        let violated: &[&str] = match self.variant {
            // The seed's reproduction; R5 falls with it (a refused write burns its ADD seq), and
            // R10 (a puller past a skipped op never receives it).
            Variant::AddEra => &["R1", "R5", "R10"],
            Variant::CounterOnly => &["R1", "R10"],
            Variant::Fixed => &[],
            // The ordering guarantee holds only once every writer runs the new build.
            Variant::Mixed => &["R1", "R5", "R10"],
        };
        if violated.contains(&property.id) {
            Verdict::Violated
        } else {
            Verdict::Holds
        }
    }

    fn step_words(&self, before: &RelayState, action: &Action, after: &RelayState) -> String {
        describe(self, before, action, after)
    }

    fn state_roles(&self, state: &RelayState) -> Vec<(String, String)> {
        words::roles(self, state)
    }
}

impl RelayModel {
    /// Which reachability properties the bounds can reach: a partner whose actor or event is
    /// bounded away is unreached, and the rest are pinned per variant as they are at the CI
    /// bounds, so a change in reach is noticed.
    fn expected_reach(&self, name: &str) -> Verdict {
        let bounds = &self.bounds;
        let repush = bounds.repush_ops > 0 && self.writers.len() >= 2;
        let off: &[(bool, &str)] = &[
            (
                bounds.stream_folders == 0,
                "R8 reach: the fold watermark passes two new ops",
            ),
            (
                bounds.stream_folders == 0,
                "R8 reach: a stream record arrives before a lower one",
            ),
            (
                bounds.truncations_max == 0,
                "R9 reach: truncation deletes an op",
            ),
            (
                bounds.push_rounds_max == 0,
                "R6 reach: a push ends at its deadline",
            ),
            (
                bounds.lost_responses_max == 0,
                "R3 reach: a response is lost after commit",
            ),
            (!repush, "R3 reach: a re-push finds its own claim"),
            (
                !repush || self.variant == Variant::AddEra,
                "R3 reach: the re-push fast path reads the remaining claims",
            ),
        ];
        if off.iter().any(|(is_off, reach)| *is_off && *reach == name) {
            return Verdict::Unreached;
        }
        let unreached: &[&str] = match self.variant {
            Variant::Fixed => &[],
            // No window, no counter condition, no legacy data, no new-build writer.
            Variant::AddEra => &[
                "R1 reach: an op becomes visible after a later op's transaction was sent",
                "R2 reach: a round is lost to a stale counter",
                "R6 reach: a round is lost to a conflict",
                "R4 reach: a floor step over occupied seqs commits",
                "R5 reach: a legacy gap is crossed by a flip",
                "R7 reach: a push completes uncontended",
                "R7 reach: an uncontended push pays one extra round",
            ],
            Variant::CounterOnly => &[
                "R4 reach: a floor step over occupied seqs commits",
                "R5 reach: a legacy gap is crossed by a flip",
            ],
            // An ADD-era writer's burned seq is a legacy gap to the new writer: it is crossed.
            Variant::Mixed => &["R4 reach: a floor step over occupied seqs commits"],
        };
        if unreached.contains(&name) {
            Verdict::Unreached
        } else {
            Verdict::Reached
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Protocol words for traces and the Explorer.

fn writer_name(model: &RelayModel, writer: u8) -> String {
    let suffix = if model.build_of(writer as usize) == Build::AddEra {
        " (ADD-era)"
    } else {
        ""
    };
    format!("W{}{suffix}", writer + 1)
}

fn describe_items(round: &Round, build: Build) -> String {
    let mut parts = Vec::new();
    if build == Build::New {
        parts.push(format!("counter {}->{}", round.expected, round.seq));
    }
    parts.push(format!("claim {}", op_name(round.op)));
    match round.predecessor {
        Some(Condition::AttributeExists) => {
            parts.push(format!("check op {} exists", round.seq - 1))
        }
        Some(Condition::AttributeNotExists) => {
            parts.push(format!("check op {} absent", round.seq - 1))
        }
        _ => {}
    }
    parts.push(format!("put op {} = {}", round.seq, op_name(round.op)));
    format!("TransactWriteItems{{{}}}", parts.join(", "))
}

fn describe_outcome(outcome: &TransactOutcome) -> String {
    match outcome {
        TransactOutcome::Committed => "committed".to_string(),
        TransactOutcome::Cancelled(reasons) => {
            let reasons: Vec<String> = reasons.iter().map(Reason::to_string).collect();
            format!("cancelled [{}]", reasons.join(", "))
        }
    }
}

pub fn describe(
    model: &RelayModel,
    before: &RelayState,
    action: &Action,
    after: &RelayState,
) -> String {
    match *action {
        Action::WriterReadsCounter { writer } => {
            let check = if model.checks_claims_first(before, writer as usize) {
                let ops: Vec<String> = model
                    .push_of(writer as usize)
                    .iter()
                    .map(|op| op_name(*op).to_string())
                    .collect();
                format!("BatchGetItem claims [{}] -> no conflict; ", ops.join(", "))
            } else {
                String::new()
            };
            format!(
                "{} {check}Query seq=0 (consistent) -> next_seq {}",
                writer_name(model, writer),
                before.table.counter()
            )
        }
        Action::WriterAddsToCounter { writer } => match &after.writers[writer as usize].phase {
            Phase::Allocated { seq } => {
                format!(
                    "{} UpdateItem ADD next_seq 1 -> {seq}",
                    writer_name(model, writer)
                )
            }
            _ => format!(
                "{} UpdateItem ADD next_seq 1 -> TransactionConflictException",
                writer_name(model, writer)
            ),
        },
        Action::WriterSendsRound { writer } => match &after.writers[writer as usize].phase {
            Phase::Sent { round, outcome } => format!(
                "{} sends {} -> {}",
                writer_name(model, writer),
                describe_items(round, model.build_of(writer as usize)),
                describe_outcome(outcome)
            ),
            other => format!(
                "{} cannot send a round: {other:?}",
                writer_name(model, writer)
            ),
        },
        Action::WriterReceivesResponse { writer } => {
            let name = writer_name(model, writer);
            let Phase::Sent { round, outcome } = &before.writers[writer as usize].phase else {
                return format!("{name} receives a response");
            };
            let answered = after.writers[writer as usize].next_op
                > before.writers[writer as usize].next_op
                || after.writers[writer as usize].phase == Phase::Done;
            let next = match &after.writers[writer as usize].phase {
                Phase::Failed(error) => format!("append fails: {error:?}"),
                Phase::ReadingClaims => {
                    let seq = after
                        .answers
                        .get(&round.op)
                        .and_then(|seqs| seqs.iter().next())
                        .copied()
                        .unwrap_or(0);
                    format!("claim exists: {} answered with its seq {seq}; read the claims of the rest of the push", op_name(round.op))
                }
                _ if answered && *outcome != TransactOutcome::Committed => {
                    let seq = after
                        .answers
                        .get(&round.op)
                        .and_then(|seqs| seqs.iter().next())
                        .copied()
                        .unwrap_or(0);
                    format!(
                        "claim exists: {} answered with its seq {seq}",
                        op_name(round.op)
                    )
                }
                Phase::ReadingClaim { .. } => "claim exists: read it back".to_string(),
                Phase::QueryingTop => "seq taken: find the top".to_string(),
                _ if *outcome == TransactOutcome::Committed => {
                    format!("{} stored at {}", op_name(round.op), round.seq)
                }
                _ => match (
                    after.writers[writer as usize].flip,
                    after.writers[writer as usize].counter,
                ) {
                    (Some(seq), _) => format!("legacy gap below {seq}: flip the check"),
                    (None, Counter::Known(hint)) => format!("lost round (counter {hint})"),
                    (None, Counter::Unknown) => "lost round (no hint)".to_string(),
                },
            };
            format!("{name} receives {}: {next}", describe_outcome(outcome))
        }
        Action::ResponseLost { writer } => format!(
            "response to {} lost after commit: a lost round without a hint, the same op is retried",
            writer_name(model, writer)
        ),
        Action::WriterReadsClaims { writer } => {
            let index = writer as usize;
            let push = model.push_of(index);
            let start = before.writers[index].next_op as usize;
            let found: Vec<String> = (start..push.len())
                .filter(|position| before.writers[index].answered_ahead & (1 << position) == 0)
                .map(|position| {
                    let op = push[position];
                    match before.table.read(Key::Claim(op)) {
                        Some(Value::Claim { seq }) => format!("{} at {seq}", op_name(op)),
                        _ => format!("{} none", op_name(op)),
                    }
                })
                .collect();
            format!(
                "{} BatchGetItem claims -> [{}]",
                writer_name(model, writer),
                found.join(", ")
            )
        }
        Action::PushDeadlinePasses { writer } => format!(
            "{} push deadline passed after {} rounds: DeadlineExceeded (503)",
            writer_name(model, writer),
            before.writers[writer as usize].push_rounds
        ),
        Action::FolderReceivesRecord { seq } => {
            let op = before
                .table
                .committed_ops()
                .get(&seq)
                .map_or('?', |op| op_name(*op));
            format!(
                "F1 stream record op {seq} ({op}); F1 watermark {}",
                after.folders[0].watermark
            )
        }
        Action::TruncatorDeletes { seq } => format!("truncator DeleteItem op {seq}"),
        Action::WriterReadsClaim { writer } => {
            let Phase::ReadingClaim { op } = before.writers[writer as usize].phase else {
                return format!("{} reads a claim", writer_name(model, writer));
            };
            let found = match before.table.read(Key::Claim(op)) {
                Some(value) => value.to_string(),
                None => "nothing".to_string(),
            };
            format!(
                "{} Query claim {} -> {found}",
                writer_name(model, writer),
                op_name(op)
            )
        }
        Action::WriterQueriesTop { writer } => format!(
            "{} Query seq>0 reverse limit 1 -> {}",
            writer_name(model, writer),
            before
                .table
                .query_top()
                .map_or("[]".to_string(), |seq| format!("[{seq}]"))
        ),
        Action::ItemApplied { key } => {
            let value = before
                .table
                .pending
                .get(&key)
                .map_or(String::new(), |value| format!(" ({value})"));
            format!("{key} applied{value}")
        }
        Action::PullerQueries { puller } => {
            let cursor = before.pullers[puller as usize].cursor;
            let page = before
                .table
                .query_after(cursor, model.bounds.page_limit as usize);
            let seqs: Vec<String> = page.iter().map(|(seq, _)| seq.to_string()).collect();
            format!(
                "P{} Query seq>{cursor} limit {} -> [{}]; P{} stores cursor {}",
                puller + 1,
                model.bounds.page_limit,
                seqs.join(", "),
                puller + 1,
                after.pullers[puller as usize].cursor
            )
        }
    }
}

pub mod encoding;
mod liveness;
mod scale;
mod words;

#[cfg(test)]
mod tests;
