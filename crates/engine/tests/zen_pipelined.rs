//! Zen's pipelined commits (`Worker::run_pipelined`): one fence per
//! writing transaction, as the paper's Algorithm 1 issues (zen-plus.txt
//! §3.3.1: the LP line is flushed and its fence left to a later one), while
//! `Database::run` stays durable when it returns; and every way a commit
//! left unfenced becomes durable: the worker's next commit, its drain after
//! `Worker::ACK_FENCE_DELAY`, a wait for it, another worker that reads it,
//! the epoch thread's bound. Fences are counted with the PM backend's
//! per-thread counters. (Crash consistency: `tests/zen_crash.rs`.)

use pmtx_engine::{Database, DbOptions, EngineKind, Outcome, TableId, TableSchema, Worker};
use pmtx_pm::thread_counters;
use std::time::{Duration, Instant};

const KEYS: u64 = 64;

fn options(engine: EngineKind) -> DbOptions {
    let mut options = DbOptions::in_memory(
        engine,
        vec![TableSchema::hashed("t").max_value_len(64), TableSchema::ordered("u").max_value_len(64)],
    );
    options.workers = 2;
    options
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

/// A database of `engine` with `KEYS` rows in both tables.
fn loaded(engine: EngineKind) -> (Database, TableId, TableId) {
    let db = Database::open(options(engine)).unwrap();
    let (t, u) = (db.table_id("t").unwrap(), db.table_id("u").unwrap());
    // On an explicit worker: `Database::run` would keep a slot lent.
    db.worker(0)
        .unwrap()
        .run(|tx| {
            for k in 0..KEYS {
                tx.put(t, &key(k), b"initial")?;
                tx.put(u, &key(k), b"initial")?;
            }
            Ok(())
        })
        .unwrap();
    (db, t, u)
}

/// Fences issued by the calling thread while `work` runs.
fn fences_of<T>(work: impl FnOnce() -> T) -> (T, u64) {
    let before = thread_counters();
    let result = work();
    (result, thread_counters().since(&before).fences)
}

fn counter(db: &Database, name: &str) -> u64 {
    db.stats().engine_counters.iter().find(|(n, _)| *n == name).map_or(0, |(_, value)| *value)
}

/// Each pipelined writing commit issues exactly one fence (the first of
/// Algorithm 1, which also makes the previous commit's LP line durable),
/// a pipelined read-only one none, a `run` two; every pipelined commit is
/// acknowledged, the last by `wait_all_acknowledged` with one more fence.
#[test]
fn a_pipelined_writing_commit_issues_one_fence() {
    for engine in [EngineKind::Zen, EngineKind::ZenPlus] {
        let (db, t, u) = loaded(engine);
        let mut worker = db.worker(0).unwrap();
        let mut acknowledged = 0;
        let mut drained_fences = 0;
        for k in 0..200u64 {
            let value = k.to_le_bytes();
            let (result, fences) = fences_of(|| {
                worker.run_pipelined(k as u32, false, |tx| {
                    tx.put(t, &key(k % KEYS), &value)?;
                    tx.put(u, &key((k * 7) % KEYS), &value)
                })
            });
            assert_eq!(result.unwrap().0, Outcome::Committed(()));
            assert_eq!(fences, 1, "{engine}: writing commit {k} issued {fences} fences");
            let (result, fences) = fences_of(|| {
                worker.run_pipelined(0, true, |tx| tx.get(t, &key(k % KEYS)).map(|value| value.is_some()))
            });
            assert_eq!(result.unwrap().0, Outcome::Committed(true));
            assert_eq!(fences, 0, "{engine}: a read-only commit fenced");
            ((), drained_fences) = {
                let ((), fences) = fences_of(|| worker.drain_acknowledged(|_, _| acknowledged += 1));
                ((), drained_fences + fences)
            };
        }
        // The drain fences only a commit left alone for the delay (none in a
        // loop this tight, unless the thread was descheduled).
        assert!(drained_fences <= 20, "{engine}: drains issued {drained_fences} fences");
        let ((), fences) = fences_of(|| worker.wait_all_acknowledged(|_, _| acknowledged += 1).unwrap());
        assert!(fences <= 1, "{engine}: the last commit's fence");
        assert_eq!(acknowledged, 400, "{engine}");
        let (finished, fences) = fences_of(|| worker.run(|tx| tx.put(t, &key(0), b"durable")).unwrap());
        assert_eq!(finished.outcome, Outcome::Committed(()));
        assert_eq!(fences, 2, "{engine}: `run` fences the LP line at once");
        drop(worker);
        db.close().unwrap();
    }
}

/// A commit left unfenced is fenced by the worker's drain once
/// `Worker::ACK_FENCE_DELAY` passed since a drain first found it not
/// durable, not before; then acknowledged.
#[test]
fn a_drain_fences_a_commit_left_alone_for_the_delay() {
    let (db, t, _) = loaded(EngineKind::Zen);
    let mut worker = db.worker(0).unwrap();
    worker.run_pipelined(1, false, |tx| tx.put(t, &key(1), b"one")).unwrap();
    let mut acknowledged = Vec::new();
    let ((), fences) = fences_of(|| worker.drain_acknowledged(|tag, _| acknowledged.push(tag)));
    assert_eq!(fences, 0, "the first drain only notes the commit");
    assert!(acknowledged.is_empty() || counter(&db, "unfenced_fenced_again") > 0, "acknowledged unfenced");
    std::thread::sleep(Worker::ACK_FENCE_DELAY * 2);
    let ((), fences) = fences_of(|| worker.drain_acknowledged(|tag, _| acknowledged.push(tag)));
    assert_eq!(acknowledged, vec![1]);
    // Unless the epoch thread fenced it meanwhile (a descheduled test).
    assert!(fences <= 1);
    assert_eq!(worker.pending_acknowledgements(), 0);
    drop(worker);
    db.close().unwrap();
}

/// A worker whose transaction overwrites a row of another worker's
/// unfenced commit makes that commit durable with its own first fence (it
/// flushes the commit's LP line with its tuples: no fence more than its
/// own) and completes it before its install: the other worker's ticket is
/// then durable, and its drain fences nothing.
#[test]
fn a_writer_over_an_unfenced_commit_makes_it_durable_with_its_own_fence() {
    let (db, t, _) = loaded(EngineKind::Zen);
    let mut writer = db.worker(0).unwrap();
    let mut other = db.worker(1).unwrap();
    // Its region's first chunk (the pool's chunk table is fenced) first.
    other.run(|tx| tx.put(t, &key(KEYS - 1), b"warm")).unwrap();
    writer.run_pipelined(1, false, |tx| tx.put(t, &key(5), b"unfenced")).unwrap();
    let fenced_again = counter(&db, "unfenced_fenced_again");
    let (result, fences) = fences_of(|| {
        other.run_pipelined(1, false, |tx| {
            let seen = tx.get(t, &key(5))?.expect("present");
            tx.put(t, &key(5), &[&seen[..], b"+1"].concat())?;
            Ok(seen)
        })
    });
    assert_eq!(result.unwrap().0, Outcome::Committed(b"unfenced".to_vec()));
    assert_eq!(fences, 1, "the overwriting commit's own fence covers the other's LP line");
    assert_eq!(counter(&db, "unfenced_fenced_again"), fenced_again, "no fence of its own");
    let mut acknowledged = 0;
    let ((), fences) = fences_of(|| writer.drain_acknowledged(|_, _| acknowledged += 1));
    assert_eq!((acknowledged, fences), (1, 0), "durable and completed already");
    other.wait_all_acknowledged(|_, _| {}).unwrap();
    drop((writer, other));
    db.close().unwrap();
}

/// A pipelined read-only transaction that read another worker's unfenced
/// commit fences nothing: it takes that commit's ticket, so it is
/// acknowledged once that commit is durable (here: the drain fences it
/// after the delay). One acknowledged at return (`run`) fences it itself.
#[test]
fn a_reader_of_an_unfenced_commit_is_acknowledged_with_it() {
    let (db, t, _) = loaded(EngineKind::Zen);
    let mut writer = db.worker(0).unwrap();
    let mut reader = db.worker(1).unwrap();
    writer.run_pipelined(1, false, |tx| tx.put(t, &key(6), b"unfenced")).unwrap();
    let (result, fences) = fences_of(|| reader.run_pipelined(7, true, |tx| tx.get(t, &key(6))));
    assert_eq!(result.unwrap().0, Outcome::Committed(Some(b"unfenced".to_vec())));
    assert_eq!(fences, 0);
    let mut acknowledged = Vec::new();
    reader.wait_all_acknowledged(|tag, _| acknowledged.push(tag)).unwrap();
    assert_eq!(acknowledged, vec![7]);
    // The reader's wait made the writer's commit durable.
    let mut drained = 0;
    let ((), fences) = fences_of(|| writer.drain_acknowledged(|_, _| drained += 1));
    assert_eq!((drained, fences), (1, 0));
    writer.run_pipelined(2, false, |tx| tx.put(t, &key(6), b"again")).unwrap();
    let (finished, fences) = fences_of(|| reader.run_read_only(|tx| tx.get(t, &key(6))).unwrap());
    assert_eq!(finished.committed().flatten().as_deref(), Some(&b"again"[..]));
    assert_eq!(fences, 1, "`run` fences the commit it read before it returns");
    writer.wait_all_acknowledged(|_, _| {}).unwrap();
    drop((writer, reader));
    db.close().unwrap();
}

/// A pipelined commit whose worker does nothing more is made durable by
/// the engine's epoch thread within two of its steps (5 ms at most each).
#[test]
fn the_epoch_thread_fences_a_commit_whose_worker_went_quiet() {
    let (db, t, _) = loaded(EngineKind::Zen);
    let (outcome, pending) = db.run_pipelined(|tx| tx.put(t, &key(2), b"quiet")).unwrap();
    assert_eq!(outcome, Outcome::Committed(()));
    let pending = pending.expect("a commit");
    let started = Instant::now();
    while !db.is_durable(&pending) {
        assert!(started.elapsed() < Duration::from_secs(5), "never made durable");
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(counter(&db, "unfenced_fenced_again") >= 1);
    db.close().unwrap();
}

/// `run` returns only once durable, even for a read-only transaction after
/// this worker's unfenced commit (whose row it may have read): its wait
/// fences that commit.
#[test]
fn run_after_a_pipelined_commit_returns_once_it_is_durable() {
    let (db, t, _) = loaded(EngineKind::Zen);
    let mut worker = db.worker(0).unwrap();
    worker.run_pipelined(1, false, |tx| tx.put(t, &key(3), b"pipelined")).unwrap();
    let (finished, fences) = fences_of(|| worker.run_read_only(|tx| tx.get(t, &key(3))).unwrap());
    assert_eq!(finished.committed().flatten().as_deref(), Some(&b"pipelined"[..]));
    assert!(fences <= 1, "at most the unfenced commit's fence");
    let mut acknowledged = 0;
    let ((), fences) = fences_of(|| worker.drain_acknowledged(|_, _| acknowledged += 1));
    assert_eq!((acknowledged, fences), (1, 0), "durable when `run` returned");
    drop(worker);
    db.close().unwrap();
}
