//! Concurrent B+tree with optimistic lock coupling (OLC).
//!
//! # Algorithm
//!
//! Every node carries a [`VersionLock`].  Readers do not write shared memory
//! (the one exception: a scan that meets an empty leaf unlinks it): they
//! descend from the root reading each node's version, the node contents
//! and then the child's version, and re-validate the parent's version after
//! reading the child's (lock coupling).  Any failed validation restarts the
//! operation from the root.  Writers descend the same way and then *upgrade*
//! the optimistic version of the node(s) they modify into a write lock (a CAS
//! that fails if the node changed since it was read).  Nobody ever waits for
//! a lock: a failed upgrade restarts the operation (or, for the optional
//! clean-up steps below, abandons it).
//!
//! * Point operations make one descent.  `get_or_insert_with` returns the
//!   value it finds at the leaf under a validated read, or upgrades the leaf
//!   lock and inserts.  A full leaf is split (locking leaf and parent) and the
//!   operation restarts; if the parent is full too, the operation restarts in
//!   *eager* mode, which splits every full inner node met on the way down
//!   (locking it and its parent), so the leaf split then finds room.  When the
//!   root splits a new root is installed.  Leaf splits use the shortest
//!   separator that divides the two halves (a prefix of the right half's
//!   first key), which keeps separators of long keys short and often inline.
//!   A leaf split for an insert at the very end (start) of the leaf moves
//!   only the last (first) key to the new leaf: keys inserted in ascending
//!   order (TPC-C order lines, queues) then fill their leaves instead of
//!   leaving every leaf half empty.
//! * Removes lock the leaf.  A remove that empties a leaf then tries to
//!   **unlink** it (see "Node reclamation"); so do removes and scans that
//!   meet an empty leaf left behind by an unlink attempt that gave up.
//! * Scans read one leaf at a time (copying out its matching entries under a
//!   validated optimistic read) and move to the next leaf by descending again
//!   from the root with the leaf's fence key — the separator bounding it, as
//!   learned from the validated descent — instead of following sibling links:
//!   forward to the leaf containing the high fence, backward to the leaf
//!   holding the keys just below the low fence.  From each leaf a scan only
//!   delivers keys inside the fences it observed and beyond the fence it
//!   came from: an unlink can widen a leaf's range (see below), so the leaf
//!   reached from a fence may also hold keys that an earlier leaf already
//!   delivered, and a leaf read through a stale ancestor fence may hold keys
//!   beyond the fence the scan will continue from.  The next fence is always
//!   strictly beyond the previous one, so a scan terminates.
//!
//! # Keys
//!
//! Each key slot stores the key's first 16 bytes inline as two big-endian
//! words and a third word that is either the key's length (keys of at most
//! 16 bytes, which have no heap part at all) or the address of an immutable
//! heap blob with the full key.  Comparisons decide on the two words first
//! and only read blobs when two long keys share their first 16 bytes; see
//! `key.rs` for the representation and the argument that this order is the
//! byte-string order (prefixes, trailing zero bytes and short-versus-long
//! keys included).  Separators in inner nodes use the same representation.
//!
//! # Node reclamation
//!
//! When a remove empties a leaf `L` (and `L` is not the root), the remover
//! descends again recording the path and looks for the *anchor*: the lowest
//! ancestor with at least one key (two children).  All nodes strictly
//! between the anchor and `L` have no key and one child, so the anchor's
//! child subtree `T` on the path consists of that chain and the empty `L`.
//! The remover upgrades the recorded versions top-down (anchor, chain, `L`);
//! if any upgrade fails it releases what it holds and gives up — `L` stays,
//! empty, and a later remove or scan meeting it tries again.  Holding all of
//! them, it bumps `L`'s structural version, removes `T`'s child slot and one
//! adjacent separator from the anchor — so a neighbour subtree takes over
//! `T`'s key range — and marks the nodes of `T` obsolete.  If the anchor is
//! the root and is left with one child, that child becomes the root; a
//! writer that finds a root with no keys does the same.  The root is never
//! unlinked otherwise, and a root leaf simply stays, possibly empty.
//!
//! Unlinked nodes go to per-index free lists (one for leaves, one for inner
//! nodes) and are reused for splits; they are returned to the allocator only
//! when the index is dropped.  Node memory is therefore *type-stable*: an
//! address that ever held a node of this index holds a node of the same kind
//! (`is_leaf` never changes) until the index is dropped, so optimistic readers
//! that still hold an address of an unlinked or reused node read valid memory.
//! The lock word of a node only grows across unlink and reuse (unlink marks
//! it obsolete, [`VersionLock::revive`] continues the counter), so a reader
//! holding a version read before the unlink fails validation and restarts,
//! and a recorded leaf structural version never reappears either.
//!
//! Key ranges only change in these ways: a split narrows the range of the
//! node it splits (that node is locked, its version changes); an unlink
//! removes the ranges of the unlinked nodes (all locked) and *widens* the
//! range of a neighbour without locking it; a root collapse changes no range.
//! Hence a range observed through a validated descent is contained in the
//! node's true range for as long as the node's version is unchanged — the
//! fact the scan filtering above and the phantom argument below rely on.
//!
//! # Fingers
//!
//! A caller may keep a [`Finger`] per index and thread (a transaction's
//! worker keeps one per ordered table): after a point get-or-insert it holds
//! the leaf the operation ended in, the leaf's version and the range
//! `[low, high)` the validated descent to it observed (the separators of
//! its ancestors). The next get-or-insert whose key lies in that range reads
//! the leaf's version and, if it is still the finger's, works on the leaf
//! as if a descent had ended there: by the paragraph above, while the
//! version is unchanged the observed range lies inside the leaf's true
//! range, so the key belongs in this leaf; and the operation then validates
//! (or upgrades) exactly that version, as after a descent. An insert by
//! the finger's own thread moves the finger to the version its unlock
//! leaves (the insert changed no range). A split needs the parent, which
//! a finger does not know, so a full leaf sends the operation back to the
//! root. Indexes with keys longer than 16 bytes keep no fingers (fences
//! there may name blobs that an epoch reclaims). Node memory is
//! type-stable and versions only grow, so a stale finger costs one version
//! load and is ignored.
//!
//! # Memory safety of optimistic reads
//!
//! All node fields that change after publication are atomic words
//! ([`AtomicWord`]); nodes are never freed while the index is alive.  Readers
//! clamp counts and treat empty key slots and 0 child addresses as
//! "inconsistent, restart", so torn reads cannot index out of bounds or
//! dereference null.  Each key slot's third word holds 0, an inline length or
//! the address of a live blob: slots vacated by a shift, removal, split or
//! unlink are cleared, so an address is in no slot by the time its blob is
//! retired.  Blobs removed from the tree — leaf keys removed by `remove`,
//! separators removed by an unlink — are retired with [`crossbeam_epoch`]
//! and freed once every thread that was pinned at that time has unpinned.
//! Indexes whose maximum key length exceeds 16 bytes pin for the whole of
//! every operation, so an optimistic reader never dereferences a freed blob
//! even when it reads a torn state that later fails validation.  Indexes
//! with a maximum of at most 16 bytes have no blobs at all and never pin.
//!
//! # Leaf versions and phantom detection
//!
//! Besides its lock word each leaf has a *structural version*
//! ([`OrderedIndex::leaf_version`]) which is incremented — while the leaf is
//! write-locked and **before** the change is applied — by every insert of a
//! new key, every removal, every split of that leaf and its unlink.
//! Overwriting the value of an existing key ([`OrderedIndex::insert`] on a
//! present key) does not change it.
//!
//! [`OrderedIndex::scan`] reports each leaf it read (once, if it reads the
//! same leaf at the same version twice in a row), together with the
//! structural version read inside the same validated optimistic section as the
//! keys it returned from that leaf.  The reported leaves cover the whole key
//! interval the scan examined (from the start bound up to the last key
//! returned when a limit stops the scan, or the whole range otherwise),
//! including leaves that contained no matching key — a scan of an empty range
//! still reports the leaf covering it.  Any later insert of a key `k` into
//! that interval changes the version of a reported leaf: let `L` be the
//! reported leaf whose observed range held `k`.  While `L`'s version is
//! unchanged, `L` has been neither split nor unlinked, so (see "Node
//! reclamation") its true range still contains `k` and the insert lands in
//! `L`, bumping it.  Otherwise `L`'s version has already changed.  This holds
//! when `L` was unlinked and `k` now goes to a neighbour, and when `L`'s
//! memory is reused as another leaf (its version only grows).  A transaction
//! therefore records the `(LeafRef, version)` pairs and at commit checks
//! [`OrderedIndex::validate_leaf`] for each (DBX §3.3.3 / Silo node-set
//! validation).  [`OrderedIndex::get_or_insert_with_info`] reports the exact
//! version transition caused by an insert so a transaction can recognise its
//! own inserts.
//!
//! A [`LeafRef`] stays valid (memory-safe to query) for the lifetime of the
//! index because leaf memory is type-stable; querying it on another index
//! returns `None`/`false`.
//!
//! # Limitations
//!
//! * Only empty nodes are reclaimed: nodes are not merged, so a leaf with one
//!   key left keeps a whole node (and a sparse survivor may keep a chain of
//!   sparse ancestors).
//! * An unlink that loses a race leaves an empty leaf in place until another
//!   remove or scan meets it.  (`set_unlinking(false)`, a test hook, makes
//!   every attempt give up, so tests can reach those states without
//!   contention.)
//! * A scan is not a snapshot across leaves; serializability comes from the
//!   leaf-version validation above.
//! * `get_or_insert_with`'s `make` runs under the leaf's write lock.
//! * Values are opaque `u64`s; the index never dereferences or frees them.
//!
//! Explained in docs/concurrency.md ("Ordered index").

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{self as epoch, Guard};
use parking_lot::Mutex;

