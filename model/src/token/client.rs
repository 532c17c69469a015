//! What a client does after an attempt: whether it may retry (retries left, the last answer
//! retryable, the variant's timing for the transaction) and when it reconciles by reading its
//! items back.
//!
//! Invariants: a client reconciles once, only when it holds no answer it trusts and will never
//! retry again; every retry counts against the bound unless a mutation says otherwise.

use super::*;

impl TokenModel {
    /// The transaction's retry deadline as the variant's clients keep it.
    pub(super) fn transaction_timing_allows(&self, state: &TokenState, client: &Client) -> bool {
        let deadline = client.attempts[0].sent_at + self.limits.window;
        match self.kind {
            Variant::Tokened | Variant::Tokenless => state.now < deadline,
            Variant::LateRetry => state.now >= deadline,
        }
    }

    pub(super) fn retries_left(&self, client: &Client) -> bool {
        client.attempts.len() <= self.limits.retries as usize
    }

    /// The last attempt left the client without a final answer.
    pub(super) fn last_attempt_retryable(client: &Client) -> bool {
        match client.attempts.last() {
            None => false,
            Some(last) => match last.client {
                ClientSide::GaveUp => true,
                ClientSide::Delivered => last.answer().is_some_and(Answer::is_retryable),
                ClientSide::Waiting => false,
            },
        }
    }

    pub(super) fn may_retry(&self, state: &TokenState, client: &Client) -> bool {
        client.reconciled.is_none()
            && (self.retries_left(client) || self.retries_in_progress_again(client))
            && Self::last_attempt_retryable(client)
            && (!client.pattern.is_transaction() || self.transaction_timing_allows(state, client))
    }

    /// Under [`Mutation::RetriesForeverOnInProgress`]: the client's last attempt was answered
    /// TransactionInProgress, and it resends without counting.
    pub(super) fn retries_in_progress_again(&self, client: &Client) -> bool {
        self.mutation == Some(Mutation::RetriesForeverOnInProgress)
            && client.attempts.last().is_some_and(|last| {
                last.client == ClientSide::Delivered
                    && last.answer() == Some(Answer::TransactionInProgress)
            })
    }

    /// A client reconciles once it has no answer it trusts and will never retry again.
    pub(super) fn may_read(&self, state: &TokenState, client: &Client) -> bool {
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
}
