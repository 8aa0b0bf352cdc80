//! `pmtx bench --replicas N`: the workload on a cluster of N nodes in this
//! process (Raft over TCP on loopback), beside the same engine on one
//! local database, with the same client loop, one after the other.
//!
//! Every pool is loaded on its own with the workload's load (one loader
//! thread, the same seed), before Raft starts: the load is not replicated,
//! the measured transactions are. The leader runs the clients on
//! replicated workers; followers replay. Reported per engine and thread
//! count: committed transactions per second, p50 and p99 commit latency
//! (to the acknowledgement), and, replicated, the bytes the leader sent per
//! transaction and transactions per log entry.

use super::args::BenchArgs;
use super::runner::{db_error, workload_error};
use crate::error::CliError;
use pmtx_engine::spec::EngineSpec;
use pmtx_engine::{Database, DbOptions, PoolLocation, Worker};
use pmtx_replica::{ReplicaOptions, ReplicatedDatabase};
use pmtx_workloads::Workload;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Commits a client thread may have waiting for acknowledgement.
const MAX_IN_FLIGHT: usize = 256;

/// What one measured run gave.
struct Measured {
    committed: u64,
    seconds: f64,
    latencies: hdrhistogram::Histogram<u64>,
}

impl Measured {
    fn throughput(&self) -> f64 {
        self.committed as f64 / self.seconds
    }
    fn quantile_us(&self, quantile: f64) -> f64 {
        self.latencies.value_at_quantile(quantile) as f64 / 1_000.0
    }
}

/// Runs `threads` clients on the workers for `warmup` then `duration`;
/// counts acknowledged commits of the measured part.
fn drive(
    workload: &dyn Workload,
    workers: Vec<Worker>,
    seed: u64,
    warmup: Duration,
    duration: Duration,
) -> Result<Measured, CliError> {
    let threads = workers.len();
    let measuring = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let totals = Mutex::new((0u64, hdrhistogram::Histogram::<u64>::new(3).expect("3 significant digits")));
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let mut measured_from = Instant::now();
    std::thread::scope(|scope| {
        for (index, mut worker) in workers.into_iter().enumerate() {
            let (measuring, stop, totals, failure) = (&measuring, &stop, &totals, &failure);
            let mut client = workload.client(index, threads, seed);
            scope.spawn(move || {
                let mut committed = 0u64;
                let mut latencies = hdrhistogram::Histogram::<u64>::new(3).expect("3 significant digits");
                let mut acknowledge = |_: u32, latency: Duration| {
                    if measuring.load(Ordering::Relaxed) {
                        committed += 1;
                        let _ = latencies.record(latency.as_nanos() as u64);
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    // Pipelined commits waiting for acknowledgement are
                    // bounded, so latency measures the commit path and not
                    // a queue that grows for the whole run.
                    while worker.pending_acknowledgements() >= MAX_IN_FLIGHT && !stop.load(Ordering::Relaxed) {
                        worker.drain_acknowledged(&mut acknowledge);
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    if let Err(error) = client.run_next(&mut worker) {
                        *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
                        break;
                    }
                    worker.drain_acknowledged(&mut acknowledge);
                }
                let _ = worker.wait_all_acknowledged(&mut acknowledge);
                let mut totals = totals.lock().unwrap_or_else(|e| e.into_inner());
                totals.0 += committed;
                let _ = totals.1.add(&latencies);
            });
        }
        std::thread::sleep(warmup);
        measured_from = Instant::now();
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(duration);
        measuring.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
    });
    let seconds = duration.as_secs_f64().min(measured_from.elapsed().as_secs_f64());
    if let Some(failure) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(CliError::runtime(format!("a client failed: {failure}")));
    }
    let (committed, latencies) = totals.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(Measured { committed, seconds, latencies })
}

/// The options of a pool for `engine` at `path`, with `tables`.
fn pool_options(
    args: &BenchArgs,
    engine: &EngineSpec,
    tables: Vec<pmtx_engine::TableSchema>,
    path: &Path,
    threads: usize,
) -> Result<DbOptions, CliError> {
    let (backend, pm) = args.pm.resolve()?;
    let mut options = DbOptions::new(engine.kind, tables, path).create_if_missing(true);
    options.workers = threads;
    options.backend = backend;
    options.pm = pm;
    options.seed = args.seed;
    options.epoch_interval = Duration::from_millis(args.pool_options.epoch_ms);
    options.checkpoint_interval = args.pool_options.checkpoint_interval();
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: args.pool_options.pool_size };
    engine.apply(&mut options, args.seed);
    Ok(options)
}

/// Creates and loads a pool, then closes it.
fn load(workload: &dyn Workload, options: DbOptions) -> Result<(), CliError> {
    let _ = std::fs::remove_file(pool_file(&options));
    let db = Arc::new(Database::open(options).map_err(db_error)?);
    workload.load(&db, 1, &|_, _| {}).map_err(workload_error)?;
    let db = Arc::try_unwrap(db).map_err(|_| CliError::runtime("the loader kept the database"))?;
    db.close().map_err(db_error)
}

fn pool_file(options: &DbOptions) -> PathBuf {
    match &options.pool {
        PoolLocation::File { path, .. } => path.clone(),
        PoolLocation::InMemory { .. } => PathBuf::new(),
    }
}

