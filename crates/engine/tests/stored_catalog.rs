//! The pool stores its schema: a program that declares no tables reopens
//! it, an open with a different declaration is told each difference, a
//! table can be added, and a stored secondary index must get its key
//! function back by name.

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, PoolLocation, TableSchema};

fn by_owner(_: &[u8], value: &[u8]) -> Vec<u8> {
    value[..4].to_vec()
}

fn tables() -> Vec<TableSchema> {
    vec![
        TableSchema::hashed("accounts").max_value_len(8),
        TableSchema::ordered("notes").max_value_len(64).secondary("by_owner", by_owner),
    ]
}

fn options(engine: EngineKind, path: &std::path::Path, tables: Vec<TableSchema>) -> DbOptions {
    let mut options = DbOptions::new(engine, tables, path);
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: 16 << 20 };
    options.chunk_size = pmtx_pm::layout::MIN_CHUNK_SIZE;
    options.prefault_chunks = 0;
    options.checkpoint_interval = None;
    options
}

fn durable_engines() -> [EngineKind; 5] {
    [EngineKind::GroupCommit, EngineKind::Dbxn, EngineKind::Zen, EngineKind::Sp3, EngineKind::Phytm]
}

fn create_and_fill(engine: EngineKind, path: &std::path::Path) {
    let db = Database::open(options(engine, path, tables()).create_if_missing(true)).unwrap();
    let accounts = db.table_id("accounts").unwrap();
    let notes = db.table_id("notes").unwrap();
    db.run(|tx| {
        tx.put(accounts, b"alice", &7u64.to_le_bytes())?;
        tx.put(notes, b"n1", b"alicehello")
    })
    .unwrap();
    db.close().unwrap();
}

#[test]
fn a_program_that_declares_no_tables_reopens_the_pool() {
    for engine in durable_engines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.pool");
        create_and_fill(engine, &path);
        // Without the index's key function, the open is refused by name.
        match Database::open_existing(&path) {
            Err(DbError::InvalidConfig(message)) => {
                assert!(message.contains("`by_owner`") && message.contains("secondary_key"), "{engine}: {message}")
            }
            other => panic!("{engine}: expected the unregistered index to be refused, got {:?}", other.err()),
        }
        let stored = DbOptions::from_pool(&path).unwrap();
        assert_eq!(stored.engine, engine);
        let names: Vec<_> = stored.tables.iter().map(|table| table.name.as_str()).collect();
        assert_eq!(names, ["accounts", "notes"], "{engine}");
        assert_eq!(stored.tables[0].max_value_len, 8);
        let db = Database::open(stored.secondary_key("notes", "by_owner", by_owner)).unwrap();
        let accounts = db.table_id("accounts").unwrap();
        let notes = db.table_id("notes").unwrap();
        let index = db.secondary_id(notes, "by_owner").unwrap();
        let (balance, owned) = db
            .run_read_only(|tx| {
                let balance = tx.get(accounts, b"alice")?;
                let rows = tx.scan_secondary(
                    notes,
                    index,
                    (std::ops::Bound::Included(&b"alic"[..]), std::ops::Bound::Excluded(&b"alid"[..])),
                    pmtx_engine::ScanDirection::Forward,
                    10,
                )?;
                Ok((balance, rows.into_iter().map(|(key, _)| key).collect::<Vec<_>>()))
            })
            .unwrap()
            .committed()
            .unwrap();
        assert_eq!(balance, Some(7u64.to_le_bytes().to_vec()), "{engine}");
        assert_eq!(owned, vec![b"n1".to_vec()], "{engine}: the registered function serves the stored index");
        db.close().unwrap();
    }
}

#[test]
fn a_different_declaration_is_told_each_difference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.pool");
    create_and_fill(EngineKind::GroupCommit, &path);
    let mut changed = tables();
    changed[0].max_value_len = 16;
    changed[1] = TableSchema::ordered("notes").max_value_len(64);
    match Database::open(options(EngineKind::GroupCommit, &path, changed)) {
        Err(DbError::SchemaMismatch(message)) => {
            assert!(message.contains("`accounts`: max_value_len is 8 in the pool, 16 declared"), "{message}");
            assert!(message.contains("`notes`: the secondary index list"), "{message}");
        }
        other => panic!("expected a mismatch, got {:?}", other.err()),
    }
    match Database::open(options(EngineKind::GroupCommit, &path, tables()[..1].to_vec())) {
        Err(DbError::SchemaMismatch(message)) => {
            assert!(message.contains("`notes` (id 1) is in the pool"), "{message}")
        }
        other => panic!("expected a mismatch, got {:?}", other.err()),
    }
    // A registration for an index nobody has is an error too.
    let unknown = options(EngineKind::GroupCommit, &path, tables()).secondary_key("notes", "by_title", by_owner);
    assert!(matches!(Database::open(unknown), Err(DbError::UnknownIndex { .. })));
}

#[test]
fn a_table_is_added_only_when_asked_and_then_is_stored() {
    for engine in durable_engines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.pool");
        create_and_fill(engine, &path);
        let mut more = tables();
        more.push(TableSchema::ordered("audit"));
        match Database::open(options(engine, &path, more.clone())) {
            Err(DbError::SchemaMismatch(message)) => {
                assert!(message.contains("audit") && message.contains("create_missing_tables"), "{engine}: {message}")
            }
            other => panic!("{engine}: expected the new table to need permission, got {:?}", other.err()),
        }
        let db = Database::open(options(engine, &path, more).create_missing_tables(true)).unwrap();
        let audit = db.table_id("audit").unwrap();
        db.run(|tx| tx.put(audit, b"a1", b"added")).unwrap();
        // A crash (no clean close) after the addition: the table and its
        // row come back from the stored catalog.
        db.crash().unwrap();
        drop(db);
        let stored = DbOptions::from_pool(&path).unwrap().secondary_key("notes", "by_owner", by_owner);
        assert_eq!(stored.tables.len(), 3, "{engine}");
        let db = Database::open(stored).unwrap();
        let audit = db.table_id("audit").unwrap();
        let accounts = db.table_id("accounts").unwrap();
        let read = db.run_read_only(|tx| Ok((tx.get(audit, b"a1")?, tx.get(accounts, b"alice")?))).unwrap();
        assert_eq!(
            read.committed(),
            Some((Some(b"added".to_vec()), Some(7u64.to_le_bytes().to_vec()))),
            "{engine}: the added table and the old rows survive"
        );
        db.close().unwrap();
    }
}

#[test]
fn from_pool_on_a_missing_or_foreign_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing.pool");
    assert!(matches!(DbOptions::from_pool(&missing), Err(DbError::PoolNotFound { .. })));
    let foreign = dir.path().join("foreign.pool");
    std::fs::write(&foreign, vec![0x5Au8; 1 << 20]).unwrap();
    match DbOptions::from_pool(&foreign) {
        Err(DbError::Pool(_)) => {}
        other => panic!("expected a pool error, got {:?}", other.err()),
    }
}
