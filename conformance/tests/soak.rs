//! The short soak of the test command: `oncecheck soak` on the relay binary (SQLite and, through
//! the soak's serialising stall proxy, moto) and on the idempotency layer (a PostgreSQL server
//! of the soak's own, restarted), each bounded to seconds and seeded. The long runs are the
//! documented commands in docs/ci.md. A soak is a smoke test and a measurement, not a proof.

use std::process::{Command, Output};

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(arguments)
        .output()
        .expect("oncecheck runs")
}

/// Asserts the run exited 0 with `result: ok`, and answers its report.
fn report_of(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("  result: ok"), "{stdout}");
    stdout
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
//= specs/relay-append.md#R5
//# With new-build writers only, the stored seqs are exactly 1..n.
#[test]
fn the_relay_on_sqlite_killed_and_stalled_loses_duplicates_and_skips_nothing() {
    let output = oncecheck(&[
        "soak",
        "relay",
        "--store",
        "sqlite",
        "--ops",
        "600",
        "--kills",
        "3",
        "--stalls",
        "1",
        "--stall-millis",
        "2500",
        "--seed",
        "7",
        "--seconds-max",
        "120",
    ]);
    let report = report_of(&output);
    println!("{report}");
    assert!(
        report.contains("faults: 3 SIGKILLs and restarts of the relay, 1 backend stalls"),
        "{report}"
    );
    assert!(
        report.contains("checked: 600 ops answered, 600 stored; lost 0, duplicated 0, gaps 0, answers differ 0, views differ 0"),
        "{report}"
    );
}

#[test]
fn the_relay_on_moto_killed_and_stalled_on_a_fresh_table_every_200_ops() {
    assert!(
        std::env::var("ONCECHECK_DDB_ENDPOINT").is_ok(),
        "ONCECHECK_DDB_ENDPOINT is unset: this test needs moto (scripts/services.sh starts it)"
    );
    let output = oncecheck(&[
        "soak",
        "relay",
        "--store",
        "dynamodb",
        "--ops",
        "400",
        "--table-ops-max",
        "200",
        "--kills",
        "1",
        "--stalls",
        "1",
        "--stall-millis",
        "2500",
        "--seed",
        "7",
        "--seconds-max",
        "180",
    ]);
    let report = report_of(&output);
    println!("{report}");
    assert!(
        report.contains("faults: 1 SIGKILLs and restarts of the relay, 1 backend stalls"),
        "{report}"
    );
    assert!(
        report.contains("checked: 400 ops answered, 400 stored; lost 0, duplicated 0, gaps 0"),
        "{report}"
    );
}

//= specs/idempotency-middleware.md#M1
//# Once the row records a success, no request with the key runs the handler until the row expires.
/// The atomic handler (its effect committed with the cached response): exactly once whatever the
/// restarts interrupt. The external handler's window (an outage between its effect's commit and
/// the finalize) is measured by the long run, not asserted on a timing here.
#[test]
fn the_layer_on_postgres_restarted_runs_every_atomic_key_exactly_once() {
    let output = oncecheck(&[
        "soak",
        "layer",
        "--handler",
        "atomic",
        "--keys",
        "400",
        "--clients",
        "8",
        "--restarts",
        "2",
        "--seed",
        "7",
        "--seconds-max",
        "180",
    ]);
    let report = report_of(&output);
    println!("{report}");
    assert!(
        report.contains("faults: 2 restarts of PostgreSQL"),
        "{report}"
    );
    assert!(
        report.contains(
            "checked: 400 keys, 400 ran exactly once; ran twice 0, never ran 0, answers differ 0"
        ),
        "{report}"
    );
}

/// A run its time limit cuts fails for that alone: the batches it gave up unanswered (stored or
/// not), the ops it never pushed, the pullers it stopped short and the faults past where it
/// stopped are reported as what they are, not as lost, unanswered or differing views.
#[test]
fn a_relay_run_cut_by_its_time_limit_fails_for_the_time_alone() {
    let output = oncecheck(&[
        "soak",
        "relay",
        "--store",
        "sqlite",
        "--ops",
        "1000000",
        "--kills",
        "1",
        "--seed",
        "7",
        "--seconds-max",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("  result: 1 violations\n"), "{stdout}");
    assert!(
        stdout.contains("  VIOLATION the run did not finish within 2 s\n"),
        "{stdout}"
    );
    assert!(stdout.contains("  time up at "), "{stdout}");
    assert!(stdout.contains("lost 0, duplicated 0, gaps 0"), "{stdout}");
}

#[test]
fn bad_soak_arguments_exit_2_with_one_line() {
    let output = oncecheck(&["soak", "relay", "--ops", "0"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--ops"), "{stderr}");
}
