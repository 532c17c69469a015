//! DynamoDB-only tests against moto (ONCECHECK_DDB_ENDPOINT; they fail when it is unset).
//!
//! Deterministic through the test seam: a writer is held after its round chose its seq and before
//! it sends. What no test against an emulator can do is hold a transaction *during* its commit
//! (the visibility window); the conformance proxy does that. These tests pin the round logic:
//! which seq, which condition, which counter source, how many requests.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncecheck_store::dynamodb::seams::{AddEraWrite, WriteAttempt};
use oncecheck_store::dynamodb::{AppendTuning, CounterSource, PredecessorCheck};
use oncecheck_store::{Appended, DynamoDbStore, NewOp, OpStore, StoreError, StoreFuture};
use support::*;
use tokio::sync::Notify;

type Attempts = Arc<Mutex<Vec<WriteAttempt>>>;

fn attempts_of(attempts: &Attempts, op_id: &str) -> Vec<WriteAttempt> {
    attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|attempt| attempt.op_id == op_id)
        .cloned()
        .collect()
}

fn shape(attempts: &[WriteAttempt]) -> Vec<(i64, i64, Option<PredecessorCheck>, CounterSource)> {
    attempts
        .iter()
        .map(|a| (a.seq, a.expected, a.predecessor, a.counter_from))
        .collect()
}

/// Holds the first round of `op_id` until released; records every attempt.
#[derive(Clone)]
struct Gate {
    reached: Arc<Notify>,
    release: Arc<Notify>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            reached: Arc::new(Notify::new()),
            release: Arc::new(Notify::new()),
        }
    }
}

fn hold_first_round_of(
    op_id: &'static str,
    gate: Gate,
    attempts: Attempts,
) -> impl Fn(WriteAttempt) -> StoreFuture<'static, ()> + Send + Sync + 'static {
    move |attempt: WriteAttempt| {
        let gate = gate.clone();
        let hold = attempt.op_id == op_id && attempt.round == 1;
        attempts.lock().unwrap().push(attempt);
        Box::pin(async move {
            if hold {
                gate.reached.notify_one();
                gate.release.notified().await;
            }
        })
    }
}

fn one(op_id: &str) -> [NewOp; 1] {
    [NewOp::new(op_id, format!("payload of {op_id}"))]
}

async fn push(store: &DynamoDbStore, stream: &str, ops: &[NewOp]) -> Vec<Appended> {
    let outcome = store.append_batch(stream, ops, far_deadline()).await;
    assert_eq!(outcome.error, None, "push of {:?}", op_ids_of(ops));
    outcome.appended
}

fn op_ids_of(ops: &[NewOp]) -> Vec<&str> {
    ops.iter().map(|op| op.op_id.as_str()).collect()
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <=
//# k.
/// The reproduction of the ADD-era bug, on this build: A is held after choosing its seq (not
/// during its commit), B commits meanwhile, a reader stores B's seq as its cursor; A then lands
/// above it, so the reader's next pull still gets A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_is_never_handed_a_seq_above_an_append_still_in_flight() {
    let plain = ddb_store().await;
    let attempts: Attempts = Arc::default();
    let gate = Gate::new();
    let held =
        plain
            .clone()
            .with_before_write(hold_first_round_of("a", gate.clone(), attempts.clone()));
    let writer_a = tokio::spawn({
        let held = held.clone();
        async move { held.append_batch("s", &one("a"), far_deadline()).await }
    });
    gate.reached.notified().await;
    assert_eq!(push(&held, "s", &one("b")).await, vec![fresh(1)]);
    let first_page = plain.pull("s", 0, 100).await.unwrap();
    assert_eq!(op_ids(&first_page), vec!["b"]);
    let cursor = first_page.last().unwrap().seq;
    gate.release.notify_one();
    let a = writer_a.await.unwrap();
    assert_eq!(a.error, None);
    assert_eq!(a.appended, vec![fresh(2)]);
    let next_page = plain.pull("s", cursor, 100).await.unwrap();
    assert_eq!(
        op_ids(&next_page),
        vec!["a"],
        "the reader's next pull, from the cursor it stored, still gets A: nothing was skipped"
    );
    let rounds = attempts_of(&attempts, "a");
    assert_eq!(
        shape(&rounds),
        vec![
            (1, 0, None, CounterSource::Read),
            (2, 1, Some(PredecessorCheck::Exists), CounterSource::Hint)
        ],
        "A's second round took the ALL_OLD hint (no re-read) and checked B's op"
    );
}

