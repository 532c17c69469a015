//! The conformance proxy: a trace-directed DynamoDB endpoint between the real store's
//! aws-sdk-dynamodb clients and a real DynamoDB-compatible server (moto in CI).
//!
//! Every actor (one writer or reader of a replay) gets its own loopback listener, so a request is
//! attributed to its actor by the port it arrived on. A request is **held**: its client stays
//! blocked until the replayer, stepping through a trace, takes it ([`Proxy::next_request`]),
//! decides what the model does with it and answers it. The proxy then makes the server behave as
//! AWS documents but emulators do not (specs/relay-append.md, "DynamoDB facts the design builds on"):
//!
//! - **the visibility window**: a committed transaction's written items are held *pending* until
//!   the trace applies them one at a time ([`Proxy::apply`]); Queries and GetItems answer the
//!   visible state, where a pending item shows its pre-image (or is absent if it had none);
//! - **conflicts**: [`Proxy::conflict_answer`], [`Proxy::cancelled`] and [`Proxy::conflict`]
//!   synthesise the TransactionCanceledException / TransactionConflictException DynamoDB answers
//!   a write touching a pending item with;
//! - **lost responses**: [`Proxy::lose`] closes the client's connection after the commit, without
//!   an HTTP response, so the SDK sees an I/O (dispatch) error: an unknown outcome;
//!   [`Proxy::stall`] answers nothing until the client's own timeout gives up (a timeout error).
//!
//! # Invariants
//!
//! - **Serialised upstream**: at most one request is in flight to the server at any time (one
//!   turn, a mutex, held across every page of a multi-page read and across the image read plus
//!   commit of [`Proxy::forward_holding`]). moto has no concurrency control, and the window logic
//!   reasons about one upstream state at a time.
//! - **Answered exactly once**: a held request is answered by exactly one of [`Proxy::deliver`],
//!   [`Proxy::lose`], [`Proxy::stall`] (all take the [`HeldRequest`] by value, so the type
//!   system rules out a second answer) or, when the replayer drops it unanswered or leaves it
//!   past `request_wait_millis_max`, by the proxy itself (an HTTP 400 `ProxyFault` naming the
//!   cause, which no client retries, or a closed connection after the wait).
//! - **Reads never show a pending item's new image**: a Query or GetItem whose range holds a
//!   pending key of its table is rewritten from the upstream answer; a read the proxy cannot
//!   rewrite faithfully (Scan, BatchGetItem, TransactGetItems, projections, filters, indexes)
//!   is refused with [`ProxyError::Unsupported`] while anything is pending, never passed through.
//! - **Writes never reach past the window**: [`Proxy::forward`] refuses a write that touches a
//!   pending item ([`ProxyError::WritesPending`]); the model answers it with a conflict, which
//!   the replayer synthesises.
//!
//! # Limits
//!
//! Every queue and wait is bounded ([`ProxyLimits`]): `held_requests_max` requests queued per
//! actor, `request_wait_millis_max` for a held client, `body_bytes_max` per request or response
//! body, `upstream_wait_millis_max` per upstream exchange (and for the turn), `upstream_pages_max`
//! pages per multi-page read. Note that the store's SDK client gives up on a request after its own
//! attempt timeout (5 s): a replay step must answer a held request within that.
//!
//! # Signatures
//!
//! Requests are forwarded with their SigV4 headers as they came, Host rewritten for the upstream,
//! and rewritten Queries and the proxy's own reads carry the last client's signing headers. That
//! is right for servers that ignore the signature (moto, DynamoDB Local); against AWS itself the
//! signatures would no longer match (re-signing is not implemented).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use oncecheck_store::dynamodb::{ATTRIBUTE_SEQ, ATTRIBUTE_STREAM_ID};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

/// A DynamoDB JSON attribute map (`{"name": {"S": "..."}, ...}`).
pub type Item = Map<String, Value>;

/// Requests queued per actor before the proxy refuses more (a replay holds one or two).
pub const HELD_REQUESTS_MAX_DEFAULT: usize = 64;
/// How long a client is held before the proxy gives up on the replayer and closes its connection.
pub const REQUEST_WAIT_MILLIS_MAX_DEFAULT: u64 = 60_000;
/// Largest request or response body: DynamoDB's own request limit is 16 MB.
pub const BODY_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;
/// One upstream exchange, and the wait for the upstream turn.
pub const UPSTREAM_WAIT_MILLIS_MAX_DEFAULT: u64 = 10_000;
/// Pages of one multi-page upstream read (Query without its Limit, Scan).
pub const UPSTREAM_PAGES_MAX_DEFAULT: usize = 1_000;
/// Listeners one proxy opens at most.
pub const ACTORS_MAX: usize = 64;

const TARGET_PREFIX: &str = "DynamoDB_20120810.";
const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
const ERROR_NAMESPACE: &str = "com.amazonaws.dynamodb.v20120810#";
/// Headers that carry the caller's identity and region to the server (moto reads its region and
/// account from the Authorization header's credential scope).
const SIGNING_HEADERS: [&str; 3] = ["authorization", "x-amz-date", "x-amz-security-token"];

/// The bounds of one proxy.
#[derive(Debug, Clone)]
pub struct ProxyLimits {
    pub held_requests_max: usize,
    pub request_wait_millis_max: u64,
    pub body_bytes_max: usize,
    pub upstream_wait_millis_max: u64,
    pub upstream_pages_max: usize,
}

impl Default for ProxyLimits {
    fn default() -> ProxyLimits {
        ProxyLimits {
            held_requests_max: HELD_REQUESTS_MAX_DEFAULT,
            request_wait_millis_max: REQUEST_WAIT_MILLIS_MAX_DEFAULT,
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            upstream_wait_millis_max: UPSTREAM_WAIT_MILLIS_MAX_DEFAULT,
            upstream_pages_max: UPSTREAM_PAGES_MAX_DEFAULT,
        }
    }
}

