//! The DynamoDB store under lost responses, a stalled or unreachable backend, re-pushes and
//! backend limits, against moto through the fault proxy (tests/support/serial_proxy.rs). They
//! fail when ONCECHECK_DDB_ENDPOINT is unset.
//!
//! Each test runs on a fresh table that is deleted when it ends. The request sequences pinned
//! here (`proxy.seen()`, the request counter) are the store's request shapes the conformance
//! replay follows.

mod support;

use std::time::Duration;

use oncecheck_store::dynamodb::AppendTuning;
use oncecheck_store::{Appended, DynamoDbStore, NewOp, OpStore, StoreError};
use support::serial_proxy::{Fault, FaultProxy};
use support::*;
use tokio::time::Instant;

/// A fresh table reached through a new fault proxy in front of the test endpoint.
async fn behind_proxy(tuning: AppendTuning) -> (Table, FaultProxy) {
    let proxy = FaultProxy::start(ddb_endpoint()).await;
    let table = ddb_table_at(&proxy.url, tuning).await;
    (table, proxy)
}

fn operations(proxy: &FaultProxy) -> Vec<(String, Option<Fault>)> {
    proxy.seen()
}

fn plain(operation: &str) -> (String, Option<Fault>) {
    (operation.to_owned(), None)
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
/// The proxy forwards o2's transaction to moto, which commits it, and closes the connection
/// instead of answering. The store takes the one path for an unknown outcome: a lost round
/// without a hint, the same op retried in place after re-reading the counter; the retry's claim
/// put fails and answers the seq o2 was stored at. The push completes, o2 is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_lost_to_a_closed_connection_is_retried_in_place_and_answers_the_stored_seq() {
    let (table, proxy) = behind_proxy(test_tuning()).await;
    let first = table.append_batch("s", &ops("o", 1), far_deadline()).await;
    assert_eq!(first.appended, vec![fresh(1)]);
    let before = proxy.seen().len();
    proxy.fault_next("TransactWriteItems", Fault::CloseAfterForward);
    let batch = [ops("o", 3)[1].clone(), ops("o", 3)[2].clone()];
    let outcome = table.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.appended, vec![again(2), fresh(3)]);
    assert_eq!(
        operations(&proxy)[before..].to_vec(),
        vec![
            plain("BatchGetItem"),
            plain("Query"),
            (
                "TransactWriteItems".to_owned(),
                Some(Fault::CloseAfterForward)
            ),
            plain("Query"),
            plain("TransactWriteItems"),
            plain("BatchGetItem"),
            plain("TransactWriteItems"),
        ],
        "claim check, counter read, lost round, re-read, claim found, batched claim read, o3's \
         round"
    );
    let all = pull_all(&*table, "s").await;
    assert_eq!(op_ids(&all), vec!["o1", "o2", "o3"]);
    assert_eq!(stored_seqs(&all), vec![1, 2, 3]);
}

/// A 5xx (here 503 ServiceUnavailable) is the same unknown outcome: retried in place, stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_round_is_a_lost_round_retried_in_place() {
    let (table, proxy) = behind_proxy(test_tuning()).await;
    proxy.fault_next("TransactWriteItems", Fault::ServiceUnavailable);
    let outcome = table.append_batch("s", &ops("o", 2), far_deadline()).await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.appended, vec![fresh(1), fresh(2)]);
    assert_eq!(
        operations(&proxy)
            .into_iter()
            .filter(|(operation, _)| operation != "CreateTable" && operation != "DescribeTable")
            .collect::<Vec<_>>(),
        vec![
            plain("BatchGetItem"),
            plain("Query"),
            (
                "TransactWriteItems".to_owned(),
                Some(Fault::ServiceUnavailable)
            ),
            plain("Query"),
            plain("TransactWriteItems"),
            plain("TransactWriteItems"),
        ]
    );
    // A read's 5xx is retried too.
    proxy.fault_next("Query", Fault::ServiceUnavailable);
    let pulled = table.pull("s", 0, 10).await.expect("the pull is retried");
    assert_eq!(op_ids(&pulled), vec!["o1", "o2"]);
}

/// Nothing listens at the endpoint: every attempt fails to connect. The store retries with
/// backoff, bounded by `lost_rounds_max` in a row, and ends with a typed error well inside the
/// deadline; a pull likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_ends_in_a_typed_error_within_the_deadline() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let tuning = AppendTuning {
        lost_rounds_max: 5,
        backoff_base: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
    };
    let store = DynamoDbStore::connect("unreachable", Some(&format!("http://{closed}")))
        .await
        .with_tuning(tuning);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10);
    let outcome = store.append_batch("s", &ops("o", 2), deadline).await;
    assert_eq!(outcome.appended, vec![]);
    assert_eq!(outcome.error, Some(StoreError::Unavailable { attempts: 6 }));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        store.requests().count("BatchGetItem"),
        6,
        "the push's claim check: one attempt and five retries"
    );
    let pulled = store
        .pull_within("s", 0, 10, Instant::now() + Duration::from_secs(10))
        .await;
    assert_eq!(pulled, Err(StoreError::Unavailable { attempts: 6 }));
}

