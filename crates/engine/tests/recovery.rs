//! Recovery of the `group-commit` engine outside the crash simulator: log
//! truncation by checkpoints keeps log space bounded, running out of space is
//! a typed error that loses nothing acknowledged, the clean-shutdown fast
//! path, crash (drop without close) recovery of a file pool, and bad inputs
//! (another schema, a corrupted checkpoint).

mod support;

use pmtx_engine::internals::pool_layout::CHECKPOINT_CHUNK_KIND;
use pmtx_engine::{Database, DbError, DbOptions, EngineKind, PoolLocation, TableSchema};
use pmtx_pm::{BackendKind, Direct, PmBackend, PmOptions, Pool};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::table_rows;

const CHUNK: u64 = pmtx_pm::layout::MIN_CHUNK_SIZE;
const KEYS: u64 = 64;
const VALUE_LEN: usize = 900;

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("items").max_value_len(1024), TableSchema::hashed("meta").max_value_len(64)]
}

fn memory_options(pool_size: u64, checkpoint_interval: Option<Duration>) -> DbOptions {
    let mut options = DbOptions::in_memory(EngineKind::GroupCommit, tables());
    options.workers = 2;
    options.pool = PoolLocation::InMemory { size: pool_size };
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(2);
    options.checkpoint_interval = checkpoint_interval;
    options
}

fn file_options(path: &Path) -> DbOptions {
    let mut options = DbOptions::new(EngineKind::GroupCommit, tables(), path);
    options.workers = 2;
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: 8 << 20 };
    options.create_if_missing = true;
    options.backend = BackendKind::Direct;
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options
}

fn item_key(key: u64) -> [u8; 8] {
    key.to_be_bytes()
}

/// The value of the `n`-th write of worker `worker`: recognisable and large.
fn item_value(worker: usize, n: u64) -> Vec<u8> {
    let mut value = vec![(n % 251) as u8; VALUE_LEN];
    value[..8].copy_from_slice(&n.to_le_bytes());
    value[8] = worker as u8;
    value
}

