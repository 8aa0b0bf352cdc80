//! `btree`: a persistent B-tree of order 8 (minimum degree 4: 3 to 7 keys
//! per node but the root, 8 children at most), insert-only with CLRS
//! B-TREE-INSERT (full nodes split on the way down), values inline in the
//! nodes, under one tree-wide reader-writer lock.
//!
//! Root words: `WORDS + 0` the root node (always present, an empty leaf at
//! first), `+ 8` the key count. Nodes are `[nkeys, leaf, keys[7],
//! children[8], values[7]]`, allocated in the inserting transaction; a
//! modified node snapshots only the slots it shifts.

use super::{map, root, type_num, Checker, Outcome, Shape, Structure, Worker, LOAD_BATCH};
use crate::pool::{Pool, Tx};
use crate::PmdkError;
use parking_lot::RwLock;

const TREE: u64 = root::WORDS;
const COUNT: u64 = root::WORDS + 8;

/// Minimum degree.
const T: u64 = 4;
const MAX_KEYS: u64 = 2 * T - 1;
const MIN_KEYS: u64 = T - 1;

/// Node field offsets.
const NKEYS: u64 = 0;
const LEAF: u64 = 8;
const KEYS: u64 = 16;
const CHILDREN: u64 = KEYS + 8 * MAX_KEYS;
const VALUES: u64 = CHILDREN + 8 * (MAX_KEYS + 1);

/// Deepest path the check follows.
const MAX_DEPTH: u32 = 64;

fn node_size(stride: u64) -> u64 {
    VALUES + MAX_KEYS * stride
}

pub(crate) struct BTree {
    root: u64,
    shape: Shape,
    lock: RwLock<()>,
}

/// The tree inside one transaction.
struct InTx<'t, 'p> {
    tx: &'t Tx<'p>,
    root: u64,
    stride: u64,
}

impl InTx<'_, '_> {
    fn nkeys(&self, node: u64) -> u64 {
        self.tx.load(node + NKEYS)
    }

    fn is_leaf(&self, node: u64) -> bool {
        self.tx.load(node + LEAF) != 0
    }

    fn key_at(node: u64, index: u64) -> u64 {
        node + KEYS + 8 * index
    }

    fn child_at(node: u64, index: u64) -> u64 {
        node + CHILDREN + 8 * index
    }

    fn value_at(&self, node: u64, index: u64) -> u64 {
        node + VALUES + index * self.stride
    }

    fn key(&self, node: u64, index: u64) -> u64 {
        self.tx.load(Self::key_at(node, index))
    }

    fn child(&self, node: u64, index: u64) -> u64 {
        self.tx.load(Self::child_at(node, index))
    }

    /// The number of keys of `node` below `key`.
    fn rank(&self, node: u64, key: u64) -> u64 {
        let count = self.nkeys(node);
        (0..count).find(|&index| self.key(node, index) >= key).unwrap_or(count)
    }

    /// `(node, index)` of `key`.
    fn find(&self, key: u64) -> Option<(u64, u64)> {
        let mut node = self.tx.load(self.root + TREE);
        loop {
            let index = self.rank(node, key);
            if index < self.nkeys(node) && self.key(node, index) == key {
                return Some((node, index));
            }
            if self.is_leaf(node) {
                return None;
            }
            node = self.child(node, index);
        }
    }

    /// A new empty node (allocated in this transaction: writable without
    /// snapshots).
    fn new_node(&self, leaf: bool) -> Result<u64, PmdkError> {
        let node = self.tx.alloc(node_size(self.stride), type_num::BTREE_NODE, false)?;
        self.tx.set(node + NKEYS, 0);
        self.tx.set(node + LEAF, u64::from(leaf));
        Ok(node)
    }

    /// Opens slot `index` of `node` (which has `count < MAX_KEYS` keys) by
    /// shifting keys and values `index..count` one slot right, snapshotting
    /// what moves.
    fn open_slot(&self, node: u64, index: u64, count: u64) -> Result<(), PmdkError> {
        let moved = count - index;
        self.tx.add_range(Self::key_at(node, index), 8 * (moved + 1))?;
        self.tx.move_words(Self::key_at(node, index), Self::key_at(node, index + 1), moved);
        self.tx.add_range(self.value_at(node, index), self.stride * (moved + 1))?;
        self.tx.move_words(self.value_at(node, index), self.value_at(node, index + 1), moved * self.stride / 8);
        Ok(())
    }

