//! Typed options of a database: [`DbOptions`] and its presets, where the
//! pool lives, and each engine family's own options. They sit below the API
//! and the engines, so every layer reads them and none of them imports the
//! API.

pub mod spec;

use crate::cc::CcProtocol;
use crate::engine::EngineKind;
use crate::engine_catalog::CcRule;
use crate::error::{DbError, DbResult};
use crate::schema::TableSchema;
use pmtx_pm::{BackendKind, PmOptions};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// Where the pool of a durable engine lives.
#[derive(Clone, Debug)]
pub enum PoolLocation {
    /// Anonymous memory of this size (tests, simulation).
    InMemory {
        /// Bytes.
        size: u64,
    },
    /// A file; created with `size` bytes if missing and
    /// [`DbOptions::create_if_missing`] is set.
    File {
        /// The pool file.
        path: PathBuf,
        /// Size used when creating it.
        size: u64,
    },
}

/// Where a redo log kept in files (`dbx-disk`, `dbx-naive` with
/// `medium=disk`) lives ([`DbOptions::log_directory`]).
#[derive(Clone, Debug, Default)]
pub enum LogDirectory {
    /// The directory `<pool file>.log` beside the pool file, created at the
    /// first open (the default). A pool in anonymous memory has no such
    /// place: opening a file-log engine on one with this setting is an
    /// [`DbError::InvalidConfig`] (the in-memory preset logs to
    /// [`LogDirectory::Memory`] instead).
    #[default]
    BesidePool,
    /// This directory, created at the first open if missing (its parent
    /// must exist).
    Path(PathBuf),
    /// Files in memory that model what a power failure keeps
    /// ([`crate::log_files::MemoryLogStorage`]): tests, and the
    /// [`DbOptions::in_memory`] preset. Clones share the files, so a test
    /// can crash them and reopen the database on what is left.
    Memory(crate::log_files::MemoryLogStorage),
}

/// The medium of the DBXN family's synchronous redo log
/// ([`DbxnOptions::medium`]; `medium=` of `--engine`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LogMedium {
    /// Segments in the pool, made durable with flushes and a fence.
    #[default]
    Pm,
    /// Segments in files ([`DbOptions::log_directory`]), made durable with
    /// `fdatasync` before each commit is acknowledged: the DBXN paper's
    /// "+synchronous log (Disk)" row of Fig. 11. `dbx-naive` only.
    Disk,
}

impl LogMedium {
    /// Every medium.
    pub const ALL: [LogMedium; 2] = [LogMedium::Pm, LogMedium::Disk];

    /// Stable name (`pm`, `disk`).
    pub fn name(self) -> &'static str {
        match self {
            LogMedium::Pm => "pm",
            LogMedium::Disk => "disk",
        }
    }

    /// Parses [`LogMedium::name`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|medium| medium.name() == name)
    }
}

