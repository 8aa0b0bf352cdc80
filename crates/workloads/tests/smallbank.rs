//! Smallbank: money is conserved (ledger) after concurrent runs on every
//! engine, with and without a hotspot, and after crash recovery.

mod common;

use common::{assert_consistent, open, run_clients};
use pmtx_engine::{Database, DbOptions, EngineKind};
use pmtx_pm::{Direct, PmOptions, Pool};
use pmtx_workloads::smallbank::{self, Smallbank};
use pmtx_workloads::{count_rows, Workload, WorkloadOptions};
use std::sync::Arc;

fn workload(hotspot: Option<u64>) -> Smallbank {
    Smallbank::new(&WorkloadOptions { accounts: 2000, hotspot, ..Default::default() }).unwrap()
}

fn conserved_after_run(engine: EngineKind, hotspot: Option<u64>) {
    let workload = workload(hotspot);
    let db = open(engine, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    for name in ["accounts", "savings", "checking"] {
        if name != "accounts" {
            assert_eq!(count_rows(&db, name).unwrap(), 2000, "{name}");
        }
    }
    assert_consistent(&workload, &db, "after load");
    let summaries = run_clients(&db, &workload, 3, 1500, 21);
    let mut per_type = [0usize; 6];
    for summary in &summaries {
        per_type[summary.type_index] += 1;
    }
    assert!(per_type.iter().all(|&n| n > 0), "{per_type:?}");
    assert!(summaries.iter().filter(|s| s.committed).count() > summaries.len() / 2);
    assert_consistent(&workload, &db, "after a run");
}

#[test]
fn conserved_on_silo() {
    conserved_after_run(EngineKind::Silo, None);
}

#[test]
fn conserved_on_group_commit() {
    conserved_after_run(EngineKind::GroupCommit, None);
}

#[test]
fn conserved_with_a_hotspot() {
    conserved_after_run(EngineKind::Silo, Some(10));
    conserved_after_run(EngineKind::GroupCommit, Some(10));
}

#[test]
fn hotspot_accounts_get_the_configured_share() {
    let workload = workload(Some(100));
    let mut client = workload.smallbank_client(0, 9);
    let hot = (0..10_000).filter(|_| client.account() < 100).count();
    assert!((8_700..=9_300).contains(&hot), "{hot} of 10000 accesses hot");
}

#[test]
fn conserved_after_crash_recovery() {
    let workload = workload(Some(50));
    let mut options = DbOptions::in_memory(EngineKind::GroupCommit, workload.tables());
    options.workers = 3;
    let pool = Arc::new(Pool::<Direct>::create_in_memory(64 << 20, options.chunk_size, &PmOptions::default()).unwrap());
    let db = Arc::new(Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap());
    workload.load(&db, 2, &|_, _| {}).unwrap();
    // Leave commits unacknowledged at the crash: run without waiting.
    std::thread::scope(|scope| {
        for index in 0..3 {
            let mut client = workload.client(index, 3, 77);
            let db = Arc::clone(&db);
            scope.spawn(move || {
                let mut worker = db.worker(index).unwrap();
                for _ in 0..800 {
                    client.run_next(&mut worker).unwrap();
                    worker.drain_acknowledged(|_, _| {});
                }
            });
        }
    });
    drop(Arc::into_inner(db).unwrap());
    let db = Arc::new(Database::open_on_pool(options, Arc::clone(&pool)).unwrap());
    let report = workload.check(&db).unwrap();
    assert!(report.passed(), "{report}");
    let ledger = count_rows(&db, smallbank::table::NAMES[3]).unwrap();
    assert!(ledger >= 2, "load and client ledger rows survive: {ledger}");
}

/// One balance changed behind the clients' back fails the conservation
/// check (the ledger no longer matches), a negative savings balance fails
/// its own check, and a name pointing at another customer fails
/// "accounts"; the same database passed before.
#[test]
fn check_detects_a_corrupt_value() {
    let workload = workload(None);
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    run_clients(&db, &workload, 2, 300, 5);
    assert_consistent(&workload, &db, "before the corruption");
    let failed = |db: &Arc<Database>| -> Vec<String> {
        workload.check(db).unwrap().failures().map(|(name, _, _)| name.clone()).collect()
    };
    let custid = 17u64.to_be_bytes();
    let mut worker = db.worker(1).unwrap();
    let read = |worker: &mut pmtx_engine::Worker, table| -> i64 {
        let row = worker.run(|tx| tx.get(table, &custid)).unwrap().committed().flatten().unwrap();
        i64::from_le_bytes(row.try_into().unwrap())
    };

    let checking = read(&mut worker, smallbank::table::CHECKING);
    worker.run(|tx| tx.put(smallbank::table::CHECKING, &custid, &(checking + 1).to_le_bytes())).unwrap();
    assert_eq!(failed(&db), ["conservation"]);
    worker.run(|tx| tx.put(smallbank::table::CHECKING, &custid, &checking.to_le_bytes())).unwrap();
    assert_consistent(&workload, &db, "after the repair");

    // Savings moved to checking: conserved, but negative savings.
    let savings = read(&mut worker, smallbank::table::SAVINGS);
    worker
        .run(|tx| {
            tx.put(smallbank::table::SAVINGS, &custid, &(-1i64).to_le_bytes())?;
            tx.put(smallbank::table::CHECKING, &custid, &(checking + savings + 1).to_le_bytes())
        })
        .unwrap();
    assert_eq!(failed(&db), ["savings non-negative"]);
}
