//! Global epochs (Silo): the unit of group commit and the high half of TIDs.
//!
//! A background thread advances the global epoch every `epoch_interval`.
//! Each worker announces the epoch it is working in, or that it is idle, so
//! the group-commit logger knows when every record of an epoch is written.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};

/// Announced by an idle worker.
pub const QUIESCENT: u64 = u64::MAX;

/// Global epoch plus per-worker announcements.
pub struct Epochs {
    global: CachePadded<AtomicU64>,
    workers: Vec<CachePadded<AtomicU64>>,
    durable: CachePadded<AtomicU64>,
}

impl Epochs {
    /// Epochs for up to `max_workers`, starting at `start` (> every epoch in
    /// recovered data, so TIDs keep growing across restarts).
    pub fn new(max_workers: usize, start: u64) -> Self {
        Self {
            global: CachePadded::new(AtomicU64::new(start.max(1))),
            workers: (0..max_workers).map(|_| CachePadded::new(AtomicU64::new(QUIESCENT))).collect(),
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

    /// Worker `id` starts a transaction: announce the current epoch.
    #[inline]
    pub fn enter(&self, id: usize) {
        let epoch = self.global();
        // IMPORTANT: SeqCst store then the commit reads the global epoch
        // again; a logger that missed this store will see the later epoch in
        // the record (see group-commit recovery argument).
        self.workers[id].store(epoch, Ordering::SeqCst);
    }

    /// Worker `id` is idle.
    #[inline]
    pub fn leave(&self, id: usize) {
        self.workers[id].store(QUIESCENT, Ordering::SeqCst);
    }

    /// Smallest epoch any active worker announced (`QUIESCENT` if none).
    pub fn min_active(&self) -> u64 {
        self.workers.iter().map(|w| w.load(Ordering::SeqCst)).min().unwrap_or(QUIESCENT)
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
