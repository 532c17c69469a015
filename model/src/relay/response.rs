//! What a writer does with its round's response: a commit answers the op and moves the push on;
//! a cancellation is read by the store's ranking of reasons (claim, counter, conflict, seq taken,
//! predecessor), which answers from the claim, loses the round with or without the counter
//! image, queries the top of occupied seqs, or flips the predecessor check over a legacy gap.
//!
//! Invariants: every cancelled round has a failing reason; the contention budget counts lost
//! rounds in a row; an answered op clears the floor, the flip and the lost-round count.

use super::*;

impl RelayModel {
    pub(super) fn answer(state: &mut RelayState, op: OpId, seq: Seq) {
        state
            .answers
            .get_or_insert_with(op, SeqSet::new)
            .insert(seq);
    }

    /// Moves `next_op` past the op just answered and past ops the fast path answered ahead;
    /// answers whether the push is finished.
    pub(super) fn advance(&self, writer_index: usize, writer: &mut Writer) -> bool {
        let len = self.push_of(writer_index).len();
        writer.next_op += 1;
        while (writer.next_op as usize) < len && writer.answered_ahead & (1 << writer.next_op) != 0
        {
            writer.next_op += 1;
        }
        // Bits below `next_op` say nothing any more: clear them so equal futures share a state.
        writer.answered_ahead &= !((1u8 << writer.next_op).wrapping_sub(1));
        writer.next_op as usize == len
    }

    /// The writer's op was answered (`existing`: from its claim): move to the next op, read the
    /// claims of the rest of the push (the fast path), or finish the push.
    pub(super) fn op_done(
        &self,
        writer_index: usize,
        writer: &mut Writer,
        anomalies: &mut WriterAnomalies,
        existing: bool,
    ) {
        writer.floor = None;
        writer.flip = None;
        writer.lost_in_a_row = 0;
        if self.advance(writer_index, writer) {
            self.push_done(writer_index, writer, anomalies);
        } else if existing && self.build_of(writer_index) == Build::New {
            //= specs/relay-append.md#R7
            //# A round that finds the op's own claim reads the claims of the push's remaining ops in one batched strongly consistent read.
            writer.phase = Phase::ReadingClaims;
        } else {
            writer.phase = Phase::Ready;
        }
    }

    pub(super) fn push_done(
        &self,
        _writer_index: usize,
        writer: &mut Writer,
        _anomalies: &mut WriterAnomalies,
    ) {
        writer.phase = Phase::Done;
    }

    /// A round that ended without progress; over the budget, the append gives up. A hint is
    /// used only after the first lost round in a row: after a backoff it is stale, and the next
    /// round reads the counter instead. The first lost round in a row that carries a hint is a
    /// wrong counter guess, the one extra round an otherwise uncontended push may pay for it.
    pub(super) fn lose_round(&self, writer: &mut Writer, hint: Option<Seq>) {
        writer.flip = None;
        //= specs/relay-append.md#R6
        //# The contention budget counts lost rounds in a row; over it the append ends with a typed error.
        writer.lost_in_a_row += 1;
        let wrong_guess = hint.is_some() && writer.lost_in_a_row == 1;
        if wrong_guess {
            if !writer.push_contended {
                writer.push_paid_extra = true;
            }
        } else {
            writer.mark_contended();
        }
        writer.counter = match hint {
            Some(value) if wrong_guess && !self.has(Mutation::IgnoreHint) => Counter::Known(value),
            _ => Counter::Unknown,
        };
        writer.phase = if writer.lost_in_a_row > self.bounds.lost_rounds_max {
            Phase::Failed(AppendError::ContentionExhausted)
        } else {
            Phase::Ready
        };
    }

