//! YCSB over one `usertable` of `records` rows of `fields` x `field_size`
//! bytes, keyed by the record number (8 bytes big-endian, so scans run in
//! record order).
//!
//! Every variant runs `ops_per_txn` operations per transaction, except the
//! range variants of PHyTM: `srq`/`lrq` run one scan of 16/256 rows and
//! `sru`/`lru` update 16/256 rows per transaction. Keys follow a scrambled
//! zipfian distribution with `theta` (uniform when `theta == 0`); D reads
//! the latest rows (the zipfian over recency, unscrambled); E scans 1..=100
//! rows. Updates (and F's read-modify-writes) replace one field of the row
//! in place (`Transaction::update_with`: the engine reads the row and
//! buffers it with that field changed), as YCSB's default
//! `writeallfields=false`; reads use `get_with` and scans visit rows, so a
//! transaction copies no row into the client.
//!
//! Inserts (D, E) take keys from a counter shared by the clients of one
//! [`Ycsb`] value, starting after the largest key in the database.
//!
//! Every row starts with a [`ROW_HEADER`]-byte header: its write version
//! (0 when loaded or inserted, one more per update) and a checksum of the
//! key, that version and the rest of the row ([`seal_row`]). An update
//! changes its field and re-seals the row inside the same in-place change,
//! so the check ([`Workload::check`]) verifies every row, also on a
//! database recovered from a crash: a torn, mixed-up or partly lost row
//! fails it.
//!
//! PHyTM's mixed workload (its Fig. 5e: one thread runs long range queries
//! while the others run short ones) is `long_threads` with a range variant:
//! workers with an index below it run the long variant of the pair
//! (`lrq`/`lru`), the others the short one (`srq`/`sru`), and transactions
//! are typed by class ([`MIXED_TRANSACTION_TYPES`]) rather than by whether
//! they write (a pair either never or always writes), so each class's
//! throughput and latency are reported apart.
//!
//! Zen+'s long-running transactions (zen-plus.txt §5.5, Fig. 24-26) are
//! `long_threads` with a point variant and a [`LongKind`]: the long threads
//! run a read-only scan of `long_rows` rows ([`LongKind::Scan`]) or an
//! update of `long_rows` consecutive rows ([`LongKind::Update`]) from a
//! random start, with `long_every` ordinary transactions of the variant
//! between two long ones (0: only long ones), and the other threads run the
//! variant; `long_disjoint` keeps the long updates in the upper half of
//! the table and the short transactions in the lower half (Fig. 25). Types
//! are again "short" and "long", by transaction.

use crate::common::{load_parallel, verify_tables, LOAD_BATCH_BYTES};
use crate::gen::{child_seed, rng, WorkloadRng};
use crate::zipf::Zipfian;
use crate::{CheckReport, Client, PlannedTxn, TxnSummary, Workload, WorkloadError, WorkloadOptions, YcsbVariant};
use pmtx_engine::{Database, DbError, Outcome, ScanDirection, TableId, TableSchema, Worker};
use rand::{Rng, RngCore};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Transaction type names: transactions without writes run read-only.
pub const TRANSACTION_TYPES: [&str; 2] = ["read_only", "read_write"];
/// Type index of read-only transactions.
pub const READ_ONLY: usize = 0;
/// Type index of transactions that write.
pub const READ_WRITE: usize = 1;
/// Transaction type names with `long_threads > 0`: the class of the
/// transaction (each worker runs one class only).
pub const MIXED_TRANSACTION_TYPES: [&str; 2] = ["short", "long"];
/// Type index of short transactions (`srq`/`sru`) with `long_threads > 0`.
pub const SHORT: usize = 0;
/// Type index of long transactions (`lrq`/`lru`) with `long_threads > 0`.
pub const LONG: usize = 1;
/// Rows a short range transaction (`srq`, `sru`) scans or updates.
pub const SHORT_RANGE_ROWS: usize = 16;
/// Rows a long range transaction (`lrq`, `lru`) scans or updates.
pub const LONG_RANGE_ROWS: usize = 256;
/// Longest scan of workload E.
pub const MAX_SCAN_LENGTH: usize = 100;
/// Rows of a long transaction with a [`LongKind`] unless told otherwise.
pub const DEFAULT_LONG_ROWS: usize = 10_000;