impl std::fmt::Display for LogMedium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of [`crate::Database::open`]. Start from a preset and override fields.
#[derive(Clone, Debug)]
pub struct DbOptions {
    /// Which engine.
    pub engine: EngineKind,
    /// The concurrency-control protocol the engine runs (Silo's OCC by
    /// default; `cc=` in `--engine`).
    pub cc: crate::cc::CcProtocol,
    /// The tables. The pool stores them at creation (`crate::catalog`);
    /// a later open declares the same list, checked table by table, or
    /// takes it from the pool ([`DbOptions::from_pool`]). Tables may be
    /// appended when [`DbOptions::create_missing_tables`] is set.
    pub tables: Vec<TableSchema>,
    /// Whether an open may add declared tables that the pool does not
    /// store yet (appended after the stored ones; off by default, so a typo
    /// in a table name is an error rather than a new empty table).
    pub create_missing_tables: bool,
    /// Key functions registered by [`DbOptions::secondary_key`] for indexes
    /// the tables do not have (reported by the open).
    unknown_secondary_keys: Vec<(String, String)>,
    /// Most worker threads that will run at once.
    pub workers: usize,
    /// Pool location (ignored by non-durable engines).
    pub pool: PoolLocation,
    /// Whether [`crate::Database::open`] creates a pool file that does not
    /// exist ([`PoolLocation::File`]; false by default, as in RocksDB and
    /// redb). Without it, a path that names no file fails with
    /// [`DbError::PoolNotFound`] instead of silently starting an empty
    /// database. A pool in anonymous memory is always created.
    pub create_if_missing: bool,
    /// PM backend.
    pub backend: BackendKind,
    /// PM options (flush instruction, domain, msync, latency model, seed).
    pub pm: PmOptions,
    /// Pool chunk size when creating.
    pub chunk_size: u64,
    /// Free chunks a background thread keeps populated ahead of the
    /// allocator, so workers take no page faults on fresh pool pages
    /// (`pmtx_pm::Pool::start_prefault`; pool files only). 0 disables it.
    pub prefault_chunks: u64,
    /// Epoch length (group commit and TID epochs); 40 ms as in Silo/DBX.
    /// `wbl` ignores it: its epochs are its group-commit windows
    /// (`DbOptions::wbl`).
    pub epoch_interval: Duration,
    /// Periodic checkpoint interval; `None` disables periodic checkpoints.
    pub checkpoint_interval: Option<Duration>,
    /// Attempts before a transaction gives up with `TooManyAborts`.
    pub max_attempts: u32,
    /// How long [`crate::Database::run`] waits for a worker slot when every
    /// slot is held, before it fails with [`crate::DbError::NoFreeWorker`].
    pub worker_wait: Duration,
    /// Seed for backoff jitter and anything random inside the engine.
    pub seed: u64,
    /// HTM regions of the DBXN engines (`none`: the software path, no
    /// global lock; `sim`: abort injection at each commit region). The other
    /// engines always run the software path.
    pub htm: pmtx_htm::HtmConfig,
    /// NVM-friendly log writes of the DBXN engines.
    pub dbxn: crate::options::DbxnOptions,
    /// Options of the engines over Zen's tuple heap, `zen`,
    /// `zen-naive-alloc`, `zen+` and `wbl` (Met-Cache budget, LP table order, heap
    /// reclamation).
    pub zen: crate::options::ZenOptions,
    /// Options of `wbl` (its group-commit window).
    pub wbl: crate::options::WblOptions,
    /// Options of `mmdb` (the DRAM budget of its tables).
    pub mmdb: crate::options::MmdbOptions,
    /// Options of `foedus` (the DRAM budget of its volatile pages).
    pub foedus: crate::options::FoedusOptions,
    /// Options of `zen+` only: the thresholds of its adaptive execution
    /// and its NUMA-aware soft partitions.
    pub zen_plus: crate::options::ZenPlusOptions,
    /// Where a redo log kept in files lives (`dbx-disk`, `dbx-naive` with
    /// `medium=disk`; ignored by every other engine).
    pub log_directory: LogDirectory,
    /// A deliberately broken protocol step, for the crash harness's
    /// self-tests (feature `fault-injection` only; never in production).
    #[cfg(feature = "fault-injection")]
    pub fault: Option<crate::fault::Fault>,
    /// A failure of the engine's background work, for the tests that it
    /// reaches the caller (feature `fault-injection` only).
    #[cfg(feature = "fault-injection")]
    pub background_fault: Option<crate::fault::BackgroundFault>,
}

impl DbOptions {
    /// Defaults: 2 workers, an existing pool file at `path` (1 GiB when
    /// created: see [`DbOptions::create_if_missing`]), direct backend, 40 ms
    /// epochs, checkpoints every 10 s.
    pub fn new(engine: EngineKind, tables: Vec<TableSchema>, path: impl Into<PathBuf>) -> Self {
        Self {
            engine,
            cc: engine.default_cc(),
            tables,
            create_missing_tables: false,
            unknown_secondary_keys: Vec::new(),
            workers: 2,
            pool: PoolLocation::File { path: path.into(), size: 1 << 30 },
            create_if_missing: false,
            backend: BackendKind::Direct,
            pm: PmOptions::default(),
            chunk_size: pmtx_pm::layout::DEFAULT_CHUNK_SIZE,
            prefault_chunks: 8,
            epoch_interval: Duration::from_millis(40),
            checkpoint_interval: Some(Duration::from_secs(10)),
            max_attempts: 1000,
            worker_wait: Duration::from_secs(10),
            seed: 0x5EED,
            htm: pmtx_htm::HtmConfig::software(),
            dbxn: crate::options::DbxnOptions::default(),
            zen: crate::options::ZenOptions::default(),
            wbl: crate::options::WblOptions::default(),
            mmdb: crate::options::MmdbOptions::default(),
            foedus: crate::options::FoedusOptions::default(),
            zen_plus: crate::options::ZenPlusOptions::default(),
            log_directory: LogDirectory::BesidePool,
            #[cfg(feature = "fault-injection")]
            fault: None,
            #[cfg(feature = "fault-injection")]
            background_fault: None,
        }
    }

