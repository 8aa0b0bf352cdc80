//! Limited scans are serializable on every engine, and waits end when the
//! database is crashed or closed.
//!
//! * `limited_scan_*`: the sequence of issue 12 through the public API: a
//!   table holds k1, k2, k3; T1 scans with limit 2 and, while its visitor
//!   handles k1, another worker deletes k2 and that commit completes. T1
//!   must never commit having returned only `[k1]` (no serial order gives
//!   that); it returns `[k1, k3]` (the delete first) or retries, or under a
//!   multi-version protocol `[k1, k2]` from its snapshot (T1 first).
//! * `scans_agree_with_a_maintained_count_*`: writers insert and delete rows
//!   and keep a count row in the same transactions; readers run a full scan,
//!   limited scans in both directions and read the count in one transaction;
//!   after each commit the results must agree with each other.
//! * `waiting_calls_end_when_*`: a thread waiting for durability returns
//!   promptly with `DbError::Closed` after `Database::crash`, and with its
//!   commit durable after `Database::close`.

use pmtx_engine::{CcProtocol, Database, DbError, DbOptions, EngineKind, Outcome, ScanDirection, TableSchema};
use rand::{Rng, SeedableRng};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// An engine with the concurrency-control protocol it runs.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Case(EngineKind, CcProtocol);

impl From<EngineKind> for Case {
    fn from(engine: EngineKind) -> Self {
        Case(engine, CcProtocol::Silo)
    }
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:cc={}", self.0, self.1)
    }
}

fn options(engine: Case) -> DbOptions {
    let mut options = DbOptions::in_memory(
        engine.0,
        vec![TableSchema::ordered("items").max_value_len(16), TableSchema::hashed("meta")],
    );
    options.cc = engine.1;
    options
}

/// T1's limited scan with a delete of k2 committed inside its visitor.
fn limited_scan_sees_a_serial_order(engine: Case, direction: ScanDirection) {
    // H-Store: the scan holds every partition, so the delete cannot run
    // inside it (a few attempts show it) and the scan sees all three rows.
    let partitioned = engine.1 == CcProtocol::HStore;
    let mut opts = options(engine);
    if partitioned {
        opts.max_attempts = 3;
    }
    let db = Database::open(opts).unwrap();
    let items = db.table_id("items").unwrap();
    let mut loader = db.worker(0).unwrap();
    loader
        .run(|tx| {
            for key in [b"k1", b"k2", b"k3"] {
                tx.put(items, key, b"v")?;
            }
            Ok(())
        })
        .unwrap();
    // In scan order the first row is k1 (forward) or k3 (reverse); the row
    // deleted meanwhile is always the middle one.
    let (first, last): (&[u8], &[u8]) =
        if direction == ScanDirection::Forward { (b"k1", b"k3") } else { (b"k3", b"k1") };
    let mut scanner = db.worker(1).unwrap();
    let mut deleter = db.worker(2).unwrap();
    let mut deleted = false;
    let finished = scanner
        .run(|tx| {
            let mut seen: Vec<Vec<u8>> = Vec::new();
            tx.scan_with(items, (Bound::Unbounded, Bound::Unbounded), direction, 2, |key, _| {
                if !deleted && key == first {
                    deleted = true;
                    let delete = deleter.run_pipelined(0, false, |tx2| tx2.delete(items, b"k2"));
                    if partitioned {
                        assert!(matches!(delete, Err(DbError::TooManyAborts { .. })), "{engine}: the delete waits");
                    } else {
                        let (outcome, _) = delete.unwrap();
                        assert!(matches!(outcome, Outcome::Committed(true)), "{engine}: the delete commits");
                    }
                }
                seen.push(key.to_vec());
                true
            })?;
            Ok(seen)
        })
        .unwrap();
    let seen = finished.committed().expect("committed");
    if engine.1.is_multiversion() || partitioned {
        // The scan reads a snapshot taken before the delete, or the delete
        // could not run: T1 is serialized before it.
        assert_eq!(seen, vec![first.to_vec(), b"k2".to_vec()], "{engine} {direction:?}: the snapshot holds k2");
    } else {
        assert_eq!(seen, vec![first.to_vec(), last.to_vec()], "{engine} {direction:?}: [k1] alone is no serial order");
    }
    deleter.wait_all_acknowledged(|_, _| {}).unwrap();
}

