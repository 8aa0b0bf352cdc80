//! pmtx-crashtest: the crash-consistency harness of pmtx.
//!
//! Three ways to crash an engine and check what comes back:
//!
//! * [`sim`] — the workload runs on the crash simulator (`Sim` backend);
//!   crash states are captured at fences, at the engines' labelled commit
//!   points and at random moments, crash images are derived from them
//!   (`CrashState::images`), and every image is recovered in a fresh engine
//!   instance and checked against the oracles below.
//! * [`kill`] — the workload runs in a child process on a real file-backed
//!   pool (`Direct` backend); the child reports every commit and every
//!   durable acknowledgement on stdout, the parent kills it with `SIGKILL` at
//!   a seeded random moment, reopens the pool (recovery) and checks the same
//!   oracles. The page cache survives a process crash, so every
//!   acknowledged commit must survive.
//! * corrupt input — the tests in `tests/corrupt.rs` mutate pool headers,
//!   the chunk table, log records and checkpoints and require a typed error
//!   or a successful open, never a panic.
//!
//! # Oracles (per recovered image)
//!
//! 1. recovery finishes without a panic and without an error;
//! 2. the pool metadata is valid (`Pool::check_metadata`) and the tables are
//!    structurally sound ([`state::read_state`]: no record left locked,
//!    ordered indexes agree with the records, secondary indexes agree with
//!    the rows, hash tables answer point reads);
//! 3. acknowledged effects ([`harness`]): every worker's harness
//!    transactions write their sequence number into the table
//!    `crashtest.acks` in the same transaction; the recovered sequence `s` of
//!    each worker must be at least the last one acknowledged before the
//!    crash point and at most the last one started, and the modelled rows
//!    (Smallbank balances and ledger, YCSB rows, TPC-C orders) must equal
//!    the baseline plus exactly the effects of transactions `..=s` of every
//!    worker — nothing partial, nothing unacknowledged beyond the engine's
//!    own commit rule, nothing rolled back;
//! 4. the workload's consistency check (`Workload::check`: Smallbank
//!    conservation, TPC-C conditions 1-6, YCSB row layout) passes;
//! 5. recovering the same image twice gives the same state, crashing right
//!    after recovery gives the same state, and crashing at captured points
//!    *during* recovery and recovering again gives the same state.

//!
//! # Usage
//!
//! ```text
//! pmtx crashtest --engine group-commit --workload smallbank --images 1000 --seed 0x5eed --threads 2
//! pmtx crashtest --engine zen --cc no-wait --workload smallbank --images 100
//! pmtx crashtest --kill --iterations 50 --engine dbxn --workload tpcc --seed 7
//! pmtx crashtest ... --save-failing DIR        # keep failing images
//! pmtx crashtest --replay DIR/<image> --engine E --workload W --threads T --seed S
//! ```
//!
//! The summary line is `crashtest: <images> images, <violations> violations,
//! seed <S>`; violations go to stderr with the command line, the crash
//! state's event and label and the image description (seed, image index,
//! prefix vector), and the exit code is 1. The kill mode re-executes the
//! running binary as `pmtx crashtest --child <ChildConfig flags>`; the
//! crate's tests use its `pmtx-crashtest-child` binary instead.

pub mod gated;
pub mod harness;
pub mod kill;
pub mod matrix;
mod panics;
pub mod recover;
pub mod sim;
pub mod state;

use pmtx_engine::engine_catalog::{CrashHarness, Isolation};
use pmtx_engine::spec::EngineSpec;
use pmtx_engine::{CcProtocol, DbOptions, EngineKind, LogMedium, PoolLocation, TableSchema};
use pmtx_pm::PmOptions;
use std::fmt;
use std::time::Duration;

pub use harness::{Harness, Scale, WorkloadKind};
pub use kill::{child_main, run_kill, ChildConfig, KillConfig, KillReport};
pub use sim::{replay_image, run_sim, EngineOptionsHook, SimConfig, SimReport};

