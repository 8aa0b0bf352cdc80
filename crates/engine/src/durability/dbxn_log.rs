//! The DBXN family (dbxn.txt §3): `dbxn`, `dbxn-nvm` and `dbx-naive`.
//!
//! All three run the shared transaction state of `cc::transaction` over DRAM records (the engine shell
//! of `engines::dram`, composed in `engines::dbxn`) and log each
//! commit *synchronously* into the worker's redo-log segments in the pool
//! (the `durability::log` format, written with [`LogLayout`]'s NVM-friendly options).
//! They differ only in where the log step sits ([`CommitStage`]):
//!
//! * `dbxn` (§3.1.3): *read*: a seqlock read of (version word, value
//!   pointer), the software form of DBX's HTM-protected read; a version with
//!   UNPERSISTED set (the paper's odd version) is not an early abort: the
//!   read set holds the word without the bit (the "next even version").
//!   *Validate + install* is one region: on this machine (no RTM) the
//!   ordered-lock commit of `cc::write_set` (lock the write set in address order,
//!   validate the read set and the scanned leaves, install the new value
//!   pointers, store each word as `tid | UNPERSISTED`, which unlocks).
//!   *Log*: after the region the redo record goes to the worker's segment
//!   with non-temporal stores and one fence. *Commit*: UNPERSISTED is
//!   cleared with a compare-exchange that only matches this commit's TID, and
//!   the commit is acknowledged ([`CommitTicket::Durable`]). A transaction
//!   that read a version whose log is not durable fails validation
//!   (`NotYetDurable`) until the writer cleared the bit, and then validates.
//! * `dbxn-nvm` (§4.1.1): as `dbxn`, and every written value is also copied
//!   into the worker's value chunks in the pool (owner kind
//!   [`VALUE_CHUNK_KIND`], group = worker), written with the log and made
//!   durable by the same fence; chunks whose values all belong to epochs a
//!   checkpoint covers are freed with the log. *Deviation*: the record keeps
//!   pointing at its DRAM copy, which reads use; the PM copies model the
//!   write traffic of PM-resident values, and recovery does not read them.
//! * `dbx-naive` (§4.1.1, Fig. 5(a)): the log is written and fenced inside
//!   the commit region (after the install, before the locks are released),
//!   so no parity is needed; with RTM such a region would always abort
//!   (`clwb`/non-temporal stores abort transactions), which is why the paper
//!   says it cannot use HTM. With `medium=disk` (Fig. 11's "+synchronous
//!   log (Disk)") the same record goes to the worker's segment *file*
//!   (`durability::file_log`) and is `fdatasync`ed where the PM log
//!   fences. A failed write or sync there comes after the install: the
//!   policy poisons the log first (no commit logs, no ticket becomes
//!   durable, read-only ones included), then returns the error.
//! * `mmdb`: the Zen paper's "MMDB with NVM capacity" baseline (zen-plus.txt
//!   §2.3, §5.1) is this `dbx-naive` policy with every §3.4 option off
//!   ([`LogLayout::PLAIN`], whatever `DbOptions::dbxn` says): the
//!   transaction's redo record is combined in the worker's buffer, written
//!   with ordinary sequential stores into the worker's own segment, each line
//!   `clwb`'d, and one `sfence` issued before the locks are released and the
//!   commit is acknowledged — the paper's "sequential NVM writes, `clwb`s
//!   and a single `sfence`" with "decentralized logs". Checkpoints and
//!   recovery are the shared ones below. It is the same engine as
//!   `dbx-naive:nt=off:pad64=off:align256=off` under the name the Zen paper
//!   gives it.
//!
//! **HTM.** [`pmtx_htm::HtmConfig`] in `DbOptions::htm`: with `none` (the
//! default) commits run the software path directly, with no global lock.
//! With `sim` or `rtm`, `dbxn` and `dbxn-nvm` hand the policy's [`Htm`]
//! instance to the commit (`CommitLog::commit_region`), which runs its
//! lock + validate + install body in an elided region (`Htm::elide`): in a
//! hardware transaction under `rtm`, retried by the DBX/DrTM budget, then
//! the same body in software, taking the row locks itself; `sim`'s injected
//! aborts take exactly that retry and fallback path. `dbx-naive` gets no
//! instance: its log inside the region would abort every hardware attempt.
//! The PHyTM family shares this policy but keeps its HTM with its paths
//! (`cc::hybrid`).
//!
//! **Recovery** is the shared checkpoint + log replay of `durability::group_commit`
//! in its synchronous mode: every valid record (epoch at or above the
//! checkpoint's start epoch) is durable and replayed; the durable-epoch root
//! is ignored. A record becomes durable before its versions turn even, and a
//! dependent transaction validates only after that, so no replayed record
//! depends on a lost one. The epoch ticker still runs: its "durable epoch"
//! means every commit of epochs up to it has finished its synchronous log,
//! which is what a checkpoint waits for before its root switch.
//!
//! Explained in docs/engines/dbxn.md.

