//! Engine construction: the one place that maps an [`EngineKind`] and a
//! backend kind to a concrete, monomorphized engine.
//!
//! Explained in ARCHITECTURE.md §5 and §7 (each engine's page in
//! docs/engines/).

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

use crate::catalog;
use crate::cc::protocols::phytm::{Hybrid, HybridConfig, HybridScheme};
use crate::durability::file_log::{open_file_segments, FileLogDirectory};
use crate::durability::group_commit::{GroupCommitConfig, GroupCommitLog, ENGINE_ROOT, SCHEMA_ROOT};
use crate::engine::{Engine, EngineKind};
use crate::error::{DbError, DbResult};
use crate::options::{DbOptions, LogDirectory, PoolLocation};
use crate::schema::schema_digest;
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

/// The hybrid paths' state of the engine `options` ask for, or `None` for
/// an engine outside the PHyTM family (the PHyTM family's part config,
/// which the DRAM engine shell builds its concurrency control with).
pub(crate) fn hybrid(options: &DbOptions) -> DbResult<Option<Hybrid>> {
    let scheme = match options.engine {
        EngineKind::Phytm => HybridScheme::Phytm,
        EngineKind::PhytmPaper => HybridScheme::PhytmPaper,
        EngineKind::Phtm => HybridScheme::Phtm,
        EngineKind::TwoPl => HybridScheme::TwoPl,
        _ => return Ok(None),
    };
    Hybrid::new(HybridConfig { scheme, htm: options.htm, faults: options.faults() }).map(Some)
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
///
/// Checks (or records, for a fresh pool) the engine root first, then the
/// stored catalog (`crate::catalog`) against the declared tables (adding
/// declared tables past the stored ones when the options allow it). A pool
/// of an earlier build has only the schema digest: a matching digest is
/// upgraded to a stored catalog.
pub(crate) fn check_identity<B: PmBackend>(options: &DbOptions, pool: &Pool<B>) -> DbResult<()> {
    let kind = options.engine;
    let tables = &options.tables;
    // The engine's explicit persistent code (`EngineKind::code`), never its
    // position in a list.
    let code = kind.code();
    match pool.root(ENGINE_ROOT) {
        Some(found) if found != code => {
            let name = match EngineKind::from_code(found) {
                Some(other) => other.name().to_string(),
                None => format!("an unknown engine (code {found})"),
            };
            return Err(DbError::SchemaMismatch(format!("the pool belongs to {name}, not {}", kind.name())));
        }
        Some(_) => {}
        None => pool.set_root(ENGINE_ROOT, code)?,
    }
    let digest = schema_digest(tables) as u64;
    match catalog::read(pool)? {
        Some(stored) => {
            let (differences, added) = catalog::differences(&stored.tables, tables);
            if !differences.is_empty() {
                return Err(DbError::SchemaMismatch(format!(
                    "the declared tables differ from the pool's: {}",
                    differences.join("; ")
                )));
            }
            if !added.is_empty() {
                if !options.create_missing_tables {
                    return Err(DbError::SchemaMismatch(format!(
                        "declared tables not in the pool: {} (set DbOptions::create_missing_tables to add them)",
                        added.join(", ")
                    )));
                }
                catalog::write(pool, kind, options.cc, tables)?;
                pool.set_root(SCHEMA_ROOT, digest)?;
            } else if stored.protocol != options.cc {
                // Recorded for `pmtx pool info`; the protocol is a choice
                // of each open, not part of the pool's format.
                catalog::write(pool, kind, options.cc, tables)?;
            }
            Ok(())
        }
        None => {
            match pool.root(SCHEMA_ROOT) {
                Some(found) if found != digest => {
                    return Err(DbError::SchemaMismatch(format!(
                        "the pool was created with another table list (digest {found:#x}, given {digest:#x}; \
                         this pool predates stored catalogs, so the tables cannot be named)"
                    )))
                }
                Some(_) => {}
                None => pool.set_root(SCHEMA_ROOT, digest)?,
            }
            match catalog::write(pool, kind, options.cc, tables) {
                Ok(()) => Ok(()),
                // A full pool of an earlier build keeps working with its
                // digest alone.
                Err(DbError::OutOfSpace(_)) if pool.root(SCHEMA_ROOT).is_some() => Ok(()),
                Err(error) => Err(error),
            }
        }
    }
}