/// The primary key of an op-table item: partition key `stream_id` (S), sort key `seq` (N).
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

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("actor {actor} sent no request within {waited:?}")]
    Timeout { actor: usize, waited: Duration },
    #[error("there is no actor {actor}: the proxy listens for actors 0..{actors}")]
    UnknownActor { actor: usize, actors: usize },
    #[error("the proxy serves 1..={ACTORS_MAX} actors, not {0}")]
    ActorCount(usize),
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("the proxy cannot do this faithfully: {0}")]
    Unsupported(String),
    #[error("upstream: {0}")]
    Upstream(String),
    #[error("item {0} is not pending")]
    NotPending(ItemKey),
    #[error("item {0} is already pending (a committed transaction holds it until applied)")]
    AlreadyPending(ItemKey),
    #[error("{operation} touches pending item {key}: DynamoDB cancels it with a conflict (see Proxy::conflict_answer); it is not forwarded")]
    WritesPending { operation: String, key: ItemKey },
    #[error("the {operation} of actor {actor} was not delivered: its client is gone (timed out or disconnected)")]
    ClientGone { actor: usize, operation: String },
    #[error("listening on loopback: {0}")]
    Listen(String),
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

    fn error(status: u16, kind: &str, message: &str) -> Answer {
        Answer {
            status,
            body: json!({ "__type": kind, "message": message }),
            headers: Vec::new(),
        }
    }

    fn into_response(self) -> Response<Full<Bytes>> {
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

/// How the replayer answered a held request.
enum Reply {
    Deliver(Answer),
    Lose,
    Stall,
}

/// A request an actor sent, held until the replayer answers it.
pub struct HeldRequest {
    /// Arrival order across all actors, from 1.
    pub id: u64,
    pub actor: usize,
    /// The operation, from `X-Amz-Target` (`TransactWriteItems`, `Query`, ...).
    pub operation: String,
    pub body: Value,
    path: String,
    headers: HeaderMap,
    raw: Bytes,
    reply: oneshot::Sender<Reply>,
}

impl fmt::Debug for HeldRequest {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("HeldRequest")
            .field("id", &self.id)
            .field("actor", &self.actor)
            .field("operation", &self.operation)
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

/// The kind of one TransactWriteItems item.
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

/// The sort-key part of a Query's key condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqCondition {
    /// No sort-key condition: the whole partition.
    Any,
    Eq(i64),
    Lt(i64),
    Le(i64),
    Gt(i64),
    Ge(i64),
    Between(i64, i64),
}

impl SeqCondition {
    pub fn matches(self, seq: i64) -> bool {
        match self {
            SeqCondition::Any => true,
            SeqCondition::Eq(value) => seq == value,
            SeqCondition::Lt(value) => seq < value,
            SeqCondition::Le(value) => seq <= value,
            SeqCondition::Gt(value) => seq > value,
            SeqCondition::Ge(value) => seq >= value,
            SeqCondition::Between(low, high) => low <= seq && seq <= high,
        }
    }
}

impl fmt::Display for SeqCondition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeqCondition::Any => write!(formatter, "any seq"),
            SeqCondition::Eq(value) => write!(formatter, "seq = {value}"),
            SeqCondition::Lt(value) => write!(formatter, "seq < {value}"),
            SeqCondition::Le(value) => write!(formatter, "seq <= {value}"),
            SeqCondition::Gt(value) => write!(formatter, "seq > {value}"),
            SeqCondition::Ge(value) => write!(formatter, "seq >= {value}"),
            SeqCondition::Between(low, high) => write!(formatter, "seq BETWEEN {low} AND {high}"),
        }
    }
}

/// A Query, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryView {
    pub table: String,
    pub stream: String,
    pub seq: SeqCondition,
    pub limit: Option<usize>,
    /// ScanIndexForward (true when absent): ascending seq.
    pub forward: bool,
    pub consistent: bool,
    pub exclusive_start: Option<ItemKey>,
}

impl QueryView {
    /// Whether an item at `seq` is inside this Query's range: its condition and past its start key.
    pub fn covers(&self, seq: i64) -> bool {
        let past_start = match &self.exclusive_start {
            None => true,
            Some(start) if self.forward => seq > start.seq,
            Some(start) => seq < start.seq,
        };
        self.seq.matches(seq) && past_start
    }
}

impl HeldRequest {
    /// The table the request names (`TableName`, or the first table of a transaction or batch).
    pub fn table(&self) -> Option<String> {
        if let Some(table) = self.body.get("TableName").and_then(Value::as_str) {
            return Some(table.to_owned());
        }
        if let Some(items) = self.body.get("TransactItems").and_then(Value::as_array) {
            return items
                .iter()
                .filter_map(Value::as_object)
                .flat_map(|item| item.values())
                .find_map(|inner| inner.get("TableName").and_then(Value::as_str))
                .map(str::to_owned);
        }
        self.body
            .get("RequestItems")
            .and_then(Value::as_object)
            .and_then(|tables| tables.keys().next().cloned())
    }

    /// For TransactWriteItems: every item in request order.
    pub fn transact_items(&self) -> Result<Vec<TransactItemView>, ProxyError> {
        if self.operation != "TransactWriteItems" {
            return Err(ProxyError::Malformed(format!(
                "{} is not a TransactWriteItems",
                self.operation
            )));
        }
        let items = self
            .body
            .get("TransactItems")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                ProxyError::Malformed("TransactWriteItems without TransactItems".into())
            })?;
        items
            .iter()
            .enumerate()
            .map(|(index, item)| transact_item(index, item))
            .collect()
    }

    /// For Query: the key condition, Limit, order and start key.
    pub fn query(&self) -> Result<QueryView, ProxyError> {
        if self.operation != "Query" {
            return Err(ProxyError::Malformed(format!(
                "{} is not a Query",
                self.operation
            )));
        }
        query_view(&self.body)
    }

    /// For GetItem, PutItem, UpdateItem, DeleteItem: the item's key.
    pub fn key(&self) -> Result<ItemKey, ProxyError> {
        let map = match self.operation.as_str() {
            "PutItem" => self.body.get("Item"),
            "GetItem" | "UpdateItem" | "DeleteItem" => self.body.get("Key"),
            other => {
                return Err(ProxyError::Malformed(format!(
                    "{other} has no single item key"
                )))
            }
        };
        let map = map
            .and_then(Value::as_object)
            .ok_or_else(|| ProxyError::Malformed(format!("{} without its key", self.operation)))?;
        ItemKey::from_item(map)
    }

    /// The items a write touches, as (table, key), in request order; empty for reads and others.
    pub fn touched_keys(&self) -> Result<Vec<(String, ItemKey)>, ProxyError> {
        match self.operation.as_str() {
            "TransactWriteItems" => Ok(self
                .transact_items()?
                .into_iter()
                .map(|item| (item.table, item.key))
                .collect()),
            "PutItem" | "UpdateItem" | "DeleteItem" => {
                let table = self.table().ok_or_else(|| {
                    ProxyError::Malformed(format!("{} without TableName", self.operation))
                })?;
                Ok(vec![(table, self.key()?)])
            }
            "BatchWriteItem" => batch_write_keys(&self.body),
            _ => Ok(Vec::new()),
        }
    }
}