/// What the long threads run beside a point variant (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongKind {
    /// A read-only scan of the long transaction's rows.
    Scan,
    /// An update of one field of each of the long transaction's rows.
    Update,
}

impl LongKind {
    /// Every kind.
    pub const ALL: [LongKind; 2] = [LongKind::Scan, LongKind::Update];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            LongKind::Scan => "scan",
            LongKind::Update => "update",
        }
    }

    /// Parses a name, case-insensitively.
    pub fn parse(name: &str) -> Result<Self, WorkloadError> {
        Self::ALL.into_iter().find(|kind| kind.name().eq_ignore_ascii_case(name.trim())).ok_or_else(|| {
            WorkloadError::InvalidOption(format!("unknown long transaction kind {name:?}; kinds: scan, update"))
        })
    }
}

impl std::fmt::Display for LongKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Table ids.
pub mod table {
    use pmtx_engine::TableId;
    /// The one table.
    pub const USERTABLE: TableId = TableId(0);
    /// Table names, by id.
    pub const NAMES: [&str; 1] = ["usertable"];
}

/// The key of record `number`.
pub fn key(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

/// Bytes of a row's header: write version (`u64` little-endian), then the
/// checksum of the key, the version and the rest of the row.
pub const ROW_HEADER: usize = 16;

/// The checksum of a row: of its `key`, its write `version` and its bytes
/// after the header (`payload`). CRC-32C-class hardware CRC (crc32fast's
/// carry-less-multiply path): every update re-seals its row, so this runs
/// once per updated row inside the measured transactions and must cost
/// little beside the engine's own work (a 1 KB row in tens of
/// nanoseconds). Detection, not authentication: a damaged row matches by
/// chance with probability 2^-32.
pub fn row_checksum(key: &[u8], version: u64, payload: &[u8]) -> u64 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&(key.len() as u32).to_le_bytes());
    hasher.update(key);
    hasher.update(&version.to_le_bytes());
    hasher.update(payload);
    u64::from(hasher.finalize())
}

/// Writes the header of `row` (at least [`ROW_HEADER`] bytes) for `key`
/// and write `version`.
pub fn seal_row(key: &[u8], version: u64, row: &mut [u8]) {
    let checksum = row_checksum(key, version, &row[ROW_HEADER..]);
    row[..8].copy_from_slice(&version.to_le_bytes());
    row[8..ROW_HEADER].copy_from_slice(&checksum.to_le_bytes());
}

/// The write version of `row` if its checksum matches `key`, else `None`
/// (also for a row shorter than the header).
pub fn verify_row(key: &[u8], row: &[u8]) -> Option<u64> {
    if row.len() < ROW_HEADER {
        return None;
    }
    let version = u64::from_le_bytes(row[..8].try_into().expect("8 bytes"));
    let checksum = u64::from_le_bytes(row[8..ROW_HEADER].try_into().expect("8 bytes"));
    (row_checksum(key, version, &row[ROW_HEADER..]) == checksum).then_some(version)
}

const UNKNOWN: u64 = u64::MAX;

impl YcsbVariant {
    /// Fraction of reads among the point operations (the rest are
    /// updates, read-modify-writes for F, inserts for D and E).
    pub fn read_proportion(self) -> f64 {
        match self {
            YcsbVariant::A | YcsbVariant::F | YcsbVariant::Balanced => 0.5,
            YcsbVariant::B | YcsbVariant::D | YcsbVariant::E => 0.95,
            YcsbVariant::ReadHeavy => 0.9,
            YcsbVariant::WriteHeavy => 0.1,
            YcsbVariant::C | YcsbVariant::ReadOnly | YcsbVariant::ShortRangeQuery | YcsbVariant::LongRangeQuery => 1.0,
            YcsbVariant::ShortRangeUpdate | YcsbVariant::LongRangeUpdate => 0.0,
        }
    }

    /// Whether the variant inserts rows (D and E).
    pub fn inserts(self) -> bool {
        matches!(self, YcsbVariant::D | YcsbVariant::E)
    }

