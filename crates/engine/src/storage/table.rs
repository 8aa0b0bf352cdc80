//! Tables: a primary index from key to row, optional secondary ordered
//! indexes, and ownership of the rows; generic over the storage's row kind
//! ([`Record`] for the DRAM engines, Zen's Met-Cache rows).
//!
//! Rows are created as absent placeholders by get-or-insert (so that an
//! insert and a read of the same absent key conflict, as in DBX). A delete
//! makes a row absent; an absent row is later *unlinked* from the primary
//! index and freed (see "reclamation" below), so a workload that inserts
//! and deletes forever (a queue, TPC-C's NEW-ORDER) keeps its indexes and
//! memory bounded. The table frees the rows still indexed when dropped.
//!
//! # Reclamation of absent rows
//!
//! A transaction that leaves a row absent (it deleted it, or created it as a
//! placeholder and did not insert) queues it with its worker's
//! `RowReclaimer`. At its first commits in a later epoch (a batch at a
//! time, so a hot missing key is not unlinked and recreated by every
//! reader; a row the storage asks to wait comes back an epoch later) the
//! worker tries the row's lock (never waits); if the row is still absent,
//! not UNPERSISTED, and the storage agrees (its delete is durable; for Zen, no tombstone references
//! it), the worker removes the primary-index entry if it still maps to this
//! row, stores [`REMOVED`] (which unlocks) and retires the row through the
//! epochs; it is freed once no transaction can hold it.
//!
//! *Phantom protection is kept.* A transaction that read the row (absent)
//! holds its earlier word, which differs from `REMOVED`, so it fails
//! validation if the row is unlinked before it commits; a reader that meets
//! a `REMOVED` row looks the key up again (and gets or makes the live row).
//! A scan that covered the row's leaf sees the removal as a leaf-version
//! change. A writer that buffered an insert into the row locks it at commit
//! and fails validation the same way, so no insert is ever installed into an
//! unlinked row. Secondary-index entries never point at an absent row: a
//! commit removes the entries of a row's old value when it deletes the row
//! or changes a secondary key (under the row's lock).
//!
//! Explained in docs/concurrency.md ("Reclamation of absent rows", "Scans").

use crate::epoch::{DeferredFree, Epochs};
use crate::error::{DbError, DbResult};
use crate::index::{Finger, HashIndex, IndexError, LeafChange, LeafRef, OrderedIndex, ScanDirection};
use crate::schema::{PrimaryIndexKind, TableId, TableSchema};
use crate::storage::record::{Record, RowKind, ABSENT, LOCKED, REMOVED, UNPERSISTED};
use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;
use std::sync::Arc;

/// The primary index of a table.
pub(crate) enum PrimaryIndex<R: RowKind> {
    Ordered(OrderedIndex),
    Hash(HashIndex<R>),
}

/// A table in DRAM over rows of kind `R`.
pub struct Table<R: RowKind = Record> {
    pub(crate) id: TableId,
    pub(crate) schema: TableSchema,
    pub(crate) primary: PrimaryIndex<R>,
    pub(crate) secondaries: Vec<OrderedIndex>,
}

// SAFETY: the indexes hold row addresses; rows are Sync (atomics) and are
// freed only by the table's drop or through the epochs.
unsafe impl<R: RowKind> Send for Table<R> {}
// SAFETY: as above.
unsafe impl<R: RowKind> Sync for Table<R> {}

/// A scanned leaf and the version the scan saw, for phantom validation.
#[derive(Clone, Copy, Debug)]
pub struct ScannedLeaf {
    /// Which index (`None` = primary, `Some(i)` = secondary `i`).
    pub secondary: Option<u32>,
    /// The leaf.
    pub leaf: LeafRef,
    /// Its version when read.
    pub version: u64,
}

/// What [`Table::add_secondary`] did.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SecondaryAdded {
    /// The entry is new (or replaced another row's): the leaf-version
    /// change, when the insert knows it.
    Inserted(Option<LeafChange>),
    /// The entry was there, pointing at the row already.
    Present,
}

/// Length suffix that lets a secondary composite key yield its primary key.
const PK_LEN_SUFFIX: usize = 2;

