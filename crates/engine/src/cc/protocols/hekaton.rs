//! `cc=hekaton`: Hekaton's optimistic MVCC. Reads at a snapshot taken at
//! begin (older versions kept beside the rows, `protocols::multi_version`);
//! a writer validates its reads as Silo does and commits above every commit
//! so far (so above every snapshot); read-only transactions never abort.
//! `zen+` also reads a read-only transaction at the oldest running snapshot
//! (`begin_oldest_snapshot`).

use crate::cc::protocols::multi_version::{MultiVersion, Scheme, Snapshot};
use crate::cc::protocols::silo::Silo;
use crate::cc::protocols::{Named, Protocol, TidBounds};
use crate::cc::tx_sets::TxSets;
use crate::cc::versions::VersionStore;
use crate::error::AbortReason;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use std::sync::Arc;

/// Hekaton's part of a worker's state: none beyond its snapshot.
pub(crate) struct Optimistic;

/// A worker's state under Hekaton.
pub(crate) type Hekaton = MultiVersion<Optimistic>;

impl Scheme for Optimistic {
    type Shared = Arc<VersionStore>;

    fn versions(shared: &Self::Shared) -> &Arc<VersionStore> {
        shared
    }

    fn worker(_shared: &Self::Shared) -> Self {
        Optimistic
    }

    #[inline]
    fn begin(snapshot: &mut Snapshot, _epoch: u64) {
        snapshot.begin();
    }

    /// A read-only attempt at the oldest running snapshot (`zen+`): its
    /// reads form a snapshot below every running writer's commit, so it
    /// commits without validation, as every reader does here.
    fn begin_oldest(snapshot: &mut Snapshot) {
        snapshot.begin_oldest();
    }

    #[inline]
    fn write(&self, snapshot: &Snapshot, _address: usize, word: u64) -> Result<(), AbortReason> {
        snapshot.check_write(word)
    }

    /// Silo's validation and TID rule (the family validates its reads as
    /// Silo does), and above every commit so far too (snapshots).
    fn commit_timestamp<R: RowKind>(
        &self,
        snapshot: &Snapshot,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        let tid = Silo.commit_timestamp(tx, tables, bounds)?;
        Ok(snapshot.versions().commit_tid(tid))
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
