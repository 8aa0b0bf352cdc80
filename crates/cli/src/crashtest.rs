//! `pmtx crashtest`: crash-consistency checks of a durable engine (the
//! harness is the `pmtx-crashtest` crate).
//!
//! * default (sim): run the workload on the crash simulator, recover
//!   `--images` crash images in fresh engine instances and check the oracles
//!   (no panic or error in recovery, pool metadata and structure, every
//!   acknowledged commit present and nothing else, the workload's
//!   consistency check, recovery deterministic and crash-safe);
//! * `--kill`: run the workload in a child process (this binary again, with
//!   the hidden `--child` flag) on a pool file, kill it with SIGKILL at a
//!   seeded random moment, recover and check, `--iterations` times.
//!
//! * `--corruption-matrix`: damage every persistent structure of a small
//!   pool of every durable engine (bit flips, truncation, torn writes),
//!   reopen it, and print per structure x damage x engine whether the
//!   damage was `detected` (a typed error naming the structure) or
//!   `harmless` (every committed row read back); exits 1 if any damage is
//!   accepted silently (`pmtx_crashtest::matrix`).
//!
//! `--cc` picks the engine's concurrency-control protocol (default: the
//! engine's own, hekaton for zen+ and silo for the others; the
//! kill mode passes it on to the child).
//!
//! Prints `crashtest: <images> images, <violations> violations, seed <S>`
//! (kill mode: `<iterations> kill iterations`) on stdout, progress and
//! violations (with what is needed to replay them) on stderr, and exits 1
//! on any violation.

use crate::error::CliError;
use crate::units::{parse_chunk_size, parse_size};
use clap::Args;
use pmtx_crashtest::{parse_seed, ChildConfig, KillConfig, Scale, SimConfig, Violation, WorkloadKind};
use pmtx_engine::CcProtocol;
use std::path::PathBuf;

/// Options of `pmtx crashtest`.
#[derive(Args, Debug)]
pub struct CrashtestArgs {
    /// Engine to test (a durable one: group-commit, dbxn, ...), in the
    /// engine grammar of `pmtx bench --engine` with the options `medium=`
    /// and `cc=` only: `dbx-naive:medium=disk` puts dbx-naive's log on
    /// files (with --kill: the simulator models PM only, as for dbx-disk).
    #[arg(long, default_value = "group-commit")]
    engine: String,
    /// Concurrency-control protocol of the engine: silo, occ, no-wait,
    /// wait-die, dl-detect, ... (as `cc=` of `pmtx bench
    /// --engine`) [default: the engine's own: hekaton for zen+, silo for
    /// the others].
    #[arg(long, value_parser = crate::bench::spec::parse_cc)]
    cc: Option<CcProtocol>,
    /// Workload: smallbank, ycsb or tpcc (tiny scale, harness-driven
    /// transactions with a model of the acknowledged effects).
    #[arg(long, default_value = "smallbank")]
    workload: String,
    /// Crash images to recover and check.
    #[arg(long, default_value_t = 1000)]
    images: usize,
    /// Seed of everything random (decimal or 0x-hex); default: random,
    /// printed.
    #[arg(long)]
    seed: Option<String>,
    /// Worker threads of the workload.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Harness transactions per thread (sim mode).
    #[arg(long, default_value_t = 300)]
    txns: u64,
    /// Pool size.
    #[arg(long, default_value = "32MiB", value_parser = parse_size)]
    pool_size: u64,
    /// Pool chunk size.
    #[arg(long, default_value = "256KiB", value_parser = parse_chunk_size)]
    chunk_size: u64,
    /// Images checked in parallel (default: the number of CPUs).
    #[arg(long)]
    jobs: Option<usize>,
    /// Also check recovery determinism and crashes during recovery on every
    /// n-th image (0: never).
    #[arg(long, default_value_t = 10)]
    recovery_check_every: usize,
    /// Write the failing crash images into this directory.
    #[arg(long)]
    save_failing: Option<PathBuf>,
    /// Re-check a crash image saved by --save-failing (recovery, structure,
    /// workload check, determinism; the run's model is not available).
    #[arg(long, conflicts_with = "kill")]
    replay: Option<PathBuf>,
    /// Process-kill mode: run the workload in a child process on a pool
    /// file and SIGKILL it at random moments.
    #[arg(long)]
    kill: bool,
    /// Kill iterations (with --kill).
    #[arg(long, default_value_t = 20)]
    iterations: u64,
    /// Kill at most this many milliseconds after the child is ready.
    #[arg(long, default_value_t = 150)]
    max_kill_ms: u64,