/// # Safety
/// `raw` must be the address of a live row of this table's kind.
#[inline(always)]
unsafe fn row_from_raw<'a, R>(raw: u64) -> &'a R {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(raw as usize as *const R) }
}

fn raw_of<R>(row: NonNull<R>) -> u64 {
    row.as_ptr() as usize as u64
}

impl<R: RowKind> Table<R> {
    /// A table; `epochs` frees replaced hash-index arrays (tests may pass
    /// `None`: freed at drop).
    pub(crate) fn new(id: TableId, schema: TableSchema, epochs: Option<Arc<Epochs>>) -> DbResult<Self> {
        if schema.max_key_len == 0 || schema.max_key_len > u16::MAX as usize / 2 {
            return Err(DbError::InvalidConfig(format!(
                "table {}: key limit {} must be 1..={}",
                schema.name,
                schema.max_key_len,
                u16::MAX / 2
            )));
        }
        let primary = match schema.primary {
            PrimaryIndexKind::Ordered => PrimaryIndex::Ordered(OrderedIndex::new(schema.max_key_len)),
            PrimaryIndexKind::Hash => PrimaryIndex::Hash(HashIndex::new(schema.max_key_len, epochs)),
        };
        let secondaries =
            schema.secondaries.iter().map(|_| OrderedIndex::new(secondary_max_key_len(&schema))).collect();
        Ok(Self { id, schema, primary, secondaries })
    }

    /// Table id.
    pub fn id(&self) -> TableId {
        self.id
    }

    /// Table schema.
    pub fn schema(&self) -> &TableSchema {
        &self.schema
    }

    fn key_error(&self, error: IndexError) -> DbError {
        match error {
            IndexError::KeyTooLong { len, max } => DbError::KeyTooLong { table: self.schema.name.clone(), len, max },
        }
    }

    pub(crate) fn check_key(&self, key: &[u8]) -> DbResult<()> {
        if key.len() > self.schema.max_key_len {
            return Err(DbError::KeyTooLong {
                table: self.schema.name.clone(),
                len: key.len(),
                max: self.schema.max_key_len,
            });
        }
        Ok(())
    }

    pub(crate) fn check_value(&self, value: &[u8]) -> DbResult<()> {
        if value.len() > self.schema.max_value_len {
            return Err(DbError::ValueTooLarge {
                table: self.schema.name.clone(),
                len: value.len(),
                max: self.schema.max_value_len,
            });
        }
        Ok(())
    }

    /// The row of `key`, if indexed. The row stays valid while the caller
    /// is announced in an epoch (or no reclamation runs).
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<&R> {
        let raw = match &self.primary {
            PrimaryIndex::Ordered(index) => index.get(key)?,
            PrimaryIndex::Hash(index) => raw_of(index.get(key)?),
        };
        // SAFETY: indexed rows are alive (see the module docs).
        Some(unsafe { row_from_raw(raw) })
    }

    /// Starts loading the row of `key` into the cache without waiting (hash
    /// tables; `None` for ordered ones, whose descent is the cost): the
    /// row's header and up to `value_len` bytes after it. Returns the row
    /// (by its hash tag, unverified: rarely another live row), whose
    /// [`RowKind::prefetch_value`] the caller issues (at once, or later
    /// when the row keeps its value elsewhere: issued at once it would
    /// wait for the row's miss; a batch of hints issues every row first,
    /// then every value).
    #[inline]
    pub(crate) fn prefetch_row(&self, key: &[u8], value_len: usize) -> Option<&R> {
        let PrimaryIndex::Hash(index) = &self.primary else { return None };
        // The probe usually hits the last-level cache; only the row is
        // prefetched, so a batch of hints overlaps the rows' misses. The
        // key is not compared: that would wait for the row's miss.
        let entry = index.get_unverified(key)?;
        // Header, key and value (the value follows the key inline).
        let lines = (64 + key.len() + value_len).div_ceil(64).min(16);
        crate::index::hash::prefetch_lines(entry.as_ptr() as *const u8, lines);
        // SAFETY: indexed rows are alive (see the module docs).
        Some(unsafe { entry.as_ref() })
    }

    /// Whether the primary index is ordered (a B+tree).
    #[inline]
    pub(crate) fn is_ordered(&self) -> bool {
        matches!(self.primary, PrimaryIndex::Ordered(_))
    }

