//! `oncecheck check` as a tool reads it: the `--json` document's shape, the limits that stop a
//! run cleanly (exit 1, one line naming the limit, verdicts `unknown`), and `--simulate`
//! reproducible from its seed. No server needed.

use std::process::{Command, Output};

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(arguments)
        .output()
        .expect("the oncecheck binary runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn document(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("stdout is one JSON document ({error}): {}", text(output)))
}

fn natural(value: &serde_json::Value, what: &str) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{what} is not a non-negative integer: {value}"))
}

const VERDICTS: &[&str] = &["holds", "violated", "reached", "unreached", "unknown"];

/// Every field of one report, checked for its type and its consistency with the others.
fn assert_report_shape(report: &serde_json::Value) {
    let object = report.as_object().expect("a report is an object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "action_coverage",
            "bound_set",
            "bounds",
            "complete",
            "liveness",
            "max_depth",
            "model",
            "ok",
            "properties",
            "search",
            "seconds",
            "states",
            "states_per_depth",
            "stopped",
            "unique_states",
            "unreached_reaches",
            "variant",
        ]
    );
    assert!(report["bound_set"].is_null() || report["bound_set"].is_string());
    for entry in report["unreached_reaches"].as_array().expect("a list") {
        assert!(entry["id"].is_string() && entry["partners"].is_u64());
        assert!(entry["unreached"]
            .as_array()
            .is_some_and(|names| !names.is_empty()));
    }
    assert!(report["model"].is_string() && report["variant"].is_string());
    let bounds = report["bounds"].as_object().expect("bounds are an object");
    assert!(!bounds.is_empty());
    for (key, value) in bounds {
        natural(value, key);
    }
    assert!(report["ok"].is_boolean() && report["complete"].is_boolean());
    assert!(report["seconds"]
        .as_f64()
        .is_some_and(|seconds| seconds >= 0.0));
    let unique = natural(&report["unique_states"], "unique_states");
    assert!(natural(&report["states"], "states") >= unique);
    let mode = report["search"]["mode"].as_str().expect("search.mode");
    let per_depth: Vec<u64> = report["states_per_depth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| natural(n, "states_per_depth[]"))
        .collect();
    if mode == "exhaustive" {
        assert_eq!(per_depth.iter().sum::<u64>(), unique);
        assert_eq!(
            natural(&report["max_depth"], "max_depth") + 1,
            per_depth.len() as u64
        );
    } else {
        assert_eq!(mode, "simulation");
        assert!(per_depth.is_empty());
        for key in ["seed", "samples", "depth_max"] {
            natural(&report["search"][key], key);
        }
    }
    let coverage = report["action_coverage"]
        .as_object()
        .expect("action_coverage is an object");
    // Every action kind of the model, 0 included; at least one fired.
    assert_eq!(
        coverage
            .keys()
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>(),
        oncecheck_conformance::check::action_names::of(report["model"].as_str().unwrap())
            .iter()
            .copied()
            .collect()
    );
    assert!(coverage
        .iter()
        .any(|(kind, count)| natural(count, kind) > 0));
    assert!(report["stopped"].is_null() || report["stopped"]["limit"].is_string());
    // The liveness exploration's own graph: the model's reachable states (no reduction of the
    // checker's), so as many as the safety search's when both finished.
    if !report["liveness"].is_null() {
        let live = natural(
            &report["liveness"]["unique_states"],
            "liveness.unique_states",
        );
        assert!(natural(&report["liveness"]["edges"], "liveness.edges") + 1 >= live);
        if mode == "exhaustive" && report["complete"] == true {
            assert_eq!(live, unique);
        }
    }
    for property in report["properties"].as_array().expect("properties") {
        for key in ["id", "name"] {
            assert!(property[key].is_string(), "{key}");
        }
        let kind = property["kind"].as_str().unwrap();
        assert!(["always", "sometimes", "eventually", "leads-to"].contains(&kind));
        let liveness = kind == "eventually" || kind == "leads-to";
        let lasso_start = &property["lasso_start"];
        match lasso_start.as_u64() {
            Some(start) => {
                assert!(liveness, "only a liveness counterexample is a lasso");
                assert!((start as usize) < property["trace"].as_array().unwrap().len());
            }
            None => assert!(lasso_start.is_null()),
        }
        assert!(
            liveness || property["bound_cut_states"].is_null(),
            "bound cuts count for liveness only"
        );
        assert!(VERDICTS.contains(&property["expected"].as_str().unwrap()));
        assert!(VERDICTS.contains(&property["verdict"].as_str().unwrap()));
        if let Some(trace) = property["trace"].as_array() {
            for (index, step) in trace.iter().enumerate() {
                assert_eq!(natural(&step["step"], "step"), index as u64 + 1);
                assert!(step["action"].is_string() && step["words"].is_string());
            }
        } else {
            assert!(property["trace"].is_null());
        }
    }
}

