//! The middleware targets as a user runs them: the idempotency corpus (conformance/traces/
//! middleware/: kept counterexamples and examples, and the walks its manifest describes)
//! replayed against the layer from impl/idempotency on SQLite and on PostgreSQL
//! (ONCECHECK_PG_URL, started by scripts/services.sh) with no divergence; the pre-fix
//! counterexamples reproducing their bug on the pre-fix layer and parting from the shipped one
//! at the step the fix changes; bad input answered with exit 2 and one line.

use std::path::{Path, PathBuf};
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

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/middleware")
}

fn kept(name: &str) -> String {
    corpus_dir().join(name).to_string_lossy().into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!(
        "oncecheck-replay-middleware-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

/// The kept traces and the manifest's walks (written once per test binary), sorted.
fn corpus_files() -> &'static Vec<String> {
    static FILES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let walks = scratch("walks");
        let output = oncecheck(&[
            "corpus",
            "--dir",
            &corpus_dir().to_string_lossy(),
            "--walks-out",
            &walks.to_string_lossy(),
        ]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
        let mut files: Vec<String> = [corpus_dir(), walks]
            .iter()
            .flat_map(|directory| std::fs::read_dir(directory).unwrap())
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_string_lossy().ends_with(".itf.json"))
            .map(|path| path.to_string_lossy().into_owned())
            .collect();
        files.sort();
        files
    })
}

/// PostgreSQL of the test command; these tests need a real one.
fn postgres_target() -> String {
    let url = std::env::var("ONCECHECK_PG_URL").unwrap_or_else(|_| {
        panic!(
            "ONCECHECK_PG_URL is not set: these tests need a real PostgreSQL. Run them with \
             `source scripts/services.sh && services_up` first (scripts/test does)"
        )
    });
    format!("middleware-postgres={url}")
}

/// The summary's count of replayed traces; asserts no divergence and no environment failure.
fn replayed_without_divergence(output: &Output) -> usize {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(output));
    // The summary line, before the transition-coverage lines that follow it.
    let summary = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with("replayed "))
        .unwrap_or_default();
    assert!(
        summary.contains(" 0 diverged, 0 environment failures, 0 rejected"),
        "{summary}"
    );
    summary
        .strip_prefix("replayed ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("a summary line: {summary}"))
}

/// Replays `files` of the corpus on `target`. With `ONCECHECK_SUMMARY_DIR` set (scripts/test sets
/// it), the run's summary is written there as `TARGET-KIND.json`, for `oncecheck implemented
/// --verify` after the tests: these replays are the implemented-variant table's middleware rows.
fn replay_corpus_files(target: &str, files: impl Iterator<Item = String>) -> usize {
    let mut arguments = vec!["replay".to_string()];
    arguments.extend(files);
    // --fail-fast: a passing run is the same; a failing one (a mutant of scripts/mutants)
    // ends at its first divergence instead of after every trace. Eight at a time: the replays
    // mostly wait (lost responses, the layer's bounded waits); on the memory store the corpus
    // took 52 s with 4 and 37 s with 12 on the idle machine.
    arguments.extend(
        [
            "--target",
            target,
            "--only-replayable",
            "--jobs",
            "8",
            "--fail-fast",
        ]
        .map(String::from),
    );
    if let Ok(directory) = std::env::var("ONCECHECK_SUMMARY_DIR") {
        let kind = target.split('=').next().unwrap_or(target);
        let file = Path::new(&directory).join(format!("{kind}.json"));
        arguments.extend([
            "--summary-json".to_string(),
            file.to_string_lossy().into_owned(),
        ]);
    }
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let output = oncecheck(&arguments);
    replayed_without_divergence(&output)
}

/// The corpus `target` replays: every kept trace, and the walks written at the bounds of their
/// variant's row on `target` in the implemented-variant table (its database's claim, its
/// process faults), or of a variant with no row (`fixed`). A walk of another row's bounds would
/// be replayed for no row: the memory store's walks without a process fault on PostgreSQL, whose
/// rows have one, cost CI a minute and verify nothing more.
fn files_of(target: &str) -> impl Iterator<Item = String> + '_ {
    corpus_files()
        .iter()
        .filter(move |file| walk_of_a_row_on(target, file))
        .cloned()
}

fn walk_of_a_row_on(target: &str, file: &str) -> bool {
    use oncecheck_conformance::check::traces::walk_marks;
    use oncecheck_conformance::replay::implemented::ROWS;
    let name = Path::new(file)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some((row, marks)) = ROWS
        .iter()
        .filter(|row| row.model == "idempotency")
        .find_map(|row| walk_marks(&name, row.variant).map(|marks| (row, marks)))
    else {
        return true;
    };
    let Some(row_target) = row
        .targets
        .iter()
        .find(|row_target| row_target.name == target)
    else {
        return false;
    };
    let bound = |key: &str| {
        row_target
            .bounds
            .iter()
            .find(|(bound, _)| *bound == key)
            .map_or(0, |(_, value)| *value)
    };
    marks.sqlite == (bound("sqlite") == 1) && marks.process_faults == (bound("process_faults") > 0)
}

