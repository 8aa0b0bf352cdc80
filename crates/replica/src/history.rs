//! A checker for list-append transaction histories, after Jepsen's Elle (Kingsbury & Alvaro, "Elle:
//! Inferring Isolation Anomalies from Experimental Observations", VLDB 2020).
//!
//! Every key holds a list of integers; transactions append values that are unique per key and read whole
//! lists. Lists only grow, so a read reveals exactly which prefix of the key's version order it saw. From
//! the longest read of each key the checker recovers the version order, and from that the write-write,
//! write-read and read-write (anti-) dependencies between transactions. A cycle in that graph means no
//! serial order explains the history; adding real-time edges checks strict serializability.
//!
//! One inference goes beyond the paper: a committed append missing from the longest read of its key was
//! applied after every observed version (lists are append-only), so whoever read the complete list has an
//! anti-dependency on it. That catches write skew and lost updates whose values were never read back.
//!
//! Only std is used so the checker can run anywhere a test does.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

/// A key: the name of one list.
pub type Key = u64;

/// An element of a list; unique per key across the whole history.
pub type Value = u64;

/// One step of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MicroOp {
    /// Append `value` to the list at `key`.
    Append {
        /// The list appended to.
        key: Key,
        /// The value appended; no other append to `key` uses it.
        value: Value,
    },
    /// Read the whole list at `key`.
    Read {
        /// The list read.
        key: Key,
        /// The list as the client saw it; `None` when the outcome is unknown.
        observed: Option<Vec<Value>>,
    },
}

/// What the client learnt about a transaction's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The database acknowledged the commit.
    Committed,
    /// The transaction definitely did not commit.
    Aborted,
    /// The client does not know whether it committed (e.g. the leader was lost).
    Unknown,
}

/// One transaction as the test client recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    /// Unique id, used in reports.
    pub id: u64,
    /// The client process that ran it.
    pub process: u64,
    /// The micro-operations, in program order.
    pub ops: Vec<MicroOp>,
    /// Its outcome.
    pub status: Status,
    /// When the client sent it, in monotonic nanoseconds of the test process's clock.
    pub invoked_at: u64,
    /// When the client got the outcome, same clock; may be `u64::MAX` for [`Status::Unknown`].
    pub completed_at: u64,
}

/// What [`check`] verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckOptions {
    /// Also require real-time order among committed transactions (strict serializability), and
    /// report acknowledged appends that a later transaction did not see.
    pub strict: bool,
}

/// Why one transaction must precede another in any serial order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    /// Write-write: the source appended the version right before the target's.
    Ww,
    /// Write-read: the target read the source's append as the last element of a list.
    Wr,
    /// Read-write (anti-dependency): the source read a list the target's append came right after.
    Rw,
    /// Real time: the source completed before the target was invoked.
    Rt,
}

impl EdgeKind {
    /// Cycle search tries edges in this order: the weaker the edges, the more specific the anomaly.
    fn preference(self) -> u8 {
        match self {
            EdgeKind::Ww => 0,
            EdgeKind::Wr => 1,
            EdgeKind::Rt => 2,
            EdgeKind::Rw => 3,
        }
    }
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
            EdgeKind::Rt => "rt",
        })
    }
}

/// One thing wrong with a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// Two committed reads of `key` where neither is a prefix of the other: no single version order.
    IncompatibleOrder {
        /// The key.
        key: Key,
        /// The longest read of the key, taken as its version order.
        a: Vec<Value>,
        /// A read that is not a prefix of `a`.
        b: Vec<Value>,
    },
    /// A committed read saw a value appended only by an aborted transaction.
    AbortedRead {
        /// The key read.
        key: Key,
        /// The aborted value.
        value: Value,
        /// The transaction that read it.
        reader: u64,
        /// The aborted transaction that appended it.
        writer: u64,
    },
    /// A committed read saw a value that no transaction appended.
    GarbageRead {
        /// The key read.
        key: Key,
        /// The value nobody appended.
        value: Value,
        /// The transaction that read it.
        reader: u64,
    },
    /// A committed read saw the same value twice.
    DuplicateElements {
        /// The key read.
        key: Key,
        /// The transaction that read it.
        reader: u64,
        /// The first value that appears twice.
        value: Value,
    },
    /// A transaction's reads disagree with its own earlier reads and appends.
    Internal {
        /// The transaction.
        txn: u64,
        /// The key.
        key: Key,
        /// What was expected and what was read.
        detail: String,
    },
    /// An acknowledged append was missing from a read by a transaction invoked after it completed
    /// (only reported with [`CheckOptions::strict`], as it is a real-time property).
    LostAppend {
        /// The key appended to.
        key: Key,
        /// The value lost.
        value: Value,
        /// The committed transaction that appended it.
        writer: u64,
    },
    /// A cycle of dependencies: no serial order exists. See [`cycle_name`] for its classification.
    Cycle {
        /// The transactions on the cycle, in order; the last one precedes the first.
        txns: Vec<u64>,
        /// The edges of the cycle, `(from, to, kind)`, in the same order.
        edges: Vec<(u64, u64, EdgeKind)>,
    },
}

impl Anomaly {
    /// A short name for the anomaly: Elle's cycle names (see [`cycle_name`]) or e.g. `"garbage-read"`.
    pub fn name(&self) -> &'static str {
        match self {
            Anomaly::IncompatibleOrder { .. } => "incompatible-order",
            Anomaly::AbortedRead { .. } => "aborted-read",
            Anomaly::GarbageRead { .. } => "garbage-read",
            Anomaly::DuplicateElements { .. } => "duplicate-elements",
            Anomaly::Internal { .. } => "internal",
            Anomaly::LostAppend { .. } => "lost-append",
            Anomaly::Cycle { edges, .. } => cycle_name(edges),
        }
    }
}

/// Classifies a cycle as Elle does: `G0` (only ww edges), `G1c` (ww and wr), `G-single` (exactly one rw)
/// or `G2` (more than one rw), with a `-realtime` suffix when real-time edges are needed to close it.
pub fn cycle_name(edges: &[(u64, u64, EdgeKind)]) -> &'static str {
    let rw = edges.iter().filter(|e| e.2 == EdgeKind::Rw).count();
    let wr = edges.iter().any(|e| e.2 == EdgeKind::Wr);
    let rt = edges.iter().any(|e| e.2 == EdgeKind::Rt);
    match (rw, wr, rt) {
        (0, false, false) => "G0",
        (0, true, false) => "G1c",
        (1, _, false) => "G-single",
        (_, _, false) => "G2",
        (0, false, true) => "G0-realtime",
        (0, true, true) => "G1c-realtime",
        (1, _, true) => "G-single-realtime",
        (_, _, true) => "G2-realtime",
    }
}

