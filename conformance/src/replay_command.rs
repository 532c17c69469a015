//! `oncecheck replay TRACE... --target T`: replays every file, prints one line per trace and a
//! summary (traces, steps, requests, seconds), and answers the exit code: 0 all replayed without
//! divergence, 1 a divergence or an environment failure, 2 a file or target that cannot be used.

use crate::replay::{replay_file_logical, ReplayError, ReplayStats, Target};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

pub fn run(files: &[PathBuf], target: &Target) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("oncecheck: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run_all(files, target))
}

async fn run_all(files: &[PathBuf], target: &Target) -> ExitCode {
    let started = Instant::now();
    let mut totals = ReplayStats::default();
    let (mut replayed, mut bad_input, mut diverged) = (0usize, 0usize, 0usize);
    let mut session = match crate::replay_session::Session::open(target).await {
        Ok(session) => session,
        Err(detail) => {
            eprintln!("oncecheck: cannot reach the {target} target: {detail}");
            return ExitCode::from(1);
        }
    };
    for file in files {
        let result = match target {
            Target::Memory | Target::Sqlite => replay_file_logical(file, session.logical_store(), target).await,
            Target::Dynamodb(_) => session.replay_dynamodb(file).await,
        };
        match result {
            Ok(stats) => {
                replayed += 1;
                totals.steps += stats.steps;
                totals.requests += stats.requests;
                println!("ok   {} ({} steps, {} requests)", file.display(), stats.steps, stats.requests);
            }
            Err(error @ (ReplayError::Load(_) | ReplayError::TargetMismatch { .. })) => {
                bad_input += 1;
                eprintln!("oncecheck: {error}");
            }
            Err(error) => {
                diverged += 1;
                println!("FAIL {error}");
            }
        }
    }
    session.close().await;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "replayed {replayed} of {} traces against {target}: {} steps, {} requests, {:.2}s, {diverged} diverged, {bad_input} rejected",
        files.len(),
        totals.steps,
        totals.requests,
        seconds
    );
    if diverged > 0 {
        ExitCode::from(1)
    } else if bad_input > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
