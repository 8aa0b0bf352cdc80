//! Recovery of the `zen` engine (Algorithm 2) on hand-picked crash images:
//! torn last tuples and missing LP bits around one multi-table transaction,
//! LP bits edited out of an image, repeated crashes during recovery, running
//! out of space, and space reuse with deletes across restarts.

mod support;

use pmtx_engine::{
    Database, DbError, DbOptions, EngineKind, PoolLocation, RecoveryReport, ScanDirection, TableSchema, ZenOptions,
};
use pmtx_pm::sim::{CapturePolicy, ImageBudget};
use pmtx_pm::{Direct, PmBackend, PmOptions, Pool, Sim};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::{heap_slots, memory_pool, read_state, read_state_with, DbState, Recovery, LP_BIT};

const CHUNK: u64 = pmtx_pm::layout::MIN_CHUNK_SIZE;

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("a").max_value_len(300).max_key_len(8), TableSchema::ordered("b").max_value_len(16)]
}

fn options(engine: EngineKind, pool_size: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.workers = 2;
    options.pool = PoolLocation::InMemory { size: pool_size };
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(1);
    options.zen = ZenOptions { lp_table_order: vec!["b".into()], sweep_threshold: 4, ..ZenOptions::default() };
    options
}

/// Recovers `bytes` on backend `B` (see [`Recovery::recover`]), reading
/// the ordered tables through a transaction.
fn recover_image<B: PmBackend>(
    options: &DbOptions,
    bytes: &[u8],
    before_open: impl FnOnce(&Pool<B>),
) -> Result<(DbState, Arc<Pool<B>>, RecoveryReport), String> {
    let recovered = Recovery::transactional(options.clone(), Vec::new()).recover(bytes, before_open)?;
    let report = recovered.report().clone();
    Ok((recovered.state, recovered.pool, report))
}

fn big(tag: u8, n: u64) -> Vec<u8> {
    let mut value = vec![tag; 300];
    value[..8].copy_from_slice(&n.to_le_bytes());
    value
}

fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// A database of `engine` on a fresh 2 MiB `Sim` pool, rows `0..rows` loaded
/// by worker 0: `a` holds `big(tag, n)`, `b` holds `b_row(n)`.
fn load_on_sim(
    engine: EngineKind,
    rows: u64,
    tag: u8,
    b_row: impl Fn(u64) -> Vec<u8>,
) -> (DbOptions, Arc<Pool<Sim>>, Database) {
    let options = options(engine, 2 << 20);
    let pool = memory_pool::<Sim>(&options);
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
    let (a, b) = (db.table_id("a").unwrap(), db.table_id("b").unwrap());
    let mut worker = db.worker(0).unwrap();
    worker
        .run(|tx| {
            for n in 0..rows {
                tx.put(a, &key(n), &big(tag, n))?;
                tx.put(b, &key(n), &b_row(n))?;
            }
            Ok(())
        })
        .unwrap();
    drop(worker);
    (options, pool, db)
}

/// Loads 10 rows into each table, then runs `transaction` (updates of four
/// 300-byte rows of `a` and one row of `b`) with every crash point captured.
/// Returns (state before, state after, crash states, ack event, final image).
fn run_one_transaction(
    engine: EngineKind,
) -> (DbState, DbState, Vec<pmtx_pm::sim::CrashState>, u64, Vec<u8>, DbOptions) {
    let (options, pool, db) = load_on_sim(engine, 10, 1, |n| n.to_le_bytes().to_vec());
    let (a, b) = (db.table_id("a").unwrap(), db.table_id("b").unwrap());
    let mut worker = db.worker(0).unwrap();
    let before = read_state_with(&mut worker, &db, &options.tables, &[]);
    pool.backend().set_capture(CapturePolicy::all());
    worker
        .run(|tx| {
            for n in 2..6 {
                tx.put(a, &key(n), &big(2, n))?;
            }
            tx.put(b, &key(5), &55u64.to_le_bytes())?;
            Ok(())
        })
        .unwrap();
    let acked = pool.backend().event_count();
    pool.backend().set_capture(CapturePolicy::NONE);
    let states = pool.backend().take_crash_states();
    let after = read_state_with(&mut worker, &db, &options.tables, &[]);
    assert_ne!(before, after);
    drop(worker);
    drop(db);
    (before, after, states, acked, pool.backend().persisted_image(), options)
}

