//! A transaction's state, written once over any row kind and any protocol
//! ([`TxState`]): the read, write and node sets, one-pass scans and the
//! commit's steps, calling the hooks of the worker's protocol
//! (`cc::protocols`) where protocols differ. The DRAM engines' worker
//! (`engines::dram::OccWorker`: silo, group-commit and the DBXN family,
//! which differ only in their durability policy) and Zen's worker (its
//! Met-Cache rows, its own persist step) both run it.
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
//! # Commit (Silo §4.4; DBX's software path; the protocol's hooks named)
//! 1. lock the write set in a global order (row address): hook `lock`;
//! 2. read the global epoch (the serialization point);
//! 3. validate the read set (version unchanged, not locked by another) and
//!    the scanned leaves (phantoms), and
//! 4. pick a TID above everything read or written and in the current
//!    epoch: hook `commit_timestamp` (`validate` for a read-only attempt);
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
//!
//! Explained in docs/concurrency.md (and ARCHITECTURE.md §2, §5).

use crate::cc::concurrency::Concurrency;
use crate::cc::position_index::PositionIndex;
use crate::cc::protocols::phytm::{PathState, TxPath, LINES_PER_ACCESS};
use crate::cc::protocols::{ProtocolTx, TidBounds};
use crate::cc::tx_sets::{LeafEntry, TxSets};
use crate::cc::write_set::{WriteSet, WriteValue};
use crate::error::{AbortReason, DbError, TxError, TxResult};
use crate::index::{Finger, LeafChange, ScanDirection};
use crate::schema::TableId;
use crate::storage::record::{RowKind, ABSENT, REMOVED};
use crate::storage::request::{ScanRequest, WriteOp};
use crate::storage::table::{self, RowReclaimer, Table};
use std::cmp::Ordering as KeyOrdering;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Lookups repeated after meeting an unlinked row before giving up.
const RELOOKUPS: u32 = 64;

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

/// One worker's transaction attempt over rows `R`: the read, write and
/// node sets (`sets`, which it dereferences to: the part the protocols'
/// hooks read, `cc::tx_sets`), and the state of the worker's protocol,
/// whose hooks it calls.
pub(crate) struct TxState<R: RowKind> {
    /// The worker's state of the engine's protocol.
    pub(in crate::cc) protocol: ProtocolTx,
    /// Whether commits keep the versions they replace.
    keeps_versions: bool,
    /// The read, write and node sets.
    pub(in crate::cc) sets: TxSets<R>,
    scratch: Vec<u8>,
    /// The leaves a scan examines, kept between scans (the scan's visitor
    /// borrows the state, so they join the node set after it).
    scan_leaves: Vec<LeafEntry>,
    /// This worker's reclamation of absent rows and replaced values.
    pub(crate) reclaimer: RowReclaimer<R>,
    /// Per table (by id): the leaf this worker's last point operation on
    /// the table's ordered index ended in. Kept across transactions: a
    /// finger is checked against the leaf's version before use.
    fingers: Vec<Finger>,
    /// Rows of hash tables the body hinted at (`Transaction::prefetch`),
    /// in the order of the hints, and how many of them point accesses
    /// used: an access in the hints' order takes its row from here instead
    /// of hashing and probing the index again (`TxState::hinted_row`).
    hints: Vec<(TableId, NonNull<R>)>,
    hints_used: usize,
}

// SAFETY: the raw row pointers refer to rows owned by tables that outlive
// the worker (the engine holds them in an Arc) and are freed only through
// the epochs, which the worker's announcements hold back.
unsafe impl<R: RowKind> Send for TxState<R> {}

impl<R: RowKind> Deref for TxState<R> {
    type Target = TxSets<R>;

    #[inline]
    fn deref(&self) -> &TxSets<R> {
        &self.sets
    }
}

impl<R: RowKind> DerefMut for TxState<R> {
    #[inline]
    fn deref_mut(&mut self) -> &mut TxSets<R> {
        &mut self.sets
    }
}

impl<R: RowKind> TxState<R> {
    /// The state of worker `worker` under `cc`.
    pub(crate) fn new(cc: &Concurrency, worker: usize) -> Self {
        Self {
            protocol: cc.worker(worker),
            keeps_versions: cc.versions().is_some(),
            sets: TxSets {
                reads: Vec::new(),
                unique_reads: false,
                read_positions: PositionIndex::default(),
                writes: WriteSet::default(),
                leaves: Vec::new(),
                created: Vec::new(),
                added_secondaries: Vec::new(),
            },
            scratch: Vec::new(),
            scan_leaves: Vec::new(),
            reclaimer: RowReclaimer::default(),
            fingers: Vec::new(),
            hints: Vec::new(),
            hints_used: 0,
        }
    }

    /// Keeps each row once in the read set (see `TxSets::reads`).
    pub(crate) fn keep_reads_unique(&mut self) {
        self.sets.unique_reads = true;
    }

    /// This worker's finger into table `table_id`'s ordered index.
    #[inline]
    fn finger(&mut self, table_id: TableId) -> &mut Finger {
        let at = table_id.0 as usize;
        if at >= self.fingers.len() {
            self.grow_fingers(at + 1);
        }
        &mut self.fingers[at]
    }

