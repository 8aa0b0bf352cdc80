//! The `group-commit` engine's durability policy (DBX-NVM in the DBXN
//! paper, Silo's epoch-based group commit on PM).
//!
//! Workers append redo records to their own PM log with ordinary stores and
//! never flush. Once per epoch the ticker thread waits until every active
//! worker has moved past the closing epoch, flushes each worker's new log
//! bytes, issues one fence, and persists the durable epoch in the pool root
//! `log.durable_epoch`. A commit is acknowledged once its epoch is durable.
//!
//! Recovery: load the current checkpoint, replay every valid log record
//! whose epoch is at least the checkpoint's start epoch and at most the
//! durable epoch (per-key newest TID wins, so worker logs replay in
//! parallel), rebuild secondary indexes, then write a fresh checkpoint and
//! free the old logs, so records of never-durable epochs can never be
//! mistaken for durable ones later. Each recovery also takes a new
//! incarnation (root `log.incarnation`, the high half of every new segment
//! sequence), so stale records left in reused, unzeroed chunks never pass a
//! new segment's record CRC.
//!
//! Space: a new log segment may not take the free chunks the next checkpoint
//! may need (a bound from the last checkpoint's size plus the rows logged
//! since), so a log that fills the pool ends in `DbError::OutOfSpace` while
//! close and recovery can still checkpoint and free the log.

use crate::durability::checkpoint::{self, CheckpointMeta};
use crate::durability::log::{self, LogShared, LogStoreMode, LogWriter, SegmentInfo};
use crate::durability::log::{SegmentId, SegmentStore};
use crate::durability::segments::PoolSegments;
use crate::durability::CommitLog;
use crate::durability::EnginePolicy;
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::fault::Faults;
use crate::schema::TableSchema;
use crate::stats::{CommitTicket, EngineStats, RecoveryReport};
use crate::storage::commit_view::CommitView;
use crate::storage::record::{self, Record};
use crate::storage::table::Table;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Pool, Structure};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Root holding the highest durable epoch.
pub const DURABLE_EPOCH_ROOT: &str = "log.durable_epoch";
/// Root holding the schema digest.
pub const SCHEMA_ROOT: &str = "catalog.digest";
/// Root holding the engine that owns the pool.
pub const ENGINE_ROOT: &str = "engine.kind";
/// Root saying where the redo log lives: absent or [`LOG_MEDIUM_POOL`] in
/// the pool, [`LOG_MEDIUM_FILES`] in files beside it (`durability::file_log`).
pub const LOG_MEDIUM_ROOT: &str = "log.medium";
/// [`LOG_MEDIUM_ROOT`] of a log in pool chunks.
pub const LOG_MEDIUM_POOL: u64 = 1;
/// [`LOG_MEDIUM_ROOT`] of a log in files.
pub const LOG_MEDIUM_FILES: u64 = 2;
/// Root counting recoveries (incarnations of the log); the high 32 bits of
/// every log segment sequence number written after a recovery.
pub const LOG_INCARNATION_ROOT: &str = "log.incarnation";

/// Checkpoint chunk header and row header sizes (see `durability::checkpoint`), for
/// the bound on the size of the next checkpoint.
const CHECKPOINT_CHUNK_HEADER: u64 = 64;
const CHECKPOINT_ROW_HEADER: u64 = 32;

/// Checkpoint-row bytes a logged write can add to the next checkpoint.
fn row_bytes<V: CommitView + ?Sized>(writes: &V) -> u64 {
    writes
        .writes()
        .filter_map(|write| write.value.map(|value| CHECKPOINT_ROW_HEADER + (write.key.len() + value.len()) as u64))
        .map(|bytes| bytes.next_multiple_of(8))
        .sum()
}

