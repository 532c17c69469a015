//! How each visited state was first reached, as an append-only log in discovery order (as TLC
//! keeps it): per new state its fingerprint, its parent's fingerprint (for an initial state, its
//! index among the initial states) and the index of the action taken. The visited set keeps
//! fingerprints and depths only; a path is found by reading this log from its newest record back.
//!
//! Invariants:
//! - A state's record comes after its parent's: a state is logged when it is first visited,
//!   and its successors only once it is expanded, later. One pass from the newest record to the
//!   oldest therefore meets every record of any number of paths.
//! - Each visited state has exactly one record (the visited set decides what is new), so a
//!   fingerprint's record is its first parent, the one the breadth-first order makes shortest.
//! - Full blocks stay in memory until the search spills them with its frontier (past the
//!   frontier's budget or near the memory limit) into the run's spill store, counted against
//!   the disk limit. A spilled block is read, never taken, when paths are rebuilt, and is
//!   removed from the store when the log is dropped.
//! - Only the search's merge appends, in chunk order: the log's order, and so every path, is
//!   the same for any thread count.

use super::frontier::{Spill, SpillFailure, SpillStore};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Bytes of one record: fingerprint (8), parent's fingerprint or initial index (8), action (2).
pub(crate) const RECORD_BYTES: usize = 18;

/// Largest action index a record holds (16 bits, one value kept for [`ROOT`]).
pub(crate) const ACTION_INDEX_MAX: usize = u16::MAX as usize - 1;

/// The action index that marks an initial state (`from` is then its index among them).
const ROOT: u16 = u16::MAX;

/// How a visited state was first reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parent {
    /// The parent's fingerprint, or for an initial state its index among the initial states.
    from: u64,
    action: u16,
}

impl Parent {
    /// An initial state, the `index`-th of the model's.
    pub(crate) fn root(index: usize) -> Parent {
        Parent {
            from: index as u64,
            action: ROOT,
        }
    }

    /// A state first reached from `from` by the action at `action_index`.
    pub(crate) fn step(from: u64, action_index: usize) -> Parent {
        assert!(
            action_index <= ACTION_INDEX_MAX,
            "a state enables more than {ACTION_INDEX_MAX} actions"
        );
        Parent {
            from,
            action: action_index as u16,
        }
    }

    /// `None` for an initial state; else the parent's fingerprint and the action's index.
    pub(crate) fn step_from(self) -> Option<(u64, usize)> {
        (self.action != ROOT).then_some((self.from, usize::from(self.action)))
    }

    /// The initial state's index (meaningful only when `step_from` is `None`).
    pub(crate) fn root_index(self) -> usize {
        self.from as usize
    }
}

enum LogBlock {
    Memory(Vec<u8>),
    Spilled { id: u64, len: usize },
}

/// The log (see the module doc).
pub(crate) struct ParentLog {
    /// Full blocks, oldest first.
    full: Vec<LogBlock>,
    /// The block being written, allocated at its full size once.
    writing: Vec<u8>,
    /// A whole number of records.
    block_bytes: usize,
    /// The store spilled blocks went to (set at the first spill), to read and remove them.
    store: Option<Arc<dyn SpillStore>>,
    records: usize,
}

impl ParentLog {
    /// A log whose blocks hold at most `block_bytes` (at least one record).
    pub(crate) fn new(block_bytes: usize) -> ParentLog {
        let block_bytes = (block_bytes / RECORD_BYTES).max(1) * RECORD_BYTES;
        ParentLog {
            full: Vec::new(),
            writing: Vec::new(),
            block_bytes,
            store: None,
            records: 0,
        }
    }

