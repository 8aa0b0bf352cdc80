//! The SP³ micro workloads (sps, sp3-queue, hash, rbtree, btree): each
//! stays consistent under concurrent clients on silo and group commit and
//! after crash recovery, and each check fails on damaged data.

mod common;

use common::{assert_consistent, open, run_clients};
use pmtx_engine::{Database, DbOptions, EngineKind, Worker};
use pmtx_pm::{Direct, PmOptions, Pool};
use pmtx_workloads::micro::{self, key, rbtree, sps};
use pmtx_workloads::{by_name, count_rows, Workload, WorkloadError, WorkloadOptions};
use std::sync::Arc;

const ENTRIES: u64 = 2000;
const TXNS_PER_THREAD: usize = 1500;

fn options() -> WorkloadOptions {
    WorkloadOptions { micro_entries: ENTRIES, ..Default::default() }
}

fn workload(name: &str) -> Box<dyn Workload> {
    by_name(name, &options()).unwrap()
}

/// Every row of every table of `workload`.
fn rows(db: &Database, workload: &dyn Workload) -> u64 {
    workload.tables().iter().map(|table| count_rows(db, &table.name).unwrap()).sum()
}

/// Loads, checks, runs two concurrent clients, checks again.
fn consistent_under_concurrency(name: &str) {
    for engine in [EngineKind::Silo, EngineKind::GroupCommit] {
        let workload = workload(name);
        assert_eq!(workload.name(), name);
        let db = open(engine, workload.as_ref());
        workload.load(&db, 2, &|_, _| {}).unwrap();
        assert_consistent(workload.as_ref(), &db, &format!("after load on {engine}"));
        if let Some(expected) = workload.expected_rows() {
            assert_eq!(rows(&db, workload.as_ref()), expected, "{name} on {engine}: rows after load");
        }
        let summaries = run_clients(&db, workload.as_ref(), 2, TXNS_PER_THREAD, 11);
        let types = workload.transaction_types();
        let mut counts = vec![0usize; types.len()];
        for summary in &summaries {
            assert!(summary.committed, "{name}: micro transactions never roll back");
            counts[summary.type_index] += 1;
        }
        // 50% inserts: every type runs.
        assert!(counts.iter().all(|&count| count > 0), "{name} on {engine}: type counts {counts:?} of {types:?}");
        assert_consistent(workload.as_ref(), &db, &format!("after 2 x {TXNS_PER_THREAD} transactions on {engine}"));
        if let Some(expected) = workload.expected_rows() {
            assert_eq!(rows(&db, workload.as_ref()), expected, "{name} on {engine}: rows after the run");
        }
    }
}

#[test]
fn sps_stays_consistent() {
    consistent_under_concurrency("sps");
}

#[test]
fn sp3_queue_stays_consistent() {
    consistent_under_concurrency("sp3-queue");
}

#[test]
fn hash_stays_consistent() {
    consistent_under_concurrency("hash");
}

#[test]
fn rbtree_stays_consistent() {
    consistent_under_concurrency("rbtree");
}

#[test]
fn btree_stays_consistent() {
    consistent_under_concurrency("btree");
}

#[test]
fn consistent_after_crash_recovery() {
    for name in micro::NAMES {
        let workload = workload(name);
        let mut options = DbOptions::in_memory(EngineKind::GroupCommit, workload.tables());
        options.workers = 2;
        let pool =
            Arc::new(Pool::<Direct>::create_in_memory(64 << 20, options.chunk_size, &PmOptions::default()).unwrap());
        let db = Arc::new(Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap());
        workload.load(&db, 2, &|_, _| {}).unwrap();
        // Leave commits unacknowledged at the crash: run without waiting.
        std::thread::scope(|scope| {
            for index in 0..2 {
                let mut client = workload.client(index, 2, 5);
                let db = Arc::clone(&db);
                scope.spawn(move || {
                    let mut worker = db.worker(index).unwrap();
                    for _ in 0..500 {
                        client.run_next(&mut worker).unwrap();
                        worker.drain_acknowledged(|_, _| {});
                    }
                });
            }
        });
        drop(Arc::into_inner(db).unwrap());
        let db = Arc::new(Database::open_on_pool(options, Arc::clone(&pool)).unwrap());
        let report = workload.check(&db).unwrap();
        assert!(report.passed(), "{name} after recovery:\n{report}");
        // The recovered database takes more transactions.
        run_clients(&db, workload.as_ref(), 2, 200, 6);
        assert_consistent(workload.as_ref(), &db, "after recovery and another run");
    }
}

