//! `cc=cicada`: Cicada-style MVCC, the Zen paper's own. A timestamp at
//! begin (`protocols::timestamp_order`), reads at it without shared writes,
//! and at commit a check that every version read is still the one valid at
//! the timestamp, extending its read timestamp (Cicada's read validation
//! and rts update), and the raise of the scanned leaves' read timestamps.

use crate::cc::protocols::multi_version::{MultiVersion, Snapshot};
use crate::cc::protocols::timestamp_order::{Reads, TimestampOrder};
use crate::cc::read_timestamps::ReadTimestamps;
use crate::cc::tx_sets::TxSets;
use crate::cc::versions::{OlderVersion, VersionStore};
use crate::error::AbortReason;
use crate::storage::record::{self, RowKind, REMOVED};
use crate::storage::table::Table;

/// Cicada's reads: they write nothing shared until the commit validates
/// them.
pub(crate) struct Validated;

impl Reads for Validated {
    /// The reads and the scanned ranges at `ts`: the reads still valid (and
    /// their read timestamps raised), the scanned leaves' read timestamps
    /// raised (a timestamp can lie below a concurrent writer's), and no
    /// phantom.
    fn validate_at<R: RowKind>(
        snapshot: &Snapshot,
        read_timestamps: &ReadTimestamps,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        ts: u64,
    ) -> Result<(), AbortReason> {
        validate_at_timestamp(snapshot.versions(), read_timestamps, tx, ts)?;
        tx.raise_scanned_leaves(tables, ts);
        tx.validate_leaves(tables)
    }
}

/// A worker's state under Cicada.
pub(crate) type Cicada = MultiVersion<TimestampOrder<Validated>>;

/// Cicada's read validation: every version read is still the one valid
/// at `ts`, and its read timestamp reaches `ts` (extended while nobody
/// else holds the row), so no writer below `ts` can replace it later.
fn validate_at_timestamp<R: RowKind>(
    versions: &VersionStore,
    read_timestamps: &ReadTimestamps,
    tx: &TxSets<R>,
    ts: u64,
) -> Result<(), AbortReason> {
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
        // A lock is another's: our own writes were passed over above.
        read_timestamps.extend_read(row, current, current_wts, ts, || false)?;
    }
    Ok(())
}
