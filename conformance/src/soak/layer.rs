//! `oncecheck soak layer`: the idempotency layer, as an application mounts it, on a PostgreSQL
//! server of the soak's own, under concurrent clients while the schedule restarts the database;
//! then every key's effect is counted.
//!
//! What is checked (each a count that must be 0):
//! - **ran twice**: a key whose effect committed more than once;
//! - **never ran**: a key answered 2xx whose effect never committed;
//! - **answers differ**: two 2xx answers of one key (the original and a replay, or two clients
//!   sending it at once) naming different executions;
//! - **refused**: a key answered with a status a client cannot retry (422: the layer took the
//!   same request for another).
//!
//! Clients retry what a client of the layer retries (409 while the key is in flight, 5xx, a lost
//! connection) until a 2xx; a key is given up only when the run's time is up (a failure).
//!
//! The handler behind the layer is an [`EffectHandler`]: how its effect commits relative to the
//! layer's finalize is what exactly-once depends on. `external` commits the effect in a
//! transaction of its own before the layer finalizes; `atomic` runs it in the request's effect
//! transaction, which the layer commits with the cached response. Another kind plugs in as
//! another implementation without changing the clients or the checks.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Extension;
use axum::{Json, Router};
use bytes::Bytes;
use http::Method;
use oncecheck_idempotency::store::{PostgresEffect, PostgresStore};
use oncecheck_idempotency::{EffectScope, IdempotencyLayer, REPLAYED_HEADER};
use oncecheck_model::trace::SplitMix64;
use serde_json::{json, Value};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::task::JoinHandle;

use super::args::LayerArgs;
use super::http::HttpClient;
use super::latency::{per_second, Latencies};
use super::postgres::{PostgresServer, StopMode};
use super::schedule::{self, Fault};
use super::{progress_line, scratch_directory, Outcome};

/// The claim's lease in the soak: short, so that a claim a restart orphaned is retaken within
/// the run (the heartbeat renews it while its handler runs).
const LEASE_SECS: u64 = 10;
/// How long a request may wait for a database connection before the layer or the handler
/// answers 503: well under a restart, so clients see outages as 503s and retry.
const ACQUIRE_MILLIS_MAX: u64 = 2_000;
const CONNECTIONS_MAX: u32 = 16;
/// Pause before a client retries (409, 5xx, a lost connection).
const RETRY_PAUSE_MILLIS: u64 = 50;

/// A boxed, sendable future: what [`EffectHandler`]'s methods return, so it works as `dyn`.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The handler behind the layer in a soak: its effect, and how many times it committed.
pub trait EffectHandler: Send + Sync {
    /// Its name in the report (`--handler`).
    fn name(&self) -> &'static str;
    /// Creates what the handler needs in the database (its effect table); run before the app.
    fn prepare<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<(), String>>;
    /// The application: `POST /soak/{key}` behind the layer, mounted as this kind needs it.
    /// The answer to a 2xx names the execution (`{"key": K, "execution": E}`).
    fn app<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<Router, String>>;
    /// How many times each key's effect committed.
    fn executions<'a>(
        &'a self,
        pool: &'a PgPool,
    ) -> BoxFuture<'a, Result<BTreeMap<i64, i64>, String>>;
}

/// The handler's answer for `key`: 201 with the effect's execution number, or 503 when the
/// effect's database failed (a 5xx the layer never caches, so the client sends again).
fn effect_response<E>(key: i64, inserted: Result<i64, E>) -> Response {
    match inserted {
        Ok(execution) => (
            StatusCode::CREATED,
            Json(json!({"key": key, "execution": execution})),
        )
            .into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the effect's database failed",
        )
            .into_response(),
    }
}

/// The effect commits in a transaction of its own, before the layer finalizes: the kind every
/// handler of the layer's API is today. An outage between the two can leave the key to run
/// again (specs/idempotency-middleware.md, M1's remaining limit); so can an effect whose own
/// commit was acknowledged to nobody (the handler answers 503, which the layer never caches).
pub struct ExternalEffect;

async fn external_effect(State(pool): State<PgPool>, Path(key): Path<i64>) -> Response {
    let inserted = sqlx::query_scalar::<_, i64>(
        "INSERT INTO soak_effects (key) VALUES ($1) RETURNING execution",
    )
    .bind(key)
    .fetch_one(&pool)
    .await;
    effect_response(key, inserted)
}

