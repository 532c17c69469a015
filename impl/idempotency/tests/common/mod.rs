//! The integration harness: a scripted handler behind the layer, real databases, row readers.
//!
//! PostgreSQL comes from ONCECHECK_PG_URL (start it with scripts/services.sh); when it is unset
//! every PostgreSQL test FAILS with a message saying so. Nothing is skipped. Each test gets its
//! own throwaway database (PostgreSQL) or file (SQLite). A test that stops the database runs its
//! own cluster (`private_postgres`); a test that speaks HTTP over TCP uses `http_client`.
#![allow(dead_code)]

pub mod http_client;
pub mod private_postgres;

use axum::body::Body as AxumBody;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use oncecheck_idempotency::store::{CacheStore, PostgresStore, SqliteStore};
use oncecheck_idempotency::{IdempotencyLayer, IdempotencyLayerBuilder, LiveBody, ManualClock};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tower::ServiceExt;

pub const CAP: usize = 1024;
pub const START_MILLIS: i64 = 1_700_000_000_000;

/// Byte `i` of every scripted body, so a test can tell a complete body from a truncated one.
pub fn pattern(start: usize, length: usize) -> Vec<u8> {
    (start..start + length)
        .map(|index| (index % 251) as u8)
        .collect()
}

/// One step of a scripted response body.
#[derive(Clone, Debug)]
pub enum Step {
    Data(usize),
    /// Wait until the test releases this gate (one permit per release).
    Gate(usize),
    Error,
    Trailers,
}

/// What the handler does, per request run.
#[derive(Clone, Debug)]
pub struct Script {
    pub status: StatusCode,
    pub steps: Vec<Step>,
    /// Wait on this gate before returning the response at all (a handler still "running").
    pub gate_before_response: Option<usize>,
    /// Set HTTP/1.0, an extension, a custom header and a handler-set replay marker.
    pub decorate: bool,
}

