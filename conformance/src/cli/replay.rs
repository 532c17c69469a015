//! `oncecheck replay TRACE... --target T [--jobs N]`: loads every file first (a file that is not
//! a usable trace of the target's model stops the run before anything is replayed), replays the
//! traces, `jobs` at a time, prints one line per trace in the order given and a summary (traces,
//! steps, requests, lost responses, seconds), then per (model, variant, bounds) the transitions
//! the conforming traces drove through the real code of those reachable in the model
//! (`crate::replay::transitions`; with `--summary-json FILE` all of it as JSON), and answers the exit
//! code: 0 all replayed without divergence, 1 a divergence or an environment failure mid-run, 2
//! bad input (a file, a target that cannot be reached, a trace the target cannot show without
//! `--only-replayable`).

use super::args::ReplayArgs;
use super::bad_input;
use crate::replay::driver::{ReplayError, ReplayStats, Target};
use crate::replay::flags::{ReplayFlags, TargetConfig};
use crate::replay::runner::{check_jobs, replay_all, Outcomes};
use crate::replay::session::{self, ReplaySession, Session};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// `oncecheck replay`: the target and its flags checked, then the run.
pub fn replay(args: ReplayArgs) -> ExitCode {
    let ReplayArgs {
        traces,
        target,
        store_variant,
        store_mutations,
        only_replayable,
        jobs,
        lose_by,
        summary_json,
        junit,
    } = args;
    let target: Target = match target.parse() {
        Ok(target) => target,
        Err(message) => return bad_input(message),
    };
    let flags = ReplayFlags {
        store_variant,
        store_mutations,
        lose_by,
    };
    let usable = match flags.usable_on(&target) {
        Ok(usable) => usable,
        Err(message) => return bad_input(message),
    };
    if let Some(file) = &junit {
        if let Err(error) = crate::report::junit::prepare_file(file) {
            return bad_input(format!(
                "cannot write the JUnit report to {}: {error}",
                file.display()
            ));
        }
    }
    let config = match usable.configure() {
        Ok(config) => config,
        Err(message) => return bad_input(message),
    };
    let outputs = Outputs {
        summary_json,
        junit,
    };
    run(&traces, &target, config, only_replayable, jobs, &outputs)
}

/// What a run prints besides its lines: where its JSON summary goes.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// `--summary-json FILE`: the run's counts and transition coverage as one JSON document.
    pub summary_json: Option<PathBuf>,
    /// `--junit FILE`: a JUnit XML report, a test case per trace.
    pub junit: Option<PathBuf>,
}

