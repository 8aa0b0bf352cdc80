//! What engines report: [`EngineStats`], the [`RecoveryReport`] of an
//! open and the [`CommitTicket`] of a commit. Plain values at the bottom
//! of the crate, so every layer (storage's recovery, the durability
//! schemes) can fill them in.

/// Engine-wide statistics.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Checkpoints completed since open.
    pub checkpoints: u64,
    /// Bytes of log currently held in the pool.
    pub log_bytes: u64,
    /// Log segments freed by truncation since open.
    pub log_segments_freed: u64,
    /// `fdatasync` calls on redo log files since open (engines whose log is
    /// on a file: `dbx-disk`, `dbx-naive` with `medium=disk`; 0 elsewhere).
    pub log_file_syncs: u64,
    /// `fsync` calls on the redo log's directory since open (new segment
    /// files, removals), counted apart from `log_file_syncs`.
    pub log_directory_syncs: u64,
    /// Highest durable epoch (epoch engines).
    pub durable_epoch: u64,
    /// Recovery report of the last open.
    pub recovery: Option<RecoveryReport>,
    /// Persistence work of the engine's background threads (group-commit
    /// log flushes, periodic checkpoints) since open; worker threads count
    /// their own work in `pmtx_pm::thread_counters`.
    pub background_pm: pmtx_pm::PmCounters,
    /// Statistics of the engine's HTM regions (engines that use an HTM
    /// instance: the DBXN family with the `sim` or `rtm` backend).
    pub htm: Option<pmtx_htm::HtmStatsSnapshot>,
    /// Commits by path since open (the PHyTM family: `fast_htm`,
    /// `slow_htm`, `stm`, `stm_exclusive`, `global_lock`); empty elsewhere.
    pub path_commits: Vec<(&'static str, u64)>,
    /// Engine-specific counters since open, by name (the Zen family:
    /// pipelined commits completed, and those made durable by a fence of
    /// their own rather than their worker's next commit's; `zen+` also:
    /// entries into the exclusive stage by trigger, aborts and waits it
    /// caused, snapshot reads, direct NVM writes, maintenance, NUMA
    /// placement); empty for engines without any.
    pub engine_counters: Vec<(&'static str, u64)>,
    /// Met-Cache hits (zen): reads served from DRAM.
    pub cache_hits: u64,
    /// Met-Cache misses (zen): reads copied from the PM heap.
    pub cache_misses: u64,
    /// Met-Cache evictions (zen).
    pub cache_evictions: u64,
    /// Bytes the Met-Cache regions hold now (zen).
    pub cache_bytes: u64,
    /// Aborted attempts counted by the engine (zen).
    pub aborts: u64,
    /// Free tuple slots in the heap's DRAM free lists (zen).
    pub heap_free_slots: u64,
    /// Chunks held by the tuple heap (zen).
    pub heap_chunks: u64,
    /// Superseded tuples waiting for reclamation (zen).
    pub heap_garbage: u64,
    /// Tombstone sweeps run since open (zen).
    pub heap_sweeps: u64,
    /// Rows in the primary indexes now, absent placeholders included
    /// (exact when no transaction runs).
    pub rows_indexed: u64,
    /// Absent rows (deleted, or placeholders of reads of missing keys)
    /// unlinked from the indexes by reclamation since open.
    pub rows_unlinked: u64,
    /// Group-commit records (c_p, c_d) made durable since open (wbl).
    pub window_records: u64,
    /// Periodic checkpoints that failed since open (each also returned
    /// once as [`crate::DbError::CheckpointFailed`]).
    pub checkpoint_failures: u64,
    /// The last failure of a background thread (a failed checkpoint, a
    /// panic), if any.
    pub background_failure: Option<String>,
}

impl EngineStats {
    /// Met-Cache hits / reads, or `None` before the first read.
    pub fn cache_hit_rate(&self) -> Option<f64> {
        let reads = self.cache_hits + self.cache_misses;
        (reads > 0).then(|| self.cache_hits as f64 / reads as f64)
    }
}

/// What recovery did at open.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// Whether the pool was closed cleanly (fast path taken).
    pub clean_shutdown: bool,
    /// Rows loaded from the checkpoint.
    pub checkpoint_rows: u64,
    /// Log records scanned.
    pub log_records_scanned: u64,
    /// Log records applied (newer than the row's TID).
    pub log_records_applied: u64,
    /// Log records skipped because their epoch was not durable.
    pub log_records_not_durable: u64,
    /// Log records dropped because a transaction they depend on is not in
    /// the log (sp3), with the later records of their workers.
    pub log_records_missing_dependency: u64,
    /// Wall time of recovery.
    pub duration: std::time::Duration,
    /// Tuple slots scanned in the heap (zen).
    pub heap_slots_scanned: u64,
    /// Live tuples recovered from the heap (zen).
    pub heap_tuples_recovered: u64,
    /// Tuples of unfinished transactions or torn slots discarded (zen);
    /// for wbl, also every version in (c_p, c_d].
    pub heap_tuples_discarded: u64,
    /// The (c_p, c_d) of the group-commit record recovery went by (wbl).
    pub wbl_window: Option<(u64, u64)>,
}

/// When a committed transaction becomes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitTicket {
    /// Already durable (synchronous logging, or a non-durable engine).
    Durable,
    /// Durable once the engine's durable epoch reaches this epoch.
    Epoch(u64),
    /// Durable once the line holding the commit's last-persisted mark is
    /// fenced (Zen's pipelined commits: the mark is flushed at commit and
    /// left to a later fence, zen-plus.txt §3.3.1). `worker` is the
    /// committing worker, `cts` the commit's timestamp (Tx-CTS); the
    /// worker's next writing commit fences it, and so does a wait for it
    /// (`EngineWorker::wait_durable`) on any worker.
    Flushed {
        /// The committing worker.
        worker: u32,
        /// The commit's timestamp.
        cts: u64,
    },
}
