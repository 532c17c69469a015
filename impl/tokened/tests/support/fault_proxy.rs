//! A loopback proxy in front of a DynamoDB endpoint that loses chosen responses the way a network
//! does: it forwards the request, lets the upstream commit it, and then closes the connection
//! without writing the answer (or, in `Lose::Request`, closes it before forwarding).
//!
//! Invariants: requests are forwarded one at a time (moto is not safe under concurrent
//! transactions); every request is counted per operation (`X-Amz-Target`), forwarded or not.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};

/// What to lose of the next request of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lose {
    /// Forward, let it commit, then close the connection: the outcome is unknown to the client.
    Response,
    /// Close the connection without forwarding: nothing happened, the client cannot tell.
    Request,
}

type Hook = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct State {
    plans: Mutex<BTreeMap<String, VecDeque<Lose>>>,
    received: Mutex<BTreeMap<String, u32>>,
    forwarded: Mutex<BTreeMap<String, u32>>,
    on_lose: Mutex<Option<Hook>>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
pub struct FaultProxy {
    pub url: String,
    state: Arc<State>,
}

#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("response lost on purpose")
    }
}

impl std::error::Error for Lost {}

fn operation(request: &Request<Incoming>) -> String {
    request
        .headers()
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok())
        .and_then(|target| target.rsplit('.').next())
        .unwrap_or("unknown")
        .to_owned()
}

impl FaultProxy {
    pub async fn start(upstream: String) -> FaultProxy {
        let state = Arc::new(State::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let client = reqwest::Client::new();
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (state, client, upstream) = (shared.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let (state, client, upstream) =
                            (state.clone(), client.clone(), upstream.clone());
                        async move { handle(state, client, upstream, request).await }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    // A lost response fails the service: hyper closes the connection unanswered.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        FaultProxy { url, state }
    }

    /// Loses the next request or response of `operation` (e.g. "TransactWriteItems"), in order.
    pub fn lose_next(&self, operation: &str, lose: Lose) {
        self.state
            .plans
            .lock()
            .unwrap()
            .entry(operation.to_owned())
            .or_default()
            .push_back(lose);
    }

    /// Runs `hook` each time something is lost (a test advances its clock there).
    pub fn on_lose(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.state.on_lose.lock().unwrap() = Some(Box::new(hook));
    }

    /// Requests of `operation` that reached the proxy.
    pub fn received(&self, operation: &str) -> u32 {
        self.state
            .received
            .lock()
            .unwrap()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Requests of `operation` forwarded to the upstream.
    pub fn forwarded(&self, operation: &str) -> u32 {
        self.state
            .forwarded
            .lock()
            .unwrap()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Every request that reached the proxy, whatever the operation.
    pub fn received_total(&self) -> u32 {
        self.state.received.lock().unwrap().values().sum()
    }
}

async fn handle(
    state: Arc<State>,
    client: reqwest::Client,
    upstream: String,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Lost> {
    let operation = operation(&request);
    *state
        .received
        .lock()
        .unwrap()
        .entry(operation.clone())
        .or_default() += 1;
    let plan = state
        .plans
        .lock()
        .unwrap()
        .get_mut(&operation)
        .and_then(VecDeque::pop_front);
    let lost = || {
        if let Some(hook) = state.on_lose.lock().unwrap().as_ref() {
            hook();
        }
        Err(Lost)
    };
    if plan == Some(Lose::Request) {
        return lost();
    }
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(|_| Lost)?.to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let mut forward = client.request(parts.method, format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST && name != hyper::header::CONTENT_LENGTH {
            forward = forward.header(name, value);
        }
    }
    let answer = {
        let _turn = state.one_at_a_time.lock().await;
        *state
            .forwarded
            .lock()
            .unwrap()
            .entry(operation.clone())
            .or_default() += 1;
        forward.body(body).send().await.map_err(|_| Lost)?
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.map_err(|_| Lost)?;
    if plan == Some(Lose::Response) {
        return lost();
    }
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        if name != hyper::header::CONTENT_LENGTH
            && name != hyper::header::TRANSFER_ENCODING
            && name != hyper::header::CONNECTION
        {
            response = response.header(name, value);
        }
    }
    Ok(response
        .body(Full::new(bytes))
        .expect("a forwarded response"))
}
