//! What Zen keeps per table besides the shared [`Table`] of rows
//! (`crate::storage::table`, whose index, scans, leaf versions and reclamation are
//! the same as the DRAM engines'): the slot geometry of the table's heap
//! tuples and the next tuple ID.

use crate::error::DbResult;
use crate::schema::TableSchema;
use crate::storage::zen::heap::SlotGeometry;
use std::sync::atomic::AtomicU64;

/// Zen's per-table heap metadata.
pub(crate) struct ZenTableMeta {
    pub(crate) geometry: SlotGeometry,
    /// Next tuple ID to hand out (recovery sets it above every ID seen).
    pub(crate) next_tuple_id: AtomicU64,
}

impl ZenTableMeta {
    pub(crate) fn new(schema: &TableSchema, chunk_size: u64) -> DbResult<Self> {
        let geometry = SlotGeometry::new(&schema.name, schema.max_key_len, schema.max_value_len, chunk_size)?;
        Ok(Self { geometry, next_tuple_id: AtomicU64::new(1) })
    }
}
