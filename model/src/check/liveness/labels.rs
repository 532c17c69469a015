//! What the liveness analysis reads of a state besides its edges: the fairness families enabled
//! there, those a bound cuts there, and each property's trigger and goal bits — its label.
//!
//! A graph of millions of states has few distinct labels (hundreds for the relay at 3 writers), so
//! each state keeps the index of its label, 2 bytes, instead of the label's 12; past 65,536
//! distinct labels every index widens to 4 bytes at once.
//!
//! Invariants: a label's index is the order in which it was first pushed, and nothing iterates
//! the map from labels to indices, so the numbering is the graph's, the same for any thread
//! count; `get(state)` is the label pushed for `state`.

use std::collections::HashMap;

/// One state's label (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Label {
    pub(super) enabled: u32,
    pub(super) cut: u32,
    /// Bit `2p`: property p's trigger holds; bit `2p + 1`: its goal holds.
    pub(super) marks: u32,
}

/// Distinct labels the 2-byte indices can name.
const NARROW_LABELS_MAX: usize = 1 << 16;

/// Per state, the index of its label.
#[derive(Default)]
pub(super) struct Labels {
    distinct: Vec<Label>,
    index_of: HashMap<Label, u32>,
    /// The states' indices while every index fits 2 bytes.
    narrow: Vec<u16>,
    /// The states' indices once one does not (then `narrow` is empty).
    wide: Vec<u32>,
}

impl Labels {
    pub(super) fn push(&mut self, label: Label) {
        let next = self.distinct.len() as u32;
        let index = *self.index_of.entry(label).or_insert(next);
        if index == next {
            self.distinct.push(label);
        }
        if self.wide.is_empty() && (index as usize) < NARROW_LABELS_MAX {
            self.narrow.push(index as u16);
            return;
        }
        if self.wide.is_empty() {
            self.wide = self.narrow.drain(..).map(u32::from).collect();
            self.narrow = Vec::new();
        }
        self.wide.push(index);
    }

    pub(super) fn get(&self, state: usize) -> Label {
        let index = if self.wide.is_empty() {
            usize::from(self.narrow[state])
        } else {
            self.wide[state] as usize
        };
        self.distinct[index]
    }

    pub(super) fn len(&self) -> usize {
        self.narrow.len() + self.wide.len()
    }

    /// Bytes one more state costs.
    pub(super) fn bytes_per_state(&self) -> usize {
        if self.wide.is_empty() {
            2
        } else {
            4
        }
    }

    /// Distinct labels met.
    #[cfg(test)]
    pub(super) fn distinct(&self) -> usize {
        self.distinct.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(enabled: u32) -> Label {
        Label {
            enabled,
            cut: enabled.rotate_left(7),
            marks: enabled & 3,
        }
    }

    #[test]
    fn each_state_reads_back_its_own_label_and_repeats_share_one_index() {
        let mut labels = Labels::default();
        for state in 0..1000u32 {
            labels.push(label(state % 10));
        }
        assert_eq!(labels.len(), 1000);
        assert_eq!(labels.distinct(), 10);
        assert_eq!(labels.bytes_per_state(), 2);
        for state in 0..1000u32 {
            assert_eq!(labels.get(state as usize), label(state % 10));
        }
    }

    #[test]
    fn past_the_narrow_indices_every_state_widens_and_keeps_its_label() {
        let mut labels = Labels::default();
        let distinct = NARROW_LABELS_MAX as u32 + 5;
        for state in 0..distinct {
            labels.push(label(state));
            if state as usize == NARROW_LABELS_MAX - 1 {
                assert_eq!(labels.bytes_per_state(), 2, "the last narrow index");
            }
        }
        labels.push(label(3));
        assert_eq!(labels.bytes_per_state(), 4);
        assert_eq!(labels.distinct(), distinct as usize);
        assert_eq!(labels.len(), distinct as usize + 1);
        for state in 0..distinct {
            assert_eq!(labels.get(state as usize), label(state));
        }
        assert_eq!(labels.get(distinct as usize), label(3));
    }
}
