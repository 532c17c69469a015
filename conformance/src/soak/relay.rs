//! `oncecheck soak relay`: the relay binary under concurrent pushers and pullers while the
//! schedule kills it (SIGKILL, then a restart) and stalls its backend; then every stream is
//! read whole and checked against what the pushers were answered.
//!
//! What is checked (each a count that must be 0):
//! - **lost**: an op a push answered (2xx) that the stream does not hold;
//! - **duplicated**: an op_id the stream holds twice;
//! - **gaps**: a stream's seqs are not exactly 1..n, or a puller following it was handed a seq
//!   other than its cursor + 1 (R1, R5);
//! - **answers differ**: an op answered two seqs, or a seq the stream does not hold it at (R3),
//!   or its payload changed;
//! - **views differ**: a puller that followed a stream while it grew saw other ops than the
//!   final read;
//! - **refused**: a push answered with a status a client cannot retry (4xx, 500).
//!
//! Pushers behave as the relay's documented client does: every status but 409, 413, 415 and 422
//! (and every lost connection) re-pushes the same batch, whose claims answer what was stored.
//! A batch is given up only when the run's time is up: the time limit is a failure of its own,
//! and what it cut is reported as what it is, not as a loss: the ops given up unanswered (some
//! of them stored: the relay kept them, no re-push learnt their seq), the ops never pushed, the
//! faults whose point the run never reached. A puller stopped by the time saw a prefix of the
//! final read. The comparison itself is `relay_check.rs`.
//!
//! On DynamoDB the run is cut into tables of `--table-ops-max` ops: each table is checked and
//! deleted before the next, so an emulator that keeps every version of a table stays bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use oncecheck_model::trace::SplitMix64;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::args::RelayArgs;
use super::http::HttpClient;
use super::latency::{per_second, Latencies};
use super::relay_check::{self, payload_of, Answers, PullerView, StoredStreams, TableRun};
use super::relay_process::{default_binary, log_tail, RelayProcess};
use super::schedule::{self, Fault};
use super::stall_proxy::StallProxy;
use super::{progress_line, Outcome};

/// Ops per pull page (the relay's largest).
const PULL_LIMIT: usize = 1000;
/// Pause before re-pushing after a 503 or a lost connection.
const RETRY_PAUSE_MILLIS: u64 = 50;
/// Pause of a puller that found nothing new.
const IDLE_PULL_MILLIS: u64 = 20;

/// The backend and what its faults need.
enum Backend {
    Sqlite {
        path: PathBuf,
    },
    DynamoDb {
        /// In front of the emulator: serialising, stallable. Everything the soak sends it goes
        /// through here, the table deletions included: a request beside another can corrupt
        /// moto's tables.
        proxy: StallProxy,
    },
}

/// What the pushers and pullers of one table share.
struct Shared {
    client: HttpClient,
    base_url: String,
    streams: Vec<String>,
    /// Ops answered so far in the whole run: the clock of the fault schedule and the progress.
    answered_total: AtomicU64,
    /// Set when every pusher of the current table has finished.
    pushers_done: AtomicBool,
    /// Set when the run's time is up: everything stops where it is.
    out_of_time: AtomicBool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    push_requests: AtomicU64,
    unavailable: AtomicU64,
    connection_errors: AtomicU64,
    existing_answers: AtomicU64,
}

/// What one pusher was answered.
#[derive(Default)]
struct PusherResult {
    answered: Answers,
    request_latencies: Latencies,
    batch_latencies: Latencies,
    violations: Vec<String>,
    /// op_ids of the batch pushed and never answered when the time was up.
    given_up: BTreeSet<String>,
    /// Ops of the quota never pushed when the time was up.
    not_pushed_ops: u64,
}

/// What one puller saw, per stream: (seq, op_id) in the order handed out.
#[derive(Default)]
struct PullerResult {
    seen: PullerView,
    violations: Vec<String>,
}