/// Prints a list, eliding the middle of long ones so a message stays a few lines long.
struct Abbrev<'a>(&'a [Value]);

impl fmt::Display for Abbrev<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEAD: usize = 8;
        const TAIL: usize = 4;
        let list = self.0;
        if list.len() <= HEAD + TAIL + 1 {
            return write!(f, "{list:?}");
        }
        let head = list[..HEAD].iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        let tail = list[list.len() - TAIL..].iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        write!(f, "[{head}, ...{} more..., {tail}] (length {})", list.len() - HEAD - TAIL, list.len())
    }
}

/// Prints an element of a list, or the end of it.
struct Elem(Option<Value>);

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("end of list"),
        }
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::IncompatibleOrder { key, a, b } => {
                let at = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                write!(
                    f,
                    "incompatible-order on key {key}: reads {} and {} are not prefixes of one another \
                     (first difference at index {at}: {} vs {})",
                    Abbrev(a),
                    Abbrev(b),
                    Elem(a.get(at).copied()),
                    Elem(b.get(at).copied())
                )
            }
            Anomaly::AbortedRead { key, value, reader, writer } => {
                write!(f, "aborted-read: T{reader} read value {value} of key {key}, appended by aborted T{writer}")
            }
            Anomaly::GarbageRead { key, value, reader } => {
                write!(f, "garbage-read: T{reader} read value {value} of key {key}, which no transaction appended")
            }
            Anomaly::DuplicateElements { key, reader, value } => {
                write!(f, "duplicate-elements: T{reader} read value {value} more than once in key {key}")
            }
            Anomaly::Internal { txn, key, detail } => write!(f, "internal: T{txn} on key {key}: {detail}"),
            Anomaly::LostAppend { key, value, writer } => write!(
                f,
                "lost-append: value {value} appended to key {key} by committed T{writer} is missing from a read \
                 by a transaction invoked after T{writer} completed"
            ),
            Anomaly::Cycle { txns, edges } => {
                write!(f, "{} cycle:", cycle_name(edges))?;
                match edges.first() {
                    Some(first) => write!(f, " T{}", first.0)?,
                    None => write!(f, " {txns:?}")?,
                }
                for (_, to, kind) in edges {
                    write!(f, " -{kind}-> T{to}")?;
                }
                Ok(())
            }
        }
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// Transactions with [`Status::Committed`].
    pub committed: usize,
    /// Transactions with [`Status::Unknown`] (whether or not a read showed they committed).
    pub unknown: usize,
    /// Transactions with [`Status::Aborted`].
    pub aborted: usize,
    /// Distinct keys named by any micro-operation.
    pub keys: usize,
    /// Distinct edges of the dependency graph. Real-time order is encoded through one auxiliary node per
    /// distinct completion time (to stay linear in size), and those links are counted too.
    pub edges: usize,
    /// Everything wrong with the history; empty iff it passed.
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    /// True iff no anomaly was found.
    pub fn is_valid(&self) -> bool {
        self.anomalies.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} committed, {} unknown, {} aborted txns; {} keys; {} edges: ",
            self.committed, self.unknown, self.aborted, self.keys, self.edges
        )?;
        if self.anomalies.is_empty() {
            return f.write_str("valid");
        }
        write!(f, "{} anomalies:", self.anomalies.len())?;
        for anomaly in &self.anomalies {
            write!(f, "\n  {anomaly}")?;
        }
        Ok(())
    }
}

/// Checks a list-append history for serializability (and, with `options.strict`, strict
/// serializability). Transactions may come in any order; ids should be unique.
///
/// Reads of transactions that are not [`Status::Committed`] are ignored: their values cannot be trusted.
/// A [`Status::Unknown`] transaction whose append some committed read saw is treated as committed.
pub fn check(history: &[Txn], options: &CheckOptions) -> Report {
    let mut report = Report::default();
    for txn in history {
        match txn.status {
            Status::Committed => report.committed += 1,
            Status::Unknown => report.unknown += 1,
            Status::Aborted => report.aborted += 1,
        }
    }

    let mut writers: HashMap<(Key, Value), usize> = HashMap::new();
    let mut appends: HashMap<Key, Vec<(Value, usize)>> = HashMap::new();
    let mut reads: HashMap<Key, Vec<(usize, &[Value])>> = HashMap::new();
    let mut keys: HashSet<Key> = HashSet::new();
    for (i, txn) in history.iter().enumerate() {
        for op in &txn.ops {
            match op {
                MicroOp::Append { key, value } => {
                    keys.insert(*key);
                    appends.entry(*key).or_default().push((*value, i));
                    // Values should be unique; if a history breaks that, the writer whose outcome is most
                    // certain wins, so a committed append is never hidden behind an aborted one.
                    match writers.entry((*key, *value)) {
                        Entry::Vacant(e) => {
                            e.insert(i);
                        }
                        Entry::Occupied(mut e) => {
                            if certainty(txn.status) > certainty(history[*e.get()].status) {
                                e.insert(i);
                            }
                        }
                    }
                }
                MicroOp::Read { key, observed } => {
                    keys.insert(*key);
                    if let (Status::Committed, Some(list)) = (txn.status, observed) {
                        reads.entry(*key).or_default().push((i, list.as_slice()));
                    }
                }
            }
        }
        if txn.status == Status::Committed {
            check_internal(txn, &mut report.anomalies);
        }
    }
    let mut keys: Vec<Key> = keys.into_iter().collect();
    keys.sort_unstable();
    report.keys = keys.len();

    // Pass 1: version orders and per-value checks. This must finish before any edge is drawn because
    // it decides which unknown transactions committed, and their appends to other keys count too.
    let index = Index { history, writers };
    let mut seen_committed = vec![false; history.len()];
    let mut orders = Vec::with_capacity(keys.len());
    for &key in &keys {
        let key_reads = reads.get(&key).map_or(&[][..], Vec::as_slice);
        orders.push(infer_order(key, key_reads, &index, &mut seen_committed, &mut report.anomalies));
    }
    let is_node: Vec<bool> = history
        .iter()
        .zip(&seen_committed)
        .map(|(txn, &seen)| txn.status == Status::Committed || (txn.status == Status::Unknown && seen))
        .collect();

    // Pass 2: the dependency graph.
    let mut graph = Graph { adj: vec![Vec::new(); history.len()] };
    for order in &orders {
        let key_appends = appends.get(&order.key).map_or(&[][..], Vec::as_slice);
        add_key_edges(order, &index, &is_node, key_appends, &mut graph);
        if options.strict {
            lost_appends(order, &index, key_appends, &mut report.anomalies);
        }
    }
    if options.strict {
        add_realtime_edges(history, &mut graph);
    }
    report.edges = graph.finish();
    find_cycles(&graph.adj, history, &mut report.anomalies);
    report
}

