//! The idempotency model in ITF (see `crate::trace`): the clock, the cache row of key `k`, each
//! client's stage, the environment's budgets and the record of what happened.
//!
//! Invariants: every field of [`IdempotencyState`] is written (strict loading compares them
//! all); sum types are written Quint-shaped as `{"tag": .., "value": ..}`; the action
//! parameters round-trip (`decode_action(encode_action(a)) == a`, tested), and a parameter that
//! names nothing the model has is an error naming the parameter.

use super::*;
use crate::trace::{int, map, read_int, unit, variant, TraceEncoding};
use serde_json::{json, Map, Value as Json};

fn word<T: std::fmt::Debug>(value: T) -> Json {
    Json::String(format!("{value:?}"))
}

fn stored_json(stored: Stored) -> Json {
    word(stored)
}

fn received_json(received: Received) -> Json {
    json!({ "head": received.head, "tail": received.tail })
}

fn answer_json(answer: Answer) -> Json {
    match answer {
        Answer::Fresh { success, received } => variant(
            "Fresh",
            json!({ "success": success, "received": received_json(received) }),
        ),
        Answer::Replay {
            stored,
            marked,
            origin,
            row_expired,
        } => variant(
            "Replay",
            json!({ "stored": stored_json(stored), "marked": marked, "origin": int(origin.into()), "row_expired": row_expired }),
        ),
        Answer::Conflict { row_expired } => {
            variant("Conflict", json!({ "row_expired": row_expired }))
        }
        Answer::Mismatch { row_expired } => {
            variant("Mismatch", json!({ "row_expired": row_expired }))
        }
        Answer::Unavailable => variant("Unavailable", unit()),
        Answer::OutcomeUnknown { row_expired } => {
            variant("OutcomeUnknown", json!({ "row_expired": row_expired }))
        }
    }
}

fn write_json(write: Write) -> Json {
    match write {
        Write::Succeeded(stored) => variant("Succeeded", stored_json(stored)),
        Write::Failed => variant("Failed", unit()),
    }
}

fn stage_json(stage: Stage) -> Json {
    match stage {
        Stage::Ready => variant("Ready", unit()),
        Stage::Claiming { attempt } => {
            variant("Claiming", json!({ "attempt": int(attempt.into()) }))
        }
        Stage::Reading { attempt } => variant("Reading", json!({ "attempt": int(attempt.into()) })),
        Stage::Running { generation } => {
            variant("Running", json!({ "generation": int(generation.into()) }))
        }
        Stage::Capturing {
            generation,
            outcome,
        } => variant(
            "Capturing",
            json!({ "generation": int(generation.into()), "outcome": word(outcome) }),
        ),
        Stage::Finalizing {
            generation,
            outcome,
            write,
            received,
            attempts,
        } => variant(
            "Finalizing",
            json!({
                "generation": int(generation.into()),
                "outcome": word(outcome),
                "write": write_json(write),
                "received": received_json(received),
                "attempts": int(attempts.into()),
            }),
        ),
        Stage::Streaming {
            generation,
            received,
        } => variant(
            "Streaming",
            json!({ "generation": int(generation.into()), "received": received_json(received) }),
        ),
        Stage::Guarding {
            generation,
            attempts,
        } => variant(
            "Guarding",
            json!({ "generation": int(generation.into()), "attempts": int(attempts.into()) }),
        ),
        Stage::Done(answer) => variant("Done", answer_json(answer)),
        Stage::Gone => variant("Gone", unit()),
    }
}

/// The row as the driver compares it with the database: status, generation, fingerprint and
/// the kind of stored body, plus the model's times.
pub fn row_json(row: Option<&Row>) -> Json {
    let Some(row) = row else {
        return variant("None", unit());
    };
    let status = match row.status {
        RowStatus::Processing => variant("Processing", unit()),
        RowStatus::Succeeded { stored, origin } => variant(
            "Succeeded",
            json!({ "stored": stored_json(stored), "origin": int(origin.into()) }),
        ),
        RowStatus::Failed { origin } => variant("Failed", json!({ "origin": int(origin.into()) })),
    };
    variant(
        "Some",
        json!({
            "fingerprint": word(row.fingerprint),
            "generation": int(row.generation.into()),
            "status": status,
            "lease_expires_at": int(row.lease_expires_at.into()),
            "expires_at": int(row.expires_at.into()),
        }),
    )
}

fn by_generation<T>(entries: &SortedMap<u8, T>, value: impl Fn(&T) -> Json) -> Json {
    map(entries
        .iter()
        .map(|(generation, entry)| (int((*generation).into()), value(entry))))
}

