//! The relay soak's verdict on one table: the final read of every stream against what the
//! pushers were answered and what the pullers were handed. No I/O, so the verdicts are
//! unit-tested on made-up runs (a real loss must be reported however the run ended).
//!
//! Invariants:
//! - an op answered 2xx that the final read does not hold is **lost**, and one held elsewhere
//!   than its answer said **answers differ**, whether or not the time limit cut the run;
//! - an op stored that no push was answered for is a violation, unless its batch was pushed and
//!   given up unanswered when the time was up: then the relay stored it and the run stopped
//!   before a re-push could learn its seq, and it is counted as that (`given up but stored`);
//! - a puller's view equals the final read, or, when the time cut the pullers short, is a
//!   prefix of it (anything else is **views differ** either way).

use std::collections::{BTreeMap, BTreeSet};

/// An op's payload: derived from its op_id, so a read can check it without the push.
pub fn payload_of(op_id: &str) -> String {
    // Sizes vary with the op_id, deterministically.
    let filler = op_id.bytes().map(usize::from).sum::<usize>() % 64;
    format!("{op_id}:{}", "x".repeat(filler))
}

/// op_id -> (stream, seq, payload) as a push was answered.
pub type Answers = BTreeMap<String, (String, i64, String)>;
/// stream -> its ops (seq, op_id, payload), in seq order.
pub type StoredStreams = BTreeMap<String, Vec<(i64, String, String)>>;
/// stream -> (seq, op_id) in the order one puller was handed them.
pub type PullerView = BTreeMap<String, Vec<(i64, String)>>;

/// What one table's run produced.
pub struct TableRun<'a> {
    pub answered: &'a Answers,
    /// op_ids of batches pushed at least once and never answered: the time was up.
    pub given_up: &'a BTreeSet<String>,
    pub stored: &'a StoredStreams,
    pub views: &'a [PullerView],
    /// The time limit stopped the pushers and pullers where they were.
    pub cut_by_time: bool,
}

#[derive(Default)]
pub struct TableCheck {
    pub counts: BTreeMap<&'static str, u64>,
    pub violations: Vec<String>,
}