#[test]
fn lp_bit_decides_commit_and_torn_tuples_are_discarded() {
    for engine in [EngineKind::Zen, EngineKind::ZenNaiveAlloc] {
        let (before, after, states, acked, final_image, options) = run_one_transaction(engine);
        let labels: Vec<&str> = states.iter().map(|s| s.label).collect();
        let lp_label = labels.iter().position(|l| l.contains("before LP")).expect("LP crash point");
        if engine == EngineKind::Zen {
            // Exactly Algorithm 1: fence 1, the LP crash point, fence 2.
            assert_eq!(labels, ["fence", "zen: tuples durable, before LP", "fence"], "{engine}");
        }
        let (mut saw_before_with_discard, mut saw_after_before_ack, mut images) = (false, false, 0);
        for (index, state) in states.iter().enumerate() {
            let budget =
                ImageBudget { random_subsets: 40, random_prefixes: 6, exhaustive_limit: 4096, all_but_lines: 64 };
            for image in state.images(0x7E57, budget) {
                let (recovered, _, report) = recover_image::<Direct>(&options, &image.bytes, |_| {})
                    .unwrap_or_else(|e| panic!("{engine} {}: {e}", image.description));
                images += 1;
                if recovered == after {
                    saw_after_before_ack |= state.event < acked;
                    assert!(
                        index > lp_label,
                        "{engine}: committed before the LP bit was stored: {}",
                        image.description
                    );
                } else {
                    assert_eq!(recovered, before, "{engine} {}: neither before nor after", image.description);
                    assert!(state.event < acked, "{engine} {}: acknowledged commit lost", image.description);
                    saw_before_with_discard |= report.heap_tuples_discarded > 0;
                }
            }
        }
        assert!(images > 50, "{engine}: only {images} images");
        assert!(saw_before_with_discard, "{engine}: no image had durable tuples without their LP bit");
        assert!(saw_after_before_ack, "{engine}: no image had the LP bit durable before the last fence returned");
        // The LP bit sits on the transaction's tuple of table `b`, first in
        // the LP order, and on no other tuple of the transaction.
        let pool = Pool::<Direct>::open_image(&final_image, &PmOptions::default()).unwrap();
        let slots = heap_slots(&pool, &options.tables);
        let last_cts = slots.iter().map(|s| s.word0 & !LP_BIT).max().unwrap();
        let of_last: Vec<_> = slots.iter().filter(|s| s.word0 & !LP_BIT == last_cts).collect();
        assert_eq!(of_last.len(), 5, "{engine}: five tuples carry the last Tx-CTS");
        let lp: Vec<_> = of_last.iter().filter(|s| s.word0 & LP_BIT != 0).collect();
        assert_eq!(lp.len(), 1, "{engine}: exactly one LP tuple");
        assert_eq!(lp[0].table, 1, "{engine}: the LP tuple belongs to table b");
    }
}

