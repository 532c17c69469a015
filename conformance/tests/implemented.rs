//! The implemented-variant table (`src/implemented.rs`) is the one source: ARCHITECTURE.md
//! carries it verbatim, and CI (`scripts/replay-corpus`) replays every row's targets into
//! summaries that `oncecheck implemented --verify` checks against it.

use oncecheck_conformance::replay::implemented::{markdown_table, ROWS};

fn repository_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

#[test]
fn architecture_carries_the_table_verbatim() {
    let architecture = repository_file("ARCHITECTURE.md");
    let table = markdown_table();
    assert!(
        architecture.contains(&table),
        "ARCHITECTURE.md's implemented-variant table differs from src/implemented.rs; paste `oncecheck implemented`:\n{table}"
    );
    // Exactly one copy, so an old version left beside a new one is caught too.
    let header = table.lines().next().unwrap();
    assert_eq!(architecture.matches(header).count(), 1);
}

/// Where CI replays a target with a summary: the part of `scripts/replay-corpus` (its
/// `NAME_part` function) whose replay line names `--target TARGET` and writes `--summary-json`.
fn summarising_part(script: &str, target: &str) -> Option<String> {
    let flag = format!("--target {target} ");
    let mut part = None;
    // Continuation lines joined, so a command split over lines is one line.
    for line in script.replace("\\\n", " ").lines() {
        if let Some(name) = line.strip_suffix("_part() {") {
            part = Some(name.trim().to_string());
        }
        if line.contains("replay") && line.contains(&flag) && line.contains("--summary-json") {
            return part;
        }
    }
    None
}

/// Every target of every row is replayed in CI by a run that writes a summary, and the summaries
/// are verified against the table: a row without a replay in CI fails CI's own verification, and
/// a script that stops verifying fails here. scripts/test runs the relay and token parts of
/// `scripts/replay-corpus`; the middleware corpus is replayed by the workspace tests
/// (tests/replay_middleware.rs), which write their summaries where scripts/test verifies them.
#[test]
fn ci_replays_every_row_and_verifies_the_summaries() {
    let script = repository_file("scripts/replay-corpus");
    let test_command = repository_file("scripts/test");
    let middleware_tests = repository_file("conformance/tests/replay_middleware.rs");
    let ci_parts: Vec<&str> = test_command
        .lines()
        .find_map(|line| line.trim().strip_prefix("scripts/replay-corpus "))
        .expect("scripts/test runs scripts/replay-corpus")
        .split_whitespace()
        .collect();
    for row in ROWS {
        for target in row.targets {
            let part = summarising_part(&script, target.name).unwrap_or_else(|| {
                panic!(
                    "{}/{} on {}: no replay with --summary-json in scripts/replay-corpus",
                    row.model, row.variant, target.name
                )
            });
            let in_ci = ci_parts.contains(&part.as_str())
                || (part == "middleware"
                    && middleware_tests.contains("ONCECHECK_SUMMARY_DIR")
                    && middleware_tests.contains("--summary-json"));
            assert!(
                in_ci,
                "{}/{} on {}: its replay (part {part}) does not run in scripts/test with a summary",
                row.model, row.variant, target.name
            );
        }
    }
    let verifies = |text: &str| {
        text.lines().any(|line| {
            line.contains("implemented --verify") && !line.trim_start().starts_with('#')
        })
    };
    assert!(
        verifies(&script),
        "scripts/replay-corpus does not run `oncecheck implemented --verify`"
    );
    assert!(
        verifies(&test_command) && test_command.contains("export ONCECHECK_SUMMARY_DIR="),
        "scripts/test does not verify the summaries of its replays"
    );
}
