//! B+Tree: inserts and searches in a table with an ordered (B+tree)
//! primary index, `btree_entries`.
//!
//! Exactly [`hash`](super::hash) (the same key space, load, operations,
//! values and check) on an ordered index: a search is a point lookup in
//! the B+tree. The check adds a full scan that must return every row in
//! ascending key order.

pub use super::kv::{KvClient, KvMap, INSERT, SEARCH, TABLE, TRANSACTION_TYPES};
use crate::{WorkloadError, WorkloadOptions};

/// The table's name.
pub const TABLE_NAME: &str = "btree_entries";

/// The BTree workload: a [`KvMap`] on an ordered (B+tree) index.
pub type BTree = KvMap;

/// BTree with `options.micro_entries`, `entry_size`, `insert_percent` and
/// `theta`; computes the zipfian constants (O(entries)).
pub fn new(options: &WorkloadOptions) -> Result<BTree, WorkloadError> {
    KvMap::new("btree", TABLE_NAME, true, options)
}