/// Where the final read holds each op_id: (stream, seq).
type StoredAt<'a> = BTreeMap<&'a str, (&'a str, i64)>;

/// Compares the final read with the answers and the views.
pub fn check(run: &TableRun) -> TableCheck {
    let mut checked = TableCheck::default();
    checked.counts.insert("answered", run.answered.len() as u64);
    checked.counts.insert("given up", run.given_up.len() as u64);
    let mut stored_at = StoredAt::new();
    for (stream, ops) in run.stored {
        checked.check_stream(stream, ops, &mut stored_at);
        checked.check_views(run, stream, ops);
    }
    checked.check_answers(run, &stored_at);
    checked.check_unanswered(run, &stored_at);
    checked
}

impl TableCheck {
    /// A violation is both counted by kind (the report's summary line) and kept in words.
    fn report(&mut self, kind: &'static str, what: String) {
        *self.counts.entry(kind).or_default() += 1;
        self.violations.push(what);
    }

    /// One stream on its own: dense seqs from 1, no op twice, every payload its op_id's.
    /// Records where each op is held, which the answers are compared with afterwards.
    fn check_stream<'a>(
        &mut self,
        stream: &'a str,
        ops: &'a [(i64, String, String)],
        stored_at: &mut StoredAt<'a>,
    ) {
        *self.counts.entry("stored").or_default() += ops.len() as u64;
        for (position, (seq, op_id, payload)) in ops.iter().enumerate() {
            if *seq != position as i64 + 1 {
                self.report(
                    "gaps",
                    format!("{stream} holds seq {seq} at position {}", position + 1),
                );
            }
            if stored_at.insert(op_id.as_str(), (stream, *seq)).is_some() {
                self.report("duplicated", format!("{op_id} is stored twice"));
            }
            if *payload != payload_of(op_id) {
                self.report(
                    "answers differ",
                    format!("{op_id} is stored with another payload"),
                );
            }
        }
    }

    /// Every puller's view of `stream` against its final read: equal, or a prefix of it when
    /// the time cut the pullers short.
    fn check_views(&mut self, run: &TableRun, stream: &str, ops: &[(i64, String, String)]) {
        let final_view: Vec<(i64, String)> = ops
            .iter()
            .map(|(seq, op_id, _)| (*seq, op_id.clone()))
            .collect();
        for view in run.views {
            let seen = view.get(stream).map(Vec::as_slice).unwrap_or_default();
            let agrees = if run.cut_by_time {
                final_view.starts_with(seen)
            } else {
                final_view == seen
            };
            if !agrees {
                self.report(
                    "views differ",
                    format!(
                        "a puller followed {stream} to {} ops, the final read holds {}{}",
                        seen.len(),
                        final_view.len(),
                        if run.cut_by_time {
                            " and does not begin with what the puller saw"
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
    }

    /// Every answered op is held where its answer said, however the run ended.
    fn check_answers(&mut self, run: &TableRun, stored_at: &StoredAt) {
        for (op_id, (stream, seq, _)) in run.answered {
            match stored_at.get(op_id.as_str()) {
                None => self.report(
                    "lost",
                    format!("{op_id} was answered seq {seq} on {stream} but is not stored"),
                ),
                Some(&(at_stream, at_seq)) if (at_stream, at_seq) != (stream.as_str(), *seq) => {
                    self.report(
                        "answers differ",
                        format!(
                            "{op_id} was answered {stream}/{seq} but is stored at {at_stream}/{at_seq}"
                        ),
                    )
                }
                Some(_) => {}
            }
        }
    }

    /// Every op held that no push was answered for: only a batch given up when the time was
    /// up excuses it.
    fn check_unanswered(&mut self, run: &TableRun, stored_at: &StoredAt) {
        for op_id in stored_at.keys() {
            if run.answered.contains_key(*op_id) {
                continue;
            }
            if run.given_up.contains(*op_id) {
                *self.counts.entry("given up but stored").or_default() += 1;
            } else {
                self.report(
                    "unanswered but stored",
                    format!("{op_id} is stored but no push was answered for it"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: i64, op_id: &str) -> (i64, String, String) {
        (seq, op_id.to_string(), payload_of(op_id))
    }

    fn answer(stream: &str, seq: i64, op_id: &str) -> (String, (String, i64, String)) {
        (
            op_id.to_string(),
            (stream.to_string(), seq, payload_of(op_id)),
        )
    }

    fn view(stream: &str, ops: &[(i64, String, String)]) -> PullerView {
        BTreeMap::from([(
            stream.to_string(),
            ops.iter()
                .map(|(seq, op_id, _)| (*seq, op_id.clone()))
                .collect(),
        )])
    }

    /// The shape the soak met on moto (t2-p3-99): an op answered seq 250 whose place another op
    /// took, the stream still dense and without a duplicate. Only the answer shows the loss; it
    /// is reported whether or not the time limit cut the run.
    #[test]
    fn an_answered_op_whose_seq_another_op_holds_is_lost_also_when_the_time_was_up() {
        let stored = BTreeMap::from([("s1".to_string(), vec![op(1, "t2-p0-0"), op(2, "t2-p1-0")])]);
        let answered = Answers::from([
            answer("s1", 1, "t2-p0-0"),
            answer("s1", 2, "t2-p3-99"),
            answer("s1", 2, "t2-p1-0"),
        ]);
        for cut_by_time in [false, true] {
            let checked = check(&TableRun {
                answered: &answered,
                given_up: &BTreeSet::new(),
                stored: &stored,
                views: &[],
                cut_by_time,
            });
            assert_eq!(checked.counts.get("lost"), Some(&1));
            assert_eq!(
                checked.violations,
                vec!["t2-p3-99 was answered seq 2 on s1 but is not stored".to_string()]
            );
        }
    }

    /// A given-up batch is not an excuse for an answered op: an op answered and then missing is
    /// lost even if another batch of the same pusher was given up.
    #[test]
    fn a_given_up_batch_hides_no_loss_and_excuses_only_its_own_stored_ops() {
        let stored = BTreeMap::from([("s0".to_string(), vec![op(1, "a"), op(2, "b")])]);
        let answered = Answers::from([answer("s0", 1, "a"), answer("s0", 3, "c")]);
        let given_up = BTreeSet::from(["b".to_string(), "d".to_string()]);
        let checked = check(&TableRun {
            answered: &answered,
            given_up: &given_up,
            stored: &stored,
            views: &[],
            cut_by_time: true,
        });
        assert_eq!(
            checked.violations,
            vec!["c was answered seq 3 on s0 but is not stored".to_string()]
        );
        assert_eq!(checked.counts.get("given up"), Some(&2));
        assert_eq!(checked.counts.get("given up but stored"), Some(&1));
        assert_eq!(checked.counts.get("unanswered but stored"), None);
    }

    /// An op stored that no push sent (or whose batch was answered without it) is a violation,
    /// time up or not.
    #[test]
    fn an_op_stored_that_no_push_was_answered_for_or_gave_up_is_a_violation() {
        let stored = BTreeMap::from([("s0".to_string(), vec![op(1, "a"), op(2, "x")])]);
        let answered = Answers::from([answer("s0", 1, "a")]);
        for cut_by_time in [false, true] {
            let checked = check(&TableRun {
                answered: &answered,
                given_up: &BTreeSet::new(),
                stored: &stored,
                views: &[],
                cut_by_time,
            });
            assert_eq!(
                checked.violations,
                vec!["x is stored but no push was answered for it".to_string()]
            );
        }
    }

    /// Pullers stopped by the time limit saw a prefix of the final read: that is no violation,
    /// but a view that is not a prefix is one, and in a run that ended on its own the views must
    /// be the whole stream.
    #[test]
    fn a_puller_cut_short_by_the_time_saw_a_prefix_and_nothing_else() {
        let ops = vec![op(1, "a"), op(2, "b")];
        let stored = BTreeMap::from([("s0".to_string(), ops.clone())]);
        let answered = Answers::from([answer("s0", 1, "a"), answer("s0", 2, "b")]);
        let short = view("s0", &ops[..1]);
        let other = view("s0", &[op(1, "b")]);
        let verdict = |views: &[PullerView], cut_by_time| {
            check(&TableRun {
                answered: &answered,
                given_up: &BTreeSet::new(),
                stored: &stored,
                views,
                cut_by_time,
            })
            .counts
            .get("views differ")
            .copied()
        };
        assert_eq!(verdict(std::slice::from_ref(&short), true), None);
        assert_eq!(verdict(std::slice::from_ref(&short), false), Some(1));
        assert_eq!(verdict(std::slice::from_ref(&other), true), Some(1));
        assert_eq!(verdict(&[view("s0", &ops)], false), None);
    }

    #[test]
    fn a_stream_with_a_hole_or_a_duplicate_is_reported() {
        let stored = BTreeMap::from([("s0".to_string(), vec![op(1, "a"), op(3, "b"), op(4, "a")])]);
        let answered = Answers::from([answer("s0", 1, "a"), answer("s0", 3, "b")]);
        let checked = check(&TableRun {
            answered: &answered,
            given_up: &BTreeSet::new(),
            stored: &stored,
            views: &[],
            cut_by_time: false,
        });
        assert_eq!(checked.counts.get("gaps"), Some(&2));
        assert_eq!(checked.counts.get("duplicated"), Some(&1));
        assert_eq!(checked.counts.get("answers differ"), Some(&1));
    }
}
