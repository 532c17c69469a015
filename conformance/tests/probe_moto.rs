//! `oncecheck probe` against moto: the rows moto is known to support come out supported, and the
//! token rows come out "not supported" because moto re-executes an identical tokened
//! transaction, so the probe demonstrably can fail. The DynamoDB tests read
//! ONCECHECK_DDB_ENDPOINT and fail (never skip) when it is unset.

use std::process::Command;

use oncecheck_conformance::probe::{self, ProbeError, Verdict};

fn endpoint() -> String {
    std::env::var("ONCECHECK_DDB_ENDPOINT").ok().filter(|url| !url.is_empty()).unwrap_or_else(|| {
        panic!(
            "ONCECHECK_DDB_ENDPOINT is unset: start moto with `source scripts/services.sh; start_moto`, then rerun"
        )
    })
}

#[tokio::test]
async fn moto_supports_the_read_and_cancellation_rows_and_not_the_token_rows() {
    let report = probe::probe(&endpoint()).await.expect("the probe runs");
    let verdict = |semantic: &str| {
        report
            .row(semantic)
            .unwrap_or_else(|| panic!("row {semantic}"))
            .verdict
    };
    assert_eq!(verdict(probe::CANCELLATION_REASONS), Verdict::Supported);
    assert_eq!(verdict(probe::ALL_OLD_IMAGE), Verdict::Supported);
    assert_eq!(verdict(probe::QUERY_REVERSE_LIMIT), Verdict::Supported);
    assert_eq!(verdict(probe::ADD_MISSING), Verdict::Supported);
    assert_eq!(
        verdict(probe::TOKEN_REPLAY),
        Verdict::NotSupported,
        "moto re-executes: {:?}",
        report.rows
    );
    assert_eq!(verdict(probe::PARAMETER_MISMATCH), Verdict::NotSupported);
    assert!(
        report
            .row(probe::TOKEN_REPLAY)
            .unwrap()
            .got
            .contains("n = 2"),
        "the evidence names the double apply"
    );
    assert_eq!(
        verdict(probe::TOKEN_IN_PROGRESS),
        Verdict::NotTestableWithoutHold
    );
    assert_eq!(
        verdict(probe::TRANSACTION_CONFLICT),
        Verdict::NotTestableWithoutHold
    );
    assert_eq!(report.rows.len(), 8);
    assert!(report.table_deleted, "the probe deletes its table");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_probe_error() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    assert!(matches!(
        probe::probe(&url).await,
        Err(ProbeError::Unreachable { .. })
    ));
}

#[test]
fn the_command_exits_0_when_it_ran_and_2_on_bad_input() {
    let run = |target: &str| {
        Command::new(env!("CARGO_BIN_EXE_oncecheck"))
            .args(["probe", target])
            .output()
            .unwrap()
    };
    let ran = run(&format!("dynamodb={}", endpoint()));
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let table = String::from_utf8_lossy(&ran.stdout);
    assert!(
        table.contains("| token replay within the window | not supported |"),
        "{table}"
    );
    let bad = run("memory");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected dynamodb=URL"));
    let unreachable = run("dynamodb=http://127.0.0.1:1");
    assert_eq!(unreachable.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("unreachable"));
}