/// Runs the soak; `Err` is an environment failure (exit 2), violations are in the outcome.
pub async fn run(args: &RelayArgs) -> Result<Outcome, String> {
    if args.pushers == 0 || args.streams == 0 || args.batch_ops_max == 0 || args.ops == 0 {
        return Err("--ops, --pushers, --streams and --batch-ops-max must be at least 1".into());
    }
    let seed = schedule::seed_or_clock(args.seed);
    let binary = match &args.relay_bin {
        Some(path) => path.clone(),
        None => default_binary()?,
    };
    let scratch = tempdir()?;
    let log = scratch.join("relay.log");
    let backend = match args.store.as_str() {
        "sqlite" => Backend::Sqlite {
            path: scratch.join("relay.sqlite"),
        },
        _ => {
            let endpoint = std::env::var("ONCECHECK_DDB_ENDPOINT")
                .ok()
                .filter(|url| url.starts_with("http://"))
                .ok_or("--store dynamodb needs ONCECHECK_DDB_ENDPOINT=http://HOST:PORT (an emulator such as moto)")?;
            let proxy = StallProxy::start(&endpoint).await?;
            Backend::DynamoDb { proxy }
        }
    };
    let table_ops = match backend {
        Backend::Sqlite { .. } => args.ops,
        Backend::DynamoDb { .. } => args.table_ops_max.max(1),
    };
    let tables: Vec<u64> = {
        let mut left = args.ops;
        let mut sizes = Vec::new();
        while left > 0 {
            let size = left.min(table_ops);
            sizes.push(size);
            left -= size;
        }
        sizes
    };
    let faults = schedule::draw(
        seed,
        args.ops,
        &[(Fault::Kill, args.kills), (Fault::Stall, args.stalls)],
    );
    eprintln!(
        "soak relay on {} (seed {seed}): {} ops by {} pushers over {} streams, {} pullers, \
         {} kills, {} stalls of {} ms, push deadline {} s{}",
        args.store,
        args.ops,
        args.pushers,
        args.streams,
        args.pullers,
        args.kills,
        args.stalls,
        args.stall_millis,
        args.push_deadline_secs,
        if tables.len() > 1 {
            format!(
                ", a fresh table every {table_ops} ops ({} tables)",
                tables.len()
            )
        } else {
            String::new()
        }
    );
    let mut environment = vec![
        (
            "ONCECHECK_RELAY_PUSH_DEADLINE_SECS".to_string(),
            args.push_deadline_secs.to_string(),
        ),
        ("RUST_LOG".to_string(), "warn".to_string()),
    ];
    if let Backend::DynamoDb { proxy, .. } = &backend {
        environment.push(("ONCECHECK_DDB_ENDPOINT".to_string(), proxy.url()));
    }
    let store_arguments = |table: usize| -> Vec<String> {
        match &backend {
            Backend::Sqlite { path } => {
                vec!["--store".into(), format!("sqlite:{}", path.display())]
            }
            Backend::DynamoDb { .. } => vec![
                "--store".into(),
                format!("dynamodb:oncecheck-soak-{seed:x}-{table}"),
                "--create-table".into(),
            ],
        }
    };
    let relay = RelayProcess::start(&binary, store_arguments(0), environment, log.clone()).await?;
    let relay = Arc::new(Mutex::new(relay));
    let base_url = relay.lock().await.base_url();
    let streams: Vec<String> = (0..args.streams).map(|index| format!("s{index}")).collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds_max);
    let mut outcome = Outcome::default();
    let mut request_latencies = Latencies::default();
    let mut batch_latencies = Latencies::default();
    let answered_total = Arc::new(AtomicU64::new(0));
    let mut faults_left: std::collections::VecDeque<(u64, Fault)> = faults.into();
    let (mut kills_done, mut stalls_done) = (0u32, 0u32);
    let mut counters_total = [0u64; 4];
    let mut cut_by_time = false;
    // Ops answered when the time was up (the pushes then in flight may add some).
    let mut answered_at_time_up = 0u64;
    let mut not_pushed_ops = 0u64;
    for (table, &ops) in tables.iter().enumerate() {
        if table > 0 {
            relay
                .lock()
                .await
                .restart_with(store_arguments(table))
                .await?;
        }
        let shared = Arc::new(Shared {
            client: HttpClient::default(),
            base_url: base_url.clone(),
            streams: streams.clone(),
            answered_total: AtomicU64::new(answered_total.load(Ordering::SeqCst)),
            pushers_done: AtomicBool::new(false),
            out_of_time: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let pushers: Vec<_> = (0..args.pushers)
            .map(|index| {
                let quota = ops / args.pushers as u64
                    + u64::from((index as u64) < ops % args.pushers as u64);
                let shared = shared.clone();
                let batch_ops_max = args.batch_ops_max;
                let pusher_seed = seed ^ ((table as u64) << 32) ^ index as u64;
                tokio::spawn(async move {
                    pusher(&shared, table, index, quota, batch_ops_max, pusher_seed).await
                })
            })
            .collect();
        let pullers: Vec<_> = (0..args.pullers)
            .map(|_| {
                let shared = shared.clone();
                tokio::spawn(async move { puller(&shared).await })
            })
            .collect();
        // The fault schedule and the progress, until the pushers are done or the time is up.
        let table_end = answered_total.load(Ordering::SeqCst) + ops;
        let mut next_progress = 0u64;
        loop {
            let answered = shared.answered_total.load(Ordering::SeqCst);
            if answered * 10 >= next_progress * args.ops {
                eprintln!(
                    "{}",
                    progress_line("ops answered", answered, args.ops, started)
                );
                next_progress = answered * 10 / args.ops + 1;
            }
            if pushers.iter().all(|pusher| pusher.is_finished()) {
                break;
            }
            if Instant::now() >= deadline {
                shared.out_of_time.store(true, Ordering::SeqCst);
                cut_by_time = true;
                answered_at_time_up = answered;
                outcome.violations.push(format!(
                    "the run did not finish within {} s",
                    args.seconds_max
                ));
                break;
            }
            // Every fault due by now strikes before the next look at the time: two points a few
            // ops apart both strike, whenever the time runs out after them.
            let mut struck = false;
            while let Some(&(point, fault)) = faults_left.front() {
                if answered < point || point >= table_end {
                    break;
                }
                faults_left.pop_front();
                struck = true;
                match fault {
                    Fault::Kill => {
                        relay.lock().await.kill_and_restart().await?;
                        kills_done += 1;
                    }
                    Fault::Stall => {
                        stall(&backend, Duration::from_millis(args.stall_millis)).await?;
                        stalls_done += 1;
                    }
                    Fault::Restart => unreachable!("the relay schedule has no restarts"),
                }
            }
            if !struck {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let mut answered = Answers::new();
        let mut given_up = BTreeSet::new();
        for handle in pushers {
            let result = handle
                .await
                .map_err(|error| format!("a pusher panicked: {error}"))?;
            outcome.violations.extend(result.violations);
            request_latencies.extend(result.request_latencies);
            batch_latencies.extend(result.batch_latencies);
            answered.extend(result.answered);
            given_up.extend(result.given_up);
            not_pushed_ops += result.not_pushed_ops;
        }
        shared.pushers_done.store(true, Ordering::SeqCst);
        let mut views = Vec::new();
        for handle in pullers {
            let result = handle
                .await
                .map_err(|error| format!("a puller panicked: {error}"))?;
            outcome.violations.extend(result.violations);
            views.push(result.seen);
        }
        let mut stored = StoredStreams::new();
        for stream in &shared.streams {
            stored.insert(stream.clone(), read_stream(&shared, stream).await?);
        }
        let checked = relay_check::check(&TableRun {
            answered: &answered,
            given_up: &given_up,
            stored: &stored,
            views: &views,
            cut_by_time: shared.out_of_time.load(Ordering::SeqCst),
        });
        outcome.violations.extend(checked.violations);
        outcome.merge_counts(&checked.counts);
        answered_total.store(
            shared.answered_total.load(Ordering::SeqCst),
            Ordering::SeqCst,
        );
        let counters = &shared.counters;
        for (total, counter) in counters_total.iter_mut().zip([
            &counters.push_requests,
            &counters.unavailable,
            &counters.connection_errors,
            &counters.existing_answers,
        ]) {
            *total += counter.load(Ordering::SeqCst);
        }
        if let Backend::DynamoDb { proxy } = &backend {
            delete_table(&proxy.url(), &format!("oncecheck-soak-{seed:x}-{table}")).await;
        }
        if shared.out_of_time.load(Ordering::SeqCst) {
            // The tables after this one were never started: their ops were never pushed either.
            not_pushed_ops += tables[table + 1..].iter().sum::<u64>();
            break;
        }
    }
    relay.lock().await.kill().await;
    let took = started.elapsed();
    let stored = outcome.count("stored");
    // A fault strikes once the run has answered its point's ops. In a run that ended on its own
    // every point was reached, so a fault left is the schedule's failure; in a run the time
    // limit cut (a failure of its own) the faults left are the ones past where it stopped.
    let reached = answered_total.load(Ordering::SeqCst);
    if !faults_left.is_empty() && !cut_by_time {
        outcome.violations.push(format!(
            "the schedule's faults did not all strike: {kills_done} of {} kills, {stalls_done} of {} \
             stalls; left: {faults_left:?}",
            args.kills, args.stalls
        ));
    }
    let [push_requests, unavailable, connection_errors, existing] = counters_total;
    outcome.lines = vec![
        format!(
            "faults: {kills_done} SIGKILLs and restarts of the relay, {stalls_done} backend stalls of {} ms",
            args.stall_millis
        ),
        format!(
            "pushes: {push_requests} requests, {unavailable} answered 503, {connection_errors} \
             without an answer (the relay killed or stalled), {existing} ops answered existing by \
             a re-push"
        ),
        format!(
            "checked: {} ops answered, {stored} stored; lost {}, duplicated {}, gaps {}, answers \
             differ {}, views differ {}",
            outcome.count("answered"),
            outcome.count("lost"),
            outcome.count("duplicated"),
            outcome.count("gaps"),
            outcome.count("answers differ"),
            outcome.count("views differ"),
        ),
        format!(
            "throughput: {:.0} ops/s ({} ops answered in {:.1} s, faults included)",
            per_second(outcome.count("answered"), took),
            outcome.count("answered"),
            took.as_secs_f64()
        ),
        format!("push request latency: {}", request_latencies.summary()),
        format!(
            "batch latency (first push to answered, re-pushes included): {}",
            batch_latencies.summary()
        ),
    ];
    if cut_by_time {
        outcome.lines.push(format!(
            "time up at {answered_at_time_up} of {} ops answered ({reached} once the pushes in \
             flight ended): {} ops given up unanswered ({} of them stored, their seq never \
             answered), {not_pushed_ops} never pushed, {} faults not struck (their points, ops \
             answered: {:?})",
            args.ops,
            outcome.count("given up"),
            outcome.count("given up but stored"),
            faults_left.len(),
            faults_left
                .iter()
                .map(|(point, fault)| format!("{point} {fault:?}"))
                .collect::<Vec<_>>(),
        ));
    }
    if !outcome.violations.is_empty() {
        outcome
            .lines
            .push(format!("relay log ({}): {}", log.display(), log_tail(&log)));
    }
    outcome.title = format!("soak relay on {} (seed {seed})", args.store);
    Ok(outcome)
}

async fn stall(backend: &Backend, length: Duration) -> Result<(), String> {
    match backend {
        Backend::DynamoDb { proxy, .. } => {
            proxy.stall(length).await;
            Ok(())
        }
        Backend::Sqlite { path } => {
            // Another writer holds SQLite's write lock: the relay's appends wait (up to its busy
            // timeout) until the push deadline answers 503; its pulls read on (WAL).
            use sqlx::Connection;
            let url = format!("sqlite://{}", path.display());
            let mut connection = sqlx::SqliteConnection::connect(&url)
                .await
                .map_err(|error| format!("opening {url} to stall it: {error}"))?;
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut connection)
                .await
                .map_err(|error| format!("taking {url}'s write lock: {error}"))?;
            tokio::time::sleep(length).await;
            sqlx::query("ROLLBACK")
                .execute(&mut connection)
                .await
                .map_err(|error| format!("releasing {url}'s write lock: {error}"))?;
            Ok(())
        }
    }
}

async fn delete_table(endpoint: &str, table: &str) {
    let client = oncecheck_store::dynamodb::client_for(Some(endpoint)).await;
    if let Err(error) = client.delete_table().table_name(table).send().await {
        eprintln!("soak: could not delete table {table}: {error}");
    }
}

fn tempdir() -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!(
        "oncecheck-soak-{}-{}",
        std::process::id(),
        schedule::seed_or_clock(None)
    ));
    std::fs::create_dir_all(&path)
        .map_err(|error| format!("creating {}: {error}", path.display()))?;
    Ok(path)
}

