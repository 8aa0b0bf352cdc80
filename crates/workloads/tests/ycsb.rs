//! YCSB: every variant runs on every engine and leaves a consistent table.

mod common;

use common::{assert_consistent, open, run_clients};
use pmtx_engine::{Database, EngineKind};
use pmtx_workloads::ycsb::{
    table, LongKind, Ycsb, LONG, LONG_RANGE_ROWS, READ_ONLY, READ_WRITE, SHORT, SHORT_RANGE_ROWS,
};
use pmtx_workloads::{by_name, count_rows, Client, Workload, WorkloadError, WorkloadOptions, YcsbVariant};
use std::collections::HashMap;
use std::sync::Arc;

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
    assert_eq!(failed, ["loaded rows", "row length", "row checksums"], "{report}");
}

/// The value of `number` in `db`.
fn row_of(db: &Arc<Database>, number: u64) -> Vec<u8> {
    let mut worker = db.worker(1).unwrap();
    let row = worker.run(|tx| tx.get(table::USERTABLE, &pmtx_workloads::ycsb::key(number))).unwrap();
    row.committed().flatten().expect("the row exists")
}

/// Writes `row` as the value of `number`, behind the clients' back.
fn overwrite(db: &Arc<Database>, number: u64, row: &[u8]) {
    let mut worker = db.worker(1).unwrap();
    worker.run(|tx| tx.put(table::USERTABLE, &pmtx_workloads::ycsb::key(number), row)).unwrap();
}

/// Every row carries a checksum of its key, write version and content:
/// one flipped byte, a row copied under another key, or a row put back at
/// an older version with the newer content fails the check, which passed
/// before on the same database after updates and inserts.
#[test]
fn check_detects_a_corrupt_value() {
    use pmtx_workloads::ycsb::{seal_row, verify_row, ROW_HEADER};
    let workload = Ycsb::new(&options(YcsbVariant::D)).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let updates = Ycsb::new(&options(YcsbVariant::A)).unwrap();
    run_clients(&db, &workload, 2, 200, 3);
    run_clients(&db, &updates, 2, 200, 4);
    assert_consistent(&workload, &db, "after updates and inserts");
    // Some row was updated (its version is above 0).
    let updated = (0..200u64)
        .find(|&number| verify_row(&pmtx_workloads::ycsb::key(number), &row_of(&db, number)).unwrap() > 0)
        .expect("an updated row");
    let failed = |workload: &Ycsb| -> Vec<String> {
        workload.check(&db).unwrap().failures().map(|(name, _, _)| name.clone()).collect()
    };

    // One byte of the content flipped.
    let good = row_of(&db, updated);
    let mut bad = good.clone();
    bad[ROW_HEADER + 3] ^= 0x40;
    overwrite(&db, updated, &bad);
    assert_eq!(failed(&workload), ["row checksums"]);

    // Another key's (intact) row.
    overwrite(&db, updated, &row_of(&db, updated + 1));
    assert_eq!(failed(&workload), ["row checksums"]);

    // The right content under an older write version.
    let mut stale = good.clone();
    stale[..8].copy_from_slice(&0u64.to_le_bytes());
    overwrite(&db, updated, &stale);
    assert_eq!(failed(&workload), ["row checksums"]);

    // Sealed again: passes again.
    let mut resealed = good.clone();
    seal_row(&pmtx_workloads::ycsb::key(updated), 7, &mut resealed);
    overwrite(&db, updated, &resealed);
    assert_consistent(&workload, &db, "after resealing");

    // A fresh workload value (which handed out no keys, as after a
    // recovery) still checks the inserted rows: a corrupt one fails.
    assert_consistent(&Ycsb::new(&options(YcsbVariant::D)).unwrap(), &db, "with a fresh workload value");
    let inserted = 2000 + 1;
    let mut row = row_of(&db, inserted);
    row[ROW_HEADER] ^= 1;
    overwrite(&db, inserted, &row);
    assert_eq!(failed(&Ycsb::new(&options(YcsbVariant::D)).unwrap()), ["row checksums", "inserted rows"]);
}

