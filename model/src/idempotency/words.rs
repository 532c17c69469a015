//! The idempotency model's state role by role in the step text's words, for the HTML report's
//! "changed" column and the Explorer's picture: clients `C1`, the cache row of key `k` with its
//! generation, lease and expiry in clock ticks, HTTP answers by status, and what each
//! generation's claim, handler and finalize did.
//!
//! Invariants: no Rust `Debug` text in any role or value; a role that holds nothing (no row, a
//! budget spent, no stall) is absent; one role per client and per generation, so a step's
//! changes name who it moved.

use super::{Answer, Ending, IdempotencyState, Received, RowStatus, Seen, Stage, Stored};
use crate::view::element_name;

fn stored_words(stored: Stored) -> &'static str {
    match stored {
        Stored::Full => "the full body",
        Stored::Sentinel => "the too_large sentinel",
        Stored::Empty => "an EMPTY body",
    }
}

fn answer_words(answer: Answer) -> String {
    let expired = |row_expired: bool| if row_expired { " (row expired)" } else { "" };
    match answer {
        Answer::Fresh { success, received } => format!(
            "answered fresh: {}{}",
            if success { "2xx" } else { "non-2xx" },
            received_words(received)
        ),
        Answer::Replay {
            stored,
            marked,
            origin,
            row_expired,
        } => format!(
            "answered a replay of generation {origin}'s {}, {}{}",
            stored_words(stored),
            if marked { "marked" } else { "UNMARKED" },
            expired(row_expired)
        ),
        Answer::Conflict { row_expired } => {
            format!("answered 409: in flight{}", expired(row_expired))
        }
        Answer::Mismatch { row_expired } => {
            format!("answered 422: fingerprint mismatch{}", expired(row_expired))
        }
        Answer::Unavailable => {
            "answered 503: the claim failed, or (atomic) the effects did not commit".to_string()
        }
        Answer::OutcomeUnknown { row_expired } => {
            format!("answered 409: outcome unknown{}", expired(row_expired))
        }
    }
}

/// What of the handler's body reached the client, in words.
fn received_words(received: Received) -> &'static str {
    match (received.head, received.tail) {
        (true, true) => " with the body up to the cap and its tail",
        (true, false) => " with the body up to the cap",
        (false, true) => " with the over-cap tail ALONE",
        (false, false) => " with an EMPTY body",
    }
}

fn stage_words(stage: Stage) -> String {
    match stage {
        Stage::Ready => "ready to send".to_string(),
        Stage::Claiming { attempt } => {
            format!("claim statement in flight (attempt {})", attempt + 1)
        }
        Stage::Reading { attempt } => format!(
            "reading the row the claim did not take (attempt {})",
            attempt + 1
        ),
        Stage::Running { generation } => format!("handler runs (generation {generation})"),
        Stage::Capturing {
            generation,
            outcome,
        } => format!(
            "middleware reads the body: {} (generation {generation})",
            outcome.words()
        ),
        Stage::Finalizing {
            generation,
            write,
            attempts,
            ..
        } => format!(
            "finalize {} in flight (generation {generation}, attempt {})",
            write.words(),
            attempts + 1
        ),
        Stage::Streaming { generation, .. } => {
            format!("streaming the over-cap tail (generation {generation})")
        }
        Stage::Guarding {
            generation,
            attempts,
        } => format!(
            "gone; the drop guard's finalize is in flight (generation {generation}, attempt {})",
            attempts + 1
        ),
        Stage::Done(answer) => answer_words(answer),
        Stage::Gone => "gone".to_string(),
    }
}

fn seen_words(seen: Seen) -> &'static str {
    match seen {
        Seen::Absent => "no row",
        Seen::Expired => "an expired row",
        Seen::OtherFingerprint => "a row of another fingerprint",
        Seen::LiveLease => "a processing row under a live lease",
        Seen::LeaseLapsed => "a processing row whose lease lapsed",
        Seen::Failed => "a failed row",
        Seen::Succeeded => "a succeeded row",
    }
}

