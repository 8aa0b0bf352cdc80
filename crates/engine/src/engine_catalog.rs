//! The engine catalog: one entry per engine with everything the rest of
//! the workspace asks about it (its name, its persistent code, the three
//! parts it composes, its defaults and caveats, whether the crash harness
//! checks it, its option keys and its `--help` line), and the named
//! presets that are an engine plus option defaults.
//!
//! [`EngineKind`]'s methods are lookups in [`ENGINES`], the
//! `ENGINE[:key=value...]` grammar (`crate::options::spec`) takes its keys
//! and rules from here, and the crash harness its refusals. Adding a preset
//! is one entry of [`PRESETS`]. Only `engines/`, `options/` and the layers
//! above read this table: the parts below (`cc/`, `durability/`,
//! `storage/`, `index/`) get their own configs.

use crate::cc::CcProtocol;
use crate::engine_kind::EngineKind;

/// One option key of the engine grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionKey {
    /// The key (`nt`, `cache`, ...).
    pub name: &'static str,
    /// The values it takes, for messages and `--help` (`on|off`, `<size>`).
    pub values: &'static str,
    /// What it does, with its default in brackets.
    pub description: &'static str,
}

/// Options of the DBXN family (`dbxn`, `dbxn-nvm`, `dbx-naive`).
pub const DBXN_KEYS: &[OptionKey] = &[
    OptionKey {
        name: "nt",
        values: "on|off",
        description: "non-temporal log stores (off: ordinary stores + clwb) [on]",
    },
    OptionKey { name: "pad64", values: "on|off", description: "pad log records under 256 B to whole 64 B lines [on]" },
    OptionKey {
        name: "align256",
        values: "on|off",
        description: "start records of 256 B or more on a 256 B boundary, padded to 256 B [on]",
    },
    OptionKey {
        name: "htm",
        values: "none|sim|rtm",
        description: "HTM backend of the commit region (rtm only where the CPU has it) [none]",
    },
    OptionKey {
        name: "htm-abort",
        values: "<percent>",
        description: "with htm=sim: injected aborts per hardware attempt, 0 to 100 [0]",
    },
];

/// Options of `dbx-naive` beyond the family's: the medium of its log.
pub const DBX_NAIVE_KEYS: &[OptionKey] = &[OptionKey {
    name: "medium",
    values: "pm|disk",
    description: "where the synchronous log goes: the pool, or files beside it made durable with fdatasync per \
                  commit (the DBXN paper's +synchronous log (Disk) row) [pm]",
}];

/// Options of the PHyTM family: the HTM backend of its hardware paths.
pub const HYBRID_KEYS: &[OptionKey] = DBXN_KEYS.split_at(3).1;

/// Options of the Zen engines (`zen`, `zen-naive-alloc`).
pub const ZEN_KEYS: &[OptionKey] = &[OptionKey {
    name: "cache",
    values: "<size>",
    description: "Met-Cache DRAM budget, e.g. 64MiB; 0 caches nothing [256MiB]",
}];

/// Options of `wbl`: the Met-Cache (its tuple cache) and its window.
pub const WBL_KEYS: &[OptionKey] = &[
    ZEN_KEYS[0],
    OptionKey {
        name: "window",
        values: "<duration>",
        description: "group-commit window: one (c_p, c_d) record per window, e.g. 100us or 1ms [100us]",
    },
];

/// Options of `foedus`: the DRAM budget of its volatile pages.
pub const FOEDUS_KEYS: &[OptionKey] = &[OptionKey {
    name: "cache",
    values: "<size>",
    description: "DRAM budget of rows in volatile pages, e.g. 64MiB; after each snapshot, rows beyond it whose \
                  newest version is in the snapshot are evicted, and a miss reads the row's 4 KiB snapshot page \
                  [256MiB]",
}];

/// Options of `mmdb`: the DRAM budget of its tables.
pub const MMDB_KEYS: &[OptionKey] = &[OptionKey {
    name: "dram",
    values: "<size>",
    description: "DRAM budget of the tables, e.g. 64MiB; rows beyond it live in the pool used as volatile \
                  memory [256MiB]",
}];

