//! Persistent home slots: every row has one slot in the pool, updated in
//! place (Mnemosyne's persistent region as `mnemosyne` runs it; written so
//! that another redo-then-write-back engine can reuse it). Unlike `mmdb`'s
//! volatile region (`storage::nvm_tuples`) the slots survive a crash and
//! are the database: recovery rebuilds the DRAM indexes by scanning them.
//!
//! **Chunks and slots.** A chunk holds slots of one size (whole 64-byte
//! units, the chunk owner's group field), allocated by a bump pointer and
//! a DRAM-only free list per size (as Zen's heap, recovery rebuilds the
//! free lists by a scan). A new chunk is formatted before it is owned:
//! every slot's word 0 is set to [`FREE_WORD0`] with non-temporal stores
//! and fenced once per chunk (`Pool::allocate_chunk_formatted`), so a
//! slot whose word 0 is zero is damage, never a slot not yet written. A
//! slot:
//!
//! ```text
//! [0..8)   header: bit 63 present (holds a value), bit 62 used, TID below
//! [8..16)  table (u32) | key length (u16) << 32 | first-line check (u16) << 48
//! [16..20) value length (u32)     [20..24) CRC-32 of the slot's bytes
//! [24..)   key, padded to 8 bytes, then the value
//! ```
//!
//! The *first-line check* covers the slot's bytes in its first 64-byte
//! line (up to its length, without the check and the CRC fields); the CRC
//! covers the whole slot (without its own field). Word 0 is the first
//! store of a write into the first line, so by the media model's
//! per-line program order a first line that took any word of a write took
//! its header: a first line whose check fails belongs, after a crash, to a
//! write whose TID its header holds (`durability::mnemosyne_log`, "Torn or
//! damaged").
//!
//! A delete keeps the key and the TID with the present bit clear, so a
//! newer delete outranks an older copy of the key in another slot. Writes
//! are plain stores, never flushed here: the durability scheme decides
//! when the lines it wrote are flushed (the slot of an unflushed write may
//! be torn at a crash; the CRC tells, and the scheme's log rewrites it).
//! A slot recovery frees gets [`FREE_WORD0`] back (one 8-byte store).
//!
//! Explained in docs/engines/mnemosyne.md (the bytes of a slot: docs/format.md,
//! "PM home slots").

use crate::error::{DbError, DbResult};
use parking_lot::Mutex;
use pmtx_pm::{ChunkOwner, PmBackend, Pool};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Owner kind of the home slots' chunks ("PF"): formatted (every slot's
/// word 0 was [`FREE_WORD0`] before the chunk was owned) and holding slots
/// with a first-line check.
pub const PM_HOME_CHUNK_KIND: u16 = 0x5046;
/// Owner kind of the home chunks an older pmtx wrote ("PH", format
/// version 1): unformatted, no first-line check. This build refuses such a
/// pool ([`check_no_unformatted_chunks`]).
pub const PM_HOME_CHUNK_KIND_UNFORMATTED: u16 = 0x5048;

/// Word 0 of a free slot: bit 61 set (no header has it: TIDs have 61
/// bits), bits 62 (used) and 63 (present) clear, so no header becomes it
/// by one flipped bit. Big-endian it spells " FREE_PF".
pub const FREE_WORD0: u64 = 0x2046_5245_455F_5046;

const PRESENT: u64 = 1 << 63;
const USED: u64 = 1 << 62;
/// TID bits of the header.
pub(crate) const TID_MASK: u64 = (1 << 61) - 1;
/// Bytes before the key.
pub(crate) const HEADER: u64 = 24;
/// A slot is whole units.
pub(crate) const UNIT: u64 = 64;

// The layout the module docs draw: the first-line check fits in the ids
// word above the key length; the free marker has no header's bits and
// the one bit no header has.
const _: () = {
    assert!(HEADER == 24 && UNIT == pmtx_pm::CACHE_LINE && HEADER < UNIT);
    assert!(FREE_WORD0 & (PRESENT | USED) == 0);
    assert!(FREE_WORD0 & !(PRESENT | USED | TID_MASK) != 0);
    assert!(PRESENT | USED | TID_MASK | (1 << 61) == u64::MAX);
};

/// What a slot holds (or is to hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotImage<'a> {
    /// Table id.
    pub(crate) table: u32,
    /// Primary key.
    pub(crate) key: &'a [u8],
    /// Value; `None`: deleted.
    pub(crate) value: Option<&'a [u8]>,
    /// TID of the version.
    pub(crate) tid: u64,
}

