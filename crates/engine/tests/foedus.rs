//! `foedus` outside the crash simulator: the log gleaner's snapshots hold
//! what was committed and recovery from a snapshot plus the log after it
//! loses nothing; with a DRAM budget smaller than the data, the gleaner's
//! eviction keeps the resident rows within it, and a read of an evicted row
//! reads its whole 4 KiB snapshot page from the pool.

use pmtx_engine::internals::pool_layout::{SNAPSHOT_CHUNK_KIND, SNAPSHOT_ROOT};
use pmtx_engine::{Database, DbOptions, EngineKind, Outcome, PoolLocation, TableSchema};
use pmtx_pm::{Direct, PmOptions, Pool};
use std::sync::Arc;
use std::time::Duration;

const CHUNK: u64 = 256 << 10;
const POOL: u64 = 32 << 20;
const ROWS: u64 = 2000;
const VALUE_LEN: usize = 200;

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("items").max_value_len(1024), TableSchema::hashed("meta").max_value_len(64)]
}

fn options(cache_bytes: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(EngineKind::Foedus, tables());
    options.workers = 2;
    options.pool = PoolLocation::InMemory { size: POOL };
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options.foedus.cache_bytes = cache_bytes;
    options
}

fn value(key: u64, round: u64) -> Vec<u8> {
    let mut value = vec![(key % 251) as u8; VALUE_LEN];
    value[..8].copy_from_slice(&round.to_le_bytes());
    value
}

fn write_all(db: &Database, round: u64) {
    let items = db.table_id("items").unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(50) {
        let finished = db
            .run(|tx| {
                for &key in chunk {
                    tx.put(items, &key.to_be_bytes(), &value(key, round))?;
                }
                Ok(())
            })
            .unwrap();
        assert!(matches!(finished.outcome, Outcome::Committed(())));
    }
}

fn assert_round(db: &Database, round: u64, deleted: &[u64]) {
    let items = db.table_id("items").unwrap();
    for key in 0..ROWS {
        let found = db.run(|tx| tx.get(items, &key.to_be_bytes())).unwrap();
        let Outcome::Committed(found) = found.outcome else { panic!("rolled back") };
        if deleted.contains(&key) {
            assert_eq!(found, None, "key {key} was deleted");
        } else {
            assert_eq!(found, Some(value(key, round)), "key {key}");
        }
    }
}

#[test]
fn snapshots_and_the_log_after_them_recover_everything() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(POOL, CHUNK, &PmOptions::default()).unwrap());
    let db = Database::open_on_pool(options(256 << 20), Arc::clone(&pool)).unwrap();
    write_all(&db, 1);
    db.checkpoint().unwrap();
    assert!(pool.root(SNAPSHOT_ROOT).is_some(), "the gleaner installed a snapshot");
    // After the snapshot: overwrite some rows, delete others.
    let items = db.table_id("items").unwrap();
    write_all(&db, 2);
    let deleted = [3u64, 500, 1999];
    for key in deleted {
        db.run(|tx| tx.delete(items, &key.to_be_bytes()).map(|_| ())).unwrap();
    }
    // A second snapshot folds the log into the first one's pages; then one
    // more round stays in the log alone.
    db.checkpoint().unwrap();
    write_all(&db, 3);
    for key in deleted {
        db.run(|tx| tx.delete(items, &key.to_be_bytes()).map(|_| ())).unwrap();
    }
    let stats = db.stats();
    assert_eq!(stats.checkpoints, 2, "{stats:?}");
    assert!(stats.log_segments_freed > 0, "snapshots free the log they cover: {stats:?}");
    // Crash (drop without close): the snapshot and the log recover round 3.
    db.crash().unwrap();
    drop(db);
    let db = Database::open_on_pool(options(256 << 20), Arc::clone(&pool)).unwrap();
    let recovery = db.stats().recovery.expect("a recovery report");
    assert!(recovery.checkpoint_rows > 0 && recovery.log_records_applied > 0, "{recovery:?}");
    assert_round(&db, 3, &deleted);
    // Recovery gleaned the log into a new snapshot: a clean close and reopen
    // read that snapshot alone.
    db.close().unwrap();
    let db = Database::open_on_pool(options(256 << 20), Arc::clone(&pool)).unwrap();
    assert_round(&db, 3, &deleted);
    let snapshot_chunks =
        pool.owned_chunks().into_iter().filter(|(_, owner)| owner.kind() == SNAPSHOT_CHUNK_KIND).count();
    assert!(snapshot_chunks >= 1, "one generation of snapshot chunks");
}

