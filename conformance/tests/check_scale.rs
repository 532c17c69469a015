//! `oncecheck check` past its memory: the frontier spills into `--spill-dir` and the run ends
//! only at `--disk-max-mb` (exit 1, one line naming the limit, verdicts `unknown`), leaving no
//! file behind. No server needed.

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

#[test]
fn a_spilled_frontier_stops_at_the_disk_limit_and_leaves_nothing_behind() {
    let spill_dir = std::env::temp_dir().join(format!("check-scale-{}", std::process::id()));
    // A 64 MiB memory limit gives the frontier 16 MiB in blocks of 2 MiB: the first block
    // spilled is past a 1 MiB disk limit, long before the visited set fills the memory.
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "fixed",
        "--memory-max-mb",
        "64",
        "--disk-max-mb",
        "1",
        "--spill-dir",
        spill_dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("stopped at"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("the disk limit of 1 MiB") && lines[0].contains("--disk-max-mb"),
        "{}",
        lines[0]
    );
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let report = &document["reports"][0];
    assert_eq!(report["stopped"]["limit"], "disk");
    assert_eq!(report["stopped"]["disk_bytes_max"], 1 << 20);
    assert_eq!(report["complete"], false);
    assert!(report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|property| property["kind"] == "always")
        .all(|property| property["verdict"] == "unknown"));
    let left: Vec<_> = std::fs::read_dir(&spill_dir).unwrap().collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    std::fs::remove_dir_all(&spill_dir).unwrap();
}

#[test]
fn an_unusable_spill_directory_is_bad_input() {
    let file = std::env::temp_dir().join(format!("check-scale-file-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "add-era",
        "--spill-dir",
        file.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("cannot spill the search frontier into"));
    std::fs::remove_file(&file).unwrap();
}
