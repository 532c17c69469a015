//! Upstream forwarding: the one HTTP client between the proxy and the real server, and the turn
//! that serialises every exchange with it.
//!
//! Invariants:
//! - **Serialised upstream**: every exchange needs a [`Turn`] (the upstream mutex held), so at
//!   most one request is in flight to the server at any time; a caller that must keep the server
//!   still across several exchanges (an image read and the commit after it, every page of a
//!   multi-page read) holds one turn across all of them. moto has no concurrency control, and the
//!   window logic reasons about one upstream state at a time.
//! - **Bounded**: every exchange and the wait for the turn end within
//!   `upstream_wait_millis_max`; an answer body is at most `body_bytes_max`; a multi-page read is
//!   at most `upstream_pages_max` pages.
//!
//! - **Signed for the upstream when signing is on** (`signing`): every exchange, the client's
//!   and the proxy's own alike, drops the client's signature headers and is signed afresh for
//!   the upstream's host, body as sent; that is what lets a replay reach AWS itself. With
//!   signing off (the default for an emulator) requests are forwarded with their SigV4 headers
//!   as they came, Host rewritten for the upstream, and rewritten Queries and the proxy's own
//!   reads carry the last client's signing headers: right for servers that ignore the signature
//!   (moto, DynamoDB Local), which read the region and account from it.
//!
//! The ledger: with `ONCECHECK_UPSTREAM_LEDGER=FILE` set, every exchange appends one JSON line
//! (operation, status, request and answer bytes, and the read and write units DynamoDB
//! on-demand would charge for it, see [`capacity_units`]) so that the cost of a replay on AWS
//! can be counted on an emulator (docs/aws.md).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Map, Value};

use super::error_chain::error_chain;
use super::signing::{Signer, SigningMode, SIGNATURE_HEADERS};
use super::wire::{page_items, Answer, Item, ItemKey, PreImage, JSON_CONTENT_TYPE, TARGET_PREFIX};
use super::{ProxyError, ProxyLimits};

/// The environment variable naming the ledger file (see the module doc).
pub const UPSTREAM_LEDGER_ENV: &str = "ONCECHECK_UPSTREAM_LEDGER";

/// Headers that carry the caller's identity and region to the server (moto reads its region and
/// account from the Authorization header's credential scope).
pub(super) const SIGNING_HEADERS: [&str; 3] =
    ["authorization", "x-amz-date", "x-amz-security-token"];

/// Proof that the holder has the upstream to itself.
pub(super) type Turn<'a> = tokio::sync::MutexGuard<'a, ()>;

pub(super) struct Upstream {
    url: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// The upstream turn: held for every exchange with the server (the serialisation invariant).
    turn: tokio::sync::Mutex<()>,
    /// The signing headers of the latest client request, reused on the proxy's own requests so
    /// the server files them under the same region and account.
    signing: Mutex<Vec<(HeaderName, HeaderValue)>>,
    /// Present when requests are re-signed (`signing::SigningMode`); the signer is built on the
    /// first exchange, since reading the credential chain is asynchronous.
    signer: Option<tokio::sync::OnceCell<Signer>>,
    /// Where each exchange is recorded, when `ONCECHECK_UPSTREAM_LEDGER` names a file.
    ledger: Option<std::path::PathBuf>,
    wait: Duration,
    body_bytes_max: usize,
    pages_max: usize,
    /// Exchanges sent so far that may have written (every operation but the reads), so that a
    /// reader of the server's state knows whether what it read last is still the state.
    writes_sent: AtomicU64,
}

