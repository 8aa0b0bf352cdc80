//! The queue workload: its mix, FIFO order per partition, the counters the
//! check compares, and the check catching gaps, uncounted items and bad
//! lengths.

mod common;

use common::{assert_consistent, open, run_clients};
use pmtx_engine::{Database, EngineKind};
use pmtx_workloads::queue::{self, key, parse_key, table, Queue, QueueMix, DEQUEUE, ENQUEUE, PEEK};
use pmtx_workloads::{by_name, count_rows, Workload, WorkloadError, WorkloadOptions};
use std::sync::Arc;

fn options(length: u64) -> WorkloadOptions {
    WorkloadOptions { queue_length: length, field_size: 24, ..Default::default() }
}

/// Sequences of `partition` in the database, in key order.
fn sequences(db: &Database, partition: u32) -> Vec<u64> {
    let mut found = Vec::new();
    db.for_each_row(table::QUEUE, |k, _| {
        let (p, sequence) = parse_key(k).expect("12-byte key");
        if p == partition {
            found.push(sequence);
        }
    })
    .unwrap();
    found.sort_unstable();
    found
}

#[test]
fn keys_order_by_partition_then_sequence() {
    assert_eq!(parse_key(&key(3, 77)), Some((3, 77)));
    assert_eq!(parse_key(b"short"), None);
    assert!(key(0, u64::MAX) < key(1, 0));
    assert!(key(1, 255) < key(1, 256));
    assert_eq!(key(1, 2).len(), queue::KEY_LEN);
}

#[test]
fn clients_draw_the_mix() {
    let workload = Queue::new(&options(10)).unwrap();
    let mut client = workload.queue_client(0, 7);
    let mut counts = [0usize; 3];
    for _ in 0..20_000 {
        counts[client.next_type()] += 1;
    }
    for (index, &weight) in queue::MIX.iter().enumerate() {
        let share = counts[index] as f64 / 20_000.0;
        assert!((share - weight as f64 / 100.0).abs() < 0.015, "type {index}: {share}");
    }
    let only_peeks = Queue::new(&WorkloadOptions { queue_mix: [0, 0, 1], ..options(10) }).unwrap();
    let mut client = only_peeks.queue_client(1, 7);
    assert!((0..1000).all(|_| client.next_type() == PEEK));
}

#[test]
fn mixes_parse_and_bad_options_are_rejected() {
    assert_eq!(QueueMix::parse("enqueue=1,dequeue=1").unwrap(), QueueMix([1, 1, 0]));
    assert_eq!(QueueMix::parse("PEEK=3, enqueue=2").unwrap(), QueueMix([2, 0, 3]));
    assert_eq!(QueueMix::default().to_string(), "enqueue=45,dequeue=45,peek=10");
    for (text, needle) in [
        ("", "empty"),
        ("enqueue", "not TYPE=WEIGHT"),
        ("push=1", "unknown transaction type \"push\""),
        ("enqueue=1,enqueue=2", "enqueue is given twice"),
        ("enqueue=0", "from 1 to"),
    ] {
        let error = QueueMix::parse(text).unwrap_err();
        assert!(matches!(error, WorkloadError::InvalidOption(_)));
        let message = error.to_string();
        assert!(message.contains(needle) && message.contains("enqueue, dequeue, peek"), "{text:?}: {message}");
    }
    let defaults = options(10);
    for bad in [
        WorkloadOptions { queue_scan: 0, ..defaults.clone() },
        WorkloadOptions { field_size: 0, ..defaults.clone() },
        WorkloadOptions { queue_mix: [0, 0, 0], ..defaults.clone() },
        WorkloadOptions { queue_length: queue::MAX_QUEUE_LENGTH + 1, ..defaults.clone() },
    ] {
        assert!(matches!(by_name("queue", &bad), Err(WorkloadError::InvalidOption(_))), "{bad:?}");
    }
    assert_eq!(by_name("QUEUE", &defaults).unwrap().transaction_types(), ["enqueue", "dequeue", "peek"]);
}

#[test]
fn every_engine_keeps_fifo_partitions_that_match_the_counters() {
    for engine in [EngineKind::Silo, EngineKind::GroupCommit, EngineKind::Dbxn, EngineKind::Zen] {
        let workload = Queue::new(&options(50)).unwrap();
        let db = open(engine, &workload);
        assert_eq!(workload.expected_rows(), None, "not loaded yet");
        workload.load(&db, 2, &|_, _| {}).unwrap();
        assert_eq!(count_rows(&db, "queue").unwrap(), 100);
        assert_eq!(workload.expected_rows(), Some(100));
        assert_consistent(&workload, &db, "after load");

        let summaries = run_clients(&db, &workload, 2, 400, 11);
        for type_index in [ENQUEUE, DEQUEUE, PEEK] {
            assert!(summaries.iter().any(|s| s.type_index == type_index && s.committed), "{engine}: {type_index}");
        }
        assert!(summaries.iter().filter(|s| s.type_index != DEQUEUE).all(|s| s.committed), "{engine}");
        assert_consistent(&workload, &db, &format!("after the run on {engine}"));
        assert_eq!(workload.expected_rows(), Some(count_rows(&db, "queue").unwrap()), "{engine}");

        for partition in 0..2 {
            let (enqueued, dequeued) = workload.committed(partition);
            let found = sequences(&db, partition);
            assert_eq!(found.len() as u64, 50 + enqueued - dequeued, "{engine} partition {partition}");
            // FIFO: dequeues took the oldest items, enqueues appended.
            if let Some(&head) = found.first() {
                assert_eq!(head, dequeued, "{engine} partition {partition}: head");
                assert_eq!(*found.last().unwrap(), 49 + enqueued, "{engine} partition {partition}: tail");
            }
        }
        let committed: u64 = (0..2).map(|p| workload.committed(p).0 + workload.committed(p).1).sum();
        let writes = summaries.iter().filter(|s| s.committed && s.type_index != PEEK).count() as u64;
        assert_eq!(committed, writes, "{engine}: every committed enqueue and dequeue is counted once");
    }
}