/// Options of `zen+`: Zen's, the thresholds of its adaptive execution and
/// its NUMA-aware soft partitions (zen-plus.txt §4).
pub const ZEN_PLUS_KEYS: &[OptionKey] = &[
    ZEN_KEYS[0],
    OptionKey {
        name: "alpha",
        values: "<percent>",
        description: "exclusive stage when a writing transaction's tuples fill this share of its Met-Cache region, \
                      1 to 100 [95]",
    },
    OptionKey {
        name: "beta",
        values: "<percent>",
        description: "exclusive stage when free NVM space falls below this share of the pool while garbage waits, \
                      0 (off) to 100 [5]",
    },
    OptionKey {
        name: "gamma",
        values: "<tuples>",
        description: "exclusive stage when a transaction's retries wasted more tuple accesses, 0 = off [16000000]",
    },
    OptionKey {
        name: "numa",
        values: "<nodes>",
        description: "NUMA nodes of the soft partitions: 0 = the machine's or the backend's (--pm-numa-nodes), \
                      more than 1 on one node = bookkeeping only [0]",
    },
    OptionKey { name: "partitions", values: "<count>", description: "soft partitions [2048]" },
    OptionKey {
        name: "delta",
        values: "<fraction>",
        description: "load difference between nodes (share of the busiest) that overrides affinity, 0 to 1 [0.3]",
    },
    OptionKey {
        name: "eta",
        values: "<factor>",
        description: "a partition moves only to a node with this many times the accesses, at least 1 [1.2]",
    },
    OptionKey {
        name: "snapshot",
        values: "oldest|current",
        description: "read-only transactions read at the oldest running snapshot (the paper's; may miss a commit \
                      acknowledged before they began) or at the current one (strictly serializable) [oldest]",
    },
];

/// Options every engine accepts (listed after the engine's own keys).
pub const COMMON_KEYS: &[OptionKey] = &[OptionKey {
    name: "cc",
    values: "<protocol>",
    description: "concurrency-control protocol (see the list below) [silo]",
}];

/// Which concurrency-control protocols an engine runs (`cc=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CcRule {
    /// Any protocol; this one unless told otherwise.
    Any(CcProtocol),
    /// This protocol only (also its default).
    Only {
        /// The protocol.
        protocol: CcProtocol,
        /// Why, as "runs ... and takes cc=... only" after the engine name.
        what: &'static str,
        /// More of the reason, after the refused protocol (may be empty).
        why: &'static str,
    },
}

impl CcRule {
    /// The protocol the engine runs unless told otherwise.
    pub const fn default_protocol(self) -> CcProtocol {
        match self {
            CcRule::Any(protocol) | CcRule::Only { protocol, .. } => protocol,
        }
    }
}

/// The concurrency-control part of an engine, for docs and `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolPart {
    /// The transaction state generic over a `cc=` protocol.
    Configurable,
    /// SP^3's OCC: locks released before the log is durable, dependencies
    /// tracked until they are.
    Sp3EarlyRelease,
    /// OCC holding its locks until the log is durable (NVM-TX).
    OccLocksToDurable,
    /// No concurrency control (NVM-Ideal).
    None,
    /// PHyTM's hybrid paths (fast HTM, slow HTM, STM) over a lock table.
    Hybrid,
    /// HTM transactions under one global lock (PHTM).
    GlobalLockHtm,
    /// Two-phase locking with try-locks (PHyTM's STM path alone).
    TwoPhaseLocking,
    /// TinySTM as Mnemosyne runs it: encounter-time write locks in a
    /// stripe table, invisible reads validated at commit, a global clock.
    TinyStm,
    /// Pisces' dual-version concurrency control: snapshot isolation with at
    /// most two versions per row, first committer wins, no read validation.
    DualVersion,
}

/// The isolation an engine's transactions get, for `--help`, `pmtx bench`
/// and the crash harness (whose oracles need what they check to hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Serializable (strictly, for most protocols: `cc=NAME` says).
    Serializable,
    /// Snapshot isolation: reads at a snapshot, write-write conflicts
    /// refused, reads never validated, so write skew is admitted.
    Snapshot,
    /// No concurrency control at all (an upper bound).
    Uncontrolled,
}

