//! Issue 18's experiment, as a test: six transfers have run their handler's effect, then
//! PostgreSQL stops while each finalize is in flight and stays down for about 5 s. Before the
//! atomic and fail-closed work every key then ran twice (6 of 6). Here it runs over HTTP (the
//! layer under `axum::serve` on loopback TCP, hyper's client) against a private PostgreSQL
//! (`common::private_postgres`), in three configurations at once, one database each:
//!
//! - `atomic`: the transfer's effect (a row of `transfers`) in the request's `EffectScope`
//!   transaction, the default re-run policy: the outage rolls effect and row back together, the
//!   retry after the lease is the one run that commits: 0 double executions;
//! - `fail-closed`: the effect in an external ledger (a SQLite file, not the cache's database),
//!   the layer built `fail_closed()`: after the lease the six keys are held `outcome-unknown`,
//!   nothing re-runs, and the `ReconcileHook` reading the ledger settles them: 0 re-runs;
//! - `re-run`, the control: the same external ledger under the default policy re-runs every key
//!   after the lease (6 of 6 twice): the experiment does split effect from finalize, and the
//!   policy is what keeps `fail-closed` to one run.
//!
//! The finalizes are in flight by construction, not by timing: a trigger makes every statement
//! that turns a row `succeeded` sleep inside PostgreSQL (`HOLD_SECS`), and PostgreSQL is
//! stopped only once all 18 finalize statements wait inside it (`pg_stat_activity`). The lease is
//! on a `ManualClock`, so crossing it costs nothing; the test takes about 8 s, 5 of them the
//! outage. `--nocapture` prints the figures.

mod common;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use common::http_client::{self, Answer};
use common::private_postgres::PrivatePostgres;
use common::START_MILLIS;
use http::{HeaderMap, StatusCode};
use oncecheck_idempotency::store::{PostgresEffect, PostgresStore};
use oncecheck_idempotency::{
    CacheKey, EffectScope, IdempotencyLayer, ManualClock, ReconcileHook, ReconcileReport,
};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::SqlitePool;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Transfers in flight per configuration (the experiment's six).
const TRANSFERS: usize = 6;
/// The least time PostgreSQL stays down (the experiment's "about 5 s").
const OUTAGE_SECS_MIN: u64 = 5;
/// The lease, on the layer's manual clock.
const LEASE_SECS: u64 = 30;
/// The statement limit and the finalize budget of this test's layers. Each finalize's first
/// statement waits inside PostgreSQL until the stop; no client-side timer may end it first,
/// however loaded the machine (the defaults, 1 s and 2 s, are `outage.rs`'s). Under the lease.
const STATEMENT_MS_MAX: u64 = 20_000;
/// How long a held finalize sleeps inside PostgreSQL: far past the stop, which ends it.
const HOLD_SECS: u64 = 3_600;
/// How long the test waits for the 18 finalize statements to reach PostgreSQL.
const ARRIVAL_SECS_MAX: u64 = 30;

/// Every statement that turns a row `succeeded` (a finalize) first sleeps inside PostgreSQL until
/// the stop terminates it. A sleep, not a lock the test holds: at a fast shutdown the holder's
/// backend could exit first and release a waiter, whose finalize then committed before its own
/// termination (seen under load: 5 of the 6 fail-closed keys held, the sixth finalized).
fn hold_finalizes_sql() -> String {
    format!(
        "CREATE FUNCTION hold_finalize() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep({HOLD_SECS}); RETURN NEW; END $$;
         CREATE TRIGGER hold_finalize BEFORE UPDATE ON idempotency_keys FOR EACH ROW
         WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION hold_finalize();"
    )
}
/// The transfers' own table (the atomic handler's effect), in the cache's database.
const TRANSFERS_SQL: &str = "CREATE TABLE transfers (idempotency_key TEXT NOT NULL)";
/// The external ledger: one row per execution, no uniqueness, so a second run shows.
const LEDGER_SQL: &str = "CREATE TABLE ledger (idempotency_key TEXT NOT NULL)";
const EFFECTS_SQL: &str = "SELECT idempotency_key, COUNT(*) FROM transfers GROUP BY 1";
const LEDGER_EFFECTS_SQL: &str = "SELECT idempotency_key, COUNT(*) FROM ledger GROUP BY 1";
/// The finalize statements sleeping in their trigger, per database.
const HELD_SQL: &str = "
SELECT datname::TEXT, COUNT(*) FROM pg_stat_activity
WHERE wait_event_type = 'Timeout' AND wait_event = 'PgSleep' AND query LIKE '%UPDATE idempotency_keys%'
GROUP BY datname";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    Atomic,
    FailClosed,
    Rerun,
}

