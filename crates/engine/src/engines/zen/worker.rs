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
//! 4. persist: encode every new version, LP tuple last — a tuple of the table
//!    first in the LP order (§3.3.4) — and run Algorithm 1 (two fences);
//! 5. install while still locked: point each row at its new NVM-tuple,
//!    install the value in this worker's cache region, maintain secondary
//!    indexes, then read the garbage stamp and hand the superseded
//!    NVM-tuples to their regions; unlock by storing the new word (TID =
//!    Tx-CTS). Readers never see a version before it is durable, so every
//!    ticket, read-only ones included, is `Durable`;
//! 6. move the region's LP pin; reclaim up to `gc_batch` garbage entries and
//!    the tombstones the last sweep made safe; unlock the region; run a sweep
//!    if enough tombstones wait; reclaim absent rows (`storage::table`).
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

use super::adaptive::AdaptiveTx;
use super::{WorkerCounters, ZenShared};
use crate::cc::concurrency::Concurrency;
use crate::cc::protocols::commit_rule::Validating;
use crate::cc::transaction::{RowStore, TxState};
use crate::cc::write_set::WriteValue;
use crate::durability::zen_persist::{self, persist_tuples};
use crate::durability::CommitStage;
use crate::engine::{CommitTicket, EngineWorker, ScanRequest, WriteOp};
use crate::engines::pipeline::{self, CommitSteps, Region, TidFloor};
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::schema::TableId;
use crate::storage::record::{self, RowKind, READ_SPINS};
use crate::storage::table::ReclaimPolicy;
use crate::storage::zen::cache::{Cached, ClockRing, Row, ABSENT, LOCKED};
use crate::storage::zen::heap::{self, Garbage, Reserved, SlotKind, Tombstone, META_LEN};
use parking_lot::MutexGuard;
use pmtx_pm::{PersistBatch, PmBackend};
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
    /// Rows hinted by `prefetch` whose Met-Cache entries are not yet
    /// prefetched (addresses; alive while the attempt is announced).
    hinted: Vec<usize>,
    batch: PersistBatch,
    active: bool,
    /// `zen+`: the running transaction's accesses and exclusive stage.
    adaptive: AdaptiveTx,
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
    /// The thread this worker bound to its NUMA node (machine nodes).
    bound_thread: Option<std::thread::ThreadId>,
}

/// Zen's stable read: the Met-Cache value if it holds the row's version,
/// else the NVM-tuple (then cached in the reader's region unless `fill` is
/// off: `zen+`'s read-only snapshots).
struct ZenStore<'a, B: PmBackend> {
    shared: &'a ZenShared<B>,
    id: usize,
    /// `zen+`: the transaction's accounting (`None` for `zen`).
    adaptive: Option<&'a AdaptiveTx>,
    fill: bool,
    /// `zen+`: this attempt's direct NVM writes.
    spilled: &'a HashMap<usize, (Reserved, u32)>,
}

