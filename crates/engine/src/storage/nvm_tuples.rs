//! `mmdb`'s tuples beyond its DRAM budget: the Zen paper's "MMDB with NVM
//! capacity" (zen-plus.txt §2.3: "MMDB can leverage the NVM capacity by
//! treating part of NVM as slower *volatile* memory when the OLTP database
//! is larger than DRAM"; §5.1: "When the database cannot fit into DRAM,
//! MMDB uses part of NVM as volatile memory to store base tables").
//!
//! **Placement.** A row is placed the first time a transaction writes or
//! reads it (the load writes every row, so in load order): in DRAM while
//! the rows placed there fit [`crate::MmdbOptions::dram_bytes`] (header,
//! key and value capacity), else in the pool's volatile region. A row stays
//! where it was placed (an MMDB's allocator fills DRAM, then the NVM it
//! uses as memory; nothing migrates). Its place is the record's `home`
//! word (`storage::record`).
//!
//! **What a row in the region costs.** The record in DRAM stays the row's
//! authoritative copy (indexes, protocols, the redo log and recovery are
//! the shell's, unchanged); the region holds the row's *home slot*: one
//! 64-byte line of concurrency-control metadata and the value's lines.
//! Every access to such a row also makes the access the paper's MMDB makes
//! to NVM, through the PM backend on that slot: a read loads the value's
//! lines ([`PmBackend::read_volatile`], charged as NVM reads); a protocol
//! that writes per-row metadata when it reads (read timestamps or read
//! locks: `tictoc`, `mvcc`, `cicada`, the two-phase-locking ones) stores
//! the metadata word; an install stores the new version and the metadata
//! word ([`PmBackend::write_volatile`], charged as ownership reads and
//! media writes at the thread's next fence). The DRAM copy's own costs
//! are paid too, so the model adds NVM costs to a DRAM engine's.
//!
//! **Crashes.** The region is volatile by definition: its chunks are
//! freed when the engine opens (whatever a previous life left) and at a
//! close, and recovery never reads them; it rebuilds every row in DRAM
//! from the checkpoint and the redo log, and places rows again as they are
//! first touched.
//!
//! Explained in docs/engines/mmdb.md.

use crate::storage::record::Record;
use parking_lot::Mutex;
use pmtx_pm::{ChunkOwner, PmBackend, Pool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Owner kind of the volatile region's chunks.
pub const NVM_TUPLE_CHUNK_KIND: u16 = 0x40;

/// A home slot is whole 64-byte units: one of metadata, then the value's.
const UNIT: u64 = 64;

/// Home slots start on 256-byte boundaries (an Optane XPLine).
const ALIGN: u64 = 256;

/// Most units of a slot (16 KiB: a longer value's cost is charged for its
/// first 16 KiB only).
const MAX_UNITS: u64 = 255;

/// `Record::home` values: 0 and 1, or `(aligned index + 1) << 8 | units`
/// for a slot at the `ALIGN`-sized index in the region (24 bits: 4 GiB of
/// region; rows beyond stay in DRAM and are counted).
const UNPLACED: u32 = 0;
const IN_DRAM: u32 = 1;
const MAX_INDEX: u64 = (1 << 24) - 2;

/// What the volatile region is opened with (the engine builds it from its
/// options).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NvmTuplesConfig {
    /// Bytes of rows placed in DRAM may reach this (`MmdbOptions::dram_bytes`).
    pub(crate) dram_budget: u64,
    /// Whether the concurrency control writes per-row metadata when it
    /// reads (a read timestamp, or a read lock).
    pub(crate) metadata_on_read: bool,
}

/// The volatile region and the placement of rows (module docs).
pub(crate) struct NvmTuples<B: PmBackend> {
    pool: Arc<Pool<B>>,
    /// Bytes of rows placed in DRAM may reach this.
    dram_budget: u64,
    dram_used: AtomicU64,
    /// Whether the protocol writes per-row metadata when it reads.
    metadata_on_read: bool,
    /// `ALIGN`-sized blocks per chunk.
    blocks_per_chunk: u64,
    /// Offsets of the region's chunks, by position (0: not allocated yet).
    /// Written under `bump` before a slot in the chunk is published.
    chunks: Box<[AtomicU64]>,
    bump: Mutex<Bump>,
    rows_in_nvm: AtomicU64,
    rows_in_dram: AtomicU64,
    /// Rows left in DRAM over budget because the pool had no chunk for the
    /// region.
    region_full: AtomicU64,
}

#[derive(Default)]
struct Bump {
    /// Chunks allocated so far.
    chunks: u64,
    /// Next free block of the last chunk.
    next_block: u64,
}

impl<B: PmBackend> NvmTuples<B> {
    /// The region of `pool` for `config`, after freeing whatever chunks a
    /// previous life left in it.
    pub(crate) fn open(config: NvmTuplesConfig, pool: Arc<Pool<B>>) -> Self {
        free_region(&pool);
        let geometry = pool.geometry();
        let blocks_per_chunk = geometry.chunk_size / ALIGN;
        let chunks = (0..geometry.chunk_count).map(|_| AtomicU64::new(0)).collect();
        Self {
            pool,
            dram_budget: config.dram_budget,
            dram_used: AtomicU64::new(0),
            metadata_on_read: config.metadata_on_read,
            blocks_per_chunk,
            chunks,
            bump: Mutex::new(Bump::default()),
            rows_in_nvm: AtomicU64::new(0),
            rows_in_dram: AtomicU64::new(0),
            region_full: AtomicU64::new(0),
        }
    }

