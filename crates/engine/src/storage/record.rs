//! Rows in DRAM: the version word every protocol uses, the row's key, and
//! (for the DRAM storage) its value, updated in place.
//!
//! Version word layout (64 bits), shared by every storage:
//!
//! ```text
//! bit 0      LOCKED       a committing writer holds the row
//! bit 1      ABSENT       no value (a get-or-insert placeholder, or deleted)
//! bit 2      UNPERSISTED  installed but its log is not yet durable (DBXN's
//!                         "odd version"; Silo-family engines never set it)
//! bits 3-63  TID          epoch (high 29 bits) << 32 | sequence (32 bits)
//! ```
//!
//! [`REMOVED`] (TID = [`MAX_TID`], ABSENT) marks a row unlinked from its
//! table's indexes: no transaction ever commits that TID, so a reader that
//! read the row earlier fails validation, and a reader that meets it looks
//! the key up again (`storage::table`, "reclamation").
//!
//! A [`Record`] (the DRAM storage's row) is one allocation: a 32-byte
//! header, the key, and an inline value area sized when the row is created
//! (the first value's length, or none for a placeholder). A committing
//! writer that holds the lock overwrites the value *in place* when it fits
//! the inline area (fixed-size rows, the common case: no allocation per
//! update), else in an external buffer it allocates once and reuses while
//! the value fits; a replaced buffer is retired through the epochs. A
//! reader takes a stable snapshot seqlock-style: read the word (unlocked),
//! copy the value with relaxed atomic word loads, an acquire fence, re-read
//! the word; equal words mean no writer ran in between (the software form of
//! DBX's HTM-protected read). Value bytes are atomics so that a racing copy
//! is defined behaviour; it is discarded by the re-check.
//!
//! Explained in docs/concurrency.md ("Rows").

use crate::index::HashEntry;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, Ordering};

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
pub const fn word_of(tid: u64, flags: u64) -> u64 {
    debug_assert!(flags < (1 << FLAG_BITS));
    (tid << FLAG_BITS) | flags
}

/// Largest TID a version word holds.
pub const MAX_TID: u64 = u64::MAX >> FLAG_BITS;

/// Largest epoch a TID holds. Epochs, TIDs and sequence numbers read from a
/// pool are checked against these bounds before any arithmetic on them.
pub const MAX_EPOCH: u64 = MAX_TID >> 32;

/// The word of a row unlinked from its indexes (see the module docs).
pub const REMOVED: u64 = word_of(MAX_TID, ABSENT);

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

/// A stable read of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The version word seen (unlocked).
    pub word: u64,
}

impl Snapshot {
    /// Whether the row had no value.
    pub fn is_absent(&self) -> bool {
        self.word & ABSENT != 0
    }
}

/// How many times a reader re-tries a locked or changing row before it
/// gives up (the caller aborts).
pub(crate) const READ_SPINS: u32 = 1 << 12;

/// What every storage's row offers the tables and the protocols: a version
/// word, its key, and a way to be made and freed. Rows are allocated once
/// and freed only after they are unlinked and the epochs show no reader can
/// hold them (`storage::table`).
pub trait RowKind: HashEntry + Sized {
    /// The version word.
    fn word_cell(&self) -> &AtomicU64;

    /// Set while the row sits in a reclamation queue, so at most one queue
    /// holds it (only that queue's owner may free it).
    fn queued_flag(&self) -> &AtomicU16;

    /// Starts loading the row's value where it lives outside the row (a
    /// prefetch hint: never waits on it, never faults). Rows whose value
    /// follows the key inline have nothing more to load.
    #[inline(always)]
    fn prefetch_value(&self) {}

    /// A new absent placeholder for `key`, with room for a value of
    /// `value_capacity` bytes where the storage keeps values in the row.
    fn allocate(key: &[u8], value_capacity: usize) -> NonNull<Self>;

    /// Frees a row made by [`RowKind::allocate`].
    ///
    /// # Safety
    /// No reference to the row may exist or be created afterwards.
    unsafe fn free(row: NonNull<Self>);

