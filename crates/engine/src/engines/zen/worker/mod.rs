//! A Zen worker: perform in DRAM (Met-Cache + the shared transaction state of
//! `cc::transaction` over the rows' CC-Meta words), persist log-free (Algorithm 1),
//! maintain (garbage, tombstones, sweeps). §3.3.1.
//!
//! The commit runs the shared pipeline (`engines::pipeline`); this worker
//! supplies its steps (`CommitSteps`). Commit of a writing transaction,
//! step by step:
//!
//! 1. lock the worker's heap region (uncontended; a sweep waits for it);
//! 2. reserve one free slot per write (DRAM lists; a new chunk when dry)
//!    and start the ownership requests of their lines (prefetchw);
//! 3. lock the write set in address order; read the global epoch;
//!    validate reads and scanned leaves; pick the Tx-CTS (Silo TID, above the
//!    region's last Tx-CTS so it grows per thread);
//!    Then every version the attempt read or overwrites that belongs to
//!    another worker's *unfenced* commit (below) is made durable first
//!    ([`CommitSteps::check_inputs_durable`]);
//! 4. persist: encode every new version, LP tuple last — a tuple of the table
//!    first in the LP order (§3.3.4) — and run Algorithm 1. Its first fence
//!    also makes this worker's previous commit durable if that one was left
//!    unfenced (its LP line is flushed again first if another thread
//!    flushed it), which is then *completed* (`storage::zen::heap`,
//!    "Unfenced commits"). A commit through `Database::run` fences its LP
//!    line at once (two fences) and is durable when it returns. A
//!    *pipelined* commit (`Worker::run_pipelined`, `set_acknowledgement`) leaves
//!    that fence to a later one, as the paper's Algorithm 1 does (one fence
//!    per writing commit): it is published as its region's unfenced commit
//!    before its rows are unlocked;
//! 5. install while still locked: point each row at its new NVM-tuple,
//!    install the value in this worker's cache region, maintain secondary
//!    indexes, then read the garbage stamp and hand the superseded
//!    NVM-tuples to their regions (an unfenced commit holds them, and its
//!    tombstones, until it is completed); unlock by storing the new word
//!    (TID = Tx-CTS);
//! 6. move the region's LP pin (an unfenced commit moves it when it is
//!    completed); reclaim up to `gc_batch` garbage entries and the
//!    tombstones the last sweep made safe; unlock the region; run a sweep if
//!    enough tombstones wait; reclaim absent rows (`storage::table`).
//!
//! # Pipelined commits: one fence, and when they are durable
//!
//! A pipelined commit N of worker A is durable once a fence of the thread
//! that flushed its LP line follows that flush, or once any thread flushes
//! the line again and fences. Its ticket is `CommitTicket::Flushed` (A,
//! Tx-CTS), durable when A's region no longer publishes N as unfenced, that
//! is once N is *completed* (`storage::zen::heap`, "Unfenced commits") by
//! the first of:
//!
//! * A's next writing commit (its first fence; the common case);
//! * A's thread between transactions: `Worker::drain_acknowledged` once
//!   `Worker::ACK_FENCE_DELAY` passed since a drain first found N not
//!   durable,
//!   `Worker::wait_all_acknowledged`, a wait for the ticket (on any worker);
//! * another worker B whose transaction overwrites a version of N (step
//!   3): B flushes N's LP line with its own tuples, so its own first fence
//!   makes N durable, and holds A's region locked until then to complete
//!   N before its install (if A's region is locked — A is committing, and
//!   that commit's first fence completes N — B waits up to `HELP_WAIT`,
//!   then aborts with `NotYetDurable` and retries; for a region before
//!   B's own only `HELP_WAIT_AGAINST_ORDER`, since A may be waiting for
//!   B's region the same way);
//! * the engine's epoch thread, for a commit still unfenced at two of its
//!   consecutive steps: at most 2 x min(`epoch_interval`, 5 ms) after N
//!   (unless A is committing then, which completes N); `close` fences what
//!   is left.
//!
//! A transaction of B that only read a version of N flushes N's LP line
//! with its tuples too (its first fence makes N durable before its own LP
//! store; N stays unfenced in A's books until completed as above); a
//! pipelined read-only one takes N's ticket (acknowledged once N is
//! durable); one acknowledged at return, or that read two such commits,
//! flushes their LP lines and fences. So no commit of another worker can be
//! durable while a commit it read or overwrote is lost: the isolation of
//! every protocol holds for what recovery keeps. (A version of N that was
//! superseded was durable, and N completed, before it was, so a snapshot
//! read of an older version needs no check; a Tx-CTS equal to N's from
//! another region is told apart by the row's slot.)
//!
//! A's own later transactions read N's versions freely: their commit's
//! first fence makes N durable before their own LP tuple, and a read-only
//! one gets N's ticket (acknowledged in order after N). Until N is
//! completed its region keeps the pin on its previous LP tuple, and holds
//! back what N superseded, so a crash that loses N recovers the versions
//! before it.
//!
//! `wbl` takes the same steps with its commit rule: step 4 persists the
//! versions with one fence and no LP bit (`zen_persist::persist_versions`), step 5
//! unlocks rows whose versions are durable but not yet committed, so the
//! ticket of a writing commit is the epoch of its TID, and that of a
//! read-only one the epoch of the newest TID it read; both are acknowledged
//! once the window's record is durable (`durability::wbl_window`); step 6
//! moves no pin.
//!
//! `zen+` adds (zen-plus.txt §4; `adaptive.rs`, `numa.rs`):
//!
//! * read-only transactions run at the oldest running snapshot
//!   (`TxState::begin_snapshot_read_only`) and read a Met-Cache miss from the
//!   heap without filling the cache;
//! * every access is counted against the α/β/γ thresholds, and G-EX is
//!   checked at every access and when a commit starts;
//! * the exclusive stage's *direct NVM writes*: while this worker holds
//!   G-EX and its buffered new versions outgrow its Met-Cache region, they
//!   are written to free slots of its region at once ([`ZenWorker::spill`]),
//!   stamped with a Tx-CTS fixed at the first such write (above everything
//!   committed: no other transaction runs) and without the LP bit, flushed
//!   and fenced, and leave the write set's arena. The commit persists the
//!   rest with Algorithm 1 and the same Tx-CTS, rewriting a spilled tuple
//!   only if the transaction changed it again (or to carry the LP bit). So
//!   a crash before the LP store leaves tuples above the region's commit
//!   horizon, which recovery discards (Algorithm 2, as for any
//!   interrupted persist); an attempt that does not commit erases them
//!   (word 0 = 0, one fence) before its region commits anything else, so
//!   no later LP tuple can raise the horizon above them;
//! * on several NUMA nodes, each access is counted for its partition.

