//! `mmdb` as the Zen paper's "MMDB with NVM capacity": at P = 4 (a DRAM
//! budget of a quarter of the database) about three quarters of the rows
//! live in the pool used as volatile memory, and their reads go to the pool;
//! `mmdb-ideal` keeps everything in DRAM; and a crash loses no acknowledged
//! commit while recovery ignores (and frees) the volatile region.

use pmtx_engine::internals::pool_layout::MMDB_VOLATILE_CHUNK_KIND;
use pmtx_engine::{CcProtocol, Database, DbOptions, EngineKind, PoolLocation, TableSchema};
use pmtx_pm::{BackendKind, Direct, PmBackend, Pool};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const ROWS: u64 = 400;
const VALUE: usize = 1000;
/// Keys plus values: the database size P divides.
const DATABASE_BYTES: u64 = ROWS * (8 + VALUE as u64);
const P: u64 = 4;

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::hashed("t").max_value_len(VALUE)]
}

fn value(row: u64, version: u64) -> Vec<u8> {
    let mut value = vec![(row % 251) as u8; VALUE];
    value[..8].copy_from_slice(&version.to_le_bytes());
    value
}

fn options(engine: EngineKind, cc: CcProtocol) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.cc = cc;
    options.workers = 1;
    options.mmdb.dram_bytes = DATABASE_BYTES / P;
    options
}

fn load(db: &Database) {
    let t = db.table_id("t").unwrap();
    let mut worker = db.worker(0).unwrap();
    for first in (0..ROWS).step_by(10) {
        worker
            .run(|tx| {
                for row in first..first + 10 {
                    tx.put(t, &row.to_be_bytes(), &value(row, 0))?;
                }
                Ok(())
            })
            .unwrap();
    }
}

fn counter(db: &Database, name: &str) -> u64 {
    db.stats().engine_counters.iter().find(|(key, _)| *key == name).map_or(0, |(_, value)| *value)
}

/// The pool work of reading every row once, in read-only transactions.
fn read_all(db: &Database) -> pmtx_pm::PmCounters {
    let t = db.table_id("t").unwrap();
    let mut worker = db.worker(0).unwrap();
    let before = pmtx_pm::thread_counters();
    for row in 0..ROWS {
        let got = worker.run_read_only(|tx| tx.get(t, &row.to_be_bytes())).unwrap().committed().unwrap();
        assert_eq!(got.as_deref(), Some(&value(row, 0)[..]), "row {row}");
    }
    pmtx_pm::thread_counters().since(&before)
}

#[test]
fn mmdb_at_p4_keeps_three_quarters_of_the_rows_in_volatile_pm_and_reads_them_there() {
    let db = Database::open(options(EngineKind::Mmdb, CcProtocol::Silo)).unwrap();
    load(&db);
    let (in_nvm, in_dram) = (counter(&db, "nvm_rows_now"), counter(&db, "dram_rows_now"));
    assert_eq!(in_nvm + in_dram, ROWS, "every row placed once");
    // Rows cost a little more DRAM than their keys and values (a header),
    // so slightly fewer than a quarter fit.
    assert!((ROWS * 70 / 100..=ROWS * 80 / 100).contains(&in_nvm), "{in_nvm} of {ROWS} rows in NVM");
    assert_eq!(counter(&db, "nvm_region_full"), 0);
    let reads = read_all(&db);
    // One read per NVM row, of its value's 16 lines; nothing written (Silo
    // writes no metadata when it reads).
    assert_eq!(reads.reads, in_nvm, "{reads:?}");
    assert_eq!(reads.lines_read, in_nvm * VALUE.div_ceil(64) as u64, "{reads:?}");
    assert_eq!(reads.writes, 0, "{reads:?}");
    db.close().unwrap();
}

#[test]
fn mmdb_under_cicada_writes_metadata_of_the_nvm_rows_it_reads() {
    let db = Database::open(options(EngineKind::Mmdb, CcProtocol::Cicada)).unwrap();
    load(&db);
    let in_nvm = counter(&db, "nvm_rows_now");
    assert!(in_nvm > ROWS / 2);
    let reads = read_all(&db);
    assert_eq!(reads.reads, in_nvm, "{reads:?}");
    assert_eq!(reads.writes, in_nvm, "one metadata write per NVM row read: {reads:?}");
    db.close().unwrap();
}

