//! A transaction's buffered writes ([`WriteSet`]): entries plus one
//! per-worker byte arena for their keys and values (no allocation per
//! write once warm), the views the durability schemes read, and the
//! commit-time locking of the written rows (row words, address order),
//! which every protocol uses.

use crate::cc::position_index::PositionIndex;
use crate::error::AbortReason;
use crate::schema::TableId;
use crate::storage::record::{self, RowKind, REMOVED};
use std::ptr::NonNull;

/// How long a committing writer spins for a row lock before aborting.
const LOCK_SPINS: u32 = 256;

/// One buffered write; its key and value live in the [`WriteSet`]'s arena.
pub struct WriteEntry<R> {
    /// Table.
    pub table: TableId,
    pub(crate) row: NonNull<R>,
    key_at: u32,
    key_len: u32,
    /// (offset, length) of the new value in the arena; `None` deletes.
    value: Option<(u32, u32)>,
    /// Whether the commit adds secondary-index entries for this row (a new
    /// row, or a secondary key changed); see `table::secondaries_to_index`.
    pub index_secondaries: bool,
    /// The word seen when locking (valid between lock and install).
    pub locked_word: u64,
}

impl<R> WriteEntry<R> {
    /// The row.
    #[inline]
    pub fn row(&self) -> &R {
        // SAFETY: a buffered row is alive while the transaction runs: its
        // worker is announced in an epoch, and rows are freed only after the
        // horizon passed their unlink.
        unsafe { self.row.as_ref() }
    }

    /// Whether this write deletes.
    pub fn is_delete(&self) -> bool {
        self.value.is_none()
    }

    /// Whether the new value was written to the worker's NVM heap during
    /// the transaction and left the arena (`zen+`'s exclusive stage).
    pub fn is_spilled(&self) -> bool {
        self.value.is_some_and(|(at, _)| at == SPILLED)
    }
}

/// Arena offset of a value that left the arena ([`WriteSet::spill`]).
const SPILLED: u32 = u32::MAX;

/// A buffered write's new value as the commit sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteValue<'a> {
    /// The value, in the arena.
    Bytes(&'a [u8]),
    /// A delete.
    Delete,
    /// A value of this length already written to the heap by the worker
    /// (`zen+`'s exclusive stage); the worker knows where.
    Spilled(usize),
}

/// One write as the log and the persist steps see it.
#[derive(Clone, Copy, Debug)]
pub struct WriteView<'a> {
    /// Table.
    pub table: TableId,
    /// Primary key.
    pub key: &'a [u8],
    /// New value, `None` for a delete.
    pub value: Option<&'a [u8]>,
}

/// A transaction's buffered writes: entries plus one byte arena for their
/// keys and values, both reused across transactions.
pub struct WriteSet<R> {
    pub(crate) entries: Vec<WriteEntry<R>>,
    arena: Vec<u8>,
    positions: PositionIndex,
    /// One bit per written row, by a hash of its address: a row whose bit
    /// is clear is not in the set, so most reads skip the search.
    filter: u64,
    /// The lock order of the entries when it is not theirs (see
    /// [`WriteSet::lock_rows`]): (row address, entry) sorted by address;
    /// empty when the entries are in address order themselves.
    lock_order: Vec<(usize, u32)>,
}

impl<R> Default for WriteSet<R> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            arena: Vec::new(),
            positions: PositionIndex::default(),
            filter: 0,
            lock_order: Vec::new(),
        }
    }
}

/// The [`WriteSet`] filter's bit of the row at `row`: address bits above
/// the low six (rows are at least 64 bytes apart in practice, and only a
/// false positive, a search, comes of two sharing a bit).
#[inline]
fn filter_bit<R>(row: *const R) -> u64 {
    1 << ((row as usize >> 6) & 63)
}

fn write_row_of<R>(entry: &WriteEntry<R>) -> *const R {
    entry.row.as_ptr()
}

impl<R> WriteSet<R> {
    /// Forgets every write (keeps the buffers).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.arena.clear();
        self.positions.clear();
        self.filter = 0;
        self.lock_order.clear();
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is written.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries.
    pub fn entries(&self) -> &[WriteEntry<R>] {
        &self.entries
    }

    /// Position of `row`'s write.
    #[inline]
    pub fn find(&self, row: *const R) -> Option<usize> {
        if self.filter & filter_bit(row) == 0 {
            return None;
        }
        self.positions.find(&self.entries, write_row_of, row)
    }

