//! The relay append protocol (specs/relay-append.md): writers that take a stream's
//! seq inside the write transaction, pullers that page with a limit and store the last seq of a
//! page as their cursor, all over the DynamoDB semantics of [`crate::ddb`], visibility window
//! included.
//!
//! Granularity: one step per request the real code sends (counter Query, TransactWriteItems,
//! claim GetItem, reverse Query, UpdateItem ADD, puller Query), one step per pending item
//! becoming visible, one step per transaction response delivered or lost. A read and its answer
//! are one step (nothing observes the gap between them); a transaction and its response are two,
//! because a response can be lost after commit. A conformance replay orders real requests by
//! these steps.
//!
//! Variants (specs/relay-append.md, "Variants and verdicts"):
//! - `add-era`: UpdateItem ADD allocates the seq, then a transaction of claim and op.
//! - `counter-only`: the counter condition in the transaction, no predecessor check.
//! - `fixed`: the whole design (predecessor check and its flip, ALL_OLD hint, floor step, carry).
//! - `mixed`: fixed writers beside ADD-era writers.
//!
//! Invariants: actions are deterministic (ordered collections only); state holds only what the
//! protocol and the properties need; every property carries its requirement ID.

use crate::check::{BoundSpec, Bounds, Kind, ModelSpec, PropertyDef, SpecError, Verdict};
use crate::ddb::{
    op_name, Condition, Key, OpId, Operation, Reason, Seq, Table, TransactItem, TransactOutcome,
    Value, SEQ_MAX,
};
use serde::Serialize;
use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet};

/// Which algorithm a writer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Build {
    /// The seed's design: counter condition, claim, predecessor check, op, in one transaction.
    New,
    /// The legacy allocation: UpdateItem ADD, then a transaction of claim and op.
    AddEra,
}

/// A deliberate defect, to show that a property can fail (the seed's mutation checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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
}

/// Op ids of legacy ops (stored before any writer of the model ran) start here, above every
/// writer's op ids, so the two never collide.
pub const LEGACY_OP_BASE: OpId = 200;

/// The initial table: empty, or legacy data an ADD-era relay left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Legacy {
    Empty,
    /// Counter at 2, op 1 present, op 2 absent: seq 2 was burned by an ADD-era relay.
    Gap,
    /// Counter at 1 with ops 1, 2 and 3 present: a run of occupied seqs above the counter.
    RunAboveCounter,
}

/// The model's bounds, resolved from the `oncecheck` bound table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RelayBounds {
    pub new_writers: u8,
    pub add_era_writers: u8,
    pub ops_per_writer: u8,
    /// The last writer's push starts with the first writer's first op (a second writer re-pushes).
    pub second_writer_repush: bool,
    /// Responses that may be lost after commit in one run; each makes its writer re-push.
    pub lost_responses_max: u8,
    pub pullers: u8,
    pub pulls_per_puller: u8,
    pub page_limit: u8,
    pub legacy: Vec<Legacy>,
    /// The contention budget: lost rounds in a row before an append gives up.
    pub lost_rounds_max: u8,
    /// false: a committed transaction becomes visible at once (no visibility window).
    pub window: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Counter {
    Unknown,
    Known(Seq),
}

/// The shape of one append round, kept until its response arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
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
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Phase {
    /// Between rounds: the next step reads the counter (if unknown) or sends a round.
    Ready,
    /// ADD-era: holds the seq UpdateItem ADD answered, about to send claim and op.
    Allocated { seq: Seq },
    /// The round's transaction was processed; its response is in flight.
    Sent { round: Round, outcome: TransactOutcome },
    /// The claim already existed: the writer reads it back (GetItem) to answer its seq.
    ReadingClaim { op: OpId },
    /// The op's seq was taken while the counter held: one reverse Query finds the top.
    QueryingTop,
    Done,
    Failed(AppendError),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
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
    /// Per push: counter reads and transactions while the push is uncontended (R7); both are
    /// zeroed once anything but a first-try commit happens, so contended pushes share states.
    pub push_reads: u8,
    pub push_transactions: u8,
    pub push_contended: bool,
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
            push_reads: 0,
            push_transactions: 0,
            push_contended: false,
        }
    }

    fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Failed(_))
    }

    fn mark_contended(&mut self) {
        self.push_contended = true;
        self.push_reads = 0;
        self.push_transactions = 0;
    }
}

