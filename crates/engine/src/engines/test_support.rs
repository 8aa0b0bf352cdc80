//! What the engines' unit tests share: a before-log hook that pauses a
//! committer between its install and its log, and one-row puts.

use crate::engine::{CommitTicket, EngineWorker, WriteOp};
use crate::error::TxError;
use crate::schema::TableId;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// The table of the tests' engines.
pub(crate) const T: TableId = TableId(0);

/// The test's side of [`pause_worker_0`]'s hook.
pub(crate) struct Pause {
    /// While set, worker 0 pauses before each log append.
    pub(crate) armed: Arc<AtomicBool>,
    /// Receives once worker 0 paused (installed, log not written).
    pub(crate) installed: mpsc::Receiver<()>,
    /// Lets the paused worker go on.
    pub(crate) go: mpsc::Sender<()>,
}

/// A before-log hook for a log policy: worker 0, while `armed`, sends on
/// `installed` and waits on `go`.
pub(crate) fn pause_worker_0() -> (Arc<dyn Fn(usize) + Send + Sync>, Pause) {
    let armed = Arc::new(AtomicBool::new(false));
    let (installed_tx, installed) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let hook_armed = Arc::clone(&armed);
    let hook = Arc::new(move |worker| {
        if worker == 0 && hook_armed.load(Ordering::SeqCst) {
            installed_tx.send(()).expect("test alive");
            go_rx.lock().recv().expect("test alive");
        }
    });
    (hook, Pause { armed, installed, go })
}

/// One transaction writing `value` under `key` in [`T`].
pub(crate) fn put(worker: &mut dyn EngineWorker, key: &[u8], value: &[u8]) -> Result<CommitTicket, TxError> {
    worker.begin(false, 1);
    worker.write(T, key, WriteOp::Put(value))?;
    worker.commit()
}

/// A worker handed back by a thread with the result of its transaction.
pub(crate) type Returned = (Box<dyn EngineWorker>, Result<CommitTicket, TxError>);

/// [`put`] on a thread of its own (where a hook may pause it).
pub(crate) fn put_on_thread(
    mut worker: Box<dyn EngineWorker>,
    key: &'static [u8],
    value: &'static [u8],
) -> JoinHandle<Returned> {
    std::thread::spawn(move || {
        let ticket = put(worker.as_mut(), key, value);
        (worker, ticket)
    })
}