/// The durability scheme of an engine, for docs and `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurabilityPart {
    /// Nothing survives a crash.
    None,
    /// Per-thread redo logs in PM, epoch group commit, checkpoints.
    EpochRedoLog,
    /// The same with the log in files, one `fdatasync` per file and epoch.
    EpochRedoLogOnDisk,
    /// DBXN's synchronous redo log after the commit region, parity versions.
    SyncLogAfterCommit,
    /// A synchronous redo log inside the commit region (PM or files).
    SyncLogInCommit,
    /// SP^3's synchronous log with dependency tracking.
    Sp3Log,
    /// A synchronous redo log written by the hybrid paths.
    HybridSyncLog,
    /// Log-free: versions persisted in the tuple heap at commit (Zen).
    LogFree,
    /// Write-behind logging: one (c_p, c_d) record per window.
    WriteBehind,
    /// One redo record per transaction, flushed before the acknowledgement.
    SyncWal,
    /// Mnemosyne's torn-bit redo log (one fence per commit), written back
    /// in place after the commit, truncated later.
    TornBitRedo,
    /// Pisces' three-stage commit over the same log and home slots:
    /// persist the redo log, make the versions visible, then write them
    /// back in place.
    ThreeStageRedo,
    /// Per-thread redo logs in PM, epoch group commit, and a log gleaner
    /// folding the log into snapshot pages in PM (FOEDUS).
    EpochRedoLogSnapshots,
}

/// Where an engine's rows live, for docs and `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoragePart {
    /// DRAM records and indexes.
    DramRecords,
    /// DRAM records plus a PM copy of every written value.
    DramRecordsPmValues,
    /// Zen's PM tuple heap behind a DRAM Met-Cache.
    TupleHeap,
    /// DRAM records up to a budget, the rest in PM used as volatile memory.
    DramThenVolatilePm,
    /// Persistent home slots in PM updated in place, DRAM records and
    /// indexes rebuilt from them at recovery.
    PmHomeSlots,
    /// Volatile DRAM rows up to a budget over immutable snapshot pages in
    /// PM; an evicted row is read back with its whole 4 KiB page (FOEDUS).
    DramPagesOverSnapshot,
}

/// Groups of engines that share code paths and options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Silo-style OCC over DRAM records (`silo`, `group-commit`, `dbx-disk`).
    Silo,
    /// The DBXN engines.
    Dbxn,
    /// Zen and its variants.
    Zen,
    /// SP^3 and its baselines.
    Sp3,
    /// PHyTM and its baselines.
    Hybrid,
    /// The Zen paper's MMDB.
    Mmdb,
    /// Write-behind logging.
    Wbl,
    /// Persistent transactional memories (Mnemosyne, Pisces).
    Ptm,
}

/// What the crash harness does with an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashHarness {
    /// Checked by the crash simulator and the kill mode.
    SimAndKill,
    /// Checked by the kill mode only (part of its durable state is in files,
    /// which the PM crash simulator does not model).
    KillOnly,
    /// Refused: not durable, without concurrency control, or excluded from
    /// durability claims.
    Refused,
}

/// One engine of the catalog.
#[derive(Clone, Copy, Debug)]
pub struct EngineEntry {
    /// The engine.
    pub kind: EngineKind,
    /// Its stable name.
    pub name: &'static str,
    /// Its persistent code, kept in the engine root of the pools it creates.
    /// Never change or reuse one.
    pub code: u64,
    /// The family.
    pub family: Family,
    /// Concurrency-control part.
    pub protocol: ProtocolPart,
    /// The `cc=` protocols it takes.
    pub cc: CcRule,
    /// Durability part.
    pub durability: DurabilityPart,
    /// Storage part.
    pub storage: StoragePart,
    /// Whether its transactions are serializable.
    pub serializable: bool,
    /// Why crash-consistency claims exclude it, if they do.
    pub durability_caveat: Option<&'static str>,
    /// What the crash harness does with it.
    pub crash_harness: CrashHarness,
    /// Its option keys beyond [`COMMON_KEYS`], in groups as `--help` lists
    /// them.
    pub option_groups: &'static [&'static [OptionKey]],
    /// One line for `--help`.
    pub summary: &'static str,
    /// Where it departs from the paper it reproduces, one line each, for
    /// `pmtx bench` (empty: nothing beyond the notes of the engine's page, docs/engines/).
    pub deviations: &'static [&'static str],
}

