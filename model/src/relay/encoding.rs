//! The relay model in ITF (see `crate::trace`): the table as the items a Scan would show, the
//! writers' phases, the pullers' cursors and received seqs, and the answers given per op id.

use super::{Action, Counter, Phase, RelayModel, RelayState, LEGACY_OP_BASE};
use crate::ddb::{op_name, Key, OpId, Value};
use crate::trace::{int, map, set, TraceEncoding};
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

pub fn key_text(key: Key) -> String {
    match key {
        Key::Counter => "counter".to_string(),
        Key::Claim(op) => format!("claim {}", op_text(op).as_str().unwrap_or_default()),
        Key::Op(seq) => format!("op {seq}"),
    }
}

fn parse_op(text: &str) -> Option<OpId> {
    if let Some(number) = text.strip_prefix("legacy-") {
        return number.parse::<u8>().ok().filter(|seq| *seq <= 50).map(|seq| LEGACY_OP_BASE + seq);
    }
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(letter @ 'a'..='z'), None) => Some(letter as u8 - b'a'),
        _ => None,
    }
}

pub fn parse_key(text: &str) -> Option<Key> {
    if text == "counter" {
        return Some(Key::Counter);
    }
    if let Some(op) = text.strip_prefix("claim ") {
        return parse_op(op).map(Key::Claim);
    }
    text.strip_prefix("op ")?.parse::<u8>().ok().map(Key::Op)
}

fn value_json(value: Value) -> Json {
    match value {
        Value::Counter { next_seq } => json!({ "next_seq": int(next_seq.into()) }),
        Value::Claim { seq } => json!({ "seq": int(seq.into()) }),
        Value::Op { op_id } => json!({ "op_id": op_text(op_id) }),
    }
}

fn phase_text(phase: &Phase) -> String {
    match phase {
        Phase::Ready => "Ready".to_string(),
        Phase::Allocated { seq } => format!("Allocated({seq})"),
        Phase::Sent { round, .. } => format!("Sent(seq {}, expected {})", round.seq, round.expected),
        Phase::ReadingClaim { op } => format!("ReadingClaim({})", op_name(*op)),
        Phase::ReadingClaims => "ReadingClaims".to_string(),
        Phase::QueryingTop => "QueryingTop".to_string(),
        Phase::Done => "Done".to_string(),
        Phase::Failed(error) => format!("Failed({error:?})"),
    }
}

fn read_index(picks: &Map<String, Json>, field: &str, count: usize) -> Result<u8, String> {
    let value = picks.get(field).ok_or_else(|| format!("`{field}` is missing"))?;
    let index = crate::trace::read_int(value).ok_or_else(|| format!("`{field}` is not an integer: {value}"))?;
    if index < 0 || index as usize >= count {
        return Err(format!("`{field}` = {index} names no actor (there are {count})"));
    }
    Ok(index as u8)
}

fn read_seq(picks: &Map<String, Json>) -> Result<u8, String> {
    let value = picks.get("seq").ok_or("`seq` is missing")?;
    let seq = crate::trace::read_int(value).ok_or_else(|| format!("`seq` is not an integer: {value}"))?;
    u8::try_from(seq).map_err(|_| format!("`seq` = {seq} is out of range"))
}

impl TraceEncoding for RelayModel {
    const VARS: &'static [&'static str] = &["items", "pending", "writers", "pullers", "answers", "folders", "truncated"];

    fn encode_state(&self, state: &RelayState) -> Map<String, Json> {
        let items = map(state.table.applied.iter().map(|(key, value)| (Json::String(key_text(*key)), value_json(*value))));
        let pending = map(state.table.pending.iter().map(|(key, value)| (Json::String(key_text(*key)), value_json(*value))));
        let writers: Vec<Json> = state
            .writers
            .iter()
            .map(|writer| {
                json!({
                    "phase": phase_text(&writer.phase),
                    "next_op": int(writer.next_op.into()),
                    "counter": match writer.counter {
                        Counter::Unknown => json!({ "tag": "Unknown", "value": {} }),
                        Counter::Known(value) => json!({ "tag": "Known", "value": int(value.into()) }),
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
                    "received": set(puller.received.iter().map(|seq| int((*seq).into()))),
                    "pulls_left": int(puller.pulls_left.into()),
                })
            })
            .collect();
        let answers = map(state.answers.iter().map(|(op, seqs)| (op_text(*op), set(seqs.iter().map(|seq| int((*seq).into()))))));
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
                    "folded": set(folder.folded.iter().map(|seq| int((*seq).into()))),
                    "watermark": int(folder.watermark.into()),
                })
            })
            .collect();
        vars.insert("folders".to_string(), Json::Array(folders));
        vars.insert("truncated".to_string(), map(state.truncated.iter().map(|(seq, op)| (int((*seq).into()), op_text(*op)))));
        vars
    }

    fn encode_action(&self, action: &Action) -> (String, Map<String, Json>) {
        let mut picks = Map::new();
        let name = match *action {
            Action::WriterReadsCounter { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterReadsCounter" }
            Action::WriterAddsToCounter { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterAddsToCounter" }
            Action::WriterSendsRound { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterSendsRound" }
            Action::WriterReceivesResponse { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterReceivesResponse" }
            Action::ResponseLost { writer } => { picks.insert("writer".into(), int(writer.into())); "ResponseLost" }
            Action::WriterReadsClaim { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterReadsClaim" }
            Action::WriterQueriesTop { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterQueriesTop" }
            Action::WriterReadsClaims { writer } => { picks.insert("writer".into(), int(writer.into())); "WriterReadsClaims" }
            Action::PushDeadlinePasses { writer } => { picks.insert("writer".into(), int(writer.into())); "PushDeadlinePasses" }
            Action::FolderReceivesRecord { seq } => { picks.insert("seq".into(), int(seq.into())); "FolderReceivesRecord" }
            Action::TruncatorDeletes { seq } => { picks.insert("seq".into(), int(seq.into())); "TruncatorDeletes" }
            Action::ItemApplied { key } => { picks.insert("key".into(), Json::String(key_text(key))); "ItemApplied" }
            Action::PullerQueries { puller } => { picks.insert("puller".into(), int(puller.into())); "PullerQueries" }
        };
        (name.to_string(), picks)
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
                let text = picks.get("key").and_then(Json::as_str).ok_or("`key` is missing or not a string")?;
                Action::ItemApplied { key: parse_key(text).ok_or_else(|| format!("`key` = {text:?} is no item key"))? }
            }
            "PullerQueries" => Action::PullerQueries { puller: read_index(picks, "puller", self.bounds.pullers as usize)? },
            other => return Err(format!("unknown action `{other}` (valid: WriterReadsCounter, WriterAddsToCounter, WriterSendsRound, WriterReceivesResponse, ResponseLost, WriterReadsClaim, WriterReadsClaims, WriterQueriesTop, PushDeadlinePasses, ItemApplied, PullerQueries, FolderReceivesRecord, TruncatorDeletes)")),
        })
    }
}
