//! `cargo bench -p oncecheck-store --bench append`: appends per second per backend with 1 and 8
//! concurrent writers on one stream, and DynamoDB requests per stored op for an uncontended
//! 100-op push. DynamoDB runs against ONCECHECK_DDB_ENDPOINT (moto in CI; the bench fails
//! without it), through the serializing proxy: moto races concurrent transactions otherwise.
//!
//! Figures against moto measure this code plus moto's Python, not DynamoDB: read them as
//! relative (rounds, requests per op, contention cost), not as AWS throughput.

#[path = "../tests/support/serial_proxy.rs"]
mod serial_proxy;

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

async fn bench_backend(name: &str, store: Arc<dyn OpStore>, ops_total: usize) {
    for writers in [1, 8] {
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

    let proxy = serial_proxy::serialize_endpoint(endpoint).await;
    let table = format!("bench-{}", std::process::id());
    let tuning = AppendTuning::default();
    let dynamodb = DynamoDbStore::connect(table, Some(&proxy))
        .await
        .with_tuning(tuning);
    dynamodb
        .create_table()
        .await
        .expect("create the bench table");
    bench_backend("dynamodb", Arc::new(dynamodb.clone()), 160).await;

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
    // moto copies every table on every transaction: leave it as light as it was.
    let _ = dynamodb
        .client()
        .delete_table()
        .table_name(dynamodb.table())
        .send()
        .await;
}
