//! `oncecheck replay TRACE... --target T`: replays every file, prints one line per trace and a
//! summary (traces, steps, requests, seconds), and answers the exit code: 0 all replayed without
//! divergence, 1 a divergence, 2 a file or target that cannot be used (unreachable included).

use crate::replay::{replay_file_logical, ReplayError, ReplayStats, Target};
use crate::replay_dynamodb::StoreConfig;
use oncecheck_store::dynamodb::Mutation;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Parses `--store-variant` and `--store-mutation`, naming the valid choices on error.
pub fn store_config(store_variant: Option<String>, mutations: &[String]) -> Result<StoreConfig, String> {
    if let Some(variant) = &store_variant {
        if !["add-era", "counter-only", "fixed", "mixed"].contains(&variant.as_str()) {
            return Err(format!("unknown store variant `{variant}`; valid: add-era, counter-only, fixed, mixed"));
        }
    }
    let mutations = mutations
        .iter()
        .map(|name| match name.as_str() {
            "no-predecessor-check" => Ok(Mutation::NoPredecessorCheck),
            "unconditional-counter-set" => Ok(Mutation::UnconditionalCounterSet),
            "read-counter-every-op" => Ok(Mutation::ReadCounterEveryOp),
            other => Err(format!(
                "unknown store mutation `{other}`; valid: no-predecessor-check, unconditional-counter-set, read-counter-every-op"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StoreConfig { store_variant, mutations })
}

pub fn run(files: &[PathBuf], target: &Target, config: StoreConfig, only_replayable: bool) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("oncecheck: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run_all(files, target, config, only_replayable))
}

async fn run_all(files: &[PathBuf], target: &Target, config: StoreConfig, only_replayable: bool) -> ExitCode {
    let started = Instant::now();
    let mut totals = ReplayStats::default();
    let (mut replayed, mut bad_input, mut diverged, mut not_applicable) = (0usize, 0usize, 0usize, 0usize);
    let mut session = match crate::replay_session::Session::open_with(target, config).await {
        Ok(session) => session,
        Err(detail) => {
            // Bad input, not a divergence: nothing was replayed (exit 1 is kept for divergences).
            eprintln!("oncecheck: cannot reach the {target} target: {detail}");
            return ExitCode::from(2);
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
            Err(error @ ReplayError::TargetMismatch { .. }) if only_replayable => {
                not_applicable += 1;
                println!("n/a  {error}");
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
        "replayed {replayed} of {} traces against {target}: {} steps, {} requests, {:.2}s, {diverged} diverged, {bad_input} rejected, {not_applicable} not applicable to this target",
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
