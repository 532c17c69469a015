//! Replay throughput: traces per second of the regression corpus against memory, SQLite and
//! (when ONCECHECK_DDB_ENDPOINT is set) DynamoDB through the proxy, one at a time and with
//! concurrent jobs. A benchmark, not a test.
//! Run: `cargo bench -p oncecheck-conformance --bench replay` (add `-- JOBS...` to choose the
//! job counts; default 1 and 4).

use oncecheck_conformance::replay::{ReplayError, Target};
use oncecheck_conformance::replay_command::replay_all;
use oncecheck_conformance::replay_session::Session;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

fn corpus() -> Vec<PathBuf> {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let mut files: Vec<PathBuf> = std::fs::read_dir(directory)
        .expect("the corpus")
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
}

async fn measure(target: Target, files: &[PathBuf], jobs: usize) {
    let session = match Session::open(&target).await {
        Ok(session) => Arc::new(session),
        Err(error) => {
            println!("{target}: not measured ({error})");
            return;
        }
    };
    let loading = Instant::now();
    let traces: Vec<_> = files
        .iter()
        .map(|file| (file.clone(), session.load(file).expect("the corpus loads")))
        .collect();
    let load_seconds = loading.elapsed().as_secs_f64();
    let started = Instant::now();
    let outcomes = replay_all(session.clone(), traces, jobs, |_, _| {}).await;
    let seconds = started.elapsed().as_secs_f64();
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
        "{target:<10} jobs {jobs:>2}: {replayed:>4} traces ({not_applicable} n/a, {failed} failed), {steps:>6} steps in {seconds:>7.2}s: {:>8.1} traces/s, {:>9.1} steps/s (loading {} files: {load_seconds:.2}s)",
        replayed as f64 / seconds,
        steps as f64 / seconds,
        files.len(),
    );
    if let Ok(session) = Arc::try_unwrap(session) {
        session.close().await;
    }
}

fn main() {
    let files = corpus();
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
}
