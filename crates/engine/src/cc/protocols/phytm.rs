//! PHyTM's hybrid concurrency control (phytm.txt §4) and its baselines
//! PHTM and 2PL, the schemes of the PHyTM family's engines
//! ([`HybridScheme`]: `phytm`, `phytm-paper`, `phtm`, `2pl`, chosen by the
//! engine, not by `cc=`): which *path* each attempt of a transaction takes,
//! the engine-wide state the paths share (`stmLock`, `numSTMWriteback`,
//! PHTM's global lock), and each path's rule for a read and a write (the
//! [`Phytm`] protocol). The commit, with its hardware region, is
//! `engines::dram`'s; it asks the paths through `Concurrency::hybrid` and
//! the transaction's path state.
//!
//! # Paths
//!
//! Every path writes through the shared lock table (`cc::lock_table`,
//! no-wait try-locks, held to the end of the attempt: the paper's per-address
//! locks), so no two transactions ever log the same row at once.
//!
//! * **Fast HTM**: reads are uninstrumented; the attempt is subscribed to
//!   `numSTMWriteback` (it aborts if an STM write-back phase is running at
//!   a read or began since the attempt began).
//! * **Slow HTM**: a read checks that the row's lock is not write-held by
//!   another transaction.
//! * **STM-R / STM-W**: 2PL with try-locks in encounter order; reads take a
//!   shared lock; `stmLock` is held shared (STM-R) or, after the STM attempt
//!   budget, exclusively (STM-W). The commit's install is the write-back
//!   phase, counted in `numSTMWriteback`.
//! * **PHTM's global lock**: PHTM's software path takes the global lock
//!   exclusively and runs alone; its hardware transactions are subscribed to
//!   it (they abort when it was taken during the attempt, and commit holding
//!   it shared, so no hardware commit overlaps a software transaction).
//!
//! # What "hardware" means here
//!
//! A hardware attempt's body is tracked in software: its reads are
//! recorded and validated at commit like Silo's, which is what the cache
//! coherence protocol does for a real hardware transaction. Its commit
//! (validation and install) is one attempt of the engine's
//! [`pmtx_htm::Htm`] region API ([`Htm::attempt_hardware`]): a real `xbegin`
//! region under `rtm`, an attempt with injected aborts under `sim` (at the
//! configured rate, plus a capacity abort when the attempt's footprint
//! exceeds the simulated capacity, checked at every access so an
//! oversized transaction aborts early as on hardware). With `htm=none`
//! there is no hardware: `phytm` and `2pl` run their STM path and `phtm`
//! its global-lock path.
//!
//! Explained in docs/engines/phytm.md.

use crate::cc::lock_table::{Conflict, HeldLocks, LockTable};
use crate::cc::protocols::Protocol;
use crate::cc::tx_sets::TxSets;
use crate::storage::request::ScanRequest;
use crate::error::{AbortReason, DbError, DbResult};
use crate::schema::TableId;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use crossbeam_utils::CachePadded;
use pmtx_htm::{Htm, HtmBackendKind, HtmConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Cache lines an access adds to a hardware attempt's footprint: the
/// index slot, the row's header and its value.
pub(crate) const LINES_PER_ACCESS: u32 = 3;

/// Failed attempts on Fast HTM before a transaction moves to Slow HTM.
pub const FAST_HTM_ATTEMPTS: u32 = 4;
/// Failed attempts on Slow HTM before a transaction moves to the STM path.
pub const SLOW_HTM_ATTEMPTS: u32 = 4;
/// Failed STM-R attempts before a transaction takes `stmLock` as writer.
pub const STM_ATTEMPTS: u32 = 16;
/// Failed hardware attempts of PHTM before it takes the global lock.
pub const PHTM_HTM_ATTEMPTS: u32 = 8;

/// The path one attempt runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxPath {
    /// Hardware, uninstrumented reads, subscribed to the write-back count.
    FastHtm,
    /// Hardware, reads check the row's lock.
    SlowHtm,
    /// Software 2PL holding `stmLock` shared.
    Stm,
    /// Software 2PL holding `stmLock` exclusively (after the STM budget).
    StmExclusive,
    /// PHTM's software path: the global lock, alone.
    GlobalLock,
}