/// Writers keep `meta.count` equal to the rows of `items`; readers check a
/// full scan, limited scans from a random bound in both directions and the
/// count against each other, after each committed transaction.
fn scans_agree_with_a_maintained_count(engine: Case) {
    const KEYS: u64 = 12;
    const WRITERS: usize = 2;
    const READERS: usize = 2;
    let mut opts = options(engine);
    opts.workers = WRITERS + READERS + 1;
    // The synchronous logs fill the small test pool within a second unless
    // checkpoints free them.
    opts.checkpoint_interval = Some(Duration::from_millis(100));
    let db = Arc::new(Database::open(opts).unwrap());
    let items = db.table_id("items").unwrap();
    let meta = db.table_id("meta").unwrap();
    let seed = 0x5CA4_u64 ^ engine.0 as u64 ^ ((engine.1 as u64) << 8);
    let key = |k: u64| k.to_be_bytes();
    db.worker(0).unwrap().run(|tx| tx.put(meta, b"count", &0u64.to_le_bytes())).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(WRITERS + READERS));
    // Each thread's count so far, so the run lasts until every thread made
    // its share of progress, however loaded the machine.
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS + READERS).map(|_| AtomicU64::new(0)).collect());
    let mut handles = Vec::new();
    for writer in 0..WRITERS {
        let (db, stop, start) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&start));
        let progress = Arc::clone(&progress);
        handles.push(std::thread::spawn(move || {
            let mut worker = db.worker(1 + writer).unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ writer as u64);
            start.wait();
            let mut commits = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = rng.gen_range(0..KEYS);
                let finished = worker
                    .run(|tx| {
                        let count = u64::from_le_bytes(tx.get(meta, b"count")?.unwrap().try_into().unwrap());
                        let change: i64 = if tx.get(items, &key(k))?.is_some() {
                            tx.delete(items, &key(k))?;
                            -1
                        } else {
                            tx.insert(items, &key(k), b"row")?;
                            1
                        };
                        tx.put(meta, b"count", &(count as i64 + change).to_le_bytes())?;
                        Ok(())
                    })
                    .unwrap();
                commits += finished.committed().is_some() as u64;
                progress[writer].store(commits, Ordering::Relaxed);
            }
            commits
        }));
    }
    for reader in 0..READERS {
        let (db, stop, start) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&start));
        let progress = Arc::clone(&progress);
        handles.push(std::thread::spawn(move || {
            let mut worker = db.worker(1 + WRITERS + reader).unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xFF ^ reader as u64);
            start.wait();
            let mut checked = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let bound = key(rng.gen_range(0..KEYS));
                let limit = rng.gen_range(1..6usize);
                let finished = worker
                    .run_read_only(|tx| {
                        // Limited scans first, then the full scan and the count:
                        // a row a limited scan dropped is then read as the
                        // others saw it, so only the limited result can be
                        // wrong (and must not be).
                        let after: Vec<Vec<u8>> = tx
                            .scan(
                                items,
                                (Bound::Included(&bound[..]), Bound::Unbounded),
                                ScanDirection::Forward,
                                limit,
                            )?
                            .into_iter()
                            .map(|(k, _)| k)
                            .collect();
                        let before: Vec<Vec<u8>> = tx
                            .scan(
                                items,
                                (Bound::Unbounded, Bound::Excluded(&bound[..])),
                                ScanDirection::Reverse,
                                limit,
                            )?
                            .into_iter()
                            .map(|(k, _)| k)
                            .collect();
                        let all: Vec<Vec<u8>> = tx
                            .scan(items, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX)?
                            .into_iter()
                            .map(|(k, _)| k)
                            .collect();
                        let count = u64::from_le_bytes(tx.get(meta, b"count")?.unwrap().try_into().unwrap());
                        Ok((count, all, after, before))
                    })
                    .unwrap();
                let Some((count, all, after, before)) = finished.committed() else { continue };
                assert_eq!(all.len() as u64, count, "{engine}: full scan vs count (seed {seed:#x})");
                let expect_after: Vec<Vec<u8>> =
                    all.iter().filter(|k| k.as_slice() >= &bound[..]).take(limit).cloned().collect();
                let expect_before: Vec<Vec<u8>> =
                    all.iter().rev().filter(|k| k.as_slice() < &bound[..]).take(limit).cloned().collect();
                assert_eq!(after, expect_after, "{engine}: forward limit {limit} (seed {seed:#x})");
                assert_eq!(before, expect_before, "{engine}: reverse limit {limit} (seed {seed:#x})");
                checked += 1;
                progress[WRITERS + reader].store(checked, Ordering::Relaxed);
            }
            checked
        }));
    }
    // At least a second of concurrent work, and on until every thread has
    // done its share (a thread that panicked ends the wait, its join
    // reports it; the bound only keeps a stuck run from hanging the suite).
    let started = Instant::now();
    let enough = |thread: usize, count: u64| if thread < WRITERS { count > 20 } else { count > 5 };
    while started.elapsed() < Duration::from_millis(1000)
        || !progress.iter().enumerate().all(|(thread, count)| enough(thread, count.load(Ordering::Relaxed)))
    {
        if handles.iter().any(|handle| handle.is_finished()) || started.elapsed() > Duration::from_secs(600) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = handles.into_iter().map(|handle| handle.join().unwrap()).collect();
    assert!(counts[..WRITERS].iter().all(|&c| c > 20), "{engine}: writers made progress: {counts:?}");
    assert!(counts[WRITERS..].iter().all(|&c| c > 5), "{engine}: readers checked: {counts:?}");
}

