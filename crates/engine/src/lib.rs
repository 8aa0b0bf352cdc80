//! pmtx-engine: tables, indexes, the transaction API and the engines.
//!
//! Engines implement one trait ([`engine::Engine`]) and are chosen by
//! [`EngineKind`] in [`DbOptions`] when the database is opened. Shared
//! protocol steps (OCC validation, the PM redo log, checkpoints, recovery)
//! live once, in their own modules.

pub mod checkpoint;
mod db;
mod dbxn;
pub mod engine;
mod engines;
pub mod epoch;
mod error;
mod fault;
mod group_commit;
pub mod index;
pub mod log;
pub mod occ;
mod position_index;
pub mod record;
mod schema;
pub mod table;
mod zen;

pub use db::{prefix_range, Database, DbOptions, Finished, Outcome, PoolLocation, Transaction, Worker, WorkerStats};
pub use dbxn::{DbxnOptions, VALUE_CHUNK_KIND as DBXN_VALUE_CHUNK_KIND};
pub use engine::{CommitTicket, EngineKind, EngineStats, RecoveryReport};
pub use error::{AbortReason, DbError, DbResult, TxError, TxResult};
#[cfg(feature = "fault-injection")]
pub use fault::Fault;
pub use index::ScanDirection;
pub use schema::{KeyBuilder, PrimaryIndexKind, SecondaryIndexSchema, TableId, TableSchema};
pub use zen::{ZenOptions, HEAP_CHUNK_KIND as ZEN_HEAP_CHUNK_KIND};
