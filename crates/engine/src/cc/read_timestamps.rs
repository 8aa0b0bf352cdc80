//! TicToc's read timestamps (`cc=tictoc`; Yu et al., SIGMOD 2016), also
//! the read timestamps of timestamp ordering (`cc=mvcc`, `cc=cicada`).
//!
//! TicToc gives every version a validity interval `[wts, rts]`: `wts` is
//! the TID of the writer (the row's word already holds it) and `rts` the
//! latest timestamp at which a transaction has read it. A committing
//! transaction picks the smallest timestamp its accesses allow (above the
//! `rts` of every row it overwrites, at least the `wts` of every row it
//! read) and validates a read by checking that the version it read is still
//! valid at that timestamp, extending the version's `rts` when needed.
//!
//! Here `rts` lives beside the rows, in a fixed array of words indexed by a
//! hash of the row's address (as the lock table): the storages keep their
//! row layout, and both run the protocol unchanged. A stripe holds the
//! largest `rts` of all its rows, so a row's `rts` is over-estimated, never
//! under-estimated: a writer may pick a larger timestamp than it needs, and
//! a reader may skip an extension, both of which stay correct. A row's
//! effective `rts` is `max(stripe, wts)`.
//!
//! The race between an extension and a writer is closed by order: the
//! reader raises the stripe, then re-reads the row's word and finds it
//! unchanged and unlocked; a writer locks the word, then reads the stripe.
//! Either the reader sees the lock (and aborts) or the writer sees the
//! raised `rts` (and commits above it). Both sides use sequentially
//! consistent operations for that.
//!
//! Explained in docs/concurrency.md (TicToc).

use crate::cc::{row_stripe as stripe_of, ROW_STRIPES};
use crate::error::AbortReason;
use crate::storage::record::{RowKind, LOCKED};
use std::sync::atomic::{AtomicU64, Ordering};

/// The striped `rts` of every row.
pub(crate) struct ReadTimestamps {
    words: Box<[AtomicU64]>,
}

impl ReadTimestamps {
    pub(crate) fn new() -> Self {
        Self { words: (0..ROW_STRIPES).map(|_| AtomicU64::new(0)).collect() }
    }

    /// The effective `rts` of the row at `address` whose version has `wts`.
    #[inline]
    pub(crate) fn rts(&self, address: usize, wts: u64) -> u64 {
        self.words[stripe_of(address)].load(Ordering::SeqCst).max(wts)
    }

    /// Raises the `rts` of the row at `address` to at least `ts`.
    #[inline]
    pub(crate) fn extend(&self, address: usize, ts: u64) {
        self.words[stripe_of(address)].fetch_max(ts, Ordering::SeqCst);
    }

    /// Makes a version read valid at `ts` (the reader's validation): the
    /// version `wts` of `row`, whose word was `current` when the reader
    /// checked it. It is when its `rts` already reaches `ts`, or when the
    /// row is locked by the reader itself (`own_lock`, asked only then: it
    /// overwrites the row at `ts` anyway); else its `rts` is extended while
    /// nobody holds the row.
    pub(crate) fn extend_read<R: RowKind>(
        &self,
        row: &R,
        current: u64,
        wts: u64,
        ts: u64,
        own_lock: impl FnOnce() -> bool,
    ) -> Result<(), AbortReason> {
        let address = row as *const R as usize;
        if self.rts(address, wts) >= ts {
            return Ok(());
        }
        if current & LOCKED != 0 {
            if own_lock() {
                return Ok(());
            }
            return Err(AbortReason::ReadValidation);
        }
        self.extend(address, ts);
        // IMPORTANT: re-read after the extension (the module docs): a
        // writer that locked meanwhile is seen here, one that locks later
        // sees the extended rts.
        if row.word() != current {
            return Err(AbortReason::ReadValidation);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rts_is_at_least_wts_and_only_grows() {
        let table = ReadTimestamps::new();
        assert_eq!(table.rts(0x1000, 7), 7);
        table.extend(0x1000, 12);
        assert_eq!(table.rts(0x1000, 7), 12);
        table.extend(0x1000, 9);
        assert_eq!(table.rts(0x1000, 7), 12, "an extension never lowers rts");
        assert_eq!(table.rts(0x1000, 20), 20, "a newer version's wts counts");
    }

    #[test]
    fn a_read_is_extended_only_while_nobody_else_holds_the_row() {
        use crate::storage::record::{word_of, Record};
        let table = ReadTimestamps::new();
        let allocated = Record::allocate(b"k", 8);
        // SAFETY: allocated above, freed at the end of the test.
        let row = unsafe { allocated.as_ref() };
        let address = row as *const Record as usize;
        let read = word_of(5, 0);
        row.word_cell().store(read, Ordering::SeqCst);

        assert_eq!(table.extend_read(row, read, 5, 5, || unreachable!()), Ok(()), "valid at its own wts");
        assert_eq!(table.rts(address, 5), 5, "nothing extended");
        assert_eq!(table.extend_read(row, read, 5, 9, || unreachable!()), Ok(()));
        assert_eq!(table.rts(address, 5), 9, "extended to the reader's timestamp");

        let locked = read | LOCKED;
        row.word_cell().store(locked, Ordering::SeqCst);
        assert_eq!(table.extend_read(row, locked, 5, 12, || false), Err(AbortReason::ReadValidation));
        assert_eq!(table.extend_read(row, locked, 5, 12, || true), Ok(()), "the reader's own lock");
        assert_eq!(table.rts(address, 5), 9, "a locked row is not extended");

        // A writer locked after the reader checked the row: the re-read sees it.
        assert_eq!(table.extend_read(row, read, 5, 14, || unreachable!()), Err(AbortReason::ReadValidation));
        assert_eq!(table.rts(address, 5), 14);

        // SAFETY: `row` is not used after this.
        unsafe { Record::free(allocated) };
    }
}
