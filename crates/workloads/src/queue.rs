//! A FIFO queue per worker thread over one ordered `queue` table: the
//! insert-at-the-tail, delete-at-the-head pattern that leaves a trail of
//! deleted rows behind the head (TPC-C's NEW-ORDER has it too). It shows
//! whether an engine reclaims absent rows: without reclamation every scan
//! from the head walks the trail, and the index grows with every enqueue.
//!
//! Keys are the partition (the worker index, `u32` big-endian) followed by
//! the item's sequence number (`u64` big-endian), so a partition is one
//! contiguous key range in sequence order and threads never touch each
//! other's rows. Values are `field_size` random bytes.
//!
//! Transactions (the mix is [`WorkloadOptions::queue_mix`], 45/45/10 by
//! default):
//!
//! * **enqueue**: insert the item after the partition's tail;
//! * **dequeue**: scan the partition forward from its first key with limit
//!   1 (the head) and delete that row; on an empty partition it rolls back;
//! * **peek**: read-only scan of the first [`WorkloadOptions::queue_scan`]
//!   rows of the partition.
//!
//! `load(db, threads, ..)` fills partitions `0..threads` with
//! [`WorkloadOptions::queue_length`] items each (sequences from 0), one per
//! worker of a run with that many threads: the benchmark drivers load with
//! as many threads as they run. A client of a worker index that was not
//! loaded starts on an empty partition.
//!
//! The check: every partition's sequences are contiguous, every item has
//! `field_size` bytes, and each partition holds the loaded length plus the
//! enqueues minus the dequeues its clients committed (counters the clients
//! share with the [`Queue`] value, reset by `load`), and exactly the
//! sequences those operations leave. After a crash the commits that were
//! not yet durable are lost: each client records its operations in commit
//! order and which of them its worker acknowledged (a worker acknowledges
//! its pipelined commits in commit order; the client must be the worker's
//! only user, as in the benchmark drivers), so on a database recovered from
//! a crash each partition must hold exactly the items left by its
//! acknowledged operations and some prefix of the unacknowledged ones
//! (after that check the lost ones are forgotten, and enqueues continue
//! after the recovered tail). A [`Queue`] value that did not load the
//! database knows no counters and checks contiguity only.

use crate::common::{load_parallel, scan_pages, verify_tables, LOAD_BATCH_BYTES};
use crate::gen::{child_seed, format_weights, parse_weights, rng, Mix};
use crate::{CheckReport, Client, TxnSummary, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, DbError, Outcome, ScanDirection, TableSchema, Transaction, TxError, TxResult, Worker};
use rand::RngCore;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Transaction type names (the index is the type index).
pub const TRANSACTION_TYPES: [&str; 3] = ["enqueue", "dequeue", "peek"];
/// Type index of enqueue.
pub const ENQUEUE: usize = 0;
/// Type index of dequeue.
pub const DEQUEUE: usize = 1;
/// Type index of peek (read-only).
pub const PEEK: usize = 2;
/// The default mix: 45% enqueue, 45% dequeue, 10% peek.
pub const MIX: [u32; 3] = [45, 45, 10];
/// Largest queue length per partition accepted at load.
pub const MAX_QUEUE_LENGTH: u64 = 1 << 40;
/// Length of a key: partition and sequence.
pub const KEY_LEN: usize = 12;

/// Table ids.
pub mod table {
    use pmtx_engine::TableId;
    /// The one table.
    pub const QUEUE: TableId = TableId(0);
    /// Table names, by id.
    pub const NAMES: [&str; 1] = ["queue"];
}

/// The key of item `sequence` of `partition`.
pub fn key(partition: u32, sequence: u64) -> [u8; KEY_LEN] {
    let mut key = [0u8; KEY_LEN];
    key[..4].copy_from_slice(&partition.to_be_bytes());
    key[4..].copy_from_slice(&sequence.to_be_bytes());
    key
}

/// (partition, sequence) of a key, or `None` for a key of another length.
pub fn parse_key(key: &[u8]) -> Option<(u32, u64)> {
    let key: &[u8; KEY_LEN] = key.try_into().ok()?;
    let partition = u32::from_be_bytes(key[..4].try_into().expect("4 bytes"));
    let sequence = u64::from_be_bytes(key[4..].try_into().expect("8 bytes"));
    Some((partition, sequence))
}

