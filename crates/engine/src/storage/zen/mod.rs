//! Zen's storage (zen-plus.txt §3): the NVM-tuple heap in the pool
//! ([`heap`]: slots, per-thread regions, Algorithm 1, DRAM-only space
//! management, tombstone sweeps), the Met-Cache rows and per-worker CLOCK
//! regions in DRAM ([`cache`]), recovery by scanning the heap
//! ([`recovery`], Algorithm 2) and per-table heap geometry ([`meta`]); and
//! write-behind logging's group-commit record log over the same heap
//! ([`window`], the `wbl` engine). The engine that runs transactions over
//! it is `engines::zen`.

pub(crate) mod cache;
pub(crate) mod heap;
pub(crate) mod meta;
pub(crate) mod recovery;

pub use heap::{FREE_WORD0 as HEAP_FREE_WORD0, HEAP_CHUNK_KIND, HEAP_CHUNK_KIND_FORMATTED};
