//! Byte layout of a pool. docs/format.md draws the same picture (and
//! ARCHITECTURE.md §3 its top level); keep them in step.
//!
//! ```text
//! 0x0000  header (one 512 B checksummed record, see `HeaderRecord`)
//! 0x1000  mutable words: clean-shutdown flag (8 B), open count (8 B)
//! 0x1800  root value records: two 16 B checksummed records per root slot
//! 0x2000  root table: ROOT_SLOTS slots of 64 B (one cache line each)
//! 0x3000  chunk table: chunk_count little-endian u64 entries
//! data    first chunk, aligned to chunk_size; chunk i at data + i*chunk_size
//! ```
//!
//! All integers are little-endian. Every mutable word is 8-byte aligned and
//! changes by a single failure-atomic 8-byte store.

/// "PMTXPOOL".
pub const MAGIC: [u8; 8] = *b"PMTXPOOL";
/// Layout version this build writes (and the newest it reads). Version 2
/// added checksummed root values (`ROOT_VALUES_OFFSET`); a version-1 pool
/// (no header change otherwise) keeps opening, and its root slots are
/// converted to checksummed ones when they are next written.
pub const LAYOUT_VERSION: u32 = 2;
/// Oldest layout version this build reads.
pub const OLDEST_LAYOUT_VERSION: u32 = 1;
/// Offset of the header record.
pub const HEADER_OFFSET: u64 = 0;
/// Bytes covered by the header checksum (the record minus its last 8 bytes).
pub const HEADER_RECORD_SIZE: u64 = 512;
/// Offset of the clean-shutdown word.
pub const CLEAN_SHUTDOWN_OFFSET: u64 = 0x1000;
/// Offset of the open-count word.
pub const OPEN_COUNT_OFFSET: u64 = 0x1008;
/// Value of the clean-shutdown word after a clean close.
pub const CLEAN_SHUTDOWN_MAGIC: u64 = 0x434C_4541_4E5F_5348; // "CLEAN_SH"
/// Offset of the root table.
pub const ROOT_TABLE_OFFSET: u64 = 0x2000;
/// Number of named-root slots.
pub const ROOT_SLOTS: u64 = 64;
/// Size of one root slot.
pub const ROOT_SLOT_SIZE: u64 = 64;
/// Longest root name in bytes.
pub const ROOT_NAME_MAX: usize = 48;
/// High 32 bits of a valid root slot's state word; the low 32 bits hold the
/// CRC-32 of the name, so a torn or foreign slot is detected.
pub const ROOT_TAG: u64 = 0x524F_4F54; // "ROOT"
/// High 16 bits of a checksummed (layout 2) root slot's state word
/// ("R2"): `ROOT_TAG_V2 << 48 | seq (16 bits) << 32 | crc32(name)`. The
/// sequence's low bit picks which of the slot's two value records is
/// current, and the record must carry the same sequence.
pub const ROOT_TAG_V2: u64 = 0x5232;
/// Offset of the root value records: slot `s` has two records of
/// `ROOT_VALUE_RECORD_SIZE` bytes at `ROOT_VALUES_OFFSET + s * 32`, each
/// `value u64 | seq u32 | crc32(crc32(name) ++ seq ++ value) u32`. A value
/// is written into the record the state word does not point to, made
/// durable, and then published by one store of the state word, so a torn
/// record is never current and a damaged current record fails its CRC.
pub const ROOT_VALUES_OFFSET: u64 = 0x1800;
/// Size of one root value record.
pub const ROOT_VALUE_RECORD_SIZE: u64 = 16;
/// Offset of the chunk table.
pub const CHUNK_TABLE_OFFSET: u64 = 0x3000;
/// Default chunk size: 2 MiB, Zen's page-level allocation unit.
pub const DEFAULT_CHUNK_SIZE: u64 = 2 << 20;
/// Smallest chunk size accepted (tests and simulations use small chunks).
pub const MIN_CHUNK_SIZE: u64 = 64 << 10;
/// Smallest pool: metadata plus one chunk of the smallest size.
pub const MIN_POOL_SIZE: u64 = CHUNK_TABLE_OFFSET + 8 + MIN_CHUNK_SIZE * 2;

