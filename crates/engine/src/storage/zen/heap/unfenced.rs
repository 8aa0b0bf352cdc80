//! A region's *unfenced commit* (module documentation of
//! `storage::zen::heap`, "Unfenced commits"): the one commit of the region
//! whose LP line is flushed but not yet fenced (Zen's pipelined commits:
//! Algorithm 1 without its last fence, `durability::zen_persist`), what it
//! holds back until that line is durable, and how it is completed — by its
//! own worker after a fence of the thread that flushed the line, or by any
//! thread that flushes the line again and fences.
//!
//! Explained in docs/engines/zen.md ("When a pipelined commit N of worker A
//! is durable").

use super::{horizon_stamp, Garbage, Heap, RegionState, Tombstone};
use crate::epoch::Epochs;
use pmtx_pm::{PmBackend, Pool};
use std::sync::atomic::{AtomicU64, Ordering};

/// A region's unfenced commit as every thread reads it (on a cache line of
/// its own: other workers read it at every commit, its worker writes it at
/// every pipelined one).
#[derive(Default)]
pub(crate) struct UnfencedMark {
    /// Tx-CTS of the region's unfenced commit; 0: none.
    cts: AtomicU64,
    /// Its LP tuple's slot (stored before `cts`).
    lp_slot: AtomicU64,
}

/// A region's unfenced commit as its state holds it (under the region
/// lock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unfenced {
    pub(crate) cts: u64,
    pub(crate) lp_slot: u64,
    /// The thread that flushed the LP line (`pmtx_pm::sim::current_thread_id`):
    /// only a later fence of that thread covers the flush.
    flushed_by: u64,
}

/// The calling thread, as [`Unfenced::flushed_by`] names it.
fn this_thread() -> u64 {
    pmtx_pm::sim::current_thread_id()
}

impl Heap {
    /// Tx-CTS of `region`'s unfenced commit (0: none). A version of the
    /// region whose Tx-CTS this is may still be lost in a crash; one read
    /// (Acquire) after the version's row word was read sees the version's
    /// commit here until it is durable, since the commit published itself
    /// before unlocking its rows.
    #[inline]
    pub(crate) fn unfenced_cts(&self, region: usize) -> u64 {
        self.regions[region].unfenced.cts.load(Ordering::Acquire)
    }

    /// The LP slot of `region`'s commit `cts` while that commit is still
    /// unfenced (`None` once it is not). A thread that flushes the slot's
    /// line after this and then fences makes the commit durable: the LP
    /// store preceded the publication this read saw.
    pub(crate) fn unfenced_lp_slot(&self, region: usize, cts: u64) -> Option<u64> {
        let mark = &self.regions[region].unfenced;
        if mark.cts.load(Ordering::Acquire) != cts {
            return None;
        }
        let lp_slot = mark.lp_slot.load(Ordering::Acquire);
        // The slot is stored before the Tx-CTS at each publication, and the
        // Tx-CTS is cleared before the next slot: still `cts` now means the
        // slot read is this commit's.
        (mark.cts.load(Ordering::Acquire) == cts).then_some(lp_slot)
    }

    /// Makes `region`'s commit `cts` durable if it is still unfenced and
    /// the region is not locked by another thread: flushes its LP line
    /// again (a fence orders only the flushes of its own thread, so the
    /// committer's flush is not enough) and fences, then completes it.
    /// Returns whether the commit is durable now (`false`: its region is
    /// busy; its worker is committing, and that commit's first fence
    /// completes it). The caller may hold its own region's lock (this one
    /// only tries another's).
    pub(crate) fn try_complete<B: PmBackend>(&self, pool: &Pool<B>, epochs: &Epochs, region: usize, cts: u64) -> bool {
        if self.unfenced_cts(region) != cts {
            return true;
        }
        let Some(mut state) = self.regions[region].state.try_lock() else { return false };
        if state.unfenced.is_some_and(|unfenced| unfenced.cts == cts) {
            state.fence_unfenced(self, pool, epochs, region);
        }
        true
    }

    /// The unfenced commit of every region whose lock is free, completed
    /// if it is still the one `seen` recorded at the previous call (so it
    /// waited one call interval or more); `seen` is updated (the engine's
    /// epoch thread: the time bound of pipelined commits).
    pub(crate) fn complete_stale_unfenced<B: PmBackend>(
        &self,
        pool: &Pool<B>,
        epochs: &Epochs,
        seen: &mut Vec<u64>,
    ) -> usize {
        seen.resize(self.regions.len(), 0);
        let mut completed = 0;
        for (region, last) in seen.iter_mut().enumerate() {
            let cts = self.unfenced_cts(region);
            if cts != 0 && cts == *last && self.try_complete(pool, epochs, region, cts) {
                completed += 1;
            }
            *last = self.unfenced_cts(region);
        }
        completed
    }
}

