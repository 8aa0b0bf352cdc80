//! The process-kill mode: the workload runs in a child process on a real
//! pool file (`Direct` backend); the parent kills it with `SIGKILL` at a
//! seeded random moment, recovers and checks the oracles.
//!
//! Protocol (child stdout, one line each, flushed):
//!
//! ```text
//! ready <iteration> <seq of worker 0>,<seq of worker 1>,...   recovery done
//! C <worker> <seq> <order id or ->                            commit returned
//! A <worker> <seq>                                            acknowledged (durable)
//! error <message>                                             the child failed
//! full <message>                                              out of pool space (the
//!                                                             parent starts over)
//! ```
//!
//! A process crash keeps the page cache, so everything the child stored
//! survives; every acknowledged commit must be recovered. For each worker
//! the recovered sequence must lie between the last `A` line and one past
//! the last `C` line (the transaction in flight), and the modelled rows must
//! equal the verified state before the child plus exactly the effects of
//! the recovered transactions. One in five kills is aimed at the child's
//! start (possibly during its recovery). After the checks the parent
//! recovers the pool a second time (same state required), sometimes closing
//! it cleanly, and the verified state becomes the next iteration's baseline.

use crate::harness::{Baseline, Bounds, Harness, WorkerError, WorkerEvents, WorkerPlan};
use crate::recover::{recover_with, Expectation};
use crate::{db_options, derive, parse_seed, Finding, Scale, Violation, WorkloadKind};
use pmtx_engine::{CcProtocol, Database, DbOptions, EngineKind, LogDirectory, LogMedium, PoolLocation};
use pmtx_pm::{BackendKind, Direct, Pool, PoolError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What the child process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildConfig {
    /// Engine.
    pub engine: EngineKind,
    /// Medium of the engine's log (`dbx-naive`: pm or disk).
    pub medium: LogMedium,
    /// Concurrency-control protocol of the engine.
    pub cc: CcProtocol,
    /// Workload.
    pub workload: WorkloadKind,
    /// Database size.
    pub scale: Scale,
    /// Worker threads.
    pub threads: usize,
    /// Seed of the harness transactions.
    pub seed: u64,
    /// Pool file (exists: the parent loaded it).
    pub pool: PathBuf,
    /// Pool size (bytes).
    pub pool_size: u64,
    /// Chunk size (bytes).
    pub chunk_size: u64,
    /// Kill iteration (for the `ready` line).
    pub iteration: u64,
    /// Checkpoint period in milliseconds (0: none).
    pub checkpoint_ms: u64,
    /// The harness's control (`KillConfig::fake_ack`): acknowledge
    /// pipelined commits when they return, with durability stalled.
    pub fake_ack: bool,
}

impl ChildConfig {
    /// The command-line flags of this configuration (the `pmtx crashtest`
    /// flags of the same names, plus `--pool` and `--iteration`; a bare
    /// `--fake-ack` last when set).
    pub fn to_args(&self) -> Vec<String> {
        let pairs = [
            ("--engine", crate::engine_label(self.engine, self.medium)),
            ("--cc", self.cc.name().to_string()),
            ("--workload", self.workload.name().to_string()),
            ("--threads", self.threads.to_string()),
            ("--seed", format!("{:#x}", self.seed)),
            ("--pool", self.pool.display().to_string()),
            ("--pool-size", self.pool_size.to_string()),
            ("--chunk-size", self.chunk_size.to_string()),
            ("--iteration", self.iteration.to_string()),
            ("--checkpoint-ms", self.checkpoint_ms.to_string()),
            ("--accounts", self.scale.accounts.to_string()),
            ("--records", self.scale.records.to_string()),
            ("--tpcc-items", self.scale.tpcc_items.to_string()),
            ("--tpcc-customers", self.scale.tpcc_customers.to_string()),
        ];
        let mut args: Vec<String> = pairs.into_iter().flat_map(|(flag, value)| [flag.to_string(), value]).collect();
        if self.fake_ack {
            args.push(FAKE_ACK_FLAG.to_string());
        }
        args
    }

    /// Parses [`ChildConfig::to_args`] output (unknown flags are errors;
    /// `--cc` may be missing: silo).
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut values: HashMap<&str, &str> = HashMap::new();
        let mut fake_ack = false;
        let mut iter = args.iter();
        while let Some(flag) = iter.next() {
            if flag == FAKE_ACK_FLAG {
                fake_ack = true;
                continue;
            }
            let value = iter.next().ok_or_else(|| format!("{flag} needs a value"))?;
            values.insert(flag.as_str(), value.as_str());
        }
        let take = |flag: &str| values.get(flag).copied().ok_or_else(|| format!("missing {flag}"));
        let number = |flag: &str| -> Result<u64, String> {
            let text = take(flag)?;
            parse_seed(text).ok_or_else(|| format!("{flag}: not a number: {text:?}"))
        };
        for flag in values.keys() {
            if !Self::FLAGS.contains(flag) {
                return Err(format!("unknown flag {flag}"));
            }
        }
        let spec = crate::parse_engine(take("--engine")?)?;
        Ok(Self {
            engine: spec.kind,
            medium: spec.dbxn.medium,
            cc: match values.get("--cc") {
                Some(name) => CcProtocol::parse(name).ok_or_else(|| format!("unknown protocol {name:?}"))?,
                None => spec.cc,
            },
            workload: WorkloadKind::parse(take("--workload")?).ok_or("unknown workload")?,
            scale: Scale {
                accounts: number("--accounts")?,
                records: number("--records")?,
                tpcc_items: number("--tpcc-items")? as u32,
                tpcc_customers: number("--tpcc-customers")? as u32,
            },
            threads: number("--threads")? as usize,
            seed: number("--seed")?,
            pool: PathBuf::from(take("--pool")?),
            pool_size: number("--pool-size")?,
            chunk_size: number("--chunk-size")?,
            iteration: number("--iteration")?,
            checkpoint_ms: number("--checkpoint-ms")?,
            fake_ack,
        })
    }

    const FLAGS: [&'static str; 14] = [
        "--engine",
        "--cc",
        "--workload",
        "--threads",
        "--seed",
        "--pool",
        "--pool-size",
        "--chunk-size",
        "--iteration",
        "--checkpoint-ms",
        "--accounts",
        "--records",
        "--tpcc-items",
        "--tpcc-customers",
    ];
}