/// The key range of one partition: from its first possible key up to the
/// next partition's (the end of the table for the last partition).
struct PartitionRange {
    lower: [u8; KEY_LEN],
    upper: Option<[u8; KEY_LEN]>,
}

impl PartitionRange {
    fn new(partition: u32) -> Self {
        Self { lower: key(partition, 0), upper: partition.checked_add(1).map(|next| key(next, 0)) }
    }

    fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (
            Bound::Included(&self.lower[..]),
            self.upper.as_ref().map_or(Bound::Unbounded, |upper| Bound::Excluded(&upper[..])),
        )
    }
}

/// A queue transaction mix: weights of enqueue, dequeue and peek.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueMix(pub [u32; 3]);

impl Default for QueueMix {
    fn default() -> Self {
        Self(MIX)
    }
}

impl QueueMix {
    /// Largest weight accepted.
    pub const MAX_WEIGHT: u32 = 1_000_000;

    /// Parses `type=weight,...` over [`TRANSACTION_TYPES`], e.g.
    /// `enqueue=50,dequeue=50`; types not listed never run.
    pub fn parse(text: &str) -> Result<Self, WorkloadError> {
        let weights = parse_weights(text, &TRANSACTION_TYPES, Self::MAX_WEIGHT).map_err(|message| {
            WorkloadError::InvalidOption(format!(
                "invalid queue mix {text:?}: {message} (expected TYPE=WEIGHT,... with TYPE one of {} and WEIGHT a \
                 positive integer, e.g. enqueue=45,dequeue=45,peek=10)",
                TRANSACTION_TYPES.join(", ")
            ))
        })?;
        Ok(Self(weights.try_into().expect("one weight per type")))
    }
}

impl std::fmt::Display for QueueMix {
    /// `enqueue=45,dequeue=45,peek=10` (what [`QueueMix::parse`] reads).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_weights(&self.0, &TRANSACTION_TYPES))
    }
}

/// Sentinel of [`Partition::next_sequence`]: the tail is not known yet.
const UNKNOWN: u64 = u64::MAX;

/// What the clients of one partition committed, shared with the check.
#[derive(Debug)]
struct Partition {
    enqueued: AtomicU64,
    dequeued: AtomicU64,
    /// The sequence the next enqueue takes ([`UNKNOWN`]: find the tail in
    /// the database). A hint: an enqueue that finds the key taken looks
    /// the tail up instead.
    next_sequence: AtomicU64,
    /// The partition's acknowledged state and its committed operations not
    /// yet acknowledged (`None`: the start is unknown, this value did not
    /// load the database).
    history: Mutex<Option<History>>,
}

impl Partition {
    fn new(next_sequence: u64, start: Option<Span>) -> Self {
        Self {
            enqueued: AtomicU64::new(0),
            dequeued: AtomicU64::new(0),
            next_sequence: AtomicU64::new(next_sequence),
            history: Mutex::new(start.map(|acknowledged| History { acknowledged, ..History::default() })),
        }
    }

    fn history(&self) -> std::sync::MutexGuard<'_, Option<History>> {
        self.history.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The items of a partition: sequences `head..tail`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    head: u64,
    tail: u64,
}

impl Span {
    fn apply(self, op: QueueOp) -> Span {
        match op {
            QueueOp::Enqueue(sequence) => Span { tail: self.tail.max(sequence + 1), ..self },
            QueueOp::Dequeue(sequence) => Span { head: self.head.max(sequence + 1), ..self },
        }
    }

    fn rows(self) -> u64 {
        self.tail.saturating_sub(self.head)
    }

    /// After `enqueued` enqueues and `dequeued` dequeues, for a partition
    /// whose clients kept no history.
    fn apply_counts(self, enqueued: u64, dequeued: u64) -> Span {
        Span { head: self.head + dequeued, tail: self.tail + enqueued }
    }
}

/// A committed queue operation and the sequence it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueueOp {
    Enqueue(u64),
    Dequeue(u64),
}

/// The client's record of one partition: its pipelined commits are
/// acknowledged in commit order (`Worker::drain_acknowledged`), so the
/// first `commits - pending` of them are acknowledged; the state after the
/// acknowledged operations, and the committed ones after them.
#[derive(Debug, Default)]
struct History {
    /// Pipelined commits of the partition's client (every type).
    commits: u64,
    acknowledged: Span,
    /// (commit number, operation), oldest first: committed, not known to be
    /// acknowledged.
    pending: std::collections::VecDeque<(u64, QueueOp)>,
}

