//! `cc=cicada`: Cicada-style MVCC, the Zen paper's own. A timestamp at
//! begin (`protocols::timestamp_order`), reads at it without shared writes,
//! and at commit a check that every version read is still the one valid at
//! the timestamp, extending its read timestamp (Cicada's read validation
//! and rts update), and the raise of the scanned leaves' read timestamps.

use crate::cc::protocols::multi_version::{self, Snapshot};
use crate::cc::protocols::timestamp_order::{self, Shared};
use crate::cc::protocols::{Named, Protocol, TidBounds};
use crate::cc::read_timestamps::ReadTimestamps;
use crate::cc::transaction::TxState;
use crate::cc::versions::{OlderVersion, VersionStore};
use crate::error::AbortReason;
use crate::storage::record::{self, RowKind, LOCKED, REMOVED};
use crate::storage::table::Table;
use std::sync::Arc;

/// A worker's state under Cicada.
pub(crate) struct Cicada {
    snapshot: Snapshot,
    read_timestamps: Arc<ReadTimestamps>,
}

impl Cicada {
    /// Cicada's read validation: every version read is still the one valid
    /// at `ts`, and its read timestamp reaches `ts` (extended while nobody
    /// else holds the row), so no writer below `ts` can replace it later.
    fn validate_at_timestamp<R: RowKind>(&self, tx: &TxState<R>, ts: u64) -> Result<(), AbortReason> {
        let read_timestamps = &*self.read_timestamps;
        let versions = self.snapshot.versions();
        let mut scratch = Vec::new();
        for read in &tx.reads {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { &*read.row };
            let current = row.word();
            let current_wts = record::tid_of(current);
            let visible_wts = if current_wts <= ts {
                current_wts
            } else {
                match versions.read(read.row as usize, ts, &mut scratch) {
                    OlderVersion::Found { wts, .. } => wts,
                    OlderVersion::None => 0,
                }
            };
            if visible_wts != record::tid_of(read.word) || current == REMOVED {
                return Err(AbortReason::ReadValidation);
            }
            if current_wts > ts || tx.writes.find(read.row).is_some() {
                // A newer version already bounds the one read; or our own
                // write, checked against its read timestamp above.
                continue;
            }
            let address = read.row as usize;
            if read_timestamps.rts(address, current_wts) >= ts {
                continue;
            }
            if current & LOCKED != 0 {
                return Err(AbortReason::ReadValidation);
            }
            read_timestamps.extend(address, ts);
            if row.word() != current {
                return Err(AbortReason::ReadValidation);
            }
        }
        Ok(())
    }

    /// The reads and the scanned ranges at `ts`: the reads still valid (and
    /// their read timestamps raised), the scanned leaves' read timestamps
    /// raised (a timestamp can lie below a concurrent writer's), and no
    /// phantom.
    fn validate_reads_at<R: RowKind>(&self, tx: &TxState<R>, tables: &[Table<R>], ts: u64) -> Result<(), AbortReason> {
        self.validate_at_timestamp(tx, ts)?;
        tx.raise_scanned_leaves(tables, ts);
        tx.validate_leaves(tables)
    }
}

impl Protocol for Cicada {
    type Shared = Shared;

    fn worker(shared: &Shared, worker: usize) -> Self {
        Self { snapshot: Snapshot::new(&shared.versions, worker), read_timestamps: Arc::clone(&shared.read_timestamps) }
    }

    fn may_unlink(shared: &Shared, _address: usize, tid: u64) -> bool {
        multi_version::may_unlink(&shared.versions, tid)
    }

    fn versions(shared: &Shared) -> Option<&VersionStore> {
        Some(&shared.versions)
    }

    #[inline]
    fn begin(&mut self, _attempt: u32, epoch: u64) {
        self.snapshot.begin_timestamp(epoch);
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
    fn write(&mut self, _accesses: usize, address: usize, word: u64) -> Result<(), AbortReason> {
        timestamp_order::check_write(&self.snapshot, &self.read_timestamps, address, word)
    }

    fn validate<R: RowKind>(&self, tx: &TxState<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        tx.check_reads_durable()?;
        self.validate_reads_at(tx, tables, self.snapshot.ts)
    }

    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxState<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        let ts = self.snapshot.ts;
        timestamp_order::check_commit(tx, tables, &self.read_timestamps, ts, bounds)?;
        self.validate_reads_at(tx, tables, ts)?;
        Ok(ts)
    }

    #[inline]
    fn snapshot(&mut self) -> Option<&mut Snapshot> {
        Some(&mut self.snapshot)
    }

    fn finish<R: RowKind>(&mut self, tables: &[Table<R>]) {
        self.snapshot.collect(tables);
    }
}

impl Named for Cicada {
    const ISOLATION: &'static str = timestamp_order::ISOLATION;
    const TIMESTAMP_ORDERED: bool = true;
    const MULTIVERSION: bool = true;

    fn shared(workers: usize) -> Shared {
        Shared::new(workers)
    }
}
