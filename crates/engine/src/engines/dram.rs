//! The DRAM engines' shell: tables of [`Record`]s, epochs, a background
//! ticker and checkpointer, the transaction state of [`crate::cc::transaction`]
//! (any protocol), and a
//! durability policy ([`EnginePolicy`]: none for `silo`, epoch group commit
//! for `group-commit`, DBXN's synchronous log for the DBXN family). One
//! engine = one composition of these; [`OccWorker`] runs transactions.

use crate::cc::concurrency::Concurrency;
use crate::cc::protocols::phytm::Hybrid;
use crate::cc::transaction::{RowStore, TxState};
use crate::durability::{CommitLog, CommitStage, EnginePolicy};
use crate::engine::{CommitTicket, Engine, EngineKind, EngineStats, EngineWorker, ScanRequest, WriteOp};
use crate::epoch::Epochs;
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::options::DbOptions;
use crate::schema::TableId;
use crate::storage::record::{self, Record, RetiredValue, ABSENT, UNPERSISTED};
use crate::storage::table::{ReclaimPolicy, RowReclaimer, Table};
use parking_lot::Mutex;
use pmtx_htm::{AttemptAbort, ExplicitAbort, Htm, RegionAbort};
use pmtx_pm::PmCounters;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// An OCC engine with policy `L`.
pub(crate) struct OccEngine<L: EnginePolicy> {
    /// The engine these options name (the policy serves several).
    kind: EngineKind,
    shared: Arc<OccShared<L>>,
    stop: Arc<AtomicBool>,
    ticker: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    background_pm: BackgroundCounters,
}

