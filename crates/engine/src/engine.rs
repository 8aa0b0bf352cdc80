//! The one trait every engine implements, and the values that cross it.
//!
//! A [`crate::Database`] holds an `Arc<dyn Engine>` chosen from
//! [`EngineKind`] at open time; each worker thread owns a
//! `Box<dyn EngineWorker>`. Engines are generic over the PM backend inside,
//! so the dynamic dispatch happens once per operation, never per store.

use crate::engine_catalog::{self as catalog, Family, StoragePart};
pub use crate::engine_kind::EngineKind;
use crate::error::{DbResult, TxResult};
use crate::schema::{TableId, TableSchema};
pub use crate::stats::{CommitTicket, EngineStats, RecoveryReport};
pub use crate::storage::record::{SP3_MAX_WORKERS, SP3_WORKER_BITS};
pub use crate::storage::request::{ScanRequest, WriteOp};
use crate::storage::table::Table;

impl EngineKind {
    /// Every engine, for `--help` and tests.
    pub const ALL: [EngineKind; 22] = [
        EngineKind::Silo,
        EngineKind::GroupCommit,
        EngineKind::Dbxn,
        EngineKind::DbxnNvm,
        EngineKind::DbxNaive,
        EngineKind::Zen,
        EngineKind::ZenNaiveAlloc,
        EngineKind::Sp3,
        EngineKind::NvmTx,
        EngineKind::NvmIdeal,
        EngineKind::Phytm,
        EngineKind::PhytmPaper,
        EngineKind::Phtm,
        EngineKind::TwoPl,
        EngineKind::DbxDisk,
        EngineKind::Mmdb,
        EngineKind::Wbl,
        EngineKind::ZenPlus,
        EngineKind::MmdbIdeal,
        EngineKind::Mnemosyne,
        EngineKind::Pisces,
        EngineKind::Foedus,
    ];

    /// The engine's persistent identity: the code a pool it creates keeps
    /// in its engine root, which a later open checks. An explicit constant
    /// per engine in the catalog ([`catalog::ENGINES`]), never a position in
    /// [`EngineKind::ALL`], so reordering or extending the list relabels no
    /// existing pool. The values are the positions (plus one) the list gave
    /// before the codes were explicit, so pools created then keep opening.
    /// Never change or reuse one.
    pub const fn code(self) -> u64 {
        catalog::entry(self).code
    }

