//! Concurrent hash index for point-only tables: lock-free lookups, one
//! probe of one cache line in the common case.
//!
//! The index maps a byte-string key to an *entry* (a row) that holds its own
//! key ([`HashEntry`]); it stores only one word per entry:
//!
//! ```text
//! slot word:  0                    empty (ends a probe)
//!             1                    tombstone (a removed entry; probes go on)
//!             tag << 48 | address  an entry: 16 bits of the key's hash, and
//!                                  the entry's address (x86-64 user space
//!                                  addresses fit in 48 bits)
//! ```
//!
//! Keys are spread over power-of-two shards by the top bits of a fast,
//! seeded 64-bit hash (a folded-multiply hash, not SipHash: keys come from
//! the application, and a lookup must cost a few nanoseconds). Each shard
//! is an open-addressing table with linear probing behind an atomic pointer.
//!
//! * **Lookups take no lock.** They load the shard's slot array and probe
//!   until the key's entry or an empty slot. A slot changes only from empty
//!   to an entry (insert), from an entry to a tombstone (removal) or from a
//!   tombstone to an entry (insert reusing it); a probe chain is never cut,
//!   so a key present for the whole lookup is always found. The tag filters
//!   out almost every other key without touching its entry.
//! * **Writers lock their shard** (inserts of new keys and removals only).
//!   When live entries plus tombstones would pass 3/4 of the slots, the
//!   writer builds a new array (twice the size, or the same size when
//!   tombstones are the cause), publishes it, and retires the old one. A
//!   retired array is frozen, so a lookup still probing it sees a
//!   consistent, older state; it is freed through the epochs
//!   ([`crate::epoch`]) once no lookup can hold it (without epochs, at drop).
//! * Entries are not owned: the caller frees them, and must keep an entry
//!   alive while a lookup may still reach it (the engines retire removed
//!   rows through the same epochs).
//!
//! Explained in docs/concurrency.md ("Hash index").

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use super::IndexError;
use crate::epoch::{DeferredFree, Epochs};

/// Default number of shards.
pub const DEFAULT_HASH_SHARDS: usize = 64;

/// Slots of a shard's first array.
const MIN_SLOTS: usize = 16;

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = 1;
const ADDRESS_BITS: u32 = 48;
const ADDRESS_MASK: u64 = (1 << ADDRESS_BITS) - 1;

/// An entry the hash index can point at: it knows its key.
pub trait HashEntry: Send + Sync + 'static {
    /// The entry's key (immutable while the entry is indexed).
    fn key(&self) -> &[u8];
}

/// Prefetches `lines` cache lines from `address` (a hint: never faults).
#[inline(always)]
pub(crate) fn prefetch_lines(address: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in 0..lines {
        // SAFETY: a prefetch is a hint that never faults, whatever the
        // address; it only reads into the cache.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                address.wrapping_add(line * 64) as *const i8
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (address, lines);
}

/// The folded multiply at the heart of wyhash-style hashes.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let product = (a as u128).wrapping_mul(b as u128);
    (product as u64) ^ ((product >> 64) as u64)
}

/// A fast 64-bit hash of `key` under `seed`: 8 bytes per multiply, the
/// length mixed in first so keys that differ only by trailing zeros differ.
#[inline]
pub fn hash_key(key: &[u8], seed: u64) -> u64 {
    const P0: u64 = 0xa076_1d64_78bd_642f;
    const P1: u64 = 0xe703_7ed1_a0b4_28db;
    const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
    let mut state = fold(seed ^ P0, (key.len() as u64) ^ P1);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        state = fold(state ^ word, P1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut bytes = [0u8; 8];
        bytes[..rest.len()].copy_from_slice(rest);
        state = fold(state ^ u64::from_le_bytes(bytes), P2);
    }
    fold(state ^ P2, state ^ seed ^ P0)
}

struct SlotArray {
    mask: usize,
    words: Box<[AtomicU64]>,
}

impl SlotArray {
    fn new(slots: usize) -> Box<Self> {
        debug_assert!(slots.is_power_of_two());
        Box::new(Self { mask: slots - 1, words: (0..slots).map(|_| AtomicU64::new(EMPTY)).collect() })
    }
}

