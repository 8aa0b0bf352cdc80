//! The parsers of persistent structures, on plain bytes, for fuzzing
//! (`tests/fuzz_parsers.rs`, `examples/fuzz_parsers.rs`): each takes any
//! bytes and returns what recovery would read, or why it refuses them; none
//! may panic or hang. They run the same code as recovery: the pool's
//! header, root-slot and chunk-entry checks, the log's header, record and
//! durable-end parsers, the checkpoint's header and row parsers, Zen's slot
//! decoder and wbl's record decoder.

use crate::durability::log::{self, FoundSegment, LogRecord, ScanEnd, SegmentFormat, SegmentId};

/// The pool metadata parser ([`pmtx_pm::parse_pool_metadata`]): header
/// record, root slots and chunk table entries.
pub fn parse_pool(bytes: &[u8]) -> Result<pmtx_pm::PoolCheckReport, pmtx_pm::PoolError> {
    pmtx_pm::parse_pool_metadata(bytes)
}

/// A log segment of `bytes.len()` bytes: header, records up to the first
/// invalid one, the valid records beyond it, the durable-end word. A
/// damaged header is refused, but its records are scanned all the same
/// under the sequence it stores (as recovery does for such a chunk).
pub fn parse_log_segment(bytes: &[u8]) -> Result<(Vec<LogRecord>, ScanEnd), String> {
    let parsed = log::parse_segment_header(bytes);
    let (worker, sequence, format) = parsed.unwrap_or_else(|| {
        let sequence = bytes.get(8..16).map_or(0, |field| u64::from_le_bytes(field.try_into().expect("8 bytes")));
        (0, sequence, SegmentFormat::V2)
    });
    let segment = FoundSegment { worker, id: SegmentId(0), sequence, format };
    let mut records = Vec::new();
    let mut end = log::scan_records(
        &segment,
        bytes.len() as u64,
        |position, out| match bytes.get(position as usize..position as usize + out.len()) {
            Some(source) => {
                out.copy_from_slice(source);
                true
            }
            None => false,
        },
        |record| records.push(record),
    );
    if let Some(header) = bytes.get(..40) {
        end.durable_end = log::parse_durable_end(header);
    }
    match parsed {
        Some(_) => Ok((records, end)),
        None => Err(format!("damaged segment header ({} records under its stored sequence)", records.len())),
    }
}

/// A checkpoint chunk (header and rows); the number of rows.
pub fn parse_checkpoint_chunk(bytes: &[u8]) -> Result<u64, String> {
    crate::durability::checkpoint::parse_chunk(bytes)
}

/// A snapshot page of `foedus` (header and rows); the number of rows.
pub fn parse_snapshot_page(bytes: &[u8]) -> Result<u64, String> {
    crate::durability::snapshot::parse_page(bytes)
}

/// What a heap slot holds: (Tx-CTS, LP bit, deleted, key length, value
/// length).
pub type HeapTuple = (u64, bool, bool, usize, usize);

/// A Zen heap slot of a table with keys up to `max_key` and values up to
/// `max_value` bytes (`bytes` shorter than the slot are zero-padded):
/// `Ok(None)` for an empty slot, `Err` for one recovery erases.
pub fn parse_heap_slot(bytes: &[u8], max_key: usize, max_value: usize) -> Result<Option<HeapTuple>, String> {
    use crate::storage::zen::heap::{decode_slot, SlotContent, SlotGeometry};
    let geometry = SlotGeometry::new("fuzz", max_key, max_value, pmtx_pm::layout::MIN_CHUNK_SIZE)
        .map_err(|error| error.to_string())?;
    let mut slot = vec![0u8; geometry.slot_size as usize];
    let len = bytes.len().min(slot.len());
    slot[..len].copy_from_slice(&bytes[..len]);
    match decode_slot(&slot, &geometry) {
        SlotContent::Empty => Ok(None),
        SlotContent::Invalid => Err("invalid slot".into()),
        SlotContent::Tuple(tuple) => Ok(Some((tuple.cts, tuple.lp, tuple.deleted, tuple.key.len(), tuple.value.len()))),
    }
}

/// A wbl record-log record: (sequence, c_p, c_d).
pub fn parse_wbl_record(bytes: &[u8]) -> Option<(u64, u64, u64)> {
    crate::durability::wbl_window::parse_record(bytes)
}

/// Recomputes the checksums of a log segment's header and records (see
/// [`log::reseal_segment`]), for mutations that reach past them.
pub fn reseal_log_segment(bytes: &mut [u8]) {
    log::reseal_segment(bytes);
}

/// Recomputes the CRC of a heap slot's tuple, for mutations that reach
/// past it.
pub fn reseal_heap_slot(bytes: &mut [u8]) {
    crate::storage::zen::heap::reseal_slot(bytes);
}
