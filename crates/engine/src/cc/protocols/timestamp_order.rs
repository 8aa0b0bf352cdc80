//! What the timestamp-ordering protocols (`mvcc`, `cicada`) share: a
//! timestamp taken at begin is the commit's TID too; reads at it see the
//! version valid then (`protocols::multi_version`); a write is refused
//! when a later transaction read the version it replaces (the read
//! timestamps of `cc::read_timestamps`); and the commit checks, at its own
//! timestamp, every write and every range a later reader scanned. They
//! differ only in their reads ([`Reads`]): what a read registers as it
//! reads, and what the commit checks of them.

use crate::cc::protocols::multi_version::{MultiVersion, Scheme, Snapshot};
use crate::cc::protocols::{Named, TidBounds};
use crate::cc::read_timestamps::ReadTimestamps;
use crate::cc::tx_sets::TxSets;
use crate::cc::versions::VersionStore;
use crate::error::AbortReason;
use crate::storage::record::{self, RowKind, ABSENT};
use crate::storage::table::Table;
use std::marker::PhantomData;
use std::sync::Arc;

/// The isolation of the timestamp-ordering protocols.
pub(crate) const ISOLATION: &str = "strictly serializable; every transaction reads at a timestamp taken when it begins";

/// The state a timestamp-ordering protocol's workers share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) versions: Arc<VersionStore>,
    pub(crate) read_timestamps: Arc<ReadTimestamps>,
}

impl Shared {
    /// The state for `workers` workers.
    pub(crate) fn new(workers: usize) -> Self {
        Self { versions: Arc::new(VersionStore::new(workers)), read_timestamps: Arc::new(ReadTimestamps::new()) }
    }
}

/// A timestamp-ordering protocol's reads; each hook has the behaviour of
/// reads that register nothing by default.
pub(crate) trait Reads: Send + 'static {
    /// Before a read of the row at `address` at timestamp `ts`.
    #[inline]
    fn read(read_timestamps: &ReadTimestamps, address: usize, ts: u64) {
        let _ = (read_timestamps, address, ts);
    }

    /// The timestamp a scan at `ts` raises the read timestamps of its
    /// leaves to, as it scans them.
    #[inline]
    fn scan_read_ts(ts: u64) -> Option<u64> {
        let _ = ts;
        None
    }

    /// The reads and scanned ranges of `tx`, at its timestamp `ts` (the
    /// last check of a reader's and of a writer's commit).
    fn validate_at<R: RowKind>(
        snapshot: &Snapshot,
        read_timestamps: &ReadTimestamps,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        ts: u64,
    ) -> Result<(), AbortReason>;
}

/// A worker's state under a timestamp-ordering protocol, beside its
/// snapshot (whose timestamp is the transaction's).
pub(crate) struct TimestampOrder<V: Reads> {
    read_timestamps: Arc<ReadTimestamps>,
    reads: PhantomData<V>,
}

impl<V: Reads> Scheme for TimestampOrder<V> {
    type Shared = Shared;

    fn versions(shared: &Shared) -> &Arc<VersionStore> {
        &shared.versions
    }

    fn worker(shared: &Shared) -> Self {
        Self { read_timestamps: Arc::clone(&shared.read_timestamps), reads: PhantomData }
    }

    #[inline]
    fn begin(snapshot: &mut Snapshot, epoch: u64) {
        snapshot.begin_timestamp(epoch);
    }

    #[inline]
    fn read(&self, snapshot: &Snapshot, address: usize) -> Result<(), AbortReason> {
        V::read(&self.read_timestamps, address, snapshot.ts);
        Ok(())
    }

    #[inline]
    fn scan_read_ts(&self, snapshot: &Snapshot) -> Option<u64> {
        V::scan_read_ts(snapshot.ts)
    }

    #[inline]
    fn write(&self, snapshot: &Snapshot, address: usize, word: u64) -> Result<(), AbortReason> {
        check_write(snapshot, &self.read_timestamps, address, word)
    }

