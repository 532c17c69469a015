//! The relay over HTTP: the happy path, and bad input answered with the documented status and a
//! problem body while nothing already stored is lost.

mod support;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use oncecheck_relay::{Limits, PullResponse, PushResponse, PushResult, PROBLEM_TYPE_PREFIX};
use oncecheck_store::{MemoryStore, OpStore};
use reqwest::StatusCode;
use serde_json::{json, Value};
use support::*;

struct Relay {
    base: String,
    client: reqwest::Client,
}

impl Relay {
    async fn over(store: Arc<dyn OpStore>, limits: Limits) -> Relay {
        Relay {
            base: serve(store, limits).await,
            client: reqwest::Client::new(),
        }
    }

    async fn push_raw(&self, stream: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/streams/{stream}/ops", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("push request")
    }

    async fn push(&self, stream: &str, ops: &[(&str, &str)]) -> reqwest::Response {
        let ops: Vec<Value> = ops
            .iter()
            .map(|(op_id, payload)| json!({"op_id": op_id, "payload": payload}))
            .collect();
        self.push_raw(stream, json!({ "ops": ops }).to_string())
            .await
    }

    async fn pull_raw(&self, stream: &str, query: &str) -> reqwest::Response {
        self.client
            .get(format!("{}/v1/streams/{stream}/ops?{query}", self.base))
            .send()
            .await
            .expect("pull request")
    }

    async fn op_ids(&self, stream: &str) -> Vec<String> {
        let response = self.pull_raw(stream, "after=0&limit=1000").await;
        assert_eq!(response.status(), StatusCode::OK);
        let page: PullResponse = response.json().await.unwrap();
        page.ops.into_iter().map(|op| op.op_id).collect()
    }
}

/// Asserts a problem response: status, content type, the RFC 9457 members, the type suffix.
async fn problem(response: reqwest::Response, status: StatusCode, slug: &str) -> Value {
    assert_eq!(response.status(), status);
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"));
    let body: Value = response.json().await.expect("a JSON problem body");
    assert_eq!(
        body["type"],
        json!(format!("{PROBLEM_TYPE_PREFIX}{slug}")),
        "{body}"
    );
    assert_eq!(body["status"], json!(status.as_u16()));
    assert!(body["title"].is_string());
    assert!(!body["detail"].as_str().unwrap_or("").is_empty(), "{body}");
    body
}

async fn relay_with_two_ops() -> Relay {
    let relay = Relay::over(Arc::new(MemoryStore::new()), Limits::default()).await;
    assert_eq!(
        relay.push("s", &[("a", "1"), ("b", "2")]).await.status(),
        StatusCode::OK
    );
    relay
}

#[tokio::test]
async fn a_push_answers_each_seq_a_re_push_the_same_and_a_pull_pages_by_cursor() {
    let relay = Relay::over(Arc::new(MemoryStore::new()), Limits::default()).await;
    let first: PushResponse = relay
        .push("s", &[("a", "1"), ("b", "2")])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        first.results,
        vec![
            PushResult {
                op_id: "a".into(),
                seq: 1,
                existing: false
            },
            PushResult {
                op_id: "b".into(),
                seq: 2,
                existing: false
            }
        ]
    );
    let again: PushResponse = relay
        .push("s", &[("a", "1"), ("b", "2"), ("c", "3")])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        again
            .results
            .iter()
            .map(|r| (r.seq, r.existing))
            .collect::<Vec<_>>(),
        vec![(1, true), (2, true), (3, false)]
    );
    let page: PullResponse = relay
        .pull_raw("s", "after=1&limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            page.ops.len(),
            page.ops[0].seq,
            page.ops[0].payload.as_str(),
            page.cursor
        ),
        (1, 2, "2", 2)
    );
    let rest: PullResponse = relay.pull_raw("s", "after=2").await.json().await.unwrap();
    assert_eq!((rest.ops.len(), rest.cursor), (1, 3));
    let empty: PullResponse = relay.pull_raw("s", "after=3").await.json().await.unwrap();
    assert_eq!(
        (empty.ops.len(), empty.cursor),
        (0, 3),
        "an empty page keeps the cursor"
    );
}

#[tokio::test]
async fn malformed_json_is_a_400_problem_and_loses_nothing() {
    let relay = relay_with_two_ops().await;
    for body in [
        "{",
        "not json",
        "[]",
        r#"{"ops": [{"op_id": "x"}]}"#,
        r#"{"ops": [{"op_id": 1, "payload": "p"}]}"#,
        r#"{"ops": [], "extra": 1}"#,
        "",
    ] {
        problem(
            relay.push_raw("s", body).await,
            StatusCode::BAD_REQUEST,
            "malformed-json",
        )
        .await;
    }
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
}

