//! Older versions of rows for the multi-version protocols (`cc=hekaton`):
//! snapshots, the version chains beside the rows, and their collection.
//!
//! # Timestamps and snapshots
//!
//! One engine-wide clock orders commits: a writing transaction picks its
//! TID after it has locked its write set (Silo's rule and the durability
//! floors, and above the clock), then raises the clock to it. A transaction
//! starts by taking the clock as its snapshot `s`. Whatever committed with
//! a TID at most `s` had all its rows locked before `s` was taken, so a
//! read either finds the row's new version or waits for its lock; whatever
//! commits later gets a TID above `s`. So the versions with TIDs up to `s`
//! form a consistent snapshot.
//!
//! # Versions
//!
//! A row keeps only its newest version in its storage (DRAM record or Zen
//! tuple). When a commit replaces it (under the row's lock), the version
//! replaced goes into the row's chain here with its validity interval
//! `[wts, end)`, `end` being the new TID. A brand-new row's first version
//! replaces nothing (a placeholder that never held a value is not kept): a
//! read at a snapshot older than every version of the row finds no version
//! and sees the key absent, which it was. A read at snapshot `s` takes the
//! row's current version when its TID is at most `s`, else the chain's
//! version valid at `s`.
//!
//! Chains live in sharded maps keyed by the row's address; a row's chain is
//! dropped when reclamation unlinks the row (the address may be reused), and
//! reclamation unlinks a deleted row only once no snapshot is older than its
//! delete.
//!
//! # Snapshots at the oldest running snapshot (`zen+`)
//!
//! `zen+` reads a read-only transaction at the oldest snapshot any
//! transaction holds (the paper's "global minimum Tx-CTS − 1": our
//! snapshots include their own value, and a Hekaton writer commits above
//! every announced snapshot). Such a snapshot may lie below what a
//! collector already took as its horizon, so collectors publish their
//! horizon (`collected`, a maximum) *before* dropping anything and re-read
//! the announcements after publishing; a reader announces its candidate
//! and then checks that no collector published a horizon above it
//! ([`VersionStore::begin_oldest`]). Either the collector's re-read sees
//! the reader, or the reader's check sees the collector's horizon and it
//! retries higher. Reclamation of deleted rows uses the same horizon.
//!
//! # Collection
//!
//! Each worker announces its snapshot while a transaction runs. A version
//! whose `end` is at most the oldest announced snapshot (or the clock, with
//! none announced) is needed by nobody; the worker that made it drops it
//! later. The announcement closes the race with a collector by re-reading
//! the clock after publishing: a collector reads the clock before the
//! announcements, so it either sees this snapshot or read a clock value no
//! larger than it.
//!
//! Explained in docs/concurrency.md (the multi-version protocols) and
//! docs/engines/zen-plus.md.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// Shards of the chain maps.
const SHARDS: usize = 64;

/// A worker with no transaction announces this.
const IDLE: u64 = u64::MAX;

/// One older version of a row.
struct Version {
    wts: u64,
    /// The TID of the version that replaced it.
    end: u64,
    /// `None`: the row was absent (deleted) in this version.
    value: Option<Box<[u8]>>,
}

/// A secondary-index entry of a row that a commit at `end` left stale
/// (the row's new version no longer carries that key), kept in the index
/// until no snapshot older than `end` is left (module docs).
pub(crate) struct StaleEntry {
    /// The row's table.
    pub(crate) table: u32,
    /// The secondary index.
    pub(crate) position: u32,
    /// The entry's composite key.
    pub(crate) index_key: Box<[u8]>,
    end: u64,
}

/// A row's older versions and stale secondary entries.
#[derive(Default)]
struct Chain {
    versions: Vec<Version>,
    stale: Vec<StaleEntry>,
}

impl Chain {
    fn is_empty(&self) -> bool {
        self.versions.is_empty() && self.stale.is_empty()
    }
}

/// Chains by row address.
type Chains = HashMap<usize, Chain>;

/// The version store of one engine.
pub(crate) struct VersionStore {
    clock: CachePadded<AtomicU64>,
    /// The largest horizon a collector used (module docs).
    collected: CachePadded<AtomicU64>,
    snapshots: Box<[CachePadded<AtomicU64>]>,
    shards: Box<[Mutex<Chains>]>,
}

/// What a snapshot read of a row's chain found.
pub(crate) enum OlderVersion {
    /// The version valid at the snapshot: its TID, and whether it held a
    /// value (copied into the caller's buffer).
    Found { wts: u64, present: bool },
    /// No version of the row is as old as the snapshot: the key was absent.
    None,
}

