//! A liveness counterexample as a person and a tool see it: the lasso in the text report (prefix,
//! `cycle:`, the repeated steps), in `--json` (`kind`, `lasso_start`), in the HTML page and its
//! sequence diagram (the cycle marked), and in ITF (`loop`, read back by the `itf` crate and by
//! the strict loader, which refuses a loop that does not close).
//!
//! The lasso: relay `counter-only`, R10 pull-progress — op 2 becomes visible before op 1, the
//! puller stores cursor 2, then pulls after it forever (11 steps, then a cycle of one).

use oncecheck_model::relay::RelayModel;
use oncecheck_model::trace::from_itf;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(arguments)
        .output()
        .expect("the oncecheck binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The directory holding this run's exported traces and HTML report (made once).
fn outputs() -> &'static PathBuf {
    static OUTPUTS: OnceLock<PathBuf> = OnceLock::new();
    OUTPUTS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("oncecheck-lasso-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let traces = root.join("traces");
        let html = root.join("html");
        let output = oncecheck(&[
            "traces",
            "relay",
            "--variant",
            "counter-only",
            "--count",
            "0",
            "--out",
            traces.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{output:?}");
        let output = oncecheck(&[
            "check",
            "relay",
            "--variant",
            "counter-only",
            "--html",
            html.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{output:?}");
        root
    })
}

fn lasso_file() -> PathBuf {
    outputs()
        .join("traces")
        .join("relay-counter-only-counterexample-r10-pull-progress.itf.json")
}

#[test]
fn the_text_report_prints_the_prefix_then_the_cycle() {
    let output = oncecheck(&["check", "relay", "--variant", "counter-only"]);
    assert!(output.status.success());
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    let heading = lines
        .iter()
        .position(|line| line.starts_with("  shortest lasso for R10 pull-progress (violated)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        &lines[heading + 11..heading + 14],
        [
            "     11. op 1 applied (op_id a)",
            "    cycle: (from the state after step 11, repeated forever)",
            "     12. P1 Query seq>2 limit 2 -> []; P1 stores cursor 2",
        ]
    );
    assert!(text.contains("  ok   eventually R6 no-wedge"), "{text}");
}

#[test]
fn the_json_document_names_the_kind_and_where_the_lasso_starts() {
    let output = oncecheck(&["check", "relay", "--variant", "counter-only", "--json"]);
    assert!(output.status.success());
    let document: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let report = &document["reports"][0];
    let property = |name: &str| {
        report["properties"]
            .as_array()
            .unwrap()
            .iter()
            .find(|property| property["name"] == name)
            .unwrap()
            .clone()
    };
    let r10 = property("R10 pull-progress");
    assert_eq!(r10["kind"], "leads-to");
    assert_eq!(r10["verdict"], "violated");
    assert_eq!(r10["lasso_start"], 11);
    assert_eq!(r10["trace"].as_array().unwrap().len(), 12);
    let r6 = property("R6 no-wedge");
    assert_eq!(r6["kind"], "eventually");
    assert_eq!(r6["verdict"], "holds");
    assert_eq!(r6["lasso_start"], serde_json::Value::Null);
    assert_eq!(r6["bound_cut_states"], 0);
    let r1 = property("R1 no-skip");
    assert_eq!(r1["lasso_start"], serde_json::Value::Null);
    assert_eq!(r1["bound_cut_states"], serde_json::Value::Null);
    assert_eq!(report["liveness"]["unique_states"], report["unique_states"]);
}

#[test]
fn the_html_page_and_its_diagram_mark_the_cycle() {
    let page =
        std::fs::read_to_string(outputs().join("html").join("relay-counter-only.html")).unwrap();
    assert!(
        page.contains("The shortest lasso: 11 steps, then a cycle of 1 steps repeated forever"),
        "{page}"
    );
    assert!(page.contains("<tr class=\"cycle-start\">"));
    assert!(page.contains(
        "<b>cycle:</b> the steps below repeat forever; the last returns to the state after step 11"
    ));
    assert_eq!(page.matches("<tr class=\"cycle\">").count(), 1);
    assert!(page.contains("class=\"cycle-return\""));
    assert!(page.contains("^ cycle: step 12 repeats forever (back to the state after step 11)"));
}

#[test]
fn the_itf_trace_carries_its_loop_and_loads_back() {
    let text = std::fs::read_to_string(lasso_file()).unwrap();
    let trace = itf::trace_from_str::<itf::Value>(&text).expect("the itf crate reads a lasso");
    assert_eq!(trace.loop_index, Some(11));
    assert_eq!(trace.states.len(), 13);
    let document: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(document["#meta"]["loop"], "11");
    assert_eq!(document["#meta"]["property"], "R10 pull-progress");
    let loaded = from_itf::<RelayModel>(&document).unwrap();
    assert_eq!(loaded.lasso_start, Some(11));
    assert_eq!(loaded.path[11].0, loaded.path[12].0);

    let mut not_closing = document.clone();
    not_closing["loop"] = serde_json::json!(3);
    not_closing["#meta"]["loop"] = serde_json::json!("3");
    let error = from_itf::<RelayModel>(&not_closing).unwrap_err();
    assert_eq!((error.step, error.field.as_str()), (Some(12), "loop"));
    assert!(error.message.contains("does not close"), "{error}");

    let mut disagreeing = document.clone();
    disagreeing["#meta"]["loop"] = serde_json::json!("10");
    let error = from_itf::<RelayModel>(&disagreeing).unwrap_err();
    assert_eq!(error.field, "#meta.loop");

    let mut past_the_end = document;
    past_the_end["loop"] = serde_json::json!(12);
    past_the_end["#meta"]["loop"] = serde_json::json!("12");
    assert_eq!(
        from_itf::<RelayModel>(&past_the_end).unwrap_err().field,
        "loop"
    );
}