struct ShardWriter {
    /// Entries present.
    live: usize,
    /// Entries plus tombstones (slots that are not empty).
    used: usize,
    retired: DeferredFree<Box<SlotArray>>,
}

struct Shard {
    slots: AtomicPtr<SlotArray>,
    writer: Mutex<ShardWriter>,
}

/// A concurrent map from byte-string keys (at most `max_key_len` bytes) to
/// entries of type `E`; point operations only. See the module documentation.
pub struct HashIndex<E: HashEntry> {
    shards: Box<[CachePadded<Shard>]>,
    shard_shift: u32,
    max_key_len: usize,
    seed: u64,
    epochs: Option<Arc<Epochs>>,
    _entries: PhantomData<*const E>,
}

// SAFETY: the index holds entry addresses, which it dereferences only to
// read keys (`E: Sync`); slot arrays are atomics owned by the index.
unsafe impl<E: HashEntry> Send for HashIndex<E> {}
// SAFETY: as above; all shared mutation is through atomics or the shard
// mutexes.
unsafe impl<E: HashEntry> Sync for HashIndex<E> {}

impl<E: HashEntry> std::fmt::Debug for HashIndex<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashIndex")
            .field("shards", &self.shards.len())
            .field("max_key_len", &self.max_key_len)
            .field("len", &self.len())
            .finish()
    }
}

fn tag_of(hash: u64) -> u64 {
    (hash >> 32) & 0xFFFF
}

impl<E: HashEntry> HashIndex<E> {
    /// An empty index with [`DEFAULT_HASH_SHARDS`] shards whose replaced
    /// slot arrays are freed through `epochs` (or at drop, without).
    pub fn new(max_key_len: usize, epochs: Option<Arc<Epochs>>) -> Self {
        Self::with_shards(max_key_len, DEFAULT_HASH_SHARDS, epochs)
    }

    /// An empty index with `shards` shards (rounded up to a power of two).
    pub fn with_shards(max_key_len: usize, shards: usize, epochs: Option<Arc<Epochs>>) -> Self {
        let count = shards.clamp(1, 1 << 16).next_power_of_two();
        let shards = (0..count)
            .map(|_| {
                CachePadded::new(Shard {
                    slots: AtomicPtr::new(Box::into_raw(SlotArray::new(MIN_SLOTS))),
                    writer: Mutex::new(ShardWriter { live: 0, used: 0, retired: DeferredFree::default() }),
                })
            })
            .collect();
        Self {
            shards,
            shard_shift: 64 - count.trailing_zeros(),
            max_key_len,
            seed: 0x243f_6a88_85a3_08d3,
            epochs,
            _entries: PhantomData,
        }
    }

