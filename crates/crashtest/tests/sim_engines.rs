//! Bounded simulated-crash runs for CI: every durable engine of
//! `EngineKind::ALL` (except the documented [`SKIPPED`] list) on Smallbank
//! and YCSB and TPC-C (300 crash images each), plus the harness
//! self-test: a deliberately broken acknowledgement (pipelined commits
//! reported as acknowledged when they return, not when durable) must be
//! caught, and every concurrency-control protocol on Smallbank (100
//! images each, under a durable engine of each storage in turn). Each
//! durable engine's broken variants (`pmtx_engine::Fault`) have a test of
//! their own: one run with the fixed seed, no retry, must report a
//! violation; a control runs the same configurations honestly.
//!
//! The seed is fixed; override it with `PMTX_CRASHTEST_SEED` (decimal or
//! 0x-hex) to explore. A failure prints the violations with the seed, the
//! crash point and the image description needed to replay them.

use pmtx_crashtest::{parse_seed, run_sim, sim_engines, EngineOptionsHook, SimConfig, WorkloadKind};
use pmtx_engine::EngineKind;

/// Durable engines this test does not run, with the reason. Empty: every
/// durable engine passes. (An engine that is not ready yet goes here with
/// the reason, never silently.)
const SKIPPED: &[(&str, &str)] = &[];

fn seed() -> u64 {
    std::env::var("PMTX_CRASHTEST_SEED").ok().and_then(|text| parse_seed(&text)).unwrap_or(0xC0A5_7E57)
}

fn engines() -> Vec<EngineKind> {
    // Engines whose log is on a file are refused by the simulator (see
    // `sim_checkable`); `tests/disk_log.rs` and the kill runs check them.
    let engines: Vec<EngineKind> =
        sim_engines().into_iter().filter(|engine| !SKIPPED.iter().any(|(name, _)| *name == engine.name())).collect();
    assert!(engines.contains(&EngineKind::GroupCommit), "group-commit must always be tested");
    engines
}

fn config(engine: EngineKind, workload: WorkloadKind, images: usize) -> SimConfig {
    let mut config = SimConfig::new(engine, workload, seed());
    config.images = images;
    config.threads = 2;
    config.jobs = 1;
    config.recovery_check_every = 15;
    config.recovery_crash_states = 2;
    match workload {
        WorkloadKind::Tpcc => {
            config.pool_size = 16 << 20;
            config.txns_per_thread = 150;
            config.recovery_check_every = 20;
        }
        _ => {
            config.pool_size = 8 << 20;
            config.txns_per_thread = 300;
        }
    }
    config
}

fn run_every_engine(workload: WorkloadKind, images: usize) {
    for (name, reason) in SKIPPED {
        eprintln!("skipping {name} on {workload}: {reason}");
    }
    let mut failures = Vec::new();
    for engine in engines() {
        let config = config(engine, workload, images);
        let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("{engine} {workload}: {error}"));
        eprintln!(
            "{engine} {workload}: {} images ({} more in determinism checks) from {} of {} crash states, {} commits, \
             {} violations, run {:.1} s + checks {:.1} s",
            report.images,
            report.recovery_images,
            report.states_used,
            report.states_captured,
            report.committed,
            report.violation_count,
            report.run_time.as_secs_f64(),
            report.check_time.as_secs_f64()
        );
        if report.violation_count > 0 {
            let shown: Vec<String> = report.violations.iter().take(3).map(|v| v.to_string()).collect();
            failures.push(format!("{engine} {workload}: {} violations:\n{}", report.violation_count, shown.join("\n")));
        }
        assert!(
            report.images as usize >= images * 9 / 10,
            "{engine} {workload}: only {} of {images} images could be drawn",
            report.images
        );
    }
    assert!(failures.is_empty(), "seed {:#x}:\n{}", seed(), failures.join("\n"));
}

#[test]
fn smallbank_every_durable_engine() {
    run_every_engine(WorkloadKind::Smallbank, 300);
}

#[test]
fn ycsb_every_durable_engine() {
    run_every_engine(WorkloadKind::Ycsb, 300);
}

#[test]
fn tpcc_every_durable_engine() {
    run_every_engine(WorkloadKind::Tpcc, 300);
}

/// The harness must catch an engine that acknowledges before durability:
/// here group commit with acknowledgements taken when `run_pipelined`
/// returns (before the epoch is durable).
#[test]
fn fake_acknowledgement_is_caught() {
    let mut config = config(EngineKind::GroupCommit, WorkloadKind::Smallbank, 120);
    config.fake_ack = true;
    config.recovery_check_every = 0;
    let report = run_sim(&config, &|_| {}).unwrap();
    assert!(
        report.violations.iter().any(|violation| violation.oracle == "acknowledged-lost"),
        "the broken acknowledgement went unnoticed: {} images, {} violations",
        report.images,
        report.violation_count
    );
    let first = &report.violations[0];
    assert!(first.replay.contains("seed") && first.replay.contains("event"), "replay info: {}", first.replay);
}

