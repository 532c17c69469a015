//! The job runner of a replay run: loaded traces replayed `jobs` at a time on one session, each
//! outcome handed on in the order the traces were given.
//!
//! Invariants: at most `JOBS_MAX` replays at once; every outcome is reported exactly once, and
//! only after every earlier one.

use crate::replay::driver::{ReplayError, ReplayStats};
use crate::replay::session::ReplaySession;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
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