#[test]
fn the_middleware_corpus_replays_on_sqlite_without_divergence() {
    let replayed = replay_corpus_files("middleware-sqlite", files_of("middleware-sqlite"));
    println!("middleware-sqlite: {replayed} traces replayed");
    assert!(replayed >= 150, "{replayed} traces replayed on SQLite");
}

#[test]
fn the_middleware_corpus_replays_on_postgres_without_divergence() {
    let replayed = replay_corpus_files(&postgres_target(), files_of("middleware-postgres"));
    println!("middleware-postgres: {replayed} traces replayed");
    assert!(replayed >= 150, "{replayed} traces replayed on PostgreSQL");
}

// The layer over `MemoryStore`, the store of its loom and shuttle tests: they stand for the SQL
// stores only if it keeps their rules, so it replays the same corpus (the traces of a one-call
// claim; not `atomic`, which needs an effect transaction, nor the pre-fix cleanup job).
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn the_middleware_corpus_replays_on_memory_without_divergence() {
    let replayed = replay_corpus_files("middleware-memory", files_of("middleware-memory"));
    println!("middleware-memory: {replayed} traces replayed");
    assert!(
        replayed >= 150,
        "{replayed} traces replayed on the memory store"
    );
}

/// `--fail-fast` starts no trace after the first divergence: the pre-fix M2 counterexample
/// parts from the shipped layer, so of three traces given after it none runs; without the flag
/// all three do. Both runs exit 1.
#[test]
fn fail_fast_starts_no_trace_after_the_first_divergence() {
    let diverging = kept("idempotency-pre-fix-counterexample-m2-no-poison.itf.json");
    let others: Vec<String> = corpus_files()
        .iter()
        .filter(|file| file.contains("idempotency-fenced-"))
        .take(3)
        .cloned()
        .collect();
    assert_eq!(others.len(), 3, "fenced traces in the corpus");
    // PostgreSQL: the kept M2 counterexample is a trace of its one-statement claim.
    let target = postgres_target();
    let run = |fail_fast: bool| {
        let mut arguments = vec!["replay", diverging.as_str()];
        arguments.extend(others.iter().map(String::as_str));
        arguments.extend([
            "--target",
            target.as_str(),
            "--store-variant",
            "fenced",
            "--only-replayable",
        ]);
        if fail_fast {
            arguments.push("--fail-fast");
        }
        let output = oncecheck(&arguments);
        assert_eq!(output.status.code(), Some(1), "{}", text(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let per_trace = |stdout: &str| {
        stdout
            .lines()
            .filter(|line| {
                ["ok ", "n/a ", "FAIL "]
                    .iter()
                    .any(|word| line.starts_with(word))
            })
            .count()
    };
    let every = run(false);
    assert_eq!(per_trace(&every), 4, "{every}");
    assert!(!every.contains("not run"), "{every}");
    let fast = run(true);
    assert_eq!(per_trace(&fast), 1, "{fast}");
    assert!(fast.starts_with("FAIL "), "{fast}");
    assert!(
        fast.contains("--fail-fast: 3 traces not run after the first failure"),
        "{fast}"
    );
}

//= specs/idempotency-middleware.md#M2
//# A cached success holds the complete body, at most the cap, or the too-large sentinel.
#[test]
fn the_pre_fix_m2_counterexample_poisons_the_real_row_and_parts_from_the_shipped_layer_at_the_finalize(
) {
    let trace = kept("idempotency-pre-fix-counterexample-m2-no-poison.itf.json");
    let target = postgres_target();
    // On the pre-fix layer the replay conforms: after every step the real row is the model's,
    // so after step 5 the database holds a success with an empty body.
    let output = oncecheck(&["replay", &trace, "--target", &target]);
    assert_eq!(replayed_without_divergence(&output), 1);
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        &target,
        "--store-variant",
        "fenced",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = text(&output);
    println!("{report}");
    assert!(report.contains("at step 5: C1: finalize"), "{report}");
    // The shipped layer stored the sentinel where the pre-fix one stored an empty body.
    assert!(report.contains("body: Some(Empty)"), "{report}");
    assert!(report.contains("body: Some(Sentinel)"), "{report}");
    assert!(
        report.contains("--target middleware-postgres=")
            && report.contains("--store-variant fenced"),
        "{report}"
    );
}

//= specs/idempotency-middleware.md#M3
//# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
#[test]
fn the_pre_fix_m3_counterexample_leaves_the_real_row_processing_and_the_shipped_guard_finalizes_it()
{
    let trace = kept("idempotency-pre-fix-counterexample-m3-terminal-rule.itf.json");
    let target = postgres_target();
    let output = oncecheck(&["replay", &trace, "--target", &target]);
    assert_eq!(replayed_without_divergence(&output), 1);
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        &target,
        "--store-variant",
        "fenced",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = text(&output);
    println!("{report}");
    assert!(
        report.contains(
            "at step 4: C1 cancels (drops the response future) while the middleware reads the body"
        ),
        "{report}"
    );
    // The shipped layer's drop guard has its finalize waiting where the pre-fix layer has none.
    assert!(report.contains("waiting: [None, None]"), "{report}");
    assert!(
        report.contains("waiting: [Some(\"finalize\"), None]"),
        "{report}"
    );
}

#[test]
fn every_middleware_corpus_trace_is_itf_that_the_itf_crate_reads() {
    let files = corpus_files();
    assert!(files.len() >= 300, "{} files", files.len());
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let trace: itf::Trace<itf::Value> =
            itf::trace_from_str(&text).unwrap_or_else(|error| panic!("{file}: {error}"));
        assert_eq!(trace.meta.format.as_deref(), Some("ITF"));
        assert_eq!(
            trace.meta.other.get("model").map(String::as_str),
            Some("idempotency")
        );
    }
}

/// Asserts a failure is exactly one line on stderr, with no panic or backtrace.
fn one_clear_line(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{}", text(output));
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
    stderr
}

#[test]
fn a_trace_of_the_other_model_is_bad_input_at_either_kind_of_target() {
    let middleware = kept("idempotency-fenced-counterexample-m1-at-most-once.itf.json");
    let output = oncecheck(&["replay", &middleware, "--target", "memory"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("traces of model `idempotency` cannot be replayed at target `memory`"),
        "{stderr}"
    );
    let relay = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("traces/relay/relay-mixed-counterexample-r1-no-skip.itf.json");
    let output = oncecheck(&[
        "replay",
        &relay.to_string_lossy(),
        "--target",
        "middleware-sqlite",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("traces of model `relay` cannot be replayed at target `middleware-sqlite`"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was replayed"), "{stderr}");
}

#[test]
fn a_trace_edited_to_a_step_the_model_cannot_take_is_bad_input() {
    let original = std::fs::read_to_string(kept(
        "idempotency-pre-fix-counterexample-m2-no-poison.itf.json",
    ))
    .unwrap();
    let mut document: serde_json::Value = serde_json::from_str(&original).unwrap();
    // Step 2 claims for client 1; the edit claims for client 2, who has sent nothing.
    document["states"][2]["mbt::nondetPicks"]["client"] =
        serde_json::json!({"tag": "Some", "value": {"#bigint": "1"}});
    let edited = scratch("edited.itf.json");
    std::fs::write(&edited, document.to_string()).unwrap();
    let output = oncecheck(&[
        "replay",
        &edited.to_string_lossy(),
        "--target",
        "middleware-sqlite",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("edited.itf.json: step 2"), "{stderr}");
    assert!(stderr.contains("nothing was replayed"), "{stderr}");
}

#[test]
fn an_unreachable_database_exits_2_with_one_line() {
    // A port nothing listens on: bind one and release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let trace = kept("idempotency-fenced-counterexample-m1-at-most-once.itf.json");
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        &format!("middleware-postgres=postgres://nobody@127.0.0.1:{port}/none"),
    ]);
    let line = one_clear_line(&output);
    assert!(
        line.contains("cannot reach the middleware-postgres="),
        "{line}"
    );
    assert!(line.contains("does not answer"), "{line}");
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        "middleware-postgres=http://127.0.0.1:1",
    ]);
    let line = one_clear_line(&output);
    assert!(line.contains("is not a PostgreSQL URL"), "{line}");
}

/// The kept traces alone (counterexamples, examples, promoted), sorted.
fn kept_files() -> Vec<String> {
    let walks = scratch("walks").to_string_lossy().into_owned();
    corpus_files()
        .iter()
        .filter(|file| !file.starts_with(&walks))
        .cloned()
        .collect()
}

/// Whether a kept corpus trace catches `--store-mutation mutation`. The kept traces alone: an
/// example of every property is among them, and a run over the walks too waits out a
/// divergence per caught walk in flight (400 s against 75 s for the four mutations).
/// `--fail-fast`: one catch answers; `scripts/replay-corpus middleware` prints how many traces
/// of the whole corpus catch each.
fn caught_by_a_kept_trace(target: &str, mutation: &str) -> bool {
    let kept = kept_files();
    assert!(kept.len() >= 100, "{} kept traces", kept.len());
    let mut arguments = vec!["replay"];
    arguments.extend(kept.iter().map(String::as_str));
    arguments.extend([
        "--target",
        target,
        "--only-replayable",
        "--jobs",
        "12",
        "--fail-fast",
        "--store-mutation",
        mutation,
    ]);
    let output = oncecheck(&arguments);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("environment failures") || stdout.contains(" 0 environment failures"),
        "{stdout}"
    );
    stdout
        .lines()
        .any(|line| line.starts_with("FAIL divergence"))
}

// Each deliberate defect of the layer or its store (behind its `test-seams` feature) is caught
// by at least one kept corpus trace on each database.
//= specs/idempotency-middleware.md#M6
//# A request whose key is held by a live claim gets 409 and never runs the handler.
//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
//= specs/idempotency-middleware.md#M4
//# A replay returns the stored status and body, or the sentinel response, marked as a replay.
#[test]
fn every_layer_mutation_is_caught_by_corpus_traces_on_both_databases() {
    let postgres = postgres_target();
    for mutation in [
        "claim-over-live-lease",
        "finalize-key-only",
        "no-drop-guard",
        "replay-unmarked",
    ] {
        assert!(
            caught_by_a_kept_trace("middleware-sqlite", mutation),
            "no SQLite corpus trace catches {mutation}"
        );
        assert!(
            caught_by_a_kept_trace(&postgres, mutation),
            "no PostgreSQL corpus trace catches {mutation}"
        );
    }
}

/// The layer as shipped (its heartbeat on the layer's clock) replays the whole seed-1 export of
/// `renewed`: before the heartbeat covered the finalizers, 11 of 278 traces diverged at a tick
/// while a finalize was pending (the model renews, the layer had stopped).
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn the_renewed_export_replays_on_the_layer_as_shipped() {
    let out = scratch("renewed-export");
    let _ = std::fs::remove_dir_all(&out);
    let output = oncecheck(&[
        "traces",
        "idempotency",
        "--variant",
        "renewed",
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().path().to_string_lossy().into_owned())
        .collect();
    assert!(files.len() >= 100, "{} traces written", files.len());
    // Written for PostgreSQL's claim (the CI bounds): every one replays there.
    let mut arguments = vec!["replay"];
    arguments.extend(files.iter().map(String::as_str));
    let target = postgres_target();
    arguments.extend(["--target", target.as_str(), "--jobs", "4"]);
    assert_eq!(
        replayed_without_divergence(&oncecheck(&arguments)),
        files.len()
    );
}

#[test]
fn an_unknown_layer_variant_or_mutation_exits_2_naming_the_valid_ones() {
    let trace = kept("idempotency-fenced-sqlite-counterexample-m1-at-most-once.itf.json");
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        "middleware-sqlite",
        "--store-mutation",
        "no-predecessor-check",
    ]);
    let line = one_clear_line(&output);
    assert!(
        line.contains("unknown layer mutation `no-predecessor-check`; valid: claim-over-live-lease, finalize-key-only, no-drop-guard, replay-unmarked"),
        "{line}"
    );
    let output = oncecheck(&[
        "replay",
        &trace,
        "--target",
        "middleware-sqlite",
        "--store-variant",
        "shipped",
    ]);
    let line = one_clear_line(&output);
    assert!(
        line.contains("unknown layer variant `shipped`; valid: pre-fix, fixed, fenced, renewed"),
        "{line}"
    );
}

/// Two walk sets that would write the same files (one variant at bounds that name the walks
/// alike) are refused: the later set's walks would replace the earlier's unseen, and no target
/// would replay them. The middleware manifest's `fixed` set given twice stands for two sets at
/// bounds the file names do not tell apart.
#[test]
fn walk_sets_that_would_write_the_same_walks_are_refused() {
    let corpus = scratch("colliding-corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(corpus_dir().join("walks.manifest.json")).unwrap(),
    )
    .unwrap();
    let fixed = manifest["walks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|set| set["variant"] == "fixed")
        .unwrap()
        .clone();
    let colliding = serde_json::json!({ "model": "idempotency", "walks": [fixed.clone(), fixed] });
    std::fs::write(corpus.join("walks.manifest.json"), colliding.to_string()).unwrap();
    let out = scratch("colliding-walks");
    let output = oncecheck(&[
        "corpus",
        "--dir",
        &corpus.to_string_lossy(),
        "--walks-out",
        &out.to_string_lossy(),
    ]);
    let refusal = one_clear_line(&output);
    assert!(
        refusal.contains("two entries write the walk idempotency-fixed-path-"),
        "{refusal}"
    );
}