impl<L: EnginePolicy> OccEngine<L> {
    pub(crate) fn open(options: &DbOptions, policy: L) -> DbResult<Arc<Self>> {
        let epochs = Arc::new(Epochs::new(options.workers, 1));
        let tables = options
            .tables
            .iter()
            .enumerate()
            .map(|(position, schema)| Table::new(TableId(position as u32), schema.clone(), Some(Arc::clone(&epochs))))
            .collect::<DbResult<Vec<_>>>()?;
        {
            // IMPORTANT: log replay fills the indexes from several threads
            // that announce no epoch; the pin keeps every index array they
            // retire (hash-table growth) alive until all of them are done.
            let _replaying = epochs.pin_background();
            policy.recover(&tables, &epochs)?;
        }
        let faults = options.faults();
        let shared = Arc::new(OccShared {
            health: Arc::default(),
            cc: Arc::new(
                Concurrency::after_recovery(options.cc, options.workers, &tables)
                    .with_hybrid(crate::engines::phytm::hybrid(options)?, options.workers),
            ),
            tables,
            epochs,
            log: policy,
            orphans: Default::default(),
            rows_unlinked: Default::default(),
            faults,
            fault_window: Arc::default(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let background_pm = BackgroundCounters::default();
        // A panic of either thread is recorded in `shared.health`; the
        // waits for durability check it, so none needs waking.
        let ticker = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            let interval = options.epoch_interval;
            let counters = Arc::clone(&background_pm);
            let health = Arc::clone(&shared.health);
            crate::background::spawn(
                "pmtx-epoch",
                &health,
                move || ticker_loop(shared, stop, interval, counters, faults),
                || {},
            )?
        };
        let checkpointer = match options.checkpoint_interval {
            Some(interval) => {
                let shared = Arc::clone(&shared);
                let stop = Arc::clone(&stop);
                let counters = Arc::clone(&background_pm);
                let health = Arc::clone(&shared.health);
                Some(crate::background::spawn(
                    "pmtx-checkpoint",
                    &health,
                    move || checkpoint_loop(shared, stop, interval, counters, faults),
                    || {},
                )?)
            }
            None => None,
        };
        Ok(Arc::new(Self {
            kind: options.engine,
            shared,
            stop,
            ticker: Mutex::new(Some(ticker)),
            checkpointer: Mutex::new(checkpointer),
            closed: AtomicBool::new(false),
            background_pm,
        }))
    }

    fn stop_ticker(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // The checkpointer may wait for durable epochs: stop it while the
        // ticker still runs.
        // Their panics are caught and recorded in `shared.health` (see
        // `background::spawn`), so a join does not fail.
        for (name, thread) in [("pmtx-checkpoint", &self.checkpointer), ("pmtx-epoch", &self.ticker)] {
            if let Some(handle) = thread.lock().take() {
                if let Err(payload) = handle.join() {
                    self.shared.health.thread_panicked(name, payload.as_ref());
                }
            }
        }
    }
}

/// Persistence counters of background threads, summed.
type BackgroundCounters = Arc<Mutex<PmCounters>>;

/// Runs `work` and adds the PM work it did on this thread to `total`.
fn counted(total: &BackgroundCounters, work: impl FnOnce()) {
    let before = pmtx_pm::thread_counters();
    work();
    let done = pmtx_pm::thread_counters().since(&before);
    total.lock().add(&done);
}

fn ticker_loop<L: EnginePolicy>(
    shared: Arc<OccShared<L>>,
    stop: Arc<AtomicBool>,
    interval: Duration,
    counters: BackgroundCounters,
    faults: crate::fault::Faults,
) {
    // Short sleeps, so a close or crash never waits a whole (possibly long)
    // epoch for this thread.
    let step = interval.min(Duration::from_millis(5));
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(step);
        waited += step;
        if waited < interval {
            continue;
        }
        waited = Duration::ZERO;
        if faults.epoch_panics() {
            panic!("injected panic of the epoch thread");
        }
        counted(&counters, || {
            shared.epochs.advance();
            shared.log.on_epoch();
        });
    }
}

fn checkpoint_loop<L: EnginePolicy>(
    shared: Arc<OccShared<L>>,
    stop: Arc<AtomicBool>,
    interval: Duration,
    counters: BackgroundCounters,
    faults: crate::fault::Faults,
) {
    let step = Duration::from_millis(10).min(interval);
    // A checkpoint forced by log-space pressure waits at least this long
    // after the previous one ended, so a pool that the data itself fills
    // does not checkpoint back to back.
    let pressure_gap = Duration::from_millis(100).min(interval);
    let mut waited = Duration::ZERO;
    let mut inject_failure = faults.checkpoint_fails();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(step);
        waited += step;
        if waited >= interval || (waited >= pressure_gap && shared.log.log_space_low()) {
            waited = Duration::ZERO;
            if faults.checkpoint_panics() {
                panic!("injected panic of the checkpointer");
            }
            counted(&counters, || {
                let result = if std::mem::take(&mut inject_failure) {
                    Err(DbError::OutOfSpace("injected failure of a periodic checkpoint".into()))
                } else {
                    shared.log.checkpoint(&shared.tables)
                };
                // The caller hears of it: the next transaction (or close)
                // returns it, and the statistics count it.
                if let Err(error) = result {
                    shared.health.checkpoint_failed(error);
                }
            });
        }
    }
}

impl<L: EnginePolicy> Engine for OccEngine<L> {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn tables(&self) -> &[Table] {
        &self.shared.tables
    }

    fn worker(self: Arc<Self>, id: usize) -> DbResult<Box<dyn EngineWorker>> {
        Ok(Box::new(OccWorker::new(Arc::clone(&self.shared), id)?))
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        self.shared.log.is_durable(ticket)
    }

    fn stats(&self) -> EngineStats {
        let mut stats = self.shared.log.stats();
        stats.durable_epoch = self.shared.epochs.durable();
        stats.rows_indexed = self.shared.tables.iter().map(|table| table.indexed_rows() as u64).sum();
        stats.rows_unlinked = self.shared.rows_unlinked.load(Ordering::Relaxed);
        stats.background_pm = *self.background_pm.lock();
        self.shared.health.report(&mut stats);
        if let Some(hybrid) = self.shared.cc.hybrid() {
            stats.path_commits = hybrid.path_commits();
            stats.htm = hybrid.htm().map(|htm| htm.stats().snapshot());
        }
        stats
    }

