//! Durability schemes, side by side: what a commit hands to its log
//! ([`CommitLog`], over the storage-neutral view of its writes,
//! `storage::commit_view`) and what the scheme does on each epoch tick,
//! at checkpoints, at recovery and at close (`EnginePolicy`); the redo log
//! format ([`log`]), where its segments live ([`segments`]: pool chunks,
//! or files with [`file_log`]), checkpoints ([`checkpoint`]), epoch group
//! commit with recovery (`group_commit`), DBXN's synchronous log
//! (`dbxn_log`), FOEDUS's snapshot pages that its log gleaner writes in
//! place of checkpoints ([`snapshot`], `group_commit::gleaning`), SP^3's dependency-tracking log (`sp3_log`), Zen's
//! log-free persist over its tuple heap (`zen_persist`) and write-behind
//! logging's group-commit windows (`wbl_window`).
//!
//! Durability imports only the base modules, `index` and `storage`: it
//! never asks which engine it serves nor reads the engine's options. Each
//! scheme is opened from its own config (`GroupCommitConfig`,
//! `DbxnLogConfig`, ...), which `engines/` builds from the options; what
//! the engine kind decided (the pool's engine identity, stats labels) is
//! done there.

pub mod checkpoint;
pub(crate) mod dbxn_log;
pub mod file_log;
pub(crate) mod foedus_cache;
pub(crate) mod group_commit;
pub mod log;
pub(crate) mod mnemosyne_log;
pub(crate) mod mnemosyne_truncation;
pub mod segments;
pub mod snapshot;
pub(crate) mod sp3_log;
pub(crate) mod tornbit_log;
pub(crate) mod wbl_window;
pub(crate) mod zen_persist;

use crate::epoch::Epochs;
use crate::error::DbResult;
use crate::stats::{CommitTicket, EngineStats};
use crate::storage::commit_view::CommitView;
use crate::storage::record::Record;
use crate::storage::table::Table;
use std::sync::Arc;

/// Where a policy's log step sits in the commit (see the module comment).
// Each name says where the log step sits relative to the install.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitStage {
    /// Append with the write set locked and validated, then install and
    /// unlock (silo, group-commit).
    LogBeforeInstall,
    /// Install with the write set still locked, append (the policy makes the
    /// record durable), then unlock: the log is inside the commit region, so
    /// no parity is needed (dbx-naive).
    LogAfterInstallLocked,
    /// Install with UNPERSISTED and unlock, append (durable when `append`
    /// returns), then clear UNPERSISTED on each written record unless a
    /// later writer replaced the version (dbxn).
    LogAfterInstallParity,
    /// Install and unlock, then append: the record carries the
    /// transactions whose versions this one read or overwrote and whose
    /// logs were not yet durable, and `append_with_dependencies` returns
    /// once the record and those dependencies are durable (SP^3).
    LogAfterUnlock,
}

