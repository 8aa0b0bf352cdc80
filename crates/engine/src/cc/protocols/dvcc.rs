//! Pisces' dual-version concurrency control (DVCC; Gu et al., USENIX ATC
//! 2019) over rows: **snapshot isolation**, chosen by the engine
//! (`pisces`), not by `cc=`.
//!
//! * **Snapshots**: an attempt reads the global clock when it begins
//!   (`multi_version::Snapshot`) and reads, for each row, the version
//!   valid at it: the row's current version, or the older one the version
//!   store keeps beside it.
//! * **Write-write conflicts only**: a write of a row whose current
//!   version is newer than the snapshot is refused at once, and again at
//!   commit with the write set locked (first committer wins: the largest
//!   TID seen when locking must not exceed the snapshot). Reads are never
//!   validated, so two transactions that read each other's write sets and
//!   write disjoint rows both commit (write skew): not serializable.
//! * **At most two versions per row**: the current one and one older one.
//!   A write that would leave a third live version (some running snapshot
//!   is older than the row's current version, so it still reads the older
//!   one) is refused; Pisces makes that writer wait, a retry here.
//! * **Commit timestamp**: above every commit so far (so above every
//!   snapshot), as Hekaton's; taken after the write set is locked, so a
//!   snapshot that includes it meets the rows locked until they are
//!   installed.
//!
//! Explained in docs/engines/pisces.md.

use crate::cc::protocols::multi_version::{MultiVersion, Scheme, Snapshot};
use crate::cc::protocols::TidBounds;
use crate::cc::tx_sets::TxSets;
use crate::cc::versions::VersionStore;
use crate::error::AbortReason;
use crate::storage::record::{self, RowKind};
use crate::storage::table::Table;
use std::sync::Arc;

/// DVCC's part of a worker's state: none beyond its snapshot.
pub(crate) struct DualVersion;

/// A worker's state under DVCC.
pub(crate) type Dvcc = MultiVersion<DualVersion>;

impl DualVersion {
    /// The shared state for `workers` workers: the version store.
    pub(crate) fn shared(workers: usize) -> Arc<VersionStore> {
        Arc::new(VersionStore::new(workers))
    }
}

impl Scheme for DualVersion {
    type Shared = Arc<VersionStore>;

    fn versions(shared: &Self::Shared) -> &Arc<VersionStore> {
        shared
    }

    fn worker(_shared: &Self::Shared) -> Self {
        DualVersion
    }

    /// The snapshot; a commit keeps the version it replaces only while
    /// another snapshot may read it (the older version stays in place in
    /// Pisces: nothing is copied when no reader needs it).
    #[inline]
    fn begin(snapshot: &mut Snapshot, _epoch: u64) {
        snapshot.keep_only_when_read = true;
        snapshot.begin();
    }

    /// First writer wins, and no third version: a row whose current
    /// version is newer than the oldest running snapshot still has its
    /// older version in use.
    #[inline]
    fn write(&self, snapshot: &Snapshot, _address: usize, word: u64) -> Result<(), AbortReason> {
        snapshot.check_write(word)?;
        if record::tid_of(word) > snapshot.versions().oldest_snapshot() {
            return Err(AbortReason::WriteLock);
        }
        Ok(())
    }

    /// First committer wins: no row of the write set got a version newer
    /// than the snapshot (the largest TID seen when locking). No read
    /// validation (snapshot isolation).
    fn commit_timestamp<R: RowKind>(
        &self,
        snapshot: &Snapshot,
        tx: &TxSets<R>,
        _tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        if bounds.max_locked > snapshot.ts {
            return Err(AbortReason::WriteLock);
        }
        let tid = tx.commit_tid(bounds.max_locked, bounds.floor, bounds.epoch);
        Ok(snapshot.versions().commit_tid(tid))
    }
}
