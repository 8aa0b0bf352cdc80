//! `pmtx soak`: runs one engine on one workload for minutes and reports,
//! interval by interval, whether memory and latency stay flat.
//!
//! The question it answers: does an engine that runs forever keep its
//! resident memory and its scan latency bounded? A queue that inserts at
//! the tail and deletes at the head (the default workload) leaves a deleted
//! row behind every dequeue; an engine that never unlinks them grows its
//! index without bound and every scan from the head walks further.
//!
//! Every interval prints (stdout, like bench's results; load and check
//! progress go to stderr): elapsed time, acknowledged commits per second,
//! resident memory (`/proc/self/statm`, split into anonymous and file pages
//! from `/proc/self/status`; a durable engine's pool is a file mapping),
//! `EngineStats::rows_indexed` and `rows_unlinked`, and the p50/p99
//! execution time of the probe transactions: the queue's peek scans, or
//! every transaction of the other workloads. Execution time runs from the
//! start of the first attempt to the commit (retries included) and leaves
//! out the wait for durability, which is the group-commit epoch and not
//! the index.
//!
//! At the end the minute after the first is compared with the last minute,
//! by the medians of their intervals (see [`summary`]), and a verdict line
//! says "flat" or "growing", with the limits it applied. The workload's
//! consistency check runs after the workers stop; a failed check fails the
//! command (exit 1). A "growing" verdict does not: TPC-C and YCSB D/E
//! insert rows forever, so their data grows by design.

mod summary;

use crate::bench::args::{parse_threads, parse_workload, BenchPm, BenchPmArgs, PoolRunArgs, WorkloadArgs};
use crate::bench::memory::{resident_bytes, resident_kinds};
use crate::bench::report::{format_size, format_us, LatencyJson, WorkloadOptionsJson};
use crate::bench::runner::{db_error, open_fresh, workload_error, DatabasePlan, FreshDatabase, PoolProbe};
use crate::bench::spec::{self, parse_entry, EngineSpec};
use crate::progress::Progress;
use crate::units::format_bytes;
use crate::CliError;
use clap::Args;
use hdrhistogram::Histogram;
use pmtx_engine::{Database, DbError, Worker};
use pmtx_workloads::Workload;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub use summary::{IntervalJson, SummaryJson, Thresholds};

/// Largest latency the histograms hold (100 s); larger values are clamped.
const MAX_LATENCY_NS: u64 = 100_000_000_000;
/// Longest soak accepted: one week.
const MAX_MINUTES: f64 = 7.0 * 24.0 * 60.0;

/// `pmtx soak`
#[derive(Args, Debug)]
#[command(after_help = after_help())]
pub struct SoakArgs {
    /// Workload to run: queue, tpcc, smallbank or ycsb.
    #[arg(long, default_value = "queue", value_parser = parse_workload)]
    pub workload: String,
    /// The engine, optionally with options (`dbxn:nt=off`, `zen:cache=64MiB`).
    #[arg(long, default_value = "group-commit", value_parser = parse_one_engine,
          help = engine_short_help(), long_help = spec::long_help().replace("Engines to compare, comma-separated", "The engine to run (one)"))]
    pub engine: EngineSpec,
    /// Worker threads (the queue gives each its own partition).
    #[arg(long, default_value = "2", value_parser = parse_threads)]
    pub threads: usize,
    /// Length of the run in minutes (fractions allowed, e.g. 0.5).
    #[arg(long, default_value = "10", value_parser = parse_minutes)]
    pub minutes: f64,
    /// Seconds per reported interval (fractions allowed); at most the run's length.
    #[arg(long = "interval-s", default_value = "10", value_parser = crate::units::parse_seconds)]
    pub interval: Duration,
    /// Seed of the clients.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Write the intervals, the summary and the configuration as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub pool_options: PoolRunArgs,
    #[command(flatten)]
    pub pm: BenchPmArgs,
    #[command(flatten)]
    pub workload_options: WorkloadArgs,
}

