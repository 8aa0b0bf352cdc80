//! The lock table of the two-phase-locking protocols (`no-wait`,
//! `wait-die`, `dl-detect`): shared/exclusive locks on rows, held until the
//! end of the attempt (strict 2PL).
//!
//! # Layout
//!
//! A fixed array of lock words, one per *stripe*; a row's stripe is a hash
//! of its address, so the table needs no allocation per row and works the
//! same over DRAM records and Zen rows. Two rows of one stripe share a lock:
//! a false conflict, never a missed one. A lock word is
//!
//! ```text
//! bit 63       exclusive
//! bits 0..62   holders: one bit per worker (shared: every reader;
//!              exclusive: exactly the writer)
//! ```
//!
//! so a holder knows from the word alone whether it already holds the
//! stripe (a transaction touching two rows of one stripe takes it once),
//! and a waiter knows whom it waits for, which wait-die (their timestamps)
//! and deadlock detection (the wait-for graph) need. Hence at most 63
//! workers ([`LockTable::MAX_WORKERS`]).
//!
//! # Conflicts
//!
//! * `no-wait`: the requester aborts at once.
//! * `wait-die`: a requester older (smaller timestamp) than every other
//!   holder waits; otherwise it dies. A transaction keeps its timestamp
//!   across retries, so it eventually becomes the oldest and never starves.
//!   Waits only go from older to younger: no cycle can form.
//! * `dl-detect`: the requester publishes whom it waits for (a mask per
//!   worker) and follows the wait-for edges from there; reaching itself
//!   means its wait closes a cycle. The youngest member of the cycle (by
//!   the timestamps wait-die uses, kept across retries) is the victim: a
//!   requester that finds a younger member keeps waiting for that one to
//!   find the cycle and abort. So a long transaction (an audit
//!   scanning every row) cannot be chosen again and again: it only ages.
//!
//! Every wait is also bounded in time ([`MAX_WAIT`]): a waiting worker
//! stays announced in its epoch, and group commit waits for it.
//!
//! Explained in docs/concurrency.md (the locking protocols).

use crate::cc::{row_stripe as stripe_of, ROW_STRIPES};
use crate::error::AbortReason;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Most workers a locking protocol serves: a lock word names its holders
/// with one bit per worker.
pub(crate) const MAX_LOCKING_WORKERS: usize = 63;

/// Exclusive mode bit of a lock word.
const EXCLUSIVE: u64 = 1 << 63;

/// Longest wait for one lock before the requester aborts.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// Spins between looks at the clock and the wait-for graph.
const SPINS_PER_CHECK: u32 = 64;

/// What a requester does when the lock it asks for is held: the rule of
/// the protocol that owns the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// Abort at once (`no-wait`, the PHyTM family's paths).
    NoWait,
    /// Wait for younger holders, die for older ones (`wait-die`, and
    /// `hstore`'s partition locks).
    WaitDie,
    /// Wait unless the wait closes a cycle of the wait-for graph whose
    /// youngest member is the requester (`dl-detect`).
    DlDetect,
}

/// The shared lock table of one engine.
pub(crate) struct LockTable {
    rule: Conflict,
    words: Box<[AtomicU64]>,
    /// Per worker: the timestamp of its current transaction (`wait-die`).
    timestamps: Box<[CachePadded<AtomicU64>]>,
    /// Per worker: the workers it waits for (`dl-detect`).
    waits_for: Box<[CachePadded<AtomicU64>]>,
    clock: AtomicU64,
}

/// The locks one worker's attempt holds.
#[derive(Default)]
pub(crate) struct HeldLocks {
    worker: usize,
    stripes: Vec<u32>,
}

impl HeldLocks {
    /// The (empty) set of worker `worker`.
    pub(crate) fn new(worker: usize) -> Self {
        Self { worker, stripes: Vec::new() }
    }

    /// Number of stripes held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.stripes.len()
    }
}

impl LockTable {
    /// Most workers a lock word can name.
    pub(crate) const MAX_WORKERS: usize = MAX_LOCKING_WORKERS;

