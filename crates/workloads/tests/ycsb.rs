//! YCSB: every variant runs on every engine and leaves a consistent table.

mod common;

use common::{assert_consistent, open, run_clients};
use pmtx_engine::EngineKind;
use pmtx_workloads::ycsb::{Ycsb, READ_ONLY, READ_WRITE};
use pmtx_workloads::{count_rows, Workload, WorkloadOptions, YcsbVariant};

fn options(variant: YcsbVariant) -> WorkloadOptions {
    WorkloadOptions { ycsb: variant, records: 2000, ops_per_txn: 4, fields: 4, field_size: 25, ..Default::default() }
}

#[test]
fn every_variant_runs_and_checks() {
    for engine in [EngineKind::Silo, EngineKind::GroupCommit] {
        for variant in YcsbVariant::ALL {
            let workload = Ycsb::new(&options(variant)).unwrap();
            let db = open(engine, &workload);
            workload.load(&db, 2, &|_, _| {}).unwrap();
            assert_consistent(&workload, &db, "after load");
            let summaries = run_clients(&db, &workload, 2, 100, 3);
            assert!(summaries.iter().all(|s| s.committed), "{variant}: YCSB never rolls back");
            let read_only = summaries.iter().filter(|s| s.type_index == READ_ONLY).count();
            match variant {
                YcsbVariant::C | YcsbVariant::ReadOnly | YcsbVariant::ShortRangeQuery | YcsbVariant::LongRangeQuery => {
                    assert_eq!(read_only, summaries.len(), "{variant}")
                }
                YcsbVariant::ShortRangeUpdate | YcsbVariant::LongRangeUpdate | YcsbVariant::WriteHeavy => {
                    assert!(summaries.iter().all(|s| s.type_index == READ_WRITE), "{variant}")
                }
                _ => assert!(read_only < summaries.len(), "{variant}: some transactions write"),
            }
            assert_consistent(&workload, &db, &format!("after {variant} on {engine}"));
            let rows = count_rows(&db, "usertable").unwrap();
            if variant.inserts() {
                assert!(rows > 2000, "{variant}: inserts added rows ({rows})");
            } else {
                assert_eq!(rows, 2000, "{variant}");
            }
        }
    }
}

#[test]
fn inserts_continue_after_the_largest_key_with_a_fresh_workload() {
    let workload = Ycsb::new(&options(YcsbVariant::D)).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    run_clients(&db, &workload, 2, 200, 1);
    let before = count_rows(&db, "usertable").unwrap();
    // A new workload value does not know the insert point: clients find it.
    let fresh = Ycsb::new(&options(YcsbVariant::E)).unwrap();
    run_clients(&db, &fresh, 2, 200, 2);
    let after = count_rows(&db, "usertable").unwrap();
    assert!(after > before);
    assert_consistent(&fresh, &db, "after inserts of a second workload value");
}

#[test]
fn check_detects_bad_rows() {
    let workload = Ycsb::new(&options(YcsbVariant::A)).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let mut worker = db.worker(1).unwrap();
    worker
        .run(|tx| {
            tx.put(pmtx_workloads::ycsb::table::USERTABLE, &pmtx_workloads::ycsb::key(5), b"short")?;
            tx.delete(pmtx_workloads::ycsb::table::USERTABLE, &pmtx_workloads::ycsb::key(6))?;
            Ok(())
        })
        .unwrap();
    drop(worker);
    let report = workload.check(&db).unwrap();
    let failed: Vec<&str> = report.failures().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(failed, ["loaded rows", "row length"], "{report}");
}