fn transact_item(index: usize, item: &Value) -> Result<TransactItemView, ProxyError> {
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

fn batch_write_keys(body: &Value) -> Result<Vec<(String, ItemKey)>, ProxyError> {
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
fn substitute_expression(
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

fn placeholder_end(chars: &[char], mut index: usize) -> usize {
    while index < chars.len() && (chars[index].is_ascii_alphanumeric() || chars[index] == '_') {
        index += 1;
    }
    index
}

/// One token of a key condition, placeholders resolved.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Name(String),
    Value(Value),
    Compare(&'static str),
    Open,
    Close,
    Comma,
    And,
    Between,
    BeginsWith,
}

fn key_condition_tokens(
    expression: &str,
    names: Option<&Map<String, Value>>,
    values: Option<&Map<String, Value>>,
) -> Result<Vec<Token>, ProxyError> {
    let malformed = |what: String| {
        ProxyError::Malformed(format!("KeyConditionExpression {expression:?}: {what}"))
    };
    let chars: Vec<char> = expression.chars().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let here = chars[index];
        match here {
            ' ' | '\t' | '\n' | '\r' => index += 1,
            '(' => {
                tokens.push(Token::Open);
                index += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                index += 1;
            }
            ',' => {
                tokens.push(Token::Comma);
                index += 1;
            }
            '=' => {
                tokens.push(Token::Compare("="));
                index += 1;
            }
            '<' | '>' => {
                let with_equal = chars.get(index + 1) == Some(&'=');
                tokens.push(Token::Compare(match (here, with_equal) {
                    ('<', true) => "<=",
                    ('<', false) => "<",
                    ('>', true) => ">=",
                    _ => ">",
                }));
                index += if with_equal { 2 } else { 1 };
            }
            '#' | ':' => {
                let end = placeholder_end(&chars, index + 1);
                let placeholder: String = chars[index..end].iter().collect();
                if here == '#' {
                    let name = names
                        .and_then(|names| names.get(&placeholder))
                        .and_then(Value::as_str)
                        .ok_or_else(|| malformed(format!("{placeholder} is not defined")))?;
                    tokens.push(Token::Name(name.to_owned()));
                } else {
                    let value = values
                        .and_then(|values| values.get(&placeholder))
                        .ok_or_else(|| malformed(format!("{placeholder} is not defined")))?;
                    tokens.push(Token::Value(value.clone()));
                }
                index = end;
            }
            other if other.is_ascii_alphabetic() || other == '_' => {
                let end = placeholder_end(&chars, index);
                let word: String = chars[index..end].iter().collect();
                tokens.push(match word.to_ascii_lowercase().as_str() {
                    "and" => Token::And,
                    "between" => Token::Between,
                    "begins_with" => Token::BeginsWith,
                    _ => Token::Name(word),
                });
                index = end;
            }
            other => return Err(malformed(format!("unexpected {other:?}"))),
        }
    }
    Ok(tokens)
}

/// One comparison of a key condition: attribute, operator, operands.
#[derive(Debug)]
struct KeyComparison {
    name: String,
    operator: &'static str,
    operands: Vec<Value>,
}

fn parse_key_condition(
    tokens: &[Token],
    expression: &str,
) -> Result<Vec<KeyComparison>, ProxyError> {
    let malformed = |what: &str| {
        ProxyError::Malformed(format!("KeyConditionExpression {expression:?}: {what}"))
    };
    let mut comparisons = Vec::new();
    let mut rest = tokens;
    loop {
        let mut parenthesised = false;
        if rest.first() == Some(&Token::Open) {
            parenthesised = true;
            rest = &rest[1..];
        }
        let comparison = match rest {
            [Token::BeginsWith, Token::Open, Token::Name(name), Token::Comma, Token::Value(value), Token::Close, tail @ ..] =>
            {
                rest = tail;
                KeyComparison {
                    name: name.clone(),
                    operator: "begins_with",
                    operands: vec![value.clone()],
                }
            }
            [Token::Name(name), Token::Between, Token::Value(low), Token::And, Token::Value(high), tail @ ..] =>
            {
                rest = tail;
                KeyComparison {
                    name: name.clone(),
                    operator: "BETWEEN",
                    operands: vec![low.clone(), high.clone()],
                }
            }
            [Token::Name(name), Token::Compare(operator), Token::Value(value), tail @ ..] => {
                rest = tail;
                KeyComparison {
                    name: name.clone(),
                    operator,
                    operands: vec![value.clone()],
                }
            }
            _ => {
                return Err(malformed(
                    "expected `name op :value`, `name BETWEEN :a AND :b` or begins_with",
                ))
            }
        };
        if parenthesised {
            match rest.first() {
                Some(Token::Close) => rest = &rest[1..],
                _ => return Err(malformed("unbalanced parenthesis")),
            }
        }
        comparisons.push(comparison);
        match rest.first() {
            None => return Ok(comparisons),
            Some(Token::And) => rest = &rest[1..],
            Some(_) => return Err(malformed("expected AND between the key comparisons")),
        }
    }
}

fn number_operand(value: &Value, expression: &str) -> Result<i64, ProxyError> {
    value
        .get("N")
        .and_then(Value::as_str)
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            ProxyError::Malformed(format!("{expression:?}: {value} is not an integer N value"))
        })
}

/// Fields of a Query whose effect on a pending item's pre-image the proxy does not evaluate.
const QUERY_FIELDS_UNSUPPORTED: [&str; 7] = [
    "FilterExpression",
    "ProjectionExpression",
    "IndexName",
    "AttributesToGet",
    "QueryFilter",
    "KeyConditions",
    "ConditionalOperator",
];