impl Script {
    pub fn ok(steps: Vec<Step>) -> Script {
        Script {
            status: StatusCode::OK,
            steps,
            gate_before_response: None,
            decorate: false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ExtensionMarker(pub u32);

pub struct Handler {
    pub runs: AtomicUsize,
    /// One script per run; the last one repeats.
    pub scripts: Mutex<Vec<Script>>,
    pub gates: Vec<Arc<Semaphore>>,
    /// Frames the handler has produced so far, all runs together.
    pub frames_sent: AtomicUsize,
}

impl Handler {
    pub fn new(scripts: Vec<Script>) -> Arc<Handler> {
        Arc::new(Handler {
            runs: AtomicUsize::new(0),
            scripts: Mutex::new(scripts),
            gates: (0..4).map(|_| Arc::new(Semaphore::new(0))).collect(),
            frames_sent: AtomicUsize::new(0),
        })
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub fn release(&self, gate: usize) {
        self.gates[gate].add_permits(1);
    }

    fn next_script(&self) -> Script {
        let mut scripts = self.scripts.lock().unwrap();
        if scripts.len() > 1 {
            scripts.remove(0)
        } else {
            scripts[0].clone()
        }
    }

    async fn respond(self: Arc<Self>, request: Request<AxumBody>) -> Response<AxumBody> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let script = self.next_script();
        let _ = request.into_body().collect().await;
        if let Some(gate) = script.gate_before_response {
            self.gates[gate].acquire().await.unwrap().forget();
        }
        let handler = self.clone();
        let steps = script.steps.clone();
        let stream = futures_util::stream::unfold(
            (steps.into_iter(), 0usize),
            move |(mut steps, offset)| {
                let handler = handler.clone();
                async move {
                    loop {
                        match steps.next()? {
                            Step::Data(length) => {
                                handler.frames_sent.fetch_add(1, Ordering::SeqCst);
                                let frame = Frame::data(Bytes::from(pattern(offset, length)));
                                return Some((
                                    Ok::<_, std::io::Error>(frame),
                                    (steps, offset + length),
                                ));
                            }
                            Step::Gate(gate) => {
                                handler.gates[gate].acquire().await.unwrap().forget()
                            }
                            Step::Error => {
                                return Some((
                                    Err(std::io::Error::other("scripted body error")),
                                    (steps, offset),
                                ))
                            }
                            Step::Trailers => {
                                let mut trailers = HeaderMap::new();
                                trailers.insert("x-checksum", "abc".parse().unwrap());
                                return Some((Ok(Frame::trailers(trailers)), (steps, offset)));
                            }
                        }
                    }
                }
            },
        );
        let mut response = Response::new(AxumBody::new(StreamBody::new(stream)));
        *response.status_mut() = script.status;
        response
            .headers_mut()
            .insert("x-handler", "scripted".parse().unwrap());
        if script.decorate {
            *response.version_mut() = http::Version::HTTP_10;
            response.extensions_mut().insert(ExtensionMarker(7));
            response
                .headers_mut()
                .insert("idempotency-replayed", "true".parse().unwrap());
            response
                .headers_mut()
                .append("set-cookie", "a=1".parse().unwrap());
            response
                .headers_mut()
                .append("set-cookie", "b=2".parse().unwrap());
        }
        response
    }
}

/// What a test needs from a store beyond the layer's trait: read the sole row, break finalize.
pub trait TestStore: CacheStore {
    async fn sole_row(&self) -> Option<RowView>;
    async fn row_count(&self) -> i64;
    /// A BEFORE UPDATE trigger that raises when a row turns `succeeded` (the database fault the body-integrity fix was made for).
    async fn break_success_finalize(&self);
    /// A short hiccup: the next `count` updates that turn a row `succeeded` fail, later ones
    /// apply (a counter the failing statement cannot roll back: RAISE(FAIL), a sequence).
    async fn fail_next_success_finalizes(&self, count: u32);
    /// Closes the pool and removes the throwaway database (called after a passing test; a
    /// failing one leaves its database behind for inspection).
    async fn teardown(self);
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowView {
    pub status: String,
    pub generation: i64,
    pub body_too_large: bool,
    pub body: Option<Vec<u8>>,
    pub response_status: Option<i32>,
}

const ROW_SQL: &str = "SELECT status, generation, body_too_large, response_body, response_status FROM idempotency_keys";

macro_rules! row_view {
    ($row:expr) => {{
        use sqlx::Row;
        let row = $row;
        RowView {
            status: row.get("status"),
            generation: row.get("generation"),
            body_too_large: row.get("body_too_large"),
            body: row.get("response_body"),
            response_status: row.get("response_status"),
        }
    }};
}

impl TestStore for SqliteStore {
    async fn teardown(self) {
        let path = self.pool().connect_options().get_filename().to_path_buf();
        self.pool().close().await;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    async fn sole_row(&self) -> Option<RowView> {
        let rows = sqlx::query(ROW_SQL).fetch_all(self.pool()).await.unwrap();
        assert!(
            rows.len() <= 1,
            "expected at most one row, found {}",
            rows.len()
        );
        rows.into_iter().next().map(|row| row_view!(row))
    }

    async fn row_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    async fn break_success_finalize(&self) {
        sqlx::raw_sql(
            "CREATE TRIGGER refuse_success BEFORE UPDATE ON idempotency_keys
             WHEN NEW.status = 'succeeded'
             BEGIN SELECT RAISE(ABORT, 'injected finalize failure'); END;",
        )
        .execute(self.pool())
        .await
        .unwrap();
    }

    async fn fail_next_success_finalizes(&self, count: u32) {
        sqlx::raw_sql(&format!(
            "CREATE TABLE hiccup (failures_left INTEGER NOT NULL);
             INSERT INTO hiccup VALUES ({count});
             CREATE TRIGGER hiccup BEFORE UPDATE ON idempotency_keys
             WHEN NEW.status = 'succeeded' AND (SELECT failures_left FROM hiccup) > 0
             BEGIN UPDATE hiccup SET failures_left = failures_left - 1;
                   SELECT RAISE(FAIL, 'injected hiccup'); END;"
        ))
        .execute(self.pool())
        .await
        .unwrap();
    }
}

impl TestStore for PostgresStore {
    async fn teardown(self) {
        let name = self
            .pool()
            .connect_options()
            .get_database()
            .map(str::to_string);
        self.pool().close().await;
        if let Some(name) = name {
            let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
            sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
        }
    }

    async fn sole_row(&self) -> Option<RowView> {
        let rows = sqlx::query(ROW_SQL).fetch_all(self.pool()).await.unwrap();
        assert!(
            rows.len() <= 1,
            "expected at most one row, found {}",
            rows.len()
        );
        rows.into_iter().next().map(|row| row_view!(row))
    }

    async fn row_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    async fn break_success_finalize(&self) {
        sqlx::raw_sql(
            "CREATE FUNCTION refuse_success() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'injected finalize failure'; END $$;
             CREATE TRIGGER refuse_success BEFORE UPDATE ON idempotency_keys
             FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION refuse_success();",
        )
        .execute(self.pool())
        .await
        .unwrap();
    }

    async fn fail_next_success_finalizes(&self, count: u32) {
        // nextval is not rolled back with the failing statement, so it counts the attempts.
        sqlx::raw_sql(&format!(
            "CREATE SEQUENCE hiccup;
             CREATE FUNCTION hiccup() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF nextval('hiccup') <= {count} THEN RAISE EXCEPTION 'injected hiccup'; END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER hiccup BEFORE UPDATE ON idempotency_keys
             FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION hiccup();"
        ))
        .execute(self.pool())
        .await
        .unwrap();
    }
}

static DATABASE_COUNTER: AtomicUsize = AtomicUsize::new(0);

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        DATABASE_COUNTER.fetch_add(1, Ordering::SeqCst),
        nanos % 1_000_000
    )
}

/// A fresh SQLite database file with WAL and a busy timeout, so concurrent claims queue.
pub async fn sqlite_store(connections_max: u32) -> SqliteStore {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    let directory = std::env::temp_dir().join("oncecheck-idempotency-tests");
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("{}.db", unique_name("idem")));
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new()
        .max_connections(connections_max)
        .connect_with(options)
        .await
        .unwrap();
    let store = SqliteStore::new(pool);
    store.migrate().await.unwrap();
    store
}

pub fn postgres_url() -> String {
    std::env::var("ONCECHECK_PG_URL").unwrap_or_else(|_| {
        panic!(
            "ONCECHECK_PG_URL is not set: these tests need a real PostgreSQL. Run them with \
             `bash -c 'source scripts/services.sh; start_postgres; cargo test -p oncecheck-idempotency; services_down'`"
        )
    })
}

/// Creates a fresh database on the server of ONCECHECK_PG_URL; returns its URL.
pub async fn fresh_postgres_database() -> String {
    use sqlx::postgres::PgPoolOptions;
    let admin_url = postgres_url();
    let name = unique_name("idem");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin_url)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to ONCECHECK_PG_URL={admin_url}: {error}"));
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let base = admin_url
        .rsplit_once('/')
        .map_or(admin_url.as_str(), |(base, _)| base);
    format!("{base}/{name}")
}

/// Drops a database made by [`fresh_postgres_database`].
pub async fn drop_postgres_database(url: &str) {
    let name = url
        .rsplit_once('/')
        .map(|(_, name)| name.to_string())
        .unwrap();
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
}

/// A fresh SQLite database path (the file does not exist yet).
pub fn fresh_sqlite_path() -> std::path::PathBuf {
    let directory = std::env::temp_dir().join("oncecheck-idempotency-tests");
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(format!("{}.db", unique_name("demo")))
}

/// A fresh PostgreSQL database on the server of ONCECHECK_PG_URL.
pub async fn postgres_store(connections_max: u32) -> PostgresStore {
    use sqlx::postgres::PgPoolOptions;
    let url = fresh_postgres_database().await;
    let pool = PgPoolOptions::new()
        .max_connections(connections_max)
        .connect(&url)
        .await
        .unwrap();
    let store = PostgresStore::new(pool);
    store.migrate().await.unwrap();
    store
}

/// The layer as the tests build it; `IDEM_BEHAVIOUR=pre-fix|fixed` (with the `test-seams`
/// feature) swaps in a behaviour without a fix so a test can be shown to fail without it.
pub fn layer_builder<St: CacheStore>(
    store: St,
    clock: &ManualClock,
) -> IdempotencyLayerBuilder<St> {
    let builder = IdempotencyLayer::builder(store)
        .body_bytes_max(CAP)
        .lease_secs(30)
        .row_ttl_secs(3600)
        .clock(clock.clone());
    #[cfg(feature = "test-seams")]
    let builder = match std::env::var("IDEM_BEHAVIOUR").as_deref() {
        Ok("pre-fix") => builder.behaviour(oncecheck_idempotency::Behaviour::PreFix),
        Ok("fixed") => builder.behaviour(oncecheck_idempotency::Behaviour::Fixed),
        _ => builder,
    };
    builder
}

pub fn app<St: CacheStore>(layer: IdempotencyLayer<St>, handler: Arc<Handler>) -> Router {
    let route_handler = handler.clone();
    Router::new()
        .route(
            "/transfers",
            axum::routing::post(move |request: Request<AxumBody>| {
                route_handler.clone().respond(request)
            }),
        )
        // As applications should mount it: after routing, so unknown routes are 404.
        .route_layer(layer)
}

pub fn post(key: Option<&str>, body: &'static str) -> Request<AxumBody> {
    let mut builder = Request::builder().method("POST").uri("/transfers");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(AxumBody::from(body)).unwrap()
}

/// Everything a client received: status, headers, data, trailers, and whether the body failed.
#[derive(Debug)]
pub struct Received {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub data: Vec<u8>,
    pub trailers: Option<HeaderMap>,
    pub body_error: bool,
    pub version: http::Version,
    pub extension: Option<u32>,
}

impl Received {
    pub fn replayed(&self) -> Option<&str> {
        self.headers
            .get("idempotency-replayed")
            .map(|value| value.to_str().unwrap())
    }

