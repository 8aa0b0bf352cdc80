//! Concurrent B+tree with optimistic lock coupling (OLC).
//!
//! # Algorithm
//!
//! Every node carries a [`VersionLock`].  Readers never write shared memory:
//! they descend from the root reading each node's version, the node contents
//! and then the child's version, and re-validate the parent's version after
//! reading the child's (lock coupling).  Any failed validation restarts the
//! operation from the root.  Writers descend the same way and then *upgrade*
//! the optimistic version of the node(s) they modify into a write lock (a CAS
//! that fails if the node changed since it was read).
//!
//! * Inserts that find a full inner node on the way down split it eagerly
//!   (locking it and its parent) and restart, so a leaf split always finds
//!   room in its parent.  A full leaf is split (locking leaf and parent) and
//!   the insert restarts.  When the root splits a new root is installed.
//! * Deletes only lock the leaf.  There are **no merges**: empty leaves stay in
//!   the tree.  Consequently no node is ever unlinked or freed while the index
//!   is alive (nodes are freed by `Drop`), and the low fence key of a node never
//!   changes (a split keeps the lower half in place).
//! * Scans read one leaf at a time (copying out its matching entries under a
//!   validated optimistic read) and move to the next leaf by descending again
//!   from the root with the leaf's fence key — the separator bounding it, as
//!   learned from the validated descent — instead of following sibling links:
//!   forward to the leaf containing the high fence, backward to the leaf
//!   holding the keys just below the low fence.
//! * Each key slot also stores the key's first 8 bytes (big-endian, zero
//!   padded) inline, so most comparisons do not dereference the key blob.
//!
//! # Memory safety of optimistic reads
//!
//! All node fields that change after publication are atomic words
//! ([`AtomicWord`]).  Keys are stored as addresses of immutable heap blobs
//! (`key.rs`).  Each key slot holds either 0 or the address of a live blob:
//! slots vacated by a shift, removal or split are cleared, so an address is
//! in no slot by the time its blob is retired.  Leaf keys removed by `remove`
//! are retired with [`crossbeam_epoch`] and freed only once every thread that
//! was pinned at that time has unpinned; every operation pins for its whole
//! duration, so an optimistic reader never dereferences freed memory even
//! when it reads a torn state that later fails validation.  Separator keys in
//! inner nodes are private copies that are only ever moved between inner nodes
//! and freed by `Drop`.  Child slots of inner nodes hold 0 or node addresses,
//! and nodes are never freed while the index is alive.  Readers clamp counts
//! and treat 0 addresses as "inconsistent, restart", so torn reads cannot
//! index out of bounds or dereference null.
//!
//! # Leaf versions and phantom detection
//!
//! Besides its lock word each leaf has a *structural version*
//! ([`OrderedIndex::leaf_version`]) which is incremented — while the leaf is
//! write-locked and **before** the change is applied — by every insert of a
//! new key, every removal and every split of that leaf.  Overwriting the value
//! of an existing key ([`OrderedIndex::insert`] on a present key) does not
//! change it.
//!
//! [`OrderedIndex::scan`] reports each leaf it read, together with the
//! structural version read inside the same validated optimistic section as the
//! keys it returned from that leaf.  The reported leaves cover the whole key
//! interval the scan examined (from the start bound up to the last key
//! returned when a limit stops the scan, or the whole range otherwise),
//! including leaves that contained no matching key — a scan of an empty range
//! still reports the leaf covering it.  Any later insert of a key into that
//! interval lands in one of those leaves or in a leaf split off one of them,
//! so at least one reported leaf's version changes.  A transaction therefore
//! records the `(LeafRef, version)` pairs and at commit checks
//! [`OrderedIndex::validate_leaf`] for each (DBX §3.3.3 / Silo node-set
//! validation).  [`OrderedIndex::get_or_insert_with_info`] reports the exact
//! version transition caused by an insert so a transaction can recognise its
//! own inserts.
//!
//! A [`LeafRef`] stays valid (memory-safe to query) for the lifetime of the
//! index because leaves are never freed before the index is dropped; querying
//! it on another index returns `None`/`false`.
//!
//! # Limitations
//!
//! * No merging: nodes emptied by removals keep their memory until the index
//!   is dropped.
//! * A scan is not a snapshot across leaves; serializability comes from the
//!   leaf-version validation above.
//! * `get_or_insert_with`'s `make` runs under the leaf's write lock.
//! * Values are opaque `u64`s; the index never dereferences or frees them.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{self as epoch, Guard};

