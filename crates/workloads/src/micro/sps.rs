//! SPS: random swaps of array entries.
//!
//! The array is a hash-indexed table `sps_array` of `micro_entries` rows
//! keyed by the index `i` ([`key`]`(i)`, `u64` big-endian). Entry `i` is
//! loaded with [`fill_entry`]`(value, i, None)`: `entry_size` bytes whose
//! word 0 is the entry's unique id `i` and the rest the filler of `i`.
//!
//! Each transaction (`swap`) draws two distinct indices `a` and `b` from
//! the scrambled zipfian over `0..micro_entries`
//! ([`KeyGenerator::two_keys`]: `b` is drawn again while it equals `a`, up
//! to 64 times, then uniformly among the other indices), reads both values
//! and writes each into the other's row (whole values). `insert_percent` is
//! ignored.
//!
//! The check: every index `0..micro_entries` has a row of `entry_size`
//! bytes; the ids over all rows are a permutation of `0..micro_entries`;
//! every value's filler matches its id. A lost half of a swap duplicates
//! an id, a torn value breaks its filler.

use super::{entry_matches, fill_entry, key, parse_key, Bits, Common, KeyGenerator};
use crate::common::{corrupt, load_parallel, verify_tables};
use crate::zipf::Zipfian;
use crate::{CheckReport, Client, TxnSummary, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, DbError, Outcome, TableSchema, TxError, Worker};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Transaction type names.
pub const TRANSACTION_TYPES: [&str; 1] = ["swap"];
/// Type index of a swap.
pub const SWAP: usize = 0;

/// Table ids.
pub mod table {
    use pmtx_engine::TableId;
    /// The array.
    pub const ARRAY: TableId = TableId(0);
    /// Table names, by id.
    pub const NAMES: [&str; 1] = ["sps_array"];
}

struct Shared {
    common: Common,
    zipf: Zipfian,
    loaded: AtomicBool,
}

/// The SPS workload.
pub struct Sps {
    shared: Arc<Shared>,
}

impl Sps {
    /// SPS over `options.micro_entries` entries of `options.entry_size`
    /// bytes; computes the zipfian constants (O(entries)).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        let common = Common::new("sps", options)?;
        let zipf = Zipfian::new(common.entries, common.theta);
        Ok(Self { shared: Arc::new(Shared { common, zipf, loaded: AtomicBool::new(false) }) })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn sps_client(&self, worker_index: usize, seed: u64) -> SpsClient {
        let common = &self.shared.common;
        SpsClient {
            keys: KeyGenerator::new(&self.shared.zipf, common.insert_percent, seed, worker_index),
            first: Vec::with_capacity(common.entry_size),
            second: Vec::with_capacity(common.entry_size),
        }
    }
}

