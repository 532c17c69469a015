//! M1-M10 as state predicates over the row, the clients' answers and the [`History`] every
//! variant records the same way. Each `always` has a `sometimes` partner showing its interesting
//! states are reached.
//!
//! What a property compares is computed apart from the step it judges: what a client received
//! against what its handler produced ([`Received::exactly`] of the outcome), a replay against
//! what the table was written with, an abandoned finalize against the errors its statements got.

use super::*;

fn answers(state: &IdempotencyState) -> impl Iterator<Item = Answer> + '_ {
    state
        .clients
        .iter()
        .filter_map(|client| match client.stage {
            Stage::Done(answer) => Some(answer),
            _ => None,
        })
}

/// Whether some client still works on `generation` (handler, capture, inline or guard finalize).
fn finalizer_pending(state: &IdempotencyState, generation: u8) -> bool {
    state
        .clients
        .iter()
        .any(|client| client.stage.working_on() == Some(generation))
}

/// Generations of the key's current lifetime whose handler's effects committed.
fn committed_in_lifetime(state: &IdempotencyState) -> impl Iterator<Item = u8> + '_ {
    state
        .history
        .effects
        .iter()
        .filter(|generation| *generation >= state.history.lifetime_start)
}

//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
/// Observed as effects: within one lifetime of the key (until its row expires), the effects of
/// at most one handler run committed (a 2xx, or in `atomic` the commit that carries them).
pub fn m1_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    committed_in_lifetime(state).count() <= 1
}

pub fn m1_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| matches!(answer, Answer::Replay { .. }))
}

/// `atomic`: a run answered a 2xx whose effects never committed, and a later run of the same
/// lifetime committed its own.
pub fn m1_rolled_back_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let start = state.history.lifetime_start;
    let rolled_back = state.history.handler.iter().find(|(generation, outcome)| {
        **generation >= start && outcome.is_success() && !state.history.effects.contains(generation)
    });
    rolled_back.is_some_and(|(first, _)| committed_in_lifetime(state).any(|later| later > *first))
}

/// `fail-closed`: a request was answered 409 outcome-unknown.
pub fn m1_held_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| matches!(answer, Answer::OutcomeUnknown { .. }))
}

/// `fail-closed`: the reconciler resolved a claim's unknown outcome.
pub fn m1_reconciled_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    state
        .history
        .ended
        .values()
        .any(|ending| *ending == Ending::Reconciled)
}

//= specs/idempotency-middleware.md#M2
//# A cached success holds the complete body, at most the cap, or the too-large sentinel.
/// Observed by comparing the row with what its writer's handler produced.
pub fn m2_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let Some(Row {
        status: RowStatus::Succeeded { stored, origin },
        ..
    }) = state.row
    else {
        return true;
    };
    match stored {
        Stored::Empty => false,
        Stored::Full => state
            .history
            .handler
            .get(&origin)
            .is_some_and(|outcome| outcome.fits()),
        Stored::Sentinel => true,
    }
}

pub fn m2_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    matches!(
        state.row,
        Some(Row {
            status: RowStatus::Succeeded {
                stored: Stored::Sentinel,
                ..
            },
            ..
        })
    )
}

//= specs/idempotency-middleware.md#M3
//# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
/// Whether the finalizing of `generation` was abandoned as the spec allows: its process died, or
/// it ended unknown after every attempt of a finalizer answered an error (counted on the
/// statements, not taken from the layer's own verdict).
fn abandoned(model: &IdempotencyModel, state: &IdempotencyState, generation: u8) -> bool {
    let errors = state
        .history
        .finalize_errors
        .get(&generation)
        .copied()
        .unwrap_or(0);
    match state.history.ended.get(&generation) {
        Some(Ending::Died) => true,
        Some(Ending::Unknown) => errors >= model.attempts(),
        _ => false,
    }
}

/// The exception the spec allows is encoded: a row stays processing after a 2xx only when the
/// claim's finalizing ended unknown (every attempt answered an error) or its process died.
pub fn m3_holds(model: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let Some(row) = state.row else { return true };
    let committed = |generation: u8| state.history.effects.contains(&generation);
    match row.status {
        RowStatus::Failed { origin } => !committed(origin),
        RowStatus::Processing => {
            !committed(row.generation)
                || row.expires_at <= state.now
                || finalizer_pending(state, row.generation)
                || abandoned(model, state, row.generation)
        }
        RowStatus::Succeeded { .. } => true,
    }
}

pub fn m3_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    // The drop guard wrote the sentinel for a body that would have been stored in full.
    matches!(
        state.row,
        Some(Row { status: RowStatus::Succeeded { stored: Stored::Sentinel, origin }, .. })
            if state.history.handler.get(&origin).is_some_and(|outcome| outcome.fits())
    )
}

/// What the row becomes instead, when the exception happens: processing, until its lease lapses.
pub fn m3_unknown_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    matches!(state.row, Some(row) if row.status == RowStatus::Processing
        && state.history.ended.get(&row.generation) == Some(&Ending::Unknown)
        && state.history.effects.contains(&row.generation))
}

/// Whether the first client of `generation` received exactly its handler's frames (or has not
/// finished receiving).
fn delivered_exactly(state: &IdempotencyState, generation: u8) -> bool {
    match (
        state.history.delivered.get(&generation),
        state.history.handler.get(&generation),
    ) {
        (Some(received), Some(outcome)) => *received == Received::exactly(*outcome),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

//= specs/idempotency-middleware.md#M4
//# A replay returns the stored status and body, or the sentinel response, marked as a replay.
/// Observed on the replay, the table and the first client: a replay is marked, serves a body its
/// origin wrote to the table, and a replayed full body is what the first client received.
pub fn m4_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).all(|answer| match answer {
        Answer::Replay {
            stored,
            marked,
            origin,
            ..
        } => {
            marked
                && state.history.written.contains(&(origin, stored))
                && (stored != Stored::Full || delivered_exactly(state, origin))
        }
        _ => true,
    })
}

