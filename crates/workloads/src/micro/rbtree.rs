//! RBTree: inserts and searches in a red-black tree whose nodes are rows,
//! changed by transactions like any data, so the tree's structural
//! conflicts (recolourings and rotations near the root) are real
//! conflicts between transactions.
//!
//! # Tables
//!
//! * `rb_nodes` (hash index): key [`key`]`(node id)`; value
//!   [`HEADER_LEN`] + `entry_size` bytes: the node header
//!   ([`NodeHeader::encode`]: `key`, `left`, `right`, `parent` as
//!   little-endian `u64`s, then the colour byte, 1 = red, 0 = black, then 7
//!   zero bytes), then the payload [`fill_entry`]`(payload, key,
//!   Some(version))` (word 0 the key, word 1 the version, the filler of the
//!   key after that). Node id 0 ([`NIL`]) is the nil leaf: it has no row.
//! * `rb_root` (hash index): one row, key `key(0)`, value the root's node
//!   id and the node count as little-endian `u64`s (16 bytes).
//!
//! Node ids: the loaded node of key `k` has id `k + 1`; a node a client
//! adds has id `((worker_index + 1) << 40) | n`, `n` counting that worker's
//! new nodes from 1 (an id found taken, by a client of an earlier run on
//! the same database, is skipped), so workers never collide and the ids
//! follow from the seed.
//!
//! # Load
//!
//! The keys `0..micro_entries` as a perfectly balanced tree built
//! directly: the node of a key range `lo..hi` holds key `lo + (hi - lo) /
//! 2`, its children the halves below and above; every node is black
//! except, when the tree is not perfect (`micro_entries + 1` not a power of
//! two), those on the deepest level, which are red. Every path from the
//! root to a nil then has `floor(log2(micro_entries))` black nodes.
//!
//! # Transactions
//!
//! The key space and key choice are those of [`hash`](super::hash): keys
//! `0..2 * micro_entries`, an **insert** with probability
//! `insert_percent` else a **search**, the key from the scrambled zipfian.
//!
//! * insert: read the root row, descend from the root reading nodes; if
//!   the key is there, overwrite that node's payload (new version) and
//!   stop. Else insert a new red node under the last node reached and run
//!   CLRS's `RB-INSERT-FIXUP` (recolourings, left and right rotations),
//!   then write the header of every node whose header changed, and the
//!   root row (new root, count + 1).
//! * search: read the root row and descend (read-only).
//!
//! # Check
//!
//! From the root row: binary-search-tree order, a black root, no red node
//! with a red child, the same number of black nodes on every path to a
//! nil, parent pointers matching child pointers, no pointer to a missing
//! node or cycle; every row reachable, and their number equal to the stored
//! count; every value of [`HEADER_LEN`] + `entry_size` bytes whose payload
//! embeds its node's key.

use super::{entry_matches, fill_entry, inconsistent, key, parse_key, Common, KeyGenerator};
use crate::common::{corrupt, load_parallel, verify_tables};
use crate::zipf::Zipfian;
use crate::{CheckReport, Client, TxnSummary, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, DbError, Outcome, TableSchema, Transaction, TxError, TxResult, Worker};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Transaction type names.
pub const TRANSACTION_TYPES: [&str; 2] = ["insert", "search"];
/// Type index of an insert.
pub const INSERT: usize = 0;
/// Type index of a search.
pub const SEARCH: usize = 1;
/// Bytes of a node header in front of the payload.
pub const HEADER_LEN: usize = 40;
/// The nil node id.
pub const NIL: u64 = 0;
/// The key of the root row.
pub const ROOT_KEY: u64 = 0;
/// Bits of a client node id below the worker index.
pub const WORKER_ID_SHIFT: u32 = 40;
/// Longest path a transaction follows before it calls the tree cyclic (a
/// red-black tree of 2^64 nodes is at most 128 deep).
const MAX_DEPTH: usize = 130;

/// Table ids.
pub mod table {
    use pmtx_engine::TableId;
    /// The nodes.
    pub const NODES: TableId = TableId(0);
    /// The root row.
    pub const ROOT: TableId = TableId(1);
    /// Table names, by id.
    pub const NAMES: [&str; 2] = ["rb_nodes", "rb_root"];
}

