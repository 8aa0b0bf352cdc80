//! Node reclamation of the ordered index: emptied leaves are unlinked and
//! their memory reused, so queue-like workloads (insert at the tail, remove
//! at the head, forever) run in bounded memory, scans from the head stay
//! short, and leaf versions recorded before an unlink or a reuse never
//! validate again.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use pmtx_engine::internals::index::{LeafRef, OrderedIndex, OrderedIndexConfig, ScanDirection};

fn index(max_key_len: usize, node_capacity: usize) -> OrderedIndex {
    OrderedIndex::with_config(OrderedIndexConfig { max_key_len, node_capacity })
}

/// Queue key `i`: ascending with `i`; `long` keys are 24 bytes with the
/// counter after a shared 8-byte prefix (blobs, separators compared past the
/// first word).
fn qkey(i: u64, long: bool) -> Vec<u8> {
    if long {
        let mut k = b"queue://".to_vec();
        k.extend_from_slice(&i.to_be_bytes());
        k.extend_from_slice(b"-payload");
        k
    } else {
        i.to_be_bytes().to_vec()
    }
}

/// Leaves a scan from the head reports before returning its first entry.
fn head_scan_leaves(index: &OrderedIndex) -> usize {
    let (got, leaves) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1);
    assert!(got.len() <= 1);
    leaves.len()
}

/// Leaves without keys that a quiescent full forward scan reports.
fn empty_leaves_in_full_scan(index: &OrderedIndex) -> usize {
    let counts = std::cell::RefCell::new(Vec::<usize>::new());
    index.scan(
        (Bound::Unbounded, Bound::Unbounded),
        ScanDirection::Forward,
        usize::MAX,
        |_, _| {
            *counts.borrow_mut().last_mut().expect("leaf reported before its entries") += 1;
            true
        },
        |_, _| counts.borrow_mut().push(0),
    );
    let counts = counts.into_inner();
    if counts.len() == 1 {
        return 0; // a lone root leaf may be empty
    }
    counts.iter().filter(|&&c| c == 0).count()
}

/// Generous bound on the nodes a tree of `live` keys needs: leaves at least
/// a quarter full (ascending inserts leave them half full; the head leaf
/// may be nearly empty), inner nodes on top, plus a few free nodes.
fn node_bound(live: usize, cap: usize) -> usize {
    let leaves = live / (cap / 4).max(1) + 2;
    2 * leaves + 16
}

fn queue_soak(cap: usize, long: bool) {
    const WINDOW: u64 = 1000;
    const OPS: u64 = 200_000;
    let index = index(32, cap);
    let bound = node_bound(WINDOW as usize, cap);
    let mut max_nodes = 0;
    for i in 0..OPS {
        index.insert(&qkey(i, long), i).unwrap();
        if i >= WINDOW {
            let head = i - WINDOW;
            assert_eq!(index.remove(&qkey(head, long)), Some(head));
        }
        if i.is_multiple_of(997) {
            max_nodes = max_nodes.max(index.node_count());
            assert!(
                index.node_count() <= bound,
                "cap {cap}: {} nodes for {} keys after {i} operations (bound {bound})",
                index.node_count(),
                index.len()
            );
            assert!(head_scan_leaves(&index) <= 2, "scan from the head walks empty leaves");
        }
    }
    assert_eq!(index.len(), WINDOW as usize);
    index.check_invariants().unwrap();
    assert_eq!(empty_leaves_in_full_scan(&index), 0);
    assert!(index.memory_bytes() >= index.node_count());
    // Draining the queue leaves one (root) leaf and the free lists.
    for i in OPS - WINDOW..OPS {
        assert_eq!(index.remove(&qkey(i, long)), Some(i));
    }
    index.check_invariants().unwrap();
    assert_eq!(index.node_count() - index.free_node_count(), 1, "an empty index is one root leaf");
    assert_eq!(head_scan_leaves(&index), 1);
    assert!(max_nodes > 0);
}

#[test]
fn queue_soak_keeps_node_count_bounded() {
    for cap in [4, 32] {
        queue_soak(cap, false);
    }
}

#[test]
fn queue_soak_with_long_keys_keeps_node_count_bounded() {
    for cap in [5, 32] {
        queue_soak(cap, true);
    }
}

