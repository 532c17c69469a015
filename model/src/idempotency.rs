//! The Idempotency-Key middleware model (M1-M9 of specs/idempotency-middleware.md).
//!
//! Clients send one request each with the key `k` (fingerprint A or B); the middleware claims
//! the key in the cache row, runs the handler, captures the body, finalizes the row; the
//! environment expires the lease or the row, fails a finalize (unknown outcome) and cancels
//! clients at every await point. Variants:
//! - `pre-fix`: the layer before its body-integrity fix — a capped `to_bytes` whose error becomes an empty body
//!   (cached and sent), a finalize error that empties the live body, no drop guard, one
//!   finalize attempt, finalize conditional on the key only.
//! - `fixed`: the body-integrity fix — frame capture, the terminal rule, the drop guard, a finalize
//!   retry — with the finalize still conditional on the key only.
//! - `fenced`: `fixed` plus generation fencing (finalize only the own generation while processing).
//!
//! Invariants of the model itself: deterministic (ordered collections, no hashing of unordered
//! data), every action is one actor's verb, the state keeps only what the properties or the
//! protocol need (ghost flags record past events a state predicate cannot see), and every
//! `always` property has a `sometimes` twin showing the interesting states are reached.

use crate::check::{BoundSpec, Bounds, Kind, ModelSpec, PropertyDef, SpecError, Verdict};
use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet};

/// The fingerprint a client's request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fingerprint {
    A,
    B,
}

/// What the handler does once it runs, relative to the cache cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// 2xx, body below the cap.
    OkUnder,
    /// 2xx, body of exactly the cap.
    OkAtCap,
    /// 2xx, body one byte over the cap.
    OkOneOver,
    /// 2xx, body far over the cap (pre-fix `to_bytes(cap + 1)` fails on it).
    OkFarOver,
    /// 2xx, the body fails before reaching the cap.
    OkErrorBeforeCap,
    /// 2xx, the body fails after passing the cap.
    OkErrorAfterCap,
    /// non-2xx, small body.
    FailUnder,
    /// non-2xx, body far over the cap.
    FailFarOver,
}

impl Outcome {
    /// Every outcome, in the order the `outcomes` bound takes them.
    pub const ALL: [Outcome; 8] = [
        Outcome::OkUnder,
        Outcome::OkFarOver,
        Outcome::FailFarOver,
        Outcome::OkErrorBeforeCap,
        Outcome::OkAtCap,
        Outcome::OkOneOver,
        Outcome::OkErrorAfterCap,
        Outcome::FailUnder,
    ];

    fn is_success(self) -> bool {
        !matches!(self, Outcome::FailUnder | Outcome::FailFarOver)
    }

    /// Whether the fixed capture streams a tail after the finalize (the body passed the cap).
    fn overflows(self) -> bool {
        matches!(self, Outcome::OkOneOver | Outcome::OkFarOver | Outcome::OkErrorAfterCap)
    }

    fn words(self) -> &'static str {
        match self {
            Outcome::OkUnder => "200, body under the cap",
            Outcome::OkAtCap => "200, body of exactly the cap",
            Outcome::OkOneOver => "200, body one byte over the cap",
            Outcome::OkFarOver => "200, body 3 frames far over the cap",
            Outcome::OkErrorBeforeCap => "200, body fails before the cap",
            Outcome::OkErrorAfterCap => "200, body fails after the cap",
            Outcome::FailUnder => "502, small body",
            Outcome::FailFarOver => "502, body far over the cap",
        }
    }
}

/// What a success row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stored {
    /// The complete body (at most the cap).
    Full,
    /// The too-large sentinel.
    Sentinel,
    /// An empty body standing for a non-empty one: the pre-fix poison.
    Empty,
}

/// What a finalize writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Write {
    Succeeded(Stored),
    Failed,
}

impl Write {
    fn words(self) -> &'static str {
        match self {
            Write::Succeeded(Stored::Full) => "succeeded(full)",
            Write::Succeeded(Stored::Sentinel) => "succeeded(too_large)",
            Write::Succeeded(Stored::Empty) => "succeeded(full) with an EMPTY body",
            Write::Failed => "failed",
        }
    }
}

/// The body a first client received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Live {
    /// Exactly the handler's frames (its error and trailers included).
    Exact,
    /// An empty body substituted for the handler's.
    Empty,
}

/// What a client ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    Fresh { success: bool, live: Live },
    Replay { stored: Stored, marked: bool, origin: u8 },
    Conflict,
    Mismatch,
}

/// Where a client's request is. Every variant but `Ready` and `Done` is an await point at which
/// the client may cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Ready,
    /// Sent; the middleware is claiming the key.
    Claiming,
    /// Claimed at `generation`; the handler runs.
    Running { generation: u8 },
    /// The handler answered; the middleware reads the body.
    Capturing { generation: u8, outcome: Outcome },
    /// A finalize is in flight; `attempts_left` after this one.
    Finalizing { generation: u8, outcome: Outcome, write: Write, live: Live, attempts_left: u8 },
    /// The response was returned; its over-cap tail is still streaming.
    Streaming,
    /// The client went away after a 2xx; the drop guard's finalize is in flight.
    Guarding { generation: u8 },
    Done(Answer),
    /// The client went away; nothing of it is pending.
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowStatus {
    Processing { lease_live: bool },
    Succeeded { stored: Stored, origin: u8 },
    /// Recorded failed by generation `origin`.
    Failed { origin: u8 },
}

