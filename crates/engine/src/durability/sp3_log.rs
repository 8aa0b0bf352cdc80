//! The SP^3 family (sp3.txt §III): `sp3`, and the paper's baselines
//! `nvm-tx` and `nvm-ideal`.
//!
//! All three run the shared transaction state of `cc::transaction` under `cc=silo` only over DRAM
//! records (the engine shell of `engines::dram`) and log each commit
//! *synchronously* into the worker's redo-log segments (the
//! `durability::log` format, plain stores + a flush of each line + one
//! fence, as the paper's clflush + mfence). Their TIDs carry the committing
//! worker in the low `storage::record::SP3_WORKER_BITS` bits (stamped by the
//! commit rule of `cc::protocols::sp3`, which also collects the
//! dependencies; this log tracks which TIDs are durable): the paper's
//! version word encodes the thread id and its `lastTid` is the logical id
//! `<threadID, logicID>`; here a row's version word *is* its `lastTid`, and
//! since a worker's TIDs grow, the TID is also the worker's logical clock.
//!
//! * `sp3` (Algorithm 1): validate; collect the dependency set (the writer
//!   of every version read or overwritten, unless it is this worker or
//!   already durable); install, store the new words (which unlocks) —
//!   *before* the log is durable, so a conflicting transaction on another
//!   core goes on at once; append the record with its dependency set, flush,
//!   fence (*persist*); wait until every dependency is durable (*pending*);
//!   publish this worker's newest durable TID (`<curTid, isPersistent>`: a
//!   worker persists in TID order, so one word per worker says which of its
//!   transactions are durable) and acknowledge. The word is published only
//!   after the wait, so "durable" always includes the transaction's own
//!   dependencies, transitively. Read-only transactions wait for their
//!   dependencies too: they must not return data a crash could take back.
//! * `nvm-tx`: the same OCC and log, written and fenced with the write set
//!   still locked (no reader ever sees a version whose log is not durable,
//!   so no dependencies).
//! * `nvm-ideal`: `nvm-tx` without concurrency control: reads are never
//!   validated (the commit rule of `cc::protocols::none`), write locks are held only while installing, the log is
//!   written after unlocking. It is **not serializable** — an upper bound on
//!   what removing concurrency-control cost could give, as in the paper —
//!   and the crash harness refuses it.
//!
//! **Recovery** (§III-D) is the shared checkpoint + log replay of
//! `durability::group_commit` in its synchronous mode plus, for `sp3`, the
//! dependency DAG: every complete record is a node with edges from its
//! dependencies and from the previous record of its worker; a record is
//! dropped when a dependency at or above the checkpoint's start epoch is not
//! a kept record (it was never durable, or was itself dropped), and every
//! later record of its worker goes with it. Kept records are replayed per
//! worker in parallel, newest TID per key winning — a topological order,
//! since every dependency has a smaller TID than its dependent.
//! *Argument*: a commit is acknowledged only after its record and (by the
//! published words) every dependency's record are durable, transitively, so
//! no acknowledged commit is dropped; a dropped record's transaction was
//! never acknowledged, and neither was any transaction that read its
//! writes, which names it (or a transaction that names it) as a
//! dependency. A checkpoint's root switch waits until every commit of
//! its epochs finished its log (the ticker's durable epoch), and a
//! dependency's TID is smaller than its dependent's, so a checkpoint never
//! holds a version whose dependencies could be lost.
//!
//! Explained in docs/engines/sp3.md.

