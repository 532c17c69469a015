//! The model half of the middleware target (`middleware-sqlite`, `middleware-postgres`): which
//! idempotency traces the shipped layer can reproduce, and the model's state in the words a
//! replay observes of the real system (the cache row as the database holds it, and how many
//! times the handler was entered).
//!
//! The real half, behind the `replay` feature: `target` (the `ReplayTarget` of the driver),
//! `server` (the layer on an axum server over loopback TCP, the scripted handler, the clients),
//! `held_store` (every store call held until the trace releases it, faults injected there) and
//! `hub` (what the real side did, recorded for the target to wait on and compare).
//!
//! Invariants: a trace is applicable only when every step it takes has a real counterpart in the
//! layer as configured for its variant; otherwise the answer names the first step that has none
//! (never "conforms"). The expected row's generation is the one the real store numbers: the
//! store continues a key's generation when it takes a row over in place, and starts at 1 again
//! only when the row was deleted (the pre-fix cleanup), where the model keeps counting.

#[cfg(feature = "replay")]
pub mod held_store;
#[cfg(feature = "replay")]
pub mod hub;
#[cfg(feature = "replay")]
pub mod running_layer;
#[cfg(feature = "replay")]
pub mod server;
#[cfg(feature = "replay")]
pub mod target;

use oncecheck_model::check::ModelSpec;
use oncecheck_model::idempotency::{
    Action, Fingerprint, IdempotencyModel, IdempotencyState, RowStatus, Stage, Stored,
};

/// The database the layer's cache store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Sqlite,
    Postgres,
    /// `MemoryStore`, the store of the layer's loom and shuttle tests: those tests stand for the
    /// SQL stores only if it follows their rules, which its replays check.
    Memory,
}

/// The layer configuration that stands for a model variant: its behaviour
/// (`oncecheck_idempotency::Behaviour`, behind `test-seams` except `fenced`) and whether its
/// lease heartbeat runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerBehaviour {
    PreFix,
    Fixed,
    /// `Behaviour::Fenced` built `without_lease_renewal()`.
    Fenced,
    /// The layer as shipped: `Behaviour::Fenced` with its heartbeat, driven by the layer's clock.
    Renewed,
    /// As shipped, the scripted handler's effect in the request's `EffectScope` transaction.
    Atomic,
    /// As shipped, built `fail_closed()`.
    FailClosed,
}

impl LayerBehaviour {
    pub const ALL: [LayerBehaviour; 6] = [
        LayerBehaviour::PreFix,
        LayerBehaviour::Fixed,
        LayerBehaviour::Fenced,
        LayerBehaviour::Renewed,
        LayerBehaviour::Atomic,
        LayerBehaviour::FailClosed,
    ];

    /// The model variant's name, which `--store-variant` takes too.
    pub fn name(self) -> &'static str {
        match self {
            LayerBehaviour::PreFix => "pre-fix",
            LayerBehaviour::Fixed => "fixed",
            LayerBehaviour::Fenced => "fenced",
            LayerBehaviour::Renewed => "renewed",
            LayerBehaviour::Atomic => "atomic",
            LayerBehaviour::FailClosed => "fail-closed",
        }
    }

    /// Whether the layer runs its lease heartbeat.
    pub fn heartbeat(self) -> bool {
        matches!(
            self,
            LayerBehaviour::Renewed | LayerBehaviour::Atomic | LayerBehaviour::FailClosed
        )
    }
}

/// What a stored success holds, as the row's `response_body` and `body_too_large` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Full,
    Sentinel,
    /// An empty body for a handler that answered a non-empty one.
    Empty,
}

/// The cache row of the trace's key, as read from the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowView {
    /// `processing`, `succeeded` or `failed`.
    pub status: &'static str,
    pub generation: i64,
    pub fingerprint: Fingerprint,
    /// `Some` exactly for `succeeded`.
    pub body: Option<BodyKind>,
    /// `lease_expires_at` and `expires_at` in model ticks from the replay's clock start (a real
    /// time that is no whole tick reads as `None`): the heartbeat's renewals are seen here.
    pub lease_ends: Option<i64>,
    pub expires: Option<i64>,
}

