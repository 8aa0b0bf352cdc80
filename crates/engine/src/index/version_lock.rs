//! Optimistic version lock (Leis et al., "The ART of practical
//! synchronization", DaMoN 2016), generic over the atomic word type.
//!
//! A [`VersionLock`] is a single 64-bit word:
//!
//! ```text
//!   63 ........................ 2 | 1      | 0
//!   version counter               | locked | obsolete
//! ```
//!
//! * Readers call [`VersionLock::read_lock`] to obtain the current version
//!   (failing if the lock is held or the node is obsolete), read the protected
//!   data, then call [`VersionLock::validate`] with that version.  If the
//!   version is unchanged no writer modified the data in between, so what was
//!   read is a consistent snapshot.
//! * Writers either [`VersionLock::upgrade`] a version they read (a CAS from
//!   `v` to `v | LOCKED`, failing if anything changed since `v` was read) or
//!   acquire the lock directly with [`VersionLock::write_lock`].  Unlocking
//!   adds `LOCKED` once more, which clears the locked bit and carries into the
//!   counter, so every write critical section produces a new version.
//!
//! Memory ordering: the protected data must itself be held in atomics.  The
//! writer's data stores must use `Release` (or stronger) and the reader's data
//! loads `Acquire` (or stronger); then a reader that observes any store made
//! inside a critical section also observes the lock acquisition that preceded
//! it, and its final [`VersionLock::validate`] fails.  This avoids the
//! stand-alone fences of the classic seqlock formulation, which keeps the
//! protocol expressible in terms of a plain atomic-word trait (so the same code
//! can be model-checked with `shuttle`'s atomics, see [`AtomicWord`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Bit set while a writer holds the lock.
pub const LOCKED: u64 = 0b10;
/// Bit set once the protected object has been retired for good.
pub const OBSOLETE: u64 = 0b01;

/// The operations the concurrent indexes need from a 64-bit atomic word.
///
/// Implemented for [`std::sync::atomic::AtomicU64`] (the production
/// instantiation).  Tests implement it for a wrapper around
/// `shuttle::sync::atomic::AtomicU64` to explore interleavings of the real
/// lock / split protocol with a randomized scheduler.
pub trait AtomicWord: Send + Sync + 'static {
    /// Creates a word holding `v`.
    fn new(v: u64) -> Self;
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic store.
    fn store(&self, v: u64, order: Ordering);
    /// Atomic strong compare-and-exchange.
    fn compare_exchange(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64>;
    /// Atomic fetch-and-add (wrapping).
    fn fetch_add(&self, v: u64, order: Ordering) -> u64;
    /// Called by spinning / restarting code paths between attempts.  The
    /// production implementation issues a CPU spin hint; a model-checking
    /// implementation yields to its scheduler.
    fn pause();
}

impl AtomicWord for AtomicU64 {
    #[inline]
    fn new(v: u64) -> Self {
        AtomicU64::new(v)
    }
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline]
    fn store(&self, v: u64, order: Ordering) {
        AtomicU64::store(self, v, order)
    }
    #[inline]
    fn compare_exchange(&self, current: u64, new: u64, success: Ordering, failure: Ordering) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, current, new, success, failure)
    }
    #[inline]
    fn fetch_add(&self, v: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_add(self, v, order)
    }
    #[inline]
    fn pause() {
        std::hint::spin_loop();
    }
}

/// Marker error: an optimistic operation observed a concurrent modification
/// (or a held lock) and must be restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart;

/// An optimistic version lock word.  See the module documentation.
pub struct VersionLock<W: AtomicWord = AtomicU64> {
    word: W,
}

impl<W: AtomicWord> Default for VersionLock<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W: AtomicWord> std::fmt::Debug for VersionLock<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionLock").field("word", &self.word.load(Ordering::Relaxed)).finish()
    }
}

impl<W: AtomicWord> VersionLock<W> {
    /// A new, unlocked, non-obsolete lock at version 0.
    pub fn new() -> Self {
        Self { word: W::new(0) }
    }

    /// Returns `true` if `v` has the locked bit set.
    #[inline]
    pub fn is_locked(v: u64) -> bool {
        v & LOCKED != 0
    }

    /// Returns `true` if `v` has the obsolete bit set.
    #[inline]
    pub fn is_obsolete(v: u64) -> bool {
        v & OBSOLETE != 0
    }

