//! Silo-style optimistic concurrency control, written once over any row
//! kind (`OccTx`). The DRAM engines' worker (`engines::dram::OccWorker`:
//! silo, group-commit and the DBXN family, which differ only in their
//! durability policy) and Zen's worker (its Met-Cache rows, its own persist
//! step) both run it.
//!
//! # The body of a transaction
//!
//! * A point access looks the key up with get-or-insert (DBX's
//!   get-with-insert: a read of an absent key inserts a placeholder, so the
//!   read and a later insert of the key conflict on one row), then reads the
//!   row stably (the storage's seqlock read) and remembers (row, word) in
//!   the read set. A row met in the [`REMOVED`] state was unlinked by
//!   reclamation: the lookup is repeated.
//! * Writes are buffered in the write set, whose keys and values live in
//!   one per-worker arena (no allocation per write once warm).
//!   `update_with` copies the row into the arena once and lets the caller
//!   change bytes in place.
//! * A scan walks the index in order and reads every row it passes stably,
//!   in one pass: each one, present or absent, enters the read set, and the
//!   scan stops after `limit` *delivered* rows. Every leaf examined enters
//!   the node set with its version. So a row the scan counted can never be
//!   dropped later by a concurrent delete (the delete changes a word the
//!   scan read), a row passed as absent cannot appear unseen (its word), and
//!   a key inserted into the examined interval changes a leaf version. A
//!   secondary scan skips entries whose row no longer has that secondary key
//!   and merges the transaction's own rows whose secondary key is new, in
//!   scan order.
//!
//! # Commit (Silo §4.4; DBX's software path)
//! 1. lock the write set in a global order (row address);
//! 2. read the global epoch (the serialization point);
//! 3. validate the read set (version unchanged, not locked by another) and
//!    the scanned leaves (phantoms);
//! 4. pick a TID above everything read or written and in the current epoch;
//! 5. hand the redo record to the log policy;
//! 6. install the values in place and release each lock with the new
//!    version; maintain secondary indexes under the locks.
//!
//! Where step 5 sits is the policy's `durability::CommitStage`: before the install
//! (silo, group-commit), after the install but before the locks are released
//! (dbx-naive: a synchronous log inside the commit region, DBXN Fig. 5(a)),
//! or after the locks are released with the UNPERSISTED bit set (DBXN's
//! parity versions), followed by clearing the bit. A read that sees
//! UNPERSISTED puts the word *without* the bit (the paper's "next even
//! version") in the read set, so it validates only once the writer's log is
//! durable and the bit is cleared.

use crate::cc::concurrency::Concurrency;
use crate::cc::hybrid::{Hybrid, PathState, TxPath, LINES_PER_ACCESS};
use crate::cc::lock_table::HeldLocks;
use crate::cc::position_index::PositionIndex;
use crate::cc::protocol::CcProtocol;
use crate::cc::versions::{OlderVersion, StaleEntry, VersionQueue};
use crate::engine::{ScanRequest, WriteOp};
use crate::error::{AbortReason, DbError, TxError, TxResult};
use crate::index::{LeafChange, LeafRef, ScanDirection};
use crate::schema::TableId;
use crate::storage::record::{self, RowKind, ABSENT, LOCKED, REMOVED, UNPERSISTED};
use crate::storage::table::{self, RowReclaimer, ScannedLeaf, SecondaryAdded, Table};
use std::cmp::Ordering as KeyOrdering;
use std::ptr::NonNull;
use std::sync::Arc;

/// How long a committing writer spins for a row lock before aborting.
const LOCK_SPINS: u32 = 256;

/// Lookups repeated after meeting an unlinked row before giving up.
const RELOOKUPS: u32 = 64;

/// One buffered write; its key and value live in the [`WriteSet`]'s arena.
pub struct WriteEntry<R> {
    /// Table.
    pub table: TableId,
    row: NonNull<R>,
    key_at: u32,
    key_len: u32,
    /// (offset, length) of the new value in the arena; `None` deletes.
    value: Option<(u32, u32)>,
    /// Whether the commit adds secondary-index entries for this row (a new
    /// row, or a secondary key changed); see `table::secondaries_to_index`.
    pub index_secondaries: bool,
    /// The word seen when locking (valid between lock and install).
    pub locked_word: u64,
}

impl<R> WriteEntry<R> {
    /// The row.
    #[inline]
    pub fn row(&self) -> &R {
        // SAFETY: a buffered row is alive while the transaction runs: its
        // worker is announced in an epoch, and rows are freed only after the
        // horizon passed their unlink.
        unsafe { self.row.as_ref() }
    }

    /// Whether this write deletes.
    pub fn is_delete(&self) -> bool {
        self.value.is_none()
    }

    /// Whether the new value was written to the worker's NVM heap during
    /// the transaction and left the arena (`zen+`'s exclusive stage).
    pub fn is_spilled(&self) -> bool {
        self.value.is_some_and(|(at, _)| at == SPILLED)
    }
}

/// Arena offset of a value that left the arena ([`WriteSet::spill`]).
const SPILLED: u32 = u32::MAX;

/// A buffered write's new value as the commit sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteValue<'a> {
    /// The value, in the arena.
    Bytes(&'a [u8]),
    /// A delete.
    Delete,
    /// A value of this length already written to the heap by the worker
    /// (`zen+`'s exclusive stage); the worker knows where.
    Spilled(usize),
}

/// One write as the log and the persist steps see it.
#[derive(Clone, Copy, Debug)]
pub struct WriteView<'a> {
    /// Table.
    pub table: TableId,
    /// Primary key.
    pub key: &'a [u8],
    /// New value, `None` for a delete.
    pub value: Option<&'a [u8]>,
}

/// A transaction's buffered writes: entries plus one byte arena for their
/// keys and values, both reused across transactions.
pub struct WriteSet<R> {
    entries: Vec<WriteEntry<R>>,
    arena: Vec<u8>,
    positions: PositionIndex,
}

impl<R> Default for WriteSet<R> {
    fn default() -> Self {
        Self { entries: Vec::new(), arena: Vec::new(), positions: PositionIndex::default() }
    }
}

fn write_row_of<R>(entry: &WriteEntry<R>) -> *const R {
    entry.row.as_ptr()
}

impl<R> WriteSet<R> {
    /// Forgets every write (keeps the buffers).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.arena.clear();
        self.positions.clear();
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is written.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries.
    pub fn entries(&self) -> &[WriteEntry<R>] {
        &self.entries
    }

    /// Position of `row`'s write.
    #[inline]
    pub fn find(&self, row: *const R) -> Option<usize> {
        self.positions.find(&self.entries, write_row_of, row)
    }

    fn stash(&mut self, bytes: &[u8]) -> (u32, u32) {
        let at = self.arena.len();
        self.arena.extend_from_slice(bytes);
        (u32::try_from(at).expect("a transaction's writes stay below 4 GiB"), bytes.len() as u32)
    }

