//! The relay's liveness (specs/relay-append.md, "Liveness: how it is checked"): R6 no-wedge and
//! R10 pull-progress as the checker decides them, the weak-fairness family of every step, and
//! where `pulls_per_puller` cuts a run.
//!
//! Families: one per writer (`W1`, ...) and per puller (`P1`, ...) — each a process that keeps
//! taking its steps — the server applying committed items (`server`), the fold consumer (`F1`)
//! and the truncator; a lost response is a fault, in no family.

use super::{Action, RelayModel, RelayState, Writer};
use crate::check::LivenessDef;

const WRITER_FAMILIES: [&str; 8] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8"];
const PULLER_FAMILIES: [&str; 4] = ["P1", "P2", "P3", "P4"];

/// The families of the actors the symmetry permutes, in its slot order: every writer's, then
/// every puller's (relay/scale.rs).
pub(super) fn permuted_families(model: &RelayModel) -> Vec<&'static str> {
    WRITER_FAMILIES[..model.writers.len()]
        .iter()
        .chain(&PULLER_FAMILIES[..usize::from(model.bounds.pullers)])
        .copied()
        .collect()
}

pub(super) fn definitions() -> Vec<LivenessDef<RelayModel>> {
    vec![
        LivenessDef {
            id: "R6",
            name: "R6 no-wedge",
            trigger: None,
            goal: r6_every_push_ends,
            fair: &["W*", "server"],
        },
        LivenessDef {
            id: "R10",
            name: "R10 pull-progress",
            trigger: Some(r10_op_not_yet_pulled),
            goal: r10_every_op_pulled,
            fair: &["P*", "server"],
        },
    ]
}

pub(super) fn family_of(action: &Action) -> Option<&'static str> {
    match *action {
        // A lost response is a fault: no run is obliged to lose one.
        Action::ResponseLost { .. } => None,
        Action::WriterReadsCounter { writer }
        | Action::WriterAddsToCounter { writer }
        | Action::WriterSendsRound { writer }
        | Action::WriterReceivesResponse { writer }
        | Action::WriterReadsClaim { writer }
        | Action::WriterReadsClaims { writer }
        | Action::WriterQueriesTop { writer }
        | Action::PushDeadlinePasses { writer } => Some(WRITER_FAMILIES[writer as usize]),
        Action::ItemApplied { .. } => Some("server"),
        Action::PullerQueries { puller } => Some(PULLER_FAMILIES[puller as usize]),
        Action::FolderReceivesRecord { .. } => Some("F1"),
        Action::TruncatorDeletes { .. } => Some("truncator"),
    }
}

/// `pulls_per_puller` bounds the pages with ops a puller takes: past it, a pull that would
/// return ops is withheld by the bound, and the run is cut there (R10).
pub(super) fn families_cut(model: &RelayModel, state: &RelayState, cut: &mut Vec<&'static str>) {
    for (index, puller) in state.pullers.iter().enumerate() {
        if puller.pulls_left == 0 && !model.page_of(state, puller).is_empty() {
            cut.push(PULLER_FAMILIES[index]);
        }
    }
}

//= specs/relay-append.md#R6
//# Every push eventually ends: all its ops answered, or the deadline's typed error.
fn r6_every_push_ends(_: &RelayModel, state: &RelayState) -> bool {
    state.writers.iter().all(Writer::is_finished)
}

/// Some puller has not received an op that is stored (visible, pending or truncated since).
fn r10_op_not_yet_pulled(model: &RelayModel, state: &RelayState) -> bool {
    !r10_every_op_pulled(model, state)
}

//= specs/relay-append.md#R10
//# Every stored op is eventually received by every puller that keeps pulling.
fn r10_every_op_pulled(_: &RelayModel, state: &RelayState) -> bool {
    let stored = state.stored_ops();
    state
        .pullers
        .iter()
        .all(|puller| stored.keys().all(|seq| puller.received.contains(seq)))
}

/// The liveness mutations that violate R6, each with the bounds where it shows: what the
/// reductions and the symmetry are checked against (relay/liveness/tests.rs,
/// check/reduction_tests.rs).
#[cfg(test)]
pub(crate) const R6_VIOLATING_MUTATIONS: [(super::Mutation, &[(&str, u32)]); 3] = [
    (
        super::Mutation::TopQueryForgetsFloor,
        &[
            ("push_rounds_max", 0),
            ("lost_responses_max", 0),
            ("legacy", 2),
        ],
    ),
    (
        super::Mutation::ClaimAnswerSentAgain,
        &[
            ("push_rounds_max", 0),
            ("lost_responses_max", 0),
            ("legacy", 0),
        ],
    ),
    (
        super::Mutation::NoFlip,
        &[
            ("legacy", 1),
            ("lost_responses_max", 0),
            ("push_rounds_max", 0),
        ],
    ),
];

#[cfg(test)]
mod tests;
