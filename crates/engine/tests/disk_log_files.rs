//! The redo log on real files (`dbx-disk`, `dbx-naive` with `medium=disk`):
//! where the files live, recovery from them, truncation, and the typed
//! errors for a log directory that is missing, belongs to another pool, or
//! cannot be created. (What a power failure keeps is tested with memory log
//! files in `pmtx-crashtest`'s `tests/disk_log.rs`.)

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, LogDirectory, LogMedium, PoolLocation, TableSchema};
use std::path::Path;

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::hashed("t").max_value_len(64)]
}

fn options(engine: EngineKind, medium: LogMedium, pool: &Path) -> DbOptions {
    let mut options = DbOptions::new(engine, tables(), pool);
    options.pool = PoolLocation::File { path: pool.to_path_buf(), size: 16 << 20 };
    options.create_if_missing = true;
    options.chunk_size = 256 << 10;
    options.epoch_interval = std::time::Duration::from_millis(2);
    options.checkpoint_interval = None;
    options.prefault_chunks = 0;
    options.dbxn.medium = medium;
    options
}

fn put(db: &Database, key: u64, value: &[u8]) {
    let table = db.table_id("t").unwrap();
    db.worker(0).unwrap().run(|tx| tx.put(table, &key.to_be_bytes(), value)).unwrap();
}

fn get(db: &Database, key: u64) -> Option<Vec<u8>> {
    let table = db.table_id("t").unwrap();
    db.worker(0).unwrap().run(|tx| tx.get(table, &key.to_be_bytes())).unwrap().committed().unwrap()
}

fn segment_files(directory: &Path) -> usize {
    std::fs::read_dir(directory)
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg"))
        .count()
}

#[test]
fn the_log_lives_beside_the_pool_and_recovers_after_a_crash() {
    for (engine, medium) in [(EngineKind::DbxDisk, LogMedium::Pm), (EngineKind::DbxNaive, LogMedium::Disk)] {
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("bank.pool");
        let options = options(engine, medium, &pool);
        let log = options.log_directory_path().expect("a file log");
        assert_eq!(log, dir.path().join("bank.pool.log"));
        let db = Database::open(options.clone()).unwrap();
        for key in 0..200u64 {
            put(&db, key, format!("v{key}").as_bytes());
        }
        assert!(segment_files(&log) >= 1, "{engine}: the records are in segment files");
        let stats = db.stats();
        assert!(stats.log_file_syncs > 0, "{engine}: the log was synced");
        // A crash (no clean close): recovery reads the files.
        db.crash().unwrap();
        drop(db);
        let db = Database::open(options.clone()).unwrap();
        let report = db.stats().recovery.expect("recovered");
        assert!(!report.clean_shutdown);
        assert!(report.log_records_applied >= 200, "{engine}: {report:?}");
        for key in 0..200u64 {
            assert_eq!(get(&db, key), Some(format!("v{key}").into_bytes()), "{engine}: key {key}");
        }
        // Recovery checkpointed into the pool and removed the old segments;
        // a clean close leaves no segment at all.
        db.close().unwrap();
        assert_eq!(segment_files(&log), 0, "{engine}: a clean close truncates the whole log");
        let db = Database::open(options).unwrap();
        assert!(db.stats().recovery.expect("opened").clean_shutdown);
        assert_eq!(get(&db, 7), Some(b"v7".to_vec()));
        db.close().unwrap();
    }
}

#[test]
fn checkpoints_truncate_the_log_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(EngineKind::DbxDisk, LogMedium::Pm, &dir.path().join("p.pool"));
    options.chunk_size = 64 << 10;
    let log = options.log_directory_path().unwrap();
    let db = Database::open(options).unwrap();
    let value = [7u8; 60];
    for key in 0..3000u64 {
        put(&db, key % 500, &value);
    }
    let before = segment_files(&log);
    assert!(before > 2, "the log spans several segment files ({before})");
    db.checkpoint().unwrap();
    db.checkpoint().unwrap();
    let after = segment_files(&log);
    assert!(after < before, "a checkpoint removed segment files ({before} -> {after})");
    assert!(db.stats().log_segments_freed > 0);
    db.close().unwrap();
}