    /// The row of `key`, inserting an absent placeholder (with room for a
    /// value of `value_capacity` bytes) if needed. Returns the row, whether
    /// it was inserted, and (ordered tables) the leaf-version change the
    /// insert caused.
    #[inline]
    pub(crate) fn get_or_insert(&self, key: &[u8], value_capacity: usize) -> DbResult<(&R, bool, Option<LeafChange>)> {
        self.get_or_insert_near(key, value_capacity, None)
    }

    /// [`get_or_insert`](Self::get_or_insert) starting, in an ordered
    /// table, from the leaf `finger` remembers (see [`Finger`]); hash
    /// tables ignore it.
    #[inline]
    pub(crate) fn get_or_insert_near(
        &self,
        key: &[u8],
        value_capacity: usize,
        finger: Option<&mut Finger>,
    ) -> DbResult<(&R, bool, Option<LeafChange>)> {
        let (raw, inserted, change) = match &self.primary {
            PrimaryIndex::Ordered(index) => {
                let result = index
                    .get_or_insert_near(key, || raw_of(R::allocate(key, value_capacity)), finger)
                    .map_err(|e| self.key_error(e))?;
                (result.value, result.inserted, result.leaf_change)
            }
            PrimaryIndex::Hash(index) => {
                let (row, inserted) = index
                    .get_or_insert_with(key, || R::allocate(key, value_capacity))
                    .map_err(|e| self.key_error(e))?;
                (raw_of(row), inserted, None)
            }
        };
        // SAFETY: indexed rows are alive.
        Ok((unsafe { row_from_raw(raw) }, inserted, change))
    }

    /// Removes the primary-index entry of `row` (locked by the caller and
    /// absent) if `key` still maps to it; see "reclamation".
    pub(crate) fn unlink(&self, key: &[u8], row: &R) -> bool {
        debug_assert!(row.word() & LOCKED != 0 && row.word() & ABSENT != 0);
        let raw = row as *const R as usize as u64;
        match &self.primary {
            PrimaryIndex::Ordered(index) => index.remove_if(key, raw),
            PrimaryIndex::Hash(index) => index.remove_if(key, NonNull::from(row)),
        }
    }

    /// Adds `row` (already holding the row) under `key` in every secondary
    /// index.
    pub(crate) fn index_secondaries(&self, key: &[u8], value: &[u8], row: &R) -> DbResult<()> {
        for position in 0..self.schema.secondaries.len() {
            let composite = secondary_index_key(&self.schema, position as u32, key, value);
            self.secondaries[position]
                .insert(&composite, row as *const R as usize as u64)
                .map_err(|e| self.key_error(e))?;
        }
        Ok(())
    }

    /// Removes the secondary entries of `row`'s value `old` whose key
    /// `new` (the row's next value; `None` for a delete) does not keep.
    /// Called under the row's lock.
    pub(crate) fn unindex_secondaries(&self, key: &[u8], old: &[u8], new: Option<&[u8]>, row: &R) {
        self.stale_secondaries(key, old, new, |position, old_key| {
            self.remove_secondary(position, &old_key, row);
        });
    }

    /// Visits the secondary entries (index, composite key) of value `old`
    /// of the row under `key` that its next value `new` (`None`: a
    /// delete) does not keep.
    pub(crate) fn stale_secondaries(
        &self,
        key: &[u8],
        old: &[u8],
        new: Option<&[u8]>,
        mut visit: impl FnMut(u32, Vec<u8>),
    ) {
        for position in 0..self.schema.secondaries.len() as u32 {
            let old_key = secondary_index_key(&self.schema, position, key, old);
            if new.is_some_and(|new| secondary_index_key(&self.schema, position, key, new) == old_key) {
                continue;
            }
            visit(position, old_key);
        }
    }

    /// Removes the entry `composite` of secondary index `position` if it
    /// points at `row`.
    pub(crate) fn remove_secondary(&self, position: u32, composite: &[u8], row: &R) -> bool {
        self.secondaries[position as usize].remove_if(composite, row as *const R as usize as u64)
    }

