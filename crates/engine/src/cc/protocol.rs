//! Which concurrency-control protocol an engine runs ([`CcProtocol`], the
//! `cc` engine option) and what each needs (locks, read timestamps, older
//! versions); the state they share lives in `cc::concurrency`.
//!
//! Every protocol is written once, in `cc::silo`'s transaction state
//! (`OccTx`) and the modules of `cc`, over any row kind, so each runs on
//! both storages (DRAM records and the Zen heap) under every durability
//! scheme.

use crate::error::{DbError, DbResult};

/// Most workers a locking protocol serves: a lock word names its holders
/// with one bit per worker (`cc::lock_table`).
pub(crate) const MAX_LOCKING_WORKERS: usize = 63;

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

    /// The isolation a transaction gets under the protocol, on every
    /// engine that validates (all but `nvm-ideal`), and what a read-only
    /// transaction reads: the README's isolation table in one line.
    pub fn isolation(self) -> &'static str {
        match self {
            CcProtocol::Silo | CcProtocol::Occ | CcProtocol::TicToc => {
                "strictly serializable; reads see the latest committed versions, validated at commit"
            }
            CcProtocol::NoWait | CcProtocol::WaitDie | CcProtocol::DlDetect => {
                "strictly serializable; reads see the latest committed versions under shared locks"
            }
            CcProtocol::HStore => {
                "strictly serializable; reads see the latest committed versions under partition locks"
            }
            CcProtocol::Hekaton => {
                "strictly serializable; read-only transactions read a snapshot taken when they begin and never abort \
                 (zen+ by default: the oldest running snapshot, serializable but not strictly; snapshot=current)"
            }
            CcProtocol::Mvcc | CcProtocol::Cicada => {
                "strictly serializable; every transaction reads at a timestamp taken when it begins"
            }
        }
    }

    /// Refuses a worker count the protocol cannot serve.
    pub(crate) fn check(self, workers: usize) -> DbResult<()> {
        if self.uses_lock_table() && workers > MAX_LOCKING_WORKERS {
            return Err(DbError::InvalidConfig(format!(
                "cc={} keeps lock holders as a bit per worker and serves at most {} workers, got {workers}",
                self.name(),
                MAX_LOCKING_WORKERS
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

#[cfg(test)]
mod tests {
    use super::*;

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
