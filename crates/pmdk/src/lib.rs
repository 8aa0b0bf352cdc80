//! pmtx-pmdk: the SP^3 paper's micro workloads run as PMDK libpmemobj
//! transactions — the undo-logging baseline outside pmtx.
//!
//! Five workloads ([`MicroWorkload`]), each operation one libpmemobj
//! transaction that snapshots what it changes with
//! `pmemobj_tx_add_range_direct` (undo logging), allocates with
//! `pmemobj_tx_alloc`/`pmemobj_tx_zalloc` and frees with `pmemobj_tx_free`.
//! Isolation comes from DRAM locks, as in the paper's PMDK baseline:
//!
//! * `sps`: an array of `entries` entries of `entry_size` bytes; entry `i`
//!   starts as its id `i` (first 8 bytes) and a filler derived from it. A
//!   transaction draws two distinct indices (zipf over `[0, entries)`), locks
//!   both entries (one lock per entry, in index order), snapshots both and
//!   swaps their contents.
//! * `sp3-queue`: one FIFO of `entry_size`-byte items, a linked list in the
//!   pool (head, tail, count and the next sequence number in the root
//!   object), under one lock. A transaction enqueues (new node allocated in
//!   the transaction) with probability `insert_percent`, else dequeues (node
//!   freed in the transaction; an empty queue makes it a no-op). Loaded with
//!   `min(entries, 10_000)` items.
//! * `hash`: a chained hash table (bucket array in the pool, nodes allocated
//!   in the transaction), one lock per bucket.
//! * `rbtree`: a red-black tree (CLRS insertion and fix-up, insert-only:
//!   inserting an existing key overwrites its value), one tree-wide
//!   reader-writer lock (readers search, the writer inserts).
//! * `btree`: a B-tree of order 8 (at most 7 keys and 8 children per node,
//!   CLRS insertion with splits on the way down, values inline in the
//!   nodes, insert-only), one tree-wide reader-writer lock. (pmtx's own
//!   `btree` workload runs on its B+tree index; the operations and key
//!   streams are the same, the node layout is not.)
//!
//! For `hash`, `rbtree` and `btree` the key space is `[0, 2 * entries)`; the
//! load inserts keys `0..entries` (in a seeded shuffled order, so the trees
//! get their usual shape); a transaction, with probability `insert_percent`,
//! inserts or overwrites a key drawn by zipf over the key space, else
//! searches for one (and reads its value). Searches and empty dequeues are
//! transactions too (begin, reads, commit): one operation per transaction.
//! Keys and indices are drawn with `pmtx_workloads::zipf::Zipfian::
//! next_scrambled` from `pmtx_workloads::gen::rng(child_seed(seed, thread))`,
//! the same streams as pmtx's own micro workloads.
//!
//! Values are `entry_size` bytes: a key (or id, or sequence number), a
//! version, and a filler that is a function of both, so [`check`] can tell a
//! torn or misplaced value. After the workers stop, [`run`] closes the pool,
//! reopens it with `pmemobj_open` and checks the structure's invariants
//! (permutation of ids; FIFO sequence; hash placement; red-black and B-tree
//! order, balance and colour rules; item counts), returning
//! [`PmdkError::Inconsistent`] if one fails.
//!
//! # Flushes: real PM, `PMEM_IS_PMEM_FORCE`, and no emulated latency
//!
//! libpmem decides once per process, on the first `pmem_is_pmem` call (at the
//! first pool creation or open), whether a mapping is persistent memory: on
//! real PM (DAX) it persists with cache-line flushes (`clwb`/`clflushopt`) and
//! fences; on an ordinary file or tmpfs it falls back to `msync`, which
//! measures the page cache, not PM. To measure the PM code path on a file in
//! `/dev/shm` or on a disk, set `PMEM_IS_PMEM_FORCE=1` in the environment
//! *when the process starts* (the variable is read once, and setting
//! environment variables in a running multi-threaded process is unsound), for
//! example `PMEM_IS_PMEM_FORCE=1 pmtx bench ...`. [`run`] does not set it;
//! [`pmem_forced`] reports whether it is set, for the report.
//!
//! pmtx's emulated PM latency (`PmBackend::emulated`) is **not** applied to
//! these runs: libpmemobj issues its own flushes and fences, which pmtx
//! cannot see or delay. Compare PMDK with pmtx on the same medium (real PM,
//! or DRAM with PMEM_IS_PMEM_FORCE=1 against pmtx's `direct` backend).
//!
//! # Building
//!
//! The build script looks for libpmemobj (`pkg-config --exists libpmemobj`,
//! else `/usr/include/libpmemobj.h`). If it is missing the crate still
//! builds, with a cargo warning, and every entry point returns
//! [`PmdkError::Unavailable`]. `PMTX_PMDK_DISABLE=1` at build time forces
//! that case.
//!
//! ```no_run
//! use pmtx_pmdk::{run, MicroConfig, MicroWorkload, RunLength};
//! use std::time::Duration;
//! let config = MicroConfig {
//!     workload: MicroWorkload::parse("hash").unwrap(),
//!     threads: 2,
//!     length: RunLength::Duration(Duration::from_secs(5)),
//!     ..MicroConfig::default()
//! };
//! let pool_size = config.suggested_pool_size();
//! let result = run("/dev/shm/pmdk-hash.pool".as_ref(), pool_size, &config, |_| {}).unwrap();
//! println!("{:.0} transactions/s", result.throughput());
//! ```

