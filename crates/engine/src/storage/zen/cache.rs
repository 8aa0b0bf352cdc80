//! The Met-Cache (zen-plus.txt §3.2): per-tuple DRAM metadata plus a
//! bounded, per-thread CLOCK cache of tuple values.
//!
//! # What lives where
//!
//! Every logical tuple the index knows has one [`Row`] in DRAM (the index
//! maps key -> row). A row is the Met-Cache entry's metadata part:
//!
//! * `word` — the CC-Meta field. For Silo's OCC (`cc::protocols::silo`) it is the
//!   same version word as `storage::record` (LOCKED, ABSENT, TID); the TID *is* the
//!   Tx-CTS of the version, so it survives eviction and is rebuilt from the
//!   NVM-tuple header at recovery;
//! * `slot` — the NVM-tuple pointer: pool offset of the latest committed
//!   version in the PM heap (0: none), and `len`, its value length;
//! * `tuple_id` — the tuple ID written into every version's header;
//! * `clock` — the CLOCK reference bit;
//! * `cached` — the tuple data, if cached: an immutable [`Cached`] tagged
//!   with the Tx-CTS it holds, published with a release store and reclaimed
//!   through crossbeam-epoch.
//!
//! The tuple data is what the DRAM budget bounds: each worker owns a
//! [`ClockRing`] region that admits entries while their bytes fit its share
//! of the budget and evicts by CLOCK, skipping entries whose row is locked
//! (the paper's *active* bit: a committing writer holds it). Reads of an
//! uncached tuple copy the value from the NVM-tuple at `slot` and fill the
//! reader's own region, so the database can be much larger than the cache.
//!
//! Deviations from the paper, and why they are sound:
//!
//! * Rows (about 48 bytes each) stay in DRAM for every key, like the index;
//!   only values are cached. The paper's index points at either a cache
//!   entry or an NVM tuple; here it always points at the row, and the row at
//!   both.
//! * No *dirty* bit and no restore-on-abort: Silo buffers writes in the
//!   write set, and a value is installed only after it is durable, so a
//!   cached value is always a committed, durable version.
//! * No *copy* bit: a committing writer overwrites the row's cached value in
//!   place when it fits (the entry stays charged to the region that admitted
//!   it), else installs a fresh `Cached` into its own region, and the
//!   previous owner's ring entry no longer matches the row's pointer and is
//!   dropped when that owner's hand reaches it (the copy bit's job). A delete
//!   drops the owner's ring entry at once (`Cached` records its owner and
//!   index), so a deleted row is soon unreferenced and can be reclaimed. The
//!   superseded NVM-tuple is handed to the region that owns its chunk at
//!   commit (see `storage::zen::heap`), instead of at eviction.
//! * A cached value carries its Tx-CTS and is used only when it equals the
//!   TID in `word`; a reader copies it seqlock-style (the bytes are atomic
//!   words, and the row's word is re-checked after the copy), so neither a
//!   racing fill of an old version nor an in-place overwrite is ever served.
//!
//! Explained in docs/engines/zen.md.

use crate::epoch::{DeferredFree, Epochs};
use crate::index::HashEntry;
use crate::storage::record::{alloc_keyed, copy_in, copy_out, free_keyed, key_after, KeyedHeader, RowKind};
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// Lock bit of the CC-Meta word (same layout as `storage::record`).
pub(crate) use crate::storage::record::{ABSENT, LOCKED};

/// Bytes charged per cache entry besides its value (the `Cached` header
/// and the ring slot).
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 64;

/// A cached tuple value: one allocation of this header followed by the
/// value's words. Its bytes change only in place by a committing writer
/// holding the row's lock (readers validate against the row's word). Once
/// unpublished from its row it is retired into its owner region's list and
/// freed when the epochs' horizon passes (readers are announced in an epoch
/// for their whole transaction).
#[repr(C)]
pub(crate) struct Cached {
    /// Tx-CTS of the version held.
    cts: AtomicU64,
    len: AtomicU32,
    /// The worker region that admitted (and is charged for) this entry.
    owner: u32,
    /// Its position in the owner's ring (`u32::MAX` until admitted).
    ring_index: AtomicU32,
    /// Words after the header.
    capacity_words: u32,
}

