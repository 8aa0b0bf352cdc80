//! Errors and aborts.
//!
//! An abort is a normal outcome of concurrency control and is retried by the
//! worker; a user rollback is its own outcome; everything else (I/O,
//! corruption, out of space, bad input) is a [`DbError`] and ends the
//! transaction. Real bugs panic.

use pmtx_pm::{PoolError, Structure};

/// Why a transaction attempt aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AbortReason {
    /// A record in the read set changed or is locked by another writer.
    ReadValidation,
    /// A scanned index leaf changed (insert, delete or split): a phantom.
    NodeValidation,
    /// A record to be written was locked and the lock could not be taken.
    WriteLock,
    /// A record read was installed but its log not yet durable (DBXN's odd
    /// version), and still was at validation.
    NotYetDurable,
    /// The hardware or simulated transactional region gave up.
    Region,
    /// A lock of a lock-based protocol could not be taken (no-wait / try-lock).
    LockConflict,
    /// A read saw a record that was being written and could not get a stable
    /// snapshot.
    UnstableRead,
    /// Waiting for a lock would have closed a cycle of waits (`dl-detect`).
    Deadlock,
    /// A lock wait passed its time bound.
    LockTimeout,
    /// Timestamp ordering refused an access: a transaction with a later
    /// timestamp already read or wrote the row, or the transaction's
    /// timestamp fell out of the current epoch.
    TimestampOrder,
    /// A hardware (or simulated hardware) transaction's footprint did not
    /// fit (PHyTM's and PHTM's hardware paths).
    HtmCapacity,
    /// Another transaction runs in `zen+`'s exclusive stage (it holds the
    /// G-EX flag): every other transaction that is not yet committing
    /// aborts and retries once the stage is over.
    Exclusive,
}

impl AbortReason {
    /// Every reason, for reports.
    pub const ALL: [AbortReason; 12] = [
        AbortReason::ReadValidation,
        AbortReason::NodeValidation,
        AbortReason::WriteLock,
        AbortReason::NotYetDurable,
        AbortReason::Region,
        AbortReason::LockConflict,
        AbortReason::UnstableRead,
        AbortReason::Deadlock,
        AbortReason::LockTimeout,
        AbortReason::TimestampOrder,
        AbortReason::HtmCapacity,
        AbortReason::Exclusive,
    ];

    /// Stable short name.
    pub fn name(self) -> &'static str {
        match self {
            AbortReason::ReadValidation => "read_validation",
            AbortReason::NodeValidation => "node_validation",
            AbortReason::WriteLock => "write_lock",
            AbortReason::NotYetDurable => "not_yet_durable",
            AbortReason::Region => "region",
            AbortReason::LockConflict => "lock_conflict",
            AbortReason::UnstableRead => "unstable_read",
            AbortReason::Deadlock => "deadlock",
            AbortReason::LockTimeout => "lock_timeout",
            AbortReason::TimestampOrder => "timestamp_order",
            AbortReason::HtmCapacity => "htm_capacity",
            AbortReason::Exclusive => "exclusive",
        }
    }

    /// The reason of [`AbortReason::index`] `index`.
    pub fn from_index(index: usize) -> Option<Self> {
        AbortReason::ALL.get(index).copied()
    }

    /// Dense index into per-reason counters.
    pub fn index(self) -> usize {
        AbortReason::ALL.iter().position(|r| *r == self).expect("listed")
    }
}

