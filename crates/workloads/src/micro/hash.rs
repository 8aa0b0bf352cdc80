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

use super::kv::Shared;
use crate::{CheckReport, Client, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, TableSchema};
use std::sync::Arc;

pub use super::kv::{KvClient, INSERT, SEARCH, TABLE, TRANSACTION_TYPES};

/// The table's name.
pub const TABLE_NAME: &str = "hash_entries";

/// The HashTable workload.
pub struct HashTable {
    shared: Shared,
}

impl HashTable {
    /// HashTable with `options.micro_entries`, `entry_size`,
    /// `insert_percent` and `theta`; computes the zipfian constants
    /// (O(entries)).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        Ok(Self { shared: Shared::new("hash", TABLE_NAME, false, options)? })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn kv_client(&self, worker_index: usize, seed: u64) -> KvClient {
        self.shared.client(worker_index, seed)
    }
}

impl Workload for HashTable {
    fn name(&self) -> &'static str {
        self.shared.name()
    }

    fn tables(&self) -> Vec<TableSchema> {
        self.shared.tables()
    }

    fn transaction_types(&self) -> &'static [&'static str] {
        &TRANSACTION_TYPES
    }

    fn load(
        &self,
        db: &Arc<Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError> {
        self.shared.load(db, threads, progress)
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.kv_client(worker_index, seed))
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        self.shared.check(db)
    }
}