    /// Buffers a write of a row not yet in the set.
    pub fn push(&mut self, table: TableId, row: &R, key: &[u8], value: Option<&[u8]>, index_secondaries: bool) {
        debug_assert!(self.find(row).is_none());
        let (key_at, key_len) = self.stash(key);
        let value = value.map(|value| self.stash(value));
        self.entries.push(WriteEntry {
            table,
            row: NonNull::from(row),
            key_at,
            key_len,
            value,
            index_secondaries,
            locked_word: 0,
        });
        self.positions.pushed(&self.entries, write_row_of);
    }

    /// Replaces write `index`'s value (in place when the length is equal).
    pub fn set_value(&mut self, index: usize, value: Option<&[u8]>) {
        let new = match (self.entries[index].value, value) {
            (Some((at, len)), Some(value)) if at != SPILLED && len as usize == value.len() => {
                self.arena[at as usize..(at + len) as usize].copy_from_slice(value);
                Some((at, len))
            }
            (_, Some(value)) => Some(self.stash(value)),
            (_, None) => None,
        };
        self.entries[index].value = new;
    }

    /// Write `index`'s key.
    #[inline]
    pub fn key(&self, index: usize) -> &[u8] {
        let entry = &self.entries[index];
        &self.arena[entry.key_at as usize..(entry.key_at + entry.key_len) as usize]
    }

    /// Write `index`'s new value (`None`: a delete). Only engines that
    /// never spill call it (a spilled value is not in the arena).
    #[inline]
    pub fn value(&self, index: usize) -> Option<&[u8]> {
        let (at, len) = self.entries[index].value?;
        debug_assert_ne!(at, SPILLED, "a spilled value is read through WriteSet::value_state");
        Some(&self.arena[at as usize..(at + len) as usize])
    }

    /// Write `index`'s new value, spilled or not.
    #[inline]
    pub fn value_state(&self, index: usize) -> WriteValue<'_> {
        match self.entries[index].value {
            None => WriteValue::Delete,
            Some((SPILLED, len)) => WriteValue::Spilled(len as usize),
            Some((at, len)) => WriteValue::Bytes(&self.arena[at as usize..(at + len) as usize]),
        }
    }

    /// Write `index`'s new value, to change in place (not spilled).
    pub fn value_mut(&mut self, index: usize) -> Option<&mut [u8]> {
        let (at, len) = self.entries[index].value?;
        debug_assert_ne!(at, SPILLED, "a spilled value is brought back before it changes");
        Some(&mut self.arena[at as usize..(at + len) as usize])
    }

    /// Bytes the arena holds (keys and values not spilled).
    pub fn arena_bytes(&self) -> usize {
        self.arena.len()
    }

    /// Marks write `index`'s value as written to the heap by the caller
    /// (`zen+`'s exclusive stage): its bytes are garbage in the arena until
    /// the next [`WriteSet::compact`]. Reads of it then go through the
    /// caller; a later write of the row brings a value back.
    pub fn spill(&mut self, index: usize) {
        if let Some((at, _)) = &mut self.entries[index].value {
            *at = SPILLED;
        }
    }

    /// Rebuilds the arena without the spilled values.
    pub fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() / 2);
        for entry in &mut self.entries {
            let key = entry.key_at as usize..(entry.key_at + entry.key_len) as usize;
            entry.key_at = arena.len() as u32;
            arena.extend_from_slice(&self.arena[key]);
            if let Some((at, len)) = &mut entry.value {
                if *at != SPILLED {
                    let value = *at as usize..(*at + *len) as usize;
                    *at = arena.len() as u32;
                    arena.extend_from_slice(&self.arena[value]);
                }
            }
        }
        self.arena = arena;
    }

    /// Write `index` as the log sees it.
    #[inline]
    pub fn view(&self, index: usize) -> WriteView<'_> {
        WriteView { table: self.entries[index].table, key: self.key(index), value: self.value(index) }
    }

    /// Every write, in the set's order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = WriteView<'_>> + '_ {
        (0..self.entries.len()).map(|index| self.view(index))
    }

    /// Orders the writes by row address (the lock order).
    pub fn sort_by_row(&mut self) {
        self.entries.sort_unstable_by_key(|entry| entry.row.as_ptr() as usize);
        self.positions.rebuild(&self.entries, write_row_of);
    }

    /// Records the word seen when write `index`'s row was locked.
    pub fn set_locked_word(&mut self, index: usize, word: u64) {
        self.entries[index].locked_word = word;
    }
}

/// One read: the row and the word seen (unlocked, without UNPERSISTED).
pub(crate) struct ReadEntry<R> {
    row: *const R,
    word: u64,
}

fn read_row_of<R>(entry: &ReadEntry<R>) -> *const R {
    entry.row
}

/// A secondary entry a commit added before its TID (multi-version
/// protocols; `OccTx::add_secondaries`).
struct AddedSecondary {
    /// The write it belongs to.
    write: usize,
    position: u32,
    composite: Vec<u8>,
    /// Whether the entry is new; `false`: it was there already (stale from
    /// an older version of the row, which takes it back).
    inserted: bool,
    /// The leaf it went into, when the insert reported it.
    leaf: Option<LeafRef>,
}

/// A scanned leaf of a table.
pub(crate) struct LeafEntry {
    table: TableId,
    leaf: ScannedLeaf,
}

/// How a storage reads a row stably.
pub(crate) trait RowStore<R: RowKind> {
    /// Copies the row's value into `out` (cleared; left empty when absent)
    /// and returns the unlocked word it belongs to.
    fn read(&self, row: &R, out: &mut Vec<u8>) -> Result<u64, AbortReason>;

    /// Copies this transaction's own new value of `row`, which the worker
    /// spilled to the heap ([`WriteSet::spill`]), into `out` (cleared).
    /// Only a storage that spills is ever asked.
    fn read_spilled(&self, row: &R, out: &mut Vec<u8>) {
        let _ = (row, out);
        unreachable!("only zen+ spills writes, and its store reads them back");
    }
}

/// What a read of a row found.
enum Seen {
    Present,
    Absent,
    /// Unlinked by reclamation: look the key up again.
    Removed,
}

/// One worker's transaction attempt over rows `R`: Silo's OCC state
/// (read, write and node sets), plus the locks of the two-phase-locking
/// protocols (`cc::protocol`), which take a lock before every read and
/// write of the body and hold it to the end of the attempt.
pub(crate) struct OccTx<R: RowKind> {
    /// The engine's protocol and its shared state.
    cc: Arc<Concurrency>,
    /// Locks held (two-phase-locking protocols).
    held: HeldLocks,
    worker: usize,
    /// The attempt's snapshot (multi-version protocols).
    snapshot: u64,
    /// A read-only attempt at the oldest running snapshot (`zen+`): its
    /// reads form a snapshot below every running writer's commit, so it
    /// commits without validation.
    snapshot_read_only: bool,
    /// Versions this worker kept, until no snapshot needs them.
    version_queue: VersionQueue,
    reads: Vec<ReadEntry<R>>,
    read_positions: PositionIndex,
    /// The buffered writes.
    pub(crate) writes: WriteSet<R>,
    leaves: Vec<LeafEntry>,
    /// Placeholders this attempt inserted (reclaimed if left absent), with
    /// the leaf each went into (timestamp ordering checks its range).
    created: Vec<(TableId, NonNull<R>, Option<LeafRef>)>,
    /// Multi-version protocols: the secondary entries of the write set's
    /// new keys, added once the write set is locked (before the commit's
    /// TID exists), so a snapshot that can see the commit finds them.
    added_secondaries: Vec<AddedSecondary>,
    scratch: Vec<u8>,
    /// This worker's reclamation of absent rows and replaced values.
    pub(crate) reclaimer: RowReclaimer<R>,
    /// The hybrid engines' path of this attempt (unused elsewhere).
    pub(crate) path: PathState,
}