    /// CLRS B-TREE-SPLIT-CHILD: splits `full`, child `index` of the non-full
    /// `parent`, moving its median up.
    fn split_child(&self, parent: u64, index: u64, full: u64) -> Result<(), PmdkError> {
        let leaf = self.is_leaf(full);
        let right = self.new_node(leaf)?;
        self.tx.set(right + NKEYS, MIN_KEYS);
        self.tx.move_words(Self::key_at(full, T), Self::key_at(right, 0), MIN_KEYS);
        self.tx.move_words(self.value_at(full, T), self.value_at(right, 0), MIN_KEYS * self.stride / 8);
        if !leaf {
            self.tx.move_words(Self::child_at(full, T), Self::child_at(right, 0), T);
        }
        // The upper half of `full` stays as garbage past its key count.
        self.tx.store(full + NKEYS, MIN_KEYS)?;

        let count = self.nkeys(parent);
        let moved_children = count - index;
        self.tx.add_range(Self::child_at(parent, index + 1), 8 * (moved_children + 1))?;
        self.tx.move_words(Self::child_at(parent, index + 1), Self::child_at(parent, index + 2), moved_children);
        self.tx.set(Self::child_at(parent, index + 1), right);
        self.open_slot(parent, index, count)?;
        self.tx.set(Self::key_at(parent, index), self.key(full, T - 1));
        self.tx.move_words(self.value_at(full, T - 1), self.value_at(parent, index), self.stride / 8);
        self.tx.store(parent + NKEYS, count + 1)
    }

    /// Inserts or overwrites `key`; `true` if new.
    fn insert(&self, key: u64, value: &[u64]) -> Result<bool, PmdkError> {
        if let Some((node, index)) = self.find(key) {
            let slot = self.value_at(node, index);
            self.tx.add_range(slot, self.stride)?;
            self.tx.set_words(slot, value);
            return Ok(false);
        }
        let mut node = self.tx.load(self.root + TREE);
        if self.nkeys(node) == MAX_KEYS {
            let new_root = self.new_node(false)?;
            self.tx.set(Self::child_at(new_root, 0), node);
            self.tx.store(self.root + TREE, new_root)?;
            self.split_child(new_root, 0, node)?;
            node = new_root;
        }
        // CLRS B-TREE-INSERT-NONFULL, iteratively; `key` is absent.
        loop {
            let count = self.nkeys(node);
            let mut index = self.rank(node, key);
            if self.is_leaf(node) {
                self.open_slot(node, index, count)?;
                self.tx.set(Self::key_at(node, index), key);
                self.tx.set_words(self.value_at(node, index), value);
                self.tx.store(node + NKEYS, count + 1)?;
                break;
            }
            let child = self.child(node, index);
            if self.nkeys(child) == MAX_KEYS {
                self.split_child(node, index, child)?;
                if key > self.key(node, index) {
                    index += 1;
                }
            }
            node = self.child(node, index);
        }
        self.tx.store(self.root + COUNT, self.tx.load(self.root + COUNT) + 1)?;
        Ok(true)
    }
}

impl Structure for BTree {
    fn load(pool: &Pool, shape: &Shape, seed: u64) -> Result<Self, PmdkError> {
        let tree = Self { root: pool.root(), shape: shape.clone(), lock: RwLock::new(()) };
        pool.tx(|tx| {
            let in_tx = InTx { tx, root: tree.root, stride: shape.stride };
            let leaf = in_tx.new_node(true)?;
            tx.store(tree.root + TREE, leaf)
        })?;
        let mut value = vec![0; shape.words];
        for batch in super::shuffled(shape.entries, seed).chunks(LOAD_BATCH as usize) {
            pool.tx(|tx| {
                let in_tx = InTx { tx, root: tree.root, stride: shape.stride };
                for &key in batch {
                    super::fill_value(key, 0, shape.entry_size, &mut value);
                    in_tx.insert(key, &value)?;
                }
                Ok(())
            })?;
        }
        Ok(tree)
    }

    fn op(&self, pool: &Pool, worker: &mut Worker<'_>) -> Result<Outcome, PmdkError> {
        let insert = worker.inserts();
        let key = worker.key();
        let stride = self.shape.stride;
        if insert {
            let version = worker.version();
            super::fill_value(key, version, self.shape.entry_size, &mut worker.value);
            let value = &worker.value;
            let _writer = self.lock.write();
            let new = pool.tx(|tx| InTx { tx, root: self.root, stride }.insert(key, value))?;
            Ok(map::inserted(new))
        } else {
            let value = &mut worker.value;
            let _reader = self.lock.read();
            let found = pool.tx(|tx| {
                let in_tx = InTx { tx, root: self.root, stride };
                let found = in_tx.find(key);
                if let Some((node, index)) = found {
                    tx.pool().load_words(in_tx.value_at(node, index), value);
                }
                Ok(found.is_some())
            })?;
            Ok(map::searched(found))
        }
    }

