//! One (engine, threads) run: fresh pool and database, load, warm-up,
//! measured phase, acknowledgements, consistency check, close.
//!
//! Measurement rules:
//!
//! * A transaction belongs to the measured phase when its worker started it
//!   after seeing the phase begin; its durable acknowledgement may arrive
//!   later (the driver waits for all of them before stopping the clock of
//!   the run, but divides by the measured phase's wall time). Commits of
//!   warm-up transactions acknowledged during the measured phase are
//!   skipped: acknowledgements come in commit order, so a worker skips as
//!   many as it had pending when the phase began.
//! * Only acknowledged commits count as committed; latency is from the start
//!   of the first attempt to the durable acknowledgement.
//! * PM counters are per thread: each worker resets its own at the start of
//!   the measured phase and reads them at the end; the work of the engine's
//!   background threads (epoch ticker, checkpointer) in the measured phase
//!   is added.
//!
//! With `--route-by-partition` ([`super::route`]) a transaction is
//! measured on the worker that runs it, by the same rule (its start after
//! the phase began); once the phase ends, each worker waits for its
//! acknowledgements and reports, then runs, unmeasured, what is still
//! queued for it until no worker draws any more.
//!
//! With `--recover` (durable engines), the measured phase ends the same way
//! (each worker waits for its acknowledgements and reports), but then the
//! workers keep running unmeasured transactions for [`CRASH_AFTER`] and the
//! database is abandoned under them with [`Database::crash`] (no clean
//! shutdown, commits not yet durable are never acknowledged). Once the
//! workers are gone the pool is reopened with the same engine and options;
//! the reopen is timed, and the consistency check runs on the recovered
//! database instead of before the crash.

use super::cpu::{self, MachineCpu};
use super::report::{
    EngineStatsJson, HtmJson, LatencyJson, LogFileJson, NvmAccessJson, PmJson, RecoveryJson, RoutingJson,
    RoutingWorkerJson, RunJson, TypeJson,
};
use super::route::{Router, QUEUE_CAPACITY};
use super::spec::EngineSpec;
use crate::progress::Progress;
use crate::CliError;
use hdrhistogram::Histogram;
use pmtx_engine::{AbortReason, Database, DbError, DbOptions, Worker};
use pmtx_pm::{
    layout, reset_thread_counters, thread_counters, BackendInfo, BackendKind, Direct, Emulated, PmBackend, PmCounters,
    PmOptions, Pool, Sim,
};
use pmtx_workloads::{PlannedTxn, TxnSummary, Workload, WorkloadError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Largest latency the histograms hold (100 s); larger values are clamped.
const MAX_LATENCY_NS: u64 = 100_000_000_000;

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;
/// `--recover`: the measured phase is over, keep running until the crash.
const PHASE_AFTER: u8 = 3;

/// `--recover`: how long the workers keep running after the measured phase
/// before the database is crashed under them (several group-commit epochs).
pub const CRASH_AFTER: Duration = Duration::from_millis(250);

/// Everything a run needs besides the workload.
pub struct RunSpec<'a> {
    /// Engine and its options.
    pub engine: &'a EngineSpec,
    /// Worker threads.
    pub threads: usize,
    /// Measured phase.
    pub duration: Duration,
    /// Warm-up phase.
    pub warmup: Duration,
    /// Backend.
    pub backend: BackendKind,
    /// PM options.
    pub pm: &'a PmOptions,
    /// Pool file for this run.
    pub pool_path: PathBuf,
    /// Whether to keep the pool file afterwards.
    pub keep_pool: bool,
    /// Pool size.
    pub pool_size: u64,
    /// Epoch length.
    pub epoch_interval: Duration,
    /// Checkpoint interval.
    pub checkpoint_interval: Option<Duration>,
    /// Free chunks populated ahead of the allocator.
    pub prefault_chunks: u64,
    /// Client seed.
    pub seed: u64,
    /// Source revision.
    pub git_revision: &'a str,
    /// Run number (1-based) and total, for the progress line.
    pub position: (usize, usize),
    /// Crash after the measured phase and time the recovery.
    pub recover: bool,
    /// Populate the pool chunks the measured phase is expected to allocate
    /// before it starts (`--provision`).
    pub provision: bool,
    /// Route each transaction through `Database::assign_transaction`
    /// (`--route-by-partition`, [`super::route`]).
    pub route_by_partition: bool,
    /// `--transactions`: phases counted per worker instead of timed
    /// (`duration` and `warmup` are then unused).
    pub counted: Option<Counted>,
}

/// `--transactions N --warmup-transactions W`: each worker runs exactly
/// `warmup` unmeasured, then `measured` measured transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Unmeasured transactions per worker before the measured phase.
    pub warmup: u64,
    /// Measured transactions per worker.
    pub measured: u64,
}

impl RunSpec<'_> {
    /// Whether the run has a warm-up phase.
    fn has_warmup(&self) -> bool {
        match self.counted {
            Some(counted) => counted.warmup > 0,
            None => !self.warmup.is_zero(),
        }
    }
}

/// Converts engine errors: bad configuration is a usage error (exit 2).
pub fn db_error(error: DbError) -> CliError {
    match error {
        DbError::InvalidConfig(_) => CliError::usage(error.to_string()),
        DbError::Pool(pmtx_pm::PoolError::InvalidOption(_)) => CliError::usage(error.to_string()),
        other => CliError::runtime(other.to_string()),
    }
}

/// Converts workload errors: a bad option is a usage error (exit 2).
pub fn workload_error(error: WorkloadError) -> CliError {
    match error {
        WorkloadError::InvalidOption(_) => CliError::usage(error.to_string()),
        WorkloadError::Db(error) => db_error(error),
        other => CliError::runtime(other.to_string()),
    }
}

/// Deletes a temporary pool file (and the directory of its redo log files,
/// for an engine that keeps its log in files) when the run ends, however it
/// ends.
pub struct PoolFileGuard {
    path: Option<PathBuf>,
    log_directory: Option<PathBuf>,
}

impl Drop for PoolFileGuard {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
        if let Some(directory) = self.log_directory.take() {
            let _ = remove_stale_log_directory(&directory);
        }
    }
}