/// What a group-commit log is opened with (the engine builds it from its
/// options).
#[derive(Clone, Debug)]
pub(crate) struct GroupCommitConfig {
    /// Worker slots, one log chain each.
    pub(crate) workers: usize,
    /// Largest checkpoint row the schema allows, in bytes.
    pub(crate) max_row_bytes: u64,
    /// Synchronous logging: every record is durable when its commit
    /// returns, so recovery replays every valid record and ignores the
    /// durable-epoch root (the DBXN and SP^3 logs set it).
    pub(crate) synchronous: bool,
    /// Records carry the transactions they depend on, and recovery drops
    /// those whose dependencies were never durable (SP^3's log sets it).
    pub(crate) dependency_dag: bool,
    pub(crate) faults: Faults,
}

impl GroupCommitConfig {
    /// Epoch group commit for `workers` over `tables`.
    pub(crate) fn new(workers: usize, tables: &[TableSchema], faults: Faults) -> Self {
        let max_row_bytes = tables
            .iter()
            .map(|t| (CHECKPOINT_ROW_HEADER + (t.max_key_len + t.max_value_len) as u64).next_multiple_of(8))
            .max()
            .unwrap_or(0);
        Self { workers, max_row_bytes, synchronous: false, dependency_dag: false, faults }
    }
}

/// Group-commit durability over a pool, with the log's segments in store
/// `S` (pool chunks by default; files for `dbx-disk`). Checkpoints and the
/// durable-epoch root are always in the pool.
pub(crate) struct GroupCommitLog<B: PmBackend, S: SegmentStore = PoolSegments<B>> {
    pool: Arc<Pool<B>>,
    store: Arc<S>,
    logs: Vec<Arc<LogShared>>,
    next_sequence: Mutex<Vec<u64>>,
    retired: Mutex<Vec<SegmentId>>,
    epochs: OnceLock<Arc<Epochs>>,
    checkpoint_generation: Mutex<u64>,
    last_checkpoint: Mutex<Option<CheckpointMeta>>,
    checkpoints: AtomicU64,
    segments_freed: AtomicU64,
    recovery: Mutex<Option<RecoveryReport>>,
    /// Per worker: checkpoint-row bytes of every write logged (monotonic).
    logged_row_bytes: Vec<CachePadded<AtomicU64>>,
    /// Upper bound on the bytes of the last checkpoint's chunks.
    checkpoint_bytes: AtomicU64,
    /// Sum of `logged_row_bytes` when the last checkpoint began.
    logged_at_checkpoint: AtomicU64,
    /// Largest checkpoint row the schema allows, in bytes.
    max_row_bytes: u64,
    /// Set when no ticker runs (closing): waiters drive epochs themselves.
    self_driving: AtomicBool,
    /// Serialises the epoch flush between the ticker and self-driving callers.
    /// The flush lock; holds, for the `group-commit-epoch-before-log`
    /// broken variant, the log tails of the previous group commit (the
    /// only bytes it flushes).
    flush_lock: Mutex<Vec<u64>>,
    closed: AtomicBool,
    /// See [`GroupCommitConfig::synchronous`].
    synchronous: bool,
    /// See [`GroupCommitConfig::dependency_dag`].
    dependency_dag: bool,
    faults: Faults,
}

impl<B: PmBackend> GroupCommitLog<B> {
    /// The log with its segments in the pool.
    pub(crate) fn open(config: GroupCommitConfig, pool: Arc<Pool<B>>) -> DbResult<Self> {
        let store = PoolSegments::new(Arc::clone(&pool));
        GroupCommitLog::open_in(config, pool, store)
    }
}