impl History {
    /// Folds the operations acknowledged by now (`pending` commits of the
    /// client's worker are not) into the acknowledged state.
    fn acknowledge(&mut self, pending: usize) {
        let acknowledged = self.commits.saturating_sub(pending as u64);
        while let Some(&(number, op)) = self.pending.front() {
            if number >= acknowledged {
                break;
            }
            self.acknowledged = self.acknowledged.apply(op);
            self.pending.pop_front();
        }
    }

    /// The states a crash may leave: after the acknowledged operations and
    /// each longer prefix of the committed ones.
    fn possible(&self) -> Vec<Span> {
        let mut states = vec![self.acknowledged];
        for &(_, op) in &self.pending {
            let last = *states.last().expect("not empty");
            states.push(last.apply(op));
        }
        states
    }
}

/// What `load` left: the counters of the check refer to it.
#[derive(Debug, Default)]
struct Counters {
    /// Partitions `0..loaded` hold `queue_length` items after load; `None`
    /// until this value loads a database.
    loaded: Option<u32>,
    partitions: BTreeMap<u32, Arc<Partition>>,
}

struct Shared {
    length: u64,
    scan: usize,
    field_size: usize,
    mix: Mix,
    load_seed: u64,
    counters: Mutex<Counters>,
}

impl Shared {
    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The counters of `partition`, created on first use.
    fn partition(&self, partition: u32) -> Arc<Partition> {
        let mut counters = self.counters();
        let loaded = counters.loaded;
        let length = self.length;
        Arc::clone(counters.partitions.entry(partition).or_insert_with(|| {
            // After a load this value knows where every tail is.
            let next = match loaded {
                Some(loaded) if partition < loaded => length,
                Some(_) => 0,
                None => UNKNOWN,
            };
            Arc::new(Partition::new(next, loaded.map(|_| Span { head: 0, tail: next })))
        }))
    }
}

/// The queue workload.
pub struct Queue {
    shared: Arc<Shared>,
}

impl Queue {
    /// The queue workload with `options.queue_length`, `queue_scan`,
    /// `queue_mix` and `field_size`.
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        let invalid = |message: String| Err(WorkloadError::InvalidOption(format!("queue: {message}")));
        if options.queue_length > MAX_QUEUE_LENGTH {
            return invalid(format!("queue_length must be at most {MAX_QUEUE_LENGTH}, got {}", options.queue_length));
        }
        if options.queue_scan == 0 {
            return invalid("queue_scan must be positive".into());
        }
        if options.field_size == 0 || options.field_size > 1 << 20 {
            return invalid(format!("items of {} bytes: must be from 1 byte to 1 MiB", options.field_size));
        }
        if options.queue_mix.iter().all(|&weight| weight == 0) {
            return invalid("the transaction mix needs a positive weight".into());
        }
        if options.queue_mix.iter().any(|&weight| weight > QueueMix::MAX_WEIGHT) {
            return invalid(format!("mix weights must be at most {}", QueueMix::MAX_WEIGHT));
        }
        Ok(Self {
            shared: Arc::new(Shared {
                length: options.queue_length,
                scan: options.queue_scan,
                field_size: options.field_size,
                mix: Mix::new(&options.queue_mix),
                load_seed: options.load_seed,
                counters: Mutex::new(Counters::default()),
            }),
        })
    }

    /// A concrete client (what [`Workload::client`] boxes): it works on
    /// partition `worker_index`.
    pub fn queue_client(&self, worker_index: usize, seed: u64) -> QueueClient {
        let partition_id = u32::try_from(worker_index).expect("worker indexes fit in u32");
        let mut rng = rng(child_seed(seed, worker_index as u64));
        let mut item = vec![0u8; self.shared.field_size];
        rng.fill_bytes(&mut item);
        QueueClient {
            partition: self.shared.partition(partition_id),
            shared: Arc::clone(&self.shared),
            partition_id,
            rng,
            item,
        }
    }

    /// Items committed into and out of `partition` by this value's clients
    /// since the last load: (enqueued, dequeued).
    pub fn committed(&self, partition: u32) -> (u64, u64) {
        let counters = self.shared.counters();
        counters.partitions.get(&partition).map_or((0, 0), |counters| {
            (counters.enqueued.load(Ordering::Acquire), counters.dequeued.load(Ordering::Acquire))
        })
    }
}

