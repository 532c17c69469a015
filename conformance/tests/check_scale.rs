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
    // spilled is past a 1 MiB disk limit, long before the visited set fills the memory (three
    // writers: levels wide enough to fill the frontier first).
    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "fixed",
        "--bound",
        "new_writers=3",
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
        lines[0].contains("the disk limit (--disk-max-mb 1)"),
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
fn a_safety_only_run_decides_every_safety_property_and_says_liveness_was_not_checked() {
    let output = oncecheck(&["check", "relay", "--variant", "fixed", "--safety-only"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(stdout.contains("SAFETY ONLY"), "{stdout}");
    assert!(
        stdout.contains("the liveness properties were not checked (--safety-only): 2 undecided"),
        "{stdout}"
    );
    // The CI bounds and the variant's bound set `reach`, each for safety only.
    assert!(stdout.contains("2 checked for safety only"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(!stdout.contains("MISMATCH"), "{stdout}");

    let output = oncecheck(&[
        "check",
        "relay",
        "--variant",
        "fixed",
        "--safety-only",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let report = &document["reports"][0];
    assert_eq!(report["liveness"], serde_json::Value::Null);
    assert_eq!(report["complete"], false);
    let properties = report["properties"].as_array().unwrap();
    let verdicts = |kind: &str| -> Vec<&str> {
        properties
            .iter()
            .filter(|property| property["kind"] == kind)
            .map(|property| property["verdict"].as_str().unwrap())
            .collect()
    };
    assert!(verdicts("always").iter().all(|verdict| *verdict == "holds"));
    assert!(verdicts("always").len() >= 9);
    assert!(verdicts("sometimes").contains(&"reached"));
    let liveness: Vec<&str> = [verdicts("eventually"), verdicts("leads-to")].concat();
    assert_eq!(liveness, ["unknown", "unknown"]);
}

/// The progress lines of `oncecheck <arguments> --progress-secs <interval>` (stderr is a pipe),
/// which exits with `code`.
fn progress_lines(arguments: &[&str], interval: &str, code: i32) -> Vec<String> {
    let output = oncecheck(&[arguments, &["--progress-secs", interval]].concat());
    assert_eq!(output.status.code(), Some(code), "{}", text(&output));
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.starts_with("relay/fixed: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_check_off_a_terminal_prints_its_progress_as_lines() {
    // stderr is a pipe here, as in a CI log: no spinner, a line a second instead (the CI
    // bounds take several seconds in this build); `--progress-secs 0` prints none.
    let arguments = ["check", "relay", "--variant", "fixed", "--safety-only"];
    let lines = progress_lines(&arguments, "1", 1);
    assert!(!lines.is_empty(), "no progress line");
    for line in &lines {
        assert!(line.contains(" unique, "), "{line}");
        assert!(line.contains(" states/s, depth "), "{line}");
    }
    assert_eq!(progress_lines(&arguments, "0", 1), Vec::<String>::new());
}

#[test]
fn a_liveness_check_names_each_property_as_its_analysis_starts() {
    // The analysis after the exploration prints no counts of its own (minutes at a hundred
    // million states): one line per property says which is being decided, and over what, once
    // the run has taken the interval (the CI bounds take seconds in this build; a shorter run
    // prints none: the full-disk test in cli.rs reads its one line).
    let arguments = ["check", "relay", "--variant", "fixed"];
    let lines = progress_lines(&arguments, "1", 0);
    let deciding: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains(": deciding "))
        .collect();
    assert_eq!(deciding.len(), 2, "{lines:?}");
    assert!(
        deciding[0].starts_with("relay/fixed: deciding R6 no-wedge over "),
        "{}",
        deciding[0]
    );
    assert!(
        deciding[1].starts_with("relay/fixed: deciding R10 pull-progress over "),
        "{}",
        deciding[1]
    );
    for line in deciding {
        assert!(
            line.contains(" unique states and ") && line.contains(" edges ("),
            "{line}"
        );
    }
    assert!(progress_lines(&arguments, "0", 0).is_empty());
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

/// Runs `check ARGS --shard k/count --json` as `count` processes at once; answers the files.
fn run_shards(arguments: &[&str], count: usize, directory: &std::path::Path) -> Vec<String> {
    std::fs::create_dir_all(directory).unwrap();
    let children: Vec<(String, std::process::Child)> = (0..count)
        .map(|index| {
            let file = directory.join(format!("shard-{index}.json"));
            let out = std::fs::File::create(&file).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
                .args(arguments)
                .args(["--shard", &format!("{index}/{count}"), "--json"])
                .stdout(out)
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("a shard process starts");
            (file.to_str().unwrap().to_string(), child)
        })
        .collect();
    children
        .into_iter()
        .map(|(file, mut child)| {
            let status = child.wait().unwrap();
            assert_eq!(status.code(), Some(0), "shard {file} exited {status}");
            file
        })
        .collect()
}

fn merge(files: &[String], extra: &[&str]) -> Output {
    let mut arguments = vec!["merge"];
    arguments.extend(files.iter().map(String::as_str));
    arguments.extend(extra);
    oncecheck(&arguments)
}

/// What a run found: per property its verdict and trace.
fn findings(report: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
    report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|property| {
            (
                property["name"].as_str().unwrap().to_string(),
                property["verdict"].as_str().unwrap().to_string(),
                property["trace"].clone(),
            )
        })
        .collect()
}

#[test]
fn four_shard_processes_of_a_seeded_simulation_merge_into_the_single_run() {
    let directory = std::env::temp_dir().join(format!("check-shards-{}", std::process::id()));
    let run = [
        "check",
        "relay",
        "--variant",
        "counter-only",
        "--simulate",
        "--seed",
        "7",
        "--samples",
        "400",
        "--depth",
        "60",
    ];
    let single = oncecheck(&[&run[..], &["--json"]].concat());
    assert_eq!(single.status.code(), Some(0), "{}", text(&single));
    let single: serde_json::Value = serde_json::from_slice(&single.stdout).unwrap();
    let files = run_shards(&run, 4, &directory);
    let html = directory.join("html");
    let output = merge(&files, &["--json", "--html", html.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let merged: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let (one, other) = (&merged["reports"][0], &single["reports"][0]);
    assert_eq!(findings(one), findings(other));
    for key in [
        "search",
        "states",
        "max_depth",
        "action_coverage",
        "ok",
        "complete",
    ] {
        assert_eq!(one[key], other[key], "{key}");
    }
    assert!(one.get("shard").is_none());
    let page = std::fs::read_to_string(html.join("relay-counter-only.html")).unwrap();
    assert!(page.contains("R1 no-skip"));
    assert!(html.join("index.html").exists());
    // Three of the four shards are not the whole run.
    let missing = merge(&files[..3], &[]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        text(&missing).contains("shard 3/4 missing"),
        "{}",
        text(&missing)
    );
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn four_shard_processes_of_an_exhaustive_run_merge_into_its_verdicts() {
    let directory = std::env::temp_dir().join(format!("check-xshards-{}", std::process::id()));
    let run = ["check", "relay", "--variant", "mixed"];
    let single = oncecheck(&[&run[..], &["--json"]].concat());
    assert_eq!(single.status.code(), Some(0), "{}", text(&single));
    let single: serde_json::Value = serde_json::from_slice(&single.stdout).unwrap();
    let files = run_shards(&run, 4, &directory);
    let output = merge(&files, &["--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let merged: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let (one, other) = (&merged["reports"][0], &single["reports"][0]);
    let lengths = |report: &serde_json::Value| -> Vec<(String, String, usize)> {
        findings(report)
            .into_iter()
            .map(|(name, verdict, trace)| (name, verdict, trace.as_array().map_or(0, Vec::len)))
            .collect()
    };
    assert_eq!(lengths(one), lengths(other));
    assert_eq!(one["complete"], true);
    assert!(one["unique_states"].as_u64() >= other["unique_states"].as_u64());
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn symmetry_halves_the_relay_and_its_liveness_graph_with_the_same_verdicts() {
    let run = |extra: &[&str]| {
        let mut arguments = vec![
            "check",
            "relay",
            "--variant",
            "fixed",
            "--bound",
            "lost_responses_max=0",
            "--json",
        ];
        arguments.extend(extra);
        let output = oncecheck(&arguments);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
        let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        document["reports"][0].clone()
    };
    let (plain, reduced) = (run(&[]), run(&["--symmetry"]));
    assert_eq!(plain["unique_states"], 59_658);
    assert_eq!(reduced["unique_states"], 29_924);
    // R6 and R10 assume each writer and puller fair on its own: their liveness graph is the
    // per-actor quotient (specs/relay-append.md, "Symmetry").
    assert_eq!(plain["liveness"]["unique_states"], 59_658);
    assert_eq!(reduced["liveness"]["unique_states"], 29_924);
    let verdicts = |report: &serde_json::Value| -> Vec<(String, String)> {
        findings(report)
            .into_iter()
            .map(|(name, verdict, _)| (name, verdict))
            .collect()
    };
    assert_eq!(verdicts(&plain), verdicts(&reduced));
}