/// One oracle violation, with what is needed to replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Which oracle failed (`recovery-panic`, `acknowledged-lost`, ...).
    pub oracle: &'static str,
    /// What was found.
    pub detail: String,
    /// Seed, crash point and image (or kill iteration) that produced it.
    pub replay: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}\n    replay: {}", self.oracle, self.detail, self.replay)
    }
}

/// A violation found while checking one recovered state (before the replay
/// information is attached).
#[derive(Clone, Debug)]
pub struct Finding {
    /// Oracle name.
    pub oracle: &'static str,
    /// What was found.
    pub detail: String,
}

impl Finding {
    /// A finding of `oracle`.
    pub fn new(oracle: &'static str, detail: impl Into<String>) -> Self {
        Self { oracle, detail: detail.into() }
    }

    /// Attaches the replay description.
    pub fn with_replay(self, replay: impl Into<String>) -> Violation {
        Violation { oracle: self.oracle, detail: self.detail, replay: replay.into() }
    }
}

/// Durable engines the kill harness runs by default: every
/// [`EngineKind::ALL`] entry it can check ([`checkable`]).
pub fn durable_engines() -> Vec<EngineKind> {
    EngineKind::ALL.into_iter().filter(|engine| checkable(*engine).is_ok()).collect()
}

/// Durable engines the simulated-crash harness runs by default: every
/// [`EngineKind::ALL`] entry it can check ([`sim_checkable`]).
pub fn sim_engines() -> Vec<EngineKind> {
    EngineKind::ALL.into_iter().filter(|engine| sim_checkable(*engine, LogMedium::Pm).is_ok()).collect()
}

/// Whether the simulated-crash harness can check `engine` with its log on
/// `medium`: what [`checkable`] requires, and all of the engine's durable
/// state in the pool, since the simulator models PM only. A redo log on a
/// file (`dbx-disk`, `dbx-naive:medium=disk`; [`CrashHarness::KillOnly`] in
/// the engine catalog) is refused with the reason: its durable point, the
/// `fdatasync`, is checked by the kill harness and by the log-file crash
/// images of `tests/disk_log.rs`.
pub fn sim_checkable(engine: EngineKind, medium: LogMedium) -> Result<(), String> {
    checkable(engine)?;
    if engine.entry().crash_harness == CrashHarness::KillOnly || medium == LogMedium::Disk {
        return Err(format!(
            "{} keeps its redo log in files, which the PM crash simulator does not model: check it with --kill \
             (the log files of a killed process survive in the page cache) and the log-file crash images of \
             cargo test -p pmtx-crashtest --test disk_log (what a power failure keeps: only what was synced)",
            engine_label(engine, medium)
        ));
    }
    Ok(())
}

/// `engine`, with `:medium=disk` when its log is on disk (the `--engine`
/// text of `pmtx crashtest`).
pub fn engine_label(engine: EngineKind, medium: LogMedium) -> String {
    match medium {
        LogMedium::Pm => engine.name().to_string(),
        LogMedium::Disk => format!("{engine}:medium={medium}"),
    }
}

/// The options of the engine grammar the harness varies: `medium` (where
/// the log goes) and `cc` (the protocol); every other option stays at the
/// harness's own setting ([`db_options`]).
const HARNESS_OPTIONS: [&str; 2] = ["medium", "cc"];

/// Parses the `--engine` text of `pmtx crashtest` with the engine grammar
/// (`pmtx_engine::spec`): an engine, optionally with `:medium=pm|disk`
/// (dbx-naive) and `:cc=<protocol>`. Any other option, given or set by a
/// preset, is refused: the harness chooses those itself.
pub fn parse_engine(text: &str) -> Result<EngineSpec, String> {
    let spec = EngineSpec::parse(text)?;
    let mut harness = EngineSpec::plain(spec.kind);
    harness.dbxn.medium = spec.dbxn.medium;
    harness.cc = spec.cc;
    let (asked, run) = (spec.effective_options(), harness.effective_options());
    if let Some((key, value)) =
        asked.iter().find(|(key, value)| !HARNESS_OPTIONS.contains(&key.as_str()) && run.get(*key) != Some(*value))
    {
        return Err(format!(
            "engine option \"{key}={value}\" of {text:?}: the crash harness takes only medium=pm|disk (dbx-naive) \
             and cc=<protocol> (or --cc)"
        ));
    }
    Ok(spec)
}

