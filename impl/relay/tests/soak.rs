//! Soak: concurrent writers and pullers through the relay server, over each backend. Every puller
//! must see every op exactly once, in gap-free seq order, and every re-push must answer its
//! op's first seq.
//!
//! This is a soak test, not a proof: it finds an ordering bug only when the scheduler happens
//! to produce the interleaving (the model checker and the conformance replays are the proofs).
//! Bounded in count (writers x batches x ops) and in time (SOAK_SECONDS_MAX, then it fails).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use oncecheck_relay::{Limits, PullResponse, PushResponse};
use serde_json::json;
use support::*;

const WRITERS: usize = 4;
const BATCHES_PER_WRITER: usize = 12;
const OPS_PER_BATCH: usize = 4;
const PULLERS: usize = 2;
const PULL_LIMIT: usize = 7;
const SOAK_SECONDS_MAX: u64 = 120;
const RE_PUSHES_MAX: u32 = 10;
/// 503s in a row a puller takes before it fails: a pull that meets the deadline (a slow backend,
/// moto on a loaded machine) answers 503, and a client pulls again from the same cursor.
const PULL_RETRIES_MAX: u32 = 10;

async fn writer(client: reqwest::Client, base: String, writer: usize) -> BTreeMap<String, i64> {
    let mut answered = BTreeMap::new();
    for batch in 0..BATCHES_PER_WRITER {
        let ops: Vec<_> = (0..OPS_PER_BATCH)
            .map(|index| json!({"op_id": format!("w{writer}-b{batch}-o{index}"), "payload": format!("{writer}/{batch}/{index}")}))
            .collect();
        let body = json!({ "ops": ops }).to_string();
        // Every third batch is pushed twice: the re-push must answer the same seqs.
        let pushes = if batch % 3 == 0 { 2 } else { 1 };
        for _ in 0..pushes {
            // A client re-pushes the whole batch after a 503 (deadline or contention): the
            // claims answer what was stored. Bounded: RE_PUSHES_MAX per batch.
            let mut attempt = 0;
            let answer: PushResponse = loop {
                attempt += 1;
                let response = client
                    .post(format!("{base}/v1/streams/soak/ops"))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .expect("push");
                let status = response.status();
                let text = response.text().await.unwrap();
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE && attempt < RE_PUSHES_MAX {
                    eprintln!("writer {writer} batch {batch}: 503, re-pushing: {text}");
                    continue;
                }
                assert!(
                    status.is_success(),
                    "writer {writer} batch {batch}: {status} {text}"
                );
                break serde_json::from_str(&text).unwrap();
            };
            for result in answer.results {
                if let Some(first) = answered.insert(result.op_id.clone(), result.seq) {
                    assert_eq!(
                        first, result.seq,
                        "R3: {} answered {first}, then {}",
                        result.op_id, result.seq
                    );
                }
            }
        }
    }
    answered
}

async fn puller(client: reqwest::Client, base: String, total: usize) -> Vec<(i64, String)> {
    let mut seen = Vec::with_capacity(total);
    let mut cursor = 0;
    let mut unavailable_in_a_row = 0;
    while seen.len() < total {
        let response = client
            .get(format!(
                "{base}/v1/streams/soak/ops?after={cursor}&limit={PULL_LIMIT}"
            ))
            .send()
            .await
            .expect("pull");
        if response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE
            && unavailable_in_a_row < PULL_RETRIES_MAX
        {
            unavailable_in_a_row += 1;
            eprintln!("puller: 503 after cursor {cursor}, pulling again");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        unavailable_in_a_row = 0;
        assert!(
            response.status().is_success(),
            "pull: {}",
            response.status()
        );
        let page: PullResponse = response.json().await.unwrap();
        for op in &page.ops {
            assert_eq!(
                op.seq,
                cursor + 1,
                "R1/R5: after cursor {cursor} the next op must be seq {}",
                cursor + 1
            );
            cursor = op.seq;
            seen.push((op.seq, op.op_id.clone()));
        }
        if page.ops.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    seen
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <=
//# k.
//= specs/relay-append.md#R5
//# With new-build writers only, the stored seqs are exactly 1..n.
async fn soak(backend_name: &str) {
    let backend = backend(backend_name).await;
    let base = serve(backend.store.clone(), Limits::default()).await;
    let client = reqwest::Client::new();
    let total = WRITERS * BATCHES_PER_WRITER * OPS_PER_BATCH;
    let started = std::time::Instant::now();
    let run = async {
        let pullers: Vec<_> = (0..PULLERS)
            .map(|_| tokio::spawn(puller(client.clone(), base.clone(), total)))
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|index| tokio::spawn(writer(client.clone(), base.clone(), index)))
            .collect();
        let mut answered = BTreeMap::new();
        for handle in writers {
            answered.extend(handle.await.expect("writer"));
        }
        let mut seen_by = Vec::new();
        for handle in pullers {
            seen_by.push(handle.await.expect("puller"));
        }
        (answered, seen_by)
    };
    let (answered, seen_by) = tokio::time::timeout(Duration::from_secs(SOAK_SECONDS_MAX), run)
        .await
        .unwrap_or_else(|_| {
            panic!("soak over {backend_name} did not finish within {SOAK_SECONDS_MAX} s")
        });
    assert_eq!(answered.len(), total);
    for seen in &seen_by {
        assert_eq!(seen.len(), total);
        let seqs: Vec<i64> = seen.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(
            seqs,
            (1..=total as i64).collect::<Vec<_>>(),
            "gap-free seq order"
        );
        let op_ids: BTreeSet<&String> = seen.iter().map(|(_, op_id)| op_id).collect();
        assert_eq!(op_ids.len(), total, "every op seen once");
        for (seq, op_id) in seen {
            assert_eq!(
                answered.get(op_id),
                Some(seq),
                "the pull agrees with the push's answer for {op_id}"
            );
        }
    }
    eprintln!(
        "soak over {backend_name}: {total} ops, {WRITERS} writers, {PULLERS} pullers, {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_concurrent_writers_and_pullers_see_every_op_once_in_gap_free_seq_order_memory() {
    soak("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_concurrent_writers_and_pullers_see_every_op_once_in_gap_free_seq_order_sqlite() {
    soak("sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_concurrent_writers_and_pullers_see_every_op_once_in_gap_free_seq_order_dynamodb() {
    soak("dynamodb").await;
}
