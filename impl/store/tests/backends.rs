//! The backend-generic suite: every test runs against memory, SQLite and DynamoDB (moto).
//!
//! DynamoDB runs need ONCECHECK_DDB_ENDPOINT and fail without it.

mod support;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use oncecheck_store::{NewOp, OpStore, StoreError};
use support::*;
use tokio::time::Instant;

//= specs/relay-append.md#R5
//# With new-build writers only, the stored seqs are exactly 1..n.
async fn seqs_are_dense_from_one(backend: Backend) {
    let store = &*backend.store;
    let first = store.append_batch("s", &ops("a", 5), far_deadline()).await;
    assert_eq!(first.error, None);
    assert_eq!(seqs(&first.appended), vec![1, 2, 3, 4, 5]);
    let second = store.append_batch("s", &ops("b", 3), far_deadline()).await;
    assert_eq!(seqs(&second.appended), vec![6, 7, 8]);
    let all = pull_all(store, "s").await;
    assert_eq!(stored_seqs(&all), (1..=8).collect::<Vec<_>>());
    let last = store.append_batch("s", &ops("c", 1), far_deadline()).await;
    assert_eq!(
        last.appended,
        vec![fresh(9)],
        "a final fresh append lands at n + 1"
    );
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
async fn a_re_push_answers_its_own_seq(backend: Backend) {
    let store = &*backend.store;
    let first = store.append_batch("s", &ops("o", 2), far_deadline()).await;
    assert_eq!(first.appended, vec![fresh(1), fresh(2)]);
    let re_push = store.append_batch("s", &ops("o", 3), far_deadline()).await;
    assert_eq!(re_push.error, None);
    assert_eq!(re_push.appended, vec![again(1), again(2), fresh(3)]);
    // Same op_id, other payload: refused with a conflict naming the stored seq, and the first
    // payload is kept.
    let altered = [NewOp::new("o1", "another payload")];
    let answer = store.append_batch("s", &altered, far_deadline()).await;
    assert_eq!(answer.appended, vec![]);
    assert_eq!(
        answer.error,
        Some(StoreError::PayloadConflict {
            op_id: "o1".into(),
            seq: 1
        })
    );
    let all = pull_all(store, "s").await;
    assert_eq!(op_ids(&all), vec!["o1", "o2", "o3"]);
    assert_eq!(all[0].payload, b"payload of o1".to_vec());
    let fresh_op = store.append_batch("s", &ops("p", 1), far_deadline()).await;
    assert_eq!(fresh_op.appended, vec![fresh(4)], "re-pushes burned no seq");
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
async fn a_re_push_after_another_op_answers_its_own_seq_and_burns_none(backend: Backend) {
    let store = &*backend.store;
    assert_eq!(
        store
            .append_batch("s", &[NewOp::new("o1", "1")], far_deadline())
            .await
            .appended,
        vec![fresh(1)]
    );
    assert_eq!(
        store
            .append_batch("s", &[NewOp::new("o2", "2")], far_deadline())
            .await
            .appended,
        vec![fresh(2)]
    );
    assert_eq!(
        store
            .append_batch("s", &[NewOp::new("o1", "1")], far_deadline())
            .await
            .appended,
        vec![again(1)]
    );
    assert_eq!(
        store
            .append_batch("s", &[NewOp::new("o3", "3")], far_deadline())
            .await
            .appended,
        vec![fresh(3)]
    );
    assert_eq!(stored_seqs(&pull_all(store, "s").await), vec![1, 2, 3]);
}

//= specs/relay-append.md#R2
//# At most one op per seq; no op is overwritten.
async fn a_legacy_op_sets_the_floor(backend: Backend) {
    let store = &*backend.store;
    store
        .put_legacy_op("s", 1, &NewOp::new("legacy1", "old"))
        .await
        .expect("legacy op");
    let first = store.append_batch("s", &ops("n", 1), far_deadline()).await;
    assert_eq!(first.appended, vec![fresh(2)]);
    let second = store.append_batch("s", &ops("m", 1), far_deadline()).await;
    assert_eq!(second.appended, vec![fresh(3)]);
    let all = pull_all(store, "s").await;
    assert_eq!(op_ids(&all), vec!["legacy1", "n1", "m1"]);
    assert_eq!(
        all[0].payload,
        b"old".to_vec(),
        "the legacy op is not overwritten"
    );
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
async fn a_run_of_occupied_seqs_is_stepped_over(backend: Backend) {
    let store = &*backend.store;
    for seq in 1..=40 {
        store
            .put_legacy_op("s", seq, &NewOp::new(format!("legacy{seq}"), "old"))
            .await
            .expect("legacy op");
    }
    let pushed = store.append_batch("s", &ops("n", 2), far_deadline()).await;
    assert_eq!(pushed.error, None);
    assert_eq!(pushed.appended, vec![fresh(41), fresh(42)]);
    assert_eq!(
        stored_seqs(&pull_all(store, "s").await),
        (1..=42).collect::<Vec<_>>()
    );
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
async fn a_push_stops_at_its_deadline_and_keeps_what_it_stored(backend: Backend) {
    let stalling = StallAfter {
        inner: backend.store.clone(),
        ops_before_stall: 2,
        appended: AtomicU64::new(0),
    };
    let batch = ops("d", 4);
    let deadline = Instant::now() + Duration::from_millis(1500);
    let outcome = stalling.append_batch("s", &batch, deadline).await;
    assert_eq!(outcome.appended, vec![fresh(1), fresh(2)]);
    assert_eq!(outcome.error, Some(StoreError::DeadlineExceeded));
    assert_eq!(
        op_ids(&pull_all(&*backend.store, "s").await),
        vec!["d1", "d2"]
    );
    let re_push = backend
        .store
        .append_batch("s", &batch, far_deadline())
        .await;
    assert_eq!(re_push.error, None);
    assert_eq!(
        re_push.appended,
        vec![again(1), again(2), fresh(3), fresh(4)]
    );
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <=
//# k.
async fn pulls_return_ops_in_order_within_their_limit(backend: Backend) {
    let store = &*backend.store;
    store.append_batch("s", &ops("o", 10), far_deadline()).await;
    store
        .append_batch("other", &ops("x", 2), far_deadline())
        .await;
    assert_eq!(
        stored_seqs(&store.pull("s", 0, 3).await.unwrap()),
        vec![1, 2, 3]
    );
    assert_eq!(
        stored_seqs(&store.pull("s", 3, 3).await.unwrap()),
        vec![4, 5, 6]
    );
    assert_eq!(stored_seqs(&store.pull("s", 9, 5).await.unwrap()), vec![10]);
    assert!(store.pull("s", 10, 5).await.unwrap().is_empty());
    assert!(store.pull("s", 0, 0).await.unwrap().is_empty());
    assert!(store.pull("nobody", 0, 5).await.unwrap().is_empty());
    assert_eq!(
        op_ids(&store.pull("other", 0, 100).await.unwrap()),
        vec!["x1", "x2"]
    );
    let all = store.pull("s", 0, 1000).await.unwrap();
    assert_eq!(
        op_ids(&all),
        (1..=10)
            .map(|index| format!("o{index}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(all[4].payload, b"payload of o5".to_vec());
    assert!(matches!(
        store.pull("s", -1, 5).await,
        Err(StoreError::InvalidInput { .. })
    ));
}

async fn invalid_input_is_refused_and_stores_nothing(backend: Backend) {
    let store = &*backend.store;
    let empty_id = store
        .append_batch("s", &[NewOp::new("", "x")], far_deadline())
        .await;
    assert!(matches!(
        empty_id.error,
        Some(StoreError::InvalidInput { .. })
    ));
    let empty_stream = store.append_batch("", &ops("o", 1), far_deadline()).await;
    assert!(matches!(
        empty_stream.error,
        Some(StoreError::InvalidInput { .. })
    ));
    // The relay serves a shared store: through the `Arc`, the checks are the store's own.
    let shared: &std::sync::Arc<dyn OpStore> = &backend.store;
    assert!(matches!(
        OpStore::check_op(shared, "s", &NewOp::new("", "x")),
        Err(StoreError::InvalidInput { .. })
    ));
    let through_arc =
        OpStore::append_batch(shared, "s", &[NewOp::new("", "x")], far_deadline()).await;
    assert!(matches!(
        through_arc.error,
        Some(StoreError::InvalidInput { .. })
    ));
    assert!(pull_all(store, "s").await.is_empty());
}

//= specs/relay-append.md#R3
//# A push of two ops or more reads the claims of all its ops before its first write; an op_id
//# stored with another payload refuses the whole push, and nothing is written.
async fn a_batch_with_a_conflicting_op_id_stores_nothing(backend: Backend) {
    let store = &*backend.store;
    let first = store
        .append_batch("s", &[NewOp::new("s1", "first payload")], far_deadline())
        .await;
    assert_eq!(first.appended, vec![fresh(1)]);
    let batch = [
        NewOp::new("n1", "n1"),
        NewOp::new("s1", "another payload"),
        NewOp::new("n3", "n3"),
    ];
    let refused = store.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(refused.appended, vec![], "nothing answered");
    assert_eq!(
        refused.error,
        Some(StoreError::PayloadConflict {
            op_id: "s1".into(),
            seq: 1
        })
    );
    assert_eq!(
        op_ids(&pull_all(store, "s").await),
        vec!["s1"],
        "nothing stored"
    );
    let fixed = [
        NewOp::new("n1", "n1"),
        NewOp::new("s1", "first payload"),
        NewOp::new("n3", "n3"),
    ];
    let stored = store.append_batch("s", &fixed, far_deadline()).await;
    assert_eq!(stored.error, None);
    assert_eq!(
        stored.appended,
        vec![fresh(2), again(1), fresh(3)],
        "the refused push burned no seq"
    );
}

/// The race the claim check leaves: another writer stores one of the push's op_ids with another
/// payload after the check and before the push writes it. The push stops at that op with the
/// conflict; the ops before it are stored and answered (the relay lists them in `stored`), the
/// rest are not attempted.
async fn a_writer_claiming_after_the_check_stops_the_push_at_that_op(backend: Backend) {
    let racing = ClaimsAfterCheck {
        inner: backend.store.clone(),
        intruder: NewOp::new("s1", "the other writer's payload"),
    };
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
    let all = pull_all(&*backend.store, "s").await;
    assert_eq!(op_ids(&all), vec!["s1", "n1"]);
    assert_eq!(all[0].payload, b"the other writer's payload".to_vec());
}

/// The item size is the same limit on every backend: DynamoDB's 400 KB item, attribute names
/// included. (small, small, 450 KB) stores nothing; a large op within it is stored.
async fn an_op_over_the_item_size_refuses_the_push_on_every_backend(backend: Backend) {
    let store = &*backend.store;
    let mut batch = ops("z", 2);
    batch.push(NewOp::new("z3", vec![b'x'; 450 * 1024]));
    let outcome = store.append_batch("s", &batch, far_deadline()).await;
    assert_eq!(outcome.appended, vec![]);
    assert!(
        matches!(outcome.error, Some(StoreError::TooLarge { index: 2, .. })),
        "{:?}",
        outcome.error
    );
    assert!(pull_all(store, "s").await.is_empty());
    // Within the limit (moto counts a binary value by its base64 text, a third more than
    // DynamoDB does: the exact boundary is pinned by the limits' unit test).
    let large = NewOp::new("z4", vec![b'y'; 250 * 1024]);
    let stored = store.append_batch("s", &[large], far_deadline()).await;
    assert_eq!(stored.appended, vec![fresh(1)]);
    let long_stream = "s".repeat(2049);
    assert!(matches!(
        store
            .append_batch(&long_stream, &ops("k", 1), far_deadline())
            .await
            .error,
        Some(StoreError::InvalidInput { .. })
    ));
}

macro_rules! suite {
    ($backend:ident: $($test:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::support::backend(stringify!($backend)).await).await;
                }
            )*
        }
    };
}

macro_rules! all_backends {
    ($($test:ident),* $(,)?) => {
        suite!(memory: $($test),*);
        suite!(sqlite: $($test),*);
        suite!(dynamodb: $($test),*);
    };
}

all_backends!(
    seqs_are_dense_from_one,
    a_re_push_answers_its_own_seq,
    a_re_push_after_another_op_answers_its_own_seq_and_burns_none,
    a_legacy_op_sets_the_floor,
    a_run_of_occupied_seqs_is_stepped_over,
    a_push_stops_at_its_deadline_and_keeps_what_it_stored,
    pulls_return_ops_in_order_within_their_limit,
    invalid_input_is_refused_and_stores_nothing,
    a_batch_with_a_conflicting_op_id_stores_nothing,
    a_writer_claiming_after_the_check_stops_the_push_at_that_op,
    an_op_over_the_item_size_refuses_the_push_on_every_backend,
);
