//! The server's rules for a pending request: the token classifier ([`TokenSeen`]) and the
//! decision (begin, commit, replay, or reject with an answer), mutations included.
//!
//! Invariants: the decision is computed from the state alone, so a step re-checks it; the
//! properties never read the classifier (they classify the record the server met on their own).

use super::*;

/// The server's decision for a pending request, computed from the state alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    Begin,
    Commit,
    Replay,
    Reject(Answer),
}

impl TokenModel {
    /// The server's classifier: what a tokened request's record means to the decision (the
    /// spec's server rules read the record through it).
    pub(super) fn token_seen(
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
    pub(super) fn same_fingerprint(&self, record: &TokenRecord, rebuilt: bool) -> bool {
        self.mutation == Some(Mutation::ClassifierIgnoresFingerprint) || record.rebuilt == rebuilt
    }

    /// The record stored under the token of client `client`'s request, as the table holds it
    /// when the server takes the request up (`None` for a request without a token): what the
    /// properties classify on their own.
    pub(super) fn record_met(&self, state: &TokenState, client: usize) -> Option<TokenRecord> {
        if !state.clients[client].pattern.has_token() {
            return None;
        }
        state.tokens.get(&self.token_of(state, client)).copied()
    }

    /// Every transaction writes the same accounts, so one running transaction locks them all.
    pub(super) fn accounts_locked(state: &TokenState) -> bool {
        state.clients.iter().any(|client| {
            client
                .attempts
                .iter()
                .any(|a| matches!(a.server, ServerSide::Running { .. }))
        })
    }

    /// The server's answer to a pending request (the spec's server rules), with the mutations.
    pub(super) fn decide(&self, state: &TokenState, client: usize, attempt: usize) -> Decision {
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
}
