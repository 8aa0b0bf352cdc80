//! `cc=tictoc`: TicToc (Yu et al., SIGMOD 2016; the read timestamps are
//! `cc::read_timestamps`). The body is Silo's; a commit picks the smallest
//! timestamp its accesses allow (above the `rts` of every row it
//! overwrites, at least the `wts` of every row it read) and validates each
//! read at it, extending the version's `rts` when needed. A read-only
//! transaction commits at the newest version it read.

use crate::cc::protocols::silo::VALIDATED_AT_COMMIT;
use crate::cc::protocols::{Named, Protocol, TidBounds};
use crate::cc::read_timestamps::ReadTimestamps;
use crate::cc::tx_sets::{unchanged, TxSets};
use crate::error::AbortReason;
use crate::storage::record::{self, RowKind};
use crate::storage::table::Table;
use std::sync::Arc;

/// A worker's state under TicToc.
pub(crate) struct TicToc {
    read_timestamps: Arc<ReadTimestamps>,
}

impl TicToc {
    /// TicToc's read validation at timestamp `ts`: each version read must
    /// still be the row's, and valid at `ts` — already (its rts reaches
    /// `ts`), or by extending its rts while nobody else holds the row.
    fn validate_at<R: RowKind>(&self, tx: &TxSets<R>, ts: u64) -> Result<(), AbortReason> {
        let read_timestamps = &*self.read_timestamps;
        for read in &tx.reads {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { &*read.row };
            let current = row.word();
            unchanged(current, read.word)?;
            let own_lock = || tx.writes.find(read.row).is_some();
            read_timestamps.extend_read(row, current, record::tid_of(read.word), ts, own_lock)?;
        }
        Ok(())
    }
}

impl Protocol for TicToc {
    type Shared = Arc<ReadTimestamps>;

    fn worker(shared: &Self::Shared, _worker: usize) -> Self {
        Self { read_timestamps: Arc::clone(shared) }
    }

    /// A reader commits at the newest version it read.
    fn validate<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        self.validate_at(tx, tx.max_read_tid())?;
        tx.validate_leaves(tables)
    }

    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        let TidBounds { max_locked, floor, epoch } = bounds;
        // Above the rts of every row overwritten, at least the wts of every
        // row read. The floors keep what the logs and Zen's heap need, so
        // a commit cannot move into an older epoch.
        let mut ts = (floor + 1).max(record::first_tid_of_epoch(epoch)).max(tx.max_read_tid());
        for entry in tx.writes.entries() {
            let wts = record::tid_of(entry.locked_word);
            ts = ts.max(self.read_timestamps.rts(entry.row.as_ptr() as usize, wts) + 1);
        }
        debug_assert!(ts > max_locked && ts < record::MAX_TID);
        self.validate_at(tx, ts)?;
        tx.validate_leaves(tables)?;
        Ok(ts)
    }
}

impl Named for TicToc {
    const ISOLATION: &'static str = VALIDATED_AT_COMMIT;

    fn shared(_workers: usize) -> Self::Shared {
        Arc::new(ReadTimestamps::new())
    }
}