    /// Whether the variant range-scans the table (E and the range queries;
    /// D finds its insert point with a reverse scan). The others run on a
    /// hash table: point operations need no order.
    pub fn scans(self) -> bool {
        matches!(self, YcsbVariant::D | YcsbVariant::E | YcsbVariant::ShortRangeQuery | YcsbVariant::LongRangeQuery)
    }
}

struct Shared {
    variant: YcsbVariant,
    records: u64,
    fields: usize,
    field_size: usize,
    ops_per_txn: usize,
    zipf: Zipfian,
    next_insert: AtomicU64,
    load_seed: u64,
    /// Workers `0..long_threads` run the long variant of the pair, or long
    /// transactions of `long_kind` (0: every worker runs `variant`).
    long_threads: usize,
    long_kind: Option<LongKind>,
    /// Rows of a long transaction.
    long_rows: usize,
    /// Short transactions of a long thread between two long ones.
    long_every: usize,
    long_disjoint: bool,
}

impl Shared {
    fn row_len(&self) -> usize {
        self.fields * self.field_size
    }
}

/// The YCSB workload.
pub struct Ycsb {
    shared: Arc<Shared>,
}

impl Ycsb {
    /// YCSB `options.ycsb` over `options.records` rows; computes the zipfian
    /// constants (O(records)).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        let invalid = |message: String| Err(WorkloadError::InvalidOption(format!("ycsb: {message}")));
        if options.records == 0 || options.records >= 1 << 62 {
            return invalid(format!("records must be positive, got {}", options.records));
        }
        if options.fields == 0
            || options.field_size == 0
            || options.fields.saturating_mul(options.field_size) > 1 << 20
            || options.fields.saturating_mul(options.field_size) < ROW_HEADER
        {
            return invalid(format!(
                "rows of {} fields x {} bytes: both must be positive and rows from {ROW_HEADER} bytes (the version \
                 and checksum header) to 1 MiB",
                options.fields, options.field_size
            ));
        }
        if options.ops_per_txn == 0 {
            return invalid("ops_per_txn must be positive".into());
        }
        if !(options.theta >= 0.0 && options.theta.is_finite() && options.theta != 1.0) {
            return invalid(format!("theta must be >= 0 and != 1 (0 = uniform), got {}", options.theta));
        }
        let pair = options.ycsb.short_long_pair().is_some();
        if options.long_threads > 0 && !pair && options.long_kind.is_none() {
            return invalid(format!(
                "long_threads ({}) needs variant srq, lrq, sru or lru (a short/long pair), or a long transaction \
                 kind (scan or update) beside variant {}",
                options.long_threads, options.ycsb
            ));
        }
        if let Some(kind) = options.long_kind {
            if pair {
                return invalid(format!(
                    "a long transaction kind ({kind}) goes with a point variant; {} pairs its own long transaction",
                    options.ycsb
                ));
            }
            if options.long_threads == 0 {
                return invalid(format!("a long transaction kind ({kind}) needs long_threads"));
            }
        }
        if options.long_threads == 0 && (options.long_rows.is_some() || options.long_every > 0) {
            return invalid("long_rows and long_every need long_threads".into());
        }
        if options.long_every > 0 && options.long_kind.is_none() {
            return invalid(
                "long_every needs a long transaction kind (a pair's long threads run only long ones)".into(),
            );
        }
        if options.long_disjoint && options.long_kind != Some(LongKind::Update) {
            return invalid("long_disjoint applies to long updates (long transaction kind update)".into());
        }
        let long_rows = options.long_rows.unwrap_or(if pair { LONG_RANGE_ROWS } else { DEFAULT_LONG_ROWS });
        let long_space = if options.long_disjoint { options.records / 2 } else { options.records };
        if long_rows == 0 || (options.long_kind.is_some() && long_rows as u64 > long_space) {
            return invalid(format!(
                "long_rows must be 1 to the {long_space} rows a long transaction can reach, got {long_rows}"
            ));
        }
        if options.long_disjoint && options.records < 2 {
            return invalid("long_disjoint needs at least 2 records".into());
        }
        Ok(Self {
            shared: Arc::new(Shared {
                variant: options.ycsb,
                records: options.records,
                fields: options.fields,
                field_size: options.field_size,
                ops_per_txn: options.ops_per_txn,
                zipf: Zipfian::new(options.records, options.theta),
                next_insert: AtomicU64::new(UNKNOWN),
                load_seed: options.load_seed,
                long_threads: options.long_threads,
                long_kind: options.long_kind,
                long_rows,
                long_every: options.long_every,
                long_disjoint: options.long_disjoint,
            }),
        })
    }

    /// The variant.
    pub fn variant(&self) -> YcsbVariant {
        self.shared.variant
    }

    /// Workers `0..long_threads()` run long transactions (0: none, every
    /// worker runs [`Ycsb::variant`]).
    pub fn long_threads(&self) -> usize {
        self.shared.long_threads
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn ycsb_client(&self, worker_index: usize, seed: u64) -> YcsbClient {
        let mut rng = rng(child_seed(seed, worker_index as u64));
        let mut row = vec![0u8; self.shared.row_len()];
        rng.fill_bytes(&mut row);
        let long_thread = worker_index < self.shared.long_threads;
        let (variant, class) = match self.shared.variant.short_long_pair() {
            Some((_, long)) if long_thread => (long, Some(LONG)),
            Some((short, _)) if self.shared.long_threads > 0 => (short, Some(SHORT)),
            None if self.shared.long_threads > 0 => (self.shared.variant, Some(SHORT)),
            _ => (self.shared.variant, None),
        };
        YcsbClient {
            variant,
            class,
            long_thread,
            since_long: 0,
            last_rows: 0,
            shared: Arc::clone(&self.shared),
            rng,
            zipf: self.shared.zipf.clone(),
            row,
            values: Vec::new(),
            ops: Vec::new(),
        }
    }
}

