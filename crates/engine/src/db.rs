//! The embedding API: open a [`Database`] and run transaction bodies with
//! automatic retry, either from any thread ([`Database::run`], which lends
//! the calling thread a worker slot) or on an explicit [`Worker`] per thread
//! (benchmarks, pipelined acknowledgements); or step by step as an
//! [`OpenTransaction`] ([`Database::begin`]) for callers that cannot pass a
//! body, such as the C API.
//!
//! ```
//! use pmtx_engine::{Database, DbOptions, EngineKind, TableSchema, TableId};
//! let options = DbOptions::in_memory(EngineKind::Silo, vec![TableSchema::ordered("accounts")]);
//! let db = Database::open(options).unwrap();
//! let accounts = db.table_id("accounts").unwrap();
//! let mut worker = db.worker(0).unwrap();
//! worker.run(|tx| tx.put(accounts, b"alice", b"100")).unwrap();
//! ```

use crate::engine::{
    Acknowledgement, CommitTicket, Engine, EngineKind, EngineStats, EngineWorker, ScanRequest, WriteOp,
};
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::index::ScanDirection;
use crate::options::DbOptions;
use crate::schema::TableId;
use rand::{Rng, SeedableRng};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// An open database.
pub struct Database {
    engine: Arc<dyn Engine>,
    /// Which worker ids a live [`Worker`] holds.
    workers_in_use: Arc<[AtomicBool]>,
    /// Workers [`Database::run`] lends to callers, idle between calls
    /// (shared with the [`OpenTransaction`]s that hold one).
    lent: Arc<LentWorkers>,
    options: DbOptions,
    closed: bool,
}

/// The idle workers of [`Database::run`] and its siblings, each with the
/// thread that used it last: a thread gets its own worker back when it is
/// idle, so its log segment and epoch announcement stay warm in its cache.
#[derive(Default)]
struct LentWorkers {
    idle: Mutex<Vec<(Worker, ThreadId)>>,
    returned: Condvar,
}

impl Database {
    /// Opens (recovering as needed) a database. A pool file that does not
    /// exist is created only if [`DbOptions::create_if_missing`] says so;
    /// otherwise the open fails with [`DbError::PoolNotFound`].
    pub fn open(options: DbOptions) -> DbResult<Self> {
        options.validate()?;
        let engine = crate::engines::open(&options)?;
        Ok(Self::with_engine(engine, options))
    }

    /// Opens the pool file at `path` with the engine, protocol and tables
    /// it stores, declaring nothing ([`DbOptions::from_pool`] with the
    /// other defaults). A pool with secondary indexes needs their key
    /// functions: use `DbOptions::from_pool(path)?.secondary_key(..)`.
    pub fn open_existing(path: impl Into<std::path::PathBuf>) -> DbResult<Self> {
        Self::open(DbOptions::from_pool(path)?)
    }

    /// Opens over an existing pool (tests keep the pool to take crash images).
    pub fn open_on_pool<B: pmtx_pm::PmBackend>(options: DbOptions, pool: Arc<pmtx_pm::Pool<B>>) -> DbResult<Self> {
        options.validate()?;
        let engine = crate::engines::open_on_pool(&options, pool)?;
        Ok(Self::with_engine(engine, options))
    }

    fn with_engine(engine: Arc<dyn Engine>, options: DbOptions) -> Self {
        let workers_in_use = (0..options.workers).map(|_| AtomicBool::new(false)).collect();
        Self { engine, workers_in_use, lent: Arc::default(), options, closed: false }
    }

    /// The engine kind.
    pub fn engine(&self) -> EngineKind {
        self.engine.kind()
    }

    /// The options used.
    pub fn options(&self) -> &DbOptions {
        &self.options
    }

    /// Table id by name.
    pub fn table_id(&self, name: &str) -> DbResult<TableId> {
        self.engine
            .schemas()
            .iter()
            .position(|schema| schema.name == name)
            .map(|position| TableId(position as u32))
            .ok_or_else(|| DbError::UnknownTable(name.to_string()))
    }

    /// Secondary index position by table and index name.
    pub fn secondary_id(&self, table: TableId, name: &str) -> DbResult<u32> {
        let schema = self.schema(table)?;
        let position = schema.secondaries.iter().position(|secondary| secondary.name == name);
        position
            .map(|position| position as u32)
            .ok_or_else(|| DbError::UnknownIndex { table: schema.name.clone(), index: name.to_string() })
    }

    /// The schema of table `id`.
    fn schema(&self, id: TableId) -> DbResult<&crate::schema::TableSchema> {
        self.engine.schemas().get(id.0 as usize).ok_or_else(|| DbError::UnknownTable(format!("#{}", id.0)))
    }

    /// The DRAM table `id` (for direct inspection by checks and tests);
    /// `None` on an engine that keeps no rows as DRAM records.
    pub(crate) fn dram_table(&self, id: TableId) -> DbResult<Option<&crate::storage::table::Table>> {
        self.schema(id)?;
        Ok(self.engine.dram_tables().map(|tables| &tables[id.0 as usize]))
    }

    /// A worker for thread slot `id` (< `options.workers`). One worker per
    /// id at a time: [`DbError::WorkerInUse`] while another worker of `id`
    /// exists (dropping it frees the id). [`DbError::OutOfSpace`] if the
    /// pool has no room for the worker's log.
    pub fn worker(&self, id: usize) -> DbResult<Worker> {
        if id >= self.options.workers {
            return Err(DbError::InvalidConfig(format!(
                "worker {id} requested but the database was opened for {} workers",
                self.options.workers
            )));
        }
        if self.workers_in_use[id].swap(true, Ordering::AcqRel) {
            return Err(DbError::WorkerInUse(id));
        }
        // Frees the id again if the engine refuses the worker.
        let slot = WorkerSlot { in_use: Arc::clone(&self.workers_in_use), id };
        let inner = Arc::clone(&self.engine).worker(id)?;
        Ok(Worker {
            inner,
            engine: Arc::clone(&self.engine),
            max_attempts: self.options.max_attempts,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(self.options.seed ^ (id as u64).wrapping_mul(0x9E37)),
            stats: WorkerStats::default(),
            pending: std::collections::VecDeque::new(),
            unfenced_since: None,
            hook: None,
            _slot: slot,
        })
    }

