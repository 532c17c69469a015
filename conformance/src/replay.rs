//! Trace replay against the real store (`oncecheck replay`).
//!
//! A replay walks a model path step by step and makes the real implementation take the same
//! step; after every step it compares what it can observe with the model state. The first
//! difference is a [`Divergence`] naming the step, the action, expected and actual, and the
//! command that replays it.
//!
//! Targets:
//! - `memory`, `sqlite`: the logical level those backends can show — every op the model stores
//!   is appended at the step the model commits it and must get the model's seq; every re-push
//!   answered from a claim must answer the model's seq; every pull must return the ops the model
//!   has committed above the cursor. They have no visibility window, no ADD-era writer and no
//!   burned seqs, so traces that need those are refused as a target mismatch.
//! - `dynamodb[=URL]`: the real DynamoDB store, unchanged, through the conformance proxy
//!   (`crate::proxy`), request by request (see `crate::replay_dynamodb`).
//!
//! Invariant: a replay never passes a step it did not compare; a trace the target cannot show
//! is refused before anything runs, never replayed partially.

use crate::traces::{LoadError, Loaded};
use oncecheck_model::ddb::OpId;
use oncecheck_model::relay::{Action, Build, Phase, RelayModel, RelayState};
use oncecheck_model::trace::LoadedTrace;
use oncecheck_store::{NewOp, OpStore, PushContext};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a replay runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Memory,
    Sqlite,
    /// The DynamoDB endpoint behind the proxy; `None` means ONCECHECK_DDB_ENDPOINT.
    Dynamodb(Option<String>),
}

impl std::str::FromStr for Target {
    type Err = String;

    fn from_str(text: &str) -> Result<Target, String> {
        match text.split_once('=') {
            None if text == "memory" => Ok(Target::Memory),
            None if text == "sqlite" => Ok(Target::Sqlite),
            None if text == "dynamodb" => Ok(Target::Dynamodb(None)),
            Some(("dynamodb", url)) if !url.is_empty() => Ok(Target::Dynamodb(Some(url.to_string()))),
            _ => Err(format!("unknown target `{text}`; valid targets: memory, sqlite, dynamodb, dynamodb=URL")),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Memory => write!(f, "memory"),
            Target::Sqlite => write!(f, "sqlite"),
            Target::Dynamodb(None) => write!(f, "dynamodb"),
            Target::Dynamodb(Some(url)) => write!(f, "dynamodb={url}"),
        }
    }
}

/// The real implementation did something the model did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub file: PathBuf,
    /// The model step (1-based; 0 is the set-up of the initial state).
    pub step: usize,
    pub action: String,
    pub expected: String,
    pub actual: String,
    pub target: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "divergence in {} at step {}: {}", self.file.display(), self.step, self.action)?;
        writeln!(f, "  expected: {}", self.expected)?;
        writeln!(f, "  actual:   {}", self.actual)?;
        write!(f, "  replay:   oncecheck replay {} --target {}", self.file.display(), self.target)
    }
}

/// Why a replay did not produce a verdict.
#[derive(Debug)]
pub enum ReplayError {
    /// The file is not a usable trace (exit 2).
    Load(LoadError),
    /// The trace needs something the target cannot show (exit 2).
    TargetMismatch { file: PathBuf, reason: String },
    /// The implementation diverged from the model (exit 1).
    Diverged(Box<Divergence>),
    /// The environment failed: the server is unreachable, a store error the trace did not
    /// predict at set-up (exit 1).
    Environment { file: PathBuf, detail: String },
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Load(error) => write!(f, "{error}"),
            ReplayError::TargetMismatch { file, reason } => write!(f, "{}: {reason}", file.display()),
            ReplayError::Diverged(divergence) => write!(f, "{divergence}"),
            ReplayError::Environment { file, detail } => write!(f, "{}: {detail}", file.display()),
        }
    }
}

/// What one replay did, for the summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayStats {
    pub steps: usize,
    /// Requests the real store made (store calls on memory/sqlite, DynamoDB requests otherwise).
    pub requests: usize,
}

/// The real op id of a model op id: the label the trace files use.
pub fn real_op_id(op: OpId) -> String {
    oncecheck_model::relay::encoding::op_label(op)
}

pub fn payload_of(op: OpId) -> Vec<u8> {
    format!("payload of {}", real_op_id(op)).into_bytes()
}

/// A stream id no other replay in this process uses.
pub fn fresh_stream(file: &Path) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let stem = file.file_stem().and_then(|stem| stem.to_str()).unwrap_or("trace");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{stem}-{}-{nanos}", NEXT.fetch_add(1, Ordering::Relaxed))
}

pub fn describe_step(model: &RelayModel, path: &[(RelayState, Option<Action>)], index: usize) -> String {
    use oncecheck_model::check::ModelSpec;
    match &path[index].1 {
        Some(action) => model.step_words(&path[index].0, action, &path[index + 1].0),
        None => "end of trace".to_string(),
    }
}

