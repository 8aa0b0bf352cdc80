//! Multi-threaded stress tests of the concurrent indexes with invariant
//! checks.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use pmtx_engine::internals::index::{OrderedIndex, OrderedIndexConfig, ScanDirection};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const THREADS: usize = 4;

/// Key of thread `t`, item `i`: big-endian so byte order = numeric order,
/// interleaving the threads' keys across the key space.  The variable-length
/// suffix exercises keys of different lengths.
fn key(t: usize, i: u32) -> Vec<u8> {
    let mut k = (i as u64 * THREADS as u64 + t as u64).to_be_bytes().to_vec();
    k.extend(std::iter::repeat_n(b'x', (i % 5) as usize));
    k
}

/// Value encodes the key so readers can check key/value consistency.
fn value(t: usize, i: u32) -> u64 {
    ((t as u64) << 32) | i as u64
}

fn decode(v: u64) -> (usize, u32) {
    ((v >> 32) as usize, v as u32)
}

fn check_scan(index: &OrderedIndex, rng: &mut ChaCha8Rng, range_keys: u32) -> Result<usize, String> {
    let a = rng.gen_range(0..range_keys);
    let b = rng.gen_range(a..=range_keys);
    let lo = key(rng.gen_range(0..THREADS), a);
    let hi = key(rng.gen_range(0..THREADS), b);
    let forward = rng.gen_bool(0.5);
    let limit = rng.gen_range(1..200);
    let dir = if forward { ScanDirection::Forward } else { ScanDirection::Reverse };
    let (got, leaves) = index.scan_collect((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])), dir, limit);
    if lo < hi && leaves.is_empty() {
        return Err("scan reported no leaf".into());
    }
    if got.len() > limit {
        return Err(format!("limit {limit} exceeded: {}", got.len()));
    }
    for (k, v) in &got {
        if k.as_slice() < lo.as_slice() || k.as_slice() >= hi.as_slice() {
            return Err(format!("key {k:?} outside [{lo:?}, {hi:?})"));
        }
        let (t, i) = decode(*v);
        if &key(t, i) != k {
            return Err(format!("value {v:#x} does not belong to key {k:?}"));
        }
    }
    for w in got.windows(2) {
        let ok = if forward { w[0].0 < w[1].0 } else { w[0].0 > w[1].0 };
        if !ok {
            return Err(format!("scan out of order: {:?} then {:?}", w[0].0, w[1].0));
        }
    }
    Ok(got.len())
}

/// Each thread inserts and removes its own keys while scanning the whole
/// index; checks read-your-own-writes, scan order / bounds, key-value
/// consistency, and the final contents.
#[test]
fn ordered_concurrent_insert_remove_scan() {
    for cap in [4, 32] {
        let index = Arc::new(OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 16, node_capacity: cap }));
        const N: u32 = 3000;
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let index = Arc::clone(&index);
                let barrier = Arc::clone(&barrier);
                thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(t as u64 * 7 + cap as u64);
                    let mut mine: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
                    barrier.wait();
                    for step in 0..N * 2 {
                        let i = rng.gen_range(0..N);
                        let k = key(t, i);
                        match rng.gen_range(0..10) {
                            0..=4 => {
                                let old = index.insert(&k, value(t, i)).unwrap();
                                assert_eq!(old, mine.insert(k.clone(), value(t, i)));
                                assert_eq!(index.get(&k), Some(value(t, i)));
                            }
                            5 => {
                                let (v, ins) = index.get_or_insert_with(&k, || value(t, i)).unwrap();
                                assert_eq!(v, value(t, i));
                                assert_eq!(ins, !mine.contains_key(&k));
                                mine.insert(k, v);
                            }
                            6..=7 => {
                                assert_eq!(index.remove(&k), mine.remove(&k));
                                assert_eq!(index.get(&k), None);
                            }
                            _ => {
                                assert_eq!(index.get(&k), mine.get(&k).copied());
                            }
                        }
                        if step % 64 == 0 {
                            check_scan(&index, &mut rng, N).unwrap();
                        }
                    }
                    // All my keys are present with my values.
                    for (k, v) in &mine {
                        assert_eq!(index.get(k), Some(*v));
                    }
                    mine
                })
            })
            .collect();
        let mut union = BTreeMap::new();
        for h in handles {
            union.extend(h.join().unwrap());
        }
        index.check_invariants().unwrap();
        assert_eq!(index.len(), union.len());
        let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
        assert_eq!(all, union.into_iter().collect::<Vec<_>>());
    }
}