/// The first line of a slot whose CRC fails, when that line is whole (its
/// check holds): the line of one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FirstLine {
    /// Table id.
    pub(crate) table: u32,
    /// Key length.
    pub(crate) key_len: usize,
    /// The key's bytes in the first line (all of a key of up to 40 bytes).
    pub(crate) key_prefix: Vec<u8>,
    /// Whether the version holds a value (not a delete).
    pub(crate) present: bool,
    /// TID of the version.
    pub(crate) tid: u64,
}

/// A slot whose bytes fail their CRC: a write torn by a crash or damage
/// (recovery tells them apart: `durability::mnemosyne_log`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TornSlot {
    /// The TID in word 0, when it holds a header (the used bit).
    pub(crate) tid: Option<u64>,
    /// The first line, when its check holds.
    pub(crate) line: Option<FirstLine>,
}

/// A slot as a scan found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ScannedSlot {
    /// Free (word 0 is [`FREE_WORD0`]).
    Free,
    /// Word 0 is zero: in a formatted chunk, damage.
    Zero,
    /// Its bytes fail their CRC.
    Torn(TornSlot),
    /// A whole version.
    Image {
        /// Table id.
        table: u32,
        /// Key.
        key: Vec<u8>,
        /// Value (`None`: deleted).
        value: Option<Vec<u8>>,
        /// TID.
        tid: u64,
    },
}

/// The slots of one size.
#[derive(Default)]
struct Class {
    free: Vec<u64>,
    /// Next slot and end of the current chunk.
    bump: Option<(u64, u64)>,
}

/// The home slots of a pool (module docs).
pub(crate) struct PmHome<B: PmBackend> {
    pool: Arc<Pool<B>>,
    chunk_size: u64,
    /// Slot units of each chunk, by chunk id (0: not a home chunk).
    units: Box<[AtomicU32]>,
    classes: Mutex<HashMap<u32, Class>>,
}

fn pad8(len: usize) -> u64 {
    (len as u64).next_multiple_of(8)
}

impl<B: PmBackend> PmHome<B> {
    /// The slots of `pool` (its existing chunks are found; their free
    /// lists are built by [`PmHome::scan`]'s caller).
    pub(crate) fn open(pool: Arc<Pool<B>>) -> Self {
        let geometry = pool.geometry();
        let units: Box<[AtomicU32]> = (0..geometry.chunk_count).map(|_| AtomicU32::new(0)).collect();
        for (chunk, owner) in pool.owned_chunks() {
            if owner.kind() == PM_HOME_CHUNK_KIND {
                units[chunk.0 as usize].store(owner.group(), Ordering::Relaxed);
            }
        }
        Self { chunk_size: geometry.chunk_size, pool, units, classes: Mutex::new(HashMap::new()) }
    }

    /// Units of a slot for a key of `key_len` bytes and `value_len` bytes
    /// of value.
    pub(crate) fn units_for(key_len: usize, value_len: usize) -> u32 {
        (HEADER + pad8(key_len) + pad8(value_len)).div_ceil(UNIT) as u32
    }

    /// Units of the slot at `offset`.
    pub(crate) fn units_of(&self, offset: u64) -> u32 {
        self.pool.chunk_of(offset).map_or(0, |chunk| self.units[chunk.0 as usize].load(Ordering::Relaxed))
    }

    /// Value bytes the slot at `offset` holds for a key of `key_len` bytes.
    pub(crate) fn value_capacity(&self, offset: u64, key_len: usize) -> u64 {
        (u64::from(self.units_of(offset)) * UNIT).saturating_sub(HEADER + pad8(key_len))
    }

    /// A free slot of `units` units.
    pub(crate) fn allocate(&self, units: u32) -> DbResult<u64> {
        let mut classes = self.classes.lock();
        let class = classes.entry(units).or_default();
        if let Some(offset) = class.free.pop() {
            return Ok(offset);
        }
        let size = u64::from(units) * UNIT;
        if size > self.chunk_size {
            return Err(DbError::InvalidConfig(format!("a row of {size} bytes exceeds a pool chunk")));
        }
        match class.bump {
            Some((next, end)) if next + size <= end => {
                class.bump = Some((next + size, end));
                Ok(next)
            }
            _ => {
                let owner = ChunkOwner::compose(PM_HOME_CHUNK_KIND, units, 0);
                let chunk_size = self.chunk_size;
                let backend = self.pool.backend();
                // Every slot free; non-temporal stores, so the format costs
                // no flush (the pool fences once before the chunk is owned).
                let format = |start: u64| {
                    for offset in slots_of_chunk(start, size, chunk_size) {
                        backend.write_non_temporal(offset, &FREE_WORD0.to_le_bytes());
                    }
                };
                let chunk = self.pool.allocate_chunk_formatted(owner, None, &format).map_err(DbError::from)?;
                self.units[chunk.0 as usize].store(units, Ordering::Relaxed);
                let start = self.pool.chunk_offset(chunk);
                class.bump = Some((start + size, start + self.chunk_size - self.chunk_size % size));
                Ok(start)
            }
        }
    }