/// What a replay compares after every step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiddlewareView {
    pub row: Option<RowView>,
    /// Handler calls so far: one per claim that took the key.
    pub handler_runs: usize,
    /// Per client, the store call it has waiting (held by the replay until the trace releases
    /// it): `claim` (SQLite's read of the row is in the same call) or `finalize` (inline or the
    /// drop guard's).
    pub waiting: Vec<Option<&'static str>>,
    /// `atomic`: the handler effects committed (rows of the effect table; the model's record).
    pub effects: Option<usize>,
}

/// Whether the layer from impl/idempotency can reproduce `path` on `database`; `Err` names the
/// first step it cannot take, or why the whole trace is out of reach.
pub fn applicable(
    model: &IdempotencyModel,
    path: &[(IdempotencyState, Option<Action>)],
    database: Database,
) -> Result<LayerBehaviour, String> {
    let behaviour = LayerBehaviour::ALL
        .into_iter()
        .find(|behaviour| behaviour.name() == model.variant())
        .ok_or_else(|| format!("variant `{}` has no layer configuration", model.variant()))?;
    let sqlite_claim = model.bounds().get("sqlite") == 1;
    match (database, sqlite_claim) {
        (Database::Sqlite, false) => {
            return Err("a trace of PostgreSQL's one-statement claim (bound sqlite=0); SQLite claims in two statements".into())
        }
        (Database::Postgres, true) => {
            return Err("a trace of SQLite's two-statement claim (bound sqlite=1); PostgreSQL claims in one".into())
        }
        (Database::Memory, true) => {
            return Err("a trace of SQLite's two-statement claim (bound sqlite=1); the memory store claims in one call".into())
        }
        (Database::Memory, false) if behaviour == LayerBehaviour::Atomic => {
            return Err("`atomic` commits the handler's effect in the store's transaction; the memory store has none".into())
        }
        _ => {}
    }
    for (index, (before, action)) in path.iter().enumerate() {
        let expired = before.row.is_some_and(|row| row.expires_at <= before.now);
        let sqlite_write_waits = database == Database::Sqlite
            && behaviour == LayerBehaviour::Atomic
            && writes_beside_an_effect(before, action.as_ref());
        let reason = match action {
            _ if sqlite_write_waits => {
                "a write while another request's effect transaction is open: SQLite serializes writers, so it waits for that commit"
            }
            // The pre-fix layer in impl/idempotency already decides expiry when it reads a row;
            // the model's pre-fix leaves it to the cleanup job (M10's counterexample).
            Some(
                Action::MiddlewareClaims { .. }
                | Action::MiddlewareReadsRow { .. }
                | Action::MiddlewareClaimFails { .. },
            ) if expired && behaviour == LayerBehaviour::PreFix => {
                "a claim on an expired row: the pre-fix layer decides expiry when it reads the row, the model's pre-fix leaves it to the cleanup job"
            }
            Some(Action::CleanupPurges) if database == Database::Memory => {
                "the cleanup job purges expired rows: the memory store has none (it expires rows when it reads them)"
            }
            // The replay realises a death by keeping the dead process's calls from the database
            // (`Release::Dead`); the memory store lives in the process, so it would die too.
            Some(Action::ProcessDies { .. }) if database == Database::Memory => {
                "the process dies: the memory store lives in that process and would die with it, which the model's database does not"
            }
            // The SQLite store's `claim` call runs the claim statement, the read of the row it
            // did not take, and the claim again while the row flips: one held call, so nothing
            // else can happen between them.
            Some(Action::MiddlewareReadsRow { client }) if !follows(path, index, Action::MiddlewareClaims { client: *client }) => {
                "a step between SQLite's claim statement and its read of the row: both run inside one store call"
            }
            Some(Action::MiddlewareClaims { client })
                if matches!(path[index].0.clients[*client].stage, Stage::Claiming { attempt } if attempt > 0)
                    && !follows(path, index, Action::MiddlewareReadsRow { client: *client }) =>
            {
                "a step between SQLite's read of the row and its claim again: both run inside one store call"
            }
            _ => continue,
        };
        return Err(format!("step {}: {reason}", index + 1));
    }
    Ok(behaviour)
}