    /// Adds `row` under `composite` in secondary index `position` unless
    /// the entry is there already (a stale entry the row takes back). An
    /// entry of another row under the same composite key belongs to a row
    /// with this primary key that reclamation is unlinking (its unlink
    /// removes it only if it still points there): it is replaced.
    pub(crate) fn add_secondary(&self, position: u32, composite: &[u8], row: &R) -> DbResult<SecondaryAdded> {
        let raw = row as *const R as usize as u64;
        let index = &self.secondaries[position as usize];
        let outcome = index.get_or_insert_with_info(composite, || raw).map_err(|e| self.key_error(e))?;
        Ok(match outcome.leaf_change {
            Some(change) => SecondaryAdded::Inserted(Some(change)),
            None if outcome.value == raw => SecondaryAdded::Present,
            None => {
                // Overwriting keeps the leaf's version; the entry may also
                // have gone meanwhile, and then this inserts it afresh.
                index.insert(composite, raw).map_err(|e| self.key_error(e))?;
                SecondaryAdded::Inserted(None)
            }
        })
    }

    /// Raises the read timestamp of a scanned leaf to `ts` (timestamp
    /// ordering's range reads; `OrderedIndex::raise_read_ts`).
    pub(crate) fn raise_leaf_read_ts(&self, leaf: &ScannedLeaf, ts: u64) {
        if let Some(index) = self.ordered_index(leaf.secondary) {
            index.raise_read_ts(leaf.leaf, ts);
        }
    }

    /// The ordered index `secondary` (or the primary), if it is one.
    fn ordered_index(&self, secondary: Option<u32>) -> Option<&OrderedIndex> {
        match (secondary, &self.primary) {
            (None, PrimaryIndex::Ordered(index)) => Some(index),
            (None, PrimaryIndex::Hash(_)) => None,
            (Some(position), _) => self.secondaries.get(position as usize),
        }
    }

    /// The read timestamp of `leaf` of the primary index (`None`) or a
    /// secondary one (`OrderedIndex::read_ts`).
    pub(crate) fn leaf_read_ts(&self, secondary: Option<u32>, leaf: LeafRef) -> u64 {
        self.ordered_index(secondary).map_or(0, |index| index.read_ts(leaf))
    }

    /// The largest timestamp of a transaction that scanned the range of
    /// `key` in the primary index (`None`) or a secondary one; 0 for a
    /// hash index, which has no ranges.
    pub(crate) fn gap_read_ts(&self, secondary: Option<u32>, key: &[u8]) -> u64 {
        self.ordered_index(secondary).map_or(0, |index| index.gap_read_ts(key))
    }

    /// The ordered index a scan of `secondary` (or the primary) reads.
    fn scan_index(&self, secondary: Option<u32>) -> DbResult<&OrderedIndex> {
        match secondary {
            None => match &self.primary {
                PrimaryIndex::Ordered(index) => Ok(index),
                PrimaryIndex::Hash(_) => Err(DbError::InvalidConfig(format!(
                    "table {} has a hash primary index: range scans are not supported",
                    self.schema.name
                ))),
            },
            Some(position) => self.secondaries.get(position as usize).ok_or_else(|| DbError::UnknownIndex {
                table: self.schema.name.clone(),
                index: format!("#{position}"),
            }),
        }
    }

    /// Scans the primary index (ordered tables only) or secondary index
    /// `secondary` in key order; `visit` gets the primary key, the index's
    /// own key (the composite for a secondary index) and the row, and
    /// returns false to stop. Every leaf examined is reported to
    /// `leaf_visit` before its entries are visited.
    pub(crate) fn scan(
        &self,
        secondary: Option<u32>,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        mut visit: impl FnMut(&[u8], &[u8], &R) -> bool,
        mut leaf_visit: impl FnMut(ScannedLeaf),
    ) -> DbResult<()> {
        let index = self.scan_index(secondary)?;
        index.scan(
            range,
            direction,
            usize::MAX,
            |key, raw| {
                // SAFETY: indexed rows are alive.
                let row = unsafe { row_from_raw(raw) };
                let primary_key = if secondary.is_some() { primary_key_of_composite(key) } else { key };
                visit(primary_key, key, row)
            },
            |leaf, version| leaf_visit(ScannedLeaf { secondary, leaf, version }),
        );
        Ok(())
    }

