//! The concurrency-control protocols, one file each, behind one trait
//! ([`Protocol`]), and the catalog of them: one macro invocation
//! (`protocols!` below) that lists every protocol on one line and
//! generates the public [`CcProtocol`] (names, `ALL`, parse, isolation),
//! the enum of their shared states ([`SharedState`]), the enum of their
//! per-worker states ([`ProtocolTx`]) and the `match` that calls a hook of
//! the protocol a worker runs. No hook is called through `dyn`: a hook is
//! one `match` on the worker's protocol, and small hooks inline.
//!
//! # Hooks
//!
//! The transaction state (`cc::transaction::TxState`: read, write and node
//! sets, scans, secondary indexes) is written once and calls, in order
//! (the hooks that check the attempt get its sets, `cc::tx_sets::TxSets`,
//! not the transaction state, which imports this module):
//!
//! * `begin` when an attempt starts (a timestamp, a snapshot, a path);
//! * `access_key` / `access_range` before a point access or a scan touches
//!   the index (`hstore`'s partition locks, PHyTM's path check);
//! * `read` before a row is read (a shared lock, a read timestamp) and
//!   `version_at` after (the version a snapshot sees instead);
//! * `write` when a write is buffered (an exclusive lock, or a refusal);
//! * at commit, `lock` (the write set's row locks, in address order), then
//!   `validate` for a read-only attempt, or `commit_timestamp` for a
//!   writing one: it validates and picks the commit's timestamp in the
//!   order the protocol needs (Silo validates, then picks; TicToc picks,
//!   then validates at it; timestamp ordering commits at its own);
//! * `abort` when the attempt ends, committed or not (releases its locks,
//!   path and snapshot), then `finish` (collects what the attempt kept).
//!
//! # Adding a protocol
//!
//! Write `protocols/NAME.rs` with a worker-state type implementing
//! [`Protocol`] (overriding the hooks it needs; its `Shared` type holds its
//! side tables) and [`Named`] (its isolation text and how its shared state
//! is built), then add one line to the list in `protocols!`'s invocation
//! below: `Variant = "cli-name" => module::Type,` (the line declares the
//! module too).
//!
//! Explained in docs/concurrency.md ("Concurrency-control protocols").

use crate::cc::tx_sets::TxSets;
use crate::cc::versions::VersionStore;
use crate::cc::write_set::WriteSet;
use crate::error::{AbortReason, DbError, DbResult};
use crate::schema::TableId;
use crate::storage::record::RowKind;
use crate::storage::request::ScanRequest;
use crate::storage::table::Table;
use parking_lot::MutexGuard;

// What families of protocols share; each protocol's own file is declared
// by its line in the catalog below. The commit rules (`commit_rule`, with
// SP^3's early release in `sp3` and NVM-Ideal's `none`) are chosen by the
// engine, not by `cc=`.
pub(crate) mod commit_rule;
pub(crate) mod multi_version;
pub(crate) mod none;
pub(crate) mod sp3;
pub(crate) mod timestamp_order;
pub(crate) mod two_phase;

/// Most workers a locking protocol serves (`cc::lock_table`).
pub(crate) use crate::cc::lock_table::MAX_LOCKING_WORKERS;

/// The bounds a writing attempt's commit timestamp respects.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TidBounds {
    /// The largest TID of the rows it overwrites (seen when locking them).
    pub(crate) max_locked: u64,
    /// The worker's last TID.
    pub(crate) floor: u64,
    /// The epoch it commits in: the TID lies in it or later (the
    /// durability schemes order and acknowledge by it).
    pub(crate) epoch: u64,
}

/// One protocol: a worker's state for it (`Self`), the state its workers
/// share (`Shared`: its side tables), and its hooks. Every hook has the
/// behaviour of a protocol that needs nothing there (Silo's) by default.
pub(crate) trait Protocol: Sized + Send {
    /// The state the engine's workers share (lock table, read timestamps,
    /// versions, ...), built once per engine.
    type Shared: Send + Sync;

    /// The state of worker `worker`.
    fn worker(shared: &Self::Shared, worker: usize) -> Self;