/// A node's header: its key, links and colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeHeader {
    /// The key.
    pub key: u64,
    /// Left child (keys below), [`NIL`] if none.
    pub left: u64,
    /// Right child (keys above), [`NIL`] if none.
    pub right: u64,
    /// Parent, [`NIL`] for the root.
    pub parent: u64,
    /// Red (else black).
    pub red: bool,
}

impl NodeHeader {
    /// The first [`HEADER_LEN`] bytes of the node's value.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        for (index, word) in [self.key, self.left, self.right, self.parent].into_iter().enumerate() {
            out[index * 8..index * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        out[32] = self.red as u8;
        out
    }

    /// The header of a node's value, or `None` if the value is shorter than
    /// [`HEADER_LEN`] or the colour byte or padding is damaged.
    pub fn decode(value: &[u8]) -> Option<Self> {
        let header = value.get(..HEADER_LEN)?;
        let word = |index: usize| u64::from_le_bytes(header[index * 8..index * 8 + 8].try_into().expect("8 bytes"));
        if header[32] > 1 || header[33..].iter().any(|&byte| byte != 0) {
            return None;
        }
        Some(Self { key: word(0), left: word(1), right: word(2), parent: word(3), red: header[32] == 1 })
    }
}

/// The root row's value.
pub fn root_value(root: u64, count: u64) -> [u8; 16] {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&root.to_le_bytes());
    value[8..].copy_from_slice(&count.to_le_bytes());
    value
}

/// (root node id, node count) of a root row.
pub fn parse_root(value: &[u8]) -> Option<(u64, u64)> {
    let value: &[u8; 16] = value.try_into().ok()?;
    Some((u64::from_le_bytes(value[..8].try_into().ok()?), u64::from_le_bytes(value[8..].try_into().ok()?)))
}

/// The node id of loaded key `k`.
pub fn loaded_id(k: u64) -> u64 {
    k + 1
}

/// The header of key `k` in the balanced tree of keys `0..n` that load
/// builds.
pub fn balanced_header(n: u64, k: u64) -> NodeHeader {
    debug_assert!(k < n);
    let middle = |lo: u64, hi: u64| lo + (hi - lo) / 2;
    let (mut lo, mut hi, mut parent, mut depth) = (0, n, NIL, 0u32);
    loop {
        let mid = middle(lo, hi);
        if k == mid {
            break;
        }
        parent = loaded_id(mid);
        if k < mid {
            hi = mid;
        } else {
            lo = mid + 1;
        }
        depth += 1;
    }
    let mid = middle(lo, hi);
    let left = if lo < mid { loaded_id(middle(lo, mid)) } else { NIL };
    let right = if mid + 1 < hi { loaded_id(middle(mid + 1, hi)) } else { NIL };
    // The deepest level (depth floor(log2 n)) is red unless the tree is
    // perfect.
    let perfect = (n + 1).is_power_of_two();
    let red = !perfect && depth == n.ilog2();
    NodeHeader { key: k, left, right, parent, red }
}

struct Shared {
    common: Common,
    /// Over the key space `0..2 * entries`.
    zipf: Zipfian,
    loaded: AtomicBool,
    /// New nodes committed since the load.
    added: AtomicU64,
    /// Per worker index: the next id counter (so a later client of the
    /// same worker index continues after the ids taken).
    next_ids: Mutex<HashMap<usize, Arc<AtomicU64>>>,
}

impl Shared {
    fn value_len(&self) -> usize {
        HEADER_LEN + self.common.entry_size
    }

    fn next_id(&self, worker_index: usize) -> Arc<AtomicU64> {
        let mut next_ids = self.next_ids.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = ((worker_index as u64 + 1) << WORKER_ID_SHIFT) | 1;
        Arc::clone(next_ids.entry(worker_index).or_insert_with(|| Arc::new(AtomicU64::new(first))))
    }
}

/// The RBTree workload.
pub struct RbTree {
    shared: Arc<Shared>,
}