    /// A small in-memory preset for tests: 64 MiB pool in 256 KiB chunks,
    /// 4 workers, 2 ms epochs, no periodic checkpoints; a log kept in files
    /// goes to fresh [`LogDirectory::Memory`] files (shared by the clones of
    /// these options).
    pub fn in_memory(engine: EngineKind, tables: Vec<TableSchema>) -> Self {
        Self {
            workers: 4,
            pool: PoolLocation::InMemory { size: 64 << 20 },
            log_directory: LogDirectory::Memory(crate::log_files::MemoryLogStorage::default()),
            chunk_size: 256 << 10,
            epoch_interval: Duration::from_millis(2),
            checkpoint_interval: None,
            ..Self::new(engine, tables, "")
        }
    }

    /// Options to reopen the pool file at `path` from what it stores: its
    /// engine, protocol and tables (the defaults of [`DbOptions::new`]
    /// otherwise). A stored secondary index needs its key function
    /// registered by name ([`DbOptions::secondary_key`]) before the open.
    /// [`DbError::PoolNotFound`] if there is no file; [`DbError::Corrupt`]
    /// if the pool stores no catalog (a pool of an engine that keeps no
    /// pool, or written before catalogs were stored: declare its tables).
    pub fn from_pool(path: impl Into<PathBuf>) -> DbResult<Self> {
        let path = path.into();
        if !path.exists() {
            return Err(DbError::PoolNotFound { path });
        }
        // Read without opening: an unclean pool stays unclean for the open
        // that follows (which then recovers it).
        let (info, _, read) = pmtx_pm::Pool::<pmtx_pm::Direct>::inspect_with(&path, &PmOptions::default(), |pool| {
            let logs_to_files = pool.root(crate::durability::group_commit::LOG_MEDIUM_ROOT)
                == Some(crate::durability::group_commit::LOG_MEDIUM_FILES);
            crate::catalog::read(pool).map(|stored| (stored, logs_to_files))
        })?;
        let (stored, logs_to_files) = read?;
        let stored = stored.ok_or_else(|| {
            DbError::Corrupt(format!(
                "{} stores no table catalog (written by an older pmtx?): open it with its declared tables",
                path.display()
            ))
        })?;
        let size = info.geometry.size;
        let chunk_size = info.geometry.chunk_size;
        let mut options = Self::new(stored.engine, stored.tables, &path);
        options.cc = stored.protocol;
        options.pool = PoolLocation::File { path, size };
        options.chunk_size = chunk_size;
        if stored.engine == EngineKind::DbxNaive && logs_to_files {
            options.dbxn.medium = LogMedium::Disk;
        }
        Ok(options)
    }

    /// Registers the key function of secondary index `index` of `table`
    /// (for tables taken from the pool, whose stored indexes are known by
    /// name only). Naming an index the tables do not have makes the open
    /// fail with [`DbError::UnknownIndex`].
    pub fn secondary_key(mut self, table: &str, index: &str, key: crate::schema::SecondaryKeyFn) -> Self {
        let found = self
            .tables
            .iter_mut()
            .filter(|schema| schema.name == table)
            .flat_map(|schema| schema.secondaries.iter_mut())
            .find(|secondary| secondary.name == index);
        match found {
            Some(secondary) => secondary.register(key),
            None => self.unknown_secondary_keys.push((table.to_string(), index.to_string())),
        }
        self
    }

