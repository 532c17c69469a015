//! A loopback HTTP server that answers DynamoDB requests from a script, in DynamoDB's JSON wire
//! shape (`application/x-amz-json-1.0`, errors as `{"__type": ..., "message": ...}`): the real
//! wire to the real SDK, for answers an emulator does not give (a token in progress, a parameter
//! mismatch, UnprocessedItems).
//!
//! Invariant: every request is recorded (operation and body) before it is answered; when the
//! script runs out, its last answer repeats.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Router;

#[derive(Clone, Debug)]
pub struct Scripted {
    pub status: u16,
    pub body: String,
}

impl Scripted {
    /// A DynamoDB error answer with the exception's short name.
    pub fn error(status: u16, exception: &str, message: &str) -> Scripted {
        let body = serde_json::json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{exception}"),
            "message": message,
        });
        Scripted {
            status,
            body: body.to_string(),
        }
    }

    /// A TransactionCanceledException with one cancellation reason per item, in request order
    /// (`"None"` for an item that did not cause it).
    pub fn cancelled(codes: &[&str]) -> Scripted {
        let reasons: Vec<serde_json::Value> = codes
            .iter()
            .map(|code| serde_json::json!({ "Code": code }))
            .collect();
        let body = serde_json::json!({
            "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
            "message": "Transaction cancelled, please refer cancellation reasons for specific reasons",
            "CancellationReasons": reasons,
        });
        Scripted {
            status: 400,
            body: body.to_string(),
        }
    }

    pub fn ok(body: serde_json::Value) -> Scripted {
        Scripted {
            status: 200,
            body: body.to_string(),
        }
    }
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Scripted>>,
    last: Mutex<Option<Scripted>>,
    requests: Mutex<Vec<(String, serde_json::Value)>>,
}

#[derive(Clone)]
pub struct FakeEndpoint {
    pub url: String,
    state: Arc<State>,
}

impl FakeEndpoint {
    pub async fn start(script: Vec<Scripted>) -> FakeEndpoint {
        let state = Arc::new(State {
            script: Mutex::new(script.into()),
            ..State::default()
        });
        let shared = state.clone();
        let app = Router::new().fallback(move |request: Request| {
            let state = shared.clone();
            async move {
                let operation = request
                    .headers()
                    .get("x-amz-target")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|target| target.rsplit('.').next())
                    .unwrap_or("unknown")
                    .to_owned();
                let bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
                    .await
                    .unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                state.requests.lock().unwrap().push((operation, body));
                let next = state.script.lock().unwrap().pop_front();
                let answer = match next {
                    Some(answer) => {
                        *state.last.lock().unwrap() = Some(answer.clone());
                        answer
                    }
                    None => state
                        .last
                        .lock()
                        .unwrap()
                        .clone()
                        .expect("a scripted answer"),
                };
                Response::builder()
                    .status(StatusCode::from_u16(answer.status).expect("a status"))
                    .header("content-type", "application/x-amz-json-1.0")
                    .body(Body::from(answer.body))
                    .expect("a scripted response")
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake endpoint");
        let url = format!("http://{}", listener.local_addr().expect("fake address"));
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake endpoint");
        });
        FakeEndpoint { url, state }
    }

    /// Every request received: (operation, JSON body).
    pub fn requests(&self) -> Vec<(String, serde_json::Value)> {
        self.state.requests.lock().unwrap().clone()
    }
}
