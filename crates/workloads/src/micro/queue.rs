//! SP³'s queue: one FIFO queue shared by every worker (the contended case
//! of the paper: every transaction reads and writes the one head/tail row).
//!
//! Tables:
//!
//! * `sp3_queue_meta` (hash index): one row, key [`key`]`(0)`, value
//!   `head` and `tail` as little-endian `u64`s (16 bytes). The queue holds
//!   the sequences `head..tail`.
//! * `sp3_queue_items` (ordered index): key [`key`]`(sequence)`, value
//!   [`fill_entry`]`(value, sequence, None)` of `entry_size` bytes (word 0
//!   the sequence, the filler of the sequence after it).
//!
//! Load: items `0..min(micro_entries, 10 000)` ([`LOAD_LIMIT`]) and
//! `head = 0`, `tail = ` that count.
//!
//! Each transaction is an **enqueue** with probability `insert_percent`
//! (read the meta row, insert the item `tail`, write `tail + 1`), else a
//! **dequeue** (read the meta row; if `head == tail` the queue is empty and
//! the transaction commits having written nothing; else delete the item
//! `head` and write `head + 1`). Keys play no part: `theta` is unused.
//!
//! The check: the meta row exists with `head <= tail`; the items are
//! exactly the sequences `head..tail`, each of `entry_size` bytes matching
//! its sequence. With the counters of the value that loaded the database,
//! `tail - head` is also compared with the load plus the enqueues minus
//! the dequeues committed (after a crash: only bounded by them, as commits
//! that were not durable are lost).

use super::{entry_matches, fill_entry, inconsistent, key, parse_key, Common, KeyGenerator};
use crate::common::{corrupt, load_parallel, scan_pages, verify_tables};
use crate::zipf::Zipfian;
use crate::{CheckReport, Client, TxnSummary, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, DbError, Outcome, TableSchema, Transaction, TxError, TxResult, Worker};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Transaction type names.
pub const TRANSACTION_TYPES: [&str; 2] = ["enqueue", "dequeue"];
/// Type index of an enqueue.
pub const ENQUEUE: usize = 0;
/// Type index of a dequeue.
pub const DEQUEUE: usize = 1;
/// Most items loaded.
pub const LOAD_LIMIT: u64 = 10_000;
/// The key of the meta row.
pub const META_KEY: u64 = 0;

/// Table ids.
pub mod table {
    use pmtx_engine::TableId;
    /// The head/tail row.
    pub const META: TableId = TableId(0);
    /// The items.
    pub const ITEMS: TableId = TableId(1);
    /// Table names, by id.
    pub const NAMES: [&str; 2] = ["sp3_queue_meta", "sp3_queue_items"];
}

/// The meta row's value.
pub fn meta_value(head: u64, tail: u64) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&head.to_le_bytes());
    value[8..].copy_from_slice(&tail.to_le_bytes());
    value
}

/// (head, tail) of a meta row, or `None` for a value of another length.
pub fn parse_meta(value: &[u8]) -> Option<(u64, u64)> {
    let value: &[u8; 16] = value.try_into().ok()?;
    Some((u64::from_le_bytes(value[..8].try_into().ok()?), u64::from_le_bytes(value[8..].try_into().ok()?)))
}

struct Shared {
    common: Common,
    /// Items loaded.
    initial: u64,
    /// Whether this value loaded the database (the counters refer to it).
    loaded: AtomicBool,
    enqueued: AtomicU64,
    dequeued: AtomicU64,
    /// Dequeues that found the queue empty.
    empty: AtomicU64,
}

/// The shared-queue workload.
pub struct Sp3Queue {
    shared: Arc<Shared>,
    zipf: Zipfian,
}

impl Sp3Queue {
    /// The queue with `options.micro_entries` (load), `entry_size` and
    /// `insert_percent` (enqueues).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        let common = Common::new("sp3-queue", options)?;
        let initial = common.entries.min(LOAD_LIMIT);
        Ok(Self {
            shared: Arc::new(Shared {
                common,
                initial,
                loaded: AtomicBool::new(false),
                enqueued: AtomicU64::new(0),
                dequeued: AtomicU64::new(0),
                empty: AtomicU64::new(0),
            }),
            // The queue draws no keys; the generator only draws operations.
            zipf: Zipfian::new(1, 0.0),
        })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn queue_client(&self, worker_index: usize, seed: u64) -> Sp3QueueClient {
        let common = &self.shared.common;
        Sp3QueueClient {
            shared: Arc::clone(&self.shared),
            keys: KeyGenerator::new(&self.zipf, common.insert_percent, seed, worker_index),
            item: vec![0u8; common.entry_size],
        }
    }

