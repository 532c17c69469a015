//! What the replay knows of the real system while a middleware trace runs: the store calls the
//! layer has waiting (held until the trace releases them), the scripted handler's and body's
//! progress per client, and what each client has received. Everything the layer, the handler
//! and the clients do is recorded here by the component that did it; the target only reads it
//! and waits on it.
//!
//! Invariants: a store call belongs to the client whose request made it (a claim to the client
//! whose request was sent last; a finalize to the client whose claim won its generation); a call
//! is either held, returned (with its result), or dropped before returning — never two of them;
//! every change wakes every waiter, and a wait of the target is bounded (`WAIT_MILLIS_MAX`), or
//! ends at once when the client it waits for can no longer move without the trace (a certain
//! divergence); only the layer's side waits without a bound (a held call until its release, a
//! stalled claim's renewal until a takeover), as the model's steps it waits for may never come.

use oncecheck_model::idempotency::Outcome;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// The longest a replay waits for the real system to reach the state a step leads to. A step
/// that needs longer did not happen: the layer took another path. Generous, since a loopback
/// round trip takes milliseconds but CI machines are shared; only a divergence ever waits it out.
pub const WAIT_MILLIS_MAX: u64 = 5_000;

/// What a wait found in the hub's state.
enum Waited<T> {
    Reached(T),
    /// Not yet: wait for the next change.
    Pending,
    /// Not ever: give up now.
    Never,
}

/// Which store call the layer made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// `claim` (on SQLite with the read of the row it did not take, in the same call).
    Claim,
    /// `finalize_succeeded` or `finalize_failed`, inline or the drop guard's.
    Finalize,
}

impl CallKind {
    pub fn word(self) -> &'static str {
        match self {
            CallKind::Claim => "claim",
            CallKind::Finalize => "finalize",
        }
    }
}

/// How the trace releases a held store call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Run it against the real database and return its answer.
    Run,
    /// Answer a database error; with `committed` the real statement runs first (the write
    /// happened, the answer was lost), without it nothing is written.
    Fail { committed: bool },
    /// Run it, then never return: the client goes away while the committed statement's answer
    /// is in flight.
    CommitThenHang,
    /// Never run it, never return: the process that made the call died (the model's
    /// `ProcessDies`), so the statement never reaches the database. What the call holds (an
    /// effect transaction) is let go, as the database does when a dead process's connection
    /// closes.
    Dead,
}

#[derive(Debug, Clone, Copy)]
pub struct HeldCall {
    pub client: usize,
    pub kind: CallKind,
}

/// The scripted handler of one client.
#[derive(Debug, Default)]
pub struct HandlerProgress {
    pub entered: bool,
    /// The outcome the trace told it to answer.
    pub outcome: Option<Outcome>,
    /// It returned its response (or its error) to the layer.
    pub returned: bool,
    /// Its future was dropped before it returned.
    pub dropped: bool,
    /// The response body was polled (the layer is capturing it) / dropped.
    pub body_polled: bool,
    pub body_dropped: bool,
}

/// What one client received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub status: u16,
    /// The `idempotency-replayed` header, if any.
    pub marker: Option<String>,
    /// The scripted handler's `x-replay-outcome` header, if any (`server::HANDLER_HEADER`).
    pub handler_header: Option<String>,
    /// The `content-length` header, if any: how the response was framed.
    pub content_length: Option<String>,
    pub body: Vec<u8>,
    /// The body ended with an error (the handler's body failed) rather than its end.
    pub body_failed: bool,
}

#[derive(Debug, Default)]
pub struct ClientProgress {
    /// The response head arrived: status and marker.
    pub head: Option<(u16, Option<String>)>,
    /// The whole exchange ended: what was received, or the transport error.
    pub finished: Option<Result<Received, String>>,
}