/// The cache row of key `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row {
    pub fingerprint: Fingerprint,
    pub generation: u8,
    pub status: RowStatus,
    /// Past its `expires_at`: read as absent by every claim.
    pub expired: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Client {
    pub fingerprint: Fingerprint,
    pub stage: Stage,
}

/// Past events the properties need (M1, M5, M6, M8 are about what happened, not what is).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ghost {
    /// Generations whose handler returned a 2xx (its effects are committed).
    pub succeeded_generations: BTreeSet<u8>,
    /// What each generation's first client received.
    pub delivered: BTreeMap<u8, Live>,
    pub handler_ran_over_success: bool,
    pub handler_ran_over_mismatch: bool,
    pub handler_ran_over_live_lease: bool,
    pub non_success_wrote_success: bool,
    pub stale_overwrite: bool,
    pub stale_finalizer_ran: bool,
    pub guard_fired: bool,
}

/// Budgets of environment events still available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budget {
    pub lease_expiries: u8,
    pub row_expiries: u8,
    pub finalize_faults: u8,
    pub cancellations: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyState {
    pub clients: Vec<Client>,
    pub row: Option<Row>,
    pub budget: Budget,
    pub ghost: Ghost,
}

/// One actor's verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    ClientSends { client: usize, fingerprint: Fingerprint },
    MiddlewareClaims { client: usize },
    HandlerResponds { client: usize, outcome: Outcome },
    MiddlewareCaptures { client: usize },
    FinalizeApplied { client: usize },
    FinalizeLost { client: usize },
    /// The database answered with an error; `committed` says whether the write happened anyway.
    FinalizeUnknown { client: usize, committed: bool },
    TailStreams { client: usize },
    ClientCancels { client: usize },
    GuardFinalizes { client: usize },
    LeaseExpires,
    RowExpires,
}

/// A seeded bug in the fenced middleware, for tests that show a property can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// A succeeded row is claimed again instead of replayed (M1).
    ClaimOverSuccess,
    /// A row with another fingerprint is claimed instead of answering 422 (M5).
    ClaimOverMismatch,
    /// A processing row with a live lease is claimed instead of answering 409 (M6).
    ClaimOverLiveLease,
    /// A replay is served without the replay marker (M4).
    ReplayUnmarked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    PreFix,
    Fixed,
    Fenced,
}

pub struct IdempotencyModel {
    variant: Variant,
    variant_name: &'static str,
    bounds: Bounds,
    clients: usize,
    fingerprints: Vec<Fingerprint>,
    outcomes: Vec<Outcome>,
    mutation: Option<Mutation>,
}

impl IdempotencyModel {
    /// Test-only: the same model with a seeded bug.
    pub fn with_mutation(mut self, mutation: Mutation) -> Self {
        self.mutation = Some(mutation);
        self
    }

    fn attempts(&self) -> u8 {
        match self.variant {
            Variant::PreFix => 1,
            Variant::Fixed | Variant::Fenced => 2,
        }
    }

    /// Whether a finalize by `generation` applies to the row.
    fn finalize_applies(&self, row: Option<&Row>, generation: u8) -> bool {
        match (self.variant, row) {
            (_, None) => false,
            (Variant::Fenced, Some(row)) => {
                row.generation == generation && matches!(row.status, RowStatus::Processing { .. })
            }
            (Variant::PreFix | Variant::Fixed, Some(_)) => true,
        }
    }

    /// What the middleware writes and sends once the body is read.
    fn capture(&self, outcome: Outcome) -> (Write, Live) {
        if !outcome.is_success() {
            let live = match (self.variant, outcome) {
                // Bug c: the non-2xx arm also used the capped to_bytes, empty on error.
                (Variant::PreFix, Outcome::FailFarOver) => Live::Empty,
                _ => Live::Exact,
            };
            return (Write::Failed, live);
        }
        match self.variant {
            Variant::PreFix => match outcome {
                Outcome::OkUnder | Outcome::OkAtCap => (Write::Succeeded(Stored::Full), Live::Exact),
                // to_bytes(cap + 1) succeeds on exactly cap + 1 bytes: the sentinel.
                Outcome::OkOneOver => (Write::Succeeded(Stored::Sentinel), Live::Exact),
                // Bug a: anything else errs and becomes an empty body, cached and sent.
                _ => (Write::Succeeded(Stored::Empty), Live::Empty),
            },
            Variant::Fixed | Variant::Fenced => match outcome {
                Outcome::OkUnder | Outcome::OkAtCap => (Write::Succeeded(Stored::Full), Live::Exact),
                _ => (Write::Succeeded(Stored::Sentinel), Live::Exact),
            },
        }
    }

