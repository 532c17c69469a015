//! The SQLite backend, the embedded default: a file path, one write transaction per append.
//!
//! Invariants: an append is one `BEGIN IMMEDIATE` transaction that reads the claim, the counter
//! and (on a floor step) the top occupied seq, and writes the op and the counter together; SQLite
//! serialises writers and a reader sees a committed snapshot, so a pull never sees an op half
//! written and never a seq above one still being written (R1). The unique index on
//! (stream_id, op_id) is the claim (R3); the primary key (stream_id, seq) refuses a second op at a
//! seq (R2); seqs are counter + 1, or top + 1 over legacy ops (R5).
//!
//! The push deadline is raced against the whole transaction: a transaction cut short is rolled
//! back when its future is dropped, so nothing half-done survives. A pull is raced against its
//! deadline the same way. A re-push with another payload is refused against the stored payload,
//! for a whole push before its first write by one read of its claims ([`OpStore::check_claims`];
//! a writer may claim between that read and the push's transaction for the op, as on DynamoDB).
//! Driver errors are logged where they happen; the [`StoreError`] carries a stable message.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use tokio::time::Instant;

use crate::{
    next_seq, validate_append, validate_pull, Appended, NewOp, OpStore, PushContext, Seq,
    StoreError, StoreFuture, StoredOp,
};

/// How long a writer waits for SQLite's write lock before the append fails; the push deadline
/// usually cuts in first.
const BUSY_TIMEOUT_SECS: u64 = 30;
/// Connections in the pool: one writer at a time holds the lock, the rest serve pulls.
const CONNECTIONS_MAX: u32 = 8;
/// Op ids per claim-check query: well under SQLite's limit of bound parameters.
const CLAIMS_PER_QUERY_MAX: usize = 500;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS stream_counters (
        stream_id TEXT PRIMARY KEY NOT NULL,
        next_seq INTEGER NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS ops (
        stream_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        op_id TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (stream_id, seq)
    )",
    "CREATE UNIQUE INDEX IF NOT EXISTS ops_claim ON ops (stream_id, op_id)",
];

/// The SQLite store. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

