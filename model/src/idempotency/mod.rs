//! The Idempotency-Key middleware model (specs/idempotency-middleware.md, M1-M11).
//!
//! Clients send one request each with the key `k` (fingerprint A or B); the middleware claims
//! the key in the cache row, runs the handler, captures the body and finalizes the row. The
//! environment advances one clock that decides both the lease and the row's expiry, answers a
//! claim or a finalize with a database error (committed or not), cancels clients at every await
//! point, and, behind the `process_faults` bound, stalls or kills the process. Variants:
//! - `pre-fix`: the middleware before its body-integrity fix — a capped `to_bytes` whose error becomes an
//!   empty body (cached and sent), a finalize error that empties the live body, no drop guard,
//!   one finalize attempt, a finalize conditional on the key only, and row expiry decided by the
//!   hourly cleanup job instead of at read time (the "dead but blocking" key).
//! - `fixed`: the terminal rule, frame capture, the drop guard, five finalize attempts and
//!   read-time expiry, with the finalize still conditional on the key only.
//! - `fenced`: `fixed` plus generation fencing; the lease crossing (a handler slower than its
//!   lease runs twice) is still possible.
//! - `renewed`: `fenced` plus the lease heartbeat: while some finalizer of the claim is pending
//!   (the handler, the capture, the inline finalize or the drop guard's), the lease is renewed
//!   before it lapses; a stalled or dead process stops renewing.
//! - `atomic`: `renewed` for a handler whose effects live in the cache's database: they commit
//!   with the success row in one transaction (one attempt; a client gone before it, a dead
//!   process, a finalize that finds the claim taken over or fails commit nothing), so the
//!   effects are recorded at that commit, not when the handler answers; no drop guard.
//! - `fail-closed`: `renewed` whose claim never takes over a processing row whose lease lapsed:
//!   its outcome is unknown, so the key is held (409 `outcome-unknown`) until the reconciler (the
//!   handler's own "did my effect happen?", or an operator) resolves it once no process works on
//!   that claim any more: the sentinel if its effects happened, `failed` if not.
//!
//! Invariants of the model itself: deterministic (ordered collections only), every action is one
//! actor's verb, and the properties read only the protocol's own state and the record of what
//! happened ([`History`]: what each claim read, each handler's answer, what each first client
//! received, how each claim's finalizing ended), which every variant writes the same way — no
//! field is written only by a mutation.
//!
//! Abstractions: one clock tick is longer than a database round trip and at least as long as
//! the lease (`LEASE_TICKS`); the row lives `ROW_TTL_TICKS`. A handler that keeps running is
//! always allowed to outlive its lease (that is the lease crossing); the clock never reaches the
//! row expiry of a claim whose process is still working on it unless that process stalled — the
//! row's time to live (24 h) is far beyond any handler.

mod encoding;
mod liveness;
mod properties;
mod scale;
mod spec;
#[cfg(test)]
mod tests;
mod transitions;
mod words;

pub use encoding::{result_name, row_json};
pub use liveness::M11_ANSWERED;
pub use properties::*;
pub use spec::*;

use crate::check::Bounds;
use crate::ddb::SeqSet;
use crate::sorted_map::SortedMap;
use std::collections::BTreeSet;

/// Ticks a claim's lease lasts (renewed by the heartbeat in `renewed`).
pub const LEASE_TICKS: u8 = 1;
/// Ticks a row lives from its claim (`expires_at`).
pub const ROW_TTL_TICKS: u8 = 2;
/// The layer's finalize attempts (`finalize_attempts_max`'s default in
/// impl/idempotency/src/layer.rs, which the replay checks it equals).
pub const FINALIZE_ATTEMPTS_MAX: u8 = 5;
/// SQLite's claim loop (`CLAIM_ATTEMPTS_MAX` in impl/idempotency/src/store/mod.rs).
pub const CLAIM_ATTEMPTS_MAX: u8 = 3;

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
    /// The handler's service returned an error instead of a response (`inner.call` is `Err`).
    HandlerError,
}

impl Outcome {
    /// Every outcome, in the order the `outcomes` bound takes them. The first five are the CI
    /// bound: each later one behaves like an earlier one for every property (a body at the cap
    /// like one under it, far over like one byte over, an error after the cap like one before, a
    /// small non-2xx like a large one), so they add states, not verdicts; the test
    /// `all_nine_outcomes_give_the_same_verdicts` checks that.
    pub const ALL: [Outcome; 9] = [
        Outcome::OkUnder,
        Outcome::OkOneOver,
        Outcome::FailFarOver,
        Outcome::OkErrorBeforeCap,
        Outcome::HandlerError,
        Outcome::OkAtCap,
        Outcome::OkFarOver,
        Outcome::OkErrorAfterCap,
        Outcome::FailUnder,
    ];

    /// A 2xx: the handler's effects are committed.
    pub fn is_success(self) -> bool {
        !matches!(
            self,
            Outcome::FailUnder | Outcome::FailFarOver | Outcome::HandlerError
        )
    }

