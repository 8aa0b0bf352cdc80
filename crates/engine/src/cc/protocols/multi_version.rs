//! What the multi-version protocols (`hekaton`, `mvcc`, `cicada`) share: a
//! worker's snapshot over the engine's older versions (`cc::versions`),
//! the version a read at it sees, the refusal of a write that a newer
//! version already replaced, and the versions a commit keeps.
//!
//! Their hooks are written once, for [`MultiVersion`]; a protocol (or the
//! timestamp-ordering family, `protocols::timestamp_order`) says what is
//! its own through a [`Scheme`]: how an attempt takes its snapshot, what a
//! read registers and a write checks, and how a commit validates and picks
//! its timestamp.

use crate::cc::protocols::{no_oldest_snapshot, Protocol, TidBounds};
use crate::cc::tx_sets::TxSets;
use crate::cc::versions::{OlderVersion, StaleEntry, VersionQueue, VersionStore};
use crate::error::AbortReason;
use crate::storage::record::{self, RowKind, ABSENT, REMOVED};
use crate::storage::table::Table;
use std::sync::Arc;

/// One worker's snapshot and the versions its commits kept.
pub(crate) struct Snapshot {
    versions: Arc<VersionStore>,
    worker: usize,
    /// The attempt's snapshot (its timestamp, under timestamp ordering).
    pub(crate) ts: u64,
    /// Versions this worker kept, until no snapshot needs them.
    queue: VersionQueue,
    /// Keep a replaced version only when another running snapshot may
    /// read it (`dvcc`: Pisces leaves the older version in place and
    /// copies nothing when no reader needs it).
    pub(crate) keep_only_when_read: bool,
}

impl Snapshot {
    /// The (not yet taken) snapshot of worker `worker` over `versions`.
    pub(crate) fn new(versions: &Arc<VersionStore>, worker: usize) -> Self {
        Self {
            versions: Arc::clone(versions),
            worker,
            ts: u64::MAX,
            queue: VersionQueue::default(),
            keep_only_when_read: false,
        }
    }

    /// The engine's older versions.
    pub(crate) fn versions(&self) -> &VersionStore {
        &self.versions
    }

    /// The older versions and this worker's queue of kept ones.
    pub(crate) fn parts(&mut self) -> (&VersionStore, &mut VersionQueue) {
        (&self.versions, &mut self.queue)
    }

    /// Takes a snapshot of every commit so far.
    #[inline]
    pub(crate) fn begin(&mut self) {
        self.ts = self.versions.begin(self.worker);
    }

    /// Takes a timestamp in `epoch` or later: the commit's TID too, which
    /// must lie in the epoch the transaction commits in.
    #[inline]
    pub(crate) fn begin_timestamp(&mut self, epoch: u64) {
        self.ts = self.versions.begin_timestamp(self.worker, record::first_tid_of_epoch(epoch));
    }

    /// Takes the oldest snapshot any transaction holds (`zen+`).
    pub(crate) fn begin_oldest(&mut self) {
        self.ts = self.versions.begin_oldest(self.worker);
    }

    /// Releases the snapshot.
    #[inline]
    pub(crate) fn end(&self) {
        self.versions.end(self.worker);
    }

    /// A version newer than the snapshot is read as the one valid at it,
    /// from the row's chain (or none: the key was absent then).
    #[inline]
    pub(crate) fn version_at(&self, address: usize, word: u64, out: &mut Vec<u8>) -> Option<u64> {
        if record::tid_of(word) <= self.ts {
            return None;
        }
        let (wts, present) = match self.versions.read(address, self.ts, out) {
            OlderVersion::Found { wts, present } => (wts, present),
            OlderVersion::None => (0, false),
        };
        Some(record::word_of(wts, if present { 0 } else { ABSENT }))
    }

    /// A row with a version newer than the snapshot cannot be written (the
    /// first writer wins).
    #[inline]
    pub(crate) fn check_write(&self, word: u64) -> Result<(), AbortReason> {
        if record::tid_of(word) > self.ts {
            return Err(AbortReason::WriteLock);
        }
        Ok(())
    }

    /// Keeps the version of the row at `address` (locked by this commit,
    /// `locked_word`, value `old` when present) that the commit at `tid`
    /// replaces.
    pub(crate) fn preserve(&mut self, address: usize, locked_word: u64, old: Option<&[u8]>, tid: u64) {
        let old = if locked_word & ABSENT == 0 { old } else { None };
        debug_assert!(locked_word & ABSENT != 0 || old.is_some(), "a present version has a value");
        if self.keep_only_when_read && !self.versions.other_snapshot_below(self.worker, tid) {
            return;
        }
        self.versions.preserve(&mut self.queue, address, record::tid_of(locked_word), old, tid);
    }

    /// Drops the kept versions no snapshot needs any more, with their stale
    /// secondary entries in `tables`.
    pub(crate) fn collect<R: RowKind>(&mut self, tables: &[Table<R>]) {
        self.versions.collect(&mut self.queue, &mut unindex_stale(tables));
    }
}

/// Whether a deleted row whose delete committed at `tid` may go: no
/// snapshot older than the delete may read it (the published collection
/// horizon).
#[inline]
pub(crate) fn may_unlink(versions: &VersionStore, tid: u64) -> bool {
    tid < versions.collection_horizon()
}

