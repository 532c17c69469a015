//! The safety search's visited set: per state fingerprint, and under the partial-order
//! reduction the depth it was first reached at; nothing of the state itself. How it was reached
//! (its parent and action) is in the append-only parent log ([`super::parents`]), which can
//! leave memory; this set cannot.
//!
//! Invariants:
//! - Memory grows in small steps, never by the whole table at once: the set is split into
//!   [`SHARDS`] hash tables by bits of the fingerprint that the tables themselves do not use, and
//!   each grows on its own. One table doubling at 58.7 million states needed its old 1.6 GiB and
//!   a new 3.2 GiB at once; a shard's doubling needs 1/256 of that, so a run can fill what its
//!   memory limit holds (issue: "memory bounded by design, not by the bound").
//! - A slot is a fingerprint and the table's control byte, 9 bytes ([`FINGERPRINT_SLOT_BYTES`]);
//!   with a depth, which only the partial-order reduction's cycle proviso reads, 11
//!   ([`DEPTH_SLOT_BYTES`]: the fingerprint packed to 2-byte alignment beside a 16-bit depth).
//!   What the memory limit counts per slot is the mode's. With the parent in the entry it was
//!   21: the parent log is what let one lost response's 3-writer spaces fit 4 GiB.
//! - Deterministic: which shard holds a fingerprint depends on the fingerprint only, and no
//!   caller iterates the set, so verdicts and paths are the same for any thread count.

use super::search::FingerprintHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Shards of the set: enough that one doubling is a small step under any memory limit a run is
/// given (a 4 GiB run grows by at most about 16 MiB at once), few enough that empty shards cost
/// nothing worth counting.
pub(crate) const SHARDS: usize = 256;

/// Bytes a slot of a shard's table takes, fingerprints alone: the key and its control byte.
pub(crate) const FINGERPRINT_SLOT_BYTES: usize = std::mem::size_of::<Key>() + 1;

/// Bytes a slot takes with depths: the entry and its control byte.
pub(crate) const DEPTH_SLOT_BYTES: usize = std::mem::size_of::<(Key, Depth)>() + 1;

/// Deepest depth the set records (16 bits).
pub(crate) const DEPTH_MAX: usize = u16::MAX as usize;

/// A fingerprint at 2-byte alignment, so that an entry with its depth packs into 10 bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(2))]
pub(crate) struct Key(pub(crate) u64);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let fingerprint = self.0;
        state.write_u64(fingerprint);
    }
}

/// The depth a visited state was first reached at.
#[derive(Clone, Copy)]
struct Depth(u16);

type Hashing = BuildHasherDefault<FingerprintHasher>;

/// What the next `new_states_max` insertions may allocate at once over shards of (length,
/// capacity), slots of `slot_bytes`: the doublings of the fullest shards that many states can
/// fill (every new state landing where room is shortest), counted before they happen.
pub(crate) fn shards_growth_bytes(
    shards: impl Iterator<Item = (usize, usize)>,
    new_states_max: usize,
    slot_bytes: usize,
) -> usize {
    let mut free: Vec<(usize, usize)> = shards
        .map(|(len, capacity)| (capacity - len, capacity))
        .collect();
    free.sort_unstable();
    let mut states_left = new_states_max;
    let mut growth_bytes = 0;
    for (free_slots, capacity) in free {
        if free_slots >= states_left {
            break;
        }
        states_left -= free_slots + 1;
        growth_bytes += capacity.max(4) * 2 * slot_bytes;
    }
    growth_bytes
}

/// The visited set (see the module doc).
pub(crate) struct Visited {
    shards: Shards,
    len: usize,
}

enum Shards {
    Fingerprints(Vec<HashSet<Key, Hashing>>),
    WithDepths(Vec<HashMap<Key, Depth, Hashing>>),
}

/// The shard of a fingerprint: bits 40..48. The tables use the low bits for the bucket and the
/// top 7 for the control byte, so these bits leave both as well mixed within a shard.
pub(crate) fn shard_of(fingerprint: u64) -> usize {
    ((fingerprint >> 40) as usize) % SHARDS
}

