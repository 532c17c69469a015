//! Resolving held keys (`fail_closed`, specs/idempotency-middleware.md "Unknown outcomes fail
//! closed"): a processing row whose lease lapsed is an attempt whose outcome is unknown; the
//! handler's own reconcile hook, or an operator, says whether its effect happened.
//!
//! Invariants: a resolution is conditional on the row still being the held claim's, processing,
//! its lease lapsed (the store's `resolve_unknown`), so it never touches a row a newer claim
//! owns; an unsure hook leaves the key held; the hook is trusted to answer only for attempts
//! that are over and to answer finally (its contract, stated in the spec).

use crate::layer::IdempotencyLayer;
use crate::store::{CacheKey, CacheStore, FinalizeOutcome, StoreError, UnknownOutcome};
use std::future::Future;

/// Held keys looked at in one reconcile pass.
pub const RECONCILE_KEYS_MAX: usize = 100;
/// The status a resolved success is replayed with (its real response was never stored).
pub const RECONCILED_STATUS: u16 = 200;

/// The handler's own "did my effect happen?" for one held key.
pub trait ReconcileHook: Send + Sync {
    /// `Some(true)`: the effect happened; `Some(false)`: it did not and cannot any more;
    /// `None`: unsure, keep the key held.
    fn effect_happened(&self, key: &CacheKey) -> impl Future<Output = Option<bool>> + Send;
}

/// What one reconcile pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Resolved to the sentinel: a retry gets the `response-not-stored` replay.
    pub applied: usize,
    /// Resolved to failed: a retry runs the handler.
    pub not_applied: usize,
    /// Left held: the hook was unsure, or the row changed meanwhile.
    pub still_held: usize,
}

impl<St: CacheStore> IdempotencyLayer<St> {
    /// The keys held now (at most `RECONCILE_KEYS_MAX`).
    pub async fn unknown_outcomes(&self) -> Result<Vec<UnknownOutcome>, StoreError> {
        self.store()
            .unknown_outcomes(self.now_millis(), RECONCILE_KEYS_MAX)
            .await
    }

    /// Asks `hook` about every held key and resolves those it is sure of.
    pub async fn reconcile_unknown(
        &self,
        hook: &impl ReconcileHook,
    ) -> Result<ReconcileReport, StoreError> {
        let mut report = ReconcileReport::default();
        for held in self.unknown_outcomes().await? {
            let Some(applied) = hook.effect_happened(&held.key).await else {
                report.still_held += 1;
                continue;
            };
            match self.resolve(&held, applied).await? {
                FinalizeOutcome::Applied if applied => report.applied += 1,
                FinalizeOutcome::Applied => report.not_applied += 1,
                FinalizeOutcome::Lost => report.still_held += 1,
            }
        }
        Ok(report)
    }

    /// An operator's resolution of one held key; `Lost` when it is not held (any more).
    pub async fn resolve_unknown(
        &self,
        key: &CacheKey,
        applied: bool,
    ) -> Result<FinalizeOutcome, StoreError> {
        let held = self.unknown_outcomes().await?;
        match held.iter().find(|held| held.key == *key) {
            Some(held) => self.resolve(held, applied).await,
            None => Ok(FinalizeOutcome::Lost),
        }
    }

    async fn resolve(
        &self,
        held: &UnknownOutcome,
        applied: bool,
    ) -> Result<FinalizeOutcome, StoreError> {
        let resolved = self
            .store()
            .resolve_unknown(held, applied, RECONCILED_STATUS, self.now_millis())
            .await?;
        tracing::info!(
            event = "idempotency.reconciled",
            key = %held.key.key,
            generation = held.generation,
            applied,
            resolved = ?resolved
        );
        Ok(resolved)
    }
}