/// One producer appends at the tail while one consumer removes from the
/// head (found by a scan, as a queue consumer would), concurrently.
#[test]
fn concurrent_queue_soak_keeps_node_count_bounded() {
    for (cap, long) in [(4, false), (32, false), (8, true)] {
        const OPS: u64 = 100_000;
        const WINDOW: u64 = 500;
        let index = Arc::new(index(32, cap));
        let produced = Arc::new(AtomicU64::new(0));
        let producer = {
            let (index, produced) = (Arc::clone(&index), Arc::clone(&produced));
            thread::spawn(move || {
                for i in 0..OPS {
                    // Keep the queue about WINDOW long.
                    while index.len() > 2 * WINDOW as usize {
                        thread::yield_now();
                    }
                    index.insert(&qkey(i, long), i).unwrap();
                    produced.store(i + 1, Ordering::Release);
                }
            })
        };
        let bound = node_bound(2 * WINDOW as usize + 64, cap);
        let mut consumed = 0u64;
        while consumed < OPS {
            if produced.load(Ordering::Acquire) < consumed + WINDOW.min(OPS - consumed) {
                thread::yield_now();
                continue;
            }
            let (got, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1);
            let (k, v) = got.into_iter().next().expect("queue not empty");
            assert_eq!(v, consumed, "head of the queue");
            assert_eq!(k, qkey(consumed, long));
            assert!(index.remove_if(&k, v));
            consumed += 1;
            if consumed.is_multiple_of(1000) {
                assert!(index.node_count() <= bound, "cap {cap}: {} nodes (bound {bound})", index.node_count());
            }
        }
        producer.join().unwrap();
        assert!(index.is_empty());
        assert_eq!(empty_leaves_in_full_scan(&index), 0);
        index.check_invariants().unwrap();
        assert!(index.node_count() <= bound);
    }
}

/// The leaf a scan reported (and its version) stops validating once the
/// leaf is unlinked, and stays invalid after its memory is reused as another
/// leaf.
#[test]
fn leaf_ref_fails_validation_after_unlink_and_reuse() {
    let index = index(8, 4);
    for i in 0u64..40 {
        index.insert(&(i * 10).to_be_bytes(), i).unwrap();
    }
    let lo = 150u64.to_be_bytes();
    let hi = 150u64.to_be_bytes();
    let (got, leaves) =
        index.scan_collect((Bound::Included(&lo[..]), Bound::Included(&hi[..])), ScanDirection::Forward, 10);
    assert_eq!(got.len(), 1);
    assert_eq!(leaves.len(), 1);
    let (leaf, v) = leaves[0];
    // The keys sharing the leaf with 150: those whose point scan reports it.
    let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
    let leaf_keys: Vec<Vec<u8>> = all
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| {
            let (_, ls) =
                index.scan_collect((Bound::Included(&k[..]), Bound::Included(&k[..])), ScanDirection::Forward, 1);
            ls[0].0 == leaf
        })
        .collect();
    assert!(leaf_keys.contains(&lo.to_vec()));
    assert!(index.validate_leaf(leaf, v));
    let free_before = index.free_node_count();
    for k in &leaf_keys {
        index.remove(k).unwrap();
    }
    assert!(index.free_node_count() > free_before, "emptied leaf was not unlinked");
    assert!(!index.validate_leaf(leaf, v));
    let after_unlink = index.leaf_version(leaf).unwrap();
    assert!(after_unlink > v);
    index.check_invariants().unwrap();
    // The interval is now covered by a neighbour: a fresh scan of it does
    // not report the unlinked leaf.
    let (_, now) = index.scan_collect((Bound::Included(&lo[..]), Bound::Included(&hi[..])), ScanDirection::Forward, 10);
    assert!(now.iter().all(|&(l, _)| l != leaf));
    // Splits reuse free nodes: insert until the old leaf is back in the tree.
    let mut next = 1000u64;
    let reused = loop {
        index.insert(&next.to_be_bytes(), next).unwrap();
        next += 1;
        let (_, ls) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
        if let Some(&(_, rv)) = ls.iter().find(|&&(l, _)| l == leaf) {
            break rv;
        }
        assert!(next < 2000, "free leaf never reused");
    };
    assert!(reused >= after_unlink, "versions only grow");
    assert_ne!(reused, v);
    assert!(!index.validate_leaf(leaf, v));
    // The phantom interval is still protected by the leaves a new scan
    // reports.
    let (_, fresh) =
        index.scan_collect((Bound::Included(&lo[..]), Bound::Included(&hi[..])), ScanDirection::Forward, 10);
    index.insert(&lo, 1).unwrap();
    assert!(fresh.iter().any(|&(l, fv)| !index.validate_leaf(l, fv)));
    index.check_invariants().unwrap();
}