    fn stash(&mut self, bytes: &[u8]) -> (u32, u32) {
        let at = self.arena.len();
        self.arena.extend_from_slice(bytes);
        (u32::try_from(at).expect("a transaction's writes stay below 4 GiB"), bytes.len() as u32)
    }

    /// Buffers a write of a row not yet in the set.
    pub fn push(&mut self, table: TableId, row: &R, key: &[u8], value: Option<&[u8]>, index_secondaries: bool) {
        debug_assert!(self.find(row).is_none());
        let (key_at, key_len) = self.stash(key);
        let value = value.map(|value| self.stash(value));
        self.entries.push(WriteEntry {
            table,
            row: NonNull::from(row),
            key_at,
            key_len,
            value,
            index_secondaries,
            locked_word: 0,
        });
        self.filter |= filter_bit(row);
        self.positions.pushed(&self.entries, write_row_of);
    }

    /// Replaces write `index`'s value (in place when the length is equal).
    pub fn set_value(&mut self, index: usize, value: Option<&[u8]>) {
        let new = match (self.entries[index].value, value) {
            (Some((at, len)), Some(value)) if at != SPILLED && len as usize == value.len() => {
                self.arena[at as usize..(at + len) as usize].copy_from_slice(value);
                Some((at, len))
            }
            (_, Some(value)) => Some(self.stash(value)),
            (_, None) => None,
        };
        self.entries[index].value = new;
    }

    /// Write `index`'s key.
    #[inline]
    pub fn key(&self, index: usize) -> &[u8] {
        let entry = &self.entries[index];
        &self.arena[entry.key_at as usize..(entry.key_at + entry.key_len) as usize]
    }

    /// Write `index`'s new value (`None`: a delete). Only engines that
    /// never spill call it (a spilled value is not in the arena).
    #[inline]
    pub fn value(&self, index: usize) -> Option<&[u8]> {
        let (at, len) = self.entries[index].value?;
        debug_assert_ne!(at, SPILLED, "a spilled value is read through WriteSet::value_state");
        Some(&self.arena[at as usize..(at + len) as usize])
    }

    /// Write `index`'s new value, spilled or not.
    #[inline]
    pub fn value_state(&self, index: usize) -> WriteValue<'_> {
        match self.entries[index].value {
            None => WriteValue::Delete,
            Some((SPILLED, len)) => WriteValue::Spilled(len as usize),
            Some((at, len)) => WriteValue::Bytes(&self.arena[at as usize..(at + len) as usize]),
        }
    }

    /// Write `index`'s new value, to change in place (not spilled).
    pub fn value_mut(&mut self, index: usize) -> Option<&mut [u8]> {
        let (at, len) = self.entries[index].value?;
        debug_assert_ne!(at, SPILLED, "a spilled value is brought back before it changes");
        Some(&mut self.arena[at as usize..(at + len) as usize])
    }

    /// Bytes the arena holds (keys and values not spilled).
    pub fn arena_bytes(&self) -> usize {
        self.arena.len()
    }

    /// Marks write `index`'s value as written to the heap by the caller
    /// (`zen+`'s exclusive stage): its bytes are garbage in the arena until
    /// the next [`WriteSet::compact`]. Reads of it then go through the
    /// caller; a later write of the row brings a value back.
    pub fn spill(&mut self, index: usize) {
        if let Some((at, _)) = &mut self.entries[index].value {
            *at = SPILLED;
        }
    }

    /// Rebuilds the arena without the spilled values.
    pub fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() / 2);
        for entry in &mut self.entries {
            let key = entry.key_at as usize..(entry.key_at + entry.key_len) as usize;
            entry.key_at = arena.len() as u32;
            arena.extend_from_slice(&self.arena[key]);
            if let Some((at, len)) = &mut entry.value {
                if *at != SPILLED {
                    let value = *at as usize..(*at + *len) as usize;
                    *at = arena.len() as u32;
                    arena.extend_from_slice(&self.arena[value]);
                }
            }
        }
        self.arena = arena;
    }

    /// Write `index` as the log sees it.
    #[inline]
    pub fn view(&self, index: usize) -> WriteView<'_> {
        WriteView { table: self.entries[index].table, key: self.key(index), value: self.value(index) }
    }

    /// Every write, in the set's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = WriteView<'_>> + '_ {
        (0..self.entries.len()).map(|index| self.view(index))
    }

    /// Orders the writes by row address (the lock order).
    pub fn sort_by_row(&mut self) {
        // A commit may order the set twice (a protocol's prepare step, then
        // the lock step); the second call finds it sorted and keeps the
        // position index.
        if self.entries.is_sorted_by_key(|entry| entry.row.as_ptr() as usize) {
            return;
        }
        self.entries.sort_unstable_by_key(|entry| entry.row.as_ptr() as usize);
        self.positions.rebuild(&self.entries, write_row_of);
    }

    /// Records the word seen when write `index`'s row was locked.
    pub fn set_locked_word(&mut self, index: usize, word: u64) {
        self.entries[index].locked_word = word;
    }
}

