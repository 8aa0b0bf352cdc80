//! Per-thread persistence counters.
//!
//! Counters are thread-local on purpose: a global atomic would put a shared
//! cache line on every flush of every thread and distort the very costs being
//! measured. The benchmark driver reads and resets them from each worker
//! thread (`thread_counters`, `reset_thread_counters`) and sums the results.
//!
//! Explained in docs/media-model.md.

use std::cell::Cell;

/// A snapshot of one thread's persistence work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmCounters {
    /// Cache lines written back by a flush instruction (or, in eADR mode,
    /// lines whose flush was elided are not counted).
    pub lines_flushed: u64,
    /// Store fences issued.
    pub fences: u64,
    /// Bytes written with non-temporal stores.
    pub non_temporal_bytes: u64,
    /// Bytes stored into the pool by any kind of store.
    pub bytes_written: u64,
    /// 256-byte media blocks entered by flushed or non-temporal lines: a line
    /// in the same block as the previous persisted line is not counted again.
    pub blocks_256_written: u64,
    /// Nanoseconds spent in emulated media stalls (the `emulated` backend).
    pub stall_ns: u64,
    /// `msync` calls made to reach power-failure durability on non-DAX files.
    pub msyncs: u64,
    /// 256-byte XPLines the `emulated` media model wrote to the medium
    /// (write-backs from its write-combining buffers).
    pub media_xplines_written: u64,
    /// XPLines the media model read from the medium (reads, reads for
    /// ownership, read-modify-writes).
    pub media_xplines_read: u64,
    /// Reads of pool memory: one per `read`, `load_u64` or `read_volatile`
    /// call (an access to one object, however many lines it spans).
    pub reads: u64,
    /// 64-byte lines those reads touched.
    pub lines_read: u64,
    /// Bytes those reads copied.
    pub bytes_read: u64,
    /// Writes to pool memory: one per `write`, `store_u64`, successful
    /// `compare_exchange_u64`, `write_non_temporal` or `write_volatile`
    /// call.
    pub writes: u64,
    /// 64-byte lines those writes touched.
    pub lines_written: u64,
}

impl PmCounters {
    /// Field-wise sum, for aggregating worker threads.
    pub fn add(&mut self, other: &PmCounters) {
        self.lines_flushed += other.lines_flushed;
        self.fences += other.fences;
        self.non_temporal_bytes += other.non_temporal_bytes;
        self.bytes_written += other.bytes_written;
        self.blocks_256_written += other.blocks_256_written;
        self.stall_ns += other.stall_ns;
        self.msyncs += other.msyncs;
        self.media_xplines_written += other.media_xplines_written;
        self.media_xplines_read += other.media_xplines_read;
        self.reads += other.reads;
        self.lines_read += other.lines_read;
        self.bytes_read += other.bytes_read;
        self.writes += other.writes;
        self.lines_written += other.lines_written;
    }

    /// Field-wise difference `self - earlier` (saturating).
    pub fn since(&self, earlier: &PmCounters) -> PmCounters {
        PmCounters {
            lines_flushed: self.lines_flushed.saturating_sub(earlier.lines_flushed),
            fences: self.fences.saturating_sub(earlier.fences),
            non_temporal_bytes: self.non_temporal_bytes.saturating_sub(earlier.non_temporal_bytes),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            blocks_256_written: self.blocks_256_written.saturating_sub(earlier.blocks_256_written),
            stall_ns: self.stall_ns.saturating_sub(earlier.stall_ns),
            msyncs: self.msyncs.saturating_sub(earlier.msyncs),
            media_xplines_written: self.media_xplines_written.saturating_sub(earlier.media_xplines_written),
            media_xplines_read: self.media_xplines_read.saturating_sub(earlier.media_xplines_read),
            reads: self.reads.saturating_sub(earlier.reads),
            lines_read: self.lines_read.saturating_sub(earlier.lines_read),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            writes: self.writes.saturating_sub(earlier.writes),
            lines_written: self.lines_written.saturating_sub(earlier.lines_written),
        }
    }
}