/// Ranks outcomes by how sure we are the transaction took effect.
fn certainty(status: Status) -> u8 {
    match status {
        Status::Committed => 2,
        Status::Unknown => 1,
        Status::Aborted => 0,
    }
}

/// The history and who appended each value, shared by the passes of [`check`].
struct Index<'a> {
    history: &'a [Txn],
    writers: HashMap<(Key, Value), usize>,
}

impl Index<'_> {
    fn id(&self, txn: usize) -> u64 {
        self.history[txn].id
    }
}

/// Checks that a committed transaction's reads agree with its own earlier reads and appends: a
/// serializable transaction sees no other transaction's writes appear in the middle of it.
fn check_internal(txn: &Txn, out: &mut Vec<Anomaly>) {
    // Per key: the last list read (if any) and what the transaction appended since.
    type Seen<'a> = (Key, Option<&'a [Value]>, Vec<Value>);
    let mut state: Vec<Seen<'_>> = Vec::new();
    for (at, op) in txn.ops.iter().enumerate() {
        match op {
            MicroOp::Append { key, value } => match state.iter_mut().find(|s| s.0 == *key) {
                Some(s) => s.2.push(*value),
                None => state.push((*key, None, vec![*value])),
            },
            MicroOp::Read { key, observed: Some(obs) } => {
                let slot = match state.iter().position(|s| s.0 == *key) {
                    Some(slot) => slot,
                    None => {
                        state.push((*key, None, Vec::new()));
                        state.len() - 1
                    }
                };
                let (_, last_read, own) = &mut state[slot];
                let detail = match last_read {
                    Some(prev)
                        if obs.len() != prev.len() + own.len() || !obs.starts_with(prev) || !obs.ends_with(own) =>
                    {
                        let expected: Vec<Value> = prev.iter().chain(own.iter()).copied().collect();
                        Some(format!(
                            "read {} but its previous read plus its own appends since give {}",
                            Abbrev(obs),
                            Abbrev(&expected)
                        ))
                    }
                    None if !obs.ends_with(own) => {
                        Some(format!("read {}, which does not end with its own appends {}", Abbrev(obs), Abbrev(own)))
                    }
                    _ => None,
                };
                if let Some(detail) = detail {
                    out.push(Anomaly::Internal { txn: txn.id, key: *key, detail });
                }
                for later in &txn.ops[at + 1..] {
                    if let MicroOp::Append { key: k, value } = later {
                        if k == key && obs.contains(value) {
                            let detail = format!("read value {value} before appending it");
                            out.push(Anomaly::Internal { txn: txn.id, key: *key, detail });
                        }
                    }
                }
                *last_read = Some(obs);
                own.clear();
            }
            MicroOp::Read { observed: None, .. } => {}
        }
    }
}

/// What pass 1 learnt about one key.
struct KeyOrder<'a> {
    key: Key,
    /// The version order: the longest committed read, without repeated values.
    versions: Vec<Value>,
    /// Position of each value in `versions`.
    position: HashMap<Value, usize>,
    /// Committed reads that are a prefix of the order: (reader, how many versions it saw).
    prefix_reads: Vec<(usize, usize)>,
    /// Committed reads that contradict the order (already reported).
    other_reads: Vec<(usize, &'a [Value])>,
    /// Values seen only in contradicting reads; they have no place in the order.
    stray: HashSet<Value>,
}

/// Infers the version order of `key` from its committed reads and reports reads that contradict it or
/// contain values that should not be there. Marks unknown writers of observed values as committed.
fn infer_order<'a>(
    key: Key,
    reads: &[(usize, &'a [Value])],
    index: &Index<'_>,
    seen_committed: &mut [bool],
    out: &mut Vec<Anomaly>,
) -> KeyOrder<'a> {
    // Lists only grow, so the longest read is the most complete view; the first one wins ties so that a
    // different read of the same length is reported against it.
    let mut longest: Option<(usize, &[Value])> = None;
    for &(txn, list) in reads {
        if longest.is_none_or(|(_, l)| list.len() > l.len()) {
            longest = Some((txn, list));
        }
    }
    let (order_reader, order) = longest.unwrap_or((usize::MAX, &[]));

    let mut versions = Vec::with_capacity(order.len());
    let mut position = HashMap::with_capacity(order.len());
    // distinct[n]: how many versions the first n elements of `order` hold (they differ with duplicates).
    let mut distinct = Vec::with_capacity(order.len() + 1);
    distinct.push(0);
    let mut first_dup = None;
    for (i, &v) in order.iter().enumerate() {
        match position.entry(v) {
            Entry::Vacant(e) => {
                e.insert(versions.len());
                versions.push(v);
            }
            Entry::Occupied(_) => {
                first_dup.get_or_insert(i);
            }
        }
        distinct.push(versions.len());
    }

    let mut prefix_reads = Vec::with_capacity(reads.len());
    let mut other_reads = Vec::new();
    let mut reported: HashSet<&[Value]> = HashSet::new();
    for &(txn, list) in reads {
        if order.starts_with(list) {
            prefix_reads.push((txn, distinct[list.len()]));
            if let Some(dup) = first_dup.filter(|&d| d < list.len()) {
                out.push(Anomaly::DuplicateElements { key, reader: index.id(txn), value: order[dup] });
            }
        } else {
            if reported.insert(list) {
                out.push(Anomaly::IncompatibleOrder { key, a: order.to_vec(), b: list.to_vec() });
            }
            let mut seen = HashSet::with_capacity(list.len());
            if let Some(&value) = list.iter().find(|&&v| !seen.insert(v)) {
                out.push(Anomaly::DuplicateElements { key, reader: index.id(txn), value });
            }
            other_reads.push((txn, list));
        }
    }

    // Every read is a prefix of the order or was collected above, so this visits each observed value once.
    for &v in &versions {
        check_value(key, v, order_reader, index, seen_committed, out);
    }
    let mut stray = HashSet::new();
    for &(txn, list) in &other_reads {
        for &v in list {
            if !position.contains_key(&v) && stray.insert(v) {
                check_value(key, v, txn, index, seen_committed, out);
            }
        }
    }
    KeyOrder { key, versions, position, prefix_reads, other_reads, stray }
}

/// Checks that an observed value was appended by a transaction that may have committed.
fn check_value(
    key: Key,
    value: Value,
    reader: usize,
    index: &Index<'_>,
    seen_committed: &mut [bool],
    out: &mut Vec<Anomaly>,
) {
    match index.writers.get(&(key, value)) {
        None => out.push(Anomaly::GarbageRead { key, value, reader: index.id(reader) }),
        Some(&writer) => match index.history[writer].status {
            Status::Aborted => {
                out.push(Anomaly::AbortedRead { key, value, reader: index.id(reader), writer: index.id(writer) })
            }
            // Someone saw its effect, so it committed.
            Status::Unknown => seen_committed[writer] = true,
            Status::Committed => {}
        },
    }
}