impl EngineEntry {
    /// The isolation its transactions get: serializable unless the catalog
    /// says otherwise; then snapshot isolation under DVCC, else none.
    pub const fn isolation(&self) -> Isolation {
        if self.serializable {
            Isolation::Serializable
        } else if matches!(self.protocol, ProtocolPart::DualVersion) {
            Isolation::Snapshot
        } else {
            Isolation::Uncontrolled
        }
    }

    /// Whether its acknowledged commits survive a crash.
    pub const fn is_durable(&self) -> bool {
        !matches!(self.durability, DurabilityPart::None)
    }

    /// Whether it acknowledges a commit only once every transaction running
    /// in the commit's epoch has ended (epoch group commit, write-behind
    /// windows): a thread that waits for a commit while it holds another
    /// running transaction of the same database would wait forever.
    pub const fn acknowledges_by_epoch(&self) -> bool {
        matches!(
            self.durability,
            DurabilityPart::EpochRedoLog
                | DurabilityPart::EpochRedoLogOnDisk
                | DurabilityPart::EpochRedoLogSnapshots
                | DurabilityPart::WriteBehind
        )
    }

    /// Every option key it takes: its own, then the common ones.
    pub fn option_keys(&self) -> impl Iterator<Item = &'static OptionKey> + Clone {
        self.option_groups.iter().flat_map(|group| group.iter()).chain(COMMON_KEYS)
    }

    /// The key `name`, if it takes it.
    pub fn option_key(&self, name: &str) -> Option<&'static OptionKey> {
        self.option_keys().find(|key| key.name == name)
    }

    /// Its caveats, for `--help` and reports (empty: none).
    pub fn caveats(&self) -> Vec<&'static str> {
        let mut caveats = Vec::new();
        if !self.is_durable() {
            caveats.push("not durable");
        }
        match self.isolation() {
            Isolation::Serializable => {}
            Isolation::Snapshot => caveats.push("not serializable (snapshot isolation: admits write skew)"),
            Isolation::Uncontrolled => caveats.push("not serializable"),
        }
        if self.durability_caveat.is_some() {
            caveats.push("excluded from durability claims");
        }
        caveats
    }
}

/// A named preset: an engine of [`ENGINES`] with option defaults. The
/// grammar accepts its name wherever it accepts an engine name; the
/// options it sets are defaults, which `NAME:key=value` overrides. A pool
/// keeps the engine's code only, so a preset never needs a code of its own.
#[derive(Clone, Copy, Debug)]
pub struct PresetEntry {
    /// The name given to `--engine`.
    pub name: &'static str,
    /// The engine it runs.
    pub engine: EngineKind,
    /// Its option defaults, as `key=value` of the grammar.
    pub options: &'static [(&'static str, &'static str)],
    /// One line for `--help`.
    pub summary: &'static str,
}

/// The named presets beyond the engines themselves (none yet).
pub const PRESETS: &[PresetEntry] = &[];

const SILO_OCC: CcRule = CcRule::Any(CcProtocol::Silo);
const SP3_OCC: CcRule =
    CcRule::Only { protocol: CcProtocol::Silo, what: "runs SP^3's OCC and takes cc=silo only", why: "" };
const HYBRID_CC: CcRule = CcRule::Only {
    protocol: CcProtocol::Silo,
    what: "runs its own hybrid concurrency control and takes no cc option",
    why: "",
};

const PHYTM_PAPER_CAVEAT: &str = "phytm-paper reproduces the paper's emulation, in which a hardware commit is \
                                  visible before its log is durable (the paper assumes an xend that persists the \
                                  logged bit): a crash can lose a write that a reader already committed on";