/// Each thread owns a block of the key space and repeatedly fills a run of
/// it and empties it again, so leaves are unlinked and their nodes reused by
/// other threads' splits all the time.  A thread's scans of its own block
/// must return exactly its own model (nobody else writes there), whatever
/// happens to the neighbouring blocks; keys are long (blob keys and
/// separators, retired through the epoch) or short.
#[test]
fn ordered_runs_unlink_and_reuse_nodes() {
    for (cap, long) in [(4, true), (5, false), (32, true)] {
        let index = Arc::new(OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 40, node_capacity: cap }));
        const BLOCK: u64 = 2000;
        // Key number `n` (thread `n / BLOCK`); its value is `n`.
        let key = move |n: u64| {
            let mut k = if long { b"stress/runs/".to_vec() } else { Vec::new() };
            k.extend_from_slice(&n.to_be_bytes());
            if long && n.is_multiple_of(3) {
                k.extend_from_slice(b"/with-a-longer-tail");
            }
            k
        };
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (index, barrier) = (Arc::clone(&index), Arc::clone(&barrier));
                thread::spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(31 * t as u64 + cap as u64);
                    let mut mine: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
                    let base = t as u64 * BLOCK;
                    let (lo, hi) = (key(base), key(base + BLOCK));
                    barrier.wait();
                    for round in 0..60 {
                        let start = rng.gen_range(0..BLOCK - 100);
                        let len = rng.gen_range(1..100);
                        for i in base + start..base + start + len {
                            let k = key(i);
                            if rng.gen_bool(0.5) {
                                let old = index.insert(&k, i).unwrap();
                                assert_eq!(old, mine.insert(k, i));
                            } else {
                                let (v, ins) = index.get_or_insert_with(&k, || i).unwrap();
                                assert_eq!((v, ins), (i, !mine.contains_key(&k)));
                                mine.insert(k, i);
                            }
                        }
                        // Empty a run (often all of what is there).
                        let start = rng.gen_range(0..BLOCK - 300);
                        for i in base + start..base + start + 300 {
                            let k = key(i);
                            if round % 2 == 0 {
                                assert_eq!(index.remove(&k), mine.remove(&k));
                            } else if let Some(v) = mine.remove(&k) {
                                assert!(!index.remove_if(&k, v + 1));
                                assert!(index.remove_if(&k, v));
                            }
                        }
                        let dir = if round % 3 == 0 { ScanDirection::Reverse } else { ScanDirection::Forward };
                        let (got, leaves) =
                            index.scan_collect((Bound::Included(&lo[..]), Bound::Excluded(&hi[..])), dir, usize::MAX);
                        assert!(!leaves.is_empty());
                        let mut want: Vec<_> = mine.iter().map(|(k, v)| (k.clone(), *v)).collect();
                        if dir == ScanDirection::Reverse {
                            want.reverse();
                        }
                        assert_eq!(got, want, "scan of my own block differs from my model");
                        // A scan across everybody's blocks: ordered, in
                        // range, values belonging to their keys.
                        let a = rng.gen_range(0..BLOCK * THREADS as u64);
                        let b = a + rng.gen_range(0..BLOCK);
                        let (got, leaves) = index.scan_collect(
                            (Bound::Included(&key(a)[..]), Bound::Excluded(&key(b)[..])),
                            ScanDirection::Forward,
                            rng.gen_range(1..500),
                        );
                        assert!(a == b || !leaves.is_empty());
                        for (k, v) in &got {
                            assert!(*v >= a && *v < b && k == &key(*v), "bad entry {k:?} -> {v}");
                        }
                        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "cross-block scan out of order");
                    }
                    mine
                })
            })
            .collect();
        let mut union = BTreeMap::new();
        for h in handles {
            union.extend(h.join().unwrap());
        }
        index.check_invariants().unwrap();
        assert_eq!(index.len(), union.len());
        let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
        assert_eq!(all, union.into_iter().collect::<Vec<_>>());
    }
}

/// Many threads race get-or-insert on the same keys: exactly one insert wins
/// per key and everybody observes the winner's value.
#[test]
fn ordered_get_or_insert_race() {
    let index = Arc::new(OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 8 }));
    const KEYS: u64 = 2000;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let index = Arc::clone(&index);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                let mut won = Vec::new();
                let mut seen = Vec::new();
                // Threads walk the keys in different orders.
                for j in 0..KEYS {
                    let k = if t % 2 == 0 { j } else { KEYS - 1 - j };
                    let (v, ins) = index.get_or_insert_with(&k.to_be_bytes(), || (t as u64) << 32 | k).unwrap();
                    assert_eq!(v & 0xffff_ffff, k);
                    if ins {
                        won.push(k);
                    }
                    seen.push((k, v));
                }
                (won, seen)
            })
        })
        .collect();
    let mut winners = HashSet::new();
    let mut seen_all = Vec::new();
    for h in handles {
        let (won, seen) = h.join().unwrap();
        for k in won {
            assert!(winners.insert(k), "key {k} inserted twice");
        }
        seen_all.extend(seen);
    }
    assert_eq!(winners.len() as u64, KEYS);
    for (k, v) in seen_all {
        assert_eq!(index.get(&k.to_be_bytes()), Some(v), "threads disagree on key {k}");
    }
    index.check_invariants().unwrap();
}

