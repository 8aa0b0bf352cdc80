//! Opening a group-commit log: its config, and the check that the pool's
//! redo log lives on the medium the engine asks for (a pool's log never
//! moves between pool chunks and files).

use super::reserve::CHECKPOINT_ROW_HEADER;
use super::{GroupCommitLog, ENGINE_ROOT, LOG_MEDIUM_FILES, LOG_MEDIUM_POOL, LOG_MEDIUM_ROOT};
use crate::durability::log::{LogShared, SegmentStore};
use crate::durability::segments::PoolSegments;
use crate::error::{DbError, DbResult};
use crate::fault::Faults;
use crate::schema::TableSchema;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Pool, Structure};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};

/// What a group-commit log is opened with (the engine builds it from its
/// options).
#[derive(Clone, Debug)]
pub(crate) struct GroupCommitConfig {
    /// Worker slots, one log chain each.
    pub(crate) workers: usize,
    /// Largest checkpoint row the schema allows, in bytes.
    pub(crate) max_row_bytes: u64,
    /// Synchronous logging: every record is durable when its commit
    /// returns, so recovery replays every valid record and ignores the
    /// durable-epoch root (the DBXN and SP^3 logs set it).
    pub(crate) synchronous: bool,
    /// Records carry the transactions they depend on, and recovery drops
    /// those whose dependencies were never durable (SP^3's log sets it).
    pub(crate) dependency_dag: bool,
    /// The log gleaner replaces the checkpoint: snapshots are folded from
    /// the durable log into sorted pages (`durability::snapshot`), and
    /// recovery loads the snapshot and replays the log after it (FOEDUS).
    pub(crate) snapshots: bool,
    pub(crate) faults: Faults,
}

impl GroupCommitConfig {
    /// Epoch group commit for `workers` over `tables`.
    pub(crate) fn new(workers: usize, tables: &[TableSchema], faults: Faults) -> Self {
        let max_row_bytes = tables
            .iter()
            .map(|t| (CHECKPOINT_ROW_HEADER + (t.max_key_len + t.max_value_len) as u64).next_multiple_of(8))
            .max()
            .unwrap_or(0);
        Self { workers, max_row_bytes, synchronous: false, dependency_dag: false, snapshots: false, faults }
    }
}

impl<B: PmBackend> GroupCommitLog<B> {
    /// The log with its segments in the pool.
    pub(crate) fn open(config: GroupCommitConfig, pool: Arc<Pool<B>>) -> DbResult<Self> {
        let store = PoolSegments::new(Arc::clone(&pool));
        GroupCommitLog::open_in(config, pool, store)
    }
}

/// Checks that the pool's log lives where `in_pool` says (pool chunks, or
/// files), and returns whether the pool says a log of that medium exists
/// already (false for a pool no log-based engine opened yet). Changes
/// nothing.
pub(crate) fn check_log_medium<B: PmBackend>(pool: &Pool<B>, in_pool: bool) -> DbResult<bool> {
    let wanted = if in_pool { LOG_MEDIUM_POOL } else { LOG_MEDIUM_FILES };
    let name = |code: u64| if code == LOG_MEDIUM_FILES { "in files (medium=disk)" } else { "in the pool (PM)" };
    let mismatch = |found: u64| {
        DbError::SchemaMismatch(format!(
            "the pool keeps its redo log {}, not {}: open it with the engine and options it was created with",
            name(found),
            name(wanted)
        ))
    };
    match pool.root(LOG_MEDIUM_ROOT) {
        Some(found) if found == wanted => Ok(true),
        Some(found) if found == LOG_MEDIUM_POOL || found == LOG_MEDIUM_FILES => Err(mismatch(found)),
        Some(found) => Err(DbError::corrupt(
            Structure::RootTable,
            format!("root {LOG_MEDIUM_ROOT} holds {found}, which names no log medium"),
        )),
        // A pool whose engine ran before this root existed kept its log in
        // the pool.
        None if pool.root(ENGINE_ROOT).is_some() => {
            if in_pool {
                Ok(true)
            } else {
                Err(mismatch(LOG_MEDIUM_POOL))
            }
        }
        None => Ok(false),
    }
}

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// The log with its segments in `store`; the pool holds checkpoints
    /// and the roots. The caller checks the pool's engine identity and
    /// schema right after (before recovery reads anything), as the
    /// medium is checked first here.
    pub(crate) fn open_in(config: GroupCommitConfig, pool: Arc<Pool<B>>, store: S) -> DbResult<Self> {
        // The medium first: a pool whose first open crashed before its
        // engine root was written must not look like a pool of another
        // medium at the next open.
        if !check_log_medium(&pool, S::IN_POOL)? {
            pool.set_root(LOG_MEDIUM_ROOT, if S::IN_POOL { LOG_MEDIUM_POOL } else { LOG_MEDIUM_FILES })?;
        }
        debug_assert!(
            !config.snapshots || !(config.synchronous || config.dependency_dag),
            "the gleaner folds epoch group commit's log"
        );
        if config.snapshots {
            crate::durability::snapshot::check_geometry(&pool)?;
        }
        let workers = config.workers;
        Ok(Self {
            store: Arc::new(store),
            synchronous: config.synchronous,
            dependency_dag: config.dependency_dag,
            snapshots: config.snapshots,
            snapshot_index: Mutex::new(None),
            faults: config.faults,
            pool,
            logs: (0..workers).map(|_| Arc::new(LogShared::default())).collect(),
            next_sequence: Mutex::new(vec![0; workers]),
            retired: Mutex::new(Vec::new()),
            epochs: OnceLock::new(),
            checkpoint_generation: Mutex::new(0),
            last_checkpoint: Mutex::new(None),
            checkpoints: AtomicU64::new(0),
            segments_freed: AtomicU64::new(0),
            recovery: Mutex::new(None),
            logged_row_bytes: (0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            checkpoint_bytes: AtomicU64::new(0),
            logged_at_checkpoint: AtomicU64::new(0),
            max_row_bytes: config.max_row_bytes,
            self_driving: AtomicBool::new(false),
            flush_lock: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        })
    }
}
