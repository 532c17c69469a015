//! The DynamoDB target of the replay driver against a real DynamoDB-compatible server (moto in
//! CI): corpus traces replay without divergence, concurrently too, and a deliberate change in the
//! real store is caught at the step it changes, with the command that replays it.
//!
//! Needs ONCECHECK_DDB_ENDPOINT and fails (never skips) without it:
//! `bash -c 'source scripts/services.sh; start_moto; cargo test -p oncecheck-conformance --test replay_dynamodb; services_down'`

use std::process::{Command, Output};

mod support {
    pub mod corpus;
}
use support::corpus::corpus_path;

fn endpoint() -> String {
    match std::env::var("ONCECHECK_DDB_ENDPOINT") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!("ONCECHECK_DDB_ENDPOINT is unset: these tests need a DynamoDB-compatible server and never skip"),
    }
}

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

fn corpus_trace(name: &str) -> String {
    corpus_path(name).to_string_lossy().into_owned()
}

#[test]
fn corpus_traces_replay_concurrently_without_divergence() {
    let target = format!("dynamodb={}", endpoint());
    let files: Vec<String> = (0..8)
        .map(|index| corpus_trace(&format!("relay-fixed-path-{index:04}.itf.json")))
        .collect();
    // Traces whose push deadline passes are not applicable (listed n/a): the real store's
    // deadline is wall time, which a replay does not drive yet.
    let mut arguments = vec![
        "replay",
        "--target",
        &target,
        "--jobs",
        "4",
        "--only-replayable",
    ];
    arguments.extend(files.iter().map(String::as_str));
    let output = oncecheck(&arguments);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let replayed = text(&output)
        .lines()
        .filter(|line| line.starts_with("ok "))
        .count();
    assert!(
        replayed >= 4,
        "most of these traces are replayable: {}",
        text(&output)
    );
    assert!(text(&output).contains(" 0 diverged"), "{}", text(&output));
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq
//# <= k.
// A deliberate store change: the store without its predecessor check sends rounds the model of
// the fixed build never sends. The replay must name the first such round and how to replay it.
#[test]
fn a_store_without_its_predecessor_check_diverges_at_the_round_that_carries_it() {
    let target = format!("dynamodb={}", endpoint());
    let trace = corpus_trace(
        "relay-fixed-example-r1-reach-an-op-becomes-visible-after-a-later-op-s-transactio.itf.json",
    );
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        &target,
        "--store-mutation",
        "no-predecessor-check",
    ]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(report.contains("FAIL divergence in "), "{report}");
    assert!(report.contains("expected: Update counter"), "{report}");
    assert!(
        report.contains("ConditionCheck op "),
        "the model's round carries the check: {report}"
    );
    assert!(report.contains(&format!("replay:   oncecheck replay {trace} --target {target} --store-mutation no-predecessor-check")), "{report}");

    // The same trace on the shipped store conforms.
    let output = oncecheck(&["replay", &trace, "--target", &target]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
}

//= specs/relay-append.md#R10
//# Every stored op is eventually received by every puller that keeps pulling.
// A lasso on the real store: counter-only's R10 counterexample (op 2 visible before op 1, the
// puller stores cursor 2 and pulls after it forever) replays its prefix and one turn of its
// cycle on the store in its counter-only configuration, which really does skip op 1; the driver
// checks the real log shows the same view after the turn as where the cycle starts. The
// shipped store cannot take it: its predecessor check parts from the trace at step 5.
#[test]
fn a_lasso_replays_its_prefix_and_one_turn_of_its_cycle() {
    let target = format!("dynamodb={}", endpoint());
    let out = std::env::temp_dir().join(format!("oncecheck-lasso-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let exported = oncecheck(&[
        "traces",
        "relay",
        "--variant",
        "counter-only",
        "--count",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(exported.status.success(), "{}", text(&exported));
    let lasso = out.join("relay-counter-only-counterexample-r10-pull-progress.itf.json");
    let lasso = lasso.to_str().unwrap();
    let output = oncecheck(&["replay", lasso, "--target", &target]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert!(
        report.contains("ok   ") && report.contains("(12 steps,"),
        "{report}"
    );

    let output = oncecheck(&[
        "replay",
        lasso,
        "--target",
        &target,
        "--store-variant",
        "fixed",
    ]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains(
            "at step 5: W1 sends TransactWriteItems{counter 1->2, claim b, put op 2 = b}"
        ),
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&out);
}
