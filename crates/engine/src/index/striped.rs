//! A count that several threads change often and few read.
//!
//! One padded word per stripe, a thread always adding to its own: two
//! threads inserting into one index then share no line for the count, and
//! the count shares none with the index's root, which every descent reads.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

const STRIPES: usize = 8;

/// Hands each thread its stripe, round robin (the first `STRIPES` threads
/// get a stripe of their own).
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
}

/// A striped count (exact when no thread is changing it).
pub(crate) struct StripedCount {
    stripes: [CachePadded<AtomicIsize>; STRIPES],
}

impl Default for StripedCount {
    fn default() -> Self {
        Self { stripes: std::array::from_fn(|_| CachePadded::new(AtomicIsize::new(0))) }
    }
}

impl StripedCount {
    /// Adds `delta` (negative to subtract) in the calling thread's stripe.
    #[inline]
    pub(crate) fn add(&self, delta: isize) {
        let stripe = STRIPE.with(|stripe| *stripe);
        self.stripes[stripe].fetch_add(delta, Ordering::Relaxed);
    }

    /// The sum of the stripes. A stripe alone may be negative (a thread
    /// may remove what another inserted), and so may a sum read while
    /// threads change it: it reads the stripes one by one.
    pub(crate) fn sum(&self) -> usize {
        let total: isize = self.stripes.iter().map(|stripe| stripe.load(Ordering::Relaxed)).sum();
        total.max(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_counts_every_threads_changes() {
        let count = StripedCount::default();
        std::thread::scope(|scope| {
            for _ in 0..(STRIPES + 3) {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        count.add(1);
                    }
                    count.add(-10);
                });
            }
        });
        assert_eq!(count.sum(), (STRIPES + 3) * 990);
        // A thread removing what others inserted leaves its stripe negative.
        std::thread::scope(|scope| {
            scope.spawn(|| count.add(-((STRIPES + 3) as isize * 990)));
        });
        assert_eq!(count.sum(), 0);
    }
}