    /// Frees the region (a close: nothing in it survives anyway).
    pub(crate) fn close(&self) {
        free_region(&self.pool);
        for chunk in self.chunks.iter() {
            chunk.store(0, Ordering::Relaxed);
        }
        *self.bump.lock() = Bump::default();
    }

    /// Counters for [`crate::EngineStats::engine_counters`] (names ending
    /// in `_now` are levels, not counts of events).
    pub(crate) fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("nvm_rows_now", self.rows_in_nvm.load(Ordering::Relaxed)),
            ("dram_rows_now", self.rows_in_dram.load(Ordering::Relaxed)),
            ("dram_row_bytes_now", self.dram_used.load(Ordering::Relaxed).min(self.dram_budget)),
            ("nvm_region_full", self.region_full.load(Ordering::Relaxed)),
        ]
    }

    /// A read of `row`, whose value of `value_len` bytes the caller just
    /// copied from DRAM: the NVM access the row's home costs.
    #[inline]
    pub(crate) fn on_read(&self, row: &Record, value_len: usize) {
        let Some((slot, capacity)) = self.slot_of(row, value_len) else { return };
        let len = (value_len as u64).next_multiple_of(8).min(capacity);
        std::hint::black_box(self.pool.backend().read_volatile(slot + UNIT, len));
        if self.metadata_on_read {
            self.pool.backend().write_volatile(slot, &row.word().to_le_bytes());
        }
    }

    /// An install of `value` into `row` (locked by the caller): the new
    /// version and the metadata word written to the row's home slot.
    #[inline]
    pub(crate) fn on_install(&self, row: &Record, value: &[u8], word: u64) {
        let Some((slot, capacity)) = self.slot_of(row, value.len()) else { return };
        let backend = self.pool.backend();
        let whole = value.len() - value.len() % 8;
        let len = (whole as u64).min(capacity) as usize;
        backend.write_volatile(slot + UNIT, &value[..len]);
        if len == whole && whole < value.len() && (len as u64) < capacity {
            let mut tail = [0u8; 8];
            tail[..value.len() - whole].copy_from_slice(&value[whole..]);
            backend.write_volatile(slot + UNIT + len as u64, &tail);
        }
        backend.write_volatile(slot, &word.to_le_bytes());
    }

    /// The row's home slot (offset of its metadata unit, value capacity),
    /// placing the row first if it has no place yet; `None` in DRAM.
    #[inline]
    fn slot_of(&self, row: &Record, value_len: usize) -> Option<(u64, u64)> {
        let home = match row.home().load(Ordering::Acquire) {
            UNPLACED => self.place(row, value_len),
            home => home,
        };
        if home == IN_DRAM {
            return None;
        }
        let block = u64::from(home >> 8) - 1;
        let units = u64::from(home & 0xFF);
        let chunk = self.chunks[(block / self.blocks_per_chunk) as usize].load(Ordering::Acquire);
        Some((chunk + (block % self.blocks_per_chunk) * ALIGN, (units - 1) * UNIT))
    }

    /// Places `row` (module docs) and returns its home.
    #[cold]
    fn place(&self, row: &Record, value_len: usize) -> u32 {
        let capacity = row.value_capacity().max(value_len) as u64;
        let bytes = 32 + row.key().len().next_multiple_of(8) as u64 + capacity;
        let decided = if self.dram_used.fetch_add(bytes, Ordering::Relaxed) + bytes <= self.dram_budget {
            IN_DRAM
        } else {
            self.dram_used.fetch_sub(bytes, Ordering::Relaxed);
            match self.allocate((1 + capacity.div_ceil(UNIT)).min(MAX_UNITS)) {
                Some(home) => home,
                None => {
                    self.region_full.fetch_add(1, Ordering::Relaxed);
                    IN_DRAM
                }
            }
        };
        match row.home().compare_exchange(UNPLACED, decided, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                let counter = if decided == IN_DRAM { &self.rows_in_dram } else { &self.rows_in_nvm };
                counter.fetch_add(1, Ordering::Relaxed);
                decided
            }
            Err(other) => {
                // Another thread placed it first; a DRAM share taken here
                // is given back (a slot is simply not used).
                if decided == IN_DRAM {
                    self.dram_used.fetch_sub(bytes, Ordering::Relaxed);
                }
                other
            }
        }
    }

    /// A slot of `units` units in one chunk of the region, as a home
    /// value; `None` when the pool has no chunk left or the home word's
    /// range is used up.
    fn allocate(&self, units: u64) -> Option<u32> {
        let blocks = (units * UNIT).div_ceil(ALIGN);
        if blocks > self.blocks_per_chunk {
            return None;
        }
        let mut bump = self.bump.lock();
        if bump.chunks == 0 || bump.next_block + blocks > self.blocks_per_chunk {
            let position = bump.chunks as usize;
            if position >= self.chunks.len() || bump.chunks * self.blocks_per_chunk > MAX_INDEX {
                return None;
            }
            let owner = ChunkOwner::compose(NVM_TUPLE_CHUNK_KIND, 0, 0);
            let chunk = self.pool.allocate_chunk(owner, false).ok()?;
            self.chunks[position].store(self.pool.chunk_offset(chunk), Ordering::Release);
            bump.chunks += 1;
            bump.next_block = 0;
        }
        let block = (bump.chunks - 1) * self.blocks_per_chunk + bump.next_block;
        if block > MAX_INDEX {
            return None;
        }
        bump.next_block += blocks;
        Some((((block + 1) as u32) << 8) | units as u32)
    }
}

fn free_region<B: PmBackend>(pool: &Pool<B>) {
    for (chunk, owner) in pool.owned_chunks() {
        if owner.kind() == NVM_TUPLE_CHUNK_KIND {
            pool.free_chunk(chunk);
        }
    }
}