/// A scan over an interval whose leaf is later unlinked: keys inserted into
/// the interval afterwards go to a neighbour, and the recorded versions
/// still catch them (the unlink bumped the reported leaf).
#[test]
fn phantom_into_interval_of_unlinked_leaf_is_detected() {
    for probe_side in [false, true] {
        let index = index(8, 4);
        for i in 0u64..60 {
            index.insert(&(i * 10).to_be_bytes(), i).unwrap();
        }
        // Record the leaves of a range with a limit, then empty the range.
        let lo = 200u64.to_be_bytes();
        let hi = 260u64.to_be_bytes();
        let (got, leaves) = index.scan_collect(
            (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
            ScanDirection::Forward,
            usize::MAX,
        );
        assert_eq!(got.len(), 7);
        let recorded: Vec<(LeafRef, u64)> = leaves;
        for i in 20u64..=26 {
            index.remove(&(i * 10).to_be_bytes()).unwrap();
        }
        index.check_invariants().unwrap();
        assert!(recorded.iter().any(|&(l, v)| !index.validate_leaf(l, v)));
        // A fresh scan of the now empty interval, then a phantom into it.
        let (got, fresh) =
            index.scan_collect((Bound::Included(&lo[..]), Bound::Included(&hi[..])), ScanDirection::Reverse, 3);
        assert!(got.is_empty());
        assert!(!fresh.is_empty());
        let probe: u64 = if probe_side { 255 } else { 201 };
        index.insert(&probe.to_be_bytes(), 0).unwrap();
        assert!(fresh.iter().any(|&(l, v)| !index.validate_leaf(l, v)), "phantom {probe} undetected");
        index.check_invariants().unwrap();
    }
}

/// Removing everything collapses the tree to a single root leaf; the nodes
/// stay on the free lists and are reused when the tree grows again, so the
/// node count does not grow across fill/drain cycles.
#[test]
fn fill_and_drain_cycles_reuse_nodes() {
    let index = index(40, 6);
    let key = |i: u64| {
        let mut k = vec![7u8; 20];
        k.extend_from_slice(&(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes());
        k
    };
    let mut peak = 0;
    for round in 0..5 {
        for i in 0..3000 {
            index.insert(&key(i), i).unwrap();
        }
        index.check_invariants().unwrap();
        if round == 0 {
            peak = index.node_count();
        } else {
            assert!(
                index.node_count() <= peak + peak / 4,
                "round {round}: {} nodes, first peak {peak}",
                index.node_count()
            );
        }
        for i in (0..3000).rev() {
            assert!(index.remove_if(&key(i), i));
        }
        index.check_invariants().unwrap();
        assert!(index.is_empty());
        assert_eq!(index.node_count() - index.free_node_count(), 1);
    }
}

/// `remove_if` removes only on a matching value and leaves the leaf version
/// alone otherwise.
#[test]
fn remove_if_checks_the_value() {
    let index = index(8, 8);
    index.insert(b"a", 1).unwrap();
    index.insert(b"b", 2).unwrap();
    let (_, leaves) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 10);
    assert!(!index.remove_if(b"a", 2));
    assert!(!index.remove_if(b"zz", 2));
    assert!(!index.remove_if(b"this key is too long", 2));
    assert!(leaves.iter().all(|&(l, v)| index.validate_leaf(l, v)));
    assert_eq!(index.get(b"a"), Some(1));
    assert!(index.remove_if(b"a", 1));
    assert!(leaves.iter().any(|&(l, v)| !index.validate_leaf(l, v)));
    assert_eq!(index.get(b"a"), None);
    assert!(!index.remove_if(b"a", 1));
    assert_eq!(index.len(), 1);
}

/// Scanners, inserters and removers share a key space in which removers
/// empty whole runs of keys (so leaves are unlinked and reused while scans
/// pass through); scans must stay sorted, in range, duplicate-free and
/// consistent, and stable keys must never be missed.
#[test]
fn scans_stay_consistent_while_leaves_are_unlinked_and_reused() {
    for (cap, long) in [(4, false), (6, true), (32, false)] {
        let index = Arc::new(index(32, cap));
        let key = move |i: u64| {
            if long {
                let mut k = vec![b'k'; 12];
                k.extend_from_slice(&i.to_be_bytes());
                k
            } else {
                i.to_be_bytes().to_vec()
            }
        };
        const SPACE: u64 = 4000;
        // Every 50th key is stable: present throughout.
        let stable = |i: u64| i.is_multiple_of(50);
        for i in (0..SPACE).filter(|&i| stable(i)) {
            index.insert(&key(i), i).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
                thread::spawn(move || {
                    // Fill a run of keys, then empty it again, moving on
                    // through this writer's half of the key space.
                    let half = t * SPACE / 2..(t + 1) * SPACE / 2;
                    let mut base = half.start;
                    let mut rounds = 0;
                    while !stop.load(Ordering::Relaxed) || rounds < 20 {
                        let run = base..(base + 150).min(half.end);
                        for i in run.clone().filter(|&i| !stable(i)) {
                            index.insert(&key(i), i).unwrap();
                        }
                        for i in run.clone().filter(|&i| !stable(i)) {
                            assert_eq!(index.remove(&key(i)), Some(i));
                        }
                        base = if run.end >= half.end { half.start } else { run.end };
                        rounds += 1;
                    }
                })
            })
            .collect();
        thread::scope(|s| {
            for t in 0..2u64 {
                let index = &index;
                s.spawn(move || {
                    let mut x = 12345u64 + t;
                    for _ in 0..400 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let a = (x >> 33) % SPACE;
                        let b = (a + (x >> 20) % 800).min(SPACE);
                        let forward = x & 1 == 0;
                        let dir = if forward { ScanDirection::Forward } else { ScanDirection::Reverse };
                        let (lo, hi) = (key(a), key(b));
                        let (got, leaves) =
                            index.scan_collect((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])), dir, usize::MAX);
                        if a < b {
                            assert!(!leaves.is_empty());
                        }
                        for w in got.windows(2) {
                            assert!(
                                if forward { w[0].0 < w[1].0 } else { w[0].0 > w[1].0 },
                                "out of order / duplicate"
                            );
                        }
                        for (k, v) in &got {
                            assert!(k >= &lo && k < &hi, "out of range");
                            assert_eq!(k, &key(*v), "value does not belong to key");
                        }
                        let seen: Vec<u64> = got.iter().map(|e| e.1).filter(|&v| stable(v)).collect();
                        let mut want: Vec<u64> = (a..b).filter(|&i| stable(i)).collect();
                        if !forward {
                            want.reverse();
                        }
                        assert_eq!(seen, want, "stable keys missed");
                    }
                });
            }
        });
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        index.check_invariants().unwrap();
        assert_eq!(index.len(), (0..SPACE).filter(|&i| stable(i)).count());
        // Unlinks that lost a race left empty leaves behind; a full scan
        // meets (and unlinks) every one of them.
        let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
        assert_eq!(all.len(), index.len());
        index.check_invariants().unwrap();
        assert_eq!(empty_leaves_in_full_scan(&index), 0, "cap {cap}: empty leaves left in the tree");
        // Without merges, each surviving key may keep a chain of sparse
        // ancestors, but no more.
        let live = index.node_count() - index.free_node_count();
        assert!(live <= 8 * index.len() + 16, "cap {cap}: {live} live nodes for {} keys", index.len());
    }
}

