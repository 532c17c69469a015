//! The relay model in ITF (see `crate::trace`): the table as the items a Scan would show, the
//! writers' phases, the pullers' cursors and received seqs, and the answers given per op id.
//!
//! Shaped as Quint writes its values: item keys and phases are variants (`{"tag": "Claim",
//! "value": "a"}`), a variant without data carries `[]` (`crate::trace::unit`), op ids are
//! the strings the real store uses (`a`, `legacy-1`); no value is a Debug string.

use super::{Action, Counter, Phase, RelayModel, RelayState, LEGACY_OP_BASE};
use crate::check::ModelPath;
use crate::ddb::{op_name, Key, OpId, Value};
use crate::trace::{covering_steps_of, int, map, set, unit, variant, CoverageKey, TraceEncoding};
use serde_json::{json, Map, Value as Json};

/// The op id as traces and the real store spell it: `a`, `b`, ... or `legacy-N`.
pub fn op_label(op: OpId) -> String {
    if op >= LEGACY_OP_BASE {
        format!("legacy-{}", op - LEGACY_OP_BASE)
    } else {
        op_name(op).to_string()
    }
}

fn op_text(op: OpId) -> Json {
    Json::String(op_label(op))
}

/// An item key as an ITF variant: `Counter`, `Claim` (the op id), `Op` (the seq).
pub fn key_json(key: Key) -> Json {
    match key {
        Key::Counter => variant("Counter", unit()),
        Key::Claim(op) => variant("Claim", op_text(op)),
        Key::Op(seq) => variant("Op", int(seq.into())),
    }
}

/// The inverse of [`key_json`].
pub fn parse_key_json(value: &Json) -> Option<Key> {
    let value_of = |tag: &str| {
        value
            .get("tag")
            .and_then(Json::as_str)
            .filter(|found| *found == tag)
            .and(value.get("value"))
    };
    if value_of("Counter").is_some() {
        return Some(Key::Counter);
    }
    if let Some(op) = value_of("Claim") {
        return parse_op(op.as_str()?).map(Key::Claim);
    }
    let seq = crate::trace::read_int(value_of("Op")?)?;
    u8::try_from(seq).ok().map(Key::Op)
}

pub fn key_text(key: Key) -> String {
    match key {
        Key::Counter => "counter".to_string(),
        Key::Claim(op) => format!("claim {}", op_text(op).as_str().unwrap_or_default()),
        Key::Op(seq) => format!("op {seq}"),
    }
}

fn parse_op(text: &str) -> Option<OpId> {
    if let Some(number) = text.strip_prefix("legacy-") {
        return number
            .parse::<u8>()
            .ok()
            .filter(|seq| *seq <= 50)
            .map(|seq| LEGACY_OP_BASE + seq);
    }
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(letter @ 'a'..='z'), None) => Some(letter as u8 - b'a'),
        _ => None,
    }
}

fn value_json(value: Value) -> Json {
    match value {
        Value::Counter { next_seq } => json!({ "next_seq": int(next_seq.into()) }),
        Value::Claim { seq } => json!({ "seq": int(seq.into()) }),
        Value::Op { op_id } => json!({ "op_id": op_text(op_id) }),
    }
}

/// Items by kind, keyed by plain values (ITF readers such as the `itf` crate refuse variants
/// as map keys): `counter` (Some/None), `claims` (op id -> seq), `ops` (seq -> op id).
fn table_json(items: &crate::sorted_map::SortedMap<Key, Value>) -> Json {
    let counter = items
        .iter()
        .find(|(key, _)| **key == Key::Counter)
        .map(|(_, value)| value_json(*value));
    let claims = items.iter().filter_map(|(key, value)| match key {
        Key::Claim(op) => Some((op_text(*op), value_json(*value))),
        _ => None,
    });
    let ops = items.iter().filter_map(|(key, value)| match key {
        Key::Op(seq) => Some((int((*seq).into()), value_json(*value))),
        _ => None,
    });
    json!({
        "counter": match counter {
            Some(value) => variant("Some", value),
            None => variant("None", unit()),
        },
        "claims": map(claims),
        "ops": map(ops),
    })
}

fn phase_json(phase: &Phase) -> Json {
    match phase {
        Phase::Ready => variant("Ready", unit()),
        Phase::Allocated { seq } => variant("Allocated", json!({ "seq": int((*seq).into()) })),
        Phase::Sent { round, .. } => variant(
            "Sent",
            json!({ "seq": int(round.seq.into()), "expected": int(round.expected.into()) }),
        ),
        Phase::ReadingClaim { op } => variant("ReadingClaim", json!({ "op": op_text(*op) })),
        Phase::ReadingClaims => variant("ReadingClaims", unit()),
        Phase::QueryingTop => variant("QueryingTop", unit()),
        Phase::Done => variant("Done", unit()),
        // The error's variant name (a unit variant) as the inner tag.
        Phase::Failed(error) => variant("Failed", variant(&format!("{error:?}"), unit())),
    }
}

