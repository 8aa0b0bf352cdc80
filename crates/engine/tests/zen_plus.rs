//! `zen+`'s adaptive execution (zen-plus.txt §4.1.2): each trigger of the
//! exclusive stage is forced in turn; a transaction running beside it must
//! abort (or wait at its begin) and then finish, the privileged one must
//! complete with the right data, and the stage's maintenance must reclaim
//! the garbage that waited. Also: read-only transactions read a snapshot
//! without filling the Met-Cache, and the options are checked.

use pmtx_engine::{
    AbortReason, CcProtocol, Database, DbError, DbOptions, EngineKind, EngineStats, TableSchema, TxError,
    ZenPlusOptions,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ROWS: u64 = 256;
/// Long enough for any stage below on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);

fn key(row: u64) -> [u8; 8] {
    row.to_be_bytes()
}

fn value(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

fn options(configure: impl FnOnce(&mut DbOptions)) -> DbOptions {
    let mut options = DbOptions::in_memory(EngineKind::ZenPlus, vec![TableSchema::ordered("rows").max_value_len(64)]);
    options.workers = 2;
    configure(&mut options);
    options
}

fn load(db: &Database) {
    let rows = db.table_id("rows").unwrap();
    let mut worker = db.worker(0).unwrap();
    worker
        .run(|tx| {
            for row in 0..ROWS {
                tx.put(rows, &key(row), &[0u8; 64])?;
            }
            Ok(())
        })
        .unwrap();
}

fn counter(stats: &EngineStats, name: &str) -> u64 {
    stats.engine_counters.iter().find(|(counter, _)| *counter == name).map(|(_, value)| *value).unwrap_or_else(|| {
        panic!("no engine counter {name}: {:?}", stats.engine_counters);
    })
}

/// A short transaction on worker 1: its first attempt keeps reading a row
/// the privileged transaction does not touch, until an exclusive stage
/// aborts it (`AbortReason::Exclusive`); the retry waits for the stage at
/// its begin, then writes the row and commits. Returns its attempts.
fn bystander(db: Arc<Database>, start: Arc<Barrier>, running: Arc<AtomicBool>) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let rows = db.table_id("rows").unwrap();
        let mut worker = db.worker(1).unwrap();
        start.wait();
        let deadline = Instant::now() + PATIENCE;
        let mut attempt = 0;
        let finished = worker
            .run(|tx| {
                attempt += 1;
                running.store(true, Ordering::SeqCst);
                while attempt == 1 && Instant::now() < deadline {
                    tx.get(rows, &key(ROWS - 1))?;
                    std::thread::yield_now();
                }
                tx.put(rows, &key(ROWS - 1), &[1u8; 64])
            })
            .unwrap();
        assert!(worker.stats().aborts[AbortReason::Exclusive.index()] >= 1, "the bystander never met the stage");
        finished.attempts
    })
}

/// α: a writing transaction whose accesses outgrow its share of the
/// Met-Cache region enters the exclusive stage; its new versions beyond
/// the region go to the heap at once (direct NVM writes); the bystander
/// aborts and waits; the data is right afterwards.
#[test]
fn alpha_runs_a_large_writer_alone_with_direct_nvm_writes() {
    let db = Arc::new(
        Database::open(options(|options| {
            // 1 KiB regions: α at 512 bytes, a few rows.
            options.zen.cache_bytes = 2048;
            options.zen_plus.alpha_percent = 50;
        }))
        .unwrap(),
    );
    load(&db);
    let rows = db.table_id("rows").unwrap();
    let start = Arc::new(Barrier::new(2));
    let running = Arc::new(AtomicBool::new(false));
    let other = bystander(Arc::clone(&db), Arc::clone(&start), Arc::clone(&running));
    let mut worker = db.worker(0).unwrap();
    start.wait();
    while !running.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let before = db.stats();
    let finished = worker
        .run(|tx| {
            for row in 0..ROWS - 1 {
                let old = value(&tx.get(rows, &key(row))?.unwrap());
                tx.put(rows, &key(row), &[&(old + row + 7).to_le_bytes()[..], &[9u8; 56]].concat())?;
            }
            // Its own writes, in the heap already, read back.
            for row in 0..ROWS - 1 {
                assert_eq!(value(&tx.get(rows, &key(row))?.unwrap()), row + 7, "own write of row {row}");
            }
            Ok(())
        })
        .unwrap();
    let attempts = other.join().unwrap();
    assert!(attempts >= 2, "the bystander committed beside the stage");
    let after = db.stats();
    assert_eq!(counter(&after, "exclusive_entries_alpha") - counter(&before, "exclusive_entries_alpha"), 1);
    assert!(finished.attempts <= 2, "the privileged transaction completes: {} attempts", finished.attempts);
    let delta = |name: &str| counter(&after, name) - counter(&before, name);
    assert!(delta("direct_nvm_writes") >= ROWS / 2, "{:?}", after.engine_counters);
    assert!(delta("exclusive_aborts") >= 1);
    assert_eq!(delta("exclusive_maintenance_runs"), 1);
    let committed = worker
        .run_read_only(|tx| (0..ROWS).map(|row| tx.get(rows, &key(row))).collect::<Result<Vec<_>, TxError>>())
        .unwrap()
        .committed()
        .unwrap();
    for (row, bytes) in committed.iter().enumerate().take(ROWS as usize - 1) {
        assert_eq!(value(bytes.as_ref().unwrap()), row as u64 + 7, "row {row} after the commit");
    }
    assert_eq!(committed[ROWS as usize - 1].as_deref(), Some(&[1u8; 64][..]), "the bystander's retry committed");
    db.check_structure().unwrap();
}