    /// The current version word.
    #[inline(always)]
    fn word(&self) -> u64 {
        self.word_cell().load(Ordering::Acquire)
    }

    /// Tries to lock; returns the word seen before locking.
    #[inline]
    fn try_lock(&self) -> Option<u64> {
        let cell = self.word_cell();
        let current = cell.load(Ordering::Acquire);
        if current & LOCKED != 0 {
            return None;
        }
        let locked = cell.compare_exchange(current, current | LOCKED, Ordering::AcqRel, Ordering::Acquire).ok();
        // IMPORTANT: the writer's fence of the seqlock: a reader that sees
        // any value store made after this lock also sees the lock.
        fence(Ordering::Release);
        locked
    }

    /// Locks, spinning up to `spins` times.
    fn lock(&self, spins: u32) -> Option<u64> {
        for _ in 0..spins.max(1) {
            if let Some(word) = self.try_lock() {
                return Some(word);
            }
            std::hint::spin_loop();
        }
        None
    }

    /// Stores the word (which must keep or drop the lock as the caller
    /// intends) with release ordering, publishing the value.
    #[inline]
    fn store_word(&self, word: u64) {
        self.word_cell().store(word, Ordering::Release);
    }

    /// Unlocks without changing the version. An atomic and-not, not a
    /// load + store: DBXN's committer clears UNPERSISTED on a row that
    /// another writer may hold locked, and a plain store here could bring
    /// the bit back.
    #[inline]
    fn unlock(&self) {
        let previous = self.word_cell().fetch_and(!LOCKED, Ordering::Release);
        debug_assert!(previous & LOCKED != 0);
    }
}

/// A header followed by the key: the layout every row kind shares.
///
/// # Safety
/// `H` must be `repr(C)`, 8-aligned, a multiple of 8 bytes, and start every
/// allocation made by [`alloc_keyed`].
pub(crate) unsafe trait KeyedHeader: Sized {
    /// Length of the key that follows the header.
    fn key_len(&self) -> usize;
}

fn keyed_layout<H: KeyedHeader>(key_len: usize, extra: usize) -> Layout {
    const { assert!(std::mem::align_of::<H>() == 8 && std::mem::size_of::<H>().is_multiple_of(8)) };
    Layout::from_size_align(std::mem::size_of::<H>() + key_len.next_multiple_of(8) + extra, 8)
        .expect("row layout overflow")
}

/// Allocates `header`, then `key`, then `extra` zeroed bytes.
pub(crate) fn alloc_keyed<H: KeyedHeader>(header: H, key: &[u8], extra: usize) -> NonNull<H> {
    debug_assert_eq!(header.key_len(), key.len());
    let layout = keyed_layout::<H>(key.len(), extra);
    // SAFETY: the layout has a non-zero size (the header is not empty).
    let pointer = unsafe { alloc(layout) } as *mut H;
    let Some(row) = NonNull::new(pointer) else { handle_alloc_error(layout) };
    // SAFETY: `pointer` is valid for the layout's size and 8-aligned; the
    // key and the extra area lie inside it, after the header.
    unsafe {
        pointer.write(header);
        let tail = (pointer as *mut u8).add(std::mem::size_of::<H>());
        std::ptr::copy_nonoverlapping(key.as_ptr(), tail, key.len());
        std::ptr::write_bytes(tail.add(key.len()), 0, layout.size() - std::mem::size_of::<H>() - key.len());
    }
    row
}

/// The key stored after `header`.
pub(crate) fn key_after<H: KeyedHeader>(header: &H) -> &[u8] {
    // SAFETY: `header` starts an allocation of `alloc_keyed`, which put
    // `key_len` immutable key bytes right after it.
    unsafe {
        std::slice::from_raw_parts((header as *const H as *const u8).add(std::mem::size_of::<H>()), header.key_len())
    }
}

