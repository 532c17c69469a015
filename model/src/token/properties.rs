//! T1-T5 as state predicates over what the table shows and what each request met, with the
//! `sometimes` partners that show the interesting states are reached. The record a request met
//! is classified here ([`super::observed`]), never by the server's own classifier.
//!
//! Invariants: the property names below are the one spelling `property_defs`, `expected` and
//! the tests share.

use super::*;

/// Consecutive attempts (k, k+1) of one client where k was applied but its response lost, and
/// k+1 is the identical request, answered. Left out are retries the table has no row for:
/// refused for concurrency (TransactionConflict, TransactionInProgress), or meeting the token of
/// the client's own rebuilt request (T2's case, possible once a late retry re-opened the token).
pub(super) fn identical_retries_after_lost_commit<'a>(
    model: &'a TokenModel,
    client: &'a Client,
) -> impl Iterator<Item = (&'a Attempt, &'a Attempt)> {
    client.attempts.windows(2).filter_map(move |pair| {
        let (first, retry) = (&pair[0], &pair[1]);
        let met_other_parameters = observed::met(model, client, retry).is_other_parameters();
        let relevant = first.applied()
            && first.client == ClientSide::GaveUp
            && retry.rebuilt == first.rebuilt
            && !met_other_parameters
            && retry.answer().is_some_and(|answer| !answer.is_retryable());
        relevant.then_some((first, retry))
    })
}

pub(super) fn retry_within_window(model: &TokenModel, first: &Attempt, retry: &Attempt) -> bool {
    model.is_live(first.sent_at, retry.sent_at)
}

pub(super) fn transaction_clients(state: &TokenState) -> impl Iterator<Item = (usize, &Client)> {
    state
        .clients
        .iter()
        .enumerate()
        .filter(|(_, client)| client.pattern.is_transaction())
}

pub(super) fn retry_outcome_reached(
    model: &TokenModel,
    state: &TokenState,
    pattern: Pattern,
    want: fn(&TokenModel, &Attempt, &Attempt) -> bool,
) -> bool {
    state
        .clients
        .iter()
        .filter(|client| client.pattern == pattern)
        .any(|client| {
            identical_retries_after_lost_commit(model, client)
                .any(|(first, retry)| want(model, first, retry))
        })
}

//= specs/tokened-writes.md#T1
//# A transaction intent is applied at most once, and a client told success finds it applied.
pub(super) fn t1_exactly_once(_: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).all(|(index, client)| {
        let applications = &state.table.applications[index];
        let told_success = client
            .attempts
            .iter()
            .any(|a| a.client == ClientSide::Delivered && a.answer() == Some(Answer::Success));
        applications.iter().all(|&count| count <= 1)
            && (!told_success || applications.iter().any(|&count| count >= 1))
    })
}

//= specs/tokened-writes.md#T1
//# Some transaction is retried identically within the window after its first attempt committed and its response was lost.
pub(super) fn t1_retry_within_window(model: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).any(|(_, client)| {
        identical_retries_after_lost_commit(model, client)
            .any(|(first, retry)| retry_within_window(model, first, retry))
    })
}

//= specs/tokened-writes.md#T2
//# A request that meets a live or running token of other parameters is answered IdempotentParameterMismatch and applies nothing.
/// Observed: the record the request met, classified here (`observed::met`), and whether the
/// client's items changed; the server's classifier is not consulted.
pub(super) fn t2_mismatch(model: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(|client| {
        client.attempts.iter().all(|attempt| {
            let other_parameters = observed::met(model, client, attempt).is_other_parameters();
            match attempt.server {
                ServerSide::Done {
                    answer, applied, ..
                } if other_parameters => answer == Answer::IdempotentParameterMismatch && !applied,
                ServerSide::Running { .. } => !other_parameters,
                _ => true,
            }
        })
    })
}

