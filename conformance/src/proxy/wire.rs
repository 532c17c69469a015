//! Wire views of DynamoDB JSON: the items, keys, requests and answers the proxy reads and
//! writes, parsed into readable values and shaped back the way DynamoDB sends them.
//!
//! Invariants: a view never guesses — a field it cannot read is a [`ProxyError::Malformed`]
//! naming it; an answer the proxy synthesises (`cancelled`, `conflict`, `throttled`) has the
//! status, `__type` and fields a DynamoDB client library parses from the real service.

use std::fmt;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::Response;
use http_body_util::Full;
use oncecheck_store::dynamodb::{ATTRIBUTE_SEQ, ATTRIBUTE_STREAM_ID};
use serde_json::{json, Map, Value};

use super::ProxyError;

/// A DynamoDB JSON attribute map (`{"name": {"S": "..."}, ...}`).
pub type Item = Map<String, Value>;

pub(super) const TARGET_PREFIX: &str = "DynamoDB_20120810.";
pub(super) const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
const ERROR_NAMESPACE: &str = "com.amazonaws.dynamodb.v20120810#";

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemKey {
    pub stream: String,
    pub seq: i64,
}

impl ItemKey {
    pub fn new(stream: impl Into<String>, seq: i64) -> ItemKey {
        ItemKey {
            stream: stream.into(),
            seq,
        }
    }

    /// The key as a DynamoDB JSON attribute map.
    pub fn to_item(&self) -> Item {
        let mut key = Item::new();
        key.insert(ATTRIBUTE_STREAM_ID.to_owned(), json!({ "S": self.stream }));
        key.insert(
            ATTRIBUTE_SEQ.to_owned(),
            json!({ "N": self.seq.to_string() }),
        );
        key
    }

    /// Reads the key attributes of a key map or a whole item.
    pub fn from_item(item: &Item) -> Result<ItemKey, ProxyError> {
        let stream = item
            .get(ATTRIBUTE_STREAM_ID)
            .and_then(|value| value.get("S"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ProxyError::Malformed(format!(
                    "no {ATTRIBUTE_STREAM_ID} (S) in {}",
                    Value::from(item.clone())
                ))
            })?;
        let seq = item
            .get(ATTRIBUTE_SEQ)
            .and_then(|value| value.get("N"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ProxyError::Malformed(format!(
                    "no {ATTRIBUTE_SEQ} (N) in {}",
                    Value::from(item.clone())
                ))
            })?;
        let seq = seq
            .parse()
            .map_err(|_| ProxyError::Malformed(format!("{ATTRIBUTE_SEQ} {seq:?} is not an i64")))?;
        Ok(ItemKey::new(stream, seq))
    }
}

impl fmt::Display for ItemKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.stream, self.seq)
    }
}

/// An item's image read before a commit: what reads show while the item is pending.
#[derive(Clone, Debug, PartialEq)]
pub struct PreImage {
    pub table: String,
    pub key: ItemKey,
    /// `None`: the item did not exist, so reads show it absent while pending.
    pub item: Option<Item>,
}

/// One cancellation reason of a synthesised TransactionCanceledException.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonCode {
    None,
    ConditionalCheckFailed,
    TransactionConflict,
}

impl ReasonCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::None => "None",
            ReasonCode::ConditionalCheckFailed => "ConditionalCheckFailed",
            ReasonCode::TransactionConflict => "TransactionConflict",
        }
    }
}

/// An answer to a held request: from upstream (possibly rewritten) or synthesised.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    /// Extra response headers (content type and length are set on delivery).
    pub headers: Vec<(String, String)>,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error's short type (`TransactionCanceledException`), from `__type` after its `#`.
    pub fn error_type(&self) -> Option<String> {
        let kind = self.body.get("__type")?.as_str()?;
        Some(kind.rsplit('#').next().unwrap_or(kind).to_owned())
    }

    /// The cancellation reason codes of a TransactionCanceledException, in item order.
    pub fn cancellation_codes(&self) -> Option<Vec<String>> {
        let reasons = self.body.get("CancellationReasons")?.as_array()?;
        Some(
            reasons
                .iter()
                .map(|reason| {
                    reason
                        .get("Code")
                        .and_then(Value::as_str)
                        .unwrap_or("None")
                        .to_owned()
                })
                .collect(),
        )
    }

    pub(super) fn error(status: u16, kind: &str, message: &str) -> Answer {
        Answer {
            status,
            body: json!({ "__type": kind, "message": message }),
            headers: Vec::new(),
        }
    }

    pub(super) fn into_response(self) -> Response<Full<Bytes>> {
        let bytes = serde_json::to_vec(&self.body).unwrap_or_default();
        let mut response = Response::builder()
            .status(self.status)
            .header(CONTENT_TYPE, JSON_CONTENT_TYPE);
        for (name, value) in &self.headers {
            response = response.header(name.as_str(), value.as_str());
        }
        response
            .body(Full::new(Bytes::from(bytes)))
            .unwrap_or_else(|_| plain_response(500, "the proxy built an invalid response"))
    }
}