    /// Whether the whole body fits the cache and reads without error.
    pub fn fits(self) -> bool {
        matches!(self, Outcome::OkUnder | Outcome::OkAtCap)
    }

    /// Whether the handler's body has bytes past the cap (a 2xx's or a non-2xx's).
    pub fn has_tail(self) -> bool {
        self.overflows() || self == Outcome::FailFarOver
    }

    /// Whether the fixed capture streams a tail after the finalize (the body passed the cap).
    pub fn overflows(self) -> bool {
        matches!(
            self,
            Outcome::OkOneOver | Outcome::OkFarOver | Outcome::OkErrorAfterCap
        )
    }

    pub fn words(self) -> &'static str {
        match self {
            Outcome::OkUnder => "200, body under the cap",
            Outcome::OkAtCap => "200, body of exactly the cap",
            Outcome::OkOneOver => "200, body one byte over the cap",
            Outcome::OkFarOver => "200, body 3 frames far over the cap",
            Outcome::OkErrorBeforeCap => "200, body fails before the cap",
            Outcome::OkErrorAfterCap => "200, body fails after the cap",
            Outcome::FailUnder => "502, small body",
            Outcome::FailFarOver => "502, body far over the cap",
            Outcome::HandlerError => "an error instead of a response",
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
    pub fn words(self) -> &'static str {
        match self {
            Write::Succeeded(Stored::Full) => "succeeded(full)",
            Write::Succeeded(Stored::Sentinel) => "succeeded(too_large)",
            Write::Succeeded(Stored::Empty) => "succeeded(full) with an EMPTY body",
            Write::Failed => "failed",
        }
    }
}

/// Which parts of its handler's body a first client received, as the steps that put them on the
/// wire sent them: the frames up to the cap (with the response head; for a body that ends
/// within the cap, all of it) and the frames past the cap (the over-cap tail, streamed after the
/// finalize, or sent at once by a layer that reads the whole body). The properties compare it
/// with the handler's outcome ([`Received::exactly`]), never with what the layer meant to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Received {
    pub head: bool,
    pub tail: bool,
}

impl Received {
    /// Nothing of the handler's body: an empty body stood in for it.
    pub const NOTHING: Received = Received {
        head: false,
        tail: false,
    };

    /// Exactly the handler's frames, computed from its outcome alone: every part its body has.
    pub fn exactly(outcome: Outcome) -> Received {
        Received {
            head: true,
            tail: outcome.has_tail(),
        }
    }

    /// The handler's frames up to the cap, nothing past it yet.
    pub const HEAD: Received = Received {
        head: true,
        tail: false,
    };
}

/// What a claim found in the row, decided from the row and the clock alone (the same in every
/// variant; the variant decides what to do about it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seen {
    Absent,
    /// Past its `expires_at`: free whatever it holds.
    Expired,
    /// Live, with another fingerprint.
    OtherFingerprint,
    /// Processing under a live lease.
    LiveLease,
    /// Processing, its lease lapsed (in `fail-closed`: its outcome is unknown).
    LeaseLapsed,
    Failed,
    Succeeded,
}

impl Seen {
    /// What the claim statement takes over (the `WHERE` of the claim).
    pub fn claimable(self) -> bool {
        matches!(
            self,
            Seen::Absent | Seen::Expired | Seen::LeaseLapsed | Seen::Failed
        )
    }
}

/// What a client ended with. Refusals carry whether the row they were decided on had expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    Fresh {
        success: bool,
        received: Received,
    },
    Replay {
        stored: Stored,
        marked: bool,
        origin: u8,
        row_expired: bool,
    },
    /// 409 in flight.
    Conflict {
        row_expired: bool,
    },
    /// 422 fingerprint mismatch.
    Mismatch {
        row_expired: bool,
    },
    /// 503: the claim answered with a database error, so the handler did not run; or (`atomic`)
    /// the commit of the handler's effects did not happen or its outcome is unknown.
    Unavailable,
    /// 409 `outcome-unknown` (`fail-closed`): a processing row whose lease lapsed.
    OutcomeUnknown {
        row_expired: bool,
    },
}

/// How a claim's finalizing ended: the layer's own events and the environment's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ending {
    /// `idempotency.finalize_applied` (or a committed attempt the layer heard an error for).
    Applied,
    /// `idempotency.finalize_lost`: no row matched.
    Lost,
    /// `idempotency.finalize_unknown`: every attempt answered an error.
    Unknown,
    /// The client went away before a non-2xx was finalized (no guard covers a non-2xx).
    Cancelled,
    /// The process died.
    Died,
    /// The reconciler resolved the claim's unknown outcome (`fail-closed`).
    Reconciled,
}