    /// With --kill: a kill aimed after the child is ready first waits for at
    /// least this many acknowledged commits (a child that never reaches
    /// them is reported as a violation).
    #[arg(long, default_value_t = 16)]
    min_acks: u64,
    /// Smallbank accounts.
    #[arg(long, default_value_t = Scale::default().accounts)]
    accounts: u64,
    /// YCSB records.
    #[arg(long, default_value_t = Scale::default().records)]
    records: u64,
    /// TPC-C items (non-standard reduced scale).
    #[arg(long, default_value_t = Scale::default().tpcc_items)]
    tpcc_items: u32,
    /// TPC-C customers per district (non-standard reduced scale).
    #[arg(long, default_value_t = Scale::default().tpcc_customers)]
    tpcc_customers: u32,
    /// Harness self-test: acknowledge pipelined commits when they return
    /// instead of when durable (a deliberately broken engine the oracle must
    /// catch); with --kill (group-commit only) the child also stalls its
    /// epochs, so no acknowledged commit is durable.
    #[arg(long, hide = true)]
    fake_ack: bool,
    /// Corruption matrix: damage each persistent structure of a small pool
    /// of every durable engine whose state is in the pool (bit flips,
    /// truncation, torn writes), reopen, and print for each structure x
    /// damage x engine `detected` (refused with an error naming the
    /// structure) or `harmless` (every committed row intact); exits 1 if
    /// any damage is accepted silently. --engine is ignored; see
    /// --matrix-engine.
    #[arg(long, conflicts_with_all = ["kill", "replay"])]
    corruption_matrix: bool,
    /// With --corruption-matrix: only this engine (repeatable).
    #[arg(long, requires = "corruption_matrix")]
    matrix_engine: Vec<String>,
    /// With --corruption-matrix: bit-flip trials per structure.
    #[arg(long, default_value_t = 8, requires = "corruption_matrix")]
    flips: usize,
    /// Internal: run as the child of `--kill`.
    #[arg(long, hide = true)]
    child: bool,
    /// Internal (child): the pool file.
    #[arg(long, hide = true)]
    pool: Option<PathBuf>,
    /// Internal (child): the kill iteration.
    #[arg(long, hide = true, default_value_t = 0)]
    iteration: u64,
    /// Internal (child): checkpoint period in milliseconds.
    #[arg(long, hide = true, default_value_t = 10)]
    checkpoint_ms: u64,
}

fn progress(line: &str) {
    eprintln!("crashtest: {line}");
}

fn report_violations(violations: &[Violation], count: u64) {
    for violation in violations {
        eprintln!("violation {violation}");
    }
    if count > violations.len() as u64 {
        eprintln!("({} more violations not shown)", count - violations.len() as u64);
    }
}

/// Runs `pmtx crashtest --corruption-matrix`.
fn run_matrix(args: &CrashtestArgs) -> Result<(), CliError> {
    let mut config = pmtx_crashtest::matrix::MatrixConfig::default();
    if !args.matrix_engine.is_empty() {
        config.engines = args
            .matrix_engine
            .iter()
            .map(|name| {
                let engine = pmtx_engine::EngineKind::parse(name)
                    .ok_or_else(|| CliError::usage(format!("unknown engine {name:?}")))?;
                if !pmtx_crashtest::matrix::matrix_engines().contains(&engine) {
                    return Err(CliError::usage(format!(
                        "{engine} is not in the corruption matrix (durable engines whose state is all in the pool)"
                    )));
                }
                Ok(engine)
            })
            .collect::<Result<_, _>>()?;
    }
    if args.flips == 0 {
        return Err(CliError::usage("--flips must be at least 1"));
    }
    config.flips = args.flips;
    if let Some(text) = &args.seed {
        config.seed = parse_seed(text).ok_or_else(|| CliError::usage(format!("invalid seed {text:?}")))?;
    }
    let report = pmtx_crashtest::matrix::run_matrix(&config, &progress).map_err(CliError::runtime)?;
    print!("{}", report.render());
    let failed = report.failed().count();
    if failed > 0 {
        return Err(CliError::runtime(format!(
            "{failed} cells accepted damage silently or failed with an error naming no damaged structure"
        )));
    }
    Ok(())
}

