//! The simulated-crash mode: run on the `Sim` backend, capture crash
//! states, recover crash images, check the oracles.
//!
//! 1. Create a small in-memory `Sim` pool, open the engine on it, load the
//!    workload and take the baseline (the load is acknowledged, so it is
//!    not part of the model).
//! 2. Capture every fence and every labelled crash point, plus random
//!    `capture_now` points taken by the main thread and one right after
//!    every acknowledgement (taken by the acknowledged worker, [`ACK_POINT`]),
//!    while `threads` workers run the harness transactions (they start
//!    together; a thread takes checkpoints every few milliseconds); a clean
//!    close at the end is captured too.
//!    Each worker records, per transaction, the simulator's event count
//!    when it started and when it was acknowledged, so for a crash state
//!    with event `e` the recovered sequence of the worker must lie between
//!    the last transaction acknowledged at an event `<= e` and the last
//!    started at an event `<= e`.
//! 3. States are kept by seeded reservoir sampling (labelled points, fences,
//!    random points and acknowledgement points separately). Images are
//!    drawn round-robin over the kept states (every acknowledgement point
//!    and half of the others active from the start) (`CrashState::images`: nothing extra, everything,
//!    flushed-but-not-fenced, all-but-line-L, then seeded random prefix
//!    vectors), until `images` images were checked.
//! 4. Every image is recovered on a fresh pool and engine and checked
//!    (`recover::recover_image`); every `recovery_check_every`-th image also
//!    gets the determinism checks (`recover::check_recovery_determinism`).

use crate::harness::{Baseline, Bounds, Harness, WorkerError, WorkerEvents, WorkerPlan};
use crate::recover::{check_recovery_determinism, recover_image, Expectation};
use crate::{db_options, derive, Finding, Scale, Violation, WorkloadKind};
use pmtx_engine::{CcProtocol, Database, EngineKind};
use pmtx_pm::sim::{CapturePolicy, CrashImage, CrashState, ImageBudget};
use pmtx_pm::{Direct, Pool, Sim};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Label of the harness's random capture points.
pub const RANDOM_POINT: &str = "harness: random point";

/// Label of the crash states the harness takes right after each
/// acknowledgement (by the acknowledged worker's thread, before it does
/// anything else): an engine that acknowledges before its commit is durable
/// leaves that commit's stores pending there, whatever the timing.
pub const ACK_POINT: &str = "harness: right after an acknowledgement";

/// A named change to the engine's options ([`SimConfig::engine_options`]).
#[derive(Clone)]
pub struct EngineOptionsHook {
    /// What it changes, for reports and replay lines.
    pub name: String,
    /// The change.
    pub apply: Arc<dyn Fn(&mut pmtx_engine::DbOptions) + Send + Sync>,
}

impl EngineOptionsHook {
    /// A hook named `name` that applies `apply`.
    pub fn new(name: impl Into<String>, apply: impl Fn(&mut pmtx_engine::DbOptions) + Send + Sync + 'static) -> Self {
        Self { name: name.into(), apply: Arc::new(apply) }
    }
}

impl std::fmt::Debug for EngineOptionsHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptionsHook").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Configuration of a simulated-crash run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Engine.
    pub engine: EngineKind,
    /// Concurrency-control protocol of the engine (default: silo).
    pub cc: CcProtocol,
    /// Workload.
    pub workload: WorkloadKind,
    /// Database size.
    pub scale: Scale,
    /// Worker threads.
    pub threads: usize,
    /// Harness transactions per worker.
    pub txns_per_thread: u64,
    /// Crash images to check.
    pub images: usize,
    /// Seed of everything random (transactions, capture, images).
    pub seed: u64,
    /// Pool size in bytes.
    pub pool_size: u64,
    /// Chunk size in bytes.
    pub chunk_size: u64,
    /// Threads checking images in parallel.
    pub jobs: usize,
    /// Every n-th image also gets the determinism checks (0: never).
    pub recovery_check_every: usize,
    /// Crash states captured during recovery that are recovered again, per
    /// determinism check.
    pub recovery_crash_states: usize,
    /// A checkpoint every this often during the run (`None`: none).
    pub checkpoint_every: Option<Duration>,
    /// The deliberately broken acknowledgement (see
    /// [`Harness::run_worker`]); for testing the harness only.
    pub fake_ack: bool,
    /// A change to the engine's options at every open (run and recovery),
    /// such as a deliberately broken engine step for testing the harness:
    /// the harness's own tests select `DbOptions::fault`, which exists
    /// only in builds of the engine with the `fault-injection` feature
    /// (theirs, never the `pmtx` binary's).
    pub engine_options: Option<EngineOptionsHook>,
    /// Write failing images here.
    pub save_dir: Option<PathBuf>,
    /// Keep at most this many violations in the report (all are counted).
    pub max_reported: usize,
}