#[tokio::test]
async fn an_empty_batch_is_a_422_problem() {
    let relay = relay_with_two_ops().await;
    problem(
        relay.push_raw("s", r#"{"ops": []}"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "empty-batch",
    )
    .await;
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
}

#[tokio::test]
async fn an_op_id_too_long_or_empty_is_a_422_problem_and_stores_none_of_the_batch() {
    let relay = relay_with_two_ops().await;
    let too_long = "x".repeat(Limits::default().op_id_bytes_max + 1);
    let body = problem(
        relay
            .push("s", &[("c", "3"), (too_long.as_str(), "4")])
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-op-id",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().contains("ops[1]"),
        "{body}"
    );
    problem(
        relay.push("s", &[("", "4")]).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-op-id",
    )
    .await;
    let longest = "y".repeat(Limits::default().op_id_bytes_max);
    assert_eq!(
        relay.push("s", &[(longest.as_str(), "5")]).await.status(),
        StatusCode::OK,
        "the limit itself is allowed"
    );
    assert_eq!(
        relay.op_ids("s").await,
        vec!["a".to_owned(), "b".to_owned(), longest]
    );
}

#[tokio::test]
async fn a_bad_cursor_or_limit_is_a_400_problem() {
    let relay = relay_with_two_ops().await;
    for query in [
        "after=-1",
        "after=abc",
        "after=1.5",
        "after=99999999999999999999",
    ] {
        problem(
            relay.pull_raw("s", query).await,
            StatusCode::BAD_REQUEST,
            "invalid-cursor",
        )
        .await;
    }
    for query in [
        "limit=0",
        "limit=1001",
        "limit=99999999999999999999",
        "limit=-3",
        "limit=ten",
    ] {
        problem(
            relay.pull_raw("s", query).await,
            StatusCode::BAD_REQUEST,
            "invalid-limit",
        )
        .await;
    }
    assert_eq!(
        relay.pull_raw("s", "limit=1000").await.status(),
        StatusCode::OK
    );
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
}

#[tokio::test]
async fn an_oversized_push_is_a_413_problem() {
    let limits = Limits {
        body_bytes_max: 4096,
        ops_per_push_max: 3,
        ..Limits::default()
    };
    let relay = Relay::over(Arc::new(MemoryStore::new()), limits).await;
    assert_eq!(
        relay.push("s", &[("a", "1"), ("b", "2")]).await.status(),
        StatusCode::OK
    );
    let big = "z".repeat(5000);
    problem(
        relay.push("s", &[("c", big.as_str())]).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
    )
    .await;
    problem(
        relay
            .push("s", &[("c", "3"), ("d", "4"), ("e", "5"), ("f", "6")])
            .await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
    )
    .await;
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
}

#[tokio::test]
async fn unknown_routes_methods_and_streams_get_problems() {
    let relay = relay_with_two_ops().await;
    let missing = relay
        .client
        .get(format!("{}/v2/nothing", relay.base))
        .send()
        .await
        .unwrap();
    problem(missing, StatusCode::NOT_FOUND, "not-found").await;
    let wrong_method = relay
        .client
        .put(format!("{}/v1/streams/s/ops", relay.base))
        .send()
        .await
        .unwrap();
    problem(
        wrong_method,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    )
    .await;
    let long_stream = "s".repeat(Limits::default().stream_id_bytes_max + 1);
    problem(
        relay.push(&long_stream, &[("c", "3")]).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-stream",
    )
    .await;
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
#[tokio::test]
async fn a_push_past_its_deadline_is_a_503_that_keeps_what_it_stored() {
    let inner: Arc<dyn OpStore> = Arc::new(MemoryStore::new());
    let faulty = Faulty {
        inner: inner.clone(),
        at: 2,
        fail: false,
        appended: AtomicU64::new(0),
    };
    let relay = Relay::over(
        Arc::new(faulty),
        Limits {
            push_deadline_secs: 1,
            ..Limits::default()
        },
    )
    .await;
    let response = relay.push("s", &[("a", "1"), ("b", "2"), ("c", "3")]).await;
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().to_owned())
            .as_deref(),
        Some("1")
    );
    let body = problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "deadline-exceeded",
    )
    .await;
    assert_eq!(
        body["stored"],
        json!([{"op_id": "a", "seq": 1, "existing": false}, {"op_id": "b", "seq": 2, "existing": false}])
    );
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
    let re_push: PushResponse = relay
        .push("s", &[("a", "1"), ("b", "2"), ("c", "3")])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        re_push
            .results
            .iter()
            .map(|r| (r.seq, r.existing))
            .collect::<Vec<_>>(),
        vec![(1, true), (2, true), (3, false)]
    );
}