/// The backend stalls after the first op of a push: the push ends at its deadline (not at the
/// SDK's attempt timeout) with the typed deadline error, keeping the op it stored; a push that
/// stalls before storing anything new ends with NoProgress; a pull ends at its own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_stalled_mid_push_ends_at_the_deadline_keeping_what_it_stored() {
    let (table, proxy) = behind_proxy(test_tuning()).await;
    let stalling = proxy.clone();
    let hooked = table.clone().with_before_write(
        move |attempt: oncecheck_store::dynamodb::seams::WriteAttempt| {
            if attempt.op_id == "o2" {
                stalling.stall_everything();
            }
            Box::pin(async {}) as oncecheck_store::StoreFuture<'static, ()>
        },
    );
    let started = Instant::now();
    let deadline = started + Duration::from_millis(1500);
    let outcome = hooked.append_batch("s", &ops("o", 3), deadline).await;
    let took = started.elapsed();
    assert_eq!(outcome.appended, vec![fresh(1)]);
    assert_eq!(outcome.error, Some(StoreError::DeadlineExceeded));
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(
        took < Duration::from_millis(2500),
        "ends at the deadline: {took:?}"
    );
    let started = Instant::now();
    let again = table
        .append_batch("s", &ops("o", 3), started + Duration::from_millis(500))
        .await;
    assert_eq!(again.appended, vec![]);
    assert_eq!(again.error, Some(StoreError::NoProgress));
    let pulled = table
        .pull_within("s", 0, 10, Instant::now() + Duration::from_millis(500))
        .await;
    assert_eq!(pulled, Err(StoreError::DeadlineExceeded));
}

//= specs/relay-append.md#R7
//# An uncontended n-op push costs n transactions and one counter read.
//= specs/relay-append.md#R7
//# A round that finds the op's own claim reads the claims of the push's remaining ops in one
//# batched strongly consistent read.
/// A re-push of a stored 250-op push: one round finds the first op's claim, three BatchGetItem
/// requests (100 + 100 + 49 keys) answer the rest; no other round. Every push of two ops or more
/// reads its claims once before its first write (100 + 100 + 50 keys here), the fresh push too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_push_reads_the_remaining_claims_in_batches_instead_of_rounds() {
    let table = ddb_store().await;
    let batch = ops("r", 250);
    let requests = table.requests();
    requests.reset();
    let first = table.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(first.error, None);
    assert_eq!(requests.count("TransactWriteItems"), 250);
    assert_eq!(requests.count("Query"), 1);
    assert_eq!(
        requests.count("BatchGetItem"),
        3,
        "a fresh push reads its claims once, to check them"
    );
    requests.reset();
    let re_push = table.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(re_push.error, None);
    assert_eq!(re_push.appended, (1..=250).map(again).collect::<Vec<_>>());
    assert_eq!(
        requests.snapshot().into_iter().collect::<Vec<_>>(),
        vec![
            ("BatchGetItem".to_owned(), 3 + 3),
            ("Query".to_owned(), 1),
            ("TransactWriteItems".to_owned(), 1)
        ],
        "the check's read, then the fast path's"
    );
    // Mixed: the stored ops are answered from the batch read, the new ones get rounds.
    let mut mixed = batch[240..].to_vec();
    mixed.extend(ops("n", 3));
    requests.reset();
    let outcome = table.append_batch("s", &mixed, far_deadline()).await;
    assert_eq!(outcome.error, None);
    let mut expected: Vec<Appended> = (241..=250).map(again).collect();
    expected.extend([fresh(251), fresh(252), fresh(253)]);
    assert_eq!(outcome.appended, expected);
    assert_eq!(
        requests.count("TransactWriteItems"),
        4,
        "one finding round, three new ops"
    );
    assert_eq!(requests.count("BatchGetItem"), 1 + 1);
}

/// A store on `table` whose first round of `op_id` first lets another writer store `intruder`
/// (a second store on the same table): a writer claiming after the push's claim check.
fn intruding_at(table: &Table, op_id: &'static str, intruder: NewOp) -> DynamoDbStore {
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let table_name = table.table().to_owned();
    (**table).clone().with_before_write(move |attempt| {
        let armed = armed.clone();
        let table_name = table_name.clone();
        let intruder = intruder.clone();
        Box::pin(async move {
            if attempt.op_id != op_id || !armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let other = DynamoDbStore::connect(table_name, Some(&ddb_endpoint())).await;
            let stored = other.append_batch("s", &[intruder], far_deadline()).await;
            assert_eq!(stored.error, None, "the other writer stores its op");
        }) as oncecheck_store::StoreFuture<'static, ()>
    })
}

