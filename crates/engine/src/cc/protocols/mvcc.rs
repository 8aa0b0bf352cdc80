//! `cc=mvcc`: timestamp-ordering MVCC (`protocols::timestamp_order`). A
//! timestamp at begin; reads at it (older versions kept beside the rows)
//! that raise each row's read timestamp at once, ranges included; writes
//! refused when a later transaction read or wrote the row.

use crate::cc::protocols::multi_version::{MultiVersion, Snapshot};
use crate::cc::protocols::timestamp_order::{Reads, TimestampOrder};
use crate::cc::read_timestamps::ReadTimestamps;
use crate::cc::tx_sets::TxSets;
use crate::error::AbortReason;
use crate::storage::record::RowKind;
use crate::storage::table::Table;

/// `mvcc`'s reads: registered as they happen.
pub(crate) struct Eager;

impl Reads for Eager {
    /// The read timestamp first, then the read; a writer locks, then checks
    /// it (the order of `cc::read_timestamps`), so no writer below this
    /// timestamp installs under the read.
    #[inline]
    fn read(read_timestamps: &ReadTimestamps, address: usize, ts: u64) {
        read_timestamps.extend(address, ts);
    }

    /// Reads are registered eagerly, ranges included: a later insert below
    /// the timestamp finds them.
    #[inline]
    fn scan_read_ts(ts: u64) -> Option<u64> {
        Some(ts)
    }

    /// The reads were registered eagerly: only phantoms are checked.
    fn validate_at<R: RowKind>(
        _snapshot: &Snapshot,
        _read_timestamps: &ReadTimestamps,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        _ts: u64,
    ) -> Result<(), AbortReason> {
        tx.validate_leaves(tables)
    }
}

/// A worker's state under `mvcc`.
pub(crate) type Mvcc = MultiVersion<TimestampOrder<Eager>>;