fn query_view(body: &Value) -> Result<QueryView, ProxyError> {
    let table = body
        .get("TableName")
        .and_then(Value::as_str)
        .ok_or_else(|| ProxyError::Malformed("Query without TableName".into()))?
        .to_owned();
    let expression = body
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
        .ok_or_else(|| ProxyError::Malformed("Query without KeyConditionExpression".into()))?;
    let names = body
        .get("ExpressionAttributeNames")
        .and_then(Value::as_object);
    let values = body
        .get("ExpressionAttributeValues")
        .and_then(Value::as_object);
    let tokens = key_condition_tokens(expression, names, values)?;
    let mut stream = None;
    let mut seq = SeqCondition::Any;
    for comparison in parse_key_condition(&tokens, expression)? {
        if comparison.name == ATTRIBUTE_STREAM_ID {
            let value = comparison.operands[0].get("S").and_then(Value::as_str);
            match (comparison.operator, value) {
                ("=", Some(value)) => stream = Some(value.to_owned()),
                _ => {
                    return Err(ProxyError::Malformed(format!(
                        "{expression:?}: the partition key needs `= :string`"
                    )))
                }
            }
        } else if comparison.name == ATTRIBUTE_SEQ {
            let first = number_operand(&comparison.operands[0], expression)?;
            seq = match comparison.operator {
                "=" => SeqCondition::Eq(first),
                "<" => SeqCondition::Lt(first),
                "<=" => SeqCondition::Le(first),
                ">" => SeqCondition::Gt(first),
                ">=" => SeqCondition::Ge(first),
                "BETWEEN" => SeqCondition::Between(
                    first,
                    number_operand(&comparison.operands[1], expression)?,
                ),
                other => {
                    return Err(ProxyError::Malformed(format!(
                        "{expression:?}: {other} does not apply to the number sort key"
                    )))
                }
            };
        } else {
            return Err(ProxyError::Malformed(format!(
                "{expression:?}: {} is not a key attribute of the op table",
                comparison.name
            )));
        }
    }
    let stream = stream.ok_or_else(|| {
        ProxyError::Malformed(format!("{expression:?}: no partition key condition"))
    })?;
    let limit = match body.get("Limit") {
        None => None,
        Some(limit) => Some(
            limit
                .as_u64()
                .and_then(|limit| usize::try_from(limit).ok())
                .filter(|limit| *limit > 0)
                .ok_or_else(|| {
                    ProxyError::Malformed(format!("Limit {limit} is not a positive integer"))
                })?,
        ),
    };
    let exclusive_start = body
        .get("ExclusiveStartKey")
        .and_then(Value::as_object)
        .map(ItemKey::from_item)
        .transpose()?;
    Ok(QueryView {
        table,
        stream,
        seq,
        limit,
        forward: body
            .get("ScanIndexForward")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        consistent: body
            .get("ConsistentRead")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        exclusive_start,
    })
}

/// A pending item: written upstream by a committed transaction, not yet visible.
#[derive(Debug)]
struct Pending {
    table: String,
    pre_image: Option<Item>,
}

struct Shared {
    limits: ProxyLimits,
    upstream_url: String,
    client: reqwest::Client,
    /// The upstream turn: held for every exchange with the server (the serialisation invariant).
    turn: tokio::sync::Mutex<()>,
    window: Mutex<BTreeMap<ItemKey, Pending>>,
    /// The signing headers of the latest client request, reused on the proxy's own requests so
    /// the server files them under the same region and account.
    signing: Mutex<Vec<(HeaderName, HeaderValue)>>,
    next_id: AtomicU64,
}

struct Port {
    address: SocketAddr,
    /// Kept to read the queue's length: capacity used = requests waiting.
    sender: mpsc::Sender<HeldRequest>,
    receiver: tokio::sync::Mutex<mpsc::Receiver<HeldRequest>>,
}

