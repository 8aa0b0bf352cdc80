//! Randomized interleaving tests (shuttle) of the optimistic version lock and
//! of the real B+tree lock-coupling / split / scan protocol.
//!
//! The index is generic over its atomic word type; here it is instantiated
//! with shuttle's atomics so that every atomic access of the protocol is a
//! scheduling point that shuttle's randomized (and PCT) schedulers can
//! preempt.  Tiny nodes (capacity 4) make splits — including root and inner
//! splits — happen within a handful of inserts.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmtx_engine::internals::index::{AtomicWord, Finger, OrderedIndex, OrderedIndexConfig, ScanDirection, VersionLock};
use shuttle::sync::atomic::AtomicU64 as ShuttleAtomicU64;
use shuttle::thread;

/// `AtomicWord` backed by shuttle's atomics (which model every access as
/// `SeqCst`; we pass `SeqCst` explicitly to keep shuttle from warning).
struct ShuttleWord(ShuttleAtomicU64);

impl AtomicWord for ShuttleWord {
    fn new(v: u64) -> Self {
        Self(ShuttleAtomicU64::new(v))
    }
    fn load(&self, _order: Ordering) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn store(&self, v: u64, _order: Ordering) {
        self.0.store(v, Ordering::SeqCst)
    }
    fn compare_exchange(&self, current: u64, new: u64, _success: Ordering, _failure: Ordering) -> Result<u64, u64> {
        self.0.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
    }
    fn fetch_add(&self, v: u64, _order: Ordering) -> u64 {
        self.0.fetch_add(v, Ordering::SeqCst)
    }
    fn pause() {
        thread::yield_now();
    }
}

type Tree = OrderedIndex<ShuttleWord>;

fn tree() -> Tree {
    Tree::with_config_in(OrderedIndexConfig { max_key_len: 8, node_capacity: 4 })
}

fn k(i: u8) -> [u8; 1] {
    [i]
}

fn all_keys(t: &Tree) -> Vec<u8> {
    let (got, _) = t.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
    got.into_iter().map(|(k, _)| k[0]).collect()
}

const RANDOM_ITERS: usize = 3000;
const PCT_ITERS: usize = 2000;

