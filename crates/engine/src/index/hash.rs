//! Concurrent hash index for point-only tables.
//!
//! The key space is partitioned over a power-of-two number of shards by a
//! keyed hash; each shard is a `HashMap` behind a `parking_lot::RwLock`
//! (cache-line padded to avoid false sharing between shard locks).  Reads
//! take the shard's read lock, so readers of different keys — and readers of
//! the same shard — proceed in parallel; writers only serialize with
//! operations on their own shard.  The shard selector and the per-shard maps
//! use independently keyed hashers so that all keys of one shard do not share
//! bucket-index bits inside the map.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::RwLock;

use super::IndexError;

/// Default number of shards used by [`HashIndex::new`].
pub const DEFAULT_HASH_SHARDS: usize = 64;

type Shard = CachePadded<RwLock<HashMap<Box<[u8]>, u64>>>;

/// A concurrent map from byte-string keys (at most `max_key_len` bytes) to
/// `u64` values, supporting point operations only.
pub struct HashIndex {
    shards: Box<[Shard]>,
    shard_mask: usize,
    selector: RandomState,
    max_key_len: usize,
    len: AtomicUsize,
}

impl std::fmt::Debug for HashIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashIndex")
            .field("shards", &self.shards.len())
            .field("max_key_len", &self.max_key_len)
            .field("len", &self.len())
            .finish()
    }
}

impl HashIndex {
    /// Creates an empty index with [`DEFAULT_HASH_SHARDS`] shards.
    pub fn new(max_key_len: usize) -> Self {
        Self::with_shards(max_key_len, DEFAULT_HASH_SHARDS)
    }

    /// Creates an empty index with `shards` shards (rounded up to a power of
    /// two, at least 1).
    pub fn with_shards(max_key_len: usize, shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        Self {
            shards: (0..n).map(|_| CachePadded::new(RwLock::new(HashMap::new()))).collect(),
            shard_mask: n - 1,
            selector: RandomState::new(),
            max_key_len,
            len: AtomicUsize::new(0),
        }
    }

    /// Longest accepted key.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Number of keys (exact when quiescent).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        let h = self.selector.hash_one(key);
        // Use the high bits: well mixed for SipHash and independent of the
        // per-map hasher anyway.
        &self.shards[((h >> 32) as usize) & self.shard_mask]
    }

    fn check_key(&self, key: &[u8]) -> Result<(), IndexError> {
        if key.len() > self.max_key_len {
            Err(IndexError::KeyTooLong { len: key.len(), max: self.max_key_len })
        } else {
            Ok(())
        }
    }

    /// Value under `key` (keys longer than `max_key_len` are never present).
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        if key.len() > self.max_key_len {
            return None;
        }
        self.shard(key).read().get(key).copied()
    }

    /// Atomically returns the value under `key`, inserting `make()` first if
    /// absent.  Returns `(value, inserted)`.  `make` runs under the shard's
    /// write lock: it must be short and must not access this index.
    pub fn get_or_insert_with(&self, key: &[u8], make: impl FnOnce() -> u64) -> Result<(u64, bool), IndexError> {
        self.check_key(key)?;
        let shard = self.shard(key);
        if let Some(&v) = shard.read().get(key) {
            return Ok((v, false));
        }
        let mut map = shard.write();
        if let Some(&v) = map.get(key) {
            return Ok((v, false));
        }
        let v = make();
        map.insert(key.into(), v);
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok((v, true))
    }

    /// Inserts or overwrites `key`, returning the previous value.
    pub fn insert(&self, key: &[u8], value: u64) -> Result<Option<u64>, IndexError> {
        self.check_key(key)?;
        let mut map = self.shard(key).write();
        if let Some(slot) = map.get_mut(key) {
            return Ok(Some(std::mem::replace(slot, value)));
        }
        map.insert(key.into(), value);
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&self, key: &[u8]) -> Option<u64> {
        if key.len() > self.max_key_len {
            return None;
        }
        let old = self.shard(key).write().remove(key);
        if old.is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        old
    }

    /// Calls `f` for every entry (shard by shard, each under its read lock;
    /// not a snapshot across shards).  `f` must not access this index.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], u64)) {
        for shard in self.shards.iter() {
            for (k, &v) in shard.read().iter() {
                f(k, v);
            }
        }
    }
}
