//! The running layer as a replay reaches it besides HTTP — its statistics, a reconcile pass, the
//! held keys, an operator's resolution and its store's resolution statement — behind one
//! object-safe trait, so a target holds the layer whatever its store; and the resolutions a race
//! would make, which every middleware replay asks after the trace's last step.
//!
//! Invariants: every call goes through the layer the replay's server runs (its held store
//! included, which passes resolutions through at the layer's clock), so what is asked here is
//! what the application or an operator would ask of it; the resolutions asked at the end are
//! only those the store must refuse, so they are the model's stutter and the state after them
//! must still be the trace's last.

use super::server;
use super::RowView;
use crate::replay::driver::Fault;
use oncecheck_idempotency::reconcile::RECONCILED_STATUS;
use oncecheck_idempotency::store::{CacheKey, FinalizeOutcome, StoreError, UnknownOutcome};
use oncecheck_idempotency::{
    CacheStore, IdempotencyLayer, ReconcileHook, ReconcileReport, StatsSnapshot,
};
use std::future::Future;
use std::pin::Pin;

/// What the running layer answers, later.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The running layer, whatever its store.
pub trait RunningLayer: Send + Sync {
    /// Its statistics.
    fn stats(&self) -> StatsSnapshot;
    /// One pass of `reconcile_unknown`, with a hook that answers `applied` for the trace's key.
    fn reconcile(&self, applied: bool) -> Answer<'_, ReconcileReport>;
    /// The keys held now (`unknown_outcomes`).
    fn held_keys(&self) -> Answer<'_, Vec<UnknownOutcome>>;
    /// An operator's resolution of `key` (`resolve_unknown`).
    fn operator_resolves(&self, key: CacheKey, applied: bool) -> Answer<'_, FinalizeOutcome>;
    /// The store's resolution statement for `held`, as the layer makes it after listing the
    /// held keys, at `now_millis`.
    fn store_resolves(
        &self,
        held: UnknownOutcome,
        applied: bool,
        now_millis: i64,
    ) -> Answer<'_, FinalizeOutcome>;
}

impl<St: CacheStore + 'static> RunningLayer for IdempotencyLayer<St> {
    fn stats(&self) -> StatsSnapshot {
        IdempotencyLayer::stats(self)
    }

    fn reconcile(&self, applied: bool) -> Answer<'_, ReconcileReport> {
        Box::pin(async move { self.reconcile_unknown(&TraceHook { applied }).await })
    }

    fn held_keys(&self) -> Answer<'_, Vec<UnknownOutcome>> {
        Box::pin(self.unknown_outcomes())
    }

    fn operator_resolves(&self, key: CacheKey, applied: bool) -> Answer<'_, FinalizeOutcome> {
        Box::pin(async move { self.resolve_unknown(&key, applied).await })
    }

    fn store_resolves(
        &self,
        held: UnknownOutcome,
        applied: bool,
        now_millis: i64,
    ) -> Answer<'_, FinalizeOutcome> {
        Box::pin(async move {
            self.store()
                .resolve_unknown(&held, applied, RECONCILED_STATUS, now_millis)
                .await
        })
    }
}

/// The reconcile hook of a replay: the trace's answer, for the trace's key only (a held row of
/// any other key stays held, and the pass's report shows it).
struct TraceHook {
    applied: bool,
}

impl ReconcileHook for TraceHook {
    async fn effect_happened(&self, key: &CacheKey) -> Option<bool> {
        (key.key == server::KEY).then_some(self.applied)
    }
}

/// Whether `row` is held at tick `now`: processing, its lease lapsed, the row not expired.
fn held_at(row: &RowView, now: i64) -> bool {
    row.status == "processing"
        && row.lease_ends.is_some_and(|ends| ends <= now)
        && row.expires.is_some_and(|expires| expires > now)
}

/// The generations a resolution racing with the trace's last state could name for its row, each
/// of which the store must refuse: the claims before and after the row's, and the row's own
/// unless the row is processing with its lease lapsed (the one resolution the model has). A
/// row whose lease is not a whole tick is not asked under its own generation.
fn raced_generations(row: Option<&RowView>, now: i64) -> Vec<i64> {
    let Some(row) = row else {
        return vec![1];
    };
    let lapsed = row.lease_ends.is_none_or(|ends| ends <= now);
    let own = (row.status != "processing" || !lapsed).then_some(row.generation);
    [
        (row.generation > 1).then_some(row.generation - 1),
        own,
        Some(row.generation + 1),
    ]
    .into_iter()
    .flatten()
    .collect()
}