// SAFETY: the raw row pointers refer to rows owned by tables that outlive
// the worker (the engine holds them in an Arc) and are freed only through
// the epochs, which the worker's announcements hold back.
unsafe impl<R: RowKind> Send for OccTx<R> {}

impl<R: RowKind> OccTx<R> {
    /// The state of worker `worker` under `cc`.
    pub(crate) fn new(cc: Arc<Concurrency>, worker: usize) -> Self {
        Self {
            cc,
            held: HeldLocks::new(worker),
            worker,
            snapshot: u64::MAX,
            snapshot_read_only: false,
            version_queue: VersionQueue::default(),
            reads: Vec::new(),
            read_positions: PositionIndex::default(),
            writes: WriteSet::default(),
            leaves: Vec::new(),
            created: Vec::new(),
            added_secondaries: Vec::new(),
            scratch: Vec::new(),
            reclaimer: RowReclaimer::default(),
            path: PathState::default(),
        }
    }
}

/// The table `id`, or a typed error.
#[inline]
pub(crate) fn table_of<R: RowKind>(tables: &[Table<R>], id: TableId) -> TxResult<&Table<R>> {
    tables.get(id.0 as usize).ok_or_else(|| TxError::Db(DbError::UnknownTable(format!("#{}", id.0))))
}

impl<R: RowKind> OccTx<R> {
    /// Starts attempt number `attempt` (1 for a new transaction) in the
    /// worker's announced `epoch`.
    pub(crate) fn begin(&mut self, attempt: u32, epoch: u64) {
        self.clear();
        self.snapshot_read_only = false;
        if let Some(locks) = self.cc.locks() {
            locks.begin(&self.held, attempt <= 1);
        }
        if let Some(hybrid) = self.cc.hybrid() {
            hybrid.begin(&mut self.path, attempt);
        }
        if let Some(versions) = self.cc.versions() {
            self.snapshot = if self.cc.protocol().is_timestamp_ordered() {
                // The commit's TID too: it must lie in the epoch the
                // transaction commits in (`validate_and_stamp`).
                versions.begin_timestamp(self.worker, record::first_tid_of_epoch(epoch))
            } else {
                versions.begin(self.worker)
            };
        }
    }

    /// Starts a read-only attempt at the oldest snapshot any transaction
    /// holds (`zen+`, zen-plus.txt §4.1.2: the paper's global minimum
    /// Tx-CTS − 1; `cc::versions`). Needs a multi-version protocol whose
    /// writers commit above every announced snapshot (Hekaton's).
    pub(crate) fn begin_snapshot_read_only(&mut self) {
        self.clear();
        let versions = self.cc.versions().expect("snapshot reads need a multi-version protocol");
        debug_assert_eq!(self.cc.protocol(), CcProtocol::Hekaton);
        self.snapshot = versions.begin_oldest(self.worker);
        self.snapshot_read_only = true;
    }

    /// Whether commits must keep the versions they replace
    /// ([`OccTx::preserve_version`]).
    pub(crate) fn keeps_versions(&self) -> bool {
        self.cc.versions().is_some()
    }

    /// Keeps the version of `row` (locked by this commit, `locked_word`,
    /// value `old` when present) that the commit at `tid` replaces.
    pub(crate) fn preserve_version(&mut self, row: &R, locked_word: u64, old: Option<&[u8]>, tid: u64) {
        if let Some(versions) = self.cc.versions() {
            let old = if locked_word & ABSENT == 0 { old } else { None };
            debug_assert!(locked_word & ABSENT != 0 || old.is_some(), "a present version has a value");
            versions.preserve(&mut self.version_queue, row as *const R as usize, record::tid_of(locked_word), old, tid);
        }
    }

    /// Forgets the attempt (keeps the buffers), releasing its locks and
    /// its snapshot.
    pub(crate) fn clear(&mut self) {
        if let Some(locks) = self.cc.locks() {
            locks.release_all(&mut self.held);
        }
        if let Some(hybrid) = self.cc.hybrid() {
            hybrid.end(&mut self.path);
        }
        if let Some(versions) = self.cc.versions() {
            versions.end(self.worker);
        }
        self.reads.clear();
        self.read_positions.clear();
        self.writes.clear();
        self.leaves.clear();
        self.created.clear();
        self.added_secondaries.clear();
    }

    /// Releases the attempt's lock-table locks now (a broken variant of
    /// the crash harness's self-test releases them before its log).
    pub(crate) fn release_locks(&mut self) {
        if let Some(locks) = self.cc.locks() {
            locks.release_all(&mut self.held);
        }
    }

    /// Queues the rows this attempt left absent for reclamation, then
    /// forgets the attempt. `epoch` is the worker's current epoch.
    pub(crate) fn finish(&mut self, epoch: u64, tables: &[Table<R>]) {
        for &(table, row, _) in &self.created {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { row.as_ref() };
            if row.word() & ABSENT != 0 {
                self.reclaimer.note_absent(epoch, table, row);
            }
        }
        for entry in self.writes.entries() {
            if entry.row().word() & ABSENT != 0 && !self.created.iter().any(|(_, row, _)| *row == entry.row) {
                self.reclaimer.note_absent(epoch, entry.table, entry.row());
            }
        }
        self.clear();
        if let Some(versions) = self.cc.versions() {
            versions.collect(&mut self.version_queue, &mut unindex_stale(tables));
        }
    }

    /// Whether the attempt wrote nothing.
    pub(crate) fn is_read_only(&self) -> bool {
        self.writes.is_empty()
    }

    /// Silo's node-set update for this transaction's own inserts: if it
    /// scanned the leaf at exactly the version before the insert, move it
    /// forward, so its own insert is not taken for a phantom.
    fn note_own_insert(leaves: &mut [LeafEntry], table: TableId, secondary: Option<u32>, change: Option<LeafChange>) {
        if let Some(change) = change {
            for entry in leaves {
                if entry.table == table
                    && entry.leaf.secondary == secondary
                    && entry.leaf.leaf == change.leaf
                    && entry.leaf.version == change.version_before
                {
                    entry.leaf.version = change.version_after;
                }
            }
        }
    }

