//! `pmtx smoke`: a short smoke benchmark of the PM layer.
//!
//! Allocates one chunk of the pool and, for a few seconds, appends records of
//! 64 B, 256 B and 1 KiB persisted with write + flush + one fence, the same
//! with non-temporal stores + one fence, and 64 B records at random line
//! offsets. For each case it reports throughput, the median and p99 time of
//! one persist (one operation in eight is timed with ordered TSC reads), and
//! the per-operation PM counters, so a figure can be re-derived for another
//! medium.

use crate::pm_args::{PmArgs, PmKind};
use crate::pool_cmd::BackendJson;
use crate::progress::Progress;
use crate::timing::{ordered_ticks, TickClock};
use crate::units::{format_bytes, parse_seconds};
use crate::CliError;
use clap::Args;
use hdrhistogram::Histogram;
use pmtx_pm::{
    reset_thread_counters, thread_counters, ChunkOwner, Direct, Emulated, PmBackend, PmCounters, PmOptions, Pool,
    PoolError,
};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One operation in this many is timed individually (for the median and p99).
const SAMPLE_EVERY: usize = 8;

/// Size of the pool `smoke` creates when the file does not exist.
const DEFAULT_POOL_SIZE: u64 = 64 << 20;

/// `pmtx smoke`
#[derive(Args, Debug)]
pub struct SmokeArgs {
    /// Pool file; created (64 MiB, 2 MiB chunks) if missing.
    #[arg(long, default_value = "/tmp/pmtx-smoke.pool")]
    pool: PathBuf,
    #[command(flatten)]
    pm: PmArgs,
    /// Total measuring time in seconds, split evenly over the cases.
    #[arg(long, default_value = "2", value_parser = parse_seconds)]
    seconds: Duration,
    /// Seed of the random-offset case.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the results as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `write` + `flush` + `fence`, appended.
    Flush,
    /// `write_non_temporal` + `fence`, appended.
    NonTemporal,
    /// `write` + `flush` + `fence` at a random line.
    Random,
}

struct Case {
    name: &'static str,
    record: usize,
    mode: Mode,
}

const CASES: [Case; 7] = [
    Case { name: "append 64 B, flush+fence", record: 64, mode: Mode::Flush },
    Case { name: "append 256 B, flush+fence", record: 256, mode: Mode::Flush },
    Case { name: "append 1 KiB, flush+fence", record: 1024, mode: Mode::Flush },
    Case { name: "append 64 B, nt+fence", record: 64, mode: Mode::NonTemporal },
    Case { name: "append 256 B, nt+fence", record: 256, mode: Mode::NonTemporal },
    Case { name: "append 1 KiB, nt+fence", record: 1024, mode: Mode::NonTemporal },
    Case { name: "random 64 B, flush+fence", record: 64, mode: Mode::Random },
];

/// The chunk owner tag of `smoke` ("SM" / "OKE"): chunks with it left by an
/// interrupted run are freed by the next run.
fn smoke_owner() -> ChunkOwner {
    ChunkOwner::compose(u16::from_be_bytes(*b"SM"), u32::from_be_bytes([0, b'O', b'K', b'E']), 0)
}

#[derive(Serialize)]
struct CaseResult {
    name: &'static str,
    record_bytes: usize,
    ops: u64,
    seconds: f64,
    ops_per_second: f64,
    median_ns: u64,
    p99_ns: u64,
    per_op: PerOp,
}

#[derive(Serialize)]
struct PerOp {
    lines_flushed: f64,
    fences: f64,
    non_temporal_bytes: f64,
    blocks_256_written: f64,
    stall_ns: f64,
    msyncs: f64,
}

impl PerOp {
    fn new(counters: &PmCounters, ops: u64) -> Self {
        let per = |value: u64| value as f64 / ops.max(1) as f64;
        Self {
            lines_flushed: per(counters.lines_flushed),
            fences: per(counters.fences),
            non_temporal_bytes: per(counters.non_temporal_bytes),
            blocks_256_written: per(counters.blocks_256_written),
            stall_ns: per(counters.stall_ns),
            msyncs: per(counters.msyncs),
        }
    }
}

