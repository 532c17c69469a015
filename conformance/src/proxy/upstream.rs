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
//! Signatures: requests are forwarded with their SigV4 headers as they came, Host rewritten for
//! the upstream, and rewritten Queries and the proxy's own reads carry the last client's signing
//! headers. That is right for servers that ignore the signature (moto, DynamoDB Local); against
//! AWS itself the signatures would no longer match (re-signing is not implemented).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method};
use serde_json::{json, Map, Value};

use super::wire::{page_items, Answer, Item, ItemKey, PreImage, JSON_CONTENT_TYPE, TARGET_PREFIX};
use super::{ProxyError, ProxyLimits};

/// Headers that carry the caller's identity and region to the server (moto reads its region and
/// account from the Authorization header's credential scope).
pub(super) const SIGNING_HEADERS: [&str; 3] =
    ["authorization", "x-amz-date", "x-amz-security-token"];

/// Proof that the holder has the upstream to itself.
pub(super) type Turn<'a> = tokio::sync::MutexGuard<'a, ()>;

pub(super) struct Upstream {
    url: String,
    client: reqwest::Client,
    /// The upstream turn: held for every exchange with the server (the serialisation invariant).
    turn: tokio::sync::Mutex<()>,
    /// The signing headers of the latest client request, reused on the proxy's own requests so
    /// the server files them under the same region and account.
    signing: Mutex<Vec<(HeaderName, HeaderValue)>>,
    wait: Duration,
    body_bytes_max: usize,
    pages_max: usize,
}

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
        let wait = Duration::from_millis(limits.upstream_wait_millis_max);
        // No proxy from the environment: the upstream is a named server, usually on loopback.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(wait)
            .build()
            .map_err(|error| ProxyError::Upstream(format!("building the HTTP client: {error}")))?;
        Ok(Upstream {
            url,
            client,
            turn: tokio::sync::Mutex::new(()),
            signing: Mutex::new(Vec::new()),
            wait,
            body_bytes_max: limits.body_bytes_max,
            pages_max: limits.upstream_pages_max,
        })
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

    /// The current image of `key` (GetItem, consistent), past the window.
    pub(super) async fn read_image(
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
        let url = format!("{}{}", self.url, path);
        let mut response = self
            .client
            .request(Method::POST, &url)
            .headers(outgoing)
            .body(body)
            .send()
            .await
            .map_err(|error| {
                ProxyError::Upstream(format!("POST {url}: {}", error_chain(&error)))
            })?;
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
            if bytes.len() + chunk.len() > self.body_bytes_max {
                return Err(ProxyError::Upstream(format!(
                    "an answer larger than body_bytes_max = {}",
                    self.body_bytes_max
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

/// An error and its causes on one line (`connection refused` is two levels down in reqwest).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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
