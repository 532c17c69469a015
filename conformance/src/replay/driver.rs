//! The replay driver (`oncecheck replay`): one step loop for every (model, target) pair.
//!
//! A replay walks a model path step by step and makes the real implementation take the same
//! step. What differs between targets is said by a [`ReplayTarget`]: which model it serves, when
//! it cannot show a trace (not applicable, with the reason), how it sets up the initial state,
//! how it performs one model action against the real code, and how it observes the real state in
//! the model's words. Everything else is the driver's ([`drive`]): loading the trace for the
//! target's model, the step loop, the comparison of the observed state with the model's after
//! set-up and after every step, the divergence report (file, step, action, expected, actual, the
//! command that replays it) and the tear-down, which runs whatever the outcome.
//!
//! Targets today: `memory` and `sqlite` (`crate::replay::log`, the logical level a locked log can
//! show) and `dynamodb[=URL]` (`crate::replay::dynamodb`, the real DynamoDB store through the
//! conformance proxy, request by request); `middleware-sqlite` and `middleware-postgres[=URL]`
//! (`crate::replay::middleware::target`, the idempotency layer over HTTP on a real database).
//!
//! A lasso (a liveness counterexample, `loop` in the trace) replays its prefix and one turn of its
//! cycle; the driver then checks that the real system shows the same view as where the cycle
//! started: the implementation can take the cycle again, forever.
//!
//! Invariants: a replay never passes a step it did not compare (the driver compares after every
//! step, a target cannot skip it); a trace the target cannot show is refused before anything
//! runs, never replayed partially; a trace of another model than the target's is bad input.

use oncecheck_model::ddb::OpId;
use oncecheck_model::trace::{from_itf, LoadedTrace, TraceEncoding};
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::path::{Path, PathBuf};

use crate::check::traces::{read_document, LoadError};

/// Where a replay runs, as `--target` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Memory,
    Sqlite,
    /// The DynamoDB endpoint behind the proxy; `None` means ONCECHECK_DDB_ENDPOINT.
    Dynamodb(Option<String>),
    /// Token-model traces on the reliable-write client, through the proxy's token table, on this
    /// endpoint (`crate::replay::token`); `None` means ONCECHECK_DDB_ENDPOINT.
    TokenedDynamodb(Option<String>),
    /// The idempotency layer on SQLite (`crate::replay::middleware::target`).
    MiddlewareSqlite,
    /// The idempotency layer on PostgreSQL; `None` means ONCECHECK_PG_URL.
    MiddlewarePostgres(Option<String>),
    /// The idempotency layer on its in-memory store (the store of its loom and shuttle tests).
    MiddlewareMemory,
}

/// Checks that an endpoint is an http(s) URL with a host, so a typo is bad input (exit 2)
/// before anything is contacted.
pub fn check_endpoint(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(host)
            if !host.is_empty()
                && !host.starts_with(':')
                && !host.contains(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "`{url}` is not an endpoint URL; expected http://HOST[:PORT] or https://HOST[:PORT]"
        )),
    }
}

impl std::str::FromStr for Target {
    type Err = String;

    fn from_str(text: &str) -> Result<Target, String> {
        match text.split_once('=') {
            None if text == "memory" => Ok(Target::Memory),
            None if text == "sqlite" => Ok(Target::Sqlite),
            None if text == "dynamodb" => Ok(Target::Dynamodb(None)),
            None if text == "tokened-dynamodb" => Ok(Target::TokenedDynamodb(None)),
            Some(("dynamodb", url)) => {
                check_endpoint(url).map_err(|reason| format!("target `{text}`: {reason}"))?;
                Ok(Target::Dynamodb(Some(url.to_string())))
            }
            Some(("tokened-dynamodb", url)) => {
                check_endpoint(url).map_err(|reason| format!("target `{text}`: {reason}"))?;
                Ok(Target::TokenedDynamodb(Some(url.to_string())))
            }
            None if text == "middleware-sqlite" => Ok(Target::MiddlewareSqlite),
            None if text == "middleware-postgres" => Ok(Target::MiddlewarePostgres(None)),
            None if text == "middleware-memory" => Ok(Target::MiddlewareMemory),
            Some(("middleware-postgres", url))
                if url.starts_with("postgres://") || url.starts_with("postgresql://") =>
            {
                Ok(Target::MiddlewarePostgres(Some(url.to_string())))
            }
            Some(("middleware-postgres", url)) => Err(format!(
                "target `{text}`: `{url}` is not a PostgreSQL URL; expected postgres://USER@HOST:PORT/DATABASE"
            )),
            _ => Err(format!(
                "unknown target `{text}`; valid targets: memory, sqlite, dynamodb, dynamodb=URL, tokened-dynamodb, tokened-dynamodb=URL, middleware-sqlite, middleware-postgres, middleware-postgres=URL, middleware-memory"
            )),
        }
    }
}