impl Workload for Ycsb {
    fn name(&self) -> &'static str {
        "ycsb"
    }

    fn tables(&self) -> Vec<TableSchema> {
        let table = if self.shared.variant.scans() || self.shared.long_kind == Some(LongKind::Scan) {
            TableSchema::ordered(table::NAMES[0])
        } else {
            TableSchema::hashed(table::NAMES[0])
        };
        vec![table.max_key_len(8).max_value_len(self.shared.row_len())]
    }

    fn routable(&self) -> bool {
        true
    }

    fn loaded_bytes(&self) -> Option<u64> {
        // 8-byte keys and rows of fields x field_size bytes.
        Some(self.shared.records.saturating_mul(8 + self.shared.row_len() as u64))
    }

    fn transaction_types(&self) -> &'static [&'static str] {
        if self.shared.long_threads > 0 {
            &MIXED_TRANSACTION_TYPES
        } else {
            &TRANSACTION_TYPES
        }
    }

    fn validate_threads(&self, threads: usize) -> Result<(), WorkloadError> {
        let long_threads = self.shared.long_threads;
        // A long thread that runs short transactions between its long ones
        // (`long_every`) measures both classes by itself.
        let long_threads_run_short = self.shared.long_kind.is_some() && self.shared.long_every > 0;
        if long_threads > 0 && long_threads >= threads && !long_threads_run_short {
            // Without a short thread there is no short-transaction
            // throughput to measure next to the long ones.
            return Err(WorkloadError::InvalidOption(format!(
                "ycsb: long_threads ({long_threads}) must be below the thread count ({threads}): at least one \
                 thread runs short transactions (or give long threads short ones too: long_every)"
            )));
        }
        Ok(())
    }

    fn load(
        &self,
        db: &Arc<Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError> {
        verify_tables(db, &self.tables())?;
        let shared = &self.shared;
        let per_task = (LOAD_BATCH_BYTES / shared.row_len()).clamp(1, 256) as u64;
        let tasks: Vec<u64> = (0..shared.records).step_by(per_task as usize).collect();
        load_parallel(db, threads, &tasks, shared.records, progress, |worker, _slot, index, &first| {
            let mut rng = rng(child_seed(shared.load_seed, index as u64));
            let last = (first + per_task).min(shared.records);
            let mut values = vec![0u8; shared.row_len() * (last - first) as usize];
            rng.fill_bytes(&mut values);
            for (number, value) in (first..last).zip(values.chunks_mut(shared.row_len())) {
                seal_row(&key(number), 0, value);
            }
            worker.run_pipelined(0, false, |tx| {
                for (number, value) in (first..last).zip(values.chunks(shared.row_len())) {
                    if !tx.insert(table::USERTABLE, &key(number), value)? {
                        return Err(pmtx_engine::TxError::Db(DbError::InvalidConfig(
                            "load: usertable already holds rows; load expects an empty database".into(),
                        )));
                    }
                }
                Ok(())
            })?;
            Ok(last - first)
        })?;
        shared.next_insert.store(shared.records, Ordering::Release);
        Ok(())
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.ycsb_client(worker_index, seed))
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.tables())?;
        let shared = &self.shared;
        let (mut base, mut inserted, mut bad_length, mut bad_key) = (0u64, 0u64, 0u64, 0u64);
        let (mut bad_checksum, mut bad_inserted, mut first_bad) = (0u64, 0u64, None);
        let mut next = 0u64;
        // A quiescent dump: the table may be a hash table (no scans).
        db.for_each_row(table::USERTABLE, |k, value| {
            let Ok(number) = <[u8; 8]>::try_from(k).map(u64::from_be_bytes) else {
                bad_key += 1;
                return;
            };
            next = next.max(number + 1);
            let intact = verify_row(k, value).is_some();
            if !intact {
                bad_checksum += 1;
                first_bad.get_or_insert(number);
            }
            if number < shared.records {
                base += 1;
            } else {
                inserted += 1;
                bad_inserted += !intact as u64;
            }
            bad_length += (value.len() != shared.row_len()) as u64;
        })?;
        let mut report = CheckReport::default();
        report.push(
            "loaded rows",
            base == shared.records && bad_key == 0,
            format!("{base} of keys 0..{} present, expected {}; {bad_key} bad keys", shared.records, shared.records),
        );
        report.push(
            "row length",
            bad_length == 0,
            format!("{bad_length} rows of another length than {} bytes", shared.row_len()),
        );
        report.push(
            "row checksums",
            bad_checksum == 0,
            format!(
                "{bad_checksum} rows whose header does not match their key, write version and content (first: \
                 {first_bad:?})"
            ),
        );
        // Rows above the loaded keys: no more than this process handed out
        // keys for; a process that handed out none (a fresh value, e.g. on
        // a recovered database) cannot count them, and checks that each
        // one is an intact row its clients inserted (an insert seals its
        // row for its key).
        match shared.next_insert.load(Ordering::Acquire) {
            UNKNOWN => report.push(
                "inserted rows",
                bad_inserted == 0,
                format!(
                    "{inserted} rows above the loaded keys, {bad_inserted} of them not intact (this process \
                     handed out no keys, so it cannot count them)"
                ),
            ),
            counter => {
                let assigned = counter.saturating_sub(shared.records);
                report.push(
                    "inserted rows",
                    inserted <= assigned && bad_inserted == 0,
                    format!(
                        "{inserted} rows above the loaded keys ({assigned} keys handed out by this process), \
                         {bad_inserted} of them not intact"
                    ),
                );
            }
        }
        // Later inserts start after every key present.
        let next = next.max(shared.records);
        let _ = shared.next_insert.compare_exchange(UNKNOWN, next, Ordering::AcqRel, Ordering::Acquire);
        shared.next_insert.fetch_max(next, Ordering::AcqRel);
        Ok(report)
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Read(u64),
    /// Replace field `field` with `values[slot]`, in place.
    Update(u64, usize, usize),
    /// Read, replace field `field` with `values[slot]`, write (the same
    /// in-place change as an update; F names it apart).
    ReadModifyWrite(u64, usize, usize),
    /// Insert `values[slot]`.
    Insert(u64, usize),
    /// Scan up to this many rows from the key on.
    Scan(u64, usize),
}

