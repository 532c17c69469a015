//! The action vocabulary (actor + verb; attempts are indexes into the client's attempt list)
//! and which actions are enabled at a state: sends and retries, the server's one decided step
//! per pending request, deliveries and losses, the clock and record damage.
//!
//! Invariants: one server action per pending request, the one the server's rules decide;
//! the clock ticks only when nothing holds it (no running transaction, no answer on its way).

use super::*;

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

impl TokenModel {
    /// The clock waits for running transactions and for responses on their way to a waiting
    /// client, so that every request is processed, and every answer lost or delivered, in the tick
    /// it was sent.
    pub(super) fn may_tick(&self, state: &TokenState) -> bool {
        state.now < self.limits.ticks && Self::clock_free(state)
    }

    /// Nothing holds the clock back: no transaction runs and no answer is on its way.
    pub(super) fn clock_free(state: &TokenState) -> bool {
        state.clients.iter().all(|client| {
            client.attempts.iter().all(|a| {
                let running = matches!(a.server, ServerSide::Running { .. });
                let answer_on_its_way =
                    matches!(a.server, ServerSide::Done { .. }) && a.client == ClientSide::Waiting;
                !running && !answer_on_its_way
            })
        })
    }

    /// The actions enabled at `state`, in client order, then the clock, then record damage.
    pub(super) fn enabled_actions(&self, state: &TokenState, actions: &mut Vec<Action>) {
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
}