fn plain_response(status: u16, message: &str) -> Response<Full<Bytes>> {
    let body = json!({ "__type": "com.amazon.coral.service#InternalFailure", "message": message });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE));
    response
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransactKind {
    Update,
    Put,
    ConditionCheck,
    Delete,
}

impl TransactKind {
    fn wire_name(self) -> &'static str {
        match self {
            TransactKind::Update => "Update",
            TransactKind::Put => "Put",
            TransactKind::ConditionCheck => "ConditionCheck",
            TransactKind::Delete => "Delete",
        }
    }

    /// Whether the item is written when the transaction commits (a ConditionCheck only reads).
    pub fn writes(self) -> bool {
        !matches!(self, TransactKind::ConditionCheck)
    }
}

/// One TransactWriteItems item, parsed and readable.
#[derive(Clone, Debug, PartialEq)]
pub struct TransactItemView {
    pub kind: TransactKind,
    pub table: String,
    pub key: ItemKey,
    /// The condition with names and values substituted: `next_seq = 3`, `attribute_exists(stream_id)`.
    pub condition: Option<String>,
    /// The update expression, substituted the same way: `SET next_seq = 4`.
    pub update: Option<String>,
    /// The item a Put writes.
    pub put_item: Option<Item>,
    /// ReturnValuesOnConditionCheckFailure = ALL_OLD.
    pub all_old_on_failure: bool,
}

pub(super) fn transact_item(index: usize, item: &Value) -> Result<TransactItemView, ProxyError> {
    let malformed = |what: &str| ProxyError::Malformed(format!("TransactItems[{index}]: {what}"));
    let object = item.as_object().ok_or_else(|| malformed("not an object"))?;
    let (kind, inner) = [
        TransactKind::Update,
        TransactKind::Put,
        TransactKind::ConditionCheck,
        TransactKind::Delete,
    ]
    .into_iter()
    .find_map(|kind| object.get(kind.wire_name()).map(|inner| (kind, inner)))
    .ok_or_else(|| malformed("none of Update, Put, ConditionCheck, Delete"))?;
    let table = inner
        .get("TableName")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no TableName"))?
        .to_owned();
    let put_item = match kind {
        TransactKind::Put => Some(
            inner
                .get("Item")
                .and_then(Value::as_object)
                .cloned()
                .ok_or_else(|| malformed("a Put without its Item"))?,
        ),
        _ => None,
    };
    let key = match &put_item {
        Some(item) => ItemKey::from_item(item)?,
        None => ItemKey::from_item(
            inner
                .get("Key")
                .and_then(Value::as_object)
                .ok_or_else(|| malformed("no Key"))?,
        )?,
    };
    let names = inner
        .get("ExpressionAttributeNames")
        .and_then(Value::as_object);
    let values = inner
        .get("ExpressionAttributeValues")
        .and_then(Value::as_object);
    let substitute = |field: &str| -> Result<Option<String>, ProxyError> {
        inner
            .get(field)
            .and_then(Value::as_str)
            .map(|expression| substitute_expression(expression, names, values))
            .transpose()
    };
    Ok(TransactItemView {
        kind,
        table,
        key,
        condition: substitute("ConditionExpression")?,
        update: substitute("UpdateExpression")?,
        put_item,
        all_old_on_failure: inner
            .get("ReturnValuesOnConditionCheckFailure")
            .and_then(Value::as_str)
            == Some("ALL_OLD"),
    })
}