/// Frees an allocation of [`alloc_keyed`] (after dropping the header).
///
/// # Safety
/// `row` came from `alloc_keyed` with this `extra`, and no reference to it
/// remains.
pub(crate) unsafe fn free_keyed<H: KeyedHeader>(row: NonNull<H>, extra: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let layout = keyed_layout::<H>(row.as_ref().key_len(), extra);
        std::ptr::drop_in_place(row.as_ptr());
        dealloc(row.as_ptr() as *mut u8, layout);
    }
}

/// A value buffer outside the record, for values larger than the inline
/// area: `capacity` bytes of words, immutable capacity.
#[repr(C)]
struct External {
    capacity: usize,
}

impl External {
    fn layout(capacity: usize) -> Layout {
        Layout::from_size_align(8 + capacity, 8).expect("value layout overflow")
    }

    fn allocate(capacity: usize) -> NonNull<External> {
        let capacity = capacity.next_multiple_of(8);
        let layout = Self::layout(capacity);
        // SAFETY: non-zero size.
        let pointer = unsafe { alloc(layout) } as *mut External;
        let Some(buffer) = NonNull::new(pointer) else { handle_alloc_error(layout) };
        // SAFETY: valid for `layout`; the words follow the capacity field.
        unsafe {
            pointer.write(External { capacity });
            std::ptr::write_bytes((pointer as *mut u8).add(8), 0, capacity);
        }
        buffer
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `allocate` made `capacity` bytes of words after the field.
        unsafe { std::slice::from_raw_parts((self as *const External as *const AtomicU64).add(1), self.capacity / 8) }
    }
}

/// A retired external value buffer (freed once the horizon passes it).
pub struct RetiredValue(NonNull<External>);

// SAFETY: a retired buffer is unreachable from shared structures; the
// owner of this handle frees it once.
unsafe impl Send for RetiredValue {}

impl RetiredValue {
    /// Frees the buffer.
    ///
    /// # Safety
    /// No reader may still hold it (the epochs' horizon passed its stamp).
    pub unsafe fn free(self) {
        // SAFETY: allocated by `External::allocate` with this capacity.
        unsafe {
            let capacity = self.0.as_ref().capacity;
            dealloc(self.0.as_ptr() as *mut u8, External::layout(capacity));
        }
    }
}

/// The DRAM storage's row: version word, key, value (module docs).
#[repr(C)]
pub struct Record {
    word: AtomicU64,
    /// Value length (meaningful while the row is present).
    len: AtomicU32,
    /// Bytes of the inline value area after the key (a multiple of 8).
    inline_capacity: u32,
    /// The value's buffer when it does not fit inline (else null).
    external: AtomicPtr<External>,
    key_len: u16,
    /// Set while the row sits in a reclaimer's queue (`storage::table`).
    queued: AtomicU16,
    /// Where `mmdb` keeps the row (`storage::nvm_tuples`): 0 not yet
    /// placed, 1 in DRAM, `n >= 2` in the pool's volatile region at unit
    /// `n - 2`. Every other engine leaves it 0.
    home: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Record>() == 32 && std::mem::align_of::<Record>() == 8);

// SAFETY: repr(C), 8-aligned, 32 bytes, and every Record is made by
// `alloc_keyed`.
unsafe impl KeyedHeader for Record {
    fn key_len(&self) -> usize {
        self.key_len as usize
    }
}

impl HashEntry for Record {
    #[inline]
    fn key(&self) -> &[u8] {
        key_after(self)
    }
}

impl RowKind for Record {
    #[inline(always)]
    fn word_cell(&self) -> &AtomicU64 {
        &self.word
    }

    fn queued_flag(&self) -> &AtomicU16 {
        &self.queued
    }

