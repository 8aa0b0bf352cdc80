//! The NVM-tuple heap (zen-plus.txt §3.1, §3.3.1, §3.4): fixed-size tuple
//! slots in pool chunks, per-thread regions and DRAM-only space
//! management. The log-free persist of Algorithm 1 that writes into them
//! is `durability::zen_persist`.
//!
//! # Chunks and slots
//!
//! Each region (one per worker thread) owns chunks per table, tagged
//! `ChunkOwner::compose(HEAP_CHUNK_KIND, table, thread)` in the pool's chunk
//! table, so recovery finds them without any other metadata. A chunk is
//!
//! ```text
//! +0            allocation bitmap, 1 bit per slot, rounded up to 64 B
//!               (written only by `zen-naive-alloc`; zero for `zen`)
//! +first_slot   slot 0, slot 1, ... each `slot_size` bytes (a multiple of
//!               16, so a 16-byte header never straddles a cache line)
//! ```
//!
//! An NVM-tuple (all integers little-endian):
//!
//! ```text
//! +0   u64  bit 63: LP (last persisted), bits 0-62: Tx-CTS (FREE_WORD0 =
//!           free slot in a formatted chunk; 0 = free in an old-kind chunk,
//!           damage in a formatted one)
//! +8   u64  bit 63: deleted, bits 0-55: tuple ID
//! +16  u32  CRC-32 of (Tx-CTS as u64 ++ bytes 8..16 ++ bytes 20..end)
//! +20  u32  value length
//! +24  u16  key length
//! +26  key, then value            (slot_size = round16(26 + max key + max value))
//! ```
//!
//! The first 16 bytes are the paper's header; nothing in PM is specific to
//! concurrency control. The key is stored so recovery can rebuild the
//! indexes. The CRC is not in the paper: it lets recovery recognise a slot
//! whose previous (stale, committed) content was partly overwritten when a
//! crash hit (see "torn reuse" below).
//!
//! # Persist
//!
//! How a commit's tuples are written and made durable (Zen's Algorithm 1
//! with its LP bit, or WBL's one fence) is a durability scheme:
//! `durability::zen_persist`. This module keeps what it relies on: word 0
//! (Tx-CTS and LP bit) is the first store to a tuple's header line, and
//! the slots are fresh, never the row's current version.
//!
//! # Torn reuse
//!
//! A reused slot holds a *stale* version: committed, superseded, CRC-valid.
//! If a crash interrupts the overwrite, each line holds a prefix of its new
//! stores, so the slot may mix old and new bytes — e.g. the old Tx-CTS with
//! part of a new key, which would read as a committed version of another
//! key. The CRC covers the Tx-CTS and every other byte, so such a mix fails
//! it (the crash tests catch a heap without it) and recovery erases the
//! slot; a committed tuple never fails it, since all of it was durable
//! before its LP bit. Word 0 is also stored first, so a header line that kept
//! its old Tx-CTS kept its old bytes too.
//!
//! # Space management (§3.4): DRAM only
//!
//! Per region and table: a list of *stale* free slots (hold a superseded
//! committed version), a list of *clean* free slots (zero, erased, or a
//! superseded tombstone) and a bump range in the newest chunk. Allocation
//! and free never touch PM (`zen-naive-alloc` persists a bitmap word for
//! each, for Fig. 17). A superseded version goes to a garbage queue with a
//! *stamp* — the global epoch read after the row points at its successor, and
//! before the row is unlocked — in the region owning its chunk (directly, or
//! through that region's inbox when another thread superseded it).
//!
//! *Reclamation.* A garbage slot becomes free once every active worker
//! announced an epoch above its stamp (`Epochs::min_active`): a reader that
//! could still copy it announced its epoch before loading the row's slot,
//! which happened before the stamp was read. This is the paper's "minimum
//! Tx-CTS" with epochs in place of timestamps. At most `gc_batch` entries are
//! examined per commit unless space runs out.
//!
//! *The LP pin.* Recovery takes the largest Tx-CTS among a region's LP
//! tuples as its commit horizon. If the LP tuple of the region's latest
//! transaction were reused, that horizon could fall below the transaction's
//! other (still live) tuples, which would then be discarded. So the slot of
//! the region's latest LP tuple is never reused until a newer transaction of
//! the region has committed (`pinned`; the paper does not need this because
//! it assumes the maximum LP tuple survives).
//!
//! *Under WBL's window rule* (`CommitRule::Window`, the `wbl` engine) a
//! version is committed only once a group-commit record covers its
//! timestamp (`durability::wbl_window`), and until then recovery may have to
//! fall back to the version it superseded. So the horizon is also at most
//! the durable epoch + 1: a superseded slot (stamped at or above its
//! successor's epoch) is reused, erased or released as a tombstone only
//! once its successor's window is durable. There are no LP bits and no pin.
//!
//! *Tombstones.* A delete writes a tombstone version. Stale versions of the
//! key may still sit intact in free slots, so a tombstone may be reused only
//! after they are gone: a *sweep* advances the epoch, waits for every region
//! once (so each commit stamped before the advance has handed over its
//! garbage), then erases every reclaimable stale slot in every region (one
//! 8-byte store of 0 + flush each, one fence) and publishes its horizon.
//! Tombstones stamped below the horizon are then reclaimed by their region,
//! unless a stale version of the same key is held back by an LP pin. Sweeps
//! run when `sweep_threshold` tombstones are waiting, and erase only the
//! stale slots of tables that have a tombstone to release (a key's stale
//! versions live in its table's heap); in an update workload stale slots
//! are reused first, so a sweep erases few.

use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::storage::record::RowKind;
use crate::storage::zen::cache::Row;
use parking_lot::Mutex;
use pmtx_pm::{ChunkId, ChunkOwner, PersistBatch, PmBackend, Pool, PoolError, CACHE_LINE};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
/// Chunk-map flag of a formatted chunk.
const FORMATTED_ENTRY: u64 = 1 << 62;
const _: () = assert!(CACHE_LINE.is_multiple_of(16), "16-byte aligned headers stay in one line");

/// How long a commit that finds no free slot waits for garbage to become
/// reclaimable before reporting `OutOfSpace`.
const SPACE_WAIT: Duration = Duration::from_millis(200);

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