#[derive(Serialize)]
struct Report {
    pool: String,
    pool_created: bool,
    seconds_per_case: f64,
    seed: u64,
    backend: BackendJson,
    latency_model: Option<LatencyJson>,
    cases: Vec<CaseResult>,
}

#[derive(Serialize)]
struct LatencyJson {
    name: &'static str,
    description: String,
    media: Option<MediaJson>,
    sequential_line_ns: u64,
    random_line_ns: u64,
    fence_ns: u64,
    read_line_ns: u64,
}

#[derive(Serialize)]
struct MediaJson {
    dimms: u32,
    interleave_bytes: u64,
    xpbuffer_bytes: u64,
    persist_latency_ns: u64,
    rfo_latency_ns: u64,
    read_latency_random_ns: u64,
    read_latency_sequential_ns: u64,
    write_bandwidth_mb_s: u64,
    read_bandwidth_mb_s: u64,
}

/// Runs `pmtx smoke`.
pub fn run(args: SmokeArgs) -> Result<(), CliError> {
    let options = args.pm.options()?;
    match args.pm.pm {
        PmKind::Direct => run_on::<Direct>(&args, &options),
        PmKind::Emulated => run_on::<Emulated>(&args, &options),
    }
}

fn open_or_create<B: PmBackend>(path: &Path, options: &PmOptions) -> Result<(Pool<B>, bool), CliError> {
    match Pool::<B>::open(path, options) {
        Ok(pool) => Ok((pool, false)),
        Err(PoolError::NotFound(_)) => {
            let pool = Pool::<B>::create(path, DEFAULT_POOL_SIZE, pmtx_pm::layout::DEFAULT_CHUNK_SIZE, options)?;
            Ok((pool, true))
        }
        Err(error) => Err(error.into()),
    }
}

