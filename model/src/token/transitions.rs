//! One step function per action: what a send or retry, each server step, a delivery or a loss,
//! the clock, record damage and a reconciling read do to the state. [`TokenModel::step`]
//! dispatches.
//!
//! Invariants: a server step re-checks the server's decision on the state before it and refuses
//! (`None`) when another decision holds; `applied` is observed on the table (a changed count),
//! never declared by the step.

use super::*;

impl TokenModel {
    /// Applies `action` to `state` (a copy of `last`); `None` when the action does not apply.
    pub(super) fn step(
        &self,
        last: &TokenState,
        state: &mut TokenState,
        action: Action,
    ) -> Option<()> {
        match action {
            Action::ClientSends { client, host, .. }
            | Action::ClientRetries { client, host, .. } => {
                self.client_sends(last, state, action, client, host)
            }
            Action::ServerBegins { client, attempt } => {
                self.server_begins(last, state, client, attempt)?
            }
            Action::ServerCommits { client, attempt } => {
                self.server_commits(last, state, client as usize, attempt as usize)?
            }
            Action::ServerReplays { client, attempt } => {
                if self.decide(last, client as usize, attempt as usize) != Decision::Replay {
                    return None;
                }
                let applied = Self::table_changed(last, state, client as usize);
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
                let applied = Self::table_changed(last, state, client as usize);
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
            Action::ClockTicks => self.clock_ticks(state),
            Action::RecordLosesTimestamp { token } => {
                state.damages_left -= 1;
                state.tokens.get_mut(&token)?.phase = TokenPhase::InvalidTimestamp;
            }
            Action::ClientReads { client } => {
                let seen = Self::visible_to(last, client as usize);
                state.clients[client as usize].reconciled = Some(seen);
            }
        }
        Some(())
    }

    /// A first send or a retry: a new attempt, waiting, processed in this tick if at all.
    fn client_sends(
        &self,
        last: &TokenState,
        state: &mut TokenState,
        action: Action,
        client: ClientId,
        host: Host,
    ) {
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

    /// A transaction begins: accounts locked, its token recorded as running.
    fn server_begins(
        &self,
        last: &TokenState,
        state: &mut TokenState,
        client: ClientId,
        attempt: u8,
    ) -> Option<()> {
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
            let token = self.token_of(state, client as usize);
            state.tokens.insert(
                token,
                TokenRecord {
                    rebuilt,
                    phase: TokenPhase::Running,
                },
            );
        }
        Some(())
    }

    /// A single-item write commits at once; a running transaction commits all its items (one
    /// under [`Mutation::CommitItemsOneByOne`]) and, when done, its token's completion time.
    fn server_commits(
        &self,
        last: &TokenState,
        state: &mut TokenState,
        index: usize,
        number: usize,
    ) -> Option<()> {
        match last.clients[index].attempts[number].server {
            ServerSide::Pending => {
                if self.decide(last, index, number) != Decision::Commit {
                    return None;
                }
                Self::apply_single_item(state, index);
                state.clients[index].attempts[number].server = ServerSide::Done {
                    answer: Answer::Success,
                    applied: Self::table_changed(last, state, index),
                    met: None,
                };
            }
            ServerSide::Running { items_applied, met } => {
                self.transaction_commits(last, state, index, number, items_applied, met)
            }
            ServerSide::Done { .. } | ServerSide::Dropped => return None,
        }
        Some(())
    }

    fn transaction_commits(
        &self,
        last: &TokenState,
        state: &mut TokenState,
        index: usize,
        number: usize,
        items_applied: u8,
        met: Option<TokenRecord>,
    ) {
        let items = ACCOUNTS;
        let upto = if self.mutation == Some(Mutation::CommitItemsOneByOne) {
            items_applied + 1
        } else {
            items
        };
        for item in items_applied..upto {
            state.table.applications[index][item as usize] += 1;
        }
        let applied = items_applied > 0 || Self::table_changed(last, state, index);
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
                let token = self.token_of(state, index);
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

    /// The clock drops every unprocessed request, every waiting client gives up, and expired
    /// token records are deleted (semantic expiry: deleting them changes nothing).
    fn clock_ticks(&self, state: &mut TokenState) {
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

    pub(super) fn apply_single_item(state: &mut TokenState, client: usize) {
        state.table.applications[client][0] += 1;
        match state.clients[client].pattern {
            Pattern::PutFixedProfile => state.table.profile_holder = Some(client as ClientId),
            Pattern::CreateOrderIfAbsent => state.table.order_owner = Some(client as ClientId),
            _ => {}
        }
    }

    /// Whether a server step changed the client's items: what `applied` records, observed on
    /// the table rather than declared by the step.
    pub(super) fn table_changed(before: &TokenState, after: &TokenState, client: usize) -> bool {
        before.table.applications[client] != after.table.applications[client]
    }

    /// What a read of the client's items shows about the client's own write.
    pub(super) fn visible_to(state: &TokenState, client: usize) -> Vec<u8> {
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