/// Writers increment two words under the lock; optimistic readers that
/// validate must never observe them differing; upgrades are exclusive.
fn version_lock_body() {
    let lock = Arc::new(VersionLock::<ShuttleWord>::new());
    let data = Arc::new([ShuttleWord::new(0), ShuttleWord::new(0)]);
    let mut hs = Vec::new();
    for w in 0..2 {
        let (lock, data) = (Arc::clone(&lock), Arc::clone(&data));
        hs.push(thread::spawn(move || {
            for _ in 0..2 {
                if w == 0 {
                    lock.write_lock().unwrap();
                } else {
                    // Optimistic read, then upgrade (retry on failure).
                    loop {
                        match lock.read_lock() {
                            Ok(v) if lock.upgrade(v).is_ok() => break,
                            _ => ShuttleWord::pause(),
                        }
                    }
                }
                let a = data[0].load(Ordering::Acquire);
                data[0].store(a + 1, Ordering::Release);
                let b = data[1].load(Ordering::Acquire);
                data[1].store(b + 1, Ordering::Release);
                lock.write_unlock();
            }
        }));
    }
    {
        let (lock, data) = (Arc::clone(&lock), Arc::clone(&data));
        hs.push(thread::spawn(move || {
            for _ in 0..3 {
                if let Ok(v) = lock.read_lock() {
                    let a = data[0].load(Ordering::Acquire);
                    let b = data[1].load(Ordering::Acquire);
                    if lock.validate(v) {
                        assert_eq!(a, b, "validated read saw a torn update");
                    }
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(data[0].load(Ordering::Acquire), 4);
    assert_eq!(data[1].load(Ordering::Acquire), 4);
    assert!(lock.read_lock().is_ok());
}

#[test]
fn shuttle_version_lock_random() {
    shuttle::check_random(version_lock_body, RANDOM_ITERS);
}

#[test]
fn shuttle_version_lock_pct() {
    shuttle::check_pct(version_lock_body, PCT_ITERS, 3);
}

/// Concurrent inserts forcing leaf, inner and root splits, racing
/// get-or-insert on a shared key, a remover, and a reader whose scans and
/// gets must always see the stable keys, in order.
fn concurrent_split_body() {
    let t = Arc::new(tree());
    // Stable keys: present throughout; 3 keys fill most of a 4-slot leaf.
    let stable = [10u8, 20, 30];
    for &s in &stable {
        t.insert(&k(s), s as u64).unwrap();
    }
    t.insert(&k(26), 26).unwrap();
    let mut hs = Vec::new();
    for w in 0..2u8 {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            // Interleaved (odd) key sets so both writers hit the same leaves.
            for j in 0..4u8 {
                let key = 11 + j * 4 + w * 2;
                assert_eq!(t.insert(&k(key), key as u64).unwrap(), None);
                assert_eq!(t.get(&k(key)), Some(key as u64));
            }
            let (v, _) = t.get_or_insert_with(&k(99), || 100 + w as u64).unwrap();
            assert!(v == 100 || v == 101);
        }));
    }
    {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            assert_eq!(t.remove(&k(26)), Some(26));
            assert_eq!(t.remove(&k(26)), None);
        }));
    }
    {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            for dir in [ScanDirection::Forward, ScanDirection::Reverse] {
                let (got, leaves) =
                    t.scan_collect((Bound::Included(&k(5)[..]), Bound::Excluded(&k(35)[..])), dir, usize::MAX);
                assert!(!leaves.is_empty());
                let keys: Vec<u8> = got.iter().map(|(k, _)| k[0]).collect();
                let mut sorted = keys.clone();
                sorted.sort_unstable();
                if dir == ScanDirection::Reverse {
                    sorted.reverse();
                }
                assert_eq!(keys, sorted, "scan out of order");
                let mut dedup = keys.clone();
                dedup.dedup();
                assert_eq!(dedup.len(), keys.len(), "duplicate key in scan");
                for s in stable {
                    assert!(keys.contains(&s), "stable key {s} missing from {keys:?}");
                }
                for (key, v) in &got {
                    assert_eq!(*v, key[0] as u64);
                }
            }
            for s in stable {
                assert_eq!(t.get(&k(s)), Some(s as u64));
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    t.check_invariants().unwrap();
    let mut want: BTreeSet<u8> = stable.into_iter().collect();
    for w in 0..2u8 {
        for j in 0..4u8 {
            want.insert(11 + j * 4 + w * 2);
        }
    }
    want.insert(99);
    assert_eq!(all_keys(&t), want.into_iter().collect::<Vec<_>>());
}

/// Two writers insert ascending keys through their own fingers, one key
/// apart, into the same 4-slot leaves, so each one's finger is made stale
/// by the other's inserts and splits at every interleaving; a third thread
/// reads. Every key must end up present exactly once, each writer must see
/// its own keys, and the tree must stay well formed.
fn fingered_inserts_body() {
    let t = Arc::new(tree());
    let mut hs = Vec::new();
    for w in 0..2u8 {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            let mut finger = Finger::default();
            for j in 0..6u8 {
                let key = 10 + j * 2 + w;
                let r = t.get_or_insert_near(&k(key), || key as u64, Some(&mut finger)).unwrap();
                assert!(r.inserted, "key {key} inserted once");
                let again = t.get_or_insert_near(&k(key), || 0, Some(&mut finger)).unwrap();
                assert_eq!((again.value, again.inserted), (key as u64, false));
            }
        }));
    }
    {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            let keys = all_keys(&t);
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(keys, sorted, "scan out of order or duplicated");
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    t.check_invariants().unwrap();
    assert_eq!(all_keys(&t), (10u8..22).collect::<Vec<_>>());
}

#[test]
fn shuttle_fingered_inserts_random() {
    shuttle::check_random(fingered_inserts_body, RANDOM_ITERS);
}

#[test]
fn shuttle_fingered_inserts_pct() {
    shuttle::check_pct(fingered_inserts_body, PCT_ITERS, 3);
}

#[test]
fn shuttle_concurrent_splits_random() {
    shuttle::check_random(concurrent_split_body, RANDOM_ITERS);
}

#[test]
fn shuttle_concurrent_splits_pct() {
    shuttle::check_pct(concurrent_split_body, PCT_ITERS, 3);
}

