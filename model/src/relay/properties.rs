//! R1-R9 as state predicates, each `always` carrying its requirement ID, and the `sometimes`
//! partners that show the fixed design reaches the states each requirement is about.
//!
//! Invariants: a property reads the table, the answers and the recorded anomalies, never a
//! flag a mutation sets; the declaration tables are the one place a name meets its ID.

use super::*;

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
        .all(|(op, seqs)| seqs.len() == 1 && seqs.iter().all(|seq| stored.get(op) == Some(&seq)))
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
            .any(|seq| committed.get(&seq).is_some_and(|op| *op < LEGACY_OP_BASE))
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
                .range(..high)
                .any(|(seq, _)| !folder.folded.contains(seq))
        })
    })
}

fn reach_truncated(_: &RelayModel, state: &RelayState) -> bool {
    !state.truncated.is_empty()
}

/// A property as declared: requirement ID, name, condition.
pub(super) type Declared = (
    &'static str,
    &'static str,
    fn(&RelayModel, &RelayState) -> bool,
);

pub(super) const ALWAYS: &[Declared] = &[
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

pub(super) const SOMETIMES: &[Declared] = &[
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