use super::key::{free_key, KeyWords, SearchKey, INLINE_KEY_LEN};
use super::striped::StripedCount;
use super::version_lock::{AtomicWord, Restart, VersionLock};
use super::IndexError;

mod check;
mod scan;
mod write;

/// Largest supported node capacity (keys per node).  Node arrays have
/// exactly this many slots, so smaller configured capacities (useful in
/// tests to force splits) leave the rest unused.
pub const MAX_NODE_CAPACITY: usize = 32;
/// Smallest supported node capacity.
pub const MIN_NODE_CAPACITY: usize = 4;
/// Node capacity used by [`OrderedIndex::new`].
pub const DEFAULT_NODE_CAPACITY: usize = MAX_NODE_CAPACITY;

/// Deepest path an unlink records.  A tree grows a level only when its root
/// splits, so this is never reached in practice; deeper leaves are simply
/// not unlinked.
const MAX_PATH: usize = 24;

/// How many times an emptied leaf is looked up again to unlink it when an
/// attempt loses a race.  Each attempt is a descent and a few CAS; none
/// waits.
const UNLINK_ATTEMPTS: usize = 3;

/// Construction parameters for an [`OrderedIndex`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderedIndexConfig {
    /// Longest accepted key, in bytes.
    pub max_key_len: usize,
    /// Maximum number of keys per node, in
    /// `MIN_NODE_CAPACITY..=MAX_NODE_CAPACITY`.
    pub node_capacity: usize,
}

