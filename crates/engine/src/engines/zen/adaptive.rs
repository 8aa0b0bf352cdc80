//! `zen+`'s MVCC-based adaptive execution (zen-plus.txt §4.1.2): the
//! detecting stage's thresholds and the exclusive stage.
//!
//! # Detecting stage
//!
//! Every read of a committed row is an *access* ([`Adaptive::on_access`]);
//! after each operation the worker adds the Met-Cache cost of the tuples
//! the transaction touched for the first time — each row read once, each
//! new version once (value bytes plus the entry overhead: what they would
//! occupy in the worker's cache region) — to its *footprint*
//! ([`Adaptive::on_footprint`]). A transaction enters the exclusive stage
//! when
//!
//! * **α**: it may write (it was not begun read-only) and its footprint
//!   passes `alpha_percent` of its worker's Met-Cache region (off with a
//!   zero budget: nothing is cached, nothing fills). It is checked after
//!   each operation, so a scan counts once it has returned;
//! * **β**: the free NVM space (free pool chunks plus the heap's free
//!   slots) is below `beta_percent` of the pool's data space while
//!   superseded tuples wait for reclamation, and it has accessed the most
//!   tuples of the running transactions (the paper's choice for β); the
//!   space is measured by the engine's ticker ([`Adaptive::refresh_space`]);
//! * **γ**: it is a retry, and the tuples its aborted attempts accessed
//!   (their wasted work) plus the current attempt's exceed `gamma_tuples`.
//!   Aborts the exclusive
//!   stage itself caused are not counted: they are not conflicts, and
//!   counting them would chain one stage into the next.
//!
//! # Exclusive stage
//!
//! 1. The transaction takes the G-EX flag (`owner`, worker + 1) with a
//!    compare-and-swap; if another holds it, this attempt aborts instead.
//! 2. It waits until every other worker's stage is `IDLE`. A worker marks
//!    itself `RUNNING` at begin (sequentially consistent) and then checks
//!    the flag, so either it sees the flag and waits before starting, or the
//!    privileged transaction sees it running and waits for it. A running
//!    transaction checks the flag at every access and when its commit
//!    starts, and aborts ([`AbortReason::Exclusive`]) unless it is already
//!    committing; one that is committing finishes.
//! 3. It runs alone to completion: its retries keep the flag, and while it
//!    holds it, new versions beyond its Met-Cache region are written to the
//!    heap at once (the worker's direct NVM writes, `worker/exclusive.rs`).
//! 4. Maintenance when it ends: with no transaction announced, every
//!    region's garbage below the horizon is freed and the stale versions of
//!    deleted keys erased (`Heap::sweep`), every region's tombstones the
//!    sweep made safe are reclaimed, and every older version in the version
//!    store is dropped.
//! 5. It releases the flag; the waiting workers start.
//!
//! Nothing here is persistent: a crash in the exclusive stage recovers like
//! any other (docs/engines/zen-plus.md).
//!
//! Explained in docs/engines/zen-plus.md.

use crate::error::AbortReason;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

/// A worker's stage: no transaction running.
const IDLE: u8 = 0;
/// A worker's stage: a transaction attempt is running (body or commit).
const RUNNING: u8 = 1;

/// Accesses between two publications of a transaction's access count and
/// two β checks.
const CHECK_EVERY: u64 = 64;

/// What made a transaction enter the exclusive stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Its accesses would fill its Met-Cache region past α.
    Alpha,
    /// NVM space ran low (β) and it accessed the most tuples.
    Beta,
    /// Its retries wasted more than γ tuple accesses.
    Gamma,
}