use super::key::{alloc_key, free_key, key_bytes};
use super::version_lock::{AtomicWord, Restart, VersionLock};
use super::IndexError;

/// Largest supported node capacity (keys per node).
pub const MAX_NODE_CAPACITY: usize = 64;
/// Smallest supported node capacity.
pub const MIN_NODE_CAPACITY: usize = 4;
/// Node capacity used by [`OrderedIndex::new`].
pub const DEFAULT_NODE_CAPACITY: usize = 32;

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
/// of the index that produced it (leaves are never freed before the index is
/// dropped).
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

struct Node<W: AtomicWord> {
    lock: VersionLock<W>,
    /// Immutable after construction.
    is_leaf: bool,
    /// Number of keys.
    count: W,
    /// Structural version (leaves only).
    leaf_version: W,
    /// Key blob addresses (0 = empty slot).
    keys: [W; MAX_NODE_CAPACITY],
    /// `key_prefix` of each key, so most comparisons need not dereference
    /// the blob.
    prefixes: [W; MAX_NODE_CAPACITY],
    /// Leaves: values (slots `0..count`).  Inner nodes: child node addresses
    /// (slots `0..=count`, 0 = empty slot).
    slots: [W; MAX_NODE_CAPACITY + 1],
}

/// Order-consistent 8-byte prefix of `key`: its first 8 bytes, zero padded,
/// read big-endian.  `key_prefix(a) < key_prefix(b)` implies `a < b`; equal
/// prefixes need a full comparison.
#[inline]
fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

impl<W: AtomicWord> Node<W> {
    fn new(is_leaf: bool) -> Box<Self> {
        Box::new(Self {
            lock: VersionLock::new(),
            is_leaf,
            count: W::new(0),
            leaf_version: W::new(0),
            keys: std::array::from_fn(|_| W::new(0)),
            prefixes: std::array::from_fn(|_| W::new(0)),
            slots: std::array::from_fn(|_| W::new(0)),
        })
    }

    fn addr(&self) -> u64 {
        self as *const Self as usize as u64
    }

    /// Optimistically read key count, clamped so torn reads stay in bounds.
    #[inline]
    fn count(&self, cap: usize) -> usize {
        (self.count.load(Ordering::Acquire) as usize).min(cap)
    }

    /// Key `i`.  The returned bytes stay valid while `_guard` is pinned (leaf
    /// keys) or while the index is alive (separators); the lifetime ties them
    /// to both.
    #[inline]
    fn key<'a>(&'a self, i: usize, _guard: &'a Guard) -> Result<&'a [u8], Restart> {
        let blob = self.keys[i].load(Ordering::Acquire);
        if blob == 0 {
            return Err(Restart);
        }
        // SAFETY: a non-zero key slot holds the address of a blob that is
        // live at the time of the load (slots are cleared before a blob is
        // retired).  Leaf-key blobs are retired via the epoch collector and
        // this thread is pinned by `_guard` for `'a`, so the blob outlives
        // `'a`; separator blobs are only freed when the index is dropped,
        // which cannot happen while `self` (a node of it) is borrowed.
        Ok(unsafe { key_bytes(blob) })
    }

    /// Compares key `i` with `key`, whose `key_prefix` is `kp`.
    #[inline]
    fn cmp_key(&self, i: usize, key: &[u8], kp: u64, g: &Guard) -> Result<CmpOrdering, Restart> {
        // A torn read may pair the prefix of one key with the blob of
        // another; the result is then garbage but the read fails validation.
        let p = self.prefixes[i].load(Ordering::Acquire);
        if p != kp {
            return Ok(p.cmp(&kp));
        }
        Ok(self.key(i, g)?.cmp(key))
    }

    // Writer-side helpers: only called with the node write-locked (or on a
    // node not yet published).

    fn set_key(&self, i: usize, blob: u64, prefix: u64) {
        self.prefixes[i].store(prefix, Ordering::Release);
        self.keys[i].store(blob, Ordering::Release);
    }

