//! The token model's state, role by role: clients with their pattern and attempts (each with a
//! server side and a client side), the table as counts of applications per client and item,
//! the token records, and the clock.
//!
//! Invariants: ordered collections only; a request is processed in the tick it was sent, so
//! an attempt's `sent_at` is also its processing time; `applied` and `met` record what the
//! server step observed, for the properties to classify on their own.

use super::*;

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
    pub(super) fn is_retryable(self) -> bool {
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
    pub(super) fn applied(&self) -> bool {
        matches!(self.server, ServerSide::Done { applied: true, .. })
    }

    pub(super) fn answer(&self) -> Option<Answer> {
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