impl RegionState {
    /// The region's unfenced commit, if any.
    #[inline]
    pub(crate) fn unfenced(&self) -> Option<Unfenced> {
        self.unfenced
    }

    /// The LP slot of the region's unfenced commit if a thread other than
    /// the caller flushed it: a fence of the caller covers it only once the
    /// caller flushes it again.
    #[inline]
    pub(crate) fn unfenced_lp_flushed_elsewhere(&self) -> Option<u64> {
        self.unfenced.filter(|unfenced| unfenced.flushed_by != this_thread()).map(|unfenced| unfenced.lp_slot)
    }

    /// Records the commit `cts` of `region` whose LP tuple (`lp_slot`) the
    /// calling thread just flushed without a fence, and publishes it. Call
    /// it before the commit's rows are unlocked (readers rely on seeing it,
    /// [`Heap::unfenced_cts`]), with the previous unfenced commit completed.
    pub(crate) fn set_unfenced(&mut self, heap: &Heap, region: usize, cts: u64, lp_slot: u64) {
        debug_assert!(self.unfenced.is_none(), "one unfenced commit per region");
        debug_assert!(self.held_garbage.is_empty() && self.held_tombstones.is_empty());
        debug_assert!(cts != 0 && lp_slot != 0);
        self.unfenced = Some(Unfenced { cts, lp_slot, flushed_by: this_thread() });
        let mark = &heap.regions[region].unfenced;
        mark.lp_slot.store(lp_slot, Ordering::Release);
        mark.cts.store(cts, Ordering::Release);
    }

    /// A version the unfenced commit superseded: reclaimed (through the
    /// garbage queues, with its stamp) only once that commit is durable, so
    /// a crash that loses the commit finds it intact.
    #[inline]
    pub(crate) fn hold_garbage(&mut self, garbage: Garbage) {
        self.held_garbage.push(garbage);
    }

    /// A tombstone the unfenced commit wrote: queued once it is durable.
    #[inline]
    pub(crate) fn hold_tombstone(&mut self, tombstone: Tombstone) {
        self.held_tombstones.push(tombstone);
    }

    /// The region's unfenced commit is durable (a fence of the thread that
    /// flushed its LP line, issued after the flush): the pin moves to its LP
    /// tuple, what it held back goes to the garbage and tombstone queues,
    /// and it is unpublished. No-op without one.
    pub(crate) fn complete_unfenced<B: PmBackend>(
        &mut self,
        heap: &Heap,
        pool: &Pool<B>,
        epochs: &Epochs,
        region: usize,
    ) {
        let Some(unfenced) = self.unfenced.take() else { return };
        self.move_pin(heap, pool, unfenced.lp_slot);
        let mut garbage = std::mem::take(&mut self.held_garbage);
        for entry in garbage.drain(..) {
            heap.retire(region, self, entry);
        }
        self.held_garbage = garbage;
        if !self.held_tombstones.is_empty() {
            // IMPORTANT: a tombstone is released by a sweep whose horizon
            // is above its stamp, relying on every stale version of its key
            // stamped below that horizon being queued (hence erased) before
            // the sweep looked; the versions this commit superseded were
            // queued only now, so its tombstones take a stamp read now
            // (under the region lock, which the sweep's barrier takes).
            let stamp = horizon_stamp(epochs);
            let mut tombstones = std::mem::take(&mut self.held_tombstones);
            for mut tombstone in tombstones.drain(..) {
                tombstone.stamp = tombstone.stamp.max(stamp);
                self.push_tombstone(tombstone);
            }
            self.held_tombstones = tombstones;
        }
        // IMPORTANT: last. A writer that sees the commit durable (this
        // store) may supersede its versions; what they superseded is queued
        // by then, and the pin covers its LP tuple.
        heap.regions[region].unfenced.cts.store(0, Ordering::Release);
        self.unfenced_completed += 1;
    }

    /// Flushes the unfenced commit's LP line again, fences, and completes
    /// it (any thread). Returns whether there was one.
    pub(crate) fn fence_unfenced<B: PmBackend>(
        &mut self,
        heap: &Heap,
        pool: &Pool<B>,
        epochs: &Epochs,
        region: usize,
    ) -> bool {
        let Some(unfenced) = self.unfenced else { return false };
        let backend = pool.backend();
        // The flush covers the LP store: it was made before the commit was
        // published, which the caller read (or made) before this call.
        backend.flush(unfenced.lp_slot, 8);
        backend.fence();
        self.unfenced_fenced_again += 1;
        self.complete_unfenced(heap, pool, epochs, region);
        true
    }
}
