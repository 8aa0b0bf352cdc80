//! The NVM-tuple format (module documentation of `storage::zen::heap`):
//! chunk kinds, the free marker, the header words, encoding, the CRC and
//! decoding a slot. Byte for byte what pools hold: changing any of it
//! breaks pools already written.

use crate::error::{DbError, DbResult};
use pmtx_pm::CACHE_LINE;

/// Chunk-owner kind of heap chunks written before free markers ("ZH"):
/// a free slot's word 0 is zero. Only pools written before keep them.
pub const HEAP_CHUNK_KIND: u16 = 0x5A48;
/// Chunk-owner kind of formatted heap chunks ("ZF"): every slot's word 0 was
/// set to [`FREE_WORD0`] before the chunk was owned, so a free slot's word 0
/// is the marker and a zero word 0 is damage. Every new chunk is of this kind.
pub const HEAP_CHUNK_KIND_FORMATTED: u16 = 0x5A46;

/// Whether `kind` is a heap chunk kind (either rule).
pub fn is_heap_chunk_kind(kind: u16) -> bool {
    kind == HEAP_CHUNK_KIND || kind == HEAP_CHUNK_KIND_FORMATTED
}

/// Word 0 of a free slot of a formatted chunk: LP clear and a Tx-CTS above
/// `record::MAX_TID`, so no tuple has it, and any one bit flipped in it still
/// leaves a Tx-CTS above `MAX_TID` (bits 61 and 62 are both set). Big-endian
/// it spells "zen_free".
pub const FREE_WORD0: u64 = 0x7A65_6E5F_6672_6565;

/// LP bit of word 0.
pub(crate) const LP_BIT: u64 = 1 << 63;
/// Tx-CTS part of word 0.
pub(crate) const CTS_MASK: u64 = LP_BIT - 1;
/// Deleted bit of word 1.
pub(crate) const DELETED_BIT: u64 = 1 << 63;
/// Tuple-ID part of word 1.
pub(crate) const TUPLE_ID_MASK: u64 = (1 << 56) - 1;
/// Bytes before the key.
pub(crate) const META_LEN: u64 = 26;
const CRC_AT: usize = 16;
const VALUE_LEN_AT: usize = 20;
pub(crate) const KEY_LEN_AT: usize = 24;

const _: () = assert!(KEY_LEN_AT + 2 == META_LEN as usize);
const _: () = assert!(FREE_WORD0 & LP_BIT == 0);
const _: () = assert!(FREE_WORD0 & !(1 << 61) > crate::storage::record::MAX_TID);
const _: () = assert!(FREE_WORD0 & !(1 << 62) > crate::storage::record::MAX_TID);

/// Slot geometry of one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotGeometry {
    /// Bytes per slot (multiple of 16).
    pub(crate) slot_size: u64,
    /// Offset of slot 0 in a chunk (after the bitmap; multiple of 64).
    pub(crate) first_slot: u64,
    /// Slots per chunk.
    pub(crate) slots_per_chunk: u64,
    /// Longest key.
    pub(crate) max_key: usize,
    /// Longest value.
    pub(crate) max_value: usize,
}

impl SlotGeometry {
    pub(crate) fn new(table: &str, max_key: usize, max_value: usize, chunk_size: u64) -> DbResult<Self> {
        if max_value > u32::MAX as usize || max_key > u16::MAX as usize {
            return Err(DbError::InvalidConfig(format!("table {table}: key or value limit too large for zen")));
        }
        let slot_size = (META_LEN + max_key as u64 + max_value as u64).div_ceil(16) * 16;
        let mut slots = chunk_size * 8 / (slot_size * 8 + 1);
        let bitmap = |slots: u64| slots.div_ceil(8).div_ceil(CACHE_LINE) * CACHE_LINE;
        while slots > 0 && bitmap(slots) + slots * slot_size > chunk_size {
            slots -= 1;
        }
        if slots == 0 {
            return Err(DbError::InvalidConfig(format!(
                "table {table}: a {slot_size}-byte tuple slot does not fit a {chunk_size}-byte chunk"
            )));
        }
        Ok(Self { slot_size, first_slot: bitmap(slots), slots_per_chunk: slots, max_key, max_value })
    }
}

/// A CRC-32 hasher in its initial state. `crc32fast::Hasher::new` checks
/// eight CPU features on every call (about 35 instructions, for every
/// tuple a commit seals); the checked hasher is made once and cloned. The
/// cell only caches what the CPU supports: it never changes once set.
#[inline]
fn initial_hasher() -> crc32fast::Hasher {
    static INITIAL: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    INITIAL.get_or_init(crc32fast::Hasher::new).clone()
}

