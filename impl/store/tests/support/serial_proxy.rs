//! A loopback HTTP/1.1 proxy in front of a DynamoDB-compatible endpoint: it forwards one request
//! at a time, and on request loses a response the ways a network does.
//!
//! Why one at a time: moto's threaded server has no concurrency control; concurrent
//! TransactWriteItems race inside it (lost conditions, 500s from "dictionary changed size during
//! iteration"). DynamoDB serialises transactions; moto does not. Handing moto one request at a
//! time makes each request atomic, which is what concurrent tests and benchmarks need from it.
//! (Stronger than DynamoDB for reads: no visibility window. The conformance proxy opens that
//! window; this one only serialises.)
//!
//! Why raw TCP: losing a response for real means closing the client's connection after the
//! upstream has applied the request, which an HTTP framework does not let a handler do. The
//! proxy reads each request head and its `Content-Length` body itself (the SDK sends nothing
//! else), forwards it with reqwest and writes the answer back, or applies the [`Fault`] queued
//! for that operation.
//!
//! Invariant: a request without a queued fault is forwarded exactly once and answered with the
//! upstream's status, headers and body; a fault is used by exactly one request.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with one request instead of answering it normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward it, then close the client's connection without answering: the request took
    /// effect and its response is lost.
    CloseAfterForward,
    /// Never forward it and never answer it: a stalled backend.
    Stall,
    /// Answer 503 without forwarding it.
    ServiceUnavailable,
    /// A BatchGetItem: answer 200 with no items and every requested key unprocessed (DynamoDB
    /// leaving keys for load), without forwarding it.
    UnprocessedAll,
}

#[derive(Debug, Default)]
struct Plan {
    /// Faults for the next requests of an operation (the `X-Amz-Target` suffix), in order.
    faults: VecDeque<(String, Fault)>,
    /// Every later request stalls.
    stall_all: bool,
    /// The operations seen, in arrival order, and what was done with each.
    seen: Vec<(String, Option<Fault>)>,
}

/// A running proxy; it lives as long as the test's runtime.
#[derive(Clone)]
pub struct FaultProxy {
    pub url: String,
    plan: Arc<Mutex<Plan>>,
}

impl FaultProxy {
    /// Starts the proxy in front of `upstream` (an `http://host:port` URL).
    pub async fn start(upstream: String) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let plan = Arc::new(Mutex::new(Plan::default()));
        let one_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
        let client = reqwest::Client::new();
        let accept_plan = plan.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let connection = Connection {
                    upstream: upstream.clone(),
                    client: client.clone(),
                    plan: accept_plan.clone(),
                    one_at_a_time: one_at_a_time.clone(),
                };
                tokio::spawn(connection.serve(socket));
            }
        });
        FaultProxy { url, plan }
    }

    /// Applies `fault` to the next request of `operation` (e.g. `TransactWriteItems`).
    pub fn fault_next(&self, operation: &str, fault: Fault) {
        let mut plan = self.plan.lock().unwrap();
        plan.faults.push_back((operation.to_owned(), fault));
    }

    /// Every request from now on stalls (the backend hangs mid-push).
    pub fn stall_everything(&self) {
        self.plan.lock().unwrap().stall_all = true;
    }

    /// Requests from now on are forwarded again (the ones already stalled stay stalled).
    pub fn heal(&self) {
        self.plan.lock().unwrap().stall_all = false;
    }

    /// The operations seen so far and the fault each got, in arrival order.
    pub fn seen(&self) -> Vec<(String, Option<Fault>)> {
        self.plan.lock().unwrap().seen.clone()
    }

    /// How many requests of `operation` arrived.
    pub fn count(&self, operation: &str) -> usize {
        let plan = self.plan.lock().unwrap();
        plan.seen
            .iter()
            .filter(|(seen, _)| seen == operation)
            .count()
    }
}

fn decide(plan: &Mutex<Plan>, operation: &str) -> Option<Fault> {
    let mut plan = plan.lock().unwrap();
    let fault = if plan.stall_all {
        Some(Fault::Stall)
    } else if let Some(index) = plan.faults.iter().position(|(seen, _)| seen == operation) {
        plan.faults.remove(index).map(|(_, fault)| fault)
    } else {
        None
    };
    plan.seen.push((operation.to_owned(), fault));
    fault
}