#[tokio::test]
async fn a_store_fault_is_a_500_problem_listing_what_was_stored() {
    let inner: Arc<dyn OpStore> = Arc::new(MemoryStore::new());
    let faulty = Faulty {
        inner: inner.clone(),
        at: 2,
        fail: true,
        appended: AtomicU64::new(0),
    };
    let relay = Relay::over(Arc::new(faulty), Limits::default()).await;
    let body = problem(
        relay.push("s", &[("a", "1"), ("b", "2")]).await,
        StatusCode::INTERNAL_SERVER_ERROR,
        "store-failure",
    )
    .await;
    assert_eq!(
        body["detail"],
        json!("the store failed unexpectedly; the relay's log has the error"),
        "the raw error stays in the log"
    );
    assert_eq!(
        body["stored"],
        json!([{"op_id": "a", "seq": 1, "existing": false}])
    );
    assert_eq!(relay.op_ids("s").await, vec!["a"]);
}

#[tokio::test]
async fn a_push_that_is_not_declared_json_is_a_415_problem_and_stores_nothing() {
    let relay = relay_with_two_ops().await;
    let body = json!({"ops": [{"op_id": "c", "payload": "3"}]}).to_string();
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut request = relay
            .client
            .post(format!("{}/v1/streams/s/ops", relay.base))
            .body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        problem(
            request.send().await.unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
        )
        .await;
    }
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
    let with_charset = relay
        .client
        .post(format!("{}/v1/streams/s/ops", relay.base))
        .header("content-type", "Application/JSON; charset=utf-8")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(with_charset.status(), StatusCode::OK);
}