impl Target {
    /// The target's name without its URL, as the implemented-variant table names targets.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Memory => "memory",
            Target::Sqlite => "sqlite",
            Target::Dynamodb(_) => "dynamodb",
            Target::TokenedDynamodb(_) => "tokened-dynamodb",
            Target::MiddlewareSqlite => "middleware-sqlite",
            Target::MiddlewarePostgres(_) => "middleware-postgres",
            Target::MiddlewareMemory => "middleware-memory",
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
            Target::TokenedDynamodb(None) => write!(f, "tokened-dynamodb"),
            Target::TokenedDynamodb(Some(url)) => write!(f, "tokened-dynamodb={url}"),
            Target::MiddlewareSqlite => write!(f, "middleware-sqlite"),
            Target::MiddlewarePostgres(None) => write!(f, "middleware-postgres"),
            Target::MiddlewarePostgres(Some(url)) => write!(f, "middleware-postgres={url}"),
            Target::MiddlewareMemory => write!(f, "middleware-memory"),
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
    /// The `--target` value and any further flags that reproduce the run.
    pub target: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "divergence in {} at step {}: {}",
            self.file.display(),
            self.step,
            self.action
        )?;
        writeln!(f, "  expected: {}", self.expected)?;
        writeln!(f, "  actual:   {}", self.actual)?;
        write!(
            f,
            "  replay:   oncecheck replay {} --target {}",
            self.file.display(),
            self.target
        )
    }
}

/// Why a replay did not produce a verdict.
#[derive(Debug)]
pub enum ReplayError {
    /// The file is not a usable trace, or a trace of another model than the target's (exit 2).
    Load(LoadError),
    /// The target cannot reproduce what the trace shows; nothing was run (exit 2 unless
    /// `--only-replayable`).
    NotApplicable { file: PathBuf, reason: String },
    /// The implementation diverged from the model (exit 1).
    Diverged(Box<Divergence>),
    /// The environment failed mid-replay: a server stopped answering (exit 1).
    Environment { file: PathBuf, detail: String },
    /// The replay panicked: an assertion in the code under test (or in the replay) fired.
    /// Counted with the divergences (exit 1); the run goes on with the other traces.
    Panicked { file: PathBuf, message: String },
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Load(error) => write!(f, "{error}"),
            ReplayError::NotApplicable { file, reason } => {
                write!(f, "{}: not applicable: {reason}", file.display())
            }
            ReplayError::Diverged(divergence) => write!(f, "{divergence}"),
            ReplayError::Environment { file, detail } => write!(f, "{}: {detail}", file.display()),
            ReplayError::Panicked { file, message } => {
                write!(f, "{}: the replay panicked: {message}", file.display())
            }
        }
    }
}

/// What one replay did, for the summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayStats {
    pub steps: usize,
    /// Requests the real code made (store calls on memory/SQLite, DynamoDB requests otherwise).
    pub requests: usize,
    /// Responses the trace lost (the target made the real client see an unknown outcome).
    pub lost_responses: usize,
}

/// What went wrong in one target call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The real code answered otherwise than the model. `action` overrides the step's words when
    /// the difference belongs to something else (a push finishing at the end of the trace).
    Diverged {
        action: Option<String>,
        expected: String,
        actual: String,
    },
    /// The environment failed (a server stopped answering); not a verdict on the code.
    Environment(String),
}

impl Fault {
    pub fn diverged(expected: impl Into<String>, actual: impl Into<String>) -> Fault {
        Fault::Diverged {
            action: None,
            expected: expected.into(),
            actual: actual.into(),
        }
    }
}