impl SimConfig {
    /// Defaults for `engine` and `workload`: the engine's default
    /// concurrency control (silo's, Hekaton's for zen+), 2 threads, 300 transactions each, 1000 images, 32 MiB pool of 256 KiB
    /// chunks.
    pub fn new(engine: EngineKind, workload: WorkloadKind, seed: u64) -> Self {
        Self {
            engine,
            cc: engine.default_cc(),
            workload,
            scale: Scale::default(),
            threads: 2,
            txns_per_thread: 300,
            images: 1000,
            seed,
            pool_size: 32 << 20,
            chunk_size: 256 << 10,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            recovery_check_every: 10,
            recovery_crash_states: 3,
            checkpoint_every: Some(Duration::from_millis(15)),
            fake_ack: false,
            engine_options: None,
            save_dir: None,
            max_reported: 50,
        }
    }

    /// The command line that repeats this run.
    pub fn command_line(&self) -> String {
        format!(
            "pmtx crashtest --engine {}{} --workload {} --images {} --seed {:#x} --threads {} --txns {} --pool-size {} \
             --chunk-size {}{}{}",
            self.engine,
            crate::cc_flag(self.engine, self.cc),
            self.workload,
            self.images,
            self.seed,
            self.threads,
            self.txns_per_thread,
            self.pool_size,
            self.chunk_size,
            crate::harness::scale_flags(&self.scale),
            if self.fake_ack { " --fake-ack" } else { "" }
        ) + &self.engine_options.as_ref().map(|hook| format!(" (engine options: {})", hook.name)).unwrap_or_default()
    }
}

/// Result of a simulated-crash run.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// Crash images recovered and checked (not counting the extra images of
    /// the determinism checks).
    pub images: u64,
    /// Extra images recovered by the determinism checks.
    pub recovery_images: u64,
    /// Crash states captured during the run.
    pub states_captured: u64,
    /// Crash states images were drawn from.
    pub states_used: usize,
    /// Harness transactions committed / acknowledged.
    pub committed: u64,
    /// Acknowledged harness transactions.
    pub acknowledged: u64,
    /// Checkpoints taken during the run.
    pub checkpoints: u64,
    /// The engine's own counters at the end of the run
    /// (`EngineStats::engine_counters`: for zen+, its exclusive stages and
    /// direct NVM writes), so a run shows which paths it crossed.
    pub engine_counters: Vec<(&'static str, u64)>,
    /// Violations found (all of them are counted here).
    pub violation_count: u64,
    /// The first `max_reported` violations.
    pub violations: Vec<Violation>,
    /// Wall time of the run and of the checks.
    pub run_time: Duration,
    /// Wall time of the image checks.
    pub check_time: Duration,
}

/// Per-worker record of the run, for the oracle.
#[derive(Default)]
struct WorkerLog {
    /// Sequence of the first transaction.
    first: u64,
    /// Event count when transaction `first + i` started.
    starts: Vec<u64>,
    /// Event count when it was acknowledged (`u64::MAX`: never).
    acks: Vec<u64>,
    /// Order id (TPC-C NewOrder) per transaction.
    orders: Vec<Option<u32>>,
    /// Commits.
    committed: u64,
}

struct Recorder<'a> {
    sim: &'a Sim,
    log: WorkerLog,
    /// Every worker waits here once its `Worker` exists, so the workers run
    /// side by side (a thread started late could otherwise run its whole
    /// share alone).
    start: &'a std::sync::Barrier,
}

impl WorkerEvents for Recorder<'_> {
    fn ready(&mut self) {
        self.start.wait();
    }

    fn started(&mut self, s: u64) {
        let index = (s - self.log.first) as usize;
        debug_assert_eq!(index, self.log.starts.len());
        self.log.starts.push(self.sim.event_count());
        self.log.acks.push(u64::MAX);
        self.log.orders.push(None);
    }

    fn committed(&mut self, s: u64, order: Option<u32>) {
        self.log.orders[(s - self.log.first) as usize] = order;
        self.log.committed += 1;
    }

    fn acknowledged(&mut self, s: u64) {
        let event = self.sim.event_count();
        if let Some(slot) = self.log.acks.get_mut((s - self.log.first) as usize) {
            *slot = (*slot).min(event);
        }
        // Its event is at least `event`, so the state counts `s` as
        // acknowledged.
        self.sim.capture_now(ACK_POINT);
    }
}

