//! Taking a checkpoint: it waits for the epochs it covers to be durable,
//! then frees the log segments it made redundant.

use super::GroupCommitLog;
use crate::durability::checkpoint::{self, CheckpointMeta};
use crate::durability::log::{SegmentId, SegmentInfo, SegmentStore};
use crate::error::{DbError, DbResult};
use crate::storage::table::Table;
use pmtx_pm::{PmBackend, Structure};
use std::sync::atomic::Ordering;

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    pub(super) fn free_segments_before(&self, start_epoch: u64) {
        let mut freed: Vec<SegmentId> = std::mem::take(&mut *self.retired.lock());
        for shared in &self.logs {
            let mut segments = shared.segments.lock();
            let keep_from = segments.len().saturating_sub(1);
            let mut kept: Vec<SegmentInfo> = Vec::with_capacity(segments.len());
            for (position, segment) in segments.drain(..).enumerate() {
                if position < keep_from && segment.max_epoch < start_epoch {
                    freed.push(segment.id);
                } else {
                    kept.push(segment);
                }
            }
            *segments = kept;
        }
        self.segments_freed.fetch_add(freed.len() as u64, Ordering::Relaxed);
        self.store.free(&freed);
    }

    pub(super) fn take_checkpoint(&self, tables: &[Table]) -> DbResult<CheckpointMeta> {
        if self.snapshots {
            return self.take_snapshot(tables);
        }
        let mut generation = self.checkpoint_generation.lock();
        let logged_before = self.logged_row_bytes();
        let start_epoch = self.epochs().advance();
        self.wait_workers_reach(start_epoch);
        let meta = checkpoint::write_checkpoint(
            &self.pool,
            tables,
            self.epochs(),
            next_generation(*generation)?,
            start_epoch,
            |end_epoch| self.wait_durable_epoch(end_epoch.max(start_epoch - 1)),
        )?;
        *generation += 1;
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.note_checkpoint(&meta, logged_before);
        *self.last_checkpoint.lock() = Some(meta);
        self.free_segments_before(start_epoch);
        Ok(meta)
    }
}

/// The checkpoint generation after `generation` (read from the pool, which
/// `checkpoint::current_checkpoint` bounds; checked all the same).
pub(super) fn next_generation(generation: u64) -> DbResult<u64> {
    generation
        .checked_add(1)
        .ok_or_else(|| DbError::corrupt(Structure::Checkpoint, format!("generation {generation} has no successor")))
}
