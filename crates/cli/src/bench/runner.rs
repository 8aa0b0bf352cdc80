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
//!   the measured phase and reads them at the end. Background threads of the
//!   engine (epoch ticker, checkpointer) are not included.

use super::report::{EngineStatsJson, HtmJson, LatencyJson, PmJson, RunJson, TypeJson};
use crate::progress::Progress;
use crate::CliError;
use hdrhistogram::Histogram;
use pmtx_engine::{AbortReason, Database, DbError, DbOptions, EngineKind, Worker};
use pmtx_pm::{
    layout, reset_thread_counters, thread_counters, BackendInfo, BackendKind, Direct, Emulated, PmBackend, PmCounters,
    PmOptions, Pool, Sim,
};
use pmtx_workloads::{Workload, WorkloadError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest latency the histograms hold (100 s); larger values are clamped.
const MAX_LATENCY_NS: u64 = 100_000_000_000;

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;

/// Everything a run needs besides the workload.
pub struct RunSpec<'a> {
    /// Engine.
    pub engine: EngineKind,
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
    /// Client seed.
    pub seed: u64,
    /// Source revision.
    pub git_revision: &'a str,
    /// Run number (1-based) and total, for the progress line.
    pub position: (usize, usize),
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

/// Deletes a temporary pool file when the run ends, however it ends.
struct PoolFileGuard {
    path: Option<PathBuf>,
}

impl Drop for PoolFileGuard {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
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

fn create_and_open<B: PmBackend>(
    options: DbOptions,
    path: &Path,
    size: u64,
) -> Result<(Database, BackendInfo), CliError> {
    let pool = Pool::<B>::create(path, size, options.chunk_size, &options.pm).map_err(CliError::from)?;
    let info = pool.info().backend;
    let database = Database::open_on_pool(options, Arc::new(pool)).map_err(db_error)?;
    Ok((database, info))
}

/// One worker thread's measured results.
struct ThreadResult {
    /// Per type: (acknowledged commits, rollbacks, latency histogram).
    per_type: Vec<(u64, u64, Histogram<u64>)>,
    total: Histogram<u64>,
    committed: u64,
    rolled_back: u64,
    gave_up: u64,
    aborts: [u64; AbortReason::ALL.len()],
    pm: PmCounters,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

impl ThreadResult {
    fn new(types: usize) -> Self {
        Self {
            per_type: (0..types).map(|_| (0, 0, histogram())).collect(),
            total: histogram(),
            committed: 0,
            rolled_back: 0,
            gave_up: 0,
            aborts: [0; AbortReason::ALL.len()],
            pm: PmCounters::default(),
        }
    }

    fn acknowledge(&mut self, tag: u32, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.committed += 1;
        self.total.saturating_record(ns);
        if let Some((committed, _, histogram)) = self.per_type.get_mut(tag as usize) {
            *committed += 1;
            histogram.saturating_record(ns);
        }
    }

    fn merge(&mut self, other: &ThreadResult) {
        for ((c, r, h), (oc, or, oh)) in self.per_type.iter_mut().zip(&other.per_type) {
            *c += oc;
            *r += or;
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
}

/// Runs one worker: warm-up, then the measured phase until told to stop.
fn worker_loop(
    worker: Result<Worker, DbError>,
    workload: &dyn Workload,
    index: usize,
    spec: &RunSpec<'_>,
    control: &Control,
) -> Result<ThreadResult, DbError> {
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
    let mut measuring = false;
    // Warm-up commits still waiting for their acknowledgement when the
    // measured phase began: the first this many acknowledgements are skipped.
    let mut skip = 0usize;
    reset_thread_counters();
    loop {
        let phase = control.phase.load(Ordering::Acquire);
        if phase == PHASE_STOP || control.failed.load(Ordering::Relaxed) {
            break;
        }
        if phase == PHASE_MEASURE && !measuring {
            measuring = true;
            skip = worker.pending_acknowledgements();
            worker.reset_stats();
            reset_thread_counters();
        }
        match client.run_next(&mut worker) {
            Ok(summary) => {
                if measuring && !summary.committed {
                    result.rolled_back += 1;
                    if let Some((_, rolled_back, _)) = result.per_type.get_mut(summary.type_index) {
                        *rolled_back += 1;
                    }
                }
            }
            Err(DbError::TooManyAborts { .. }) => {
                if measuring {
                    result.gave_up += 1;
                }
            }
            Err(error) => {
                control.failed.store(true, Ordering::Relaxed);
                return Err(error);
            }
        }
        worker.drain_acknowledged(|tag, latency| {
            if skip > 0 {
                skip -= 1;
            } else if measuring {
                result.acknowledge(tag, latency);
            }
        });
    }
    worker.wait_all_acknowledged(|tag, latency| {
        if skip > 0 {
            skip -= 1;
        } else if measuring {
            result.acknowledge(tag, latency);
        }
    });
    if measuring {
        result.pm = thread_counters();
        result.aborts = worker.stats().aborts;
    }
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

/// Runs one (engine, threads) combination and returns its results.
pub fn run(workload: &dyn Workload, spec: &RunSpec<'_>) -> Result<RunJson, CliError> {
    let label =
        format!("run {}/{}: {} {} x{}", spec.position.0, spec.position.1, workload.name(), spec.engine, spec.threads);
    let mut options = DbOptions::new(spec.engine, workload.tables(), &spec.pool_path);
    options.workers = spec.threads;
    options.backend = spec.backend;
    options.pm = spec.pm.clone();
    options.epoch_interval = spec.epoch_interval;
    options.checkpoint_interval = spec.checkpoint_interval;
    options.seed = spec.seed;
    options.pool = pmtx_engine::PoolLocation::File { path: spec.pool_path.clone(), size: spec.pool_size };

    let durable = spec.engine.is_durable();
    let mut guard = PoolFileGuard { path: None };
    let (database, backend_info) = if durable {
        remove_stale_pool(&spec.pool_path)?;
        if !spec.keep_pool {
            guard.path = Some(spec.pool_path.clone());
        }
        let (database, info) = match spec.backend {
            BackendKind::Direct => create_and_open::<Direct>(options, &spec.pool_path, spec.pool_size),
            BackendKind::Emulated => create_and_open::<Emulated>(options, &spec.pool_path, spec.pool_size),
            BackendKind::Sim => create_and_open::<Sim>(options, &spec.pool_path, spec.pool_size),
        }?;
        (database, Some(info))
    } else {
        (Database::open(options).map_err(db_error)?, None)
    };
    let database = Arc::new(database);

    let phases = ["load", "warm-up", "measure", "check"];
    let mut progress = Progress::new(phases.len());
    let phase_name = |index: usize| format!("{label}: {}", phases[index]);

    // Load.
    progress.phase(0, &phase_name(0));
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

    // Warm-up and measured phase.
    let control = Control {
        ready: AtomicUsize::new(0),
        started: AtomicBool::new(false),
        phase: AtomicU8::new(if spec.warmup.is_zero() { PHASE_MEASURE } else { PHASE_WARMUP }),
        failed: AtomicBool::new(false),
    };
    let mut spawn_error = None;
    let mut background = pmtx_pm::PmCounters::default();
    let (results, measured) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|index| {
                let worker = database.worker(index);
                let control = &control;
                std::thread::Builder::new()
                    .name(format!("pmtx-bench-{index}"))
                    .spawn_scoped(scope, move || worker_loop(worker, workload, index, spec, control))
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
        if !spec.warmup.is_zero() {
            progress.phase(1, &phase_name(1));
            timed_phase(&mut progress, 1, &phase_name(1), spec.warmup, &control);
            control.phase.store(PHASE_MEASURE, Ordering::Release);
        }
        progress.phase(2, &phase_name(2));
        let background_before = database.stats().background_pm;
        let start = Instant::now();
        timed_phase(&mut progress, 2, &phase_name(2), spec.duration, &control);
        control.phase.store(PHASE_STOP, Ordering::Release);
        let measured = start.elapsed();
        let results: Vec<_> = spawned.into_iter().map(|handle| handle.join()).collect();
        background = database.stats().background_pm.since(&background_before);
        (results, measured)
    });
    if let Some(error) = spawn_error {
        return Err(CliError::runtime(format!("{label}: cannot start worker threads: {error}")));
    }
    let mut total = ThreadResult::new(workload.transaction_types().len());
    // The engine's epoch and checkpoint threads persist on the workers'
    // behalf (group commit flushes the logs there): count their work too.
    total.pm.add(&background);
    for result in results {
        match result {
            Ok(Ok(result)) => total.merge(&result),
            Ok(Err(error)) => return Err(CliError::runtime(format!("{label}: a worker failed: {error}"))),
            Err(_) => return Err(CliError::runtime(format!("{label}: a worker thread panicked"))),
        }
    }

    // Check.
    progress.phase(3, &phase_name(3));
    let (check_passed, check_failures) = match workload.check(&database) {
        Ok(report) => {
            (report.passed(), report.failures().map(|(name, _, detail)| format!("{name}: {detail}")).collect())
        }
        Err(error) => (false, vec![error.to_string()]),
    };
    progress.finish();

    let stats = database.stats();
    let engine_stats = EngineStatsJson {
        checkpoints: stats.checkpoints,
        log_bytes: stats.log_bytes,
        durable_epoch: stats.durable_epoch,
    };
    let htm = htm_counters(&database).map(|snapshot| HtmJson::from(&snapshot)).unwrap_or_default();
    let database = Arc::try_unwrap(database)
        .map_err(|_| CliError::runtime(format!("{label}: the database is still in use after the run")))?;
    database.close().map_err(|error| CliError::runtime(format!("{label}: close failed: {error}")))?;
    drop(guard);

    let duration_s = measured.as_secs_f64();
    let types = workload.transaction_types();
    let per_type = types
        .iter()
        .zip(&total.per_type)
        .map(|(name, (committed, rolled_back, histogram))| {
            (name.to_string(), TypeJson::new(*committed, *rolled_back, LatencyJson::from_nanoseconds(histogram)))
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
            format!("none: {} is not durable (no pool is used; a crash loses everything)", spec.engine),
        ),
    };
    Ok(RunJson {
        engine: spec.engine.name().to_string(),
        workload: workload.name().to_string(),
        threads: spec.threads,
        duration_s,
        warmup_s: spec.warmup.as_secs_f64(),
        load_s,
        committed: total.committed,
        aborted: total.aborts.iter().sum(),
        rolled_back: total.rolled_back,
        gave_up: total.gave_up,
        throughput_tps: total.committed as f64 / duration_s.max(f64::MIN_POSITIVE),
        tps_ratio: 1.0,
        latency_us: LatencyJson::from_nanoseconds(&total.total),
        per_type,
        pm: PmJson::new(&total.pm, total.committed, "worker threads plus the engine's background threads"),
        htm,
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
    })
}

/// HTM statistics of the engine. No engine exposes its `pmtx_htm::Htm`
/// instance yet, so there is nothing to read; engines that run regions will
/// report their [`pmtx_htm::HtmStatsSnapshot`] here.
fn htm_counters(_database: &Database) -> Option<pmtx_htm::HtmStatsSnapshot> {
    None
}
