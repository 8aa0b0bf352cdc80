//! The fallback lock of one [`crate::Htm`] instance.
//!
//! A test-and-test-and-set spin lock in its own cache line. Hardware regions
//! read it right after `xbegin`, which puts its line in their read set: any
//! later acquisition aborts them, so a fallback execution never overlaps a
//! hardware transaction. The lock word also records who holds it, so the
//! `sim` backend can tell "a fallback execution holds the lock" (which a
//! hardware attempt would see as a lock-held abort) from "another simulated
//! attempt holds it" (an artefact of simulating hardware under the lock).

use std::sync::atomic::{AtomicU32, Ordering};

/// Who holds the fallback lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Holder {
    /// A fallback-path execution.
    Fallback = 1,
    /// A simulated hardware attempt of the `sim` backend.
    SimulatedAttempt = 2,
}

const FREE: u32 = 0;
/// Spins before each `yield_now` while waiting, so that waiting stays cheap
/// when the holder runs on another core and does not starve it when threads
/// outnumber cores.
const SPINS_BEFORE_YIELD: u32 = 128;

#[repr(align(64))]
#[derive(Debug, Default)]
pub(crate) struct FallbackLock {
    state: AtomicU32,
}

impl FallbackLock {
    /// True while any holder has the lock. Inside a hardware transaction this
    /// read is the subscription to the lock.
    #[inline(always)]
    pub(crate) fn is_locked(&self) -> bool {
        self.state.load(Ordering::Acquire) != FREE
    }

    /// True while a fallback-path execution has the lock.
    pub(crate) fn is_held_by_fallback(&self) -> bool {
        self.state.load(Ordering::Acquire) == Holder::Fallback as u32
    }

    /// Spins (then yields) until the lock is observed free.
    pub(crate) fn wait_until_free(&self) {
        let mut spins = 0u32;
        while self.is_locked() {
            spins += 1;
            if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Takes the lock if it is free.
    pub(crate) fn try_lock(&self, holder: Holder) -> Option<FallbackGuard<'_>> {
        // IMPORTANT: Acquire on success orders the holder's accesses after
        // the previous holder's, whose Release store in `unlock` published them.
        self.state
            .compare_exchange(FREE, holder as u32, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| FallbackGuard { lock: self })
    }

    /// Takes the lock, waiting as long as needed.
    pub(crate) fn lock(&self, holder: Holder) -> FallbackGuard<'_> {
        loop {
            if let Some(guard) = self.try_lock(holder) {
                return guard;
            }
            self.wait_until_free();
        }
    }
}

/// Releases the fallback lock when dropped, including when the region body
/// panics, so a panic never leaves every other region waiting forever.
#[derive(Debug)]
pub(crate) struct FallbackGuard<'lock> {
    lock: &'lock FallbackLock,
}

impl Drop for FallbackGuard<'_> {
    fn drop(&mut self) {
        // IMPORTANT: Release publishes everything done under the lock to the
        // next holder (and aborts hardware transactions subscribed to it
        // through the store itself).
        self.lock.state.store(FREE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_records_its_holder_and_releases_on_drop() {
        let lock = FallbackLock::default();
        assert!(!lock.is_locked());
        let guard = lock.lock(Holder::Fallback);
        assert!(lock.is_locked() && lock.is_held_by_fallback());
        assert!(lock.try_lock(Holder::SimulatedAttempt).is_none());
        drop(guard);
        assert!(!lock.is_locked());
        let guard = lock.try_lock(Holder::SimulatedAttempt).expect("lock is free");
        assert!(lock.is_locked() && !lock.is_held_by_fallback());
        drop(guard);
        lock.wait_until_free();
    }
}
