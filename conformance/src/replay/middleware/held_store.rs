//! The cache store as a middleware replay runs it: the real SQLite or PostgreSQL store behind a
//! wrapper that holds every call of the layer (claim, finalize, the drop guard's finalize; the
//! replay read is inside the claim call) until the trace releases it, and injects the trace's
//! faults there: an error with the statement committed, an error with nothing written, an
//! answer lost because the client went away while it was in flight.
//!
//! Time: the layer stamps a call with its clock when it makes it; the model decides a statement
//! at the time it runs (a tick is longer than a round trip). A held call is the time before the
//! statement is sent, so the wrapper stamps it again with the layer's clock when the trace
//! releases it — the time the model's statement runs at. A call it does not hold keeps the
//! layer's stamp, so a layer that misreads its clock is seen.
//!
//! Invariants: the wrapper never changes what the real store answers, only when it answers and
//! whether the layer hears it; a call dropped before it was released never reaches the database;
//! the lease heartbeat's renewals (`renewed` only) are not held: the model makes them within the
//! tick that makes them due, and the replay's tick waits for them; a claim's second renewal at one
//! clock reading never reaches the database (the model has one renewal per claim per tick); no call
//! of a process that died reaches the database, nor a renewal of one that stalled until a later
//! claim has taken its row over (the model's process faults: the replay cannot kill or freeze its
//! own process, so it keeps those calls from the database, which is all the database and the
//! other clients can see of a dead or frozen process; a frozen process resumes some time, and its
//! renewal after a takeover must change nothing).

use super::hub::{CallKind, CallTracker, Hub, Release, RenewalPath};
use oncecheck_idempotency::store::{
    CacheKey, CacheStore, ClaimOutcome, ClaimRequest, Fencing, FinalizeOutcome, RenewOutcome,
    StoreError, SuccessRecord, UnknownOutcome,
};
use oncecheck_idempotency::{Clock, ManualClock};
use std::future::Future;
use std::sync::Arc;

#[derive(Clone)]
pub struct HeldStore<S> {
    inner: S,
    hub: Arc<Hub>,
    /// The layer's own clock.
    clock: ManualClock,
}

impl<S: CacheStore> HeldStore<S> {
    pub fn new(inner: S, hub: Arc<Hub>, clock: ManualClock) -> Self {
        HeldStore { inner, hub, clock }
    }

    fn now_millis(&self) -> i64 {
        self.clock.now_millis()
    }

    /// Holds one finalize until it is released, then answers as the trace says.
    async fn held_finalize<F>(
        &self,
        generation: i64,
        statement: impl FnOnce(i64) -> F,
    ) -> Result<FinalizeOutcome, StoreError>
    where
        F: Future<Output = Result<FinalizeOutcome, StoreError>>,
    {
        let (id, release) = self.hub.hold(CallKind::Finalize, Some(generation));
        let mut tracker = CallTracker {
            hub: &self.hub,
            id,
            returned: false,
        };
        let release = release.await.unwrap_or(Release::Run);
        let answer = match release {
            Release::Run => statement(self.now_millis()).await,
            Release::Fail { committed } => {
                if committed {
                    let committed = statement(self.now_millis()).await;
                    self.hub
                        .returned(id, format!("committed: {}", words(&committed)));
                }
                Err(StoreError::Injected(
                    "finalize answered with an error by the replay",
                ))
            }
            Release::CommitThenHang => {
                let committed = statement(self.now_millis()).await;
                self.hub.returned(id, words(&committed));
                never().await
            }
            Release::Dead => {
                drop(statement);
                never().await
            }
        };
        self.hub.returned(id, words(&answer));
        tracker.returned = true;
        answer
    }
}

/// A call that never answers: its process is gone, or its client went away while the answer
/// was in flight.
async fn never<T>() -> T {
    std::future::pending::<()>().await;
    unreachable!("a pending future never completes")
}

fn words(answer: &Result<FinalizeOutcome, StoreError>) -> String {
    match answer {
        Ok(FinalizeOutcome::Applied) => "applied".into(),
        Ok(FinalizeOutcome::Lost) => "lost".into(),
        Err(error) => format!("error: {error}"),
    }
}

impl<S: CacheStore> CacheStore for HeldStore<S> {
    type Effect = S::Effect;

    /// Not held: the model has no step for the begin, which runs inside the handler's step.
    async fn begin_effect(&self) -> Result<S::Effect, StoreError> {
        self.inner.begin_effect().await
    }