#![deny(missing_docs)]

#[cfg(pmemobj)]
mod ffi;
#[cfg(pmemobj)]
mod pool;
#[cfg(pmemobj)]
mod workloads;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The text of [`PmdkError::Unavailable`] (and of the build warning).
pub const UNAVAILABLE_MESSAGE: &str =
    "libpmemobj was not found when pmtx-pmdk was built (install the Debian package libpmemobj-dev and rebuild)";

/// The valid workload names, in [`MicroWorkload::ALL`] order.
pub const WORKLOAD_NAMES: [&str; 5] = ["sps", "sp3-queue", "hash", "rbtree", "btree"];

/// Items loaded into the `sp3-queue` workload's queue at most.
pub const QUEUE_LOAD_MAX: u64 = 10_000;

/// An error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum PmdkError {
    /// The crate was built without libpmemobj.
    #[error("{}", UNAVAILABLE_MESSAGE)]
    Unavailable,
    /// [`MicroWorkload::parse`] got a name it does not know.
    #[error("unknown PMDK micro workload `{0}` (valid: sps, sp3-queue, hash, rbtree, btree)")]
    UnknownWorkload(String),
    /// A configuration value out of range.
    #[error("invalid PMDK micro workload configuration: {0}")]
    InvalidConfig(String),
    /// [`run`] creates a fresh pool and refuses to replace an existing file.
    #[error("{} already exists; the PMDK run creates a fresh pool there and does not replace files", path.display())]
    PoolExists {
        /// The pool path given to [`run`].
        path: PathBuf,
    },
    /// `pmemobj_create` failed.
    #[error("cannot create the PMDK pool {} ({size} bytes): {message}", path.display())]
    PoolCreate {
        /// The pool path.
        path: PathBuf,
        /// The requested pool size.
        size: u64,
        /// `pmemobj_errormsg()`.
        message: String,
    },
    /// `pmemobj_open` (or the root object) failed.
    #[error("cannot open the PMDK pool {}: {message}", path.display())]
    PoolOpen {
        /// The pool path.
        path: PathBuf,
        /// `pmemobj_errormsg()` or what was wrong.
        message: String,
    },
    /// A transactional allocation or snapshot ran out of pool space; the
    /// transaction was aborted and rolled back.
    #[error("the PMDK pool is out of space ({op}: {message}); use a larger pool")]
    OutOfSpace {
        /// The libpmemobj function that failed.
        op: &'static str,
        /// `pmemobj_errormsg()`.
        message: String,
    },
    /// Another libpmemobj transaction failure; the transaction was aborted
    /// and rolled back.
    #[error("PMDK transaction failed in {op} (errno {errno}): {message}")]
    Transaction {
        /// The libpmemobj function that failed.
        op: &'static str,
        /// Its error number.
        errno: i32,
        /// `pmemobj_errormsg()`.
        message: String,
    },
    /// The structure's invariants do not hold.
    #[error("PMDK {workload} structure is inconsistent: {message}")]
    Inconsistent {
        /// The workload's name.
        workload: &'static str,
        /// The first violation found.
        message: String,
    },
    /// A file operation on the pool path failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The pool path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One of the SP^3 micro workloads (see the crate documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MicroWorkload {
    /// `sps`: swaps of two array entries.
    Sps,
    /// `sp3-queue`: enqueue/dequeue on one shared FIFO.
    Queue,
    /// `hash`: insert-or-overwrite/search in a chained hash table.
    Hash,
    /// `rbtree`: insert-or-overwrite/search in a red-black tree.
    RbTree,
    /// `btree`: insert-or-overwrite/search in a B-tree of order 8.
    BTree,
}

