//! Shared test support: the three backends, unique names, a deadline-forcing wrapper.
//!
//! DynamoDB tests read ONCECHECK_DDB_ENDPOINT and fail (never skip) when it is unset.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oncecheck_store::dynamodb::{AppendTuning, Mutation};
use oncecheck_store::{
    Appended, DynamoDbStore, MemoryStore, NewOp, OpStore, PushContext, Seq, SqliteStore,
    StoreError, StoreFuture, StoredOp,
};
use tokio::time::Instant;

pub mod serial_proxy;
pub mod table;

pub use table::Table;

pub const ENDPOINT_ENV: &str = "ONCECHECK_DDB_ENDPOINT";

/// The moto (or DynamoDB) endpoint; panics with the way to get one when it is unset.
pub fn ddb_endpoint() -> String {
    match std::env::var(ENDPOINT_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{ENDPOINT_ENV} is unset: the DynamoDB tests need a DynamoDB-compatible endpoint and never \
             skip. Start moto with `source scripts/services.sh; start_moto` (it exports \
             {ENDPOINT_ENV}), then rerun."
        ),
    }
}

/// Mutation checks: set to a `Mutation` name to run every DynamoDB test with that defect.
pub const MUTATION_ENV: &str = "ONCECHECK_TEST_MUTATION";

fn mutation_from_env() -> Option<Mutation> {
    let name = std::env::var(MUTATION_ENV).ok()?;
    Some(match name.as_str() {
        "NoPredecessorCheck" => Mutation::NoPredecessorCheck,
        "UnconditionalCounterSet" => Mutation::UnconditionalCounterSet,
        "ReadCounterEveryOp" => Mutation::ReadCounterEveryOp,
        "" => return None,
        other => panic!("{MUTATION_ENV}={other} names no mutation"),
    })
}

/// A name unique to this process and call: tests share one moto server and run in parallel.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// Fast retries for tests: the budget semantics are the same, the pauses shorter.
pub fn test_tuning() -> AppendTuning {
    AppendTuning {
        lost_rounds_max: 32,
        backoff_base: Duration::from_millis(1),
        backoff_max: Duration::from_millis(20),
    }
}

/// A DynamoDB store on a fresh table of `endpoint`, counting its requests, with `tuning`.
pub async fn ddb_table_at(endpoint: &str, tuning: AppendTuning) -> Table {
    let mut store = DynamoDbStore::connect(unique("ops"), Some(endpoint))
        .await
        .with_tuning(tuning);
    if let Some(mutation) = mutation_from_env() {
        eprintln!("mutation check: {mutation:?} switched on by {MUTATION_ENV}");
        store = store.with_mutation(mutation);
    }
    Table::create(store, ddb_endpoint()).await
}

/// A DynamoDB store on a fresh table of the test endpoint, counting its requests.
pub async fn ddb_store() -> Table {
    ddb_table_at(&ddb_endpoint(), test_tuning()).await
}

pub async fn sqlite_store() -> (SqliteStore, tempfile::TempDir) {
    let directory = tempfile::tempdir().expect("a temp dir");
    let path = directory.path().join("ops.sqlite");
    let store = SqliteStore::open(path.to_str().expect("utf-8 path"))
        .await
        .expect("opening sqlite");
    (store, directory)
}

/// A backend under test, kept alive with whatever it needs (the SQLite temp dir).
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn OpStore>,
    _keep: Option<tempfile::TempDir>,
    _table: Option<Table>,
}

pub async fn backend(name: &'static str) -> Backend {
    match name {
        "memory" => Backend {
            name,
            store: Arc::new(MemoryStore::new()),
            _keep: None,
            _table: None,
        },
        "sqlite" => {
            let (store, directory) = sqlite_store().await;
            Backend {
                name,
                store: Arc::new(store),
                _keep: Some(directory),
                _table: None,
            }
        }
        "dynamodb" => {
            let table = ddb_store().await;
            Backend {
                name,
                store: Arc::new(table.clone()),
                _keep: None,
                _table: Some(table),
            }
        }
        other => panic!("unknown backend {other}"),
    }
}

pub fn ops(prefix: &str, count: usize) -> Vec<NewOp> {
    (1..=count)
        .map(|index| {
            NewOp::new(
                format!("{prefix}{index}"),
                format!("payload of {prefix}{index}"),
            )
        })
        .collect()
}

/// The answer of an op stored by this append.
pub fn fresh(seq: Seq) -> Appended {
    Appended {
        seq,
        existing: false,
    }
}

/// The answer of an op stored earlier (a re-push, or a lost round that had committed).
pub fn again(seq: Seq) -> Appended {
    Appended {
        seq,
        existing: true,
    }
}

pub fn far_deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

pub fn seqs(appended: &[Appended]) -> Vec<Seq> {
    appended.iter().map(|one| one.seq).collect()
}

pub fn op_ids(stored: &[StoredOp]) -> Vec<String> {
    stored.iter().map(|op| op.op_id.clone()).collect()
}

pub fn stored_seqs(stored: &[StoredOp]) -> Vec<Seq> {
    stored.iter().map(|op| op.seq).collect()
}

/// Pulls a whole stream, page by page, as a puller would.
pub async fn pull_all(store: &dyn OpStore, stream: &str) -> Vec<StoredOp> {
    let mut all = Vec::new();
    let mut cursor = 0;
    loop {
        let page = store.pull(stream, cursor, 7).await.expect("pull");
        let Some(last) = page.last() else { return all };
        cursor = last.seq;
        all.extend(page);
    }
}

/// Wraps a store so that the `ops_before_stall`-th append returns only after the push deadline
/// has passed: the batch then stops before the next op (deterministically, on any backend).
pub struct StallAfter<S> {
    pub inner: S,
    pub ops_before_stall: usize,
    pub appended: AtomicU64,
}

impl<S: OpStore> OpStore for StallAfter<S> {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        Box::pin(async move {
            let result = self.inner.append_op(stream, op, deadline, push).await;
            let done = self.appended.fetch_add(1, Ordering::SeqCst) + 1;
            if done == self.ops_before_stall as u64 {
                // Stall between ops: the batch's own deadline check before the next op stops it.
                tokio::time::sleep_until(deadline + Duration::from_millis(10)).await;
            }
            result
        })
    }

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        self.inner.pull_within(stream, after, limit, deadline)
    }

    fn check_op(&self, stream: &str, op: &NewOp) -> Result<(), StoreError> {
        self.inner.check_op(stream, op)
    }

    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        self.inner.check_claims(stream, ops, deadline)
    }

    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        self.inner.put_legacy_op(stream, seq, op)
    }
}

/// Wraps a store so that another writer stores `intruder` right after the push's claim check
/// ([`OpStore::check_claims`]) and before the push's first write: the race the check cannot
/// close, placed deterministically.
pub struct ClaimsAfterCheck<S> {
    pub inner: S,
    pub intruder: NewOp,
}

impl<S: OpStore> OpStore for ClaimsAfterCheck<S> {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        self.inner.append_op(stream, op, deadline, push)
    }

    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.inner.check_claims(stream, ops, deadline).await?;
            let intruder = std::slice::from_ref(&self.intruder);
            let stored = self.inner.append_batch(stream, intruder, deadline).await;
            assert_eq!(stored.error, None, "the intruding writer stores its op");
            Ok(())
        })
    }

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        self.inner.pull_within(stream, after, limit, deadline)
    }

    fn check_op(&self, stream: &str, op: &NewOp) -> Result<(), StoreError> {
        self.inner.check_op(stream, op)
    }

    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        self.inner.put_legacy_op(stream, seq, op)
    }
}
