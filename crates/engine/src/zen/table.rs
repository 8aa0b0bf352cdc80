//! A Zen table in DRAM: the primary index (key -> [`Row`]), secondary
//! ordered indexes (composite key -> row), and the table's slot geometry.
//!
//! Like `table.rs` for the DRAM engines, rows are created as absent
//! placeholders by get-or-insert (DBX get-with-insert, so a read of an absent
//! key and an insert of it conflict) and are never removed while the table
//! lives; the table frees them when dropped. Leaf versions of the ordered
//! indexes give phantom detection exactly as in `occ.rs`.

use super::cache::Row;
use super::heap::SlotGeometry;
use crate::error::{DbError, DbResult};
use crate::index::{HashIndex, IndexError, LeafChange, LeafRef, OrderedIndex, ScanDirection};
use crate::schema::{PrimaryIndexKind, TableSchema};
use crate::table;
use std::ops::Bound;
use std::sync::atomic::AtomicU64;

enum Primary {
    Ordered(OrderedIndex),
    Hash(HashIndex),
}

/// A scanned leaf and the version the scan saw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedLeaf {
    pub(crate) secondary: Option<u32>,
    pub(crate) leaf: LeafRef,
    pub(crate) version: u64,
}

/// A table of the Zen engine.
pub(crate) struct ZenTable {
    pub(crate) schema: TableSchema,
    primary: Primary,
    secondaries: Vec<OrderedIndex>,
    pub(crate) geometry: SlotGeometry,
    /// Next tuple ID to hand out (recovery sets it above every ID seen).
    pub(crate) next_tuple_id: AtomicU64,
}

/// # Safety
/// `raw` must come from `row_into_raw` of a row of a live table.
unsafe fn row_from_raw<'a>(raw: u64) -> &'a Row {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(raw as usize as *const Row) }
}

fn row_into_raw(row: Row) -> u64 {
    Box::into_raw(Box::new(row)) as usize as u64
}

impl ZenTable {
    pub(crate) fn new(schema: TableSchema, chunk_size: u64) -> DbResult<Self> {
        let geometry = SlotGeometry::new(&schema.name, schema.max_key_len, schema.max_value_len, chunk_size)?;
        let primary = match schema.primary {
            PrimaryIndexKind::Ordered => Primary::Ordered(OrderedIndex::new(schema.max_key_len)),
            PrimaryIndexKind::Hash => Primary::Hash(HashIndex::new(schema.max_key_len)),
        };
        let secondaries =
            schema.secondaries.iter().map(|_| OrderedIndex::new(table::secondary_max_key_len(&schema))).collect();
        Ok(Self { schema, primary, secondaries, geometry, next_tuple_id: AtomicU64::new(1) })
    }

    fn key_error(&self, error: IndexError) -> DbError {
        match error {
            IndexError::KeyTooLong { len, max } => DbError::KeyTooLong { table: self.schema.name.clone(), len, max },
        }
    }

    /// The row of `key`, inserting an absent placeholder if needed; whether
    /// it was inserted; the leaf-version change of the insert.
    pub(crate) fn get_or_insert(&self, key: &[u8]) -> DbResult<(&Row, bool, Option<LeafChange>)> {
        let make = || row_into_raw(Row::placeholder());
        let (raw, inserted, change) = match &self.primary {
            Primary::Ordered(index) => {
                let result = index.get_or_insert_with_info(key, make).map_err(|e| self.key_error(e))?;
                (result.value, result.inserted, result.leaf_change)
            }
            Primary::Hash(index) => {
                let (raw, inserted) = index.get_or_insert_with(key, make).map_err(|e| self.key_error(e))?;
                (raw, inserted, None)
            }
        };
        // SAFETY: rows live as long as the table.
        Ok((unsafe { row_from_raw(raw) }, inserted, change))
    }

    /// Adds `row` under `key` to every secondary index.
    pub(crate) fn index_secondaries(&self, key: &[u8], value: &[u8], row: &Row) -> DbResult<()> {
        for position in 0..self.schema.secondaries.len() {
            let composite = table::secondary_index_key(&self.schema, position as u32, key, value);
            self.secondaries[position]
                .insert(&composite, row as *const Row as usize as u64)
                .map_err(|e| self.key_error(e))?;
        }
        Ok(())
    }

    /// Scans the primary index (ordered tables) or a secondary index,
    /// visiting (primary key, index key, row) and reporting every leaf read.
    pub(crate) fn scan(
        &self,
        secondary: Option<u32>,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        mut visit: impl FnMut(&[u8], &[u8], &Row) -> bool,
        mut leaf_visit: impl FnMut(ScannedLeaf),
    ) -> DbResult<()> {
        let index = match secondary {
            None => match &self.primary {
                Primary::Ordered(index) => index,
                Primary::Hash(_) => {
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
            usize::MAX,
            |key, raw| {
                // SAFETY: rows live as long as the table.
                let row = unsafe { row_from_raw(raw) };
                let primary_key = if secondary.is_some() { table::primary_key_of_composite(key) } else { key };
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
                Primary::Ordered(index) => index,
                Primary::Hash(_) => return true,
            },
            Some(position) => &self.secondaries[position as usize],
        };
        index.validate_leaf(leaf.leaf, leaf.version)
    }

    /// Visits every (key, row).
    pub(crate) fn for_each_row(&self, mut visit: impl FnMut(&[u8], &Row)) {
        match &self.primary {
            Primary::Ordered(index) => index.scan(
                (Bound::Unbounded, Bound::Unbounded),
                ScanDirection::Forward,
                usize::MAX,
                |key, raw| {
                    // SAFETY: rows live as long as the table.
                    visit(key, unsafe { row_from_raw(raw) });
                    true
                },
                |_, _| {},
            ),
            Primary::Hash(index) => index.for_each(|key, raw| {
                // SAFETY: rows live as long as the table.
                visit(key, unsafe { row_from_raw(raw) })
            }),
        }
    }
}

impl Drop for ZenTable {
    fn drop(&mut self) {
        let mut raws = Vec::new();
        self.for_each_row(|_, row| raws.push(row as *const Row as usize));
        for raw in raws {
            // SAFETY: the table is being dropped; the indexes hold the only
            // references and are dropped right after without dereferencing.
            drop(unsafe { Box::from_raw(raw as *mut Row) });
        }
    }
}