    /// Returns the slot at `offset` to its free list.
    pub(crate) fn free(&self, offset: u64) {
        let units = self.units_of(offset);
        self.classes.lock().entry(units).or_default().free.push(offset);
    }

    /// Writes `image` into the slot at `offset` with plain stores (no
    /// flush); the byte range written, for the caller's flush set.
    pub(crate) fn write(&self, offset: u64, image: SlotImage<'_>) -> (u64, u64) {
        let bytes = encode(image);
        debug_assert!(bytes.len() as u64 <= u64::from(self.units_of(offset)) * UNIT);
        self.pool.backend().write(offset, &bytes);
        (offset, bytes.len() as u64)
    }

    /// Frees the slot in place (recovery: a losing copy or a torn slot):
    /// word 0 becomes [`FREE_WORD0`], one failure-atomic store.
    pub(crate) fn clear(&self, offset: u64) -> (u64, u64) {
        self.pool.backend().store_u64(offset, FREE_WORD0);
        (offset, 8)
    }

    /// Charges a read of `len` bytes of the value of the slot at `offset`
    /// (key of `key_len` bytes), as an NVM read.
    #[inline]
    pub(crate) fn charge_read(&self, offset: u64, key_len: usize, len: usize) {
        let start = offset + HEADER + pad8(key_len);
        std::hint::black_box(self.pool.backend().read_volatile(start, pad8(len).max(8)));
    }

    /// Visits every slot of every home chunk (offset, what it holds).
    pub(crate) fn scan(&self, mut visit: impl FnMut(u64, ScannedSlot)) {
        let backend = self.pool.backend();
        for (chunk, owner) in self.pool.owned_chunks() {
            if owner.kind() != PM_HOME_CHUNK_KIND || owner.group() == 0 {
                continue;
            }
            let size = u64::from(owner.group()) * UNIT;
            let start = self.pool.chunk_offset(chunk);
            let mut bytes = vec![0u8; size as usize];
            for offset in slots_of_chunk(start, size, self.chunk_size) {
                backend.read(offset, &mut bytes);
                visit(offset, decode(&bytes));
            }
        }
    }

    /// After a scan: every slot not in `live` is free, and each class
    /// bumps from the end of its chunks (every slot is on a list).
    pub(crate) fn rebuild_free_lists(&self, live: &std::collections::HashSet<u64>) {
        let mut classes = self.classes.lock();
        classes.clear();
        for (chunk, owner) in self.pool.owned_chunks() {
            if owner.kind() != PM_HOME_CHUNK_KIND || owner.group() == 0 {
                continue;
            }
            let size = u64::from(owner.group()) * UNIT;
            let start = self.pool.chunk_offset(chunk);
            let class = classes.entry(owner.group()).or_default();
            class.free.extend(slots_of_chunk(start, size, self.chunk_size).filter(|offset| !live.contains(offset)));
        }
        for class in classes.values_mut() {
            // Lowest offsets first out.
            class.free.sort_unstable_by(|a, b| b.cmp(a));
        }
    }
}

/// Offsets of the slots of `size` bytes in the chunk at `start`.
fn slots_of_chunk(start: u64, size: u64, chunk_size: u64) -> impl Iterator<Item = u64> {
    (0..chunk_size / size).map(move |slot| start + slot * size)
}

/// Format version of the home slots in chunks of kind
/// [`PM_HOME_CHUNK_KIND`] (version 1: [`PM_HOME_CHUNK_KIND_UNFORMATTED`]).
pub const PM_HOME_FORMAT_VERSION: u32 = 2;

/// Refuses a pool whose home chunks an older pmtx wrote (format version 1:
/// unformatted, no first-line check), with the typed
/// `PoolError::OlderFormat`: recovery could not tell a damaged slot there
/// from a torn one, nor a zeroed slot from one never written.
pub(crate) fn check_no_unformatted_chunks<B: PmBackend>(pool: &Pool<B>) -> DbResult<()> {
    if pool.owned_chunks().iter().any(|(_, owner)| owner.kind() == PM_HOME_CHUNK_KIND_UNFORMATTED) {
        return Err(DbError::Pool(pmtx_pm::PoolError::OlderFormat {
            path: pool.label().to_path_buf(),
            structure: pmtx_pm::Structure::PmHome,
            found: 1,
            oldest: PM_HOME_FORMAT_VERSION,
        }));
    }
    Ok(())
}