    #[cold]
    fn grow_fingers(&mut self, len: usize) {
        self.fingers.resize(len, Finger::default());
    }
}

/// The table `id`, or a typed error.
#[inline]
pub(crate) fn table_of<R: RowKind>(tables: &[Table<R>], id: TableId) -> TxResult<&Table<R>> {
    tables.get(id.0 as usize).ok_or_else(|| TxError::Db(DbError::UnknownTable(format!("#{}", id.0))))
}

impl<R: RowKind> TxState<R> {
    /// Starts attempt number `attempt` (1 for a new transaction) in the
    /// worker's announced `epoch`.
    pub(crate) fn begin(&mut self, attempt: u32, epoch: u64) {
        self.clear();
        self.protocol.begin(attempt, epoch);
    }

    /// Starts a read-only attempt at the oldest snapshot any transaction
    /// holds (`zen+`, zen-plus.txt §4.1.2: the paper's global minimum
    /// Tx-CTS − 1; `cc::versions`). Needs a multi-version protocol whose
    /// writers commit above every announced snapshot (Hekaton's).
    pub(crate) fn begin_snapshot_read_only(&mut self) {
        self.clear();
        self.protocol.begin_oldest_snapshot();
    }

    /// Whether commits must keep the versions they replace
    /// ([`TxState::preserve_version`]).
    pub(crate) fn keeps_versions(&self) -> bool {
        self.keeps_versions
    }

    /// Keeps the version of `row` (locked by this commit, `locked_word`,
    /// value `old` when present) that the commit at `tid` replaces.
    pub(crate) fn preserve_version(&mut self, row: &R, locked_word: u64, old: Option<&[u8]>, tid: u64) {
        if let Some(snapshot) = self.protocol.snapshot() {
            snapshot.preserve(row as *const R as usize, locked_word, old, tid);
        }
    }

    /// Forgets the attempt (keeps the buffers), releasing its locks and
    /// its snapshot.
    pub(crate) fn clear(&mut self) {
        self.protocol.abort();
        self.reads.clear();
        self.read_positions.clear();
        self.writes.clear();
        self.leaves.clear();
        self.created.clear();
        self.added_secondaries.clear();
        self.hints.clear();
        self.hints_used = 0;
    }

    /// Notes that the body hinted at `row` of hash table `table` (found by
    /// its hash tag, key not compared), so the access that follows the
    /// hints' order can skip its index lookup. Only while the attempt is
    /// announced in its epoch: the rows must stay allocated until it ends.
    #[inline]
    pub(crate) fn note_hint(&mut self, table: TableId, row: &R) {
        self.hints.push((table, NonNull::from(row)));
    }

    /// The rows hinted in this attempt, in the order of the hints.
    #[inline]
    pub(crate) fn hinted_rows(&self) -> &[(TableId, NonNull<R>)] {
        &self.hints
    }

    /// The next hinted row, if it is `key`'s in `table`: the row the index
    /// maps `key` to, or one unlinked since the hint, whose word is then
    /// `REMOVED` for good (the caller's read sees it and looks `key` up
    /// again, past this hint).
    #[inline]
    fn hinted_row<'t>(&mut self, table_id: TableId, key: &[u8]) -> Option<&'t R> {
        let &(table, row) = self.hints.get(self.hints_used)?;
        // SAFETY: hinted during this attempt, which is announced in its
        // epoch until the hints are cleared (`clear`, at every attempt's
        // start and end): an unlinked row is freed only after every
        // attempt announced when it was unlinked has ended.
        let row = unsafe { row.as_ref() };
        if table != table_id || row.key() != key {
            return None;
        }
        self.hints_used += 1;
        Some(row)
    }

    /// Releases the attempt's lock-table locks now (a broken variant of
    /// the crash harness's self-test releases them before its log).
    pub(crate) fn release_locks(&mut self) {
        self.protocol.release_locks();
    }

    /// Queues the rows this attempt left absent for reclamation, then
    /// forgets the attempt. `epoch` is the worker's current epoch.
    pub(crate) fn finish(&mut self, epoch: u64, tables: &[Table<R>]) {
        for &(table, row, _) in &self.sets.created {
            // SAFETY: see WriteEntry::row.
            let row = unsafe { row.as_ref() };
            if row.word() & ABSENT != 0 {
                self.reclaimer.note_absent(epoch, table, row);
            }
        }
        for entry in self.sets.writes.entries() {
            if entry.row().word() & ABSENT != 0 && !self.sets.created.iter().any(|(_, row, _)| *row == entry.row) {
                self.reclaimer.note_absent(epoch, entry.table, entry.row());
            }
        }
        self.clear();
        self.protocol.finish(tables);
    }

    /// Whether the attempt wrote nothing.
    pub(crate) fn is_read_only(&self) -> bool {
        self.writes.is_empty()
    }