    fn move_key(&self, i: usize, src: &Node<W>, j: usize) {
        self.set_key(i, src.keys[j].load(Ordering::Acquire), src.prefixes[j].load(Ordering::Acquire));
    }

    fn move_slot(&self, i: usize, src: &Node<W>, j: usize) {
        self.slots[i].store(src.slots[j].load(Ordering::Acquire), Ordering::Release);
    }

    fn clear_key(&self, i: usize) {
        self.set_key(i, 0, 0);
    }

    /// Child `i` of an inner node.
    #[inline]
    fn child(&self, i: usize) -> Result<&Node<W>, Restart> {
        debug_assert!(!self.is_leaf);
        let p = self.slots[i].load(Ordering::Acquire);
        if p == 0 {
            return Err(Restart);
        }
        // SAFETY: child slots of inner nodes only ever hold 0 or addresses of
        // nodes of this index, and nodes are freed only when the index is
        // dropped, which cannot happen while `self` is borrowed.
        Ok(unsafe { &*(p as usize as *const Node<W>) })
    }

    /// First position whose key is `>= key` (and whether it is `== key`).
    fn lower_bound(&self, n: usize, key: &[u8], g: &Guard) -> Result<(usize, bool), Restart> {
        let kp = key_prefix(key);
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp_key(mid, key, kp, g)? {
                CmpOrdering::Less => lo = mid + 1,
                CmpOrdering::Equal => return Ok((mid, true)),
                CmpOrdering::Greater => hi = mid,
            }
        }
        Ok((lo, false))
    }

    /// First position whose key is `> key`.
    fn upper_bound(&self, n: usize, key: &[u8], g: &Guard) -> Result<usize, Restart> {
        let kp = key_prefix(key);
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.cmp_key(mid, key, kp, g)? != CmpOrdering::Greater {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
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
    Key(&'k [u8]),
    /// The leaf containing the keys immediately below the key.
    Below(&'k [u8]),
}

/// A leaf reached by a descent, read-locked at `version`, with the key range
/// `[low, high)` it was responsible for at that version (`None` = unbounded).
struct LeafPos<'a, W: AtomicWord> {
    node: &'a Node<W>,
    version: u64,
    parent: Option<(&'a Node<W>, u64)>,
    low: Option<&'a [u8]>,
    high: Option<&'a [u8]>,
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
    cap: usize,
    len: AtomicUsize,
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
        let root = Box::into_raw(Node::<W>::new(true)) as usize as u64;
        Self {
            root: W::new(root),
            id: NEXT_INDEX_ID.fetch_add(1, Ordering::Relaxed),
            max_key_len: config.max_key_len,
            cap: config.node_capacity,
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

    // ------------------------------------------------------------------
    // Descent
    // ------------------------------------------------------------------

    /// Descends to the leaf selected by `target`.  With `split_full`, full
    /// inner nodes met on the way are split (and `Err(Restart)` returned).
    fn descend<'a>(&'a self, target: Target<'_>, split_full: bool, g: &'a Guard) -> Result<LeafPos<'a, W>, Restart> {
        let root_addr = self.root.load(Ordering::Acquire);
        // SAFETY: the root word always holds the address of a node of this
        // index; nodes are only freed by `Drop`, which needs `&mut self`.
        let mut node: &'a Node<W> = unsafe { &*(root_addr as usize as *const Node<W>) };
        let mut v = node.lock.read_lock()?;
        // A root split locks the old root before installing a new one, so if
        // the root is unchanged after reading an unlocked version, `node` was
        // the root at version `v`.
        if self.root.load(Ordering::Acquire) != root_addr {
            return Err(Restart);
        }
        let mut parent: Option<(&'a Node<W>, u64)> = None;
        let (mut low, mut high): (Option<&'a [u8]>, Option<&'a [u8]>) = (None, None);
        while !node.is_leaf {
            let n = node.count(self.cap);
            if split_full && n >= self.cap {
                self.split(node, v, parent, g)?;
                return Err(Restart);
            }
            let idx = match target {
                Target::First => 0,
                Target::Last => n,
                Target::Key(k) => node.upper_bound(n, k, g)?,
                Target::Below(k) => node.lower_bound(n, k, g)?.0,
            };
            let child_low = if idx > 0 { Some(node.key(idx - 1, g)?) } else { low };
            let child_high = if idx < n { Some(node.key(idx, g)?) } else { high };
            let child = node.child(idx)?;
            let cv = child.lock.read_lock()?;
            // Lock coupling: validating the parent after reading the child's
            // version proves `child` was its child covering
            // `[child_low, child_high)` when `cv` was current.
            node.lock.check(v)?;
            parent = Some((node, v));
            node = child;
            v = cv;
            low = child_low;
            high = child_high;
        }
        Ok(LeafPos { node, version: v, parent, low, high })
    }

    // ------------------------------------------------------------------
    // Splits
    // ------------------------------------------------------------------

    /// Splits `node` (read at version `v`) whose parent was read at the given
    /// version (`None` = `node` is the root).  Always ends with the locks
    /// released; the caller restarts its operation afterwards.
    fn split(&self, node: &Node<W>, v: u64, parent: Option<(&Node<W>, u64)>, g: &Guard) -> Result<(), Restart> {
        let _pg = match parent {
            Some((p, pv)) => Some(WriteGuard::upgrade(&p.lock, pv)?),
            None => None,
        };
        let _ng = WriteGuard::upgrade(&node.lock, v)?;
        if parent.is_none() && self.root.load(Ordering::Acquire) != node.addr() {
            return Err(Restart);
        }
        // Both locks held and both nodes unchanged since they were read:
        // `node` is full and the parent (if any) has room (full inner nodes
        // are split top-down before descending through them).
        let n = node.count.load(Ordering::Acquire) as usize;
        debug_assert!(n >= 2 && n <= self.cap);
        let mid = n / 2;
        let right = Node::<W>::new(node.is_leaf);
        let (sep, sep_prefix);
        if node.is_leaf {
            // Structural change of this leaf: bump first (see module docs).
            let lv = node.leaf_version.load(Ordering::Acquire);
            node.leaf_version.store(lv + 1, Ordering::Release);
            // The separator is a private copy of the right half's first key.
            sep = alloc_key(node.key(mid, g)?);
            sep_prefix = node.prefixes[mid].load(Ordering::Acquire);
            for i in mid..n {
                right.move_key(i - mid, node, i);
                right.move_slot(i - mid, node, i);
            }
            right.count.store((n - mid) as u64, Ordering::Release);
            for i in mid..n {
                node.clear_key(i);
                node.slots[i].store(0, Ordering::Release);
            }
        } else {
            // The middle separator moves up; right gets keys mid+1..n and
            // children mid+1..=n.
            sep = node.keys[mid].load(Ordering::Acquire);
            sep_prefix = node.prefixes[mid].load(Ordering::Acquire);
            for i in mid + 1..n {
                right.move_key(i - mid - 1, node, i);
            }
            for i in mid + 1..=n {
                right.move_slot(i - mid - 1, node, i);
            }
            right.count.store((n - mid - 1) as u64, Ordering::Release);
            for i in mid..n {
                node.clear_key(i);
                node.slots[i + 1].store(0, Ordering::Release);
            }
        }
        node.count.store(mid as u64, Ordering::Release);
        // Publish the (fully built) right node.
        let right_addr = Box::into_raw(right) as usize as u64;
        match parent {
            Some((p, _)) => {
                let pn = p.count.load(Ordering::Acquire) as usize;
                debug_assert!(pn < self.cap);
                let me = node.addr();
                let idx = (0..=pn)
                    .find(|&i| p.slots[i].load(Ordering::Acquire) == me)
                    .expect("OLC invariant: locked parent must reference its child");
                for i in (idx..pn).rev() {
                    p.move_key(i + 1, p, i);
                }
                for i in (idx + 1..=pn).rev() {
                    p.move_slot(i + 1, p, i);
                }
                p.set_key(idx, sep, sep_prefix);
                p.slots[idx + 1].store(right_addr, Ordering::Release);
                p.count.store(pn as u64 + 1, Ordering::Release);
            }
            None => {
                let new_root = Node::<W>::new(false);
                new_root.set_key(0, sep, sep_prefix);
                new_root.slots[0].store(node.addr(), Ordering::Release);
                new_root.slots[1].store(right_addr, Ordering::Release);
                new_root.count.store(1, Ordering::Release);
                let new_root = Box::into_raw(new_root) as usize as u64;
                self.root.store(new_root, Ordering::Release);
            }
        }
        Ok(())
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
        let g = epoch::pin();
        Self::retry(|| {
            let pos = self.descend(Target::Key(key), false, &g)?;
            let leaf = pos.node;
            let n = leaf.count(self.cap);
            let (i, found) = leaf.lower_bound(n, key, &g)?;
            let val = if found { Some(leaf.slots[i].load(Ordering::Acquire)) } else { None };
            leaf.lock.check(pos.version)?;
            Ok(val)
        })
    }

    fn write<F: FnOnce() -> u64>(&self, key: &[u8], mode: WriteMode<F>) -> WriteOutcome {
        let g = epoch::pin();
        let mut mode = Some(mode);
        Self::retry(|| self.try_write(key, &mut mode, &g))
    }

    fn try_write<F: FnOnce() -> u64>(
        &self,
        key: &[u8],
        mode: &mut Option<WriteMode<F>>,
        g: &Guard,
    ) -> Result<WriteOutcome, Restart> {
        let pos = self.descend(Target::Key(key), true, g)?;
        let leaf = pos.node;
        let v = pos.version;
        let n = leaf.count(self.cap);
        let (i, found) = leaf.lower_bound(n, key, g)?;
        if found {
            return match mode.as_ref() {
                Some(WriteMode::GetOrInsert(_)) => {
                    let val = leaf.slots[i].load(Ordering::Acquire);
                    leaf.lock.check(v)?;
                    Ok(WriteOutcome::Existing(val))
                }
                Some(WriteMode::Upsert(new)) => {
                    let _wg = WriteGuard::upgrade(&leaf.lock, v)?;
                    let old = leaf.slots[i].load(Ordering::Acquire);
                    leaf.slots[i].store(*new, Ordering::Release);
                    Ok(WriteOutcome::Replaced(old))
                }
                None => unreachable!("write mode consumed before completion"),
            };
        }
        if n >= self.cap {
            self.split(leaf, v, pos.parent, g)?;
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
        let blob = alloc_key(key);
        let before = leaf.leaf_version.load(Ordering::Acquire);
        leaf.leaf_version.store(before + 1, Ordering::Release);
        for j in (i..n).rev() {
            leaf.move_key(j + 1, leaf, j);
            leaf.move_slot(j + 1, leaf, j);
        }
        leaf.set_key(i, blob, key_prefix(key));
        leaf.slots[i].store(value, Ordering::Release);
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
    pub fn get_or_insert_with_info(&self, key: &[u8], make: impl FnOnce() -> u64) -> Result<GetOrInsert, IndexError> {
        self.check_key(key)?;
        // Fast path: present keys need no lock.
        if let Some(value) = self.get(key) {
            return Ok(GetOrInsert { value, inserted: false, leaf_change: None });
        }
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
    /// key was present.  Leaves are never merged or freed.
    pub fn remove(&self, key: &[u8]) -> Option<u64> {
        if key.len() > self.max_key_len {
            return None;
        }
        let g = epoch::pin();
        Self::retry(|| {
            let pos = self.descend(Target::Key(key), false, &g)?;
            let leaf = pos.node;
            let n = leaf.count(self.cap);
            let (i, found) = leaf.lower_bound(n, key, &g)?;
            if !found {
                leaf.lock.check(pos.version)?;
                return Ok(None);
            }
            let _wg = WriteGuard::upgrade(&leaf.lock, pos.version)?;
            let lv = leaf.leaf_version.load(Ordering::Acquire);
            leaf.leaf_version.store(lv + 1, Ordering::Release);
            let blob = leaf.keys[i].load(Ordering::Acquire);
            let val = leaf.slots[i].load(Ordering::Acquire);
            for j in i..n - 1 {
                leaf.move_key(j, leaf, j + 1);
                leaf.move_slot(j, leaf, j + 1);
            }
            leaf.clear_key(n - 1);
            leaf.slots[n - 1].store(0, Ordering::Release);
            leaf.count.store(n as u64 - 1, Ordering::Release);
            self.len.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: `blob` is no longer in any slot of the tree (it was
            // overwritten by the shift or cleared), so only threads pinned
            // now can still hold its address; the epoch collector runs the
            // closure after all of them have unpinned.  It is freed once: only
            // the remover that unlinked it under the leaf lock retires it.
            unsafe { g.defer_unchecked(move || free_key(blob)) };
            Ok(Some(val))
        })
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
    /// documentation for the phantom-detection contract.
    ///
    /// A `limit` of 0, or an empty range (start after end, or equal bounds not
    /// both included), visits nothing and reports no leaf.  Each leaf is read
    /// atomically, but the scan as a whole is not a snapshot: concurrent
    /// changes to other leaves may or may not be seen.
    ///
    /// No lock is held while the callbacks run, so they may use the index;
    /// the thread stays pinned in the epoch for the whole scan (delaying
    /// reclamation of removed keys), so they should not block for long.
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
        let g = epoch::pin();
        let mut target = match (direction, start, end) {
            (ScanDirection::Forward, Bound::Unbounded, _) => Target::First,
            (ScanDirection::Forward, Bound::Included(s) | Bound::Excluded(s), _) => Target::Key(s),
            (ScanDirection::Reverse, _, Bound::Unbounded) => Target::Last,
            (ScanDirection::Reverse, _, Bound::Included(e)) => Target::Key(e),
            (ScanDirection::Reverse, _, Bound::Excluded(e)) => Target::Below(e),
        };
        let mut entries: Vec<(&[u8], u64)> = Vec::with_capacity(self.cap);
        let mut visited = 0usize;
        loop {
            let (leaf, version, low, high) = Self::retry(|| {
                entries.clear();
                let pos = self.descend(target, false, &g)?;
                let leaf = pos.node;
                let n = leaf.count(self.cap);
                for i in 0..n {
                    let k = leaf.key(i, &g)?;
                    if in_range(k, start, end) {
                        entries.push((k, leaf.slots[i].load(Ordering::Acquire)));
                    }
                }
                let lv = leaf.leaf_version.load(Ordering::Acquire);
                leaf.lock.check(pos.version)?;
                Ok((leaf, lv, pos.low, pos.high))
            });
            leaf_visit(self.leaf_ref(leaf), version);
            let mut deliver = |&(k, v): &(&[u8], u64)| -> bool {
                visited += 1;
                visit(k, v) && visited < limit
            };
            let keep_going = match direction {
                ScanDirection::Forward => entries.iter().all(&mut deliver),
                ScanDirection::Reverse => entries.iter().rev().all(&mut deliver),
            };
            if !keep_going {
                return;
            }
            target = match direction {
                ScanDirection::Forward => match high {
                    None => return,
                    Some(h) => {
                        let past_end = match end {
                            Bound::Included(e) => h > e,
                            Bound::Excluded(e) => h >= e,
                            Bound::Unbounded => false,
                        };
                        if past_end {
                            return;
                        }
                        Target::Key(h)
                    }
                },
                ScanDirection::Reverse => match low {
                    None => return,
                    Some(l) => {
                        let before_start = match start {
                            Bound::Included(s) | Bound::Excluded(s) => l <= s,
                            Bound::Unbounded => false,
                        };
                        if before_start {
                            return;
                        }
                        Target::Below(l)
                    }
                },
            };
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
        // node of `self`; leaves are freed only when `self` is dropped, which
        // cannot happen while it is borrowed.
        let node = unsafe { &*(leaf.addr as *const Node<W>) };
        Some(node.leaf_version.load(Ordering::Acquire))
    }

    /// `true` iff `leaf` belongs to this index and its structural version is
    /// still `version` (no insert, delete or split since it was recorded).
    pub fn validate_leaf(&self, leaf: LeafRef, version: u64) -> bool {
        self.leaf_version(leaf) == Some(version)
    }

    // ------------------------------------------------------------------
    // Diagnostics
    // ------------------------------------------------------------------

    /// Checks structural invariants (sorted keys, keys within separator
    /// fences, uniform leaf depth, `len()` equals the number of keys).
    /// Meaningful only while no writer is active.
    pub fn check_invariants(&self) -> Result<(), String> {
        let g = epoch::pin();
        let root_addr = self.root.load(Ordering::Acquire);
        // SAFETY: the root word always holds a node address of this index.
        let root = unsafe { &*(root_addr as usize as *const Node<W>) };
        let mut leaf_depth = None;
        let mut total = 0usize;
        self.check_node(root, None, None, 0, &mut leaf_depth, &mut total, &g)?;
        if total != self.len() {
            return Err(format!("len() = {} but tree holds {total} keys", self.len()));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn check_node(
        &self,
        node: &Node<W>,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        depth: usize,
        leaf_depth: &mut Option<usize>,
        total: &mut usize,
        g: &Guard,
    ) -> Result<(), String> {
        let n = node.count.load(Ordering::Acquire) as usize;
        if n > self.cap {
            return Err(format!("node count {n} exceeds capacity {}", self.cap));
        }
        let mut keys = Vec::with_capacity(n);
        for i in 0..n {
            keys.push(node.key(i, g).map_err(|_| format!("null key at {i}"))?);
        }
        for w in keys.windows(2) {
            if w[0] >= w[1] {
                return Err(format!("keys not strictly increasing: {:?} >= {:?}", w[0], w[1]));
            }
        }
        for k in &keys {
            if low.is_some_and(|l| *k < l) || high.is_some_and(|h| *k >= h) {
                return Err(format!("key {k:?} outside fences {low:?}..{high:?}"));
            }
        }
        for (i, k) in keys.iter().enumerate() {
            if node.prefixes[i].load(Ordering::Acquire) != key_prefix(k) {
                return Err(format!("prefix of key {k:?} out of date"));
            }
        }
        for i in n..self.cap {
            if node.keys[i].load(Ordering::Acquire) != 0 {
                return Err(format!("stale key slot {i} not cleared"));
            }
        }
        if node.is_leaf {
            if keys.iter().any(|k| k.len() > self.max_key_len) {
                return Err("key longer than max_key_len".into());
            }
            match *leaf_depth {
                None => *leaf_depth = Some(depth),
                Some(d) if d != depth => {
                    return Err(format!("leaves at depths {d} and {depth}"));
                }
                _ => {}
            }
            *total += n;
            return Ok(());
        }
        for i in 0..=n {
            let child = node.child(i).map_err(|_| format!("null child at {i}"))?;
            let cl = if i > 0 { Some(keys[i - 1]) } else { low };
            let ch = if i < n { Some(keys[i]) } else { high };
            self.check_node(child, cl, ch, depth + 1, leaf_depth, total, g)?;
        }
        Ok(())
    }
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

fn in_range(k: &[u8], start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let after_start = match start {
        Bound::Included(s) => k >= s,
        Bound::Excluded(s) => k > s,
        Bound::Unbounded => true,
    };
    let before_end = match end {
        Bound::Included(e) => k <= e,
        Bound::Excluded(e) => k < e,
        Bound::Unbounded => true,
    };
    after_start && before_end
}

impl<W: AtomicWord> Drop for OrderedIndex<W> {
    fn drop(&mut self) {
        /// Frees `addr` and everything below it.
        ///
        /// # Safety
        /// `addr` must be a node of the index being dropped, reachable only
        /// through the tree, and not yet freed.
        unsafe fn free_subtree<W: AtomicWord>(addr: u64) {
            // SAFETY: per contract `addr` came from `Box::into_raw` in this
            // module and is freed exactly once, here.
            let node = unsafe { Box::from_raw(addr as usize as *mut Node<W>) };
            let n = node.count.load(Ordering::Relaxed) as usize;
            for i in 0..n {
                let blob = node.keys[i].load(Ordering::Relaxed);
                if blob != 0 {
                    // SAFETY: each live blob is referenced by exactly one
                    // slot in `0..count` of one node (moved, never shared;
                    // vacated slots are cleared), and we have exclusive
                    // access.
                    unsafe { free_key(blob) };
                }
            }
            if !node.is_leaf {
                for i in 0..=n {
                    let child = node.slots[i].load(Ordering::Relaxed);
                    if child != 0 {
                        // SAFETY: each node has exactly one parent slot.
                        unsafe { free_subtree::<W>(child) };
                    }
                }
            }
        }
        let root = self.root.load(Ordering::Relaxed);
        // SAFETY: `&mut self` guarantees no concurrent access; the root is the
        // only entry point into the node graph.  Blobs retired earlier by
        // `remove` are no longer in any slot and are freed by the collector.
        unsafe { free_subtree::<W>(root) };
    }
}