    /// Runs `body` as a transaction from whatever thread calls it, with the
    /// semantics of [`Worker::run`] (aborts retried, returns once the commit
    /// is durable). The call borrows a worker slot for its duration: the
    /// one this thread used last if it is idle, else any idle one, else a
    /// new one for a free id; when every one of the `options.workers` slots
    /// is held (by explicit [`Worker`]s or other threads' calls) it waits
    /// up to [`DbOptions::worker_wait`], then fails with
    /// [`DbError::NoFreeWorker`]. Any number of threads may call it.
    ///
    /// Do not call it from inside a transaction body, or while this thread
    /// holds explicit workers for every slot: the call would wait for a
    /// slot that only this thread can free.
    pub fn run<R>(&self, mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>) -> DbResult<Finished<R>> {
        self.with_lent_worker(|worker| worker.run(&mut body))
    }

    /// Like [`Database::run`] for a body that only reads.
    pub fn run_read_only<R>(&self, mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>) -> DbResult<Finished<R>> {
        self.with_lent_worker(|worker| worker.run_read_only(&mut body))
    }

    /// Like [`Database::run`], but returns once the transaction commits,
    /// without waiting for durability: the [`Pending`] says when the commit
    /// is durable ([`Database::is_durable`], [`Database::wait_durable`]).
    /// A pending commit is lost in a crash until it is durable. Zen leaves
    /// the fence of such a commit to a later one, as [`Worker::run_pipelined`]
    /// does (its bound is there); [`Database::wait_durable`] issues it.
    pub fn run_pipelined<R>(
        &self,
        mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> DbResult<(Outcome<R>, Option<Pending>)> {
        self.with_lent_worker(|worker| {
            worker.engine.background_error()?;
            worker.inner.set_acknowledgement(Acknowledgement::EachAlone);
            let start = Instant::now();
            let (outcome, _) = worker.attempt(false, &mut body)?;
            worker.inner.idle();
            Ok(match outcome {
                Outcome::Committed((value, ticket)) => (Outcome::Committed(value), Some(Pending { ticket, start })),
                Outcome::RolledBack => (Outcome::RolledBack, None),
            })
        })
    }

    /// Whether the commit `pending` is durable now.
    pub fn is_durable(&self, pending: &Pending) -> bool {
        self.engine.is_durable(pending.ticket)
    }

    /// Waits until the commit `pending` is durable and returns its latency
    /// from the start of its transaction; [`DbError::Closed`] if the
    /// database is crashed or closed first. A Zen commit whose fence was
    /// left to a later one is fenced by this call, on whichever worker slot
    /// it borrows (`CommitTicket::Flushed`).
    pub fn wait_durable(&self, pending: Pending) -> DbResult<Duration> {
        if !self.engine.is_durable(pending.ticket) {
            self.with_lent_worker(|worker| worker.inner.wait_durable(pending.ticket))?;
        }
        Ok(pending.start.elapsed())
    }

    /// Begins a transaction to run step by step ([`OpenTransaction`]), on a
    /// worker slot lent as [`Database::run`] lends one (waiting up to
    /// [`DbOptions::worker_wait`] when every slot is held). The slot stays
    /// held until the transaction commits, rolls back or is dropped.
    pub fn begin(&self, read_only: bool) -> DbResult<OpenTransaction> {
        let mut worker = self.lend_worker()?;
        if let Err(error) = worker.engine.background_error() {
            self.lent.give_back(worker);
            return Err(error);
        }
        worker.inner.set_acknowledgement(Acknowledgement::AtReturn);
        worker.inner.begin(read_only, 1);
        Ok(OpenTransaction {
            worker: Some(worker),
            lent: Arc::clone(&self.lent),
            read_only,
            attempts: 1,
            start: Instant::now(),
            state: StepState::Active,
            reads: 0,
            writes: 0,
        })
    }

    /// Lends the calling thread a worker for `work` (see [`Database::run`]).
    fn with_lent_worker<T>(&self, work: impl FnOnce(&mut Worker) -> DbResult<T>) -> DbResult<T> {
        let mut worker = self.lend_worker()?;
        // If `work` panics, the worker (whose attempt was aborted on the way
        // out) is dropped by the unwinding, freeing its id, and never lent
        // again.
        let result = work(&mut worker);
        self.lent.give_back(worker);
        result
    }

    fn lend_worker(&self) -> DbResult<Worker> {
        let this_thread = std::thread::current().id();
        let started = Instant::now();
        let mut idle = self.lent.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let own = idle.iter().position(|(_, last)| *last == this_thread);
            if let Some(position) = own.or(if idle.is_empty() { None } else { Some(idle.len() - 1) }) {
                return Ok(idle.swap_remove(position).0);
            }
            for id in 0..self.options.workers {
                match self.worker(id) {
                    Ok(worker) => return Ok(worker),
                    Err(DbError::WorkerInUse(_)) => continue,
                    Err(error) => return Err(error),
                }
            }
            let waited = started.elapsed();
            if waited >= self.options.worker_wait {
                return Err(DbError::NoFreeWorker { workers: self.options.workers, waited });
            }
            // Lent workers come back with a notification; an explicit
            // worker's drop frees its id without one, hence the bounded wait.
            let slice = (self.options.worker_wait - waited).min(Duration::from_millis(5));
            idle = self.lent.returned.wait_timeout(idle, slice).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Engine statistics.
    pub fn stats(&self) -> EngineStats {
        self.engine.stats()
    }

    /// The worker a transaction whose keys are `keys` should run on, for
    /// an application that dispatches transactions to its worker threads:
    /// `zen+` on several NUMA nodes answers with a worker of the node most
    /// of the keys' partitions are mapped to (Algorithm 3 of zen-plus.txt
    /// §4.2.2, balancing the nodes' pending transactions); other engines
    /// answer `None` (no preference).
    pub fn assign_transaction(&self, keys: &[(TableId, &[u8])]) -> Option<usize> {
        self.engine.assign_transaction(keys)
    }

    /// Audits the engine's own structures (for Zen: no heap slot both
    /// live and free); call it with no transaction running. `Ok(None)` if
    /// the engine has nothing to audit beyond what transactions read.
    pub fn check_structure(&self) -> DbResult<Option<String>> {
        self.engine.check_structure()
    }

    /// Visits every present row of `table` as `(key, value)`: in key order
    /// for ordered tables, in no particular order for hash tables (which
    /// transactions cannot scan). Works on every engine. For checks, dumps
    /// and tests: call it with no transaction running; it is not a
    /// transaction and takes no snapshot.
    pub fn for_each_row(&self, table: TableId, mut visit: impl FnMut(&[u8], &[u8])) -> DbResult<()> {
        self.engine.for_each_row(table, &mut visit)
    }

    /// Takes a checkpoint now (log-based durable engines).
    pub fn checkpoint(&self) -> DbResult<()> {
        self.engine.checkpoint()
    }

    /// Abandons the database as a process crash would, for recovery
    /// measurements: stops the engine's background threads (epoch ticker,
    /// checkpointer; a checkpoint under way finishes first) without making
    /// anything more durable and without marking a clean shutdown, so the
    /// next open of the pool runs full recovery. Workers may still be
    /// running: their next writing commit fails with [`DbError::Poisoned`],
    /// commits whose durability is pending are never acknowledged (do not
    /// wait for them), and a log write already under way may still reach
    /// the pool, as it would in a crash a moment later. After this, `close`
    /// is a no-op. The pool stays mapped until the database and every
    /// [`Worker`] are dropped; over a file on the `direct`, `emulated` or
    /// `sim` backend the file then holds what a killed process leaves
    /// (every store issued, flushed or not), so reopen it only after that.
    pub fn crash(&self) -> DbResult<()> {
        self.lent.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.engine.close_on_drop()
    }

    /// Makes everything durable and marks a clean shutdown. Also returns a
    /// failure of the engine's background work no transaction has reported
    /// yet ([`DbError::CheckpointFailed`], after a clean close all the
    /// same; [`DbError::BackgroundPanic`], without the clean-shutdown mark,
    /// so the next open recovers).
    pub fn close(mut self) -> DbResult<()> {
        self.closed = true;
        // Idle lent workers go first, as explicit ones must be dropped
        // before close.
        self.lent.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.engine.close()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.lent.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
        if !self.closed {
            // Dropping without close stops background threads but does not
            // mark a clean shutdown: the next open runs full recovery.
            let _ = self.engine.close_on_drop();
        }
    }
}

impl LentWorkers {
    /// Returns `worker` to the idle ones, as last used by this thread.
    fn give_back(&self, worker: Worker) {
        let this_thread = std::thread::current().id();
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push((worker, this_thread));
        self.returned.notify_one();
    }
}

/// How a transaction ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<R> {
    /// Committed (and durable once acknowledged).
    Committed(R),
    /// The body rolled back.
    RolledBack,
}

/// A finished transaction.
#[derive(Debug)]
pub struct Finished<R> {
    /// Committed or rolled back.
    pub outcome: Outcome<R>,
    /// Attempts made (1 = no abort).
    pub attempts: u32,
    /// From the first attempt's start to the durable acknowledgement.
    pub latency: Duration,
}

impl<R> Finished<R> {
    /// The committed value, if any.
    pub fn committed(self) -> Option<R> {
        match self.outcome {
            Outcome::Committed(value) => Some(value),
            Outcome::RolledBack => None,
        }
    }
}

/// Per-worker counters.
#[derive(Clone, Debug, Default)]
pub struct WorkerStats {
    /// Committed transactions.
    pub committed: u64,
    /// Rolled-back transactions.
    pub rolled_back: u64,
    /// Aborted attempts by reason (index: `AbortReason::index`).
    pub aborts: [u64; AbortReason::ALL.len()],
    /// Tuples the committed transactions read (each `get`, and each row a
    /// scan visited), for per-tuple costs.
    pub tuples_read: u64,
    /// Tuples the committed transactions wrote (each put, insert, update,
    /// delete and `update_with`).
    pub tuples_written: u64,
}

impl WorkerStats {
    /// Total aborted attempts.
    pub fn total_aborts(&self) -> u64 {
        self.aborts.iter().sum()
    }
}

/// A commit of [`Database::run_pipelined`] that may not be durable yet.
#[derive(Debug)]
pub struct Pending {
    ticket: CommitTicket,
    start: Instant,
}

/// A worker id held by a live [`Worker`]; dropping it frees the id.
struct WorkerSlot {
    in_use: Arc<[AtomicBool]>,
    id: usize,
}

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        self.in_use[self.id].store(false, Ordering::Release);
    }
}