/// The proxy. Dropping it stops every listener and closes every connection.
pub struct Proxy {
    shared: Arc<Shared>,
    ports: Vec<Port>,
    servers: Vec<JoinHandle<()>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting an accept loop drops its JoinSet, which aborts its connections.
        for server in &self.servers {
            server.abort();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave it half-updated (every update is a
    // single map operation), so a poisoned lock is still consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The error a service returns to make hyper drop the connection without a response.
#[derive(Debug)]
struct ResponseLost;

impl fmt::Display for ResponseLost {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("the response is lost (closed without an answer)")
    }
}

impl std::error::Error for ResponseLost {}

impl Proxy {
    /// Starts one loopback listener per actor in front of `upstream` (the server's URL).
    pub async fn start(upstream: &str, actors: usize) -> Result<Proxy, ProxyError> {
        Proxy::start_with(upstream, actors, ProxyLimits::default()).await
    }

    pub async fn start_with(
        upstream: &str,
        actors: usize,
        limits: ProxyLimits,
    ) -> Result<Proxy, ProxyError> {
        if actors == 0 || actors > ACTORS_MAX {
            return Err(ProxyError::ActorCount(actors));
        }
        let upstream_url = upstream.trim_end_matches('/').to_owned();
        if !upstream_url.starts_with("http://") && !upstream_url.starts_with("https://") {
            return Err(ProxyError::Upstream(format!(
                "{upstream:?} is not an http(s) URL"
            )));
        }
        // No proxy from the environment: the upstream is a named server, usually on loopback.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_millis(limits.upstream_wait_millis_max))
            .build()
            .map_err(|error| ProxyError::Upstream(format!("building the HTTP client: {error}")))?;
        let shared = Arc::new(Shared {
            limits,
            upstream_url,
            client,
            turn: tokio::sync::Mutex::new(()),
            window: Mutex::new(BTreeMap::new()),
            signing: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        });
        let mut ports = Vec::with_capacity(actors);
        let mut servers = Vec::with_capacity(actors);
        for actor in 0..actors {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                .await
                .map_err(|error| ProxyError::Listen(error.to_string()))?;
            let address = listener
                .local_addr()
                .map_err(|error| ProxyError::Listen(error.to_string()))?;
            let (sender, receiver) = mpsc::channel(shared.limits.held_requests_max.max(1));
            servers.push(tokio::spawn(accept_loop(
                listener,
                actor,
                shared.clone(),
                sender.clone(),
            )));
            ports.push(Port {
                address,
                sender,
                receiver: tokio::sync::Mutex::new(receiver),
            });
        }
        Ok(Proxy {
            shared,
            ports,
            servers,
        })
    }

    pub fn actors(&self) -> usize {
        self.ports.len()
    }

    /// The URL `actor`'s client talks to: `http://127.0.0.1:PORT`.
    ///
    /// Panics if `actor` is out of range (a bug in the caller: the actor count is its own choice).
    pub fn endpoint(&self, actor: usize) -> String {
        assert!(
            actor < self.ports.len(),
            "actor {actor} of {}",
            self.ports.len()
        );
        format!("http://{}", self.ports[actor].address)
    }

    fn port(&self, actor: usize) -> Result<&Port, ProxyError> {
        self.ports.get(actor).ok_or(ProxyError::UnknownActor {
            actor,
            actors: self.ports.len(),
        })
    }

    /// The next request `actor` sent that has not been taken, waiting up to `timeout`.
    pub async fn next_request(
        &self,
        actor: usize,
        timeout: Duration,
    ) -> Result<HeldRequest, ProxyError> {
        let port = self.port(actor)?;
        let waited = async {
            let mut receiver = port.receiver.lock().await;
            receiver.recv().await
        };
        match tokio::time::timeout(timeout, waited).await {
            Ok(Some(request)) => Ok(request),
            // The accept loop holds a sender for as long as the proxy lives.
            Ok(None) => Err(ProxyError::Listen(format!(
                "actor {actor}'s listener has stopped"
            ))),
            Err(_elapsed) => Err(ProxyError::Timeout {
                actor,
                waited: timeout,
            }),
        }
    }

    /// Whether `actor` has a request waiting to be taken, now.
    pub fn has_request(&self, actor: usize) -> bool {
        self.port(actor)
            .map(|port| port.sender.capacity() < port.sender.max_capacity())
            .unwrap_or(false)
    }

    /// Sends the request upstream and answers the upstream answer without delivering it.
    ///
    /// Reads answer the visible state (see the module doc); a write touching a pending item is
    /// refused with [`ProxyError::WritesPending`].
    pub async fn forward(&self, request: &HeldRequest) -> Result<Answer, ProxyError> {
        let turn = self.turn().await?;
        self.forward_in_turn(&turn, request).await
    }

    /// For a TransactWriteItems that the trace commits: reads the pre-images of the items it
    /// writes, forwards it, and on success holds those items pending, all in one upstream turn
    /// (so nothing can slip between the image read and the commit). Answers the upstream answer
    /// and the keys now pending (none if it did not commit).
    pub async fn forward_holding(
        &self,
        request: &HeldRequest,
    ) -> Result<(Answer, Vec<ItemKey>), ProxyError> {
        let written: Vec<TransactItemView> = request
            .transact_items()?
            .into_iter()
            .filter(|item| item.kind.writes())
            .collect();
        let turn = self.turn().await?;
        let mut images = Vec::with_capacity(written.len());
        for item in &written {
            images.push(self.read_image(&turn, &item.table, &item.key).await?);
        }
        let answer = self.forward_in_turn(&turn, request).await?;
        if !answer.is_success() {
            return Ok((answer, Vec::new()));
        }
        let keys = images.iter().map(|image| image.key.clone()).collect();
        self.hold_pending(images)?;
        Ok((answer, keys))
    }

    /// Reads (GetItem, consistent, upstream) the current image of every key, in one turn.
    pub async fn read_images(
        &self,
        table: &str,
        keys: &[ItemKey],
    ) -> Result<Vec<PreImage>, ProxyError> {
        let turn = self.turn().await?;
        let mut images = Vec::with_capacity(keys.len());
        for key in keys {
            images.push(self.read_image(&turn, table, key).await?);
        }
        Ok(images)
    }

    /// Makes the images' keys pending: reads show the pre-images until [`Proxy::apply`].
    /// All or nothing: a key already pending refuses the whole set.
    pub fn hold_pending(&self, images: Vec<PreImage>) -> Result<(), ProxyError> {
        let mut window = lock(&self.shared.window);
        for (index, image) in images.iter().enumerate() {
            let twice = images[..index]
                .iter()
                .any(|earlier| earlier.key == image.key);
            if twice || window.contains_key(&image.key) {
                return Err(ProxyError::AlreadyPending(image.key.clone()));
            }
        }
        for image in images {
            window.insert(
                image.key,
                Pending {
                    table: image.table,
                    pre_image: image.item,
                },
            );
        }
        Ok(())
    }

    /// The pending item becomes visible (the trace's ItemApplied step). The server already holds
    /// its new image, so nothing goes upstream.
    pub fn apply(&self, key: &ItemKey) -> Result<(), ProxyError> {
        lock(&self.shared.window)
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| ProxyError::NotPending(key.clone()))
    }

    /// The pending keys, in key order.
    pub fn pending(&self) -> Vec<ItemKey> {
        lock(&self.shared.window).keys().cloned().collect()
    }

    /// The answer DynamoDB gives a write that touches pending items, or `None` if it touches none:
    /// a transaction is cancelled with TransactionConflict on each such item (None on the others),
    /// a single-item write gets TransactionConflictException.
    pub fn conflict_answer(&self, request: &HeldRequest) -> Result<Option<Answer>, ProxyError> {
        let held = self.held_among(&request.touched_keys()?);
        if !held.contains(&true) {
            return Ok(None);
        }
        if request.operation == "TransactWriteItems" {
            let reasons: Vec<(ReasonCode, Option<Item>)> = held
                .iter()
                .map(|held| {
                    let code = if *held {
                        ReasonCode::TransactionConflict
                    } else {
                        ReasonCode::None
                    };
                    (code, None)
                })
                .collect();
            Ok(Some(Proxy::cancelled(&reasons)))
        } else {
            Ok(Some(Proxy::conflict()))
        }
    }

    /// Delivers `answer` to the request's client.
    pub fn deliver(&self, request: HeldRequest, answer: Answer) -> Result<(), ProxyError> {
        request
            .reply
            .send(Reply::Deliver(answer))
            .map_err(|_| ProxyError::ClientGone {
                actor: request.actor,
                operation: request.operation,
            })
    }

    /// Loses the response: closes the client's connection without an HTTP response, so its SDK
    /// sees an I/O error (an unknown outcome).
    pub fn lose(&self, request: HeldRequest) -> Result<(), ProxyError> {
        request
            .reply
            .send(Reply::Lose)
            .map_err(|_| ProxyError::ClientGone {
                actor: request.actor,
                operation: request.operation,
            })
    }

    /// Loses the response by silence: the connection stays open without an answer until the
    /// client's own attempt timeout gives up on it (the proxy closes it after
    /// `request_wait_millis_max` at the latest), so the SDK sees a timeout: an unknown outcome
    /// that takes the client's timeout path rather than its I/O-error path.
    pub fn stall(&self, request: HeldRequest) -> Result<(), ProxyError> {
        request
            .reply
            .send(Reply::Stall)
            .map_err(|_| ProxyError::ClientGone {
                actor: request.actor,
                operation: request.operation,
            })
    }

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

    /// Every item of `table` as the server holds it (consistent Scan, all pages, sorted by key),
    /// bypassing the window: the committed state.
    pub async fn scan_upstream(&self, table: &str) -> Result<Vec<Item>, ProxyError> {
        let turn = self.turn().await?;
        let mut items = Vec::new();
        let mut start: Option<Value> = None;
        for _page in 0..self.shared.limits.upstream_pages_max {
            let mut body = json!({ "TableName": table, "ConsistentRead": true });
            if let Some(start) = start.take() {
                body["ExclusiveStartKey"] = start;
            }
            let answer = self.own_request(&turn, "Scan", &body).await?;
            if !answer.is_success() {
                return Err(ProxyError::Upstream(format!(
                    "Scan of {table}: {} {}",
                    answer.status, answer.body
                )));
            }
            items.extend(page_items(&answer)?);
            match answer.body.get("LastEvaluatedKey") {
                Some(last) if last.as_object().is_some_and(|last| !last.is_empty()) => {
                    start = Some(last.clone())
                }
                _ => {
                    items.sort_by_key(|item| ItemKey::from_item(item).ok());
                    return Ok(items);
                }
            }
        }
        Err(ProxyError::Upstream(format!(
            "Scan of {table} took more than upstream_pages_max = {} pages",
            self.shared.limits.upstream_pages_max
        )))
    }

    async fn turn(&self) -> Result<tokio::sync::MutexGuard<'_, ()>, ProxyError> {
        let wait = Duration::from_millis(self.shared.limits.upstream_wait_millis_max);
        tokio::time::timeout(wait, self.shared.turn.lock())
            .await
            .map_err(|_| ProxyError::Upstream(format!("waited {wait:?} for the upstream turn")))
    }

