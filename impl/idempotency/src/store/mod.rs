//! The cache-store contract the layer is generic over, and its three implementations.
//!
//! Invariants every store keeps (the integration tests run the same scenarios on each):
//! - `claim` is atomic: of concurrent claims for one key exactly one gets `Claimed`; every
//!   `Claimed` carries a generation larger than any earlier claim of that key.
//! - A row's status is `processing`, `succeeded` or `failed`; `succeeded` rows hold either the
//!   complete captured body or the too-large sentinel, nothing else.
//! - Expiry is decided from stored timestamps against the caller's `now` at read time: a row
//!   whose `expires_at` has passed is treated as absent, whether or not cleanup has deleted it.
//! - With [`Fencing::Generation`] a finalize applies only to the row of its own generation while
//!   it is still `processing` (M8); otherwise it reports `Lost`.
//! - A lease renewal (the heartbeat) moves `lease_expires_at` only of the row of its own
//!   generation while it is still `processing` and unexpired; otherwise it reports `Lost` and
//!   changes nothing, so a renewal can never revive a claim another request took over.

use crate::fingerprint::Fingerprint;
use bytes::Bytes;
use std::future::Future;

pub mod memory;
pub mod sql;

pub use memory::MemoryStore;
pub use sql::{PostgresStore, SqliteStore};

/// The effect transaction of the PostgreSQL store (`Extension<EffectScope<PostgresEffect>>`).
pub type PostgresEffect = sqlx::Transaction<'static, sqlx::Postgres>;
/// The effect transaction of the SQLite store.
pub type SqliteEffect = sqlx::Transaction<'static, sqlx::Sqlite>;

/// What a cached response is stored under: the principal's scope, the method, the path and the
/// client's key. Two tenants sending the same key never share a row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CacheKey {
    pub scope: String,
    pub method: String,
    pub path: String,
    pub key: String,
}

/// The inputs of a claim.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub key: &'a CacheKey,
    pub fingerprint: &'a Fingerprint,
    pub now_millis: i64,
    pub lease_millis: i64,
    pub row_ttl_millis: i64,
    /// Whether a `processing` row whose lease lapsed is taken over (the default policy) or held
    /// as an unknown outcome (`fail_closed`: answered [`ClaimOutcome::OutcomeUnknown`]).
    pub take_over_lapsed: bool,
}

impl ClaimRequest<'_> {
    /// When the lease of a claim taken now ends.
    pub(crate) fn lease_expires_at(&self) -> i64 {
        //= specs/idempotency-middleware.md#M6
        //# In flight. A request whose key is held by a live claim gets 409 and never runs the handler.
        assert!(
            self.lease_millis > 0,
            "a claim's lease of {} ms would have lapsed when it is taken: a duplicate could run the handler at once",
            self.lease_millis
        );
        self.now_millis + self.lease_millis
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This request owns the key: run the handler, then finalize with this generation.
    Claimed { generation: i64 },
    /// Another request with this key holds a live lease (409).
    InFlight,
    /// The key is live with another request's fingerprint (422).
    FingerprintMismatch,
    /// The key already succeeded: serve the stored response.
    Replay(StoredResponse),
    /// `fail_closed`: a processing row whose lease lapsed; its outcome is unknown until it is
    /// resolved (409 `outcome-unknown`).
    OutcomeUnknown,
}

/// A held key (`fail_closed`): a processing row whose lease lapsed, and the claim it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownOutcome {
    pub key: CacheKey,
    pub generation: i64,
}

/// A stored success, as replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: StoredBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// The complete body, at most the cap.
    Full(Bytes),
    /// The sentinel: the request succeeded but its body was over the cap, failed mid-stream, or
    /// the client went away; the response cannot be replayed, and the handler must not run again.
    TooLarge,
}

/// The body a success is finalized with; borrowed so a finalize error never costs the live body.
#[derive(Debug, Clone, Copy)]
pub enum CachedBody<'a> {
    Full(&'a [u8]),
    TooLarge,
}