    fn allocate(key: &[u8], value_capacity: usize) -> NonNull<Self> {
        let inline_capacity = value_capacity.next_multiple_of(8).min(u32::MAX as usize / 2);
        let header = Record {
            word: AtomicU64::new(word_of(0, ABSENT)),
            len: AtomicU32::new(0),
            inline_capacity: inline_capacity as u32,
            external: AtomicPtr::new(std::ptr::null_mut()),
            key_len: u16::try_from(key.len()).expect("keys are at most u16::MAX / 2 bytes (checked by Table)"),
            queued: AtomicU16::new(0),
            home: AtomicU32::new(0),
        };
        alloc_keyed(header, key, inline_capacity)
    }

    unsafe fn free(row: NonNull<Self>) {
        // SAFETY: guaranteed by the caller; the external buffer belongs to
        // the record alone.
        unsafe {
            let external = row.as_ref().external.load(Ordering::Relaxed);
            if let Some(external) = NonNull::new(external) {
                RetiredValue(external).free();
            }
            let extra = row.as_ref().inline_capacity as usize;
            free_keyed(row, extra);
        }
    }
}

impl Record {
    /// Where `mmdb` keeps the row (see the field).
    #[inline(always)]
    pub(crate) fn home(&self) -> &AtomicU32 {
        &self.home
    }

    /// Bytes of value the row holds room for in DRAM (its inline area, or
    /// its external buffer).
    pub(crate) fn value_capacity(&self) -> usize {
        self.value_words().len() * 8
    }

    /// The record's key.
    pub fn key(&self) -> &[u8] {
        key_after(self)
    }

    /// The current version word.
    #[inline(always)]
    pub fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    fn inline_words(&self) -> &[AtomicU64] {
        // SAFETY: `allocate` put `inline_capacity` bytes of zeroed words
        // after the 8-aligned key.
        unsafe {
            let start = (self as *const Record as *const u8).add(32 + (self.key_len as usize).next_multiple_of(8));
            std::slice::from_raw_parts(start as *const AtomicU64, self.inline_capacity as usize / 8)
        }
    }

    /// The words holding the value now (inline or external) and their
    /// capacity in bytes.
    #[inline]
    fn value_words(&self) -> &[AtomicU64] {
        let external = self.external.load(Ordering::Acquire);
        if external.is_null() {
            self.inline_words()
        } else {
            // SAFETY: a published external buffer is freed only after it
            // was replaced and the epochs' horizon passed; readers are
            // announced in an epoch (or hold the row's lock, or run alone).
            unsafe { (*external).words() }
        }
    }

    /// Reads a stable (word, value) pair, copying the value into `out`
    /// (cleared when absent). Fails if the record stays locked or keeps
    /// changing. The caller must be announced in an epoch (or be alone).
    pub fn read_stable(&self, out: &mut Vec<u8>) -> Option<Snapshot> {
        for _ in 0..READ_SPINS {
            let before = self.word.load(Ordering::Acquire);
            if before & LOCKED != 0 {
                std::hint::spin_loop();
                continue;
            }
            out.clear();
            if before & ABSENT == 0 {
                let words = self.value_words();
                // A torn read may pair a length with another buffer: clamp
                // to the buffer actually read (the re-check rejects it).
                let len = (self.len.load(Ordering::Relaxed) as usize).min(words.len() * 8);
                copy_out(words, len, out);
            }
            // IMPORTANT: the reader's fence of the seqlock.
            fence(Ordering::Acquire);
            let after = self.word.load(Ordering::Relaxed);
            if before == after {
                return Some(Snapshot { word: before });
            }
        }
        None
    }

    /// Copies the value while this thread holds the lock (no writer can
    /// run); `out` is cleared, and left empty when the row is absent.
    pub fn read_locked(&self, out: &mut Vec<u8>) {
        debug_assert!(self.word() & LOCKED != 0, "read_locked without the lock");
        out.clear();
        if self.word() & ABSENT == 0 {
            let words = self.value_words();
            copy_out(words, (self.len.load(Ordering::Relaxed) as usize).min(words.len() * 8), out);
        }
    }