use crate::durability::group_commit::{GroupCommitConfig, GroupCommitLog};
use crate::durability::log::{LogLayout, LogWriter};
use crate::durability::segments::PoolSegments;
use crate::durability::{CommitLog, CommitStage, EnginePolicy};
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::fault::Faults;
use crate::stats::{CommitTicket, EngineStats};
use crate::storage::commit_view::CommitView;
use crate::storage::record::{self, sp3_writer_of, SP3_MAX_WORKERS};
use crate::storage::table::Table;
use crossbeam_utils::CachePadded;
use pmtx_pm::{PmBackend, Pool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `MODE` of [`Sp3Log`]: `sp3`.
pub(crate) const SP3: u8 = 0;
/// `MODE` of [`Sp3Log`]: `nvm-tx`.
pub(crate) const NVM_TX: u8 = 1;
/// `MODE` of [`Sp3Log`]: `nvm-ideal`.
pub(crate) const NVM_IDEAL: u8 = 2;

/// The ticket of a commit whose durability the database gave up waiting
/// for (closed or crashed): never durable, so a wait returns `Closed`.
const NEVER_DURABLE: CommitTicket = CommitTicket::Epoch(u64::MAX);

/// A worker's log writer.
pub(crate) struct Sp3Worker<B: PmBackend> {
    id: usize,
    log: LogWriter<PoolSegments<B>>,
}

/// Test-only: runs in the committing thread after the install (and, for
/// `sp3`, the unlock), before the log record is written (argument: worker).
#[cfg(test)]
pub(crate) type BeforeLogHook = Arc<dyn Fn(usize) + Send + Sync>;

/// The SP^3-family policy over the shared group-commit log in its
/// synchronous mode; `MODE` is [`SP3`], [`NVM_TX`] or [`NVM_IDEAL`].
pub(crate) struct Sp3Log<B: PmBackend, const MODE: u8> {
    inner: GroupCommitLog<B>,
    workers: usize,
    /// Per worker number: its newest TID that is durable together with
    /// everything it depends on (the paper's `<curTid, isPersistent>`).
    committed: Vec<CachePadded<AtomicU64>>,
    faults: Faults,
    #[cfg(test)]
    before_log: Option<BeforeLogHook>,
}

impl<B: PmBackend, const MODE: u8> Sp3Log<B, MODE> {
    /// The log in `pool`: the group-commit log of `config`, synchronous,
    /// with dependencies in its records in the `SP3` mode.
    pub(crate) fn open(config: GroupCommitConfig, pool: Arc<Pool<B>>) -> DbResult<Self> {
        let workers = config.workers;
        let faults = config.faults;
        debug_assert!(workers <= SP3_MAX_WORKERS, "checked by the options' validation");
        let config = GroupCommitConfig { synchronous: true, dependency_dag: MODE == SP3, ..config };
        let inner = GroupCommitLog::open(config, pool)?;
        Ok(Self {
            inner,
            workers,
            committed: (0..SP3_MAX_WORKERS).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            faults,
            #[cfg(test)]
            before_log: None,
        })
    }

    /// Test-only: pause committers between install and log.
    #[cfg(test)]
    pub(crate) fn set_before_log_hook(&mut self, hook: BeforeLogHook) {
        self.before_log = Some(hook);
    }

    /// Dependency TIDs a record may need room for: one per other worker.
    fn reserved_dependencies(&self) -> usize {
        if MODE == SP3 {
            self.workers - 1
        } else {
            0
        }
    }

    /// Waits until every one of `dependencies` is durable; false if the
    /// database closed first (the commit is then never acknowledged).
    fn wait_for(&self, dependencies: &[u64]) -> bool {
        for &tid in dependencies {
            let mut spins = 0u32;
            while !self.dependency_durable(tid) {
                if self.inner.is_closed() {
                    return false;
                }
                spins += 1;
                if spins < 256 {
                    std::hint::spin_loop();
                } else {
                    // The writer may be descheduled (more threads than cores).
                    std::thread::yield_now();
                }
            }
        }
        true
    }

    /// Publishes that worker `id`'s commit `tid` is durable with its
    /// dependencies.
    fn publish(&self, id: usize, tid: u64) {
        debug_assert_eq!(sp3_writer_of(tid), id);
        debug_assert!(self.committed[id].load(Ordering::Relaxed) < tid, "a worker's TIDs grow");
        self.committed[id].store(tid, Ordering::Release);
    }

    /// Writes and fences the prepared record of `tid` (with `dependencies`).
    fn persist<V: CommitView + ?Sized>(&self, worker: &mut Sp3Worker<B>, tid: u64, writes: &V, dependencies: &[u64]) {
        #[cfg(test)]
        if let Some(hook) = &self.before_log {
            hook(worker.id);
        }
        let backend = self.inner.pool().backend();
        backend.crash_point("sp3: installed, log record not yet written");
        // Stores into the pool cannot fail (the store's error type is
        // uninhabited).
        let Ok(range) = worker.log.append_prepared_with_dependencies(tid, writes, dependencies);
        let range = if MODE == NVM_TX && self.faults.skip_last_line_flush() {
            // Broken on purpose: the flush stops before the record's last
            // line (the fence below then leaves that line in the cache).
            (range.0, ((range.1 - 1) & !63).max(range.0))
        } else {
            range
        };
        let Ok(()) = worker.log.make_durable(range);
        backend.crash_point("sp3: log record durable");
        self.inner.note_logged(worker.id, writes);
    }
}

impl<B: PmBackend, const MODE: u8> CommitLog for Sp3Log<B, MODE> {
    const STAGE: CommitStage =
        if MODE == NVM_TX { CommitStage::LogAfterInstallLocked } else { CommitStage::LogAfterUnlock };
    type Worker = Sp3Worker<B>;

    fn worker(&self, id: usize) -> DbResult<Sp3Worker<B>> {
        Ok(Sp3Worker { id, log: self.inner.worker(id)?.with_layout(LogLayout::PLAIN) })
    }

    fn prepare<V: CommitView + ?Sized>(&self, worker: &mut Sp3Worker<B>, writes: &V) -> DbResult<()> {
        if self.inner.is_closed() {
            return Err(DbError::Poisoned("the database is closed".into()));
        }
        let reserve = self.reserved_dependencies();
        if !worker.log.fits_prepared_reserving(writes, reserve) {
            self.inner.admit_new_segment()?;
        }
        worker.log.prepare_reserving(writes, reserve)
    }

    fn resume_tid(&self, worker: usize) -> u64 {
        self.committed[worker].load(Ordering::Acquire)
    }

    fn dependency_durable(&self, tid: u64) -> bool {
        self.committed[sp3_writer_of(tid)].load(Ordering::Acquire) >= tid
    }

    fn append<V: CommitView + ?Sized>(
        &self,
        worker: &mut Sp3Worker<B>,
        tid: u64,
        writes: &V,
    ) -> DbResult<CommitTicket> {
        self.persist(worker, tid, writes, &[]);
        self.publish(worker.id, tid);
        Ok(CommitTicket::Durable)
    }

    fn append_with_dependencies<V: CommitView + ?Sized>(
        &self,
        worker: &mut Sp3Worker<B>,
        tid: u64,
        writes: &V,
        dependencies: &[u64],
    ) -> DbResult<CommitTicket> {
        self.persist(worker, tid, writes, dependencies);
        // Step 5 (pending): acknowledge only once every predecessor is
        // durable; the deliberately broken variant skips the wait.
        if !self.faults.ack_before_dependencies() && !self.wait_for(dependencies) {
            return Ok(NEVER_DURABLE);
        }
        self.publish(worker.id, tid);
        Ok(CommitTicket::Durable)
    }

    fn read_only_ticket(&self, _max_tid: u64) -> CommitTicket {
        // nvm-tx: every version it validated was unlocked after its log was
        // durable; nvm-ideal promises nothing.
        CommitTicket::Durable
    }

    fn read_only_ticket_with_dependencies(&self, _worker: &mut Sp3Worker<B>, dependencies: &[u64]) -> CommitTicket {
        if self.faults.ack_before_dependencies() || self.wait_for(dependencies) {
            CommitTicket::Durable
        } else {
            NEVER_DURABLE
        }
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        self.inner.is_durable(ticket)
    }

    fn delete_is_durable(&self, tid: u64) -> bool {
        // A row whose delete could still be lost stays indexed (absent), so
        // a reader that misses it names the delete as a dependency.
        self.dependency_durable(tid)
    }

    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
}

impl<B: PmBackend, const MODE: u8> EnginePolicy for Sp3Log<B, MODE> {
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        self.inner.recover(tables, epochs)?;
        // Everything recovered is durable, and every TID of this life is
        // above the recovered epochs.
        let floor = record::first_tid_of_epoch(epochs.global()).saturating_sub(1);
        for word in &self.committed {
            word.store(floor, Ordering::Release);
        }
        Ok(())
    }

    fn on_epoch(&self) {
        self.inner.on_epoch();
    }

    fn checkpoint(&self, tables: &[Table]) -> DbResult<()> {
        self.inner.checkpoint(tables)
    }

    fn log_space_low(&self) -> bool {
        self.inner.log_space_low()
    }

    fn close(&self, tables: &[Table], clean: bool) -> DbResult<()> {
        self.inner.close(tables, clean)
    }

    fn stats(&self) -> EngineStats {
        self.inner.stats()
    }
}
