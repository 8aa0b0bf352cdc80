//! Where a record sits in a transaction's read or write set.
//!
//! Small sets are searched linearly (a few pointer compares beat any hash);
//! past [`LINEAR_SEARCH_LIMIT`] entries an address → position map takes over,
//! so a transaction touching hundreds of rows does not go quadratic.

/// Sets up to this size are searched linearly; larger ones through a
/// [`PositionIndex`] (TPC-C StockLevel reads hundreds of rows, and a linear
/// search per access would make such a transaction quadratic).
pub(crate) const LINEAR_SEARCH_LIMIT: usize = 16;

/// Hashes a record address: one multiply, enough for addresses that are
/// distinct and 8-aligned; the high bits of the product pick the slot.
#[inline]
fn slot_of(address: usize, shift: u32) -> usize {
    ((address as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift) as usize
}

/// Position of each record in a read or write set, by address; empty while
/// the set is small enough for a linear search.
///
/// An open-addressing table with linear probing, at most half full, so a
/// probe ends within a few slots. It does a fraction of a general hash
/// map's work per insert (no hasher state, no control bytes), which matters
/// because StockLevel and Delivery push hundreds of reads per transaction.
/// A slot belongs to the current contents only if it carries the current
/// generation, so clearing the table is one increment, not a pass over it.
#[derive(Default)]
pub(crate) struct PositionIndex {
    /// Only the first `active` slots are in use: a table grown by one large
    /// transaction is kept, and the next, smaller one probes only what it
    /// needs.
    slots: Vec<Slot>,
    /// Slots in use: 0 or a power of two.
    active: usize,
    /// 64 minus log2 of `active`: the hash's shift.
    shift: u32,
    /// Entries in the table (0 while the set is searched linearly).
    len: usize,
    /// The generation of the current contents (slots of other generations
    /// are free).
    generation: u32,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    address: usize,
    position: u32,
    generation: u32,
}

impl PositionIndex {
    /// Where `record` is in `entries` (whose records `record_of` gives).
    #[inline]
    pub(crate) fn find<T, R>(
        &self,
        entries: &[T],
        record_of: impl Fn(&T) -> *const R,
        record: *const R,
    ) -> Option<usize> {
        if entries.len() <= LINEAR_SEARCH_LIMIT {
            return entries.iter().position(|entry| std::ptr::eq(record_of(entry), record));
        }
        debug_assert_eq!(self.len, entries.len());
        let address = record as usize;
        let mask = self.active - 1;
        let mut at = slot_of(address, self.shift);
        loop {
            let slot = self.slots[at];
            if slot.generation != self.generation {
                return None;
            }
            if slot.address == address {
                return Some(slot.position as usize);
            }
            at = (at + 1) & mask;
        }
    }

    /// Notes that the last entry of `entries` was just pushed.
    #[inline]
    pub(crate) fn pushed<T, R>(&mut self, entries: &[T], record_of: impl Fn(&T) -> *const R) {
        match entries.len() {
            len if len <= LINEAR_SEARCH_LIMIT => {}
            len if len == LINEAR_SEARCH_LIMIT + 1 || 2 * len > self.active => self.rebuild(entries, record_of),
            len => self.insert(record_of(&entries[len - 1]) as usize, len - 1),
        }
    }

    fn insert(&mut self, address: usize, position: usize) {
        let mask = self.active - 1;
        let mut at = slot_of(address, self.shift);
        while self.slots[at].generation == self.generation {
            at = (at + 1) & mask;
        }
        let position = u32::try_from(position).expect("a set of fewer than 2^32 entries");
        self.slots[at] = Slot { address, position, generation: self.generation };
        self.len += 1;
    }

    /// Re-indexes `entries` after they were reordered (or outgrew the
    /// table).
    pub(crate) fn rebuild<T, R>(&mut self, entries: &[T], record_of: impl Fn(&T) -> *const R) {
        self.clear();
        if entries.len() <= LINEAR_SEARCH_LIMIT {
            return;
        }
        // Half full at most, with room to double before the next rebuild.
        let wanted = (4 * entries.len()).next_power_of_two();
        if self.slots.len() < wanted {
            // New slots carry generation 0, never a current one.
            self.slots.resize(wanted, Slot::default());
        }
        self.active = wanted;
        self.shift = 64 - wanted.trailing_zeros();
        for (position, entry) in entries.iter().enumerate() {
            self.insert(record_of(entry) as usize, position);
        }
    }

    pub(crate) fn clear(&mut self) {
        if self.len == 0 && self.generation != 0 {
            return;
        }
        self.len = 0;
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Wrapped: slots of every old generation are reset, and 0 is
            // skipped, so a slot's generation is current only if written
            // since this clear.
            self.slots.fill(Slot::default());
            self.generation = 1;
        }
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
            // At most half full: every probe ends.
            assert!(index.len == 0 || 2 * index.len <= index.active);
            assert!(index.generation != 0 || index.len == 0);
        }
        entries.reverse();
        index.rebuild(&entries, |entry| *entry);
        assert_eq!(index.find(&entries, |entry| *entry, &values[0]), Some(99));
        entries.clear();
        index.clear();
        assert_eq!(index.find(&entries, |entry| *entry, &values[0]), None);
    }

    #[test]
    fn a_cleared_table_forgets_across_generations_and_their_wrap() {
        let values: Vec<u64> = (0..40).collect();
        let entries: Vec<*const u64> = values.iter().map(|value| value as *const u64).collect();
        let mut index = PositionIndex::default();
        index.rebuild(&entries, |entry| *entry);
        assert_eq!(index.find(&entries, |entry| *entry, &values[39]), Some(39));
        // The next contents are the reverse: no slot of the old ones may
        // answer.
        let reversed: Vec<*const u64> = entries.iter().rev().copied().collect();
        index.clear();
        index.generation = u32::MAX;
        index.rebuild(&reversed, |entry| *entry);
        assert_eq!(index.generation, u32::MAX);
        assert_eq!(index.find(&reversed, |entry| *entry, &values[39]), Some(0));
        index.clear();
        assert_eq!(index.generation, 1, "the wrap skips generation 0");
        index.rebuild(&entries, |entry| *entry);
        for (at, entry) in entries.iter().enumerate() {
            assert_eq!(index.find(&entries, |entry| *entry, *entry), Some(at));
        }
    }
}
