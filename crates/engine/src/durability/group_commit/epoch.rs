//! The epoch tick: one group commit waits for the workers to leave the
//! closing epoch, makes every worker log durable and publishes the durable
//! epoch; a checkpoint that must not rely on the ticker drives epochs
//! itself.

use super::{GroupCommitLog, DURABLE_EPOCH_ROOT};
use crate::durability::log::{LogStoreMode, SegmentStore};
use crate::error::{DbError, DbResult};
use pmtx_pm::PmBackend;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// Makes every log byte written so far durable and publishes
    /// `durable_epoch` (all records of epochs <= it are complete).
    fn flush_logs(&self, durable_epoch: u64) -> DbResult<()> {
        let mut previous_tails = self.flush_lock.lock();
        let broken = self.faults.epoch_before_log();
        if broken && durable_epoch > self.epochs().durable() {
            // Broken on purpose: the epoch is published (persisted, and
            // acknowledged to workers) before its log lines are durable;
            // they are flushed only by the next group commit, which flushes
            // up to the tails this one saw.
            self.pool.set_root(DURABLE_EPOCH_ROOT, durable_epoch)?;
            self.epochs().set_durable(durable_epoch);
            // Where the disk-log control takes its crash image: the epoch
            // is acknowledged, its records are not durable.
            self.pool.backend().crash_point("group commit (broken): epoch published, its log not yet durable");
        }
        let now: Vec<u64> = self.logs.iter().map(|shared| shared.tail.load(Ordering::Acquire)).collect();
        let limits = if broken { std::mem::replace(&mut *previous_tails, now) } else { now };
        let segment_size = self.store.segment_size();
        let mut ranges = Vec::with_capacity(self.logs.len());
        let mut advances = Vec::with_capacity(self.logs.len());
        for (index, shared) in self.logs.iter().enumerate() {
            let tail = limits.get(index).copied().unwrap_or(0);
            let flushed = shared.flushed.load(Ordering::Acquire);
            if tail == 0 {
                continue;
            }
            let end = tail;
            let segment_start = (tail - 1) / segment_size * segment_size;
            let start = if flushed >= segment_start && flushed <= tail { flushed } else { segment_start };
            // Nothing new since the last flush (or since a synchronous
            // writer made its own record durable) gives an empty range: no
            // flush, and for a file no fdatasync.
            if end > start {
                ranges.push((start, end));
            }
            // Only advance `flushed` within the segment it points into: if
            // the writer started a new segment between the two loads above,
            // `tail` is in the old one, and storing it would leave a
            // `flushed` from another segment that the writer's next roll (or
            // a new writer of the slot) trusts.
            if start == flushed {
                advances.push((shared, flushed, tail));
            }
        }
        // One sync for every worker: one fence (pool), one fdatasync per
        // file with new bytes (files).
        self.store.sync(&ranges, LogStoreMode::Cached).map_err(Into::into)?;
        for (shared, flushed, tail) in advances {
            let _ = shared.flushed.compare_exchange(flushed, tail, Ordering::AcqRel, Ordering::Acquire);
        }
        // Each worker's current segment records how far its records are
        // durable now (persisted by the durable-epoch root's fence below,
        // or the next fence), so recovery tells a damaged or cut record
        // below that point from the end of the log.
        for shared in &self.logs {
            let segments = shared.segments.lock();
            self.store.record_durable_end(&segments, shared.flushed.load(Ordering::Acquire));
        }
        self.pool.backend().crash_point("group commit: logs durable, before epoch marker");
        if durable_epoch > self.epochs().durable() {
            self.pool.set_root(DURABLE_EPOCH_ROOT, durable_epoch)?;
            self.epochs().set_durable(durable_epoch);
        }
        Ok(())
    }

    /// Waits until every active worker works in `epoch` or later.
    pub(super) fn wait_workers_reach(&self, epoch: u64) {
        let mut spins = 0u32;
        while self.epochs().min_active() < epoch {
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    /// One group commit: close the current epoch and make it durable.
    pub(super) fn close_epoch(&self) -> DbResult<()> {
        let epochs = self.epochs();
        let current = epochs.global();
        self.wait_workers_reach(current);
        self.flush_logs(current - 1)
    }

    /// Waits until `epoch` is durable by driving epochs itself.
    ///
    /// The caller (a checkpoint) never relies on the ticker: the ticker stops
    /// as soon as the engine's stop flag is set, while the engine's shutdown
    /// joins the checkpointer first, so a checkpoint that slept waiting for
    /// the ticker could wait forever. Driving an epoch here is the ticker's
    /// own step; `flush_lock` serialises it with the ticker.
    pub(super) fn wait_durable_epoch(&self, epoch: u64) -> DbResult<()> {
        // Only epochs that exist can become durable: a larger one would
        // drive the epoch forever (a caller bug, e.g. a marker TID taken for
        // a commit's).
        debug_assert!(epoch <= self.epochs().global(), "waiting for epoch {epoch} beyond the global epoch");
        while self.epochs().durable() < epoch {
            if self.closed.load(Ordering::SeqCst) && !self.self_driving.load(Ordering::SeqCst) {
                return Err(DbError::Poisoned("database closed while waiting for durability".into()));
            }
            self.epochs().advance();
            self.close_epoch()?;
        }
        Ok(())
    }
}
