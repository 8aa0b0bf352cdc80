//! What Zen keeps per table besides the shared [`Table`] of rows
//! (`crate::storage::table`, whose index, scans, leaf versions and reclamation are
//! the same as the DRAM engines'): the slot geometry of the table's heap
//! tuples and the next tuple ID.

use crate::error::DbResult;
use crate::schema::TableSchema;
use crate::storage::zen::heap::SlotGeometry;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};

/// Tuple IDs a worker takes from a table's counter at a time. An ID only
/// has to be unique per table; IDs of a block left unused at close are
/// skipped (recovery restarts above the largest ID in the heap).
pub(crate) const TUPLE_ID_BLOCK: u64 = 256;

/// Zen's per-table heap metadata.
pub(crate) struct ZenTableMeta {
    pub(crate) geometry: SlotGeometry,
    /// Next tuple ID to hand out in blocks (recovery sets it above every
    /// ID seen). On its own line: `geometry` is read at every commit.
    pub(crate) next_tuple_id: CachePadded<AtomicU64>,
}

/// A worker's blocks of tuple IDs, one per table: inserting workers then
/// share no counter (one shared add per insert made two workers bounce
/// the counter's line on every NewOrder).
#[derive(Default)]
pub(crate) struct TupleIdBlocks {
    /// Per table: the next ID of the block and its end (exclusive).
    blocks: Vec<(u64, u64)>,
}

impl TupleIdBlocks {
    /// A fresh tuple ID of table `table`.
    pub(crate) fn take(&mut self, metas: &[ZenTableMeta], table: usize) -> u64 {
        if self.blocks.len() <= table {
            self.blocks.resize(metas.len().max(table + 1), (0, 0));
        }
        let (next, end) = &mut self.blocks[table];
        if *next == *end {
            *next = metas[table].next_tuple_id.fetch_add(TUPLE_ID_BLOCK, Ordering::Relaxed);
            *end = *next + TUPLE_ID_BLOCK;
        }
        let id = *next;
        *next += 1;
        debug_assert!(id != 0);
        id
    }
}

impl ZenTableMeta {
    pub(crate) fn new(schema: &TableSchema, chunk_size: u64) -> DbResult<Self> {
        let geometry = SlotGeometry::new(&schema.name, schema.max_key_len, schema.max_value_len, chunk_size)?;
        Ok(Self { geometry, next_tuple_id: CachePadded::new(AtomicU64::new(1)) })
    }
}
