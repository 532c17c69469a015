//! The relay state role by role in the step text's words, for the HTML report's "changed"
//! column and the Explorer's picture: items as the table names them (`table: claim a` =
//! `claimed seq 1`, `table: op 1` = `op_id a`, pending ones marked), writers `W1`, pullers `P1`,
//! fold consumers `F1`, op ids as letters and ops by their seq, phases as the protocol step they
//! wait on.
//!
//! Invariants: no Rust `Debug` text in any role or value; a role that holds nothing (no floor,
//! no flip, a flag not raised, an anomaly not met) is absent, so a step's changes list only what
//! it did; actors are numbered from 1 as everywhere a reviewer reads them.

use super::{
    describe_items, describe_outcome, Counter, Phase, RelayModel, RelayState, TransactOutcome,
    LEGACY_OP_BASE,
};
use crate::ddb::{op_name, Key, OpId, SeqSet, Value};
use crate::view::element_name;

fn seqs(seqs: &SeqSet) -> String {
    match seqs.len() {
        0 => "none".to_string(),
        _ => seqs
            .iter()
            .map(|seq| seq.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// An op id as the step text names it: a letter, or the legacy op an earlier era stored at a seq.
fn op_words(op: OpId) -> String {
    match op.checked_sub(LEGACY_OP_BASE) {
        Some(seq) => format!("legacy op of seq {seq}"),
        None => op_name(op).to_string(),
    }
}

fn key_words(key: &Key) -> String {
    match key {
        Key::Counter => "counter".to_string(),
        Key::Claim(op) => format!("claim {}", op_words(*op)),
        Key::Op(seq) => format!("op {seq}"),
    }
}

fn value_words(value: &Value) -> String {
    match value {
        Value::Counter { next_seq } => format!("next_seq {next_seq}"),
        Value::Claim { seq } => format!("claimed seq {seq}"),
        Value::Op { op_id } => format!("op_id {}", op_words(*op_id)),
    }
}

/// A writer's phase as the step it is at.
fn phase_words(model: &RelayModel, writer: usize, phase: &Phase) -> String {
    match phase {
        Phase::Ready => "ready for its next round".to_string(),
        Phase::Allocated { seq } => format!("holds seq {seq} from UpdateItem ADD"),
        Phase::Sent { round, outcome } => format!(
            "sent {} -> {}{}",
            describe_items(round, model.build_of(writer)),
            describe_outcome(outcome),
            if *outcome == TransactOutcome::Committed {
                ""
            } else {
                " (response in flight)"
            }
        ),
        Phase::ReadingClaim { op } => format!("reading claim {}", op_words(*op)),
        Phase::ReadingClaims => "reading the claims of the rest of its push".to_string(),
        Phase::QueryingTop => "querying the top op (seq > 0, newest first)".to_string(),
        Phase::Done => "push done".to_string(),
        Phase::Failed(error) => format!("push failed: {error:?}"),
    }
}

/// The state by role.
pub(super) fn roles(model: &RelayModel, state: &RelayState) -> Vec<(String, String)> {
    let mut roles: Vec<(String, String)> = Vec::new();
    table_roles(state, &mut roles);
    for (index, writer) in state.writers.iter().enumerate() {
        writer_roles(model, index, writer, &mut roles);
    }
    reader_roles(state, &mut roles);
    stream_roles(state, &mut roles);
    roles
}

/// The items as the table holds them, visible then pending, and the table's anomalies.
fn table_roles(state: &RelayState, roles: &mut Vec<(String, String)>) {
    for (key, value) in &state.table.applied {
        roles.push((format!("table: {}", key_words(key)), value_words(value)));
    }
    for (key, value) in &state.table.pending {
        roles.push((
            format!("table: {} (pending)", key_words(key)),
            format!("{}, committed, not yet visible", value_words(value)),
        ));
    }
    let table = &state.table.anomalies;
    for (met, what) in [
        (table.op_overwritten, "an op item was overwritten"),
        (table.counter_went_back, "the counter went back"),
    ] {
        if met {
            roles.push((format!("table: anomaly: {what}"), "met".to_string()));
        }
    }
}

/// One writer: its op, phase and counter, and what its push has met so far.
fn writer_roles(
    model: &RelayModel,
    index: usize,
    writer: &super::Writer,
    roles: &mut Vec<(String, String)>,
) {
    let name = element_name("writers", index);
    let push = &model.writers[index].1;
    let op = match push.get(writer.next_op as usize) {
        Some(op) => format!(
            "{} (op {} of {} in its push)",
            op_words(*op),
            writer.next_op + 1,
            push.len()
        ),
        None => "none left".to_string(),
    };
    roles.push((format!("{name}.op"), op));
    roles.push((
        format!("{name}.phase"),
        phase_words(model, index, &writer.phase),
    ));
    roles.push((
        format!("{name}.counter"),
        match writer.counter {
            Counter::Unknown => "unknown".to_string(),
            Counter::Known(next_seq) => format!("next_seq {next_seq}"),
        },
    ));
    push_roles(&name, push, writer, roles);
}

/// What a writer's push has met so far: a floor or flip, lost rounds, ops answered ahead,
/// rounds paid; absent while nothing happened.
fn push_roles(
    name: &str,
    push: &[OpId],
    writer: &super::Writer,
    roles: &mut Vec<(String, String)>,
) {
    if let Some(floor) = writer.floor {
        roles.push((
            format!("{name}.floor"),
            format!("next round at seq {floor}"),
        ));
    }
    if let Some(flip) = writer.flip {
        roles.push((
            format!("{name}.flip"),
            format!("seq {flip} checks op {} absent", flip.saturating_sub(1)),
        ));
    }
    if writer.lost_in_a_row > 0 {
        roles.push((
            format!("{name}.lost rounds in a row"),
            writer.lost_in_a_row.to_string(),
        ));
    }
    let ahead: Vec<String> = push
        .iter()
        .enumerate()
        .filter(|(position, _)| writer.answered_ahead & (1 << position) != 0)
        .map(|(_, op)| op_words(*op))
        .collect();
    if !ahead.is_empty() {
        roles.push((format!("{name}.answered ahead"), ahead.join(", ")));
    }
    if writer.push_rounds > 0 {
        roles.push((
            format!("{name}.rounds this push"),
            writer.push_rounds.to_string(),
        ));
    }
    for (raised, flag, words) in [
        (writer.push_paid_extra, "push paid an extra round", "yes"),
        (writer.push_contended, "push contended", "yes"),
        (
            writer.retrying_lost_response,
            "retrying",
            "after a lost response",
        ),
    ] {
        if raised {
            roles.push((format!("{name}.{flag}"), words.to_string()));
        }
    }
}

/// The readers of the stream: pullers and fold consumers.
fn reader_roles(state: &RelayState, roles: &mut Vec<(String, String)>) {
    for (index, puller) in state.pullers.iter().enumerate() {
        let name = element_name("pullers", index);
        roles.push((format!("{name}.cursor"), format!("seq {}", puller.cursor)));
        roles.push((format!("{name}.received"), seqs(&puller.received)));
        roles.push((format!("{name}.pulls left"), puller.pulls_left.to_string()));
    }
    for (index, folder) in state.folders.iter().enumerate() {
        let name = format!("F{}", index + 1);
        roles.push((format!("{name}.folded"), seqs(&folder.folded)));
        roles.push((
            format!("{name}.watermark"),
            format!("seq {}", folder.watermark),
        ));
    }
}

/// What the stream answered and lost, its legacy gaps and truncations, the writers' anomalies.
fn stream_roles(state: &RelayState, roles: &mut Vec<(String, String)>) {
    for (op, answered) in &state.answers {
        roles.push((
            format!("answered {}", op_words(*op)),
            format!("seq {}", seqs(answered)),
        ));
    }
    if state.lost_responses_left > 0 {
        roles.push((
            "lost responses left".to_string(),
            state.lost_responses_left.to_string(),
        ));
    }
    if !state.legacy_burned.is_empty() {
        roles.push((
            "legacy gaps".to_string(),
            format!("seq {}", seqs(&state.legacy_burned)),
        ));
    }
    for (seq, op) in &state.truncated {
        roles.push((
            format!("truncated op {seq}"),
            format!("op_id {}", op_words(*op)),
        ));
    }
    if state.truncations_left > 0 {
        roles.push((
            "truncations left".to_string(),
            state.truncations_left.to_string(),
        ));
    }
    let writers = &state.anomalies;
    for (met, what) in [
        (writers.carry_forward_broken, "carry-forward broken"),
        (writers.gap_paid_twice, "a legacy gap paid twice"),
        (writers.deadline_overrun, "a round sent past its deadline"),
        (writers.counter_op_truncated, "the counter's op truncated"),
        (
            writers.stored_op_taken_for_gap,
            "a stored op taken for a legacy gap",
        ),
    ] {
        if met {
            roles.push((format!("anomaly: {what}"), "met".to_string()));
        }
    }
}
