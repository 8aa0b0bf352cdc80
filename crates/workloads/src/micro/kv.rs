//! The key-value workloads `hash` and `btree`: one table, inserts and
//! searches; the two differ only in the primary index (see
//! [`super::hash`]).

use super::{entry_matches, fill_entry, key, parse_key, Bits, Common, KeyGenerator};
use crate::common::{load_parallel, scan_pages, verify_tables};
use crate::zipf::Zipfian;
use crate::{CheckReport, Client, TxnSummary, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, DbError, Outcome, TableId, TableSchema, TxError, Worker};
use std::sync::Arc;

/// Transaction type names of both workloads.
pub const TRANSACTION_TYPES: [&str; 2] = ["insert", "search"];
/// Type index of an insert.
pub const INSERT: usize = 0;
/// Type index of a search.
pub const SEARCH: usize = 1;
/// The one table.
pub const TABLE: TableId = TableId(0);

/// The `hash` or `btree` workload ([`super::hash::new`],
/// [`super::btree::new`]).
pub struct KvMap {
    pub(crate) common: Common,
    /// Over the key space `0..2 * entries`.
    zipf: Zipfian,
    ordered: bool,
    name: &'static str,
    table: &'static str,
}

impl KvMap {
    pub(crate) fn new(
        name: &'static str,
        table: &'static str,
        ordered: bool,
        options: &WorkloadOptions,
    ) -> Result<Self, WorkloadError> {
        let common = Common::new(name, options)?;
        let zipf = Zipfian::new(common.entries * 2, common.theta);
        Ok(Self { common, zipf, ordered, name, table })
    }

    pub(crate) fn key_space(&self) -> u64 {
        self.common.entries * 2
    }

    fn schemas(&self) -> Vec<TableSchema> {
        let table = if self.ordered { TableSchema::ordered(self.table) } else { TableSchema::hashed(self.table) };
        vec![table.max_key_len(8).max_value_len(self.common.entry_size)]
    }

    fn load_rows(
        &self,
        db: &Arc<Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError> {
        verify_tables(db, &self.schemas())?;
        let common = &self.common;
        let per_task = Common::rows_per_load_task(common.entry_size);
        let tasks: Vec<u64> = (0..common.entries).step_by(per_task as usize).collect();
        load_parallel(db, threads, &tasks, common.entries, progress, |worker, _slot, _index, &first| {
            let last = (first + per_task).min(common.entries);
            let mut values = vec![0u8; common.entry_size * (last - first) as usize];
            for (k, value) in (first..last).zip(values.chunks_mut(common.entry_size)) {
                fill_entry(value, k, Some(0));
            }
            worker.run_pipelined(0, false, |tx| {
                for (k, value) in (first..last).zip(values.chunks(common.entry_size)) {
                    if !tx.insert(TABLE, &key(k), value)? {
                        return Err(TxError::Db(DbError::InvalidConfig(format!(
                            "load: {} already holds rows; load expects an empty database",
                            self.table
                        ))));
                    }
                }
                Ok(())
            })?;
            Ok(last - first)
        })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn kv_client(&self, worker_index: usize, seed: u64) -> KvClient {
        KvClient {
            keys: KeyGenerator::new(&self.zipf, self.common.insert_percent, seed, worker_index),
            value: vec![0u8; self.common.entry_size],
            version: 0,
        }
    }

    fn check_rows(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.schemas())?;
        let (entries, space, size) = (self.common.entries, self.key_space(), self.common.entry_size);
        let mut loaded = Bits::new(entries);
        let (mut rows, mut bad_keys, mut bad_length, mut bad_content) = (0u64, 0u64, 0u64, 0u64);
        db.for_each_row(TABLE, |k, value| {
            rows += 1;
            let Some(number) = parse_key(k).filter(|&number| number < space) else {
                bad_keys += 1;
                return;
            };
            if number < entries {
                loaded.insert(number);
            }
            bad_length += (value.len() != size) as u64;
            bad_content += !entry_matches(value, number, true) as u64;
        })?;
        let missing = loaded.missing();
        let mut report = CheckReport::default();
        report.push(
            "rows",
            (entries..=space).contains(&rows) && bad_keys == 0 && missing == 0,
            format!(
                "{rows} rows (expected {entries}..={space}), {bad_keys} keys outside 0..{space}, {missing} loaded keys \
                 missing"
            ),
        );
        report.push(
            "entries embed their keys",
            bad_length == 0 && bad_content == 0,
            format!("{bad_length} values of another length than {size} bytes, {bad_content} not of their key"),
        );
        if self.ordered {
            let mut worker = db.worker(0)?;
            let (mut scanned, mut previous, mut disorder) = (0u64, None::<Vec<u8>>, 0u64);
            scan_pages(&mut worker, TABLE, &[], None, |k, _| {
                scanned += 1;
                disorder += previous.as_deref().is_some_and(|previous| previous >= k) as u64;
                previous = Some(k.to_vec());
                Ok(())
            })?;
            report.push(
                "scan in key order",
                disorder == 0 && scanned == rows,
                format!("a full scan returned {scanned} of {rows} rows, {disorder} not after the one before"),
            );
        }
        Ok(report)
    }
}

impl Workload for KvMap {
    fn name(&self) -> &'static str {
        self.name
    }

    fn tables(&self) -> Vec<TableSchema> {
        self.schemas()
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
        self.load_rows(db, threads, progress)
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.kv_client(worker_index, seed))
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        self.check_rows(db)
    }
}

/// A client of `hash` or `btree`.
pub struct KvClient {
    keys: KeyGenerator,
    /// The value of the next insert.
    value: Vec<u8>,
    /// Versions of this client's inserts (1, 2, ...; loaded rows have 0).
    version: u64,
}

impl KvClient {
    /// The next operation: (type index, key).
    pub fn next_operation(&mut self) -> (usize, u64) {
        let insert = self.keys.is_insert();
        (if insert { INSERT } else { SEARCH }, self.keys.key())
    }
}

impl Client for KvClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (type_index, number) = self.next_operation();
        let k = key(number);
        let (committed, attempts) = if type_index == INSERT {
            self.version += 1;
            fill_entry(&mut self.value, number, Some(self.version));
            let value = &self.value;
            let (outcome, attempts) = worker.run_pipelined(INSERT as u32, false, |tx| tx.put(TABLE, &k, value))?;
            (matches!(outcome, Outcome::Committed(())), attempts)
        } else {
            let (outcome, attempts) = worker.run_pipelined(SEARCH as u32, true, |tx| {
                tx.prefetch(TABLE, &k);
                tx.get_with(TABLE, &k, |value| value.len())
            })?;
            (matches!(outcome, Outcome::Committed(_)), attempts)
        };
        Ok(TxnSummary { type_index, committed, attempts })
    }
}
