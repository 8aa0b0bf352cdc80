//! pmtx-workloads: TPC-C, Smallbank, YCSB, a FIFO queue and the micro
//! workloads of SP³ ([`micro`]: `sps`, `sp3-queue`, `hash`, `rbtree`,
//! `btree`) over the public pmtx-engine transaction API.
//!
//! A [`Workload`] describes its tables ([`Workload::tables`], to be passed
//! unchanged and in that order as `DbOptions::tables`), populates a database
//! ([`Workload::load`]), hands out per-thread [`Client`]s that run the
//! transaction mix, and checks the consistency of a database
//! ([`Workload::check`]).
//!
//! Workloads use only the public API of `pmtx-engine`; a user could write
//! them the same way. Table ids are the positions of the tables in
//! [`Workload::tables`] (that is how the engine numbers them), which is why
//! the database must be opened with exactly that list; `load` and `check`
//! verify it.
//!
//! ```no_run
//! use pmtx_engine::{Database, DbOptions, EngineKind};
//! use pmtx_workloads::{by_name, WorkloadOptions};
//! use std::sync::Arc;
//! let workload = by_name("smallbank", &WorkloadOptions { accounts: 10_000, ..Default::default() }).unwrap();
//! let db = Arc::new(Database::open(DbOptions::in_memory(EngineKind::Silo, workload.tables())).unwrap());
//! workload.load(&db, 2, &|_, _| {}).unwrap();
//! let mut client = workload.client(0, 1, 42);
//! let mut worker = db.worker(0).unwrap();
//! for _ in 0..1000 {
//!     client.run_next(&mut worker).unwrap();
//! }
//! pmtx_workloads::wait_all_acknowledged(&mut worker);
//! drop(worker);
//! assert!(workload.check(&db).unwrap().passed());
//! ```

#![deny(missing_docs)]

mod common;
pub mod gen;
pub mod micro;
pub mod queue;
pub mod smallbank;
pub mod tpcc;
pub mod ycsb;
pub mod zipf;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

pub use common::{count_rows, wait_all_acknowledged};

/// A benchmark workload.
///
/// `load` and `check` take workers of slots `0..threads` (respectively slot
/// 0) from the database: call them while no other [`pmtx_engine::Worker`] of
/// those slots exists.
pub trait Workload: Send + Sync {
    /// One of [`WORKLOAD_NAMES`].
    fn name(&self) -> &'static str;
    /// The tables, to be passed to `DbOptions` unchanged and in this order.
    fn tables(&self) -> Vec<pmtx_engine::TableSchema>;
    /// Transaction type names; the index is the type index of
    /// [`TxnSummary::type_index`] and of the tag given to `run_pipelined`.
    fn transaction_types(&self) -> &'static [&'static str];
    /// Populates the database; `progress(done, total)` is called now and
    /// then (in rows).
    fn load(
        &self,
        db: &Arc<pmtx_engine::Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError>;
    /// A per-thread client; `worker_index < threads`; all randomness comes
    /// from `seed` (a child seed is derived per worker).
    fn client(&self, worker_index: usize, threads: usize, seed: u64) -> Box<dyn Client>;
    /// Whether the options allow a run with `threads` workers (each run of
    /// a benchmark may have another count, so `by_name` cannot check it):
    /// call before handing out clients. Only YCSB's `long_threads` depends
    /// on it.
    fn validate_threads(&self, threads: usize) -> Result<(), WorkloadError> {
        let _ = threads;
        Ok(())
    }
    /// Consistency check of the current database (after load, after a run,
    /// after recovery). Reads in many small read-only transactions, so the
    /// database must be quiescent.
    fn check(&self, db: &Arc<pmtx_engine::Database>) -> Result<CheckReport, WorkloadError>;
    /// Rows the database holds now by the workload's own count (load plus
    /// the inserts minus the deletes its clients committed), or `None` when
    /// the workload does not count them. Next to
    /// `EngineStats::rows_indexed` it tells live rows from absent ones
    /// still indexed.
    fn expected_rows(&self) -> Option<u64> {
        None
    }
    /// Bytes of tuple data the load writes (keys plus values over every
    /// loaded row): the database size of the Zen paper's ratio P of NVM to
    /// DRAM (`pmtx bench --nvm-dram-ratio`), or `None` when the workload
    /// does not state it.
    fn loaded_bytes(&self) -> Option<u64> {
        None
    }
    /// Whether its clients plan transactions ahead ([`Client::plan_next`]),
    /// so a driver can route each by its keys (`pmtx bench
    /// --route-by-partition`).
    fn routable(&self) -> bool {
        false
    }
}

