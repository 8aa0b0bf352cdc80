//! The embedding API refuses misuse with typed errors instead of panicking
//! or silently doing something else: a pool path that names no file, a
//! worker id already in use, a worker the pool has no room for.

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, PoolLocation, TableSchema};

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::hashed("t").max_value_len(64)]
}

fn file_options(engine: EngineKind, path: &std::path::Path) -> DbOptions {
    let mut options = DbOptions::new(engine, tables(), path);
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: 4 << 20 };
    options.chunk_size = pmtx_pm::layout::MIN_CHUNK_SIZE;
    options.prefault_chunks = 0;
    options.checkpoint_interval = None;
    options
}

#[test]
fn a_missing_pool_file_is_refused_unless_asked_to_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.pool");
    for engine in [EngineKind::GroupCommit, EngineKind::Zen] {
        match Database::open(file_options(engine, &path)) {
            Err(DbError::PoolNotFound { path: named }) => assert_eq!(named, path, "{engine}"),
            Err(other) => panic!("{engine}: {other}"),
            Ok(_) => panic!("{engine}: opened a pool that does not exist"),
        }
        let message = Database::open(file_options(engine, &path)).err().unwrap().to_string();
        assert!(message.contains(&path.display().to_string()), "{engine}: the error names the path: {message}");
        assert!(message.contains("create_if_missing"), "{engine}: the error says how to create it: {message}");
        assert!(!path.exists(), "{engine}: nothing was created");
    }
    // Asked to, it creates the pool; a reopen then needs no permission.
    let db = Database::open(file_options(EngineKind::GroupCommit, &path).create_if_missing(true)).unwrap();
    let table = db.table_id("t").unwrap();
    db.worker(0).unwrap().run(|tx| tx.put(table, b"k", b"v")).unwrap();
    db.close().unwrap();
    assert!(path.exists());
    let db = Database::open(file_options(EngineKind::GroupCommit, &path)).unwrap();
    let read = db.worker(0).unwrap().run_read_only(|tx| tx.get(table, b"k")).unwrap();
    assert_eq!(read.committed(), Some(Some(b"v".to_vec())));
    db.close().unwrap();
}

#[test]
fn a_non_durable_engine_needs_no_pool_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unused.pool");
    let db = Database::open(file_options(EngineKind::Silo, &path)).unwrap();
    db.close().unwrap();
    assert!(!path.exists());
}

#[test]
fn a_worker_id_is_refused_while_a_worker_holds_it() {
    for engine in [EngineKind::Silo, EngineKind::GroupCommit, EngineKind::Dbxn, EngineKind::Zen, EngineKind::Sp3] {
        let db = Database::open(DbOptions::in_memory(engine, tables())).unwrap();
        let table = db.table_id("t").unwrap();
        let mut first = db.worker(0).unwrap();
        match db.worker(0) {
            Err(DbError::WorkerInUse(0)) => {}
            Err(other) => panic!("{engine}: {other}"),
            Ok(_) => panic!("{engine}: two workers 0 at once"),
        }
        // Other ids are free, and the first worker still works.
        let mut other = db.worker(1).unwrap();
        first.run(|tx| tx.put(table, b"a", b"1")).unwrap();
        other.run(|tx| tx.put(table, b"b", b"2")).unwrap();
        // Dropped, the id is free again, and the new worker sees the data.
        drop(first);
        let mut again = db.worker(0).unwrap();
        let read = again.run_read_only(|tx| Ok((tx.get(table, b"a")?, tx.get(table, b"b")?))).unwrap();
        assert_eq!(read.committed(), Some((Some(b"1".to_vec()), Some(b"2".to_vec()))), "{engine}");
        drop((again, other));
        db.close().unwrap();
    }
}

#[test]
fn a_worker_id_outside_the_configured_count_is_refused() {
    let db = Database::open(DbOptions::in_memory(EngineKind::GroupCommit, tables())).unwrap();
    let workers = db.options().workers;
    assert!(matches!(db.worker(workers), Err(DbError::InvalidConfig(_))));
}

#[test]
fn a_worker_the_pool_has_no_room_for_is_out_of_space() {
    // A pool of a few chunks and more workers than chunks: each worker of
    // group commit takes a chunk for its log segment.
    let mut options = DbOptions::in_memory(EngineKind::GroupCommit, tables());
    let chunk = pmtx_pm::layout::MIN_CHUNK_SIZE;
    options.chunk_size = chunk;
    options.pool = PoolLocation::InMemory { size: 8 * chunk + (64 << 10) };
    options.workers = 32;
    let db = Database::open(options).unwrap();
    let mut held = Vec::new();
    let error = loop {
        match db.worker(held.len()) {
            Ok(worker) => held.push(worker),
            Err(error) => break error,
        }
        assert!(held.len() < 32, "32 workers fit in a pool of 8 chunks");
    };
    match &error {
        DbError::OutOfSpace(message) => assert!(message.contains(&format!("worker {}", held.len())), "{message}"),
        other => panic!("expected OutOfSpace, got {other}"),
    }
    // The refused id is not left taken: asked again, it is refused for
    // space again, not as in use.
    let refused = held.len();
    assert!(matches!(db.worker(refused), Err(DbError::OutOfSpace(_))), "refused again for space, not as in use");
    drop(held);
    drop(db);
}