/// Every engine, indexed by its `EngineKind` discriminant (checked at
/// compile time below), so a lookup is one index.
pub const ENGINES: [EngineEntry; 22] = [
    EngineEntry {
        kind: EngineKind::Silo,
        name: "silo",
        code: 1,
        family: Family::Silo,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::None,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::Refused,
        option_groups: &[],
        summary: "Silo-style OCC without durability (DBX-DRAM, the upper bound)",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::GroupCommit,
        name: "group-commit",
        code: 2,
        family: Family::Silo,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::EpochRedoLog,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[],
        summary: "Silo + per-thread redo logs in PM + epoch group commit (DBX-NVM)",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Dbxn,
        name: "dbxn",
        code: 3,
        family: Family::Dbxn,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::SyncLogAfterCommit,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[DBXN_KEYS],
        summary: "DBXN: NVM-friendly synchronous redo log after the commit region, parity versions",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::DbxnNvm,
        name: "dbxn-nvm",
        code: 4,
        family: Family::Dbxn,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::SyncLogAfterCommit,
        storage: StoragePart::DramRecordsPmValues,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[DBXN_KEYS],
        summary: "DBXN plus a PM copy of every written value (DBXN-NVM)",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::DbxNaive,
        name: "dbx-naive",
        code: 5,
        family: Family::Dbxn,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::SyncLogInCommit,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[DBXN_KEYS, DBX_NAIVE_KEYS],
        summary: "DBX-naive: synchronous log inside the commit region, no parity (medium=disk: log in files)",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Zen,
        name: "zen",
        code: 6,
        family: Family::Zen,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::LogFree,
        storage: StoragePart::TupleHeap,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[ZEN_KEYS],
        summary: "Zen: log-free; tuples in a PM heap, Met-Cache and OCC in DRAM",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::ZenNaiveAlloc,
        name: "zen-naive-alloc",
        code: 7,
        family: Family::Zen,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::LogFree,
        storage: StoragePart::TupleHeap,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[ZEN_KEYS],
        summary: "Zen with per-allocation persistence of allocator metadata",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::ZenPlus,
        name: "zen+",
        code: 18,
        family: Family::Zen,
        protocol: ProtocolPart::Configurable,
        cc: CcRule::Only {
            protocol: CcProtocol::Hekaton,
            what: "runs Hekaton's MVCC (its read-only snapshots and exclusive stage are built on it) and takes \
                   cc=hekaton only",
            why: ": its read-only snapshots lie at the oldest running snapshot, which must be below every writer's \
                  commit timestamp (a timestamp-ordering protocol commits at its begin timestamp)",
        },
        durability: DurabilityPart::LogFree,
        storage: StoragePart::TupleHeap,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[ZEN_PLUS_KEYS],
        summary: "Zen+: Zen under Hekaton's MVCC with adaptive execution and NUMA-aware soft partitions",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Sp3,
        name: "sp3",
        code: 8,
        family: Family::Sp3,
        protocol: ProtocolPart::Sp3EarlyRelease,
        cc: SP3_OCC,
        durability: DurabilityPart::Sp3Log,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[],
        summary: "SP^3: OCC releasing its locks before its log is durable, with dependency tracking",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::NvmTx,
        name: "nvm-tx",
        code: 9,
        family: Family::Sp3,
        protocol: ProtocolPart::OccLocksToDurable,
        cc: SP3_OCC,
        durability: DurabilityPart::Sp3Log,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[],
        summary: "SP^3's NVM-TX baseline: locks held until the log is durable",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::NvmIdeal,
        name: "nvm-ideal",
        code: 10,
        family: Family::Sp3,
        protocol: ProtocolPart::None,
        cc: SP3_OCC,
        durability: DurabilityPart::Sp3Log,
        storage: StoragePart::DramRecords,
        serializable: false,
        durability_caveat: None,
        crash_harness: CrashHarness::Refused,
        option_groups: &[],
        summary: "SP^3's NVM-Ideal bound: NVM-TX without concurrency control (not serializable)",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Phytm,
        name: "phytm",
        code: 11,
        family: Family::Hybrid,
        protocol: ProtocolPart::Hybrid,
        cc: HYBRID_CC,
        durability: DurabilityPart::HybridSyncLog,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[HYBRID_KEYS],
        summary: "PHyTM: persistent hybrid TM (fast HTM, slow HTM, STM) with a synchronous redo log",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::PhytmPaper,
        name: "phytm-paper",
        code: 12,
        family: Family::Hybrid,
        protocol: ProtocolPart::Hybrid,
        cc: HYBRID_CC,
        durability: DurabilityPart::HybridSyncLog,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: Some(PHYTM_PAPER_CAVEAT),
        crash_harness: CrashHarness::Refused,
        option_groups: &[HYBRID_KEYS],
        summary: "PHyTM as the paper emulates it (excluded from durability claims)",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Phtm,
        name: "phtm",
        code: 13,
        family: Family::Hybrid,
        protocol: ProtocolPart::GlobalLockHtm,
        cc: HYBRID_CC,
        durability: DurabilityPart::HybridSyncLog,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[HYBRID_KEYS],
        summary: "PHTM, PHyTM's baseline: HTM transactions under one global lock",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::TwoPl,
        name: "2pl",
        code: 14,
        family: Family::Hybrid,
        protocol: ProtocolPart::TwoPhaseLocking,
        cc: HYBRID_CC,
        durability: DurabilityPart::HybridSyncLog,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[HYBRID_KEYS],
        summary: "PHyTM's 2PL baseline: its STM path alone",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::DbxDisk,
        name: "dbx-disk",
        code: 15,
        family: Family::Silo,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::EpochRedoLogOnDisk,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::KillOnly,
        option_groups: &[],
        summary: "DBX-Disk: group commit with its redo log in files, fdatasync per epoch",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Mmdb,
        name: "mmdb",
        code: 16,
        family: Family::Mmdb,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::SyncWal,
        storage: StoragePart::DramThenVolatilePm,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[MMDB_KEYS],
        summary: "The Zen paper's MMDB with NVM capacity: tables in DRAM up to a budget, WAL in PM",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::MmdbIdeal,
        name: "mmdb-ideal",
        code: 19,
        family: Family::Mmdb,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::SyncWal,
        storage: StoragePart::DramRecords,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[],
        summary: "The Zen paper's ideal MMDB: mmdb with the whole database in DRAM",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Wbl,
        name: "wbl",
        code: 17,
        family: Family::Wbl,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::WriteBehind,
        storage: StoragePart::TupleHeap,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[WBL_KEYS],
        summary: "Write-behind logging: versions in Zen's PM heap, one (c_p, c_d) record per window",
        deviations: &[],
    },
    EngineEntry {
        kind: EngineKind::Mnemosyne,
        name: "mnemosyne",
        code: 20,
        family: Family::Ptm,
        protocol: ProtocolPart::TinyStm,
        cc: CcRule::Only {
            protocol: CcProtocol::Silo,
            what: "runs its own TinySTM concurrency control (encounter-time write locks) and takes no cc option",
            why: "",
        },
        durability: DurabilityPart::TornBitRedo,
        storage: StoragePart::PmHomeSlots,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[],
        summary: "Mnemosyne (as SP^3's baseline): PM home slots in place, torn-bit redo log, one fence per commit",
        deviations: MNEMOSYNE_DEVIATIONS,
    },
    EngineEntry {
        kind: EngineKind::Pisces,
        name: "pisces",
        code: 21,
        family: Family::Ptm,
        protocol: ProtocolPart::DualVersion,
        cc: CcRule::Only {
            protocol: CcProtocol::Silo,
            what: "runs its own dual-version concurrency control (snapshot isolation) and takes no cc option",
            why: "",
        },
        durability: DurabilityPart::ThreeStageRedo,
        storage: StoragePart::PmHomeSlots,
        serializable: false,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[],
        summary: "Pisces: snapshot isolation with two versions per row (not serializable: admits write skew), \
                  three-stage commit over PM home slots",
        deviations: PISCES_DEVIATIONS,
    },
    EngineEntry {
        kind: EngineKind::Foedus,
        name: "foedus",
        code: 22,
        family: Family::Silo,
        protocol: ProtocolPart::Configurable,
        cc: SILO_OCC,
        durability: DurabilityPart::EpochRedoLogSnapshots,
        storage: StoragePart::DramPagesOverSnapshot,
        serializable: true,
        durability_caveat: None,
        crash_harness: CrashHarness::SimAndKill,
        option_groups: &[FOEDUS_KEYS],
        summary: "FOEDUS: Silo OCC in DRAM, epoch redo logs in PM, a log gleaner writing 4 KiB snapshot pages to PM",
        deviations: FOEDUS_DEVIATIONS,
    },
];

