//! oncecheck-relay: push and pull of op batches over HTTP, on any [`OpStore`] backend.
//!
//! # Wire protocol
//!
//! - `POST /v1/streams/{stream}/ops` with `{"ops": [{"op_id": "...", "payload": "..."}, ...]}`
//!   answers `200 {"stream", "results": [{"op_id", "seq", "existing"}]}`, one result per op in
//!   request order. A re-push answers each op's first seq (`existing: true`).
//! - `GET /v1/streams/{stream}/ops?after=K&limit=N` answers `200 {"stream", "ops": [{"seq",
//!   "op_id", "payload"}], "cursor"}`: the ops with seq > K in seq order, at most N, and the cursor
//!   to store (the last seq returned, else K). `after` defaults to 0, `limit` to
//!   [`Limits::pull_limit_default`].
//!
//! # Errors
//!
//! Every error is an `application/problem+json` body (RFC 9457: `type`, `title`, `status`,
//! `detail`); a push that stopped part-way adds `stored`, the ops that are stored (kept: the
//! client's re-push answers them again from their claims).
//!
//! | status | type suffix | when |
//! |---|---|---|
//! | 400 | `malformed-json` | the body is not the push JSON shape |
//! | 400 | `invalid-cursor` | `after` is not an integer >= 0 |
//! | 400 | `invalid-limit` | `limit` is not an integer in 1..=pull_limit_max |
//! | 404 | `not-found` | no such route |
//! | 405 | `method-not-allowed` | the route exists, the method does not |
//! | 409 | `op-id-conflict` | an op_id is stored with another payload; `seq` names where; nothing stored, unless another writer claimed it after the push's claim check (`stored` lists the ops before it) |
//! | 413 | `payload-too-large` | body over body_bytes_max or more ops than ops_per_push_max |
//! | 413 | `op-too-large` | one op exceeds the item size (DynamoDB's 400 KB, on every backend); nothing stored |
//! | 414 | `uri-too-long` | a request line longer than the server parses ([`listener`]) |
//! | 415 | `unsupported-media-type` | a push whose Content-Type is not `application/json` |
//! | 422 | `empty-batch`, `invalid-op-id`, `invalid-stream`, `invalid-input` | unusable input |
//! | 422 | `duplicate-op-id` | one op_id twice in a push; nothing stored |
//! | 431 | `header-fields-too-large` | a request head over the server's limits ([`listener`]) |
//! | 503 | `deadline-exceeded` | the deadline passed; `stored` lists what is kept |
//! | 503 | `no-progress` | the push deadline passed before any new op was stored |
//! | 503 | `contention` | too many lost rounds in a row; `stored` lists what is kept |
//! | 503 | `backend-unavailable` | the store's backend did not answer, retried in place |
//! | 500 | `store-failure` | a bug or corrupt data; `stored` lists what is kept |
//!
//! Every 503 carries `Retry-After`. A client treats every push status except 409, 413, 415 and
//! 422 alike: nothing is marked pushed, the next pass re-pushes, and the claims make that safe.
//! 413 means "split the batch"; 409, 415 and 422 mean "fix the request".
//!
//! `detail` is a stable message written for the client; the raw error behind a 500 or a 503 is
//! in the relay's log (tracing), never in a response.
//!
//! Invariant: a handler never stores anything before the request is fully validated (the store
//! checks the whole batch against its own limits before its first write too), so a refused
//! request loses nothing and stores nothing.

use std::sync::Arc;
use std::time::Duration;

pub mod listener;
pub use listener::ProblemListener;