    /// These options with [`DbOptions::create_missing_tables`] set to `create`.
    pub fn create_missing_tables(mut self, create: bool) -> Self {
        self.create_missing_tables = create;
        self
    }

    /// These options with [`DbOptions::worker_wait`] set to `wait`.
    pub fn worker_wait(mut self, wait: Duration) -> Self {
        self.worker_wait = wait;
        self
    }

    /// These options with [`DbOptions::create_if_missing`] set to `create`.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// The deliberately broken step these options select (none without the
    /// `fault-injection` feature).
    pub(crate) fn faults(&self) -> crate::fault::Faults {
        #[cfg(feature = "fault-injection")]
        {
            crate::fault::Faults::new(self.fault, self.background_fault)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            crate::fault::Faults::default()
        }
    }

    /// Whether the engine these options select keeps its redo log in files
    /// (`dbx-disk`, `dbx-naive` with `medium=disk`).
    pub fn logs_to_files(&self) -> bool {
        self.engine == EngineKind::DbxDisk
            || (self.engine == EngineKind::DbxNaive && self.dbxn.medium == LogMedium::Disk)
    }

    /// The directory of the redo log files, for an engine that keeps them
    /// in files ([`DbOptions::logs_to_files`]) with a pool file or an
    /// explicit directory; `None` otherwise (no file log, or files in
    /// memory). Whoever removes a pool file to start afresh removes this
    /// directory too.
    pub fn log_directory_path(&self) -> Option<PathBuf> {
        if !self.logs_to_files() {
            return None;
        }
        match (&self.log_directory, &self.pool) {
            (LogDirectory::Path(path), _) => Some(path.clone()),
            (LogDirectory::BesidePool, PoolLocation::File { path, .. }) => {
                let mut name = path.file_name().unwrap_or_default().to_os_string();
                name.push(".log");
                Some(path.with_file_name(name))
            }
            _ => None,
        }
    }

    pub(crate) fn validate(&self) -> DbResult<()> {
        if let Some((table, index)) = self.unknown_secondary_keys.first() {
            return Err(DbError::UnknownIndex { table: table.clone(), index: index.clone() });
        }
        for (position, table) in self.tables.iter().enumerate() {
            if self.tables[..position].iter().any(|earlier| earlier.name == table.name) {
                return Err(DbError::InvalidConfig(format!("table `{}` is declared twice", table.name)));
            }
            if let Some(index) = table.secondaries.iter().find(|index| !index.is_registered()) {
                return Err(DbError::InvalidConfig(format!(
                    "table `{}`: secondary index `{}` is stored in the pool but has no key function: register it \
                     with DbOptions::secondary_key(\"{}\", \"{}\", f)",
                    table.name, index.name, table.name, index.name
                )));
            }
        }
        if self.workers == 0 || self.workers > 1024 {
            return Err(DbError::InvalidConfig(format!("workers must be 1..=1024, got {}", self.workers)));
        }
        check_medium(self.engine, self.dbxn.medium).map_err(DbError::InvalidConfig)?;
        if self.logs_to_files()
            && matches!((&self.log_directory, &self.pool), (LogDirectory::BesidePool, PoolLocation::InMemory { .. }))
        {
            return Err(DbError::InvalidConfig(format!(
                "engine {} keeps its redo log in files beside the pool file, but the pool is in anonymous memory: \
                 set DbOptions::log_directory to a directory (LogDirectory::Path) or to memory files \
                 (LogDirectory::Memory)",
                self.engine
            )));
        }
        self.cc.check(self.workers)?;
        check_cc(self.engine, self.cc).map_err(DbError::InvalidConfig)?;
        if self.engine.is_sp3_family() && self.workers > crate::engine::SP3_MAX_WORKERS {
            return Err(DbError::InvalidConfig(format!(
                "engine {} numbers its workers in {} TID bits: at most {} workers, got {}",
                self.engine,
                crate::engine::SP3_WORKER_BITS,
                crate::engine::SP3_MAX_WORKERS,
                self.workers
            )));
        }
        if self.engine.is_hybrid() && self.workers > crate::cc::protocols::MAX_LOCKING_WORKERS {
            return Err(DbError::InvalidConfig(format!(
                "engine {} keeps lock holders as a bit per worker and serves at most {} workers, got {}",
                self.engine,
                crate::cc::protocols::MAX_LOCKING_WORKERS,
                self.workers
            )));
        }
        if self.engine == EngineKind::ZenPlus {
            self.zen_plus.validate()?;
        }
        if self.max_attempts == 0 {
            return Err(DbError::InvalidConfig("max_attempts must be at least 1".into()));
        }
        if self.epoch_interval.is_zero() {
            return Err(DbError::InvalidConfig("epoch_interval must be positive".into()));
        }
        if self.wbl.window.is_zero() {
            return Err(DbError::InvalidConfig("wbl window must be positive".into()));
        }
        let mut names = std::collections::HashSet::new();
        for table in &self.tables {
            if !names.insert(table.name.as_str()) {
                return Err(DbError::InvalidConfig(format!("table {} is defined twice", table.name)));
            }
        }
        Ok(())
    }
}