/// Removes the redo log directory of an earlier run (a pool file's
/// `<pool>.log`) so the run starts fresh; refuses to delete a directory
/// holding anything but a pmtx log (`pool-id` and `*.seg` files).
pub fn remove_stale_log_directory(path: &Path) -> Result<(), CliError> {
    let Some(files) = stale_log_files(path)? else {
        return Ok(());
    };
    for file in files {
        std::fs::remove_file(&file)
            .map_err(|error| CliError::runtime(format!("{}: cannot remove: {error}", file.display())))?;
    }
    std::fs::remove_dir(path).map_err(|error| CliError::runtime(format!("{}: cannot remove: {error}", path.display())))
}

/// The files of the redo log directory `path` (`None`: no directory), or
/// an error when it holds anything but a pmtx log.
fn stale_log_files(path: &Path) -> Result<Option<Vec<PathBuf>>, CliError> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(CliError::runtime(format!("{}: {error}", path.display()))),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| CliError::runtime(format!("{}: {error}", path.display())))?;
        let name = entry.file_name();
        let is_log_file = name
            .to_str()
            .is_some_and(|name| name == pmtx_engine::internals::pool_layout::POOL_ID_FILE || name.ends_with(".seg"));
        if !is_log_file || !entry.file_type().is_ok_and(|kind| kind.is_file()) {
            return Err(CliError::runtime(format!(
                "{}: holds {:?}, which is not a pmtx redo log file; refusing to remove it (choose another --pool path)",
                path.display(),
                name
            )));
        }
        files.push(entry.path());
    }
    Ok(Some(files))
}

/// Removes a pool file left by an earlier run so the run starts fresh;
/// refuses to delete anything that is not a pmtx pool.
pub fn remove_stale_pool(path: &Path) -> Result<(), CliError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(CliError::runtime(format!("{}: {error}", path.display()))),
    };
    if !metadata.is_file() {
        return Err(CliError::runtime(format!("{}: exists and is not a regular file", path.display())));
    }
    let mut magic = [0u8; 8];
    let is_pool = metadata.len() == 0
        || std::fs::File::open(path)
            .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
            .is_ok_and(|()| magic == layout::MAGIC);
    if !is_pool {
        return Err(CliError::runtime(format!(
            "{}: exists and is not a pmtx pool; refusing to replace it (choose another --pool path)",
            path.display()
        )));
    }
    if let Err(pmtx_pm::PoolError::Locked(_)) = pmtx_pm::Mapping::open_file(path) {
        return Err(CliError::runtime(format!("{}: pool is open in another process", path.display())));
    }
    std::fs::remove_file(path).map_err(|error| CliError::runtime(format!("{}: cannot remove: {error}", path.display())))
}

/// Space of a pool: bytes held by allocated chunks, and its size.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolUsage {
    /// Bytes of allocated chunks.
    pub used_bytes: u64,
    /// Pool size.
    pub size_bytes: u64,
}

/// A run's pool while the database holds it. It does not keep the pool
/// open: once the pool is gone, every call answers `None`.
pub trait PoolProbe: Send + Sync {
    /// The pool's space.
    fn usage(&self) -> Option<PoolUsage>;
    /// Makes sure the `chunks` lowest free chunks are populated
    /// ([`Pool::populate_free_chunks`]); the chunks it had to populate.
    fn populate_free_chunks(&self, chunks: u64) -> Option<Result<u64, pmtx_pm::PoolError>>;
    /// The pool's chunk size.
    fn chunk_size(&self) -> u64;
}

struct WeakPool<B: PmBackend> {
    pool: Weak<Pool<B>>,
    chunk_size: u64,
}

impl<B: PmBackend> PoolProbe for WeakPool<B> {
    fn usage(&self) -> Option<PoolUsage> {
        self.pool.upgrade().map(|pool| {
            let geometry = pool.geometry();
            PoolUsage {
                used_bytes: (geometry.chunk_count - pool.free_chunks()) * geometry.chunk_size,
                size_bytes: geometry.size,
            }
        })
    }

    fn populate_free_chunks(&self, chunks: u64) -> Option<Result<u64, pmtx_pm::PoolError>> {
        self.pool.upgrade().map(|pool| pool.populate_free_chunks(chunks))
    }

    fn chunk_size(&self) -> u64 {
        self.chunk_size
    }
}

fn probe<B: PmBackend>(pool: &Arc<Pool<B>>) -> Box<dyn PoolProbe> {
    Box::new(WeakPool { pool: Arc::downgrade(pool), chunk_size: pool.geometry().chunk_size })
}

fn create_and_open<B: PmBackend>(
    options: DbOptions,
    path: &Path,
    size: u64,
) -> Result<(Database, BackendInfo, Box<dyn PoolProbe>), CliError> {
    let pool = Arc::new(Pool::<B>::create(path, size, options.chunk_size, &options.pm).map_err(CliError::from)?);
    let info = pool.info().backend;
    let probe = probe(&pool);
    let database = Database::open_on_pool(options, pool).map_err(db_error)?;
    Ok((database, info, probe))
}

/// Opens the existing pool at `path` and the database over it (recovery).
fn reopen<B: PmBackend>(options: DbOptions, path: &Path) -> Result<(Database, Box<dyn PoolProbe>), CliError> {
    let pool = Arc::new(Pool::<B>::open(path, &options.pm).map_err(CliError::from)?);
    let probe = probe(&pool);
    let database = Database::open_on_pool(options, pool).map_err(db_error)?;
    Ok((database, probe))
}

/// One worker thread's measured results.
struct ThreadResult {
    /// Per type: (acknowledged commits, rollbacks, aborted attempts that
    /// were retried, latency histogram).
    per_type: Vec<(u64, u64, u64, Histogram<u64>)>,
    total: Histogram<u64>,
    committed: u64,
    rolled_back: u64,
    gave_up: u64,
    aborts: [u64; AbortReason::ALL.len()],
    pm: PmCounters,
    /// Tuples the measured committed transactions read and wrote.
    tuples: (u64, u64),
    /// The worker's thread CPU clock when its measured phase began, and
    /// the CPU time it used in the phase (None: no thread clock).
    cpu_at_start: Option<Duration>,
    cpu: Option<Duration>,
    /// `--route-by-partition`: this worker's routing counts (whole run).
    routing: Routing,
}