/// The operations that never write; every other one is counted as a write (an operation the
/// proxy does not know is counted too, so a cached read is never kept past a write).
const READ_OPERATIONS: [&str; 7] = [
    "GetItem",
    "BatchGetItem",
    "Query",
    "Scan",
    "TransactGetItems",
    "DescribeTable",
    "ListTables",
];

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under this lock is one assignment, so a poisoned lock is still consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Upstream {
    pub(super) fn new(upstream: &str, limits: &ProxyLimits) -> Result<Upstream, ProxyError> {
        let url = upstream.trim_end_matches('/').to_owned();
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(ProxyError::Upstream(format!(
                "{upstream:?} is not an http(s) URL"
            )));
        }
        let mode =
            SigningMode::from_env().map_err(|error| ProxyError::Upstream(error.to_string()))?;
        let signer = mode.signs(&url).then(tokio::sync::OnceCell::new);
        let ledger = std::env::var_os(UPSTREAM_LEDGER_ENV).map(std::path::PathBuf::from);
        let wait = Duration::from_millis(limits.upstream_wait_millis_max);
        let client = http_client(&url, wait)?;
        Ok(Upstream {
            url,
            client,
            turn: tokio::sync::Mutex::new(()),
            signing: Mutex::new(Vec::new()),
            signer,
            ledger,
            wait,
            body_bytes_max: limits.body_bytes_max,
            pages_max: limits.upstream_pages_max,
            writes_sent: AtomicU64::new(0),
        })
    }

    /// Exchanges sent so far whose operation may write.
    pub(super) fn writes_sent(&self) -> u64 {
        self.writes_sent.load(Ordering::SeqCst)
    }

    /// Counts an exchange about to be sent whose operation (`X-Amz-Target`) may write.
    fn count_if_write(&self, headers: &HeaderMap) {
        let operation = headers
            .get("x-amz-target")
            .and_then(|target| target.to_str().ok())
            .and_then(|target| target.strip_prefix(TARGET_PREFIX))
            .unwrap_or_default();
        if !READ_OPERATIONS.contains(&operation) {
            self.writes_sent.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(super) fn pages_max(&self) -> usize {
        self.pages_max
    }

    pub(super) async fn turn(&self) -> Result<Turn<'_>, ProxyError> {
        tokio::time::timeout(self.wait, self.turn.lock())
            .await
            .map_err(|_| {
                ProxyError::Upstream(format!("waited {:?} for the upstream turn", self.wait))
            })
    }

    /// Keeps a client's signing headers for the proxy's own requests.
    pub(super) fn remember_signing(&self, headers: &HeaderMap) {
        let signing: Vec<(HeaderName, HeaderValue)> = SIGNING_HEADERS
            .iter()
            .filter_map(|name| Some((HeaderName::from_static(name), headers.get(*name)?.clone())))
            .collect();
        if !signing.is_empty() {
            *lock(&self.signing) = signing;
        }
    }

    /// A client request with a rewritten body.
    pub(super) async fn exchange(
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

    /// A request of the proxy's own (image reads, scans, the endpoint check), under the last
    /// client's signing headers.
    pub(super) async fn own_request(
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
        let signing = lock(&self.signing).clone();
        let signing = if signing.is_empty() {
            fallback_signing_headers()
        } else {
            signing
        };
        for (name, value) in signing {
            headers.insert(name, value);
        }
        self.exchange(turn, "/", &headers, operation, body).await
    }

    /// The current images of `keys` (one consistent BatchGetItem, past the window), in the
    /// order given. One request instead of a GetItem per key: the pre-image reads were most of
    /// what a replay sent to the emulator. Unprocessed keys are asked again, at most
    /// `pages_max` times in all.
    pub(super) async fn read_images(
        &self,
        turn: &Turn<'_>,
        keys: &[(String, ItemKey)],
    ) -> Result<Vec<PreImage>, ProxyError> {
        // DynamoDB's limit for one BatchGetItem; a transaction writes at most 100 items too.
        const BATCH_KEYS_MAX: usize = 100;
        if keys.len() > BATCH_KEYS_MAX {
            return Err(ProxyError::Malformed(format!(
                "{} pre-images to read; a BatchGetItem holds at most {BATCH_KEYS_MAX}",
                keys.len()
            )));
        }
        let mut found: std::collections::BTreeMap<(String, ItemKey), Item> =
            std::collections::BTreeMap::new();
        let mut wanted: Vec<(String, ItemKey)> = keys.to_vec();
        for _round in 0..self.pages_max {
            if wanted.is_empty() {
                break;
            }
            let mut request_items = serde_json::Map::new();
            for (table, key) in &wanted {
                let entry = request_items
                    .entry(table.clone())
                    .or_insert_with(|| json!({ "Keys": [], "ConsistentRead": true }));
                entry["Keys"]
                    .as_array_mut()
                    .expect("Keys is an array")
                    .push(Value::from(key.to_item()));
            }
            let body = json!({ "RequestItems": request_items });
            let answer = self.own_request(turn, "BatchGetItem", &body).await?;
            if !answer.is_success() {
                return Err(ProxyError::Upstream(format!(
                    "BatchGetItem of {} keys: {} {}",
                    wanted.len(),
                    answer.status,
                    answer.body
                )));
            }
            let responses = answer.body.get("Responses").and_then(Value::as_object);
            for (table, items) in responses.into_iter().flatten() {
                for item in items.as_array().into_iter().flatten() {
                    let item = item.as_object().cloned().ok_or_else(|| {
                        ProxyError::Upstream(format!(
                            "a BatchGetItem item that is not an object: {item}"
                        ))
                    })?;
                    found.insert((table.clone(), ItemKey::from_item(&item)?), item);
                }
            }
            let mut unprocessed = Vec::new();
            let pending = answer
                .body
                .get("UnprocessedKeys")
                .and_then(Value::as_object);
            for (table, entry) in pending.into_iter().flatten() {
                for key in entry
                    .get("Keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let key = key.as_object().cloned().ok_or_else(|| {
                        ProxyError::Upstream(format!(
                            "an unprocessed key that is not an object: {key}"
                        ))
                    })?;
                    unprocessed.push((table.clone(), ItemKey::from_item(&key)?));
                }
            }
            wanted = unprocessed;
        }
        if !wanted.is_empty() {
            return Err(ProxyError::Upstream(format!(
                "BatchGetItem left {} keys unprocessed after upstream_pages_max = {} rounds",
                wanted.len(),
                self.pages_max
            )));
        }
        Ok(keys
            .iter()
            .map(|(table, key)| PreImage {
                table: table.clone(),
                key: key.clone(),
                item: found.get(&(table.clone(), key.clone())).cloned(),
            })
            .collect())
    }

    /// Every item of `table` as the server holds it (consistent Scan, all pages, sorted by key).
    pub(super) async fn scan(&self, turn: &Turn<'_>, table: &str) -> Result<Vec<Item>, ProxyError> {
        let mut items = Vec::new();
        let mut start: Option<Value> = None;
        for _page in 0..self.pages_max {
            let mut body = json!({ "TableName": table, "ConsistentRead": true });
            if let Some(start) = start.take() {
                body["ExclusiveStartKey"] = start;
            }
            let answer = self.own_request(turn, "Scan", &body).await?;
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
            self.pages_max
        )))
    }

    /// One HTTP exchange with the server. `_turn` proves the caller holds the upstream turn.
    pub(super) async fn send(
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
        self.count_if_write(headers);
        let url = format!("{}{}", self.url, path);
        if let Some(signer) = &self.signer {
            for name in SIGNATURE_HEADERS {
                outgoing.remove(name);
            }
            let signer = signer
                .get_or_try_init(|| Signer::from_environment(&self.url))
                .await
                .map_err(|error| ProxyError::Upstream(error.to_string()))?;
            outgoing = signer
                .sign_post(&url, &outgoing, &body)
                .await
                .map_err(|error| ProxyError::Upstream(error.to_string()))?;
        }
        let request_bytes = body.len();
        let request_body = self.ledger.is_some().then(|| body.clone());
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(&url)
            .body(Full::new(body))
            .map_err(|error| ProxyError::Malformed(format!("POST {url}: {error}")))?;
        *request.headers_mut() = outgoing;
        // One bound for the whole exchange, connection to the answer's last byte.
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| {
                ProxyError::Upstream(format!("POST {url}: {}", error_chain(&error)))
            })?;
            let (parts, answer) = response.into_parts();
            let bytes = Limited::new(answer, self.body_bytes_max)
                .collect()
                .await
                .map_err(|error| {
                    if error.is::<http_body_util::LengthLimitError>() {
                        ProxyError::Upstream(format!(
                            "an answer larger than body_bytes_max = {}",
                            self.body_bytes_max
                        ))
                    } else {
                        ProxyError::Upstream(format!(
                            "reading the answer of {url}: {}",
                            error_chain(error.as_ref())
                        ))
                    }
                })?
                .to_bytes();
            Ok::<_, ProxyError>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(self.wait, exchange)
            .await
            .map_err(|_| {
                ProxyError::Upstream(format!("POST {url}: no answer within {:?}", self.wait))
            })??;
        let status = parts.status.as_u16();
        let mut kept = Vec::new();
        for (name, value) in &parts.headers {
            // The request id is worth keeping for a reader of logs; the CRC32 would be wrong for
            // a rewritten body, and framing is set again on delivery.
            if name.as_str() == "x-amzn-requestid" {
                if let Ok(value) = value.to_str() {
                    kept.push((name.as_str().to_owned(), value.to_owned()));
                }
            }
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
        if let (Some(ledger), Some(request_body)) = (&self.ledger, request_body) {
            record(
                ledger,
                headers,
                &request_body,
                request_bytes,
                status,
                bytes.len(),
                &body,
            )?;
        }
        Ok(Answer {
            status,
            body,
            headers: kept,
        })
    }
}