    /// Whether a scanned leaf still has the version the scan saw.
    pub(crate) fn validate_leaf(&self, leaf: &ScannedLeaf) -> bool {
        let index = match leaf.secondary {
            None => match &self.primary {
                PrimaryIndex::Ordered(index) => index,
                PrimaryIndex::Hash(_) => return true,
            },
            Some(position) => &self.secondaries[position as usize],
        };
        index.validate_leaf(leaf.leaf, leaf.version)
    }

    /// Visits every indexed (key, row), in key order for ordered tables.
    pub fn for_each_row(&self, mut visit: impl FnMut(&[u8], &R)) {
        match &self.primary {
            PrimaryIndex::Ordered(index) => index.scan(
                (Bound::Unbounded, Bound::Unbounded),
                ScanDirection::Forward,
                usize::MAX,
                |key, raw| {
                    // SAFETY: indexed rows are alive.
                    visit(key, unsafe { row_from_raw(raw) });
                    true
                },
                |_, _| {},
            ),
            PrimaryIndex::Hash(index) => index.for_each(|row| {
                // SAFETY: indexed rows are alive.
                let row = unsafe { row.as_ref() };
                visit(row.key(), row)
            }),
        }
    }

    /// Rows indexed now (absent placeholders included); exact when quiet.
    pub fn indexed_rows(&self) -> usize {
        match &self.primary {
            PrimaryIndex::Ordered(index) => index.len(),
            PrimaryIndex::Hash(index) => index.len(),
        }
    }

    /// Secondary index position by name.
    pub fn secondary_position(&self, name: &str) -> Option<u32> {
        self.schema.secondaries.iter().position(|s| s.name == name).map(|p| p as u32)
    }

    /// Unlinks and frees every absent row at once: only while no other
    /// thread uses the table (end of recovery).
    pub(crate) fn drop_absent_rows_quiescent(&self) -> usize {
        let mut absent = Vec::new();
        self.for_each_row(|key, row| {
            if row.word() & ABSENT != 0 {
                absent.push((key.to_vec(), NonNull::from(row)));
            }
        });
        let mut dropped = 0;
        for (key, row) in absent {
            // SAFETY: alone: nobody else holds the row.
            let row_ref = unsafe { row.as_ref() };
            let Some(word) = row_ref.try_lock() else { continue };
            if self.unlink(&key, row_ref) {
                row_ref.store_word(REMOVED);
                // SAFETY: unlinked, and no other thread can hold it.
                unsafe { R::free(row) };
                dropped += 1;
            } else {
                row_ref.store_word(word);
            }
        }
        dropped
    }
}

impl<R: RowKind> Drop for Table<R> {
    fn drop(&mut self) {
        let mut rows = Vec::new();
        self.for_each_row(|_, row| rows.push(NonNull::from(row)));
        for row in rows {
            // SAFETY: the table is being dropped; the indexes hold the only
            // references and are dropped right after without dereferencing
            // rows (unlinked rows were retired and are freed by their
            // reclaimer, never here).
            unsafe { R::free(row) };
        }
    }
}

/// A row queued for reclamation or retired.
struct RowPtr<R>(NonNull<R>);

// SAFETY: the pointer is only dereferenced by the reclaimer that owns the
// queue entry, under the rules of the module documentation.
unsafe impl<R> Send for RowPtr<R> {}

/// Whether a storage allows unlinking an absent row now (`word` is its
/// locked-over word): the DRAM engines wait until the row's delete is
/// durable (a checkpoint must not lose a delete whose log could still be
/// lost), Zen until no tombstone references the row.
pub(crate) trait ReclaimPolicy<R: RowKind> {
    /// See the trait docs.
    fn may_unlink(&self, row: &R, word: u64) -> bool;
    /// Called after `row` of `table` was unlinked (and marked `REMOVED`).
    fn unlinked(&self, _table: &Table<R>, _row: &R) {}
}

/// Rows examined per call of [`RowReclaimer::run`].
const RECLAIM_BATCH: usize = 8;