/// One worker's routing counts (`--route-by-partition`).
#[derive(Default)]
struct Routing {
    worker: RoutingWorkerJson,
    /// Transactions the engine assigned a worker to.
    assigned: u64,
    /// Assigned elsewhere, but that worker's queue was full.
    queue_full: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

impl ThreadResult {
    fn new(types: usize) -> Self {
        Self {
            per_type: (0..types).map(|_| (0, 0, 0, histogram())).collect(),
            total: histogram(),
            committed: 0,
            rolled_back: 0,
            gave_up: 0,
            aborts: [0; AbortReason::ALL.len()],
            pm: PmCounters::default(),
            tuples: (0, 0),
            cpu_at_start: None,
            cpu: Some(Duration::ZERO),
            routing: Routing::default(),
        }
    }

    fn acknowledge(&mut self, tag: u32, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.committed += 1;
        self.total.saturating_record(ns);
        if let Some((committed, _, _, histogram)) = self.per_type.get_mut(tag as usize) {
            *committed += 1;
            histogram.saturating_record(ns);
        }
    }

    fn merge(&mut self, other: &ThreadResult) {
        for ((c, r, a, h), (oc, or, oa, oh)) in self.per_type.iter_mut().zip(&other.per_type) {
            *c += oc;
            *r += or;
            *a += oa;
            h.add(oh).expect("same bounds");
        }
        self.total.add(&other.total).expect("same bounds");
        self.committed += other.committed;
        self.rolled_back += other.rolled_back;
        self.gave_up += other.gave_up;
        for (sum, value) in self.aborts.iter_mut().zip(other.aborts) {
            *sum += value;
        }
        self.pm.add(&other.pm);
        self.tuples.0 += other.tuples.0;
        self.tuples.1 += other.tuples.1;
        self.cpu = self.cpu.zip(other.cpu).map(|(sum, cpu)| sum + cpu);
    }
}

/// The state the workers and the timer share.
struct Control {
    /// Workers that are ready to start.
    ready: AtomicUsize,
    /// Set once every worker is ready: the run begins.
    started: AtomicBool,
    phase: AtomicU8,
    failed: AtomicBool,
    /// `--recover`: workers that reported their measured results.
    reported: AtomicUsize,
    /// `--recover`: the database is being crashed; errors are expected.
    crashed: AtomicBool,
    /// `--transactions`: workers done with their warm-up transactions.
    warmed: AtomicUsize,
    /// `--transactions`: measured transactions run so far, all workers
    /// (updated every [`COUNTED_PROGRESS_STEP`], for the progress line).
    measured_so_far: AtomicU64,
}

/// How many measured transactions a worker runs between updates of
/// [`Control::measured_so_far`].
const COUNTED_PROGRESS_STEP: u64 = 256;

/// Waits for the worker's outstanding acknowledgements and closes its
/// measured results.
fn finish_measurement(worker: &mut Worker, result: &mut ThreadResult, skip: &mut usize, measuring: bool) {
    // The phase's CPU time, not the wait for its acknowledgements.
    if measuring {
        result.cpu = result.cpu_at_start.zip(cpu::thread_cpu_time()).map(|(start, now)| now.saturating_sub(start));
    }
    // A crashed database (`--recover`) acknowledges no more; what was
    // acknowledged before counts.
    let _closed = worker.wait_all_acknowledged(|tag, latency| {
        if *skip > 0 {
            *skip -= 1;
        } else if measuring {
            result.acknowledge(tag, latency);
        }
    });
    if measuring {
        result.pm = thread_counters();
        result.aborts = worker.stats().aborts;
        result.tuples = (worker.stats().tuples_read, worker.stats().tuples_written);
    }
}

/// What a worker does next.
enum Flow {
    Continue,
    /// The database was crashed under it (`--recover`): stop.
    Stop,
}

/// The state of one worker's measurement.
struct Measuring<'a> {
    result: &'a mut ThreadResult,
    measuring: bool,
    /// Warm-up commits still waiting for their acknowledgement when the
    /// measured phase began: the first this many acknowledgements are
    /// skipped.
    skip: usize,
    /// Transactions run in the current phase (warm-up or measured).
    ran: u64,
}

impl Measuring<'_> {
    /// Runs one transaction with `run` and counts it (and the
    /// acknowledgements that arrived meanwhile).
    fn run(
        &mut self,
        worker: &mut Worker,
        control: &Control,
        run: impl FnOnce(&mut Worker) -> Result<TxnSummary, DbError>,
    ) -> Result<Flow, DbError> {
        if self.measuring {
            measured_transaction(self, worker, control, run)
        } else {
            self.run_and_count(worker, control, run)
        }
    }

    fn run_and_count(
        &mut self,
        worker: &mut Worker,
        control: &Control,
        run: impl FnOnce(&mut Worker) -> Result<TxnSummary, DbError>,
    ) -> Result<Flow, DbError> {
        let aborts_before = worker.stats().total_aborts();
        let result = &mut *self.result;
        result.routing.worker.executed += 1;
        self.ran += 1;
        match run(worker) {
            Ok(summary) => {
                if self.measuring {
                    let aborted = worker.stats().total_aborts().saturating_sub(aborts_before);
                    if let Some((_, rolled_back, aborts, _)) = result.per_type.get_mut(summary.type_index) {
                        *aborts += aborted;
                        if !summary.committed {
                            *rolled_back += 1;
                        }
                    }
                    if !summary.committed {
                        result.rolled_back += 1;
                    }
                }
            }
            Err(DbError::TooManyAborts { .. }) => {
                if self.measuring {
                    result.gave_up += 1;
                }
            }
            // After the crash the engine refuses commits: expected.
            Err(_) if control.crashed.load(Ordering::Acquire) => return Ok(Flow::Stop),
            Err(error) => {
                control.failed.store(true, Ordering::Relaxed);
                return Err(error);
            }
        }
        let (skip, measuring) = (&mut self.skip, self.measuring);
        worker.drain_acknowledged(|tag, latency| {
            if *skip > 0 {
                *skip -= 1;
            } else if measuring {
                result.acknowledge(tag, latency);
            }
        });
        Ok(Flow::Continue)
    }
}

/// One measured transaction: a function of its own, never inlined, so that
/// an instruction counter can collect exactly the measured transactions
/// (`callgrind --toggle-collect='*measured_transaction*'`, as
/// `scripts/count-instructions` does): the client's generation and check,
/// the engine's work on the worker's thread, and the acknowledgements
/// drained after it.
#[inline(never)]
fn measured_transaction(
    measuring: &mut Measuring<'_>,
    worker: &mut Worker,
    control: &Control,
    run: impl FnOnce(&mut Worker) -> Result<TxnSummary, DbError>,
) -> Result<Flow, DbError> {
    measuring.run_and_count(worker, control, run)
}