//= specs/tokened-writes.md#T2
//# Some rebuilt request under a live token is rejected with IdempotentParameterMismatch.
pub(super) fn t2_mismatch_rejected(_: &TokenModel, state: &TokenState) -> bool {
    state
        .clients
        .iter()
        .flat_map(|client| client.attempts.iter())
        .any(|attempt| attempt.answer() == Some(Answer::IdempotentParameterMismatch))
}

//= specs/tokened-writes.md#T3
//# No state of the table, and no reconciliation read, shows some items of a transaction applied more often than others.
pub(super) fn t3_atomic(_: &TokenModel, state: &TokenState) -> bool {
    let uniform = |counts: &[u8]| counts.windows(2).all(|pair| pair[0] == pair[1]);
    transaction_clients(state).all(|(index, client)| {
        uniform(&state.table.applications[index])
            && client.reconciled.as_deref().is_none_or(uniform)
    })
}

//= specs/tokened-writes.md#T3
//# Some transaction commits and its response is lost: the outcome is unknown to the client.
pub(super) fn t3_lost_after_commit(_: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).any(|(_, client)| {
        client
            .attempts
            .iter()
            .any(|a| a.applied() && a.client == ClientSide::GaveUp)
    })
}

//= specs/tokened-writes.md#T3
//# Some client that never heard success reads its transaction back and finds all of it applied.
pub(super) fn t3_read_back_whole(_: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).any(|(_, client)| {
        let never_told_success = !client
            .attempts
            .iter()
            .any(|a| a.client == ClientSide::Delivered && a.answer() == Some(Answer::Success));
        never_told_success
            && client
                .reconciled
                .as_deref()
                .is_some_and(|seen| seen.iter().all(|&count| count >= 1))
    })
}

//= specs/tokened-writes.md#T4
//# An identical retry of a write that committed but lost its response gets the answer and the effect the retry table gives for the client's pattern.
/// The expectation is derived from what the retry met and did, not from a table of patterns: a
/// success that changed nothing must have met a live record of the identical request (a
/// replay); a success that changed the items must not have (an execution); a condition failure
/// must find the item in the table; any other answer changes nothing.
pub(super) fn t4_honest_retry(model: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(|client| {
        identical_retries_after_lost_commit(model, client).all(|(_, retry)| {
            let ServerSide::Done {
                answer, applied, ..
            } = retry.server
            else {
                return true;
            };
            let replayable = observed::met(model, client, retry) == observed::Met::LiveSame;
            match answer {
                Answer::Success if applied => !replayable,
                Answer::Success => replayable,
                Answer::ConditionalCheckFailed => !applied && state.table.order_owner.is_some(),
                _ => !applied,
            }
        })
    })
}

//= specs/tokened-writes.md#T4
//# Some UpdateItem ADD is applied twice by a retry.
pub(super) fn t4_add_double_applied(_: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().enumerate().any(|(index, client)| {
        client.pattern == Pattern::AddCounter && state.table.applications[index][0] >= 2
    })
}

//= specs/tokened-writes.md#T4
//# Some fixed PutItem is written again by its retry and the item converges to the same value.
pub(super) fn t4_fixed_put_converges(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(model, state, Pattern::PutFixedProfile, |_, _, retry| {
        retry.applied()
    })
}

//= specs/tokened-writes.md#T4
//# Some conditional create commits, loses its response, and its retry reports ConditionalCheckFailed.
pub(super) fn t4_create_reports_condition_failure(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(model, state, Pattern::CreateOrderIfAbsent, |_, _, retry| {
        retry.answer() == Some(Answer::ConditionalCheckFailed)
    })
}

//= specs/tokened-writes.md#T4
//# Some transaction without a token executes a second time when retried.
pub(super) fn t4_untokened_transaction_reexecutes(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(
        model,
        state,
        Pattern::TransactWithoutToken,
        |_, _, retry| retry.applied(),
    )
}