impl Workload for Queue {
    fn name(&self) -> &'static str {
        "queue"
    }

    fn tables(&self) -> Vec<TableSchema> {
        vec![TableSchema::ordered(table::NAMES[0]).max_key_len(KEY_LEN).max_value_len(self.shared.field_size)]
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
        let partitions = u32::try_from(threads.max(1))
            .map_err(|_| WorkloadError::InvalidOption(format!("queue: {threads} partitions are too many")))?;
        {
            let mut counters = shared.counters();
            counters.loaded = Some(partitions);
            counters.partitions.clear();
        }
        let per_task = (LOAD_BATCH_BYTES / shared.field_size).clamp(1, 256) as u64;
        let tasks: Vec<(u32, u64)> = (0..partitions)
            .flat_map(|partition| (0..shared.length).step_by(per_task as usize).map(move |first| (partition, first)))
            .collect();
        let total = shared.length * partitions as u64;
        load_parallel(db, threads, &tasks, total, progress, |worker, _slot, index, &(partition, first)| {
            let mut rng = rng(child_seed(shared.load_seed, index as u64));
            let last = (first + per_task).min(shared.length);
            let mut values = vec![0u8; shared.field_size * (last - first) as usize];
            rng.fill_bytes(&mut values);
            worker.run_pipelined(0, false, |tx| {
                for (sequence, value) in (first..last).zip(values.chunks(shared.field_size)) {
                    if !tx.insert(table::QUEUE, &key(partition, sequence), value)? {
                        return Err(TxError::Db(DbError::InvalidConfig(
                            "load: the queue table already holds rows; load expects an empty database".into(),
                        )));
                    }
                }
                Ok(())
            })?;
            Ok(last - first)
        })
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.queue_client(worker_index, seed))
    }

    fn expected_rows(&self) -> Option<u64> {
        let counters = self.shared.counters();
        let loaded = counters.loaded?;
        let moved: i128 = counters
            .partitions
            .values()
            .map(|partition| {
                partition.enqueued.load(Ordering::Acquire) as i128 - partition.dequeued.load(Ordering::Acquire) as i128
            })
            .sum();
        u64::try_from(loaded as i128 * self.shared.length as i128 + moved).ok()
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.tables())?;
        let shared = &self.shared;
        let mut worker = db.worker(0)?;
        // Per partition: (first sequence, last sequence, rows).
        let mut found: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
        let (mut gaps, mut bad_keys, mut bad_length) = (Vec::new(), 0u64, 0u64);
        scan_pages(&mut worker, table::QUEUE, &[], None, |k, value| {
            bad_length += (value.len() != shared.field_size) as u64;
            let Some((partition, sequence)) = parse_key(k) else {
                bad_keys += 1;
                return Ok(());
            };
            match found.get_mut(&partition) {
                None => {
                    found.insert(partition, (sequence, sequence, 1));
                }
                Some((_, last, rows)) => {
                    if sequence != *last + 1 && gaps.len() < 5 {
                        gaps.push(format!("partition {partition}: {} follows {last}", sequence));
                    }
                    *last = sequence;
                    *rows += 1;
                }
            }
            Ok(())
        })?;
        drop(worker);

        let mut report = CheckReport::default();
        report.push(
            "contiguous partitions",
            gaps.is_empty() && bad_keys == 0,
            if gaps.is_empty() && bad_keys == 0 {
                format!("{} partitions, each a run of consecutive sequences", found.len())
            } else {
                format!("{bad_keys} keys of another length than {KEY_LEN} bytes; gaps: {}", gaps.join(", "))
            },
        );
        report.push(
            "item length",
            bad_length == 0,
            format!("{bad_length} items of another length than {} bytes", shared.field_size),
        );

        // A database recovered from a crash lost the commits that were not
        // durable yet, which the counters include.
        let crashed = db.stats().recovery.is_some_and(|recovery| !recovery.clean_shutdown);
        let mut counters = shared.counters();
        match counters.loaded {
            None => report.push(
                "partition lengths",
                true,
                "not compared: this workload value did not load the database, so it has no counters",
            ),
            Some(loaded) => {
                let mut ids: Vec<u32> = found.keys().copied().collect();
                ids.extend(counters.partitions.keys().copied());
                ids.extend(0..loaded);
                ids.sort_unstable();
                ids.dedup();
                let mut wrong = Vec::new();
                for &partition in &ids {
                    let rows = found.get(&partition).map_or(0, |&(_, _, rows)| rows);
                    let start = if partition < loaded { shared.length } else { 0 };
                    let (enqueued, dequeued) = counters.partitions.get(&partition).map_or((0, 0), |counters| {
                        (counters.enqueued.load(Ordering::Acquire), counters.dequeued.load(Ordering::Acquire))
                    });
                    let expected = (start + enqueued).checked_sub(dequeued);
                    // The items found: sequences `first..=last`, or none.
                    let found_span =
                        found.get(&partition).map(|&(first, last, _)| Span { head: first, tail: last + 1 });
                    let matches = |span: Span| match found_span {
                        None => span.rows() == 0,
                        Some(found_span) => found_span == span && span.rows() == rows,
                    };
                    let history = counters.partitions.get(&partition).map(|counters| counters.history());
                    let possible = history.as_ref().and_then(|history| history.as_ref()).map(History::possible);
                    let possible = possible
                        .unwrap_or_else(|| vec![Span { head: 0, tail: start }.apply_counts(enqueued, dequeued)]);
                    // After a crash: the possible state the items match.
                    let mut recovered = None;
                    let (fits, told) = if crashed {
                        // Exactly the state after the acknowledged operations
                        // and some prefix of the unacknowledged ones.
                        recovered = possible.iter().copied().find(|&span| matches(span));
                        (
                            recovered.is_some(),
                            format!(
                                "items {found_span:?}, expected the acknowledged {:?} or one of the {} committed \
                                 operations after it: {:?}",
                                possible[0],
                                possible.len() - 1,
                                &possible[1..]
                            ),
                        )
                    } else {
                        let last = *possible.last().expect("not empty");
                        (
                            expected == Some(rows) && matches(last),
                            format!(
                                "{rows} items {found_span:?}, loaded {start} + {enqueued} enqueued - {dequeued} \
                                 dequeued, expected {last:?}"
                            ),
                        )
                    };
                    drop(history);
                    if let (Some(recovered), Some(counters)) = (recovered, counters.partitions.get(&partition)) {
                        // The lost operations are gone: later checks compare
                        // against what was recovered, and the next enqueue
                        // takes the sequence after the recovered tail, not
                        // the one after a lost enqueue (which would leave a
                        // gap). An empty partition keeps the sequence its
                        // recovered state ends at.
                        if let Some(history) = counters.history().as_mut() {
                            history.acknowledged = recovered;
                            history.pending.clear();
                            counters.next_sequence.store(recovered.tail, Ordering::Release);
                        }
                    }
                    if !fits && wrong.len() < 5 {
                        wrong.push(format!("partition {partition}: {told}"));
                    }
                }
                let detail = if !wrong.is_empty() {
                    wrong.join("; ")
                } else if crashed {
                    format!(
                        "{} partitions each hold exactly the items after their acknowledged operations and a prefix \
                         of the committed ones after them (recovered from a crash: commits that were not durable are \
                         lost)",
                        ids.len()
                    )
                } else {
                    format!("{} partitions hold the loaded length plus the enqueues minus the dequeues", ids.len())
                };
                report.push("partition lengths", wrong.is_empty(), detail);
            }
        }
        // Later enqueues continue after the last item found; after a crash
        // the hint may point past it, at a lost enqueue's sequence.
        for (&partition, &(_, last, _)) in &found {
            let next = last.saturating_add(1);
            let entry = counters.partitions.entry(partition).or_insert_with(|| Arc::new(Partition::new(next, None)));
            if crashed {
                entry.next_sequence.store(next, Ordering::Release);
            } else {
                let _ = entry.next_sequence.compare_exchange(UNKNOWN, next, Ordering::AcqRel, Ordering::Acquire);
                entry.next_sequence.fetch_max(next, Ordering::AcqRel);
            }
        }
        Ok(report)
    }
}