    fn checkpoint(&self) -> DbResult<()> {
        self.shared.log.checkpoint(&self.shared.tables)
    }

    fn background_error(&self) -> DbResult<()> {
        self.shared.health.take_error()
    }

    fn close(&self) -> DbResult<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_ticker();
        if self.shared.health.has_panicked() {
            // The state the thread left is not trusted: no final checkpoint
            // and no clean-shutdown mark, so the next open recovers.
            self.shared.log.close(&self.shared.tables, false)?;
            return self.shared.health.take_error();
        }
        self.shared.log.close(&self.shared.tables, true)?;
        // A periodic checkpoint that failed unseen is still reported (the
        // final checkpoint of the close succeeded all the same).
        self.shared.health.take_error()
    }

    fn close_on_drop(&self) -> DbResult<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_ticker();
        self.shared.log.close(&self.shared.tables, false)
    }
}

impl<L: EnginePolicy> Drop for OccEngine<L> {
    fn drop(&mut self) {
        self.stop_ticker();
    }
}

/// The DRAM storage: values live in the records.
pub(crate) struct DramStore;

impl RowStore<Record> for DramStore {
    #[inline]
    fn read(&self, row: &Record, out: &mut Vec<u8>) -> Result<u64, AbortReason> {
        row.read_stable(out).map(|snapshot| snapshot.word).ok_or(AbortReason::UnstableRead)
    }
}

/// The DRAM storage of an engine whose policy keeps rows in volatile NVM
/// (`mmdb`, [`CommitLog::VOLATILE_ROWS`]): each read of a present row is
/// also reported to the policy, which charges the row's NVM home.
struct VolatileRowStore<'a, L: CommitLog>(&'a L);

impl<L: CommitLog> RowStore<Record> for VolatileRowStore<'_, L> {
    #[inline]
    fn read(&self, row: &Record, out: &mut Vec<u8>) -> Result<u64, AbortReason> {
        let word = DramStore.read(row, out)?;
        if !out.is_empty() {
            self.0.on_row_read(row, out.len());
        }
        Ok(word)
    }
}

/// Runs `$call` on the worker's transaction with the row store its policy
/// needs (a compile-time choice: [`CommitLog::VOLATILE_ROWS`]).
macro_rules! with_store {
    ($worker:ident, $method:ident ( $($arg:expr),* )) => {
        if L::VOLATILE_ROWS {
            $worker.tx.$method(&$worker.shared.tables, &VolatileRowStore(&$worker.shared.log), $($arg),*)
        } else {
            $worker.tx.$method(&$worker.shared.tables, &DramStore, $($arg),*)
        }
    };
}

/// Where a commit's validation and install run.
#[derive(Clone, Copy)]
enum Region<'a> {
    /// In software.
    Software,
    /// DBX's elided region: hardware attempts, then the same body in
    /// software (`Htm::elide`); the attempt aborts only for the body's own
    /// reasons.
    Elide(&'a Htm),
    /// One hardware attempt (the hybrid engines' hardware paths): any abort
    /// aborts the transaction attempt.
    Attempt(&'a Htm),
}

impl Region<'_> {
    /// Runs `body` here; its abort reason travels as the region's explicit
    /// abort code, since a hardware abort discards every store of the body.
    fn run<T>(self, footprint_lines: u32, mut body: impl FnMut() -> Result<T, AbortReason>) -> Result<T, AbortReason> {
        fn encode(reason: AbortReason) -> RegionAbort {
            RegionAbort::Explicit(reason.index() as u8)
        }
        fn decode(abort: ExplicitAbort) -> AbortReason {
            AbortReason::from_index(usize::from(abort.code)).unwrap_or(AbortReason::Region)
        }
        match self {
            Region::Software => body(),
            Region::Elide(htm) => htm.elide(footprint_lines, |_| body().map_err(encode)).map_err(decode),
            Region::Attempt(htm) => {
                htm.attempt_hardware(footprint_lines, |_| body().map_err(encode)).map_err(|abort| match abort {
                    AttemptAbort::Transient => AbortReason::Region,
                    AttemptAbort::Capacity => AbortReason::HtmCapacity,
                    AttemptAbort::Explicit(explicit) => decode(explicit),
                })
            }
        }
    }
}

