//! A Zen worker's reads: the Met-Cache value when it holds the row's
//! version, else the NVM-tuple, cached in the reader's region on the way.

use super::commit::retire_cached;
use super::*;

/// Zen's stable read: the Met-Cache value if it holds the row's version,
/// else the NVM-tuple (then cached in the reader's region unless `fill` is
/// off: `zen+`'s read-only snapshots).
pub(super) struct ZenStore<'a, B: PmBackend> {
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
    fn count_heap_read(&self, plus: &crate::engines::zen::ZenPlus, slot: u64) {
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
pub(super) fn store<'a, B: PmBackend>(
    shared: &'a ZenShared<B>,
    id: usize,
    adaptive: &'a AdaptiveTx,
    spilled: &'a HashMap<usize, (Reserved, u32)>,
) -> ZenStore<'a, B> {
    let plus = shared.plus.is_some();
    ZenStore { shared, id, adaptive: plus.then_some(adaptive), fill: !(plus && adaptive.read_only()), spilled }
}
