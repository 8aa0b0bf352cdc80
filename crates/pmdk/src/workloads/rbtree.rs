//! `rbtree`: a persistent red-black tree (insert-only; CLRS insertion and
//! fix-up, with 0 as the black NIL), under one tree-wide reader-writer lock.
//!
//! Root words: `WORDS + 0` the tree's root node, `+ 8` the key count. Nodes
//! are `[key, colour, left, right, parent, value...]`, allocated in the
//! inserting transaction; every modified node header is snapshotted (40
//! bytes, once per transaction: later snapshots of the same range cost a
//! lookup).

use super::{map, root, type_num, Checker, Outcome, Shape, Structure, Worker, LOAD_BATCH};
use crate::pool::{Pool, Tx};
use crate::PmdkError;
use parking_lot::RwLock;

const TREE: u64 = root::WORDS;
const COUNT: u64 = root::WORDS + 8;

/// Node field offsets.
const KEY: u64 = 0;
const COLOR: u64 = 8;
const LEFT: u64 = 16;
const RIGHT: u64 = 24;
const PARENT: u64 = 32;
const VALUE: u64 = 40;
/// The node header: everything but the value.
const HEADER: u64 = VALUE;

const BLACK: u64 = 0;
const RED: u64 = 1;

/// Deepest path the check follows (a valid tree of 2^40 keys is at most 80
/// deep).
const MAX_DEPTH: u32 = 128;

pub(crate) struct RbTree {
    root: u64,
    shape: Shape,
    lock: RwLock<()>,
}

/// The tree inside one transaction.
struct InTx<'t, 'p> {
    tx: &'t Tx<'p>,
    root: u64,
}

impl InTx<'_, '_> {
    fn get(&self, node: u64, field: u64) -> u64 {
        self.tx.load(node + field)
    }

    /// Snapshots `node`'s header and sets one of its fields.
    fn put(&self, node: u64, field: u64, value: u64) -> Result<(), PmdkError> {
        self.tx.add_range(node, HEADER)?;
        self.tx.set(node + field, value);
        Ok(())
    }

    fn tree(&self) -> u64 {
        self.tx.load(self.root + TREE)
    }

    fn set_tree(&self, node: u64) -> Result<(), PmdkError> {
        self.tx.store(self.root + TREE, node)
    }

    fn is_red(&self, node: u64) -> bool {
        node != 0 && self.get(node, COLOR) == RED
    }

    /// The node holding `key`, or 0.
    fn find(&self, key: u64) -> u64 {
        let mut node = self.tree();
        while node != 0 {
            let node_key = self.get(node, KEY);
            if key == node_key {
                return node;
            }
            node = self.get(node, if key < node_key { LEFT } else { RIGHT });
        }
        0
    }

    /// Replaces `old` by `new` in `old`'s parent (or as the tree's root).
    fn replace_child(&self, parent: u64, old: u64, new: u64) -> Result<(), PmdkError> {
        if parent == 0 {
            self.set_tree(new)
        } else if self.get(parent, LEFT) == old {
            self.put(parent, LEFT, new)
        } else {
            self.put(parent, RIGHT, new)
        }
    }

    /// CLRS LEFT-ROTATE (`side == LEFT`) or RIGHT-ROTATE (`side == RIGHT`)
    /// around `x`.
    fn rotate(&self, x: u64, side: u64) -> Result<(), PmdkError> {
        let other = if side == LEFT { RIGHT } else { LEFT };
        let y = self.get(x, other);
        let inner = self.get(y, side);
        self.put(x, other, inner)?;
        if inner != 0 {
            self.put(inner, PARENT, x)?;
        }
        let parent = self.get(x, PARENT);
        self.put(y, PARENT, parent)?;
        self.replace_child(parent, x, y)?;
        self.put(y, side, x)?;
        self.put(x, PARENT, y)
    }

    /// CLRS RB-INSERT-FIXUP.
    fn fix_up(&self, mut z: u64) -> Result<(), PmdkError> {
        loop {
            let parent = self.get(z, PARENT);
            if !self.is_red(parent) {
                break;
            }
            // A red parent is not the root, so the grandparent exists.
            let grandparent = self.get(parent, PARENT);
            let (side, other) = if parent == self.get(grandparent, LEFT) { (LEFT, RIGHT) } else { (RIGHT, LEFT) };
            let uncle = self.get(grandparent, other);
            if self.is_red(uncle) {
                self.put(parent, COLOR, BLACK)?;
                self.put(uncle, COLOR, BLACK)?;
                self.put(grandparent, COLOR, RED)?;
                z = grandparent;
            } else {
                if z == self.get(parent, other) {
                    z = parent;
                    self.rotate(z, side)?;
                }
                let parent = self.get(z, PARENT);
                let grandparent = self.get(parent, PARENT);
                self.put(parent, COLOR, BLACK)?;
                self.put(grandparent, COLOR, RED)?;
                self.rotate(grandparent, other)?;
            }
        }
        let tree = self.tree();
        if self.get(tree, COLOR) != BLACK {
            self.put(tree, COLOR, BLACK)?;
        }
        Ok(())
    }