use crate::durability::group_commit::{GroupCommitConfig, GroupCommitLog};
use crate::durability::log::SegmentStore;
use crate::durability::log::{LogLayout, LogWriter};
use crate::durability::segments::PoolSegments;
use crate::durability::EnginePolicy;
use crate::durability::{CommitLog, CommitStage};
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::stats::{CommitTicket, EngineStats};
use crate::storage::commit_view::CommitView;
use crate::storage::nvm_tuples::{NvmTuples, NvmTuplesConfig};
use crate::storage::record::Record;
use crate::storage::table::Table;
use parking_lot::Mutex;
use pmtx_htm::Htm;
use pmtx_pm::{ChunkId, ChunkOwner, PmBackend, Pool, PoolError};
use std::sync::{Arc, OnceLock};

/// The ticket of a commit that can never be acknowledged (the log was
/// poisoned): a wait for it returns `Closed`.
const NEVER_DURABLE: CommitTicket = CommitTicket::Epoch(u64::MAX);

/// Chunk-owner kind of `dbxn-nvm` value chunks (group = worker).
pub const VALUE_CHUNK_KIND: u16 = 0x30;
const VALUE_CHUNK_MAGIC: u64 = u64::from_le_bytes(*b"PMTXVAL1");
const VALUE_CHUNK_HEADER: u64 = 64;
/// Per value: u32 length, u32 table, u64 tid, then the bytes, 8-aligned.
const VALUE_ENTRY_HEADER: u64 = 16;

/// Which commits of a deliberately broken variant acknowledge without
/// the fence that makes their record durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SkippedFence {
    /// None (every correct configuration).
    Never,
    /// Every commit.
    Always,
    /// Every other commit (the first, third, ...).
    EveryOther,
}

/// What a DBXN-family log is opened with (the engine builds it from its
/// options and its fault variant).
pub(crate) struct DbxnLogConfig {
    /// The shared log underneath (opened synchronous).
    pub(crate) log: GroupCommitConfig,
    /// How records are written (§3.4's NVM-friendly writes).
    pub(crate) layout: LogLayout,
    /// The HTM instance of the commit region (`None`: software only).
    pub(crate) htm: Option<Htm>,
    /// `dbxn-nvm`: copy each commit's values into a per-worker value area.
    pub(crate) value_copies: bool,
    /// `mmdb`: the rows beyond the DRAM budget live in a volatile NVM
    /// region.
    pub(crate) nvm_tuples: Option<NvmTuplesConfig>,
    /// Broken on purpose (`dbxn-nvm-fence-before-record`): the commit's
    /// one fence follows the value copies but precedes the record.
    pub(crate) fence_before_record: bool,
    /// Broken on purpose: which commits skip their record's fence.
    pub(crate) skipped_fence: SkippedFence,
}

/// A chunk of a worker's value area and the highest epoch written into it.
#[derive(Clone, Copy, Debug)]
struct ValueChunk {
    chunk: ChunkId,
    max_epoch: u64,
}

/// The chunks of one worker slot's value area, oldest first; the last is
/// the one being written.
type ValueChunks = Arc<Mutex<Vec<ValueChunk>>>;

/// `dbxn-nvm`: a worker's append-only value area in the pool.
pub(crate) struct ValueHeap<B: PmBackend> {
    pool: Arc<Pool<B>>,
    worker: u16,
    chunks: ValueChunks,
    /// Absolute offset of the current chunk (0: none yet).
    offset: u64,
    position: u64,
    non_temporal: bool,
    buffer: Vec<u8>,
}

fn value_bytes<V: CommitView + ?Sized>(writes: &V) -> u64 {
    writes.writes().filter_map(|w| w.value).map(|v| (VALUE_ENTRY_HEADER + v.len() as u64).next_multiple_of(8)).sum()
}