impl std::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors that end a transaction (not retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// The persistent-memory pool failed or is damaged.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The pool file does not exist and the options do not say to create
    /// it ([`crate::DbOptions::create_if_missing`]).
    #[error("pool file {} does not exist (set DbOptions::create_if_missing to create a new pool)", path.display())]
    PoolNotFound {
        /// The path given.
        path: std::path::PathBuf,
    },
    /// No table of that name or id.
    #[error("unknown table {0}")]
    UnknownTable(String),
    /// No secondary index of that name on the table.
    #[error("table {table}: unknown secondary index {index}")]
    UnknownIndex {
        /// Table name.
        table: String,
        /// Index name.
        index: String,
    },
    /// A value longer than the table allows.
    #[error("table {table}: value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge {
        /// Table name.
        table: String,
        /// Value length.
        len: usize,
        /// The schema's limit.
        max: usize,
    },
    /// A key longer than the index allows.
    #[error("table {table}: key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLong {
        /// Table name.
        table: String,
        /// Key length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The pool (or, for a log kept in files, the file system) has no space
    /// left for logs, checkpoints or data.
    #[error("out of space: {0}")]
    OutOfSpace(String),
    /// A redo log kept in files (`dbx-disk`, `dbx-naive` with
    /// `medium=disk`) could not be created, written, synced or read.
    #[error("redo log file {path}: cannot {operation}: {source}")]
    LogFile {
        /// The file or directory.
        path: String,
        /// What failed ("create", "sync (fdatasync)", ...).
        operation: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Persistent structures are inconsistent.
    #[error("corrupt database: {0}")]
    Corrupt(String),
    /// A persistent structure is damaged (a checksum mismatch, an
    /// impossible value, a root missing that the pool's contents need):
    /// the typed form of `Corrupt`, naming the structure.
    #[error("corrupt database: {structure} is damaged: {detail}")]
    CorruptStructure {
        /// Which structure.
        structure: Structure,
        /// What is wrong.
        detail: String,
    },
    /// Retries exhausted.
    #[error("transaction aborted {attempts} times (last reason: {last}); giving up")]
    TooManyAborts {
        /// Attempts made.
        attempts: u32,
        /// Reason of the last abort.
        last: AbortReason,
    },
    /// An option or schema is invalid.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The pool holds a database of another schema or engine.
    #[error("schema mismatch: {0}")]
    SchemaMismatch(String),
    /// A [`crate::Worker`] of this id exists already: a worker owns its
    /// slot's log tail and epoch announcement, so two at once would corrupt
    /// them. Drop the first one before taking the id again.
    #[error("worker {0} is in use: drop that worker before taking worker {0} again")]
    WorkerInUse(usize),
    /// [`crate::Database::run`] found every worker slot held (by explicit
    /// [`crate::Worker`]s or by other threads' transactions) for the whole
    /// of [`crate::DbOptions::worker_wait`].
    #[error("all {workers} worker slots stayed in use for {waited:?}; open the database with more workers or a longer worker_wait")]
    NoFreeWorker {
        /// The configured number of worker slots.
        workers: usize,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// A periodic checkpoint failed on the background thread (returned
    /// once, to the next transaction or to `close`; the database stays
    /// usable and a later checkpoint frees the log as well).
    #[error("a periodic checkpoint failed: {0}")]
    CheckpointFailed(#[source] Box<DbError>),
    /// A background thread of the engine (epoch ticker, checkpointer,
    /// `wbl`'s window) panicked: epochs or checkpoints stopped, so every
    /// later transaction fails; `close` marks no clean shutdown and the
    /// next open recovers.
    #[error("background thread {thread} panicked ({message}); reopen the database to recover")]
    BackgroundPanic {
        /// The thread's name.
        thread: String,
        /// The panic message.
        message: String,
    },
    /// The database was poisoned by an earlier persistence failure.
    #[error("database is unusable after an earlier failure: {0}")]
    Poisoned(String),
    /// The database was closed or crashed while the call waited (for
    /// durability, say): the outcome of the waited-for commit is unknown
    /// until the pool is recovered.
    #[error("the database was closed or crashed while waiting; the commit is not known to be durable")]
    Closed,
    /// A step of an [`crate::OpenTransaction`] that has ended: committed,
    /// rolled back, or ended by an error. Begin a new transaction.
    #[error("the transaction has ended ({0}); begin a new one")]
    TransactionEnded(&'static str),
    /// A replicated commit was refused before it committed (this node does
    /// not lead: `committed` false) or committed here but could not be
    /// replicated (`committed` true: its outcome is unknown, and it is not
    /// acknowledged). Raised by pmtx-replica's commit hook.
    #[error("{detail}")]
    Replication {
        /// What happened, naming the leader where one is known.
        detail: String,
        /// Whether the transaction committed on this node.
        committed: bool,
    },
}

impl DbError {
    /// A `CorruptStructure` error.
    pub fn corrupt(structure: Structure, detail: impl Into<String>) -> Self {
        DbError::CorruptStructure { structure, detail: detail.into() }
    }

    /// The damaged structure, if this error says the pool (or its log
    /// files) is damaged: `CorruptStructure`, or a pool error naming one.
    pub fn damaged_structure(&self) -> Option<Structure> {
        match self {
            DbError::CorruptStructure { structure, .. } => Some(*structure),
            DbError::Pool(error) => error.damaged_structure(),
            _ => None,
        }
    }
}

impl From<std::convert::Infallible> for DbError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// What ends one attempt of a transaction body.
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// Concurrency-control abort: the worker retries.
    #[error("aborted: {0}")]
    Abort(AbortReason),
    /// The body asked to roll back (e.g. TPC-C NewOrder's 1%): not retried.
    #[error("rolled back by the transaction")]
    Rollback,
    /// A real error: not retried.
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<PoolError> for TxError {
    fn from(error: PoolError) -> Self {
        TxError::Db(DbError::Pool(error))
    }
}

/// Result of one transaction operation.
pub type TxResult<T> = Result<T, TxError>;
/// Result of database-level operations.
pub type DbResult<T> = Result<T, DbError>;

/// The message of a panic's `payload` (a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}
