//! `pmtx media`: the `optane` media model against the published
//! measurements of Optane DC PMem, and its curves against access size and
//! thread count.
//!
//! The model's figures come from its virtual-time driver
//! (`pmtx_pm::media::simulate`), which is the model the `emulated` backend
//! charges in real time, free of this machine's two cores and timer
//! resolution. `--real` also runs the `emulated` backend itself on an
//! in-memory pool at 1 and 2 threads, to show that the real-time charging
//! follows the model on this machine.

use crate::units::format_bytes;
use crate::CliError;
use clap::{Args, Subcommand};
use pmtx_pm::media::{published_params, simulate, MediaParams, Stream, StreamOffsets, PUBLISHED};
use pmtx_pm::{ChunkOwner, Emulated, LatencyModel, PmBackend, PmOptions, Pool};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `pmtx media`.
#[derive(Args, Debug)]
pub struct MediaArgs {
    #[command(subcommand)]
    command: MediaCommand,
}

#[derive(Subcommand, Debug)]
enum MediaCommand {
    /// Compare the `optane` media model with the published measurements and print its curves.
    Validate(ValidateArgs),
}

#[derive(Args, Debug)]
struct ValidateArgs {
    /// Interleaved DIMMs of the model for the curves [default: 6].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    dimms: Option<u32>,
    /// Accesses per thread in each simulated stream.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    accesses: u64,
    /// Also run the `emulated` backend for real on this machine (1 and 2
    /// threads), beside the model's prediction for the same streams.
    #[arg(long)]
    real: bool,
    /// Seconds per real stream (with --real).
    #[arg(long, default_value = "0.3", value_parser = crate::units::parse_seconds)]
    seconds: Duration,
    /// Write every figure as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct ValidationJson {
    model: String,
    published: Vec<PublishedJson>,
    curves: Vec<CurveJson>,
    real: Vec<RealJson>,
}

#[derive(Serialize)]
struct PublishedJson {
    what: String,
    source: String,
    unit: String,
    published: f64,
    model: f64,
    ratio: f64,
    within_15_percent: bool,
    /// False: the preset's parameters were fitted to this row; true: the
    /// row was kept out of the fit (an independent measurement).
    held_out: bool,
}

#[derive(Serialize)]
struct CurveJson {
    kind: String,
    access_bytes: u64,
    threads: u32,
    bandwidth_mb_s: f64,
    mean_wait_ns: f64,
}

#[derive(Serialize)]
struct RealJson {
    kind: String,
    access_bytes: u64,
    threads: u32,
    model_bandwidth_mb_s: f64,
    model_wait_ns: f64,
    real_bandwidth_mb_s: f64,
    real_wait_ns: f64,
}

/// Runs `pmtx media`.
pub fn run(args: MediaArgs) -> Result<(), CliError> {
    match args.command {
        MediaCommand::Validate(args) => validate(&args),
    }
}

/// The stream kinds of the curves: (label, random, write, non-temporal).
const KINDS: [(&str, bool, bool, bool); 5] = [
    ("write nt seq", false, true, true),
    ("write nt rand", true, true, true),
    ("write clwb seq", false, true, false),
    ("write clwb rand", true, true, false),
    ("read rand", true, false, false),
];
const SIZES: [u64; 5] = [64, 256, 1024, 4096, 16384];
const THREADS: [u32; 6] = [1, 2, 4, 8, 16, 24];