impl Op {
    /// The key (a scan's first).
    fn key(&self) -> u64 {
        match *self {
            Op::Read(number)
            | Op::Update(number, ..)
            | Op::ReadModifyWrite(number, ..)
            | Op::Insert(number, _)
            | Op::Scan(number, _) => number,
        }
    }

    /// The slot of `values` it writes, if any.
    fn value_slot(&self) -> Option<usize> {
        match *self {
            Op::Update(_, _, slot) | Op::ReadModifyWrite(_, _, slot) | Op::Insert(_, slot) => Some(slot),
            Op::Read(_) | Op::Scan(..) => None,
        }
    }
}

/// A YCSB client.
pub struct YcsbClient {
    /// What this client runs: the workload's variant, or with
    /// `long_threads` the short or long variant of its pair.
    variant: YcsbVariant,
    /// With `long_threads`: [`SHORT`] or [`LONG`], the type of the
    /// client's transactions of `variant`.
    class: Option<usize>,
    /// Whether this client is a long thread.
    long_thread: bool,
    /// Short transactions since its last long one.
    since_long: usize,
    /// Rows the last committed transaction found (read, scanned, updated,
    /// inserted).
    last_rows: usize,
    shared: Arc<Shared>,
    rng: WorkloadRng,
    zipf: Zipfian,
    /// A random row; each update changes one of its fields.
    row: Vec<u8>,
    values: Vec<Vec<u8>>,
    ops: Vec<Op>,
}