#[test]
fn mmdb_ideal_keeps_every_row_in_dram() {
    let db = Database::open(options(EngineKind::MmdbIdeal, CcProtocol::Cicada)).unwrap();
    load(&db);
    assert_eq!(counter(&db, "nvm_rows_now"), 0);
    let reads = read_all(&db);
    assert_eq!((reads.reads, reads.writes), (0, 0), "{reads:?}");
    db.close().unwrap();
}

fn file_options(path: &Path) -> DbOptions {
    let mut options = options(EngineKind::Mmdb, CcProtocol::Silo);
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: 16 << 20 };
    options.create_if_missing = true;
    options.backend = BackendKind::Direct;
    options.chunk_size = 256 << 10;
    options.epoch_interval = Duration::from_millis(1);
    options
}

fn region_chunks(pool: &Pool<Direct>) -> Vec<pmtx_pm::ChunkId> {
    pool.owned_chunks()
        .into_iter()
        .filter(|(_, owner)| owner.kind() == MMDB_VOLATILE_CHUNK_KIND)
        .map(|(c, _)| c)
        .collect()
}

#[test]
fn a_crash_loses_no_acknowledged_commit_and_recovery_ignores_the_volatile_region() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let options = file_options(&path);
    let mut expected = BTreeMap::new();
    {
        let pool = Arc::new(Pool::<Direct>::create(&path, 16 << 20, options.chunk_size, &options.pm).unwrap());
        let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
        load(&db);
        let t = db.table_id("t").unwrap();
        let mut worker = db.worker(0).unwrap();
        for row in 0..ROWS {
            expected.insert(row, value(row, 0));
        }
        // Updates of rows in DRAM and in NVM, each acknowledged (the log is
        // synchronous: durable when `run` returns).
        for version in 1..=3u64 {
            for row in (version..ROWS).step_by(7) {
                worker.run(|tx| tx.put(t, &row.to_be_bytes(), &value(row, version))).unwrap();
                expected.insert(row, value(row, version));
            }
        }
        assert!(counter(&db, "nvm_rows_now") > ROWS / 2);
        assert!(!region_chunks(&pool).is_empty(), "the rows beyond the budget are in the pool");
        drop(worker);
        db.crash().unwrap();
    }
    // The crash left the region in the pool; scribble over it, as a reboot
    // may leave volatile memory: recovery must not read it.
    let pool = Arc::new(Pool::<Direct>::open(&path, &options.pm).unwrap());
    let left = region_chunks(&pool);
    assert!(!left.is_empty(), "a crash does not free the region");
    for &chunk in &left {
        let offset = pool.chunk_offset(chunk);
        pool.backend().write(offset, &vec![0xFF; options.chunk_size as usize]);
    }
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
    let report = db.stats().recovery.unwrap();
    assert!(!report.clean_shutdown, "{report:?}");
    assert!(region_chunks(&pool).is_empty(), "the open freed the old region");
    let t = db.table_id("t").unwrap();
    let mut recovered = BTreeMap::new();
    db.for_each_row(t, |key, value| {
        recovered.insert(u64::from_be_bytes(key.try_into().unwrap()), value.to_vec());
    })
    .unwrap();
    assert_eq!(recovered.len(), expected.len());
    assert!(recovered == expected, "every acknowledged commit recovered, nothing from the region");
    // Transactions place the recovered rows again.
    let mut worker = db.worker(0).unwrap();
    for row in 0..ROWS {
        let got = worker.run_read_only(|tx| tx.get(t, &row.to_be_bytes())).unwrap().committed().unwrap();
        assert_eq!(got.as_ref(), expected.get(&row), "row {row}");
    }
    assert!(counter(&db, "nvm_rows_now") > ROWS / 2);
    drop(worker);
    db.close().unwrap();
    assert!(region_chunks(&pool).is_empty(), "a clean close frees the region");
}