    fn apply_write(state: &mut IdempotencyState, generation: u8, write: Write) {
        let Some(row) = state.row.as_mut() else { return };
        if row.generation != generation {
            // A write that lands on a newer claim's row: the stale overwrite of M8.
            state.ghost.stale_overwrite = true;
        }
        row.status = match write {
            Write::Succeeded(stored) => RowStatus::Succeeded { stored, origin: generation },
            Write::Failed => RowStatus::Failed { origin: generation },
        };
    }

    /// The stage after a finalize is done with (applied, lost or given up on).
    fn after_finalize(&self, state: &mut IdempotencyState, client: usize, generation: u8, outcome: Outcome, live: Live) {
        if outcome.is_success() {
            state.ghost.delivered.insert(generation, live);
        }
        state.clients[client].stage = if self.variant != Variant::PreFix && outcome.overflows() {
            Stage::Streaming
        } else {
            Stage::Done(Answer::Fresh { success: outcome.is_success(), live })
        };
    }

    fn claim(&self, state: &mut IdempotencyState, client: usize) {
        let fingerprint = state.clients[client].fingerprint;
        let next_generation = state.row.map_or(1, |row| row.generation + 1);
        let grant = |state: &mut IdempotencyState| {
            state.row = Some(Row {
                fingerprint,
                generation: next_generation,
                status: RowStatus::Processing { lease_live: true },
                expired: false,
            });
            state.clients[client].stage = Stage::Running { generation: next_generation };
        };
        let Some(row) = state.row.filter(|row| !row.expired) else {
            grant(state);
            return;
        };
        if row.fingerprint != fingerprint {
            if self.mutation == Some(Mutation::ClaimOverMismatch) {
                state.ghost.handler_ran_over_mismatch = true;
                grant(state);
            } else {
                state.clients[client].stage = Stage::Done(Answer::Mismatch);
            }
            return;
        }
        match row.status {
            RowStatus::Processing { lease_live: true } => {
                if self.mutation == Some(Mutation::ClaimOverLiveLease) {
                    state.ghost.handler_ran_over_live_lease = true;
                    grant(state);
                } else {
                    state.clients[client].stage = Stage::Done(Answer::Conflict);
                }
            }
            RowStatus::Processing { lease_live: false } | RowStatus::Failed { .. } => grant(state),
            RowStatus::Succeeded { stored, origin } => {
                if self.mutation == Some(Mutation::ClaimOverSuccess) {
                    state.ghost.handler_ran_over_success = true;
                    grant(state);
                } else {
                    let marked = self.mutation != Some(Mutation::ReplayUnmarked);
                    state.clients[client].stage = Stage::Done(Answer::Replay { stored, marked, origin });
                }
            }
        }
    }
}

impl Model for IdempotencyModel {
    type State = IdempotencyState;
    type Action = Action;

    fn init_states(&self) -> Vec<IdempotencyState> {
        let budget = Budget {
            lease_expiries: self.bounds.get("lease_expiries") as u8,
            row_expiries: self.bounds.get("row_expiries") as u8,
            finalize_faults: self.bounds.get("finalize_faults") as u8,
            cancellations: self.bounds.get("cancellations") as u8,
        };
        let clients = vec![Client { fingerprint: Fingerprint::A, stage: Stage::Ready }; self.clients];
        vec![IdempotencyState { clients, row: None, budget, ghost: Ghost::default() }]
    }

    fn actions(&self, state: &IdempotencyState, actions: &mut Vec<Action>) {
        for (client, entry) in state.clients.iter().enumerate() {
            let cancellable = state.budget.cancellations > 0;
            match entry.stage {
                Stage::Ready => {
                    for fingerprint in &self.fingerprints {
                        actions.push(Action::ClientSends { client, fingerprint: *fingerprint });
                    }
                }
                Stage::Claiming => actions.push(Action::MiddlewareClaims { client }),
                Stage::Running { .. } => {
                    for outcome in &self.outcomes {
                        actions.push(Action::HandlerResponds { client, outcome: *outcome });
                    }
                }
                Stage::Capturing { .. } => actions.push(Action::MiddlewareCaptures { client }),
                Stage::Finalizing { generation, .. } => {
                    if self.finalize_applies(state.row.as_ref(), generation) {
                        actions.push(Action::FinalizeApplied { client });
                    } else {
                        actions.push(Action::FinalizeLost { client });
                    }
                    if state.budget.finalize_faults > 0 {
                        actions.push(Action::FinalizeUnknown { client, committed: true });
                        actions.push(Action::FinalizeUnknown { client, committed: false });
                    }
                }
                Stage::Streaming => actions.push(Action::TailStreams { client }),
                Stage::Guarding { .. } => actions.push(Action::GuardFinalizes { client }),
                Stage::Done(_) | Stage::Gone => {}
            }
            let awaiting = !matches!(entry.stage, Stage::Ready | Stage::Done(_) | Stage::Gone | Stage::Guarding { .. });
            if cancellable && awaiting {
                actions.push(Action::ClientCancels { client });
            }
        }
        if let Some(row) = state.row {
            if state.budget.lease_expiries > 0 && row.status == (RowStatus::Processing { lease_live: true }) {
                actions.push(Action::LeaseExpires);
            }
            if state.budget.row_expiries > 0 && !row.expired {
                actions.push(Action::RowExpires);
            }
        }
    }