/// Replays one loaded relay trace against a logical backend (memory or SQLite).
pub async fn replay_logical(
    file: &Path,
    trace: &LoadedTrace<RelayModel>,
    store: &dyn OpStore,
    target: &Target,
) -> Result<ReplayStats, ReplayError> {
    let model = &trace.model;
    let path = &trace.path;
    let mismatch = |reason: &str| ReplayError::TargetMismatch { file: file.to_path_buf(), reason: format!("{reason}; replay it with --target dynamodb") };
    if (0..model.writers.len()).any(|writer| model.build_of(writer) == Build::AddEra) {
        return Err(mismatch("the trace has ADD-era writers, which only the DynamoDB store has"));
    }
    let initial = &path[0].0;
    if !initial.legacy_burned.is_empty() {
        return Err(mismatch("the trace starts with a burned seq (a legacy gap), which the memory and SQLite logs cannot hold"));
    }
    if path.iter().any(|(state, _)| state.writers.iter().any(|writer| matches!(writer.phase, Phase::Failed(_)))) {
        return Err(mismatch("an append in the trace fails on contention, which a locked log never shows"));
    }
    let stream = fresh_stream(file);
    let environment = |detail: String| ReplayError::Environment { file: file.to_path_buf(), detail };
    let mut stats = ReplayStats::default();
    for (seq, op) in initial.table.committed_ops() {
        let new_op = NewOp::new(real_op_id(op), payload_of(op));
        store.put_legacy_op(&stream, i64::from(seq), &new_op).await.map_err(|error| environment(format!("seeding legacy op {seq}: {error}")))?;
        stats.requests += 1;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut pushes: BTreeMap<u8, PushContext> = BTreeMap::new();
    for index in 0..path.len() - 1 {
        let (before, action) = (&path[index].0, path[index].1.expect("every state but the last has an action"));
        let after = &path[index + 1].0;
        let diverged = |expected: String, actual: String| {
            ReplayError::Diverged(Box::new(Divergence {
                file: file.to_path_buf(),
                step: index + 1,
                action: describe_step(model, path, index),
                expected,
                actual,
                target: target.to_string(),
            }))
        };
        // An op the model stores at this step, or answers from its claim at this step.
        let appended: Option<(u8, OpId, i64, bool)> = match action {
            Action::WriterSendsRound { writer } => match &after.writers[writer as usize].phase {
                Phase::Sent { round, outcome: oncecheck_model::ddb::TransactOutcome::Committed } => {
                    Some((writer, round.op, i64::from(round.seq), false))
                }
                _ => None,
            },
            Action::WriterReceivesResponse { writer } | Action::WriterReadsClaim { writer } => {
                let moved = after.writers[writer as usize].next_op != before.writers[writer as usize].next_op
                    || (after.writers[writer as usize].phase == Phase::Done && before.writers[writer as usize].phase != Phase::Done);
                let from_claim = !matches!(&before.writers[writer as usize].phase, Phase::Sent { outcome: oncecheck_model::ddb::TransactOutcome::Committed, .. });
                if moved && from_claim {
                    let push = &model.writers[writer as usize].1;
                    let op = push[before.writers[writer as usize].next_op as usize];
                    let seq = after.answers.get(&op).and_then(|seqs| seqs.iter().next()).copied().unwrap_or(0);
                    Some((writer, op, i64::from(seq), true))
                } else {
                    None
                }
            }
            Action::ResponseLost { writer } => {
                // The client re-pushes from the start: a new push context.
                pushes.remove(&writer);
                None
            }
            _ => None,
        };
        if let Some((writer, op, seq, existing)) = appended {
            let context = pushes.entry(writer).or_default();
            let new_op = NewOp::new(real_op_id(op), payload_of(op));
            stats.requests += 1;
            match store.append_op(&stream, &new_op, deadline, context).await {
                Ok(real) if real.seq == seq && real.existing == existing => {}
                Ok(real) => {
                    return Err(diverged(
                        format!("{} answered seq {seq}{}", real_op_id(op), if existing { " (existing)" } else { "" }),
                        format!("{} answered seq {}{}", real_op_id(op), real.seq, if real.existing { " (existing)" } else { "" }),
                    ))
                }
                Err(error) => return Err(diverged(format!("{} answered seq {seq}", real_op_id(op)), format!("error: {error}"))),
            }
        }
        if let Action::PullerQueries { puller } = action {
            let cursor = before.pullers[puller as usize].cursor;
            let limit = model.bounds.page_limit as usize;
            let expected: Vec<i64> = before.table.committed_ops().range(cursor.saturating_add(1)..).take(limit).map(|(seq, _)| i64::from(*seq)).collect();
            stats.requests += 1;
            let page = store.pull(&stream, i64::from(cursor), limit).await.map_err(|error| diverged(format!("page {expected:?}"), format!("error: {error}")))?;
            let actual: Vec<i64> = page.iter().map(|op| op.seq).collect();
            if actual != expected {
                return Err(diverged(format!("P{} page after {cursor}: {expected:?}", puller + 1), format!("{actual:?}")));
            }
        }
        stats.steps += 1;
    }
    // The whole log at the end: every committed op at its seq, nothing else.
    let last = &path[path.len() - 1].0;
    let expected: Vec<(i64, String)> = last.table.committed_ops().iter().map(|(seq, op)| (i64::from(*seq), real_op_id(*op))).collect();
    stats.requests += 1;
    let log = store.pull(&stream, 0, 1000).await.map_err(|error| environment(format!("final pull: {error}")))?;
    let actual: Vec<(i64, String)> = log.iter().map(|op| (op.seq, op.op_id.clone())).collect();
    if actual != expected {
        return Err(ReplayError::Diverged(Box::new(Divergence {
            file: file.to_path_buf(),
            step: path.len() - 1,
            action: "end of trace: the whole log".to_string(),
            expected: format!("{expected:?}"),
            actual: format!("{actual:?}"),
            target: target.to_string(),
        })));
    }
    Ok(stats)
}

/// Loads and replays one file against a logical target.
pub async fn replay_file_logical(file: &Path, store: &dyn OpStore, target: &Target) -> Result<ReplayStats, ReplayError> {
    let loaded = crate::traces::load(file).map_err(ReplayError::Load)?;
    match &loaded {
        Loaded::Relay(trace) => replay_logical(file, trace, store, target).await,
    }
}