    /// Held like any finalize: the atomic commit of the row and the handler's effects.
    async fn finalize_succeeded_in(
        &self,
        effect: S::Effect,
        key: &CacheKey,
        generation: i64,
        record: SuccessRecord<'_>,
        _now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.held_finalize(generation, |now_millis| {
            self.inner
                .finalize_succeeded_in(effect, key, generation, record, now_millis)
        })
        .await
    }

    async fn abandon_effect(&self, effect: S::Effect) {
        self.inner.abandon_effect(effect).await
    }

    /// Not held, so run at the layer's own time: a call that runs when it is made needs no new
    /// stamp, and the layer's reading is then what the database decides by.
    async fn unknown_outcomes(
        &self,
        now_millis: i64,
        count_max: usize,
    ) -> Result<Vec<UnknownOutcome>, StoreError> {
        self.inner.unknown_outcomes(now_millis, count_max).await
    }

    /// Not held: the reconciler's step is one step of the model; at the layer's time, as above.
    async fn resolve_unknown(
        &self,
        held: &UnknownOutcome,
        applied: bool,
        status: u16,
        now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.inner
            .resolve_unknown(held, applied, status, now_millis)
            .await
    }

    async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let (id, release) = self.hub.hold(CallKind::Claim, None);
        let client = self
            .hub
            .read(|state| state.held.get(&id).map(|call| call.client));
        let mut tracker = CallTracker {
            hub: &self.hub,
            id,
            returned: false,
        };
        let release = release.await.unwrap_or(Release::Run);
        let request = ClaimRequest {
            now_millis: self.now_millis(),
            ..request
        };
        let claimed = match release {
            Release::Run | Release::CommitThenHang => self.inner.claim(request).await,
            Release::Dead => never().await,
            Release::Fail { committed: true } => {
                let claimed = self.inner.claim(request).await;
                if let (Ok(ClaimOutcome::Claimed { generation }), Some(client)) = (&claimed, client)
                {
                    self.hub.owns(*generation, client);
                }
                self.hub.returned(id, format!("committed: {claimed:?}"));
                Err(StoreError::Injected(
                    "claim answered with an error by the replay",
                ))
            }
            Release::Fail { committed: false } => Err(StoreError::Injected(
                "claim answered with an error by the replay",
            )),
        };
        if let (Ok(ClaimOutcome::Claimed { generation }), Some(client)) = (&claimed, client) {
            self.hub.owns(*generation, client);
        }
        self.hub.returned(id, format!("{claimed:?}"));
        tracker.returned = true;
        claimed
    }

    async fn finalize_succeeded(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        record: SuccessRecord<'_>,
        _now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.held_finalize(generation, |now_millis| {
            self.inner
                .finalize_succeeded(key, generation, fencing, record, now_millis)
        })
        .await
    }

    async fn finalize_failed(
        &self,
        key: &CacheKey,
        generation: i64,
        fencing: Fencing,
        status: u16,
        _now_millis: i64,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.held_finalize(generation, |now_millis| {
            self.inner
                .finalize_failed(key, generation, fencing, status, now_millis)
        })
        .await
    }

    /// The heartbeat's renewal: not held (the model renews within the tick that made it due),
    /// recorded for the tick step to wait on.
    async fn renew_lease(
        &self,
        key: &CacheKey,
        generation: i64,
        lease_expires_at: i64,
        now_millis: i64,
    ) -> Result<RenewOutcome, StoreError> {
        // A repeated beat is kept from the database: a heartbeat that stopped waiting for the
        // clock stops here instead of renewing without end, and the next comparison names it.
        if !self.hub.first_renewal_at(generation, now_millis) {
            return never().await;
        }
        let path = self.hub.renewal_path(generation);
        let _in_flight = match path {
            RenewalPath::Now => None,
            RenewalPath::Never => return never().await,
            RenewalPath::AfterTakeover => {
                let in_flight = self.hub.renewal_in_flight(generation);
                if !self.hub.released_after_takeover(generation).await {
                    return never().await;
                }
                Some(in_flight)
            }
        };
        let renewed = self
            .inner
            .renew_lease(key, generation, lease_expires_at, now_millis)
            .await;
        if let Ok(outcome) = &renewed {
            let matched = *outcome == RenewOutcome::Renewed;
            match path {
                RenewalPath::AfterTakeover => self.hub.renewed_after_takeover(generation, matched),
                RenewalPath::Now | RenewalPath::Never => {
                    self.hub.renewed(generation, lease_expires_at, matched)
                }
            }
        }
        renewed
    }

    fn round_trips(&self) -> u64 {
        self.inner.round_trips()
    }
}