    async fn forward_in_turn(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        match request.operation.as_str() {
            "Query" => self.forward_query(turn, request).await,
            "GetItem" => self.forward_get(turn, request).await,
            "Scan" | "BatchGetItem" | "TransactGetItems" => {
                if let Some(key) = self.pending().into_iter().next() {
                    return Err(ProxyError::Unsupported(format!(
                        "{} while {key} is pending: the proxy shows the window to Query and GetItem only",
                        request.operation
                    )));
                }
                self.pass_through(turn, request).await
            }
            _ => {
                let touched = request.touched_keys()?;
                let held = self.held_among(&touched);
                if let Some((_, key)) = touched
                    .into_iter()
                    .zip(held)
                    .find_map(|(touched, held)| held.then_some(touched))
                {
                    return Err(ProxyError::WritesPending {
                        operation: request.operation.clone(),
                        key,
                    });
                }
                self.pass_through(turn, request).await
            }
        }
    }

    /// For each (table, key): whether it is pending.
    fn held_among(&self, touched: &[(String, ItemKey)]) -> Vec<bool> {
        let window = lock(&self.shared.window);
        touched
            .iter()
            .map(|(table, key)| {
                window
                    .get(key)
                    .is_some_and(|pending| pending.table == *table)
            })
            .collect()
    }

    /// The pending items of `table` whose key satisfies `covers`, with their pre-images.
    fn pending_in(
        &self,
        table: &str,
        covers: impl Fn(&ItemKey) -> bool,
    ) -> BTreeMap<ItemKey, Option<Item>> {
        lock(&self.shared.window)
            .iter()
            .filter(|(key, pending)| pending.table == table && covers(key))
            .map(|(key, pending)| (key.clone(), pending.pre_image.clone()))
            .collect()
    }

    /// A Query over the visible state. Without a pending item in its range it goes upstream as
    /// sent. Otherwise it goes without its Limit (all pages from the client's start key), the
    /// pending items' new images are removed and their pre-images put in, and the client's order
    /// and Limit are applied again, with LastEvaluatedKey only when items were cut off.
    async fn forward_query(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        let view = request.query()?;
        let hidden = self.pending_in(&view.table, |key| {
            key.stream == view.stream && view.covers(key.seq)
        });
        if hidden.is_empty() {
            return self.pass_through(turn, request).await;
        }
        if let Some(field) = QUERY_FIELDS_UNSUPPORTED
            .iter()
            .find(|field| request.body.get(**field).is_some())
        {
            return Err(ProxyError::Unsupported(format!(
                "a Query with {field} over pending items"
            )));
        }
        if request
            .body
            .get("Select")
            .and_then(Value::as_str)
            .is_some_and(|select| select != "ALL_ATTRIBUTES")
        {
            return Err(ProxyError::Unsupported(
                "a Query with Select other than ALL_ATTRIBUTES over pending items".into(),
            ));
        }
        let mut body = request.body.clone();
        let object = body
            .as_object_mut()
            .ok_or_else(|| ProxyError::Malformed("a Query body that is not an object".into()))?;
        object.remove("Limit");
        let mut items: Vec<Item> = Vec::new();
        let mut pages = 0;
        loop {
            pages += 1;
            if pages > self.shared.limits.upstream_pages_max {
                return Err(ProxyError::Upstream(format!(
                    "the Query took more than upstream_pages_max = {} pages",
                    self.shared.limits.upstream_pages_max
                )));
            }
            let answer = self
                .exchange(turn, &request.path, &request.headers, "Query", &body)
                .await?;
            if !answer.is_success() {
                // The server refused the Query itself: that is the client's answer.
                return Ok(answer);
            }
            items.extend(page_items(&answer)?);
            match answer.body.get("LastEvaluatedKey") {
                Some(last) if last.as_object().is_some_and(|last| !last.is_empty()) => {
                    body["ExclusiveStartKey"] = last.clone();
                }
                _ => break,
            }
        }
        let mut visible: Vec<(i64, Item)> = Vec::with_capacity(items.len());
        for item in items {
            let key = ItemKey::from_item(&item)?;
            if !hidden.contains_key(&key) {
                visible.push((key.seq, item));
            }
        }
        for (key, pre_image) in hidden {
            if let Some(item) = pre_image {
                visible.push((key.seq, item));
            }
        }
        visible.sort_by_key(|(seq, _)| *seq);
        if !view.forward {
            visible.reverse();
        }
        let mut last_evaluated = None;
        if let Some(limit) = view.limit {
            if visible.len() > limit {
                visible.truncate(limit);
                last_evaluated = visible
                    .last()
                    .map(|(seq, _)| ItemKey::new(view.stream.clone(), *seq).to_item());
            }
        }
        let count = visible.len();
        let mut reply = json!({
            "Items": visible.into_iter().map(|(_, item)| Value::Object(item)).collect::<Vec<_>>(),
            "Count": count,
            "ScannedCount": count,
        });
        if let Some(last) = last_evaluated {
            reply["LastEvaluatedKey"] = Value::Object(last);
        }
        Ok(Answer {
            status: 200,
            body: reply,
            headers: Vec::new(),
        })
    }

    /// A GetItem over the visible state: a pending item answers its pre-image (or no Item).
    async fn forward_get(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        let key = request.key()?;
        let table = request
            .table()
            .ok_or_else(|| ProxyError::Malformed("GetItem without TableName".into()))?;
        let hidden = self.pending_in(&table, |pending| *pending == key);
        // Forwarded even when pending, so the server still judges the request (a missing table).
        let mut answer = self.pass_through(turn, request).await?;
        let Some(pre_image) = hidden.into_values().next() else {
            return Ok(answer);
        };
        if !answer.is_success() {
            return Ok(answer);
        }
        if request.body.get("ProjectionExpression").is_some()
            || request.body.get("AttributesToGet").is_some()
        {
            return Err(ProxyError::Unsupported(format!(
                "a GetItem with a projection of pending item {key}"
            )));
        }
        let object = answer
            .body
            .as_object_mut()
            .ok_or_else(|| ProxyError::Upstream("a GetItem answer that is not an object".into()))?;
        match pre_image {
            Some(item) => object.insert("Item".into(), Value::Object(item)),
            None => object.remove("Item"),
        };
        Ok(answer)
    }

