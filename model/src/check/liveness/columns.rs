//! The two shapes the liveness graph's big per-edge and per-state columns take when a vector's
//! doubling or a byte per flag would be the largest allocation of a run.
//!
//! [`Blocks`] grows by one fixed block at a time: past a hundred million edges a doubling would
//! allocate as much again at once (the wall a 4 GiB run met at 112 million states), a block
//! allocates [`BLOCK_ELEMENTS`] elements. [`Bits`] keeps one flag per state in one bit.
//!
//! Invariants: `Blocks` holds its elements in push order, every block but the last full, and
//! never moves an element once pushed; `Bits::get(i)` is the value last set for `i`, false if
//! none was.

use std::ops::Index;

/// Elements per block of a [`Blocks`]: a power of two, so an index splits with a shift and a mask.
pub(super) const BLOCK_ELEMENTS: usize = 1 << BLOCK_ELEMENTS_LOG2;
const BLOCK_ELEMENTS_LOG2: u32 = 20;

/// A vector in blocks of [`BLOCK_ELEMENTS`] (see the module doc).
pub(super) struct Blocks<T> {
    blocks: Vec<Vec<T>>,
    len: usize,
}

impl<T: Copy> Blocks<T> {
    pub(super) fn new() -> Self {
        Blocks {
            blocks: Vec::new(),
            len: 0,
        }
    }

    pub(super) fn push(&mut self, element: T) {
        if self.len == self.capacity() {
            self.blocks.push(Vec::with_capacity(BLOCK_ELEMENTS));
        }
        let last = self.blocks.last_mut().expect("a block was just made");
        debug_assert!(
            last.len() < BLOCK_ELEMENTS,
            "a block never grows past its size"
        );
        last.push(element);
        self.len += 1;
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Elements the blocks made so far hold before another block is needed.
    pub(super) fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK_ELEMENTS
    }
}

impl<T> Index<usize> for Blocks<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        assert!(index < self.len, "index {index} past {} elements", self.len);
        &self.blocks[index >> BLOCK_ELEMENTS_LOG2][index & (BLOCK_ELEMENTS - 1)]
    }
}

/// One flag per index, in bits.
pub(super) struct Bits {
    words: Vec<u64>,
    len: usize,
}

impl Bits {
    /// `len` flags, each `flag(index)`.
    pub(super) fn from_fn(len: usize, mut flag: impl FnMut(usize) -> bool) -> Self {
        let mut bits = Bits::unset(len);
        for index in 0..len {
            if flag(index) {
                bits.set(index);
            }
        }
        bits
    }

    /// `len` flags, none set.
    pub(super) fn unset(len: usize) -> Self {
        Bits {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    pub(super) fn get(&self, index: usize) -> bool {
        assert!(index < self.len, "flag {index} past {} flags", self.len);
        self.words[index / 64] >> (index % 64) & 1 == 1
    }

    pub(super) fn set(&mut self, index: usize) {
        assert!(index < self.len, "flag {index} past {} flags", self.len);
        self.words[index / 64] |= 1 << (index % 64);
    }

    /// Whether some flag is set.
    pub(super) fn any(&self) -> bool {
        self.words.iter().any(|word| *word != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_read_back_in_push_order_across_block_edges_and_blocks_come_one_at_a_time() {
        let mut blocks: Blocks<u32> = Blocks::new();
        assert_eq!(blocks.capacity(), 0);
        let count = 2 * BLOCK_ELEMENTS + 3;
        for element in 0..count as u32 {
            blocks.push(element.wrapping_mul(2_654_435_761));
            assert_eq!(
                blocks.capacity(),
                blocks.len().div_ceil(BLOCK_ELEMENTS) * BLOCK_ELEMENTS
            );
        }
        assert_eq!(blocks.len(), count);
        assert_eq!(blocks.capacity(), 3 * BLOCK_ELEMENTS);
        for index in [
            0,
            1,
            BLOCK_ELEMENTS - 1,
            BLOCK_ELEMENTS,
            2 * BLOCK_ELEMENTS + 2,
        ] {
            assert_eq!(blocks[index], (index as u32).wrapping_mul(2_654_435_761));
        }
    }

    #[test]
    #[should_panic(expected = "past 3 elements")]
    fn an_index_past_the_last_element_is_refused_even_inside_the_block() {
        let mut blocks: Blocks<u8> = Blocks::new();
        for element in 0..3 {
            blocks.push(element);
        }
        let _ = blocks[3];
    }

    #[test]
    fn each_flag_reads_back_as_set_and_its_neighbours_stay_unset() {
        let flagged = |index: usize| index.is_multiple_of(7) || index == 64 || index == 129;
        let bits = Bits::from_fn(130, flagged);
        for index in 0..130 {
            assert_eq!(bits.get(index), flagged(index), "flag {index}");
        }
        assert!(bits.any());
        assert!(!Bits::unset(130).any());
        let mut one = Bits::unset(130);
        one.set(129);
        assert!(one.any());
        assert!(one.get(129));
        assert!(!one.get(128));
    }
}
