//! The OCC engine shell: tables, epochs, a background ticker, and a
//! [`CommitLog`] policy (none for `silo`, epoch group commit for
//! `group-commit`, synchronous logs for the DBXN family in `dbxn.rs`).

use crate::db::DbOptions;
use crate::engine::{CommitTicket, Engine, EngineKind, EngineStats, EngineWorker};
use crate::epoch::Epochs;
use crate::error::DbResult;
use crate::occ::{CommitLog, OccShared, OccWorker, WriteSet};
use crate::record::Record;
use crate::schema::TableId;
use crate::table::Table;
use parking_lot::Mutex;
use pmtx_pm::PmCounters;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The commit-log policy of an engine, plus what it does on each epoch tick
/// and at close.
pub(crate) trait EnginePolicy: CommitLog {
    /// Which engine this policy makes.
    fn kind(&self) -> EngineKind;
    /// Loads durable state into `tables` (recovery) and raises `epochs`
    /// above every recovered TID.
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()>;
    /// Runs once per epoch on the background thread after the epoch advanced.
    fn on_epoch(&self);
    /// Takes a checkpoint of `tables`.
    fn checkpoint(&self, tables: &[Table]) -> DbResult<()>;
    /// Whether the log has used so much of the pool that the checkpointer
    /// should not wait for its interval (a checkpoint frees the log).
    fn log_space_low(&self) -> bool {
        false
    }
    /// Final work at close (`clean`: make everything durable, checkpoint and
    /// mark a clean shutdown).
    fn close(&self, tables: &[Table], clean: bool) -> DbResult<()>;
    /// Statistics.
    fn stats(&self) -> EngineStats;
}

/// No durability: the `silo` engine.
pub(crate) struct NoLog;

impl CommitLog for NoLog {
    type Worker = ();
    fn worker(&self, _id: usize) -> DbResult<()> {
        Ok(())
    }
    fn append(&self, _worker: &mut (), _tid: u64, _writes: &WriteSet<Record>) -> DbResult<CommitTicket> {
        Ok(CommitTicket::Durable)
    }
    fn read_only_ticket(&self, _max_tid: u64) -> CommitTicket {
        CommitTicket::Durable
    }
    fn is_durable(&self, _ticket: CommitTicket) -> bool {
        true
    }
}

impl EnginePolicy for NoLog {
    fn kind(&self) -> EngineKind {
        EngineKind::Silo
    }
    fn recover(&self, _tables: &[Table], _epochs: &Arc<Epochs>) -> DbResult<()> {
        Ok(())
    }
    fn on_epoch(&self) {}
    fn checkpoint(&self, _tables: &[Table]) -> DbResult<()> {
        Ok(())
    }
    fn close(&self, _tables: &[Table], _clean: bool) -> DbResult<()> {
        Ok(())
    }
    fn stats(&self) -> EngineStats {
        EngineStats::default()
    }
}

/// An OCC engine with policy `L`.
pub(crate) struct OccEngine<L: EnginePolicy> {
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
        policy.recover(&tables, &epochs)?;
        let shared = Arc::new(OccShared {
            tables,
            epochs,
            log: policy,
            orphans: Default::default(),
            rows_unlinked: Default::default(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let background_pm = BackgroundCounters::default();
        let ticker = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            let interval = options.epoch_interval;
            let counters = Arc::clone(&background_pm);
            std::thread::Builder::new()
                .name("pmtx-epoch".into())
                .spawn(move || ticker_loop(shared, stop, interval, counters))
                .map_err(|e| crate::error::DbError::InvalidConfig(format!("cannot start epoch thread: {e}")))?
        };
        let checkpointer = match options.checkpoint_interval {
            Some(interval) => {
                let shared = Arc::clone(&shared);
                let stop = Arc::clone(&stop);
                let counters = Arc::clone(&background_pm);
                Some(
                    std::thread::Builder::new()
                        .name("pmtx-checkpoint".into())
                        .spawn(move || checkpoint_loop(shared, stop, interval, counters))
                        .map_err(|e| {
                            crate::error::DbError::InvalidConfig(format!("cannot start checkpoint thread: {e}"))
                        })?,
                )
            }
            None => None,
        };
        Ok(Arc::new(Self {
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
        if let Some(handle) = self.checkpointer.lock().take() {
            let _ = handle.join();
        }
        if let Some(handle) = self.ticker.lock().take() {
            let _ = handle.join();
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
) {
    let step = Duration::from_millis(10).min(interval);
    // A checkpoint forced by log-space pressure waits at least this long
    // after the previous one ended, so a pool that the data itself fills
    // does not checkpoint back to back.
    let pressure_gap = Duration::from_millis(100).min(interval);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(step);
        waited += step;
        if waited >= interval || (waited >= pressure_gap && shared.log.log_space_low()) {
            waited = Duration::ZERO;
            counted(&counters, || {
                if let Err(error) = shared.log.checkpoint(&shared.tables) {
                    eprintln!("pmtx: periodic checkpoint failed: {error}");
                }
            });
        }
    }
}

impl<L: EnginePolicy> Engine for OccEngine<L> {
    fn kind(&self) -> EngineKind {
        self.shared.log.kind()
    }

    fn tables(&self) -> &[Table] {
        &self.shared.tables
    }

    fn worker(self: Arc<Self>, id: usize) -> Box<dyn EngineWorker> {
        match OccWorker::new(Arc::clone(&self.shared), id) {
            Ok(worker) => Box::new(worker),
            Err(error) => panic!("cannot create worker {id}: {error}"),
        }
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
        stats
    }

    fn checkpoint(&self) -> DbResult<()> {
        self.shared.log.checkpoint(&self.shared.tables)
    }

    fn close(&self) -> DbResult<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_ticker();
        self.shared.log.close(&self.shared.tables, true)
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
