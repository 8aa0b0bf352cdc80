//! Status codes, the per-thread error message, and the guard every entry
//! point runs its work in (no Rust panic crosses into C).

use pmtx_engine::{DbError, TxError};
use pmtx_pm::PoolError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

/// What a call did. Zero and positive codes are outcomes (the call worked);
/// negative codes are errors, and `pmtx_errmsg()` then says what failed.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum pmtx_status {
    /// Done.
    PMTX_OK = 0,
    /// The key is absent (get, update, delete).
    PMTX_NOT_FOUND = 1,
    /// The key exists already (insert).
    PMTX_EXISTS = 2,
    /// Rolled back: what a `pmtx_run` body returns to roll back, and what
    /// `pmtx_run` then returns.
    PMTX_ROLLBACK = 3,
    /// A conflict with a concurrent transaction aborted the attempt: call
    /// `pmtx_txn_retry` and run the transaction's steps again (`pmtx_run`
    /// retries by itself).
    PMTX_CONFLICT = 4,
    /// The iterator has no more rows.
    PMTX_END = 5,
    /// A null pointer, a bad length, or invalid options.
    PMTX_ERR_ARGUMENT = -1,
    /// The pool file does not exist (and `PMTX_CREATE` was not given).
    PMTX_ERR_POOL_NOT_FOUND = -2,
    /// The pool holds another engine or other tables than the options say.
    PMTX_ERR_SCHEMA_MISMATCH = -3,
    /// No table of that name or id.
    PMTX_ERR_UNKNOWN_TABLE = -4,
    /// The key is longer than the table's `max_key_len`.
    PMTX_ERR_KEY_TOO_LONG = -5,
    /// The value is longer than the table's `max_value_len`.
    PMTX_ERR_VALUE_TOO_LARGE = -6,
    /// The caller's buffer is shorter than the value (its length is
    /// reported; the transaction goes on).
    PMTX_ERR_BUFFER_TOO_SMALL = -7,
    /// The pool (or the log's file system) is full.
    PMTX_ERR_OUT_OF_SPACE = -8,
    /// The pool is damaged.
    PMTX_ERR_CORRUPT = -9,
    /// The file is not a pmtx pool, or one of another format version.
    PMTX_ERR_FORMAT = -10,
    /// The transaction conflicted on every one of its attempts
    /// (`max_attempts` of the engine) and gave up.
    PMTX_ERR_TOO_MANY_ABORTS = -11,
    /// The transaction has ended (committed, rolled back, or ended by an
    /// error): begin a new one.
    PMTX_ERR_ENDED = -12,
    /// The database was closed.
    PMTX_ERR_CLOSED = -13,
    /// A transaction or iterator used from a thread other than the one that
    /// began it.
    PMTX_ERR_WRONG_THREAD = -14,
    /// The database is in use: `pmtx_close` with transactions running, or
    /// every worker slot stayed taken.
    PMTX_ERR_BUSY = -15,
    /// Another process has the pool open.
    PMTX_ERR_LOCKED = -16,
    /// An input/output error of the operating system.
    PMTX_ERR_IO = -17,
    /// A call that is not allowed here: a write in a read-only transaction,
    /// committing or freeing the transaction a `pmtx_run` body was given,
    /// scanning a hash table.
    PMTX_ERR_MISUSE = -18,
    /// The database cannot go on (an earlier persistence failure, or its
    /// background work failed): close it and open it again to recover.
    PMTX_ERR_FAILED = -19,
    /// A bug in pmtx was caught at the interface (please report it with the
    /// message); the handle involved should be closed or freed.
    PMTX_ERR_INTERNAL = -20,
}

use pmtx_status::*;