/// The keys a BatchGetItem asks for, as (table, key), in request order.
pub(super) fn batch_get_keys(body: &Value) -> Result<Vec<(String, ItemKey)>, ProxyError> {
    let tables = body
        .get("RequestItems")
        .and_then(Value::as_object)
        .ok_or_else(|| ProxyError::Malformed("BatchGetItem without RequestItems".into()))?;
    let mut keys = Vec::new();
    for (table, asked) in tables {
        let listed = asked.get("Keys").and_then(Value::as_array).ok_or_else(|| {
            ProxyError::Malformed(format!("BatchGetItem of {table} without Keys"))
        })?;
        for key in listed {
            let map = key
                .as_object()
                .ok_or_else(|| ProxyError::Malformed(format!("BatchGetItem key {key}")))?;
            keys.push((table.clone(), ItemKey::from_item(map)?));
        }
    }
    Ok(keys)
}

pub(super) fn batch_write_keys(body: &Value) -> Result<Vec<(String, ItemKey)>, ProxyError> {
    let tables = body
        .get("RequestItems")
        .and_then(Value::as_object)
        .ok_or_else(|| ProxyError::Malformed("BatchWriteItem without RequestItems".into()))?;
    let mut keys = Vec::new();
    for (table, requests) in tables {
        for request in requests.as_array().into_iter().flatten() {
            let map = request
                .pointer("/PutRequest/Item")
                .or_else(|| request.pointer("/DeleteRequest/Key"))
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ProxyError::Malformed(format!("BatchWriteItem request {request}"))
                })?;
            keys.push((table.clone(), ItemKey::from_item(map)?));
        }
    }
    Ok(keys)
}

/// A readable rendering of one DynamoDB JSON attribute value: numbers bare, strings quoted.
fn render_value(value: &Value) -> String {
    if let Some(number) = value.get("N").and_then(Value::as_str) {
        return number.to_owned();
    }
    if let Some(text) = value.get("S").and_then(Value::as_str) {
        return Value::from(text).to_string();
    }
    if let Some(blob) = value.get("B").and_then(Value::as_str) {
        return format!("<binary, base64 {} chars>", blob.len());
    }
    value.to_string()
}

/// Replaces `#name` and `:value` placeholders by the attribute names and rendered values.
pub(super) fn substitute_expression(
    expression: &str,
    names: Option<&Map<String, Value>>,
    values: Option<&Map<String, Value>>,
) -> Result<String, ProxyError> {
    let mut out = String::with_capacity(expression.len());
    let chars: Vec<char> = expression.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        let sigil = chars[index];
        if sigil == '#' || sigil == ':' {
            let end = placeholder_end(&chars, index + 1);
            let placeholder: String = chars[index..end].iter().collect();
            let resolved = if sigil == '#' {
                names
                    .and_then(|names| names.get(&placeholder))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            } else {
                values
                    .and_then(|values| values.get(&placeholder))
                    .map(render_value)
            };
            let resolved = resolved.ok_or_else(|| {
                ProxyError::Malformed(format!("{placeholder} is not defined for {expression:?}"))
            })?;
            out.push_str(&resolved);
            index = end;
        } else {
            out.push(sigil);
            index += 1;
        }
    }
    Ok(out)
}

pub(super) fn placeholder_end(chars: &[char], mut index: usize) -> usize {
    while index < chars.len() && (chars[index].is_ascii_alphanumeric() || chars[index] == '_') {
        index += 1;
    }
    index
}

impl Answer {
    /// A TransactionCanceledException with `reasons`, one per item in request order, shaped as
    /// DynamoDB sends it (HTTP 400, `__type`, `Message`, `CancellationReasons` with `Code`,
    /// `Message` and the old `Item` where given).
    pub fn cancelled(reasons: &[(ReasonCode, Option<Item>)]) -> Answer {
        let codes: Vec<&str> = reasons.iter().map(|(code, _)| code.as_str()).collect();
        let reasons: Vec<Value> = reasons
            .iter()
            .map(|(code, item)| {
                let mut reason = Map::new();
                reason.insert("Code".into(), Value::from(code.as_str()));
                match code {
                    ReasonCode::None => {}
                    ReasonCode::ConditionalCheckFailed => {
                        reason.insert(
                            "Message".into(),
                            Value::from("The conditional request failed"),
                        );
                    }
                    ReasonCode::TransactionConflict => {
                        reason.insert(
                            "Message".into(),
                            Value::from("Transaction is ongoing for the item"),
                        );
                    }
                }
                if let Some(item) = item {
                    reason.insert("Item".into(), Value::Object(item.clone()));
                }
                Value::Object(reason)
            })
            .collect();
        Answer {
            status: 400,
            body: json!({
                "__type": format!("{ERROR_NAMESPACE}TransactionCanceledException"),
                "Message": format!(
                    "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                    codes.join(", ")
                ),
                "CancellationReasons": reasons,
            }),
            headers: Vec::new(),
        }
    }