impl MicroWorkload {
    /// All workloads, in [`WORKLOAD_NAMES`] order.
    pub const ALL: [MicroWorkload; 5] =
        [MicroWorkload::Sps, MicroWorkload::Queue, MicroWorkload::Hash, MicroWorkload::RbTree, MicroWorkload::BTree];

    /// Parses "sps", "sp3-queue", "hash", "rbtree" or "btree" (exactly).
    pub fn parse(name: &str) -> Result<Self, PmdkError> {
        Self::ALL
            .into_iter()
            .find(|workload| workload.name() == name)
            .ok_or_else(|| PmdkError::UnknownWorkload(name.to_string()))
    }

    /// The workload's name, as [`MicroWorkload::parse`] accepts it.
    pub fn name(self) -> &'static str {
        WORKLOAD_NAMES[self as usize]
    }

    /// The names of its transaction types, in the order of
    /// [`MicroResult::committed`].
    pub fn type_names(self) -> &'static [&'static str] {
        match self {
            MicroWorkload::Sps => &["swap"],
            MicroWorkload::Queue => &["enqueue", "dequeue"],
            MicroWorkload::Hash | MicroWorkload::RbTree | MicroWorkload::BTree => &["insert", "search"],
        }
    }

    /// The names of the outcome counters, in the order of
    /// [`MicroResult::outcomes`]: for `sp3-queue` the dequeues that found the
    /// queue empty; for the maps the inserts of a new key, the inserts that
    /// overwrote a value, and the searches that found / missed their key.
    pub fn outcome_names(self) -> &'static [&'static str] {
        match self {
            MicroWorkload::Sps => &[],
            MicroWorkload::Queue => &["dequeue-empty"],
            MicroWorkload::Hash | MicroWorkload::RbTree | MicroWorkload::BTree => {
                &["insert-new", "insert-overwrite", "search-hit", "search-miss"]
            }
        }
    }

    /// The libpmemobj layout name of this workload's pools.
    pub fn layout(self) -> String {
        format!("pmtx-micro-{}", self.name())
    }
}

impl fmt::Display for MicroWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MicroWorkload {
    type Err = PmdkError;

    fn from_str(name: &str) -> Result<Self, PmdkError> {
        Self::parse(name)
    }
}

/// How long the workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunLength {
    /// Measure for this long (after [`MicroConfig::warmup`]).
    Duration(Duration),
    /// Each thread runs exactly this many transactions (no warm-up; for
    /// tests and reproducible counts).
    OpsPerThread(u64),
}

/// The parameters of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroConfig {
    /// The workload.
    pub workload: MicroWorkload,
    /// Entries loaded (`sps`: array size; maps: keys `0..entries`, key space
    /// `2 * entries`; `sp3-queue`: `min(entries, 10_000)` items). Default
    /// 100 000.
    pub entries: u64,
    /// Bytes of each value (>= 16; default 128).
    pub entry_size: usize,
    /// Percentage of inserts (maps) or enqueues (queue), 0..=100; default 50.
    pub insert_percent: u32,
    /// Zipf constant of the key choice (0 = uniform, >= 0, != 1); default 0.99.
    pub theta: f64,
    /// Worker threads (>= 1); default 1.
    pub threads: usize,
    /// How long the workers run; default 5 s.
    pub length: RunLength,
    /// Time run before measuring, with [`RunLength::Duration`]; default 0.
    pub warmup: Duration,
    /// Seed of the load order and of the workers' key streams; default 42.
    pub seed: u64,
    /// Keep the pool file after the run (default: removed).
    pub keep_pool: bool,
}

impl Default for MicroConfig {
    fn default() -> Self {
        Self {
            workload: MicroWorkload::Sps,
            entries: 100_000,
            entry_size: 128,
            insert_percent: 50,
            theta: 0.99,
            threads: 1,
            length: RunLength::Duration(Duration::from_secs(5)),
            warmup: Duration::ZERO,
            seed: 42,
            keep_pool: false,
        }
    }
}