/// Counters of one worker (only that worker writes them).
#[derive(Default)]
pub(crate) struct AdaptiveCounters {
    pub(crate) entries_alpha: AtomicU64,
    pub(crate) entries_beta: AtomicU64,
    pub(crate) entries_gamma: AtomicU64,
    /// Attempts aborted because another transaction held G-EX (including
    /// a lost race to take it).
    pub(crate) aborts: AtomicU64,
    /// Transactions that waited at begin for an exclusive stage to end.
    pub(crate) waits: AtomicU64,
    /// Read-only attempts run at the oldest snapshot.
    pub(crate) snapshot_attempts: AtomicU64,
    /// Their reads served from the NVM heap without filling the cache.
    pub(crate) snapshot_nvm_reads: AtomicU64,
    /// Tuples written to the heap before their commit (exclusive stage).
    pub(crate) direct_nvm_writes: AtomicU64,
    /// Such tuples erased again because their transaction did not commit.
    pub(crate) direct_nvm_erased: AtomicU64,
}

/// The shared state of the adaptive execution.
pub(crate) struct Adaptive {
    /// G-EX: 0 when free, else the privileged worker + 1.
    owner: CachePadded<AtomicUsize>,
    /// Each worker's stage (`IDLE`, `RUNNING`).
    stages: Box<[CachePadded<AtomicU8>]>,
    /// Tuples each worker's running transaction accessed so far (published
    /// every `CHECK_EVERY` accesses; β picks the largest).
    accessed: Box<[CachePadded<AtomicU64>]>,
    /// Whether free NVM space is below β while garbage waits.
    space_low: AtomicBool,
    /// α in bytes of the region (0: off).
    alpha_bytes: u64,
    beta_percent: u32,
    gamma_tuples: u64,
    /// A worker's Met-Cache region: the privileged transaction's buffered
    /// new versions beyond it go to the heap at once.
    pub(crate) region_bytes: u64,
    pub(crate) counters: Box<[CachePadded<AdaptiveCounters>]>,
    /// Maintenance of the exclusive stages: heap slots freed and older
    /// versions dropped.
    pub(crate) maintenance_runs: AtomicU64,
    pub(crate) maintenance_slots: AtomicU64,
    pub(crate) maintenance_versions: AtomicU64,
}

/// One worker's view of its current transaction (cells: the store reads
/// through a shared reference while the worker holds the transaction).
#[derive(Default)]
pub(crate) struct AdaptiveTx {
    read_only: Cell<bool>,
    accesses: Cell<u64>,
    footprint: Cell<u64>,
    /// Accesses of the transaction's aborted attempts.
    wasted: Cell<u64>,
    /// Whether the running attempt met another's exclusive stage.
    hit_exclusive: Cell<bool>,
    /// Read-set and write-set entries already in the footprint.
    pub(crate) counted_reads: Cell<usize>,
    pub(crate) counted_writes: Cell<usize>,
    /// The trigger of the exclusive stage this worker holds.
    privileged: Cell<Option<Trigger>>,
}

impl AdaptiveTx {
    /// The trigger of the exclusive stage this worker holds, if any.
    pub(crate) fn privileged(&self) -> Option<Trigger> {
        self.privileged.get()
    }

    /// Whether the running attempt was begun read-only.
    pub(crate) fn read_only(&self) -> bool {
        self.read_only.get()
    }
}

/// Adds to a counter only its worker writes (no locked add).
#[inline]
fn add(counter: &AtomicU64, amount: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(amount), Ordering::Relaxed);
}