/// The rule of `cc=`: whether `kind` runs protocol `cc`
/// ([`crate::engine_catalog::CcRule`]); the reason if not. The engine grammar
/// and [`DbOptions`] both apply it.
pub fn check_cc(kind: EngineKind, cc: CcProtocol) -> Result<(), String> {
    match kind.entry().cc {
        CcRule::Only { protocol, what, why } if protocol != cc => {
            Err(format!("engine {kind} {what}, got cc={cc}{why}"))
        }
        _ => Ok(()),
    }
}

/// The rule of the log medium: files (`medium=disk`) only for the engines
/// whose options have the `medium` key; the reason if not. [`DbOptions`]
/// and the crash harness apply it (the grammar knows the key anyway).
pub fn check_medium(kind: EngineKind, medium: LogMedium) -> Result<(), String> {
    if medium == LogMedium::Pm || kind.entry().option_key("medium").is_some() {
        return Ok(());
    }
    let takers: Vec<&str> = EngineKind::ALL
        .iter()
        .filter(|kind| kind.entry().option_key("medium").is_some())
        .map(|kind| kind.name())
        .collect();
    Err(format!(
        "medium=disk is an option of {} only (the DBXN paper's synchronous log on disk), not of {kind}; \
         dbx-disk is group commit with its log on disk",
        takers.join(", ")
    ))
}

/// Options of the DBXN engines (`DbOptions::dbxn`): the NVM-friendly log
/// writes of §3.4, each switchable, all on by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DbxnOptions {
    /// Non-temporal stores + fence instead of memcpy + clwb + fence.
    pub non_temporal: bool,
    /// Pad records under 256 bytes to whole 64-byte lines.
    pub pad_small_to_line: bool,
    /// Start records of 256 bytes or more on a 256-byte boundary and pad
    /// them to a multiple of 256 bytes.
    pub align_large_to_256: bool,
    /// Where the log is written: the pool (PM), or files made durable with
    /// `fdatasync` (`dbx-naive` only; the layout options then only change
    /// the bytes written, since a file takes no flushes).
    pub medium: LogMedium,
}

impl Default for DbxnOptions {
    fn default() -> Self {
        Self { non_temporal: true, pad_small_to_line: true, align_large_to_256: true, medium: LogMedium::Pm }
    }
}

/// Options of the `zen` engines (`DbOptions::zen`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZenOptions {
    /// DRAM budget of the Met-Cache in bytes (values plus 64 bytes per
    /// entry), split evenly between the worker regions. 0 caches nothing:
    /// every read goes to the PM heap.
    pub cache_bytes: u64,
    /// Table names whose tuples carry a transaction's LP bit first (§3.3.4;
    /// e.g. TPC-C's history and order tables); the other tables follow in
    /// lexicographic order of name, the paper's default.
    pub lp_table_order: Vec<String>,
    /// Garbage-queue entries a commit examines at most (§3.4 (ii)); space
    /// pressure lifts the limit.
    pub gc_batch: usize,
    /// Reclaimable tombstones a worker gathers before it runs a sweep.
    pub sweep_threshold: usize,
}

