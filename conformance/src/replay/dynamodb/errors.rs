//! The error a push ends with, compared with the model's: not only that the push failed, but
//! which typed error the store answered, since the relay maps each one to a different answer
//! (a 503 for an unavailable backend, a 409 or a 500 for the others) and a client retries by it.
//!
//! Invariant: every failure phase of the model maps to the store errors that report it; a push
//! that failed in the model and answered another kind of error diverges.

use oncecheck_model::relay::{Action, AppendError, Build, Phase, RelayModel, RelayState};
use oncecheck_store::StoreError;

/// The store errors that report the model's failure of one writer's push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ExpectedError {
    /// Over the contention budget after `lost_rounds` lost rounds in a row, some of them lost to
    /// other writers: `ContentionBudgetExhausted`.
    Contention {
        lost_rounds: u32,
    },
    /// Over the budget with every lost round in the row a lost response: `Unavailable`.
    Unavailable {
        attempts: u32,
    },
    SeqOverflow,
    /// The claim read-back found another op's claim, or none.
    ClaimUnreadable,
    /// The ADD-era writer's own refusal (the seam's legacy writer): any error.
    AddEraRefused,
}

impl ExpectedError {
    /// What the model's failed `writer` must have answered, from its last state and the path
    /// that led there; `None` when the push did not fail or ended at its deadline step (the
    /// replay ends the task there, so there is no answer to compare).
    pub(super) fn of(
        model: &RelayModel,
        path: &[(RelayState, Option<Action>)],
        writer: usize,
    ) -> Option<ExpectedError> {
        let last = &path.last()?.0;
        let Phase::Failed(error) = &last.writers[writer].phase else {
            return None;
        };
        if model.build_of(writer) == Build::AddEra {
            return Some(ExpectedError::AddEraRefused);
        }
        match error {
            AppendError::ContentionExhausted => {
                // The model gives up at the first lost round over the budget (a finished
                // writer's state keeps only its phase, so the count is not in the last state).
                let lost_rounds = u32::from(model.bounds.lost_rounds_max) + 1;
                if lost_in_the_row_were_all_responses(path, writer) {
                    Some(ExpectedError::Unavailable {
                        attempts: lost_rounds,
                    })
                } else {
                    Some(ExpectedError::Contention { lost_rounds })
                }
            }
            AppendError::SeqOverflow => Some(ExpectedError::SeqOverflow),
            AppendError::ClaimUnreadable => Some(ExpectedError::ClaimUnreadable),
            AppendError::AddEraWriteRefused => Some(ExpectedError::AddEraRefused),
            AppendError::DeadlineExceeded => None,
        }
    }

    /// Whether the store's `actual` error reports this failure.
    pub(super) fn is_reported_by(&self, actual: &StoreError) -> bool {
        match (self, actual) {
            (
                ExpectedError::Contention { lost_rounds },
                StoreError::ContentionBudgetExhausted {
                    lost_rounds: actual,
                },
            ) => lost_rounds == actual,
            (
                ExpectedError::Unavailable { attempts },
                StoreError::Unavailable { attempts: actual },
            ) => attempts == actual,
            (ExpectedError::SeqOverflow, StoreError::SeqOverflow { .. }) => true,
            (
                ExpectedError::ClaimUnreadable,
                StoreError::ClaimForeign { .. } | StoreError::ClaimVanished { .. },
            ) => true,
            (ExpectedError::AddEraRefused, _) => true,
            _ => false,
        }
    }
}