const _: () = assert!(std::mem::size_of::<Cached>() == 24 && std::mem::align_of::<Cached>() == 8);

impl Cached {
    fn layout(words: usize) -> Layout {
        Layout::from_size_align(std::mem::size_of::<Cached>() + words * 8, 8).expect("cache entry layout")
    }

    /// A new, unpublished entry holding `value` at `cts`, to be admitted by
    /// region `owner`.
    pub(crate) fn allocate(cts: u64, value: &[u8], owner: usize) -> NonNull<Cached> {
        let words = value.len().div_ceil(8);
        let layout = Self::layout(words);
        // SAFETY: non-zero size (the header).
        let pointer = unsafe { alloc(layout) } as *mut Cached;
        let Some(entry) = NonNull::new(pointer) else { handle_alloc_error(layout) };
        // SAFETY: `pointer` is valid for the layout; the words follow the
        // header and are zeroed before use.
        unsafe {
            pointer.write(Cached {
                cts: AtomicU64::new(0),
                len: AtomicU32::new(0),
                owner: owner as u32,
                ring_index: AtomicU32::new(u32::MAX),
                capacity_words: words as u32,
            });
            std::ptr::write_bytes((pointer as *mut u8).add(std::mem::size_of::<Cached>()), 0, words * 8);
            let written = entry.as_ref().overwrite(cts, value);
            debug_assert!(written);
        }
        entry
    }

    /// Makes `entry` (unpublished, unreachable: freed from a region's
    /// retired list or never published) hold `value` at `cts` for region
    /// `owner`, as [`Cached::allocate`] would; the value must fit its
    /// capacity exactly (same word count).
    ///
    /// # Safety
    /// No other reference to `entry` may exist.
    unsafe fn reuse(entry: NonNull<Cached>, cts: u64, value: &[u8], owner: usize) {
        // SAFETY: exclusive (the caller's contract); the header is
        // initialized, so the field may be written through the pointer.
        unsafe {
            debug_assert_eq!(entry.as_ref().capacity_words as usize, value.len().div_ceil(8));
            (*entry.as_ptr()).owner = owner as u32;
            let entry = entry.as_ref();
            entry.ring_index.store(u32::MAX, Ordering::Relaxed);
            let written = entry.overwrite(cts, value);
            debug_assert!(written);
        }
    }

    /// Frees an entry made by [`Cached::allocate`].
    ///
    /// # Safety
    /// No reference to it may exist or be created afterwards.
    pub(crate) unsafe fn free(entry: NonNull<Cached>) {
        // SAFETY: guaranteed by the caller; the layout is the allocation's.
        unsafe {
            let words = entry.as_ref().capacity_words as usize;
            dealloc(entry.as_ptr() as *mut u8, Self::layout(words));
        }
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `allocate` put `capacity_words` initialized words after
        // the header.
        unsafe {
            std::slice::from_raw_parts((self as *const Cached).add(1) as *const AtomicU64, self.capacity_words as usize)
        }
    }

    /// Tx-CTS of the version held.
    #[inline]
    pub(crate) fn cts(&self) -> u64 {
        self.cts.load(Ordering::Acquire)
    }

    /// Appends the value to `out` (a racing overwrite is caught by the
    /// caller's re-check of the row's word).
    #[inline]
    pub(crate) fn copy_into(&self, out: &mut Vec<u8>) {
        let words = self.words();
        let len = (self.len.load(Ordering::Relaxed) as usize).min(words.len() * 8);
        copy_out(words, len, out);
    }

