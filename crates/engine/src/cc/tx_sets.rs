//! The part of a transaction's state that the protocols' hooks read
//! ([`TxSets`]): the read, write and node sets of an attempt, with the
//! checks every protocol shares (Silo's read-set and node-set validation,
//! its TID rule). The transaction state (`cc::transaction::TxState`) holds
//! them beside the worker's protocol state and dereferences to them; the
//! protocols (`cc::protocols`) see only them, so they import this module
//! and not the transaction state, which imports them.
//!
//! Explained in docs/concurrency.md (and ARCHITECTURE.md §5).

use crate::cc::position_index::PositionIndex;
use crate::cc::write_set::WriteSet;
use crate::error::AbortReason;
use crate::index::LeafRef;
use crate::schema::TableId;
use crate::storage::record::{self, RowKind, LOCKED, UNPERSISTED};
use crate::storage::table::{ScannedLeaf, Table};
use std::ptr::NonNull;

/// One read: the row and the word seen (unlocked, without UNPERSISTED).
pub(crate) struct ReadEntry<R> {
    pub(crate) row: *const R,
    pub(crate) word: u64,
}

fn read_row_of<R>(entry: &ReadEntry<R>) -> *const R {
    entry.row
}

/// A scanned leaf of a table.
pub(crate) struct LeafEntry {
    pub(crate) table: TableId,
    pub(crate) leaf: ScannedLeaf,
}

/// A secondary entry a commit added before its TID (multi-version
/// protocols; `TxState::add_secondaries`).
pub(crate) struct AddedSecondary {
    /// The write it belongs to.
    pub(crate) write: usize,
    pub(crate) position: u32,
    pub(crate) composite: Vec<u8>,
    /// Whether the entry is new; `false`: it was there already (stale from
    /// an older version of the row, which takes it back).
    pub(crate) inserted: bool,
    /// The leaf it went into, when the insert reported it.
    pub(crate) leaf: Option<LeafRef>,
}

/// A transaction attempt's read, write and node sets over rows `R`.
pub(crate) struct TxSets<R: RowKind> {
    /// The reads, in the order made. A row read twice is in it twice
    /// (unless `unique_reads`): validation checks both words, and a
    /// change between the two reads fails it as it should; searching the
    /// set on every read cost more than the rare duplicate.
    pub(crate) reads: Vec<ReadEntry<R>>,
    /// Whether each row enters `reads` once (`zen+` charges the rows a
    /// transaction reads for the first time against its Met-Cache
    /// footprint).
    pub(in crate::cc) unique_reads: bool,
    pub(in crate::cc) read_positions: PositionIndex,
    /// The buffered writes.
    pub(crate) writes: WriteSet<R>,
    pub(crate) leaves: Vec<LeafEntry>,
    /// Placeholders this attempt inserted (reclaimed if left absent), with
    /// the leaf each went into (timestamp ordering checks its range).
    pub(crate) created: Vec<(TableId, NonNull<R>, Option<LeafRef>)>,
    /// Multi-version protocols: the secondary entries of the write set's
    /// new keys, added once the write set is locked (before the commit's
    /// TID exists), so a snapshot that can see the commit finds them.
    pub(crate) added_secondaries: Vec<AddedSecondary>,
}

impl<R: RowKind> TxSets<R> {
    /// Remembers a stable read of `row`.
    #[inline]
    pub(in crate::cc) fn note_read(&mut self, row: &R, word: u64) {
        // DBXN: an odd (UNPERSISTED) version is not an early abort; the
        // read set holds the next even version, which validates only once
        // the writer's log is durable. No-op for other engines.
        let entry = ReadEntry { row, word: word & !UNPERSISTED };
        if !self.unique_reads {
            self.reads.push(entry);
        } else if self.read_positions.find(&self.reads, read_row_of, row).is_none() {
            self.reads.push(entry);
            self.read_positions.pushed(&self.reads, read_row_of);
        }
    }

    /// A version read whose log is not yet durable (DBXN's odd version)
    /// must become durable before the reader commits: otherwise a crash
    /// could keep the reader and lose what it read. (A version replaced
    /// since was durable before its replacement committed, which checked
    /// the same.)
    pub(crate) fn check_reads_durable(&self) -> Result<(), AbortReason> {
        for read in &self.reads {
            // SAFETY: see WriteEntry::row.
            if unsafe { &*read.row }.word() & !LOCKED == read.word | UNPERSISTED {
                return Err(AbortReason::NotYetDurable);
            }
        }
        Ok(())
    }

    /// Silo's validation of the read set: every row read still has the
    /// version read and is not locked by another transaction.
    pub(crate) fn validate_reads(&self) -> Result<(), AbortReason> {
        for read in &self.reads {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { &*read.row };
            let current = row.word();
            unchanged(current, read.word)?;
            if current & LOCKED != 0 && self.writes.find(read.row).is_none() {
                return Err(AbortReason::ReadValidation);
            }
        }
        Ok(())
    }

    /// The node set: every scanned leaf still has the version seen.
    pub(crate) fn validate_leaves(&self, tables: &[Table<R>]) -> Result<(), AbortReason> {
        for entry in &self.leaves {
            if !tables[entry.table.0 as usize].validate_leaf(&entry.leaf) {
                return Err(AbortReason::NodeValidation);
            }
        }
        Ok(())
    }

    /// Reads in the read set (each row once with `unique_reads`).
    pub(crate) fn reads_len(&self) -> usize {
        self.reads.len()
    }

    /// The rows of the read set from position `start` on, in the order
    /// they were first read (the set only grows during an attempt).
    pub(crate) fn read_rows_from(&self, start: usize) -> impl Iterator<Item = &R> + '_ {
        // SAFETY: see WriteEntry::row.
        self.reads.get(start..).unwrap_or(&[]).iter().map(|read| unsafe { &*read.row })
    }

    /// The version words the read set holds (as read).
    pub(crate) fn read_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.reads.iter().map(|read| read.word)
    }

    /// The largest TID the attempt read.
    pub(crate) fn max_read_tid(&self) -> u64 {
        self.reads.iter().map(|read| record::tid_of(read.word)).max().unwrap_or(0)
    }

    /// Silo's TID rule: above every TID read or overwritten and above
    /// `floor` (the thread's last), and at least the epoch's first TID.
    pub(crate) fn commit_tid(&self, max_locked_tid: u64, floor: u64, epoch: u64) -> u64 {
        let tid = (max_locked_tid.max(self.max_read_tid()).max(floor) + 1).max(record::first_tid_of_epoch(epoch));
        debug_assert!(tid < record::MAX_TID, "TIDs stay below the REMOVED marker");
        tid
    }

    /// Raises the read timestamps of the leaves this attempt scanned to
    /// `ts` (`cicada`, at validation: its reads write nothing shared
    /// before).
    pub(crate) fn raise_scanned_leaves(&self, tables: &[Table<R>], ts: u64) {
        for entry in &self.leaves {
            tables[entry.table.0 as usize].raise_leaf_read_ts(&entry.leaf, ts);
        }
    }
}

/// Whether a row's `current` word (lock bit aside) is still the `read`
/// one; a version still waiting for its log (DBXN's odd version) is told
/// apart, since it validates once durable.
pub(crate) fn unchanged(current: u64, read: u64) -> Result<(), AbortReason> {
    match current & !LOCKED {
        word if word == read => Ok(()),
        word if word == read | UNPERSISTED => Err(AbortReason::NotYetDurable),
        _ => Err(AbortReason::ReadValidation),
    }
}