mod commit;
mod exclusive;
mod reads;

use super::adaptive::AdaptiveTx;
use super::{WorkerCounters, ZenShared};
use crate::cc::concurrency::Concurrency;
use crate::cc::protocols::commit_rule::{CommitRule, Validating};
use crate::cc::transaction::{RowStore, TxState};
use crate::cc::write_set::WriteValue;
use crate::durability::zen_persist::{self, persist_tuples};
use crate::durability::CommitStage;
use crate::engine::{Acknowledgement, CommitTicket, EngineWorker, ScanRequest, WriteOp};
use crate::engines::pipeline::{self, CommitSteps, Region, TidFloor};
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::schema::TableId;
use crate::storage::record::{self, RowKind, READ_SPINS};
use crate::storage::table::ReclaimPolicy;
use crate::storage::zen::cache::{Cached, ClockRing, Row, ABSENT, LOCKED};
use crate::storage::zen::heap::{self, Garbage, Reserved, SlotKind, Tombstone, META_LEN};
use crate::storage::zen::meta::TupleIdBlocks;
use parking_lot::MutexGuard;
use pmtx_pm::{PersistBatch, PmBackend};
use reads::store;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// A worker of the Zen engine.
pub(crate) struct ZenWorker<B: PmBackend> {
    shared: Arc<ZenShared<B>>,
    id: usize,
    tx: TxState<Row>,
    encoded: Vec<Vec<u8>>,
    reserved: Vec<Reserved>,
    /// Reused per commit: the write-set positions in persist order, the
    /// superseded slots, and the tombstones written (position, slot).
    persist_order: Vec<usize>,
    retired: Vec<Garbage>,
    tombstones: Vec<(usize, u64)>,
    old_value: Vec<u8>,
    /// How many of the attempt's hinted rows (`TxState::hinted_rows`)
    /// had their Met-Cache entries prefetched.
    hinted_values: usize,
    batch: PersistBatch,
    active: bool,
    /// `zen+`: the running transaction's accesses and exclusive stage.
    adaptive: AdaptiveTx,
    /// Whether commits leave their LP line's fence to a later one
    /// (module comment, "Pipelined commits"), and whether they are
    /// acknowledged in commit order (`Acknowledgement::InOrder`).
    pipelined: bool,
    in_order: bool,
    /// Reused per commit: the other regions' unfenced commits (region,
    /// Tx-CTS), and those the attempt depends on.
    unfenced_seen: Vec<(usize, u64)>,
    unfenced_inputs: Vec<commit::UnfencedInput>,
    /// The ticket of another worker's unfenced commit the last read-only
    /// attempt depends on (`check_inputs_durable`).
    unfenced_dependency: Option<CommitTicket>,
    /// `zen+`'s direct NVM writes of the running attempt: row address ->
    /// (slot reserved and written, value length).
    spilled: HashMap<usize, (Reserved, u32)>,
    /// The Tx-CTS of the spilled tuples (the commit's).
    spill_cts: Option<u64>,
    /// Writes before this index were offered to the last spill.
    spill_cursor: usize,
    /// The arena's size after the last spill, and the bytes of spilled
    /// values it still holds (compacted once they are half of it, so the
    /// copying stays linear in the bytes written).
    arena_after_spill: usize,
    spill_garbage: usize,
    /// This worker's blocks of tuple IDs (`storage::zen::meta`).
    tuple_ids: TupleIdBlocks,
    /// The thread this worker bound to its NUMA node (machine nodes).
    bound_thread: Option<std::thread::ThreadId>,
}