impl OrderedIndexConfig {
    /// Default node capacity with the given maximum key length.
    pub fn new(max_key_len: usize) -> Self {
        Self { max_key_len, node_capacity: DEFAULT_NODE_CAPACITY }
    }
}

/// Direction of a range scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanDirection {
    /// Ascending key order.
    Forward,
    /// Descending key order.
    Reverse,
}

/// Stable identity of a leaf of one particular [`OrderedIndex`].
///
/// Valid to query with [`OrderedIndex::leaf_version`] for the whole lifetime
/// of the index that produced it: leaf memory is never freed before the
/// index is dropped, and a leaf that was unlinked (or reused as another leaf)
/// has a version that was never reported before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeafRef {
    index_id: u64,
    addr: usize,
}

/// The structural-version transition an insert caused on the leaf that
/// received the new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafChange {
    /// Leaf that now holds the key.
    pub leaf: LeafRef,
    /// Version immediately before this insert.
    pub version_before: u64,
    /// Version immediately after this insert (no other change in between).
    pub version_after: u64,
}

/// Result of [`OrderedIndex::get_or_insert_with_info`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetOrInsert {
    /// The value now associated with the key.
    pub value: u64,
    /// `true` if this call inserted the key.
    pub inserted: bool,
    /// `Some` iff `inserted`: the leaf-version transition of the insert.
    /// (If the insert first had to split the leaf, that split is a separate,
    /// earlier version change, so `version_before` will not match a version
    /// recorded before the split.)
    pub leaf_change: Option<LeafChange>,
}

/// One thread's memory of the leaf where its last point operation on an
/// index ended: the leaf, its version then and the key range the descent
/// to it observed. The next operation whose key lies in that range goes
/// straight to the leaf when its version is unchanged, instead of
/// descending from the root (TPC-C's order lines are inserted, and
/// delivered, ten at a time into one leaf). See "Fingers" in the module
/// documentation for why that finds the right leaf.
///
/// A finger is only a hint: any index accepts any finger, and one made by
/// another index, or by this one before the leaf changed, is ignored.
#[derive(Debug, Default, Clone, Copy)]
pub struct Finger {
    /// The index that made it; 0: empty.
    index_id: u64,
    leaf: usize,
    version: u64,
    low: Option<KeyWords>,
    high: Option<KeyWords>,
    /// Operations since the finger last led to the right leaf.
    misses: u32,
}

/// Consecutive misses after which a finger rests.
const FINGER_MISSES_BEFORE_REST: u32 = 8;
/// A resting finger is tried again once every this many operations.
const FINGER_RETRY_EVERY: u32 = 64;

impl Finger {
    /// Forgets the leaf.
    pub fn clear(&mut self) {
        self.index_id = 0;
    }

    /// Whether this operation should check the finger and keep it up to
    /// date: always, unless it missed its last few operations; then only
    /// now and then, to notice when the keys come close again.
    #[inline]
    fn worth_trying(&mut self) -> bool {
        if self.misses < FINGER_MISSES_BEFORE_REST {
            return true;
        }
        self.misses = self.misses.wrapping_add(1).max(FINGER_MISSES_BEFORE_REST);
        if !self.misses.is_multiple_of(FINGER_RETRY_EVERY) {
            return false;
        }
        // This operation refreshes the finger (it is stale by now) and the
        // next one tries it: two operations before it may rest again.
        self.misses = FINGER_MISSES_BEFORE_REST - 2;
        true
    }

    /// Records whether an operation that tried the finger found its leaf.
    #[inline]
    fn note_attempt(&mut self, hit: bool) {
        self.misses = if hit { 0 } else { self.misses.saturating_add(1) };
    }
}

static NEXT_INDEX_ID: AtomicU64 = AtomicU64::new(1);

