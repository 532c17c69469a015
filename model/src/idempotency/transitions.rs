//! One step function per action of the middleware model, for the actions whose step is long:
//! the handler's answer, the capture, the inline finalize and the drop guard's, the tail, a
//! client's cancellation and the reconciler. [`IdempotencyModel::step`] dispatches.
//!
//! Invariants: a step that does not apply at a state (a stage the action does not fit, a
//! database answer the row contradicts) answers `None`; history is written the same way by every
//! variant.

use super::*;

impl IdempotencyModel {
    /// Applies `action` to `state` (a copy of the state it is enabled at); `None` when the
    /// action does not apply there.
    pub(super) fn step(
        &self,
        mut state: IdempotencyState,
        action: Action,
    ) -> Option<IdempotencyState> {
        match action {
            Action::ClientSends {
                client,
                fingerprint,
            } => {
                state.clients[client] = Client {
                    fingerprint,
                    stage: Stage::Claiming { attempt: 0 },
                    stalled: false,
                };
            }
            Action::MiddlewareClaims { client } => self.claim(&mut state, client),
            Action::MiddlewareClaimFails { client, committed } => {
                state.budget.claim_faults -= 1;
                let fingerprint = state.clients[client].fingerprint;
                if committed && self.claims(state.row.as_ref(), fingerprint, state.now) {
                    // The claim took the key but the layer heard an error: nobody owns the row.
                    Self::grant(&mut state, client);
                }
                state.clients[client].stage = Stage::Done(Answer::Unavailable);
            }
            Action::MiddlewareReadsRow { client } => self.read_row(&mut state, client),
            Action::HandlerResponds { client, outcome } => {
                return self.handler_responds(state, client, outcome)
            }
            Action::MiddlewareCaptures { client } => {
                return self.middleware_captures(state, client)
            }
            Action::MiddlewareFinalizes { client, result } => {
                return self.middleware_finalizes(state, client, result)
            }
            Action::TailStreams { client } => return self.tail_streams(state, client),
            Action::ClientCancels {
                client,
                at,
                in_flight_commits,
            } => return self.client_cancels(state, client, at, in_flight_commits),
            Action::DropGuardFinalizes { client, result } => {
                return self.drop_guard_finalizes(state, client, result)
            }
            Action::ClockTicks => {
                state.budget.ticks -= 1;
                state.now += 1;
                self.renew_leases(&mut state);
            }
            Action::CleanupPurges => state.row = None,
            Action::ProcessStalls { client } => {
                state.budget.process_faults -= 1;
                state.clients[client].stalled = true;
            }
            Action::ProcessDies { client } => {
                state.budget.process_faults -= 1;
                let generation = state.clients[client].stage.working_on()?;
                state.history.ended.insert(generation, Ending::Died);
                state.clients[client].stage = Stage::Gone;
            }
            Action::ReconcilerResolves { applied } => {
                return self.reconciler_resolves(state, applied)
            }
        }
        Some(state)
    }

    fn handler_responds(
        &self,
        mut state: IdempotencyState,
        client: usize,
        outcome: Outcome,
    ) -> Option<IdempotencyState> {
        let Stage::Running { generation } = state.clients[client].stage else {
            return None;
        };
        state.history.handler.insert(generation, outcome);
        // A 2xx means the handler committed its effects, unless they wait for the
        // finalize's commit (`atomic`).
        if outcome.is_success()
            && (!self.atomic() || self.mutated(Mutation::AtomicEffectsCommitAtResponse))
        {
            state.history.effects.insert(generation);
        }
        state.clients[client].stage = if outcome == Outcome::HandlerError {
            // No response to capture: the layer finalizes failed and returns the error.
            Stage::Finalizing {
                generation,
                outcome,
                write: Write::Failed,
                received: Received::exactly(outcome),
                attempts: 0,
            }
        } else {
            Stage::Capturing {
                generation,
                outcome,
            }
        };
        Some(state)
    }

    fn middleware_captures(
        &self,
        mut state: IdempotencyState,
        client: usize,
    ) -> Option<IdempotencyState> {
        let Stage::Capturing {
            generation,
            outcome,
        } = state.clients[client].stage
        else {
            return None;
        };
        let (write, received) = self.capture(outcome);
        if !outcome.is_success() && self.mutated(Mutation::NonSuccessNotFinalized) {
            state.history.delivered.insert(generation, received);
            state.clients[client].stage = Stage::Done(Answer::Fresh {
                success: false,
                received,
            });
        } else {
            state.clients[client].stage = Stage::Finalizing {
                generation,
                outcome,
                write,
                received,
                attempts: 0,
            };
        }
        Some(state)
    }