/// Encodes a tuple into `buffer` (word 0 without the LP bit).
pub(crate) fn encode_tuple(buffer: &mut Vec<u8>, cts: u64, tuple_id: u64, deleted: bool, key: &[u8], value: &[u8]) {
    debug_assert!(cts != 0 && cts & LP_BIT == 0);
    // The header as one array, then two copies: one capacity check each.
    let mut header = [0u8; META_LEN as usize];
    header[..8].copy_from_slice(&cts.to_le_bytes());
    let word1 = (tuple_id & TUPLE_ID_MASK) | if deleted { DELETED_BIT } else { 0 };
    header[8..CRC_AT].copy_from_slice(&word1.to_le_bytes());
    header[VALUE_LEN_AT..KEY_LEN_AT].copy_from_slice(&(value.len() as u32).to_le_bytes());
    header[KEY_LEN_AT..].copy_from_slice(&(key.len() as u16).to_le_bytes());
    buffer.clear();
    buffer.reserve(header.len() + key.len() + value.len());
    buffer.extend_from_slice(&header);
    buffer.extend_from_slice(key);
    buffer.extend_from_slice(value);
    // Word 0 is the Tx-CTS without the LP bit already: the CRC's input.
    let mut hasher = initial_hasher();
    hasher.update(&buffer[..CRC_AT]);
    hasher.update(&buffer[CRC_AT + 4..]);
    let crc = hasher.finalize();
    debug_assert_eq!(crc, tuple_crc(cts, buffer));
    buffer[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the CRC of the tuple in slot `bytes` (as far as its lengths
/// say, within the slot): a mutated slot the decoder then reads past its
/// checksum. For fuzzing.
pub(crate) fn reseal_slot(bytes: &mut [u8]) {
    if bytes.len() < META_LEN as usize {
        return;
    }
    let word0 = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let value_len = u32::from_le_bytes(bytes[VALUE_LEN_AT..VALUE_LEN_AT + 4].try_into().expect("4")) as usize;
    let key_len = u16::from_le_bytes(bytes[KEY_LEN_AT..KEY_LEN_AT + 2].try_into().expect("2")) as usize;
    let end = META_LEN as usize + key_len + value_len;
    if end <= bytes.len() {
        let crc = tuple_crc(word0 & CTS_MASK, &bytes[..end]);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fn tuple_crc(cts: u64, bytes: &[u8]) -> u32 {
    // The header's CRC input (Tx-CTS without the LP bit, word 1) as one
    // piece: a CRC update costs about as much per call as for a short
    // tuple's bytes, so two calls instead of three.
    let mut head = [0u8; CRC_AT];
    head[..8].copy_from_slice(&cts.to_le_bytes());
    head[8..].copy_from_slice(&bytes[8..CRC_AT]);
    let mut hasher = initial_hasher();
    hasher.update(&head);
    hasher.update(&bytes[CRC_AT + 4..]);
    hasher.finalize()
}

/// What a slot holds.
#[derive(Debug)]
pub(crate) enum SlotContent<'a> {
    /// Word 0 is zero or [`FREE_WORD0`] (a free slot; recovery checks which
    /// one the chunk's kind allows).
    Empty,
    /// Not a whole tuple (torn, or garbage).
    Invalid,
    /// A CRC-valid tuple.
    Tuple(TupleView<'a>),
}

/// A decoded, CRC-valid tuple.
#[derive(Debug)]
pub(crate) struct TupleView<'a> {
    pub(crate) cts: u64,
    pub(crate) lp: bool,
    pub(crate) deleted: bool,
    pub(crate) tuple_id: u64,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

/// Decodes the `slot_size` bytes of a slot.
pub(crate) fn decode_slot<'a>(bytes: &'a [u8], geometry: &SlotGeometry) -> SlotContent<'a> {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let word0 = word(0);
    if word0 == 0 || word0 == FREE_WORD0 {
        return SlotContent::Empty;
    }
    let cts = word0 & CTS_MASK;
    let word1 = word(8);
    let value_len = u32::from_le_bytes(bytes[VALUE_LEN_AT..VALUE_LEN_AT + 4].try_into().expect("4")) as usize;
    let key_len = u16::from_le_bytes(bytes[KEY_LEN_AT..KEY_LEN_AT + 2].try_into().expect("2")) as usize;
    let deleted = word1 & DELETED_BIT != 0;
    // A Tx-CTS is a TID: one above `MAX_TID` cannot have been written (it
    // would lose its high bits in a version word).
    if cts == 0
        || cts > crate::storage::record::MAX_TID
        || key_len > geometry.max_key
        || value_len > geometry.max_value
        || (deleted && value_len != 0)
    {
        return SlotContent::Invalid;
    }
    let end = META_LEN as usize + key_len + value_len;
    let stored = u32::from_le_bytes(bytes[CRC_AT..CRC_AT + 4].try_into().expect("4"));
    if word1 & !(DELETED_BIT | TUPLE_ID_MASK) != 0 || stored != tuple_crc(cts, &bytes[..end]) {
        return SlotContent::Invalid;
    }
    let key_start = META_LEN as usize;
    SlotContent::Tuple(TupleView {
        cts,
        lp: word0 & LP_BIT != 0,
        deleted,
        tuple_id: word1 & TUPLE_ID_MASK,
        key: &bytes[key_start..key_start + key_len],
        value: &bytes[key_start + key_len..end],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tuple CRC is the CRC-32 of the Tx-CTS (LP bit clear), bytes
    /// 8..16 and everything after the CRC field, as the layout says: pools
    /// written before keep verifying, however the hashing is split.
    #[test]
    fn tuple_crc_covers_the_documented_bytes() {
        let mut buffer = Vec::new();
        encode_tuple(&mut buffer, 0x1234_5678, 99, false, b"key", &[5u8; 77]);
        let mut reference = Vec::new();
        reference.extend_from_slice(&0x1234_5678u64.to_le_bytes());
        reference.extend_from_slice(&buffer[8..CRC_AT]);
        reference.extend_from_slice(&buffer[CRC_AT + 4..]);
        let stored = u32::from_le_bytes(buffer[CRC_AT..CRC_AT + 4].try_into().unwrap());
        assert_eq!(stored, crc32fast::hash(&reference));
        // With the LP bit set in word 0 the tuple still verifies.
        buffer[..8].copy_from_slice(&(0x1234_5678u64 | LP_BIT).to_le_bytes());
        assert_eq!(tuple_crc(0x1234_5678, &buffer), stored);
    }
}
