//! One flag per state in one bit: the liveness analysis keeps four per state (goal-avoiding,
//! stop, accepting, bad) and two per component, at a hundred million states and more.
//!
//! Invariant: `get(i)` is true exactly when `set(i)` was called (or `flag(i)` held at
//! construction); an index past the length is refused.

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