use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use oncecheck_store::{
    BatchOutcome, NewOp, OpStore, Seq, StoreError, StoredOp, PULL_DEADLINE_SECS_DEFAULT,
    PUSH_DEADLINE_ENV, PUSH_DEADLINE_SECS_DEFAULT,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;

/// The relay's limits, each named with its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest push body accepted; above it, 413.
    pub body_bytes_max: usize,
    /// Most ops in one push; above it, 413.
    pub ops_per_push_max: usize,
    /// Longest op_id, in UTF-8 bytes; above it, 422.
    pub op_id_bytes_max: usize,
    /// Longest stream id, in UTF-8 bytes; above it, 422.
    pub stream_id_bytes_max: usize,
    /// Largest `limit` of a pull; above it, 400.
    pub pull_limit_max: usize,
    /// The `limit` of a pull that names none.
    pub pull_limit_default: usize,
    /// Time a push may take; past it, 503 with what was stored kept.
    pub push_deadline_secs: u64,
    /// Time a pull may take, retrying transient backend errors; past it, 503.
    pub pull_deadline_secs: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_bytes_max: 1024 * 1024,
            ops_per_push_max: 500,
            op_id_bytes_max: 128,
            stream_id_bytes_max: 256,
            pull_limit_max: 1000,
            pull_limit_default: 100,
            push_deadline_secs: PUSH_DEADLINE_SECS_DEFAULT,
            pull_deadline_secs: PULL_DEADLINE_SECS_DEFAULT,
        }
    }
}

/// Parses the push deadline from the environment variable's value (None: unset -> default).
pub fn push_deadline_secs_from(value: Option<&str>) -> Result<u64, String> {
    match value {
        None => Ok(PUSH_DEADLINE_SECS_DEFAULT),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(0) => Err(format!(
                "{PUSH_DEADLINE_ENV}=0: the push deadline must be at least 1 second"
            )),
            Ok(secs) => Ok(secs),
            Err(_) => Err(format!(
                "{PUSH_DEADLINE_ENV}={text:?} is not a whole number of seconds"
            )),
        },
    }
}

/// The shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn OpStore>,
    pub limits: Limits,
}

/// The relay's routes over `store`, with `limits`.
pub fn router(store: Arc<dyn OpStore>, limits: Limits) -> Router {
    let body_bytes_max = limits.body_bytes_max;
    let state = AppState { store, limits };
    Router::new()
        .route("/v1/streams/{stream}/ops", post(push).get(pull))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .fallback(|| async {
            Problem::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "Not found",
                "no such route",
            )
        })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
                "this route answers POST (push) and GET (pull)",
            )
        })
        .layer(DefaultBodyLimit::max(body_bytes_max))
        .with_state(state)
}

/// An RFC 9457 problem response.
#[derive(Debug, Clone)]
pub struct Problem {
    status: StatusCode,
    body: serde_json::Map<String, serde_json::Value>,
}

/// The prefix of every problem `type`.
pub const PROBLEM_TYPE_PREFIX: &str = "urn:oncecheck:relay:";

impl Problem {
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Problem {
        let mut body = serde_json::Map::new();
        body.insert("type".into(), json!(format!("{PROBLEM_TYPE_PREFIX}{slug}")));
        body.insert("title".into(), json!(title));
        body.insert("status".into(), json!(status.as_u16()));
        body.insert("detail".into(), json!(detail.into()));
        Problem { status, body }
    }

    fn with(mut self, name: &str, value: serde_json::Value) -> Problem {
        self.body.insert(name.into(), value);
        self
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let retry = self.status == StatusCode::SERVICE_UNAVAILABLE;
        let mut response =
            (self.status, Json(serde_json::Value::Object(self.body))).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PushRequest {
    ops: Vec<PushOp>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PushOp {
    op_id: String,
    payload: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, Clone)]
pub struct PushResult {
    pub op_id: String,
    pub seq: Seq,
    pub existing: bool,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, Clone)]
pub struct PushResponse {
    pub stream: String,
    pub results: Vec<PushResult>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, Clone)]
pub struct PulledOp {
    pub seq: Seq,
    pub op_id: String,
    pub payload: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, Clone)]
pub struct PullResponse {
    pub stream: String,
    pub ops: Vec<PulledOp>,
    pub cursor: Seq,
}

#[derive(Debug, Deserialize)]
struct PullParams {
    after: Option<String>,
    limit: Option<String>,
}

fn check_stream(stream: &str, limits: &Limits) -> Result<(), Problem> {
    if stream.is_empty() || stream.len() > limits.stream_id_bytes_max {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-stream",
            "Invalid stream id",
            format!(
                "a stream id has 1 to {} bytes; this one has {}",
                limits.stream_id_bytes_max,
                stream.len()
            ),
        ));
    }
    Ok(())
}