    /// Records that `fingerprint` was first reached as `parent` says.
    pub(crate) fn append(&mut self, fingerprint: u64, parent: Parent) {
        if self.writing.len() == self.block_bytes {
            let full = std::mem::take(&mut self.writing);
            self.full.push(LogBlock::Memory(full));
        }
        if self.writing.capacity() == 0 {
            self.writing.reserve_exact(self.block_bytes);
        }
        self.writing.extend_from_slice(&fingerprint.to_le_bytes());
        self.writing.extend_from_slice(&parent.from.to_le_bytes());
        self.writing.extend_from_slice(&parent.action.to_le_bytes());
        self.records += 1;
    }

    /// Records appended so far.
    pub(crate) fn len(&self) -> usize {
        self.records
    }

    /// Bytes held in memory that [`ParentLog::spill`] could give back: the full blocks not
    /// spilled yet.
    pub(crate) fn spillable_bytes(&self) -> usize {
        self.full
            .iter()
            .map(|block| match block {
                LogBlock::Memory(bytes) => bytes.len(),
                LogBlock::Spilled { .. } => 0,
            })
            .sum()
    }

    /// What the next appends may allocate at once: a new block.
    pub(crate) fn growth_bytes(&self) -> usize {
        self.block_bytes
    }

    /// Writes every full block still in memory to the store, within its disk limit.
    pub(crate) fn spill(&mut self, spill: &mut Spill) -> Result<(), SpillFailure> {
        for block in self.full.iter_mut() {
            let LogBlock::Memory(bytes) = block else {
                continue;
            };
            let len = bytes.len();
            let id = spill.put(bytes)?;
            self.store.get_or_insert_with(|| spill.store.clone());
            *block = LogBlock::Spilled { id, len };
        }
        Ok(())
    }

    /// The records of every state on the paths to `lasts`: one pass from the newest record to
    /// the oldest. `Err` when a spilled block cannot be read back whole.
    pub(crate) fn links(&self, lasts: &[u64]) -> Result<HashMap<u64, Parent>, SpillFailure> {
        let mut wanted: HashSet<u64> = lasts.iter().copied().collect();
        let mut links = HashMap::new();
        let mut take_in = |block: &[u8], wanted: &mut HashSet<u64>| {
            for record in block.chunks_exact(RECORD_BYTES).rev() {
                let fingerprint = u64::from_le_bytes(record[0..8].try_into().expect("8 bytes"));
                if !wanted.remove(&fingerprint) {
                    continue;
                }
                let parent = Parent {
                    from: u64::from_le_bytes(record[8..16].try_into().expect("8 bytes")),
                    action: u16::from_le_bytes(record[16..18].try_into().expect("2 bytes")),
                };
                if let Some((from, _)) = parent.step_from() {
                    if !links.contains_key(&from) {
                        wanted.insert(from);
                    }
                }
                links.insert(fingerprint, parent);
            }
        };
        take_in(&self.writing, &mut wanted);
        for block in self.full.iter().rev() {
            if wanted.is_empty() {
                break;
            }
            match block {
                LogBlock::Memory(bytes) => take_in(bytes, &mut wanted),
                LogBlock::Spilled { id, len } => {
                    let store = self.store.as_ref().expect("a spilled block has a store");
                    let bytes = store.read(*id).map_err(SpillFailure::Io)?;
                    if bytes.len() != *len {
                        return Err(SpillFailure::Damaged);
                    }
                    take_in(&bytes, &mut wanted);
                }
            }
        }
        assert!(
            wanted.is_empty(),
            "every state on a recorded path has a record in the parent log"
        );
        Ok(links)
    }
}

