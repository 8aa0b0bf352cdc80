//! `zen+`'s NUMA-aware soft partitions (zen-plus.txt §4.2.2): where nodes
//! come from ([`Topology`]), the logical partitions of the tables, each
//! worker's access counts, the partition map, transaction assignment
//! (Algorithm 3, [`assign_node`]) and the periodic remapping (Algorithm 4,
//! [`map_partitions`]).
//!
//! # Nodes
//!
//! A worker runs on node `worker · nodes / workers` (contiguous blocks: the
//! paper's "NUMA group" binding, which it found best). The node of a heap
//! slot comes from [`Topology::node_of_slot`], one function whatever the
//! source:
//!
//! * **machine** (Linux reports several nodes): each worker thread is bound
//!   to its node's CPUs, each heap chunk's pages to its region's node
//!   (`mbind`), so a slot's node is its region's;
//! * **backend** (the `emulated` backend's media model has `--pm-numa-nodes
//!   K`): chunks are allocated on the region's node
//!   (`Pool::allocate_chunk_on_node`), each worker declares its node
//!   (`pmtx_pm::set_thread_numa_node`), and a slot's node is the model's,
//!   which charges remote accesses their latency;
//! * **logical** (`numa=K` on a machine and backend with one node): the
//!   same decisions and counters with nothing placed; a slot's node is its
//!   region's.
//!
//! Writes are NUMA-local by construction in every case: a worker writes
//! only its own region (Zen's design), whose chunks lie on its node.
//!
//! # Partitions
//!
//! A key's partition is a hash of its partition key modulo the partition
//! count: the table's declared prefix (`TableSchema::partitioned_by_prefix`,
//! TPC-C's warehouse id) or the whole primary key. Workers count their
//! accesses per partition; [`map_partitions`] periodically maps each
//! partition to the node that accesses it most, within load bounds, and
//! [`SoftPartitions::assign`] sends a transaction to a worker of the node
//! most of its keys' partitions map to.
//!
//! Explained in docs/engines/zen-plus.md.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Where the nodes come from (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeSource {
    /// Linux reports several nodes: threads and chunks are bound.
    Machine,
    /// The emulated backend's media model has several nodes.
    Backend,
    /// Decisions and counters only.
    Logical,
}

/// The nodes of one engine.
#[derive(Clone, Debug)]
pub(crate) struct Topology {
    pub(crate) nodes: u32,
    pub(crate) source: NodeSource,
    workers: usize,
}

impl Topology {
    /// Chooses the nodes: `requested` (0: automatic) against the machine's
    /// `machine` nodes and the backend's `backend` nodes (module docs).
    /// `None`: one node, no soft partitions.
    pub(crate) fn choose(requested: u32, machine: u32, backend: u32, workers: usize) -> Result<Option<Self>, String> {
        let (nodes, source) = match requested {
            0 if machine > 1 => (machine, NodeSource::Machine),
            0 if backend > 1 => (backend, NodeSource::Backend),
            0 | 1 => return Ok(None),
            k if machine > 1 => {
                if k != machine {
                    return Err(format!("numa={k}, but this machine has {machine} NUMA nodes"));
                }
                (k, NodeSource::Machine)
            }
            k if backend > 1 => {
                if k != backend {
                    return Err(format!("numa={k}, but the backend emulates {backend} NUMA nodes (--pm-numa-nodes)"));
                }
                (k, NodeSource::Backend)
            }
            k => (k, NodeSource::Logical),
        };
        if nodes as usize > workers {
            return Err(format!("{nodes} NUMA nodes need at least as many workers, got {workers}"));
        }
        Ok(Some(Self { nodes, source, workers }))
    }

    /// The node of worker `worker` (contiguous blocks).
    #[inline]
    pub(crate) fn node_of_worker(&self, worker: usize) -> u32 {
        (worker as u64 * u64::from(self.nodes) / self.workers.max(1) as u64) as u32
    }