/// The same schedule with ADD-era writers shows the bug this design fixes (the red run): A's
/// seq is allocated before its write, B commits above it, the reader's cursor passes A for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_add_era_writers_the_same_schedule_skips_an_op() {
    let plain = ddb_store().await;
    let attempts: Attempts = Arc::default();
    let gate = Gate::new();
    let old = plain
        .add_era_writer()
        .with_before_write(hold_first_round_of("a", gate.clone(), attempts.clone()));
    let writer_a = tokio::spawn({
        let old = old.clone();
        async move { old.append("s", &NewOp::new("a", "a")).await }
    });
    gate.reached.notified().await;
    assert_eq!(
        old.append("s", &NewOp::new("b", "b")).await.unwrap(),
        (2, AddEraWrite::Stored)
    );
    let first_page = plain.pull("s", 0, 100).await.unwrap();
    assert_eq!(op_ids(&first_page), vec!["b"]);
    let cursor = first_page.last().unwrap().seq;
    gate.release.notify_one();
    assert_eq!(writer_a.await.unwrap().unwrap(), (1, AddEraWrite::Stored));
    assert!(
        plain.pull("s", cursor, 100).await.unwrap().is_empty(),
        "A landed below the reader's cursor"
    );
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
//= specs/relay-append.md#R6
//# A failed attribute_exists while the counter held proves a legacy gap: the next round, for that
//# seq only, checks attribute_not_exists instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_does_not_commit_over_a_missing_op_below_it_and_crosses_a_legacy_gap_once() {
    let plain = ddb_store().await;
    for seq in 1..=3 {
        plain
            .put_legacy_op("s", seq, &NewOp::new(format!("legacy{seq}"), "old"))
            .await
            .unwrap();
    }
    plain.set_counter("s", 4).await.unwrap(); // seq 4 was burned by an ADD-era writer
    let attempts: Attempts = Arc::default();
    let between_rounds: Arc<Mutex<Vec<(i64, usize)>>> = Arc::default();
    let hooked = plain.clone().with_before_write({
        let (attempts, between_rounds, plain) =
            (attempts.clone(), between_rounds.clone(), plain.clone());
        move |attempt: WriteAttempt| {
            let observe = attempt.op_id == "n1" && attempt.round == 2;
            attempts.lock().unwrap().push(attempt);
            let (between_rounds, plain) = (between_rounds.clone(), plain.clone());
            Box::pin(async move {
                if observe {
                    let counter = plain.read_counter("s").await.unwrap();
                    let stored = pull_all(&plain, "s").await.len();
                    between_rounds.lock().unwrap().push((counter, stored));
                }
            }) as StoreFuture<'static, ()>
        }
    });
    let pushed = push(&hooked, "s", &ops("n", 2)).await;
    assert_eq!(pushed, vec![fresh(5), fresh(6)]);
    assert_eq!(
        *between_rounds.lock().unwrap(),
        vec![(4, 3)],
        "the checked round stored nothing and left the counter at 4"
    );
    assert_eq!(
        shape(&attempts_of(&attempts, "n1")),
        vec![
            (5, 4, Some(PredecessorCheck::Exists), CounterSource::Read),
            (
                5,
                4,
                Some(PredecessorCheck::NotExists),
                CounterSource::Known
            ),
        ],
        "the gap cost one extra round, with the check flipped for seq 5 only"
    );
    assert_eq!(
        shape(&attempts_of(&attempts, "n2")),
        vec![(6, 5, Some(PredecessorCheck::Exists), CounterSource::Carried)],
        "the next op lands in one round"
    );
    assert_eq!(
        stored_seqs(&pull_all(&*plain, "s").await),
        vec![1, 2, 3, 5, 6]
    );
}

