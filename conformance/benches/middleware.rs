//! Middleware replay throughput: traces per second of the middleware regression corpus (its kept
//! traces and the walks of its manifest) replayed against the idempotency layer on SQLite and
//! (when ONCECHECK_PG_URL is set) PostgreSQL, one at a time and with concurrent jobs. Each
//! trace runs on its own database (SQLite in memory; a PostgreSQL schema), its own axum server
//! and its own client connections. Only the traces a database can show count (the others are
//! refused before anything runs). A benchmark, not a test; goals: 200 traces/s on SQLite, 50
//! on PostgreSQL.
//! Run: `cargo bench -p oncecheck-conformance --bench middleware` (add `-- JOBS...` to choose
//! the job counts; default 1 and 4).

use oncecheck_conformance::check::traces::{write_walks, MIDDLEWARE_CORPUS_DIR};
use oncecheck_conformance::replay::driver::{ReplayError, Target};
use oncecheck_conformance::replay::middleware::target::{LayerConfig, MiddlewareSession};
use oncecheck_conformance::replay::runner::{replay_all, StopAt};
use oncecheck_conformance::replay::session::ReplaySession;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

fn corpus() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf();
    let directory = root.join(MIDDLEWARE_CORPUS_DIR);
    let walks = std::env::temp_dir().join(format!("oncecheck-bench-walks-{}", std::process::id()));
    let mut files = write_walks(&directory, &walks).expect("the manifest's walks");
    files.extend(
        std::fs::read_dir(&directory)
            .expect("the corpus")
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.to_string_lossy().ends_with(".itf.json")),
    );
    files.sort();
    files
}

async fn measure(target: Target, files: &[PathBuf], jobs: usize) {
    let session = match MiddlewareSession::open(&target, LayerConfig::default()).await {
        Ok(session) => Arc::new(session),
        Err(error) => {
            println!("{target}: not measured ({error})");
            return;
        }
    };
    let traces: Vec<_> = files
        .iter()
        .map(|file| (file.clone(), session.load(file).expect("the corpus loads")))
        .collect();
    let started = Instant::now();
    let outcomes = replay_all(session.clone(), traces, jobs, StopAt::Never, |_, _| {}).await;
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
    let name = match &target {
        Target::MiddlewarePostgres(_) => "middleware-postgres".to_string(),
        other => other.to_string(),
    };
    println!(
        "{name:<19} jobs {jobs:>2}: {replayed:>4} traces ({not_applicable} n/a, {failed} failed), {steps:>6} steps in {seconds:>6.2}s: {:>7.1} traces/s, {:>8.1} steps/s",
        replayed as f64 / seconds,
        steps as f64 / seconds,
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
            measure(Target::MiddlewareSqlite, &files, jobs).await;
            if std::env::var("ONCECHECK_PG_URL").is_ok() {
                measure(Target::MiddlewarePostgres(None), &files, jobs).await;
            } else {
                println!("middleware-postgres: not measured (set ONCECHECK_PG_URL)");
            }
        }
    });
}