    /// The row of `key`, inserting a placeholder if needed.
    #[inline]
    fn lookup<'t>(
        &mut self,
        table: &'t Table<R>,
        table_id: TableId,
        key: &[u8],
        value_capacity: usize,
    ) -> TxResult<&'t R> {
        let (row, inserted, change) = table.get_or_insert(key, value_capacity)?;
        if inserted {
            self.created.push((table_id, NonNull::from(row), change.map(|change| change.leaf)));
            Self::note_own_insert(&mut self.leaves, table_id, None, change);
        }
        Ok(row)
    }

    /// Remembers a stable read of `row`.
    #[inline]
    fn note_read(&mut self, row: &R, word: u64) {
        if self.read_positions.find(&self.reads, read_row_of, row).is_none() {
            // DBXN: an odd (UNPERSISTED) version is not an early abort; the
            // read set holds the next even version, which validates only
            // once the writer's log is durable. No-op for other engines.
            self.reads.push(ReadEntry { row, word: word & !UNPERSISTED });
            self.read_positions.pushed(&self.reads, read_row_of);
        }
    }

    /// Reads `row` as this transaction sees it into `out`.
    #[inline]
    fn read_row(&mut self, store: &impl RowStore<R>, row: &R, out: &mut Vec<u8>) -> TxResult<Seen> {
        if let Some(position) = self.writes.find(row) {
            out.clear();
            return Ok(match self.writes.value_state(position) {
                WriteValue::Bytes(value) => {
                    out.extend_from_slice(value);
                    Seen::Present
                }
                WriteValue::Spilled(_) => {
                    store.read_spilled(row, out);
                    Seen::Present
                }
                WriteValue::Delete => Seen::Absent,
            });
        }
        if let Some(locks) = self.cc.row_locks() {
            // 2PL: the shared lock comes first, so the value read stays the
            // committed one until the attempt ends.
            locks.acquire(&mut self.held, row as *const R as usize, false).map_err(TxError::Abort)?;
        }
        if self.cc.hybrid().is_some() {
            self.hybrid_access(row as *const R as usize, false).map_err(TxError::Abort)?;
        }
        if self.cc.protocol() == CcProtocol::Mvcc {
            // Timestamp ordering: the read timestamp first, then the read; a
            // writer locks, then checks it (the order of `cc::tictoc`), so
            // no writer below this timestamp installs under the read.
            if let Some(read_timestamps) = self.cc.read_timestamps() {
                read_timestamps.extend(row as *const R as usize, self.snapshot);
            }
        }
        let word = store.read(row, out).map_err(TxError::Abort)?;
        if word == REMOVED {
            return Ok(Seen::Removed);
        }
        if let Some(versions) = self.cc.versions() {
            if record::tid_of(word) > self.snapshot {
                // Newer than the snapshot: the version valid at it, from
                // the row's chain (or none: the key was absent then).
                let (wts, present) = match versions.read(row as *const R as usize, self.snapshot, out) {
                    OlderVersion::Found { wts, present } => (wts, present),
                    OlderVersion::None => (0, false),
                };
                self.note_read(row, record::word_of(wts, if present { 0 } else { ABSENT }));
                return Ok(if present { Seen::Present } else { Seen::Absent });
            }
        }
        self.note_read(row, word);
        Ok(if word & ABSENT == 0 { Seen::Present } else { Seen::Absent })
    }

    /// Looks `key` up and reads its row into `out`; the row and whether it
    /// is present.
    fn read_key<'t>(
        &mut self,
        table: &'t Table<R>,
        store: &impl RowStore<R>,
        table_id: TableId,
        key: &[u8],
        value_capacity: usize,
        out: &mut Vec<u8>,
    ) -> TxResult<(&'t R, bool)> {
        self.lock_partition(table, table_id, key)?;
        for _ in 0..RELOOKUPS {
            let row = self.lookup(table, table_id, key, value_capacity)?;
            match self.read_row(store, row, out)? {
                Seen::Present => return Ok((row, true)),
                Seen::Absent => return Ok((row, false)),
                Seen::Removed => continue,
            }
        }
        Err(TxError::Abort(AbortReason::UnstableRead))
    }

    /// Point read into `out`.
    pub(crate) fn get(
        &mut self,
        tables: &[Table<R>],
        store: &impl RowStore<R>,
        table_id: TableId,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> TxResult<bool> {
        let table = table_of(tables, table_id)?;
        table.check_key(key)?;
        Ok(self.read_key(table, store, table_id, key, 0, out)?.1)
    }

    /// Point read handed to `visit` from the worker's scratch buffer.
    pub(crate) fn get_with(
        &mut self,
        tables: &[Table<R>],
        store: &impl RowStore<R>,
        table_id: TableId,
        key: &[u8],
        visit: &mut dyn FnMut(&[u8]),
    ) -> TxResult<bool> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.get(tables, store, table_id, key, &mut scratch);
        if let Ok(true) = result {
            visit(&scratch);
        }
        self.scratch = scratch;
        result
    }

    /// Buffers a write; see [`WriteOp`].
    pub(crate) fn write(
        &mut self,
        tables: &[Table<R>],
        store: &impl RowStore<R>,
        table_id: TableId,
        key: &[u8],
        op: WriteOp<'_>,
    ) -> TxResult<bool> {
        let table = table_of(tables, table_id)?;
        table.check_key(key)?;
        let new_value = match op {
            WriteOp::Put(value) | WriteOp::Insert(value) | WriteOp::Update(value) => {
                table.check_value(value)?;
                Some(value)
            }
            WriteOp::Delete => None,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let read = self.read_key(table, store, table_id, key, new_value.map_or(0, <[u8]>::len), &mut scratch);
        let result = read.and_then(|(row, present)| {
            let applies = match op {
                WriteOp::Put(_) => true,
                WriteOp::Insert(_) => !present,
                WriteOp::Update(_) | WriteOp::Delete => present,
            };
            if applies {
                // `scratch` holds the row as this transaction sees it.
                self.buffer_write(table, table_id, key, row, new_value, present.then_some(scratch.as_slice()))?;
            }
            Ok(applies)
        });
        self.scratch = scratch;
        result
    }

    fn buffer_write(
        &mut self,
        table: &Table<R>,
        table_id: TableId,
        key: &[u8],
        row: &R,
        value: Option<&[u8]>,
        old: Option<&[u8]>,
    ) -> TxResult<()> {
        self.lock_for_write(row)?;
        let index_secondaries = match value {
            Some(new) if !table.schema().secondaries.is_empty() => {
                table::secondaries_to_index(table.schema(), key, new, old)?
            }
            _ => false,
        };
        match self.writes.find(row) {
            Some(position) => {
                self.writes.set_value(position, value);
                self.writes.entries[position].index_secondaries |= index_secondaries;
            }
            None => self.writes.push(table_id, row, key, value, index_secondaries),
        }
        Ok(())
    }

    /// Changes the row of `key` in place (buffered as an update).
    pub(crate) fn update_with(
        &mut self,
        tables: &[Table<R>],
        store: &impl RowStore<R>,
        table_id: TableId,
        key: &[u8],
        modify: &mut dyn FnMut(&mut [u8]),
    ) -> TxResult<bool> {
        let table = table_of(tables, table_id)?;
        table.check_key(key)?;
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.read_key(table, store, table_id, key, 0, &mut scratch).and_then(|(row, present)| {
            if !present {
                return Ok(false);
            }
            self.lock_for_write(row)?;
            let position = match self.writes.find(row) {
                Some(position) if self.writes.entries[position].is_spilled() => {
                    // Back into the arena (`scratch` holds it): it changes.
                    self.writes.set_value(position, Some(&scratch));
                    position
                }
                Some(position) => position,
                None => {
                    self.writes.push(table_id, row, key, Some(&scratch), false);
                    self.writes.len() - 1
                }
            };
            let value = self.writes.value_mut(position).expect("present");
            modify(value);
            if !table.schema().secondaries.is_empty() {
                let new = self.writes.value(position).expect("present");
                let changed = table::secondaries_to_index(table.schema(), key, new, Some(&scratch))?;
                self.writes.entries[position].index_secondaries |= changed;
            }
            Ok(true)
        });
        self.scratch = scratch;
        result
    }

    /// 2PL: the exclusive lock of a row about to be written (an upgrade of
    /// the shared lock its read took).
    /// Multi-version: a row with a version newer than the snapshot cannot
    /// be written (the first writer wins).
    #[inline]
    fn lock_for_write(&mut self, row: &R) -> TxResult<()> {
        if self.cc.versions().is_some() && record::tid_of(row.word()) > self.snapshot {
            return Err(TxError::Abort(AbortReason::WriteLock));
        }
        if self.cc.protocol().is_timestamp_ordered() {
            let read_timestamps = self.cc.read_timestamps().expect("timestamp ordering keeps read timestamps");
            if read_timestamps.rts(row as *const R as usize, record::tid_of(row.word())) > self.snapshot {
                // A later transaction read the version this write replaces.
                return Err(TxError::Abort(AbortReason::TimestampOrder));
            }
        }
        if self.cc.hybrid().is_some() {
            return self.hybrid_access(row as *const R as usize, true).map_err(TxError::Abort);
        }
        match self.cc.row_locks() {
            Some(locks) => locks.acquire(&mut self.held, row as *const R as usize, true).map_err(TxError::Abort),
            None => Ok(()),
        }
    }

    /// The hybrid engines' rule for an access to the row at `address`
    /// (`cc::hybrid`): every write takes the row's lock exclusively; a read
    /// takes it shared on the STM path, checks it on Slow HTM, and checks
    /// the write-back subscription on Fast HTM; a hardware attempt aborts
    /// once its footprint overflows the capacity.
    #[cold]
    fn hybrid_access(&mut self, address: usize, write: bool) -> Result<(), AbortReason> {
        let hybrid = self.cc.hybrid().expect("hybrid engines only");
        let locks = self.cc.locks().expect("hybrid engines keep a lock table");
        Hybrid::check_entered(&self.path)?;
        let path = self.path.path;
        if path.is_hardware() {
            let lines = (self.reads.len() + self.writes.len() + 1) as u64 * u64::from(LINES_PER_ACCESS);
            if hybrid.over_capacity(u32::try_from(lines).unwrap_or(u32::MAX)) {
                self.path.capacity = true;
                return Err(AbortReason::HtmCapacity);
            }
        }
        if write {
            return locks.acquire(&mut self.held, address, true);
        }
        match path {
            TxPath::Stm | TxPath::StmExclusive => locks.acquire(&mut self.held, address, false),
            TxPath::SlowHtm if locks.is_exclusive_by_other(&self.held, address) => Err(AbortReason::Region),
            TxPath::FastHtm => hybrid.check_read(&self.path),
            TxPath::SlowHtm | TxPath::GlobalLock => Ok(()),
        }
    }

    /// Whether every row read is still share-locked (2PL, and the hybrid
    /// engines' STM path), so the read set needs no validation.
    fn reads_locked(&self) -> bool {
        self.cc.row_locks().is_some() || (self.cc.hybrid().is_some() && self.path.path.locks_reads())
    }

    /// Lines of cache a hardware attempt of this transaction touches (the
    /// footprint hint of its commit region).
    pub(crate) fn footprint_lines(&self) -> u32 {
        let lines = (self.reads.len() + self.writes.len()) as u64 * u64::from(LINES_PER_ACCESS);
        u32::try_from(lines).unwrap_or(u32::MAX)
    }

    /// `hstore`: the exclusive lock of the partition of `key` in `table`.
    #[inline]
    fn lock_partition(&mut self, table: &Table<R>, table_id: TableId, key: &[u8]) -> TxResult<()> {
        // The hybrid engines: an attempt that could not take its path's
        // lock touches nothing (not even an index placeholder).
        Hybrid::check_entered(&self.path).map_err(TxError::Abort)?;
        if self.cc.protocol() != CcProtocol::HStore {
            return Ok(());
        }
        let address = self.cc.partition_address(table_id.0, table.schema().partition_prefix, key);
        let locks = self.cc.locks().expect("hstore keeps a lock table");
        locks.acquire(&mut self.held, address, true).map_err(TxError::Abort)
    }

    /// `hstore`: the partitions a scan of `request` may touch: the one its
    /// bounds share when both lie in one partition of a primary index that
    /// names partitions by a key prefix, else every partition.
    fn lock_partitions_for_scan(&mut self, table: &Table<R>, request: &ScanRequest<'_>) -> TxResult<()> {
        Hybrid::check_entered(&self.path).map_err(TxError::Abort)?;
        if self.cc.protocol() != CcProtocol::HStore {
            return Ok(());
        }
        let prefix = table.schema().partition_prefix;
        let one_partition = match (request.secondary, prefix, bound_key(request.range.0), bound_key(request.range.1)) {
            (None, Some(len), Some(low), Some(high))
                if low.len() >= len && high.len() >= len && low[..len] == high[..len] =>
            {
                Some(low)
            }
            _ => None,
        };
        let locks = self.cc.locks().expect("hstore keeps a lock table");
        match one_partition {
            Some(key) => {
                let address = self.cc.partition_address(request.table.0, prefix, key);
                locks.acquire(&mut self.held, address, true).map_err(TxError::Abort)
            }
            None => {
                for partition in 0..self.cc.partitions() {
                    let address = crate::cc::concurrency::Concurrency::partition_lock_address(partition);
                    locks.acquire(&mut self.held, address, true).map_err(TxError::Abort)?;
                }
                Ok(())
            }
        }
    }

    /// Range scan in one pass (module documentation).
    pub(crate) fn scan(
        &mut self,
        tables: &[Table<R>],
        store: &impl RowStore<R>,
        request: ScanRequest<'_>,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> TxResult<()> {
        let table = table_of(tables, request.table)?;
        if request.limit == 0 {
            return Ok(());
        }
        self.lock_partitions_for_scan(table, &request)?;
        // Read-your-writes for secondary scans: own rows whose secondary
        // key is new are not in the index until commit.
        let mut own: Vec<(Vec<u8>, usize)> = Vec::new();
        if let Some(position) = request.secondary {
            for index in 0..self.writes.len() {
                let entry = &self.writes.entries[index];
                if entry.table != request.table || !entry.index_secondaries {
                    continue;
                }
                // (`zen+` never spills a row of a table with secondary
                // indexes, so the value is here.)
                let WriteValue::Bytes(value) = self.writes.value_state(index) else { continue };
                let index_key = table::secondary_index_key(table.schema(), position, self.writes.key(index), value);
                if table::in_range(request.range, &index_key) {
                    own.push((index_key, index));
                }
            }
            own.sort_by(|a, b| in_order(request.direction, &a.0, &b.0));
        }
        let mut own_next = 0;
        let mut delivered = 0usize;
        let mut stopped = false;
        let mut failure: Option<TxError> = None;
        let mut leaves = Vec::new();
        let mut value = std::mem::take(&mut self.scratch);
        // `mvcc` registers its reads eagerly, ranges included (`cicada` at
        // validation): a later insert below the timestamp finds it.
        let raise_leaves = (self.cc.protocol() == CcProtocol::Mvcc).then_some(self.snapshot);
        table.scan(
            request.secondary,
            request.range,
            request.direction,
            |key, index_key, row| {
                // Own rows that come first in scan order.
                while own_next < own.len() && in_order(request.direction, &own[own_next].0, index_key).is_lt() {
                    let write = own[own_next].1;
                    own_next += 1;
                    delivered += 1;
                    let view = self.writes.view(write);
                    if !visit(view.key, view.value.expect("own rows have values")) || delivered >= request.limit {
                        stopped = true;
                        return false;
                    }
                }
                if own.get(own_next).is_some_and(|(own_key, _)| own_key.as_slice() == index_key) {
                    own_next += 1; // the same row: read through the index entry
                }
                let seen = match self.read_row(store, row, &mut value) {
                    Ok(seen) => seen,
                    Err(error) => {
                        failure = Some(error);
                        return false;
                    }
                };
                // (An absent row's stale entry: no value to ask the key of.)
                let current = matches!(seen, Seen::Present)
                    && match request.secondary {
                        None => true,
                        Some(position) => {
                            table::secondary_entry_is_current(table.schema(), position, index_key, key, &value)
                        }
                    };
                if current {
                    delivered += 1;
                    if !visit(key, &value) || delivered >= request.limit {
                        stopped = true;
                        return false;
                    }
                }
                true
            },
            |leaf| {
                if let Some(ts) = raise_leaves {
                    table.raise_leaf_read_ts(&leaf, ts);
                }
                leaves.push(LeafEntry { table: request.table, leaf })
            },
        )?;
        self.scratch = value;
        self.leaves.extend(leaves);
        if let Some(error) = failure {
            return Err(error);
        }
        if !stopped {
            while own_next < own.len() && delivered < request.limit {
                let write = own[own_next].1;
                own_next += 1;
                delivered += 1;
                let view = self.writes.view(write);
                if !visit(view.key, view.value.expect("own rows have values")) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Locks the write set in address order. Returns the largest TID seen
    /// on a locked row, or the abort reason (with nothing left locked).
    pub(crate) fn lock_writes(&mut self) -> Result<u64, AbortReason> {
        self.writes.sort_by_row();
        let mut max_tid = 0;
        for index in 0..self.writes.len() {
            match self.writes.entries[index].row().lock(LOCK_SPINS) {
                Some(word) if word != REMOVED => {
                    self.writes.set_locked_word(index, word);
                    max_tid = max_tid.max(record::tid_of(word));
                }
                Some(_) => {
                    // Unlinked since the body read it: the read set's word
                    // differs, so the attempt could not validate anyway.
                    self.release(index + 1);
                    return Err(AbortReason::ReadValidation);
                }
                None => {
                    self.release(index);
                    return Err(AbortReason::WriteLock);
                }
            }
        }
        Ok(max_tid)
    }

    /// Unlocks the first `locked` writes without changing them.
    pub(crate) fn release(&self, locked: usize) {
        for entry in &self.writes.entries[..locked] {
            entry.row().unlock();
        }
    }

    /// Validates a read-only attempt (the protocol's read-set check and the
    /// node set).
    pub(crate) fn validate(&self, tables: &[Table<R>]) -> Result<(), AbortReason> {
        if self.snapshot_read_only {
            // Every version read is at or below the snapshot, under which
            // every commit had installed all its rows (`cc::versions`).
            return self.check_reads_durable();
        }
        if self.cc.versions().is_some() {
            self.check_reads_durable()?;
            return match self.cc.protocol() {
                // A snapshot below every later commit needs nothing else.
                CcProtocol::Hekaton => Ok(()),
                // A timestamp can lie below a concurrent writer's: ranges
                // are checked for phantoms, and Cicada checks its reads.
                CcProtocol::Cicada => {
                    self.validate_at_timestamp(self.snapshot)?;
                    self.raise_scanned_leaves(tables, self.snapshot);
                    self.validate_leaves(tables)
                }
                _ => self.validate_leaves(tables),
            };
        }
        match self.cc.read_timestamps() {
            // TicToc: a reader commits at the newest version it read.
            Some(read_timestamps) => {
                self.validate_tictoc(read_timestamps, self.max_read_tid())?;
                self.validate_leaves(tables)
            }
            None => self.validate_silo(tables),
        }
    }

    /// Validates a writing attempt whose write set is locked and picks its
    /// TID: above `max_locked_tid` (the TIDs of the rows it overwrites) and
    /// `floor` (the worker's last), and at least the first TID of `epoch`
    /// (the durability schemes order and acknowledge by it).
    pub(crate) fn validate_and_stamp(
        &mut self,
        tables: &[Table<R>],
        max_locked_tid: u64,
        floor: u64,
        epoch: u64,
    ) -> Result<u64, AbortReason> {
        self.add_secondaries(tables);
        let stamped = self.validate_and_stamp_locked(tables, max_locked_tid, floor, epoch);
        if stamped.is_err() {
            self.remove_added_secondaries(tables);
        }
        stamped
    }

    /// [`OccTx::validate_and_stamp`] once the new secondary entries are in.
    fn validate_and_stamp_locked(
        &self,
        tables: &[Table<R>],
        max_locked_tid: u64,
        floor: u64,
        epoch: u64,
    ) -> Result<u64, AbortReason> {
        if self.cc.protocol().is_timestamp_ordered() {
            return self.validate_timestamp_order(tables, epoch);
        }
        let Some(read_timestamps) = self.cc.read_timestamps() else {
            self.validate_silo(tables)?;
            let tid = self.commit_tid(max_locked_tid, floor, epoch);
            // Multi-version: above every commit so far too (snapshots).
            return Ok(self.cc.versions().map_or(tid, |versions| versions.commit_tid(tid)));
        };
        // TicToc: above the rts of every row overwritten, at least the wts
        // of every row read. The floors keep what the logs and Zen's
        // heap need, so a commit cannot move into an older epoch.
        let mut ts = (floor + 1).max(record::first_tid_of_epoch(epoch)).max(self.max_read_tid());
        for entry in self.writes.entries() {
            let wts = record::tid_of(entry.locked_word);
            ts = ts.max(read_timestamps.rts(entry.row.as_ptr() as usize, wts) + 1);
        }
        debug_assert!(ts > max_locked_tid && ts < record::MAX_TID);
        self.validate_tictoc(read_timestamps, ts)?;
        self.validate_leaves(tables)?;
        Ok(ts)
    }

    /// Validates a writing attempt whose write set is locked and whose TID
    /// `tid` was fixed earlier (`zen+`'s exclusive stage wrote tuples
    /// stamped with it before committing): Silo's validation, and `tid`
    /// above everything read or overwritten.
    pub(crate) fn validate_at_fixed_tid(
        &mut self,
        tables: &[Table<R>],
        max_locked_tid: u64,
        tid: u64,
    ) -> Result<u64, AbortReason> {
        self.add_secondaries(tables);
        let valid = self.validate_silo(tables).and_then(|()| {
            if tid <= max_locked_tid.max(self.max_read_tid()) {
                // A commit slipped in below it: the tuples stamped `tid`
                // would not be the key's newest. (The exclusive stage runs
                // alone, so this does not happen; refusing it keeps the
                // heap ordered.)
                return Err(AbortReason::ReadValidation);
            }
            Ok(())
        });
        if let Err(reason) = valid {
            self.remove_added_secondaries(tables);
            return Err(reason);
        }
        if let Some(versions) = self.cc.versions() {
            versions.raise_clock(tid);
        }
        Ok(tid)
    }

    /// The timestamp-ordering protocols' commit at the transaction's own
    /// timestamp: still in the current epoch (the durability schemes
    /// acknowledge by the TID's epoch), above the version every write
    /// replaces and above every read of it, reads still valid (Cicada; `mvcc`
    /// registered its reads eagerly), and no phantom.
    fn validate_timestamp_order(&self, tables: &[Table<R>], epoch: u64) -> Result<u64, AbortReason> {
        let ts = self.snapshot;
        if record::epoch_of_tid(ts) != epoch {
            return Err(AbortReason::TimestampOrder);
        }
        self.check_reads_durable()?;
        let read_timestamps = self.cc.read_timestamps().expect("timestamp ordering keeps read timestamps");
        for entry in self.writes.entries() {
            let wts = record::tid_of(entry.locked_word);
            // IMPORTANT: the row is locked; a reader that raised its rts
            // before reading is seen here (`cc::tictoc`'s order).
            if wts >= ts || read_timestamps.rts(entry.row.as_ptr() as usize, wts) > ts {
                return Err(AbortReason::TimestampOrder);
            }
        }
        self.check_no_later_range_read(tables, ts)?;
        if self.cc.protocol() == CcProtocol::Cicada {
            self.validate_at_timestamp(ts)?;
            self.raise_scanned_leaves(tables, ts);
        }
        self.validate_leaves(tables)?;
        Ok(ts)
    }

    /// Timestamp ordering's phantom check: no transaction with a later
    /// timestamp read the range of a key this one makes present (a
    /// placeholder it inserted, an absent row it fills, a new secondary
    /// entry), since that reader, serialized after this commit, did not
    /// see the key. Readers raise the read timestamps of the leaves they
    /// scan (`OrderedIndex::raise_read_ts`) before validating them; the
    /// key is in its leaf before this check.
    fn check_no_later_range_read(&self, tables: &[Table<R>], ts: u64) -> Result<(), AbortReason> {
        for entry in self.writes.entries() {
            if entry.locked_word & ABSENT == 0 || entry.is_delete() {
                continue;
            }
            let table = &tables[entry.table.0 as usize];
            let read_ts = match self.created.iter().find(|(_, row, _)| *row == entry.row) {
                Some(&(_, _, Some(leaf))) => table.leaf_read_ts(None, leaf),
                _ => table.gap_read_ts(None, entry.row().key()),
            };
            if read_ts > ts {
                return Err(AbortReason::TimestampOrder);
            }
        }
        for added in self.added_secondaries.iter().filter(|added| added.inserted) {
            let table = &tables[self.writes.entries()[added.write].table.0 as usize];
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

    /// Raises the read timestamps of the leaves this attempt scanned to
    /// `ts` (`cicada`, at validation: its reads write nothing shared
    /// before).
    fn raise_scanned_leaves(&self, tables: &[Table<R>], ts: u64) {
        for entry in &self.leaves {
            tables[entry.table.0 as usize].raise_leaf_read_ts(&entry.leaf, ts);
        }
    }

    /// Multi-version protocols: adds the secondary entries of the write
    /// set's new keys now that the write set is locked, before the commit
    /// picks its TID (`Hekaton`: a snapshot at or above the TID is taken
    /// after the entries exist, and meets the locked row through them) or
    /// checks range reads (`mvcc`, `cicada`). An entry that is there
    /// already is a stale one the row takes back. The attempt's own scans
    /// of the leaves that receive them are moved forward, as for its
    /// placeholders.
    fn add_secondaries(&mut self, tables: &[Table<R>]) {
        if self.cc.versions().is_none() {
            return;
        }
        debug_assert!(self.added_secondaries.is_empty());
        for write in 0..self.writes.len() {
            let entry = &self.writes.entries()[write];
            let (table_id, row) = (entry.table, entry.row());
            let table = &tables[table_id.0 as usize];
            if !entry.index_secondaries || table.schema().secondaries.is_empty() {
                continue;
            }
            // (`zen+` never spills a row of a table with secondary indexes.)
            let WriteValue::Bytes(value) = self.writes.value_state(write) else { continue };
            let key = self.writes.key(write);
            for position in 0..table.schema().secondaries.len() as u32 {
                let composite = table::secondary_index_key(table.schema(), position, key, value);
                let (inserted, change) = match table.add_secondary(position, &composite, row) {
                    Ok(SecondaryAdded::Inserted(change)) => (true, change),
                    Ok(SecondaryAdded::Present) => (false, None),
                    Err(error) => unreachable!("secondary key lengths are checked when a write is buffered: {error}"),
                };
                self.added_secondaries.push(AddedSecondary {
                    write,
                    position,
                    composite,
                    inserted,
                    leaf: change.map(|change| change.leaf),
                });
                Self::note_own_insert(&mut self.leaves, table_id, Some(position), change);
            }
        }
    }

    /// Undoes [`OccTx::add_secondaries`] for an attempt that does not
    /// commit (rows still locked).
    fn remove_added_secondaries(&mut self, tables: &[Table<R>]) {
        for added in self.added_secondaries.drain(..) {
            if added.inserted {
                let entry = &self.writes.entries()[added.write];
                tables[entry.table.0 as usize].remove_secondary(added.position, &added.composite, entry.row());
            }
        }
    }

    /// A version read whose log is not yet durable (DBXN's odd version)
    /// must become durable before the reader commits: otherwise a crash
    /// could keep the reader and lose what it read. (A version replaced
    /// since was durable before its replacement committed, which checked
    /// the same.)
    fn check_reads_durable(&self) -> Result<(), AbortReason> {
        for read in &self.reads {
            // SAFETY: see WriteEntry::row.
            if unsafe { &*read.row }.word() & !LOCKED == read.word | UNPERSISTED {
                return Err(AbortReason::NotYetDurable);
            }
        }
        Ok(())
    }

    /// Cicada's read validation: every version read is still the one valid
    /// at `ts`, and its read timestamp reaches `ts` (extended while nobody
    /// else holds the row), so no writer below `ts` can replace it later.
    fn validate_at_timestamp(&self, ts: u64) -> Result<(), AbortReason> {
        let read_timestamps = self.cc.read_timestamps().expect("timestamp ordering keeps read timestamps");
        let versions = self.cc.versions().expect("timestamp ordering keeps versions");
        let mut scratch = Vec::new();
        for read in &self.reads {
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
            if current_wts > ts || self.writes.find(read.row).is_some() {
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

    /// TicToc's read validation at timestamp `ts`: each version read must
    /// still be the row's, and valid at `ts` — already (its rts reaches
    /// `ts`), or by extending its rts while nobody else holds the row.
    fn validate_tictoc(&self, read_timestamps: &crate::cc::tictoc::ReadTimestamps, ts: u64) -> Result<(), AbortReason> {
        for read in &self.reads {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { &*read.row };
            let current = row.word();
            unchanged(current, read.word)?;
            let address = read.row as usize;
            if read_timestamps.rts(address, record::tid_of(read.word)) >= ts {
                continue;
            }
            if current & LOCKED != 0 {
                if self.writes.find(read.row).is_some() {
                    continue; // our own lock: we overwrite it at ts anyway
                }
                return Err(AbortReason::ReadValidation);
            }
            read_timestamps.extend(address, ts);
            // IMPORTANT: re-read after the extension (module docs of
            // `cc::tictoc`): a writer that locked meanwhile is seen here,
            // one that locks later sees the extended rts.
            if row.word() != current {
                return Err(AbortReason::ReadValidation);
            }
        }
        Ok(())
    }

    /// Silo's validation of the read set and the node set.
    fn validate_silo(&self, tables: &[Table<R>]) -> Result<(), AbortReason> {
        // H-Store: every partition read is still locked, so nothing that
        // was read or scanned can have changed.
        if self.cc.protocol() == CcProtocol::HStore {
            return Ok(());
        }
        // Under 2PL every row read is still share-locked (and reclamation
        // leaves locked rows alone): only the node set needs checking.
        let reads: &[ReadEntry<R>] = if self.reads_locked() { &[] } else { &self.reads };
        for read in reads {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { &*read.row };
            let current = row.word();
            unchanged(current, read.word)?;
            if current & LOCKED != 0 && self.writes.find(read.row).is_none() {
                return Err(AbortReason::ReadValidation);
            }
        }
        self.validate_leaves(tables)
    }

    /// The node set: every scanned leaf still has the version seen.
    fn validate_leaves(&self, tables: &[Table<R>]) -> Result<(), AbortReason> {
        for entry in &self.leaves {
            if !tables[entry.table.0 as usize].validate_leaf(&entry.leaf) {
                return Err(AbortReason::NodeValidation);
            }
        }
        Ok(())
    }

    /// Reads in the read set (each row once).
    pub(crate) fn reads_len(&self) -> usize {
        self.reads.len()
    }

    /// The rows of the read set from position `start` on, in the order
    /// they were first read (the set only grows during an attempt).
    pub(crate) fn read_rows_from(&self, start: usize) -> impl Iterator<Item = &R> + '_ {
        // SAFETY: see WriteEntry::row.
        self.reads.get(start..).unwrap_or(&[]).iter().map(|read| unsafe { &*read.row })
    }

    /// The largest TID the attempt read.
    /// The version words the read set holds (as read).
    pub(crate) fn read_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.reads.iter().map(|read| read.word)
    }

    pub(crate) fn max_read_tid(&self) -> u64 {
        self.reads.iter().map(|read| record::tid_of(read.word)).max().unwrap_or(0)
    }

    /// Silo's TID rule: above every TID read or overwritten and above
    /// `floor` (the thread's last), and at least the epoch's first TID.
    pub(crate) fn commit_tid(&self, max_locked_tid: u64, floor: u64, epoch: u64) -> u64 {
        let tid = (max_locked_tid.max(self.max_read_tid()).max(floor) + 1).max(record::first_tid_of_epoch(epoch));
        debug_assert!(tid < record::MAX_TID, "TIDs stay below the REMOVED marker");
        tid
    }

    /// Secondary-index maintenance for write `index` (row locked): drops
    /// the entries of the row's current value that the new value does not
    /// keep (`current` is that value, read under the lock), and adds the new
    /// value's entries when the body found it needs them.
    ///
    /// Multi-version protocols keep the entries the new value drops until
    /// no snapshot older than the commit (`tid`) is left, since such a
    /// snapshot reads the old value and must find the row under its key
    /// (`VersionStore::defer_unindex`); the new entries are in already
    /// ([`OccTx::add_secondaries`]) unless the commit did not validate
    /// (`nvm-ideal`).
    pub(crate) fn maintain_secondaries(&mut self, tables: &[Table<R>], index: usize, current: Option<&[u8]>, tid: u64) {
        let entry = &self.writes.entries[index];
        let table = &tables[entry.table.0 as usize];
        if table.schema().secondaries.is_empty() {
            return;
        }
        let key = self.writes.key(index);
        let new = self.writes.value(index);
        if let Some(versions) = self.cc.versions() {
            let (table_id, row) = (entry.table.0, entry.row());
            let address = row as *const R as usize;
            let queue = &mut self.version_queue;
            if let Some(old) = current {
                table.stale_secondaries(key, old, new, |position, composite| {
                    versions.defer_unindex(queue, address, (table_id, position), composite, tid);
                });
            }
            let (true, Some(value)) = (entry.index_secondaries, new) else { return };
            let mut added = self.added_secondaries.iter().filter(|added| added.write == index).peekable();
            if added.peek().is_none() {
                // Not added before the TID: add them now.
                for position in 0..table.schema().secondaries.len() as u32 {
                    let composite = table::secondary_index_key(table.schema(), position, key, value);
                    match table.add_secondary(position, &composite, row) {
                        Ok(SecondaryAdded::Inserted(_)) => {}
                        Ok(SecondaryAdded::Present) => versions.cancel_unindex(address, position, &composite),
                        Err(error) => {
                            unreachable!("secondary key lengths are checked when a write is buffered: {error}")
                        }
                    }
                }
            } else {
                for added in added.filter(|added| !added.inserted) {
                    versions.cancel_unindex(address, added.position, &added.composite);
                }
            }
            return;
        }
        if let Some(old) = current {
            table.unindex_secondaries(key, old, new, entry.row());
        }
        if let (true, Some(value)) = (entry.index_secondaries, new) {
            if let Err(error) = table.index_secondaries(key, value, entry.row()) {
                unreachable!("secondary key lengths are checked when a write is buffered: {error}");
            }
        }
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

/// Whether a row's `current` word (lock bit aside) is still the `read`
/// one; a version still waiting for its log (DBXN's odd version) is told
/// apart, since it validates once durable.
fn unchanged(current: u64, read: u64) -> Result<(), AbortReason> {
    match current & !LOCKED {
        word if word == read => Ok(()),
        word if word == read | UNPERSISTED => Err(AbortReason::NotYetDurable),
        _ => Err(AbortReason::ReadValidation),
    }
}

/// The key of a bound, if it has one.
fn bound_key(bound: std::ops::Bound<&[u8]>) -> Option<&[u8]> {
    match bound {
        std::ops::Bound::Included(key) | std::ops::Bound::Excluded(key) => Some(key),
        std::ops::Bound::Unbounded => None,
    }
}

/// `a` before `b` in scan order.
fn in_order(direction: ScanDirection, a: &[u8], b: &[u8]) -> KeyOrdering {
    match direction {
        ScanDirection::Forward => a.cmp(b),
        ScanDirection::Reverse => b.cmp(a),
    }
}