/// Raises `word` to at least `ts` (sequentially consistent: the read
/// timestamps' argument in `OrderedIndex::raise_read_ts`).
fn raise_word<W: AtomicWord>(word: &W, ts: u64) {
    let mut current = word.load(Ordering::SeqCst);
    while current < ts {
        match word.compare_exchange(current, ts, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

struct Node<W: AtomicWord> {
    lock: VersionLock<W>,
    /// Number of keys.
    count: W,
    /// Structural version (leaves only).  Only grows, across unlink and
    /// reuse.
    leaf_version: W,
    /// Leaves only: the largest timestamp of a timestamp-ordered
    /// transaction that scanned this leaf (`OrderedIndex::raise_read_ts`).
    /// Only grows, across splits (the new sibling inherits it), unlink and
    /// reuse: an over-estimate is safe.
    read_ts: W,
    /// Immutable after construction, also across unlink and reuse.
    is_leaf: bool,
    /// First words of keys `0..count` (the others are 0).  A binary search
    /// mostly reads only these, so they are packed densely: a search of a
    /// full node touches few cache lines.
    p0: [W; MAX_NODE_CAPACITY],
    /// For each position `i`: the key's second word and tag (see `key.rs`;
    /// empty slots hold 0) and slot `i`, at `3i`, `3i + 1`, `3i + 2`; slot
    /// `MAX_NODE_CAPACITY` is the last word.  Slots of leaves hold values
    /// (`0..count`), slots of inner nodes child addresses (`0..=count`);
    /// unused slots hold 0.  A comparison that gets past the first word, and
    /// a lookup that then reads the value, find all three in one line.
    rest: [W; 3 * MAX_NODE_CAPACITY + 1],
}

impl<W: AtomicWord> Node<W> {
    fn boxed(is_leaf: bool) -> Box<Self> {
        Box::new(Self {
            lock: VersionLock::new(),
            count: W::new(0),
            leaf_version: W::new(0),
            read_ts: W::new(0),
            is_leaf,
            p0: std::array::from_fn(|_| W::new(0)),
            rest: std::array::from_fn(|_| W::new(0)),
        })
    }

    fn addr(&self) -> u64 {
        self as *const Self as usize as u64
    }

    #[inline]
    fn p1(&self, i: usize) -> &W {
        &self.rest[3 * i]
    }

    #[inline]
    fn tag(&self, i: usize) -> &W {
        &self.rest[3 * i + 1]
    }

    /// Slot `i`: a value (leaves) or a child address (inner nodes).
    #[inline]
    fn slot(&self, i: usize) -> &W {
        &self.rest[if i < MAX_NODE_CAPACITY { 3 * i + 2 } else { 3 * MAX_NODE_CAPACITY }]
    }

    /// Optimistically read key count, clamped so torn reads stay in bounds.
    #[inline]
    fn count(&self, cap: usize) -> usize {
        (self.count.load(Ordering::Acquire) as usize).min(cap)
    }

    /// The words of key `i`.
    #[inline]
    fn key_words(&self, i: usize) -> KeyWords {
        KeyWords {
            p0: self.p0[i].load(Ordering::Acquire),
            p1: self.p1(i).load(Ordering::Acquire),
            tag: self.tag(i).load(Ordering::Acquire),
        }
    }

    /// Compares key `i` with `key`.
    ///
    /// `g` must be pinned if the index has keys longer than
    /// [`INLINE_KEY_LEN`] (see [`OrderedIndex::with_guard`]).
    #[inline(always)]
    fn cmp_key(&self, i: usize, key: &SearchKey<'_>, _g: &Guard) -> Result<CmpOrdering, Restart> {
        // A torn read may mix the words of different keys; the result is then
        // garbage but the read fails validation.
        if let Some(o) = key.cmp_prefix(self.p0[i].load(Ordering::Acquire), || self.p1(i).load(Ordering::Acquire)) {
            return Ok(o);
        }
        let tag = self.tag(i).load(Ordering::Acquire);
        if tag == 0 {
            return Err(Restart);
        }
        // SAFETY: a non-empty tag is an inline length or the address of a
        // blob that was in this slot at the time of the load, hence not yet
        // retired (slots are cleared before their blob is retired).  Blobs
        // exist only in indexes with long keys, whose operations keep `_g`
        // pinned, so the epoch collector cannot free the blob before the
        // comparison ends.
        Ok(unsafe { key.cmp_tail(tag) })
    }

    // Writer-side helpers: only called with the node write-locked (or on a
    // node not yet published).

    fn set_key(&self, i: usize, w: KeyWords) {
        self.p0[i].store(w.p0, Ordering::Release);
        self.p1(i).store(w.p1, Ordering::Release);
        self.tag(i).store(w.tag, Ordering::Release);
    }

    fn move_key(&self, i: usize, src: &Node<W>, j: usize) {
        self.set_key(i, src.key_words(j));
    }

    fn move_slot(&self, i: usize, src: &Node<W>, j: usize) {
        self.slot(i).store(src.slot(j).load(Ordering::Acquire), Ordering::Release);
    }

    fn clear_key(&self, i: usize) {
        self.set_key(i, KeyWords::EMPTY);
    }

    fn bump_leaf_version(&self) -> u64 {
        let before = self.leaf_version.load(Ordering::Acquire);
        self.leaf_version.store(before + 1, Ordering::Release);
        before
    }

    /// Child `i` of an inner node.
    #[inline]
    fn child(&self, i: usize) -> Result<&Node<W>, Restart> {
        let p = self.slot(i).load(Ordering::Acquire);
        if p == 0 {
            return Err(Restart);
        }
        // SAFETY: child slots of inner nodes only ever hold 0 or addresses of
        // nodes of this index (a torn read of a reused node still reads a
        // child slot, never a value), and nodes are freed only when the index
        // is dropped, which cannot happen while `self` is borrowed.
        Ok(unsafe { &*(p as usize as *const Node<W>) })
    }

    /// First position whose key is `>= key` (and whether it is `== key`).
    #[inline(always)]
    fn lower_bound(&self, n: usize, key: &SearchKey<'_>, g: &Guard) -> Result<(usize, bool), Restart> {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp_key(mid, key, g)? {
                CmpOrdering::Less => lo = mid + 1,
                CmpOrdering::Equal => return Ok((mid, true)),
                CmpOrdering::Greater => hi = mid,
            }
        }
        Ok((lo, false))
    }

    /// First position whose key is `> key`.
    #[inline(always)]
    fn upper_bound(&self, n: usize, key: &SearchKey<'_>, g: &Guard) -> Result<usize, Restart> {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.cmp_key(mid, key, g)? != CmpOrdering::Greater {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// First position inside the lower bound `b`.
    fn start_pos(&self, n: usize, b: Bound<&SearchKey<'_>>, g: &Guard) -> Result<usize, Restart> {
        match b {
            Bound::Included(k) => Ok(self.lower_bound(n, k, g)?.0),
            Bound::Excluded(k) => self.upper_bound(n, k, g),
            Bound::Unbounded => Ok(0),
        }
    }

    /// First position past the upper bound `b`.
    fn end_pos(&self, n: usize, b: Bound<&SearchKey<'_>>, g: &Guard) -> Result<usize, Restart> {
        match b {
            Bound::Included(k) => self.upper_bound(n, k, g),
            Bound::Excluded(k) => Ok(self.lower_bound(n, k, g)?.0),
            Bound::Unbounded => Ok(n),
        }
    }
}

/// RAII write lock: unlocks (producing a new version) on drop, including
/// during unwinding.
struct WriteGuard<'a, W: AtomicWord>(&'a VersionLock<W>);

impl<'a, W: AtomicWord> WriteGuard<'a, W> {
    fn upgrade(lock: &'a VersionLock<W>, v: u64) -> Result<Self, Restart> {
        lock.upgrade(v)?;
        Ok(Self(lock))
    }

    /// Releases the lock marking the node obsolete.
    fn unlock_obsolete(self) {
        self.0.write_unlock_obsolete();
        std::mem::forget(self);
    }
}

impl<W: AtomicWord> Drop for WriteGuard<'_, W> {
    fn drop(&mut self) {
        self.0.write_unlock();
    }
}

