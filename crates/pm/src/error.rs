//! Typed errors of the PM layer. Bad input (a missing, truncated, foreign or
//! damaged file, a full pool, a pool locked by another process) is an error
//! value with a message that names the file and what is wrong, never a panic.

use crate::structure::Structure;
use std::path::PathBuf;

/// Errors opening, creating or using a pool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// An operating-system call failed.
    #[error("{path}: {operation} failed: {source}")]
    Io {
        /// The pool file.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The pool file does not exist.
    #[error("{0}: no such pool file (create it with `pmtx pool create`)")]
    NotFound(PathBuf),
    /// Creating a pool over an existing file.
    #[error("{0}: file already exists; refusing to overwrite it")]
    AlreadyExists(PathBuf),
    /// Another process (or this one) holds the pool's lock.
    #[error("{0}: pool is already open in another process (flock held)")]
    Locked(PathBuf),
    /// The requested or found size is unusable.
    #[error("{path}: pool size {size} bytes is too small; the minimum is {minimum} bytes")]
    TooSmall {
        /// The pool file.
        path: PathBuf,
        /// The size given or found.
        size: u64,
        /// The smallest usable pool.
        minimum: u64,
    },
    /// The file is shorter than its header says.
    #[error("{path}: truncated pool: header says {expected} bytes but the file has {actual}")]
    Truncated {
        /// The pool file.
        path: PathBuf,
        /// Size recorded in the header.
        expected: u64,
        /// Size of the file.
        actual: u64,
    },
    /// The file is not a pmtx pool.
    #[error("{path}: not a pmtx pool (bad magic {found:02x?})")]
    BadMagic {
        /// The pool file.
        path: PathBuf,
        /// The first bytes found.
        found: [u8; 8],
    },
    /// A pool of a layout version this build never wrote (below the
    /// oldest it reads).
    #[error("{path}: pool layout version {found} is not supported (this build reads versions 1 to {supported})")]
    UnsupportedVersion {
        /// The pool file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// A structure written by a newer format than this build reads: the
    /// pool is not damaged, this build is too old for it.
    #[error(
        "{path}: {structure} has format version {found}, written by a newer pmtx; this build reads up to version \
         {supported}: open the pool with the newer build"
    )]
    NewerFormat {
        /// The pool file.
        path: PathBuf,
        /// Which structure.
        structure: Structure,
        /// Version in the pool.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// A structure written in a format older than this build reads: the
    /// pool is not damaged, this build no longer reads it.
    #[error(
        "{path}: {structure} has format version {found}, written by an older pmtx; this build reads version \
         {oldest} and later: recreate the pool (or open it with the older build)"
    )]
    OlderFormat {
        /// The pool file.
        path: PathBuf,
        /// Which structure.
        structure: Structure,
        /// Version in the pool.
        found: u32,
        /// Oldest version this build reads.
        oldest: u32,
    },
    /// A checksum did not match: the structure is damaged.
    #[error(
        "{path}: {structure} checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the pool is damaged"
    )]
    ChecksumMismatch {
        /// The pool file.
        path: PathBuf,
        /// Which structure.
        structure: Structure,
        /// Checksum stored in the pool.
        stored: u32,
        /// Checksum computed over the bytes.
        computed: u32,
    },
    /// Any other inconsistency found while checking metadata.
    #[error("{path}: corrupt pool: {structure} is damaged: {detail}")]
    Corrupt {
        /// The pool file.
        path: PathBuf,
        /// Which structure.
        structure: Structure,
        /// What is inconsistent.
        detail: String,
    },
    /// No free chunk is left.
    #[error("pool is full: all {chunks} chunks of {chunk_size} bytes are in use")]
    Full {
        /// Number of data chunks in the pool.
        chunks: u64,
        /// Chunk size in bytes.
        chunk_size: u64,
    },
    /// No free slot in the named-root table, or a bad root name.
    #[error("root {name:?}: {detail}")]
    Root {
        /// The root name.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// An option value is invalid.
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

impl PoolError {
    /// The damaged structure, if this error says the pool is damaged
    /// (a checksum mismatch or an inconsistency), `None` for any other
    /// error (a missing file, a lock, a newer format, ...).
    pub fn damaged_structure(&self) -> Option<Structure> {
        match self {
            PoolError::ChecksumMismatch { structure, .. } | PoolError::Corrupt { structure, .. } => Some(*structure),
            PoolError::BadMagic { .. } | PoolError::Truncated { .. } => Some(Structure::PoolHeader),
            _ => None,
        }
    }
}

/// Result alias of the PM layer.
pub type PoolResult<T> = Result<T, PoolError>;