    /// What a new-build writer does with a cancelled round: the store's ranking of reasons
    /// (claim, counter, conflict, seq taken, predecessor). Answers the op's seq when the claim's
    /// ALL_OLD image names it. `predecessor_was_stored`: op `seq - 1` was stored once and deleted
    /// by truncation since.
    pub(super) fn settle_new_build(
        &self,
        writer: &mut Writer,
        round: Round,
        reasons: &[Reason],
        predecessor_was_stored: bool,
        anomalies: &mut WriterAnomalies,
    ) -> Option<Seq> {
        let layout = self.layout(Build::New, &round);
        let reason_at =
            |index: Option<usize>| index.map(|index| reasons[index]).unwrap_or(Reason::None);
        if let Reason::ConditionalCheckFailed { old } = reason_at(layout.claim) {
            //= specs/relay-append.md#R3
            //# Every append of an op id answers the seq it is stored at.
            // The claim outranks every other reason: the op id is stored already. What the next
            // op of the push may assume about the counter follows from the counter's reason.
            writer.mark_contended();
            writer.counter = match reason_at(layout.counter) {
                Reason::None => Counter::Known(round.expected),
                Reason::ConditionalCheckFailed {
                    old: Some(Value::Counter { next_seq }),
                } => Counter::Known(next_seq),
                Reason::ConditionalCheckFailed { .. } => Counter::Known(0),
                Reason::TransactionConflict => Counter::Unknown,
            };
            return match old {
                Some(Value::Claim { seq }) => Some(seq),
                // No image: read the claim back.
                _ => {
                    writer.phase = Phase::ReadingClaim { op: round.op };
                    None
                }
            };
        }
        if let Reason::ConditionalCheckFailed { old } = reason_at(layout.counter) {
            //= specs/relay-append.md#R7
            //# A lost round hands back the real counter through the ALL_OLD image: no re-read.
            let hint = match old {
                Some(Value::Counter { next_seq }) => next_seq,
                _ => 0,
            };
            self.lose_round(writer, Some(hint));
            return None;
        }
        if reasons.contains(&Reason::TransactionConflict) {
            // Another transaction holds one of our items: no hint, re-read the counter.
            self.lose_round(writer, None);
            return None;
        }
        // The counter held: it stands at `expected` and stays known.
        writer.lost_in_a_row = 0;
        writer.phase = Phase::Ready;
        if let Reason::ConditionalCheckFailed { .. } = reasons[layout.op] {
            // Seq taken while the counter held: occupied seqs above the counter.
            writer.mark_contended();
            writer.flip = None;
            writer.phase = Phase::QueryingTop;
            return None;
        }
        if let Reason::ConditionalCheckFailed { .. } = reason_at(layout.predecessor) {
            if round.predecessor == Some(Condition::AttributeNotExists) {
                // The gap filled meanwhile (an ADD-era writer stored it): the next round goes
                // back to attribute_exists.
                writer.mark_contended();
                writer.flip = None;
                return None;
            }
            if writer.flip == Some(round.seq) {
                anomalies.gap_paid_twice = true;
            }
            if predecessor_was_stored {
                anomalies.stored_op_taken_for_gap = true;
            }
            if !writer.push_contended {
                writer.push_paid_extra = true;
            }
            //= specs/relay-append.md#R6
            //# A failed attribute_exists while the counter held proves a legacy gap: the next
            //# round, for that seq only, checks attribute_not_exists instead.
            writer.flip = Some(round.seq);
            return None;
        }
        unreachable!("a cancelled round has a failing reason: {reasons:?}");
    }

    /// The legacy build: a claim that exists is read back; any other cancellation fails the
    /// push (the old build answered it with a 500), burning the allocated seq.
    pub(super) fn settle_add_era(&self, writer: &mut Writer, round: Round, reasons: &[Reason]) {
        writer.mark_contended();
        writer.phase = match reasons[0] {
            Reason::ConditionalCheckFailed { .. } => Phase::ReadingClaim { op: round.op },
            _ => Phase::Failed(AppendError::AddEraWriteRefused),
        };
    }
}
