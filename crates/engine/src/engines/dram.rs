//! The DRAM engines' shell: tables of [`Record`]s, epochs, a background
//! ticker and checkpointer, the transaction state of [`crate::cc::transaction`]
//! (any protocol), and a
//! durability policy ([`EnginePolicy`]: none for `silo`, epoch group commit
//! for `group-commit`, DBXN's synchronous log for the DBXN family). One
//! engine = one composition of these; [`OccWorker`] runs transactions.
//!
//! Explained in ARCHITECTURE.md §5 (the DRAM storage and its shell); each
//! engine it runs has its page in docs/engines/.

use crate::cc::concurrency::Concurrency;
use crate::cc::protocols::commit_rule::{CommitRule, Validating};
use crate::cc::protocols::phytm::{Hybrid, TxPath};
use crate::cc::transaction::{RowStore, TxState};
use crate::durability::{CommitLog, CommitStage, EnginePolicy};
use crate::engine::{CommitTicket, Engine, EngineKind, EngineStats, EngineWorker, ScanRequest, WriteOp};
use crate::engines::pipeline::{self, CommitSteps, Region, TidFloor};
use crate::epoch::Epochs;
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::options::DbOptions;
use crate::schema::{TableId, TableSchema};
use crate::storage::record::{self, Record, RetiredValue, UNPERSISTED};
use crate::storage::table::{ReclaimPolicy, RowReclaimer, Table};
use parking_lot::Mutex;
use pmtx_pm::PmCounters;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// An OCC engine with policy `L` and commit rule `C`.
pub(crate) struct OccEngine<L: EnginePolicy, C: CommitRule = Validating> {
    /// The engine these options name (the policy serves several).
    kind: EngineKind,
    shared: Arc<OccShared<L>>,
    stop: Arc<AtomicBool>,
    ticker: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    background_pm: BackgroundCounters,
    /// The tables' schemas, by id.
    schemas: Vec<TableSchema>,
    _rule: PhantomData<C>,
}

impl<L: EnginePolicy> OccEngine<L> {
    /// The engine over `policy` whose commits validate (every engine's
    /// rule but the SP^3 family's).
    pub(crate) fn open(options: &DbOptions, policy: L) -> DbResult<Arc<Self>> {
        Self::open_with_rule(options, policy)
    }
}

