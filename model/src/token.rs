//! Tokened DynamoDB writes retried under unknown outcomes (requirements T1-T6, spec:
//! `specs/tokened-writes.md`).
//!
//! What is modelled: clients that each make one logical write with one of the retry patterns of
//! the reliable-writes document (UpdateItem ADD on a counter, PutItem of a fixed item, a
//! conditional create with `attribute_not_exists`, TransactWriteItems without a token,
//! TransactWriteItems with a token). A client sends its request, may stop waiting for the answer
//! at any moment (timeout, connection loss) and then retries; the server may have committed the
//! request anyway. That is the unknown outcome the whole model is about.
//!
//! Abstractions, each chosen to keep the state small and canonical:
//! - Time is a clock of whole ticks; a token stays live while `now < completed_at + window`. A
//!   tick is longer than any request lifetime and any client timeout (a signed DynamoDB request
//!   expires long before the 10-minute window does), so when the clock ticks every unprocessed
//!   request is dropped and every client still waiting gives up. Hence a request is processed in
//!   the tick it was sent, and `sent_at` of an attempt is also its processing time.
//! - The table does not hold numbers: it counts, per client and per item of that client's write,
//!   how many times the write was applied (a balance of `5 * count`). That count is exactly what
//!   T1 and T3 talk about. The fixed-put item remembers its last writer; the conditionally created
//!   item remembers its owner (the operation ID the seed recommends storing on the item).
//! - Every transaction writes the same [`ACCOUNTS`] accounts, so any two transactions conflict
//!   while one is running. Single-item writes use items of their own.
//! - Two server hosts decide the token window each on its own wall clock: `H1` keeps true time,
//!   `H2` runs `skew` ticks ahead. A request is routed to a host when it is sent; with no skew the
//!   hosts are indistinguishable and only `H1` is used. A token's completion time is the
//!   committing host's clock reading.
//! - Bad input and damaged state: a tokened client may generate a token over
//!   [`TOKEN_CHARS_MAX`] characters (bound `long_tokens`), and the environment may damage a
//!   completed record's timestamp (bound `damaged_records`); the server refuses both (fails
//!   closed) and the clock never deletes a damaged record. With `shared_token` two tokened
//!   clients (two intents) carry one token.
//! - A transaction runs in two server steps: `ServerBegins` (token check, token recorded as
//!   running, accounts locked) and `ServerCommits` (all items and the token's completion time in
//!   one atomic step). The gap is what makes TransactionInProgress and TransactionConflict
//!   reachable; the clock does not tick while a transaction runs.
//! - A token record is written as running when its transaction begins and completed when it
//!   commits; a transaction that began always commits, and a request refused before beginning
//!   leaves no record, so only committed work leaves a completed token. An expired record behaves
//!   as absent and is deleted when the clock passes it (semantic expiry, so deleting it changes
//!   nothing).
//! - Clients are interchangeable, so initial states assign patterns in non-decreasing order
//!   (symmetry reduction by construction), and all clients send before the first tick: a client
//!   starting later behaves the same relative to its own token, only with less clock left.
//!
//! Invariants (the properties, checked exhaustively): T1 a transaction intent is applied at most
//! once and a success answer means it was applied; T2 a request meeting a live token of other
//! parameters is answered IdempotentParameterMismatch and applies nothing; T3 no state and no
//! reconciliation read shows part of a transaction; T4 the answer and effect of an identical retry
//! after a lost, committed response follow from what the server met (a live identical token or
//! not, the item present or not) and are observed on the table, not looked up in a table of
//! patterns; T5 an over-long token or a damaged record is refused and applies nothing. Every
//! property reads `applied` as observed on the client's items and what the request met as the
//! token record the server read (`met`, beside the answer), classified by the properties
//! themselves (`observed.rs`), never by the classifier the server decides with.
//!
//! Variants are the team's choice for the transaction: `tokened` (token, identical retries inside
//! the window), `tokenless` (no token) and `late-retry` (token, retries only once the window has
//! passed). [`Mutation`]s break one server or network rule each, so that every property is seen
//! to fail somewhere.

mod encoding;
mod liveness;
mod observed;
mod scale;
mod words;

use crate::check::{BoundSpec, Bounds, Kind, ModelSpec, PropertyDef, SpecError, Verdict};
use stateright::{Model, Property};
use std::collections::BTreeMap;

/// The accounts every transaction writes (A, B). Two are the fewest that can show a partial
/// commit; a third adds states without adding a case: all accounts get the same effect.
pub const ACCOUNTS: u8 = 2;

/// A server host: `H1` keeps true time, `H2` reads `now + skew`.
pub type Host = u8;

/// The longest client request token the API accepts.
pub const TOKEN_CHARS_MAX: usize = 36;

/// Index of a client; printed 1-based as `C1`, `C2`, and its token as `t1`, `t2`.
pub type ClientId = u8;

/// The write pattern a client uses for its one logical write: the rows of the retry table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// TransactWriteItems `ADD balance 5` on every account, no token: the whole transaction can
    /// execute again.
    TransactWithoutToken,
    /// The same transaction with the client's token: replayed, not re-applied, inside the window.
    TransactWithToken,
    /// UpdateItem `ADD counter 5`: not idempotent, a retry re-applies the delta.
    AddCounter,
    /// PutItem of the client's complete fixed profile item: a retry converges to the same item.
    PutFixedProfile,
    /// PutItem of the order item with `attribute_not_exists`: happens at most once, but the retry
    /// of a committed create reports a condition failure.
    CreateOrderIfAbsent,
}

impl Pattern {
    pub fn is_transaction(self) -> bool {
        matches!(
            self,
            Pattern::TransactWithoutToken | Pattern::TransactWithToken
        )
    }

    pub fn has_token(self) -> bool {
        self == Pattern::TransactWithToken
    }
}

/// The answer the server gives to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    Success,
    ConditionalCheckFailed,
    IdempotentParameterMismatch,
    TransactionInProgress,
    TransactionConflict,
    /// The request is malformed (a token over [`TOKEN_CHARS_MAX`] characters): nothing runs.
    ValidationError,
    /// The token's record has no valid timestamp: the server fails closed.
    InternalServerError,
}

impl Answer {
    /// Answers after which the same request may simply be sent again.
    fn is_retryable(self) -> bool {
        // An internal server error is an unknown outcome to the client: it resends.
        matches!(
            self,
            Answer::TransactionInProgress
                | Answer::TransactionConflict
                | Answer::InternalServerError
        )
    }
}

/// The server's classification of a request's token record ([`TokenModel::token_seen`]): what
/// the server decides with. The properties never read it; they classify the record the server
/// read (`met`) on their own (`observed.rs`), so a wrong classifier shows as a wrong answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenSeen {
    /// No record, or an expired one: the token is new.
    Absent,
    LiveSameParameters,
    LiveOtherParameters,
    RunningSameParameters,
    RunningOtherParameters,
    /// The token is longer than [`TOKEN_CHARS_MAX`]: bad input, no record is looked up.
    Malformed,
    /// A record whose creation time is not a valid timestamp.
    InvalidRecord,
}

/// The server's side of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerSide {
    /// The request is on its way and not yet taken up.
    Pending,
    /// A transaction was accepted and holds its accounts; `items_applied` is more than zero only
    /// under [`Mutation::CommitItemsOneByOne`].
    Running {
        items_applied: u8,
        met: Option<TokenRecord>,
    },
    /// Answered: `applied` says whether this request changed the table (observed on the
    /// client's items, not declared by the server's decision); `met` is the record stored under
    /// the request's token when the server took it up (`None`: no record, or no token), read
    /// from the table apart from the decision.
    Done {
        answer: Answer,
        applied: bool,
        met: Option<TokenRecord>,
    },
    /// The request outlived its lifetime and was never processed.
    Dropped,
}

/// The client's side of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientSide {
    Waiting,
    Delivered,
    /// The client stopped waiting: whatever the server did, the client never hears of it.
    GaveUp,
}

/// One network attempt of a client's write.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attempt {
    /// The client rebuilt the request parameters (`ADD balance 6`) instead of resending the
    /// stored payload: the mistake the seed warns about and T2 guards against.
    pub rebuilt: bool,
    pub sent_at: u8,
    /// The server host the load balancer routed the request to; it decides the token window on
    /// its own wall clock.
    pub host: Host,
    pub server: ServerSide,
    pub client: ClientSide,
}

impl Attempt {
    fn applied(&self) -> bool {
        matches!(self.server, ServerSide::Done { applied: true, .. })
    }