/// A privileged transaction that rolls back erases its direct NVM writes
/// and ends its stage: nothing of it is visible, later transactions run.
#[test]
fn a_privileged_rollback_erases_its_direct_writes() {
    let db = Database::open(options(|options| {
        options.zen.cache_bytes = 2048;
        options.zen_plus.alpha_percent = 50;
    }))
    .unwrap();
    load(&db);
    let rows = db.table_id("rows").unwrap();
    let mut worker = db.worker(0).unwrap();
    let before = db.stats();
    let outcome = worker
        .run(|tx| {
            for row in 0..ROWS {
                tx.put(rows, &key(row), &[7u8; 64])?;
            }
            Err::<(), _>(tx.rollback())
        })
        .unwrap();
    assert!(outcome.committed().is_none());
    let stats = db.stats();
    let delta = |name: &str| counter(&stats, name) - counter(&before, name);
    assert!(delta("direct_nvm_writes") > 0);
    assert_eq!(counter(&before, "direct_nvm_writes_erased"), 0, "the load committed its direct writes");
    assert_eq!(delta("direct_nvm_writes_erased"), delta("direct_nvm_writes"));
    assert_eq!(delta("exclusive_maintenance_runs"), 1, "the stage ended with the transaction");
    let mut other = db.worker(1).unwrap();
    let seen = other.run_read_only(|tx| tx.get(rows, &key(3))).unwrap().committed().unwrap();
    assert_eq!(seen.as_deref(), Some(&[0u8; 64][..]));
    db.check_structure().unwrap();
}

/// γ: a transaction whose retries wasted more than γ tuple accesses runs
/// alone on its next attempt and commits; the bystander yields to it.
#[test]
fn gamma_runs_a_transaction_that_keeps_aborting_alone() {
    let db = Arc::new(Database::open(options(|options| options.zen_plus.gamma_tuples = 50)).unwrap());
    load(&db);
    let rows = db.table_id("rows").unwrap();
    let start = Arc::new(Barrier::new(2));
    let running = Arc::new(AtomicBool::new(false));
    let other = bystander(Arc::clone(&db), Arc::clone(&start), Arc::clone(&running));
    let mut worker = db.worker(0).unwrap();
    start.wait();
    while !running.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let mut attempt = 0;
    let finished = worker
        .run(|tx| {
            attempt += 1;
            for row in 0..10 {
                tx.get(rows, &key(row))?;
            }
            if attempt <= 5 {
                // Five attempts of 10 accesses wasted: the sixth passes γ
                // at its first access.
                return Err(TxError::Abort(AbortReason::ReadValidation));
            }
            tx.put(rows, &key(0), &[5u8; 64])
        })
        .unwrap();
    assert_eq!(finished.attempts, 6);
    let attempts = other.join().unwrap();
    assert!(attempts >= 2);
    let stats = db.stats();
    assert_eq!(counter(&stats, "exclusive_entries_gamma"), 1);
    assert_eq!(counter(&stats, "exclusive_entries_alpha") + counter(&stats, "exclusive_entries_beta"), 0);
}