impl<B: PmBackend> ValueHeap<B> {
    /// Makes room for the values of `writes`, taking a new chunk (after
    /// `admit` agrees) when the current one is full.
    fn prepare<V: CommitView + ?Sized>(&mut self, writes: &V, admit: impl FnOnce() -> DbResult<()>) -> DbResult<()> {
        let need = value_bytes(writes);
        let chunk_size = self.pool.geometry().chunk_size;
        if need == 0 || (self.offset != 0 && self.position + need <= chunk_size) {
            return Ok(());
        }
        if VALUE_CHUNK_HEADER + need > chunk_size {
            return Err(DbError::OutOfSpace(format!(
                "the values of one transaction ({need} bytes) do not fit a {chunk_size}-byte chunk"
            )));
        }
        admit()?;
        let owner = ChunkOwner::compose(VALUE_CHUNK_KIND, self.worker as u32, 0);
        let chunk = self.pool.allocate_chunk(owner, false).map_err(|error| match error {
            PoolError::Full { .. } => DbError::OutOfSpace(format!("no chunk left for dbxn-nvm values: {error}")),
            other => DbError::Pool(other),
        })?;
        let offset = self.pool.chunk_offset(chunk);
        let mut header = [0u8; VALUE_CHUNK_HEADER as usize];
        header[0..8].copy_from_slice(&VALUE_CHUNK_MAGIC.to_le_bytes());
        header[8..16].copy_from_slice(&(self.worker as u64).to_le_bytes());
        self.write(offset, &header);
        self.chunks.lock().push(ValueChunk { chunk, max_epoch: 0 });
        self.offset = offset;
        self.position = VALUE_CHUNK_HEADER;
        Ok(())
    }

    fn write(&self, offset: u64, bytes: &[u8]) {
        if self.non_temporal {
            self.pool.backend().write_non_temporal(offset, bytes);
        } else {
            self.pool.backend().write(offset, bytes);
        }
    }

