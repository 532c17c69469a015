//! The liveness graph's edges, in push order: in memory in blocks, and past the memory budget in
//! the run's spill store, read back by row (as TLC keeps its liveness graph on disk).
//!
//! An edge is its target's index, the family of its step and, on a per-actor quotient, the
//! index of its renaming: 5 or 7 bytes. At a hundred million states a graph has some three
//! hundred million edges, more than the states' own columns: these are what leaves memory
//! first. Blocks are larger than the allocator's largest threshold for serving a request from
//! its heap ([`EDGE_BLOCK_BYTES`]), so a spilled block's memory goes back to the system.
//!
//! Invariants: edge `i` is the `i`-th pushed, whether its block is in memory or spilled; a
//! block is spilled whole, once, only when full, and never read back into memory, only the rows
//! asked for; the store's blocks are removed when the column is dropped; a block read back
//! short is [`SpillFailure::Damaged`], never a wrong edge.

use super::super::frontier::{Spill, SpillFailure, SpillStore};
use std::ops::Range;
use std::sync::Arc;

/// Bytes of a full block in a run without a budget of its own: above glibc's largest
/// threshold for serving an allocation from its heap (32 MiB), so freeing one unmaps it.
pub(super) const EDGE_BLOCK_BYTES: usize = 48 << 20;

/// One edge of the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Edge {
    pub(super) target: u32,
    pub(super) family: u8,
    /// The index of the step's renaming on a per-actor quotient; 0 otherwise.
    pub(super) annotation: u16,
}

enum EdgeBlock {
    Memory(Vec<u8>),
    Spilled { id: u64 },
}

/// The edges (see the module doc).
pub(super) struct Edges {
    /// 5 bytes an edge, 7 with its renaming's index.
    edge_bytes: usize,
    block_edges: usize,
    full: Vec<EdgeBlock>,
    writing: Vec<u8>,
    len: usize,
    store: Option<Arc<dyn SpillStore>>,
}

impl Edges {
    /// No edges yet; blocks of at most `block_bytes` (at least one edge).
    pub(super) fn new(annotated: bool, block_bytes: usize) -> Self {
        let edge_bytes = if annotated { 7 } else { 5 };
        Edges {
            edge_bytes,
            block_edges: (block_bytes / edge_bytes).max(1),
            full: Vec::new(),
            writing: Vec::new(),
            len: 0,
            store: None,
        }
    }