    fn answer(&self) -> Option<Answer> {
        match self.server {
            ServerSide::Done { answer, .. } => Some(answer),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    pub pattern: Pattern,
    /// The client generated a token longer than [`TOKEN_CHARS_MAX`] (and persisted it: every
    /// attempt carries it).
    pub token_too_long: bool,
    pub attempts: Vec<Attempt>,
    /// What a reconciliation read showed: this client's applications per item of its write.
    pub reconciled: Option<Vec<u8>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenPhase {
    Running,
    Completed {
        at: u8,
    },
    /// The record's creation time does not parse (written by another binary, or damaged): no
    /// window can be decided, so it is neither live nor expired, and never deleted by the clock.
    InvalidTimestamp,
}

/// The server's record of a client's token: the fingerprint (original or rebuilt parameters)
/// and whether its transaction is still running or completed at some tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenRecord {
    pub rebuilt: bool,
    pub phase: TokenPhase,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Table {
    /// `applications[client][item]`: how often the client's write was applied to each item of it
    /// (one item for single-item writes, [`ACCOUNTS`] accounts for transactions).
    pub applications: Vec<Vec<u8>>,
    /// Who last put the fixed profile item.
    pub profile_holder: Option<ClientId>,
    /// Who created the order item.
    pub order_owner: Option<ClientId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenState {
    pub clients: Vec<Client>,
    pub table: Table,
    /// The server's token records, by the client owning the token.
    pub tokens: BTreeMap<ClientId, TokenRecord>,
    pub now: u8,
    /// Record damages the environment may still cause.
    pub damages_left: u8,
}

/// Actor + verb. Attempts are 0-based indexes into the client's attempt list.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    ClientSends {
        client: ClientId,
        host: Host,
        token_too_long: bool,
    },
    ClientRetries {
        client: ClientId,
        rebuilt: bool,
        host: Host,
    },
    ServerBegins {
        client: ClientId,
        attempt: u8,
    },
    ServerCommits {
        client: ClientId,
        attempt: u8,
    },
    ServerReplays {
        client: ClientId,
        attempt: u8,
    },
    ServerRejects {
        client: ClientId,
        attempt: u8,
        answer: Answer,
    },
    ResponseDelivered {
        client: ClientId,
        attempt: u8,
    },
    ResponseLost {
        client: ClientId,
        attempt: u8,
    },
    ClockTicks,
    ClientReads {
        client: ClientId,
    },
    /// The environment damages the creation time of a completed token record.
    RecordLosesTimestamp {
        token: ClientId,
    },
}

/// The team's choice for the transaction, see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Tokened,
    Tokenless,
    LateRetry,
}

/// One deliberately broken rule, to show that a property can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The server keys token records by token alone and treats other parameters as a replay.
    IgnoreFingerprint,
    /// The server's classifier of token records (`token_seen`) compares no fingerprint: a
    /// record of other parameters reads as one of the same. The decision rules are untouched.
    ClassifierIgnoresFingerprint,
    /// The server's classifier reads a completed record as live whatever its age: a token past
    /// its window is replayed. The decision rules are untouched.
    ClassifierIgnoresWindow,
    /// The server makes a transaction's item writes visible one at a time.
    CommitItemsOneByOne,
    /// Internal per-request receipts wrongly replay across new HTTP requests, so a tokenless
    /// retry of an applied write is answered from the receipt instead of executing.
    ReceiptsSpanRequests,
    /// A client timeout cancels the request: the false belief that an error means nothing
    /// happened. No response is ever lost after a commit.
    TimeoutsCancelRequests,
    /// The server cuts an over-long token to the limit and runs the request.
    LongTokenTruncated,
    /// A record without a valid timestamp is read as expired (fails open).
    DamagedRecordReadAsExpired,
    /// A client answered TransactionInProgress resends at once without counting the attempt:
    /// the resend takes the answered attempt's place, so the client never runs out of retries
    /// and never reconciles while the transaction is running (T6).
    RetriesForeverOnInProgress,
}

/// The model's bounds, resolved from [`TokenModel::BOUNDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub clients: u8,
    pub retries: u8,
    pub window: u8,
    pub skew: u8,
    /// Tokened clients share one token (the first tokened client's).
    pub shared_token: bool,
    pub long_tokens: bool,
    pub damaged_records: u8,
    pub ticks: u8,
}

#[derive(Clone, Debug)]
pub struct TokenModel {
    variant: &'static str,
    kind: Variant,
    bounds: Bounds,
    limits: Limits,
    mutation: Option<Mutation>,
}

/// The server's decision for a pending request, computed from the state alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Begin,
    Commit,
    Replay,
    Reject(Answer),
}

impl TokenModel {
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The same model with one rule broken; `None` restores the honest model.
    pub fn with_mutation(mut self, mutation: Option<Mutation>) -> Self {
        self.mutation = mutation;
        self
    }

    /// The patterns a client may use in this variant, in `Pattern` order: the variant decides
    /// the transaction's. The transaction comes first so that C1 is a transaction client in the
    /// first initial state, which is where shortest traces start.
    pub fn patterns(&self) -> [Pattern; 4] {
        let transaction = match self.kind {
            Variant::Tokenless => Pattern::TransactWithoutToken,
            Variant::Tokened | Variant::LateRetry => Pattern::TransactWithToken,
        };
        [
            transaction,
            Pattern::AddCounter,
            Pattern::PutFixedProfile,
            Pattern::CreateOrderIfAbsent,
        ]
    }

    fn item_count(&self, pattern: Pattern) -> usize {
        if pattern.is_transaction() {
            ACCOUNTS as usize
        } else {
            1
        }
    }

    fn is_live(&self, completed_at: u8, now: u8) -> bool {
        now < completed_at + self.limits.window
    }

    /// What `host`'s wall clock reads at true time `now`.
    pub fn host_clock(&self, host: Host, now: u8) -> u8 {
        if host == 0 {
            now
        } else {
            now + self.limits.skew
        }
    }

    /// The hosts a request may be routed to: with no skew they are indistinguishable, so one.
    fn hosts(&self) -> std::ops::RangeInclusive<Host> {
        0..=u8::from(self.limits.skew > 0)
    }

    /// The token a client's transaction carries, named by the client that owns it: its own, or
    /// with `shared_token` the first tokened client's.
    pub fn token_of(&self, state: &TokenState, client: usize) -> ClientId {
        if self.limits.shared_token {
            if let Some(first) = state
                .clients
                .iter()
                .position(|other| other.pattern.has_token())
            {
                return first as ClientId;
            }
        }
        client as ClientId
    }

    /// The server's classifier: what a tokened request's record means to the decision (the
    /// spec's server rules read the record through it).
    fn token_seen(
        &self,
        state: &TokenState,
        client: usize,
        rebuilt: bool,
        host: Host,
    ) -> TokenSeen {
        let clock = self.host_clock(host, state.now);
        if state.clients[client].token_too_long {
            return TokenSeen::Malformed;
        }
        match state.tokens.get(&self.token_of(state, client)) {
            None => TokenSeen::Absent,
            Some(record) => match record.phase {
                TokenPhase::Running if self.same_fingerprint(record, rebuilt) => {
                    TokenSeen::RunningSameParameters
                }
                TokenPhase::Running => TokenSeen::RunningOtherParameters,
                TokenPhase::Completed { at }
                    if !self.is_live(at, clock)
                        && self.mutation != Some(Mutation::ClassifierIgnoresWindow) =>
                {
                    TokenSeen::Absent
                }
                TokenPhase::Completed { .. } if self.same_fingerprint(record, rebuilt) => {
                    TokenSeen::LiveSameParameters
                }
                TokenPhase::Completed { .. } => TokenSeen::LiveOtherParameters,
                TokenPhase::InvalidTimestamp => TokenSeen::InvalidRecord,
            },
        }
    }

    /// Whether a request of these parameters has the record's fingerprint.
    fn same_fingerprint(&self, record: &TokenRecord, rebuilt: bool) -> bool {
        self.mutation == Some(Mutation::ClassifierIgnoresFingerprint) || record.rebuilt == rebuilt
    }

    /// The record stored under the token of client `client`'s request, as the table holds it
    /// when the server takes the request up (`None` for a request without a token): what the
    /// properties classify on their own.
    fn record_met(&self, state: &TokenState, client: usize) -> Option<TokenRecord> {
        if !state.clients[client].pattern.has_token() {
            return None;
        }
        state.tokens.get(&self.token_of(state, client)).copied()
    }

    /// Every transaction writes the same accounts, so one running transaction locks them all.
    fn accounts_locked(state: &TokenState) -> bool {
        state.clients.iter().any(|client| {
            client
                .attempts
                .iter()
                .any(|a| matches!(a.server, ServerSide::Running { .. }))
        })
    }

    /// The server's answer to a pending request (the spec's server rules), with the mutations.
    fn decide(&self, state: &TokenState, client: usize, attempt: usize) -> Decision {
        let owner = &state.clients[client];
        let request = &owner.attempts[attempt];
        let receipt_replay = self.mutation == Some(Mutation::ReceiptsSpanRequests)
            && !owner.pattern.has_token()
            && owner.attempts[..attempt]
                .iter()
                .any(|earlier| earlier.rebuilt == request.rebuilt && earlier.applied());
        if receipt_replay {
            return Decision::Replay;
        }
        let fingerprint_checked = self.mutation != Some(Mutation::IgnoreFingerprint);
        match owner.pattern {
            Pattern::AddCounter | Pattern::PutFixedProfile => Decision::Commit,
            Pattern::CreateOrderIfAbsent if state.table.order_owner.is_some() => {
                Decision::Reject(Answer::ConditionalCheckFailed)
            }
            Pattern::CreateOrderIfAbsent => Decision::Commit,
            Pattern::TransactWithoutToken if Self::accounts_locked(state) => {
                Decision::Reject(Answer::TransactionConflict)
            }
            Pattern::TransactWithoutToken => Decision::Begin,
            Pattern::TransactWithToken => {
                let seen = self.token_seen(state, client, request.rebuilt, request.host);
                match seen {
                    TokenSeen::RunningSameParameters => {
                        Decision::Reject(Answer::TransactionInProgress)
                    }
                    TokenSeen::RunningOtherParameters if fingerprint_checked => {
                        Decision::Reject(Answer::IdempotentParameterMismatch)
                    }
                    TokenSeen::RunningOtherParameters => {
                        Decision::Reject(Answer::TransactionInProgress)
                    }
                    TokenSeen::LiveSameParameters => Decision::Replay,
                    TokenSeen::LiveOtherParameters if fingerprint_checked => {
                        Decision::Reject(Answer::IdempotentParameterMismatch)
                    }
                    TokenSeen::LiveOtherParameters => Decision::Replay,
                    TokenSeen::Malformed if self.mutation != Some(Mutation::LongTokenTruncated) => {
                        Decision::Reject(Answer::ValidationError)
                    }
                    TokenSeen::InvalidRecord
                        if self.mutation != Some(Mutation::DamagedRecordReadAsExpired) =>
                    {
                        Decision::Reject(Answer::InternalServerError)
                    }
                    // Under the mutations: the long token cut to size, the damaged record read
                    // as expired; either way the request runs as new.
                    TokenSeen::Malformed | TokenSeen::InvalidRecord
                        if Self::accounts_locked(state) =>
                    {
                        Decision::Reject(Answer::TransactionConflict)
                    }
                    TokenSeen::Malformed | TokenSeen::InvalidRecord => Decision::Begin,
                    TokenSeen::Absent if Self::accounts_locked(state) => {
                        Decision::Reject(Answer::TransactionConflict)
                    }
                    TokenSeen::Absent => Decision::Begin,
                }
            }
        }
    }