#[test]
fn a_small_budget_evicts_rows_and_a_miss_reads_the_whole_page() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(POOL, CHUNK, &PmOptions::default()).unwrap());
    let data_bytes = ROWS * (8 + VALUE_LEN as u64);
    let budget = data_bytes / 4;
    let db = Database::open_on_pool(options(budget), Arc::clone(&pool)).unwrap();
    write_all(&db, 1);
    db.checkpoint().unwrap();
    let stats = db.stats();
    assert!(stats.cache_evictions > 0, "{stats:?}");
    assert!(stats.cache_bytes <= budget, "resident {} over the budget {budget}", stats.cache_bytes);
    // Reads of the evicted rows miss: each reads a 4 KiB snapshot page.
    pmtx_pm::reset_thread_counters();
    let items = db.table_id("items").unwrap();
    for key in 0..ROWS {
        let found = db.run(|tx| tx.get(items, &key.to_be_bytes())).unwrap();
        assert!(matches!(found.outcome, Outcome::Committed(Some(_))));
    }
    let counters = pmtx_pm::thread_counters();
    let misses = db.stats().cache_misses;
    assert!(misses > 0, "evicted rows were read");
    assert!(counters.bytes_read >= misses * 4096, "{counters:?} for {misses} misses");
    // The pool is at its budget: reads go through the snapshot pages and
    // leave the rows evicted, so reading them again misses as often.
    for key in 0..ROWS {
        db.run(|tx| tx.get(items, &key.to_be_bytes())).unwrap();
    }
    assert_eq!(db.stats().cache_misses, 2 * misses);
    // A write takes a volatile copy: the row is resident afterwards.
    let key = (0..ROWS)
        .find(|key| {
            let before = db.stats().cache_misses;
            db.run(|tx| tx.get(items, &key.to_be_bytes())).unwrap();
            db.stats().cache_misses > before
        })
        .expect("an evicted row");
    db.run(|tx| tx.put(items, &key.to_be_bytes(), &value(key, 1))).unwrap();
    let before = db.stats().cache_misses;
    db.run(|tx| tx.get(items, &key.to_be_bytes())).unwrap();
    assert_eq!(db.stats().cache_misses, before, "key {key} is resident after its write");
    // A budget as large as the data evicts nothing.
    db.close().unwrap();
    let db = Database::open_on_pool(options(256 << 20), Arc::clone(&pool)).unwrap();
    write_all(&db, 2);
    db.checkpoint().unwrap();
    assert_eq!(db.stats().cache_evictions, 0);
    assert_round(&db, 2, &[]);
}

/// A full volatile pool triggers the gleaner without waiting for the
/// snapshot interval (FOEDUS's trigger): a load beyond the budget is
/// snapshotted and evicted down to it by the checkpointer alone.
#[test]
fn a_load_beyond_the_budget_triggers_a_snapshot_and_eviction() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(POOL, CHUNK, &PmOptions::default()).unwrap());
    let data_bytes = ROWS * (8 + VALUE_LEN as u64);
    let budget = data_bytes / 4;
    // An interval no test waits for: only the full pool can trigger.
    let mut small = options(budget);
    small.checkpoint_interval = Some(Duration::from_secs(3600));
    let db = Database::open_on_pool(small, Arc::clone(&pool)).unwrap();
    write_all(&db, 1);
    // The checkpointer polls every 10 ms; the deadline only bounds a hang.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while db.stats().cache_evictions == 0 {
        assert!(std::time::Instant::now() < deadline, "no snapshot was triggered: {:?}", db.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = db.stats();
    assert!(stats.checkpoints >= 1, "{stats:?}");
    assert!(stats.cache_bytes <= budget, "resident {} over the budget {budget}", stats.cache_bytes);
    assert_round(&db, 1, &[]);
    db.close().unwrap();
    // A budget the data fit in never triggers: nothing is evicted.
    let mut large = options(256 << 20);
    large.checkpoint_interval = Some(Duration::from_secs(3600));
    let db = Database::open_on_pool(large, Arc::clone(&pool)).unwrap();
    write_all(&db, 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(db.stats().cache_evictions, 0);
}