/// Checks that the pool's log lives where `in_pool` says (pool chunks, or
/// files), and returns whether the pool says a log of that medium exists
/// already (false for a pool no log-based engine opened yet). Changes
/// nothing.
pub(crate) fn check_log_medium<B: PmBackend>(pool: &Pool<B>, in_pool: bool) -> DbResult<bool> {
    let wanted = if in_pool { LOG_MEDIUM_POOL } else { LOG_MEDIUM_FILES };
    let name = |code: u64| if code == LOG_MEDIUM_FILES { "in files (medium=disk)" } else { "in the pool (PM)" };
    let mismatch = |found: u64| {
        DbError::SchemaMismatch(format!(
            "the pool keeps its redo log {}, not {}: open it with the engine and options it was created with",
            name(found),
            name(wanted)
        ))
    };
    match pool.root(LOG_MEDIUM_ROOT) {
        Some(found) if found == wanted => Ok(true),
        Some(found) if found == LOG_MEDIUM_POOL || found == LOG_MEDIUM_FILES => Err(mismatch(found)),
        Some(found) => Err(DbError::corrupt(
            Structure::RootTable,
            format!("root {LOG_MEDIUM_ROOT} holds {found}, which names no log medium"),
        )),
        // A pool whose engine ran before this root existed kept its log in
        // the pool.
        None if pool.root(ENGINE_ROOT).is_some() => {
            if in_pool {
                Ok(true)
            } else {
                Err(mismatch(LOG_MEDIUM_POOL))
            }
        }
        None => Ok(false),
    }
}

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// The log with its segments in `store`; the pool holds checkpoints
    /// and the roots. The caller checks the pool's engine identity and
    /// schema right after (before recovery reads anything), as the
    /// medium is checked first here.
    pub(crate) fn open_in(config: GroupCommitConfig, pool: Arc<Pool<B>>, store: S) -> DbResult<Self> {
        // The medium first: a pool whose first open crashed before its
        // engine root was written must not look like a pool of another
        // medium at the next open.
        if !check_log_medium(&pool, S::IN_POOL)? {
            pool.set_root(LOG_MEDIUM_ROOT, if S::IN_POOL { LOG_MEDIUM_POOL } else { LOG_MEDIUM_FILES })?;
        }
        let workers = config.workers;
        Ok(Self {
            store: Arc::new(store),
            synchronous: config.synchronous,
            dependency_dag: config.dependency_dag,
            faults: config.faults,
            pool,
            logs: (0..workers).map(|_| Arc::new(LogShared::default())).collect(),
            next_sequence: Mutex::new(vec![0; workers]),
            retired: Mutex::new(Vec::new()),
            epochs: OnceLock::new(),
            checkpoint_generation: Mutex::new(0),
            last_checkpoint: Mutex::new(None),
            checkpoints: AtomicU64::new(0),
            segments_freed: AtomicU64::new(0),
            recovery: Mutex::new(None),
            logged_row_bytes: (0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            checkpoint_bytes: AtomicU64::new(0),
            logged_at_checkpoint: AtomicU64::new(0),
            max_row_bytes: config.max_row_bytes,
            self_driving: AtomicBool::new(false),
            flush_lock: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        })
    }

    fn epochs(&self) -> &Arc<Epochs> {
        self.epochs.get().expect("epochs attached after recovery")
    }

    /// The pool the log lives in.
    pub(crate) fn pool(&self) -> &Arc<Pool<B>> {
        &self.pool
    }

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
    fn wait_workers_reach(&self, epoch: u64) {
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
    fn close_epoch(&self) -> DbResult<()> {
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
    fn wait_durable_epoch(&self, epoch: u64) -> DbResult<()> {
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

    fn free_segments_before(&self, start_epoch: u64) {
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

    fn logged_row_bytes(&self) -> u64 {
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
    fn checkpoint_reserve(&self) -> u64 {
        let payload = self.pool.geometry().chunk_size - CHECKPOINT_CHUNK_HEADER;
        let grown = self.logged_row_bytes().saturating_sub(self.logged_at_checkpoint.load(Ordering::Relaxed));
        let bound = self.checkpoint_bytes.load(Ordering::Relaxed) + grown;
        let mut chunks = 2 * bound.div_ceil(payload) + 1;
        if payload > self.max_row_bytes {
            chunks = chunks.min(bound / (payload - self.max_row_bytes) + 1);
        }
        chunks + 3 * self.logs.len() as u64
    }

    fn note_checkpoint(&self, meta: &CheckpointMeta, logged_before: u64) {
        let payload = self.pool.geometry().chunk_size - CHECKPOINT_CHUNK_HEADER;
        self.checkpoint_bytes.store(meta.chunks * payload, Ordering::Relaxed);
        self.logged_at_checkpoint.store(logged_before, Ordering::Relaxed);
    }

    fn take_checkpoint(&self, tables: &[Table]) -> DbResult<CheckpointMeta> {
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

/// What a synchronous policy wrapping this log (the DBXN family) uses.
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

/// The checkpoint generation after `generation` (read from the pool, which
/// `checkpoint::current_checkpoint` bounds; checked all the same).
fn next_generation(generation: u64) -> DbResult<u64> {
    generation
        .checked_add(1)
        .ok_or_else(|| DbError::corrupt(Structure::Checkpoint, format!("generation {generation} has no successor")))
}

/// Installs a recovered version if it is newer than what the record holds.
fn install_recovered(record: &Record, tid: u64, value: Option<&[u8]>) -> bool {
    let word = record.lock(u32::MAX).expect("recovery locks never time out");
    let current_tid = record::tid_of(word);
    let newer = tid > current_tid || (current_tid == 0 && word & record::ABSENT != 0);
    if newer {
        // SAFETY (of the free): recovery runs alone, no reader exists.
        record.set_value_locked(value, &mut |old| unsafe { old.free() });
        record.store_word(record::word_of(tid, if value.is_some() { 0 } else { record::ABSENT }));
    } else {
        record.unlock();
    }
    newer
}

impl<B: PmBackend, S: SegmentStore> CommitLog for GroupCommitLog<B, S> {
    type Worker = LogWriter<S>;

    fn worker(&self, id: usize) -> DbResult<LogWriter<S>> {
        let shared = Arc::clone(&self.logs[id]);
        // A previous writer of this slot may have unflushed bytes: make them
        // durable before the slot's tail moves to a new segment.
        {
            let _guard = self.flush_lock.lock();
            let tail = shared.tail.load(Ordering::Acquire);
            let flushed = shared.flushed.load(Ordering::Acquire);
            if tail > flushed {
                self.store.sync(&[(flushed, tail)], LogStoreMode::Cached).map_err(Into::into)?;
                shared.flushed.store(tail, Ordering::Release);
            }
        }
        let sequence = {
            let mut next = self.next_sequence.lock();
            // Above what an earlier writer of the slot rolled to.
            next[id] = next[id].max(shared.last_sequence.load(Ordering::Acquire));
            // Recovery bounds every sequence read from the pool, so this
            // overflows only after 2^32 segments in one life.
            next[id] = next[id].checked_add(1).ok_or_else(|| {
                DbError::Corrupt(format!("log sequence of worker {id} exhausted; recover the pool to start anew"))
            })?;
            next[id]
        };
        LogWriter::in_store(Arc::clone(&self.store), id as u16, LogStoreMode::Cached, shared, sequence)
    }

    fn append<V: CommitView + ?Sized>(
        &self,
        worker: &mut LogWriter<S>,
        tid: u64,
        writes: &V,
    ) -> DbResult<CommitTicket> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(DbError::Poisoned("the database is closed".into()));
        }
        if !worker.fits(writes) {
            // This record starts a new segment: keep the checkpoint's reserve.
            self.admit_new_segment()?;
        }
        self.admit_file_record()?;
        worker.append(tid, writes)?;
        self.logged_row_bytes[worker.worker() as usize].fetch_add(row_bytes(writes), Ordering::Relaxed);
        Ok(CommitTicket::Epoch(record::epoch_of_tid(tid)))
    }

    fn read_only_ticket(&self, max_tid: u64) -> CommitTicket {
        CommitTicket::Epoch(record::epoch_of_tid(max_tid))
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        match ticket {
            CommitTicket::Durable => true,
            CommitTicket::Epoch(epoch) => self.epochs().durable() >= epoch,
        }
    }

    fn delete_is_durable(&self, tid: u64) -> bool {
        self.synchronous || record::epoch_of_tid(tid) <= self.epochs().durable()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// SP^3's dependency DAG over every complete record at or above
/// `start_epoch` (older ones are in the checkpoint): in TID order (every
/// dependency and every earlier record of the same worker has a smaller
/// TID), a record is kept when every dependency at or above `start_epoch` is
/// kept and its worker's earlier records are; returns the TIDs dropped. SP^3
/// TIDs carry their worker, so they are unique across workers.
fn dependency_dag_drops<S: SegmentStore>(
    store: &S,
    segments: &[log::FoundSegment],
    start_epoch: u64,
) -> DbResult<std::collections::HashSet<u64>> {
    // Each worker's chain is scanned on its own thread, as the replay does.
    let mut chains: std::collections::BTreeMap<u16, Vec<&log::FoundSegment>> = Default::default();
    for segment in segments {
        chains.entry(segment.worker).or_default().push(segment);
    }
    let mut nodes: Vec<(u64, u16, Vec<u64>)> = std::thread::scope(|scope| {
        let scans: Vec<_> = chains
            .values()
            .map(|chain| {
                scope.spawn(move || -> DbResult<Vec<(u64, u16, Vec<u64>)>> {
                    let mut nodes = Vec::new();
                    for segment in chain {
                        store.scan_segment(segment, &mut |record| {
                            if record.tid <= record::MAX_TID && record::epoch_of_tid(record.tid) >= start_epoch {
                                nodes.push((record.tid, segment.worker, record.dependencies));
                            }
                        })?;
                    }
                    Ok(nodes)
                })
            })
            .collect();
        let mut nodes = Vec::new();
        for scan in scans {
            nodes.extend(scan.join().expect("a log scan panicked")?);
        }
        Ok::<_, DbError>(nodes)
    })?;
    nodes.sort_unstable_by_key(|(tid, _, _)| *tid);
    let mut kept = std::collections::HashSet::with_capacity(nodes.len());
    let mut dropped = std::collections::HashSet::new();
    let mut broken_workers = std::collections::HashSet::new();
    for (tid, worker, dependencies) in nodes {
        let complete = !broken_workers.contains(&worker)
            && dependencies
                .iter()
                .all(|dependency| record::epoch_of_tid(*dependency) < start_epoch || kept.contains(dependency));
        if complete {
            kept.insert(tid);
        } else {
            broken_workers.insert(worker);
            dropped.insert(tid);
        }
    }
    Ok(dropped)
}

impl<B: PmBackend, S: SegmentStore> EnginePolicy for GroupCommitLog<B, S> {
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        debug_assert_eq!(epochs.capacity(), self.logs.len());
        let started = Instant::now();
        let pool = &*self.pool;
        let mut report = RecoveryReport { clean_shutdown: pool.begin_engine_session(), ..Default::default() };
        let (segments, broken) = self.store.find_segments()?;
        let has_checkpoint = pool.root(checkpoint::CHECKPOINT_ROOT).is_some();
        // Every recovery ends by storing the durable epoch, and log segments
        // and checkpoints exist only after one finished: a pool holding
        // either without the root lost it, and reading it as 0 would drop
        // every committed record of a later epoch.
        let durable_epoch = match pool.root(DURABLE_EPOCH_ROOT) {
            Some(epoch) => epoch,
            None if !segments.is_empty() || !broken.is_empty() || has_checkpoint => {
                return Err(DbError::corrupt(
                    Structure::RootTable,
                    format!(
                        "root {DURABLE_EPOCH_ROOT} is missing, but the pool holds {} log segments{}",
                        segments.len() + broken.len(),
                        if has_checkpoint { " and a checkpoint" } else { "" }
                    ),
                ))
            }
            None => 0,
        };
        let current = checkpoint::current_checkpoint(pool)?;
        checkpoint::free_other_generations(pool, current.as_ref().map(|(m, _)| m.generation).unwrap_or(0));
        let table_of = |id: u32| {
            tables.get(id as usize).ok_or_else(|| DbError::Corrupt(format!("persistent data names table #{id}")))
        };
        let mut max_epoch = 0u64;
        let mut start_epoch = 0u64;
        if let Some((meta, chunks)) = &current {
            *self.checkpoint_generation.lock() = meta.generation;
            self.note_checkpoint(meta, 0);
            start_epoch = meta.start_epoch;
            max_epoch = meta.end_epoch.max(meta.start_epoch);
            report.checkpoint_rows = checkpoint::read_rows(pool, chunks, |table, key, tid, value| {
                let table = table_of(table)?;
                let (record, _, _) = table.get_or_insert(key, value.len())?;
                install_recovered(record, tid, Some(value));
                Ok(())
            })?;
        }
        let synchronous = self.synchronous;
        // Whether a valid record of `tid` found beyond an invalid one (or in
        // a segment whose header is damaged) proves the invalid bytes are
        // damage: it was durable together with everything before it in its
        // segment (the flush that made its epoch durable came after every
        // record of that epoch was written, and flushed each worker's log
        // up to its tail; a synchronous log may have several records of a
        // worker in flight under one fence, so its own fences prove
        // nothing), and the checkpoint does not cover it.
        let proves_damage = |tid: u64| {
            let epoch = record::epoch_of_tid(tid);
            epoch >= start_epoch && epoch <= durable_epoch
        };
        // A header torn while its segment was started leaves no record of
        // the segment it claims newer than the checkpoint (the header is
        // durable before any record; stale records of the chunk's earlier
        // use are older than the checkpoint that let it be freed).
        // The sequence field may be what is damaged: the records are also
        // tried under the sequences the segment could have had (the stored
        // one with any one bit flipped, and those of this life's chains).
        // Only the records a scan from the start reaches count: the same
        // ones an earlier recovery saw of a chunk's earlier use.
        let incarnation = pool.root(LOG_INCARNATION_ROOT).unwrap_or(0);
        let highest = segments.iter().map(|segment| segment.sequence & u64::from(u32::MAX)).max().unwrap_or(0);
        for &id in &broken {
            let Some(claimed) = self.store.claimed_segment(id) else { continue };
            let mut candidates: Vec<u64> = std::iter::once(claimed.sequence)
                .chain((0..64).map(|bit| claimed.sequence ^ (1 << bit)))
                .chain((0..=highest.saturating_add(2).min(1 << 16)).map(|n| (incarnation << 32) | n))
                .collect();
            candidates.sort_unstable();
            candidates.dedup();
            // The worker: the chunk owner's, or (its owner tag damaged) any.
            let workers = std::iter::once(claimed.worker)
                .chain((0..self.logs.len() as u16).filter(|&worker| worker != claimed.worker));
            let candidates: Vec<log::FoundSegment> = workers
                .flat_map(|worker| {
                    candidates.iter().map(move |&sequence| log::FoundSegment { worker, sequence, ..claimed })
                })
                .filter(|candidate| self.store.first_record_valid(candidate))
                .collect();
            for candidate in candidates {
                let sequence = candidate.sequence;
                let mut newer = None;
                self.store.scan_segment(&candidate, &mut |record| {
                    if newer.is_none() && proves_damage(record.tid) {
                        newer = Some(record.tid);
                    }
                })?;
                if let Some(tid) = newer {
                    return Err(DbError::corrupt(
                        Structure::LogSegment,
                        format!(
                            "the header of log chunk {} (worker {}, sequence {sequence:#x}) is damaged, but the chunk \
                             holds its durable record {tid:#x}",
                            id.0, candidate.worker
                        ),
                    ));
                }
            }
        }
        self.store.free(&broken);
        if durable_epoch > record::MAX_EPOCH {
            return Err(DbError::corrupt(
                Structure::RootTable,
                format!("durable epoch {durable_epoch} is beyond the largest epoch {}", record::MAX_EPOCH),
            ));
        }
        // A life's segment sequences are `incarnation << 32 | n`, and the
        // incarnation root is durable before any segment of its life.
        let previous_incarnation = pool.root(LOG_INCARNATION_ROOT).unwrap_or(0);
        if previous_incarnation >= u64::from(u32::MAX) {
            return Err(DbError::corrupt(
                Structure::RootTable,
                format!("log incarnation {previous_incarnation} is out of range"),
            ));
        }
        if let Some(segment) = segments.iter().find(|segment| segment.sequence >> 32 > previous_incarnation) {
            return Err(DbError::corrupt(
                Structure::LogSegment,
                format!(
                    "log segment of worker {} has sequence {:#x}, beyond log incarnation {previous_incarnation}",
                    segment.worker, segment.sequence
                ),
            ));
        }
        // SP^3: the records whose dependencies were never durable, and the
        // later records of their workers (see `durability::sp3_log`).
        let dropped = if self.dependency_dag {
            let dropped = dependency_dag_drops(&*self.store, &segments, start_epoch)?;
            report.log_records_missing_dependency = dropped.len() as u64;
            dropped
        } else {
            Default::default()
        };
        let dropped = &dropped;
        // Replay each worker's chain on its own thread.
        let mut by_worker: std::collections::BTreeMap<u16, Vec<log::FoundSegment>> = Default::default();
        for segment in &segments {
            by_worker.entry(segment.worker).or_default().push(*segment);
            let mut next = self.next_sequence.lock();
            if let Some(slot) = next.get_mut(segment.worker as usize) {
                *slot = (*slot).max(segment.sequence);
            }
        }
        // Segment sequences never repeat across lives. Record CRCs cover the
        // sequence, and reused chunks are not zeroed: a stale record of a
        // crashed life that recovery never saw (it lay after a torn record,
        // so its epoch may reach the next life's first epoch) would validate
        // in a new segment of the same sequence once a scan runs past a
        // record whose terminator was lost, and be replayed although it was
        // never acknowledged. So every recovery durably takes a new
        // incarnation, before any segment of this life exists, and new
        // sequences start above `incarnation << 32`.
        let incarnation = previous_incarnation + 1;
        pool.set_root(LOG_INCARNATION_ROOT, incarnation)?;
        for slot in self.next_sequence.lock().iter_mut() {
            *slot = (*slot).max(incarnation << 32);
        }
        let scanned = AtomicU64::new(0);
        let applied = AtomicU64::new(0);
        let skipped = AtomicU64::new(0);
        let seen_epoch = AtomicU64::new(max_epoch);
        let failure: Mutex<Option<DbError>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for chain in by_worker.values() {
                let (scanned, applied, skipped, seen_epoch, failure) =
                    (&scanned, &applied, &skipped, &seen_epoch, &failure);
                let store = &*self.store;
                scope.spawn(move || {
                    for segment in chain {
                        let scan = store.scan_segment(segment, &mut |record| {
                            scanned.fetch_add(1, Ordering::Relaxed);
                            if record.tid > record::MAX_TID {
                                failure.lock().get_or_insert(DbError::corrupt(
                                    Structure::LogRecord,
                                    format!("log record TID {:#x} is beyond the largest TID", record.tid),
                                ));
                                return;
                            }
                            let epoch = record::epoch_of_tid(record.tid);
                            seen_epoch.fetch_max(epoch, Ordering::Relaxed);
                            if epoch < start_epoch {
                                return;
                            }
                            if epoch > durable_epoch && !synchronous {
                                skipped.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            if dropped.contains(&record.tid) {
                                return;
                            }
                            for write in &record.writes {
                                let result = table_of(write.table).and_then(|table| {
                                    let (row, _, _) =
                                        table.get_or_insert(&write.key, write.value.as_ref().map_or(0, Vec::len))?;
                                    install_recovered(row, record.tid, write.value.as_deref());
                                    Ok(())
                                });
                                if let Err(error) = result {
                                    failure.lock().get_or_insert(error);
                                }
                            }
                            applied.fetch_add(1, Ordering::Relaxed);
                        });
                        match scan {
                            // The scan stops at the first invalid record: the
                            // end of the log, unless a durable record of the
                            // segment follows it. (The space a segment leaves
                            // unused when its writer moves on is not
                            // marked, so a damaged last record of a segment
                            // is not told from that end.)
                            Ok(end) => {
                                match (end.durable_end, end.stopped_at) {
                                    // A word that fails its check is no
                                    // claim: a crash while a reused chunk's
                                    // header was written leaves the old
                                    // bytes there, and a damaged word alone
                                    // loses no record.
                                    (Err(_), _) => {}
                                    // Only once the segment showed a record
                                    // of its own: a chunk reused for a new
                                    // segment whose header write a crash
                                    // tore may still show its old header
                                    // and durable end, with no record of
                                    // it at the start.
                                    (Ok(Some(durable)), Some(position))
                                        if position < durable && position > log::SEGMENT_HEADER =>
                                    {
                                        failure.lock().get_or_insert(DbError::corrupt(
                                            Structure::LogRecord,
                                            format!(
                                                "log record at {position:#x} of worker {} segment {:#x} is damaged or \
                                                 missing: the segment's records were durable up to {durable:#x}",
                                                segment.worker, segment.sequence
                                            ),
                                        ));
                                    }
                                    _ => {}
                                }
                                if let (Some(position), Some(&tid)) =
                                    (end.stopped_at, end.later.iter().find(|&&tid| proves_damage(tid)))
                                {
                                    failure.lock().get_or_insert(DbError::corrupt(
                                        Structure::LogRecord,
                                        format!(
                                            "log record at {position:#x} of worker {} segment {:#x} is damaged: the \
                                             durable record {tid:#x} follows it",
                                            segment.worker, segment.sequence
                                        ),
                                    ));
                                }
                            }
                            Err(error) => {
                                failure.lock().get_or_insert(error);
                            }
                        }
                    }
                });
            }
        });
        if let Some(error) = failure.into_inner() {
            return Err(error);
        }
        report.log_records_scanned = scanned.into_inner();
        report.log_records_applied = applied.into_inner();
        report.log_records_not_durable = skipped.into_inner();
        for table in tables {
            // Replayed deletes left absent rows: only replay needed them.
            table.drop_absent_rows_quiescent();
            if table.schema().secondaries.is_empty() {
                continue;
            }
            let mut value = Vec::new();
            let mut result = Ok(());
            table.for_each_row(|key, record| {
                if let Some(snapshot) = record.copy_value(&mut value) {
                    if !snapshot.is_absent() && result.is_ok() {
                        result = table.index_secondaries(key, &value, record);
                    }
                }
            });
            result?;
        }
        // Every epoch above is at most `MAX_EPOCH` (checked where read), and
        // the new life's TIDs must fit too.
        let last_epoch = seen_epoch.into_inner().max(durable_epoch);
        let first_epoch = last_epoch.checked_add(1).filter(|epoch| *epoch <= record::MAX_EPOCH).ok_or_else(|| {
            DbError::Corrupt(format!(
                "recovered epoch {last_epoch} leaves no epoch (the largest is {}) to run in",
                record::MAX_EPOCH
            ))
        })?;
        epochs.raise(first_epoch);
        self.epochs.set(Arc::clone(epochs)).map_err(|_| DbError::Corrupt("recovered twice".into()))?;
        // Fresh checkpoint, then drop the old logs (see the module comment).
        if !segments.is_empty() {
            let generation = next_generation(*self.checkpoint_generation.lock())?;
            let meta = checkpoint::write_checkpoint(pool, tables, epochs, generation, first_epoch, |_| Ok(()))?;
            *self.checkpoint_generation.lock() = generation;
            self.note_checkpoint(&meta, 0);
            *self.last_checkpoint.lock() = Some(meta);
            let old: Vec<SegmentId> = segments.iter().map(|segment| segment.id).collect();
            self.store.free(&old);
        }
        pool.set_root(DURABLE_EPOCH_ROOT, first_epoch - 1)?;
        report.duration = started.elapsed();
        *self.recovery.lock() = Some(report);
        Ok(())
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
