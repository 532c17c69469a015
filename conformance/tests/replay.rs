//! The replay driver as a user meets it, on the targets that need no server (memory, SQLite):
//! bad input stops the run with exit 2, one clear line and nothing replayed; a trace the target
//! cannot show is "not applicable", never "ok"; concurrent jobs answer what one job answers; and
//! the comparison after set-up and after every step catches a real state that differs.
//! The DynamoDB target is exercised on moto by `tests/replay_dynamodb.rs`.

use oncecheck_conformance::replay::driver::{drive, ReplayError};
use oncecheck_conformance::replay::log::LogTarget;
use oncecheck_store::{MemoryStore, NewOp, OpStore};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support {
    pub mod corpus;
}
use std::sync::Arc;
use support::corpus::{corpus_path, walks_dir};

fn oncecheck(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .args(arguments)
        .output()
        .expect("the oncecheck binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn corpus_trace(name: &str) -> PathBuf {
    corpus_path(name)
}

fn scratch(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("oncecheck-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

fn corpus(filter: &str) -> Vec<String> {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let mut files: Vec<String> = std::fs::read_dir(directory)
        .unwrap()
        .chain(std::fs::read_dir(walks_dir()).unwrap())
        .map(|entry| entry.unwrap().path().to_string_lossy().into_owned())
        .filter(|path| path.ends_with(".itf.json"))
        .filter(|path| path.contains(filter))
        .collect();
    files.sort();
    files
}

#[test]
fn a_trace_edited_to_an_action_the_model_cannot_take_stops_the_run_before_anything_replays() {
    let original = std::fs::read_to_string(corpus_trace("relay-fixed-path-0001.itf.json")).unwrap();
    let mut document: serde_json::Value = serde_json::from_str(&original).unwrap();
    // At step 1 no writer has sent a round yet, so none can receive a response.
    document["states"][1]["mbt::actionTaken"] = serde_json::json!("WriterReceivesResponse");
    let none = serde_json::json!({"tag": "None", "value": []});
    document["states"][1]["mbt::nondetPicks"] = serde_json::json!({
        "writer": {"tag": "Some", "value": {"#bigint": "0"}},
        "puller": none, "key": none, "seq": none,
    });
    let edited = scratch("cannot-take.itf.json");
    std::fs::write(&edited, document.to_string()).unwrap();
    let good = corpus_trace("relay-fixed-path-0002.itf.json");
    let output = oncecheck(&[
        "replay",
        good.to_str().unwrap(),
        edited.to_str().unwrap(),
        "--target",
        "memory",
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("cannot-take.itf.json: step 1, field `mbt::actionTaken`: WriterReceivesResponse { writer: 0 } is not enabled"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("nothing was replayed"),
        "{}",
        stderr(&output)
    );
    assert!(
        !stdout(&output).contains("ok "),
        "the good trace must not run either: {}",
        stdout(&output)
    );
}

#[test]
fn an_unparsable_or_unreachable_endpoint_is_bad_input_on_one_line() {
    let trace = corpus_trace("relay-fixed-path-0001.itf.json");
    for (target, expected) in [
        ("dynamodb=notaurl", "target `dynamodb=notaurl`: `notaurl` is not an endpoint URL"),
        ("dynamodb=", "target `dynamodb=`: `` is not an endpoint URL"),
        ("dynamodb=http://:8000", "is not an endpoint URL"),
        // Port 1 on loopback: nothing listens there.
        ("dynamodb=http://127.0.0.1:1", "cannot reach the dynamodb=http://127.0.0.1:1 target: DynamoDB at http://127.0.0.1:1 does not answer"),
    ] {
        let output = oncecheck(&["replay", trace.to_str().unwrap(), "--target", target]);
        assert_eq!(output.status.code(), Some(2), "{target}: {}", stderr(&output));
        let errors = stderr(&output);
        assert_eq!(errors.lines().count(), 1, "{target}: one line, no backtrace: {errors}");
        assert!(errors.contains(expected), "{target}: {errors}");
        assert_eq!(stdout(&output), "", "{target}: nothing replayed");
    }
}

#[test]
fn a_trace_of_another_model_is_refused_by_the_target_that_serves_relay() {
    let original = std::fs::read_to_string(corpus_trace("relay-fixed-path-0001.itf.json")).unwrap();
    let mut document: serde_json::Value = serde_json::from_str(&original).unwrap();
    document["#meta"]["model"] = serde_json::json!("idempotency");
    let file = scratch("idempotency-at-relay.itf.json");
    std::fs::write(&file, document.to_string()).unwrap();
    for target in ["memory", "sqlite"] {
        let output = oncecheck(&["replay", file.to_str().unwrap(), "--target", target]);
        assert_eq!(output.status.code(), Some(2));
        assert!(
            stderr(&output).contains(&format!("traces of model `idempotency` cannot be replayed at target `{target}`, which replays `relay` traces")),
            "{}",
            stderr(&output)
        );
    }
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq
//# <= k.
// The counter-only counterexample of R1 depends on what the puller saw through the window; a
// locked log cannot show that, so the memory target must not call it conforming.
#[test]
fn a_counterexample_that_needs_the_window_is_not_applicable_on_a_locked_log_never_ok() {
    let trace = corpus_trace("relay-counter-only-counterexample-r1-no-skip.itf.json");
    for target in ["memory", "sqlite"] {
        let output = oncecheck(&["replay", trace.to_str().unwrap(), "--target", target]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{target}: {}{}",
            stdout(&output),
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("not applicable: at step ")
                && stderr(&output)
                    .contains("through the visibility window, where a locked log answers"),
            "{target}: {}",
            stderr(&output)
        );
        assert!(
            !stdout(&output).contains("ok "),
            "{target}: {}",
            stdout(&output)
        );
        let output = oncecheck(&[
            "replay",
            trace.to_str().unwrap(),
            "--target",
            target,
            "--only-replayable",
        ]);
        assert_eq!(output.status.code(), Some(0));
        assert!(stdout(&output).contains("n/a  "), "{}", stdout(&output));
        assert!(
            stdout(&output).contains("replayed 0 of 1 traces"),
            "{}",
            stdout(&output)
        );
    }
}

#[test]
fn concurrent_jobs_replay_the_corpus_with_the_same_lines_in_the_same_order() {
    let files = corpus("relay-");
    assert!(files.len() >= 200, "the regression corpus: {}", files.len());
    let run = |jobs: &str| {
        let mut arguments = vec![
            "replay",
            "--target",
            "sqlite",
            "--only-replayable",
            "--jobs",
            jobs,
        ];
        arguments.extend(files.iter().map(String::as_str));
        let output = oncecheck(&arguments);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}{}",
            stdout(&output),
            stderr(&output)
        );
        stdout(&output)
    };
    let one = run("1");
    let four = run("4");
    // One line per trace; the summary and the transition-coverage lines after it are not.
    let per_trace = |text: &str| {
        text.lines()
            .filter(|line| {
                ["ok ", "n/a ", "FAIL "]
                    .iter()
                    .any(|word| line.starts_with(word))
            })
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(per_trace(&one), per_trace(&four));
    assert_eq!(per_trace(&one).len(), files.len());
    let summary = |text: &str| {
        text.lines()
            .find(|line| line.starts_with("replayed "))
            .unwrap_or_default()
            .replace(" (1 at a time)", "")
            .replace(" (4 at a time)", "")
    };
    let without_seconds = |line: String| {
        line.split(", ")
            .filter(|part| {
                !part.ends_with('s')
                    || part.ends_with("requests")
                    || part.ends_with("responses")
                    || part.ends_with("steps")
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert_eq!(
        without_seconds(summary(&one)),
        without_seconds(summary(&four))
    );
    assert!(
        four.contains(" 0 diverged, 0 environment failures, 0 rejected, "),
        "{four}"
    );
    assert!(
        per_trace(&four)
            .iter()
            .filter(|line| line.starts_with("ok "))
            .count()
            >= 40,
        "{four}"
    );
    // An unknown way to lose a response is bad input where the option applies (the endpoint is
    // never contacted: the flags are read first) ...
    let output = oncecheck(&[
        "replay",
        &files[0],
        "--target",
        "dynamodb=http://127.0.0.1:9",
        "--lose-by",
        "sometimes",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("unknown way to lose a response `sometimes`; valid: close, stall")
    );
    // ... and refused where it does not: memory loses no responses.
    let output = oncecheck(&[
        "replay",
        &files[0],
        "--target",
        "memory",
        "--lose-by",
        "close",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--lose-by does not apply to the memory target"));
    let output = oncecheck(&["replay", &files[0], "--target", "memory", "--jobs", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--jobs 0: valid range 1..=64"));
}

async fn replay_on(
    store: Arc<MemoryStore>,
    file: &Path,
    stream: &str,
) -> Result<usize, ReplayError> {
    let trace = oncecheck_conformance::replay::driver::load_for::<
        oncecheck_model::relay::RelayModel,
    >(file, "memory")?;
    drive(
        file,
        &trace,
        LogTarget::new(store, "memory", stream.to_string()),
    )
    .await
    .map(|stats| stats.steps)
}

#[tokio::test]
async fn the_driver_compares_the_real_state_after_set_up_and_after_every_step() {
    let file = corpus_trace("relay-fixed-example-r3-reach-a-re-push-finds-its-own-claim.itf.json");
    let steps =
        oncecheck_conformance::replay::driver::load_for::<oncecheck_model::relay::RelayModel>(
            &file, "memory",
        )
        .unwrap()
        .path
        .len()
            - 1;
    let store = Arc::new(MemoryStore::new());
    assert_eq!(
        replay_on(store.clone(), &file, "clean").await.unwrap(),
        steps
    );

    // A deliberate difference in the real state before the trace starts: an op the model's
    // initial table does not hold. The comparison after set-up names it at step 0.
    store
        .put_legacy_op("dirty", 9, &NewOp::new("stray", b"x".to_vec()))
        .await
        .unwrap();
    let Err(ReplayError::Diverged(divergence)) = replay_on(store.clone(), &file, "dirty").await
    else {
        panic!("a stray op must diverge");
    };
    assert_eq!(divergence.step, 0);
    assert_eq!(divergence.action, "set-up of the initial state");
    // Named with its payload, which is not the one a replay gives an op of that name.
    assert!(
        divergence
            .actual
            .contains("(9, \"stray with a payload of 1 bytes, not its 16"),
        "{divergence}"
    );
    assert!(
        divergence
            .to_string()
            .contains("replay:   oncecheck replay"),
        "{divergence}"
    );
}