fn path_problem(rejection: PathRejection) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-stream",
        "Invalid stream id",
        rejection.body_text(),
    )
}

/// Validates the whole push before anything is stored.
fn parse_push(body: &[u8], limits: &Limits) -> Result<Vec<NewOp>, Problem> {
    let request: PushRequest = serde_json::from_slice(body).map_err(|error| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "Malformed push",
            format!(
                "expected {{\"ops\": [{{\"op_id\": string, \"payload\": string}}, ...]}}: {error}"
            ),
        )
    })?;
    if request.ops.is_empty() {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty-batch",
            "Empty batch",
            "a push carries at least one op",
        ));
    }
    if request.ops.len() > limits.ops_per_push_max {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Push too large",
            format!(
                "a push carries at most {} ops; this one has {}: split it",
                limits.ops_per_push_max,
                request.ops.len()
            ),
        ));
    }
    for (index, op) in request.ops.iter().enumerate() {
        if op.op_id.is_empty() || op.op_id.len() > limits.op_id_bytes_max {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-op-id",
                "Invalid op_id",
                format!(
                    "ops[{index}].op_id has {} bytes; an op_id has 1 to {} bytes",
                    op.op_id.len(),
                    limits.op_id_bytes_max
                ),
            ));
        }
    }
    Ok(request
        .ops
        .into_iter()
        .map(|op| NewOp::new(op.op_id, op.payload.into_bytes()))
        .collect())
}

fn results_of(ops: &[NewOp], outcome: &BatchOutcome) -> Vec<PushResult> {
    // The answers are zipped with the ops: an answer too many, or one missing from a push that
    // did not stop, would be dropped here without a word.
    assert!(
        outcome.appended.len() <= ops.len(),
        "the store answered {} ops of a push of {}",
        outcome.appended.len(),
        ops.len()
    );
    //= specs/relay-append.md#R6
    //# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
    assert!(
        outcome.error.is_some() || outcome.appended.len() == ops.len(),
        "a push of {} ops ended without an error after {} answers",
        ops.len(),
        outcome.appended.len()
    );
    ops.iter()
        .zip(&outcome.appended)
        .map(|(op, appended)| PushResult {
            op_id: op.op_id.clone(),
            seq: appended.seq,
            existing: appended.existing,
        })
        .collect()
}

/// Which request a store error ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Push,
    Pull,
}

/// The problem a store error answers. `detail` is the store error's own stable message for what
/// the client can act on; a 500 says only that the log has it.
fn store_problem(error: &StoreError, request: Request) -> Problem {
    let retry = match request {
        Request::Push => "the ops listed in `stored` are kept; re-push the batch",
        Request::Pull => "retry the pull",
    };
    let unavailable = |slug: &str, title: &str| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            slug,
            title,
            format!("{error}; {retry}"),
        )
    };
    match error {
        StoreError::DeadlineExceeded => unavailable("deadline-exceeded", "Deadline exceeded"),
        StoreError::NoProgress => unavailable("no-progress", "No new op stored"),
        StoreError::ContentionBudgetExhausted { .. } => {
            unavailable("contention", "Stream contended")
        }
        StoreError::Unavailable { .. } => unavailable("backend-unavailable", "Store unavailable"),
        StoreError::PayloadConflict { seq, .. } => Problem::new(
            StatusCode::CONFLICT,
            "op-id-conflict",
            "op_id reused",
            format!("{error}; an op_id names one op: give the new op a new op_id"),
        )
        .with("seq", json!(seq)),
        StoreError::DuplicateOpId { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "duplicate-op-id",
            "Duplicate op_id",
            format!("{error}; nothing was stored"),
        ),
        StoreError::TooLarge { .. } => Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "op-too-large",
            "Op too large",
            format!("{error}; nothing was stored"),
        ),
        StoreError::InvalidInput { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "Invalid input",
            format!("{error}; nothing was stored"),
        ),
        StoreError::SeqOverflow { .. }
        | StoreError::ClaimForeign { .. }
        | StoreError::ClaimVanished { .. }
        | StoreError::Backend { .. } => {
            tracing::error!(%error, "store failure");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store-failure",
                "Store failure",
                "the store failed unexpectedly; the relay's log has the error",
            )
        }
    }
}