/// `--route-by-partition`: what a worker routes with.
struct Route<'a> {
    router: &'a Router<Box<dyn PlannedTxn>>,
    database: &'a Database,
}

/// Runs one worker: warm-up, then the measured phase until told to stop.
fn worker_loop(
    worker: Result<Worker, DbError>,
    workload: &dyn Workload,
    index: usize,
    spec: &RunSpec<'_>,
    control: &Control,
    route: Option<Route<'_>>,
) -> Result<ThreadResult, DbError> {
    // Says when this worker stops drawing transactions, however it returns.
    let mut drawing = route.as_ref().map(|route| route.router.drawing());
    let types = workload.transaction_types().len();
    let mut client = workload.client(index, spec.threads, spec.seed);
    // Start together, once every worker has its client.
    control.ready.fetch_add(1, Ordering::AcqRel);
    while !control.started.load(Ordering::Acquire) {
        if control.failed.load(Ordering::Relaxed) {
            return Err(DbError::InvalidConfig("the run was abandoned before it started".into()));
        }
        std::thread::yield_now();
    }
    let mut worker = worker.inspect_err(|_| control.failed.store(true, Ordering::Relaxed))?;
    let mut result = ThreadResult::new(types);
    let mut state = Measuring { result: &mut result, measuring: false, skip: 0, ran: 0 };
    // `--transactions`: whether this worker has counted itself warmed up,
    // and how many of its measured transactions the progress line has.
    let mut warmed = false;
    let mut progress_shown = 0;
    let recover = spec.recover && spec.engine.kind.is_durable();
    // Results reported (`--recover`): later transactions are not measured.
    let mut reported = false;
    reset_thread_counters();
    'run: loop {
        let phase = control.phase.load(Ordering::Acquire);
        if phase == PHASE_STOP || control.failed.load(Ordering::Relaxed) {
            break;
        }
        if let Some(counted) = spec.counted {
            if phase == PHASE_WARMUP && state.ran >= counted.warmup {
                // Wait for the other workers' warm-up.
                if !warmed {
                    warmed = true;
                    control.warmed.fetch_add(1, Ordering::AcqRel);
                }
                std::thread::yield_now();
                continue;
            }
            if state.measuring && state.ran - progress_shown >= COUNTED_PROGRESS_STEP {
                control.measured_so_far.fetch_add(state.ran - progress_shown, Ordering::Relaxed);
                progress_shown = state.ran;
            }
            if state.measuring && state.ran >= counted.measured {
                finish_measurement(&mut worker, state.result, &mut state.skip, true);
                state.measuring = false;
                reported = true;
                control.reported.fetch_add(1, Ordering::AcqRel);
                // With --recover, run on (unmeasured) until the crash.
                if !recover {
                    break;
                }
            }
        }
        if phase == PHASE_MEASURE && !state.measuring && !reported {
            state.measuring = true;
            state.ran = 0;
            progress_shown = 0;
            state.skip = worker.pending_acknowledgements();
            worker.reset_stats();
            reset_thread_counters();
            state.result.cpu_at_start = cpu::thread_cpu_time();
        }
        if phase == PHASE_AFTER && !reported {
            finish_measurement(&mut worker, state.result, &mut state.skip, state.measuring);
            state.measuring = false;
            reported = true;
            control.reported.fetch_add(1, Ordering::AcqRel);
        }
        let Some(route) = &route else {
            match state.run(&mut worker, control, |worker| client.run_next(worker))? {
                Flow::Continue => continue,
                Flow::Stop => break,
            }
        };
        // The transactions handed to this worker first.
        while let Some(txn) = route.router.receive(index) {
            state.result.routing.worker.received += 1;
            if let Flow::Stop = state.run(&mut worker, control, |worker| txn.run(worker))? {
                break 'run;
            }
        }
        let txn = match client.plan_next(&mut worker) {
            Some(Ok(txn)) => txn,
            Some(Err(_)) if control.crashed.load(Ordering::Acquire) => break,
            Some(Err(error)) => {
                control.failed.store(true, Ordering::Relaxed);
                return Err(error);
            }
            // Checked before the run: the workload plans ahead.
            None => unreachable!("--route-by-partition with a workload that cannot plan"),
        };
        let routing = &mut state.result.routing;
        routing.worker.generated += 1;
        let keys = txn.keys();
        let keys: Vec<_> = keys.iter().map(|(table, key)| (*table, key.as_slice())).collect();
        let txn = match route.database.assign_transaction(&keys) {
            Some(target) if target != index => {
                routing.assigned += 1;
                match route.router.forward(target, txn) {
                    Ok(()) => {
                        routing.worker.forwarded += 1;
                        continue;
                    }
                    Err(txn) => {
                        routing.queue_full += 1;
                        txn
                    }
                }
            }
            Some(_) => {
                routing.assigned += 1;
                txn
            }
            None => txn,
        };
        if let Flow::Stop = state.run(&mut worker, control, |worker| txn.run(worker))? {
            break;
        }
    }
    let crashed = control.crashed.load(Ordering::Acquire);
    // After a crash, pending commits are never acknowledged.
    if !reported && !crashed {
        finish_measurement(&mut worker, state.result, &mut state.skip, state.measuring);
    }
    state.measuring = false;
    // Routed: run every transaction still handed to this worker (after
    // the measured phase: not measured) until no worker draws any more.
    if let (Some(route), Some(drawing)) = (&route, drawing.as_mut()) {
        drawing.stop();
        while !crashed && !control.failed.load(Ordering::Relaxed) {
            let stopped = route.router.all_stopped();
            while let Some(txn) = route.router.receive(index) {
                state.result.routing.worker.received += 1;
                if let Flow::Stop = state.run(&mut worker, control, |worker| txn.run(worker))? {
                    break;
                }
            }
            if stopped {
                break;
            }
            std::thread::yield_now();
        }
        let _closed = worker.wait_all_acknowledged(|_, _| {});
    }
    result.routing.worker.committed = result.committed;
    Ok(result)
}

/// Sleeps `length` in small steps, redrawing the progress line; returns
/// early if a worker failed.
fn timed_phase(progress: &mut Progress, index: usize, name: &str, length: Duration, control: &Control) {
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= length || control.failed.load(Ordering::Relaxed) {
            return;
        }
        progress.update(index, name, elapsed.as_secs_f64() / length.as_secs_f64());
        std::thread::sleep((length - elapsed).min(Duration::from_millis(50)));
    }
}

