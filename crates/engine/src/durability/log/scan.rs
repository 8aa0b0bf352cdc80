//! The reader side of the redo log: finding the segments in the pool,
//! each segment's durable end, and scanning and decoding its records
//! (recovery, the pool tools, fuzzing).

use super::*;
use pmtx_pm::{ChunkId, PmBackend, Pool};

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
    use std::sync::Arc;

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