    /// The critical section a commit holds from validation to the end of
    /// its write phase (`occ`'s serial validation).
    fn serial_section(shared: &Self::Shared) -> Option<MutexGuard<'_, ()>> {
        let _ = shared;
        None
    }

    /// Whether reclamation may unlink the row at `address` whose delete
    /// committed at `tid`, as far as the protocol is concerned (no lock
    /// covers it; no snapshot still reads it).
    fn may_unlink(shared: &Self::Shared, address: usize, tid: u64) -> bool {
        let _ = (shared, address, tid);
        true
    }

    /// The older versions (multi-version protocols).
    fn versions(shared: &Self::Shared) -> Option<&VersionStore> {
        let _ = shared;
        None
    }

    /// Starts attempt `attempt` (1 for a new transaction) in `epoch`.
    #[inline]
    fn begin(&mut self, attempt: u32, epoch: u64) {
        let _ = (attempt, epoch);
    }

    /// Starts a read-only attempt at the oldest running snapshot (`zen+`).
    fn begin_oldest_snapshot(&mut self) {
        no_oldest_snapshot()
    }

    /// Ends the attempt, committed or not: releases its locks, path and
    /// snapshot. Also the first step of every `begin`.
    #[inline]
    fn abort(&mut self) {}

    /// Releases the attempt's lock-table locks now (a broken variant of
    /// the crash harness's self-test releases them before its log).
    #[inline]
    fn release_locks(&mut self) {}

    /// Before a point access to `key` of table `table` (whose keys name
    /// their partition by their first `partition_prefix` bytes).
    #[inline]
    fn access_key(&mut self, table: TableId, partition_prefix: Option<usize>, key: &[u8]) -> Result<(), AbortReason> {
        let _ = (table, partition_prefix, key);
        Ok(())
    }

    /// Before a scan of `request` (same prefix as `access_key`).
    #[inline]
    fn access_range(&mut self, partition_prefix: Option<usize>, request: &ScanRequest<'_>) -> Result<(), AbortReason> {
        let _ = (partition_prefix, request);
        Ok(())
    }

    /// Before a read of the row at `address`, after `accesses` rows were
    /// read or written by the attempt.
    #[inline]
    fn read(&mut self, accesses: usize, address: usize) -> Result<(), AbortReason> {
        let _ = (accesses, address);
        Ok(())
    }

    /// After a read of the row at `address` found `word`: the version the
    /// attempt sees instead (its word; its value written to `out`), or
    /// `None` for the one read.
    #[inline]
    fn version_at(&self, address: usize, word: u64, out: &mut Vec<u8>) -> Option<u64> {
        let _ = (address, word, out);
        None
    }

    /// The timestamp a scan raises the read timestamps of its leaves to,
    /// as it scans them.
    #[inline]
    fn scan_read_ts(&self) -> Option<u64> {
        None
    }

    /// Before a write of the row at `address` (whose word is `word`) is
    /// buffered, after `accesses` rows were read or written.
    #[inline]
    fn write(&mut self, accesses: usize, address: usize, word: u64) -> Result<(), AbortReason> {
        let _ = (accesses, address, word);
        Ok(())
    }

    /// Locks the write set at commit; the largest TID of the rows locked.
    #[inline]
    fn lock<R: RowKind>(&mut self, writes: &mut WriteSet<R>) -> Result<u64, AbortReason> {
        writes.lock_rows()
    }

    /// Silo's validation as the protocol runs it: the read set (unless the
    /// protocol's locks keep it valid) and the node set.
    fn validate_reads<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        tx.validate_reads()?;
        tx.validate_leaves(tables)
    }

    /// Validates a read-only attempt.
    fn validate<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        self.validate_reads(tx, tables)
    }

    /// Validates a writing attempt whose write set is locked and picks its
    /// commit timestamp (TID) within `bounds`.
    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        self.validate_reads(tx, tables)?;
        Ok(tx.commit_tid(bounds.max_locked, bounds.floor, bounds.epoch))
    }

    /// The attempt's snapshot (multi-version protocols).
    #[inline]
    fn snapshot(&mut self) -> Option<&mut multi_version::Snapshot> {
        None
    }

    /// After `abort`: collects what the attempt kept (older versions no
    /// snapshot needs, with their stale secondary entries in `tables`).
    #[inline]
    fn finish<R: RowKind>(&mut self, tables: &[Table<R>]) {
        let _ = tables;
    }
}

/// `begin_oldest_snapshot` under a protocol that has no such snapshot
/// (every one but `hekaton`).
pub(crate) fn no_oldest_snapshot() -> ! {
    panic!("snapshot reads need a multi-version protocol");
}