/// The bytes of a slot holding `image`.
pub(crate) fn encode(image: SlotImage<'_>) -> Vec<u8> {
    let value = image.value.unwrap_or(&[]);
    let mut bytes = vec![0u8; (HEADER + pad8(image.key.len()) + pad8(value.len())) as usize];
    let header = USED | if image.value.is_some() { PRESENT } else { 0 } | (image.tid & TID_MASK);
    bytes[0..8].copy_from_slice(&header.to_le_bytes());
    let ids = u64::from(image.table) | (image.key.len() as u64) << 32;
    bytes[8..16].copy_from_slice(&ids.to_le_bytes());
    bytes[16..20].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let key_at = HEADER as usize;
    bytes[key_at..key_at + image.key.len()].copy_from_slice(image.key);
    let value_at = key_at + pad8(image.key.len()) as usize;
    bytes[value_at..value_at + value.len()].copy_from_slice(value);
    let check = line_check(&bytes);
    bytes[14..16].copy_from_slice(&check.to_le_bytes());
    let crc = checksum(&bytes);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn checksum(bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..20]);
    hasher.update(&bytes[24..]);
    hasher.finalize()
}

/// The first-line check of the encoded slot `bytes` (its first 64 bytes
/// at most, the check and CRC fields read as zero): CRC-32 folded to 16
/// bits.
fn line_check(bytes: &[u8]) -> u16 {
    let line = &bytes[..bytes.len().min(UNIT as usize)];
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&line[..14]);
    hasher.update(&[0u8; 2]);
    hasher.update(&line[16..20]);
    hasher.update(&[0u8; 4]);
    hasher.update(&line[24..]);
    let crc = hasher.finalize();
    (crc ^ (crc >> 16)) as u16
}