/// PHyTM's mixed workload: `options(variant)` with `long_threads` and
/// uniform keys (so a long update touches ~240 distinct rows of 2000).
fn mixed(variant: YcsbVariant, long_threads: usize) -> WorkloadOptions {
    WorkloadOptions { long_threads, theta: 0.0, ..options(variant) }
}

/// Every row's value, by key.
fn snapshot(db: &Arc<Database>) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut rows = HashMap::new();
    db.for_each_row(table::USERTABLE, |key, value| {
        rows.insert(key.to_vec(), value.to_vec());
    })
    .unwrap();
    rows
}

#[test]
fn long_threads_give_worker_zero_long_and_the_others_short_transactions() {
    use YcsbVariant::{LongRangeQuery, LongRangeUpdate, ShortRangeQuery, ShortRangeUpdate};
    // Either variant of a pair names the pair.
    for variant in [ShortRangeQuery, LongRangeQuery, ShortRangeUpdate, LongRangeUpdate] {
        let (short, long) = variant.short_long_pair().unwrap();
        let workload = Ycsb::new(&mixed(variant, 1)).unwrap();
        assert_eq!(workload.transaction_types(), ["short", "long"], "{variant}");
        assert_eq!(workload.transaction_types()[SHORT], "short");
        assert_eq!(workload.transaction_types()[LONG], "long");
        workload.validate_threads(2).unwrap();
        let db = open(EngineKind::Silo, &workload);
        workload.load(&db, 2, &|_, _| {}).unwrap();
        for (index, class, expected, rows) in [(0, LONG, long, LONG_RANGE_ROWS), (1, SHORT, short, SHORT_RANGE_ROWS)] {
            let mut client = workload.ycsb_client(index, 7);
            assert_eq!(client.variant(), expected, "{variant}: worker {index}");
            let mut worker = db.worker(index).unwrap();
            let mut found = Vec::new();
            for _ in 0..40 {
                let before = (!variant.scans()).then(|| snapshot(&db));
                let summary = client.run_next(&mut worker).unwrap();
                assert!(summary.committed, "{variant}: worker {index}");
                assert_eq!(summary.type_index, class, "{variant}: worker {index}");
                found.push(client.last_rows());
                if let Some(before) = before {
                    // The data shows the class too: an update transaction
                    // changes one field of each distinct row it draws.
                    let after = snapshot(&db);
                    let changed = after.iter().filter(|(key, value)| before[*key] != **value).count();
                    if class == LONG {
                        assert!(changed > 200, "{variant}: worker 0 changed only {changed} rows");
                    } else {
                        assert!((1..=SHORT_RANGE_ROWS).contains(&changed), "{variant}: worker 1 changed {changed}");
                    }
                }
            }
            pmtx_workloads::wait_all_acknowledged(&mut worker);
            if variant.scans() {
                // A scan that starts near the end of the table finds fewer.
                assert!(found.iter().all(|&n| n <= rows), "{variant}: worker {index}: {found:?}");
                assert!(found.contains(&rows), "{variant}: worker {index} never scanned {rows} rows: {found:?}");
            } else {
                assert!(found.iter().all(|&n| n == rows), "{variant}: worker {index}: {found:?}");
            }
        }
        assert_consistent(&workload, &db, &format!("after mixed {variant}"));
    }
}

#[test]
fn long_threads_split_concurrent_clients_by_worker_index() {
    let workload = Ycsb::new(&mixed(YcsbVariant::ShortRangeQuery, 2)).unwrap();
    let db = open(EngineKind::GroupCommit, &workload);
    workload.load(&db, 3, &|_, _| {}).unwrap();
    let summaries = run_clients(&db, &workload, 3, 60, 5);
    // run_clients returns worker 0's summaries, then worker 1's, then 2's.
    let classes: Vec<usize> = summaries.iter().map(|s| s.type_index).collect();
    assert!(classes[..120].iter().all(|&class| class == LONG), "workers 0 and 1 run long transactions");
    assert!(classes[120..].iter().all(|&class| class == SHORT), "worker 2 runs short transactions");
    assert_consistent(&workload, &db, "after a mixed run");
}