fn validate(args: &ValidateArgs) -> Result<(), CliError> {
    let defaults = MediaParams::OPTANE;
    let params = LatencyModel::OPTANE
        .with_dimms(args.dimms.unwrap_or(defaults.dimms), defaults.interleave_bytes)
        .map_err(|error| CliError::usage(error.to_string()))?
        .media
        .expect("optane is a media model");
    let model = LatencyModel { media: Some(params), ..LatencyModel::OPTANE };
    println!("model: {}", model.describe());
    println!("(figures of the model: its virtual-time driver, {} accesses per thread)", args.accesses);
    println!();
    println!("published measurements of first-generation Optane DC PMem (six DIMMs unless one is named):");
    println!("{:<84} {:>10} {:>10} {:>7}  {:<8}  source", "measurement", "published", "model", "ratio", "row");
    let mut published = Vec::new();
    for row in PUBLISHED {
        let result = simulate(published_params(defaults, &row), row.stream, args.accesses, 7);
        let value = row.metric.of(&result);
        let unit = match row.metric {
            pmtx_pm::media::Metric::BandwidthMbS => "MB/s",
            pmtx_pm::media::Metric::WaitNs => "ns",
        };
        let ratio = value / row.value;
        let role = if row.held_out { "held out" } else { "fitted" };
        println!(
            "{:<84} {:>7.0} {unit:<2} {:>7.0} {unit:<2} {:>6.2}x  {role:<8}  {}",
            row.what, row.value, value, ratio, row.source
        );
        published.push(PublishedJson {
            what: row.what.to_string(),
            source: row.source.to_string(),
            unit: unit.to_string(),
            published: row.value,
            model: value,
            ratio,
            within_15_percent: (0.85..=1.15).contains(&ratio),
            held_out: row.held_out,
        });
    }
    let mut curves = Vec::new();
    for (kind, random, write, non_temporal) in KINDS {
        println!();
        println!(
            "{kind}: bandwidth MB/s (mean wait per access, ns) by access size and threads, {} DIMMs",
            params.dimms
        );
        print!("{:>8}", "size");
        for threads in THREADS {
            print!(" {:>16}", format!("{threads} thr"));
        }
        println!();
        for access_bytes in SIZES {
            print!("{:>8}", format_bytes(access_bytes));
            for threads in THREADS {
                let stream = Stream { threads, access_bytes, random, write, non_temporal };
                let result = simulate(params, stream, args.accesses, 11);
                print!(" {:>16}", format!("{:.0} ({:.0})", result.bandwidth_mb_s, result.mean_wait_ns));
                curves.push(CurveJson {
                    kind: kind.to_string(),
                    access_bytes,
                    threads,
                    bandwidth_mb_s: result.bandwidth_mb_s,
                    mean_wait_ns: result.mean_wait_ns,
                });
            }
            println!();
        }
    }
    let mut real = Vec::new();
    if args.real {
        println!();
        println!(
            "the emulated backend in real time on this machine ({:.2} s per stream; its own copy and flush time included) \
             against the model:",
            args.seconds.as_secs_f64()
        );
        println!(
            "{:<16} {:>8} {:>7} {:>14} {:>14} {:>12} {:>12}",
            "stream", "size", "threads", "model MB/s", "real MB/s", "model wait", "real wait"
        );
        for (kind, random, write, non_temporal) in KINDS {
            for access_bytes in [64, 4096] {
                for threads in [1u32, 2] {
                    let stream = Stream { threads, access_bytes, random, write, non_temporal };
                    let predicted = simulate(params, stream, args.accesses, 11);
                    let (bandwidth, wait) = run_real(model, stream, args.seconds)?;
                    println!(
                        "{kind:<16} {:>8} {threads:>7} {:>14.0} {bandwidth:>14.0} {:>9.0} ns {wait:>9.0} ns",
                        format_bytes(access_bytes),
                        predicted.bandwidth_mb_s,
                        predicted.mean_wait_ns
                    );
                    real.push(RealJson {
                        kind: kind.to_string(),
                        access_bytes,
                        threads,
                        model_bandwidth_mb_s: predicted.bandwidth_mb_s,
                        model_wait_ns: predicted.mean_wait_ns,
                        real_bandwidth_mb_s: bandwidth,
                        real_wait_ns: wait,
                    });
                }
            }
        }
    }
    if let Some(path) = &args.json {
        let json = ValidationJson { model: model.describe(), published, curves, real };
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .map_err(|error| CliError::runtime(format!("{}: {error}", path.display())))?;
    }
    Ok(())
}

/// Bytes of each thread's region in a real stream.
const REAL_REGION: u64 = 64 << 20;

/// Runs `stream` on the `emulated` backend over an in-memory pool for about
/// `seconds`: (bandwidth MB/s, mean wait per access ns, from the backend's
/// stall counter).
fn run_real(model: LatencyModel, stream: Stream, seconds: Duration) -> Result<(f64, f64), CliError> {
    let options = PmOptions { latency: model, ..PmOptions::default() };
    let chunk = 2 << 20;
    let pool_size = REAL_REGION * u64::from(stream.threads) + (16 << 20);
    let pool = Pool::<Emulated>::create_in_memory(pool_size, chunk, &options)?;
    let owner = ChunkOwner::new(0x4D45).expect("a valid owner");
    let mut regions = Vec::new();
    for _ in 0..stream.threads {
        let first = pool.allocate_chunk(owner, false)?;
        for _ in 1..REAL_REGION / chunk {
            pool.allocate_chunk(owner, false)?;
        }
        regions.push(pool.chunk_offset(first));
    }
    let results: Vec<(u64, u64, u64, Duration)> = std::thread::scope(|scope| {
        let handles: Vec<_> = regions
            .iter()
            .enumerate()
            .map(|(index, &base)| {
                let pool = &pool;
                scope.spawn(move || {
                    let backend = pool.backend();
                    let source = vec![0x5Au8; stream.access_bytes as usize];
                    let mut destination = vec![0u8; stream.access_bytes as usize];
                    let mut offsets =
                        StreamOffsets::new(&stream, base, REAL_REGION, 0x9E37_79B9_7F4A_7C15 ^ index as u64);
                    // The region's pages exist before the clock starts.
                    backend.write_zeros(base, REAL_REGION);
                    pmtx_pm::reset_thread_counters();
                    let start = Instant::now();
                    let mut accesses = 0u64;
                    while start.elapsed() < seconds {
                        for _ in 0..16 {
                            let offset = offsets.next_offset();
                            if !stream.write {
                                backend.read(offset, &mut destination);
                            } else if stream.non_temporal {
                                backend.write_non_temporal(offset, &source);
                                backend.fence();
                            } else {
                                backend.write(offset, &source);
                                backend.persist(offset, stream.access_bytes);
                            }
                            accesses += 1;
                        }
                    }
                    let elapsed = start.elapsed();
                    let stall = pmtx_pm::thread_counters().stall_ns;
                    (accesses, accesses * stream.access_bytes, stall, elapsed)
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("a stream thread panicked")).collect()
    });
    let accesses: u64 = results.iter().map(|result| result.0).sum();
    let bytes: u64 = results.iter().map(|result| result.1).sum();
    let stall: u64 = results.iter().map(|result| result.2).sum();
    let elapsed = results.iter().map(|result| result.3).max().unwrap_or(seconds).as_secs_f64();
    Ok((bytes as f64 / elapsed / 1e6, stall as f64 / accesses.max(1) as f64))
}
