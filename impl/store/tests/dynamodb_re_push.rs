//! Re-pushes at a small deadline, against moto (ONCECHECK_DDB_ENDPOINT; fails when unset).
//!
//! A test binary of its own so that it runs alone: its passes end at a deadline, and moto
//! answers slowly while other tests load it.

mod support;

use std::time::Duration;

use oncecheck_store::{OpStore, StoreError};
use support::*;
use tokio::time::Instant;

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
/// A 100-op push under a 6 s deadline, re-pushed whole until it completes, as a client does
/// after a 503, where every pass is cut at its deadline after 25 rounds (the hook holds the 26th
/// round past it, so the cut does not depend on moto's speed, which falls as a table grows).
/// Every pass after the first spends one round and a batched claim read on what is stored and 24
/// rounds on new ops: exactly 1 + ceil(75 / 24) = 5 passes, each storing new ops, and the stored
/// seqs are 1..100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_pushes_cut_at_their_deadline_progress_every_pass_until_complete() {
    const ROUNDS_PER_PASS: usize = 25;
    let table = ddb_store().await;
    let rounds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pass_deadline = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
    let (counted, deadline_of_pass) = (rounds.clone(), pass_deadline.clone());
    let cut = table.clone().with_before_write(
        move |_attempt: oncecheck_store::dynamodb::seams::WriteAttempt| {
            let round = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let deadline = *deadline_of_pass.lock().unwrap();
            Box::pin(async move {
                if round > ROUNDS_PER_PASS {
                    tokio::time::sleep_until(deadline + Duration::from_millis(20)).await;
                }
            }) as oncecheck_store::StoreFuture<'static, ()>
        },
    );
    let batch = ops("p", 100);
    let requests = table.requests();
    let mut passes: Vec<(usize, usize)> = Vec::new();
    loop {
        let deadline = Instant::now() + Duration::from_secs(6);
        *pass_deadline.lock().unwrap() = deadline;
        rounds.store(0, std::sync::atomic::Ordering::SeqCst);
        requests.reset();
        let outcome = cut.append_batch("s", &batch, deadline).await;
        let stored_new = outcome.appended.iter().filter(|one| !one.existing).count();
        eprintln!(
            "pass {}: answered {}, stored {stored_new} new, {:?}, requests {:?}",
            passes.len() + 1,
            outcome.appended.len(),
            outcome.error,
            requests.snapshot()
        );
        passes.push((outcome.appended.len(), stored_new));
        match outcome.error {
            None => break,
            Some(StoreError::DeadlineExceeded) => {}
            Some(other) => panic!("pass {}: {other}", passes.len()),
        }
        assert!(passes.len() < 20, "no end in sight: {passes:?}");
    }
    assert_eq!(
        passes,
        vec![(25, 25), (49, 24), (73, 24), (97, 24), (100, 3)],
        "exactly 1 + ceil(75 / 24) passes"
    );
    let all = pull_all(&*table, "s").await;
    assert_eq!(stored_seqs(&all), (1..=100).collect::<Vec<_>>());
}