impl TxPath {
    /// Every path, in report order.
    pub const ALL: [TxPath; 5] =
        [TxPath::FastHtm, TxPath::SlowHtm, TxPath::Stm, TxPath::StmExclusive, TxPath::GlobalLock];

    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            TxPath::FastHtm => "fast_htm",
            TxPath::SlowHtm => "slow_htm",
            TxPath::Stm => "stm",
            TxPath::StmExclusive => "stm_exclusive",
            TxPath::GlobalLock => "global_lock",
        }
    }

    /// Whether the attempt is a hardware transaction.
    pub fn is_hardware(self) -> bool {
        matches!(self, TxPath::FastHtm | TxPath::SlowHtm)
    }

    /// Whether reads take shared locks (so the read set needs no
    /// validation).
    pub fn locks_reads(self) -> bool {
        matches!(self, TxPath::Stm | TxPath::StmExclusive)
    }

    /// Whether the commit's install is an STM write-back phase.
    pub fn writes_back(self) -> bool {
        matches!(self, TxPath::Stm | TxPath::StmExclusive)
    }
}

/// Which hybrid scheme an engine of the PHyTM family runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HybridScheme {
    /// PHyTM: Fast HTM, Slow HTM, then STM-R and STM-W.
    Phytm,
    /// PHyTM as the paper emulates it: hardware commits are visible before
    /// their log is durable.
    PhytmPaper,
    /// PHTM: hardware, then the global lock.
    Phtm,
    /// 2PL: the STM path alone, no hardware.
    TwoPl,
}

/// What a hybrid scheme is configured with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HybridConfig {
    pub(crate) scheme: HybridScheme,
    /// The hardware transactions (`htm=`).
    pub(crate) htm: HtmConfig,
    /// The broken variant of the crash harness's self-test, if any.
    pub(crate) faults: crate::fault::Faults,
}

/// The paths' logic: `phytm-paper` runs `phytm`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Phytm,
    Phtm,
    TwoPl,
}

/// Longest wait for `stmLock` (or PHTM's global lock) at begin, as the lock
/// table bounds its waits: a worker that interleaves two transactions could
/// otherwise wait for itself.
pub(crate) const MAX_PATH_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// `stmLock` (and PHTM's global lock): a writer bit over a reader count.
const WRITER: u64 = 1 << 63;

/// The shared state of a hybrid engine.
pub(crate) struct Hybrid {
    scheme: Scheme,
    /// Whether hardware commits are visible before their log is durable
    /// (`phytm-paper`).
    visible_before_log: bool,
    htm: Option<Htm>,
    capacity_lines: u32,
    stm_lock: CachePadded<AtomicU64>,
    /// `numSTMWriteback`.
    writebacks: CachePadded<AtomicU64>,
    /// Write-back phases begun: a Fast HTM attempt's subscription.
    writeback_generation: CachePadded<AtomicU64>,
    /// PHTM: times the global lock was taken.
    global_generation: CachePadded<AtomicU64>,
    commits: [CachePadded<AtomicU64>; TxPath::ALL.len()],
    faults: crate::fault::Faults,
}

/// One worker's path state across the attempts of a transaction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PathState {
    pub(crate) path: TxPath,
    failed_on_path: u32,
    /// A hardware attempt of this transaction overflowed the capacity
    /// (set by whoever aborts it for that).
    pub(crate) capacity: bool,
    /// The write-back generation (Fast HTM) or global-lock generation
    /// (PHTM hardware) when the attempt began.
    pub(crate) generation: u64,
    /// `stmLock` held by this attempt: `Some(exclusive)`.
    held: Option<bool>,
    /// The path's lock could not be taken in [`MAX_PATH_WAIT`]: the
    /// attempt aborts at its first access or commit.
    pub(crate) timed_out: bool,
}

impl Default for PathState {
    fn default() -> Self {
        Self { path: TxPath::Stm, failed_on_path: 0, capacity: false, generation: 0, held: None, timed_out: false }
    }
}

