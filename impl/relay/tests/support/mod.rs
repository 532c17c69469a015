//! Test support for the relay: a served router on a loopback port, the three backends, and
//! store wrappers that stall or fail at a chosen op.
//!
//! DynamoDB runs read ONCECHECK_DDB_ENDPOINT and fail (never skip) when it is unset.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oncecheck_relay::{router, Limits, ProblemListener};
use oncecheck_store::dynamodb::AppendTuning;
use oncecheck_store::{
    Appended, DynamoDbStore, MemoryStore, NewOp, OpStore, PushContext, Seq, SqliteStore,
    StoreError, StoreFuture, StoredOp,
};
use tokio::time::Instant;

#[path = "../../../store/tests/support/serial_proxy.rs"]
pub mod serial_proxy;
#[path = "../../../store/tests/support/table.rs"]
pub mod table;

pub fn ddb_endpoint() -> String {
    match std::env::var("ONCECHECK_DDB_ENDPOINT") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "ONCECHECK_DDB_ENDPOINT is unset: the DynamoDB tests need a DynamoDB-compatible endpoint and \
             never skip. Start moto with `source scripts/services.sh; start_moto`, then rerun."
        ),
    }
}

pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

pub struct Backend {
    pub store: Arc<dyn OpStore>,
    _keep: Option<tempfile::TempDir>,
    _table: Option<table::Table>,
}

pub async fn backend(name: &str) -> Backend {
    match name {
        "memory" => Backend {
            store: Arc::new(MemoryStore::new()),
            _keep: None,
            _table: None,
        },
        "sqlite" => {
            let directory = tempfile::tempdir().expect("temp dir");
            let path = directory.path().join("relay.sqlite");
            let store = SqliteStore::open(path.to_str().expect("utf-8"))
                .await
                .expect("sqlite");
            Backend {
                store: Arc::new(store),
                _keep: Some(directory),
                _table: None,
            }
        }
        "dynamodb" => {
            // Concurrent writers: moto gets one request at a time (see serial_proxy).
            let endpoint = serial_proxy::serialize_endpoint(ddb_endpoint()).await;
            // Short backoffs keep the soak quick; the budget (lost rounds in a row) is unchanged.
            let tuning = AppendTuning {
                backoff_base: Duration::from_millis(1),
                backoff_max: Duration::from_millis(20),
                ..AppendTuning::default()
            };
            let store = DynamoDbStore::connect(unique("relay"), Some(&endpoint))
                .await
                .with_tuning(tuning);
            let table = table::Table::create(store, ddb_endpoint()).await;
            Backend {
                store: Arc::new(table.clone()),
                _keep: None,
                _table: Some(table),
            }
        }
        other => panic!("unknown backend {other}"),
    }
}

/// Serves the relay over `store` on a loopback port; answers its base URL.
pub async fn serve(store: Arc<dyn OpStore>, limits: Limits) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        axum::serve(ProblemListener::new(listener), router(store, limits))
            .await
            .expect("serve");
    });
    format!("http://{address}")
}

/// A store whose `at`-th append (1-based) either returns only after the push deadline or fails.
pub struct Faulty {
    pub inner: Arc<dyn OpStore>,
    pub at: u64,
    pub fail: bool,
    pub appended: AtomicU64,
}

impl OpStore for Faulty {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        Box::pin(async move {
            let count = self.appended.fetch_add(1, Ordering::SeqCst) + 1;
            if count == self.at && self.fail {
                return Err(StoreError::backend("injected store fault"));
            }
            let result = self.inner.append_op(stream, op, deadline, push).await;
            if count == self.at {
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
