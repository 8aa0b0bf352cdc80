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

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{self as epoch, Guard};
use parking_lot::Mutex;

use super::key::{free_key, KeyWords, SearchKey, INLINE_KEY_LEN};
use super::version_lock::{AtomicWord, Restart, VersionLock};
use super::IndexError;

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
    #[inline]
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
    #[inline]
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
    #[inline]
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
    len: AtomicUsize,
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
            len: AtomicUsize::new(0),
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
        self.len.load(Ordering::Relaxed)
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

    // ------------------------------------------------------------------
    // Splits
    // ------------------------------------------------------------------

    /// Splits `node` (read at version `v`), whose parent is `parent` (`None` =
    /// `node` is the root).  The parent must have room.  `insert_at` is the
    /// position at which the insert that needs the split will put its key
    /// into the leaf `node`.  Always ends with the locks released; the caller
    /// restarts its operation afterwards.
    fn split(
        &self,
        node: &Node<W>,
        v: u64,
        parent: Option<PathEntry<'_, W>>,
        insert_at: Option<usize>,
    ) -> Result<(), Restart> {
        let _pg = match parent {
            Some(p) => Some(WriteGuard::upgrade(&p.node.lock, p.version)?),
            None => None,
        };
        let _ng = WriteGuard::upgrade(&node.lock, v)?;
        if parent.is_none() && self.root.load(Ordering::Acquire) != node.addr() {
            return Err(Restart);
        }
        // Both locks held and both nodes unchanged since they were read, so
        // the counts and the child position recorded then are exact.
        if let Some(p) = parent {
            debug_assert!(p.count < self.cap, "caller splits a full parent first");
            debug_assert_eq!(p.node.slot(p.idx).load(Ordering::Acquire), node.addr());
            if p.count >= self.cap {
                return Err(Restart);
            }
        }
        let n = node.count.load(Ordering::Acquire) as usize;
        debug_assert!(n >= 2 && n <= self.cap);
        // Keys inserted in ascending (descending) order arrive at the end
        // (start) of their leaf, and nothing more will arrive in the part of
        // the leaf they leave behind: split off just the last (first) key so
        // that the leaves stay full instead of half full.  Other inserts
        // split in the middle.
        let mid = match insert_at {
            Some(i) if i >= n => n - 1,
            Some(0) => 1,
            _ => n / 2,
        };
        let right = self.alloc_node(node.is_leaf);
        let sep;
        if node.is_leaf {
            // Structural change of this leaf: bump first (see module docs).
            node.bump_leaf_version();
            // The right half's keys were read by whoever scanned this leaf:
            // it inherits the read timestamp (after the bump, so a scanner
            // raising it later fails its leaf validation).
            std::sync::atomic::fence(Ordering::SeqCst);
            raise_word(&right.read_ts, node.read_ts.load(Ordering::SeqCst));
            sep = Self::leaf_separator(node, mid);
            for i in mid..n {
                right.move_key(i - mid, node, i);
                right.move_slot(i - mid, node, i);
            }
            right.count.store((n - mid) as u64, Ordering::Release);
            for i in mid..n {
                node.clear_key(i);
                node.slot(i).store(0, Ordering::Release);
            }
        } else {
            // The middle separator moves up; right gets keys mid+1..n and
            // children mid+1..=n.
            sep = node.key_words(mid);
            for i in mid + 1..n {
                right.move_key(i - mid - 1, node, i);
            }
            for i in mid + 1..=n {
                right.move_slot(i - mid - 1, node, i);
            }
            right.count.store((n - mid - 1) as u64, Ordering::Release);
            for i in mid..n {
                node.clear_key(i);
                node.slot(i + 1).store(0, Ordering::Release);
            }
        }
        node.count.store(mid as u64, Ordering::Release);
        // The right node is fully built: release it, then publish it.
        right.lock.write_unlock();
        let right_addr = right.addr();
        match parent {
            Some(p) => {
                let (pn, idx, p) = (p.count, p.idx, p.node);
                for i in (idx..pn).rev() {
                    p.move_key(i + 1, p, i);
                }
                for i in (idx + 1..=pn).rev() {
                    p.move_slot(i + 1, p, i);
                }
                p.set_key(idx, sep);
                p.slot(idx + 1).store(right_addr, Ordering::Release);
                p.count.store(pn as u64 + 1, Ordering::Release);
            }
            None => {
                let new_root = self.alloc_node(false);
                new_root.set_key(0, sep);
                new_root.slot(0).store(node.addr(), Ordering::Release);
                new_root.slot(1).store(right_addr, Ordering::Release);
                new_root.count.store(1, Ordering::Release);
                new_root.lock.write_unlock();
                self.root.store(new_root.addr(), Ordering::Release);
            }
        }
        Ok(())
    }

    /// Separator between keys `mid - 1` and `mid` of a write-locked leaf: the
    /// shortest prefix of key `mid` that is greater than key `mid - 1` (a
    /// private copy, in a new blob only if it is longer than 16 bytes).
    fn leaf_separator(node: &Node<W>, mid: usize) -> KeyWords {
        let right = node.key_words(mid);
        if right.blob().is_none() {
            // Inline: copying the words costs nothing and needs no blob.
            return right;
        }
        let left = node.key_words(mid - 1);
        let (mut lb, mut rb) = ([0u8; INLINE_KEY_LEN], [0u8; INLINE_KEY_LEN]);
        // SAFETY: the leaf is write-locked, so its keys are stable and their
        // blobs live (leaf blobs are retired only by a remove holding this
        // lock).
        let (l, r) = unsafe { (left.bytes(&mut lb), right.bytes(&mut rb)) };
        debug_assert!(l < r);
        // `l < r`: either `l` is a proper prefix of `r` or they differ at
        // `common`; in both cases `r[..=common]` is greater than `l` and at
        // most `r`.
        let common = l.iter().zip(r).take_while(|(a, b)| a == b).count();
        KeyWords::new_owned(&r[..=common])
    }

    // ------------------------------------------------------------------
    // Point operations
    // ------------------------------------------------------------------

    /// Returns the value stored under `key`.  Keys longer than
    /// `max_key_len` are never present, so they yield `None`.
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        if key.len() > self.max_key_len {
            return None;
        }
        let sk = SearchKey::new(key);
        self.with_guard(|g| {
            Self::retry(|| {
                let pos = self.descend(Target::Key(sk), READ, None, g)?;
                let leaf = pos.node;
                let n = leaf.count(self.cap);
                let (i, found) = leaf.lower_bound(n, &sk, g)?;
                let val = if found { Some(leaf.slot(i).load(Ordering::Acquire)) } else { None };
                leaf.lock.check(pos.version)?;
                Ok(val)
            })
        })
    }

    fn write<F: FnOnce() -> u64>(&self, key: &[u8], mode: WriteMode<F>) -> WriteOutcome {
        let sk = SearchKey::new(key);
        let mut mode = Some(mode);
        let mut eager = false;
        self.with_guard(|g| Self::retry(|| self.try_write(key, &sk, &mut mode, &mut eager, g)))
    }

    /// One attempt of an insert or get-or-insert: a single descent that ends
    /// with a validated read of an existing key or an upgraded leaf lock.
    fn try_write<F: FnOnce() -> u64>(
        &self,
        key: &[u8],
        sk: &SearchKey<'_>,
        mode: &mut Option<WriteMode<F>>,
        eager: &mut bool,
        g: &Guard,
    ) -> Result<WriteOutcome, Restart> {
        let pos = self.descend(Target::Key(*sk), if *eager { WRITE_EAGER } else { WRITE }, None, g)?;
        let leaf = pos.node;
        let v = pos.version;
        let n = leaf.count(self.cap);
        let (i, found) = leaf.lower_bound(n, sk, g)?;
        if found {
            return match mode.as_ref() {
                Some(WriteMode::GetOrInsert(_)) => {
                    let val = leaf.slot(i).load(Ordering::Acquire);
                    leaf.lock.check(v)?;
                    Ok(WriteOutcome::Existing(val))
                }
                Some(WriteMode::Upsert(new)) => {
                    let _wg = WriteGuard::upgrade(&leaf.lock, v)?;
                    let old = leaf.slot(i).load(Ordering::Acquire);
                    leaf.slot(i).store(*new, Ordering::Release);
                    Ok(WriteOutcome::Replaced(old))
                }
                None => unreachable!("write mode consumed before completion"),
            };
        }
        if n >= self.cap {
            // The split needs room in the parent.  If the parent is full (at
            // the version read, which the split would re-check anyway),
            // restart in eager mode, which splits it on the way down.
            if pos.parent.is_some_and(|p| p.count >= self.cap) {
                *eager = true;
                return Err(Restart);
            }
            self.split(leaf, v, pos.parent, Some(i))?;
            return Err(Restart);
        }
        let _wg = WriteGuard::upgrade(&leaf.lock, v)?;
        // Exclusive access, and the leaf is unchanged since `v`: `n`, `i` and
        // `found` are exact.  Nothing below can fail, so consuming `mode` is
        // final.
        let value = match mode.take() {
            Some(WriteMode::GetOrInsert(make)) => make(),
            Some(WriteMode::Upsert(val)) => val,
            None => unreachable!("write mode consumed before completion"),
        };
        let words = KeyWords::new_owned(key);
        let before = leaf.bump_leaf_version();
        for j in (i..n).rev() {
            leaf.move_key(j + 1, leaf, j);
            leaf.move_slot(j + 1, leaf, j);
        }
        leaf.set_key(i, words);
        leaf.slot(i).store(value, Ordering::Release);
        leaf.count.store(n as u64 + 1, Ordering::Release);
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(WriteOutcome::Inserted(
            value,
            LeafChange { leaf: self.leaf_ref(leaf), version_before: before, version_after: before + 1 },
        ))
    }

    /// Atomically returns the value under `key`, inserting `make()` first if
    /// the key is absent (DBX's get-with-insert).  Returns `(value,
    /// inserted)`.  Inserting bumps the version of the leaf receiving the key.
    ///
    /// `make` runs while that leaf is write-locked: it must be short and must
    /// not access this index.
    pub fn get_or_insert_with(&self, key: &[u8], make: impl FnOnce() -> u64) -> Result<(u64, bool), IndexError> {
        let r = self.get_or_insert_with_info(key, make)?;
        Ok((r.value, r.inserted))
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with), also reporting the
    /// leaf-version transition caused by an insert.
    ///
    /// One optimistic descent: a present key is returned from a validated
    /// read of its leaf without taking any lock.
    pub fn get_or_insert_with_info(&self, key: &[u8], make: impl FnOnce() -> u64) -> Result<GetOrInsert, IndexError> {
        self.check_key(key)?;
        Ok(match self.write(key, WriteMode::GetOrInsert(make)) {
            WriteOutcome::Existing(value) => GetOrInsert { value, inserted: false, leaf_change: None },
            WriteOutcome::Inserted(value, change) => GetOrInsert { value, inserted: true, leaf_change: Some(change) },
            WriteOutcome::Replaced(_) => unreachable!("get-or-insert never replaces"),
        })
    }

    /// Inserts or overwrites `key`, returning the previous value.  Inserting a
    /// new key bumps its leaf's version; overwriting does not.
    pub fn insert(&self, key: &[u8], value: u64) -> Result<Option<u64>, IndexError> {
        self.check_key(key)?;
        Ok(match self.write(key, WriteMode::<fn() -> u64>::Upsert(value)) {
            WriteOutcome::Inserted(..) => None,
            WriteOutcome::Replaced(old) => Some(old),
            WriteOutcome::Existing(_) => unreachable!("upsert never returns existing"),
        })
    }

    /// Removes `key`, returning its value.  Bumps the leaf's version if the
    /// key was present.  A leaf left empty is unlinked from the tree (see the
    /// module documentation).
    pub fn remove(&self, key: &[u8]) -> Option<u64> {
        self.remove_where(key, None)
    }

    /// Removes `key` only if it maps to `expected`; returns whether it did.
    /// Bumps the leaf's version only when it removes.
    pub fn remove_if(&self, key: &[u8], expected: u64) -> bool {
        self.remove_where(key, Some(expected)).is_some()
    }

    fn remove_where(&self, key: &[u8], expected: Option<u64>) -> Option<u64> {
        if key.len() > self.max_key_len {
            return None;
        }
        let sk = SearchKey::new(key);
        self.with_guard(|g| {
            let (removed, empty_leaf) = Self::retry(|| {
                let pos = self.descend(Target::Key(sk), WRITE, None, g)?;
                let leaf = pos.node;
                let n = leaf.count(self.cap);
                let (i, found) = leaf.lower_bound(n, &sk, g)?;
                if !found || expected.is_some_and(|e| leaf.slot(i).load(Ordering::Acquire) != e) {
                    leaf.lock.check(pos.version)?;
                    // An empty non-root leaf here is left over from an unlink
                    // that gave up: try again.
                    return Ok((None, n == 0 && pos.parent.is_some()));
                }
                let _wg = WriteGuard::upgrade(&leaf.lock, pos.version)?;
                leaf.bump_leaf_version();
                let words = leaf.key_words(i);
                let val = leaf.slot(i).load(Ordering::Acquire);
                for j in i..n - 1 {
                    leaf.move_key(j, leaf, j + 1);
                    leaf.move_slot(j, leaf, j + 1);
                }
                leaf.clear_key(n - 1);
                leaf.slot(n - 1).store(0, Ordering::Release);
                leaf.count.store(n as u64 - 1, Ordering::Release);
                self.len.fetch_sub(1, Ordering::Relaxed);
                if let Some(blob) = words.blob() {
                    // No longer in any slot: overwritten by the shift or
                    // cleared.
                    self.retire_blob(g, blob);
                }
                Ok((Some(val), n == 1 && pos.parent.is_some()))
            });
            if empty_leaf {
                self.unlink_empty_leaf(Target::Key(sk), g);
            }
            removed
        })
    }

    // ------------------------------------------------------------------
    // Unlinking empty leaves
    // ------------------------------------------------------------------

    /// Looks up the leaf selected by `target` and, if it is empty and not
    /// the root, unlinks it.  Makes at most `UNLINK_ATTEMPTS` attempts and
    /// never waits.  Returns whether it unlinked a leaf.
    fn unlink_empty_leaf(&self, target: Target<'_>, g: &Guard) -> bool {
        if !self.unlinking.load(Ordering::Relaxed) {
            return false;
        }
        let mut path = Path::new();
        for _ in 0..UNLINK_ATTEMPTS {
            let attempt = (|| {
                let pos = self.descend(target, READ, Some(&mut path), g)?;
                let n = pos.node.count(self.cap);
                pos.node.lock.check(pos.version)?;
                if n != 0 || path.len == 0 || path.overflow {
                    return Ok(false);
                }
                self.try_unlink(&path, pos.node, pos.version, g)
            })();
            match attempt {
                Ok(unlinked) => return unlinked,
                Err(Restart) => W::pause(),
            }
        }
        false
    }

    /// Unlinks `leaf`, empty at version `leaf_v`, reached through `path`.
    /// `Ok(false)`: nothing to unlink (the whole tree is the chain above the
    /// leaf; a writer descent collapses it).  `Err(Restart)`: some node on
    /// the way changed; nothing was modified.
    fn try_unlink(&self, path: &Path<'_, W>, leaf: &Node<W>, leaf_v: u64, g: &Guard) -> Result<bool, Restart> {
        // The anchor is the lowest ancestor with a key; every node below it on
        // the path has no key and one child.  Counts are those at the
        // recorded versions, which the upgrades below confirm.
        let Some(a) = (0..path.len).rev().find(|&i| path.get(i).count >= 1) else { return Ok(false) };
        // Lock top-down: anchor, chain, leaf.
        let mut locked = a;
        while locked < path.len && path.get(locked).node.lock.upgrade(path.get(locked).version).is_ok() {
            locked += 1;
        }
        if locked < path.len || leaf.lock.upgrade(leaf_v).is_err() {
            for i in a..locked {
                path.get(i).node.lock.write_unlock();
            }
            return Err(Restart);
        }
        let anchor = path.get(a);
        let (an, n, idx) = (anchor.node, anchor.count, anchor.idx);
        debug_assert_eq!(leaf.count.load(Ordering::Acquire), 0);
        debug_assert_eq!(
            an.slot(idx).load(Ordering::Acquire),
            if a + 1 < path.len { path.get(a + 1).node.addr() } else { leaf.addr() }
        );
        // The leaf's range moves to a neighbour: a structural change of the
        // leaf (see the phantom argument in the module docs).
        leaf.bump_leaf_version();
        // The neighbour taking the range over is not at hand: its scanners'
        // read timestamp becomes a floor for the whole index.
        std::sync::atomic::fence(Ordering::SeqCst);
        raise_word(&self.unlinked_read_ts, leaf.read_ts.load(Ordering::SeqCst));
        // Remove child `idx` and the separator between it and the neighbour
        // taking over its range: the left neighbour's high fence (separator
        // idx-1) grows, or for the first child the right neighbour's low fence
        // (separator 0) falls.
        let k = idx.saturating_sub(1);
        let removed_sep = an.key_words(k);
        for j in k..n - 1 {
            an.move_key(j, an, j + 1);
        }
        an.clear_key(n - 1);
        for j in idx..n {
            an.move_slot(j, an, j + 1);
        }
        an.slot(n).store(0, Ordering::Release);
        an.count.store(n as u64 - 1, Ordering::Release);
        if let Some(blob) = removed_sep.blob() {
            self.retire_blob(g, blob);
        }
        for i in a + 1..path.len {
            let node = path.get(i).node;
            node.slot(0).store(0, Ordering::Release);
            node.lock.write_unlock_obsolete();
            self.recycle(node);
        }
        leaf.lock.write_unlock_obsolete();
        self.recycle(leaf);
        if a == 0 && n == 1 {
            // The root is left with one child: make the child the root.  The
            // root word still points at the anchor, since changing it needs
            // the anchor's lock.
            debug_assert_eq!(self.root.load(Ordering::Acquire), an.addr());
            self.root.store(an.slot(0).load(Ordering::Acquire), Ordering::Release);
            an.slot(0).store(0, Ordering::Release);
            an.lock.write_unlock_obsolete();
            self.recycle(an);
        } else {
            an.lock.write_unlock();
        }
        Ok(true)
    }

    // ------------------------------------------------------------------
    // Scans
    // ------------------------------------------------------------------

    /// Range scan.
    ///
    /// Visits the entries whose keys lie in `range` in `direction` order,
    /// calling `visit(key, value)` for each until it returns `false` or
    /// `limit` entries have been visited.  Before visiting the entries of a
    /// leaf, calls `leaf_visit(leaf, version)` for every leaf examined
    /// (including leaves in which no key matched), with the leaf's structural
    /// version consistent with the entries read from it; see the module
    /// documentation for the phantom-detection contract.  (A scan that meets
    /// an empty leaf may unlink it first; it then reports the leaf that took
    /// over the range instead.)
    ///
    /// A `limit` of 0, or an empty range (start after end, or equal bounds not
    /// both included), visits nothing and reports no leaf.  Each leaf is read
    /// atomically, but the scan as a whole is not a snapshot: concurrent
    /// changes to other leaves may or may not be seen.
    ///
    /// No lock is held while the callbacks run, so they may use the index;
    /// in an index with keys longer than 16 bytes the thread stays pinned in
    /// the epoch for the whole scan (delaying reclamation of removed keys), so
    /// they should not block for long.
    pub fn scan(
        &self,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        limit: usize,
        mut visit: impl FnMut(&[u8], u64) -> bool,
        mut leaf_visit: impl FnMut(LeafRef, u64),
    ) {
        let (start, end) = range;
        if limit == 0 || range_is_empty(start, end) {
            return;
        }
        self.with_guard(|g| self.scan_in(start, end, direction, limit, &mut visit, &mut leaf_visit, g));
    }

    #[allow(clippy::too_many_arguments)]
    fn scan_in(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        direction: ScanDirection,
        limit: usize,
        visit: &mut impl FnMut(&[u8], u64) -> bool,
        leaf_visit: &mut impl FnMut(LeafRef, u64),
        g: &Guard,
    ) {
        let start = start.map(SearchKey::new);
        let end = end.map(SearchKey::new);
        let forward = direction == ScanDirection::Forward;
        // The fence of the previous leaf: forward, every key below it has been
        // delivered; reverse, every key from it up.  Fence words come from
        // validated reads; their blobs (if any) stay live while `g` is pinned.
        let mut cursor: Option<KeyWords> = None;
        let mut entries: Vec<(KeyWords, u64)> = Vec::with_capacity(self.cap);
        let mut visited = 0usize;
        let mut last_report: Option<(LeafRef, u64)> = None;
        loop {
            // SAFETY (for the `from_words` calls below): `cursor`, `pos.low`
            // and `pos.high` were read from inner nodes under a validated
            // optimistic read, so they are not empty and a blob they name was
            // live after this thread pinned `g` (if the index has blobs, `g`
            // is pinned for the whole scan), so it stays live while used.
            let cursor_key = cursor.map(|c| unsafe { SearchKey::from_words(c) });
            let target = match (forward, cursor_key) {
                (true, Some(c)) => Target::Key(c),
                (true, None) => match start {
                    Bound::Unbounded => Target::First,
                    Bound::Included(s) | Bound::Excluded(s) => Target::Key(s),
                },
                (false, Some(c)) => Target::Below(c),
                (false, None) => match end {
                    Bound::Unbounded => Target::Last,
                    Bound::Included(e) => Target::Key(e),
                    Bound::Excluded(e) => Target::Below(e),
                },
            };
            let (leaf, version, low, high, is_root, n) = Self::retry(|| {
                entries.clear();
                let pos = self.descend(target, SCAN, None, g)?;
                let leaf = pos.node;
                let n = leaf.count(self.cap);
                // SAFETY: see above.
                let (low, high) =
                    unsafe { (pos.low.map(|w| SearchKey::from_words(w)), pos.high.map(|w| SearchKey::from_words(w))) };
                // Deliver only keys within the observed fences and not yet
                // delivered (before / from the cursor): an unlink may have
                // widened this leaf's range since an earlier leaf was read.
                let (from, to) = if forward {
                    let lower = match &cursor_key {
                        Some(c) => Bound::Included(c),
                        None => start.as_ref(),
                    };
                    let from = leaf.start_pos(n, lower, g)?;
                    let mut to = leaf.end_pos(n, end.as_ref(), g)?;
                    if let Some(h) = &high {
                        to = to.min(leaf.lower_bound(n, h, g)?.0);
                    }
                    (from, to)
                } else {
                    let upper = match &cursor_key {
                        Some(c) => Bound::Excluded(c),
                        None => end.as_ref(),
                    };
                    let to = leaf.end_pos(n, upper, g)?;
                    let mut from = leaf.start_pos(n, start.as_ref(), g)?;
                    if let Some(l) = &low {
                        from = from.max(leaf.lower_bound(n, l, g)?.0);
                    }
                    (from, to)
                };
                for i in from..to.max(from) {
                    entries.push((leaf.key_words(i), leaf.slot(i).load(Ordering::Acquire)));
                }
                let lv = leaf.leaf_version.load(Ordering::Acquire);
                leaf.lock.check(pos.version)?;
                Ok((leaf, lv, pos.low, pos.high, pos.parent.is_none(), n))
            });
            if n == 0 && !is_root && self.unlink_empty_leaf(target, g) {
                // The empty leaf is gone and a neighbour covers its range:
                // look again rather than report a leaf whose version the
                // unlink just changed.
                continue;
            }
            // After an unlink widened the leaf just read, the next descent
            // can land in it again at the same version; reporting it twice
            // in a row would add nothing.
            let report = (self.leaf_ref(leaf), version);
            if last_report != Some(report) {
                leaf_visit(report.0, report.1);
                last_report = Some(report);
            }
            let mut buf = [0u8; INLINE_KEY_LEN];
            let mut deliver = |&(w, v): &(KeyWords, u64)| -> bool {
                // SAFETY: the words come from a validated read of a leaf slot
                // below its count (not empty); a blob they name was live after
                // `g` was pinned and `g` stays pinned during the scan.
                let k = unsafe { w.bytes(&mut buf) };
                visited += 1;
                visit(k, v) && visited < limit
            };
            let keep_going =
                if forward { entries.iter().all(&mut deliver) } else { entries.iter().rev().all(&mut deliver) };
            if !keep_going {
                return;
            }
            let fence = if forward { high } else { low };
            let Some(fence) = fence else { return };
            // SAFETY: see above.
            let f = unsafe { SearchKey::from_words(fence) };
            let done = if forward {
                match &end {
                    Bound::Included(e) => f.cmp_key(e).is_gt(),
                    Bound::Excluded(e) => f.cmp_key(e).is_ge(),
                    Bound::Unbounded => false,
                }
            } else {
                match &start {
                    Bound::Included(s) | Bound::Excluded(s) => f.cmp_key(s).is_le(),
                    Bound::Unbounded => false,
                }
            };
            if done {
                return;
            }
            cursor = Some(fence);
        }
    }

    /// Convenience wrapper around [`scan`](Self::scan) that collects the
    /// entries (copying keys) and the `(leaf, version)` pairs.
    #[allow(clippy::type_complexity)]
    pub fn scan_collect(
        &self,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        direction: ScanDirection,
        limit: usize,
    ) -> (Vec<(Vec<u8>, u64)>, Vec<(LeafRef, u64)>) {
        let mut out = Vec::new();
        let mut leaves = Vec::new();
        self.scan(
            range,
            direction,
            limit,
            |k, v| {
                out.push((k.to_vec(), v));
                true
            },
            |l, v| leaves.push((l, v)),
        );
        (out, leaves)
    }

    // ------------------------------------------------------------------
    // Leaf versions
    // ------------------------------------------------------------------

    /// Current structural version of `leaf`, or `None` if `leaf` was produced
    /// by a different index.
    pub fn leaf_version(&self, leaf: LeafRef) -> Option<u64> {
        if leaf.index_id != self.id {
            return None;
        }
        // SAFETY: index ids are unique per process and `LeafRef` can only be
        // constructed by this module, so `leaf.addr` is the address of a leaf
        // node of `self`; node memory is type-stable and freed only when
        // `self` is dropped, which cannot happen while it is borrowed.
        let node = unsafe { self.node_at(leaf.addr as u64) };
        Some(node.leaf_version.load(Ordering::Acquire))
    }

    /// `true` iff `leaf` belongs to this index and its structural version is
    /// still `version` (no insert, delete, split or unlink since it was
    /// recorded).
    pub fn validate_leaf(&self, leaf: LeafRef, version: u64) -> bool {
        self.leaf_version(leaf) == Some(version)
    }

    // ------------------------------------------------------------------
    // Read timestamps of ranges (timestamp ordering's phantom protection)
    // ------------------------------------------------------------------

    /// Raises `leaf`'s read timestamp to `ts`: a transaction at timestamp
    /// `ts` read the keys (and gaps) of the leaf. A writer that later puts
    /// a new key into the leaf's range at a smaller timestamp finds it with
    /// [`OrderedIndex::gap_read_ts`]. The scanner must validate the leaf's
    /// version *after* this (the insert bumps it first, then reads the
    /// timestamp: one of the two sees the other).
    pub fn raise_read_ts(&self, leaf: LeafRef, ts: u64) {
        if leaf.index_id != self.id {
            return;
        }
        // SAFETY: as in `leaf_version`.
        let node = unsafe { self.node_at(leaf.addr as u64) };
        raise_word(&node.read_ts, ts);
        // IMPORTANT: before the caller's validation of the leaf's version.
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The read timestamp of `leaf` (and of every leaf unlinked so far),
    /// for a writer that just put a key into it (`raise_read_ts`). A
    /// later split moves keys into a sibling that inherits it.
    pub fn read_ts(&self, leaf: LeafRef) -> u64 {
        std::sync::atomic::fence(Ordering::SeqCst);
        let floor = self.unlinked_read_ts.load(Ordering::SeqCst);
        if leaf.index_id != self.id {
            return floor;
        }
        // SAFETY: as in `leaf_version`.
        let node = unsafe { self.node_at(leaf.addr as u64) };
        floor.max(node.read_ts.load(Ordering::SeqCst))
    }

    /// The largest timestamp of a transaction that read the range where
    /// `key` lies (the read timestamp of the leaf that holds or would hold
    /// it, and of every leaf unlinked so far). Called by a writer after it
    /// put `key` into the index.
    pub fn gap_read_ts(&self, key: &[u8]) -> u64 {
        std::sync::atomic::fence(Ordering::SeqCst);
        let floor = self.unlinked_read_ts.load(Ordering::SeqCst);
        if key.len() > self.max_key_len {
            return floor;
        }
        let sk = SearchKey::new(key);
        let leaf_ts = self.with_guard(|g| {
            Self::retry(|| {
                let pos = self.descend(Target::Key(sk), READ, None, g)?;
                let ts = pos.node.read_ts.load(Ordering::SeqCst);
                pos.node.lock.check(pos.version)?;
                Ok(ts)
            })
        });
        floor.max(leaf_ts)
    }

    // ------------------------------------------------------------------
    // Diagnostics
    // ------------------------------------------------------------------

    /// Test hook: with `false`, removes and scans leave the leaves they
    /// empty or meet empty in the tree, exactly as when every unlink attempt
    /// loses its race; with `true` (the default) later operations unlink
    /// them again.  Lets tests reach the states that otherwise need
    /// contention.
    #[doc(hidden)]
    pub fn set_unlinking(&self, enabled: bool) {
        self.unlinking.store(enabled, Ordering::Relaxed);
    }

    /// Nodes held by the index: in the tree or on its free lists.  Cheap (one
    /// relaxed load).
    pub fn node_count(&self) -> usize {
        self.nodes_allocated.load(Ordering::Relaxed)
    }

    /// Unlinked nodes waiting on the free lists for reuse.
    pub fn free_node_count(&self) -> usize {
        self.free_leaves.lock().len() + self.free_inners.lock().len()
    }

    /// Bytes of node memory held by the index (`node_count()` nodes).  Key
    /// blobs of keys longer than 16 bytes come on top.
    pub fn memory_bytes(&self) -> usize {
        self.node_count() * std::mem::size_of::<Node<W>>()
    }

    /// Checks structural invariants: sorted keys within separator fences,
    /// uniform leaf depth, `len()` equal to the number of keys, consistent
    /// inline/blob key words with no blob shared between slots, cleared
    /// unused slots, and free-list nodes obsolete, cleared, of the right
    /// kind and unreachable from the root, all nodes accounted for.
    /// Meaningful only while no writer is active.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.with_guard(|g| {
            let root_addr = self.root.load(Ordering::Acquire);
            // SAFETY: the root word always holds a node address of this index.
            let root = unsafe { self.node_at(root_addr) };
            let mut st =
                CheckState { leaf_depth: None, total: 0, nodes: Default::default(), blobs: Default::default() };
            self.check_node(root, None, None, 0, &mut st, g)?;
            if st.total != self.len() {
                return Err(format!("len() = {} but tree holds {} keys", self.len(), st.total));
            }
            let mut free = 0;
            for (list, is_leaf) in [(&self.free_leaves, true), (&self.free_inners, false)] {
                for &addr in list.lock().iter() {
                    free += 1;
                    if st.nodes.contains(&addr) {
                        return Err(format!("free node {addr:#x} reachable from the root"));
                    }
                    // SAFETY: free lists hold nodes of this index.
                    let node = unsafe { self.node_at(addr) };
                    if node.is_leaf != is_leaf {
                        return Err(format!("free node {addr:#x} on the wrong list"));
                    }
                    if !VersionLock::<W>::is_obsolete(node.lock.raw()) {
                        return Err(format!("free node {addr:#x} not obsolete"));
                    }
                    if node.count.load(Ordering::Acquire) != 0
                        || (0..MAX_NODE_CAPACITY).any(|i| !node.key_words(i).is_empty())
                        || (0..=MAX_NODE_CAPACITY).any(|i| node.slot(i).load(Ordering::Acquire) != 0)
                    {
                        return Err(format!("free node {addr:#x} not cleared"));
                    }
                }
            }
            if st.nodes.len() + free != self.node_count() {
                return Err(format!(
                    "{} nodes allocated but {} in the tree and {free} free",
                    self.node_count(),
                    st.nodes.len()
                ));
            }
            Ok(())
        })
    }

    fn check_node(
        &self,
        node: &Node<W>,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        depth: usize,
        st: &mut CheckState,
        g: &Guard,
    ) -> Result<(), String> {
        if !st.nodes.insert(node.addr()) {
            return Err(format!("node {:#x} reachable twice", node.addr()));
        }
        if node.lock.read_lock().is_err() {
            return Err(format!("node {:#x} in the tree is locked or obsolete", node.addr()));
        }
        let n = node.count.load(Ordering::Acquire) as usize;
        if n > self.cap {
            return Err(format!("node count {n} exceeds capacity {}", self.cap));
        }
        let _ = g;
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(n);
        for i in 0..n {
            let w = node.key_words(i);
            if w.is_empty() {
                return Err(format!("empty key slot {i} below count {n}"));
            }
            let mut buf = [0u8; INLINE_KEY_LEN];
            // SAFETY: not empty; blobs in the tree are live while no writer
            // runs (the caller's contract).
            let k = unsafe { w.bytes(&mut buf) }.to_vec();
            match w.blob() {
                Some(b) => {
                    if k.len() <= INLINE_KEY_LEN {
                        return Err(format!("key {k:?} of {} bytes has a blob", k.len()));
                    }
                    if !st.blobs.insert(b) {
                        return Err(format!("blob {b:#x} referenced twice"));
                    }
                    if !w.extra_is_of(&k) {
                        return Err(format!("tag {:#x} of key {k:?} carries other bytes 16..18", w.tag));
                    }
                }
                None => {
                    if w.tag >> 1 > INLINE_KEY_LEN as u64 {
                        return Err(format!("inline tag {} too long", w.tag));
                    }
                }
            }
            if (w.p0, w.p1) != super::key::prefix_words(&k) {
                return Err(format!("prefix words of key {k:?} out of date"));
            }
            keys.push(k);
        }
        for w in keys.windows(2) {
            if w[0] >= w[1] {
                return Err(format!("keys not strictly increasing: {:?} >= {:?}", w[0], w[1]));
            }
        }
        for k in &keys {
            if low.is_some_and(|l| k.as_slice() < l) || high.is_some_and(|h| k.as_slice() >= h) {
                return Err(format!("key {k:?} outside fences {low:?}..{high:?}"));
            }
        }
        for i in n..MAX_NODE_CAPACITY {
            if !node.key_words(i).is_empty() {
                return Err(format!("stale key slot {i} not cleared"));
            }
        }
        let used_slots = if node.is_leaf { n } else { n + 1 };
        for i in used_slots..=MAX_NODE_CAPACITY {
            if node.slot(i).load(Ordering::Acquire) != 0 {
                return Err(format!("stale slot {i} not cleared"));
            }
        }
        if node.is_leaf {
            if keys.iter().any(|k| k.len() > self.max_key_len) {
                return Err("key longer than max_key_len".into());
            }
            match st.leaf_depth {
                None => st.leaf_depth = Some(depth),
                Some(d) if d != depth => {
                    return Err(format!("leaves at depths {d} and {depth}"));
                }
                _ => {}
            }
            st.total += n;
            return Ok(());
        }
        for i in 0..=n {
            let child = node.child(i).map_err(|_| format!("null child at {i}"))?;
            let cl = if i > 0 { Some(keys[i - 1].as_slice()) } else { low };
            let ch = if i < n { Some(keys[i].as_slice()) } else { high };
            self.check_node(child, cl, ch, depth + 1, st, g)?;
        }
        Ok(())
    }
}

/// Accumulated state of `check_invariants`.
struct CheckState {
    leaf_depth: Option<usize>,
    total: usize,
    nodes: std::collections::HashSet<u64>,
    blobs: std::collections::HashSet<u64>,
}

fn range_is_empty(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e)) | (Bound::Excluded(s), Bound::Included(e)) => {
            s >= e
        }
        _ => false,
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