/// A worker's versions waiting to be dropped: (row address, end).
#[derive(Default)]
pub(crate) struct VersionQueue {
    queued: VecDeque<(usize, u64)>,
}

fn shard_of(address: usize) -> usize {
    ((address as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS
}

impl VersionStore {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            clock: CachePadded::new(AtomicU64::new(0)),
            collected: CachePadded::new(AtomicU64::new(0)),
            snapshots: (0..workers).map(|_| CachePadded::new(AtomicU64::new(IDLE))).collect(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// Announces and returns `worker`'s snapshot (module docs).
    pub(crate) fn begin(&self, worker: usize) -> u64 {
        loop {
            let snapshot = self.clock.load(Ordering::SeqCst);
            self.snapshots[worker].store(snapshot, Ordering::SeqCst);
            if self.clock.load(Ordering::SeqCst) == snapshot {
                return snapshot;
            }
        }
    }

    /// Announces and returns a snapshot for `worker` at the oldest snapshot
    /// any transaction holds, or the clock if none (`zen+`'s read-only
    /// transactions; module docs). Every commit at or below it has
    /// installed all its rows, and every writer still running commits above
    /// it.
    pub(crate) fn begin_oldest(&self, worker: usize) -> u64 {
        self.snapshots[worker].store(IDLE, Ordering::SeqCst);
        loop {
            // Not below a published horizon: what a collector dropped is
            // older than it.
            let snapshot = self.oldest_snapshot().max(self.collected.load(Ordering::SeqCst));
            self.snapshots[worker].store(snapshot, Ordering::SeqCst);
            // IMPORTANT: after the announcement (module docs).
            if self.collected.load(Ordering::SeqCst) <= snapshot {
                return snapshot;
            }
        }
    }

    /// The horizon below which versions (and deleted rows) may go: the
    /// oldest snapshot, published before it is used and checked again
    /// after (module docs).
    pub(crate) fn collection_horizon(&self) -> u64 {
        let oldest = self.oldest_snapshot();
        self.collected.fetch_max(oldest, Ordering::SeqCst);
        // IMPORTANT: a reader that announced before our publication but
        // after our first read is seen now.
        oldest.min(self.oldest_snapshot())
    }

    /// A new timestamp for `worker`'s transaction, above every commit and
    /// timestamp so far and at least `floor`, announced as its snapshot
    /// (the timestamp-ordering protocols read and commit at it).
    pub(crate) fn begin_timestamp(&self, worker: usize, floor: u64) -> u64 {
        // Announce a lower bound first, so a collector that misses the
        // final value still keeps what this transaction reads.
        let snapshot = self.begin(worker);
        // IMPORTANT: one compare-exchange takes the timestamp and raises
        // the clock to it, so no two transactions share a timestamp. (An
        // increment followed by raising the clock to the floor let two
        // workers that crossed an epoch's floor together both take the
        // floor; equal timestamps pass each other's read-timestamp checks,
        // and a reader then saw half of a writer's commit.)
        let mut clock = self.clock.load(Ordering::SeqCst);
        let timestamp = loop {
            let timestamp = (clock + 1).max(floor);
            match self.clock.compare_exchange_weak(clock, timestamp, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break timestamp,
                Err(actual) => clock = actual,
            }
        };
        debug_assert!(timestamp > snapshot);
        self.snapshots[worker].store(timestamp, Ordering::SeqCst);
        timestamp
    }

    /// `worker` has no transaction running.
    pub(crate) fn end(&self, worker: usize) {
        self.snapshots[worker].store(IDLE, Ordering::Release);
    }

    /// A TID above every commit so far and at least `tid`; raises the clock
    /// to it (the caller holds its write set's locks).
    pub(crate) fn commit_tid(&self, tid: u64) -> u64 {
        let above_clock = self.clock.load(Ordering::SeqCst) + 1;
        let tid = tid.max(above_clock);
        self.clock.fetch_max(tid, Ordering::SeqCst);
        tid
    }

    /// Raises the clock to `tid`, a TID chosen earlier by
    /// [`VersionStore::commit_tid`] (the caller holds its write set's
    /// locks).
    pub(crate) fn raise_clock(&self, tid: u64) {
        self.clock.fetch_max(tid, Ordering::SeqCst);
    }

    /// The oldest snapshot any transaction may still read at.
    pub(crate) fn oldest_snapshot(&self) -> u64 {
        // IMPORTANT: the clock first (module docs).
        let clock = self.clock.load(Ordering::SeqCst);
        self.snapshots.iter().map(|snapshot| snapshot.load(Ordering::SeqCst)).fold(clock, u64::min)
    }

    /// Whether a transaction other than `worker`'s holds a snapshot below
    /// `tid`, a TID the clock was already raised to: only such a snapshot
    /// can read a version that a commit at `tid` replaces. A snapshot
    /// announced after the raise is at or above `tid` (`begin` re-reads the
    /// clock after announcing, and retries if it moved), and one announced
    /// before it is seen here.
    pub(crate) fn other_snapshot_below(&self, worker: usize, tid: u64) -> bool {
        debug_assert!(self.clock.load(Ordering::SeqCst) >= tid);
        self.snapshots
            .iter()
            .enumerate()
            .any(|(other, snapshot)| other != worker && snapshot.load(Ordering::SeqCst) < tid)
    }

    /// Keeps the version a commit at `end` replaces in the row at
    /// `address` (the caller holds the row's lock): its TID `wts` and its
    /// value (`None`: absent). A placeholder that never held a value
    /// (`wts == 0`) is not kept.
    pub(crate) fn preserve(&self, queue: &mut VersionQueue, address: usize, wts: u64, value: Option<&[u8]>, end: u64) {
        if wts == 0 && value.is_none() {
            return;
        }
        debug_assert!(wts < end);
        let version = Version { wts, end, value: value.map(Box::from) };
        self.shards[shard_of(address)].lock().entry(address).or_default().versions.push(version);
        queue.queued.push_back((address, end));
    }

    /// Keeps the secondary entry `index_key` of index `position` of the
    /// row at `address` (of table `table`), which the commit at `end` left
    /// stale, until no snapshot older than `end` remains (the caller holds
    /// the row's lock). A snapshot older than `end` reads a version that
    /// carries the key and must find the row under it.
    pub(crate) fn defer_unindex(
        &self,
        queue: &mut VersionQueue,
        address: usize,
        (table, position): (u32, u32),
        index_key: Vec<u8>,
        end: u64,
    ) {
        let entry = StaleEntry { table, position, index_key: index_key.into_boxed_slice(), end };
        self.shards[shard_of(address)].lock().entry(address).or_default().stale.push(entry);
        queue.queued.push_back((address, end));
    }

    /// The row at `address` carries `index_key` of index `position` again
    /// (the caller holds its lock and commits a version with that key): the
    /// entry is no longer stale.
    pub(crate) fn cancel_unindex(&self, address: usize, position: u32, index_key: &[u8]) {
        let mut shard = self.shards[shard_of(address)].lock();
        if let Some(chain) = shard.get_mut(&address) {
            chain.stale.retain(|stale| stale.position != position || &*stale.index_key != index_key);
            if chain.is_empty() {
                shard.remove(&address);
            }
        }
    }

    /// The version of the row at `address` valid at `snapshot`, its value
    /// copied into `out`.
    pub(crate) fn read(&self, address: usize, snapshot: u64, out: &mut Vec<u8>) -> OlderVersion {
        out.clear();
        let shard = self.shards[shard_of(address)].lock();
        let Some(chain) = shard.get(&address) else { return OlderVersion::None };
        match chain.versions.iter().find(|version| version.wts <= snapshot && snapshot < version.end) {
            Some(version) => {
                if let Some(value) = &version.value {
                    out.extend_from_slice(value);
                }
                OlderVersion::Found { wts: version.wts, present: version.value.is_some() }
            }
            None => OlderVersion::None,
        }
    }

    /// Drops the chain of a row that reclamation unlinked; `unindex`
    /// removes each of its stale secondary entries (the row is `REMOVED`).
    pub(crate) fn forget(&self, address: usize, unindex: &mut dyn FnMut(&StaleEntry)) {
        let mut shard = self.shards[shard_of(address)].lock();
        if let Some(chain) = shard.remove(&address) {
            chain.stale.iter().for_each(&mut *unindex);
        }
    }

    /// Drops the versions of `queue` that no snapshot can read any more,
    /// and asks `unindex` to remove the stale secondary entries no
    /// snapshot can need (with the row's address, under the chain's shard
    /// lock, so the row is alive: it is unlinked only after `forget`).
    /// `unindex` returns false when it cannot now (the row is locked by a
    /// writer, which may be giving it the key back): the entry is tried
    /// again at a later collection.
    pub(crate) fn collect(&self, queue: &mut VersionQueue, unindex: &mut dyn FnMut(usize, &StaleEntry) -> bool) {
        if queue.queued.is_empty() {
            return;
        }
        let oldest = self.collection_horizon();
        let mut retry = Vec::new();
        while let Some(&(address, end)) = queue.queued.front() {
            if end > oldest {
                break;
            }
            queue.queued.pop_front();
            let mut shard = self.shards[shard_of(address)].lock();
            if let Some(chain) = shard.get_mut(&address) {
                chain.versions.retain(|version| version.end > oldest);
                chain.stale.retain(|stale| stale.end > oldest || !unindex(address, stale));
                if chain.stale.iter().any(|stale| stale.end <= oldest) {
                    retry.push((address, end));
                }
                if chain.is_empty() {
                    shard.remove(&address);
                }
            }
        }
        queue.queued.extend(retry);
    }

    /// Drops every version no snapshot can read any more, whoever kept it
    /// (the exclusive stage's maintenance, with no other transaction
    /// running); the keepers' queues then name versions that are gone,
    /// which their collection skips.
    pub(crate) fn collect_all(&self, unindex: &mut dyn FnMut(usize, &StaleEntry) -> bool) -> usize {
        let oldest = self.collection_horizon();
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.retain(|&address, chain| {
                let before = chain.versions.len();
                chain.versions.retain(|version| version.end > oldest);
                dropped += before - chain.versions.len();
                chain.stale.retain(|stale| stale.end > oldest || !unindex(address, stale));
                !chain.is_empty()
            });
        }
        dropped
    }

    /// Versions kept (statistics, tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().values().map(|chain| chain.versions.len()).sum::<usize>()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_the_version_valid_at_it() {
        let store = VersionStore::new(2);
        let mut queue = VersionQueue::default();
        let mut out = Vec::new();
        // Row 0x100: v1 at 5, replaced at 9 by v2, deleted at 12.
        store.preserve(&mut queue, 0x100, 5, Some(b"v1"), 9);
        store.preserve(&mut queue, 0x100, 9, Some(b"v2"), 12);
        assert!(matches!(store.read(0x100, 4, &mut out), OlderVersion::None), "older than every version");
        assert!(matches!(store.read(0x100, 5, &mut out), OlderVersion::Found { wts: 5, present: true }));
        assert_eq!(out, b"v1");
        assert!(matches!(store.read(0x100, 11, &mut out), OlderVersion::Found { wts: 9, present: true }));
        assert_eq!(out, b"v2");
        // A never-written placeholder is not kept; a deleted version is.
        store.preserve(&mut queue, 0x200, 0, None, 7);
        assert!(matches!(store.read(0x200, 6, &mut out), OlderVersion::None));
        store.preserve(&mut queue, 0x300, 3, None, 8);
        assert!(matches!(store.read(0x300, 6, &mut out), OlderVersion::Found { wts: 3, present: false }));
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn collection_keeps_what_an_announced_snapshot_needs() {
        let store = VersionStore::new(2);
        let mut queue = VersionQueue::default();
        let mut out = Vec::new();
        let old = store.begin(0);
        let tid = store.commit_tid(1);
        store.preserve(&mut queue, 0x100, 0, Some(b"a"), tid);
        let newer = store.commit_tid(1);
        store.preserve(&mut queue, 0x100, tid, Some(b"b"), newer);
        store.collect(&mut queue, &mut |_, _| true);
        // Worker 0's snapshot predates both replacements: both stay.
        assert_eq!(store.len(), 2);
        assert!(matches!(store.read(0x100, old, &mut out), OlderVersion::Found { present: true, .. }));
        store.end(0);
        store.collect(&mut queue, &mut |_, _| true);
        assert_eq!(store.len(), 0, "no snapshot left that needs them");
        store.preserve(&mut queue, 0x400, 2, Some(b"x"), newer + 1);
        store.forget(0x400, &mut |_| {});
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn commit_tids_grow_past_the_clock_and_the_floor() {
        let store = VersionStore::new(1);
        let first = store.commit_tid(10);
        assert_eq!(first, 10);
        assert_eq!(store.commit_tid(3), 11, "above every earlier commit");
        assert_eq!(store.begin(0), 11);
    }
}

#[cfg(test)]
mod oldest_tests {
    use super::*;

    /// A snapshot at the oldest running one reads what that snapshot
    /// reads, and collection keeps it for as long as it is announced.
    #[test]
    fn an_oldest_snapshot_keeps_its_versions() {
        let store = VersionStore::new(3);
        let mut queue = VersionQueue::default();
        let mut out = Vec::new();
        let first = store.commit_tid(5);
        let writer = store.begin(0);
        assert_eq!(writer, first);
        let replaced = store.commit_tid(1);
        store.preserve(&mut queue, 0x100, first, Some(b"old"), replaced);
        // Worker 0 still holds `first`: a read-only snapshot lies there,
        // below the commit that replaced the row.
        let reader = store.begin_oldest(1);
        assert_eq!(reader, first);
        assert!(reader < replaced);
        store.end(0);
        store.collect(&mut queue, &mut |_, _| true);
        assert!(
            matches!(store.read(0x100, reader, &mut out), OlderVersion::Found { wts, present: true } if wts == first)
        );
        assert_eq!(out, b"old");
        assert_eq!(store.collect_all(&mut |_, _| true), 0, "the reader still needs it");
        store.end(1);
        assert_eq!(store.collect_all(&mut |_, _| true), 1);
        assert_eq!(store.len(), 0);
        // With nobody announced, the oldest snapshot is the clock.
        assert_eq!(store.begin_oldest(2), replaced);
    }

    /// A collector that published a horizon above a candidate makes the
    /// reader retry at or above it, so no reader starts below what was
    /// dropped.
    #[test]
    fn a_reader_never_starts_below_a_published_horizon() {
        let store = VersionStore::new(2);
        store.commit_tid(10);
        let horizon = store.collection_horizon();
        assert_eq!(horizon, 10);
        // An announcement below the published horizon (a transaction that
        // began earlier and has not ended) does not pull a new reader down.
        store.snapshots[0].store(3, Ordering::SeqCst);
        assert_eq!(store.begin_oldest(1), 10);
        store.end(1);
        assert_eq!(store.collection_horizon(), 3, "the announced 3 is still protected from now on");
    }
}

#[cfg(test)]
mod timestamp_tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Timestamp ordering needs every transaction's timestamp to be its
    /// own: a reader and a writer at the same timestamp each pass the
    /// other's check (`rts > ts` is false for equal values), so the reader
    /// can see half of the writer's commit. The floor (the first TID of the
    /// current epoch) jumps above the clock at every epoch; two workers
    /// taking timestamps across such jumps must still get distinct ones.
    #[test]
    fn timestamps_stay_unique_when_the_floor_jumps_above_the_clock() {
        const TAKEN_PER_WORKER: u64 = 400_000;
        let store = VersionStore::new(2);
        // The floor both workers see; worker 0 raises it far above the
        // clock every 16 timestamps, as a new epoch does.
        let floor = AtomicU64::new(0);
        let taken: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..2)
                .map(|worker| {
                    let (store, floor) = (&store, &floor);
                    scope.spawn(move || {
                        let mut taken = Vec::with_capacity(TAKEN_PER_WORKER as usize);
                        for n in 0..TAKEN_PER_WORKER {
                            if worker == 0 && n % 16 == 0 {
                                floor.store((n + 1) << 24, Ordering::SeqCst);
                            }
                            taken.push(store.begin_timestamp(worker, floor.load(Ordering::SeqCst)));
                            store.end(worker);
                        }
                        taken
                    })
                })
                .collect();
            workers.into_iter().map(|worker| worker.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = taken.concat();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "{} timestamps were handed out twice", count - all.len());
    }

    #[test]
    fn stale_entries_stay_while_an_older_snapshot_runs() {
        let store = VersionStore::new(2);
        let mut queue = VersionQueue::default();
        let removed = std::cell::RefCell::new(Vec::new());
        let mut unindex = |address: usize, stale: &StaleEntry| {
            removed.borrow_mut().push((address, stale.index_key.to_vec()));
            true
        };
        let old = store.begin(0);
        let tid = store.commit_tid(1);
        assert!(tid > old);
        store.defer_unindex(&mut queue, 0x100, (0, 0), b"g2".to_vec(), tid);
        store.defer_unindex(&mut queue, 0x200, (0, 0), b"g3".to_vec(), tid);
        store.collect(&mut queue, &mut unindex);
        assert!(removed.borrow().is_empty(), "worker 0's snapshot predates the commit");
        // The row at 0x200 takes its key back: nothing to remove there.
        store.cancel_unindex(0x200, 0, b"g3");
        store.end(0);
        // A writer holds the row: tried again later.
        store.collect(&mut queue, &mut |_, _| false);
        assert!(removed.borrow().is_empty());
        store.collect(&mut queue, &mut unindex);
        assert_eq!(*removed.borrow(), vec![(0x100, b"g2".to_vec())]);
        // An unlinked row's stale entries go with its chain.
        let next = store.commit_tid(1);
        store.defer_unindex(&mut queue, 0x300, (0, 1), b"g1".to_vec(), next);
        let mut forgotten = Vec::new();
        store.forget(0x300, &mut |stale| forgotten.push(stale.position));
        assert_eq!(forgotten, vec![1]);
        store.collect(&mut queue, &mut unindex);
        assert_eq!(removed.borrow().len(), 1, "nothing left to remove");
    }
}