/// One step of the path: `path[index]` --`action`--> `path[index + 1]`.
pub struct Step<'a, M: stateright::Model> {
    /// 0-based; reports say `index + 1`.
    pub index: usize,
    pub before: &'a M::State,
    pub action: &'a M::Action,
    pub after: &'a M::State,
}

/// A model whose traces can be replayed: its trace encoding, with the bounds on its state and
/// action spelled where the compiler carries them (associated-type bounds are implied, where
/// clauses on the model traits are not).
pub trait ReplayModel:
    TraceEncoding<
    State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    Action: Clone + Debug + PartialEq + Send + Sync + 'static,
>
{
}

impl<M> ReplayModel for M
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
}

/// A real implementation that replays traces of one model. One value per trace: the driver makes
/// it with the trace's file, sets it up, steps it and tears it down.
pub trait ReplayTarget: Send {
    /// The model whose traces this target replays; a trace of another model is bad input.
    type Model: ReplayModel;
    /// The real state in the model's words, compared with the model's after every step.
    type View: Clone + PartialEq + Debug + Send;

    /// `Err(reason)` when the target cannot reproduce what the trace shows (what its observers
    /// saw, an actor it does not have): the trace is not applicable, and nothing runs.
    fn applicable(&self, trace: &LoadedTrace<Self::Model>) -> Result<(), String>;

    /// The model state in the view's words.
    fn expected_view(
        &self,
        trace: &LoadedTrace<Self::Model>,
        state: &<Self::Model as stateright::Model>::State,
    ) -> Self::View;

    /// Builds the trace's initial state in the real system and starts its actors.
    fn set_up(
        &mut self,
        trace: &LoadedTrace<Self::Model>,
    ) -> impl Future<Output = Result<(), Fault>> + Send;

    /// Makes the real code take one model step; checks what that step alone shows (a request's
    /// items, an answer) and leaves the state comparison to the driver.
    fn perform(
        &mut self,
        trace: &LoadedTrace<Self::Model>,
        step: Step<'_, Self::Model>,
    ) -> impl Future<Output = Result<(), Fault>> + Send;

    /// The real state now, in the model's words.
    fn observe(&mut self) -> impl Future<Output = Result<Self::View, Fault>> + Send;

    /// At the end of the path: what the real actors answered (their pushes' results), then any
    /// refused input the target takes as the model's stutter (a request the spec refuses changes
    /// nothing), after which the target compares its view with the path's last state again.
    fn finish(
        &mut self,
        trace: &LoadedTrace<Self::Model>,
    ) -> impl Future<Output = Result<(), Fault>> + Send;

    /// Releases what the trace used (tables, proxies, tasks); runs whatever the outcome.
    fn tear_down(self) -> impl Future<Output = ()> + Send;

    /// `--target` and further flags that reproduce this replay.
    fn command_flags(&self) -> String;

    /// Requests the real code made so far, and responses lost so far.
    fn counts(&self) -> (usize, usize);
}

/// Reads `file` as a trace of `M` through the model crate's loader (which re-executes every
/// step); a trace of another model names both models.
pub fn load_for<M: ReplayModel>(file: &Path, target: &str) -> Result<LoadedTrace<M>, ReplayError> {
    let failure = |detail: String| {
        ReplayError::Load(LoadError {
            file: file.to_path_buf(),
            detail,
        })
    };
    let (document, header) = read_document(file).map_err(ReplayError::Load)?;
    if header.model != M::NAME {
        return Err(failure(format!(
            "traces of model `{}` cannot be replayed at target `{target}`, which replays `{}` traces",
            header.model,
            M::NAME
        )));
    }
    from_itf::<M>(&document).map_err(|error| failure(error.to_string()))
}

/// The words of step `index` of a path (the model's own protocol words).
pub fn describe_step<M: ReplayModel>(
    model: &M,
    path: &[(M::State, Option<M::Action>)],
    index: usize,
) -> String {
    match &path[index].1 {
        Some(action) => model.step_words(&path[index].0, action, &path[index + 1].0),
        None => "end of trace".to_string(),
    }
}