/// The dependency graph. Nodes below `history.len()` are transactions (by position in the history); any
/// above are the auxiliary time points of the real-time order.
struct Graph {
    adj: Vec<Vec<(usize, EdgeKind)>>,
}

/// An edge between graph nodes.
type Edge = (usize, usize, EdgeKind);

impl Graph {
    fn add(&mut self, from: usize, to: usize, kind: EdgeKind) {
        self.adj[from].push((to, kind));
    }

    /// Removes duplicate edges and orders each node's edges by preference; returns the edge count.
    fn finish(&mut self) -> usize {
        self.adj
            .iter_mut()
            .map(|out| {
                out.sort_unstable_by_key(|&(to, kind)| (kind.preference(), to));
                out.dedup();
                out.len()
            })
            .sum()
    }
}

/// Adds the ww, wr and rw edges that `key`'s version order implies.
fn add_key_edges(order: &KeyOrder<'_>, index: &Index<'_>, is_node: &[bool], appends: &[(Value, usize)], g: &mut Graph) {
    let key = order.key;
    let writer_of = |v: Value| index.writers.get(&(key, v)).copied().filter(|&w| is_node[w]);
    // Values without a committed writer were reported in pass 1; skipping over them keeps the order of the
    // rest, which is still what the database did.
    let writers: Vec<Option<usize>> = order.versions.iter().map(|&v| writer_of(v)).collect();

    let mut prev = None;
    for &w in writers.iter().flatten() {
        if let Some(p) = prev.filter(|&p| p != w) {
            g.add(p, w, EdgeKind::Ww);
        }
        prev = Some(w);
    }

    // last_before[n] / first_from[n]: the writer of the last version among the first n / the first version
    // after them.
    let mut last_before = Vec::with_capacity(writers.len() + 1);
    last_before.push(None);
    let mut last = None;
    for &w in &writers {
        last = w.or(last);
        last_before.push(last);
    }
    let mut first_from = vec![None; writers.len() + 1];
    let mut next = None;
    for (i, &w) in writers.iter().enumerate().rev() {
        next = w.or(next);
        first_from[i] = next;
    }

    // A committed append missing from every read came after all observed versions.
    let mut unobserved: Vec<usize> = appends
        .iter()
        .filter(|&&(v, w)| {
            is_node[w]
                && index.writers.get(&(key, v)) == Some(&w)
                && !order.position.contains_key(&v)
                && !order.stray.contains(&v)
        })
        .map(|&(_, w)| w)
        .collect();
    unobserved.sort_unstable();
    unobserved.dedup();
    if let Some(last) = last {
        for &u in unobserved.iter().filter(|&&u| u != last) {
            g.add(last, u, EdgeKind::Ww);
        }
    }

    for &(reader, seen) in &order.prefix_reads {
        if let Some(w) = last_before[seen].filter(|&w| w != reader) {
            g.add(w, reader, EdgeKind::Wr);
        }
        match first_from[seen] {
            Some(w) => {
                if w != reader {
                    g.add(reader, w, EdgeKind::Rw);
                }
            }
            // Readers of a shorter prefix reach the unobserved appends through the ww chain already.
            None => {
                for &u in unobserved.iter().filter(|&&u| u != reader) {
                    g.add(reader, u, EdgeKind::Rw);
                }
            }
        }
    }
    // A contradicting read has no place in the order, but it still saw what it saw.
    for &(reader, list) in &order.other_reads {
        if let Some(w) = list.iter().rev().find_map(|&v| writer_of(v)).filter(|&w| w != reader) {
            g.add(w, reader, EdgeKind::Wr);
        }
    }
}

/// Reports committed appends to `order.key` missing from a read by a transaction invoked after the
/// append's transaction completed.
fn lost_appends(order: &KeyOrder<'_>, index: &Index<'_>, appends: &[(Value, usize)], out: &mut Vec<Anomaly>) {
    let history = index.history;
    let mut by_start: Vec<(u64, usize)> =
        order.prefix_reads.iter().map(|&(reader, seen)| (history[reader].invoked_at, seen)).collect();
    if by_start.is_empty() {
        return;
    }
    by_start.sort_unstable();
    // fewest[i]: the fewest versions seen by any read invoked no earlier than by_start[i].
    let mut min = usize::MAX;
    let mut fewest: Vec<usize> = by_start
        .iter()
        .rev()
        .map(|&(_, seen)| {
            min = min.min(seen);
            min
        })
        .collect();
    fewest.reverse();

    let mut reported = HashSet::new();
    for &(value, w) in appends {
        let writer = &history[w];
        if writer.status != Status::Committed
            || index.writers.get(&(order.key, value)) != Some(&w)
            || order.stray.contains(&value)
        {
            continue;
        }
        // A read that saw n versions contains the value iff the value's position is below n; an unobserved
        // value is in no read.
        let at = order.position.get(&value).copied().unwrap_or(order.versions.len());
        let first_later = by_start.partition_point(|&(start, _)| start <= writer.completed_at);
        if fewest.get(first_later).is_some_and(|&n| n <= at) && reported.insert(value) {
            out.push(Anomaly::LostAppend { key: order.key, value, writer: writer.id });
        }
    }
}

/// Adds real-time edges among committed transactions without materialising all O(n^2) pairs: one
/// auxiliary node per distinct completion time, chained in time order; a transaction links to the node
/// of its completion, and the last node completed before its invocation links to it. So T1 reaches T2
/// through auxiliary nodes exactly when T1.completed_at < T2.invoked_at.
fn add_realtime_edges(history: &[Txn], g: &mut Graph) {
    let real = history.len();
    let timed: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, t)| t.status == Status::Committed && t.completed_at != u64::MAX && t.invoked_at <= t.completed_at)
        .map(|(i, _)| i)
        .collect();
    let mut times: Vec<u64> = timed.iter().map(|&i| history[i].completed_at).collect();
    times.sort_unstable();
    times.dedup();
    g.adj.resize_with(real + times.len(), Vec::new);
    for j in 1..times.len() {
        g.add(real + j - 1, real + j, EdgeKind::Rt);
    }
    for &i in &timed {
        let txn = &history[i];
        let done = times.partition_point(|&c| c < txn.completed_at);
        g.add(i, real + done, EdgeKind::Rt);
        let before = times.partition_point(|&c| c < txn.invoked_at);
        if before > 0 {
            g.add(real + before - 1, i, EdgeKind::Rt);
        }
    }
}