impl Workload for Sps {
    fn name(&self) -> &'static str {
        "sps"
    }

    fn tables(&self) -> Vec<TableSchema> {
        vec![TableSchema::hashed(table::NAMES[0]).max_key_len(8).max_value_len(self.shared.common.entry_size)]
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
        verify_tables(db, &self.tables())?;
        let common = &self.shared.common;
        let per_task = Common::rows_per_load_task(common.entry_size);
        let tasks: Vec<u64> = (0..common.entries).step_by(per_task as usize).collect();
        load_parallel(db, threads, &tasks, common.entries, progress, |worker, _slot, _index, &first| {
            let last = (first + per_task).min(common.entries);
            let mut values = vec![0u8; common.entry_size * (last - first) as usize];
            for (id, value) in (first..last).zip(values.chunks_mut(common.entry_size)) {
                fill_entry(value, id, None);
            }
            worker.run_pipelined(0, false, |tx| {
                for (id, value) in (first..last).zip(values.chunks(common.entry_size)) {
                    if !tx.insert(table::ARRAY, &key(id), value)? {
                        return Err(TxError::Db(DbError::InvalidConfig(
                            "load: sps_array already holds rows; load expects an empty database".into(),
                        )));
                    }
                }
                Ok(())
            })?;
            Ok(last - first)
        })?;
        self.shared.loaded.store(true, Ordering::Release);
        Ok(())
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.sps_client(worker_index, seed))
    }

    fn expected_rows(&self) -> Option<u64> {
        self.shared.loaded.load(Ordering::Acquire).then_some(self.shared.common.entries)
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.tables())?;
        let common = &self.shared.common;
        let entries = common.entries;
        let mut seen = Bits::new(entries);
        let (mut rows, mut bad_keys, mut bad_length, mut bad_filler) = (0u64, 0u64, 0u64, 0u64);
        let (mut out_of_range, mut duplicates, mut duplicated) = (0u64, 0u64, Vec::new());
        let mut present = Bits::new(entries);
        db.for_each_row(table::ARRAY, |k, value| {
            rows += 1;
            match parse_key(k) {
                Some(index) if index < entries => {
                    present.insert(index);
                }
                _ => bad_keys += 1,
            }
            if value.len() != common.entry_size {
                bad_length += 1;
            }
            let id = super::word(value, 0);
            if id >= entries {
                out_of_range += 1;
                return;
            }
            if seen.insert(id) {
                duplicates += 1;
                if duplicated.len() < 5 {
                    duplicated.push(id);
                }
            }
            bad_filler += !entry_matches(value, id, false) as u64;
        })?;
        let (missing_rows, missing_ids) = (present.missing(), seen.missing());
        let mut report = CheckReport::default();
        report.push(
            "array entries",
            missing_rows == 0 && bad_keys == 0 && rows == entries,
            format!("{rows} rows, expected {entries}; {missing_rows} indices missing, {bad_keys} bad keys"),
        );
        report.push(
            "entry length",
            bad_length == 0,
            format!("{bad_length} entries of another length than {} bytes", common.entry_size),
        );
        report.push(
            "ids are a permutation",
            missing_ids == 0 && duplicates == 0 && out_of_range == 0,
            format!(
                "{missing_ids} ids of 0..{entries} missing, {out_of_range} out of range, {duplicates} duplicates \
                 (first: {duplicated:?})"
            ),
        );
        report.push(
            "fillers match ids",
            bad_filler == 0,
            format!("{bad_filler} entries whose filler is not their id's (torn values)"),
        );
        Ok(report)
    }
}

/// An SPS client.
pub struct SpsClient {
    keys: KeyGenerator,
    first: Vec<u8>,
    second: Vec<u8>,
}

impl SpsClient {
    /// The two indices of the next swap.
    pub fn next_pair(&mut self) -> (u64, u64) {
        self.keys.two_keys()
    }
}

fn copy_into(out: &mut Vec<u8>, value: &[u8]) {
    out.clear();
    out.extend_from_slice(value);
}

impl Client for SpsClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (a, b) = self.next_pair();
        let (key_a, key_b) = (key(a), key(b));
        let Self { first, second, .. } = self;
        let (outcome, attempts) = worker.run_pipelined(SWAP as u32, false, |tx| {
            tx.prefetch(table::ARRAY, &key_a);
            tx.prefetch(table::ARRAY, &key_b);
            if tx.get_with(table::ARRAY, &key_a, |value| copy_into(first, value))?.is_none()
                || tx.get_with(table::ARRAY, &key_b, |value| copy_into(second, value))?.is_none()
            {
                return Err(corrupt(format!("sps: entry {a} or {b} is missing")));
            }
            if !tx.update(table::ARRAY, &key_a, second)? || !tx.update(table::ARRAY, &key_b, first)? {
                return Err(corrupt(format!("sps: entry {a} or {b} vanished")));
            }
            Ok(())
        })?;
        Ok(TxnSummary { type_index: SWAP, committed: matches!(outcome, Outcome::Committed(())), attempts })
    }
}
