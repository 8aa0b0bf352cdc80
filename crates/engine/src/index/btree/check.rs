//! Diagnostics of the B+tree: test hooks, node accounting and the structural invariant check.

use super::*;

impl<W: AtomicWord> OrderedIndex<W> {
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
            if (w.p0, w.p1) != crate::index::key::prefix_words(&k) {
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