    /// Longest accepted key.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Number of entries (exact when no writer runs).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.writer.lock().live).sum()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of slot arrays held (current and retired), for memory reports.
    pub fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let writer = shard.writer.lock();
                // SAFETY: the current array is replaced only under the writer
                // lock, which is held.
                let current = unsafe { &*shard.slots.load(Ordering::Acquire) };
                (current.words.len() + writer.retired.len() * current.words.len() / 2) * 8
            })
            .sum()
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        // `shard_shift` is 64 for a single shard: shifting by 64 is not
        // allowed, so use a checked shift.
        let index = hash.checked_shr(self.shard_shift).unwrap_or(0) as usize;
        &self.shards[index]
    }

    /// Probes `array` for `key`; `Ok(entry)` or `Err(position of the first
    /// reusable slot)` (a tombstone on the way, else the empty slot).
    #[inline]
    fn probe(array: &SlotArray, key: &[u8], hash: u64) -> Result<NonNull<E>, usize> {
        // SAFETY: a slot holds the address of an entry that was alive when
        // it was stored; entries are freed only after they are unlinked and
        // no lookup can still hold them (module documentation), so the
        // entry is alive here.
        Self::probe_with(array, hash, |entry| unsafe { (*entry).key() } == key)
    }

    /// The probe of `hash`'s chain in `array`: the first entry whose tag
    /// matches and that `accept` takes, or `Err` as in `probe`.
    #[inline(always)]
    fn probe_with(array: &SlotArray, hash: u64, accept: impl Fn(*mut E) -> bool) -> Result<NonNull<E>, usize> {
        let tag = tag_of(hash);
        let mut position = hash as usize & array.mask;
        let mut reusable = None;
        loop {
            let word = array.words[position].load(Ordering::Acquire);
            match word {
                EMPTY => return Err(reusable.unwrap_or(position)),
                TOMBSTONE => {
                    reusable.get_or_insert(position);
                }
                _ if word >> ADDRESS_BITS == tag => {
                    let entry = (word & ADDRESS_MASK) as usize as *mut E;
                    if accept(entry) {
                        // SAFETY: non-null: the address part of an entry
                        // word is never 0 (see `encode`).
                        return Ok(unsafe { NonNull::new_unchecked(entry) });
                    }
                }
                _ => {}
            }
            position = (position + 1) & array.mask;
        }
    }

    fn encode(entry: NonNull<E>, hash: u64) -> u64 {
        let address = entry.as_ptr() as usize as u64;
        assert!(address & !ADDRESS_MASK == 0, "entry address {address:#x} does not fit 48 bits");
        debug_assert!(address > TOMBSTONE);
        tag_of(hash) << ADDRESS_BITS | address
    }

    /// The entry of `key` (keys longer than `max_key_len` are never present).
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<NonNull<E>> {
        if key.len() > self.max_key_len {
            return None;
        }
        let hash = hash_key(key, self.seed);
        // SAFETY: the shard's array pointer always holds a live array: a
        // replaced array is freed only once no lookup can hold it.
        let array = unsafe { &*self.shard(hash).slots.load(Ordering::Acquire) };
        Self::probe(array, key, hash).ok()
    }

    /// The first entry whose 16 tag bits match `key`'s, without comparing
    /// keys: for prefetch hints, which must not wait for the entry's miss
    /// that a key comparison takes. Usually `key`'s entry; a rare tag
    /// collision gives another live entry (a wasted hint, never an error).
    #[inline]
    pub fn get_unverified(&self, key: &[u8]) -> Option<NonNull<E>> {
        if key.len() > self.max_key_len {
            return None;
        }
        let hash = hash_key(key, self.seed);
        // SAFETY: as in `get`.
        let array = unsafe { &*self.shard(hash).slots.load(Ordering::Acquire) };
        Self::probe_with(array, hash, |_| true).ok()
    }

    /// Atomically returns the entry of `key`, inserting `make()` first if
    /// absent; returns `(entry, inserted)`. `make` runs under the shard's
    /// writer lock (short, and must not use this index); the entry it makes
    /// must hold `key`.
    pub fn get_or_insert_with(
        &self,
        key: &[u8],
        make: impl FnOnce() -> NonNull<E>,
    ) -> Result<(NonNull<E>, bool), IndexError> {
        if key.len() > self.max_key_len {
            return Err(IndexError::KeyTooLong { len: key.len(), max: self.max_key_len });
        }
        let hash = hash_key(key, self.seed);
        let shard = self.shard(hash);
        // SAFETY: as in `get`.
        if let Ok(entry) = Self::probe(unsafe { &*shard.slots.load(Ordering::Acquire) }, key, hash) {
            return Ok((entry, false));
        }
        let mut writer = shard.writer.lock();
        // SAFETY: as in `get`; under the writer lock the array is current.
        let mut array = unsafe { &*shard.slots.load(Ordering::Acquire) };
        let mut position = match Self::probe(array, key, hash) {
            Ok(entry) => return Ok((entry, false)),
            Err(position) => position,
        };
        let reuses_tombstone = array.words[position].load(Ordering::Relaxed) == TOMBSTONE;
        if !reuses_tombstone && (writer.used + 1) * 4 > array.words.len() * 3 {
            array = self.grow(shard, &mut writer);
            position = match Self::probe(array, key, hash) {
                Ok(_) => unreachable!("the key was absent under the writer lock"),
                Err(position) => position,
            };
        }
        let entry = make();
        // SAFETY: `make` returns a live entry.
        debug_assert_eq!(unsafe { entry.as_ref() }.key(), key, "the entry must hold its key");
        let word = Self::encode(entry, hash);
        if array.words[position].load(Ordering::Relaxed) == EMPTY {
            writer.used += 1;
        }
        writer.live += 1;
        // IMPORTANT: Release publishes the fully built entry to lookups.
        array.words[position].store(word, Ordering::Release);
        Ok((entry, true))
    }

    /// Removes `key` if it maps to `expected`; returns whether it did. The
    /// caller retires the entry (lookups may still hold it).
    pub fn remove_if(&self, key: &[u8], expected: NonNull<E>) -> bool {
        if key.len() > self.max_key_len {
            return false;
        }
        let hash = hash_key(key, self.seed);
        let shard = self.shard(hash);
        let mut writer = shard.writer.lock();
        // SAFETY: as in `get`; under the writer lock the array is current.
        let array = unsafe { &*shard.slots.load(Ordering::Acquire) };
        let tag = tag_of(hash);
        let mut position = hash as usize & array.mask;
        loop {
            let word = array.words[position].load(Ordering::Acquire);
            if word == EMPTY {
                return false;
            }
            if word >> ADDRESS_BITS == tag && word & ADDRESS_MASK == expected.as_ptr() as usize as u64 {
                array.words[position].store(TOMBSTONE, Ordering::Release);
                writer.live -= 1;
                return true;
            }
            position = (position + 1) & array.mask;
        }
    }

    /// Replaces the shard's array by one with room to spare (twice the size,
    /// or the same size when tombstones filled it), retiring the old one.
    fn grow<'a>(&'a self, shard: &'a Shard, writer: &mut ShardWriter) -> &'a SlotArray {
        let old_pointer = shard.slots.load(Ordering::Acquire);
        // SAFETY: under the writer lock the current array is live.
        let old = unsafe { &*old_pointer };
        let slots = if (writer.live + 1) * 2 > old.words.len() { old.words.len() * 2 } else { old.words.len() };
        let new = SlotArray::new(slots.max(MIN_SLOTS));
        for word in old.words.iter() {
            let word = word.load(Ordering::Relaxed);
            if word == EMPTY || word == TOMBSTONE {
                continue;
            }
            // SAFETY: the entry is indexed, hence alive.
            let key = unsafe { (*((word & ADDRESS_MASK) as usize as *const E)).key() };
            let mut position = hash_key(key, self.seed) as usize & new.mask;
            while new.words[position].load(Ordering::Relaxed) != EMPTY {
                position = (position + 1) & new.mask;
            }
            new.words[position].store(word, Ordering::Relaxed);
        }
        writer.used = writer.live;
        let new_pointer = Box::into_raw(new);
        // IMPORTANT: Release publishes the filled array.
        shard.slots.store(new_pointer, Ordering::Release);
        // SAFETY: `old_pointer` came from `Box::into_raw` and is unlinked
        // now; it is freed below only once no lookup can hold it.
        let old = unsafe { Box::from_raw(old_pointer) };
        match &self.epochs {
            Some(epochs) => {
                let stamp = epochs.stamp();
                writer.retired.push(stamp, old);
                writer.retired.collect(epochs.horizon(), drop);
            }
            None => writer.retired.push(0, old),
        }
        // SAFETY: just published; replaced only under this lock.
        unsafe { &*new_pointer }
    }

    /// Calls `visit` for every entry, shard by shard: each shard's entries
    /// are copied out under its writer lock, then visited with no lock held
    /// (not a snapshot across shards; an entry removed after its shard was
    /// copied is still visited, so the caller keeps entries alive, e.g. by
    /// an epoch pin).
    ///
    /// IMPORTANT: no lock is held while `visit` runs. A checkpoint's visit
    /// waits for a row's lock, and the holder of that lock (reclamation
    /// unlinking the row) may need this shard's writer lock: holding it
    /// here deadlocked the two until the checkpoint's bound ran out.
    pub fn for_each(&self, mut visit: impl FnMut(NonNull<E>)) {
        let mut entries: Vec<NonNull<E>> = Vec::new();
        for shard in self.shards.iter() {
            entries.clear();
            {
                let _writer = shard.writer.lock();
                // SAFETY: under the writer lock the array is current and live.
                let array = unsafe { &*shard.slots.load(Ordering::Acquire) };
                for word in array.words.iter() {
                    let word = word.load(Ordering::Acquire);
                    if word != EMPTY && word != TOMBSTONE {
                        // SAFETY: non-null entry address (see `encode`).
                        entries.push(unsafe { NonNull::new_unchecked((word & ADDRESS_MASK) as usize as *mut E) });
                    }
                }
            }
            for &entry in &entries {
                visit(entry);
            }
        }
    }
}

