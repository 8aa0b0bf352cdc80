//! `<out>/run.json`: what `pmtx reproduce` records about a run (the
//! command, the machine, when), which `pmtx report` prints on the page.

use serde::{Deserialize, Serialize};

/// `<out>/run.json`, written by `pmtx reproduce` before its first bench.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunMeta {
    /// The command line.
    pub command: String,
    /// When it started (Unix seconds).
    pub started_unix_seconds: u64,
    /// `--budget`, in seconds.
    pub budget_s: Option<f64>,
    /// `--rounds`: the rounds every figure ran before the budget.
    pub min_rounds: usize,
    /// The estimate of those rounds, in seconds.
    pub estimate_s: f64,
    pub smoke: bool,
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// The kernel release.
    pub kernel: String,
    /// `git rev-parse --short HEAD` of the source tree the binary ran in
    /// (missing in older files: then the bench reports' is used).
    #[serde(default)]
    pub git_revision: Option<String>,
}

/// The CPU's model name, from /proc/cpuinfo ("unknown" elsewhere).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}
