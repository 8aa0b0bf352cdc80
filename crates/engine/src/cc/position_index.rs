//! Where a record sits in a transaction's read or write set.
//!
//! Small sets are searched linearly (a few pointer compares beat any hash);
//! past [`LINEAR_SEARCH_LIMIT`] entries an address → position map takes over,
//! so a transaction touching hundreds of rows does not go quadratic.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Sets up to this size are searched linearly; larger ones through a
/// [`PositionIndex`] (TPC-C StockLevel reads hundreds of rows, and a linear
/// search per access would make such a transaction quadratic).
pub(crate) const LINEAR_SEARCH_LIMIT: usize = 16;

/// Hashes a record address: one multiply, enough for addresses that are
/// distinct and 8-aligned (SipHash would cost more than the linear search
/// it replaces).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, address: usize) {
        self.0 = (address as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

/// Position of each record in a read or write set, by address; empty while
/// the set is small enough for a linear search.
#[derive(Default)]
pub(crate) struct PositionIndex {
    positions: HashMap<usize, usize, BuildHasherDefault<AddressHasher>>,
}

impl PositionIndex {
    /// Where `record` is in `entries` (whose records `record_of` gives).
    pub(crate) fn find<T, R>(
        &self,
        entries: &[T],
        record_of: impl Fn(&T) -> *const R,
        record: *const R,
    ) -> Option<usize> {
        if entries.len() <= LINEAR_SEARCH_LIMIT {
            entries.iter().position(|entry| std::ptr::eq(record_of(entry), record))
        } else {
            debug_assert_eq!(self.positions.len(), entries.len());
            self.positions.get(&(record as usize)).copied()
        }
    }

    /// Notes that the last entry of `entries` was just pushed.
    pub(crate) fn pushed<T, R>(&mut self, entries: &[T], record_of: impl Fn(&T) -> *const R) {
        match entries.len() {
            len if len <= LINEAR_SEARCH_LIMIT => {}
            len if len == LINEAR_SEARCH_LIMIT + 1 => self.rebuild(entries, record_of),
            len => {
                self.positions.insert(record_of(&entries[len - 1]) as usize, len - 1);
            }
        }
    }

    /// Re-indexes `entries` after they were reordered.
    pub(crate) fn rebuild<T, R>(&mut self, entries: &[T], record_of: impl Fn(&T) -> *const R) {
        self.positions.clear();
        if entries.len() > LINEAR_SEARCH_LIMIT {
            self.positions.extend(entries.iter().enumerate().map(|(at, entry)| (record_of(entry) as usize, at)));
        }
    }

    pub(crate) fn clear(&mut self) {
        self.positions.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_entry_below_and_above_the_limit() {
        let values: Vec<u64> = (0..100).collect();
        let mut entries: Vec<*const u64> = Vec::new();
        let mut index = PositionIndex::default();
        for value in &values {
            entries.push(value);
            index.pushed(&entries, |entry| *entry);
            for (at, entry) in entries.iter().enumerate() {
                assert_eq!(index.find(&entries, |entry| *entry, *entry), Some(at));
            }
            let absent = 7u64;
            assert_eq!(index.find(&entries, |entry| *entry, &absent), None);
        }
        entries.reverse();
        index.rebuild(&entries, |entry| *entry);
        assert_eq!(index.find(&entries, |entry| *entry, &values[0]), Some(99));
        entries.clear();
        index.clear();
        assert_eq!(index.find(&entries, |entry| *entry, &values[0]), None);
    }
}