/// Appends one exchange to the ledger. One `write` of one line, so concurrent replays (each
/// its own proxy) appending to one file do not interleave within a line.
fn record(
    ledger: &std::path::Path,
    headers: &HeaderMap,
    request_body: &[u8],
    request_bytes: usize,
    status: u16,
    answer_bytes: usize,
    answer: &Value,
) -> Result<(), ProxyError> {
    let operation = headers
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok())
        .and_then(|target| target.strip_prefix(TARGET_PREFIX))
        .unwrap_or("?");
    let request: Value = serde_json::from_slice(request_body).unwrap_or(Value::Null);
    let units = capacity_units(operation, &request, status, answer);
    let mut line = serde_json::to_vec(&json!({
        "operation": operation,
        "status": status,
        "request_bytes": request_bytes,
        "answer_bytes": answer_bytes,
        "read_units": units.read,
        "write_units": units.write,
    }))
    .map_err(|error| ProxyError::Upstream(format!("the ledger line: {error}")))?;
    line.push(b'\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .and_then(|mut file| file.write_all(&line))
        .map_err(|error| ProxyError::Upstream(format!("the ledger {}: {error}", ledger.display())))
}

/// On-demand request units one exchange costs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CapacityUnits {
    pub read: f64,
    pub write: f64,
}

