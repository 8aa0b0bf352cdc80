//! A Zen worker: perform in DRAM (Met-Cache + Silo OCC), persist log-free
//! (Algorithm 1), maintain (garbage, tombstones, sweeps). §3.3.1.
//!
//! Commit of a writing transaction, step by step:
//!
//! 1. lock the worker's heap region (uncontended; a sweep waits for it);
//! 2. reserve one free slot per write (DRAM lists; a new chunk when dry);
//! 3. lock the write set in address order; read the global epoch;
//!    validate reads and scanned leaves; pick the Tx-CTS (Silo TID, above the
//!    region's last Tx-CTS so it grows per thread);
//! 4. persist: encode every new version, LP tuple last — a tuple of the table
//!    first in the LP order (§3.3.4) — and run Algorithm 1 (two fences);
//! 5. install while still locked: point each row at its new NVM-tuple,
//!    install the value in this worker's cache region, then read the garbage
//!    stamp and hand the superseded NVM-tuples to their regions; unlock by
//!    storing the new word (TID = Tx-CTS). Readers never see a version before
//!    it is durable, so every ticket, read-only ones included, is `Durable`;
//! 6. move the region's LP pin; reclaim up to `gc_batch` garbage entries and
//!    the tombstones the last sweep made safe; unlock the region; run a sweep
//!    if enough tombstones wait.

use super::cache::{new_cached, Cached, ClockRing, Row, ABSENT, LOCKED};
use super::cc::{LeafEntry, SiloOcc, WriteEntry};
use super::heap::{self, persist_tuples, Garbage, Reserved, SlotKind, Tombstone, META_LEN};
use super::ZenShared;
use crate::engine::{CommitTicket, EngineWorker, ScanRequest, WriteOp};
use crate::error::{AbortReason, DbError, TxError, TxResult};
use crate::record;
use crate::schema::TableId;
use crate::table;
use crossbeam_epoch::{self as epoch, Guard, Shared};
use pmtx_pm::{PersistBatch, PmBackend};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Retries of a read that finds its row locked or changing.
const READ_SPINS: u32 = 1 << 12;

/// A worker of the Zen engine.
pub(crate) struct ZenWorker<B: PmBackend> {
    shared: Arc<ZenShared<B>>,
    id: usize,
    cc: SiloOcc,
    scratch: Vec<u8>,
    encoded: Vec<Vec<u8>>,
    reserved: Vec<Reserved>,
    batch: PersistBatch,
    active: bool,
}

impl<B: PmBackend> ZenWorker<B> {
    pub(crate) fn new(shared: Arc<ZenShared<B>>, id: usize) -> Self {
        assert!(id < shared.epochs.capacity(), "worker id {id} beyond the configured worker count");
        Self {
            shared,
            id,
            cc: SiloOcc::default(),
            scratch: Vec::new(),
            encoded: Vec::new(),
            reserved: Vec::new(),
            batch: PersistBatch::new(),
            active: false,
        }
    }

