//! Reclamation of the heap's slots (module documentation of
//! `storage::zen::heap`: "Reclamation", "The LP pin", "Under WBL's window
//! rule", "Tombstones"): garbage queues and their stamps, the horizon the
//! commit rule allows, tombstone sweeps and the LP pin.

use super::{Heap, RegionState, SlotKind, SweepState, KEY_LEN_AT, META_LEN};
use crate::epoch::Epochs;
use crate::storage::record::RowKind;
use crate::storage::zen::cache::Row;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Pool};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// How a heap's transactions commit, which also decides when a superseded
/// version may be reused (module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitRule {
    /// Zen: committed once the LP bit of the transaction's last tuple is
    /// durable (Algorithm 1).
    LastPersisted,
    /// WBL: committed once a group-commit record whose c_p covers the
    /// transaction's timestamp is durable (`durability::wbl_window`).
    Window,
}

/// A superseded version waiting for the reclamation horizon.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Garbage {
    pub(crate) slot: u64,
    pub(crate) stamp: u64,
    pub(crate) kind: SlotKind,
}

/// A committed tombstone that is its key's latest version.
pub(crate) struct Tombstone {
    pub(crate) table: u32,
    pub(crate) key: Box<[u8]>,
    row: *const Row,
    pub(crate) slot: u64,
    /// Tx-CTS of the delete (guards against the slot being reused by a later
    /// tombstone of the same row).
    cts: u64,
    pub(crate) stamp: u64,
}

impl Tombstone {
    /// A tombstone of `row` (counted in the row, which keeps it from being
    /// unlinked while the tombstone waits; see `Row::referenced`).
    pub(crate) fn new(table: u32, key: &[u8], row: &Row, slot: u64, cts: u64, stamp: u64) -> Self {
        row.add_tombstone_ref();
        Self { table, key: key.into(), row, slot, cts, stamp }
    }

    /// The tombstone leaves its queue for good.
    fn release(self) {
        // SAFETY: see the Send impl; the count this tombstone holds keeps
        // the row from being unlinked, so it is alive.
        unsafe { &*self.row }.drop_tombstone_ref();
    }
}

/// The garbage stamp of a commit: the global epoch, read after its rows
/// point at their new slots.
pub(crate) fn horizon_stamp(epochs: &Epochs) -> u64 {
    // IMPORTANT: pairs with the reader's fence after announcing its epoch.
    std::sync::atomic::fence(Ordering::SeqCst);
    epochs.global()
}

impl Heap {
    /// Hands a superseded version to the region owning its chunk. Called by
    /// a committer holding its own region's state as `own`.
    pub(crate) fn retire(&self, own_region: usize, own: &mut RegionState, garbage: Garbage) {
        let (_, region) = self.owner_of(garbage.slot);
        if region == own_region {
            own.garbage.push_back(garbage);
        } else {
            self.regions[region].inbox.lock().push(garbage);
        }
    }