//= specs/relay-append.md#R3
//# A push of two ops or more reads the claims of all its ops before its first write; an op_id
//# stored with another payload refuses the whole push, and nothing is written.
/// The race the claim check leaves, on the push's round: another writer stores s1 with another
/// payload after the check, before the push's first round. n1 is stored (above s1), s1's round
/// finds the foreign digest and the push stops there with the conflict naming s1's seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_claiming_after_the_claim_check_stops_the_push_at_that_op() {
    let table = ddb_store().await;
    let racing = intruding_at(&table, "n1", NewOp::new("s1", "the other writer's payload"));
    let batch = [
        NewOp::new("n1", "n1"),
        NewOp::new("s1", "this push's payload"),
        NewOp::new("n3", "n3"),
    ];
    let outcome = racing.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(outcome.appended, vec![fresh(2)]);
    assert_eq!(
        outcome.error,
        Some(StoreError::PayloadConflict {
            op_id: "s1".into(),
            seq: 1
        })
    );
    assert_eq!(op_ids(&pull_all(&*table, "s").await), vec!["s1", "n1"]);
}

/// The same race met by the re-push fast path: c1 and c2 are stored; the re-push [c1, c2, c3']
/// passes the check (c3 is not stored yet), another writer stores c3 with another payload
/// before c1's round, and the fast path's batched read finds it: c1 and c2 answered, then the
/// conflict naming c3's seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_payload_found_by_the_batched_read_is_refused_with_its_seq() {
    let table = ddb_store().await;
    let batch = ops("c", 3);
    assert_eq!(
        table
            .append_batch("s", &batch[..2], far_deadline())
            .await
            .error,
        None
    );
    let racing = intruding_at(&table, "c1", NewOp::new("c3", "the other writer's payload"));
    let mut altered = batch.clone();
    altered[2] = NewOp::new("c3", "another payload");
    let outcome = racing.append_batch("s", &altered, far_deadline()).await;
    assert_eq!(outcome.appended, vec![again(1), again(2)]);
    assert_eq!(
        outcome.error,
        Some(StoreError::PayloadConflict {
            op_id: "c3".into(),
            seq: 3
        })
    );
    let all = pull_all(&*table, "s").await;
    assert_eq!(
        all[2].payload,
        b"the other writer's payload".to_vec(),
        "the first payload is kept"
    );
}

/// DynamoDB's 400 KB item limit, attribute names included, is checked for the whole batch before
/// the first write: (small, small, 450 KB) stores nothing and sends nothing; an op that fits
/// exactly is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_over_the_item_size_refuses_the_whole_push_before_any_write() {
    let table = ddb_store().await;
    let requests = table.requests();
    requests.reset();
    let mut batch = ops("z", 2);
    batch.push(NewOp::new("z3", vec![b'x'; 450 * 1024]));
    let outcome = table.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(outcome.appended, vec![]);
    assert!(
        matches!(outcome.error, Some(StoreError::TooLarge { index: 2, .. })),
        "{:?}",
        outcome.error
    );
    assert_eq!(requests.total(), 0, "nothing sent");
    assert!(pull_all(&*table, "s").await.is_empty());
    // A large op within the limit is stored. (The exact boundary is pinned by a unit test: moto
    // counts a binary value by its base64 text, a third more than DynamoDB counts.)
    let large = NewOp::new("z4", vec![b'y'; 250 * 1024]);
    let stored = table.append_batch("s", &[large], far_deadline()).await;
    assert_eq!(stored.error, None);
    assert_eq!(stored.appended, vec![fresh(1)]);
    let long_stream = "s".repeat(2049);
    assert!(matches!(
        table
            .append_batch(&long_stream, &ops("k", 1), far_deadline())
            .await
            .error,
        Some(StoreError::InvalidInput { .. })
    ));
}

/// DynamoDB may leave keys of a BatchGetItem unprocessed for load: the claim check asks for them
/// again after a backoff, bounded by `lost_rounds_max` answers in a row that leave keys, then
/// ends with `Unavailable`; fewer than that, and the push goes on as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprocessed_claim_keys_are_asked_again_within_the_budget() {
    let tuning = AppendTuning {
        lost_rounds_max: 2,
        ..test_tuning()
    };
    let (table, proxy) = behind_proxy(tuning).await;
    for _ in 0..2 {
        proxy.fault_next("BatchGetItem", Fault::UnprocessedAll);
    }
    let outcome = table.append_batch("s", &ops("o", 2), far_deadline()).await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.appended, vec![fresh(1), fresh(2)]);
    assert_eq!(
        proxy.count("BatchGetItem"),
        3,
        "two answers left keys, the third read them"
    );
    for _ in 0..3 {
        proxy.fault_next("BatchGetItem", Fault::UnprocessedAll);
    }
    let before = proxy.count("TransactWriteItems");
    let refused = table.append_batch("s", &ops("p", 2), far_deadline()).await;
    assert_eq!(refused.error, Some(StoreError::Unavailable { attempts: 3 }));
    assert_eq!(refused.appended, vec![]);
    assert_eq!(proxy.count("TransactWriteItems"), before, "nothing written");
}