/// Zen unlinks an absent row only when no heap tuple, tombstone or ring
/// entry refers to it.
struct ZenReclaimPolicy<'a>(&'a Concurrency);

impl ReclaimPolicy<Row> for ZenReclaimPolicy<'_> {
    fn may_unlink(&self, row: &Row, word: u64) -> bool {
        // IMPORTANT: pairs with the fence in `ZenStore::fill` (the row is
        // locked by the caller).
        fence(Ordering::SeqCst);
        row.slot() == 0 && !row.referenced() && self.0.may_unlink(row, record::tid_of(word))
    }
    fn unlinked(&self, table: &crate::storage::table::Table<Row>, row: &Row) {
        self.0.unlinked(table, row);
    }
}

impl<B: PmBackend> ZenWorker<B> {
    pub(crate) fn new(shared: Arc<ZenShared<B>>, id: usize) -> Self {
        assert!(id < shared.epochs.capacity(), "worker id {id} beyond the configured worker count");
        let mut tx = TxState::new(&shared.cc, id);
        if shared.plus.is_some() {
            // Its footprint counts the rows read for the first time.
            tx.keep_reads_unique();
        }
        shared.orphans.lock().hand_over(&mut tx.reclaimer);
        Self {
            shared,
            id,
            tx,
            encoded: Vec::new(),
            reserved: Vec::new(),
            persist_order: Vec::new(),
            retired: Vec::new(),
            tombstones: Vec::new(),
            old_value: Vec::new(),
            hinted_values: 0,
            batch: PersistBatch::new(),
            active: false,
            adaptive: AdaptiveTx::default(),
            pipelined: false,
            in_order: false,
            unfenced_seen: Vec::new(),
            unfenced_inputs: Vec::new(),
            unfenced_dependency: None,
            spilled: HashMap::new(),
            spill_cts: None,
            spill_cursor: 0,
            arena_after_spill: 0,
            spill_garbage: 0,
            tuple_ids: TupleIdBlocks::default(),
            bound_thread: None,
        }
    }

    fn count_abort<T>(&self, result: TxResult<T>) -> TxResult<T> {
        if let Err(TxError::Abort(_)) = &result {
            WorkerCounters::add(&self.shared.counters[self.id].aborts, 1);
        }
        result
    }

    /// `zen+` on several nodes: counts an access to `key` of `table` for
    /// its partition.
    #[inline]
    fn count_partition(&self, table: TableId, key: &[u8]) {
        if let Some(soft) = self.shared.plus.as_ref().and_then(|plus| plus.soft.as_ref()) {
            let prefix = self.shared.tables.get(table.0 as usize).and_then(|table| table.schema().partition_prefix);
            soft.count_access(self.id, key, prefix);
        }
    }

    /// `zen+` on several nodes: this thread runs on the worker's node.
    fn declare_node(&mut self) {
        let Some(soft) = self.shared.plus.as_ref().and_then(|plus| plus.soft.as_ref()) else { return };
        let node = soft.topology.node_of_worker(self.id);
        match soft.topology.source {
            super::numa::NodeSource::Backend => pmtx_pm::set_thread_numa_node(node),
            super::numa::NodeSource::Machine => {
                let thread = std::thread::current().id();
                if self.bound_thread != Some(thread) {
                    // Best effort: an unbound thread only costs locality.
                    let _ = pmtx_pm::numa::bind_thread_to_numa_node(node);
                    self.bound_thread = Some(thread);
                }
            }
            super::numa::NodeSource::Logical => {}
        }
    }

