//! PostgreSQL goes away under load: the layer answers every request within its bound (503 with
//! `Retry-After` while the database is down, the handler's answer otherwise) and recovers once the
//! database is back (issue 18: "fast, honest 503s").
//!
//! The test runs its own PostgreSQL (initdb into a temporary directory, the binaries
//! scripts/services.sh installs), so stopping it for 5 s disturbs no other test; it is stopped
//! and its directory removed whatever happens. It takes about 10 s: the outage itself is 5 s.

mod common;

use common::*;
use http::StatusCode;
use oncecheck_idempotency::store::{PostgresStore, StoreLimits};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the database stays down.
const OUTAGE_SECS: u64 = 5;
/// Concurrent clients sending requests with fresh keys, one after another.
const CLIENTS: usize = 8;
/// What a loaded 2-core machine may add to a bound (scheduling, the pool's reconnects).
const SLACK_MS: u64 = 1_000;

/// A private PostgreSQL cluster: started by `start`, stopped and removed on drop.
struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// `runuser -u postgres --` when the test runs as root (PostgreSQL refuses root).
    as_user: Vec<String>,
}

impl PrivatePostgres {
    fn start() -> PrivatePostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .map(|entry| entry.unwrap().path().join("bin"))
            .find(|bin| bin.join("initdb").exists())
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql/*/bin (scripts/services.sh installs them)");
        let data = std::env::temp_dir().join(format!("oncecheck-outage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        let mut as_user = Vec::new();
        // PostgreSQL refuses to run as root: as scripts/services.sh does, run it as `postgres`.
        if Command::new("id").arg("-u").output().unwrap().stdout == b"0\n" {
            let exists = Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .unwrap();
            if !exists.status.success() {
                run(Command::new("useradd").args(["--system", "--no-create-home", "postgres"]));
            }
            run(Command::new("chown").args(["-R", "postgres"]).arg(&data));
            as_user = ["runuser", "-u", "postgres", "--"]
                .map(String::from)
                .to_vec();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = PrivatePostgres {
            bin,
            data,
            port,
            as_user,
        };
        let mut initdb = cluster.command("initdb");
        initdb
            .arg("-D")
            .arg(cluster.data.join("db"))
            .args(["-U", "oncecheck", "--auth=trust"]);
        run(&mut initdb);
        cluster.pg_ctl_start();
        cluster
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match self.as_user.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    fn pg_ctl_start(&self) {
        let mut start = self.command("pg_ctl");
        start
            .arg("-D")
            .arg(self.data.join("db"))
            .arg("-l")
            .arg(self.data.join("db/server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!("-h 127.0.0.1 -p {} -k '' -c fsync=off", self.port))
            .arg("start");
        run(&mut start);
    }

    fn pg_ctl_stop(&self, mode: &str) {
        let mut stop = self.command("pg_ctl");
        stop.arg("-D")
            .arg(self.data.join("db"))
            .args(["-m", mode, "-w", "stop"]);
        run(&mut stop);
    }

    fn url(&self) -> String {
        format!("postgres://oncecheck@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data.join("db"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One answer as a client saw it.
#[derive(Debug, Clone)]
struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    took: Duration,
    /// Milliseconds since the load started, when the request was sent.
    sent_at_ms: u128,
}

fn figures(answers: &[Answer], status: StatusCode) -> (usize, Duration) {
    let matching: Vec<&Answer> = answers.iter().filter(|a| a.status == status).collect();
    let slowest = matching.iter().map(|a| a.took).max().unwrap_or_default();
    (matching.len(), slowest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_second_outage_under_load_is_answered_within_the_bound_and_recovers() {
    let postgres = PrivatePostgres::start();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&postgres.url())
        .await
        .unwrap();
    let store = PostgresStore::new(pool);
    store.migrate().await.unwrap();
    let limits: StoreLimits = store.limits();
    assert_eq!(
        limits,
        StoreLimits::default(),
        "the test runs the defaults users get"
    );
    assert!(limits.acquire_ms_max + limits.statement_ms_max <= 2_000);
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(10)])]);
    let layer = oncecheck_idempotency::IdempotencyLayer::builder(store.clone())
        .body_bytes_max(CAP)
        .build();
    let finalize_budget_ms = layer.config().finalize_budget_ms;
    let app = app(layer, handler.clone());
    // A 503 is decided by the claim: one acquire and one statement at most. A request whose
    // claim won before the outage spends at most the finalize budget more (its response is
    // still delivered; its outcome is unknown).
    let unavailable_bound =
        Duration::from_millis(limits.acquire_ms_max + limits.statement_ms_max + SLACK_MS);
    let success_bound = unavailable_bound + Duration::from_millis(finalize_budget_ms);

    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (app, answers, stop) = (app.clone(), answers.clone(), stop.clone());
            tokio::spawn(async move {
                let mut sent = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let key = format!("c{client}-{sent}");
                    sent += 1;
                    let sent_at_ms = started.elapsed().as_millis();
                    let begun = Instant::now();
                    let request = http::Request::post("/transfers")
                        .header("idempotency-key", key)
                        .body(axum::body::Body::from("x"))
                        .unwrap();
                    let received = send(&app, request).await;
                    answers.lock().unwrap().push(Answer {
                        status: received.status,
                        retry_after: received
                            .headers
                            .get("retry-after")
                            .map(|value| value.to_str().unwrap().to_string()),
                        took: begun.elapsed(),
                        sent_at_ms,
                    });
                    // A client that got a 503 waits as little as the test allows: the load stays on.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        })
        .collect();
    let count_ok = |answers: &Arc<Mutex<Vec<Answer>>>| {
        answers
            .lock()
            .unwrap()
            .iter()
            .filter(|answer| answer.status == StatusCode::OK)
            .count()
    };
    while count_ok(&answers) < 50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let outage_started_ms = started.elapsed().as_millis();
    postgres.pg_ctl_stop("fast");
    tokio::time::sleep(Duration::from_secs(OUTAGE_SECS)).await;
    postgres.pg_ctl_start();
    let restarted_ms = started.elapsed().as_millis();
    // Recovery: requests sent after the restart succeed again (the pool reconnects).
    let recovered = async {
        loop {
            let after_restart = answers
                .lock()
                .unwrap()
                .iter()
                .filter(|answer| {
                    answer.sent_at_ms > restarted_ms && answer.status == StatusCode::OK
                })
                .count();
            if after_restart >= 50 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), recovered)
        .await
        .expect("50 requests succeeded within 30 s of the restart");
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }

    let answers = answers.lock().unwrap().clone();
    let (ok, slowest_ok) = figures(&answers, StatusCode::OK);
    let (unavailable, slowest_unavailable) = figures(&answers, StatusCode::SERVICE_UNAVAILABLE);
    println!(
        "{} requests from {CLIENTS} clients; PostgreSQL down from {outage_started_ms} ms to {restarted_ms} ms: \
         {ok} answered 200 (slowest {slowest_ok:?}), {unavailable} answered 503 (slowest {slowest_unavailable:?}); \
         bounds {unavailable_bound:?} (503) and {success_bound:?} (200)",
        answers.len()
    );
    for answer in &answers {
        assert!(
            matches!(
                answer.status,
                StatusCode::OK | StatusCode::SERVICE_UNAVAILABLE
            ),
            "every request is answered 200 or 503: {answer:?}"
        );
    }
    assert!(unavailable > 0, "the outage was seen");
    for answer in answers
        .iter()
        .filter(|a| a.status == StatusCode::SERVICE_UNAVAILABLE)
    {
        assert_eq!(
            answer.retry_after.as_deref(),
            Some("1"),
            "every 503 says when to retry: {answer:?}"
        );
        assert!(
            answer.took <= unavailable_bound,
            "a 503 within the store's limits: {answer:?}"
        );
    }
    for answer in answers.iter().filter(|a| a.status == StatusCode::OK) {
        assert!(
            answer.took <= success_bound,
            "a 200 within its bound: {answer:?}"
        );
    }
}