impl WorkerLog {
    /// Last sequence acknowledged at an event `<= event`.
    fn acked_by(&self, event: u64, base: u64) -> u64 {
        self.acks
            .iter()
            .enumerate()
            .filter(|(_, &ack)| ack <= event)
            .map(|(i, _)| self.first + i as u64)
            .max()
            .unwrap_or(base)
    }

    /// Last sequence started at an event `<= event`.
    fn started_by(&self, event: u64, base: u64) -> u64 {
        let started = self.starts.partition_point(|&start| start <= event);
        if started == 0 {
            base
        } else {
            self.first + started as u64 - 1
        }
    }
}

/// Seeded reservoir sample of crash states.
struct Reservoir {
    capacity: usize,
    seen: u64,
    states: Vec<CrashState>,
}

impl Reservoir {
    fn new(capacity: usize) -> Self {
        Self { capacity, seen: 0, states: Vec::new() }
    }

    fn offer(&mut self, state: CrashState, rng: &mut ChaCha8Rng) {
        self.seen += 1;
        if self.states.len() < self.capacity {
            self.states.push(state);
        } else {
            let slot = rng.gen_range(0..self.seen);
            if (slot as usize) < self.capacity {
                self.states[slot as usize] = state;
            }
        }
    }
}

struct Sampler {
    rng: ChaCha8Rng,
    labels: Reservoir,
    fences: Reservoir,
    random: Reservoir,
    acks: Reservoir,
}

impl Sampler {
    fn new(seed: u64, states: usize) -> Self {
        let labels = (states * 3 / 10).max(1);
        let random = (states / 5).max(1);
        let acks = (states / 5).max(1);
        let fences = states.saturating_sub(labels + random + acks).max(1);
        Self {
            rng: ChaCha8Rng::seed_from_u64(derive(seed, &[0x5A, 1])),
            labels: Reservoir::new(labels),
            fences: Reservoir::new(fences),
            random: Reservoir::new(random),
            acks: Reservoir::new(acks),
        }
    }

    fn offer_all(&mut self, states: Vec<CrashState>) -> u64 {
        let count = states.len() as u64;
        for state in states {
            let bucket = match state.label {
                "fence" => &mut self.fences,
                RANDOM_POINT => &mut self.random,
                ACK_POINT => &mut self.acks,
                _ => &mut self.labels,
            };
            bucket.offer(state, &mut self.rng);
        }
        count
    }

    fn into_states(self) -> Vec<CrashState> {
        let mut states: Vec<CrashState> = self
            .labels
            .states
            .into_iter()
            .chain(self.fences.states)
            .chain(self.random.states)
            .chain(self.acks.states)
            .collect();
        states.sort_by_key(|state| state.event);
        states
    }
}

/// Crash states kept per requested image (half of them start active, the
/// others replace states whose images run out).
const IMAGES_PER_STATE: usize = 2;
const RUN_BUDGET: ImageBudget =
    ImageBudget { random_subsets: 4, random_prefixes: 4, exhaustive_limit: 64, all_but_lines: 4 };