#[test]
fn check_json_is_one_versioned_document_with_a_verdict_and_numeric_bounds() {
    let output = oncecheck(&["check", "relay", "--variant", "add-era", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let document = document(&output);
    let mut keys: Vec<&String> = document.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["ok", "reports", "schema"]);
    assert_eq!(document["schema"], 2);
    assert_eq!(document["ok"], true);
    let reports = document["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_report_shape(report);
    assert_eq!(
        (report["model"].as_str(), report["variant"].as_str()),
        (Some("relay"), Some("add-era"))
    );
    assert_eq!(report["bounds"]["add_era_writers"], 2);
    assert_eq!(report["search"]["mode"], "exhaustive");
    assert_eq!(report["complete"], true);
    assert_eq!(report["unique_states"], 1923);
    let r1 = report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "R1" && p["kind"] == "always")
        .unwrap();
    assert_eq!(
        (r1["verdict"].as_str(), r1["expected"].as_str()),
        (Some("violated"), Some("violated"))
    );
    assert_eq!(r1["trace"].as_array().unwrap().len(), 13);
}

#[test]
fn a_run_over_its_memory_limit_stops_with_unknown_exit_1_and_one_line() {
    // Two lost responses need millions of states and over a GiB; 48 MiB stops it early.
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "fixed",
        "--bound",
        "lost_responses_max=2",
        "--memory-max-mb",
        "48",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("memory limit"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("relay/fixed stopped at the memory limit (--memory-max-mb 48) with "),
        "{stderr}"
    );
    let document = document(&output);
    assert_eq!(document["ok"], false);
    let report = &document["reports"][0];
    assert_report_shape(report);
    assert_eq!(report["stopped"]["limit"], "memory");
    assert_eq!(report["complete"], false);
    // Stopped at its first check past the limit (an allocation about to be made counts), far
    // from the 4.3 million states.
    let resident = natural(&report["stopped"]["resident_bytes"], "resident_bytes");
    let growth = natural(&report["stopped"]["growth_bytes"], "growth_bytes");
    assert!(resident + growth >= 48 << 20, "{resident} + {growth}");
    assert!(resident < 256 << 20, "{resident}");
    assert!(natural(&report["unique_states"], "unique_states") < 4_000_000);
    for property in report["properties"].as_array().unwrap() {
        if property["kind"] == "always" {
            assert_eq!(property["verdict"], "unknown", "{}", property["name"]);
        }
    }
}

#[test]
fn a_run_over_its_state_limit_stops_the_same_way() {
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "fixed",
        "--states-max",
        "5000",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains("relay/fixed stopped at the state limit (--states-max 5000) with "),
        "{}",
        text(&output)
    );
    assert!(text(&output).contains("unknown"), "{}", text(&output));
}

#[test]
fn simulation_prints_its_seed_and_the_seed_reproduces_the_report() {
    let arguments = [
        "check",
        "relay",
        "--variant",
        "counter-only",
        "--simulate",
        "--seed",
        "11",
        "--samples",
        "300",
        "--depth",
        "60",
        "--json",
    ];
    let first = oncecheck(&arguments);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("seed 11"),
        "{}",
        text(&first)
    );
    let again = oncecheck(&arguments);
    let without_time = |output: &Output| {
        let mut document = document(output);
        for report in document["reports"].as_array_mut().unwrap() {
            assert_report_shape(report);
            report["seconds"] = serde_json::Value::Null;
        }
        document
    };
    let (first, again) = (without_time(&first), without_time(&again));
    assert_eq!(first, again);
    let report = &first["reports"][0];
    assert_eq!(report["search"]["seed"], 11);
    let r1 = report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "R1" && p["kind"] == "always")
        .unwrap();
    assert_eq!(r1["verdict"], "violated");
    assert!(report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["verdict"] != "holds"));
}
