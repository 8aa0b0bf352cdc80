//! `wbl`'s per-tuple metadata in PM. The WBL paper keeps each version's
//! concurrency-control metadata (transaction id, begin and end timestamps,
//! a pointer to the previous version) in the tuple's header in NVM, and the
//! Zen paper blames it for WBL's costs: "WBL maintains per-tuple metadata
//! in NVM. Hence, it incurs a large number of NVM writes and persists for
//! the per-tuple metadata" (zen-plus.txt §5.2.1; "much better than WBL,
//! which writes and persists per-tuple metadata to NVM").
//!
//! Here each heap slot has one metadata word in a parallel region of the
//! pool (8 bytes per 16-byte granule of heap: a slot starts on a granule),
//! and `wbl` makes the metadata changes the WBL design makes, each persisted
//! on its own (store, `clwb`, `sfence`) as a header change in NVM is:
//!
//! * a commit claims each version it supersedes (its transaction id and
//!   end timestamp in the old version's header) before it persists the
//!   new versions: one persist per written tuple;
//! * under a protocol that writes per-row metadata when it reads (read
//!   timestamps or read locks: `tictoc`, `mvcc`, `cicada`, the two-phase
//!   locking ones) each read of a version persists its read timestamp.
//!
//! The words are not read by anyone: `wbl`'s protocol state stays in the
//! DRAM rows, and recovery decides from the versions' Tx-CTS and the window
//! records alone, so the region is freed at every open and close. What the
//! model adds is the PM traffic and the fences.
//!
//! Explained in docs/engines/wbl.md.

use parking_lot::Mutex;
use pmtx_pm::{ChunkOwner, PmBackend, Pool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Owner kind of the metadata region's chunks.
pub const WBL_META_CHUNK_KIND: u16 = 0x574D;

/// Heap bytes per metadata word.
const GRANULE: u64 = 16;

/// The metadata region (module docs).
pub(crate) struct WblMeta<B: PmBackend> {
    pool: Arc<Pool<B>>,
    /// Whether the protocol writes metadata when it reads.
    pub(crate) on_read: bool,
    chunk_size: u64,
    /// Offsets of the region's chunks by position (0: not allocated).
    chunks: Box<[AtomicU64]>,
    allocate: Mutex<()>,
}

impl<B: PmBackend> WblMeta<B> {
    pub(crate) fn open(pool: Arc<Pool<B>>, cc: crate::cc::CcProtocol) -> Self {
        free_region(&pool);
        let geometry = pool.geometry();
        let words = geometry.chunk_count * (geometry.chunk_size / GRANULE);
        let chunks = (0..(words * 8).div_ceil(geometry.chunk_size)).map(|_| AtomicU64::new(0)).collect();
        Self {
            chunk_size: geometry.chunk_size,
            on_read: crate::engines::nvm_tuples::writes_metadata_on_read(cc),
            pool,
            chunks,
            allocate: Mutex::new(()),
        }
    }

    /// Frees the region (a clean close).
    pub(crate) fn close(&self) {
        let _guard = self.allocate.lock();
        free_region(&self.pool);
        for chunk in self.chunks.iter() {
            chunk.store(0, Ordering::Relaxed);
        }
    }

    /// Stores `word` into the metadata of the heap slot at `slot` and
    /// persists it (`clwb`, `sfence`). Nothing when the pool has no chunk
    /// left for the region.
    pub(crate) fn persist(&self, slot: u64, word: u64) {
        let Some(chunk_id) = self.pool.chunk_of(slot) else { return };
        let heap_chunk = chunk_id.0;
        let within = slot - self.pool.chunk_offset(chunk_id);
        let index = heap_chunk * (self.chunk_size / GRANULE) + within / GRANULE;
        let byte = index * 8;
        let position = (byte / self.chunk_size) as usize;
        let Some(cell) = self.chunks.get(position) else { return };
        let mut base = cell.load(Ordering::Acquire);
        if base == 0 {
            let _guard = self.allocate.lock();
            base = cell.load(Ordering::Acquire);
            if base == 0 {
                let owner = ChunkOwner::compose(WBL_META_CHUNK_KIND, 0, 0);
                let Ok(chunk) = self.pool.allocate_chunk(owner, false) else { return };
                base = self.pool.chunk_offset(chunk);
                cell.store(base, Ordering::Release);
            }
        }
        let offset = base + byte % self.chunk_size;
        let backend = self.pool.backend();
        backend.store_u64(offset, word);
        backend.flush(offset, 8);
        backend.fence();
    }
}

fn free_region<B: PmBackend>(pool: &Pool<B>) {
    for (chunk, owner) in pool.owned_chunks() {
        if owner.kind() == WBL_META_CHUNK_KIND {
            pool.free_chunk(chunk);
        }
    }
}