/// One worker's reclamation of absent rows (module docs) and of the value
/// buffers its commits replaced.
pub(crate) struct RowReclaimer<R: RowKind> {
    candidates: VecDeque<(u64, TableId, RowPtr<R>)>,
    retired_rows: DeferredFree<RowPtr<R>>,
    /// Value buffers replaced by commits (DRAM storage).
    pub(crate) retired_values: DeferredFree<crate::storage::record::RetiredValue>,
    /// Rows unlinked by this reclaimer (statistics).
    pub(crate) unlinked: u64,
}

impl<R: RowKind> Default for RowReclaimer<R> {
    fn default() -> Self {
        Self {
            candidates: VecDeque::new(),
            retired_rows: DeferredFree::default(),
            retired_values: DeferredFree::default(),
            unlinked: 0,
        }
    }
}

impl<R: RowKind> RowReclaimer<R> {
    /// Queues `row` of `table`, left absent by a transaction of `epoch`.
    pub(crate) fn note_absent(&mut self, epoch: u64, table: TableId, row: &R) {
        // At most one queue holds a row: only its owner may free it.
        if row.queued_flag().swap(1, std::sync::atomic::Ordering::AcqRel) == 0 {
            self.candidates.push_back((epoch, table, RowPtr(NonNull::from(row))));
        }
    }

    /// Rows waiting to be examined or freed.
    pub(crate) fn backlog(&self) -> usize {
        self.candidates.len() + self.retired_rows.len()
    }

    /// Examines up to a batch of candidates queued before the current epoch
    /// and frees what the horizon allows. The caller is announced in an
    /// epoch (candidates are alive: only their reclaimer frees them).
    pub(crate) fn run(&mut self, tables: &[Table<R>], epochs: &Epochs, policy: &impl ReclaimPolicy<R>) {
        let global = epochs.global();
        let mut unlinked: Vec<RowPtr<R>> = Vec::new();
        for _ in 0..RECLAIM_BATCH {
            // Candidates wait for a later epoch (module docs).
            let Some((epoch, _, _)) = self.candidates.front() else { break };
            if *epoch >= global {
                break;
            }
            let (_, table_id, row) = self.candidates.pop_front().expect("checked");
            // SAFETY: a queued row is alive: rows are freed only by the
            // reclaimer that unlinked them, after the horizon passed.
            let row_ref = unsafe { row.0.as_ref() };
            let dequeue = || row_ref.queued_flag().store(0, std::sync::atomic::Ordering::Release);
            let word = row_ref.word();
            debug_assert_ne!(word, REMOVED, "only the queue holding a row unlinks it");
            if word & ABSENT == 0 {
                dequeue(); // present again; its next deleter queues it
                continue;
            }
            let Some(word) = row_ref.try_lock() else {
                dequeue(); // a writer holds it; queued again if it stays absent
                continue;
            };
            // The word may have changed between the check and the lock.
            if word & ABSENT == 0 || word & UNPERSISTED != 0 {
                row_ref.unlock();
                dequeue();
                continue;
            }
            if !policy.may_unlink(row_ref, word) {
                row_ref.unlock();
                self.candidates.push_back((global, table_id, row));
                continue;
            }
            let table = &tables[table_id.0 as usize];
            if table.unlink(row_ref.key(), row_ref) {
                // IMPORTANT: REMOVED differs from every word a reader of the
                // row can hold, so each of them fails validation.
                row_ref.store_word(REMOVED);
                policy.unlinked(table, row_ref);
                unlinked.push(row);
            } else {
                row_ref.unlock();
                dequeue();
            }
        }
        if !unlinked.is_empty() {
            // One stamp for the batch, taken after every unlink above.
            let stamp = epochs.stamp();
            self.unlinked += unlinked.len() as u64;
            for row in unlinked {
                self.retired_rows.push(stamp, row);
            }
        }
        self.collect(epochs.horizon());
    }

    /// Frees what was retired below `horizon`.
    pub(crate) fn collect(&mut self, horizon: u64) {
        // SAFETY: the horizon passed their stamps: no reader holds them.
        self.retired_rows.collect(horizon, |row| unsafe { R::free(row.0) });
        // SAFETY: as above.
        self.retired_values.collect(horizon, |value| unsafe { value.free() });
    }

