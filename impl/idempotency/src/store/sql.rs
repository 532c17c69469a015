//! The PostgreSQL and SQLite stores: one SQL text for both (numbered `$n` parameters, which
//! sqlx binds by number on SQLite too), generated for each pool type by one macro so the two
//! cannot drift apart.
//!
//! Round trips: a first request costs one statement to claim and one to finalize. A replay, a
//! conflict or a mismatch costs one statement on PostgreSQL (the claim reads the row it found in
//! the same statement) and two on SQLite (which has no data-modifying CTEs; both are in-process).
//! These stores use std atomics for their counters, not `crate::sync`: they never run under shuttle.
//!
//! Every call waits at most `acquire_ms_max` for a pooled connection and `statement_ms_max` for
//! each statement's answer ([`StoreLimits`]), whatever the pool was built with: while the
//! database is down a claim fails within their sum and the layer answers 503 at once.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Claims a key in one atomic statement: insert a processing row, or take over a row that is
/// expired, or whose lease expired, or that failed, with the same fingerprint. The generation
/// only ever grows, so every claim of a key is distinguishable from every other (M8).
macro_rules! claim_sql {
    () => {
        claim_sql!("existing.lease_expires_at <= $8")
    };
    // `$lapsed`: when a processing row's lease no longer holds the key.
    ($lapsed:literal) => {
        concat!(
            "
INSERT INTO idempotency_keys AS existing
    (scope, method, path, idempotency_key, fingerprint, status, generation,
     lease_expires_at, expires_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, 'processing', 1, $6, $7, $8, $8)
ON CONFLICT (scope, method, path, idempotency_key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    status = 'processing',
    generation = existing.generation + 1,
    lease_expires_at = excluded.lease_expires_at,
    expires_at = excluded.expires_at,
    created_at = excluded.created_at,
    updated_at = excluded.updated_at,
    response_status = NULL,
    response_headers = NULL,
    response_body = NULL,
    body_too_large = FALSE
WHERE existing.expires_at <= $8
   OR (existing.fingerprint = excluded.fingerprint
       AND ((existing.status = 'processing' AND ",
            $lapsed,
            ")
            OR existing.status = 'failed'))
RETURNING generation"
        )
    };
}
const CLAIM_SQL: &str = claim_sql!();
/// `fail_closed`: a processing row whose lease lapsed is held, never taken over.
const CLAIM_HELD_SQL: &str = claim_sql!("FALSE");

/// The claim that takes a processing row over while its lease is live (M6 broken). Tests only.
#[cfg(feature = "test-seams")]
const CLAIM_OVER_LIVE_LEASE_SQL: &str = claim_sql!("TRUE");

/// PostgreSQL: the claim and the read of the row as it was before it, in one round trip. A
/// data-modifying CTE runs against the statement's snapshot, so `stored` is the row the claim
/// found (absent if another transaction created it after the snapshot: then it is read again).
macro_rules! claim_and_read_sql {
    ($claim:expr) => {
        concat!(
            "WITH claimed AS (",
            $claim,
            ")
SELECT claimed.generation AS claimed_generation, stored.fingerprint, stored.status,
       stored.lease_expires_at, stored.expires_at, stored.response_status,
       stored.response_headers, stored.response_body, stored.body_too_large
FROM (SELECT 1) AS one
LEFT JOIN claimed ON TRUE
LEFT JOIN idempotency_keys AS stored
  ON stored.scope = $1 AND stored.method = $2 AND stored.path = $3 AND stored.idempotency_key = $4"
        )
    };
}
const CLAIM_AND_READ_SQL: &str = claim_and_read_sql!(claim_sql!());
const CLAIM_HELD_AND_READ_SQL: &str = claim_and_read_sql!(claim_sql!("FALSE"));
#[cfg(feature = "test-seams")]
const CLAIM_OVER_LIVE_LEASE_AND_READ_SQL: &str = claim_and_read_sql!(claim_sql!("TRUE"));

const READ_SQL: &str = "
SELECT fingerprint, status, lease_expires_at, expires_at, response_status, response_headers,
       response_body, body_too_large
FROM idempotency_keys
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4";

const SUCCEED_FENCED_SQL: &str = "
UPDATE idempotency_keys
SET status = 'succeeded', response_status = $6, response_headers = $7, response_body = $8,
    body_too_large = $9, updated_at = $10
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4
  AND generation = $5 AND status = 'processing'";

/// The unfenced finalize: conditional on the key only (a stale finalizer overwrites a newer
/// claim). Tests only.
#[cfg(feature = "test-seams")]
const SUCCEED_KEY_ONLY_SQL: &str = "
UPDATE idempotency_keys
SET status = 'succeeded', response_status = $6, response_headers = $7, response_body = $8,
    body_too_large = $9, updated_at = $10
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4 AND $5 = $5";

const FAIL_FENCED_SQL: &str = "
UPDATE idempotency_keys
SET status = 'failed', response_status = $6, updated_at = $7
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4
  AND generation = $5 AND status = 'processing'";

#[cfg(feature = "test-seams")]
const FAIL_KEY_ONLY_SQL: &str = "
UPDATE idempotency_keys
SET status = 'failed', response_status = $6, updated_at = $7
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4 AND $5 = $5";

/// The heartbeat: conditional on key AND generation AND status, so a renewal that finds the
/// claim taken over, finalized or expired matches no row and changes nothing.
const RENEW_SQL: &str = "
UPDATE idempotency_keys
SET lease_expires_at = $6, updated_at = $7
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4
  AND generation = $5 AND status = 'processing' AND expires_at > $7";

/// The held keys (`fail_closed`): processing rows whose lease lapsed, not expired.
const UNKNOWN_SQL: &str = "
SELECT scope, method, path, idempotency_key, generation FROM idempotency_keys
WHERE status = 'processing' AND lease_expires_at <= $1 AND expires_at > $1
ORDER BY lease_expires_at LIMIT $2";

/// A held key resolved: its effects happened (the sentinel) or not (failed), conditional on the
/// claim, `processing` and its lease lapsed.
const RESOLVE_APPLIED_SQL: &str = "
UPDATE idempotency_keys
SET status = 'succeeded', response_status = $6, response_headers = '[]', response_body = NULL,
    body_too_large = TRUE, updated_at = $7
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4
  AND generation = $5 AND status = 'processing' AND lease_expires_at <= $7";
const RESOLVE_NOT_APPLIED_SQL: &str = "
UPDATE idempotency_keys
SET status = 'failed', response_status = $6, updated_at = $7
WHERE scope = $1 AND method = $2 AND path = $3 AND idempotency_key = $4
  AND generation = $5 AND status = 'processing' AND lease_expires_at <= $7";

/// Deletes rows that expired before `now`; optional housekeeping (expiry never waits for it).
const PURGE_SQL: &str = "DELETE FROM idempotency_keys WHERE expires_at <= $1";

/// Whether a conditional write of one claim's row (a finalize, a resolution, a renewal) matched
/// it. Each such statement names its row by the whole cache key, the table's primary key.
fn matched_its_row(rows_affected: u64) -> bool {
    // More than one would be a statement that lost part of its key condition and wrote rows
    // of other keys (the fencing of M8 then fences nothing).
    assert!(
        rows_affected <= 1,
        "a write conditional on one cache key changed {rows_affected} rows"
    );
    rows_affected == 1
}

macro_rules! sql_store {
    ($(#[$doc:meta])* $store:ident, $database:ty, $pool:ty, $migration:literal, claim_reads_row: $combined:expr, begin: $begin:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $store {
            pool: $pool,
            limits: StoreLimits,
            round_trips: Arc<AtomicU64>,
            /// Test-only defect: the claim takes a processing row over under a live lease.
            #[cfg(feature = "test-seams")]
            claim_over_live_lease: bool,
        }

        impl $store {
            /// Wraps a pool; call [`Self::migrate`] once before use.
            pub fn new(pool: $pool) -> Self {
                $store {
                    pool,
                    limits: StoreLimits::default(),
                    round_trips: Arc::new(AtomicU64::new(0)),
                    #[cfg(feature = "test-seams")]
                    claim_over_live_lease: false,
                }
            }

            /// The longest wait for a pooled connection (default 1 000 ms).
            pub fn acquire_ms_max(mut self, milliseconds: u64) -> Self {
                self.limits.acquire_ms_max = milliseconds;
                self
            }

            /// The longest wait for one statement's answer (default 1 000 ms).
            pub fn statement_ms_max(mut self, milliseconds: u64) -> Self {
                self.limits.statement_ms_max = milliseconds;
                self
            }

            pub fn limits(&self) -> StoreLimits {
                self.limits
            }

            /// A pooled connection within `acquire_ms_max`.
            async fn connection(&self) -> Result<sqlx::pool::PoolConnection<$database>, StoreError> {
                let millis_max = self.limits.acquire_ms_max;
                match crate::sync::within(Duration::from_millis(millis_max), self.pool.acquire()).await {
                    Some(connection) => Ok(connection?),
                    None => Err(StoreError::Timeout { waited: "acquiring a connection", millis_max }),
                }
            }

            /// One statement's answer within `statement_ms_max`.
            async fn answer<T>(
                &self,
                statement: impl std::future::Future<Output = Result<T, sqlx::Error>>,
            ) -> Result<T, StoreError> {
                let millis_max = self.limits.statement_ms_max;
                match crate::sync::within(Duration::from_millis(millis_max), statement).await {
                    Some(answer) => Ok(answer?),
                    None => Err(StoreError::Timeout { waited: "a statement", millis_max }),
                }
            }

            /// Test-only: claims take a processing row over while its lease is live (M6
            /// broken), for the conformance replays that must catch it.
            #[cfg(feature = "test-seams")]
            pub fn claiming_over_live_leases(mut self) -> Self {
                self.claim_over_live_lease = true;
                self
            }

            /// The claim statement: with the read of the row when `combined`; one that holds a
            /// lapsed processing row unless `take_over_lapsed`.
            fn claim_statement(&self, combined: bool, take_over_lapsed: bool) -> &'static str {
                #[cfg(feature = "test-seams")]
                if self.claim_over_live_lease {
                    return if combined { CLAIM_OVER_LIVE_LEASE_AND_READ_SQL } else { CLAIM_OVER_LIVE_LEASE_SQL };
                }
                match (combined, take_over_lapsed) {
                    (true, true) => CLAIM_AND_READ_SQL,
                    (true, false) => CLAIM_HELD_AND_READ_SQL,
                    (false, true) => CLAIM_SQL,
                    (false, false) => CLAIM_HELD_SQL,
                }
            }

            pub fn pool(&self) -> &$pool {
                &self.pool
            }

            /// Creates the table if it does not exist. Plain embedded SQL, not `sqlx::migrate!`,
            /// so the layer never touches the application's own migration history table.
            pub async fn migrate(&self) -> Result<(), StoreError> {
                sqlx::raw_sql(include_str!($migration)).execute(&self.pool).await?;
                Ok(())
            }

            /// Deletes expired rows; returns how many.
            pub async fn purge_expired(&self, now_millis: i64) -> Result<u64, StoreError> {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let mut connection = self.connection().await?;
                let done = self.answer(sqlx::query(PURGE_SQL).bind(now_millis).execute(&mut *connection)).await?;
                Ok(done.rows_affected())
            }

            async fn read(
                &self,
                connection: &mut <$database as sqlx::Database>::Connection,
                key: &CacheKey,
            ) -> Result<Option<ExistingRow>, StoreError> {
                use sqlx::Row;
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let row = self.answer(sqlx::query(READ_SQL)
                    .bind(&key.scope)
                    .bind(&key.method)
                    .bind(&key.path)
                    .bind(&key.key)
                    .fetch_optional(&mut *connection))
                    .await?;
                let Some(row) = row else { return Ok(None) };
                Ok(Some(ExistingRow {
                    fingerprint: row.try_get("fingerprint")?,
                    status: row.try_get("status")?,
                    lease_expires_at: row.try_get("lease_expires_at")?,
                    expires_at: row.try_get("expires_at")?,
                    response_status: row.try_get("response_status")?,
                    response_headers: row.try_get("response_headers")?,
                    response_body: row.try_get("response_body")?,
                    body_too_large: row.try_get("body_too_large")?,
                }))
            }
        }

        impl CacheStore for $store {
            type Effect = sqlx::Transaction<'static, $database>;

            async fn begin_effect(&self) -> Result<Self::Effect, StoreError> {
                let millis_max = self.limits.acquire_ms_max;
                let begun = crate::sync::within(
                    Duration::from_millis(millis_max),
                    self.pool.begin_with($begin),
                )
                .await;
                match begun {
                    Some(transaction) => Ok(transaction?),
                    None => Err(StoreError::Timeout { waited: "acquiring a connection", millis_max }),
                }
            }

            async fn finalize_succeeded_in(
                &self,
                mut effect: Self::Effect,
                key: &CacheKey,
                generation: i64,
                record: SuccessRecord<'_>,
                now_millis: i64,
            ) -> Result<FinalizeOutcome, StoreError> {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let headers = serde_json::to_string(record.headers)
                    .map_err(|error| StoreError::Malformed(format!("response headers: {error}")))?;
                let (body, too_large): (Option<&[u8]>, bool) = match record.body {
                    CachedBody::Full(data) => (Some(data), false),
                    CachedBody::TooLarge => (None, true),
                };
                //= specs/idempotency-middleware.md#M8
                //# Every finalize is conditional on its claim's generation and on the row still processing.
                let done = self.answer(sqlx::query(SUCCEED_FENCED_SQL)
                    .bind(&key.scope)
                    .bind(&key.method)
                    .bind(&key.path)
                    .bind(&key.key)
                    .bind(generation)
                    .bind(i32::from(record.status))
                    .bind(headers)
                    .bind(body)
                    .bind(too_large)
                    .bind(now_millis)
                    .execute(&mut *effect))
                    .await?;
                if !matched_its_row(done.rows_affected()) {
                    // The claim is no longer ours: its effects must not commit either.
                    let _ = self.answer(effect.rollback()).await;
                    return Ok(FinalizeOutcome::Lost);
                }
                self.answer(effect.commit()).await?;
                Ok(FinalizeOutcome::Applied)
            }

            async fn unknown_outcomes(
                &self,
                now_millis: i64,
                count_max: usize,
            ) -> Result<Vec<UnknownOutcome>, StoreError> {
                use sqlx::Row;
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let mut connection = self.connection().await?;
                let rows = self.answer(sqlx::query(UNKNOWN_SQL)
                    .bind(now_millis)
                    .bind(i64::try_from(count_max).unwrap_or(i64::MAX))
                    .fetch_all(&mut *connection))
                    .await?;
                rows.iter()
                    .map(|row| {
                        Ok(UnknownOutcome {
                            key: CacheKey {
                                scope: row.try_get("scope")?,
                                method: row.try_get("method")?,
                                path: row.try_get("path")?,
                                key: row.try_get("idempotency_key")?,
                            },
                            generation: row.try_get("generation")?,
                        })
                    })
                    .collect()
            }

            async fn resolve_unknown(
                &self,
                held: &UnknownOutcome,
                applied: bool,
                status: u16,
                now_millis: i64,
            ) -> Result<FinalizeOutcome, StoreError> {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let mut connection = self.connection().await?;
                let sql = if applied { RESOLVE_APPLIED_SQL } else { RESOLVE_NOT_APPLIED_SQL };
                let key = &held.key;
                let done = self.answer(sqlx::query(sql)
                    .bind(&key.scope)
                    .bind(&key.method)
                    .bind(&key.path)
                    .bind(&key.key)
                    .bind(held.generation)
                    .bind(i32::from(status))
                    .bind(now_millis)
                    .execute(&mut *connection))
                    .await?;
                Ok(if matched_its_row(done.rows_affected()) { FinalizeOutcome::Applied } else { FinalizeOutcome::Lost })
            }

            async fn abandon_effect(&self, effect: Self::Effect) {
                // Dropping it rolls back too; rolling back now releases SQLite's write lock
                // before the failed row is written on another connection.
                let _ = self.answer(effect.rollback()).await;
            }

            async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
                use sqlx::Row;
                let key = request.key;
                let mut connection = self.connection().await?;
                for _ in 0..CLAIM_ATTEMPTS_MAX {
                    self.round_trips.fetch_add(1, Ordering::Relaxed);
                    if $combined {
                        let row = self.answer(sqlx::query(self.claim_statement(true, request.take_over_lapsed))
                            .bind(&key.scope)
                            .bind(&key.method)
                            .bind(&key.path)
                            .bind(&key.key)
                            .bind(&request.fingerprint.0[..])
                            .bind(request.lease_expires_at())
                            .bind(request.now_millis + request.row_ttl_millis)
                            .bind(request.now_millis)
                            .fetch_one(&mut *connection))
                            .await?;
                        if let Some(generation) = row.try_get::<Option<i64>, _>("claimed_generation")? {
                            return Ok(ClaimOutcome::Claimed { generation });
                        }
                        let found = match row.try_get::<Option<Vec<u8>>, _>("fingerprint")? {
                            Some(fingerprint) => Some(ExistingRow {
                                fingerprint,
                                status: row.try_get("status")?,
                                lease_expires_at: row.try_get("lease_expires_at")?,
                                expires_at: row.try_get("expires_at")?,
                                response_status: row.try_get("response_status")?,
                                response_headers: row.try_get("response_headers")?,
                                response_body: row.try_get("response_body")?,
                                body_too_large: row.try_get("body_too_large")?,
                            }),
                            // Created after this statement's snapshot: read it as it is now.
                            None => self.read(&mut connection, key).await?,
                        };
                        let Some(existing) = found else { continue };
                        match classify(existing, request.fingerprint, request.now_millis, request.take_over_lapsed)? {
                            Classified::Outcome(outcome) => return Ok(outcome),
                            Classified::Retry => continue,
                        }
                    }
                    let claimed = self.answer(sqlx::query(self.claim_statement(false, request.take_over_lapsed))
                        .bind(&key.scope)
                        .bind(&key.method)
                        .bind(&key.path)
                        .bind(&key.key)
                        .bind(&request.fingerprint.0[..])
                        .bind(request.lease_expires_at())
                        .bind(request.now_millis + request.row_ttl_millis)
                        .bind(request.now_millis)
                        .fetch_optional(&mut *connection))
                        .await?;
                    if let Some(row) = claimed {
                        return Ok(ClaimOutcome::Claimed { generation: row.try_get("generation")? });
                    }
                    // The row exists and is not claimable: read it to say why. If it was deleted
                    // or became claimable in between, the claim is simply tried again.
                    let Some(existing) = self.read(&mut connection, key).await? else { continue };
                    match classify(existing, request.fingerprint, request.now_millis, request.take_over_lapsed)? {
                        Classified::Outcome(outcome) => return Ok(outcome),
                        Classified::Retry => continue,
                    }
                }
                // A row that flips between claimable and not three times is being claimed by
                // others right now: report it in flight rather than spin.
                Ok(ClaimOutcome::InFlight)
            }

            async fn finalize_succeeded(
                &self,
                key: &CacheKey,
                generation: i64,
                fencing: Fencing,
                record: SuccessRecord<'_>,
                now_millis: i64,
            ) -> Result<FinalizeOutcome, StoreError> {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let headers = serde_json::to_string(record.headers)
                    .map_err(|error| StoreError::Malformed(format!("response headers: {error}")))?;
                let (body, too_large): (Option<&[u8]>, bool) = match record.body {
                    CachedBody::Full(data) => (Some(data), false),
                    CachedBody::TooLarge => (None, true),
                };
                let sql = match fencing {
                    Fencing::Generation => SUCCEED_FENCED_SQL,
                    #[cfg(feature = "test-seams")]
                    Fencing::KeyOnly => SUCCEED_KEY_ONLY_SQL,
                };
                let mut connection = self.connection().await?;
                let done = self.answer(sqlx::query(sql)
                    .bind(&key.scope)
                    .bind(&key.method)
                    .bind(&key.path)
                    .bind(&key.key)
                    .bind(generation)
                    .bind(i32::from(record.status))
                    .bind(headers)
                    .bind(body)
                    .bind(too_large)
                    .bind(now_millis)
                    .execute(&mut *connection))
                    .await?;
                Ok(if matched_its_row(done.rows_affected()) { FinalizeOutcome::Applied } else { FinalizeOutcome::Lost })
            }

            async fn finalize_failed(
                &self,
                key: &CacheKey,
                generation: i64,
                fencing: Fencing,
                status: u16,
                now_millis: i64,
            ) -> Result<FinalizeOutcome, StoreError> {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let sql = match fencing {
                    Fencing::Generation => FAIL_FENCED_SQL,
                    #[cfg(feature = "test-seams")]
                    Fencing::KeyOnly => FAIL_KEY_ONLY_SQL,
                };
                let mut connection = self.connection().await?;
                let done = self.answer(sqlx::query(sql)
                    .bind(&key.scope)
                    .bind(&key.method)
                    .bind(&key.path)
                    .bind(&key.key)
                    .bind(generation)
                    .bind(i32::from(status))
                    .bind(now_millis)
                    .execute(&mut *connection))
                    .await?;
                Ok(if matched_its_row(done.rows_affected()) { FinalizeOutcome::Applied } else { FinalizeOutcome::Lost })
            }

            async fn renew_lease(
                &self,
                key: &CacheKey,
                generation: i64,
                lease_expires_at: i64,
                now_millis: i64,
            ) -> Result<RenewOutcome, StoreError> {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                let mut connection = self.connection().await?;
                let done = self.answer(sqlx::query(RENEW_SQL)
                    .bind(&key.scope)
                    .bind(&key.method)
                    .bind(&key.path)
                    .bind(&key.key)
                    .bind(generation)
                    .bind(lease_expires_at)
                    .bind(now_millis)
                    .execute(&mut *connection))
                    .await?;
                Ok(if matched_its_row(done.rows_affected()) { RenewOutcome::Renewed } else { RenewOutcome::Lost })
            }

            fn round_trips(&self) -> u64 {
                self.round_trips.load(Ordering::Relaxed)
            }
        }
    };
}

sql_store!(
    /// The PostgreSQL cache store (the claim is one `INSERT .. ON CONFLICT .. DO UPDATE .. WHERE`).
    PostgresStore,
    sqlx::Postgres,
    sqlx::PgPool,
    "../../migrations/postgres/0001_idempotency_keys.sql",
    claim_reads_row: true,
    begin: "BEGIN"
);

sql_store!(
    /// The SQLite cache store, the embedded default (use WAL and a busy timeout for concurrency).
    SqliteStore,
    sqlx::Sqlite,
    sqlx::SqlitePool,
    "../../migrations/sqlite/0001_idempotency_keys.sql",
    claim_reads_row: false,
    // The write lock up front: a deferred transaction that reads first can fail to upgrade.
    begin: "BEGIN IMMEDIATE"
);
