//! The table and the requests of a relay trace in the model's words, on both sides: the
//! committed items of the model's table and of the real one (`model_view`, `real_view`), a
//! round's items as the model sends them and as the real request carries them
//! (`model_round_items`, `real_round_items`), the keys and the attributes between them.
//!
//! Invariant: both sides of every comparison are spelled by the same words here, so a difference
//! is a difference of the real code, never of the spelling.

use super::OP_SIZES;
use crate::proxy::{Answer, ItemKey};
use crate::replay::driver::{payload_of, real_op_id, stored_op_in_words, stream_in_words};
use oncecheck_model::ddb::{Condition, Key, Reason, Value};
use oncecheck_model::relay::{Build, RelayModel, RelayState, Round};
use oncecheck_store::dynamodb::claim_key;
use oncecheck_store::DynamoDbStore;
use serde_json::Value as Json;
use sha2::Digest;
use std::collections::BTreeMap;

pub(super) fn key_of(stream: &str, key: Key) -> ItemKey {
    let seq = match key {
        Key::Counter => 0,
        Key::Claim(op) => claim_key(&real_op_id(op)),
        Key::Op(seq) => i64::from(seq),
    };
    ItemKey {
        stream: stream.to_string(),
        seq,
    }
}

pub(super) fn attribute_number(item: &serde_json::Map<String, Json>, name: &str) -> Option<i64> {
    item.get(name)?.get("N")?.as_str()?.parse().ok()
}

pub(super) fn attribute_string(item: &serde_json::Map<String, Json>, name: &str) -> Option<String> {
    item.get(name)?.get("S")?.as_str().map(str::to_string)
}

/// The committed items of one stream in the model's words: counter, claims, ops.
pub(super) fn model_view(state: &RelayState) -> BTreeMap<String, String> {
    let mut view = BTreeMap::new();
    for (key, value) in state.table.applied.iter().chain(state.table.pending.iter()) {
        let (name, text) = match (key, value) {
            (Key::Counter, Value::Counter { next_seq }) => {
                ("counter".to_string(), format!("next_seq {next_seq}"))
            }
            (Key::Claim(op), Value::Claim { seq }) => {
                (format!("claim {}", real_op_id(*op)), format!("seq {seq}"))
            }
            (Key::Op(seq), Value::Op { op_id }) => (format!("op {seq}"), real_op_id(*op_id)),
            _ => continue,
        };
        view.insert(name, text);
    }
    view
}

/// The committed items of one stream, read through the proxy's set-up port (past its window)
/// with a consistent Query of the stream's partition, in the model's words.
pub(super) async fn real_view(
    store: &DynamoDbStore,
    stream: &str,
) -> Result<BTreeMap<String, String>, String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let number = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| -> i64 {
        item.get(name)
            .and_then(|value| value.as_n().ok())
            .and_then(|text| text.parse().ok())
            .unwrap_or(-1)
    };
    let mut view = BTreeMap::new();
    let mut start = None;
    for _page in 0..QUERY_PAGES_MAX {
        let answer = store
            .client()
            .query()
            .table_name(store.table())
            .key_condition_expression("stream_id = :stream")
            .expression_attribute_values(":stream", AttributeValue::S(stream.to_string()))
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|error| {
                format!(
                    "reading stream {}: {}",
                    stream_in_words(stream),
                    aws_sdk_dynamodb::error::DisplayErrorContext(&error)
                )
            })?;
        for item in answer.items() {
            let seq = number(item, "seq");
            let op_id = item
                .get("op_id")
                .and_then(|value| value.as_s().ok())
                .cloned()
                .unwrap_or_default();
            if seq == 0 {
                view.insert(
                    "counter".to_string(),
                    format!("next_seq {}", number(item, "next_seq")),
                );
            } else if seq < 0 {
                let mut claimed = format!("seq {}", number(item, "claimed_seq"));
                // The claim's digest is checked against the op's own payload, hashed here:
                // a re-push is told apart from a conflicting payload by it.
                let digest = item
                    .get("payload_sha256")
                    .and_then(|value| value.as_b().ok());
                let own = sha2::Sha256::digest(payload_of(stream, &op_id, OP_SIZES));
                if digest.map(|digest| digest.as_ref()) != Some(own.as_slice()) {
                    claimed.push_str(" with a digest that is not its payload's");
                }
                view.insert(format!("claim {op_id}"), claimed);
            } else {
                let payload = item
                    .get("payload")
                    .and_then(|value| value.as_b().ok())
                    .map(|blob| blob.as_ref())
                    .unwrap_or_default();
                let words = stored_op_in_words(stream, &op_id, payload, OP_SIZES);
                view.insert(format!("op {seq}"), words);
            }
        }
        match answer.last_evaluated_key() {
            Some(last) if !last.is_empty() => start = Some(last.clone()),
            _ => return with_store_counter(store, stream, view).await,
        }
    }
    Err(format!(
        "stream {} has more than {QUERY_PAGES_MAX} pages",
        stream_in_words(stream)
    ))
}

/// The view, with what the store's own counter read (`read_counter`, the relay's and the
/// operator's) says when it is not the counter item's `next_seq` (0 without an item): the model's
/// counter is one value, whichever way it is read.
async fn with_store_counter(
    store: &DynamoDbStore,
    stream: &str,
    mut view: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    let item = view
        .get("counter")
        .cloned()
        .unwrap_or_else(|| "next_seq 0".to_string());
    let read = store.read_counter(stream).await.map_err(|error| {
        format!(
            "reading the counter of {}: {error}",
            stream_in_words(stream)
        )
    })?;
    if item != format!("next_seq {read}") {
        view.insert(
            "counter as the store reads it".to_string(),
            format!("next_seq {read}, where the item has {item}"),
        );
    }
    Ok(view)
}

