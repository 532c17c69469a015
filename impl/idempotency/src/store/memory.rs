//! An in-memory store for unit and schedule (shuttle, loom) tests only: one mutex around a
//! BTreeMap, and every operation runs start to end under one acquisition of it, so it is
//! atomic (tests/loom.rs checks that discipline). It follows the SQL stores' rules exactly,
//! including expiry at read time and fencing; under `test-seams` it can inject finalize faults.

use super::*;
#[cfg(feature = "test-seams")]
use crate::sync::AtomicUsize;
use crate::sync::{self, Arc, AtomicU64, Mutex, Ordering};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRow {
    pub fingerprint: Fingerprint,
    pub status: &'static str,
    pub generation: i64,
    pub lease_expires_at: i64,
    pub expires_at: i64,
    pub response: Option<StoredResponse>,
}

#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    rows: Arc<Mutex<BTreeMap<CacheKey, MemoryRow>>>,
    round_trips: Arc<AtomicU64>,
    #[cfg(feature = "test-seams")]
    finalize_faults: Arc<AtomicUsize>,
}

impl MemoryStore {
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// The next `count` finalizes fail without applying (an unknown outcome that did not commit).
    #[cfg(feature = "test-seams")]
    pub fn fail_next_finalizes(&self, count: usize) {
        self.finalize_faults.store(count, Ordering::SeqCst);
    }

    pub fn row(&self, key: &CacheKey) -> Option<MemoryRow> {
        sync::lock(&self.rows).get(key).cloned()
    }

    pub fn rows(&self) -> Vec<(CacheKey, MemoryRow)> {
        sync::lock(&self.rows)
            .iter()
            .map(|(key, row)| (key.clone(), row.clone()))
            .collect()
    }

    #[cfg(feature = "test-seams")]
    fn take_fault(&self) -> bool {
        self.finalize_faults
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }

    fn finalize(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        status: &'static str,
        response: Option<StoredResponse>,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.round_trips.fetch_add(1, Ordering::SeqCst);
        #[cfg(feature = "test-seams")]
        if self.take_fault() {
            return Err(StoreError::Injected("finalize"));
        }
        let mut rows = sync::lock(&self.rows);
        let Some(row) = rows.get_mut(key) else {
            return Ok(FinalizeOutcome::Lost);
        };
        if fencing == Fencing::Generation
            && (row.generation != generation || row.status != "processing")
        {
            return Ok(FinalizeOutcome::Lost);
        }
        // Seeded bug (loom only): the lock is released between the fencing check and the write,
        // so two finalizers of one generation can both pass the check.
        #[cfg(oncecheck_loom)]
        let row = if sync::loom_mutation("split-finalize") {
            drop(rows);
            rows = sync::lock(&self.rows);
            rows.get_mut(key)
                .expect("rows are never deleted in the loom tests")
        } else {
            row
        };
        row.status = status;
        row.response = response;
        Ok(FinalizeOutcome::Applied)
    }
}

impl CacheStore for MemoryStore {
    /// The memory store holds no effects: an "effect" here is the finalize alone.
    type Effect = ();

    async fn begin_effect(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn finalize_succeeded_in(
        &self,
        _effect: (),
        key: &CacheKey,
        generation: i64,
        record: SuccessRecord<'_>,
        now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.finalize_succeeded(key, generation, Fencing::Generation, record, now_millis)
            .await
    }

    async fn abandon_effect(&self, _effect: ()) {}

    async fn unknown_outcomes(
        &self,
        now_millis: i64,
        count_max: usize,
    ) -> Result<Vec<UnknownOutcome>, StoreError> {
        let rows = sync::lock(&self.rows);
        Ok(rows
            .iter()
            .filter(|(_, row)| {
                row.status == "processing"
                    && row.lease_expires_at <= now_millis
                    && row.expires_at > now_millis
            })
            .take(count_max)
            .map(|(key, row)| UnknownOutcome {
                key: key.clone(),
                generation: row.generation,
            })
            .collect())
    }

    async fn resolve_unknown(
        &self,
        held: &UnknownOutcome,
        applied: bool,
        status: u16,
        now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        let mut rows = sync::lock(&self.rows);
        let Some(row) = rows.get_mut(&held.key) else {
            return Ok(FinalizeOutcome::Lost);
        };
        if row.generation != held.generation
            || row.status != "processing"
            || row.lease_expires_at > now_millis
        {
            return Ok(FinalizeOutcome::Lost);
        }
        if applied {
            row.status = "succeeded";
            row.response = Some(StoredResponse {
                status,
                headers: Vec::new(),
                body: StoredBody::TooLarge,
            });
        } else {
            row.status = "failed";
        }
        Ok(FinalizeOutcome::Applied)
    }

    async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.round_trips.fetch_add(1, Ordering::SeqCst);
        let mut rows = sync::lock(&self.rows);
        let now = request.now_millis;
        let lease_expires_at = request.lease_expires_at();
        let fresh = |generation| MemoryRow {
            fingerprint: *request.fingerprint,
            status: "processing",
            generation,
            lease_expires_at,
            expires_at: now + request.row_ttl_millis,
            response: None,
        };
        let Some(row) = rows.get(request.key) else {
            // Seeded bug (loom only): the lock is released between finding no row and inserting
            // one, so two claims can both find none.
            #[cfg(oncecheck_loom)]
            if sync::loom_mutation("split-claim") {
                drop(rows);
                rows = sync::lock(&self.rows);
            }
            rows.insert(request.key.clone(), fresh(1));
            return Ok(ClaimOutcome::Claimed { generation: 1 });
        };
        let same_fingerprint = row.fingerprint == *request.fingerprint;
        let lapsed = row.status == "processing" && row.lease_expires_at <= now;
        let claimable = row.expires_at <= now
            || (same_fingerprint
                && ((lapsed && request.take_over_lapsed) || row.status == "failed"));
        if claimable {
            let generation = row.generation + 1;
            rows.insert(request.key.clone(), fresh(generation));
            return Ok(ClaimOutcome::Claimed { generation });
        }
        if !same_fingerprint {
            return Ok(ClaimOutcome::FingerprintMismatch);
        }
        match (&row.response, row.status) {
            (Some(response), "succeeded") => Ok(ClaimOutcome::Replay(response.clone())),
            _ if lapsed => Ok(ClaimOutcome::OutcomeUnknown),
            _ => Ok(ClaimOutcome::InFlight),
        }
    }

    async fn finalize_succeeded(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        record: SuccessRecord<'_>,
        _now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        let body = match record.body {
            CachedBody::Full(data) => StoredBody::Full(Bytes::copy_from_slice(data)),
            CachedBody::TooLarge => StoredBody::TooLarge,
        };
        let response = StoredResponse {
            status: record.status,
            headers: record.headers.to_vec(),
            body,
        };
        self.finalize(key, generation, fencing, "succeeded", Some(response))
    }

    async fn finalize_failed(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        _status: u16,
        _now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.finalize(key, generation, fencing, "failed", None)
    }

    async fn renew_lease(
        &self,
        key: &CacheKey,
        generation: i64,
        lease_expires_at: i64,
        now_millis: i64,
    ) -> Result<RenewOutcome, StoreError> {
        self.round_trips.fetch_add(1, Ordering::SeqCst);
        let mut rows = sync::lock(&self.rows);
        match rows.get_mut(key) {
            Some(row)
                if row.generation == generation
                    && row.status == "processing"
                    && row.expires_at > now_millis =>
            {
                row.lease_expires_at = lease_expires_at;
                Ok(RenewOutcome::Renewed)
            }
            _ => Ok(RenewOutcome::Lost),
        }
    }

    fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}
