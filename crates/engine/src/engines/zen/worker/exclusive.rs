//! `zen+`'s exclusive stage in a worker: the direct NVM writes of a
//! privileged transaction whose buffered versions outgrow its Met-Cache
//! region, their erasure when it does not commit, and the maintenance when
//! the stage ends (module comment of `worker`; `adaptive.rs`).
//!
//! Explained in docs/engines/zen-plus.md.

use super::*;
use crate::cc::protocols::multi_version::unindex_stale;

impl<B: PmBackend> ZenWorker<B> {
    /// `zen+`'s direct NVM writes (module docs): writes every buffered new
    /// value of a table without secondary indexes to a slot of this
    /// worker's region, stamped with the commit's Tx-CTS (fixed now if it
    /// is not yet) and without the LP bit, makes them durable with one
    /// fence, and drops them from the write set's arena.
    pub(super) fn spill(&mut self) -> TxResult<()> {
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
                row.set_tuple_id(self.tuple_ids.take(&shared.metas, entry.table.0 as usize));
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
    pub(super) fn discard_spilled(&mut self) {
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
    pub(super) fn reset_spill(&mut self) {
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
    pub(super) fn after_operation(&mut self) -> TxResult<()> {
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
    pub(super) fn finish_operation<T>(&mut self, result: TxResult<T>) -> TxResult<T> {
        let result = result.and_then(|value| self.after_operation().map(|()| value));
        self.count_abort(result)
    }

    /// Ends this worker's exclusive stage, if it holds one: maintenance for
    /// every region (`adaptive.rs`, step 4), then G-EX is released.
    pub(super) fn finish_exclusive(&mut self) {
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
        let versions =
            shared.cc.versions().map_or(0, |versions| versions.collect_all(&mut unindex_stale(&shared.tables)));
        let adaptive = &plus.adaptive;
        adaptive.maintenance_runs.fetch_add(1, Ordering::Relaxed);
        adaptive
            .maintenance_slots
            .fetch_add(heap.counters.slots_reclaimed.load(Ordering::Relaxed) - before, Ordering::Relaxed);
        adaptive.maintenance_versions.fetch_add(versions as u64, Ordering::Relaxed);
        adaptive.release(self.id, &self.adaptive);
    }
}