    /// (enqueues, dequeues, dequeues of an empty queue) committed by this
    /// value's clients since its load.
    pub fn committed(&self) -> (u64, u64, u64) {
        let shared = &self.shared;
        (
            shared.enqueued.load(Ordering::Acquire),
            shared.dequeued.load(Ordering::Acquire),
            shared.empty.load(Ordering::Acquire),
        )
    }
}

impl Workload for Sp3Queue {
    fn name(&self) -> &'static str {
        "sp3-queue"
    }

    fn tables(&self) -> Vec<TableSchema> {
        vec![
            TableSchema::hashed(table::NAMES[0]).max_key_len(8).max_value_len(16),
            TableSchema::ordered(table::NAMES[1]).max_key_len(8).max_value_len(self.shared.common.entry_size),
        ]
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
        let shared = &self.shared;
        let (size, initial) = (shared.common.entry_size, shared.initial);
        let per_task = Common::rows_per_load_task(size);
        let tasks: Vec<u64> = (0..initial).step_by(per_task as usize).collect();
        load_parallel(db, threads, &tasks, initial + 1, progress, |worker, _slot, index, &first| {
            let last = (first + per_task).min(initial);
            let mut values = vec![0u8; size * (last - first) as usize];
            for (sequence, value) in (first..last).zip(values.chunks_mut(size)) {
                fill_entry(value, sequence, None);
            }
            worker.run_pipelined(0, false, |tx| {
                let exists = || {
                    TxError::Db(DbError::InvalidConfig(
                        "load: the sp3 queue already holds rows; load expects an empty database".into(),
                    ))
                };
                if index == 0 && !tx.insert(table::META, &key(META_KEY), &meta_value(0, initial))? {
                    return Err(exists());
                }
                for (sequence, value) in (first..last).zip(values.chunks(size)) {
                    if !tx.insert(table::ITEMS, &key(sequence), value)? {
                        return Err(exists());
                    }
                }
                Ok(())
            })?;
            Ok(last - first + (index == 0) as u64)
        })?;
        shared.enqueued.store(0, Ordering::Release);
        shared.dequeued.store(0, Ordering::Release);
        shared.empty.store(0, Ordering::Release);
        shared.loaded.store(true, Ordering::Release);
        Ok(())
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.queue_client(worker_index, seed))
    }

    fn expected_rows(&self) -> Option<u64> {
        let shared = &self.shared;
        if !shared.loaded.load(Ordering::Acquire) {
            return None;
        }
        let (enqueued, dequeued, _) = self.committed();
        // The items plus the meta row.
        (shared.initial + enqueued + 1).checked_sub(dequeued)
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.tables())?;
        let shared = &self.shared;
        let size = shared.common.entry_size;
        let mut report = CheckReport::default();
        let mut meta = Vec::new();
        db.for_each_row(table::META, |k, value| meta.push((k.to_vec(), value.to_vec())))?;
        let head_tail = match meta.as_slice() {
            [(k, value)] if parse_key(k) == Some(META_KEY) => parse_meta(value).filter(|(head, tail)| head <= tail),
            _ => None,
        };
        report.push(
            "meta row",
            head_tail.is_some(),
            match head_tail {
                Some((head, tail)) => format!("head {head}, tail {tail}"),
                None => format!("expected one row (head <= tail) under key 0, found {} rows: {meta:?}", meta.len()),
            },
        );
        let (head, tail) = head_tail.unwrap_or((0, 0));

        let mut worker = db.worker(0)?;
        let (mut expected, mut wrong, mut rows) = (head, Vec::new(), 0u64);
        let (mut bad_length, mut bad_filler) = (0u64, 0u64);
        scan_pages(&mut worker, table::ITEMS, &[], None, |k, value| {
            rows += 1;
            let sequence = parse_key(k);
            if sequence != Some(expected) && wrong.len() < 5 {
                wrong.push(format!("{sequence:?} where {expected} was expected"));
            }
            let sequence = sequence.unwrap_or(u64::MAX);
            expected = sequence.saturating_add(1);
            bad_length += (value.len() != size) as u64;
            bad_filler += !entry_matches(value, sequence, false) as u64;
            Ok(())
        })?;
        drop(worker);
        let contiguous = wrong.is_empty() && rows == tail - head;
        report.push(
            "items are head..tail",
            contiguous,
            if contiguous {
                format!("{rows} items {head}..{tail}")
            } else {
                format!("{rows} items for head {head}, tail {tail}; out of place: {}", wrong.join(", "))
            },
        );
        report.push(
            "items match their sequences",
            bad_length == 0 && bad_filler == 0,
            format!(
                "{bad_length} items of another length than {size} bytes, {bad_filler} whose content is not their \
                     sequence's"
            ),
        );

        if shared.loaded.load(Ordering::Acquire) {
            let (enqueued, dequeued, _) = self.committed();
            let crashed = db.stats().recovery.is_some_and(|recovery| !recovery.clean_shutdown);
            let length = tail - head;
            let fits = if crashed {
                (shared.initial.saturating_sub(dequeued)..=shared.initial + enqueued).contains(&length)
            } else {
                Some(length) == (shared.initial + enqueued).checked_sub(dequeued)
            };
            report.push(
                "queue length",
                fits,
                format!(
                    "{length} items; loaded {} + {enqueued} enqueued - {dequeued} dequeued{}",
                    shared.initial,
                    if crashed { " (recovered from a crash: commits that were not durable are lost)" } else { "" }
                ),
            );
        }
        Ok(report)
    }
}