/// Pushes `quota` ops in batches of 1..=batch_ops_max to random streams, each batch re-pushed
/// until it is answered 2xx.
async fn pusher(
    shared: &Shared,
    table: usize,
    index: usize,
    quota: u64,
    batch_ops_max: usize,
    seed: u64,
) -> PusherResult {
    let mut random = SplitMix64::new(seed);
    let mut result = PusherResult::default();
    let mut next = 0u64;
    while next < quota {
        let size = (1 + random.below(batch_ops_max)) as u64;
        let size = size.min(quota - next);
        let stream = &shared.streams[random.below(shared.streams.len())];
        let ops: Vec<(String, String)> = (next..next + size)
            .map(|number| {
                let op_id = format!("t{table}-p{index}-{number}");
                let payload = payload_of(&op_id);
                (op_id, payload)
            })
            .collect();
        next += size;
        let body = json!({
            "ops": ops.iter().map(|(op_id, payload)| json!({"op_id": op_id, "payload": payload})).collect::<Vec<_>>()
        })
        .to_string();
        let url = format!("{}/v1/streams/{stream}/ops", shared.base_url);
        let first_push = Instant::now();
        let mut pushed = false;
        loop {
            if shared.out_of_time.load(Ordering::SeqCst) {
                if pushed {
                    result
                        .given_up
                        .extend(ops.iter().map(|(op_id, _)| op_id.clone()));
                } else {
                    result.not_pushed_ops += size;
                }
                result.not_pushed_ops += quota - next;
                return result;
            }
            pushed = true;
            shared
                .counters
                .push_requests
                .fetch_add(1, Ordering::Relaxed);
            let sent = Instant::now();
            let answer = shared
                .client
                .send(
                    Method::POST,
                    &url,
                    &[("content-type", "application/json")],
                    Bytes::from(body.clone()),
                )
                .await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(_lost) => {
                    shared
                        .counters
                        .connection_errors
                        .fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
                    continue;
                }
            };
            if answer.status == StatusCode::SERVICE_UNAVAILABLE {
                shared.counters.unavailable.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
                continue;
            }
            if answer.status != StatusCode::OK {
                result.violations.push(format!(
                    "a push to {stream} was answered {}: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                ));
                break;
            }
            result.request_latencies.record(sent.elapsed());
            let results: Vec<(String, i64, bool)> = serde_json::from_slice::<Value>(&answer.body)
                .ok()
                .and_then(|document| document.get("results").cloned())
                .and_then(|results| serde_json::from_value::<Vec<Value>>(results).ok())
                .unwrap_or_default()
                .iter()
                .filter_map(|one| {
                    Some((
                        one.get("op_id")?.as_str()?.to_string(),
                        one.get("seq")?.as_i64()?,
                        one.get("existing")?.as_bool()?,
                    ))
                })
                .collect();
            if results.len() != ops.len()
                || results.iter().zip(&ops).any(|(got, sent)| got.0 != sent.0)
            {
                result.violations.push(format!(
                    "a push to {stream} answered other ops than it sent: {}",
                    String::from_utf8_lossy(&answer.body)
                ));
                break;
            }
            for ((op_id, seq, existing), (_, payload)) in results.into_iter().zip(&ops) {
                if existing {
                    shared
                        .counters
                        .existing_answers
                        .fetch_add(1, Ordering::Relaxed);
                }
                result
                    .answered
                    .insert(op_id, (stream.clone(), seq, payload.clone()));
            }
            shared.answered_total.fetch_add(size, Ordering::SeqCst);
            result.batch_latencies.record(first_push.elapsed());
            break;
        }
    }
    result
}

/// Follows every stream from seq 0, checking each page starts at its cursor + 1 and hands out
/// dense seqs, until the pushers are done and a last pass finds nothing new.
async fn puller(shared: &Shared) -> PullerResult {
    let mut result = PullerResult::default();
    let mut cursors: BTreeMap<String, i64> = shared
        .streams
        .iter()
        .map(|stream| (stream.clone(), 0))
        .collect();
    let mut seen_ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    loop {
        let done_before_pass = shared.pushers_done.load(Ordering::SeqCst);
        let mut new_ops = false;
        for stream in &shared.streams {
            if shared.out_of_time.load(Ordering::SeqCst) {
                return result;
            }
            let cursor = cursors[stream];
            let url = format!(
                "{}/v1/streams/{stream}/ops?after={cursor}&limit={PULL_LIMIT}",
                shared.base_url
            );
            let Ok(answer) = shared
                .client
                .send(Method::GET, &url, &[], Bytes::new())
                .await
            else {
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
                new_ops = true;
                continue;
            };
            if !answer.status.is_success() {
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
                new_ops = true;
                continue;
            }
            let page = pulled_ops(&answer.body);
            let mut expected = cursor + 1;
            for (seq, op_id, payload) in page {
                new_ops = true;
                if seq != expected {
                    result.violations.push(format!(
                        "a puller of {stream} at cursor {} was handed seq {seq} (a gap)",
                        expected - 1
                    ));
                }
                if !seen_ids
                    .entry(stream.clone())
                    .or_default()
                    .insert(op_id.clone())
                {
                    result
                        .violations
                        .push(format!("a puller of {stream} was handed {op_id} twice"));
                }
                if payload != payload_of(&op_id) {
                    result
                        .violations
                        .push(format!("{op_id} was pulled with another payload"));
                }
                result
                    .seen
                    .entry(stream.clone())
                    .or_default()
                    .push((seq, op_id));
                expected = seq + 1;
            }
            cursors.insert(stream.clone(), expected - 1);
        }
        if done_before_pass && !new_ops {
            return result;
        }
        if !new_ops {
            tokio::time::sleep(Duration::from_millis(IDLE_PULL_MILLIS)).await;
        }
    }
}

/// (seq, op_id, payload) of a pull answer.
fn pulled_ops(body: &[u8]) -> Vec<(i64, String, String)> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|document| document.get("ops").cloned())
        .and_then(|ops| serde_json::from_value::<Vec<Value>>(ops).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|op| {
            Some((
                op.get("seq")?.as_i64()?,
                op.get("op_id")?.as_str()?.to_string(),
                op.get("payload")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The whole stream, page by page, retried through restarts and stalls.
async fn read_stream(shared: &Shared, stream: &str) -> Result<Vec<(i64, String, String)>, String> {
    let mut ops = Vec::new();
    let mut failures = 0u32;
    loop {
        let cursor = ops.last().map_or(0, |(seq, _, _)| *seq);
        let url = format!(
            "{}/v1/streams/{stream}/ops?after={cursor}&limit={PULL_LIMIT}",
            shared.base_url
        );
        match shared
            .client
            .send(Method::GET, &url, &[], Bytes::new())
            .await
        {
            Ok(answer) if answer.status.is_success() => {
                let page = pulled_ops(&answer.body);
                if page.is_empty() {
                    return Ok(ops);
                }
                ops.extend(page);
            }
            other => {
                failures += 1;
                if failures > 100 {
                    return Err(format!(
                        "reading {stream} back failed 100 times, the last: {}",
                        match other {
                            Ok(answer) => answer.status.to_string(),
                            Err(error) => error,
                        }
                    ));
                }
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
            }
        }
    }
}