/// The media type a push body must declare (parameters such as `charset` are allowed).
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
async fn push(
    State(state): State<AppState>,
    stream: Result<Path<String>, PathRejection>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Path(stream) = match stream {
        Ok(stream) => stream,
        Err(rejection) => return path_problem(rejection).into_response(),
    };
    if let Err(problem) = check_stream(&stream, &state.limits) {
        return problem.into_response();
    }
    if !is_json(headers.get(header::CONTENT_TYPE)) {
        return Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "a push body is JSON: send it with Content-Type: application/json",
        )
        .into_response();
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Push too large",
                format!(
                    "a push body has at most {} bytes: split it",
                    state.limits.body_bytes_max
                ),
            )
            .into_response()
        }
        Err(rejection) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                "malformed-json",
                "Unreadable body",
                rejection.body_text(),
            )
            .into_response()
        }
    };
    let ops = match parse_push(&body, &state.limits) {
        Ok(ops) => ops,
        Err(problem) => return problem.into_response(),
    };
    let deadline = Instant::now() + Duration::from_secs(state.limits.push_deadline_secs);
    let outcome = state.store.append_batch(&stream, &ops, deadline).await;
    let results = results_of(&ops, &outcome);
    match &outcome.error {
        None => Json(PushResponse { stream, results }).into_response(),
        Some(error) => {
            tracing::warn!(%stream, stored = results.len(), ops = ops.len(), %error, "push stopped");
            store_problem(error, Request::Push)
                .with("stored", json!(results))
                .into_response()
        }
    }
}

fn parse_cursor(text: Option<&str>) -> Result<Seq, Problem> {
    let Some(text) = text else { return Ok(0) };
    match text.parse::<Seq>() {
        Ok(after) if after >= 0 => Ok(after),
        _ => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-cursor",
            "Invalid cursor",
            format!("after={text:?}: a cursor is a whole number >= 0 (the last seq received)"),
        )),
    }
}

fn parse_limit(text: Option<&str>, limits: &Limits) -> Result<usize, Problem> {
    let Some(text) = text else {
        return Ok(limits.pull_limit_default);
    };
    match text.parse::<usize>() {
        Ok(limit) if (1..=limits.pull_limit_max).contains(&limit) => Ok(limit),
        _ => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-limit",
            "Invalid limit",
            format!(
                "limit={text:?}: a limit is a whole number from 1 to {}",
                limits.pull_limit_max
            ),
        )),
    }
}

/// The cursor a pull answers: the page's last seq, or `after` for an empty page.
//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq
//# <= k.
fn cursor_after(after: Seq, ops: &[StoredOp]) -> Seq {
    // The page must run upwards from above `after`, or the cursor would pass (or go back over)
    // ops the page left out. One comparison per op of a page the store has just read: no cost
    // worth a debug-only check.
    assert!(
        ops.first().is_none_or(|first| first.seq > after),
        "a page after seq {after} starts at seq {:?}",
        ops.first().map(|op| op.seq)
    );
    assert!(
        ops.windows(2).all(|pair| pair[0].seq < pair[1].seq),
        "a page after seq {after} is not in ascending seq order"
    );
    ops.last().map_or(after, |op| op.seq)
}

