//! The redo log in the pool, shared by every log-based engine
//! (group-commit now; dbx-naive, dbxn, sp3 use the same format).
//!
//! Each worker appends to its own chain of segments. A segment is one pool
//! chunk owned by `ChunkOwner::compose(LOG_CHUNK_KIND, worker, 0)`:
//!
//! ```text
//! segment:  [0..64)   header: magic u64 "PMTXLOG2", sequence u64, worker u64,
//!                     reserved, crc32 of bytes 0..28 at 28
//!           [64..)    records, 8-byte aligned, until the first invalid one
//! record:   0  u32 total length (multiple of 8, >= 24)
//!           4  u32 crc32 of (segment sequence LE ++ worker u16 LE ++
//!                  bytes 8..total)
//!           8  u64 tid (epoch = tid >> 32)
//!           16 u32 write count
//!           20 u32 dependency count n (0 but for the SP^3 family; "FILL"
//!                  in a filler record)
//!           24 n u64 dependency TIDs (sp3: the transactions this one must
//!                  not survive without)
//!           .. writes: u32 table, u32 value length (u32::MAX = delete),
//!                      u16 key length, 6 reserved bytes, key, value
//!           .. zero padding to a multiple of 8
//! ```
//!
//! Synchronous writers (the DBXN family, [`LogLayout`]) pad records with
//! zero bytes inside the record's total length, and may put a *filler*
//! record (no writes, reserved word "FILL") before a record so that it
//! starts on a 256-byte boundary; scans skip fillers.
//!
//! The CRC covers the segment's sequence number and its worker, so stale
//! records left in a reused chunk never validate: a (worker, sequence) pair
//! names one segment in the pool's whole life (sequences grow per worker,
//! and every open starts a new incarnation above all earlier ones). Recovery
//! reads each segment's records in order and stops at the first record
//! whose length or CRC is wrong: a torn record (and anything after it) was
//! never acknowledged, and the bytes after the last record (whatever a
//! reused chunk held there) never validate either, so a record needs no
//! terminator after it.
//!
//! Format 1 ("PMTXLOG1", written before the worker was sealed in) sealed
//! over the sequence alone; two workers' chains share sequence numbers, so
//! its writers followed every record with 8 zero bytes. Recovery still
//! reads it.

use crate::error::{DbError, DbResult};
use crate::storage::commit_view::CommitView;
use pmtx_pm::{ChunkId, PmBackend, Pool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Chunk-owner kind of log segments.
pub const LOG_CHUNK_KIND: u16 = 0x10;
const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"PMTXLOG2");
const SEGMENT_MAGIC_V1: u64 = u64::from_le_bytes(*b"PMTXLOG1");

/// How a segment's records are sealed (module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentFormat {
    /// "PMTXLOG1": the CRC covers the sequence.
    V1,
    /// "PMTXLOG2": the CRC covers the sequence and the worker.
    V2,
}

/// What a record's CRC covers besides its bytes: its segment's identity.
#[derive(Clone, Copy, Debug)]
struct SealKey {
    sequence: u64,
    /// `None` in format 1.
    worker: Option<u16>,
}

impl SealKey {
    fn hasher(&self) -> crc32fast::Hasher {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.sequence.to_le_bytes());
        if let Some(worker) = self.worker {
            hasher.update(&worker.to_le_bytes());
        }
        hasher
    }
}
/// Bytes of the segment header.
pub const SEGMENT_HEADER: u64 = 64;
const RECORD_HEADER: usize = 24;
const WRITE_HEADER: usize = 16;
const DELETE_MARK: u32 = u32::MAX;
/// Most dependencies one record may carry (one per other worker suffices).
pub const MAX_DEPENDENCIES: usize = crate::storage::record::SP3_MAX_WORKERS;

/// How a writer stores records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStoreMode {
    /// Ordinary stores; someone flushes the range later (group commit).
    Cached,
    /// Non-temporal stores; durable at the writer's next fence.
    NonTemporal,
}

