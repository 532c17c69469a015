//! The safety search's visited set: per state fingerprint, how the state was first reached
//! (the parent's fingerprint, the action's index, the depth), and nothing of the state itself.
//!
//! Invariants:
//! - Memory grows in small steps, never by the whole table at once: the set is split into
//!   [`SHARDS`] hash tables by bits of the fingerprint that the tables themselves do not use, and
//!   each grows on its own. One table doubling at 58.7 million states needed its old 1.6 GiB and
//!   a new 3.2 GiB at once; a shard's doubling needs 1/256 of that, so a run can fill what its
//!   memory limit holds (issue: "memory bounded by design, not by the bound").
//! - An entry is 20 bytes (a fingerprint and a parent packed to 4-byte alignment) plus the table's
//!   control byte: [`ENTRY_BYTES`] is what the memory limit counts per slot.
//! - Deterministic: which shard holds a fingerprint depends on the fingerprint only, and no
//!   caller iterates the set, so verdicts and paths are the same for any thread count.

use super::search::FingerprintHasher;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Shards of the set: enough that one doubling is a small step under any memory limit a run is
/// given (a 4 GiB run grows by at most about 16 MiB at once), few enough that empty shards cost
/// nothing worth counting.
pub(crate) const SHARDS: usize = 256;

/// Bytes a slot of a shard's table takes: the entry and its control byte.
pub(crate) const ENTRY_BYTES: usize = std::mem::size_of::<(Key, Parent)>() + 1;

/// Deepest depth and largest action index a parent records (both are 16 bits).
pub(crate) const DEPTH_MAX: usize = u16::MAX as usize - 1;
pub(crate) const ACTION_INDEX_MAX: usize = u16::MAX as usize - 1;

/// The action index that marks an initial state (`from` is then its index among them).
const ROOT: u16 = u16::MAX;

/// A fingerprint at 4-byte alignment, so that an entry packs into 20 bytes, not 24.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(4))]
pub(crate) struct Key(pub(crate) u64);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let fingerprint = self.0;
        state.write_u64(fingerprint);
    }
}

/// How a visited state was first reached.
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
pub(crate) struct Parent {
    /// The parent's fingerprint, or for an initial state its index among the initial states.
    from: u64,
    action: u16,
    depth: u16,
}

impl Parent {
    /// An initial state, the `index`-th of the model's.
    pub(crate) fn root(index: usize) -> Parent {
        Parent {
            from: index as u64,
            action: ROOT,
            depth: 0,
        }
    }

    /// A state first reached from `from` by the action at `action_index`, at `depth`.
    pub(crate) fn step(from: u64, action_index: usize, depth: usize) -> Parent {
        assert!(
            action_index <= ACTION_INDEX_MAX,
            "a state enables more than {ACTION_INDEX_MAX} actions"
        );
        assert!(depth <= DEPTH_MAX, "a search deeper than {DEPTH_MAX} steps");
        Parent {
            from,
            action: action_index as u16,
            depth: depth as u16,
        }
    }

    /// `None` for an initial state; else the parent's fingerprint and the action's index.
    pub(crate) fn step_from(self) -> Option<(u64, usize)> {
        let action = self.action;
        (action != ROOT).then_some((self.from, usize::from(action)))
    }

    /// The initial state's index (meaningful only when `step_from` is `None`).
    pub(crate) fn root_index(self) -> usize {
        self.from as usize
    }

    pub(crate) fn depth(self) -> usize {
        usize::from(self.depth)
    }
}

type Shard = HashMap<Key, Parent, BuildHasherDefault<FingerprintHasher>>;

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
    shards: Vec<Shard>,
    len: usize,
}

impl Default for Visited {
    fn default() -> Self {
        Visited {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            len: 0,
        }
    }
}

/// The shard of a fingerprint: bits 40..48. The tables use the low bits for the bucket and the
/// top 7 for the control byte, so these bits leave both as well mixed within a shard.
pub(crate) fn shard_of(fingerprint: u64) -> usize {
    ((fingerprint >> 40) as usize) % SHARDS
}