struct RunOutput {
    baseline: Baseline,
    logs: Vec<WorkerLog>,
    states: Vec<CrashState>,
    captured: u64,
    checkpoints: u64,
    engine_counters: Vec<(&'static str, u64)>,
    violations: Vec<Violation>,
}

fn run_workload(config: &SimConfig, harness: &Harness, progress: &(dyn Fn(&str) + Sync)) -> Result<RunOutput, String> {
    let mut options =
        db_options(config.engine, harness.tables(), config.threads, config.seed, config.pool_size, config.chunk_size);
    options.cc = config.cc;
    if let Some(hook) = &config.engine_options {
        (hook.apply)(&mut options);
    }
    let pool = Arc::new(
        Pool::<Sim>::create_in_memory(config.pool_size, config.chunk_size, &options.pm)
            .map_err(|error| format!("cannot create the sim pool: {error}"))?,
    );
    let db = Arc::new(
        Database::open_on_pool(options.clone(), Arc::clone(&pool))
            .map_err(|error| format!("cannot open {} on a fresh pool: {error}", config.engine))?,
    );
    progress(&format!("loading {} (scale {:?})", config.workload, config.scale));
    harness.load(&db).map_err(|error| format!("load failed: {error}"))?;
    let state = harness.read_state(&db).map_err(|f| format!("after load: [{}] {}", f.oracle, f.detail))?;
    harness.check_workload(&db).map_err(|f| format!("after load: {}", f.detail))?;
    let baseline = harness.baseline_of(&state).map_err(|f| f.detail)?;
    let sim = pool.backend();
    let wanted_states = config.images.div_ceil(IMAGES_PER_STATE).max(4);
    let mut sampler = Sampler::new(config.seed, wanted_states);
    sim.set_capture(CapturePolicy { every_nth: 1, random_per_million: 0, at_labels_only: false, max_states: 200_000 });
    progress(&format!(
        "running {} threads x {} transactions on {} with crash capture",
        config.threads, config.txns_per_thread, config.engine
    ));
    let stop = AtomicBool::new(false);
    let done = AtomicUsize::new(0);
    let checkpoints = AtomicU64::new(0);
    let violations: Mutex<Vec<Violation>> = Mutex::new(Vec::new());
    let full: Mutex<Option<String>> = Mutex::new(None);
    let start = std::sync::Barrier::new(config.threads);
    let mut captured = 0u64;
    let mut rng = ChaCha8Rng::seed_from_u64(derive(config.seed, &[0x5A, 2]));
    let replay = config.command_line();
    let logs: Vec<WorkerLog> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.threads)
            .map(|id| {
                let (db, harness, stop, done, violations, replay, full, start) =
                    (&db, harness, &stop, &done, &violations, &replay, &full, &start);
                let first = baseline.seqs[id] + 1;
                scope.spawn(move || {
                    let mut recorder = Recorder { sim, log: WorkerLog { first, ..WorkerLog::default() }, start };
                    let plan = WorkerPlan { id, first, count: Some(config.txns_per_thread), fake_ack: config.fake_ack };
                    let result = harness.run_worker(db, plan, stop, &mut recorder);
                    match result {
                        Ok(()) => {}
                        Err(WorkerError::OutOfSpace(message)) => {
                            *full.lock().unwrap() = Some(message);
                            stop.store(true, Ordering::SeqCst);
                        }
                        Err(WorkerError::Failed(message)) => {
                            violations.lock().unwrap().push(Finding::new("run", message).with_replay(replay.clone()));
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    recorder.log
                })
            })
            .collect();
        if let Some(every) = config.checkpoint_every {
            let (db, done, checkpoints, violations, replay) = (&db, &done, &checkpoints, &violations, &replay);
            scope.spawn(move || {
                while done.load(Ordering::SeqCst) < config.threads {
                    std::thread::sleep(every);
                    if let Err(error) = db.checkpoint() {
                        violations.lock().unwrap().push(
                            Finding::new("run", format!("checkpoint failed: {error}")).with_replay(replay.clone()),
                        );
                        break;
                    }
                    checkpoints.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while done.load(Ordering::SeqCst) < config.threads {
            std::thread::sleep(Duration::from_micros(rng.gen_range(100..1500)));
            if rng.gen_bool(0.5) {
                sim.capture_now(RANDOM_POINT);
            }
            captured += sampler.offer_all(sim.take_crash_states());
        }
        handles.into_iter().map(|handle| handle.join().expect("worker threads catch their errors")).collect()
    });
    if let Some(message) = full.into_inner().unwrap() {
        return Err(format!(
            "the pool is too small for this run ({message}); use a larger --pool-size or fewer --txns"
        ));
    }
    // A clean close, captured as well: every commit is acknowledged by now.
    let db = Arc::into_inner(db).ok_or("the database is still shared after the run")?;
    let engine_counters = db.stats().engine_counters;
    if let Err(error) = db.close() {
        violations
            .lock()
            .unwrap()
            .push(Finding::new("run", format!("clean close failed: {error}")).with_replay(replay));
    }
    captured += sampler.offer_all(sim.take_crash_states());
    if sim.dropped_captures() > 0 {
        progress(&format!("note: {} crash states dropped (capture cap)", sim.dropped_captures()));
    }
    sim.set_capture(CapturePolicy::NONE);
    Ok(RunOutput {
        baseline,
        logs,
        states: sampler.into_states(),
        captured,
        checkpoints: checkpoints.into_inner(),
        engine_counters,
        violations: violations.into_inner().unwrap(),
    })
}

struct Job {
    index: u64,
    state: usize,
    image: CrashImage,
}

/// Runs the simulated-crash mode; `progress` receives status lines (for
/// stderr).
pub fn run_sim(config: &SimConfig, progress: &(dyn Fn(&str) + Sync)) -> Result<SimReport, String> {
    if config.threads == 0 {
        return Err("threads must be at least 1".into());
    }
    crate::sim_checkable(config.engine, pmtx_engine::LogMedium::Pm)?;
    crate::workload_checkable(config.engine, config.workload)?;
    let started = Instant::now();
    let harness = Harness::new(config.workload, config.scale, config.threads, config.seed)?;
    let mut run = run_workload(config, &harness, progress)?;
    let run_time = started.elapsed();
    let mut report = SimReport {
        states_captured: run.captured,
        states_used: run.states.len(),
        committed: run.logs.iter().map(|log| log.committed).sum(),
        acknowledged: run.logs.iter().map(|log| log.acks.iter().filter(|&&ack| ack != u64::MAX).count() as u64).sum(),
        checkpoints: run.checkpoints,
        engine_counters: run.engine_counters.clone(),
        run_time,
        ..SimReport::default()
    };
    for violation in std::mem::take(&mut run.violations) {
        report.violation_count += 1;
        report.violations.push(violation);
    }
    progress(&format!(
        "run done in {:.1} s: {} commits, {} crash states captured, {} kept; checking {} images",
        run_time.as_secs_f64(),
        report.committed,
        run.captured,
        run.states.len(),
        config.images
    ));
    let mut options =
        db_options(config.engine, harness.tables(), config.threads, config.seed, config.pool_size, config.chunk_size);
    options.cc = config.cc;
    if let Some(hook) = &config.engine_options {
        (hook.apply)(&mut options);
    }
    let bounds_of = |event: u64| Bounds {
        lower: run.logs.iter().zip(&run.baseline.seqs).map(|(log, &base)| log.acked_by(event, base)).collect(),
        upper: run.logs.iter().zip(&run.baseline.seqs).map(|(log, &base)| log.started_by(event, base)).collect(),
    };
    let order_of = |worker: usize, s: u64| -> Option<u32> {
        let log = &run.logs[worker];
        log.orders.get(s.checked_sub(log.first)? as usize).copied().flatten()
    };
    let check_start = Instant::now();
    let checked = AtomicU64::new(0);
    let extra = AtomicU64::new(0);
    let found = AtomicU64::new(0);
    let collected: Mutex<Vec<Violation>> = Mutex::new(Vec::new());
    let jobs = config.jobs.max(1);
    let (sender, receiver) = mpsc::sync_channel::<Job>(jobs);
    let receiver = Mutex::new(receiver);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let (receiver, harness, options, run, checked, extra, found, collected) =
                (&receiver, &harness, &options, &run, &checked, &extra, &found, &collected);
            let (bounds_of, order_of) = (&bounds_of, &order_of);
            scope.spawn(move || loop {
                let job = match receiver.lock().unwrap().recv() {
                    Ok(job) => job,
                    Err(_) => return,
                };
                let state = &run.states[job.state];
                let bounds = bounds_of(state.event);
                let expectation = Expectation { baseline: &run.baseline, bounds: bounds.clone(), order_of };
                let recovered =
                    recover_image::<Direct>(harness, options, &job.image.bytes, Some(&expectation), true, |_| {});
                let mut findings = recovered.findings;
                if let Some(first) = &recovered.state {
                    if config.recovery_check_every > 0 && job.index % config.recovery_check_every as u64 == 0 {
                        let (more, images) = check_recovery_determinism(
                            harness,
                            options,
                            &job.image.bytes,
                            first,
                            derive(config.seed, &[9, job.index]),
                            config.recovery_crash_states,
                        );
                        findings.extend(more);
                        extra.fetch_add(images, Ordering::Relaxed);
                    }
                }
                if !findings.is_empty() {
                    let saved = save_image(config, state, job.index, &job.image.bytes);
                    let replay = format!(
                        "{}; crash state at event {} ({}); image {}; worker sequences expected in {:?}..={:?}{}",
                        config.command_line(),
                        state.event,
                        state.label,
                        job.image.description,
                        bounds.lower,
                        bounds.upper,
                        saved
                    );
                    found.fetch_add(findings.len() as u64, Ordering::Relaxed);
                    let mut collected = collected.lock().unwrap();
                    for finding in findings {
                        if collected.len() < config.max_reported {
                            collected.push(finding.with_replay(replay.clone()));
                        }
                    }
                }
                checked.fetch_add(1, Ordering::Relaxed);
            });
        }
        // Round-robin over the states: the first round gives each state's
        // "nothing extra" image, the next "everything", and so on. Every
        // kept state taken right after an acknowledgement and half of the
        // others (a seeded choice) start active; a state whose images are
        // exhausted is replaced by a spare one.
        let images_of = |index: usize| run.states[index].images(derive(config.seed, &[0x1A, index as u64]), RUN_BUDGET);
        let (mut order, acks): (Vec<usize>, Vec<usize>) =
            (0..run.states.len()).partition(|&index| run.states[index].label != ACK_POINT);
        let mut shuffle = ChaCha8Rng::seed_from_u64(derive(config.seed, &[0x5A, 3]));
        for i in (1..order.len()).rev() {
            order.swap(i, shuffle.gen_range(0..=i));
        }
        let active = order.len().div_ceil(2);
        let mut spares: Vec<usize> = order.split_off(active);
        order.extend(acks);
        order.sort_unstable();
        let mut iterators: Vec<(usize, pmtx_pm::sim::CrashImages<'_>)> =
            order.into_iter().map(|index| (index, images_of(index))).collect();
        let mut produced = 0u64;
        let mut last_report = Instant::now();
        'outer: while !iterators.is_empty() {
            let mut position = 0;
            while position < iterators.len() {
                if produced as usize >= config.images {
                    break 'outer;
                }
                let (state, iterator) = &mut iterators[position];
                match iterator.next() {
                    Some(image) => {
                        if sender.send(Job { index: produced, state: *state, image }).is_err() {
                            break 'outer;
                        }
                        produced += 1;
                        position += 1;
                    }
                    None => match spares.pop() {
                        Some(spare) => iterators[position] = (spare, images_of(spare)),
                        None => {
                            iterators.swap_remove(position);
                        }
                    },
                }
                if last_report.elapsed() > Duration::from_secs(2) {
                    last_report = Instant::now();
                    progress(&format!(
                        "checked {} / {} images, {} violations",
                        checked.load(Ordering::Relaxed),
                        config.images,
                        found.load(Ordering::Relaxed)
                    ));
                }
            }
        }
        drop(sender);
    });
    report.images = checked.into_inner();
    report.recovery_images = extra.into_inner();
    report.violation_count += found.into_inner();
    report.violations.extend(collected.into_inner().unwrap());
    report.violations.truncate(config.max_reported.max(1));
    report.check_time = check_start.elapsed();
    Ok(report)
}

fn save_image(config: &SimConfig, state: &CrashState, index: u64, bytes: &[u8]) -> String {
    let Some(dir) = &config.save_dir else { return String::new() };
    let path = dir.join(format!(
        "crashtest-{:x}-{}-{}-e{}-i{}.img",
        config.seed, config.engine, config.workload, state.event, index
    ));
    match std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, bytes)) {
        Ok(()) => format!("; image saved to {}", path.display()),
        Err(error) => format!("; saving the image to {} failed: {error}", path.display()),
    }
}