/// `--transactions`: waits while `remaining` gives the phase's share done
/// (None once every worker is through), redrawing the progress line;
/// returns early if a worker failed.
fn counted_phase(
    progress: &mut Progress,
    index: usize,
    name: &str,
    control: &Control,
    remaining: impl Fn(&Control) -> Option<f64>,
) {
    while let Some(share) = remaining(control) {
        if control.failed.load(Ordering::Relaxed) {
            return;
        }
        progress.update(index, name, share);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a fresh database of a run is opened with (`bench` and `soak`).
pub struct DatabasePlan<'a> {
    /// Engine and its options.
    pub engine: &'a EngineSpec,
    /// Worker slots.
    pub threads: usize,
    /// Backend.
    pub backend: BackendKind,
    /// PM options.
    pub pm: &'a PmOptions,
    /// Pool file (durable engines).
    pub pool_path: PathBuf,
    /// Whether to keep the pool file afterwards.
    pub keep_pool: bool,
    /// Pool size.
    pub pool_size: u64,
    /// Epoch length.
    pub epoch_interval: Duration,
    /// Checkpoint interval.
    pub checkpoint_interval: Option<Duration>,
    /// Free chunks populated ahead of the allocator.
    pub prefault_chunks: u64,
    /// Seed of the engine's own randomness (simulated HTM aborts).
    pub seed: u64,
}

impl<'a> RunSpec<'a> {
    fn database_plan(&self) -> DatabasePlan<'a> {
        DatabasePlan {
            engine: self.engine,
            threads: self.threads,
            backend: self.backend,
            pm: self.pm,
            pool_path: self.pool_path.clone(),
            keep_pool: self.keep_pool,
            pool_size: self.pool_size,
            epoch_interval: self.epoch_interval,
            checkpoint_interval: self.checkpoint_interval,
            prefault_chunks: self.prefault_chunks,
            seed: self.seed,
        }
    }
}

/// A fresh, empty database with the workload's tables.
pub struct FreshDatabase {
    /// The database.
    pub database: Database,
    /// What it was opened with (to reopen it after a crash).
    pub options: DbOptions,
    /// The pool's backend (durable engines).
    pub backend_info: Option<BackendInfo>,
    /// Reads the pool's usage and provisions it (durable engines).
    pub probe: Option<Box<dyn PoolProbe>>,
    /// Deletes a temporary pool file when dropped.
    pub guard: PoolFileGuard,
}

/// Opens a fresh database for `plan`: durable engines on a new pool file
/// (replacing an old pmtx pool there), the others in memory.
pub fn open_fresh(workload: &dyn Workload, plan: &DatabasePlan<'_>) -> Result<FreshDatabase, CliError> {
    let engine = plan.engine;
    let mut options = DbOptions::new(engine.kind, workload.tables(), &plan.pool_path);
    options.workers = plan.threads;
    options.backend = plan.backend;
    options.pm = plan.pm.clone();
    options.epoch_interval = plan.epoch_interval;
    options.checkpoint_interval = plan.checkpoint_interval;
    options.prefault_chunks = plan.prefault_chunks;
    options.seed = plan.seed;
    options.pool = pmtx_engine::PoolLocation::File { path: plan.pool_path.clone(), size: plan.pool_size };
    // A fresh pool every run (an old pmtx pool there is removed below).
    options.create_if_missing = true;
    engine.apply(&mut options, plan.seed);

    let mut guard = PoolFileGuard { path: None, log_directory: None };
    if !engine.kind.is_durable() {
        let database = Database::open(options.clone()).map_err(db_error)?;
        return Ok(FreshDatabase { database, options, backend_info: None, probe: None, guard });
    }
    // Both checked before either is removed: a refusal leaves both.
    let log_directory = options.log_directory_path();
    if let Some(directory) = &log_directory {
        stale_log_files(directory)?;
    }
    remove_stale_pool(&plan.pool_path)?;
    if let Some(directory) = &log_directory {
        remove_stale_log_directory(directory)?;
    }
    if !plan.keep_pool {
        guard.path = Some(plan.pool_path.clone());
        guard.log_directory = log_directory;
    }
    let (path, size) = (&plan.pool_path, plan.pool_size);
    let (database, info, probe) = match plan.backend {
        BackendKind::Direct => create_and_open::<Direct>(options.clone(), path, size),
        BackendKind::Emulated => create_and_open::<Emulated>(options.clone(), path, size),
        BackendKind::Sim => create_and_open::<Sim>(options.clone(), path, size),
    }?;
    Ok(FreshDatabase { database, options, backend_info: Some(info), probe: Some(probe), guard })
}