#[derive(Default)]
pub struct HubState {
    next_call: u64,
    /// The client whose request was sent last: the next claim call is its.
    pub claimant: Option<usize>,
    pub held: BTreeMap<u64, HeldCall>,
    releases: BTreeMap<u64, oneshot::Sender<Release>>,
    /// Calls that returned, with what they answered.
    pub returned: BTreeMap<u64, String>,
    pub dropped: BTreeSet<u64>,
    /// Which client's claim won each generation.
    pub owners: BTreeMap<i64, usize>,
    pub handler_runs: usize,
    pub handlers: BTreeMap<usize, HandlerProgress>,
    directives: BTreeMap<usize, oneshot::Sender<Outcome>>,
    capture_gates: BTreeMap<usize, oneshot::Sender<()>>,
    pub clients: BTreeMap<usize, ClientProgress>,
    /// The heartbeat's renewals that answered: (generation, the lease end asked for, whether a
    /// row matched).
    pub renewals: BTreeSet<(i64, i64, bool)>,
    /// Clients whose process died (`ProcessDies`): no call of theirs reaches the database again.
    pub dead: BTreeSet<usize>,
    /// Clients whose process stalled past the lease (`ProcessStalls`): their heartbeat's
    /// renewals no longer reach the database (the model's stall lasts the rest of the claim).
    pub stalled: BTreeSet<usize>,
    /// Store calls of dead processes, each kept from the database: (call, its kind).
    pub dead_calls: BTreeMap<u64, CallKind>,
    /// Every renewal the heartbeats asked for: (generation, the layer's clock reading).
    renewals_asked: BTreeSet<(i64, i64)>,
    /// Renewals asked a second time for one claim at one clock reading, each kept from the
    /// database: beats the model does not have.
    pub repeated_renewals: Vec<(i64, i64)>,
    /// Claims of stalled processes that a later claim has taken over: their heartbeat's renewal
    /// goes to the database from then on ([`RenewalPath::AfterTakeover`]).
    taken_over: BTreeSet<i64>,
    /// What each taken-over claim's renewal answered: whether a row matched.
    pub renewed_after_takeover: BTreeMap<i64, bool>,
    /// Renewals the store refused (no row matched: the claim was taken over, or finalized
    /// unknown to its layer), on either path.
    pub renewals_refused: u64,
    /// Claims whose renewal waits for a takeover or runs after one ([`InFlightRenewal`]).
    pub renewals_in_flight: BTreeSet<i64>,
    /// Clients a finalize of which the trace has released: from then on their finalizing may
    /// end (and their heartbeat with it) at any moment.
    finalizes_released: BTreeSet<usize>,
}

/// A renewal waiting for a takeover, or running after one; out of flight when dropped.
pub struct InFlightRenewal<'a> {
    hub: &'a Hub,
    generation: i64,
}

impl Drop for InFlightRenewal<'_> {
    fn drop(&mut self) {
        self.hub
            .update(|state| state.renewals_in_flight.remove(&self.generation));
    }
}

/// Where a heartbeat's renewal of a claim goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalPath {
    /// To the database, now.
    Now,
    /// Nowhere: the claim's process died.
    Never,
    /// To the database once a later claim has taken the row over: the claim's process stalled.
    /// The model's stall lasts the rest of the claim, but a frozen process resumes some time,
    /// and a renewal after a takeover must change nothing (the model's stutter), so the replay
    /// lets it through then: the store must refuse it and the layer count its lease lost.
    AfterTakeover,
}

impl HubState {
    fn renewal_path(&self, generation: i64) -> RenewalPath {
        match self.owners.get(&generation) {
            Some(client) if self.dead.contains(client) => RenewalPath::Never,
            Some(client) if self.stalled.contains(client) => RenewalPath::AfterTakeover,
            Some(_) | None => RenewalPath::Now,
        }
    }

    /// A call of a dead process: recorded, and released `Dead` (it never runs).
    fn keep_from_the_database(
        &mut self,
        id: u64,
        kind: CallKind,
        sender: oneshot::Sender<Release>,
    ) {
        self.dead_calls.insert(id, kind);
        let _ = sender.send(Release::Dead);
    }

    /// The call `client` has held, if any.
    pub fn held_of(&self, client: usize) -> Option<(u64, CallKind)> {
        self.held
            .iter()
            .find(|(_, call)| call.client == client)
            .map(|(id, call)| (*id, call.kind))
    }

    /// Whether the scripted handler of `client` waits for the trace's outcome.
    pub fn awaits_outcome(&self, client: usize) -> bool {
        self.directives.contains_key(&client)
    }

    /// Whether a non-2xx handler of `client` waits to hand its response over.
    pub fn awaits_capture(&self, client: usize) -> bool {
        self.capture_gates.contains_key(&client)
    }

    /// Whether the real side of `client` can move only when the trace moves it: a store call
    /// held for its release, a handler waiting for its outcome or its capture step, or an
    /// exchange that has ended. The target moves nothing while it waits for a step's evidence,
    /// so evidence the client does not show by then never comes.
    pub fn waits_on_the_trace(&self, client: usize) -> bool {
        self.held_of(client).is_some()
            || self.awaits_outcome(client)
            || self.awaits_capture(client)
            || self
                .clients
                .get(&client)
                .is_some_and(|progress| progress.finished.is_some())
    }