/// Replays one loaded trace on `target`: set-up, then every step, comparing the observed state
/// with the model's after set-up and after every step, then the actors' answers. The target is
/// torn down whatever the outcome.
pub async fn drive<T: ReplayTarget>(
    file: &Path,
    trace: &LoadedTrace<T::Model>,
    mut target: T,
) -> Result<ReplayStats, ReplayError> {
    if let Err(reason) = target.applicable(trace) {
        target.tear_down().await;
        return Err(ReplayError::NotApplicable {
            file: file.to_path_buf(),
            reason,
        });
    }
    let outcome = walk(file, trace, &mut target).await;
    let (requests, lost_responses) = target.counts();
    target.tear_down().await;
    outcome.map(|steps| ReplayStats {
        steps,
        requests,
        lost_responses,
    })
}

async fn walk<T: ReplayTarget>(
    file: &Path,
    trace: &LoadedTrace<T::Model>,
    target: &mut T,
) -> Result<usize, ReplayError> {
    let path = &trace.path;
    let report = |target: &T, step: usize, fault: Fault| -> ReplayError {
        let words = if step == 0 {
            "set-up of the initial state".to_string()
        } else {
            describe_step(&trace.model, path, step - 1)
        };
        match fault {
            Fault::Environment(detail) => ReplayError::Environment {
                file: file.to_path_buf(),
                detail: format!("step {step} ({words}): {detail}"),
            },
            Fault::Diverged {
                action,
                expected,
                actual,
            } => ReplayError::Diverged(Box::new(Divergence {
                file: file.to_path_buf(),
                step,
                action: action.unwrap_or(words),
                expected,
                actual,
                target: target.command_flags(),
            })),
        }
    };
    target
        .set_up(trace)
        .await
        .map_err(|fault| report(target, 0, fault))?;
    let mut observed = compare(target, trace, &path[0].0)
        .await
        .map_err(|fault| report(target, 0, fault))?;
    // A lasso: the view the real system showed where the cycle starts, which one turn of the
    // cycle must bring it back to.
    let mut loop_view = (trace.lasso_start == Some(0)).then(|| observed.clone());
    for index in 0..path.len() - 1 {
        let action = path[index]
            .1
            .as_ref()
            .expect("every state but the last has an action");
        let step = Step {
            index,
            before: &path[index].0,
            action,
            after: &path[index + 1].0,
        };
        target
            .perform(trace, step)
            .await
            .map_err(|fault| report(target, index + 1, fault))?;
        observed = compare(target, trace, &path[index + 1].0)
            .await
            .map_err(|fault| report(target, index + 1, fault))?;
        if trace.lasso_start == Some(index + 1) {
            loop_view = Some(observed.clone());
        }
    }
    let last = path.len() - 1;
    if let (Some(start), Some(loop_view)) = (trace.lasso_start, loop_view) {
        if observed != loop_view {
            let fault = Fault::Diverged {
                action: Some(format!(
                    "one turn of the cycle (steps {}-{last}) back to the state of step {start}",
                    start + 1
                )),
                expected: format!("state {loop_view:?}"),
                actual: format!("state {observed:?}"),
            };
            return Err(report(target, last, fault));
        }
    }
    target
        .finish(trace)
        .await
        .map_err(|fault| report(target, last, fault))?;
    Ok(last)
}

/// Observes the real state and compares it with the model's; answers what was observed.
pub async fn compare<T: ReplayTarget>(
    target: &mut T,
    trace: &LoadedTrace<T::Model>,
    state: &<T::Model as stateright::Model>::State,
) -> Result<T::View, Fault> {
    let expected = target.expected_view(trace, state);
    let actual = target.observe().await?;
    if expected == actual {
        Ok(actual)
    } else {
        Err(Fault::diverged(
            format!("state {expected:?}"),
            format!("state {actual:?}"),
        ))
    }
}

/// The real op id of a model op id: the label the trace files use.
pub fn real_op_id(op: OpId) -> String {
    oncecheck_model::relay::encoding::op_label(op)
}

