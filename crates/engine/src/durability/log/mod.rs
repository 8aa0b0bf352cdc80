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
//!
//! This module holds the format (headers, sealing, encoding, layouts);
//! [`writer`] appends records ([`LogWriter`]) over a [`SegmentStore`], and
//! [`scan`] finds segments and reads records back.
//!
//! Explained in docs/format.md ("Log segment") and
//! docs/engines/group-commit.md.

mod scan;
mod writer;

pub use scan::{
    claimed_segment, durable_end_word, find_segments, first_record_valid, parse_durable_end, scan_records,
    scan_segment, FoundSegment, ScanEnd, DURABLE_END_AT, MAX_LATER_RECORDS,
};
pub use writer::{LogShared, LogWriter, NewSegment, SegmentId, SegmentInfo, SegmentStore};

use crate::storage::commit_view::CommitView;

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