#[test]
fn dequeue_on_an_empty_partition_rolls_back() {
    let workload = Queue::new(&WorkloadOptions { queue_mix: [0, 1, 0], ..options(3) }).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let summaries = run_clients(&db, &workload, 1, 10, 1);
    let committed = summaries.iter().filter(|s| s.committed).count();
    assert_eq!(committed, 3, "three items to take, then the queue is empty");
    assert!(summaries[3..].iter().all(|s| !s.committed && s.type_index == DEQUEUE));
    assert_eq!(count_rows(&db, "queue").unwrap(), 0);
    assert_consistent(&workload, &db, "after emptying the queue");
}

#[test]
fn a_partition_that_was_not_loaded_starts_empty() {
    let workload = Queue::new(&options(20)).unwrap();
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    // Two clients on a database loaded for one: partition 1 starts empty.
    run_clients(&db, &workload, 2, 300, 5);
    assert_consistent(&workload, &db, "with a partition not loaded");
    let (enqueued, dequeued) = workload.committed(1);
    assert_eq!(sequences(&db, 1).len() as u64, enqueued - dequeued);
}

#[test]
fn a_fresh_workload_value_continues_after_the_tail() {
    let workload = Queue::new(&options(30)).unwrap();
    let db = open(EngineKind::GroupCommit, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    run_clients(&db, &workload, 2, 200, 2);
    // A value that did not load the database has no counters: its check
    // compares contiguity only, and its clients find the tails.
    let fresh = Queue::new(&WorkloadOptions { queue_mix: [1, 0, 0], ..options(30) }).unwrap();
    run_clients(&db, &fresh, 2, 50, 3);
    let report = fresh.check(&db).unwrap();
    assert!(report.passed(), "{report}");
    assert!(report.to_string().contains("not compared"), "{report}");
    assert_eq!(fresh.expected_rows(), None, "no counters without a load");
    for partition in 0..2 {
        let found = sequences(&db, partition);
        assert!(found.windows(2).all(|pair| pair[1] == pair[0] + 1), "partition {partition} is contiguous");
        assert_eq!(fresh.committed(partition).0, 50);
    }
}

#[test]
fn check_detects_gaps_uncounted_items_and_bad_lengths() {
    let setup = || {
        let workload = Queue::new(&options(10)).unwrap();
        let db: Arc<Database> = open(EngineKind::Silo, &workload);
        workload.load(&db, 2, &|_, _| {}).unwrap();
        (workload, db)
    };
    let failed = |workload: &Queue, db: &Arc<Database>| -> Vec<String> {
        workload.check(db).unwrap().failures().map(|(name, _, _)| name.clone()).collect()
    };

    // A row taken from the middle: a gap, and one item fewer than counted.
    let (workload, db) = setup();
    db.worker(1).unwrap().run(|tx| tx.delete(table::QUEUE, &key(0, 4))).unwrap();
    assert_eq!(failed(&workload, &db), ["contiguous partitions", "partition lengths"]);

    // An item appended behind the clients' back: contiguous, not counted.
    let (workload, db) = setup();
    db.worker(1).unwrap().run(|tx| tx.insert(table::QUEUE, &key(1, 10), &[0u8; 24])).unwrap();
    assert_eq!(failed(&workload, &db), ["partition lengths"]);

    // An item of another length.
    let (workload, db) = setup();
    db.worker(1).unwrap().run(|tx| tx.put(table::QUEUE, &key(0, 0), b"short")).unwrap();
    assert_eq!(failed(&workload, &db), ["item length"]);
}

/// A group-commit database on an in-memory pool with `workload` loaded
/// into 2 partitions, and the options to reopen it.
fn crash_setup(workload: &Queue) -> (Arc<Database>, pmtx_engine::DbOptions, Arc<pmtx_pm::Pool<pmtx_pm::Direct>>) {
    let mut options = pmtx_engine::DbOptions::in_memory(EngineKind::GroupCommit, workload.tables());
    options.workers = 3;
    let pool = Arc::new(
        pmtx_pm::Pool::<pmtx_pm::Direct>::create_in_memory(64 << 20, options.chunk_size, &Default::default()).unwrap(),
    );
    let db = Arc::new(Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap());
    workload.load(&db, 2, &|_, _| {}).unwrap();
    (db, options, pool)
}

/// Drops `db` without closing it (a crash) and recovers the pool.
fn crash(
    db: Arc<Database>,
    options: pmtx_engine::DbOptions,
    pool: &Arc<pmtx_pm::Pool<pmtx_pm::Direct>>,
) -> Arc<Database> {
    drop(Arc::into_inner(db).unwrap());
    Arc::new(Database::open_on_pool(options, Arc::clone(pool)).unwrap())
}

/// After a crash with commits still unacknowledged, each partition holds
/// exactly the items of its acknowledged operations and a prefix of the
/// others, and runs go on from there.
#[test]
fn exact_after_a_crash_with_unacknowledged_commits() {
    let workload = Queue::new(&options(50)).unwrap();
    let (db, options, pool) = crash_setup(&workload);
    std::thread::scope(|scope| {
        for index in 0..2 {
            let mut client = workload.client(index, 2, 31);
            let db = Arc::clone(&db);
            scope.spawn(move || {
                let mut worker = db.worker(index).unwrap();
                for _ in 0..400 {
                    client.run_next(&mut worker).unwrap();
                    worker.drain_acknowledged(|_, _| {});
                }
            });
        }
    });
    let db = crash(db, options, &pool);
    let report = workload.check(&db).unwrap();
    assert!(report.passed(), "{report}");
    assert!(report.to_string().contains("exactly"), "{report}");
    run_clients(&db, &workload, 2, 100, 32);
    assert_consistent(&workload, &db, "after running on the recovered database");
}

/// A crash that loses the newest enqueues of a partition: the next
/// enqueue takes the sequence after the recovered tail, not the one after
/// the lost enqueues, so the partition stays contiguous and matches the
/// clients' record. Deleting the items of the last committed enqueues
/// before the crash leaves what a crash losing those commits leaves,
/// without depending on when epochs become durable.
#[test]
fn enqueues_after_a_crash_continue_after_the_recovered_tail() {
    // (loaded length, items a crash loses: the last of five enqueues)
    for (length, lost) in [(10u64, 12..15u64), (0, 0..5)] {
        let workload = Queue::new(&WorkloadOptions { queue_mix: [1, 0, 0], ..options(length) }).unwrap();
        let (db, options, pool) = crash_setup(&workload);
        let mut client = workload.client(0, 2, 51);
        let mut worker = db.worker(0).unwrap();
        // Never drained: the client counts none of them as acknowledged.
        for _ in 0..5 {
            assert!(client.run_next(&mut worker).unwrap().committed);
        }
        drop(worker);
        db.worker(2)
            .unwrap()
            .run(|tx| {
                for sequence in lost.clone() {
                    assert!(tx.delete(table::QUEUE, &key(0, sequence))?);
                }
                Ok(())
            })
            .unwrap();
        let db = crash(db, options, &pool);
        let report = workload.check(&db).unwrap();
        assert!(report.passed(), "length {length}: {report}");
        assert_eq!(sequences(&db, 0), (0..lost.start).collect::<Vec<_>>(), "length {length}");

        let summaries = run_clients(&db, &workload, 1, 3, 52);
        assert!(summaries.iter().all(|s| s.committed), "length {length}");
        assert_eq!(sequences(&db, 0), (0..lost.start + 3).collect::<Vec<_>>(), "length {length}: no gap");
        assert_consistent(&workload, &db, &format!("after enqueues on the recovered database (length {length})"));
    }
}

/// After a crash every acknowledged operation counts exactly: one item
/// missing fails the check, though the count stays inside the range the
/// loaded length, enqueues and dequeues allow.
#[test]
fn check_detects_a_lost_item_after_a_crash() {
    let workload = Queue::new(&options(50)).unwrap();
    let (db, options, pool) = crash_setup(&workload);
    run_clients(&db, &workload, 2, 200, 41);
    let (enqueued, dequeued) = workload.committed(0);
    assert!(enqueued > 0 && dequeued > 0, "{enqueued} enqueued, {dequeued} dequeued");
    let db = crash(db, options, &pool);
    let head = sequences(&db, 0)[0];
    db.worker(1).unwrap().run(|tx| tx.delete(table::QUEUE, &key(0, head))).unwrap();
    let report = workload.check(&db).unwrap();
    let failed: Vec<&str> = report.failures().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(failed, ["partition lengths"], "{report}");
}

/// Without a crash the check wants the exact items too: the same number
/// of items shifted by one sequence fails.
#[test]
fn check_detects_shifted_items() {
    let workload = Queue::new(&options(10)).unwrap();
    let db: Arc<Database> = open(EngineKind::Silo, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    let mut worker = db.worker(1).unwrap();
    worker
        .run(|tx| {
            assert!(tx.delete(table::QUEUE, &key(1, 0))?);
            tx.insert(table::QUEUE, &key(1, 10), &[0u8; 24])
        })
        .unwrap();
    drop(worker);
    let failed: Vec<String> = workload.check(&db).unwrap().failures().map(|(name, _, _)| name.clone()).collect();
    assert_eq!(failed, ["partition lengths"]);
}
