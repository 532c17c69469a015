//! The action vocabulary (one actor and one verb per action, one request the real code sends
//! per action) and which actions are enabled at a state, with the sound reductions of
//! specs/relay-append.md ("Reductions") that prune interleavings.
//!
//! Invariants: enabled actions are listed in a fixed order (writers, items, pullers, the fold
//! consumer, the truncator); a reduction never removes an action kind, only interleavings.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Strongly consistent Query of seq = 0: the counter (the first op of a push, or after a
    /// lost round without a usable hint). A push's first read is preceded by its claim check
    /// when the push has two ops or more ([`RelayModel::checks_claims_first`]).
    WriterReadsCounter {
        writer: u8,
    },
    /// ADD-era: UpdateItem ADD next_seq 1.
    WriterAddsToCounter {
        writer: u8,
    },
    /// TransactWriteItems of the current round, processed by the server.
    WriterSendsRound {
        writer: u8,
    },
    WriterReceivesResponse {
        writer: u8,
    },
    /// The round committed but its response never reaches the writer (unknown outcome).
    ResponseLost {
        writer: u8,
    },
    /// GetItem of the op's claim after the claim condition failed.
    WriterReadsClaim {
        writer: u8,
    },
    /// BatchGetItem (strongly consistent) of the claims of the push's remaining ops.
    WriterReadsClaims {
        writer: u8,
    },
    /// Query seq > 0, ScanIndexForward = false, Limit 1.
    WriterQueriesTop {
        writer: u8,
    },
    /// The push's deadline passed before its next round: the push ends with the typed error.
    PushDeadlinePasses {
        writer: u8,
    },
    /// One pending item of a committed transaction becomes visible.
    ItemApplied {
        key: Key,
    },
    /// Query seq > cursor, Limit page_limit; the puller stores the page's last seq as its cursor.
    PullerQueries {
        puller: u8,
    },
    /// The fold consumer takes the stream record of the op at `seq`.
    FolderReceivesRecord {
        seq: Seq,
    },
    /// DeleteItem of the oldest op (truncation).
    TruncatorDeletes {
        seq: Seq,
    },
}

impl RelayModel {
    /// The push deadline has passed for a writer about to read the counter or send a round.
    pub(super) fn deadline_passed(&self, writer: &Writer) -> bool {
        self.bounds.push_rounds_max > 0
            && writer.push_rounds >= self.bounds.push_rounds_max
            && !self.has(Mutation::NoPushDeadline)
    }

    /// The model's actions at `state`; `reduced`: with the sound reductions of
    /// specs/relay-append.md ("Reductions"), which prune interleavings.
    pub(super) fn actions_of(&self, state: &RelayState, actions: &mut Vec<Action>, reduced: bool) {
        if reduced {
            // Reduction (a): a response that cannot be lost is taken before anything else
            // happens (specs/relay-append.md, "Reductions").
            let ready = state
                .writers
                .iter()
                .enumerate()
                .position(|(index, writer)| match &writer.phase {
                    Phase::Sent { outcome, .. } => {
                        *outcome != TransactOutcome::Committed
                            || state.lost_responses_left == 0
                            || self.build_of(index) == Build::AddEra
                    }
                    _ => false,
                });
            if let Some(index) = ready {
                actions.push(Action::WriterReceivesResponse {
                    writer: index as u8,
                });
                return;
            }
        }
        for (index, writer) in state.writers.iter().enumerate() {
            let w = index as u8;
            match (&writer.phase, self.build_of(index)) {
                (Phase::Ready, _) if self.deadline_passed(writer) => {
                    actions.push(Action::PushDeadlinePasses { writer: w })
                }
                (Phase::Ready, Build::New) => match writer.counter {
                    Counter::Unknown => actions.push(Action::WriterReadsCounter { writer: w }),
                    Counter::Known(_) => actions.push(Action::WriterSendsRound { writer: w }),
                },
                (Phase::Ready, Build::AddEra) => {
                    actions.push(Action::WriterAddsToCounter { writer: w })
                }
                (Phase::Allocated { .. }, _) => {
                    actions.push(Action::WriterSendsRound { writer: w })
                }
                (Phase::Sent { outcome, .. }, _) => {
                    actions.push(Action::WriterReceivesResponse { writer: w });
                    // The legacy build's handling of an unknown outcome is not what this model
                    // is about: only new-build responses are lost.
                    if *outcome == TransactOutcome::Committed
                        && state.lost_responses_left > 0
                        && self.build_of(index) == Build::New
                    {
                        actions.push(Action::ResponseLost { writer: w });
                    }
                }
                (Phase::ReadingClaim { .. }, _) => {
                    actions.push(Action::WriterReadsClaim { writer: w })
                }
                (Phase::ReadingClaims, _) => actions.push(Action::WriterReadsClaims { writer: w }),
                (Phase::QueryingTop, _) => actions.push(Action::WriterQueriesTop { writer: w }),
                (Phase::Done | Phase::Failed(_), _) => {}
            }
        }
        for key in state.table.pending.keys() {
            actions.push(Action::ItemApplied { key: *key });
        }
        for (index, puller) in state.pullers.iter().enumerate() {
            // A pull that returns nothing changes nothing: always possible (a self-loop), so a
            // puller can keep pulling; only pages with ops spend `pulls_per_puller` (R10).
            if puller.pulls_left > 0 || self.page_of(state, puller).is_empty() {
                actions.push(Action::PullerQueries {
                    puller: index as u8,
                });
            }
        }
        if let Some(folder) = state.folders.first() {
            for seq in state.table.committed_ops().into_keys() {
                if !folder.folded.contains(&seq) {
                    actions.push(Action::FolderReceivesRecord { seq });
                }
            }
        }
        if let Some(seq) = self.truncatable(state) {
            actions.push(Action::TruncatorDeletes { seq });
        }
    }

    /// The page a puller's next Query answers.
    pub(crate) fn page_of(&self, state: &RelayState, puller: &Puller) -> Vec<(Seq, OpId)> {
        state
            .table
            .query_after(puller.cursor, self.bounds.page_limit as usize)
    }

    /// The op truncation may delete next: the oldest visible op below the op the counter points
    /// at, that every puller and fold consumer is past.
    pub(super) fn truncatable(&self, state: &RelayState) -> Option<Seq> {
        if state.truncations_left == 0 {
            return None;
        }
        let (seq, _) = state.table.query_after(0, 1).into_iter().next()?;
        let counter = state.table.counter();
        //= specs/relay-append.md#R9
        //# Truncation deletes only ops below the op the counter points at: the op at the counter's seq is kept.
        let below_counter = if self.has(Mutation::TruncateCounterOp) {
            seq <= counter
        } else {
            seq < counter
        };
        let consumed = state.pullers.iter().all(|puller| puller.cursor >= seq)
            && state.folders.iter().all(|folder| folder.watermark >= seq);
        (below_counter && consumed && !state.table.pending.contains_key(&Key::Op(seq)))
            .then_some(seq)
    }
}
