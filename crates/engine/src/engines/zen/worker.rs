//! A Zen worker: perform in DRAM (Met-Cache + the shared Silo OCC of
//! `cc::silo` over the rows' CC-Meta words), persist log-free (Algorithm 1),
//! maintain (garbage, tombstones, sweeps). §3.3.1.
//!
//! Commit of a writing transaction, step by step:
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
//! versions with one fence and no LP bit (`heap::persist_versions`), step 5
//! unlocks rows whose versions are durable but not yet committed, so the
//! ticket of a writing commit is the epoch of its TID, and that of a
//! read-only one the epoch of the newest TID it read; both are acknowledged
//! once the window's record is durable (`storage::zen::window`); step 6
//! moves no pin.

use super::{WorkerCounters, ZenShared};
use crate::cc::concurrency::Concurrency;
use crate::cc::silo::{OccTx, RowStore};
use crate::engine::{CommitTicket, EngineWorker, ScanRequest, WriteOp};
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::schema::TableId;
use crate::storage::record::{self, RowKind, READ_SPINS};
use crate::storage::table::ReclaimPolicy;
use crate::storage::zen::cache::{Cached, ClockRing, Row, ABSENT, LOCKED};
use crate::storage::zen::heap::{self, persist_tuples, Garbage, Reserved, SlotKind, Tombstone, META_LEN};
use pmtx_pm::{PersistBatch, PmBackend};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// A worker of the Zen engine.
pub(crate) struct ZenWorker<B: PmBackend> {
    shared: Arc<ZenShared<B>>,
    id: usize,
    tx: OccTx<Row>,
    encoded: Vec<Vec<u8>>,
    reserved: Vec<Reserved>,
    /// Reused per commit: the write-set positions in persist order, the
    /// superseded slots, and the tombstones written (position, slot).
    persist_order: Vec<usize>,
    retired: Vec<Garbage>,
    tombstones: Vec<(usize, u64)>,
    old_value: Vec<u8>,
    batch: PersistBatch,
    active: bool,
}

/// Zen's stable read: the Met-Cache value if it holds the row's version,
/// else the NVM-tuple (then cached in the reader's region).
struct ZenStore<'a, B: PmBackend> {
    shared: &'a ZenShared<B>,
    id: usize,
}