impl RbTree {
    /// RBTree with `options.micro_entries`, `entry_size`, `insert_percent`
    /// and `theta`; computes the zipfian constants (O(entries)).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        let common = Common::new("rbtree", options)?;
        let zipf = Zipfian::new(common.entries * 2, common.theta);
        Ok(Self {
            shared: Arc::new(Shared {
                common,
                zipf,
                loaded: AtomicBool::new(false),
                added: AtomicU64::new(0),
                next_ids: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    ///
    /// # Panics
    /// If `worker_index` does not fit the node ids (2^23 workers).
    pub fn rbtree_client(&self, worker_index: usize, seed: u64) -> RbTreeClient {
        assert!((worker_index as u64) < (1 << (63 - WORKER_ID_SHIFT)), "worker index {worker_index} is too large");
        let shared = &self.shared;
        RbTreeClient {
            keys: KeyGenerator::new(&shared.zipf, shared.common.insert_percent, seed, worker_index),
            next_id: shared.next_id(worker_index),
            value: vec![0u8; shared.value_len()],
            version: 0,
            shared: Arc::clone(shared),
        }
    }
}

impl Workload for RbTree {
    fn name(&self) -> &'static str {
        "rbtree"
    }

    fn tables(&self) -> Vec<TableSchema> {
        vec![
            TableSchema::hashed(table::NAMES[0]).max_key_len(8).max_value_len(self.shared.value_len()),
            TableSchema::hashed(table::NAMES[1]).max_key_len(8).max_value_len(16),
        ]
    }

    fn transaction_types(&self) -> &'static [&'static str] {
        &TRANSACTION_TYPES
    }

    fn load(
        &self,
        db: &Arc<Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError> {
        verify_tables(db, &self.tables())?;
        let shared = &self.shared;
        let (n, len) = (shared.common.entries, shared.value_len());
        let per_task = Common::rows_per_load_task(len);
        let tasks: Vec<u64> = (0..n).step_by(per_task as usize).collect();
        load_parallel(db, threads, &tasks, n + 1, progress, |worker, _slot, index, &first| {
            let last = (first + per_task).min(n);
            let mut values = vec![0u8; len * (last - first) as usize];
            for (k, value) in (first..last).zip(values.chunks_mut(len)) {
                value[..HEADER_LEN].copy_from_slice(&balanced_header(n, k).encode());
                fill_entry(&mut value[HEADER_LEN..], k, Some(0));
            }
            worker.run_pipelined(0, false, |tx| {
                let exists = || {
                    TxError::Db(DbError::InvalidConfig(
                        "load: the red-black tree already has rows; load expects an empty database".into(),
                    ))
                };
                if index == 0 && !tx.insert(table::ROOT, &key(ROOT_KEY), &root_value(loaded_id(n / 2), n))? {
                    return Err(exists());
                }
                for (k, value) in (first..last).zip(values.chunks(len)) {
                    if !tx.insert(table::NODES, &key(loaded_id(k)), value)? {
                        return Err(exists());
                    }
                }
                Ok(())
            })?;
            Ok(last - first + (index == 0) as u64)
        })?;
        shared.added.store(0, Ordering::Release);
        shared.loaded.store(true, Ordering::Release);
        Ok(())
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.rbtree_client(worker_index, seed))
    }

    fn expected_rows(&self) -> Option<u64> {
        let shared = &self.shared;
        // The nodes plus the root row.
        shared.loaded.load(Ordering::Acquire).then(|| shared.common.entries + shared.added.load(Ordering::Acquire) + 1)
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.tables())?;
        let shared = &self.shared;
        let mut roots = Vec::new();
        db.for_each_row(table::ROOT, |k, value| roots.push((parse_key(k), parse_root(value))))?;
        let mut nodes = HashMap::new();
        let mut bad_rows = Vec::new();
        db.for_each_row(table::NODES, |k, value| {
            let id = parse_key(k);
            let header = NodeHeader::decode(value);
            match (id, header) {
                (Some(id), Some(header)) => {
                    let payload_ok =
                        value.len() == shared.value_len() && entry_matches(&value[HEADER_LEN..], header.key, true);
                    nodes.insert(id, (header, payload_ok));
                }
                _ if bad_rows.len() < 5 => bad_rows.push(format!("key {k:?}: {} bytes", value.len())),
                _ => {}
            }
        })?;
        let mut report = CheckReport::default();
        let root = match roots.as_slice() {
            [(Some(ROOT_KEY), Some(root))] => Some(*root),
            _ => None,
        };
        report.push(
            "root row",
            root.is_some() && bad_rows.is_empty(),
            match root {
                Some((root, count)) => format!("root node {root}, {count} nodes; damaged node rows: {bad_rows:?}"),
                None => format!("expected one root row under key 0, found {roots:?}"),
            },
        );
        let (root, count) = root.unwrap_or((NIL, 0));
        for (name, passed, detail) in check_tree(root, count, &nodes, shared.common.entries * 2) {
            report.push(name, passed, detail);
        }
        Ok(report)
    }
}

/// The red-black-tree conditions over a dump of the nodes (id -> (header,
/// whether the value's length and payload are right)): (name, passed,
/// detail) per condition. Keys must lie in `0..key_space`.
pub fn check_tree(
    root: u64,
    count: u64,
    nodes: &HashMap<u64, (NodeHeader, bool)>,
    key_space: u64,
) -> Vec<(&'static str, bool, String)> {
    struct Visit {
        id: u64,
        parent: u64,
        parent_red: bool,
        /// Exclusive key bounds.
        above: Option<u64>,
        below: Option<u64>,
        /// Black nodes on the path above this one.
        blacks: u64,
    }
    let mut visited: HashSet<u64> = HashSet::with_capacity(nodes.len());
    let (mut dangling, mut revisited, mut bad_parent, mut bad_order, mut red_red) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut bad_payload, mut out_of_space) = (0u64, 0u64);
    let mut black_heights: (Option<u64>, Option<u64>) = (None, None);
    let mut stack = Vec::new();
    if root != NIL {
        stack.push(Visit { id: root, parent: NIL, parent_red: false, above: None, below: None, blacks: 0 });
    }
    let mut note_nil = |blacks: u64| match black_heights {
        (None, _) => black_heights.0 = Some(blacks),
        (Some(first), _) if first == blacks => {}
        (Some(_), None) => black_heights.1 = Some(blacks),
        _ => {}
    };
    if root == NIL {
        note_nil(0);
    }
    while let Some(visit) = stack.pop() {
        let Some(&(header, payload_ok)) = nodes.get(&visit.id) else {
            dangling += 1;
            continue;
        };
        if !visited.insert(visit.id) {
            revisited += 1;
            continue;
        }
        bad_parent += (header.parent != visit.parent) as u64;
        bad_order += (visit.above.is_some_and(|above| header.key <= above)
            || visit.below.is_some_and(|below| header.key >= below)) as u64;
        red_red += (header.red && visit.parent_red) as u64;
        bad_payload += !payload_ok as u64;
        out_of_space += (header.key >= key_space) as u64;
        let blacks = visit.blacks + !header.red as u64;
        for (child, above, below) in
            [(header.left, visit.above, Some(header.key)), (header.right, Some(header.key), visit.below)]
        {
            if child == NIL {
                note_nil(blacks);
            } else {
                stack.push(Visit { id: child, parent: visit.id, parent_red: header.red, above, below, blacks });
            }
        }
    }
    let reachable = visited.len() as u64;
    let rows = nodes.len() as u64;
    let root_red = nodes.get(&root).is_some_and(|(header, _)| header.red);
    vec![
        (
            "tree links",
            dangling == 0 && revisited == 0 && bad_parent == 0,
            format!(
                "{dangling} pointers to missing nodes, {revisited} nodes reached twice (cycles or shared children), \
                 {bad_parent} parent pointers not to the node that points at them"
            ),
        ),
        (
            "search-tree order",
            bad_order == 0 && out_of_space == 0,
            format!("{bad_order} keys out of order, {out_of_space} keys outside 0..{key_space}"),
        ),
        ("black root", !root_red, format!("root node {root} is {}", if root_red { "red" } else { "black" })),
        ("no red node with a red child", red_red == 0, format!("{red_red} red nodes with a red parent")),
        (
            "equal black height",
            black_heights.1.is_none(),
            match black_heights {
                (Some(first), Some(other)) => format!("paths with {first} and with {other} black nodes"),
                (height, _) => format!("{} black nodes on every path", height.unwrap_or(0)),
            },
        ),
        (
            "node count",
            reachable == count && rows == count,
            format!("{reachable} nodes reachable, {rows} node rows, stored count {count}"),
        ),
        ("payloads embed their keys", bad_payload == 0, format!("{bad_payload} nodes whose value is damaged")),
    ]
}