/// The keys of `index`, grouped by the leaf holding them, in key order
/// (quiescent).
fn keys_by_leaf(index: &OrderedIndex) -> Vec<(LeafRef, Vec<Vec<u8>>)> {
    let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
    let mut groups: Vec<(LeafRef, Vec<Vec<u8>>)> = Vec::new();
    for (k, _) in all {
        let (_, ls) = index.scan_collect((Bound::Included(&k[..]), Bound::Included(&k[..])), ScanDirection::Forward, 1);
        match groups.last_mut() {
            Some((l, ks)) if *l == ls[0].0 => ks.push(k),
            _ => groups.push((ls[0].0, vec![k])),
        }
    }
    groups
}

/// An empty leaf left behind by an unlink that lost its race is reported by
/// scans like any leaf; when a later operation unlinks it, the version the
/// scan recorded must stop validating, or an insert into its former range
/// (now a neighbour's) would go unnoticed.
#[test]
fn late_unlink_of_a_reported_empty_leaf_is_detected() {
    let index = index(8, 4);
    for i in 0u64..60 {
        index.insert(&(i * 10).to_be_bytes(), i).unwrap();
    }
    let groups = keys_by_leaf(&index);
    let (_, victim) = &groups[groups.len() / 2];
    let first = u64::from_be_bytes(victim[0].clone().try_into().unwrap());
    let last = u64::from_be_bytes(victim.last().unwrap().clone().try_into().unwrap());
    index.set_unlinking(false);
    for k in victim {
        index.remove(k).unwrap();
    }
    index.check_invariants().unwrap();
    let (lo, hi) = ((first + 1).to_be_bytes(), (last.max(first + 2) - 1).to_be_bytes());
    let range = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
    let (got, leaves) = index.scan_collect(range, ScanDirection::Forward, 10);
    assert!(got.is_empty());
    assert_eq!(leaves.len(), 1, "the empty leaf alone covers the range");
    // Other operations pass over the empty leaf correctly.
    assert_eq!(index.get(&lo), None);
    assert_eq!(index.remove(&lo), None);
    assert_eq!(empty_leaves_in_full_scan(&index), 1);
    // The next operation that meets it unlinks it.
    index.set_unlinking(true);
    let free_before = index.free_node_count();
    assert_eq!(index.remove(&lo), None);
    assert!(index.free_node_count() > free_before, "empty leaf not unlinked by a later remove");
    assert_eq!(empty_leaves_in_full_scan(&index), 0);
    index.check_invariants().unwrap();
    assert!(leaves.iter().any(|&(l, v)| !index.validate_leaf(l, v)), "unlink did not change the reported leaf");
    index.insert(&lo, 1).unwrap();
    assert!(leaves.iter().any(|&(l, v)| !index.validate_leaf(l, v)));
    index.check_invariants().unwrap();
}