/// Encodes a tuple into `buffer` (word 0 without the LP bit).
pub(crate) fn encode_tuple(buffer: &mut Vec<u8>, cts: u64, tuple_id: u64, deleted: bool, key: &[u8], value: &[u8]) {
    debug_assert!(cts != 0 && cts & LP_BIT == 0);
    buffer.clear();
    buffer.extend_from_slice(&cts.to_le_bytes());
    let word1 = (tuple_id & TUPLE_ID_MASK) | if deleted { DELETED_BIT } else { 0 };
    buffer.extend_from_slice(&word1.to_le_bytes());
    buffer.extend_from_slice(&[0; 4]);
    buffer.extend_from_slice(&(value.len() as u32).to_le_bytes());
    buffer.extend_from_slice(&(key.len() as u16).to_le_bytes());
    buffer.extend_from_slice(key);
    buffer.extend_from_slice(value);
    let crc = tuple_crc(cts, buffer);
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
    let mut hasher = crc32fast::Hasher::new();
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

/// How a heap's transactions commit, which also decides when a superseded
/// version may be reused (module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitRule {
    /// Zen: committed once the LP bit of the transaction's last tuple is
    /// durable (Algorithm 1).
    LastPersisted,
    /// WBL: committed once a group-commit record whose c_p covers the
    /// transaction's timestamp is durable (`durability::wbl_window`).
    Window,
}

/// Where a region's new chunks go (`zen+`'s NUMA placement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum ChunkPlacement {
    /// The lowest free chunk (every engine but `zen+` on several nodes).
    #[default]
    Anywhere,
    /// A chunk on the backend's (emulated) NUMA node.
    OnNode(u32),
    /// Any chunk, its pages then bound to the machine's node (`mbind`).
    Bound(u32),
}

/// Whether a free slot may hold a committed version of some key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotKind {
    /// Zero, erased, or a (harmless) superseded tombstone.
    Clean,
    /// A superseded committed version: must be erased before a tombstone of
    /// its key is reused.
    Stale,
}

/// A superseded version waiting for the reclamation horizon.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Garbage {
    pub(crate) slot: u64,
    pub(crate) stamp: u64,
    pub(crate) kind: SlotKind,
}

/// A committed tombstone that is its key's latest version.
pub(crate) struct Tombstone {
    pub(crate) table: u32,
    pub(crate) key: Box<[u8]>,
    row: *const Row,
    pub(crate) slot: u64,
    /// Tx-CTS of the delete (guards against the slot being reused by a later
    /// tombstone of the same row).
    cts: u64,
    pub(crate) stamp: u64,
}

// SAFETY: the row pointer refers to a row owned by a table that lives as
// long as the engine, which outlives every region.
unsafe impl Send for Tombstone {}

impl Tombstone {
    /// A tombstone of `row` (counted in the row, which keeps it from being
    /// unlinked while the tombstone waits; see `Row::referenced`).
    pub(crate) fn new(table: u32, key: &[u8], row: &Row, slot: u64, cts: u64, stamp: u64) -> Self {
        row.add_tombstone_ref();
        Self { table, key: key.into(), row, slot, cts, stamp }
    }

    /// The tombstone leaves its queue for good.
    fn release(self) {
        // SAFETY: see the Send impl; the count this tombstone holds keeps
        // the row from being unlinked, so it is alive.
        unsafe { &*self.row }.drop_tombstone_ref();
    }
}

/// Free space of one region in one table.
#[derive(Default)]
pub(crate) struct TableHeap {
    pub(crate) chunks: Vec<ChunkId>,
    pub(crate) stale: Vec<u64>,
    pub(crate) clean: Vec<u64>,
    fresh_next: u64,
    fresh_end: u64,
}

impl TableHeap {
    pub(crate) fn pop(&mut self, slot_size: u64) -> Option<(u64, SlotKind)> {
        if let Some(slot) = self.stale.pop() {
            return Some((slot, SlotKind::Stale));
        }
        if let Some(slot) = self.clean.pop() {
            return Some((slot, SlotKind::Clean));
        }
        if self.fresh_next < self.fresh_end {
            let slot = self.fresh_next;
            self.fresh_next += slot_size;
            return Some((slot, SlotKind::Clean));
        }
        None
    }

    fn push(&mut self, slot: u64, kind: SlotKind) {
        match kind {
            SlotKind::Stale => self.stale.push(slot),
            SlotKind::Clean => self.clean.push(slot),
        }
    }

    /// Free slots known (bump range included).
    pub(crate) fn free_slots(&self, slot_size: u64) -> u64 {
        (self.stale.len() + self.clean.len()) as u64 + (self.fresh_end - self.fresh_next) / slot_size
    }
}

/// A slot reserved for one write of a committing transaction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reserved {
    pub(crate) table: u32,
    pub(crate) slot: u64,
    pub(crate) kind: SlotKind,
}

/// A region's DRAM allocator state; locked by its worker for a whole commit
/// (so a sweep never sees a slot that is being written).
pub(crate) struct RegionState {
    pub(crate) heaps: Vec<TableHeap>,
    garbage: VecDeque<Garbage>,
    tombstones: VecDeque<Tombstone>,
    /// Largest Tx-CTS this region's thread used (per-thread monotone, which
    /// Algorithm 2 relies on).
    pub(crate) last_cts: u64,
    /// Slot of the region's latest LP tuple (0: none); never reused.
    pinned: u64,
    /// Freed slots held back by the pin.
    deferred: Vec<(u64, SlotKind)>,
}

/// One thread's heap region.
pub(crate) struct Region {
    pub(crate) thread: u16,
    pub(crate) state: Mutex<RegionState>,
    /// Garbage handed over by other threads (locked only briefly; never
    /// held while taking another lock).
    inbox: Mutex<Vec<Garbage>>,
}

/// The horizon of the last completed sweep.
#[derive(Default)]
struct SweepState {
    horizon: u64,
    protected: Vec<(u32, Vec<u8>)>,
}

/// What [`Heap::audit`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeapAudit {
    pub(crate) live: u64,
    pub(crate) free: u64,
    pub(crate) deferred: u64,
    pub(crate) garbage: u64,
}

/// Heap statistics.
#[derive(Default)]
pub(crate) struct HeapCounters {
    pub(crate) chunks_allocated: AtomicU64,
    pub(crate) slots_reclaimed: AtomicU64,
    pub(crate) tombstones_reclaimed: AtomicU64,
    pub(crate) sweeps: AtomicU64,
    pub(crate) slots_erased: AtomicU64,
    /// Chunks placed on another node than asked (that node had none free),
    /// or whose binding to their node failed.
    pub(crate) chunks_misplaced: AtomicU64,
}