/// A node read by a transaction, with whether its header changed.
struct Cached {
    id: u64,
    header: NodeHeader,
    dirty: bool,
}

/// The nodes one insert reads and changes.
struct Tree<'a, 'w> {
    tx: &'a mut Transaction<'w>,
    nodes: Vec<Cached>,
    root: u64,
}

impl Tree<'_, '_> {
    fn slot(&mut self, id: u64) -> TxResult<usize> {
        if let Some(slot) = self.nodes.iter().position(|node| node.id == id) {
            return Ok(slot);
        }
        if id == NIL {
            return Err(inconsistent());
        }
        let header = match self.tx.get_with(table::NODES, &key(id), NodeHeader::decode)? {
            Some(Some(header)) => header,
            Some(None) => return Err(corrupt(format!("rbtree: node {id} has a damaged header"))),
            None => return Err(inconsistent()),
        };
        self.nodes.push(Cached { id, header, dirty: false });
        Ok(self.nodes.len() - 1)
    }

    fn get(&mut self, id: u64) -> TxResult<NodeHeader> {
        let slot = self.slot(id)?;
        Ok(self.nodes[slot].header)
    }

    fn modify(&mut self, id: u64, change: impl FnOnce(&mut NodeHeader)) -> TxResult<()> {
        let slot = self.slot(id)?;
        let node = &mut self.nodes[slot];
        let before = node.header;
        change(&mut node.header);
        node.dirty |= node.header != before;
        Ok(())
    }