impl Adaptive {
    /// The state for `workers` workers whose Met-Cache regions hold
    /// `region_bytes` each.
    pub(crate) fn new(options: &crate::options::ZenPlusOptions, workers: usize, region_bytes: u64) -> Self {
        Self {
            owner: CachePadded::new(AtomicUsize::new(0)),
            stages: (0..workers).map(|_| CachePadded::new(AtomicU8::new(IDLE))).collect(),
            accessed: (0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            space_low: AtomicBool::new(false),
            alpha_bytes: region_bytes * u64::from(options.alpha_percent) / 100,
            beta_percent: options.beta_percent,
            gamma_tuples: options.gamma_tuples,
            region_bytes,
            counters: (0..workers).map(|_| CachePadded::new(AdaptiveCounters::default())).collect(),
            maintenance_runs: AtomicU64::new(0),
            maintenance_slots: AtomicU64::new(0),
            maintenance_versions: AtomicU64::new(0),
        }
    }

    /// The worker holding G-EX, if any.
    pub(crate) fn owner(&self) -> Option<usize> {
        self.owner.load(Ordering::SeqCst).checked_sub(1)
    }

    /// Starts attempt `attempt` of a transaction of worker `id`: a new
    /// transaction forgets the wasted work of the previous one; unless this
    /// worker holds G-EX, waits until no exclusive stage runs, then marks
    /// the worker running. The caller ended a previous exclusive stage of
    /// its own before a new transaction (`attempt == 1`).
    pub(crate) fn begin(
        &self,
        id: usize,
        tx: &AdaptiveTx,
        read_only: bool,
        attempt: u32,
        closed: &AtomicBool,
        before_waiting: impl FnOnce(),
    ) {
        debug_assert!(attempt > 1 || tx.privileged.get().is_none());
        if attempt <= 1 {
            tx.wasted.set(0);
        }
        tx.read_only.set(read_only);
        tx.accesses.set(0);
        tx.footprint.set(0);
        tx.counted_reads.set(0);
        tx.counted_writes.set(0);
        tx.hit_exclusive.set(false);
        self.accessed[id].store(0, Ordering::Relaxed);
        if tx.privileged.get().is_some() {
            self.stages[id].store(RUNNING, Ordering::SeqCst);
            return;
        }
        let mut waited = false;
        let mut before_waiting = Some(before_waiting);
        loop {
            if self.owner.load(Ordering::SeqCst) != 0 {
                waited = true;
                if let Some(leave) = before_waiting.take() {
                    // A waiting worker must not hold back the stage's
                    // reclamation (it may still be announced from an
                    // aborted attempt).
                    leave();
                }
                let mut spins = 0u32;
                while self.owner.load(Ordering::SeqCst) != 0 && !closed.load(Ordering::Relaxed) {
                    backoff(&mut spins);
                }
            }
            // IMPORTANT: running first, then the flag (module docs, step 2).
            self.stages[id].store(RUNNING, Ordering::SeqCst);
            if self.owner.load(Ordering::SeqCst) == 0 || closed.load(Ordering::Relaxed) {
                break;
            }
            self.stages[id].store(IDLE, Ordering::SeqCst);
        }
        if waited {
            add(&self.counters[id].waits, 1);
        }
    }

    /// The attempt of worker `id` ended (committed or aborted): an aborted
    /// attempt's accesses count as wasted work (unless an exclusive stage
    /// caused the abort), and the worker is idle again.
    pub(crate) fn end_attempt(&self, id: usize, tx: &AdaptiveTx, committed: bool) {
        if !committed && !tx.hit_exclusive.get() {
            tx.wasted.set(tx.wasted.get().saturating_add(tx.accesses.get()));
        }
        self.accessed[id].store(0, Ordering::Relaxed);
        self.stages[id].store(IDLE, Ordering::Release);
    }

    /// Aborts the attempt if another transaction runs exclusively.
    #[inline]
    pub(crate) fn check(&self, id: usize, tx: &AdaptiveTx) -> Result<(), AbortReason> {
        if tx.privileged.get().is_none() && self.owner.load(Ordering::Relaxed) != 0 {
            tx.hit_exclusive.set(true);
            add(&self.counters[id].aborts, 1);
            return Err(AbortReason::Exclusive);
        }
        Ok(())
    }

    /// One access by worker `id`'s transaction: aborts if another runs
    /// exclusively, and enters the exclusive stage when γ or β is passed
    /// (module docs).
    #[inline]
    pub(crate) fn on_access(&self, id: usize, tx: &AdaptiveTx) -> Result<(), AbortReason> {
        self.check(id, tx)?;
        let accesses = tx.accesses.get() + 1;
        tx.accesses.set(accesses);
        if tx.privileged.get().is_some() {
            return Ok(());
        }
        let wasted = tx.wasted.get();
        let trigger = if self.gamma_tuples > 0 && wasted > 0 && wasted.saturating_add(accesses) > self.gamma_tuples {
            Some(Trigger::Gamma)
        } else if accesses.is_multiple_of(CHECK_EVERY) {
            self.accessed[id].store(accesses, Ordering::Relaxed);
            (self.space_low.load(Ordering::Relaxed) && self.accesses_most(id, accesses)).then_some(Trigger::Beta)
        } else {
            None
        };
        match trigger {
            Some(trigger) => self.enter(id, tx, trigger),
            None => Ok(()),
        }
    }

    /// `bytes` of Met-Cache cost the transaction of worker `id` newly
    /// touched (rows read for the first time, new versions): α checks the
    /// footprint.
    #[inline]
    pub(crate) fn on_footprint(&self, id: usize, tx: &AdaptiveTx, bytes: u64) -> Result<(), AbortReason> {
        self.check(id, tx)?;
        let footprint = tx.footprint.get() + bytes;
        tx.footprint.set(footprint);
        if tx.privileged.get().is_none() && self.alpha_bytes > 0 && !tx.read_only.get() && footprint > self.alpha_bytes
        {
            return self.enter(id, tx, Trigger::Alpha);
        }
        Ok(())
    }

    /// Whether no other running transaction accessed more than `accesses`.
    fn accesses_most(&self, id: usize, accesses: u64) -> bool {
        self.accessed.iter().enumerate().all(|(other, count)| other == id || count.load(Ordering::Relaxed) <= accesses)
    }

    /// Steps 1 and 2 of the exclusive stage for worker `id`.
    fn enter(&self, id: usize, tx: &AdaptiveTx, trigger: Trigger) -> Result<(), AbortReason> {
        if self.owner.compare_exchange(0, id + 1, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            // Another transaction is privileged: this one yields to it.
            tx.hit_exclusive.set(true);
            add(&self.counters[id].aborts, 1);
            return Err(AbortReason::Exclusive);
        }
        tx.privileged.set(Some(trigger));
        let counters = &self.counters[id];
        add(
            match trigger {
                Trigger::Alpha => &counters.entries_alpha,
                Trigger::Beta => &counters.entries_beta,
                Trigger::Gamma => &counters.entries_gamma,
            },
            1,
        );
        // IMPORTANT: the flag is set (SeqCst) before the stages are read.
        for (other, stage) in self.stages.iter().enumerate() {
            if other == id {
                continue;
            }
            let mut spins = 0u32;
            while stage.load(Ordering::SeqCst) != IDLE {
                backoff(&mut spins);
            }
        }
        Ok(())
    }

    /// Step 5: worker `id` releases G-EX (after its maintenance).
    pub(crate) fn release(&self, id: usize, tx: &AdaptiveTx) {
        debug_assert_eq!(self.owner(), Some(id));
        tx.privileged.set(None);
        self.owner.store(0, Ordering::SeqCst);
    }

    /// The ticker's measurement for β: `free_bytes` of `total_bytes` free,
    /// `garbage` superseded tuples waiting.
    pub(crate) fn refresh_space(&self, free_bytes: u64, total_bytes: u64, garbage: u64) {
        let low = self.beta_percent > 0
            && garbage > 0
            && u128::from(free_bytes) * 100 < u128::from(total_bytes) * u128::from(self.beta_percent);
        self.space_low.store(low, Ordering::Relaxed);
    }

    /// Whether β's space condition holds now.
    #[cfg(test)]
    pub(crate) fn space_low(&self) -> bool {
        self.space_low.load(Ordering::Relaxed)
    }

    /// Counts a read-only attempt at the oldest snapshot.
    pub(crate) fn count_snapshot_attempt(&self, id: usize) {
        add(&self.counters[id].snapshot_attempts, 1);
    }

    /// Counts a snapshot read served from the heap without caching.
    #[inline]
    pub(crate) fn count_snapshot_nvm_read(&self, id: usize) {
        add(&self.counters[id].snapshot_nvm_reads, 1);
    }

    /// Counts tuples written to the heap before their commit.
    pub(crate) fn count_direct_writes(&self, id: usize, tuples: u64) {
        add(&self.counters[id].direct_nvm_writes, tuples);
    }

    /// Counts such tuples erased again.
    pub(crate) fn count_direct_erased(&self, id: usize, tuples: u64) {
        add(&self.counters[id].direct_nvm_erased, tuples);
    }

    /// The counters for `EngineStats::engine_counters`.
    pub(crate) fn stats(&self) -> Vec<(&'static str, u64)> {
        let sum = |field: fn(&AdaptiveCounters) -> &AtomicU64| -> u64 {
            self.counters.iter().map(|counters| field(counters).load(Ordering::Relaxed)).sum()
        };
        vec![
            ("exclusive_entries_alpha", sum(|c| &c.entries_alpha)),
            ("exclusive_entries_beta", sum(|c| &c.entries_beta)),
            ("exclusive_entries_gamma", sum(|c| &c.entries_gamma)),
            ("exclusive_aborts", sum(|c| &c.aborts)),
            ("exclusive_waits", sum(|c| &c.waits)),
            ("exclusive_maintenance_runs", self.maintenance_runs.load(Ordering::Relaxed)),
            ("exclusive_maintenance_slots", self.maintenance_slots.load(Ordering::Relaxed)),
            ("exclusive_maintenance_versions", self.maintenance_versions.load(Ordering::Relaxed)),
            ("snapshot_read_only_attempts", sum(|c| &c.snapshot_attempts)),
            ("snapshot_nvm_reads", sum(|c| &c.snapshot_nvm_reads)),
            ("direct_nvm_writes", sum(|c| &c.direct_nvm_writes)),
            ("direct_nvm_writes_erased", sum(|c| &c.direct_nvm_erased)),
        ]
    }
}

/// Waits a little longer each time: spins, then yields, then sleeps (an
/// exclusive stage may run for seconds).
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    match *spins {
        0..=64 => std::hint::spin_loop(),
        65..=256 => std::thread::yield_now(),
        _ => std::thread::sleep(Duration::from_micros(50)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ZenPlusOptions;

    fn adaptive(workers: usize, region_bytes: u64, options: ZenPlusOptions) -> Adaptive {
        Adaptive::new(&options, workers, region_bytes)
    }

    /// α counts the Met-Cache bytes a writing transaction's accesses
    /// occupy; a read-only transaction is exempt, and a zero budget turns
    /// it off.
    #[test]
    fn alpha_triggers_past_its_share_of_the_region() {
        let closed = AtomicBool::new(false);
        let options = ZenPlusOptions { alpha_percent: 50, ..ZenPlusOptions::default() };
        let state = adaptive(1, 1000, options.clone());
        let tx = AdaptiveTx::default();
        state.begin(0, &tx, false, 1, &closed, || {});
        for _ in 0..5 {
            state.on_footprint(0, &tx, 100).unwrap();
        }
        assert_eq!(tx.privileged(), None, "500 bytes is not past 50 % of 1000");
        state.on_footprint(0, &tx, 100).unwrap();
        assert_eq!(tx.privileged(), Some(Trigger::Alpha));
        assert_eq!(state.owner(), Some(0));
        state.release(0, &tx);
        state.end_attempt(0, &tx, true);

        state.begin(0, &tx, true, 1, &closed, || {});
        for _ in 0..20 {
            state.on_footprint(0, &tx, 100).unwrap();
        }
        assert_eq!(tx.privileged(), None, "read-only transactions are exempt from alpha");
        state.end_attempt(0, &tx, true);

        let off = adaptive(1, 0, options);
        off.begin(0, &tx, false, 1, &closed, || {});
        for _ in 0..20 {
            off.on_footprint(0, &tx, 100).unwrap();
        }
        assert_eq!(tx.privileged(), None, "no region, no alpha");
    }

    /// γ adds the accesses of the aborted attempts of one transaction,
    /// not of earlier transactions, and not of aborts an exclusive stage
    /// caused; a first attempt never passes it.
    #[test]
    fn gamma_counts_the_wasted_work_of_retries() {
        let closed = AtomicBool::new(false);
        let options = ZenPlusOptions { gamma_tuples: 25, ..ZenPlusOptions::default() };
        let state = adaptive(2, 0, options);
        let tx = AdaptiveTx::default();
        state.begin(0, &tx, false, 1, &closed, || {});
        for _ in 0..40 {
            state.on_access(0, &tx).unwrap();
        }
        assert_eq!(tx.privileged(), None, "nothing wasted yet");
        state.end_attempt(0, &tx, true);
        for attempt in 1..=2 {
            state.begin(0, &tx, false, attempt, &closed, || {});
            for _ in 0..10 {
                state.on_access(0, &tx).unwrap();
            }
            state.end_attempt(0, &tx, false);
        }
        // A new transaction starts from zero.
        state.begin(0, &tx, false, 1, &closed, || {});
        for _ in 0..10 {
            state.on_access(0, &tx).unwrap();
        }
        state.end_attempt(0, &tx, false);
        state.begin(0, &tx, false, 2, &closed, || {});
        for _ in 0..15 {
            state.on_access(0, &tx).unwrap();
        }
        assert_eq!(tx.privileged(), None, "10 wasted + 15 is not past 25");
        state.on_access(0, &tx).unwrap();
        assert_eq!(tx.privileged(), Some(Trigger::Gamma));
        // Worker 1 meets the stage: its abort is not wasted work.
        let other = AdaptiveTx::default();
        state.stages[1].store(RUNNING, Ordering::SeqCst);
        assert_eq!(state.on_access(1, &other), Err(AbortReason::Exclusive));
        state.end_attempt(1, &other, false);
        assert_eq!(other.wasted.get(), 0);
        state.release(0, &tx);
        let counters = state.stats();
        assert!(counters.contains(&("exclusive_entries_gamma", 1)) && counters.contains(&("exclusive_aborts", 1)));
    }

    /// β needs low space and garbage, and picks the transaction that
    /// accessed the most.
    #[test]
    fn beta_picks_the_largest_transaction_when_space_is_low() {
        let closed = AtomicBool::new(false);
        let options = ZenPlusOptions { beta_percent: 10, ..ZenPlusOptions::default() };
        let state = adaptive(2, 0, options);
        state.refresh_space(5, 100, 0);
        assert!(!state.space_low(), "no garbage: reclamation cannot help");
        state.refresh_space(50, 100, 7);
        assert!(!state.space_low());
        state.refresh_space(5, 100, 7);
        assert!(state.space_low());
        let (small, large) = (AdaptiveTx::default(), AdaptiveTx::default());
        state.begin(0, &small, false, 1, &closed, || {});
        state.begin(1, &large, false, 1, &closed, || {});
        // The larger transaction has published more accesses.
        state.accessed[1].store(10 * CHECK_EVERY, Ordering::Relaxed);
        for _ in 0..CHECK_EVERY {
            state.on_access(0, &small).unwrap();
        }
        assert_eq!(small.privileged(), None, "not the largest");
        // Worker 0 ends, so worker 1's stage is entered without waiting.
        state.end_attempt(0, &small, true);
        for _ in 0..CHECK_EVERY {
            state.on_access(1, &large).unwrap();
        }
        assert_eq!(large.privileged(), Some(Trigger::Beta));
    }
}
