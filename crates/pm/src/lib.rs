//! pmtx-pm: the persistent-memory layer.
//!
//! This crate is the one place in pmtx that holds raw pointers into a pool
//! and executes `asm!`. It provides:
//!
//! * [`Mapping`]: a pool file mapped with `MAP_SYNC` on DAX, or a plain shared
//!   mapping (reported as such), or anonymous memory;
//! * [`PmBackend`]: the only path for stores, flushes and fences, with three
//!   implementations: [`Direct`] (real instructions), [`Emulated`] (plus a
//!   latency model) and [`Sim`] (the crash simulator);
//! * [`Pool`]: header, 2 MiB chunk allocator and named roots, all crash-safe;
//! * per-thread persistence counters ([`thread_counters`]).
//!
//! The media model these follow is written down in docs/media-model.md; the
//! pool's bytes (`layout`, `pool`) in docs/format.md.

mod backend;
mod counters;
pub mod cpu;
mod error;
pub mod layout;
mod mapping;
pub mod media;
pub mod numa;
mod persist_batch;
mod pool;
mod prefault;
pub mod sim;
mod structure;
pub mod word_copy;

pub use backend::{
    set_thread_numa_node, thread_numa_node, BackendInfo, BackendKind, Direct, Emulated, LatencyModel,
    PersistenceDomain, PmBackend, PmOptions,
};
pub use counters::{reset_thread_counters, thread_counters, PmCounters};
pub use cpu::{CpuFeatures, FlushInstruction, CACHE_LINE};
pub use error::{PoolError, PoolResult};
pub use mapping::{temporary_pool_dir, Mapping, MappingKind};
pub use persist_batch::PersistBatch;
pub use pool::{parse_pool_metadata, ChunkId, ChunkOwner, Pool, PoolCheckReport, PoolInfo};
pub use sim::Sim;
pub use structure::Structure;
