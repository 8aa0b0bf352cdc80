//! Records: a version word plus a pointer to an immutable value, as in DBX.
//!
//! Writers never modify a published value: they allocate a new one and swap
//! the pointer while holding the record's lock, and the old value is freed
//! through epoch-based reclamation once no reader can hold it. A reader takes
//! a stable snapshot by reading the word, copying the value, and re-reading
//! the word (a seqlock read), which is the software equivalent of DBX's
//! HTM-protected read of (version, value).
//!
//! Version word layout (64 bits):
//!
//! ```text
//! bit 0      LOCKED       a committing writer holds the record
//! bit 1      ABSENT       no value (a get-or-insert placeholder, or deleted)
//! bit 2      UNPERSISTED  installed but its log is not yet durable (DBXN's
//!                         "odd version"; Silo-family engines never set it)
//! bits 3-63  TID          epoch (high 29 bits) << 32 | sequence (32 bits)
//! ```

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use std::sync::atomic::{AtomicU64, Ordering};

/// Lock bit of the version word.
pub const LOCKED: u64 = 1;
/// Absent bit of the version word.
pub const ABSENT: u64 = 2;
/// Unpersisted (DBXN odd-version) bit.
pub const UNPERSISTED: u64 = 4;
/// Bits below the TID.
pub const FLAG_BITS: u32 = 3;

/// TID of a version word.
#[inline(always)]
pub fn tid_of(word: u64) -> u64 {
    word >> FLAG_BITS
}

/// Version word for `tid` with `flags`.
#[inline(always)]
pub fn word_of(tid: u64, flags: u64) -> u64 {
    debug_assert!(flags < (1 << FLAG_BITS));
    (tid << FLAG_BITS) | flags
}

/// Largest TID a version word holds.
pub const MAX_TID: u64 = u64::MAX >> FLAG_BITS;

/// Largest epoch a TID holds. Epochs, TIDs and sequence numbers read from a
/// pool are checked against these bounds before any arithmetic on them.
pub const MAX_EPOCH: u64 = MAX_TID >> 32;

/// Epoch part of a TID.
#[inline(always)]
pub fn epoch_of_tid(tid: u64) -> u64 {
    tid >> 32
}

/// Smallest TID of `epoch`.
#[inline(always)]
pub fn first_tid_of_epoch(epoch: u64) -> u64 {
    epoch << 32
}

/// A row's version word and value.
pub struct Record {
    word: AtomicU64,
    value: Atomic<Box<[u8]>>,
}

/// A stable read of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The version word seen (unlocked).
    pub word: u64,
}

impl Snapshot {
    /// Whether the record had no value.
    pub fn is_absent(&self) -> bool {
        self.word & ABSENT != 0
    }
}

/// How many times a reader re-tries a locked or changing record before it
/// gives up (the caller aborts).
const READ_SPINS: u32 = 1 << 12;

impl Record {
    /// A new absent record (a placeholder inserted by get-or-insert).
    pub fn placeholder() -> Self {
        Self { word: AtomicU64::new(word_of(0, ABSENT)), value: Atomic::null() }
    }

    /// A record holding `value` with `tid` (loading and recovery).
    pub fn with_value(tid: u64, value: &[u8]) -> Self {
        Self { word: AtomicU64::new(word_of(tid, 0)), value: Atomic::new(value.into()) }
    }

    /// The current version word.
    #[inline(always)]
    pub fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Reads a stable (word, value) pair, copying the value into `out`
    /// (cleared when absent). Fails if the record stays locked or keeps
    /// changing.
    pub fn read_stable(&self, out: &mut Vec<u8>, guard: &Guard) -> Option<Snapshot> {
        for _ in 0..READ_SPINS {
            let before = self.word.load(Ordering::Acquire);
            if before & LOCKED != 0 {
                std::hint::spin_loop();
                continue;
            }
            out.clear();
            let value = self.value.load(Ordering::Acquire, guard);
            // SAFETY: values are immutable once published and reclaimed only
            // through the epoch `guard` pins.
            if let Some(bytes) = unsafe { value.as_ref() } {
                out.extend_from_slice(bytes);
            }
            let after = self.word.load(Ordering::Acquire);
            if before == after {
                return Some(Snapshot { word: before });
            }
        }
        None
    }

