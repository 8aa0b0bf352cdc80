//! The `group-commit` engine's durability policy (DBX-NVM in the DBXN
//! paper, Silo's epoch-based group commit on PM).
//!
//! Workers append redo records to their own PM log with ordinary stores and
//! never flush. Once per epoch the ticker thread waits until every active
//! worker has moved past the closing epoch, flushes each worker's new log
//! bytes, issues one fence, and persists the durable epoch in the pool root
//! `log.durable_epoch`. A commit is acknowledged once its epoch is durable.
//!
//! Recovery: load the current checkpoint, replay every valid log record
//! whose epoch is at least the checkpoint's start epoch and at most the
//! durable epoch (per-key newest TID wins, so worker logs replay in
//! parallel), rebuild secondary indexes, then write a fresh checkpoint and
//! free the old logs, so records of never-durable epochs can never be
//! mistaken for durable ones later. Each recovery also takes a new
//! incarnation (root `log.incarnation`, the high half of every new segment
//! sequence), so stale records left in reused, unzeroed chunks never pass a
//! new segment's record CRC.
//!
//! Space: a new log segment may not take the free chunks the next checkpoint
//! may need (a bound from the last checkpoint's size plus the rows logged
//! since), so a log that fills the pool ends in `DbError::OutOfSpace` while
//! close and recovery can still checkpoint and free the log.
//!
//! The files, one concern each: `open` (the config, the log medium check
//! and opening), `append` (the workers' side: log writers, appends and
//! commit tickets), `epoch` (the epoch tick: flushing the worker logs and
//! publishing the durable epoch), `reserve` (the checkpoint's space
//! reserve that appends must leave free), `checkpointing` (taking a
//! checkpoint and freeing the log it covers), `recovery` (checkpoint load
//! and log replay), `dependency_dag` (SP^3's records recovery must drop)
//! `gleaning` (FOEDUS's log gleaner: snapshot pages from the log, in
//! place of the checkpoint, for `foedus`)
//! and `policy` (the engine's hooks: per-epoch work, close, poisoning and
//! statistics). This file holds the pool roots and the log's state.
//!
//! Explained in docs/engines/group-commit.md (and ARCHITECTURE.md §6).

mod append;
mod checkpointing;
mod dependency_dag;
mod epoch;
mod gleaning;
mod open;
mod policy;
mod recovery;
mod reserve;

pub(crate) use open::{check_log_medium, GroupCommitConfig};

use crate::durability::checkpoint::CheckpointMeta;
use crate::durability::log::{LogShared, SegmentId, SegmentStore};
use crate::durability::segments::PoolSegments;
use crate::epoch::Epochs;
use crate::fault::Faults;
use crate::stats::RecoveryReport;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};

/// Root holding the highest durable epoch.
pub const DURABLE_EPOCH_ROOT: &str = "log.durable_epoch";
/// Root holding the schema digest.
pub const SCHEMA_ROOT: &str = "catalog.digest";
/// Root holding the engine that owns the pool.
pub const ENGINE_ROOT: &str = "engine.kind";
/// Root saying where the redo log lives: absent or [`LOG_MEDIUM_POOL`] in
/// the pool, [`LOG_MEDIUM_FILES`] in files beside it (`durability::file_log`).
pub const LOG_MEDIUM_ROOT: &str = "log.medium";
/// [`LOG_MEDIUM_ROOT`] of a log in pool chunks.
pub const LOG_MEDIUM_POOL: u64 = 1;
/// [`LOG_MEDIUM_ROOT`] of a log in files.
pub const LOG_MEDIUM_FILES: u64 = 2;
/// Root counting recoveries (incarnations of the log); the high 32 bits of
/// every log segment sequence number written after a recovery.
pub const LOG_INCARNATION_ROOT: &str = "log.incarnation";

/// Group-commit durability over a pool, with the log's segments in store
/// `S` (pool chunks by default; files for `dbx-disk`). Checkpoints and the
/// durable-epoch root are always in the pool.
pub(crate) struct GroupCommitLog<B: PmBackend, S: SegmentStore = PoolSegments<B>> {
    pool: Arc<Pool<B>>,
    store: Arc<S>,
    logs: Vec<Arc<LogShared>>,
    next_sequence: Mutex<Vec<u64>>,
    retired: Mutex<Vec<SegmentId>>,
    epochs: OnceLock<Arc<Epochs>>,
    checkpoint_generation: Mutex<u64>,
    last_checkpoint: Mutex<Option<CheckpointMeta>>,
    checkpoints: AtomicU64,
    segments_freed: AtomicU64,
    recovery: Mutex<Option<RecoveryReport>>,
    /// Per worker: checkpoint-row bytes of every write logged (monotonic).
    logged_row_bytes: Vec<CachePadded<AtomicU64>>,
    /// Upper bound on the bytes of the last checkpoint's chunks.
    checkpoint_bytes: AtomicU64,
    /// Sum of `logged_row_bytes` when the last checkpoint began.
    logged_at_checkpoint: AtomicU64,
    /// Largest checkpoint row the schema allows, in bytes.
    max_row_bytes: u64,
    /// Set when no ticker runs (closing): waiters drive epochs themselves.
    self_driving: AtomicBool,
    /// Serialises the epoch flush between the ticker and self-driving callers.
    /// The flush lock; holds, for the `group-commit-epoch-before-log`
    /// broken variant, the log tails of the previous group commit (the
    /// only bytes it flushes).
    flush_lock: Mutex<Vec<u64>>,
    closed: AtomicBool,
    /// See [`GroupCommitConfig::synchronous`].
    synchronous: bool,
    /// See [`GroupCommitConfig::dependency_dag`].
    dependency_dag: bool,
    /// See [`GroupCommitConfig::snapshots`].
    snapshots: bool,
    /// The page index of the last snapshot installed (`snapshots` only).
    snapshot_index: Mutex<Option<Arc<crate::durability::snapshot::SnapshotIndex>>>,
    faults: Faults,
}

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// The epochs (attached by recovery).
    pub(crate) fn epochs(&self) -> &Arc<Epochs> {
        self.epochs.get().expect("epochs attached after recovery")
    }

    /// The pool the log lives in.
    pub(crate) fn pool(&self) -> &Arc<Pool<B>> {
        &self.pool
    }
}
