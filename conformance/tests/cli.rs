//! The `oncecheck` command as a user runs it: verdicts and exit codes, and bad input answered
//! with a clear error and exit code 2 (README.md). No server needed.

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

/// The corpus's covering walks written out from the manifest (once per test process).
mod support {
    pub mod corpus;
}
use support::corpus::walks;

fn corpus_files() -> Vec<PathBuf> {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".itf.json"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_fixed_corpus_replays_on_memory_without_divergence() {
    let mut files: Vec<String> = corpus_files()
        .iter()
        .chain(walks().iter())
        .map(|path| path.to_string_lossy().to_string())
        .filter(|path| path.contains("relay-fixed-"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 200,
        "the corpus holds at least 200 fixed traces, walks included"
    );
    let mut arguments = vec!["replay", "--target", "memory", "--only-replayable"];
    arguments.extend(files.iter().map(String::as_str));
    let output = oncecheck(&arguments);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains(" 0 diverged"));
}

//= specs/relay-append.md#R3
//# A lost response is a lost round without a hint: the writer retries the same op in place, and a retry of a committed round answers the seq the op was stored at.
#[test]
fn the_kept_corpus_covers_every_lost_response_position_and_retry_outcome_the_bounds_reach() {
    // The covering paths are the model's (`oncecheck corpus` checks the files equal what it
    // generates): one per (position of the lost op in its push x outcome of the retry) pair
    // the breadth-first search over fixed's CI bounds meets. A deadline while op 1 is retried
    // is out of reach there: two lost rounds in a row spend the contention budget first.
    let mut covered: Vec<String> = corpus_files()
        .iter()
        .filter(|file| file.to_string_lossy().contains("-cover-"))
        .filter_map(|file| {
            let document: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
            let description = document["#meta"]["description"].as_str()?.to_string();
            let start = description.find("(retrying after a lost response at ")?;
            let end = description[start..].find(')')? + start;
            Some(description[start + 1..end].to_string())
        })
        .filter(|context| context.contains(": "))
        .collect();
    covered.sort();
    let outcomes = [
        "a lost round",
        "the op is answered with the seq it was stored at",
        "the push fails: ContentionExhausted",
    ];
    let mut expected: Vec<String> = ["op 1", "op 2"]
        .iter()
        .flat_map(|position| {
            outcomes.iter().map(move |outcome| {
                format!("retrying after a lost response at {position} of the push: {outcome}")
            })
        })
        .collect();
    expected.push(
        "retrying after a lost response at op 2 of the push: the push fails: DeadlineExceeded"
            .to_string(),
    );
    expected.sort();
    assert_eq!(covered, expected);
    // Every one of them loses its response on the way.
    let losing = corpus_files()
        .iter()
        .filter(|file| file.to_string_lossy().contains("-cover-"))
        .filter(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .contains("\"ResponseLost\"")
        })
        .count();
    assert!(
        losing >= expected.len(),
        "{losing} covering paths lose a response"
    );
}

#[test]
fn every_corpus_trace_is_itf_that_the_itf_crate_reads() {
    let files: Vec<PathBuf> = corpus_files()
        .into_iter()
        .chain(walks().iter().cloned())
        .collect();
    assert!(files.len() >= 200, "{} files", files.len());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        // The crate's documented entry point, over its own value type.
        let trace: itf::Trace<itf::Value> = itf::trace_from_str(&text)
            .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        assert_eq!(trace.meta.format.as_deref(), Some("ITF"));
        assert!(trace.vars.contains(&"mbt::nondetPicks".to_string()));
    }
    let text = std::fs::read_to_string(corpus_trace(
        "relay-counter-only-counterexample-r1-no-skip.itf.json",
    ))
    .unwrap();
    let trace: itf::Trace<itf::Value> = itf::trace_from_str(&text).unwrap();
    assert_eq!(
        trace.meta.other.get("property").map(String::as_str),
        Some("R1 no-skip")
    );
    assert_eq!(trace.states.len(), 9);
}

