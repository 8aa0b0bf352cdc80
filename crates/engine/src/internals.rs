//! The internals that the crash harness, the pool tools (`pmtx pool`,
//! `pmtx bench`'s log-file accounting), the fuzzers and this crate's own
//! integration tests need, in one named place. Not a stable API: the
//! library's API is the crate root ([`crate::Database`], [`crate::Worker`],
//! [`crate::Transaction`], the options, errors and schemas).

use crate::db::Database;
use crate::error::DbResult;
use crate::schema::TableId;

/// The ordered and hash indexes, for their own tests and benchmarks.
pub mod index {
    pub use crate::index::*;
}

/// Row words and DRAM records: the bits a crash image is checked for
/// (`LOCKED`, `UNPERSISTED`) and the TID and epoch limits.
pub mod record {
    pub use crate::storage::record::*;
}

/// A table of DRAM records, as the crash harness inspects it.
pub use crate::storage::table::Table;

/// The redo-log format, writer and scan (DBXN's protocol tests).
pub mod log {
    pub use crate::durability::log::*;
}

/// A transaction's write set (DBXN's protocol tests build one by hand).
pub use crate::cc::write_set::WriteSet;

/// The parsers the fuzz targets drive.
pub mod fuzz {
    pub use crate::fuzz::*;
}

/// Where each engine's structures live in a pool: chunk kinds, root names,
/// the stored catalog, and the files of a log kept on a file system.
pub mod pool_layout {
    pub use crate::catalog::{read_file as read_stored_catalog, StoredCatalog, CATALOG_CHUNK_KIND};
    pub use crate::durability::checkpoint::{CHECKPOINT_CHUNK_KIND, CHECKPOINT_ROOT};
    pub use crate::durability::dbxn_log::VALUE_CHUNK_KIND as DBXN_VALUE_CHUNK_KIND;
    pub use crate::durability::file_log::POOL_ID_FILE;
    pub use crate::durability::log::LOG_CHUNK_KIND;
    pub use crate::durability::snapshot::{SNAPSHOT_CHUNK_KIND, SNAPSHOT_ROOT};
    pub use crate::durability::tornbit_log::TORNBIT_LOG_CHUNK_KIND;
    pub use crate::durability::wbl_window::WINDOW_CHUNK_KIND as WBL_WINDOW_CHUNK_KIND;
    pub use crate::engines::nvm_tuples::NVM_TUPLE_CHUNK_KIND as MMDB_VOLATILE_CHUNK_KIND;
    pub use crate::storage::pm_home::{FREE_WORD0 as PM_HOME_FREE_WORD0, PM_HOME_CHUNK_KIND};
    pub use crate::storage::zen::HEAP_CHUNK_KIND as ZEN_HEAP_CHUNK_KIND;
    pub use crate::storage::zen::HEAP_CHUNK_KIND_FORMATTED as ZEN_HEAP_CHUNK_KIND_FORMATTED;
    pub use crate::storage::zen::HEAP_FREE_WORD0 as ZEN_HEAP_FREE_WORD0;
}

/// The DRAM table `id` of `db` for the crash harness's direct view of
/// record words; `None` on an engine that keeps no rows as DRAM records
/// (the Zen family, whose rows live in its heap).
pub fn dram_table(db: &Database, id: TableId) -> DbResult<Option<&Table>> {
    db.dram_table(id)
}