/// Marks a filler record (reserved word at +20, zero writes): padding that
/// lets the next record start on a 256-byte boundary. Scans skip it.
const FILLER_MARK: u32 = u32::from_le_bytes(*b"FILL");
/// Records below this size are "small" (DBXN §3.4).
const SMALL_RECORD: u64 = 256;
const LINE: u64 = 64;
const XPLINE: u64 = 256;

/// NVM-friendly writing of synchronous log records (DBXN §3.4), each
/// switchable; [`LogWriter::with_layout`]. Padding is part of the record
/// (its total length grows; the CRC covers the zero bytes), and the gap
/// before an aligned large record is a *filler* record (zero writes, marked
/// in its reserved word), so `scan_segment` keeps working unchanged in
/// spirit: it walks records by their lengths and skips fillers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogLayout {
    /// Non-temporal stores then one fence, instead of ordinary stores, a
    /// flush of each line and a fence.
    pub non_temporal: bool,
    /// A record under 256 bytes is padded to whole 64-byte lines (with every
    /// record so padded, each one starts on a line boundary).
    pub pad_small_to_line: bool,
    /// A record of 256 bytes or more starts on a 256-byte boundary (the
    /// Optane XPLine) and is padded to a multiple of 256 bytes.
    pub align_large_to_256: bool,
}

impl LogLayout {
    /// Every optimisation on (the DBXN default).
    pub const NVM: LogLayout = LogLayout { non_temporal: true, pad_small_to_line: true, align_large_to_256: true };
    /// Every optimisation off: ordinary stores + flush, 8-byte packing.
    pub const PLAIN: LogLayout = LogLayout { non_temporal: false, pad_small_to_line: false, align_large_to_256: false };

    /// Total length of a record of `raw` encoded bytes.
    pub fn padded_len(&self, raw: u64) -> u64 {
        if raw < SMALL_RECORD {
            if self.pad_small_to_line {
                raw.next_multiple_of(LINE)
            } else {
                raw
            }
        } else if self.align_large_to_256 {
            raw.next_multiple_of(XPLINE)
        } else {
            raw
        }
    }

    /// Bytes of filler before a record of `raw` encoded bytes at `position`.
    pub fn filler_before(&self, position: u64, raw: u64) -> u64 {
        if raw < SMALL_RECORD || !self.align_large_to_256 {
            return 0;
        }
        let mut gap = (XPLINE - position % XPLINE) % XPLINE;
        if gap != 0 && gap < RECORD_HEADER as u64 {
            gap += XPLINE;
        }
        gap
    }
}

impl Default for LogLayout {
    fn default() -> Self {
        Self::NVM
    }
}

/// A record encoded by [`LogWriter::prepare`].
#[derive(Clone, Copy, Debug)]
struct Prepared {
    filler: usize,
    len: usize,
}

fn is_filler(bytes: &[u8]) -> bool {
    bytes.len() >= RECORD_HEADER
        && u32::from_le_bytes(bytes[16..20].try_into().expect("4")) == 0
        && u32::from_le_bytes(bytes[20..24].try_into().expect("4")) == FILLER_MARK
}