    fn validate<R: RowKind>(
        &self,
        snapshot: &Snapshot,
        tx: &TxSets<R>,
        tables: &[Table<R>],
    ) -> Result<(), AbortReason> {
        tx.check_reads_durable()?;
        V::validate_at(snapshot, &self.read_timestamps, tx, tables, snapshot.ts)
    }

    fn commit_timestamp<R: RowKind>(
        &self,
        snapshot: &Snapshot,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        let ts = snapshot.ts;
        check_commit(tx, tables, &self.read_timestamps, ts, bounds)?;
        V::validate_at(snapshot, &self.read_timestamps, tx, tables, ts)?;
        Ok(ts)
    }
}

impl<V: Reads> Named for MultiVersion<TimestampOrder<V>> {
    const ISOLATION: &'static str = ISOLATION;
    const TIMESTAMP_ORDERED: bool = true;
    const MULTIVERSION: bool = true;

    fn shared(workers: usize) -> Shared {
        Shared::new(workers)
    }
}

/// A write of the row at `address` (whose word is `word`) at `snapshot`:
/// refused when a newer version exists, or when a later transaction read
/// the version it replaces.
#[inline]
fn check_write(
    snapshot: &Snapshot,
    read_timestamps: &ReadTimestamps,
    address: usize,
    word: u64,
) -> Result<(), AbortReason> {
    snapshot.check_write(word)?;
    if read_timestamps.rts(address, record::tid_of(word)) > snapshot.ts {
        // A later transaction read the version this write replaces.
        return Err(AbortReason::TimestampOrder);
    }
    Ok(())
}

/// The commit at the transaction's own timestamp `ts`: still in the
/// current epoch (the durability schemes acknowledge by the TID's epoch),
/// above the version every write replaces and above every read of it, and
/// no phantom. (The protocol then checks its reads and leaves.)
fn check_commit<R: RowKind>(
    tx: &TxSets<R>,
    tables: &[Table<R>],
    read_timestamps: &ReadTimestamps,
    ts: u64,
    bounds: TidBounds,
) -> Result<(), AbortReason> {
    if record::epoch_of_tid(ts) != bounds.epoch {
        return Err(AbortReason::TimestampOrder);
    }
    tx.check_reads_durable()?;
    for entry in tx.writes.entries() {
        let wts = record::tid_of(entry.locked_word);
        // IMPORTANT: the row is locked; a reader that raised its rts
        // before reading is seen here (`cc::read_timestamps`'s order).
        if wts >= ts || read_timestamps.rts(entry.row.as_ptr() as usize, wts) > ts {
            return Err(AbortReason::TimestampOrder);
        }
    }
    check_no_later_range_read(tx, tables, ts)
}

/// Timestamp ordering's phantom check: no transaction with a later
/// timestamp read the range of a key this one makes present (a
/// placeholder it inserted, an absent row it fills, a new secondary
/// entry), since that reader, serialized after this commit, did not
/// see the key. Readers raise the read timestamps of the leaves they
/// scan (`OrderedIndex::raise_read_ts`) before validating them; the
/// key is in its leaf before this check.
fn check_no_later_range_read<R: RowKind>(tx: &TxSets<R>, tables: &[Table<R>], ts: u64) -> Result<(), AbortReason> {
    for entry in tx.writes.entries() {
        if entry.locked_word & ABSENT == 0 || entry.is_delete() {
            continue;
        }
        let table = &tables[entry.table.0 as usize];
        let read_ts = match tx.created.iter().find(|(_, row, _)| *row == entry.row) {
            Some(&(_, _, Some(leaf))) => table.leaf_read_ts(None, leaf),
            _ => table.gap_read_ts(None, entry.row().key()),
        };
        if read_ts > ts {
            return Err(AbortReason::TimestampOrder);
        }
    }
    for added in tx.added_secondaries.iter().filter(|added| added.inserted) {
        let table = &tables[tx.writes.entries()[added.write].table.0 as usize];
        let read_ts = match added.leaf {
            Some(leaf) => table.leaf_read_ts(Some(added.position), leaf),
            None => table.gap_read_ts(Some(added.position), &added.composite),
        };
        if read_ts > ts {
            return Err(AbortReason::TimestampOrder);
        }
    }
    Ok(())
}