/// A per-thread source of transactions.
pub trait Client: Send {
    /// Runs one transaction of the mix on `worker` using
    /// `worker.run_pipelined(type_index as u32, read_only, body)` (so
    /// durability acknowledgements are collected by the driver via
    /// `drain_acknowledged`).
    fn run_next(&mut self, worker: &mut pmtx_engine::Worker) -> Result<TxnSummary, pmtx_engine::DbError>;

    /// Draws the next transaction of the mix without running it, so that
    /// a driver can route it by its keys ([`PlannedTxn::keys`], e.g. to
    /// `Database::assign_transaction`) and run it on another worker.
    /// `worker` is the caller's (a plan may need a read, as YCSB's first
    /// insert point). `None`: this client cannot plan ahead ([`Workload::routable`]
    /// is false); use [`Client::run_next`].
    fn plan_next(
        &mut self,
        worker: &mut pmtx_engine::Worker,
    ) -> Option<Result<Box<dyn PlannedTxn>, pmtx_engine::DbError>> {
        let _ = worker;
        None
    }
}

/// A transaction drawn by [`Client::plan_next`]: its keys are known before
/// it runs, and it runs on any worker of the database.
pub trait PlannedTxn: Send {
    /// The keys it accesses as (table, key); a scan gives its first key.
    fn keys(&self) -> Vec<(pmtx_engine::TableId, Vec<u8>)>;
    /// Runs it on `worker` with `worker.run_pipelined`, as
    /// [`Client::run_next`] would have.
    fn run(self: Box<Self>, worker: &mut pmtx_engine::Worker) -> Result<TxnSummary, pmtx_engine::DbError>;
}

/// What one [`Client::run_next`] did.
#[derive(Clone, Copy, Debug)]
pub struct TxnSummary {
    /// Index into [`Workload::transaction_types`].
    pub type_index: usize,
    /// False for a user rollback (e.g. TPC-C NewOrder's 1%).
    pub committed: bool,
    /// Attempts made (1 = no abort).
    pub attempts: u32,
}

/// The result of [`Workload::check`]: one entry per condition.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// (name, passed, detail).
    pub checks: Vec<(String, bool, String)>,
}

impl CheckReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|(_, passed, _)| *passed)
    }

    /// Adds a check result.
    pub fn push(&mut self, name: impl Into<String>, passed: bool, detail: impl Into<String>) {
        self.checks.push((name.into(), passed, detail.into()));
    }

    /// The failed checks.
    pub fn failures(&self) -> impl Iterator<Item = &(String, bool, String)> {
        self.checks.iter().filter(|(_, passed, _)| !passed)
    }

    /// `Ok(self)` if every check passed, else [`WorkloadError::Inconsistent`]
    /// naming the failures.
    pub fn into_result(self) -> Result<Self, WorkloadError> {
        if self.passed() {
            return Ok(self);
        }
        let failed: Vec<String> = self.failures().map(|(name, _, detail)| format!("{name}: {detail}")).collect();
        Err(WorkloadError::Inconsistent(failed.join("; ")))
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, passed, detail) in &self.checks {
            writeln!(f, "[{}] {name}: {detail}", if *passed { "ok" } else { "FAILED" })?;
        }
        Ok(())
    }
}