/// Where `pisces` departs from Gu et al. (docs/engines/pisces.md).
const PISCES_DEVIATIONS: &[&str] = &[
    "built from the paper's abstract and published summaries (full text not consulted): stage order persist, \
     visible, write back; Pisces' reader wait and log format are not modelled",
    "rows, not compiler-instrumented words: a version is a whole row image logged by (table, key)",
    "the redo log is Mnemosyne's torn-bit log (one fence per writing commit); Pisces' own log format is not \
     modelled",
    "the newer version is read from the DRAM record, the older one from a DRAM version store; both reads are \
     charged as NVM reads of the row's home slot (Pisces reads the log entry or the in-place object in NVM)",
    "the write-back runs on the committing worker right after its commit became visible, before the commit \
     returns (plain stores, no flush), not asynchronously; it re-locks each row briefly and skips a row a newer \
     commit replaced; deletes and slot relocations are written at install, under the commit's locks",
    "a writer that would create a third version (a running snapshot still reads the older one) aborts and retries \
     instead of waiting",
    "DRAM indexes and records rebuilt from the home slots at recovery (Pisces keeps all data and indexes in NVM); \
     DRAM-only slot allocator",
    "logs truncated as mnemosyne's, by a background thread after the write-backs were flushed, each log in its own \
     order (recovery's per-slot TID check replaces a global order)",
];

