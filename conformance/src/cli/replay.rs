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
use crate::replay::runner::{check_jobs, replay_all, Outcomes, StopAt};
use crate::replay::session::{self, ReplaySession, Session};
use crate::replay::transitions::GroupCoverage;
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
        fail_fast,
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
    let stop_at = if fail_fast {
        StopAt::FirstFailure
    } else {
        StopAt::Never
    };
    run(
        &traces,
        &target,
        config,
        Schedule {
            only_replayable,
            jobs,
            stop_at,
        },
        &outputs,
    )
}

/// What a run prints besides its lines: where its JSON summary goes.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// `--summary-json FILE`: the run's counts and transition coverage as one JSON document.
    pub summary_json: Option<PathBuf>,
    /// `--junit FILE`: a JUnit XML report, a test case per trace.
    pub junit: Option<PathBuf>,
}

/// How the traces of a run are taken: which outcomes count, how many at once, when to stop.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// `--only-replayable`: a trace the target cannot show is `n/a`, not bad input.
    pub only_replayable: bool,
    /// `--jobs`: traces replayed at once.
    pub jobs: usize,
    /// `--fail-fast`, or every trace.
    pub stop_at: StopAt,
}

pub fn run(
    files: &[PathBuf],
    target: &Target,
    config: TargetConfig,
    schedule: Schedule,
    outputs: &Outputs,
) -> ExitCode {
    let Schedule {
        only_replayable,
        jobs,
        stop_at,
    } = schedule;
    let jobs = match check_jobs(jobs) {
        Ok(jobs) => jobs,
        Err(message) => {
            eprintln!("oncecheck: {message}");
            return ExitCode::from(2);
        }
    };
    let exit = crate::block_on(run_all(
        files,
        target,
        config,
        Schedule {
            only_replayable,
            jobs,
            stop_at,
        },
        outputs,
    ));
    exit.unwrap_or_else(|message| {
        eprintln!("oncecheck: {message}");
        ExitCode::from(1)
    })
}

/// One run's inputs, as `run_session` and its parts need them.
struct Run<'a> {
    files: &'a [PathBuf],
    target: &'a Target,
    only_replayable: bool,
    jobs: usize,
    stop_at: StopAt,
    started: Instant,
    outputs: &'a Outputs,
}

async fn run_all(
    files: &[PathBuf],
    target: &Target,
    config: TargetConfig,
    schedule: Schedule,
    outputs: &Outputs,
) -> ExitCode {
    let run = Run {
        files,
        target,
        only_replayable: schedule.only_replayable,
        jobs: schedule.jobs,
        stop_at: schedule.stop_at,
        started: Instant::now(),
        outputs,
    };
    let session = match session::open(target, config).await {
        Ok(session) => session,
        Err(detail) => {
            eprintln!("oncecheck: cannot reach the {target} target: {detail}");
            return ExitCode::from(2);
        }
    };
    match session {
        Session::Relay(session) => run_session(Arc::new(session), &run).await,
        Session::Token(session) => run_session(Arc::new(session), &run).await,
        Session::Middleware(session) => run_session(Arc::new(session), &run).await,
    }
}

/// Loads every file, replays the traces, prints a line per trace in the order given, the
/// summary and the coverage, and writes `--junit` and `--summary-json`.
async fn run_session<S: ReplaySession>(session: Arc<S>, run: &Run<'_>) -> ExitCode {
    let Some(traces) = load_every_file(session.as_ref(), run.files) else {
        close(session).await;
        return ExitCode::from(2);
    };
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
    let outcomes = replay_all(
        session.clone(),
        traces,
        run.jobs,
        run.stop_at,
        |file, result| print_outcome(file, result, run.only_replayable, &reproductions),
    )
    .await;
    let tally = Tally::of(&outcomes, run.only_replayable);
    close(session).await;
    let seconds = run.started.elapsed().as_secs_f64();
    if let Some(file) = run.outputs.junit.as_deref() {
        if let Err(status) = write_junit(file, run.target, run.only_replayable, &outcomes, seconds)
        {
            return status;
        }
    }
    println!(
        "replayed {} of {} traces against {} ({} at a time): {} steps, {} requests, {} lost responses, {seconds:.2}s, {} diverged, {} environment failures, {} rejected, {} not applicable to this target",
        tally.replayed,
        run.files.len(),
        run.target,
        run.jobs,
        tally.totals.steps,
        tally.totals.requests,
        tally.totals.lost_responses,
        tally.diverged,
        tally.environment,
        tally.refused,
        tally.not_applicable,
    );
    let not_run = run.files.len() - outcomes.len();
    if not_run > 0 {
        println!("--fail-fast: {not_run} traces not run after the first failure");
    }
    let coverage = plan.measure(|index| {
        outcomes
            .get(index)
            .is_some_and(|(_, result)| result.is_ok())
    });
    print_coverage(&coverage, run.target);
    if let Some(file) = &run.outputs.summary_json {
        if let Err(status) = write_summary(file, run, &tally, &coverage) {
            return status;
        }
    }
    tally.exit_code()
}

