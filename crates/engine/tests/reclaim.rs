//! Absent rows (deletes, placeholders of reads of missing keys) are
//! reclaimed, so inserting and deleting forever keeps the indexes bounded,
//! and a reclaimed placeholder still conflicts with a reader of its key.

use pmtx_engine::{Database, DbOptions, EngineKind, ScanDirection, TableSchema};
use std::ops::Bound;
use std::time::Duration;

fn options(engine: EngineKind) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, vec![TableSchema::ordered("queue").max_value_len(32)]);
    // Logs of the durable engines are freed by checkpoints only.
    options.checkpoint_interval = Some(Duration::from_millis(50));
    options
}

/// Insert at the tail, delete at the head (TPC-C's NEW-ORDER pattern): the
/// indexed rows stay near the queue's length instead of growing with every
/// insert, and scans from the head stay short.
fn a_queue_keeps_the_index_bounded(engine: EngineKind) {
    const LENGTH: u64 = 50;
    const OPERATIONS: u64 = 20_000;
    let db = Database::open(options(engine)).unwrap();
    let queue = db.table_id("queue").unwrap();
    let mut worker = db.worker(0).unwrap();
    let key = |n: u64| n.to_be_bytes();
    for n in 0..LENGTH {
        worker.run(|tx| tx.insert(queue, &key(n), b"item")).unwrap();
    }
    let mut peak = 0;
    for n in LENGTH..OPERATIONS {
        worker
            .run(|tx| {
                let head = tx.scan(queue, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1)?;
                let (head, _) = head.into_iter().next().expect("the queue is never empty");
                assert_eq!(head, key(n - LENGTH), "{engine}: FIFO order");
                tx.delete(queue, &head)?;
                tx.insert(queue, &key(n), b"item")?;
                Ok(())
            })
            .unwrap();
        if n % 1000 == 0 {
            // Reclamation waits for an epoch boundary (and for durable
            // deletes); give it a moment now and then.
            std::thread::sleep(Duration::from_millis(5));
            peak = peak.max(db.stats().rows_indexed);
        }
    }
    let stats = db.stats();
    assert!(stats.rows_unlinked > OPERATIONS / 2, "{engine}: {} rows unlinked", stats.rows_unlinked);
    assert!(peak < 5_000, "{engine}: {peak} rows indexed at peak for a queue of {LENGTH}");
    let mut count = 0;
    db.for_each_row(queue, |_, _| count += 1).unwrap();
    assert_eq!(count, LENGTH, "{engine}");
}

/// T0 reads a missing key (its placeholder is queued for reclamation); T1
/// reads the key (absent) and waits; the placeholder is unlinked; T2
/// inserts the key (a new row) and commits. T1 must not commit having seen
/// the key absent: its first attempt aborts and the retry sees the row.
fn a_reclaimed_placeholder_still_conflicts(engine: EngineKind) {
    let db = Database::open(options(engine)).unwrap();
    let queue = db.table_id("queue").unwrap();
    let mut t0 = db.worker(0).unwrap();
    let mut t1 = db.worker(1).unwrap();
    let mut t2 = db.worker(2).unwrap();
    t0.run(|tx| tx.get(queue, b"missing")).unwrap();
    let mut first_attempt = true;
    let mut unlinked_during = 0;
    let finished = t1
        .run(|tx| {
            let seen = tx.get(queue, b"missing")?;
            if first_attempt {
                first_attempt = false;
                assert!(seen.is_none());
                // Let an epoch pass, then T0's worker reclaims at its next
                // commits.
                let before = db.stats().rows_unlinked;
                for _ in 0..200 {
                    std::thread::sleep(Duration::from_millis(3));
                    // Pipelined: T1 is active, so a group-commit wait for
                    // durability here would wait for T1 itself.
                    t0.run_pipelined(0, false, |tx| tx.put(queue, b"other", b"x")).unwrap();
                    if db.stats().rows_unlinked > before {
                        break;
                    }
                }
                unlinked_during = db.stats().rows_unlinked - before;
                t2.run_pipelined(0, false, |tx| tx.insert(queue, b"missing", b"now present")).unwrap();
            }
            tx.put(queue, b"saw", if seen.is_some() { b"present" } else { b"absent" })?;
            Ok(seen)
        })
        .unwrap();
    t0.wait_all_acknowledged(|_, _| {}).unwrap();
    t2.wait_all_acknowledged(|_, _| {}).unwrap();
    assert!(unlinked_during > 0, "{engine}: the placeholder was reclaimed while T1 held it");
    assert!(finished.attempts >= 2, "{engine}: T1's stale read of the absent key must abort");
    assert_eq!(finished.committed().flatten().as_deref(), Some(&b"now present"[..]), "{engine}");
}

macro_rules! per_engine {
    ($($module:ident: $engine:expr;)*) => {$(
        mod $module {
            #[test]
            fn a_queue_keeps_the_index_bounded() {
                super::a_queue_keeps_the_index_bounded($engine);
            }
            #[test]
            fn a_reclaimed_placeholder_still_conflicts() {
                super::a_reclaimed_placeholder_still_conflicts($engine);
            }
        }
    )*};
}

per_engine! {
    silo: pmtx_engine::EngineKind::Silo;
    group_commit: pmtx_engine::EngineKind::GroupCommit;
    dbxn: pmtx_engine::EngineKind::Dbxn;
    dbx_naive: pmtx_engine::EngineKind::DbxNaive;
    sp3: pmtx_engine::EngineKind::Sp3;
    nvm_tx: pmtx_engine::EngineKind::NvmTx;
    mmdb: pmtx_engine::EngineKind::Mmdb;
    wbl: pmtx_engine::EngineKind::Wbl;
    zen: pmtx_engine::EngineKind::Zen;
    zen_naive_alloc: pmtx_engine::EngineKind::ZenNaiveAlloc;
}
