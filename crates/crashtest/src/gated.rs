//! A pool backend that can hold a thread at an engine's crash point: the
//! direct backend, except that a thread reaching the labelled crash point
//! a [`Gate`] is armed for waits there until the test releases it. An
//! explicit synchronization point instead of a race or a sleep: the
//! corruption matrix holds an SP^3 writer between install and log record
//! while a reader of its version commits (so its pool holds a dependency
//! list on every run), and the disk-log controls hold a broken engine
//! where it claims durability, to take the crash image there.

use pmtx_pm::{BackendInfo, Direct, Mapping, PmBackend, PmOptions, PoolResult};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// SP^3's crash point after the install (and unlock), before the log
/// record is written (`durability::sp3_log`).
pub const SP3_BEFORE_LOG: &str = "sp3: installed, log record not yet written";

/// The group-commit log's crash point between publishing a durable epoch
/// and making its log durable, reached only by the broken variant
/// `group-commit-epoch-before-log` (`durability::group_commit`).
pub const EPOCH_PUBLISHED_BEFORE_LOG: &str = "group commit (broken): epoch published, its log not yet durable";

/// The DBXN family's crash point after the logging phase, where the
/// record is durable (`durability::dbxn_log`).
pub const DBXN_LOG_DURABLE: &str = "dbxn: log record durable";

#[derive(Default)]
struct GateState {
    /// The crash point threads are held at (none: disarmed).
    label: Option<&'static str>,
    /// Disarm once a thread is held (else every arrival is held).
    once: bool,
    /// A thread is held now.
    holding: bool,
}

/// Holds threads that reach the crash point it is armed for, until
/// released. One per process.
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// Serializes the users of the gate (one armed sequence at a time).
    user: Mutex<()>,
}

impl Gate {
    /// The process's gate.
    pub fn get() -> &'static Gate {
        static GATE: OnceLock<Gate> = OnceLock::new();
        GATE.get_or_init(|| Gate { state: Mutex::default(), changed: Condvar::new(), user: Mutex::new(()) })
    }

    fn state(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the gate for one user (one at a time: take it before creating
    /// the pool, so no other user's pool reaches a crash point it armed).
    /// Dropping the session disarms the gate and releases a held thread.
    pub fn take(&'static self) -> Session {
        let user = self.user.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *self.state() = GateState::default();
        Session { gate: self, _user: user }
    }

    fn reached(&self, label: &'static str) {
        let mut state = self.state();
        if state.label != Some(label) || state.holding {
            return;
        }
        if state.once {
            state.label = None;
        }
        state.holding = true;
        self.changed.notify_all();
        while state.holding {
            state = self.changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// The [`Gate`], taken (see [`Gate::take`]).
pub struct Session {
    gate: &'static Gate,
    _user: MutexGuard<'static, ()>,
}

impl Session {
    /// Arms the gate at `label`: holds only the first thread to arrive if
    /// `once`, else each.
    pub fn arm(&self, label: &'static str, once: bool) {
        *self.gate.state() = GateState { label: Some(label), once, holding: false };
    }

    /// Waits until a committer is held; false if none arrived within
    /// `limit` (a bound against hanging, not a timing assumption).
    pub fn wait_held(&self, limit: Duration) -> bool {
        let started = Instant::now();
        let mut state = self.gate.state();
        while !state.holding {
            let left = limit.saturating_sub(started.elapsed());
            if left.is_zero() {
                return false;
            }
            state = self.gate.changed.wait_timeout(state, left).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
        true
    }

    /// Lets the held thread go on (the gate stays armed unless `once`).
    pub fn release(&self) {
        self.gate.state().holding = false;
        self.gate.changed.notify_all();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.gate.state().label = None;
        self.release();
    }
}

/// [`Direct`] with the [`Gate`] at its crash points.
pub struct Gated(Direct);

impl PmBackend for Gated {
    fn from_mapping(mapping: Mapping, options: &PmOptions) -> PoolResult<Self> {
        Direct::from_mapping(mapping, options).map(Gated)
    }
    fn info(&self) -> BackendInfo {
        self.0.info()
    }
    fn mapping(&self) -> &Mapping {
        self.0.mapping()
    }
    fn read(&self, offset: u64, destination: &mut [u8]) {
        self.0.read(offset, destination)
    }
    fn load_u64(&self, offset: u64) -> u64 {
        self.0.load_u64(offset)
    }
    fn write(&self, offset: u64, source: &[u8]) {
        self.0.write(offset, source)
    }
    fn write_volatile(&self, offset: u64, source: &[u8]) {
        self.0.write_volatile(offset, source)
    }
    fn read_volatile(&self, offset: u64, len: u64) -> u64 {
        self.0.read_volatile(offset, len)
    }
    fn store_u64(&self, offset: u64, value: u64) {
        self.0.store_u64(offset, value)
    }
    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        self.0.compare_exchange_u64(offset, current, new)
    }
    fn write_non_temporal(&self, offset: u64, source: &[u8]) {
        self.0.write_non_temporal(offset, source)
    }
    fn flush(&self, offset: u64, len: u64) {
        self.0.flush(offset, len)
    }
    fn fence(&self) {
        self.0.fence()
    }
    fn crash_point(&self, label: &'static str) {
        Gate::get().reached(label);
    }
}