impl Drop for ParentLog {
    fn drop(&mut self) {
        let Some(store) = &self.store else {
            return;
        };
        for block in &self.full {
            if let LogBlock::Spilled { id, .. } = block {
                // The run is over; a block the store cannot remove is its directory's to clear.
                let _ = store.remove(*id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::MemorySpill;

    /// A log of a small tree: roots 1 and 2; 1 -> 3 -> 5, 2 -> 4, 3 -> 6 (fingerprints), the
    /// action index being the child's fingerprint plus 10.
    fn tree(block_bytes: usize) -> ParentLog {
        let mut log = ParentLog::new(block_bytes);
        log.append(1, Parent::root(0));
        log.append(2, Parent::root(1));
        for (child, parent) in [(3, 1), (4, 2), (5, 3), (6, 3)] {
            log.append(child, Parent::step(parent, child as usize + 10));
        }
        log
    }

    fn expected_links() -> HashMap<u64, Parent> {
        HashMap::from([
            (1, Parent::root(0)),
            (3, Parent::step(1, 13)),
            (5, Parent::step(3, 15)),
            (2, Parent::root(1)),
            (4, Parent::step(2, 14)),
        ])
    }

    #[test]
    fn one_backward_pass_finds_every_record_of_several_paths() {
        for block_bytes in [1, RECORD_BYTES * 2, RECORD_BYTES * 100] {
            let log = tree(block_bytes);
            assert_eq!(log.len(), 6);
            assert_eq!(
                log.links(&[5, 4]).unwrap(),
                expected_links(),
                "{block_bytes}"
            );
            assert_eq!(
                log.links(&[1]).unwrap(),
                HashMap::from([(1, Parent::root(0))])
            );
        }
    }

    #[test]
    fn spilled_blocks_are_read_not_taken_and_removed_when_the_log_is_dropped() {
        let store = MemorySpill::new();
        let mut spill = Spill {
            store: store.clone(),
            disk_bytes_max: None,
            spilled_bytes: 0,
        };
        let mut log = tree(RECORD_BYTES * 2);
        assert_eq!(log.spillable_bytes(), RECORD_BYTES * 4);
        log.spill(&mut spill).unwrap();
        assert_eq!(log.spillable_bytes(), 0);
        assert_eq!(store.held(), 2);
        assert_eq!(spill.spilled_bytes, RECORD_BYTES as u64 * 4);
        // Twice: a rebuild reads the blocks, it does not consume them.
        for _ in 0..2 {
            assert_eq!(log.links(&[5, 4]).unwrap(), expected_links());
        }
        drop(log);
        assert_eq!(store.held(), 0);
    }

    /// A store whose blocks come back one byte short: a damaged disk.
    struct ShortReads(Arc<MemorySpill>);

    impl SpillStore for ShortReads {
        fn put(&self, bytes: &[u8]) -> std::io::Result<u64> {
            self.0.put(bytes)
        }
        fn read(&self, id: u64) -> std::io::Result<Vec<u8>> {
            let mut bytes = self.0.read(id)?;
            bytes.pop();
            Ok(bytes)
        }
        fn remove(&self, id: u64) -> std::io::Result<()> {
            self.0.remove(id)
        }
    }

    #[test]
    fn a_spill_past_the_disk_limit_is_refused_and_a_short_block_is_damage() {
        let store = MemorySpill::new();
        let mut limited = Spill {
            store: store.clone(),
            disk_bytes_max: Some(RECORD_BYTES as u64 * 3),
            spilled_bytes: 0,
        };
        let mut log = tree(RECORD_BYTES * 2);
        assert!(matches!(log.spill(&mut limited), Err(SpillFailure::Limit)));
        assert_eq!(store.held(), 1, "the block within the limit went");
        assert_eq!(log.links(&[5, 4]).unwrap(), expected_links());

        let mut damaged = Spill {
            store: Arc::new(ShortReads(MemorySpill::new())),
            disk_bytes_max: None,
            spilled_bytes: 0,
        };
        let mut log = tree(RECORD_BYTES * 2);
        log.spill(&mut damaged).unwrap();
        assert!(matches!(log.links(&[5]), Err(SpillFailure::Damaged)));
    }

    #[test]
    #[should_panic(expected = "more than")]
    fn an_action_index_past_the_limit_is_refused() {
        Parent::step(0, ACTION_INDEX_MAX + 1);
    }
}