    /// The request as the client sent it, body bytes untouched.
    async fn pass_through(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        self.send(turn, &request.path, &request.headers, request.raw.clone())
            .await
    }

    /// A client request with a rewritten body.
    async fn exchange(
        &self,
        turn: &Turn<'_>,
        path: &str,
        headers: &HeaderMap,
        operation: &str,
        body: &Value,
    ) -> Result<Answer, ProxyError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|error| ProxyError::Malformed(format!("{operation}: {error}")))?;
        self.send(turn, path, headers, Bytes::from(bytes)).await
    }

    /// A request of the proxy's own (image reads, scans), under the last client's signing headers.
    async fn own_request(
        &self,
        turn: &Turn<'_>,
        operation: &str,
        body: &Value,
    ) -> Result<Answer, ProxyError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE));
        let target = HeaderValue::from_str(&format!("{TARGET_PREFIX}{operation}"))
            .map_err(|error| ProxyError::Malformed(error.to_string()))?;
        headers.insert(HeaderName::from_static("x-amz-target"), target);
        let signing = lock(&self.shared.signing).clone();
        if signing.is_empty() {
            for (name, value) in fallback_signing_headers() {
                headers.insert(name, value);
            }
        } else {
            for (name, value) in signing {
                headers.insert(name, value);
            }
        }
        self.exchange(turn, "/", &headers, operation, body).await
    }

    async fn read_image(
        &self,
        turn: &Turn<'_>,
        table: &str,
        key: &ItemKey,
    ) -> Result<PreImage, ProxyError> {
        let body = json!({ "TableName": table, "Key": key.to_item(), "ConsistentRead": true });
        let answer = self.own_request(turn, "GetItem", &body).await?;
        if !answer.is_success() {
            return Err(ProxyError::Upstream(format!(
                "GetItem {key} in {table}: {} {}",
                answer.status, answer.body
            )));
        }
        Ok(PreImage {
            table: table.to_owned(),
            key: key.clone(),
            item: answer.body.get("Item").and_then(Value::as_object).cloned(),
        })
    }

    /// One HTTP exchange with the server. `_turn` proves the caller holds the upstream turn.
    async fn send(
        &self,
        _turn: &Turn<'_>,
        path: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Answer, ProxyError> {
        let mut outgoing = HeaderMap::new();
        for (name, value) in headers {
            // Host names the proxy; length and framing are the client library's; an encoding
            // the proxy cannot decode would hide the JSON it rewrites.
            let hop = matches!(
                name.as_str(),
                "host"
                    | "content-length"
                    | "transfer-encoding"
                    | "connection"
                    | "accept-encoding"
                    | "expect"
            );
            if !hop {
                outgoing.append(name.clone(), value.clone());
            }
        }
        let url = format!("{}{}", self.shared.upstream_url, path);
        let mut response = self
            .shared
            .client
            .request(Method::POST, &url)
            .headers(outgoing)
            .body(body)
            .send()
            .await
            .map_err(|error| ProxyError::Upstream(format!("POST {url}: {error}")))?;
        let status = response.status().as_u16();
        let mut kept = Vec::new();
        for (name, value) in response.headers() {
            // The request id is worth keeping for a reader of logs; the CRC32 would be wrong for
            // a rewritten body, and framing is set again on delivery.
            if name.as_str() == "x-amzn-requestid" {
                if let Ok(value) = value.to_str() {
                    kept.push((name.as_str().to_owned(), value.to_owned()));
                }
            }
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| {
            ProxyError::Upstream(format!("reading the answer of {url}: {error}"))
        })? {
            if bytes.len() + chunk.len() > self.shared.limits.body_bytes_max {
                return Err(ProxyError::Upstream(format!(
                    "an answer larger than body_bytes_max = {}",
                    self.shared.limits.body_bytes_max
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        let body: Value = if bytes.is_empty() {
            Value::Object(Map::new())
        } else {
            serde_json::from_slice(&bytes).map_err(|_| {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
                ProxyError::Upstream(format!(
                    "HTTP {status} with a body that is not JSON: {text}"
                ))
            })?
        };
        Ok(Answer {
            status,
            body,
            headers: kept,
        })
    }
}

type Turn<'a> = tokio::sync::MutexGuard<'a, ()>;

fn page_items(answer: &Answer) -> Result<Vec<Item>, ProxyError> {
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

/// Signing headers for the proxy's own requests before any client has sent one: the region and
/// access key of the environment, as the SDK clients would use them (the signature is not valid;
/// the servers the proxy fronts do not check it).
fn fallback_signing_headers() -> Vec<(HeaderName, HeaderValue)> {
    let region = std::env::var("AWS_REGION")
        .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|_| "us-east-1".to_owned());
    let access_key = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "testing".to_owned());
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/20260101/{region}/dynamodb/aws4_request, \
         SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature={}",
        "0".repeat(64)
    );
    let mut headers = Vec::new();
    if let Ok(value) = HeaderValue::from_str(&authorization) {
        headers.push((HeaderName::from_static("authorization"), value));
    }
    headers.push((
        HeaderName::from_static("x-amz-date"),
        HeaderValue::from_static("20260101T000000Z"),
    ));
    headers
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    actor: usize,
    shared: Arc<Shared>,
    sender: mpsc::Sender<HeldRequest>,
) {
    // Owned here so that aborting this task (the proxy dropped) aborts every connection too.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow with every reconnect.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok((stream, _peer)) = accepted else {
            // A failed accept (out of descriptors, a reset before accept) affects that one
            // connection; the client sees it and retries or fails. Pause so a persistent error
            // does not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let sender = sender.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                handle(shared.clone(), actor, sender.clone(), request)
            });
            // An error here is a lost response (by design) or the client going away.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The error type of the proxy's own refusals (a dropped request, a full queue). A 400 of a type
/// no client retries: a 5xx or a throttle would read as a lost round to the store and hide the
/// replayer's bug behind a retry.
const PROXY_FAULT: &str = "oncecheck.proxy#ProxyFault";

fn refusal(kind: &str, message: &str) -> Response<Full<Bytes>> {
    Answer::error(400, kind, message).into_response()
}

/// Receives one request, queues it for the replayer and waits for its answer.
async fn handle(
    shared: Arc<Shared>,
    actor: usize,
    sender: mpsc::Sender<HeldRequest>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, ResponseLost> {
    let (parts, body) = request.into_parts();
    let limit = shared.limits.body_bytes_max;
    let raw = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return Ok(refusal(
                "com.amazon.coral.service#SerializationException",
                &format!(
                    "oncecheck proxy: unreadable body or over body_bytes_max = {limit}: {error}"
                ),
            ))
        }
    };
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok());
    let Some(operation) = target.and_then(|target| target.strip_prefix(TARGET_PREFIX)) else {
        return Ok(refusal(
            "com.amazon.coral.service#UnknownOperationException",
            "oncecheck proxy: no DynamoDB_20120810 X-Amz-Target",
        ));
    };
    let operation = operation.to_owned();
    let Ok(body) = serde_json::from_slice::<Value>(&raw) else {
        return Ok(refusal(
            "com.amazon.coral.service#SerializationException",
            "oncecheck proxy: the body is not JSON",
        ));
    };
    let signing: Vec<(HeaderName, HeaderValue)> = SIGNING_HEADERS
        .iter()
        .filter_map(|name| {
            let value = parts.headers.get(*name)?;
            Some((HeaderName::from_static(name), value.clone()))
        })
        .collect();
    if !signing.is_empty() {
        *lock(&shared.signing) = signing;
    }
    let (reply, replied) = oneshot::channel();
    let held = HeldRequest {
        id: shared.next_id.fetch_add(1, Ordering::Relaxed),
        actor,
        operation,
        body,
        path: parts
            .uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .to_owned(),
        headers: parts.headers,
        raw,
        reply,
    };
    if let Err(error) = sender.try_send(held) {
        let why = match error {
            mpsc::error::TrySendError::Full(_) => {
                format!(
                    "actor {actor} has held_requests_max = {} requests waiting",
                    shared.limits.held_requests_max
                )
            }
            mpsc::error::TrySendError::Closed(_) => "the proxy is shutting down".to_owned(),
        };
        return Ok(refusal(PROXY_FAULT, &format!("oncecheck proxy: {why}")));
    }
    let wait = Duration::from_millis(shared.limits.request_wait_millis_max);
    let held_until = tokio::time::Instant::now() + wait;
    match tokio::time::timeout_at(held_until, replied).await {
        Ok(Ok(Reply::Deliver(answer))) => Ok(answer.into_response()),
        Ok(Ok(Reply::Lose)) => Err(ResponseLost),
        Ok(Ok(Reply::Stall)) => {
            // The client normally gives up first and closes its end; this bound ends the wait
            // of a client without a timeout.
            tokio::time::sleep_until(held_until).await;
            Err(ResponseLost)
        }
        Ok(Err(_dropped)) => Ok(refusal(
            PROXY_FAULT,
            "oncecheck proxy: the replayer dropped this request unanswered",
        )),
        // The replayer never answered: the client is cut off as a hung server would leave it;
        // a later deliver reports ClientGone.
        Err(_elapsed) => Err(ResponseLost),
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

    fn names() -> Map<String, Value> {
        values(&[
            ("#stream", json!("stream_id")),
            ("#seq", json!("seq")),
            ("#next", json!("next_seq")),
        ])
    }

    #[test]
    fn substitutes_names_and_values_readably() {
        let values = values(&[
            (":expected", json!({"N": "3"})),
            (":s", json!({"S": "a\"b"})),
        ]);
        let rendered = substitute_expression(
            "attribute_not_exists(#next) OR #next = :expected AND #stream = :s",
            Some(&names()),
            Some(&values),
        )
        .unwrap();
        assert_eq!(
            rendered,
            r#"attribute_not_exists(next_seq) OR next_seq = 3 AND stream_id = "a\"b""#
        );
        let missing = substitute_expression("#next = :nope", Some(&names()), Some(&values));
        assert!(
            matches!(missing, Err(ProxyError::Malformed(_))),
            "{missing:?}"
        );
    }

    #[test]
    fn parses_the_store_key_conditions() {
        let cases = [
            (
                "#stream = :stream AND #seq > :after",
                json!({"N": "4"}),
                SeqCondition::Gt(4),
            ),
            (
                "#stream = :stream AND #seq = :after",
                json!({"N": "0"}),
                SeqCondition::Eq(0),
            ),
            (
                "#seq <= :after AND #stream = :stream",
                json!({"N": "-9"}),
                SeqCondition::Le(-9),
            ),
            (
                "(#stream = :stream) AND (#seq >= :after)",
                json!({"N": "2"}),
                SeqCondition::Ge(2),
            ),
        ];
        for (expression, after, expected) in cases {
            let body = json!({
                "TableName": "t",
                "KeyConditionExpression": expression,
                "ExpressionAttributeNames": names(),
                "ExpressionAttributeValues": {":stream": {"S": "s"}, ":after": after},
                "Limit": 2,
                "ScanIndexForward": false,
            });
            let view = query_view(&body).unwrap();
            assert_eq!(
                (view.stream.as_str(), view.seq, view.limit, view.forward),
                ("s", expected, Some(2), false),
                "{expression}"
            );
        }
        let between = json!({
            "TableName": "t",
            "KeyConditionExpression": "stream_id = :s AND seq BETWEEN :a AND :b",
            "ExpressionAttributeValues": {":s": {"S": "s"}, ":a": {"N": "1"}, ":b": {"N": "5"}},
        });
        let view = query_view(&between).unwrap();
        assert_eq!(
            (view.seq, view.forward, view.limit),
            (SeqCondition::Between(1, 5), true, None)
        );
        let no_stream = json!({
            "TableName": "t",
            "KeyConditionExpression": "seq > :a",
            "ExpressionAttributeValues": {":a": {"N": "1"}},
        });
        assert!(matches!(
            query_view(&no_stream),
            Err(ProxyError::Malformed(_))
        ));
    }

    #[test]
    fn covers_respects_the_start_key_in_either_order() {
        let mut view = QueryView {
            table: "t".into(),
            stream: "s".into(),
            seq: SeqCondition::Gt(0),
            limit: None,
            forward: true,
            consistent: true,
            exclusive_start: Some(ItemKey::new("s", 3)),
        };
        assert!(!view.covers(3) && view.covers(4) && !view.covers(0));
        view.forward = false;
        assert!(view.covers(2) && !view.covers(4) && !view.covers(0));
    }

    #[test]
    fn cancellation_is_shaped_like_dynamodb() {
        let old: Item = values(&[("next_seq", json!({"N": "7"}))]);
        let answer = Proxy::cancelled(&[
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
            Proxy::conflict().error_type().as_deref(),
            Some("TransactionConflictException")
        );
    }
}