/// Errors of workloads.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] pmtx_engine::DbError),
    /// A bad option (or a database opened with other tables).
    #[error("invalid workload option: {0}")]
    InvalidOption(String),
    /// The data is not what the workload expects.
    #[error("consistency check failed: {0}")]
    Inconsistent(String),
}

/// Workload names accepted by [`by_name`].
pub const WORKLOAD_NAMES: [&str; 9] =
    ["tpcc", "smallbank", "ycsb", "queue", "sps", "sp3-queue", "hash", "rbtree", "btree"];

/// The workload `name` (one of [`WORKLOAD_NAMES`], case-insensitive; the
/// last five are the SP³ micro workloads of [`micro`]) with `options`
/// (validated).
pub fn by_name(name: &str, options: &WorkloadOptions) -> Result<Box<dyn Workload>, WorkloadError> {
    let lowercase = name.to_ascii_lowercase();
    let canonical = if lowercase == "tpc-c" { "tpcc" } else { lowercase.as_str() };
    // The other workloads would ignore it silently: a run that looks like
    // PHyTM's mixed workload but is not.
    if options.long_threads > 0 && canonical != "ycsb" && WORKLOAD_NAMES.contains(&canonical) {
        return Err(WorkloadError::InvalidOption(format!(
            "long_threads ({}) applies to ycsb only, not {canonical}",
            options.long_threads
        )));
    }
    match canonical {
        "tpcc" => Ok(Box::new(tpcc::Tpcc::new(options)?)),
        "smallbank" => Ok(Box::new(smallbank::Smallbank::new(options)?)),
        "ycsb" => Ok(Box::new(ycsb::Ycsb::new(options)?)),
        "queue" => Ok(Box::new(queue::Queue::new(options)?)),
        "sps" => Ok(Box::new(micro::sps::Sps::new(options)?)),
        "sp3-queue" => Ok(Box::new(micro::queue::Sp3Queue::new(options)?)),
        "hash" => Ok(Box::new(micro::hash::new(options)?)),
        "rbtree" => Ok(Box::new(micro::rbtree::RbTree::new(options)?)),
        "btree" => Ok(Box::new(micro::btree::new(options)?)),
        _ => Err(WorkloadError::InvalidOption(format!(
            "unknown workload {name:?}; valid workloads: {}",
            WORKLOAD_NAMES.join(", ")
        ))),
    }
}