    /// The engine's catalog entry: its parts, defaults, caveats and options.
    pub const fn entry(self) -> &'static catalog::EngineEntry {
        catalog::entry(self)
    }

    /// The engine whose [`EngineKind::code`] is `code`.
    pub fn from_code(code: u64) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// Parses an engine name (an engine's own, not a preset's: see
    /// [`catalog::lookup`] for both).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Stable name.
    pub fn name(self) -> &'static str {
        catalog::entry(self).name
    }

    /// Whether the engine's transactions are serializable (every engine
    /// but `nvm-ideal`, an upper bound without concurrency control, and
    /// `pisces`, snapshot isolation).
    pub fn is_serializable(self) -> bool {
        catalog::entry(self).serializable
    }

    /// The Zen family (`zen`, `zen-naive-alloc`, `zen+`): tuples in a PM
    /// heap, log-free commits.
    pub fn is_zen_family(self) -> bool {
        catalog::entry(self).family == Family::Zen
    }

    /// The concurrency-control protocol the engine runs unless told
    /// otherwise: Hekaton's MVCC for `zen+` (its adaptive execution is
    /// built on snapshots), Silo's OCC for every other engine.
    pub fn default_cc(self) -> crate::cc::CcProtocol {
        catalog::entry(self).cc.default_protocol()
    }

    /// The SP^3 family (`sp3`, `nvm-tx`, `nvm-ideal`).
    pub fn is_sp3_family(self) -> bool {
        catalog::entry(self).family == Family::Sp3
    }

    /// The Zen paper's MMDB (`mmdb`, `mmdb-ideal`).
    pub fn is_mmdb(self) -> bool {
        catalog::entry(self).family == Family::Mmdb
    }

    /// The PHyTM family (`phytm`, `phytm-paper`, `phtm`, `2pl`): hybrid
    /// transactions over the shared lock table.
    pub fn is_hybrid(self) -> bool {
        catalog::entry(self).family == Family::Hybrid
    }

    /// The engines over Zen's PM tuple heap (`zen`, `zen-naive-alloc`,
    /// `zen+`, `wbl`): their rows live in the heap and a DRAM Met-Cache,
    /// and they take `DbOptions::zen`.
    pub fn uses_tuple_heap(self) -> bool {
        catalog::entry(self).storage == StoragePart::TupleHeap
    }

    /// Why crash-consistency claims exclude the engine, if they do: a
    /// variant that by design may lose what a reader already committed on.
    pub fn durability_caveat(self) -> Option<&'static str> {
        catalog::entry(self).durability_caveat
    }

    /// Whether acknowledged commits survive a crash.
    pub fn is_durable(self) -> bool {
        catalog::entry(self).is_durable()
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A database engine.
pub trait Engine: Send + Sync + 'static {
    /// Which engine.
    fn kind(&self) -> EngineKind;
    /// The tables' schemas, by id.
    fn schemas(&self) -> &[TableSchema];
    /// The tables of DRAM records, by id, for an engine that keeps its
    /// rows as DRAM records (`None`: its rows live elsewhere, such as the
    /// Zen family's heap; read them through transactions or
    /// [`Engine::for_each_row`]).
    fn dram_tables(&self) -> Option<&[Table]> {
        None
    }
    /// A per-thread worker; `id` is below the configured worker count and
    /// no other worker of this `id` exists (the [`crate::Database`] sees
    /// to both). An error if the worker's state cannot be set up, such as
    /// [`crate::DbError::OutOfSpace`] when the pool has no chunk left for
    /// its log segment.
    fn worker(self: std::sync::Arc<Self>, id: usize) -> DbResult<Box<dyn EngineWorker>>;
    /// Whether `ticket` is durable now.
    fn is_durable(&self, ticket: CommitTicket) -> bool;
    /// Statistics.
    fn stats(&self) -> EngineStats;
    /// Takes a checkpoint now (durable engines; no-op otherwise).
    fn checkpoint(&self) -> DbResult<()>;
    /// What the engine's background threads owe the caller
    /// (`crate::background`): an error once per failed periodic
    /// checkpoint, and at every call after one of them panicked.
    fn background_error(&self) -> DbResult<()> {
        Ok(())
    }
    /// Stops background work, makes everything durable and marks a clean
    /// shutdown; a failure of the background work the caller was not yet
    /// told of is returned too (after a background panic, no clean
    /// shutdown is marked).
    fn close(&self) -> DbResult<()>;
    /// Stops background work without marking a clean shutdown (a dropped,
    /// unclosed database behaves like a crash for the next open).
    fn close_on_drop(&self) -> DbResult<()>;
    /// Audits the engine's own structures against each other and the pool
    /// (crash verification, tests) and summarises what it counted; call it
    /// with no transaction running. `Ok(None)`: the engine has no structure
    /// beyond what transactions can read.
    fn check_structure(&self) -> DbResult<Option<String>> {
        Ok(None)
    }
    /// Chooses the worker to run a transaction on whose keys are `keys`
    /// (`zen+` on several NUMA nodes: Algorithm 3 of zen-plus.txt §4.2.2,
    /// the node most of the keys' partitions map to unless the nodes' loads
    /// are unbalanced, then a worker of that node in turn). `None`: the
    /// engine has no preference. For applications that dispatch
    /// transactions to worker threads; the choice counts as pending on the
    /// node until that worker begins a transaction.
    fn assign_transaction(&self, keys: &[(TableId, &[u8])]) -> Option<usize> {
        let _ = keys;
        None
    }
    /// Visits every present row of `table` as `(key, value)`, in key order
    /// for ordered tables and in no particular order for hash tables. For
    /// checks and dumps: call it with no transaction running (it is not a
    /// transaction and takes no snapshot).
    fn for_each_row(&self, table: TableId, visit: &mut dyn FnMut(&[u8], &[u8])) -> DbResult<()> {
        let table = self
            .dram_tables()
            .expect("an engine without DRAM tables visits its own rows")
            .get(table.0 as usize)
            .ok_or_else(|| crate::error::DbError::UnknownTable(format!("#{}", table.0)))?;
        let mut value = Vec::new();
        let mut unstable = None;
        table.for_each_row(|key, record| match record.copy_value(&mut value) {
            Some(snapshot) if !snapshot.is_absent() => visit(key, &value),
            Some(_) => {}
            None => unstable = Some(key.to_vec()),
        });
        match unstable {
            Some(key) => Err(crate::error::DbError::Corrupt(format!(
                "table {}: record {key:02x?} stayed locked during a quiescent dump",
                table.schema().name
            ))),
            None => Ok(()),
        }
    }
}