impl<R: RowKind> WriteSet<R> {
    /// Locks the written rows in address order (the commit's lock step).
    /// Returns the largest TID seen on a locked row, or the abort reason
    /// (with nothing left locked).
    ///
    /// The entries stay where they are: the order is a sorted list of
    /// (address, entry) pairs, cheaper to sort than the entries and leaving
    /// the position index valid (entries already in address order, as
    /// zen's prepare step leaves them, need no list).
    pub(crate) fn lock_rows(&mut self) -> Result<u64, AbortReason> {
        self.lock_order.clear();
        if !self.entries.is_sorted_by_key(|entry| entry.row.as_ptr() as usize) {
            let order = self.entries.iter().enumerate().map(|(at, entry)| (entry.row.as_ptr() as usize, at as u32));
            self.lock_order.extend(order);
            self.lock_order.sort_unstable_by_key(|&(address, _)| address);
        }
        let mut max_tid = 0;
        for step in 0..self.len() {
            let index = self.lock_index(step);
            match self.entries[index].row().lock(LOCK_SPINS) {
                Some(word) if word != REMOVED => {
                    self.set_locked_word(index, word);
                    max_tid = max_tid.max(record::tid_of(word));
                }
                Some(_) => {
                    // Unlinked since the body read it: the read set's word
                    // differs, so the attempt could not validate anyway.
                    self.unlock(step + 1);
                    return Err(AbortReason::ReadValidation);
                }
                None => {
                    self.unlock(step);
                    return Err(AbortReason::WriteLock);
                }
            }
        }
        Ok(max_tid)
    }

    /// The entry locked at step `step` of [`WriteSet::lock_rows`].
    #[inline]
    fn lock_index(&self, step: usize) -> usize {
        match self.lock_order.get(step) {
            Some(&(_, index)) => index as usize,
            None => step,
        }
    }

    /// Unlocks the rows of the first `locked` steps of the lock order
    /// (all of them: `len()`) without changing them.
    pub(crate) fn unlock(&self, locked: usize) {
        if locked == self.len() {
            for entry in &self.entries {
                entry.row().unlock();
            }
            return;
        }
        for step in 0..locked {
            self.entries[self.lock_index(step)].row().unlock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::Record;

    #[test]
    fn finds_every_written_row_and_no_other_past_the_filter_and_the_lock_order() {
        let rows: Vec<NonNull<Record>> = (0..80u32).map(|at| Record::allocate(&at.to_be_bytes(), 8)).collect();
        let mut writes = WriteSet::<Record>::default();
        // Every other row, newest address first, so the lock order is not
        // the entries' order.
        for (at, row) in rows.iter().enumerate().rev().step_by(2) {
            // SAFETY: allocated above, freed at the end.
            let row = unsafe { row.as_ref() };
            writes.push(TableId(0), row, &(at as u32).to_be_bytes(), Some(b"value"), false);
            for (other_at, other) in rows.iter().enumerate() {
                let found = writes.find(other.as_ptr());
                let written = writes.entries().iter().any(|entry| entry.row == *other);
                assert_eq!(found.is_some(), written, "row {other_at} after pushing row {at}");
                if let Some(position) = found {
                    assert_eq!(writes.entries()[position].row, *other);
                }
            }
        }
        writes.lock_rows().expect("nothing else holds the rows");
        for entry in writes.entries() {
            assert!(entry.row().word() & record::LOCKED != 0);
        }
        writes.unlock(writes.len());
        for entry in writes.entries() {
            assert!(entry.row().word() & record::LOCKED == 0);
        }
        writes.clear();
        assert!(rows.iter().all(|row| writes.find(row.as_ptr()).is_none()));
        for row in rows {
            // SAFETY: allocated above and no longer used.
            unsafe { Record::free(row) };
        }
    }
}