impl<B: PmBackend> RowStore<Row> for ZenStore<'_, B> {
    fn read(&self, row: &Row, out: &mut Vec<u8>) -> Result<u64, AbortReason> {
        if let (Some(plus), Some(tx)) = (&self.shared.plus, self.adaptive) {
            plus.adaptive.on_access(self.id, tx)?;
        }
        let backend = self.shared.pool.backend();
        for spin in 0..READ_SPINS {
            let before = row.word();
            if before & LOCKED != 0 {
                if !self.fill && spin >= READ_SPINS / 2 {
                    // A snapshot reader does not give up on a committer
                    // that was descheduled holding the row (read-only
                    // transactions do not abort, §4.1.2): it yields to it.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            out.clear();
            if before & ABSENT != 0 {
                if row.word() == before {
                    return Ok(before);
                }
                continue;
            }
            // The entry stays allocated while this transaction is announced
            // in its epoch (`Cached`).
            let cached = row.cached_ptr();
            // SAFETY: as above.
            let hit = match unsafe { cached.as_ref() } {
                Some(entry) if entry.cts() == record::tid_of(before) => {
                    entry.copy_into(out);
                    true
                }
                _ => false,
            };
            if !hit {
                let slot = row.slot();
                if slot == 0 {
                    continue; // changing under us
                }
                // The slot cannot be reused while this worker is announced
                // (`storage::zen::heap`, "reclamation"); the length is at most the
                // table's limit, so the read stays inside the slot even if it
                // pairs with another version's slot (then `after` differs).
                out.resize(row.len(), 0);
                backend.read(slot + META_LEN + row.key().len() as u64, out);
            }
            if row.word() != before {
                continue;
            }
            if let Some(meta) = self.shared.wbl_meta.as_ref().filter(|meta| meta.on_read) {
                // wbl: the read timestamp in the version's NVM header.
                let slot = row.slot();
                if slot != 0 {
                    meta.persist(slot, before);
                }
            }
            let counters = &self.shared.counters[self.id];
            if hit {
                row.touch();
                WorkerCounters::add(&counters.cache_hits, 1);
            } else {
                WorkerCounters::add(&counters.cache_misses, 1);
                if let Some(plus) = &self.shared.plus {
                    self.count_heap_read(plus, row.slot());
                }
                if self.fill {
                    self.fill(row, cached, before, out);
                } else if let Some(plus) = &self.shared.plus {
                    plus.adaptive.count_snapshot_nvm_read(self.id);
                }
            }
            return Ok(before);
        }
        Err(AbortReason::UnstableRead)
    }

    fn read_spilled(&self, row: &Row, out: &mut Vec<u8>) {
        let &(reserved, len) =
            self.spilled.get(&(row as *const Row as usize)).expect("a spilled write has a spilled tuple");
        out.clear();
        out.resize(len as usize, 0);
        self.shared.pool.backend().read(reserved.slot + META_LEN + row.key().len() as u64, out);
    }
}

impl<B: PmBackend> ZenStore<'_, B> {
    /// `zen+` on several nodes: counts a heap read as local or remote.
    #[inline]
    fn count_heap_read(&self, plus: &super::ZenPlus, slot: u64) {
        let Some(soft) = &plus.soft else { return };
        if slot == 0 {
            return;
        }
        let topology = &soft.topology;
        let node = topology
            .node_of_slot(|| self.shared.pool.backend().numa_node_of(slot), || self.shared.heap.owner_of(slot).1);
        let counters = &self.shared.counters[self.id];
        if node == topology.node_of_worker(self.id) {
            WorkerCounters::add(&counters.numa_local_reads, 1);
        } else {
            WorkerCounters::add(&counters.numa_remote_reads, 1);
        }
    }
}

impl<B: PmBackend> ZenStore<'_, B> {
    /// Caches `value` (the version of word `seen_word`) of `row` in this
    /// worker's region if the row still holds `seen` and room can be made.
    fn fill(&self, row: &Row, seen: *mut Cached, seen_word: u64, value: &[u8]) {
        let epochs = &*self.shared.epochs;
        let mut ring = self.shared.caches[self.id].lock();
        if !ring.enabled() {
            return;
        }
        let cost = ClockRing::cost(value.len());
        let Some(evicted) = ring.make_room(cost, epochs) else { return };
        WorkerCounters::add(&self.shared.counters[self.id].cache_evictions, evicted);
        let new = ring.allocate(record::tid_of(seen_word), value, self.id);
        if !row.replace_cached(seen, new.as_ptr()) {
            // SAFETY: `new` was never published.
            unsafe { ring.recycle(new) };
            return;
        }
        let index = ring.admit(row, new, cost);
        // IMPORTANT: the row may have been deleted since it was read, and a
        // reclaimer may be deciding to unlink it: it locks the row, fences,
        // then checks the ring references. With this fence either it sees
        // the reference, or this re-check sees its lock (or a later word)
        // and the entry is dropped again, so no ring entry outlives a row.
        fence(Ordering::SeqCst);
        if row.word() != seen_word {
            ring.forget(index, row, new, epochs);
        }
        drop(ring);
        if let Some(old) = NonNull::new(seen) {
            // An older version's entry, unpublished by the swap above: its
            // region retires it (never while holding our own region's lock).
            retire_cached(self.shared, old, false);
        }
    }
}

/// The store of worker `id`'s reads (a function of the worker's fields, so
/// the transaction state stays borrowable beside it).
fn store<'a, B: PmBackend>(
    shared: &'a ZenShared<B>,
    id: usize,
    adaptive: &'a AdaptiveTx,
    spilled: &'a HashMap<usize, (Reserved, u32)>,
) -> ZenStore<'a, B> {
    let plus = shared.plus.is_some();
    ZenStore { shared, id, adaptive: plus.then_some(adaptive), fill: !(plus && adaptive.read_only()), spilled }
}