/// Re-checks a saved crash image (`--save-failing`) without the run's
/// model: recovery, pool metadata, structure, the workload's consistency
/// check and the determinism checks (recover twice, crash right after and
/// during recovery). `config` gives the engine, workload, scale, threads and
/// seed of the run that saved it.
pub fn replay_image(config: &SimConfig, bytes: &[u8]) -> Result<Vec<Violation>, String> {
    let harness = Harness::new(config.workload, config.scale, config.threads, config.seed)?;
    let mut options =
        db_options(config.engine, harness.tables(), config.threads, config.seed, bytes.len() as u64, config.chunk_size);
    options.cc = config.cc;
    if let Some(hook) = &config.engine_options {
        (hook.apply)(&mut options);
    }
    let replay = format!("{} --replay <image>", config.command_line());
    let recovered = recover_image::<Direct>(&harness, &options, bytes, None, true, |_| {});
    let mut findings = recovered.findings;
    if let Some(first) = &recovered.state {
        let (more, _) = check_recovery_determinism(
            &harness,
            &options,
            bytes,
            first,
            derive(config.seed, &[9, u64::MAX]),
            config.recovery_crash_states.max(3),
        );
        findings.extend(more);
    }
    Ok(findings.into_iter().map(|finding| finding.with_replay(replay.clone())).collect())
}
