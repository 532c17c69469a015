//! The liveness graph's index from a state's fingerprint to its index. The graph keeps every
//! state's fingerprint in index order already, so a slot of the index holds the index alone
//! (4 bytes) and a look-up compares the fingerprint the graph holds there: about 6 bytes a state
//! at the tables' load, where an entry holding the fingerprint too took 12 in a table with its
//! slack (19 on average), a third of the graph's cost per state.
//!
//! Sharded as the safety search's visited set is (check/visited.rs): one table of every state
//! doubling at once needed 3.3 GiB on top of 7.3 GiB at 29 million states (4 writers); a shard's
//! doubling is 1/256 of that. Each shard is an open-addressing table with linear probing, a
//! power of two of slots, at most three quarters full.
//!
//! Invariants: `fingerprints[index]` is the fingerprint inserted with `index`, for every index
//! the index holds (the caller appends it right after a new insertion), and indices are below
//! [`EMPTY`]; which shard and slot a fingerprint starts at depends on the fingerprint only, and
//! nothing iterates the index, so the graph's numbering is the same for any thread count.

use crate::check::visited::{shard_of, shards_growth_bytes, SHARDS};

/// A free slot.
const EMPTY: u32 = u32::MAX;
/// Slots of a shard's first table.
const SHARD_SLOTS_MIN: usize = 16;
/// Bytes a slot takes.
const SLOT_BYTES: usize = std::mem::size_of::<u32>();

#[derive(Default)]
struct Shard {
    slots: Vec<u32>,
    len: usize,
}

impl Shard {
    /// Entries the shard holds before its table doubles.
    fn capacity(&self) -> usize {
        self.slots.len() / 4 * 3
    }

    /// The slot holding `fingerprint`'s index, or the free slot where it would go.
    fn probe(&self, fingerprints: &[u64], fingerprint: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut slot = fingerprint as usize & mask;
        loop {
            let held = self.slots[slot];
            if held == EMPTY || fingerprints[held as usize] == fingerprint {
                return slot;
            }
            slot = (slot + 1) & mask;
        }
    }

    fn grow(&mut self, fingerprints: &[u64]) {
        let slots = (self.slots.len() * 2).max(SHARD_SLOTS_MIN);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; slots]);
        for held in old.into_iter().filter(|held| *held != EMPTY) {
            let slot = self.probe(fingerprints, fingerprints[held as usize]);
            self.slots[slot] = held;
        }
    }
}

pub(super) struct StateIndex {
    shards: Vec<Shard>,
    len: usize,
}

impl Default for StateIndex {
    fn default() -> Self {
        StateIndex {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            len: 0,
        }
    }
}

impl StateIndex {
    /// The index of `fingerprint`, and whether it was new (then it is `next`, and the caller
    /// appends `fingerprint` to `fingerprints` at `next`). `fingerprints` holds the fingerprint
    /// of every index inserted so far.
    pub(super) fn index_or_insert(
        &mut self,
        fingerprints: &[u64],
        fingerprint: u64,
        next: u32,
    ) -> (u32, bool) {
        assert!(
            next < EMPTY,
            "an index must differ from the free slot's mark"
        );
        assert_eq!(
            fingerprints.len(),
            self.len,
            "every index inserted has its fingerprint"
        );
        let shard = &mut self.shards[shard_of(fingerprint)];
        if shard.len + 1 > shard.capacity() {
            shard.grow(fingerprints);
        }
        let slot = shard.probe(fingerprints, fingerprint);
        match shard.slots[slot] {
            EMPTY => {
                shard.slots[slot] = next;
                shard.len += 1;
                self.len += 1;
                (next, true)
            }
            held => (held, false),
        }
    }

    /// The index of `fingerprint`, if it has one.
    pub(super) fn get(&self, fingerprints: &[u64], fingerprint: u64) -> Option<u32> {
        let shard = &self.shards[shard_of(fingerprint)];
        if shard.slots.is_empty() {
            return None;
        }
        match shard.slots[shard.probe(fingerprints, fingerprint)] {
            EMPTY => None,
            held => Some(held),
        }
    }

    /// What the next `new_states_max` insertions may allocate at once.
    pub(super) fn growth_bytes(&self, new_states_max: usize) -> usize {
        // A doubling allocates twice the slots, which hold 4/3 of the entries the capacity counts.
        shards_growth_bytes(
            self.shards
                .iter()
                .map(|shard| (shard.len, shard.capacity())),
            new_states_max,
            SLOT_BYTES * 4 / 3 + 1,
        )
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_keeps_its_first_index() {
        let mut fingerprints = Vec::new();
        let mut index = StateIndex::default();
        for (fingerprint, expected) in [(7, (0, true)), (7, (0, false)), (1 << 50, (1, true))] {
            let next = fingerprints.len() as u32;
            let answer = index.index_or_insert(&fingerprints, fingerprint, next);
            assert_eq!(answer, expected);
            if answer.1 {
                fingerprints.push(fingerprint);
            }
        }
        assert_eq!(index.len(), 2);
        assert_eq!(index.get(&fingerprints, 7), Some(0));
        assert_eq!(index.get(&fingerprints, 1 << 50), Some(1));
        assert_eq!(index.get(&fingerprints, 8), None);
    }

    /// Many fingerprints in one shard and one starting slot: the probes run past each other and
    /// across the tables' doublings, and every fingerprint keeps the index it was given.
    #[test]
    fn colliding_fingerprints_keep_their_indices_across_doublings() {
        let mut fingerprints = Vec::new();
        let mut index = StateIndex::default();
        // Bits 40..48 pick the shard, the low bits the slot: vary neither for half of them.
        let colliding = (0..500u64).map(|n| (n << 48) | 5);
        let spread = (0..5000u64).map(|n| n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for fingerprint in colliding.chain(spread) {
            let next = fingerprints.len() as u32;
            assert_eq!(
                index.index_or_insert(&fingerprints, fingerprint, next),
                (next, true)
            );
            fingerprints.push(fingerprint);
            let shard = &index.shards[shard_of(fingerprint)];
            assert!(
                shard.len * 4 <= shard.slots.len() * 3,
                "at most three quarters full, so that a probe meets a free slot soon"
            );
        }
        for (expected, fingerprint) in fingerprints.iter().enumerate() {
            assert_eq!(
                index.get(&fingerprints, *fingerprint),
                Some(expected as u32)
            );
            assert_eq!(
                index.index_or_insert(&fingerprints, *fingerprint, fingerprints.len() as u32),
                (expected as u32, false)
            );
        }
        assert_eq!(index.len(), fingerprints.len());
        assert_eq!(index.get(&fingerprints, (501 << 48) | 5), None);
        assert!(index.shards[shard_of(5)].len >= 500);
    }
}
