//! Backend flags shared by every subcommand that runs on a pool
//! (`smoke` now; `bench` and friends later): `--pm`, `--pm-model`, `--msync`,
//! `--eadr`, `--flush`.

use crate::CliError;
use clap::{Args, ValueEnum};
use pmtx_pm::{CpuFeatures, FlushInstruction, LatencyModel, PersistenceDomain, PmOptions};

/// Which backend to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PmKind {
    /// Real store, flush and fence instructions on the mapped pool.
    Direct,
    /// Direct plus a media-latency model charged at every fence.
    Emulated,
}

/// Latency model of the emulated backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// No injected latency.
    Dram,
    /// Optane DC PMem as a medium: XPLines, write-combining buffers,
    /// interleaved DIMMs sharing their bandwidth (docs/media-model.md).
    Optane,
    /// The first model: 170 ns per sequential and 510 ns per random
    /// persisted line, charged at the fence with no overlap.
    Simple,
    /// The SP^3 paper's emulation: 500 ns per flushed line.
    #[value(name = "sp3-500ns")]
    Sp3500ns,
}

/// Flush instruction override.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FlushArg {
    /// Write back, keep the line cached.
    Clwb,
    /// Write back and evict, ordered by sfence.
    Clflushopt,
    /// Write back and evict (baseline x86-64; fenced with mfence).
    Clflush,
}

/// The media model's DIMM layout (`--pm-model optane`).
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct MediaArgs {
    /// Interleaved PM DIMMs of the `optane` media model [default: 6].
    #[arg(long = "pm-dimms", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub dimms: Option<u32>,
    /// Interleave stripe of the `optane` media model, a power of two of at
    /// least 256 bytes, e.g. 4KiB [default: 4KiB].
    #[arg(long = "pm-interleave", value_parser = crate::units::parse_size)]
    pub interleave: Option<u64>,
    /// Emulated NUMA nodes of the `optane` media model, the DIMMs split
    /// evenly over them; an access to another node's memory pays
    /// --pm-remote-ns more [default: 1].
    #[arg(long = "pm-numa-nodes", value_parser = clap::value_parser!(u32).range(1..=8))]
    pub numa_nodes: Option<u32>,
    /// Extra latency of a remote NUMA access in the `optane` media model,
    /// in ns (an assumption: one socket hop) [default: 150].
    #[arg(long = "pm-remote-ns", value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub remote_ns: Option<u64>,
}

/// The latency model chosen by `--pm`, `--pm-model` and the media flags.
pub fn latency_model(emulated: bool, model: Option<ModelArg>, media: MediaArgs) -> Result<LatencyModel, CliError> {
    let latency = match (emulated, model) {
        (false, Some(_)) => return Err(CliError::usage("--pm-model applies only to --pm emulated")),
        (_, Some(ModelArg::Dram)) => LatencyModel::DRAM,
        (_, Some(ModelArg::Optane)) | (_, None) => LatencyModel::OPTANE,
        (_, Some(ModelArg::Simple)) => LatencyModel::SIMPLE,
        (_, Some(ModelArg::Sp3500ns)) => LatencyModel::SP3_500NS,
    };
    if media.dimms.is_none() && media.interleave.is_none() && media.numa_nodes.is_none() && media.remote_ns.is_none() {
        return Ok(latency);
    }
    if !emulated || latency.media.is_none() {
        return Err(CliError::usage(
            "--pm-dimms, --pm-interleave, --pm-numa-nodes and --pm-remote-ns apply only to --pm emulated --pm-model \
             optane",
        ));
    }
    let defaults = pmtx_pm::media::MediaParams::OPTANE;
    latency
        .with_dimms(media.dimms.unwrap_or(defaults.dimms), media.interleave.unwrap_or(defaults.interleave_bytes))
        .and_then(|latency| {
            latency.with_numa(
                media.numa_nodes.unwrap_or(defaults.nodes),
                media.remote_ns.unwrap_or(defaults.remote_latency_ns),
            )
        })
        .map_err(|error| CliError::usage(error.to_string()))
}

/// The backend flags.
#[derive(Args, Clone, Debug)]
pub struct PmArgs {
    /// PM backend to run on.
    #[arg(long = "pm", value_enum, default_value_t = PmKind::Direct)]
    pub pm: PmKind,
    /// Latency model of the emulated backend [default: optane; only with --pm emulated].
    #[arg(long = "pm-model", value_enum)]
    pub pm_model: Option<ModelArg>,
    #[command(flatten)]
    pub media: MediaArgs,
    /// Also msync the flushed ranges at every fence (power-failure durability
    /// on a non-DAX file; one synchronous write per fence).
    #[arg(long)]
    pub msync: bool,
    /// Assume an eADR platform: caches are persistent, flushes are elided,
    /// fences kept for ordering.
    #[arg(long, conflicts_with = "flush")]
    pub eadr: bool,
    /// Flush instruction to use instead of the one CPUID picks (clwb, else
    /// clflushopt, else clflush); must exist on this CPU.
    #[arg(long, value_enum)]
    pub flush: Option<FlushArg>,
}

impl PmArgs {
    /// Validates the combination and builds the pool options.
    pub fn options(&self) -> Result<PmOptions, CliError> {
        let latency = latency_model(self.pm == PmKind::Emulated, self.pm_model, self.media)?;
        let flush_instruction = match self.flush {
            None => None,
            Some(flush) => {
                let cpu = CpuFeatures::detect();
                let (instruction, available) = match flush {
                    FlushArg::Clwb => (FlushInstruction::Clwb, cpu.clwb),
                    FlushArg::Clflushopt => (FlushInstruction::Clflushopt, cpu.clflushopt),
                    FlushArg::Clflush => (FlushInstruction::Clflush, true),
                };
                if !available {
                    return Err(CliError::usage(format!(
                        "--flush {instruction}: this CPU does not support {instruction}"
                    )));
                }
                Some(instruction)
            }
        };
        Ok(PmOptions {
            flush_instruction,
            domain: if self.eadr { PersistenceDomain::Eadr } else { PersistenceDomain::Adr },
            msync: self.msync,
            latency,
            ..PmOptions::default()
        })
    }
}