fn run_on<B: PmBackend>(args: &SmokeArgs, options: &PmOptions) -> Result<(), CliError> {
    let (pool, created) = open_or_create::<B>(&args.pool, options)?;
    let owner = smoke_owner();
    for stale in pool.chunks_owned_by(owner) {
        pool.free_chunk(stale);
    }
    let chunk = pool.allocate_chunk(owner, false)?;
    let info = pool.info();
    let backend = pool.backend();
    let base = pool.chunk_offset(chunk);
    let chunk_size = pool.geometry().chunk_size;

    if !args.json {
        let g = &info.geometry;
        println!(
            "pmtx smoke on {}{} ({}, {} chunks of {}), {} cases x {:.2} s, seed {}",
            args.pool.display(),
            if created { " (created)" } else { "" },
            format_bytes(g.size),
            g.chunk_count,
            format_bytes(g.chunk_size),
            CASES.len(),
            args.seconds.as_secs_f64() / CASES.len() as f64,
            args.seed
        );
        let b = &info.backend;
        println!(
            "backend: {} | mapping: {} | flush: {} | domain: {} | msync: {}",
            b.kind,
            b.mapping,
            b.flush_instruction,
            b.domain,
            if b.msync { "every fence" } else { "off" }
        );
        if let Some(model) = b.latency {
            println!("latency model: {}", model.describe());
        }
        println!("durability: {}", b.durability());
    }

    // Fault the chunk's pages in, so the first pass does not measure page faults.
    backend.write_zeros(base, chunk_size);
    backend.persist(base, chunk_size);

    let clock = TickClock::calibrate();
    let per_case = args.seconds / CASES.len() as u32;
    let mut progress = Progress::new(CASES.len());
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut results = Vec::with_capacity(CASES.len());
    let mut buffer = vec![0u8; 1024];
    for (index, case) in CASES.iter().enumerate() {
        progress.phase(index, case.name);
        let record = case.record as u64;
        let slots = chunk_size / record;
        let lines = chunk_size / 64;
        // 1 ns to 1 hour at 3 significant digits; larger values are clamped.
        let mut histogram =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| CliError::runtime(e.to_string()))?;
        reset_thread_counters();
        let mut ops = 0u64;
        let start = Instant::now();
        let elapsed = loop {
            for step in 0..32 {
                // Time one operation in SAMPLE_EVERY, so the throughput is
                // barely affected by the timing itself.
                let timed = step % SAMPLE_EVERY == 0;
                let offset = match case.mode {
                    Mode::Random => base + rng.gen_range(0..lines) * 64,
                    _ => base + (ops % slots) * record,
                };
                buffer[..8].copy_from_slice(&ops.to_le_bytes());
                let data = &buffer[..case.record];
                let t0 = if timed { ordered_ticks() } else { 0 };
                match case.mode {
                    Mode::Flush | Mode::Random => {
                        backend.write(offset, data);
                        backend.flush(offset, record);
                        backend.fence();
                    }
                    Mode::NonTemporal => {
                        backend.write_non_temporal(offset, data);
                        backend.fence();
                    }
                }
                if timed {
                    histogram.saturating_record(clock.nanoseconds(t0, ordered_ticks()).max(1));
                }
                ops += 1;
            }
            let elapsed = start.elapsed();
            if elapsed >= per_case {
                break elapsed;
            }
            progress.update(index, case.name, elapsed.as_secs_f64() / per_case.as_secs_f64());
        };
        let counters = thread_counters();
        let seconds = elapsed.as_secs_f64();
        results.push(CaseResult {
            name: case.name,
            record_bytes: case.record,
            ops,
            seconds,
            ops_per_second: ops as f64 / seconds,
            median_ns: histogram.value_at_quantile(0.5),
            p99_ns: histogram.value_at_quantile(0.99),
            per_op: PerOp::new(&counters, ops),
        });
    }
    progress.finish();

    pool.free_chunk(chunk);
    let was_clean = pool.was_clean_shutdown();
    if was_clean {
        pool.close();
    } else {
        // Marking it clean now would make an engine skip the recovery it needs.
        eprintln!("note: the pool was not shut down cleanly before this run; it is left marked unclean");
        drop(pool);
    }

    let report = Report {
        pool: args.pool.display().to_string(),
        pool_created: created,
        seconds_per_case: per_case.as_secs_f64(),
        seed: args.seed,
        backend: BackendJson::new(&info.backend),
        latency_model: info.backend.latency.map(|m| LatencyJson {
            name: m.name,
            description: m.describe(),
            media: m.media.map(|media| MediaJson {
                dimms: media.dimms,
                interleave_bytes: media.interleave_bytes,
                xpbuffer_bytes: media.xpbuffer_bytes,
                persist_latency_ns: media.persist_latency_ns,
                rfo_latency_ns: media.rfo_latency_ns,
                read_latency_random_ns: media.read_latency_random_ns,
                read_latency_sequential_ns: media.read_latency_sequential_ns,
                write_bandwidth_mb_s: media.write_bandwidth_mb_s,
                read_bandwidth_mb_s: media.read_bandwidth_mb_s,
            }),
            sequential_line_ns: m.sequential_line_ns,
            random_line_ns: m.random_line_ns,
            fence_ns: m.fence_ns,
            read_line_ns: m.read_line_ns,
        }),
        cases: results,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report.cases);
    }
    Ok(())
}

fn print_table(cases: &[CaseResult]) {
    println!();
    println!(
        "{:<26} {:>11} {:>10} {:>9} | {:>8} {:>7} {:>8} {:>8} {:>9} {:>7}",
        "case", "ops/s", "median ns", "p99 ns", "lines/op", "fence/op", "nt B/op", "256B/op", "stall ns/op", "msync/op"
    );
    for case in cases {
        let p = &case.per_op;
        println!(
            "{:<26} {:>11.0} {:>10} {:>9} | {:>8.2} {:>8.2} {:>8.1} {:>8.2} {:>11.1} {:>8.2}",
            case.name,
            case.ops_per_second,
            case.median_ns,
            case.p99_ns,
            p.lines_flushed,
            p.fences,
            p.non_temporal_bytes,
            p.blocks_256_written,
            p.stall_ns,
            p.msyncs
        );
    }
}