/// Where a descent should end.
#[derive(Clone, Copy)]
enum Target<'k> {
    /// The leftmost leaf.
    First,
    /// The rightmost leaf.
    Last,
    /// The leaf whose range contains the key.
    Key(SearchKey<'k>),
    /// The leaf containing the keys immediately below the key.
    Below(SearchKey<'k>),
}

/// What a descent may change on its way down, and what it reports.
#[derive(Clone, Copy)]
struct Descent {
    /// Split full inner nodes (eager mode of inserts).
    split_full: bool,
    /// Replace a root that has no key by its only child.
    collapse_root: bool,
    /// Report the leaf's fence keys (only scans need them; reading them
    /// touches cache lines a point lookup would not).
    fences: bool,
}

const READ: Descent = Descent { split_full: false, collapse_root: false, fences: false };
const SCAN: Descent = Descent { split_full: false, collapse_root: false, fences: true };
const WRITE: Descent = Descent { split_full: false, collapse_root: true, fences: false };
const WRITE_EAGER: Descent = Descent { split_full: true, collapse_root: true, fences: false };
/// Point operations that leave a finger need the leaf's range.
const WRITE_FENCES: Descent = Descent { fences: true, ..WRITE };
const WRITE_EAGER_FENCES: Descent = Descent { fences: true, ..WRITE_EAGER };

/// An inner node on a descent path, read-locked at `version`, with its key
/// count at that version and the child position the descent took.
struct PathEntry<'a, W: AtomicWord> {
    node: &'a Node<W>,
    version: u64,
    count: usize,
    idx: usize,
}

impl<W: AtomicWord> Clone for PathEntry<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W: AtomicWord> Copy for PathEntry<'_, W> {}

/// The inner nodes of a descent, root first.
struct Path<'a, W: AtomicWord> {
    entries: [Option<PathEntry<'a, W>>; MAX_PATH],
    len: usize,
    overflow: bool,
}

impl<'a, W: AtomicWord> Path<'a, W> {
    fn new() -> Self {
        Self { entries: [None; MAX_PATH], len: 0, overflow: false }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.overflow = false;
    }

    fn push(&mut self, e: PathEntry<'a, W>) {
        if self.len == MAX_PATH {
            self.overflow = true;
        } else {
            self.entries[self.len] = Some(e);
            self.len += 1;
        }
    }

    fn get(&self, i: usize) -> PathEntry<'a, W> {
        self.entries[i].expect("path entries below len are set")
    }
}