impl<E: HashEntry> Drop for HashIndex<E> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            let pointer = *shard.slots.get_mut();
            // SAFETY: `&mut self`: no lookup runs; the array came from
            // `Box::into_raw` and is freed once. Retired arrays are owned by
            // the writer state and dropped with it.
            drop(unsafe { Box::from_raw(pointer) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Entry {
        key: Vec<u8>,
    }

    impl HashEntry for Entry {
        fn key(&self) -> &[u8] {
            &self.key
        }
    }

    fn entry(key: &[u8]) -> NonNull<Entry> {
        NonNull::from(Box::leak(Box::new(Entry { key: key.to_vec() })))
    }

    #[test]
    fn hash_spreads_short_keys_and_tells_trailing_zeros_apart() {
        let seed = 7;
        assert_ne!(hash_key(b"ab", seed), hash_key(b"ab\0", seed));
        assert_ne!(hash_key(b"", seed), hash_key(b"\0", seed));
        let mut seen = std::collections::HashSet::new();
        for value in 0u32..100_000 {
            assert!(seen.insert(hash_key(&value.to_be_bytes(), seed)));
        }
        // The top bits (shard) and the tag bits are spread too.
        let mut shards = [0usize; 64];
        for value in 0u32..64_000 {
            shards[(hash_key(&value.to_be_bytes(), seed) >> 58) as usize] += 1;
        }
        assert!(shards.iter().all(|&count| (700..1300).contains(&count)), "{shards:?}");
    }

    #[test]
    fn inserts_lookups_removals_and_growth_agree_with_a_model() {
        for shards in [1, 4, 64] {
            let index = HashIndex::<Entry>::with_shards(16, shards, None);
            let mut model = std::collections::HashMap::new();
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            for step in 0..20_000u32 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let key = (rng % 3000).to_be_bytes()[..(1 + rng as usize % 8)].to_vec();
                match step % 3 {
                    0 | 1 => {
                        let (found, inserted) = index.get_or_insert_with(&key, || entry(&key)).unwrap();
                        assert_eq!(inserted, !model.contains_key(&key));
                        let expected = *model.entry(key.clone()).or_insert(found);
                        assert_eq!(found, expected);
                    }
                    _ => {
                        if let Some(expected) = model.remove(&key) {
                            assert!(!index.remove_if(&key, entry(b"other")));
                            assert!(index.remove_if(&key, expected));
                            assert!(!index.remove_if(&key, expected));
                        } else {
                            assert!(index.get(&key).is_none());
                        }
                    }
                }
                assert_eq!(index.get(&key), model.get(&key).copied());
            }
            assert_eq!(index.len(), model.len());
            let mut visited = 0;
            index.for_each(|found| {
                // SAFETY: test entries are leaked, never freed.
                let key = unsafe { found.as_ref() }.key.clone();
                assert_eq!(model.get(&key), Some(&found));
                visited += 1;
            });
            assert_eq!(visited, model.len());
        }
    }

    /// A visitor that waits for another thread which itself removes an
    /// entry of the same shard (a checkpoint waiting for a row lock held by
    /// reclamation, which unlinks that row) must not deadlock: `for_each`
    /// holds no lock while it visits.
    #[test]
    fn for_each_visits_without_holding_the_shard_lock() {
        let index = HashIndex::<Entry>::new(8, None);
        for key in [&b"first"[..], b"second"] {
            index.get_or_insert_with(key, || entry(key)).unwrap();
        }
        let (done, finished) = std::sync::mpsc::channel();
        let mut visited = Vec::new();
        std::thread::scope(|scope| {
            index.for_each(|found| {
                // SAFETY: test entries are leaked, never freed.
                let key = unsafe { found.as_ref() }.key.clone();
                if visited.is_empty() {
                    // Another thread removes the entry being visited: it
                    // needs this very shard's writer lock.
                    let (index, done, key, address) = (&index, done.clone(), key.clone(), found.as_ptr() as usize);
                    scope.spawn(move || {
                        let expected = NonNull::new(address as *mut Entry).expect("an entry's address");
                        done.send(index.remove_if(&key, expected)).unwrap()
                    });
                    // Bounded only so a regression fails instead of hanging.
                    let removed = finished.recv_timeout(std::time::Duration::from_secs(60));
                    assert_eq!(removed, Ok(true), "the remover was blocked by the visit");
                }
                visited.push(key);
            });
        });
        assert_eq!(visited.len(), 2, "entries copied before a removal are still visited");
        assert!(index.get(&visited[0]).is_none());
        assert!(index.get(&visited[1]).is_some());
    }

    #[test]
    fn unverified_lookups_find_present_keys_and_only_live_entries() {
        let index = HashIndex::<Entry>::new(8, None);
        let mut live = std::collections::HashSet::new();
        for value in 0u32..5_000 {
            let key = value.to_le_bytes();
            let (found, _) = index.get_or_insert_with(&key, || entry(&key)).unwrap();
            live.insert(found);
        }
        for value in (0u32..5_000).step_by(3) {
            let key = value.to_le_bytes();
            let found = index.get(&key).unwrap();
            assert!(index.remove_if(&key, found));
            live.remove(&found);
        }
        for value in 0u32..10_000 {
            let key = value.to_le_bytes();
            let unverified = index.get_unverified(&key);
            match index.get(&key) {
                // Tags of two present keys may collide: the first in the
                // probe chain wins, and it is live either way.
                Some(found) => assert!(unverified == Some(found) || unverified.is_some_and(|e| live.contains(&e))),
                None => assert!(unverified.is_none_or(|e| live.contains(&e)), "key {value}: a removed entry"),
            }
        }
        let exact = (0u32..5_000)
            .filter(|value| value % 3 != 0)
            .filter(|value| index.get_unverified(&value.to_le_bytes()) == index.get(&value.to_le_bytes()))
            .count();
        assert!(exact * 100 >= 3_333 * 99, "16 tag bits make collisions rare: {exact} of 3333 exact");
    }

    #[test]
    fn long_keys_are_refused_for_insert_and_absent_for_lookup() {
        let index = HashIndex::<Entry>::new(4, None);
        assert_eq!(
            index.get_or_insert_with(b"12345", || entry(b"12345")),
            Err(IndexError::KeyTooLong { len: 5, max: 4 })
        );
        assert!(index.get(b"12345").is_none());
    }

    #[test]
    fn lookups_during_concurrent_inserts_and_removals_never_miss_a_stable_key() {
        let index = Arc::new(HashIndex::<Entry>::with_shards(8, 2, None));
        let stable: Vec<NonNull<Entry>> = (0u64..2000)
            .map(|key| index.get_or_insert_with(&key.to_be_bytes(), || entry(&key.to_be_bytes())).unwrap().0)
            .collect();
        let stable_addresses: Vec<usize> = stable.iter().map(|e| e.as_ptr() as usize).collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for key in 0u64..500 {
                        let key = (1_000_000 + round * 500 + key).to_be_bytes();
                        let (made, _) = index.get_or_insert_with(&key, || entry(&key)).unwrap();
                        assert!(index.remove_if(&key, made));
                    }
                    round += 1;
                }
            })
        };
        for _ in 0..50 {
            for (key, address) in stable_addresses.iter().enumerate() {
                let found = index.get(&(key as u64).to_be_bytes()).expect("a stable key is always found");
                assert_eq!(found.as_ptr() as usize, *address);
            }
        }
        stop.store(true, Ordering::Relaxed);
        churn.join().unwrap();
        assert_eq!(index.len(), 2000);
    }
}
