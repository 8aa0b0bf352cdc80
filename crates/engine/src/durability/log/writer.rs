//! The writer side of the redo log: a worker's [`LogWriter`] appending
//! records to its chain of segments, what the group-commit logger sees of
//! it ([`LogShared`]), and the interface of the segments' storage
//! ([`SegmentStore`]: pool chunks or files).

use super::*;
use crate::error::{DbError, DbResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A record encoded by [`LogWriter::prepare`].
#[derive(Clone, Copy, Debug)]
struct Prepared {
    filler: usize,
    len: usize,
}

/// A segment in a worker's chain.
#[derive(Clone, Copy, Debug)]
pub struct SegmentInfo {
    /// The segment in its store.
    pub id: SegmentId,
    /// Sequence within the worker's chain.
    pub sequence: u64,
    /// Highest epoch of a record in it (0 if none).
    pub max_epoch: u64,
}

/// What the logger thread and truncation see of a worker's log.
#[derive(Default)]
pub struct LogShared {
    /// Address (see `durability::segments`) just past the last complete
    /// record.
    pub tail: AtomicU64,
    /// Address up to which the group-commit logger has made the log durable.
    pub flushed: AtomicU64,
    /// The worker's segments, oldest first; the last is current.
    pub segments: parking_lot::Mutex<Vec<SegmentInfo>>,
    /// The highest segment sequence any writer of this slot started (a
    /// writer rolls to the next sequence on its own, so the next writer of
    /// the slot must start above it: sequences never repeat, and a file
    /// log names its files by them).
    pub last_sequence: AtomicU64,
}

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
    /// torn or invalid one; says where the scan stopped and which valid
    /// records lie beyond that point ([`ScanEnd`]).
    fn scan_segment(&self, segment: &FoundSegment, visit: &mut dyn FnMut(LogRecord)) -> DbResult<ScanEnd>;
    /// The address of `segment`'s first byte, where the store can say (the
    /// pool; `None` for log files).
    fn segment_base(&self, segment: SegmentId) -> Option<u64> {
        let _ = segment;
        None
    }
    /// Visits the valid records of `segment` that lie wholly below
    /// segment-relative `end`, reading neither its header nor any byte at or
    /// beyond `end`: a live segment up to its writer's tail, for the log
    /// gleaner (`group_commit::gleaning`). Log files cannot.
    fn scan_live(&self, segment: &FoundSegment, end: u64, visit: &mut dyn FnMut(LogRecord)) -> DbResult<()> {
        let _ = (segment, end, visit);
        Err(DbError::InvalidConfig("the log gleaner reads a redo log in the pool only".into()))
    }
    /// The segment a damaged header of `segment` claimed, read from its
    /// raw fields (the sequence as stored, the worker of the chunk's
    /// owner), so recovery can tell a header torn while the segment was
    /// started (its chunk holds no record of that segment newer than the
    /// checkpoint) from a damaged header of a segment with records.
    /// `None` where the store cannot say (log files).
    fn claimed_segment(&self, segment: SegmentId) -> Option<FoundSegment> {
        let _ = segment;
        None
    }
    /// Whether the first record slot of `segment` holds a valid record of
    /// it (a cheap probe before a full scan). False for log files.
    fn first_record_valid(&self, segment: &FoundSegment) -> bool {
        let _ = segment;
        false
    }
    /// Records in the header of the segment of `segments` (a worker's
    /// chain, locked by the caller so none is freed meanwhile) that holds
    /// log address `flushed` that its records up to `flushed` are durable
    /// ([`DURABLE_END_AT`]); the next fence makes it durable. Called only
    /// after those records are. A no-op for log files.
    fn record_durable_end(&self, segments: &[SegmentInfo], flushed: u64) {
        let _ = (segments, flushed);
    }
    /// Syncs of log files made since open (0 for the pool).
    fn file_syncs(&self) -> u64 {
        0
    }
    /// Syncs of the log directory made since open (0 for the pool).
    fn directory_syncs(&self) -> u64 {
        0
    }
}