    fn middleware_finalizes(
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
            attempts,
        } = state.clients[client].stage
        else {
            return None;
        };
        let applies = self.finalize_applies(state.row.as_ref(), generation);
        if self.atomic() && outcome.is_success() {
            return self.finalize_atomic(state, client, result);
        }
        match result {
            DbResult::Matched | DbResult::NoRowMatched => {
                if (result == DbResult::Matched) != applies {
                    return None;
                }
                if applies {
                    Self::apply_write(&mut state, generation, write);
                }
                let ending = if applies {
                    Ending::Applied
                } else {
                    Ending::Lost
                };
                self.after_finalize(&mut state, client, generation, outcome, received, ending);
            }
            DbResult::Error { committed } => {
                state.budget.finalize_faults -= 1;
                *state
                    .history
                    .finalize_errors
                    .get_or_insert_with(generation, || 0) += 1;
                if committed && applies {
                    Self::apply_write(&mut state, generation, write);
                }
                if attempts + 1 < self.attempts_of_one_finalize() {
                    state.clients[client].stage = Stage::Finalizing {
                        generation,
                        outcome,
                        write,
                        received,
                        attempts: attempts + 1,
                    };
                } else {
                    self.after_finalize(
                        &mut state,
                        client,
                        generation,
                        outcome,
                        received,
                        Ending::Unknown,
                    );
                }
            }
        }
        Some(state)
    }

    fn tail_streams(&self, mut state: IdempotencyState, client: usize) -> Option<IdempotencyState> {
        let Stage::Streaming {
            generation,
            received,
        } = state.clients[client].stage
        else {
            return None;
        };
        // The tail's frames follow whatever went out with the head.
        let received = Received {
            tail: true,
            ..received
        };
        state.history.delivered.insert(generation, received);
        state.clients[client].stage = Stage::Done(Answer::Fresh {
            success: true,
            received,
        });
        Some(state)
    }

    fn client_cancels(
        &self,
        mut state: IdempotencyState,
        client: usize,
        at: AwaitPoint,
        in_flight_commits: bool,
    ) -> Option<IdempotencyState> {
        state.budget.cancellations -= 1;
        let stage = state.clients[client].stage;
        if stage.await_point() != Some(at) {
            return None;
        }
        if let Stage::Finalizing {
            generation,
            write,
            outcome,
            ..
        } = stage
        {
            if in_flight_commits && self.finalize_applies(state.row.as_ref(), generation) {
                Self::apply_write(&mut state, generation, write);
                if self.atomic() && outcome.is_success() {
                    state.history.effects.insert(generation);
                }
            }
        }
        let after_success = match stage {
            Stage::Capturing {
                generation,
                outcome,
            }
            | Stage::Finalizing {
                generation,
                outcome,
                ..
            } => Some((generation, outcome.is_success())),
            _ => None,
        };
        state.clients[client].stage = match after_success {
            // The drop guard (D5): armed after the 2xx, it finalizes the sentinel anyway.
            Some((generation, true)) if self.has_guard() => Stage::Guarding {
                generation,
                attempts: 0,
            },
            // A non-2xx (no guard covers it), or a 2xx without a guard: the client's
            // request is gone, and with it (`atomic`) the uncommitted effects.
            Some((generation, _)) => {
                state.history.ended.insert(generation, Ending::Cancelled);
                Stage::Gone
            }
            _ => Stage::Gone,
        };
        Some(state)
    }

    fn drop_guard_finalizes(
        &self,
        mut state: IdempotencyState,
        client: usize,
        result: DbResult,
    ) -> Option<IdempotencyState> {
        let Stage::Guarding {
            generation,
            attempts,
        } = state.clients[client].stage
        else {
            return None;
        };
        let applies = self.finalize_applies(state.row.as_ref(), generation);
        let write = Write::Succeeded(Stored::Sentinel);
        let ending = match result {
            DbResult::Matched | DbResult::NoRowMatched => {
                if (result == DbResult::Matched) != applies {
                    return None;
                }
                if applies {
                    Self::apply_write(&mut state, generation, write);
                }
                Some(if applies {
                    Ending::Applied
                } else {
                    Ending::Lost
                })
            }
            DbResult::Error { committed } => {
                state.budget.finalize_faults -= 1;
                *state
                    .history
                    .finalize_errors
                    .get_or_insert_with(generation, || 0) += 1;
                if committed && applies {
                    Self::apply_write(&mut state, generation, write);
                }
                (attempts + 1 >= self.attempts_of_one_finalize()).then_some(Ending::Unknown)
            }
        };
        state.clients[client].stage = match ending {
            Some(ending) => {
                state.history.ended.insert(generation, ending);
                Stage::Gone
            }
            None => Stage::Guarding {
                generation,
                attempts: attempts + 1,
            },
        };
        Some(state)
    }

    fn reconciler_resolves(
        &self,
        mut state: IdempotencyState,
        applied: bool,
    ) -> Option<IdempotencyState> {
        let row = state.row.as_mut()?;
        let generation = row.generation;
        if applied != state.history.effects.contains(&generation) {
            return None;
        }
        let write = if applied {
            // The response is not known: the sentinel, replayed with its problem body.
            Write::Succeeded(Stored::Sentinel)
        } else {
            Write::Failed
        };
        Self::apply_write(&mut state, generation, write);
        state.history.ended.insert(generation, Ending::Reconciled);
        Some(state)
    }
}
