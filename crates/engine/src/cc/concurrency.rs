//! The concurrency-control state one engine's workers share
//! ([`Concurrency`]): `occ`'s serial-validation section, the lock table of
//! the locking protocols, TicToc's and timestamp ordering's read
//! timestamps, the multi-version protocols' older versions, and `hstore`'s
//! partitions.

use crate::cc::hybrid::Hybrid;
use crate::cc::lock_table::LockTable;
use crate::cc::protocol::CcProtocol;
use crate::cc::tictoc::ReadTimestamps;
use crate::cc::versions::VersionStore;
use parking_lot::{Mutex, MutexGuard};

/// One engine's concurrency-control state shared by its workers.
pub(crate) struct Concurrency {
    protocol: CcProtocol,
    /// `occ`: the critical section of validation and write phase.
    serial: Mutex<()>,
    /// The lock table of the locking protocols (2PL and `hstore`).
    locks: Option<LockTable>,
    /// The read timestamps of TicToc and timestamp ordering.
    read_timestamps: Option<ReadTimestamps>,
    /// The multi-version protocols' older versions and snapshots.
    versions: Option<VersionStore>,
    /// `hstore`'s partition count.
    partitions: usize,
    /// The PHyTM family's paths and their shared state.
    hybrid: Option<Hybrid>,
}

impl Concurrency {
    /// The state of `protocol` for `workers` workers (checked by
    /// [`CcProtocol::check`] when the options were validated).
    pub(crate) fn new(protocol: CcProtocol, workers: usize) -> Self {
        debug_assert!(protocol.check(workers).is_ok());
        let locks = protocol.uses_lock_table().then(|| LockTable::new(protocol, workers));
        let read_timestamps =
            matches!(protocol, CcProtocol::TicToc | CcProtocol::Mvcc | CcProtocol::Cicada).then(ReadTimestamps::new);
        let versions = protocol.is_multiversion().then(|| VersionStore::new(workers));
        Self {
            protocol,
            serial: Mutex::new(()),
            locks,
            read_timestamps,
            versions,
            partitions: workers.max(1),
            hybrid: None,
        }
    }

    /// The same state running the hybrid paths of `hybrid` (the PHyTM
    /// family), whose every path writes through a no-wait lock table.
    pub(crate) fn with_hybrid(mut self, hybrid: Option<Hybrid>, workers: usize) -> Self {
        if hybrid.is_some() && self.locks.is_none() {
            self.locks = Some(LockTable::new(CcProtocol::NoWait, workers));
        }
        self.hybrid = hybrid;
        self
    }

    /// The hybrid paths' shared state (the PHyTM family only).
    #[inline]
    pub(crate) fn hybrid(&self) -> Option<&Hybrid> {
        self.hybrid.as_ref()
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
        if let Some(versions) = &concurrency.versions {
            let mut newest = 0;
            for table in tables {
                table.for_each_row(|_, row| newest = newest.max(crate::storage::record::tid_of(row.word())));
            }
            versions.commit_tid(newest);
        }
        concurrency
    }

    /// The protocol.
    pub(crate) fn protocol(&self) -> CcProtocol {
        self.protocol
    }

    /// The version store (multi-version protocols only).
    pub(crate) fn versions(&self) -> Option<&VersionStore> {
        self.versions.as_ref()
    }

    /// TicToc's read timestamps (`tictoc` only).
    pub(crate) fn read_timestamps(&self) -> Option<&ReadTimestamps> {
        self.read_timestamps.as_ref()
    }

    /// The lock table (two-phase locking and `hstore`).
    pub(crate) fn locks(&self) -> Option<&LockTable> {
        self.locks.as_ref()
    }

    /// The lock table when rows are locked (two-phase locking).
    pub(crate) fn row_locks(&self) -> Option<&LockTable> {
        self.locks.as_ref().filter(|_| self.protocol.is_locking())
    }

    /// `hstore`: the partitions (one per worker) and the lock address of
    /// the partition of `key` in a table whose keys name their partition
    /// by their first `prefix` bytes. Partition lock addresses are small
    /// multiples of 64, which no row has.
    pub(crate) fn partition_address(&self, table: u32, prefix: Option<usize>, key: &[u8]) -> usize {
        let named = match prefix {
            Some(len) if key.len() >= len => &key[..len],
            _ => key,
        };
        let mut hash = if prefix.is_some() { 0 } else { u64::from(table) + 1 };
        for &byte in named {
            hash = (hash.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        Self::partition_lock_address((hash >> 32) as usize % self.partitions)
    }

    /// The number of `hstore` partitions.
    pub(crate) fn partitions(&self) -> usize {
        self.partitions
    }

    /// The lock address of partition `partition`.
    pub(crate) fn partition_lock_address(partition: usize) -> usize {
        (partition + 1) << 6
    }

    /// `occ`'s critical section, held from validation to the end of the
    /// write phase; `None` for every other protocol.
    pub(crate) fn serial_section(&self) -> Option<MutexGuard<'_, ()>> {
        (self.protocol == CcProtocol::Occ).then(|| self.serial.lock())
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
        self.locks.as_ref().is_none_or(|locks| !locks.is_held(row as *const R as usize))
            && self.versions.as_ref().is_none_or(|versions| tid < versions.collection_horizon())
    }

    /// Reclamation unlinked `row`: its older versions go (its address may
    /// be reused by another row).
    /// Its stale secondary entries go from `table`'s indexes too.
    pub(crate) fn unlinked<R: crate::storage::record::RowKind>(
        &self,
        table: &crate::storage::table::Table<R>,
        row: &R,
    ) {
        if let Some(versions) = &self.versions {
            versions.forget(row as *const R as usize, &mut |stale| {
                table.remove_secondary(stale.position, &stale.index_key, row);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_the_declared_prefix() {
        let cc = Concurrency::new(CcProtocol::HStore, 8);
        let warehouse_3 = [0, 0, 0, 3];
        let a = cc.partition_address(0, Some(4), &[&warehouse_3[..], b"district 1"].concat());
        let b = cc.partition_address(5, Some(4), &[&warehouse_3[..], b"order 77"].concat());
        assert_eq!(a, b, "one warehouse is one partition, in every table");
        let spread: std::collections::HashSet<usize> =
            (0u32..64).map(|w| cc.partition_address(0, Some(4), &w.to_be_bytes())).collect();
        assert!(spread.len() > 4, "warehouses spread over the partitions: {spread:?}");
        assert!(spread.iter().all(|&address| address % 64 == 0 && address <= 8 << 6));
        assert_eq!(cc.partitions(), 8);
    }
}
