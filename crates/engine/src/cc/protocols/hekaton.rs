//! `cc=hekaton`: Hekaton's optimistic MVCC. Reads at a snapshot taken at
//! begin (older versions kept beside the rows, `protocols::multi_version`);
//! a writer validates its reads as Silo does and commits above every commit
//! so far (so above every snapshot); read-only transactions never abort.
//! `zen+` also reads a read-only transaction at the oldest running snapshot
//! (`begin_oldest_snapshot`).

use crate::cc::protocols::multi_version::{self, Snapshot};
use crate::cc::protocols::{Named, Protocol, TidBounds};
use crate::cc::transaction::TxState;
use crate::cc::versions::VersionStore;
use crate::error::AbortReason;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use std::sync::Arc;

/// A worker's state under Hekaton.
pub(crate) struct Hekaton {
    snapshot: Snapshot,
}

impl Protocol for Hekaton {
    type Shared = Arc<VersionStore>;

    fn worker(shared: &Self::Shared, worker: usize) -> Self {
        Self { snapshot: Snapshot::new(shared, worker) }
    }

    fn may_unlink(shared: &Self::Shared, _address: usize, tid: u64) -> bool {
        multi_version::may_unlink(shared, tid)
    }

    fn versions(shared: &Self::Shared) -> Option<&VersionStore> {
        Some(shared)
    }

    #[inline]
    fn begin(&mut self, _attempt: u32, _epoch: u64) {
        self.snapshot.begin();
    }

    /// A read-only attempt at the oldest running snapshot (`zen+`): its
    /// reads form a snapshot below every running writer's commit, so it
    /// commits without validation, as every reader does here.
    fn begin_oldest_snapshot(&mut self) {
        self.snapshot.begin_oldest();
    }

    #[inline]
    fn abort(&mut self) {
        self.snapshot.end();
    }

    #[inline]
    fn version_at(&self, address: usize, word: u64, out: &mut Vec<u8>) -> Option<u64> {
        self.snapshot.version_at(address, word, out)
    }

    #[inline]
    fn write(&mut self, _accesses: usize, _address: usize, word: u64) -> Result<(), AbortReason> {
        self.snapshot.check_write(word)
    }

    /// A snapshot below every later commit needs nothing else; at the
    /// oldest running snapshot, every version read is at or below it, under
    /// which every commit had installed all its rows (`cc::versions`).
    fn validate<R: RowKind>(&self, tx: &TxState<R>, _tables: &[Table<R>]) -> Result<(), AbortReason> {
        tx.check_reads_durable()
    }

    /// Silo's validation and TID rule, and above every commit so far too
    /// (snapshots).
    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxState<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        self.validate_reads(tx, tables)?;
        let tid = tx.commit_tid(bounds.max_locked, bounds.floor, bounds.epoch);
        Ok(self.snapshot.versions().commit_tid(tid))
    }

    #[inline]
    fn snapshot(&mut self) -> Option<&mut Snapshot> {
        Some(&mut self.snapshot)
    }

    fn finish<R: RowKind>(&mut self, tables: &[Table<R>]) {
        self.snapshot.collect(tables);
    }
}

impl Named for Hekaton {
    const ISOLATION: &'static str = "strictly serializable; read-only transactions read a snapshot taken when they \
                                     begin and never abort (zen+ by default: the oldest running snapshot, \
                                     serializable but not strictly; snapshot=current)";
    const MULTIVERSION: bool = true;

    fn shared(workers: usize) -> Self::Shared {
        Arc::new(VersionStore::new(workers))
    }
}
