//! The space a new log segment (or a file log's record) must leave free:
//! a bound on the next checkpoint's chunks, from the last checkpoint's
//! size plus the rows logged since, so a full pool can still checkpoint
//! and free its log (see the module comment of `group_commit`).

use super::GroupCommitLog;
use crate::durability::checkpoint::CheckpointMeta;
use crate::durability::log::SegmentStore;
use crate::error::{DbError, DbResult};
use crate::storage::commit_view::CommitView;
use pmtx_pm::PmBackend;
use std::sync::atomic::Ordering;

/// Checkpoint chunk header and row header sizes (see `durability::checkpoint`), for
/// the bound on the size of the next checkpoint.
const CHECKPOINT_CHUNK_HEADER: u64 = 64;
pub(super) const CHECKPOINT_ROW_HEADER: u64 = 32;

/// Checkpoint-row bytes a logged write can add to the next checkpoint.
pub(super) fn row_bytes<V: CommitView + ?Sized>(writes: &V) -> u64 {
    writes
        .writes()
        .filter_map(|write| write.value.map(|value| CHECKPOINT_ROW_HEADER + (write.key.len() + value.len()) as u64))
        .map(|bytes| bytes.next_multiple_of(8))
        .sum()
}

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    pub(super) fn logged_row_bytes(&self) -> u64 {
        self.logged_row_bytes.iter().map(|bytes| bytes.load(Ordering::Relaxed)).sum()
    }

    /// Free chunks a new log segment must leave for the next checkpoint.
    ///
    /// A checkpoint is the only way to free log space, and recovery must
    /// write one before it may drop the old logs; if the log took the last
    /// chunks, a full pool could not be reopened. The next checkpoint holds
    /// at most the last one's bytes plus one row per write logged since it
    /// began. Rows are packed greedily, so every chunk but the last holds
    /// more than `payload - max_row` bytes, and two consecutive chunks more
    /// than `payload`. Per worker, three chunks more: the rows that the
    /// writes still to come in its current segment can add (a row is at most
    /// about twice its logged write, so a full segment adds under 2.5
    /// chunks), and a segment being started concurrently.
    pub(super) fn checkpoint_reserve(&self) -> u64 {
        let payload = self.pool.geometry().chunk_size - CHECKPOINT_CHUNK_HEADER;
        let grown = self.logged_row_bytes().saturating_sub(self.logged_at_checkpoint.load(Ordering::Relaxed));
        let bound = self.checkpoint_bytes.load(Ordering::Relaxed) + grown;
        let mut chunks = 2 * bound.div_ceil(payload) + 1;
        if self.snapshots {
            // Snapshot rows (16-byte headers) are smaller than checkpoint
            // rows, but a 4 KiB page may leave up to a row's bytes unused:
            // pages are at least half full, and a chunk ends in an unused
            // run at most once; one more chunk for the root page.
            return chunks + 1 + 3 * self.logs.len() as u64;
        }
        if payload > self.max_row_bytes {
            chunks = chunks.min(bound / (payload - self.max_row_bytes) + 1);
        }
        chunks + 3 * self.logs.len() as u64
    }

    pub(super) fn note_checkpoint(&self, meta: &CheckpointMeta, logged_before: u64) {
        let payload = self.pool.geometry().chunk_size - CHECKPOINT_CHUNK_HEADER;
        self.checkpoint_bytes.store(meta.chunks * payload, Ordering::Relaxed);
        self.logged_at_checkpoint.store(logged_before, Ordering::Relaxed);
    }
}

/// What a synchronous policy wrapping this log (the DBXN family) uses: the
/// checkpoint reserve's admission checks and accounting.
impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// Refuses a new log segment (or other log-like chunk) that would take
    /// one of the chunks reserved for the next checkpoint, as `append` does.
    pub(crate) fn admit_new_segment(&self) -> DbResult<()> {
        if !S::IN_POOL {
            // A file log takes no pool chunk; the file system says when it
            // is full (ENOSPC, a typed `OutOfSpace`).
            return Ok(());
        }
        let reserve = self.checkpoint_reserve();
        let free = self.pool.free_chunks();
        if free <= reserve {
            return Err(DbError::OutOfSpace(format!(
                "no log segment may take one of the last {reserve} free chunks ({free} free): they are reserved \
                 for the checkpoint that frees log space"
            )));
        }
        Ok(())
    }

    /// Refuses a record of a log kept in files once the pool could not hold
    /// the next checkpoint beside the current one: the log takes no pool
    /// chunk, but every row it adds must fit the checkpoint that recovery
    /// writes before it may drop the log, or the pool could not be
    /// reopened. (A log in the pool is held back per segment instead, by
    /// [`GroupCommitLog::admit_new_segment`].)
    pub(crate) fn admit_file_record(&self) -> DbResult<()> {
        if S::IN_POOL {
            return Ok(());
        }
        let reserve = self.checkpoint_reserve();
        let free = self.pool.free_chunks();
        if free <= reserve {
            return Err(DbError::OutOfSpace(format!(
                "the pool could not hold the next checkpoint of the database ({reserve} chunks, {free} free): the \
                 redo log is in files, but recovery must checkpoint everything it logs into the pool"
            )));
        }
        Ok(())
    }

    /// Accounts a record of `writes` logged by `worker` (for the reserve).
    pub(crate) fn note_logged<V: CommitView + ?Sized>(&self, worker: usize, writes: &V) {
        self.logged_row_bytes[worker].fetch_add(row_bytes(writes), Ordering::Relaxed);
    }
}