    /// Overwrites the value in place if it fits (row locked by the caller).
    pub(crate) fn overwrite(&self, cts: u64, value: &[u8]) -> bool {
        let words = self.words();
        if value.len() > words.len() * 8 {
            return false;
        }
        // Readers of the old version re-check the row's word, which the
        // caller holds locked; they never pair these bytes with `cts`.
        copy_in(words, value);
        self.len.store(value.len() as u32, Ordering::Relaxed);
        self.cts.store(cts, Ordering::Release);
        true
    }

    /// The region that admitted the entry and its index there.
    pub(crate) fn ring_slot(&self) -> (usize, u32) {
        (self.owner as usize, self.ring_index.load(Ordering::Acquire))
    }
}

/// A cache entry unpublished from its row, waiting for the horizon.
pub(crate) struct RetiredCached(NonNull<Cached>);

// SAFETY: unreachable from shared structures; freed once by its list.
unsafe impl Send for RetiredCached {}

/// One logical tuple's DRAM state (see the module documentation), followed
/// in the same allocation by its key.
#[repr(C)]
pub(crate) struct Row {
    word: AtomicU64,
    slot: AtomicU64,
    tuple_id: AtomicU64,
    cached: AtomicPtr<Cached>,
    len: AtomicU32,
    /// Tombstones in the regions' queues that point at this row.
    tombstones: AtomicU32,
    /// Met-Cache ring entries that point at this row.
    ring_refs: AtomicU32,
    clock: AtomicBool,
    _pad: u8,
    /// Set while the row sits in a reclamation queue (`storage::table`).
    queued: AtomicU16,
    key_len: u16,
    _reserved: [u16; 3],
}

const _: () = assert!(std::mem::size_of::<Row>() == 56 && std::mem::align_of::<Row>() == 8);

// SAFETY: repr(C), 8-aligned, a multiple of 8 bytes, and every Row is made
// by `alloc_keyed`.
unsafe impl KeyedHeader for Row {
    fn key_len(&self) -> usize {
        self.key_len as usize
    }
}

impl HashEntry for Row {
    #[inline]
    fn key(&self) -> &[u8] {
        key_after(self)
    }
}

impl RowKind for Row {
    /// The cached value lives apart from the row, one pointer further. A
    /// prefetch never faults, so a pointer that is being replaced is
    /// harmless: nothing is read through it.
    #[inline]
    fn prefetch_value(&self) {
        let cached = self.cached_ptr();
        if !cached.is_null() {
            let lines = (std::mem::size_of::<Cached>() + self.len()).div_ceil(64).min(16);
            crate::index::hash::prefetch_lines(cached as *const u8, lines);
        }
    }

    #[inline(always)]
    fn word_cell(&self) -> &AtomicU64 {
        &self.word
    }

    fn queued_flag(&self) -> &AtomicU16 {
        &self.queued
    }

    /// An absent placeholder (get-with-insert) with no NVM-tuple.
    fn allocate(key: &[u8], _value_capacity: usize) -> NonNull<Self> {
        let header = Row {
            word: AtomicU64::new(crate::storage::record::word_of(0, ABSENT)),
            slot: AtomicU64::new(0),
            tuple_id: AtomicU64::new(0),
            cached: AtomicPtr::new(std::ptr::null_mut()),
            len: AtomicU32::new(0),
            tombstones: AtomicU32::new(0),
            ring_refs: AtomicU32::new(0),
            clock: AtomicBool::new(false),
            _pad: 0,
            queued: AtomicU16::new(0),
            key_len: u16::try_from(key.len()).expect("keys are at most u16::MAX / 2 bytes (checked by Table)"),
            _reserved: [0; 3],
        };
        alloc_keyed(header, key, 0)
    }

    unsafe fn free(row: NonNull<Self>) {
        // SAFETY: guaranteed by the caller; dropping the header frees the
        // cached value.
        unsafe { free_keyed(row, 0) }
    }
}

