//! What `pmtx reproduce` writes and `pmtx report` reads: `<out>/run.json`
//! (the command, the machine, when) and the entries of
//! `<out>/verdicts.json`.

use super::verdict::{Outlook, Verdict};
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

/// One entry of `verdicts.json`: `pmtx reproduce` writes it, `pmtx report`
/// reads it (older files lack the fields marked `default`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub figure: String,
    pub claim: String,
    /// Where in the paper: figure and section.
    pub source: String,
    pub paper_low: f64,
    pub paper_high: f64,
    /// Rounds that gave this claim a value (or the figure was to run, for
    /// `not run` and `failed`).
    pub rounds: usize,
    /// Median, minimum and maximum of our ratio over the rounds (null
    /// when not measured).
    pub ours_median: Option<f64>,
    #[serde(default)]
    pub ours_min: Option<f64>,
    #[serde(default)]
    pub ours_max: Option<f64>,
    /// Our ratio in each round, in round order (empty when not measured).
    /// For a claim about one run's own value (`absolute`), that value.
    #[serde(default)]
    pub ours_per_round: Vec<f64>,
    /// The order-statistics confidence interval of the median (see
    /// `verdict`), the interval the verdict weighs, and its coverage.
    #[serde(default)]
    pub ci_low: Option<f64>,
    #[serde(default)]
    pub ci_high: Option<f64>,
    #[serde(default)]
    pub ci_level: Option<f64>,
    /// Whether more rounds could decide an inconclusive claim.
    /// Missing in older files: `pmtx report` computes it from the rounds.
    #[serde(default)]
    pub outlook: Option<Outlook>,
    /// Whether the claim is about one run's own value (a count per
    /// transaction, entries into a stage) rather than a ratio of two runs.
    #[serde(default)]
    pub absolute: bool,
    /// Median over the rounds of the compared runs' own values (the ratio's
    /// numerator and denominator; for an absolute claim, the value).
    #[serde(default)]
    pub of_median: Option<f64>,
    #[serde(default)]
    pub over_median: Option<f64>,
    pub verdict: Verdict,
    /// Measured with --smoke: tiny data and short runs, possibly fewer
    /// than 3 rounds; the verdict says that the figure runs, not what it
    /// shows.
    #[serde(default)]
    pub smoke: bool,
    pub why: String,
}