/// Per-thread live counters plus the write-stream state the latency model
/// needs (which 256 B block the previous persisted line was in, and how many
/// sequential and random lines wait for the next fence).
pub(crate) struct ThreadCounters {
    pub lines_flushed: Cell<u64>,
    pub fences: Cell<u64>,
    pub non_temporal_bytes: Cell<u64>,
    pub bytes_written: Cell<u64>,
    pub blocks_256_written: Cell<u64>,
    pub stall_ns: Cell<u64>,
    pub msyncs: Cell<u64>,
    pub media_xplines_written: Cell<u64>,
    pub media_xplines_read: Cell<u64>,
    pub reads: Cell<u64>,
    pub lines_read: Cell<u64>,
    pub bytes_read: Cell<u64>,
    pub writes: Cell<u64>,
    pub lines_written: Cell<u64>,
    /// Absolute address / 256 of the last persisted line, `u64::MAX` if none.
    pub last_block: Cell<u64>,
    /// Lines since the last fence that continued a sequential stream.
    pub pending_sequential_lines: Cell<u64>,
    /// Lines since the last fence that started a new stream.
    pub pending_random_lines: Cell<u64>,
}

thread_local! {
    pub(crate) static COUNTERS: ThreadCounters = const {
        ThreadCounters {
            lines_flushed: Cell::new(0),
            fences: Cell::new(0),
            non_temporal_bytes: Cell::new(0),
            bytes_written: Cell::new(0),
            blocks_256_written: Cell::new(0),
            stall_ns: Cell::new(0),
            msyncs: Cell::new(0),
            media_xplines_written: Cell::new(0),
            media_xplines_read: Cell::new(0),
            reads: Cell::new(0),
            lines_read: Cell::new(0),
            bytes_read: Cell::new(0),
            writes: Cell::new(0),
            lines_written: Cell::new(0),
            last_block: Cell::new(u64::MAX),
            pending_sequential_lines: Cell::new(0),
            pending_random_lines: Cell::new(0),
        }
    };
}

#[inline(always)]
pub(crate) fn bump(cell: &Cell<u64>, amount: u64) {
    cell.set(cell.get().wrapping_add(amount));
}

/// 64-byte lines `[offset, offset + len)` overlaps (0 for an empty range).
#[inline(always)]
pub(crate) fn lines_spanned(offset: u64, len: u64) -> u64 {
    if len == 0 {
        0
    } else {
        (offset + len - 1) / 64 - offset / 64 + 1
    }
}

/// Counts one read of `len` bytes at `offset`.
#[inline(always)]
pub(crate) fn count_read(counters: &ThreadCounters, offset: u64, len: u64) {
    bump(&counters.reads, 1);
    bump(&counters.lines_read, lines_spanned(offset, len));
    bump(&counters.bytes_read, len);
}

/// Counts one write of `len` bytes at `offset` (not its bytes: the callers
/// count those as they always did).
#[inline(always)]
pub(crate) fn count_write(counters: &ThreadCounters, offset: u64, len: u64) {
    bump(&counters.writes, 1);
    bump(&counters.lines_written, lines_spanned(offset, len));
}

/// Records that the line at absolute address `line_address` is on its way to
/// the medium (flushed or written non-temporally).
#[inline(always)]
pub(crate) fn note_persisted_line(counters: &ThreadCounters, line_address: u64) {
    let block = line_address >> 8;
    let last = counters.last_block.get();
    if block == last || block == last.wrapping_add(1) {
        bump(&counters.pending_sequential_lines, 1);
    } else {
        bump(&counters.pending_random_lines, 1);
    }
    if block != last {
        bump(&counters.blocks_256_written, 1);
    }
    counters.last_block.set(block);
}

/// The calling thread's counters.
pub fn thread_counters() -> PmCounters {
    COUNTERS.with(|c| PmCounters {
        lines_flushed: c.lines_flushed.get(),
        fences: c.fences.get(),
        non_temporal_bytes: c.non_temporal_bytes.get(),
        bytes_written: c.bytes_written.get(),
        blocks_256_written: c.blocks_256_written.get(),
        stall_ns: c.stall_ns.get(),
        msyncs: c.msyncs.get(),
        media_xplines_written: c.media_xplines_written.get(),
        media_xplines_read: c.media_xplines_read.get(),
        reads: c.reads.get(),
        lines_read: c.lines_read.get(),
        bytes_read: c.bytes_read.get(),
        writes: c.writes.get(),
        lines_written: c.lines_written.get(),
    })
}

/// Resets the calling thread's counters to zero.
pub fn reset_thread_counters() {
    COUNTERS.with(|c| {
        for cell in [
            &c.lines_flushed,
            &c.fences,
            &c.non_temporal_bytes,
            &c.bytes_written,
            &c.blocks_256_written,
            &c.stall_ns,
            &c.msyncs,
            &c.media_xplines_written,
            &c.media_xplines_read,
            &c.reads,
            &c.lines_read,
            &c.bytes_read,
            &c.writes,
            &c.lines_written,
            &c.pending_sequential_lines,
            &c.pending_random_lines,
        ] {
            cell.set(0);
        }
        c.last_block.set(u64::MAX);
    })
}