/// β: a long read-only transaction holds the reclamation horizon back
/// while a writer supersedes tuples; once free space is below β and
/// garbage waits, the transaction that accessed the most (the reader)
/// enters the exclusive stage, the writer yields, and the stage's
/// maintenance frees the garbage. The reader saw one snapshot throughout
/// and filled no Met-Cache entry.
#[test]
fn beta_runs_the_largest_transaction_alone_and_reclaims_the_garbage() {
    let db = Arc::new(
        Database::open(options(|options| {
            // An 8 MiB pool with two heap chunks in use is below 99 % free: β
            // holds as soon as garbage waits. No cache, so reads go to the heap.
            options.pool = pmtx_engine::PoolLocation::InMemory { size: 8 << 20 };
            options.zen_plus.beta_percent = 99;
            options.zen.cache_bytes = 0;
        }))
        .unwrap(),
    );
    load(&db);
    let rows = db.table_id("rows").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, stop, written) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&written));
        std::thread::spawn(move || {
            let mut worker = db.worker(1).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                worker.run(|tx| tx.put(rows, &key(n % 8), &[&n.to_le_bytes()[..], &[2u8; 56]].concat())).unwrap();
                written.store(n, Ordering::SeqCst);
            }
            worker.stats().aborts[AbortReason::Exclusive.index()]
        })
    };
    let mut reader = db.worker(0).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let finished = reader
        .run_read_only(|tx| {
            let first = tx.get(rows, &key(0))?.unwrap();
            // Read until the stage was entered (the ticker measures space
            // every few milliseconds) and then a while longer, so the
            // writer meets it, re-checking the snapshot.
            let mut entered: Option<Instant> = None;
            while entered.is_none_or(|at| at.elapsed() < Duration::from_millis(50)) && Instant::now() < deadline {
                for row in 0..ROWS {
                    tx.get(rows, &key(row))?;
                }
                assert_eq!(tx.get(rows, &key(0))?.unwrap(), first, "the snapshot moved");
                if entered.is_none() && counter(&db.stats(), "exclusive_entries_beta") > 0 {
                    entered = Some(Instant::now());
                }
            }
            Ok(first)
        })
        .unwrap();
    assert_eq!(finished.attempts, 1, "a snapshot reader never aborts: {:?}", reader.stats().aborts);
    let stats = db.stats();
    stop.store(true, Ordering::SeqCst);
    let writer_aborts = writer.join().unwrap();
    assert!(written.load(Ordering::SeqCst) > 0);
    assert_eq!(counter(&stats, "exclusive_entries_beta"), 1, "{:?}", stats.engine_counters);
    assert!(counter(&stats, "exclusive_maintenance_runs") >= 1);
    assert!(counter(&stats, "exclusive_maintenance_slots") > 0, "the stage freed the garbage: {:?}", stats);
    assert!(counter(&stats, "snapshot_nvm_reads") >= ROWS, "reads of the snapshot went to the heap");
    // (A wait is counted when it ends, after the stage.)
    let waits = counter(&db.stats(), "exclusive_waits");
    assert!(writer_aborts + waits > 0, "the writer never yielded");
}

/// A read-only transaction reads at the oldest running snapshot: below a
/// writer that is still running, even after later commits of others.
#[test]
fn read_only_transactions_read_below_every_running_writer() {
    let db = Database::open(options(|options| options.workers = 3)).unwrap();
    load(&db);
    let rows = db.table_id("rows").unwrap();
    let mut long = db.worker(0).unwrap();
    let mut writer = db.worker(1).unwrap();
    let mut reader = db.worker(2).unwrap();
    // The long writer starts (its snapshot is now); a writer then commits.
    let finished = long
        .run_pipelined(0, false, |tx| {
            tx.get(rows, &key(10))?;
            writer.run(|tx2| tx2.put(rows, &key(20), &[4u8; 64])).unwrap();
            // A read-only transaction now reads below the long writer: not
            // the commit that came after it began.
            let seen = reader.run_read_only(|tx3| tx3.get(rows, &key(20))).unwrap().committed().unwrap();
            assert_eq!(seen.as_deref(), Some(&[0u8; 64][..]), "read below the running writer");
            tx.put(rows, &key(10), &[3u8; 64])
        })
        .unwrap();
    assert!(matches!(finished.0, pmtx_engine::Outcome::Committed(())));
    // With nobody running, the latest state.
    let seen = reader.run_read_only(|tx| tx.get(rows, &key(20))).unwrap().committed().unwrap();
    assert_eq!(seen.as_deref(), Some(&[4u8; 64][..]));
    let stats = db.stats();
    assert_eq!(counter(&stats, "snapshot_read_only_attempts"), 2);
}

