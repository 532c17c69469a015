//! M11 answered, the layer's liveness (specs/idempotency-middleware.md#M11), the weak-fairness
//! family of every step, and where the `ticks` bound cuts a run.
//!
//! Families: `client` (a client sends), `store` (every statement the database answers: the claim,
//! SQLite's read, each finalize that matches or finds no row), `handler` (the handler answers,
//! the body is captured, the tail streams) and `clock`. Faults are in no family: a claim or a
//! finalize answered with an error, a cancellation, a stall, a death — "once faults stop" is
//! weak fairness of everything else. The pre-fix cleanup job is its own family, `cleanup`, and so
//! is `fail-closed`'s reconciler, `reconciler`; M11 assumes neither.

use super::*;
use crate::check::LivenessDef;

pub const M11_ANSWERED: &str = "M11 answered";

pub(super) fn definitions() -> Vec<LivenessDef<IdempotencyModel>> {
    vec![LivenessDef {
        id: "M11",
        name: M11_ANSWERED,
        trigger: Some(waiting),
        goal: answered,
        fair: &["client", "store", "handler", "clock"],
    }]
}

pub(super) fn family_of(action: &Action) -> Option<&'static str> {
    match *action {
        Action::ClientSends { .. } => Some("client"),
        Action::MiddlewareClaims { .. }
        | Action::MiddlewareReadsRow { .. }
        | Action::MiddlewareFinalizes {
            result: DbResult::Matched | DbResult::NoRowMatched,
            ..
        }
        | Action::DropGuardFinalizes {
            result: DbResult::Matched | DbResult::NoRowMatched,
            ..
        } => Some("store"),
        Action::HandlerResponds { .. }
        | Action::MiddlewareCaptures { .. }
        | Action::TailStreams { .. } => Some("handler"),
        Action::ClockTicks => Some("clock"),
        Action::CleanupPurges => Some("cleanup"),
        // `fail-closed`: the reconcile hook or an operator settles a held key when it runs; M11
        // does not wait for it (a request meeting a held key is answered 409 outcome-unknown).
        Action::ReconcilerResolves { .. } => Some("reconciler"),
        Action::MiddlewareClaimFails { .. }
        | Action::MiddlewareFinalizes {
            result: DbResult::Error { .. },
            ..
        }
        | Action::DropGuardFinalizes {
            result: DbResult::Error { .. },
            ..
        }
        | Action::ClientCancels { .. }
        | Action::ProcessStalls { .. }
        | Action::ProcessDies { .. } => None,
    }
}

/// `ticks` bounds the clock: once it is spent, a tick the protocol would take is withheld, and
/// the run is cut there (a lease that would lapse at the next tick is still live).
pub(super) fn families_cut(
    model: &IdempotencyModel,
    state: &IdempotencyState,
    cut: &mut Vec<&'static str>,
) {
    if state.budget.ticks == 0 && !model.clock_held(state) {
        cut.push("clock");
    }
}

/// Some request waits for its answer, or the key is held by a claim no request works on.
fn waiting(model: &IdempotencyModel, state: &IdempotencyState) -> bool {
    !answered(model, state)
}

//= specs/idempotency-middleware.md#M11
//# Every request eventually gets an answer once faults stop, and a claim no request works on any more is eventually released.
fn answered(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let every_request_answered = state
        .clients
        .iter()
        .all(|client| client.stage.await_point().is_none());
    let key_held_for_nobody = state.row.is_some_and(|row| {
        row.status == RowStatus::Processing
            && row.lease_expires_at > state.now
            && row.expires_at > state.now
            && !state
                .clients
                .iter()
                .any(|client| client.stage.working_on() == Some(row.generation))
    });
    every_request_answered && !key_held_for_nobody
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{run, CheckOptions, ModelSpec, Verdict};

    fn model(variant: &str, overrides: &[(&str, u32)]) -> IdempotencyModel {
        let overrides: Vec<(String, u32)> = overrides
            .iter()
            .map(|(key, value)| (key.to_string(), *value))
            .collect();
        let bounds = IdempotencyModel::resolve_bounds(variant, &overrides).unwrap();
        IdempotencyModel::build(variant, &bounds).unwrap()
    }

    //= specs/idempotency-middleware.md#M11
    //# Every request eventually gets an answer once faults stop, and a claim no request works on any more is eventually released.
    #[test]
    fn a_detached_heartbeat_never_releases_a_cancelled_handlers_claim() {
        let report = run(
            model("renewed", &[]).with_mutation(Mutation::HeartbeatDetached),
            &CheckOptions::default(),
            &mut |_| {},
        );
        let m11 = report.property(M11_ANSWERED);
        assert_eq!(m11.verdict, Verdict::Violated);
        // Not a cycle: the run stops with the key held (the clock may not pass the renewed
        // claim's expiry, nothing else is enabled).
        assert_eq!(m11.lasso_start, None);
        let words: Vec<&str> = m11
            .trace
            .as_ref()
            .unwrap()
            .iter()
            .map(|step| step.words.as_str())
            .collect();
        // C1's handler is cancelled; its heartbeat runs on, renewing the claim at every tick, and
        // the clock may not pass the expiry of a claim its process still renews: C2's 409 is the
        // last answer the key ever gives.
        assert_eq!(
            words,
            [
                "C1 POST /transfers Idempotency-Key k fp A",
                "C1: claim k inserts a processing row, generation 1",
                "C1 cancels (drops the response future) while the handler runs",
                "C2 POST /transfers Idempotency-Key k fp A",
                "C2: claim k -> 409 in flight",
                "the clock ticks to 1; the heartbeat renews generation 1's lease to 2",
            ]
        );
        for property in &report.properties {
            if property.kind == crate::check::Kind::Always {
                assert_eq!(property.verdict, Verdict::Holds, "{}", property.name);
            }
        }
    }
}
