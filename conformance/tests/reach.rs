//! `oncecheck check` runs each variant's named bound sets beside its CI bounds and prints which
//! requirements' reaches a run left unreached (S6, docs/ci.md): a vacuous `holds` is visible.

use std::process::{Command, Output};

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(arguments)
        .output()
        .expect("the oncecheck binary runs")
}

//= specs/tokened-writes.md#T5
//# Some request with a token over 36 characters is rejected as a validation error.
#[test]
fn check_runs_the_bound_set_and_prints_the_reaches_the_ci_bounds_miss() {
    let output = oncecheck(&["check", "token", "--variant", "tokened"]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("reach unreached at these bounds: T5, 1 of 2 sometimes: T5 an over-long token is rejected\n"),
        "the CI bounds' run names T5's unreached reach:\n{text}"
    );
    assert!(
        text.contains("bound set `reach` of token/tokened (for the reach of T5):\ntoken/tokened [clients=2 damaged_records=1 long_tokens=1 "),
        "the bound set runs after the CI bounds:\n{text}"
    );
    assert!(
        text.contains("  token/tokened (CI bounds, bound set `reach`): unreached in every run: `T4 tokened retry after the window executes again`, `T4 untokened transaction retry executes again`\n"),
        "over both runs only the other patterns' reaches stay unreached:\n{text}"
    );
}

#[test]
fn the_json_report_names_the_bound_set_and_the_unreached_reaches() {
    let output = oncecheck(&["check", "token", "--variant", "tokened", "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let reports = document["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["bound_set"], serde_json::Value::Null);
    assert_eq!(reports[1]["bound_set"], "reach");
    let t5 = |report: &serde_json::Value| {
        report["unreached_reaches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["id"] == "T5")
            .cloned()
    };
    assert_eq!(
        t5(&reports[0]),
        Some(
            serde_json::json!({"id": "T5", "partners": 2, "unreached": ["T5 an over-long token is rejected"]})
        )
    );
    assert_eq!(t5(&reports[1]), None);
}

/// Explicit bounds are one run: no bound set is added to what the user asked for.
#[test]
fn explicit_bounds_run_alone() {
    let output = oncecheck(&[
        "check",
        "token",
        "--variant",
        "tokened",
        "--bound",
        "clients=1",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["reports"].as_array().unwrap().len(), 1);
}