/// Smallest pool libpmemobj creates (`PMEMOBJ_MIN_POOL`, 8 MiB).
pub const MIN_POOL_SIZE: u64 = 8 << 20;

impl MicroConfig {
    /// Checks the values' ranges.
    pub fn validate(&self) -> Result<(), PmdkError> {
        let invalid = |message: String| Err(PmdkError::InvalidConfig(message));
        let min_entries = if self.workload == MicroWorkload::Sps { 2 } else { 1 };
        if self.entries < min_entries {
            return invalid(format!("{} needs at least {min_entries} entries", self.workload));
        }
        if self.entries > 1 << 40 {
            return invalid(format!("{} entries is too many", self.entries));
        }
        if self.entry_size < 16 || self.entry_size > 1 << 20 {
            return invalid(format!("entry size {} is not in 16..=1048576 bytes", self.entry_size));
        }
        if self.insert_percent > 100 {
            return invalid(format!("insert percentage {} is over 100", self.insert_percent));
        }
        if !(self.theta >= 0.0 && self.theta.is_finite() && self.theta != 1.0) {
            return invalid(format!("zipf theta {} must be >= 0, finite and != 1", self.theta));
        }
        if self.threads == 0 || self.threads > 1024 {
            return invalid(format!("{} threads is not in 1..=1024", self.threads));
        }
        match self.length {
            RunLength::Duration(duration) if duration.is_zero() => invalid("the run duration is zero".into()),
            _ => Ok(()),
        }
    }

    /// Items in the structure after the load: `entries`, or for `sp3-queue`
    /// `min(entries, 10_000)`.
    pub fn loaded_items(&self) -> u64 {
        match self.workload {
            MicroWorkload::Queue => self.entries.min(QUEUE_LOAD_MAX),
            _ => self.entries,
        }
    }

    /// A pool size that holds the loaded structure and everything the run
    /// can add, with room for libpmemobj's own metadata (lanes, heap
    /// headers, allocation-class rounding): the maps can grow to the whole
    /// key space (`2 * entries` keys). The queue grows without bound when
    /// `insert_percent > 50`; it gets room for 4 million more items then
    /// (1 million otherwise) — a run that needs more fails cleanly with
    /// [`PmdkError::OutOfSpace`]. Rounded up to a MiB, at least 64 MiB.
    pub fn suggested_pool_size(&self) -> u64 {
        let value = (self.entry_size as u64).div_ceil(8) * 8;
        // Per-allocation header and rounding of libpmemobj's allocation
        // classes: count 64 bytes plus 25 %.
        let object = |bytes: u64| (bytes + 64) * 5 / 4;
        let data = match self.workload {
            MicroWorkload::Sps => self.entries * value,
            MicroWorkload::Queue => {
                let more = if self.insert_percent > 50 { 4_000_000 } else { 1_000_000 };
                (self.loaded_items() + more) * object(8 + value)
            }
            MicroWorkload::Hash => self.entries.next_power_of_two() * 8 + 2 * self.entries * object(16 + value),
            MicroWorkload::RbTree => 2 * self.entries * object(40 + value),
            // Nodes are at least half full (3 of 7 keys) after a split.
            MicroWorkload::BTree => (2 * self.entries).div_ceil(3) * object(136 + 7 * value),
        };
        let size = (data + 32 * (1 << 20)).max(64 << 20);
        size.div_ceil(1 << 20) << 20
    }
}

/// What [`run`] reports while it works.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Progress {
    /// The pool is created and loaded.
    Loaded {
        /// Items in the structure.
        items: u64,
        /// Time the creation and load took.
        elapsed: Duration,
    },
    /// About once a second while the workers run (including the warm-up).
    Running {
        /// Time since the workers started.
        elapsed: Duration,
        /// Transactions committed so far by all threads (including warm-up).
        committed: u64,
        /// Whether the warm-up is still going on.
        warmup: bool,
    },
    /// The reopened pool passed the check.
    Checked {
        /// Items in the structure.
        items: u64,
    },
}

/// The outcome of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The workload whose pool was checked.
    pub workload: MicroWorkload,
    /// Items found (entries, queue items, keys).
    pub items: u64,
    /// Entries or keys loaded (`entries` of the run that created the pool).
    pub entries: u64,
    /// The value size of the pool.
    pub entry_size: usize,
    /// A one-line summary of what was verified.
    pub summary: String,
}

