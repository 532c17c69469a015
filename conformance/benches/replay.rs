//! Replay throughput: traces per second of the regression corpus against memory, SQLite and
//! (when ONCECHECK_DDB_ENDPOINT is set) DynamoDB through the proxy. A benchmark, not a test.
//! Run: `cargo bench -p oncecheck-conformance --bench replay`

use oncecheck_conformance::replay::{replay_file_logical, ReplayError, Target};
use oncecheck_conformance::replay_session::Session;
use std::path::PathBuf;
use std::time::Instant;

fn corpus() -> Vec<PathBuf> {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay");
    let mut files: Vec<PathBuf> = std::fs::read_dir(directory).expect("the corpus").map(|entry| entry.unwrap().path()).collect();
    files.sort();
    files
}

async fn measure(target: Target, files: &[PathBuf]) {
    let mut session = match Session::open(&target).await {
        Ok(session) => session,
        Err(error) => {
            println!("{target}: not measured ({error})");
            return;
        }
    };
    let started = Instant::now();
    let (mut replayed, mut steps, mut not_applicable, mut failed) = (0usize, 0usize, 0usize, 0usize);
    for file in files {
        let result = match target {
            Target::Dynamodb(_) => session.replay_dynamodb(file).await,
            _ => replay_file_logical(file, session.logical_store(), &target).await,
        };
        match result {
            Ok(stats) => {
                replayed += 1;
                steps += stats.steps;
            }
            Err(ReplayError::TargetMismatch { .. }) => not_applicable += 1,
            Err(_) => failed += 1,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{target:<10} {replayed:>4} traces ({not_applicable} n/a, {failed} failed), {steps:>6} steps in {seconds:>7.2}s: {:>8.1} traces/s, {:>9.1} steps/s",
        replayed as f64 / seconds,
        steps as f64 / seconds
    );
    session.close().await;
}

fn main() {
    let files = corpus();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        measure(Target::Memory, &files).await;
        measure(Target::Sqlite, &files).await;
        if std::env::var("ONCECHECK_DDB_ENDPOINT").is_ok() {
            measure(Target::Dynamodb(None), &files).await;
        } else {
            println!("dynamodb: not measured (set ONCECHECK_DDB_ENDPOINT)");
        }
    });
}
