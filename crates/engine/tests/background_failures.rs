//! A failure of an engine's background work reaches the caller: a failed
//! periodic checkpoint is returned once by the next transaction (or by
//! `close`) and counted in the statistics; a panicked checkpointer or epoch
//! thread fails every later transaction, wait for durability and `close`,
//! and the pool is then recovered at the next open. The failures are
//! injected (`DbOptions::background_fault`, feature `fault-injection`:
//! `cargo test -p pmtx-engine --features fault-injection --test
//! background_failures`; `cargo test --workspace` enables it).
#![cfg(feature = "fault-injection")]

use pmtx_engine::{BackgroundFault, Database, DbError, DbOptions, EngineKind, PoolLocation, TableSchema};
use std::time::{Duration, Instant};

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::hashed("t").max_value_len(64)]
}

fn options(engine: EngineKind, fault: BackgroundFault) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.checkpoint_interval = Some(Duration::from_millis(5));
    options.background_fault = Some(fault);
    options
}

/// Waits until the engine's statistics show a background failure (the
/// bound only keeps a broken engine from hanging the suite).
fn wait_for_failure(db: &Database) -> String {
    let started = Instant::now();
    loop {
        if let Some(failure) = db.stats().background_failure {
            return failure;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no background failure was recorded");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_failed_checkpoint_is_returned_once_by_the_next_transaction() {
    let db = Database::open(options(EngineKind::GroupCommit, BackgroundFault::CheckpointError)).unwrap();
    let table = db.table_id("t").unwrap();
    let mut worker = db.worker(0).unwrap();
    let failure = wait_for_failure(&db);
    assert!(failure.contains("injected failure of a periodic checkpoint"), "{failure}");
    assert_eq!(db.stats().checkpoint_failures, 1);
    match worker.run(|tx| tx.put(table, b"k", b"lost")) {
        Err(DbError::CheckpointFailed(inner)) => assert!(matches!(*inner, DbError::OutOfSpace(_)), "{inner}"),
        other => panic!("expected CheckpointFailed, got {other:?}"),
    }
    // Returned once, before the transaction ran: it committed nothing, and
    // the database goes on (later checkpoints succeed).
    let read = worker.run_read_only(|tx| tx.get(table, b"k")).unwrap();
    assert_eq!(read.committed(), Some(None));
    worker.run(|tx| tx.put(table, b"k", b"kept")).unwrap();
    let checkpoints = db.stats().checkpoints;
    let started = Instant::now();
    while db.stats().checkpoints == checkpoints {
        assert!(started.elapsed() < Duration::from_secs(120), "no checkpoint after the failed one");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(db.stats().checkpoint_failures, 1, "the statistics keep the count");
    drop(worker);
    db.close().unwrap();
}

#[test]
fn a_failed_checkpoint_no_transaction_saw_is_returned_by_close() {
    let db = Database::open(options(EngineKind::Dbxn, BackgroundFault::CheckpointError)).unwrap();
    wait_for_failure(&db);
    assert!(matches!(db.close(), Err(DbError::CheckpointFailed(_))));
}

#[test]
fn a_panicked_checkpointer_fails_every_later_transaction_and_close() {
    let db = Database::open(options(EngineKind::GroupCommit, BackgroundFault::CheckpointPanic)).unwrap();
    let table = db.table_id("t").unwrap();
    let mut worker = db.worker(0).unwrap();
    let failure = wait_for_failure(&db);
    assert!(failure.contains("pmtx-checkpoint panicked"), "{failure}");
    for _ in 0..2 {
        match worker.run(|tx| tx.put(table, b"k", b"v")) {
            Err(DbError::BackgroundPanic { thread, message }) => {
                assert_eq!(thread, "pmtx-checkpoint");
                assert!(message.contains("injected"), "{message}");
            }
            other => panic!("expected BackgroundPanic, got {other:?}"),
        }
    }
    drop(worker);
    assert!(matches!(db.close(), Err(DbError::BackgroundPanic { .. })));
}

/// A panicked epoch thread: no epoch becomes durable any more, so the
/// transactions' waits end with the panic instead of hanging, and the pool
/// (a file here) is not marked clean: the next open recovers it.
#[test]
fn a_panicked_epoch_thread_ends_the_waits_and_leaves_the_pool_to_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("epoch.pool");
    let file_options = || {
        let mut options = options(EngineKind::GroupCommit, BackgroundFault::EpochPanic);
        options.pool = PoolLocation::File { path: path.clone(), size: 4 << 20 };
        options.chunk_size = pmtx_pm::layout::MIN_CHUNK_SIZE;
        options.prefault_chunks = 0;
        options.checkpoint_interval = None;
        options
    };
    let db = Database::open(file_options().create_if_missing(true)).unwrap();
    let table = db.table_id("t").unwrap();
    let mut worker = db.worker(0).unwrap();
    match worker.run(|tx| tx.put(table, b"k", b"v")) {
        Err(DbError::BackgroundPanic { thread, .. }) => assert_eq!(thread, "pmtx-epoch"),
        other => panic!("expected BackgroundPanic, got {other:?}"),
    }
    assert!(wait_for_failure(&db).contains("pmtx-epoch panicked"));
    drop(worker);
    assert!(matches!(db.close(), Err(DbError::BackgroundPanic { .. })));
    let mut reopen = file_options();
    reopen.background_fault = None;
    let db = Database::open(reopen).unwrap();
    let recovery = db.stats().recovery.expect("a recovery report");
    assert!(!recovery.clean_shutdown, "the close after the panic marked the pool clean");
    db.close().unwrap();
}

#[test]
fn zen_and_wbl_report_a_panicked_epoch_thread() {
    for engine in [EngineKind::Zen, EngineKind::Wbl] {
        let db = Database::open(options(engine, BackgroundFault::EpochPanic)).unwrap();
        let table = db.table_id("t").unwrap();
        let mut worker = db.worker(0).unwrap();
        wait_for_failure(&db);
        match worker.run(|tx| tx.put(table, b"k", b"v")) {
            Err(DbError::BackgroundPanic { .. }) => {}
            other => panic!("{engine}: expected BackgroundPanic, got {other:?}"),
        }
        drop(worker);
        assert!(matches!(db.close(), Err(DbError::BackgroundPanic { .. })), "{engine}");
    }
}