/// What one multi-version protocol adds to the hooks the family shares:
/// its side state and the hooks in which the protocols differ (each as in
/// [`Protocol`], given the attempt's snapshot). A hook left out needs
/// nothing.
pub(crate) trait Scheme: Sized + Send {
    /// The state the workers share: the older versions, and the
    /// protocol's side tables.
    type Shared: Send + Sync;

    /// The older versions in `shared`.
    fn versions(shared: &Self::Shared) -> &Arc<VersionStore>;

    /// A worker's state beyond its snapshot.
    fn worker(shared: &Self::Shared) -> Self;

    /// Takes the attempt's `snapshot` (in `epoch`).
    fn begin(snapshot: &mut Snapshot, epoch: u64);

    /// See [`Protocol::begin_oldest_snapshot`].
    fn begin_oldest(snapshot: &mut Snapshot) {
        let _ = snapshot;
        no_oldest_snapshot()
    }

    /// See [`Protocol::read`].
    #[inline]
    fn read(&self, snapshot: &Snapshot, address: usize) -> Result<(), AbortReason> {
        let _ = (snapshot, address);
        Ok(())
    }

    /// See [`Protocol::scan_read_ts`].
    #[inline]
    fn scan_read_ts(&self, snapshot: &Snapshot) -> Option<u64> {
        let _ = snapshot;
        None
    }

    /// See [`Protocol::write`].
    fn write(&self, snapshot: &Snapshot, address: usize, word: u64) -> Result<(), AbortReason>;

    /// See [`Protocol::validate`]. By default a snapshot needs no read
    /// validation: every version read was installed at or below it, after
    /// its commit was durable, which `check_reads_durable` confirms.
    fn validate<R: RowKind>(
        &self,
        _snapshot: &Snapshot,
        tx: &TxSets<R>,
        _tables: &[Table<R>],
    ) -> Result<(), AbortReason> {
        tx.check_reads_durable()
    }

    /// See [`Protocol::commit_timestamp`].
    fn commit_timestamp<R: RowKind>(
        &self,
        snapshot: &Snapshot,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason>;
}

/// One worker's state under a multi-version protocol: its snapshot, and
/// what its scheme `S` keeps beside it.
pub(crate) struct MultiVersion<S: Scheme> {
    snapshot: Snapshot,
    scheme: S,
}

impl<S: Scheme> Protocol for MultiVersion<S> {
    type Shared = S::Shared;

    fn worker(shared: &S::Shared, worker: usize) -> Self {
        Self { snapshot: Snapshot::new(S::versions(shared), worker), scheme: S::worker(shared) }
    }

    fn may_unlink(shared: &S::Shared, _address: usize, tid: u64) -> bool {
        may_unlink(S::versions(shared), tid)
    }

    fn versions(shared: &S::Shared) -> Option<&VersionStore> {
        Some(S::versions(shared))
    }

    #[inline]
    fn begin(&mut self, _attempt: u32, epoch: u64) {
        S::begin(&mut self.snapshot, epoch);
    }

    fn begin_oldest_snapshot(&mut self) {
        S::begin_oldest(&mut self.snapshot);
    }

    #[inline]
    fn abort(&mut self) {
        self.snapshot.end();
    }

    #[inline]
    fn read(&mut self, _accesses: usize, address: usize) -> Result<(), AbortReason> {
        self.scheme.read(&self.snapshot, address)
    }

    #[inline]
    fn version_at(&self, address: usize, word: u64, out: &mut Vec<u8>) -> Option<u64> {
        self.snapshot.version_at(address, word, out)
    }

    #[inline]
    fn scan_read_ts(&self) -> Option<u64> {
        self.scheme.scan_read_ts(&self.snapshot)
    }

    #[inline]
    fn write(&mut self, _accesses: usize, address: usize, word: u64) -> Result<(), AbortReason> {
        self.scheme.write(&self.snapshot, address, word)
    }

    fn validate<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        self.scheme.validate(&self.snapshot, tx, tables)
    }

    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        self.scheme.commit_timestamp(&self.snapshot, tx, tables, bounds)
    }

    #[inline]
    fn snapshot(&mut self) -> Option<&mut Snapshot> {
        Some(&mut self.snapshot)
    }

    fn finish<R: RowKind>(&mut self, tables: &[Table<R>]) {
        self.snapshot.collect(tables);
    }
}

/// The collection of stale secondary entries of rows of `tables`
/// (`VersionStore::collect`): removes an entry from its index under the
/// row's lock, or declines while a writer holds the row (it may be giving
/// the row that key back) or once the row is unlinked (its unlink removes
/// it).
pub(crate) fn unindex_stale<R: RowKind>(tables: &[Table<R>]) -> impl FnMut(usize, &StaleEntry) -> bool + '_ {
    move |address, stale| {
        // SAFETY: the version store calls this under the lock of the row's
        // chain, which exists until the row's unlink forgets it; the row is
        // freed only after that (`Concurrency::unlinked`).
        let row = unsafe { &*(address as *const R) };
        let Some(word) = row.try_lock() else { return false };
        let removed = word != REMOVED;
        if removed {
            tables[stale.table as usize].remove_secondary(stale.position, &stale.index_key, row);
        }
        row.unlock();
        removed
    }
}