/// A protocol chosen by name (`--engine ENGINE:cc=NAME`).
pub(crate) trait Named: Protocol {
    /// The isolation a transaction gets, on every engine that validates,
    /// and what a read-only transaction reads ([`CcProtocol::isolation`]).
    const ISOLATION: &'static str;
    /// Whether it takes locks in the lock table (rows or partitions).
    const USES_LOCK_TABLE: bool = false;
    /// Whether it is one of the two-phase-locking family.
    const LOCKS_ROWS: bool = false;
    /// Whether a transaction reads and commits at a timestamp taken at
    /// begin.
    const TIMESTAMP_ORDERED: bool = false;
    /// Whether it reads older versions at a snapshot.
    const MULTIVERSION: bool = false;

    /// The shared state for `workers` workers.
    fn shared(workers: usize) -> Self::Shared;
}

/// The catalog: `named` lists the protocols `cc=NAME` chooses, `hybrid` the
/// schemes an engine chooses itself (the PHyTM family's paths, `mnemosyne`'s
/// TinySTM, `pisces`' DVCC). Each line
/// also declares the protocol's module (`protocols/MODULE.rs`).
macro_rules! protocols {
    (
        // `$` itself, for the transcriber of the nested `dispatch!`.
        $d:tt
        named { $($variant:ident = $name:literal => $module:ident :: $ty:ident,)* }
        hybrid { $($hvariant:ident => $hmodule:ident :: $hty:ident,)* }
    ) => {
        $(pub(crate) mod $module;)*
        $(pub(crate) mod $hmodule;)*

        /// A concurrency-control protocol (the ten of the Zen paper's
        /// Fig. 22), chosen by the `cc` engine option; each is described in
        /// its file under `cc/protocols/`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum CcProtocol {
            $(
                #[doc = concat!("`cc=", $name, "` (`cc/protocols/", stringify!($module), ".rs`).")]
                $variant,
            )*
        }

        impl CcProtocol {
            /// Every protocol.
            pub const ALL: [CcProtocol; [$($name),*].len()] = [$(CcProtocol::$variant),*];

            /// Stable name, as in `--engine zen:cc=NAME`.
            pub fn name(self) -> &'static str {
                match self {
                    $(CcProtocol::$variant => $name,)*
                }
            }

            /// The isolation a transaction gets under the protocol, on every
            /// engine that validates (all but `nvm-ideal`), and what a
            /// read-only transaction reads: the README's isolation table in
            /// one line.
            pub fn isolation(self) -> &'static str {
                match self {
                    $(CcProtocol::$variant => <$module::$ty as Named>::ISOLATION,)*
                }
            }

            /// Whether the protocol takes locks in the lock table (rows, or
            /// `hstore`'s partitions).
            pub fn uses_lock_table(self) -> bool {
                match self {
                    $(CcProtocol::$variant => <$module::$ty as Named>::USES_LOCK_TABLE,)*
                }
            }

            /// Whether a transaction reads and commits at a timestamp taken
            /// at begin (timestamp ordering).
            pub fn is_timestamp_ordered(self) -> bool {
                match self {
                    $(CcProtocol::$variant => <$module::$ty as Named>::TIMESTAMP_ORDERED,)*
                }
            }

            /// Whether the protocol reads older versions at a snapshot.
            pub fn is_multiversion(self) -> bool {
                match self {
                    $(CcProtocol::$variant => <$module::$ty as Named>::MULTIVERSION,)*
                }
            }

            /// Whether the protocol is one of the two-phase-locking family.
            pub fn is_locking(self) -> bool {
                match self {
                    $(CcProtocol::$variant => <$module::$ty as Named>::LOCKS_ROWS,)*
                }
            }

            /// The protocol's shared state for `workers` workers.
            pub(crate) fn shared_state(self, workers: usize) -> SharedState {
                match self {
                    $(CcProtocol::$variant => SharedState::$variant(<$module::$ty as Named>::shared(workers)),)*
                }
            }
        }

        /// The shared state of the protocol an engine runs.
        pub(crate) enum SharedState {
            $($variant(<$module::$ty as Protocol>::Shared),)*
            $($hvariant(<$hmodule::$hty as Protocol>::Shared),)*
        }

        impl SharedState {
            /// The state of worker `worker`.
            pub(crate) fn worker(&self, worker: usize) -> ProtocolTx {
                match self {
                    $(SharedState::$variant(shared) => ProtocolTx::$variant(<$module::$ty>::worker(shared, worker)),)*
                    $(SharedState::$hvariant(shared) => ProtocolTx::$hvariant(<$hmodule::$hty>::worker(shared, worker)),)*
                }
            }

            /// See [`Protocol::serial_section`].
            pub(crate) fn serial_section(&self) -> Option<MutexGuard<'_, ()>> {
                match self {
                    $(SharedState::$variant(shared) => <$module::$ty>::serial_section(shared),)*
                    $(SharedState::$hvariant(shared) => <$hmodule::$hty>::serial_section(shared),)*
                }
            }

            /// See [`Protocol::may_unlink`].
            pub(crate) fn may_unlink(&self, address: usize, tid: u64) -> bool {
                match self {
                    $(SharedState::$variant(shared) => <$module::$ty>::may_unlink(shared, address, tid),)*
                    $(SharedState::$hvariant(shared) => <$hmodule::$hty>::may_unlink(shared, address, tid),)*
                }
            }

            /// See [`Protocol::versions`].
            pub(crate) fn versions(&self) -> Option<&VersionStore> {
                match self {
                    $(SharedState::$variant(shared) => <$module::$ty>::versions(shared),)*
                    $(SharedState::$hvariant(shared) => <$hmodule::$hty>::versions(shared),)*
                }
            }
        }

        /// One worker's state of the protocol its engine runs; each method
        /// calls the hook of [`Protocol`] of the same name.
        pub(crate) enum ProtocolTx {
            $($variant($module::$ty),)*
            $($hvariant($hmodule::$hty),)*
        }

        /// Calls `$call` on the worker's protocol state bound to `$p`.
        macro_rules! dispatch {
            ($d value:expr, $d p:ident => $d call:expr) => {
                match $d value {
                    $(ProtocolTx::$variant($d p) => $d call,)*
                    $(ProtocolTx::$hvariant($d p) => $d call,)*
                }
            };
        }
    };
}