/// Runs one (engine, threads) combination and returns its results.
pub fn run(workload: &dyn Workload, spec: &RunSpec<'_>) -> Result<RunJson, CliError> {
    let engine = spec.engine;
    let label =
        format!("run {}/{}: {} {} x{}", spec.position.0, spec.position.1, workload.name(), engine, spec.threads);
    // Before the pool is created: a thread count the workload cannot run
    // with (YCSB's long_threads) is a usage error, not a failed run.
    workload.validate_threads(spec.threads).map_err(workload_error)?;
    let durable = engine.kind.is_durable();
    let recover = spec.recover && durable;
    let FreshDatabase { database, options, backend_info, probe: pool_probe, guard } =
        open_fresh(workload, &spec.database_plan())?;
    let database = Arc::new(database);
    let options_log_directory = options.log_directory_path();

    let phases: &[&str] = if recover {
        &["load", "warm-up", "measure", "run on, then crash", "recover", "check the recovered database"]
    } else {
        &["load", "warm-up", "measure", "check"]
    };
    let mut progress = Progress::new(phases.len());
    let phase_name = |index: usize| format!("{label}: {}", phases[index]);

    // Load, with the resident memory it costs (measured once per run).
    progress.phase(0, &phase_name(0));
    let rss_before_load = super::memory::resident_bytes();
    let load_start = Instant::now();
    {
        let shared = Mutex::new(&mut progress);
        let name = phase_name(0);
        let report = |done: u64, total: u64| {
            if let Ok(mut progress) = shared.try_lock() {
                progress.update(0, &name, done as f64 / total.max(1) as f64);
            }
        };
        workload.load(&database, spec.threads, &report).map_err(workload_error)?;
    }
    let load_s = load_start.elapsed().as_secs_f64();
    let rss_after_load = super::memory::resident_bytes();
    let rows_loaded = super::memory::count_rows(&database, workload.tables().len()).map_err(db_error)?;
    let (rss_load_delta, bytes_per_loaded_row) = super::memory::load_cost(rss_before_load, rss_after_load, rows_loaded);

    // Warm-up and measured phase (and, with --recover, the crash).
    let control = Control {
        ready: AtomicUsize::new(0),
        started: AtomicBool::new(false),
        phase: AtomicU8::new(if spec.has_warmup() { PHASE_WARMUP } else { PHASE_MEASURE }),
        failed: AtomicBool::new(false),
        reported: AtomicUsize::new(0),
        crashed: AtomicBool::new(false),
        warmed: AtomicUsize::new(0),
        measured_so_far: AtomicU64::new(0),
    };
    let mut spawn_error = None;
    let mut background = pmtx_pm::PmCounters::default();
    let mut htm = HtmDelta::default();
    let mut counters = std::collections::BTreeMap::new();
    let mut log_syncs = (0u64, 0u64);
    let mut crash: Option<(PoolUsage, Result<(), DbError>)> = None;
    let mut provisioned = Provisioned::default();
    let mut used_before_measure = None;
    let mut used_after_measure = None;
    let mut steal_share = None;
    let router = spec.route_by_partition.then(|| Router::new(spec.threads, QUEUE_CAPACITY));
    let mut routing = spec.route_by_partition.then(RoutingJson::default);
    let (results, measured) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|index| {
                let worker = database.worker(index);
                let control = &control;
                let route = router.as_ref().map(|router| Route { router, database: &database });
                std::thread::Builder::new()
                    .name(format!("pmtx-bench-{index}"))
                    .spawn_scoped(scope, move || worker_loop(worker, workload, index, spec, control, route))
            })
            .collect();
        let mut spawned = Vec::with_capacity(handles.len());
        for handle in handles {
            match handle {
                Ok(handle) => spawned.push(handle),
                Err(error) => {
                    // The workers that did start see the flag and return.
                    control.failed.store(true, Ordering::Relaxed);
                    spawn_error = Some(error);
                }
            }
        }
        while control.ready.load(Ordering::Acquire) < spawned.len() && spawn_error.is_none() {
            std::thread::yield_now();
        }
        control.started.store(true, Ordering::Release);
        if spawn_error.is_some() {
            let _: Vec<_> = spawned.into_iter().map(|handle| handle.join()).collect();
            return (Vec::new(), Duration::ZERO);
        }
        if spec.has_warmup() {
            progress.phase(1, &phase_name(1));
            let used_before_warmup = pool_probe.as_ref().and_then(|probe| probe.usage());
            match spec.counted {
                Some(_) => counted_phase(&mut progress, 1, &phase_name(1), &control, |control| {
                    let warmed = control.warmed.load(Ordering::Acquire);
                    (warmed < spawned.len()).then(|| warmed as f64 / spawned.len() as f64)
                }),
                None => timed_phase(&mut progress, 1, &phase_name(1), spec.warmup, &control),
            }
            if let (true, Some(probe), Some(before)) = (spec.provision, pool_probe.as_deref(), used_before_warmup) {
                let name = format!("{} (provisioning the pool)", phase_name(1));
                progress.update(1, &name, 1.0);
                provisioned = provision(probe, before.used_bytes, spec);
            }
            control.phase.store(PHASE_MEASURE, Ordering::Release);
        }
        progress.phase(2, &phase_name(2));
        used_before_measure = pool_probe.as_ref().and_then(|probe| probe.usage());
        let before = database.stats();
        let machine_before = MachineCpu::now();
        let start = Instant::now();
        match spec.counted {
            Some(counted) => {
                let total = counted.measured * spawned.len() as u64;
                counted_phase(&mut progress, 2, &phase_name(2), &control, |control| {
                    let done = control.measured_so_far.load(Ordering::Relaxed).min(total);
                    (control.reported.load(Ordering::Acquire) < spawned.len())
                        .then(|| done as f64 / total.max(1) as f64)
                })
            }
            None => timed_phase(&mut progress, 2, &phase_name(2), spec.duration, &control),
        }
        steal_share =
            machine_before.zip(MachineCpu::now()).and_then(|(before, after)| before.steal_share_until(&after));
        let measured = if recover {
            control.phase.store(PHASE_AFTER, Ordering::Release);
            let measured = start.elapsed();
            used_after_measure = pool_probe.as_ref().and_then(|probe| probe.usage());
            // Every worker waits for its acknowledgements and reports.
            while control.reported.load(Ordering::Acquire) < spawned.len() && !control.failed.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let after = database.stats();
            background = after.background_pm.since(&before.background_pm);
            htm = htm_delta(&before, &after);
            counters = engine_counter_delta(&before, &after);
            log_syncs = log_sync_delta(&before, &after);
            progress.phase(3, &phase_name(3));
            timed_phase(&mut progress, 3, &phase_name(3), CRASH_AFTER, &control);
            if !control.failed.load(Ordering::Relaxed) {
                let usage = pool_probe.as_ref().and_then(|probe| probe.usage()).unwrap_or_default();
                control.crashed.store(true, Ordering::Release);
                crash = Some((usage, database.crash()));
            }
            control.phase.store(PHASE_STOP, Ordering::Release);
            measured
        } else {
            control.phase.store(PHASE_STOP, Ordering::Release);
            used_after_measure = pool_probe.as_ref().and_then(|probe| probe.usage());
            start.elapsed()
        };
        let results: Vec<_> = spawned.into_iter().map(|handle| handle.join()).collect();
        if !recover {
            let after = database.stats();
            background = after.background_pm.since(&before.background_pm);
            htm = htm_delta(&before, &after);
            counters = engine_counter_delta(&before, &after);
            log_syncs = log_sync_delta(&before, &after);
        }
        (results, measured)
    });
    if let Some(error) = spawn_error {
        return Err(CliError::runtime(format!("{label}: cannot start worker threads: {error}")));
    }
    let mut total = ThreadResult::new(workload.transaction_types().len());
    // The engine's epoch and checkpoint threads persist on the workers'
    // behalf (group commit flushes the logs there): count their work too.
    let mut workers_pm = PmCounters::default();
    total.pm.add(&background);
    for result in results {
        match result {
            Ok(Ok(result)) => {
                workers_pm.add(&result.pm);
                if let Some(routing) = &mut routing {
                    let worker = &result.routing.worker;
                    routing.generated += worker.generated;
                    routing.forwarded += worker.forwarded;
                    routing.executed += worker.executed;
                    routing.assigned += result.routing.assigned;
                    routing.queue_full += result.routing.queue_full;
                    routing.workers.push(worker.clone());
                }
                total.merge(&result)
            }
            Ok(Err(error)) => {
                let hint = match error {
                    DbError::OutOfSpace(_) => {
                        " (the log grows until a checkpoint frees it: give a larger --pool-size or a shorter \
                         --checkpoint-s)"
                    }
                    _ => "",
                };
                return Err(CliError::runtime(format!("{label}: a worker failed: {error}{hint}")));
            }
            Err(_) => return Err(CliError::runtime(format!("{label}: a worker thread panicked"))),
        }
    }

    let stats = database.stats();
    let engine_stats = EngineStatsJson {
        checkpoints: stats.checkpoints,
        log_bytes: stats.log_bytes,
        durable_epoch: stats.durable_epoch,
        cache_hits: stats.cache_hits,
        cache_misses: stats.cache_misses,
        cache_evictions: stats.cache_evictions,
        cache_bytes: stats.cache_bytes,
    };
    let unwrap = |database: Arc<Database>| {
        Arc::try_unwrap(database)
            .map_err(|_| CliError::runtime(format!("{label}: the database is still in use after the run")))
    };

    let (check_passed, check_failures, recovery) = if recover {
        let (usage_at_crash, crashed) =
            crash.ok_or_else(|| CliError::runtime(format!("{label}: the run ended before the crash")))?;
        crashed.map_err(|error| CliError::runtime(format!("{label}: crash failed: {error}")))?;
        // The workers are gone; dropping the database unmaps the pool.
        drop(unwrap(database)?);
        let recovery = recover_and_check(workload, spec, options, &mut progress, &phase_name, usage_at_crash)?;
        (recovery.check_passed, recovery.check_failures.clone(), Some(recovery))
    } else {
        progress.phase(3, &phase_name(3));
        let (passed, failures) = check(workload, &database);
        progress.finish();
        unwrap(database)?.close().map_err(|error| CliError::runtime(format!("{label}: close failed: {error}")))?;
        (passed, failures, None)
    };
    drop(guard);

    let duration_s = measured.as_secs_f64();
    let types = workload.transaction_types();
    let per_type = types
        .iter()
        .zip(&total.per_type)
        .map(|(name, (committed, rolled_back, aborted, histogram))| {
            let latency = LatencyJson::from_nanoseconds(histogram);
            let mut json = TypeJson::new(*committed, *rolled_back, latency, duration_s);
            json.set_aborts(*aborted);
            (name.to_string(), json)
        })
        .collect();
    let (backend, latency_model, durability) = match &backend_info {
        Some(info) => (
            info.kind.to_string(),
            info.latency.map_or("none", |model| model.name).to_string(),
            info.durability().to_string(),
        ),
        None => (
            "none".to_string(),
            "none".to_string(),
            format!("none: {} is not durable (no pool is used; a crash loses everything)", engine.kind),
        ),
    };
    Ok(RunJson {
        engine: engine.label(),
        engine_name: engine.kind.name().to_string(),
        engine_options: engine.effective_options(),
        workload: workload.name().to_string(),
        threads: spec.threads,
        duration_s,
        warmup_s: spec.warmup.as_secs_f64(),
        load_s,
        rss_before_load_bytes: rss_before_load,
        rss_after_load_bytes: rss_after_load,
        rss_load_delta_bytes: rss_load_delta,
        rows_loaded,
        bytes_per_loaded_row,
        committed: total.committed,
        aborted: total.aborts.iter().sum(),
        rolled_back: total.rolled_back,
        gave_up: total.gave_up,
        throughput_tps: total.committed as f64 / duration_s.max(f64::MIN_POSITIVE),
        tps_ratio: 1.0,
        latency_us: LatencyJson::from_nanoseconds(&total.total),
        per_type,
        pm: PmJson::new(&total.pm, total.committed, "worker threads plus the engine's background threads"),
        nvm_access: NvmAccessJson::new(&workers_pm, total.committed, total.tuples),
        htm: HtmJson::new(engine.htm_backend(), htm.stats.as_ref(), total.committed).with_paths(htm.paths),
        aborts_by_reason: AbortReason::ALL
            .iter()
            .map(|reason| (reason.name().to_string(), total.aborts[reason.index()]))
            .collect(),
        backend,
        latency_model,
        durable,
        durability,
        pool: durable.then(|| spec.pool_path.display().to_string()),
        seed: spec.seed,
        git_revision: spec.git_revision.to_string(),
        check_passed,
        check_failures,
        engine_stats,
        engine_counters: counters,
        recovery,
        pool_provisioned_bytes: provisioned.bytes,
        pool_provision_error: provisioned.error,
        pool_allocated_measured_bytes: used_before_measure
            .zip(used_after_measure)
            .map(|(before, after)| after.used_bytes.saturating_sub(before.used_bytes)),
        log_file: options_log_directory.map(|directory| LogFileJson::new(directory, log_syncs, total.committed)),
        routing,
        worker_cpu_s: total.cpu.map(|cpu| cpu.as_secs_f64()),
        host_steal_share: steal_share,
    })
}