/// The child's flag of [`ChildConfig::fake_ack`] (no value).
const FAKE_ACK_FLAG: &str = "--fake-ack";

/// An epoch interval no run reaches: the child of the fake-acknowledgement
/// control makes no commit durable after its open.
const STALLED_EPOCHS: Duration = Duration::from_secs(24 * 3600);

/// Database options over the pool file.
#[allow(clippy::too_many_arguments)]
fn file_options(
    engine: EngineKind,
    medium: LogMedium,
    cc: CcProtocol,
    harness: &Harness,
    path: PathBuf,
    pool_size: u64,
    chunk_size: u64,
    seed: u64,
) -> DbOptions {
    let mut options = db_options(engine, harness.tables(), harness.threads(), seed, pool_size, chunk_size);
    options.cc = cc;
    options.dbxn.medium = medium;
    options.pool = PoolLocation::File { path, size: pool_size };
    // A log kept in files goes beside the pool file, as outside the harness.
    options.log_directory = LogDirectory::BesidePool;
    options.backend = BackendKind::Direct;
    options
}

struct LineEvents<'a> {
    worker: usize,
    out: &'a Mutex<std::io::Stdout>,
}

impl LineEvents<'_> {
    fn emit(&self, line: std::fmt::Arguments<'_>) {
        let mut out = self.out.lock().unwrap_or_else(|poison| poison.into_inner());
        if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
            // The parent is gone.
            std::process::exit(5);
        }
    }
}