/// All regions of all tables, plus the chunk -> (table, region) map.
pub(crate) struct Heap {
    pub(crate) regions: Vec<Region>,
    pub(crate) geometries: Vec<SlotGeometry>,
    /// Per chunk: 0, or (table + 1) << 16 | thread.
    chunk_map: Vec<AtomicU64>,
    data_offset: u64,
    chunk_size: u64,
    pub(crate) naive_alloc: bool,
    /// How transactions commit (what the reclamation horizon waits for).
    pub(crate) rule: CommitRule,
    sweep_lock: Mutex<()>,
    sweep: Mutex<SweepState>,
    /// `sweep.horizon`, readable without the lock (checked every commit).
    sweep_horizon: AtomicU64,
    pub(crate) counters: HeapCounters,
    /// Where each region's new chunks go.
    placement: Vec<ChunkPlacement>,
}

impl Heap {
    pub(crate) fn new<B: PmBackend>(
        pool: &Pool<B>,
        geometries: Vec<SlotGeometry>,
        regions: usize,
        naive_alloc: bool,
        rule: CommitRule,
    ) -> Self {
        let geometry = pool.geometry();
        let tables = geometries.len();
        Self {
            regions: (0..regions)
                .map(|thread| Region {
                    thread: thread as u16,
                    state: Mutex::new(RegionState {
                        heaps: (0..tables).map(|_| TableHeap::default()).collect(),
                        garbage: VecDeque::new(),
                        tombstones: VecDeque::new(),
                        last_cts: 0,
                        pinned: 0,
                        deferred: Vec::new(),
                    }),
                    inbox: Mutex::new(Vec::new()),
                })
                .collect(),
            geometries,
            chunk_map: (0..geometry.chunk_count).map(|_| AtomicU64::new(0)).collect(),
            data_offset: geometry.data_offset,
            chunk_size: geometry.chunk_size,
            naive_alloc,
            rule,
            sweep_lock: Mutex::new(()),
            sweep: Mutex::new(SweepState::default()),
            sweep_horizon: AtomicU64::new(0),
            counters: HeapCounters::default(),
            placement: vec![ChunkPlacement::Anywhere; regions],
        }
    }

    /// Sets where each region's new chunks go (regions not listed: anywhere).
    pub(crate) fn with_placement(mut self, placement: impl IntoIterator<Item = ChunkPlacement>) -> Self {
        for (slot, choice) in self.placement.iter_mut().zip(placement) {
            *slot = choice;
        }
        self
    }

    /// A new (formatted) chunk for (`table`, `region`), placed as the
    /// region asks: every slot's word 0 holds [`FREE_WORD0`], flushed and
    /// covered by the one fence that makes the chunk's owner durable.
    fn allocate_chunk<B: PmBackend>(&self, pool: &Pool<B>, table: u32, region: usize) -> Result<ChunkId, PoolError> {
        let owner = ChunkOwner::compose(HEAP_CHUNK_KIND_FORMATTED, table, self.regions[region].thread);
        let geometry = self.geometries[table as usize];
        let backend = pool.backend();
        let format = |chunk_offset: u64| {
            let mut batch = PersistBatch::new();
            for index in 0..geometry.slots_per_chunk {
                let slot = chunk_offset + geometry.first_slot + index * geometry.slot_size;
                backend.store_u64(slot, FREE_WORD0);
                batch.add(slot, 8);
            }
            batch.flush(backend);
        };
        match self.placement[region] {
            ChunkPlacement::Anywhere => pool.allocate_chunk_formatted(owner, None, &format),
            ChunkPlacement::OnNode(node) => match pool.allocate_chunk_formatted(owner, Some(node), &format) {
                Err(PoolError::Full { .. }) => {
                    // The node is full; a remote chunk beats failing.
                    let chunk = pool.allocate_chunk_formatted(owner, None, &format)?;
                    self.counters.chunks_misplaced.fetch_add(1, Ordering::Relaxed);
                    Ok(chunk)
                }
                other => other,
            },
            ChunkPlacement::Bound(node) => {
                let chunk = pool.allocate_chunk_formatted(owner, None, &format)?;
                if pool.bind_chunk_to_numa_node(chunk, node).is_err() {
                    self.counters.chunks_misplaced.fetch_add(1, Ordering::Relaxed);
                }
                Ok(chunk)
            }
        }
    }

    /// Bytes of the free slots in every region's lists and bump ranges, and
    /// the superseded tuples waiting for reclamation (`zen+`'s β).
    pub(crate) fn free_slot_bytes_and_garbage(&self) -> (u64, u64) {
        let (mut bytes, mut garbage) = (0, 0);
        for region in &self.regions {
            let state = region.state.lock();
            for (table, heap) in state.heaps.iter().enumerate() {
                let slot_size = self.geometries[table].slot_size;
                bytes += heap.free_slots(slot_size) * slot_size;
            }
            garbage += state.garbage.len() as u64 + region.inbox.lock().len() as u64;
        }
        (bytes, garbage)
    }

    fn chunk_index(&self, slot: u64) -> usize {
        ((slot - self.data_offset) / self.chunk_size) as usize
    }

    /// Byte offset of `slot` from the first slot of its chunk (`None`
    /// before it), for `table`'s geometry.
    fn offset_in_chunk(&self, slot: u64, table: u32) -> Option<u64> {
        let chunk_start = self.data_offset + self.chunk_index(slot) as u64 * self.chunk_size;
        (slot - chunk_start).checked_sub(self.geometries[table as usize].first_slot)
    }

    /// `zen-naive-alloc`: offset of the bitmap word holding `slot`'s bit,
    /// and the bit's mask.
    pub(crate) fn bitmap_bit(&self, slot: u64) -> (u64, u64) {
        let (table, _) = self.owner_of(slot);
        let index =
            self.offset_in_chunk(slot, table).expect("a listed slot") / self.geometries[table as usize].slot_size;
        let chunk_start = self.data_offset + self.chunk_index(slot) as u64 * self.chunk_size;
        (chunk_start + index / 64 * 8, 1 << (index % 64))
    }

    /// (table, region) owning the chunk of `slot`.
    pub(crate) fn owner_of(&self, slot: u64) -> (u32, usize) {
        let entry = self.chunk_map[self.chunk_index(slot)].load(Ordering::Acquire);
        assert!(entry != 0, "slot {slot:#x} is not in a zen heap chunk");
        ((((entry & !FORMATTED_ENTRY) >> 16) - 1) as u32, (entry & 0xFFFF) as usize)
    }