    fn count_abort<T>(&self, result: TxResult<T>) -> TxResult<T> {
        if let Err(TxError::Abort(_)) = &result {
            self.shared.counters[self.id].aborts.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// A stable read of (word, value): from the Met-Cache if it holds this
    /// version, else from the NVM-tuple (then cached in this worker's
    /// region). Returns the word (unlocked).
    fn stable_read(&self, key: &[u8], row: &Row, out: &mut Vec<u8>) -> TxResult<u64> {
        let backend = self.shared.pool.backend();
        let guard = epoch::pin();
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
            let cached = row.cached(&guard);
            // SAFETY: cached values are immutable and reclaimed through the
            // epoch `guard` pins.
            let hit = match unsafe { cached.as_ref() } {
                Some(entry) if entry.cts == record::tid_of(before) => {
                    out.extend_from_slice(&entry.value);
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
                // (heap.rs, "reclamation"); the length is at most the
                // table's limit, so the read stays inside the slot even if it
                // pairs with another version's slot (then `after` differs).
                out.resize(row.len(), 0);
                backend.read(slot + META_LEN + key.len() as u64, out);
            }
            if row.word() != before {
                continue;
            }
            let counters = &self.shared.counters[self.id];
            if hit {
                row.touch();
                counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            } else {
                counters.cache_misses.fetch_add(1, Ordering::Relaxed);
                self.fill(row, cached, record::tid_of(before), out, &guard);
            }
            return Ok(before);
        }
        Err(TxError::Abort(AbortReason::UnstableRead))
    }

    /// Caches `value` (version `cts`) of `row` in this worker's region if
    /// the row still holds `seen` and room can be made.
    fn fill(&self, row: &Row, seen: Shared<'_, Cached>, cts: u64, value: &[u8], guard: &Guard) {
        let mut ring = self.shared.caches[self.id].lock();
        if !ring.enabled() {
            return;
        }
        let cost = ClockRing::cost(value.len());
        let Some(evicted) = ring.make_room(cost, guard) else { return };
        self.shared.counters[self.id].cache_evictions.fetch_add(evicted, Ordering::Relaxed);
        let new = new_cached(cts, value).into_shared(guard);
        if row.replace_cached(seen, new, guard) {
            ring.admit(row, new, cost);
        } else {
            // SAFETY: `new` was never published.
            drop(unsafe { new.into_owned() });
        }
    }

    fn read_row(&mut self, key: &[u8], row: &Row, out: &mut Vec<u8>) -> TxResult<bool> {
        if let Some(position) = self.cc.find_write(row) {
            return Ok(match &self.cc.writes[position].value {
                Some(value) => {
                    out.clear();
                    out.extend_from_slice(value);
                    true
                }
                None => false,
            });
        }
        let word = self.stable_read(key, row, out)?;
        self.cc.note_read(row, word);
        Ok(word & ABSENT == 0)
    }

    fn unreserve_all(&mut self, state: &mut heap::RegionState) {
        for reserved in self.reserved.drain(..) {
            state.unreserve(&self.shared.heap, &self.shared.pool, reserved);
        }
    }

    fn commit_inner(&mut self) -> TxResult<CommitTicket> {
        let shared = Arc::clone(&self.shared);
        if self.cc.writes.is_empty() {
            self.cc.validate(&shared.tables).map_err(TxError::Abort)?;
            // Every version readable was durable before it was installed.
            return Ok(CommitTicket::Durable);
        }
        if shared.closed.load(Ordering::Relaxed) {
            return Err(TxError::Db(DbError::Poisoned("the database is closed".into())));
        }
        let heap = &shared.heap;
        let pool = &*shared.pool;
        let region = &heap.regions[self.id];
        let mut state = region.state.lock();
        // 2. Reserve slots (lock order of the write set first, so the
        //    reservation order matches).
        self.cc.sort_writes();
        self.reserved.clear();
        for index in 0..self.cc.writes.len() {
            let table = self.cc.writes[index].table.0;
            match state.reserve(heap, pool, &shared.epochs, self.id, table) {
                Ok(reserved) => self.reserved.push(reserved),
                Err(error) => {
                    self.unreserve_all(&mut state);
                    return Err(TxError::Db(error));
                }
            }
        }
        // 3. Lock, serialization point, validate, Tx-CTS.
        let max_locked = match self.cc.lock_writes() {
            Ok(tid) => tid,
            Err(reason) => {
                self.unreserve_all(&mut state);
                return Err(TxError::Abort(reason));
            }
        };
        let epoch = shared.epochs.global();
        if let Err(reason) = self.cc.validate(&shared.tables) {
            self.cc.release(self.cc.writes.len());
            self.unreserve_all(&mut state);
            return Err(TxError::Abort(reason));
        }
        let cts = self.cc.commit_tid(max_locked, state.last_cts, epoch);
        debug_assert!(cts > state.last_cts && cts & heap::LP_BIT == 0);
        // 4. Persist (Algorithm 1).
        let lp_slot = self.persist(&shared, &mut state, cts);
        // 5. Install, stamp, hand over garbage, unlock.
        let guard = epoch::pin();
        let mut retired: Vec<Garbage> = Vec::new();
        let mut tombstones: Vec<(usize, u64)> = Vec::new();
        {
            let mut ring = shared.caches[self.id].lock();
            for (index, write) in self.cc.writes.iter().enumerate() {
                let row = write.row();
                let reserved = self.reserved[index];
                if reserved.slot == 0 {
                    // Nothing persisted (a delete of a never-durable row).
                    row.install_cached(Shared::null(), &guard);
                    continue;
                }
                let old_slot = row.slot();
                row.set_slot(reserved.slot, write.value.as_ref().map_or(0, Vec::len));
                match &write.value {
                    Some(value) if ring.enabled() => {
                        let cost = ClockRing::cost(value.len());
                        match ring.make_room(cost, &guard) {
                            Some(evicted) => {
                                shared.counters[self.id].cache_evictions.fetch_add(evicted, Ordering::Relaxed);
                                let new = new_cached(cts, value).into_shared(&guard);
                                row.install_cached(new, &guard);
                                ring.admit(row, new, cost);
                            }
                            None => row.install_cached(Shared::null(), &guard),
                        }
                    }
                    _ => row.install_cached(Shared::null(), &guard),
                }
                if old_slot != 0 {
                    // A superseded tombstone can never resurrect anything.
                    let kind = if write.locked_word & ABSENT != 0 { SlotKind::Clean } else { SlotKind::Stale };
                    retired.push(Garbage { slot: old_slot, stamp: 0, kind });
                }
                if write.value.is_none() {
                    tombstones.push((index, reserved.slot));
                }
            }
        }
        // IMPORTANT: the stamp is read after every row points at its new
        // slot (reader safety) and before the rows are unlocked (so stamps of
        // one key's versions grow, which the tombstone sweep relies on).
        let stamp = heap::horizon_stamp(&shared.epochs);
        for mut garbage in retired {
            garbage.stamp = stamp;
            heap.retire(self.id, &mut state, garbage);
        }
        for (index, slot) in tombstones {
            let write = &self.cc.writes[index];
            state.push_tombstone(Tombstone::new(write.table.0, &write.key, write.row(), slot, cts, stamp));
        }
        // Secondary entries go in while the rows are locked (as in occ.rs).
        for write in &self.cc.writes {
            if let (true, Some(value)) = (write.index_secondaries, &write.value) {
                if let Err(error) =
                    shared.tables[write.table.0 as usize].index_secondaries(&write.key, value, write.row())
                {
                    unreachable!("secondary key lengths are checked when a write is buffered: {error}");
                }
            }
        }
        for write in &self.cc.writes {
            let flags = if write.value.is_none() { ABSENT } else { 0 };
            write.row().store_word(record::word_of(cts, flags));
        }
        drop(guard);
        state.last_cts = cts;
        if lp_slot != 0 {
            state.move_pin(heap, pool, lp_slot);
        }
        self.reserved.clear();
        // 6. Maintenance.
        state.drain_inbox_of(heap, self.id);
        let horizon = heap::horizon(&shared.epochs);
        state.reclaim(heap, pool, horizon, shared.options.gc_batch);
        state.reclaim_tombstones(heap, pool);
        let sweep = state.tombstones_awaiting_sweep(heap, horizon) >= shared.options.sweep_threshold.max(1);
        drop(state);
        if sweep {
            // A sweep waits for every region; this worker must not hold the
            // horizon back meanwhile (it reads nothing more).
            self.leave();
            heap.sweep(pool, &shared.epochs);
        }
        Ok(CommitTicket::Durable)
    }

    /// Encodes and persists the write set; returns the LP tuple's slot (0 if
    /// nothing needed persisting). Unneeded reservations are returned and
    /// their `reserved` entries zeroed.
    fn persist(&mut self, shared: &ZenShared<B>, state: &mut heap::RegionState, cts: u64) -> u64 {
        let writes = &self.cc.writes;
        if self.encoded.len() < writes.len() {
            self.encoded.resize_with(writes.len(), Vec::new);
        }
        let mut order: Vec<usize> = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
            let row = write.row();
            if write.value.is_none() && row.slot() == 0 {
                // A delete of a row that never reached the heap.
                let unused = self.reserved[index];
                self.reserved[index].slot = 0;
                state.unreserve(&shared.heap, &shared.pool, unused);
                continue;
            }
            let table = &shared.tables[write.table.0 as usize];
            if row.tuple_id() == 0 {
                row.set_tuple_id(table.next_tuple_id.fetch_add(1, Ordering::Relaxed));
            }
            let value = write.value.as_deref().unwrap_or(&[]);
            heap::encode_tuple(&mut self.encoded[index], cts, row.tuple_id(), write.value.is_none(), &write.key, value);
            order.push(index);
        }
        if order.is_empty() {
            return 0;
        }
        // §3.3.4: the LP tuple belongs to the table first in the LP order.
        let lp_position = (0..order.len())
            .min_by_key(|&position| shared.lp_rank[writes[order[position]].table.0 as usize])
            .expect("non-empty");
        let lp = order.remove(lp_position);
        order.push(lp);
        let tuples: Vec<(u64, &[u8])> =
            order.iter().map(|&index| (self.reserved[index].slot, self.encoded[index].as_slice())).collect();
        persist_tuples(shared.pool.backend(), &mut self.batch, &tuples);
        self.reserved[lp].slot
    }

    fn leave(&mut self) {
        if self.active {
            self.shared.epochs.leave(self.id);
            self.active = false;
        }
    }
}

impl<B: PmBackend> EngineWorker for ZenWorker<B> {
    fn begin(&mut self, _read_only: bool) {
        self.cc.clear();
        self.shared.epochs.enter(self.id);
        // IMPORTANT: pairs with the collector's fence (heap.rs,
        // "reclamation"): either this worker's announcement is seen, or its
        // later slot loads see every unlink made before.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.active = true;
    }