fn backend(error: sqlx::Error) -> StoreError {
    tracing::error!(%error, "sqlite failure");
    StoreError::backend("the SQLite database failed; the relay log has the error")
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path` and its schema.
    pub async fn open(path: &str) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
            .map_err(backend)?
            .create_if_missing(true)
            // WAL lets pulls read while an append writes.
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(BUSY_TIMEOUT_SECS));
        let pool = SqlitePoolOptions::new()
            .max_connections(CONNECTIONS_MAX)
            .connect_with(options)
            .await
            .map_err(backend)?;
        for statement in SCHEMA {
            sqlx::query(statement)
                .execute(&pool)
                .await
                .map_err(backend)?;
        }
        Ok(SqliteStore { pool })
    }

    //= specs/relay-append.md#R1
    //# A puller that stored cursor k has received every op that is or will ever be stored at a seq
    //# <= k.
    //= specs/relay-append.md#R2
    //# At most one op per seq; no op is overwritten.
    //= specs/relay-append.md#R3
    //# An op_id is stored at most once; every append of it, re-pushes included, answers the same
    //# seq.
    //= specs/relay-append.md#R5
    //# With new-build writers only, the stored seqs are exactly 1..n.
    async fn append_in_transaction(
        &self,
        stream: &str,
        op: &NewOp,
    ) -> Result<Appended, StoreError> {
        // IMMEDIATE takes the write lock up front: a deferred transaction that reads and then
        // writes can fail with SQLITE_BUSY instead of waiting when another writer got in first.
        let mut transaction = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(backend)?;
        if let Some(answer) = stored_answer(&mut transaction, stream, op).await? {
            return Ok(answer);
        }
        let (counter, seq) = seq_to_take(&mut transaction, stream).await?;
        //= specs/relay-append.md#R4
        //# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
        assert!(
            seq > counter,
            "R4: seq {seq} would move the counter of stream {stream:?} back from {counter}"
        );
        sqlx::query("INSERT INTO ops (stream_id, seq, op_id, payload) VALUES (?, ?, ?, ?)")
            .bind(stream)
            .bind(seq)
            .bind(&op.op_id)
            .bind(&op.payload)
            .execute(&mut *transaction)
            .await
            .map_err(backend)?;
        sqlx::query(
            "INSERT INTO stream_counters (stream_id, next_seq) VALUES (?, ?)
             ON CONFLICT (stream_id) DO UPDATE SET next_seq = excluded.next_seq",
        )
        .bind(stream)
        .bind(seq)
        .execute(&mut *transaction)
        .await
        .map_err(backend)?;
        transaction.commit().await.map_err(backend)?;
        Ok(Appended {
            seq,
            existing: false,
        })
    }

    /// The first op of `ops` stored with another payload, as the conflict naming its seq: one
    /// read of the claims (per [`CLAIMS_PER_QUERY_MAX`] op ids), outside any write transaction.
    async fn find_conflict(&self, stream: &str, ops: &[NewOp]) -> Result<(), StoreError> {
        for chunk in ops.chunks(CLAIMS_PER_QUERY_MAX) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!(
                "SELECT op_id, seq, payload FROM ops WHERE stream_id = ? AND op_id IN ({placeholders})"
            );
            let mut query = sqlx::query_as::<_, (String, i64, Vec<u8>)>(&statement).bind(stream);
            for op in chunk {
                query = query.bind(&op.op_id);
            }
            let stored: std::collections::HashMap<String, (i64, Vec<u8>)> = query
                .fetch_all(&self.pool)
                .await
                .map_err(backend)?
                .into_iter()
                .map(|(op_id, seq, payload)| (op_id, (seq, payload)))
                .collect();
            for op in chunk {
                if let Some((seq, payload)) = stored.get(&op.op_id) {
                    if *payload != op.payload {
                        return Err(StoreError::PayloadConflict {
                            op_id: op.op_id.clone(),
                            seq: *seq,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    async fn pull_rows(
        &self,
        stream: &str,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<StoredOp>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT seq, op_id, payload FROM ops
             WHERE stream_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(stream)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.into_iter()
            .map(|row| {
                Ok(StoredOp {
                    seq: row.try_get("seq").map_err(backend)?,
                    op_id: row.try_get("op_id").map_err(backend)?,
                    payload: row.try_get("payload").map_err(backend)?,
                })
            })
            .collect()
    }
}

/// The answer of an op whose op_id is stored (read in the append's transaction): its seq, or
/// the conflict when the stored payload is another. None when the op_id is not stored.
async fn stored_answer(
    transaction: &mut sqlx::SqliteConnection,
    stream: &str,
    op: &NewOp,
) -> Result<Option<Appended>, StoreError> {
    let claimed: Option<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT seq, payload FROM ops WHERE stream_id = ? AND op_id = ?")
            .bind(stream)
            .bind(&op.op_id)
            .fetch_optional(&mut *transaction)
            .await
            .map_err(backend)?;
    let Some((seq, payload)) = claimed else {
        return Ok(None);
    };
    if payload != op.payload {
        return Err(StoreError::PayloadConflict {
            op_id: op.op_id.clone(),
            seq,
        });
    }
    Ok(Some(Appended {
        seq,
        existing: true,
    }))
}

/// The stream's counter and the seq an append takes (in the append's transaction): counter + 1,
/// or, when legacy ops occupy that seq, the top occupied seq + 1 (the floor step).
async fn seq_to_take(
    transaction: &mut sqlx::SqliteConnection,
    stream: &str,
) -> Result<(Seq, Seq), StoreError> {
    let counter: i64 =
        sqlx::query_scalar("SELECT next_seq FROM stream_counters WHERE stream_id = ?")
            .bind(stream)
            .fetch_optional(&mut *transaction)
            .await
            .map_err(backend)?
            .unwrap_or(0);
    let seq = next_seq(counter)?;
    let occupied: Option<i64> =
        sqlx::query_scalar("SELECT seq FROM ops WHERE stream_id = ? AND seq = ?")
            .bind(stream)
            .bind(seq)
            .fetch_optional(&mut *transaction)
            .await
            .map_err(backend)?;
    if occupied.is_none() {
        return Ok((counter, seq));
    }
    // Floor step over legacy ops: one query for the top occupied seq.
    let top: i64 = sqlx::query_scalar("SELECT MAX(seq) FROM ops WHERE stream_id = ?")
        .bind(stream)
        .fetch_one(&mut *transaction)
        .await
        .map_err(backend)?;
    Ok((counter, next_seq(top)?))
}

impl OpStore for SqliteStore {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        _push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        Box::pin(async move {
            validate_append(stream, op)?;
            match tokio::time::timeout_at(deadline, self.append_in_transaction(stream, op)).await {
                Ok(result) => result,
                Err(_elapsed) => Err(StoreError::DeadlineExceeded),
            }
        })
    }

    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            match tokio::time::timeout_at(deadline, self.find_conflict(stream, ops)).await {
                Ok(result) => result,
                Err(_elapsed) => Err(StoreError::DeadlineExceeded),
            }
        })
    }

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        Box::pin(async move {
            validate_pull(stream, after)?;
            match tokio::time::timeout_at(deadline, self.pull_rows(stream, after, limit)).await {
                Ok(result) => result,
                Err(_elapsed) => Err(StoreError::DeadlineExceeded),
            }
        })
    }

    #[cfg(feature = "test-seams")]
    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            validate_append(stream, op)?;
            sqlx::query("INSERT INTO ops (stream_id, seq, op_id, payload) VALUES (?, ?, ?, ?)")
                .bind(stream)
                .bind(seq)
                .bind(&op.op_id)
                .bind(&op.payload)
                .execute(&self.pool)
                .await
                .map_err(backend)?;
            Ok(())
        })
    }
}