    fn is_red(&mut self, id: u64) -> TxResult<bool> {
        Ok(id != NIL && self.get(id)?.red)
    }

    fn set_red(&mut self, id: u64, red: bool) -> TxResult<()> {
        self.modify(id, |node| node.red = red)
    }

    /// Makes `new` the child of `parent` in the place of `old` (the root if
    /// `parent` is nil).
    fn replace_child(&mut self, parent: u64, old: u64, new: u64) -> TxResult<()> {
        if parent == NIL {
            self.root = new;
            return Ok(());
        }
        self.modify(parent, |node| {
            if node.left == old {
                node.left = new;
            } else {
                node.right = new;
            }
        })
    }

    /// CLRS LEFT-ROTATE (`right == false`) or RIGHT-ROTATE around `x`.
    fn rotate(&mut self, x: u64, right: bool) -> TxResult<()> {
        let x_node = self.get(x)?;
        let y = if right { x_node.left } else { x_node.right };
        if y == NIL {
            return Err(inconsistent());
        }
        let y_node = self.get(y)?;
        let inner = if right { y_node.right } else { y_node.left };
        self.modify(x, |node| if right { node.left = inner } else { node.right = inner })?;
        if inner != NIL {
            self.modify(inner, |node| node.parent = x)?;
        }
        self.modify(y, |node| node.parent = x_node.parent)?;
        self.replace_child(x_node.parent, x, y)?;
        self.modify(y, |node| if right { node.right = x } else { node.left = x })?;
        self.modify(x, |node| node.parent = y)
    }

    /// CLRS RB-INSERT-FIXUP from the new red node `z`.
    fn insert_fixup(&mut self, mut z: u64) -> TxResult<()> {
        for _ in 0..MAX_DEPTH {
            let p = self.get(z)?.parent;
            if !self.is_red(p)? {
                break;
            }
            let g = self.get(p)?.parent;
            let g_node = self.get(g)?;
            // `right`: the parent is the grandparent's right child (the
            // mirror case).
            let right = p != g_node.left;
            let uncle = if right { g_node.left } else { g_node.right };
            if self.is_red(uncle)? {
                self.set_red(p, false)?;
                self.set_red(uncle, false)?;
                self.set_red(g, true)?;
                z = g;
                continue;
            }
            let p_node = self.get(p)?;
            if z == if right { p_node.left } else { p_node.right } {
                z = p;
                self.rotate(z, right)?;
            }
            let p = self.get(z)?.parent;
            let g = self.get(p)?.parent;
            self.set_red(p, false)?;
            self.set_red(g, true)?;
            self.rotate(g, !right)?;
        }
        let root = self.root;
        if self.is_red(root)? {
            self.set_red(root, false)?;
        }
        Ok(())
    }