/// Shared state of an OCC engine over DRAM records.
pub struct OccShared<L: CommitLog> {
    /// Failures of the background threads, owed to the caller.
    pub(crate) health: Arc<crate::background::BackgroundHealth>,
    /// The concurrency-control protocol's shared state.
    pub(crate) cc: Arc<Concurrency>,
    /// Tables by id.
    pub tables: Vec<Table>,
    /// Epochs.
    pub epochs: Arc<Epochs>,
    /// Durability policy.
    pub log: L,
    /// Reclamation queues of workers that went away.
    pub(crate) orphans: Mutex<RowReclaimer<Record>>,
    /// Rows unlinked by every worker's reclamation since open.
    pub(crate) rows_unlinked: std::sync::atomic::AtomicU64,
    /// The broken variants' window (`FaultWindow`): used only with a fault.
    pub(crate) faults: crate::fault::Faults,
    pub(crate) fault_window: Arc<crate::fault::FaultWindow>,
}

impl<L: CommitLog> Drop for OccShared<L> {
    fn drop(&mut self) {
        // No worker exists any more: nothing can hold a retired row.
        self.orphans.get_mut().free_all_quiescent();
    }
}

/// Reclamation may unlink a deleted row once the log policy says its
/// delete is durable and no lock of the protocol covers it.
struct LogReclaimPolicy<'a, L: CommitLog>(&'a L, &'a Concurrency);

impl<L: CommitLog> ReclaimPolicy<Record> for LogReclaimPolicy<'_, L> {
    fn may_unlink(&self, row: &Record, word: u64) -> bool {
        self.0.delete_is_durable(record::tid_of(word)) && self.1.may_unlink(row, record::tid_of(word))
    }
    fn unlinked(&self, table: &Table<Record>, row: &Record) {
        self.1.unlinked(table, row);
    }
}

/// A worker of an OCC engine over DRAM records.
pub struct OccWorker<L: CommitLog> {
    shared: Arc<OccShared<L>>,
    id: usize,
    log: L::Worker,
    tx: TxState<Record>,
    last_tid: u64,
    active: bool,
    retired: Vec<RetiredValue>,
    /// SP^3: the TIDs this transaction depends on, at most one per other
    /// worker (its newest), none already durable.
    dependencies: Vec<u64>,
    _fault_window: crate::fault::FaultWindowWorker,
}

impl<L: CommitLog> OccWorker<L> {
    /// Worker `id` over `shared`.
    pub fn new(shared: Arc<OccShared<L>>, id: usize) -> DbResult<Self> {
        assert!(id < shared.epochs.capacity(), "worker id {id} beyond the configured worker count");
        let log = shared.log.worker(id).map_err(|error| match error {
            DbError::OutOfSpace(reason) => DbError::OutOfSpace(format!("worker {id}: {reason}")),
            other => other,
        })?;
        let mut tx = TxState::new(&shared.cc, id);
        shared.orphans.lock().hand_over(&mut tx.reclaimer);
        let last_tid = shared.log.resume_tid(id);
        let _fault_window = shared.fault_window.register();
        Ok(Self {
            shared,
            id,
            log,
            tx,
            last_tid,
            active: false,
            retired: Vec::new(),
            dependencies: Vec::new(),
            _fault_window,
        })
    }

    /// The append of the `LogAfterInstall*` stages. The policy reserved the
    /// record in `prepare`; a failure here would leave installed versions
    /// without a log, which no policy may allow.
    fn append_after_install(&mut self, tid: u64) -> CommitTicket {
        match self.shared.log.append(&mut self.log, tid, &self.tx.writes) {
            Ok(ticket) => ticket,
            Err(error) => panic!("log append failed after install (the policy's prepare must prevent it): {error}"),
        }
    }