/// Strongly connected components with more than one node, by Tarjan's algorithm with an explicit stack
/// (histories are large enough to overflow the call stack).
fn strongly_connected(adj: &[Vec<(usize, EdgeKind)>]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let mut index = vec![UNSEEN; adj.len()];
    let mut low = vec![0; adj.len()];
    let mut on_stack = vec![false; adj.len()];
    let mut stack = Vec::new();
    let mut calls: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    let mut sccs = Vec::new();
    for (root, edges) in adj.iter().enumerate() {
        // A node without successors is a component of its own.
        if index[root] != UNSEEN || edges.is_empty() {
            continue;
        }
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        calls.push((root, 0));
        while let Some(&(v, i)) = calls.last() {
            if let Some(&(w, _)) = adj[v].get(i) {
                if let Some(top) = calls.last_mut() {
                    top.1 += 1;
                }
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                calls.pop();
                if let Some(&(parent, _)) = calls.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        sccs.push(component);
                    }
                }
            }
        }
    }
    sccs
}

/// Reports one concrete cycle for each strongly connected component holding two or more transactions.
fn find_cycles(adj: &[Vec<(usize, EdgeKind)>], history: &[Txn], out: &mut Vec<Anomaly>) {
    let real = history.len();
    let mut sccs = strongly_connected(adj);
    for members in &mut sccs {
        members.sort_unstable();
    }
    sccs.sort_unstable_by_key(|members| members[0]);
    let mut comp = vec![usize::MAX; adj.len()];
    for (c, members) in sccs.iter().enumerate() {
        for &m in members {
            comp[m] = c;
        }
    }
    let id = |i: usize| history[i].id;
    for (c, members) in sccs.iter().enumerate() {
        if members.iter().filter(|&&m| m < real).count() < 2 {
            continue;
        }
        let scc = Scc { adj, comp: &comp, id: c, members, real };
        let Some(raw) = scc.best_cycle() else { continue };
        let edges = compress(&raw, real);
        if edges.len() < 2 {
            continue;
        }
        out.push(Anomaly::Cycle {
            txns: edges.iter().map(|e| id(e.0)).collect(),
            edges: edges.iter().map(|&(from, to, kind)| (id(from), id(to), kind)).collect(),
        });
    }
}

/// Replaces each run through auxiliary time nodes by one rt edge between the transactions at its ends,
/// starting the cycle at a transaction.
fn compress(cycle: &[Edge], real: usize) -> Vec<Edge> {
    let Some(start) = cycle.iter().position(|e| e.0 < real) else { return Vec::new() };
    let mut from = cycle[start].0;
    let mut out = Vec::new();
    for &(_, to, kind) in cycle.iter().cycle().skip(start).take(cycle.len()) {
        if to < real {
            out.push((from, to, kind));
            from = to;
        }
    }
    out
}

/// How many rw edges to try when looking for a cycle with exactly one: bounds the work in huge components.
const MAX_RW_TRIES: usize = 64;

/// One strongly connected component, searched for a cycle.
struct Scc<'a> {
    adj: &'a [Vec<(usize, EdgeKind)>],
    comp: &'a [usize],
    id: usize,
    members: &'a [usize],
    real: usize,
}