    /// Writes the header of every node whose header changed.
    fn write_back(&mut self) -> TxResult<()> {
        for index in 0..self.nodes.len() {
            let Cached { id, header, dirty } = self.nodes[index];
            if !dirty {
                continue;
            }
            let encoded = header.encode();
            let written = self.tx.update_with(table::NODES, &key(id), |row| {
                let fits = row.len() >= HEADER_LEN;
                if fits {
                    row[..HEADER_LEN].copy_from_slice(&encoded);
                }
                fits
            })?;
            match written {
                Some(true) => {}
                Some(false) => return Err(corrupt(format!("rbtree: node {id} is too short"))),
                None => return Err(inconsistent()),
            }
        }
        Ok(())
    }
}

/// Reads (root, count).
fn read_root(tx: &mut Transaction<'_>) -> TxResult<(u64, u64)> {
    match tx.get_with(table::ROOT, &key(ROOT_KEY), parse_root)? {
        Some(Some(root)) => Ok(root),
        _ => Err(corrupt("rbtree: the root row is missing or damaged")),
    }
}

/// What an insert did.
enum Inserted {
    /// The key was there: its payload was overwritten.
    Overwritten,
    /// A new node with this id.
    Added(u64),
}

/// An RBTree client.
pub struct RbTreeClient {
    shared: Arc<Shared>,
    keys: KeyGenerator,
    next_id: Arc<AtomicU64>,
    /// The value of a new node: header (filled in the transaction) and
    /// payload.
    value: Vec<u8>,
    /// Versions of this client's inserts (1, 2, ...; loaded nodes have 0).
    version: u64,
}

impl RbTreeClient {
    /// The next operation: (type index, key).
    pub fn next_operation(&mut self) -> (usize, u64) {
        let insert = self.keys.is_insert();
        (if insert { INSERT } else { SEARCH }, self.keys.key())
    }

    fn insert(&mut self, worker: &mut Worker, k: u64) -> Result<(bool, u32), DbError> {
        self.version += 1;
        fill_entry(&mut self.value[HEADER_LEN..], k, Some(self.version));
        let Self { value, next_id, .. } = self;
        let first_id = next_id.load(Ordering::Acquire);
        let (outcome, attempts) = worker.run_pipelined(INSERT as u32, false, |tx| {
            let (root, count) = read_root(tx)?;
            let mut tree = Tree { tx, nodes: Vec::new(), root };
            let (mut parent, mut current) = (NIL, root);
            let mut left = false;
            for _ in 0..MAX_DEPTH {
                if current == NIL {
                    break;
                }
                let node = tree.get(current)?;
                if node.key == k {
                    let payload = &value[HEADER_LEN..];
                    let written = tree.tx.update_with(table::NODES, &key(current), |row| {
                        let fits = row.len() == HEADER_LEN + payload.len();
                        if fits {
                            row[HEADER_LEN..].copy_from_slice(payload);
                        }
                        fits
                    })?;
                    return match written {
                        Some(true) => Ok(Inserted::Overwritten),
                        Some(false) => Err(corrupt(format!("rbtree: node {current} has a wrong length"))),
                        None => Err(inconsistent()),
                    };
                }
                parent = current;
                left = k < node.key;
                current = if left { node.left } else { node.right };
            }
            if current != NIL {
                return Err(inconsistent());
            }
            // A new red leaf under `parent`, at the first free id.
            let header = NodeHeader { key: k, left: NIL, right: NIL, parent, red: true };
            value[..HEADER_LEN].copy_from_slice(&header.encode());
            let mut id = first_id;
            while !tree.tx.insert(table::NODES, &key(id), value)? {
                id += 1;
            }
            tree.nodes.push(Cached { id, header, dirty: false });
            if parent == NIL {
                tree.root = id;
            } else {
                tree.modify(parent, |node| if left { node.left = id } else { node.right = id })?;
            }
            tree.insert_fixup(id)?;
            tree.write_back()?;
            tree.tx.update(table::ROOT, &key(ROOT_KEY), &root_value(tree.root, count + 1))?;
            Ok(Inserted::Added(id))
        })?;
        let committed = match outcome {
            Outcome::Committed(Inserted::Added(id)) => {
                next_id.fetch_max(id + 1, Ordering::AcqRel);
                self.shared.added.fetch_add(1, Ordering::AcqRel);
                true
            }
            Outcome::Committed(Inserted::Overwritten) => true,
            Outcome::RolledBack => false,
        };
        Ok((committed, attempts))
    }