/// Runs `pmtx crashtest`.
pub fn run(args: CrashtestArgs) -> Result<(), CliError> {
    if args.corruption_matrix {
        return run_matrix(&args);
    }
    let spec = pmtx_crashtest::parse_engine(&args.engine).map_err(CliError::usage)?;
    let (engine, medium) = (spec.kind, spec.dbxn.medium);
    let cc = match args.cc {
        Some(cc) if spec.given.iter().any(|(key, _)| key == "cc") && cc != spec.cc => {
            return Err(CliError::usage(format!("--cc {cc} and --engine {} name two protocols", args.engine)));
        }
        Some(cc) => cc,
        None => spec.cc,
    };
    pmtx_engine::spec::check_cc(engine, cc).map_err(CliError::usage)?;
    let workload = WorkloadKind::parse(&args.workload).ok_or_else(|| {
        CliError::usage(format!("unknown workload {:?}; workloads: smallbank, ycsb, tpcc", args.workload))
    })?;
    let seed = match &args.seed {
        Some(text) => parse_seed(text).ok_or_else(|| CliError::usage(format!("invalid seed {text:?}")))?,
        None => rand::random::<u64>(),
    };
    if args.threads == 0 || args.threads > 64 {
        return Err(CliError::usage(format!("--threads must be 1..=64, got {}", args.threads)));
    }
    let scale = Scale {
        accounts: args.accounts,
        records: args.records,
        tpcc_items: args.tpcc_items,
        tpcc_customers: args.tpcc_customers,
    };
    if args.child {
        let pool = args.pool.clone().ok_or_else(|| CliError::usage("--child needs --pool"))?;
        let config = ChildConfig {
            engine,
            medium,
            cc,
            workload,
            scale,
            threads: args.threads,
            seed,
            pool,
            pool_size: args.pool_size,
            chunk_size: args.chunk_size,
            iteration: args.iteration,
            checkpoint_ms: args.checkpoint_ms,
            fake_ack: args.fake_ack,
        };
        std::process::exit(pmtx_crashtest::child_main(&config));
    }
    pmtx_crashtest::checkable(engine).map_err(CliError::usage)?;
    if !args.kill {
        pmtx_crashtest::sim_checkable(engine, medium).map_err(CliError::usage)?;
    }
    if args.kill {
        let program = std::env::current_exe()?;
        let mut config =
            KillConfig::new(engine, workload, seed, program, vec!["crashtest".to_string(), "--child".to_string()]);
        config.medium = medium;
        config.cc = cc;
        config.scale = scale;
        config.threads = args.threads;
        config.iterations = args.iterations;
        config.pool_size = args.pool_size;
        config.chunk_size = args.chunk_size;
        config.max_kill_delay = std::time::Duration::from_millis(args.max_kill_ms);
        config.min_acks_before_kill = args.min_acks;
        config.checkpoint_ms = args.checkpoint_ms;
        config.fake_ack = args.fake_ack;
        progress(&format!("seed {seed:#x}: {}", config.command_line()));
        let report = pmtx_crashtest::run_kill(&config, &progress).map_err(CliError::runtime)?;
        eprintln!(
            "crashtest: {} commits and {} acknowledgements reported by the children, {} unacknowledged commits \
             recovered, {} early kills, {} kills after at least {} acknowledgements, {} fresh pools (the database \
             outgrew the pool)",
            report.committed,
            report.acknowledged,
            report.unacknowledged_recovered,
            report.early_kills,
            report.kills_after_acks,
            config.min_acks_before_kill,
            report.pool_resets
        );
        println!(
            "crashtest: {} kill iterations, {} violations, seed {seed:#x}",
            report.iterations, report.violation_count
        );
        if report.violation_count > 0 {
            report_violations(&report.violations, report.violation_count);
            return Err(CliError::runtime(format!(
                "{} violations; replay with: {}",
                report.violation_count,
                config.command_line()
            )));
        }
        return Ok(());
    }
    let mut config = SimConfig::new(engine, workload, seed);
    config.cc = cc;
    if let Some(path) = &args.replay {
        config.scale = scale;
        config.threads = args.threads;
        config.chunk_size = args.chunk_size;
        let bytes = std::fs::read(path)
            .map_err(|error| CliError::runtime(format!("cannot read {}: {error}", path.display())))?;
        let violations = pmtx_crashtest::replay_image(&config, &bytes).map_err(CliError::runtime)?;
        println!("crashtest: 1 images, {} violations, seed {seed:#x}", violations.len());
        if !violations.is_empty() {
            report_violations(&violations, violations.len() as u64);
            return Err(CliError::runtime(format!("{} violations in {}", violations.len(), path.display())));
        }
        return Ok(());
    }
    config.scale = scale;
    config.threads = args.threads;
    config.txns_per_thread = args.txns;
    config.images = args.images;
    config.pool_size = args.pool_size;
    config.chunk_size = args.chunk_size;
    if let Some(jobs) = args.jobs {
        config.jobs = jobs.max(1);
    }
    config.recovery_check_every = args.recovery_check_every;
    config.fake_ack = args.fake_ack;
    config.save_dir = args.save_failing.clone();
    progress(&format!("seed {seed:#x}: {}", config.command_line()));
    let report = pmtx_crashtest::run_sim(&config, &progress).map_err(CliError::runtime)?;
    eprintln!(
        "crashtest: {} commits ({} acknowledged), {} crash states captured, {} used, {} extra images recovered by the \
         determinism checks; run {:.1} s, checks {:.1} s",
        report.committed,
        report.acknowledged,
        report.states_captured,
        report.states_used,
        report.recovery_images,
        report.run_time.as_secs_f64(),
        report.check_time.as_secs_f64()
    );
    let counters: Vec<String> = report
        .engine_counters
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(name, count)| format!("{name}={count}"))
        .collect();
    if !counters.is_empty() {
        eprintln!("crashtest: engine counters of the run: {}", counters.join(", "));
    }
    println!("crashtest: {} images, {} violations, seed {seed:#x}", report.images, report.violation_count);
    if report.violation_count > 0 {
        report_violations(&report.violations, report.violation_count);
        return Err(CliError::runtime(format!(
            "{} violations; replay with: {}",
            report.violation_count,
            config.command_line()
        )));
    }
    Ok(())
}
