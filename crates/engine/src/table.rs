//! Tables: a primary index from key to [`Record`], optional secondary
//! ordered indexes, and ownership of the records.
//!
//! Records are created as absent placeholders by get-or-insert (so that an
//! insert and a read of the same absent key conflict, as in DBX) and are
//! never removed from the primary index while the table lives: a delete
//! makes the record absent. The table frees all records when dropped.

use crate::error::{DbError, DbResult};
use crate::index::{GetOrInsert, HashIndex, IndexError, LeafRef, OrderedIndex, ScanDirection};
use crate::record::{record_free, record_from_raw, record_into_raw, Record};
use crate::schema::{PrimaryIndexKind, TableId, TableSchema};
use std::ops::{Bound, RangeBounds};

/// The primary index of a table.
pub(crate) enum PrimaryIndex {
    Ordered(OrderedIndex),
    Hash(HashIndex),
}

/// A table in DRAM.
pub struct Table {
    pub(crate) id: TableId,
    pub(crate) schema: TableSchema,
    pub(crate) primary: PrimaryIndex,
    pub(crate) secondaries: Vec<OrderedIndex>,
}

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

/// Length suffix that lets a secondary composite key yield its primary key.
const PK_LEN_SUFFIX: usize = 2;

impl Table {
    pub(crate) fn new(id: TableId, schema: TableSchema) -> DbResult<Self> {
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
            PrimaryIndexKind::Hash => PrimaryIndex::Hash(HashIndex::new(schema.max_key_len)),
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

    /// The record of `key`, if the key was ever inserted.
    pub fn lookup(&self, key: &[u8]) -> Option<&Record> {
        let raw = match &self.primary {
            PrimaryIndex::Ordered(index) => index.get(key),
            PrimaryIndex::Hash(index) => index.get(key),
        }?;
        // SAFETY: records live as long as the table.
        Some(unsafe { record_from_raw(raw) })
    }

    /// The record of `key`, inserting an absent placeholder if needed.
    /// Returns the record, whether it was inserted, and (ordered tables) the
    /// leaf-version change the insert caused.
    pub fn get_or_insert(&self, key: &[u8]) -> DbResult<(&Record, bool, Option<crate::index::LeafChange>)> {
        let make = || record_into_raw(Record::placeholder());
        let mut made = None;
        let result = match &self.primary {
            PrimaryIndex::Ordered(index) => index
                .get_or_insert_with_info(key, || {
                    let raw = make();
                    made = Some(raw);
                    raw
                })
                .map_err(|e| self.key_error(e))?,
            PrimaryIndex::Hash(index) => {
                let (value, inserted) = index
                    .get_or_insert_with(key, || {
                        let raw = make();
                        made = Some(raw);
                        raw
                    })
                    .map_err(|e| self.key_error(e))?;
                GetOrInsert { value, inserted, leaf_change: None }
            }
        };
        debug_assert_eq!(made.is_some(), result.inserted);
        // SAFETY: records live as long as the table.
        Ok((unsafe { record_from_raw(result.value) }, result.inserted, result.leaf_change))
    }

    /// Adds `record` (already holding the row) under `key` in every
    /// secondary index.
    pub(crate) fn index_secondaries(&self, key: &[u8], value: &[u8], record: &Record) -> DbResult<()> {
        for (position, secondary) in self.schema.secondaries.iter().enumerate() {
            let composite = secondary_composite((secondary.key)(key, value), key);
            self.secondaries[position]
                .insert(&composite, record as *const Record as usize as u64)
                .map_err(|e| self.key_error(e))?;
        }
        Ok(())
    }

    /// Scans the primary index (ordered tables only) or secondary index
    /// `secondary`; `visit` gets the primary key, the index's own key (the
    /// composite for a secondary index) and the record.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scan(
        &self,
        secondary: Option<u32>,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8], &Record) -> bool,
        mut leaf_visit: impl FnMut(ScannedLeaf),
    ) -> DbResult<()> {
        let index = match secondary {
            None => match &self.primary {
                PrimaryIndex::Ordered(index) => index,
                PrimaryIndex::Hash(_) => {
                    return Err(DbError::InvalidConfig(format!(
                        "table {} has a hash primary index: range scans are not supported",
                        self.schema.name
                    )))
                }
            },
            Some(position) => self.secondaries.get(position as usize).ok_or_else(|| DbError::UnknownIndex {
                table: self.schema.name.clone(),
                index: format!("#{position}"),
            })?,
        };
        index.scan(
            range,
            direction,
            limit,
            |key, raw| {
                // SAFETY: records live as long as the table.
                let record = unsafe { record_from_raw(raw) };
                let primary_key = if secondary.is_some() { primary_key_of_composite(key) } else { key };
                visit(primary_key, key, record)
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

    /// Visits every (key, record), in key order for ordered tables.
    pub fn for_each_record(&self, mut visit: impl FnMut(&[u8], &Record)) {
        match &self.primary {
            PrimaryIndex::Ordered(index) => index.scan(
                (Bound::Unbounded, Bound::Unbounded),
                ScanDirection::Forward,
                usize::MAX,
                |key, raw| {
                    // SAFETY: records live as long as the table.
                    visit(key, unsafe { record_from_raw(raw) });
                    true
                },
                |_, _| {},
            ),
            PrimaryIndex::Hash(index) => index.for_each(|key, raw| {
                // SAFETY: records live as long as the table.
                visit(key, unsafe { record_from_raw(raw) })
            }),
        }
    }

    /// Secondary index position by name.
    pub fn secondary_position(&self, name: &str) -> Option<u32> {
        self.schema.secondaries.iter().position(|s| s.name == name).map(|p| p as u32)
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
    secondary_composite((secondary.key)(primary_key, value), primary_key)
}

/// Whether the secondary-index entry `composite` of index `position` still
/// describes the row `(primary_key, value)`. Entries are never removed (a
/// deleted and re-inserted row, or one whose secondary key changed, leaves
/// its old entry behind), so scans skip stale ones.
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

/// One row found by a scan: primary key, the index's own key (the composite
/// for a secondary index, else empty) and the row.
pub(crate) type ScannedRow<R> = (Vec<u8>, Vec<u8>, *const R);

/// Read-your-writes through secondary index `position`: a transaction's
/// rows whose secondary key is new (`own`: primary key, value, row) are not
/// in the index until commit, so they are merged into `rows` in scan order
/// when their key lies in `range`. A stale entry of the same row is left for
/// [`secondary_entry_is_current`] to skip.
pub(crate) fn merge_own_secondary_rows<'a, R: 'a>(
    schema: &TableSchema,
    position: u32,
    range: (Bound<&[u8]>, Bound<&[u8]>),
    direction: ScanDirection,
    rows: &mut Vec<ScannedRow<R>>,
    own: impl Iterator<Item = (&'a [u8], &'a [u8], *const R)>,
) {
    let mut merged = false;
    for (key, value, row) in own {
        let index_key = secondary_index_key(schema, position, key, value);
        let listed = rows.iter().any(|(_, listed, other)| *listed == index_key && std::ptr::eq(*other, row));
        if !listed && range.contains(&index_key.as_slice()) {
            rows.push((key.to_vec(), index_key, row));
            merged = true;
        }
    }
    if merged {
        rows.sort_by(|a, b| match direction {
            ScanDirection::Forward => a.1.cmp(&b.1),
            ScanDirection::Reverse => b.1.cmp(&a.1),
        });
    }
}

/// `secondary key || primary key || len(primary key) as u16 BE`.
pub(crate) fn secondary_composite(mut secondary_key: Vec<u8>, primary_key: &[u8]) -> Vec<u8> {
    secondary_key.extend_from_slice(primary_key);
    secondary_key.extend_from_slice(&(primary_key.len() as u16).to_be_bytes());
    secondary_key
}

/// The primary key inside a secondary composite key.
pub(crate) fn primary_key_of_composite(composite: &[u8]) -> &[u8] {
    let split = composite.len() - PK_LEN_SUFFIX;
    let len = u16::from_be_bytes([composite[split], composite[split + 1]]) as usize;
    &composite[split - len..split]
}

impl Drop for Table {
    fn drop(&mut self) {
        let mut raws = Vec::new();
        let mut collect = |_: &[u8], record: &Record| raws.push(record as *const Record as usize as u64);
        self.for_each_record(&mut collect);
        for raw in raws {
            // SAFETY: the table is being dropped; indexes hold the only
            // references and are dropped right after without dereferencing.
            unsafe { record_free(raw) };
        }
    }
}
