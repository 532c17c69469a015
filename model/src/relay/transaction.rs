//! The transaction a writer's round sends: for the new build the counter condition, the claim,
//! the predecessor check (attribute_exists, or attribute_not_exists across a proven legacy gap)
//! and the op put; for the ADD-era build the claim and the op put. [`Layout`] says where each
//! item sits, so a cancellation's reasons can be read by item.
//!
//! Invariants: items are in request order (counter, claim, predecessor, op), as the store sends
//! them; the mutations only drop or weaken one item each.

use super::*;

impl RelayModel {
    /// The transaction a new-build writer sends for its next round.
    pub(super) fn new_build_round(
        &self,
        writer: &Writer,
        op: OpId,
    ) -> Result<(Round, Vec<TransactItem>), AppendError> {
        let Counter::Known(expected) = writer.counter else {
            unreachable!("a round is only sent with a known counter");
        };
        // The floor (top occupied seq) outlives lost rounds of the same op, as in the store: seqs
        // at or below it are occupied whatever the counter says.
        let base = expected.max(writer.floor.unwrap_or(0));
        //= specs/relay-append.md#R4
        //# Checked arithmetic: a counter at the top of the seq range is a loud error, never a wrap.
        let seq = base
            .checked_add(1)
            .filter(|seq| *seq <= SEQ_MAX)
            .ok_or(AppendError::SeqOverflow)?;
        let mut items = Vec::with_capacity(4);
        //= specs/relay-append.md#R4
        //# The counter update is conditional on the counter value the round knows.
        items.push(TransactItem {
            key: Key::Counter,
            condition: if self.has(Mutation::UnconditionalCounterSet) {
                Condition::Always
            } else {
                Condition::NextSeqEquals(expected)
            },
            operation: Operation::Write(Value::Counter { next_seq: seq }),
            return_old_on_failure: true,
        });
        if !self.has(Mutation::NoClaim) {
            //= specs/relay-append.md#R3
            //# The claim put for the op id (attribute_not_exists) is in the same transaction.
            items.push(TransactItem {
                key: Key::Claim(op),
                condition: Condition::AttributeNotExists,
                operation: Operation::Write(Value::Claim { seq }),
                return_old_on_failure: true,
            });
        }
        let mut predecessor = None;
        if seq > 1 && !self.has(Mutation::NoPredecessorCheck) {
            //= specs/relay-append.md#R1
            //# For s > 1 the transaction checks the op at s - 1: attribute_exists, or for the one
            //# seq whose predecessor is a proven legacy gap, attribute_not_exists.
            let condition = if writer.flip == Some(seq) && !self.has(Mutation::NoFlip) {
                Condition::AttributeNotExists
            } else {
                Condition::AttributeExists
            };
            predecessor = Some(condition);
            items.push(TransactItem {
                key: Key::Op(seq - 1),
                condition,
                operation: Operation::ConditionCheck,
                return_old_on_failure: false,
            });
        }
        //= specs/relay-append.md#R2
        //# The op put at s carries attribute_not_exists: no op is overwritten.
        items.push(TransactItem {
            key: Key::Op(seq),
            condition: if self.has(Mutation::UnconditionalOpPut) {
                Condition::Always
            } else {
                Condition::AttributeNotExists
            },
            operation: Operation::Write(Value::Op { op_id: op }),
            return_old_on_failure: false,
        });
        let round = Round {
            op,
            expected,
            seq,
            predecessor,
            floor_step: writer.floor.is_some_and(|floor| floor > expected),
        };
        Ok((round, items))
    }

    /// The transaction an ADD-era writer sends once ADD answered `seq`.
    pub(super) fn add_era_round(op: OpId, seq: Seq) -> (Round, Vec<TransactItem>) {
        let items = vec![
            TransactItem {
                key: Key::Claim(op),
                condition: Condition::AttributeNotExists,
                operation: Operation::Write(Value::Claim { seq }),
                return_old_on_failure: true,
            },
            TransactItem {
                key: Key::Op(seq),
                condition: Condition::AttributeNotExists,
                operation: Operation::Write(Value::Op { op_id: op }),
                return_old_on_failure: false,
            },
        ];
        (
            Round {
                op,
                expected: seq - 1,
                seq,
                predecessor: None,
                floor_step: false,
            },
            items,
        )
    }

    /// Position of each kind of item in a round's request, for reading cancellation reasons.
    pub(super) fn layout(&self, build: Build, round: &Round) -> Layout {
        match build {
            Build::AddEra => Layout {
                counter: None,
                claim: Some(0),
                predecessor: None,
                op: 1,
            },
            Build::New => {
                let claim = (!self.has(Mutation::NoClaim)).then_some(1);
                let after_claim = 1 + claim.is_some() as usize;
                let predecessor = round.predecessor.map(|_| after_claim);
                let op = after_claim + predecessor.is_some() as usize;
                Layout {
                    counter: Some(0),
                    claim,
                    predecessor,
                    op,
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    pub(super) counter: Option<usize>,
    pub(super) claim: Option<usize>,
    pub(super) predecessor: Option<usize>,
    pub(super) op: usize,
}
