//! pmtx-engine: tables, indexes, the transaction API and the engines.
//!
//! Layers, from the top (each imports only the ones below it):
//!
//! * the API: [`Database`], [`Worker`], [`Transaction`] (`db.rs`);
//! * the engines (`engines/`, one module each), chosen by [`EngineKind`] in
//!   [`DbOptions`] when the database is opened; each is a composition of
//! * the shared mechanisms: concurrency control ([`cc`]), durability
//!   ([`durability`]: redo log, group commit, checkpoints, recovery, DBXN's
//!   synchronous log), storage ([`storage`]: DRAM records, tables and their
//!   reclamation, Zen's PM heap and Met-Cache);
//! * indexes ([`index`]), epochs ([`epoch`]), the engine traits and the
//!   values that cross them ([`engine`]), options ([`DbOptions`] and each
//!   engine family's), schemas and errors.

mod background;
pub mod catalog;
pub mod cc;
mod db;
pub mod durability;
pub mod engine;
pub mod engine_catalog;
mod engines;
pub mod epoch;
mod error;
mod fault;
pub mod fuzz;
pub mod index;
pub mod log_files;
mod options;
mod schema;
mod stats;
pub mod storage;

pub use cc::CcProtocol;
pub use db::{prefix_range, Database, Finished, Outcome, Pending, Transaction, Worker, WorkerStats};
pub use durability::dbxn_log::VALUE_CHUNK_KIND as DBXN_VALUE_CHUNK_KIND;
pub use durability::wbl_window::WINDOW_CHUNK_KIND as WBL_WINDOW_CHUNK_KIND;
pub use engine::{CommitTicket, EngineKind, EngineStats, RecoveryReport};

pub use engines::nvm_tuples::NVM_TUPLE_CHUNK_KIND as MMDB_VOLATILE_CHUNK_KIND;
pub use error::{AbortReason, DbError, DbResult, TxError, TxResult};
#[cfg(feature = "fault-injection")]
pub use fault::{BackgroundFault, Fault};
pub use index::ScanDirection;
pub use log_files::MemoryLogStorage;
pub use options::spec;
pub use options::{
    DbOptions, DbxnOptions, LogDirectory, LogMedium, MmdbOptions, PoolLocation, ReadOnlySnapshot, WblOptions,
    ZenOptions, ZenPlusOptions,
};
pub use schema::{KeyBuilder, PrimaryIndexKind, SecondaryIndexSchema, TableId, TableSchema};
pub use storage::zen::HEAP_CHUNK_KIND as ZEN_HEAP_CHUNK_KIND;
pub use storage::zen::HEAP_CHUNK_KIND_FORMATTED as ZEN_HEAP_CHUNK_KIND_FORMATTED;
pub use storage::zen::HEAP_FREE_WORD0 as ZEN_HEAP_FREE_WORD0;

/// The README's code blocks, compiled and run as doc tests so that the
/// library example cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
