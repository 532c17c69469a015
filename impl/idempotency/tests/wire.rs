//! The wire check: the layer under `axum::serve` on a real TCP socket, spoken to with hyper's
//! HTTP/1.1 client connection (no reqwest). An over-cap 2xx without Content-Length goes out
//! chunked with every byte; its duplicate on the same connection is the sentinel replay.

mod common;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use oncecheck_idempotency::ManualClock;

async fn over_the_wire<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![
        Step::Data(CAP),
        Step::Data(CAP),
        Step::Data(CAP),
    ])]);
    let app = app(
        layer_builder(store.clone(), &ManualClock::new(START_MILLIS)).build(),
        handler.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = || {
        Request::post("/transfers")
            .header("host", address.to_string())
            .header("idempotency-key", "\"wire-1\"")
            .body(Full::new(Bytes::from_static(b"{\"amount\":5}")))
            .unwrap()
    };
    let first = sender.send_request(request()).await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["idempotency-replayed"], "false");
    assert_eq!(
        first.headers()["transfer-encoding"],
        "chunked",
        "no Content-Length: HTTP/1.1 chunks"
    );
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        &pattern(0, 3 * CAP)[..],
        "every byte crossed the wire"
    );
    sender
        .ready()
        .await
        .expect("the connection is kept alive for the duplicate");
    let replay = sender.send_request(request()).await.unwrap();
    assert_eq!(replay.headers()["idempotency-replayed"], "true");
    assert_eq!(replay.headers()["content-type"], "application/problem+json");
    assert_eq!(handler.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_over_the_wire() {
    let store = sqlite_store(4).await;
    over_the_wire(store.clone()).await;
    store.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_the_wire() {
    let store = postgres_store(4).await;
    over_the_wire(store.clone()).await;
    store.teardown().await;
}