/// Scans meeting leftover empty leaves unlink them before reporting, so a
/// scan after a burst of lost races reports only leaves with keys.
#[test]
fn scans_unlink_leftover_empty_leaves() {
    let index = index(8, 4);
    for i in 0u64..200 {
        index.insert(&i.to_be_bytes(), i).unwrap();
    }
    index.set_unlinking(false);
    for i in 20u64..180 {
        index.remove(&i.to_be_bytes()).unwrap();
    }
    assert!(empty_leaves_in_full_scan(&index) > 10);
    index.check_invariants().unwrap();
    index.set_unlinking(true);
    let nodes = index.node_count() - index.free_node_count();
    assert_eq!(empty_leaves_in_full_scan(&index), 0);
    assert!(index.node_count() - index.free_node_count() < nodes);
    index.check_invariants().unwrap();
    let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Reverse, usize::MAX);
    let want: Vec<u64> = (0..20).chain(180..200).rev().collect();
    assert_eq!(all.iter().map(|e| e.1).collect::<Vec<_>>(), want);
}

/// A scan's callbacks may change the index.  Emptying the next leaf from a
/// callback unlinks it and widens the current leaf's range, so the scan's
/// next descent lands in the leaf it just read: it must not deliver that
/// leaf's keys twice (forward and reverse).
#[test]
fn scan_does_not_repeat_keys_when_a_callback_widens_the_current_leaf() {
    for forward in [true, false] {
        let index = index(8, 4);
        for i in 0u64..40 {
            index.insert(&i.to_be_bytes(), i).unwrap();
        }
        let groups = keys_by_leaf(&index);
        // Forward: read leaf 0, empty leaf 1 (its right sibling, whose range
        // goes to leaf 0).  Reverse: read leaf 1, empty leaf 0 (its left
        // sibling, the first child, whose range goes to leaf 1).
        let (read, doomed) = if forward { (0, 1) } else { (1, 0) };
        let doomed_keys = groups[doomed].1.clone();
        let end_of_read = groups[read].1.last().unwrap().clone();
        let mut emptied = false;
        let mut got = Vec::new();
        let range = if forward {
            (Bound::Unbounded, Bound::Unbounded)
        } else {
            (Bound::Unbounded, Bound::Included(&end_of_read[..]))
        };
        let dir = if forward { ScanDirection::Forward } else { ScanDirection::Reverse };
        let mut first_leaf = true;
        index.scan(
            range,
            dir,
            usize::MAX,
            |k, _| {
                got.push(k.to_vec());
                true
            },
            |_, _| {
                if first_leaf {
                    first_leaf = false;
                    for k in &doomed_keys {
                        index.remove(k).unwrap();
                    }
                    emptied = true;
                }
            },
        );
        assert!(emptied);
        let mut want: Vec<Vec<u8>> = if forward {
            (0u64..40).map(|i| i.to_be_bytes().to_vec()).filter(|k| !doomed_keys.contains(k)).collect()
        } else {
            groups[read].1.iter().rev().cloned().collect()
        };
        if !forward {
            want.retain(|k| !doomed_keys.contains(k));
        }
        assert_eq!(got, want, "forward = {forward}");
        index.check_invariants().unwrap();
    }
}