/// DynamoDB's item size limit as AWS documents it (400 KB, attribute names and values counted):
/// the replays' own figure, never the store's, so that a store whose limit drifts parts from it.
const DYNAMODB_ITEM_BYTES_MAX: usize = 400 * 1024;
/// DynamoDB's partition key limit as AWS documents it: the longest stream id.
pub const DYNAMODB_PARTITION_KEY_BYTES_MAX: usize = 2048;
/// The most bytes DynamoDB counts for a number (38 significant digits): the `seq` key, counted
/// at its largest because an op may be stored at any seq.
const DYNAMODB_NUMBER_BYTES_MAX: usize = 21;
/// What pads a replay's stream id to the longest a stream id may be. Not a character of table
/// names, so a table named after its stream keeps only the stream's unique part.
const STREAM_PADDING: char = '.';
/// The op a replay realises at the largest size an op may have (every trace has it: the first
/// writer's first op).
const LARGEST_OP: OpId = 0;

/// How a replay realises the model's ops as bytes. The model's ops are abstract: any op the
/// store accepts is one. The replays take them at the edge of that domain where the target can
/// hold it, so that a store whose size limits drift from DynamoDB's parts from the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpSizes {
    /// Every payload a few bytes: the DynamoDB target, because moto counts a binary attribute by
    /// its base64 text and caps an item at 405,000 bytes, so an op DynamoDB stores at its
    /// 400 KB limit is one moto refuses.
    Small,
    /// [`LARGEST_OP`]'s item exactly at DynamoDB's item size limit, every other payload a few
    /// bytes (a page of the largest op and the rest stays well within one Query's 1 MB).
    LargestFirstOp,
}

/// The payload of the op labelled `op_label` (a real op id) on `stream`: the same bytes every
/// time, so a re-push carries the payload the first push stored.
pub fn payload_of(stream: &str, op_label: &str, sizes: OpSizes) -> Vec<u8> {
    let mut payload = format!("payload of {op_label}").into_bytes();
    if sizes == OpSizes::LargestFirstOp && op_label == real_op_id(LARGEST_OP) {
        payload.resize(largest_payload_bytes(stream, op_label), b'.');
    }
    payload
}

/// The real op of a model op on `stream`, its payload realised as `sizes` says.
pub fn new_op(stream: &str, op: OpId, sizes: OpSizes) -> oncecheck_store::NewOp {
    let op_id = real_op_id(op);
    let payload = payload_of(stream, &op_id, sizes);
    oncecheck_store::NewOp::new(op_id, payload)
}

/// Stored ops (a page, a log) in the model's words: seq and [`stored_op_in_words`].
pub fn stored_ops_in_words(
    stream: &str,
    ops: &[oncecheck_store::StoredOp],
    sizes: OpSizes,
) -> Vec<(i64, String)> {
    ops.iter()
        .map(|op| {
            (
                op.seq,
                stored_op_in_words(stream, &op.op_id, &op.payload, sizes),
            )
        })
        .collect()
}

/// A stored op in the model's words: its op id, followed by what is wrong with its payload when
/// it is not the bytes [`payload_of`] gave it (the model's ops carry their own payload, so any
/// other is a divergence the views show).
pub fn stored_op_in_words(stream: &str, op_id: &str, payload: &[u8], sizes: OpSizes) -> String {
    let expected = payload_of(stream, op_id, sizes);
    if payload == expected.as_slice() {
        return op_id.to_string();
    }
    let first_difference = payload
        .iter()
        .zip(&expected)
        .position(|(actual, expected)| actual != expected)
        .unwrap_or(payload.len().min(expected.len()));
    format!(
        "{op_id} with a payload of {} bytes, not its {} (first difference at byte {first_difference})",
        payload.len(),
        expected.len()
    )
}

/// The most payload bytes an op may carry on `stream`: the op item at exactly DynamoDB's item
/// size limit, counted as AWS documents it (each attribute's name plus its value; the op item
/// is `stream_id`, `seq`, `op_id`, `payload`, and is larger than the op's claim at this size).
pub fn largest_payload_bytes(stream: &str, op_label: &str) -> usize {
    let others = ["stream_id".len() + stream.len()]
        .into_iter()
        .chain(["seq".len() + DYNAMODB_NUMBER_BYTES_MAX])
        .chain(["op_id".len() + op_label.len()])
        .chain(["payload".len()])
        .sum::<usize>();
    DYNAMODB_ITEM_BYTES_MAX - others
}