/// Every value of a parameter's type, for decoding by name.
const FINGERPRINTS: [Fingerprint; 2] = [Fingerprint::A, Fingerprint::B];
const AWAIT_POINTS: [AwaitPoint; 6] = [
    AwaitPoint::Claim,
    AwaitPoint::ReplayRead,
    AwaitPoint::Handler,
    AwaitPoint::Capture,
    AwaitPoint::Finalize,
    AwaitPoint::Tail,
];
const DB_RESULTS: [DbResult; 4] = [
    DbResult::Matched,
    DbResult::NoRowMatched,
    DbResult::Error { committed: true },
    DbResult::Error { committed: false },
];

/// A database result as traces spell it: `Matched`, `NoRowMatched` (the fenced finalize found
/// no row of its generation), `ErrorCommitted` and `ErrorNotCommitted` (an error answered the
/// statement; the write happened or not — the two finalize faults the environment injects).
pub fn result_name(result: DbResult) -> &'static str {
    match result {
        DbResult::Matched => "Matched",
        DbResult::NoRowMatched => "NoRowMatched",
        DbResult::Error { committed: true } => "ErrorCommitted",
        DbResult::Error { committed: false } => "ErrorNotCommitted",
    }
}

fn pick<'a>(picks: &'a Map<String, Json>, field: &str) -> Result<&'a Json, String> {
    picks
        .get(field)
        .ok_or_else(|| format!("`{field}` is missing"))
}

fn pick_bool(picks: &Map<String, Json>, field: &str) -> Result<bool, String> {
    let value = pick(picks, field)?;
    value
        .as_bool()
        .ok_or_else(|| format!("`{field}` is not a boolean: {value}"))
}

fn pick_named<T: Copy + std::fmt::Debug>(
    picks: &Map<String, Json>,
    field: &str,
    all: &[T],
    name: impl Fn(T) -> String,
) -> Result<T, String> {
    let value = pick(picks, field)?;
    let text = value
        .as_str()
        .ok_or_else(|| format!("`{field}` is not a string: {value}"))?;
    all.iter()
        .copied()
        .find(|candidate| name(*candidate) == text)
        .ok_or_else(|| {
            let valid: Vec<String> = all.iter().map(|candidate| name(*candidate)).collect();
            format!("`{field}` = {text:?} is none of {}", valid.join(", "))
        })
}