impl Default for ZenOptions {
    fn default() -> Self {
        Self { cache_bytes: 256 << 20, lp_table_order: Vec::new(), gc_batch: 64, sweep_threshold: 256 }
    }
}

/// Options of `foedus` (`DbOptions::foedus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoedusOptions {
    /// DRAM budget in bytes (keys plus values) of the rows kept in volatile
    /// pages; beyond it, rows whose newest version is in the snapshot are
    /// evicted after each snapshot, and a miss reads the row's whole 4 KiB
    /// snapshot page from the pool (`cache=`; docs/engines/foedus.md).
    pub cache_bytes: u64,
}

impl Default for FoedusOptions {
    fn default() -> Self {
        Self { cache_bytes: 256 << 20 }
    }
}

/// Options of `wbl` (`DbOptions::wbl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WblOptions {
    /// Length of a group-commit window: once per window a record (c_p,
    /// c_d) is made durable, which acknowledges every commit of the windows
    /// before it. The window is also `wbl`'s epoch (TIDs, reclamation), in
    /// place of `DbOptions::epoch_interval`. 100 µs by default, the Zen
    /// paper's WBL setting. TIDs hold 2^29 epochs, so a pool runs for
    /// 2^29 windows (about 15 hours of windows at 100 µs) in all.
    pub window: Duration,
}

impl Default for WblOptions {
    fn default() -> Self {
        Self { window: Duration::from_micros(100) }
    }
}

/// Options of `mmdb` (`DbOptions::mmdb`): the Zen paper's "MMDB with NVM
/// capacity" keeps its tables in DRAM up to a budget and the tuples beyond
/// it in PM used as volatile memory (zen-plus.txt §2.3, §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmdbOptions {
    /// DRAM budget of the tables' rows in bytes (row header, key and value
    /// capacity). Rows are placed in the order they are first written or
    /// read: in DRAM while the budget lasts, in the pool's volatile region
    /// after. 256 MiB by default, as Zen's Met-Cache. `mmdb-ideal` ignores
    /// it (everything in DRAM).
    pub dram_bytes: u64,
}

impl Default for MmdbOptions {
    fn default() -> Self {
        Self { dram_bytes: ZenOptions::default().cache_bytes }
    }
}

/// Options of `zen+` (`DbOptions::zen_plus`): the thresholds of the
/// adaptive execution (zen-plus.txt §4.1.2) and the NUMA-aware soft
/// partitions (§4.2.2). The defaults are the paper's.
#[derive(Clone, Debug, PartialEq)]
pub struct ZenPlusOptions {
    /// α: the share of its worker's Met-Cache region (in percent of the
    /// region's bytes) a read-write transaction may occupy with the tuples
    /// it accesses before it enters the exclusive stage (1..=100) [95].
    pub alpha_percent: u32,
    /// β: the exclusive stage is entered when the free NVM space (free pool
    /// chunks plus free heap slots) falls below this percentage of the
    /// pool's data space while superseded tuples wait for reclamation
    /// (0..=100; 0 disables the condition) [5].
    pub beta_percent: u32,
    /// γ: tuples a transaction may access in its aborted attempts (the
    /// wasted work of its retries) before it enters the exclusive stage
    /// (0 disables the condition) [16 000 000].
    pub gamma_tuples: u64,
    /// NUMA nodes of the soft partitions: 0 (the default) takes the
    /// machine's nodes when it has several (`/sys/devices/system/node`),
    /// else the backend's emulated ones (`--pm-numa-nodes`), else 1 (soft
    /// partitions off). More than 1 on a machine and backend with one node
    /// emulates the placement only: decisions and counters, no latency.
    pub numa_nodes: u32,
    /// Partitions of the soft partitioning (hash of the partition key
    /// modulo this) [2048].
    pub partitions: u32,
    /// δ of Algorithm 3: the load difference between nodes (a fraction of
    /// the busiest node's load) above which a transaction goes to the least
    /// loaded node rather than the one of its partitions [0.3].
    pub delta: f64,
    /// η of Algorithm 4: a partition moves to the candidate node only if
    /// that node's accesses to it exceed the current node's by this factor
    /// [1.2].
    pub eta: f64,
    /// How often the partitions are remapped (Algorithm 4) [100 ms].
    pub remap_interval: Duration,
    /// Where read-only transactions take their snapshot [oldest].
    pub read_only_snapshot: ReadOnlySnapshot,
}

