//! Regions: run a body atomically, in a hardware transaction or on the
//! fallback path, with the DBX/DrTM retry and fallback discipline.
//!
//! Contract of a region body (an `FnMut`, because it may run many times):
//!
//! * [`RegionPath::Hardware`]: the body runs inside an RTM transaction. All
//!   of its memory effects are discarded if the attempt aborts, including
//!   when it returns `Err`. It must not flush, fence, allocate or make system
//!   calls (those abort the transaction).
//! * [`RegionPath::Fallback`]: the body runs non-transactionally while
//!   holding the instance's fallback lock, which excludes every other region
//!   of this instance (hardware ones are subscribed to the lock and abort).
//!   Nothing is rolled back: if the body returns `Err` it must not have made
//!   visible effects (or must have undone them itself).
//!
//! The `sim` backend runs every body on the fallback path; it models an
//! aborted hardware attempt as an attempt with no effects, i.e. it decides
//! about an injected abort *before* running the body and then does not run
//! it. Injected aborts therefore only exercise the retry and fallback
//! accounting; they can never break atomicity.
//!
//! Regions must not nest (the fallback lock is not reentrant).

use std::fmt;
use std::sync::{Mutex, PoisonError};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{HtmBackendKind, HtmConfig, PER_MILLION};
use crate::detect::rtm_support;
use crate::error::HtmError;
use crate::lock::{FallbackLock, Holder};
use crate::rtm;
use crate::stats::{Counter, HtmStats};

/// Largest explicit abort code available to region bodies. Codes above it
/// are reserved by this crate (`0xfe`: retry requested, `0xff`: fallback lock
/// held); larger user codes are clamped to this value on every path, so all
/// backends report the same code.
pub const MAX_EXPLICIT_ABORT_CODE: u8 = 0xfd;
/// `xabort` code: the body asked for a retry ([`RegionAbort::Retry`]).
const RETRY_ABORT_CODE: u8 = 0xfe;
/// `xabort` code: the fallback lock was held right after `xbegin`.
const LOCK_HELD_ABORT_CODE: u8 = 0xff;

/// How the current execution of a region body runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionPath {
    /// Inside a hardware transaction: effects are discarded on abort.
    Hardware,
    /// Under the fallback lock, non-transactionally: effects are immediate.
    Fallback,
}

/// What a region body returns to abort the current execution.
#[must_use = "a region abort only takes effect when the body returns it as Err"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionAbort {
    /// Run the region again. In hardware this is an explicit abort that
    /// spends the conflict retry budget; on the fallback path the body is
    /// rerun after the lock is released (use it when the body waits for a
    /// condition outside the region, such as a record lock).
    Retry,
    /// Give up: the region returns [`ExplicitAbort`] with this code (clamped
    /// to [`MAX_EXPLICIT_ABORT_CODE`]) to its caller, on every path.
    Explicit(u8),
}

/// A region whose body returned [`RegionAbort::Explicit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("region aborted explicitly with code {code}")]
pub struct ExplicitAbort {
    /// The code given by the body (at most [`MAX_EXPLICIT_ABORT_CODE`]).
    pub code: u8,
}

impl ExplicitAbort {
    fn new(code: u8) -> Self {
        ExplicitAbort { code: clamp_code(code) }
    }
}

/// Why one attempt of [`Htm::attempt_hardware`] did not commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptAbort {
    /// A conflict, an interrupt, an injected abort or a retry the body
    /// asked for: another attempt may commit.
    Transient,
    /// The footprint did not fit the hardware (or the simulated capacity):
    /// another attempt of the same footprint will abort again.
    Capacity,
    /// The body returned [`RegionAbort::Explicit`].
    Explicit(ExplicitAbort),
}

impl AttemptAbort {
    fn from_reason(reason: AbortReason) -> Self {
        match reason {
            AbortReason::Capacity => AttemptAbort::Capacity,
            AbortReason::Explicit(code) => AttemptAbort::Explicit(ExplicitAbort::new(code)),
            AbortReason::Conflict | AbortReason::LockHeld | AbortReason::RetryRequested | AbortReason::Other => {
                AttemptAbort::Transient
            }
        }
    }
}