    /// One line per client of what is going on, for a divergence report.
    pub fn describe(&self, client: usize) -> String {
        let handler = self.handlers.get(&client);
        let progress = self.clients.get(&client);
        format!(
            "client {}: held store call {:?}; handler {:?}; head {:?}; finished {:?}",
            client + 1,
            self.held_of(client).map(|(_, kind)| kind.word()),
            handler,
            progress.and_then(|progress| progress.head.clone()),
            progress.and_then(|progress| progress.finished.clone()),
        )
    }
}

/// The shared record, and the wake-up of every waiter on every change.
#[derive(Default)]
pub struct Hub {
    state: Mutex<HubState>,
    changed: Notify,
}

impl Hub {
    /// Changes the state and wakes every waiter.
    pub fn update<T>(&self, change: impl FnOnce(&mut HubState) -> T) -> T {
        let result = change(&mut self.state.lock().expect("the hub lock is never poisoned"));
        self.changed.notify_waiters();
        result
    }

    pub fn read<T>(&self, look: impl FnOnce(&HubState) -> T) -> T {
        look(&self.state.lock().expect("the hub lock is never poisoned"))
    }

    /// Waits until `check` answers `Some`, at most `WAIT_MILLIS_MAX`; `Err` after that.
    pub async fn wait_for<T>(&self, check: impl FnMut(&HubState) -> Option<T>) -> Result<T, ()> {
        self.wait_for_within(WAIT_MILLIS_MAX, check).await
    }

    /// Waits until `check` answers `Some` for `client`, at most `WAIT_MILLIS_MAX`; `Err` after
    /// that, or at once when the client waits on the trace without it
    /// ([`HubState::waits_on_the_trace`]): a divergence that waiting cannot cure.
    pub async fn wait_for_client<T>(
        &self,
        client: usize,
        mut check: impl FnMut(&HubState) -> Option<T>,
    ) -> Result<T, ()> {
        self.wait_until(WAIT_MILLIS_MAX, |state| match check(state) {
            Some(found) => Waited::Reached(found),
            None if state.waits_on_the_trace(client) => Waited::Never,
            None => Waited::Pending,
        })
        .await
    }

    /// Waits until `check` answers `Some`, at most `wait_millis_max`; `Err` after that.
    pub async fn wait_for_within<T>(
        &self,
        wait_millis_max: u64,
        mut check: impl FnMut(&HubState) -> Option<T>,
    ) -> Result<T, ()> {
        self.wait_until(wait_millis_max, |state| match check(state) {
            Some(found) => Waited::Reached(found),
            None => Waited::Pending,
        })
        .await
    }