/// A stream id no other replay in this process uses, exactly as long as a stream id may be:
/// its unique part, then [`STREAM_PADDING`] up to DynamoDB's partition key limit.
pub fn fresh_stream(file: &Path) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let stem = file
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or("trace");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut stream = format!("{}-{nanos}-", NEXT.fetch_add(1, Ordering::Relaxed));
    stream.extend(stem.chars().filter(|c| *c != STREAM_PADDING));
    stream.truncate(stream.floor_char_boundary(DYNAMODB_PARTITION_KEY_BYTES_MAX));
    let padding = DYNAMODB_PARTITION_KEY_BYTES_MAX - stream.len();
    stream.extend(std::iter::repeat_n(STREAM_PADDING, padding));
    assert_eq!(stream.len(), DYNAMODB_PARTITION_KEY_BYTES_MAX);
    stream
}

/// A stream id as messages print it: without its padding.
pub fn stream_in_words(stream: &str) -> &str {
    stream.trim_end_matches(STREAM_PADDING)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncecheck_store::limits::check_op_limits;
    use oncecheck_store::{NewOp, StoreError};

    /// The replays' op sizes sit exactly at the store's limits, counted as DynamoDB documents
    /// them: the largest op and the longest stream are accepted, one byte more of either is
    /// refused. A store whose limits drift from DynamoDB's fails here and in every replay.
    #[test]
    fn the_largest_op_and_stream_a_replay_uses_sit_exactly_at_the_store_s_limits() {
        let stream = fresh_stream(Path::new("some-trace.itf.json"));
        assert_eq!(stream.len(), DYNAMODB_PARTITION_KEY_BYTES_MAX);
        let largest = real_op_id(LARGEST_OP);
        let payload = payload_of(&stream, &largest, OpSizes::LargestFirstOp);
        assert!(payload.len() > 400_000, "{} bytes", payload.len());
        let op = NewOp::new(largest.clone(), payload.clone());
        assert!(check_op_limits(&stream, &op).is_ok());

        let mut one_more = payload;
        one_more.push(b'.');
        let over = check_op_limits(&stream, &NewOp::new(largest.clone(), one_more));
        assert!(matches!(over, Err(StoreError::TooLarge { .. })), "{over:?}");
        let longer_stream = format!("{stream}.");
        let small = NewOp::new(largest, b"payload".to_vec());
        let refused = check_op_limits(&longer_stream, &small);
        assert!(
            matches!(refused, Err(StoreError::InvalidInput { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn only_the_largest_op_is_large_and_only_where_the_target_holds_it() {
        let stream = fresh_stream(Path::new("t.itf.json"));
        let other = real_op_id(LARGEST_OP + 1);
        assert_eq!(
            payload_of(&stream, &other, OpSizes::LargestFirstOp),
            payload_of(&stream, &other, OpSizes::Small)
        );
        assert!(payload_of(&stream, &real_op_id(LARGEST_OP), OpSizes::Small).len() < 64);
        assert_ne!(
            payload_of(&stream, &real_op_id(LARGEST_OP), OpSizes::Small),
            payload_of(&stream, &other, OpSizes::Small)
        );
    }

    #[test]
    fn a_stored_op_is_its_op_id_only_with_its_own_payload() {
        let stream = fresh_stream(Path::new("t.itf.json"));
        let own = payload_of(&stream, "b", OpSizes::Small);
        assert_eq!(stored_op_in_words(&stream, "b", &own, OpSizes::Small), "b");
        let other = payload_of(&stream, "c", OpSizes::Small);
        assert_eq!(
            stored_op_in_words(&stream, "b", &other, OpSizes::Small),
            "b with a payload of 12 bytes, not its 12 (first difference at byte 11)"
        );
        assert_eq!(
            stored_op_in_words(&stream, "b", &own[..5], OpSizes::Small),
            "b with a payload of 5 bytes, not its 12 (first difference at byte 5)"
        );
        assert_eq!(stream_in_words(&stream).len(), stream.find('.').unwrap());
    }
}
