//! Global epochs (Silo): the unit of group commit, the high half of TIDs,
//! and the clock of memory reclamation.
//!
//! A background thread advances the global epoch every `epoch_interval`.
//! Each worker announces the epoch it is working in, or that it is idle, so
//! the group-commit logger knows when every record of an epoch is written.
//!
//! The same announcements make epoch-based reclamation (EBR) of DRAM
//! objects that optimistic readers may still hold: a row unlinked from an
//! index, a replaced value buffer, a hash-index slot array. The unlinker
//! takes a *stamp* ([`Epochs::stamp`]) after the unlink; the object is freed
//! once the *horizon* ([`Epochs::horizon`]) is above the stamp, i.e. once
//! every thread that could have loaded the pointer has announced a later
//! epoch or gone idle. Threads that read shared structures outside a worker
//! transaction (the checkpointer) hold a [`BackgroundPin`], which counts for
//! the horizon but not for group commit.
//!
//! *Argument.* A reader announces `e` (a SeqCst store) and then issues a
//! SeqCst fence before it loads any shared pointer; an unlinker unlinks,
//! issues a SeqCst fence and then reads the global epoch `g` as the stamp.
//! If the reader's fence comes first in the single total order of SeqCst
//! operations, the reclaimer (whose own fence follows the unlinker's) sees
//! the announcement `e <= g` and waits; if the unlinker's fence comes first,
//! the reader's later loads see the unlink and cannot reach the object. An
//! announcement `e > g` was read from the global epoch after it advanced
//! past `g`, which is after the unlinker's fence, so that reader cannot
//! reach the object either.
//!
//! Explained in docs/concurrency.md ("Epochs").

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

/// Announced by an idle worker.
pub const QUIESCENT: u64 = u64::MAX;

/// Slots for threads that read shared structures outside transactions
/// (checkpointer, quiescent dumps); more pins wait for a free slot.
const BACKGROUND_SLOTS: usize = 4;

/// Global epoch plus per-worker announcements.
pub struct Epochs {
    global: CachePadded<AtomicU64>,
    workers: Vec<CachePadded<AtomicU64>>,
    background: Vec<CachePadded<(AtomicBool, AtomicU64)>>,
    background_wait: Mutex<()>,
    durable: CachePadded<AtomicU64>,
}

impl Epochs {
    /// Epochs for up to `max_workers`, starting at `start` (> every epoch in
    /// recovered data, so TIDs keep growing across restarts).
    pub fn new(max_workers: usize, start: u64) -> Self {
        Self {
            global: CachePadded::new(AtomicU64::new(start.max(1))),
            workers: (0..max_workers).map(|_| CachePadded::new(AtomicU64::new(QUIESCENT))).collect(),
            background: (0..BACKGROUND_SLOTS)
                .map(|_| CachePadded::new((AtomicBool::new(false), AtomicU64::new(QUIESCENT))))
                .collect(),
            background_wait: Mutex::new(()),
            durable: CachePadded::new(AtomicU64::new(start.max(1) - 1)),
        }
    }

    /// The current global epoch.
    #[inline]
    pub fn global(&self) -> u64 {
        self.global.load(Ordering::SeqCst)
    }

    /// Advances the global epoch; returns the new value.
    pub fn advance(&self) -> u64 {
        self.global.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Raises the global epoch to at least `epoch` (after recovery found
    /// data of later epochs); the durable epoch follows it.
    pub fn raise(&self, epoch: u64) {
        self.global.fetch_max(epoch.max(1), Ordering::SeqCst);
        self.durable.fetch_max(epoch.max(1) - 1, Ordering::AcqRel);
    }

    /// Worker `id` starts a transaction: announce the current epoch. Every
    /// shared pointer the worker loads afterwards is protected until it
    /// leaves or announces again (module documentation).
    #[inline]
    pub fn enter(&self, id: usize) {
        let epoch = self.global();
        // IMPORTANT: SeqCst store then the commit reads the global epoch
        // again; a logger that missed this store will see the later epoch in
        // the record (see group-commit recovery argument).
        self.workers[id].store(epoch, Ordering::SeqCst);
        // IMPORTANT: the reader's fence of the reclamation argument.
        fence(Ordering::SeqCst);
    }

    /// Worker `id` is idle.
    #[inline]
    pub fn leave(&self, id: usize) {
        self.workers[id].store(QUIESCENT, Ordering::SeqCst);
    }

    /// Smallest epoch any active worker announced (`QUIESCENT` if none).
    /// Background pins do not count: group commit never waits for them.
    pub fn min_active(&self) -> u64 {
        self.workers.iter().map(|w| w.load(Ordering::SeqCst)).min().unwrap_or(QUIESCENT)
    }

    /// The stamp of an object unlinked just before: read after a fence that
    /// orders the unlink before it.
    #[inline]
    pub fn stamp(&self) -> u64 {
        // IMPORTANT: the unlinker's fence of the reclamation argument.
        fence(Ordering::SeqCst);
        self.global()
    }

    /// Objects stamped below the horizon are unreachable: every worker and
    /// background reader announced a later epoch or is idle.
    pub fn horizon(&self) -> u64 {
        fence(Ordering::SeqCst);
        let background = self.background.iter().map(|slot| slot.1.load(Ordering::SeqCst)).min();
        self.min_active().min(background.unwrap_or(QUIESCENT))
    }

    /// Announces a reader outside the worker slots (checkpoint scans,
    /// quiescent dumps) until the pin is dropped. Waits while every
    /// background slot is taken.
    pub fn pin_background(&self) -> BackgroundPin<'_> {
        loop {
            for (index, slot) in self.background.iter().enumerate() {
                if slot.0.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    slot.1.store(self.global(), Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    return BackgroundPin { epochs: self, index };
                }
            }
            let _wait = self.background_wait.lock();
            std::thread::yield_now();
        }
    }

    /// Highest epoch known durable.
    #[inline]
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Publishes a durable epoch (monotonic).
    pub fn set_durable(&self, epoch: u64) {
        self.durable.fetch_max(epoch, Ordering::AcqRel);
    }

    /// Number of worker slots.
    pub fn capacity(&self) -> usize {
        self.workers.len()
    }
}

/// A background reader's announcement (see [`Epochs::pin_background`]).
pub struct BackgroundPin<'a> {
    epochs: &'a Epochs,
    index: usize,
}

