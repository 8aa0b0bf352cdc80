//! A durable FIFO queue shared by producer and consumer threads.
//!
//! ```sh
//! cargo run --release -p pmtx-engine --example queue -- /tmp/queue.pool --items 100000
//! ```
//!
//! The pool uses `dbxn` (a synchronous redo log: each operation is durable
//! microseconds after it commits). Items live in an ordered table under their sequence number; a `meta`
//! row holds the next sequence to enqueue (tail) and to dequeue (head).
//! Producers append, consumers take from the head, all through
//! `Database::run` from plain threads. At the end every item was
//! dequeued exactly once and in order per producer, and the pool (reopened
//! from its stored schema) holds an empty queue. A run that finds items
//! left by a killed run drains them first.

use pmtx_engine::{AbortReason, Database, DbError, DbOptions, EngineKind, TableSchema, TxError};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const HEAD: &[u8] = b"head";
const TAIL: &[u8] = b"tail";

fn counter(row: &[u8]) -> u64 {
    u64::from_le_bytes(row.try_into().expect("8-byte counters"))
}

fn open(path: &Path, threads: usize) -> Result<Database, DbError> {
    if path.exists() {
        let mut options = DbOptions::from_pool(path)?;
        options.workers = threads;
        return Database::open(options);
    }
    let tables = vec![TableSchema::ordered("items").max_value_len(16), TableSchema::hashed("meta").max_value_len(8)];
    let mut options = DbOptions::new(EngineKind::Dbxn, tables, path).create_if_missing(true);
    options.workers = threads;
    let db = Database::open(options)?;
    let meta = db.table_id("meta")?;
    db.run(|tx| {
        tx.put(meta, HEAD, &0u64.to_le_bytes())?;
        tx.put(meta, TAIL, &0u64.to_le_bytes())
    })?;
    Ok(db)
}

/// Appends `item` (producer id and its own sequence) at the tail.
fn enqueue(db: &Database, producer: u64, number: u64) -> Result<(), DbError> {
    let (items, meta) = (db.table_id("items")?, db.table_id("meta")?);
    let mut item = [0u8; 16];
    item[..8].copy_from_slice(&producer.to_le_bytes());
    item[8..].copy_from_slice(&number.to_le_bytes());
    db.run(|tx| {
        let tail = tx.get_with(meta, TAIL, counter)?.expect("queue initialised");
        tx.insert(items, &tail.to_be_bytes(), &item)?;
        tx.put(meta, TAIL, &(tail + 1).to_le_bytes())
    })?;
    Ok(())
}

/// Takes the item at the head; `None` if the queue is empty.
fn dequeue(db: &Database) -> Result<Option<(u64, u64)>, DbError> {
    let (items, meta) = (db.table_id("items")?, db.table_id("meta")?);
    let taken = db.run(|tx| {
        let head = tx.get_with(meta, HEAD, counter)?.expect("queue initialised");
        let tail = tx.get_with(meta, TAIL, counter)?.expect("queue initialised");
        if head == tail {
            return Err(TxError::Rollback);
        }
        // Under optimistic protocols a body can read a head that another
        // consumer has just taken: the item is gone, and validation would
        // reject this attempt anyway. Abort it; the retry reads afresh.
        let Some(item) = tx.get(items, &head.to_be_bytes())? else {
            return Err(TxError::Abort(AbortReason::ReadValidation));
        };
        tx.delete(items, &head.to_be_bytes())?;
        tx.put(meta, HEAD, &(head + 1).to_le_bytes())?;
        Ok((counter(&item[..8]), counter(&item[8..])))
    })?;
    Ok(taken.committed())
}