impl Setup {
    const ALL: [Setup; 3] = [Setup::Atomic, Setup::FailClosed, Setup::Rerun];

    fn name(self) -> &'static str {
        match self {
            Setup::Atomic => "atomic",
            Setup::FailClosed => "fail-closed",
            Setup::Rerun => "re-run (control)",
        }
    }

    fn database(self) -> &'static str {
        match self {
            Setup::Atomic => "atomic",
            Setup::FailClosed => "fail_closed",
            Setup::Rerun => "rerun",
        }
    }
}

/// What one configuration's handler did: its runs per key and, for an external effect, the
/// ledger it writes to.
struct Transfers {
    runs: Mutex<BTreeMap<String, usize>>,
    ledger: Option<SqlitePool>,
}

impl Transfers {
    fn ran(&self, headers: &HeaderMap) -> String {
        let key = headers["idempotency-key"].to_str().unwrap().to_string();
        *self.runs.lock().unwrap().entry(key.clone()).or_default() += 1;
        key
    }
}

fn created(key: &str) -> Response {
    let body = serde_json::json!({ "transfer": key, "status": "moved" }).to_string();
    (StatusCode::CREATED, body).into_response()
}

fn failed(error: impl std::fmt::Display) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
}

/// The atomic transfer: its effect in the request's transaction, left uncommitted for the
/// layer to commit with the cached 201.
async fn transfer_in_scope(
    State(transfers): State<Arc<Transfers>>,
    Extension(scope): Extension<EffectScope<PostgresEffect>>,
    headers: HeaderMap,
) -> Response {
    let key = transfers.ran(&headers);
    let mut transaction = match scope.transaction().await {
        Ok(transaction) => transaction,
        Err(error) => return failed(error),
    };
    let inserted = sqlx::query("INSERT INTO transfers (idempotency_key) VALUES ($1)")
        .bind(&key)
        .execute(&mut **transaction)
        .await;
    match inserted {
        Ok(_) => created(&key),
        Err(error) => failed(error),
    }
}

/// The external transfer: its effect committed in the ledger before it answers, as a payment
/// provider's would be.
async fn transfer_to_ledger(
    State(transfers): State<Arc<Transfers>>,
    headers: HeaderMap,
) -> Response {
    let key = transfers.ran(&headers);
    let ledger = transfers
        .ledger
        .as_ref()
        .expect("an external setup has a ledger");
    let inserted = sqlx::query("INSERT INTO ledger (idempotency_key) VALUES ($1)")
        .bind(&key)
        .execute(ledger)
        .await;
    match inserted {
        Ok(_) => created(&key),
        Err(error) => failed(error),
    }
}

/// The fail-closed handler's "did my effect happen?": the ledger knows.
struct LedgerHook(SqlitePool);

impl ReconcileHook for LedgerHook {
    async fn effect_happened(&self, key: &CacheKey) -> Option<bool> {
        let count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM ledger WHERE idempotency_key = $1")
                .bind(&key.key)
                .fetch_one(&self.0)
                .await
                .ok()?;
        Some(count > 0)
    }
}