    /// Inserts or overwrites `key` (CLRS RB-INSERT); `true` if new.
    fn insert(&self, key: u64, value: &[u64], stride: u64) -> Result<bool, PmdkError> {
        let (mut parent, mut node) = (0, self.tree());
        while node != 0 {
            parent = node;
            let node_key = self.get(node, KEY);
            if key == node_key {
                self.tx.add_range(node + VALUE, stride)?;
                self.tx.set_words(node + VALUE, value);
                return Ok(false);
            }
            node = self.get(node, if key < node_key { LEFT } else { RIGHT });
        }
        let z = self.tx.alloc(VALUE + stride, type_num::RB_NODE, false)?;
        // Allocated in this transaction: no snapshot for its own fields.
        self.tx.set(z + KEY, key);
        self.tx.set(z + COLOR, RED);
        self.tx.set(z + LEFT, 0);
        self.tx.set(z + RIGHT, 0);
        self.tx.set(z + PARENT, parent);
        self.tx.set_words(z + VALUE, value);
        if parent == 0 {
            self.set_tree(z)?;
        } else if key < self.get(parent, KEY) {
            self.put(parent, LEFT, z)?;
        } else {
            self.put(parent, RIGHT, z)?;
        }
        self.fix_up(z)?;
        self.tx.store(self.root + COUNT, self.tx.load(self.root + COUNT) + 1)?;
        Ok(true)
    }
}

impl Structure for RbTree {
    fn load(pool: &Pool, shape: &Shape, seed: u64) -> Result<Self, PmdkError> {
        let tree = Self { root: pool.root(), shape: shape.clone(), lock: RwLock::new(()) };
        let mut value = vec![0; shape.words];
        for batch in super::shuffled(shape.entries, seed).chunks(LOAD_BATCH as usize) {
            pool.tx(|tx| {
                let in_tx = InTx { tx, root: tree.root };
                for &key in batch {
                    super::fill_value(key, 0, shape.entry_size, &mut value);
                    in_tx.insert(key, &value, shape.stride)?;
                }
                Ok(())
            })?;
        }
        Ok(tree)
    }

    fn op(&self, pool: &Pool, worker: &mut Worker<'_>) -> Result<Outcome, PmdkError> {
        let insert = worker.inserts();
        let key = worker.key();
        if insert {
            let version = worker.version();
            super::fill_value(key, version, self.shape.entry_size, &mut worker.value);
            let value = &worker.value;
            let _writer = self.lock.write();
            let new = pool.tx(|tx| InTx { tx, root: self.root }.insert(key, value, self.shape.stride))?;
            Ok(map::inserted(new))
        } else {
            let value = &mut worker.value;
            let _reader = self.lock.read();
            let found = pool.tx(|tx| {
                let node = InTx { tx, root: self.root }.find(key);
                if node != 0 {
                    tx.pool().load_words(node + VALUE, value);
                }
                Ok(node != 0)
            })?;
            Ok(map::searched(found))
        }
    }

