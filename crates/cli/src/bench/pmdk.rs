//! `pmtx bench --pmdk`: the PMDK (libpmemobj) baseline of a micro workload,
//! run with `pmtx_pmdk::run` after the engines at each thread count.
//!
//! Everything that can be checked is checked by [`Plan::new`] before any run
//! starts: the library is there, the workload has a PMDK version, the
//! configuration is valid for every thread count, and the pool path is
//! free (a PMDK run creates its pool and never replaces a file). A run that
//! fails (an inconsistent structure after the run, or an error such as a
//! full pool) is recorded as a failed check, like a failed recovery of an
//! engine run, so the other runs are still reported; the command then
//! exits with 1.

use super::report::{PmdkRunJson, RunJson};
use crate::progress::Progress;
use crate::units::format_bytes;
use crate::CliError;
use pmtx_pmdk::{MicroConfig, MicroResult, MicroWorkload, PmdkError, RunLength};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the check failure of a PMDK run that ended in an error (not in a
/// failed check of its structure) begins.
pub const RUN_FAILED: &str = "run failed: ";

/// What every PMDK run of one `bench` invocation shares.
pub struct Plan {
    /// The configuration, `threads` set per run.
    config: MicroConfig,
    /// Pool file of each run (created by the run, removed after it).
    pub pool_path: PathBuf,
    /// Pool size (`MicroConfig::suggested_pool_size`).
    pub pool_size: u64,
}

/// The run settings of `bench` that the PMDK runs take over.
pub struct Settings<'a> {
    /// Workload name (a micro workload).
    pub workload: &'a str,
    /// The workload options in effect.
    pub options: &'a pmtx_workloads::WorkloadOptions,
    /// Thread counts.
    pub threads: &'a [usize],
    /// Measured time per run.
    pub duration: Duration,
    /// Warm-up time per run.
    pub warmup: Duration,
    /// Client seed.
    pub seed: u64,
    /// `--pool`, if given.
    pub pool: Option<&'a Path>,
    /// This process's id (names the temporary pool).
    pub pid: u32,
}