/// Where a client's request is. Every variant but `Ready`, `Guarding`, `Done` and `Gone` is an
/// await point at which the client may cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Ready,
    /// Sent; the claim statement is in flight (`attempt` 0-based: SQLite's loop).
    Claiming {
        attempt: u8,
    },
    /// SQLite: the claim took nothing; the middleware reads the row to say why.
    Reading {
        attempt: u8,
    },
    /// Claimed at `generation`; the handler runs.
    Running {
        generation: u8,
    },
    /// The handler answered; the middleware reads the body.
    Capturing {
        generation: u8,
        outcome: Outcome,
    },
    /// A finalize is in flight; `attempts` made before this one. `received`: what the client
    /// will have been sent with the response head.
    Finalizing {
        generation: u8,
        outcome: Outcome,
        write: Write,
        received: Received,
        attempts: u8,
    },
    /// The response was returned with `received`; its over-cap tail is still streaming.
    Streaming {
        generation: u8,
        received: Received,
    },
    /// The client went away after a 2xx; the drop guard's finalize is in flight.
    Guarding {
        generation: u8,
        attempts: u8,
    },
    Done(Answer),
    /// The client went away; nothing of it is pending.
    Gone,
}

impl Stage {
    /// The claim this client's process still works on: a handler, a capture or a finalizer.
    pub fn working_on(self) -> Option<u8> {
        match self {
            Stage::Running { generation }
            | Stage::Capturing { generation, .. }
            | Stage::Finalizing { generation, .. }
            | Stage::Guarding { generation, .. } => Some(generation),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowStatus {
    Processing,
    /// Written by the finalizer of generation `origin`.
    Succeeded {
        stored: Stored,
        origin: u8,
    },
    Failed {
        origin: u8,
    },
}

/// The cache row of key `k`. Times are clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row {
    pub fingerprint: Fingerprint,
    pub generation: u8,
    pub status: RowStatus,
    pub lease_expires_at: u8,
    pub expires_at: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Client {
    pub fingerprint: Fingerprint,
    pub stage: Stage,
    /// The process stalled longer than the lease while this request was in it: its heartbeat
    /// missed the renewal.
    pub stalled: bool,
}

/// What happened, as the protocol's steps record it in every variant. Keyed by generation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct History {
    /// What each claim that took the key read in the row (the row it took over).
    pub claimed_over: SortedMap<u8, Seen>,
    /// The fingerprint each generation's handler ran with.
    pub ran_with: SortedMap<u8, Fingerprint>,
    /// How each generation's handler answered.
    pub handler: SortedMap<u8, Outcome>,
    /// The generations whose handler's effects committed: when the handler answers a 2xx, or
    /// (`atomic`) when the transaction carrying them and the success row commits.
    pub effects: SeqSet,
    /// What each generation's first client received, once its response ended.
    pub delivered: SortedMap<u8, Received>,
    /// The success bodies each generation wrote to the table (a replay serves one of them).
    pub written: BTreeSet<(u8, Stored)>,
    /// Finalize statements of each generation (inline and the drop guard's) answered an error.
    pub finalize_errors: SortedMap<u8, u8>,
    /// How each claim's finalizing ended (inline or through the drop guard).
    pub ended: SortedMap<u8, Ending>,
    /// The generation whose claim began the key's current lifetime (took an absent or expired row).
    pub lifetime_start: u8,
}

/// Budgets of environment events still available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budget {
    pub ticks: u8,
    pub finalize_faults: u8,
    pub claim_faults: u8,
    pub cancellations: u8,
    pub process_faults: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyState {
    pub now: u8,
    pub clients: Vec<Client>,
    pub row: Option<Row>,
    /// The highest generation ever claimed: the model keeps numbering across the pre-fix purge.
    pub generations: u8,
    pub budget: Budget,
    pub history: History,
}

/// Where the layer awaits when a client cancels, named for a replay against the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AwaitPoint {
    /// The claim statement.
    Claim,
    /// SQLite's read of the row the claim did not take (a replay, 409 or 422 being read).
    ReplayRead,
    /// The handler.
    Handler,
    /// The body capture after the handler's response.
    Capture,
    /// A finalize statement.
    Finalize,
    /// The over-cap tail streaming to the client.
    Tail,
}

impl Stage {
    /// The await point a client at this stage is parked at, if any.
    pub fn await_point(self) -> Option<AwaitPoint> {
        match self {
            Stage::Claiming { .. } => Some(AwaitPoint::Claim),
            Stage::Reading { .. } => Some(AwaitPoint::ReplayRead),
            Stage::Running { .. } => Some(AwaitPoint::Handler),
            Stage::Capturing { .. } => Some(AwaitPoint::Capture),
            Stage::Finalizing { .. } => Some(AwaitPoint::Finalize),
            Stage::Streaming { .. } => Some(AwaitPoint::Tail),
            _ => None,
        }
    }
}

/// What one database statement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DbResult {
    /// The conditional update matched the row.
    Matched,
    /// It matched no row.
    NoRowMatched,
    /// An error answered it; `committed` says whether the write happened anyway.
    Error { committed: bool },
}