impl SoakArgs {
    /// The run's length.
    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.minutes * 60.0)
    }

    /// Checks what clap cannot check flag by flag.
    fn validate(&self) -> Result<(), CliError> {
        self.pool_options.validate()?;
        self.workload_options.validate(&self.workload)?;
        self.workload_options.validate_threads(&[self.threads])?;
        if self.pm.pm == BenchPm::Sim {
            return Err(CliError::usage(
                "--pm sim: the crash simulator tracks every store and grows without bound; soak on direct or emulated",
            ));
        }
        if self.interval > self.duration() {
            return Err(CliError::usage(format!(
                "--interval-s {} is longer than the run (--minutes {} = {} s)",
                self.interval.as_secs_f64(),
                self.minutes,
                self.duration().as_secs_f64()
            )));
        }
        Ok(())
    }
}

fn after_help() -> String {
    format!(
        "Example: pmtx soak --engine group-commit --threads 2 --minutes 10 --json soak.json\n\n\
         The verdict compares {}. It is meaningful for workloads whose data stays the same size (queue, \
         smallbank, ycsb A/B/C/F); TPC-C and YCSB D/E insert rows forever.",
        Thresholds::default().describe()
    )
}

fn engine_short_help() -> String {
    spec::short_help().replace("Engines to compare, comma-separated", "The engine to run (one)")
}

/// Parses one engine specification; a preset (several engines) is refused.
fn parse_one_engine(text: &str) -> Result<EngineSpec, String> {
    let mut entry = parse_entry(text)?.0;
    match entry.len() {
        1 => Ok(entry.remove(0)),
        count => Err(format!("{text:?} expands to {count} engines; soak runs one engine: give one of them")),
    }
}

fn parse_minutes(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(minutes) if minutes.is_finite() && minutes > 0.0 && minutes <= MAX_MINUTES => Ok(minutes),
        _ => Err(format!("invalid length {text:?}: expected minutes, more than 0 and at most {MAX_MINUTES}")),
    }
}

/// The configuration of a soak, as run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakConfigJson {
    /// Workload name.
    pub workload: String,
    /// Workload options in effect.
    pub workload_options: WorkloadOptionsJson,
    /// The engine as given (with its options).
    pub engine: String,
    /// The engine's name.
    pub engine_name: String,
    /// Every engine option in effect.
    pub engine_options: BTreeMap<String, String>,
    /// Worker threads.
    pub threads: usize,
    /// Length asked for, minutes.
    pub minutes: f64,
    /// Interval length, seconds.
    pub interval_s: f64,
    /// What the probe latency measures: a transaction type or "all".
    pub probe: String,
    /// Backend (none for engines that are not durable).
    pub backend: String,
    /// Latency model of the emulated backend.
    pub latency_model: String,
    /// What an acknowledged commit survives.
    pub durability: String,
    /// Epoch length.
    pub epoch_ms: u64,
    /// Checkpoint interval, 0 = off.
    pub checkpoint_s: f64,
    /// Pool size.
    pub pool_size_bytes: u64,
    /// `--pool`, if given.
    pub pool: Option<String>,
    /// Client seed.
    pub seed: u64,
    /// Source revision.
    pub git_revision: String,
    /// pmtx version.
    pub pmtx_version: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// Start (Unix seconds).
    pub started_unix_seconds: u64,
}

/// Totals of one transaction type over the whole run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SoakTypeJson {
    /// Acknowledged commits.
    pub committed: u64,
    /// User rollbacks.
    pub rolled_back: u64,
    /// Execution time (first attempt to commit), µs.
    pub execution_us: LatencyJson,
    /// Start of the first attempt to the durable acknowledgement, µs.
    pub durable_us: LatencyJson,
}

/// The JSON document of `pmtx soak --json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakReport {
    /// What ran.
    pub config: SoakConfigJson,
    /// Seconds the load took.
    pub load_s: f64,
    /// Resident set after the load.
    pub rss_after_load_bytes: Option<u64>,
    /// `rows_indexed` after the load.
    pub rows_indexed_after_load: u64,
    /// Seconds the workers ran.
    pub run_s: f64,
    /// One record per interval.
    pub intervals: Vec<IntervalJson>,
    /// Baseline against last interval, and the verdict.
    pub summary: Option<SummaryJson>,
    /// Totals by transaction type.
    pub per_type: BTreeMap<String, SoakTypeJson>,
    /// 1-minute load average at the start and at the end.
    pub load_average_start: Option<f64>,
    /// 1-minute load average at the end.
    pub load_average_end: Option<f64>,
    /// Whether the consistency check after the run passed.
    pub check_passed: bool,
    /// Failed checks.
    pub check_failures: Vec<String>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

