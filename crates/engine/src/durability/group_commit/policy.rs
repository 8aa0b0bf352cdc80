//! The engine's hooks ([`EnginePolicy`]): recovery, the per-epoch group
//! commit, checkpoints, when the log runs short of space, close and
//! statistics; and the closed (poisoned) state that stops the log.

use super::GroupCommitLog;
use crate::durability::log::SegmentStore;
use crate::durability::EnginePolicy;
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::stats::EngineStats;
use crate::storage::table::Table;
use pmtx_pm::PmBackend;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a synchronous policy wrapping this log (the DBXN family) uses: the
/// closed state.
impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// Whether the database was closed (or poisoned).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Stops the log for good after a failure of its medium (a file log's
    /// write or sync): no append succeeds and no wait for durability ends
    /// well from here on. IMPORTANT: a synchronous policy calls this before
    /// it returns the error to a committer whose versions are installed,
    /// so every transaction that can see them afterwards finds the log
    /// poisoned.
    pub(crate) fn poison(&self, error: &DbError) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            eprintln!("pmtx: the redo log failed, database poisoned: {error}");
        }
    }
}

impl<B: PmBackend, S: SegmentStore> EnginePolicy for GroupCommitLog<B, S> {
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        self.recover_from_log(tables, epochs)
    }

    fn on_epoch(&self) {
        if let Err(error) = self.close_epoch() {
            // A failed persist of the durable epoch: stop acknowledging.
            self.closed.store(true, Ordering::SeqCst);
            eprintln!("pmtx: group commit failed, database poisoned: {error}");
        }
    }

    fn checkpoint(&self, tables: &[Table]) -> DbResult<()> {
        self.take_checkpoint(tables).map(|_| ())
    }

    /// Low once less than a quarter of the pool (at least two chunks per
    /// worker) is left beyond the checkpoint's reserve: a checkpoint now
    /// frees the log before appends hit `OutOfSpace` (the reserve grows
    /// with every logged row, so the spare room shrinks twice as fast as
    /// the log grows).
    fn log_space_low(&self) -> bool {
        if !S::IN_POOL {
            // The log takes no pool chunk: a checkpoint would free none.
            return false;
        }
        let spare = self.pool.free_chunks().saturating_sub(self.checkpoint_reserve());
        spare < (self.pool.geometry().chunk_count / 4).max(2 * self.logs.len() as u64)
    }

    fn close(&self, tables: &[Table], clean: bool) -> DbResult<()> {
        self.self_driving.store(true, Ordering::SeqCst);
        if !clean {
            self.closed.store(true, Ordering::SeqCst);
            return Ok(());
        }
        // Everything committed becomes durable, then a final checkpoint
        // lets the next open skip log replay.
        self.epochs().advance();
        self.close_epoch()?;
        self.take_checkpoint(tables)?;
        self.closed.store(true, Ordering::SeqCst);
        let mut all = Vec::new();
        for shared_log in &self.logs {
            all.extend(shared_log.segments.lock().drain(..).map(|segment| segment.id));
        }
        self.store.free(&all);
        self.pool.mark_clean_shutdown();
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        let segments: usize = self.logs.iter().map(|l| l.segments.lock().len()).sum();
        EngineStats {
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            log_bytes: segments as u64 * self.store.segment_size(),
            log_file_syncs: self.store.file_syncs(),
            log_directory_syncs: self.store.directory_syncs(),
            log_segments_freed: self.segments_freed.load(Ordering::Relaxed),
            recovery: self.recovery.lock().clone(),
            ..EngineStats::default()
        }
    }
}