    /// Frees everything retired and forgets the candidates: only when no
    /// other thread can hold any row (the engine is being dropped).
    pub(crate) fn free_all_quiescent(&mut self) {
        self.collect(u64::MAX);
        self.candidates.clear();
    }

    /// Moves everything into `other` (a worker going away hands its queues
    /// to the engine).
    pub(crate) fn hand_over(&mut self, other: &mut RowReclaimer<R>) {
        other.candidates.extend(self.candidates.drain(..));
        for (stamp, row) in self.retired_rows.drain() {
            other.retired_rows.push_unordered(stamp, row);
        }
        for (stamp, value) in self.retired_values.drain() {
            other.retired_values.push_unordered(stamp, value);
        }
        other.unlinked += std::mem::take(&mut self.unlinked);
    }
}

/// Whether writing `value` under `key` in a table of `schema` needs new
/// secondary-index entries: the row is new (`old` is `None`) or a secondary
/// key changed. Fails, before anything is installed, when a secondary key
/// is too long. Shared by every engine with secondary indexes.
pub(crate) fn secondaries_to_index(
    schema: &TableSchema,
    key: &[u8],
    value: &[u8],
    old: Option<&[u8]>,
) -> DbResult<bool> {
    let mut changed = false;
    for secondary in &schema.secondaries {
        let new_key = (secondary.key)(key, value);
        let len = new_key.len() + key.len() + PK_LEN_SUFFIX;
        let max = secondary_max_key_len(schema);
        if len > max {
            return Err(DbError::KeyTooLong { table: format!("{}.{}", schema.name, secondary.name), len, max });
        }
        changed |= old.is_none_or(|old| (secondary.key)(key, old) != new_key);
    }
    Ok(changed)
}

/// Longest composite key a secondary index of `schema` accepts.
pub(crate) fn secondary_max_key_len(schema: &TableSchema) -> usize {
    schema.max_key_len * 3 + PK_LEN_SUFFIX
}

/// The key of row `(primary_key, value)` in secondary index `position`.
pub(crate) fn secondary_index_key(schema: &TableSchema, position: u32, primary_key: &[u8], value: &[u8]) -> Vec<u8> {
    let secondary = &schema.secondaries[position as usize];
    secondary_composite(&(secondary.key)(primary_key, value), primary_key)
}

/// Whether the secondary-index entry `composite` of index `position` still
/// describes the row `(primary_key, value)`. A scan can meet an entry whose
/// row changed its secondary key since the leaf was read (the commit that
/// changed it removes the entry, and the leaf-version change aborts the
/// scanner at validation), or, under the multi-version protocols, an entry
/// kept for older snapshots or added for a newer version than the one the
/// scan reads (docs/concurrency.md): scans skip such entries.
pub(crate) fn secondary_entry_is_current(
    schema: &TableSchema,
    position: u32,
    composite: &[u8],
    primary_key: &[u8],
    value: &[u8],
) -> bool {
    let secondary = &schema.secondaries[position as usize];
    let secondary_len = composite.len().saturating_sub(primary_key.len() + PK_LEN_SUFFIX);
    (secondary.key)(primary_key, value) == composite[..secondary_len]
}

/// Whether `key` lies in `range`.
pub(crate) fn in_range(range: (Bound<&[u8]>, Bound<&[u8]>), key: &[u8]) -> bool {
    range.contains(&key)
}

/// `secondary key || primary key || len(primary key) as u16 BE`, sized
/// once (growing the extractor's vector reallocated it on every write).
pub(crate) fn secondary_composite(secondary_key: &[u8], primary_key: &[u8]) -> Vec<u8> {
    let mut composite = Vec::with_capacity(secondary_key.len() + primary_key.len() + PK_LEN_SUFFIX);
    composite.extend_from_slice(secondary_key);
    composite.extend_from_slice(primary_key);
    composite.extend_from_slice(&(primary_key.len() as u16).to_be_bytes());
    composite
}

/// The primary key inside a secondary composite key.
pub(crate) fn primary_key_of_composite(composite: &[u8]) -> &[u8] {
    let split = composite.len() - PK_LEN_SUFFIX;
    let len = u16::from_be_bytes([composite[split], composite[split + 1]]) as usize;
    &composite[split - len..split]
}
