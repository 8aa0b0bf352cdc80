//! Populating free chunks ahead of the allocator.
//!
//! On a pool file that is not DAX (tmpfs, a disk file), the first store to a
//! page faults, and the kernel allocates and zeroes the page inside the
//! fault: a log-heavy engine that writes 8 KB per transaction spends a
//! quarter of its time there (`clear_page`, the fault path). On DAX the
//! fault is cheaper but still a trap per page. A background thread keeps
//! the page tables of the next few chunks the allocator will hand out (it
//! hands out the lowest free chunk first) populated for writing, so the
//! stores of the worker that gets the chunk take no fault; with a spare core
//! the cost leaves the critical path. Populating changes no byte, so it
//! cannot disturb a chunk that is allocated meanwhile, and it never touches
//! owned chunks.
//!
//! The thread holds only a weak reference to the pool, upgraded for one
//! chunk at a time, so dropping the pool is never held up for long; the
//! pool's [`Prefault`] stops it on drop.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What the thread populates: the pool (`pool.rs` implements it, so this
/// module needs nothing of the pool's and the two never import each other).
pub(crate) trait PrefaultTarget: Send + Sync + 'static {
    /// The target's side of the thread.
    fn prefault_state(&self) -> &Prefault;
    /// Whether the target lives in anonymous memory (nothing to populate).
    fn is_anonymous(&self) -> bool;
    /// Populates the first of the `ahead` chunks the allocator hands out
    /// next that is not populated yet; `Ok(false)` when all of them are.
    fn prefault_next_free_chunk(&self, ahead: u64) -> std::io::Result<bool>;
}

/// How long the thread sleeps when every chunk it looks after is populated
/// and no allocation wakes it (an allocation always does).
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// The pool's side: which chunks are populated (or owned: an allocated
/// chunk is being written anyway) and the signal to its thread.
pub(crate) struct Prefault {
    populated: Box<[AtomicU64]>,
    /// Chunks the thread populated (statistics, tests).
    pub(crate) done: AtomicU64,
    /// Set by the first start: one thread per pool, however often engines
    /// are opened over it.
    started: AtomicBool,
    signal: Arc<Signal>,
}

#[derive(Default)]
struct Signal {
    pending: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Signal {
    fn notify(&self) {
        *self.pending.lock() = true;
        self.wake.notify_one();
    }

    fn wait(&self) {
        let mut pending = self.pending.lock();
        if !*pending && !self.stop.load(Ordering::Acquire) {
            self.wake.wait_for(&mut pending, IDLE_WAIT);
        }
        *pending = false;
    }
}

impl Prefault {
    pub(crate) fn new(chunk_count: u64) -> Self {
        let words = chunk_count.div_ceil(64) as usize;
        Self {
            populated: (0..words).map(|_| AtomicU64::new(0)).collect(),
            done: AtomicU64::new(0),
            started: AtomicBool::new(false),
            signal: Arc::default(),
        }
    }

    pub(crate) fn is_populated(&self, chunk: u64) -> bool {
        self.populated[(chunk / 64) as usize].load(Ordering::Relaxed) & (1 << (chunk % 64)) != 0
    }

    pub(crate) fn mark_populated(&self, chunk: u64) {
        self.populated[(chunk / 64) as usize].fetch_or(1 << (chunk % 64), Ordering::Relaxed);
    }

    /// Called by the allocator after it handed out a chunk.
    pub(crate) fn allocated(&self, chunk: u64) {
        self.mark_populated(chunk);
        self.signal.notify();
    }
}

impl Drop for Prefault {
    fn drop(&mut self) {
        self.signal.stop.store(true, Ordering::Release);
        self.signal.notify();
    }
}

/// Starts the thread that keeps the `ahead` lowest free chunks of `pool`
/// populated. Does nothing for `ahead == 0`, a pool in anonymous memory,
/// or a pool whose thread already runs.
pub(crate) fn start<T: PrefaultTarget>(pool: &Arc<T>, ahead: u64) -> std::io::Result<()> {
    let state = pool.prefault_state();
    if ahead == 0 || pool.is_anonymous() || state.started.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let weak: Weak<T> = Arc::downgrade(pool);
    let signal = Arc::clone(&state.signal);
    let spawned = std::thread::Builder::new().name("pmtx-prefault".into()).spawn(move || run(weak, signal, ahead));
    if let Err(error) = spawned {
        state.started.store(false, Ordering::Release);
        return Err(error);
    }
    Ok(())
}

fn run<T: PrefaultTarget>(pool: Weak<T>, signal: Arc<Signal>, ahead: u64) {
    while !signal.stop.load(Ordering::Acquire) {
        let done = {
            let Some(pool) = pool.upgrade() else { return };
            match pool.prefault_next_free_chunk(ahead) {
                Ok(done) => done,
                // The kernel lacks the advice or cannot back the range: the
                // workers fault as before.
                Err(_) => return,
            }
        };
        if !done {
            signal.wait();
        }
    }
}