//= specs/relay-append.md#R4
//# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
//= specs/relay-append.md#R2
//# At most one op per seq; no op is overwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_era_writer_meanwhile_overwrites_nothing_and_never_moves_the_counter_back() {
    let plain = ddb_store().await;
    assert_eq!(push(&plain, "s", &ops("o", 3)).await.len(), 3);
    let old = plain.add_era_writer();
    let allocated: Arc<Mutex<Vec<i64>>> = Arc::default();
    let attempts: Attempts = Arc::default();
    let hooked = plain.clone().with_before_write({
        let (old, allocated, attempts) = (old.clone(), allocated.clone(), attempts.clone());
        move |attempt: WriteAttempt| {
            let allocate = attempt.op_id == "n1" && attempt.round == 1;
            attempts.lock().unwrap().push(attempt);
            let (old, allocated) = (old.clone(), allocated.clone());
            Box::pin(async move {
                if allocate {
                    // An older relay allocates twice with ADD and has not written yet.
                    for _ in 0..2 {
                        let seq = old.allocate("s").await.unwrap();
                        allocated.lock().unwrap().push(seq);
                    }
                }
            }) as StoreFuture<'static, ()>
        }
    });
    let pushed = push(&hooked, "s", &one("n1")).await;
    assert_eq!(*allocated.lock().unwrap(), vec![4, 5]);
    assert_eq!(
        pushed,
        vec![fresh(6)],
        "the new op lands above the ADD-era seqs"
    );
    let counter_after_new = plain.read_counter("s").await.unwrap();
    assert!(
        counter_after_new >= 5,
        "the counter moved back to {counter_after_new}"
    );
    assert_eq!(
        old.write("s", 4, &NewOp::new("old4", "old")).await.unwrap(),
        AddEraWrite::Stored
    );
    assert_eq!(
        old.write("s", 5, &NewOp::new("old5", "old")).await.unwrap(),
        AddEraWrite::Stored
    );
    let counter_at_end = plain.read_counter("s").await.unwrap();
    assert!(
        counter_at_end >= 6,
        "the counter moved back to {counter_at_end}"
    );
    let all = pull_all(&*plain, "s").await;
    assert_eq!(stored_seqs(&all), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        op_ids(&all),
        vec!["o1", "o2", "o3", "old4", "old5", "n1"],
        "nothing overwritten"
    );
    assert_eq!(
        attempts_of(&attempts, "n1")[1].counter_from,
        CounterSource::Hint
    );
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_push_that_lost_the_counter_race_answers_its_own_seq_and_burns_none() {
    let plain = ddb_store().await;
    assert_eq!(push(&plain, "s", &one("o1")).await, vec![fresh(1)]);
    let attempts: Attempts = Arc::default();
    let gate = Gate::new();
    let held =
        plain
            .clone()
            .with_before_write(hold_first_round_of("o1", gate.clone(), attempts.clone()));
    let re_push = tokio::spawn({
        let held = held.clone();
        async move { held.append_batch("s", &one("o1"), far_deadline()).await }
    });
    gate.reached.notified().await;
    assert_eq!(push(&plain, "s", &one("o2")).await, vec![fresh(2)]);
    gate.release.notify_one();
    let answered = re_push.await.unwrap();
    assert_eq!(answered.error, None);
    assert_eq!(
        answered.appended,
        vec![Appended {
            seq: 1,
            existing: true
        }]
    );
    assert_eq!(
        attempts_of(&attempts, "o1").len(),
        1,
        "answered in the one round it lost"
    );
    assert_eq!(
        push(&plain, "s", &one("o3")).await,
        vec![fresh(3)],
        "no seq burned"
    );
    assert_eq!(stored_seqs(&pull_all(&*plain, "s").await), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_occupied_seqs_above_the_counter_is_stepped_over_in_one_round() {
    let plain = ddb_store().await;
    for seq in 1..=40 {
        plain
            .put_legacy_op("s", seq, &NewOp::new(format!("legacy{seq}"), "old"))
            .await
            .unwrap();
    }
    let attempts: Attempts = Arc::default();
    let hooked = plain.clone().with_before_write({
        let attempts = attempts.clone();
        move |attempt: WriteAttempt| {
            attempts.lock().unwrap().push(attempt);
            Box::pin(async {}) as StoreFuture<'static, ()>
        }
    });
    let requests = plain.requests();
    requests.reset();
    assert_eq!(push(&hooked, "s", &one("n")).await, vec![fresh(41)]);
    assert_eq!(
        shape(&attempts_of(&attempts, "n")),
        vec![
            (1, 0, None, CounterSource::Read),
            (41, 0, Some(PredecessorCheck::Exists), CounterSource::Floor)
        ],
        "two rounds: the occupied one and the one above the top"
    );
    assert_eq!(requests.count("TransactWriteItems"), 2);
    assert_eq!(
        requests.count("Query"),
        2,
        "one counter read and one reverse Query for the top"
    );
    assert_eq!(plain.read_counter("s").await.unwrap(), 41);
    assert_eq!(push(&plain, "s", &one("m")).await, vec![fresh(42)]);
}

//= specs/relay-append.md#R7
//# An uncontended n-op push costs n transactions and one counter read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_carries_the_seq_it_wrote_forward_and_reads_the_counter_once() {
    let store = ddb_store().await;
    let requests = store.requests();
    requests.reset();
    let first = push(&store, "s", &ops("a", 100)).await;
    assert_eq!(seqs(&first), (1..=100).collect::<Vec<_>>());
    assert_eq!(requests.count("TransactWriteItems"), 100);
    assert_eq!(requests.count("Query"), 1, "one counter read per push");
    assert_eq!(
        requests.count("BatchGetItem"),
        1,
        "the claim check before the first write reads claims, not the counter"
    );
    assert_eq!(requests.total(), 102, "{:?}", requests.snapshot());
    requests.reset();
    let second = push(&store, "s", &ops("b", 10)).await;
    assert_eq!(seqs(&second), (101..=110).collect::<Vec<_>>());
    assert_eq!(
        requests.snapshot().into_iter().collect::<Vec<_>>(),
        vec![
            ("BatchGetItem".to_owned(), 1),
            ("Query".to_owned(), 1),
            ("TransactWriteItems".to_owned(), 10)
        ]
    );
}

/// A hook that burns the counter (an ADD by another writer) in the listed rounds of `op_id`,
/// so exactly those rounds lose.
fn lose_rounds(
    store: &DynamoDbStore,
    op_id: &'static str,
    rounds: &'static [u32],
    attempts: Attempts,
) -> DynamoDbStore {
    let old = store.add_era_writer();
    store
        .clone()
        .with_before_write(move |attempt: WriteAttempt| {
            let lose = attempt.op_id == op_id && rounds.contains(&attempt.round);
            attempts.lock().unwrap().push(attempt);
            let old = old.clone();
            Box::pin(async move {
                if lose {
                    old.allocate("s").await.unwrap();
                }
            }) as StoreFuture<'static, ()>
        })
}

//= specs/relay-append.md#R6
//# The contention budget counts lost rounds in a row; over it the append ends with a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contention_budget_counts_lost_rounds_in_a_row() {
    let tuning = AppendTuning {
        lost_rounds_max: 3,
        backoff_base: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
    };
    let table = ddb_store().await;
    let plain = table.clone().with_tuning(tuning);
    push(&plain, "s", &ops("o", 2)).await;
    // Six lost rounds, never more than three in a row: a gap round between them resets the count.
    let attempts: Attempts = Arc::default();
    let losing = lose_rounds(&plain, "c", &[1, 2, 3, 5, 6, 7], attempts.clone());
    assert_eq!(push(&losing, "s", &one("c")).await, vec![fresh(9)]);
    assert_eq!(attempts_of(&attempts, "c").len(), 9);
    // Four in a row is over the budget of three: a typed error, nothing stored.
    let attempts: Attempts = Arc::default();
    let losing = lose_rounds(&plain, "d", &[1, 2, 3, 4], attempts.clone());
    let outcome = losing.append_batch("s", &one("d"), far_deadline()).await;
    assert_eq!(outcome.appended, vec![]);
    assert_eq!(
        outcome.error,
        Some(StoreError::ContentionBudgetExhausted { lost_rounds: 4 })
    );
    assert_eq!(attempts_of(&attempts, "d").len(), 4);
    assert!(!op_ids(&pull_all(&plain, "s").await).contains(&"d".to_owned()));
}

