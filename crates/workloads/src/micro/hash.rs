//! HashTable: inserts and searches in a hash-indexed table.
//!
//! The table `hash_entries` has a hash primary index; keys are
//! [`key`](super::key)`(k)` (`u64` big-endian) over the key space
//! `0..2 * micro_entries`. Load inserts the keys `0..micro_entries`, each
//! with [`fill_entry`](super::fill_entry)`(value, k, Some(0))`:
//! `entry_size` bytes whose word 0 is the key, word 1 the version (0 when
//! loaded) and the rest the filler of the key.
//!
//! Each transaction draws the operation (an **insert** with probability
//! `insert_percent`, else a **search**), then a key `k` from the scrambled
//! zipfian over the whole key space:
//!
//! * insert: a put of `k` (insert, or overwrite if present) with
//!   `fill_entry(value, k, Some(version))`, `version` counting the
//!   client's inserts from 1;
//! * search: a point read of `k` in a read-only transaction (about half
//!   the key space is absent at first: a miss is a committed search).
//!
//! Nothing is deleted. The check: every row's key lies in the key space,
//! every value has `entry_size` bytes with word 0 its key and the filler
//! of its key (any version); the loaded keys are all present, so the row
//! count lies between `micro_entries` and `2 * micro_entries`.
//!
//! [`btree`](super::btree) is the same on an ordered (B+tree) index.

pub use super::kv::{KvClient, KvMap, INSERT, SEARCH, TABLE, TRANSACTION_TYPES};
use crate::{WorkloadError, WorkloadOptions};

/// The table's name.
pub const TABLE_NAME: &str = "hash_entries";

/// The HashTable workload: a [`KvMap`] on a hash index.
pub type HashTable = KvMap;

/// HashTable with `options.micro_entries`, `entry_size`, `insert_percent` and
/// `theta`; computes the zipfian constants (O(entries)).
pub fn new(options: &WorkloadOptions) -> Result<HashTable, WorkloadError> {
    KvMap::new("hash", TABLE_NAME, false, options)
}
