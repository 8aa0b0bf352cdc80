//! `Transaction::prefetch` hints: an access in the hints' order takes its
//! row from the hints instead of a second index lookup. Whatever the order
//! of the accesses, and while other threads delete and re-insert the hinted
//! keys, every read must see the row of the key it asked for.

use pmtx_engine::{Database, DbOptions, EngineKind, TableSchema, TxError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const KEYS: u64 = 64;

/// The engines whose workers act on hints (the others ignore them).
const ENGINES: [EngineKind; 5] =
    [EngineKind::Silo, EngineKind::Dbxn, EngineKind::GroupCommit, EngineKind::Sp3, EngineKind::Zen];

/// A value that names its key, so a read of another key's row shows.
fn value_of(key: u64, version: u64) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&key.to_le_bytes());
    value[8..].copy_from_slice(&version.to_le_bytes());
    value
}

fn key_in(value: &[u8]) -> u64 {
    u64::from_le_bytes(value[..8].try_into().expect("16-byte values"))
}

fn open(engine: EngineKind) -> (Database, pmtx_engine::TableId) {
    let mut options = DbOptions::in_memory(engine, vec![TableSchema::hashed("t").max_value_len(16)]);
    options.workers = 2;
    let db = Database::open(options).unwrap();
    let table = db.table_id("t").unwrap();
    db.run(|tx| {
        for key in 0..KEYS {
            tx.put(table, &key.to_be_bytes(), &value_of(key, 0))?;
        }
        Ok(())
    })
    .unwrap();
    (db, table)
}

#[test]
fn accesses_in_and_out_of_the_hints_order_read_their_own_keys() {
    for engine in ENGINES {
        let (db, table) = open(engine);
        // Hints 0..8, then accesses: one out of order (3 before 0), the
        // hinted ones, an absent hinted key, a write and a second read.
        let seen = db
            .run(|tx| {
                for key in (0..8u64).chain([1000]) {
                    tx.prefetch(table, &key.to_be_bytes());
                }
                let mut seen = Vec::new();
                for key in [3u64, 0, 1, 2, 3, 4, 5, 6, 7, 1000, 9] {
                    seen.push((key, tx.get_with(table, &key.to_be_bytes(), key_in)?));
                }
                tx.update_with(table, &5u64.to_be_bytes(), |row| row[8..].copy_from_slice(&7u64.to_le_bytes()))?;
                seen.push((5, tx.get_with(table, &5u64.to_be_bytes(), key_in)?));
                Ok(seen)
            })
            .unwrap()
            .committed()
            .expect("committed");
        for (key, found) in seen {
            let expected = (key < KEYS).then_some(key);
            assert_eq!(found, expected, "{engine:?}: read of key {key}");
        }
        let version = db.run(|tx| tx.get_with(table, &5u64.to_be_bytes(), |row| row[8])).unwrap().committed();
        assert_eq!(version, Some(Some(7)), "{engine:?}: the update through a hinted row");
    }
}

#[test]
fn hinted_rows_deleted_and_inserted_again_meanwhile_read_their_own_keys() {
    for engine in ENGINES {
        let (db, table) = open(engine);
        let db = Arc::new(db);
        let stop = Arc::new(AtomicBool::new(false));
        // Deletes and re-inserts keys while the reader hints and reads
        // them, so hinted rows become absent, get unlinked (`REMOVED`) and
        // are replaced by new rows of the same key.
        let churn = {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut version = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = version % 16;
                    db.run(|tx| tx.delete(table, &key.to_be_bytes()).map(|_| ())).unwrap();
                    db.run(|tx| tx.put(table, &key.to_be_bytes(), &value_of(key, version))).unwrap();
                    version += 1;
                }
                version
            })
        };
        let mut reads = 0u64;
        for round in 0..2_000u64 {
            let result = db.run(|tx| {
                let first = round % 16;
                for key in (first..16).chain(0..first) {
                    tx.prefetch(table, &key.to_be_bytes());
                }
                for key in (first..16).chain(0..first) {
                    if let Some(found) = tx.get_with(table, &key.to_be_bytes(), key_in)? {
                        if found != key {
                            return Err(TxError::Rollback);
                        }
                    }
                }
                Ok(())
            });
            let committed = result.map(|finished| finished.committed().is_some());
            assert!(
                matches!(committed, Ok(true)),
                "{engine:?}: round {round} read another key's row or failed ({committed:?})"
            );
            reads += 16;
        }
        stop.store(true, Ordering::Relaxed);
        let versions = churn.join().unwrap();
        assert!(versions > 1, "{engine:?}: the churn ran");
        assert_eq!(reads, 32_000);
    }
}