impl<B: PmBackend> RowStore<Row> for ZenStore<'_, B> {
    fn read(&self, row: &Row, out: &mut Vec<u8>) -> Result<u64, AbortReason> {
        let backend = self.shared.pool.backend();
        for _ in 0..READ_SPINS {
            let before = row.word();
            if before & LOCKED != 0 {
                std::hint::spin_loop();
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
            let counters = &self.shared.counters[self.id];
            if hit {
                row.touch();
                WorkerCounters::add(&counters.cache_hits, 1);
            } else {
                WorkerCounters::add(&counters.cache_misses, 1);
                self.fill(row, cached, before, out);
            }
            return Ok(before);
        }
        Err(AbortReason::UnstableRead)
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
        let new = Cached::allocate(record::tid_of(seen_word), value, self.id);
        if !row.replace_cached(seen, new.as_ptr()) {
            // SAFETY: `new` was never published.
            unsafe { Cached::free(new) };
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
    fn unlinked(&self, row: &Row) {
        self.0.unlinked(row);
    }
}

impl<B: PmBackend> ZenWorker<B> {
    pub(crate) fn new(shared: Arc<ZenShared<B>>, id: usize) -> Self {
        assert!(id < shared.epochs.capacity(), "worker id {id} beyond the configured worker count");
        let mut tx = OccTx::new(Arc::clone(&shared.cc), id);
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
            batch: PersistBatch::new(),
            active: false,
        }
    }

    fn count_abort<T>(&self, result: TxResult<T>) -> TxResult<T> {
        if let Err(TxError::Abort(_)) = &result {
            WorkerCounters::add(&self.shared.counters[self.id].aborts, 1);
        }
        result
    }

    fn unreserve_all(&mut self, state: &mut heap::RegionState) {
        for reserved in self.reserved.drain(..) {
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

    fn commit_inner(&mut self) -> TxResult<CommitTicket> {
        let shared = Arc::clone(&self.shared);
        // `occ`: validation and write phase in one critical section.
        let _serial = shared.cc.serial_section();
        if self.tx.is_read_only() {
            self.tx.validate(&shared.tables).map_err(TxError::Abort)?;
            if shared.window.is_some() {
                // wbl: what it read is committed once its window is.
                return Ok(CommitTicket::Epoch(record::epoch_of_tid(self.tx.max_read_tid())));
            }
            // Every version readable was durable before it was installed.
            return Ok(CommitTicket::Durable);
        }
        if shared.closed.load(Ordering::Relaxed) {
            return Err(TxError::Db(DbError::Poisoned("the database is closed".into())));
        }
        let heap = &shared.heap;
        let pool = &*shared.pool;
        let region = &heap.regions[self.id];
        let advance = || shared.advance_epoch();
        let mut state = region.state.lock();
        // 2. Reserve slots (lock order of the write set first, so the
        //    reservation order matches).
        self.tx.writes.sort_by_row();
        self.reserved.clear();
        for index in 0..self.tx.writes.len() {
            let table = self.tx.writes.entries()[index].table.0;
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
            if reserved.slot != 0 {
                let entry = &self.tx.writes.entries()[index];
                let value_len = self.tx.writes.value(index).map_or(0, <[u8]>::len);
                pool.backend()
                    .prefetch_for_write(reserved.slot, META_LEN + (entry.row().key().len() + value_len) as u64);
            }
        }
        // 3. Lock, serialization point, validate, Tx-CTS.
        let max_locked = match self.tx.lock_writes() {
            Ok(tid) => tid,
            Err(reason) => {
                self.unreserve_all(&mut state);
                return Err(TxError::Abort(reason));
            }
        };
        let epoch = shared.epochs.global();
        let cts = match self.tx.validate_and_stamp(&shared.tables, max_locked, state.last_cts, epoch) {
            Ok(cts) => cts,
            Err(reason) => {
                self.tx.release(self.tx.writes.len());
                self.unreserve_all(&mut state);
                return Err(TxError::Abort(reason));
            }
        };
        debug_assert!(cts > state.last_cts && cts & heap::LP_BIT == 0);
        // 4. Persist (Algorithm 1; wbl: the versions and one fence).
        let lp_slot = self.persist(&shared, &mut state, cts);
        // 5. Install, stamp, hand over garbage, unlock.
        let mut retired = std::mem::take(&mut self.retired);
        let mut tombstones = std::mem::take(&mut self.tombstones);
        for index in 0..self.tx.writes.len() {
            let entry = &self.tx.writes.entries()[index];
            let (table, locked_word) = (entry.table, entry.locked_word);
            // SAFETY: see `WriteEntry::row`; the reference does not borrow
            // the write set, which `maintain_secondaries` reads.
            let row: &Row = unsafe { &*(entry.row() as *const Row) };
            let has_secondaries = !shared.tables[table.0 as usize].schema().secondaries.is_empty();
            if has_secondaries || self.tx.keeps_versions() {
                let current = if locked_word & ABSENT == 0 {
                    self.read_locked(row, locked_word);
                    Some(self.old_value.as_slice())
                } else {
                    None
                };
                if has_secondaries {
                    self.tx.maintain_secondaries(&shared.tables, index, current);
                }
                self.tx.preserve_version(row, locked_word, current, cts);
            }
            let reserved = self.reserved[index];
            if reserved.slot == 0 {
                // Nothing persisted (a delete of a never-durable row).
                self.install_cache(row, cts, None);
                continue;
            }
            let value = self.tx.writes.value(index);
            let old_slot = row.slot();
            row.set_slot(reserved.slot, value.map_or(0, <[u8]>::len));
            self.install_cache(row, cts, value);
            if old_slot != 0 {
                // A superseded tombstone can never resurrect anything.
                let kind = if locked_word & ABSENT != 0 { SlotKind::Clean } else { SlotKind::Stale };
                retired.push(Garbage { slot: old_slot, stamp: 0, kind });
            }
            if value.is_none() {
                tombstones.push((index, reserved.slot));
            }
        }
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
        for mut garbage in retired.drain(..) {
            garbage.stamp = stamp;
            heap.retire(self.id, &mut state, garbage);
        }
        for (index, slot) in tombstones.drain(..) {
            let entry = &self.tx.writes.entries()[index];
            state.push_tombstone(Tombstone::new(
                entry.table.0,
                self.tx.writes.key(index),
                entry.row(),
                slot,
                cts,
                stamp,
            ));
        }
        (self.retired, self.tombstones) = (retired, tombstones);
        for entry in self.tx.writes.entries() {
            let flags = if entry.is_delete() { ABSENT } else { 0 };
            entry.row().store_word(record::word_of(cts, flags));
        }
        state.last_cts = cts;
        if lp_slot != 0 {
            state.move_pin(heap, pool, lp_slot);
        }
        self.reserved.clear();
        // 6. Maintenance.
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
            heap.sweep(pool, &shared.epochs, &advance);
        }
        if shared.window.is_some() && !shared.faults.ack_before_window() {
            // wbl: committed once the record of the TID's window is durable
            // (the broken variant acknowledges now).
            return Ok(CommitTicket::Epoch(record::epoch_of_tid(cts)));
        }
        Ok(CommitTicket::Durable)
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
        for index in 0..writes.len() {
            let entry = &writes.entries()[index];
            let row = entry.row();
            if entry.is_delete() && row.slot() == 0 {
                // A delete of a row that never reached the heap.
                let unused = self.reserved[index];
                self.reserved[index].slot = 0;
                state.unreserve(&shared.heap, &shared.pool, unused);
                continue;
            }
            let meta = &shared.metas[entry.table.0 as usize];
            if row.tuple_id() == 0 {
                row.set_tuple_id(meta.next_tuple_id.fetch_add(1, Ordering::Relaxed));
            }
            let value = writes.value(index).unwrap_or(&[]);
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
        if order.is_empty() {
            self.persist_order = order;
            return 0;
        }
        if shared.window.is_some() {
            // wbl: no LP bit, so no persist order and no pinned slot.
            let (reserved, encoded) = (&self.reserved, &self.encoded);
            heap::persist_versions(shared.pool.backend(), &mut self.batch, order.len(), |position| {
                (reserved[order[position]].slot, encoded[order[position]].as_slice())
            });
            self.persist_order = order;
            return 0;
        }
        // §3.3.4: the LP tuple belongs to the table first in the LP order.
        let lp_position = (0..order.len())
            .min_by_key(|&position| shared.lp_rank[writes.entries()[order[position]].table.0 as usize])
            .expect("non-empty");
        let lp = order.remove(lp_position);
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
                    let new = Cached::allocate(cts, value, self.id);
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

    fn leave(&mut self) {
        if self.active {
            self.shared.epochs.leave(self.id);
            self.active = false;
        }
    }

    /// Queues rows left absent and reclaims what is due.
    fn after_attempt(&mut self) {
        let shared = &*self.shared;
        self.tx.finish(shared.epochs.global());
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
    fn begin(&mut self, _read_only: bool, attempt: u32) {
        // The announcement's fence (`Epochs::enter`) also pairs with the
        // collector's fence of the heap's reclamation (`storage::zen::heap`).
        self.shared.epochs.enter(self.id);
        self.active = true;
        self.tx.begin(attempt, self.shared.epochs.global());
    }

    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool> {
        let store = ZenStore { shared: &self.shared, id: self.id };
        let result = self.tx.get(&self.shared.tables, &store, table, key, out);
        self.count_abort(result)
    }

    fn get_with(&mut self, table: TableId, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> TxResult<bool> {
        let store = ZenStore { shared: &self.shared, id: self.id };
        let result = self.tx.get_with(&self.shared.tables, &store, table, key, visit);
        self.count_abort(result)
    }

    fn write(&mut self, table: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        let store = ZenStore { shared: &self.shared, id: self.id };
        let result = self.tx.write(&self.shared.tables, &store, table, key, op);
        self.count_abort(result)
    }

    fn prefetch(&mut self, table: TableId, key: &[u8]) {
        // The row, then its cached value (`Row::prefetch_value`).
        if let Some(table) = self.shared.tables.get(table.0 as usize) {
            table.prefetch(key, 0);
        }
    }

    fn update_with(&mut self, table: TableId, key: &[u8], modify: &mut dyn FnMut(&mut [u8])) -> TxResult<bool> {
        let store = ZenStore { shared: &self.shared, id: self.id };
        let result = self.tx.update_with(&self.shared.tables, &store, table, key, modify);
        self.count_abort(result)
    }

    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()> {
        let store = ZenStore { shared: &self.shared, id: self.id };
        let result = self.tx.scan(&self.shared.tables, &store, request, visit);
        self.count_abort(result)
    }

    fn commit(&mut self) -> TxResult<CommitTicket> {
        let result = self.commit_inner();
        self.after_attempt();
        let result = self.count_abort(result);
        if result.is_ok() {
            WorkerCounters::add(&self.shared.counters[self.id].commits, 1);
        }
        result
    }

    fn abort(&mut self) {
        self.after_attempt();
    }

    fn idle(&mut self) {
        self.leave();
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
        self.shared.epochs.leave(self.id);
        self.tx.reclaimer.hand_over(&mut self.shared.orphans.lock());
    }
}
