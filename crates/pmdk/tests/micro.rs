//! The PMDK micro workloads end to end: each on a fresh pool in a temporary
//! directory (under /dev/shm when it exists, where libpmemobj's msync
//! fallback is cheap), 2 threads, a fixed number of transactions, then the
//! check of the reopened pool. Without libpmemobj only the parts that need no
//! library run, plus the `Unavailable` error.

use pmtx_pmdk::{available, MicroConfig, MicroWorkload, PmdkError, RunLength, WORKLOAD_NAMES};

#[test]
fn workload_names_parse_and_unknown_names_list_the_valid_ones() {
    for (name, workload) in WORKLOAD_NAMES.iter().zip(MicroWorkload::ALL) {
        assert_eq!(MicroWorkload::parse(name).unwrap(), workload);
        assert_eq!(workload.name(), *name);
        assert_eq!(name.parse::<MicroWorkload>().unwrap(), workload);
    }
    let error = MicroWorkload::parse("queue").unwrap_err();
    assert!(matches!(&error, PmdkError::UnknownWorkload(name) if name == "queue"));
    let message = error.to_string();
    for name in WORKLOAD_NAMES {
        assert!(message.contains(name), "{message}");
    }
    assert_eq!(available().is_ok(), cfg!(pmemobj));
}

#[test]
fn configurations_out_of_range_are_rejected() {
    let valid = MicroConfig::default();
    assert!(valid.validate().is_ok());
    let invalid = [
        MicroConfig { entry_size: 15, ..valid.clone() },
        MicroConfig { insert_percent: 101, ..valid.clone() },
        MicroConfig { theta: 1.0, ..valid.clone() },
        MicroConfig { theta: -0.5, ..valid.clone() },
        MicroConfig { threads: 0, ..valid.clone() },
        MicroConfig { entries: 1, workload: MicroWorkload::Sps, ..valid.clone() },
        MicroConfig { length: RunLength::Duration(std::time::Duration::ZERO), ..valid.clone() },
    ];
    for config in invalid {
        assert!(matches!(config.validate(), Err(PmdkError::InvalidConfig(_))), "{config:?}");
    }
    for workload in MicroWorkload::ALL {
        let size = MicroConfig { workload, ..valid.clone() }.suggested_pool_size();
        assert!(size >= 64 << 20 && size.is_multiple_of(1 << 20), "{workload}: {size}");
    }
}

#[cfg(not(pmemobj))]
#[test]
fn without_libpmemobj_every_entry_point_is_unavailable() {
    let error = pmtx_pmdk::run("unused.pool".as_ref(), 64 << 20, &MicroConfig::default(), |_| {}).unwrap_err();
    assert!(matches!(error, PmdkError::Unavailable));
    assert!(error.to_string().contains("install the Debian package libpmemobj-dev"), "{error}");
    assert!(matches!(pmtx_pmdk::check("unused.pool".as_ref(), MicroWorkload::Hash), Err(PmdkError::Unavailable)));
}

#[cfg(pmemobj)]
mod with_libpmemobj {
    use super::*;
    use pmtx_pmdk::{check, run, MicroResult, Progress};
    use std::path::Path;

    const OPS: u64 = 600;