fn clamp_code(code: u8) -> u8 {
    code.min(MAX_EXPLICIT_ABORT_CODE)
}

/// What the body of a region is told about its execution.
#[derive(Debug)]
pub struct RegionContext {
    path: RegionPath,
    attempt: u32,
    simulated_hardware: bool,
}

impl RegionContext {
    /// The path this execution runs on; see the module contract.
    pub fn path(&self) -> RegionPath {
        self.path
    }

    /// True on [`RegionPath::Hardware`].
    pub fn is_hardware(&self) -> bool {
        self.path == RegionPath::Hardware
    }

    /// True when the `sim` backend runs this execution as a simulated
    /// hardware attempt. The path is still [`RegionPath::Fallback`]: the body
    /// runs under the fallback lock and nothing is rolled back.
    pub fn is_simulated_hardware(&self) -> bool {
        self.simulated_hardware
    }

    /// How many attempts of this region aborted before this execution.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// An explicit abort with `code` (clamped to
    /// [`MAX_EXPLICIT_ABORT_CODE`]); return it as `Err` from the body.
    pub fn abort_explicit(&self, code: u8) -> RegionAbort {
        RegionAbort::Explicit(clamp_code(code))
    }

    /// A retry request; return it as `Err` from the body.
    pub fn retry(&self) -> RegionAbort {
        RegionAbort::Retry
    }
}

/// Why a hardware (or simulated hardware) attempt aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AbortReason {
    Conflict,
    Capacity,
    LockHeld,
    RetryRequested,
    Explicit(u8),
    Other,
}

impl AbortReason {
    /// Decodes an RTM abort status (`eax` after an aborted `xbegin`).
    pub(crate) fn from_status(status: u32) -> Self {
        if status & rtm::STATUS_EXPLICIT != 0 {
            match rtm::status_code(status) {
                LOCK_HELD_ABORT_CODE => AbortReason::LockHeld,
                RETRY_ABORT_CODE => AbortReason::RetryRequested,
                code => AbortReason::Explicit(code),
            }
        } else if status & rtm::STATUS_CAPACITY != 0 {
            AbortReason::Capacity
        } else if status & (rtm::STATUS_CONFLICT | rtm::STATUS_RETRY) != 0 {
            AbortReason::Conflict
        } else {
            AbortReason::Other
        }
    }

    fn from_region_abort(abort: RegionAbort) -> Self {
        match abort {
            RegionAbort::Retry => AbortReason::RetryRequested,
            RegionAbort::Explicit(code) => AbortReason::Explicit(clamp_code(code)),
        }
    }

    fn counter(self) -> Counter {
        match self {
            AbortReason::Conflict => Counter::ConflictAborts,
            AbortReason::Capacity => Counter::CapacityAborts,
            AbortReason::LockHeld => Counter::LockHeldAborts,
            AbortReason::RetryRequested | AbortReason::Explicit(_) => Counter::ExplicitAborts,
            AbortReason::Other => Counter::OtherAborts,
        }
    }
}

/// What to do after an aborted hardware attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NextStep {
    /// Wait for the fallback lock to be free, then try hardware again.
    Retry,
    /// Run the body on the fallback path.
    Fallback,
    /// Return the explicit abort to the caller.
    Return(ExplicitAbort),
}

/// Retries spent by one region, per reason.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RetryBudget {
    conflict_retries: u32,
    capacity_retries: u32,
    lock_held_retries: u32,
}