impl Plan {
    /// Checks that the PMDK runs can start and fixes their configuration.
    pub fn new(settings: &Settings<'_>) -> Result<Self, CliError> {
        pmtx_pmdk::available().map_err(|error| CliError::runtime(format!("--pmdk: {error}")))?;
        let workload = MicroWorkload::parse(settings.workload).map_err(|error| CliError::usage(error.to_string()))?;
        let options = settings.options;
        let config = MicroConfig {
            workload,
            entries: options.micro_entries,
            entry_size: options.entry_size,
            insert_percent: options.insert_percent,
            theta: options.theta,
            threads: 1,
            length: RunLength::Duration(settings.duration),
            warmup: settings.warmup,
            seed: settings.seed,
            keep_pool: false,
        };
        for &threads in settings.threads {
            MicroConfig { threads, ..config.clone() }
                .validate()
                .map_err(|error| CliError::usage(format!("--pmdk: {error}")))?;
        }
        let pool_path = pool_path(settings.pool, settings.pid);
        match pool_path.symlink_metadata() {
            Ok(_) => {
                return Err(CliError::runtime(format!(
                    "--pmdk: {} already exists; each PMDK run creates a fresh pool there and never replaces a \
                     file: remove it or choose another --pool",
                    pool_path.display()
                )))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(CliError::runtime(format!("--pmdk: {}: {error}", pool_path.display()))),
        }
        let pool_size = config.suggested_pool_size();
        Ok(Self { config, pool_path, pool_size })
    }

    /// The notes printed before the PMDK runs.
    pub fn note(&self, recover: bool) -> String {
        let forced = if pmtx_pmdk::pmem_forced() {
            "PMEM_IS_PMEM_FORCE=1 is set: libpmem persists with cache-line flushes and fences, as on PM"
        } else {
            "PMEM_IS_PMEM_FORCE=1 is NOT set: libpmem flushes cache lines only if the pool is on real PM (DAX), \
             else it msyncs the page cache"
        };
        format!(
            "note: PMDK baseline (libpmemobj): {forced}. pmtx's emulated latency model (--pm emulated) does not \
             apply to PMDK (nor do --msync, --eadr, --flush{recover}): the fair comparison is --pm direct with \
             PMEM_IS_PMEM_FORCE=1 in the environment, where both pay the real flush instructions of this machine \
             and nothing else.\nnote: PMDK pool: a fresh {size} file per run at {path}, removed afterwards.",
            recover = if recover { " or --recover" } else { "" },
            size = format_bytes(self.pool_size),
            path = self.pool_path.display(),
        )
    }

    /// Runs the baseline with `threads` workers. A failed run is returned
    /// as a run whose check failed (see the module documentation).
    pub fn run(&self, threads: usize, position: (usize, usize), git_revision: &str) -> PmdkRunJson {
        let config = MicroConfig { threads, ..self.config.clone() };
        let label = format!("run {}/{}: {} pmdk x{threads}", position.0, position.1, config.workload);
        let result = run_with_progress(&self.pool_path, self.pool_size, &config, &label);
        let mut json = PmdkRunJson {
            engine: "pmdk".to_string(),
            workload: config.workload.name().to_string(),
            threads,
            duration_s: 0.0,
            warmup_s: config.warmup.as_secs_f64(),
            load_s: 0.0,
            items_loaded: 0,
            committed: 0,
            throughput_tps: 0.0,
            tps_ratio: 0.0,
            per_type: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            per_thread: Vec::new(),
            engine_over_pmdk: BTreeMap::new(),
            check_passed: false,
            check_failures: Vec::new(),
            check_summary: String::new(),
            pmem_forced: pmtx_pmdk::pmem_forced(),
            pool: self.pool_path.display().to_string(),
            pool_size_bytes: self.pool_size,
            seed: config.seed,
            git_revision: git_revision.to_string(),
        };
        match result {
            Ok((result, items_loaded)) => {
                json.duration_s = result.elapsed.as_secs_f64();
                json.load_s = result.load_elapsed.as_secs_f64();
                json.items_loaded = items_loaded;
                json.committed = result.total;
                json.throughput_tps = result.throughput();
                json.per_type = result.committed_by_type().map(|(name, count)| (name.to_string(), count)).collect();
                json.outcomes = result.outcomes_by_name().map(|(name, count)| (name.to_string(), count)).collect();
                json.per_thread = result.per_thread.clone();
                json.check_passed = true;
                json.check_summary = result.check.summary.clone();
                json.pmem_forced = result.pmem_forced;
            }
            Err(PmdkError::Inconsistent { workload, message }) => {
                json.check_failures = vec![format!("{workload} structure: {message}")];
            }
            Err(error) => json.check_failures = vec![format!("{RUN_FAILED}{error}")],
        }
        json
    }
}

/// The pool file of the PMDK runs: `--pool` PATH with ".pmdk" appended, else
/// a file in the system's temporary directory (libpmemobj allocates the
/// whole file up front, so it does not take memory-file-system room).
pub fn pool_path(pool: Option<&Path>, pid: u32) -> PathBuf {
    match pool {
        Some(path) => {
            let mut name = path.as_os_str().to_owned();
            name.push(".pmdk");
            PathBuf::from(name)
        }
        None => std::env::temp_dir().join(format!("pmtx-bench-pmdk-{pid}.pool")),
    }
}

/// `pmtx_pmdk::run` with the progress line on stderr; also returns the
/// items loaded. The run reports its progress about once a second, too
/// seldom to mark the start of the measured phase in a short run: warm-up,
/// measurement and check are one phase here.
fn run_with_progress(
    path: &Path,
    pool_size: u64,
    config: &MicroConfig,
    label: &str,
) -> Result<(MicroResult, u64), PmdkError> {
    let run_phase = if config.warmup.is_zero() {
        "measure, then reopen and check"
    } else {
        "warm up and measure, then reopen and check"
    };
    let phases = ["create the pool and load", run_phase];
    let name = |index: usize| format!("{label}: {}", phases[index]);
    let mut progress = Progress::new(phases.len());
    progress.phase(0, &name(0));
    let mut items_loaded = 0;
    let running = config.warmup
        + match config.length {
            RunLength::Duration(duration) => duration,
            RunLength::OpsPerThread(_) => Duration::ZERO,
        };
    let result = pmtx_pmdk::run(path, pool_size, config, |event| match event {
        pmtx_pmdk::Progress::Loaded { items, .. } => {
            items_loaded = items;
            progress.phase(1, &name(1));
        }
        pmtx_pmdk::Progress::Running { elapsed, .. } => {
            progress.update(1, &name(1), elapsed.as_secs_f64() / running.as_secs_f64().max(f64::MIN_POSITIVE));
        }
        pmtx_pmdk::Progress::Checked { .. } => progress.finish(),
    });
    progress.finish();
    result.map(|result| (result, items_loaded))
}

/// Fills `tps_ratio` (over the first engine run) and `engine_over_pmdk`
/// (each engine run at the same thread count over the PMDK run).
pub fn compare(runs: &[RunJson], pmdk_runs: &mut [PmdkRunJson]) {
    let first = runs.first().map(|run| run.throughput_tps);
    for pmdk in pmdk_runs {
        pmdk.tps_ratio = match first {
            Some(first) if first > 0.0 => pmdk.throughput_tps / first,
            _ => 0.0,
        };
        if pmdk.throughput_tps > 0.0 {
            pmdk.engine_over_pmdk = runs
                .iter()
                .filter(|run| run.threads == pmdk.threads)
                .map(|run| (run.engine.clone(), run.throughput_tps / pmdk.throughput_tps))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_paths() {
        assert_eq!(pool_path(Some(Path::new("/x/b.pool")), 1), PathBuf::from("/x/b.pool.pmdk"));
        assert_eq!(pool_path(Some(Path::new("b")), 1), PathBuf::from("b.pmdk"));
        let temp = pool_path(None, 7);
        assert!(temp.ends_with("pmtx-bench-pmdk-7.pool"), "{}", temp.display());
        assert_eq!(temp.parent(), Some(std::env::temp_dir().as_path()));
    }
}
