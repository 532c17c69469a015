//! What the layer costs: requests per second and added latency per request against the bare
//! handler, and database round trips per first request and per replay, on SQLite and PostgreSQL.
//!
//! `cargo bench -p oncecheck-idempotency --bench overhead` (PostgreSQL from ONCECHECK_PG_URL;
//! without it only SQLite is measured, and the output says so). BENCH_REQUESTS sets the count.
//! Sequential requests through `oneshot` on one Tokio runtime: latency is per request with no
//! network in the way, so the difference to the bare handler is the layer's own cost.

use axum::body::Body as AxumBody;
use axum::Router;
use http::Request;
use http_body_util::BodyExt;
use oncecheck_idempotency::store::{CacheStore, PostgresStore, SqliteStore};
use oncecheck_idempotency::IdempotencyLayer;
use std::time::{Duration, Instant};
use tower::ServiceExt;

const BODY: &str = "{\"from\":\"alice\",\"to\":\"bob\",\"amount\":5}";

fn router() -> Router {
    Router::new().route(
        "/transfers",
        axum::routing::post(|| async { "{\"status\":\"moved\"}" }),
    )
}

fn request(key: Option<&str>) -> Request<AxumBody> {
    let mut builder = Request::post("/transfers").header("content-type", "application/json");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(AxumBody::from(BODY)).unwrap()
}

/// Sends `count` requests one after another; returns the mean latency.
async fn run(app: &Router, count: usize, key_of: impl Fn(usize) -> Option<String>) -> Duration {
    let started = Instant::now();
    for index in 0..count {
        let key = key_of(index);
        let response = app.clone().oneshot(request(key.as_deref())).await.unwrap();
        assert!(
            response.status().is_success(),
            "status {}",
            response.status()
        );
        response.into_body().collect().await.unwrap();
    }
    started.elapsed() / count as u32
}

fn report(label: &str, mean: Duration, bare: Duration) {
    let per_second = 1.0 / mean.as_secs_f64();
    let added = mean.as_secs_f64() * 1e6 - bare.as_secs_f64() * 1e6;
    println!(
        "{label:<34} {per_second:>10.0} req/s   {:>8.1} us/req   added {added:>8.1} us",
        mean.as_secs_f64() * 1e6
    );
}

async fn measure<St: CacheStore>(name: &str, store: St, count: usize, bare: Duration) {
    let app = router().layer(IdempotencyLayer::builder(store.clone()).build());
    let run_id = std::process::id();
    let before = store.round_trips();
    let first = run(&app, count, |index| {
        Some(format!("{name}-{run_id}-first-{index}"))
    })
    .await;
    let first_trips = (store.round_trips() - before) as f64 / count as f64;
    run(&app, 1, |_| Some(format!("{name}-{run_id}-replayed"))).await;
    let before = store.round_trips();
    let replay = run(&app, count, |_| Some(format!("{name}-{run_id}-replayed"))).await;
    let replay_trips = (store.round_trips() - before) as f64 / count as f64;
    report(&format!("{name} first request"), first, bare);
    report(&format!("{name} replay"), replay, bare);
    println!(
        "{name:<10} round trips: {first_trips:.2} per first request, {replay_trips:.2} per replay"
    );
}

fn main() {
    let count: usize = std::env::var("BENCH_REQUESTS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bare_app = router();
        run(&bare_app, count / 10, |_| None).await;
        let bare = run(&bare_app, count, |_| None).await;
        println!("requests per case: {count}");
        report("bare handler", bare, bare);

        let directory = std::env::temp_dir().join("oncecheck-idempotency-bench");
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join(format!("bench-{}.db", std::process::id()));
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
        let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(4).connect_with(options).await.unwrap();
        let sqlite = SqliteStore::new(pool);
        sqlite.migrate().await.unwrap();
        measure("sqlite", sqlite, count, bare).await;
        let _ = std::fs::remove_file(&path);

        match std::env::var("ONCECHECK_PG_URL") {
            Ok(url) => {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(4).connect(&url).await.unwrap();
                let postgres = PostgresStore::new(pool);
                postgres.migrate().await.unwrap();
                measure("postgres", postgres, count, bare).await;
            }
            Err(_) => println!("postgres: ONCECHECK_PG_URL is unset; not measured (start it with scripts/services.sh)"),
        }
    });
}