/// Whether every lost round of `writer`'s last row of lost rounds was a lost response (an
/// unknown outcome to the store), walking the path back from its end to the row's first.
fn lost_in_the_row_were_all_responses(
    path: &[(RelayState, Option<Action>)],
    writer: usize,
) -> bool {
    for pair in path.windows(2).rev() {
        let [(before, action), (after, _)] = pair else {
            unreachable!("windows of two")
        };
        let lost_before = before.writers[writer].lost_in_a_row;
        // The round over the budget ends the push (and clears its count); each earlier one in
        // the row raises the count.
        let gave_up = !before.writers[writer].is_finished() && after.writers[writer].is_finished();
        if !gave_up && after.writers[writer].lost_in_a_row <= lost_before {
            continue;
        }
        let lost_response = *action
            == Some(Action::ResponseLost {
                writer: writer as u8,
            });
        if !lost_response {
            return false;
        }
        if lost_before == 0 {
            return true;
        }
    }
    unreachable!("a failed push's row of lost rounds starts on the path")
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncecheck_model::relay::{Legacy, RelayBounds, Variant};
    use stateright::Model;

    fn one_writer() -> RelayModel {
        RelayModel::new(
            Variant::Fixed,
            RelayBounds {
                new_writers: 1,
                add_era_writers: 0,
                ops_per_writer: 1,
                repush_ops: 0,
                lost_responses_max: 3,
                pullers: 0,
                pulls_per_puller: 0,
                page_limit: 1,
                legacy: vec![Legacy::Empty],
                lost_rounds_max: 2,
                window: false,
                push_rounds_max: 0,
                stream_folders: 0,
                truncations_max: 0,
            },
        )
    }

    /// A path whose steps lose the writer's rounds by `actions` in turn, the last over the
    /// budget: only the lost-round counts and the final phase matter to the walk back.
    fn path_losing_by(actions: &[Action]) -> Vec<(RelayState, Option<Action>)> {
        let model = one_writer();
        let mut state = model.init_states().remove(0);
        let mut path = Vec::new();
        for (index, action) in actions.iter().enumerate() {
            path.push((state.clone(), Some(*action)));
            if index + 1 < actions.len() {
                state.writers[0].lost_in_a_row += 1;
            }
        }
        // The round over the budget ends the push, and a finished writer keeps only its phase.
        state.writers[0].phase = Phase::Failed(AppendError::ContentionExhausted);
        state.writers[0].lost_in_a_row = 0;
        path.push((state, None));
        path
    }

    #[test]
    fn a_row_of_lost_responses_alone_is_an_unavailable_backend_and_any_contention_makes_it_contention(
    ) {
        let model = one_writer();
        let lost = Action::ResponseLost { writer: 0 };
        let contended = Action::WriterReceivesResponse { writer: 0 };
        let all_lost = path_losing_by(&[lost, lost, lost]);
        assert_eq!(
            ExpectedError::of(&model, &all_lost, 0),
            Some(ExpectedError::Unavailable { attempts: 3 })
        );
        let one_contended = path_losing_by(&[lost, contended, lost]);
        assert_eq!(
            ExpectedError::of(&model, &one_contended, 0),
            Some(ExpectedError::Contention { lost_rounds: 3 })
        );
    }

    #[test]
    fn each_expected_error_is_reported_by_its_store_error_only() {
        let contention = ExpectedError::Contention { lost_rounds: 3 };
        assert!(
            contention.is_reported_by(&StoreError::ContentionBudgetExhausted { lost_rounds: 3 })
        );
        assert!(
            !contention.is_reported_by(&StoreError::ContentionBudgetExhausted { lost_rounds: 2 })
        );
        assert!(!contention.is_reported_by(&StoreError::Unavailable { attempts: 3 }));
        let unavailable = ExpectedError::Unavailable { attempts: 3 };
        assert!(unavailable.is_reported_by(&StoreError::Unavailable { attempts: 3 }));
        assert!(
            !unavailable.is_reported_by(&StoreError::ContentionBudgetExhausted { lost_rounds: 3 })
        );
        assert!(ExpectedError::SeqOverflow.is_reported_by(&StoreError::SeqOverflow { counter: 9 }));
        assert!(!ExpectedError::SeqOverflow.is_reported_by(&StoreError::DeadlineExceeded));
        let vanished = StoreError::ClaimVanished { op_id: "a".into() };
        assert!(ExpectedError::ClaimUnreadable.is_reported_by(&vanished));
        assert!(!ExpectedError::ClaimUnreadable.is_reported_by(&StoreError::backend("x")));
    }
}