    /// Replaces the value while locked (`None`: no value; the caller sets
    /// ABSENT in the word it stores). In place when the value fits the
    /// inline area or the current external buffer; else a new external
    /// buffer, and the old one is handed to `retire`.
    pub fn set_value_locked(&self, value: Option<&[u8]>, retire: &mut dyn FnMut(RetiredValue)) {
        debug_assert!(self.word() & LOCKED != 0, "set_value_locked without the lock");
        let Some(value) = value else {
            self.len.store(0, Ordering::Relaxed);
            return;
        };
        let external = self.external.load(Ordering::Acquire);
        if value.len() <= self.inline_capacity as usize {
            copy_in(self.inline_words(), value);
            self.len.store(value.len() as u32, Ordering::Relaxed);
            if let Some(old) = NonNull::new(external) {
                self.external.store(std::ptr::null_mut(), Ordering::Release);
                retire(RetiredValue(old));
            }
            return;
        }
        // SAFETY: under the lock the current buffer cannot be replaced.
        if let Some(current) = NonNull::new(external).filter(|e| unsafe { e.as_ref() }.capacity >= value.len()) {
            // SAFETY: as above.
            copy_in(unsafe { current.as_ref() }.words(), value);
            self.len.store(value.len() as u32, Ordering::Relaxed);
            return;
        }
        let fresh = External::allocate(value.len());
        // SAFETY: just allocated, not yet shared.
        copy_in(unsafe { fresh.as_ref() }.words(), value);
        self.len.store(value.len() as u32, Ordering::Relaxed);
        // IMPORTANT: Release publishes the filled buffer.
        self.external.store(fresh.as_ptr(), Ordering::Release);
        if let Some(old) = NonNull::new(external) {
            retire(RetiredValue(old));
        }
    }

    /// Stores the word (which must keep or drop the lock as the caller
    /// intends) with release ordering, publishing the value.
    #[inline]
    pub fn store_word(&self, word: u64) {
        self.word.store(word, Ordering::Release);
    }

    /// Tries to lock; returns the word seen before locking.
    #[inline]
    pub fn try_lock(&self) -> Option<u64> {
        RowKind::try_lock(self)
    }

    /// Locks, spinning up to `spins` times.
    pub fn lock(&self, spins: u32) -> Option<u64> {
        RowKind::lock(self, spins)
    }

