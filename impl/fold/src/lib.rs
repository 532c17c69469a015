//! A gap-aware fold watermark (specs/relay-append.md, R8).
//!
//! A consumer that folds a relay stream from its change feed (DynamoDB Streams) sees one record
//! per op item, but the feed orders records per item only: the record of op 7 may arrive before
//! the record of op 6. A watermark that moves to the highest seq folded would then claim op 6
//! folded before it was. [`Watermark`] advances only over a dense prefix of seqs: it passes seq
//! `w + 1` once that seq has been folded or declared burned (a seq an older relay allocated and
//! never wrote, which no record will ever fill).
//!
//! Invariants:
//! - every seq at or below [`Watermark::through`] was folded or declared burned (R8);
//! - the watermark never moves backwards;
//! - the records held above the watermark are bounded (`held_records_max`): a consumer waiting on
//!   a seq that never arrives stops with a typed error instead of growing without limit.
//!
//! The crate does no I/O: the consumer feeds it the seqs it folded, in the order the feed
//! delivered them, and persists [`Watermark::through`] with its fold state.

use std::collections::BTreeSet;

/// A stream's seq, as the relay stores it (seqs start at 1).
pub type Seq = i64;

/// What a record did to the watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// The watermark moved to this seq.
    To(Seq),
    /// The record is held: a lower seq has not been folded yet.
    Held { waiting_for: Seq },
    /// The seq was folded (or burned) before: a redelivery, nothing changes.
    Duplicate,
}

/// Input the watermark refuses; nothing is recorded when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatermarkError {
    /// Seqs start at 1.
    SeqOutOfRange { seq: Seq },
    /// Holding another record would pass `held_records_max`; the watermark waits for this seq.
    TooManyHeld {
        held_records_max: usize,
        waiting_for: Seq,
    },
}

impl std::fmt::Display for WatermarkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatermarkError::SeqOutOfRange { seq } => write!(f, "seq {seq} is out of range: seqs start at 1"),
            WatermarkError::TooManyHeld { held_records_max, waiting_for } => write!(
                f,
                "{held_records_max} records are held above the watermark waiting for seq {waiting_for}; declare it burned or re-read the stream"
            ),
        }
    }
}

impl std::error::Error for WatermarkError {}

/// The default bound on records held above the watermark.
pub const HELD_RECORDS_MAX_DEFAULT: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    through: Seq,
    /// Folded or burned seqs above `through`; never contains `through + 1`.
    held: BTreeSet<Seq>,
    held_records_max: usize,
}

impl Watermark {
    /// A watermark at `through`: every seq up to it is folded (0: nothing folded yet).
    pub fn new(through: Seq) -> Watermark {
        Watermark::with_held_records_max(through, HELD_RECORDS_MAX_DEFAULT)
    }

    pub fn with_held_records_max(through: Seq, held_records_max: usize) -> Watermark {
        assert!(through >= 0, "a watermark starts at 0 or above");
        Watermark {
            through,
            held: BTreeSet::new(),
            held_records_max,
        }
    }

    /// Every seq at or below this one is folded or burned.
    pub fn through(&self) -> Seq {
        self.through
    }

    /// The seq the watermark waits for when records are held above it.
    pub fn waiting_for(&self) -> Option<Seq> {
        (!self.held.is_empty()).then_some(self.through + 1)
    }

    /// Records held above the watermark.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    //= specs/relay-append.md#R8
    //# The fold watermark never passes an op that was not folded.
    /// The consumer folded the op at `seq` (a record of the feed, in delivery order).
    pub fn record(&mut self, seq: Seq) -> Result<Advance, WatermarkError> {
        self.accept(seq)
    }

    /// `seq` is known never to hold an op (an older relay burned it): the watermark may pass it.
    pub fn mark_burned(&mut self, seq: Seq) -> Result<Advance, WatermarkError> {
        self.accept(seq)
    }

    fn accept(&mut self, seq: Seq) -> Result<Advance, WatermarkError> {
        // The state every call leaves behind, checked where the next call starts from it.
        assert!(
            self.held.len() <= self.held_records_max,
            "{} records are held above the watermark, over held_records_max {}",
            self.held.len(),
            self.held_records_max
        );
        //= specs/relay-append.md#R8
        //# The watermark therefore advances only over a dense prefix of seqs: seq w + 1 is
        //# passed once it is folded or known to be a burned legacy seq.
        assert!(
            self.held
                .first()
                .is_none_or(|lowest| *lowest > self.through + 1),
            "a held seq ({:?}) is at or next to the watermark {}: it should have been passed",
            self.held.first(),
            self.through
        );
        if seq < 1 {
            return Err(WatermarkError::SeqOutOfRange { seq });
        }
        if seq <= self.through || self.held.contains(&seq) {
            return Ok(Advance::Duplicate);
        }
        if seq > self.through + 1 {
            if self.held.len() >= self.held_records_max {
                return Err(WatermarkError::TooManyHeld {
                    held_records_max: self.held_records_max,
                    waiting_for: self.through + 1,
                });
            }
            self.held.insert(seq);
            return Ok(Advance::Held {
                waiting_for: self.through + 1,
            });
        }
        let before = self.through;
        self.through = seq;
        while self.held.remove(&(self.through + 1)) {
            self.through += 1;
        }
        assert!(self.through > before, "the watermark moved forward");
        assert!(
            !self.held.contains(&(self.through + 1)),
            "a held seq next to the watermark is passed"
        );
        Ok(Advance::To(self.through))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    //= specs/relay-append.md#R8
    //# The fold watermark never passes an op that was not folded.
    #[test]
    fn a_record_above_a_missing_seq_is_held_until_the_seq_arrives() {
        let mut watermark = Watermark::new(5);
        assert_eq!(watermark.record(7), Ok(Advance::Held { waiting_for: 6 }));
        assert_eq!(
            watermark.through(),
            5,
            "op 6 is not folded: the watermark stays"
        );
        assert_eq!(watermark.waiting_for(), Some(6));
        assert_eq!(watermark.record(6), Ok(Advance::To(7)));
        assert_eq!(watermark.waiting_for(), None);
        assert_eq!(watermark.record(6), Ok(Advance::Duplicate));
    }

    #[test]
    fn a_burned_seq_is_passed_once_declared() {
        let mut watermark = Watermark::new(1);
        assert_eq!(watermark.record(3), Ok(Advance::Held { waiting_for: 2 }));
        assert_eq!(watermark.mark_burned(2), Ok(Advance::To(3)));
    }

    #[test]
    fn bad_input_is_refused_and_changes_nothing() {
        let mut watermark = Watermark::with_held_records_max(0, 2);
        assert_eq!(
            watermark.record(0),
            Err(WatermarkError::SeqOutOfRange { seq: 0 })
        );
        watermark.record(3).unwrap();
        watermark.record(4).unwrap();
        let full = watermark.record(5).unwrap_err();
        assert_eq!(
            full,
            WatermarkError::TooManyHeld {
                held_records_max: 2,
                waiting_for: 1
            }
        );
        assert_eq!(full.to_string(), "2 records are held above the watermark waiting for seq 1; declare it burned or re-read the stream");
        assert_eq!(watermark.held(), 2);
        assert_eq!(watermark.record(1), Ok(Advance::To(1)));
        assert_eq!(watermark.record(2), Ok(Advance::To(4)));
    }
}