impl Visited {
    /// An empty set that keeps each state's depth when `depths` (the partial-order reduction's
    /// cycle proviso reads it), else fingerprints alone.
    pub(crate) fn new(depths: bool) -> Visited {
        let shards = if depths {
            Shards::WithDepths((0..SHARDS).map(|_| HashMap::default()).collect())
        } else {
            Shards::Fingerprints((0..SHARDS).map(|_| HashSet::default()).collect())
        };
        Visited { shards, len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Records `fingerprint` as first reached at `depth` unless it is known; answers whether it
    /// was new.
    pub(crate) fn insert_if_absent(&mut self, fingerprint: u64, depth: usize) -> bool {
        let shard = shard_of(fingerprint);
        let new = match &mut self.shards {
            Shards::Fingerprints(shards) => shards[shard].insert(Key(fingerprint)),
            Shards::WithDepths(shards) => {
                assert!(depth <= DEPTH_MAX, "a search deeper than {DEPTH_MAX} steps");
                match shards[shard].entry(Key(fingerprint)) {
                    std::collections::hash_map::Entry::Vacant(entry) => {
                        entry.insert(Depth(depth as u16));
                        true
                    }
                    std::collections::hash_map::Entry::Occupied(_) => false,
                }
            }
        };
        self.len += usize::from(new);
        new
    }

    /// The depth `fingerprint` was first reached at, if it is visited. Only a set made to keep
    /// depths can answer: asking another is a bug of the search.
    pub(crate) fn depth(&self, fingerprint: u64) -> Option<usize> {
        match &self.shards {
            Shards::WithDepths(shards) => shards[shard_of(fingerprint)]
                .get(&Key(fingerprint))
                .map(|depth| usize::from(depth.0)),
            Shards::Fingerprints(_) => panic!("the visited set keeps no depths: made without them"),
        }
    }

    pub(crate) fn contains(&self, fingerprint: u64) -> bool {
        let shard = shard_of(fingerprint);
        match &self.shards {
            Shards::Fingerprints(shards) => shards[shard].contains(&Key(fingerprint)),
            Shards::WithDepths(shards) => shards[shard].contains_key(&Key(fingerprint)),
        }
    }

    /// The most that inserting up to `new_states_max` states can allocate at once: a shard grows
    /// only once its free slots are filled, so the states can make grow at most the shards with
    /// the fewest free slots whose free slots (and one more each) they cover; each of those
    /// allocates its doubled table while the old one is still held.
    pub(crate) fn growth_bytes(&self, new_states_max: usize) -> usize {
        match &self.shards {
            Shards::Fingerprints(shards) => shards_growth_bytes(
                shards.iter().map(|shard| (shard.len(), shard.capacity())),
                new_states_max,
                FINGERPRINT_SLOT_BYTES,
            ),
            Shards::WithDepths(shards) => shards_growth_bytes(
                shards.iter().map(|shard| (shard.len(), shard.capacity())),
                new_states_max,
                DEPTH_SLOT_BYTES,
            ),
        }
    }

    /// Slots allocated over all shards, and their lengths (for the tests of the memory
    /// accounting and of the spread).
    #[cfg(test)]
    fn shard_sizes(&self) -> Vec<(usize, usize)> {
        match &self.shards {
            Shards::Fingerprints(shards) => shards
                .iter()
                .map(|shard| (shard.len(), shard.capacity()))
                .collect(),
            Shards::WithDepths(shards) => shards
                .iter()
                .map(|shard| (shard.len(), shard.capacity()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_9_bytes_and_11_with_its_depth() {
        assert_eq!(std::mem::size_of::<Key>(), 8);
        assert_eq!(std::mem::size_of::<(Key, Depth)>(), 10);
        assert_eq!(FINGERPRINT_SLOT_BYTES, 9);
        assert_eq!(DEPTH_SLOT_BYTES, 11);
    }

    #[test]
    fn a_fingerprint_is_known_once_and_keeps_its_first_depth() {
        let mut visited = Visited::new(true);
        assert!(visited.insert_if_absent(7, 0));
        assert!(!visited.insert_if_absent(7, 1));
        assert!(visited.insert_if_absent(8, 1));
        assert_eq!(visited.len(), 2);
        assert_eq!(visited.depth(7), Some(0));
        assert_eq!(visited.depth(8), Some(1));
        assert!(visited.contains(8));
        assert!(!visited.contains(9));
        assert_eq!(visited.depth(9), None);
    }

    #[test]
    fn a_set_of_fingerprints_alone_knows_each_once_and_refuses_depths() {
        let mut visited = Visited::new(false);
        assert!(visited.insert_if_absent(7, 0));
        assert!(!visited.insert_if_absent(7, 1));
        // Deeper than a depth entry holds: nothing records it.
        assert!(visited.insert_if_absent(8, DEPTH_MAX + 1));
        assert_eq!(visited.len(), 2);
        assert!(visited.contains(7));
        assert!(!visited.contains(9));
        let asked = std::panic::catch_unwind(|| visited.depth(7));
        assert!(asked.is_err(), "a set without depths cannot answer one");
    }

    #[test]
    fn fingerprints_spread_over_every_shard_and_no_doubling_is_the_whole_set() {
        for (depths, slot_bytes) in [(false, FINGERPRINT_SLOT_BYTES), (true, DEPTH_SLOT_BYTES)] {
            let mut visited = Visited::new(depths);
            let states = 1 << 20;
            for index in 0..states {
                // Fingerprints are well-mixed hashes; a multiplicative hash of the index is one.
                let fingerprint = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                assert!(visited.insert_if_absent(fingerprint, 1));
            }
            assert_eq!(visited.len(), states);
            let sizes = visited.shard_sizes();
            let smallest = sizes.iter().map(|(len, _)| *len).min().unwrap();
            let largest = sizes.iter().map(|(len, _)| *len).max().unwrap();
            assert!(smallest * 2 > largest, "{smallest} .. {largest}");
            // A chunk's growth is the doubling of the few shards it can fill, not the whole
            // set's, counted at the mode's slot size.
            let capacity: usize = sizes.iter().map(|(_, capacity)| *capacity).sum();
            let whole_doubling = capacity * 2 * slot_bytes;
            let growth = visited.growth_bytes(4096);
            assert!(growth > 0, "some shard is within 4,096 states of growing");
            assert!(growth * 16 < whole_doubling, "{growth} of {whole_doubling}");
            // Enough new states to fill every shard make every shard count.
            assert_eq!(visited.growth_bytes(states * 2), whole_doubling);
        }
    }

    #[test]
    #[should_panic(expected = "a search deeper than")]
    fn a_depth_past_the_limit_is_refused() {
        Visited::new(true).insert_if_absent(0, DEPTH_MAX + 1);
    }
}