/// Bytes per write request unit and per read request unit (DynamoDB's units).
const WRITE_UNIT_BYTES: usize = 1024;
const READ_UNIT_BYTES: usize = 4096;

fn units_of(bytes: usize, unit: usize) -> f64 {
    bytes.div_ceil(unit).max(1) as f64
}

/// The request units DynamoDB (on-demand) charges for one exchange, by its published rules:
/// a write costs 1 write unit per 1 KB of item, a transactional write or condition check 2; a
/// strongly consistent read 1 read unit per 4 KB read (an eventually consistent one half), a
/// transactional read 2; a Query or Scan is charged on the bytes it read (at least one unit);
/// a conditional write whose condition fails still costs its write; table management
/// (CreateTable, DescribeTable, ListTables, DeleteTable) is free. Item sizes are taken as the
/// size of their JSON, an upper bound on DynamoDB's own measure. A throttled or refused request
/// (HTTP 4xx other than a failed condition, or 5xx) is charged nothing here.
pub fn capacity_units(
    operation: &str,
    request: &Value,
    status: u16,
    answer: &Value,
) -> CapacityUnits {
    let json_bytes = |value: &Value| serde_json::to_vec(value).map_or(0, |bytes| bytes.len());
    let error_type = answer.get("__type").and_then(Value::as_str).unwrap_or("");
    let charged = status < 300
        || error_type.ends_with("ConditionalCheckFailedException")
        || error_type.ends_with("TransactionCanceledException");
    if !charged {
        return CapacityUnits::default();
    }
    let consistent = request.get("ConsistentRead").and_then(Value::as_bool) == Some(true);
    let read_factor = if consistent { 1.0 } else { 0.5 };
    match operation {
        "PutItem" => CapacityUnits {
            read: 0.0,
            write: units_of(json_bytes(&request["Item"]), WRITE_UNIT_BYTES),
        },
        "UpdateItem" | "DeleteItem" => CapacityUnits {
            read: 0.0,
            write: units_of(json_bytes(request), WRITE_UNIT_BYTES),
        },
        "TransactWriteItems" => {
            let items = request["TransactItems"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            CapacityUnits {
                read: 0.0,
                write: items
                    .iter()
                    .map(|item| 2.0 * units_of(json_bytes(item), WRITE_UNIT_BYTES))
                    .sum(),
            }
        }
        "GetItem" => CapacityUnits {
            read: read_factor * units_of(json_bytes(&answer["Item"]), READ_UNIT_BYTES),
            write: 0.0,
        },
        "BatchGetItem" => {
            // Per table: every requested key is a read (a missing item costs the minimum), a
            // found item its size; keys left unprocessed were not read.
            let mut read = 0.0;
            let requested = request["RequestItems"].as_object();
            for (table, asked) in requested.into_iter().flatten() {
                let keys = asked["Keys"].as_array().map_or(0, Vec::len);
                let unprocessed = answer["UnprocessedKeys"][table]["Keys"]
                    .as_array()
                    .map_or(0, Vec::len);
                let found = answer["Responses"][table]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice);
                let factor = if asked["ConsistentRead"].as_bool() == Some(true) {
                    1.0
                } else {
                    0.5
                };
                let missing = keys.saturating_sub(unprocessed + found.len());
                let found_units: f64 = found
                    .iter()
                    .map(|item| units_of(json_bytes(item), READ_UNIT_BYTES))
                    .sum();
                read += factor * (found_units + missing as f64);
            }
            CapacityUnits { read, write: 0.0 }
        }
        "TransactGetItems" => {
            let items = request["TransactItems"].as_array().map_or(0, Vec::len);
            CapacityUnits {
                read: 2.0 * items as f64,
                write: 0.0,
            }
        }
        "Query" | "Scan" => CapacityUnits {
            read: read_factor * units_of(json_bytes(&answer["Items"]), READ_UNIT_BYTES),
            write: 0.0,
        },
        _ => CapacityUnits::default(),
    }
}