    pub(crate) fn new(rule: Conflict, workers: usize) -> Self {
        assert!(workers <= Self::MAX_WORKERS);
        Self {
            rule,
            words: (0..ROW_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            timestamps: (0..workers).map(|_| CachePadded::new(AtomicU64::new(u64::MAX))).collect(),
            waits_for: (0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            clock: AtomicU64::new(0),
        }
    }

    /// Starts an attempt of `held`'s worker: a new transaction takes a new
    /// timestamp, a retry keeps its own (`wait-die`).
    pub(crate) fn begin(&self, held: &HeldLocks, first_attempt: bool) {
        debug_assert!(held.stripes.is_empty(), "locks are released at the end of every attempt");
        if first_attempt {
            let timestamp = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
            self.timestamps[held.worker].store(timestamp, Ordering::Release);
        }
    }

    /// Whether any transaction holds the stripe of `address`.
    pub(crate) fn is_held(&self, address: usize) -> bool {
        // IMPORTANT: the caller locked the row word just before; this fence
        // orders that store before the load of the stripe.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.words[stripe_of(address)].load(Ordering::SeqCst) != 0
    }

    /// Whether another worker than `held`'s holds the stripe of `address`
    /// exclusively (PHyTM's Slow HTM read check).
    #[inline]
    pub(crate) fn is_exclusive_by_other(&self, held: &HeldLocks, address: usize) -> bool {
        let word = self.words[stripe_of(address)].load(Ordering::Acquire);
        word & EXCLUSIVE != 0 && word & (1u64 << held.worker) == 0
    }

    /// Takes the lock of `address` in shared or exclusive mode (a held
    /// shared lock is upgraded), waiting as the protocol says.
    pub(crate) fn acquire(&self, held: &mut HeldLocks, address: usize, exclusive: bool) -> Result<(), AbortReason> {
        let stripe = stripe_of(address);
        let me = 1u64 << held.worker;
        let mut waiting_since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            match self.try_acquire(stripe, me, exclusive) {
                Ok(newly) => {
                    if newly {
                        held.stripes.push(stripe as u32);
                        // IMPORTANT: pairs with the fence of `is_held`: the
                        // row word this holder reads next is read after the
                        // lock is visible to reclamation (store-load order).
                        std::sync::atomic::fence(Ordering::SeqCst);
                    }
                    if waiting_since.is_some() && self.rule == Conflict::DlDetect {
                        self.waits_for[held.worker].store(0, Ordering::SeqCst);
                    }
                    return Ok(());
                }
                Err(others) => {
                    if spins.is_multiple_of(SPINS_PER_CHECK) {
                        let since = *waiting_since.get_or_insert_with(Instant::now);
                        if let Err(reason) = self.may_wait(held.worker, others) {
                            return Err(self.stop_waiting(held.worker, reason));
                        }
                        if since.elapsed() > MAX_WAIT {
                            return Err(self.stop_waiting(held.worker, AbortReason::LockTimeout));
                        }
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(SPINS_PER_CHECK * 4) {
                        // Two cores and more workers: let the holder run.
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }

    fn stop_waiting(&self, worker: usize, reason: AbortReason) -> AbortReason {
        if self.rule == Conflict::DlDetect {
            self.waits_for[worker].store(0, Ordering::SeqCst);
        }
        reason
    }

    /// Whether `worker` may wait for the holders `others`.
    fn may_wait(&self, worker: usize, others: u64) -> Result<(), AbortReason> {
        match self.rule {
            Conflict::NoWait => Err(AbortReason::LockConflict),
            // H-Store's partition locks wait in wait-die order too.
            Conflict::WaitDie => {
                let mine = self.timestamps[worker].load(Ordering::Acquire);
                let older_than_all =
                    holders(others).all(|holder| self.timestamps[holder].load(Ordering::Acquire) > mine);
                if older_than_all {
                    Ok(())
                } else {
                    Err(AbortReason::LockConflict)
                }
            }
            Conflict::DlDetect => {
                self.waits_for[worker].store(others, Ordering::SeqCst);
                if !self.reaches(others, worker) {
                    return Ok(());
                }
                // On a cycle: the members are the workers this one reaches
                // that reach it back. The youngest of them aborts.
                let mine = self.timestamps[worker].load(Ordering::Acquire);
                let reachable = self.reachable(others);
                let younger_member = holders(reachable & !(1 << worker)).any(|member| {
                    self.timestamps[member].load(Ordering::Acquire) > mine
                        && self.reaches(self.waits_for[member].load(Ordering::SeqCst), worker)
                });
                if younger_member {
                    Ok(())
                } else {
                    Err(AbortReason::Deadlock)
                }
            }
        }
    }

    /// Every worker reachable over wait-for edges from `start` (inclusive).
    fn reachable(&self, start: u64) -> u64 {
        let mut visited = 0u64;
        let mut frontier = start;
        while frontier != 0 {
            visited |= frontier;
            let mut next = 0u64;
            for worker in holders(frontier) {
                next |= self.waits_for[worker].load(Ordering::SeqCst);
            }
            frontier = next & !visited;
        }
        visited
    }

    /// Whether following wait-for edges from `start` reaches `target`.
    fn reaches(&self, start: u64, target: usize) -> bool {
        self.reachable(start) & (1 << target) != 0
    }

    /// One attempt at the lock word: `Ok(newly taken)` or `Err(the other
    /// holders)`.
    fn try_acquire(&self, stripe: usize, me: u64, exclusive: bool) -> Result<bool, u64> {
        let word = &self.words[stripe];
        let mut current = word.load(Ordering::Acquire);
        loop {
            let mine = current & me != 0;
            let others = current & !EXCLUSIVE & !me;
            let new = if exclusive {
                if others != 0 {
                    return Err(others);
                }
                if mine && current & EXCLUSIVE != 0 {
                    return Ok(false);
                }
                EXCLUSIVE | me
            } else {
                if mine {
                    return Ok(false);
                }
                if current & EXCLUSIVE != 0 {
                    return Err(others);
                }
                current | me
            };
            // SeqCst pairs with `is_held` of reclamation: a row whose stripe
            // is seen free there was not locked before the reclaimer locked
            // the row itself, and a later holder's read sees REMOVED.
            match word.compare_exchange_weak(current, new, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => return Ok(!mine),
                Err(seen) => current = seen,
            }
        }
    }

    /// Releases every lock `held` holds.
    pub(crate) fn release_all(&self, held: &mut HeldLocks) {
        let me = 1u64 << held.worker;
        for stripe in held.stripes.drain(..) {
            let word = &self.words[stripe as usize];
            let mut current = word.load(Ordering::Acquire);
            loop {
                debug_assert!(current & me != 0, "released a stripe this worker does not hold");
                let rest = current & !EXCLUSIVE & !me;
                // An exclusive holder is alone: its release frees the word.
                let new = if current & EXCLUSIVE != 0 { 0 } else { rest };
                match word.compare_exchange_weak(current, new, Ordering::Release, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(seen) => current = seen,
                }
            }
        }
    }
}

/// The workers named by a holder mask.
fn holders(mask: u64) -> impl Iterator<Item = usize> {
    (0..LockTable::MAX_WORKERS).filter(move |worker| mask & (1 << worker) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rule: Conflict) -> LockTable {
        LockTable::new(rule, 4)
    }

    #[test]
    fn shared_locks_coexist_and_exclude_writers() {
        let locks = table(Conflict::NoWait);
        let (mut a, mut b) = (HeldLocks::new(0), HeldLocks::new(1));
        locks.begin(&a, true);
        locks.begin(&b, true);
        locks.acquire(&mut a, 0x1000, false).unwrap();
        locks.acquire(&mut b, 0x1000, false).unwrap();
        assert_eq!(locks.acquire(&mut b, 0x1000, true), Err(AbortReason::LockConflict));
        locks.release_all(&mut a);
        // Alone now: the upgrade succeeds, and nobody else can read.
        locks.acquire(&mut b, 0x1000, true).unwrap();
        assert_eq!(locks.acquire(&mut a, 0x1000, false), Err(AbortReason::LockConflict));
        assert!(locks.is_held(0x1000));
        locks.release_all(&mut b);
        assert!(!locks.is_held(0x1000));
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn a_stripe_is_taken_once_per_holder() {
        let locks = table(Conflict::NoWait);
        let mut a = HeldLocks::new(2);
        locks.begin(&a, true);
        locks.acquire(&mut a, 0x2000, false).unwrap();
        locks.acquire(&mut a, 0x2000, false).unwrap();
        locks.acquire(&mut a, 0x2000, true).unwrap();
        assert_eq!(a.len(), 1);
        locks.release_all(&mut a);
        assert!(!locks.is_held(0x2000));
    }

    #[test]
    fn wait_die_lets_only_the_older_wait() {
        let locks = table(Conflict::WaitDie);
        let (mut old, mut young) = (HeldLocks::new(0), HeldLocks::new(1));
        locks.begin(&old, true);
        locks.begin(&young, true);
        locks.acquire(&mut old, 0x3000, true).unwrap();
        // The younger requester dies at once.
        assert_eq!(locks.acquire(&mut young, 0x3000, false), Err(AbortReason::LockConflict));
        locks.release_all(&mut old);
        locks.acquire(&mut young, 0x3000, true).unwrap();
        // The older one waits, and gets the lock once the younger releases.
        let shared = &locks;
        std::thread::scope(|scope| {
            let waiter = scope.spawn(move || {
                // The older requester may wait; a wait ends by timing out
                // only when the releasing thread is descheduled past the
                // bound (a loaded machine), so it asks again. It must never
                // die as the younger one did.
                let result = loop {
                    match shared.acquire(&mut old, 0x3000, true) {
                        Err(AbortReason::LockTimeout) => continue,
                        other => break other,
                    }
                };
                (result, old)
            });
            std::thread::sleep(Duration::from_millis(2));
            locks.release_all(&mut young);
            let (result, mut old) = waiter.join().unwrap();
            assert_eq!(result, Ok(()));
            locks.release_all(&mut old);
            // A retry keeps its timestamp: still older than a newer
            // transaction.
            locks.begin(&young, true);
            locks.begin(&old, false);
        });
        locks.acquire(&mut young, 0x3000, true).unwrap();
        assert!(locks.may_wait(0, 1 << 1).is_ok());
        locks.release_all(&mut young);
    }

    #[test]
    fn dl_detect_aborts_the_waiter_that_closes_a_cycle() {
        let locks = table(Conflict::DlDetect);
        let (mut a, mut b) = (HeldLocks::new(0), HeldLocks::new(1));
        locks.begin(&a, true);
        locks.begin(&b, true);
        locks.acquire(&mut a, 0x4000, true).unwrap();
        locks.acquire(&mut b, 0x5000, true).unwrap();
        // a waits for b (no cycle yet)...
        assert!(locks.may_wait(0, 1 << 1).is_ok());
        // ...so b waiting for a closes one, and b, the younger, aborts.
        assert_eq!(locks.acquire(&mut b, 0x4000, true), Err(AbortReason::Deadlock));
        // The other way round: b waits first; a, the older, closes the cycle
        // but keeps waiting for the younger b to abort.
        locks.waits_for[0].store(0, Ordering::SeqCst);
        assert!(locks.may_wait(1, 1 << 0).is_ok());
        assert!(locks.may_wait(0, 1 << 1).is_ok(), "the older member is not the victim");
        assert_eq!(locks.may_wait(1, 1 << 0), Err(AbortReason::Deadlock), "the younger member is");
        locks.waits_for[0].store(0, Ordering::SeqCst);
        locks.waits_for[1].store(0, Ordering::SeqCst);
        locks.release_all(&mut a);
        locks.release_all(&mut b);
    }

    #[test]
    fn no_wait_never_waits() {
        let locks = table(Conflict::NoWait);
        let (mut a, mut b) = (HeldLocks::new(0), HeldLocks::new(3));
        locks.begin(&a, true);
        locks.begin(&b, true);
        locks.acquire(&mut a, 0x6000, false).unwrap();
        // A requester that waited would end with `LockTimeout` (the holder
        // never releases here); no-wait refuses at once with `LockConflict`,
        // and its protocol never grants a wait.
        assert_eq!(locks.acquire(&mut b, 0x6000, true), Err(AbortReason::LockConflict));
        assert_eq!(locks.may_wait(3, 1 << 0), Err(AbortReason::LockConflict));
        assert!(locks.is_held(0x6000), "the holder keeps its lock");
        locks.release_all(&mut a);
    }
}