    /// Tries to lock; returns the word seen before locking.
    #[inline]
    pub fn try_lock(&self) -> Option<u64> {
        let current = self.word.load(Ordering::Acquire);
        if current & LOCKED != 0 {
            return None;
        }
        self.word.compare_exchange(current, current | LOCKED, Ordering::AcqRel, Ordering::Acquire).ok()
    }

    /// Locks, spinning up to `spins` times.
    pub fn lock(&self, spins: u32) -> Option<u64> {
        for _ in 0..spins.max(1) {
            if let Some(word) = self.try_lock() {
                return Some(word);
            }
            std::hint::spin_loop();
        }
        None
    }

    /// Replaces the value while locked. `None` makes the record absent's
    /// value null (the caller sets ABSENT in the word it stores).
    pub fn set_value_locked(&self, value: Option<&[u8]>, guard: &Guard) {
        debug_assert!(self.word() & LOCKED != 0, "set_value_locked without the lock");
        let new = match value {
            Some(bytes) => Owned::new(Box::<[u8]>::from(bytes)).into_shared(guard),
            None => Shared::null(),
        };
        let old = self.value.swap(new, Ordering::AcqRel, guard);
        if !old.is_null() {
            // SAFETY: `old` is unlinked; readers that still hold it are pinned,
            // so destruction waits for them.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Stores the word (which must keep or drop the lock as the caller
    /// intends) with release ordering, publishing the value.
    #[inline]
    pub fn store_word(&self, word: u64) {
        self.word.store(word, Ordering::Release);
    }

    /// Unlocks without changing the version. An atomic and-not, not a
    /// load + store: DBXN's committer clears UNPERSISTED on a record that
    /// another writer may hold locked, and a plain store here could bring
    /// the bit back.
    #[inline]
    pub fn unlock(&self) {
        let previous = self.word.fetch_and(!LOCKED, Ordering::Release);
        debug_assert!(previous & LOCKED != 0);
    }

    /// DBXN's commit step: clears UNPERSISTED if the word still carries
    /// `tid` (whatever the lock bit), so a later writer's version is never
    /// touched. Returns whether the bit was cleared.
    pub fn clear_unpersisted(&self, tid: u64) -> bool {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            if tid_of(current) != tid || current & UNPERSISTED == 0 {
                return false;
            }
            match self.word.compare_exchange_weak(current, current & !UNPERSISTED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Value and word without concurrency (recovery, checkpoints under a
    /// stable read, tests).
    pub fn copy_value(&self, out: &mut Vec<u8>) -> Option<Snapshot> {
        let guard = epoch::pin();
        self.read_stable(out, &guard)
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // SAFETY: dropping the record means no one else references it (the
        // table is being dropped), so the value can be freed immediately.
        unsafe {
            let guard = epoch::unprotected();
            let value = self.value.load(Ordering::Relaxed, guard);
            if !value.is_null() {
                drop(value.into_owned());
            }
        }
    }
}

/// Converts a record reference stored in an index (a `u64`) back.
///
/// # Safety
/// `raw` must come from [`record_into_raw`] of a record that is still alive
/// (records live until their table is dropped).
#[inline(always)]
pub unsafe fn record_from_raw<'a>(raw: u64) -> &'a Record {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(raw as usize as *const Record) }
}

/// Leaks a record into an index-storable `u64`; freed by the table's drop.
pub fn record_into_raw(record: Record) -> u64 {
    Box::into_raw(Box::new(record)) as usize as u64
}

/// Frees a record made by [`record_into_raw`].
///
/// # Safety
/// No other reference to the record may exist or be created afterwards.
pub unsafe fn record_free(raw: u64) {
    // SAFETY: guaranteed by the caller.
    drop(unsafe { Box::from_raw(raw as usize as *mut Record) });
}