/// A leaf reached by a descent, read-locked at `version`, with its parent
/// (if any) and, if the descent was asked for them, the key range
/// `[low, high)` it was responsible for at that version (`None` =
/// unbounded).
struct LeafPos<'a, W: AtomicWord> {
    node: &'a Node<W>,
    version: u64,
    parent: Option<PathEntry<'a, W>>,
    low: Option<KeyWords>,
    high: Option<KeyWords>,
}

enum WriteMode<F> {
    GetOrInsert(F),
    Upsert(u64),
}

enum WriteOutcome {
    Existing(u64),
    Inserted(u64, LeafChange),
    Replaced(u64),
}

/// A concurrent ordered index mapping byte-string keys (compared
/// lexicographically, at most `max_key_len` bytes) to `u64` values.
///
/// See the [module documentation](self) for the algorithm and the leaf
/// version contract.  `W` selects the atomic word implementation; production
/// code uses the default ([`std::sync::atomic::AtomicU64`]).
pub struct OrderedIndex<W: AtomicWord = AtomicU64> {
    root: W,
    id: u64,
    max_key_len: usize,
    /// `max_key_len > INLINE_KEY_LEN`: keys may have blobs, so operations
    /// pin the epoch.
    long_keys: bool,
    cap: usize,
    /// Keys; striped, in its own allocation off the root's line (every
    /// insert and removal changes it).
    len: Box<StripedCount>,
    /// Nodes ever allocated (live in the tree or on a free list).
    nodes_allocated: AtomicUsize,
    /// Unlinked nodes awaiting reuse (addresses; obsolete, cleared).  Only
    /// touched by splits and unlinks, and never across an atomic operation
    /// on `W` (so a model checker cannot preempt a holder).
    free_leaves: Mutex<Vec<u64>>,
    free_inners: Mutex<Vec<u64>>,
    /// Cleared only by tests, to leave emptied leaves behind as if every
    /// unlink attempt had lost its race.
    unlinking: AtomicBool,
    /// The largest read timestamp of an unlinked leaf (`gap_read_ts`).
    unlinked_read_ts: W,
}

impl OrderedIndex<AtomicU64> {
    /// Creates an empty index accepting keys of at most `max_key_len` bytes.
    pub fn new(max_key_len: usize) -> Self {
        Self::with_config(OrderedIndexConfig::new(max_key_len))
    }

    /// Creates an empty index with explicit configuration.
    ///
    /// # Panics
    ///
    /// If `config.node_capacity` is outside
    /// `MIN_NODE_CAPACITY..=MAX_NODE_CAPACITY`.
    pub fn with_config(config: OrderedIndexConfig) -> Self {
        Self::with_config_in(config)
    }
}

impl<W: AtomicWord> std::fmt::Debug for OrderedIndex<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderedIndex")
            .field("id", &self.id)
            .field("max_key_len", &self.max_key_len)
            .field("node_capacity", &self.cap)
            .field("len", &self.len())
            .field("nodes", &self.node_count())
            .finish()
    }
}

impl<W: AtomicWord> OrderedIndex<W> {
    /// Creates an empty index using atomic word type `W`.
    ///
    /// # Panics
    ///
    /// If `config.node_capacity` is outside
    /// `MIN_NODE_CAPACITY..=MAX_NODE_CAPACITY`.
    pub fn with_config_in(config: OrderedIndexConfig) -> Self {
        assert!(
            (MIN_NODE_CAPACITY..=MAX_NODE_CAPACITY).contains(&config.node_capacity),
            "node_capacity {} outside {}..={}",
            config.node_capacity,
            MIN_NODE_CAPACITY,
            MAX_NODE_CAPACITY
        );
        let root = Box::into_raw(Node::<W>::boxed(true)) as usize as u64;
        Self {
            root: W::new(root),
            id: NEXT_INDEX_ID.fetch_add(1, Ordering::Relaxed),
            max_key_len: config.max_key_len,
            long_keys: config.max_key_len > INLINE_KEY_LEN,
            cap: config.node_capacity,
            len: Box::default(),
            nodes_allocated: AtomicUsize::new(1),
            free_leaves: Mutex::new(Vec::new()),
            free_inners: Mutex::new(Vec::new()),
            unlinking: AtomicBool::new(true),
            unlinked_read_ts: W::new(0),
        }
    }