pub fn action_words(action: &Action) -> String {
    let (name, picks) = RelayModel::encode_action_parts(action);
    let mut words = vec![name];
    for (field, value) in picks {
        let text = match (field.as_str(), crate::trace::read_int(&value)) {
            ("writer", Some(index)) => crate::view::element_name("writers", index as usize),
            ("puller", Some(index)) => crate::view::element_name("pullers", index as usize),
            ("key", _) => parse_key_json(&value)
                .map(key_text)
                .unwrap_or_else(|| value.to_string()),
            // Ops are named by their seq, as the step words name them (`put op 1 = a`).
            ("seq", Some(seq)) => format!("op {seq}"),
            _ => value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string()),
        };
        words.push(text);
    }
    words.join(" ")
}

fn read_index(picks: &Map<String, Json>, field: &str, count: usize) -> Result<u8, String> {
    let value = picks
        .get(field)
        .ok_or_else(|| format!("`{field}` is missing"))?;
    let index = crate::trace::read_int(value)
        .ok_or_else(|| format!("`{field}` is not an integer: {value}"))?;
    if index < 0 || index as usize >= count {
        return Err(format!(
            "`{field}` = {index} names no actor (there are {count})"
        ));
    }
    Ok(index as u8)
}

fn read_seq(picks: &Map<String, Json>) -> Result<u8, String> {
    let value = picks.get("seq").ok_or("`seq` is missing")?;
    let seq =
        crate::trace::read_int(value).ok_or_else(|| format!("`seq` is not an integer: {value}"))?;
    u8::try_from(seq).map_err(|_| format!("`seq` = {seq} is out of range"))
}