/// Whether the kill harness can check `engine`: its oracles assume durable
/// transactions under concurrency control (serializable, or snapshot
/// isolation on the workloads [`workload_checkable`] accepts), and an
/// engine excluded from durability claims
/// ([`EngineKind::durability_caveat`]) is refused
/// ([`CrashHarness::Refused`] in the engine catalog).
pub fn checkable(engine: EngineKind) -> Result<(), String> {
    let entry = engine.entry();
    if entry.crash_harness != CrashHarness::Refused {
        return Ok(());
    }
    if !entry.is_durable() {
        return Err(format!("{engine} is not durable: it promises nothing after a crash"));
    }
    if entry.isolation() == Isolation::Uncontrolled {
        return Err(format!(
            "{engine} has no concurrency control (an upper bound, not serializable): the harness's oracles \
             cannot hold for it"
        ));
    }
    match entry.durability_caveat {
        Some(caveat) => Err(format!("{engine} is excluded from durability claims: {caveat}")),
        None => Err(format!("{engine} is not checked by the crash harness")),
    }
}

/// The harness workloads whose oracles hold under snapshot isolation, so an
/// SI engine (`pisces`) is checked on them for what it promises: every
/// acknowledged commit survives whole, nothing else half-appears.
///
/// Every harness transaction that writes a row read-modify-writes it (the
/// Smallbank deltas, the acknowledgement row, YCSB's owned rows, TPC-C's
/// district counter, stock and the Delivery's delete of its new-order
/// row), so first-committer-wins rules out lost updates, the one anomaly
/// these oracles would see. Write skew needs a transaction that writes a
/// row it did not read under a constraint over rows it did: the harness's
/// Smallbank runs DepositChecking, TransactSavings, SendPayment and
/// Balance, not the workload's WriteCheck (the write-skew transaction the
/// conservation check could not model), and TPC-C's five transactions are
/// serializable under SI (Fekete et al., TODS 2005: its static dependency
/// graph has no dangerous structure).
pub const SNAPSHOT_ISOLATION_WORKLOADS: [WorkloadKind; 3] =
    [WorkloadKind::Smallbank, WorkloadKind::Ycsb, WorkloadKind::Tpcc];

/// Whether the harness's oracles for `workload` hold for `engine`'s
/// isolation ([`checkable`] first): any workload when it is serializable,
/// [`SNAPSHOT_ISOLATION_WORKLOADS`] under snapshot isolation.
pub fn workload_checkable(engine: EngineKind, workload: WorkloadKind) -> Result<(), String> {
    checkable(engine)?;
    match engine.entry().isolation() {
        Isolation::Serializable => Ok(()),
        Isolation::Snapshot if SNAPSHOT_ISOLATION_WORKLOADS.contains(&workload) => Ok(()),
        Isolation::Snapshot | Isolation::Uncontrolled => Err(format!(
            "{engine} runs under snapshot isolation, which may break the oracles of {workload} (write skew)"
        )),
    }
}

/// Database options the harness uses for `engine` over an existing pool
/// (`open_on_pool`) or, with `pool`, a pool file. A log kept in files goes
/// to memory files here (the in-memory preset); the kill mode puts it beside
/// its pool file.
pub fn db_options(
    engine: EngineKind,
    tables: Vec<TableSchema>,
    threads: usize,
    seed: u64,
    pool_size: u64,
    chunk_size: u64,
) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables);
    options.workers = threads.max(1);
    options.pool = PoolLocation::InMemory { size: pool_size };
    options.chunk_size = chunk_size;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options.pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    options.seed = seed;
    if engine.is_hybrid() {
        // Simulated HTM with injected aborts, so a run crosses every path of
        // the PHyTM family (with htm=none phytm is its STM path alone).
        options.htm = pmtx_htm::HtmConfig::sim(seed, HYBRID_SIM_ABORTS_PER_MILLION);
    }
    if engine == EngineKind::Mmdb {
        // A tiny DRAM budget: most rows live in the pool used as volatile
        // memory, which recovery must ignore.
        options.mmdb.dram_bytes = MMDB_DRAM_BYTES;
    }
    if engine == EngineKind::ZenPlus {
        // Tiny Met-Cache regions and low thresholds, so a run crosses the
        // exclusive stage (larger transactions by α, retried ones by γ)
        // and its direct NVM writes beside ordinary commits.
        options.zen.cache_bytes = ZEN_PLUS_REGION_BYTES * threads.max(1) as u64;
        options.zen_plus.alpha_percent = 50;
        options.zen_plus.gamma_tuples = 64;
    }
    options
}

