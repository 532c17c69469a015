//! What a first user meets at the command line (issue 20's list): each model's own defaults and
//! variants in the help, wording that says what a changed bound or a limit did, options refused
//! where they would be ignored, a corpus outside its place refused, a closed pipe ended quietly,
//! and JUnit reports a JUnit reader loads. No server needed (the memory replay target).

mod support {
    pub mod python;
}

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(arguments)
        .output()
        .expect("the oncecheck binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

fn text(output: &Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

fn scratch(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("oncecheck-cli-surface-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

/// Asserts a refusal: exit 2, exactly one line on stderr, no panic; answers the line.
fn refused(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{}", text(output));
    let line = stderr(output);
    assert_eq!(line.trim_end().lines().count(), 1, "one line: {line}");
    assert!(
        line.starts_with("oncecheck: ") || line.starts_with("error: "),
        "{line}"
    );
    assert!(!line.contains("panicked"), "{line}");
    line
}

/// A port something already listens on (kept open by the returned listener).
fn busy_port() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    (listener, port)
}

#[test]
fn explore_opens_every_model_at_its_own_design_variant() {
    // A busy port is checked after the variant is resolved: reaching that error proves the
    // default variant exists for the model (it was `fixed` for all three, which token lacks).
    let (_busy, port) = busy_port();
    for model in ["relay", "idempotency", "token"] {
        let output = oncecheck(&["explore", model, "--port", &port]);
        let line = refused(&output);
        assert!(
            line.contains("cannot serve the Explorer"),
            "{model}: {line}"
        );
    }
    let help = stdout(&oncecheck(&["explore", "--help"]));
    assert!(help.contains("token  variants: tokened, tokenless, late-retry (design: tokened)"));
    assert!(help.contains("idempotency renewed"), "{help}");
}

#[test]
fn every_command_help_lists_every_models_variants_and_its_exit_codes() {
    for command in ["traces", "explore"] {
        let help = stdout(&oncecheck(&[command, "--help"]));
        for (model, variants) in [
            ("relay", "add-era, counter-only, fixed, mixed"),
            ("idempotency", "pre-fix, fixed, fenced, renewed"),
            ("token", "tokened, tokenless, late-retry"),
        ] {
            assert!(
                help.contains(&format!("{model}  variants: {variants}")),
                "`{command} --help` lists {model}'s variants:\n{help}"
            );
        }
    }
    for command in ["check", "traces", "explore", "corpus", "replay", "probe"] {
        let help = stdout(&oncecheck(&[command, "--help"]));
        assert!(
            help.contains("Exit codes:\n  0  ") && help.contains("\n  2  bad input"),
            "`{command} --help` has its exit codes:\n{help}"
        );
    }
}

#[test]
fn a_bound_that_changes_an_expectation_is_worded_as_such() {
    // Without the visibility window counter-only loses nothing (README: `--bound window=0`
    // makes the bug disappear): the expectations, stated for the CI bounds, then differ.
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "counter-only",
        "--bound",
        "window=0",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = stdout(&output);
    assert!(
        report
            .lines()
            .next()
            .unwrap()
            .ends_with("DIFFERS AT THESE BOUNDS"),
        "{report}"
    );
    assert!(
        !report.contains("MISMATCH") && !report.contains("FAIL"),
        "{report}"
    );
    let r1 = report
        .lines()
        .find(|line| line.contains(" R1 no-skip "))
        .unwrap();
    assert!(
        r1.starts_with("  DIFF ") && r1.ends_with("holds     (expected violated at the CI bounds)"),
        "{r1}"
    );
    assert!(
        report.contains("4 verdicts differ from the expectations, which are stated for the CI bounds; these bounds differ: window=0 (CI: 1)"),
        "{report}"
    );
    assert!(
        report.lines().last().unwrap().starts_with(
            "summary: 1 variant checked: 0 as expected, 0 mismatched, 1 differing at changed bounds"
        ),
        "{report}"
    );
}

#[test]
fn a_run_stopped_by_a_limit_is_headed_stopped_with_one_sane_sentence() {
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "fixed",
        "--states-max",
        "1000",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = stdout(&output);
    assert!(
        report.lines().next().unwrap().ends_with("  STOPPED"),
        "{report}"
    );
    assert!(
        !report.contains("MISMATCH") && !report.contains("FAIL"),
        "{report}"
    );
    // The property rows (each says what was expected); the reach lines below them are not.
    let rows: Vec<&str> = report
        .lines()
        .filter(|line| line.contains("(expected "))
        .collect();
    assert!(
        report
            .contains("relay/fixed (CI bounds, bound set `reach`): no always holds in these runs"),
        "a stopped run claims no reach: {report}"
    );
    assert!(
        rows.iter().all(
            |row| (row.starts_with("  ?    ") && row.contains(" unknown "))
                || row.starts_with("  ok   ")
        ),
        "a row is decided as expected or marked undecided: {report}"
    );
    assert!(
        rows.iter().filter(|row| row.starts_with("  ?")).count() >= 11,
        "{report}"
    );
    // One sentence per stopped run: the CI bounds and `fixed`'s bound set `reach`.
    let lines = stderr(&output);
    assert_eq!(lines.trim_end().lines().count(), 2, "{lines}");
    for line in lines.trim_end().lines() {
        assert!(
            line.starts_with(
                "oncecheck: relay/fixed stopped at the state limit (--states-max 1000) with "
            ) && line.contains(" unique states known before the state space was exhausted")
                && !line.contains(" after "),
            "{line}"
        );
    }
}

#[test]
fn a_corpus_is_checked_or_written_only_where_it_is() {
    // Outside the repository root the default directory does not exist: bad input, and
    // `--write` creates nothing there.
    let elsewhere = scratch("elsewhere");
    let _ = std::fs::remove_dir_all(&elsewhere);
    std::fs::create_dir_all(&elsewhere).unwrap();
    for arguments in [&["corpus"][..], &["corpus", "--write"][..]] {
        let output = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
            .args(arguments)
            .current_dir(&elsewhere)
            .output()
            .unwrap();
        let line = refused(&output);
        assert!(
            line.contains("no corpus directory conformance/traces/relay")
                && line.contains("run from the repository root or pass --dir"),
            "{line}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written"
    );
    // A directory without a manifest is not a corpus.
    let bare = scratch("bare-corpus");
    std::fs::create_dir_all(&bare).unwrap();
    let output = oncecheck(&["corpus", "--dir", bare.to_str().unwrap(), "--write"]);
    assert!(refused(&output).contains("walks.manifest.json"));
    assert_eq!(
        std::fs::read_dir(&bare).unwrap().count(),
        0,
        "nothing written"
    );
    // The token corpus is a corpus too: its manifest (no walks) and files agree with the model.
    // (The relay and middleware corpora are checked by scripts/replay-corpus and tests/cli.rs.)
    let tokens = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/token");
    let output = oncecheck(&["corpus", "--dir", tokens.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(
        stdout(&output).contains("corpus agrees with the model: 64 kept traces"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn options_a_run_would_ignore_or_that_check_nothing_are_refused() {
    for arguments in [
        &["check", "relay", "--samples", "5"][..],
        &["check", "relay", "--depth", "5"][..],
        &["check", "relay", "--threads", "0"][..],
        &["check", "relay", "--simulate", "--samples", "0"][..],
        &["check", "relay", "--simulate", "--depth", "0"][..],
    ] {
        let output = oncecheck(arguments);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{arguments:?}: {}",
            text(&output)
        );
    }
    let line = refused(&oncecheck(&["check", "--bound", "window=0"]));
    assert!(
        line.contains("--bound window=0 needs a model")
            && line.contains("a bound of relay and token"),
        "{line}"
    );
    let trace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces/relay/relay-fixed-example-r7-reach-a-push-completes-uncontended.itf.json");
    let trace = trace.to_str().unwrap();
    for (target, option, value) in [
        ("memory", "--store-variant", "fixed"),
        ("sqlite", "--store-mutation", "no-predecessor-check"),
        ("tokened-dynamodb", "--store-variant", "fixed"),
        ("memory", "--lose-by", "stall"),
        ("middleware-sqlite", "--lose-by", "close"),
    ] {
        let line = refused(&oncecheck(&[
            "replay", trace, "--target", target, option, value,
        ]));
        assert!(
            line.contains(&format!("{option} does not apply to the {target} target")),
            "{line}"
        );
    }
}

#[test]
fn a_reader_that_leaves_ends_the_check_quietly_and_the_explorer_keeps_serving() {
    // The reader closes the pipe before the first line: the write fails at once.
    let mut child = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(["check", "relay", "--variant", "add-era"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert!(
        output.status.code() == Some(0) || output.status.signal() == Some(13),
        "ends as SIGPIPE ends a tool: {:?} {}",
        output.status,
        stderr(&output)
    );
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));

    // The Explorer's banner goes to a closed stderr: it still serves.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut explorer = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(["explore", "token", "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(explorer.stderr.take());
    let mut served = false;
    for _ in 0..100 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = write!(
                stream,
                "GET /.status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            served = answer.starts_with("HTTP/1.1 200");
            break;
        }
        if explorer.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let status = explorer.try_wait().unwrap();
    let _ = explorer.kill();
    let _ = explorer.wait();
    assert!(served, "the Explorer serves (it ended: {status:?})");
}

#[test]
fn a_check_ends_with_a_summary_and_says_what_it_wrote() {
    let diagrams = scratch("summary-diagrams");
    let output = oncecheck(&[
        "check",
        "token",
        "--variant",
        "tokenless",
        "--diagrams",
        diagrams.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(
        stdout(&output).lines().last().unwrap().starts_with(
            "summary: 1 variant checked: 1 as expected, 0 mismatched, 0 differing at changed bounds, 0 stopped by a limit; "
        ),
        "{}",
        stdout(&output)
    );
    let written = std::fs::read_dir(&diagrams).unwrap().count();
    assert!(written >= 1);
    assert!(
        stderr(&output).contains(&format!(
            "oncecheck: wrote {written} sequence diagrams to {}",
            diagrams.display()
        )),
        "{}",
        stderr(&output)
    );
}

/// Loads a JUnit file with junitparser and answers per suite: name, tests, failures, errors,
/// skipped, and the names of the failed cases.
fn junit_summary(file: &Path) -> Vec<serde_json::Value> {
    let script = r#"
import json, sys
from junitparser import JUnitXml, Failure, Error, Skipped
xml = JUnitXml.fromfile(sys.argv[1])
suites = []
for suite in xml:
    failed = [case.name for case in suite if any(isinstance(r, Failure) for r in case.result)]
    skipped = [case.name for case in suite if any(isinstance(r, Skipped) for r in case.result)]
    suites.append({"name": suite.name, "tests": suite.tests, "failures": suite.failures,
                   "errors": suite.errors, "skipped": suite.skipped, "failed": failed,
                   "skipped_cases": skipped, "cases": len(list(suite))})
print(json.dumps(suites))
"#;
    serde_json::from_str(&support::python::run(script, &[file.to_str().unwrap()])).unwrap()
}

#[test]
fn check_junit_loads_in_a_junit_reader_one_case_per_property() {
    let passed = scratch("check-passed.xml");
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "add-era",
        "--junit",
        passed.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let suites = junit_summary(&passed);
    assert_eq!(suites.len(), 1);
    let suite = &suites[0];
    assert_eq!(suite["name"], "relay/add-era");
    // 11 `always`, 16 `sometimes`, R6's `eventually` and R10's `leads-to` at the CI bounds, each
    // one test case.
    assert_eq!(
        (suite["tests"].as_u64(), suite["cases"].as_u64()),
        (Some(29), Some(29))
    );
    assert_eq!(
        (suite["failures"].as_u64(), suite["errors"].as_u64()),
        (Some(0), Some(0))
    );

    let differing = scratch("check-differing.xml");
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "counter-only",
        "--bound",
        "window=0",
        "--junit",
        differing.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let suite = &junit_summary(&differing)[0];
    assert_eq!(suite["failures"].as_u64(), Some(4));
    assert_eq!(
        suite["failed"],
        serde_json::json!([
            "R1 no-skip",
            "R1 reach: an op becomes visible after a later op's transaction was sent",
            "R6 reach: a round is lost to a conflict",
            "R10 pull-progress"
        ])
    );
}

#[test]
fn replay_junit_loads_in_a_junit_reader_one_case_per_trace() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let fixed = corpus.join("relay-fixed-example-r7-reach-a-push-completes-uncontended.itf.json");
    // ADD-era writers exist only in the DynamoDB store: not applicable on memory.
    let add_era = corpus.join("relay-add-era-counterexample-r1-no-skip.itf.json");
    let report = scratch("replay.xml");
    let output = oncecheck(&[
        "replay",
        fixed.to_str().unwrap(),
        add_era.to_str().unwrap(),
        "--target",
        "memory",
        "--only-replayable",
        "--junit",
        report.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let suites = junit_summary(&report);
    assert_eq!(suites.len(), 1, "{suites:?}");
    let suite = &suites[0];
    assert_eq!(suite["tests"].as_u64(), Some(2));
    assert_eq!(suite["failures"].as_u64(), Some(0));
    assert_eq!(
        suite["skipped_cases"],
        serde_json::json!(["relay-add-era-counterexample-r1-no-skip.itf.json"])
    );
}