impl WorkerEvents for LineEvents<'_> {
    fn started(&mut self, _s: u64) {}

    fn committed(&mut self, s: u64, order: Option<u32>) {
        match order {
            Some(order) => self.emit(format_args!("C {} {s} {order}", self.worker)),
            None => self.emit(format_args!("C {} {s} -", self.worker)),
        }
    }

    fn acknowledged(&mut self, s: u64) {
        self.emit(format_args!("A {} {s}", self.worker));
    }
}

/// The child: open (recover) the pool, report `ready`, run the harness
/// workers until killed. Returns the process exit code (it only returns on
/// failure).
pub fn child_main(config: &ChildConfig) -> i32 {
    let out = Mutex::new(std::io::stdout());
    let fail = |message: String| {
        let mut out = out.lock().unwrap_or_else(|poison| poison.into_inner());
        let _ = writeln!(out, "error {}", message.replace('\n', " "));
        let _ = out.flush();
        eprintln!("pmtx crashtest child: {message}");
        2
    };
    // Never outlive a lost parent for long.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(300));
        std::process::exit(4);
    });
    let harness = match Harness::new(config.workload, config.scale, config.threads, config.seed) {
        Ok(harness) => harness,
        Err(error) => return fail(error),
    };
    let mut options = file_options(
        config.engine,
        config.medium,
        config.cc,
        &harness,
        config.pool.clone(),
        config.pool_size,
        config.chunk_size,
        config.seed,
    );
    if config.fake_ack {
        // The control: no epoch after the open becomes durable, and the
        // workers report their pipelined commits as acknowledged when they
        // return, so every `A` line is a commit a kill loses.
        options.epoch_interval = STALLED_EPOCHS;
    }
    let db = match retry_locked(
        || Database::open(options.clone()),
        |error| matches!(error, pmtx_engine::DbError::Pool(PoolError::Locked(_))),
    ) {
        Ok(db) => Arc::new(db),
        Err(error) => return fail(format!("open/recovery failed: {error}")),
    };
    let seqs = match harness
        .read_state(&db)
        .map_err(|f| f.detail)
        .and_then(|state| harness.seqs_of(&state).map_err(|f| f.detail))
    {
        Ok(seqs) => seqs,
        Err(error) => return fail(format!("reading the recovered state failed: {error}")),
    };
    {
        let list: Vec<String> = seqs.iter().map(u64::to_string).collect();
        let mut stdout = out.lock().unwrap();
        if writeln!(stdout, "ready {} {}", config.iteration, list.join(",")).and_then(|_| stdout.flush()).is_err() {
            return 5;
        }
    }
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<WorkerError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for (worker, &seq) in seqs.iter().enumerate() {
            let (db, harness, stop, out, failure) = (&db, &harness, &stop, &out, &failure);
            scope.spawn(move || {
                let mut events = LineEvents { worker, out };
                let plan = WorkerPlan { id: worker, first: seq + 1, count: None, fake_ack: config.fake_ack };
                if let Err(error) = harness.run_worker(db, plan, stop, &mut events) {
                    failure.lock().unwrap().get_or_insert(error);
                    stop.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
        // The control takes no checkpoints (a checkpoint makes the data it
        // copies durable).
        if config.checkpoint_ms > 0 && !config.fake_ack {
            let (db, stop, failure) = (&db, &stop, &failure);
            scope.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(config.checkpoint_ms));
                    if let Err(error) = db.checkpoint() {
                        let message = format!("checkpoint failed: {error}");
                        let error = match error {
                            pmtx_engine::DbError::OutOfSpace(_) => WorkerError::OutOfSpace(message),
                            _ => WorkerError::Failed(message),
                        };
                        failure.lock().unwrap().get_or_insert(error);
                        stop.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
    });
    match failure.into_inner().unwrap() {
        Some(WorkerError::OutOfSpace(message)) => {
            // The database outgrew the pool (TPC-C grows): say so and wait
            // for the kill; the parent starts over with a fresh pool.
            {
                let mut stdout = out.lock().unwrap_or_else(|poison| poison.into_inner());
                let _ = writeln!(stdout, "full {}", message.replace('\n', " "));
                let _ = stdout.flush();
            }
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        Some(WorkerError::Failed(message)) => fail(message),
        None => fail("the workers stopped".to_string()),
    }
}

/// Retries `open` while it fails because the pool file is locked, for up to
/// 5 s. The lock of a pool can outlive its holder briefly: a process that
/// forks (any thread spawning a child, e.g. another test in the same test
/// binary) keeps a copy of every descriptor, and thus of the `flock`, until
/// it execs.
fn retry_locked<T, E>(mut open: impl FnMut() -> Result<T, E>, locked: impl Fn(&E) -> bool) -> Result<T, E> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match open() {
            Err(error) if locked(&error) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return result,
        }
    }
}

fn open_pool(path: &std::path::Path, options: &DbOptions) -> pmtx_pm::PoolResult<Pool<Direct>> {
    retry_locked(|| Pool::<Direct>::open(path, &options.pm), |error| matches!(error, PoolError::Locked(_)))
}

/// Configuration of the kill mode.
#[derive(Clone, Debug)]
pub struct KillConfig {
    /// Engine.
    pub engine: EngineKind,
    /// Medium of the engine's log (`dbx-naive`: pm or disk).
    pub medium: LogMedium,
    /// Concurrency-control protocol of the engine (default: silo).
    pub cc: CcProtocol,
    /// Workload.
    pub workload: WorkloadKind,
    /// Database size.
    pub scale: Scale,
    /// Worker threads of the child.
    pub threads: usize,
    /// Kill iterations.
    pub iterations: u64,
    /// Seed.
    pub seed: u64,
    /// Pool file size.
    pub pool_size: u64,
    /// Chunk size.
    pub chunk_size: u64,
    /// Kills happen up to this long after the child reported `ready`.
    pub max_kill_delay: Duration,
    /// Checkpoint period of the child (ms, 0: none).
    pub checkpoint_ms: u64,
    /// The program to run as the child, and the arguments before the
    /// [`ChildConfig::to_args`] flags (e.g. `pmtx` and `crashtest --child`).
    pub program: PathBuf,
    /// Arguments before the child flags.
    pub program_args: Vec<String>,
    /// Directory for the pool file (default: the system temp dir).
    pub dir: Option<PathBuf>,
    /// Keep at most this many violations in the report.
    pub max_reported: usize,
    /// A kill aimed after `ready` waits until the child reported at least
    /// this many acknowledgements, so every such iteration crashes a run
    /// with acknowledged commits to lose (a child that reaches none within
    /// a minute is a violation).
    pub min_acks_before_kill: u64,
    /// The harness's control (group-commit only): the child stalls its
    /// epochs and takes no checkpoints, so no commit after its open
    /// becomes durable, and reports
    /// each pipelined commit as acknowledged when it returns; every kill
    /// after an acknowledgement must then be reported as a lost
    /// acknowledged commit.
    pub fake_ack: bool,
}

impl KillConfig {
    /// Defaults: silo's concurrency control, 2 threads, 20 iterations,
    /// kills within 150 ms, 32 MiB pool.
    pub fn new(
        engine: EngineKind,
        workload: WorkloadKind,
        seed: u64,
        program: PathBuf,
        program_args: Vec<String>,
    ) -> Self {
        Self {
            engine,
            medium: LogMedium::Pm,
            cc: engine.default_cc(),
            workload,
            scale: Scale::default(),
            threads: 2,
            iterations: 20,
            seed,
            pool_size: 32 << 20,
            chunk_size: 256 << 10,
            max_kill_delay: Duration::from_millis(150),
            checkpoint_ms: 10,
            program,
            program_args,
            dir: None,
            max_reported: 50,
            min_acks_before_kill: 16,
            fake_ack: false,
        }
    }

    /// The command line that repeats this run.
    pub fn command_line(&self) -> String {
        format!(
            "pmtx crashtest --kill --engine {}{} --workload {} --iterations {} --seed {:#x} --threads {} --pool-size {} \
             --chunk-size {} --max-kill-ms {} --min-acks {}{}{}",
            crate::engine_label(self.engine, self.medium),
            crate::cc_flag(self.engine, self.cc),
            self.workload,
            self.iterations,
            self.seed,
            self.threads,
            self.pool_size,
            self.chunk_size,
            self.max_kill_delay.as_millis(),
            self.min_acks_before_kill,
            crate::harness::scale_flags(&self.scale),
            if self.fake_ack { " --fake-ack" } else { "" }
        )
    }
}

/// Result of the kill mode.
#[derive(Clone, Debug, Default)]
pub struct KillReport {
    /// Iterations run.
    pub iterations: u64,
    /// Kills aimed at the child's start (before it reported `ready`).
    pub early_kills: u64,
    /// Kills aimed after `ready` whose child had reported at least
    /// `min_acks_before_kill` acknowledgements first.
    pub kills_after_acks: u64,
    /// Commits reported by the children.
    pub committed: u64,
    /// Acknowledgements reported by the children.
    pub acknowledged: u64,
    /// Harness transactions recovered beyond the acknowledged ones (committed
    /// but not yet acknowledged when killed).
    pub unacknowledged_recovered: u64,
    /// Times the database outgrew the pool (a child reported `full`) and
    /// the run started over with a freshly loaded pool.
    pub pool_resets: u64,
    /// Violations found (all counted).
    pub violation_count: u64,
    /// The first `max_reported` violations.
    pub violations: Vec<Violation>,
}

#[derive(Default)]
struct ChildOutput {
    ready: Option<Vec<u64>>,
    committed: Vec<u64>,
    acked: Vec<u64>,
    orders: HashMap<(usize, u64), u32>,
    errors: Vec<String>,
    full: Option<String>,
    commits: u64,
    acks: u64,
}

fn parse_output(lines: &[String], threads: usize) -> Result<ChildOutput, String> {
    let mut output = ChildOutput { committed: vec![0; threads], acked: vec![0; threads], ..ChildOutput::default() };
    for line in lines {
        let mut fields = line.split_whitespace();
        let kind = fields.next().unwrap_or("");
        let bad = || format!("unreadable child line {line:?}");
        let worker_seq = |fields: &mut std::str::SplitWhitespace<'_>| -> Result<(usize, u64), String> {
            let worker: usize = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
            let seq: u64 = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
            if worker >= threads {
                return Err(bad());
            }
            Ok((worker, seq))
        };
        match kind {
            "ready" => {
                let seqs = fields.nth(1).unwrap_or("");
                output.ready = Some(seqs.split(',').filter(|s| !s.is_empty()).filter_map(|s| s.parse().ok()).collect());
            }
            "C" => {
                let (worker, seq) = worker_seq(&mut fields)?;
                output.committed[worker] = output.committed[worker].max(seq);
                if let Some(order) = fields.next().and_then(|f| f.parse().ok()) {
                    output.orders.insert((worker, seq), order);
                }
                output.commits += 1;
            }
            "A" => {
                let (worker, seq) = worker_seq(&mut fields)?;
                output.acked[worker] = output.acked[worker].max(seq);
                output.acks += 1;
            }
            "error" => output.errors.push(line.clone()),
            "full" => output.full = Some(line.clone()),
            // Anything else (e.g. a test harness's own output) is ignored.
            _ => {}
        }
    }
    Ok(output)
}

