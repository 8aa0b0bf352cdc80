//! `Database::run` and its siblings from any thread: more threads than
//! worker slots share the slots, lose no transfer, and a caller that finds
//! every slot held gets a typed error after the configured wait.

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, Outcome, TableSchema, TxError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ACCOUNTS: u64 = 16;
const INITIAL: u64 = 1_000;

fn bank_options(engine: EngineKind) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, vec![TableSchema::hashed("accounts").max_value_len(8)]);
    options.workers = 2;
    options
}

fn balance(row: &[u8]) -> u64 {
    u64::from_le_bytes(row.try_into().expect("8-byte balances"))
}

fn total(db: &Database) -> u64 {
    let accounts = db.table_id("accounts").unwrap();
    let mut sum = 0;
    db.for_each_row(accounts, |_, value| sum += balance(value)).unwrap();
    sum
}

#[test]
fn a_thread_pool_larger_than_the_slot_count_runs_every_transfer() {
    // Eight threads on two slots, on a non-durable, a group-commit, a
    // synchronous-log and a log-free engine.
    for engine in [EngineKind::Silo, EngineKind::GroupCommit, EngineKind::Dbxn, EngineKind::Zen] {
        let db = Arc::new(Database::open(bank_options(engine)).unwrap());
        let accounts = db.table_id("accounts").unwrap();
        db.run(|tx| {
            for account in 0..ACCOUNTS {
                tx.put(accounts, &account.to_be_bytes(), &INITIAL.to_le_bytes())?;
            }
            Ok(())
        })
        .unwrap();
        let committed = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|thread| {
                let db = Arc::clone(&db);
                let committed = Arc::clone(&committed);
                std::thread::spawn(move || {
                    for round in 0..200u64 {
                        let from = (thread * 7 + round) % ACCOUNTS;
                        let to = (from + 1 + round % (ACCOUNTS - 1)) % ACCOUNTS;
                        let done = db
                            .run(|tx| {
                                let have = tx.get_with(accounts, &from.to_be_bytes(), balance)?.unwrap();
                                if have == 0 {
                                    return Err(TxError::Rollback);
                                }
                                tx.update_with(accounts, &from.to_be_bytes(), |row| {
                                    row.copy_from_slice(&(balance(row) - 1).to_le_bytes())
                                })?;
                                tx.update_with(accounts, &to.to_be_bytes(), |row| {
                                    row.copy_from_slice(&(balance(row) + 1).to_le_bytes())
                                })?;
                                Ok(())
                            })
                            .unwrap();
                        if done.committed().is_some() {
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(committed.load(Ordering::Relaxed), 8 * 200, "{engine}: every transfer committed");
        let read = db.run_read_only(|tx| tx.get_with(accounts, &0u64.to_be_bytes(), balance)).unwrap();
        assert!(read.committed().flatten().is_some(), "{engine}: read-only form reads");
        assert_eq!(total(&db), ACCOUNTS * INITIAL, "{engine}: transfers keep the total");
        let db = Arc::into_inner(db).expect("every thread is done");
        db.close().unwrap();
    }
}

#[test]
fn a_pipelined_commit_from_any_thread_becomes_durable() {
    for engine in [EngineKind::GroupCommit, EngineKind::Dbxn, EngineKind::Zen] {
        let db = Arc::new(Database::open(bank_options(engine)).unwrap());
        let accounts = db.table_id("accounts").unwrap();
        let pending: Vec<_> = (0..4u64)
            .map(|account| {
                let db = Arc::clone(&db);
                std::thread::spawn(move || {
                    let (outcome, pending) = db
                        .run_pipelined(|tx| tx.put(accounts, &account.to_be_bytes(), &INITIAL.to_le_bytes()))
                        .unwrap();
                    assert_eq!(outcome, Outcome::Committed(()));
                    pending.expect("a committed write is pending until durable")
                })
            })
            .map(|thread| thread.join().unwrap())
            .collect();
        for pending in pending {
            db.wait_durable(pending).unwrap();
        }
        assert_eq!(total(&db), 4 * INITIAL, "{engine}");
        Arc::into_inner(db).unwrap().close().unwrap();
    }
}

#[test]
fn every_slot_held_gives_a_typed_error_after_the_wait() {
    let db = Database::open(bank_options(EngineKind::GroupCommit).worker_wait(Duration::from_millis(50))).unwrap();
    let held: Vec<_> = (0..2).map(|id| db.worker(id).unwrap()).collect();
    match db.run(|_| Ok(())) {
        Err(DbError::NoFreeWorker { workers: 2, waited }) => assert!(waited >= Duration::from_millis(50)),
        other => panic!("expected NoFreeWorker, got {:?}", other.map(|f| f.committed())),
    }
    // Dropping an explicit worker frees its slot for `run`.
    drop(held);
    assert!(db.run(|_| Ok(())).unwrap().committed().is_some());
    db.close().unwrap();
}

#[test]
fn a_caller_waits_for_a_slot_that_another_thread_frees() {
    let db = Arc::new(Database::open(bank_options(EngineKind::Silo).worker_wait(Duration::from_secs(60))).unwrap());
    let explicit = db.worker(0).unwrap();
    let holding = Arc::new(AtomicBool::new(true));
    // The other slot is held by a long transaction on another thread.
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let holder = {
        let db = Arc::clone(&db);
        let holding = Arc::clone(&holding);
        std::thread::spawn(move || {
            db.run(|_| {
                let _ = entered_tx.send(());
                while holding.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                Ok(())
            })
            .unwrap();
        })
    };
    entered_rx.recv().unwrap();
    let waiter = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.run(|_| Ok(7)).unwrap().committed())
    };
    // The waiter cannot finish while both slots are held; release one.
    holding.store(false, Ordering::Release);
    assert_eq!(waiter.join().unwrap(), Some(7));
    holder.join().unwrap();
    drop(explicit);
    Arc::into_inner(db).unwrap().close().unwrap();
}

#[test]
fn a_panicking_body_frees_its_slot_and_leaves_no_lock() {
    let db =
        Arc::new(Database::open(bank_options(EngineKind::GroupCommit).worker_wait(Duration::from_secs(60))).unwrap());
    let accounts = db.table_id("accounts").unwrap();
    db.run(|tx| tx.put(accounts, b"k", &1u64.to_le_bytes())).unwrap();
    for _ in 0..3 {
        let db = Arc::clone(&db);
        let panicked = std::thread::spawn(move || {
            let _ = db.run(|tx| -> Result<(), TxError> {
                tx.update_with(accounts, b"k", |row| row.copy_from_slice(&99u64.to_le_bytes()))?;
                panic!("the body fails");
            });
        })
        .join();
        assert!(panicked.is_err(), "the panic reaches the caller");
    }
    // Three panics on two slots: the slots were freed, and the row is
    // neither locked nor changed.
    let read = db.run(|tx| tx.get_with(accounts, b"k", balance)).unwrap();
    assert_eq!(read.committed(), Some(Some(1)));
    Arc::into_inner(db).unwrap().close().unwrap();
}