/// Everything a success row records.
#[derive(Debug, Clone, Copy)]
pub struct SuccessRecord<'a> {
    pub status: u16,
    pub headers: &'a [(String, String)],
    pub body: CachedBody<'a>,
}

/// The typed result of a finalize that reached the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizeOutcome {
    /// The row now records this outcome.
    Applied,
    /// No row matched: it expired and was deleted, or (fenced) a newer claim owns it.
    Lost,
}

/// The typed result of a lease renewal that reached the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The claim's lease now ends at the requested time.
    Renewed,
    /// No row matched: the claim was taken over, finalized, or its row expired.
    Lost,
}

/// What a finalize is conditional on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fencing {
    /// The row must still be `processing` at the finalizer's generation (M8).
    Generation,
    /// Only the key must match: the unfenced finalize of the layer before fencing, kept (under
    /// `test-seams` only) for tests that show why fencing is needed.
    #[cfg(feature = "test-seams")]
    KeyOnly,
}

/// A store failure: the outcome of the operation is unknown (it may or may not have committed).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The database did not answer within one of the store's limits ([`StoreLimits`]).
    #[error("the database did not answer: {waited} took longer than {millis_max} ms")]
    Timeout {
        /// `acquiring a connection` or `a statement`.
        waited: &'static str,
        millis_max: u64,
    },
    #[error("stored row is malformed: {0}")]
    Malformed(String),
    /// A fault a test injected (`test-seams` only).
    #[cfg(feature = "test-seams")]
    #[error("injected fault: {0}")]
    Injected(&'static str),
}

/// How long a SQL store waits for its database before a call fails with [`StoreError::Timeout`].
///
/// A request whose claim fails is answered 503 with `Retry-After` at once, so while the database
/// is down every covered request is answered within `acquire_ms_max + statement_ms_max` (2 s by
/// default) instead of the pool's own acquire timeout (30 s in sqlx). A finalize attempt cut by
/// a limit is an unknown outcome like any other error, retried within `finalize_budget_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Longest wait for a pooled connection (while the database is down the pool keeps trying
    /// to connect: this is what bounds it).
    pub acquire_ms_max: u64,
    /// Longest wait for one statement's answer (a stalled database or a lost connection).
    pub statement_ms_max: u64,
}

/// The default limits: one second each.
pub const ACQUIRE_MS_MAX_DEFAULT: u64 = 1_000;
pub const STATEMENT_MS_MAX_DEFAULT: u64 = 1_000;

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            acquire_ms_max: ACQUIRE_MS_MAX_DEFAULT,
            statement_ms_max: STATEMENT_MS_MAX_DEFAULT,
        }
    }
}