protocols! {
    $
    named {
        Silo = "silo" => silo::Silo,
        Occ = "occ" => occ::Occ,
        TicToc = "tictoc" => tictoc::TicToc,
        NoWait = "no-wait" => no_wait::NoWait,
        WaitDie = "wait-die" => wait_die::WaitDie,
        DlDetect = "dl-detect" => dl_detect::DlDetect,
        Mvcc = "mvcc" => mvcc::Mvcc,
        Hekaton = "hekaton" => hekaton::Hekaton,
        Cicada = "cicada" => cicada::Cicada,
        HStore = "hstore" => hstore::HStore,
    }
    hybrid {
        Phytm => phytm::Phytm,
        TinyStm => tinystm::TinyStm,
        Dvcc => dvcc::Dvcc,
    }
}

impl Default for CcProtocol {
    /// Silo: what every engine ran before protocols became an option.
    fn default() -> Self {
        CcProtocol::Silo
    }
}

impl CcProtocol {
    /// Parses a protocol name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|protocol| protocol.name() == name)
    }

    /// Refuses a worker count the protocol cannot serve.
    pub(crate) fn check(self, workers: usize) -> DbResult<()> {
        if self.uses_lock_table() && workers > MAX_LOCKING_WORKERS {
            return Err(DbError::InvalidConfig(format!(
                "cc={} keeps lock holders as a bit per worker and serves at most {} workers, got {workers}",
                self.name(),
                MAX_LOCKING_WORKERS
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for CcProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl ProtocolTx {
    /// See [`Protocol::begin`].
    #[inline]
    pub(crate) fn begin(&mut self, attempt: u32, epoch: u64) {
        dispatch!(self, p => p.begin(attempt, epoch))
    }

    /// See [`Protocol::begin_oldest_snapshot`].
    pub(crate) fn begin_oldest_snapshot(&mut self) {
        dispatch!(self, p => p.begin_oldest_snapshot())
    }

    /// See [`Protocol::abort`].
    #[inline]
    pub(crate) fn abort(&mut self) {
        dispatch!(self, p => p.abort())
    }

    /// See [`Protocol::release_locks`].
    #[inline]
    pub(crate) fn release_locks(&mut self) {
        dispatch!(self, p => p.release_locks())
    }

    /// See [`Protocol::access_key`].
    #[inline]
    pub(crate) fn access_key(
        &mut self,
        table: TableId,
        partition_prefix: Option<usize>,
        key: &[u8],
    ) -> Result<(), AbortReason> {
        dispatch!(self, p => p.access_key(table, partition_prefix, key))
    }

    /// See [`Protocol::access_range`].
    #[inline]
    pub(crate) fn access_range(
        &mut self,
        partition_prefix: Option<usize>,
        request: &ScanRequest<'_>,
    ) -> Result<(), AbortReason> {
        dispatch!(self, p => p.access_range(partition_prefix, request))
    }

    /// See [`Protocol::read`].
    #[inline]
    pub(crate) fn read(&mut self, accesses: usize, address: usize) -> Result<(), AbortReason> {
        dispatch!(self, p => p.read(accesses, address))
    }

    /// See [`Protocol::version_at`].
    #[inline]
    pub(crate) fn version_at(&self, address: usize, word: u64, out: &mut Vec<u8>) -> Option<u64> {
        dispatch!(self, p => p.version_at(address, word, out))
    }

    /// See [`Protocol::scan_read_ts`].
    #[inline]
    pub(crate) fn scan_read_ts(&self) -> Option<u64> {
        dispatch!(self, p => p.scan_read_ts())
    }

    /// See [`Protocol::write`].
    #[inline]
    pub(crate) fn write(&mut self, accesses: usize, address: usize, word: u64) -> Result<(), AbortReason> {
        dispatch!(self, p => p.write(accesses, address, word))
    }

    /// See [`Protocol::lock`].
    #[inline]
    pub(crate) fn lock<R: RowKind>(&mut self, writes: &mut WriteSet<R>) -> Result<u64, AbortReason> {
        dispatch!(self, p => p.lock(writes))
    }

    /// See [`Protocol::validate_reads`].
    pub(crate) fn validate_reads<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        dispatch!(self, p => p.validate_reads(tx, tables))
    }

    /// See [`Protocol::validate`].
    pub(crate) fn validate<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        dispatch!(self, p => p.validate(tx, tables))
    }

    /// See [`Protocol::commit_timestamp`].
    pub(crate) fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        dispatch!(self, p => p.commit_timestamp(tx, tables, bounds))
    }

    /// See [`Protocol::snapshot`].
    #[inline]
    pub(crate) fn snapshot(&mut self) -> Option<&mut multi_version::Snapshot> {
        dispatch!(self, p => p.snapshot())
    }

    /// See [`Protocol::finish`].
    #[inline]
    pub(crate) fn finish<R: RowKind>(&mut self, tables: &[Table<R>]) {
        dispatch!(self, p => p.finish(tables))
    }

    /// The PHyTM family's state of this worker, when it runs one.
    #[inline]
    pub(crate) fn hybrid(&mut self) -> Option<&mut phytm::Phytm> {
        match self {
            ProtocolTx::Phytm(phytm) => Some(phytm),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_protocol_has_a_name_that_parses() {
        for protocol in CcProtocol::ALL {
            assert_eq!(CcProtocol::parse(protocol.name()), Some(protocol));
            assert!(protocol.check(4).is_ok());
        }
        assert_eq!(CcProtocol::parse("2pl"), None);
        assert!(CcProtocol::NoWait.check(64).is_err());
    }

    #[test]
    fn the_catalog_keeps_the_names_order_and_families() {
        use CcProtocol::*;
        let names: Vec<&str> = CcProtocol::ALL.iter().map(|protocol| protocol.name()).collect();
        assert_eq!(
            names,
            ["silo", "occ", "tictoc", "no-wait", "wait-die", "dl-detect", "mvcc", "hekaton", "cicada", "hstore"]
        );
        assert_eq!(CcProtocol::default(), Silo);
        let family =
            |test: fn(CcProtocol) -> bool| CcProtocol::ALL.into_iter().filter(|p| test(*p)).collect::<Vec<_>>();
        assert_eq!(family(CcProtocol::is_locking), [NoWait, WaitDie, DlDetect]);
        assert_eq!(family(CcProtocol::uses_lock_table), [NoWait, WaitDie, DlDetect, HStore]);
        assert_eq!(family(CcProtocol::is_multiversion), [Mvcc, Hekaton, Cicada]);
        assert_eq!(family(CcProtocol::is_timestamp_ordered), [Mvcc, Cicada]);
        assert!(Hekaton.isolation().contains("never abort"));
        assert_eq!(Silo.isolation(), TicToc.isolation());
    }
}