/// A client of the shared queue.
pub struct Sp3QueueClient {
    shared: Arc<Shared>,
    keys: KeyGenerator,
    /// The item an enqueue writes (filled for its sequence).
    item: Vec<u8>,
}

/// Reads (head, tail).
fn read_meta(tx: &mut Transaction<'_>) -> TxResult<(u64, u64)> {
    match tx.get_with(table::META, &key(META_KEY), parse_meta)? {
        Some(Some((head, tail))) if head <= tail => Ok((head, tail)),
        _ => Err(corrupt("sp3-queue: the meta row is missing or damaged")),
    }
}

impl Sp3QueueClient {
    /// Draws the next transaction type.
    pub fn next_type(&mut self) -> usize {
        if self.keys.is_insert() {
            ENQUEUE
        } else {
            DEQUEUE
        }
    }

    fn enqueue(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let item = &mut self.item;
        let (outcome, attempts) = worker.run_pipelined(ENQUEUE as u32, false, |tx| {
            let (head, tail) = read_meta(tx)?;
            fill_entry(item, tail, None);
            if !tx.insert(table::ITEMS, &key(tail), item)? {
                // Another enqueue's item under a tail read before it.
                return Err(inconsistent());
            }
            tx.update(table::META, &key(META_KEY), &meta_value(head, tail + 1))?;
            Ok(())
        })?;
        let committed = matches!(outcome, Outcome::Committed(()));
        if committed {
            self.shared.enqueued.fetch_add(1, Ordering::AcqRel);
        }
        Ok(TxnSummary { type_index: ENQUEUE, committed, attempts })
    }

    fn dequeue(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (outcome, attempts) = worker.run_pipelined(DEQUEUE as u32, false, |tx| {
            let (head, tail) = read_meta(tx)?;
            if head == tail {
                // Empty: commit without writes.
                return Ok(false);
            }
            if !tx.delete(table::ITEMS, &key(head))? {
                return Err(inconsistent());
            }
            tx.update(table::META, &key(META_KEY), &meta_value(head + 1, tail))?;
            Ok(true)
        })?;
        let committed = match outcome {
            Outcome::Committed(true) => {
                self.shared.dequeued.fetch_add(1, Ordering::AcqRel);
                true
            }
            Outcome::Committed(false) => {
                self.shared.empty.fetch_add(1, Ordering::AcqRel);
                true
            }
            Outcome::RolledBack => false,
        };
        Ok(TxnSummary { type_index: DEQUEUE, committed, attempts })
    }
}

impl Client for Sp3QueueClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        match self.next_type() {
            ENQUEUE => self.enqueue(worker),
            _ => self.dequeue(worker),
        }
    }
}
