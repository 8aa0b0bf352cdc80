//! Many lines, one fence.
//!
//! Protocols that persist several scattered ranges at one point (a commit's
//! log record and its tuples) collect them here; `commit` flushes each
//! distinct line once and issues a single fence. Flushing a line twice before
//! one fence is a performance bug the batch removes.
//!
//! Explained in docs/media-model.md.

use crate::backend::PmBackend;
use crate::cpu::CACHE_LINE;

/// A set of line-aligned ranges waiting for one fence.
///
/// Kept as ranges, not lines: a commit adds a few ranges of many lines
/// each (whole tuples), and sorting a handful of ranges costs far less
/// than sorting every line.
#[derive(Default, Debug)]
pub struct PersistBatch {
    /// `(first line, end line)` byte offsets, line-aligned, end exclusive.
    ranges: Vec<(u64, u64)>,
}

impl PersistBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every line overlapping `[offset, offset + len)`.
    pub fn add(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let start = offset & !(CACHE_LINE - 1);
        let end = (offset + len).div_ceil(CACHE_LINE) * CACHE_LINE;
        // Consecutive adds are often one after another in the pool (a
        // commit's tuples come from one region's chunk in slot order): grow
        // the last range instead of adding one to sort later.
        if let Some(last) = self.ranges.last_mut() {
            if last.0 <= start && start <= last.1 {
                last.1 = last.1.max(end);
                return;
            }
        }
        self.ranges.push((start, end));
    }

    /// Sorts the ranges and merges the overlapping and adjacent ones, so
    /// each line appears once.
    fn merge(&mut self) {
        if !self.ranges.is_sorted_by_key(|range| range.0) {
            self.ranges.sort_unstable_by_key(|range| range.0);
        }
        let mut merged = 0;
        for index in 0..self.ranges.len() {
            let (start, end) = self.ranges[index];
            if merged > 0 && start <= self.ranges[merged - 1].1 {
                let last = &mut self.ranges[merged - 1];
                last.1 = last.1.max(end);
            } else {
                self.ranges[merged] = (start, end);
                merged += 1;
            }
        }
        self.ranges.truncate(merged);
    }

    /// Number of distinct lines currently batched.
    pub fn distinct_lines(&mut self) -> usize {
        self.merge();
        self.ranges.iter().map(|(start, end)| ((end - start) / CACHE_LINE) as usize).sum()
    }

    /// Whether nothing is batched.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Flushes each distinct line once, in address order (sequential for the
    /// media), without fencing. Leaves the batch empty.
    pub fn flush<B: PmBackend>(&mut self, backend: &B) {
        self.merge();
        for &(start, end) in &self.ranges {
            backend.flush(start, end - start);
        }
        self.ranges.clear();
    }

    /// Flushes everything and issues one fence.
    pub fn commit<B: PmBackend>(&mut self, backend: &B) {
        self.flush(backend);
        backend.fence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direct, PmOptions, Pool};

    /// Ranges given in any order, overlapping, adjacent or repeated, are
    /// flushed once per distinct line.
    #[test]
    fn each_distinct_line_is_flushed_once() {
        let pool = Pool::<Direct>::create_in_memory(16 << 20, 1 << 20, &PmOptions::default()).unwrap();
        let base = pool.geometry().data_offset;
        let cases: &[(&[(u64, u64)], usize)] = &[
            (&[], 0),
            (&[(0, 1)], 1),
            (&[(63, 2)], 2),
            (&[(0, 64), (64, 64)], 2),
            (&[(200, 10), (0, 64), (10, 5)], 2),
            (&[(0, 640), (128, 64), (600, 100)], 11),
            (&[(1000, 1), (1000, 1), (0, 0)], 1),
            (&[(4096, 4096), (0, 128), (8000, 500)], 71),
            // Consecutive, then one that starts inside an earlier range.
            (&[(0, 64), (64, 100), (164, 10), (100, 300), (1000, 8)], 8),
            (&[(640, 64), (0, 8), (8, 8), (650, 100)], 3),
        ];
        for &(ranges, lines) in cases {
            let mut batch = PersistBatch::new();
            for &(offset, len) in ranges {
                batch.add(base + offset, len);
            }
            assert_eq!(batch.distinct_lines(), lines, "{ranges:?}");
            let before = crate::thread_counters();
            batch.commit(pool.backend());
            let flushed = crate::thread_counters().since(&before).lines_flushed;
            assert_eq!(flushed, lines as u64, "{ranges:?}");
            assert!(batch.is_empty());
        }
    }
}
