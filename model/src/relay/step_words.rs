//! One step in the protocol's words, for traces, the HTML report and the Explorer: the request
//! a writer sends (items of a TransactWriteItems in request order), the response it gets, what a
//! puller's page, a stream record or a truncation did.
//!
//! Invariants: actors are numbered from 1 (`W1`, `P1`, `F1`), op ids are letters, no Rust
//! `Debug` text.

use super::*;

pub(super) fn writer_name(model: &RelayModel, writer: u8) -> String {
    let suffix = if model.build_of(writer as usize) == Build::AddEra {
        " (ADD-era)"
    } else {
        ""
    };
    format!("W{}{suffix}", writer + 1)
}

pub(super) fn describe_items(round: &Round, build: Build) -> String {
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

pub(super) fn describe_outcome(outcome: &TransactOutcome) -> String {
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
        Action::WriterReadsCounter { writer } => counter_read_words(model, before, writer),
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
        Action::WriterReceivesResponse { writer } => response_words(model, before, writer, after),
        Action::ResponseLost { writer } => format!(
            "response to {} lost after commit: a lost round without a hint, the same op is retried",
            writer_name(model, writer)
        ),
        Action::WriterReadsClaims { writer } => claims_read_words(model, before, writer),
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
        Action::PullerQueries { puller } => puller_words(model, before, puller, after),
    }
}

/// A counter read, preceded by the push's claim check when it is the push's first.
fn counter_read_words(model: &RelayModel, before: &RelayState, writer: u8) -> String {
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

/// A round's response and what the writer makes of it: stored, answered from its claim, a
/// lost round (with or without the counter image), a flip over a legacy gap.
fn response_words(
    model: &RelayModel,
    before: &RelayState,
    writer: u8,
    after: &RelayState,
) -> String {
    let name = writer_name(model, writer);
    let Phase::Sent { round, outcome } = &before.writers[writer as usize].phase else {
        return format!("{name} receives a response");
    };
    let answered = after.writers[writer as usize].next_op > before.writers[writer as usize].next_op
        || after.writers[writer as usize].phase == Phase::Done;
    let next = match &after.writers[writer as usize].phase {
        Phase::Failed(error) => format!("append fails: {error:?}"),
        Phase::ReadingClaims => {
            let seq = after
                .answers
                .get(&round.op)
                .and_then(|seqs| seqs.iter().next())
                .unwrap_or(0);
            format!("claim exists: {} answered with its seq {seq}; read the claims of the rest of the push", op_name(round.op))
        }
        _ if answered && *outcome != TransactOutcome::Committed => {
            let seq = after
                .answers
                .get(&round.op)
                .and_then(|seqs| seqs.iter().next())
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

/// The re-push fast path's batched read of the claims of the rest of the push.
fn claims_read_words(model: &RelayModel, before: &RelayState, writer: u8) -> String {
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

fn puller_words(model: &RelayModel, before: &RelayState, puller: u8, after: &RelayState) -> String {
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