/// Worker `worker` writes `count` large values to its half of the keys
/// (pipelined, draining acknowledgements). Returns the last acknowledged
/// write number per key, or the error that stopped it.
fn write_items(
    db: &Database,
    worker_id: usize,
    count: u64,
    acked: &mut BTreeMap<u64, u64>,
    on_progress: &mut dyn FnMut(),
) -> Result<(), DbError> {
    let items = db.table_id("items").unwrap();
    let mut worker = db.worker(worker_id).unwrap();
    let half = KEYS / 2;
    let key_of = |n: u64| worker_id as u64 * half + n % half;
    let mut result = Ok(());
    for n in 1..=count {
        let value = item_value(worker_id, n);
        let key = key_of(n);
        if let Err(error) = worker.run_pipelined(n as u32, false, |tx| tx.put(items, &item_key(key), &value)) {
            result = Err(error);
            break;
        }
        worker.drain_acknowledged(|tag, _| {
            acked.insert(key_of(tag as u64), tag as u64);
        });
        // At most 32 commits in flight: the run spans many epochs and
        // checkpoints instead of racing ahead of them.
        if worker.pending_acknowledgements() >= 32 {
            worker
                .wait_all_acknowledged(|tag, _| {
                    acked.insert(key_of(tag as u64), tag as u64);
                })
                .expect("acknowledged");
        }
        if n % 256 == 0 {
            on_progress();
        }
    }
    if result.is_ok() {
        worker
            .wait_all_acknowledged(|tag, _| {
                acked.insert(key_of(tag as u64), tag as u64);
            })
            .expect("acknowledged");
    } else {
        // What was committed before the failure is still acknowledged once
        // durable (the ticker keeps running).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while worker.pending_acknowledgements() > 0 && std::time::Instant::now() < deadline {
            worker.drain_acknowledged(|tag, _| {
                acked.insert(key_of(tag as u64), tag as u64);
            });
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    result
}

/// Every acknowledged write is present: each key holds its last acknowledged
/// value or a later one of the same worker.
fn assert_acked_present(db: &Database, worker_id: usize, acked: &BTreeMap<u64, u64>) {
    let items = table_rows(db, "items");
    for (&key, &n) in acked {
        let value = items.get(&item_key(key)[..]).unwrap_or_else(|| panic!("key {key} (write {n}) missing"));
        let found = u64::from_le_bytes(value[..8].try_into().unwrap());
        assert!(found >= n, "key {key}: acknowledged write {n}, found older write {found}");
        assert_eq!(value[8] as usize, worker_id);
        assert_eq!(*value, item_value(worker_id, found), "key {key}: value of write {found} is damaged");
    }
}

const LONG_RUN_TXNS: u64 = 10_000; // per worker, 2 workers
const LONG_RUN_POOL: u64 = 16 << 20;

#[test]
fn checkpoints_keep_log_space_bounded() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(LONG_RUN_POOL, CHUNK, &PmOptions::default()).unwrap());
    let total_chunks = pool.geometry().chunk_count;
    let db = Arc::new(
        Database::open_on_pool(memory_options(LONG_RUN_POOL, Some(Duration::from_millis(20))), Arc::clone(&pool))
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let max_log_bytes = Arc::new(AtomicU64::new(0));
    let min_free = Arc::new(AtomicU64::new(u64::MAX));
    let sampler = {
        let (db, pool, stop, max_log_bytes, min_free) =
            (Arc::clone(&db), Arc::clone(&pool), Arc::clone(&stop), Arc::clone(&max_log_bytes), Arc::clone(&min_free));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                max_log_bytes.fetch_max(db.stats().log_bytes, Ordering::SeqCst);
                min_free.fetch_min(pool.free_chunks(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let handles: Vec<_> = (0..2)
        .map(|id| {
            let (db, max_log_bytes, min_free, pool) =
                (Arc::clone(&db), Arc::clone(&max_log_bytes), Arc::clone(&min_free), Arc::clone(&pool));
            std::thread::spawn(move || {
                let mut acked = BTreeMap::new();
                let mut sample = || {
                    max_log_bytes.fetch_max(db.stats().log_bytes, Ordering::SeqCst);
                    min_free.fetch_min(pool.free_chunks(), Ordering::SeqCst);
                };
                write_items(&db, id, LONG_RUN_TXNS, &mut acked, &mut sample).expect("no error with checkpoints on");
                acked
            })
        })
        .collect();
    let acked: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let stats = db.stats();
    let written = 2 * LONG_RUN_TXNS * VALUE_LEN as u64;
    eprintln!(
        "log bound: {} checkpoints, {} segments freed, max log {} KiB, min free chunks {} of {}; {} KiB logged",
        stats.checkpoints,
        stats.log_segments_freed,
        max_log_bytes.load(Ordering::SeqCst) >> 10,
        min_free.load(Ordering::SeqCst),
        total_chunks,
        written >> 10
    );
    assert!(written > LONG_RUN_POOL, "the run must log more than the pool holds");
    assert!(stats.checkpoints >= 2, "periodic checkpoints ran: {}", stats.checkpoints);
    assert!(stats.log_segments_freed > 0);
    let bound = LONG_RUN_POOL / 2;
    assert!(
        max_log_bytes.load(Ordering::SeqCst) <= bound,
        "log grew to {} bytes (bound {bound})",
        max_log_bytes.load(Ordering::SeqCst)
    );
    assert!(
        min_free.load(Ordering::SeqCst) >= total_chunks / 2,
        "free chunks fell to {}",
        min_free.load(Ordering::SeqCst)
    );
    for (id, acked) in acked.iter().enumerate() {
        assert_acked_present(&db, id, acked);
    }
    // Crash (drop without close) and recover: the data is intact.
    drop(Arc::into_inner(db).unwrap());
    let db = Database::open_on_pool(memory_options(LONG_RUN_POOL, None), Arc::clone(&pool)).unwrap();
    for (id, acked) in acked.iter().enumerate() {
        assert_acked_present(&db, id, acked);
    }
}

#[test]
fn log_space_pressure_triggers_a_checkpoint_before_the_interval() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(LONG_RUN_POOL, CHUNK, &PmOptions::default()).unwrap());
    // The interval alone would never checkpoint during this run.
    let options = memory_options(LONG_RUN_POOL, Some(Duration::from_secs(3600)));
    let db = Arc::new(Database::open_on_pool(options, Arc::clone(&pool)).unwrap());
    let handles: Vec<_> = (0..2)
        .map(|id| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut acked = BTreeMap::new();
                write_items(&db, id, LONG_RUN_TXNS, &mut acked, &mut || {}).expect("pressure checkpoints free the log");
                acked
            })
        })
        .collect();
    let acked: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let stats = db.stats();
    assert!(2 * LONG_RUN_TXNS * VALUE_LEN as u64 > LONG_RUN_POOL, "the run must log more than the pool holds");
    assert!(stats.checkpoints >= 1 && stats.log_segments_freed > 0, "{stats:?}");
    for (id, acked) in acked.iter().enumerate() {
        assert_acked_present(&db, id, acked);
    }
}