    /// SP^3's dependency tracking (Algorithm 1, step 2): the writer of
    /// every version read or overwritten, unless it is this worker (its own
    /// commits are durable in order) or already durable with its own
    /// dependencies. Only the newest TID per writer is kept: a worker's
    /// commits become durable in TID order.
    fn collect_dependencies(log: &L, own: usize, tx: &TxState<Record>, dependencies: &mut Vec<u64>) {
        dependencies.clear();
        let words = tx.read_words().chain(tx.writes.entries().iter().map(|entry| entry.locked_word));
        for word in words {
            let tid = record::tid_of(word);
            if tid == 0 || tid >= record::MAX_TID || crate::engine::sp3_writer_of(tid) == own {
                continue;
            }
            if log.dependency_durable(tid) {
                continue;
            }
            let writer = crate::engine::sp3_writer_of(tid);
            match dependencies.iter_mut().find(|known| crate::engine::sp3_writer_of(**known) == writer) {
                Some(known) => *known = (*known).max(tid),
                None => dependencies.push(tid),
            }
        }
    }

    fn commit_inner(&mut self) -> TxResult<CommitTicket> {
        // `occ`: validation and write phase in one critical section.
        let cc = Arc::clone(&self.shared.cc);
        let _serial = cc.serial_section();
        let shared = &*self.shared;
        let hybrid = cc.hybrid();
        let path = self.tx.path();
        // Where validation and install run: one hardware attempt for the
        // hybrid engines' hardware paths (their retry policy moves the whole
        // transaction from path to path), DBX's elided commit region, or
        // plain software.
        if hybrid.is_some() {
            Hybrid::check_entered(self.tx.path_state().expect("hybrid")).map_err(TxError::Abort)?;
        }
        let region = match hybrid {
            Some(hybrid) if path.is_hardware() => {
                hybrid.enter_hardware_commit(self.tx.path_state().expect("hybrid")).map_err(TxError::Abort)?;
                Region::Attempt(hybrid.htm().expect("hardware paths run only with an HTM"))
            }
            Some(_) => Region::Software,
            None => shared.log.commit_region().map_or(Region::Software, Region::Elide),
        };
        let footprint = self.tx.footprint_lines();
        if self.tx.is_read_only() {
            let tx = &self.tx;
            let validated = region.run(footprint, || if L::VALIDATES { tx.validate(&shared.tables) } else { Ok(()) });
            Self::note_region_abort(&mut self.tx, validated).map_err(TxError::Abort)?;
            if let Some(hybrid) = hybrid {
                hybrid.committed(path);
            }
            if L::TRACKS_DEPENDENCIES {
                Self::collect_dependencies(&shared.log, self.id, &self.tx, &mut self.dependencies);
                return Ok(self.shared.log.read_only_ticket_with_dependencies(&mut self.log, &self.dependencies));
            }
            return Ok(shared.log.read_only_ticket(self.tx.max_read_tid()));
        }
        // 0. Reserve the log record (may fail; nothing is locked yet).
        shared.log.prepare(&mut self.log, &self.tx.writes)?;
        let tid = match L::STAGE {
            CommitStage::LogAfterInstallParity | CommitStage::LogAfterUnlock => {
                // 1.-6. in the commit region: lock, validate, install,
                // unlock; the log follows outside it.
                let parity = match (L::STAGE, hybrid) {
                    (CommitStage::LogAfterInstallParity, Some(hybrid))
                        if hybrid.visible_before_log(path) || hybrid.unlocks_before_log() =>
                    {
                        0
                    }
                    (CommitStage::LogAfterInstallParity, _) => UNPERSISTED,
                    _ => 0,
                };
                let writeback = hybrid.filter(|_| path.writes_back());
                let (id, last_tid) = (self.id, self.last_tid);
                let (tx, retired, dependencies) = (&mut self.tx, &mut self.retired, &mut self.dependencies);
                let installed = region.run(footprint, || {
                    Self::validate_and_install(shared, tx, retired, dependencies, id, last_tid, parity, writeback)
                });
                let tid = Self::note_region_abort(&mut self.tx, installed).map_err(TxError::Abort)?;
                if hybrid.is_some_and(Hybrid::unlocks_before_log) {
                    self.tx.release_locks();
                }
                if hybrid.is_some_and(Hybrid::unlocks_before_log)
                    || (L::STAGE == CommitStage::LogAfterUnlock && shared.faults.ack_before_dependencies())
                {
                    // The broken variants' committer is held in its window
                    // (writes visible, log not yet written) until another
                    // worker finished, so readers commit on its writes.
                    let writes = &self.tx.writes;
                    shared.fault_window.hold(
                        || shared.log.is_closed(),
                        || writes.entries().iter().any(|entry| record::tid_of(entry.row().word()) != tid),
                    );
                }
                tid
            }
            CommitStage::LogBeforeInstall | CommitStage::LogAfterInstallLocked => {
                return self.commit_logging_under_locks();
            }
        };
        let ticket = if L::STAGE == CommitStage::LogAfterInstallParity {
            // DBXN's logging and commit phases: outside the region, the
            // record is written and made durable, then each written version
            // turns even (a later writer's version is never clobbered).
            let ticket = self.append_after_install(tid);
            for entry in self.tx.writes.entries() {
                entry.row().clear_unpersisted(tid);
            }
            ticket
        } else {
            // SP^3's persist and pending steps, with every lock released.
            match self.shared.log.append_with_dependencies(&mut self.log, tid, &self.tx.writes, &self.dependencies) {
                Ok(ticket) => ticket,
                Err(error) => panic!("log append failed after install (the policy's prepare must prevent it): {error}"),
            }
        };
        if let Some(hybrid) = hybrid {
            if path.writes_back() {
                // The STM write-back phase ends once its writes are durable.
                hybrid.end_writeback();
            }
            hybrid.committed(path);
        }
        if hybrid.is_some_and(Hybrid::unlocks_before_log) || self.shared.faults.ack_before_dependencies() {
            self.shared.fault_window.committed();
        }
        self.last_tid = tid;
        Ok(ticket)
    }