fn ending_words(ending: Ending) -> &'static str {
    match ending {
        Ending::Applied => "finalize applied",
        Ending::Lost => "finalize lost: no row matched",
        Ending::Unknown => "finalize unknown: every attempt answered an error",
        Ending::Cancelled => "cancelled before a non-2xx was finalized",
        Ending::Died => "the process died",
        Ending::Reconciled => "its unknown outcome reconciled",
    }
}

/// The state by role.
pub(super) fn roles(state: &IdempotencyState) -> Vec<(String, String)> {
    let mut roles = vec![("clock".to_string(), format!("tick {}", state.now))];
    for (index, client) in state.clients.iter().enumerate() {
        let name = element_name("clients", index);
        roles.push((
            format!("{name}.request"),
            format!(
                "POST /transfers Idempotency-Key k fp {:?}",
                client.fingerprint
            ),
        ));
        roles.push((format!("{name}.stage"), stage_words(client.stage)));
        if client.stalled {
            roles.push((
                format!("{name}.stalled"),
                "its process stalled past the lease".to_string(),
            ));
        }
    }
    if let Some(row) = &state.row {
        let status = match row.status {
            RowStatus::Processing => "processing".to_string(),
            RowStatus::Succeeded { stored, origin } => {
                format!(
                    "succeeded with {} (by generation {origin})",
                    stored_words(stored)
                )
            }
            RowStatus::Failed { origin } => format!("failed (by generation {origin})"),
        };
        roles.push((
            "row k".to_string(),
            format!(
                "{status}, fp {:?}, generation {}, lease until tick {}, expires at tick {}",
                row.fingerprint, row.generation, row.lease_expires_at, row.expires_at
            ),
        ));
    }
    if state.generations > 0 {
        roles.push((
            "generations claimed".to_string(),
            state.generations.to_string(),
        ));
    }
    let budget = &state.budget;
    for (left, what) in [
        (budget.ticks, "clock ticks"),
        (budget.finalize_faults, "finalize faults"),
        (budget.claim_faults, "claim faults"),
        (budget.cancellations, "cancellations"),
        (budget.process_faults, "process faults"),
    ] {
        if left > 0 {
            roles.push((format!("{what} left"), left.to_string()));
        }
    }
    history_roles(state, &mut roles);
    roles
}

/// One role per generation: what its claim read, how its handler answered, what its client
/// received, how its finalizing ended.
fn history_roles(state: &IdempotencyState, roles: &mut Vec<(String, String)>) {
    let history = &state.history;
    for generation in 1..=state.generations {
        let mut parts = Vec::new();
        if let Some(seen) = history.claimed_over.get(&generation) {
            parts.push(format!("claimed over {}", seen_words(*seen)));
        }
        if let Some(fingerprint) = history.ran_with.get(&generation) {
            parts.push(format!("handler ran with fp {fingerprint:?}"));
        }
        if let Some(outcome) = history.handler.get(&generation) {
            parts.push(format!("handler returned {}", outcome.words()));
        }
        if history.effects.contains(&generation) {
            parts.push("its effects committed".to_string());
        }
        if let Some(received) = history.delivered.get(&generation) {
            let exact = history
                .handler
                .get(&generation)
                .is_some_and(|outcome| *received == Received::exactly(*outcome));
            parts.push(if exact {
                "its client received the exact body".to_string()
            } else {
                format!("its client received{}", received_words(*received))
            });
        }
        let errors = history
            .finalize_errors
            .get(&generation)
            .copied()
            .unwrap_or(0);
        if errors > 0 {
            parts.push(format!("{errors} finalize statements answered an error"));
        }
        for (written, stored) in &history.written {
            if *written == generation {
                parts.push(format!("wrote {} to the table", stored_words(*stored)));
            }
        }
        if let Some(ending) = history.ended.get(&generation) {
            parts.push(ending_words(*ending).to_string());
        }
        if !parts.is_empty() {
            roles.push((format!("generation {generation}"), parts.join("; ")));
        }
    }
    if history.lifetime_start > 0 {
        roles.push((
            "key lifetime".to_string(),
            format!("began with generation {}", history.lifetime_start),
        ));
    }
}
