//! The `oncecheck` command as a user runs it: verdicts and exit codes, and bad input answered
//! with a clear error and exit code 2 (DESIGN.md section 8). No server needed.

use std::path::PathBuf;
use std::process::{Command, Output};

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck")).args(arguments).output().expect("the oncecheck binary runs")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn corpus_trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay").join(name)
}

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("oncecheck-cli-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

#[test]
fn unknown_model_variant_or_bound_exits_2_listing_the_valid_ones() {
    let output = oncecheck(&["check", "relais"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("valid models: relay, idempotency, token"), "{}", text(&output));
    let output = oncecheck(&["check", "relay", "--variant", "fixd"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("valid variants: add-era, counter-only, fixed, mixed"));
    let output = oncecheck(&["check", "relay", "--bound", "writers=3"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("valid bounds: new_writers"));
    let output = oncecheck(&["check", "relay", "--bound", "pullers=99"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("valid range: 0..=3"));
}

#[test]
fn a_malformed_or_truncated_trace_is_rejected_naming_file_step_and_field() {
    let original = std::fs::read_to_string(corpus_trace("relay-add-era-counterexample-r1-no-skip.itf.json")).unwrap();
    let truncated = scratch("truncated.itf.json");
    std::fs::write(&truncated, &original[..original.len() / 2]).unwrap();
    let output = oncecheck(&["replay", truncated.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("truncated.itf.json: not JSON (line"), "{}", text(&output));

    let mut document: serde_json::Value = serde_json::from_str(&original).unwrap();
    document["states"][2]["mbt::nondetPicks"]["writer"] = serde_json::json!({"#bigint": "9"});
    let edited = scratch("edited.itf.json");
    std::fs::write(&edited, document.to_string()).unwrap();
    let output = oncecheck(&["replay", edited.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("edited.itf.json: step 2, field `mbt::nondetPicks`"), "{}", text(&output));
}

#[test]
fn a_trace_of_another_model_or_other_bounds_is_rejected_with_exit_2() {
    let original = std::fs::read_to_string(corpus_trace("relay-add-era-counterexample-r1-no-skip.itf.json")).unwrap();
    let mut other_model: serde_json::Value = serde_json::from_str(&original).unwrap();
    other_model["#meta"]["model"] = serde_json::json!("token");
    let file = scratch("other-model.itf.json");
    std::fs::write(&file, other_model.to_string()).unwrap();
    let output = oncecheck(&["replay", file.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("traces of model `token` cannot be replayed"), "{}", text(&output));

    let mut other_bounds: serde_json::Value = serde_json::from_str(&original).unwrap();
    let edited = other_bounds["#meta"]["bounds"].as_str().unwrap().replace("add_era_writers=2", "add_era_writers=3");
    other_bounds["#meta"]["bounds"] = serde_json::json!(edited);
    let file = scratch("other-bounds.itf.json");
    std::fs::write(&file, other_bounds.to_string()).unwrap();
    let output = oncecheck(&["replay", file.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("other-bounds.itf.json: step 0"), "{}", text(&output));

    // A trace the target cannot show: ADD-era writers exist only in the DynamoDB store.
    let output = oncecheck(&["replay", corpus_trace("relay-add-era-counterexample-r1-no-skip.itf.json").to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("ADD-era writers"), "{}", text(&output));
    let output = oncecheck(&["replay", "x.itf.json", "--target", "postgres"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("valid targets: memory, sqlite, dynamodb, dynamodb=URL"));
}

#[test]
fn the_fixed_corpus_replays_on_memory_without_divergence() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let mut files: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|entry| entry.unwrap().path().to_string_lossy().to_string())
        .filter(|path| path.contains("relay-fixed-"))
        .collect();
    files.sort();
    assert!(files.len() >= 200, "the corpus holds at least 200 fixed traces");
    let mut arguments = vec!["replay", "--target", "memory", "--only-replayable"];
    arguments.extend(files.iter().map(String::as_str));
    let output = oncecheck(&arguments);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains(" 0 diverged"));
}

#[test]
fn corpus_traces_are_itf_that_the_itf_crate_reads() {
    let text = std::fs::read_to_string(corpus_trace("relay-counter-only-counterexample-r1-no-skip.itf.json")).unwrap();
    let trace: itf::Trace<serde_json::Value> = itf::trace_from_str(&text).expect("an ITF trace");
    assert_eq!(trace.meta.format.as_deref(), Some("ITF"));
    assert_eq!(trace.meta.other.get("property").map(String::as_str), Some("R1 no-skip"));
    assert_eq!(trace.states.len(), 8);
    assert!(trace.vars.contains(&"mbt::actionTaken".to_string()));
}
