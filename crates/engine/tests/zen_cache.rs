//! The Met-Cache: a database many times larger than the DRAM budget stays
//! correct under concurrent readers and writers (reads of uncached tuples go
//! to the PM heap while writers supersede and the heap reuses slots), the
//! budget holds, and the statistics show hits, misses and evictions.

mod zen_support;

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, PoolLocation, ScanDirection, TableSchema, ZenOptions};
use pmtx_pm::{Direct, PmOptions, Pool};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use zen_support::splitmix;

const WORKERS: usize = 4;
const ROWS_PER_WORKER: u64 = 1_000;
const VALUE_LEN: usize = 200;
/// About 4 x 1000 x 264 bytes of entries would be needed to cache it all.
const CACHE_BYTES: u64 = 64 << 10;

fn options(cache_bytes: u64) -> DbOptions {
    let tables = vec![TableSchema::ordered("rows").max_value_len(VALUE_LEN).max_key_len(8)];
    let mut options = DbOptions::in_memory(EngineKind::Zen, tables);
    options.workers = WORKERS;
    options.pool = PoolLocation::InMemory { size: 16 << 20 };
    options.chunk_size = 256 << 10;
    options.epoch_interval = Duration::from_millis(1);
    options.zen = ZenOptions { cache_bytes, gc_batch: 16, ..ZenOptions::default() };
    options
}

fn key(worker: usize, n: u64) -> [u8; 8] {
    ((worker as u64) << 32 | n).to_be_bytes()
}

/// Value of version `version` of a row: self-describing, so a reader can
/// check that what it got belongs to the key and is not torn.
fn value(worker: usize, n: u64, version: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; VALUE_LEN];
    bytes[..8].copy_from_slice(&key(worker, n));
    bytes[8..16].copy_from_slice(&version.to_le_bytes());
    let fill = splitmix(version ^ n) as u8;
    bytes[16..].fill(fill);
    bytes
}

fn check_value(bytes: &[u8], key: &[u8]) -> u64 {
    assert_eq!(bytes.len(), VALUE_LEN);
    assert_eq!(&bytes[..8], key, "a read returned another row's value");
    let version = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let n = u64::from_be_bytes(key.try_into().unwrap()) & 0xFFFF_FFFF;
    assert!(bytes[16..].iter().all(|b| *b == splitmix(version ^ n) as u8), "torn value");
    version
}