    /// Issues the value prefetches of the rows hinted since the last
    /// access (see `prefetch`).
    #[inline]
    fn prefetch_hinted_values(&mut self) {
        let hinted = self.tx.hinted_rows();
        for &(_, row) in hinted.get(self.hinted_values..).unwrap_or_default() {
            // SAFETY: hinted while this attempt is announced (`prefetch`),
            // and the hints are cleared when the attempt ends
            // (`TxState::finish`): indexed rows are freed only after every
            // attempt announced when they were unlinked has ended.
            unsafe { row.as_ref() }.prefetch_value();
        }
        self.hinted_values = hinted.len();
    }

    fn leave(&mut self) {
        self.hinted_values = 0;
        if self.active {
            self.shared.epochs.leave(self.id);
            self.active = false;
        }
    }

    /// Queues rows left absent and reclaims what is due.
    fn after_attempt(&mut self) {
        self.hinted_values = 0;
        let shared = &*self.shared;
        self.tx.finish(shared.epochs.global(), &shared.tables);
        if self.tx.reclaimer.backlog() > 0 {
            // The reclaimer dereferences queued rows: stay announced.
            if !self.active {
                shared.epochs.enter(self.id);
            }
            let before = self.tx.reclaimer.unlinked;
            self.tx.reclaimer.run(&shared.tables, &shared.epochs, &ZenReclaimPolicy(&shared.cc));
            let unlinked = self.tx.reclaimer.unlinked - before;
            if unlinked > 0 {
                shared.rows_unlinked.fetch_add(unlinked, Ordering::Relaxed);
            }
            if !self.active {
                shared.epochs.leave(self.id);
            }
        }
    }
}

impl<B: PmBackend> EngineWorker for ZenWorker<B> {
    fn begin(&mut self, read_only: bool, attempt: u32) {
        let plus = self.shared.plus.is_some();
        if plus {
            if attempt <= 1 {
                // The previous transaction ended without a commit.
                self.finish_exclusive();
                if let Some(soft) = self.shared.plus.as_ref().and_then(|plus| plus.soft.as_ref()) {
                    soft.began(self.id);
                }
                self.declare_node();
            }
            let shared = Arc::clone(&self.shared);
            let adaptive = &shared.plus.as_ref().expect("zen+").adaptive;
            let (epochs, id) = (&shared.epochs, self.id);
            adaptive.begin(id, &self.adaptive, read_only, attempt, &shared.closed, || epochs.leave(id));
        }
        // The announcement's fence (`Epochs::enter`) also pairs with the
        // collector's fence of the heap's reclamation (`storage::zen::heap`).
        self.shared.epochs.enter(self.id);
        self.active = true;
        let oldest = self
            .shared
            .plus
            .as_ref()
            .is_some_and(|plus| plus.read_only_snapshot == crate::options::ReadOnlySnapshot::Oldest);
        if oldest && read_only {
            self.tx.begin_snapshot_read_only();
            self.shared.plus.as_ref().expect("zen+").adaptive.count_snapshot_attempt(self.id);
        } else {
            self.tx.begin(attempt, self.shared.epochs.global());
        }
    }

    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool> {
        self.prefetch_hinted_values();
        self.count_partition(table, key);
        let store = store(&self.shared, self.id, &self.adaptive, &self.spilled);
        let result = self.tx.get(&self.shared.tables, &store, table, key, out);
        self.finish_operation(result)
    }