#[test]
fn long_threads_reject_what_they_cannot_run() {
    let invalid = |result: Result<(), WorkloadError>, needle: &str| match result {
        Err(WorkloadError::InvalidOption(message)) => assert!(message.contains(needle), "{message}"),
        other => panic!("expected an invalid-option error with {needle:?}, got {other:?}"),
    };
    for variant in [YcsbVariant::A, YcsbVariant::C, YcsbVariant::E, YcsbVariant::WriteHeavy] {
        invalid(Ycsb::new(&mixed(variant, 1)).map(|_| ()), "srq, lrq, sru or lru");
    }
    for name in ["smallbank", "tpcc", "TPC-C", "queue", "hash"] {
        let options = WorkloadOptions { long_threads: 1, ..Default::default() };
        invalid(by_name(name, &options).map(|_| ()), "applies to ycsb");
    }
    // Thread counts: at least one short thread.
    let one = Ycsb::new(&mixed(YcsbVariant::LongRangeUpdate, 1)).unwrap();
    invalid(one.validate_threads(1), "below the thread count (1)");
    one.validate_threads(2).unwrap();
    let three = Ycsb::new(&mixed(YcsbVariant::ShortRangeQuery, 3)).unwrap();
    for threads in [1, 2, 3] {
        invalid(three.validate_threads(threads), "long_threads (3)");
    }
    three.validate_threads(4).unwrap();
    // 0 keeps today's workload: the types say whether a transaction writes.
    let plain = by_name("ycsb", &mixed(YcsbVariant::ShortRangeQuery, 0)).unwrap();
    assert_eq!(plain.transaction_types(), ["read_only", "read_write"]);
    plain.validate_threads(1).unwrap();
    by_name("smallbank", &WorkloadOptions { accounts: 100, ..Default::default() })
        .unwrap()
        .validate_threads(1)
        .unwrap();
}

/// Zen+'s long-running transactions (Fig. 24-26): `mixed` with a point
/// variant and a long transaction kind.
fn long_kind(kind: LongKind, rows: usize, every: usize, disjoint: bool) -> WorkloadOptions {
    WorkloadOptions {
        long_kind: Some(kind),
        long_rows: Some(rows),
        long_every: every,
        long_disjoint: disjoint,
        ..mixed(YcsbVariant::Balanced, 1)
    }
}

