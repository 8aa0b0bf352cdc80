//! `cc=mvcc`: timestamp-ordering MVCC (`protocols::timestamp_order`). A
//! timestamp at begin; reads at it (older versions kept beside the rows)
//! that raise each row's read timestamp at once, ranges included; writes
//! refused when a later transaction read or wrote the row.

use crate::cc::protocols::multi_version::{self, Snapshot};
use crate::cc::protocols::timestamp_order::{self, Shared};
use crate::cc::protocols::{Named, Protocol, TidBounds};
use crate::cc::read_timestamps::ReadTimestamps;
use crate::cc::transaction::TxState;
use crate::cc::versions::VersionStore;
use crate::error::AbortReason;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use std::sync::Arc;

/// A worker's state under `mvcc`.
pub(crate) struct Mvcc {
    snapshot: Snapshot,
    read_timestamps: Arc<ReadTimestamps>,
}

impl Protocol for Mvcc {
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

    /// The read timestamp first, then the read; a writer locks, then checks
    /// it (the order of `cc::read_timestamps`), so no writer below this
    /// timestamp installs under the read.
    #[inline]
    fn read(&mut self, _accesses: usize, address: usize) -> Result<(), AbortReason> {
        self.read_timestamps.extend(address, self.snapshot.ts);
        Ok(())
    }

    #[inline]
    fn version_at(&self, address: usize, word: u64, out: &mut Vec<u8>) -> Option<u64> {
        self.snapshot.version_at(address, word, out)
    }

    /// Reads are registered eagerly, ranges included: a later insert below
    /// the timestamp finds them.
    #[inline]
    fn scan_read_ts(&self) -> Option<u64> {
        Some(self.snapshot.ts)
    }

    #[inline]
    fn write(&mut self, _accesses: usize, address: usize, word: u64) -> Result<(), AbortReason> {
        timestamp_order::check_write(&self.snapshot, &self.read_timestamps, address, word)
    }

    /// The reads were registered eagerly: only phantoms are checked.
    fn validate<R: RowKind>(&self, tx: &TxState<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        tx.check_reads_durable()?;
        tx.validate_leaves(tables)
    }

    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxState<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        let ts = self.snapshot.ts;
        timestamp_order::check_commit(tx, tables, &self.read_timestamps, ts, bounds)?;
        tx.validate_leaves(tables)?;
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

impl Named for Mvcc {
    const ISOLATION: &'static str = timestamp_order::ISOLATION;
    const TIMESTAMP_ORDERED: bool = true;
    const MULTIVERSION: bool = true;

    fn shared(workers: usize) -> Shared {
        Shared::new(workers)
    }
}