#[test]
fn a_missing_log_directory_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let options = options(EngineKind::DbxDisk, LogMedium::Pm, &dir.path().join("p.pool"));
    let db = Database::open(options.clone()).unwrap();
    put(&db, 1, b"acknowledged");
    db.crash().unwrap();
    drop(db);
    std::fs::remove_dir_all(options.log_directory_path().unwrap()).unwrap();
    let error = Database::open(options).err().expect("the log is gone");
    assert!(matches!(&error, DbError::LogFile { operation, .. } if operation.contains("redo log")), "{error}");
    assert!(error.to_string().contains("p.pool.log"), "{error}");
}

#[test]
fn a_log_directory_of_another_pool_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.pool");
    let options = options(EngineKind::DbxDisk, LogMedium::Pm, &pool);
    let db = Database::open(options.clone()).unwrap();
    put(&db, 1, b"x");
    db.crash().unwrap();
    drop(db);
    // A new pool at the same path finds the old pool's log beside it.
    std::fs::remove_file(&pool).unwrap();
    let error = Database::open(options).err().expect("another pool's log");
    assert!(matches!(error, DbError::SchemaMismatch(_)), "{error}");
    assert!(error.to_string().contains("belongs to another pool"), "{error}");
}

#[test]
fn a_log_directory_that_cannot_be_created_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(EngineKind::DbxDisk, LogMedium::Pm, &dir.path().join("p.pool"));
    options.log_directory = LogDirectory::Path(dir.path().join("no/such/parent/log"));
    let error = Database::open(options.clone()).err().expect("no parent");
    assert!(
        matches!(&error, DbError::LogFile { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{error}"
    );
    assert!(error.to_string().contains("parent must exist"), "{error}");
    // A regular file where the directory should be.
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    options.log_directory = LogDirectory::Path(file);
    std::fs::remove_file(dir.path().join("p.pool")).ok();
    let error = Database::open(options).err().expect("a file, not a directory");
    assert!(matches!(error, DbError::LogFile { .. }), "{error}");
}

#[test]
fn the_log_medium_is_part_of_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.pool");
    let db = Database::open(options(EngineKind::DbxNaive, LogMedium::Pm, &pool)).unwrap();
    put(&db, 1, b"x");
    db.close().unwrap();
    let error = Database::open(options(EngineKind::DbxNaive, LogMedium::Disk, &pool)).err().expect("pm pool");
    assert!(matches!(error, DbError::SchemaMismatch(_)), "{error}");
    assert!(error.to_string().contains("in the pool (PM)"), "{error}");
    let pool = dir.path().join("q.pool");
    let db = Database::open(options(EngineKind::DbxNaive, LogMedium::Disk, &pool)).unwrap();
    put(&db, 1, b"x");
    db.close().unwrap();
    let error = Database::open(options(EngineKind::DbxNaive, LogMedium::Pm, &pool)).err().expect("disk pool");
    assert!(matches!(error, DbError::SchemaMismatch(_)), "{error}");
}

#[test]
fn bad_configurations_are_refused() {
    // A pool in anonymous memory has nothing beside it.
    let mut options = DbOptions::in_memory(EngineKind::DbxDisk, tables());
    options.log_directory = LogDirectory::BesidePool;
    let error = Database::open(options).err().expect("in-memory pool beside nothing");
    assert!(matches!(error, DbError::InvalidConfig(_)), "{error}");
    assert!(error.to_string().contains("LogDirectory::Path"), "{error}");
    // medium=disk is dbx-naive's alone.
    let mut options = DbOptions::in_memory(EngineKind::Dbxn, tables());
    options.dbxn.medium = LogMedium::Disk;
    let error = Database::open(options).err().expect("dbxn on disk");
    assert!(matches!(error, DbError::InvalidConfig(_)), "{error}");
    // The in-memory preset logs to memory files, which need no directory.
    let db = Database::open(DbOptions::in_memory(EngineKind::DbxDisk, tables())).unwrap();
    put(&db, 3, b"y");
    assert_eq!(get(&db, 3), Some(b"y".to_vec()));
    db.close().unwrap();
}