/// A scan's recorded leaf versions are invalidated by a later insert into the
/// scanned range from another thread.
#[test]
fn leaf_versions_detect_concurrent_phantom_insert() {
    let index = Arc::new(OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 8 }));
    for i in 0u64..1000 {
        index.insert(&(i * 2).to_be_bytes(), i).unwrap();
    }
    for probe in [0u64, 1, 501, 999, 1999, 2001] {
        let lo = 400u64.to_be_bytes();
        let hi = 700u64.to_be_bytes();
        let (got, leaves) = index.scan_collect(
            (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
            ScanDirection::Forward,
            usize::MAX,
        );
        assert_eq!(got.len(), 151);
        assert!(leaves.iter().all(|&(l, v)| index.validate_leaf(l, v)));
        let inserter = Arc::clone(&index);
        let inside = (400..=700).contains(&probe);
        thread::spawn(move || {
            inserter.insert(&probe.to_be_bytes(), 0).unwrap();
        })
        .join()
        .unwrap();
        let invalid = leaves.iter().any(|&(l, v)| !index.validate_leaf(l, v));
        if inside {
            assert!(invalid, "phantom {probe} not detected");
        }
        index.remove(&probe.to_be_bytes());
    }
}

/// Readers keep scanning and validating while writers insert and delete
/// continuously: a reader re-scanning a range whose leaf versions still
/// validate must see exactly the same entries (versions are a sound change
/// detector under concurrency).
#[test]
fn validated_rescans_are_stable() {
    let index = Arc::new(OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 6 }));
    for i in 0u64..2000 {
        index.insert(&(i * 3).to_be_bytes(), i).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|t| {
            let index = Arc::clone(&index);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(100 + t);
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.gen_range(0u64..6000).to_be_bytes();
                    if rng.gen_bool(0.5) {
                        index.insert(&k, 1).unwrap();
                    } else {
                        index.remove(&k);
                    }
                }
            })
        })
        .collect();
    let stable_checks = AtomicU64::new(0);
    thread::scope(|s| {
        for t in 0..2u64 {
            let index = &index;
            let stable_checks = &stable_checks;
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(200 + t);
                for _ in 0..3000 {
                    let a = rng.gen_range(0u64..6000);
                    let b = a + rng.gen_range(0u64..40);
                    let dir = if rng.gen_bool(0.5) { ScanDirection::Forward } else { ScanDirection::Reverse };
                    let limit = rng.gen_range(1..20);
                    let range = (Bound::Included(&a.to_be_bytes()[..]), Bound::Excluded(&b.to_be_bytes()[..]));
                    let (got1, leaves1) = index.scan_collect(range, dir, limit);
                    let (got2, _) = index.scan_collect(range, dir, limit);
                    if leaves1.iter().all(|&(l, v)| index.validate_leaf(l, v)) {
                        // No insert/delete/split happened in the examined
                        // leaves since the first scan, so the second scan
                        // (taken in between) must have seen the same keys.
                        let k1: Vec<_> = got1.iter().map(|e| &e.0).collect();
                        let k2: Vec<_> = got2.iter().map(|e| &e.0).collect();
                        assert_eq!(k1, k2, "validated leaves but different keys");
                        stable_checks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    index.check_invariants().unwrap();
    assert!(stable_checks.load(Ordering::Relaxed) > 0);
}

/// Readers verify key bytes of entries while other threads remove and
/// re-insert them, exercising epoch-deferred reclamation of key blobs.
#[test]
fn key_blobs_survive_concurrent_removal() {
    let index = Arc::new(OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 64, node_capacity: 8 }));
    let long_key = |i: u64| {
        let mut k = i.to_be_bytes().to_vec();
        k.extend(std::iter::repeat_n((i % 251) as u8, 40));
        k
    };
    for i in 0..500 {
        index.insert(&long_key(i), i).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let index = Arc::clone(&index);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            while !stop.load(Ordering::Relaxed) {
                let i = rng.gen_range(0..500);
                if index.remove(&long_key(i)).is_none() {
                    index.insert(&long_key(i), i).unwrap();
                }
            }
        })
    };
    thread::scope(|s| {
        for t in 0..2 {
            let index = &index;
            s.spawn(move || {
                let dir = if t == 0 { ScanDirection::Forward } else { ScanDirection::Reverse };
                for _ in 0..300 {
                    index.scan(
                        (Bound::Unbounded, Bound::Unbounded),
                        dir,
                        usize::MAX,
                        |k, v| {
                            assert_eq!(k, long_key(v).as_slice());
                            true
                        },
                        |_, _| {},
                    );
                }
            });
        }
    });
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    index.check_invariants().unwrap();
}