/// A worker's log appender, over the segments of store `S` (the pool by
/// default).
pub struct LogWriter<S: SegmentStore> {
    store: Arc<S>,
    worker: u16,
    mode: LogStoreMode,
    shared: Arc<LogShared>,
    /// The current segment's handle (`None` only while none was started).
    handle: Option<S::Handle>,
    segment_offset: u64,
    segment_size: u64,
    sequence: u64,
    position: u64,
    buffer: Vec<u8>,
    /// Synchronous-log layout (`with_layout`); `None` for group commit.
    layout: Option<LogLayout>,
    /// The record encoded by `prepare`, waiting for its TID.
    prepared: Option<Prepared>,
}

impl<S: SegmentStore> LogWriter<S> {
    /// What this writer's records are sealed with (format 2).
    fn seal_key(&self) -> SealKey {
        SealKey { sequence: self.sequence, worker: Some(self.worker) }
    }

    /// A writer for `worker` in `store`, starting a fresh segment numbered
    /// `sequence`.
    pub fn in_store(
        store: Arc<S>,
        worker: u16,
        mode: LogStoreMode,
        shared: Arc<LogShared>,
        sequence: u64,
    ) -> DbResult<Self> {
        let segment_size = store.segment_size();
        let mut writer = Self {
            store,
            worker,
            mode,
            shared,
            handle: None,
            segment_offset: 0,
            segment_size,
            sequence,
            position: 0,
            buffer: Vec::new(),
            layout: None,
            prepared: None,
        };
        // A new writer of the worker leaves its previous writer's segment:
        // it records how far that one is durable.
        {
            let segments = writer.shared.segments.lock();
            writer.store.record_durable_end(&segments, writer.shared.flushed.load(Ordering::Acquire));
        }
        writer.start_segment(sequence)?;
        Ok(writer)
    }

    fn start_segment(&mut self, sequence: u64) -> DbResult<()> {
        let header = segment_header(self.worker, sequence);
        let segment = self.store.create_segment(self.worker, sequence, &header)?;
        let offset = segment.base;
        self.handle = Some(segment.handle);
        self.segment_offset = offset;
        self.sequence = sequence;
        self.position = SEGMENT_HEADER;
        self.shared.last_sequence.fetch_max(sequence, Ordering::AcqRel);
        self.shared.segments.lock().push(SegmentInfo { id: segment.id, sequence, max_epoch: 0 });
        self.shared.tail.store(offset + SEGMENT_HEADER, Ordering::Release);
        self.shared.flushed.store(offset + SEGMENT_HEADER, Ordering::Release);
        Ok(())
    }

    fn store_bytes(&self, start: u64) -> Result<(), S::Error> {
        let handle = self.handle.as_ref().expect("a writer always has a segment");
        self.store.write(handle, start, &self.buffer, self.mode)
    }

    /// Appends the redo record of `tid`; returns its byte range. With
    /// `Cached` mode nothing is flushed; with `NonTemporal` the caller
    /// fences. An error of the store (a file log's failed write) leaves the
    /// writer where it was: the next record overwrites whatever part of
    /// this one reached the file.
    pub fn append<V: CommitView + ?Sized>(&mut self, tid: u64, writes: &V) -> DbResult<(u64, u64)> {
        self.buffer.clear();
        encode_unsealed(&mut self.buffer, writes, &[]);
        let length = self.buffer.len() as u64;
        debug_assert_eq!(length, record_length(writes));
        let segment_size = self.segment_size;
        if SEGMENT_HEADER + length > segment_size {
            return Err(DbError::OutOfSpace(format!(
                "a redo record of {length} bytes does not fit a log segment of {segment_size} bytes"
            )));
        }
        if self.position + length > segment_size {
            self.roll_segment()?;
        }
        // Sealed for the segment it lands in (the CRC covers the sequence
        // and the worker).
        let key = self.seal_key();
        seal(&mut self.buffer, key, tid);
        let start = self.segment_offset + self.position;
        self.store_bytes(start).map_err(Into::into)?;
        self.position += length;
        let end = start + length;
        if let Some(last) = self.shared.segments.lock().last_mut() {
            last.max_epoch = last.max_epoch.max(crate::storage::record::epoch_of_tid(tid));
        }
        self.shared.tail.store(end, Ordering::Release);
        Ok((start, end))
    }

