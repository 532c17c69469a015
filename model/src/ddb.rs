//! DynamoDB semantics shared by the models (specs/relay-append.md, DynamoDB facts), at the granularity the relay
//! protocol needs: one table of items keyed by [`Key`], conditional single-item writes,
//! TransactWriteItems with per-item cancellation reasons, and read-committed queries.
//!
//! The visibility window: a committed transaction does not become visible at one instant.
//! Its writes enter `pending`, one entry per item, and each is applied by its own step
//! ([`Table::apply`]). While an item is pending it is locked: a transaction, or a single-item
//! write, that touches it is cancelled with TransactionConflict. Queries and reads see only
//! `applied`. Conditions are evaluated against `applied`, which is exact because a condition on a
//! pending item never gets evaluated (the conflict comes first).
//!
//! Invariants:
//! - `applied` and `pending` hold one value per key; a key is in `pending` at most once because a
//!   transaction touching a pending key is cancelled.
//! - A transaction is all or nothing: either every write enters `pending` (or `applied` with the
//!   window closed) or none does.
//! - Overwrites and counter regressions are not prevented here (the protocol's conditions do
//!   that); they are recorded in [`Anomalies`] so properties can see them.

use crate::sorted_map::SortedMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A stream's seq. Small on purpose: state stays small and hashing cheap.
pub type Seq = u8;
/// A client-chosen op id; printed as a letter (`a`, `b`, ...).
pub type OpId = u8;

/// The largest seq the model's arithmetic allows; a counter at this value makes the next
/// allocation a loud error instead of a wrap (the implementation does the same at i64::MAX).
pub const SEQ_MAX: Seq = 250;

/// A set of seqs, inline: seqs are `u8`, so every set is a 256-bit map that costs no allocation
/// to clone, hash or drop (the model's states are cloned for every step). It reads as the
/// `BTreeSet<Seq>` it replaces, to the bit: members in ascending order, the same `Hash` (length,
/// then each member), the same `Ord` (members compared in order), the same serialized form (the
/// sequence of members) and `Debug` text; so fingerprints, representatives, encodings and traces
/// do not depend on which of the two a state holds.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqSet([u64; 4]);

impl SeqSet {
    pub const fn new() -> SeqSet {
        SeqSet([0; 4])
    }

    fn word_and_bit(seq: Seq) -> (usize, u64) {
        (usize::from(seq / 64), 1u64 << (seq % 64))
    }

    /// Adds `seq`; whether it was absent.
    pub fn insert(&mut self, seq: Seq) -> bool {
        let (word, bit) = Self::word_and_bit(seq);
        let absent = self.0[word] & bit == 0;
        self.0[word] |= bit;
        absent
    }

    pub fn contains(&self, seq: &Seq) -> bool {
        let (word, bit) = Self::word_and_bit(*seq);
        self.0[word] & bit != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|word| word.count_ones() as usize).sum()
    }

    /// The highest member.
    pub fn last(&self) -> Option<Seq> {
        let (index, word) = self
            .0
            .iter()
            .enumerate()
            .rev()
            .find(|(_, word)| **word != 0)?;
        Some((index * 64) as Seq + (63 - word.leading_zeros()) as Seq)
    }

    /// The members in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = Seq> + '_ {
        self.0.iter().enumerate().flat_map(|(index, word)| {
            let mut rest = *word;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros();
                    rest &= rest - 1;
                    (index * 64) as Seq + bit as Seq
                })
            })
        })
    }
}

impl FromIterator<Seq> for SeqSet {
    fn from_iter<I: IntoIterator<Item = Seq>>(seqs: I) -> SeqSet {
        let mut set = SeqSet::new();
        set.extend(seqs);
        set
    }
}

impl Extend<Seq> for SeqSet {
    fn extend<I: IntoIterator<Item = Seq>>(&mut self, seqs: I) {
        for seq in seqs {
            self.insert(seq);
        }
    }
}

impl std::hash::Hash for SeqSet {
    /// As `BTreeSet<u8>` hashes: its length, then each member in order.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        for seq in self.iter() {
            seq.hash(state);
        }
    }
}