/// Chunk table entry of a chunk never used since the pool was created (its
/// bytes are zero).
pub const CHUNK_FREE_ZERO: u64 = 0;
/// Chunk table entry of a freed chunk whose bytes may be non-zero.
pub const CHUNK_FREE_DIRTY: u64 = 0xF4EE_0000_0000_0000;
/// Marker in the top byte of an allocated chunk's entry; the low 56 bits are
/// the owner tag chosen by the engine.
pub const CHUNK_OWNED_MARKER: u64 = 0xC7;
/// Mask of the owner part of an entry.
pub const CHUNK_OWNER_MASK: u64 = (1 << 56) - 1;

/// Field offsets inside the header record.
pub mod header {
    /// `[u8; 8]` magic.
    pub const MAGIC: usize = 0;
    /// `u32` layout version.
    pub const VERSION: usize = 8;
    /// `u32` header record size.
    pub const RECORD_SIZE: usize = 12;
    /// `u64` pool size in bytes.
    pub const POOL_SIZE: usize = 16;
    /// `u64` chunk size.
    pub const CHUNK_SIZE: usize = 24;
    /// `u64` number of data chunks.
    pub const CHUNK_COUNT: usize = 32;
    /// `u64` offset of the first chunk.
    pub const DATA_OFFSET: usize = 40;
    /// `u64` creation time, seconds since the Unix epoch.
    pub const CREATED_UNIX_SECONDS: usize = 48;
    /// `u64` random pool identifier.
    pub const POOL_ID: usize = 56;
    /// `u64` pool size requested by the creator.
    pub const REQUESTED_SIZE: usize = 64;
    /// `[u8; 32]` creator version string, NUL padded.
    pub const CREATOR: usize = 72;
    /// `u32` CRC-32 of bytes `0..CHECKSUM`.
    pub const CHECKSUM: usize = 504;
}

const _: () = assert!(header::CREATOR + 32 <= header::CHECKSUM);
const _: () = assert!(header::CHECKSUM + 8 == HEADER_RECORD_SIZE as usize);
const _: () = assert!(HEADER_RECORD_SIZE <= CLEAN_SHUTDOWN_OFFSET);
const _: () = assert!(ROOT_TABLE_OFFSET + ROOT_SLOTS * ROOT_SLOT_SIZE <= CHUNK_TABLE_OFFSET);
const _: () = assert!(ROOT_NAME_MAX + 16 == ROOT_SLOT_SIZE as usize);
const _: () = assert!(OPEN_COUNT_OFFSET + 8 <= ROOT_VALUES_OFFSET);
const _: () = assert!(ROOT_VALUES_OFFSET + ROOT_SLOTS * 2 * ROOT_VALUE_RECORD_SIZE <= ROOT_TABLE_OFFSET);
const _: () = assert!(DEFAULT_CHUNK_SIZE.is_power_of_two() && MIN_CHUNK_SIZE.is_power_of_two());

/// Root slot field offsets (relative to the slot).
pub mod root_slot {
    /// `u64` state: 0 empty, else `ROOT_TAG << 32 | crc32(name)`.
    pub const STATE: u64 = 0;
    /// `u64` value (an offset or any word the engine chooses).
    pub const VALUE: u64 = 8;
    /// `[u8; 48]` name, NUL padded.
    pub const NAME: u64 = 16;
}