    /// Longest accepted key.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Number of keys (exact when quiescent).
    pub fn len(&self) -> usize {
        self.len.sum()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check_key(&self, key: &[u8]) -> Result<(), IndexError> {
        if key.len() > self.max_key_len {
            Err(IndexError::KeyTooLong { len: key.len(), max: self.max_key_len })
        } else {
            Ok(())
        }
    }

    fn leaf_ref(&self, node: &Node<W>) -> LeafRef {
        LeafRef { index_id: self.id, addr: node as *const Node<W> as usize }
    }

    fn retry<T>(mut f: impl FnMut() -> Result<T, Restart>) -> T {
        loop {
            match f() {
                Ok(t) => return t,
                Err(Restart) => W::pause(),
            }
        }
    }

    /// The leaf `finger` remembers, as a descent to `key` would have found
    /// it, if the finger is this index's, the leaf's version is unchanged
    /// and `key` lies in the range the finger observed. Indexes with long
    /// keys keep no fingers (their fences may name blobs).
    #[inline(always)]
    fn finger_leaf(&self, finger: &Finger, key: &SearchKey<'_>) -> Option<LeafPos<'_, W>> {
        if finger.index_id != self.id || self.long_keys {
            return None;
        }
        // SAFETY: the finger was made by this index (same id; ids are never
        // reused) from one of its leaves, and node memory stays a node of the
        // same kind until the index is dropped, which cannot happen while
        // `self` is borrowed (see "Node reclamation").
        let leaf: &Node<W> = unsafe { &*(finger.leaf as *const Node<W>) };
        debug_assert!(leaf.is_leaf);
        let version = leaf.lock.read_lock().ok()?;
        if version != finger.version {
            return None;
        }
        // Indexes without long keys have inline fences only.
        let at_least_low = finger.low.is_none_or(|low| key.cmp_inline_words(low).is_le());
        let below_high = finger.high.is_none_or(|high| key.cmp_inline_words(high).is_gt());
        (at_least_low && below_high).then_some(LeafPos {
            node: leaf,
            version,
            parent: None,
            low: finger.low,
            high: finger.high,
        })
    }

    /// Remembers that `leaf`, whose range a validated descent observed as
    /// `[low, high)`, is at `version` (a version this thread validated, or
    /// the one its own write-unlock produced).
    #[inline]
    fn set_finger(
        &self,
        finger: &mut Finger,
        leaf: &Node<W>,
        version: u64,
        low: Option<KeyWords>,
        high: Option<KeyWords>,
    ) {
        if !self.long_keys {
            *finger =
                Finger { index_id: self.id, leaf: leaf.addr() as usize, version, low, high, misses: finger.misses };
        }
    }

    /// Runs `f` with an epoch guard that protects key blobs: pinned if this
    /// index can hold blobs, otherwise the unprotected guard, which costs
    /// nothing.
    #[inline]
    fn with_guard<R>(&self, f: impl FnOnce(&Guard) -> R) -> R {
        if self.long_keys {
            f(&epoch::pin())
        } else {
            // SAFETY: an index whose keys are at most INLINE_KEY_LEN bytes
            // never allocates a blob (keys and separators are inline), so no
            // operation loads an epoch-protected pointer or retires anything
            // through this guard (`retire_blob` asserts it).  Nodes are not
            // epoch-managed: they stay allocated until the index is dropped.
            f(unsafe { epoch::unprotected() })
        }
    }

    /// Frees `blob` once no thread pinned now can still read it.
    fn retire_blob(&self, g: &Guard, blob: u64) {
        assert!(self.long_keys, "index without long keys holds a blob");
        // SAFETY: the caller has removed `blob` from every slot of the tree
        // while holding the lock of the node that held it, so only threads
        // pinned now can still hold its address; `g` is pinned (long-key
        // index, see `with_guard`), so the collector runs the closure after
        // all of them have unpinned.  It is freed once: only the writer that
        // removed it from its last slot retires it.
        unsafe { g.defer_unchecked(move || free_key(blob)) };
    }

    /// The node at `addr`.
    ///
    /// # Safety
    ///
    /// `addr` must be the address of a node of this index (from the root
    /// word, a child slot, a free list or a `LeafRef` of this index).
    #[inline]
    unsafe fn node_at(&self, addr: u64) -> &Node<W> {
        // SAFETY: per the contract `addr` is a node of `self`; nodes are
        // freed only by `Drop`, which needs `&mut self`.
        unsafe { &*(addr as usize as *const Node<W>) }
    }

    // ------------------------------------------------------------------
    // Node allocation and recycling
    // ------------------------------------------------------------------

    /// A node of the given kind for a split, write-locked by the caller, with
    /// no keys and cleared slots: recycled from a free list if possible.
    /// The caller initializes it and then releases the lock with
    /// `write_unlock` before publishing it.
    fn alloc_node(&self, is_leaf: bool) -> &Node<W> {
        let list = if is_leaf { &self.free_leaves } else { &self.free_inners };
        let reused = list.lock().pop();
        match reused {
            Some(addr) => {
                // SAFETY: free lists hold addresses of nodes of this index.
                let node = unsafe { self.node_at(addr) };
                debug_assert_eq!(node.is_leaf, is_leaf);
                // We own it exclusively: it is in no tree slot and was taken
                // off the free list by us.
                node.lock.revive();
                node
            }
            None => {
                self.nodes_allocated.fetch_add(1, Ordering::Relaxed);
                let node: &Node<W> = Box::leak(Node::boxed(is_leaf));
                // Not yet visible to anybody: locking cannot fail.
                node.lock.upgrade(0).expect("a fresh node is unlocked at version 0");
                node
            }
        }
    }

    /// Puts an unlinked node on its free list.  It must be obsolete, have no
    /// keys and cleared slots, and be unreachable from the root.
    fn recycle(&self, node: &Node<W>) {
        debug_assert!(VersionLock::<W>::is_obsolete(node.lock.raw()));
        debug_assert_eq!(node.count.load(Ordering::Acquire), 0);
        let list = if node.is_leaf { &self.free_leaves } else { &self.free_inners };
        list.lock().push(node.addr());
    }

    // ------------------------------------------------------------------
    // Descent
    // ------------------------------------------------------------------

    /// Descends to the leaf selected by `target`, recording the inner nodes
    /// passed in `path` if given.  `mode` may make the descent split full
    /// inner nodes or collapse a root without keys (then it returns
    /// `Err(Restart)`).
    fn descend<'a>(
        &'a self,
        target: Target<'_>,
        mode: Descent,
        mut path: Option<&mut Path<'a, W>>,
        g: &Guard,
    ) -> Result<LeafPos<'a, W>, Restart> {
        let root_addr = self.root.load(Ordering::Acquire);
        // SAFETY: the root word always holds the address of a node of this
        // index.
        let mut node: &'a Node<W> = unsafe { self.node_at(root_addr) };
        let mut v = node.lock.read_lock()?;
        // Every change of the root word locks the old root first (root split,
        // root collapse), so if the root is unchanged after reading an
        // unlocked version, `node` was the root at version `v`.
        if self.root.load(Ordering::Acquire) != root_addr {
            return Err(Restart);
        }
        if let Some(p) = path.as_deref_mut() {
            p.clear();
        }
        let mut parent: Option<PathEntry<'a, W>> = None;
        let (mut low, mut high): (Option<KeyWords>, Option<KeyWords>) = (None, None);
        while !node.is_leaf {
            let n = node.count(self.cap);
            if n == 0 && parent.is_none() && mode.collapse_root {
                self.collapse_root(node, v);
                return Err(Restart);
            }
            if mode.split_full && n >= self.cap {
                self.split(node, v, parent, None)?;
                return Err(Restart);
            }
            let idx = match target {
                Target::First => 0,
                Target::Last => n,
                Target::Key(k) => node.upper_bound(n, &k, g)?,
                Target::Below(k) => node.lower_bound(n, &k, g)?.0,
            };
            let (child_low, child_high) = if mode.fences {
                (
                    if idx > 0 { Some(node.key_words(idx - 1)) } else { low },
                    if idx < n { Some(node.key_words(idx)) } else { high },
                )
            } else {
                (None, None)
            };
            let child = node.child(idx)?;
            let cv = child.lock.read_lock()?;
            // Lock coupling: validating the parent after reading the child's
            // version proves `child` was its child covering
            // `[child_low, child_high)` when `cv` was current.
            node.lock.check(v)?;
            let entry = PathEntry { node, version: v, count: n, idx };
            if let Some(p) = path.as_deref_mut() {
                p.push(entry);
            }
            parent = Some(entry);
            node = child;
            v = cv;
            low = child_low;
            high = child_high;
        }
        Ok(LeafPos { node, version: v, parent, low, high })
    }

