//! The token model in ITF (see `crate::trace`), so its traces can be exported and replayed
//! (`oncecheck traces token`, `oncecheck replay --target tokened-dynamodb=URL`): the clients with
//! their attempts, the table, the server's token records, the clock and the damage budget.
//!
//! Invariants: every field of [`TokenState`] is written (strict loading compares them all);
//! enums are written as their Rust names, numbers as ITF integers; the action parameters
//! round-trip (`decode_action(encode_action(a)) == a`, tested), and a parameter that names
//! nothing the model has is an error naming the parameter.

use super::*;
use crate::trace::{int, map, read_int, TraceEncoding};
use serde_json::{json, Map, Value as Json};

fn word<T: std::fmt::Debug>(value: T) -> Json {
    Json::String(format!("{value:?}"))
}

fn counts(values: &[u8]) -> Json {
    Json::Array(values.iter().map(|value| int((*value).into())).collect())
}

fn attempt_json(attempt: &Attempt) -> Json {
    json!({
        "rebuilt": attempt.rebuilt,
        "sent_at": int(attempt.sent_at.into()),
        "host": int(attempt.host.into()),
        "server": word(attempt.server),
        "client": word(attempt.client),
    })
}

const ANSWERS: [Answer; 7] = [
    Answer::Success,
    Answer::ConditionalCheckFailed,
    Answer::IdempotentParameterMismatch,
    Answer::TransactionInProgress,
    Answer::TransactionConflict,
    Answer::ValidationError,
    Answer::InternalServerError,
];

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

fn pick_small(picks: &Map<String, Json>, field: &str, below: usize) -> Result<u8, String> {
    let value = pick(picks, field)?;
    let number = read_int(value).ok_or_else(|| format!("`{field}` is not an integer: {value}"))?;
    if number < 0 || number as usize >= below {
        return Err(format!("`{field}` = {number} is out of range 0..{below}"));
    }
    Ok(number as u8)
}