/// A stream of a trace holds a few dozen items: one page. The bound only stops a runaway.
const QUERY_PAGES_MAX: usize = 100;
/// The items of a TransactWriteItems in the model's words, from the request body.
pub(super) fn real_round_items(body: &Json, stream: &str) -> Vec<String> {
    let Some(items) = body.get("TransactItems").and_then(Json::as_array) else {
        return vec!["(no TransactItems)".to_string()];
    };
    items
        .iter()
        .map(|item| {
            let Some((kind, inner)) = item.as_object().and_then(|object| object.iter().next())
            else {
                return "(empty item)".to_string();
            };
            let names = inner
                .get("ExpressionAttributeNames")
                .and_then(Json::as_object);
            let values = inner
                .get("ExpressionAttributeValues")
                .and_then(Json::as_object);
            let substitute = |text: &str| {
                let mut text = text.to_string();
                if let Some(names) = names {
                    for (placeholder, name) in names {
                        text =
                            text.replace(placeholder.as_str(), name.as_str().unwrap_or_default());
                    }
                }
                if let Some(values) = values {
                    let mut placeholders: Vec<(&String, &Json)> = values.iter().collect();
                    placeholders
                        .sort_by_key(|(placeholder, _)| std::cmp::Reverse(placeholder.len()));
                    for (placeholder, value) in placeholders {
                        let literal = value
                            .get("N")
                            .or_else(|| value.get("S"))
                            .and_then(Json::as_str)
                            .unwrap_or("?");
                        text = text.replace(placeholder.as_str(), literal);
                    }
                }
                text
            };
            let key_object = inner
                .get("Key")
                .or_else(|| inner.get("Item"))
                .and_then(Json::as_object);
            let seq = key_object.and_then(|key| attribute_number(key, "seq"));
            let item_stream = key_object
                .and_then(|key| attribute_string(key, "stream_id"))
                .unwrap_or_default();
            let condition = inner
                .get("ConditionExpression")
                .and_then(Json::as_str)
                .map(substitute)
                .unwrap_or_else(|| "-".to_string());
            let update = inner
                .get("UpdateExpression")
                .and_then(Json::as_str)
                .map(substitute);
            let stream_note = if item_stream == stream {
                String::new()
            } else {
                format!(" (stream {item_stream})")
            };
            let target = match seq {
                Some(0) => "counter".to_string(),
                Some(seq) if seq < 0 => {
                    let op = inner
                        .get("Item")
                        .and_then(Json::as_object)
                        .and_then(|item| attribute_string(item, "op_id"))
                        .unwrap_or_else(|| "?".to_string());
                    format!("claim {op}")
                }
                Some(seq) => {
                    let op = inner
                        .get("Item")
                        .and_then(Json::as_object)
                        .and_then(|item| attribute_string(item, "op_id"));
                    match op {
                        Some(op) => format!("op {seq} = {op}"),
                        None => format!("op {seq}"),
                    }
                }
                None => "(no key)".to_string(),
            };
            match update {
                Some(update) => format!("{kind} {target}{stream_note} [{update}] if {condition}"),
                None => format!("{kind} {target}{stream_note} if {condition}"),
            }
        })
        .collect()
}

/// The same words for the round the model sends.
pub(super) fn model_round_items(round: &Round, build: Build) -> Vec<String> {
    let op = real_op_id(round.op);
    let mut items = Vec::new();
    if build == Build::New {
        let condition = if round.expected == 0 {
            "attribute_not_exists(next_seq) OR next_seq = 0".to_string()
        } else {
            format!("next_seq = {}", round.expected)
        };
        items.push(format!(
            "Update counter [SET next_seq = {}] if {condition}",
            round.seq
        ));
    }
    items.push(format!("Put claim {op} if attribute_not_exists(stream_id)"));
    match round.predecessor {
        Some(Condition::AttributeExists) => items.push(format!(
            "ConditionCheck op {} if attribute_exists(stream_id)",
            round.seq - 1
        )),
        Some(Condition::AttributeNotExists) => items.push(format!(
            "ConditionCheck op {} if attribute_not_exists(stream_id)",
            round.seq - 1
        )),
        _ => {}
    }
    items.push(format!(
        "Put op {} = {op} if attribute_not_exists(stream_id)",
        round.seq
    ));
    items
}

pub(super) fn first_item_number(answer: &Answer, name: &str) -> Option<i64> {
    answer
        .body
        .get("Items")
        .and_then(Json::as_array)
        .and_then(|items| items.first())
        .and_then(Json::as_object)
        .and_then(|item| attribute_number(item, name))
}

/// Every op id of the trace by its claim's sort key, to name the claims a request asks for.
pub(super) fn claim_names(model: &RelayModel, stream: &str) -> BTreeMap<i64, String> {
    model
        .writers
        .iter()
        .flat_map(|(_, push)| push.iter())
        .map(|op| (key_of(stream, Key::Claim(*op)).seq, real_op_id(*op)))
        .collect()
}

pub(super) fn reason_code(reason: &Reason) -> String {
    match reason {
        Reason::None => "None".to_string(),
        Reason::ConditionalCheckFailed { .. } => "ConditionalCheckFailed".to_string(),
        Reason::TransactionConflict => "TransactionConflict".to_string(),
    }
}

pub(super) fn model_keys_of_round(round: &Round, build: Build, stream: &str) -> Vec<ItemKey> {
    let mut keys = Vec::new();
    if build == Build::New {
        keys.push(key_of(stream, Key::Counter));
    }
    keys.push(key_of(stream, Key::Claim(round.op)));
    if round.predecessor.is_some() {
        keys.push(key_of(stream, Key::Op(round.seq - 1)));
    }
    keys.push(key_of(stream, Key::Op(round.seq)));
    keys
}