/// Producers enqueue `items` in all while consumers dequeue them; returns
/// what each consumer took, in its order.
fn run(path: &Path, items: u64, producers: u64, consumers: u64) -> Result<Vec<Vec<(u64, u64)>>, DbError> {
    let db = Arc::new(open(path, (producers + consumers) as usize)?);
    // Items a killed earlier run left behind are drained first.
    let mut leftover = 0;
    while dequeue(&db)?.is_some() {
        leftover += 1;
    }
    if leftover > 0 {
        eprintln!("drained {leftover} items left by an earlier run");
    }
    let produced = Arc::new(AtomicU64::new(0));
    let taken = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for producer in 0..producers {
        let (db, produced) = (Arc::clone(&db), Arc::clone(&produced));
        let share = items / producers + u64::from(producer < items % producers);
        threads.push(std::thread::spawn(move || -> Result<(), DbError> {
            for number in 0..share {
                enqueue(&db, producer, number)?;
                produced.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    let consumed = Arc::new(AtomicU64::new(0));
    for _ in 0..consumers {
        let (db, consumed, taken) = (Arc::clone(&db), Arc::clone(&consumed), Arc::clone(&taken));
        threads.push(std::thread::spawn(move || -> Result<(), DbError> {
            let mut mine = Vec::new();
            while consumed.load(Ordering::Relaxed) < items {
                match dequeue(&db)? {
                    Some(item) => {
                        mine.push(item);
                        consumed.fetch_add(1, Ordering::Relaxed);
                    }
                    None => std::thread::yield_now(),
                }
            }
            taken.lock().expect("no consumer panicked").push(mine);
            Ok(())
        }));
    }
    for thread in threads {
        thread.join().expect("queue thread panicked")?;
    }
    eprintln!("{} enqueued, {} dequeued", produced.load(Ordering::Relaxed), consumed.load(Ordering::Relaxed));
    Arc::into_inner(db).expect("threads joined").close()?;
    Ok(Arc::into_inner(taken).expect("threads joined").into_inner().expect("no consumer panicked"))
}

/// Checks that every item was taken once, each producer's in order;
/// returns a description of the first violation.
fn check(taken: &[Vec<(u64, u64)>], items: u64, producers: u64) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for consumer in taken {
        let mut last = vec![None; producers as usize];
        for &(producer, number) in consumer {
            if !seen.insert((producer, number)) {
                return Err(format!("item {number} of producer {producer} was dequeued twice"));
            }
            if last[producer as usize].is_some_and(|previous| previous >= number) {
                return Err(format!("producer {producer}'s items left out of order at {number}"));
            }
            last[producer as usize] = Some(number);
        }
    }
    if seen.len() as u64 != items {
        return Err(format!("{} distinct items dequeued of {items}", seen.len()));
    }
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut pool, mut items) = (None, 10_000u64);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--items" => items = args.next().and_then(|n| n.parse().ok()).unwrap_or_else(|| usage()),
            other if other.starts_with("--") || pool.is_some() => usage(),
            other => pool = Some(other.to_string()),
        }
    }
    let pool = pool.unwrap_or_else(|| usage());
    let (producers, consumers) = (2, 2);
    let outcome = run(Path::new(&pool), items, producers, consumers)
        .map_err(|error| error.to_string())
        .and_then(|taken| check(&taken, items, producers));
    match outcome {
        Ok(()) => println!("ok: {items} items through the queue, each once, in order per producer"),
        Err(problem) => {
            eprintln!("error: {problem}");
            std::process::exit(1);
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: queue POOL [--items N]");
    std::process::exit(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_passes_once_and_the_reopened_queue_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("queue.pool");
        for _ in 0..2 {
            let taken = run(&pool, 1_000, 2, 3).unwrap();
            check(&taken, 1_000, 2).unwrap();
        }
        let db = Database::open_existing(&pool).unwrap();
        let (items, meta) = (db.table_id("items").unwrap(), db.table_id("meta").unwrap());
        let mut left = 0;
        db.for_each_row(items, |_, _| left += 1).unwrap();
        let mut counters = Vec::new();
        db.for_each_row(meta, |key, value| counters.push((key.to_vec(), counter(value)))).unwrap();
        counters.sort();
        assert_eq!(left, 0, "the queue is empty");
        assert_eq!(counters, vec![(HEAD.to_vec(), 2_000), (TAIL.to_vec(), 2_000)]);
        db.close().unwrap();
    }

    #[test]
    fn the_check_catches_a_duplicate_and_a_reordering() {
        assert!(check(&[vec![(0, 0), (0, 1)], vec![(0, 1)]], 2, 1).unwrap_err().contains("twice"));
        assert!(check(&[vec![(0, 1), (0, 0)]], 2, 1).unwrap_err().contains("out of order"));
        assert!(check(&[vec![(0, 0)]], 2, 1).unwrap_err().contains("1 distinct items"));
    }
}