impl YcsbClient {
    /// The variant this client runs (with `long_threads`, the short or
    /// long one of the pair, by worker index).
    pub fn variant(&self) -> YcsbVariant {
        self.variant
    }

    /// Rows the last committed transaction found: read, scanned (a scan
    /// that reaches the end of the table finds fewer than asked for),
    /// updated or inserted; 0 before the first commit and after a
    /// rollback.
    pub fn last_rows(&self) -> usize {
        self.last_rows
    }

    /// A key of `0..count` from the scrambled zipfian (or uniform).
    pub fn choose_key(&mut self, count: u64) -> u64 {
        self.zipf.resize(count.max(1));
        self.zipf.next_scrambled(&mut self.rng)
    }

    /// A recent key: `count - 1 - zipfian rank`.
    pub fn latest_key(&mut self, count: u64) -> u64 {
        self.zipf.resize(count.max(1));
        count.saturating_sub(1) - self.zipf.next(&mut self.rng).min(count.saturating_sub(1))
    }

    /// The first key not yet handed out, finding it in the database the
    /// first time (a read-only reverse scan).
    fn insert_point(&mut self, worker: &mut Worker) -> Result<u64, DbError> {
        let current = self.shared.next_insert.load(Ordering::Acquire);
        if current != UNKNOWN {
            return Ok(current);
        }
        let last = worker
            .run_read_only(|tx| {
                let mut last = None;
                tx.scan_with(
                    table::USERTABLE,
                    (Bound::Unbounded, Bound::Unbounded),
                    ScanDirection::Reverse,
                    1,
                    |k, _| {
                        last = <[u8; 8]>::try_from(k).ok().map(u64::from_be_bytes);
                        false
                    },
                )?;
                Ok(last)
            })?
            .committed()
            .flatten();
        let next = last.map_or(0, |number| number + 1).max(self.shared.records);
        let _ = self.shared.next_insert.compare_exchange(UNKNOWN, next, Ordering::AcqRel, Ordering::Acquire);
        Ok(self.shared.next_insert.load(Ordering::Acquire))
    }

    fn value_slot(&mut self, used: &mut usize, len: usize) -> usize {
        let slot = *used;
        *used += 1;
        if self.values.len() <= slot {
            self.values.push(Vec::new());
        }
        self.values[slot].resize(len, 0);
        slot
    }

    /// A new row: the client's row with one field changed.
    fn new_row(&mut self, used: &mut usize) -> usize {
        let field_size = self.shared.field_size;
        let field = self.rng.gen_range(0..self.shared.fields);
        self.rng.fill_bytes(&mut self.row[field * field_size..(field + 1) * field_size]);
        let slot = self.value_slot(used, self.row.len());
        self.values[slot].copy_from_slice(&self.row);
        slot
    }

    fn new_field(&mut self, used: &mut usize) -> (usize, usize) {
        let field = self.rng.gen_range(0..self.shared.fields);
        let slot = self.value_slot(used, self.shared.field_size);
        let mut value = std::mem::take(&mut self.values[slot]);
        self.rng.fill_bytes(&mut value);
        self.values[slot] = value;
        (field, slot)
    }