impl RetryBudget {
    /// The DBX/DrTM policy: conflicts (and retry requests) up to
    /// `max_conflict_retries`, capacity up to `max_capacity_retries`, lock
    /// held up to `max_lock_held_retries`, then fall back; other aborts fall
    /// back at once; explicit aborts return to the caller.
    pub(crate) fn next_step(&mut self, reason: AbortReason, config: &HtmConfig) -> NextStep {
        fn spend(used: &mut u32, maximum: u32) -> NextStep {
            if *used < maximum {
                *used += 1;
                NextStep::Retry
            } else {
                NextStep::Fallback
            }
        }
        match reason {
            AbortReason::Conflict | AbortReason::RetryRequested => {
                spend(&mut self.conflict_retries, config.max_conflict_retries)
            }
            AbortReason::Capacity => spend(&mut self.capacity_retries, config.max_capacity_retries),
            AbortReason::LockHeld => spend(&mut self.lock_held_retries, config.max_lock_held_retries),
            AbortReason::Explicit(code) => NextStep::Return(ExplicitAbort::new(code)),
            AbortReason::Other => NextStep::Fallback,
        }
    }
}

/// An abort injected by the `sim` backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InjectedAbort {
    Begin,
    Commit,
    Capacity,
}

/// A region executor with its own fallback lock, statistics and (for `sim`)
/// abort generator. Share it between threads by reference or `Arc`.
pub struct Htm {
    config: HtmConfig,
    lock: FallbackLock,
    stats: HtmStats,
    /// Only drawn while holding `lock`, so it is never contended.
    sim_random: Mutex<ChaCha8Rng>,
}

impl fmt::Debug for Htm {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Htm")
            .field("config", &self.config)
            .field("fallback_locked", &self.lock.is_locked())
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

impl Htm {
    /// Creates an instance. Fails with [`HtmError::RtmUnavailable`] when the
    /// `rtm` backend is requested and [`rtm_support`] is not `Available`
    /// (callers choose whether to fall back to `none` or `sim`), and with
    /// [`HtmError::InvalidSimAbortRate`] when the sim rates exceed one.
    pub fn new(config: HtmConfig) -> Result<Htm, HtmError> {
        if config.sim.abort_per_million() > u64::from(PER_MILLION) {
            return Err(HtmError::InvalidSimAbortRate {
                begin_abort_per_million: config.sim.begin_abort_per_million,
                commit_abort_per_million: config.sim.commit_abort_per_million,
            });
        }
        if config.backend == HtmBackendKind::Rtm {
            let support = rtm_support();
            if !support.is_available() {
                return Err(HtmError::RtmUnavailable(support));
            }
        }
        Ok(Htm {
            config,
            lock: FallbackLock::default(),
            stats: HtmStats::default(),
            sim_random: Mutex::new(ChaCha8Rng::seed_from_u64(config.sim.seed)),
        })
    }

    /// An instance of the `none` backend (cannot fail).
    pub fn software() -> Htm {
        Htm::new(HtmConfig::software()).expect("the software configuration is always valid")
    }

    /// The backend running this instance's regions.
    pub fn backend(&self) -> HtmBackendKind {
        self.config.backend
    }

    /// The configuration this instance was created with.
    pub fn config(&self) -> &HtmConfig {
        &self.config
    }

    /// The live statistics of this instance.
    pub fn stats(&self) -> &HtmStats {
        &self.stats
    }

    /// Runs `body` atomically and returns its result. The body may run
    /// several times; see the module contract for what each path allows.
    pub fn atomic<R, F>(&self, body: F) -> R
    where
        F: FnMut(&mut RegionContext) -> R,
    {
        self.atomic_with_footprint(0, body)
    }

    /// [`Htm::atomic`] for a region expected to touch `footprint_lines`
    /// cache lines (used by `sim` to inject capacity aborts; ignored by the
    /// other backends, where the hardware decides).
    pub fn atomic_with_footprint<R, F>(&self, footprint_lines: u32, mut body: F) -> R
    where
        F: FnMut(&mut RegionContext) -> R,
    {
        match self.try_atomic_with_footprint(footprint_lines, |context| Ok(body(context))) {
            Ok(value) => value,
            Err(abort) => unreachable!("an infallible region body cannot abort explicitly: {abort}"),
        }
    }