    /// The sweep (module documentation, "Tombstones"). Returns false if
    /// another sweep was running or the epoch could not advance (`advance`,
    /// the engine's way to advance its epoch, returned `None`: closed). The
    /// caller holds no region lock and is not announced in any epoch.
    pub(crate) fn sweep<B: PmBackend>(
        &self,
        pool: &Pool<B>,
        epochs: &Epochs,
        advance: &dyn Fn() -> Option<u64>,
    ) -> bool {
        let Some(_sweeping) = self.sweep_lock.try_lock() else { return false };
        // Every commit that reads its stamp from now on reads >= `advanced`.
        let Some(advanced) = advance() else { return false };
        // IMPORTANT: barrier. A commit stamped below `advanced` held its
        // region lock from before the advance until it had handed over all
        // its garbage; taking every region lock once waits for all of them.
        for region in &self.regions {
            drop(region.state.lock());
        }
        let horizon = self.horizon(epochs).min(advanced);
        let backend = pool.backend();
        // The tables whose tombstones this sweep can release. Every
        // tombstone stamped below the horizon is queued by now (the
        // barrier), and later ones are stamped at or above `advanced`. Only
        // these tables' stale slots need erasing: a key's stale versions
        // live in its own table's heap, and a stale slot of a table without
        // a releasable tombstone is an ordinary free slot. (Erasing every
        // table's stale slots cost TPC-C a cache miss per updated stock or
        // customer version, for deletes of NEW-ORDER rows only.)
        let mut swept = vec![false; self.geometries.len()];
        for region in &self.regions {
            let state = region.state.lock();
            for tombstone in state.tombstones.iter().filter(|tombstone| tombstone.stamp < horizon) {
                swept[tombstone.table as usize] = true;
            }
        }
        let mut protected = Vec::new();
        let mut erased = 0;
        for region in &self.regions {
            let mut state = region.state.lock();
            state.drain_inbox(&region.inbox);
            // IMPORTANT: every entry stamped below the horizon, wherever it
            // sits in the queue. The tombstones this sweep releases rely on
            // all their key's stale versions being erased (or protected); an
            // entry left queued behind newer ones would survive un-erased
            // and could resurrect a deleted key after a crash.
            state.reclaim_all_below(self, pool, horizon);
            debug_assert!(state.garbage.iter().all(|garbage| garbage.stamp >= horizon));
            for &(slot, kind) in &state.deferred {
                if kind == SlotKind::Stale && swept[self.owner_of(slot).0 as usize] {
                    protected.push(self.read_key(pool, slot));
                }
            }
            for (table, heap) in state.heaps.iter_mut().enumerate() {
                if !swept[table] {
                    continue;
                }
                for slot in heap.stale.drain(..) {
                    backend.store_u64(slot, self.free_word(slot));
                    backend.flush(slot, 8);
                    heap.clean.push(slot);
                    erased += 1;
                }
            }
        }
        // IMPORTANT: the erasures are durable before any tombstone that
        // relies on them is reused.
        backend.fence();
        self.counters.sweeps.fetch_add(1, Ordering::Relaxed);
        self.counters.slots_erased.fetch_add(erased, Ordering::Relaxed);
        let mut sweep = self.sweep.lock();
        if horizon > sweep.horizon {
            *sweep = SweepState { horizon, protected };
            self.sweep_horizon.store(horizon, Ordering::Release);
        }
        true
    }

    /// (table, key) of the tuple in `slot`.
    fn read_key<B: PmBackend>(&self, pool: &Pool<B>, slot: u64) -> (u32, Vec<u8>) {
        let (table, _) = self.owner_of(slot);
        let mut meta = [0u8; META_LEN as usize];
        pool.backend().read(slot, &mut meta);
        let key_len = u16::from_le_bytes([meta[KEY_LEN_AT], meta[KEY_LEN_AT + 1]]) as usize;
        let mut key = vec![0u8; key_len.min(self.geometries[table as usize].max_key)];
        pool.backend().read(slot + META_LEN, &mut key);
        (table, key)
    }

    /// Current reclamation horizon: garbage stamped below it is unreachable
    /// and, under the window rule, superseded by a durable commit.
    pub(crate) fn horizon(&self, epochs: &Epochs) -> u64 {
        // IMPORTANT: pairs with the reader's fence after announcing its epoch.
        std::sync::atomic::fence(Ordering::SeqCst);
        let active = epochs.min_active();
        match self.rule {
            CommitRule::LastPersisted => active,
            CommitRule::Window => active.min(epochs.durable() + 1),
        }
    }
}

impl RegionState {
    /// Recovery: a tombstone that is its key's latest version.
    pub(crate) fn add_tombstone(&mut self, tombstone: Tombstone) {
        self.tombstones.push_back(tombstone);
    }

    /// Moves garbage handed to region `region` into its queue.
    pub(crate) fn drain_inbox_of(&mut self, heap: &Heap, region: usize) {
        self.drain_inbox(&heap.regions[region].inbox);
    }

    /// Moves other threads' handed-over garbage into the queue.
    pub(crate) fn drain_inbox(&mut self, inbox: &Mutex<Vec<Garbage>>) {
        let mut inbox = inbox.lock();
        self.garbage.extend(inbox.drain(..));
    }