    /// Unlocks without changing the version (see [`RowKind::unlock`]).
    #[inline]
    pub fn unlock(&self) {
        RowKind::unlock(self)
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

    /// Value and word without a transaction (recovery, checkpoints, checks
    /// and tests; see [`Record::read_stable`] for the caller's duty).
    pub fn copy_value(&self, out: &mut Vec<u8>) -> Option<Snapshot> {
        self.read_stable(out)
    }
}

/// Appends `len` bytes of `words` to `out`. A writer may be changing the
/// words (the caller's seqlock re-check rejects a torn copy), so they are
/// copied as relaxed atomic loads, 64 bytes a step (`pmtx_pm::word_copy`),
/// straight into `out`'s spare capacity, not zero-filled first.
#[inline]
pub(crate) fn copy_out(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    let words = &words[..len.div_ceil(8)];
    let start = out.len();
    out.reserve(words.len() * 8);
    pmtx_pm::word_copy::load_words(words, &mut out.spare_capacity_mut()[..words.len() * 8]);
    // SAFETY: `load_words` initialized `words.len() * 8` bytes past
    // `start`, and `len` is at most that.
    unsafe { out.set_len(start + len) };
}

/// Writes `value` into `words` (which hold at least its length).
#[inline]
pub(crate) fn copy_in(words: &[AtomicU64], value: &[u8]) {
    let whole = value.len() / 8 * 8;
    pmtx_pm::word_copy::store_words(words, &value[..whole]);
    let rest = &value[whole..];
    if !rest.is_empty() {
        let mut bytes = [0u8; 8];
        bytes[..rest.len()].copy_from_slice(rest);
        words[whole / 8].store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
    }
}

/// The SP^3 family's TIDs carry the committing worker in their low bits
/// (the paper's `<threadID, logicID>`: a worker's TIDs grow, so the TID is
/// also its logical id), so a row's version word names its last writer.
pub const SP3_WORKER_BITS: u32 = 8;
/// Most workers an SP^3-family engine numbers in [`SP3_WORKER_BITS`].
pub const SP3_MAX_WORKERS: usize = 1 << SP3_WORKER_BITS;

/// The worker that committed `tid` on an SP^3-family engine.
#[inline(always)]
pub(crate) fn sp3_writer_of(tid: u64) -> usize {
    (tid & (SP3_MAX_WORKERS as u64 - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_in_and_out_round_trip_every_length() {
        for len in 0..100usize {
            let value: Vec<u8> = (0..len).map(|at| (at * 7 + len) as u8).collect();
            let words: Vec<AtomicU64> = (0..len.div_ceil(8) + 1).map(|_| AtomicU64::new(u64::MAX)).collect();
            copy_in(&words, &value);
            // Appended after what `out` holds, which stays.
            let mut out = vec![9u8; 3];
            copy_out(&words, len, &mut out);
            assert_eq!(&out[..3], &[9, 9, 9]);
            assert_eq!(&out[3..], &value[..], "length {len}");
            // The word past the value is untouched.
            assert_eq!(words[len.div_ceil(8)].load(Ordering::Relaxed), u64::MAX);
        }
    }

    fn install(record: &Record, value: Option<&[u8]>, tid: u64) -> Vec<RetiredValue> {
        let mut retired = Vec::new();
        record.lock(1).unwrap();
        record.set_value_locked(value, &mut |old| retired.push(old));
        record.store_word(word_of(tid, if value.is_some() { 0 } else { ABSENT }));
        retired
    }

    #[test]
    fn values_grow_into_external_buffers_and_shrink_back_inline() {
        let row = Record::allocate(b"key", 5);
        // SAFETY: freed at the end of the test, nothing else holds it.
        let record = unsafe { row.as_ref() };
        assert_eq!(record.key(), b"key");
        let mut out = Vec::new();
        assert!(record.read_stable(&mut out).unwrap().is_absent());
        for (tid, value) in [&b"small"[..], b"twelve bytes", &[7u8; 100], &[9u8; 64], b"tiny", &[]].iter().enumerate() {
            let retired = install(record, Some(value), tid as u64 + 1);
            let snapshot = record.read_stable(&mut out).unwrap();
            assert_eq!(snapshot.word, word_of(tid as u64 + 1, 0));
            assert_eq!(&out, value);
            for old in retired {
                // SAFETY: single-threaded test: no reader holds it.
                unsafe { old.free() };
            }
        }
        assert!(install(record, None, 10).is_empty());
        assert!(record.read_stable(&mut out).unwrap().is_absent());
        assert!(out.is_empty());
        // SAFETY: no reference remains.
        unsafe { Record::free(row) };
    }

    #[test]
    fn a_reader_never_returns_a_torn_value() {
        let row = Record::allocate(b"k", 64);
        let address = row.as_ptr() as usize;
        // SAFETY: the record lives until the end of the test.
        install(unsafe { row.as_ref() }, Some(&[1u8; 64]), 1);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                // SAFETY: as above.
                let record = unsafe { &*(address as *const Record) };
                let mut tid = 2;
                while !stop.load(Ordering::Relaxed) {
                    let fill = [tid as u8; 64];
                    assert!(install(record, Some(&fill), tid).is_empty());
                    tid += 1;
                }
            })
        };
        // SAFETY: as above.
        let record = unsafe { row.as_ref() };
        let mut out = Vec::new();
        for _ in 0..200_000 {
            if let Some(snapshot) = record.read_stable(&mut out) {
                assert!(out.iter().all(|byte| *byte == out[0]), "torn value {out:?}");
                assert_eq!(out[0], tid_of(snapshot.word) as u8);
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        // SAFETY: the writer is gone.
        unsafe { Record::free(row) };
    }
}