    /// Runs `body` atomically; the body may abort with [`RegionAbort`].
    /// Returns the body's value, or the explicit abort it chose.
    pub fn try_atomic<R, F>(&self, body: F) -> Result<R, ExplicitAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        self.try_atomic_with_footprint(0, body)
    }

    /// [`Htm::try_atomic`] with a footprint hint in cache lines (see
    /// [`Htm::atomic_with_footprint`]).
    pub fn try_atomic_with_footprint<R, F>(&self, footprint_lines: u32, mut body: F) -> Result<R, ExplicitAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        let outcome = match self.config.backend {
            HtmBackendKind::Rtm => self.run_hardware(&mut body),
            HtmBackendKind::None => self.run_fallback(0, &mut body),
            HtmBackendKind::Sim => self.run_simulated(footprint_lines, &mut body),
        };
        self.stats.increment(Counter::Regions);
        if outcome.is_err() {
            self.stats.increment(Counter::ExplicitRegionAborts);
        }
        outcome
    }

    /// Counts an aborted attempt and applies the retry policy.
    fn after_abort(&self, budget: &mut RetryBudget, reason: AbortReason) -> NextStep {
        self.stats.increment(reason.counter());
        budget.next_step(reason, &self.config)
    }

    /// The fallback path: run the body under the fallback lock until it
    /// returns something other than [`RegionAbort::Retry`].
    fn run_fallback<R, F>(&self, mut attempt: u32, body: &mut F) -> Result<R, ExplicitAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        loop {
            let guard = self.lock.lock(Holder::Fallback);
            let mut context = RegionContext { path: RegionPath::Fallback, attempt, simulated_hardware: false };
            let outcome = body(&mut context);
            drop(guard);
            match outcome {
                Ok(value) => {
                    self.stats.increment(Counter::FallbackExecutions);
                    return Ok(value);
                }
                Err(RegionAbort::Explicit(code)) => {
                    self.stats.increment(Counter::FallbackExecutions);
                    return Err(ExplicitAbort::new(code));
                }
                Err(RegionAbort::Retry) => {
                    self.stats.increment(Counter::FallbackRetries);
                    attempt = attempt.saturating_add(1);
                    // The body waits for something outside the region; let
                    // the thread that must change it run.
                    std::thread::yield_now();
                }
            }
        }
    }

    /// The `rtm` backend: hardware attempts, then the fallback path.
    fn run_hardware<R, F>(&self, body: &mut F) -> Result<R, ExplicitAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        debug_assert_eq!(self.config.backend, HtmBackendKind::Rtm);
        let mut budget = RetryBudget::default();
        let mut attempt = 0u32;
        loop {
            // Starting while the lock is held would only abort again.
            self.lock.wait_until_free();
            // SAFETY: an `Htm` with the `rtm` backend exists only if
            // `rtm_support()` returned `Available` in `Htm::new`. Every path
            // below ends the transaction (xend or xabort) before returning.
            let status = unsafe { rtm::begin() };
            if status == rtm::STARTED {
                // IMPORTANT: this read subscribes the transaction to the
                // fallback lock: a fallback execution that takes the lock
                // from now on aborts this transaction, so the two never
                // overlap.
                if self.lock.is_locked() {
                    // SAFETY: RTM is present and the transaction is active.
                    unsafe { rtm::abort::<LOCK_HELD_ABORT_CODE>() }
                }
                let mut context = RegionContext { path: RegionPath::Hardware, attempt, simulated_hardware: false };
                match body(&mut context) {
                    Ok(value) => {
                        // SAFETY: RTM is present and the transaction started
                        // above is still active (an abort would have resumed
                        // at `begin` instead of reaching this line).
                        unsafe { rtm::end() };
                        self.stats.increment(Counter::HardwareCommits);
                        return Ok(value);
                    }
                    // SAFETY (both arms): RTM is present and the transaction
                    // started above is active; its effects are discarded.
                    Err(RegionAbort::Retry) => unsafe { rtm::abort::<RETRY_ABORT_CODE>() },
                    Err(RegionAbort::Explicit(code)) => unsafe { rtm::abort_with_code(clamp_code(code)) },
                }
            }
            attempt = attempt.saturating_add(1);
            match self.after_abort(&mut budget, AbortReason::from_status(status)) {
                NextStep::Retry => {}
                NextStep::Fallback => return self.run_fallback(attempt, body),
                NextStep::Return(abort) => return Err(abort),
            }
        }
    }

    /// The `sim` backend: simulated hardware attempts under the fallback
    /// lock, with injected aborts decided before the body runs.
    fn run_simulated<R, F>(&self, footprint_lines: u32, body: &mut F) -> Result<R, ExplicitAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        let mut budget = RetryBudget::default();
        let mut attempt = 0u32;
        loop {
            let Some(guard) = self.lock.try_lock(Holder::SimulatedAttempt) else {
                // A hardware attempt would subscribe to a lock held by a
                // fallback execution and abort. Waiting for another simulated
                // attempt is an artefact of the simulation and is not counted.
                if self.lock.is_held_by_fallback() {
                    attempt = attempt.saturating_add(1);
                    match self.after_abort(&mut budget, AbortReason::LockHeld) {
                        NextStep::Retry => {}
                        NextStep::Fallback => return self.run_fallback(attempt, body),
                        NextStep::Return(abort) => return Err(abort),
                    }
                }
                self.lock.wait_until_free();
                continue;
            };
            let reason = match self.draw_injected_abort(footprint_lines) {
                Some(injected) => {
                    drop(guard);
                    let (counter, reason) = match injected {
                        InjectedAbort::Begin => (Counter::SimBeginAborts, AbortReason::Conflict),
                        InjectedAbort::Commit => (Counter::SimCommitAborts, AbortReason::Conflict),
                        InjectedAbort::Capacity => (Counter::SimCapacityAborts, AbortReason::Capacity),
                    };
                    self.stats.increment(counter);
                    reason
                }
                None => {
                    let mut context = RegionContext { path: RegionPath::Fallback, attempt, simulated_hardware: true };
                    let outcome = body(&mut context);
                    drop(guard);
                    match outcome {
                        Ok(value) => {
                            self.stats.increment(Counter::HardwareCommits);
                            return Ok(value);
                        }
                        Err(abort) => AbortReason::from_region_abort(abort),
                    }
                }
            };
            attempt = attempt.saturating_add(1);
            match self.after_abort(&mut budget, reason) {
                NextStep::Retry => {}
                NextStep::Fallback => return self.run_fallback(attempt, body),
                NextStep::Return(abort) => return Err(abort),
            }
        }
    }

    /// One hardware attempt of `body` and nothing else: no retry, no
    /// fallback, no fallback lock. For callers whose retry policy spans more
    /// than a region (PHyTM moves a whole transaction from path to path) and
    /// for [`Htm::elide`].
    ///
    /// * `rtm`: `body` runs inside `xbegin`/`xend` ([`RegionPath::Hardware`]);
    ///   its effects vanish if the attempt aborts.
    /// * `sim`: an abort is drawn first (injected at begin or commit, or a
    ///   capacity abort when `footprint_lines` exceeds the configured
    ///   capacity); otherwise `body` runs once as a simulated hardware
    ///   attempt ([`RegionPath::Fallback`], not rolled back).
    /// * `none`: `body` runs once on [`RegionPath::Fallback`].
    ///
    /// On `sim` and `none` nothing makes the run atomic: the body must be
    /// correct when run alone, synchronising through fine-grained locks
    /// (which a hardware attempt reads, and so subscribes to).
    pub fn attempt_hardware<R, F>(&self, footprint_lines: u32, mut body: F) -> Result<R, AttemptAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        self.stats.increment(Counter::Regions);
        match self.attempt_once(footprint_lines, 0, &mut body) {
            Ok(value) => Ok(value),
            Err(reason) => {
                self.stats.increment(reason.counter());
                Err(AttemptAbort::from_reason(reason))
            }
        }
    }

    /// Lock elision with a fine-grained fallback: hardware attempts of
    /// `body` under the retry policy of [`HtmConfig`], then `body` on the
    /// fallback path **without** the instance's fallback lock. An explicit
    /// abort returns to the caller on every path.
    ///
    /// The body must therefore be correct when run non-atomically (it takes
    /// the fine-grained locks it needs); a hardware attempt reads those
    /// locks and so aborts when a fallback execution takes one. This is how
    /// DBX runs its commit's validate + install: the same code in hardware
    /// and, after aborts, in software, with fallback executions of
    /// different threads running in parallel. On `sim`, injected aborts
    /// take exactly this retry and fallback path.
    pub fn elide<R, F>(&self, footprint_lines: u32, mut body: F) -> Result<R, ExplicitAbort>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        self.stats.increment(Counter::Regions);
        let mut attempt = 0u32;
        if self.config.backend != HtmBackendKind::None {
            let mut budget = RetryBudget::default();
            loop {
                let reason = match self.attempt_once(footprint_lines, attempt, &mut body) {
                    Ok(value) => return Ok(value),
                    Err(reason) => reason,
                };
                attempt = attempt.saturating_add(1);
                match self.after_abort(&mut budget, reason) {
                    NextStep::Retry => {}
                    NextStep::Fallback => break,
                    NextStep::Return(abort) => {
                        self.stats.increment(Counter::ExplicitRegionAborts);
                        return Err(abort);
                    }
                }
            }
        }
        loop {
            let mut context = RegionContext { path: RegionPath::Fallback, attempt, simulated_hardware: false };
            match body(&mut context) {
                Ok(value) => {
                    self.stats.increment(Counter::FallbackExecutions);
                    return Ok(value);
                }
                Err(RegionAbort::Explicit(code)) => {
                    self.stats.increment(Counter::FallbackExecutions);
                    self.stats.increment(Counter::ExplicitRegionAborts);
                    return Err(ExplicitAbort::new(code));
                }
                Err(RegionAbort::Retry) => {
                    self.stats.increment(Counter::FallbackRetries);
                    attempt = attempt.saturating_add(1);
                    std::thread::yield_now();
                }
            }
        }
    }

    /// One attempt on this backend (see [`Htm::attempt_hardware`]);
    /// counts commits and injected aborts, not the abort's reason.
    fn attempt_once<R, F>(&self, footprint_lines: u32, attempt: u32, body: &mut F) -> Result<R, AbortReason>
    where
        F: FnMut(&mut RegionContext) -> Result<R, RegionAbort>,
    {
        match self.config.backend {
            HtmBackendKind::Rtm => {
                // SAFETY: an `Htm` with the `rtm` backend exists only if
                // `rtm_support()` returned `Available` in `Htm::new`. Every
                // path below ends the transaction (xend or xabort).
                let status = unsafe { rtm::begin() };
                if status != rtm::STARTED {
                    return Err(AbortReason::from_status(status));
                }
                let mut context = RegionContext { path: RegionPath::Hardware, attempt, simulated_hardware: false };
                match body(&mut context) {
                    Ok(value) => {
                        // SAFETY: RTM is present and the transaction started
                        // above is active (an abort resumes at `begin`).
                        unsafe { rtm::end() };
                        self.stats.increment(Counter::HardwareCommits);
                        Ok(value)
                    }
                    // SAFETY (both arms): RTM is present and the transaction
                    // started above is active; its effects are discarded.
                    Err(RegionAbort::Retry) => unsafe { rtm::abort::<RETRY_ABORT_CODE>() },
                    Err(RegionAbort::Explicit(code)) => unsafe { rtm::abort_with_code(clamp_code(code)) },
                }
            }
            HtmBackendKind::Sim => {
                if let Some(injected) = self.draw_injected_abort(footprint_lines) {
                    return Err(match injected {
                        InjectedAbort::Begin => {
                            self.stats.increment(Counter::SimBeginAborts);
                            AbortReason::Conflict
                        }
                        InjectedAbort::Commit => {
                            self.stats.increment(Counter::SimCommitAborts);
                            AbortReason::Conflict
                        }
                        InjectedAbort::Capacity => {
                            self.stats.increment(Counter::SimCapacityAborts);
                            AbortReason::Capacity
                        }
                    });
                }
                let mut context = RegionContext { path: RegionPath::Fallback, attempt, simulated_hardware: true };
                let value = body(&mut context).map_err(AbortReason::from_region_abort)?;
                self.stats.increment(Counter::HardwareCommits);
                Ok(value)
            }
            HtmBackendKind::None => {
                let mut context = RegionContext { path: RegionPath::Fallback, attempt, simulated_hardware: false };
                let value = body(&mut context).map_err(AbortReason::from_region_abort)?;
                self.stats.increment(Counter::FallbackExecutions);
                Ok(value)
            }
        }
    }

    /// Decides whether the next simulated attempt aborts. The generator is
    /// behind its own mutex, so the draws of concurrent threads are
    /// serialised (and a single thread's draws are reproducible).
    fn draw_injected_abort(&self, footprint_lines: u32) -> Option<InjectedAbort> {
        let sim = &self.config.sim;
        if footprint_lines > sim.capacity_footprint_lines {
            return Some(InjectedAbort::Capacity);
        }
        if sim.abort_per_million() == 0 {
            return None;
        }
        let draw = self.sim_random.lock().unwrap_or_else(PoisonError::into_inner).gen_range(0..PER_MILLION);
        if draw < sim.begin_abort_per_million {
            Some(InjectedAbort::Begin)
        } else if u64::from(draw) < sim.abort_per_million() {
            Some(InjectedAbort::Commit)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<Htm>();

    fn explicit_status(code: u8) -> u32 {
        (u32::from(code) << 24) | rtm::STATUS_EXPLICIT
    }

    #[test]
    fn abort_status_is_decoded_by_reason() {
        assert_eq!(AbortReason::from_status(explicit_status(LOCK_HELD_ABORT_CODE)), AbortReason::LockHeld);
        assert_eq!(AbortReason::from_status(explicit_status(RETRY_ABORT_CODE)), AbortReason::RetryRequested);
        assert_eq!(AbortReason::from_status(explicit_status(7)), AbortReason::Explicit(7));
        assert_eq!(AbortReason::from_status(rtm::STATUS_CAPACITY), AbortReason::Capacity);
        assert_eq!(AbortReason::from_status(rtm::STATUS_CAPACITY | rtm::STATUS_RETRY), AbortReason::Capacity);
        assert_eq!(AbortReason::from_status(rtm::STATUS_CONFLICT | rtm::STATUS_RETRY), AbortReason::Conflict);
        assert_eq!(AbortReason::from_status(rtm::STATUS_RETRY), AbortReason::Conflict);
        assert_eq!(AbortReason::from_status(0), AbortReason::Other);
        // Debug and nested bits alone carry no retry advice.
        assert_eq!(AbortReason::from_status(1 << 4 | 1 << 5), AbortReason::Other);
    }

    #[test]
    fn retry_budget_follows_the_policy() {
        let config = HtmConfig {
            max_conflict_retries: 2,
            max_capacity_retries: 1,
            max_lock_held_retries: 1,
            ..HtmConfig::software()
        };
        let mut budget = RetryBudget::default();
        assert_eq!(budget.next_step(AbortReason::Conflict, &config), NextStep::Retry);
        assert_eq!(budget.next_step(AbortReason::RetryRequested, &config), NextStep::Retry);
        assert_eq!(budget.next_step(AbortReason::Conflict, &config), NextStep::Fallback);
        assert_eq!(budget.next_step(AbortReason::Capacity, &config), NextStep::Retry);
        assert_eq!(budget.next_step(AbortReason::Capacity, &config), NextStep::Fallback);
        assert_eq!(budget.next_step(AbortReason::LockHeld, &config), NextStep::Retry);
        assert_eq!(budget.next_step(AbortReason::LockHeld, &config), NextStep::Fallback);
        assert_eq!(RetryBudget::default().next_step(AbortReason::Other, &config), NextStep::Fallback);
        assert_eq!(budget.next_step(AbortReason::Explicit(9), &config), NextStep::Return(ExplicitAbort { code: 9 }));
    }

    #[test]
    fn explicit_codes_are_clamped_below_the_reserved_ones() {
        assert_eq!(ExplicitAbort::new(0xff).code, MAX_EXPLICIT_ABORT_CODE);
        assert_eq!(ExplicitAbort::new(3).code, 3);
        assert_eq!(AbortReason::from_region_abort(RegionAbort::Explicit(0xfe)), AbortReason::Explicit(0xfd));
    }

    #[test]
    fn elide_falls_back_to_the_same_body_without_the_lock() {
        let config = HtmConfig { max_conflict_retries: 3, ..HtmConfig::sim(1, PER_MILLION) };
        let htm = Htm::new(config).expect("valid");
        let mut runs = Vec::new();
        let value = htm.elide(0, |context| {
            runs.push((context.path(), context.is_simulated_hardware()));
            // No global lock on the fallback path of an elided region.
            assert!(!htm.lock.is_locked());
            Ok::<_, RegionAbort>(7)
        });
        assert_eq!(value, Ok(7));
        assert_eq!(runs, vec![(RegionPath::Fallback, false)], "every hardware attempt was injected away");
        let stats = htm.stats().snapshot();
        assert_eq!(stats.conflict_aborts, 4, "three retries, then the fallback");
        assert_eq!(stats.fallback_executions, 1);
        assert_eq!(stats.hardware_commits, 0);
    }

    #[test]
    fn elide_returns_explicit_aborts_and_commits_simulated_attempts() {
        let htm = Htm::new(HtmConfig::sim(1, 0)).expect("valid");
        assert_eq!(htm.elide(0, |context| Ok::<_, RegionAbort>(context.is_simulated_hardware())), Ok(true));
        assert_eq!(htm.elide(0, |_| Err::<(), _>(RegionAbort::Explicit(9))), Err(ExplicitAbort { code: 9 }));
        let stats = htm.stats().snapshot();
        assert_eq!(stats.hardware_commits, 1);
        assert_eq!(stats.explicit_region_aborts, 1);
        let none = Htm::software();
        assert_eq!(none.elide(0, |context| Ok::<_, RegionAbort>(context.path())), Ok(RegionPath::Fallback));
    }

    #[test]
    fn one_attempt_reports_why_it_aborted() {
        let config = HtmConfig::sim(1, 0);
        let capacity = config.sim.capacity_footprint_lines;
        let htm = Htm::new(config).expect("valid");
        let mut ran = 0;
        assert_eq!(
            htm.attempt_hardware(capacity + 1, |_| {
                ran += 1;
                Ok::<_, RegionAbort>(())
            }),
            Err(AttemptAbort::Capacity)
        );
        assert_eq!(ran, 0, "a capacity abort is decided before the body runs");
        assert_eq!(htm.attempt_hardware(capacity, |_| Ok::<_, RegionAbort>(1)), Ok(1));
        assert_eq!(htm.attempt_hardware(0, |_| Err::<(), _>(RegionAbort::Retry)), Err(AttemptAbort::Transient));
        assert_eq!(
            htm.attempt_hardware(0, |_| Err::<(), _>(RegionAbort::Explicit(3))),
            Err(AttemptAbort::Explicit(ExplicitAbort { code: 3 }))
        );
        let always = Htm::new(HtmConfig::sim(1, PER_MILLION)).expect("valid");
        assert_eq!(always.attempt_hardware(0, |_| Ok::<_, RegionAbort>(())), Err(AttemptAbort::Transient));
        assert_eq!(always.stats().snapshot().sim_injected_aborts(), 1);
    }
}