impl Hybrid {
    /// The state of the scheme `config` asks for.
    pub(crate) fn new(config: HybridConfig) -> DbResult<Self> {
        let scheme = match config.scheme {
            HybridScheme::Phytm | HybridScheme::PhytmPaper => Scheme::Phytm,
            HybridScheme::Phtm => Scheme::Phtm,
            HybridScheme::TwoPl => Scheme::TwoPl,
        };
        let htm = match (scheme, config.htm.backend) {
            (Scheme::TwoPl, _) | (_, HtmBackendKind::None) => None,
            _ => Some(
                Htm::new(config.htm)
                    .map_err(|error| DbError::InvalidConfig(format!("htm {}: {error}", config.htm.backend)))?,
            ),
        };
        Ok(Self {
            scheme,
            visible_before_log: config.scheme == HybridScheme::PhytmPaper,
            capacity_lines: match config.htm.backend {
                HtmBackendKind::Sim => config.htm.sim.capacity_footprint_lines,
                _ => u32::MAX,
            },
            htm,
            stm_lock: Default::default(),
            writebacks: Default::default(),
            writeback_generation: Default::default(),
            global_generation: Default::default(),
            commits: Default::default(),
            faults: config.faults,
        })
    }

    /// The region executor of hardware commits.
    pub(crate) fn htm(&self) -> Option<&Htm> {
        self.htm.as_ref()
    }

    /// Whether a hardware commit on `path` makes its writes visible before
    /// its log is durable (`phytm-paper`).
    pub(crate) fn visible_before_log(&self, path: TxPath) -> bool {
        self.visible_before_log && path.is_hardware()
    }

    /// The broken variant of the crash harness's self-test: commits unlock
    /// and leave their versions even before their log is durable.
    pub(crate) fn unlocks_before_log(&self) -> bool {
        self.faults.unlock_before_log()
    }

    /// Whether `lines` of footprint overflow the (simulated) capacity.
    #[inline]
    pub(crate) fn over_capacity(&self, lines: u32) -> bool {
        lines > self.capacity_lines
    }