/// `fdatasync`s of the redo log files and `fsync`s of their directory over
/// the measured phase (engines whose log is on a file).
fn log_sync_delta(before: &pmtx_engine::EngineStats, after: &pmtx_engine::EngineStats) -> (u64, u64) {
    (
        after.log_file_syncs.saturating_sub(before.log_file_syncs),
        after.log_directory_syncs.saturating_sub(before.log_directory_syncs),
    )
}

/// What `--provision` did before a measured phase.
#[derive(Debug, Default)]
struct Provisioned {
    /// Bytes of the lowest free chunks made sure to be populated.
    bytes: u64,
    /// Why provisioning stopped short (the run goes on without it).
    error: Option<String>,
}

/// How much more the measured phase is expected to allocate than the
/// warm-up's rate says: a warm-up on a fresh pool runs slower than the
/// phase will (it faults its pages in), and over-provisioning costs only
/// memory the phase would likely touch anyway.
const PROVISION_MARGIN: f64 = 2.0;

/// `--provision auto`: populates the free chunks the measured phase is
/// expected to allocate (`PROVISION_MARGIN` times the warm-up's rate of
/// new chunks over the measured duration, plus the prefault window), so
/// the phase measures the engine on a pool whose pages exist, as a
/// long-lived pool's do, and not the kernel zeroing a new file's pages.
fn provision(probe: &dyn PoolProbe, used_before_warmup: u64, spec: &RunSpec<'_>) -> Provisioned {
    let Some(usage) = probe.usage() else { return Provisioned::default() };
    let chunk_size = probe.chunk_size();
    let warmup_chunks = usage.used_bytes.saturating_sub(used_before_warmup) / chunk_size;
    let rate = warmup_chunks as f64 / spec.warmup.as_secs_f64();
    let free = (usage.size_bytes - usage.used_bytes) / chunk_size;
    let chunks =
        ((rate * spec.duration.as_secs_f64() * PROVISION_MARGIN).ceil() as u64 + spec.prefault_chunks).min(free);
    match probe.populate_free_chunks(chunks) {
        Some(Ok(_)) => Provisioned { bytes: chunks * chunk_size, error: None },
        Some(Err(error)) => Provisioned { bytes: 0, error: Some(error.to_string()) },
        None => Provisioned::default(),
    }
}