#[test]
fn missing_lp_bits_follow_algorithm_2() {
    // T1 updates a/1; T2 updates a/2 and b/2 (LP on b/2). Same worker.
    let (options, pool, db) = load_on_sim(EngineKind::Zen, 4, 0, |_| vec![0]);
    let (a, b) = (db.table_id("a").unwrap(), db.table_id("b").unwrap());
    let mut worker = db.worker(0).unwrap();
    let after_load = read_state_with(&mut worker, &db, &options.tables, &[]);
    worker.run(|tx| tx.put(a, &key(1), &big(1, 1))).unwrap();
    let after_t1 = read_state_with(&mut worker, &db, &options.tables, &[]);
    worker
        .run(|tx| {
            tx.put(a, &key(2), &big(2, 2))?;
            tx.put(b, &key(2), &[2])
        })
        .unwrap();
    let after_t2 = read_state_with(&mut worker, &db, &options.tables, &[]);
    drop(worker);
    drop(db);
    let image = pool.backend().persisted_image();
    let slots = heap_slots(&Pool::<Direct>::open_image(&image, &PmOptions::default()).unwrap(), &options.tables);
    let mut lp_slots: Vec<_> = slots.iter().filter(|s| s.word0 & LP_BIT != 0).collect();
    lp_slots.sort_by_key(|s| s.word0 & !LP_BIT);
    assert_eq!(lp_slots.len(), 3, "one LP tuple per transaction");
    let clear_lp = |image: &[u8], offset: u64| {
        let mut edited = image.to_vec();
        let at = offset as usize;
        let word = u64::from_le_bytes(edited[at..at + 8].try_into().unwrap());
        edited[at..at + 8].copy_from_slice(&(word & !LP_BIT).to_le_bytes());
        edited
    };
    // T2 without its LP bit: T2 never committed, both of its tuples go.
    let edited = clear_lp(&image, lp_slots[2].offset);
    let (state, pool, report) = recover_image::<Sim>(&options, &edited, |_| {}).unwrap();
    assert_eq!(state, after_t1);
    assert_eq!(report.heap_tuples_discarded, 2);
    // The discard is durable and recovery is idempotent.
    let (again, _, report) = recover_image::<Direct>(&options, &pool.backend().persisted_image(), |_| {}).unwrap();
    assert_eq!(again, after_t1);
    assert_eq!(report.heap_tuples_discarded, 0);
    // T1 without its LP bit but T2 with one: T1's Tx-CTS is below the
    // region's ts_commit, so it committed (its thread's later LP proves it).
    let edited = clear_lp(&image, lp_slots[1].offset);
    let (state, _, report) = recover_image::<Direct>(&options, &edited, |_| {}).unwrap();
    assert_eq!(state, after_t2);
    assert_eq!(report.heap_tuples_discarded, 0);
    // Only the load's LP bit left: what a crash leaves when T1 was a
    // pipelined commit whose LP line was flushed but not fenced and T2 was
    // persisting (its first fence, which would have covered T1's LP line,
    // not yet done): neither committed, both are discarded.
    let edited = clear_lp(&clear_lp(&image, lp_slots[1].offset), lp_slots[2].offset);
    let (state, _, report) = recover_image::<Direct>(&options, &edited, |_| {}).unwrap();
    assert_eq!(state, after_load);
    assert_eq!(report.heap_tuples_discarded, 3);
    // No LP bit at all: three transactions above the region's horizon, which
    // no crash leaves (one persists at a time, after at most one unfenced
    // commit): damage, refused naming the heap rather than discarding the
    // load's committed tuples.
    let edited = clear_lp(&edited, lp_slots[0].offset);
    match recover_image::<Direct>(&options, &edited, |_| {}) {
        Err(message) => assert!(message.contains("zen heap is damaged"), "{message}"),
        Ok((state, _, _)) => panic!("three lost LP bits were accepted (state after load: {})", state == after_load),
    }
}