    /// What erasing `slot` stores into its word 0: [`FREE_WORD0`] in a
    /// formatted chunk, 0 in a chunk of the old kind.
    pub(crate) fn free_word(&self, slot: u64) -> u64 {
        let entry = self.chunk_map[self.chunk_index(slot)].load(Ordering::Acquire);
        debug_assert!(entry != 0, "slot {slot:#x} is not in a zen heap chunk");
        if entry & FORMATTED_ENTRY != 0 {
            FREE_WORD0
        } else {
            0
        }
    }

    /// Records that `chunk` belongs to (`table`, `thread`), and whether it
    /// is formatted (free slots hold [`FREE_WORD0`]).
    pub(crate) fn register_chunk(&self, chunk: ChunkId, table: u32, thread: u16, formatted: bool) {
        let flag = if formatted { FORMATTED_ENTRY } else { 0 };
        self.chunk_map[chunk.0 as usize].store(flag | ((table as u64 + 1) << 16) | thread as u64, Ordering::Release);
    }

    /// Byte offset of slot `index` of `chunk` in `table`.
    pub(crate) fn slot_offset<B: PmBackend>(&self, pool: &Pool<B>, table: u32, chunk: ChunkId, index: u64) -> u64 {
        let geometry = &self.geometries[table as usize];
        pool.chunk_offset(chunk) + geometry.first_slot + index * geometry.slot_size
    }

    /// `zen-naive-alloc`: sets or clears the slot's bitmap bit and persists
    /// the word (one flush and one fence per allocation or free).
    fn persist_bitmap_bit<B: PmBackend>(&self, pool: &Pool<B>, slot: u64, allocated: bool) {
        let (word_offset, mask) = self.bitmap_bit(slot);
        let backend = pool.backend();
        let word = backend.load_u64(word_offset);
        let new = if allocated { word | mask } else { word & !mask };
        backend.store_u64(word_offset, new);
        backend.persist(word_offset, 8);
    }

    /// `zen-naive-alloc` recovery: rewrites every bitmap word of `region` so
    /// that exactly the slots not in a free list are marked, in one fence.
    pub(crate) fn rebuild_bitmaps<B: PmBackend>(&self, pool: &Pool<B>, region: usize) {
        let state = self.regions[region].state.lock();
        let mut free = std::collections::HashSet::new();
        for heap in &state.heaps {
            free.extend(heap.stale.iter().chain(heap.clean.iter()).copied());
        }
        free.extend(state.deferred.iter().map(|(slot, _)| *slot));
        let backend = pool.backend();
        let mut batch = PersistBatch::new();
        for (table, heap) in state.heaps.iter().enumerate() {
            let geometry = &self.geometries[table];
            for &chunk in &heap.chunks {
                let start = pool.chunk_offset(chunk);
                for word_index in 0..geometry.slots_per_chunk.div_ceil(64) {
                    let mut word = 0u64;
                    for bit in 0..64 {
                        let index = word_index * 64 + bit;
                        if index >= geometry.slots_per_chunk {
                            break;
                        }
                        let slot = start + geometry.first_slot + index * geometry.slot_size;
                        if !free.contains(&slot) {
                            word |= 1 << bit;
                        }
                    }
                    let offset = start + word_index * 8;
                    if backend.load_u64(offset) != word {
                        backend.store_u64(offset, word);
                        batch.add(offset, 8);
                    }
                }
            }
        }
        if !batch.is_empty() {
            batch.commit(backend);
        }
    }

    /// (table, region) owning the chunk of `offset`, or `None` if `offset` is
    /// not in a chunk of this heap.
    fn try_owner_of(&self, offset: u64) -> Option<(u32, usize)> {
        let index = offset.checked_sub(self.data_offset)? / self.chunk_size;
        let entry = self.chunk_map.get(usize::try_from(index).ok()?)?.load(Ordering::Acquire);
        (entry != 0).then(|| ((((entry & !FORMATTED_ENTRY) >> 16) - 1) as u32, (entry & 0xFFFF) as usize))
    }

    /// Structural audit of the DRAM allocator against the rows (crash
    /// verification and tests; call it with no transaction running).
    /// `live` lists (table, slot) of every row's latest version. Checks that
    /// no slot is both live and free (in a stale, clean or deferred list or
    /// the unallocated rest of a chunk), live and waiting as garbage, listed
    /// twice, or outside a chunk of its own table and region; and, for
    /// `zen-naive-alloc`, that the persisted bitmap marks live slots
    /// allocated and listed free slots free.
    pub(crate) fn audit<B: PmBackend>(&self, pool: &Pool<B>, live: &[(u32, u64)]) -> Result<HeapAudit, String> {
        use std::collections::HashMap;
        #[derive(Clone, Copy, Debug)]
        enum Place {
            Live,
            Free,
            Deferred,
            Garbage,
        }
        let mut places: HashMap<u64, Place> = HashMap::with_capacity(live.len() * 2);
        // Records where `slot` was found, checking that it is a slot of the
        // expected table and region (when given) and not found before.
        let mut record = |slot: u64, place: Place, table: Option<u32>, region: Option<usize>| -> Result<(), String> {
            let (owner_table, owner_region) =
                self.try_owner_of(slot).ok_or_else(|| format!("{place:?} slot {slot:#x} is in no heap chunk"))?;
            if table.is_some_and(|t| t != owner_table) || region.is_some_and(|r| r != owner_region) {
                return Err(format!(
                    "{place:?} slot {slot:#x} listed under table {table:?} region {region:?} lies in a chunk of \
                     table #{owner_table} region {owner_region}"
                ));
            }
            let geometry = &self.geometries[owner_table as usize];
            if self.offset_in_chunk(slot, owner_table).is_none_or(|past| {
                !past.is_multiple_of(geometry.slot_size) || past / geometry.slot_size >= geometry.slots_per_chunk
            }) {
                return Err(format!("{place:?} slot {slot:#x} is not a slot of table #{owner_table}"));
            }
            if let Some(previous) = places.insert(slot, place) {
                return Err(format!("slot {slot:#x} of table #{owner_table} is both {previous:?} and {place:?}"));
            }
            Ok(())
        };
        for &(table, slot) in live {
            record(slot, Place::Live, Some(table), None)?;
        }
        let mut audit = HeapAudit { live: live.len() as u64, ..HeapAudit::default() };
        let mut bump_ranges = Vec::new();
        for (index, region) in self.regions.iter().enumerate() {
            let state = region.state.lock();
            for (table, heap) in state.heaps.iter().enumerate() {
                for &slot in heap.stale.iter().chain(heap.clean.iter()) {
                    record(slot, Place::Free, Some(table as u32), Some(index))?;
                    audit.free += 1;
                }
                if heap.fresh_next < heap.fresh_end {
                    bump_ranges.push((table, heap.fresh_next, heap.fresh_end));
                }
            }
            for &(slot, _) in &state.deferred {
                record(slot, Place::Deferred, None, Some(index))?;
                audit.deferred += 1;
            }
            for garbage in state.garbage.iter().chain(region.inbox.lock().iter()) {
                record(garbage.slot, Place::Garbage, None, Some(index))?;
                audit.garbage += 1;
            }
        }
        for (table, start, end) in bump_ranges {
            if let Some((slot, place)) = places.iter().find(|(slot, _)| (start..end).contains(*slot)) {
                return Err(format!(
                    "{place:?} slot {slot:#x} of table #{table} lies in the unallocated rest of its chunk \
                     [{start:#x}, {end:#x})"
                ));
            }
        }
        if self.naive_alloc {
            for (&slot, place) in &places {
                let (word_offset, mask) = self.bitmap_bit(slot);
                let allocated = pool.backend().load_u64(word_offset) & mask != 0;
                match place {
                    Place::Live if !allocated => {
                        return Err(format!("live slot {slot:#x} is free in the persisted bitmap"))
                    }
                    Place::Free if allocated => {
                        return Err(format!("free slot {slot:#x} is allocated in the persisted bitmap"))
                    }
                    _ => {}
                }
            }
        }
        Ok(audit)
    }

