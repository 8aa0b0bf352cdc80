//! Engine construction: the one place that maps an [`EngineKind`] and a
//! backend kind to a concrete, monomorphized engine.

pub(crate) mod commit_view;
pub(crate) mod dbxn;
pub(crate) mod dram;
pub(crate) mod foedus;
pub(crate) mod mnemosyne;
pub(crate) mod nvm_tuples;
pub(crate) mod phytm;
pub(crate) mod pipeline;
pub(crate) mod pisces;
pub(crate) mod silo;
pub(crate) mod sp3;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod zen;

use crate::durability::file_log::{open_file_segments, FileLogDirectory};
use crate::durability::group_commit::{GroupCommitConfig, GroupCommitLog};
use crate::engine::{Engine, EngineKind};
use crate::error::{DbError, DbResult};
use crate::options::{DbOptions, LogDirectory, PoolLocation};
use pmtx_pm::{BackendKind, Direct, Emulated, PmBackend, Pool, Sim};
use std::sync::Arc;

use dram::OccEngine;
use silo::NoLog;

/// Opens the engine `options` ask for, creating or opening its pool.
pub(crate) fn open(options: &DbOptions) -> DbResult<Arc<dyn Engine>> {
    if !options.engine.is_durable() {
        return Ok(OccEngine::open(options, NoLog)?);
    }
    match options.backend {
        BackendKind::Direct => open_on_pool(options, Arc::new(open_pool::<Direct>(options)?)),
        BackendKind::Emulated => open_on_pool(options, Arc::new(open_pool::<Emulated>(options)?)),
        BackendKind::Sim => open_on_pool(options, Arc::new(open_pool::<Sim>(options)?)),
    }
}

fn open_pool<B: PmBackend>(options: &DbOptions) -> DbResult<Pool<B>> {
    Ok(match &options.pool {
        PoolLocation::InMemory { size } => Pool::create_in_memory(*size, options.chunk_size, &options.pm)?,
        PoolLocation::File { path, size } => {
            if path.exists() {
                Pool::open(path, &options.pm)?
            } else if options.create_if_missing {
                Pool::create(path, *size, options.chunk_size, &options.pm)?
            } else {
                return Err(DbError::PoolNotFound { path: path.clone() });
            }
        }
    })
}

/// Opens the engine over an existing pool.
/// Refuses a pool holding a chunk of a kind no engine allocates: the chunk
/// table entry is a chunk's only identity, so a damaged owner tag would
/// otherwise hide the chunk from the engine's recovery (a log segment or
/// heap chunk silently dropped). A pool of another engine is refused by its
/// `engine.kind` root, with a clearer message, so every engine's kinds pass
/// here.
fn check_chunk_kinds<B: PmBackend>(engine: EngineKind, pool: &Pool<B>) -> DbResult<()> {
    use crate::durability::wbl_window::WINDOW_CHUNK_KIND;
    use crate::durability::{checkpoint::CHECKPOINT_CHUNK_KIND, dbxn_log::VALUE_CHUNK_KIND, log::LOG_CHUNK_KIND};
    use crate::storage::zen::heap::{HEAP_CHUNK_KIND, HEAP_CHUNK_KIND_FORMATTED};
    let allowed = [
        LOG_CHUNK_KIND,
        CHECKPOINT_CHUNK_KIND,
        VALUE_CHUNK_KIND,
        HEAP_CHUNK_KIND,
        HEAP_CHUNK_KIND_FORMATTED,
        WINDOW_CHUNK_KIND,
        crate::catalog::CATALOG_CHUNK_KIND,
        nvm_tuples::NVM_TUPLE_CHUNK_KIND,
        zen::wbl_meta::WBL_META_CHUNK_KIND,
        mnemosyne::TORNBIT_LOG_CHUNK_KIND,
        mnemosyne::PM_HOME_CHUNK_KIND,
        // An older pmtx's home chunks: mnemosyne refuses them by name.
        crate::storage::pm_home::PM_HOME_CHUNK_KIND_UNFORMATTED,
        foedus::SNAPSHOT_CHUNK_KIND,
    ];
    match pool.owned_chunks().into_iter().find(|(_, owner)| !allowed.contains(&owner.kind())) {
        Some((chunk, owner)) => Err(DbError::corrupt(
            pmtx_pm::Structure::ChunkTable,
            format!(
                "chunk {} is owned by tag {:#x} (kind {:#x}), which no engine allocates (opening as {engine})",
                chunk.0,
                owner.tag(),
                owner.kind()
            ),
        )),
        None => Ok(()),
    }
}

pub(crate) fn open_on_pool<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    if options.engine.is_durable() {
        check_chunk_kinds(options.engine, &pool)?;
        pool.start_prefault(options.prefault_chunks)?;
    }
    match options.engine {
        EngineKind::Silo => {
            drop(pool);
            Ok(OccEngine::open(options, NoLog)?)
        }
        EngineKind::GroupCommit => {
            let log = GroupCommitLog::open(group_commit_config(options), Arc::clone(&pool))?;
            check_identity(options, &pool)?;
            Ok(OccEngine::open(options, log)?)
        }
        EngineKind::DbxDisk => {
            let store = open_file_segments(&file_log_directory(options), &pool)?;
            let log = GroupCommitLog::open_in(group_commit_config(options), Arc::clone(&pool), store)?;
            check_identity(options, &pool)?;
            Ok(OccEngine::open(options, log)?)
        }
        EngineKind::Dbxn | EngineKind::DbxnNvm | EngineKind::DbxNaive | EngineKind::Mmdb | EngineKind::MmdbIdeal => {
            dbxn::open(options, pool)
        }
        EngineKind::Zen | EngineKind::ZenNaiveAlloc | EngineKind::ZenPlus | EngineKind::Wbl => zen::open(options, pool),
        EngineKind::Sp3 | EngineKind::NvmTx | EngineKind::NvmIdeal => sp3::open(options, pool),
        EngineKind::Phytm | EngineKind::PhytmPaper | EngineKind::Phtm | EngineKind::TwoPl => phytm::open(options, pool),
        EngineKind::Mnemosyne => mnemosyne::open(options, pool),
        EngineKind::Pisces => pisces::open(options, pool),
        EngineKind::Foedus => foedus::open(options, pool),
    }
}

/// The group-commit log `options` ask for (epoch group commit; the DBXN
/// and SP^3 logs open it synchronous).
pub(crate) fn group_commit_config(options: &DbOptions) -> GroupCommitConfig {
    GroupCommitConfig::new(options.workers, &options.tables, options.faults())
}

/// Where the redo log files of `options` live (engines that log to files).
pub(crate) fn file_log_directory(options: &DbOptions) -> FileLogDirectory {
    match (&options.log_directory, options.log_directory_path()) {
        (LogDirectory::Memory(memory), _) => FileLogDirectory::Memory(memory.clone()),
        (_, Some(path)) => FileLogDirectory::Path(path),
        (_, None) => FileLogDirectory::Unresolved { engine: options.engine.to_string() },
    }
}

/// Checks that the pool belongs to the engine `options` name and holds
/// their tables (creating the identity at the first open). A log-based
/// engine calls it right after opening its log (which checks and records
/// where the log lives first) and before recovery reads the pool.
pub(crate) fn check_identity<B: PmBackend>(options: &DbOptions, pool: &Pool<B>) -> DbResult<()> {
    crate::catalog::check_identity(pool, options.engine, options)
}
