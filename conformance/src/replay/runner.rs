//! The job runner of a replay run: loaded traces replayed `jobs` at a time on one session, each
//! outcome handed on in the order the traces were given.
//!
//! Invariants: at most `JOBS_MAX` replays at once; every outcome is reported exactly once, and
//! only after every earlier one; the traces replayed are always a prefix of those given (a
//! stopped run starts no trace after one it did not start).

use crate::replay::driver::{ReplayError, ReplayStats};
use crate::replay::session::ReplaySession;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Concurrent replays at most: each holds a proxy with a listener per actor and a table.
pub const JOBS_MAX: usize = 64;

/// Checks `--jobs`: 1..=JOBS_MAX.
pub fn check_jobs(jobs: usize) -> Result<usize, String> {
    if (1..=JOBS_MAX).contains(&jobs) {
        Ok(jobs)
    } else {
        Err(format!("--jobs {jobs}: valid range 1..={JOBS_MAX}"))
    }
}

/// The result of every trace, in the order of `files`.
pub type Outcomes = Vec<(PathBuf, Result<ReplayStats, ReplayError>)>;

/// When a run stops before its last trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// Every trace is replayed, whatever the outcomes.
    Never,
    /// `--fail-fast`: no trace starts after a divergence or an environment failure (those
    /// already running finish and are reported), so a failing run ends in the time of its
    /// first failure rather than of every trace.
    FirstFailure,
}

impl StopAt {
    fn stops_on(self, result: &Result<ReplayStats, ReplayError>) -> bool {
        self == StopAt::FirstFailure
            && matches!(
                result,
                Err(ReplayError::Diverged(_) | ReplayError::Environment { .. })
            )
    }
}

/// Replays loaded traces `jobs` at a time; `report` sees each outcome in the order given, as
/// soon as it and every earlier one are done. The outcomes are those of a prefix of `traces`:
/// all of them unless `stop_at` ended the run early.
pub async fn replay_all<S: ReplaySession>(
    session: Arc<S>,
    traces: Vec<(PathBuf, S::Trace)>,
    jobs: usize,
    stop_at: StopAt,
    mut report: impl FnMut(&PathBuf, &Result<ReplayStats, ReplayError>),
) -> Outcomes {
    let count = traces.len();
    let traces = Arc::new(traces);
    let next = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..jobs.min(count.max(1)) {
        let (session, traces, next, stopped, sender) = (
            session.clone(),
            traces.clone(),
            next.clone(),
            stopped.clone(),
            sender.clone(),
        );
        workers.spawn(async move {
            loop {
                // Checked before the index is taken, and indexes are taken in order, so the
                // traces started stay a prefix.
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some((file, trace)) = traces.get(index) else {
                    break;
                };
                let result = session.replay(file, trace).await;
                if stop_at.stops_on(&result) {
                    stopped.store(true, Ordering::SeqCst);
                }
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
    assert!(
        outcomes.len() == count || stop_at == StopAt::FirstFailure,
        "{} of {count} outcomes without a stop",
        outcomes.len()
    );
    outcomes
}
