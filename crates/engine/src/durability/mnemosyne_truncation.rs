//! Mnemosyne's asynchronous log truncation: a background thread makes the
//! workers' write-backs durable and advances their log heads, off the
//! commit path, as Mnemosyne's log manager truncates the logs of
//! transactions whose in-place writes it flushed.
//!
//! A worker hands over, every so often, the home-slot ranges it wrote back
//! and the log position they cover ([`TruncationSlot::hand_over`]); the
//! thread flushes the ranges, fences, stores the head and fences again
//! ([`TruncationSlot::truncate`]), then publishes the new head, which the
//! worker adopts before its next append. A worker whose log is full before
//! the thread got to it truncates inline (the thread's work, on its own
//! thread: Mnemosyne's worker blocks on the log manager instead).
//!
//! Why this is safe: a handed-over range belongs to a fragment before the
//! handed-over position (the worker writes a fragment's versions back
//! after its fence, before its next append), and the head moves only after
//! those ranges were flushed and fenced; flushing a line that a later
//! fragment wrote again only makes that later (already fenced) version
//! durable early, and that fragment stays in the log until its own
//! truncation. The workers truncate each in their own order, not in
//! global sequence order: recovery's per-slot TID check makes any order
//! safe (`mnemosyne_log`).
//!
//! Explained in docs/engines/mnemosyne.md.