/// `atomic` on SQLite: whether `action` writes (a claim, a finalize, a begin, the heartbeat's
/// renewals at a tick) while a client other than its own holds an open effect transaction (a
/// 2xx captured or finalizing), or a tick comes while any does (its own renewal waits too).
fn writes_beside_an_effect(state: &IdempotencyState, action: Option<&Action>) -> bool {
    let open: Vec<usize> = state
        .clients
        .iter()
        .enumerate()
        .filter(|(_, client)| {
            matches!(client.stage,
                Stage::Capturing { outcome, .. } | Stage::Finalizing { outcome, .. } if outcome.is_success())
        })
        .map(|(index, _)| index)
        .collect();
    let other = |client: usize| open.iter().any(|holder| *holder != client);
    match action {
        Some(Action::ClockTicks) => !open.is_empty(),
        Some(
            Action::MiddlewareClaims { client }
            | Action::MiddlewareClaimFails { client, .. }
            | Action::MiddlewareReadsRow { client }
            | Action::MiddlewareFinalizes { client, .. }
            | Action::DropGuardFinalizes { client, .. }
            | Action::HandlerResponds { client, .. },
        ) => other(*client),
        _ => false,
    }
}

/// Whether the step at `index` directly follows `previous`.
fn follows(path: &[(IdempotencyState, Option<Action>)], index: usize, previous: Action) -> bool {
    index > 0 && path[index - 1].1 == Some(previous)
}

/// The model's state after every step of `path`, in the words of [`MiddlewareView`].
pub fn expected_views(
    path: &[(IdempotencyState, Option<Action>)],
    effects: bool,
) -> Vec<MiddlewareView> {
    path.iter()
        .zip(generation_offsets(path))
        .map(|((state, _), offset)| expected_view(state, offset, effects))
        .collect()
}

/// Per state of `path`, what to subtract from the model's generation to get the database's: the
/// real generation restarts at 1 on a row claimed while absent; the model's continues. The one
/// part of a view that depends on the path before the state.
pub fn generation_offsets(path: &[(IdempotencyState, Option<Action>)]) -> Vec<i64> {
    let mut offset: i64 = 0;
    let mut previous_row_present = false;
    path.iter()
        .map(|(state, _)| {
            if let Some(row) = state.row {
                if !previous_row_present && row.status == RowStatus::Processing {
                    offset = i64::from(row.generation) - 1;
                }
            }
            previous_row_present = state.row.is_some();
            offset
        })
        .collect()
}

/// One model state as the database shows it, its generations less `generation_offset`
/// ([`generation_offsets`]); `effects`: the variant commits effects with the row (`atomic`).
pub fn expected_view(
    state: &IdempotencyState,
    generation_offset: i64,
    effects: bool,
) -> MiddlewareView {
    let row = state.row.map(|row| {
        let (status, body) = match row.status {
            RowStatus::Processing => ("processing", None),
            RowStatus::Failed { .. } => ("failed", None),
            RowStatus::Succeeded { stored, .. } => (
                "succeeded",
                Some(match stored {
                    Stored::Full => BodyKind::Full,
                    Stored::Sentinel => BodyKind::Sentinel,
                    Stored::Empty => BodyKind::Empty,
                }),
            ),
        };
        RowView {
            status,
            generation: i64::from(row.generation) - generation_offset,
            fingerprint: row.fingerprint,
            body,
            lease_ends: Some(i64::from(row.lease_expires_at)),
            expires: Some(i64::from(row.expires_at)),
        }
    });
    let waiting = state
        .clients
        .iter()
        .map(|client| match client.stage {
            Stage::Claiming { .. } | Stage::Reading { .. } => Some("claim"),
            Stage::Finalizing { .. } | Stage::Guarding { .. } => Some("finalize"),
            _ => None,
        })
        .collect();
    MiddlewareView {
        row,
        handler_runs: state.history.ran_with.len(),
        waiting,
        effects: effects.then_some(state.history.effects.len()),
    }
}