/// One actor's verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    ClientSends {
        client: usize,
        fingerprint: Fingerprint,
    },
    /// The claim statement (PostgreSQL: with the read of the row it found).
    MiddlewareClaims {
        client: usize,
    },
    /// The claim statement answered a database error: 503.
    MiddlewareClaimFails {
        client: usize,
        committed: bool,
    },
    /// SQLite: the second statement, reading the row the claim did not take.
    MiddlewareReadsRow {
        client: usize,
    },
    HandlerResponds {
        client: usize,
        outcome: Outcome,
    },
    MiddlewareCaptures {
        client: usize,
    },
    MiddlewareFinalizes {
        client: usize,
        result: DbResult,
    },
    TailStreams {
        client: usize,
    },
    /// The client drops the response future at the await point `at`; an in-flight finalize
    /// statement may still commit.
    ClientCancels {
        client: usize,
        at: AwaitPoint,
        in_flight_commits: bool,
    },
    DropGuardFinalizes {
        client: usize,
        result: DbResult,
    },
    /// One clock tick; in `renewed` the heartbeats of live claims renew their leases within it.
    ClockTicks,
    /// Pre-fix only: the hourly cleanup deletes the expired row.
    CleanupPurges,
    /// The process freezes longer than the lease while the handler runs: no renewal.
    ProcessStalls {
        client: usize,
    },
    /// The process dies: the request, its finalizers and its heartbeat are gone.
    ProcessDies {
        client: usize,
    },
    /// `fail-closed`: the reconciler answers whether the effects of the row's claim happened
    /// (truthfully: its check reads the effect's own system) and resolves the row.
    ReconcilerResolves {
        applied: bool,
    },
}

/// A seeded bug in one protocol step of the `renewed` middleware, for tests that show a
/// property fails by what is observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// The claim condition also takes over a succeeded row (M1).
    ClaimTakesSucceeded,
    /// The claim condition does not compare fingerprints (M5).
    ClaimIgnoresFingerprint,
    /// The claim condition ignores the lease (M6).
    ClaimIgnoresLease,
    /// A replay is served without the replay marker (M4).
    ReplayUnmarked,
    /// The capture stores the first cap bytes of an over-cap body as a full body (M2).
    CaptureTruncates,
    /// A 2xx whose body fails is finalized `failed` (M3's "never failed").
    BodyErrorFinalizesFailed,
    /// No drop guard (M3's "never left processing").
    NoDropGuard,
    /// A non-2xx is cached as a success (M9).
    CacheNonSuccess,
    /// The non-2xx arm returns without finalizing (M9's "recorded failed").
    NonSuccessNotFinalized,
    /// The finalize is conditional on the key only (M8).
    FinalizeUnfenced,
    /// Expiry is left to the cleanup job (M10).
    ExpiryByCleanupOnly,
    /// The first client gets an empty body when the finalize ends unknown (M7).
    UnknownFinalizeEmptiesBody,
    /// The heartbeat renews only while the handler runs, not through the capture and the
    /// finalizers (M1).
    HeartbeatStopsAtResponse,
    /// The response head of an over-cap body goes out with an empty body; the tail follows (M7).
    OverCapLiveEmptied,
    /// A sentinel row is replayed as if it held the full body (M4).
    SentinelReplayedFull,
    /// The finalize gives up after its first error instead of its attempts (M3).
    FinalizeGivesUpEarly,
    /// `atomic`: the handler's effects commit when it answers, apart from the finalize (M1).
    AtomicEffectsCommitAtResponse,
    /// `fail-closed`: the reconciler resolves a claim whose process still works on it (M1).
    ReconcilerDoesNotWait,
    /// The heartbeat is a task of its own that only a finalize stops: a request cancelled before
    /// its finalize (a cancelled handler, which no drop guard covers) leaves it renewing the
    /// claim forever, so the key is never released (M11).
    HeartbeatDetached,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    PreFix,
    Fixed,
    Fenced,
    Renewed,
    Atomic,
    FailClosed,
}

pub struct IdempotencyModel {
    pub(crate) variant: Variant,
    variant_name: &'static str,
    bounds: Bounds,
    clients: usize,
    fingerprints: Vec<Fingerprint>,
    outcomes: Vec<Outcome>,
    /// SQLite's two-statement claim instead of PostgreSQL's one.
    sqlite: bool,
    pub(crate) mutation: Option<Mutation>,
}

impl IdempotencyModel {
    /// Test-only: the same model with a seeded bug.
    pub fn with_mutation(mut self, mutation: Mutation) -> Self {
        self.mutation = Some(mutation);
        self
    }

    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    pub fn attempts(&self) -> u8 {
        match self.variant {
            Variant::PreFix => 1,
            _ => FINALIZE_ATTEMPTS_MAX,
        }
    }

    /// The attempts one finalizer makes before it reports the outcome unknown.
    fn attempts_of_one_finalize(&self) -> u8 {
        if self.mutated(Mutation::FinalizeGivesUpEarly) {
            1
        } else {
            self.attempts()
        }
    }

    fn fenced(&self) -> bool {
        !matches!(self.variant, Variant::PreFix | Variant::Fixed)
            && !self.mutated(Mutation::FinalizeUnfenced)
    }