/// Every status, for name lookups and tests.
pub(crate) const ALL_STATUSES: [pmtx_status; 26] = [
    PMTX_OK,
    PMTX_NOT_FOUND,
    PMTX_EXISTS,
    PMTX_ROLLBACK,
    PMTX_CONFLICT,
    PMTX_END,
    PMTX_ERR_ARGUMENT,
    PMTX_ERR_POOL_NOT_FOUND,
    PMTX_ERR_SCHEMA_MISMATCH,
    PMTX_ERR_UNKNOWN_TABLE,
    PMTX_ERR_KEY_TOO_LONG,
    PMTX_ERR_VALUE_TOO_LARGE,
    PMTX_ERR_BUFFER_TOO_SMALL,
    PMTX_ERR_OUT_OF_SPACE,
    PMTX_ERR_CORRUPT,
    PMTX_ERR_FORMAT,
    PMTX_ERR_TOO_MANY_ABORTS,
    PMTX_ERR_ENDED,
    PMTX_ERR_CLOSED,
    PMTX_ERR_WRONG_THREAD,
    PMTX_ERR_BUSY,
    PMTX_ERR_LOCKED,
    PMTX_ERR_IO,
    PMTX_ERR_MISUSE,
    PMTX_ERR_FAILED,
    PMTX_ERR_INTERNAL,
];

impl pmtx_status {
    /// The code's name as a NUL-terminated string (`"PMTX_OK"`, ...).
    pub fn name(self) -> &'static CStr {
        match self {
            PMTX_OK => c"PMTX_OK",
            PMTX_NOT_FOUND => c"PMTX_NOT_FOUND",
            PMTX_EXISTS => c"PMTX_EXISTS",
            PMTX_ROLLBACK => c"PMTX_ROLLBACK",
            PMTX_CONFLICT => c"PMTX_CONFLICT",
            PMTX_END => c"PMTX_END",
            PMTX_ERR_ARGUMENT => c"PMTX_ERR_ARGUMENT",
            PMTX_ERR_POOL_NOT_FOUND => c"PMTX_ERR_POOL_NOT_FOUND",
            PMTX_ERR_SCHEMA_MISMATCH => c"PMTX_ERR_SCHEMA_MISMATCH",
            PMTX_ERR_UNKNOWN_TABLE => c"PMTX_ERR_UNKNOWN_TABLE",
            PMTX_ERR_KEY_TOO_LONG => c"PMTX_ERR_KEY_TOO_LONG",
            PMTX_ERR_VALUE_TOO_LARGE => c"PMTX_ERR_VALUE_TOO_LARGE",
            PMTX_ERR_BUFFER_TOO_SMALL => c"PMTX_ERR_BUFFER_TOO_SMALL",
            PMTX_ERR_OUT_OF_SPACE => c"PMTX_ERR_OUT_OF_SPACE",
            PMTX_ERR_CORRUPT => c"PMTX_ERR_CORRUPT",
            PMTX_ERR_FORMAT => c"PMTX_ERR_FORMAT",
            PMTX_ERR_TOO_MANY_ABORTS => c"PMTX_ERR_TOO_MANY_ABORTS",
            PMTX_ERR_ENDED => c"PMTX_ERR_ENDED",
            PMTX_ERR_CLOSED => c"PMTX_ERR_CLOSED",
            PMTX_ERR_WRONG_THREAD => c"PMTX_ERR_WRONG_THREAD",
            PMTX_ERR_BUSY => c"PMTX_ERR_BUSY",
            PMTX_ERR_LOCKED => c"PMTX_ERR_LOCKED",
            PMTX_ERR_IO => c"PMTX_ERR_IO",
            PMTX_ERR_MISUSE => c"PMTX_ERR_MISUSE",
            PMTX_ERR_FAILED => c"PMTX_ERR_FAILED",
            PMTX_ERR_INTERNAL => c"PMTX_ERR_INTERNAL",
        }
    }

    /// The status whose code is `code`, if any.
    pub fn from_code(code: c_int) -> Option<Self> {
        ALL_STATUSES.into_iter().find(|status| *status as c_int == code)
    }
}

/// An error on its way to the caller: its code and its message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: pmtx_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: pmtx_status, message: impl Into<String>) -> Self {
        debug_assert!((status as c_int) < 0 || status == PMTX_CONFLICT || status == PMTX_ROLLBACK);
        Self { status, message: message.into() }
    }

    pub(crate) fn argument(message: impl Into<String>) -> Self {
        Self::new(PMTX_ERR_ARGUMENT, message)
    }
}