/// The same run with honest acknowledgements passes (the self-test's
/// control).
#[test]
fn honest_acknowledgement_passes() {
    let mut config = config(EngineKind::GroupCommit, WorkloadKind::Smallbank, 120);
    config.recovery_check_every = 0;
    let report = run_sim(&config, &|_| {}).unwrap();
    assert_eq!(report.violation_count, 0, "{:?}", report.violations.first());
}

/// The controls of the broken variants below: the same contended runs
/// (engine, workload, scale, threads), honest, have no violation (the
/// zen+ one is `zen_plus_direct_writes_control_passes`).
#[test]
fn contended_controls_pass_where_the_broken_variants_fail() {
    let mut done = Vec::new();
    for fault in pmtx_engine::Fault::ALL {
        let mut config = broken_config(fault);
        config.engine_options = None;
        let key = (config.engine, config.threads, config.workload);
        if config.engine == EngineKind::ZenPlus || done.contains(&key) {
            continue;
        }
        done.push(key);
        let report = run_sim(&config, &|_| {}).unwrap();
        eprintln!("{} control: {} images, {} violations", config.engine, report.images, report.violation_count);
        assert_eq!(report.violation_count, 0, "{} seed {:#x}: {:?}", config.engine, seed(), report.violations.first());
    }
}

/// The zen+ case of `every_broken_engine_is_caught`: TPC-C, whose
/// NewOrder runs in the exclusive stage in harness runs and writes part of
/// its tuples to the heap before its commit.
fn zen_plus_direct_writes_config() -> pmtx_crashtest::SimConfig {
    let mut config = config(EngineKind::ZenPlus, WorkloadKind::Tpcc, 300);
    config.recovery_check_every = 0;
    config
}

/// The control of the zen+ case: the same run with the direct NVM writes
/// left uncommitted until the commit's LP tuple has no violation (and does
/// write tuples early, so the case tests them).
#[test]
fn zen_plus_direct_writes_control_passes() {
    let config = zen_plus_direct_writes_config();
    let report = run_sim(&config, &|_| {}).unwrap();
    assert_eq!(report.violation_count, 0, "seed {:#x}: {:?}", seed(), report.violations.first());
    let counter = |name: &str| report.engine_counters.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
    assert!(counter("direct_nvm_writes") > 0, "no direct NVM write: {:?}", report.engine_counters);
    assert!(counter("exclusive_entries_alpha") > 0, "{:?}", report.engine_counters);
}

/// The run that must catch `fault` (on the engine it breaks): a small,
/// contended Smallbank makes dependent transactions (which the epoch and
/// dependency rules exist for) common; zen+ runs TPC-C, whose NewOrder
/// writes tuples early.
fn broken_config(fault: pmtx_engine::Fault) -> SimConfig {
    use pmtx_engine::Fault;
    let engine = fault.engine();
    let mut config = if fault == Fault::ZenPlusSpillWithLp {
        zen_plus_direct_writes_config()
    } else {
        let mut config = config(engine, WorkloadKind::Smallbank, 300);
        config.scale.accounts = 8;
        config.recovery_check_every = 0;
        config
    };
    if matches!(fault, Fault::Sp3AckBeforeDependencies | Fault::HybridUnlockBeforeLog) {
        // The held committer's writes are read by the other workers.
        config.threads = 4;
    }
    if fault == Fault::FoedusRootBeforePages {
        // Its bug shows only in the crash states taken while a snapshot is
        // written (a few of a run's thousand or so), so more are kept: a
        // run with the usual 300 images once caught none (CI, loaded).
        config.images *= 4;
    }
    config.engine_options =
        Some(EngineOptionsHook::new(format!("fault {}", fault.name()), move |options| options.fault = Some(fault)));
    config
}

/// One run (the fixed seed, no retry) of `fault`'s engine with the fault
/// must report a violation. Each variant's bug shows at a point the harness
/// always captures: right after an acknowledgement whose commit is not
/// durable (its stores still pending), or, for the variants that need a
/// second transaction in their window, after dependents were acknowledged
/// while the broken committer is held in that window
/// (`pmtx_engine::Fault::Sp3AckBeforeDependencies`).
fn assert_caught(fault: pmtx_engine::Fault) {
    let config = broken_config(fault);
    let engine = config.engine;
    let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("{engine} {}: {error}", fault.name()));
    eprintln!(
        "{engine} with {}: {} commits, run {:.1} s, {} states, {} images, {} violations (first: {})",
        fault.name(),
        report.committed,
        report.run_time.as_secs_f64(),
        report.states_captured,
        report.images,
        report.violation_count,
        report.violations.first().map_or("none".into(), |violation| violation.to_string())
    );
    assert!(report.violation_count > 0, "seed {:#x}: the harness missed {engine} with {}", seed(), fault.name());
}