impl EffectHandler for ExternalEffect {
    fn name(&self) -> &'static str {
        "external"
    }

    fn prepare<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS soak_effects (
                    execution BIGSERIAL PRIMARY KEY, key BIGINT NOT NULL)",
            )
            .execute(pool)
            .await
            .map(|_| ())
            .map_err(|error| format!("creating soak_effects: {error}"))
        })
    }

    fn app<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<Router, String>> {
        Box::pin(async move {
            let store = PostgresStore::new(pool.clone());
            store
                .migrate()
                .await
                .map_err(|error| format!("migrating the layer's table: {error}"))?;
            let layer = IdempotencyLayer::builder(store)
                .lease_secs(LEASE_SECS)
                .build();
            Ok(Router::new()
                .route("/soak/{key}", post(external_effect))
                .with_state(pool.clone())
                .route_layer(layer))
        })
    }

    fn executions<'a>(
        &'a self,
        pool: &'a PgPool,
    ) -> BoxFuture<'a, Result<BTreeMap<i64, i64>, String>> {
        Box::pin(async move {
            let rows: Vec<(i64, i64)> =
                sqlx::query_as("SELECT key, count(*) FROM soak_effects GROUP BY key")
                    .fetch_all(pool)
                    .await
                    .map_err(|error| format!("counting the effects: {error}"))?;
            Ok(rows.into_iter().collect())
        })
    }
}

/// The effect runs in the request's effect transaction, which the layer commits with the cached
/// response (specs/idempotency-middleware.md, "Atomic effects"): no outage can commit one without
/// the other.
pub struct AtomicEffect;

async fn atomic_effect(
    Extension(effects): Extension<EffectScope<PostgresEffect>>,
    Path(key): Path<i64>,
) -> Response {
    let inserted = async {
        let mut transaction = effects
            .transaction()
            .await
            .map_err(|error| error.to_string())?;
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO soak_effects (key) VALUES ($1) RETURNING execution",
        )
        .bind(key)
        .fetch_one(&mut **transaction)
        .await
        .map_err(|error| error.to_string())
    }
    .await;
    effect_response(key, inserted)
}

impl EffectHandler for AtomicEffect {
    fn name(&self) -> &'static str {
        "atomic"
    }

    fn prepare<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<(), String>> {
        ExternalEffect.prepare(pool)
    }

    fn app<'a>(&'a self, pool: &'a PgPool) -> BoxFuture<'a, Result<Router, String>> {
        Box::pin(async move {
            let store = PostgresStore::new(pool.clone());
            store
                .migrate()
                .await
                .map_err(|error| format!("migrating the layer's table: {error}"))?;
            let layer = IdempotencyLayer::builder(store)
                .lease_secs(LEASE_SECS)
                .build();
            Ok(Router::new()
                .route("/soak/{key}", post(atomic_effect))
                .route_layer(layer))
        })
    }

    fn executions<'a>(
        &'a self,
        pool: &'a PgPool,
    ) -> BoxFuture<'a, Result<BTreeMap<i64, i64>, String>> {
        ExternalEffect.executions(pool)
    }
}

fn handler_named(name: &str) -> Result<Box<dyn EffectHandler>, String> {
    match name {
        "external" => Ok(Box::new(ExternalEffect)),
        "atomic" => Ok(Box::new(AtomicEffect)),
        other => Err(format!(
            "unknown handler {other}; the handlers are: external, atomic"
        )),
    }
}

/// What the clients share.
struct Shared {
    client: HttpClient,
    base_url: String,
    keys: u64,
    duplicate_every: u64,
    next_key: AtomicU64,
    answered: AtomicU64,
    deadline: Instant,
    retries: AtomicU64,
}

/// What one client saw of the keys it sent.
#[derive(Default)]
struct ClientResult {
    /// key -> the executions its 2xx answers named.
    answers: BTreeMap<i64, Vec<i64>>,
    /// Keys that saw a 5xx from the handler or the layer before their 2xx.
    saw_errors: std::collections::BTreeSet<i64>,
    replays: u64,
    request_latencies: Latencies,
    key_latencies: Latencies,
    violations: Vec<String>,
    given_up: u64,
}