    /// The transaction's retry deadline as the variant's clients keep it.
    fn transaction_timing_allows(&self, state: &TokenState, client: &Client) -> bool {
        let deadline = client.attempts[0].sent_at + self.limits.window;
        match self.kind {
            Variant::Tokened | Variant::Tokenless => state.now < deadline,
            Variant::LateRetry => state.now >= deadline,
        }
    }

    fn retries_left(&self, client: &Client) -> bool {
        client.attempts.len() <= self.limits.retries as usize
    }

    /// The last attempt left the client without a final answer.
    fn last_attempt_retryable(client: &Client) -> bool {
        match client.attempts.last() {
            None => false,
            Some(last) => match last.client {
                ClientSide::GaveUp => true,
                ClientSide::Delivered => last.answer().is_some_and(Answer::is_retryable),
                ClientSide::Waiting => false,
            },
        }
    }

    fn may_retry(&self, state: &TokenState, client: &Client) -> bool {
        client.reconciled.is_none()
            && (self.retries_left(client) || self.retries_in_progress_again(client))
            && Self::last_attempt_retryable(client)
            && (!client.pattern.is_transaction() || self.transaction_timing_allows(state, client))
    }

    /// Under [`Mutation::RetriesForeverOnInProgress`]: the client's last attempt was answered
    /// TransactionInProgress, and it resends without counting.
    fn retries_in_progress_again(&self, client: &Client) -> bool {
        self.mutation == Some(Mutation::RetriesForeverOnInProgress)
            && client.attempts.last().is_some_and(|last| {
                last.client == ClientSide::Delivered
                    && last.answer() == Some(Answer::TransactionInProgress)
            })
    }

    /// A client reconciles once it has no answer it trusts and will never retry again.
    fn may_read(&self, state: &TokenState, client: &Client) -> bool {
        let Some(last) = client.attempts.last() else {
            return false;
        };
        if self.retries_in_progress_again(client) {
            return false;
        }
        if client.reconciled.is_some()
            || client
                .attempts
                .iter()
                .any(|a| a.client == ClientSide::Waiting)
        {
            return false;
        }
        if last.client == ClientSide::Delivered && last.answer() == Some(Answer::Success) {
            return false;
        }
        let final_answer = last.client == ClientSide::Delivered
            && !last.answer().is_some_and(Answer::is_retryable);
        let deadline_passed = client.pattern.is_transaction()
            && self.kind != Variant::LateRetry
            && !self.transaction_timing_allows(state, client);
        final_answer || deadline_passed || !self.retries_left(client)
    }

    /// The clock waits for running transactions and for responses on their way to a waiting
    /// client, so that every request is processed, and every answer lost or delivered, in the tick
    /// it was sent.
    fn may_tick(&self, state: &TokenState) -> bool {
        state.now < self.limits.ticks && Self::clock_free(state)
    }

    /// Nothing holds the clock back: no transaction runs and no answer is on its way.
    fn clock_free(state: &TokenState) -> bool {
        state.clients.iter().all(|client| {
            client.attempts.iter().all(|a| {
                let running = matches!(a.server, ServerSide::Running { .. });
                let answer_on_its_way =
                    matches!(a.server, ServerSide::Done { .. }) && a.client == ClientSide::Waiting;
                !running && !answer_on_its_way
            })
        })
    }

    fn apply_single_item(state: &mut TokenState, client: usize) {
        state.table.applications[client][0] += 1;
        match state.clients[client].pattern {
            Pattern::PutFixedProfile => state.table.profile_holder = Some(client as ClientId),
            Pattern::CreateOrderIfAbsent => state.table.order_owner = Some(client as ClientId),
            _ => {}
        }
    }

    /// Whether a server step changed the client's items: what `applied` records, observed on
    /// the table rather than declared by the step.
    fn table_changed(before: &TokenState, after: &TokenState, client: usize) -> bool {
        before.table.applications[client] != after.table.applications[client]
    }

    /// What a read of the client's items shows about the client's own write.
    fn visible_to(state: &TokenState, client: usize) -> Vec<u8> {
        match state.clients[client].pattern {
            Pattern::PutFixedProfile => {
                vec![u8::from(
                    state.table.profile_holder == Some(client as ClientId),
                )]
            }
            _ => state.table.applications[client].clone(),
        }
    }
}

/// Consecutive attempts (k, k+1) of one client where k was applied but its response lost, and
/// k+1 is the identical request, answered. Left out are retries the table has no row for:
/// refused for concurrency (TransactionConflict, TransactionInProgress), or meeting the token of
/// the client's own rebuilt request (T2's case, possible once a late retry re-opened the token).
fn identical_retries_after_lost_commit<'a>(
    model: &'a TokenModel,
    client: &'a Client,
) -> impl Iterator<Item = (&'a Attempt, &'a Attempt)> {
    client.attempts.windows(2).filter_map(move |pair| {
        let (first, retry) = (&pair[0], &pair[1]);
        let met_other_parameters = observed::met(model, client, retry).is_other_parameters();
        let relevant = first.applied()
            && first.client == ClientSide::GaveUp
            && retry.rebuilt == first.rebuilt
            && !met_other_parameters
            && retry.answer().is_some_and(|answer| !answer.is_retryable());
        relevant.then_some((first, retry))
    })
}

fn retry_within_window(model: &TokenModel, first: &Attempt, retry: &Attempt) -> bool {
    model.is_live(first.sent_at, retry.sent_at)
}

fn transaction_clients(state: &TokenState) -> impl Iterator<Item = (usize, &Client)> {
    state
        .clients
        .iter()
        .enumerate()
        .filter(|(_, client)| client.pattern.is_transaction())
}

fn retry_outcome_reached(
    model: &TokenModel,
    state: &TokenState,
    pattern: Pattern,
    want: fn(&TokenModel, &Attempt, &Attempt) -> bool,
) -> bool {
    state
        .clients
        .iter()
        .filter(|client| client.pattern == pattern)
        .any(|client| {
            identical_retries_after_lost_commit(model, client)
                .any(|(first, retry)| want(model, first, retry))
        })
}

//= specs/tokened-writes.md#T1
//# A transaction intent is applied at most once, and a client told success finds it applied.
fn t1_exactly_once(_: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).all(|(index, client)| {
        let applications = &state.table.applications[index];
        let told_success = client
            .attempts
            .iter()
            .any(|a| a.client == ClientSide::Delivered && a.answer() == Some(Answer::Success));
        applications.iter().all(|&count| count <= 1)
            && (!told_success || applications.iter().any(|&count| count >= 1))
    })
}

//= specs/tokened-writes.md#T1
//# Some transaction is retried identically within the window after its first attempt committed and its response was lost.
fn t1_retry_within_window(model: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).any(|(_, client)| {
        identical_retries_after_lost_commit(model, client)
            .any(|(first, retry)| retry_within_window(model, first, retry))
    })
}

//= specs/tokened-writes.md#T2
//# A request that meets a live or running token of other parameters is answered IdempotentParameterMismatch and applies nothing.
/// Observed: the record the request met, classified here (`observed::met`), and whether the
/// client's items changed; the server's classifier is not consulted.
fn t2_mismatch(model: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(|client| {
        client.attempts.iter().all(|attempt| {
            let other_parameters = observed::met(model, client, attempt).is_other_parameters();
            match attempt.server {
                ServerSide::Done {
                    answer, applied, ..
                } if other_parameters => answer == Answer::IdempotentParameterMismatch && !applied,
                ServerSide::Running { .. } => !other_parameters,
                _ => true,
            }
        })
    })
}

//= specs/tokened-writes.md#T2
//# Some rebuilt request under a live token is rejected with IdempotentParameterMismatch.
fn t2_mismatch_rejected(_: &TokenModel, state: &TokenState) -> bool {
    state
        .clients
        .iter()
        .flat_map(|client| client.attempts.iter())
        .any(|attempt| attempt.answer() == Some(Answer::IdempotentParameterMismatch))
}

//= specs/tokened-writes.md#T3
//# No state of the table, and no reconciliation read, shows some items of a transaction applied more often than others.
fn t3_atomic(_: &TokenModel, state: &TokenState) -> bool {
    let uniform = |counts: &[u8]| counts.windows(2).all(|pair| pair[0] == pair[1]);
    transaction_clients(state).all(|(index, client)| {
        uniform(&state.table.applications[index])
            && client.reconciled.as_deref().is_none_or(uniform)
    })
}

//= specs/tokened-writes.md#T3
//# Some transaction commits and its response is lost: the outcome is unknown to the client.
fn t3_lost_after_commit(_: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).any(|(_, client)| {
        client
            .attempts
            .iter()
            .any(|a| a.applied() && a.client == ClientSide::GaveUp)
    })
}

//= specs/tokened-writes.md#T3
//# Some client that never heard success reads its transaction back and finds all of it applied.
fn t3_read_back_whole(_: &TokenModel, state: &TokenState) -> bool {
    transaction_clients(state).any(|(_, client)| {
        let never_told_success = !client
            .attempts
            .iter()
            .any(|a| a.client == ClientSide::Delivered && a.answer() == Some(Answer::Success));
        never_told_success
            && client
                .reconciled
                .as_deref()
                .is_some_and(|seen| seen.iter().all(|&count| count >= 1))
    })
}

//= specs/tokened-writes.md#T4
//# An identical retry of a write that committed but lost its response gets the answer and the effect the retry table gives for the client's pattern.
/// The expectation is derived from what the retry met and did, not from a table of patterns: a
/// success that changed nothing must have met a live record of the identical request (a
/// replay); a success that changed the items must not have (an execution); a condition failure
/// must find the item in the table; any other answer changes nothing.
fn t4_honest_retry(model: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(|client| {
        identical_retries_after_lost_commit(model, client).all(|(_, retry)| {
            let ServerSide::Done {
                answer, applied, ..
            } = retry.server
            else {
                return true;
            };
            let replayable = observed::met(model, client, retry) == observed::Met::LiveSame;
            match answer {
                Answer::Success if applied => !replayable,
                Answer::Success => replayable,
                Answer::ConditionalCheckFailed => !applied && state.table.order_owner.is_some(),
                _ => !applied,
            }
        })
    })
}

