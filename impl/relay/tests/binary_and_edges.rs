//! What cargo-mutants found untested in the relay (docs/mutants.md): the `relay` binary as a
//! user starts it (its flags reach the limits it serves with; it stores at the DynamoDB endpoint
//! it is given), and the edges of the limits (a push of exactly the most ops, a stream id of
//! exactly the most bytes, are accepted).

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use oncecheck_relay::Limits;
use oncecheck_store::{MemoryStore, OpStore};
use reqwest::StatusCode;
use serde_json::json;

/// The `relay` binary on a free loopback port; killed when dropped.
struct Binary {
    child: Child,
    base: String,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the binary over the memory store with `arguments` and waits (bounded) until it answers
/// a pull.
async fn start(arguments: &[&str]) -> Binary {
    start_over(&["--store", "memory"], &[], arguments).await
}

/// Starts the binary with `store` arguments, `environment` and `arguments`, and waits (bounded)
/// until it answers a pull.
async fn start_over(store: &[&str], environment: &[(&str, &str)], arguments: &[&str]) -> Binary {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(store)
        .args(arguments)
        .envs(environment.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the relay binary starts");
    let binary = Binary {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    for _attempt in 0..100 {
        let answered = client
            .get(format!("{}/v1/streams/s/ops?after=0&limit=1", binary.base))
            .send()
            .await;
        if answered.is_ok() {
            return binary;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the relay binary never answered on {}", binary.base);
}

async fn pull_status(base: &str, limit: usize) -> StatusCode {
    reqwest::Client::new()
        .get(format!("{base}/v1/streams/s/ops?after=0&limit={limit}"))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn the_binary_serves_with_the_limits_its_flags_set() {
    let binary = start(&[
        "--pull-limit-max",
        "2",
        "--ops-per-push-max",
        "1",
        "--body-bytes-max",
        "200",
        "--op-id-bytes-max",
        "4",
    ])
    .await;
    let client = reqwest::Client::new();
    let push = |ops: serde_json::Value| {
        client
            .post(format!("{}/v1/streams/s/ops", binary.base))
            .header("content-type", "application/json")
            .body(json!({ "ops": ops }).to_string())
            .send()
    };
    let one = push(json!([{"op_id": "a", "payload": "1"}])).await.unwrap();
    assert_eq!(one.status(), StatusCode::OK);
    let two = push(json!([{"op_id": "b", "payload": "2"}, {"op_id": "c", "payload": "3"}]))
        .await
        .unwrap();
    assert_eq!(
        two.status(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "--ops-per-push-max 1"
    );
    let big = push(json!([{"op_id": "d", "payload": "z".repeat(300)}]))
        .await
        .unwrap();
    assert_eq!(
        big.status(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "--body-bytes-max 200"
    );
    let long_id = push(json!([{"op_id": "eeeee", "payload": "5"}]))
        .await
        .unwrap();
    assert_eq!(
        long_id.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "--op-id-bytes-max 4"
    );
    assert_eq!(pull_status(&binary.base, 2).await, StatusCode::OK);
    assert_eq!(
        pull_status(&binary.base, 3).await,
        StatusCode::BAD_REQUEST,
        "--pull-limit-max 2"
    );
}

#[tokio::test]
async fn a_push_of_exactly_the_most_ops_is_accepted() {
    let limits = Limits {
        ops_per_push_max: 3,
        ..Limits::default()
    };
    let base = support::serve(Arc::new(MemoryStore::new()), limits).await;
    let ops: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|op_id| json!({"op_id": op_id, "payload": "x"}))
        .collect();
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/streams/s/ops"))
        .header("content-type", "application/json")
        .body(json!({ "ops": ops }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// A body that breaks off mid-stream (a malformed chunk) is a 400 problem, not a size problem:
/// only a body over `body_bytes_max` is a 413.
#[tokio::test]
async fn a_body_that_cannot_be_read_is_a_400_not_a_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let base = support::serve(Arc::new(MemoryStore::new()), Limits::default()).await;
    let address = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            b"POST /v1/streams/s/ops HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("the relay answers and closes")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("malformed-json"), "{answer}");
}

/// The binary reaches DynamoDB at the endpoint ONCECHECK_DDB_ENDPOINT names (here moto): it
/// creates its table there, stores a push and serves it back.
#[tokio::test]
async fn the_binary_stores_in_the_dynamodb_endpoint_it_is_given() {
    let endpoint = support::ddb_endpoint();
    let table = support::unique("relay-binary");
    let binary = start_over(
        &["--store", &format!("dynamodb:{table}"), "--create-table"],
        &[("ONCECHECK_DDB_ENDPOINT", &endpoint)],
        &[],
    )
    .await;
    let client = reqwest::Client::new();
    let pushed = client
        .post(format!("{}/v1/streams/s/ops", binary.base))
        .header("content-type", "application/json")
        .body(json!({ "ops": [{"op_id": "a", "payload": "1"}] }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(pushed.status(), StatusCode::OK);
    let pulled: serde_json::Value = client
        .get(format!("{}/v1/streams/s/ops?after=0&limit=5", binary.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pulled["ops"][0]["op_id"], "a", "{pulled}");
    // The op is in that table at that endpoint, as a store of its own reads it back.
    let direct = oncecheck_store::DynamoDbStore::connect(table, Some(&endpoint)).await;
    let stored = direct
        .pull("s", 0, 5)
        .await
        .expect("a pull at the endpoint");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].op_id, "a");
}

/// A stream id of exactly `stream_id_bytes_max` bytes is served; one byte more is refused.
#[tokio::test]
async fn a_stream_id_of_exactly_the_most_bytes_is_accepted() {
    let limits = Limits::default();
    let base = support::serve(Arc::new(MemoryStore::new()), limits.clone()).await;
    let client = reqwest::Client::new();
    for (bytes, expected) in [
        (limits.stream_id_bytes_max, StatusCode::OK),
        (
            limits.stream_id_bytes_max + 1,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let stream = "s".repeat(bytes);
        let pushed = client
            .post(format!("{base}/v1/streams/{stream}/ops"))
            .header("content-type", "application/json")
            .body(json!({ "ops": [{"op_id": "a", "payload": "1"}] }).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            pushed.status(),
            expected,
            "a push to a {bytes}-byte stream id"
        );
        let pulled = client
            .get(format!("{base}/v1/streams/{stream}/ops?after=0&limit=1"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            pulled.status(),
            expected,
            "a pull of a {bytes}-byte stream id"
        );
    }
}