    /// The problem type's fragment (`in-flight`, `request-too-large`, ...) of a problem body.
    pub fn problem_kind(&self) -> Option<String> {
        http_client::problem_kind(&self.data)
    }
}

pub async fn receive(response: Response<AxumBody>) -> Received {
    let (parts, mut body) = response.into_parts();
    let mut data = Vec::new();
    let mut trailers = None;
    let mut body_error = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(bytes) => data.extend_from_slice(&bytes),
                Err(frame) => trailers = frame.into_trailers().ok(),
            },
            Err(_) => {
                body_error = true;
                break;
            }
        }
    }
    Received {
        status: parts.status,
        extension: parts
            .extensions
            .get::<ExtensionMarker>()
            .map(|marker| marker.0),
        headers: parts.headers,
        data,
        trailers,
        body_error,
        version: parts.version,
    }
}

pub async fn send(app: &Router, request: Request<AxumBody>) -> Received {
    let response = tokio::time::timeout(Duration::from_secs(20), app.clone().oneshot(request))
        .await
        .expect("the layer answered within 20 s")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), receive(response))
        .await
        .expect("the body ended within 20 s")
}

/// Waits until the sole row is no longer `processing` (the drop guard finalizes in the background).
pub async fn wait_terminal<St: TestStore>(store: &St) -> Option<RowView> {
    for _ in 0..200 {
        let row = store.sole_row().await;
        if row.as_ref().is_some_and(|row| row.status != "processing") {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.sole_row().await
}

pub fn _unused(_: LiveBody) {}