/// Met-Cache region of each worker of `zen+` in harness runs: α (50 %) at
/// 192 bytes, about three tuples of the harness's workloads with their new
/// versions, so TPC-C's NewOrder and the larger Smallbank and YCSB
/// transactions run in the exclusive stage and write their tuples early.
pub const ZEN_PLUS_REGION_BYTES: u64 = 1200;

/// DRAM budget of `mmdb` in harness runs: a few rows; the rest live in
/// the pool's volatile region.
pub const MMDB_DRAM_BYTES: u64 = 1024;

/// Injected aborts per million simulated hardware attempts of the PHyTM
/// family's engines in harness runs (10 %).
pub const HYBRID_SIM_ABORTS_PER_MILLION: u32 = 100_000;

/// ` --cc NAME` for a replay command line, empty for the engine's default
/// protocol (so the command lines of default runs stay as they were).
pub(crate) fn cc_flag(engine: EngineKind, cc: CcProtocol) -> String {
    if cc == engine.default_cc() {
        String::new()
    } else {
        format!(" --cc {cc}")
    }
}

/// Parses a seed in decimal or `0x` hexadecimal.
pub fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// SplitMix64 finalizer.
pub(crate) fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A seed derived from `seed` and a path of indexes.
pub(crate) fn derive(seed: u64, path: &[u64]) -> u64 {
    path.iter().fold(mix64(seed), |acc, &part| mix64(acc ^ mix64(part.wrapping_add(0xA076_1D64_78BD_642F))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness reads `--engine` with the engine grammar, keeping the
    /// options it varies (`medium`, `cc`) and refusing the others.
    #[test]
    fn parse_engine_takes_medium_and_cc_only() {
        let spec = parse_engine("dbx-naive:medium=disk:cc=no-wait").unwrap();
        assert_eq!((spec.kind, spec.dbxn.medium, spec.cc), (EngineKind::DbxNaive, LogMedium::Disk, CcProtocol::NoWait));
        assert_eq!(parse_engine("zen+").unwrap().cc, CcProtocol::Hekaton);
        for (text, needle) in [
            ("dbxn:nt=off", "takes only medium=pm|disk (dbx-naive) and cc=<protocol>"),
            ("dbxn:medium=disk", "unknown option \"medium\" of engine dbxn"),
            ("sp3:cc=occ", "takes cc=silo only"),
            ("nosuch", "unknown engine \"nosuch\""),
        ] {
            let error = parse_engine(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    /// An SI engine is checked, on the workloads whose oracles hold under
    /// SI; an engine without concurrency control is not.
    #[test]
    fn snapshot_isolation_is_checked_where_its_oracles_hold() {
        for workload in WorkloadKind::ALL {
            assert!(workload_checkable(EngineKind::Pisces, workload).is_ok(), "{workload}");
            assert!(workload_checkable(EngineKind::GroupCommit, workload).is_ok(), "{workload}");
            let error = workload_checkable(EngineKind::NvmIdeal, workload).unwrap_err();
            assert!(error.contains("no concurrency control"), "{error}");
        }
    }

    #[test]
    fn the_harness_checks_what_the_catalog_says() {
        for engine in EngineKind::ALL {
            let harness = engine.entry().crash_harness;
            assert_eq!(checkable(engine).is_ok(), harness != CrashHarness::Refused, "{engine}");
            assert_eq!(sim_checkable(engine, LogMedium::Pm).is_ok(), harness == CrashHarness::SimAndKill, "{engine}");
        }
    }
}
