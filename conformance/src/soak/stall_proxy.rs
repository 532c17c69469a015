//! The DynamoDB soak's proxy between the relay and an emulator: it forwards one request at a
//! time (moto has no concurrency control: concurrent transactions corrupt its tables) and, during
//! a stall, holds every request until the stall ends, as a backend that stopped answering does;
//! the relay's own timeouts and push deadline then decide what its clients see.
//!
//! Invariants: at most one exchange with the upstream is in flight, also when the client of an
//! exchange goes away mid-exchange (the relay drops a round's request at its push deadline): an
//! exchange once started runs to its end in a task of its own, holding the turn, whatever its
//! client does; a request waits at most the stall's length beyond the exchanges before it; the
//! proxy runs until it is dropped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

pub struct StallProxy {
    address: SocketAddr,
    stalled: watch::Sender<bool>,
    server: JoinHandle<()>,
}

struct Shared {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Held for every exchange with the upstream, by the task that runs it.
    turn: Arc<Mutex<()>>,
    stalled: watch::Receiver<bool>,
}

impl StallProxy {
    /// A proxy on a loopback port in front of `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Result<StallProxy, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("the stall proxy cannot listen: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let (stalled, stalled_receiver) = watch::channel(false);
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            turn: Arc::new(Mutex::new(())),
            stalled: stalled_receiver,
        });
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(forward(shared, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(StallProxy {
            address,
            stalled,
            server,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Holds every request for `length`, then lets them through in order.
    pub async fn stall(&self, length: Duration) {
        let _ = self.stalled.send(true);
        tokio::time::sleep(length).await;
        let _ = self.stalled.send(false);
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return status(StatusCode::BAD_REQUEST),
    };
    let mut stalled = shared.stalled.clone();
    let _ = stalled.wait_for(|stalled| !*stalled).await;
    // Until here a client that goes away takes its request with it: nothing reached the
    // upstream. From here on the exchange is the upstream's: hyper drops this future when the
    // client closes its connection, so the exchange runs in a task that keeps the turn until the
    // upstream has answered. Released earlier, the next request would reach moto while this one
    // is still applied, and moto's transactions are not isolated from each other (a cancelled
    // one restores its snapshot of the whole table over a transaction that committed meanwhile).
    let turn = shared.turn.clone().lock_owned().await;
    let exchange = tokio::spawn(async move {
        let _turn = turn;
        exchange(&shared, parts, body).await
    });
    exchange
        .await
        .unwrap_or_else(|_| status(StatusCode::BAD_GATEWAY))
}

/// One request to the upstream and its whole answer; the caller holds the turn.
async fn exchange(
    shared: &Shared,
    parts: http::request::Parts,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_string();
    let mut upstream = Request::builder()
        .method(parts.method)
        .uri(format!("{}{path}", shared.upstream));
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(Full::new(body)) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let Ok(response) = shared.client.request(upstream).await else {
        return status(StatusCode::BAD_GATEWAY);
    };
    let (parts, body) = response.into_parts();
    match body.collect().await {
        Ok(body) => Response::from_parts(parts, Full::new(body.to_bytes())),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counting_upstream::CountingUpstream;
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;

    /// moto applies a transaction's items one by one and restores a snapshot of the whole table
    /// when one fails, so two transactions in it at once can erase a committed one. The relay
    /// drops a round's request at its push deadline; the proxy must still finish that exchange
    /// before it lets the next request through, or the next one reaches moto beside it.
    #[tokio::test]
    async fn a_request_dropped_by_its_client_mid_exchange_keeps_the_upstream_to_itself() {
        let mut upstream = CountingUpstream::start().await;
        let proxy = StallProxy::start(&upstream.url).await.unwrap();
        let mut dropped = tokio::net::TcpStream::connect(proxy.address).await.unwrap();
        dropped
            .write_all(b"POST / HTTP/1.1\r\nhost: proxy\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        upstream.arrivals.recv().await.unwrap();
        // The first request is in its exchange with the upstream: its client goes away, as the
        // relay's round does when its push deadline passes.
        drop(dropped);
        let answer = super::super::http::HttpClient::default()
            .send(http::Method::POST, &proxy.url(), &[], Bytes::from("{}"))
            .await
            .unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        upstream.arrivals.recv().await.unwrap();
        assert_eq!(upstream.in_flight_max.load(Ordering::SeqCst), 1);
    }
}