/// Protocol-level defects recorded at the step that commits them (the table records its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct WriterAnomalies {
    /// An uncontended push cost more than one counter read or more than one transaction per op.
    pub carry_forward_broken: bool,
    /// A predecessor check failed twice in a row for one seq: the legacy gap was paid twice.
    pub gap_paid_twice: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Puller {
    pub cursor: Seq,
    pub received: BTreeSet<Seq>,
    pub pulls_left: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RelayState {
    pub table: Table,
    pub writers: Vec<Writer>,
    pub pullers: Vec<Puller>,
    /// Every seq answered to a client, per op id (R3).
    pub answers: BTreeMap<OpId, BTreeSet<Seq>>,
    pub lost_responses_left: u8,
    /// Seqs absent at the start below the counter: burned by an ADD-era relay (R5 exempts them).
    pub legacy_burned: BTreeSet<Seq>,
    pub anomalies: WriterAnomalies,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Action {
    /// Strongly consistent Query of seq = 0: the counter (the first op of a push).
    WriterReadsCounter { writer: u8 },
    /// ADD-era: UpdateItem ADD next_seq 1.
    WriterAddsToCounter { writer: u8 },
    /// TransactWriteItems of the current round, processed by the server.
    WriterSendsRound { writer: u8 },
    WriterReceivesResponse { writer: u8 },
    /// The round committed but its response never reaches the writer (unknown outcome).
    ResponseLost { writer: u8 },
    /// GetItem of the op's claim after the claim condition failed.
    WriterReadsClaim { writer: u8 },
    /// Query seq > 0, ScanIndexForward = false, Limit 1.
    WriterQueriesTop { writer: u8 },
    /// One pending item of a committed transaction becomes visible.
    ItemApplied { key: Key },
    /// Query seq > cursor, Limit page_limit; the puller stores the page's last seq as its cursor.
    PullerQueries { puller: u8 },
}

#[derive(Clone, Debug)]
pub struct RelayModel {
    pub variant: Variant,
    pub bounds: RelayBounds,
    pub mutations: BTreeSet<Mutation>,
    /// Per writer: its build and its push (op ids in order).
    pub writers: Vec<(Build, Vec<OpId>)>,
    resolved: Bounds,
}

pub const BOUNDS: &[BoundSpec] = &[
    BoundSpec { key: "new_writers", default: 2, min: 0, max: 4, help: "new-build writers" },
    BoundSpec { key: "add_era_writers", default: 1, min: 0, max: 3, help: "ADD-era writers (add-era: all writers; mixed: beside the new ones)" },
    BoundSpec { key: "ops_per_writer", default: 2, min: 1, max: 4, help: "ops in each writer's push" },
    BoundSpec { key: "second_writer_repush", default: 1, min: 0, max: 1, help: "the last writer re-pushes the first writer's first op" },
    BoundSpec { key: "lost_responses_max", default: 0, min: 0, max: 3, help: "responses lost after commit in one run (each re-pushes its whole push)" },
    BoundSpec { key: "pullers", default: 1, min: 0, max: 3, help: "pullers" },
    BoundSpec { key: "pulls_per_puller", default: 3, min: 0, max: 6, help: "Query pages per puller" },
    BoundSpec { key: "page_limit", default: 2, min: 1, max: 8, help: "Limit of a puller's Query" },
    BoundSpec { key: "legacy", default: 1, min: 0, max: 3, help: "initial table: 0 empty, 1 legacy gap, 2 run above the counter, 3 all three" },
    BoundSpec { key: "lost_rounds_max", default: 2, min: 1, max: 6, help: "contention budget: lost rounds in a row" },
    BoundSpec { key: "window", default: 1, min: 0, max: 1, help: "1: committed items become visible one at a time (the visibility window)" },
];

/// CI bounds that differ per variant: the buggy variants need fewer actors to show their bug.
pub const VARIANT_DEFAULTS: &[(&str, &str, u32)] = &[
    // The seed's reproduction needs no visibility window: ADD hands out seqs before the writes.
    ("add-era", "new_writers", 0),
    ("add-era", "add_era_writers", 2),
    ("add-era", "legacy", 0),
    ("add-era", "window", 0),
    ("add-era", "second_writer_repush", 0),
    ("counter-only", "add_era_writers", 0),
    ("counter-only", "legacy", 0),
    // The whole design from every initial table: empty, legacy gap, run above the counter.
    ("fixed", "add_era_writers", 0),
    ("fixed", "legacy", 3),
    ("mixed", "new_writers", 1),
    ("mixed", "second_writer_repush", 0),
    ("mixed", "pulls_per_puller", 1),
    ("mixed", "legacy", 0),
];

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
        if bounds.second_writer_repush && writers.len() >= 2 {
            let first_op = writers[0].1[0];
            let last = writers.len() - 1;
            writers[last].1[0] = first_op;
        }
        let mut resolved = BTreeMap::new();
        for (key, value) in [
            ("new_writers", new_writers as u32),
            ("add_era_writers", add_era_writers as u32),
            ("ops_per_writer", bounds.ops_per_writer as u32),
            ("second_writer_repush", bounds.second_writer_repush as u32),
            ("lost_responses_max", bounds.lost_responses_max as u32),
            ("pullers", bounds.pullers as u32),
            ("pulls_per_puller", bounds.pulls_per_puller as u32),
            ("page_limit", bounds.page_limit as u32),
            ("lost_rounds_max", bounds.lost_rounds_max as u32),
            ("window", bounds.window as u32),
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
        RelayModel { variant, bounds, mutations, writers, resolved: Bounds(resolved) }
    }

    /// The same model with a deliberate defect (tests only show properties can fail).
    pub fn with_mutation(mut self, mutation: Mutation) -> RelayModel {
        self.mutations.insert(mutation);
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

    fn initial_table(legacy: Legacy) -> (Table, BTreeSet<Seq>) {
        let mut table = Table::default();
        let mut burned = BTreeSet::new();
        let legacy_op = |seq: Seq| LEGACY_OP_BASE + seq;
        match legacy {
            Legacy::Empty => {}
            Legacy::Gap => {
                table.applied.insert(Key::Counter, Value::Counter { next_seq: 2 });
                table.applied.insert(Key::Op(1), Value::Op { op_id: legacy_op(1) });
                table.applied.insert(Key::Claim(legacy_op(1)), Value::Claim { seq: 1 });
                burned.insert(2);
            }
            Legacy::RunAboveCounter => {
                table.applied.insert(Key::Counter, Value::Counter { next_seq: 1 });
                for seq in 1..=3 {
                    table.applied.insert(Key::Op(seq), Value::Op { op_id: legacy_op(seq) });
                    table.applied.insert(Key::Claim(legacy_op(seq)), Value::Claim { seq });
                }
            }
        }
        (table, burned)
    }

    /// The transaction a new-build writer sends for its next round.
    fn new_build_round(&self, writer: &Writer, op: OpId) -> Result<(Round, Vec<TransactItem>), AppendError> {
        let Counter::Known(expected) = writer.counter else {
            unreachable!("a round is only sent with a known counter");
        };
        // The floor (top occupied seq) outlives lost rounds of the same op, as in the store: seqs
        // at or below it are occupied whatever the counter says.
        let base = expected.max(writer.floor.unwrap_or(0));
        //= specs/relay-append.md#R4
        //# Checked arithmetic: a counter at the top of the seq range is a loud error, never a wrap.
        let seq = base.checked_add(1).filter(|seq| *seq <= SEQ_MAX).ok_or(AppendError::SeqOverflow)?;
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
        let round = Round { op, expected, seq, predecessor, floor_step: writer.floor.is_some_and(|floor| floor > expected) };
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
        (Round { op, expected: seq - 1, seq, predecessor: None, floor_step: false }, items)
    }

    /// Position of each kind of item in a round's request, for reading cancellation reasons.
    fn layout(&self, build: Build, round: &Round) -> Layout {
        match build {
            Build::AddEra => Layout { counter: None, claim: Some(0), predecessor: None, op: 1 },
            Build::New => {
                let claim = (!self.has(Mutation::NoClaim)).then_some(1);
                let after_claim = 1 + claim.is_some() as usize;
                let predecessor = round.predecessor.map(|_| after_claim);
                let op = after_claim + predecessor.is_some() as usize;
                Layout { counter: Some(0), claim, predecessor, op }
            }
        }
    }

    fn answer(state: &mut RelayState, op: OpId, seq: Seq) {
        state.answers.entry(op).or_default().insert(seq);
    }

    /// The writer's op was answered: move to the next op or finish the push.
    fn op_done(&self, writer_index: usize, writer: &mut Writer, anomalies: &mut WriterAnomalies) {
        writer.next_op += 1;
        writer.floor = None;
        writer.flip = None;
        writer.lost_in_a_row = 0;
        if writer.next_op as usize == self.push_of(writer_index).len() {
            let uncontended = !writer.push_contended && self.build_of(writer_index) == Build::New;
            if uncontended
                && (writer.push_reads != 1 || writer.push_transactions != writer.next_op)
            {
                anomalies.carry_forward_broken = true;
            }
            // Only the phase and whether the push was contended matter once it is done.
            *writer = Writer { phase: Phase::Done, next_op: writer.next_op, push_contended: writer.push_contended, ..Writer::new() };
        } else {
            writer.phase = Phase::Ready;
        }
    }

    /// A round that ended without progress; over the budget, the append gives up. A hint is
    /// used only after the first lost round in a row: after a backoff it is stale, and the next
    /// round reads the counter instead.
    fn lose_round(&self, writer: &mut Writer, hint: Option<Seq>) {
        writer.flip = None;
        writer.mark_contended();
        //= specs/relay-append.md#R6
        //# The contention budget counts lost rounds in a row; over it the append ends with a typed error.
        writer.lost_in_a_row += 1;
        writer.counter = match hint {
            Some(value) if writer.lost_in_a_row == 1 => Counter::Known(value),
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
    /// ALL_OLD image names it.
    fn settle_new_build(
        &self,
        writer: &mut Writer,
        round: Round,
        reasons: &[Reason],
        anomalies: &mut WriterAnomalies,
    ) -> Option<Seq> {
        let layout = self.layout(Build::New, &round);
        let reason_at = |index: Option<usize>| index.map(|index| reasons[index]).unwrap_or(Reason::None);
        writer.mark_contended();
        if let Reason::ConditionalCheckFailed { old } = reason_at(layout.claim) {
            //= specs/relay-append.md#R3
            //# Every append of an op id answers the seq it is stored at.
            // The claim outranks every other reason: the op id is stored already. What the next
            // op of the push may assume about the counter follows from the counter's reason.
            writer.counter = match reason_at(layout.counter) {
                Reason::None => Counter::Known(round.expected),
                Reason::ConditionalCheckFailed { old: Some(Value::Counter { next_seq }) } => Counter::Known(next_seq),
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
            writer.flip = None;
            writer.phase = Phase::QueryingTop;
            return None;
        }
        if let Reason::ConditionalCheckFailed { .. } = reason_at(layout.predecessor) {
            if round.predecessor == Some(Condition::AttributeNotExists) {
                // The gap filled meanwhile (an ADD-era writer stored it): the next round goes
                // back to attribute_exists.
                writer.flip = None;
                return None;
            }
            if writer.flip == Some(round.seq) {
                anomalies.gap_paid_twice = true;
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
                    answers: BTreeMap::new(),
                    lost_responses_left: self.bounds.lost_responses_max,
                    legacy_burned,
                    anomalies: WriterAnomalies::default(),
                }
            })
            .collect()
    }

    fn actions(&self, state: &RelayState, actions: &mut Vec<Action>) {
        for (index, writer) in state.writers.iter().enumerate() {
            let w = index as u8;
            match (&writer.phase, self.build_of(index)) {
                (Phase::Ready, Build::New) => match writer.counter {
                    Counter::Unknown => actions.push(Action::WriterReadsCounter { writer: w }),
                    Counter::Known(_) => actions.push(Action::WriterSendsRound { writer: w }),
                },
                (Phase::Ready, Build::AddEra) => actions.push(Action::WriterAddsToCounter { writer: w }),
                (Phase::Allocated { .. }, _) => actions.push(Action::WriterSendsRound { writer: w }),
                (Phase::Sent { outcome, .. }, _) => {
                    actions.push(Action::WriterReceivesResponse { writer: w });
                    if *outcome == TransactOutcome::Committed && state.lost_responses_left > 0 {
                        actions.push(Action::ResponseLost { writer: w });
                    }
                }
                (Phase::ReadingClaim { .. }, _) => actions.push(Action::WriterReadsClaim { writer: w }),
                (Phase::QueryingTop, _) => actions.push(Action::WriterQueriesTop { writer: w }),
                (Phase::Done | Phase::Failed(_), _) => {}
            }
        }
        for key in state.table.pending.keys() {
            actions.push(Action::ItemApplied { key: *key });
        }
        for (index, puller) in state.pullers.iter().enumerate() {
            if puller.pulls_left > 0 {
                actions.push(Action::PullerQueries { puller: index as u8 });
            }
        }
    }

    fn next_state(&self, last: &RelayState, action: Action) -> Option<RelayState> {
        let mut state = last.clone();
        match action {
            Action::WriterReadsCounter { writer } => {
                let counter = state.table.counter();
                let writer = &mut state.writers[writer as usize];
                writer.counter = Counter::Known(counter);
                if !writer.push_contended {
                    writer.push_reads = writer.push_reads.saturating_add(1);
                }
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
                        let outcome = state.table.transact(&items, self.bounds.window);
                        let writer = &mut state.writers[index];
                        if !writer.push_contended {
                            writer.push_transactions = writer.push_transactions.saturating_add(1);
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
                        self.op_done(index, writer, &mut state.anomalies);
                    }
                    TransactOutcome::Cancelled(reasons) => match self.build_of(index) {
                        Build::New => {
                            let writer = &mut state.writers[index];
                            if let Some(seq) = self.settle_new_build(writer, round, &reasons, &mut state.anomalies) {
                                Self::answer(&mut state, round.op, seq);
                                self.op_done(index, &mut state.writers[index], &mut state.anomalies);
                            }
                        }
                        Build::AddEra => self.settle_add_era(&mut state.writers[index], round, &reasons),
                    },
                }
            }
            Action::ResponseLost { writer } => {
                // Unknown outcome: the push fails and the client re-pushes every op of it.
                state.lost_responses_left -= 1;
                let writer = &mut state.writers[writer as usize];
                *writer = Writer::new();
                writer.mark_contended();
            }
            Action::WriterReadsClaim { writer } => {
                let index = writer as usize;
                let Phase::ReadingClaim { op } = state.writers[index].phase else {
                    unreachable!("a claim is read back only after its condition failed");
                };
                match state.table.read(Key::Claim(op)) {
                    Some(Value::Claim { seq }) => {
                        Self::answer(&mut state, op, seq);
                        self.op_done(index, &mut state.writers[index], &mut state.anomalies);
                    }
                    _ => state.writers[index].phase = Phase::Failed(AppendError::ClaimUnreadable),
                }
            }
            Action::WriterQueriesTop { writer } => {
                let top = state.table.query_top();
                let writer = &mut state.writers[writer as usize];
                writer.floor = top;
                writer.phase = Phase::Ready;
            }
            Action::ItemApplied { key } => state.table.apply(key),
            Action::PullerQueries { puller } => {
                let puller = &mut state.pullers[puller as usize];
                let page = state.table.query_after(puller.cursor, self.bounds.page_limit as usize);
                puller.pulls_left -= 1;
                for (seq, _) in &page {
                    puller.received.insert(*seq);
                }
                if let Some((last, _)) = page.last() {
                    puller.cursor = *last;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.property_defs().iter().map(PropertyDef::to_stateright).collect()
    }

    fn format_action(&self, action: &Action) -> String {
        format!("{action:?}")
    }
}

// ---------------------------------------------------------------------------------------------
// Properties. Each `always` carries its requirement ID; each has a `sometimes` partner that
// shows the fixed design reaches the states the requirement is about.

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
fn r1_no_skip(_: &RelayModel, state: &RelayState) -> bool {
    let committed = state.table.committed_ops();
    state.pullers.iter().all(|puller| {
        committed.range(..=puller.cursor).all(|(seq, _)| puller.received.contains(seq))
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
    for (seq, op) in state.table.committed_ops() {
        if stored.insert(op, seq).is_some() {
            return false;
        }
    }
    state.answers.iter().all(|(op, seqs)| seqs.len() == 1 && seqs.iter().all(|seq| stored.get(op) == Some(seq)))
}

//= specs/relay-append.md#R4
//# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
fn r4_counter_monotonic(_: &RelayModel, state: &RelayState) -> bool {
    !state.table.anomalies.counter_went_back
}

//= specs/relay-append.md#R5
//# With new-build writers only, the stored seqs are exactly 1..n.
fn r5_dense(_: &RelayModel, state: &RelayState) -> bool {
    let committed = state.table.committed_ops();
    let top = committed.keys().next_back().copied().unwrap_or(0);
    (1..=top).all(|seq| committed.contains_key(&seq) || state.legacy_burned.contains(&seq))
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
fn r6_no_wedge(model: &RelayModel, state: &RelayState) -> bool {
    if state.anomalies.gap_paid_twice {
        return false;
    }
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    !actions.is_empty() || state.writers.iter().all(Writer::is_finished)
}

//= specs/relay-append.md#R7
//# An uncontended n-op push costs n transactions and one counter read.
fn r7_carry_forward(_: &RelayModel, state: &RelayState) -> bool {
    !state.anomalies.carry_forward_broken
}

//= specs/relay-append.md#R8
//# The fold watermark never passes an op that was not folded.
fn r8_fold_safe(_: &RelayModel, state: &RelayState) -> bool {
    // A puller folds every op it receives and moves its watermark to its cursor: the watermark
    // passes an unfolded op exactly when a committed op at or below it was never received.
    let committed = state.table.committed_ops();
    state.pullers.iter().all(|puller| {
        let watermark = puller.cursor;
        committed.keys().filter(|seq| **seq <= watermark).all(|seq| puller.received.contains(seq))
    })
}

fn in_flight<'a>(state: &'a RelayState) -> impl Iterator<Item = (&'a Round, &'a TransactOutcome)> + 'a {
    state.writers.iter().filter_map(|writer| match &writer.phase {
        Phase::Sent { round, outcome } => Some((round, outcome)),
        _ => None,
    })
}

fn reach_puller_receives_new_op(_: &RelayModel, state: &RelayState) -> bool {
    let committed = state.table.committed_ops();
    state.pullers.iter().any(|puller| {
        puller.received.iter().any(|seq| committed.get(seq).is_some_and(|op| *op < LEGACY_OP_BASE))
    })
}

fn reach_round_lost_to_stale_counter(_: &RelayModel, state: &RelayState) -> bool {
    in_flight(state).any(|(_, outcome)| match outcome {
        TransactOutcome::Cancelled(reasons) => matches!(
            reasons.first(),
            Some(Reason::ConditionalCheckFailed { old: Some(Value::Counter { .. }) })
        ),
        _ => false,
    })
}

fn reach_repush_finds_its_claim(_: &RelayModel, state: &RelayState) -> bool {
    let image_names_seq = in_flight(state).any(|(_, outcome)| match outcome {
        TransactOutcome::Cancelled(reasons) => reasons
            .iter()
            .any(|reason| matches!(reason, Reason::ConditionalCheckFailed { old: Some(Value::Claim { .. }) })),
        _ => false,
    });
    let reading_back = state.writers.iter().any(|writer| matches!(writer.phase, Phase::ReadingClaim { .. }));
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
        round.predecessor == Some(Condition::AttributeNotExists) && *outcome == TransactOutcome::Committed
    })
}

fn reach_floor_step_commits(_: &RelayModel, state: &RelayState) -> bool {
    in_flight(state).any(|(round, outcome)| round.floor_step && *outcome == TransactOutcome::Committed)
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
    !state.writers.is_empty() && state.writers.iter().all(|writer| writer.phase == Phase::Done)
}

fn reach_push_uncontended(model: &RelayModel, state: &RelayState) -> bool {
    state.writers.iter().enumerate().any(|(index, writer)| {
        writer.phase == Phase::Done && !writer.push_contended && model.build_of(index) == Build::New
    })
}

fn reach_puller_cursor_advanced_twice(_: &RelayModel, state: &RelayState) -> bool {
    state.pullers.iter().any(|puller| puller.received.len() >= 3)
}

const ALWAYS: &[(&str, &str, fn(&RelayModel, &RelayState) -> bool)] = &[
    ("R1", "R1 no-skip", r1_no_skip),
    ("R2", "R2 unique-seq", r2_unique_seq),
    ("R3", "R3 once-per-op-id", r3_once_per_op_id),
    ("R4", "R4 counter-monotonic", r4_counter_monotonic),
    ("R5", "R5 dense", r5_dense),
    ("R6", "R6 no-wedge", r6_no_wedge),
    ("R7", "R7 carry-forward", r7_carry_forward),
    ("R8", "R8 fold-safe", r8_fold_safe),
];

const SOMETIMES: &[(&str, &str, fn(&RelayModel, &RelayState) -> bool)] = &[
    ("R1", "R1 reach: a puller receives a new op", reach_puller_receives_new_op),
    ("R1", "R1 reach: an op becomes visible after a later op's transaction was sent", reach_op_visible_after_later_round_sent),
    ("R2", "R2 reach: a round is lost to a stale counter", reach_round_lost_to_stale_counter),
    ("R3", "R3 reach: a re-push finds its own claim", reach_repush_finds_its_claim),
    ("R4", "R4 reach: a floor step over occupied seqs commits", reach_floor_step_commits),
    ("R5", "R5 reach: a legacy gap is crossed by a flip", reach_gap_crossed_by_flip),
    ("R6", "R6 reach: a round is lost to a conflict", reach_round_lost_to_conflict),
    ("R6", "R6 reach: every writer finishes its push", reach_every_writer_finished),
    ("R7", "R7 reach: a push completes uncontended", reach_push_uncontended),
    ("R8", "R8 reach: a puller folds three ops", reach_puller_cursor_advanced_twice),
];

impl ModelSpec for RelayModel {
    const NAME: &'static str = "relay";
    const VARIANTS: &'static [&'static str] = &["add-era", "counter-only", "fixed", "mixed"];
    const BOUNDS: &'static [BoundSpec] = BOUNDS;
    const VARIANT_DEFAULTS: &'static [(&'static str, &'static str, u32)] = VARIANT_DEFAULTS;

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
                second_writer_repush: bounds.get("second_writer_repush") == 1,
                lost_responses_max: narrow("lost_responses_max"),
                pullers: narrow("pullers"),
                pulls_per_puller: narrow("pulls_per_puller"),
                page_limit: narrow("page_limit"),
                legacy,
                lost_rounds_max: narrow("lost_rounds_max"),
                window: bounds.get("window") == 1,
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

    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        if property.kind == Kind::Sometimes {
            return self.expected_reach(property.name);
        }
        let violated: &[&str] = match self.variant {
            // The seed's reproduction; R5 falls with it (a re-pushed op burns its ADD seq).
            Variant::AddEra => &["R1", "R5", "R8"],
            Variant::CounterOnly => &["R1", "R8"],
            Variant::Fixed => &[],
            // The ordering guarantee holds only once every writer runs the new build.
            Variant::Mixed => &["R1", "R5", "R8"],
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
}

impl RelayModel {
    /// Which reachability properties each variant's CI bounds reach. The fixed design reaches
    /// every one; the others are pinned as they are, so a change in reach is noticed.
    fn expected_reach(&self, name: &str) -> Verdict {
        let unreached: &[&str] = match self.variant {
            Variant::Fixed => &[],
            // No window, no counter condition, no re-push, no legacy data, no new-build writer.
            Variant::AddEra => &[
                "R1 reach: an op becomes visible after a later op's transaction was sent",
                "R2 reach: a round is lost to a stale counter",
                "R3 reach: a re-push finds its own claim",
                "R6 reach: a round is lost to a conflict",
                "R4 reach: a floor step over occupied seqs commits",
                "R5 reach: a legacy gap is crossed by a flip",
                "R7 reach: a push completes uncontended",
            ],
            Variant::CounterOnly => &[
                "R4 reach: a floor step over occupied seqs commits",
                "R5 reach: a legacy gap is crossed by a flip",
            ],
            // An ADD-era writer's burned seq is a legacy gap to the new writer: it is crossed.
            Variant::Mixed => &[
                "R3 reach: a re-push finds its own claim",
                "R4 reach: a floor step over occupied seqs commits",
                "R8 reach: a puller folds three ops",
            ],
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
    let suffix = if model.build_of(writer as usize) == Build::AddEra { " (ADD-era)" } else { "" };
    format!("W{}{suffix}", writer + 1)
}

fn describe_items(round: &Round, build: Build) -> String {
    let mut parts = Vec::new();
    if build == Build::New {
        parts.push(format!("counter {}->{}", round.expected, round.seq));
    }
    parts.push(format!("claim {}", op_name(round.op)));
    match round.predecessor {
        Some(Condition::AttributeExists) => parts.push(format!("check op {} exists", round.seq - 1)),
        Some(Condition::AttributeNotExists) => parts.push(format!("check op {} absent", round.seq - 1)),
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

pub fn describe(model: &RelayModel, before: &RelayState, action: &Action, after: &RelayState) -> String {
    match *action {
        Action::WriterReadsCounter { writer } => {
            format!("{} Query seq=0 (consistent) -> next_seq {}", writer_name(model, writer), before.table.counter())
        }
        Action::WriterAddsToCounter { writer } => match &after.writers[writer as usize].phase {
            Phase::Allocated { seq } => {
                format!("{} UpdateItem ADD next_seq 1 -> {seq}", writer_name(model, writer))
            }
            _ => format!("{} UpdateItem ADD next_seq 1 -> TransactionConflictException", writer_name(model, writer)),
        },
        Action::WriterSendsRound { writer } => match &after.writers[writer as usize].phase {
            Phase::Sent { round, outcome } => format!(
                "{} sends {} -> {}",
                writer_name(model, writer),
                describe_items(round, model.build_of(writer as usize)),
                describe_outcome(outcome)
            ),
            other => format!("{} cannot send a round: {other:?}", writer_name(model, writer)),
        },
        Action::WriterReceivesResponse { writer } => {
            let name = writer_name(model, writer);
            let Phase::Sent { round, outcome } = &before.writers[writer as usize].phase else {
                return format!("{name} receives a response");
            };
            let answered = after.writers[writer as usize].next_op > before.writers[writer as usize].next_op
                || after.writers[writer as usize].phase == Phase::Done;
            let next = match &after.writers[writer as usize].phase {
                Phase::Failed(error) => format!("append fails: {error:?}"),
                _ if answered && *outcome != TransactOutcome::Committed => {
                    let seq = after.answers.get(&round.op).and_then(|seqs| seqs.iter().next()).copied().unwrap_or(0);
                    format!("claim exists: {} answered with its seq {seq}", op_name(round.op))
                }
                Phase::ReadingClaim { .. } => "claim exists: read it back".to_string(),
                Phase::QueryingTop => "seq taken: find the top".to_string(),
                _ if *outcome == TransactOutcome::Committed => {
                    format!("{} stored at {}", op_name(round.op), round.seq)
                }
                _ => match (after.writers[writer as usize].flip, after.writers[writer as usize].counter) {
                    (Some(seq), _) => format!("legacy gap below {seq}: flip the check"),
                    (None, Counter::Known(hint)) => format!("lost round (counter {hint})"),
                    (None, Counter::Unknown) => "lost round (no hint)".to_string(),
                },
            };
            format!("{name} receives {}: {next}", describe_outcome(outcome))
        }
        Action::ResponseLost { writer } => {
            format!("response to {} lost after commit: the push will be re-sent", writer_name(model, writer))
        }
        Action::WriterReadsClaim { writer } => {
            let Phase::ReadingClaim { op } = before.writers[writer as usize].phase else {
                return format!("{} reads a claim", writer_name(model, writer));
            };
            let found = match before.table.read(Key::Claim(op)) {
                Some(value) => value.to_string(),
                None => "nothing".to_string(),
            };
            format!("{} Query claim {} -> {found}", writer_name(model, writer), op_name(op))
        }
        Action::WriterQueriesTop { writer } => format!(
            "{} Query seq>0 reverse limit 1 -> {}",
            writer_name(model, writer),
            before.table.query_top().map_or("[]".to_string(), |seq| format!("[{seq}]"))
        ),
        Action::ItemApplied { key } => {
            let value = before.table.pending.get(&key).map_or(String::new(), |value| format!(" ({value})"));
            format!("{key} applied{value}")
        }
        Action::PullerQueries { puller } => {
            let cursor = before.pullers[puller as usize].cursor;
            let page = before.table.query_after(cursor, model.bounds.page_limit as usize);
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

#[cfg(test)]
mod tests;