    /// Remembers a capacity abort of a hardware commit for the hybrid
    /// engines' path choice.
    fn note_region_abort<T>(tx: &mut TxState<Record>, result: Result<T, AbortReason>) -> Result<T, AbortReason> {
        if let (Err(AbortReason::HtmCapacity), Some(path)) = (&result, tx.path_state()) {
            path.capacity = true;
        }
        result
    }

    /// Steps 1.-6. of a commit whose log follows the install: lock the
    /// write set in address order, validate, pick the TID, install, and
    /// store the new version words (with `parity`), which unlocks. Returns
    /// the TID, or the abort reason with nothing left locked. The body of
    /// the commit region: it runs in a hardware transaction or in software,
    /// and starts `writeback`'s STM write-back phase before installing.
    #[allow(clippy::too_many_arguments)]
    fn validate_and_install(
        shared: &OccShared<L>,
        tx: &mut TxState<Record>,
        retired: &mut Vec<RetiredValue>,
        dependencies: &mut Vec<u64>,
        id: usize,
        last_tid: u64,
        parity: u64,
        writeback: Option<&Hybrid>,
    ) -> Result<u64, AbortReason> {
        let max_locked = tx.lock_writes()?;
        let epoch = shared.epochs.global();
        let tid = if L::VALIDATES {
            match tx.validate_and_stamp(&shared.tables, max_locked, last_tid, epoch) {
                Ok(tid) => tid,
                Err(reason) => {
                    tx.release(tx.writes.len());
                    return Err(reason);
                }
            }
        } else {
            // `nvm-ideal`: no read validation at all.
            tx.commit_tid(max_locked, last_tid, epoch)
        };
        let tid = shared.log.stamp_tid(tid, id);
        debug_assert!(record::epoch_of_tid(tid) >= epoch);
        if L::TRACKS_DEPENDENCIES {
            Self::collect_dependencies(&shared.log, id, tx, dependencies);
        }
        if let Some(hybrid) = writeback {
            hybrid.begin_writeback();
        }
        Self::install(shared, tx, retired, tid);
        for entry in tx.writes.entries() {
            let flags = if entry.is_delete() { ABSENT } else { 0 };
            entry.row().store_word(record::word_of(tid, flags | parity));
        }
        Ok(tid)
    }