#[test]
fn the_corpus_is_small_and_a_disagreement_with_the_model_or_manifest_fails_the_check() {
    let bytes: u64 = corpus_files()
        .iter()
        .map(|file| std::fs::metadata(file).unwrap().len())
        .sum();
    assert!(
        bytes <= 2 * 1024 * 1024,
        "the corpus on disk is {bytes} bytes"
    );
    // A copy with one kept trace edited and the walk digest changed: the check lists exactly
    // those two (so everything else agrees with the model) and exits 1.
    let copy = scratch("corpus-copy");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).unwrap();
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
    }
    let edited = copy.join("relay-mixed-counterexample-r1-no-skip.itf.json");
    let content = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(
        &edited,
        content.replace("\"description\":\"", "\"description\":\"edited "),
    )
    .unwrap();
    let manifest = copy.join("walks.manifest.json");
    let content = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, content.replace("fnv1a64:", "fnv1a64:0")).unwrap();
    let output = oncecheck(&["corpus", "--dir", copy.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert_eq!(
        stdout
            .lines()
            .filter(|line| line.starts_with("FAIL "))
            .count(),
        2,
        "{stdout}"
    );
    assert!(stdout.contains("FAIL relay-mixed-counterexample-r1-no-skip.itf.json: differs from what the model generates"), "{stdout}");
    assert!(
        stdout.contains("FAIL walks.manifest.json: the 200 walks of fixed (seed 1) now digest to"),
        "{stdout}"
    );
    let line = one_clear_line(&output);
    assert!(
        line.contains(&format!(
            "oncecheck corpus --dir {} --write",
            copy.display()
        )),
        "{line}"
    );
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
    // Every model, variant and bound the resolver accepts is listed with its default and range.
    fn listed<M: oncecheck_model::check::ModelSpec>(help: &str)
    where
        M::State: Clone + std::fmt::Debug + std::hash::Hash + PartialEq + Send + Sync + 'static,
        M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
    {
        let line = format!("{}  variants: {}", M::NAME, M::VARIANTS.join(", "));
        assert!(help.contains(&line), "missing `{line}` in\n{help}");
        let section: Vec<&str> = help
            .lines()
            .skip_while(|row| !row.contains(&line))
            .take_while(|row| !row.trim().is_empty())
            .collect();
        for bound in M::BOUNDS {
            let row = section
                .iter()
                .find(|row| row.trim_start().starts_with(&format!("{} ", bound.key)))
                .unwrap_or_else(|| panic!("bound {} of {} missing in\n{help}", bound.key, M::NAME));
            assert!(row.contains(&format!("default {}", bound.default)), "{row}");
            assert!(
                row.contains(&format!(
                    "range {}..={}: {}",
                    bound.min, bound.max, bound.help
                )),
                "{row}"
            );
        }
    }
    listed::<oncecheck_model::relay::RelayModel>(&help);
    listed::<oncecheck_model::idempotency::IdempotencyModel>(&help);
    listed::<oncecheck_model::token::TokenModel>(&help);
    assert!(
        help.contains("default 1 (add-era: 0"),
        "per-variant defaults: {help}"
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

/// GET `path` from a local server, answering the body (None until the server answers).
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

/// The status bar says which protocol the Explorer shows, not the model's Rust type.
#[test]
fn the_explorers_status_names_the_protocol_and_its_variant() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut explorer = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(["explore", "relay", "--port", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut body = None;
    for _ in 0..100 {
        body = http_get(port, "/.status");
        if body.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    explorer.kill().unwrap();
    explorer.wait().unwrap();
    let body = body.expect("the Explorer answers");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["model"], "relay append (fixed)", "{body}");
    assert!(status["properties"]
        .as_array()
        .is_some_and(|properties| !properties.is_empty()));
}

#[test]
fn the_explorer_speaks_the_clis_words_and_shows_variant_bounds_and_expectations() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut explorer = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args([
            "explore",
            "relay",
            "--variant",
            "add-era",
            "--port",
            &port.to_string(),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut body = None;
    for _ in 0..100 {
        body = http_get(port, "/.states/0");
        if body.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    explorer.kill().unwrap();
    explorer.wait().unwrap();
    let body = body.expect("the Explorer answers");
    let steps: serde_json::Value = serde_json::from_str(&body).unwrap();
    let first = &steps[0];
    // The same words as `oncecheck check relay --variant add-era` prints for this step.
    assert_eq!(first["action"], "WriterAddsToCounter W1", "{body}");
    assert_eq!(
        first["outcome"], "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
        "{body}"
    );
    let svg = first["svg"].as_str().expect("a picture of the state");
    assert!(
        svg.contains("relay / add-era   bounds: add_era_writers=2"),
        "{svg}"
    );
    // The expectations in one line per verdict, not one grey line per property.
    assert!(
        svg.contains(
            "expected: violated R1 R5; holds R2 R3 R4 R6 R7 R8 R9; reached R1 R3 R6 R8; unreached"
        ),
        "{svg}"
    );
    assert_eq!(svg.matches("expected").count(), 1, "{svg}");
    // The state by role in the step text's words: no Rust Debug, no ITF.
    assert!(
        svg.contains("W1.phase: holds seq 1 from UpdateItem ADD")
            && svg.contains("table: counter: next_seq 1")
            && svg.contains("F1.watermark: seq 0"),
        "the state by role: {svg}"
    );
    for leak in ["Allocated", "{ ", "#bigint", "folders[", "Some("] {
        assert!(!svg.contains(leak), "`{leak}` in {svg}");
    }
    // A picture a browser shows without scrolling sideways: at most 100 characters a line.
    let width: usize = svg
        .split("width=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|width| width.parse().ok())
        .unwrap();
    assert!(width <= 100 * 8 + 24, "{width} px wide");
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
        let loaded = oncecheck_conformance::check::traces::load(&out.join(name))
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(matches!(
            loaded,
            oncecheck_conformance::check::traces::Loaded::Idempotency(_)
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
    document["states"][step]["mbt::nondetPicks"]["outcome"] =
        serde_json::json!({"tag": "Some", "value": "OkTwice"});
    let edited = scratch("edited-idempotency.itf.json");
    std::fs::write(&edited, document.to_string()).unwrap();
    let error = oncecheck_conformance::check::traces::load(&edited)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains(&format!("edited-idempotency.itf.json: step {step}, field `mbt::nondetPicks`: `outcome` = \"OkTwice\" is none of")),
        "{error}"
    );
}