/// Removes the pool files of a run when dropped.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
            let mut snapshot = path.as_os_str().to_owned();
            snapshot.push(".snapshot");
            let _ = std::fs::remove_file(PathBuf::from(snapshot));
        }
    }
}

/// Runs the replicated comparison for every engine and thread count.
pub fn run(args: &BenchArgs, workload: &dyn Workload, replicas: u64) -> Result<(), CliError> {
    let pid = std::process::id();
    let directory = match &args.pool_options.pool {
        Some(path) => path.parent().map(Path::to_path_buf).unwrap_or_default(),
        None => pmtx_pm::temporary_pool_dir(args.pool_options.pool_size),
    };
    eprintln!(
        "pmtx bench --replicas {replicas}: {} nodes in this process, Raft over TCP on 127.0.0.1; \
         each pool loaded on its own (the load is not replicated); then {}s of {} on the leader, \
         beside the same engine on one local pool",
        replicas,
        args.duration.as_secs_f64(),
        workload.name()
    );
    println!(
        "{:<14} {:>7} {:>12} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "engine",
        "threads",
        "local tx/s",
        "repl tx/s",
        "ratio",
        "local p50",
        "repl p50",
        "local p99",
        "repl p99",
        "bytes/tx",
        "tx/entry"
    );
    for engine in args.engines() {
        if !engine.kind.is_durable() {
            return Err(CliError::usage(format!(
                "--replicas: engine {} is not durable; a replica's pool must keep what it acknowledged",
                engine.label()
            )));
        }
        for &threads in &args.threads {
            workload.validate_threads(threads).map_err(workload_error)?;
            let name = engine.file_label();
            // The same engine on one local pool.
            let local_path = directory.join(format!("pmtx-bench-{name}-{pid}-local.pool"));
            let _cleanup = Cleanup(vec![local_path.clone()]);
            let options = pool_options(args, &engine, workload.tables(), &local_path, threads)?;
            load(workload, options.clone())?;
            let db = Database::open(options.create_if_missing(false)).map_err(db_error)?;
            let workers = (0..threads).map(|id| db.worker(id)).collect::<Result<Vec<_>, _>>().map_err(db_error)?;
            let local = drive(workload, workers, args.seed, args.warmup, args.duration)?;
            db.close().map_err(db_error)?;

            // The cluster.
            let paths: Vec<PathBuf> =
                (1..=replicas).map(|id| directory.join(format!("pmtx-bench-{name}-{pid}-node{id}.pool"))).collect();
            let _cleanup_nodes = Cleanup(paths.clone());
            let tables = pmtx_replica::pool_tables(workload.tables());
            let mut nodes = Vec::new();
            for (id, path) in (1..=replicas).zip(&paths) {
                let options = pool_options(args, &engine, tables.clone(), path, threads)?;
                load(workload, options.clone())?;
                let mut replica = ReplicaOptions::new(id, options.create_if_missing(false), "127.0.0.1:0");
                replica.election_timeout_ms = (300, 600);
                // A snapshot dumps every table: none during a short run.
                replica.snapshot_every = 1_000_000;
                nodes.push(ReplicatedDatabase::open(replica).map_err(|error| CliError::runtime(error.to_string()))?);
            }
            let members: Vec<_> = nodes.iter().map(|node| (node.id(), node.addr().to_string())).collect();
            nodes[0].initialize(&members).map_err(|error| CliError::runtime(error.to_string()))?;
            let deadline = Instant::now() + Duration::from_secs(20);
            let leader = loop {
                if let Some(leader) = nodes.iter().find(|node| node.is_leader()) {
                    break leader;
                }
                if Instant::now() > deadline {
                    return Err(CliError::runtime("the cluster elected no leader within 20 s"));
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let workers = (0..threads)
                .map(|id| leader.worker(id))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| CliError::runtime(error.to_string()))?;
            let (bytes_before, entries_before) = (leader.bytes_sent(), leader.status().last_log_index.unwrap_or(0));
            let replicated = drive(workload, workers, args.seed, args.warmup, args.duration)?;
            let (bytes, entries) =
                (leader.bytes_sent() - bytes_before, leader.status().last_log_index.unwrap_or(0) - entries_before);
            // Bytes and entries cover the warm-up too: per transaction of
            // the whole run, estimated from the measured rate.
            let total_seconds = (args.warmup + args.duration).as_secs_f64();
            let transactions = replicated.throughput() * total_seconds;
            println!(
                "{:<14} {:>7} {:>12.0} {:>12.0} {:>6.2}x {:>8.1}us {:>8.1}us {:>8.1}us {:>8.1}us {:>9.0} {:>9.1}",
                engine.label(),
                threads,
                local.throughput(),
                replicated.throughput(),
                replicated.throughput() / local.throughput(),
                local.quantile_us(0.5),
                replicated.quantile_us(0.5),
                local.quantile_us(0.99),
                replicated.quantile_us(0.99),
                bytes as f64 / transactions.max(1.0),
                transactions / (entries.max(1) as f64),
            );
            for node in nodes {
                node.shutdown().map_err(|error| CliError::runtime(error.to_string()))?;
            }
        }
    }
    eprintln!(
        "bytes/tx: bytes of Raft messages the leader sent to all followers per committed transaction; \
         tx/entry: transactions per Raft log entry (batching)"
    );
    Ok(())
}