    pub(super) fn push(&mut self, edge: Edge) {
        if self.writing.capacity() == 0 {
            self.writing
                .reserve_exact(self.block_edges * self.edge_bytes);
        }
        self.writing.extend_from_slice(&edge.target.to_le_bytes());
        self.writing.push(edge.family);
        if self.edge_bytes == 7 {
            self.writing
                .extend_from_slice(&edge.annotation.to_le_bytes());
        } else {
            debug_assert_eq!(edge.annotation, 0, "an edge without renamings has none");
        }
        self.len += 1;
        if self.writing.len() == self.block_edges * self.edge_bytes {
            self.full
                .push(EdgeBlock::Memory(std::mem::take(&mut self.writing)));
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Bytes the full blocks still in memory hold: what [`Edges::spill`] would give back.
    pub(super) fn spillable_bytes(&self) -> usize {
        self.full
            .iter()
            .map(|block| match block {
                EdgeBlock::Memory(bytes) => bytes.len(),
                EdgeBlock::Spilled { .. } => 0,
            })
            .sum()
    }

    /// What the next `edges` pushes may allocate at once: the blocks they would open.
    pub(super) fn growth_bytes(&self, edges: usize) -> usize {
        let room = if self.writing.capacity() == 0 {
            0
        } else {
            self.block_edges - self.writing.len() / self.edge_bytes
        };
        edges.saturating_sub(room).div_ceil(self.block_edges) * self.block_edges * self.edge_bytes
    }

    /// Writes every full block still in memory to the store, within its disk limit.
    pub(super) fn spill(&mut self, spill: &mut Spill) -> Result<(), SpillFailure> {
        for block in self.full.iter_mut() {
            let EdgeBlock::Memory(bytes) = block else {
                continue;
            };
            let id = spill.put(bytes)?;
            self.store.get_or_insert_with(|| spill.store.clone());
            *block = EdgeBlock::Spilled { id };
        }
        Ok(())
    }

    /// The edges `range` into `row` (cleared first), reading spilled blocks by the bytes asked.
    pub(super) fn read(
        &self,
        range: Range<usize>,
        row: &mut Vec<Edge>,
    ) -> Result<(), SpillFailure> {
        assert!(
            range.end <= self.len,
            "edges {range:?} past {} edges",
            self.len
        );
        row.clear();
        let mut next = range.start;
        let mut scratch = Vec::new();
        while next < range.end {
            let block = next / self.block_edges;
            let first = next % self.block_edges;
            let count = (range.end - next).min(self.block_edges - first);
            let span = first * self.edge_bytes..(first + count) * self.edge_bytes;
            let bytes: &[u8] = match self.full.get(block) {
                None => &self.writing[span],
                Some(EdgeBlock::Memory(bytes)) => &bytes[span],
                Some(EdgeBlock::Spilled { id }) => {
                    let store = self.store.as_ref().expect("a spilled block has a store");
                    scratch.resize(span.len(), 0);
                    store
                        .read_at(*id, span.start as u64, &mut scratch)
                        .map_err(|error| match error.kind() {
                            std::io::ErrorKind::UnexpectedEof => SpillFailure::Damaged,
                            _ => SpillFailure::Io(error),
                        })?;
                    &scratch
                }
            };
            row.extend(bytes.chunks_exact(self.edge_bytes).map(|edge| Edge {
                target: u32::from_le_bytes(edge[0..4].try_into().expect("4 bytes")),
                family: edge[4],
                annotation: if self.edge_bytes == 7 {
                    u16::from_le_bytes(edge[5..7].try_into().expect("2 bytes"))
                } else {
                    0
                },
            }));
            next += count;
        }
        Ok(())
    }

    /// Edge `index`.
    #[cfg(test)]
    pub(super) fn get(&self, index: usize) -> Result<Edge, SpillFailure> {
        let mut row = Vec::with_capacity(1);
        self.read(index..index + 1, &mut row)?;
        Ok(row[0])
    }
}

impl Drop for Edges {
    fn drop(&mut self) {
        let Some(store) = &self.store else {
            return;
        };
        for block in &self.full {
            if let EdgeBlock::Spilled { id } = block {
                // A block left behind is removed with the run's spill directory.
                let _ = store.remove(*id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::frontier::MemorySpill;
    use super::*;

    fn edge(index: usize) -> Edge {
        Edge {
            target: (index as u32).wrapping_mul(2_654_435_761),
            family: (index % 251) as u8,
            annotation: (index % 65_521) as u16,
        }
    }

    fn spill_of(store: Arc<dyn SpillStore>) -> Spill {
        Spill {
            store,
            disk_bytes_max: None,
            spilled_bytes: 0,
        }
    }

    #[test]
    fn rows_read_back_as_pushed_across_memory_spilled_and_writing_blocks() {
        let store = MemorySpill::new();
        let mut spill = spill_of(store.clone());
        let mut edges = Edges::new(true, 7 * 10);
        for index in 0..25 {
            edges.push(edge(index));
        }
        assert_eq!(edges.spillable_bytes(), 2 * 7 * 10);
        edges.spill(&mut spill).unwrap();
        assert_eq!(spill.spilled_bytes, 2 * 7 * 10);
        assert_eq!(edges.spillable_bytes(), 0);
        for index in 25..35 {
            edges.push(edge(index));
        }
        assert_eq!(edges.len(), 35);
        assert_eq!(
            edges.spillable_bytes(),
            7 * 10,
            "the block filled after the spill"
        );
        let mut row = Vec::new();
        for range in [0..35, 3..4, 9..11, 18..31, 29..35, 7..7] {
            edges.read(range.clone(), &mut row).unwrap();
            let expected: Vec<Edge> = range.clone().map(edge).collect();
            assert_eq!(row, expected, "edges {range:?}");
        }
        assert_eq!(edges.get(20).unwrap(), edge(20));
        drop(edges);
        assert_eq!(
            store.held(),
            0,
            "the spilled blocks are removed with the edges"
        );
    }

    #[test]
    fn without_renamings_an_edge_takes_five_bytes_and_reads_back_without_one() {
        let mut edges = Edges::new(false, 5 * 4);
        for index in 0..9 {
            edges.push(Edge {
                annotation: 0,
                ..edge(index)
            });
        }
        assert_eq!(edges.spillable_bytes(), 2 * 5 * 4);
        let mut row = Vec::new();
        edges.read(0..9, &mut row).unwrap();
        assert!(row.iter().all(|edge| edge.annotation == 0));
        assert_eq!(row[8].target, edge(8).target);
        assert_eq!(row[8].family, edge(8).family);
    }

    #[test]
    fn a_spill_past_the_disk_limit_is_refused_and_keeps_the_block_in_memory() {
        let mut spill = Spill {
            disk_bytes_max: Some(7 * 10 + 1),
            ..spill_of(MemorySpill::new())
        };
        let mut edges = Edges::new(true, 7 * 10);
        for index in 0..20 {
            edges.push(edge(index));
        }
        assert!(matches!(edges.spill(&mut spill), Err(SpillFailure::Limit)));
        assert_eq!(
            spill.spilled_bytes,
            7 * 10,
            "the first block went, the second did not"
        );
        assert_eq!(edges.spillable_bytes(), 7 * 10);
        assert_eq!(edges.get(15).unwrap(), edge(15));
        assert_eq!(edges.get(5).unwrap(), edge(5));
    }

    #[test]
    fn a_block_read_back_short_is_damage_not_a_wrong_edge() {
        struct Truncating(Arc<MemorySpill>);
        impl SpillStore for Truncating {
            fn put(&self, bytes: &[u8]) -> std::io::Result<u64> {
                self.0.put(&bytes[..bytes.len() / 2])
            }
            fn read(&self, id: u64) -> std::io::Result<Vec<u8>> {
                self.0.read(id)
            }
            fn remove(&self, id: u64) -> std::io::Result<()> {
                self.0.remove(id)
            }
        }
        let mut spill = spill_of(Arc::new(Truncating(MemorySpill::new())));
        let mut edges = Edges::new(true, 7 * 10);
        for index in 0..10 {
            edges.push(edge(index));
        }
        edges.spill(&mut spill).unwrap();
        assert_eq!(edges.get(2).unwrap(), edge(2), "the first half was kept");
        assert!(matches!(edges.get(8), Err(SpillFailure::Damaged)));
    }
}