/// Creates the pool file (replacing any), loads the workload, closes
/// cleanly and returns the baseline.
fn fresh_pool(harness: &Harness, options: &DbOptions, path: &std::path::Path) -> Result<Baseline, String> {
    if path.exists() {
        std::fs::remove_file(path).map_err(|error| format!("cannot remove {}: {error}", path.display()))?;
    }
    // A log kept in files belongs to the pool just removed.
    if let Some(directory) = options.log_directory_path().filter(|directory| directory.exists()) {
        std::fs::remove_dir_all(&directory)
            .map_err(|error| format!("cannot remove {}: {error}", directory.display()))?;
    }
    let create = options.clone().create_if_missing(true);
    let db = Arc::new(Database::open(create).map_err(|error| format!("cannot create the pool: {error}"))?);
    harness.load(&db)?;
    let state = harness.read_state(&db).map_err(|f| f.detail)?;
    harness.check_workload(&db).map_err(|f| f.detail)?;
    let baseline = harness.baseline_of(&state).map_err(|f| f.detail)?;
    Arc::into_inner(db).ok_or("database still shared")?.close().map_err(|error| format!("close: {error}"))?;
    Ok(baseline)
}

/// Runs the kill mode; `progress` receives status lines.
pub fn run_kill(config: &KillConfig, progress: &(dyn Fn(&str) + Sync)) -> Result<KillReport, String> {
    crate::checkable(config.engine)?;
    crate::workload_checkable(config.engine, config.workload)?;
    pmtx_engine::spec::check_medium(config.engine, config.medium)?;
    if config.fake_ack && config.engine != EngineKind::GroupCommit {
        return Err(format!(
            "--fake-ack with --kill needs group-commit (its commits become durable by epochs, which the control \
             stalls), not {}",
            config.engine
        ));
    }
    let harness = Harness::new(config.workload, config.scale, config.threads, config.seed)?;
    let dir = match &config.dir {
        Some(dir) => tempfile::Builder::new().prefix("pmtx-crashtest-").tempdir_in(dir),
        None => tempfile::Builder::new().prefix("pmtx-crashtest-").tempdir(),
    }
    .map_err(|error| format!("cannot create a temporary directory: {error}"))?;
    let path = dir.path().join("pool.pmtx");
    let options = file_options(
        config.engine,
        config.medium,
        config.cc,
        &harness,
        path.clone(),
        config.pool_size,
        config.chunk_size,
        config.seed,
    );
    progress(&format!("creating and loading {} at {}", config.workload, path.display()));
    let mut baseline = fresh_pool(&harness, &options, &path)?;
    let mut report = KillReport::default();
    let push = |report: &mut KillReport, violation: Violation| {
        report.violation_count += 1;
        if report.violations.len() < config.max_reported {
            report.violations.push(violation);
        }
    };
    for iteration in 0..config.iterations {
        let mut rng = ChaCha8Rng::seed_from_u64(derive(config.seed, &[0x4B, iteration]));
        let early = rng.gen_ratio(1, 5);
        let max_ms = config.max_kill_delay.as_millis().max(1) as u64;
        let delay = Duration::from_micros(rng.gen_range(0..max_ms * 1000));
        let replay = format!(
            "{}; iteration {iteration}, kill {} {:.1} ms after {}",
            config.command_line(),
            if early { "early:" } else { "at" },
            delay.as_secs_f64() * 1000.0,
            if early { "spawn" } else { "ready" }
        );
        let child_config = ChildConfig {
            engine: config.engine,
            medium: config.medium,
            cc: config.cc,
            workload: config.workload,
            scale: config.scale,
            threads: config.threads,
            seed: config.seed,
            pool: path.clone(),
            pool_size: config.pool_size,
            chunk_size: config.chunk_size,
            iteration,
            checkpoint_ms: config.checkpoint_ms,
            fake_ack: config.fake_ack,
        };
        let mut child = Command::new(&config.program)
            .args(&config.program_args)
            .args(child_config.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", config.program.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let (sender, receiver) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            // Only complete lines count: a line cut by the kill reported
            // nothing for sure (dropping it only loosens the bounds).
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.last() == Some(&b'\n') => {
                        let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                        if sender.send(text).is_err() {
                            break;
                        }
                    }
                    Ok(_) => break,
                }
            }
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut lines = Vec::new();
        let mut exited_early = None;
        if early {
            std::thread::sleep(delay);
        } else {
            // Wait for `ready`.
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                match receiver.recv_timeout(Duration::from_millis(20)) {
                    Ok(line) => {
                        let ready = line.starts_with("ready");
                        lines.push(line);
                        if ready {
                            break;
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                    Err(_) => break,
                }
            }
            // Then at least `min_acks_before_kill` acknowledgements.
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut acks = 0u64;
            while acks < config.min_acks_before_kill {
                match receiver.recv_timeout(Duration::from_millis(20)) {
                    Ok(line) => {
                        acks += line.starts_with("A ") as u64;
                        lines.push(line);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                    Err(_) => break,
                }
            }
            if acks >= config.min_acks_before_kill {
                report.kills_after_acks += 1;
            } else {
                push(
                    &mut report,
                    Finding::new(
                        "no-progress",
                        format!(
                            "the child acknowledged {acks} commits, fewer than the {} required before a kill",
                            config.min_acks_before_kill
                        ),
                    )
                    .with_replay(replay.clone()),
                );
            }
            std::thread::sleep(delay);
        }
        if let Ok(Some(status)) = child.try_wait() {
            exited_early = Some(status);
        }
        let _ = child.kill();
        let status = child.wait().map_err(|error| format!("waiting for the child: {error}"))?;
        let _ = reader.join();
        lines.extend(receiver.try_iter());
        let stderr_text = errors.join().unwrap_or_default();
        if early {
            report.early_kills += 1;
        }
        let output = match parse_output(&lines, config.threads) {
            Ok(output) => output,
            Err(error) => {
                push(&mut report, Finding::new("child", error).with_replay(replay.clone()));
                ChildOutput { committed: vec![0; config.threads], acked: vec![0; config.threads], ..Default::default() }
            }
        };
        if let Some(status) = exited_early {
            let tail: String =
                stderr_text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
            push(
                &mut report,
                Finding::new(
                    "child",
                    format!(
                        "the child exited on its own ({status}) before the kill: {:?}; stderr: {tail}",
                        output.errors
                    ),
                )
                .with_replay(replay.clone()),
            );
        }
        if let Some(seqs) = &output.ready {
            if *seqs != baseline.seqs {
                push(
                    &mut report,
                    Finding::new(
                        "recover-twice",
                        format!(
                            "the child recovered worker sequences {seqs:?}, the parent had verified {:?}",
                            baseline.seqs
                        ),
                    )
                    .with_replay(replay.clone()),
                );
            }
        }
        report.committed += output.commits;
        report.acknowledged += output.acks;
        let started = output.ready.is_some();
        let bounds = Bounds {
            lower: (0..config.threads).map(|w| output.acked[w].max(baseline.seqs[w])).collect(),
            upper: (0..config.threads)
                .map(|w| {
                    let committed = output.committed[w].max(baseline.seqs[w]);
                    if started {
                        committed + 1
                    } else {
                        committed
                    }
                })
                .collect(),
        };
        let orders = output.orders.clone();
        let order_of = move |worker: usize, s: u64| orders.get(&(worker, s)).copied();
        let expectation = Expectation { baseline: &baseline, bounds: bounds.clone(), order_of: &order_of };
        let first = recover_with::<Direct>(
            &harness,
            &options,
            || open_pool(&path, &options),
            Some(&expectation),
            true,
            false,
            |_| {},
        );
        let replay = format!(
            "{replay} (child {status}, {} commits / {} acks reported, worker sequences expected in {:?}..={:?})",
            output.commits, output.acks, bounds.lower, bounds.upper
        );
        for finding in first.findings {
            push(&mut report, finding.with_replay(replay.clone()));
        }
        drop(first.pool);
        let Some(state) = first.state else {
            progress(&format!("kill iteration {iteration}: recovery failed; stopping"));
            report.iterations = iteration + 1;
            return Ok(report);
        };
        let clean = rng.gen_ratio(1, 3);
        let second =
            recover_with::<Direct>(&harness, &options, || open_pool(&path, &options), None, false, clean, |_| {});
        for finding in second.findings {
            push(
                &mut report,
                Finding::new(finding.oracle, format!("second recovery: {}", finding.detail))
                    .with_replay(replay.clone()),
            );
        }
        drop(second.pool);
        if let Some(again) = &second.state {
            if *again != state {
                push(
                    &mut report,
                    Finding::new(
                        "recover-twice",
                        format!(
                            "recovering the pool a second time changed the state: {}",
                            state.first_difference(again)
                        ),
                    )
                    .with_replay(replay.clone()),
                );
            }
        }
        let recovered = harness.seqs_of(&state).unwrap_or_default();
        report.unacknowledged_recovered +=
            recovered.iter().zip(&bounds.lower).map(|(s, lower)| s.saturating_sub(*lower)).sum::<u64>();
        progress(&format!(
            "kill iteration {}/{}: killed {:.1} ms after {} ({} commits, {} acks), recovered sequences {:?}, {} \
             violations so far",
            iteration + 1,
            config.iterations,
            delay.as_secs_f64() * 1000.0,
            if early { "spawn" } else { "ready" },
            output.commits,
            output.acks,
            recovered,
            report.violation_count
        ));
        if let Some(full) = &output.full {
            // The database outgrew the pool; the checks above still ran.
            progress(&format!("the pool is full ({full}); starting over with a fresh pool"));
            report.pool_resets += 1;
            baseline = fresh_pool(&harness, &options, &path)?;
            report.iterations = iteration + 1;
            continue;
        }
        baseline = match harness.baseline_of(&state) {
            Ok(next) => next,
            Err(finding) => {
                push(&mut report, finding.with_replay(replay));
                report.iterations = iteration + 1;
                return Ok(report);
            }
        };
        report.iterations = iteration + 1;
    }
    drop(dir);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_flags_round_trip_with_the_protocol() {
        let config = ChildConfig {
            engine: EngineKind::Zen,
            medium: LogMedium::Pm,
            cc: CcProtocol::WaitDie,
            workload: WorkloadKind::Smallbank,
            scale: Scale::default(),
            threads: 3,
            seed: 0x5eed,
            pool: PathBuf::from("/tmp/pool.pmtx"),
            pool_size: 32 << 20,
            chunk_size: 256 << 10,
            iteration: 4,
            checkpoint_ms: 10,
            fake_ack: false,
        };
        let args = config.to_args();
        assert_eq!(ChildConfig::parse(&args), Ok(config.clone()));
        let lying = ChildConfig { fake_ack: true, ..config.clone() };
        assert_eq!(ChildConfig::parse(&lying.to_args()), Ok(lying));
        // Flags without --cc (an older parent) mean silo.
        let position = args.iter().position(|arg| arg == "--cc").unwrap();
        let mut without = args.clone();
        without.drain(position..position + 2);
        assert_eq!(ChildConfig::parse(&without).map(|child| child.cc), Ok(CcProtocol::Silo));
        let mut kill = KillConfig::new(EngineKind::Dbxn, WorkloadKind::Smallbank, 1, PathBuf::from("pmtx"), Vec::new());
        assert!(!kill.command_line().contains("--cc"), "{}", kill.command_line());
        kill.cc = CcProtocol::DlDetect;
        assert!(kill.command_line().contains("--engine dbxn --cc dl-detect "), "{}", kill.command_line());
        // A log on disk travels in the engine text, both ways.
        let disk = ChildConfig { engine: EngineKind::DbxNaive, medium: LogMedium::Disk, ..config.clone() };
        let args = disk.to_args();
        assert!(args.contains(&"dbx-naive:medium=disk".to_string()), "{args:?}");
        assert_eq!(ChildConfig::parse(&args), Ok(disk));
        kill.engine = EngineKind::DbxNaive;
        kill.medium = LogMedium::Disk;
        assert!(kill.command_line().contains("--engine dbx-naive:medium=disk "), "{}", kill.command_line());
    }
}