macro_rules! broken_variant_tests {
    ($($name:ident => $fault:ident,)*) => {
        $(
            #[test]
            fn $name() {
                assert_caught(pmtx_engine::Fault::$fault);
            }
        )*

        /// Every broken variant has its test above, and every engine the
        /// simulator checks has a broken variant.
        #[test]
        fn every_broken_variant_has_a_test() {
            let tested = [$(pmtx_engine::Fault::$fault),*];
            for fault in pmtx_engine::Fault::ALL {
                assert!(tested.contains(&fault), "{} has no test", fault.name());
            }
            for engine in sim_engines() {
                assert!(
                    tested.iter().any(|fault| fault.engine() == engine)
                        || SHARED_VARIANTS.iter().any(|(shared, _)| *shared == engine),
                    "{engine} has no broken variant"
                );
            }
        }
    };
}

/// Engines that share another engine's durability step run that engine's
/// broken variant (tests below).
const SHARED_VARIANTS: [(EngineKind, pmtx_engine::Fault); 1] =
    [(EngineKind::MmdbIdeal, pmtx_engine::Fault::MmdbAckBeforeFence)];

#[test]
fn shared_variants_are_caught() {
    for (engine, fault) in SHARED_VARIANTS {
        let mut config = broken_config(fault);
        config.engine = engine;
        let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("{engine} {}: {error}", fault.name()));
        assert!(report.violation_count > 0, "seed {:#x}: the harness missed {engine} with {}", seed(), fault.name());
    }
}

/// The Zen paper's baselines (`mmdb`, with most of its rows in the pool's
/// volatile region in harness runs, `mmdb-ideal` and `wbl`): their honest
/// runs pass on every workload.
#[test]
fn zen_baselines_every_workload() {
    for engine in [EngineKind::Mmdb, EngineKind::MmdbIdeal, EngineKind::Wbl] {
        for (workload, images) in [(WorkloadKind::Smallbank, 200), (WorkloadKind::Ycsb, 200), (WorkloadKind::Tpcc, 100)]
        {
            let config = config(engine, workload, images);
            let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("{engine} {workload}: {error}"));
            let shown: Vec<String> = report.violations.iter().take(3).map(|v| v.to_string()).collect();
            assert_eq!(report.violation_count, 0, "{engine} {workload} seed {:#x}: {}", seed(), shown.join("\n"));
            assert!(report.images as usize >= images * 9 / 10, "{engine} {workload}: {} images", report.images);
            if engine == EngineKind::Mmdb {
                let nvm_rows = report.engine_counters.iter().find(|(n, _)| *n == "nvm_rows_now").map_or(0, |(_, v)| *v);
                assert!(nvm_rows > 0, "{workload}: no row in volatile PM: {:?}", report.engine_counters);
            }
        }
    }
}

broken_variant_tests! {
    dbxn_ack_before_fence_is_caught => DbxnAckBeforeFence,
    dbxn_nvm_fence_before_record_is_caught => DbxnNvmFenceBeforeRecord,
    dbx_naive_fence_left_to_next_commit_is_caught => DbxNaiveFenceLeftToNextCommit,
    zen_skip_first_fence_is_caught => ZenSkipFirstFence,
    zen_lp_on_first_tuple_is_caught => ZenLpOnFirstTuple,
    zen_ack_before_next_fence_is_caught => ZenAckBeforeNextFence,
    zen_commits_on_unfenced_writes_is_caught => ZenCommitsOnUnfencedWrites,
    zen_naive_alloc_lp_unfenced_is_caught => ZenNaiveAllocLpUnfenced,
    group_commit_epoch_before_log_is_caught => GroupCommitEpochBeforeLog,
    sp3_ack_before_dependencies_is_caught => Sp3AckBeforeDependencies,
    nvm_tx_skip_last_line_flush_is_caught => NvmTxSkipLastLineFlush,
    phytm_unlock_before_log_is_caught => HybridUnlockBeforeLog,
    phtm_xend_persists_log_is_caught => PhtmXendPersistsLog,
    two_pl_fence_per_two_commits_is_caught => TwoPlFencePerTwoCommits,
    mmdb_ack_before_fence_is_caught => MmdbAckBeforeFence,
    wbl_ack_before_window_is_caught => WblAckBeforeWindow,
    wbl_keep_dirty_window_is_caught => WblKeepDirtyWindow,
    zen_plus_spill_with_lp_is_caught => ZenPlusSpillWithLp,
    mnemosyne_ack_before_fence_is_caught => MnemosyneAckBeforeFence,
    pisces_visible_before_persist_is_caught => PiscesVisibleBeforePersist,
    foedus_root_before_pages_is_caught => FoedusRootBeforePages,
}