    fn check(pool: &Pool, shape: &Shape) -> Result<(u64, String), PmdkError> {
        let checker = Checker { pool, workload: "rbtree" };
        let root_off = pool.root();
        let (tree, count) = (pool.load(root_off + TREE), pool.load(root_off + COUNT));
        let mut walk = Walk {
            checker: &checker,
            shape,
            seen: vec![false; shape.key_space as usize],
            value: vec![0; shape.words],
            nodes: 0,
            height: 0,
        };
        if tree != 0 {
            checker.object(tree, HEADER, "the root node")?;
            if pool.load(tree + COLOR) != BLACK {
                return Err(checker.error("the root is red"));
            }
        }
        let black_height = walk.node(tree, 0, None, None, 0)?;
        if walk.nodes != count {
            return Err(checker.error(format!("{} nodes in the tree, count says {count}", walk.nodes)));
        }
        if let Some(missing) = (0..shape.entries).find(|&key| !walk.seen[key as usize]) {
            return Err(checker.error(format!("loaded key {missing} is missing")));
        }
        Ok((
            count,
            format!(
                "{count} keys in order, black height {black_height}, height {}, no red node with a red child",
                walk.height
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
    nodes: u64,
    height: u32,
}

impl Walk<'_, '_> {
    /// Checks the subtree at `node` (child of `parent`, keys in `(low,
    /// high)`), returns its black height (NIL counts 1).
    fn node(
        &mut self,
        node: u64,
        parent: u64,
        low: Option<u64>,
        high: Option<u64>,
        depth: u32,
    ) -> Result<u32, PmdkError> {
        if node == 0 {
            return Ok(1);
        }
        let (checker, pool) = (self.checker, self.checker.pool);
        if depth >= MAX_DEPTH {
            return Err(checker.error(format!("a path is deeper than {MAX_DEPTH} (a cycle?)")));
        }
        self.height = self.height.max(depth + 1);
        let what = format!("node at {node:#x} (depth {depth})");
        checker.object(node, VALUE + self.shape.stride, &what)?;
        let key = pool.load(node + KEY);
        let color = pool.load(node + COLOR);
        if key >= self.shape.key_space || low.is_some_and(|low| key <= low) || high.is_some_and(|high| key >= high) {
            return Err(checker.error(format!("{what} holds key {key}, out of order (bounds {low:?}..{high:?})")));
        }
        if std::mem::replace(&mut self.seen[key as usize], true) {
            return Err(checker.error(format!("key {key} is in the tree twice")));
        }
        if pool.load(node + PARENT) != parent {
            return Err(checker.error(format!("{what}: parent pointer is not its parent {parent:#x}")));
        }
        if color != RED && color != BLACK {
            return Err(checker.error(format!("{what}: colour {color}")));
        }
        let (value_key, _) = checker.value(node + VALUE, self.shape, &mut self.value, &what)?;
        if value_key != key {
            return Err(checker.error(format!("{what} with key {key} holds the value of key {value_key}")));
        }
        self.nodes += 1;
        let (left, right) = (pool.load(node + LEFT), pool.load(node + RIGHT));
        if color == RED {
            for child in [left, right] {
                if child != 0 {
                    checker.object(child, HEADER, "a child")?;
                    if pool.load(child + COLOR) == RED {
                        return Err(checker.error(format!("{what} is red and has a red child")));
                    }
                }
            }
        }
        let left_height = self.node(left, node, low, Some(key), depth + 1)?;
        let right_height = self.node(right, node, Some(key), high, depth + 1)?;
        if left_height != right_height {
            return Err(
                checker.error(format!("{what}: black heights {left_height} (left) and {right_height} (right) differ"))
            );
        }
        Ok(left_height + u32::from(color == BLACK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{assert_inconsistent, check_after};
    use crate::MicroWorkload;

    #[test]
    fn a_clean_load_passes() {
        for entries in [1, 2, 3, 10, 700] {
            let report = check_after::<RbTree>(MicroWorkload::RbTree, entries, |_| Ok(())).unwrap();
            assert_eq!(report.items, entries);
        }
    }

    #[test]
    fn a_red_root_is_found() {
        let result = check_after::<RbTree>(MicroWorkload::RbTree, 700, |tx| {
            let tree = tx.load(tx.pool().root() + TREE);
            tx.store(tree + COLOR, RED)
        });
        assert_inconsistent(result, "root is red");
    }

    #[test]
    fn a_black_height_violation_is_found() {
        let result = check_after::<RbTree>(MicroWorkload::RbTree, 700, |tx| {
            // Flip the colour of the leftmost node: painted black, its
            // path gets one more black node than its sibling's; painted
            // red, either that happens the other way or a red node gets a
            // red neighbour.
            let mut node = tx.load(tx.pool().root() + TREE);
            loop {
                let left = tx.load(node + LEFT);
                if left == 0 {
                    break;
                }
                node = left;
            }
            tx.store(node + COLOR, 1 - tx.load(node + COLOR))
        });
        match result {
            Err(PmdkError::Inconsistent { .. }) => {}
            other => panic!("expected an inconsistency, got {other:?}"),
        }
    }

    #[test]
    fn keys_out_of_order_are_found() {
        let result = check_after::<RbTree>(MicroWorkload::RbTree, 700, |tx| {
            let tree = tx.load(tx.pool().root() + TREE);
            let left = tx.load(tree + LEFT);
            let key = tx.load(tree + KEY);
            tx.store(left + KEY, key + 1)
        });
        assert_inconsistent(result, "out of order");
    }
}