/// A queue client: runs the mix on its own partition.
pub struct QueueClient {
    shared: Arc<Shared>,
    partition: Arc<Partition>,
    partition_id: u32,
    rng: crate::gen::WorkloadRng,
    /// The item every enqueue writes (its content does not matter).
    item: Vec<u8>,
}

impl QueueClient {
    /// Draws the next transaction type from the mix.
    pub fn next_type(&mut self) -> usize {
        self.shared.mix.pick(&mut self.rng)
    }

    /// The partition this client works on.
    pub fn partition(&self) -> u32 {
        self.partition_id
    }

    fn enqueue(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let Self { partition, partition_id, item, .. } = self;
        let partition_id = *partition_id;
        let (outcome, attempts) = worker.run_pipelined(ENQUEUE as u32, false, |tx| {
            let hint = partition.next_sequence.load(Ordering::Acquire);
            if hint != UNKNOWN && tx.insert(table::QUEUE, &key(partition_id, hint), item)? {
                return Ok(hint);
            }
            // The tail is unknown (a fresh value on an existing database)
            // or another client of this partition took the key.
            let sequence = tail(tx, partition_id)?.map_or(0, |last| last + 1);
            if !tx.insert(table::QUEUE, &key(partition_id, sequence), item)? {
                return Err(crate::common::corrupt(format!(
                    "queue partition {partition_id}: sequence {sequence} after the tail already exists"
                )));
            }
            Ok(sequence)
        })?;
        let committed = match outcome {
            Outcome::Committed(sequence) => {
                partition.next_sequence.fetch_max(sequence + 1, Ordering::AcqRel);
                partition.enqueued.fetch_add(1, Ordering::AcqRel);
                Self::record(partition, worker, Some(QueueOp::Enqueue(sequence)));
                true
            }
            Outcome::RolledBack => false,
        };
        Ok(TxnSummary { type_index: ENQUEUE, committed, attempts })
    }