//= specs/tokened-writes.md#T4
//# Some UpdateItem ADD is applied twice by a retry.
fn t4_add_double_applied(_: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().enumerate().any(|(index, client)| {
        client.pattern == Pattern::AddCounter && state.table.applications[index][0] >= 2
    })
}

//= specs/tokened-writes.md#T4
//# Some fixed PutItem is written again by its retry and the item converges to the same value.
fn t4_fixed_put_converges(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(model, state, Pattern::PutFixedProfile, |_, _, retry| {
        retry.applied()
    })
}

//= specs/tokened-writes.md#T4
//# Some conditional create commits, loses its response, and its retry reports ConditionalCheckFailed.
fn t4_create_reports_condition_failure(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(model, state, Pattern::CreateOrderIfAbsent, |_, _, retry| {
        retry.answer() == Some(Answer::ConditionalCheckFailed)
    })
}

//= specs/tokened-writes.md#T4
//# Some transaction without a token executes a second time when retried.
fn t4_untokened_transaction_reexecutes(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(
        model,
        state,
        Pattern::TransactWithoutToken,
        |_, _, retry| retry.applied(),
    )
}

//= specs/tokened-writes.md#T4
//# Some tokened retry inside the window is answered success without applying anything.
fn t4_tokened_replay(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(
        model,
        state,
        Pattern::TransactWithToken,
        |model, first, retry| {
            retry_within_window(model, first, retry)
                && retry.answer() == Some(Answer::Success)
                && !retry.applied()
        },
    )
}

//= specs/tokened-writes.md#T4
//# Some tokened retry after the window executes again as a new request.
fn t4_expired_token_reexecutes(model: &TokenModel, state: &TokenState) -> bool {
    retry_outcome_reached(
        model,
        state,
        Pattern::TransactWithToken,
        |model, first, retry| !retry_within_window(model, first, retry) && retry.applied(),
    )
}

//= specs/tokened-writes.md#T5
//# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
/// Observed: the request's token and the record it met, classified here (`observed::met`), and
/// whether the client's items changed.
fn t5_bad_token(model: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(|client| {
        client.attempts.iter().all(|attempt| {
            let met = observed::met(model, client, attempt);
            match (attempt.server, met) {
                (
                    ServerSide::Done {
                        answer, applied, ..
                    },
                    observed::Met::Malformed,
                ) => answer == Answer::ValidationError && !applied,
                (
                    ServerSide::Done {
                        answer, applied, ..
                    },
                    observed::Met::Damaged,
                ) => answer == Answer::InternalServerError && !applied,
                (ServerSide::Running { .. }, met) => {
                    !matches!(met, observed::Met::Malformed | observed::Met::Damaged)
                }
                _ => true,
            }
        })
    })
}

//= specs/tokened-writes.md#T5
//# Some request with a token over 36 characters is rejected as a validation error.
fn t5_long_token_rejected(_: &TokenModel, state: &TokenState) -> bool {
    state
        .clients
        .iter()
        .flat_map(|client| client.attempts.iter())
        .any(|attempt| attempt.answer() == Some(Answer::ValidationError))
}

//= specs/tokened-writes.md#T5
//# Some retry meets its token's record without a valid timestamp and is refused.
fn t5_damaged_record_refused(_: &TokenModel, state: &TokenState) -> bool {
    state
        .clients
        .iter()
        .flat_map(|client| client.attempts.iter())
        .any(|attempt| attempt.answer() == Some(Answer::InternalServerError))
}

// Property names, shared by `property_defs`, `expected` and the tests.
pub const T1_EXACTLY_ONCE: &str = "T1 exactly-once";
pub const T1_RETRY_WITHIN_WINDOW: &str = "T1 retry within the window after a lost commit";
pub const T2_MISMATCH: &str = "T2 mismatch";
pub const T2_MISMATCH_REJECTED: &str = "T2 rebuilt request rejected as a mismatch";
pub const T3_ATOMIC: &str = "T3 atomic";
pub const T3_LOST_AFTER_COMMIT: &str = "T3 transaction response lost after commit";
pub const T3_READ_BACK_WHOLE: &str = "T3 unknown outcome read back whole";
pub const T4_HONEST_RETRY: &str = "T4 honest-retry";
pub const T4_ADD_DOUBLE_APPLIED: &str = "T4 ADD retry double-applies";
pub const T4_FIXED_PUT_CONVERGES: &str = "T4 fixed PutItem retry converges";
pub const T4_CREATE_CONDITION_FAILURE: &str =
    "T4 conditional create retry reports a condition failure";
pub const T4_UNTOKENED_REEXECUTES: &str = "T4 untokened transaction retry executes again";
pub const T4_TOKENED_REPLAY: &str = "T4 tokened retry replayed without applying";
pub const T4_EXPIRED_REEXECUTES: &str = "T4 tokened retry after the window executes again";
pub const T5_BAD_TOKEN: &str = "T5 bad-token";
pub const T5_LONG_TOKEN_REJECTED: &str = "T5 an over-long token is rejected";
pub const T5_DAMAGED_RECORD_REFUSED: &str = "T5 a request meeting a damaged record is refused";

/// The bound set `oncecheck check` runs beside `tokened`'s CI bounds: a client that may generate
/// an over-long token, so T5's malformed-token half is checked on reached states. Not a CI
/// bound: the reliable-write client refuses such a token before sending, so traces with it are
/// not replayable, and the CI bounds are the replayed ones.
pub const BOUND_SETS: &[crate::check::BoundSet] = &[crate::check::BoundSet {
    name: "reach",
    variant: "tokened",
    overrides: &[("long_tokens", 1)],
    reaches: &["T5"],
}];

impl ModelSpec for TokenModel {
    fn scale(&self) -> crate::check::Scale<Self> {
        scale::hooks(self)
    }

