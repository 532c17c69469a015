//! Replay throughput: traces per second of the regression corpus (its kept traces and the walks
//! its manifest names) against memory, SQLite and (when ONCECHECK_DDB_ENDPOINT is set) DynamoDB
//! through the proxy, one at a time and with concurrent jobs. A benchmark, not a test.
//! Run: `cargo bench -p oncecheck-conformance --features replay --bench replay` (add
//! `-- JOBS...` to choose the job counts; default 1 and 4). Only replayed traces count towards
//! traces/s: a trace a target cannot show is refused before it runs and is counted apart.

use oncecheck_conformance::replay::driver::{ReplayError, Target};
use oncecheck_conformance::replay::dynamodb::StoreConfig;
use oncecheck_conformance::replay::runner::{replay_all, StopAt};
use oncecheck_conformance::replay::session::{RelaySession, ReplaySession};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The in-process targets replay the corpus this many times over, so the figure is not a
/// few milliseconds of timer noise.
const LOCAL_ROUNDS: usize = 20;

/// The kept traces and the manifest's walks (written to `walks`), sorted.
fn corpus(walks: &Path) -> Vec<PathBuf> {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("the corpus")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".itf.json"))
        .collect();
    files.extend(
        oncecheck_conformance::check::traces::write_walks(&directory, walks)
            .expect("the manifest's walks"),
    );
    files.sort();
    files
}

async fn measure(target: Target, files: &[PathBuf], jobs: usize) {
    let session = match RelaySession::open(&target, StoreConfig::default()).await {
        Ok(session) => Arc::new(session),
        Err(error) => {
            println!("{target}: not measured ({error})");
            return;
        }
    };
    let rounds = match target {
        Target::Memory | Target::Sqlite => LOCAL_ROUNDS,
        _ => 1,
    };
    // Loading re-executes every trace against the model: timed apart from the replay.
    let mut load_seconds = 0.0;
    let mut seconds = 0.0;
    let mut outcomes = Vec::new();
    for _ in 0..rounds {
        let loading = Instant::now();
        let traces: Vec<_> = files
            .iter()
            .map(|file| (file.clone(), session.load(file).expect("the corpus loads")))
            .collect();
        load_seconds += loading.elapsed().as_secs_f64();
        let started = Instant::now();
        outcomes.extend(replay_all(session.clone(), traces, jobs, StopAt::Never, |_, _| {}).await);
        seconds += started.elapsed().as_secs_f64();
    }
    let (mut replayed, mut steps, mut not_applicable, mut failed) =
        (0usize, 0usize, 0usize, 0usize);
    for (_, result) in &outcomes {
        match result {
            Ok(stats) => {
                replayed += 1;
                steps += stats.steps;
            }
            Err(ReplayError::NotApplicable { .. }) => not_applicable += 1,
            Err(_) => failed += 1,
        }
    }
    println!(
        "{target:<10} jobs {jobs:>2}: {replayed:>5} traces replayed ({rounds} x the corpus; {not_applicable} n/a, {failed} failed), {steps:>6} steps in {seconds:>7.2}s: {:>8.1} traces/s, {:>9.1} steps/s (loading {} files x {rounds}: {load_seconds:.2}s)",
        replayed as f64 / seconds,
        steps as f64 / seconds,
        files.len(),
    );
    if let Ok(session) = Arc::try_unwrap(session) {
        session.close().await;
    }
}

fn main() {
    let walks = std::env::temp_dir().join(format!("oncecheck-replay-bench-{}", std::process::id()));
    let files = corpus(&walks);
    let jobs: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let jobs = if jobs.is_empty() { vec![1, 4] } else { jobs };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        for &jobs in &jobs {
            measure(Target::Memory, &files, jobs).await;
            measure(Target::Sqlite, &files, jobs).await;
            if std::env::var("ONCECHECK_DDB_ENDPOINT").is_ok() {
                measure(Target::Dynamodb(None), &files, jobs).await;
            } else {
                println!("dynamodb: not measured (set ONCECHECK_DDB_ENDPOINT)");
            }
        }
    });
    let _ = std::fs::remove_dir_all(&walks);
}
