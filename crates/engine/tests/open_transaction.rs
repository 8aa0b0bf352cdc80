//! Transactions run step by step (`Database::begin`, the C API's path):
//! commits, conflicts retried by hand, rollbacks, the attempt limit, and
//! that an ended or dropped transaction frees its worker slot. Every
//! durable engine with the same sequence.

use pmtx_engine::{AbortReason, Database, DbError, DbOptions, EngineKind, StepState, TableSchema, TxError};
use std::time::Duration;

fn open(engine: EngineKind, workers: usize) -> Database {
    let mut options = DbOptions::in_memory(engine, vec![TableSchema::ordered("t").max_value_len(32)]);
    options.workers = workers;
    options.max_attempts = 3;
    options.worker_wait = Duration::from_millis(50);
    Database::open(options).unwrap()
}

fn value(db: &Database, key: &[u8]) -> Option<Vec<u8>> {
    let t = db.table_id("t").unwrap();
    db.run_read_only(|tx| tx.get(t, key)).unwrap().committed().unwrap()
}

const ENGINES: [EngineKind; 5] =
    [EngineKind::Zen, EngineKind::Silo, EngineKind::Dbxn, EngineKind::Sp3, EngineKind::GroupCommit];

#[test]
fn steps_commit_and_the_commit_is_visible() {
    for engine in ENGINES {
        let db = open(engine, 2);
        let t = db.table_id("t").unwrap();
        let mut open = db.begin(false).unwrap();
        assert_eq!(open.state(), StepState::Active);
        open.ops(|tx| tx.put(t, b"a", b"1")).unwrap();
        assert_eq!(open.ops(|tx| tx.get(t, b"a")).unwrap().as_deref(), Some(&b"1"[..]), "{engine}: own write");
        open.commit().unwrap();
        assert_eq!(open.state(), StepState::Ended("committed"));
        assert!(matches!(open.ops(|tx| tx.get(t, b"a")), Err(TxError::Db(DbError::TransactionEnded(_)))));
        assert!(matches!(open.commit(), Err(TxError::Db(DbError::TransactionEnded(_)))));
        assert_eq!(value(&db, b"a").as_deref(), Some(&b"1"[..]), "{engine}");
        drop(open);
        db.close().unwrap();
    }
}

#[test]
fn a_stale_read_conflicts_and_a_retry_commits() {
    for engine in ENGINES {
        let db = open(engine, 2);
        let t = db.table_id("t").unwrap();
        db.run(|tx| tx.put(t, b"a", b"old")).unwrap();
        let mut reader = db.begin(false).unwrap();
        assert_eq!(reader.ops(|tx| tx.get(t, b"a")).unwrap().as_deref(), Some(&b"old"[..]));
        // Not waiting for durability: a group-commit epoch cannot close
        // while `reader`, on this thread, runs.
        let (_, pending) = db.run_pipelined(|tx| tx.put(t, b"a", b"new")).unwrap();
        reader.ops(|tx| tx.put(t, b"b", b"copied")).unwrap_or_else(|e| panic!("{engine}: {e}"));
        let conflict = reader.commit();
        assert!(matches!(conflict, Err(TxError::Abort(_))), "{engine}: {conflict:?}");
        assert!(matches!(reader.state(), StepState::Conflicted(_)), "{engine}");
        // A conflicted attempt runs no steps until it is retried.
        assert!(matches!(reader.ops(|tx| tx.get(t, b"a")), Err(TxError::Abort(_))));
        reader.retry().unwrap();
        assert_eq!(reader.attempts(), 2);
        assert_eq!(reader.ops(|tx| tx.get(t, b"a")).unwrap().as_deref(), Some(&b"new"[..]), "{engine}");
        reader.ops(|tx| tx.put(t, b"b", b"copied")).unwrap();
        reader.commit().unwrap();
        db.wait_durable(pending.expect("a writing commit")).unwrap();
        assert_eq!(value(&db, b"b").as_deref(), Some(&b"copied"[..]), "{engine}");
        drop(reader);
        db.close().unwrap();
    }
}

#[test]
fn rollback_drop_and_errors_free_the_worker_slot() {
    for engine in ENGINES {
        // One slot: each step below must give it back for the next to begin.
        let db = open(engine, 1);
        let t = db.table_id("t").unwrap();
        let mut first = db.begin(false).unwrap();
        first.ops(|tx| tx.put(t, b"a", b"rolled back")).unwrap();
        assert!(matches!(db.begin(false), Err(DbError::NoFreeWorker { .. })), "{engine}: the slot is held");
        first.rollback();
        assert_eq!(first.state(), StepState::Ended("rolled back"));
        let mut second = db.begin(false).unwrap();
        second.ops(|tx| tx.put(t, b"b", b"dropped")).unwrap();
        drop(second);
        let mut third = db.begin(false).unwrap();
        let too_long = third.ops(|tx| tx.put(t, b"c", &[0; 33]));
        assert!(matches!(too_long, Err(TxError::Db(DbError::ValueTooLarge { .. }))), "{engine}");
        assert_eq!(third.state(), StepState::Ended("ended by an error"));
        let mut read_only = db.begin(true).unwrap();
        assert!(read_only.is_read_only());
        assert!(read_only.ops(|tx| tx.put(t, b"d", b"x")).is_err(), "{engine}: a write in a read-only transaction");
        drop(read_only);
        assert_eq!(value(&db, b"a"), None, "{engine}");
        assert_eq!(value(&db, b"b"), None, "{engine}");
        assert_eq!(value(&db, b"c"), None, "{engine}");
        drop((first, third));
        db.close().unwrap();
    }
}

#[test]
fn retries_stop_at_the_attempt_limit() {
    let db = open(EngineKind::Silo, 2);
    let t = db.table_id("t").unwrap();
    db.run(|tx| tx.put(t, b"a", b"0")).unwrap();
    let mut open = db.begin(false).unwrap();
    assert!(matches!(open.retry(), Err(DbError::InvalidConfig(_))), "no conflict to retry");
    let mut limit = None;
    for attempt in 1..=3 {
        open.ops(|tx| tx.get(t, b"a")).unwrap();
        db.run(|tx| tx.put(t, b"a", attempt.to_string().as_bytes())).unwrap();
        open.ops(|tx| tx.put(t, b"b", b"x")).unwrap();
        assert!(matches!(open.commit(), Err(TxError::Abort(AbortReason::ReadValidation))));
        match open.retry() {
            Ok(()) => assert!(attempt < 3),
            Err(error) => limit = Some((attempt, error)),
        }
    }
    let (attempt, error) = limit.expect("the third conflict reaches max_attempts = 3");
    assert_eq!(attempt, 3);
    assert!(matches!(error, DbError::TooManyAborts { attempts: 3, .. }), "{error}");
    assert!(matches!(open.state(), StepState::Ended(_)));
    assert!(matches!(open.retry(), Err(DbError::TransactionEnded(_))));
    drop(open);
    db.close().unwrap();
}

#[test]
fn a_pipelined_commit_becomes_durable() {
    for engine in [EngineKind::GroupCommit, EngineKind::Zen] {
        let db = open(engine, 2);
        let t = db.table_id("t").unwrap();
        let mut open = db.begin(false).unwrap();
        open.ops(|tx| tx.put(t, b"p", b"piped")).unwrap();
        let pending = open.commit_pipelined().unwrap();
        db.wait_durable(pending).unwrap();
        assert_eq!(value(&db, b"p").as_deref(), Some(&b"piped"[..]), "{engine}");
        drop(open);
        db.close().unwrap();
    }
}