    /// Waits until `check` answers `Reached`, at most `wait_millis_max`; `Err` after that or as
    /// soon as it answers `Never`. `check` runs on every change and once more at the deadline.
    async fn wait_until<T>(
        &self,
        wait_millis_max: u64,
        mut check: impl FnMut(&HubState) -> Waited<T>,
    ) -> Result<T, ()> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_millis_max);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.read(&mut check) {
                Waited::Reached(found) => return Ok(found),
                Waited::Never => return Err(()),
                Waited::Pending => {}
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return match self.read(&mut check) {
                    Waited::Reached(found) => Ok(found),
                    Waited::Never | Waited::Pending => Err(()),
                };
            }
        }
    }

    /// Registers a store call of the layer; it waits on the answer until the trace releases it.
    /// A call of a dead process is released `Dead` at once and never counts as held.
    pub fn hold(
        &self,
        kind: CallKind,
        generation: Option<i64>,
    ) -> (u64, oneshot::Receiver<Release>) {
        let (sender, receiver) = oneshot::channel();
        let id = self.update(|state| {
            let id = state.next_call;
            state.next_call += 1;
            let client = match (kind, generation) {
                (CallKind::Claim, _) => state.claimant.take(),
                (CallKind::Finalize, Some(generation)) => state.owners.get(&generation).copied(),
                (CallKind::Finalize, None) => None,
            };
            if client.is_some_and(|client| state.dead.contains(&client)) {
                state.keep_from_the_database(id, kind, sender);
                return id;
            }
            // A call no client can own is held for no client (usize::MAX): the replay then
            // fails at the end on a waiting call the model does not have.
            state.held.insert(
                id,
                HeldCall {
                    client: client.unwrap_or(usize::MAX),
                    kind,
                },
            );
            state.releases.insert(id, sender);
            id
        });
        (id, receiver)
    }

    /// Releases the held call `id`.
    pub fn release(&self, id: u64, release: Release) {
        self.update(|state| {
            if let Some(HeldCall {
                client,
                kind: CallKind::Finalize,
            }) = state.held.get(&id)
            {
                state.finalizes_released.insert(*client);
            }
            state.held.remove(&id);
            if let Some(sender) = state.releases.remove(&id) {
                let _ = sender.send(release);
            }
        });
    }

    pub fn returned(&self, id: u64, answer: String) {
        self.update(|state| {
            state.returned.insert(id, answer);
        });
    }

    pub fn dropped(&self, id: u64) {
        self.update(|state| {
            state.held.remove(&id);
            state.releases.remove(&id);
            state.dropped.insert(id);
        });
    }

    pub fn renewed(&self, generation: i64, lease_expires_at: i64, matched: bool) {
        self.update(|state| {
            state
                .renewals
                .insert((generation, lease_expires_at, matched));
            state.renewals_refused += u64::from(!matched);
        });
    }

    pub fn owns(&self, generation: i64, client: usize) {
        self.update(|state| {
            state.owners.insert(generation, client);
        });
    }

    /// The process of `client` dies: every call it has held is released `Dead`, and so is every
    /// call it makes from now on (a drop guard's finalize spawned as its request goes).
    pub fn dies(&self, client: usize) {
        self.update(|state| {
            state.dead.insert(client);
            let held: Vec<(u64, CallKind)> = state
                .held
                .iter()
                .filter(|(_, call)| call.client == client)
                .map(|(id, call)| (*id, call.kind))
                .collect();
            for (id, kind) in held {
                state.held.remove(&id);
                if let Some(sender) = state.releases.remove(&id) {
                    state.keep_from_the_database(id, kind, sender);
                }
            }
        });
    }

    /// The process of `client` stalls past its lease: its heartbeat renews no more.
    pub fn stalls(&self, client: usize) {
        self.update(|state| {
            state.stalled.insert(client);
        });
    }

    /// Records a renewal of `generation` asked at `now_millis`; false when that claim already
    /// asked at this clock reading. The shipped heartbeat's next beat is due only once the
    /// clock has moved past the last one, and the model renews a claim once within the tick that
    /// makes it due, so a second renewal at one reading is a beat the model does not have.
    pub fn first_renewal_at(&self, generation: i64, now_millis: i64) -> bool {
        self.update(|state| {
            let first = state.renewals_asked.insert((generation, now_millis));
            if !first {
                state.repeated_renewals.push((generation, now_millis));
            }
            first
        })
    }

    /// Where a renewal of `generation` goes: nowhere from a process that died, after a takeover
    /// from one that stalled.
    pub fn renewal_path(&self, generation: i64) -> RenewalPath {
        self.read(|state| state.renewal_path(generation))
    }

    /// Waits, without a bound, until a stalled claim's renewal may go to the database: true
    /// once the claim was taken over, false once its process died (the renewal never goes).
    pub async fn released_after_takeover(&self, generation: i64) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.renewal_path(generation) {
                RenewalPath::Never => return false,
                RenewalPath::AfterTakeover
                    if self.read(|state| state.taken_over.contains(&generation)) =>
                {
                    return true
                }
                RenewalPath::AfterTakeover | RenewalPath::Now => {}
            }
            notified.await;
        }
    }

    /// A row at `generation` was read: every earlier claim of a stalled, living process has
    /// been taken over. Returns those newly marked. A claim whose finalize the trace has
    /// released is not marked: its finalizing may end while its renewal runs, and a heartbeat
    /// whose finalizing ended says nothing of a lost lease (its renewal stays kept).
    pub fn taken_over_by(&self, generation: i64) -> Vec<i64> {
        self.update(|state| {
            let newly: Vec<i64> = state
                .owners
                .range(..generation)
                .filter(|(_, client)| !state.finalizes_released.contains(client))
                .map(|(claim, _)| *claim)
                .filter(|claim| state.renewal_path(*claim) == RenewalPath::AfterTakeover)
                .filter(|claim| !state.taken_over.contains(claim))
                .collect();
            state.taken_over.extend(newly.iter().copied());
            newly
        })
    }

    /// A renewal of `generation` that waits for a takeover: in flight until the guard is dropped
    /// (answered, or dropped with its heartbeat).
    pub fn renewal_in_flight(&self, generation: i64) -> InFlightRenewal<'_> {
        self.update(|state| state.renewals_in_flight.insert(generation));
        InFlightRenewal {
            hub: self,
            generation,
        }
    }

    /// A taken-over claim's renewal answered: whether a row matched.
    pub fn renewed_after_takeover(&self, generation: i64, matched: bool) {
        self.update(|state| {
            state.renewed_after_takeover.insert(generation, matched);
            state.renewals_refused += u64::from(!matched);
        });
    }

    /// The scripted handler of `client` was entered; it waits for the trace's outcome.
    pub fn handler_entered(&self, client: usize) -> oneshot::Receiver<Outcome> {
        let (sender, receiver) = oneshot::channel();
        self.update(|state| {
            state.handler_runs += 1;
            state.handlers.entry(client).or_default().entered = true;
            state.directives.insert(client, sender);
        });
        receiver
    }

    /// Tells the handler of `client` what to answer; false if it does not wait for it.
    pub fn respond(&self, client: usize, outcome: Outcome) -> bool {
        self.update(|state| {
            state.handlers.entry(client).or_default().outcome = Some(outcome);
            state
                .directives
                .remove(&client)
                .is_some_and(|sender| sender.send(outcome).is_ok())
        })
    }

    /// A non-2xx handler of `client` waits until the trace's capture step to hand over its
    /// response (the layer reads a non-2xx body only as the client does).
    pub fn capture_gate(&self, client: usize) -> oneshot::Receiver<()> {
        let (sender, receiver) = oneshot::channel();
        self.update(|state| {
            state.capture_gates.insert(client, sender);
        });
        receiver
    }

    pub fn open_capture_gate(&self, client: usize) -> bool {
        self.update(|state| {
            state
                .capture_gates
                .remove(&client)
                .is_some_and(|sender| sender.send(()).is_ok())
        })
    }

    pub fn handler(&self, client: usize, change: impl FnOnce(&mut HandlerProgress)) {
        self.update(|state| change(state.handlers.entry(client).or_default()));
    }

    pub fn client(&self, client: usize, change: impl FnOnce(&mut ClientProgress)) {
        self.update(|state| change(state.clients.entry(client).or_default()));
    }
}