    /// The commit of the stages that log with the write set locked
    /// (`LogBeforeInstall`, `LogAfterInstallLocked`): no commit region, since
    /// a flush inside one would abort every hardware attempt.
    fn commit_logging_under_locks(&mut self) -> TxResult<CommitTicket> {
        let shared = &*self.shared;
        // 1. Lock the write set in address order.
        let max_locked = self.tx.lock_writes().map_err(TxError::Abort)?;
        // 2. Serialization point.
        let epoch = shared.epochs.global();
        // 3.-4. Validate and pick the TID (one step: TicToc validates at the
        //    TID it picks).
        let tid = if L::VALIDATES {
            match self.tx.validate_and_stamp(&shared.tables, max_locked, self.last_tid, epoch) {
                Ok(tid) => tid,
                Err(reason) => {
                    self.tx.release(self.tx.writes.len());
                    return Err(TxError::Abort(reason));
                }
            }
        } else {
            self.tx.commit_tid(max_locked, self.last_tid, epoch)
        };
        let tid = shared.log.stamp_tid(tid, self.id);
        debug_assert!(record::epoch_of_tid(tid) >= epoch);
        debug_assert!(!L::TRACKS_DEPENDENCIES, "dependency tracking logs after unlocking");
        // 5. Log, where the policy's stage says, and 6. install and unlock.
        let mut ticket = None;
        if L::STAGE == CommitStage::LogBeforeInstall {
            match shared.log.append(&mut self.log, tid, &self.tx.writes) {
                Ok(done) => ticket = Some(done),
                Err(error) => {
                    self.tx.release(self.tx.writes.len());
                    return Err(TxError::Db(error));
                }
            }
        }
        Self::install(shared, &mut self.tx, &mut self.retired, tid);
        let mut failure = None;
        if L::STAGE == CommitStage::LogAfterInstallLocked {
            // Only a log on a file can fail here, and its policy poisoned
            // itself first (`CommitLog::prepare`): the versions stay
            // installed but no one can be told they are durable.
            match shared.log.append(&mut self.log, tid, &self.tx.writes) {
                Ok(done) => ticket = Some(done),
                Err(error) => failure = Some(error),
            }
        }
        for entry in self.tx.writes.entries() {
            let flags = if entry.is_delete() { ABSENT } else { 0 };
            entry.row().store_word(record::word_of(tid, flags));
        }
        self.last_tid = tid;
        if let Some(error) = failure {
            debug_assert!(shared.log.is_closed(), "a failed append after the install must poison the log");
            return Err(TxError::Db(error));
        }
        Ok(ticket.expect("both stages append"))
    }

    /// Installs every write in place (rows locked) and maintains the
    /// secondary indexes while the rows are still locked, so a secondary
    /// scan that misses an entry sees the leaf version change (a phantom)
    /// or meets the locked row; never a committed row it cannot find.
    fn install(shared: &OccShared<L>, tx: &mut TxState<Record>, retired: &mut Vec<RetiredValue>, tid: u64) {
        let mut old = Vec::new();
        let keeps_versions = tx.keeps_versions();
        for index in 0..tx.writes.len() {
            let entry = &tx.writes.entries()[index];
            // SAFETY: see `WriteEntry::row`; the reference does not borrow
            // the transaction state, which keeps the replaced version.
            let row: &Record = unsafe { &*(entry.row() as *const Record) };
            let locked_word = entry.locked_word;
            let has_secondaries = !shared.tables[entry.table.0 as usize].schema().secondaries.is_empty();
            let current = if (has_secondaries || keeps_versions) && locked_word & ABSENT == 0 {
                // Locked by us: the value is stable.
                row.read_locked(&mut old);
                Some(old.as_slice())
            } else {
                None
            };
            if has_secondaries {
                tx.maintain_secondaries(&shared.tables, index, current, tid);
            }
            tx.preserve_version(row, locked_word, current, tid);
            row.set_value_locked(tx.writes.value(index), &mut |value| retired.push(value));
            if L::VOLATILE_ROWS {
                // A delete (no value) writes the metadata word alone.
                let value = tx.writes.value(index).unwrap_or(&[]);
                shared.log.on_row_install(row, value, record::word_of(tid, 0));
            }
        }
    }

