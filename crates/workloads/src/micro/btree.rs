//! B+Tree: inserts and searches in a table with an ordered (B+tree)
//! primary index, `btree_entries`.
//!
//! Exactly [`hash`](super::hash) (the same key space, load, operations,
//! values and check) on an ordered index: a search is a point lookup in
//! the B+tree. The check adds a full scan that must return every row in
//! ascending key order.

use super::kv::Shared;
use crate::{CheckReport, Client, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, TableSchema};
use std::sync::Arc;

pub use super::kv::{KvClient, INSERT, SEARCH, TABLE, TRANSACTION_TYPES};

/// The table's name.
pub const TABLE_NAME: &str = "btree_entries";

/// The B+Tree workload.
pub struct BTree {
    shared: Shared,
}

impl BTree {
    /// B+Tree with `options.micro_entries`, `entry_size`, `insert_percent`
    /// and `theta`; computes the zipfian constants (O(entries)).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        Ok(Self { shared: Shared::new("btree", TABLE_NAME, true, options)? })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn kv_client(&self, worker_index: usize, seed: u64) -> KvClient {
        self.shared.client(worker_index, seed)
    }
}

impl Workload for BTree {
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
