//! The redo log's segments in pool chunks ([`PoolSegments`]: made durable
//! with flushes and a fence), the PM log of `group-commit` and the DBXN
//! family. Where segments live is the one thing that differs between it and
//! the file log of `dbx-disk` and `dbx-naive:medium=disk`
//! (`durability::file_log`: one file per segment, made durable with
//! `fdatasync`). The record format, the writer
//! ([`crate::durability::log::LogWriter`]) and the store interface
//! ([`SegmentStore`]) are in `durability::log`; group commit, truncation and
//! recovery (`durability::group_commit`) are written once over that
//! interface. (The interface lives with the format so that this module
//! depends on the log and never the other way round.)
//!
//! *Addresses.* A store hands out segments at *addresses*: the segment's
//! bytes are `[base, base + segment_size)`, with `base` a non-zero multiple
//! of the segment size that no other live segment has. For the pool this is
//! the chunk's pool offset; a file store numbers its files and uses
//! `number * segment_size`. So the writer and the group-commit flusher keep
//! one `u64` per position whatever the medium, and an address alone says
//! which segment it is in.
//!
//! Explained in docs/engines/group-commit.md.

use crate::durability::log::{
    self, FoundSegment, LogShared, LogStoreMode, LogWriter, NewSegment, SegmentId, SegmentStore, LOG_CHUNK_KIND,
    SEGMENT_HEADER,
};
use crate::error::{DbError, DbResult};
use pmtx_pm::{ChunkId, ChunkOwner, PmBackend, Pool, PoolError};
use std::sync::Arc;

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

    fn segment_base(&self, segment: SegmentId) -> Option<u64> {
        Some(self.pool.chunk_offset(ChunkId(segment.0)))
    }

    fn scan_live(&self, segment: &FoundSegment, end: u64, visit: &mut dyn FnMut(log::LogRecord)) -> DbResult<()> {
        let base = self.pool.chunk_offset(ChunkId(segment.id.0));
        let end = end.min(self.pool.geometry().chunk_size);
        log::scan_records(
            segment,
            end,
            |position, bytes| {
                if position + bytes.len() as u64 > end {
                    return false;
                }
                self.pool.backend().read(base + position, bytes);
                true
            },
            visit,
        );
        Ok(())
    }

    fn find_segments(&self) -> DbResult<(Vec<FoundSegment>, Vec<SegmentId>)> {
        Ok(log::find_segments(&self.pool))
    }

    fn scan_segment(&self, segment: &FoundSegment, visit: &mut dyn FnMut(log::LogRecord)) -> DbResult<log::ScanEnd> {
        Ok(log::scan_segment(&self.pool, segment, visit))
    }

    fn claimed_segment(&self, segment: SegmentId) -> Option<FoundSegment> {
        log::claimed_segment(&self.pool, segment)
    }

    fn first_record_valid(&self, segment: &FoundSegment) -> bool {
        log::first_record_valid(&self.pool, segment)
    }

    fn record_durable_end(&self, segments: &[log::SegmentInfo], flushed: u64) {
        let size = self.pool.geometry().chunk_size;
        let Some(base) = segments
            .iter()
            .rev()
            .map(|segment| self.pool.chunk_offset(ChunkId(segment.id.0)))
            .find(|&base| flushed > base + SEGMENT_HEADER && flushed <= base + size)
        else {
            return;
        };
        let backend = self.pool.backend();
        let mut header = [0u8; 32];
        backend.read(base, &mut header);
        let word = log::durable_end_word(&header, flushed - base);
        let at = base + log::DURABLE_END_AT;
        if backend.load_u64(at) != word {
            backend.store_u64(at, word);
            backend.flush(at, 8);
        }
    }
}

impl<B: PmBackend> LogWriter<PoolSegments<B>> {
    /// A writer for `worker` in `pool`, starting a fresh segment numbered
    /// `sequence`.
    pub fn new(
        pool: Arc<Pool<B>>,
        worker: u16,
        mode: LogStoreMode,
        shared: Arc<LogShared>,
        sequence: u64,
    ) -> DbResult<Self> {
        Self::in_store(Arc::new(PoolSegments::new(pool)), worker, mode, shared, sequence)
    }
}