    fn get_with(&mut self, table: TableId, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> TxResult<bool> {
        self.prefetch_hinted_values();
        self.count_partition(table, key);
        let store = store(&self.shared, self.id, &self.adaptive, &self.spilled);
        let result = self.tx.get_with(&self.shared.tables, &store, table, key, visit);
        self.finish_operation(result)
    }

    fn write(&mut self, table: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        self.prefetch_hinted_values();
        self.count_partition(table, key);
        let store = store(&self.shared, self.id, &self.adaptive, &self.spilled);
        let result = self.tx.write(&self.shared.tables, &store, table, key, op);
        self.finish_operation(result)
    }

    fn prefetch(&mut self, table: TableId, key: &[u8]) {
        // The row now; its cached value (`Row::prefetch_value`, which reads
        // the row) at the next access, once every hinted row is on its way:
        // the entries' misses then overlap too instead of each waiting for
        // its row.
        if let Some(row) = self.shared.tables.get(table.0 as usize).and_then(|table| table.prefetch_row(key, 0)) {
            if self.active {
                // Its value is prefetched at the next access, and the
                // access that follows the hints' order takes the row.
                self.tx.note_hint(table, row);
            }
        }
    }

    fn update_with(&mut self, table: TableId, key: &[u8], modify: &mut dyn FnMut(&mut [u8])) -> TxResult<bool> {
        self.prefetch_hinted_values();
        self.count_partition(table, key);
        let store = store(&self.shared, self.id, &self.adaptive, &self.spilled);
        let result = self.tx.update_with(&self.shared.tables, &store, table, key, modify);
        self.finish_operation(result)
    }

    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()> {
        let soft = self.shared.plus.as_ref().and_then(|plus| plus.soft.as_ref());
        let prefix = self.shared.tables.get(request.table.0 as usize).and_then(|table| table.schema().partition_prefix);
        let store = store(&self.shared, self.id, &self.adaptive, &self.spilled);
        let id = self.id;
        let result = self.tx.scan(&self.shared.tables, &store, request, &mut |key: &[u8], value: &[u8]| {
            if let Some(soft) = soft {
                soft.count_access(id, key, prefix);
            }
            visit(key, value)
        });
        self.finish_operation(result)
    }

    fn commit(&mut self) -> TxResult<CommitTicket> {
        let shared = Arc::clone(&self.shared);
        let result = pipeline::commit(&*shared, self);
        if result.is_err() {
            self.discard_spilled();
        }
        self.after_attempt();
        let result = self.count_abort(result);
        if result.is_ok() {
            WorkerCounters::add(&self.shared.counters[self.id].commits, 1);
        }
        if let Some(plus) = &self.shared.plus {
            plus.adaptive.end_attempt(self.id, &self.adaptive, result.is_ok());
            if result.is_ok() {
                self.finish_exclusive();
            }
        }
        result
    }

    fn abort(&mut self) {
        self.discard_spilled();
        self.after_attempt();
        if let Some(plus) = &self.shared.plus {
            // A privileged transaction keeps G-EX for its retry.
            plus.adaptive.end_attempt(self.id, &self.adaptive, false);
        }
    }

    fn idle(&mut self) {
        self.leave();
        // The transaction is over: a privileged one without a commit
        // (rolled back, failed, gave up) ends its stage.
        self.finish_exclusive();
    }

    fn wait_durable(&mut self, ticket: CommitTicket) -> DbResult<()> {
        // Going idle first: a waiting worker must not hold back the window
        // it waits for.
        self.leave();
        match (ticket, &self.shared.window) {
            (CommitTicket::Durable, _) | (CommitTicket::Epoch(_), None) => Ok(()),
            (CommitTicket::Epoch(epoch), Some(window)) => window.wait_durable(self.id, epoch),
            (CommitTicket::Flushed { worker, cts }, _) => self.fence_flushed(worker as usize, cts),
        }
    }

    fn set_acknowledgement(&mut self, acknowledgement: Acknowledgement) {
        // wbl commits with its window's record, whatever the caller.
        self.pipelined = acknowledgement != Acknowledgement::AtReturn && self.shared.window.is_none();
        self.in_order = acknowledgement == Acknowledgement::InOrder;
    }
}

impl<B: PmBackend> ZenWorker<B> {
    /// Makes the commit `cts` of `worker`, whose LP line is flushed and not
    /// yet fenced, durable (module comment, "Pipelined commits"): this
    /// worker's own by a flush of the line and a fence of this thread,
    /// another's the same way once its region is free (its worker may be
    /// committing, which completes it too). `Closed` once the database is
    /// closed or crashed: nothing more is made durable then.
    fn fence_flushed(&mut self, worker: usize, cts: u64) -> DbResult<()> {
        let shared = &*self.shared;
        let (heap, pool) = (&shared.heap, &*shared.pool);
        loop {
            if heap.unfenced_cts(worker) != cts {
                return Ok(());
            }
            if shared.closed.load(Ordering::Acquire) {
                return Err(DbError::Closed);
            }
            if worker == self.id {
                let mut state = heap.regions[worker].state.lock();
                if state.unfenced().is_some_and(|unfenced| unfenced.cts == cts) {
                    state.fence_unfenced(heap, pool, &shared.epochs, worker);
                }
                return Ok(());
            }
            if heap.try_complete(pool, &shared.epochs, worker, cts) {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }
}

impl<B: PmBackend> Drop for ZenWorker<B> {
    fn drop(&mut self) {
        // A pipelined commit left unfenced stays so (the epoch thread's
        // bound, or `close`, fences it): a worker dropped by
        // `Database::crash` must not make anything more durable.
        self.discard_spilled();
        self.finish_exclusive();
        self.shared.epochs.leave(self.id);
        self.tx.reclaimer.hand_over(&mut self.shared.orphans.lock());
    }
}