    /// Chooses the path of attempt `attempt` (1 = first) after the previous
    /// attempt on `state`'s path aborted (a capacity abort is in
    /// `state.capacity`), and enters it (taking `stmLock` where the path
    /// needs it).
    pub(crate) fn begin(&self, state: &mut PathState, attempt: u32) {
        debug_assert!(state.held.is_none(), "stmLock is released at the end of every attempt");
        let hardware = self.htm.is_some();
        if attempt <= 1 {
            state.failed_on_path = 0;
            state.capacity = false;
            state.path = match self.scheme {
                Scheme::Phytm if hardware => TxPath::FastHtm,
                Scheme::Phtm if hardware => TxPath::FastHtm,
                Scheme::Phtm => TxPath::GlobalLock,
                Scheme::Phytm | Scheme::TwoPl => TxPath::Stm,
            };
        } else {
            state.failed_on_path += 1;
            let next = match (self.scheme, state.path) {
                // A capacity abort recurs on every hardware path: go to software.
                (Scheme::Phytm, TxPath::FastHtm | TxPath::SlowHtm) if state.capacity => TxPath::Stm,
                (Scheme::Phytm, TxPath::FastHtm) if state.failed_on_path >= FAST_HTM_ATTEMPTS => TxPath::SlowHtm,
                (Scheme::Phytm, TxPath::SlowHtm) if state.failed_on_path >= SLOW_HTM_ATTEMPTS => TxPath::Stm,
                (Scheme::Phtm, TxPath::FastHtm) if state.capacity || state.failed_on_path >= PHTM_HTM_ATTEMPTS => {
                    TxPath::GlobalLock
                }
                (_, TxPath::Stm) if state.failed_on_path >= STM_ATTEMPTS => TxPath::StmExclusive,
                (_, path) => path,
            };
            if next != state.path {
                state.path = next;
                state.failed_on_path = 0;
            }
        }
        state.timed_out = false;
        match state.path {
            TxPath::FastHtm => {
                state.generation = match self.scheme {
                    Scheme::Phtm => self.global_generation.load(Ordering::Acquire),
                    _ => self.writeback_generation.load(Ordering::Acquire),
                }
            }
            TxPath::SlowHtm => {}
            TxPath::Stm => {
                state.timed_out = !self.lock_shared();
                state.held = (!state.timed_out).then_some(false);
            }
            TxPath::StmExclusive | TxPath::GlobalLock => {
                state.timed_out = !self.lock_exclusive();
                state.held = (!state.timed_out).then_some(true);
                if state.path == TxPath::GlobalLock && !state.timed_out {
                    self.global_generation.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// Fails an attempt whose path lock was not taken.
    #[inline]
    pub(crate) fn check_entered(state: &PathState) -> Result<(), AbortReason> {
        if state.timed_out {
            Err(AbortReason::LockTimeout)
        } else {
            Ok(())
        }
    }

    /// Ends the attempt: releases `stmLock` if it holds it.
    pub(crate) fn end(&self, state: &mut PathState) {
        match state.held.take() {
            Some(true) => self.stm_lock.store(0, Ordering::Release),
            Some(false) => {
                self.stm_lock.fetch_sub(1, Ordering::Release);
            }
            None => {}
        }
    }

    /// The check of a Fast HTM read (the subscription to
    /// `numSTMWriteback`): a write-back phase running or begun since the
    /// attempt began would have aborted the hardware transaction.
    #[inline]
    pub(crate) fn check_read(&self, state: &PathState) -> Result<(), AbortReason> {
        if state.path == TxPath::FastHtm && self.scheme == Scheme::Phytm {
            if self.writebacks.load(Ordering::Acquire) != 0
                || self.writeback_generation.load(Ordering::Acquire) != state.generation
            {
                return Err(AbortReason::Region);
            }
        } else if state.path == TxPath::FastHtm && self.stm_lock.load(Ordering::Acquire) & WRITER != 0 {
            // PHTM: the global lock is held.
            return Err(AbortReason::Region);
        }
        Ok(())
    }

    /// Enters the commit of a hardware attempt: the subscription's last
    /// check. PHTM's hardware commit holds the global lock shared until
    /// [`Hybrid::leave_hardware_commit`], so no software transaction runs
    /// while it installs and logs.
    pub(crate) fn enter_hardware_commit(&self, state: &mut PathState) -> Result<(), AbortReason> {
        debug_assert!(state.path.is_hardware());
        match self.scheme {
            Scheme::Phtm => {
                if !self.try_lock_shared() {
                    return Err(AbortReason::Region);
                }
                state.held = Some(false);
                if self.global_generation.load(Ordering::Acquire) != state.generation {
                    return Err(AbortReason::Region);
                }
                Ok(())
            }
            _ => self.check_read(state),
        }
    }

    /// Begins an STM write-back phase (`numSTMWriteback` up).
    pub(crate) fn begin_writeback(&self) {
        self.writeback_generation.fetch_add(1, Ordering::AcqRel);
        self.writebacks.fetch_add(1, Ordering::AcqRel);
    }

    /// Ends an STM write-back phase.
    pub(crate) fn end_writeback(&self) {
        let before = self.writebacks.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0);
    }

    /// Counts a commit on `path`.
    pub(crate) fn committed(&self, path: TxPath) {
        self.commits[path as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Commits by path since open.
    pub(crate) fn path_commits(&self) -> Vec<(&'static str, u64)> {
        TxPath::ALL.iter().map(|path| (path.name(), self.commits[*path as usize].load(Ordering::Relaxed))).collect()
    }

    /// Takes `stmLock` shared; false after [`MAX_PATH_WAIT`].
    fn lock_shared(&self) -> bool {
        let mut wait = Wait::default();
        while !self.try_lock_shared() {
            if !wait.again() {
                return false;
            }
        }
        true
    }

    fn try_lock_shared(&self) -> bool {
        let current = self.stm_lock.load(Ordering::Acquire);
        current & WRITER == 0
            && self.stm_lock.compare_exchange(current, current + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Takes `stmLock` exclusively; false (and nothing held) after
    /// [`MAX_PATH_WAIT`].
    fn lock_exclusive(&self) -> bool {
        let mut wait = Wait::default();
        // Take the writer bit first, so new readers stop arriving, then
        // wait for the readers to drain.
        loop {
            let current = self.stm_lock.load(Ordering::Acquire);
            if current & WRITER == 0
                && self
                    .stm_lock
                    .compare_exchange(current, current | WRITER, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break;
            }
            if !wait.again() {
                return false;
            }
        }
        while self.stm_lock.load(Ordering::Acquire) != WRITER {
            if !wait.again() {
                self.stm_lock.fetch_and(!WRITER, Ordering::AcqRel);
                return false;
            }
        }
        true
    }
}

/// The state the workers of a PHyTM-family engine share: the paths' state
/// and the lock table every path writes through.
pub(crate) struct Shared {
    pub(crate) hybrid: Hybrid,
    locks: LockTable,
}

/// A worker's state under a hybrid scheme: its path and its locks.
pub(crate) struct Phytm {
    shared: Arc<Shared>,
    /// Locks held by the attempt.
    held: HeldLocks,
    /// The path of this attempt.
    pub(crate) path: PathState,
}

impl Phytm {
    /// The shared state of `hybrid`'s scheme for `workers` workers: its
    /// paths write through a no-wait lock table.
    pub(crate) fn shared(hybrid: Hybrid, workers: usize) -> Arc<Shared> {
        Arc::new(Shared { hybrid, locks: LockTable::new(Conflict::NoWait, workers) })
    }

    /// The rule for an access to the row at `address` after `accesses`
    /// accesses: every write takes the row's lock exclusively; a read
    /// takes it shared on the STM path, checks it on Slow HTM, and checks
    /// the write-back subscription on Fast HTM; a hardware attempt aborts
    /// once its footprint overflows the capacity.
    #[cold]
    fn access(&mut self, accesses: usize, address: usize, write: bool) -> Result<(), AbortReason> {
        let (hybrid, locks) = (&self.shared.hybrid, &self.shared.locks);
        Hybrid::check_entered(&self.path)?;
        let path = self.path.path;
        if path.is_hardware() {
            let lines = (accesses + 1) as u64 * u64::from(LINES_PER_ACCESS);
            if hybrid.over_capacity(u32::try_from(lines).unwrap_or(u32::MAX)) {
                self.path.capacity = true;
                return Err(AbortReason::HtmCapacity);
            }
        }
        if write {
            return locks.acquire(&mut self.held, address, true);
        }
        match path {
            TxPath::Stm | TxPath::StmExclusive => locks.acquire(&mut self.held, address, false),
            TxPath::SlowHtm if locks.is_exclusive_by_other(&self.held, address) => Err(AbortReason::Region),
            TxPath::FastHtm => hybrid.check_read(&self.path),
            TxPath::SlowHtm | TxPath::GlobalLock => Ok(()),
        }
    }
}

impl Protocol for Phytm {
    type Shared = Arc<Shared>;

    fn worker(shared: &Self::Shared, worker: usize) -> Self {
        Self { shared: Arc::clone(shared), held: HeldLocks::new(worker), path: PathState::default() }
    }

    fn may_unlink(shared: &Self::Shared, address: usize, _tid: u64) -> bool {
        !shared.locks.is_held(address)
    }

    fn begin(&mut self, attempt: u32, _epoch: u64) {
        self.shared.locks.begin(&self.held, attempt <= 1);
        self.shared.hybrid.begin(&mut self.path, attempt);
    }

    fn abort(&mut self) {
        self.shared.locks.release_all(&mut self.held);
        self.shared.hybrid.end(&mut self.path);
    }

    fn release_locks(&mut self) {
        self.shared.locks.release_all(&mut self.held);
    }

    /// An attempt that could not take its path's lock touches nothing (not
    /// even an index placeholder).
    #[inline]
    fn access_key(&mut self, _table: TableId, _prefix: Option<usize>, _key: &[u8]) -> Result<(), AbortReason> {
        Hybrid::check_entered(&self.path)
    }

    #[inline]
    fn access_range(&mut self, _prefix: Option<usize>, _request: &ScanRequest<'_>) -> Result<(), AbortReason> {
        Hybrid::check_entered(&self.path)
    }

    #[inline]
    fn read(&mut self, accesses: usize, address: usize) -> Result<(), AbortReason> {
        self.access(accesses, address, false)
    }

    #[inline]
    fn write(&mut self, accesses: usize, address: usize, _word: u64) -> Result<(), AbortReason> {
        self.access(accesses, address, true)
    }

    /// Silo's validation; the STM path's reads are share-locked, so only
    /// its node set needs checking.
    fn validate_reads<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        if !self.path.path.locks_reads() {
            tx.validate_reads()?;
        }
        tx.validate_leaves(tables)
    }
}

/// A bounded spin-then-yield wait.
#[derive(Default)]
struct Wait {
    spins: u32,
    since: Option<std::time::Instant>,
}

impl Wait {
    /// Backs off once; false once [`MAX_PATH_WAIT`] has passed.
    fn again(&mut self) -> bool {
        self.spins += 1;
        if self.spins < 64 {
            std::hint::spin_loop();
            return true;
        }
        std::thread::yield_now();
        self.since.get_or_insert_with(std::time::Instant::now).elapsed() < MAX_PATH_WAIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hybrid(scheme: HybridScheme, htm: pmtx_htm::HtmConfig) -> Hybrid {
        Hybrid::new(HybridConfig { scheme, htm, faults: Default::default() }).expect("valid")
    }

    fn walk(hybrid: &Hybrid, aborts: &[AbortReason]) -> Vec<TxPath> {
        let mut state = PathState::default();
        let mut paths = Vec::new();
        for attempt in 1..=aborts.len() as u32 + 1 {
            hybrid.begin(&mut state, attempt);
            paths.push(state.path);
            hybrid.end(&mut state);
            state.capacity |= aborts.get(attempt as usize - 1) == Some(&AbortReason::HtmCapacity);
        }
        paths
    }

    #[test]
    fn phytm_moves_from_fast_to_slow_to_stm_to_exclusive() {
        let h = hybrid(HybridScheme::Phytm, pmtx_htm::HtmConfig::sim(1, 0));
        let conflicts = vec![AbortReason::Region; 40];
        let paths = walk(&h, &conflicts);
        let fast = FAST_HTM_ATTEMPTS as usize;
        let slow = SLOW_HTM_ATTEMPTS as usize;
        let stm = STM_ATTEMPTS as usize;
        assert!(paths[..fast].iter().all(|p| *p == TxPath::FastHtm), "{paths:?}");
        assert!(paths[fast..fast + slow].iter().all(|p| *p == TxPath::SlowHtm), "{paths:?}");
        assert!(paths[fast + slow..fast + slow + stm].iter().all(|p| *p == TxPath::Stm), "{paths:?}");
        assert_eq!(paths[fast + slow + stm], TxPath::StmExclusive);
        // A capacity abort skips the rest of the hardware budget.
        assert_eq!(walk(&h, &[AbortReason::HtmCapacity]), vec![TxPath::FastHtm, TxPath::Stm]);
    }

    #[test]
    fn without_hardware_each_engine_takes_its_software_path() {
        let none = pmtx_htm::HtmConfig::software();
        assert_eq!(walk(&hybrid(HybridScheme::Phytm, none), &[]), vec![TxPath::Stm]);
        assert_eq!(walk(&hybrid(HybridScheme::TwoPl, pmtx_htm::HtmConfig::sim(1, 0)), &[]), vec![TxPath::Stm]);
        assert_eq!(walk(&hybrid(HybridScheme::Phtm, none), &[]), vec![TxPath::GlobalLock]);
        let phtm = hybrid(HybridScheme::Phtm, pmtx_htm::HtmConfig::sim(1, 0));
        assert_eq!(walk(&phtm, &[AbortReason::HtmCapacity]), vec![TxPath::FastHtm, TxPath::GlobalLock]);
    }

    #[test]
    fn fast_htm_is_subscribed_to_write_backs_and_phtm_to_its_global_lock() {
        let h = hybrid(HybridScheme::Phytm, pmtx_htm::HtmConfig::sim(1, 0));
        let mut state = PathState::default();
        h.begin(&mut state, 1);
        assert_eq!(state.path, TxPath::FastHtm);
        assert!(h.check_read(&state).is_ok());
        h.begin_writeback();
        assert_eq!(h.check_read(&state), Err(AbortReason::Region), "a write-back is running");
        h.end_writeback();
        assert_eq!(h.check_read(&state), Err(AbortReason::Region), "one ran during the attempt");
        h.end(&mut state);

        let phtm = hybrid(HybridScheme::Phtm, pmtx_htm::HtmConfig::sim(1, 0));
        let mut hardware = PathState::default();
        phtm.begin(&mut hardware, 1);
        let mut software = PathState::default();
        phtm.begin(&mut software, 1);
        software.capacity = true;
        phtm.begin(&mut software, 2);
        assert_eq!(software.path, TxPath::GlobalLock);
        assert!(phtm.check_read(&hardware).is_err(), "the global lock is held");
        assert!(phtm.enter_hardware_commit(&mut hardware).is_err());
        phtm.end(&mut hardware);
        phtm.end(&mut software);
        let mut later = PathState::default();
        phtm.begin(&mut later, 1);
        assert!(phtm.enter_hardware_commit(&mut later).is_ok());
        phtm.end(&mut later);
        assert_eq!(phtm.stm_lock.load(Ordering::Relaxed), 0);
    }
}