pub fn m4_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| {
        matches!(
            answer,
            Answer::Replay {
                stored: Stored::Sentinel,
                ..
            }
        )
    })
}

//= specs/idempotency-middleware.md#M5
//# A key reused with another fingerprint gets 422 and never runs the handler.
/// Observed on the handler runs: within one lifetime of the key every run had one fingerprint.
pub fn m5_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let start = state.history.lifetime_start;
    let mut fingerprints = state
        .history
        .ran_with
        .range(start..)
        .map(|(_, fingerprint)| *fingerprint);
    let first = fingerprints.next();
    fingerprints.all(|fingerprint| Some(fingerprint) == first)
}

pub fn m5_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| matches!(answer, Answer::Mismatch { .. }))
}

//= specs/idempotency-middleware.md#M6
//# A request whose key is held by a live claim gets 409 and never runs the handler.
/// Observed on the claims: no claim that ran the handler took over a live lease.
pub fn m6_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    state
        .history
        .ran_with
        .keys()
        .all(|generation| state.history.claimed_over.get(generation) != Some(&Seen::LiveLease))
}

pub fn m6_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| matches!(answer, Answer::Conflict { .. }))
}

/// The heartbeat kept a slow handler's claim: the handler still runs past its first lease and
/// the row's lease is live.
pub fn m6_renewed_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let Some(row) = state.row else { return false };
    let claimed_at = row.expires_at - ROW_TTL_TICKS;
    row.status == RowStatus::Processing
        && state.now >= claimed_at + LEASE_TICKS
        && row.lease_expires_at > state.now
        && state.clients.iter().any(|client| {
            client.stage
                == Stage::Running {
                    generation: row.generation,
                }
        })
}

/// Whether the handler of `generation` answered a 2xx.
fn succeeded(state: &IdempotencyState, generation: u8) -> bool {
    state
        .history
        .handler
        .get(&generation)
        .is_some_and(|outcome| outcome.is_success())
}

//= specs/idempotency-middleware.md#M7
//# The first client receives exactly the frames the handler produced, over-cap tail and trailers included.
/// Observed on what each first client of a 2xx received, against its handler's outcome.
pub fn m7_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    state
        .history
        .delivered
        .keys()
        .filter(|generation| succeeded(state, **generation))
        .all(|generation| delivered_exactly(state, *generation))
}

pub fn m7_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    // An over-cap body's tail streams to its first client after the row is already terminal.
    state
        .clients
        .iter()
        .any(|client| matches!(client.stage, Stage::Streaming { .. }))
}

//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
/// Observed on the row: a terminal status written by another generation than the row's claim.
pub fn m8_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    match state.row {
        Some(Row {
            generation,
            status: RowStatus::Succeeded { origin, .. } | RowStatus::Failed { origin },
            ..
        }) => origin == generation,
        _ => true,
    }
}

pub fn m8_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    // A finalizer reported Lost while a newer claim holds the row.
    state.row.is_some_and(|row| {
        state
            .history
            .ended
            .iter()
            .any(|(generation, ending)| *ending == Ending::Lost && *generation < row.generation)
    })
}

//= specs/idempotency-middleware.md#M9
//# A non-2xx response passes through untouched and its row is recorded failed.
/// "Passes through untouched" is observed on what the client of a non-2xx received, against its
/// handler's outcome; "recorded failed" on the row once its claim's finalizing is over: unless
/// the client went away first or the finalize was abandoned, the row of a non-2xx is failed.
pub fn m9_holds(model: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let passthrough = state
        .history
        .delivered
        .keys()
        .filter(|generation| !succeeded(state, **generation))
        .all(|generation| delivered_exactly(state, *generation));
    let recorded = state.row.is_none_or(|row| {
        let non_success = |generation: u8| {
            state
                .history
                .handler
                .get(&generation)
                .is_some_and(|outcome| !outcome.is_success())
        };
        match row.status {
            RowStatus::Succeeded { origin, .. } => !non_success(origin),
            RowStatus::Processing => {
                !non_success(row.generation)
                    || finalizer_pending(state, row.generation)
                    || row.expires_at <= state.now
                    || state.history.ended.get(&row.generation) == Some(&Ending::Cancelled)
                    || abandoned(model, state, row.generation)
            }
            RowStatus::Failed { .. } => true,
        }
    });
    passthrough && recorded
}

pub fn m9_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    // A failed row is claimed again and its handler re-runs.
    state.history.claimed_over.iter().any(|(generation, seen)| {
        *seen == Seen::Failed && state.history.handler.contains_key(generation)
    })
}

//= specs/idempotency-middleware.md#M10
//# A key whose row has passed its expiry is free: no request is refused on an expired row.
pub fn m10_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).all(|answer| {
        !matches!(
            answer,
            Answer::Replay {
                row_expired: true,
                ..
            } | Answer::Conflict { row_expired: true }
                | Answer::Mismatch { row_expired: true }
                | Answer::OutcomeUnknown { row_expired: true }
        )
    })
}

pub fn m10_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    state
        .history
        .claimed_over
        .values()
        .any(|seen| *seen == Seen::Expired)
}