    /// The drop guard finalizes the sentinel for a client gone after a 2xx. `atomic` has none:
    /// its effects are not committed before its finalize, and roll back without it.
    fn has_guard(&self) -> bool {
        !matches!(self.variant, Variant::PreFix | Variant::Atomic)
            && !self.mutated(Mutation::NoDropGuard)
    }

    pub(crate) fn heartbeat(&self) -> bool {
        matches!(
            self.variant,
            Variant::Renewed | Variant::Atomic | Variant::FailClosed
        )
    }

    /// The handler's effects commit with the success row (`atomic`).
    pub(crate) fn atomic(&self) -> bool {
        self.variant == Variant::Atomic
    }

    /// A processing row whose lease lapsed is held, not taken over (`fail-closed`).
    pub(crate) fn fail_closed(&self) -> bool {
        self.variant == Variant::FailClosed
    }

    /// Expiry decided at read time (#1194's fix) rather than by the cleanup job.
    fn read_time_expiry(&self) -> bool {
        self.variant != Variant::PreFix && !self.mutated(Mutation::ExpiryByCleanupOnly)
    }

    /// What a claim at `now` finds, whatever the variant does about it.
    pub fn seen(row: Option<&Row>, fingerprint: Fingerprint, now: u8) -> Seen {
        let Some(row) = row else { return Seen::Absent };
        if row.expires_at <= now {
            return Seen::Expired;
        }
        if row.fingerprint != fingerprint {
            return Seen::OtherFingerprint;
        }
        match row.status {
            RowStatus::Processing if row.lease_expires_at > now => Seen::LiveLease,
            RowStatus::Processing => Seen::LeaseLapsed,
            RowStatus::Failed { .. } => Seen::Failed,
            RowStatus::Succeeded { .. } => Seen::Succeeded,
        }
    }

    /// What the variant's claim statement decides about what it found. Pre-fix reads an expired
    /// row as live (only the cleanup job frees it): the decision is made on what the row holds.
    fn claims(&self, row: Option<&Row>, fingerprint: Fingerprint, now: u8) -> bool {
        let mut seen = Self::seen(row, fingerprint, now);
        if seen == Seen::Expired && !self.read_time_expiry() {
            seen = Self::seen(row, fingerprint, 0);
        }
        match seen {
            Seen::OtherFingerprint => self.mutated(Mutation::ClaimIgnoresFingerprint),
            Seen::LiveLease => self.mutated(Mutation::ClaimIgnoresLease),
            Seen::Succeeded => self.mutated(Mutation::ClaimTakesSucceeded),
            Seen::LeaseLapsed if self.fail_closed() => false,
            other => other.claimable(),
        }
    }

    /// The answer to a claim that took nothing, read from the row (`classify`); `None` when the
    /// row turned out claimable (SQLite claims again).
    fn refusal(&self, row: Option<&Row>, fingerprint: Fingerprint, now: u8) -> Option<Answer> {
        let row_ref = row?;
        let row_expired = row_ref.expires_at <= now;
        let seen = if row_expired && !self.read_time_expiry() {
            Self::seen(row, fingerprint, 0)
        } else {
            Self::seen(row, fingerprint, now)
        };
        match seen {
            Seen::OtherFingerprint => Some(Answer::Mismatch { row_expired }),
            Seen::LiveLease => Some(Answer::Conflict { row_expired }),
            Seen::LeaseLapsed if self.fail_closed() => Some(Answer::OutcomeUnknown { row_expired }),
            Seen::Succeeded => {
                let RowStatus::Succeeded { stored, origin } = row_ref.status else {
                    return None;
                };
                let marked = !self.mutated(Mutation::ReplayUnmarked);
                let stored = if self.mutated(Mutation::SentinelReplayedFull) {
                    Stored::Full
                } else {
                    stored
                };
                Some(Answer::Replay {
                    stored,
                    marked,
                    origin,
                    row_expired,
                })
            }
            _ => None,
        }
    }

    /// Whether a finalize by `generation` applies to the row.
    fn finalize_applies(&self, row: Option<&Row>, generation: u8) -> bool {
        match row {
            None => false,
            Some(row) if self.fenced() => {
                row.generation == generation && row.status == RowStatus::Processing
            }
            Some(_) => true,
        }
    }