    /// Plans a long transaction of `kind` (module docs).
    fn plan_long(&mut self, kind: LongKind) {
        let shared = Arc::clone(&self.shared);
        let rows = shared.long_rows as u64;
        let (first, space) = if shared.long_disjoint {
            (shared.records / 2, shared.records - shared.records / 2)
        } else {
            (0, shared.records)
        };
        let start = first + self.rng.gen_range(0..=space.saturating_sub(rows));
        self.ops.clear();
        match kind {
            LongKind::Scan => self.ops.push(Op::Scan(start, shared.long_rows)),
            LongKind::Update => {
                let mut used = 0;
                for key in start..start + rows {
                    let (field, slot) = self.new_field(&mut used);
                    self.ops.push(Op::Update(key, field, slot));
                }
            }
        }
    }

    fn plan(&mut self, worker: &mut Worker) -> Result<(), DbError> {
        let shared = Arc::clone(&self.shared);
        let variant = self.variant;
        let mut used = 0;
        self.ops.clear();
        let count = if variant.inserts() {
            self.insert_point(worker)?
        } else if shared.long_disjoint {
            // The lower half: the long updates own the upper one.
            shared.records / 2
        } else {
            shared.records
        };
        match variant {
            YcsbVariant::ShortRangeQuery | YcsbVariant::LongRangeQuery => {
                let len = if variant == YcsbVariant::ShortRangeQuery { SHORT_RANGE_ROWS } else { shared.long_rows };
                let start = self.choose_key(count);
                self.ops.push(Op::Scan(start, len));
            }
            YcsbVariant::ShortRangeUpdate | YcsbVariant::LongRangeUpdate => {
                let len = if variant == YcsbVariant::ShortRangeUpdate { SHORT_RANGE_ROWS } else { shared.long_rows };
                for _ in 0..len {
                    let key = self.choose_key(count);
                    let (field, slot) = self.new_field(&mut used);
                    self.ops.push(Op::Update(key, field, slot));
                }
            }
            _ => {
                for _ in 0..shared.ops_per_txn {
                    let read = self.rng.gen_bool(variant.read_proportion());
                    let op = match (variant, read) {
                        (YcsbVariant::D, true) => Op::Read(self.latest_key(count)),
                        (YcsbVariant::E, true) => {
                            let start = self.choose_key(count);
                            Op::Scan(start, self.rng.gen_range(1..=MAX_SCAN_LENGTH))
                        }
                        (YcsbVariant::D | YcsbVariant::E, false) => {
                            let number = shared.next_insert.fetch_add(1, Ordering::AcqRel);
                            let slot = self.new_row(&mut used);
                            seal_row(&key(number), 0, &mut self.values[slot]);
                            Op::Insert(number, slot)
                        }
                        (_, true) => Op::Read(self.choose_key(count)),
                        (YcsbVariant::F, false) => {
                            let key = self.choose_key(count);
                            let (field, slot) = self.new_field(&mut used);
                            Op::ReadModifyWrite(key, field, slot)
                        }
                        (_, false) => {
                            let key = self.choose_key(count);
                            let (field, slot) = self.new_field(&mut used);
                            Op::Update(key, field, slot)
                        }
                    };
                    self.ops.push(op);
                }
            }
        }
        Ok(())
    }
}

impl YcsbClient {
    /// Draws the next transaction into `ops` and `values`: (type index,
    /// read-only).
    fn prepare(&mut self, worker: &mut Worker) -> Result<(usize, bool), DbError> {
        let long = match self.shared.long_kind {
            Some(kind) if self.long_thread && self.since_long >= self.shared.long_every => {
                self.since_long = 0;
                self.plan_long(kind);
                true
            }
            _ => {
                self.since_long += 1;
                self.plan(worker)?;
                false
            }
        };
        let read_only = self.ops.iter().all(|op| matches!(op, Op::Read(_) | Op::Scan(..)));
        let type_index = if long { LONG } else { self.class.unwrap_or(if read_only { READ_ONLY } else { READ_WRITE }) };
        Ok((type_index, read_only))
    }
}

