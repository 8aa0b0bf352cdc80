//! Failures of an engine's background threads (the epoch ticker, the
//! checkpointer, `wbl`'s window thread), kept until the caller hears of
//! them: the library prints nothing and drops nothing.
//!
//! * A failed periodic checkpoint is returned once, by the next transaction
//!   (before it runs, so it commits nothing) or else by `close`; the
//!   database stays usable, as a checkpoint taken later frees the log all
//!   the same.
//! * A panicked background thread is returned by every later transaction,
//!   wait for durability and `close`: the epochs (and with them group
//!   commit's acknowledgements) or the checkpoints stopped for good, and the
//!   state the thread left is not trusted, so `close` marks no clean
//!   shutdown and the next open recovers.
//!
//! Both show in [`crate::EngineStats`] (`checkpoint_failures`,
//! `background_failure`).

use crate::error::{panic_message, DbError, DbResult};
use crate::stats::EngineStats;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the background threads of one engine reported.
#[derive(Default)]
pub(crate) struct BackgroundHealth {
    /// Set once anything was recorded: the one load of the fast path.
    raised: AtomicBool,
    /// Set once a thread panicked (checked by waits for durability).
    panicked: AtomicBool,
    state: Mutex<HealthState>,
}

#[derive(Default)]
struct HealthState {
    /// The first panic: thread name and message.
    panic: Option<(String, String)>,
    /// A failed checkpoint not yet returned to anyone.
    unreported: Option<DbError>,
    checkpoint_failures: u64,
    /// The last failure, for statistics.
    last: Option<String>,
}

impl BackgroundHealth {
    /// Records a failed periodic checkpoint.
    pub(crate) fn checkpoint_failed(&self, error: DbError) {
        let mut state = self.state.lock();
        state.checkpoint_failures += 1;
        state.last = Some(format!("periodic checkpoint failed: {error}"));
        state.unreported = Some(error);
        self.raised.store(true, Ordering::Release);
    }

    /// Records that background thread `thread` panicked with `payload`.
    pub(crate) fn thread_panicked(&self, thread: &str, payload: &(dyn std::any::Any + Send)) {
        let message = panic_message(payload);
        let mut state = self.state.lock();
        state.last = Some(format!("background thread {thread} panicked: {message}"));
        state.panic.get_or_insert((thread.to_string(), message));
        self.panicked.store(true, Ordering::Release);
        self.raised.store(true, Ordering::Release);
    }

    /// Whether a background thread panicked.
    #[inline]
    pub(crate) fn has_panicked(&self) -> bool {
        self.panicked.load(Ordering::Acquire)
    }

    /// The error the caller is owed, if any: a panic every time, a failed
    /// checkpoint once.
    #[inline]
    pub(crate) fn take_error(&self) -> DbResult<()> {
        if !self.raised.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut state = self.state.lock();
        if let Some((thread, message)) = &state.panic {
            return Err(DbError::BackgroundPanic { thread: thread.clone(), message: message.clone() });
        }
        match state.unreported.take() {
            Some(error) => Err(DbError::CheckpointFailed(Box::new(error))),
            None => Ok(()),
        }
    }

    /// Fills the statistics' failure fields.
    pub(crate) fn report(&self, stats: &mut EngineStats) {
        let state = self.state.lock();
        stats.checkpoint_failures = state.checkpoint_failures;
        stats.background_failure = state.last.clone();
    }
}

/// Starts background thread `name` running `body`; a panic in `body` is
/// recorded in `health`, then `on_panic` runs (to end waits that only the
/// thread could end) and the thread ends.
pub(crate) fn spawn(
    name: &'static str,
    health: &Arc<BackgroundHealth>,
    body: impl FnOnce() + Send + 'static,
    on_panic: impl FnOnce() + Send + 'static,
) -> DbResult<std::thread::JoinHandle<()>> {
    let health = Arc::clone(health);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // The body's state is not used after a panic (the engine stops
            // trusting it: see the module comment), so unwind safety holds.
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                health.thread_panicked(name, payload.as_ref());
                on_panic();
            }
        })
        .map_err(|error| DbError::InvalidConfig(format!("cannot start thread {name}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_checkpoint_is_returned_once_and_counted() {
        let health = BackgroundHealth::default();
        assert!(health.take_error().is_ok());
        health.checkpoint_failed(DbError::OutOfSpace("full".into()));
        assert!(
            matches!(health.take_error(), Err(DbError::CheckpointFailed(inner)) if matches!(*inner, DbError::OutOfSpace(_)))
        );
        assert!(health.take_error().is_ok(), "returned once");
        let mut stats = EngineStats::default();
        health.report(&mut stats);
        assert_eq!(stats.checkpoint_failures, 1);
        assert!(stats.background_failure.unwrap().contains("full"));
    }

    #[test]
    fn a_panic_is_returned_every_time() {
        let health = Arc::new(BackgroundHealth::default());
        let handle = spawn("pmtx-test", &health, || panic!("boom"), || {}).unwrap();
        handle.join().expect("the panic is caught");
        assert!(health.has_panicked());
        for _ in 0..2 {
            match health.take_error() {
                Err(DbError::BackgroundPanic { thread, message }) => {
                    assert_eq!((thread.as_str(), message.as_str()), ("pmtx-test", "boom"))
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