    const NAME: &'static str = "token";
    const BOUND_SETS: &'static [crate::check::BoundSet] = BOUND_SETS;
    const VARIANTS: &'static [&'static str] = &["tokened", "tokenless", "late-retry"];
    const BOUNDS: &'static [BoundSpec] = &[
        BoundSpec {
            key: "clients",
            default: 2,
            min: 1,
            max: 3,
            help: "clients, each making one logical write",
        },
        BoundSpec {
            key: "retries",
            default: 1,
            min: 0,
            max: 3,
            help: "retries per client after its first attempt",
        },
        BoundSpec {
            key: "window",
            default: 2,
            min: 1,
            max: 4,
            help: "ticks a completed token stays live (the 10-minute window)",
        },
        BoundSpec {
            key: "ticks",
            default: 2,
            min: 0,
            max: 6,
            help: "clock ticks in one run",
        },
        BoundSpec {
            key: "skew",
            default: 0,
            min: 0,
            max: 4,
            help: "ticks host H2's wall clock runs ahead of H1's (0: one host)",
        },
        BoundSpec {
            key: "shared_token",
            default: 0,
            min: 0,
            max: 1,
            help: "1: tokened clients (two intents) share one token",
        },
        BoundSpec {
            key: "long_tokens",
            default: 0,
            min: 0,
            max: 1,
            help: "1: a tokened client may generate a token over 36 characters",
        },
        BoundSpec {
            key: "damaged_records",
            default: 1,
            min: 0,
            max: 2,
            help: "completed token records whose timestamp the environment damages",
        },
    ];

    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        let variant = Self::resolve_variant(variant)?;
        let kind = match variant {
            "tokened" => Variant::Tokened,
            "tokenless" => Variant::Tokenless,
            _ => Variant::LateRetry,
        };
        // Re-resolve so that a caller's partial table gets every default and range check.
        let overrides: Vec<(String, u32)> = bounds
            .0
            .iter()
            .map(|(key, value)| (key.clone(), *value))
            .collect();
        let bounds = Bounds::resolve(Self::BOUNDS, &overrides)?;
        let limits = Limits {
            clients: bounds.get("clients") as u8,
            retries: bounds.get("retries") as u8,
            window: bounds.get("window") as u8,
            skew: bounds.get("skew") as u8,
            shared_token: bounds.get("shared_token") == 1,
            long_tokens: bounds.get("long_tokens") == 1,
            damaged_records: bounds.get("damaged_records") as u8,
            ticks: bounds.get("ticks") as u8,
        };
        Ok(TokenModel {
            variant,
            kind,
            bounds,
            limits,
            mutation: None,
        })
    }

    fn variant(&self) -> &'static str {
        self.variant
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        let def = |id, name, kind, condition| PropertyDef {
            id,
            name,
            kind,
            condition,
        };
        vec![
            def(
                "T1",
                T1_EXACTLY_ONCE,
                Kind::Always,
                t1_exactly_once as fn(&Self, &TokenState) -> bool,
            ),
            def(
                "T1",
                T1_RETRY_WITHIN_WINDOW,
                Kind::Sometimes,
                t1_retry_within_window,
            ),
            def("T2", T2_MISMATCH, Kind::Always, t2_mismatch),
            def(
                "T2",
                T2_MISMATCH_REJECTED,
                Kind::Sometimes,
                t2_mismatch_rejected,
            ),
            def("T3", T3_ATOMIC, Kind::Always, t3_atomic),
            def(
                "T3",
                T3_LOST_AFTER_COMMIT,
                Kind::Sometimes,
                t3_lost_after_commit,
            ),
            def(
                "T3",
                T3_READ_BACK_WHOLE,
                Kind::Sometimes,
                t3_read_back_whole,
            ),
            def("T4", T4_HONEST_RETRY, Kind::Always, t4_honest_retry),
            def(
                "T4",
                T4_ADD_DOUBLE_APPLIED,
                Kind::Sometimes,
                t4_add_double_applied,
            ),
            def(
                "T4",
                T4_FIXED_PUT_CONVERGES,
                Kind::Sometimes,
                t4_fixed_put_converges,
            ),
            def(
                "T4",
                T4_CREATE_CONDITION_FAILURE,
                Kind::Sometimes,
                t4_create_reports_condition_failure,
            ),
            def(
                "T4",
                T4_UNTOKENED_REEXECUTES,
                Kind::Sometimes,
                t4_untokened_transaction_reexecutes,
            ),
            def("T4", T4_TOKENED_REPLAY, Kind::Sometimes, t4_tokened_replay),
            def(
                "T4",
                T4_EXPIRED_REEXECUTES,
                Kind::Sometimes,
                t4_expired_token_reexecutes,
            ),
            def("T5", T5_BAD_TOKEN, Kind::Always, t5_bad_token),
            def(
                "T5",
                T5_LONG_TOKEN_REJECTED,
                Kind::Sometimes,
                t5_long_token_rejected,
            ),
            def(
                "T5",
                T5_DAMAGED_RECORD_REFUSED,
                Kind::Sometimes,
                t5_damaged_record_refused,
            ),
        ]
    }

    fn liveness_defs(&self) -> Vec<crate::check::LivenessDef<Self>> {
        liveness::definitions()
    }

    fn fairness(&self, action: &Action) -> Option<&'static str> {
        liveness::family_of(action)
    }

    fn families_cut(&self, state: &TokenState, cut: &mut Vec<&'static str>) {
        // `ticks` bounds the clock: once spent, a tick the protocol would take is withheld.
        if state.now >= self.limits.ticks && Self::clock_free(state) {
            cut.push("clock");
        }
    }

    /// Expectations of the honest model (the spec's verdict table), derived from the bounds where a
    /// bound removes a case: no retries, or a clock too short for a late retry. At the CI
    /// bounds this is the table of `specs/tokened-writes.md`.
    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        let Limits {
            retries,
            window,
            ticks,
            skew,
            shared_token,
            long_tokens,
            damaged_records,
            ..
        } = self.limits;
        let retries_happen = retries >= 1;
        let late_retry_happens = retries_happen && ticks >= window;
        // With two retries a late client's second retry can land inside the window opened by
        // its first (late) retry.
        let late_second_retry_in_window = late_retry_happens && retries >= 2;
        // A host whose clock runs ahead expires a token the client still counts as live: at once
        // when the skew reaches the window, else on a retry a tick later.
        let skew_expires_live_token = retries_happen && skew > 0 && (ticks >= 1 || skew >= window);
        // A token completed on the host ahead stays live longer on the other: a late retry can
        // still meet it, and a rebuilt one is then a mismatch.
        let late_retry_meets_live_token = late_retry_happens && skew > 0;
        let reached = |yes: bool| {
            if yes {
                Verdict::Reached
            } else {
                Verdict::Unreached
            }
        };
        let holds = |yes: bool| {
            if yes {
                Verdict::Holds
            } else {
                Verdict::Violated
            }
        };
        match (self.kind, property.name) {
            // Two intents under one token: the second is answered with the first's replay.
            (Variant::Tokened, T1_EXACTLY_ONCE) => {
                let shared_by_two_intents = shared_token && self.limits.clients >= 2;
                holds(!(skew_expires_live_token || shared_by_two_intents))
            }
            (Variant::Tokenless, T1_EXACTLY_ONCE) => holds(!retries_happen),
            (Variant::LateRetry, T1_EXACTLY_ONCE) => holds(!late_retry_happens),
            (Variant::LateRetry, T1_RETRY_WITHIN_WINDOW) => reached(late_second_retry_in_window),
            (_, T1_RETRY_WITHIN_WINDOW) => reached(retries_happen),
            (_, T2_MISMATCH) | (_, T3_ATOMIC) | (_, T4_HONEST_RETRY) => holds(true),
            (Variant::Tokened, T2_MISMATCH_REJECTED) => reached(retries_happen),
            (Variant::Tokenless, T2_MISMATCH_REJECTED) => reached(false),
            (Variant::LateRetry, T2_MISMATCH_REJECTED) => {
                reached(late_second_retry_in_window || late_retry_meets_live_token)
            }
            // A late-retry client with retries left waits for the window, so it only reconciles
            // once its retries are spent, which a clock shorter than the window never allows.
            (Variant::LateRetry, T3_READ_BACK_WHOLE) => {
                reached(!retries_happen || late_retry_happens)
            }
            (_, T3_LOST_AFTER_COMMIT) | (_, T3_READ_BACK_WHOLE) => reached(true),
            (_, T4_ADD_DOUBLE_APPLIED)
            | (_, T4_FIXED_PUT_CONVERGES)
            | (_, T4_CREATE_CONDITION_FAILURE) => reached(retries_happen),
            (Variant::Tokenless, T4_UNTOKENED_REEXECUTES) => reached(retries_happen),
            (_, T4_UNTOKENED_REEXECUTES) => reached(false),
            (Variant::Tokened, T4_TOKENED_REPLAY) => reached(retries_happen),
            (Variant::LateRetry, T4_TOKENED_REPLAY) => reached(late_second_retry_in_window),
            (_, T4_TOKENED_REPLAY) => reached(false),
            (Variant::LateRetry, T4_EXPIRED_REEXECUTES) => reached(late_retry_happens),
            (_, T4_EXPIRED_REEXECUTES) => reached(false),
            (_, T5_BAD_TOKEN) => holds(true),
            (Variant::Tokenless, T5_LONG_TOKEN_REJECTED | T5_DAMAGED_RECORD_REFUSED) => {
                reached(false)
            }
            (_, T5_LONG_TOKEN_REJECTED) => reached(long_tokens),
            // The damaged record is met by a retry; a late-retry client needs the clock for one.
            (Variant::LateRetry, T5_DAMAGED_RECORD_REFUSED) => {
                reached(damaged_records >= 1 && late_retry_happens)
            }
            (_, T5_DAMAGED_RECORD_REFUSED) => reached(damaged_records >= 1 && retries_happen),
            (_, liveness::T6_OUTCOME_KNOWN) => holds(true),
            (_, name) => panic!("no expectation for property {name}"),
        }
    }

    fn state_roles(&self, state: &TokenState) -> Vec<(String, String)> {
        words::roles(self, state)
    }

    fn step_words(&self, before: &TokenState, action: &Action, after: &TokenState) -> String {
        let who = |client: &ClientId| format!("C{}", client + 1);
        let token = |client: &ClientId| format!("t{}", self.token_of(before, *client as usize) + 1);
        let accounts: Vec<String> = (0..ACCOUNTS)
            .map(|item| ((b'A' + item) as char).to_string())
            .collect();
        let request = |client: &ClientId, rebuilt: bool| {
            let amount = if rebuilt { 6 } else { 5 };
            match before.clients[*client as usize].pattern {
                Pattern::AddCounter => "UpdateItem{ADD counter 5}".to_string(),
                Pattern::PutFixedProfile => {
                    format!("PutItem{{profile = {}'s fixed item}}", who(client))
                }
                Pattern::CreateOrderIfAbsent => {
                    format!(
                        "PutItem{{order owner={}}} if attribute_not_exists(order)",
                        who(client)
                    )
                }
                Pattern::TransactWithoutToken => {
                    format!(
                        "TransactWriteItems{{ADD balance {amount} on {}}} without token",
                        accounts.join(", ")
                    )
                }
                Pattern::TransactWithToken => format!(
                    "TransactWriteItems{{ADD balance {amount} on {}}} token {}",
                    accounts.join(", "),
                    token(client)
                ),
            }
        };
        // Only named when there are two hosts to tell apart.
        let via = |host: Host| {
            if self.limits.skew > 0 {
                format!(
                    " via H{} (its clock reads {})",
                    host + 1,
                    self.host_clock(host, before.now)
                )
            } else {
                String::new()
            }
        };
        let attempt_of = |client: &ClientId, attempt: &u8| {
            &before.clients[*client as usize].attempts[*attempt as usize]
        };
        let label = |client: &ClientId, attempt: &u8| {
            if before.clients[*client as usize].pattern.has_token() {
                format!(
                    "{} (attempt {} of {})",
                    token(client),
                    attempt + 1,
                    who(client)
                )
            } else {
                format!("{}'s attempt {}", who(client), attempt + 1)
            }
        };
        match action {
            Action::ClientSends {
                client,
                host,
                token_too_long,
            } => {
                let long = if *token_too_long {
                    format!(
                        " (its token is {} characters: over the limit)",
                        TOKEN_CHARS_MAX + 1
                    )
                } else {
                    String::new()
                };
                format!(
                    "{} sends {}{long}{}",
                    who(client),
                    request(client, false),
                    via(*host)
                )
            }
            Action::ClientRetries {
                client,
                rebuilt,
                host,
            } => {
                let pattern = before.clients[*client as usize].pattern;
                let how = match (pattern.has_token(), rebuilt) {
                    (true, false) => format!("with token {} (identical request)", token(client)),
                    (true, true) => format!(
                        "with token {} but rebuilt parameters: {}",
                        token(client),
                        request(client, true)
                    ),
                    (false, _) => format!("without a token: {}", request(client, false)),
                };
                format!("{} retries {how}{}", who(client), via(*host))
            }
            Action::ServerBegins { client, attempt } => {
                let token_note = if before.clients[*client as usize].pattern.has_token() {
                    format!(", records {} as running", token(client))
                } else {
                    String::new()
                };
                format!(
                    "server starts {}: locks {}{token_note}",
                    label(client, attempt),
                    accounts.join(", ")
                )
            }
            Action::ServerCommits { client, attempt } => {
                let done = matches!(
                    after.clients[*client as usize].attempts[*attempt as usize].server,
                    ServerSide::Done { .. }
                );
                if done {
                    format!("server commits {}", label(client, attempt))
                } else {
                    format!(
                        "server makes one item of {} visible, the rest still pending",
                        label(client, attempt)
                    )
                }
            }
            Action::ServerReplays { client, attempt } => {
                if before.clients[*client as usize].pattern.has_token() {
                    format!(
                        "server finds {} live: answers success for {}, applies nothing",
                        token(client),
                        label(client, attempt)
                    )
                } else {
                    format!(
                        "server answers {} from an earlier request's receipt, applies nothing",
                        label(client, attempt)
                    )
                }
            }
            Action::ServerRejects {
                client,
                attempt,
                answer,
            } => {
                format!("server rejects {}: {answer:?}", label(client, attempt))
            }
            Action::ResponseDelivered { client, attempt } => {
                let answer = attempt_of(client, attempt)
                    .answer()
                    .expect("only answered attempts are delivered");
                format!(
                    "{} receives {answer:?} for attempt {}",
                    who(client),
                    attempt + 1
                )
            }
            Action::ResponseLost { client, attempt } => match attempt_of(client, attempt).server {
                ServerSide::Pending => {
                    format!(
                        "{} times out on attempt {} (request still in flight)",
                        who(client),
                        attempt + 1
                    )
                }
                _ => format!("response to {} lost (attempt {})", who(client), attempt + 1),
            },
            Action::ClockTicks => {
                let expired: Vec<String> = before
                    .tokens
                    .keys()
                    .filter(|client| !after.tokens.contains_key(client))
                    .map(token)
                    .collect();
                if expired.is_empty() {
                    format!("clock ticks to {}", after.now)
                } else {
                    format!(
                        "clock passes the 10-minute window of {} (now {})",
                        expired.join(", "),
                        after.now
                    )
                }
            }
            Action::RecordLosesTimestamp { token: owner } => {
                format!(
                    "the record of token {} loses its valid creation timestamp",
                    token(owner)
                )
            }
            Action::ClientReads { client } => {
                let seen = after.clients[*client as usize]
                    .reconciled
                    .clone()
                    .unwrap_or_default();
                format!(
                    "{} reads its items back to reconcile: its write visible {seen:?} times per item",
                    who(client)
                )
            }
        }
    }
}