    fn get(&mut self, table_id: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool> {
        let shared = Arc::clone(&self.shared);
        let table = shared.tables.get(table_id.0 as usize).ok_or_else(|| unknown_table(table_id))?;
        check_key(&shared, table_id, key)?;
        let (row, inserted, change) = table.get_or_insert(key)?;
        if inserted {
            self.cc.note_own_insert(table_id, change);
        }
        let result = self.read_row(key, row, out);
        self.count_abort(result)
    }

    fn write(&mut self, table_id: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        let shared = Arc::clone(&self.shared);
        let table = shared.tables.get(table_id.0 as usize).ok_or_else(|| unknown_table(table_id))?;
        check_key(&shared, table_id, key)?;
        if let WriteOp::Put(value) | WriteOp::Insert(value) | WriteOp::Update(value) = op {
            shared.schema_tables[table_id.0 as usize].check_value(value)?;
        }
        let (row, inserted, change) = table.get_or_insert(key)?;
        if inserted {
            self.cc.note_own_insert(table_id, change);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let present = self.read_row(key, row, &mut scratch);
        self.scratch = scratch;
        let present = self.count_abort(present)?;
        let (value, applies) = match op {
            WriteOp::Put(value) => (Some(value.to_vec()), true),
            WriteOp::Insert(value) => (Some(value.to_vec()), !present),
            WriteOp::Update(value) => (Some(value.to_vec()), present),
            WriteOp::Delete => (None, present),
        };
        if !applies {
            return Ok(false);
        }
        // `scratch` holds the row as this transaction sees it.
        let index_secondaries = match &value {
            Some(new) if !table.schema.secondaries.is_empty() => {
                table::secondaries_to_index(&table.schema, key, new, present.then_some(self.scratch.as_slice()))?
            }
            _ => false,
        };
        match self.cc.find_write(row) {
            Some(position) => {
                let write = &mut self.cc.writes[position];
                write.value = value;
                write.index_secondaries |= index_secondaries;
            }
            None => self.cc.push_write(WriteEntry {
                table: table_id,
                key: key.to_vec(),
                value,
                row,
                index_secondaries,
                locked_word: 0,
            }),
        }
        Ok(true)
    }

    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()> {
        let shared = Arc::clone(&self.shared);
        let table = shared.tables.get(request.table.0 as usize).ok_or_else(|| unknown_table(request.table))?;
        let mut rows: Vec<table::ScannedRow<Row>> = Vec::new();
        let mut leaves = Vec::new();
        // As in occ.rs: the limit counts present rows; absent rows before the
        // cut still enter the read set (an insert into one is a phantom).
        let mut present_rows = 0usize;
        let cc = &self.cc;
        table.scan(
            request.secondary,
            request.range,
            request.direction,
            |key, index_key, row| {
                let present = match cc.find_write(row) {
                    Some(position) => cc.writes[position].value.is_some(),
                    None => row.word() & ABSENT == 0,
                };
                let index_key = if request.secondary.is_some() { index_key.to_vec() } else { Vec::new() };
                rows.push((key.to_vec(), index_key, row as *const Row));
                present_rows += present as usize;
                // Secondary entries may be stale (checked once read).
                request.secondary.is_some() || present_rows < request.limit
            },
            |leaf| leaves.push(LeafEntry { table: request.table, leaf }),
        )?;
        self.cc.leaves.extend(leaves);
        if let Some(position) = request.secondary {
            let own = self.cc.writes.iter().filter(|write| write.table == request.table && write.index_secondaries);
            let own = own.filter_map(|write| Some((write.key.as_slice(), write.value.as_deref()?, write.row)));
            table::merge_own_secondary_rows(&table.schema, position, request.range, request.direction, &mut rows, own);
        }
        let mut value = Vec::new();
        let mut delivered = 0;
        for (key, index_key, row) in rows {
            if delivered >= request.limit {
                break;
            }
            // SAFETY: rows live as long as their table.
            let row = unsafe { &*row };
            let present = self.read_row(&key, row, &mut value);
            if self.count_abort(present)?
                && request.secondary.is_none_or(|position| {
                    table::secondary_entry_is_current(&table.schema, position, &index_key, &key, &value)
                })
            {
                delivered += 1;
                if !visit(&key, &value) {
                    break;
                }
            }
        }
        Ok(())
    }

    fn commit(&mut self) -> TxResult<CommitTicket> {
        let result = self.commit_inner();
        self.cc.clear();
        let result = self.count_abort(result);
        if result.is_ok() {
            self.shared.counters[self.id].commits.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn abort(&mut self) {
        self.cc.clear();
    }

    fn idle(&mut self) {
        self.leave();
    }

    fn wait_durable(&mut self, _ticket: CommitTicket) {
        // Every zen commit is durable when acknowledged.
        self.leave();
    }
}

fn unknown_table(table: TableId) -> TxError {
    TxError::Db(DbError::UnknownTable(format!("#{}", table.0)))
}

fn check_key<B: PmBackend>(shared: &ZenShared<B>, table: TableId, key: &[u8]) -> TxResult<()> {
    Ok(shared.schema_tables[table.0 as usize].check_key(key)?)
}

impl<B: PmBackend> Drop for ZenWorker<B> {
    fn drop(&mut self) {
        self.shared.epochs.leave(self.id);
    }
}