async fn pull(
    State(state): State<AppState>,
    stream: Result<Path<String>, PathRejection>,
    params: Result<Query<PullParams>, QueryRejection>,
) -> Response {
    let Path(stream) = match stream {
        Ok(stream) => stream,
        Err(rejection) => return path_problem(rejection).into_response(),
    };
    if let Err(problem) = check_stream(&stream, &state.limits) {
        return problem.into_response();
    }
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-cursor",
                "Invalid query",
                rejection.body_text(),
            )
            .into_response()
        }
    };
    let (after, limit) = match (
        parse_cursor(params.after.as_deref()),
        parse_limit(params.limit.as_deref(), &state.limits),
    ) {
        (Ok(after), Ok(limit)) => (after, limit),
        (Err(problem), _) | (_, Err(problem)) => return problem.into_response(),
    };
    let deadline = Instant::now() + Duration::from_secs(state.limits.pull_deadline_secs);
    match state
        .store
        .pull_within(&stream, after, limit, deadline)
        .await
    {
        Ok(ops) => {
            let cursor = cursor_after(after, &ops);
            let ops = ops
                .into_iter()
                .map(|op| PulledOp {
                    seq: op.seq,
                    op_id: op.op_id,
                    payload: String::from_utf8_lossy(&op.payload).into_owned(),
                })
                .collect();
            Json(PullResponse {
                stream,
                ops,
                cursor,
            })
            .into_response()
        }
        Err(error) => {
            tracing::warn!(%stream, after, %error, "pull failed");
            store_problem(&error, Request::Pull).into_response()
        }
    }
}

/// Which backend the relay runs on: `memory`, `sqlite:PATH` or `dynamodb:TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    Memory,
    Sqlite { path: String },
    DynamoDb { table: String },
}

impl std::str::FromStr for StoreSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<StoreSpec, String> {
        let valid = "valid stores: memory, sqlite:PATH, dynamodb:TABLE";
        match text.split_once(':') {
            None if text == "memory" => Ok(StoreSpec::Memory),
            Some(("sqlite", path)) if !path.is_empty() => Ok(StoreSpec::Sqlite {
                path: path.to_owned(),
            }),
            Some(("dynamodb", table)) if !table.is_empty() => Ok(StoreSpec::DynamoDb {
                table: table.to_owned(),
            }),
            _ => Err(format!("unknown store {text:?}; {valid}")),
        }
    }
}

/// The environment variable naming the DynamoDB endpoint URL (unset: the SDK's default).
pub const DDB_ENDPOINT_ENV: &str = "ONCECHECK_DDB_ENDPOINT";

/// Opens the backend `spec` names. For DynamoDB, `endpoint_url` overrides the SDK's endpoint and
/// `create_table` creates the table first (tests, first runs).
pub async fn open_store(
    spec: &StoreSpec,
    endpoint_url: Option<&str>,
    create_table: bool,
) -> Result<Arc<dyn OpStore>, StoreError> {
    Ok(match spec {
        StoreSpec::Memory => Arc::new(oncecheck_store::MemoryStore::new()),
        StoreSpec::Sqlite { path } => Arc::new(oncecheck_store::SqliteStore::open(path).await?),
        StoreSpec::DynamoDb { table } => {
            let store = oncecheck_store::DynamoDbStore::connect(table.clone(), endpoint_url).await;
            if create_table {
                store.create_table().await?;
            }
            Arc::new(store)
        }
    })
}

/// Resolves on ctrl-c or SIGTERM: the server then stops accepting and finishes what it serves.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_env_parses_whole_seconds_and_refuses_the_rest() {
        assert_eq!(push_deadline_secs_from(None), Ok(20));
        assert_eq!(push_deadline_secs_from(Some("7")), Ok(7));
        assert_eq!(push_deadline_secs_from(Some(" 30 ")), Ok(30));
        assert!(push_deadline_secs_from(Some("0")).is_err());
        assert!(push_deadline_secs_from(Some("-1")).is_err());
        assert!(push_deadline_secs_from(Some("2.5")).is_err());
        assert!(push_deadline_secs_from(Some("soon")).is_err());
    }

    #[test]
    fn store_specs_parse_and_unknown_ones_list_the_valid_forms() {
        assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
        assert_eq!(
            "sqlite:/tmp/x.db".parse(),
            Ok(StoreSpec::Sqlite {
                path: "/tmp/x.db".into()
            })
        );
        assert_eq!(
            "dynamodb:ops".parse(),
            Ok(StoreSpec::DynamoDb {
                table: "ops".into()
            })
        );
        for bad in ["", "sqlite:", "dynamodb:", "postgres:x", "memory:x"] {
            let error = bad.parse::<StoreSpec>().unwrap_err();
            assert!(
                error.contains("memory, sqlite:PATH, dynamodb:TABLE"),
                "{error}"
            );
        }
    }
}