impl TraceEncoding for TokenModel {
    const VARS: &'static [&'static str] = &["clients", "table", "tokens", "now", "damages_left"];
    const PICKS: &'static [&'static str] = &[
        "client",
        "host",
        "token_too_long",
        "rebuilt",
        "attempt",
        "answer",
        "token",
    ];

    fn encode_state(&self, state: &TokenState) -> Map<String, Json> {
        let clients: Vec<Json> = state
            .clients
            .iter()
            .map(|client| {
                json!({
                    "pattern": word(client.pattern),
                    "token_too_long": client.token_too_long,
                    "attempts": client.attempts.iter().map(attempt_json).collect::<Vec<_>>(),
                    "reconciled": match &client.reconciled {
                        None => json!({ "tag": "None", "value": [] }),
                        Some(seen) => json!({ "tag": "Some", "value": counts(seen) }),
                    },
                })
            })
            .collect();
        let table = &state.table;
        let owner = |owner: Option<ClientId>| match owner {
            None => json!({ "tag": "None", "value": [] }),
            Some(client) => json!({ "tag": "Some", "value": int(client.into()) }),
        };
        let mut vars = Map::new();
        vars.insert("clients".into(), Json::Array(clients));
        vars.insert(
            "table".into(),
            json!({
                "applications": table.applications.iter().map(|items| counts(items)).collect::<Vec<_>>(),
                "profile_holder": owner(table.profile_holder),
                "order_owner": owner(table.order_owner),
            }),
        );
        vars.insert(
            "tokens".into(),
            map(state.tokens.iter().map(|(token, record)| {
                (
                    int((*token).into()),
                    json!({ "rebuilt": record.rebuilt, "phase": word(record.phase) }),
                )
            })),
        );
        vars.insert("now".into(), int(state.now.into()));
        vars.insert("damages_left".into(), int(state.damages_left.into()));
        vars
    }

    fn encode_action(&self, action: &Action) -> (String, Map<String, Json>) {
        let mut picks = Map::new();
        let mut put = |field: &str, value: Json| {
            picks.insert(field.into(), value);
        };
        let name = match *action {
            Action::ClientSends {
                client,
                host,
                token_too_long,
            } => {
                put("client", int(client.into()));
                put("host", int(host.into()));
                put("token_too_long", Json::Bool(token_too_long));
                "ClientSends"
            }
            Action::ClientRetries {
                client,
                rebuilt,
                host,
            } => {
                put("client", int(client.into()));
                put("rebuilt", Json::Bool(rebuilt));
                put("host", int(host.into()));
                "ClientRetries"
            }
            Action::ServerBegins { client, attempt }
            | Action::ServerCommits { client, attempt }
            | Action::ServerReplays { client, attempt }
            | Action::ResponseDelivered { client, attempt }
            | Action::ResponseLost { client, attempt } => {
                put("client", int(client.into()));
                put("attempt", int(attempt.into()));
                match action {
                    Action::ServerBegins { .. } => "ServerBegins",
                    Action::ServerCommits { .. } => "ServerCommits",
                    Action::ServerReplays { .. } => "ServerReplays",
                    Action::ResponseDelivered { .. } => "ResponseDelivered",
                    _ => "ResponseLost",
                }
            }
            Action::ServerRejects {
                client,
                attempt,
                answer,
            } => {
                put("client", int(client.into()));
                put("attempt", int(attempt.into()));
                put("answer", word(answer));
                "ServerRejects"
            }
            Action::ClockTicks => "ClockTicks",
            Action::ClientReads { client } => {
                put("client", int(client.into()));
                "ClientReads"
            }
            Action::RecordLosesTimestamp { token } => {
                put("token", int(token.into()));
                "RecordLosesTimestamp"
            }
        };
        (name.to_string(), picks)
    }

    fn decode_action(&self, name: &str, picks: &Map<String, Json>) -> Result<Action, String> {
        let clients = usize::from(self.limits.clients);
        let client = || pick_small(picks, "client", clients);
        // Attempts are bounded by the retries; hosts by the skew (two at most).
        let attempt = || pick_small(picks, "attempt", usize::from(self.limits.retries) + 1);
        let host = || pick_small(picks, "host", 2);
        Ok(match name {
            "ClientSends" => Action::ClientSends {
                client: client()?,
                host: host()?,
                token_too_long: pick_bool(picks, "token_too_long")?,
            },
            "ClientRetries" => Action::ClientRetries {
                client: client()?,
                rebuilt: pick_bool(picks, "rebuilt")?,
                host: host()?,
            },
            "ServerBegins" => Action::ServerBegins {
                client: client()?,
                attempt: attempt()?,
            },
            "ServerCommits" => Action::ServerCommits {
                client: client()?,
                attempt: attempt()?,
            },
            "ServerReplays" => Action::ServerReplays {
                client: client()?,
                attempt: attempt()?,
            },
            "ResponseDelivered" => Action::ResponseDelivered {
                client: client()?,
                attempt: attempt()?,
            },
            "ResponseLost" => Action::ResponseLost {
                client: client()?,
                attempt: attempt()?,
            },
            "ServerRejects" => {
                let value = pick(picks, "answer")?;
                let text = value
                    .as_str()
                    .ok_or_else(|| format!("`answer` is not a string: {value}"))?;
                let answer = ANSWERS
                    .iter()
                    .copied()
                    .find(|answer| format!("{answer:?}") == text)
                    .ok_or_else(|| format!("`answer` = {text:?} is no answer of the server"))?;
                Action::ServerRejects {
                    client: client()?,
                    attempt: attempt()?,
                    answer,
                }
            }
            "ClockTicks" => Action::ClockTicks,
            "ClientReads" => Action::ClientReads { client: client()? },
            "RecordLosesTimestamp" => Action::RecordLosesTimestamp {
                token: pick_small(picks, "token", clients)?,
            },
            other => return Err(format!("`{other}` is no action of the token model")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{from_itf, to_itf, TraceMeta};

    fn model(variant: &str) -> TokenModel {
        TokenModel::build(variant, &Bounds::resolve(TokenModel::BOUNDS, &[]).unwrap()).unwrap()
    }

    #[test]
    fn every_action_of_a_walk_round_trips() {
        for variant in ["tokened", "tokenless", "late-retry"] {
            let model = model(variant);
            let mut state = model.init_states().remove(0);
            // A deterministic walk: always the last action offered, 40 steps at most.
            for _ in 0..40 {
                let mut actions = Vec::new();
                model.actions(&state, &mut actions);
                let Some(action) = actions.pop() else { break };
                let (name, picks) = model.encode_action(&action);
                assert_eq!(model.decode_action(&name, &picks), Ok(action.clone()));
                state = model.next_state(&state, action).unwrap();
            }
        }
    }

    #[test]
    fn a_path_exports_and_loads_back() {
        let model = model("tokenless");
        let init = model.init_states().remove(0);
        let send = Action::ClientSends {
            client: 0,
            host: 0,
            token_too_long: false,
        };
        let sent = model.next_state(&init, send.clone()).unwrap();
        let path = vec![(init, Some(send)), (sent, None)];
        let meta = TraceMeta {
            kind: "path".into(),
            property: None,
            description: "one send".into(),
        };
        let document = to_itf(&model, &path, &meta);
        let loaded = from_itf::<TokenModel>(&document).expect("loads back");
        assert_eq!(loaded.path.len(), 2);
    }

    #[test]
    fn a_parameter_naming_nothing_is_an_error_naming_it() {
        let model = model("tokened");
        let mut picks = Map::new();
        picks.insert("client".into(), int(7));
        picks.insert("attempt".into(), int(0));
        let error = model.decode_action("ServerCommits", &picks).unwrap_err();
        assert!(error.contains("`client` = 7"), "{error}");
        let error = model.decode_action("ServerFlies", &Map::new()).unwrap_err();
        assert!(error.contains("ServerFlies"), "{error}");
    }
}