#[test]
fn repeated_crashes_during_recovery_recover_the_same_state() {
    let (before, _, states, _, _, options) = run_one_transaction(EngineKind::Zen);
    // The crash right before the LP store, with every tuple durable: the
    // recovery has tuples to discard (writes to do).
    let state = states.iter().find(|s| s.label.contains("before LP")).unwrap();
    let image = state.persisted_image();
    let capture =
        |pool: &Pool<Sim>| pool.backend().set_capture(CapturePolicy { max_states: 1_000, ..CapturePolicy::all() });
    let (first, pool, report) = recover_image::<Sim>(&options, &image, capture).unwrap();
    assert_eq!(first, before);
    assert!(report.heap_tuples_discarded > 0);
    let level1 = pool.backend().take_crash_states();
    assert!(!level1.is_empty(), "recovery wrote nothing");
    let budget = ImageBudget { random_subsets: 4, random_prefixes: 3, exhaustive_limit: 64, all_but_lines: 8 };
    let mut checked = 0;
    for crash in &level1 {
        for image in crash.images(0xC2A5, budget) {
            let (second, pool, _) = recover_image::<Sim>(&options, &image.bytes, capture)
                .unwrap_or_else(|e| panic!("{}: {e}", image.description));
            assert_eq!(second, before, "crash during recovery at {}", image.description);
            checked += 1;
            for crash in pool.backend().take_crash_states().iter().take(3) {
                for image in crash.images(0xC2A6, ImageBudget { random_subsets: 2, ..budget }) {
                    let (third, _, _) = recover_image::<Direct>(&options, &image.bytes, |_| {})
                        .unwrap_or_else(|e| panic!("second crash at {}: {e}", image.description));
                    assert_eq!(third, before, "second crash during recovery at {}", image.description);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 4, "only {checked} images");
}

#[test]
fn out_of_space_is_typed_and_loses_nothing() {
    let pool_size = 1 << 20;
    let options = options(EngineKind::Zen, pool_size);
    let pool = memory_pool::<Direct>(&options);
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
    let a = db.table_id("a").unwrap();
    let mut worker = db.worker(0).unwrap();
    let mut inserted = 0u64;
    let error = loop {
        match worker.run(|tx| tx.put(a, &key(inserted), &big(3, inserted))) {
            Ok(_) => inserted += 1,
            Err(error) => break error,
        }
        assert!(inserted < 100_000, "never ran out of space");
    };
    assert!(matches!(error, DbError::OutOfSpace(_)), "{error}");
    assert!(inserted > 100);
    // Reads still work; the failed transaction left nothing behind.
    let count = worker
        .run_read_only(|tx| {
            Ok(tx
                .scan(a, (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded), ScanDirection::Forward, usize::MAX)?
                .len())
        })
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(count as u64, inserted);
    drop(worker);
    drop(db); // a crash, as far as the pool knows
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
    let state = read_state(&db, &options.tables, &[]);
    assert_eq!(state["a"].len() as u64, inserted);
    for n in 0..inserted {
        assert_eq!(state["a"][&key(n)[..]], big(3, n));
    }
}

#[test]
fn updates_reuse_space_and_deletes_stay_deleted_across_restarts() {
    for engine in [EngineKind::Zen, EngineKind::ZenNaiveAlloc] {
        let options = options(engine, 8 << 20);
        let pool = memory_pool::<Direct>(&options);
        let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for restart in 0..3u64 {
            let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
            let a = db.table_id("a").unwrap();
            let state = read_state(&db, &options.tables, &[]);
            let expected: BTreeMap<Vec<u8>, Vec<u8>> =
                model.iter().map(|(k, v)| (key(*k).to_vec(), v.clone())).collect();
            assert_eq!(state["a"], expected, "{engine}: restart {restart}");
            let mut worker = db.worker(1).unwrap();
            for round in 0..60u64 {
                worker
                    .run(|tx| {
                        for n in 0..40u64 {
                            let k = (n * 7 + round) % 120;
                            if (n + round + restart) % 5 == 0 {
                                tx.delete(a, &key(k))?;
                            } else {
                                tx.put(a, &key(k), &big(round as u8, k))?;
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
                if round % 10 == 9 {
                    // Let epochs pass so garbage and tombstones become
                    // reclaimable.
                    std::thread::sleep(Duration::from_millis(3));
                }
                for n in 0..40u64 {
                    let k = (n * 7 + round) % 120;
                    if (n + round + restart) % 5 == 0 {
                        model.remove(&k);
                    } else {
                        model.insert(k, big(round as u8, k));
                    }
                }
            }
            let stats = db.stats();
            // 2400 versions of at most 120 keys: the heap reuses its slots.
            assert!(stats.heap_chunks <= 12, "{engine}: heap grew to {} chunks: {stats:?}", stats.heap_chunks);
            assert!(stats.heap_sweeps > 0, "{engine}: no sweep ran: {stats:?}");
            drop(worker);
            if restart == 1 {
                db.close().unwrap();
            } // else: dropped without close, a crash
        }
    }
}

#[test]
fn fences_per_commit_follow_algorithm_1() {
    for engine in [EngineKind::Zen, EngineKind::ZenNaiveAlloc] {
        let options = options(engine, 4 << 20);
        let db = Database::open_on_pool(options.clone(), memory_pool::<Direct>(&options)).unwrap();
        let (a, b) = (db.table_id("a").unwrap(), db.table_id("b").unwrap());
        let mut worker = db.worker(0).unwrap();
        // Warm up: chunks allocated, no delete (no sweep).
        for round in 0..3u64 {
            worker
                .run(|tx| {
                    for n in 0..8 {
                        tx.put(a, &key(n), &big(round as u8, n))?;
                        tx.put(b, &key(n), &[1])?;
                    }
                    Ok(())
                })
                .unwrap();
        }
        pmtx_pm::reset_thread_counters();
        const TXNS: u64 = 50;
        for round in 0..TXNS {
            worker
                .run(|tx| {
                    tx.put(a, &key(round % 8), &big(9, round))?;
                    tx.put(b, &key(round % 8), &[2])
                })
                .unwrap();
        }
        let writes = pmtx_pm::thread_counters();
        pmtx_pm::reset_thread_counters();
        for round in 0..TXNS {
            worker.run_read_only(|tx| tx.get(a, &key(round % 8))).unwrap();
        }
        let reads = pmtx_pm::thread_counters();
        assert_eq!(reads.fences, 0, "{engine}: read-only transactions persist nothing");
        match engine {
            EngineKind::Zen => {
                assert_eq!(writes.fences, 2 * TXNS, "{engine}: two fences per writing commit");
                // A 334-byte tuple spans 6 lines at most, a 35-byte one 2.
                assert!(writes.lines_flushed <= 8 * TXNS, "{engine}: {writes:?}");
            }
            _ => assert!(writes.fences > 3 * TXNS, "{engine}: allocator persists per allocation: {writes:?}"),
        }
        eprintln!(
            "{engine}: per writing commit {:.2} fences, {:.2} lines",
            writes.fences as f64 / TXNS as f64,
            writes.lines_flushed as f64 / TXNS as f64
        );
    }
}

/// A committed tuple zeroed whole in a (formatted) heap chunk is not taken
/// for a free slot, whose word 0 holds the free marker: recovery refuses the
/// pool naming the zen heap, and erases nothing.
#[test]
fn a_committed_tuple_zeroed_whole_is_refused() {
    let (options, pool, db) = load_on_sim(EngineKind::Zen, 4, 1, |n| n.to_le_bytes().to_vec());
    drop(db);
    let image = pool.backend().persisted_image();
    let slots = heap_slots(&Pool::<Direct>::open_image(&image, &PmOptions::default()).unwrap(), &options.tables);
    // A tuple of table `a` (the LP tuple is on table `b`, first in the LP
    // order), so the region's commit horizon stays.
    let victim = slots.iter().find(|s| s.table == 0 && s.word0 & LP_BIT == 0).expect("a tuple of table a");
    let slot_size = (26 + 8 + 300u64).div_ceil(16) * 16;
    let mut edited = image.clone();
    edited[victim.offset as usize..(victim.offset + slot_size) as usize].fill(0);
    let reopened = Pool::<Direct>::open_image(&edited, &PmOptions::default()).unwrap();
    match Database::open_on_pool(options.clone(), Arc::new(reopened)) {
        Err(error) => {
            assert_eq!(error.damaged_structure(), Some(pmtx_pm::Structure::ZenHeap), "{error}");
            assert!(error.to_string().contains("zeroed"), "{error}");
        }
        Ok(_) => panic!("a committed tuple zeroed whole was accepted as a free slot"),
    }
    // The untouched image recovers every row.
    assert!(recover_image::<Direct>(&options, &image, |_| {}).is_ok());
}
