//! The HTTP server side: one loopback listener per actor, each request queued as a
//! [`HeldRequest`] and its client kept waiting until the replayer answers it; and one set-up
//! listener whose requests go upstream at once.
//!
//! Invariants:
//! - **Attributed by port**: a request on an actor's listener is that actor's.
//! - **Answered exactly once**: a held request is answered by exactly one [`Reply`] (the
//!   replayer's methods take the [`HeldRequest`] by value, so the type system rules out a second
//!   answer) or, when the replayer drops it unanswered or leaves it past
//!   `request_wait_millis_max`, by the server itself (an HTTP 400 `ProxyFault` naming the cause,
//!   which no client retries, or a closed connection after the wait).
//! - **Bounded**: at most `held_requests_max` requests queue per actor; a body is at most
//!   `body_bytes_max`.
//! - **The set-up listener never serves an actor**: its requests (the replayer's own set-up and
//!   its reads of the committed state) are forwarded as sent, in the upstream turn, past the
//!   window; the replayer's actors only ever get actor listeners.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::key_condition::{query_view, QueryView};
use super::upstream::Upstream;
use super::wire::{
    batch_get_keys, batch_write_keys, transact_item, Answer, ItemKey, TransactItemView,
    TARGET_PREFIX,
};
use super::{ProxyError, ProxyLimits};

/// How the replayer answered a held request.
pub(super) enum Reply {
    Deliver(Answer),
    /// Close the connection without a response.
    Lose,
    /// Answer nothing until the client gives up (or the wait bound passes), then close.
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
    pub(super) path: String,
    pub(super) headers: HeaderMap,
    pub(super) raw: Bytes,
    pub(super) reply: oneshot::Sender<Reply>,
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

/// The views of a held request's body, parsed by `wire` and `key_condition`.
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

    /// For BatchGetItem: the keys it asks for, as (table, key), in request order.
    pub fn batch_get_keys(&self) -> Result<Vec<(String, ItemKey)>, ProxyError> {
        if self.operation != "BatchGetItem" {
            return Err(ProxyError::Malformed(format!(
                "{} is not a BatchGetItem",
                self.operation
            )));
        }
        batch_get_keys(&self.body)
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

/// What every connection handler shares.
pub(super) struct Intake {
    pub(super) limits: ProxyLimits,
    pub(super) upstream: Arc<Upstream>,
    next_id: AtomicU64,
}

impl Intake {
    pub(super) fn new(limits: ProxyLimits, upstream: Arc<Upstream>) -> Intake {
        Intake {
            limits,
            upstream,
            next_id: AtomicU64::new(1),
        }
    }
}

/// Where a listener's requests go.
#[derive(Clone)]
pub(super) enum Route {
    /// Held for the replayer, attributed to the actor.
    Held {
        actor: usize,
        sender: mpsc::Sender<HeldRequest>,
    },
    /// Forwarded at once, as sent: the set-up listener.
    Direct,
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

pub(super) async fn accept_loop(
    listener: tokio::net::TcpListener,
    route: Route,
    intake: Arc<Intake>,
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
        let intake = intake.clone();
        let route = route.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                handle(intake.clone(), route.clone(), request)
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

/// Receives one request and answers it: held for the replayer, or forwarded at once.
async fn handle(
    intake: Arc<Intake>,
    route: Route,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, ResponseLost> {
    let (parts, body) = request.into_parts();
    let limit = intake.limits.body_bytes_max;
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
    intake.upstream.remember_signing(&parts.headers);
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    let (actor, sender) = match route {
        Route::Held { actor, sender } => (actor, sender),
        Route::Direct => {
            // The exchange runs in a task of its own that holds the upstream turn until the
            // server has answered: as part of this request's future, a client that went away
            // mid-exchange would end it and free the turn while the server still worked on the
            // request, and the next one would reach the server beside it.
            let upstream = intake.upstream.clone();
            let headers = parts.headers.clone();
            let exchange = tokio::spawn(async move {
                let turn = upstream.turn().await?;
                upstream.send(&turn, &path, &headers, raw).await
            });
            let answer = exchange.await.unwrap_or_else(|error| {
                Err(ProxyError::Upstream(format!(
                    "the exchange's task ended without an answer: {error}"
                )))
            });
            return Ok(match answer {
                Ok(answer) => answer.into_response(),
                Err(error) => refusal(PROXY_FAULT, &format!("oncecheck proxy: {error}")),
            });
        }
    };
    let (reply, replied) = oneshot::channel();
    let held = HeldRequest {
        id: intake.next_id.fetch_add(1, Ordering::Relaxed),
        actor,
        operation,
        body,
        path,
        headers: parts.headers,
        raw,
        reply,
    };
    if let Err(error) = sender.try_send(held) {
        let why = match error {
            mpsc::error::TrySendError::Full(_) => {
                format!(
                    "actor {actor} has held_requests_max = {} requests waiting",
                    intake.limits.held_requests_max
                )
            }
            mpsc::error::TrySendError::Closed(_) => "the proxy is shutting down".to_owned(),
        };
        return Ok(refusal(PROXY_FAULT, &format!("oncecheck proxy: {why}")));
    }
    let held_until =
        tokio::time::Instant::now() + Duration::from_millis(intake.limits.request_wait_millis_max);
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
    use crate::counting_upstream::CountingUpstream;
    use crate::proxy::Proxy;
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A DynamoDB request for the set-up listener, as raw HTTP/1.1.
    fn set_up_request() -> &'static [u8] {
        b"POST / HTTP/1.1\r\nhost: proxy\r\nx-amz-target: DynamoDB_20120810.DescribeTable\r\n\
          content-type: application/x-amz-json-1.0\r\ncontent-length: 2\r\n\r\n{}"
    }

    /// The serialised-upstream invariant holds on the set-up listener too: a request whose
    /// client goes away mid-exchange keeps the upstream turn until the server has answered it,
    /// so the next request never reaches the server beside it (moto does not isolate two
    /// transactions in it at once: the soak's proxy lost committed ops that way).
    #[tokio::test]
    async fn a_set_up_request_dropped_mid_exchange_keeps_the_upstream_to_itself() {
        let mut upstream = CountingUpstream::start().await;
        let proxy = Proxy::start(&upstream.url, 1).await.unwrap();
        let address = proxy
            .set_up_endpoint()
            .trim_start_matches("http://")
            .to_string();
        let mut dropped = tokio::net::TcpStream::connect(&address).await.unwrap();
        dropped.write_all(set_up_request()).await.unwrap();
        upstream.arrivals.recv().await.unwrap();
        drop(dropped);
        let mut second = tokio::net::TcpStream::connect(&address).await.unwrap();
        second.write_all(set_up_request()).await.unwrap();
        let mut head = [0_u8; 12];
        second.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        upstream.arrivals.recv().await.unwrap();
        assert_eq!(upstream.in_flight_max.load(Ordering::SeqCst), 1);
    }
}