    /// Current raw word (for diagnostics).
    #[inline]
    pub fn raw(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Starts an optimistic read: returns the current version, or
    /// `Err(Restart)` if a writer holds the lock or the object is obsolete.
    #[inline]
    pub fn read_lock(&self) -> Result<u64, Restart> {
        let v = self.word.load(Ordering::Acquire);
        if v & (LOCKED | OBSOLETE) != 0 {
            Err(Restart)
        } else {
            Ok(v)
        }
    }

    /// Like [`read_lock`](Self::read_lock) but waits (spinning with
    /// [`AtomicWord::pause`]) while a writer holds the lock.  Fails only if the
    /// object is obsolete.
    pub fn read_lock_wait(&self) -> Result<u64, Restart> {
        loop {
            let v = self.word.load(Ordering::Acquire);
            if v & OBSOLETE != 0 {
                return Err(Restart);
            }
            if v & LOCKED == 0 {
                return Ok(v);
            }
            W::pause();
        }
    }

    /// Ends an optimistic read: `true` iff no writer entered a critical
    /// section since `v` was obtained from [`read_lock`](Self::read_lock).
    ///
    /// All reads of protected data must be `Acquire` atomic loads (or be
    /// ordered before this call by one), see the module documentation.
    #[inline]
    pub fn validate(&self, v: u64) -> bool {
        self.word.load(Ordering::Acquire) == v
    }

    /// [`validate`](Self::validate) as a `Result`.
    #[inline]
    pub fn check(&self, v: u64) -> Result<(), Restart> {
        if self.validate(v) {
            Ok(())
        } else {
            Err(Restart)
        }
    }

    /// Atomically turns the optimistic read at version `v` into a write
    /// lock.  Fails if the version changed (or is locked / obsolete).
    #[inline]
    pub fn upgrade(&self, v: u64) -> Result<(), Restart> {
        if v & (LOCKED | OBSOLETE) != 0 {
            return Err(Restart);
        }
        self.word.compare_exchange(v, v | LOCKED, Ordering::AcqRel, Ordering::Acquire).map(|_| ()).map_err(|_| Restart)
    }

    /// Acquires the write lock, waiting while another writer holds it.
    /// Fails only if the object is obsolete.  Returns the version that was
    /// current when the lock was taken.
    pub fn write_lock(&self) -> Result<u64, Restart> {
        loop {
            let v = self.read_lock_wait()?;
            if self.upgrade(v).is_ok() {
                return Ok(v);
            }
            W::pause();
        }
    }

    /// The version [`write_unlock`](Self::write_unlock) leaves when the
    /// lock was upgraded from version `v`.
    #[inline]
    pub fn version_after_unlock(v: u64) -> u64 {
        debug_assert_eq!(v & (LOCKED | OBSOLETE), 0);
        v + 2 * LOCKED
    }

    /// Releases the write lock, producing a new version.
    ///
    /// Must only be called by the holder of the write lock.
    #[inline]
    pub fn write_unlock(&self) {
        // LOCKED is set, so adding it clears the bit and carries one into the
        // counter (bits 2..).
        self.word.fetch_add(LOCKED, Ordering::Release);
    }

    /// Releases the write lock and marks the object obsolete: every later
    /// `read_lock` / `upgrade` / `write_lock` fails.
    ///
    /// Must only be called by the holder of the write lock.
    #[inline]
    pub fn write_unlock_obsolete(&self) {
        // Clears LOCKED (carrying into the counter) and sets OBSOLETE.
        self.word.fetch_add(LOCKED + OBSOLETE, Ordering::Release);
    }

    /// Takes an obsolete object back into use (type-stable memory recycled
    /// by its owner): clears OBSOLETE and leaves the lock write-locked by the
    /// caller, who releases it with [`write_unlock`](Self::write_unlock)
    /// once the object is initialized for its new life.
    ///
    /// The counter keeps growing across the retirement and reuse, so no
    /// version read before the object was retired ever validates again.
    /// Must only be called by the single owner of an obsolete object (for
    /// example the allocator that took it from a free list); nobody else can
    /// change an obsolete word, since every lock attempt on it fails.
    pub fn revive(&self) {
        debug_assert!(Self::is_obsolete(self.raw()) && !Self::is_locked(self.raw()));
        // An obsolete, unlocked word ends in 0b01; adding OBSOLETE turns that
        // into 0b10 (LOCKED) with the counter unchanged, and the caller's
        // `write_unlock` then advances the counter.
        self.word.fetch_add(OBSOLETE, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_change_on_every_write() {
        let l: VersionLock = VersionLock::new();
        let v0 = l.read_lock().unwrap();
        assert!(l.validate(v0));
        l.upgrade(v0).unwrap();
        assert!(l.read_lock().is_err());
        assert!(!l.validate(v0));
        l.write_unlock();
        let v1 = l.read_lock().unwrap();
        assert_ne!(v0, v1);
        assert!(l.upgrade(v0).is_err());
        let v = l.write_lock().unwrap();
        assert_eq!(v, v1);
        l.write_unlock_obsolete();
        assert!(l.read_lock().is_err());
        assert!(l.write_lock().is_err());
        assert!(VersionLock::<AtomicU64>::is_obsolete(l.raw()));
        assert!(!VersionLock::<AtomicU64>::is_locked(l.raw()));
        // Reuse: locked for the reviver, then a version never seen before.
        let retired = l.raw();
        l.revive();
        assert!(l.read_lock().is_err());
        assert!(VersionLock::<AtomicU64>::is_locked(l.raw()));
        l.write_unlock();
        let v2 = l.read_lock().unwrap();
        assert!(v2 > retired && v2 > v1 && v2 != v0);
        assert!(!l.validate(v1));
    }
}
