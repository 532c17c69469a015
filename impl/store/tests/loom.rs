//! loom: every interleaving of two writers and a puller on the memory backend, whose one mutex
//! is its whole concurrency story (src/memory.rs, src/sync.rs).
//!
//! Invariant (the lock discipline): an append runs start to end under one acquisition of the
//! store's lock, so concurrent appends take dense, distinct seqs (R2, R5), a re-push answers the
//! seq of its first append (R3), and a pull sees a prefix 1..k of the log, never a hole (R1).
//! Seeded bug `unlocked-store` (ONCECHECK_LOOM_MUTATION): the lock is skipped and loom reports
//! the racing accesses, so this test fails (scripts/red-runs asserts it).
//!
//! Run: `ONCECHECK_SYNC=loom cargo test -p oncecheck-store --features loom --test loom` (without
//! `ONCECHECK_SYNC=loom` the store keeps std's primitives and this file compiles to nothing).
#![cfg(oncecheck_loom)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use oncecheck_store::{Appended, MemoryStore, NewOp, OpStore, PushContext};
use tokio::time::Instant;

/// The memory backend never waits: its futures finish on their first poll.
fn now<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory backend never waits"),
    }
}

fn append(store: &MemoryStore, op_id: &str) -> Appended {
    let deadline = Instant::now() + Duration::from_secs(60);
    now(store.append_op(
        "s",
        &NewOp::new(op_id, op_id.as_bytes()),
        deadline,
        &mut PushContext::default(),
    ))
    .expect("an append to the memory backend succeeds")
}

fn seqs(store: &MemoryStore) -> Vec<(i64, String)> {
    now(store.pull("s", 0, 10))
        .unwrap()
        .into_iter()
        .map(|op| (op.seq, op.op_id))
        .collect()
}

//= specs/relay-append.md#R2
//# At most one op per seq; no op is overwritten.
//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same
//# seq.
#[test]
fn concurrent_appends_take_dense_seqs_and_a_re_push_answers_the_same_seq() {
    loom::model(|| {
        let store = MemoryStore::new();
        let writer = store.clone();
        let first = loom::thread::spawn(move || append(&writer, "a"));
        let writer = store.clone();
        let second = loom::thread::spawn(move || (append(&writer, "b"), append(&writer, "a")));
        let seen = seqs(&store);
        let numbers: Vec<i64> = seen.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(
            numbers,
            (1..=seen.len() as i64).collect::<Vec<_>>(),
            "a pull sees a prefix 1..k: {seen:?}"
        );
        let a = first.join().unwrap();
        let (b, a_again) = second.join().unwrap();
        let mut fresh = [a, b, a_again]
            .iter()
            .filter(|appended| !appended.existing)
            .map(|appended| appended.seq)
            .collect::<Vec<_>>();
        fresh.sort_unstable();
        assert_eq!(
            fresh,
            [1, 2],
            "two ops, two fresh appends at seqs 1 and 2: {a:?} {b:?} {a_again:?}"
        );
        assert_eq!(
            a.seq, a_again.seq,
            "a re-push answers the seq of the first append"
        );
        assert!(
            a.existing != a_again.existing,
            "exactly one of the two appends of a stored it"
        );
        let stored = seqs(&store);
        assert_eq!(stored.len(), 2, "nothing stored twice: {stored:?}");
        assert!(stored.contains(&(a.seq, "a".into())), "{stored:?}");
        assert!(stored.contains(&(b.seq, "b".into())), "{stored:?}");
    });
}