impl<L: EnginePolicy, C: CommitRule> OccEngine<L, C> {
    /// The engine over `policy` with commit rule `C`.
    pub(crate) fn open_with_rule(options: &DbOptions, policy: L) -> DbResult<Arc<Self>> {
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
                    .with_hybrid(crate::engines::hybrid(options)?, options.workers)
                    .with_tinystm(
                        options.engine.entry().protocol == crate::engine_catalog::ProtocolPart::TinyStm,
                        options.workers,
                    )
                    .with_dvcc(
                        options.engine.entry().protocol == crate::engine_catalog::ProtocolPart::DualVersion,
                        options.workers,
                        &tables,
                    ),
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
            schemas: options.tables.clone(),
            _rule: PhantomData,
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

impl<L: EnginePolicy, C: CommitRule> Engine for OccEngine<L, C> {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn schemas(&self) -> &[TableSchema] {
        &self.schemas
    }

    fn dram_tables(&self) -> Option<&[Table]> {
        Some(&self.shared.tables)
    }

    fn worker(self: Arc<Self>, id: usize) -> DbResult<Box<dyn EngineWorker>> {
        Ok(Box::new(OccWorker::<L, C>::new(Arc::clone(&self.shared), id)?))
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        self.shared.log.is_durable(ticket)
    }

    fn stats(&self) -> EngineStats {
        let mut stats = self.shared.log.stats();
        stats.durable_epoch = self.shared.epochs.durable();
        stats.rows_indexed = self.shared.tables.iter().map(|table| table.indexed_rows() as u64).sum();
        stats.rows_unlinked = self.shared.rows_unlinked.load(Ordering::Relaxed);
        // The policy's own threads (mnemosyne's truncation) plus the shell's.
        stats.background_pm.add(&self.background_pm.lock());
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

impl<L: EnginePolicy, C: CommitRule> Drop for OccEngine<L, C> {
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
            $worker.state.tx.$method(&$worker.shared.tables, &VolatileRowStore(&$worker.shared.log), $($arg),*)
        } else {
            $worker.state.tx.$method(&$worker.shared.tables, &DramStore, $($arg),*)
        }
    };
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

/// A worker of an OCC engine over DRAM records: the shared state and the
/// worker's own, which runs the commit pipeline (`engines::pipeline`).
pub struct OccWorker<L: CommitLog, C: CommitRule = Validating> {
    shared: Arc<OccShared<L>>,
    state: DramWorker<L, C>,
}

/// What a worker of a DRAM engine keeps of its own; the commit pipeline's
/// steps over DRAM records ([`CommitSteps`]).
struct DramWorker<L: CommitLog, C: CommitRule> {
    id: usize,
    log: L::Worker,
    tx: TxState<Record>,
    last_tid: u64,
    active: bool,
    retired: Vec<RetiredValue>,
    /// The value a locked row held before its install (reused).
    old: Vec<u8>,
    /// SP^3: the TIDs this transaction depends on, at most one per other
    /// worker (its newest), none already durable.
    dependencies: Vec<u64>,
    /// The path of the committing attempt (the PHyTM family), read when
    /// its commit starts.
    path: TxPath,
    _fault_window: crate::fault::FaultWindowWorker,
    _rule: PhantomData<C>,
}

impl<L: CommitLog, C: CommitRule> OccWorker<L, C> {
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
        let state = DramWorker {
            id,
            log,
            tx,
            last_tid,
            active: false,
            retired: Vec::new(),
            old: Vec::new(),
            dependencies: Vec::new(),
            path: TxPath::Stm,
            _fault_window,
            _rule: PhantomData,
        };
        Ok(Self { shared, state })
    }

    /// Hands replaced value buffers to the reclaimer with one stamp, queues
    /// rows left absent, and reclaims what is due.
    fn after_attempt(&mut self) {
        let (shared, state) = (&*self.shared, &mut self.state);
        if !state.retired.is_empty() {
            let stamp = shared.epochs.stamp();
            for value in state.retired.drain(..) {
                state.tx.reclaimer.retired_values.push(stamp, value);
            }
        }
        state.tx.finish(shared.epochs.global(), &shared.tables);
        if state.tx.reclaimer.backlog() > 0 || !state.tx.reclaimer.retired_values.is_empty() {
            let before = state.tx.reclaimer.unlinked;
            state.tx.reclaimer.run(&shared.tables, &shared.epochs, &LogReclaimPolicy(&shared.log, &shared.cc));
            let unlinked = state.tx.reclaimer.unlinked - before;
            if unlinked > 0 {
                shared.rows_unlinked.fetch_add(unlinked, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

impl<L: CommitLog, C: CommitRule> DramWorker<L, C> {
    /// The hybrid engines' fault window: their broken variants (and SP^3's
    /// acknowledging one) hold the committer between unlock and log.
    fn holds_in_window(shared: &OccShared<L>) -> bool {
        shared.cc.hybrid().is_some_and(Hybrid::unlocks_before_log)
            || (L::STAGE == CommitStage::LogAfterUnlock && shared.faults.ack_before_dependencies())
    }
}

impl<L: CommitLog, C: CommitRule> CommitSteps for DramWorker<L, C> {
    type Row = Record;
    type Shared = OccShared<L>;
    type Held<'s> = ();
    type Rule = C;
    const STAGE: CommitStage = L::STAGE;

    #[inline]
    fn tx(&mut self) -> &mut TxState<Record> {
        &mut self.tx
    }

    #[inline]
    fn worker_id(&self) -> usize {
        self.id
    }

    #[inline]
    fn tables(shared: &OccShared<L>) -> &[Table] {
        &shared.tables
    }

    #[inline]
    fn concurrency(shared: &OccShared<L>) -> &Concurrency {
        &shared.cc
    }

    #[inline]
    fn global_epoch(shared: &OccShared<L>) -> u64 {
        shared.epochs.global()
    }

    /// One hardware attempt for the hybrid engines' hardware paths (their
    /// retry policy moves the whole transaction from path to path), DBX's
    /// elided commit region, or plain software.
    fn enter<'s>(&mut self, shared: &'s OccShared<L>) -> TxResult<Region<'s>> {
        let Some(hybrid) = shared.cc.hybrid() else {
            return Ok(shared.log.commit_region().map_or(Region::Software, Region::Elide));
        };
        let path = self.tx.path();
        self.path = path;
        let state = self.tx.path_state().expect("hybrid");
        Hybrid::check_entered(state).map_err(TxError::Abort)?;
        if path.is_hardware() {
            hybrid.enter_hardware_commit(state).map_err(TxError::Abort)?;
            return Ok(Region::Attempt(hybrid.htm().expect("hardware paths run only with an HTM")));
        }
        Ok(Region::Software)
    }

    /// Remembers a capacity abort of a hardware commit for the hybrid
    /// engines' path choice.
    fn region_result<T>(&mut self, result: &Result<T, AbortReason>) {
        if let (Err(AbortReason::HtmCapacity), Some(path)) = (result, self.tx.path_state()) {
            path.capacity = true;
        }
    }

    #[inline]
    fn collect_dependencies(&mut self, shared: &OccShared<L>) {
        C::collect_dependencies(&self.tx, self.id, |tid| shared.log.dependency_durable(tid), &mut self.dependencies);
    }

    fn read_only_ticket(&mut self, shared: &OccShared<L>) -> CommitTicket {
        if let Some(hybrid) = shared.cc.hybrid() {
            hybrid.committed(self.path);
        }
        if C::TRACKS_DEPENDENCIES {
            return shared.log.read_only_ticket_with_dependencies(&mut self.log, &self.dependencies);
        }
        shared.log.read_only_ticket(self.tx.max_read_tid())
    }

    /// Reserves the log record (may fail; nothing is locked yet).
    #[inline]
    fn prepare(&mut self, shared: &OccShared<L>) -> TxResult<()> {
        shared.log.prepare(&mut self.log, &self.tx.writes).map_err(TxError::Db)
    }

    #[inline]
    fn tid_floor(&self, _held: &()) -> TidFloor {
        TidFloor::Above(self.last_tid)
    }

    #[inline]
    fn persist_before_install(
        &mut self,
        shared: &OccShared<L>,
        _held: &mut (),
        tid: u64,
    ) -> DbResult<Option<CommitTicket>> {
        if L::STAGE == CommitStage::LogBeforeInstall {
            return shared.log.append(&mut self.log, tid, &self.tx.writes).map(Some);
        }
        Ok(None)
    }

    /// The STM write-back phase of a hybrid engine's software path starts
    /// before its first install.
    #[inline]
    fn begin_install(&mut self, shared: &OccShared<L>) {
        if let Some(hybrid) = shared.cc.hybrid() {
            if self.path.writes_back() {
                hybrid.begin_writeback();
            }
        }
    }

    /// Installs write `index` in place (row locked), with the secondary
    /// indexes and the protocol's older version.
    #[inline]
    fn install(&mut self, shared: &OccShared<L>, _held: &mut (), index: usize, tid: u64) {
        let entry = &self.tx.writes.entries()[index];
        // SAFETY: see `WriteEntry::row`; the reference does not borrow
        // the transaction state, which keeps the replaced version.
        let row: &Record = unsafe { &*(entry.row() as *const Record) };
        if pipeline::needs_current(&self.tx, &shared.tables, index, C::VALIDATES) {
            // Locked by us: the value is stable.
            row.read_locked(&mut self.old);
            pipeline::install_bookkeeping(&mut self.tx, &shared.tables, index, row, Some(&self.old), tid);
        } else {
            pipeline::install_bookkeeping(&mut self.tx, &shared.tables, index, row, None, tid);
        }
        let retired = &mut self.retired;
        row.set_value_locked(self.tx.writes.value(index), &mut |value| retired.push(value));
        if L::VOLATILE_ROWS {
            let table = self.tx.writes.entries()[index].table;
            shared.log.on_row_install(&mut self.log, table, row, self.tx.writes.value(index), record::word_of(tid, 0));
        }
    }

    /// Only a log on a file can fail here, and its policy poisoned itself
    /// first (`CommitLog::prepare`): the versions stay installed but no
    /// one can be told they are durable.
    #[inline]
    fn log_while_locked(&mut self, shared: &OccShared<L>, _held: &mut (), tid: u64) -> DbResult<Option<CommitTicket>> {
        let appended = shared.log.append(&mut self.log, tid, &self.tx.writes);
        debug_assert!(
            appended.is_ok() || shared.log.is_closed(),
            "a failed append after the install must poison the log"
        );
        appended.map(Some)
    }

    /// DBXN's parity: a version installed before its log is durable stays
    /// odd until the log is (not on the hybrid paths that make it visible
    /// or unlock before their log).
    #[inline]
    fn unlock_flags(&self, shared: &OccShared<L>) -> u64 {
        if L::STAGE != CommitStage::LogAfterInstallParity {
            return 0;
        }
        match shared.cc.hybrid() {
            Some(hybrid) if hybrid.visible_before_log(self.path) || hybrid.unlocks_before_log() => 0,
            _ => UNPERSISTED,
        }
    }

    fn after_unlock(&mut self, shared: &OccShared<L>, _held: &mut (), tid: u64) -> CommitTicket {
        if shared.cc.hybrid().is_some_and(Hybrid::unlocks_before_log) {
            self.tx.release_locks();
        }
        if Self::holds_in_window(shared) {
            // The broken variants' committer is held in its window
            // (writes visible, log not yet written) until another worker
            // finished, so readers commit on its writes.
            let writes = &self.tx.writes;
            shared.fault_window.hold(
                || shared.log.is_closed(),
                || writes.entries().iter().any(|entry| record::tid_of(entry.row().word()) != tid),
            );
        }
        let appended = if L::STAGE == CommitStage::LogAfterInstallParity {
            // DBXN's logging and commit phases: outside the region, the
            // record is written and made durable, then each written
            // version turns even (a later writer's version is never
            // clobbered).
            shared.log.append(&mut self.log, tid, &self.tx.writes).inspect(|_| {
                for entry in self.tx.writes.entries() {
                    entry.row().clear_unpersisted(tid);
                }
            })
        } else {
            // SP^3's persist and pending steps, with every lock released.
            shared.log.append_with_dependencies(&mut self.log, tid, &self.tx.writes, &self.dependencies)
        };
        let ticket = match appended {
            Ok(ticket) => ticket,
            Err(error) => panic!("log append failed after install (the policy's prepare must prevent it): {error}"),
        };
        if let Some(hybrid) = shared.cc.hybrid() {
            if self.path.writes_back() {
                // The STM write-back phase ends once its writes are durable.
                hybrid.end_writeback();
            }
            hybrid.committed(self.path);
        }
        if Self::holds_in_window(shared) {
            shared.fault_window.committed();
        }
        ticket
    }

    #[inline]
    fn finish(
        &mut self,
        shared: &OccShared<L>,
        _held: (),
        tid: u64,
        ticket: Option<CommitTicket>,
    ) -> TxResult<CommitTicket> {
        self.last_tid = tid;
        if L::WRITES_BACK_AFTER_UNLOCK && ticket.is_some() {
            // Pisces' third stage: durable and visible, now in place.
            for entry in self.tx.writes.entries() {
                shared.log.write_back(&mut self.log, entry.table, entry.row(), tid);
            }
        }
        // Every stage's log gives the ticket, except a log on a file whose
        // append failed after the install (`log_while_locked`): the
        // pipeline returns that error, not this one.
        ticket.ok_or(TxError::Db(DbError::Closed))
    }
}

impl<L: CommitLog, C: CommitRule> EngineWorker for OccWorker<L, C> {
    fn begin(&mut self, _read_only: bool, attempt: u32) {
        // (Re-)announce, so a long-running worker does not hold back group
        // commit or reclamation with a stale epoch.
        self.shared.epochs.enter(self.state.id);
        self.state.active = true;
        self.state.tx.begin(attempt, self.shared.epochs.global());
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

    fn prefetch(&mut self, table_id: TableId, key: &[u8]) {
        let Some(table) = self.shared.tables.get(table_id.0 as usize) else { return };
        // A record keeps its value inline: the row's lines are all.
        if let Some(row) = table.prefetch_row(key, table.schema().max_value_len) {
            if self.state.active {
                // The access that follows takes the row from the hints.
                self.state.tx.note_hint(table_id, row);
            }
        }
    }

    fn update_with(&mut self, table: TableId, key: &[u8], modify: &mut dyn FnMut(&mut [u8])) -> TxResult<bool> {
        with_store!(self, update_with(table, key, modify))
    }

    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()> {
        with_store!(self, scan(request, visit))
    }

    fn commit(&mut self) -> TxResult<CommitTicket> {
        let result = pipeline::commit(&*self.shared, &mut self.state);
        self.after_attempt();
        result
    }

    fn abort(&mut self) {
        self.after_attempt();
    }

    fn idle(&mut self) {
        if self.state.active {
            self.shared.epochs.leave(self.state.id);
            self.state.active = false;
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

impl<L: CommitLog, C: CommitRule> Drop for OccWorker<L, C> {
    fn drop(&mut self) {
        self.shared.epochs.leave(self.state.id);
        self.state.tx.reclaimer.hand_over(&mut self.shared.orphans.lock());
    }
}