    fn next_state(&self, last: &IdempotencyState, action: Action) -> Option<IdempotencyState> {
        let mut state = last.clone();
        match action {
            Action::ClientSends { client, fingerprint } => {
                state.clients[client] = Client { fingerprint, stage: Stage::Claiming };
            }
            Action::MiddlewareClaims { client } => self.claim(&mut state, client),
            Action::HandlerResponds { client, outcome } => {
                let Stage::Running { generation } = state.clients[client].stage else { return None };
                if outcome.is_success() {
                    state.ghost.succeeded_generations.insert(generation);
                }
                state.clients[client].stage = Stage::Capturing { generation, outcome };
            }
            Action::MiddlewareCaptures { client } => {
                let Stage::Capturing { generation, outcome } = state.clients[client].stage else { return None };
                let (write, live) = self.capture(outcome);
                let attempts_left = self.attempts() - 1;
                state.clients[client].stage = Stage::Finalizing { generation, outcome, write, live, attempts_left };
            }
            Action::FinalizeApplied { client } | Action::FinalizeLost { client } => {
                let Stage::Finalizing { generation, outcome, write, live, .. } = state.clients[client].stage else {
                    return None;
                };
                if state.row.is_some_and(|row| row.generation != generation) {
                    state.ghost.stale_finalizer_ran = true;
                }
                if matches!(action, Action::FinalizeApplied { .. }) {
                    if !outcome.is_success() && matches!(write, Write::Succeeded(_)) {
                        state.ghost.non_success_wrote_success = true;
                    }
                    Self::apply_write(&mut state, generation, write);
                }
                self.after_finalize(&mut state, client, generation, outcome, live);
            }
            Action::FinalizeUnknown { client, committed } => {
                let Stage::Finalizing { generation, outcome, write, live, attempts_left } = state.clients[client].stage
                else {
                    return None;
                };
                state.budget.finalize_faults -= 1;
                if committed && self.finalize_applies(state.row.as_ref(), generation) {
                    Self::apply_write(&mut state, generation, write);
                }
                if attempts_left > 0 {
                    let attempts_left = attempts_left - 1;
                    state.clients[client].stage = Stage::Finalizing { generation, outcome, write, live, attempts_left };
                } else {
                    // Out of attempts. Bug b (pre-fix): the live body is swapped for an empty one.
                    let live = if self.variant == Variant::PreFix && outcome.is_success() { Live::Empty } else { live };
                    self.after_finalize(&mut state, client, generation, outcome, live);
                }
            }
            Action::TailStreams { client } => {
                state.clients[client].stage = Stage::Done(Answer::Fresh { success: true, live: Live::Exact });
            }
            Action::ClientCancels { client } => {
                state.budget.cancellations -= 1;
                let after_success = match state.clients[client].stage {
                    Stage::Capturing { generation, outcome } if outcome.is_success() => Some(generation),
                    Stage::Finalizing { generation, outcome, .. } if outcome.is_success() => Some(generation),
                    _ => None,
                };
                state.clients[client].stage = match after_success {
                    // The drop guard (D5): the fixed middleware finalizes the sentinel anyway.
                    Some(generation) if self.variant != Variant::PreFix => {
                        state.ghost.guard_fired = true;
                        Stage::Guarding { generation }
                    }
                    _ => Stage::Gone,
                };
            }
            Action::GuardFinalizes { client } => {
                let Stage::Guarding { generation } = state.clients[client].stage else { return None };
                if state.row.is_some_and(|row| row.generation != generation) {
                    state.ghost.stale_finalizer_ran = true;
                }
                if self.finalize_applies(state.row.as_ref(), generation) {
                    Self::apply_write(&mut state, generation, Write::Succeeded(Stored::Sentinel));
                }
                state.clients[client].stage = Stage::Gone;
            }
            Action::LeaseExpires => {
                state.budget.lease_expiries -= 1;
                let row = state.row.as_mut()?;
                row.status = RowStatus::Processing { lease_live: false };
            }
            Action::RowExpires => {
                state.budget.row_expiries -= 1;
                state.row.as_mut()?.expired = true;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.property_defs().iter().map(PropertyDef::to_stateright).collect()
    }
}

fn answers(state: &IdempotencyState) -> impl Iterator<Item = Answer> + '_ {
    state.clients.iter().filter_map(|client| match client.stage {
        Stage::Done(answer) => Some(answer),
        _ => None,
    })
}

/// Whether some client may still finalize `generation` (inline or through its guard).
fn finalizer_pending(state: &IdempotencyState, generation: u8) -> bool {
    state.clients.iter().any(|client| match client.stage {
        Stage::Running { generation: owner }
        | Stage::Capturing { generation: owner, .. }
        | Stage::Finalizing { generation: owner, .. }
        | Stage::Guarding { generation: owner } => owner == generation,
        _ => false,
    })
}

fn m1_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    !state.ghost.handler_ran_over_success
}