    fn check(pool: &Pool, shape: &Shape) -> Result<(u64, String), PmdkError> {
        let checker = Checker { pool, workload: "btree" };
        let root_off = pool.root();
        let (tree, count) = (pool.load(root_off + TREE), pool.load(root_off + COUNT));
        let mut walk = Walk {
            checker: &checker,
            shape,
            seen: vec![false; shape.key_space as usize],
            value: vec![0; shape.words],
            keys: 0,
            nodes: 0,
            leaf_depth: None,
        };
        walk.node(tree, None, None, 0)?;
        if walk.keys != count {
            return Err(checker.error(format!("{} keys in the tree, count says {count}", walk.keys)));
        }
        if let Some(missing) = (0..shape.entries).find(|&key| !walk.seen[key as usize]) {
            return Err(checker.error(format!("loaded key {missing} is missing")));
        }
        Ok((
            count,
            format!(
                "{count} keys in order in {} nodes, all leaves at depth {}, 3..=7 keys per non-root node",
                walk.nodes,
                walk.leaf_depth.unwrap_or(0)
            ),
        ))
    }
}

/// The recursive check.
struct Walk<'c, 'p> {
    checker: &'c Checker<'p>,
    shape: &'c Shape,
    seen: Vec<bool>,
    value: Vec<u64>,
    keys: u64,
    nodes: u64,
    leaf_depth: Option<u32>,
}

impl Walk<'_, '_> {
    /// Checks the subtree at `node` (keys in `(low, high)`).
    fn node(&mut self, node: u64, low: Option<u64>, high: Option<u64>, depth: u32) -> Result<(), PmdkError> {
        let (checker, pool, stride) = (self.checker, self.checker.pool, self.shape.stride);
        if depth >= MAX_DEPTH {
            return Err(checker.error(format!("a path is deeper than {MAX_DEPTH} (a cycle?)")));
        }
        let what = format!("node at {node:#x} (depth {depth})");
        checker.object(node, node_size(stride), &what)?;
        let (count, leaf) = (pool.load(node + NKEYS), pool.load(node + LEAF));
        if leaf > 1 {
            return Err(checker.error(format!("{what}: leaf flag {leaf}")));
        }
        let leaf = leaf == 1;
        let min = if depth > 0 { MIN_KEYS } else { u64::from(!leaf) };
        if count < min || count > MAX_KEYS {
            return Err(checker.error(format!("{what} has {count} keys (allowed {min}..={MAX_KEYS})")));
        }
        self.nodes += 1;
        let mut previous = low;
        for index in 0..count {
            let key = pool.load(node + KEYS + 8 * index);
            if key >= self.shape.key_space
                || previous.is_some_and(|previous| key <= previous)
                || high.is_some_and(|high| key >= high)
            {
                return Err(checker.error(format!(
                    "{what}: key {index} is {key}, out of order (after {previous:?}, bound {high:?})"
                )));
            }
            if std::mem::replace(&mut self.seen[key as usize], true) {
                return Err(checker.error(format!("key {key} is in the tree twice")));
            }
            let slot_what = format!("{what}, value {index}");
            let (value_key, _) =
                checker.value(node + VALUES + index * stride, self.shape, &mut self.value, &slot_what)?;
            if value_key != key {
                return Err(checker.error(format!("{slot_what} with key {key} holds the value of key {value_key}")));
            }
            previous = Some(key);
        }
        self.keys += count;
        if leaf {
            match self.leaf_depth {
                None => self.leaf_depth = Some(depth),
                Some(expected) if expected != depth => {
                    return Err(checker.error(format!("{what} is a leaf at depth {depth}, others at {expected}")));
                }
                Some(_) => {}
            }
            return Ok(());
        }
        for index in 0..=count {
            let child = pool.load(node + CHILDREN + 8 * index);
            let child_low = if index == 0 { low } else { Some(pool.load(node + KEYS + 8 * (index - 1))) };
            let child_high = if index == count { high } else { Some(pool.load(node + KEYS + 8 * index)) };
            self.node(child, child_low, child_high, depth + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{assert_inconsistent, check_after};
    use crate::MicroWorkload;

    #[test]
    fn a_clean_load_passes() {
        for entries in [1, 7, 8, 30, 1000] {
            let report = check_after::<BTree>(MicroWorkload::BTree, entries, |_| Ok(())).unwrap();
            assert_eq!(report.items, entries);
        }
    }

    #[test]
    fn keys_out_of_order_are_found() {
        let result = check_after::<BTree>(MicroWorkload::BTree, 1000, |tx| {
            let tree = tx.load(tx.pool().root() + TREE);
            let first_child = tx.load(tree + CHILDREN);
            tx.store(first_child + KEYS, tx.load(tree + KEYS) + 1)
        });
        assert_inconsistent(result, "out of order");
    }

    #[test]
    fn an_underfull_node_is_found() {
        let result = check_after::<BTree>(MicroWorkload::BTree, 1000, |tx| {
            let tree = tx.load(tx.pool().root() + TREE);
            let first_child = tx.load(tree + CHILDREN);
            tx.store(first_child + NKEYS, 1)
        });
        assert_inconsistent(result, "keys (allowed 3..=7)");
    }

    #[test]
    fn a_wrong_count_is_found() {
        let result = check_after::<BTree>(MicroWorkload::BTree, 1000, |tx| {
            let root_off = tx.pool().root();
            tx.store(root_off + COUNT, 999)
        });
        assert_inconsistent(result, "count says 999");
    }
}