impl Row {
    /// The row's key.
    pub(crate) fn key(&self) -> &[u8] {
        key_after(self)
    }

    /// The CC-Meta word.
    #[inline(always)]
    pub(crate) fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Whether anything outside the table still points at the row: a
    /// tombstone in a region's queue or a Met-Cache ring entry. Such a row
    /// is not unlinked (and freed) until they are gone.
    pub(crate) fn referenced(&self) -> bool {
        self.tombstones.load(Ordering::Acquire) != 0 || self.ring_refs.load(Ordering::Acquire) != 0
    }

    /// A tombstone now points at the row.
    pub(crate) fn add_tombstone_ref(&self) {
        self.tombstones.fetch_add(1, Ordering::AcqRel);
    }

    /// A tombstone pointing at the row left its queue.
    pub(crate) fn drop_tombstone_ref(&self) {
        let before = self.tombstones.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0);
    }

    /// The NVM-tuple of the latest committed version (0: none).
    ///
    /// IMPORTANT: SeqCst, paired with the fence before a committer reads its
    /// garbage stamp and with the fence after a reader announces its epoch,
    /// so either the reader sees the new slot or the collector sees the
    /// reader (`storage::zen::heap`, "reclamation").
    #[inline]
    pub(crate) fn slot(&self) -> u64 {
        self.slot.load(Ordering::SeqCst)
    }

    /// Value length of the version at `slot`.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire) as usize
    }

    /// Points the row at a new NVM-tuple (row locked, or recovery).
    #[inline]
    pub(crate) fn set_slot(&self, slot: u64, len: usize) {
        self.len.store(len as u32, Ordering::Release);
        self.slot.store(slot, Ordering::SeqCst);
    }

    /// Tuple ID (0: not assigned yet).
    #[inline]
    pub(crate) fn tuple_id(&self) -> u64 {
        self.tuple_id.load(Ordering::Relaxed)
    }

    /// Sets the tuple ID (row locked, or recovery).
    #[inline]
    pub(crate) fn set_tuple_id(&self, id: u64) {
        self.tuple_id.store(id, Ordering::Relaxed);
    }

    /// Sets the CLOCK bit (a cache hit), avoiding the store when it is set.
    #[inline]
    pub(crate) fn touch(&self) {
        if !self.clock.load(Ordering::Relaxed) {
            self.clock.store(true, Ordering::Relaxed);
        }
    }

    /// The cached value, if any. The caller is announced in an epoch (or
    /// holds the owner ring's lock, or runs alone), which keeps it alive.
    #[inline]
    pub(crate) fn cached(&self) -> Option<&Cached> {
        // SAFETY: a published entry is freed only after it was unpublished
        // and the horizon passed (see `Cached`).
        unsafe { self.cached.load(Ordering::Acquire).as_ref() }
    }

    /// The cached value's address (null: none), for compare-exchange.
    #[inline]
    pub(crate) fn cached_ptr(&self) -> *mut Cached {
        self.cached.load(Ordering::Acquire)
    }

    /// Replaces the cached value by `new` if it still is `current`; on
    /// success the caller retires `current` (if non-null).
    pub(crate) fn replace_cached(&self, current: *mut Cached, new: *mut Cached) -> bool {
        self.cached.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Installs `new` unconditionally (row locked by a committing writer);
    /// returns the old value, which the caller retires.
    pub(crate) fn install_cached(&self, new: *mut Cached) -> Option<NonNull<Cached>> {
        NonNull::new(self.cached.swap(new, Ordering::AcqRel))
    }
}

impl Drop for Row {
    fn drop(&mut self) {
        if let Some(cached) = NonNull::new(*self.cached.get_mut()) {
            // SAFETY: the row is being dropped with its table (or after the
            // horizon passed its unlink), so no one references its value.
            unsafe { Cached::free(cached) };
        }
    }
}

