//! Range scans of the B+tree, leaf versions and the read timestamps of ranges.

use super::*;

impl<W: AtomicWord> OrderedIndex<W> {
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