async fn client(shared: Arc<Shared>) -> ClientResult {
    let mut result = ClientResult::default();
    loop {
        let key = shared.next_key.fetch_add(1, Ordering::SeqCst);
        if key >= shared.keys {
            return result;
        }
        let key = key as i64;
        let twice =
            shared.duplicate_every > 0 && (key as u64).is_multiple_of(shared.duplicate_every);
        let started = Instant::now();
        let (mut one, mut other) = (ClientResult::default(), ClientResult::default());
        let answers = if twice {
            let (first, second) = tokio::join!(
                send_until_answered(&shared, key, &mut one),
                send_until_answered(&shared, key, &mut other)
            );
            vec![first, second]
        } else {
            vec![send_until_answered(&shared, key, &mut one).await]
        };
        // The senders of the key only recorded their requests' latencies and the 5xx they met.
        result.absorb(one);
        result.absorb(other);
        for answer in answers {
            record(&mut result, key, answer);
        }
        result.key_latencies.record(started.elapsed());
        shared.answered.fetch_add(1, Ordering::SeqCst);
    }
}

impl ClientResult {
    /// Adds what another client saw, or another sender of the same key.
    fn absorb(&mut self, other: ClientResult) {
        for (key, executions) in other.answers {
            self.answers.entry(key).or_default().extend(executions);
        }
        self.saw_errors.extend(other.saw_errors);
        self.replays += other.replays;
        self.request_latencies.extend(other.request_latencies);
        self.key_latencies.extend(other.key_latencies);
        self.violations.extend(other.violations);
        self.given_up += other.given_up;
    }
}

/// The outcome of sending one key until a 2xx.
enum Sent {
    Answered { execution: i64, replayed: bool },
    Refused(String),
    GivenUp,
}

fn record(result: &mut ClientResult, key: i64, sent: Sent) {
    match sent {
        Sent::Answered {
            execution,
            replayed,
        } => {
            result.replays += u64::from(replayed);
            result.answers.entry(key).or_default().push(execution);
        }
        Sent::Refused(what) => result.violations.push(what),
        Sent::GivenUp => result.given_up += 1,
    }
}

