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
//!
//! Layout (one job per file): [`state`] the writers, pullers, fold consumers and the table;
//! [`actions`] the action vocabulary and which actions are enabled (the reductions' pruning
//! included); [`transitions`] one step function per action; [`transaction`] the transaction a
//! round sends (counter condition, claim, predecessor check, op put); [`response`] what a
//! writer does with its round's response (claim answers, lost rounds, the predecessor flip);
//! [`properties`] R1-R9 and their `sometimes` partners; [`liveness`] R6 and R10; [`spec`]
//! variants, the bound table and the expected verdicts; [`step_words`] and [`words`] the
//! protocol words; [`encoding`] the ITF traces; [`scale`] symmetry and independence.

use crate::check::{BoundSpec, Bounds, Kind, ModelSpec, PropertyDef, SpecError, Verdict};
use crate::ddb::{
    op_name, Condition, Key, OpId, Operation, Reason, Seq, SeqSet, Table, TransactItem,
    TransactOutcome, Value, SEQ_MAX,
};
use crate::sorted_map::SortedMap;
use serde::{Deserialize, Serialize};
use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet};

mod actions;
pub mod encoding;
mod liveness;
#[cfg(test)]
pub(crate) use liveness::R6_VIOLATING_MUTATIONS;
mod properties;
mod response;
mod scale;
mod spec;
mod state;
mod step_words;
mod transaction;
mod transitions;
mod words;

#[cfg(test)]
mod tests;

pub use actions::Action;
use properties::{ALWAYS, SOMETIMES};
pub use spec::{Legacy, RelayBounds, Variant, BOUNDS, BOUND_SETS, VARIANT_DEFAULTS};
pub use state::*;
pub use step_words::describe;
use step_words::{describe_items, describe_outcome};

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

    fn initial_table(legacy: Legacy) -> (Table, SeqSet) {
        let mut table = Table::default();
        let mut burned = SeqSet::new();
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
                            received: SeqSet::new(),
                            pulls_left: self.bounds.pulls_per_puller,
                        })
                        .collect(),
                    folders,
                    answers: SortedMap::new(),
                    lost_responses_left: self.bounds.lost_responses_max,
                    legacy_burned,
                    truncated: SortedMap::new(),
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
        self.step(&mut state, action);
        Self::forget_finished_history(last, &mut state);
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