fn m1_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| matches!(answer, Answer::Replay { .. }))
}

fn m2_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    // Every modelled handler body is non-empty, so an empty cached body is always a poison.
    !matches!(state.row, Some(Row { status: RowStatus::Succeeded { stored: Stored::Empty, .. }, .. }))
}

fn m2_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    matches!(state.row, Some(Row { status: RowStatus::Succeeded { stored: Stored::Sentinel, .. }, .. }))
}

fn m3_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    let Some(row) = state.row else { return true };
    let own_success = state.ghost.succeeded_generations.contains(&row.generation);
    // Left processing by our own control flow: a 2xx generation still owns a live processing
    // row, but none of its finalizers (inline or guard) is pending any more.
    let left_processing = own_success
        && !row.expired
        && matches!(row.status, RowStatus::Processing { .. })
        && !finalizer_pending(state, row.generation);
    // The own generation recording failed after its 2xx (a stale writer's failed is M8's).
    let failed_after_success = own_success && row.status == (RowStatus::Failed { origin: row.generation });
    !left_processing && !failed_after_success
}

fn m3_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    state.ghost.guard_fired
        && matches!(state.row, Some(Row { status: RowStatus::Succeeded { stored: Stored::Sentinel, .. }, .. }))
}

fn m4_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).all(|answer| match answer {
        Answer::Replay { marked: false, .. } => false,
        // A replayed full body must be what the original client got (pre-fix bug b breaks it).
        Answer::Replay { stored: Stored::Full, origin, .. } => state.ghost.delivered.get(&origin) != Some(&Live::Empty),
        _ => true,
    })
}

fn m4_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| matches!(answer, Answer::Replay { stored: Stored::Sentinel, .. }))
}

fn m5_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    !state.ghost.handler_ran_over_mismatch
}

fn m5_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| answer == Answer::Mismatch)
}

fn m6_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    !state.ghost.handler_ran_over_live_lease
}

fn m6_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).any(|answer| answer == Answer::Conflict)
}

fn m7_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    answers(state).all(|answer| answer != Answer::Fresh { success: true, live: Live::Empty })
}

fn m7_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    // An over-cap body's tail streams to its first client after the row is already terminal.
    state.clients.iter().any(|client| client.stage == Stage::Streaming)
}

fn m8_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    !state.ghost.stale_overwrite
}

fn m8_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    state.ghost.stale_finalizer_ran
}

fn m9_holds(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    !state.ghost.non_success_wrote_success
        && answers(state).all(|answer| answer != Answer::Fresh { success: false, live: Live::Empty })
}

fn m9_example(_: &IdempotencyModel, state: &IdempotencyState) -> bool {
    matches!(state.row, Some(Row { status: RowStatus::Failed { .. }, .. }))
        && answers(state).any(|answer| answer == Answer::Fresh { success: false, live: Live::Exact })
}

const BOUNDS: &[BoundSpec] = &[
    BoundSpec { key: "clients", default: 2, min: 1, max: 3, help: "clients sending one request each with key k" },
    BoundSpec { key: "fingerprints", default: 2, min: 1, max: 2, help: "distinct request fingerprints (A, B)" },
    BoundSpec { key: "outcomes", default: 8, min: 1, max: 8, help: "handler outcomes explored, in Outcome::ALL order" },
    BoundSpec { key: "lease_expiries", default: 1, min: 0, max: 2, help: "times a processing lease may expire" },
    BoundSpec { key: "row_expiries", default: 1, min: 0, max: 2, help: "times the row may pass its expiry" },
    BoundSpec { key: "finalize_faults", default: 1, min: 0, max: 2, help: "finalizes answered with an error (unknown outcome)" },
    BoundSpec { key: "cancellations", default: 1, min: 0, max: 3, help: "client cancellations (at any await point)" },
];