impl Model for TokenModel {
    type State = TokenState;
    type Action = Action;

    fn init_states(&self) -> Vec<TokenState> {
        // Clients are interchangeable: enumerate pattern assignments in non-decreasing order.
        let patterns = self.patterns();
        let mut assignments: Vec<Vec<Pattern>> = vec![vec![]];
        for _ in 0..self.limits.clients {
            assignments = assignments
                .into_iter()
                .flat_map(|prefix| {
                    patterns
                        .iter()
                        .filter(|pattern| prefix.last().is_none_or(|last| last <= *pattern))
                        .map(|pattern| {
                            let mut next = prefix.clone();
                            next.push(*pattern);
                            next
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
        }
        assignments
            .into_iter()
            .map(|assignment| TokenState {
                table: Table {
                    applications: assignment
                        .iter()
                        .map(|pattern| vec![0; self.item_count(*pattern)])
                        .collect(),
                    profile_holder: None,
                    order_owner: None,
                },
                clients: assignment
                    .into_iter()
                    .map(|pattern| Client {
                        pattern,
                        token_too_long: false,
                        attempts: Vec::new(),
                        reconciled: None,
                    })
                    .collect(),
                tokens: BTreeMap::new(),
                now: 0,
                damages_left: self.limits.damaged_records,
            })
            .collect()
    }

    fn actions(&self, state: &TokenState, actions: &mut Vec<Action>) {
        for (index, client) in state.clients.iter().enumerate() {
            let id = index as ClientId;
            if client.attempts.is_empty() {
                // Clients start together, before the first tick: a client starting later behaves
                // the same relative to its own token, only with less clock left.
                if state.now == 0 {
                    for host in self.hosts() {
                        actions.push(Action::ClientSends {
                            client: id,
                            host,
                            token_too_long: false,
                        });
                        if self.limits.long_tokens && client.pattern.has_token() {
                            actions.push(Action::ClientSends {
                                client: id,
                                host,
                                token_too_long: true,
                            });
                        }
                    }
                }
            } else if self.may_retry(state, client) {
                for host in self.hosts() {
                    actions.push(Action::ClientRetries {
                        client: id,
                        rebuilt: false,
                        host,
                    });
                    if client.pattern.has_token() {
                        actions.push(Action::ClientRetries {
                            client: id,
                            rebuilt: true,
                            host,
                        });
                    }
                }
            }
            if self.may_read(state, client) {
                actions.push(Action::ClientReads { client: id });
            }
            for (number, attempt) in client.attempts.iter().enumerate() {
                let at = number as u8;
                match attempt.server {
                    ServerSide::Pending => actions.push(match self.decide(state, index, number) {
                        Decision::Begin => Action::ServerBegins {
                            client: id,
                            attempt: at,
                        },
                        Decision::Commit => Action::ServerCommits {
                            client: id,
                            attempt: at,
                        },
                        Decision::Replay => Action::ServerReplays {
                            client: id,
                            attempt: at,
                        },
                        Decision::Reject(answer) => Action::ServerRejects {
                            client: id,
                            attempt: at,
                            answer,
                        },
                    }),
                    ServerSide::Running { .. } => actions.push(Action::ServerCommits {
                        client: id,
                        attempt: at,
                    }),
                    ServerSide::Done { .. } | ServerSide::Dropped => {}
                }
                if attempt.client == ClientSide::Waiting {
                    if matches!(attempt.server, ServerSide::Done { .. }) {
                        actions.push(Action::ResponseDelivered {
                            client: id,
                            attempt: at,
                        });
                    }
                    let may_lose = self.mutation != Some(Mutation::TimeoutsCancelRequests)
                        || attempt.server == ServerSide::Pending;
                    if may_lose {
                        actions.push(Action::ResponseLost {
                            client: id,
                            attempt: at,
                        });
                    }
                }
            }
        }
        if self.may_tick(state) {
            actions.push(Action::ClockTicks);
        }
        if state.damages_left > 0 {
            for (token, record) in &state.tokens {
                if matches!(record.phase, TokenPhase::Completed { .. }) {
                    actions.push(Action::RecordLosesTimestamp { token: *token });
                }
            }
        }
    }

    fn next_state(&self, last: &TokenState, action: Action) -> Option<TokenState> {
        let mut state = last.clone();
        match action {
            Action::ClientSends { client, host, .. }
            | Action::ClientRetries { client, host, .. } => {
                let rebuilt = matches!(action, Action::ClientRetries { rebuilt: true, .. });
                if let Action::ClientSends { token_too_long, .. } = action {
                    state.clients[client as usize].token_too_long = token_too_long;
                }
                let now = state.now;
                if matches!(action, Action::ClientRetries { .. })
                    && self.retries_in_progress_again(&last.clients[client as usize])
                {
                    // The mutated client forgets the attempt it resends: it is not counted.
                    state.clients[client as usize].attempts.pop();
                }
                state.clients[client as usize].attempts.push(Attempt {
                    rebuilt,
                    sent_at: now,
                    host,
                    server: ServerSide::Pending,
                    client: ClientSide::Waiting,
                });
            }
            Action::ServerBegins { client, attempt } => {
                if self.decide(last, client as usize, attempt as usize) != Decision::Begin {
                    return None;
                }
                let met = self.record_met(last, client as usize);
                let request = &mut state.clients[client as usize].attempts[attempt as usize];
                request.server = ServerSide::Running {
                    items_applied: 0,
                    met,
                };
                let rebuilt = request.rebuilt;
                if state.clients[client as usize].pattern.has_token() {
                    let token = self.token_of(&state, client as usize);
                    state.tokens.insert(
                        token,
                        TokenRecord {
                            rebuilt,
                            phase: TokenPhase::Running,
                        },
                    );
                }
            }
            Action::ServerCommits { client, attempt } => {
                let (index, number) = (client as usize, attempt as usize);
                match last.clients[index].attempts[number].server {
                    ServerSide::Pending => {
                        if self.decide(last, index, number) != Decision::Commit {
                            return None;
                        }
                        Self::apply_single_item(&mut state, index);
                        state.clients[index].attempts[number].server = ServerSide::Done {
                            answer: Answer::Success,
                            applied: Self::table_changed(last, &state, index),
                            met: None,
                        };
                    }
                    ServerSide::Running { items_applied, met } => {
                        let items = ACCOUNTS;
                        let upto = if self.mutation == Some(Mutation::CommitItemsOneByOne) {
                            items_applied + 1
                        } else {
                            items
                        };
                        for item in items_applied..upto {
                            state.table.applications[index][item as usize] += 1;
                        }
                        let applied = items_applied > 0 || Self::table_changed(last, &state, index);
                        let request = &mut state.clients[index].attempts[number];
                        if upto < items {
                            request.server = ServerSide::Running {
                                items_applied: upto,
                                met,
                            };
                        } else {
                            request.server = ServerSide::Done {
                                answer: Answer::Success,
                                applied,
                                met,
                            };
                            let (rebuilt, host) = (request.rebuilt, request.host);
                            if state.clients[index].pattern.has_token() {
                                let now = self.host_clock(host, state.now);
                                let token = self.token_of(&state, index);
                                state.tokens.insert(
                                    token,
                                    TokenRecord {
                                        rebuilt,
                                        phase: TokenPhase::Completed { at: now },
                                    },
                                );
                            }
                        }
                    }
                    ServerSide::Done { .. } | ServerSide::Dropped => return None,
                }
            }
            Action::ServerReplays { client, attempt } => {
                if self.decide(last, client as usize, attempt as usize) != Decision::Replay {
                    return None;
                }
                let applied = Self::table_changed(last, &state, client as usize);
                state.clients[client as usize].attempts[attempt as usize].server =
                    ServerSide::Done {
                        answer: Answer::Success,
                        applied,
                        met: self.record_met(last, client as usize),
                    };
            }
            Action::ServerRejects {
                client,
                attempt,
                answer,
            } => {
                if self.decide(last, client as usize, attempt as usize) != Decision::Reject(answer)
                {
                    return None;
                }
                let applied = Self::table_changed(last, &state, client as usize);
                state.clients[client as usize].attempts[attempt as usize].server =
                    ServerSide::Done {
                        answer,
                        applied,
                        met: self.record_met(last, client as usize),
                    };
            }
            Action::ResponseDelivered { client, attempt } => {
                state.clients[client as usize].attempts[attempt as usize].client =
                    ClientSide::Delivered;
            }
            Action::ResponseLost { client, attempt } => {
                let request = &mut state.clients[client as usize].attempts[attempt as usize];
                request.client = ClientSide::GaveUp;
                if self.mutation == Some(Mutation::TimeoutsCancelRequests) {
                    request.server = ServerSide::Dropped;
                }
            }
            Action::ClockTicks => {
                state.now += 1;
                for request in state
                    .clients
                    .iter_mut()
                    .flat_map(|client| client.attempts.iter_mut())
                {
                    if request.server == ServerSide::Pending {
                        request.server = ServerSide::Dropped;
                    }
                    if request.client == ClientSide::Waiting {
                        request.client = ClientSide::GaveUp;
                    }
                }
                let now = state.now;
                state.tokens.retain(|_, record| match record.phase {
                    TokenPhase::Completed { at } => self.is_live(at, now),
                    TokenPhase::Running | TokenPhase::InvalidTimestamp => true,
                });
            }
            Action::RecordLosesTimestamp { token } => {
                state.damages_left -= 1;
                state.tokens.get_mut(&token)?.phase = TokenPhase::InvalidTimestamp;
            }
            Action::ClientReads { client } => {
                let seen = Self::visible_to(last, client as usize);
                state.clients[client as usize].reconciled = Some(seen);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.property_defs()
            .iter()
            .map(PropertyDef::to_stateright)
            .collect()
    }

    // The Explorer's vocabulary is the CLI's (crate::view): protocol words, actors from 1.
    fn format_action(&self, action: &Action) -> String {
        crate::view::action_words(action)
    }

    fn format_step(&self, last_state: &TokenState, action: Action) -> Option<String> {
        crate::view::step_outcome(self, last_state, action)
    }

    fn as_svg(&self, path: stateright::Path<TokenState, Action>) -> Option<String> {
        Some(crate::view::explorer_svg(self, &path.into_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{run, CheckOptions, CheckReport};
    use std::collections::{BTreeSet, VecDeque};

    use Verdict::{Holds, Reached, Unreached, Violated};

    fn model(variant: &str, overrides: &[(&str, u32)]) -> TokenModel {
        let overrides: Vec<(String, u32)> = overrides
            .iter()
            .map(|(key, value)| (key.to_string(), *value))
            .collect();
        TokenModel::build(
            variant,
            &Bounds::resolve(TokenModel::BOUNDS, &overrides).unwrap(),
        )
        .unwrap()
    }

    /// Single-threaded, so the run is deterministic and its state counts can be pinned; polled
    /// often so that small runs do not wait out the default progress interval.
    fn check(model: TokenModel) -> CheckReport {
        run(
            model,
            &CheckOptions {
                threads: 1,
                progress_interval_millis: 10,
                ..Default::default()
            },
            &mut |_| {},
        )
    }

    /// The verdict table of `specs/tokened-writes.md`, columns tokened, tokenless, late-retry.
    const TABLE: &[(&str, [Verdict; 3])] = &[
        (T1_EXACTLY_ONCE, [Holds, Violated, Violated]),
        (T1_RETRY_WITHIN_WINDOW, [Reached, Reached, Unreached]),
        (T2_MISMATCH, [Holds, Holds, Holds]),
        (T2_MISMATCH_REJECTED, [Reached, Unreached, Unreached]),
        (T3_ATOMIC, [Holds, Holds, Holds]),
        (T3_LOST_AFTER_COMMIT, [Reached, Reached, Reached]),
        (T3_READ_BACK_WHOLE, [Reached, Reached, Reached]),
        (T4_HONEST_RETRY, [Holds, Holds, Holds]),
        (T4_ADD_DOUBLE_APPLIED, [Reached, Reached, Reached]),
        (T4_FIXED_PUT_CONVERGES, [Reached, Reached, Reached]),
        (T4_CREATE_CONDITION_FAILURE, [Reached, Reached, Reached]),
        (T4_UNTOKENED_REEXECUTES, [Unreached, Reached, Unreached]),
        (T4_TOKENED_REPLAY, [Reached, Unreached, Unreached]),
        (T4_EXPIRED_REEXECUTES, [Unreached, Unreached, Reached]),
        (T5_BAD_TOKEN, [Holds, Holds, Holds]),
        (T5_LONG_TOKEN_REJECTED, [Unreached, Unreached, Unreached]),
        (T5_DAMAGED_RECORD_REFUSED, [Reached, Unreached, Reached]),
        (liveness::T6_OUTCOME_KNOWN, [Holds, Holds, Holds]),
    ];

    /// Checks one variant at the CI bounds against [`TABLE`] and its pinned unique state count.
    fn assert_variant(variant: &str, unique_states: usize) -> CheckReport {
        let column = TokenModel::VARIANTS
            .iter()
            .position(|name| *name == variant)
            .unwrap();
        let report = check(model(variant, &[]));
        assert!(
            report.complete,
            "{variant}: the run must exhaust the state space"
        );
        let table: Vec<(&str, Verdict)> = TABLE
            .iter()
            .map(|(name, verdicts)| (*name, verdicts[column]))
            .collect();
        let verdicts: Vec<(&str, Verdict)> = report
            .properties
            .iter()
            .map(|p| (p.name, p.verdict))
            .collect();
        assert_eq!(
            verdicts, table,
            "{variant}: verdicts differ from the spec's table"
        );
        assert!(
            report.matches_expectations(),
            "{variant}: `expected` disagrees with the spec's table"
        );
        assert_eq!(
            report.unique_states, unique_states,
            "{variant}: unique state count changed"
        );
        report
    }

    /// Breadth-first search for the shortest path to a state where `goal` holds, in the model's
    /// order of initial states and actions, so the answer is deterministic. Written here because
    /// the stateright 0.31 BFS checker overwrites a property's discovery on every later matching
    /// state, so the trace `check::run` reports is a counterexample but not the shortest one.
    fn shortest_path(
        model: &TokenModel,
        goal: &dyn Fn(&TokenModel, &TokenState) -> bool,
    ) -> Option<Vec<String>> {
        let mut seen: BTreeSet<TokenState> = BTreeSet::new();
        let mut queue: VecDeque<(TokenState, Vec<String>)> = VecDeque::new();
        for init in model.init_states() {
            if seen.insert(init.clone()) {
                queue.push_back((init, Vec::new()));
            }
        }
        while let Some((state, path)) = queue.pop_front() {
            if goal(model, &state) {
                return Some(path);
            }
            let mut actions = Vec::new();
            model.actions(&state, &mut actions);
            for action in actions {
                let Some(next) = model.next_state(&state, action.clone()) else {
                    continue;
                };
                if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(model.step_words(&state, &action, &next));
                    queue.push_back((next, longer));
                }
            }
        }
        None
    }

    /// The properties of a run whose verdict differs from the honest model's expectation.
    fn deviations(report: &CheckReport) -> Vec<(&'static str, Verdict)> {
        report
            .properties
            .iter()
            .filter(|p| !p.matches())
            .map(|p| (p.name, p.verdict))
            .collect()
    }

    fn mutated(variant: &str, mutation: Mutation) -> CheckReport {
        mutated_at(variant, &[], mutation)
    }

    fn mutated_at(variant: &str, overrides: &[(&str, u32)], mutation: Mutation) -> CheckReport {
        let report = check(model(variant, overrides).with_mutation(Some(mutation)));
        assert!(
            report.complete,
            "{variant} with {mutation:?}: the run must exhaust the state space"
        );
        report
    }

    //= specs/tokened-writes.md#Verdicts
    //# With the token and identical retries inside the window, T1, T2, T3 and T4 hold.
    #[test]
    fn tokened_verdicts_and_state_count() {
        assert_variant("tokened", 283_295);
    }

    //= specs/tokened-writes.md#Verdicts
    //# Without a token, a retry after a lost commit executes the transaction again: T1 is violated.
    #[test]
    fn tokenless_verdicts_and_state_count() {
        assert_variant("tokenless", 59_193);
    }

    //= specs/tokened-writes.md#Verdicts
    //# A retry after the window is a new request and executes again: T1 is violated.
    #[test]
    fn late_retry_verdicts_and_state_count() {
        assert_variant("late-retry", 55_999);
    }

    //= specs/tokened-writes.md#T1
    //# A transaction intent is applied at most once, and a client told success finds it applied.
    #[test]
    fn tokenless_t1_shortest_counterexample() {
        let path = shortest_path(&model("tokenless", &[]), &|model, state| {
            !t1_exactly_once(model, state)
        });
        assert_eq!(
            path.unwrap(),
            [
                "C1 sends TransactWriteItems{ADD balance 5 on A, B} without token",
                "server starts C1's attempt 1: locks A, B",
                "server commits C1's attempt 1",
                "response to C1 lost (attempt 1)",
                "C1 retries without a token: TransactWriteItems{ADD balance 5 on A, B} without token",
                "server starts C1's attempt 2: locks A, B",
                "server commits C1's attempt 2",
            ]
        );
    }

    //= specs/tokened-writes.md#T1
    //# A transaction intent is applied at most once, and a client told success finds it applied.
    #[test]
    fn late_retry_t1_shortest_counterexample() {
        let path = shortest_path(&model("late-retry", &[]), &|model, state| {
            !t1_exactly_once(model, state)
        });
        assert_eq!(
            path.unwrap(),
            [
                "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
                "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
                "server commits t1 (attempt 1 of C1)",
                "response to C1 lost (attempt 1)",
                "clock ticks to 1",
                "clock passes the 10-minute window of t1 (now 2)",
                "C1 retries with token t1 (identical request)",
                "server starts t1 (attempt 2 of C1): locks A, B, records t1 as running",
                "server commits t1 (attempt 2 of C1)",
            ]
        );
    }

    //= specs/tokened-writes.md#T4
    //# Some tokened retry inside the window is answered success without applying anything.
    #[test]
    fn tokened_replay_shortest_example() {
        let path = shortest_path(&model("tokened", &[]), &t4_tokened_replay);
        assert_eq!(
            path.unwrap(),
            [
                "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
                "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
                "server commits t1 (attempt 1 of C1)",
                "response to C1 lost (attempt 1)",
                "C1 retries with token t1 (identical request)",
                "server finds t1 live: answers success for t1 (attempt 2 of C1), applies nothing",
            ]
        );
    }

    //= specs/tokened-writes.md#T2
    //# A request that meets a live or running token of other parameters is answered IdempotentParameterMismatch and applies nothing.
    #[test]
    fn ignoring_the_fingerprint_breaks_t2() {
        let report = mutated("tokened", Mutation::IgnoreFingerprint);
        assert_eq!(
            deviations(&report),
            [(T2_MISMATCH, Violated), (T2_MISMATCH_REJECTED, Unreached)]
        );
    }

    //= specs/tokened-writes.md#T3
    //# No state of the table, and no reconciliation read, shows some items of a transaction applied more often than others.
    #[test]
    fn committing_items_one_by_one_breaks_t3() {
        let report = mutated("tokened", Mutation::CommitItemsOneByOne);
        assert_eq!(deviations(&report), [(T3_ATOMIC, Violated)]);
    }

    //= specs/tokened-writes.md#T4
    //# An identical retry of a write that committed but lost its response gets the answer and the effect the retry table gives for the client's pattern.
    #[test]
    fn receipts_spanning_requests_break_t4() {
        // A success that changed nothing without a live identical token: observed, whatever the
        // pattern (here ADD, fixed put and the tokenless transaction).
        for variant in ["tokenless", "tokened"] {
            let report = mutated(variant, Mutation::ReceiptsSpanRequests);
            assert_eq!(
                deviations(&report),
                [
                    (T4_HONEST_RETRY, Violated),
                    (T4_CREATE_CONDITION_FAILURE, Unreached)
                ],
                "{variant}"
            );
        }
    }

    //= specs/tokened-writes.md#T3
    //# Some transaction commits and its response is lost: the outcome is unknown to the client.
    #[test]
    fn timeouts_that_cancel_requests_leave_no_unknown_outcome() {
        let report = mutated("tokened", Mutation::TimeoutsCancelRequests);
        assert_eq!(
            deviations(&report),
            [
                (T1_RETRY_WITHIN_WINDOW, Unreached),
                (T2_MISMATCH_REJECTED, Unreached),
                (T3_LOST_AFTER_COMMIT, Unreached),
                (T3_READ_BACK_WHOLE, Unreached),
                (T4_ADD_DOUBLE_APPLIED, Unreached),
                (T4_FIXED_PUT_CONVERGES, Unreached),
                (T4_CREATE_CONDITION_FAILURE, Unreached),
                (T4_TOKENED_REPLAY, Unreached),
                (T5_DAMAGED_RECORD_REFUSED, Unreached),
            ]
        );
        // The same false belief makes a late retry look safe: T1 would hold, so the late-retry
        // verdict depends on responses being lost after commit.
        let report = mutated("late-retry", Mutation::TimeoutsCancelRequests);
        assert!(deviations(&report).contains(&(T1_EXACTLY_ONCE, Holds)));
        assert!(deviations(&report).contains(&(T4_EXPIRED_REEXECUTES, Unreached)));
    }

    //= specs/tokened-writes.md#Verdicts
    //# Where a bound removes a case, the expectation follows the bound.
    #[test]
    fn expectations_follow_bounds() {
        let cases: &[(&str, &[(&str, u32)])] = &[
            ("tokened", &[("retries", 0)]),
            ("tokenless", &[("retries", 0)]),
            ("late-retry", &[("retries", 0)]),
            ("late-retry", &[("ticks", 1)]),
            ("late-retry", &[("retries", 2), ("clients", 1)]),
            ("tokened", &[("retries", 2), ("clients", 1)]),
            ("tokened", &[("damaged_records", 0)]),
            ("late-retry", &[("skew", 1), ("clients", 1)]),
            ("tokened", &[("skew", 2), ("clients", 1)]),
        ];
        for (variant, overrides) in cases {
            let report = check(model(variant, overrides));
            assert!(
                report.complete && report.matches_expectations(),
                "{variant} {overrides:?}: {:?}",
                deviations(&report)
            );
        }
    }

    //= specs/tokened-writes.md#T1
    //# A transaction intent is applied at most once, and a client told success finds it applied.
    #[test]
    fn a_host_clock_ahead_expires_a_live_token() {
        let bounds: &[(&str, u32)] = &[("clients", 1), ("skew", 1)];
        let report = check(model("tokened", bounds));
        assert!(
            report.complete && report.matches_expectations(),
            "{:?}",
            deviations(&report)
        );
        assert_eq!(report.unique_states, 3_450);
        let path = shortest_path(&model("tokened", bounds), &|model, state| {
            !t1_exactly_once(model, state)
        });
        assert_eq!(
            path.unwrap(),
            [
                "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1 via H1 (its clock reads 0)",
                "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
                "server commits t1 (attempt 1 of C1)",
                "response to C1 lost (attempt 1)",
                "clock ticks to 1",
                "C1 retries with token t1 (identical request) via H2 (its clock reads 2)",
                "server starts t1 (attempt 2 of C1): locks A, B, records t1 as running",
                "server commits t1 (attempt 2 of C1)",
            ]
        );
    }

    //= specs/tokened-writes.md#T1
    //# A transaction intent is applied at most once, and a client told success finds it applied.
    #[test]
    fn two_intents_sharing_a_token_lose_the_second() {
        let report = check(model("tokened", &[("shared_token", 1)]));
        assert!(
            report.complete && report.matches_expectations(),
            "{:?}",
            deviations(&report)
        );
        assert_eq!(report.unique_states, 270_964);
        let path = shortest_path(
            &model("tokened", &[("shared_token", 1)]),
            &|model, state| !t1_exactly_once(model, state),
        );
        assert_eq!(
            path.unwrap(),
            [
                "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
                "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
                "server commits t1 (attempt 1 of C1)",
                "C2 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
                "server finds t1 live: answers success for t1 (attempt 1 of C2), applies nothing",
                "C2 receives Success for attempt 1",
            ]
        );
    }

    //= specs/tokened-writes.md#T5
    //# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
    #[test]
    fn bad_tokens_fail_closed() {
        let report = check(model("tokened", &[("long_tokens", 1)]));
        assert!(
            report.complete && report.matches_expectations(),
            "{:?}",
            deviations(&report)
        );
        assert_eq!(report.unique_states, 366_561);
        let refused = shortest_path(&model("tokened", &[]), &t5_damaged_record_refused);
        assert_eq!(
            refused.unwrap()[4..],
            [
                "C1 retries with token t1 (identical request)",
                "the record of token t1 loses its valid creation timestamp",
                "server rejects t1 (attempt 2 of C1): InternalServerError",
            ]
        );
        // The clock never deletes a damaged record: it is neither live nor expired.
        let honest = model("tokened", &[]);
        let mut state = honest.init_states().remove(0);
        state.tokens.insert(
            0,
            TokenRecord {
                rebuilt: false,
                phase: TokenPhase::InvalidTimestamp,
            },
        );
        for _ in 0..2 {
            state = honest.next_state(&state, Action::ClockTicks).unwrap();
        }
        assert_eq!(state.tokens[&0].phase, TokenPhase::InvalidTimestamp);
    }

    //= specs/tokened-writes.md#T5
    //# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
    #[test]
    fn the_reach_bound_set_checks_the_malformed_token_half_of_t5() {
        let set = &BOUND_SETS[0];
        assert_eq!(
            (set.name, set.variant, set.reaches),
            ("reach", "tokened", &["T5"][..])
        );
        let ci = check(model("tokened", &[]));
        assert_eq!(ci.property(T5_LONG_TOKEN_REJECTED).verdict, Unreached);
        let reach = check(model(set.variant, set.overrides));
        assert!(reach.complete && reach.matches_expectations());
        for name in [T5_LONG_TOKEN_REJECTED, T5_DAMAGED_RECORD_REFUSED] {
            assert_eq!(reach.property(name).verdict, Reached, "{name}");
        }
    }

    //= specs/tokened-writes.md#T5
    //# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
    #[test]
    fn bad_tokens_that_run_break_t5() {
        let report = mutated_at(
            "tokened",
            &[("long_tokens", 1)],
            Mutation::LongTokenTruncated,
        );
        assert_eq!(
            deviations(&report),
            [
                (T1_EXACTLY_ONCE, Violated),
                (T5_BAD_TOKEN, Violated),
                (T5_LONG_TOKEN_REJECTED, Unreached)
            ]
        );
        let report = mutated("tokened", Mutation::DamagedRecordReadAsExpired);
        assert_eq!(
            deviations(&report),
            [
                (T1_EXACTLY_ONCE, Violated),
                (T5_BAD_TOKEN, Violated),
                (T5_DAMAGED_RECORD_REFUSED, Unreached)
            ]
        );
        let path = shortest_path(
            &model("tokened", &[]).with_mutation(Some(Mutation::DamagedRecordReadAsExpired)),
            &|model, state| !t5_bad_token(model, state),
        );
        assert_eq!(
            path.unwrap().last().unwrap(),
            "server starts t1 (attempt 2 of C1): locks A, B, records t1 as running"
        );
    }

    //= specs/tokened-writes.md#Bounds
    //# An unknown variant or an out-of-range bound is refused with the valid choices named.
    #[test]
    fn bad_input_names_the_valid_choices() {
        let bounds = Bounds::resolve(TokenModel::BOUNDS, &[]).unwrap();
        let error = TokenModel::build("tokenful", &bounds).err().unwrap();
        assert_eq!(
            error.to_string(),
            "unknown variant `tokenful` of model `token`; valid variants: tokened, tokenless, late-retry"
        );
        let error = Bounds::resolve(TokenModel::BOUNDS, &[("window".to_string(), 9)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "bound window=9 is out of range; valid range: 1..=4"
        );
    }
}