//= specs/tokened-writes.md#T4
//# Some tokened retry inside the window is answered success without applying anything.
pub(super) fn t4_tokened_replay(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(
        model,
        state,
        Pattern::TransactWithToken,
        |model, first, retry| {
            retry_within_window(model, first, retry)
                && retry.answer() == Some(Answer::Success)
                && !retry.applied()
        },
    )
}

//= specs/tokened-writes.md#T4
//# Some tokened retry after the window executes again as a new request.
pub(super) fn t4_expired_token_reexecutes(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(
        model,
        state,
        Pattern::TransactWithToken,
        |model, first, retry| !retry_within_window(model, first, retry) && retry.applied(),
    )
}

//= specs/tokened-writes.md#T5
//# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
/// Observed: the request's token and the record it met, classified here (`observed::met`), and
/// whether the client's items changed.
pub(super) fn t5_bad_token(model: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(|client| {
        client.attempts.iter().all(|attempt| {
            let met = observed::met(model, client, attempt);
            match (attempt.server, met) {
                (
                    ServerSide::Done {
                        answer, applied, ..
                    },
                    observed::Met::Malformed,
                ) => answer == Answer::ValidationError && !applied,
                (
                    ServerSide::Done {
                        answer, applied, ..
                    },
                    observed::Met::Damaged,
                ) => answer == Answer::InternalServerError && !applied,
                (ServerSide::Running { .. }, met) => {
                    !matches!(met, observed::Met::Malformed | observed::Met::Damaged)
                }
                _ => true,
            }
        })
    })
}

//= specs/tokened-writes.md#T5
//# Some request with a token over 36 characters is rejected as a validation error.
pub(super) fn t5_long_token_rejected(_: &TokenModel, state: &TokenState) -> bool {
    state
        .clients
        .iter()
        .flat_map(|client| client.attempts.iter())
        .any(|attempt| attempt.answer() == Some(Answer::ValidationError))
}

//= specs/tokened-writes.md#T5
//# Some retry meets its token's record without a valid timestamp and is refused.
pub(super) fn t5_damaged_record_refused(_: &TokenModel, state: &TokenState) -> bool {
    state
        .clients
        .iter()
        .flat_map(|client| client.attempts.iter())
        .any(|attempt| attempt.answer() == Some(Answer::InternalServerError))
}

// Property names, shared by `property_defs`, `expected` and the tests.
pub const T1_EXACTLY_ONCE: &str = "T1 exactly-once";
pub const T1_RETRY_WITHIN_WINDOW: &str = "T1 retry within the window after a lost commit";
pub const T2_MISMATCH: &str = "T2 mismatch";
pub const T2_MISMATCH_REJECTED: &str = "T2 rebuilt request rejected as a mismatch";
pub const T3_ATOMIC: &str = "T3 atomic";
pub const T3_LOST_AFTER_COMMIT: &str = "T3 transaction response lost after commit";
pub const T3_READ_BACK_WHOLE: &str = "T3 unknown outcome read back whole";
pub const T4_HONEST_RETRY: &str = "T4 honest-retry";
pub const T4_ADD_DOUBLE_APPLIED: &str = "T4 ADD retry double-applies";
pub const T4_FIXED_PUT_CONVERGES: &str = "T4 fixed PutItem retry converges";
pub const T4_CREATE_CONDITION_FAILURE: &str =
    "T4 conditional create retry reports a condition failure";
pub const T4_UNTOKENED_REEXECUTES: &str = "T4 untokened transaction retry executes again";
pub const T4_TOKENED_REPLAY: &str = "T4 tokened retry replayed without applying";
pub const T4_EXPIRED_REEXECUTES: &str = "T4 tokened retry after the window executes again";
pub const T5_BAD_TOKEN: &str = "T5 bad-token";
pub const T5_LONG_TOKEN_REJECTED: &str = "T5 an over-long token is rejected";
pub const T5_DAMAGED_RECORD_REFUSED: &str = "T5 a request meeting a damaged record is refused";