/// Where a path of one variant stops being a path of `other` (same bounds): the first step
/// (1-based) whose action `other` cannot take, or after which the rows or handler runs differ,
/// with both views. `None` when `other` takes every step to the same views. This is where a
/// replay of a pre-fix counterexample against the shipped layer must diverge.
pub fn first_difference(
    path: &[(IdempotencyState, Option<Action>)],
    other: &IdempotencyModel,
) -> Option<(usize, String)> {
    use stateright::Model;
    let expected = expected_views(path, false);
    let mut states = vec![path.first()?.0.clone()];
    for (index, (_, action)) in path.iter().enumerate() {
        let Some(action) = action else { break };
        let before = states.last().expect("a state before every step");
        let mut enabled = Vec::new();
        other.actions(before, &mut enabled);
        let next = enabled
            .contains(action)
            .then(|| other.next_state(before, *action))
            .flatten();
        let Some(next) = next else {
            return Some((
                index + 1,
                format!("{action:?} is not a step of `{}`", other.variant()),
            ));
        };
        states.push(next);
        let replayed: Vec<(IdempotencyState, Option<Action>)> =
            states.iter().map(|state| (state.clone(), None)).collect();
        let actual = expected_views(&replayed, false)
            .pop()
            .expect("one view per state");
        if actual != expected[index + 1] {
            return Some((
                index + 1,
                format!(
                    "{}: {actual:?}; the path: {:?}",
                    other.variant(),
                    expected[index + 1]
                ),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncecheck_model::check::shortest_paths;
    use oncecheck_model::idempotency::AwaitPoint;
    use stateright::Model;

    fn model(variant: &str, overrides: &[(&str, u32)]) -> IdempotencyModel {
        let overrides: Vec<(String, u32)> = overrides
            .iter()
            .map(|(key, value)| (key.to_string(), *value))
            .collect();
        let bounds = IdempotencyModel::resolve_bounds(variant, &overrides).unwrap();
        IdempotencyModel::build(variant, &bounds).unwrap()
    }

    fn counterexample(
        model: &IdempotencyModel,
        name: &str,
    ) -> Vec<(IdempotencyState, Option<Action>)> {
        let def = model
            .property_defs()
            .into_iter()
            .find(|def| def.name == name)
            .unwrap();
        shortest_paths(model, &[(def.name, def.condition, false)])
            .remove(def.name)
            .unwrap()
    }

    //= specs/idempotency-middleware.md#M2
    //# No poison. A cached success holds the complete body, at most the cap, or the too-large sentinel.
    #[test]
    fn the_pre_fix_poison_is_an_empty_success_row_of_the_first_generation() {
        let model = model("pre-fix", &[]);
        let path = counterexample(&model, "M2 no-poison");
        assert_eq!(
            applicable(&model, &path, Database::Postgres),
            Ok(LayerBehaviour::PreFix)
        );
        let views = expected_views(&path, false);
        assert_eq!(views.len(), path.len());
        assert_eq!(
            views[0],
            MiddlewareView {
                row: None,
                handler_runs: 0,
                waiting: vec![None, None],
                effects: None,
            }
        );
        let last = views.last().unwrap();
        assert_eq!(
            last.row,
            Some(RowView {
                status: "succeeded",
                generation: 1,
                fingerprint: Fingerprint::A,
                body: Some(BodyKind::Empty),
                lease_ends: Some(1),
                expires: Some(2),
            })
        );
        assert_eq!(last.handler_runs, 1);
    }

    #[test]
    fn a_trace_the_layer_cannot_take_is_not_applicable_with_the_reason() {
        let path = counterexample(&model("fenced", &[]), "M1 at-most-once");
        let fenced = model("fenced", &[]);
        let error = applicable(&fenced, &path, Database::Sqlite).unwrap_err();
        assert!(error.contains("bound sqlite=0"), "{error}");
        assert_eq!(
            applicable(&fenced, &path, Database::Postgres),
            Ok(LayerBehaviour::Fenced)
        );

        let faulty = model("fenced", &[("process_faults", 1)]);
        let def = faulty
            .property_defs()
            .into_iter()
            .find(|def| def.name == "M1 at-most-once")
            .unwrap();
        // The shortest path on which a process fault was spent: `fenced` has no heartbeat to
        // stall, so a death. A database outlives it; the memory store dies with the process.
        let faulted =
            |_: &IdempotencyModel, state: &IdempotencyState| state.budget.process_faults == 0;
        let path = shortest_paths(&faulty, &[(def.name, faulted, true)])
            .remove(def.name)
            .unwrap();
        assert!(matches!(
            path[path.len() - 2].1,
            Some(Action::ProcessDies { .. })
        ));
        assert_eq!(
            applicable(&faulty, &path, Database::Postgres),
            Ok(LayerBehaviour::Fenced)
        );
        let error = applicable(&faulty, &path, Database::Memory).unwrap_err();
        assert!(
            error.starts_with(&format!(
                "step {}: the process dies: the memory store",
                path.len() - 1
            )),
            "{error}"
        );
    }

    #[test]
    fn a_step_inside_sqlites_claim_call_is_not_applicable() {
        let sqlite = model("fenced", &[("sqlite", 1)]);
        let reading = |_: &IdempotencyModel, state: &IdempotencyState| {
            state
                .clients
                .iter()
                .any(|client| matches!(client.stage, Stage::Reading { .. }))
        };
        let mut path = shortest_paths(&sqlite, &[("reading", reading, true)])
            .remove("reading")
            .unwrap();
        let (before, _) = path.pop().unwrap();
        let client = before
            .clients
            .iter()
            .position(|client| matches!(client.stage, Stage::Reading { .. }))
            .unwrap();
        let read = Action::MiddlewareReadsRow { client };
        let after = sqlite.next_state(&before, read).unwrap();
        let mut direct = path.clone();
        direct.push((before.clone(), Some(read)));
        direct.push((after, None));
        assert_eq!(
            applicable(&sqlite, &direct, Database::Sqlite),
            Ok(LayerBehaviour::Fenced)
        );
        assert!(applicable(&sqlite, &direct, Database::Postgres)
            .unwrap_err()
            .contains("bound sqlite=1"));

        let tick = Action::ClockTicks;
        let ticked = sqlite.next_state(&before, tick).unwrap();
        let mut enabled = Vec::new();
        sqlite.actions(&ticked, &mut enabled);
        assert!(enabled.contains(&read));
        let after = sqlite.next_state(&ticked, read).unwrap();
        let mut split = path;
        split.push((before, Some(tick)));
        split.push((ticked, Some(read)));
        split.push((after, None));
        let error = applicable(&sqlite, &split, Database::Sqlite).unwrap_err();
        assert_eq!(
            error,
            format!("step {}: a step between SQLite's claim statement and its read of the row: both run inside one store call", split.len() - 1)
        );
    }

    // The step the fix changes: the pre-fix counterexamples of M2 and M3 replayed on the
    // shipped behaviour part from it exactly where the capture (M2) or the finalize (M3) differs.
    #[test]
    fn the_pre_fix_counterexamples_part_from_the_shipped_layer_at_the_fixed_step() {
        let pre_fix = model("pre-fix", &[]);
        let fenced = model("fenced", &[]);
        // M2: the finalize writes the empty body pre-fix and the sentinel on the shipped layer.
        // M3: the client cancels during the capture; pre-fix nothing is left to finalize, the
        // shipped layer's drop guard has its finalize waiting.
        for (name, steps, parts_at) in [("M2 no-poison", 5, 5), ("M3 terminal-rule", 4, 4)] {
            let path = counterexample(&pre_fix, name);
            assert_eq!(path.len() - 1, steps, "{name}");
            let (step, detail) = first_difference(&path, &fenced).unwrap();
            let action = path[step - 1].1.unwrap();
            println!("{name}: {steps} steps; parts at step {step} ({action:?}): {detail}");
            assert_eq!(step, parts_at, "{name}");
            match name {
                "M2 no-poison" => {
                    assert!(matches!(action, Action::MiddlewareFinalizes { .. }));
                    assert!(detail.contains("body: Some(Sentinel)"), "{detail}");
                }
                _ => {
                    assert!(matches!(
                        action,
                        Action::ClientCancels {
                            at: AwaitPoint::Capture,
                            ..
                        }
                    ));
                    assert!(
                        detail.contains("waiting: [Some(\"finalize\"), None]"),
                        "{detail}"
                    );
                }
            }
        }
        let path = counterexample(&fenced, "M1 at-most-once");
        assert_eq!(first_difference(&path, &fenced), None);
    }

    #[cfg(feature = "replay")]
    #[test]
    fn the_layer_makes_the_models_finalize_attempts() {
        assert!(super::target::finalize_attempts_agree());
    }

    // The fenced lease crossing: a second claim takes the row over in place, so the real
    // generation is the model's (2), and both claims entered the handler.
    //= specs/idempotency-middleware.md#M1
    //# At-most-once. The handler runs only for the request that won the atomic claim of its key.
    #[test]
    fn the_lease_crossing_shows_two_handler_runs_and_generation_two() {
        let model = model("fenced", &[]);
        let path = counterexample(&model, "M1 at-most-once");
        let last = expected_views(&path, false).pop().unwrap();
        assert_eq!(last.handler_runs, 2);
        assert_eq!(last.row.map(|row| row.generation), Some(2));
    }
}