fn nanoseconds(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// The 1-minute load average (`/proc/loadavg`).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// What a worker did since the main thread last collected.
struct IntervalCounts {
    committed: u64,
    rolled_back: u64,
    gave_up: u64,
    /// The worker's aborts since the run began (the main thread takes
    /// differences).
    aborts_total: u64,
    probe: Histogram<u64>,
}

impl IntervalCounts {
    fn new() -> Self {
        Self { committed: 0, rolled_back: 0, gave_up: 0, aborts_total: 0, probe: histogram() }
    }
}

/// A worker's totals by type: (committed, rolled back, execution, durable).
type TypeTotals = Vec<(u64, u64, Histogram<u64>, Histogram<u64>)>;

/// State the workers share with the main thread.
struct Shared {
    stop: AtomicBool,
    failed: AtomicBool,
    intervals: Vec<Mutex<IntervalCounts>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One worker: runs transactions until told to stop.
fn worker_loop(
    worker: &mut Worker,
    workload: &dyn Workload,
    index: usize,
    args: &SoakArgs,
    probe_type: Option<usize>,
    shared: &Shared,
) -> Result<TypeTotals, DbError> {
    let types = workload.transaction_types().len();
    let mut totals: TypeTotals = (0..types).map(|_| (0, 0, histogram(), histogram())).collect();
    let mut client = workload.client(index, args.threads, args.seed);
    while !shared.stop.load(Ordering::Relaxed) && !shared.failed.load(Ordering::Relaxed) {
        let start = Instant::now();
        let result = client.run_next(worker);
        let execution = start.elapsed();
        let mut acknowledged = 0u64;
        worker.drain_acknowledged(|tag, latency| {
            acknowledged += 1;
            if let Some((committed, _, _, durable)) = totals.get_mut(tag as usize) {
                *committed += 1;
                durable.saturating_record(nanoseconds(latency));
            }
        });
        let mut counts = lock(&shared.intervals[index]);
        counts.committed += acknowledged;
        counts.aborts_total = worker.stats().total_aborts();
        match result {
            Ok(summary) if summary.committed => {
                if let Some((_, _, executed, _)) = totals.get_mut(summary.type_index) {
                    executed.saturating_record(nanoseconds(execution));
                }
                if probe_type.is_none_or(|probe| probe == summary.type_index) {
                    counts.probe.saturating_record(nanoseconds(execution));
                }
            }
            Ok(summary) => {
                counts.rolled_back += 1;
                if let Some((_, rolled_back, _, _)) = totals.get_mut(summary.type_index) {
                    *rolled_back += 1;
                }
            }
            Err(DbError::TooManyAborts { .. }) => counts.gave_up += 1,
            Err(error) => return Err(error),
        }
    }
    // The commits after the last interval count in the totals only.
    worker.wait_all_acknowledged(|tag, latency| {
        if let Some((committed, _, _, durable)) = totals.get_mut(tag as usize) {
            *committed += 1;
            durable.saturating_record(nanoseconds(latency));
        }
    })?;
    Ok(totals)
}

/// The probe transaction type of a workload: the queue's peeks (the scans
/// that walk whatever the engine left behind the head), else every type.
fn probe_type(workload: &dyn Workload) -> Option<usize> {
    match workload.name() {
        "queue" => Some(pmtx_workloads::queue::PEEK),
        _ => None,
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

fn optional_mib(bytes: Option<u64>) -> String {
    bytes.map_or("n/a".to_string(), mib)
}

/// Prints the column titles of the interval lines.
fn print_interval_header(probe: &str) {
    println!(
        "{:>9} {:>10} {:>9} {:>9} {:>9} {:>12} {:>8} {:>13} {:>9} {:>9} {:>5}",
        "elapsed",
        "tx/s",
        "RSS MiB",
        "anon MiB",
        "file MiB",
        "rows indexed",
        "absent",
        "rows unlinked",
        format!("{probe} p50"),
        format!("{probe} p99"),
        "load"
    );
}

fn print_interval(interval: &IntervalJson) {
    println!(
        "{:>8.0}s {:>10.0} {:>9} {:>9} {:>9} {:>12.0} {:>8} {:>13} {:>9} {:>9} {:>5}",
        interval.end_s,
        interval.throughput_tps,
        optional_mib(interval.rss_bytes),
        optional_mib(interval.rss_anon_bytes),
        optional_mib(interval.rss_file_bytes.map(|file| file + interval.rss_shmem_bytes.unwrap_or(0))),
        interval.rows_indexed_mean,
        interval.absent_rows_mean.map_or("n/a".to_string(), |absent| format!("{absent:.0}")),
        interval.rows_unlinked,
        format_us(interval.probe_p50_us),
        format_us(interval.probe_p99_us),
        interval.load_average.map_or("n/a".to_string(), |load| format!("{load:.2}"))
    );
}

/// Everything the main thread reads during and at the end of an interval.
struct Collector<'a> {
    database: &'a Database,
    workload: &'a dyn Workload,
    probe: Option<&'a dyn PoolProbe>,
    shared: &'a Shared,
    aborts_before: Vec<u64>,
    histogram: Histogram<u64>,
    /// Samples of `rows_indexed` in the current interval: count, sum, max.
    rows_samples: u64,
    rows_sum: f64,
    rows_max: u64,
    /// Sum of `rows_indexed` minus the live rows (workloads that count them).
    absent_sum: Option<f64>,
}

impl Collector<'_> {
    /// Samples `rows_indexed` (and the live rows) once.
    fn sample(&mut self) {
        let rows = self.database.stats().rows_indexed;
        self.rows_samples += 1;
        self.rows_sum += rows as f64;
        self.rows_max = self.rows_max.max(rows);
        if let Some(live) = self.workload.expected_rows() {
            *self.absent_sum.get_or_insert(0.0) += rows as f64 - live as f64;
        }
    }

    fn collect(&mut self, index: usize, start_s: f64, end_s: f64) -> IntervalJson {
        let mut interval = IntervalJson { index, start_s, end_s, ..IntervalJson::default() };
        self.histogram.reset();
        for (slot, counts) in self.shared.intervals.iter().enumerate() {
            let mut counts = lock(counts);
            interval.committed += std::mem::take(&mut counts.committed);
            interval.rolled_back += std::mem::take(&mut counts.rolled_back);
            interval.gave_up += std::mem::take(&mut counts.gave_up);
            interval.aborts += counts.aborts_total.saturating_sub(self.aborts_before[slot]);
            self.aborts_before[slot] = counts.aborts_total;
            // Merged and reset rather than replaced: the soak allocates no
            // new histograms while it measures memory.
            self.histogram.add(&counts.probe).expect("same bounds");
            counts.probe.reset();
        }
        let latency = LatencyJson::from_nanoseconds(&self.histogram);
        interval.probe_count = self.histogram.len();
        interval.probe_p50_us = latency.p50;
        interval.probe_p99_us = latency.p99;
        interval.throughput_tps = interval.committed as f64 / (end_s - start_s).max(f64::MIN_POSITIVE);
        interval.rss_bytes = resident_bytes();
        if let Some(kinds) = resident_kinds() {
            interval.rss_anon_bytes = Some(kinds.anon_bytes);
            interval.rss_file_bytes = Some(kinds.file_bytes);
            interval.rss_shmem_bytes = Some(kinds.shmem_bytes);
        }
        self.sample();
        let samples = self.rows_samples as f64;
        interval.rows_indexed_mean = self.rows_sum / samples;
        interval.rows_indexed_max = self.rows_max;
        interval.absent_rows_mean = self.absent_sum.map(|sum| sum / samples);
        (self.rows_samples, self.rows_sum, self.rows_max, self.absent_sum) = (0, 0.0, 0, None);
        let stats = self.database.stats();
        interval.rows_indexed = stats.rows_indexed;
        interval.live_rows = self.workload.expected_rows();
        interval.rows_unlinked = stats.rows_unlinked;
        interval.log_bytes = stats.log_bytes;
        interval.cache_bytes = stats.cache_bytes;
        interval.heap_chunks = stats.heap_chunks;
        interval.pool_used_bytes = self.probe.and_then(|probe| probe.usage()).map(|usage| usage.used_bytes);
        interval.load_average = load_average();
        interval
    }
}

/// Runs `pmtx soak`.
pub fn run(args: SoakArgs) -> Result<(), CliError> {
    args.validate()?;
    let (backend, pm) = args.pm.resolve()?;
    let options = args.workload_options.options();
    let workload = pmtx_workloads::by_name(&args.workload, &options).map_err(workload_error)?;
    workload.validate_threads(args.threads).map_err(workload_error)?;
    let engine = &args.engine;
    let duration = args.duration();
    let probe = probe_type(workload.as_ref());
    let probe_name = probe.map_or("all", |index| workload.transaction_types()[index]);
    let started_unix_seconds =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let load_average_start = load_average();

    println!(
        "pmtx soak: {} on {} x{} threads for {} min ({:.0} s), an interval every {} s, seed {}",
        workload.name(),
        engine,
        args.threads,
        args.minutes,
        duration.as_secs_f64(),
        args.interval.as_secs_f64(),
        args.seed
    );
    if !engine.kind.is_durable() {
        println!("note: {engine} is not durable: it ignores the pool and the PM backend");
    }

    let plan = DatabasePlan {
        engine,
        threads: args.threads,
        backend,
        pm: &pm,
        pool_path: match &args.pool_options.pool {
            Some(path) => path.clone(),
            None => pmtx_pm::temporary_pool_dir(args.pool_options.pool_size).join(format!(
                "pmtx-soak-{}-{}.pool",
                engine.file_label(),
                std::process::id()
            )),
        },
        keep_pool: args.pool_options.pool.is_some(),
        pool_size: args.pool_options.pool_size,
        epoch_interval: Duration::from_millis(args.pool_options.epoch_ms),
        checkpoint_interval: args.pool_options.checkpoint_interval(),
        prefault_chunks: args.pool_options.prefault_chunks,
        seed: args.seed,
    };
    let FreshDatabase { database, backend_info, probe: pool_probe, guard, .. } = open_fresh(workload.as_ref(), &plan)?;
    let database = Arc::new(database);
    let (backend_name, latency_model, durability) = match &backend_info {
        Some(info) => (
            info.kind.to_string(),
            info.latency.map_or("none", |model| model.name).to_string(),
            info.durability().to_string(),
        ),
        None => ("none".to_string(), "none".to_string(), format!("none: {} is not durable", engine.kind)),
    };
    println!("backend: {backend_name} | latency model: {latency_model} | durability: {durability}");

    let mut progress = Progress::new(3);
    let label = format!("soak: {} {} x{}", workload.name(), engine, args.threads);
    progress.phase(0, &format!("{label}: load"));
    let load_start = Instant::now();
    {
        let shared = Mutex::new(&mut progress);
        let name = format!("{label}: load");
        let report = |done: u64, total: u64| {
            if let Ok(mut progress) = shared.try_lock() {
                progress.update(0, &name, done as f64 / total.max(1) as f64);
            }
        };
        workload.load(&database, args.threads, &report).map_err(workload_error)?;
    }
    let load_s = load_start.elapsed().as_secs_f64();
    let rss_after_load_bytes = resident_bytes();
    let rows_indexed_after_load = database.stats().rows_indexed;
    progress.phase(1, &format!("{label}: run for {:.0} s", duration.as_secs_f64()));
    progress.finish();
    println!(
        "loaded in {load_s:.2} s: RSS {}, {rows_indexed_after_load} rows indexed; probe latency: execution time of {} \
         transactions (first attempt to commit, without the wait for durability)",
        rss_after_load_bytes.map_or("n/a".to_string(), format_size),
        if probe.is_some() { probe_name } else { "all" }
    );
    println!(
        "columns: RSS at the end of each interval (file: mapped files, the pool among them); rows indexed: mean of \
         samples every 100 ms; absent: of those, rows the workload does not count as live (deleted rows and \
         placeholders not yet unlinked); {probe_name} p50/p99: µs"
    );
    print_interval_header(probe_name);

    let shared = Shared {
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        intervals: (0..args.threads).map(|_| Mutex::new(IntervalCounts::new())).collect(),
    };
    let mut workers = Vec::with_capacity(args.threads);
    for index in 0..args.threads {
        workers.push(database.worker(index).map_err(db_error)?);
    }
    let mut intervals = Vec::new();
    let (results, run_s) = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(index, mut worker)| {
                let (workload, shared, args) = (workload.as_ref(), &shared, &args);
                std::thread::Builder::new().name(format!("pmtx-soak-{index}")).spawn_scoped(scope, move || {
                    let result = worker_loop(&mut worker, workload, index, args, probe, shared);
                    if result.is_err() {
                        shared.failed.store(true, Ordering::Relaxed);
                    }
                    result
                })
            })
            .collect();
        let start = Instant::now();
        let mut collector = Collector {
            database: &database,
            workload: workload.as_ref(),
            probe: pool_probe.as_deref(),
            shared: &shared,
            aborts_before: vec![0; args.threads],
            histogram: histogram(),
            rows_samples: 0,
            rows_sum: 0.0,
            rows_max: 0,
            absent_sum: None,
        };
        let total = duration.as_secs_f64();
        let step = args.interval.as_secs_f64();
        // Interval k ends on the schedule, at (k + 1) x step (the last at
        // the end of the run): how late a collection runs changes where the
        // next interval starts, never how many there are.
        let count = (total / step - 1e-9).ceil().max(1.0) as usize;
        let mut interval_start = 0.0;
        for index in 0..count {
            if handles.iter().any(Result::is_err) {
                break;
            }
            let interval_end = ((index + 1) as f64 * step).min(total);
            // Wake up every 100 ms to sample the index and notice a failed
            // worker.
            loop {
                let now = start.elapsed().as_secs_f64();
                if now >= interval_end || shared.failed.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_secs_f64((interval_end - now).min(0.1)));
                collector.sample();
            }
            if shared.failed.load(Ordering::Relaxed) {
                break;
            }
            let interval = collector.collect(index, interval_start, start.elapsed().as_secs_f64());
            print_interval(&interval);
            interval_start = interval.end_s;
            intervals.push(interval);
        }
        shared.stop.store(true, Ordering::Relaxed);
        let run_s = start.elapsed().as_secs_f64();
        let results: Vec<_> = handles
            .into_iter()
            .map(|handle| match handle {
                Ok(handle) => handle.join().map_err(|_| CliError::runtime("a soak worker thread panicked")),
                Err(error) => Err(CliError::runtime(format!("cannot start worker threads: {error}"))),
            })
            .collect();
        (results, run_s)
    });
    let load_average_end = load_average();

    let types = workload.transaction_types();
    let mut totals: TypeTotals = (0..types.len()).map(|_| (0, 0, histogram(), histogram())).collect();
    for result in results {
        match result? {
            Ok(thread) => {
                for ((c, r, e, d), (tc, tr, te, td)) in totals.iter_mut().zip(&thread) {
                    *c += tc;
                    *r += tr;
                    e.add(te).expect("same bounds");
                    d.add(td).expect("same bounds");
                }
            }
            Err(error) => return Err(CliError::runtime(format!("{label}: a worker failed: {error}"))),
        }
    }

    progress.phase(2, &format!("{label}: check"));
    let (check_passed, check_failures) = match workload.check(&database) {
        Ok(report) => {
            (report.passed(), report.failures().map(|(name, _, detail)| format!("{name}: {detail}")).collect())
        }
        Err(error) => (false, vec![error.to_string()]),
    };
    progress.finish();
    drop(pool_probe);
    Arc::try_unwrap(database)
        .map_err(|_| CliError::runtime(format!("{label}: the database is still in use after the run")))?
        .close()
        .map_err(|error| CliError::runtime(format!("{label}: close failed: {error}")))?;
    drop(guard);

    let summary = summary::summarize(&intervals, Thresholds::default());
    let per_type: BTreeMap<String, SoakTypeJson> = types
        .iter()
        .zip(&totals)
        .map(|(name, (committed, rolled_back, execution, durable))| {
            let json = SoakTypeJson {
                committed: *committed,
                rolled_back: *rolled_back,
                execution_us: LatencyJson::from_nanoseconds(execution),
                durable_us: LatencyJson::from_nanoseconds(durable),
            };
            (name.to_string(), json)
        })
        .collect();
    print_summary(&intervals, summary.as_ref(), probe_name);
    println!();
    println!("per transaction type (whole run; execution: first attempt to commit; durable: to the acknowledgement):");
    print!("{}", type_table(types, &per_type));
    println!(
        "load average (1 min): {} at the start, {} at the end; {} cpus",
        load_average_start.map_or("n/a".to_string(), |load| format!("{load:.2}")),
        load_average_end.map_or("n/a".to_string(), |load| format!("{load:.2}")),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("consistency check: {}", if check_passed { "passed" } else { "FAILED" });
    for failure in &check_failures {
        println!("  check failed: {failure}");
    }

    let report = SoakReport {
        config: SoakConfigJson {
            workload: workload.name().to_string(),
            workload_options: WorkloadOptionsJson::new(&options),
            engine: engine.label(),
            engine_name: engine.kind.name().to_string(),
            engine_options: engine.effective_options(),
            threads: args.threads,
            minutes: args.minutes,
            interval_s: args.interval.as_secs_f64(),
            probe: probe_name.to_string(),
            backend: backend_name,
            latency_model,
            durability,
            epoch_ms: args.pool_options.epoch_ms,
            checkpoint_s: args.pool_options.checkpoint_s,
            pool_size_bytes: args.pool_options.pool_size,
            pool: args.pool_options.pool.as_ref().map(|path| path.display().to_string()),
            seed: args.seed,
            git_revision: crate::bench::git_revision(),
            pmtx_version: env!("CARGO_PKG_VERSION").to_string(),
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            started_unix_seconds,
        },
        load_s,
        rss_after_load_bytes,
        rows_indexed_after_load,
        run_s,
        intervals,
        summary,
        per_type,
        load_average_start,
        load_average_end,
        check_passed,
        check_failures,
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|error| CliError::runtime(format!("{}: cannot write JSON: {error}", path.display())))?;
        println!("wrote {}", path.display());
    }
    if report.check_passed {
        Ok(())
    } else {
        Err(CliError::runtime(format!("{label}: consistency check failed after the soak")))
    }
}