    /// A single-item write refused because a transaction holds the item.
    pub fn conflict() -> Answer {
        Answer::error(
            400,
            &format!("{ERROR_NAMESPACE}TransactionConflictException"),
            "Transaction is ongoing for the item",
        )
    }

    /// A request refused for load (the SDK's retryable throttling error).
    pub fn throttled() -> Answer {
        Answer::error(
            400,
            "com.amazon.coral.availability#ThrottlingException",
            "Rate of requests exceeds the allowed throughput.",
        )
    }
}

/// The items of a Query or Scan answer page.
pub(super) fn page_items(answer: &Answer) -> Result<Vec<Item>, ProxyError> {
    match answer.body.get("Items") {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_object().cloned().ok_or_else(|| {
                    ProxyError::Upstream(format!("an item that is not an object: {item}"))
                })
            })
            .collect(),
        Some(other) => Err(ProxyError::Upstream(format!(
            "Items is not a list: {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, Value)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    #[test]
    fn substitutes_names_and_values_readably() {
        let names = values(&[
            ("#stream", json!("stream_id")),
            ("#next", json!("next_seq")),
        ]);
        let values = values(&[
            (":expected", json!({"N": "3"})),
            (":s", json!({"S": "a\"b"})),
        ]);
        let rendered = substitute_expression(
            "attribute_not_exists(#next) OR #next = :expected AND #stream = :s",
            Some(&names),
            Some(&values),
        )
        .unwrap();
        assert_eq!(
            rendered,
            r#"attribute_not_exists(next_seq) OR next_seq = 3 AND stream_id = "a\"b""#
        );
        let missing = substitute_expression("#next = :nope", Some(&names), Some(&values));
        assert!(
            matches!(missing, Err(ProxyError::Malformed(_))),
            "{missing:?}"
        );
    }

    #[test]
    fn cancellation_is_shaped_like_dynamodb() {
        let old: Item = values(&[("next_seq", json!({"N": "7"}))]);
        let answer = Answer::cancelled(&[
            (ReasonCode::ConditionalCheckFailed, Some(old.clone())),
            (ReasonCode::None, None),
            (ReasonCode::TransactionConflict, None),
        ]);
        assert_eq!(answer.status, 400);
        assert_eq!(
            answer.error_type().as_deref(),
            Some("TransactionCanceledException")
        );
        assert_eq!(
            answer.cancellation_codes().unwrap(),
            vec!["ConditionalCheckFailed", "None", "TransactionConflict"]
        );
        assert_eq!(
            answer.body["CancellationReasons"][0]["Item"],
            Value::Object(old)
        );
        assert_eq!(
            answer.body["CancellationReasons"][1],
            json!({"Code": "None"})
        );
        assert_eq!(
            Answer::conflict().error_type().as_deref(),
            Some("TransactionConflictException")
        );
    }

    #[test]
    fn batch_get_keys_are_read_per_table_in_request_order() {
        let body = json!({"RequestItems": {"t": {"Keys": [
            {"stream_id": {"S": "s"}, "seq": {"N": "-5"}},
            {"stream_id": {"S": "s"}, "seq": {"N": "-2"}},
        ], "ConsistentRead": true}}});
        assert_eq!(
            batch_get_keys(&body).unwrap(),
            vec![
                ("t".to_string(), ItemKey::new("s", -5)),
                ("t".to_string(), ItemKey::new("s", -2))
            ]
        );
        assert!(matches!(
            batch_get_keys(&json!({"RequestItems": {"t": {}}})),
            Err(ProxyError::Malformed(_))
        ));
    }
}