impl BackgroundPin<'_> {
    /// Announces the current epoch again, so a long scan does not hold the
    /// horizon back; call it only where the holder keeps no shared pointer.
    pub fn refresh(&self) {
        let slot = &self.epochs.background[self.index];
        slot.1.store(self.epochs.global(), Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
}

impl Drop for BackgroundPin<'_> {
    fn drop(&mut self) {
        let slot = &self.epochs.background[self.index];
        slot.1.store(QUIESCENT, Ordering::SeqCst);
        slot.0.store(false, Ordering::Release);
    }
}

/// Unlinked objects waiting for the horizon, oldest first (one list per
/// thread, so stamps arrive in order).
pub struct DeferredFree<T> {
    items: VecDeque<(u64, T)>,
}

impl<T> Default for DeferredFree<T> {
    fn default() -> Self {
        Self { items: VecDeque::new() }
    }
}

impl<T> DeferredFree<T> {
    /// Queues `item`, unlinked before `stamp` was taken.
    pub fn push(&mut self, stamp: u64, item: T) {
        debug_assert!(self.items.back().is_none_or(|(last, _)| *last <= stamp), "stamps arrive in order");
        self.items.push_back((stamp, item));
    }

    /// Queues `item` wherever its stamp belongs (lists merged from another
    /// owner).
    pub fn push_unordered(&mut self, stamp: u64, item: T) {
        let position = self.items.partition_point(|(queued, _)| *queued <= stamp);
        self.items.insert(position, (stamp, item));
    }

    /// Frees every item stamped below `horizon`; returns how many.
    pub fn collect(&mut self, horizon: u64, mut free: impl FnMut(T)) -> usize {
        let mut freed = 0;
        while self.items.front().is_some_and(|(stamp, _)| *stamp < horizon) {
            let (_, item) = self.items.pop_front().expect("checked");
            free(item);
            freed += 1;
        }
        freed
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The oldest stamp waiting.
    pub fn oldest(&self) -> Option<u64> {
        self.items.front().map(|(stamp, _)| *stamp)
    }

    /// Takes every item (for freeing when no reader can exist, or for
    /// handing the list to another owner).
    pub fn drain(&mut self) -> impl Iterator<Item = (u64, T)> + '_ {
        self.items.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn horizon_waits_for_announced_readers_and_background_pins() {
        let epochs = Epochs::new(2, 5);
        assert_eq!(epochs.horizon(), QUIESCENT);
        epochs.enter(0);
        let stamp = epochs.stamp();
        assert_eq!(stamp, 5);
        // Worker 0 announced 5: an object stamped 5 must wait.
        assert!(stamp >= epochs.horizon());
        epochs.advance();
        epochs.enter(0);
        assert!(stamp < epochs.horizon());
        {
            let pin = epochs.pin_background();
            assert_eq!(epochs.horizon(), 6);
            assert_eq!(epochs.min_active(), 6, "background pins do not hold back group commit");
            epochs.advance();
            epochs.enter(0);
            assert_eq!(epochs.horizon(), 6);
            pin.refresh();
            assert_eq!(epochs.horizon(), 7);
        }
        epochs.leave(0);
        assert_eq!(epochs.horizon(), QUIESCENT);
    }

    #[test]
    fn deferred_free_releases_in_stamp_order() {
        let mut list = DeferredFree::default();
        for stamp in [1, 1, 2, 3] {
            list.push(stamp, stamp * 10);
        }
        let mut freed = Vec::new();
        assert_eq!(list.collect(2, |item| freed.push(item)), 2);
        assert_eq!(freed, vec![10, 10]);
        assert_eq!(list.oldest(), Some(2));
        assert_eq!(list.collect(QUIESCENT, |item| freed.push(item)), 2);
        assert!(list.is_empty());
    }
}