    /// Hands a superseded version to the region owning its chunk. Called by
    /// a committer holding its own region's state as `own`.
    pub(crate) fn retire(&self, own_region: usize, own: &mut RegionState, garbage: Garbage) {
        let (_, region) = self.owner_of(garbage.slot);
        if region == own_region {
            own.garbage.push_back(garbage);
        } else {
            self.regions[region].inbox.lock().push(garbage);
        }
    }

    /// The sweep (module documentation, "Tombstones"). Returns false if
    /// another sweep was running or the epoch could not advance (`advance`,
    /// the engine's way to advance its epoch, returned `None`: closed). The
    /// caller holds no region lock and is not announced in any epoch.
    pub(crate) fn sweep<B: PmBackend>(
        &self,
        pool: &Pool<B>,
        epochs: &Epochs,
        advance: &dyn Fn() -> Option<u64>,
    ) -> bool {
        let Some(_sweeping) = self.sweep_lock.try_lock() else { return false };
        // Every commit that reads its stamp from now on reads >= `advanced`.
        let Some(advanced) = advance() else { return false };
        // IMPORTANT: barrier. A commit stamped below `advanced` held its
        // region lock from before the advance until it had handed over all
        // its garbage; taking every region lock once waits for all of them.
        for region in &self.regions {
            drop(region.state.lock());
        }
        let horizon = self.horizon(epochs).min(advanced);
        let backend = pool.backend();
        // The tables whose tombstones this sweep can release. Every
        // tombstone stamped below the horizon is queued by now (the
        // barrier), and later ones are stamped at or above `advanced`. Only
        // these tables' stale slots need erasing: a key's stale versions
        // live in its own table's heap, and a stale slot of a table without
        // a releasable tombstone is an ordinary free slot. (Erasing every
        // table's stale slots cost TPC-C a cache miss per updated stock or
        // customer version, for deletes of NEW-ORDER rows only.)
        let mut swept = vec![false; self.geometries.len()];
        for region in &self.regions {
            let state = region.state.lock();
            for tombstone in state.tombstones.iter().filter(|tombstone| tombstone.stamp < horizon) {
                swept[tombstone.table as usize] = true;
            }
        }
        let mut protected = Vec::new();
        let mut erased = 0;
        for region in &self.regions {
            let mut state = region.state.lock();
            state.drain_inbox(&region.inbox);
            // IMPORTANT: every entry stamped below the horizon, wherever it
            // sits in the queue. The tombstones this sweep releases rely on
            // all their key's stale versions being erased (or protected); an
            // entry left queued behind newer ones would survive un-erased
            // and could resurrect a deleted key after a crash.
            state.reclaim_all_below(self, pool, horizon);
            debug_assert!(state.garbage.iter().all(|garbage| garbage.stamp >= horizon));
            for &(slot, kind) in &state.deferred {
                if kind == SlotKind::Stale && swept[self.owner_of(slot).0 as usize] {
                    protected.push(self.read_key(pool, slot));
                }
            }
            for (table, heap) in state.heaps.iter_mut().enumerate() {
                if !swept[table] {
                    continue;
                }
                for slot in heap.stale.drain(..) {
                    backend.store_u64(slot, self.free_word(slot));
                    backend.flush(slot, 8);
                    heap.clean.push(slot);
                    erased += 1;
                }
            }
        }
        // IMPORTANT: the erasures are durable before any tombstone that
        // relies on them is reused.
        backend.fence();
        self.counters.sweeps.fetch_add(1, Ordering::Relaxed);
        self.counters.slots_erased.fetch_add(erased, Ordering::Relaxed);
        let mut sweep = self.sweep.lock();
        if horizon > sweep.horizon {
            *sweep = SweepState { horizon, protected };
            self.sweep_horizon.store(horizon, Ordering::Release);
        }
        true
    }

    /// (table, key) of the tuple in `slot`.
    fn read_key<B: PmBackend>(&self, pool: &Pool<B>, slot: u64) -> (u32, Vec<u8>) {
        let (table, _) = self.owner_of(slot);
        let mut meta = [0u8; META_LEN as usize];
        pool.backend().read(slot, &mut meta);
        let key_len = u16::from_le_bytes([meta[KEY_LEN_AT], meta[KEY_LEN_AT + 1]]) as usize;
        let mut key = vec![0u8; key_len.min(self.geometries[table as usize].max_key)];
        pool.backend().read(slot + META_LEN, &mut key);
        (table, key)
    }

    /// Current reclamation horizon: garbage stamped below it is unreachable
    /// and, under the window rule, superseded by a durable commit.
    pub(crate) fn horizon(&self, epochs: &Epochs) -> u64 {
        // IMPORTANT: pairs with the reader's fence after announcing its epoch.
        std::sync::atomic::fence(Ordering::SeqCst);
        let active = epochs.min_active();
        match self.rule {
            CommitRule::LastPersisted => active,
            CommitRule::Window => active.min(epochs.durable() + 1),
        }
    }