/// A BatchGetItem answer that returns nothing and hands every requested key back unprocessed.
fn all_unprocessed(request_body: &[u8]) -> Vec<u8> {
    let request: serde_json::Value =
        serde_json::from_slice(request_body).expect("a BatchGetItem request is JSON");
    let requested = request["RequestItems"].clone();
    let responses: serde_json::Map<String, serde_json::Value> = requested
        .as_object()
        .expect("RequestItems names tables")
        .keys()
        .map(|table| (table.clone(), serde_json::Value::Array(Vec::new())))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "Responses": responses,
        "UnprocessedKeys": requested,
    }))
    .expect("an answer serializes")
}

/// Starts a fault-free proxy in front of `upstream`; answers its URL.
pub async fn serialize_endpoint(upstream: String) -> String {
    FaultProxy::start(upstream).await.url
}

struct Connection {
    upstream: String,
    client: reqwest::Client,
    plan: Arc<Mutex<Plan>>,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
}

/// One parsed request.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn operation(&self) -> String {
        self.headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("x-amz-target"))
            .map(|(_, value)| value.rsplit('.').next().unwrap_or(value).to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    }
}

impl Connection {
    async fn serve(self, mut socket: TcpStream) {
        let mut buffer = Vec::new();
        while let Some(request) = read_request(&mut socket, &mut buffer).await {
            let fault = decide(&self.plan, &request.operation());
            match fault {
                Some(Fault::Stall) => {
                    // Hold the connection open, answer nothing, forward nothing.
                    std::future::pending::<()>().await;
                }
                Some(Fault::ServiceUnavailable) => {
                    let body = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ServiceUnavailable","message":"injected"}"#;
                    if write_response(&mut socket, 503, &[], body).await.is_err() {
                        return;
                    }
                }
                Some(Fault::UnprocessedAll) => {
                    let body = all_unprocessed(&request.body);
                    if write_response(&mut socket, 200, &[], &body).await.is_err() {
                        return;
                    }
                }
                Some(Fault::CloseAfterForward) => {
                    let _answer = self.forward(&request).await;
                    // The upstream applied it; the client never hears back.
                    let _ = socket.shutdown().await;
                    return;
                }
                None => {
                    let Some((status, headers, body)) = self.forward(&request).await else {
                        let _ = write_response(&mut socket, 502, &[], b"").await;
                        return;
                    };
                    if write_response(&mut socket, status, &headers, &body)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    }

    async fn forward(&self, request: &Request) -> Option<(u16, Vec<(String, String)>, Vec<u8>)> {
        let method = reqwest::Method::from_bytes(request.method.as_bytes()).ok()?;
        let mut forward = self
            .client
            .request(method, format!("{}{}", self.upstream, request.path));
        for (name, value) in &request.headers {
            let skip = ["host", "content-length", "connection", "expect"]
                .iter()
                .any(|hop| name.eq_ignore_ascii_case(hop));
            if !skip {
                forward = forward.header(name, value);
            }
        }
        let _turn = self.one_at_a_time.lock().await;
        let answer = forward.body(request.body.clone()).send().await.ok()?;
        let status = answer.status().as_u16();
        let headers: Vec<(String, String)> = answer
            .headers()
            .iter()
            .filter(|(name, _)| {
                !["content-length", "transfer-encoding", "connection"]
                    .iter()
                    .any(|hop| name.as_str().eq_ignore_ascii_case(hop))
            })
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let body = answer.bytes().await.ok()?.to_vec();
        Some((status, headers, body))
    }
}

/// Reads one request (head and `Content-Length` body); None at end of stream or on garbage.
async fn read_request(socket: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(position) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break position + 4;
        }
        let mut chunk = [0u8; 8192];
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_owned(), value.trim().to_owned()))
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let expects_continue = headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("expect") && value.eq_ignore_ascii_case("100-continue")
    });
    if expects_continue && buffer.len() < head_end + length {
        socket
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .ok()?;
    }
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 8192];
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

async fn write_response(
    socket: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut response = format!("HTTP/1.1 {status} Proxied\r\n");
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut bytes = response.into_bytes();
    bytes.extend_from_slice(body);
    socket.write_all(&bytes).await?;
    socket.flush().await
}
