//! The liveness graph's index from a state's fingerprint to its index, sharded as the safety
//! search's visited set is (check/visited.rs): one table of every state doubling at once needed
//! 3.3 GiB on top of 7.3 GiB at 29 million states (4 writers), and stopped the run at its memory
//! limit; a shard's doubling is 1/256 of that.
//!
//! Invariants: an entry is 12 bytes (the fingerprint packed to 4-byte alignment, the index);
//! which shard holds a fingerprint depends on the fingerprint only, and nothing iterates the
//! index, so the graph's numbering is the same for any thread count.

use crate::check::search::FingerprintHasher;
use crate::check::visited::{shard_of, shards_growth_bytes, Key, SHARDS};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

type Shard = HashMap<Key, u32, BuildHasherDefault<FingerprintHasher>>;

/// Bytes a slot of a shard's table takes: the entry and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<(Key, u32)>() + 1;

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
    /// The index of `fingerprint`, and whether it was new (then it is `next`).
    pub(super) fn index_or_insert(&mut self, fingerprint: u64, next: u32) -> (u32, bool) {
        match self.shards[shard_of(fingerprint)].entry(Key(fingerprint)) {
            std::collections::hash_map::Entry::Occupied(entry) => (*entry.get(), false),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(next);
                self.len += 1;
                (next, true)
            }
        }
    }

    /// The index of `fingerprint`, if it has one.
    pub(super) fn get(&self, fingerprint: u64) -> Option<u32> {
        self.shards[shard_of(fingerprint)]
            .get(&Key(fingerprint))
            .copied()
    }

    /// What the next `new_states_max` insertions may allocate at once.
    pub(super) fn growth_bytes(&self, new_states_max: usize) -> usize {
        shards_growth_bytes(
            self.shards
                .iter()
                .map(|shard| (shard.len(), shard.capacity())),
            new_states_max,
            SLOT_BYTES,
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
    fn an_entry_packs_into_12_bytes_and_a_fingerprint_keeps_its_first_index() {
        assert_eq!(SLOT_BYTES, 13);
        let mut index = StateIndex::default();
        assert_eq!(index.index_or_insert(7, 0), (0, true));
        assert_eq!(index.index_or_insert(7, 1), (0, false));
        assert_eq!(index.index_or_insert(1 << 50, 1), (1, true));
        assert_eq!(index.len(), 2);
        assert_eq!(index.get(7), Some(0));
        assert_eq!(index.get(1 << 50), Some(1));
        assert_eq!(index.get(8), None);
    }
}