/// Runs the transaction of `ops` (new values in `values`) on `worker`:
/// the outcome (rows found) and the attempts.
fn execute(
    worker: &mut Worker,
    type_index: usize,
    read_only: bool,
    ops: &[Op],
    values: &[Vec<u8>],
    field_size: usize,
) -> Result<(Outcome<usize>, u32), DbError> {
    worker.run_pipelined(type_index as u32, read_only, |tx| {
        // Start every point access's memory misses at once (hash
        // tables; a hint with no effect on the transaction).
        for op in ops.iter() {
            if let Op::Read(number) | Op::Update(number, ..) | Op::ReadModifyWrite(number, ..) = *op {
                tx.prefetch(table::USERTABLE, &key(number));
            }
        }
        let mut found = 0usize;
        for op in ops.iter() {
            match *op {
                Op::Read(number) => found += tx.get_with(table::USERTABLE, &key(number), |_| ())?.is_some() as usize,
                Op::Update(number, field, slot) | Op::ReadModifyWrite(number, field, slot) => {
                    let value = &values[slot];
                    let row_key = key(number);
                    let changed = tx.update_with(table::USERTABLE, &row_key, |row| {
                        // A row of another length (the check reports
                        // it) gets what fits of the field.
                        let version = row
                            .get(..8)
                            .map_or(0, |word| u64::from_le_bytes(word.try_into().expect("8 bytes")).wrapping_add(1));
                        let end = ((field + 1) * field_size).min(row.len());
                        let start = (field * field_size).min(end);
                        row[start..end].copy_from_slice(&value[..end - start]);
                        if row.len() >= ROW_HEADER {
                            seal_row(&row_key, version, row);
                        }
                    })?;
                    found += changed.is_some() as usize;
                }
                Op::Insert(number, slot) => found += tx.insert(table::USERTABLE, &key(number), &values[slot])? as usize,
                Op::Scan(number, len) => {
                    let start = key(number);
                    tx.scan_with(
                        table::USERTABLE,
                        (Bound::Included(&start[..]), Bound::Unbounded),
                        ScanDirection::Forward,
                        len,
                        |_, _| {
                            found += 1;
                            true
                        },
                    )?;
                }
            }
        }
        Ok(found)
    })
}

impl Client for YcsbClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (type_index, read_only) = self.prepare(worker)?;
        let (outcome, attempts) =
            execute(worker, type_index, read_only, &self.ops, &self.values, self.shared.field_size)?;
        self.last_rows = match outcome {
            Outcome::Committed(found) => found,
            Outcome::RolledBack => 0,
        };
        Ok(TxnSummary { type_index, committed: matches!(outcome, Outcome::Committed(_)), attempts })
    }

    fn plan_next(&mut self, worker: &mut Worker) -> Option<Result<Box<dyn PlannedTxn>, DbError>> {
        Some(self.prepare(worker).map(|(type_index, read_only)| {
            // The values the plan uses move with it (the client draws new
            // buffers for its next plan).
            let used = self.ops.iter().filter_map(Op::value_slot).max().map_or(0, |slot| slot + 1);
            let values = self.values.drain(..used.min(self.values.len())).collect();
            Box::new(YcsbTxn {
                type_index,
                read_only,
                ops: std::mem::take(&mut self.ops),
                values,
                field_size: self.shared.field_size,
            }) as Box<dyn PlannedTxn>
        }))
    }
}

/// A planned YCSB transaction ([`Client::plan_next`]).
struct YcsbTxn {
    type_index: usize,
    read_only: bool,
    ops: Vec<Op>,
    values: Vec<Vec<u8>>,
    field_size: usize,
}

impl PlannedTxn for YcsbTxn {
    fn keys(&self) -> Vec<(TableId, Vec<u8>)> {
        self.ops.iter().map(|op| (table::USERTABLE, key(op.key()).to_vec())).collect()
    }

    fn run(self: Box<Self>, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (outcome, attempts) =
            execute(worker, self.type_index, self.read_only, &self.ops, &self.values, self.field_size)?;
        Ok(TxnSummary { type_index: self.type_index, committed: matches!(outcome, Outcome::Committed(_)), attempts })
    }
}
