//! Where the redo log's segments live: the one thing that differs between
//! the PM log of `group-commit` and the DBXN family ([`PoolSegments`]: pool
//! chunks, made durable with flushes and a fence) and the file log of
//! `dbx-disk` and `dbx-naive:medium=disk` (`durability::file_log`: one file
//! per segment, made durable with `fdatasync`). The record format, the
//! writer ([`crate::durability::log::LogWriter`]), group commit, truncation
//! and recovery (`durability::group_commit`) are written once over this
//! trait.
//!
//! *Addresses.* A store hands out segments at *addresses*: the segment's
//! bytes are `[base, base + segment_size)`, with `base` a non-zero multiple
//! of the segment size that no other live segment has. For the pool this is
//! the chunk's pool offset; a file store numbers its files and uses
//! `number * segment_size`. So the writer and the group-commit flusher keep
//! one `u64` per position whatever the medium, and an address alone says
//! which segment it is in.

use crate::durability::log::{self, FoundSegment, LogStoreMode, LOG_CHUNK_KIND, SEGMENT_HEADER};
use crate::error::{DbError, DbResult};
use pmtx_pm::{ChunkId, ChunkOwner, PmBackend, Pool, PoolError};
use std::sync::Arc;

/// A segment's identity in its store (a chunk number, a file number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId(pub u64);

/// A new segment: its identity, its base address and the handle its writer
/// appends through.
pub struct NewSegment<H> {
    /// Identity (for truncation).
    pub id: SegmentId,
    /// Address of its first byte.
    pub base: u64,
    /// What the writer writes through.
    pub handle: H,
}

/// The storage of the redo log's segments.
pub trait SegmentStore: Send + Sync + 'static {
    /// Error of a store or a sync: [`std::convert::Infallible`] for the
    /// pool (stores into PM cannot fail), [`DbError`] for files.
    type Error: Into<DbError> + std::fmt::Debug;
    /// What a writer holds to append to its current segment.
    type Handle: Send;
    /// Whether segments take pool chunks, so a new one must leave the
    /// chunks reserved for the next checkpoint (which frees the log).
    const IN_POOL: bool;

    /// Bytes of a segment, header included.
    fn segment_size(&self) -> u64;
    /// Starts a segment of `worker` holding `header` followed by 8 zero
    /// bytes (a record slot that cannot be mistaken for a record). The pool
    /// persists the header at once; a file's header becomes durable with
    /// the first sync of the file, which comes before any record in it
    /// counts.
    fn create_segment(&self, worker: u16, sequence: u64, header: &[u8]) -> DbResult<NewSegment<Self::Handle>>;
    /// Stores `bytes` at `address` of the segment `handle` writes.
    fn write(&self, handle: &Self::Handle, address: u64, bytes: &[u8], mode: LogStoreMode) -> Result<(), Self::Error>;
    /// Makes every byte of every range durable (each range lies inside one
    /// segment). The pool flushes the lines of ranges written with ordinary
    /// stores and issues one fence; files `fdatasync` each file once (and
    /// the directory first, when a file was created since it was last
    /// synced). A range of a segment truncated meanwhile is skipped: a
    /// writer makes a segment durable before it leaves it, and truncation
    /// only frees segments their writers left.
    fn sync(&self, ranges: &[(u64, u64)], mode: LogStoreMode) -> Result<(), Self::Error>;
    /// Frees `segments` (truncation, recovery, clean close).
    fn free(&self, segments: &[SegmentId]);
    /// Every segment with a valid header, grouped by worker and ordered by
    /// sequence, and the segments whose header is damaged (a crash while
    /// one was being started), to be freed.
    fn find_segments(&self) -> DbResult<(Vec<FoundSegment>, Vec<SegmentId>)>;
    /// Visits the valid records of `segment` in order, up to the first
    /// torn or invalid one.
    fn scan_segment(&self, segment: &FoundSegment, visit: &mut dyn FnMut(log::LogRecord)) -> DbResult<()>;
    /// Syncs of log files made since open (0 for the pool).
    fn file_syncs(&self) -> u64 {
        0
    }
    /// Syncs of the log directory made since open (0 for the pool).
    fn directory_syncs(&self) -> u64 {
        0
    }
}

/// The redo log in pool chunks (PM).
pub struct PoolSegments<B: PmBackend> {
    pool: Arc<Pool<B>>,
}

impl<B: PmBackend> PoolSegments<B> {
    /// The segments of `pool`.
    pub fn new(pool: Arc<Pool<B>>) -> Self {
        Self { pool }
    }
}

fn owner(worker: u16) -> ChunkOwner {
    ChunkOwner::compose(LOG_CHUNK_KIND, worker as u32, 0)
}

fn out_of_space(error: PoolError) -> DbError {
    match error {
        PoolError::Full { .. } => DbError::OutOfSpace(format!("no chunk left for a log segment: {error}")),
        other => DbError::Pool(other),
    }
}

impl<B: PmBackend> SegmentStore for PoolSegments<B> {
    type Error = std::convert::Infallible;
    type Handle = ();
    const IN_POOL: bool = true;

    fn segment_size(&self) -> u64 {
        self.pool.geometry().chunk_size
    }

    fn create_segment(&self, worker: u16, _sequence: u64, header: &[u8]) -> DbResult<NewSegment<()>> {
        debug_assert_eq!(header.len() as u64, SEGMENT_HEADER);
        let chunk = self.pool.allocate_chunk(owner(worker), false).map_err(out_of_space)?;
        let offset = self.pool.chunk_offset(chunk);
        // Zero the first record slot so a reused chunk's old bytes right
        // after the header cannot be mistaken for a record header length.
        let backend = self.pool.backend();
        backend.write(offset, header);
        backend.write_zeros(offset + SEGMENT_HEADER, 8);
        backend.persist(offset, SEGMENT_HEADER + 8);
        Ok(NewSegment { id: SegmentId(chunk.0), base: offset, handle: () })
    }

    fn write(&self, _handle: &(), address: u64, bytes: &[u8], mode: LogStoreMode) -> Result<(), Self::Error> {
        let backend = self.pool.backend();
        match mode {
            LogStoreMode::Cached => backend.write(address, bytes),
            LogStoreMode::NonTemporal => backend.write_non_temporal(address, bytes),
        }
        Ok(())
    }

    fn sync(&self, ranges: &[(u64, u64)], mode: LogStoreMode) -> Result<(), Self::Error> {
        let backend = self.pool.backend();
        if mode == LogStoreMode::Cached {
            for &(start, end) in ranges {
                if end > start {
                    backend.flush(start, end - start);
                }
            }
        }
        // One fence for every range (group commit: for every worker).
        backend.fence();
        Ok(())
    }

    fn free(&self, segments: &[SegmentId]) {
        for segment in segments {
            self.pool.free_chunk(ChunkId(segment.0));
        }
    }

    fn find_segments(&self) -> DbResult<(Vec<FoundSegment>, Vec<SegmentId>)> {
        Ok(log::find_segments(&self.pool))
    }

    fn scan_segment(&self, segment: &FoundSegment, visit: &mut dyn FnMut(log::LogRecord)) -> DbResult<()> {
        log::scan_segment(&self.pool, segment, visit);
        Ok(())
    }
}
