//! Concurrency control entirely in DRAM (zen-plus.txt §3.3.2): Silo OCC over
//! the CC-Meta word of each [`Row`], the same protocol `occ.rs` runs over
//! records.
//!
//! The transaction's private data is a read set (row, word seen), a buffered
//! write set and a node set (scanned leaves with their versions). At commit
//! the worker (`worker.rs`) calls, in order: [`SiloOcc::lock_writes`]
//! (address order, bounded spinning), reads the global epoch (serialization
//! point), [`SiloOcc::validate`] (read words unchanged and not locked by
//! another transaction, leaf versions unchanged), [`SiloOcc::commit_tid`];
//! then persists the write set to the heap and installs it, which unlocks.
//!
//! Nothing here touches PM or the Met-Cache values, which is the shape that
//! lets other protocols slot in: a 2PL variant would take the row locks at
//! access time in `note_read`/write and make `validate` trivial; TicToc would
//! keep (wts, rts) in the CC-Meta word and compute the Tx-CTS from them; an
//! MVCC variant would add a version chain to the row. The persist step only
//! needs a Tx-CTS that orders conflicting transactions and grows per thread.

use super::cache::{Row, LOCKED};
use super::table::{ScannedLeaf, ZenTable};
use crate::error::AbortReason;
use crate::index::LeafChange;
use crate::position_index::PositionIndex;
use crate::record;
use crate::schema::TableId;

/// How long a committing writer spins for a row lock before aborting.
const LOCK_SPINS: u32 = 256;

/// One read: the row and the (unlocked) word seen.
pub(crate) struct ReadEntry {
    pub(crate) row: *const Row,
    pub(crate) word: u64,
}

/// One buffered write.
pub(crate) struct WriteEntry {
    pub(crate) table: TableId,
    pub(crate) key: Vec<u8>,
    /// New value; `None` deletes.
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) row: *const Row,
    /// Whether the commit adds secondary-index entries for this row (see
    /// `table::secondaries_to_index`).
    pub(crate) index_secondaries: bool,
    /// The word seen when locking (valid between lock and install).
    pub(crate) locked_word: u64,
}

impl WriteEntry {
    /// The row.
    pub(crate) fn row(&self) -> &Row {
        // SAFETY: rows live as long as their table, which outlives workers.
        unsafe { &*self.row }
    }
}

/// A scanned leaf.
pub(crate) struct LeafEntry {
    pub(crate) table: TableId,
    pub(crate) leaf: ScannedLeaf,
}

/// Silo OCC state of one transaction attempt.
#[derive(Default)]
pub(crate) struct SiloOcc {
    pub(crate) reads: Vec<ReadEntry>,
    read_positions: PositionIndex,
    /// Push with [`SiloOcc::push_write`] and reorder with
    /// [`SiloOcc::sort_writes`], which keep `write_positions` in step.
    pub(crate) writes: Vec<WriteEntry>,
    write_positions: PositionIndex,
    pub(crate) leaves: Vec<LeafEntry>,
}

// SAFETY: the raw row pointers refer to rows owned by tables that outlive
// the worker (the engine holds them in an Arc).
unsafe impl Send for SiloOcc {}

impl SiloOcc {
    pub(crate) fn clear(&mut self) {
        self.reads.clear();
        self.read_positions.clear();
        self.writes.clear();
        self.write_positions.clear();
        self.leaves.clear();
    }

    pub(crate) fn find_write(&self, row: *const Row) -> Option<usize> {
        self.write_positions.find(&self.writes, |write| write.row, row)
    }

    /// Buffers a write of a row not yet in the write set.
    pub(crate) fn push_write(&mut self, write: WriteEntry) {
        debug_assert!(self.find_write(write.row).is_none());
        self.writes.push(write);
        self.write_positions.pushed(&self.writes, |write| write.row);
    }

    /// Orders the write set by row address (the lock order).
    pub(crate) fn sort_writes(&mut self) {
        self.writes.sort_by_key(|w| w.row as usize);
        self.write_positions.rebuild(&self.writes, |write| write.row);
    }

    /// Remembers a stable read of `row`.
    pub(crate) fn note_read(&mut self, row: &Row, word: u64) {
        if self.read_positions.find(&self.reads, |read| read.row, row).is_none() {
            self.reads.push(ReadEntry { row, word });
            self.read_positions.pushed(&self.reads, |read| read.row);
        }
    }

    /// Silo's node-set update for this transaction's own inserts (as in
    /// `occ.rs`).
    pub(crate) fn note_own_insert(&mut self, table: TableId, change: Option<LeafChange>) {
        if let Some(change) = change {
            for entry in &mut self.leaves {
                if entry.table == table
                    && entry.leaf.secondary.is_none()
                    && entry.leaf.leaf == change.leaf
                    && entry.leaf.version == change.version_before
                {
                    entry.leaf.version = change.version_after;
                }
            }
        }
    }

    /// Locks the write set in address order. Returns the largest TID seen
    /// on a locked row, or the abort reason (with nothing left locked).
    pub(crate) fn lock_writes(&mut self) -> Result<u64, AbortReason> {
        self.sort_writes();
        let mut max_tid = 0;
        for index in 0..self.writes.len() {
            match self.writes[index].row().lock(LOCK_SPINS) {
                Some(word) => {
                    self.writes[index].locked_word = word;
                    max_tid = max_tid.max(record::tid_of(word));
                }
                None => {
                    self.release(index);
                    return Err(AbortReason::WriteLock);
                }
            }
        }
        Ok(max_tid)
    }

    /// Unlocks the first `locked` writes without changing them.
    pub(crate) fn release(&self, locked: usize) {
        for write in &self.writes[..locked] {
            write.row().unlock();
        }
    }

    /// Validates the read set and the node set.
    pub(crate) fn validate(&self, tables: &[ZenTable]) -> Result<(), AbortReason> {
        for read in &self.reads {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { &*read.row };
            let current = row.word();
            if current & !LOCKED != read.word {
                return Err(AbortReason::ReadValidation);
            }
            if current & LOCKED != 0 && self.find_write(read.row).is_none() {
                return Err(AbortReason::ReadValidation);
            }
        }
        for entry in &self.leaves {
            if !tables[entry.table.0 as usize].validate_leaf(&entry.leaf) {
                return Err(AbortReason::NodeValidation);
            }
        }
        Ok(())
    }

    /// Silo's TID rule: above every TID read or overwritten and above
    /// `floor` (the thread's last), and at least the epoch's first TID.
    pub(crate) fn commit_tid(&self, max_locked_tid: u64, floor: u64, epoch: u64) -> u64 {
        let max_read = self.reads.iter().map(|r| record::tid_of(r.word)).max().unwrap_or(0);
        (max_locked_tid.max(max_read).max(floor) + 1).max(record::first_tid_of_epoch(epoch))
    }
}