//= specs/relay-append.md#R4
//# Checked arithmetic: a counter at the top of the seq range is a loud error, never a wrap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_at_i64_max_is_a_loud_error_not_a_wrap() {
    let store = ddb_store().await;
    store.set_counter("s", i64::MAX).await.unwrap();
    let requests = store.requests();
    requests.reset();
    let outcome = store.append_batch("s", &one("o"), far_deadline()).await;
    assert_eq!(
        outcome.error,
        Some(StoreError::SeqOverflow { counter: i64::MAX })
    );
    assert_eq!(requests.count("TransactWriteItems"), 0, "nothing sent");
    assert_eq!(store.read_counter("s").await.unwrap(), i64::MAX);
    assert!(pull_all(&*store, "s").await.is_empty());
}

/// A round that starts after the deadline is cut (raced with `timeout_at`); what the push stored
/// before stays, and the re-push answers it (a cut round that committed is found by its claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_stops_at_its_deadline_and_keeps_what_it_stored() {
    let plain = ddb_store().await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(800);
    let hooked = plain
        .clone()
        .with_before_write(move |attempt: WriteAttempt| {
            Box::pin(async move {
                if attempt.op_id == "d2" {
                    tokio::time::sleep_until(deadline + Duration::from_millis(50)).await;
                }
            }) as StoreFuture<'static, ()>
        });
    let batch = ops("d", 3);
    let outcome = hooked.append_batch("s", &batch, deadline).await;
    assert_eq!(outcome.appended, vec![fresh(1)]);
    assert_eq!(outcome.error, Some(StoreError::DeadlineExceeded));
    let re_push = push(&plain, "s", &batch).await;
    assert_eq!(
        re_push[0],
        Appended {
            seq: 1,
            existing: true
        }
    );
    assert_eq!(seqs(&re_push), vec![1, 2, 3]);
    assert_eq!(
        op_ids(&pull_all(&*plain, "s").await),
        vec!["d1", "d2", "d3"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_never_show_in_pulls() {
    let store = ddb_store().await;
    push(&store, "s", &ops("o", 3)).await;
    let all = store.pull("s", 0, 1000).await.unwrap();
    assert_eq!(stored_seqs(&all), vec![1, 2, 3]);
    assert!(all.iter().all(|op| op.seq > 0));
}

/// Creating the table is idempotent (a relay starting beside a running one, or a restart): the
/// service's "in use" answer for an existing table is success, and the table keeps its ops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_an_existing_table_again_succeeds_and_keeps_its_ops() {
    let store = ddb_store().await;
    let first = store.append_batch("s", &one("o"), far_deadline()).await;
    assert_eq!(first.error, None);
    assert_eq!(store.create_table().await, Ok(()));
    assert_eq!(op_ids(&pull_all(&*store, "s").await), vec!["o"]);
}