/// Bad options are typed errors naming what is wrong.
#[test]
fn bad_options_are_refused() {
    let refused = |configure: fn(&mut DbOptions), needle: &str| {
        let error = Database::open(options(configure)).err().expect("refused");
        assert!(matches!(error, DbError::InvalidConfig(_)), "{error}");
        assert!(error.to_string().contains(needle), "{error}");
    };
    refused(|options| options.cc = CcProtocol::Silo, "takes cc=hekaton only");
    refused(|options| options.cc = CcProtocol::Cicada, "takes cc=hekaton only");
    refused(|options| options.zen_plus.alpha_percent = 0, "alpha");
    refused(|options| options.zen_plus.beta_percent = 101, "beta");
    refused(|options| options.zen_plus.partitions = 0, "partitions");
    refused(|options| options.zen_plus.delta = 1.5, "delta");
    refused(|options| options.zen_plus.eta = 0.5, "eta");
    refused(|options| options.zen_plus.numa_nodes = 3, "NUMA nodes");
    assert_eq!(EngineKind::ZenPlus.default_cc(), CcProtocol::Hekaton);
    assert_eq!(DbOptions::in_memory(EngineKind::ZenPlus, Vec::new()).cc, CcProtocol::Hekaton);
    assert_eq!(ZenPlusOptions::default().alpha_percent, 95);
}

/// Logical NUMA nodes: accesses are counted per partition, remaps move
/// the partitions each node's workers use to that node, and assignment
/// then sends a transaction to a worker of the node its keys belong to.
#[test]
fn soft_partitions_follow_the_accesses() {
    let db = Database::open(options(|options| {
        options.workers = 4;
        options.zen_plus.numa_nodes = 2;
        options.zen_plus.partitions = 64;
        options.zen_plus.remap_interval = Duration::from_millis(5);
    }))
    .unwrap();
    load(&db);
    let rows = db.table_id("rows").unwrap();
    let keys: Vec<[u8; 8]> = (0..64).map(key).collect();
    let request = |range: std::ops::Range<usize>| -> Vec<(pmtx_engine::TableId, &[u8])> {
        keys[range].iter().map(|key| (rows, &key[..])).collect()
    };
    // Worker 0 (node 0) uses rows 0..32, worker 3 (node 1) rows 32..64,
    // over many remap periods.
    let mut near = db.worker(0).unwrap();
    let mut far = db.worker(3).unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(150) || counter(&db.stats(), "numa_remaps") < 10 {
        for (worker, first) in [(&mut near, 0), (&mut far, 32)] {
            worker
                .run(|tx| {
                    for row in first..first + 32 {
                        tx.get(rows, &key(row))?;
                    }
                    Ok(())
                })
                .unwrap();
        }
        assert!(started.elapsed() < PATIENCE, "the ticker does not remap");
    }
    let low = db.assign_transaction(&request(0..32)).expect("zen+ on two nodes assigns");
    let high = db.assign_transaction(&request(32..64)).expect("zen+ on two nodes assigns");
    let stats = db.stats();
    assert!(
        low < 2 && high >= 2,
        "rows 0..32 went to worker {low}, rows 32..64 to {high}: {:?}",
        stats.engine_counters
    );
    assert!(counter(&stats, "numa_partitions_moved") > 0);
    assert!(counter(&stats, "numa_remaps") > 0);
    assert!(counter(&stats, "numa_assigned") >= 2);
    // One node: no assignment.
    let single = Database::open(options(|_| {})).unwrap();
    assert_eq!(single.assign_transaction(&request(0..32)), None);
}

/// A read-only transaction reads Met-Cache misses from the heap without
/// filling the cache; a read-write transaction reading the same fills it.
#[test]
fn snapshot_reads_do_not_fill_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plus.pool");
    let file_options = || {
        let mut options =
            DbOptions::new(EngineKind::ZenPlus, vec![TableSchema::ordered("rows").max_value_len(64)], &path);
        options.pool = pmtx_engine::PoolLocation::File { path: path.clone(), size: 16 << 20 };
        options.create_if_missing = true;
        options.chunk_size = 256 << 10;
        options.prefault_chunks = 0;
        options
    };
    let db = Database::open(file_options()).unwrap();
    load(&db);
    db.close().unwrap();
    // Reopened: the cache is empty.
    let db = Database::open(file_options()).unwrap();
    let rows = db.table_id("rows").unwrap();
    let mut worker = db.worker(0).unwrap();
    let read_all = |tx: &mut pmtx_engine::Transaction<'_>| {
        for row in 0..ROWS {
            tx.get(rows, &key(row))?.unwrap();
        }
        Ok(())
    };
    worker.run_read_only(read_all).unwrap();
    let stats = db.stats();
    assert_eq!(stats.cache_bytes, 0, "a snapshot reader filled the cache");
    assert_eq!(counter(&stats, "snapshot_nvm_reads"), ROWS);
    worker.run(read_all).unwrap();
    assert!(db.stats().cache_bytes > 0, "a read-write transaction fills it");
    drop(worker);
    db.close().unwrap();
}