/// A row pointer held by a cache region: a row with ring entries is never
/// unlinked (`Row::referenced`), so it lives as long as its table, which
/// outlives every region (both belong to the engine).
#[derive(Clone, Copy)]
struct RowPtr(*const Row);

// SAFETY: see `RowPtr`; rows are Sync (atomics only).
unsafe impl Send for RowPtr {}

struct RingEntry {
    row: RowPtr,
    /// Address of the `Cached` this region installed (compared, never
    /// dereferenced).
    cached: usize,
    cost: u64,
}

/// One worker's Met-Cache region: CLOCK over the entries it installed,
/// and the entries of this region unpublished from their rows, waiting for
/// the horizon.
pub(crate) struct ClockRing {
    entries: Vec<Option<RingEntry>>,
    vacant: Vec<usize>,
    hand: usize,
    bytes: u64,
    budget_bytes: u64,
    retired: DeferredFree<RetiredCached>,
    /// Entries past the horizon kept for reuse instead of freed, by
    /// capacity in words: once the region is at its budget every insert
    /// evicts one entry and allocates another, and reusing them saves a
    /// `malloc` and a `free` each. At most [`ClockRing::spare_limit`]
    /// bytes, beyond the budget (they hold no tuple).
    spare: Vec<(u32, Vec<RetiredCached>)>,
    spare_bytes: u64,
}