    fn search(&mut self, worker: &mut Worker, k: u64) -> Result<(bool, u32), DbError> {
        let (outcome, attempts) = worker.run_pipelined(SEARCH as u32, true, |tx| {
            let (mut current, _) = read_root(tx)?;
            for _ in 0..MAX_DEPTH {
                if current == NIL {
                    return Ok(false);
                }
                let node = match tx.get_with(table::NODES, &key(current), NodeHeader::decode)? {
                    Some(Some(node)) => node,
                    Some(None) => return Err(corrupt(format!("rbtree: node {current} has a damaged header"))),
                    None => return Err(inconsistent()),
                };
                if node.key == k {
                    return Ok(true);
                }
                current = if k < node.key { node.left } else { node.right };
            }
            Err(inconsistent())
        })?;
        Ok((matches!(outcome, Outcome::Committed(_)), attempts))
    }
}

impl Client for RbTreeClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let (type_index, k) = self.next_operation();
        let (committed, attempts) =
            if type_index == INSERT { self.insert(worker, k)? } else { self.search(worker, k)? };
        Ok(TxnSummary { type_index, committed, attempts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balanced(n: u64) -> HashMap<u64, (NodeHeader, bool)> {
        (0..n).map(|k| (loaded_id(k), (balanced_header(n, k), true))).collect()
    }

    #[test]
    fn balanced_trees_are_red_black_trees() {
        for n in (1..300).chain([1023, 1024, 1025, 4097]) {
            let nodes = balanced(n);
            for (name, passed, detail) in check_tree(loaded_id(n / 2), n, &nodes, 2 * n) {
                assert!(passed, "n = {n}: {name}: {detail}");
            }
        }
    }

    #[test]
    fn the_check_sees_each_violation() {
        let n = 100;
        let root = loaded_id(n / 2);
        let failed = |nodes: &HashMap<u64, (NodeHeader, bool)>, count: u64| -> Vec<&'static str> {
            check_tree(root, count, nodes, 2 * n).into_iter().filter(|(_, passed, _)| !passed).map(|c| c.0).collect()
        };
        assert!(failed(&balanced(n), n).is_empty());
        assert_eq!(failed(&balanced(n), n + 1), ["node count"]);
        // A red root.
        let mut nodes = balanced(n);
        nodes.get_mut(&root).unwrap().0.red = true;
        assert!(failed(&nodes, n).contains(&"black root"));
        // A red node under a red node: make a red leaf's parent red.
        let mut nodes = balanced(n);
        let (_, (leaf, _)) = nodes.iter().find(|(_, (header, _))| header.red).unwrap();
        let parent = leaf.parent;
        nodes.get_mut(&parent).unwrap().0.red = true;
        let failures = failed(&nodes, n);
        assert!(failures.contains(&"no red node with a red child"), "{failures:?}");
        // Keys out of order.
        let mut nodes = balanced(n);
        nodes.get_mut(&loaded_id(0)).unwrap().0.key = 99;
        assert!(failed(&nodes, n).contains(&"search-tree order"));
        // A wrong parent pointer.
        let mut nodes = balanced(n);
        nodes.get_mut(&loaded_id(0)).unwrap().0.parent = root;
        assert!(failed(&nodes, n).contains(&"tree links"));
        // A damaged payload.
        let mut nodes = balanced(n);
        nodes.get_mut(&loaded_id(3)).unwrap().1 = false;
        assert_eq!(failed(&nodes, n), ["payloads embed their keys"]);
        // A red leaf turned black: its paths have a black node more.
        let mut nodes = balanced(n);
        let red_leaf = nodes.iter().find(|(_, (header, _))| header.red).map(|(&id, _)| id).unwrap();
        nodes.get_mut(&red_leaf).unwrap().0.red = false;
        assert_eq!(failed(&nodes, n), ["equal black height"]);
    }

    #[test]
    fn headers_round_trip() {
        let header = NodeHeader { key: 7, left: 1, right: 2, parent: 3, red: true };
        let mut value = header.encode().to_vec();
        value.extend_from_slice(&[9; 16]);
        assert_eq!(NodeHeader::decode(&value), Some(header));
        value[32] = 2;
        assert_eq!(NodeHeader::decode(&value), None);
        assert_eq!(NodeHeader::decode(&[0; 39]), None);
        assert_eq!(parse_root(&root_value(5, 6)), Some((5, 6)));
    }
}