fn run_larger_than_cache(cache_bytes: u64) {
    let options = options(cache_bytes);
    let pool = Arc::new(Pool::<Direct>::create_in_memory(16 << 20, 256 << 10, &PmOptions::default()).unwrap());
    let db = Arc::new(Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap());
    let rows = db.table_id("rows").unwrap();
    for worker in 0..WORKERS {
        db.worker(worker)
            .unwrap()
            .run(|tx| {
                for n in 0..ROWS_PER_WORKER {
                    tx.put(rows, &key(worker, n), &value(worker, n, 0))?;
                }
                Ok(())
            })
            .unwrap();
    }
    let barrier = Arc::new(Barrier::new(WORKERS));
    let models: Vec<BTreeMap<u64, u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|id| {
                let (db, barrier) = (Arc::clone(&db), Arc::clone(&barrier));
                scope.spawn(move || {
                    let mut worker = db.worker(id).unwrap();
                    let mut versions: BTreeMap<u64, u64> = (0..ROWS_PER_WORKER).map(|n| (n, 0)).collect();
                    let mut state = splitmix(id as u64 + 1);
                    barrier.wait();
                    for round in 1..=600u64 {
                        state = splitmix(state);
                        // Read three rows of anyone, update two own rows
                        // (read-modify-write of the version).
                        let others: Vec<(usize, u64)> = (0..3)
                            .map(|i| {
                                let r = splitmix(state ^ i);
                                ((r % WORKERS as u64) as usize, (r >> 8) % ROWS_PER_WORKER)
                            })
                            .collect();
                        let own = [state % ROWS_PER_WORKER, (state >> 20) % ROWS_PER_WORKER];
                        worker
                            .run(|tx| {
                                for &(w, n) in &others {
                                    let bytes = tx.get(rows, &key(w, n))?.expect("rows are never deleted");
                                    check_value(&bytes, &key(w, n));
                                }
                                for &n in &own {
                                    let bytes = tx.get(rows, &key(id, n))?.expect("own row");
                                    let version = check_value(&bytes, &key(id, n));
                                    tx.put(rows, &key(id, n), &value(id, n, version + 1))?;
                                }
                                Ok(())
                            })
                            .unwrap();
                        // Two updates of one row read their own write: +2.
                        for &n in &own {
                            *versions.get_mut(&n).unwrap() += 1;
                        }
                        if round % 100 == 0 {
                            // A full scan through the cache and the heap.
                            let seen = worker
                                .run_read_only(|tx| {
                                    tx.scan(
                                        rows,
                                        (Bound::Unbounded, Bound::Unbounded),
                                        ScanDirection::Forward,
                                        usize::MAX,
                                    )
                                })
                                .unwrap()
                                .committed()
                                .unwrap();
                            assert_eq!(seen.len() as u64, ROWS_PER_WORKER * WORKERS as u64);
                            for (k, v) in &seen {
                                check_value(v, k);
                            }
                        }
                    }
                    versions
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = db.stats();
    eprintln!(
        "cache {cache_bytes} B: hit rate {:?}, {stats:?}",
        stats.cache_hit_rate().map(|r| (r * 1000.0).round() / 1000.0)
    );
    if cache_bytes == 0 {
        assert_eq!(stats.cache_hits, 0);
        assert_eq!(stats.cache_bytes, 0);
    } else {
        assert!(stats.cache_bytes <= cache_bytes, "the Met-Cache exceeds its budget: {stats:?}");
        assert!(stats.cache_evictions > 0 && stats.cache_hits > 0, "{stats:?}");
        let rate = stats.cache_hit_rate().unwrap();
        assert!(rate < 0.9, "the database should not fit the cache: hit rate {rate}");
    }
    assert!(stats.cache_misses > 0);
    // Final contents, then after a crash and recovery.
    let check = |db: &Database| {
        let mut worker = db.worker(0).unwrap();
        for (id, model) in models.iter().enumerate() {
            let found = worker
                .run_read_only(|tx| {
                    let mut found = BTreeMap::new();
                    for n in 0..ROWS_PER_WORKER {
                        let bytes = tx.get(rows, &key(id, n))?.unwrap();
                        found.insert(n, check_value(&bytes, &key(id, n)));
                    }
                    Ok(found)
                })
                .unwrap()
                .committed()
                .unwrap();
            assert_eq!(&found, model, "worker {id}'s rows");
        }
    };
    check(&db);
    drop(Arc::into_inner(db).expect("workers done"));
    let db = Database::open_on_pool(options, pool).unwrap();
    let report = db.stats().recovery.unwrap();
    assert_eq!(report.heap_tuples_recovered, ROWS_PER_WORKER * WORKERS as u64);
    check(&db);
}

#[test]
fn database_larger_than_the_cache_stays_correct() {
    run_larger_than_cache(CACHE_BYTES);
}

#[test]
fn no_cache_reads_everything_from_the_heap() {
    run_larger_than_cache(0);
}

/// Transfers and audits with a tiny cache: audits read most balances from
/// PM slots while writers supersede them and the heap reuses slots.
#[test]
fn audits_are_serializable_with_a_tiny_cache() {
    const ACCOUNTS: u64 = 256;
    let mut options = options(2 << 10);
    options.tables = vec![TableSchema::ordered("accounts").max_value_len(8).max_key_len(8)];
    options.pool = PoolLocation::InMemory { size: 4 << 20 };
    let db = Arc::new(Database::open(options).unwrap());
    let accounts = db.table_id("accounts").unwrap();
    db.worker(0)
        .unwrap()
        .run(|tx| (0..ACCOUNTS).try_for_each(|a| tx.put(accounts, &a.to_be_bytes(), &100u64.to_le_bytes())))
        .unwrap();
    let stop = AtomicBool::new(false);
    let audits = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let mut writers = Vec::new();
        for id in 0..3usize {
            let (db, audits) = (&db, &audits);
            writers.push(scope.spawn(move || {
                let mut worker = db.worker(id).unwrap();
                let mut state = splitmix(id as u64 + 11);
                let start = std::time::Instant::now();
                // 2000 transfers, and more until an audit has completed
                // beside them (the auditor may not be scheduled before).
                for done in 0u64.. {
                    if done >= 2_000 {
                        if audits.load(Ordering::Relaxed) > 0 || start.elapsed() > Duration::from_secs(60) {
                            break;
                        }
                        // Three writers on two loaded cores can invalidate
                        // every attempt of the full-table audit: keep
                        // writing, but slower, until one audit commits.
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    state = splitmix(state);
                    let (from, to) = (state % ACCOUNTS, (state >> 16) % ACCOUNTS);
                    worker
                        .run(|tx| {
                            let a =
                                u64::from_le_bytes(tx.get(accounts, &from.to_be_bytes())?.unwrap().try_into().unwrap());
                            if a == 0 || from == to {
                                return Ok(());
                            }
                            let b =
                                u64::from_le_bytes(tx.get(accounts, &to.to_be_bytes())?.unwrap().try_into().unwrap());
                            tx.put(accounts, &from.to_be_bytes(), &(a - 1).to_le_bytes())?;
                            tx.put(accounts, &to.to_be_bytes(), &(b + 1).to_le_bytes())
                        })
                        .unwrap();
                }
            }));
        }
        let (db, stop, audits) = (&db, &stop, &audits);
        let auditor = scope.spawn(move || {
            let mut worker = db.worker(3).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let audit = worker.run_read_only(|tx| {
                    let rows = tx.scan(accounts, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1000)?;
                    Ok(rows.iter().map(|(_, v)| u64::from_le_bytes(v.as_slice().try_into().unwrap())).sum())
                });
                let total: u64 = match audit {
                    Ok(outcome) => outcome.committed().unwrap(),
                    // Starved by the writers' commits (OCC validates the
                    // whole scan): try again; the test requires one audit.
                    Err(DbError::TooManyAborts { .. }) => continue,
                    Err(error) => panic!("audit failed: {error}"),
                };
                assert_eq!(total, ACCOUNTS * 100, "an audit saw a non-serializable state");
                audits.fetch_add(1, Ordering::Relaxed);
            }
        });
        for writer in writers {
            writer.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        auditor.join().unwrap();
    });
    assert!(audits.load(Ordering::Relaxed) > 0, "no audit completed");
    let during = db.stats();
    assert!(during.cache_evictions > 0, "the writers never filled the tiny cache: {during:?}");
    // The cache's pressure, measured where scheduling cannot move it: one
    // audit alone reads all 256 balances, and a 2 KiB cache holds few.
    let total: u64 = db
        .worker(3)
        .unwrap()
        .run_read_only(|tx| {
            let rows = tx.scan(accounts, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1000)?;
            Ok(rows.iter().map(|(_, v)| u64::from_le_bytes(v.as_slice().try_into().unwrap())).sum())
        })
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(total, ACCOUNTS * 100);
    let after = db.stats();
    let (hits, misses) = (after.cache_hits - during.cache_hits, after.cache_misses - during.cache_misses);
    assert_eq!(hits + misses, ACCOUNTS, "one audit reads every balance once");
    assert!(misses > hits, "the tiny cache should miss mostly: {hits} hits, {misses} misses");
}