/// Retires a cache entry unpublished from its row into the region that
/// admitted it; with `drop_entry`, that region also stops charging it (a
/// delete: nothing may keep the deleted row referenced). The caller holds
/// no region lock.
fn retire_cached<B: PmBackend>(shared: &ZenShared<B>, entry: NonNull<Cached>, drop_entry: bool) {
    // SAFETY: unpublished but not freed: only its region frees it, below.
    let (owner, index) = unsafe { entry.as_ref() }.ring_slot();
    let mut ring = shared.caches[owner].lock();
    if drop_entry {
        ring.drop_if_holds(index, entry.as_ptr() as usize);
    }
    ring.retire(entry, &shared.epochs);
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
            hinted: Vec::new(),
            batch: PersistBatch::new(),
            active: false,
            adaptive: AdaptiveTx::default(),
            spilled: HashMap::new(),
            spill_cts: None,
            spill_cursor: 0,
            arena_after_spill: 0,
            spill_garbage: 0,
            bound_thread: None,
        }
    }

    fn count_abort<T>(&self, result: TxResult<T>) -> TxResult<T> {
        if let Err(TxError::Abort(_)) = &result {
            WorkerCounters::add(&self.shared.counters[self.id].aborts, 1);
        }
        result
    }

    /// Returns the commit's reservations, except the slots of direct NVM
    /// writes (they hold tuples: [`ZenWorker::discard_spilled`] erases
    /// them first).
    fn unreserve_all(&mut self, state: &mut heap::RegionState) {
        for (index, reserved) in self.reserved.drain(..).enumerate() {
            let row = self.tx.writes.entries().get(index).map(|entry| entry.row() as *const Row as usize);
            if row.is_some_and(|row| self.spilled.contains_key(&row)) {
                continue;
            }
            state.unreserve(&self.shared.heap, &self.shared.pool, reserved);
        }
    }

    /// The committed value of `row` (locked by this commit, present): from
    /// the cache if it holds the version, else from its NVM-tuple.
    fn read_locked(&mut self, row: &Row, word: u64) {
        self.old_value.clear();
        match row.cached() {
            Some(entry) if entry.cts() == record::tid_of(word) => entry.copy_into(&mut self.old_value),
            _ => {
                self.old_value.resize(row.len(), 0);
                self.shared.pool.backend().read(row.slot() + META_LEN + row.key().len() as u64, &mut self.old_value);
            }
        }
    }

    /// Encodes and persists the write set; returns the LP tuple's slot (0 if
    /// nothing needed persisting). Unneeded reservations are returned and
    /// their `reserved` entries zeroed.
    fn persist(&mut self, shared: &ZenShared<B>, state: &mut heap::RegionState, cts: u64) -> u64 {
        let writes = &self.tx.writes;
        if self.encoded.len() < writes.len() {
            self.encoded.resize_with(writes.len(), Vec::new);
        }
        let mut order = std::mem::take(&mut self.persist_order);
        order.clear();
        // Direct NVM writes the transaction did not change since: durable
        // content already (their fence), not rewritten unless one carries
        // the LP bit.
        let mut written_early = Vec::new();
        for index in 0..writes.len() {
            let entry = &writes.entries()[index];
            let row = entry.row();
            let spilled = self.spilled.contains_key(&(row as *const Row as usize));
            if entry.is_delete() && row.slot() == 0 && !spilled {
                // A delete of a row that never reached the heap.
                let unused = self.reserved[index];
                self.reserved[index].slot = 0;
                state.unreserve(&shared.heap, &shared.pool, unused);
                continue;
            }
            let value = match writes.value_state(index) {
                WriteValue::Spilled(_) => {
                    written_early.push(index);
                    continue;
                }
                WriteValue::Bytes(value) => value,
                WriteValue::Delete => &[],
            };
            let meta = &shared.metas[entry.table.0 as usize];
            if row.tuple_id() == 0 {
                row.set_tuple_id(meta.next_tuple_id.fetch_add(1, Ordering::Relaxed));
            }
            heap::encode_tuple(
                &mut self.encoded[index],
                cts,
                row.tuple_id(),
                entry.is_delete(),
                writes.key(index),
                value,
            );
            order.push(index);
        }
        if order.is_empty() && written_early.is_empty() {
            self.persist_order = order;
            return 0;
        }
        if let Some(meta) = &shared.wbl_meta {
            // wbl: each superseded version is claimed in its NVM header
            // (transaction id, end timestamp), persisted on its own.
            for &index in &order {
                let slot = writes.entries()[index].row().slot();
                if slot != 0 {
                    meta.persist(slot, cts);
                }
            }
        }
        if shared.window.is_some() {
            // wbl: no LP bit, so no persist order and no pinned slot.
            let (reserved, encoded) = (&self.reserved, &self.encoded);
            zen_persist::persist_versions(shared.pool.backend(), &mut self.batch, order.len(), |position| {
                (reserved[order[position]].slot, encoded[order[position]].as_slice())
            });
            self.persist_order = order;
            return 0;
        }
        // §3.3.4: the LP tuple belongs to the table first in the LP order.
        let rank = |index: usize| shared.lp_rank[writes.entries()[index].table.0 as usize];
        let lp_fresh = (0..order.len()).min_by_key(|&position| rank(order[position]));
        let lp_early = written_early.iter().copied().min_by_key(|&index| rank(index));
        let lp = match (lp_fresh, lp_early) {
            (Some(position), Some(early)) if rank(early) < rank(order[position]) => {
                self.reload_early(shared, early);
                early
            }
            (Some(position), _) => order.remove(position),
            (None, Some(early)) => {
                self.reload_early(shared, early);
                early
            }
            (None, None) => unreachable!("checked above"),
        };
        order.push(lp);
        let (reserved, encoded) = (&self.reserved, &self.encoded);
        persist_tuples(
            shared.pool.backend(),
            &mut self.batch,
            order.len(),
            |position| (reserved[order[position]].slot, encoded[order[position]].as_slice()),
            shared.faults,
        );
        self.persist_order = order;
        self.reserved[lp].slot
    }

    /// Reads write `index`'s tuple, written early to its reserved slot,
    /// back into its encoding buffer, so it can be persisted again as the
    /// LP tuple (the same bytes: a torn rewrite leaves the same content).
    fn reload_early(&mut self, shared: &ZenShared<B>, index: usize) {
        let key_len = self.tx.writes.key(index).len();
        let WriteValue::Spilled(len) = self.tx.writes.value_state(index) else {
            unreachable!("only spilled writes are written early")
        };
        let buffer = &mut self.encoded[index];
        buffer.clear();
        buffer.resize(META_LEN as usize + key_len + len, 0);
        shared.pool.backend().read(self.reserved[index].slot, buffer);
        // Word 0 as encoded, without the LP bit (the broken variant wrote it).
        let word0 = u64::from_le_bytes(buffer[..8].try_into().expect("8 bytes")) & heap::CTS_MASK;
        buffer[..8].copy_from_slice(&word0.to_le_bytes());
    }

    /// Unpublishes `row`'s cached value (locked by this commit) without
    /// caching the new one, which was written to the heap directly.
    fn install_uncached(&self, row: &Row) {
        if let Some(old) = row.install_cached(std::ptr::null_mut()) {
            retire_cached(&self.shared, old, false);
        }
    }

    /// `zen+`'s direct NVM writes (module docs): writes every buffered new
    /// value of a table without secondary indexes to a slot of this
    /// worker's region, stamped with the commit's Tx-CTS (fixed now if it
    /// is not yet) and without the LP bit, makes them durable with one
    /// fence, and drops them from the write set's arena.
    fn spill(&mut self) -> TxResult<()> {
        let shared = Arc::clone(&self.shared);
        let (heap, pool) = (&shared.heap, &*shared.pool);
        let mut state = heap.regions[self.id].state.lock();
        let cts = match self.spill_cts {
            Some(cts) => cts,
            None => {
                // No other transaction runs, so nothing commits until this
                // one does: a TID above everything read or written now, the
                // region's last and the clock stays above all of them.
                let mut newest = state.last_cts.max(self.tx.max_read_tid());
                for entry in self.tx.writes.entries() {
                    newest = newest.max(record::tid_of(entry.row().word()));
                }
                let tid = (newest + 1).max(record::first_tid_of_epoch(shared.epochs.global()));
                let cts = shared.cc.versions().map_or(tid, |versions| versions.commit_tid(tid));
                self.spill_cts = Some(cts);
                cts
            }
        };
        if self.encoded.is_empty() {
            self.encoded.push(Vec::new());
        }
        let mut written = 0u64;
        let first = std::mem::replace(&mut self.spill_cursor, self.tx.writes.len());
        for index in first..self.tx.writes.len() {
            let WriteValue::Bytes(value) = self.tx.writes.value_state(index) else { continue };
            let entry = &self.tx.writes.entries()[index];
            if !shared.tables[entry.table.0 as usize].schema().secondaries.is_empty() {
                // Secondary maintenance needs the value at commit.
                continue;
            }
            let row = entry.row();
            let address = row as *const Row as usize;
            let reserved = match self.spilled.get(&address) {
                Some(&(reserved, _)) => reserved,
                None => state
                    .reserve(heap, pool, &shared.epochs, self.id, entry.table.0, &|| shared.advance_epoch())
                    .map_err(TxError::Db)?,
            };
            if row.tuple_id() == 0 {
                row.set_tuple_id(shared.metas[entry.table.0 as usize].next_tuple_id.fetch_add(1, Ordering::Relaxed));
            }
            let buffer = &mut self.encoded[0];
            heap::encode_tuple(buffer, cts, row.tuple_id(), false, self.tx.writes.key(index), value);
            zen_persist::write_tuple_early(pool.backend(), &mut self.batch, reserved.slot, buffer, shared.faults);
            self.spilled.insert(address, (reserved, value.len() as u32));
            self.spill_garbage += value.len();
            self.tx.writes.spill(index);
            written += 1;
        }
        drop(state);
        if written > 0 {
            self.batch.flush(pool.backend());
            pool.backend().fence();
            pool.backend().crash_point("zen+: tuples written before their commit");
        }
        if self.spill_garbage * 2 > self.tx.writes.arena_bytes() {
            self.tx.writes.compact();
            self.spill_garbage = 0;
        }
        self.arena_after_spill = self.tx.writes.arena_bytes();
        // Waiting for space may have left the epoch (the heap's reserve);
        // this transaction goes on reading, alone in the exclusive stage.
        shared.epochs.enter(self.id);
        if let Some(plus) = &shared.plus {
            plus.adaptive.count_direct_writes(self.id, written);
        }
        Ok(())
    }

    /// Erases the direct NVM writes of an attempt that did not commit
    /// (word 0 = the free marker, or 0 in an old-kind chunk; one fence) and
    /// frees their slots: a later commit of the region must not find them
    /// below its horizon.
    fn discard_spilled(&mut self) {
        self.reset_spill();
        if self.spilled.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let (heap, pool) = (&shared.heap, &*shared.pool);
        let backend = pool.backend();
        let mut state = heap.regions[self.id].state.lock();
        let erased = self.spilled.len() as u64;
        for (_, (reserved, _)) in self.spilled.drain() {
            backend.store_u64(reserved.slot, heap.free_word(reserved.slot));
            backend.flush(reserved.slot, 8);
            state.unreserve(heap, pool, Reserved { kind: SlotKind::Clean, ..reserved });
        }
        // IMPORTANT: the erasures are durable before this region commits
        // anything else.
        backend.fence();
        drop(state);
        if let Some(plus) = &shared.plus {
            plus.adaptive.count_direct_erased(self.id, erased);
        }
    }

    /// Forgets the spill bookkeeping of an attempt (its spilled tuples
    /// committed or erased).
    fn reset_spill(&mut self) {
        self.spill_cts = None;
        self.spill_cursor = 0;
        self.arena_after_spill = 0;
        self.spill_garbage = 0;
    }

    /// After an operation of the body: the Met-Cache cost of the rows it
    /// read for the first time and of the new versions it buffered joins
    /// the footprint α checks, and the exclusive stage writes the buffered
    /// versions to the heap once those buffered since the last such write
    /// outgrow the Met-Cache region.
    fn after_operation(&mut self) -> TxResult<()> {
        let Some(plus) = &self.shared.plus else { return Ok(()) };
        let adaptive = &self.adaptive;
        let mut bytes = 0u64;
        for row in self.tx.read_rows_from(adaptive.counted_reads.get()) {
            bytes += ClockRing::cost(row.len());
        }
        adaptive.counted_reads.set(self.tx.reads_len());
        for index in adaptive.counted_writes.get()..self.tx.writes.len() {
            if let WriteValue::Bytes(value) = self.tx.writes.value_state(index) {
                bytes += ClockRing::cost(value.len());
            }
        }
        adaptive.counted_writes.set(self.tx.writes.len());
        plus.adaptive.on_footprint(self.id, adaptive, bytes).map_err(TxError::Abort)?;
        let buffered = self.tx.writes.arena_bytes().saturating_sub(self.arena_after_spill);
        if self.adaptive.privileged().is_some() && buffered as u64 > plus.adaptive.region_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// A body operation's result, after [`ZenWorker::after_operation`].
    fn finish_operation<T>(&mut self, result: TxResult<T>) -> TxResult<T> {
        let result = result.and_then(|value| self.after_operation().map(|()| value));
        self.count_abort(result)
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

    /// Ends this worker's exclusive stage, if it holds one: maintenance for
    /// every region (`adaptive.rs`, step 4), then G-EX is released.
    fn finish_exclusive(&mut self) {
        if self.shared.plus.is_none() || self.adaptive.privileged().is_none() {
            return;
        }
        debug_assert!(self.spilled.is_empty());
        // The sweep needs this worker out of its epoch (and holding no
        // region lock).
        self.leave();
        let shared = &*self.shared;
        let plus = shared.plus.as_ref().expect("zen+");
        let (heap, pool) = (&shared.heap, &*shared.pool);
        let before = heap.counters.slots_reclaimed.load(Ordering::Relaxed);
        heap.sweep(pool, &shared.epochs, &|| shared.advance_epoch());
        for region in &heap.regions {
            region.state.lock().reclaim_tombstones(heap, pool);
        }
        let versions = shared
            .cc
            .versions()
            .map_or(0, |versions| versions.collect_all(&mut crate::cc::secondaries::unindex_stale(&shared.tables)));
        let adaptive = &plus.adaptive;
        adaptive.maintenance_runs.fetch_add(1, Ordering::Relaxed);
        adaptive
            .maintenance_slots
            .fetch_add(heap.counters.slots_reclaimed.load(Ordering::Relaxed) - before, Ordering::Relaxed);
        adaptive.maintenance_versions.fetch_add(versions as u64, Ordering::Relaxed);
        adaptive.release(self.id, &self.adaptive);
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

    /// Makes the Met-Cache hold `value` (version `cts`) for `row`, locked by
    /// this commit: in place when the row's cached entry has room, else a
    /// new entry in this worker's region. A delete (`None`) unpublishes the
    /// cached value and drops its ring entry at once, so nothing keeps the
    /// deleted row from being reclaimed.
    fn install_cache(&self, row: &Row, cts: u64, value: Option<&[u8]>) {
        let shared = &*self.shared;
        let replaced = match value {
            Some(value) => {
                if row.cached().is_some_and(|entry| entry.overwrite(cts, value)) {
                    return;
                }
                let mut ring = shared.caches[self.id].lock();
                let installed = ring.enabled().then(|| ClockRing::cost(value.len())).and_then(|cost| {
                    let evicted = ring.make_room(cost, &shared.epochs)?;
                    WorkerCounters::add(&shared.counters[self.id].cache_evictions, evicted);
                    let new = ring.allocate(cts, value, self.id);
                    let old = row.install_cached(new.as_ptr());
                    ring.admit(row, new, cost);
                    Some(old)
                });
                drop(ring);
                match installed {
                    Some(old) => old,
                    None => row.install_cached(std::ptr::null_mut()),
                }
            }
            None => row.install_cached(std::ptr::null_mut()),
        };
        // The replaced entry goes back to its region (no region lock is held
        // here, so two committers never wait for each other's regions); a
        // delete also releases the row's ring reference at once.
        if let Some(old) = replaced {
            retire_cached(shared, old, value.is_none());
        }
    }

    /// Issues the value prefetches of the rows hinted since the last
    /// access (see `prefetch`).
    #[inline]
    fn prefetch_hinted_values(&mut self) {
        for row in self.hinted.drain(..) {
            // SAFETY: hinted while this attempt is announced (`prefetch`),
            // and the list is emptied before the attempt ends
            // (`after_attempt`, `leave`): indexed rows are freed only after
            // every attempt announced when they were unlinked has ended.
            unsafe { &*(row as *const Row) }.prefetch_value();
        }
    }

    fn leave(&mut self) {
        self.hinted.clear();
        if self.active {
            self.shared.epochs.leave(self.id);
            self.active = false;
        }
    }

    /// Queues rows left absent and reclaims what is due.
    fn after_attempt(&mut self) {
        self.hinted.clear();
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

/// What a Zen commit holds from its reservations to its maintenance.
pub(crate) struct Held<'s> {
    /// The worker's heap region (uncontended; a sweep waits for it).
    state: MutexGuard<'s, heap::RegionState>,
    /// The LP tuple's slot (0: nothing persisted).
    lp_slot: u64,
}

/// Zen's storage and its log-free durability in the commit pipeline
/// (module comment, steps 1-6).
impl<B: PmBackend> CommitSteps for ZenWorker<B> {
    type Row = Row;
    type Shared = ZenShared<B>;
    type Held<'s>
        = Held<'s>
    where
        ZenShared<B>: 's;
    type Rule = Validating;
    /// The persist (Algorithm 1) precedes the install.
    const STAGE: CommitStage = CommitStage::LogBeforeInstall;

    #[inline]
    fn tx(&mut self) -> &mut TxState<Row> {
        &mut self.tx
    }

    #[inline]
    fn worker_id(&self) -> usize {
        self.id
    }

    #[inline]
    fn tables(shared: &ZenShared<B>) -> &[crate::storage::table::Table<Row>] {
        &shared.tables
    }

    #[inline]
    fn concurrency(shared: &ZenShared<B>) -> &Concurrency {
        &shared.cc
    }

    #[inline]
    fn global_epoch(shared: &ZenShared<B>) -> u64 {
        shared.epochs.global()
    }

    /// `zen+`: a transaction that is not yet committing yields to an
    /// exclusive stage; from here on it finishes.
    fn enter<'s>(&mut self, shared: &'s ZenShared<B>) -> TxResult<Region<'s>> {
        if let Some(plus) = &shared.plus {
            plus.adaptive.check(self.id, &self.adaptive).map_err(TxError::Abort)?;
        }
        Ok(Region::Software)
    }

    fn read_only_ticket(&mut self, shared: &ZenShared<B>) -> CommitTicket {
        if shared.window.is_some() {
            // wbl: what it read is committed once its window is.
            return CommitTicket::Epoch(record::epoch_of_tid(self.tx.max_read_tid()));
        }
        // Every version readable was durable before it was installed.
        CommitTicket::Durable
    }

    /// Step 1-2: lock the worker's heap region, reserve one slot per write
    /// (in the write set's lock order, so the reservation order matches)
    /// and start their lines' ownership requests.
    fn prepare<'s>(&mut self, shared: &'s ZenShared<B>) -> TxResult<Held<'s>> {
        if shared.closed.load(Ordering::Relaxed) {
            return Err(TxError::Db(DbError::Poisoned("the database is closed".into())));
        }
        let (heap, pool) = (&shared.heap, &*shared.pool);
        let advance = || shared.advance_epoch();
        let mut state = heap.regions[self.id].state.lock();
        self.tx.writes.sort_by_row();
        self.reserved.clear();
        for index in 0..self.tx.writes.len() {
            let entry = &self.tx.writes.entries()[index];
            if let Some(&(reserved, _)) = self.spilled.get(&(entry.row() as *const Row as usize)) {
                self.reserved.push(reserved);
                continue;
            }
            let table = entry.table.0;
            match state.reserve(heap, pool, &shared.epochs, self.id, table, &advance) {
                Ok(reserved) => self.reserved.push(reserved),
                Err(error) => {
                    self.unreserve_all(&mut state);
                    return Err(TxError::Db(error));
                }
            }
        }
        // The reserved slots are cold: start their lines' ownership
        // requests now, so step 4's stores do not stall on them one by one.
        for (index, reserved) in self.reserved.iter().enumerate() {
            if let (true, WriteValue::Bytes(value)) = (reserved.slot != 0, self.tx.writes.value_state(index)) {
                let entry = &self.tx.writes.entries()[index];
                let value_len = value.len();
                pool.backend()
                    .prefetch_for_write(reserved.slot, META_LEN + (entry.row().key().len() + value_len) as u64);
            }
        }
        Ok(Held { state, lp_slot: 0 })
    }

    fn unprepare(&mut self, _shared: &ZenShared<B>, held: &mut Held<'_>) {
        self.unreserve_all(&mut held.state);
    }

    /// The Tx-CTS: Silo's TID above the region's last (so it grows per
    /// thread), or the one the direct NVM writes carry already.
    #[inline]
    fn tid_floor(&self, held: &Held<'_>) -> TidFloor {
        match self.spill_cts {
            Some(cts) => TidFloor::Fixed(cts),
            None => TidFloor::Above(held.state.last_cts),
        }
    }

    /// Step 4: persist (Algorithm 1; wbl: the versions and one fence).
    fn persist_before_install(
        &mut self,
        shared: &ZenShared<B>,
        held: &mut Held<'_>,
        cts: u64,
    ) -> DbResult<Option<CommitTicket>> {
        debug_assert!(cts > held.state.last_cts && cts & heap::LP_BIT == 0);
        held.lp_slot = self.persist(shared, &mut held.state, cts);
        Ok(None)
    }

    /// Step 5: points the row at its new NVM-tuple and installs the value
    /// in this worker's Met-Cache region; the superseded slot becomes
    /// garbage, a delete's slot a tombstone.
    fn install(&mut self, shared: &ZenShared<B>, _held: &mut Held<'_>, index: usize, cts: u64) {
        let entry = &self.tx.writes.entries()[index];
        let locked_word = entry.locked_word;
        // SAFETY: see `WriteEntry::row`; the reference does not borrow
        // the write set, which `maintain_secondaries` reads.
        let row: &Row = unsafe { &*(entry.row() as *const Row) };
        if pipeline::needs_current(&self.tx, &shared.tables, index) {
            self.read_locked(row, locked_word);
            pipeline::install_bookkeeping(&mut self.tx, &shared.tables, index, row, Some(&self.old_value), cts);
        } else {
            pipeline::install_bookkeeping(&mut self.tx, &shared.tables, index, row, None, cts);
        }
        let reserved = self.reserved[index];
        if reserved.slot == 0 {
            // Nothing persisted (a delete of a never-durable row).
            self.install_cache(row, cts, None);
            return;
        }
        let old_slot = row.slot();
        match self.tx.writes.value_state(index) {
            WriteValue::Bytes(bytes) => {
                row.set_slot(reserved.slot, bytes.len());
                self.install_cache(row, cts, Some(bytes));
            }
            WriteValue::Spilled(len) => {
                // Written to the heap directly: its Met-Cache region
                // was full, so the row is not cached.
                row.set_slot(reserved.slot, len);
                self.install_uncached(row);
            }
            WriteValue::Delete => {
                row.set_slot(reserved.slot, 0);
                self.install_cache(row, cts, None);
                self.tombstones.push((index, reserved.slot));
            }
        }
        if old_slot != 0 {
            // A superseded tombstone can never resurrect anything.
            let kind = if locked_word & ABSENT != 0 { SlotKind::Clean } else { SlotKind::Stale };
            self.retired.push(Garbage { slot: old_slot, stamp: 0, kind });
        }
    }

    /// Step 5's end: the garbage stamp, read after every row points at its
    /// new slot and before the rows are unlocked, stamps the superseded
    /// slots and the tombstones.
    fn installed(&mut self, shared: &ZenShared<B>, held: &mut Held<'_>, cts: u64) {
        // IMPORTANT: the stamp is read after every row points at its new
        // slot (reader safety) and before the rows are unlocked (so stamps of
        // one key's versions grow, which the tombstone sweep relies on).
        let stamp = heap::horizon_stamp(&shared.epochs);
        if let Some(window) = &shared.window {
            // The windows up to this commit's, and up to the stamp of what
            // it superseded (which is reused once that is durable), are
            // wanted.
            window.note_commit(self.id, record::epoch_of_tid(cts).max(stamp));
        }
        for mut garbage in self.retired.drain(..) {
            garbage.stamp = stamp;
            shared.heap.retire(self.id, &mut held.state, garbage);
        }
        for (index, slot) in self.tombstones.drain(..) {
            let entry = &self.tx.writes.entries()[index];
            held.state.push_tombstone(Tombstone::new(
                entry.table.0,
                self.tx.writes.key(index),
                entry.row(),
                slot,
                cts,
                stamp,
            ));
        }
    }

    /// Step 6: moves the region's LP pin, reclaims garbage and the
    /// tombstones the last sweep made safe, unlocks the region, sweeps if
    /// enough tombstones wait.
    fn finish(
        &mut self,
        shared: &ZenShared<B>,
        held: Held<'_>,
        cts: u64,
        _ticket: Option<CommitTicket>,
    ) -> TxResult<CommitTicket> {
        let Held { mut state, lp_slot } = held;
        let (heap, pool) = (&shared.heap, &*shared.pool);
        state.last_cts = cts;
        if lp_slot != 0 {
            state.move_pin(heap, pool, lp_slot);
        }
        self.reserved.clear();
        // The direct NVM writes are committed with the rest.
        self.spilled.clear();
        self.reset_spill();
        state.drain_inbox_of(heap, self.id);
        let horizon = heap.horizon(&shared.epochs);
        state.reclaim(heap, pool, horizon, shared.options.gc_batch);
        state.reclaim_tombstones(heap, pool);
        let sweep = state.tombstones_awaiting_sweep(heap, horizon) >= shared.options.sweep_threshold.max(1);
        drop(state);
        if sweep {
            // A sweep waits for every region; this worker must not hold the
            // horizon back meanwhile (it reads nothing more).
            self.leave();
            heap.sweep(pool, &shared.epochs, &|| shared.advance_epoch());
        }
        if shared.window.is_some() && !shared.faults.ack_before_window() {
            // wbl: committed once the record of the TID's window is durable
            // (the broken variant acknowledges now).
            return Ok(CommitTicket::Epoch(record::epoch_of_tid(cts)));
        }
        Ok(CommitTicket::Durable)
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
                self.hinted.push(row as *const Row as usize);
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
            // Every zen commit is durable when acknowledged.
            (CommitTicket::Durable, _) | (CommitTicket::Epoch(_), None) => Ok(()),
            (CommitTicket::Epoch(epoch), Some(window)) => window.wait_durable(self.id, epoch),
        }
    }
}

impl<B: PmBackend> Drop for ZenWorker<B> {
    fn drop(&mut self) {
        self.discard_spilled();
        self.finish_exclusive();
        self.shared.epochs.leave(self.id);
        self.tx.reclaimer.hand_over(&mut self.shared.orphans.lock());
    }
}
