//! `oncecheck probe` against moto: the rows moto is known to support come out supported, and the
//! token rows come out "not supported" because moto re-executes an identical tokened
//! transaction, so the probe demonstrably can fail. Through the conformance proxy the token rows
//! turn green with its token table on and red again with it off, and the in-progress and
//! TransactionConflict rows become real requests on the proxy's hold. The DynamoDB tests read
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
async fn through_the_proxy_every_row_is_supported_with_the_token_table_on() {
    let report = probe::probe_through_proxy(&endpoint(), true)
        .await
        .expect("the probe runs");
    for row in &report.rows {
        assert_eq!(row.verdict, Verdict::Supported, "{row:?}");
    }
    assert_eq!(report.rows.len(), 8);
    let evidence = |semantic: &str| report.row(semantic).unwrap().got.clone();
    assert!(evidence(probe::TOKEN_REPLAY).contains("n = 1"));
    assert!(evidence(probe::TOKEN_IN_PROGRESS).starts_with("TransactionInProgressException"));
    assert!(evidence(probe::TRANSACTION_CONFLICT).contains("TransactionConflictException"));
    assert!(report.endpoint.contains("token table on"));
    assert!(report.table_deleted);
}

/// The red row: the same proxy with its token table off shows moto's re-execution.
#[tokio::test]
async fn through_the_proxy_the_token_rows_turn_red_with_the_token_table_off() {
    let report = probe::probe_through_proxy(&endpoint(), false)
        .await
        .expect("the probe runs");
    let row = |semantic: &str| report.row(semantic).unwrap().clone();
    assert_eq!(row(probe::TOKEN_REPLAY).verdict, Verdict::NotSupported);
    assert!(row(probe::TOKEN_REPLAY).got.contains("n = 2"));
    assert_eq!(
        row(probe::PARAMETER_MISMATCH).verdict,
        Verdict::NotSupported
    );
    // The hold still runs the first transaction; without the token rules its twin meets the
    // lock instead of the token: a cancellation, not TransactionInProgress.
    assert_eq!(row(probe::TOKEN_IN_PROGRESS).verdict, Verdict::Differs);
    assert!(row(probe::TOKEN_IN_PROGRESS)
        .got
        .contains("TransactionCanceledException"));
    // The rows that do not depend on tokens stay green.
    assert_eq!(row(probe::TRANSACTION_CONFLICT).verdict, Verdict::Supported);
    assert_eq!(row(probe::CANCELLATION_REASONS).verdict, Verdict::Supported);
    assert!(report.endpoint.contains("token table off"));
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
    assert!(matches!(
        probe::probe_through_proxy(&url, true).await,
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
    let through = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(["probe", &format!("dynamodb={}", endpoint()), "--proxy"])
        .output()
        .unwrap();
    assert_eq!(through.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&through.stdout)
            .contains("| token replay within the window | supported |"),
        "{}",
        String::from_utf8_lossy(&through.stdout)
    );
    let bad = run("memory");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected dynamodb=URL"));
    let unreachable = run("dynamodb=http://127.0.0.1:1");
    assert_eq!(unreachable.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("unreachable"));
}