/// Options of every workload (each reads the fields it needs).
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    /// TPC-C warehouses (default 1).
    pub warehouses: u32,
    /// Smallbank accounts (default 250 000).
    pub accounts: u64,
    /// Smallbank: number of hot accounts (`None`: uniform access).
    pub hotspot: Option<u64>,
    /// Smallbank: probability that an access goes to a hot account (0.9).
    pub hotspot_probability: f64,
    /// YCSB variant (default A).
    pub ycsb: YcsbVariant,
    /// YCSB and micro workloads: zipfian constant (0.99); 0 means uniform.
    pub theta: f64,
    /// YCSB range variants (`srq`, `lrq`, `sru`, `lru`): workers with an
    /// index below this run the long transaction of the pair (`lrq` or
    /// `lru`), the others the short one (`srq` or `sru`), as in PHyTM's
    /// mixed workload (its Fig. 5e); the transaction types are then
    /// [`ycsb::MIXED_TRANSACTION_TYPES`] ("short", "long"). 0 (the default)
    /// runs the variant on every worker. Must be below the thread count of
    /// a run ([`Workload::validate_threads`]).
    pub long_threads: usize,
    /// YCSB with `long_threads` and a point variant (A-F, ro, rh, ba,
    /// wh): what the long threads run (zen-plus.txt Fig. 24-26: long scans,
    /// or long updates); `None` with the srq/lrq/sru/lru pairs, whose long
    /// transaction is the pair's.
    pub long_kind: Option<ycsb::LongKind>,
    /// YCSB: rows a long transaction scans or updates (`None`: the pairs'
    /// [`ycsb::LONG_RANGE_ROWS`], [`ycsb::DEFAULT_LONG_ROWS`] with
    /// `long_kind`).
    pub long_rows: Option<usize>,
    /// YCSB: a long thread runs this many short transactions between two
    /// long ones (Fig. 24 and 25: short transactions, then a long one);
    /// 0 (the default): only long ones.
    pub long_every: usize,
    /// YCSB with `long_kind` update: long transactions update keys of the
    /// upper half of the table and short transactions use the lower half,
    /// so the two never conflict (Fig. 25).
    pub long_disjoint: bool,
    /// YCSB rows (default 100 000).
    pub records: u64,
    /// YCSB operations per transaction (16).
    pub ops_per_txn: usize,
    /// YCSB bytes per field, queue bytes per item (100).
    pub field_size: usize,
    /// YCSB fields per row (10).
    pub fields: usize,
    /// TPC-C items (and stock rows per warehouse); the standard is 100 000.
    /// **Non-standard** when changed: for fast tests only.
    pub items: u32,
    /// TPC-C customers (and initial orders) per district; the standard is
    /// 3000. **Non-standard** when changed: for fast tests only.
    pub customers_per_district: u32,
    /// TPC-C transaction mix: weights in the order of
    /// [`tpcc::TRANSACTION_TYPES`] (0 = never run); the standard mix
    /// [`tpcc::MIX`] by default. **Non-standard** when changed (see
    /// [`tpcc::TpccMix`]).
    pub tpcc_mix: [u32; 5],
    /// Queue: items per partition after load (1000).
    pub queue_length: u64,
    /// Queue: rows a peek scans from the head (10).
    pub queue_scan: usize,
    /// Queue: weights of enqueue, dequeue and peek, in the order of
    /// [`queue::TRANSACTION_TYPES`] ([`queue::MIX`], 45/45/10, by default).
    pub queue_mix: [u32; 3],
    /// Micro workloads ([`micro`]): entries loaded (100 000; the
    /// `sp3-queue` loads at most [`micro::queue::LOAD_LIMIT`]).
    pub micro_entries: u64,
    /// Micro workloads: bytes of each entry's value (128, at least
    /// [`micro::MIN_ENTRY_SIZE`]).
    pub entry_size: usize,
    /// Micro workloads: percentage of inserts (enqueues), 0..=100 (50).
    pub insert_percent: u32,
    /// Seed of the loaded data and of the TPC-C run-time constants
    /// (the same seed gives the same database).
    pub load_seed: u64,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        Self {
            warehouses: 1,
            accounts: 250_000,
            hotspot: None,
            hotspot_probability: 0.9,
            ycsb: YcsbVariant::A,
            theta: 0.99,
            long_threads: 0,
            long_kind: None,
            long_rows: None,
            long_every: 0,
            long_disjoint: false,
            records: 100_000,
            ops_per_txn: 16,
            field_size: 100,
            fields: 10,
            items: tpcc::STANDARD_ITEMS,
            customers_per_district: tpcc::STANDARD_CUSTOMERS_PER_DISTRICT,
            tpcc_mix: tpcc::MIX,
            queue_length: 1000,
            queue_scan: 10,
            queue_mix: queue::MIX,
            micro_entries: micro::DEFAULT_ENTRIES,
            entry_size: micro::DEFAULT_ENTRY_SIZE,
            insert_percent: micro::DEFAULT_INSERT_PERCENT,
            load_seed: 0x7C5C_5EED,
        }
    }
}

impl WorkloadOptions {
    /// A reduced TPC-C scale for tests (**non-standard**): `items` items and
    /// stock rows per warehouse, `customers_per_district` customers and
    /// initial orders per district (the last 30% of them undelivered).
    pub fn tpcc_scale_for_tests(mut self, items: u32, customers_per_district: u32) -> Self {
        self.items = items;
        self.customers_per_district = customers_per_district;
        self
    }
}