/// The workload's consistency check: (passed, failures).
fn check(workload: &dyn Workload, database: &Arc<Database>) -> (bool, Vec<String>) {
    match workload.check(database) {
        Ok(report) => {
            (report.passed(), report.failures().map(|(name, _, detail)| format!("{name}: {detail}")).collect())
        }
        Err(error) => (false, vec![error.to_string()]),
    }
}

/// Reopens the crashed pool of `spec` with `options` (same engine and
/// options), timing the recovery, and checks the recovered database.
fn recover_and_check(
    workload: &dyn Workload,
    spec: &RunSpec<'_>,
    options: DbOptions,
    progress: &mut Progress,
    phase_name: &dyn Fn(usize) -> String,
    usage_at_crash: PoolUsage,
) -> Result<RecoveryJson, CliError> {
    let label = phase_name(4);
    progress.phase(4, &label);
    let path = spec.pool_path.clone();
    let done = AtomicBool::new(false);
    let (opened, duration) = std::thread::scope(|scope| {
        let opener = scope.spawn(|| {
            let start = Instant::now();
            let opened = match spec.backend {
                BackendKind::Direct => reopen::<Direct>(options, &path),
                BackendKind::Emulated => reopen::<Emulated>(options, &path),
                BackendKind::Sim => reopen::<Sim>(options, &path),
            };
            let duration = start.elapsed();
            done.store(true, Ordering::Release);
            (opened, duration)
        });
        // No fraction is known: show the time spent so far.
        let start = Instant::now();
        while !done.load(Ordering::Acquire) {
            let elapsed = start.elapsed().as_secs_f64();
            progress.update(4, &format!("{label} ({elapsed:.1} s)"), 0.0);
            std::thread::sleep(Duration::from_millis(50));
        }
        opener
            .join()
            .unwrap_or_else(|_| (Err(CliError::runtime(format!("{label}: recovery panicked"))), Duration::ZERO))
    });
    let mut json = RecoveryJson {
        crash_after_s: CRASH_AFTER.as_secs_f64(),
        duration_ms: duration.as_secs_f64() * 1000.0,
        pool_used_bytes_at_crash: usage_at_crash.used_bytes,
        pool_size_bytes: usage_at_crash.size_bytes,
        ..RecoveryJson::default()
    };
    let (database, probe) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            // A failed recovery is a finding of the run, not a reason to
            // drop the other runs: report it as a failed check.
            progress.finish();
            json.check_failures = vec![format!("recovery failed: {error}")];
            return Ok(json);
        }
    };
    let database = Arc::new(database);
    if let Some(usage) = probe.usage() {
        json.pool_used_bytes = usage.used_bytes;
        json.pool_size_bytes = usage.size_bytes;
    }
    if let Some(report) = database.stats().recovery {
        json.counters(&report);
    }

    progress.phase(5, &phase_name(5));
    let check_start = Instant::now();
    let (passed, failures) = check(workload, &database);
    json.check_s = check_start.elapsed().as_secs_f64();
    json.check_passed = passed;
    json.check_failures = failures;
    progress.finish();
    drop(probe);
    let database = Arc::try_unwrap(database)
        .map_err(|_| CliError::runtime(format!("{label}: the recovered database is still in use")))?;
    if spec.keep_pool {
        database
            .close()
            .map_err(|error| CliError::runtime(format!("{label}: close after recovery failed: {error}")))?;
    } else {
        // The temporary pool is deleted next: a clean close (a final
        // checkpoint) would only cost time.
        drop(database);
    }
    Ok(json)
}

/// The HTM counters between two statistics snapshots (None: the engine has
/// no HTM instance).
/// The HTM counters and (PHyTM family) commits by path of the measured
/// phase.
#[derive(Default)]
struct HtmDelta {
    stats: Option<pmtx_htm::HtmStatsSnapshot>,
    paths: std::collections::BTreeMap<String, u64>,
}

/// The engine-specific counters of the measured phase (levels, named
/// `*_now`, at its end).
fn engine_counter_delta(
    before: &pmtx_engine::EngineStats,
    after: &pmtx_engine::EngineStats,
) -> std::collections::BTreeMap<String, u64> {
    after
        .engine_counters
        .iter()
        .map(|(name, count)| {
            // A level (`mmdb`'s rows in NVM now) is reported as it is.
            if name.ends_with("_now") {
                return (name.to_string(), *count);
            }
            let earlier = before.engine_counters.iter().find(|(other, _)| other == name).map_or(0, |(_, c)| *c);
            (name.to_string(), count.saturating_sub(earlier))
        })
        .collect()
}

fn htm_delta(before: &pmtx_engine::EngineStats, after: &pmtx_engine::EngineStats) -> HtmDelta {
    let stats = after.htm.map(|after| match &before.htm {
        Some(before) => after.since(before),
        None => after,
    });
    let paths = after
        .path_commits
        .iter()
        .map(|(path, commits)| {
            let earlier = before.path_commits.iter().find(|(name, _)| name == path).map_or(0, |(_, c)| *c);
            (path.to_string(), commits - earlier)
        })
        .collect();
    HtmDelta { stats, paths }
}