    /// Silo's node-set update for this transaction's own inserts: if it
    /// scanned the leaf at exactly the version before the insert, move it
    /// forward, so its own insert is not taken for a phantom.
    pub(crate) fn note_own_insert(
        leaves: &mut [LeafEntry],
        table: TableId,
        secondary: Option<u32>,
        change: Option<LeafChange>,
    ) {
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
    #[inline(always)]
    fn lookup<'t>(
        &mut self,
        table: &'t Table<R>,
        table_id: TableId,
        key: &[u8],
        value_capacity: usize,
    ) -> TxResult<&'t R> {
        // Hash tables have no leaves to point into; a hinted row needs no
        // lookup.
        let finger = if table.is_ordered() {
            Some(self.finger(table_id))
        } else {
            if let Some(row) = self.hinted_row(table_id, key) {
                return Ok(row);
            }
            None
        };
        let (row, inserted, change) = table.get_or_insert_near(key, value_capacity, finger)?;
        if inserted {
            self.created.push((table_id, NonNull::from(row), change.map(|change| change.leaf)));
            Self::note_own_insert(&mut self.leaves, table_id, None, change);
        }
        Ok(row)
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
        self.protocol.read(self.reads.len() + self.writes.len(), row as *const R as usize).map_err(TxError::Abort)?;
        let word = store.read(row, out).map_err(TxError::Abort)?;
        if word == REMOVED {
            return Ok(Seen::Removed);
        }
        // Multi-version: a version newer than the snapshot is replaced by
        // the one valid at it (or none: the key was absent then).
        let word = self.protocol.version_at(row as *const R as usize, word, out).unwrap_or(word);
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

    /// The protocol's rule for a row about to be written (2PL: the
    /// exclusive lock, an upgrade of the shared lock its read took;
    /// multi-version: refused when a newer version exists, ...).
    #[inline]
    fn lock_for_write(&mut self, row: &R) -> TxResult<()> {
        let accesses = self.reads.len() + self.writes.len();
        self.protocol.write(accesses, row as *const R as usize, row.word()).map_err(TxError::Abort)
    }

    /// Lines of cache a hardware attempt of this transaction touches (the
    /// footprint hint of its commit region).
    pub(crate) fn footprint_lines(&self) -> u32 {
        let lines = (self.reads.len() + self.writes.len()) as u64 * u64::from(LINES_PER_ACCESS);
        u32::try_from(lines).unwrap_or(u32::MAX)
    }

    /// The protocol's rule before a point access to `key` (`hstore`: the
    /// exclusive lock of its partition).
    #[inline]
    fn lock_partition(&mut self, table: &Table<R>, table_id: TableId, key: &[u8]) -> TxResult<()> {
        self.protocol.access_key(table_id, table.schema().partition_prefix, key).map_err(TxError::Abort)
    }

    /// The protocol's rule before a scan (`hstore`: the locks of the
    /// partitions it may touch).
    fn lock_partitions_for_scan(&mut self, table: &Table<R>, request: &ScanRequest<'_>) -> TxResult<()> {
        self.protocol.access_range(table.schema().partition_prefix, request).map_err(TxError::Abort)
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
        let mut leaves = std::mem::take(&mut self.scan_leaves);
        leaves.clear();
        let mut value = std::mem::take(&mut self.scratch);
        // `mvcc` registers its reads eagerly, ranges included (`cicada` at
        // validation): a later insert below the timestamp finds it.
        let raise_leaves = self.protocol.scan_read_ts();
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
        self.sets.leaves.append(&mut leaves);
        self.scan_leaves = leaves;
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
        self.protocol.lock(&mut self.sets.writes)
    }

    /// Unlocks the first `locked` writes without changing them.
    pub(crate) fn release(&self, locked: usize) {
        self.writes.unlock(locked);
    }

    /// Validates a read-only attempt (the protocol's read-set check and the
    /// node set).
    pub(crate) fn validate(&self, tables: &[Table<R>]) -> Result<(), AbortReason> {
        self.protocol.validate(&self.sets, tables)
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
        let bounds = TidBounds { max_locked: max_locked_tid, floor, epoch };
        let stamped = self.protocol.commit_timestamp(&self.sets, tables, bounds);
        if stamped.is_err() {
            self.remove_added_secondaries(tables);
        }
        stamped
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
        let valid = self.protocol.validate_reads(&self.sets, tables).and_then(|()| {
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
        if let Some(snapshot) = self.protocol.snapshot() {
            snapshot.versions().raise_clock(tid);
        }
        Ok(tid)
    }

    /// The path the attempt runs on (the PHyTM family; others run as
    /// software, STM).
    pub(crate) fn path(&mut self) -> TxPath {
        self.protocol.hybrid().map_or(TxPath::Stm, |phytm| phytm.path.path)
    }

    /// The attempt's path state (the PHyTM family only).
    pub(crate) fn path_state(&mut self) -> Option<&mut PathState> {
        self.protocol.hybrid().map(|phytm| &mut phytm.path)
    }
}

/// `a` before `b` in scan order.
fn in_order(direction: ScanDirection, a: &[u8], b: &[u8]) -> KeyOrdering {
    match direction {
        ScanDirection::Forward => a.cmp(b),
        ScanDirection::Reverse => b.cmp(a),
    }
}