#[test]
fn without_checkpoints_the_log_runs_out_of_space_cleanly() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(LONG_RUN_POOL, CHUNK, &PmOptions::default()).unwrap());
    let db = Arc::new(Database::open_on_pool(memory_options(LONG_RUN_POOL, None), Arc::clone(&pool)).unwrap());
    let handles: Vec<_> = (0..2)
        .map(|id| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut acked = BTreeMap::new();
                let result = write_items(&db, id, LONG_RUN_TXNS, &mut acked, &mut || {});
                (result, acked)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (id, (result, acked)) in results.iter().enumerate() {
        match result {
            Err(DbError::OutOfSpace(message)) => eprintln!("worker {id}: out of space as expected: {message}"),
            other => panic!("worker {id}: expected DbError::OutOfSpace, got {other:?}"),
        }
        assert!(!acked.is_empty());
        assert_acked_present(&db, id, acked);
    }
    // Crash on the full pool (dropped without close): recovery needs room
    // for its checkpoint before it may drop the old log, and has it.
    drop(Arc::into_inner(db).unwrap());
    let db = Database::open_on_pool(memory_options(LONG_RUN_POOL, None), Arc::clone(&pool))
        .expect("a full pool reopens after a crash");
    let report = db.stats().recovery.unwrap();
    assert!(report.log_records_applied > 0, "{report:?}");
    for (id, (_, acked)) in results.iter().enumerate() {
        assert_acked_present(&db, id, acked);
    }
    // Recovery dropped the old log: the database takes writes again, and a
    // clean close and reopen keep everything.
    assert!(pool.free_chunks() > pool.geometry().chunk_count / 2);
    let items = db.table_id("items").unwrap();
    db.worker(0).unwrap().run(|tx| tx.put(items, &item_key(0), &item_value(0, 1_000_000))).unwrap();
    db.close().unwrap();
    let db = Database::open_on_pool(memory_options(LONG_RUN_POOL, None), Arc::clone(&pool)).unwrap();
    assert_eq!(table_rows(&db, "items")[&item_key(0)[..]], item_value(0, 1_000_000));
    let mut acked_1 = results[1].1.clone();
    acked_1.retain(|key, _| *key >= KEYS / 2);
    assert_acked_present(&db, 1, &acked_1);
}

/// Writes `count` values to `items` and one `meta` row, synchronously.
fn write_some(db: &Database, worker_id: usize, first: u64, count: u64) {
    let items = db.table_id("items").unwrap();
    let meta = db.table_id("meta").unwrap();
    let mut worker = db.worker(worker_id).unwrap();
    for n in first..first + count {
        worker
            .run(|tx| {
                tx.put(items, &item_key(n % KEYS), &item_value(worker_id, n))?;
                tx.put(meta, b"last", &n.to_le_bytes())
            })
            .unwrap();
    }
}

fn expected_after(first: u64, count: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rows = BTreeMap::new();
    for n in first..first + count {
        rows.insert(item_key(n % KEYS).to_vec(), item_value(0, n));
    }
    rows
}

#[test]
fn clean_shutdown_takes_the_fast_path_and_a_crash_replays_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    // Life 1: create, write, close cleanly.
    let db = Database::open(file_options(&path)).unwrap();
    let first = db.stats().recovery.expect("a recovery report at every open");
    assert_eq!(first.log_records_scanned, 0);
    write_some(&db, 0, 1, 100);
    db.close().unwrap();
    // Life 2: the fast path.
    let db = Database::open(file_options(&path)).unwrap();
    let report = db.stats().recovery.unwrap();
    assert!(report.clean_shutdown, "closed cleanly: {report:?}");
    assert_eq!(report.log_records_scanned, 0, "a clean close leaves no log to scan: {report:?}");
    assert!(report.checkpoint_rows > 0, "{report:?}");
    assert_eq!(table_rows(&db, "items"), expected_after(1, 100));
    assert_eq!(table_rows(&db, "meta")[&b"last"[..]], 100u64.to_le_bytes());
    // Life 2 continues and then "crashes": dropped without close.
    write_some(&db, 1, 101, 50);
    drop(db);
    // Life 3: full recovery replays the log; every acknowledged commit is there.
    let db = Database::open(file_options(&path)).unwrap();
    let report = db.stats().recovery.unwrap();
    assert!(!report.clean_shutdown, "dropped without close: {report:?}");
    assert!(report.log_records_scanned >= 50, "{report:?}");
    assert!(report.log_records_applied >= 50, "{report:?}");
    let mut expected = expected_after(1, 100);
    for n in 101..151 {
        expected.insert(item_key(n % KEYS).to_vec(), item_value(1, n));
    }
    assert_eq!(table_rows(&db, "items"), expected);
    assert_eq!(table_rows(&db, "meta")[&b"last"[..]], 150u64.to_le_bytes());
    // Recovery wrote a fresh checkpoint and dropped the old log: a second
    // crash right away recovers the same state without replaying anything.
    drop(db);
    let db = Database::open(file_options(&path)).unwrap();
    let report = db.stats().recovery.unwrap();
    assert!(!report.clean_shutdown);
    assert_eq!(report.log_records_scanned, 0, "{report:?}");
    assert_eq!(table_rows(&db, "items"), expected);
    db.close().unwrap();
}