/// `mnemosyne` (torn-bit redo log, write-back into persistent home slots,
/// truncation on a background thread): its honest runs pass on every workload,
/// on top of the every-engine runs above, with more images per workload.
#[test]
fn mnemosyne_every_workload() {
    for (workload, images) in [(WorkloadKind::Smallbank, 300), (WorkloadKind::Ycsb, 300), (WorkloadKind::Tpcc, 100)] {
        let config = config(EngineKind::Mnemosyne, workload, images);
        let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("mnemosyne {workload}: {error}"));
        let shown: Vec<String> = report.violations.iter().take(3).map(|v| v.to_string()).collect();
        assert_eq!(report.violation_count, 0, "mnemosyne {workload} seed {:#x}: {}", seed(), shown.join("\n"));
        assert!(report.images as usize >= images * 9 / 10, "mnemosyne {workload}: {} images", report.images);
    }
}

/// `pisces` (snapshot isolation, three-stage commit: log durable, then
/// visible, then written back into the home slots): checked for the
/// durability and atomicity of acknowledged commits on every workload whose
/// oracles hold under SI (`pmtx_crashtest::SNAPSHOT_ISOLATION_WORKLOADS`:
/// all three), with more images than the every-engine runs.
#[test]
fn pisces_every_workload() {
    for (workload, images) in [(WorkloadKind::Smallbank, 300), (WorkloadKind::Ycsb, 300), (WorkloadKind::Tpcc, 100)] {
        assert!(pmtx_crashtest::SNAPSHOT_ISOLATION_WORKLOADS.contains(&workload), "{workload}");
        let config = config(EngineKind::Pisces, workload, images);
        let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("pisces {workload}: {error}"));
        let shown: Vec<String> = report.violations.iter().take(3).map(|v| v.to_string()).collect();
        assert_eq!(report.violation_count, 0, "pisces {workload} seed {:#x}: {}", seed(), shown.join("\n"));
        assert!(report.images as usize >= images * 9 / 10, "pisces {workload}: {} images", report.images);
        let counter = |name: &str| report.engine_counters.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
        assert!(counter("write_backs_after_unlock") > 0, "{workload}: {:?}", report.engine_counters);
    }
}

/// Every concurrency-control protocol under a durable engine of each
/// storage and durability scheme in turn (group commit's epochs, DBXN's
/// synchronous log with odd versions, Zen's log-free heap), Smallbank, 100
/// crash images each.
#[test]
fn smallbank_every_protocol() {
    let storages = [EngineKind::GroupCommit, EngineKind::Dbxn, EngineKind::Zen];
    let mut failures = Vec::new();
    for (index, cc) in pmtx_engine::CcProtocol::ALL.into_iter().enumerate() {
        let engine = storages[index % storages.len()];
        let mut config = config(engine, WorkloadKind::Smallbank, 100);
        config.cc = cc;
        config.recovery_check_every = 0;
        let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("{engine} cc={cc}: {error}"));
        eprintln!(
            "{engine} cc={cc} smallbank: {} images, {} commits, {} violations",
            report.images, report.committed, report.violation_count
        );
        assert!(report.images >= 90, "{engine} cc={cc}: only {} images could be drawn", report.images);
        if report.violation_count > 0 {
            failures.push(format!("{engine} cc={cc}: {:?}", report.violations.first()));
        }
    }
    assert!(failures.is_empty(), "seed {:#x}:\n{}", seed(), failures.join("\n"));
}

/// `foedus` (epoch group commit whose log the gleaner folds into snapshot
/// pages, taken every 15 ms in these runs): its honest runs pass on every
/// workload, with more images per workload, and the gleaner installed
/// snapshots during them.
#[test]
fn foedus_every_workload() {
    for (workload, images) in [(WorkloadKind::Smallbank, 300), (WorkloadKind::Ycsb, 300), (WorkloadKind::Tpcc, 100)] {
        let config = config(EngineKind::Foedus, workload, images);
        let report = run_sim(&config, &|_| {}).unwrap_or_else(|error| panic!("foedus {workload}: {error}"));
        let shown: Vec<String> = report.violations.iter().take(3).map(|v| v.to_string()).collect();
        assert_eq!(report.violation_count, 0, "foedus {workload} seed {:#x}: {}", seed(), shown.join("\n"));
        assert!(report.images as usize >= images * 9 / 10, "foedus {workload}: {} images", report.images);
        assert!(report.checkpoints > 0, "foedus {workload}: the gleaner never installed a snapshot");
    }
}
