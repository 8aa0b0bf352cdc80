//! Many lines, one fence.
//!
//! Protocols that persist several scattered ranges at one point (a commit's
//! log record and its tuples) collect them here; `commit` flushes each
//! distinct line once and issues a single fence. Flushing a line twice before
//! one fence is a performance bug the batch removes.

use crate::backend::PmBackend;
use crate::cpu::CACHE_LINE;

/// A set of line-aligned ranges waiting for one fence.
#[derive(Default, Debug)]
pub struct PersistBatch {
    lines: Vec<u64>,
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
        let mut line = offset & !(CACHE_LINE - 1);
        while line < offset + len {
            self.lines.push(line);
            line += CACHE_LINE;
        }
    }

    /// Number of distinct lines currently batched.
    pub fn distinct_lines(&mut self) -> usize {
        self.lines.sort_unstable();
        self.lines.dedup();
        self.lines.len()
    }

    /// Whether nothing is batched.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Flushes each distinct line once, in address order (sequential for the
    /// media), without fencing. Leaves the batch empty.
    pub fn flush<B: PmBackend>(&mut self, backend: &B) {
        self.distinct_lines();
        // Coalesce adjacent lines into ranges so the backend's loop is tight.
        let mut index = 0;
        while index < self.lines.len() {
            let start = self.lines[index];
            let mut end = start + CACHE_LINE;
            index += 1;
            while index < self.lines.len() && self.lines[index] == end {
                end += CACHE_LINE;
                index += 1;
            }
            backend.flush(start, end - start);
        }
        self.lines.clear();
    }

    /// Flushes everything and issues one fence.
    pub fn commit<B: PmBackend>(&mut self, backend: &B) {
        self.flush(backend);
        backend.fence();
    }
}