#[test]
fn another_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let db = Database::open(file_options(&path)).unwrap();
    write_some(&db, 0, 1, 5);
    db.close().unwrap();
    let mut other = file_options(&path);
    other.tables = vec![TableSchema::ordered("items").max_value_len(1024)];
    match Database::open(other) {
        Err(DbError::SchemaMismatch(message)) => eprintln!("refused as expected: {message}"),
        Err(error) => panic!("expected SchemaMismatch, got {error:?}"),
        Ok(_) => panic!("a pool of another schema opened"),
    }
    let mut other = file_options(&path);
    other.tables =
        vec![TableSchema::ordered("items").max_value_len(512), TableSchema::hashed("meta").max_value_len(64)];
    assert!(matches!(Database::open(other), Err(DbError::SchemaMismatch(_))));
    // The refusal changed nothing.
    let db = Database::open(file_options(&path)).unwrap();
    assert_eq!(table_rows(&db, "items"), expected_after(1, 5));
    db.close().unwrap();
}

/// Creates a closed pool holding a checkpoint, then damages it with
/// `corrupt(pool, first checkpoint chunk offset)`; opening must fail with
/// `DbError::CorruptStructure` naming the checkpoint.
fn corrupted_checkpoint_is_refused(what: &str, corrupt: impl FnOnce(&Pool<Direct>, u64)) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let db = Database::open(file_options(&path)).unwrap();
    write_some(&db, 0, 1, 20);
    db.close().unwrap();
    {
        let pool = Pool::<Direct>::open(&path, &PmOptions::default()).unwrap();
        let chunk = pool
            .owned_chunks()
            .into_iter()
            .find(|(_, owner)| owner.kind() == CHECKPOINT_CHUNK_KIND && owner.thread() == 0)
            .map(|(chunk, _)| chunk)
            .expect("a closed pool holds a checkpoint");
        corrupt(&pool, pool.chunk_offset(chunk));
        pool.close();
    }
    match Database::open(file_options(&path)) {
        Err(error @ DbError::CorruptStructure { structure: pmtx_pm::Structure::Checkpoint, .. }) => {
            eprintln!("{what}: refused as expected: {error}")
        }
        Err(error) => panic!("{what}: expected a damaged checkpoint, got {error:?}"),
        Ok(_) => panic!("{what}: a corrupted checkpoint was accepted"),
    }
}

fn flip(pool: &Pool<Direct>, offset: u64) {
    let mut byte = [0u8; 1];
    pool.backend().read(offset, &mut byte);
    byte[0] ^= 0x5A;
    pool.backend().write(offset, &byte);
    pool.backend().persist(offset, 1);
}

#[test]
fn corrupted_checkpoint_row_is_refused() {
    // Chunk header is 64 bytes; the first row's header is 32 bytes, then its key.
    corrupted_checkpoint_is_refused("row key byte", |pool, chunk| flip(pool, chunk + 64 + 32));
    corrupted_checkpoint_is_refused("row value byte", |pool, chunk| flip(pool, chunk + 64 + 32 + 8 + 100));
    corrupted_checkpoint_is_refused("row length", |pool, chunk| flip(pool, chunk + 64 + 1));
    corrupted_checkpoint_is_refused("chunk header", |pool, chunk| flip(pool, chunk + 24));
}

#[test]
fn close_with_periodic_checkpoints_never_hangs() {
    // The checkpointer waits for durable epochs; closing (or dropping) the
    // database while it does must not wait for a ticker that has stopped.
    for round in 0..20u64 {
        let mut options = memory_options(8 << 20, Some(Duration::from_millis(1)));
        options.epoch_interval = Duration::from_millis(1);
        let db = Database::open(options).unwrap();
        write_some(&db, 0, 1, 3 + round % 5);
        std::thread::sleep(Duration::from_millis(round % 4));
        if round % 2 == 0 {
            db.close().unwrap();
        } else {
            drop(db);
        }
    }
}