    /// Writes the values of `writes` (room was made by `prepare`); returns
    /// the range written. Not durable until the caller's fence (and flush,
    /// for ordinary stores).
    fn append<V: CommitView + ?Sized>(&mut self, tid: u64, writes: &V) -> Option<(u64, u64)> {
        self.buffer.clear();
        for write in writes.writes() {
            if let Some(value) = write.value {
                self.buffer.extend_from_slice(&(value.len() as u32).to_le_bytes());
                self.buffer.extend_from_slice(&write.table.0.to_le_bytes());
                self.buffer.extend_from_slice(&tid.to_le_bytes());
                self.buffer.extend_from_slice(value);
                self.buffer.resize(self.buffer.len().next_multiple_of(8), 0);
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let start = self.offset + self.position;
        debug_assert!(self.position + self.buffer.len() as u64 <= self.pool.geometry().chunk_size);
        self.write(start, &self.buffer);
        self.position += self.buffer.len() as u64;
        if let Some(last) = self.chunks.lock().last_mut() {
            last.max_epoch = last.max_epoch.max(crate::storage::record::epoch_of_tid(tid));
        }
        Some((start, start + self.buffer.len() as u64))
    }
}

/// A worker's log writer (and, for `dbxn-nvm`, value area).
pub(crate) struct DbxnWorker<B: PmBackend, S: SegmentStore> {
    id: usize,
    log: LogWriter<S>,
    values: Option<ValueHeap<B>>,
    /// Records appended (the `2pl-fence-per-two-commits` broken variant).
    appended: u64,
}

/// Test-only: runs in the committing thread after the install, before the
/// log record is written (argument: worker id).
#[cfg(test)]
pub(crate) type BeforeLogHook = Arc<dyn Fn(usize) + Send + Sync>;

/// The DBXN-family policy over the shared group-commit log in its
/// synchronous mode. `PARITY`: `dbxn`/`dbxn-nvm` (log after the region with
/// parity versions) versus `dbx-naive` (log inside the region). `S`: where
/// the log's segments live (the pool; files for `dbx-naive:medium=disk`).
pub(crate) struct DbxnLog<B: PmBackend, const PARITY: bool, S: SegmentStore = PoolSegments<B>> {
    inner: GroupCommitLog<B, S>,
    pool: Arc<Pool<B>>,
    layout: LogLayout,
    htm: Option<Htm>,
    /// `dbxn-nvm`: each worker slot's value chunks.
    values: Option<Vec<ValueChunks>>,
    /// See [`DbxnLogConfig::fence_before_record`].
    fence_before_record: bool,
    /// See [`DbxnLogConfig::skipped_fence`].
    skipped_fence: SkippedFence,
    epochs: OnceLock<Arc<Epochs>>,
    /// `mmdb`: the rows beyond its DRAM budget (`storage::nvm_tuples`).
    nvm: Option<NvmTuples<B>>,
    #[cfg(test)]
    before_log: Option<BeforeLogHook>,
}

impl<B: PmBackend, const PARITY: bool> DbxnLog<B, PARITY> {
    /// The log with its segments in the pool.
    pub(crate) fn open(config: DbxnLogConfig, pool: Arc<Pool<B>>) -> DbResult<Self> {
        let store = PoolSegments::new(Arc::clone(&pool));
        DbxnLog::open_in(config, pool, store)
    }
}

impl<B: PmBackend, const PARITY: bool, S: SegmentStore> DbxnLog<B, PARITY, S> {
    /// The policy with its log's segments in `store`.
    pub(crate) fn open_in(config: DbxnLogConfig, pool: Arc<Pool<B>>, store: S) -> DbResult<Self> {
        // mmdb's volatile region, freed before anything else reads the pool:
        // recovery never looks at it.
        let nvm = config.nvm_tuples.map(|nvm| NvmTuples::open(nvm, Arc::clone(&pool)));
        let workers = config.log.workers;
        let inner =
            GroupCommitLog::open_in(GroupCommitConfig { synchronous: true, ..config.log }, Arc::clone(&pool), store)?;
        let values = config.value_copies.then(|| (0..workers).map(|_| ValueChunks::default()).collect());
        Ok(Self {
            inner,
            pool,
            layout: config.layout,
            htm: config.htm,
            values,
            fence_before_record: config.fence_before_record,
            skipped_fence: config.skipped_fence,
            epochs: OnceLock::new(),
            nvm,
            #[cfg(test)]
            before_log: None,
        })
    }

    /// Poisons the log after a failed write or sync of a record that is
    /// already installed (a log on a file), and returns `error` for the
    /// committer: from here on no commit logs and no ticket becomes durable.
    fn poison(&self, error: DbError) -> DbError {
        self.inner.poison(&error);
        error
    }

    /// Test-only: pause committers between install and log.
    #[cfg(test)]
    pub(crate) fn set_before_log_hook(&mut self, hook: BeforeLogHook) {
        self.before_log = Some(hook);
    }

    fn free_all_value_chunks(&self) {
        for (chunk, owner) in self.pool.owned_chunks() {
            if owner.kind() == VALUE_CHUNK_KIND {
                self.pool.free_chunk(chunk);
            }
        }
        if let Some(values) = &self.values {
            for list in values {
                list.lock().clear();
            }
        }
    }

    /// Frees value chunks (except each worker's current one) whose values
    /// all belong to epochs below `epoch`, which a checkpoint covers.
    fn free_value_chunks_before(&self, epoch: u64) {
        let Some(values) = &self.values else { return };
        for list in values {
            let mut chunks = list.lock();
            let keep_from = chunks.len().saturating_sub(1);
            let mut kept = Vec::with_capacity(chunks.len());
            for (position, chunk) in chunks.drain(..).enumerate() {
                if position < keep_from && chunk.max_epoch < epoch {
                    self.pool.free_chunk(chunk.chunk);
                } else {
                    kept.push(chunk);
                }
            }
            *chunks = kept;
        }
    }
}

impl<B: PmBackend, const PARITY: bool, S: SegmentStore> CommitLog for DbxnLog<B, PARITY, S> {
    const STAGE: CommitStage =
        if PARITY { CommitStage::LogAfterInstallParity } else { CommitStage::LogAfterInstallLocked };
    const VOLATILE_ROWS: bool = !PARITY;
    type Worker = DbxnWorker<B, S>;

    #[inline]
    fn on_row_read(&self, row: &Record, value_len: usize) {
        if let Some(nvm) = &self.nvm {
            nvm.on_read(row, value_len);
        }
    }

    #[inline]
    fn on_row_install(
        &self,
        _worker: &mut DbxnWorker<B, S>,
        _table: crate::schema::TableId,
        row: &Record,
        value: Option<&[u8]>,
        word: u64,
    ) {
        if let Some(nvm) = &self.nvm {
            // A delete (no value) writes the metadata word alone.
            nvm.on_install(row, value.unwrap_or(&[]), word);
        }
    }

    fn worker(&self, id: usize) -> DbResult<DbxnWorker<B, S>> {
        let log = self.inner.worker(id)?.with_layout(self.layout);
        let values = self.values.as_ref().map(|values| ValueHeap {
            pool: Arc::clone(&self.pool),
            worker: id as u16,
            chunks: Arc::clone(&values[id]),
            offset: 0,
            position: 0,
            non_temporal: self.layout.non_temporal,
            buffer: Vec::new(),
        });
        Ok(DbxnWorker { id, log, values, appended: 0 })
    }

    fn prepare<V: CommitView + ?Sized>(&self, worker: &mut DbxnWorker<B, S>, writes: &V) -> DbResult<()> {
        if self.inner.is_closed() {
            return Err(DbError::Poisoned("the database is closed".into()));
        }
        if !worker.log.fits_prepared(writes) {
            self.inner.admit_new_segment()?;
        }
        self.inner.admit_file_record()?;
        worker.log.prepare(writes)?;
        if let Some(values) = &mut worker.values {
            values.prepare(writes, || self.inner.admit_new_segment())?;
        }
        Ok(())
    }

    fn commit_region(&self) -> Option<&Htm> {
        self.htm.as_ref()
    }

    fn append<V: CommitView + ?Sized>(
        &self,
        worker: &mut DbxnWorker<B, S>,
        tid: u64,
        writes: &V,
    ) -> DbResult<CommitTicket> {
        #[cfg(test)]
        if let Some(hook) = &self.before_log {
            hook(worker.id);
        }
        let value_range = worker.values.as_mut().and_then(|values| values.append(tid, writes));
        if self.fence_before_record {
            // Broken on purpose: the commit's one fence follows the value
            // copies but comes before the record's stores.
            if let (Some((start, end)), false) = (value_range, self.layout.non_temporal) {
                self.pool.backend().flush(start, end - start);
            }
            self.pool.backend().fence();
        }
        let range = worker.log.append_prepared(tid).map_err(|error| self.poison(error.into()))?;
        worker.appended += 1;
        if let (Some((start, end)), false) = (value_range, self.layout.non_temporal) {
            self.pool.backend().flush(start, end - start);
        }
        // One fence for the record (and the values): the logging phase (an
        // fdatasync for a log on a file). The broken variants acknowledge
        // without it (dbxn, mmdb, dbxn-nvm, dbx-naive and phtm always,
        // 2pl every other commit).
        let broken = match self.skipped_fence {
            SkippedFence::Never => false,
            SkippedFence::Always => true,
            SkippedFence::EveryOther => worker.appended % 2 == 1,
        };
        if !broken {
            worker.log.make_durable(range).map_err(|error| self.poison(error.into()))?;
        }
        self.pool.backend().crash_point("dbxn: log record durable");
        self.inner.note_logged(worker.id, writes);
        Ok(CommitTicket::Durable)
    }

    fn read_only_ticket(&self, _max_tid: u64) -> CommitTicket {
        // Every version a read-only transaction validated was even (dbxn) or
        // unlocked after its log was durable (dbx-naive), unless the log was
        // poisoned: then the version may be one whose log failed, and no
        // reader may be told it is durable.
        if self.inner.is_closed() {
            NEVER_DURABLE
        } else {
            CommitTicket::Durable
        }
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        self.inner.is_durable(ticket)
    }

    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
}

impl<B: PmBackend, const PARITY: bool, S: SegmentStore> EnginePolicy for DbxnLog<B, PARITY, S> {
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        // Value copies are never needed to recover (the log and checkpoint
        // hold every durable value).
        self.free_all_value_chunks();
        self.inner.recover(tables, epochs)?;
        let _ = self.epochs.set(Arc::clone(epochs));
        Ok(())
    }

    fn on_epoch(&self) {
        self.inner.on_epoch();
    }

    fn checkpoint(&self, tables: &[Table]) -> DbResult<()> {
        // The checkpoint's start epoch is above the epoch read here, so
        // every value of an epoch below it is in the checkpoint.
        let before = self.epochs.get().map(|e| e.global()).unwrap_or(0);
        self.inner.checkpoint(tables)?;
        self.free_value_chunks_before(before);
        Ok(())
    }

    fn log_space_low(&self) -> bool {
        self.inner.log_space_low()
    }

    fn close(&self, tables: &[Table], clean: bool) -> DbResult<()> {
        if clean {
            // No worker runs any more, and recovery never needs the copies.
            self.free_all_value_chunks();
        }
        let closed = self.inner.close(tables, clean);
        if let (Some(nvm), true) = (&self.nvm, clean) {
            // Volatile: nothing in it is needed after the close. (After a
            // crash the next open frees it.)
            nvm.close();
        }
        closed
    }

    fn stats(&self) -> EngineStats {
        let mut stats = self.inner.stats();
        stats.htm = self.htm.as_ref().map(|htm| htm.stats().snapshot());
        if let Some(nvm) = &self.nvm {
            stats.engine_counters.extend(nvm.counters());
        }
        stats
    }
}
