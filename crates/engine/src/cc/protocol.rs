//! Which concurrency-control protocol an engine runs ([`CcProtocol`], the
//! `cc` engine option), and the per-engine state the protocols share
//! ([`Concurrency`]): the serial-validation section of `occ` and the lock
//! table of the two-phase-locking family.
//!
//! Every protocol is written once, in `cc::silo`'s transaction state
//! (`OccTx`) and this module, over any row kind, so each runs on both
//! storages (DRAM records and the Zen heap) under every durability scheme.

use crate::cc::lock_table::LockTable;
use crate::cc::tictoc::ReadTimestamps;
use crate::cc::versions::VersionStore;
use crate::error::{DbError, DbResult};
use parking_lot::{Mutex, MutexGuard};

/// A concurrency-control protocol (the ten of the Zen paper's Fig. 22).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CcProtocol {
    /// Silo's OCC: lock the write set, validate the read and node sets,
    /// install (the default; what every engine ran before protocols
    /// became an option).
    #[default]
    Silo,
    /// Kung-Robinson OCC with serial validation: validation and the write
    /// phase of every transaction run in one global critical section.
    Occ,
    /// TicToc: a commit timestamp chosen from the versions accessed, reads
    /// validated against (and extending) each version's read timestamp.
    TicToc,
    /// Two-phase locking; a conflict aborts the requester at once.
    NoWait,
    /// Two-phase locking; an older requester waits for younger holders, a
    /// younger one aborts (dies) and retries with its original timestamp.
    WaitDie,
    /// Two-phase locking; requesters wait, and a requester whose wait would
    /// close a cycle in the wait-for graph aborts.
    DlDetect,
    /// Timestamp-ordering MVCC: a timestamp at begin, reads at it (older
    /// versions kept beside the rows) that raise each row's read timestamp
    /// at once, writes refused when a later transaction read or wrote the
    /// row.
    Mvcc,
    /// Hekaton's optimistic MVCC: reads at a snapshot taken at begin (older
    /// versions kept beside the rows), a writer validates its reads at
    /// commit; read-only transactions never abort.
    Hekaton,
    /// Cicada-style MVCC, the Zen paper's own: a timestamp at begin, reads
    /// at it without shared writes, and at commit a check that every
    /// version read is still the one valid at the timestamp, extending its
    /// read timestamp (Cicada's read validation and rts update).
    Cicada,
    /// H-Store: a transaction takes the exclusive lock of every partition
    /// it touches (wait-die order) and needs no other concurrency control.
    HStore,
}

impl CcProtocol {
    /// Every protocol.
    pub const ALL: [CcProtocol; 10] = [
        CcProtocol::Silo,
        CcProtocol::Occ,
        CcProtocol::TicToc,
        CcProtocol::NoWait,
        CcProtocol::WaitDie,
        CcProtocol::DlDetect,
        CcProtocol::Mvcc,
        CcProtocol::Hekaton,
        CcProtocol::Cicada,
        CcProtocol::HStore,
    ];

    /// Stable name, as in `--engine zen:cc=NAME`.
    pub fn name(self) -> &'static str {
        match self {
            CcProtocol::Silo => "silo",
            CcProtocol::Occ => "occ",
            CcProtocol::TicToc => "tictoc",
            CcProtocol::NoWait => "no-wait",
            CcProtocol::WaitDie => "wait-die",
            CcProtocol::DlDetect => "dl-detect",
            CcProtocol::Mvcc => "mvcc",
            CcProtocol::Hekaton => "hekaton",
            CcProtocol::Cicada => "cicada",
            CcProtocol::HStore => "hstore",
        }
    }

    /// Parses a protocol name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|protocol| protocol.name() == name)
    }

    /// Whether the protocol takes locks in the lock table (rows, or
    /// `hstore`'s partitions).
    pub fn uses_lock_table(self) -> bool {
        self.is_locking() || self == CcProtocol::HStore
    }

    /// Whether a transaction reads and commits at a timestamp taken at
    /// begin (timestamp ordering).
    pub fn is_timestamp_ordered(self) -> bool {
        matches!(self, CcProtocol::Mvcc | CcProtocol::Cicada)
    }

    /// Whether the protocol reads older versions at a snapshot.
    pub fn is_multiversion(self) -> bool {
        matches!(self, CcProtocol::Mvcc | CcProtocol::Hekaton | CcProtocol::Cicada)
    }

    /// Whether the protocol is one of the two-phase-locking family.
    pub fn is_locking(self) -> bool {
        matches!(self, CcProtocol::NoWait | CcProtocol::WaitDie | CcProtocol::DlDetect)
    }

    /// Refuses a worker count the protocol cannot serve.
    pub(crate) fn check(self, workers: usize) -> DbResult<()> {
        if self.uses_lock_table() && workers > LockTable::MAX_WORKERS {
            return Err(DbError::InvalidConfig(format!(
                "cc={} keeps lock holders as a bit per worker and serves at most {} workers, got {workers}",
                self.name(),
                LockTable::MAX_WORKERS
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for CcProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One engine's concurrency-control state shared by its workers.
pub(crate) struct Concurrency {
    protocol: CcProtocol,
    /// `occ`: the critical section of validation and write phase.
    serial: Mutex<()>,
    /// The two-phase-locking family's lock table.
    locks: Option<LockTable>,
    /// TicToc's read timestamps.
    read_timestamps: Option<ReadTimestamps>,
    /// The multi-version protocols' older versions and snapshots.
    versions: Option<VersionStore>,
    /// `hstore`'s partition count.
    partitions: usize,
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
        Self { protocol, serial: Mutex::new(()), locks, read_timestamps, versions, partitions: workers.max(1) }
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
    /// older than its delete (`tid`) may read it.
    pub(crate) fn may_unlink<R>(&self, row: &R, tid: u64) -> bool {
        self.locks.as_ref().is_none_or(|locks| !locks.is_held(row as *const R as usize))
            && self.versions.as_ref().is_none_or(|versions| tid < versions.oldest_snapshot())
    }

    /// Reclamation unlinked `row`: its older versions go (its address may
    /// be reused by another row).
    pub(crate) fn unlinked<R>(&self, row: &R) {
        if let Some(versions) = &self.versions {
            versions.forget(row as *const R as usize);
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

    #[test]
    fn every_protocol_has_a_name_that_parses() {
        for protocol in CcProtocol::ALL {
            assert_eq!(CcProtocol::parse(protocol.name()), Some(protocol));
            assert!(protocol.check(4).is_ok());
        }
        assert_eq!(CcProtocol::parse("2pl"), None);
        assert!(CcProtocol::NoWait.check(64).is_err());
    }
}