/// The durability side of commit.
pub trait CommitLog: Send + Sync + 'static {
    /// Where `append` runs in the commit.
    const STAGE: CommitStage = CommitStage::LogBeforeInstall;
    /// Per-worker state (its log buffer).
    type Worker: Send;
    /// Per-worker state for worker `id`.
    fn worker(&self, id: usize) -> DbResult<Self::Worker>;
    /// Called before the commit region of a transaction that writes, with
    /// nothing locked: prepare the redo record (reserve log space). An error
    /// ends the transaction. Policies whose stage is `LogAfterInstall*` must
    /// make `append` infallible here, since nothing can be undone after the
    /// install; the one exception is a log on a file (`dbx-naive` with
    /// `medium=disk`), whose write or `fdatasync` can fail after the
    /// install: such a policy poisons itself *before* `append` returns the
    /// error, so from then on no commit can log and no ticket (read-only
    /// ones included) becomes durable, and the installed versions, visible
    /// once the commit unlocks, can never be acknowledged to anyone.
    fn prepare<V: CommitView + ?Sized>(&self, _worker: &mut Self::Worker, _writes: &V) -> DbResult<()> {
        Ok(())
    }
    /// The HTM instance whose elided region runs each commit's validation
    /// and install (DBX's commit region; `None`: the software path alone).
    /// Used only by the stages whose log follows the install
    /// (`LogAfterInstallParity`, `LogAfterUnlock`).
    fn commit_region(&self) -> Option<&pmtx_htm::Htm> {
        None
    }
    /// Appends the redo record of `tid` at the point [`CommitLog::STAGE`]
    /// says. Returns the ticket of the commit.
    fn append<V: CommitView + ?Sized>(&self, worker: &mut Self::Worker, tid: u64, writes: &V)
        -> DbResult<CommitTicket>;
    /// Whether the policy keeps rows in volatile NVM (`mmdb`): the worker
    /// then reports each row read ([`CommitLog::on_row_read`]) and install
    /// ([`CommitLog::on_row_install`]). A constant, so no other engine's
    /// read or install path has these calls.
    const VOLATILE_ROWS: bool = false;
    /// A transaction read `row`'s value of `value_len` bytes from DRAM.
    fn on_row_read(&self, _row: &Record, _value_len: usize) {}
    /// A commit of `worker` installed `value` (`None`: a delete) into
    /// `row` (locked) of `table`, whose new version word will be `word`.
    fn on_row_install(
        &self,
        _worker: &mut Self::Worker,
        _table: crate::schema::TableId,
        _row: &Record,
        _value: Option<&[u8]>,
        _word: u64,
    ) {
    }
    /// Whether the policy writes each committed version back after the
    /// commit unlocked its rows ([`CommitLog::write_back`]): the third stage
    /// of Pisces' commit. A constant, so no other engine's commit has the
    /// calls.
    const WRITES_BACK_AFTER_UNLOCK: bool = false;
    /// The commit at `tid` of `worker` is durable and visible (its rows
    /// unlocked, not yet acknowledged): write `row` of `table` back.
    fn write_back(&self, _worker: &mut Self::Worker, _table: crate::schema::TableId, _row: &Record, _tid: u64) {}
    /// The TID a new worker of slot `worker` must commit above: the
    /// largest TID the slot made durable (SP^3's log: a slot's durable TID
    /// is one growing word, so its TIDs grow across worker instances).
    fn resume_tid(&self, _worker: usize) -> u64 {
        0
    }
    /// Whether the transaction that committed `tid` is durable with
    /// everything it depends on (SP^3's log tracks it; always true
    /// elsewhere). The commit rule that collects dependencies
    /// (`cc::protocols::sp3`) asks.
    fn dependency_durable(&self, _tid: u64) -> bool {
        true
    }
    /// [`CommitLog::append`] with the TIDs of the transactions this one
    /// depends on (those not yet durable when it validated).
    fn append_with_dependencies<V: CommitView + ?Sized>(
        &self,
        worker: &mut Self::Worker,
        tid: u64,
        writes: &V,
        _dependencies: &[u64],
    ) -> DbResult<CommitTicket> {
        self.append(worker, tid, writes)
    }
    /// The ticket of a read-only transaction that depends on
    /// `dependencies` (SP^3: once they are durable).
    fn read_only_ticket_with_dependencies(&self, _worker: &mut Self::Worker, _dependencies: &[u64]) -> CommitTicket {
        CommitTicket::Durable
    }
    /// Ticket for a read-only transaction that read data up to `max_tid`.
    fn read_only_ticket(&self, max_tid: u64) -> CommitTicket;
    /// Whether `ticket` is durable.
    fn is_durable(&self, ticket: CommitTicket) -> bool;
    /// Whether a delete committed with `tid` is durable, so reclamation may
    /// unlink its row (a checkpoint must not lose a delete whose log could
    /// still be lost). Synchronous and non-durable policies: always.
    fn delete_is_durable(&self, _tid: u64) -> bool {
        true
    }
    /// Whether the database was closed or crashed: waits for durability
    /// must give up (the ticket may never become durable).
    fn is_closed(&self) -> bool {
        false
    }
}

/// The commit-log policy of an engine, plus what it does on each epoch tick
/// and at close.
pub(crate) trait EnginePolicy: CommitLog {
    /// Loads durable state into `tables` (recovery) and raises `epochs`
    /// above every recovered TID.
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()>;
    /// Runs once per epoch on the background thread after the epoch advanced.
    fn on_epoch(&self);
    /// Takes a checkpoint of `tables`.
    fn checkpoint(&self, tables: &[Table]) -> DbResult<()>;
    /// Whether the log has used so much of the pool that the checkpointer
    /// should not wait for its interval (a checkpoint frees the log).
    fn log_space_low(&self) -> bool {
        false
    }
    /// Final work at close (`clean`: make everything durable, checkpoint and
    /// mark a clean shutdown).
    fn close(&self, tables: &[Table], clean: bool) -> DbResult<()>;
    /// Statistics.
    fn stats(&self) -> EngineStats;
}
