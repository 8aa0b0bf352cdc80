//! The NVM-tuple heap (zen-plus.txt §3.1, §3.3.1, §3.4): fixed-size tuple
//! slots in pool chunks, per-thread regions and DRAM-only space
//! management. The log-free persist of Algorithm 1 that writes into them
//! is `durability::zen_persist`.
//!
//! By concern: the tuple format ([`tuple`]: chunk kinds, header words,
//! CRC, decoding), reclamation ([`reclaim`]: garbage, the horizon, the LP
//! pin, tombstone sweeps), a region's unfenced commit ([`unfenced`]), and
//! here the chunks, regions and allocation.
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
//! *Unfenced commits.* A pipelined commit (`durability::zen_persist`,
//! `LpFence::Later`) flushes its LP line and leaves its fence to a later
//! one, so until then a crash may lose it. Each region has at most one
//! such commit: the next commit of its worker issues its first fence after
//! the flush (flushing the line again first if another thread flushed it),
//! which makes it durable. The region publishes it ([`unfenced`]: its
//! Tx-CTS and LP slot, before its rows are unlocked) and holds back what
//! it superseded and the tombstones it wrote (with the stamps read at its
//! install) until it is *completed*: durable, then the pin moves to its LP
//! tuple (so the pin is on the region's latest LP tuple known durable, and
//! a newer one may be durable too: recovery's horizon is at least the
//! pinned one's), the held entries are queued, and it is unpublished.
//! Another thread completes it by flushing the LP line again and fencing
//! (a version read or overwritten by another worker, a wait for the
//! commit, the epoch thread's bound); a writer never supersedes a version
//! of an unfenced commit (`engines::zen::worker`), so what such a commit
//! holds back cannot be any key's only stale version behind a tombstone a
//! sweep releases: the key's latest version is the commit's own.
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
//!
//! Explained in docs/engines/zen.md and docs/format.md ("Zen heap chunk").

mod reclaim;
mod tuple;
mod unfenced;

pub(crate) use reclaim::{horizon_stamp, CommitRule, Garbage, Tombstone};
pub(crate) use tuple::{
    decode_slot, encode_tuple, reseal_slot, SlotContent, SlotGeometry, CTS_MASK, DELETED_BIT, KEY_LEN_AT, LP_BIT,
    META_LEN, TUPLE_ID_MASK,
};
pub use tuple::{is_heap_chunk_kind, FREE_WORD0, HEAP_CHUNK_KIND, HEAP_CHUNK_KIND_FORMATTED};
pub(crate) use unfenced::Unfenced;
use unfenced::UnfencedMark;

use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pmtx_pm::{ChunkId, ChunkOwner, PersistBatch, PmBackend, Pool, PoolError, CACHE_LINE};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Chunk-map flag of a formatted chunk.
const FORMATTED_ENTRY: u64 = 1 << 62;
const _: () = assert!(CACHE_LINE.is_multiple_of(16), "16-byte aligned headers stay in one line");

/// How long a commit that finds no free slot waits for garbage to become
/// reclaimable before reporting `OutOfSpace`.
const SPACE_WAIT: Duration = Duration::from_millis(200);

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

// SAFETY: the row pointer refers to a row owned by a table that lives as
// long as the engine, which outlives every region.
unsafe impl Send for Tombstone {}

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
    /// Slot of the region's latest LP tuple known durable (0: none); never
    /// reused.
    pinned: u64,
    /// Freed slots held back by the pin.
    deferred: Vec<(u64, SlotKind)>,
    /// The commit whose LP line is flushed, not yet fenced ([`unfenced`]).
    unfenced: Option<Unfenced>,
    /// What it superseded, and the tombstones it wrote: queued once it is
    /// completed.
    held_garbage: Vec<Garbage>,
    held_tombstones: Vec<Tombstone>,
    /// The region's unfenced commits completed so far, and those of them
    /// completed by a fence of their own (a flush of the LP line again and
    /// a fence: between transactions, by another worker, by the epoch
    /// thread) rather than by the region's next commit. Counted here, under
    /// the lock, not on a line every region writes.
    pub(crate) unfenced_completed: u64,
    pub(crate) unfenced_fenced_again: u64,
}

/// One thread's heap region. Its state and its inbox each fill their own
/// cache lines: every commit locks its region's state, and other threads
/// lock the inbox to hand garbage over, so neither may share a line with
/// another region's (two workers would bounce it on every commit).
pub(crate) struct Region {
    pub(crate) thread: u16,
    pub(crate) state: CachePadded<Mutex<RegionState>>,
    /// Garbage handed over by other threads (locked only briefly; never
    /// held while taking another lock).
    inbox: CachePadded<Mutex<Vec<Garbage>>>,
    /// The region's unfenced commit, published ([`unfenced`]).
    unfenced: CachePadded<UnfencedMark>,
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
    /// Apart from the read-mostly fields above, which every commit reads.
    pub(crate) counters: CachePadded<HeapCounters>,
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
                    state: CachePadded::new(Mutex::new(RegionState {
                        heaps: (0..tables).map(|_| TableHeap::default()).collect(),
                        garbage: VecDeque::new(),
                        tombstones: VecDeque::new(),
                        last_cts: 0,
                        pinned: 0,
                        deferred: Vec::new(),
                        unfenced: None,
                        held_garbage: Vec::new(),
                        held_tombstones: Vec::new(),
                        unfenced_completed: 0,
                        unfenced_fenced_again: 0,
                    })),
                    inbox: CachePadded::new(Mutex::new(Vec::new())),
                    unfenced: CachePadded::new(UnfencedMark::default()),
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
            counters: CachePadded::new(HeapCounters::default()),
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
            // Held by the region's unfenced commit: its slots may lie in any
            // region (handed over at completion).
            for garbage in &state.held_garbage {
                record(garbage.slot, Place::Garbage, None, None)?;
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

    /// Free slots, chunks and waiting garbage over all regions (for stats).
    pub(crate) fn space(&self) -> (u64, u64, u64) {
        let (mut free, mut chunks, mut garbage) = (0, 0, 0);
        for region in &self.regions {
            let state = region.state.lock();
            for (table, heap) in state.heaps.iter().enumerate() {
                free += heap.free_slots(self.geometries[table].slot_size);
                chunks += heap.chunks.len() as u64;
            }
            garbage += (state.garbage.len() + region.inbox.lock().len() + state.held_garbage.len()) as u64;
        }
        (free, chunks, garbage)
    }
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
            // What the region's unfenced commit holds back becomes garbage
            // once it is fenced (a fence now rather than an error).
            if !self.held_garbage.is_empty() && self.fence_unfenced(heap, pool, epochs, region) {
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
}
