//! The implemented-variant table (`src/implemented.rs`) is the one source: ARCHITECTURE.md
//! carries it verbatim, and CI (`scripts/replay-corpus`) replays every row's targets into
//! summaries that `oncecheck implemented --verify` checks against it.

use oncecheck_conformance::implemented::{markdown_table, ROWS};

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

/// Every target of every row is replayed by a `scripts/replay-corpus` line that writes a summary,
/// and the summaries are verified against the table there: a row without a replay in CI fails
/// CI's own verification, and a script that stops verifying fails here.
#[test]
fn ci_replays_every_row_and_verifies_the_summaries() {
    let script = repository_file("scripts/replay-corpus");
    let summarised: Vec<&str> = script
        .lines()
        .filter(|line| line.contains("--summary-json") && line.contains("replay"))
        .collect();
    for row in ROWS {
        for target in row.targets {
            let flag = format!("--target {}", target.name);
            assert!(
                summarised.iter().any(|line| line.contains(&flag)),
                "{}/{} on {}: no replay with --summary-json in scripts/replay-corpus",
                row.model,
                row.variant,
                target.name
            );
        }
    }
    assert!(
        script.lines().any(
            |line| line.contains("implemented --verify") && !line.trim_start().starts_with('#')
        ),
        "scripts/replay-corpus does not run `oncecheck implemented --verify`"
    );
}