/// Records the drop of a store call's future that had not returned.
pub struct CallTracker<'a> {
    pub hub: &'a Hub,
    pub id: u64,
    pub returned: bool,
}

impl Drop for CallTracker<'_> {
    fn drop(&mut self) {
        if !self.returned {
            self.hub.dropped(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// The wait's first poll: `Ready` when it ends without waiting at all.
    fn first_poll<T>(wait: impl Future<Output = Result<T, ()>>) -> Poll<Result<T, ()>> {
        std::pin::pin!(wait).poll(&mut Context::from_waker(Waker::noop()))
    }

    fn claim_held(client: usize) -> impl FnMut(&HubState) -> Option<()> {
        move |state| matches!(state.held_of(client), Some((_, CallKind::Claim))).then_some(())
    }

    #[tokio::test]
    async fn a_wait_for_a_client_that_waits_on_the_trace_ends_at_once() {
        let hub = Hub::default();
        let _directive = hub.handler_entered(0);
        assert_eq!(
            first_poll(hub.wait_for_client(0, claim_held(0))),
            Poll::Ready(Err(())),
            "a handler waiting for its outcome never makes a claim"
        );
        hub.owns(1, 1);
        let _release = hub.hold(CallKind::Finalize, Some(1));
        assert_eq!(
            first_poll(hub.wait_for_client(1, claim_held(1))),
            Poll::Ready(Err(())),
            "a held finalize is released only by the trace"
        );
        hub.client(2, |progress| progress.finished = Some(Err("closed".into())));
        assert_eq!(
            first_poll(hub.wait_for_client(2, claim_held(2))),
            Poll::Ready(Err(())),
            "an exchange that ended does nothing more"
        );
        let _gate = hub.capture_gate(3);
        assert_eq!(
            first_poll(hub.wait_for_client(3, claim_held(3))),
            Poll::Ready(Err(())),
            "a non-2xx handler waits for the trace's capture step"
        );
    }

    #[tokio::test]
    async fn a_wait_for_a_client_still_on_its_way_stays_open_and_its_evidence_wins() {
        let hub = Hub::default();
        assert_eq!(
            first_poll(hub.wait_for_client(0, claim_held(0))),
            Poll::Pending,
            "a request just sent may still reach its claim"
        );
        hub.update(|state| state.claimant = Some(0));
        let _release = hub.hold(CallKind::Claim, None);
        assert_eq!(
            first_poll(hub.wait_for_client(0, claim_held(0))),
            Poll::Ready(Ok(())),
            "the evidence is checked before the client's waiting"
        );
    }

    // A process death as the database sees it: the dead client's held finalize is let go
    // without running, so is every call it makes after (its drop guard's), its heartbeat renews
    // no more; another client's calls are untouched.
    #[test]
    fn a_dead_process_s_calls_never_run_and_another_s_are_untouched() {
        let hub = Hub::default();
        hub.owns(1, 0);
        hub.owns(2, 1);
        let (held, mut release) = hub.hold(CallKind::Finalize, Some(1));
        let (other, mut other_release) = hub.hold(CallKind::Finalize, Some(2));
        assert_eq!(hub.renewal_path(1), RenewalPath::Now);
        hub.dies(0);
        assert_eq!(release.try_recv(), Ok(Release::Dead));
        assert!(hub.read(|state| state.held_of(0).is_none()));
        assert!(hub.read(|state| state.dead_calls.contains_key(&held)));
        let (later, mut later_release) = hub.hold(CallKind::Finalize, Some(1));
        assert_eq!(later_release.try_recv(), Ok(Release::Dead));
        assert!(hub.read(|state| state.held_of(0).is_none()));
        assert!(hub.read(|state| state.dead_calls.contains_key(&later)));
        assert_eq!(hub.renewal_path(1), RenewalPath::Never);
        assert_eq!(hub.renewal_path(2), RenewalPath::Now);
        assert_eq!(
            hub.read(|state| state.held_of(1)),
            Some((other, CallKind::Finalize))
        );
        assert!(
            other_release.try_recv().is_err(),
            "still held for the trace"
        );
        hub.stalls(1);
        assert_eq!(
            hub.renewal_path(2),
            RenewalPath::AfterTakeover,
            "a stalled process renews no more until its claim is taken over"
        );
        assert_eq!(
            hub.read(|state| state.held_of(1)),
            Some((other, CallKind::Finalize)),
            "a stall holds its calls as before"
        );
    }

    // A stalled process's renewal waits until a later claim has taken its row over (then it
    // goes to the database, which must refuse it), and never goes once the process died; a
    // claim taken over is marked once, and a claim of a live process never.
    #[test]
    fn a_stalled_claim_s_renewal_goes_only_after_a_takeover_and_never_after_a_death() {
        let hub = Hub::default();
        hub.owns(1, 0);
        hub.owns(2, 1);
        hub.owns(3, 2);
        hub.stalls(0);
        hub.stalls(2);
        let released = hub.released_after_takeover(1);
        let mut released = std::pin::pin!(released);
        let waker = Waker::noop();
        let mut context = Context::from_waker(waker);
        assert_eq!(released.as_mut().poll(&mut context), Poll::Pending);
        assert_eq!(hub.taken_over_by(1), Vec::<i64>::new(), "no earlier claim");
        assert_eq!(
            hub.taken_over_by(3),
            vec![1],
            "claim 2's process is not stalled"
        );
        assert_eq!(hub.taken_over_by(3), Vec::<i64>::new(), "marked once");
        assert_eq!(released.as_mut().poll(&mut context), Poll::Ready(true));
        let dead = hub.released_after_takeover(3);
        let mut dead = std::pin::pin!(dead);
        assert_eq!(dead.as_mut().poll(&mut context), Poll::Pending);
        hub.dies(2);
        assert_eq!(dead.as_mut().poll(&mut context), Poll::Ready(false));
        {
            let _in_flight = hub.renewal_in_flight(1);
            assert!(hub.read(|state| state.renewals_in_flight.contains(&1)));
        }
        assert!(
            hub.read(|state| state.renewals_in_flight.is_empty()),
            "out of flight once dropped"
        );
        // A stalled claim whose finalize the trace released is never marked taken over.
        hub.owns(4, 3);
        hub.stalls(3);
        let (finalize, _release) = hub.hold(CallKind::Finalize, Some(4));
        hub.release(finalize, Release::Run);
        assert_eq!(hub.taken_over_by(5), Vec::<i64>::new());
        assert!(hub.first_renewal_at(1, 10));
        assert!(
            !hub.first_renewal_at(1, 10),
            "one renewal per claim per clock reading"
        );
        assert!(hub.first_renewal_at(1, 11));
        assert_eq!(
            hub.read(|state| state.repeated_renewals.clone()),
            vec![(1, 10)]
        );
    }
}