    /// Frees every garbage entry stamped below `horizon` (the sweep; the
    /// bounded [`RegionState::reclaim`] may stop early).
    fn reclaim_all_below<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, horizon: u64) {
        let mut kept = VecDeque::with_capacity(self.garbage.len());
        let mut freed = 0;
        for garbage in std::mem::take(&mut self.garbage) {
            if garbage.stamp < horizon {
                self.free_slot(heap, pool, garbage.slot, garbage.kind);
                freed += 1;
            } else {
                kept.push_back(garbage);
            }
        }
        self.garbage = kept;
        if freed > 0 {
            heap.counters.slots_reclaimed.fetch_add(freed, Ordering::Relaxed);
        }
    }

    /// Frees up to `limit` examined garbage entries stamped below
    /// `horizon`; may stop early (see the loop), which only delays space.
    pub(crate) fn reclaim<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, horizon: u64, limit: usize) -> usize {
        let mut freed = 0;
        let mut examined = 0;
        let mut index = 0;
        // Stamps are nearly sorted (own pushes are, inbox batches nearly):
        // stop at the first entry that is not reclaimable yet, but look a
        // little past it so one late inbox entry does not block the queue.
        while index < self.garbage.len() && examined < limit {
            examined += 1;
            if self.garbage[index].stamp < horizon {
                let garbage = self.garbage.remove(index).expect("in range");
                self.free_slot(heap, pool, garbage.slot, garbage.kind);
                freed += 1;
            } else if index >= 8 {
                break;
            } else {
                index += 1;
            }
        }
        // Shared by every region: written only when something was freed.
        if freed > 0 {
            heap.counters.slots_reclaimed.fetch_add(freed as u64, Ordering::Relaxed);
        }
        freed
    }

    /// Tombstones a new sweep would make reclaimable: stamped below
    /// `horizon` but not below the last sweep's (those wait for their row
    /// lock or an LP pin, which another sweep does not change). The queue is
    /// in stamp order: own commits push growing stamps, recovery pushes
    /// stamp 0 before any commit, and reclamation keeps the order of what it
    /// leaves.
    pub(crate) fn tombstones_awaiting_sweep(&self, heap: &Heap, horizon: u64) -> usize {
        let published = heap.sweep_horizon.load(Ordering::Acquire);
        // Sorted by stamp: two binary searches, not a walk of the queue at
        // every commit.
        debug_assert!(self.tombstones.iter().is_sorted_by_key(|t| t.stamp));
        let below_horizon = self.tombstones.partition_point(|t| t.stamp < horizon);
        let below_published = self.tombstones.partition_point(|t| t.stamp < published.min(horizon));
        below_horizon - below_published
    }

    /// Reclaims the tombstones the last sweep made safe.
    pub(crate) fn reclaim_tombstones<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>) -> usize {
        let published = heap.sweep_horizon.load(Ordering::Acquire);
        if self.tombstones.front().is_none_or(|t| t.stamp >= published) {
            return 0;
        }
        let (horizon, protected) = {
            let sweep = heap.sweep.lock();
            if sweep.horizon == 0 || self.tombstones.front().is_none_or(|t| t.stamp >= sweep.horizon) {
                return 0;
            }
            (sweep.horizon, sweep.protected.clone())
        };
        let mut reclaimed = 0;
        let mut kept = VecDeque::new();
        while let Some(tombstone) = self.tombstones.pop_front() {
            if tombstone.stamp >= horizon {
                kept.push_back(tombstone);
                continue;
            }
            if protected.iter().any(|(table, key)| *table == tombstone.table && **key == *tombstone.key) {
                kept.push_back(tombstone);
                continue;
            }
            // SAFETY: see Tombstone.
            let row = unsafe { &*tombstone.row };
            if row.slot() != tombstone.slot {
                // Re-inserted since: the tombstone went through the garbage
                // queue like any superseded version.
                tombstone.release();
                continue;
            }
            let Some(word) = row.try_lock() else {
                kept.push_back(tombstone);
                continue;
            };
            if row.slot() == tombstone.slot && crate::storage::record::tid_of(word) == tombstone.cts {
                debug_assert!(word & crate::storage::record::ABSENT != 0);
                row.set_slot(0, 0);
                row.store_word(word);
                self.free_slot(heap, pool, tombstone.slot, SlotKind::Clean);
                reclaimed += 1;
            } else {
                row.store_word(word);
            }
            tombstone.release();
        }
        self.tombstones = kept;
        if reclaimed > 0 {
            heap.counters.tombstones_reclaimed.fetch_add(reclaimed as u64, Ordering::Relaxed);
        }
        reclaimed
    }

    /// After a commit whose LP tuple is `lp_slot` is durable: move the pin
    /// and release what the previous pin held back.
    pub(crate) fn move_pin<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, lp_slot: u64) {
        let previous = std::mem::replace(&mut self.pinned, lp_slot);
        if previous == 0 || self.deferred.is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut self.deferred);
        for (slot, kind) in deferred {
            self.free_slot(heap, pool, slot, kind);
        }
    }

    /// Queues a tombstone written by this region's commit.
    pub(crate) fn push_tombstone(&mut self, tombstone: Tombstone) {
        self.tombstones.push_back(tombstone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::zen::heap::{SlotGeometry, FREE_WORD0};
    use pmtx_pm::{Direct, PmOptions};

    /// A row of `table` deleted at Tx-CTS 1 and stamp 0: its tombstone is
    /// queued in `state` and the row points at it. Free it with `Row::free`
    /// once the tombstone is released.
    fn push_deleted_row<B: PmBackend>(
        heap: &Heap,
        pool: &Pool<B>,
        epochs: &Epochs,
        state: &mut RegionState,
        table: u32,
    ) -> std::ptr::NonNull<Row> {
        let row = Row::allocate(b"k", 0);
        let slot = state.reserve(heap, pool, epochs, 0, table, &|| Some(epochs.advance())).unwrap().slot;
        // SAFETY: `allocate` returned a valid row; the caller frees it.
        let deleted = unsafe { row.as_ref() };
        deleted.set_slot(slot, 0);
        deleted.store_word(crate::storage::record::word_of(1, crate::storage::record::ABSENT));
        state.push_tombstone(Tombstone::new(table, b"k", deleted, slot, 1, 0));
        row
    }

    /// Regression (found by `pmtx crashtest --engine zen --workload tpcc`):
    /// the sweep must erase every stale slot stamped below its horizon, even
    /// one queued behind newer garbage (another region's hand-over arrives
    /// late), or a tombstone it releases can be reused while a stale version
    /// of its key survives, and a crash then resurrects the deleted key.
    #[test]
    fn sweep_erases_stale_slots_queued_behind_newer_garbage() {
        let options = PmOptions::default();
        let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
        let geometry = SlotGeometry::new("t", 8, 32, pool.geometry().chunk_size).unwrap();
        let heap = Heap::new(&pool, vec![geometry], 1, false, CommitRule::LastPersisted);
        let epochs = Epochs::new(1, 1);
        let advance = || Some(epochs.advance());
        let mut state = heap.regions[0].state.lock();
        let slots: Vec<u64> =
            (0..12).map(|_| state.reserve(&heap, &pool, &epochs, 0, 0, &advance).unwrap().slot).collect();
        let (blockers, old) = slots.split_at(10);
        for &slot in blockers {
            state.garbage.push_back(Garbage { slot, stamp: u64::MAX, kind: SlotKind::Stale });
        }
        for &slot in old {
            pool.backend().store_u64(slot, 0x1234);
            state.garbage.push_back(Garbage { slot, stamp: 0, kind: SlotKind::Stale });
        }
        // The tombstone whose release relies on the erasure.
        let row = push_deleted_row(&heap, &pool, &epochs, &mut state, 0);
        drop(state);
        assert!(heap.sweep(&pool, &epochs, &advance));
        for &slot in old {
            assert_eq!(pool.backend().load_u64(slot), FREE_WORD0, "stale slot {slot:#x} was not erased");
        }
        let mut state = heap.regions[0].state.lock();
        assert_eq!(state.garbage.len(), blockers.len());
        assert!(old.iter().all(|slot| state.heaps[0].clean.contains(slot)));
        assert_eq!(state.reclaim_tombstones(&heap, &pool), 1);
        drop(state);
        // SAFETY: the tombstone that referred to the row is released.
        unsafe { Row::free(row) };
    }

    /// A sweep erases the stale slots of the tables it can release a
    /// tombstone of, and leaves every other table's stale slots free and
    /// intact (no PM write for them).
    #[test]
    fn sweep_erases_only_tables_with_a_tombstone_to_release() {
        let options = PmOptions::default();
        let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
        let chunk_size = pool.geometry().chunk_size;
        let geometries = vec![
            SlotGeometry::new("updated", 8, 32, chunk_size).unwrap(),
            SlotGeometry::new("deleted", 8, 32, chunk_size).unwrap(),
        ];
        let heap = Heap::new(&pool, geometries, 1, false, CommitRule::LastPersisted);
        let epochs = Epochs::new(1, 1);
        let advance = || Some(epochs.advance());
        let mut state = heap.regions[0].state.lock();
        let stale_of = |table: u32, state: &mut RegionState| -> Vec<u64> {
            let slots: Vec<u64> =
                (0..3).map(|_| state.reserve(&heap, &pool, &epochs, 0, table, &advance).unwrap().slot).collect();
            for &slot in &slots {
                pool.backend().store_u64(slot, 0x1234);
                state.garbage.push_back(Garbage { slot, stamp: 0, kind: SlotKind::Stale });
            }
            slots
        };
        let updated = stale_of(0, &mut state);
        let deleted = stale_of(1, &mut state);
        let row = push_deleted_row(&heap, &pool, &epochs, &mut state, 1);
        drop(state);
        assert!(heap.sweep(&pool, &epochs, &advance));
        for &slot in &deleted {
            assert_eq!(
                pool.backend().load_u64(slot),
                FREE_WORD0,
                "stale slot {slot:#x} of the deleting table was kept"
            );
        }
        for &slot in &updated {
            assert_eq!(
                pool.backend().load_u64(slot),
                0x1234,
                "stale slot {slot:#x} of a table without deletes was erased"
            );
        }
        let mut state = heap.regions[0].state.lock();
        assert!(updated.iter().all(|slot| state.heaps[0].stale.contains(slot)), "still free, as stale slots");
        assert!(deleted.iter().all(|slot| state.heaps[1].clean.contains(slot)));
        assert_eq!(state.reclaim_tombstones(&heap, &pool), 1, "the sweep made the tombstone reclaimable");
        drop(state);
        // SAFETY: the tombstone that referred to the row is released.
        unsafe { Row::free(row) };
    }

    /// Under the window rule a superseded version stays out of the free
    /// lists until its successor's epoch is durable, even with no reader
    /// announced; under Zen's rule it is free once no reader can hold it.
    #[test]
    fn the_window_rule_frees_a_superseded_version_once_its_successor_is_durable() {
        let options = PmOptions::default();
        for rule in [CommitRule::Window, CommitRule::LastPersisted] {
            let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
            let geometry = SlotGeometry::new("t", 8, 32, pool.geometry().chunk_size).unwrap();
            let heap = Heap::new(&pool, vec![geometry], 1, false, rule);
            let epochs = Epochs::new(1, 5);
            let advance = || Some(epochs.advance());
            assert_eq!(epochs.durable(), 4);
            let mut state = heap.regions[0].state.lock();
            let superseded = state.reserve(&heap, &pool, &epochs, 0, 0, &advance).unwrap().slot;
            // Superseded by a commit of epoch 5, stamped 5; nobody reads.
            heap.retire(0, &mut state, Garbage { slot: superseded, stamp: 5, kind: SlotKind::Stale });
            epochs.advance();
            assert_eq!(epochs.horizon(), crate::epoch::QUIESCENT);
            let freed = state.reclaim(&heap, &pool, heap.horizon(&epochs), usize::MAX);
            match rule {
                CommitRule::Window => {
                    assert_eq!(freed, 0, "reused while its successor's window (epoch 5) may still be lost");
                    epochs.set_durable(5);
                    assert_eq!(state.reclaim(&heap, &pool, heap.horizon(&epochs), usize::MAX), 1);
                }
                CommitRule::LastPersisted => assert_eq!(freed, 1),
            }
            assert!(state.heaps[0].stale.contains(&superseded));
        }
    }
}