impl From<DbError> for Failure {
    fn from(error: DbError) -> Self {
        let status = match &error {
            DbError::Pool(pool) => pool_status(pool),
            DbError::PoolNotFound { .. } => PMTX_ERR_POOL_NOT_FOUND,
            DbError::UnknownTable(_) | DbError::UnknownIndex { .. } => PMTX_ERR_UNKNOWN_TABLE,
            DbError::ValueTooLarge { .. } => PMTX_ERR_VALUE_TOO_LARGE,
            DbError::KeyTooLong { .. } => PMTX_ERR_KEY_TOO_LONG,
            DbError::OutOfSpace(_) => PMTX_ERR_OUT_OF_SPACE,
            DbError::LogFile { .. } => PMTX_ERR_IO,
            DbError::Corrupt(_) | DbError::CorruptStructure { .. } => PMTX_ERR_CORRUPT,
            DbError::TooManyAborts { .. } => PMTX_ERR_TOO_MANY_ABORTS,
            DbError::InvalidConfig(_) => PMTX_ERR_ARGUMENT,
            DbError::SchemaMismatch(_) => PMTX_ERR_SCHEMA_MISMATCH,
            DbError::WorkerInUse(_) | DbError::NoFreeWorker { .. } => PMTX_ERR_BUSY,
            DbError::CheckpointFailed(_) | DbError::BackgroundPanic { .. } | DbError::Poisoned(_) => PMTX_ERR_FAILED,
            DbError::Closed => PMTX_ERR_CLOSED,
            DbError::TransactionEnded(_) => PMTX_ERR_ENDED,
            // A kind of error added to the engine after this mapping.
            _ => PMTX_ERR_FAILED,
        };
        Self::new(status, error.to_string())
    }
}

/// The status of a pool error.
fn pool_status(error: &PoolError) -> pmtx_status {
    match error {
        PoolError::Io { .. } => PMTX_ERR_IO,
        PoolError::NotFound(_) => PMTX_ERR_POOL_NOT_FOUND,
        PoolError::AlreadyExists(_) | PoolError::InvalidOption(_) => PMTX_ERR_ARGUMENT,
        PoolError::Locked(_) => PMTX_ERR_LOCKED,
        PoolError::BadMagic { .. }
        | PoolError::UnsupportedVersion { .. }
        | PoolError::NewerFormat { .. }
        | PoolError::OlderFormat { .. } => PMTX_ERR_FORMAT,
        PoolError::Full { .. } => PMTX_ERR_OUT_OF_SPACE,
        PoolError::TooSmall { .. }
        | PoolError::Truncated { .. }
        | PoolError::ChecksumMismatch { .. }
        | PoolError::Corrupt { .. }
        | PoolError::Root { .. } => PMTX_ERR_CORRUPT,
        // A kind of error added to the pool after this mapping.
        _ => PMTX_ERR_FAILED,
    }
}

impl From<TxError> for Failure {
    fn from(error: TxError) -> Self {
        match error {
            TxError::Abort(reason) => Self::new(
                PMTX_CONFLICT,
                format!("the attempt conflicted with another transaction ({reason}): retry it"),
            ),
            TxError::Rollback => Self::new(PMTX_ROLLBACK, "rolled back"),
            TxError::Db(error) => error.into(),
        }
    }
}

thread_local! {
    /// The message of this thread's last failed call (`pmtx_errmsg`).
    static LAST_MESSAGE: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error message.
pub(crate) fn set_message(message: &str) {
    // A message is text for people: an interior NUL would cut it short.
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_MESSAGE.with(|last| *last.borrow_mut() = text);
}

/// This thread's last error message; valid until this thread's next call
/// that fails.
pub(crate) fn last_message() -> *const c_char {
    LAST_MESSAGE.with(|last| last.borrow().as_ptr())
}

/// Runs an entry point's `work`: its status, or its failure's status with
/// the message recorded; a panic becomes `PMTX_ERR_INTERNAL`.
pub(crate) fn guard(work: impl FnOnce() -> Result<pmtx_status, Failure>) -> pmtx_status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(Ok(status)) => status,
        Ok(Err(failure)) => {
            set_message(&failure.message);
            failure.status
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            set_message(&format!("internal error in pmtx (please report it): {message}"));
            PMTX_ERR_INTERNAL
        }
    }
}