    /// What the middleware writes, and sends with the response head, once the body is read.
    fn capture(&self, outcome: Outcome) -> (Write, Received) {
        if !outcome.is_success() {
            let received = match (self.variant, outcome) {
                // Bug c: the non-2xx arm also used the capped to_bytes, empty on error.
                (Variant::PreFix, Outcome::FailFarOver) => Received::NOTHING,
                // Passed through as it is: every frame.
                _ => Received::exactly(outcome),
            };
            let write = if self.mutated(Mutation::CacheNonSuccess) {
                Write::Succeeded(Stored::Full)
            } else {
                Write::Failed
            };
            return (write, received);
        }
        match self.variant {
            Variant::PreFix => match outcome {
                Outcome::OkUnder | Outcome::OkAtCap => {
                    (Write::Succeeded(Stored::Full), Received::exactly(outcome))
                }
                // to_bytes(cap + 1) succeeds on exactly cap + 1 bytes: the sentinel, and every
                // byte sent at once.
                Outcome::OkOneOver => (
                    Write::Succeeded(Stored::Sentinel),
                    Received::exactly(outcome),
                ),
                // Bug a: anything else errs and becomes an empty body, cached and sent.
                _ => (Write::Succeeded(Stored::Empty), Received::NOTHING),
            },
            _ => match outcome {
                Outcome::OkUnder | Outcome::OkAtCap => {
                    (Write::Succeeded(Stored::Full), Received::exactly(outcome))
                }
                Outcome::OkErrorBeforeCap | Outcome::OkErrorAfterCap
                    if self.mutated(Mutation::BodyErrorFinalizesFailed) =>
                {
                    (Write::Failed, Received::exactly(outcome))
                }
                Outcome::OkOneOver | Outcome::OkFarOver
                    if self.mutated(Mutation::CaptureTruncates) =>
                {
                    (Write::Succeeded(Stored::Full), Received::HEAD)
                }
                // The frames up to the cap go with the head; the tail streams after the finalize.
                _ if outcome.overflows() && self.mutated(Mutation::OverCapLiveEmptied) => {
                    (Write::Succeeded(Stored::Sentinel), Received::NOTHING)
                }
                _ if outcome.overflows() => (Write::Succeeded(Stored::Sentinel), Received::HEAD),
                // A body that failed before the cap: its frames and its error, all sent.
                _ => (
                    Write::Succeeded(Stored::Sentinel),
                    Received::exactly(outcome),
                ),
            },
        }
    }

    fn apply_write(state: &mut IdempotencyState, generation: u8, write: Write) {
        let Some(row) = state.row.as_mut() else {
            return;
        };
        if let Write::Succeeded(stored) = write {
            state.history.written.insert((generation, stored));
        }
        row.status = match write {
            Write::Succeeded(stored) => RowStatus::Succeeded {
                stored,
                origin: generation,
            },
            Write::Failed => RowStatus::Failed { origin: generation },
        };
    }

    /// The client's stage after its inline finalize is done with (applied, lost or unknown).
    fn after_finalize(
        &self,
        state: &mut IdempotencyState,
        client: usize,
        generation: u8,
        outcome: Outcome,
        received: Received,
        ending: Ending,
    ) {
        state.history.ended.insert(generation, ending);
        let received = if ending == Ending::Unknown
            && outcome.is_success()
            // Bug b (pre-fix): the live body is swapped for an empty one.
            && (self.variant == Variant::PreFix || self.mutated(Mutation::UnknownFinalizeEmptiesBody))
        {
            Received::NOTHING
        } else {
            received
        };
        state.clients[client].stage =
            if self.variant != Variant::PreFix && outcome.is_success() && outcome.overflows() {
                Stage::Streaming {
                    generation,
                    received,
                }
            } else {
                state.history.delivered.insert(generation, received);
                Stage::Done(Answer::Fresh {
                    success: outcome.is_success(),
                    received,
                })
            };
    }

    /// The claim statement took the key for `client`.
    fn grant(state: &mut IdempotencyState, client: usize) {
        let fingerprint = state.clients[client].fingerprint;
        let now = state.now;
        let seen = Self::seen(state.row.as_ref(), fingerprint, now);
        state.generations += 1;
        let generation = state.generations;
        if matches!(seen, Seen::Absent | Seen::Expired) {
            state.history.lifetime_start = generation;
        }
        state.history.claimed_over.insert(generation, seen);
        state.row = Some(Row {
            fingerprint,
            generation,
            status: RowStatus::Processing,
            lease_expires_at: now + LEASE_TICKS,
            expires_at: now + ROW_TTL_TICKS,
        });
    }

    fn claim(&self, state: &mut IdempotencyState, client: usize) {
        let fingerprint = state.clients[client].fingerprint;
        let Stage::Claiming { attempt } = state.clients[client].stage else {
            return;
        };
        if self.claims(state.row.as_ref(), fingerprint, state.now) {
            Self::grant(state, client);
            state
                .history
                .ran_with
                .insert(state.generations, fingerprint);
            state.clients[client].stage = Stage::Running {
                generation: state.generations,
            };
            return;
        }
        if self.sqlite {
            state.clients[client].stage = Stage::Reading { attempt };
            return;
        }
        // PostgreSQL reads the row the claim found in the same statement.
        let answer = self
            .refusal(state.row.as_ref(), fingerprint, state.now)
            .unwrap_or(Answer::Conflict { row_expired: false });
        state.clients[client].stage = Stage::Done(answer);
    }