    /// Free slots, chunks and waiting garbage over all regions (for stats).
    pub(crate) fn space(&self) -> (u64, u64, u64) {
        let (mut free, mut chunks, mut garbage) = (0, 0, 0);
        for region in &self.regions {
            let state = region.state.lock();
            for (table, heap) in state.heaps.iter().enumerate() {
                free += heap.free_slots(self.geometries[table].slot_size);
                chunks += heap.chunks.len() as u64;
            }
            garbage += state.garbage.len() as u64 + region.inbox.lock().len() as u64;
        }
        (free, chunks, garbage)
    }
}

/// The garbage stamp of a commit: the global epoch, read after its rows
/// point at their new slots.
pub(crate) fn horizon_stamp(epochs: &Epochs) -> u64 {
    // IMPORTANT: pairs with the reader's fence after announcing its epoch.
    std::sync::atomic::fence(Ordering::SeqCst);
    epochs.global()
}

impl RegionState {
    /// Adds a chunk's slots as a bump range (recovery adds scanned slots to
    /// the lists instead).
    fn add_fresh_chunk<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, table: u32, chunk: ChunkId) {
        let geometry = &heap.geometries[table as usize];
        let table_heap = &mut self.heaps[table as usize];
        table_heap.chunks.push(chunk);
        table_heap.fresh_next = heap.slot_offset(pool, table, chunk, 0);
        table_heap.fresh_end = table_heap.fresh_next + geometry.slots_per_chunk * geometry.slot_size;
    }

    /// Recovery: a chunk of this region.
    pub(crate) fn add_recovered_chunk(&mut self, table: u32, chunk: ChunkId) {
        self.heaps[table as usize].chunks.push(chunk);
    }

    /// Recovery: this region's pin and monotone Tx-CTS.
    pub(crate) fn set_recovered(&mut self, pinned: u64, last_cts: u64) {
        self.pinned = pinned;
        self.last_cts = self.last_cts.max(last_cts);
    }

    /// Recovery: a tombstone that is its key's latest version.
    pub(crate) fn add_tombstone(&mut self, tombstone: Tombstone) {
        self.tombstones.push_back(tombstone);
    }

    /// Moves garbage handed to region `region` into its queue.
    pub(crate) fn drain_inbox_of(&mut self, heap: &Heap, region: usize) {
        self.drain_inbox(&heap.regions[region].inbox);
    }

    /// Moves other threads' handed-over garbage into the queue.
    pub(crate) fn drain_inbox(&mut self, inbox: &Mutex<Vec<Garbage>>) {
        let mut inbox = inbox.lock();
        self.garbage.extend(inbox.drain(..));
    }

    /// Frees `slot` into its list (or holds it back while pinned).
    pub(crate) fn free_slot<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, slot: u64, kind: SlotKind) {
        if slot == self.pinned {
            self.deferred.push((slot, kind));
            return;
        }
        if heap.naive_alloc {
            heap.persist_bitmap_bit(pool, slot, false);
        }
        let (table, _) = heap.owner_of(slot);
        self.heaps[table as usize].push(slot, kind);
    }

    /// Frees every garbage entry stamped below `horizon` (the sweep; the
    /// bounded [`RegionState::reclaim`] may stop early).
    fn reclaim_all_below<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, horizon: u64) {
        let mut kept = VecDeque::with_capacity(self.garbage.len());
        let mut freed = 0;
        for garbage in std::mem::take(&mut self.garbage) {
            if garbage.stamp < horizon {
                self.free_slot(heap, pool, garbage.slot, garbage.kind);
                freed += 1;
            } else {
                kept.push_back(garbage);
            }
        }
        self.garbage = kept;
        heap.counters.slots_reclaimed.fetch_add(freed, Ordering::Relaxed);
    }

    /// Frees up to `limit` examined garbage entries stamped below
    /// `horizon`; may stop early (see the loop), which only delays space.
    pub(crate) fn reclaim<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, horizon: u64, limit: usize) -> usize {
        let mut freed = 0;
        let mut examined = 0;
        let mut index = 0;
        // Stamps are nearly sorted (own pushes are, inbox batches nearly):
        // stop at the first entry that is not reclaimable yet, but look a
        // little past it so one late inbox entry does not block the queue.
        while index < self.garbage.len() && examined < limit {
            examined += 1;
            if self.garbage[index].stamp < horizon {
                let garbage = self.garbage.remove(index).expect("in range");
                self.free_slot(heap, pool, garbage.slot, garbage.kind);
                freed += 1;
            } else if index >= 8 {
                break;
            } else {
                index += 1;
            }
        }
        heap.counters.slots_reclaimed.fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    /// Tombstones a new sweep would make reclaimable: stamped below
    /// `horizon` but not below the last sweep's (those wait for their row
    /// lock or an LP pin, which another sweep does not change). The queue is
    /// in stamp order: own commits push growing stamps, recovery pushes
    /// stamp 0 before any commit, and reclamation keeps the order of what it
    /// leaves.
    pub(crate) fn tombstones_awaiting_sweep(&self, heap: &Heap, horizon: u64) -> usize {
        let published = heap.sweep_horizon.load(Ordering::Acquire);
        self.tombstones.iter().take_while(|t| t.stamp < horizon).filter(|t| t.stamp >= published).count()
    }

    /// Reclaims the tombstones the last sweep made safe.
    pub(crate) fn reclaim_tombstones<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>) -> usize {
        let published = heap.sweep_horizon.load(Ordering::Acquire);
        if self.tombstones.front().is_none_or(|t| t.stamp >= published) {
            return 0;
        }
        let (horizon, protected) = {
            let sweep = heap.sweep.lock();
            if sweep.horizon == 0 || self.tombstones.front().is_none_or(|t| t.stamp >= sweep.horizon) {
                return 0;
            }
            (sweep.horizon, sweep.protected.clone())
        };
        let mut reclaimed = 0;
        let mut kept = VecDeque::new();
        while let Some(tombstone) = self.tombstones.pop_front() {
            if tombstone.stamp >= horizon {
                kept.push_back(tombstone);
                continue;
            }
            if protected.iter().any(|(table, key)| *table == tombstone.table && **key == *tombstone.key) {
                kept.push_back(tombstone);
                continue;
            }
            // SAFETY: see Tombstone.
            let row = unsafe { &*tombstone.row };
            if row.slot() != tombstone.slot {
                // Re-inserted since: the tombstone went through the garbage
                // queue like any superseded version.
                tombstone.release();
                continue;
            }
            let Some(word) = row.try_lock() else {
                kept.push_back(tombstone);
                continue;
            };
            if row.slot() == tombstone.slot && crate::storage::record::tid_of(word) == tombstone.cts {
                debug_assert!(word & crate::storage::record::ABSENT != 0);
                row.set_slot(0, 0);
                row.store_word(word);
                self.free_slot(heap, pool, tombstone.slot, SlotKind::Clean);
                reclaimed += 1;
            } else {
                row.store_word(word);
            }
            tombstone.release();
        }
        self.tombstones = kept;
        heap.counters.tombstones_reclaimed.fetch_add(reclaimed as u64, Ordering::Relaxed);
        reclaimed
    }

    /// After a commit whose LP tuple is `lp_slot` is durable: move the pin
    /// and release what the previous pin held back.
    pub(crate) fn move_pin<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, lp_slot: u64) {
        let previous = std::mem::replace(&mut self.pinned, lp_slot);
        if previous == 0 || self.deferred.is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut self.deferred);
        for (slot, kind) in deferred {
            self.free_slot(heap, pool, slot, kind);
        }
    }

    /// Reserves a free slot of `table` for region `region` (worker `region`
    /// of `epochs`); allocates a chunk when the lists run dry, and when the
    /// pool is full waits (bounded) for garbage to become reclaimable,
    /// advancing the epoch with `advance` (the engine's way to advance it).
    pub(crate) fn reserve<B: PmBackend>(
        &mut self,
        heap: &Heap,
        pool: &Pool<B>,
        epochs: &Epochs,
        region: usize,
        table: u32,
        advance: &dyn Fn() -> Option<u64>,
    ) -> DbResult<Reserved> {
        let slot_size = heap.geometries[table as usize].slot_size;
        let mut waiting_since: Option<Instant> = None;
        loop {
            if let Some((slot, kind)) = self.heaps[table as usize].pop(slot_size) {
                if heap.naive_alloc {
                    heap.persist_bitmap_bit(pool, slot, true);
                }
                if waiting_since.is_some() && region < epochs.capacity() {
                    // IMPORTANT: announced again before the commit reads its
                    // epoch and picks its TID: a group commit that saw this
                    // worker idle must not miss a TID it picks below the
                    // epoch it makes durable (`durability::wbl_window`, I2).
                    epochs.enter(region);
                }
                return Ok(Reserved { table, slot, kind });
            }
            self.drain_inbox(&heap.regions[region].inbox);
            if self.reclaim(heap, pool, heap.horizon(epochs), usize::MAX) > 0 || self.reclaim_tombstones(heap, pool) > 0
            {
                continue;
            }
            let thread = heap.regions[region].thread;
            match heap.allocate_chunk(pool, table, region) {
                Ok(chunk) => {
                    heap.register_chunk(chunk, table, thread, true);
                    self.add_fresh_chunk(heap, pool, table, chunk);
                    heap.counters.chunks_allocated.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(PoolError::Full { .. }) => {}
                Err(error) => return Err(error.into()),
            }
            // The pool is full. Only this region's own garbage can help (its
            // slots are the only ones this thread may write).
            let started = *waiting_since.get_or_insert_with(Instant::now);
            let pending = !self.garbage.is_empty() || !heap.regions[region].inbox.lock().is_empty();
            if !pending || started.elapsed() > SPACE_WAIT {
                return Err(DbError::OutOfSpace(format!(
                    "zen heap: region {region} has no free slot of table #{table} and the pool has no free chunk \
                     ({} tuples wait for reclamation)",
                    self.garbage.len()
                )));
            }
            // This transaction reads nothing more from the heap, so it need
            // not hold the horizon back while it waits for others.
            if region < epochs.capacity() {
                epochs.leave(region);
            }
            advance();
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Returns an unused reservation.
    pub(crate) fn unreserve<B: PmBackend>(&mut self, heap: &Heap, pool: &Pool<B>, reserved: Reserved) {
        if heap.naive_alloc {
            heap.persist_bitmap_bit(pool, reserved.slot, false);
        }
        self.heaps[reserved.table as usize].push(reserved.slot, reserved.kind);
    }

    /// Queues a tombstone written by this region's commit.
    pub(crate) fn push_tombstone(&mut self, tombstone: Tombstone) {
        self.tombstones.push_back(tombstone);
    }

    /// Recovery: adds a scanned free slot.
    pub(crate) fn add_free(&mut self, table: u32, slot: u64, kind: SlotKind) {
        if slot == self.pinned {
            self.deferred.push((slot, kind));
        } else {
            self.heaps[table as usize].push(slot, kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_pm::{Direct, PmOptions};

    /// A row of `table` deleted at Tx-CTS 1 and stamp 0: its tombstone is
    /// queued in `state` and the row points at it. Free it with `Row::free`
    /// once the tombstone is released.
    fn push_deleted_row<B: PmBackend>(
        heap: &Heap,
        pool: &Pool<B>,
        epochs: &Epochs,
        state: &mut RegionState,
        table: u32,
    ) -> std::ptr::NonNull<Row> {
        let row = Row::allocate(b"k", 0);
        let slot = state.reserve(heap, pool, epochs, 0, table, &|| Some(epochs.advance())).unwrap().slot;
        // SAFETY: `allocate` returned a valid row; the caller frees it.
        let deleted = unsafe { row.as_ref() };
        deleted.set_slot(slot, 0);
        deleted.store_word(crate::storage::record::word_of(1, crate::storage::record::ABSENT));
        state.push_tombstone(Tombstone::new(table, b"k", deleted, slot, 1, 0));
        row
    }

    /// A new heap chunk is of the formatted kind and every slot's word 0
    /// holds the free marker, which decodes as an empty slot.
    #[test]
    fn a_fresh_chunk_is_formatted_with_free_markers() {
        let options = PmOptions::default();
        let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
        let geometry = SlotGeometry::new("t", 8, 32, pool.geometry().chunk_size).unwrap();
        let heap = Heap::new(&pool, vec![geometry], 1, false, CommitRule::LastPersisted);
        let epochs = Epochs::new(1, 1);
        let slot =
            heap.regions[0].state.lock().reserve(&heap, &pool, &epochs, 0, 0, &|| Some(epochs.advance())).unwrap().slot;
        let chunk = pool.chunk_of(slot).unwrap();
        assert_eq!(pool.chunk_owner(chunk).unwrap().kind(), HEAP_CHUNK_KIND_FORMATTED);
        assert_eq!(heap.free_word(slot), FREE_WORD0);
        let mut bytes = vec![0u8; geometry.slot_size as usize];
        for index in 0..geometry.slots_per_chunk {
            let slot = heap.slot_offset(&pool, 0, chunk, index);
            assert_eq!(pool.backend().load_u64(slot), FREE_WORD0, "slot {index} is not formatted");
            pool.backend().read(slot, &mut bytes);
            assert!(matches!(decode_slot(&bytes, &geometry), SlotContent::Empty));
        }
    }

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

    /// Regression (found by `pmtx crashtest --engine zen --workload tpcc`):
    /// the sweep must erase every stale slot stamped below its horizon, even
    /// one queued behind newer garbage (another region's hand-over arrives
    /// late), or a tombstone it releases can be reused while a stale version
    /// of its key survives, and a crash then resurrects the deleted key.
    #[test]
    fn sweep_erases_stale_slots_queued_behind_newer_garbage() {
        let options = PmOptions::default();
        let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
        let geometry = SlotGeometry::new("t", 8, 32, pool.geometry().chunk_size).unwrap();
        let heap = Heap::new(&pool, vec![geometry], 1, false, CommitRule::LastPersisted);
        let epochs = Epochs::new(1, 1);
        let advance = || Some(epochs.advance());
        let mut state = heap.regions[0].state.lock();
        let slots: Vec<u64> =
            (0..12).map(|_| state.reserve(&heap, &pool, &epochs, 0, 0, &advance).unwrap().slot).collect();
        let (blockers, old) = slots.split_at(10);
        for &slot in blockers {
            state.garbage.push_back(Garbage { slot, stamp: u64::MAX, kind: SlotKind::Stale });
        }
        for &slot in old {
            pool.backend().store_u64(slot, 0x1234);
            state.garbage.push_back(Garbage { slot, stamp: 0, kind: SlotKind::Stale });
        }
        // The tombstone whose release relies on the erasure.
        let row = push_deleted_row(&heap, &pool, &epochs, &mut state, 0);
        drop(state);
        assert!(heap.sweep(&pool, &epochs, &advance));
        for &slot in old {
            assert_eq!(pool.backend().load_u64(slot), FREE_WORD0, "stale slot {slot:#x} was not erased");
        }
        let mut state = heap.regions[0].state.lock();
        assert_eq!(state.garbage.len(), blockers.len());
        assert!(old.iter().all(|slot| state.heaps[0].clean.contains(slot)));
        assert_eq!(state.reclaim_tombstones(&heap, &pool), 1);
        drop(state);
        // SAFETY: the tombstone that referred to the row is released.
        unsafe { Row::free(row) };
    }

    /// A sweep erases the stale slots of the tables it can release a
    /// tombstone of, and leaves every other table's stale slots free and
    /// intact (no PM write for them).
    #[test]
    fn sweep_erases_only_tables_with_a_tombstone_to_release() {
        let options = PmOptions::default();
        let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
        let chunk_size = pool.geometry().chunk_size;
        let geometries = vec![
            SlotGeometry::new("updated", 8, 32, chunk_size).unwrap(),
            SlotGeometry::new("deleted", 8, 32, chunk_size).unwrap(),
        ];
        let heap = Heap::new(&pool, geometries, 1, false, CommitRule::LastPersisted);
        let epochs = Epochs::new(1, 1);
        let advance = || Some(epochs.advance());
        let mut state = heap.regions[0].state.lock();
        let stale_of = |table: u32, state: &mut RegionState| -> Vec<u64> {
            let slots: Vec<u64> =
                (0..3).map(|_| state.reserve(&heap, &pool, &epochs, 0, table, &advance).unwrap().slot).collect();
            for &slot in &slots {
                pool.backend().store_u64(slot, 0x1234);
                state.garbage.push_back(Garbage { slot, stamp: 0, kind: SlotKind::Stale });
            }
            slots
        };
        let updated = stale_of(0, &mut state);
        let deleted = stale_of(1, &mut state);
        let row = push_deleted_row(&heap, &pool, &epochs, &mut state, 1);
        drop(state);
        assert!(heap.sweep(&pool, &epochs, &advance));
        for &slot in &deleted {
            assert_eq!(
                pool.backend().load_u64(slot),
                FREE_WORD0,
                "stale slot {slot:#x} of the deleting table was kept"
            );
        }
        for &slot in &updated {
            assert_eq!(
                pool.backend().load_u64(slot),
                0x1234,
                "stale slot {slot:#x} of a table without deletes was erased"
            );
        }
        let mut state = heap.regions[0].state.lock();
        assert!(updated.iter().all(|slot| state.heaps[0].stale.contains(slot)), "still free, as stale slots");
        assert!(deleted.iter().all(|slot| state.heaps[1].clean.contains(slot)));
        assert_eq!(state.reclaim_tombstones(&heap, &pool), 1, "the sweep made the tombstone reclaimable");
        drop(state);
        // SAFETY: the tombstone that referred to the row is released.
        unsafe { Row::free(row) };
    }

    /// Under the window rule a superseded version stays out of the free
    /// lists until its successor's epoch is durable, even with no reader
    /// announced; under Zen's rule it is free once no reader can hold it.
    #[test]
    fn the_window_rule_frees_a_superseded_version_once_its_successor_is_durable() {
        let options = PmOptions::default();
        for rule in [CommitRule::Window, CommitRule::LastPersisted] {
            let pool = Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options).unwrap();
            let geometry = SlotGeometry::new("t", 8, 32, pool.geometry().chunk_size).unwrap();
            let heap = Heap::new(&pool, vec![geometry], 1, false, rule);
            let epochs = Epochs::new(1, 5);
            let advance = || Some(epochs.advance());
            assert_eq!(epochs.durable(), 4);
            let mut state = heap.regions[0].state.lock();
            let superseded = state.reserve(&heap, &pool, &epochs, 0, 0, &advance).unwrap().slot;
            // Superseded by a commit of epoch 5, stamped 5; nobody reads.
            heap.retire(0, &mut state, Garbage { slot: superseded, stamp: 5, kind: SlotKind::Stale });
            epochs.advance();
            assert_eq!(epochs.horizon(), crate::epoch::QUIESCENT);
            let freed = state.reclaim(&heap, &pool, heap.horizon(&epochs), usize::MAX);
            match rule {
                CommitRule::Window => {
                    assert_eq!(freed, 0, "reused while its successor's window (epoch 5) may still be lost");
                    epochs.set_durable(5);
                    assert_eq!(state.reclaim(&heap, &pool, heap.horizon(&epochs), usize::MAX), 1);
                }
                CommitRule::LastPersisted => assert_eq!(freed, 1),
            }
            assert!(state.heaps[0].stale.contains(&superseded));
        }
    }
}