impl Visited {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Records `parent` for `fingerprint` unless it is known; answers whether it was new.
    pub(crate) fn insert_if_absent(&mut self, fingerprint: u64, parent: Parent) -> bool {
        let shard = &mut self.shards[shard_of(fingerprint)];
        match shard.entry(Key(fingerprint)) {
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(parent);
                self.len += 1;
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => false,
        }
    }

    pub(crate) fn get(&self, fingerprint: u64) -> Option<Parent> {
        self.shards[shard_of(fingerprint)]
            .get(&Key(fingerprint))
            .copied()
    }

    pub(crate) fn contains(&self, fingerprint: u64) -> bool {
        self.shards[shard_of(fingerprint)].contains_key(&Key(fingerprint))
    }

    /// The most that inserting up to `new_states_max` states can allocate at once: a shard grows
    /// only once its free slots are filled, so the states can make grow at most the shards with
    /// the fewest free slots whose free slots (and one more each) they cover; each of those
    /// allocates its doubled table while the old one is still held.
    pub(crate) fn growth_bytes(&self, new_states_max: usize) -> usize {
        shards_growth_bytes(
            self.shards
                .iter()
                .map(|shard| (shard.len(), shard.capacity())),
            new_states_max,
            ENTRY_BYTES,
        )
    }

    /// Slots allocated over all shards (for the tests of the memory accounting).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards.iter().map(Shard::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_packs_into_20_bytes() {
        assert_eq!(std::mem::size_of::<(Key, Parent)>(), 20);
        assert_eq!(ENTRY_BYTES, 21);
    }

    #[test]
    fn a_fingerprint_is_known_once_and_keeps_its_first_parent() {
        let mut visited = Visited::default();
        assert!(visited.insert_if_absent(7, Parent::root(3)));
        assert!(!visited.insert_if_absent(7, Parent::step(1, 2, 1)));
        assert!(visited.insert_if_absent(8, Parent::step(7, 5, 1)));
        assert_eq!(visited.len(), 2);
        assert_eq!(visited.get(7).unwrap().step_from(), None);
        assert_eq!(visited.get(7).unwrap().root_index(), 3);
        assert_eq!(visited.get(8).unwrap().step_from(), Some((7, 5)));
        assert_eq!(visited.get(8).unwrap().depth(), 1);
        assert!(visited.contains(8));
        assert!(!visited.contains(9));
        assert!(visited.get(9).is_none());
    }

    #[test]
    fn fingerprints_spread_over_every_shard_and_no_doubling_is_the_whole_set() {
        let mut visited = Visited::default();
        let states = 1 << 20;
        for index in 0..states {
            // Fingerprints are well-mixed hashes; a multiplicative hash of the index is one.
            let fingerprint = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            assert!(visited.insert_if_absent(fingerprint, Parent::step(0, 0, 1)));
        }
        assert_eq!(visited.len(), states);
        let smallest = visited.shards.iter().map(Shard::len).min().unwrap();
        let largest = visited.shards.iter().map(Shard::len).max().unwrap();
        assert!(smallest * 2 > largest, "{smallest} .. {largest}");
        // A chunk's growth is the doubling of the few shards it can fill, not the whole set's.
        let whole_doubling = visited.capacity() * 2 * ENTRY_BYTES;
        let growth = visited.growth_bytes(4096);
        assert!(growth > 0, "some shard is within 4,096 states of growing");
        assert!(growth * 16 < whole_doubling, "{growth} of {whole_doubling}");
        // Enough new states to fill every shard make every shard count.
        assert_eq!(visited.growth_bytes(states * 2), whole_doubling);
    }

    #[test]
    #[should_panic(expected = "a search deeper than")]
    fn a_depth_past_the_limit_is_refused() {
        Parent::step(0, 0, DEPTH_MAX + 1);
    }
}
