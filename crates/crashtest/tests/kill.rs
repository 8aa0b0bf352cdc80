//! Process-kill runs for CI: the child (`pmtx-crashtest-child`, this
//! crate's binary) runs the harness workload on a pool file and is killed
//! with SIGKILL at seeded random moments; the parent recovers and checks the
//! oracles. Every durable engine (except the documented [`SKIPPED`] list)
//! on each workload, a few iterations each.

use pmtx_crashtest::{durable_engines, parse_seed, run_kill, KillConfig, WorkloadKind};
use pmtx_engine::{EngineKind, LogMedium};
use std::path::PathBuf;
use std::time::Duration;

/// Durable engines not run here, with the reason (empty: all pass).
const SKIPPED: &[(&str, &str)] = &[];

fn seed() -> u64 {
    std::env::var("PMTX_CRASHTEST_SEED").ok().and_then(|text| parse_seed(&text)).unwrap_or(0x0B1E_55ED)
}

fn config(engine: EngineKind, workload: WorkloadKind, iterations: u64) -> KillConfig {
    let program = PathBuf::from(env!("CARGO_BIN_EXE_pmtx-crashtest-child"));
    let mut config = KillConfig::new(engine, workload, seed(), program, Vec::new());
    config.iterations = iterations;
    config.pool_size = 16 << 20;
    config.max_kill_delay = Duration::from_millis(80);
    config
}

fn check(config: &KillConfig) -> pmtx_crashtest::KillReport {
    let report = run_kill(config, &|_| {}).unwrap_or_else(|error| panic!("{}: {error}", config.command_line()));
    eprintln!(
        "{} {}: {} iterations, {} commits, {} acks, {} violations",
        config.engine,
        config.workload,
        report.iterations,
        report.committed,
        report.acknowledged,
        report.violation_count
    );
    let shown: Vec<String> = report.violations.iter().take(3).map(|v| v.to_string()).collect();
    assert_eq!(report.violation_count, 0, "{}", shown.join("\n"));
    assert_eq!(report.iterations, config.iterations);
    // Every kill aimed after `ready` waited for acknowledged commits: no
    // iteration passes without something to lose.
    assert_eq!(report.kills_after_acks + report.early_kills, report.iterations, "{}", config.command_line());
    assert!(
        report.acknowledged >= report.kills_after_acks * config.min_acks_before_kill,
        "{}: {} acknowledgements over {} kills after acks",
        config.command_line(),
        report.acknowledged,
        report.kills_after_acks
    );
    report
}

#[test]
fn kill_group_commit_smallbank() {
    let report = check(&config(EngineKind::GroupCommit, WorkloadKind::Smallbank, 8));
    assert!(report.acknowledged > 0, "the children never acknowledged a commit");
}

#[test]
fn kill_every_durable_engine() {
    for (name, reason) in SKIPPED {
        eprintln!("skipping {name}: {reason}");
    }
    for engine in durable_engines() {
        if SKIPPED.iter().any(|(name, _)| *name == engine.name()) {
            continue;
        }
        check(&config(engine, WorkloadKind::Smallbank, 3));
        check(&config(engine, WorkloadKind::Ycsb, 2));
        check(&config(engine, WorkloadKind::Tpcc, 2));
    }
}

/// `pisces` (snapshot isolation) alone, killed on every workload whose
/// oracles hold under SI (all three; `pmtx_crashtest::workload_checkable`).
#[test]
fn kill_pisces() {
    for workload in WorkloadKind::ALL {
        assert!(pmtx_crashtest::workload_checkable(EngineKind::Pisces, workload).is_ok(), "{workload}");
        check(&config(EngineKind::Pisces, workload, 3));
    }
}

/// `foedus` alone (the gleaner runs every few milliseconds in the child),
/// killed on every workload.
#[test]
fn kill_foedus_every_workload() {
    for (workload, iterations) in [(WorkloadKind::Smallbank, 4), (WorkloadKind::Ycsb, 3), (WorkloadKind::Tpcc, 3)] {
        let report = check(&config(EngineKind::Foedus, workload, iterations));
        assert!(report.acknowledged > 0, "foedus {workload}: the children never acknowledged a commit");
    }
}

/// The Zen paper's baselines alone (`mmdb` with most rows in the pool's
/// volatile region, `mmdb-ideal`, `wbl`), killed on every workload.
#[test]
fn kill_zen_baselines() {
    for engine in [EngineKind::Mmdb, EngineKind::MmdbIdeal, EngineKind::Wbl] {
        check(&config(engine, WorkloadKind::Smallbank, 3));
        check(&config(engine, WorkloadKind::Ycsb, 2));
        check(&config(engine, WorkloadKind::Tpcc, 2));
    }
}

/// `dbx-naive` with its synchronous log on files (the ablation's disk row);
/// `dbx-disk` runs above with every durable engine. A killed process's
/// page cache survives, so this checks the logic around the log files
/// (recovery from them, truncation, their directory beside the pool);
/// `tests/disk_log.rs` checks what a power failure keeps.
#[test]
fn kill_dbx_naive_with_its_log_on_disk() {
    assert!(durable_engines().contains(&EngineKind::DbxDisk), "dbx-disk is kill-checked");
    for (workload, iterations) in [(WorkloadKind::Smallbank, 3), (WorkloadKind::Tpcc, 2)] {
        let mut config = config(EngineKind::DbxNaive, workload, iterations);
        config.medium = LogMedium::Disk;
        let report = check(&config);
        assert!(report.acknowledged > 0, "{}: nothing was acknowledged", config.command_line());
    }
}

/// The kill harness's control: a child that acknowledges commits which
/// never become durable (its epochs are stalled and it reports each
/// pipelined commit when it returns) is killed once it reported an
/// acknowledgement; every such iteration must be reported as a lost
/// acknowledged commit. The kill comes after the parent read the `A` line,
/// so no timing decides the outcome.
#[test]
fn kill_catches_a_child_acknowledging_before_durability() {
    let mut config = config(EngineKind::GroupCommit, WorkloadKind::Smallbank, 3);
    config.fake_ack = true;
    config.min_acks_before_kill = 1;
    config.checkpoint_ms = 0;
    let report = run_kill(&config, &|_| {}).unwrap_or_else(|error| panic!("{}: {error}", config.command_line()));
    eprintln!(
        "fake acknowledgements: {} iterations ({} after acks), {} acks, {} violations: {:?}",
        report.iterations,
        report.kills_after_acks,
        report.acknowledged,
        report.violation_count,
        report.violations.iter().map(|violation| violation.oracle).collect::<Vec<_>>()
    );
    assert!(report.kills_after_acks > 0, "no kill came after an acknowledgement: {}", config.command_line());
    let lost = report.violations.iter().filter(|violation| violation.oracle == "acknowledged-lost").count() as u64;
    assert!(
        lost >= report.kills_after_acks,
        "{} of {} kills after a fake acknowledgement reported as lost: {:?}",
        lost,
        report.kills_after_acks,
        report.violations.first()
    );
}

/// The control's control: the same run with honest acknowledgements.
#[test]
fn kill_control_passes_with_honest_acknowledgements() {
    let mut config = config(EngineKind::GroupCommit, WorkloadKind::Smallbank, 3);
    config.min_acks_before_kill = 1;
    config.checkpoint_ms = 0;
    check(&config);
}