/// Phantom protocol: a scan racing with an insert into its range either
/// returns the new key, or one of the leaf versions it reported no longer
/// validates afterwards.  Also for an empty range, and with inserts elsewhere
/// causing splits concurrently.
fn phantom_body() {
    let t = Arc::new(tree());
    for i in [2u8, 4, 6, 8, 40, 42, 44, 46, 48] {
        t.insert(&k(i), i as u64).unwrap();
    }
    let scanner = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            let full = t.scan_collect(
                (Bound::Included(&k(3)[..]), Bound::Included(&k(9)[..])),
                ScanDirection::Reverse,
                usize::MAX,
            );
            let empty =
                t.scan_collect((Bound::Excluded(&k(20)[..]), Bound::Excluded(&k(30)[..])), ScanDirection::Forward, 10);
            (full, empty)
        })
    };
    let inserter = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            t.insert(&k(5), 5).unwrap();
            t.insert(&k(25), 25).unwrap();
        })
    };
    let other = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            for i in [41u8, 43, 45] {
                t.insert(&k(i), i as u64).unwrap();
            }
        })
    };
    let ((full, empty), ()) = (scanner.join().unwrap(), inserter.join().unwrap());
    other.join().unwrap();
    let changed =
        |leaves: &[(pmtx_engine::internals::index::LeafRef, u64)]| leaves.iter().any(|&(l, v)| !t.validate_leaf(l, v));
    let (got, leaves) = full;
    if !got.iter().any(|(key, _)| key[..] == k(5)) {
        assert!(changed(&leaves), "phantom 5 undetected: {got:?}");
    }
    let (got, leaves) = empty;
    assert!(!leaves.is_empty());
    if !got.iter().any(|(key, _)| key[..] == k(25)) {
        assert!(changed(&leaves), "phantom 25 undetected in empty range");
    }
    t.check_invariants().unwrap();
}

#[test]
fn shuttle_scan_phantoms_random() {
    shuttle::check_random(phantom_body, RANDOM_ITERS);
}

#[test]
fn shuttle_scan_phantoms_pct() {
    shuttle::check_pct(phantom_body, PCT_ITERS, 3);
}

/// Remove-driven unlinking racing with splits that reuse the unlinked nodes,
/// point reads and scans.  A remover empties a run of leaves (unlinking them,
/// and collapsing keyless ancestors), an inserter grows another part of the
/// tree (splits take nodes from the free lists) and puts a key back into the
/// emptied run, and a reader checks that stable keys are always found and
/// scans stay ordered.  Afterwards, a scan whose reported leaves all still
/// validate must equal a fresh scan (leaf versions catch every change,
/// across unlink and reuse).
fn unlink_body() {
    let t = Arc::new(tree());
    let stable = [2u8, 60];
    let doomed = [20u8, 22, 24, 26, 28, 30, 32, 34];
    for &s in &stable {
        t.insert(&k(s), s as u64).unwrap();
    }
    for &d in &doomed {
        t.insert(&k(d), d as u64).unwrap();
    }
    let mut hs = Vec::new();
    {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            for d in doomed {
                assert_eq!(t.remove(&k(d)), Some(d as u64));
            }
        }));
    }
    {
        let t = Arc::clone(&t);
        hs.push(thread::spawn(move || {
            for i in [41u8, 43, 45, 47, 49] {
                t.insert(&k(i), i as u64).unwrap();
            }
            assert!(t.get_or_insert_with(&k(25), || 25).unwrap().1);
        }));
    }
    let reader = {
        let t = Arc::clone(&t);
        thread::spawn(move || {
            for s in stable {
                assert_eq!(t.get(&k(s)), Some(s as u64));
            }
            let mut scans = Vec::new();
            for dir in [ScanDirection::Forward, ScanDirection::Reverse] {
                let (got, leaves) =
                    t.scan_collect((Bound::Included(&k(1)[..]), Bound::Excluded(&k(61)[..])), dir, usize::MAX);
                let keys: Vec<u8> = got.iter().map(|(k, _)| k[0]).collect();
                let mut sorted = keys.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if dir == ScanDirection::Reverse {
                    sorted.reverse();
                }
                assert_eq!(keys, sorted, "scan out of order or duplicated");
                for s in stable {
                    assert!(keys.contains(&s), "stable key {s} missing from {keys:?}");
                }
                for (key, v) in &got {
                    assert_eq!(*v, key[0] as u64);
                }
                scans.push((dir, keys, leaves));
            }
            scans
        })
    };
    for h in hs {
        h.join().unwrap();
    }
    let scans = reader.join().unwrap();
    t.check_invariants().unwrap();
    for (dir, keys, leaves) in scans {
        if leaves.iter().all(|&(l, v)| t.validate_leaf(l, v)) {
            let (now, _) = t.scan_collect((Bound::Included(&k(1)[..]), Bound::Excluded(&k(61)[..])), dir, usize::MAX);
            let now: Vec<u8> = now.iter().map(|(k, _)| k[0]).collect();
            assert_eq!(keys, now, "leaves validate but the range changed");
        }
    }
    let mut want: BTreeSet<u8> = stable.into_iter().collect();
    want.extend([41u8, 43, 45, 47, 49, 25]);
    assert_eq!(all_keys(&t), want.into_iter().collect::<Vec<_>>());
}

#[test]
fn shuttle_unlink_and_reuse_random() {
    shuttle::check_random(unlink_body, RANDOM_ITERS);
}

#[test]
fn shuttle_unlink_and_reuse_pct() {
    shuttle::check_pct(unlink_body, PCT_ITERS, 3);
}
