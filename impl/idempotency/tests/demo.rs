//! The demo binary as a user runs it: started with `--database-url` on PostgreSQL (the test
//! command runs this file once, on the server of ONCECHECK_PG_URL) and on SQLite, spoken to over
//! TCP. A transfer moves money once however often it is sent; malformed credentials are 401;
//! unknown routes are 404 before the layer looks for a key; a bad URL exits 2 with one line.

mod common;

use common::http_client::{self, Answer};
use http::StatusCode;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const DEMO: &str = env!("CARGO_BIN_EXE_idempotency-demo");

/// The running demo; killed when dropped, so a failing assertion never leaves it behind.
struct Demo {
    child: Child,
    address: String,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(database_url: &str) -> Demo {
    let mut child = Command::new(DEMO)
        .args(["--database-url", database_url, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the demo binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Demo { child, address }
}

async fn call(
    demo: &Demo,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    http_client::call(&demo.address, method, path, headers, body).await
}

const TRANSFER: &str = r#"{"from":"alice","to":"bob","amount":5}"#;
const JSON: (&str, &str) = ("content-type", "application/json");

/// A transfer sent twice moves the money once; the second answer is the replay.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
async fn transfers_once_and_answers_contract_errors(database_url: &str) {
    let demo = start(database_url);
    let alice = ("authorization", "Bearer alice");
    let first = call(
        &demo,
        "POST",
        "/transfers",
        &[JSON, alice, ("idempotency-key", "t-1")],
        TRANSFER,
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.replayed.as_deref(), Some("false"));
    let again = call(
        &demo,
        "POST",
        "/transfers",
        &[JSON, alice, ("idempotency-key", "t-1")],
        TRANSFER,
    )
    .await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.replayed.as_deref(), Some("true"));
    assert_eq!(again.body, first.body);
    let accounts = call(&demo, "GET", "/accounts", &[], "").await;
    assert_eq!(
        accounts.body, r#"{"alice":95,"bob":105}"#,
        "the money moved once"
    );

    // Malformed credentials are refused, never treated as the anonymous caller.
    for malformed in ["Bearer ", "Bearer", "Basic YWxpY2U6c2VjcmV0"] {
        let answer = call(
            &demo,
            "POST",
            "/transfers",
            &[
                JSON,
                ("authorization", malformed),
                ("idempotency-key", "t-1"),
            ],
            TRANSFER,
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "credentials {malformed:?}"
        );
    }
    // Routing runs before the layer: an unknown route is 404 with or without a key.
    assert_eq!(
        call(&demo, "POST", "/nope", &[JSON], TRANSFER).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(
            &demo,
            "POST",
            "/nope",
            &[JSON, ("idempotency-key", "n")],
            TRANSFER
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&demo, "DELETE", "/transfers", &[], "").await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let accounts = call(&demo, "GET", "/accounts", &[], "").await;
    assert_eq!(
        accounts.body, r#"{"alice":95,"bob":105}"#,
        "no refused request moved money"
    );
}

#[tokio::test]
async fn postgres_demo() {
    let url = common::fresh_postgres_database().await;
    transfers_once_and_answers_contract_errors(&url).await;
    common::drop_postgres_database(&url).await;
}

#[tokio::test]
async fn sqlite_demo() {
    let path = common::fresh_sqlite_path();
    transfers_once_and_answers_contract_errors(&format!("sqlite:{}", path.display())).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[test]
fn a_database_url_of_another_kind_exits_2_with_one_line() {
    let output = Command::new(DEMO)
        .args([
            "--database-url",
            "mysql://localhost/x",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("expected postgres://... or sqlite:PATH"),
        "{stderr}"
    );
}