impl TraceEncoding for IdempotencyModel {
    const PICKS: &'static [&'static str] = &[
        "client",
        "fingerprint",
        "committed",
        "outcome",
        "result",
        "at",
        "in_flight_commits",
        "applied",
    ];
    const VARS: &'static [&'static str] =
        &["now", "row", "clients", "generations", "budget", "history"];

    fn encode_state(&self, state: &IdempotencyState) -> Map<String, Json> {
        let clients: Vec<Json> = state
            .clients
            .iter()
            .map(|client| {
                json!({ "fingerprint": word(client.fingerprint), "stage": stage_json(client.stage), "stalled": client.stalled })
            })
            .collect();
        let budget = &state.budget;
        let history = &state.history;
        let mut vars = Map::new();
        vars.insert("now".into(), int(state.now.into()));
        vars.insert("row".into(), row_json(state.row.as_ref()));
        vars.insert("clients".into(), Json::Array(clients));
        vars.insert("generations".into(), int(state.generations.into()));
        vars.insert(
            "budget".into(),
            json!({
                "ticks": int(budget.ticks.into()),
                "finalize_faults": int(budget.finalize_faults.into()),
                "claim_faults": int(budget.claim_faults.into()),
                "cancellations": int(budget.cancellations.into()),
                "process_faults": int(budget.process_faults.into()),
            }),
        );
        vars.insert(
            "history".into(),
            json!({
                "claimed_over": by_generation(&history.claimed_over, |seen| word(*seen)),
                "ran_with": by_generation(&history.ran_with, |fingerprint| word(*fingerprint)),
                "handler": by_generation(&history.handler, |outcome| word(*outcome)),
                "effects": Json::Array(history.effects.iter().map(|generation| int(generation.into())).collect()),
                "delivered": by_generation(&history.delivered, |received| received_json(*received)),
                "written": Json::Array(history.written.iter().map(|(generation, stored)| {
                    json!({ "generation": int((*generation).into()), "stored": stored_json(*stored) })
                }).collect()),
                "finalize_errors": by_generation(&history.finalize_errors, |errors| int((*errors).into())),
                "ended": by_generation(&history.ended, |ending| word(*ending)),
                "lifetime_start": int(history.lifetime_start.into()),
            }),
        );
        vars
    }

    fn encode_action(&self, action: &Action) -> (String, Map<String, Json>) {
        let mut picks = Map::new();
        let client_pick = |picks: &mut Map<String, Json>, client: usize| {
            picks.insert("client".into(), int(client as i64));
        };
        let name = match *action {
            Action::ClientSends {
                client,
                fingerprint,
            } => {
                client_pick(&mut picks, client);
                picks.insert("fingerprint".into(), word(fingerprint));
                "ClientSends"
            }
            Action::MiddlewareClaims { client } => {
                client_pick(&mut picks, client);
                "MiddlewareClaims"
            }
            Action::MiddlewareClaimFails { client, committed } => {
                client_pick(&mut picks, client);
                picks.insert("committed".into(), Json::Bool(committed));
                "MiddlewareClaimFails"
            }
            Action::MiddlewareReadsRow { client } => {
                client_pick(&mut picks, client);
                "MiddlewareReadsRow"
            }
            Action::HandlerResponds { client, outcome } => {
                client_pick(&mut picks, client);
                picks.insert("outcome".into(), word(outcome));
                "HandlerResponds"
            }
            Action::MiddlewareCaptures { client } => {
                client_pick(&mut picks, client);
                "MiddlewareCaptures"
            }
            Action::MiddlewareFinalizes { client, result } => {
                client_pick(&mut picks, client);
                picks.insert("result".into(), Json::String(result_name(result).into()));
                "MiddlewareFinalizes"
            }
            Action::TailStreams { client } => {
                client_pick(&mut picks, client);
                "TailStreams"
            }
            Action::ClientCancels {
                client,
                at,
                in_flight_commits,
            } => {
                client_pick(&mut picks, client);
                picks.insert("at".into(), word(at));
                picks.insert("in_flight_commits".into(), Json::Bool(in_flight_commits));
                "ClientCancels"
            }
            Action::DropGuardFinalizes { client, result } => {
                client_pick(&mut picks, client);
                picks.insert("result".into(), Json::String(result_name(result).into()));
                "DropGuardFinalizes"
            }
            Action::ClockTicks => "ClockTicks",
            Action::CleanupPurges => "CleanupPurges",
            Action::ProcessStalls { client } => {
                client_pick(&mut picks, client);
                "ProcessStalls"
            }
            Action::ProcessDies { client } => {
                client_pick(&mut picks, client);
                "ProcessDies"
            }
            Action::ReconcilerResolves { applied } => {
                picks.insert("applied".into(), Json::Bool(applied));
                "ReconcilerResolves"
            }
        };
        (name.to_string(), picks)
    }

    fn decode_action(&self, name: &str, picks: &Map<String, Json>) -> Result<Action, String> {
        let client = || -> Result<usize, String> {
            let value = pick(picks, "client")?;
            let index =
                read_int(value).ok_or_else(|| format!("`client` is not an integer: {value}"))?;
            if index < 0 || index as usize >= self.clients {
                return Err(format!(
                    "`client` = {index} names no client (there are {})",
                    self.clients
                ));
            }
            Ok(index as usize)
        };
        let result = || {
            pick_named(picks, "result", &DB_RESULTS, |result| {
                result_name(result).to_string()
            })
        };
        let debug = |value: &dyn std::fmt::Debug| format!("{value:?}");
        Ok(match name {
            "ClientSends" => Action::ClientSends {
                client: client()?,
                fingerprint: pick_named(picks, "fingerprint", &FINGERPRINTS, |f| debug(&f))?,
            },
            "MiddlewareClaims" => Action::MiddlewareClaims { client: client()? },
            "MiddlewareClaimFails" => {
                Action::MiddlewareClaimFails { client: client()?, committed: pick_bool(picks, "committed")? }
            }
            "MiddlewareReadsRow" => Action::MiddlewareReadsRow { client: client()? },
            "HandlerResponds" => Action::HandlerResponds {
                client: client()?,
                outcome: pick_named(picks, "outcome", &Outcome::ALL, |o| debug(&o))?,
            },
            "MiddlewareCaptures" => Action::MiddlewareCaptures { client: client()? },
            "MiddlewareFinalizes" => Action::MiddlewareFinalizes { client: client()?, result: result()? },
            "TailStreams" => Action::TailStreams { client: client()? },
            "ClientCancels" => Action::ClientCancels {
                client: client()?,
                at: pick_named(picks, "at", &AWAIT_POINTS, |at| debug(&at))?,
                in_flight_commits: pick_bool(picks, "in_flight_commits")?,
            },
            "DropGuardFinalizes" => Action::DropGuardFinalizes { client: client()?, result: result()? },
            "ClockTicks" => Action::ClockTicks,
            "CleanupPurges" => Action::CleanupPurges,
            "ProcessStalls" => Action::ProcessStalls { client: client()? },
            "ProcessDies" => Action::ProcessDies { client: client()? },
            "ReconcilerResolves" => Action::ReconcilerResolves { applied: pick_bool(picks, "applied")? },
            other => {
                return Err(format!(
                    "unknown action `{other}` (valid: ClientSends, MiddlewareClaims, MiddlewareClaimFails, MiddlewareReadsRow, HandlerResponds, MiddlewareCaptures, MiddlewareFinalizes, TailStreams, ClientCancels, DropGuardFinalizes, ClockTicks, CleanupPurges, ProcessStalls, ProcessDies, ReconcilerResolves)"
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{shortest_paths, ModelSpec};
    use crate::trace::{from_itf, random_paths, to_itf, TraceMeta};

    fn model(variant: &str) -> IdempotencyModel {
        let bounds = IdempotencyModel::resolve_bounds(variant, &[]).unwrap();
        IdempotencyModel::build(variant, &bounds).unwrap()
    }

    fn counterexample(variant: &str, id: &str) -> (IdempotencyModel, Json) {
        let model = model(variant);
        let def = model
            .property_defs()
            .into_iter()
            .find(|def| def.name.starts_with(id))
            .unwrap();
        let path = shortest_paths(&model, &[(def.name, def.condition, false)])
            .remove(def.name)
            .unwrap();
        let meta = TraceMeta {
            kind: "counterexample".into(),
            property: Some(def.name.into()),
            description: String::new(),
        };
        let document = to_itf(&model, &path, &meta);
        (model, document)
    }

    #[test]
    fn every_action_round_trips_through_its_encoding() {
        for variant in IdempotencyModel::VARIANTS {
            let model = model(variant);
            for path in random_paths(&model, 60, 3, 200) {
                for (_, action) in &path {
                    let Some(action) = action else { continue };
                    let (name, picks) = model.encode_action(action);
                    assert_eq!(
                        model.decode_action(&name, &picks).as_ref(),
                        Ok(action),
                        "{variant}: {name}"
                    );
                }
            }
        }
    }

    //= specs/idempotency-middleware.md#M2
    //# No poison. A cached success holds the complete body, at most the cap, or the too-large sentinel.
    #[test]
    fn the_pre_fix_m2_counterexample_loads_back_to_the_same_path() {
        let (model, document) = counterexample("pre-fix", "M2");
        let loaded = from_itf::<IdempotencyModel>(&document).unwrap();
        assert_eq!(
            loaded.path.len(),
            document["states"].as_array().unwrap().len()
        );
        let last = &loaded.path.last().unwrap().0;
        let def = model
            .property_defs()
            .into_iter()
            .find(|def| def.name == "M2 no-poison")
            .unwrap();
        assert!(
            !(def.condition)(&model, last),
            "the reloaded path still ends in the violation"
        );
        assert_eq!(
            loaded
                .meta
                .property
                .as_deref()
                .map(|name| name.starts_with("M2")),
            Some(true)
        );
        let text = serde_json::to_string(&document).unwrap();
        assert!(
            text.contains(r#""mbt::actionTaken":"HandlerResponds""#),
            "{text}"
        );
        assert!(
            text.contains(r#""stored":"Empty""#),
            "the poisoned row is in the trace: {text}"
        );
    }

    #[test]
    fn an_edited_idempotency_trace_is_rejected_with_step_and_field() {
        let (_, document) = counterexample("fenced", "M1");
        let last = document["states"].as_array().unwrap().len() - 1;
        let step = (1..=last)
            .find(|index| document["states"][*index]["mbt::actionTaken"] == "HandlerResponds")
            .unwrap();

        let mut bad_outcome = document.clone();
        bad_outcome["states"][step]["mbt::nondetPicks"]["outcome"] =
            serde_json::json!({"tag": "Some", "value": "OkSideways"});
        let error = from_itf::<IdempotencyModel>(&bad_outcome).unwrap_err();
        assert_eq!(
            (error.step, error.field.as_str()),
            (Some(step), "mbt::nondetPicks")
        );
        assert!(
            error
                .message
                .contains("`outcome` = \"OkSideways\" is none of OkUnder"),
            "{error}"
        );

        let mut bad_client = document.clone();
        bad_client["states"][1]["mbt::nondetPicks"]["client"] =
            serde_json::json!({"tag": "Some", "value": int(5)});
        let error = from_itf::<IdempotencyModel>(&bad_client).unwrap_err();
        assert_eq!(error.step, Some(1));
        assert!(
            error.message.contains("names no client (there are 2)"),
            "{error}"
        );

        let mut drifted = document.clone();
        drifted["states"][last]["row"] = variant("None", unit());
        let error = from_itf::<IdempotencyModel>(&drifted).unwrap_err();
        assert_eq!((error.step, error.field.as_str()), (Some(last), "row"));

        let mut disabled = document.clone();
        disabled["states"][1]["mbt::actionTaken"] = Json::String("TailStreams".into());
        let error = from_itf::<IdempotencyModel>(&disabled).unwrap_err();
        assert_eq!(
            (error.step, error.field.as_str()),
            (Some(1), "mbt::actionTaken")
        );
        assert!(error.message.contains("not enabled"), "{error}");
    }
}
