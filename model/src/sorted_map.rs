//! A map kept as one sorted vector of entries, for the few small maps a model state holds.
//!
//! Every step of a search clones, hashes, compares, encodes and drops whole states; a
//! `BTreeMap` of a dozen entries is several heap nodes to walk, copy and free each time, a
//! vector of them is one. Lookups are binary searches, an insert shifts at most the map's few
//! entries.
//!
//! Invariants: the entries are sorted by key, each key at most once. The map reads as the
//! `BTreeMap<K, V>` it replaces, to the bit: entries in ascending key order, the same `Hash`
//! (the length, then each key and value), the same `Eq` and `Ord` (entries compared in order),
//! the same serialized form (a map, its length first) and the same `Debug` text. So
//! fingerprints, representatives, encodings and traces do not depend on which of the two a
//! state holds (the tests below compare them on every subset of a key set).

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::ops::{Bound, RangeBounds};

#[derive(Clone, PartialEq, Eq)]
pub struct SortedMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    pub const fn new() -> Self {
        SortedMap {
            entries: Vec::new(),
        }
    }

    fn position<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries
            .binary_search_by(|(entry_key, _)| entry_key.borrow().cmp(key))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let index = self.position(key).ok()?;
        Some(&self.entries[index].1)
    }

    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let index = self.position(key).ok()?;
        Some(&mut self.entries[index].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`; the value it replaced, as `BTreeMap::insert` answers.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(index) => Some(std::mem::replace(&mut self.entries[index].1, value)),
            Err(index) => {
                self.entries.insert(index, (key, value));
                None
            }
        }
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let index = self.position(key).ok()?;
        Some(self.entries.remove(index).1)
    }

    /// The value at `key`, inserted from `default` when absent.
    pub fn get_or_insert_with(&mut self, key: K, default: impl FnOnce() -> V) -> &mut V {
        let index = match self.position(&key) {
            Ok(index) => index,
            Err(index) => {
                self.entries.insert(index, (key, default()));
                index
            }
        };
        &mut self.entries[index].1
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(key, value)| keep(key, value));
    }

    /// The entries in ascending key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator + '_ {
        self.entries.iter().map(|(key, value)| (key, value))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + '_ {
        self.entries.iter().map(|(key, _)| key)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + '_ {
        self.entries.iter().map(|(_, value)| value)
    }

    /// The entries whose keys lie in `range`, in ascending key order, as `BTreeMap::range`;
    /// like it, panics on a range that starts after it ends.
    pub fn range<Q: Ord + ?Sized>(
        &self,
        range: impl RangeBounds<Q>,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator + '_
    where
        K: Borrow<Q>,
    {
        if let (
            Bound::Included(from) | Bound::Excluded(from),
            Bound::Included(to) | Bound::Excluded(to),
        ) = (range.start_bound(), range.end_bound())
        {
            assert!(
                from <= to,
                "range start is greater than range end in SortedMap"
            );
            let both_excluded = matches!(
                (range.start_bound(), range.end_bound()),
                (Bound::Excluded(_), Bound::Excluded(_))
            );
            assert!(
                !(both_excluded && from == to),
                "range start and end are equal and excluded in SortedMap"
            );
        }
        let start = match range.start_bound() {
            Bound::Included(from) => self.entries.partition_point(|(key, _)| key.borrow() < from),
            Bound::Excluded(from) => self
                .entries
                .partition_point(|(key, _)| key.borrow() <= from),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(to) => self.entries.partition_point(|(key, _)| key.borrow() <= to),
            Bound::Excluded(to) => self.entries.partition_point(|(key, _)| key.borrow() < to),
            Bound::Unbounded => self.entries.len(),
        };
        self.entries[start..end]
            .iter()
            .map(|(key, value)| (key, value))
    }

    pub fn into_keys(self) -> impl DoubleEndedIterator<Item = K> + ExactSizeIterator {
        self.entries.into_iter().map(|(key, _)| key)
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.entries.first().map(|(key, value)| (key, value))
    }

    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.entries.last().map(|(key, value)| (key, value))
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    /// One allocation and one sort, whatever the order: of entries with one key, the last one's
    /// value stays, as in a `BTreeMap` (which also keeps that entry's key; the model's keys that
    /// compare equal are identical).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut entries: Vec<(K, V)> = entries.into_iter().collect();
        if !entries.is_sorted_by(|earlier, later| earlier.0 < later.0) {
            // Stable: entries with one key stay in arrival order, so the last one is last.
            entries.sort_by(|earlier, later| earlier.0.cmp(&later.0));
            entries.dedup_by(|later, kept| {
                let same_key = later.0 == kept.0;
                if same_key {
                    std::mem::swap(&mut later.1, &mut kept.1);
                }
                same_key
            });
        }
        SortedMap { entries }
    }
}

impl<K: Ord, V> Extend<(K, V)> for SortedMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        let entries = entries.into_iter();
        self.entries.reserve(entries.size_hint().0);
        for (key, value) in entries {
            // Entries mostly arrive in order (decoding, collecting from another map): append.
            match self.entries.last() {
                Some((last, _)) if *last < key => self.entries.push((key, value)),
                None => self.entries.push((key, value)),
                Some(_) => {
                    self.insert(key, value);
                }
            }
        }
    }
}

impl<K, V> IntoIterator for SortedMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'map, K, V> IntoIterator for &'map SortedMap<K, V> {
    type Item = (&'map K, &'map V);
    type IntoIter = std::iter::Map<std::slice::Iter<'map, (K, V)>, fn(&(K, V)) -> (&K, &V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(key, value)| (key, value))
    }
}

impl<K: std::hash::Hash, V: std::hash::Hash> std::hash::Hash for SortedMap<K, V> {
    /// As `BTreeMap` hashes: its length, then each key and value in key order.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_usize(self.entries.len());
        for (key, value) in &self.entries {
            key.hash(state);
            value.hash(state);
        }
    }
}

impl<K: Ord, V: Ord> Ord for SortedMap<K, V> {
    /// As `BTreeMap` orders: lexicographically by entries in key order.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.entries.cmp(&other.entries)
    }
}

impl<K: Ord, V: Ord> PartialOrd for SortedMap<K, V> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for SortedMap<K, V> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_map()
            .entries(self.entries.iter().map(|(key, value)| (key, value)))
            .finish()
    }
}

impl<K: Serialize, V: Serialize> Serialize for SortedMap<K, V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (key, value) in &self.entries {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for SortedMap<K, V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<K, V>(std::marker::PhantomData<(K, V)>);

        impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> serde::de::Visitor<'de>
            for Entries<K, V>
        {
            type Value = SortedMap<K, V>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a map")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<SortedMap<K, V>, A::Error> {
                let mut map = SortedMap {
                    entries: Vec::with_capacity(access.size_hint().unwrap_or(0).min(256)),
                };
                while let Some((key, value)) = access.next_entry()? {
                    map.extend(std::iter::once((key, value)));
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::codec;
    use std::collections::BTreeMap;
    use std::hash::{Hash, Hasher};

    /// Every subset of six keys, each inserted in an order that is not ascending, with values
    /// that tell the keys apart; both as the map under test and as a `BTreeMap`.
    /// Every subset of six keys, inserted in an order that lands keys at the front, the back
    /// and between others; both as the map under test and as a `BTreeMap`. Inserting the same
    /// entries in ascending or descending order gives the same map.
    fn every_subset() -> Vec<(SortedMap<u8, u16>, BTreeMap<u8, u16>)> {
        const KEYS_INTERLEAVED: [u8; 6] = [64, 0, 255, 7, 1, 63];
        (0u32..1 << KEYS_INTERLEAVED.len())
            .map(|members| {
                let chosen: Vec<u8> = KEYS_INTERLEAVED
                    .iter()
                    .enumerate()
                    .filter(|(index, _)| members & (1 << index) != 0)
                    .map(|(_, key)| *key)
                    .collect();
                let value_of = |key: u8| u16::from(key) * 3 + 1;
                let mut sorted = SortedMap::new();
                let mut tree = BTreeMap::new();
                for key in chosen.iter().copied() {
                    assert_eq!(
                        sorted.insert(key, value_of(key)),
                        tree.insert(key, value_of(key))
                    );
                    assert!(
                        sorted
                            .entries
                            .is_sorted_by(|earlier, later| earlier.0 < later.0),
                        "{:?} after inserting {key}",
                        sorted.entries
                    );
                }
                let mut ascending = chosen.clone();
                ascending.sort_unstable();
                for order in [ascending.clone(), ascending.into_iter().rev().collect()] {
                    let mut other = SortedMap::new();
                    for key in order {
                        other.insert(key, value_of(key));
                    }
                    assert_eq!(other, sorted);
                }
                (sorted, tree)
            })
            .collect()
    }

    fn fixed_hash(value: &impl Hash) -> Vec<u8> {
        /// Records what is written, so two hashes are compared word for word.
        #[derive(Default)]
        struct Recorder(Vec<u8>);
        impl Hasher for Recorder {
            fn finish(&self) -> u64 {
                0
            }
            fn write(&mut self, bytes: &[u8]) {
                self.0.extend_from_slice(bytes);
            }
        }
        let mut recorder = Recorder::default();
        value.hash(&mut recorder);
        recorder.0
    }

    #[test]
    fn it_hashes_orders_encodes_and_prints_as_a_btree_map() {
        let subsets = every_subset();
        assert_eq!(subsets.len(), 64);
        for (sorted, tree) in &subsets {
            assert_eq!(
                sorted.iter().collect::<Vec<_>>(),
                tree.iter().collect::<Vec<_>>()
            );
            assert_eq!(fixed_hash(sorted), fixed_hash(tree), "{tree:?}");
            assert_eq!(format!("{sorted:?}"), format!("{tree:?}"));
            let (mut encoded, mut tree_encoded) = (Vec::new(), Vec::new());
            codec::encode(sorted, &mut encoded).expect("encodes");
            codec::encode(tree, &mut tree_encoded).expect("encodes");
            assert_eq!(encoded, tree_encoded, "{tree:?}");
            let decoded: SortedMap<u8, u16> = codec::decode(&encoded).expect("decodes");
            assert_eq!(&decoded, sorted);
            for (other_sorted, other_tree) in &subsets {
                assert_eq!(sorted.cmp(other_sorted), tree.cmp(other_tree));
                assert_eq!(sorted == other_sorted, tree == other_tree);
            }
            // The same keys with one value changed: order and equality read the values too.
            if let Some((&key, &value)) = tree.iter().next() {
                for changed_value in [value - 1, value + 1] {
                    let (mut other_sorted, mut other_tree) = (sorted.clone(), tree.clone());
                    other_sorted.insert(key, changed_value);
                    other_tree.insert(key, changed_value);
                    assert_eq!(sorted.cmp(&other_sorted), tree.cmp(&other_tree));
                    assert_eq!(other_sorted.cmp(sorted), other_tree.cmp(tree));
                    assert_ne!(&other_sorted, sorted);
                }
            }
        }
    }

    #[test]
    fn lookups_removals_and_ranges_answer_as_a_btree_map() {
        for (mut sorted, mut tree) in every_subset() {
            for key in [0u8, 1, 2, 7, 63, 64, 65, 200, 255] {
                assert_eq!(sorted.get(&key), tree.get(&key));
                assert_eq!(sorted.contains_key(&key), tree.contains_key(&key));
                assert_eq!(
                    sorted.range(key..).collect::<Vec<_>>(),
                    tree.range(key..).collect::<Vec<_>>()
                );
                assert_eq!(
                    sorted.range(..=key).collect::<Vec<_>>(),
                    tree.range(..=key).collect::<Vec<_>>()
                );
                assert_eq!(
                    sorted.range(..key).collect::<Vec<_>>(),
                    tree.range(..key).collect::<Vec<_>>()
                );
                for high in [key, key.saturating_add(60)] {
                    assert_eq!(
                        sorted.range(key..high).collect::<Vec<_>>(),
                        tree.range(key..high).collect::<Vec<_>>()
                    );
                    assert_eq!(
                        sorted
                            .range((Bound::Excluded(key), Bound::Included(high)))
                            .collect::<Vec<_>>(),
                        tree.range((Bound::Excluded(key), Bound::Included(high)))
                            .collect::<Vec<_>>()
                    );
                }
            }
            assert_eq!(sorted.first_key_value(), tree.first_key_value());
            assert_eq!(sorted.last_key_value(), tree.last_key_value());
            assert_eq!(
                sorted.keys().rev().collect::<Vec<_>>(),
                tree.keys().rev().collect::<Vec<_>>()
            );
            for key in [63u8, 2, 255] {
                assert_eq!(sorted.remove(&key), tree.remove(&key));
                assert_eq!(sorted.iter().len(), tree.len());
            }
            *sorted.get_or_insert_with(9, || 0) += 5;
            *tree.entry(9).or_insert(0) += 5;
            sorted.retain(|key, _| key % 2 == 1);
            tree.retain(|key, _| key % 2 == 1);
            assert_eq!(
                sorted.clone().into_keys().collect::<Vec<_>>(),
                tree.clone().into_keys().collect::<Vec<_>>()
            );
            assert_eq!(
                sorted.into_iter().collect::<Vec<_>>(),
                tree.into_iter().collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn collecting_entries_sorts_them_and_keeps_the_last_value_of_a_key() {
        let unsorted = [(5u8, 1u16), (2, 2), (9, 3), (2, 4), (0, 5), (2, 6), (9, 7)];
        let sorted_with_repeats = [(1u8, 1u16), (1, 2), (3, 3), (4, 4), (4, 5), (4, 6)];
        for entries in [&unsorted[..], &sorted_with_repeats[..]] {
            collects_as_a_btree_map(entries);
        }
    }

    fn collects_as_a_btree_map(entries: &[(u8, u16)]) {
        for length in 0..=entries.len() {
            let sorted: SortedMap<u8, u16> = entries[..length].iter().copied().collect();
            let tree: BTreeMap<u8, u16> = entries[..length].iter().copied().collect();
            assert_eq!(
                sorted.iter().collect::<Vec<_>>(),
                tree.iter().collect::<Vec<_>>()
            );
            let mut extended = SortedMap::new();
            extended.extend(entries[..length].iter().copied());
            assert_eq!(extended, sorted);
        }
    }

    #[test]
    #[should_panic(expected = "range start is greater than range end")]
    fn a_range_that_starts_after_it_ends_panics_as_a_btree_map_s_does() {
        let map: SortedMap<u8, u16> = [(1, 1), (5, 5)].into_iter().collect();
        let _ = map.range((Bound::Included(5), Bound::Excluded(1))).count();
    }

    #[test]
    #[should_panic(expected = "range start and end are equal and excluded")]
    fn a_range_excluding_both_ends_at_one_key_panics_as_a_btree_map_s_does() {
        let map: SortedMap<u8, u16> = [(1, 1), (5, 5)].into_iter().collect();
        let _ = map.range((Bound::Excluded(3), Bound::Excluded(3))).count();
    }
}