    /// Hands replaced value buffers to the reclaimer with one stamp, queues
    /// rows left absent, and reclaims what is due.
    fn after_attempt(&mut self) {
        let shared = &*self.shared;
        if !self.retired.is_empty() {
            let stamp = shared.epochs.stamp();
            for value in self.retired.drain(..) {
                self.tx.reclaimer.retired_values.push(stamp, value);
            }
        }
        self.tx.finish(shared.epochs.global(), &shared.tables);
        if self.tx.reclaimer.backlog() > 0 || !self.tx.reclaimer.retired_values.is_empty() {
            let before = self.tx.reclaimer.unlinked;
            self.tx.reclaimer.run(&shared.tables, &shared.epochs, &LogReclaimPolicy(&shared.log, &shared.cc));
            let unlinked = self.tx.reclaimer.unlinked - before;
            if unlinked > 0 {
                shared.rows_unlinked.fetch_add(unlinked, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

impl<L: CommitLog> EngineWorker for OccWorker<L> {
    fn begin(&mut self, _read_only: bool, attempt: u32) {
        // (Re-)announce, so a long-running worker does not hold back group
        // commit or reclamation with a stale epoch.
        self.shared.epochs.enter(self.id);
        self.active = true;
        self.tx.begin(attempt, self.shared.epochs.global());
    }

    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool> {
        with_store!(self, get(table, key, out))
    }

    fn get_with(&mut self, table: TableId, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> TxResult<bool> {
        with_store!(self, get_with(table, key, visit))
    }

    fn write(&mut self, table: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        with_store!(self, write(table, key, op))
    }

    fn prefetch(&mut self, table: TableId, key: &[u8]) {
        if let Some(table) = self.shared.tables.get(table.0 as usize) {
            table.prefetch(key, table.schema().max_value_len);
        }
    }

    fn update_with(&mut self, table: TableId, key: &[u8], modify: &mut dyn FnMut(&mut [u8])) -> TxResult<bool> {
        with_store!(self, update_with(table, key, modify))
    }

    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()> {
        with_store!(self, scan(request, visit))
    }

    fn commit(&mut self) -> TxResult<CommitTicket> {
        let result = self.commit_inner();
        self.after_attempt();
        result
    }

    fn abort(&mut self) {
        self.after_attempt();
    }

    fn idle(&mut self) {
        if self.active {
            self.shared.epochs.leave(self.id);
            self.active = false;
        }
    }

    fn wait_durable(&mut self, ticket: CommitTicket) -> DbResult<()> {
        // Going idle first: a waiting worker must not hold back the epoch it
        // waits for.
        self.idle();
        let mut spins = 0u32;
        while !self.shared.log.is_durable(ticket) {
            if self.shared.log.is_closed() {
                return Err(DbError::Closed);
            }
            if self.shared.health.has_panicked() {
                // The epoch thread may be the one that stopped: the ticket
                // might never become durable.
                return self.shared.health.take_error();
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        Ok(())
    }
}

impl<L: CommitLog> Drop for OccWorker<L> {
    fn drop(&mut self) {
        self.shared.epochs.leave(self.id);
        self.tx.reclaimer.hand_over(&mut self.shared.orphans.lock());
    }
}