/// Geometry of a pool of `size` bytes with chunks of `chunk_size`: the
/// largest chunk count whose table and chunks fit, and the offset of the
/// first chunk; `None` if not even one chunk fits. O(1) and overflow-free for
/// any `size` (a damaged header may claim any size).
pub fn geometry(size: u64, chunk_size: u64) -> Option<(u64, u64)> {
    if chunk_size == 0 {
        return None;
    }
    // (data offset, end of the last chunk) for `chunk_count` chunks; `None`
    // on overflow.
    let layout = |chunk_count: u64| -> Option<(u64, u64)> {
        let table_end = chunk_count.checked_mul(8)?.checked_add(CHUNK_TABLE_OFFSET)?;
        let data_offset = table_end.div_ceil(chunk_size).checked_mul(chunk_size)?;
        let end = chunk_count.checked_mul(chunk_size)?.checked_add(data_offset)?;
        Some((data_offset, end))
    };
    // n chunks need CHUNK_TABLE_OFFSET + 8n (table) + n * chunk_size bytes,
    // plus less than one chunk of padding to align the first chunk. So
    // `upper` below bounds the count from above, and `upper - 1` always
    // fits: (upper - 1)(chunk_size + 8) + chunk_size - 1
    // = upper (chunk_size + 8) - 9 <= size - CHUNK_TABLE_OFFSET.
    let upper = size.checked_sub(CHUNK_TABLE_OFFSET)? / chunk_size.checked_add(8)?;
    [upper, upper.saturating_sub(1)].into_iter().filter(|&chunk_count| chunk_count > 0).find_map(|chunk_count| {
        let (data_offset, end) = layout(chunk_count)?;
        (end <= size).then_some((chunk_count, data_offset))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the largest chunk count whose table and chunks fit.
    fn geometry_by_search(size: u64, chunk_size: u64) -> Option<(u64, u64)> {
        (1..=size / chunk_size).rev().find_map(|chunk_count| {
            let data_offset = (CHUNK_TABLE_OFFSET + chunk_count * 8).div_ceil(chunk_size) * chunk_size;
            (data_offset + chunk_count * chunk_size <= size).then_some((chunk_count, data_offset))
        })
    }

    /// Whether `chunk_count` chunks fit `size` (checked arithmetic).
    fn fits(size: u64, chunk_size: u64, chunk_count: u64) -> bool {
        let data_offset = chunk_count
            .checked_mul(8)
            .and_then(|table| table.checked_add(CHUNK_TABLE_OFFSET))
            .and_then(|end| end.div_ceil(chunk_size).checked_mul(chunk_size));
        data_offset
            .and_then(|offset| chunk_count.checked_mul(chunk_size).and_then(|chunks| chunks.checked_add(offset)))
            .is_some_and(|end| end <= size)
    }

    #[test]
    fn geometry_matches_the_definition() {
        let mut sizes = Vec::new();
        for chunk_size in [4096, MIN_CHUNK_SIZE, 1 << 20, DEFAULT_CHUNK_SIZE] {
            // Around every chunk count where the table needs one more chunk
            // of padding (512 entries per 4 KiB) and small pools.
            let per_chunk = chunk_size / 8;
            for chunks in [0u64, 1, 2, 3, 7, 64, 1000, per_chunk - 1, per_chunk, per_chunk + 1, 2 * per_chunk + 3] {
                for delta in [0u64, 1, 4095, 4096, 4097, chunk_size - 1, chunk_size, chunk_size + 1] {
                    for table in [0, 1, 2, 3] {
                        sizes.push((chunk_size, (chunks * chunk_size + delta + table * chunk_size).max(1)));
                        sizes
                            .push((chunk_size, (chunks * chunk_size + CHUNK_TABLE_OFFSET + chunks * 8 + delta).max(1)));
                    }
                }
            }
        }
        // And pseudo-random sizes up to 256 MiB.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            sizes.push((4096 << (state >> 61), (state >> 20) % (256 << 20)));
        }
        for (chunk_size, size) in sizes {
            assert_eq!(
                geometry(size, chunk_size),
                geometry_by_search(size, chunk_size),
                "size {size}, chunk {chunk_size}"
            );
        }
    }

    #[test]
    fn geometry_of_absurd_sizes_neither_overflows_nor_spins() {
        for chunk_size in [MIN_CHUNK_SIZE, DEFAULT_CHUNK_SIZE, 1 << 40, 1 << 62, 1 << 63] {
            for size in [u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) + 12345, (1 << 63) - 1] {
                match geometry(size, chunk_size) {
                    Some((chunk_count, data_offset)) => {
                        assert!(fits(size, chunk_size, chunk_count), "size {size}, chunk {chunk_size}");
                        assert!(
                            !fits(size, chunk_size, chunk_count + 1),
                            "not the largest: size {size}, chunk {chunk_size}"
                        );
                        assert_eq!(data_offset % chunk_size, 0);
                        assert!(data_offset >= CHUNK_TABLE_OFFSET + chunk_count * 8);
                    }
                    None => assert!(!fits(size, chunk_size, 1), "one chunk fits: size {size}, chunk {chunk_size}"),
                }
            }
        }
        assert!(geometry(u64::MAX, DEFAULT_CHUNK_SIZE).is_some());
        assert_eq!(geometry(u64::MAX, 1 << 63), None, "the table pushes the only chunk past u64::MAX");
        assert_eq!(geometry(u64::MAX, 0), None);
        assert_eq!(geometry(0, MIN_CHUNK_SIZE), None);
        assert_eq!(geometry(CHUNK_TABLE_OFFSET, MIN_CHUNK_SIZE), None);
    }
}