fn print_summary(intervals: &[IntervalJson], summary: Option<&SummaryJson>, probe: &str) {
    println!();
    let (Some(summary), Some(unlinked)) = (summary, intervals.last().map(|last| last.rows_unlinked)) else {
        println!("summary: no interval completed");
        return;
    };
    let (base, last) = (&summary.baseline, &summary.last);
    let window = |window: &summary::WindowJson| {
        let numbers = if window.first_interval == window.last_interval {
            format!("interval {}", window.first_interval + 1)
        } else {
            format!("intervals {}-{}", window.first_interval + 1, window.last_interval + 1)
        };
        format!("{numbers}, {:.0}-{:.0} s", window.start_s, window.end_s)
    };
    if summary.baseline_after_first_minute {
        println!(
            "summary: medians of the minute after the first ({}) against the last minute ({})",
            window(base),
            window(last)
        );
    } else {
        println!(
            "summary: the run has no interval after its first minute: its first interval ({}) against its last ({})",
            window(base),
            window(last)
        );
    }
    let signed_mib = |bytes: i64| format!("{}{} MiB", if bytes < 0 { "-" } else { "+" }, mib(bytes.unsigned_abs()));
    let delta = |before: Option<u64>, after: Option<u64>| {
        before.zip(after).map_or("n/a".to_string(), |(before, after)| signed_mib(after as i64 - before as i64))
    };
    println!(
        "  RSS:          {} -> {} ({}, {}); anon {}, file {}",
        base.rss_bytes.map_or("n/a".to_string(), format_size),
        last.rss_bytes.map_or("n/a".to_string(), format_size),
        summary.rss_growth_bytes.map_or("n/a".to_string(), signed_mib),
        summary.rss_growth_percent.map_or("n/a".to_string(), |percent| format!("{percent:+.1}%")),
        delta(base.rss_anon_bytes, last.rss_anon_bytes),
        delta(base.rss_file_bytes, last.rss_file_bytes)
    );
    let ratio = |value: Option<f64>| value.map_or("n/a".to_string(), |value| format!("{value:.2}"));
    println!(
        "  {probe} latency: p50 {} -> {} µs (ratio {}), p99 {} -> {} µs (ratio {})",
        format_us(base.probe_p50_us),
        format_us(last.probe_p50_us),
        ratio(summary.probe_p50_ratio),
        format_us(base.probe_p99_us),
        format_us(last.probe_p99_us),
        ratio(summary.probe_p99_ratio)
    );
    let rows = |rows: Option<f64>| rows.map_or("n/a".to_string(), |rows| format!("{rows:.0}"));
    println!(
        "  rows indexed: {:.0} -> {:.0} (ratio {}); live {} -> {}; absent {} -> {} (ratio {}); unlinked in all: {}",
        base.rows_indexed_mean,
        last.rows_indexed_mean,
        ratio(summary.rows_indexed_ratio),
        rows(base.live_rows.map(|live| live as f64)),
        rows(last.live_rows.map(|live| live as f64)),
        rows(base.absent_rows_mean),
        rows(last.absent_rows_mean),
        ratio(summary.absent_rows_ratio),
        unlinked
    );
    if let (Some(before), Some(after)) = (base.pool_used_bytes, last.pool_used_bytes) {
        // Pool pages stay resident once touched: a flat "in use" with a
        // growing file part means the engine writes fresh chunks rather
        // than holding more data.
        println!(
            "  pool:         chunks in use {} -> {}; its pages are in the file part of the RSS",
            format_bytes(before),
            format_bytes(after)
        );
    }
    println!(
        "  throughput:   {:.0} -> {:.0} tx/s; load average {} -> {}",
        base.throughput_tps,
        last.throughput_tps,
        ratio(base.load_average),
        ratio(last.load_average)
    );
    if summary.reasons.is_empty() {
        println!("verdict: flat ({})", summary.thresholds.describe());
    } else {
        println!("verdict: growing: {} ({})", summary.reasons.join("; "), summary.thresholds.describe());
    }
}