/// Every file loaded as a trace of the session's model, in the order given; `None` (each
/// failure said on stderr) when one is not: bad input stops the run before anything is
/// replayed.
fn load_every_file<S: ReplaySession>(
    session: &S,
    files: &[PathBuf],
) -> Option<Vec<(PathBuf, S::Trace)>> {
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
        return None;
    }
    Some(traces)
}

/// One trace's line: `ok` (with what it reproduced), `n/a`, `FAIL`, or bad input on stderr.
fn print_outcome(
    file: &Path,
    result: &Result<ReplayStats, ReplayError>,
    only_replayable: bool,
    reproductions: &BTreeMap<PathBuf, String>,
) {
    match result {
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
    }
}

/// The run's counts: traces by outcome, and the steps, requests and lost responses of those
/// replayed.
struct Tally {
    totals: ReplayStats,
    replayed: usize,
    refused: usize,
    diverged: usize,
    not_applicable: usize,
    environment: usize,
}

impl Tally {
    fn of(outcomes: &Outcomes, only_replayable: bool) -> Tally {
        let mut tally = Tally {
            totals: ReplayStats::default(),
            replayed: 0,
            refused: 0,
            diverged: 0,
            not_applicable: 0,
            environment: 0,
        };
        for (_, result) in outcomes {
            match result {
                Ok(stats) => {
                    tally.replayed += 1;
                    tally.totals.steps += stats.steps;
                    tally.totals.requests += stats.requests;
                    tally.totals.lost_responses += stats.lost_responses;
                }
                Err(ReplayError::NotApplicable { .. }) if only_replayable => {
                    tally.not_applicable += 1
                }
                Err(ReplayError::Load(_) | ReplayError::NotApplicable { .. }) => tally.refused += 1,
                Err(ReplayError::Environment { .. }) => tally.environment += 1,
                Err(ReplayError::Diverged(_) | ReplayError::Panicked { .. }) => tally.diverged += 1,
            }
        }
        tally
    }

    /// 1 on a divergence or an environment failure, 2 on a trace refused, else 0.
    fn exit_code(&self) -> ExitCode {
        if self.diverged > 0 || self.environment > 0 {
            ExitCode::from(1)
        } else if self.refused > 0 {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// Per (model, variant, bounds), the transitions driven of those reachable, and the first of
/// those not driven.
fn print_coverage(coverage: &[GroupCoverage], target: &Target) {
    // The summary JSON lists all of them; a long list of another variant's is cut here.
    const LISTED_MAX: usize = 8;
    for group in coverage {
        if group.traces == 0 {
            // Not applicable here, or diverged (said above): nothing drove its transitions.
            println!("coverage {} on {target}: no conforming trace", group.group);
            continue;
        }
        println!(
            "{}",
            crate::replay::transitions::line(group, &target.to_string())
        );
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
}

/// Writes `--summary-json FILE`: the run's counts and coverage; an unwritable file is exit 2.
fn write_summary(
    file: &Path,
    run: &Run<'_>,
    tally: &Tally,
    coverage: &[GroupCoverage],
) -> Result<(), ExitCode> {
    let document = serde_json::json!({
        "schema": crate::replay::transitions::SUMMARY_JSON_SCHEMA,
        "target": run.target.to_string(),
        "target_kind": run.target.kind(),
        "ok": tally.diverged == 0 && tally.environment == 0 && tally.refused == 0,
        "traces": {
            "given": run.files.len(),
            "replayed": tally.replayed,
            "diverged": tally.diverged,
            "environment_failures": tally.environment,
            "rejected": tally.refused,
            "not_applicable": tally.not_applicable,
        },
        "steps": tally.totals.steps,
        "requests": tally.totals.requests,
        "lost_responses": tally.totals.lost_responses,
        "coverage": coverage,
    });
    let text = serde_json::to_string_pretty(&document).expect("the summary serializes") + "\n";
    std::fs::write(file, text).map_err(|error| {
        eprintln!(
            "oncecheck: cannot write the summary to {}: {error}",
            file.display()
        );
        ExitCode::from(2)
    })
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
