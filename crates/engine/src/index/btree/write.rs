//! Writes to the B+tree: node splits, point operations (get, insert, remove) and unlinking of empty leaves.

use super::*;

impl<W: AtomicWord> OrderedIndex<W> {
    // ------------------------------------------------------------------
    // Splits
    // ------------------------------------------------------------------

    /// Splits `node` (read at version `v`), whose parent is `parent` (`None` =
    /// `node` is the root).  The parent must have room.  `insert_at` is the
    /// position at which the insert that needs the split will put its key
    /// into the leaf `node`.  Always ends with the locks released; the caller
    /// restarts its operation afterwards.
    pub(super) fn split(
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

    fn write<F: FnOnce() -> u64>(&self, key: &[u8], mode: WriteMode<F>, finger: Option<&mut Finger>) -> WriteOutcome {
        let sk = SearchKey::new(key);
        let mut mode = Some(mode);
        let mut eager = false;
        // A finger that keeps missing (keys spread over the table) rests:
        // checking it and reporting fences would only cost.
        let mut finger = finger.and_then(|f| f.worth_trying().then_some(f));
        self.with_guard(|g| Self::retry(|| self.try_write(key, &sk, &mut mode, &mut eager, finger.as_deref_mut(), g)))
    }

    /// One attempt of an insert or get-or-insert: a single descent that ends
    /// with a validated read of an existing key or an upgraded leaf lock.
    fn try_write<F: FnOnce() -> u64>(
        &self,
        key: &[u8],
        sk: &SearchKey<'_>,
        mode: &mut Option<WriteMode<F>>,
        eager: &mut bool,
        mut finger: Option<&mut Finger>,
        g: &Guard,
    ) -> Result<WriteOutcome, Restart> {
        let fingered = finger.as_deref().and_then(|f| self.finger_leaf(f, sk));
        let from_finger = fingered.is_some();
        if let Some(f) = finger.as_deref_mut() {
            f.note_attempt(from_finger);
        }
        let pos = match fingered {
            Some(pos) => pos,
            None => {
                let mode = match (*eager, finger.is_some()) {
                    (false, false) => WRITE,
                    (false, true) => WRITE_FENCES,
                    (true, false) => WRITE_EAGER,
                    (true, true) => WRITE_EAGER_FENCES,
                };
                self.descend(Target::Key(*sk), mode, None, g)?
            }
        };
        let leaf = pos.node;
        let v = pos.version;
        let n = leaf.count(self.cap);
        let (i, found) = leaf.lower_bound(n, sk, g)?;
        if found {
            return match mode.as_ref() {
                Some(WriteMode::GetOrInsert(_)) => {
                    let val = leaf.slot(i).load(Ordering::Acquire);
                    leaf.lock.check(v)?;
                    if let Some(f) = finger {
                        self.set_finger(f, leaf, v, pos.low, pos.high);
                    }
                    Ok(WriteOutcome::Existing(val))
                }
                Some(WriteMode::Upsert(new)) => {
                    let _wg = WriteGuard::upgrade(&leaf.lock, v)?;
                    let old = leaf.slot(i).load(Ordering::Acquire);
                    leaf.slot(i).store(*new, Ordering::Release);
                    if let Some(f) = finger {
                        self.set_finger(f, leaf, VersionLock::<W>::version_after_unlock(v), pos.low, pos.high);
                    }
                    Ok(WriteOutcome::Replaced(old))
                }
                None => unreachable!("write mode consumed before completion"),
            };
        }
        if n >= self.cap && from_finger {
            // A split needs the parent, which a finger does not know:
            // descend.
            if let Some(f) = finger {
                f.clear();
            }
            return Err(Restart);
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
        self.len.add(1);
        if let Some(f) = finger {
            // The insert changed the leaf's version, not its range.
            self.set_finger(f, leaf, VersionLock::<W>::version_after_unlock(v), pos.low, pos.high);
        }
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
        self.get_or_insert_near(key, make, None)
    }

    /// [`get_or_insert_with_info`](Self::get_or_insert_with_info) starting
    /// from the leaf `finger` remembers, when it still covers `key`, and
    /// leaving `finger` at the leaf this call ended in.
    pub fn get_or_insert_near(
        &self,
        key: &[u8],
        make: impl FnOnce() -> u64,
        finger: Option<&mut Finger>,
    ) -> Result<GetOrInsert, IndexError> {
        self.check_key(key)?;
        Ok(match self.write(key, WriteMode::GetOrInsert(make), finger) {
            WriteOutcome::Existing(value) => GetOrInsert { value, inserted: false, leaf_change: None },
            WriteOutcome::Inserted(value, change) => GetOrInsert { value, inserted: true, leaf_change: Some(change) },
            WriteOutcome::Replaced(_) => unreachable!("get-or-insert never replaces"),
        })
    }

    /// Inserts or overwrites `key`, returning the previous value.  Inserting a
    /// new key bumps its leaf's version; overwriting does not.
    pub fn insert(&self, key: &[u8], value: u64) -> Result<Option<u64>, IndexError> {
        self.check_key(key)?;
        Ok(match self.write(key, WriteMode::<fn() -> u64>::Upsert(value), None) {
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
                self.len.add(-1);
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
    pub(super) fn unlink_empty_leaf(&self, target: Target<'_>, g: &Guard) -> bool {
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
}

#[cfg(test)]
mod finger_tests {
    use super::*;

    fn key(i: u32) -> [u8; 4] {
        i.to_be_bytes()
    }

    #[test]
    fn ascending_inserts_reuse_the_leaf_and_a_split_or_another_index_voids_the_finger() {
        let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 8 });
        for i in 0..64 {
            index.insert(&key(i * 10), u64::from(i)).unwrap();
        }
        let mut finger = Finger::default();
        index.get_or_insert_near(&key(101), || 1, Some(&mut finger)).unwrap();
        assert_eq!(finger.index_id, index.id);
        // The next key is in the same leaf's range: the finger leads there
        // without a descent, at the version the insert's unlock left.
        let next_key = key(102);
        let next = SearchKey::new(&next_key);
        let pos = index.finger_leaf(&finger, &next).expect("the finger covers the next key");
        assert_eq!(pos.node.addr() as usize, finger.leaf);
        // A key outside the leaf's observed range is not taken from it.
        let far = key(5000);
        assert!(index.finger_leaf(&finger, &SearchKey::new(&far)).is_none());
        // Filling the leaf splits it (another path, no finger): its version
        // moves on and the finger is ignored, yet a fingered insert of a key
        // now in the new right half still lands in the right leaf.
        for i in 103..110 {
            index.insert(&key(i), 0).unwrap();
        }
        assert!(index.finger_leaf(&finger, &next).is_none(), "a split voids the finger");
        let r = index.get_or_insert_near(&key(108), || 7, Some(&mut finger)).unwrap();
        assert!(!r.inserted);
        let r = index.get_or_insert_near(&key(111), || 7, Some(&mut finger)).unwrap();
        assert!(r.inserted);
        assert_eq!(index.get(&key(111)), Some(7));
        index.check_invariants().unwrap();
        // Another index ignores the finger.
        let other = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 8 });
        assert!(other.finger_leaf(&finger, &next).is_none());
        let r = other.get_or_insert_near(&key(102), || 3, Some(&mut finger)).unwrap();
        assert!(r.inserted);
        assert_eq!(finger.index_id, other.id);
    }

    #[test]
    fn a_finger_that_keeps_missing_rests_and_comes_back_when_keys_are_close() {
        let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 4 });
        for i in 0..256 {
            index.insert(&key(i * 10), 0).unwrap();
        }
        let mut finger = Finger::default();
        // Keys far apart: every operation misses the finger's leaf.
        for i in 0..FINGER_MISSES_BEFORE_REST {
            index.get_or_insert_near(&key((i * 97 % 256) * 10 + 5), || 1, Some(&mut finger)).unwrap();
        }
        assert!(finger.misses >= FINGER_MISSES_BEFORE_REST);
        // Resting: most operations neither check nor move the finger.
        let resting = finger;
        index.get_or_insert_near(&key(2000), || 1, Some(&mut finger)).unwrap();
        assert_eq!((finger.leaf, finger.version), (resting.leaf, resting.version), "a resting finger is not moved");
        // Close keys again: within one retry period the finger is tried,
        // lands, and then leads every following operation.
        for i in 0..FINGER_RETRY_EVERY {
            index.get_or_insert_near(&key(1500 + i % 2), || 1, Some(&mut finger)).unwrap();
        }
        assert!(finger.misses < FINGER_MISSES_BEFORE_REST, "misses {}", finger.misses);
        index.check_invariants().unwrap();
    }

    #[test]
    fn indexes_with_long_keys_keep_no_finger() {
        let index = OrderedIndex::new(40);
        let mut finger = Finger::default();
        index.get_or_insert_near(b"a key longer than sixteen bytes", || 1, Some(&mut finger)).unwrap();
        assert_eq!(finger.index_id, 0);
    }
}