#[test]
fn clients_draw_the_insert_share_and_are_deterministic() {
    for percent in [0, 30, 100] {
        let workload = micro::hash::new(&WorkloadOptions { insert_percent: percent, ..options() }).unwrap();
        let mut client = workload.kv_client(1, 9);
        let draws: Vec<(usize, u64)> = (0..10_000).map(|_| client.next_operation()).collect();
        let inserts = draws.iter().filter(|(type_index, _)| *type_index == micro::hash::INSERT).count();
        assert!((inserts as f64 / 100.0 - percent as f64).abs() < 2.0, "{percent}%: {inserts} of 10000 inserts");
        assert!(draws.iter().all(|&(_, k)| k < 2 * ENTRIES));
        let mut again = workload.kv_client(1, 9);
        assert!(draws.iter().all(|&draw| again.next_operation() == draw), "same seed, same operations");
    }
    // Zipfian 0.99 over the key space: a few keys take a large share, and
    // they are spread (scrambled), not the smallest keys.
    let workload = micro::rbtree::RbTree::new(&options()).unwrap();
    let mut client = workload.rbtree_client(0, 3);
    let mut counts = vec![0u32; 2 * ENTRIES as usize];
    for _ in 0..20_000 {
        counts[client.next_operation().1 as usize] += 1;
    }
    let hottest = counts.iter().enumerate().max_by_key(|(_, &count)| count).unwrap();
    assert!(*hottest.1 > 1000, "the hottest key has {} of 20000 draws", hottest.1);
    let uniform = micro::sps::Sps::new(&WorkloadOptions { theta: 0.0, ..options() }).unwrap();
    let mut client = uniform.sps_client(0, 3);
    for _ in 0..1000 {
        let (a, b) = client.next_pair();
        assert!(a != b && a < ENTRIES && b < ENTRIES);
    }
}

#[test]
fn bad_options_are_rejected() {
    for (options, needle) in [
        (WorkloadOptions { micro_entries: 1, ..options() }, "micro_entries"),
        (WorkloadOptions { entry_size: 15, ..options() }, "entry_size"),
        (WorkloadOptions { insert_percent: 101, ..options() }, "insert_percent"),
        (WorkloadOptions { theta: 1.0, ..options() }, "theta"),
    ] {
        for name in micro::NAMES {
            match by_name(name, &options) {
                Err(WorkloadError::InvalidOption(message)) => {
                    assert!(message.contains(needle) && message.starts_with(name), "{name}: {message}")
                }
                Err(other) => panic!("{name}: {other}"),
                Ok(_) => panic!("{name} accepted a bad {needle}"),
            }
        }
    }
}