/// The HTTP client to `url`: HTTP/1.1, pooled, no proxy from the environment (the upstream is
/// a named server, usually on loopback); for an `https` URL, rustls with the AWS SDK's crypto
/// provider and the system's root certificates, verified as usual.
fn http_client(
    url: &str,
    wait: Duration,
) -> Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>, ProxyError> {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let tls = if url.starts_with("https://") {
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)
            .map_err(|error| {
                ProxyError::Upstream(format!("the system's TLS root certificates: {error}"))
            })?
    } else {
        // A plain-http upstream never uses TLS; no root certificates are read for it.
        let config = rustls::ClientConfig::builder_with_provider(provider.into())
            .with_safe_default_protocol_versions()
            .map_err(|error| ProxyError::Upstream(format!("TLS configuration: {error}")))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(wait));
    let connector = tls.https_or_http().enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_follows_dynamodbs_unit_rules() {
        let ok = json!({});
        let transaction = json!({ "TransactItems": [
            { "Put": { "TableName": "t", "Item": { "stream_id": { "S": "s" } } } },
            { "ConditionCheck": { "TableName": "t", "Key": {} } },
            { "Update": { "TableName": "t", "Key": {} } },
        ]});
        assert_eq!(
            capacity_units("TransactWriteItems", &transaction, 200, &ok),
            CapacityUnits {
                read: 0.0,
                write: 6.0
            }
        );
        // A cancelled transaction is charged as a whole too.
        let cancelled =
            json!({ "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException" });
        assert_eq!(
            capacity_units("TransactWriteItems", &transaction, 400, &cancelled).write,
            6.0
        );
        let consistent = json!({ "TableName": "t", "ConsistentRead": true });
        let empty = json!({ "Items": [] });
        assert_eq!(capacity_units("Query", &consistent, 200, &empty).read, 1.0);
        let big = json!({ "Items": [{ "payload": { "S": "x".repeat(5000) } }] });
        assert_eq!(capacity_units("Query", &consistent, 200, &big).read, 2.0);
        assert_eq!(capacity_units("Query", &json!({}), 200, &big).read, 1.0);
        assert_eq!(
            capacity_units("ListTables", &json!({}), 200, &ok),
            CapacityUnits::default()
        );
        let throttled = json!({ "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException" });
        assert_eq!(
            capacity_units("Query", &consistent, 400, &throttled),
            CapacityUnits::default()
        );
    }
}