/// One worker thread's transaction machinery.
pub trait EngineWorker: Send {
    /// Starts attempt number `attempt` of a transaction (1 for the first;
    /// a retry keeps what the protocol keeps across attempts, such as
    /// wait-die's timestamp).
    fn begin(&mut self, read_only: bool, attempt: u32);
    /// Reads `key` into `out`; `Ok(false)` if absent.
    fn get(&mut self, table: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool>;
    /// Reads `key` and hands a stable copy of the value to `visit` without
    /// allocating; `Ok(false)` (and no call) if absent.
    fn get_with(&mut self, table: TableId, key: &[u8], visit: &mut dyn FnMut(&[u8])) -> TxResult<bool> {
        let mut value = Vec::new();
        let present = self.get(table, key, &mut value)?;
        if present {
            visit(&value);
        }
        Ok(present)
    }
    /// A hint: the body will soon access `key` of `table`; start loading
    /// its row into the cache. No effect on the transaction.
    fn prefetch(&mut self, _table: TableId, _key: &[u8]) {}
    /// Writes; see [`WriteOp`] for the meaning of the result.
    fn write(&mut self, table: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool>;
    /// Updates the row of `key` in place: `modify` gets the row as this
    /// transaction sees it and changes bytes of it (not its length); the
    /// result is buffered as an update. `Ok(false)` (and no call) if absent.
    fn update_with(&mut self, table: TableId, key: &[u8], modify: &mut dyn FnMut(&mut [u8])) -> TxResult<bool> {
        let mut value = Vec::new();
        if !self.get(table, key, &mut value)? {
            return Ok(false);
        }
        modify(&mut value);
        self.write(table, key, WriteOp::Update(&value))
    }
    /// Range scan; `visit(primary key, value)` returns false to stop.
    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()>;
    /// Validates and commits the attempt.
    fn commit(&mut self) -> TxResult<CommitTicket>;
    /// Discards the attempt.
    fn abort(&mut self);
    /// The worker goes idle (between transactions), so group commit does
    /// not wait for it.
    fn idle(&mut self);
    /// Blocks until `ticket` is durable; [`crate::DbError::Closed`] once the
    /// database is closed or crashed while waiting. A
    /// [`CommitTicket::Flushed`] ticket (of this worker or another) is made
    /// durable by the wait itself: it fences the commit's flushed line.
    fn wait_durable(&mut self, ticket: CommitTicket) -> DbResult<()>;
    /// How the caller acknowledges the next commits. Pipelined ones
    /// ([`Acknowledgement::InOrder`], [`Acknowledgement::EachAlone`]): Zen
    /// then leaves the fence after a commit's last-persisted mark to a
    /// later fence and hands out [`CommitTicket::Flushed`] tickets
    /// (zen-plus.txt §3.3.1); other engines commit the same either way.
    fn set_acknowledgement(&mut self, acknowledgement: Acknowledgement) {
        let _ = acknowledgement;
    }
}

/// How a worker's commits are acknowledged ([`EngineWorker::set_acknowledgement`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Acknowledgement {
    /// When the commit returns, once durable (`Database::run`).
    #[default]
    AtReturn,
    /// Later, each commit once it and every earlier one of the worker are
    /// durable (`Worker::run_pipelined`): a ticket need only cover what
    /// the worker's earlier commits do not.
    InOrder,
    /// Later, each commit once its own ticket is durable
    /// (`Database::run_pipelined`).
    EachAlone,
}

#[cfg(test)]
mod tests {
    use super::EngineKind;

    /// The codes pools keep: changing one makes every pool of that engine
    /// unopenable (or, worse, opened as another engine).
    #[test]
    fn engine_codes_are_pinned() {
        let pinned = [
            ("silo", 1),
            ("group-commit", 2),
            ("dbxn", 3),
            ("dbxn-nvm", 4),
            ("dbx-naive", 5),
            ("zen", 6),
            ("zen-naive-alloc", 7),
            ("sp3", 8),
            ("nvm-tx", 9),
            ("nvm-ideal", 10),
            ("phytm", 11),
            ("phytm-paper", 12),
            ("phtm", 13),
            ("2pl", 14),
            ("dbx-disk", 15),
            ("mmdb", 16),
            ("wbl", 17),
            ("zen+", 18),
            ("mmdb-ideal", 19),
            ("mnemosyne", 20),
            ("pisces", 21),
            ("foedus", 22),
        ];
        assert_eq!(pinned.len(), EngineKind::ALL.len(), "every engine has a pinned code");
        for (name, code) in pinned {
            let kind = EngineKind::parse(name).unwrap_or_else(|| panic!("unknown engine {name}"));
            assert_eq!(kind.code(), code, "{name}");
            assert_eq!(EngineKind::from_code(code), Some(kind), "{name}");
        }
        assert_eq!(EngineKind::from_code(0), None);
        assert_eq!(EngineKind::from_code(23), None);
    }

    /// The code does not follow the list: a reordered list keeps it.
    #[test]
    fn engine_codes_do_not_depend_on_the_list_order() {
        let mut reversed = EngineKind::ALL;
        reversed.reverse();
        for kind in reversed {
            assert_eq!(EngineKind::from_code(kind.code()), Some(kind));
        }
        let mut codes: Vec<u64> = EngineKind::ALL.iter().map(|kind| kind.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), EngineKind::ALL.len(), "codes are unique");
    }
}