    fn scratch_dir() -> tempfile::TempDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            if let Ok(dir) = tempfile::tempdir_in(shm) {
                return dir;
            }
        }
        tempfile::tempdir().unwrap()
    }

    fn small(workload: MicroWorkload) -> MicroConfig {
        MicroConfig {
            workload,
            entries: 2_000,
            entry_size: 100,
            threads: 2,
            length: RunLength::OpsPerThread(OPS),
            seed: 7,
            ..MicroConfig::default()
        }
    }

    fn run_small(workload: MicroWorkload) -> MicroResult {
        let dir = scratch_dir();
        let path = dir.path().join(format!("{workload}.pool"));
        let config = small(workload);
        let mut reports = Vec::new();
        let result = run(&path, 64 << 20, &config, |progress| reports.push(progress)).unwrap();
        assert!(!path.exists(), "the pool file is removed after the run");
        assert_eq!(result.workload, workload);
        assert_eq!(result.per_thread, vec![OPS, OPS]);
        assert_eq!(result.total, 2 * OPS);
        assert_eq!(result.committed.iter().sum::<u64>(), result.total);
        assert_eq!(result.committed.len(), workload.type_names().len());
        assert_eq!(result.outcomes.len(), workload.outcome_names().len());
        for (name, committed) in result.committed_by_type() {
            assert!(committed > 0, "{workload}: no {name} committed");
        }
        // The measured interval spans the operations, however loaded the
        // machine (it starts before the workers are released).
        assert!(result.elapsed > std::time::Duration::ZERO, "{workload}: empty measured interval");
        assert_eq!(result.throughput(), result.total as f64 / result.elapsed.as_secs_f64());
        assert!(matches!(reports.first(), Some(Progress::Loaded { .. })), "{reports:?}");
        assert!(matches!(reports.last(), Some(Progress::Checked { .. })), "{reports:?}");
        assert_eq!(result.check.workload, workload);
        result
    }

    #[test]
    fn sps_swaps_keep_a_permutation() {
        let result = run_small(MicroWorkload::Sps);
        assert_eq!(result.check.items, 2_000);
    }

    #[test]
    fn queue_stays_in_fifo_order() {
        let result = run_small(MicroWorkload::Queue);
        let enqueues = result.committed[0];
        let dequeues = result.committed[1] - result.outcomes[0];
        assert_eq!(result.check.items, 2_000 + enqueues - dequeues);
    }

    fn check_map(result: &MicroResult) {
        let new_keys = result.outcomes[0];
        assert_eq!(result.outcomes[0] + result.outcomes[1], result.committed[0]);
        assert_eq!(result.outcomes[2] + result.outcomes[3], result.committed[1]);
        assert!(result.outcomes[2] > 0, "some searches find their key");
        assert_eq!(result.check.items, 2_000 + new_keys);
    }

    #[test]
    fn hash_inserts_and_searches() {
        check_map(&run_small(MicroWorkload::Hash));
    }

    #[test]
    fn rbtree_inserts_and_searches() {
        check_map(&run_small(MicroWorkload::RbTree));
    }

    #[test]
    fn btree_inserts_and_searches() {
        check_map(&run_small(MicroWorkload::BTree));
    }

    #[test]
    fn tiny_structures_under_contention_stay_consistent() {
        for workload in MicroWorkload::ALL {
            let dir = scratch_dir();
            let config =
                MicroConfig { entries: 20, entry_size: 16, length: RunLength::OpsPerThread(3_000), ..small(workload) };
            let result = run(&dir.path().join("tiny.pool"), 16 << 20, &config, |_| {}).unwrap();
            assert_eq!(result.total, 6_000, "{workload}");
        }
    }

    #[test]
    fn a_kept_pool_can_be_checked_again() {
        let dir = scratch_dir();
        for workload in MicroWorkload::ALL {
            let path = dir.path().join(format!("kept-{workload}.pool"));
            let config = MicroConfig {
                keep_pool: true,
                length: RunLength::OpsPerThread(50),
                threads: 1,
                entries: 300,
                ..small(workload)
            };
            let result = run(&path, 16 << 20, &config, |_| {}).unwrap();
            let report = check(&path, workload).unwrap();
            assert_eq!(report, result.check);
            assert_eq!((report.entries, report.entry_size), (300, 100));
            // Another workload's layout does not open.
            let other = MicroWorkload::ALL.into_iter().find(|&other| other != workload).unwrap();
            assert!(matches!(check(&path, other), Err(PmdkError::PoolOpen { .. })));
        }
    }

    #[test]
    fn an_existing_file_is_not_replaced() {
        let dir = scratch_dir();
        let path = dir.path().join("existing.pool");
        std::fs::write(&path, b"not a pool").unwrap();
        let error = run(&path, 16 << 20, &small(MicroWorkload::Hash), |_| {}).unwrap_err();
        assert!(matches!(error, PmdkError::PoolExists { .. }), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a pool");
    }

    #[test]
    fn pool_creation_failures_carry_libpmemobj_s_message() {
        let dir = scratch_dir();
        let path = dir.path().join("no-such-dir").join("x.pool");
        let error = run(&path, 16 << 20, &small(MicroWorkload::Hash), |_| {}).unwrap_err();
        match &error {
            PmdkError::PoolCreate { message, .. } => assert!(!message.is_empty()),
            other => panic!("unexpected {other}"),
        }
        let too_small = run(&dir.path().join("small.pool"), 1 << 20, &small(MicroWorkload::Hash), |_| {});
        assert!(matches!(too_small, Err(PmdkError::InvalidConfig(_))));
    }

    #[test]
    fn running_out_of_space_while_loading_is_an_error() {
        let dir = scratch_dir();
        let path = dir.path().join("full.pool");
        let config = MicroConfig { entries: 200_000, entry_size: 256, ..small(MicroWorkload::Hash) };
        let error = run(&path, 8 << 20, &config, |_| {}).unwrap_err();
        assert!(matches!(error, PmdkError::OutOfSpace { .. }), "{error}");
        assert!(error.to_string().contains("out of space"), "{error}");
        assert!(!path.exists());
    }

    #[test]
    fn running_out_of_space_in_a_worker_stops_the_run() {
        let dir = scratch_dir();
        let path = dir.path().join("queue-full.pool");
        // Only enqueues of 4 KiB items: an 8 MiB pool fills within 2000.
        let config = MicroConfig {
            entries: 10,
            entry_size: 4096,
            insert_percent: 100,
            length: RunLength::OpsPerThread(1_000),
            keep_pool: true,
            ..small(MicroWorkload::Queue)
        };
        let error = run(&path, 8 << 20, &config, |_| {}).unwrap_err();
        assert!(matches!(error, PmdkError::OutOfSpace { .. }), "{error}");
        // The failed transaction was rolled back: the queue is intact.
        let report = check(&path, MicroWorkload::Queue).unwrap();
        assert!(report.items > 10, "{report:?}");
    }
}