/// A long thread runs `long_every` short transactions of the variant, then
/// a long one, typed apart; a long scan reads its rows read-only, a long
/// update changes each of its consecutive rows; disjoint long updates stay
/// in the upper half and the short transactions in the lower one.
#[test]
fn long_kinds_interleave_short_and_long_transactions() {
    for (kind, disjoint) in [(LongKind::Scan, false), (LongKind::Update, false), (LongKind::Update, true)] {
        let workload = Ycsb::new(&long_kind(kind, 300, 3, disjoint)).unwrap();
        assert_eq!(workload.transaction_types(), ["short", "long"]);
        let db = open(EngineKind::Silo, &workload);
        workload.load(&db, 2, &|_, _| {}).unwrap();
        let mut long_client = workload.ycsb_client(0, 11);
        let mut worker = db.worker(0).unwrap();
        let mut classes = Vec::new();
        for _ in 0..8 {
            let before = snapshot(&db);
            let summary = long_client.run_next(&mut worker).unwrap();
            pmtx_workloads::wait_all_acknowledged(&mut worker);
            assert!(summary.committed);
            classes.push(summary.type_index);
            let after = snapshot(&db);
            let changed: Vec<u64> = after
                .iter()
                .filter(|(key, value)| before[*key] != **value)
                .map(|(key, _)| u64::from_be_bytes(key.as_slice().try_into().unwrap()))
                .collect();
            if summary.type_index == LONG {
                assert_eq!(long_client.last_rows(), 300, "{kind}");
                match kind {
                    LongKind::Scan => assert!(changed.is_empty(), "a long scan writes nothing"),
                    LongKind::Update => {
                        assert_eq!(changed.len(), 300, "{kind}: one field of each of 300 rows");
                        let (low, high) = (changed.iter().min().unwrap(), changed.iter().max().unwrap());
                        assert_eq!(high - low, 299, "consecutive rows");
                        if disjoint {
                            assert!(*low >= 1000, "disjoint long updates stay in the upper half: {low}");
                        }
                    }
                }
            } else if disjoint {
                assert!(changed.iter().all(|&key| key < 1000), "short transactions stay below: {changed:?}");
            }
        }
        assert_eq!(classes, [SHORT, SHORT, SHORT, LONG, SHORT, SHORT, SHORT, LONG], "{kind}");
        // A short thread runs the variant only.
        let mut short_client = workload.ycsb_client(1, 12);
        let mut other = db.worker(1).unwrap();
        for _ in 0..10 {
            assert_eq!(short_client.run_next(&mut other).unwrap().type_index, SHORT);
        }
        pmtx_workloads::wait_all_acknowledged(&mut other);
        drop((worker, other));
        assert_consistent(&workload, &db, &format!("after long {kind}"));
    }
    // A long thread with short transactions may run alone; one with only
    // long ones may not.
    Ycsb::new(&long_kind(LongKind::Scan, 50, 3, false)).unwrap().validate_threads(1).unwrap();
    assert!(Ycsb::new(&long_kind(LongKind::Scan, 50, 0, false)).unwrap().validate_threads(1).is_err());
    // Every 0: only long transactions.
    let workload = Ycsb::new(&long_kind(LongKind::Scan, 50, 0, false)).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let mut client = workload.ycsb_client(0, 3);
    let mut worker = db.worker(0).unwrap();
    for _ in 0..3 {
        assert_eq!(client.run_next(&mut worker).unwrap().type_index, LONG);
    }
}

#[test]
fn long_kinds_reject_what_they_cannot_run() {
    let invalid = |options: WorkloadOptions, needle: &str| match Ycsb::new(&options) {
        Err(WorkloadError::InvalidOption(message)) => assert!(message.contains(needle), "{message}"),
        other => panic!("expected an invalid-option error with {needle:?}, got {:?}", other.map(|_| ())),
    };
    invalid(
        WorkloadOptions { ycsb: YcsbVariant::LongRangeQuery, ..long_kind(LongKind::Scan, 10, 0, false) },
        "pairs its own",
    );
    invalid(WorkloadOptions { long_threads: 0, ..long_kind(LongKind::Scan, 10, 0, false) }, "needs long_threads");
    invalid(long_kind(LongKind::Scan, 10, 0, true), "long_disjoint applies to long updates");
    invalid(long_kind(LongKind::Update, 3000, 0, false), "long_rows must be 1 to the 2000 rows");
    invalid(long_kind(LongKind::Update, 1001, 0, true), "1000 rows");
    invalid(
        WorkloadOptions { long_kind: None, long_every: 5, ..mixed(YcsbVariant::LongRangeUpdate, 1) },
        "long_every needs",
    );
    invalid(WorkloadOptions { long_every: 5, ..mixed(YcsbVariant::A, 0) }, "need long_threads");
    assert_eq!(LongKind::parse("SCAN").unwrap(), LongKind::Scan);
    assert!(LongKind::parse("merge").is_err());
    // The pairs take long_rows too.
    let workload =
        Ycsb::new(&WorkloadOptions { long_rows: Some(40), ..mixed(YcsbVariant::LongRangeQuery, 1) }).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let mut client = workload.ycsb_client(0, 5);
    let mut worker = db.worker(0).unwrap();
    let rows: Vec<usize> = (0..20)
        .map(|_| {
            client.run_next(&mut worker).unwrap();
            client.last_rows()
        })
        .collect();
    assert!(rows.iter().all(|&n| n <= 40) && rows.contains(&40), "{rows:?}");
}