    /// Closes the current segment durably and opens the next one.
    fn roll_segment(&mut self) -> DbResult<()> {
        let end = self.segment_offset + self.position;
        // `flushed` may still point into an older segment (the group-commit
        // flusher stores the tail it flushed, which can race with a roll), so
        // trust it only inside this segment: an older segment at a higher
        // address would otherwise skip flushing this one entirely.
        let flushed = self.shared.flushed.load(Ordering::Acquire);
        let start = if flushed >= self.segment_offset && flushed <= end { flushed } else { self.segment_offset };
        self.store.sync(&[(start, end)], self.mode).map_err(Into::into)?;
        // The segment left behind records that all of it is durable (made
        // durable by the new segment's header fence).
        self.store.record_durable_end(&self.shared.segments.lock(), end);
        self.start_segment(self.sequence + 1)
    }

    /// Switches this writer to synchronous logging with `layout`: records
    /// are written by [`LogWriter::prepare`] + [`LogWriter::append_prepared`]
    /// and made durable by [`LogWriter::make_durable`].
    pub fn with_layout(mut self, layout: LogLayout) -> Self {
        self.mode = if layout.non_temporal { LogStoreMode::NonTemporal } else { LogStoreMode::Cached };
        self.layout = Some(layout);
        self
    }

    /// Whether [`LogWriter::prepare`] of `writes` fits the current segment
    /// (else it starts a new segment).
    pub fn fits_prepared<V: CommitView + ?Sized>(&self, writes: &V) -> bool {
        self.fits_prepared_reserving(writes, 0)
    }

    /// [`LogWriter::fits_prepared`] with room for `max_dependencies`.
    pub fn fits_prepared_reserving<V: CommitView + ?Sized>(&self, writes: &V, max_dependencies: usize) -> bool {
        let layout = self.layout.unwrap_or(LogLayout::PLAIN);
        let raw = record_length_with(writes, max_dependencies.min(MAX_DEPENDENCIES));
        self.position + layout.filler_before(self.position, raw) + layout.padded_len(raw) <= self.segment_size
    }

    /// Encodes the redo record of `writes` (its TID is filled in by
    /// [`LogWriter::append_prepared`]) with the layout's padding and makes
    /// sure the current segment has room for it, starting the next segment
    /// if not. After `Ok`, `append_prepared` can fail only where the store
    /// can (never for the pool): a synchronous engine prepares before its
    /// commit region so nothing can fail after it installed.
    pub fn prepare<V: CommitView + ?Sized>(&mut self, writes: &V) -> DbResult<()> {
        self.prepare_reserving(writes, 0)
    }

    /// [`LogWriter::prepare`], leaving room in the segment for up to
    /// `max_dependencies` dependency TIDs, which
    /// [`LogWriter::append_prepared_with_dependencies`] adds.
    pub fn prepare_reserving<V: CommitView + ?Sized>(&mut self, writes: &V, max_dependencies: usize) -> DbResult<()> {
        let layout = self.layout.unwrap_or(LogLayout::PLAIN);
        let max_dependencies = max_dependencies.min(MAX_DEPENDENCIES);
        let raw = record_length_with(writes, max_dependencies);
        let len = layout.padded_len(raw);
        let segment_size = self.segment_size;
        let filler = layout.filler_before(self.position, raw);
        if self.position + filler + len > segment_size {
            let fresh = layout.filler_before(SEGMENT_HEADER, raw);
            if SEGMENT_HEADER + fresh + len > segment_size {
                return Err(DbError::OutOfSpace(format!(
                    "a redo record of {len} bytes does not fit a log segment of {segment_size} bytes"
                )));
            }
            self.roll_segment()?;
        }
        self.encode_prepared(writes, &[]);
        Ok(())
    }