    fn read_row(&self, state: &mut IdempotencyState, client: usize) {
        let fingerprint = state.clients[client].fingerprint;
        let Stage::Reading { attempt } = state.clients[client].stage else {
            return;
        };
        state.clients[client].stage = match self.refusal(state.row.as_ref(), fingerprint, state.now)
        {
            Some(answer) => Stage::Done(answer),
            None if attempt + 1 < CLAIM_ATTEMPTS_MAX => Stage::Claiming {
                attempt: attempt + 1,
            },
            // A row that flips between claimable and not three times: reported in flight.
            None => Stage::Done(Answer::Conflict {
                row_expired: state.row.is_some_and(|row| row.expires_at <= state.now),
            }),
        };
    }

    /// The atomic finalize (`atomic`, a 2xx): one attempt that commits the success row and the
    /// handler's effects together, or neither. The client gets the response only once both
    /// committed; otherwise 503 (retry with the key).
    fn finalize_atomic(
        &self,
        mut state: IdempotencyState,
        client: usize,
        result: DbResult,
    ) -> Option<IdempotencyState> {
        let Stage::Finalizing {
            generation,
            outcome,
            write,
            received,
            ..
        } = state.clients[client].stage
        else {
            return None;
        };
        let applies = self.finalize_applies(state.row.as_ref(), generation);
        let committed = match result {
            DbResult::Matched | DbResult::NoRowMatched => {
                if (result == DbResult::Matched) != applies {
                    return None;
                }
                applies
            }
            DbResult::Error { committed } => {
                state.budget.finalize_faults -= 1;
                *state
                    .history
                    .finalize_errors
                    .get_or_insert_with(generation, || 0) += 1;
                committed && applies
            }
        };
        if committed {
            Self::apply_write(&mut state, generation, write);
            state.history.effects.insert(generation);
        }
        match result {
            DbResult::Matched => self.after_finalize(
                &mut state,
                client,
                generation,
                outcome,
                received,
                Ending::Applied,
            ),
            DbResult::NoRowMatched => {
                state.history.ended.insert(generation, Ending::Lost);
                state.clients[client].stage = Stage::Done(Answer::Unavailable);
            }
            DbResult::Error { .. } => {
                state.history.ended.insert(generation, Ending::Unknown);
                state.clients[client].stage = Stage::Done(Answer::Unavailable);
            }
        }
        Some(state)
    }

    /// Whether the reconciler may resolve the row (`fail-closed`): processing, its lease lapsed,
    /// not expired, and no process works on its claim any more (a stalled one may still commit,
    /// so the answer would not be final: the reconciler's contract waits for the attempt to be over).
    fn reconcilable(&self, state: &IdempotencyState) -> bool {
        let Some(row) = state.row else { return false };
        self.fail_closed()
            && row.status == RowStatus::Processing
            && row.lease_expires_at <= state.now
            && row.expires_at > state.now
            && (self.mutated(Mutation::ReconcilerDoesNotWait)
                || state
                    .clients
                    .iter()
                    .all(|client| client.stage.working_on() != Some(row.generation)))
    }

    /// Whether the clock may tick: never to the row expiry of a claim whose process is still
    /// working on it, unless the process stalled (a handler never outlives the 24 h row).
    fn may_tick(&self, state: &IdempotencyState) -> bool {
        state.budget.ticks > 0 && !self.clock_held(state)
    }

    /// The clock may not tick to the row expiry of a claim a process still works on.
    fn clock_held(&self, state: &IdempotencyState) -> bool {
        let Some(row) = state.row else { return false };
        let protected = row.status == RowStatus::Processing
            && (state.clients.iter().any(|client| {
                client.stage.working_on() == Some(row.generation) && !client.stalled
            }) || self.detached_heartbeat_renews(state, row.generation));
        protected && row.expires_at <= state.now + 1
    }

    /// Under [`Mutation::HeartbeatDetached`]: the claim of `generation` was taken by a request
    /// (its heartbeat started) and no finalize or death has ended it, so its heartbeat still runs.
    fn detached_heartbeat_renews(&self, state: &IdempotencyState, generation: u8) -> bool {
        self.mutated(Mutation::HeartbeatDetached)
            && state.history.ran_with.contains_key(&generation)
            && !state.history.ended.contains_key(&generation)
    }

    /// The heartbeat renews the row's lease within the tick: conditional on key, generation
    /// and processing, for a claim some finalizer of which is pending in a process that is not
    /// stalled.
    fn renew_leases(&self, state: &mut IdempotencyState) {
        if !self.heartbeat() {
            return;
        }
        let now = state.now;
        let Some(row) = state.row.as_mut() else {
            return;
        };
        let handler_only = self.mutated(Mutation::HeartbeatStopsAtResponse);
        let renewing = row.status == RowStatus::Processing
            && state.clients.iter().any(|client| {
                let renews = if handler_only {
                    client.stage
                        == Stage::Running {
                            generation: row.generation,
                        }
                } else {
                    client.stage.working_on() == Some(row.generation)
                };
                renews && !client.stalled
            });
        let (generation, processing) = (row.generation, row.status == RowStatus::Processing);
        let renewing =
            renewing || (processing && self.detached_heartbeat_renews(state, generation));
        let Some(row) = state.row.as_mut() else {
            return;
        };
        if renewing {
            row.lease_expires_at = now + LEASE_TICKS;
        }
    }