use crate::durability::tornbit_log::persist_head;
use parking_lot::{Condvar, Mutex};
use pmtx_pm::{PmBackend, PmCounters, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the thread sleeps when nobody hands work over.
const IDLE_WAIT: Duration = Duration::from_millis(1);

/// Write-backs handed over and not yet durable.
#[derive(Default)]
struct Pending {
    /// Home-slot ranges (offset, length).
    ranges: Vec<(u64, u64)>,
    /// The log position they cover (`None`: nothing handed over).
    upto: Option<u64>,
}

/// One worker log's truncation state, shared by the worker and the thread.
pub(crate) struct TruncationSlot {
    head_offset: u64,
    pending: Mutex<Pending>,
    /// The head made durable last (the worker adopts it).
    durable_head: AtomicU64,
}

impl TruncationSlot {
    /// The head made durable last.
    #[inline]
    pub(crate) fn durable_head(&self) -> u64 {
        self.durable_head.load(Ordering::Acquire)
    }

    /// Hands `ranges` (written back, not flushed) over with the log
    /// position `upto` that covers their fragments.
    pub(crate) fn hand_over(&self, ranges: &mut Vec<(u64, u64)>, upto: u64) {
        let mut pending = self.pending.lock();
        debug_assert!(pending.upto.is_none_or(|earlier| earlier <= upto));
        pending.ranges.append(ranges);
        pending.upto = Some(upto);
    }

    /// Makes the handed-over write-backs and `more` durable and moves the
    /// head to `upto` (or to the handed-over position): flush, fence, head,
    /// fence. Returns whether the head moved.
    pub(crate) fn truncate<B: PmBackend>(&self, backend: &B, more: &mut Vec<(u64, u64)>, upto: Option<u64>) -> bool {
        let mut pending = self.pending.lock();
        let Some(position) = upto.or(pending.upto) else {
            return false;
        };
        for (offset, len) in pending.ranges.drain(..).chain(more.drain(..)) {
            backend.flush(offset, len);
        }
        backend.fence();
        backend.crash_point("mnemosyne: write-backs durable, log head not moved");
        persist_head(backend, self.head_offset, position);
        pending.upto = None;
        self.durable_head.store(position, Ordering::Release);
        true
    }
}

/// The truncation thread's shared state.
struct Shared {
    slots: Mutex<Vec<Arc<TruncationSlot>>>,
    /// Set when a worker handed work over (the thread's wake-up).
    work: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
    /// The thread's PM work.
    counters: Mutex<PmCounters>,
    truncations: AtomicU64,
}

/// The truncation thread of one `mnemosyne` engine.
pub(crate) struct Truncator {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Truncator {
    /// Starts the thread over `pool`.
    pub(crate) fn start<B: PmBackend>(pool: Arc<Pool<B>>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            slots: Mutex::default(),
            work: Mutex::new(false),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            counters: Mutex::default(),
            truncations: AtomicU64::new(0),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new().name("pmtx-truncate".into()).spawn(move || truncation_loop(&shared, &pool))?
        };
        Ok(Self { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Registers the log whose head word is at `head_offset` and whose
    /// durable head is `head`.
    pub(crate) fn register(&self, head_offset: u64, head: u64) -> Arc<TruncationSlot> {
        let slot =
            Arc::new(TruncationSlot { head_offset, pending: Mutex::default(), durable_head: AtomicU64::new(head) });
        self.shared.slots.lock().push(Arc::clone(&slot));
        slot
    }

    /// Forgets `slot` (its worker truncated everything on the way out).
    pub(crate) fn unregister(&self, slot: &Arc<TruncationSlot>) {
        self.shared.slots.lock().retain(|registered| !Arc::ptr_eq(registered, slot));
    }

    /// Wakes the thread: work was handed over.
    pub(crate) fn wake(&self) {
        *self.shared.work.lock() = true;
        self.shared.wake.notify_one();
    }

    /// Truncations the thread did.
    pub(crate) fn truncations(&self) -> u64 {
        self.shared.truncations.load(Ordering::Relaxed)
    }

    /// The thread's PM work so far.
    pub(crate) fn counters(&self) -> PmCounters {
        *self.shared.counters.lock()
    }

    /// Stops and joins the thread (what was handed over and not truncated
    /// stays in the logs: recovery replays it). Returns the panic message
    /// if the thread panicked.
    pub(crate) fn stop(&self) -> Option<String> {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.wake();
        let handle = self.thread.lock().take()?;
        handle.join().err().map(|payload| crate::error::panic_message(payload.as_ref()))
    }
}

impl Drop for Truncator {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn truncation_loop<B: PmBackend>(shared: &Shared, pool: &Pool<B>) {
    let mut none = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        {
            let mut work = shared.work.lock();
            if !*work {
                shared.wake.wait_for(&mut work, IDLE_WAIT);
            }
            *work = false;
        }
        let slots = shared.slots.lock().clone();
        let before = pmtx_pm::thread_counters();
        let mut done = 0;
        for slot in &slots {
            if slot.truncate(pool.backend(), &mut none, None) {
                done += 1;
            }
        }
        if done > 0 {
            shared.truncations.fetch_add(done, Ordering::Relaxed);
            shared.counters.lock().add(&pmtx_pm::thread_counters().since(&before));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability::tornbit_log::TornBitLog;
    use pmtx_pm::{Direct, PmOptions};

    fn pool() -> Arc<Pool<Direct>> {
        Arc::new(Pool::create_in_memory(4 << 20, 256 << 10, &PmOptions::default()).expect("pool"))
    }

    /// What a worker hands over is flushed and its head made durable by
    /// the thread, which the worker then sees; an inline truncation takes
    /// what was handed over with it.
    #[test]
    fn the_thread_moves_the_durable_head_and_inline_truncation_takes_the_rest() {
        let pool = pool();
        let mut log = TornBitLog::open(Arc::clone(&pool), 0, 1024).expect("log");
        let truncator = Truncator::start(Arc::clone(&pool)).expect("thread");
        let slot = truncator.register(log.head_offset(), log.tail());
        log.append(&[1, 2, 3], 7, true);
        let first = log.tail();
        let mut ranges = vec![(4096, 64)];
        slot.hand_over(&mut ranges, first);
        assert!(ranges.is_empty());
        truncator.wake();
        // Liveness, not timing: the thread gets to it (or the test hangs
        // and the runner's timeout names it).
        while slot.durable_head() != first {
            std::thread::yield_now();
        }
        assert_eq!(pool.backend().load_u64(log.head_offset()), first);
        assert!(truncator.truncations() >= 1);
        log.adopt_head(first);
        assert_eq!(log.used(), 0);
        // Stop the thread: a hand-over stays pending until an inline
        // truncation takes it.
        assert!(truncator.stop().is_none());
        log.append(&[4], 8, true);
        let second = log.tail();
        slot.hand_over(&mut vec![(8192, 64)], second);
        assert_eq!(slot.durable_head(), first);
        log.append(&[5], 9, true);
        let third = log.tail();
        assert!(slot.truncate(pool.backend(), &mut vec![(12288, 64)], Some(third)));
        assert_eq!(slot.durable_head(), third);
        assert_eq!(pool.backend().load_u64(log.head_offset()), third);
        assert!(!slot.truncate(pool.backend(), &mut Vec::new(), None), "nothing left to truncate");
        truncator.unregister(&slot);
    }
}
