//! The relay corpus replayed as scripts/replay-corpus replays it in CI (DynamoDB, a lost
//! response by a closed connection and by a stall, memory, SQLite), as a cargo test: the "replays" score of
//! `scripts/mutants store replays` (docs/mutants.md), which cargo-mutants can only run as a cargo
//! test. CI replays the same traces in `scripts/replay-corpus`, so this test is ignored in the
//! workspace run and run only there (`-- --ignored`): running it twice would cost CI time for
//! nothing.
//!
//! Needs ONCECHECK_DDB_ENDPOINT (moto) and fails, never skips, without it.

use std::process::Command;

mod support {
    pub mod corpus;
}

/// Replays `files` on `target` (with `extra` flags) and requires every replayable trace to
/// conform.
fn replay_all_on(target: &str, extra: &[&str], files: &[std::path::PathBuf]) {
    let output = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        // --fail-fast: a mutant's first divergence ends the run (each diverging trace may wait
        // out a bounded wait, and a whole corpus of them outlasts cargo-mutants' timeout).
        .args([
            "replay",
            "--only-replayable",
            "--jobs",
            "4",
            "--fail-fast",
            "--target",
            target,
        ])
        .args(extra)
        .args(files)
        .output()
        .expect("the oncecheck binary runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{target}: {text}");
    assert!(text.contains(" 0 diverged"), "{target}: {text}");
}

/// The corpus on every target CI replays it on (scripts/replay-corpus): DynamoDB through the
/// proxy (a lost response by a closed connection, then the kept traces that lose one again by a
/// stall), and the logical level of the memory and SQLite stores.
#[test]
#[ignore = "the replays score of scripts/mutants; CI replays the corpus in scripts/replay-corpus"]
fn the_relay_corpus_and_its_walks_replay_on_dynamodb_memory_and_sqlite_without_divergence() {
    let endpoint = std::env::var("ONCECHECK_DDB_ENDPOINT")
        .expect("ONCECHECK_DDB_ENDPOINT: this replay needs moto (scripts/services.sh)");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(support::corpus::kept_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".itf.json"))
        .collect();
    files.sort();
    let losing: Vec<std::path::PathBuf> = files
        .iter()
        .filter(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .contains("\"ResponseLost\"")
        })
        .cloned()
        .collect();
    assert!(
        losing.len() >= 20,
        "kept traces that lose a response: {}",
        losing.len()
    );
    files.extend(support::corpus::walks());
    let dynamodb = format!("dynamodb={endpoint}");
    replay_all_on(&dynamodb, &[], &files);
    replay_all_on(&dynamodb, &["--lose-by", "stall"], &losing);
    replay_all_on("memory", &[], &files);
    replay_all_on("sqlite", &[], &files);
}