    fn dequeue(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let partition_id = self.partition_id;
        let (outcome, attempts) = worker.run_pipelined(DEQUEUE as u32, false, |tx| {
            let range = PartitionRange::new(partition_id);
            let mut head = None;
            tx.scan_with(table::QUEUE, range.bounds(), ScanDirection::Forward, 1, |k, _| {
                head = Some(k.to_vec());
                false
            })?;
            // An empty queue: nothing to take.
            let Some(head) = head else { return Err(tx.rollback()) };
            if !tx.delete(table::QUEUE, &head)? {
                return Err(crate::common::corrupt(format!(
                    "queue partition {partition_id}: the head the scan returned is gone"
                )));
            }
            Ok(parse_key(&head).map_or(0, |(_, sequence)| sequence))
        })?;
        let committed = matches!(outcome, Outcome::Committed(_));
        if let Outcome::Committed(sequence) = outcome {
            self.partition.dequeued.fetch_add(1, Ordering::AcqRel);
            Self::record(&self.partition, worker, Some(QueueOp::Dequeue(sequence)));
        }
        Ok(TxnSummary { type_index: DEQUEUE, committed, attempts })
    }

    fn peek(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (partition_id, limit) = (self.partition_id, self.shared.scan);
        let (outcome, attempts) = worker.run_pipelined(PEEK as u32, true, |tx| {
            let range = PartitionRange::new(partition_id);
            let mut seen = 0usize;
            tx.scan_with(table::QUEUE, range.bounds(), ScanDirection::Forward, limit, |_, _| {
                seen += 1;
                true
            })?;
            Ok(seen)
        })?;
        let committed = matches!(outcome, Outcome::Committed(_));
        if committed {
            Self::record(&self.partition, worker, None);
        }
        Ok(TxnSummary { type_index: PEEK, committed, attempts })
    }

    /// Records a pipelined commit of this client (`op`: what it did to the
    /// partition) and folds what its worker acknowledged by now. The
    /// worker is this client's alone, as in the benchmark drivers.
    fn record(partition: &Partition, worker: &Worker, op: Option<QueueOp>) {
        if let Some(history) = partition.history().as_mut() {
            let number = history.commits;
            history.commits += 1;
            if let Some(op) = op {
                history.pending.push_back((number, op));
            }
            history.acknowledge(worker.pending_acknowledgements());
        }
    }
}

/// The last sequence of `partition`, by a reverse scan with limit 1.
fn tail(tx: &mut Transaction<'_>, partition: u32) -> TxResult<Option<u64>> {
    let range = PartitionRange::new(partition);
    let mut last = None;
    tx.scan_with(table::QUEUE, range.bounds(), ScanDirection::Reverse, 1, |k, _| {
        last = parse_key(k).map(|(_, sequence)| sequence);
        false
    })?;
    Ok(last)
}

impl Client for QueueClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        // What the driver drained since the last transaction.
        if let Some(history) = self.partition.history().as_mut() {
            history.acknowledge(worker.pending_acknowledgements());
        }
        match self.next_type() {
            ENQUEUE => self.enqueue(worker),
            DEQUEUE => self.dequeue(worker),
            _ => self.peek(worker),
        }
    }
}