fn type_table(types: &[&str], per_type: &BTreeMap<String, SoakTypeJson>) -> String {
    let mut table = crate::bench::report::Table::new(&[
        "type",
        "committed",
        "rolled back",
        "exec p50 µs",
        "exec p99 µs",
        "durable p50 µs",
        "durable p99 µs",
    ]);
    for name in types {
        let Some(json) = per_type.get(*name) else { continue };
        table.row(vec![
            name.to_string(),
            json.committed.to_string(),
            json.rolled_back.to_string(),
            format_us(json.execution_us.p50),
            format_us(json.execution_us.p99),
            format_us(json.durable_us.p50),
            format_us(json.durable_us.p99),
        ]);
    }
    table.render(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_engine_only_and_positive_minutes() {
        assert_eq!(parse_one_engine("zen:cache=64MiB").unwrap().label(), "zen:cache=64MiB");
        let error = parse_one_engine("dbxn-ablation").unwrap_err();
        assert!(error.contains("expands to 8 engines"), "{error}");
        assert!(parse_one_engine("nope").unwrap_err().contains("valid engines"));
        let spec = parse_one_engine("zen:cc=no-wait").unwrap();
        assert_eq!((spec.label().as_str(), spec.cc), ("zen:cc=no-wait", pmtx_engine::CcProtocol::NoWait));
        assert!(parse_one_engine("zen-cc-matrix").unwrap_err().contains("soak runs one engine"));
        assert_eq!(parse_minutes("0.05"), Ok(0.05));
        for bad in ["0", "-1", "x", "nan", "inf", "100000"] {
            assert!(parse_minutes(bad).is_err(), "{bad:?}");
        }
    }
}
