//! `pmtx`: the command-line tool of pmtx.
//!
//! Every subcommand lives in its own module with an `Args` struct (clap
//! derive) and a `run(args) -> Result<(), CliError>`; `main` only dispatches
//! and turns errors into exit codes. Further subcommands slot in as
//! modules and `Command` variants, reusing
//! [`pm_args::PmArgs`] for the backend flags and [`units`] for sizes.
//!
//! Exit codes: 0 success, 1 runtime error (`error: ...` on stderr), 2 usage
//! error (bad option values; clap's own errors also exit 2).

mod bench;
mod crashtest;
mod error;
mod media_cmd;
mod plot;
mod pm_args;
mod pool_cmd;
mod progress;
mod report;
mod reproduce;
mod serve;
mod smoke;
mod soak;
mod timing;
mod units;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The engines allocate DRAM metadata per inserted row (a Met-Cache row, a
/// cached value, index nodes) and buffers per scan; mimalloc's thread-local
/// free lists take a fraction of glibc malloc's instructions for them
/// (docs/instructions.md). A program that embeds
/// pmtx-engine chooses its own allocator; this is the CLI's choice.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub use error::CliError;

/// pmtx: an embedded transactional storage engine for persistent memory.
#[derive(Parser, Debug)]
#[command(name = "pmtx", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create, inspect and check pool files.
    Pool(pool_cmd::PoolArgs),
    /// Short smoke benchmark of the PM layer (persist costs and counters).
    Smoke(smoke::SmokeArgs),
    /// Run a workload (tpcc, smallbank, ycsb, queue) on engines and thread counts and report throughput and latency.
    Bench(Box<bench::BenchArgs>),
    /// Draw the JSON results of `pmtx bench` as an SVG or PNG chart (the output extension picks).
    Plot(plot::PlotArgs),
    /// Crash-consistency test of an engine: simulated PM crash images (default) or process kills (--kill).
    Crashtest(Box<crashtest::CrashtestArgs>),
    /// Run one engine on a workload (default: a queue) for minutes and report per interval whether memory and scan latency stay flat.
    Soak(Box<soak::SoakArgs>),
    /// The emulated backend's media model: its figures beside the published Optane measurements, and its curves.
    Media(media_cmd::MediaArgs),
    /// Reproduce a figure of one of the papers, scaled to this machine: runs, the paper's claims beside ours, verdicts.
    Reproduce(reproduce::ReproduceArgs),
    /// Write the results page (Markdown and its charts) from `pmtx reproduce` output directories and bench reports.
    Report(report::ReportArgs),
    /// Run one node of a replicated cluster (Raft over TCP), optionally with the bank example's load.
    Serve(Box<serve::ServeArgs>),
    /// Ask a node of a replicated cluster for its status or checksum, or add and remove nodes.
    Cluster(serve::ClusterArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pool(args) => pool_cmd::run(args),
        Command::Smoke(args) => smoke::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::Plot(args) => plot::run(args),
        Command::Crashtest(args) => crashtest::run(*args),
        Command::Soak(args) => soak::run(*args),
        Command::Media(args) => media_cmd::run(args),
        Command::Reproduce(args) => {
            reproduce::force_pmem_flushes();
            reproduce::run(args, |out, page| report::write_page(out, page, &[]))
        }
        Command::Report(args) => report::run(args),
        Command::Serve(args) => serve::run_serve(*args),
        Command::Cluster(args) => serve::run_cluster(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
