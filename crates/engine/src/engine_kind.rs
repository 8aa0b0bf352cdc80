//! Which engine a database runs ([`EngineKind`]), in a module of its own
//! below the engine catalog (`crate::engine_catalog`, an entry per kind),
//! the engine trait (`crate::engine`, which gives the kind its lookups in
//! the catalog) and the fault list (`crate::fault`), so that each of them
//! imports it and none imports another for it.

/// Which engine a database runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
/// Each engine's properties are its entry in the engine catalog
/// (`EngineKind::entry`).
pub enum EngineKind {
    /// Silo-style OCC without durability (the papers' DBX-DRAM upper bound).
    Silo,
    /// Silo + per-thread redo logs in PM + epoch group commit (DBX-NVM).
    GroupCommit,
    /// DBXN: synchronous NVM-friendly redo log per commit, written after
    /// the commit region, with parity (UNPERSISTED) versions.
    Dbxn,
    /// DBXN plus a PM copy of every written value (DBXN-NVM, §4.1.1).
    DbxnNvm,
    /// DBX-naive: synchronous log inside the commit region, no parity.
    DbxNaive,
    /// Zen: log-free; tuples in a PM heap, Met-Cache and OCC in DRAM.
    Zen,
    /// Zen with per-allocation persistence of allocator metadata (Fig. 17).
    ZenNaiveAlloc,
    /// Zen+ (zen-plus.txt §4): Zen under Hekaton's MVCC with adaptive
    /// execution for long-running transactions (read-only snapshots at the
    /// oldest running snapshot, an exclusive stage entered past the
    /// α/β/γ thresholds) and NUMA-aware soft partitions.
    ZenPlus,
    /// SP^3: OCC that releases its locks before its synchronous log is
    /// durable, tracks the transactions it depends on, and acknowledges once
    /// they are durable too (sp3.txt §III).
    Sp3,
    /// SP^3's NVM-TX baseline: the same OCC and log, locks held until the
    /// log is durable.
    NvmTx,
    /// SP^3's NVM-Ideal bound: NVM-TX without concurrency control (no read
    /// validation, write locks held only while installing). **Not
    /// serializable**; the crash harness refuses it.
    NvmIdeal,
    /// PHyTM (phytm.txt): a persistent hybrid TM. Each transaction tries
    /// Fast HTM (uninstrumented reads, subscribed to the STM write-back
    /// count), then Slow HTM (reads check the row's lock), then the STM
    /// path (2PL with try-locks; after its budget, exclusively), all
    /// writing through the shared lock table and a synchronous redo log.
    /// The corrected protocol: no reader commits on a write whose log is
    /// not durable (docs/engines/phytm.md).
    Phytm,
    /// PHyTM as the paper emulates it: the HTM paths' writes are visible
    /// before their log is durable (the paper assumes an `xend` that
    /// persists the logged bit). A labelled variant for measurements,
    /// **excluded from durability claims**; the crash harness refuses it.
    PhytmPaper,
    /// PHTM, PHyTM's baseline: HTM transactions subscribed to one global
    /// lock, and a software path that takes it and runs alone.
    Phtm,
    /// PHyTM's 2PL baseline: its STM path alone (try-locks in encounter
    /// order), with the same log.
    TwoPl,
    /// DBX-Disk (DBXN §2.2, Fig. 3 and 9): `group-commit` with its redo log
    /// on an ordinary file system, made durable with one `fdatasync` per
    /// file and epoch before the durable epoch is published
    /// ([`crate::DbOptions::log_directory`]; checkpoints stay in the pool).
    DbxDisk,
    /// The Zen paper's "MMDB with NVM capacity" baseline (its WAL in PM):
    /// tables and indexes in DRAM up to a DRAM budget
    /// ([`crate::MmdbOptions::dram_bytes`]), the tuples beyond it in a
    /// region of the pool used as *volatile* memory (their reads, their
    /// new versions and the concurrency-control metadata written on them
    /// go to PM); one redo record per transaction written with ordinary
    /// stores, `clwb` and one `sfence` before the commit is acknowledged,
    /// checkpoints, recovery by checkpoint + log replay (the volatile
    /// region is ignored). The same engine as `dbx-naive` with the DBXN
    /// log-write options off (docs/engines/mmdb.md).
    Mmdb,
    /// The Zen paper's "ideal MMDB" (Fig. 19): `mmdb` with the whole
    /// database in DRAM, whatever the budget.
    MmdbIdeal,
    /// Write-behind logging (Arulraj et al., as the Zen paper runs it):
    /// every version in a PM tuple heap (Zen's), persisted at commit, no
    /// redo log of values; a record (c_p, c_d) per group-commit window;
    /// a commit is acknowledged once a record with c_p at or above its
    /// timestamp is durable, and recovery discards every version in
    /// (c_p, c_d].
    Wbl,
    /// Mnemosyne (Volos et al., ASPLOS 2011), as SP^3 runs it as a
    /// baseline: rows in persistent home slots in the pool updated in
    /// place, a per-worker torn-bit redo log made durable by one fence per
    /// writing commit, write-back with plain stores after it, truncation
    /// later; recovery replays the logs over the slots
    /// (docs/engines/mnemosyne.md).
    Mnemosyne,
    /// Pisces (Gu et al., USENIX ATC 2019), as the DBXN paper runs it as a
    /// baseline: dual-version concurrency control (snapshot isolation, at
    /// most two versions per row; **not serializable**: it admits write
    /// skew) and a three-stage commit over Mnemosyne's log and home slots:
    /// the redo log made durable, the versions made visible, then written
    /// back in place (docs/engines/pisces.md).
    Pisces,
    /// FOEDUS (Kimura, SIGMOD 2015), as the Zen paper runs it: Silo's OCC
    /// over DRAM records, per-worker redo logs in PM made durable by epoch
    /// group commit, and a log gleaner that folds the durable log into
    /// immutable 4 KiB snapshot pages in PM instead of checkpointing;
    /// recovery loads the snapshot and replays the log after it
    /// (docs/engines/foedus.md).
    Foedus,
}