/// The YCSB variants: the core workloads A-F, Zen's read/update mixes and
/// PHyTM's range workloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum YcsbVariant {
    /// 50% reads, 50% updates.
    #[default]
    A,
    /// 95% reads, 5% updates.
    B,
    /// 100% reads.
    C,
    /// 95% reads of recent rows, 5% inserts.
    D,
    /// 95% short scans (1..=100 rows), 5% inserts.
    E,
    /// 50% reads, 50% read-modify-writes.
    F,
    /// "ro": 100% reads.
    ReadOnly,
    /// "rh": 90% reads, 10% updates.
    ReadHeavy,
    /// "ba": 50% reads, 50% updates.
    Balanced,
    /// "wh": 10% reads, 90% updates.
    WriteHeavy,
    /// "srq": one range query of 16 rows per transaction.
    ShortRangeQuery,
    /// "lrq": one range query of 256 rows per transaction.
    LongRangeQuery,
    /// "sru": updates of 16 random rows per transaction.
    ShortRangeUpdate,
    /// "lru": updates of 256 random rows per transaction.
    LongRangeUpdate,
}

impl YcsbVariant {
    /// Every variant.
    pub const ALL: [YcsbVariant; 14] = [
        YcsbVariant::A,
        YcsbVariant::B,
        YcsbVariant::C,
        YcsbVariant::D,
        YcsbVariant::E,
        YcsbVariant::F,
        YcsbVariant::ReadOnly,
        YcsbVariant::ReadHeavy,
        YcsbVariant::Balanced,
        YcsbVariant::WriteHeavy,
        YcsbVariant::ShortRangeQuery,
        YcsbVariant::LongRangeQuery,
        YcsbVariant::ShortRangeUpdate,
        YcsbVariant::LongRangeUpdate,
    ];

    /// The short name ("A".."F", "ro", "rh", "ba", "wh", "srq", "lrq",
    /// "sru", "lru").
    pub fn name(self) -> &'static str {
        match self {
            YcsbVariant::A => "A",
            YcsbVariant::B => "B",
            YcsbVariant::C => "C",
            YcsbVariant::D => "D",
            YcsbVariant::E => "E",
            YcsbVariant::F => "F",
            YcsbVariant::ReadOnly => "ro",
            YcsbVariant::ReadHeavy => "rh",
            YcsbVariant::Balanced => "ba",
            YcsbVariant::WriteHeavy => "wh",
            YcsbVariant::ShortRangeQuery => "srq",
            YcsbVariant::LongRangeQuery => "lrq",
            YcsbVariant::ShortRangeUpdate => "sru",
            YcsbVariant::LongRangeUpdate => "lru",
        }
    }

    /// For PHyTM's range variants, the (short, long) pair the variant
    /// belongs to (`srq`/`lrq` or `sru`/`lru`); `None` for the others.
    pub fn short_long_pair(self) -> Option<(YcsbVariant, YcsbVariant)> {
        match self {
            YcsbVariant::ShortRangeQuery | YcsbVariant::LongRangeQuery => {
                Some((YcsbVariant::ShortRangeQuery, YcsbVariant::LongRangeQuery))
            }
            YcsbVariant::ShortRangeUpdate | YcsbVariant::LongRangeUpdate => {
                Some((YcsbVariant::ShortRangeUpdate, YcsbVariant::LongRangeUpdate))
            }
            _ => None,
        }
    }

    /// Parses a short name, case-insensitively.
    pub fn parse(name: &str) -> Result<Self, WorkloadError> {
        Self::ALL.into_iter().find(|variant| variant.name().eq_ignore_ascii_case(name)).ok_or_else(|| {
            let valid: Vec<&str> = Self::ALL.iter().map(|variant| variant.name()).collect();
            WorkloadError::InvalidOption(format!("unknown YCSB variant {name:?}; valid variants: {}", valid.join(", ")))
        })
    }
}

impl FromStr for YcsbVariant {
    type Err = WorkloadError;
    fn from_str(name: &str) -> Result<Self, WorkloadError> {
        Self::parse(name)
    }
}

impl fmt::Display for YcsbVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