    /// The workers of node `node`.
    pub(crate) fn workers_of(&self, node: u32) -> std::ops::Range<usize> {
        let first = (0..self.workers).find(|&worker| self.node_of_worker(worker) == node).unwrap_or(self.workers);
        let end = (first..self.workers).find(|&worker| self.node_of_worker(worker) != node).unwrap_or(self.workers);
        first..end
    }

    /// THE place the node of a heap slot is decided (module docs):
    /// `backend_node` is the media model's node of the slot (asked only
    /// when the backend emulates the nodes), `region` the heap region
    /// owning the slot's chunk.
    #[inline]
    pub(crate) fn node_of_slot(&self, backend_node: impl FnOnce() -> u32, region: impl FnOnce() -> usize) -> u32 {
        match self.source {
            NodeSource::Backend => backend_node(),
            NodeSource::Machine | NodeSource::Logical => self.node_of_worker(region()),
        }
    }
}

/// A partition of `key`: `prefix` leading bytes (the table's declared
/// partition key) or the whole key, hashed modulo `partitions`.
#[inline]
pub(crate) fn partition_of(key: &[u8], prefix: Option<usize>, partitions: u32) -> u32 {
    let named = match prefix {
        Some(len) if key.len() >= len => &key[..len],
        _ => key,
    };
    // FNV-1a, then SplitMix64's finalizer so every bit counts.
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &byte in named {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    (hash % u64::from(partitions)) as u32
}

/// Algorithm 3's choice of a node: the least loaded one when the loads
/// differ by more than `delta` of the largest (and by more than one
/// transaction: the loads here are counts of pending transactions, where
/// the paper reads CPU utilisation), else the node with the most votes
/// (lowest on ties), else (no vote: nothing could be attributed) the node
/// `random` picks.
pub(crate) fn assign_node(votes: &[u64], load: &[u64], delta: f64, random: u64) -> usize {
    debug_assert_eq!(votes.len(), load.len());
    let nodes = votes.len().max(1);
    let (max_load, min_load) = (load.iter().copied().max().unwrap_or(0), load.iter().copied().min().unwrap_or(0));
    if max_load - min_load > 1 && (max_load - min_load) as f64 > delta * max_load as f64 {
        return (0..load.len()).min_by_key(|&node| (load[node], node)).unwrap_or(0);
    }
    let best = votes.iter().copied().max().unwrap_or(0);
    if best == 0 {
        return (random % nodes as u64) as usize;
    }
    votes.iter().position(|&vote| vote == best).unwrap_or(0)
}

/// Algorithm 4: remaps partitions to nodes from the access counts of a
/// period. `access[t][p]` is worker `t`'s count for partition `p`,
/// `node_of_worker[t]` its node; `part_map` (partition → node) is updated
/// in place. Returns the partitions moved.
///
/// Partitions are taken from the hottest. A node is a candidate while its
/// mapped load is within 10 % of the least loaded node's and it holds fewer
/// than ⌈partitions / nodes⌉ partitions; of the candidates the one that
/// accessed the partition most is chosen (the paper's text; its listing's
/// comparison reads the other way), and the partition moves there only if
/// that node's accesses exceed those of its current node by the factor
/// `eta`. (The listing's strict "< 1.1 · min" excludes every node while all
/// loads are 0; "≤" is meant.)
pub(crate) fn map_partitions(access: &[Vec<u64>], node_of_worker: &[u32], part_map: &mut [u32], eta: f64) -> usize {
    let partitions = part_map.len();
    let nodes = node_of_worker.iter().copied().max().map_or(1, |node| node as usize + 1);
    let mut per_partition = vec![0u64; partitions];
    let mut per_node = vec![vec![0u64; partitions]; nodes];
    for (worker, counts) in access.iter().enumerate() {
        let node = node_of_worker[worker] as usize;
        for (partition, &count) in counts.iter().enumerate().take(partitions) {
            per_partition[partition] += count;
            per_node[node][partition] += count;
        }
    }
    let mut order: Vec<usize> = (0..partitions).collect();
    order.sort_by_key(|&partition| (std::cmp::Reverse(per_partition[partition]), partition));
    let cap = partitions.div_ceil(nodes);
    let mut mapped_partitions = vec![0usize; nodes];
    let mut mapped_load = vec![0u64; nodes];
    let mut moved = 0;
    for partition in order {
        let min_load = mapped_load.iter().copied().min().unwrap_or(0) as f64;
        let mut candidate: Option<usize> = None;
        for node in 0..nodes {
            if mapped_load[node] as f64 <= 1.1 * min_load
                && mapped_partitions[node] < cap
                && candidate.is_none_or(|best| per_node[best][partition] < per_node[node][partition])
            {
                candidate = Some(node);
            }
        }
        let original = (part_map[partition] as usize).min(nodes - 1);
        let node = match candidate {
            Some(node)
                if node != original
                    && per_node[node][partition] as f64 > per_node[original][partition] as f64 * eta =>
            {
                part_map[partition] = node as u32;
                moved += 1;
                node
            }
            _ => original,
        };
        mapped_partitions[node] += 1;
        mapped_load[node] += per_node[node][partition];
    }
    moved
}

/// The soft partitions of one engine: access counts, the partition map,
/// the loads Algorithm 3 balances, and counters.
pub(crate) struct SoftPartitions {
    pub(crate) topology: Topology,
    partitions: u32,
    delta: f64,
    eta: f64,
    /// Per worker and partition, cumulative (only the worker writes).
    access: Box<[Box<[AtomicU32]>]>,
    /// Partition → node.
    part_map: Box<[AtomicU32]>,
    /// The counts at the last remap (the next one uses the difference).
    last: Mutex<Vec<Vec<u32>>>,
    /// Per node: transactions assigned to its workers that have not begun.
    pending: Box<[CachePadded<AtomicU64>]>,
    /// Per node: the next worker to assign (round robin).
    next_worker: Box<[AtomicUsize]>,
    seed: AtomicU64,
    pub(crate) remaps: AtomicU64,
    pub(crate) partitions_moved: AtomicU64,
    pub(crate) assigned: AtomicU64,
    pub(crate) assigned_by_load: AtomicU64,
}

impl SoftPartitions {
    pub(crate) fn new(topology: Topology, workers: usize, options: &crate::options::ZenPlusOptions, seed: u64) -> Self {
        let partitions = options.partitions;
        let nodes = topology.nodes;
        Self {
            partitions,
            delta: options.delta,
            eta: options.eta,
            access: (0..workers).map(|_| (0..partitions).map(|_| AtomicU32::new(0)).collect()).collect(),
            // Evenly distributed to start with.
            part_map: (0..partitions).map(|partition| AtomicU32::new(partition % nodes)).collect(),
            last: Mutex::new(vec![vec![0; partitions as usize]; workers]),
            pending: (0..nodes).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            next_worker: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            seed: AtomicU64::new(seed | 1),
            remaps: AtomicU64::new(0),
            partitions_moved: AtomicU64::new(0),
            assigned: AtomicU64::new(0),
            assigned_by_load: AtomicU64::new(0),
            topology,
        }
    }

    /// The partition of `key` in a table whose partition key is its first
    /// `prefix` bytes (`None`: the whole key).
    #[inline]
    pub(crate) fn partition_of(&self, key: &[u8], prefix: Option<usize>) -> u32 {
        partition_of(key, prefix, self.partitions)
    }

    /// Worker `worker` accessed `key`.
    #[inline]
    pub(crate) fn count_access(&self, worker: usize, key: &[u8], prefix: Option<usize>) {
        let counter = &self.access[worker][self.partition_of(key, prefix) as usize];
        // Only this worker writes its counters.
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// The node partition `partition` maps to.
    pub(crate) fn node_of_partition(&self, partition: u32) -> u32 {
        self.part_map[partition as usize].load(Ordering::Relaxed)
    }

    /// Algorithm 3: the worker to run a transaction on whose keys are
    /// `keys` ((key, partition prefix)); counts it as pending on that
    /// worker's node until the worker begins a transaction.
    pub(crate) fn assign<'k>(&self, keys: impl Iterator<Item = (&'k [u8], Option<usize>)>) -> usize {
        let nodes = self.topology.nodes as usize;
        let mut votes = vec![0u64; nodes];
        for (key, prefix) in keys {
            votes[self.node_of_partition(self.partition_of(key, prefix)) as usize] += 1;
        }
        let load: Vec<u64> = self.pending.iter().map(|pending| pending.load(Ordering::Relaxed)).collect();
        let random = self.seed.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let node = assign_node(&votes, &load, self.delta, random >> 11);
        let by_load = load.iter().max() != load.iter().min()
            && votes.iter().position(|&vote| vote == *votes.iter().max().unwrap_or(&0)) != Some(node);
        self.assigned.fetch_add(1, Ordering::Relaxed);
        if by_load {
            self.assigned_by_load.fetch_add(1, Ordering::Relaxed);
        }
        let workers = self.topology.workers_of(node as u32);
        let worker = workers.start + self.next_worker[node].fetch_add(1, Ordering::Relaxed) % workers.len().max(1);
        self.pending[node].fetch_add(1, Ordering::Relaxed);
        worker
    }

    /// Worker `worker` began a transaction (one assigned to it, if any,
    /// is no longer pending).
    #[inline]
    pub(crate) fn began(&self, worker: usize) {
        let pending = &self.pending[self.topology.node_of_worker(worker) as usize];
        if pending.load(Ordering::Relaxed) > 0 {
            let _ = pending.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |count| count.checked_sub(1));
        }
    }

    /// Algorithm 4 over the accesses since the last remap (the ticker
    /// calls it every `remap_interval`).
    pub(crate) fn remap(&self) {
        let mut last = self.last.lock();
        let mut window = Vec::with_capacity(self.access.len());
        for (worker, counters) in self.access.iter().enumerate() {
            let counts: Vec<u64> = counters
                .iter()
                .zip(last[worker].iter_mut())
                .map(|(counter, seen)| {
                    let now = counter.load(Ordering::Relaxed);
                    let delta = now.wrapping_sub(*seen);
                    *seen = now;
                    u64::from(delta)
                })
                .collect();
            window.push(counts);
        }
        drop(last);
        let node_of_worker: Vec<u32> =
            (0..self.access.len()).map(|worker| self.topology.node_of_worker(worker)).collect();
        let mut part_map: Vec<u32> = self.part_map.iter().map(|node| node.load(Ordering::Relaxed)).collect();
        let moved = map_partitions(&window, &node_of_worker, &mut part_map, self.eta);
        for (slot, node) in self.part_map.iter().zip(part_map) {
            slot.store(node, Ordering::Relaxed);
        }
        self.remaps.fetch_add(1, Ordering::Relaxed);
        self.partitions_moved.fetch_add(moved as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ZenPlusOptions;

    #[test]
    fn nodes_come_from_the_machine_then_the_backend_then_the_option() {
        let machine = Topology::choose(0, 2, 1, 4).unwrap().unwrap();
        assert_eq!((machine.nodes, machine.source), (2, NodeSource::Machine));
        let backend = Topology::choose(0, 1, 4, 8).unwrap().unwrap();
        assert_eq!((backend.nodes, backend.source), (4, NodeSource::Backend));
        assert!(Topology::choose(0, 1, 1, 4).unwrap().is_none(), "one node: no soft partitions");
        let logical = Topology::choose(2, 1, 1, 4).unwrap().unwrap();
        assert_eq!((logical.nodes, logical.source), (2, NodeSource::Logical));
        assert!(Topology::choose(3, 2, 1, 4).unwrap_err().contains("this machine has 2"));
        assert!(Topology::choose(3, 1, 2, 4).unwrap_err().contains("emulates 2"));
        assert!(Topology::choose(4, 1, 1, 2).unwrap_err().contains("at least as many workers"));
    }

    #[test]
    fn workers_fill_nodes_in_contiguous_blocks() {
        let topology = Topology::choose(2, 1, 1, 5).unwrap().unwrap();
        let nodes: Vec<u32> = (0..5).map(|worker| topology.node_of_worker(worker)).collect();
        assert_eq!(nodes, [0, 0, 0, 1, 1]);
        assert_eq!(topology.workers_of(0), 0..3);
        assert_eq!(topology.workers_of(1), 3..5);
        // A slot's node: the media model's for the backend source, else
        // its region's.
        assert_eq!(topology.node_of_slot(|| 0, || 4), 1);
        let backend = Topology::choose(0, 1, 2, 4).unwrap().unwrap();
        assert_eq!(backend.node_of_slot(|| 0, || 3), 0);
    }

    #[test]
    fn a_declared_prefix_names_the_partition() {
        let warehouse_7 = 7u32.to_be_bytes();
        let a = partition_of(&[&warehouse_7[..], b"district 1"].concat(), Some(4), 2048);
        let b = partition_of(&[&warehouse_7[..], b"stock 99"].concat(), Some(4), 2048);
        assert_eq!(a, b);
        let spread: std::collections::HashSet<u32> =
            (0u64..4096).map(|key| partition_of(&key.to_be_bytes(), None, 2048)).collect();
        assert!(spread.len() > 1500, "keys spread over the partitions: {}", spread.len());
        assert!(spread.iter().all(|&partition| partition < 2048));
    }

    /// Algorithm 3: votes decide unless the loads differ by more than δ;
    /// with no vote, the random choice.
    #[test]
    fn transactions_go_to_the_node_of_their_partitions_unless_loads_are_unbalanced() {
        assert_eq!(assign_node(&[1, 3], &[5, 5], 0.3, 0), 1, "most votes");
        assert_eq!(assign_node(&[2, 2], &[0, 0], 0.3, 0), 0, "ties: the lowest node");
        assert_eq!(assign_node(&[1, 3], &[10, 8], 0.3, 0), 1, "a 20 % difference is within δ");
        assert_eq!(assign_node(&[1, 3], &[2, 10], 0.3, 0), 0, "80 % apart: the least loaded node");
        assert_eq!(assign_node(&[1, 3], &[0, 1], 0.3, 0), 1, "one pending transaction is no imbalance");
        assert_eq!(assign_node(&[1, 3], &[0, 2], 0.3, 0), 0);
        assert_eq!(assign_node(&[0, 0, 0], &[0, 0, 0], 0.3, 7), 1, "no key: random");
        assert_eq!(assign_node(&[0, 5], &[4, 4], 0.0, 0), 1, "δ = 0 with equal loads: votes");
    }

    /// Algorithm 4 on known counts: each hot partition moves to the node
    /// whose workers access it, a lukewarm one stays when the candidate is
    /// not η times better, and the nodes get equal numbers of partitions.
    #[test]
    fn hot_partitions_move_to_the_node_that_accesses_them() {
        // Workers 0, 1 on node 0; workers 2, 3 on node 1. Four partitions,
        // all mapped to node 0 to start with.
        let node_of_worker = [0, 0, 1, 1];
        let access = vec![
            vec![100, 0, 10, 5], // worker 0
            vec![50, 0, 0, 5],   // worker 1
            vec![0, 100, 0, 0],  // worker 2
            vec![0, 50, 11, 5],  // worker 3
        ];
        // Node totals: p0 150/0, p1 0/150, p2 10/11, p3 10/5.
        let mut part_map = vec![0u32; 4];
        let moved = map_partitions(&access, &node_of_worker, &mut part_map, 1.2);
        assert_eq!(part_map, [0, 1, 0, 0]);
        assert_eq!(moved, 1, "p1 moves to node 1; p2 stays: 11 is not 1.2 x 10");
        // With η = 1.0 p2 moves too; p3 stays (node 1 already holds two).
        let mut part_map = vec![0u32; 4];
        assert_eq!(map_partitions(&access, &node_of_worker, &mut part_map, 1.0), 2);
        assert_eq!(part_map, [0, 1, 1, 0]);
        // Hot spots are spread: node 0 makes every access and takes the
        // hottest partition; from then on its load is more than 10 % above
        // node 1's, so the others stay where they are.
        let hot_on_0 = vec![vec![80, 70, 60, 50, 40, 30, 20, 10], vec![0; 8]];
        let mut part_map = vec![1u32; 8];
        assert_eq!(map_partitions(&hot_on_0, &[0, 1], &mut part_map, 1.2), 1);
        assert_eq!(part_map, [0, 1, 1, 1, 1, 1, 1, 1]);
        // Both partitions are accessed most by node 0, but a node takes at
        // most ⌈2 / 2⌉ = 1 of them.
        let mut part_map = vec![1u32; 2];
        map_partitions(&[vec![10, 10], vec![9, 9]], &[0, 1], &mut part_map, 1.0);
        assert_eq!(part_map, [0, 1]);
        // Counts of zero move nothing.
        let mut part_map = vec![1u32, 0];
        assert_eq!(map_partitions(&[vec![0, 0]], &[0], &mut part_map, 1.2), 0);
        assert_eq!(part_map, [1, 0]);
    }

    /// Two nodes whose workers use disjoint key sets: one period maps
    /// most partitions each node uses to it, and the next changes nothing
    /// (the map is stable under the same accesses).
    #[test]
    fn disjoint_working_sets_end_on_their_nodes() {
        let partitions = 64u32;
        let mut access = vec![vec![0u64; partitions as usize]; 2];
        for key in 0u64..64 {
            let node = (key / 32) as usize;
            access[node][partition_of(&key.to_be_bytes(), None, partitions) as usize] += 10;
        }
        let counts = &access;
        let used_by = |node: usize| (0..partitions as usize).filter(move |&p| counts[node][p] > counts[1 - node][p]);
        let mut part_map: Vec<u32> = (0..partitions).map(|partition| partition % 2).collect();
        let on_their_node = |part_map: &[u32]| {
            (0..2).map(|node| used_by(node).filter(|&p| part_map[p] == node as u32).count()).sum::<usize>()
        };
        let used = used_by(0).count() + used_by(1).count();
        let before = on_their_node(&part_map);
        assert!(map_partitions(&access, &[0, 1], &mut part_map, 1.2) > 0);
        let after = on_their_node(&part_map);
        assert!(after > before && after * 5 >= used * 4, "{after} of {used} partitions on their node (from {before})");
        assert_eq!(map_partitions(&access, &[0, 1], &mut part_map, 1.2), 0, "stable");
    }

    /// End to end: counts recorded by workers are remapped by window, and
    /// assignment follows the map and round-robins within the node.
    #[test]
    fn remapping_follows_the_workers_accesses_and_assignment_follows_the_map() {
        let topology = Topology::choose(2, 1, 1, 4).unwrap().unwrap();
        let options = ZenPlusOptions { partitions: 16, ..ZenPlusOptions::default() };
        let soft = SoftPartitions::new(topology, 4, &options, 1);
        let key = 42u64.to_be_bytes();
        let partition = soft.partition_of(&key, None);
        let start = soft.node_of_partition(partition);
        let other = 1 - start;
        // The workers of the other node access the key.
        let worker = soft.topology.workers_of(other).start;
        for _ in 0..100 {
            soft.count_access(worker, &key, None);
        }
        soft.remap();
        assert_eq!(soft.node_of_partition(partition), other);
        assert_eq!(soft.partitions_moved.load(Ordering::Relaxed), 1);
        // The next window has no accesses: the map stays.
        soft.remap();
        assert_eq!(soft.node_of_partition(partition), other);
        let first = soft.assign([(&key[..], None)].into_iter());
        let second = soft.assign([(&key[..], None)].into_iter());
        assert!(soft.topology.workers_of(other).contains(&first));
        assert_ne!(first, second, "round robin within the node");
        // Two pending on the other node, none on this one: the next goes to
        // the least loaded node.
        let third = soft.assign([(&key[..], None)].into_iter());
        assert!(soft.topology.workers_of(start).contains(&third), "{first} {second} {third} start {start}");
        assert_eq!(soft.assigned_by_load.load(Ordering::Relaxed), 1);
        soft.began(first);
        soft.began(second);
        soft.began(third);
        assert!(soft.pending.iter().all(|pending| pending.load(Ordering::Relaxed) == 0));
    }
}