/// Loads `workload` on a fresh silo database.
fn loaded(workload: &dyn Workload) -> Arc<Database> {
    let db = open(EngineKind::Silo, workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    assert_consistent(workload, &db, "after load");
    db
}

/// The names of the failed checks.
fn failures(workload: &dyn Workload, db: &Arc<Database>) -> Vec<String> {
    workload.check(db).unwrap().failures().map(|(name, _, _)| name.clone()).collect()
}

fn raw(db: &Database, body: impl FnMut(&mut pmtx_engine::Transaction<'_>) -> pmtx_engine::TxResult<()>) {
    let mut worker: Worker = db.worker(0).unwrap();
    worker.run(body).unwrap().committed().unwrap();
}

#[test]
fn rbtree_check_fails_on_a_red_child_under_a_red_node() {
    let workload = rbtree::RbTree::new(&WorkloadOptions { micro_entries: 300, ..options() }).unwrap();
    let db = loaded(&workload);
    let mut red_parent = None;
    db.for_each_row(rbtree::table::NODES, |_, value| {
        let header = rbtree::NodeHeader::decode(value).unwrap();
        if header.red {
            red_parent = Some(header.parent);
        }
    })
    .unwrap();
    // Make the parent of a red node red.
    let parent = red_parent.expect("a tree of 300 nodes has red nodes");
    raw(&db, |tx| {
        tx.update_with(rbtree::table::NODES, &key(parent), |row| row[32] = 1)?.expect("the parent exists");
        Ok(())
    });
    let failed = failures(&workload, &db);
    assert!(failed.iter().any(|name| name == "no red node with a red child"), "{failed:?}");
}

#[test]
fn rbtree_check_fails_on_a_lost_node_or_count() {
    let workload = rbtree::RbTree::new(&WorkloadOptions { micro_entries: 300, ..options() }).unwrap();
    let db = loaded(&workload);
    raw(&db, |tx| {
        tx.put(rbtree::table::ROOT, &key(rbtree::ROOT_KEY), &rbtree::root_value(rbtree::loaded_id(150), 301))
    });
    assert_eq!(failures(&workload, &db), ["node count"]);
    raw(&db, |tx| {
        tx.put(rbtree::table::ROOT, &key(rbtree::ROOT_KEY), &rbtree::root_value(rbtree::loaded_id(150), 300))?;
        // A leaf's row vanishes: its parent points at nothing.
        let leaf = rbtree::balanced_header(300, 0);
        assert!(leaf.left == rbtree::NIL && leaf.right == rbtree::NIL);
        assert!(tx.delete(rbtree::table::NODES, &key(rbtree::loaded_id(0)))?);
        Ok(())
    });
    let failed = failures(&workload, &db);
    assert!(failed.contains(&"tree links".to_string()) && failed.contains(&"node count".to_string()), "{failed:?}");
}

#[test]
fn sps_check_fails_on_a_duplicated_id_or_a_torn_entry() {
    let workload = sps::Sps::new(&WorkloadOptions { micro_entries: 100, ..options() }).unwrap();
    let db = loaded(&workload);
    // Entry 6 gets entry 5's value: id 5 twice, id 6 gone (half a swap).
    raw(&db, |tx| {
        let five = tx.get(sps::table::ARRAY, &key(5))?.unwrap();
        assert!(tx.update(sps::table::ARRAY, &key(6), &five)?);
        Ok(())
    });
    assert_eq!(failures(&workload, &db), ["ids are a permutation"]);

    let db = loaded(&workload);
    // Entry 7's second half is entry 8's: a torn value.
    raw(&db, |tx| {
        let mut seven = tx.get(sps::table::ARRAY, &key(7))?.unwrap();
        let eight = tx.get(sps::table::ARRAY, &key(8))?.unwrap();
        let half = seven.len() / 2;
        seven[half..].copy_from_slice(&eight[half..]);
        assert!(tx.update(sps::table::ARRAY, &key(7), &seven)?);
        Ok(())
    });
    assert_eq!(failures(&workload, &db), ["fillers match ids"]);
}

#[test]
fn queue_hash_and_btree_checks_fail_on_damage() {
    // A dequeue that lost its meta update: the head item is gone.
    let queue = workload("sp3-queue");
    let db = loaded(queue.as_ref());
    raw(&db, |tx| {
        assert!(tx.delete(micro::queue::table::ITEMS, &key(0))?);
        Ok(())
    });
    let failed = failures(queue.as_ref(), &db);
    assert!(failed.iter().any(|name| name == "items are head..tail"), "{failed:?}");

    for name in ["hash", "btree"] {
        let workload = workload(name);
        let db = loaded(workload.as_ref());
        // A value written under another key.
        raw(&db, |tx| {
            let three = tx.get(micro::hash::TABLE, &key(3))?.unwrap();
            assert!(tx.update(micro::hash::TABLE, &key(4), &three)?);
            Ok(())
        });
        assert_eq!(failures(workload.as_ref(), &db), ["entries embed their keys"], "{name}");
        // A loaded key lost.
        let db = loaded(workload.as_ref());
        raw(&db, |tx| {
            assert!(tx.delete(micro::hash::TABLE, &key(3))?);
            Ok(())
        });
        assert_eq!(failures(workload.as_ref(), &db), ["rows"], "{name}");
    }
}