/// A thread's handle for running transactions.
pub struct Worker {
    inner: Box<dyn EngineWorker>,
    engine: Arc<dyn Engine>,
    max_attempts: u32,
    rng: rand_chacha::ChaCha8Rng,
    stats: WorkerStats,
    pending: std::collections::VecDeque<(CommitTicket, Instant, u32, u64)>,
    /// The queued commit whose fence was left to a later one (Zen) that
    /// [`Worker::drain_acknowledged`] found not yet durable, and when it
    /// first did.
    unfenced_since: Option<(CommitTicket, Instant)>,
    /// Takes part in each commit (a replicated database's worker).
    hook: Option<Box<dyn CommitHook>>,
    /// IMPORTANT: the last field, so the id is freed only after the engine
    /// worker above is dropped (fields drop in declaration order): a new
    /// worker of the id never overlaps the old one's teardown.
    _slot: WorkerSlot,
}

impl Worker {
    fn attempt<R>(
        &mut self,
        read_only: bool,
        body: &mut dyn FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> DbResult<(Outcome<(R, CommitTicket)>, u32)> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            // The hook first: it may wait (for a roll-back to finish), and a
            // begun attempt would hold back an epoch engine's durability,
            // which the roll-back waits for.
            if let Some(hook) = self.hook.as_deref_mut() {
                hook.begin_attempt(read_only);
            }
            self.inner.begin(read_only, attempts);
            let inner = &mut self.inner;
            let hook = &mut self.hook;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let recorder = hook.as_deref_mut().map(|hook| hook as &mut dyn WriteRecorder);
                let mut tx = Transaction { worker: inner.as_mut(), recorder, read_only, reads: 0, writes: 0 };
                let result = body(&mut tx);
                let (reads, writes) = (tx.reads, tx.writes);
                let Some(hook) = hook.as_deref_mut() else {
                    return (result.and_then(|value| inner.commit().map(|ticket| (value, ticket))), reads, writes);
                };
                // A replicated commit: the hook adds its own writes and
                // sequences the commit (see `CommitHook`).
                let result = result.and_then(|value| {
                    let mut tx = Transaction { worker: inner.as_mut(), recorder: None, read_only, reads: 0, writes: 0 };
                    hook.before_commit(&mut tx)?;
                    let committed = inner.commit();
                    hook.after_commit(committed.is_ok());
                    committed.map(|ticket| (value, ticket))
                });
                (result, reads, writes)
            }));
            if let Some(hook) = self.hook.as_deref_mut() {
                hook.end_attempt();
            }
            let (result, reads, writes) = match result {
                Ok(result) => result,
                Err(panic) => {
                    // A panicking body must not leave its locks held and its
                    // epoch announced: abort the attempt, then let the panic
                    // go on to the caller.
                    self.inner.abort();
                    self.inner.idle();
                    std::panic::resume_unwind(panic);
                }
            };
            match result {
                Ok(done) => {
                    self.stats.committed += 1;
                    self.stats.tuples_read += reads;
                    self.stats.tuples_written += writes;
                    return Ok((Outcome::Committed(done), attempts));
                }
                Err(TxError::Rollback) => {
                    self.inner.abort();
                    self.stats.rolled_back += 1;
                    return Ok((Outcome::RolledBack, attempts));
                }
                Err(TxError::Db(error)) => {
                    self.inner.abort();
                    self.inner.idle();
                    return Err(error);
                }
                Err(TxError::Abort(reason)) => {
                    self.inner.abort();
                    self.stats.aborts[reason.index()] += 1;
                    if attempts >= self.max_attempts {
                        self.inner.idle();
                        return Err(DbError::TooManyAborts { attempts, last: reason });
                    }
                    self.backoff(attempts);
                }
            }
        }
    }

    fn backoff(&mut self, attempts: u32) {
        let ceiling = 1u32 << attempts.min(10);
        let spins = self.rng.gen_range(0..ceiling * 16);
        for _ in 0..spins {
            std::hint::spin_loop();
        }
        if attempts > 64 {
            // A conflicting writer may hold its locks for milliseconds (a
            // synchronous log on disk holds them through an fdatasync):
            // spinning retries would all fall inside the same few lock
            // holds and give up together. Random sleeps of up to 2 ms spread
            // the later attempts over time instead.
            let micros = self.rng.gen_range(0..attempts.min(200) * 10);
            std::thread::sleep(std::time::Duration::from_micros(u64::from(micros)));
        } else if attempts > 16 {
            std::thread::yield_now();
        }
    }

    /// Runs `body` until it commits (retrying aborts), rolls back, or fails;
    /// returns after the commit is durable. Fails before running `body` if
    /// the engine's background work failed ([`DbError::CheckpointFailed`]
    /// once per failed periodic checkpoint, [`DbError::BackgroundPanic`]
    /// for good once a background thread panicked).
    pub fn run<R>(&mut self, mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>) -> DbResult<Finished<R>> {
        self.run_with(false, &mut body)
    }

    /// Like [`Worker::run`] for a body that only reads.
    pub fn run_read_only<R>(
        &mut self,
        mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> DbResult<Finished<R>> {
        self.run_with(true, &mut body)
    }

    fn run_with<R>(
        &mut self,
        read_only: bool,
        body: &mut dyn FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> DbResult<Finished<R>> {
        // A failure of the engine's background work reaches the caller
        // here, before the transaction runs (so it commits nothing).
        self.engine.background_error()?;
        self.inner.set_acknowledgement(Acknowledgement::AtReturn);
        let start = Instant::now();
        let (outcome, attempts) = self.attempt(read_only, body)?;
        let outcome = match outcome {
            Outcome::Committed((value, ticket)) => {
                if let Err(error) = self.inner.wait_durable(ticket) {
                    self.inner.idle();
                    return Err(error);
                }
                Outcome::Committed(value)
            }
            Outcome::RolledBack => Outcome::RolledBack,
        };
        self.inner.idle();
        if let (Some(hook), Outcome::Committed(_)) = (self.hook.as_deref_mut(), &outcome) {
            let token = hook.last_token();
            hook.wait_acknowledged(token)?;
        }
        Ok(Finished { outcome, attempts, latency: start.elapsed() })
    }

    /// Runs `body` without waiting for durability: the commit is queued and
    /// reported by [`Worker::drain_acknowledged`] once durable, with `tag`.
    /// Group commit needs this to keep a thread busy while its epoch fills.
    ///
    /// Zen issues one fence per writing transaction here, as Algorithm 1
    /// of its paper does (zen-plus.txt §3.3.1): the line holding the
    /// commit's last-persisted mark is flushed and left to a later fence.
    /// The commit is durable, and reported, at the first of: this worker's
    /// next writing commit (its first fence); the first
    /// [`Worker::drain_acknowledged`] call made [`Worker::ACK_FENCE_DELAY`]
    /// or more after a drain found it not yet durable (which fences);
    /// [`Worker::wait_all_acknowledged`]
    /// (which fences); the first fence of a transaction of another worker
    /// that overwrites what it wrote (which flushes the line again first);
    /// a wait for it elsewhere ([`Database::wait_durable`]) (which flushes
    /// the line again and fences);
    /// and, should this worker's thread call none of these (or drop the
    /// worker), the engine's epoch thread, within two of its steps (at most
    /// 2 x min(`DbOptions::epoch_interval`, 5 ms)) after it, unless this
    /// worker is committing then (which makes it durable).
    /// [`Database::close`] makes every commit durable.
    pub fn run_pipelined<R>(
        &mut self,
        tag: u32,
        read_only: bool,
        mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> DbResult<(Outcome<R>, u32)> {
        self.engine.background_error()?;
        self.inner.set_acknowledgement(Acknowledgement::InOrder);
        let start = Instant::now();
        let (outcome, attempts) = self.attempt(read_only, &mut body)?;
        // Between transactions the worker is idle, so group commit never
        // waits for a thread that is not running a transaction.
        self.inner.idle();
        Ok(match outcome {
            Outcome::Committed((value, ticket)) => {
                let token = self.hook.as_deref().map_or(0, |hook| hook.last_token());
                self.pending.push_back((ticket, start, tag, token));
                (Outcome::Committed(value), attempts)
            }
            Outcome::RolledBack => (Outcome::RolledBack, attempts),
        })
    }

    /// How long a pipelined commit whose fence was left to a later one
    /// (Zen, [`CommitTicket::Flushed`]) waits, from the first
    /// [`Worker::drain_acknowledged`] call that found it not yet durable,
    /// before a drain issues that fence itself (no later commit of this
    /// worker did).
    pub const ACK_FENCE_DELAY: Duration = Duration::from_micros(100);

    /// Reports (tag, latency to durability) of every queued commit that is
    /// durable now, in commit order. A commit whose fence was left to a
    /// later one (Zen) is fenced here once a drain found it not yet durable
    /// [`Worker::ACK_FENCE_DELAY`] or more ago.
    pub fn drain_acknowledged(&mut self, mut acknowledge: impl FnMut(u32, Duration)) {
        // One clock read per call, for the fence's delay and the latencies.
        let mut now = None;
        // Acknowledge in commit order: a commit is reported only when it and
        // every earlier one of this worker are durable.
        while let Some((ticket, start, tag, token)) = self.pending.front().copied() {
            if !self.engine.is_durable(ticket) {
                let CommitTicket::Flushed { .. } = ticket else { break };
                // The worker's thread is between transactions: it fences its
                // flushed commit once that waited long enough for a later
                // commit's fence (timed from the drain right after the
                // commit, not from the transaction's start: a transaction
                // that retried long must not cost a fence).
                let at = *now.get_or_insert_with(Instant::now);
                match self.unfenced_since {
                    Some((seen, since)) if seen == ticket => {
                        if at.saturating_duration_since(since) < Self::ACK_FENCE_DELAY
                            || self.inner.wait_durable(ticket).is_err()
                        {
                            break;
                        }
                    }
                    _ => {
                        self.unfenced_since = Some((ticket, at));
                        break;
                    }
                }
            }
            if self.hook.as_deref().is_some_and(|hook| !hook.is_acknowledged(token)) {
                break;
            }
            self.pending.pop_front();
            acknowledge(tag, now.get_or_insert_with(Instant::now).saturating_duration_since(start));
        }
    }

    /// Waits for every queued commit and reports them;
    /// [`DbError::Closed`] (with the durable ones reported) if the database
    /// is closed or crashed meanwhile.
    pub fn wait_all_acknowledged(&mut self, mut acknowledge: impl FnMut(u32, Duration)) -> DbResult<()> {
        // Tickets are not monotonic in queue order (a read-only ticket is the
        // epoch of the data it read), so wait for the highest one.
        let latest = self
            .pending
            .iter()
            .map(|(ticket, _, _, _)| match ticket {
                CommitTicket::Durable | CommitTicket::Flushed { .. } => 0,
                CommitTicket::Epoch(epoch) => *epoch,
            })
            .max();
        let mut waited = match latest {
            Some(epoch) => self.inner.wait_durable(CommitTicket::Epoch(epoch)),
            None => Ok(()),
        };
        // Commits whose fence was left to a later one (Zen): this wait
        // issues it.
        for index in 0..self.pending.len() {
            let ticket = self.pending[index].0;
            if waited.is_ok() && matches!(ticket, CommitTicket::Flushed { .. }) && !self.engine.is_durable(ticket) {
                waited = self.inner.wait_durable(ticket);
            }
        }
        if let (Ok(()), Some(hook), Some(&(_, _, _, token))) = (&waited, self.hook.as_deref_mut(), self.pending.back())
        {
            // Tokens grow in commit order: the last one covers the others.
            waited = hook.wait_acknowledged(token);
        }
        self.drain_acknowledged(&mut acknowledge);
        waited?;
        debug_assert!(self.pending.is_empty());
        Ok(())
    }

    /// Commits queued and not yet acknowledged.
    pub fn pending_acknowledgements(&self) -> usize {
        self.pending.len()
    }

    /// Attaches `hook` to every later transaction of this worker (how
    /// pmtx-replica makes a worker's commits replicated); replaces any
    /// earlier hook. Call it with no commit pending acknowledgement.
    pub fn set_commit_hook(&mut self, hook: Box<dyn CommitHook>) {
        debug_assert!(self.pending.is_empty(), "a hook must not change under pending commits");
        self.hook = Some(hook);
    }

    /// Counters of this worker.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Resets the counters.
    pub fn reset_stats(&mut self) {
        self.stats = WorkerStats::default();
    }
}

/// Sees each effective write of a transaction with the row's value before
/// and after it (`None`: absent, or deleted).
pub trait WriteRecorder {
    /// Row `key` of `table` held `before` and will hold `after`.
    fn record(&mut self, table: TableId, key: &[u8], before: Option<&[u8]>, after: Option<&[u8]>);
}

/// Takes part in the commits of a [`Worker`] ([`Worker::set_commit_hook`]):
/// how pmtx-replica ships a transaction's writes to other nodes and
/// acknowledges it only once they have it. The worker calls, per attempt:
/// [`CommitHook::begin_attempt`]; [`WriteRecorder::record`] for each write
/// the body makes; when the body succeeded, [`CommitHook::before_commit`]
/// (which may add writes of its own and hold a lock) right before the
/// engine's commit and [`CommitHook::after_commit`] right after it. A
/// committed transaction is acknowledged once it is durable and
/// [`CommitHook::wait_acknowledged`] (or [`CommitHook::is_acknowledged`]
/// for pipelined commits) says so for the token
/// [`CommitHook::last_token`] gave after its commit.
pub trait CommitHook: WriteRecorder + Send {
    /// An attempt begins: forget the writes of the previous one.
    fn begin_attempt(&mut self, read_only: bool);
    /// The body succeeded and the engine commits next: add writes to `tx`
    /// (they commit or abort with it) or refuse the commit with an error.
    fn before_commit(&mut self, tx: &mut Transaction<'_>) -> TxResult<()>;
    /// The engine's commit ended (`committed` or not).
    fn after_commit(&mut self, committed: bool);
    /// The attempt ended, however it ended (also after a failed body).
    fn end_attempt(&mut self);
    /// Names the last committed attempt for the acknowledgement calls.
    fn last_token(&self) -> u64;
    /// Whether the commit named `token` may be acknowledged now.
    fn is_acknowledged(&self, token: u64) -> bool;
    /// Waits until the commit named `token` may be acknowledged; an error
    /// if it never will be (the commit's outcome is then unknown).
    fn wait_acknowledged(&mut self, token: u64) -> DbResult<()>;
}

/// The body's view of one attempt.
pub struct Transaction<'w> {
    worker: &'w mut dyn EngineWorker,
    /// Sees every effective write with its before- and after-image (a
    /// replicated database's [`CommitHook`]); `None` on a plain worker.
    recorder: Option<&'w mut dyn WriteRecorder>,
    read_only: bool,
    /// Tuples read and written by this attempt ([`WorkerStats`]).
    reads: u64,
    writes: u64,
}

impl Transaction<'_> {
    /// Reads `key`.
    pub fn get(&mut self, table: TableId, key: &[u8]) -> TxResult<Option<Vec<u8>>> {
        let mut out = Vec::new();
        self.reads += 1;
        Ok(self.worker.get(table, key, &mut out)?.then_some(out))
    }

    /// Reads `key` into `out`; false if absent.
    pub fn get_into(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool> {
        self.reads += 1;
        self.worker.get(table, key, out)
    }

    /// Reads `key` and returns `read(value)`, or `None` if the key is
    /// absent. The value slice is a stable copy owned by the worker, so
    /// nothing is allocated per read; decode only the fields you need.
    pub fn get_with<R>(&mut self, table: TableId, key: &[u8], read: impl FnOnce(&[u8]) -> R) -> TxResult<Option<R>> {
        let mut read = Some(read);
        let mut result = None;
        self.reads += 1;
        self.worker.get_with(table, key, &mut |value| {
            if let Some(read) = read.take() {
                result = Some(read(value));
            }
        })?;
        Ok(result)
    }

    /// A hint that the body will soon access `key` of `table`: the engine
    /// starts loading its row into the CPU cache without waiting, so a batch
    /// of hints before a loop of accesses overlaps their memory misses.
    /// Hash tables only (a no-op otherwise); no effect on the transaction's
    /// reads or conflicts.
    pub fn prefetch(&mut self, table: TableId, key: &[u8]) {
        self.worker.prefetch(table, key);
    }

    /// Changes the row of `key` in place and returns `modify`'s result, or
    /// `None` (nothing written) if the key is absent. `modify` sees the row
    /// as this transaction sees it (its own earlier writes included) and may
    /// change any bytes but not the length; the change is buffered like
    /// [`Transaction::update`] and installed at commit.
    pub fn update_with<R>(
        &mut self,
        table: TableId,
        key: &[u8],
        modify: impl FnOnce(&mut [u8]) -> R,
    ) -> TxResult<Option<R>> {
        if self.read_only {
            return Err(TxError::Db(DbError::InvalidConfig("write in a read-only transaction".into())));
        }
        if self.recorder.is_some() {
            return self.update_recorded(table, key, modify);
        }
        let mut modify = Some(modify);
        let mut result = None;
        self.writes += 1;
        self.worker.update_with(table, key, &mut |row| {
            if let Some(modify) = modify.take() {
                result = Some(modify(row));
            }
        })?;
        Ok(result)
    }

    /// [`Transaction::update_with`] seen by the recorder: the engine's own
    /// read-modify-write (its read is validated with the commit), with the
    /// row copied before and after `modify` for the recorder.
    #[cold]
    fn update_recorded<R>(
        &mut self,
        table: TableId,
        key: &[u8],
        modify: impl FnOnce(&mut [u8]) -> R,
    ) -> TxResult<Option<R>> {
        let mut modify = Some(modify);
        let mut result = None;
        let (mut before, mut after) = (Vec::new(), Vec::new());
        self.writes += 1;
        let present = self.worker.update_with(table, key, &mut |row| {
            if let Some(modify) = modify.take() {
                before.extend_from_slice(row);
                result = Some(modify(row));
                after.extend_from_slice(row);
            }
        })?;
        if !present {
            return Ok(None);
        }
        // Recorded once the engine has buffered the update.
        if let Some(recorder) = self.recorder.as_deref_mut() {
            recorder.record(table, key, Some(&before), Some(&after));
        }
        Ok(result)
    }

    fn write(&mut self, table: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        if self.read_only {
            return Err(TxError::Db(DbError::InvalidConfig("write in a read-only transaction".into())));
        }
        self.writes += 1;
        if self.recorder.is_some() {
            return self.write_recorded(table, key, op);
        }
        self.worker.write(table, key, op)
    }

    /// A write seen by the recorder: the row's value before it is read in
    /// the transaction (so it is validated with the commit), and the write
    /// is recorded only if it changed something.
    #[cold]
    fn write_recorded(&mut self, table: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        let mut before = Vec::new();
        let present = self.worker.get(table, key, &mut before)?;
        let before = present.then_some(&before[..]);
        let after = match op {
            WriteOp::Put(value) => Some(value),
            WriteOp::Insert(value) if before.is_none() => Some(value),
            WriteOp::Update(value) if before.is_some() => Some(value),
            WriteOp::Delete if before.is_some() => None,
            // Nothing changes: the engine answers false without writing.
            WriteOp::Insert(_) | WriteOp::Update(_) | WriteOp::Delete => return self.worker.write(table, key, op),
        };
        let put = matches!(op, WriteOp::Put(_));
        let changed = self.worker.write(table, key, op)?;
        if let (true, Some(recorder)) = (changed || put, self.recorder.as_deref_mut()) {
            recorder.record(table, key, before, after);
        }
        Ok(changed)
    }

    /// Inserts or overwrites.
    pub fn put(&mut self, table: TableId, key: &[u8], value: &[u8]) -> TxResult<()> {
        self.write(table, key, WriteOp::Put(value)).map(|_| ())
    }

    /// Inserts if absent; false if the key exists.
    pub fn insert(&mut self, table: TableId, key: &[u8], value: &[u8]) -> TxResult<bool> {
        self.write(table, key, WriteOp::Insert(value))
    }

    /// Overwrites if present; false if absent.
    pub fn update(&mut self, table: TableId, key: &[u8], value: &[u8]) -> TxResult<bool> {
        self.write(table, key, WriteOp::Update(value))
    }

    /// Deletes if present; false if absent.
    pub fn delete(&mut self, table: TableId, key: &[u8]) -> TxResult<bool> {
        self.write(table, key, WriteOp::Delete)
    }

    /// Visits rows of the primary index in `range`.
    pub fn scan_with(
        &mut self,
        table: TableId,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> TxResult<()> {
        let request = ScanRequest { table, secondary: None, range, direction, limit };
        let mut visited = 0;
        let result = self.worker.scan(request, &mut |key, value| {
            visited += 1;
            visit(key, value)
        });
        self.reads += visited;
        result
    }

    /// Collects rows of the primary index in `range`.
    pub fn scan(
        &mut self,
        table: TableId,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        limit: usize,
    ) -> TxResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut rows = Vec::new();
        self.scan_with(table, range, direction, limit, |k, v| {
            rows.push((k.to_vec(), v.to_vec()));
            true
        })?;
        Ok(rows)
    }

    /// Collects (primary key, value) of rows whose secondary key lies in
    /// `range` (secondary keys are prefixes; see [`prefix_range`]).
    pub fn scan_secondary(
        &mut self,
        table: TableId,
        secondary: u32,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        limit: usize,
    ) -> TxResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut rows = Vec::new();
        let request = ScanRequest { table, secondary: Some(secondary), range, direction, limit };
        self.worker.scan(request, &mut |k, v| {
            rows.push((k.to_vec(), v.to_vec()));
            true
        })?;
        self.reads += rows.len() as u64;
        Ok(rows)
    }

    /// The error a body returns to roll back: `return Err(tx.rollback())`.
    pub fn rollback(&self) -> TxError {
        TxError::Rollback
    }
}

/// Where an [`OpenTransaction`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepState {
    /// An attempt is running: reads, writes and the commit may follow.
    Active,
    /// The attempt met a conflict and was aborted: call
    /// [`OpenTransaction::retry`] to run it again, or end it.
    Conflicted(AbortReason),
    /// Committed, rolled back, or ended by an error; its worker slot is free.
    Ended(&'static str),
}

/// A transaction run step by step, for callers that cannot pass a body
/// (bindings to other languages): [`Database::begin`], then reads and writes
/// through [`OpenTransaction::ops`], then [`OpenTransaction::commit`] (or
/// [`OpenTransaction::commit_pipelined`]) or [`OpenTransaction::rollback`].
/// A conflict found by a step or by the commit aborts the attempt
/// ([`StepState::Conflicted`], the step returns [`TxError::Abort`]);
/// [`OpenTransaction::retry`] starts the next attempt after the backoff
/// [`Database::run`] uses, and gives up after [`DbOptions::max_attempts`]
/// as it does. Any other error ends the transaction. Dropping it rolls back
/// a running attempt.
///
/// On an engine that acknowledges commits by epoch
/// ([`crate::engine_catalog::EngineEntry::acknowledges_by_epoch`]), a thread
/// must not wait for a commit (any `commit`, `run` or `wait_durable`) while
/// it holds another running transaction: the epoch cannot close until that
/// transaction ends.
pub struct OpenTransaction {
    /// The lent worker while the transaction holds one (not `Ended`).
    worker: Option<Worker>,
    lent: Arc<LentWorkers>,
    read_only: bool,
    attempts: u32,
    start: Instant,
    state: StepState,
    /// Tuples read and written by the running attempt ([`WorkerStats`]).
    reads: u64,
    writes: u64,
}

impl OpenTransaction {
    /// Where the transaction stands.
    pub fn state(&self) -> StepState {
        self.state
    }

    /// Attempts begun so far (1 until the first [`OpenTransaction::retry`]).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether it was begun read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The error a step of a transaction that is not running returns.
    fn not_running(&self) -> TxError {
        match self.state {
            StepState::Active => unreachable!("not_running of a running transaction"),
            StepState::Conflicted(reason) => TxError::Abort(reason),
            StepState::Ended(how) => TxError::Db(DbError::TransactionEnded(how)),
        }
    }

    /// Runs `step` (reads and writes through a [`Transaction`]) in the
    /// running attempt. A [`TxError::Abort`] from it aborts the attempt
    /// ([`StepState::Conflicted`]); a [`TxError::Rollback`] rolls the
    /// transaction back and any other error ends it. Fails without running
    /// `step` if no attempt is running.
    pub fn ops<R>(&mut self, step: impl FnOnce(&mut Transaction<'_>) -> TxResult<R>) -> TxResult<R> {
        if self.state != StepState::Active {
            return Err(self.not_running());
        }
        let worker = self.worker.as_mut().expect("a running transaction holds its worker");
        let inner = &mut worker.inner;
        let read_only = self.read_only;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut tx = Transaction { worker: inner.as_mut(), recorder: None, read_only, reads: 0, writes: 0 };
            let result = step(&mut tx);
            (result, tx.reads, tx.writes)
        }));
        let (result, reads, writes) = match result {
            Ok(done) => done,
            Err(panic) => {
                // As in `Worker::attempt`: no locks or epoch left behind.
                self.end_attempt("ended by a panic");
                std::panic::resume_unwind(panic);
            }
        };
        self.reads += reads;
        self.writes += writes;
        if let Err(error) = &result {
            self.fail(error);
        }
        result
    }

    /// Aborts the running attempt after `error` and records why.
    fn fail(&mut self, error: &TxError) {
        match error {
            TxError::Abort(reason) => {
                let worker = self.worker.as_mut().expect("a running transaction holds its worker");
                worker.inner.abort();
                worker.stats.aborts[reason.index()] += 1;
                self.state = StepState::Conflicted(*reason);
            }
            TxError::Rollback => {
                if let Some(worker) = self.worker.as_mut() {
                    worker.stats.rolled_back += 1;
                }
                self.end_attempt("rolled back");
            }
            TxError::Db(_) => self.end_attempt("ended by an error"),
        }
    }

    /// Aborts a running attempt (if any), frees the worker slot and ends
    /// the transaction as `how`.
    fn end_attempt(&mut self, how: &'static str) {
        if let Some(mut worker) = self.worker.take() {
            if self.state == StepState::Active {
                worker.inner.abort();
            }
            worker.inner.idle();
            self.lent.give_back(worker);
        }
        self.state = StepState::Ended(how);
    }

    /// Commits the running attempt; returns once the commit is durable, with
    /// the time since [`Database::begin`]. [`TxError::Abort`] if validation
    /// failed (the attempt is aborted: [`OpenTransaction::retry`]).
    pub fn commit(&mut self) -> TxResult<Duration> {
        let ticket = self.commit_attempt()?;
        let mut worker = self.worker.take().expect("a committed transaction still holds its worker");
        let durable = worker.inner.wait_durable(ticket);
        worker.inner.idle();
        self.lent.give_back(worker);
        durable?;
        Ok(self.start.elapsed())
    }

    /// Commits the running attempt without waiting for durability: the
    /// [`Pending`] says when it is durable ([`Database::is_durable`],
    /// [`Database::wait_durable`]); until then a crash loses it.
    pub fn commit_pipelined(&mut self) -> TxResult<Pending> {
        let ticket = self.commit_attempt()?;
        self.end_attempt("committed");
        Ok(Pending { ticket, start: self.start })
    }

    /// The commit step both commits share: on success the state is
    /// `Ended("committed")` but the worker is still held.
    fn commit_attempt(&mut self) -> TxResult<CommitTicket> {
        if self.state != StepState::Active {
            return Err(self.not_running());
        }
        let worker = self.worker.as_mut().expect("a running transaction holds its worker");
        match worker.inner.commit() {
            Ok(ticket) => {
                worker.stats.committed += 1;
                worker.stats.tuples_read += self.reads;
                worker.stats.tuples_written += self.writes;
                self.state = StepState::Ended("committed");
                Ok(ticket)
            }
            Err(error) => {
                self.fail(&error);
                Err(error)
            }
        }
    }

    /// Rolls back: ends a running or conflicted transaction (a no-op on an
    /// ended one) and frees its worker slot.
    pub fn rollback(&mut self) {
        if self.state == StepState::Active {
            if let Some(worker) = self.worker.as_mut() {
                worker.stats.rolled_back += 1;
            }
        }
        if !matches!(self.state, StepState::Ended(_)) {
            self.end_attempt("rolled back");
        }
    }

    /// Starts the next attempt of a conflicted transaction after a random
    /// backoff that grows with the attempts.
    /// [`DbError::TooManyAborts`] (the transaction ends) once
    /// [`DbOptions::max_attempts`] attempts were made;
    /// [`DbError::TransactionEnded`] if it ended; [`DbError::InvalidConfig`]
    /// if its attempt is running.
    pub fn retry(&mut self) -> DbResult<()> {
        let last = match self.state {
            StepState::Ended(how) => return Err(DbError::TransactionEnded(how)),
            StepState::Conflicted(reason) => reason,
            StepState::Active => {
                return Err(DbError::InvalidConfig(
                    "retry of a transaction that met no conflict: commit it or roll it back".into(),
                ))
            }
        };
        let worker = self.worker.as_mut().expect("an unended transaction holds its worker");
        if self.attempts >= worker.max_attempts {
            let attempts = self.attempts;
            self.state = StepState::Conflicted(last);
            self.end_attempt("ended after too many aborts");
            return Err(DbError::TooManyAborts { attempts, last });
        }
        worker.backoff(self.attempts);
        self.attempts += 1;
        self.reads = 0;
        self.writes = 0;
        worker.inner.begin(self.read_only, self.attempts);
        self.state = StepState::Active;
        Ok(())
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        self.rollback();
    }
}

/// The range of all keys starting with `prefix`: (Included(prefix),
/// Excluded(next prefix)) — the successor is computed into `upper`.
pub fn prefix_range<'a>(prefix: &'a [u8], upper: &'a mut Vec<u8>) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    upper.clear();
    upper.extend_from_slice(prefix);
    while let Some(last) = upper.last_mut() {
        if *last == 0xFF {
            upper.pop();
        } else {
            *last += 1;
            return (Bound::Included(prefix), Bound::Excluded(upper.as_slice()));
        }
    }
    (Bound::Included(prefix), Bound::Unbounded)
}