/// The outcome of [`run`].
#[derive(Clone, Debug, PartialEq)]
pub struct MicroResult {
    /// The workload.
    pub workload: MicroWorkload,
    /// Committed transactions per type ([`MicroWorkload::type_names`]) in the
    /// measured interval.
    pub committed: Vec<u64>,
    /// Outcome counters ([`MicroWorkload::outcome_names`]) in the measured
    /// interval.
    pub outcomes: Vec<u64>,
    /// All committed transactions in the measured interval.
    pub total: u64,
    /// Length of the measured interval.
    pub elapsed: Duration,
    /// Committed transactions per thread in the measured interval.
    pub per_thread: Vec<u64>,
    /// Time the pool creation and load took.
    pub load_elapsed: Duration,
    /// The check of the reopened pool after the run.
    pub check: CheckReport,
    /// Whether `PMEM_IS_PMEM_FORCE=1` was set (see the crate documentation).
    pub pmem_forced: bool,
}

impl MicroResult {
    /// Committed transactions per second in the measured interval.
    pub fn throughput(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.total as f64 / seconds
        } else {
            0.0
        }
    }

    /// `(type name, committed)` pairs.
    pub fn committed_by_type(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.workload.type_names().iter().copied().zip(self.committed.iter().copied())
    }

    /// `(outcome name, count)` pairs.
    pub fn outcomes_by_name(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.workload.outcome_names().iter().copied().zip(self.outcomes.iter().copied())
    }
}

/// `Ok` if the crate was built with libpmemobj, else
/// [`PmdkError::Unavailable`].
pub fn available() -> Result<(), PmdkError> {
    if cfg!(pmemobj) {
        Ok(())
    } else {
        Err(PmdkError::Unavailable)
    }
}

/// Whether `PMEM_IS_PMEM_FORCE=1` is set in this process's environment, which
/// makes libpmem treat every mapping as persistent memory (cache-line flushes
/// instead of `msync`). Only reads the environment.
pub fn pmem_forced() -> bool {
    std::env::var_os("PMEM_IS_PMEM_FORCE").is_some_and(|value| value.to_str().map(str::trim) == Some("1"))
}

/// Runs `config` on a fresh pool of `pool_size` bytes created at `path`.
///
/// Creates the pool (`path` must not exist: [`PmdkError::PoolExists`]
/// otherwise — `run` never replaces a file), loads the structure, runs
/// `config.threads` worker threads for `config.length` (after
/// `config.warmup`), stops them, closes the pool, reopens it and checks the
/// structure ([`check`]; the item count must also match what the run
/// committed). The pool file is removed at the end, also after an error,
/// unless `config.keep_pool`. `progress` is called on the calling thread.
///
/// Errors: [`PmdkError::Unavailable`] without libpmemobj; an invalid
/// configuration; pool creation (with `pmemobj_errormsg`'s text); a worker's
/// transaction failure, e.g. [`PmdkError::OutOfSpace`] (the transaction was
/// rolled back; the other workers are stopped); [`PmdkError::Inconsistent`].
/// A panicking worker thread propagates its panic.
pub fn run(
    path: &Path,
    pool_size: u64,
    config: &MicroConfig,
    progress: impl FnMut(Progress),
) -> Result<MicroResult, PmdkError> {
    #[cfg(pmemobj)]
    {
        config.validate()?;
        if pool_size < MIN_POOL_SIZE {
            return Err(PmdkError::InvalidConfig(format!(
                "pool size {pool_size} is below libpmemobj's minimum of {MIN_POOL_SIZE} bytes"
            )));
        }
        workloads::run(path, pool_size, config, progress)
    }
    #[cfg(not(pmemobj))]
    {
        let _ = (path, pool_size, config, progress);
        Err(PmdkError::Unavailable)
    }
}

/// Opens the pool at `path`, created by [`run`] for `workload` (with
/// `keep_pool`), checks the structure's invariants and closes it.
pub fn check(path: &Path, workload: MicroWorkload) -> Result<CheckReport, PmdkError> {
    #[cfg(pmemobj)]
    {
        workloads::check_path(path, workload, None)
    }
    #[cfg(not(pmemobj))]
    {
        let _ = (path, workload);
        Err(PmdkError::Unavailable)
    }
}
