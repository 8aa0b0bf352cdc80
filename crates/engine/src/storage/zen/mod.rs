//! Zen's storage (zen-plus.txt §3): the NVM-tuple heap in the pool
//! ([`heap`]: the tuple format, slots, per-thread regions, DRAM-only space
//! management, reclamation and tombstone sweeps), the Met-Cache rows and
//! per-worker CLOCK regions in DRAM ([`cache`]), recovery by scanning the
//! heap ([`recovery`], Algorithm 2) and per-table heap geometry
//! ([`meta`]). How commits make tuples durable over it is durability's:
//! Zen's log-free persist (`durability::zen_persist`) and write-behind
//! logging's windows (`durability::wbl_window`, the `wbl` engine). The
//! engine that runs transactions over it is `engines::zen`.
//!
//! Explained in docs/engines/zen.md (the bytes of a heap chunk:
//! docs/format.md).

pub(crate) mod cache;
pub(crate) mod heap;
pub(crate) mod meta;
pub(crate) mod recovery;

pub use heap::{FREE_WORD0 as HEAP_FREE_WORD0, HEAP_CHUNK_KIND, HEAP_CHUNK_KIND_FORMATTED};