/// A thread inside `run`, waiting for durability, returns promptly when
/// another thread crashes the database (group commit with a long epoch
/// never acknowledges meanwhile); every engine returns from `run` at all.
fn waiting_calls_end_when_crashed(engine: Case) {
    let mut opts = options(engine);
    opts.epoch_interval = Duration::from_secs(30);
    opts.wbl.window = Duration::from_secs(30);
    let db = Arc::new(Database::open(opts).unwrap());
    let items = db.table_id("items").unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (db, ran) = (Arc::clone(&db), Arc::clone(&ran));
        std::thread::spawn(move || {
            let mut worker = db.worker(0).unwrap();
            let started = Instant::now();
            let result = worker.run(|tx| {
                ran.store(true, Ordering::Release);
                tx.put(items, b"k", b"v")
            });
            (result.map(|_| ()), started.elapsed())
        })
    };
    wait_until_committing(&ran);
    db.crash().unwrap();
    // The join returning at all shows the waiter returned on the crash: its
    // 30 s epoch (wbl: window) can no longer close once the crash stopped
    // the ticker, as the `Closed` below confirms.
    let (result, _) = waiter.join().unwrap();
    if matches!(engine.0, EngineKind::GroupCommit | EngineKind::Wbl) {
        // Its epoch (wbl: window) never closed before the crash.
        assert!(matches!(result, Err(DbError::Closed)), "{engine}: {result:?}");
    } else {
        // Synchronous and log-free engines acknowledge at commit.
        assert!(result.is_ok(), "{engine}: {result:?}");
    }
}

/// Waits until the waiter's transaction body has run, then a little longer
/// so that its commit is waiting for durability. (A fixed sleep was not
/// enough on two loaded cores: the waiter had not started when the
/// database went away.)
fn wait_until_committing(ran: &AtomicBool) {
    let started = Instant::now();
    while !ran.load(Ordering::Acquire) {
        assert!(started.elapsed() < Duration::from_secs(60), "the waiter never ran its transaction");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(100));
}

/// A clean close makes the waited-for commit durable: the waiter returns Ok.
fn waiting_calls_end_when_closed(engine: Case) {
    let mut opts = options(engine);
    opts.epoch_interval = Duration::from_secs(30);
    opts.wbl.window = Duration::from_secs(30);
    let db = Database::open(opts).unwrap();
    let items = db.table_id("items").unwrap();
    let mut worker = db.worker(0).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let waiter = std::thread::spawn(move || {
        worker
            .run(|tx| {
                flag.store(true, Ordering::Release);
                tx.put(items, b"k", b"v")
            })
            .map(|_| ())
    });
    wait_until_committing(&ran);
    db.close().unwrap();
    let result = waiter.join().unwrap();
    assert!(result.is_ok(), "{engine}: {result:?}");
}