impl Scc<'_> {
    fn inside(&self, node: usize) -> bool {
        self.comp[node] == self.id
    }

    /// Picks the most specific cycle, as Elle reports the strongest anomaly: G0, then G1c, then
    /// G-single, first without real-time edges and then with them, and any cycle last.
    fn best_cycle(&self) -> Option<Vec<Edge>> {
        use EdgeKind::{Rt, Rw, Wr, Ww};
        self.restricted_cycle(&[Ww])
            .or_else(|| self.restricted_cycle(&[Ww, Wr]))
            .or_else(|| self.single_rw_cycle(&[Ww, Wr]))
            .or_else(|| self.restricted_cycle(&[Ww, Wr, Rt]))
            .or_else(|| self.single_rw_cycle(&[Ww, Wr, Rt]))
            .or_else(|| {
                // Every node of a component lies on a cycle.
                let start = *self.members.iter().find(|&&m| m < self.real)?;
                self.path(start, start, &[Ww, Wr, Rw, Rt])
            })
    }

    /// Shortest path from `from` to `to` (a cycle if they are equal) over `allowed` edges inside the
    /// component, by BFS.
    fn path(&self, from: usize, to: usize, allowed: &[EdgeKind]) -> Option<Vec<Edge>> {
        let mut parent: HashMap<usize, (usize, EdgeKind)> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(x) = queue.pop_front() {
            for &(y, kind) in &self.adj[x] {
                if !self.inside(y) || !allowed.contains(&kind) {
                    continue;
                }
                if y == to {
                    let mut edges = vec![(x, y, kind)];
                    let mut cur = x;
                    while cur != from {
                        let (p, k) = parent[&cur];
                        edges.push((p, cur, k));
                        cur = p;
                    }
                    edges.reverse();
                    return Some(edges);
                }
                if y != from {
                    if let Entry::Vacant(e) = parent.entry(y) {
                        e.insert((x, kind));
                        queue.push_back(y);
                    }
                }
            }
        }
        None
    }

    /// A cycle using only `allowed` edges, if any: a DFS finds a node on one, then BFS the shortest
    /// cycle through that node.
    fn restricted_cycle(&self, allowed: &[EdgeKind]) -> Option<Vec<Edge>> {
        const ON_STACK: u8 = 1;
        const DONE: u8 = 2;
        let mut state: HashMap<usize, u8> = HashMap::new();
        for &root in self.members {
            if state.contains_key(&root) {
                continue;
            }
            state.insert(root, ON_STACK);
            let mut stack = vec![(root, 0)];
            while let Some(top) = stack.last_mut() {
                let (x, i) = *top;
                let Some(&(y, kind)) = self.adj[x].get(i) else {
                    state.insert(x, DONE);
                    stack.pop();
                    continue;
                };
                top.1 += 1;
                if !self.inside(y) || !allowed.contains(&kind) {
                    continue;
                }
                match state.get(&y) {
                    None => {
                        state.insert(y, ON_STACK);
                        stack.push((y, 0));
                    }
                    Some(&ON_STACK) => return self.path(y, y, allowed),
                    Some(_) => {}
                }
            }
        }
        None
    }

    /// A cycle made of one rw edge and `others`, trying a bounded number of rw edges.
    fn single_rw_cycle(&self, others: &[EdgeKind]) -> Option<Vec<Edge>> {
        let mut tries = 0;
        for &x in self.members {
            for &(y, kind) in &self.adj[x] {
                if kind != EdgeKind::Rw || !self.inside(y) {
                    continue;
                }
                if let Some(mut cycle) = self.path(y, x, others) {
                    cycle.insert(0, (x, y, EdgeKind::Rw));
                    return Some(cycle);
                }
                tries += 1;
                if tries >= MAX_RW_TRIES {
                    return None;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const STRICT: CheckOptions = CheckOptions { strict: true };
    const PLAIN: CheckOptions = CheckOptions { strict: false };

    fn app(key: Key, value: Value) -> MicroOp {
        MicroOp::Append { key, value }
    }

    fn read(key: Key, list: &[Value]) -> MicroOp {
        MicroOp::Read { key, observed: Some(list.to_vec()) }
    }

    /// A committed transaction concurrent with every other `ok` one, so only data dependencies order it.
    fn ok(id: u64, ops: Vec<MicroOp>) -> Txn {
        Txn { id, process: id, ops, status: Status::Committed, invoked_at: 0, completed_at: 1_000_000 }
    }

    fn timed(id: u64, ops: Vec<MicroOp>, invoked_at: u64, completed_at: u64) -> Txn {
        Txn { invoked_at, completed_at, ..ok(id, ops) }
    }

    fn with_status(txn: Txn, status: Status) -> Txn {
        let completed_at = if status == Status::Unknown { u64::MAX } else { txn.completed_at };
        Txn { status, completed_at, ..txn }
    }

    fn assert_valid(history: &[Txn], options: &CheckOptions) -> Report {
        let report = check(history, options);
        assert!(report.is_valid(), "expected a valid history ({options:?}), got {report}");
        report
    }

    fn names(report: &Report) -> Vec<&'static str> {
        report.anomalies.iter().map(Anomaly::name).collect()
    }

    fn cycle_txns(report: &Report) -> Vec<Vec<u64>> {
        report
            .anomalies
            .iter()
            .filter_map(|a| match a {
                Anomaly::Cycle { txns, .. } => {
                    let mut txns = txns.clone();
                    txns.sort_unstable();
                    Some(txns)
                }
                _ => None,
            })
            .collect()
    }

    /// Xorshift64: deterministic and dependency-free.
    struct XorShift(u64);

    impl XorShift {
        fn new(seed: u64) -> Self {
            Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        fn next_u64(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next_u64() % n
        }
    }

    struct Shape {
        txns: usize,
        keys: u64,
        max_ops: u64,
        read_percent: u64,
        /// Percent of transactions that abort or end unknown (half each).
        fault_percent: u64,
        /// How far (below 1000) an interval may stretch around its serial point.
        spread: u64,
    }

    /// A history executed one transaction at a time against an in-memory model. Transaction i takes
    /// effect at time 1000 * (i + 1) and its interval contains that point, so the history is strict
    /// serializable however far the intervals overlap.
    fn generate(seed: u64, shape: &Shape) -> Vec<Txn> {
        let mut rng = XorShift::new(seed);
        let mut model: BTreeMap<Key, Vec<Value>> = BTreeMap::new();
        let mut next_value: Value = 1;
        let mut history = Vec::with_capacity(shape.txns);
        for i in 0..shape.txns as u64 {
            let roll = rng.below(100);
            let status = if roll < shape.fault_percent / 2 {
                Status::Aborted
            } else if roll < shape.fault_percent {
                Status::Unknown
            } else {
                Status::Committed
            };
            // An unknown outcome may or may not have taken effect; both must pass.
            let applied = status == Status::Committed || (status == Status::Unknown && rng.below(2) == 0);
            let mut pending: Vec<(Key, Value)> = Vec::new();
            let mut ops = Vec::new();
            for _ in 0..1 + rng.below(shape.max_ops) {
                let key = rng.below(shape.keys);
                if rng.below(100) < shape.read_percent {
                    let mut list = model.get(&key).cloned().unwrap_or_default();
                    list.extend(pending.iter().filter(|p| p.0 == key).map(|p| p.1));
                    // The client of an unknown transaction never got its reads.
                    ops.push(MicroOp::Read { key, observed: (status != Status::Unknown).then_some(list) });
                } else {
                    let value = next_value;
                    next_value += 1;
                    if applied {
                        model.entry(key).or_default().push(value);
                    } else {
                        pending.push((key, value));
                    }
                    ops.push(app(key, value));
                }
            }
            let point = 1_000 * (i + 1);
            let invoked_at = point - rng.below(shape.spread + 1);
            let completed_at = if status == Status::Unknown { u64::MAX } else { point + rng.below(shape.spread + 1) };
            history.push(Txn { id: i + 1, process: i % 8, ops, status, invoked_at, completed_at });
        }
        history
    }

    const SMALL: Shape = Shape { txns: 300, keys: 6, max_ops: 5, read_percent: 50, fault_percent: 10, spread: 0 };

    #[test]
    fn serial_random_histories_are_valid() {
        for seed in 1..=8 {
            let history = generate(seed, &SMALL);
            let plain = assert_valid(&history, &PLAIN);
            let strict = assert_valid(&history, &STRICT);
            assert_eq!(plain.committed + plain.unknown + plain.aborted, SMALL.txns);
            assert!(plain.aborted > 0 && plain.unknown > 0, "the generator should produce faults: {plain}");
            assert_eq!(plain.keys, 6);
            assert!(plain.edges > 100, "a serial history has many dependencies: {plain}");
            assert!(strict.edges > plain.edges, "strict mode adds real-time edges");
        }
    }

    #[test]
    fn overlapping_linearizable_histories_are_valid() {
        let shape = Shape { spread: 900, ..SMALL };
        for seed in 1..=8 {
            let mut history = generate(seed, &shape);
            assert_valid(&history, &STRICT);
            // The order of the slice must not matter.
            history.reverse();
            assert_valid(&history, &STRICT);
            assert_valid(&history, &PLAIN);
        }
    }

    #[test]
    fn stale_reads_in_a_serial_history_are_caught_in_strict_mode() {
        let shape = Shape { fault_percent: 0, ..SMALL };
        let history = generate(3, &shape);
        let mut mutated = 0;
        for (t, txn) in history.iter().enumerate() {
            for (o, op) in txn.ops.iter().enumerate() {
                let MicroOp::Read { key, observed: Some(list) } = op else { continue };
                let own_append_before =
                    txn.ops[..o].iter().any(|p| matches!(p, MicroOp::Append { key: k, .. } if k == key));
                if list.is_empty() || own_append_before || mutated >= 20 {
                    continue;
                }
                // Drop the newest version: the reader began after its writer completed, so that is stale.
                let mut stale = history.clone();
                let dropped = list[list.len() - 1];
                let shorter = list[..list.len() - 1].to_vec();
                stale[t].ops[o] = MicroOp::Read { key: *key, observed: Some(shorter) };
                let report = check(&stale, &STRICT);
                assert!(
                    report
                        .anomalies
                        .iter()
                        .any(|a| matches!(a, Anomaly::LostAppend { value, .. } if *value == dropped)),
                    "dropping {dropped} from T{}'s read of key {key} should be a lost append: {report}",
                    txn.id
                );
                assert!(report.anomalies.iter().any(|a| matches!(a, Anomaly::Cycle { .. })), "{report}");
                mutated += 1;
            }
        }
        assert_eq!(mutated, 20);
    }

    #[test]
    fn write_skew_is_g2() {
        let history = vec![
            ok(1, vec![read(1, &[]), read(2, &[]), app(1, 10)]),
            ok(2, vec![read(1, &[]), read(2, &[]), app(2, 20)]),
        ];
        for options in [PLAIN, STRICT] {
            let report = check(&history, &options);
            assert_eq!(names(&report), ["G2"], "{report}");
            assert_eq!(cycle_txns(&report), [[1, 2]]);
        }
        // Same with a later read that shows both appends.
        let mut seen = history.clone();
        seen.push(ok(3, vec![read(1, &[10]), read(2, &[20])]));
        assert_eq!(names(&check(&seen, &PLAIN)), ["G2"]);
    }

    #[test]
    fn lost_update_is_g_single() {
        let history = vec![
            ok(1, vec![read(1, &[]), app(1, 10)]),
            ok(2, vec![read(1, &[]), app(1, 20)]),
            ok(3, vec![read(1, &[10, 20])]),
        ];
        let report = check(&history, &PLAIN);
        assert_eq!(names(&report), ["G-single"], "{report}");
        let Anomaly::Cycle { edges, .. } = &report.anomalies[0] else { panic!("{report}") };
        let mut edges = edges.clone();
        edges.sort_unstable();
        assert_eq!(edges, [(1, 2, EdgeKind::Ww), (2, 1, EdgeKind::Rw)]);
    }

    #[test]
    fn circular_information_flow_is_g1c() {
        let history = vec![ok(1, vec![app(1, 10), read(2, &[20])]), ok(2, vec![app(2, 20), read(1, &[10])])];
        let report = check(&history, &PLAIN);
        assert_eq!(names(&report), ["G1c"], "{report}");
        let Anomaly::Cycle { edges, txns } = &report.anomalies[0] else { panic!("{report}") };
        assert_eq!(txns.len(), 2);
        assert!(edges.iter().all(|e| e.2 == EdgeKind::Wr), "{report}");
    }

    #[test]
    fn unobserved_append_follows_every_observed_version() {
        // T2 saw T1's write, so T1's append to key 1 precedes T2's; yet a read shows T2's without T1's.
        let history = vec![
            ok(1, vec![app(1, 10), app(2, 20)]),
            ok(2, vec![app(1, 5), read(2, &[20])]),
            ok(3, vec![read(1, &[5])]),
        ];
        let report = check(&history, &PLAIN);
        assert_eq!(names(&report), ["G1c"], "{report}");
        let Anomaly::Cycle { edges, .. } = &report.anomalies[0] else { panic!("{report}") };
        let mut edges = edges.clone();
        edges.sort_unstable();
        assert_eq!(edges, [(1, 2, EdgeKind::Wr), (2, 1, EdgeKind::Ww)]);
    }

    #[test]
    fn write_cycle_is_g0() {
        let history = vec![
            ok(1, vec![app(1, 10), app(2, 11)]),
            ok(2, vec![app(1, 20), app(2, 21)]),
            ok(3, vec![read(1, &[10, 20]), read(2, &[21, 11])]),
        ];
        let report = check(&history, &PLAIN);
        assert_eq!(names(&report), ["G0"], "{report}");
        assert_eq!(cycle_txns(&report), [[1, 2]]);
    }

    #[test]
    fn incompatible_orders() {
        let history = vec![
            ok(1, vec![app(1, 1)]),
            ok(2, vec![app(1, 2)]),
            ok(3, vec![read(1, &[1, 2])]),
            ok(4, vec![read(1, &[2])]),
        ];
        let report = check(&history, &PLAIN);
        assert_eq!(report.anomalies, [Anomaly::IncompatibleOrder { key: 1, a: vec![1, 2], b: vec![2] }], "{report}");
    }

    #[test]
    fn garbage_read() {
        let history = vec![ok(1, vec![app(1, 1)]), ok(2, vec![read(1, &[1, 99])])];
        let report = check(&history, &PLAIN);
        assert_eq!(report.anomalies, [Anomaly::GarbageRead { key: 1, value: 99, reader: 2 }], "{report}");
    }

    #[test]
    fn aborted_read() {
        let history = vec![with_status(ok(1, vec![app(1, 5)]), Status::Aborted), ok(2, vec![read(1, &[5])])];
        let report = check(&history, &STRICT);
        assert_eq!(report.anomalies, [Anomaly::AbortedRead { key: 1, value: 5, reader: 2, writer: 1 }], "{report}");
        assert_eq!((report.committed, report.aborted, report.unknown), (1, 1, 0));
    }

    #[test]
    fn duplicate_elements() {
        let history = vec![ok(1, vec![app(1, 1)]), ok(2, vec![read(1, &[1, 1])])];
        let report = check(&history, &PLAIN);
        assert_eq!(report.anomalies, [Anomaly::DuplicateElements { key: 1, reader: 2, value: 1 }], "{report}");
    }

    #[test]
    fn internal_inconsistencies() {
        // A read after an own append that misses it.
        let report = check(&[ok(1, vec![app(1, 1), read(1, &[])])], &PLAIN);
        assert!(matches!(report.anomalies[..], [Anomaly::Internal { txn: 1, key: 1, .. }]), "{report}");

        // Ends with the own append, but another write slipped in since the previous read.
        let history = vec![
            ok(1, vec![app(1, 1)]),
            ok(2, vec![app(1, 3)]),
            ok(3, vec![read(1, &[1]), app(1, 2), read(1, &[1, 3, 2])]),
        ];
        let report = check(&history, &PLAIN);
        assert!(report.anomalies.iter().any(|a| matches!(a, Anomaly::Internal { txn: 3, key: 1, .. })), "{report}");

        // Non-repeatable read within one transaction (also a G-single cycle with the writer).
        let history = vec![ok(1, vec![app(1, 1)]), ok(2, vec![read(1, &[]), read(1, &[1])])];
        let report = check(&history, &PLAIN);
        assert!(matches!(report.anomalies[0], Anomaly::Internal { txn: 2, key: 1, .. }), "{report}");
        assert_eq!(names(&report), ["internal", "G-single"], "{report}");

        // Seeing an own append before making it.
        let report = check(&[ok(1, vec![read(1, &[7]), app(1, 7)])], &PLAIN);
        assert!(matches!(report.anomalies[..], [Anomaly::Internal { txn: 1, key: 1, .. }]), "{report}");

        // Reads that follow own appends correctly are fine.
        let history = vec![ok(1, vec![app(1, 1)]), ok(2, vec![read(1, &[1]), app(1, 2), read(1, &[1, 2]), app(1, 3)])];
        assert_valid(&history, &STRICT);
    }

    #[test]
    fn lost_append_after_completion() {
        let history = vec![timed(1, vec![app(1, 1)], 0, 10), timed(2, vec![read(1, &[])], 20, 30)];
        assert_valid(&history, &PLAIN);
        let report = check(&history, &STRICT);
        assert!(report.anomalies.contains(&Anomaly::LostAppend { key: 1, value: 1, writer: 1 }), "{report}");
        assert!(names(&report).contains(&"G-single-realtime"), "{report}");

        // Missing from the middle of a later read.
        let history = vec![
            timed(1, vec![app(1, 1)], 0, 1),
            timed(2, vec![app(1, 2)], 2, 3),
            timed(3, vec![app(1, 3)], 4, 5),
            timed(4, vec![read(1, &[1, 3])], 6, 7),
        ];
        assert_valid(&history, &PLAIN);
        let report = check(&history, &STRICT);
        assert!(report.anomalies.contains(&Anomaly::LostAppend { key: 1, value: 2, writer: 2 }), "{report}");
        assert!(!report.anomalies.iter().any(|a| matches!(a, Anomaly::LostAppend { value: 1 | 3, .. })));
    }

    #[test]
    fn real_time_order_only_matters_when_strict() {
        let history = vec![timed(1, vec![app(1, 1)], 0, 10), timed(2, vec![read(1, &[])], 20, 30)];
        assert_valid(&history, &PLAIN);
        assert!(!check(&history, &STRICT).is_valid());

        // Overlapping in time, the same reads are fine either way.
        let history = vec![timed(1, vec![app(1, 1)], 0, 10), timed(2, vec![read(1, &[])], 5, 30)];
        assert_valid(&history, &STRICT);

        // An unknown writer never completed, so nothing had to see it.
        let history =
            vec![with_status(timed(1, vec![app(1, 1)], 0, 10), Status::Unknown), timed(2, vec![read(1, &[])], 20, 30)];
        assert_valid(&history, &STRICT);
    }

    #[test]
    fn realtime_cycles_are_reported_between_transactions() {
        // Several unrelated transactions between the two put many time points on the real-time path.
        let mut history = vec![timed(1, vec![app(1, 1)], 0, 1)];
        for id in 2..=5 {
            history.push(timed(id, vec![app(2, id)], 2 * id, 2 * id + 1));
        }
        history.push(timed(6, vec![read(1, &[])], 100, 101));
        let report = check(&history, &STRICT);
        let cycles: Vec<_> = report
            .anomalies
            .iter()
            .filter_map(|a| match a {
                Anomaly::Cycle { edges, .. } => Some(edges.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(cycles.len(), 1, "{report}");
        let mut edges = cycles[0].clone();
        edges.sort_unstable();
        assert_eq!(edges, [(1, 6, EdgeKind::Rt), (6, 1, EdgeKind::Rw)], "{report}");
    }

    #[test]
    fn unknown_transactions() {
        // Observed: it committed, and it is part of the graph.
        let history = vec![with_status(ok(1, vec![app(1, 1)]), Status::Unknown), ok(2, vec![read(1, &[1])])];
        assert_valid(&history, &STRICT);
        let report = assert_valid(&history, &PLAIN);
        assert_eq!((report.committed, report.unknown, report.edges), (1, 1, 1));

        // Its unobserved append to key 2 therefore committed too, so T2 read key 2 too early.
        let history = vec![
            with_status(ok(1, vec![app(1, 1), app(2, 1)]), Status::Unknown),
            ok(2, vec![read(1, &[1]), read(2, &[])]),
        ];
        let report = check(&history, &PLAIN);
        assert_eq!(names(&report), ["G-single"], "{report}");
        assert_eq!(cycle_txns(&report), [[1, 2]]);

        // Never observed: no claim either way.
        for status in [Status::Unknown, Status::Aborted] {
            let history =
                vec![with_status(ok(1, vec![app(1, 1), app(2, 1)]), status), ok(2, vec![read(1, &[]), read(2, &[])])];
            assert_valid(&history, &STRICT);
            let report = assert_valid(&history, &PLAIN);
            assert_eq!(report.edges, 0, "{report}");
        }
    }

    #[test]
    fn large_history_checks() {
        let shape = Shape { txns: 50_000, keys: 100, max_ops: 3, read_percent: 10, fault_percent: 2, spread: 600 };
        let history = generate(42, &shape);
        let strict = assert_valid(&history, &STRICT);
        let plain = assert_valid(&history, &PLAIN);
        assert_eq!(strict.committed + strict.unknown + strict.aborted, 50_000);
        assert!(plain.edges > 50_000, "{plain}");
    }

    #[test]
    fn classification_and_messages() {
        use EdgeKind::{Rt, Rw, Wr, Ww};
        assert_eq!(cycle_name(&[(1, 2, Ww), (2, 1, Ww)]), "G0");
        assert_eq!(cycle_name(&[(1, 2, Ww), (2, 1, Wr)]), "G1c");
        assert_eq!(cycle_name(&[(1, 2, Wr), (2, 1, Rw)]), "G-single");
        assert_eq!(cycle_name(&[(1, 2, Rw), (2, 1, Rw)]), "G2");
        assert_eq!(cycle_name(&[(1, 2, Rt), (2, 1, Ww)]), "G0-realtime");
        assert_eq!(cycle_name(&[(1, 2, Rt), (2, 1, Wr)]), "G1c-realtime");
        assert_eq!(cycle_name(&[(1, 2, Rt), (2, 1, Rw)]), "G-single-realtime");
        assert_eq!(cycle_name(&[(1, 2, Rw), (2, 3, Rw), (3, 1, Rt)]), "G2-realtime");

        let cycle = Anomaly::Cycle { txns: vec![4, 9], edges: vec![(4, 9, Ww), (9, 4, Rw)] };
        assert_eq!(cycle.to_string(), "G-single cycle: T4 -ww-> T9 -rw-> T4");
        let lost = Anomaly::LostAppend { key: 3, value: 17, writer: 8 };
        assert!(lost.to_string().contains("17") && lost.to_string().contains("T8"));
        let long: Vec<Value> = (0..100).collect();
        let mut other = long.clone();
        other[50] = 1000;
        let message = Anomaly::IncompatibleOrder { key: 2, a: long, b: other }.to_string();
        assert!(message.contains("index 50: 50 vs 1000") && message.contains("length 100"), "{message}");
        assert!(message.len() < 300, "long lists are elided: {message}");

        let empty = check(&[], &STRICT);
        assert!(empty.is_valid());
        assert_eq!(empty, Report::default());
    }
}
