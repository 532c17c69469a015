//! `oncecheck replay TRACE... --target T [--jobs N]`: loads every file first (a file that is not
//! a usable trace of the target's model stops the run before anything is replayed), replays the
//! traces, `jobs` at a time, prints one line per trace in the order given and a summary (traces,
//! steps, requests, lost responses, seconds), and answers the exit code: 0 all replayed without
//! divergence, 1 a divergence or an environment failure mid-run, 2 bad input (a file, a target
//! that cannot be reached, a trace the target cannot show without `--only-replayable`).

use crate::replay::{ReplayError, ReplayStats, Target};
use crate::replay_dynamodb::StoreConfig;
use crate::replay_middleware::target::{LayerConfig, MiddlewareSession};
use crate::replay_session::Session;
use oncecheck_store::dynamodb::Mutation;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Concurrent replays at most: each holds a proxy with a listener per actor and a table.
pub const JOBS_MAX: usize = 64;

/// Parses `--store-variant`, `--store-mutation` and `--lose-by`, naming the valid choices on
/// error.
pub fn store_config(
    store_variant: Option<String>,
    mutations: &[String],
    lose_by: Option<&str>,
) -> Result<StoreConfig, String> {
    let lose_by = lose_by.map(str::parse).transpose()?.unwrap_or_default();
    if let Some(variant) = &store_variant {
        if !["add-era", "counter-only", "fixed", "mixed"].contains(&variant.as_str()) {
            return Err(format!(
                "unknown store variant `{variant}`; valid: add-era, counter-only, fixed, mixed"
            ));
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
    Ok(StoreConfig {
        store_variant,
        mutations,
        lose_by,
    })
}

/// How the real side of a target is configured: the relay store's build, or the idempotency
/// layer's behaviour and mutations.
#[derive(Debug, Clone)]
pub enum TargetConfig {
    Store(StoreConfig),
    Layer(LayerConfig),
}

/// What a run keeps across its traces, for one model's targets: how a file is loaded as a trace
/// of the target's model, and how one trace is replayed on a database (table, stream) of its own.
pub trait ReplaySession: Send + Sync + 'static {
    type Trace: Send + Sync + 'static;
    /// Reads a trace of the model this session's target serves.
    fn load(&self, file: &Path) -> Result<Self::Trace, ReplayError>;
    /// Replays one loaded trace.
    fn replay(
        &self,
        file: &Path,
        trace: &Self::Trace,
    ) -> impl Future<Output = Result<ReplayStats, ReplayError>> + Send;
    /// Releases what the session holds (files, pools).
    fn close(self) -> impl Future<Output = ()> + Send;
    /// What a successful replay of `trace` shows beyond "no divergence" (a counterexample
    /// reproduced on the real system), printed on its `ok` line.
    fn reproduction(&self, _trace: &Self::Trace) -> Option<String> {
        None
    }
}

/// Checks `--jobs`: 1..=JOBS_MAX.
pub fn check_jobs(jobs: usize) -> Result<usize, String> {
    if (1..=JOBS_MAX).contains(&jobs) {
        Ok(jobs)
    } else {
        Err(format!("--jobs {jobs}: valid range 1..={JOBS_MAX}"))
    }
}

pub fn run(
    files: &[PathBuf],
    target: &Target,
    config: TargetConfig,
    only_replayable: bool,
    jobs: usize,
    junit: Option<&Path>,
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
    runtime.block_on(run_all(files, target, config, only_replayable, jobs, junit))
}

/// The result of every trace, in the order of `files`.
pub type Outcomes = Vec<(PathBuf, Result<ReplayStats, ReplayError>)>;

/// Replays loaded traces `jobs` at a time; `report` sees each outcome in the order given, as
/// soon as it and every earlier one are done.
pub async fn replay_all<S: ReplaySession>(
    session: Arc<S>,
    traces: Vec<(PathBuf, S::Trace)>,
    jobs: usize,
    mut report: impl FnMut(&PathBuf, &Result<ReplayStats, ReplayError>),
) -> Outcomes {
    let count = traces.len();
    let traces = Arc::new(traces);
    let next = Arc::new(AtomicUsize::new(0));
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..jobs.min(count.max(1)) {
        let (session, traces, next, sender) = (
            session.clone(),
            traces.clone(),
            next.clone(),
            sender.clone(),
        );
        workers.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some((file, trace)) = traces.get(index) else {
                    break;
                };
                let result = session.replay(file, trace).await;
                if sender.send((index, result)).is_err() {
                    break;
                }
            }
        });
    }
    drop(sender);
    let mut done: BTreeMap<usize, Result<ReplayStats, ReplayError>> = BTreeMap::new();
    let mut outcomes: Outcomes = Vec::with_capacity(count);
    while let Some((index, result)) = receiver.recv().await {
        done.insert(index, result);
        while let Some(result) = done.remove(&outcomes.len()) {
            let file = traces[outcomes.len()].0.clone();
            report(&file, &result);
            outcomes.push((file, result));
        }
    }
    while workers.join_next().await.is_some() {}
    outcomes
}

async fn run_all(
    files: &[PathBuf],
    target: &Target,
    config: TargetConfig,
    only_replayable: bool,
    jobs: usize,
    junit: Option<&Path>,
) -> ExitCode {
    let started = Instant::now();
    let unreachable = |detail: String| {
        eprintln!("oncecheck: cannot reach the {target} target: {detail}");
        ExitCode::from(2)
    };
    match config {
        TargetConfig::Layer(config) => match MiddlewareSession::open(target, config).await {
            Ok(session) => {
                run_session(
                    Arc::new(session),
                    files,
                    target,
                    only_replayable,
                    jobs,
                    started,
                    junit,
                )
                .await
            }
            Err(detail) => unreachable(detail),
        },
        TargetConfig::Store(config) => match Session::open_with(target, config).await {
            Ok(session) => {
                run_session(
                    Arc::new(session),
                    files,
                    target,
                    only_replayable,
                    jobs,
                    started,
                    junit,
                )
                .await
            }
            Err(detail) => unreachable(detail),
        },
    }
}

async fn run_session<S: ReplaySession>(
    session: Arc<S>,
    files: &[PathBuf],
    target: &Target,
    only_replayable: bool,
    jobs: usize,
    started: Instant,
    junit: Option<&Path>,
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
    if let Some(file) = junit {
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
    let document = crate::replay_junit::replay_document(
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
