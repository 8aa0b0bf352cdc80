//! Names of the persistent structures of a pool, for typed corruption
//! errors: a damaged pool is refused with an error that says which
//! structure is damaged (`PoolError::Corrupt`, and the engine's
//! `DbError::CorruptStructure`), so a test or an operator can tell a
//! damaged log from a damaged header without parsing a message.

use std::fmt;

/// A persistent structure of a pool (or of the log files beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Structure {
    /// The 512-byte header record at offset 0.
    PoolHeader,
    /// The named-root table (slots, names and checksummed values).
    RootTable,
    /// The chunk table (one word per chunk).
    ChunkTable,
    /// A redo-log segment header.
    LogSegment,
    /// A redo-log record.
    LogRecord,
    /// A checkpoint (chunk headers and rows).
    Checkpoint,
    /// A Zen (or wbl) heap chunk: tuple slots and the allocation bitmap.
    ZenHeap,
    /// The wbl record log (the persisted and dirty commit windows).
    WblLog,
    /// An SP^3 log record's dependency list.
    Sp3Dependencies,
    /// A DBXN value chunk (values stored outside the log records).
    DbxnValues,
    /// The stored catalog (engine, protocol and table list; two
    /// checksummed copies in one chunk).
    Catalog,
    /// Persistent home slots (`mnemosyne`: every row's copy, updated in
    /// place).
    PmHome,
    /// A torn-bit redo log (`mnemosyne`: head word and fragments).
    TornBitLog,
}

impl Structure {
    /// Every structure, in a fixed order (for reports).
    pub const ALL: [Structure; 13] = [
        Structure::PoolHeader,
        Structure::RootTable,
        Structure::ChunkTable,
        Structure::LogSegment,
        Structure::LogRecord,
        Structure::Checkpoint,
        Structure::ZenHeap,
        Structure::WblLog,
        Structure::Sp3Dependencies,
        Structure::DbxnValues,
        Structure::Catalog,
        Structure::PmHome,
        Structure::TornBitLog,
    ];

    /// Short name, as printed in errors and reports.
    pub fn name(self) -> &'static str {
        match self {
            Structure::PoolHeader => "pool header",
            Structure::RootTable => "root table",
            Structure::ChunkTable => "chunk table",
            Structure::LogSegment => "log segment header",
            Structure::LogRecord => "log record",
            Structure::Checkpoint => "checkpoint",
            Structure::ZenHeap => "zen heap",
            Structure::WblLog => "wbl record log",
            Structure::Sp3Dependencies => "sp3 dependency record",
            Structure::DbxnValues => "dbxn value chunk",
            Structure::Catalog => "catalog",
            Structure::PmHome => "pm home slots",
            Structure::TornBitLog => "torn-bit redo log",
        }
    }
}

impl fmt::Display for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