async fn send_until_answered(shared: &Shared, key: i64, side: &mut ClientResult) -> Sent {
    let url = format!("{}/soak/{key}", shared.base_url);
    let idempotency_key = format!("soak-{key}");
    loop {
        if Instant::now() >= shared.deadline {
            return Sent::GivenUp;
        }
        let sent = Instant::now();
        let answer = shared
            .client
            .send(
                Method::POST,
                &url,
                &[
                    ("idempotency-key", &idempotency_key),
                    ("content-type", "application/json"),
                ],
                Bytes::from_static(b"{}"),
            )
            .await;
        let retry = match answer {
            Ok(answer) if answer.status.is_success() => {
                side.request_latencies.record(sent.elapsed());
                let execution = serde_json::from_slice::<Value>(&answer.body)
                    .ok()
                    .and_then(|body| body.get("execution")?.as_i64());
                let replayed = answer
                    .headers
                    .get(REPLAYED_HEADER)
                    .is_some_and(|value| value == "true");
                return match execution {
                    Some(execution) => Sent::Answered {
                        execution,
                        replayed,
                    },
                    None => Sent::Refused(format!(
                        "key {key} was answered {} without its execution: {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    )),
                };
            }
            Ok(answer) if answer.status == StatusCode::CONFLICT => true,
            Ok(answer) if answer.status.is_server_error() => {
                side.saw_errors.insert(key);
                true
            }
            Ok(answer) => {
                return Sent::Refused(format!(
                    "key {key} was answered {}: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                ))
            }
            Err(_lost) => true,
        };
        if retry {
            shared.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
        }
    }
}

async fn pool_for(url: &str) -> Result<PgPool, String> {
    PgPoolOptions::new()
        .max_connections(CONNECTIONS_MAX)
        .acquire_timeout(Duration::from_millis(ACQUIRE_MILLIS_MAX))
        .connect(url)
        .await
        .map_err(|error| format!("PostgreSQL at {url}: {error}"))
}

/// Runs the soak; `Err` is an environment failure (exit 2), violations are in the outcome.
pub async fn run(args: &LayerArgs) -> Result<Outcome, String> {
    if args.keys == 0 || args.clients == 0 {
        return Err("--keys and --clients must be at least 1".into());
    }
    let mut soak = Soak::set_up(args).await?;
    let clients: Vec<_> = (0..args.clients)
        .map(|_| tokio::spawn(client(soak.shared.clone())))
        .collect();
    soak.restart_on_schedule(&clients).await?;
    let mut totals = ClientResult::default();
    for handle in clients {
        let result = handle
            .await
            .map_err(|error| format!("a client panicked: {error}"))?;
        totals.absorb(result);
    }
    let took = soak.started.elapsed();
    soak.serving.abort();
    let mut outcome = Outcome {
        violations: std::mem::take(&mut totals.violations),
        ..Outcome::default()
    };
    if totals.given_up > 0 {
        outcome.violations.push(format!(
            "{} keys were given up unanswered: the run did not finish within {} s",
            totals.given_up, args.seconds_max
        ));
    }
    if soak.restarts_done < args.restarts {
        outcome.violations.push(format!(
            "the schedule's restarts did not all strike: {} of {}",
            soak.restarts_done, args.restarts
        ));
    }
    // The database is up again (the last restart waited for its start): count the effects.
    let executions = soak.handler.executions(&soak.handler_pool).await?;
    check_keys(&mut outcome, args.keys, &executions, &totals);
    let exactly_once = (0..args.keys as i64)
        .filter(|key| executions.get(key) == Some(&1))
        .count();
    outcome.title = format!(
        "soak layer on PostgreSQL, handler {} (seed {})",
        soak.handler.name(),
        soak.seed
    );
    outcome.lines = soak.summary_lines(&outcome, &totals, exactly_once, took);
    soak.clean_up();
    Ok(outcome)
}

/// The run as set up: the database the schedule restarts, the app serving in front of it and
/// what its clients share.
struct Soak<'a> {
    args: &'a LayerArgs,
    seed: u64,
    handler: Box<dyn EffectHandler>,
    scratch: PathBuf,
    server: PostgresServer,
    handler_pool: PgPool,
    serving: JoinHandle<std::io::Result<()>>,
    shared: Arc<Shared>,
    started: Instant,
    restarts_done: u32,
}

impl<'a> Soak<'a> {
    /// Everything before the first key, in the order a failure should be met: the handler, the
    /// database, the handler's table and the app serving on a port of its own; the run's
    /// parameters announced before the clients start.
    async fn set_up(args: &'a LayerArgs) -> Result<Soak<'a>, String> {
        let seed = schedule::seed_or_clock(args.seed);
        let handler = handler_named(&args.handler)?;
        let scratch = scratch_directory("soak-layer")?;
        let server = PostgresServer::start(args.postgres_bin.as_deref(), &scratch)?;
        let url = server.url();
        // The layer's cache and the handler's effect each have a pool of their own, as two parts
        // of an application do; both on the one server the schedule restarts.
        let handler_pool = pool_for(&url).await?;
        handler.prepare(&handler_pool).await?;
        let app = handler.app(&handler_pool).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("the soak server cannot listen: {error}"))?;
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let serving = tokio::spawn(async move { axum::serve(listener, app).await });
        announce(args, seed, handler.name());
        let started = Instant::now();
        let shared = Arc::new(Shared {
            client: HttpClient::default(),
            base_url: format!("http://{address}"),
            keys: args.keys,
            duplicate_every: args.duplicate_every,
            next_key: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            deadline: started + Duration::from_secs(args.seconds_max),
            retries: AtomicU64::new(0),
        });
        Ok(Soak {
            args,
            seed,
            handler,
            scratch,
            server,
            handler_pool,
            serving,
            shared,
            started,
            restarts_done: 0,
        })
    }

    /// The fault schedule and the progress, until every client is done: PostgreSQL restarts at
    /// the schedule's points, each a fast or an immediate shutdown drawn from the seed.
    async fn restart_on_schedule(
        &mut self,
        clients: &[JoinHandle<ClientResult>],
    ) -> Result<(), String> {
        let args = self.args;
        let faults = schedule::draw(self.seed, args.keys, &[(Fault::Restart, args.restarts)]);
        let mut faults_left: VecDeque<(u64, Fault)> = faults.into();
        let mut random = SplitMix64::new(self.seed);
        let mut next_progress = 0u64;
        while !clients.iter().all(|client| client.is_finished()) {
            let answered = self.shared.answered.load(Ordering::SeqCst);
            if answered * 10 >= next_progress * args.keys {
                eprintln!(
                    "{}",
                    progress_line("keys answered", answered, args.keys, self.started)
                );
                next_progress = answered * 10 / args.keys + 1;
            }
            match faults_left.front() {
                Some(&(point, _)) if answered >= point => {
                    faults_left.pop_front();
                    let mode = if random.below(2) == 0 {
                        StopMode::Fast
                    } else {
                        StopMode::Immediate
                    };
                    tokio::task::block_in_place(|| {
                        self.server
                            .restart(mode, Duration::from_millis(args.down_millis))
                    })?;
                    self.restarts_done += 1;
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        Ok(())
    }

    /// The faults struck, the requests retried and replayed, the keys checked, throughput and
    /// latencies.
    fn summary_lines(
        &self,
        outcome: &Outcome,
        totals: &ClientResult,
        exactly_once: usize,
        took: Duration,
    ) -> Vec<String> {
        let args = self.args;
        vec![
            format!(
                "faults: {} restarts of PostgreSQL ({} ms down each, fast or immediate shutdown)",
                self.restarts_done, args.down_millis
            ),
            format!(
                "requests: {} retries (409 in flight, 5xx, lost connections), {} replays \
                 answered from the cache",
                self.shared.retries.load(Ordering::SeqCst),
                totals.replays
            ),
            format!(
                "checked: {} keys, {exactly_once} ran exactly once; ran twice {}, never ran {}, \
                 answers differ {}",
                args.keys,
                outcome.count("ran twice"),
                outcome.count("never ran"),
                outcome.count("answers differ")
            ),
            format!(
                "throughput: {:.0} keys/s ({} keys in {:.1} s, restarts included)",
                per_second(args.keys, took),
                args.keys,
                took.as_secs_f64()
            ),
            format!(
                "2xx request latency: {}",
                totals.request_latencies.summary()
            ),
            format!(
                "key latency (first send to 2xx, retries included): {}",
                totals.key_latencies.summary()
            ),
        ]
    }

    /// The database stopped before its directory goes: nothing a run started outlives it.
    fn clean_up(self) {
        let Soak {
            server, scratch, ..
        } = self;
        drop(server);
        let _ = std::fs::remove_dir_all(&scratch);
    }
}

/// The run's parameters on stderr before it starts, the seed first: what reproduces it.
fn announce(args: &LayerArgs, seed: u64, handler: &str) {
    eprintln!(
        "soak layer on PostgreSQL (seed {seed}): {} keys by {} clients (every {}th key sent by two \
         at once), handler {handler}, {} restarts with {} ms down, lease {LEASE_SECS} s",
        args.keys, args.clients, args.duplicate_every, args.restarts, args.down_millis
    );
}

/// Every key's effect against its 2xx answers: ran more than once, never ran though answered,
/// or answered two different executions.
fn check_keys(
    outcome: &mut Outcome,
    keys: u64,
    executions: &BTreeMap<i64, i64>,
    totals: &ClientResult,
) {
    for key in 0..keys as i64 {
        let ran = executions.get(&key).copied().unwrap_or(0);
        let seen = totals.answers.get(&key).cloned().unwrap_or_default();
        if ran > 1 {
            let cause = if totals.saw_errors.contains(&key) {
                "after a 5xx answer"
            } else {
                "without a 5xx answer"
            };
            outcome.report(
                "ran twice",
                format!("key {key}: its effect committed {ran} times ({cause})"),
            );
        }
        if ran == 0 && !seen.is_empty() {
            outcome.report(
                "never ran",
                format!("key {key} was answered 2xx but its effect never committed"),
            );
        }
        if seen.windows(2).any(|pair| pair[0] != pair[1]) {
            outcome.report(
                "answers differ",
                format!("key {key} was answered executions {seen:?}"),
            );
        }
    }
}