/// Where `foedus` departs from Kimura (SIGMOD 2015) (docs/engines/foedus.md).
const FOEDUS_DEVIATIONS: &[&str] = &[
    "the DRAM budget (cache=) is over rows, not volatile pages, and is a cost model: an evicted row keeps its DRAM \
     record (the authoritative copy), and its next access pays the read of its whole 4 KiB snapshot page from NVM; \
     eviction runs after each snapshot (taken every --checkpoint-s seconds or when the volatile pool is full), and \
     a read while the pool is full leaves the row evicted",
    "a snapshot is a sorted run of 4 KiB pages per table with a directory in a root page, not a tree of \
     intermediate pages; each gleaner run rewrites every page instead of only the pages its log touched",
    "the gleaner partitions by table (one reducer, sequential), not by key range over NUMA nodes; its mappers \
     read the workers' logs in the pool directly, one thread per worker log",
    "the records are Silo's DRAM records and indexes (hash or B+tree), not FOEDUS's Masstree and hash storages \
     with dual pointers",
];

/// Where `mnemosyne` departs from Volos et al. (docs/engines/mnemosyne.md).
const MNEMOSYNE_DEVIATIONS: &[&str] = &[
    "TinySTM over rows: encounter-time write locks per row stripe and a global clock as in the paper, but \
     reads are validated at commit (no LSA extension during the body)",
    "row operations, not compiler-instrumented word accesses: a fragment logs whole row images by (table, key), \
     not (address, value, mask) words",
    "the fragment is written at commit, not during execution",
    "DRAM records and indexes mirror the home slots (reads are charged as NVM reads of the slot) and are rebuilt \
     from them at recovery",
    "DRAM-only slot allocator (Mnemosyne's pmalloc is transactional); slots of deleted rows are reused after a restart",
    "logs truncated asynchronously by a background thread, but each in its own order, not in global sequence order \
     (recovery's per-slot TID check replaces it); a worker whose log is full truncates inline",
];

// `entry` indexes ENGINES by discriminant: a misplaced entry fails the build.
const _: () = {
    let mut index = 0;
    while index < ENGINES.len() {
        assert!(ENGINES[index].kind as usize == index, "ENGINES is not in EngineKind order");
        index += 1;
    }
};

/// The catalog entry of `kind`.
#[inline]
pub const fn entry(kind: EngineKind) -> &'static EngineEntry {
    &ENGINES[kind as usize]
}