impl Ord for SeqSet {
    /// As `BTreeSet<u8>` orders: lexicographically by members in ascending order.
    fn cmp(&self, other: &SeqSet) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

impl PartialOrd for SeqSet {
    fn partial_cmp(&self, other: &SeqSet) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for SeqSet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_set().entries(self.iter()).finish()
    }
}

impl Serialize for SeqSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        // The length first, as a BTreeSet's is: encoders that need it up front get it.
        let mut members = serializer.serialize_seq(Some(self.len()))?;
        for seq in self.iter() {
            members.serialize_element(&seq)?;
        }
        members.end()
    }
}

impl<'de> Deserialize<'de> for SeqSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SeqSet, D::Error> {
        Ok(Vec::<Seq>::deserialize(deserializer)?.into_iter().collect())
    }
}

pub fn op_name(op: OpId) -> char {
    (b'a' + op) as char
}

/// The items of one stream: the counter (seq 0), one claim per op id, one item per stored op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Key {
    Counter,
    Claim(OpId),
    Op(Seq),
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Counter => write!(f, "counter"),
            Key::Claim(op) => write!(f, "claim {}", op_name(*op)),
            Key::Op(seq) => write!(f, "op {seq}"),
        }
    }
}

/// The attributes of an item that the protocol reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Value {
    Counter { next_seq: Seq },
    Claim { seq: Seq },
    Op { op_id: OpId },
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Counter { next_seq } => write!(f, "next_seq {next_seq}"),
            Value::Claim { seq } => write!(f, "claimed seq {seq}"),
            Value::Op { op_id } => write!(f, "op_id {}", op_name(*op_id)),
        }
    }
}

/// The condition expressions the protocol uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Condition {
    Always,
    AttributeExists,
    AttributeNotExists,
    /// `next_seq = :expected`; for 0 the OR form `attribute_not_exists(next_seq) OR next_seq = :expected`.
    NextSeqEquals(Seq),
}

impl Condition {
    fn holds(self, current: Option<Value>) -> bool {
        match self {
            Condition::Always => true,
            Condition::AttributeExists => current.is_some(),
            Condition::AttributeNotExists => current.is_none(),
            Condition::NextSeqEquals(expected) => match current {
                None => expected == 0,
                Some(Value::Counter { next_seq }) => next_seq == expected,
                Some(_) => false,
            },
        }
    }
}

/// What one item of a TransactWriteItems does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operation {
    /// Put or Update to this value.
    Write(Value),
    /// ConditionCheck: reads, writes nothing, but still locks the item for the transaction.
    ConditionCheck,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransactItem {
    pub key: Key,
    pub condition: Condition,
    pub operation: Operation,
    /// ReturnValuesOnConditionCheckFailure = ALL_OLD.
    pub return_old_on_failure: bool,
}

