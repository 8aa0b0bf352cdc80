//! Concurrent in-memory indexes mapping byte-string keys to `u64` handles.
//!
//! * [`OrderedIndex`] — a B+tree with optimistic lock coupling (Leis et al.):
//!   point lookup, get-or-insert of a placeholder (DBX get-with-insert),
//!   insert/overwrite, remove, and forward/reverse range scans with a limit
//!   that report every leaf read together with its structural version for
//!   phantom detection (DBX §3.3.3, Silo node sets).  Keys keep their first
//!   16 bytes inline; leaves emptied by removals are unlinked and their nodes
//!   reused, so memory follows the live key count.  See [`btree`] for the
//!   algorithm, node reclamation (type-stable free lists), key-blob
//!   reclamation (crossbeam-epoch) and the leaf version contract.
//! * [`HashIndex`] — a sharded concurrent hash map for point-only tables.
//!
//! Keys are compared lexicographically as byte strings; composite keys should
//! be encoded big-endian (and fixed width, or with an order-preserving
//! terminator) so that byte order equals logical order.  Keys longer than the
//! configured maximum are rejected with [`IndexError::KeyTooLong`] by inserting
//! operations (and are simply absent for lookups/removals).  The index does
//! not own what the values refer to: values are opaque `u64` handles (record
//! addresses, PM offsets, ...).
//!
//! [`version_lock`] holds the optimistic version lock, generic over an
//! [`AtomicWord`] so that the real protocol can be model-checked with shuttle.

pub mod btree;
pub mod hash;
mod key;
mod striped;
pub mod version_lock;

pub use btree::{
    Finger, GetOrInsert, LeafChange, LeafRef, OrderedIndex, OrderedIndexConfig, ScanDirection, DEFAULT_NODE_CAPACITY,
    MAX_NODE_CAPACITY, MIN_NODE_CAPACITY,
};
pub use hash::{hash_key, HashEntry, HashIndex, DEFAULT_HASH_SHARDS};
pub use version_lock::{AtomicWord, Restart, VersionLock};

/// Errors returned by index operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The key exceeds the index's configured maximum key length.
    #[error("key of {len} bytes exceeds the maximum key length {max}")]
    KeyTooLong {
        /// Length of the rejected key.
        len: usize,
        /// Configured maximum.
        max: usize,
    },
}
