//! The `oncecheck` command as a user runs it: verdicts and exit codes, and bad input answered
//! with a clear error and exit code 2 (DESIGN.md section 8). No server needed.

use std::path::PathBuf;
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

fn corpus_trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces/relay")
        .join(name)
}

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("oncecheck-cli-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

#[test]
fn check_json_prints_one_complete_object_per_variant_with_the_seed_trace() {
    let output = oncecheck(&["check", "relay", "--variant", "add-era", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1);
    let report: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    for field in [
        "model",
        "variant",
        "bounds",
        "states",
        "unique_states",
        "max_depth",
        "seconds",
        "complete",
        "properties",
    ] {
        assert!(report.get(field).is_some(), "missing {field}");
    }
    assert_eq!(report["complete"], true);
    let r1 = report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "R1" && p["kind"] == "always")
        .unwrap();
    assert_eq!(r1["verdict"], "violated");
    assert_eq!(r1["expected"], "violated");
    assert_eq!(r1["trace"].as_array().unwrap().len(), 5);
}

#[test]
fn unknown_model_variant_or_bound_exits_2_listing_the_valid_ones() {
    let output = oncecheck(&["check", "relais"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("valid models: relay, idempotency, token"),
        "{}",
        text(&output)
    );
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
    let original = std::fs::read_to_string(corpus_trace(
        "relay-add-era-counterexample-r1-no-skip.itf.json",
    ))
    .unwrap();
    let truncated = scratch("truncated.itf.json");
    std::fs::write(&truncated, &original[..original.len() / 2]).unwrap();
    let output = oncecheck(&["replay", truncated.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("truncated.itf.json: not JSON (line"),
        "{}",
        text(&output)
    );

    let mut document: serde_json::Value = serde_json::from_str(&original).unwrap();
    document["states"][2]["mbt::nondetPicks"]["writer"] = serde_json::json!({"#bigint": "9"});
    let edited = scratch("edited.itf.json");
    std::fs::write(&edited, document.to_string()).unwrap();
    let output = oncecheck(&["replay", edited.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("edited.itf.json: step 2, field `mbt::nondetPicks`"),
        "{}",
        text(&output)
    );
}

#[test]
fn a_trace_of_another_model_or_other_bounds_is_rejected_with_exit_2() {
    let original = std::fs::read_to_string(corpus_trace(
        "relay-add-era-counterexample-r1-no-skip.itf.json",
    ))
    .unwrap();
    let mut other_model: serde_json::Value = serde_json::from_str(&original).unwrap();
    other_model["#meta"]["model"] = serde_json::json!("token");
    let file = scratch("other-model.itf.json");
    std::fs::write(&file, other_model.to_string()).unwrap();
    let output = oncecheck(&["replay", file.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("traces of model `token` cannot be replayed"),
        "{}",
        text(&output)
    );

    let mut other_bounds: serde_json::Value = serde_json::from_str(&original).unwrap();
    let edited = other_bounds["#meta"]["bounds"]
        .as_str()
        .unwrap()
        .replace("add_era_writers=2", "add_era_writers=3");
    other_bounds["#meta"]["bounds"] = serde_json::json!(edited);
    let file = scratch("other-bounds.itf.json");
    std::fs::write(&file, other_bounds.to_string()).unwrap();
    let output = oncecheck(&["replay", file.to_str().unwrap(), "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("other-bounds.itf.json: step 0"),
        "{}",
        text(&output)
    );

    // A trace the target cannot show: ADD-era writers exist only in the DynamoDB store.
    let output = oncecheck(&[
        "replay",
        corpus_trace("relay-add-era-counterexample-r1-no-skip.itf.json")
            .to_str()
            .unwrap(),
        "--target",
        "memory",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("ADD-era writers"),
        "{}",
        text(&output)
    );
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
    assert!(
        files.len() >= 200,
        "the corpus holds at least 200 fixed traces"
    );
    let mut arguments = vec!["replay", "--target", "memory", "--only-replayable"];
    arguments.extend(files.iter().map(String::as_str));
    let output = oncecheck(&arguments);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains(" 0 diverged"));
}

#[test]
fn corpus_traces_are_itf_that_the_itf_crate_reads() {
    let text = std::fs::read_to_string(corpus_trace(
        "relay-counter-only-counterexample-r1-no-skip.itf.json",
    ))
    .unwrap();
    let trace: itf::Trace<serde_json::Value> = itf::trace_from_str(&text).expect("an ITF trace");
    assert_eq!(trace.meta.format.as_deref(), Some("ITF"));
    assert_eq!(
        trace.meta.other.get("property").map(String::as_str),
        Some("R1 no-skip")
    );
    assert_eq!(trace.states.len(), 8);
    assert!(trace.vars.contains(&"mbt::actionTaken".to_string()));
}

/// Asserts a failure is exactly one line on stderr, with no panic or backtrace.
fn one_clear_line(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one line on stderr: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert!(stderr.starts_with("oncecheck: "), "{stderr}");
    stderr
}

#[test]
fn check_help_lists_every_model_variant_and_bound_with_exit_codes_and_examples() {
    let output = oncecheck(&["check", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8(output.stdout).unwrap();
    // From the registry, not from a copy of it: every name the resolver accepts is listed.
    for line in [
        "relay  variants: add-era, counter-only, fixed, mixed",
        "idempotency  variants: pre-fix, fixed, fenced",
        "token  variants: tokened, tokenless, late-retry",
    ] {
        assert!(help.contains(line), "missing `{line}` in\n{help}");
    }
    assert!(
        help.contains("window") && help.contains("default 1 (add-era: 0"),
        "{help}"
    );
    assert!(
        help.contains("lease_expiries") && help.contains("range 0..=2"),
        "{help}"
    );
    assert!(
        help.contains("Exit codes:") && help.contains("  2  bad input"),
        "{help}"
    );
    assert!(
        help.contains("Examples:") && help.contains("oncecheck check relay --variant add-era"),
        "{help}"
    );
    for argument in [
        "--variant",
        "--bound <KEY=N>",
        "--threads",
        "--json",
        "--timeout-secs",
        "--diagrams <DIR>",
        "[MODEL]",
    ] {
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(argument))
            .unwrap_or_else(|| panic!("{argument} in\n{help}"));
        assert!(
            line.trim().len() > argument.len() + 4,
            "`{argument}` is documented: {line}"
        );
    }
}

#[test]
fn every_argument_of_every_command_is_documented() {
    for command in ["traces", "replay", "explore"] {
        let output = oncecheck(&[command, "--help"]);
        assert_eq!(output.status.code(), Some(0));
        let help = String::from_utf8(output.stdout).unwrap();
        let mut in_arguments = false;
        for line in help.lines() {
            if line.ends_with(':') && !line.starts_with(' ') {
                in_arguments = line == "Arguments:" || line == "Options:";
                continue;
            }
            let trimmed = line.trim_start();
            if in_arguments
                && (trimmed.starts_with('-') || trimmed.starts_with('<'))
                && line.starts_with("  ")
                && !line.starts_with("     ")
            {
                let (name, description) = trimmed.split_once("  ").unwrap_or((trimmed, ""));
                assert!(
                    !description.trim().is_empty(),
                    "`{command} {name}` has no help:\n{help}"
                );
            }
        }
    }
    let replay = text(&oncecheck(&["replay", "--help"]));
    assert!(
        replay.contains("0  every trace replayed and conformed"),
        "{replay}"
    );
    assert!(replay.contains("1  a trace diverged"), "{replay}");
    assert!(
        replay.contains("2  bad input") && replay.contains("cannot be reached"),
        "{replay}"
    );
}

#[test]
fn an_unreachable_replay_target_exits_2_not_the_divergence_code() {
    // A port nothing listens on: bind one and release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let trace = corpus_trace("relay-fixed-example-r7-reach-a-push-completes-uncontended.itf.json");
    let output = oncecheck(&[
        "replay",
        trace.to_str().unwrap(),
        "--target",
        &format!("dynamodb=http://127.0.0.1:{port}"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let line = one_clear_line(&output);
    assert!(line.contains("cannot reach"), "{line}");
}

#[test]
fn explore_on_a_busy_port_exits_2_with_one_line() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let output = oncecheck(&["explore", "relay", "--variant", "add-era", "--port", &port]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let line = one_clear_line(&output);
    assert!(
        line.contains(&format!("cannot serve the Explorer on 127.0.0.1:{port}"))
            && line.contains("--port"),
        "{line}"
    );
}

#[test]
fn an_unwritable_out_or_diagrams_directory_exits_2_with_one_line() {
    // A regular file where a directory is needed: unwritable even for root.
    let file = scratch("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let under_file = file.join("traces");
    let output = oncecheck(&[
        "traces",
        "relay",
        "--variant",
        "add-era",
        "--count",
        "1",
        "--out",
        under_file.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        one_clear_line(&output).contains("cannot write traces to"),
        "{}",
        text(&output)
    );

    let output = oncecheck(&[
        "check",
        "token",
        "--variant",
        "tokenless",
        "--diagrams",
        under_file.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        one_clear_line(&output).contains("cannot write diagrams to"),
        "{}",
        text(&output)
    );
}

#[test]
fn a_full_disk_while_writing_diagrams_exits_2_with_one_line() {
    // The directory takes files, but the diagram's own file is on a full device: /dev/full
    // answers every write with ENOSPC, the error a full disk gives.
    let directory = scratch("full-disk-diagrams");
    std::fs::create_dir_all(&directory).unwrap();
    let diagram = directory.join("relay-add-era-r1-no-skip.svg");
    let _ = std::fs::remove_file(&diagram);
    std::os::unix::fs::symlink("/dev/full", &diagram).unwrap();
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "add-era",
        "--diagrams",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let line = one_clear_line(&output);
    assert!(
        line.contains("cannot write diagrams to") && line.contains("No space left on device"),
        "{line}"
    );
}

// The covering set is chosen by coverage: one path per kind of step (action, handler outcome,
// finalize fault, await point of a cancellation), each loading back strictly.
#[test]
fn idempotency_traces_cover_every_outcome_fault_and_await_point_and_load_back() {
    let out = scratch("idempotency-fenced");
    let _ = std::fs::remove_dir_all(&out);
    let output = oncecheck(&[
        "traces",
        "idempotency",
        "--variant",
        "fenced",
        "--out",
        out.to_str().unwrap(),
        "--count",
        "80",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert!(names.len() >= 100, "{} traces", names.len());
    for wanted in [
        "counterexample-m1",
        "example-",
        "cover-",
        "handlerresponds-outcome-okunder",
        "handlerresponds-outcome-okoneover",
        "handlerresponds-outcome-failfarover",
        "handlerresponds-outcome-okerrorbeforecap",
        "handlerresponds-outcome-handlererror",
        "middlewarefinalizes-result-errorcommitted",
        "middlewarefinalizes-result-errornotcommitted",
        "middlewarefinalizes-result-norowmatched",
        "dropguardfinalizes-result-errorcommitted",
        "clientcancels-at-claim",
        "clientcancels-at-handler",
        "clientcancels-at-capture",
        "clientcancels-at-finalize-in-flight-commits-true",
        "clientcancels-at-tail",
    ] {
        assert!(
            names.iter().any(|name| name.contains(wanted)),
            "no trace covers `{wanted}`"
        );
    }
    for name in &names {
        let loaded = oncecheck_conformance::traces::load(&out.join(name))
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(matches!(
            loaded,
            oncecheck_conformance::traces::Loaded::Idempotency(_)
        ));
    }
    // Strict loading: an edited outcome is rejected naming file, step and field.
    let cover = names
        .iter()
        .find(|name| name.contains("outcome-okunder"))
        .unwrap();
    let mut document: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(cover)).unwrap()).unwrap();
    let states = document["states"].as_array().unwrap().len();
    let step = (1..states)
        .find(|index| document["states"][*index]["mbt::actionTaken"] == "HandlerResponds")
        .unwrap();
    document["states"][step]["mbt::nondetPicks"]["outcome"] = serde_json::json!("OkTwice");
    let edited = scratch("edited-idempotency.itf.json");
    std::fs::write(&edited, document.to_string()).unwrap();
    let error = oncecheck_conformance::traces::load(&edited)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains(&format!("edited-idempotency.itf.json: step {step}, field `mbt::nondetPicks`: `outcome` = \"OkTwice\" is none of")),
        "{error}"
    );
}