/// What the slot bytes `bytes` (a whole slot, at least one line) hold.
pub(crate) fn decode(bytes: &[u8]) -> ScannedSlot {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let header = word(0);
    match header {
        FREE_WORD0 => return ScannedSlot::Free,
        0 => return ScannedSlot::Zero,
        // No header has bit 61 (the marker's) without the used bit.
        _ if header & USED == 0 || header & !(PRESENT | USED | TID_MASK) != 0 => {
            return ScannedSlot::Torn(TornSlot { tid: None, line: None })
        }
        _ => {}
    }
    let ids = word(8);
    let key_len = ((ids >> 32) & 0xFFFF) as usize;
    let value_len = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes")) as usize;
    let total = HEADER as usize + pad8(key_len) as usize + pad8(value_len) as usize;
    let tid = header & TID_MASK;
    if total > bytes.len() {
        return ScannedSlot::Torn(TornSlot { tid: Some(tid), line: None });
    }
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if checksum(&bytes[..total]) != crc {
        let stored = u16::from_le_bytes(bytes[14..16].try_into().expect("2 bytes"));
        let line = (line_check(&bytes[..total]) == stored).then(|| {
            let key_at = HEADER as usize;
            let key_end = (key_at + key_len).min(UNIT as usize);
            FirstLine {
                table: ids as u32,
                key_len,
                key_prefix: bytes[key_at..key_end.max(key_at)].to_vec(),
                present: header & PRESENT != 0,
                tid,
            }
        });
        return ScannedSlot::Torn(TornSlot { tid: Some(tid), line });
    }
    let key_at = HEADER as usize;
    let value_at = key_at + pad8(key_len) as usize;
    ScannedSlot::Image {
        table: ids as u32,
        key: bytes[key_at..key_at + key_len].to_vec(),
        value: (header & PRESENT != 0).then(|| bytes[value_at..value_at + value_len].to_vec()),
        tid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_pm::{Direct, PmOptions};

    #[test]
    fn slots_round_trip_and_torn_ones_are_told() {
        let pool = Arc::new(Pool::<Direct>::create_in_memory(4 << 20, 256 << 10, &PmOptions::default()).unwrap());
        let home = PmHome::open(Arc::clone(&pool));
        let units = PmHome::<Direct>::units_for(3, 100);
        assert_eq!(units, 3);
        let a = home.allocate(units).unwrap();
        let b = home.allocate(units).unwrap();
        assert_eq!(b, a + 3 * UNIT);
        assert!(home.value_capacity(a, 3) >= 100);
        home.write(a, SlotImage { table: 2, key: b"abc", value: Some(&[7; 100]), tid: 42 });
        home.write(b, SlotImage { table: 1, key: b"xyz", value: None, tid: 43 });
        let mut seen = HashMap::new();
        PmHome::open(Arc::clone(&pool)).scan(|offset, slot| {
            seen.insert(offset, slot);
        });
        assert_eq!(seen[&a], ScannedSlot::Image { table: 2, key: b"abc".to_vec(), value: Some(vec![7; 100]), tid: 42 });
        assert_eq!(seen[&b], ScannedSlot::Image { table: 1, key: b"xyz".to_vec(), value: None, tid: 43 });
        assert_eq!(seen[&(b + 3 * UNIT)], ScannedSlot::Free);
        // One value word of `a` left from an older version: torn, its
        // first line whole.
        pool.backend().write(a + 64, &[0u8; 8]);
        let mut bytes = vec![0u8; 192];
        pool.backend().read(a, &mut bytes);
        let line = FirstLine { table: 2, key_len: 3, key_prefix: b"abc".to_vec(), present: true, tid: 42 };
        assert_eq!(decode(&bytes), ScannedSlot::Torn(TornSlot { tid: Some(42), line: Some(line) }));
        // A word of its first line from another version: the line is not
        // whole.
        pool.backend().write(a + 24, b"abd\0\0\0\0\0");
        pool.backend().read(a, &mut bytes);
        assert_eq!(decode(&bytes), ScannedSlot::Torn(TornSlot { tid: Some(42), line: None }));
        // Zeroed: damage, never a slot not yet written (chunks are
        // formatted); freed: the marker.
        pool.backend().write(a, &[0u8; 192]);
        pool.backend().read(a, &mut bytes);
        assert_eq!(decode(&bytes), ScannedSlot::Zero);
        home.clear(a);
        pool.backend().read(a, &mut bytes);
        assert_eq!(decode(&bytes), ScannedSlot::Free);
        // Freed slots are reused first.
        assert!(pool.owned_chunks().iter().all(|(_, owner)| owner.kind() == PM_HOME_CHUNK_KIND));
        assert!(check_no_unformatted_chunks(&pool).is_ok());
        home.free(a);
        assert_eq!(home.allocate(units).unwrap(), a);
    }

    /// Every single bit flipped in the first line of a slot, and any one
    /// bit flipped in the free marker, reads as neither a whole slot nor a
    /// whole first line of another version nor a free slot: recovery sees
    /// the damage.
    #[test]
    fn one_flipped_bit_of_a_first_line_is_seen() {
        for (key, value) in
            [(&b"k07"[..], Some(&[5u8; 48][..])), (&b"k05"[..], None), (&[9u8; 60][..], Some(&b"v"[..]))]
        {
            let image = SlotImage { table: 1, key, value, tid: 0x1234_5678 };
            let mut bytes = encode(image);
            bytes.resize(bytes.len().next_multiple_of(UNIT as usize), 0);
            let ScannedSlot::Image { .. } = decode(&bytes) else { panic!("round trip") };
            let mut whole = 0;
            for bit in 0..UNIT as usize * 8 {
                let mut damaged = bytes.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                match decode(&damaged) {
                    ScannedSlot::Torn(TornSlot { line: Some(line), .. }) => {
                        // Only a flip outside what the check covers (the
                        // CRC field, bytes past the slot's length) leaves
                        // the line whole, and then it reads unchanged.
                        assert!((160..192).contains(&bit), "bit {bit}: {line:?}");
                        assert_eq!((line.present, line.tid), (value.is_some(), 0x1234_5678));
                        whole += 1;
                    }
                    ScannedSlot::Torn(TornSlot { line: None, .. }) | ScannedSlot::Zero => {}
                    ScannedSlot::Image { .. } => {
                        // Bytes past the encoded length: not part of the slot.
                        let encoded = encode(image).len();
                        assert!(bit / 8 >= encoded, "bit {bit} of {encoded} bytes read as whole");
                    }
                    ScannedSlot::Free => panic!("bit {bit}: a slot read as free"),
                }
            }
            assert_eq!(whole, 32, "the CRC field's bits leave the first line whole");
        }
        for bit in 0..64 {
            let mut bytes = vec![0u8; UNIT as usize];
            bytes[..8].copy_from_slice(&(FREE_WORD0 ^ 1 << bit).to_le_bytes());
            assert!(matches!(decode(&bytes), ScannedSlot::Torn(TornSlot { tid: None, line: None })), "bit {bit}");
        }
    }
}