impl TraceEncoding for RelayModel {
    const VARS: &'static [&'static str] = &[
        "items",
        "pending",
        "writers",
        "pullers",
        "answers",
        "folders",
        "truncated",
    ];
    const PICKS: &'static [&'static str] = &["writer", "puller", "key", "seq"];

    fn encode_state(&self, state: &RelayState) -> Map<String, Json> {
        let items = table_json(&state.table.applied);
        let pending = table_json(&state.table.pending);
        let writers: Vec<Json> = state
            .writers
            .iter()
            .map(|writer| {
                json!({
                    "phase": phase_json(&writer.phase),
                    "next_op": int(writer.next_op.into()),
                    "counter": match writer.counter {
                        Counter::Unknown => variant("Unknown", unit()),
                        Counter::Known(value) => variant("Known", int(value.into())),
                    },
                })
            })
            .collect();
        let pullers: Vec<Json> = state
            .pullers
            .iter()
            .map(|puller| {
                json!({
                    "cursor": int(puller.cursor.into()),
                    "received": set(puller.received.iter().map(|seq| int(seq.into()))),
                    "pulls_left": int(puller.pulls_left.into()),
                })
            })
            .collect();
        let answers = map(state
            .answers
            .iter()
            .map(|(op, seqs)| (op_text(*op), set(seqs.iter().map(|seq| int(seq.into()))))));
        let mut vars = Map::new();
        vars.insert("items".to_string(), items);
        vars.insert("pending".to_string(), pending);
        vars.insert("writers".to_string(), Json::Array(writers));
        vars.insert("pullers".to_string(), Json::Array(pullers));
        vars.insert("answers".to_string(), answers);
        let folders: Vec<Json> = state
            .folders
            .iter()
            .map(|folder| {
                json!({
                    "folded": set(folder.folded.iter().map(|seq| int(seq.into()))),
                    "watermark": int(folder.watermark.into()),
                })
            })
            .collect();
        vars.insert("folders".to_string(), Json::Array(folders));
        vars.insert(
            "truncated".to_string(),
            map(state
                .truncated
                .iter()
                .map(|(seq, op)| (int((*seq).into()), op_text(*op)))),
        );
        vars
    }

    fn encode_action(&self, action: &Action) -> (String, Map<String, Json>) {
        RelayModel::encode_action_parts(action)
    }

    fn decode_action(&self, name: &str, picks: &Map<String, Json>) -> Result<Action, String> {
        let writers = self.writers.len();
        let writer = || read_index(picks, "writer", writers);
        Ok(match name {
            "WriterReadsCounter" => Action::WriterReadsCounter { writer: writer()? },
            "WriterAddsToCounter" => Action::WriterAddsToCounter { writer: writer()? },
            "WriterSendsRound" => Action::WriterSendsRound { writer: writer()? },
            "WriterReceivesResponse" => Action::WriterReceivesResponse { writer: writer()? },
            "ResponseLost" => Action::ResponseLost { writer: writer()? },
            "WriterReadsClaim" => Action::WriterReadsClaim { writer: writer()? },
            "WriterQueriesTop" => Action::WriterQueriesTop { writer: writer()? },
            "WriterReadsClaims" => Action::WriterReadsClaims { writer: writer()? },
            "PushDeadlinePasses" => Action::PushDeadlinePasses { writer: writer()? },
            "FolderReceivesRecord" => Action::FolderReceivesRecord { seq: read_seq(picks)? },
            "TruncatorDeletes" => Action::TruncatorDeletes { seq: read_seq(picks)? },
            "ItemApplied" => {
                let value = picks.get("key").ok_or("`key` is missing")?;
                Action::ItemApplied { key: parse_key_json(value).ok_or_else(|| format!("`key` = {value} is no item key"))? }
            }
            "PullerQueries" => Action::PullerQueries { puller: read_index(picks, "puller", self.bounds.pullers as usize)? },
            other => return Err(format!("unknown action `{other}` (valid: WriterReadsCounter, WriterAddsToCounter, WriterSendsRound, WriterReceivesResponse, ResponseLost, WriterReadsClaim, WriterReadsClaims, WriterQueriesTop, PushDeadlinePasses, ItemApplied, PullerQueries, FolderReceivesRecord, TruncatorDeletes)")),
        })
    }

    fn covering_steps(&self) -> Vec<(CoverageKey<Self>, ModelPath<Self>)> {
        covering_steps_of(self)
    }

    /// A writer's steps while it retries an op whose response was lost: the position of the op
    /// in its push, and for the steps that decide the retry, their outcome. The covering set
    /// then holds every (lost-response position x next outcome) pair the bounds reach.
    fn coverage_context(&self, before: &RelayState, action: &Action) -> Option<String> {
        let writer = match *action {
            Action::WriterReadsCounter { writer }
            | Action::WriterSendsRound { writer }
            | Action::WriterReceivesResponse { writer }
            | Action::WriterReadsClaim { writer }
            | Action::WriterReadsClaims { writer }
            | Action::WriterQueriesTop { writer }
            | Action::PushDeadlinePasses { writer } => writer as usize,
            _ => return None,
        };
        let state = &before.writers[writer];
        if !state.retrying_lost_response {
            return None;
        }
        let position = state.next_op as usize;
        let after = stateright::Model::next_state(self, before, *action)?;
        let outcome = match (action, &after.writers[writer].phase) {
            (Action::WriterReadsCounter { .. } | Action::WriterSendsRound { .. }, _) => None,
            (_, _) if after.writers[writer].next_op > state.next_op => {
                Some("the op is answered with the seq it was stored at".to_string())
            }
            (_, Phase::Ready) => Some("a lost round".to_string()),
            (_, Phase::ReadingClaim { .. }) => Some("the claim is read back".to_string()),
            (_, Phase::ReadingClaims) => {
                Some("the push's claims are read in one batch".to_string())
            }
            (_, Phase::QueryingTop) => Some("the top is queried".to_string()),
            (_, Phase::Done) => Some("the push is done".to_string()),
            (_, Phase::Failed(error)) => Some(format!("the push fails: {error:?}")),
            (_, phase) => Some(format!("{phase:?}")),
        };
        let at = format!(
            "retrying after a lost response at op {} of the push",
            position + 1
        );
        Some(match outcome {
            Some(outcome) => format!("{at}: {outcome}"),
            None => at,
        })
    }
}

impl RelayModel {
    /// The action's trace name and picks; needs no model, so the Explorer's words use it too.
    fn encode_action_parts(action: &Action) -> (String, Map<String, Json>) {
        let mut picks = Map::new();
        let name = match *action {
            Action::WriterReadsCounter { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterReadsCounter"
            }
            Action::WriterAddsToCounter { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterAddsToCounter"
            }
            Action::WriterSendsRound { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterSendsRound"
            }
            Action::WriterReceivesResponse { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterReceivesResponse"
            }
            Action::ResponseLost { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "ResponseLost"
            }
            Action::WriterReadsClaim { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterReadsClaim"
            }
            Action::WriterQueriesTop { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterQueriesTop"
            }
            Action::WriterReadsClaims { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "WriterReadsClaims"
            }
            Action::PushDeadlinePasses { writer } => {
                picks.insert("writer".into(), int(writer.into()));
                "PushDeadlinePasses"
            }
            Action::FolderReceivesRecord { seq } => {
                picks.insert("seq".into(), int(seq.into()));
                "FolderReceivesRecord"
            }
            Action::TruncatorDeletes { seq } => {
                picks.insert("seq".into(), int(seq.into()));
                "TruncatorDeletes"
            }
            Action::ItemApplied { key } => {
                picks.insert("key".into(), key_json(key));
                "ItemApplied"
            }
            Action::PullerQueries { puller } => {
                picks.insert("puller".into(), int(puller.into()));
                "PullerQueries"
            }
        };
        (name.to_string(), picks)
    }
}