fn seal(buffer: &mut [u8], key: SealKey, tid: u64) {
    buffer[8..16].copy_from_slice(&tid.to_le_bytes());
    let mut hasher = key.hasher();
    hasher.update(&buffer[8..]);
    let crc = hasher.finalize();
    buffer[4..8].copy_from_slice(&crc.to_le_bytes());
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

/// The 64-byte header of segment `sequence` of `worker`.
fn segment_header(worker: u16, sequence: u64) -> [u8; SEGMENT_HEADER as usize] {
    let mut header = [0u8; SEGMENT_HEADER as usize];
    header[0..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
    header[8..16].copy_from_slice(&sequence.to_le_bytes());
    header[16..24].copy_from_slice(&(worker as u64).to_le_bytes());
    let crc = crc32fast::hash(&header[0..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The worker, sequence and format of a segment header, or `None` when the
/// header is damaged (bad magic or CRC, or a worker beyond the u16 writers).
pub fn parse_segment_header(header: &[u8]) -> Option<(u16, u64, SegmentFormat)> {
    let header = header.get(0..32)?;
    let magic = u64::from_le_bytes(header[0..8].try_into().ok()?);
    let format = match magic {
        SEGMENT_MAGIC => SegmentFormat::V2,
        SEGMENT_MAGIC_V1 => SegmentFormat::V1,
        _ => return None,
    };
    let crc = u32::from_le_bytes(header[28..32].try_into().ok()?);
    let worker = u64::from_le_bytes(header[16..24].try_into().ok()?);
    if crc != crc32fast::hash(&header[0..28]) || worker > u64::from(u16::MAX) {
        return None;
    }
    Some((worker as u16, u64::from_le_bytes(header[8..16].try_into().ok()?), format))
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

/// Encoded length of the redo record of `writes` (as `encode_record` makes it).
pub fn record_length<V: CommitView + ?Sized>(writes: &V) -> u64 {
    record_length_with(writes, 0)
}

/// Encoded length of the redo record of `writes` with `dependencies` TIDs.
pub fn record_length_with<V: CommitView + ?Sized>(writes: &V, dependencies: usize) -> u64 {
    let body: usize =
        writes.writes().map(|write| WRITE_HEADER + write.key.len() + write.value.map_or(0, <[u8]>::len)).sum();
    ((RECORD_HEADER + 8 * dependencies + body) as u64).next_multiple_of(8)
}

/// Appends the redo record of `writes` to `buffer`, its length field set and
/// its TID and CRC left for [`seal`]; returns where it starts. The record
/// is encoded once, straight from the write set's arena.
fn encode_unsealed<V: CommitView + ?Sized>(buffer: &mut Vec<u8>, writes: &V, dependencies: &[u64]) -> usize {
    debug_assert!(dependencies.len() <= MAX_DEPENDENCIES);
    let start = buffer.len();
    buffer.resize(start + RECORD_HEADER, 0);
    buffer[start + 16..start + 20].copy_from_slice(&(writes.write_count() as u32).to_le_bytes());
    buffer[start + 20..start + 24].copy_from_slice(&(dependencies.len() as u32).to_le_bytes());
    for dependency in dependencies {
        buffer.extend_from_slice(&dependency.to_le_bytes());
    }
    for write in writes.writes() {
        buffer.extend_from_slice(&write.table.0.to_le_bytes());
        let value_len = write.value.map_or(DELETE_MARK, |v| v.len() as u32);
        buffer.extend_from_slice(&value_len.to_le_bytes());
        buffer.extend_from_slice(&(write.key.len() as u16).to_le_bytes());
        buffer.extend_from_slice(&[0u8; 6]);
        buffer.extend_from_slice(write.key);
        if let Some(value) = write.value {
            buffer.extend_from_slice(value);
        }
    }
    buffer.resize(start + (buffer.len() - start).next_multiple_of(8), 0);
    let total = (buffer.len() - start) as u32;
    buffer[start..start + 4].copy_from_slice(&total.to_le_bytes());
    start
}

/// Reseals every record of a segment's bytes (as far as their lengths
/// chain) for the segment its header names, and recomputes the header's
/// CRC: a mutated segment whose records the parsers then read past their
/// checksums. For fuzzing.
pub fn reseal_segment(bytes: &mut [u8]) {
    if bytes.len() < SEGMENT_HEADER as usize {
        return;
    }
    let crc = crc32fast::hash(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    let sequence = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let worker = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let key = SealKey { sequence, worker: u16::try_from(worker).ok() };
    let mut at = SEGMENT_HEADER as usize;
    while at + RECORD_HEADER <= bytes.len() {
        let total = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if total < RECORD_HEADER || at + total > bytes.len() {
            break;
        }
        let tid = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
        seal(&mut bytes[at..at + total], key, tid);
        at += total;
    }
}

/// The whole record of `writes` with `tid`, sealed for segment `sequence`
/// of `worker` (tests).
#[cfg(test)]
fn encode_record<V: CommitView + ?Sized>(buffer: &mut Vec<u8>, sequence: u64, worker: u16, tid: u64, writes: &V) {
    buffer.clear();
    encode_unsealed(buffer, writes, &[]);
    seal(buffer, SealKey { sequence, worker: Some(worker) }, tid);
}

/// One write of a decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogWrite {
    /// Table id.
    pub table: u32,
    /// Key.
    pub key: Vec<u8>,
    /// Value, `None` for a delete.
    pub value: Option<Vec<u8>>,
}

/// A decoded redo record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Commit TID.
    pub tid: u64,
    /// The writes.
    pub writes: Vec<LogWrite>,
    /// TIDs of the transactions this one depends on (SP^3 family).
    pub dependencies: Vec<u64>,
}

/// A segment found at recovery.
#[derive(Clone, Copy, Debug)]
pub struct FoundSegment {
    /// Owning worker.
    pub worker: u16,
    /// The segment in its store.
    pub id: SegmentId,
    /// Sequence.
    pub sequence: u64,
    /// How its records are sealed.
    pub format: SegmentFormat,
}

impl FoundSegment {
    fn seal_key(&self) -> SealKey {
        SealKey {
            sequence: self.sequence,
            worker: match self.format {
                SegmentFormat::V1 => None,
                SegmentFormat::V2 => Some(self.worker),
            },
        }
    }
}

/// Offset in a segment header of its *durable end* word: `end u32 |
/// crc32(header bytes 0..32 ++ end) u32`, the segment-relative address up
/// to which its records were durable when the log was last flushed (0:
/// never recorded, as in segments of earlier builds; the header CRC at 28
/// covers bytes 0..28 only, so earlier builds read such segments as
/// before). A scan that stops before it met damage, not the end of the
/// log.
pub const DURABLE_END_AT: u64 = 32;

/// The durable-end word for `header` (bytes 0..32 of a segment) and `end`.
pub fn durable_end_word(header: &[u8], end: u64) -> u64 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[..32]);
    hasher.update(&(end as u32).to_le_bytes());
    (end & u64::from(u32::MAX)) | (u64::from(hasher.finalize()) << 32)
}

/// The durable end a segment header records: `Ok(None)` if none,
/// `Err(word)` if the word fails its CRC.
pub fn parse_durable_end(header: &[u8]) -> Result<Option<u64>, u64> {
    let word = u64::from_le_bytes(header[32..40].try_into().expect("8 bytes"));
    if word == 0 {
        return Ok(None);
    }
    let end = word & u64::from(u32::MAX);
    if durable_end_word(header, end) == word {
        Ok(Some(end))
    } else {
        Err(word)
    }
}

/// How a segment scan ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanEnd {
    /// Where the scan met a record that is not valid (torn, damaged, or
    /// stale bytes of the chunk's earlier use: the normal end of a
    /// segment that is not full); `None` if it reached the segment's end.
    pub stopped_at: Option<u64>,
    /// TIDs of valid records of this segment found beyond `stopped_at`
    /// (at most [`MAX_LATER_RECORDS`]). Records of a segment are sealed
    /// with its sequence, which no other segment had, so such a record was
    /// written into this segment after the invalid one: the invalid one is
    /// a damaged record, not the end of the log, if the later one was
    /// durable.
    pub later: Vec<u64>,
    /// The durable end the segment's header records ([`DURABLE_END_AT`]):
    /// `Ok(None)` if none, `Err(word)` if the word is damaged.
    pub durable_end: Result<Option<u64>, u64>,
}

impl Default for ScanEnd {
    fn default() -> Self {
        Self { stopped_at: None, later: Vec::new(), durable_end: Ok(None) }
    }
}

/// Most later records [`ScanEnd::later`] lists.
pub const MAX_LATER_RECORDS: usize = 64;

/// Every log segment in the pool with a valid header, grouped by worker and
/// ordered by sequence. Segments with a damaged header (a crash while one
/// was being started) are returned separately for freeing.
pub fn find_segments<B: PmBackend>(pool: &Pool<B>) -> (Vec<FoundSegment>, Vec<SegmentId>) {
    let mut found = Vec::new();
    let mut broken = Vec::new();
    for (chunk, chunk_owner) in pool.owned_chunks() {
        if chunk_owner.kind() != LOG_CHUNK_KIND {
            continue;
        }
        let mut header = [0u8; 32];
        pool.backend().read(pool.chunk_offset(chunk), &mut header);
        // Writers are numbered by u16 (the chunk owner's group): a larger
        // owner group or worker field is damage, not another worker's chain.
        match parse_segment_header(&header) {
            Some((worker, sequence, format)) if u64::from(worker) == chunk_owner.group() as u64 => {
                found.push(FoundSegment { worker, id: SegmentId(chunk.0), sequence, format });
            }
            _ => broken.push(SegmentId(chunk.0)),
        }
    }
    found.sort_by_key(|s| (s.worker, s.sequence));
    (found, broken)
}

/// The segment the damaged header of log chunk `segment` claims: its
/// stored sequence and format (by magic; format 2 otherwise) and the
/// worker of the chunk's owner.
pub fn claimed_segment<B: PmBackend>(pool: &Pool<B>, segment: SegmentId) -> Option<FoundSegment> {
    let chunk = ChunkId(segment.0);
    let owner = pool.chunk_owner(chunk)?;
    let mut header = [0u8; 16];
    pool.backend().read(pool.chunk_offset(chunk), &mut header);
    let magic = u64::from_le_bytes(header[0..8].try_into().ok()?);
    let format = if magic == SEGMENT_MAGIC_V1 { SegmentFormat::V1 } else { SegmentFormat::V2 };
    Some(FoundSegment {
        // A group beyond the u16 writers is damage (recovery tries every
        // worker's seal then).
        worker: u16::try_from(owner.group()).unwrap_or(0),
        id: segment,
        sequence: u64::from_le_bytes(header[8..16].try_into().ok()?),
        format,
    })
}

/// Whether the first record slot of `segment` of the pool holds a valid
/// record of it.
pub fn first_record_valid<B: PmBackend>(pool: &Pool<B>, segment: &FoundSegment) -> bool {
    let base = pool.chunk_offset(ChunkId(segment.id.0));
    let size = pool.geometry().chunk_size;
    let mut bytes = Vec::new();
    let mut read = |position: u64, out: &mut [u8]| {
        pool.backend().read(base + position, out);
        true
    };
    record_at(segment, size, SEGMENT_HEADER, &mut bytes, &mut read).is_some()
}

/// Visits the valid records of `segment` of the pool in order.
pub fn scan_segment<B: PmBackend>(pool: &Pool<B>, segment: &FoundSegment, visit: impl FnMut(LogRecord)) -> ScanEnd {
    let base = pool.chunk_offset(ChunkId(segment.id.0));
    let size = pool.geometry().chunk_size;
    let mut end = scan_records(
        segment,
        size,
        |position, bytes| {
            pool.backend().read(base + position, bytes);
            true
        },
        visit,
    );
    let mut header = [0u8; 40];
    pool.backend().read(base, &mut header);
    end.durable_end = parse_durable_end(&header);
    end
}

/// The record at `position` if it is a valid record of `segment`:
/// `Some(None)` for a filler, `Some(Some(record))` for a record, with its
/// length.
fn record_at(
    segment: &FoundSegment,
    size: u64,
    position: u64,
    bytes: &mut Vec<u8>,
    read: &mut impl FnMut(u64, &mut [u8]) -> bool,
) -> Option<(u64, Option<LogRecord>)> {
    let mut head = [0u8; 8];
    if position + RECORD_HEADER as u64 > size || !read(position, &mut head) {
        return None;
    }
    let total = u32::from_le_bytes(head[0..4].try_into().expect("4")) as u64;
    if total < RECORD_HEADER as u64 || !total.is_multiple_of(8) || position + total > size {
        return None;
    }
    bytes.resize(total as usize, 0);
    if !read(position, bytes) {
        return None;
    }
    let mut hasher = segment.seal_key().hasher();
    hasher.update(&bytes[8..]);
    if hasher.finalize() != u32::from_le_bytes(head[4..8].try_into().expect("4")) {
        return None;
    }
    if is_filler(bytes) {
        return Some((total, None));
    }
    decode_record(bytes).map(|record| (total, Some(record)))
}

/// Visits the valid records of `segment`, of `size` bytes, in order; `read(position, bytes)` fills `bytes` from the segment, or
/// returns false when they lie beyond its end (a file shorter than a
/// segment). Stops at the first record whose length or CRC is wrong, then
/// looks for valid records of the segment beyond it (at every 8-byte
/// position), which only damage can leave there ([`ScanEnd`]).
pub fn scan_records(
    segment: &FoundSegment,
    size: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
    mut visit: impl FnMut(LogRecord),
) -> ScanEnd {
    let mut position = SEGMENT_HEADER;
    let mut bytes = Vec::new();
    let mut end = ScanEnd::default();
    while position + RECORD_HEADER as u64 <= size {
        match record_at(segment, size, position, &mut bytes, &mut read) {
            Some((total, record)) => {
                if let Some(record) = record {
                    visit(record);
                }
                position += total;
            }
            None => {
                end.stopped_at = Some(position);
                break;
            }
        }
    }
    if let Some(stop) = end.stopped_at {
        let mut at = stop + 8;
        while at + RECORD_HEADER as u64 <= size && end.later.len() < MAX_LATER_RECORDS {
            match record_at(segment, size, at, &mut bytes, &mut read) {
                Some((total, record)) => {
                    if let Some(record) = record {
                        end.later.push(record.tid);
                    }
                    at += total;
                }
                None => at += 8,
            }
        }
    }
    end
}

fn decode_record(bytes: &[u8]) -> Option<LogRecord> {
    let tid = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    let count = u32::from_le_bytes(bytes.get(16..20)?.try_into().ok()?) as usize;
    let dependency_count = u32::from_le_bytes(bytes.get(20..24)?.try_into().ok()?) as usize;
    if dependency_count > MAX_DEPENDENCIES {
        return None;
    }
    let mut at = RECORD_HEADER;
    let mut dependencies = Vec::with_capacity(dependency_count);
    for _ in 0..dependency_count {
        dependencies.push(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        at += 8;
    }
    let mut writes = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let head = bytes.get(at..at + WRITE_HEADER)?;
        let table = u32::from_le_bytes(head[0..4].try_into().ok()?);
        let value_len = u32::from_le_bytes(head[4..8].try_into().ok()?);
        let key_len = u16::from_le_bytes(head[8..10].try_into().ok()?) as usize;
        at += WRITE_HEADER;
        let key = bytes.get(at..at + key_len)?.to_vec();
        at += key_len;
        let value = if value_len == DELETE_MARK {
            None
        } else {
            let value = bytes.get(at..at + value_len as usize)?.to_vec();
            at += value_len as usize;
            Some(value)
        };
        writes.push(LogWrite { table, key, value });
    }
    Some(LogRecord { tid, writes, dependencies })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TableId;
    use crate::storage::commit_view::CommitWrite;
    use pmtx_pm::{Direct, PmOptions};

    /// A commit of one write of `key` = `value` into table 1.
    fn one_write(key: &'static [u8], value: &'static [u8]) -> [CommitWrite<'static>; 1] {
        [CommitWrite { table: TableId(1), key, value: Some(value) }]
    }

    fn records_of<B: PmBackend>(pool: &Pool<B>, worker: u16) -> Vec<LogRecord> {
        let (segments, broken) = find_segments(pool);
        assert!(broken.is_empty());
        let mut records = Vec::new();
        for segment in segments.iter().filter(|segment| segment.worker == worker) {
            scan_segment(pool, segment, |record| records.push(record));
        }
        records
    }

    /// The case the old 8-byte terminator guarded: a chunk freed by one
    /// worker's chain and reused by another worker's segment of the same
    /// sequence. Without a terminator, the first worker's records after
    /// the new tail must not validate in the new segment.
    #[test]
    fn stale_records_of_another_worker_with_the_same_sequence_never_validate() {
        let pool = Arc::new(Pool::<Direct>::create_in_memory(8 << 20, 1 << 20, &PmOptions::default()).unwrap());
        let sequence = 5 << 32;
        let mut first =
            LogWriter::new(Arc::clone(&pool), 0, LogStoreMode::NonTemporal, Default::default(), sequence).unwrap();
        for n in 0..4u64 {
            let range = first.append(n + 1, &one_write(b"stale", b"from worker 0")[..]).unwrap();
            let Ok(()) = first.make_durable(range);
        }
        let chunk = ChunkId(first.shared().segments.lock()[0].id.0);
        drop(first);
        pool.free_chunk(chunk);
        let mut second =
            LogWriter::new(Arc::clone(&pool), 1, LogStoreMode::NonTemporal, Default::default(), sequence).unwrap();
        assert_eq!(ChunkId(second.shared().segments.lock()[0].id.0), chunk, "the lowest free chunk is reused");
        // The same length as the stale records, so the scan lands exactly on
        // the next of them.
        let range = second.append(9, &one_write(b"fresh", b"from worker 1")[..]).unwrap();
        let Ok(()) = second.make_durable(range);
        let records = records_of(&*pool, 1);
        assert_eq!(records.len(), 1, "only the new segment's own record: {records:?}");
        assert_eq!(records[0].tid, 9);
    }

    /// Pools written before format 2 still recover: a format-1 segment
    /// (records sealed over the sequence alone, each followed by 8 zero
    /// bytes) is found and scanned.
    #[test]
    fn format_one_segments_are_still_read() {
        let pool = Pool::<Direct>::create_in_memory(8 << 20, 1 << 20, &PmOptions::default()).unwrap();
        let chunk = pool.allocate_chunk(pmtx_pm::ChunkOwner::compose(LOG_CHUNK_KIND, 2, 0), false).unwrap();
        let offset = pool.chunk_offset(chunk);
        let sequence: u64 = 3 << 32;
        let mut header = [0u8; SEGMENT_HEADER as usize];
        header[0..8].copy_from_slice(&SEGMENT_MAGIC_V1.to_le_bytes());
        header[8..16].copy_from_slice(&sequence.to_le_bytes());
        header[16..24].copy_from_slice(&2u64.to_le_bytes());
        let crc = crc32fast::hash(&header[0..28]);
        header[28..32].copy_from_slice(&crc.to_le_bytes());
        pool.backend().write(offset, &header);
        let mut position = offset + SEGMENT_HEADER;
        for tid in [11u64, 12] {
            let mut record = Vec::new();
            encode_unsealed(&mut record, &one_write(b"old", b"format one")[..], &[]);
            seal(&mut record, SealKey { sequence, worker: None }, tid);
            record.extend_from_slice(&[0u8; 8]);
            pool.backend().write(position, &record);
            position += record.len() as u64 - 8;
        }
        let (segments, broken) = find_segments(&pool);
        assert!(broken.is_empty());
        assert_eq!(segments[0].format, SegmentFormat::V1);
        let tids: Vec<u64> = records_of(&pool, 2).iter().map(|record| record.tid).collect();
        assert_eq!(tids, [11, 12]);
    }

    #[test]
    fn decode_rejects_truncated_records_without_panicking() {
        let mut buffer = Vec::new();
        let writes = [CommitWrite { table: TableId(3), key: b"key", value: Some(b"value") }];
        encode_record(&mut buffer, 7, 3, 99, &writes[..]);
        let decoded = decode_record(&buffer).expect("valid record decodes");
        assert_eq!(decoded.tid, 99);
        assert_eq!(decoded.writes[0].key, b"key");
        assert_eq!(decoded.writes[0].value.as_deref(), Some(&b"value"[..]));
        for cut in 0..buffer.len() - 3 {
            let _ = decode_record(&buffer[..cut]);
        }
        let mut corrupt = buffer.clone();
        corrupt[16] = 0xFF; // absurd write count
        assert!(decode_record(&corrupt).is_none());
    }
}
