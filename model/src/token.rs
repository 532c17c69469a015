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
//!
//! Layout (one job per file): [`state`] clients, attempts, the table and the token records;
//! [`actions`] the action vocabulary and which actions are enabled; [`client`] when a client
//! retries or reconciles; [`server`] the server's rules (the token classifier and the decision
//! on a pending request); [`transitions`] one step function per action; [`properties`] T1-T5
//! with their `sometimes` partners, classified on their own by [`observed`]; [`liveness`] T6;
//! [`spec`] variants, the bound table and the expected verdicts; [`step_words`] and [`words`]
//! the protocol words; [`encoding`] the ITF traces; [`scale`] symmetry and independence.

mod actions;
mod client;
mod encoding;
mod liveness;
mod observed;
mod properties;
mod scale;
mod server;
mod spec;
mod state;
mod step_words;
mod transitions;
mod words;

#[cfg(test)]
mod tests;

use crate::check::{BoundSpec, Bounds, Kind, ModelSpec, PropertyDef, SpecError, Verdict};
use stateright::{Model, Property};
use std::collections::BTreeMap;

pub use actions::Action;
pub use properties::*;
use server::Decision;
pub use spec::BOUND_SETS;
pub use state::*;

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
        self.enabled_actions(state, actions);
    }

    fn next_state(&self, last: &TokenState, action: Action) -> Option<TokenState> {
        let mut state = last.clone();
        self.step(last, &mut state, action)?;
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