    /// Replaces `root` (read at version `v`, an inner node with no key) by
    /// its only child.  Gives up silently if `root` changed.
    fn collapse_root(&self, root: &Node<W>, v: u64) {
        let Ok(guard) = WriteGuard::upgrade(&root.lock, v) else { return };
        // Unchanged since `v`: still the root (changing the root word needs
        // its lock) and still without keys.
        if root.count.load(Ordering::Acquire) != 0 || self.root.load(Ordering::Acquire) != root.addr() {
            return;
        }
        let child = root.slot(0).load(Ordering::Acquire);
        debug_assert_ne!(child, 0);
        self.root.store(child, Ordering::Release);
        root.slot(0).store(0, Ordering::Release);
        guard.unlock_obsolete();
        self.recycle(root);
    }
}

impl<W: AtomicWord> Drop for OrderedIndex<W> {
    fn drop(&mut self) {
        // `&mut self`: no concurrent access.  Every node is either reachable
        // from the root or on a free list (nodes are published within the
        // split that allocates them), never both.
        let mut stack = vec![self.root.load(Ordering::Relaxed)];
        while let Some(addr) = stack.pop() {
            // SAFETY: `addr` came from `Box::into_raw`/`Box::leak` in this
            // module, is reachable through exactly one parent slot (or the
            // root word), and is freed exactly once, here.
            let node = unsafe { Box::from_raw(addr as usize as *mut Node<W>) };
            let n = node.count.load(Ordering::Relaxed) as usize;
            for i in 0..n {
                if let Some(blob) = node.key_words(i).blob() {
                    // SAFETY: each live blob is referenced by exactly one
                    // slot in `0..count` of one node (moved, never shared;
                    // vacated slots are cleared).  Blobs retired earlier are
                    // in no slot and are freed by the collector.
                    unsafe { free_key(blob) };
                }
            }
            if !node.is_leaf {
                stack.extend((0..=n).map(|i| node.slot(i).load(Ordering::Relaxed)).filter(|&c| c != 0));
            }
        }
        for list in [&self.free_leaves, &self.free_inners] {
            for &addr in list.lock().iter() {
                // SAFETY: free-list nodes are unreachable from the root, are on
                // one list once, and hold no blobs (they were cleared).
                drop(unsafe { Box::from_raw(addr as usize as *mut Node<W>) });
            }
        }
    }
}
