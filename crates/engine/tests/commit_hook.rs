//! A worker's commit hook sees every effective write once, with the row's
//! value before and after it: what pmtx-replica ships and keeps to roll
//! back. `update_with` on a recorded worker reads the row once and records
//! that read as the before-image.

use pmtx_engine::{
    CommitHook, Database, DbOptions, DbResult, EngineKind, TableId, TableSchema, Transaction, TxResult, WriteRecorder,
};
use std::sync::{Arc, Mutex};

/// One recorded write: table, key, before, after.
type Image = (u32, Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);
type Seen = Arc<Mutex<Vec<Image>>>;

struct Recorder {
    seen: Seen,
    attempt: Vec<Image>,
}

impl WriteRecorder for Recorder {
    fn record(&mut self, table: TableId, key: &[u8], before: Option<&[u8]>, after: Option<&[u8]>) {
        self.attempt.push((table.0, key.to_vec(), before.map(<[u8]>::to_vec), after.map(<[u8]>::to_vec)));
    }
}

impl CommitHook for Recorder {
    fn begin_attempt(&mut self, _read_only: bool) {
        self.attempt.clear();
    }
    fn before_commit(&mut self, _tx: &mut Transaction<'_>) -> TxResult<()> {
        Ok(())
    }
    fn after_commit(&mut self, committed: bool) {
        if committed {
            self.seen.lock().unwrap().append(&mut self.attempt);
        }
    }
    fn end_attempt(&mut self) {}
    fn last_token(&self) -> u64 {
        0
    }
    fn is_acknowledged(&self, _token: u64) -> bool {
        true
    }
    fn wait_acknowledged(&mut self, _token: u64) -> DbResult<()> {
        Ok(())
    }
}

fn add(row: &mut [u8], amount: u64) {
    let value = u64::from_le_bytes(row[..8].try_into().unwrap()) + amount;
    row.copy_from_slice(&value.to_le_bytes());
}

#[test]
fn update_with_records_the_row_it_read_and_the_row_it_wrote() {
    for engine in [EngineKind::Zen, EngineKind::Silo] {
        let mut options = DbOptions::in_memory(engine, vec![TableSchema::ordered("t").max_key_len(8).max_value_len(8)]);
        options.workers = 2;
        let db = Database::open(options).unwrap();
        let table = db.table_id("t").unwrap();
        db.run(|tx| tx.put(table, b"a", &5u64.to_le_bytes())).unwrap();
        let seen: Seen = Arc::default();
        let mut worker = db.worker(1).unwrap();
        worker.set_commit_hook(Box::new(Recorder { seen: Arc::clone(&seen), attempt: Vec::new() }));
        let finished = worker
            .run(|tx| {
                let first = tx.update_with(table, b"a", |row| add(row, 1))?;
                let second = tx.update_with(table, b"a", |row| add(row, 10))?;
                let absent = tx.update_with(table, b"b", |row| add(row, 100))?;
                Ok((first, second, absent))
            })
            .unwrap();
        assert_eq!(finished.committed(), Some((Some(()), Some(()), None)), "{engine:?}");
        let value = |v: u64| Some(v.to_le_bytes().to_vec());
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                (table.0, b"a".to_vec(), value(5), value(6)),
                // The second update reads the first's write.
                (table.0, b"a".to_vec(), value(6), value(16)),
            ],
            "{engine:?}: one record per effective update, none for the absent key"
        );
        drop(worker);
        let stored = db.run_read_only(|tx| tx.get(table, b"a")).unwrap().committed().flatten();
        assert_eq!(stored, value(16), "{engine:?}");
    }
}