impl ClockRing {
    /// A region of `budget_bytes`.
    pub(crate) fn new(budget_bytes: u64) -> Self {
        Self {
            entries: Vec::new(),
            vacant: Vec::new(),
            hand: 0,
            bytes: 0,
            budget_bytes,
            retired: DeferredFree::default(),
            spare: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// Bytes of spare entries a region keeps: 1/32 of its budget.
    fn spare_limit(&self) -> u64 {
        self.budget_bytes / 32
    }

    /// A new, unpublished entry holding `value` at `cts`, admitted by this
    /// region (`owner`): a spare one of the same capacity if any.
    pub(crate) fn allocate(&mut self, cts: u64, value: &[u8], owner: usize) -> NonNull<Cached> {
        let words = value.len().div_ceil(8) as u32;
        if let Some((_, list)) = self.spare.iter_mut().find(|(capacity, _)| *capacity == words) {
            if let Some(entry) = list.pop() {
                self.spare_bytes -= Cached::layout(words as usize).size() as u64;
                // SAFETY: spare entries are unreachable (see `spare`).
                unsafe { Cached::reuse(entry.0, cts, value, owner) };
                return entry.0;
            }
        }
        Cached::allocate(cts, value, owner)
    }

    /// Takes back an entry no reader can reach: kept as a spare while
    /// there is room, else freed.
    ///
    /// # Safety
    /// `entry` is unpublished and no reference to it exists or is created
    /// afterwards by anyone but this region.
    pub(crate) unsafe fn recycle(&mut self, entry: NonNull<Cached>) {
        let limit = self.spare_limit();
        // SAFETY: the caller's contract.
        unsafe { keep_or_free(&mut self.spare, &mut self.spare_bytes, limit, entry) };
    }

    /// Retires an entry of this region that was unpublished from its row
    /// (the stamp is taken now, under the region's lock, so stamps grow).
    pub(crate) fn retire(&mut self, cached: NonNull<Cached>, epochs: &Epochs) {
        // SAFETY: the entry is alive (unpublished, not yet freed).
        debug_assert!(unsafe { cached.as_ref() }.owner as usize != usize::MAX);
        self.retired.push(epochs.stamp(), RetiredCached(cached));
    }

    /// Frees the retired entries the horizon allows.
    fn collect(&mut self, epochs: &Epochs) {
        if self.retired.oldest().is_some_and(|stamp| stamp < epochs.global()) {
            let limit = self.spare_limit();
            let Self { retired, spare, spare_bytes, .. } = self;
            // SAFETY: the horizon passed their stamps: no reader holds them.
            retired.collect(epochs.horizon(), |entry| unsafe { keep_or_free(spare, spare_bytes, limit, entry.0) });
        }
    }

    /// Whether the region caches anything at all.
    pub(crate) fn enabled(&self) -> bool {
        self.budget_bytes > 0
    }

    /// Bytes charged now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charge of a value of `len` bytes.
    pub(crate) fn cost(len: usize) -> u64 {
        len as u64 + ENTRY_OVERHEAD_BYTES
    }

    fn drop_entry(&mut self, index: usize) {
        if let Some(entry) = self.entries[index].take() {
            // SAFETY: a row with a ring entry is not unlinked, hence alive.
            let row = unsafe { &*entry.row.0 };
            let before = row.ring_refs.fetch_sub(1, Ordering::AcqRel);
            debug_assert!(before > 0);
            self.bytes -= entry.cost;
            self.vacant.push(index);
        }
    }

    /// Makes room for `cost` bytes by CLOCK; returns the number of values
    /// evicted, or `None` if the room could not be made (every entry active
    /// or recently used twice around).
    pub(crate) fn make_room(&mut self, cost: u64, epochs: &Epochs) -> Option<u64> {
        self.collect(epochs);
        if cost > self.budget_bytes {
            return None;
        }
        let mut evicted = 0;
        // Two sweeps clear every clock bit; beyond that only active entries
        // remain, and the caller simply does not cache.
        let mut steps = 2 * self.entries.len() + 1;
        while self.bytes + cost > self.budget_bytes {
            if steps == 0 || self.entries.is_empty() {
                return None;
            }
            steps -= 1;
            if self.hand >= self.entries.len() {
                self.hand = 0;
            }
            let index = self.hand;
            self.hand += 1;
            let Some(entry) = &self.entries[index] else { continue };
            // SAFETY: rows outlive the region (see RowPtr).
            let row = unsafe { &*entry.row.0 };
            let current = row.cached_ptr();
            if current as usize != entry.cached {
                // Replaced by a writer (now cached in its region) or evicted:
                // the copy-bit case. Only the accounting remains.
                self.drop_entry(index);
                continue;
            }
            if row.word() & LOCKED != 0 {
                continue; // active: a committing writer holds the row
            }
            if row.clock.swap(false, Ordering::Relaxed) {
                continue; // second chance
            }
            if row.replace_cached(current, std::ptr::null_mut()) {
                evicted += 1;
                // The ring's own entry: the region that admitted it retires
                // it (readers may still hold it).
                // SAFETY: non-null (it equals the entry's address).
                self.retire(unsafe { NonNull::new_unchecked(current) }, epochs);
            }
            self.drop_entry(index);
        }
        Some(evicted)
    }

    /// Records that this region installed `cached` in `row`; returns the
    /// entry's index.
    pub(crate) fn admit(&mut self, row: &Row, cached: NonNull<Cached>, cost: u64) -> usize {
        row.ring_refs.fetch_add(1, Ordering::AcqRel);
        let entry = RingEntry { row: RowPtr(row), cached: cached.as_ptr() as usize, cost };
        self.bytes += cost;
        let index = match self.vacant.pop() {
            Some(index) => {
                self.entries[index] = Some(entry);
                index
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        };
        // SAFETY: `cached` is alive: just installed by the caller.
        unsafe { cached.as_ref() }.ring_index.store(index as u32, Ordering::Release);
        index
    }

    /// Drops the entry at `index` if it still charges `cached` (a deleted
    /// row's value, unpublished by the deleter).
    pub(crate) fn drop_if_holds(&mut self, index: u32, cached: usize) {
        let index = index as usize;
        if self.entries.get(index).is_some_and(|entry| entry.as_ref().is_some_and(|e| e.cached == cached)) {
            self.drop_entry(index);
        }
    }

    /// Undoes the admission of `cached` at `index` (the row changed since
    /// the value was read): unpublishes and retires it if still installed,
    /// and drops the entry.
    pub(crate) fn forget(&mut self, index: usize, row: &Row, cached: NonNull<Cached>, epochs: &Epochs) {
        if row.replace_cached(cached.as_ptr(), std::ptr::null_mut()) {
            self.retire(cached, epochs);
        }
        self.drop_entry(index);
    }
}

/// Keeps `entry` in `spare` if `limit` allows, else frees it.
///
/// # Safety
/// As [`ClockRing::recycle`].
unsafe fn keep_or_free(
    spare: &mut Vec<(u32, Vec<RetiredCached>)>,
    spare_bytes: &mut u64,
    limit: u64,
    entry: NonNull<Cached>,
) {
    // SAFETY: alive and unreachable (the caller's contract).
    let words = unsafe { entry.as_ref() }.capacity_words;
    let size = Cached::layout(words as usize).size() as u64;
    if *spare_bytes + size > limit {
        // SAFETY: as above.
        unsafe { Cached::free(entry) };
        return;
    }
    *spare_bytes += size;
    match spare.iter_mut().find(|(capacity, _)| *capacity == words) {
        Some((_, list)) => list.push(RetiredCached(entry)),
        None => spare.push((words, vec![RetiredCached(entry)])),
    }
}

impl Drop for ClockRing {
    fn drop(&mut self) {
        // The engine is being dropped: no reader can hold a retired entry.
        for (_, entry) in self.retired.drain() {
            // SAFETY: unpublished and unreachable.
            unsafe { Cached::free(entry.0) };
        }
        for entry in self.spare.drain(..).flat_map(|(_, list)| list) {
            // SAFETY: spare entries are unreachable.
            unsafe { Cached::free(entry.0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry retired and freed past the horizon is reused by the next
    /// allocation of its size, holding the new value and owner; spares of
    /// another size are not, and the spares never exceed their limit.
    #[test]
    fn entries_past_the_horizon_are_reused_for_the_same_size_within_the_limit() {
        let epochs = Epochs::new(1, 1);
        // A budget whose spare limit (1/32) holds two 24 + 64-byte entries.
        let mut ring = ClockRing::new(32 * 2 * 88);
        let old = [7u8; 60];
        let entries: Vec<_> = (0..3).map(|cts| ring.allocate(cts + 1, &old, 0)).collect();
        let odd = ring.allocate(9, &[1u8; 20], 0);
        for &entry in &entries {
            ring.retire(entry, &epochs);
        }
        ring.retire(odd, &epochs);
        // Nothing is reused before the horizon passes the stamps.
        let early = ring.allocate(10, &old, 0);
        assert!(!entries.contains(&early));
        epochs.advance();
        ring.collect(&epochs);
        assert!(ring.spare_bytes <= ring.spare_limit(), "{} > {}", ring.spare_bytes, ring.spare_limit());
        let spares: Vec<usize> =
            ring.spare.iter().flat_map(|(_, list)| list.iter().map(|entry| entry.0.as_ptr() as usize)).collect();
        assert_eq!(spares.len(), 2, "two entries fit the limit, the rest were freed");
        let value = [3u8; 57];
        let reused = ring.allocate(42, &value, 5);
        assert!(spares.contains(&(reused.as_ptr() as usize)), "a spare of the same word count is reused");
        // SAFETY: unpublished; freed below.
        let entry = unsafe { reused.as_ref() };
        let mut out = Vec::new();
        entry.copy_into(&mut out);
        assert_eq!((entry.cts(), out.as_slice(), entry.ring_slot()), (42, &value[..], (5, u32::MAX)));
        let other = ring.allocate(43, &[2u8; 200], 0);
        assert!(!spares.contains(&(other.as_ptr() as usize)), "no spare of another size is reused");
        for entry in [early, reused, other] {
            // SAFETY: never published; freed once.
            unsafe { ring.recycle(entry) };
        }
    }
}
