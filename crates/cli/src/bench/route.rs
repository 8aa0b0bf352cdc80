//! `--route-by-partition`: the per-worker queues through which bench
//! workers hand each other the transactions the engine assigned elsewhere
//! (`Database::assign_transaction`, Algorithm 3 of zen-plus.txt §4.2.2 for
//! zen+ on several NUMA nodes).
//!
//! Every worker draws its own transactions. One the engine assigns to
//! another worker goes to that worker's bounded queue ([`Router::forward`];
//! when the queue is full, the drawing worker runs it itself, so no worker
//! ever blocks on another). Each worker runs what its queue holds before
//! drawing its next transaction ([`Router::receive`]).
//!
//! At the end no transaction is lost: a worker that stops drawing says so
//! ([`Drawing::stop`]) and keeps running its queue until every worker has
//! stopped drawing ([`Router::all_stopped`]) and its queue is empty; after
//! that no one can push to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;

/// Transactions queued per worker at most.
pub const QUEUE_CAPACITY: usize = 64;

/// The workers' queues.
pub struct Router<T> {
    senders: Vec<SyncSender<T>>,
    /// Each read only by its worker (the lock is never contended).
    receivers: Vec<Mutex<Receiver<T>>>,
    /// Workers still drawing transactions.
    drawing: AtomicUsize,
}

impl<T: Send> Router<T> {
    /// Queues of `capacity` for `workers` workers, all drawing.
    pub fn new(workers: usize, capacity: usize) -> Self {
        let (senders, receivers) = (0..workers)
            .map(|_| {
                let (sender, receiver) = sync_channel(capacity);
                (sender, Mutex::new(receiver))
            })
            .unzip();
        Self { senders, receivers, drawing: AtomicUsize::new(workers) }
    }

    /// Hands `item` to worker `to`'s queue; `Err(item)` when it is full.
    pub fn forward(&self, to: usize, item: T) -> Result<(), T> {
        match self.senders[to].try_send(item) {
            Ok(()) => Ok(()),
            // The router holds every receiver: a queue is never closed.
            Err(TrySendError::Full(item) | TrySendError::Disconnected(item)) => Err(item),
        }
    }

    /// The next item of worker `worker`'s queue.
    pub fn receive(&self, worker: usize) -> Option<T> {
        self.receivers[worker].lock().unwrap_or_else(|e| e.into_inner()).try_recv().ok()
    }

    /// A worker's promise to say when it stops drawing (also when it
    /// returns early: on drop).
    pub fn drawing(&self) -> Drawing<'_, T> {
        Drawing { router: self, stopped: false }
    }

    /// Whether every worker has stopped drawing: no item is forwarded any
    /// more, so an empty queue stays empty.
    pub fn all_stopped(&self) -> bool {
        self.drawing.load(Ordering::Acquire) == 0
    }
}

/// See [`Router::drawing`].
pub struct Drawing<'a, T> {
    router: &'a Router<T>,
    stopped: bool,
}

impl<T> Drawing<'_, T> {
    /// This worker draws no more transactions (idempotent).
    pub fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            // Release: the items it forwarded are in their queues before
            // anyone sees it stopped.
            self.router.drawing.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<T> Drop for Drawing<'_, T> {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_full_queue_hands_the_item_back() {
        let router = Router::new(2, 2);
        assert_eq!(router.forward(1, 10), Ok(()));
        assert_eq!(router.forward(1, 11), Ok(()));
        assert_eq!(router.forward(1, 12), Err(12));
        assert_eq!(router.receive(0), None);
        assert_eq!(router.receive(1), Some(10));
        assert_eq!(router.receive(1), Some(11));
        assert_eq!(router.receive(1), None);
    }

    /// Workers draw numbered items and forward most of them to the next
    /// worker (running the rest, and those a full queue refuses,
    /// themselves), then drain as the bench workers do: every item runs
    /// exactly once.
    #[test]
    fn every_drawn_item_runs_exactly_once() {
        const WORKERS: usize = 4;
        const PER_WORKER: u64 = 20_000;
        let router = Router::new(WORKERS, 8);
        let runs: Vec<AtomicU64> = (0..WORKERS as u64 * PER_WORKER).map(|_| AtomicU64::new(0)).collect();
        let forwarded = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for worker in 0..WORKERS {
                let (router, runs, forwarded) = (&router, &runs, &forwarded);
                scope.spawn(move || {
                    let run = |item: u64| runs[item as usize].fetch_add(1, Ordering::Relaxed);
                    let mut drawing = router.drawing();
                    for number in 0..PER_WORKER {
                        while let Some(item) = router.receive(worker) {
                            run(item);
                        }
                        let item = worker as u64 * PER_WORKER + number;
                        if number % 4 == 0 {
                            run(item);
                        } else {
                            match router.forward((worker + 1) % WORKERS, item) {
                                Ok(()) => {
                                    forwarded.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(item) => {
                                    run(item);
                                }
                            }
                        }
                    }
                    drawing.stop();
                    loop {
                        let stopped = router.all_stopped();
                        while let Some(item) = router.receive(worker) {
                            run(item);
                        }
                        if stopped {
                            break;
                        }
                        std::thread::yield_now();
                    }
                });
            }
        });
        assert!(forwarded.load(Ordering::Relaxed) > 0);
        let wrong: Vec<usize> = (0..runs.len()).filter(|&item| runs[item].load(Ordering::Relaxed) != 1).collect();
        assert!(wrong.is_empty(), "items not run exactly once: {:?}", &wrong[..wrong.len().min(10)]);
    }
}