//= specs/relay-append.md#R3
//# A push of two ops or more reads the claims of all its ops before its first write; an op_id
//# stored with another payload refuses the whole push, and nothing is written.
/// Duplicate op_ids in one push, an op_id re-pushed with another payload (alone, and inside a
/// batch), and an op over the item size, on each backend: the same answers, nothing stored.
async fn bad_op_ids_are_refused_and_store_nothing(backend_name: &str) {
    let backend = backend(backend_name).await;
    let relay = Relay::over(backend.store.clone(), Limits::default()).await;
    assert_eq!(
        relay.push("s", &[("a", "1"), ("b", "2")]).await.status(),
        StatusCode::OK
    );
    let duplicate = problem(
        relay.push("s", &[("c", "3"), ("d", "4"), ("c", "3")]).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "duplicate-op-id",
    )
    .await;
    assert!(duplicate["detail"]
        .as_str()
        .unwrap()
        .contains("ops[0] and ops[2]"));
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"], "nothing stored");
    let conflict = problem(
        relay.push("s", &[("b", "another payload")]).await,
        StatusCode::CONFLICT,
        "op-id-conflict",
    )
    .await;
    assert_eq!(conflict["seq"], json!(2));
    assert_eq!(conflict["stored"], json!([]));
    let page: PullResponse = relay.pull_raw("s", "after=0").await.json().await.unwrap();
    assert_eq!(page.ops[1].payload, "2", "the first payload is kept");
    // The conflicting op_id in the middle of a batch: the whole batch is refused, nothing stored.
    let batch_conflict = problem(
        relay
            .push("s", &[("n1", "n"), ("b", "another payload"), ("n3", "n")])
            .await,
        StatusCode::CONFLICT,
        "op-id-conflict",
    )
    .await;
    assert_eq!(batch_conflict["seq"], json!(2));
    assert_eq!(batch_conflict["stored"], json!([]));
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"], "nothing stored");
    // One set of limits: a 450 KB op is a 413 on every backend, and nothing of its batch is
    // stored, although the body is within body_bytes_max.
    let big = "x".repeat(450 * 1024);
    let too_large = problem(
        relay
            .push("s", &[("n1", "n"), ("n2", "n"), ("n3", big.as_str())])
            .await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "op-too-large",
    )
    .await;
    assert!(
        too_large["detail"].as_str().unwrap().starts_with("ops[2]"),
        "{too_large}"
    );
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"], "nothing stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_op_ids_are_refused_and_store_nothing_memory() {
    bad_op_ids_are_refused_and_store_nothing("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_op_ids_are_refused_and_store_nothing_sqlite() {
    bad_op_ids_are_refused_and_store_nothing("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_op_ids_are_refused_and_store_nothing_dynamodb() {
    bad_op_ids_are_refused_and_store_nothing("dynamodb").await;
}

/// A relay on DynamoDB through the fault proxy, with `limits`.
async fn relay_behind_proxy(limits: Limits) -> (Relay, serial_proxy::FaultProxy, table::Table) {
    let proxy = serial_proxy::FaultProxy::start(ddb_endpoint()).await;
    let tuning = oncecheck_store::dynamodb::AppendTuning {
        backoff_base: std::time::Duration::from_millis(1),
        backoff_max: std::time::Duration::from_millis(20),
        ..oncecheck_store::dynamodb::AppendTuning::default()
    };
    let store = oncecheck_store::DynamoDbStore::connect(unique("relay"), Some(&proxy.url))
        .await
        .with_tuning(tuning);
    let table = table::Table::create(store, ddb_endpoint()).await;
    let relay = Relay::over(Arc::new(table.clone()), limits).await;
    (relay, proxy, table)
}

/// DynamoDB's item limit through the relay: (small, small, 450 KB) is a 413 and nothing is
/// stored, although the body is within body_bytes_max.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_over_the_item_size_is_a_413_and_stores_none_of_the_batch() {
    let (relay, proxy, _table) = relay_behind_proxy(Limits::default()).await;
    let big = "x".repeat(450 * 1024);
    let body = problem(
        relay
            .push("s", &[("a", "1"), ("b", "2"), ("c", big.as_str())])
            .await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "op-too-large",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().starts_with("ops[2]"),
        "{body}"
    );
    assert_eq!(proxy.count("TransactWriteItems"), 0, "nothing sent");
    assert!(relay.op_ids("s").await.is_empty());
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
/// The backend stalls mid-push: the relay answers 503 with Retry-After at the push deadline (not
/// a 500 after the SDK's attempt timeout) listing the op it stored; a pull during the stall is a
/// 503 at the pull deadline. Once the backend answers again, the re-push completes and every op
/// is stored exactly once. A response lost to a closed connection is retried inside the push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_stalled_mid_push_is_a_503_and_the_re_push_stores_each_op_once() {
    let limits = Limits {
        push_deadline_secs: 1,
        pull_deadline_secs: 1,
        ..Limits::default()
    };
    let proxy = serial_proxy::FaultProxy::start(ddb_endpoint()).await;
    let stalling = proxy.clone();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let store = oncecheck_store::DynamoDbStore::connect(unique("relay"), Some(&proxy.url))
        .await
        .with_before_write(move |attempt| {
            // Only b's first round stalls the backend; the re-push runs on a healed one.
            if attempt.op_id == "b" && armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                stalling.stall_everything();
            }
            Box::pin(async {}) as oncecheck_store::StoreFuture<'static, ()>
        });
    let table = table::Table::create(store, ddb_endpoint()).await;
    let relay = Relay::over(Arc::new(table.clone()), limits).await;
    let started = std::time::Instant::now();
    let response = relay.push("s", &[("a", "1"), ("b", "2"), ("c", "3")]).await;
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_millis(2500), "{took:?}");
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("1".to_owned())
    );
    let body = problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "deadline-exceeded",
    )
    .await;
    assert_eq!(
        body["stored"],
        json!([{"op_id": "a", "seq": 1, "existing": false}])
    );
    let pull = relay.pull_raw("s", "after=0").await;
    assert!(pull.headers().contains_key("retry-after"));
    problem(pull, StatusCode::SERVICE_UNAVAILABLE, "deadline-exceeded").await;
    proxy.heal();
    proxy.fault_next("TransactWriteItems", serial_proxy::Fault::CloseAfterForward);
    let re_push: PushResponse = relay
        .push("s", &[("a", "1"), ("b", "2"), ("c", "3")])
        .await
        .json()
        .await
        .unwrap();
    let answers: Vec<(i64, bool)> = re_push
        .results
        .iter()
        .map(|r| (r.seq, r.existing))
        .collect();
    // The lost response is a's round (its claim put failed, the answer never came): retried in
    // place, it answers a's seq; b's stalled round was never forwarded, so b and c are new.
    assert_eq!(answers, vec![(1, true), (2, false), (3, false)]);
    assert_eq!(relay.op_ids("s").await, vec!["a", "b", "c"]);
}

/// hyper answers a request line or head beyond what it parses itself, before any handler; the
/// listener gives those answers problem bodies too.
#[tokio::test]
async fn a_uri_or_head_too_large_for_the_server_gets_a_problem_body() {
    let relay = relay_with_two_ops().await;
    // HTTP clients refuse a 100 KB URI themselves: write the request by hand.
    let address = relay.base.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET /v1/streams/s/ops?after=0&pad={} HTTP/1.1\r\nhost: {address}\r\n\r\n",
        "x".repeat(100 * 1024)
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 414 "), "{head}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    let body: Value = serde_json::from_str(body).expect("a JSON problem body");
    assert_eq!(
        body["type"],
        json!(format!("{PROBLEM_TYPE_PREFIX}uri-too-long"))
    );
    assert_eq!(body["status"], json!(414));
    let huge_header = relay
        .client
        .get(format!("{}/v1/streams/s/ops", relay.base))
        .header("x-pad", "z".repeat(2 * 1024 * 1024))
        .send()
        .await
        .unwrap();
    problem(
        huge_header,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "header-fields-too-large",
    )
    .await;
    assert_eq!(relay.op_ids("s").await, vec!["a", "b"]);
}