/// One configuration, served on loopback TCP.
struct Served {
    setup: Setup,
    address: String,
    layer: IdempotencyLayer<PostgresStore>,
    transfers: Arc<Transfers>,
    ledger_path: Option<std::path::PathBuf>,
}

async fn serve(postgres: &PrivatePostgres, setup: Setup, clock: &ManualClock) -> Served {
    let url = postgres.create_database(setup.database()).await;
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(&url)
        .await
        .unwrap();
    let store = PostgresStore::new(pool.clone()).statement_ms_max(STATEMENT_MS_MAX);
    store.migrate().await.unwrap();
    sqlx::raw_sql(&format!("{TRANSFERS_SQL}; {}", hold_finalizes_sql()))
        .execute(&pool)
        .await
        .unwrap();
    let ledger_path = (setup != Setup::Atomic).then(common::fresh_sqlite_path);
    let ledger = match &ledger_path {
        Some(path) => Some(open_ledger(path).await),
        None => None,
    };
    let transfers = Arc::new(Transfers {
        runs: Mutex::default(),
        ledger,
    });
    let builder = IdempotencyLayer::builder(store)
        .lease_secs(LEASE_SECS)
        .finalize_budget_ms(STATEMENT_MS_MAX)
        .clock(clock.clone());
    let layer = match setup {
        Setup::FailClosed => builder.fail_closed().build(),
        Setup::Atomic | Setup::Rerun => builder.build(),
    };
    let route = match setup {
        Setup::Atomic => post(transfer_in_scope),
        Setup::FailClosed | Setup::Rerun => post(transfer_to_ledger),
    };
    let router = Router::new()
        .route("/transfers", route)
        .with_state(transfers.clone())
        .route_layer(layer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Served {
        setup,
        address,
        layer,
        transfers,
        ledger_path,
    }
}

async fn open_ledger(path: &std::path::Path) -> SqlitePool {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let ledger = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    sqlx::raw_sql(LEDGER_SQL).execute(&ledger).await.unwrap();
    ledger
}

/// The six transfers' keys.
fn keys() -> Vec<String> {
    (1..=TRANSFERS)
        .map(|index| format!("transfer-{index}"))
        .collect()
}

impl Served {
    /// Every key sent once more, as a client retrying with the same request.
    async fn send_all(&self) -> Vec<Answer> {
        let mut answers = Vec::new();
        for key in keys() {
            answers.push(send(self.address.clone(), key).await);
        }
        answers
    }

    fn runs_per_key(&self) -> Vec<usize> {
        let runs = self.transfers.runs.lock().unwrap();
        keys()
            .iter()
            .map(|key| runs.get(key).copied().unwrap_or(0))
            .collect()
    }

    /// Committed effects per key: rows of `transfers` in the cache's database (atomic), of the
    /// ledger otherwise.
    async fn effects_per_key(&self) -> Vec<i64> {
        let rows: Vec<(String, i64)> = match &self.transfers.ledger {
            None => sqlx::query_as(EFFECTS_SQL)
                .fetch_all(self.layer.store().pool())
                .await
                .unwrap(),
            Some(ledger) => sqlx::query_as(LEDGER_EFFECTS_SQL)
                .fetch_all(ledger)
                .await
                .unwrap(),
        };
        let rows: BTreeMap<String, i64> = rows.into_iter().collect();
        keys()
            .iter()
            .map(|key| rows.get(key).copied().unwrap_or(0))
            .collect()
    }

    async fn teardown(self) {
        if let Some(ledger) = &self.transfers.ledger {
            ledger.close().await;
        }
        self.layer.store().pool().close().await;
        if let Some(path) = self.ledger_path {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
    }
}

async fn send(address: String, key: String) -> Answer {
    let headers = [
        ("idempotency-key", key.as_str()),
        ("content-type", "application/json"),
    ];
    let call = http_client::call(&address, "POST", "/transfers", &headers, r#"{"amount":5}"#);
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("answered within 60 s")
}

/// An answer as the figures name it: the status and what it is (`fresh`, `replay`, or the
/// problem's kind).
fn label(answer: &Answer) -> String {
    let what = match (answer.replayed.as_deref(), answer.problem_kind()) {
        (Some("true"), Some(kind)) => format!("replay {kind}"),
        (Some("true"), None) => "replay".to_string(),
        (Some(_), _) => "fresh".to_string(),
        (None, Some(kind)) => kind,
        (None, None) => "unmarked".to_string(),
    };
    format!("{} {what}", answer.status.as_u16())
}

/// How many answers had each label.
fn tally(answers: &[Answer]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for answer in answers {
        *counts.entry(label(answer)).or_default() += 1;
    }
    counts
}

fn all(label: &str) -> BTreeMap<String, usize> {
    BTreeMap::from([(label.to_string(), TRANSFERS)])
}

/// Waits until every configuration's six finalize statements wait inside PostgreSQL.
async fn wait_for_held_finalizes(postgres: &PrivatePostgres) {
    let admin = PgPool::connect(&postgres.url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(ARRIVAL_SECS_MAX);
    let expected: BTreeMap<String, i64> = Setup::ALL
        .iter()
        .map(|setup| (setup.database().to_string(), TRANSFERS as i64))
        .collect();
    let held = loop {
        let rows: Vec<(String, i64)> = sqlx::query_as(HELD_SQL).fetch_all(&admin).await.unwrap();
        let held: BTreeMap<String, i64> = rows.into_iter().collect();
        if held == expected || Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    admin.close().await;
    assert_eq!(
        held, expected,
        "every finalize statement waits inside PostgreSQL within {ARRIVAL_SECS_MAX} s"
    );
}

/// What the originals and the retries received, per configuration.
#[derive(Default)]
struct Rounds {
    originals: Vec<Answer>,
    in_the_lease: Vec<Answer>,
    after_the_lease: Vec<Answer>,
    held_before_reconcile: usize,
    /// What the reconcile hook settled (fail-closed only).
    reconciled: Option<ReconcileReport>,
    after_reconcile: Vec<Answer>,
}

/// Sends the six originals of every configuration at once; returns once every finalize
/// statement waits inside PostgreSQL.
async fn start_originals(
    postgres: &PrivatePostgres,
    served: &[Served],
) -> Vec<Vec<tokio::task::JoinHandle<Answer>>> {
    let originals: Vec<Vec<_>> = served
        .iter()
        .map(|served| {
            keys()
                .into_iter()
                .map(|key| tokio::spawn(send(served.address.clone(), key)))
                .collect()
        })
        .collect();
    wait_for_held_finalizes(postgres).await;
    for (served, originals) in served.iter().zip(&originals) {
        assert_eq!(
            served.runs_per_key(),
            [1; TRANSFERS],
            "{}",
            served.setup.name()
        );
        assert!(
            originals.iter().all(|original| !original.is_finished()),
            "no original is answered before its finalize ends"
        );
        let stats = served.layer.stats();
        assert_eq!((stats.finalize_applied, stats.finalize_unknown), (0, 0));
        // The external effects are committed before their finalize; the atomic ones wait in it.
        let committed = if served.setup == Setup::Atomic { 0 } else { 1 };
        assert_eq!(served.effects_per_key().await, [committed; TRANSFERS]);
    }
    originals
}

/// What the outage did: the originals' answers per configuration, and its times.
struct Outage {
    originals: Vec<Vec<Answer>>,
    /// From the stop's start to the restart.
    down: Duration,
    /// How long `pg_ctl stop -m fast` took.
    stop_took: Duration,
    /// From the stop's start to the last original's answer.
    last_answer: Duration,
}

/// PostgreSQL stopped with every finalize in flight, down until every original is answered and
/// at least `OUTAGE_SECS_MIN`.
async fn outage(postgres: &PrivatePostgres, served: &[Served]) -> Outage {
    let handles = start_originals(postgres, served).await;
    let stopped = Instant::now();
    postgres.pg_ctl_stop("fast");
    let stop_took = stopped.elapsed();
    let mut originals = Vec::new();
    for handles in handles {
        let mut answered = Vec::new();
        for handle in handles {
            answered.push(handle.await.unwrap());
        }
        originals.push(answered);
    }
    let last_answer = stopped.elapsed();
    if let Some(rest) = Duration::from_secs(OUTAGE_SECS_MIN).checked_sub(stopped.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    postgres.pg_ctl_start();
    Outage {
        originals,
        down: stopped.elapsed(),
        stop_took,
        last_answer,
    }
}

/// After the outage: the retries in the lease, after it, and (fail-closed) after reconciling.
async fn retries(served: &[Served], clock: &ManualClock, rounds: &mut [Rounds]) {
    for served in served {
        sqlx::raw_sql("DROP TRIGGER hold_finalize ON idempotency_keys")
            .execute(served.layer.store().pool())
            .await
            .unwrap();
    }
    for (served, rounds) in served.iter().zip(rounds.iter_mut()) {
        rounds.in_the_lease = served.send_all().await;
    }
    clock.advance_secs(LEASE_SECS as i64 + 1);
    for (served, rounds) in served.iter().zip(rounds.iter_mut()) {
        rounds.after_the_lease = served.send_all().await;
        rounds.held_before_reconcile = served.layer.unknown_outcomes().await.unwrap().len();
        if served.setup == Setup::FailClosed {
            let ledger = served
                .transfers
                .ledger
                .clone()
                .expect("fail-closed has a ledger");
            let report = served.layer.reconcile_unknown(&LedgerHook(ledger)).await;
            rounds.reconciled = Some(report.unwrap());
        }
        rounds.after_reconcile = served.send_all().await;
    }
}

fn print_figures(served: &Served, rounds: &Rounds, effects: &[i64]) {
    println!(
        "{:<17} runs per key {:?}, effects per key {:?}\n  original: {:?}\n  retry in the lease: {:?}\n  \
         retry after the lease: {:?} (held outcome-unknown: {}, reconciled: {:?})\n  \
         retry after reconciling: {:?}",
        served.setup.name(),
        served.runs_per_key(),
        effects,
        tally(&rounds.originals),
        tally(&rounds.in_the_lease),
        tally(&rounds.after_the_lease),
        rounds.held_before_reconcile,
        rounds.reconciled,
        tally(&rounds.after_reconcile),
    );
}

/// The atomic transfers: the outage rolled every first run back (503 `commit-unknown`), the
/// retry after the lease ran once more and committed: one effect per key.
async fn check_atomic(served: &Served, rounds: &Rounds) {
    assert_eq!(
        served.effects_per_key().await,
        [1; TRANSFERS],
        "0 double executions: one committed transfer per key"
    );
    assert_eq!(
        served.runs_per_key(),
        [2; TRANSFERS],
        "the first run of each key rolled back with its row; the retry's run is the one that counts"
    );
    assert_eq!(tally(&rounds.originals), all("503 commit-unknown"));
    for original in &rounds.originals {
        assert_eq!(original.headers["retry-after"], "1");
    }
    assert_eq!(tally(&rounds.in_the_lease), all("409 in-flight"));
    assert_eq!(tally(&rounds.after_the_lease), all("201 fresh"));
    assert_eq!(tally(&rounds.after_reconcile), all("201 replay"));
}

/// Fail closed: the originals got their 201 (the effect happened, the finalize did not), the
/// keys were held `outcome-unknown` after the lease with no re-run, and the hook settled them
/// into the sentinel replay.
async fn check_fail_closed(served: &Served, rounds: &Rounds) {
    assert_eq!(served.runs_per_key(), [1; TRANSFERS], "0 re-runs");
    assert_eq!(served.effects_per_key().await, [1; TRANSFERS]);
    assert_eq!(rounds.held_before_reconcile, TRANSFERS, "6 keys held");
    let settled = ReconcileReport {
        applied: TRANSFERS,
        not_applied: 0,
        still_held: 0,
    };
    assert_eq!(
        rounds.reconciled,
        Some(settled),
        "the hook found every effect in the ledger"
    );
    assert_eq!(tally(&rounds.originals), all("201 fresh"));
    assert_eq!(tally(&rounds.in_the_lease), all("409 in-flight"));
    assert_eq!(tally(&rounds.after_the_lease), all("409 outcome-unknown"));
    assert_eq!(
        tally(&rounds.after_reconcile),
        all("200 replay response-not-stored")
    );
    assert!(served.layer.unknown_outcomes().await.unwrap().is_empty());
}

/// The control: the default policy re-runs every key once its lease lapsed; the external effect
/// happens twice (the experiment's 6 of 6).
async fn check_rerun(served: &Served, rounds: &Rounds) {
    assert_eq!(
        served.effects_per_key().await,
        [2; TRANSFERS],
        "6 of 6 executed twice"
    );
    assert_eq!(served.runs_per_key(), [2; TRANSFERS]);
    assert_eq!(tally(&rounds.originals), all("201 fresh"));
    assert_eq!(tally(&rounds.in_the_lease), all("409 in-flight"));
    assert_eq!(tally(&rounds.after_the_lease), all("201 fresh"));
    assert_eq!(tally(&rounds.after_reconcile), all("201 replay"));
}

//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
//= specs/idempotency-middleware.md#Atomic effects (the model's `atomic`)
//# the commit answered an error: both committed or neither did; the client gets 503
//# `commit-unknown` (retry with the same key: the replay if it committed; otherwise the row is
//# still `processing` and, after its lease, the handler runs — for the first time that counts);
//= specs/idempotency-middleware.md#Unknown outcomes fail closed (the model's `fail-closed`)
//# A claim never takes over a `processing` row whose lease lapsed: its attempt's outcome is
//# unknown (its finalize failed every attempt, its process died or stalled, its claim committed
//# unheard, or its client left before the 2xx), so the key is held — every request with it gets
//# 409 problem `outcome-unknown` — until it is resolved:
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_during_six_finalizes_runs_no_transfer_twice_atomic_or_fail_closed() {
    let started = Instant::now();
    let postgres = PrivatePostgres::start();
    let clock = ManualClock::new(START_MILLIS);
    let mut served = Vec::new();
    for setup in Setup::ALL {
        served.push(serve(&postgres, setup, &clock).await);
    }
    let outage = outage(&postgres, &served).await;
    let mut rounds: Vec<Rounds> = outage
        .originals
        .into_iter()
        .map(|originals| Rounds {
            originals,
            ..Rounds::default()
        })
        .collect();
    retries(&served, &clock, &mut rounds).await;
    println!(
        "PostgreSQL stopped (fast) with {} finalize statements waiting inside it, {TRANSFERS} per \
         configuration; the stop took {:?}, the last original was answered {:?} after it, the \
         database was down {:?}; lease {LEASE_SECS} s on the manual clock",
        TRANSFERS * Setup::ALL.len(),
        outage.stop_took,
        outage.last_answer,
        outage.down,
    );
    for (served, rounds) in served.iter().zip(&rounds) {
        print_figures(served, rounds, &served.effects_per_key().await);
    }
    for (served, rounds) in served.iter().zip(&rounds) {
        match served.setup {
            Setup::Atomic => check_atomic(served, rounds).await,
            Setup::FailClosed => check_fail_closed(served, rounds).await,
            Setup::Rerun => check_rerun(served, rounds).await,
        }
    }
    for served in served {
        served.teardown().await;
    }
    println!("the whole test took {:?}", started.elapsed());
}