//= specs/idempotency-middleware.md#Unknown outcomes fail closed (the model's `fail-closed`)
//# A resolution is conditional on the row still being that claim's, `processing`, with its lease
//# lapsed.
/// The model resolves a held key in one step; the layer lists the held keys and then resolves
/// each (and an operator names one), so between the two the row may change: another claim took
/// it, its finalize landed, its lease was renewed. After the trace's last step (`row` as the
/// database holds it, `now` the layer's clock in ticks, `now_millis` in milliseconds) this asks
/// what such a race would: the listing must hold exactly the trace's held key; the store's
/// resolution of the row under every generation of `raced_generations`, both answers, must be
/// `Lost`; and an operator naming a key that is not held must be answered `Lost`. The store's
/// resolutions are not asked when `write_lock_held` (SQLite's `atomic`: a claim's open effect
/// transaction holds the database's write lock until its finalize, so they would wait it out).
pub async fn race_resolutions_refused(
    layer: &dyn RunningLayer,
    row: Option<&RowView>,
    now: i64,
    now_millis: i64,
    write_lock_held: bool,
) -> Result<(), Fault> {
    let key = server::cache_key();
    let held = row.filter(|row| held_at(row, now));
    let listed = layer.held_keys().await.map_err(environment)?;
    let expected: Vec<UnknownOutcome> = held
        .map(|row| UnknownOutcome {
            key: key.clone(),
            generation: row.generation,
        })
        .into_iter()
        .collect();
    if listed != expected {
        return Err(refused(
            "the layer lists the held keys",
            format!("{expected:?}"),
            format!("{listed:?}"),
        ));
    }
    let generations = if write_lock_held {
        Vec::new()
    } else {
        raced_generations(row, now)
    };
    for generation in generations {
        for applied in [false, true] {
            let resolution = UnknownOutcome {
                key: key.clone(),
                generation,
            };
            let answered = layer.store_resolves(resolution, applied, now_millis).await;
            if !matches!(answered, Ok(FinalizeOutcome::Lost)) {
                return Err(refused(
                    format!(
                        "the store resolves generation {generation} (applied: {applied}) of a row at generation {:?}, status {:?}",
                        row.map(|row| row.generation),
                        row.map(|row| row.status)
                    ),
                    "Lost".into(),
                    format!("{answered:?}"),
                ));
            }
        }
    }
    // Named while the trace's key is held, the operator's key is one no request sent.
    let unheld = match held {
        Some(_) => CacheKey {
            key: "never-sent".into(),
            ..key
        },
        None => key,
    };
    for applied in [false, true] {
        let answered = layer.operator_resolves(unheld.clone(), applied).await;
        if !matches!(answered, Ok(FinalizeOutcome::Lost)) {
            return Err(refused(
                format!(
                    "an operator resolves key {:?}, which is not held (applied: {applied})",
                    unheld.key
                ),
                "Lost".into(),
                format!("{answered:?}"),
            ));
        }
    }
    Ok(())
}

fn refused(action: impl Into<String>, expected: String, actual: String) -> Fault {
    Fault::Diverged {
        action: Some(action.into()),
        expected,
        actual,
    }
}

fn environment(error: StoreError) -> Fault {
    Fault::Environment(format!("listing the held keys: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncecheck_model::idempotency::Fingerprint;

    fn row(status: &'static str, generation: i64, lease_ends: i64) -> RowView {
        RowView {
            status,
            generation,
            fingerprint: Fingerprint::A,
            body: None,
            lease_ends: Some(lease_ends),
            expires: Some(lease_ends + 1),
        }
    }

    // The one resolution the model has (the held claim's own generation) is never asked; every
    // other is.
    #[test]
    fn a_race_names_every_generation_but_the_held_claim_s_own() {
        assert_eq!(raced_generations(None, 3), vec![1]);
        assert_eq!(
            raced_generations(Some(&row("processing", 2, 3)), 3),
            vec![1, 3]
        );
        assert_eq!(
            raced_generations(Some(&row("processing", 1, 4)), 3),
            vec![1, 2]
        );
        assert_eq!(
            raced_generations(Some(&row("succeeded", 1, 2)), 3),
            vec![1, 2]
        );
        assert_eq!(
            raced_generations(Some(&row("failed", 3, 2)), 3),
            vec![2, 3, 4]
        );
        assert!(held_at(&row("processing", 2, 3), 3));
        assert!(!held_at(&row("processing", 2, 4), 3));
        assert!(!held_at(&row("failed", 2, 3), 3));
    }
}