macro_rules! per_engine {
    ($($module:ident: $engine:expr;)*) => {$(
        mod $module {
            use super::*;
            #[test]
            fn limited_scan_forward() {
                limited_scan_sees_a_serial_order($engine.into(), ScanDirection::Forward);
            }
            #[test]
            fn limited_scan_reverse() {
                limited_scan_sees_a_serial_order($engine.into(), ScanDirection::Reverse);
            }
            #[test]
            fn scans_agree_with_a_maintained_count() {
                super::scans_agree_with_a_maintained_count($engine.into());
            }
            #[test]
            fn waiting_calls_end_when_crashed() {
                super::waiting_calls_end_when_crashed($engine.into());
            }
            #[test]
            fn waiting_calls_end_when_closed() {
                super::waiting_calls_end_when_closed($engine.into());
            }
        }
    )*};
}

per_engine! {
    silo: EngineKind::Silo;
    group_commit: EngineKind::GroupCommit;
    dbxn: EngineKind::Dbxn;
    dbxn_nvm: EngineKind::DbxnNvm;
    dbx_naive: EngineKind::DbxNaive;
    sp3: EngineKind::Sp3;
    nvm_tx: EngineKind::NvmTx;
    mmdb: EngineKind::Mmdb;
    // The Zen paper runs MMDB over Cicada.
    cicada_mmdb: Case(EngineKind::Mmdb, CcProtocol::Cicada);
    wbl: EngineKind::Wbl;
    // ... and WBL.
    cicada_wbl: Case(EngineKind::Wbl, CcProtocol::Cicada);
    zen: EngineKind::Zen;
    zen_naive_alloc: EngineKind::ZenNaiveAlloc;
    // Every other protocol on DRAM records, a durable DRAM engine and Zen.
    occ_dram: Case(EngineKind::Silo, CcProtocol::Occ);
    occ_zen: Case(EngineKind::Zen, CcProtocol::Occ);
    tictoc_dram: Case(EngineKind::Silo, CcProtocol::TicToc);
    tictoc_durable: Case(EngineKind::GroupCommit, CcProtocol::TicToc);
    tictoc_zen: Case(EngineKind::Zen, CcProtocol::TicToc);
    hekaton_dram: Case(EngineKind::Silo, CcProtocol::Hekaton);
    hekaton_durable: Case(EngineKind::Dbxn, CcProtocol::Hekaton);
    hekaton_zen: Case(EngineKind::Zen, CcProtocol::Hekaton);
    mvcc_dram: Case(EngineKind::Silo, CcProtocol::Mvcc);
    mvcc_durable: Case(EngineKind::GroupCommit, CcProtocol::Mvcc);
    mvcc_zen: Case(EngineKind::Zen, CcProtocol::Mvcc);
    cicada_dram: Case(EngineKind::Silo, CcProtocol::Cicada);
    cicada_durable: Case(EngineKind::Dbxn, CcProtocol::Cicada);
    cicada_zen: Case(EngineKind::Zen, CcProtocol::Cicada);
    hstore_dram: Case(EngineKind::Silo, CcProtocol::HStore);
    hstore_durable: Case(EngineKind::GroupCommit, CcProtocol::HStore);
    hstore_zen: Case(EngineKind::Zen, CcProtocol::HStore);
    no_wait_dram: Case(EngineKind::Silo, CcProtocol::NoWait);
    no_wait_durable: Case(EngineKind::GroupCommit, CcProtocol::NoWait);
    no_wait_zen: Case(EngineKind::Zen, CcProtocol::NoWait);
    wait_die_dram: Case(EngineKind::Silo, CcProtocol::WaitDie);
    wait_die_durable: Case(EngineKind::Dbxn, CcProtocol::WaitDie);
    wait_die_zen: Case(EngineKind::Zen, CcProtocol::WaitDie);
    dl_detect_dram: Case(EngineKind::Silo, CcProtocol::DlDetect);
    dl_detect_durable: Case(EngineKind::GroupCommit, CcProtocol::DlDetect);
    dl_detect_zen: Case(EngineKind::Zen, CcProtocol::DlDetect);
}