pub fn run(
    files: &[PathBuf],
    target: &Target,
    config: TargetConfig,
    only_replayable: bool,
    jobs: usize,
    outputs: &Outputs,
) -> ExitCode {
    let jobs = match check_jobs(jobs) {
        Ok(jobs) => jobs,
        Err(message) => {
            eprintln!("oncecheck: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("oncecheck: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run_all(
        files,
        target,
        config,
        only_replayable,
        jobs,
        outputs,
    ))
}

async fn run_all(
    files: &[PathBuf],
    target: &Target,
    config: TargetConfig,
    only_replayable: bool,
    jobs: usize,
    outputs: &Outputs,
) -> ExitCode {
    let started = Instant::now();
    let session = match session::open(target, config).await {
        Ok(session) => session,
        Err(detail) => {
            eprintln!("oncecheck: cannot reach the {target} target: {detail}");
            return ExitCode::from(2);
        }
    };
    match session {
        Session::Relay(session) => {
            run_session(
                Arc::new(session),
                files,
                target,
                only_replayable,
                jobs,
                started,
                outputs,
            )
            .await
        }
        Session::Token(session) => {
            run_session(
                Arc::new(session),
                files,
                target,
                only_replayable,
                jobs,
                started,
                outputs,
            )
            .await
        }
        Session::Middleware(session) => {
            run_session(
                Arc::new(session),
                files,
                target,
                only_replayable,
                jobs,
                started,
                outputs,
            )
            .await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_session<S: ReplaySession>(
    session: Arc<S>,
    files: &[PathBuf],
    target: &Target,
    only_replayable: bool,
    jobs: usize,
    started: Instant,
    outputs: &Outputs,
) -> ExitCode {
    // Every file first: bad input stops the run before anything is replayed.
    let mut traces = Vec::with_capacity(files.len());
    let mut unusable = 0usize;
    for file in files {
        match session.load(file) {
            Ok(trace) => traces.push((file.clone(), trace)),
            Err(error) => {
                unusable += 1;
                eprintln!("oncecheck: {error}");
            }
        }
    }
    if unusable > 0 {
        eprintln!(
            "oncecheck: {unusable} of {} files are not usable traces; nothing was replayed",
            files.len()
        );
        close(session).await;
        return ExitCode::from(2);
    }
    // The reachable transitions of every (model, variant, bounds) first: one search each.
    for group in traces
        .iter()
        .map(|(_, trace)| crate::replay::transitions::Covered::group(trace))
        .collect::<std::collections::BTreeSet<_>>()
    {
        eprintln!("oncecheck: searching the transitions reachable in {group}");
    }
    let plan = crate::replay::transitions::Plan::of(traces.iter().map(|(_, trace)| trace));
    let reproductions: BTreeMap<PathBuf, String> = traces
        .iter()
        .filter_map(|(file, trace)| Some((file.clone(), session.reproduction(trace)?)))
        .collect();
    let mut totals = ReplayStats::default();
    let (mut replayed, mut refused, mut diverged, mut not_applicable, mut environment) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    let outcomes = replay_all(session.clone(), traces, jobs, |file, result| match result {
        Ok(stats) => println!(
            "ok   {} ({} steps, {} requests, {} lost responses){}",
            file.display(),
            stats.steps,
            stats.requests,
            stats.lost_responses,
            reproductions
                .get(file)
                .map(|note| format!(": {note} on the real table, as expected"))
                .unwrap_or_default()
        ),
        Err(error @ ReplayError::NotApplicable { .. }) if only_replayable => {
            println!("n/a  {error}")
        }
        Err(error @ (ReplayError::Load(_) | ReplayError::NotApplicable { .. })) => {
            eprintln!("oncecheck: {error}")
        }
        Err(error) => println!("FAIL {error}"),
    })
    .await;
    for (_, result) in &outcomes {
        match result {
            Ok(stats) => {
                replayed += 1;
                totals.steps += stats.steps;
                totals.requests += stats.requests;
                totals.lost_responses += stats.lost_responses;
            }
            Err(ReplayError::NotApplicable { .. }) if only_replayable => not_applicable += 1,
            Err(ReplayError::Load(_) | ReplayError::NotApplicable { .. }) => refused += 1,
            Err(ReplayError::Environment { .. }) => environment += 1,
            Err(ReplayError::Diverged(_)) => diverged += 1,
        }
    }
    close(session).await;
    let seconds = started.elapsed().as_secs_f64();
    if let Some(file) = outputs.junit.as_deref() {
        if let Err(status) = write_junit(file, target, only_replayable, &outcomes, seconds) {
            return status;
        }
    }
    println!(
        "replayed {replayed} of {} traces against {target} ({jobs} at a time): {} steps, {} requests, {} lost responses, {:.2}s, {diverged} diverged, {environment} environment failures, {refused} rejected, {not_applicable} not applicable to this target",
        files.len(),
        totals.steps,
        totals.requests,
        totals.lost_responses,
        seconds
    );
    let coverage = plan.measure(|index| outcomes[index].1.is_ok());
    for group in &coverage {
        if group.traces == 0 {
            // Not applicable here, or diverged (said above): nothing drove its transitions.
            println!("coverage {} on {target}: no conforming trace", group.group);
            continue;
        }
        println!(
            "{}",
            crate::replay::transitions::line(group, &target.to_string())
        );
        // The summary JSON lists all of them; a long list of another variant's is cut here.
        const LISTED_MAX: usize = 8;
        for label in group.missing.iter().take(LISTED_MAX) {
            println!("  not driven: {label}");
        }
        if group.missing.len() > LISTED_MAX {
            println!(
                "  ... and {} more not driven (all in --summary-json)",
                group.missing.len() - LISTED_MAX
            );
        }
        for label in &group.unexpected {
            println!("  driven but not reachable at these bounds: {label}");
        }
    }
    if let Some(file) = &outputs.summary_json {
        let document = serde_json::json!({
            "schema": crate::replay::transitions::SUMMARY_JSON_SCHEMA,
            "target": target.to_string(),
            "target_kind": target.kind(),
            "ok": diverged == 0 && environment == 0 && refused == 0,
            "traces": {
                "given": files.len(),
                "replayed": replayed,
                "diverged": diverged,
                "environment_failures": environment,
                "rejected": refused,
                "not_applicable": not_applicable,
            },
            "steps": totals.steps,
            "requests": totals.requests,
            "lost_responses": totals.lost_responses,
            "coverage": coverage,
        });
        let text = serde_json::to_string_pretty(&document).expect("the summary serializes") + "\n";
        if let Err(error) = std::fs::write(file, text) {
            eprintln!(
                "oncecheck: cannot write the summary to {}: {error}",
                file.display()
            );
            return ExitCode::from(2);
        }
    }
    if diverged > 0 || environment > 0 {
        ExitCode::from(1)
    } else if refused > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// Writes `--junit FILE` (a test case per trace) and says so; an unwritable file is exit 2.
fn write_junit(
    file: &Path,
    target: &Target,
    only_replayable: bool,
    outcomes: &Outcomes,
    seconds: f64,
) -> Result<(), ExitCode> {
    let document = crate::report::replay_junit::replay_document(
        &target.to_string(),
        only_replayable,
        outcomes,
        seconds,
    );
    if let Err(error) = std::fs::write(file, document) {
        eprintln!(
            "oncecheck: cannot write the JUnit report to {}: {error}",
            file.display()
        );
        return Err(ExitCode::from(2));
    }
    eprintln!(
        "oncecheck: wrote the JUnit report to {} ({} test cases)",
        file.display(),
        outcomes.len()
    );
    Ok(())
}

async fn close<S: ReplaySession>(session: Arc<S>) {
    if let Ok(session) = Arc::try_unwrap(session) {
        session.close().await;
    }
}
