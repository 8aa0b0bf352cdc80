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
    /// Optane DC PMem: ~170 ns per sequential line, ~510 ns per random line.
    Optane,
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

/// The backend flags.
#[derive(Args, Clone, Debug)]
pub struct PmArgs {
    /// PM backend to run on.
    #[arg(long = "pm", value_enum, default_value_t = PmKind::Direct)]
    pub pm: PmKind,
    /// Latency model of the emulated backend [default: optane; only with --pm emulated].
    #[arg(long = "pm-model", value_enum)]
    pub pm_model: Option<ModelArg>,
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
        let latency = match (self.pm, self.pm_model) {
            (PmKind::Direct, Some(_)) => {
                return Err(CliError::usage("--pm-model applies only to --pm emulated"));
            }
            (_, Some(ModelArg::Dram)) => LatencyModel::DRAM,
            (_, Some(ModelArg::Optane)) | (_, None) => LatencyModel::OPTANE,
            (_, Some(ModelArg::Sp3500ns)) => LatencyModel::SP3_500NS,
        };
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