impl ModelSpec for IdempotencyModel {
    const NAME: &'static str = "idempotency";
    const VARIANTS: &'static [&'static str] = &["pre-fix", "fixed", "fenced"];
    const BOUNDS: &'static [BoundSpec] = BOUNDS;

    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        let variant_name = Self::resolve_variant(variant)?;
        let variant = match variant_name {
            "pre-fix" => Variant::PreFix,
            "fixed" => Variant::Fixed,
            _ => Variant::Fenced,
        };
        let fingerprints = [Fingerprint::A, Fingerprint::B][..bounds.get("fingerprints") as usize].to_vec();
        Ok(IdempotencyModel {
            variant,
            variant_name,
            bounds: bounds.clone(),
            clients: bounds.get("clients") as usize,
            fingerprints,
            outcomes: Outcome::ALL[..bounds.get("outcomes") as usize].to_vec(),
            mutation: None,
        })
    }

    fn variant(&self) -> &'static str {
        self.variant_name
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        use Kind::{Always, Sometimes};
        vec![
            PropertyDef { id: "M1", name: "M1 at-most-once", kind: Always, condition: m1_holds },
            PropertyDef { id: "M1", name: "M1 a replay is served", kind: Sometimes, condition: m1_example },
            PropertyDef { id: "M2", name: "M2 no-poison", kind: Always, condition: m2_holds },
            PropertyDef { id: "M2", name: "M2 a sentinel is stored", kind: Sometimes, condition: m2_example },
            PropertyDef { id: "M3", name: "M3 terminal-rule", kind: Always, condition: m3_holds },
            PropertyDef { id: "M3", name: "M3 the drop guard stores the sentinel", kind: Sometimes, condition: m3_example },
            PropertyDef { id: "M4", name: "M4 replay-fidelity", kind: Always, condition: m4_holds },
            PropertyDef { id: "M4", name: "M4 a sentinel replay is served", kind: Sometimes, condition: m4_example },
            PropertyDef { id: "M5", name: "M5 fingerprint", kind: Always, condition: m5_holds },
            PropertyDef { id: "M5", name: "M5 a 422 is answered", kind: Sometimes, condition: m5_example },
            PropertyDef { id: "M6", name: "M6 in-flight", kind: Always, condition: m6_holds },
            PropertyDef { id: "M6", name: "M6 a 409 is answered", kind: Sometimes, condition: m6_example },
            PropertyDef { id: "M7", name: "M7 live-body", kind: Always, condition: m7_holds },
            PropertyDef { id: "M7", name: "M7 an over-cap tail streams after the finalize", kind: Sometimes, condition: m7_example },
            PropertyDef { id: "M8", name: "M8 fencing", kind: Always, condition: m8_holds },
            PropertyDef { id: "M8", name: "M8 a stale finalizer runs", kind: Sometimes, condition: m8_example },
            PropertyDef { id: "M9", name: "M9 non-2xx passthrough", kind: Always, condition: m9_holds },
            PropertyDef { id: "M9", name: "M9 a non-2xx is recorded failed", kind: Sometimes, condition: m9_example },
        ]
    }

    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        if property.kind == Kind::Sometimes {
            // Pre-fix never streams a tail (it buffers everything) and never fires a guard.
            let unreachable_in_pre_fix = ["M3", "M7"].contains(&property.id);
            return if self.variant == Variant::PreFix && unreachable_in_pre_fix && self.mutation.is_none() {
                Verdict::Unreached
            } else {
                Verdict::Reached
            };
        }
        let violated: &[&str] = match (self.variant, self.mutation) {
            (Variant::PreFix, _) => &["M2", "M3", "M4", "M7", "M8", "M9"],
            (Variant::Fixed, _) => &["M8"],
            (Variant::Fenced, None) => &[],
            (Variant::Fenced, Some(Mutation::ClaimOverSuccess)) => &["M1"],
            (Variant::Fenced, Some(Mutation::ClaimOverMismatch)) => &["M5"],
            (Variant::Fenced, Some(Mutation::ClaimOverLiveLease)) => &["M6"],
            (Variant::Fenced, Some(Mutation::ReplayUnmarked)) => &["M4"],
        };
        if violated.contains(&property.id) {
            Verdict::Violated
        } else {
            Verdict::Holds
        }
    }

    fn step_words(&self, before: &IdempotencyState, action: &Action, after: &IdempotencyState) -> String {
        let name = |client: &usize| format!("C{}", client + 1);
        let generation_of = |state: &IdempotencyState, client: usize| match state.clients[client].stage {
            Stage::Running { generation }
            | Stage::Capturing { generation, .. }
            | Stage::Finalizing { generation, .. }
            | Stage::Guarding { generation } => generation,
            _ => 0,
        };
        match action {
            Action::ClientSends { client, fingerprint } => {
                format!("{} POST /transfers Idempotency-Key k fp {fingerprint:?}", name(client))
            }
            Action::MiddlewareClaims { client } => match after.clients[*client].stage {
                Stage::Running { generation } => match before.row {
                    None => format!("{}: claim k inserts a processing row, generation {generation}", name(client)),
                    Some(row) if row.expired => format!("{}: claim k takes over the expired row, generation {generation}", name(client)),
                    Some(_) => format!("{}: claim k takes over the row, generation {generation}", name(client)),
                },
                Stage::Done(Answer::Conflict) => format!("{}: k is processing under a live lease -> 409", name(client)),
                Stage::Done(Answer::Mismatch) => format!("{}: k has another fingerprint -> 422", name(client)),
                Stage::Done(Answer::Replay { stored, marked, .. }) => format!(
                    "{}: replay of {} -> 200, idempotency-replayed: {marked}",
                    name(client),
                    Write::Succeeded(stored).words()
                ),
                _ => format!("{}: claim", name(client)),
            },
            Action::HandlerResponds { client, outcome } => {
                format!("{}: handler returns {}", name(client), outcome.words())
            }
            Action::MiddlewareCaptures { client } => match after.clients[*client].stage {
                Stage::Finalizing { write, live, .. } => format!(
                    "{}: middleware reads the body, will finalize {} and send {} body",
                    name(client),
                    write.words(),
                    if live == Live::Exact { "the handler's" } else { "an EMPTY" }
                ),
                _ => format!("{}: middleware reads the body", name(client)),
            },
            Action::FinalizeApplied { client } | Action::FinalizeLost { client } => {
                let generation = generation_of(before, *client);
                let write = match before.clients[*client].stage {
                    Stage::Finalizing { write, .. } => write.words(),
                    _ => "?",
                };
                let verb = if matches!(action, Action::FinalizeApplied { .. }) { "applied" } else { "lost" };
                let current = before.row.map_or(0, |row| row.generation);
                format!("{}: finalize {write} {verb} (finalizer generation {generation}, row generation {current})", name(client))
            }
            Action::FinalizeUnknown { client, committed } => format!(
                "{}: finalize answered an error, outcome unknown (it {} commit)",
                name(client),
                if *committed { "did" } else { "did not" }
            ),
            Action::TailStreams { client } => format!("{}: the over-cap tail streams; the client has every byte", name(client)),
            Action::ClientCancels { client } => {
                let during = match before.clients[*client].stage {
                    Stage::Claiming => "while the key is claimed",
                    Stage::Running { .. } => "while the handler runs",
                    Stage::Capturing { .. } => "while the middleware reads the body",
                    Stage::Finalizing { .. } => "while the finalize is in flight",
                    Stage::Streaming => "while the tail streams",
                    _ => "",
                };
                let guard = if matches!(after.clients[*client].stage, Stage::Guarding { .. }) {
                    "; the drop guard takes over"
                } else {
                    ""
                };
                format!("{} cancels (drops the response future) {during}{guard}", name(client))
            }
            Action::GuardFinalizes { client } => format!(
                "{}: drop guard finalizes succeeded(too_large), {}",
                name(client),
                if before.row != after.row { "applied" } else { "lost" }
            ),
            Action::LeaseExpires => {
                format!("the lease of generation {} expires", before.row.map_or(0, |row| row.generation))
            }
            Action::RowExpires => "row k passes its expires_at".to_string(),
        }
    }
}

