//! `cargo bench -p oncecheck-store --bench append`: appends per second per backend with 1, 4
//! and 8 concurrent writers on one stream; for DynamoDB also the requests per stored op (the
//! contention cost: every lost round is a request) and, when ONCECHECK_MOTO_PID names the moto
//! server, moto's resident memory before and after each case. DynamoDB runs against
//! ONCECHECK_DDB_ENDPOINT (moto in CI; the bench fails without it), through the serializing
//! proxy (moto races concurrent transactions otherwise), each case on a fresh table deleted
//! after it, so a case's cost does not depend on the cases before it.
//!
//! Figures against moto measure this code plus moto's Python, not DynamoDB: read them as
//! relative (rounds, requests per op, contention cost), not as AWS throughput.

#[path = "../tests/support/serial_proxy.rs"]
mod serial_proxy;
#[path = "../tests/support/table.rs"]
mod table;

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncecheck_store::dynamodb::AppendTuning;
use oncecheck_store::{DynamoDbStore, MemoryStore, NewOp, OpStore, SqliteStore};

const OPS_PER_BATCH: usize = 10;
const RE_PUSHES_PER_BATCH_MAX: u32 = 20;

/// Appends/s and the number of re-pushes. A writer behaves as a relay client: a push that stops
/// with a retryable error (deadline, contention budget, a request timeout) is pushed again whole,
/// and the claims answer the ops it already stored.
async fn appends_per_second(
    store: Arc<dyn OpStore>,
    stream: &str,
    writers: usize,
    ops_total: usize,
) -> (f64, u64) {
    let batches_per_writer = ops_total / writers / OPS_PER_BATCH;
    let started = Instant::now();
    let mut handles = Vec::new();
    for writer in 0..writers {
        let (store, stream) = (store.clone(), stream.to_owned());
        handles.push(tokio::spawn(async move {
            let mut re_pushes = 0u64;
            for batch in 0..batches_per_writer {
                let ops: Vec<NewOp> = (0..OPS_PER_BATCH)
                    .map(|index| NewOp::new(format!("w{writer}-b{batch}-o{index}"), vec![b'x'; 64]))
                    .collect();
                for attempt in 1..=RE_PUSHES_PER_BATCH_MAX {
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
                    let outcome = store.append_batch(&stream, &ops, deadline).await;
                    match outcome.error {
                        None => break,
                        Some(error) if attempt < RE_PUSHES_PER_BATCH_MAX => {
                            eprintln!("writer {writer} batch {batch}: {error}; re-pushing");
                            re_pushes += 1;
                        }
                        Some(error) => {
                            panic!("writer {writer} batch {batch}: {error} after {attempt} pushes")
                        }
                    }
                }
            }
            re_pushes
        }));
    }
    let mut re_pushes = 0;
    for handle in handles {
        re_pushes += handle.await.expect("writer");
    }
    let elapsed = started.elapsed();
    let stored = batches_per_writer * writers * OPS_PER_BATCH;
    let all = store.pull(stream, 0, stored + 1).await.expect("pull");
    assert_eq!(all.len(), stored, "every op stored once");
    assert!(
        all.iter()
            .enumerate()
            .all(|(index, op)| op.seq == index as i64 + 1),
        "dense"
    );
    (stored as f64 / elapsed.as_secs_f64(), re_pushes)
}

const WRITERS: [usize; 3] = [1, 4, 8];

/// Moto's resident memory in KiB, when ONCECHECK_MOTO_PID names its process.
fn moto_rss_kib() -> Option<u64> {
    let pid = std::env::var("ONCECHECK_MOTO_PID").ok()?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).ok()?;
    status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

async fn bench_backend(name: &str, store: Arc<dyn OpStore>, ops_total: usize) {
    for writers in WRITERS {
        let stream = format!("bench-{writers}");
        let (rate, re_pushes) =
            appends_per_second(store.clone(), &stream, writers, ops_total).await;
        println!("{name:>8}  writers={writers}  ops={ops_total:>5}  appends/s={rate:>9.1}  re-pushes={re_pushes}");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let endpoint = match std::env::var("ONCECHECK_DDB_ENDPOINT") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            eprintln!("ONCECHECK_DDB_ENDPOINT is unset: start moto (`source scripts/services.sh; start_moto`) and rerun");
            std::process::exit(1);
        }
    };
    println!("one stream, batches of {OPS_PER_BATCH} ops; all writers append to the same stream");
    bench_backend("memory", Arc::new(MemoryStore::new()), 20_000).await;
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("bench.sqlite");
    let sqlite = SqliteStore::open(path.to_str().expect("utf-8"))
        .await
        .expect("sqlite");
    bench_backend("sqlite", Arc::new(sqlite), 2_000).await;

    let proxy = serial_proxy::serialize_endpoint(endpoint.clone()).await;
    // The contended cases: a fresh table per case, deleted after it.
    for writers in WRITERS {
        let store = DynamoDbStore::connect(
            format!("bench-{}-{writers}", std::process::id()),
            Some(&proxy),
        )
        .await
        .with_tuning(AppendTuning::default());
        let table = table::Table::create(store, endpoint.clone()).await;
        let requests = table.requests();
        requests.reset();
        let rss_before = moto_rss_kib();
        let ops_total = 160;
        let (rate, re_pushes) =
            appends_per_second(Arc::new(table.clone()), "bench", writers, ops_total).await;
        let rss_after = moto_rss_kib();
        let snapshot = requests.snapshot();
        let transactions = snapshot.get("TransactWriteItems").copied().unwrap_or(0);
        // Pulling the result for the check is one more Query per page; leave it out.
        let total = requests.total() - 1;
        let memory = match (rss_before, rss_after) {
            (Some(before), Some(after)) => format!(
                "  moto RSS {:.0} -> {:.0} MiB (+{:.1} KiB per request)",
                before as f64 / 1024.0,
                after as f64 / 1024.0,
                after.saturating_sub(before) as f64 / total as f64
            ),
            _ => String::new(),
        };
        println!(
            "dynamodb  writers={writers}  ops={ops_total:>5}  appends/s={rate:>9.1}  re-pushes={re_pushes}  \
             requests/op={:.2}  transactions/op={:.2}  lost rounds={}  {snapshot:?}{memory}",
            total as f64 / ops_total as f64,
            transactions as f64 / ops_total as f64,
            transactions.saturating_sub(ops_total as u64),
        );
    }

    let store = DynamoDbStore::connect(
        format!("bench-{}-uncontended", std::process::id()),
        Some(&proxy),
    )
    .await
    .with_tuning(AppendTuning::default());
    let dynamodb = table::Table::create(store, endpoint).await;
    let requests = dynamodb.requests();
    requests.reset();
    let ops: Vec<NewOp> = (0..100)
        .map(|index| NewOp::new(format!("u{index}"), vec![b'x'; 64]))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let started = Instant::now();
    let outcome = dynamodb.append_batch("uncontended", &ops, deadline).await;
    assert_eq!(outcome.error, None);
    let elapsed = started.elapsed();
    let total = requests.total();
    println!(
        "dynamodb  uncontended 100-op push: {total} requests = {:.2} per stored op ({:?}), {elapsed:.2?}",
        total as f64 / 100.0,
        requests.snapshot()
    );
    requests.reset();
    let started = Instant::now();
    let outcome = dynamodb.append_batch("uncontended", &ops, deadline).await;
    assert_eq!(outcome.error, None);
    println!(
        "dynamodb  re-push of the stored 100-op push: {} requests ({:?}), {:.2?}",
        requests.total(),
        requests.snapshot(),
        started.elapsed()
    );
}