/// Where `zen+`'s read-only transactions read (`ZenPlusOptions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadOnlySnapshot {
    /// At the oldest snapshot any transaction holds (the paper's "global
    /// minimum Tx-CTS − 1", zen-plus.txt §4.1.2): never aborts, keeps no
    /// snapshot of its own alive longer than the oldest running one, but
    /// may miss commits acknowledged before it began while an older
    /// transaction runs. Serializable, not strictly serializable.
    #[default]
    Oldest,
    /// At the clock when it begins, like Hekaton's read-only transactions:
    /// sees every commit acknowledged before it began (strictly
    /// serializable), still never aborts.
    Current,
}

impl ReadOnlySnapshot {
    /// The option value (`snapshot=oldest|current`).
    pub fn name(self) -> &'static str {
        match self {
            ReadOnlySnapshot::Oldest => "oldest",
            ReadOnlySnapshot::Current => "current",
        }
    }

    /// The value named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "oldest" => Some(ReadOnlySnapshot::Oldest),
            "current" => Some(ReadOnlySnapshot::Current),
            _ => None,
        }
    }
}

impl Default for ZenPlusOptions {
    fn default() -> Self {
        Self {
            alpha_percent: 95,
            beta_percent: 5,
            gamma_tuples: 16_000_000,
            numa_nodes: 0,
            partitions: 2048,
            delta: 0.3,
            eta: 1.2,
            remap_interval: Duration::from_millis(100),
            read_only_snapshot: ReadOnlySnapshot::Oldest,
        }
    }
}

impl ZenPlusOptions {
    /// Most NUMA nodes the soft partitions handle.
    pub const MAX_NUMA_NODES: u32 = 64;
    /// The values α takes (percent).
    pub const ALPHA_PERCENT: RangeInclusive<u32> = 1..=100;
    /// The values β takes (percent; 0 disables it).
    pub const BETA_PERCENT: RangeInclusive<u32> = 0..=100;
    /// The values of [`ZenPlusOptions::numa_nodes`] (0: automatic).
    pub const NUMA_NODES: RangeInclusive<u32> = 0..=Self::MAX_NUMA_NODES;
    /// The values of [`ZenPlusOptions::partitions`].
    pub const PARTITIONS: RangeInclusive<u32> = 1..=1 << 20;
    /// The values δ takes.
    pub const DELTA: RangeInclusive<f64> = 0.0..=1.0;
    /// The least η.
    pub const ETA_MIN: f64 = 1.0;

    pub(crate) fn validate(&self) -> DbResult<()> {
        let invalid = |message: String| Err(DbError::InvalidConfig(format!("zen+: {message}")));
        if !Self::ALPHA_PERCENT.contains(&self.alpha_percent) {
            return invalid(format!("alpha must be a percentage from 1 to 100, got {}", self.alpha_percent));
        }
        if !Self::BETA_PERCENT.contains(&self.beta_percent) {
            return invalid(format!("beta must be a percentage from 0 to 100, got {}", self.beta_percent));
        }
        if !Self::NUMA_NODES.contains(&self.numa_nodes) {
            return invalid(format!(
                "numa nodes must be 0 (auto) to {}, got {}",
                Self::MAX_NUMA_NODES,
                self.numa_nodes
            ));
        }
        if !Self::PARTITIONS.contains(&self.partitions) {
            return invalid(format!("partitions must be 1 to {}, got {}", Self::PARTITIONS.end(), self.partitions));
        }
        if !(self.delta.is_finite() && Self::DELTA.contains(&self.delta)) {
            return invalid(format!("delta must be a fraction from 0 to 1, got {}", self.delta));
        }
        if !(self.eta.is_finite() && self.eta >= Self::ETA_MIN) {
            return invalid(format!("eta must be a factor of at least 1, got {}", self.eta));
        }
        if self.remap_interval.is_zero() {
            return invalid("the remap interval must be positive".into());
        }
        Ok(())
    }
}
