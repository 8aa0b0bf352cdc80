//! pmtx-engine: tables, indexes, the transaction API and the engines.
//!
//! The API is the crate root: [`Database`], [`Worker`], [`Transaction`],
//! the options ([`DbOptions`] and each engine family's, the engine grammar
//! in [`spec`], the engine catalog in [`engine_catalog`]), errors and
//! schemas. Everything else is crate-private; what the crash harness, the
//! pool tools and the fuzzers need of it is in [`internals`].
//!
//! Layers, from the top (each imports only the ones below it; checked by
//! `tests/layering.rs`):
//!
//! * the API (`db.rs`);
//! * the engines (`engines/`): each a composition of a concurrency-control
//!   protocol, a durability scheme and a storage, chosen by [`EngineKind`]
//!   in [`DbOptions`] when the database is opened; `engines/` builds each
//!   part's own small config from the options;
//! * the engine interface: the `Engine` trait and the values that cross it
//!   (`engine.rs`), the engine catalog, the options and their rules, the
//!   stored catalog of a pool (`catalog.rs`), background failures;
//! * concurrency control (`cc/`: the transaction state written once, one
//!   file per protocol under `cc/protocols/`) and durability
//!   (`durability/`: redo logs, group commit, DBXN's and SP^3's logs,
//!   Zen's log-free persist, WBL's windows, checkpoints), side by side;
//! * storage (`storage/`: DRAM records and tables, Zen's PM heap and
//!   Met-Cache, `mmdb`'s volatile NVM rows, the storage-neutral view of a
//!   commit's writes);
//! * indexes (`index/`), then the base: the engine kind, epochs,
//!   statistics, schemas, errors, fault injection, log files.

mod background;
mod catalog;
mod cc;
mod db;
mod durability;
mod engine;
pub mod engine_catalog;
mod engine_kind;
mod engines;
mod epoch;
mod error;
mod fault;
mod fuzz;
mod index;
pub mod internals;
mod log_files;
mod options;
mod schema;
mod stats;
mod storage;

pub use cc::CcProtocol;
pub use db::{
    prefix_range, CommitHook, Database, Finished, OpenTransaction, Outcome, Pending, StepState, Transaction, Worker,
    WorkerStats, WriteRecorder,
};
pub use engine::{CommitTicket, EngineKind, EngineStats, RecoveryReport};
pub use error::{AbortReason, DbError, DbResult, TxError, TxResult};
#[cfg(feature = "fault-injection")]
pub use fault::{BackgroundFault, Fault};
pub use index::ScanDirection;
pub use log_files::MemoryLogStorage;
pub use options::spec;
pub use options::{
    DbOptions, DbxnOptions, FoedusOptions, LogDirectory, LogMedium, MmdbOptions, PoolLocation, ReadOnlySnapshot,
    WblOptions, ZenOptions, ZenPlusOptions,
};
pub use schema::{KeyBuilder, PrimaryIndexKind, SecondaryIndexSchema, TableId, TableSchema};

/// The README's code blocks, compiled and run as doc tests so that the
/// library example cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