/// What a name of the grammar stands for: an engine, or a preset over one.
#[derive(Clone, Copy, Debug)]
pub enum Named {
    /// An engine of [`ENGINES`].
    Engine(&'static EngineEntry),
    /// A preset of [`PRESETS`] (or of the table given to [`lookup_in`]).
    Preset(&'static PresetEntry),
}

impl Named {
    /// The engine it runs.
    pub fn kind(&self) -> EngineKind {
        match self {
            Named::Engine(entry) => entry.kind,
            Named::Preset(preset) => preset.engine,
        }
    }

    /// The name.
    pub fn name(&self) -> &'static str {
        match self {
            Named::Engine(entry) => entry.name,
            Named::Preset(preset) => preset.name,
        }
    }
}

/// What `name` stands for, among the engines and `presets`.
pub fn lookup_in(name: &str, presets: &'static [PresetEntry]) -> Option<Named> {
    ENGINES
        .iter()
        .find(|entry| entry.name == name)
        .map(Named::Engine)
        .or_else(|| presets.iter().find(|preset| preset.name == name).map(Named::Preset))
}

/// What `name` stands for, among the engines and [`PRESETS`].
pub fn lookup(name: &str) -> Option<Named> {
    lookup_in(name, PRESETS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every engine has exactly one entry, and its code is the one pools of
    /// it keep (the codes of the per-property matches this table replaced).
    #[test]
    fn every_engine_has_one_entry_with_its_pinned_code() {
        for kind in EngineKind::ALL {
            assert_eq!(ENGINES.iter().filter(|entry| entry.kind == kind).count(), 1, "{kind:?}");
            assert_eq!(entry(kind).kind, kind);
        }
        assert_eq!(ENGINES.len(), EngineKind::ALL.len());
        let codes: Vec<u64> = EngineKind::ALL.iter().map(|kind| entry(*kind).code).collect();
        assert_eq!(codes, (1..=22).collect::<Vec<u64>>(), "ALL lists the engines in code order");
        let mut names: Vec<&str> = ENGINES.iter().map(|entry| entry.name).collect();
        names.extend(PRESETS.iter().map(|preset| preset.name));
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "names are unique");
    }

    /// The crash harness's column agrees with the properties it follows from.
    #[test]
    fn crash_harness_follows_the_caveats() {
        for entry in &ENGINES {
            let refused = !entry.is_durable()
                || entry.isolation() == Isolation::Uncontrolled
                || entry.durability_caveat.is_some();
            assert_eq!(entry.crash_harness == CrashHarness::Refused, refused, "{}", entry.name);
            let files = matches!(entry.durability, DurabilityPart::EpochRedoLogOnDisk);
            assert_eq!(entry.crash_harness == CrashHarness::KillOnly, files, "{}", entry.name);
        }
        assert_eq!(entry(EngineKind::NvmIdeal).caveats(), ["not serializable"]);
        assert_eq!(entry(EngineKind::Pisces).isolation(), Isolation::Snapshot);
        assert_eq!(entry(EngineKind::Pisces).caveats(), ["not serializable (snapshot isolation: admits write skew)"]);
        assert_eq!(entry(EngineKind::Pisces).crash_harness, CrashHarness::SimAndKill);
        assert_eq!(entry(EngineKind::PhytmPaper).caveats(), ["excluded from durability claims"]);
        assert!(entry(EngineKind::Zen).caveats().is_empty());
    }

    #[test]
    fn option_keys_end_with_the_common_ones() {
        let keys: Vec<&str> = entry(EngineKind::DbxNaive).option_keys().map(|key| key.name).collect();
        assert_eq!(keys, ["nt", "pad64", "align256", "htm", "htm-abort", "medium", "cc"]);
        assert!(entry(EngineKind::Dbxn).option_key("medium").is_none());
        let keys: Vec<&str> = entry(EngineKind::Phytm).option_keys().map(|key| key.name).collect();
        assert_eq!(keys, ["htm", "htm-abort", "cc"]);
    }

    #[test]
    fn a_preset_names_an_engine() {
        static TOY: [PresetEntry; 1] = [PresetEntry {
            name: "test-only-dbxn-preset",
            engine: EngineKind::Dbxn,
            options: &[("nt", "off")],
            summary: "dbxn with ordinary stores",
        }];
        let named = lookup_in("test-only-dbxn-preset", &TOY).unwrap();
        assert_eq!((named.kind(), named.name()), (EngineKind::Dbxn, "test-only-dbxn-preset"));
        assert!(lookup("test-only-dbxn-preset").is_none());
        assert_eq!(lookup("zen").unwrap().kind(), EngineKind::Zen);
    }
}
