//! A loopback HTTP proxy that forwards to a DynamoDB-compatible endpoint one request at a time.
//!
//! Why: moto server runs threaded without concurrency control; concurrent TransactWriteItems
//! race inside it (lost conditions, 500s from "dictionary changed size during iteration").
//! DynamoDB serialises transactions; moto does not. Handing moto one request at a time makes each
//! request atomic, which is what concurrent tests and benchmarks need from it. (Stronger than
//! DynamoDB for reads: no visibility window. The conformance proxy opens that window; this one
//! only serialises.) Used by the concurrent tests and the benchmark, never by the store.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::Router;

/// Starts the proxy in front of `upstream`; answers the proxy's URL.
pub async fn serialize_endpoint(upstream: String) -> String {
    let client = reqwest::Client::new();
    let one_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
    let app = Router::new().fallback(move |request: Request| {
        let (client, one_at_a_time, upstream) =
            (client.clone(), one_at_a_time.clone(), upstream.clone());
        async move {
            let (parts, body) = request.into_parts();
            let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
                return status(StatusCode::BAD_REQUEST);
            };
            let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
            let mut forward = client.request(parts.method, format!("{upstream}{path}"));
            for (name, value) in &parts.headers {
                if name != header::HOST && name != header::CONTENT_LENGTH {
                    forward = forward.header(name, value);
                }
            }
            let _turn = one_at_a_time.lock().await;
            let Ok(answer) = forward.body(bytes).send().await else {
                return status(StatusCode::BAD_GATEWAY);
            };
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != header::CONTENT_LENGTH
                    && name != header::TRANSFER_ENCODING
                    && name != header::CONNECTION
                {
                    response = response.header(name, value);
                }
            }
            let Ok(body) = answer.bytes().await else {
                return status(StatusCode::BAD_GATEWAY);
            };
            response
                .body(Body::from(body))
                .unwrap_or_else(|_| status(StatusCode::BAD_GATEWAY))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let address = listener.local_addr().expect("proxy address");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("proxy serve");
    });
    format!("http://{address}")
}

fn status(code: StatusCode) -> Response {
    Response::builder()
        .status(code)
        .body(Body::empty())
        .expect("a bare status")
}