/// The shortest path (fewest actions) from an initial state to a state where `property`'s
/// discovery condition holds: a violating state for `always`, an example for `sometimes`.
///
/// Why here: stateright 0.31's BFS overwrites a property's discovery each time another state
/// matches it, so the trace `check::run` reports is the last match found, not the first.
/// This plain breadth-first search keeps the first one, which is a shortest one.
pub fn shortest_trace<M>(model: &M, property: &PropertyDef<M>) -> Option<Vec<crate::check::TraceStep>>
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    // One shortest-path search for every model: `check::shortest_paths`.
    let matching = property.kind == Kind::Sometimes;
    let mut found = crate::check::shortest_paths(model, &[(property.name, property.condition, matching)]);
    found.remove(property.name).map(|path| crate::check::steps_of(model, &path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{run, CheckOptions, CheckReport};

    fn model(variant: &str, mutation: Option<Mutation>) -> IdempotencyModel {
        let bounds = Bounds::resolve(IdempotencyModel::BOUNDS, &[]).unwrap();
        let model = IdempotencyModel::build(variant, &bounds).unwrap();
        match mutation {
            Some(mutation) => model.with_mutation(mutation),
            None => model,
        }
    }

    fn check(variant: &str, mutation: Option<Mutation>) -> CheckReport {
        run(model(variant, mutation), &CheckOptions::default(), &mut |_| {})
    }

    /// The shortest trace of a property, in HTTP words.
    fn shortest_words(variant: &str, mutation: Option<Mutation>, property: &str) -> Vec<String> {
        let model = model(variant, mutation);
        let definition = model.property_defs().into_iter().find(|def| def.name == property).expect("a property");
        let trace = shortest_trace(&model, &definition).expect("a trace");
        trace.into_iter().map(|step| step.words).collect()
    }

    #[test]
    fn variants_meet_their_expected_verdicts_at_the_ci_bounds() {
        for (variant, unique_states) in [("pre-fix", 34_859), ("fixed", 67_141), ("fenced", 60_073)] {
            let report = check(variant, None);
            println!("{variant}: {} unique states, depth {}, {:.2}s", report.unique_states, report.max_depth, report.seconds);
            assert!(report.complete, "{variant} did not complete");
            for property in &report.properties {
                assert_eq!(property.verdict, property.expected, "{variant}: {}", property.name);
            }
            assert_eq!(report.unique_states, unique_states, "{variant}: the state space changed");
        }
    }

    //= specs/idempotency-middleware.md#M2
    //# A cached success holds the complete body, at most the cap, or the too-large sentinel.
    #[test]
    fn pre_fix_poisons_the_cache_with_an_empty_body() {
        assert_eq!(
            shortest_words("pre-fix", None, "M2 no-poison"),
            [
                "C1 POST /transfers Idempotency-Key k fp A",
                "C1: claim k inserts a processing row, generation 1",
                "C1: handler returns 200, body 3 frames far over the cap",
                "C1: middleware reads the body, will finalize succeeded(full) with an EMPTY body and send an EMPTY body",
                "C1: finalize succeeded(full) with an EMPTY body applied (finalizer generation 1, row generation 1)",
            ]
        );
    }

    //= specs/idempotency-middleware.md#M3
    //# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
    #[test]
    fn pre_fix_leaves_a_row_processing_when_the_client_cancels_after_the_2xx() {
        assert_eq!(
            shortest_words("pre-fix", None, "M3 terminal-rule"),
            [
                "C1 POST /transfers Idempotency-Key k fp A",
                "C1: claim k inserts a processing row, generation 1",
                "C1: handler returns 200, body under the cap",
                "C1 cancels (drops the response future) while the middleware reads the body",
            ]
        );
    }

    #[test]
    fn pre_fix_swaps_the_live_body_and_breaks_replays_on_a_finalize_error() {
        let live = shortest_words("pre-fix", None, "M7 live-body");
        assert_eq!(live.last().unwrap(), "C1: finalize answered an error, outcome unknown (it did commit)");
        assert_eq!(live.len(), 5);
        let replay = shortest_words("pre-fix", None, "M4 replay-fidelity");
        assert_eq!(replay.last().unwrap(), "C2: replay of succeeded(full) -> 200, idempotency-replayed: true");
        assert_eq!(replay.len(), 7);
        let non_success = shortest_words("pre-fix", None, "M9 non-2xx passthrough");
        assert_eq!(non_success[2], "C1: handler returns 502, body far over the cap");
        assert_eq!(non_success.len(), 5);
    }

    //= specs/idempotency-middleware.md#M8
    //# Every finalize is conditional on its claim's generation and on the row still processing.
    #[test]
    fn fixed_lets_a_stale_finalizer_overwrite_the_newer_claim() {
        assert_eq!(
            shortest_words("fixed", None, "M8 fencing"),
            [
                "C1 POST /transfers Idempotency-Key k fp A",
                "C1: claim k inserts a processing row, generation 1",
                "C1: handler returns 200, body under the cap",
                "C1: middleware reads the body, will finalize succeeded(full) and send the handler's body",
                "C2 POST /transfers Idempotency-Key k fp A",
                "the lease of generation 1 expires",
                "C2: claim k takes over the row, generation 2",
                "C1: finalize succeeded(full) applied (finalizer generation 1, row generation 2)",
            ]
        );
        let report = check("fixed", None);
        let violated: Vec<&str> = report
            .properties
            .iter()
            .filter(|property| property.verdict == Verdict::Violated)
            .map(|property| property.id)
            .collect();
        assert_eq!(violated, ["M8"], "fixed violates only M8");
    }

    #[test]
    fn fenced_reaches_a_stale_finalizer_and_it_is_lost() {
        let words = shortest_words("fenced", None, "M8 a stale finalizer runs");
        assert_eq!(
            words.last().unwrap(),
            "C1: finalize succeeded(full) lost (finalizer generation 1, row generation 2)"
        );
    }

    /// Every `always` property fails somewhere: M2, M3, M7, M8, M9 (and M4) in a variant, and
    /// M1, M4, M5, M6 under a seeded bug in the fenced middleware.
    //= specs/idempotency-middleware.md#M1
    //# The handler runs only for the request that won the atomic claim of its key.
    #[test]
    fn seeded_mutations_violate_exactly_their_property() {
        for (mutation, property, steps) in [
            (Mutation::ClaimOverSuccess, "M1 at-most-once", 7),
            (Mutation::ClaimOverMismatch, "M5 fingerprint", 4),
            (Mutation::ClaimOverLiveLease, "M6 in-flight", 4),
            (Mutation::ReplayUnmarked, "M4 replay-fidelity", 7),
        ] {
            let report = check("fenced", Some(mutation));
            assert!(report.complete);
            for other in report.properties.iter().filter(|other| other.kind == Kind::Always) {
                let expected = if other.name == property { Verdict::Violated } else { Verdict::Holds };
                assert_eq!(other.verdict, expected, "{mutation:?}: {}", other.name);
            }
            assert_eq!(shortest_words("fenced", Some(mutation), property).len(), steps, "{mutation:?}");
        }
    }

    #[test]
    fn bad_bounds_and_variants_name_the_valid_ones() {
        let error = IdempotencyModel::build("nope", &Bounds::resolve(IdempotencyModel::BOUNDS, &[]).unwrap());
        assert!(matches!(error, Err(SpecError::UnknownVariant { .. })));
        let error = Bounds::resolve(IdempotencyModel::BOUNDS, &[("clients".into(), 9)]);
        assert!(matches!(error, Err(SpecError::BoundOutOfRange { .. })));
    }
}
