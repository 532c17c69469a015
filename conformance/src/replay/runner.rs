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
                Err(ReplayError::Diverged(_)
                    | ReplayError::Environment { .. }
                    | ReplayError::Panicked { .. })
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
                let Some((file, _)) = traces.get(index) else {
                    break;
                };
                let file = file.clone();
                // Its own task, so that a panic (an assertion in the code under test) is this
                // trace's outcome: in the worker it ended the worker, and every later outcome
                // waited behind the one never sent and was silently dropped.
                let replay = {
                    let (session, traces) = (session.clone(), traces.clone());
                    tokio::spawn(async move {
                        let (file, trace) = &traces[index];
                        session.replay(file, trace).await
                    })
                };
                let result = match replay.await {
                    Ok(result) => result,
                    Err(error) => Err(ReplayError::Panicked {
                        file,
                        message: panic_message(error),
                    }),
                };
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

/// What a replay task that did not finish said: its panic's message, or that it was cancelled.
pub(crate) fn panic_message(error: tokio::task::JoinError) -> String {
    if !error.is_panic() {
        return format!("the replay task ended: {error}");
    }
    let panic = error.into_panic();
    panic
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::transitions::{Covered, Group};
    use std::collections::BTreeSet;
    use std::path::Path;

    /// A session whose traces are verdicts: `Ok`, a divergence-free panic, or an environment
    /// failure, so the runner's bookkeeping is seen without a real target.
    struct Scripted;

    #[derive(Clone, Copy)]
    enum Verdict {
        Conforms,
        Panics,
        Fails,
    }

    impl Covered for Verdict {
        fn group(&self) -> Group {
            Group::new(
                "scripted",
                "only",
                &oncecheck_model::check::Bounds(Default::default()),
            )
        }
        fn transitions(&self) -> BTreeSet<String> {
            BTreeSet::new()
        }
        fn reachable(&self) -> BTreeSet<String> {
            BTreeSet::new()
        }
    }

    impl ReplaySession for Scripted {
        type Trace = Verdict;
        fn load(&self, _file: &Path) -> Result<Verdict, ReplayError> {
            unreachable!("the tests hand the runner loaded traces")
        }
        async fn replay(&self, file: &Path, trace: &Verdict) -> Result<ReplayStats, ReplayError> {
            match trace {
                Verdict::Conforms => Ok(ReplayStats::default()),
                Verdict::Panics => panic!("an assertion in the code under test"),
                Verdict::Fails => Err(ReplayError::Environment {
                    file: file.to_path_buf(),
                    detail: "scripted".to_string(),
                }),
            }
        }
        async fn close(self) {}
    }

    fn traces(verdicts: &[Verdict]) -> Vec<(PathBuf, Verdict)> {
        verdicts
            .iter()
            .enumerate()
            .map(|(index, verdict)| (PathBuf::from(format!("trace-{index}")), *verdict))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replay_that_panics_is_its_traces_failure_and_every_later_outcome_is_still_reported()
    {
        use Verdict::*;
        let given = traces(&[Conforms, Panics, Conforms, Conforms, Conforms]);
        for jobs in [1, 3] {
            let mut reported = Vec::new();
            let outcomes = replay_all(
                Arc::new(Scripted),
                given.clone(),
                jobs,
                StopAt::Never,
                |file, _| reported.push(file.clone()),
            )
            .await;
            assert_eq!(outcomes.len(), 5, "jobs {jobs}");
            assert_eq!(
                reported,
                given
                    .iter()
                    .map(|(file, _)| file.clone())
                    .collect::<Vec<_>>()
            );
            match &outcomes[1].1 {
                Err(ReplayError::Panicked { file, message }) => {
                    assert_eq!(file, &PathBuf::from("trace-1"));
                    assert_eq!(message, "an assertion in the code under test");
                }
                other => panic!("jobs {jobs}: {other:?}"),
            }
            assert!(outcomes
                .iter()
                .enumerate()
                .all(|(index, (_, result))| index == 1 || result.is_ok()));
        }
    }

    #[tokio::test]
    async fn fail_fast_reports_a_prefix_ending_at_the_first_failure_with_one_job() {
        use Verdict::*;
        for failing in [Panics, Fails] {
            let given = traces(&[Conforms, failing, Conforms, Conforms]);
            let outcomes = replay_all(
                Arc::new(Scripted),
                given.clone(),
                1,
                StopAt::FirstFailure,
                |_, _| {},
            )
            .await;
            assert_eq!(outcomes.len(), 2);
            assert!(outcomes[0].1.is_ok());
            assert!(outcomes[1].1.is_err());
            let every = replay_all(Arc::new(Scripted), given, 1, StopAt::Never, |_, _| {}).await;
            assert_eq!(every.len(), 4);
        }
    }
}