    /// The actions of one finalizer (inline or guard) of `generation`.
    fn finalize_results(&self, state: &IdempotencyState, generation: u8) -> Vec<DbResult> {
        let mut results = vec![if self.finalize_applies(state.row.as_ref(), generation) {
            DbResult::Matched
        } else {
            DbResult::NoRowMatched
        }];
        if state.budget.finalize_faults > 0 {
            results.push(DbResult::Error { committed: true });
            results.push(DbResult::Error { committed: false });
        }
        results
    }
}

impl stateright::Model for IdempotencyModel {
    type State = IdempotencyState;
    type Action = Action;

    fn init_states(&self) -> Vec<IdempotencyState> {
        let budget = Budget {
            ticks: self.bounds.get("ticks") as u8,
            finalize_faults: self.bounds.get("finalize_faults") as u8,
            claim_faults: self.bounds.get("claim_faults") as u8,
            cancellations: self.bounds.get("cancellations") as u8,
            process_faults: self.bounds.get("process_faults") as u8,
        };
        let clients = vec![
            Client {
                fingerprint: Fingerprint::A,
                stage: Stage::Ready,
                stalled: false
            };
            self.clients
        ];
        vec![IdempotencyState {
            now: 0,
            clients,
            row: None,
            generations: 0,
            budget,
            history: History::default(),
        }]
    }

    fn actions(&self, state: &IdempotencyState, actions: &mut Vec<Action>) {
        for (client, entry) in state.clients.iter().enumerate() {
            match entry.stage {
                Stage::Ready => {
                    for fingerprint in &self.fingerprints {
                        actions.push(Action::ClientSends {
                            client,
                            fingerprint: *fingerprint,
                        });
                    }
                }
                Stage::Claiming { .. } => {
                    actions.push(Action::MiddlewareClaims { client });
                    if state.budget.claim_faults > 0 {
                        actions.push(Action::MiddlewareClaimFails {
                            client,
                            committed: true,
                        });
                        actions.push(Action::MiddlewareClaimFails {
                            client,
                            committed: false,
                        });
                    }
                }
                Stage::Reading { .. } => actions.push(Action::MiddlewareReadsRow { client }),
                Stage::Running { .. } => {
                    for outcome in &self.outcomes {
                        actions.push(Action::HandlerResponds {
                            client,
                            outcome: *outcome,
                        });
                    }
                }
                Stage::Capturing { .. } => actions.push(Action::MiddlewareCaptures { client }),
                Stage::Finalizing { generation, .. } => {
                    for result in self.finalize_results(state, generation) {
                        actions.push(Action::MiddlewareFinalizes { client, result });
                    }
                }
                Stage::Streaming { .. } => actions.push(Action::TailStreams { client }),
                Stage::Guarding { generation, .. } => {
                    for result in self.finalize_results(state, generation) {
                        actions.push(Action::DropGuardFinalizes { client, result });
                    }
                }
                Stage::Done(_) | Stage::Gone => {}
            }
            if let Some(at) = entry
                .stage
                .await_point()
                .filter(|_| state.budget.cancellations > 0)
            {
                actions.push(Action::ClientCancels {
                    client,
                    at,
                    in_flight_commits: false,
                });
                if at == AwaitPoint::Finalize {
                    actions.push(Action::ClientCancels {
                        client,
                        at,
                        in_flight_commits: true,
                    });
                }
            }
            if state.budget.process_faults > 0 {
                if self.heartbeat()
                    && matches!(entry.stage, Stage::Running { .. })
                    && !entry.stalled
                {
                    actions.push(Action::ProcessStalls { client });
                }
                if entry.stage.working_on().is_some() {
                    actions.push(Action::ProcessDies { client });
                }
            }
        }
        if self.may_tick(state) {
            actions.push(Action::ClockTicks);
        }
        if self.reconcilable(state) {
            let applied = state
                .row
                .is_some_and(|row| state.history.effects.contains(&row.generation));
            actions.push(Action::ReconcilerResolves { applied });
        }
        if !self.read_time_expiry() && state.row.is_some_and(|row| row.expires_at <= state.now) {
            actions.push(Action::CleanupPurges);
        }
    }

    fn next_state(&self, last: &IdempotencyState, action: Action) -> Option<IdempotencyState> {
        self.step(last.clone(), action)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        use crate::check::{ModelSpec, PropertyDef};
        self.property_defs()
            .iter()
            .map(PropertyDef::to_stateright)
            .collect()
    }

    // The Explorer's vocabulary is the CLI's (crate::view): protocol words, actors from 1.
    fn format_action(&self, action: &Action) -> String {
        crate::view::action_words(action)
    }

    fn format_step(&self, last_state: &IdempotencyState, action: Action) -> Option<String> {
        crate::view::step_outcome(self, last_state, action)
    }

    fn as_svg(&self, path: stateright::Path<IdempotencyState, Action>) -> Option<String> {
        Some(crate::view::explorer_svg(self, &path.into_vec()))
    }
}