    /// Encodes the record of `writes` and `dependencies` at the current
    /// position (the caller made sure it fits).
    fn encode_prepared<V: CommitView + ?Sized>(&mut self, writes: &V, dependencies: &[u64]) {
        let layout = self.layout.unwrap_or(LogLayout::PLAIN);
        let raw = record_length_with(writes, dependencies.len());
        let len = layout.padded_len(raw);
        let filler = layout.filler_before(self.position, raw);
        debug_assert!(self.position + filler + len <= self.segment_size);
        self.buffer.clear();
        if filler > 0 {
            self.buffer.resize(filler as usize, 0);
            self.buffer[0..4].copy_from_slice(&(filler as u32).to_le_bytes());
            self.buffer[20..24].copy_from_slice(&FILLER_MARK.to_le_bytes());
        }
        let start = encode_unsealed(&mut self.buffer, writes, dependencies);
        debug_assert_eq!((self.buffer.len() - start) as u64, raw);
        self.buffer.resize(start + len as usize, 0);
        self.buffer[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
        self.prepared = Some(Prepared { filler: filler as usize, len: len as usize });
    }

    /// [`LogWriter::append_prepared`] of the record prepared for `writes`
    /// by [`LogWriter::prepare_reserving`], with `dependencies` (at most the
    /// number reserved) added.
    pub fn append_prepared_with_dependencies<V: CommitView + ?Sized>(
        &mut self,
        tid: u64,
        writes: &V,
        dependencies: &[u64],
    ) -> Result<(u64, u64), S::Error> {
        debug_assert!(self.prepared.is_some(), "append without prepare");
        if !dependencies.is_empty() {
            // Never longer than the reserved record, so it fits where that
            // one was made to fit (padding and fillers grow with the length).
            self.encode_prepared(writes, dependencies);
        }
        self.append_prepared(tid)
    }

    /// Writes the record of the last [`LogWriter::prepare`] with `tid`
    /// (non-temporally in `NonTemporal` mode), without a fence; returns the
    /// range written. Panics without a prepared record
    /// (a caller bug). On an error of the store the record counts as not
    /// written (the writer stays where it was).
    pub fn append_prepared(&mut self, tid: u64) -> Result<(u64, u64), S::Error> {
        let Prepared { filler, len } = self.prepared.take().expect("append_prepared without prepare");
        let key = self.seal_key();
        if filler > 0 {
            seal(&mut self.buffer[..filler], key, tid);
        }
        seal(&mut self.buffer[filler..filler + len], key, tid);
        let start = self.segment_offset + self.position;
        self.store_bytes(start)?;
        self.position += (filler + len) as u64;
        let end = start + (filler + len) as u64;
        if let Some(last) = self.shared.segments.lock().last_mut() {
            last.max_epoch = last.max_epoch.max(crate::storage::record::epoch_of_tid(tid));
        }
        self.shared.tail.store(end, Ordering::Release);
        Ok((start, end))
    }

    /// Makes `range` (from [`LogWriter::append_prepared`]) durable: for the
    /// pool, flush its lines unless written non-temporally, then fence
    /// (other non-temporal stores of this thread made before are durable
    /// too); for a file, `fdatasync`.
    pub fn make_durable(&self, range: (u64, u64)) -> Result<(), S::Error> {
        self.store.sync(&[range], self.mode)?;
        self.shared.flushed.store(range.1, Ordering::Release);
        Ok(())
    }

    /// The shared view of this log.
    pub fn shared(&self) -> &Arc<LogShared> {
        &self.shared
    }

    /// The worker (chain) this writer appends to.
    pub fn worker(&self) -> u16 {
        self.worker
    }

    /// Whether the record of `writes` fits the current segment (else the
    /// next [`LogWriter::append`] starts a new segment first).
    pub fn fits<V: CommitView + ?Sized>(&self, writes: &V) -> bool {
        self.position + record_length(writes) <= self.segment_size
    }
}
