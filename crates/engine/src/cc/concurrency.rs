//! The concurrency-control state one engine's workers share
//! ([`Concurrency`]): the protocol and its side tables (`cc::protocols`),
//! and what the rest of the engine asks of them (reclamation, `occ`'s
//! serial section, the older versions, the PHyTM family's paths).

use crate::cc::protocols::phytm::{Hybrid, Phytm};
use crate::cc::protocols::{CcProtocol, ProtocolTx, SharedState};
use crate::cc::versions::VersionStore;
use parking_lot::MutexGuard;

/// One engine's concurrency-control state shared by its workers.
pub(crate) struct Concurrency {
    /// The side tables of the protocol run.
    state: SharedState,
}

impl Concurrency {
    /// The state of `protocol` for `workers` workers (checked by
    /// [`CcProtocol::check`] when the options were validated).
    pub(crate) fn new(protocol: CcProtocol, workers: usize) -> Self {
        debug_assert!(protocol.check(workers).is_ok());
        Self { state: protocol.shared_state(workers) }
    }

    /// The same state running the hybrid paths of `hybrid` (the PHyTM
    /// family) instead of the protocol, whose every path writes through a
    /// no-wait lock table.
    pub(crate) fn with_hybrid(self, hybrid: Option<Hybrid>, workers: usize) -> Self {
        match hybrid {
            Some(hybrid) => Self { state: SharedState::Phytm(Phytm::shared(hybrid, workers)) },
            None => self,
        }
    }

    /// The same state running TinySTM's encounter-time locking
    /// (`protocols::tinystm`) instead of the protocol, if `tinystm`.
    pub(crate) fn with_tinystm(self, tinystm: bool, workers: usize) -> Self {
        if tinystm {
            Self { state: SharedState::TinyStm(crate::cc::protocols::tinystm::TinyStm::shared(workers)) }
        } else {
            self
        }
    }

    /// The same state running Pisces' dual-version concurrency control
    /// (`protocols::dvcc`, snapshot isolation) instead of the protocol, if
    /// `dvcc`; snapshots start above every version recovery put in
    /// `tables` (as [`Concurrency::after_recovery`]).
    pub(crate) fn with_dvcc<R: crate::storage::record::RowKind>(
        self,
        dvcc: bool,
        workers: usize,
        tables: &[crate::storage::table::Table<R>],
    ) -> Self {
        if !dvcc {
            return self;
        }
        let versions = crate::cc::protocols::dvcc::DualVersion::shared(workers);
        versions.commit_tid(newest_tid(tables));
        Self { state: SharedState::Dvcc(versions) }
    }

    /// The hybrid paths' shared state (the PHyTM family only).
    #[inline]
    pub(crate) fn hybrid(&self) -> Option<&Hybrid> {
        match &self.state {
            SharedState::Phytm(shared) => Some(&shared.hybrid),
            _ => None,
        }
    }

    /// The state of `protocol` over tables that recovery filled: snapshots
    /// must start above every recovered version, or a first snapshot would
    /// see none of them.
    pub(crate) fn after_recovery<R: crate::storage::record::RowKind>(
        protocol: CcProtocol,
        workers: usize,
        tables: &[crate::storage::table::Table<R>],
    ) -> Self {
        let concurrency = Self::new(protocol, workers);
        if let Some(versions) = concurrency.versions() {
            versions.commit_tid(newest_tid(tables));
        }
        concurrency
    }

    /// The protocol state of worker `worker`.
    pub(crate) fn worker(&self, worker: usize) -> ProtocolTx {
        self.state.worker(worker)
    }

    /// The version store (multi-version protocols only).
    pub(crate) fn versions(&self) -> Option<&VersionStore> {
        self.state.versions()
    }

    /// `occ`'s critical section, held from validation to the end of the
    /// write phase; `None` for every other protocol.
    pub(crate) fn serial_section(&self) -> Option<MutexGuard<'_, ()>> {
        self.state.serial_section()
    }

    /// Whether reclamation may unlink `row` as far as concurrency control
    /// is concerned: no transaction holds a lock that covers it (a locking
    /// transaction's read of an absent row must stay valid without
    /// validation).
    /// A multi-version protocol also keeps a deleted row while a snapshot
    /// older than its delete (`tid`) may read it (the published collection
    /// horizon, so a `zen+` read-only snapshot starting below it cannot
    /// exist: `cc::versions`).
    pub(crate) fn may_unlink<R>(&self, row: &R, tid: u64) -> bool {
        self.state.may_unlink(row as *const R as usize, tid)
    }

    /// Reclamation unlinked `row`: its older versions go (its address may
    /// be reused by another row).
    /// Its stale secondary entries go from `table`'s indexes too.
    pub(crate) fn unlinked<R: crate::storage::record::RowKind>(
        &self,
        table: &crate::storage::table::Table<R>,
        row: &R,
    ) {
        if let Some(versions) = self.versions() {
            versions.forget(row as *const R as usize, &mut |stale| {
                table.remove_secondary(stale.position, &stale.index_key, row);
            });
        }
    }
}

/// The largest TID of any row in `tables`.
fn newest_tid<R: crate::storage::record::RowKind>(tables: &[crate::storage::table::Table<R>]) -> u64 {
    let mut newest = 0;
    for table in tables {
        table.for_each_row(|_, row| newest = newest.max(crate::storage::record::tid_of(row.word())));
    }
    newest
}