/// A cancellation reason, one per item, in request order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    None,
    /// With ALL_OLD, `old` is the item's image (or `None` when the item is absent).
    ConditionalCheckFailed {
        old: Option<Value>,
    },
    TransactionConflict,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::None => write!(f, "None"),
            Reason::ConditionalCheckFailed { old: Some(old) } => {
                write!(f, "ConditionalCheckFailed(old {old})")
            }
            Reason::ConditionalCheckFailed { old: None } => write!(f, "ConditionalCheckFailed"),
            Reason::TransactionConflict => write!(f, "TransactionConflict"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TransactOutcome {
    Committed,
    Cancelled(Vec<Reason>),
}

/// Things that must never happen, recorded when they do so that properties can see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Anomalies {
    /// An op item was written over an existing op item (R2).
    pub op_overwritten: bool,
    /// The counter was set to a value below its current one (R4).
    pub counter_went_back: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Table {
    /// Items visible to reads.
    pub applied: SortedMap<Key, Value>,
    /// Items of committed transactions not yet visible: the visibility window. Locked.
    pub pending: SortedMap<Key, Value>,
    pub anomalies: Anomalies,
}

impl Table {
    /// TransactWriteItems. With `window` false every write is applied at commit.
    pub fn transact(&mut self, items: &[TransactItem], window: bool) -> TransactOutcome {
        self.transact_applying(items, window, &BTreeSet::new())
    }

    /// TransactWriteItems whose writes to `apply_at_commit` skip the window: they are visible at
    /// commit. Only sound for items no other step reads or writes while they would be pending
    /// (a model reduction decides which; see specs/relay-append.md, "Reductions").
    pub fn transact_applying(
        &mut self,
        items: &[TransactItem],
        window: bool,
        apply_at_commit: &BTreeSet<Key>,
    ) -> TransactOutcome {
        let reasons: Vec<Reason> = items
            .iter()
            .map(|item| {
                if self.pending.contains_key(&item.key) {
                    return Reason::TransactionConflict;
                }
                let current = self.applied.get(&item.key).copied();
                if item.condition.holds(current) {
                    Reason::None
                } else {
                    let old = if item.return_old_on_failure {
                        current
                    } else {
                        None
                    };
                    Reason::ConditionalCheckFailed { old }
                }
            })
            .collect();
        if reasons.iter().any(|reason| *reason != Reason::None) {
            return TransactOutcome::Cancelled(reasons);
        }
        for item in items {
            if let Operation::Write(value) = item.operation {
                if window && !apply_at_commit.contains(&item.key) {
                    let previous = self.pending.insert(item.key, value);
                    assert!(previous.is_none(), "a transaction wrote {} twice", item.key);
                } else {
                    self.write_visible(item.key, value);
                }
            }
        }
        TransactOutcome::Committed
    }

    /// One pending item of a committed transaction becomes visible.
    pub fn apply(&mut self, key: Key) {
        let value = self
            .pending
            .remove(&key)
            .expect("only pending items are applied");
        self.write_visible(key, value);
    }

    fn write_visible(&mut self, key: Key, value: Value) {
        let previous = self.applied.insert(key, value);
        match (key, previous, value) {
            (Key::Op(_), Some(old), new) if old != new => self.anomalies.op_overwritten = true,
            (
                Key::Counter,
                Some(Value::Counter { next_seq: old }),
                Value::Counter { next_seq: new },
            ) if new < old => self.anomalies.counter_went_back = true,
            _ => {}
        }
    }

    /// UpdateItem `ADD next_seq 1` on the counter: a single-item write, so a transaction holding
    /// the counter cancels it (TransactionConflictException). Answers the new value.
    pub fn add_to_counter(&mut self) -> Result<Seq, Reason> {
        if self.pending.contains_key(&Key::Counter) {
            return Err(Reason::TransactionConflict);
        }
        let next = self
            .counter()
            .checked_add(1)
            .filter(|next| *next <= SEQ_MAX);
        let Some(next) = next else {
            return Err(Reason::ConditionalCheckFailed {
                old: self.applied.get(&Key::Counter).copied(),
            });
        };
        self.write_visible(Key::Counter, Value::Counter { next_seq: next });
        Ok(next)
    }

    /// A read-committed read of one item (GetItem, or the Query of seq = 0 for the counter).
    pub fn read(&self, key: Key) -> Option<Value> {
        self.applied.get(&key).copied()
    }

    /// The counter as a read sees it; an absent counter reads as 0.
    pub fn counter(&self) -> Seq {
        match self.applied.get(&Key::Counter) {
            Some(Value::Counter { next_seq }) => *next_seq,
            _ => 0,
        }
    }

    /// Query seq > after, ascending, Limit `limit`: visible op items only (read-committed).
    pub fn query_after(&self, after: Seq, limit: usize) -> Vec<(Seq, OpId)> {
        self.applied
            .range(Key::Op(after.saturating_add(1))..)
            .filter_map(|(key, value)| match (key, value) {
                (Key::Op(seq), Value::Op { op_id }) if *seq > after => Some((*seq, *op_id)),
                _ => None,
            })
            .take(limit)
            .collect()
    }

    /// Query seq > 0, ScanIndexForward = false, Limit 1: the top visible op seq.
    pub fn query_top(&self) -> Option<Seq> {
        self.applied.keys().rev().find_map(|key| match key {
            Key::Op(seq) if *seq > 0 => Some(*seq),
            _ => None,
        })
    }

    /// Every op a transaction has committed, visible or still pending, by seq.
    pub fn committed_ops(&self) -> SortedMap<Seq, OpId> {
        self.applied
            .iter()
            .chain(self.pending.iter())
            .filter_map(|(key, value)| match (key, value) {
                (Key::Op(seq), Value::Op { op_id }) => Some((*seq, *op_id)),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Seqs at the edges of the set's words, and the top of the range.
    const EDGE_SEQS: [Seq; 8] = [0, 1, 63, 64, 127, 128, 192, SEQ_MAX];

    /// Every subset of [`EDGE_SEQS`], as both kinds of set, in the same order.
    fn every_subset() -> Vec<(SeqSet, BTreeSet<Seq>)> {
        (0u32..1 << EDGE_SEQS.len())
            .map(|mask| {
                let members = EDGE_SEQS
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| mask & 1 << bit != 0)
                    .map(|(_, seq)| *seq);
                (members.clone().collect(), members.collect())
            })
            .collect()
    }

    /// A state's fingerprint, order, encoding and printed form must not depend on how it holds
    /// a set of seqs: the checker's counts, representatives and traces are pinned by tests.
    #[test]
    fn a_seq_set_hashes_orders_encodes_and_prints_as_the_btree_set_it_replaces() {
        let subsets = every_subset();
        for (inline, tree) in &subsets {
            assert_eq!(
                crate::check::fingerprint_of(inline),
                crate::check::fingerprint_of(tree),
                "{tree:?}"
            );
            assert_eq!(format!("{inline:?}"), format!("{tree:?}"));
            let json = serde_json::to_string(tree).unwrap();
            assert_eq!(serde_json::to_string(inline).unwrap(), json);
            assert_eq!(serde_json::from_str::<SeqSet>(&json).unwrap(), *inline);
            let (mut inline_bytes, mut tree_bytes) = (Vec::new(), Vec::new());
            crate::check::codec::encode(inline, &mut inline_bytes).unwrap();
            crate::check::codec::encode(tree, &mut tree_bytes).unwrap();
            assert_eq!(inline_bytes, tree_bytes, "{tree:?}");
            assert_eq!(
                inline.iter().collect::<Vec<_>>(),
                tree.iter().copied().collect::<Vec<_>>()
            );
            assert_eq!(inline.len(), tree.len());
            assert_eq!(inline.is_empty(), tree.is_empty());
            assert_eq!(inline.last(), tree.last().copied());
            for seq in 0..=Seq::MAX {
                assert_eq!(inline.contains(&seq), tree.contains(&seq), "{tree:?} {seq}");
            }
        }
        for (inline, tree) in &subsets {
            for (other_inline, other_tree) in &subsets {
                assert_eq!(
                    inline.cmp(other_inline),
                    tree.cmp(other_tree),
                    "{tree:?} {other_tree:?}"
                );
            }
        }
    }

    #[test]
    fn inserting_into_a_seq_set_answers_whether_the_seq_was_absent() {
        let mut inline = SeqSet::new();
        let mut tree = BTreeSet::new();
        for seq in [5, 200, 5, 64, 0, 200, SEQ_MAX, 0] {
            assert_eq!(inline.insert(seq), tree.insert(seq), "{seq}");
        }
        assert_eq!(inline.iter().collect::<BTreeSet<_>>(), tree);
    }

    fn put(key: Key, value: Value) -> TransactItem {
        TransactItem {
            key,
            condition: Condition::AttributeNotExists,
            operation: Operation::Write(value),
            return_old_on_failure: false,
        }
    }

    #[test]
    fn a_committed_transaction_is_invisible_and_locked_until_each_item_applies() {
        let mut table = Table::default();
        let outcome = table.transact(
            &[
                put(Key::Op(1), Value::Op { op_id: 0 }),
                put(Key::Claim(0), Value::Claim { seq: 1 }),
            ],
            true,
        );
        assert_eq!(outcome, TransactOutcome::Committed);
        assert!(table.query_after(0, 10).is_empty());
        assert_eq!(table.committed_ops().len(), 1);
        let conflicting = table.transact(&[put(Key::Op(1), Value::Op { op_id: 1 })], true);
        assert_eq!(
            conflicting,
            TransactOutcome::Cancelled(vec![Reason::TransactionConflict])
        );
        table.apply(Key::Op(1));
        assert_eq!(table.query_after(0, 10), vec![(1, 0)]);
        assert!(table.pending.contains_key(&Key::Claim(0)));
    }

    #[test]
    fn cancellation_reasons_come_one_per_item_in_request_order_with_the_old_image() {
        let mut table = Table::default();
        table
            .applied
            .insert(Key::Counter, Value::Counter { next_seq: 3 });
        table.pending.insert(Key::Op(4), Value::Op { op_id: 9 });
        let items = [
            TransactItem {
                key: Key::Counter,
                condition: Condition::NextSeqEquals(2),
                operation: Operation::Write(Value::Counter { next_seq: 3 }),
                return_old_on_failure: true,
            },
            put(Key::Claim(1), Value::Claim { seq: 3 }),
            put(Key::Op(4), Value::Op { op_id: 1 }),
        ];
        assert_eq!(
            table.transact(&items, true),
            TransactOutcome::Cancelled(vec![
                Reason::ConditionalCheckFailed {
                    old: Some(Value::Counter { next_seq: 3 })
                },
                Reason::None,
                Reason::TransactionConflict,
            ])
        );
        assert!(
            !table.applied.contains_key(&Key::Claim(1)),
            "a cancelled transaction writes nothing"
        );
    }

    #[test]
    fn the_or_form_accepts_an_absent_counter_only_for_zero() {
        assert!(Condition::NextSeqEquals(0).holds(None));
        assert!(!Condition::NextSeqEquals(1).holds(None));
        assert!(Condition::NextSeqEquals(1).holds(Some(Value::Counter { next_seq: 1 })));
    }

    #[test]
    fn add_conflicts_with_a_transaction_holding_the_counter() {
        let mut table = Table::default();
        assert_eq!(table.add_to_counter(), Ok(1));
        table
            .pending
            .insert(Key::Counter, Value::Counter { next_seq: 2 });
        assert_eq!(table.add_to_counter(), Err(Reason::TransactionConflict));
    }

    #[test]
    fn overwrites_and_counter_regressions_are_recorded() {
        let mut table = Table::default();
        table.transact(&[put(Key::Op(1), Value::Op { op_id: 0 })], false);
        let mut blind = put(Key::Op(1), Value::Op { op_id: 1 });
        blind.condition = Condition::Always;
        table.transact(&[blind], false);
        assert!(table.anomalies.op_overwritten);
        let set = |next_seq| TransactItem {
            key: Key::Counter,
            condition: Condition::Always,
            operation: Operation::Write(Value::Counter { next_seq }),
            return_old_on_failure: false,
        };
        table.transact(&[set(5)], false);
        assert!(!table.anomalies.counter_went_back);
        table.transact(&[set(4)], false);
        assert!(table.anomalies.counter_went_back);
    }

    #[test]
    fn queries_page_ascending_and_the_reverse_query_finds_the_top() {
        let mut table = Table::default();
        for seq in [1, 2, 5] {
            table.applied.insert(Key::Op(seq), Value::Op { op_id: seq });
        }
        table
            .applied
            .insert(Key::Counter, Value::Counter { next_seq: 2 });
        table.applied.insert(Key::Claim(7), Value::Claim { seq: 9 });
        assert_eq!(table.query_after(0, 2), vec![(1, 1), (2, 2)]);
        assert_eq!(table.query_after(2, 2), vec![(5, 5)]);
        assert_eq!(table.query_top(), Some(5));
    }
}