/// A response cache with atomic claims and conditional finalizes.
///
/// Atomic effects: a handler whose effects live in the cache's own database may run them in an
/// [`CacheStore::Effect`], a transaction of that database; the layer then writes the success
/// row in the same transaction and commits it ([`CacheStore::finalize_succeeded_in`]), so the
/// effects and the cached response commit together or not at all.
pub trait CacheStore: Clone + Send + Sync + 'static {
    /// An open transaction of the cache's database (`()` for a store without one).
    type Effect: Send + 'static;

    /// Begins a transaction for a handler's effects (waiting at most the store's acquire limit).
    fn begin_effect(&self) -> impl Future<Output = Result<Self::Effect, StoreError>> + Send;

    /// The atomic finalize: in `effect`, the success row of `generation` conditional on it still
    /// being that claim's and `processing` (M8); `Applied` once it and the effects committed,
    /// `Lost` when no row matched (the effects are rolled back). An error leaves the outcome
    /// unknown: the commit may or may not have happened, for the effects and the row together.
    fn finalize_succeeded_in(
        &self,
        effect: Self::Effect,
        key: &CacheKey,
        generation: i64,
        record: SuccessRecord<'_>,
        now_millis: i64,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    /// Rolls `effect` back (the handler answered a non-2xx or an error, or its claim is gone).
    fn abandon_effect(&self, effect: Self::Effect) -> impl Future<Output = ()> + Send;

    /// The held keys at `now_millis`: processing rows whose lease lapsed, not expired (at most
    /// `count_max`).
    fn unknown_outcomes(
        &self,
        now_millis: i64,
        count_max: usize,
    ) -> impl Future<Output = Result<Vec<UnknownOutcome>, StoreError>> + Send;

    /// Resolves a held key: the sentinel (status `status`) when its effects happened, `failed`
    /// when not; conditional on the row still being that claim's, processing, its lease lapsed.
    fn resolve_unknown(
        &self,
        held: &UnknownOutcome,
        applied: bool,
        status: u16,
        now_millis: i64,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    fn claim(
        &self,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    fn finalize_succeeded(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        record: SuccessRecord<'_>,
        now_millis: i64,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    fn finalize_failed(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        status: u16,
        now_millis: i64,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    /// Moves the lease of the claim `generation` of `key` to `lease_expires_at`, conditional on
    /// key AND generation AND status `processing` (and the row not expired at `now_millis`).
    fn renew_lease(
        &self,
        key: &CacheKey,
        generation: i64,
        lease_expires_at: i64,
        now_millis: i64,
    ) -> impl Future<Output = Result<RenewOutcome, StoreError>> + Send;

    /// Statements sent to the database so far (the benchmark's round-trip count).
    fn round_trips(&self) -> u64;
}

/// A row as read back for classification after a claim did not apply.
#[derive(Debug, Clone)]
pub(crate) struct ExistingRow {
    pub fingerprint: Vec<u8>,
    pub status: String,
    pub lease_expires_at: i64,
    pub expires_at: i64,
    pub response_status: Option<i32>,
    pub response_headers: Option<String>,
    pub response_body: Option<Vec<u8>>,
    pub body_too_large: bool,
}

/// How a claim that did not apply reads: the same decision for every store.
pub(crate) enum Classified {
    Outcome(ClaimOutcome),
    /// The row became claimable between the two statements (it expired): claim again.
    Retry,
}

pub(crate) fn classify(
    row: ExistingRow,
    fingerprint: &Fingerprint,
    now_millis: i64,
    take_over_lapsed: bool,
) -> Result<Classified, StoreError> {
    //= specs/idempotency-middleware.md#M10
    //# Expired keys are free. A key whose row has passed its expiry is free: no request is refused on an expired row.
    if row.expires_at <= now_millis {
        return Ok(Classified::Retry);
    }
    if row.fingerprint != fingerprint.0 {
        return Ok(Classified::Outcome(ClaimOutcome::FingerprintMismatch));
    }
    match row.status.as_str() {
        "processing" if row.lease_expires_at > now_millis => {
            Ok(Classified::Outcome(ClaimOutcome::InFlight))
        }
        "processing" if !take_over_lapsed => Ok(Classified::Outcome(ClaimOutcome::OutcomeUnknown)),
        "processing" | "failed" => Ok(Classified::Retry),
        "succeeded" => {
            let status = row
                .response_status
                .and_then(|status| u16::try_from(status).ok())
                .ok_or_else(|| StoreError::Malformed("succeeded row without a status".into()))?;
            let headers: Vec<(String, String)> = match row.response_headers.as_deref() {
                Some(text) => serde_json::from_str(text)
                    .map_err(|error| StoreError::Malformed(format!("response headers: {error}")))?,
                None => Vec::new(),
            };
            let body = if row.body_too_large {
                StoredBody::TooLarge
            } else {
                StoredBody::Full(Bytes::from(row.response_body.unwrap_or_default()))
            };
            Ok(Classified::Outcome(ClaimOutcome::Replay(StoredResponse {
                status,
                headers,
                body,
            })))
        }
        other => Err(StoreError::Malformed(format!("unknown status {other}"))),
    }
}

/// How many times a claim re-reads a row that expired between its two statements.
pub(crate) const CLAIM_ATTEMPTS_MAX: usize = 3;
