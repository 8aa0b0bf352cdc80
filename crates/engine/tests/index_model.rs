//! Model-based property tests of the concurrent indexes against `BTreeMap`
//! (single-threaded).

use std::collections::BTreeMap;
use std::ops::Bound;

use pmtx_engine::index::{IndexError, LeafRef, OrderedIndex, OrderedIndexConfig, ScanDirection};
use proptest::prelude::*;

const MAX_KEY: usize = 12;

/// Keys of at most `MAX_KEY` bytes.  Small alphabets: plenty of collisions,
/// prefixes, trailing zero bytes and duplicates.  The long keys share 8-byte
/// prefixes, exercising the full comparison behind the inline prefixes.
fn valid_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => prop::collection::vec(0u8..4, 0..=6),
        1 => (prop::collection::vec(0u8..2, 8), prop::collection::vec(0u8..4, 0..=MAX_KEY - 8)).prop_map(
            |(mut a, b)| {
                a.extend(b);
                a
            }
        ),
    ]
}

/// Valid keys, occasionally longer than the maximum.
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        9 => valid_key(),
        1 => prop::collection::vec(any::<u8>(), MAX_KEY + 1..MAX_KEY + 4),
    ]
}

fn bound_strategy() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => key_strategy().prop_map(Bound::Included),
        3 => key_strategy().prop_map(Bound::Excluded),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Get(Vec<u8>),
    Insert(Vec<u8>, u64),
    GetOrInsert(Vec<u8>, u64),
    Remove(Vec<u8>),
    Scan(Bound<Vec<u8>>, Bound<Vec<u8>>, bool, usize),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => key_strategy().prop_map(Op::Get),
        4 => (key_strategy(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (key_strategy(), any::<u64>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        3 => key_strategy().prop_map(Op::Remove),
        2 => (bound_strategy(), bound_strategy(), any::<bool>(), 0usize..40)
            .prop_map(|(s, e, fwd, lim)| Op::Scan(s, e, fwd, lim)),
    ]
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn range_is_empty(s: Bound<&[u8]>, e: Bound<&[u8]>) -> bool {
    match (s, e) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e)) | (Bound::Excluded(s), Bound::Included(e)) => {
            s >= e
        }
        _ => false,
    }
}

fn in_range(k: &[u8], s: Bound<&[u8]>, e: Bound<&[u8]>) -> bool {
    (match s {
        Bound::Included(s) => k >= s,
        Bound::Excluded(s) => k > s,
        Bound::Unbounded => true,
    }) && (match e {
        Bound::Included(e) => k <= e,
        Bound::Excluded(e) => k < e,
        Bound::Unbounded => true,
    })
}

/// Expected scan result from the model.
fn model_scan(
    model: &BTreeMap<Vec<u8>, u64>,
    s: Bound<&[u8]>,
    e: Bound<&[u8]>,
    forward: bool,
    limit: usize,
) -> Vec<(Vec<u8>, u64)> {
    if range_is_empty(s, e) {
        return Vec::new();
    }
    let it = model.range::<[u8], _>((s, e)).map(|(k, v)| (k.clone(), *v));
    if forward {
        it.take(limit).collect()
    } else {
        it.rev().take(limit).collect()
    }
}

fn check_ops(index: &OrderedIndex, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Get(k) => prop_assert_eq!(index.get(k), model.get(k).copied()),
            Op::Insert(k, v) => {
                let r = index.insert(k, *v);
                if k.len() > MAX_KEY {
                    prop_assert_eq!(r, Err(IndexError::KeyTooLong { len: k.len(), max: MAX_KEY }));
                } else {
                    prop_assert_eq!(r, Ok(model.insert(k.clone(), *v)));
                }
            }
            Op::GetOrInsert(k, v) => {
                let r = index.get_or_insert_with_info(k, || *v);
                if k.len() > MAX_KEY {
                    prop_assert!(r.is_err());
                } else {
                    let r = r.unwrap();
                    match model.get(k) {
                        Some(&old) => {
                            prop_assert_eq!((r.value, r.inserted), (old, false));
                            prop_assert!(r.leaf_change.is_none());
                        }
                        None => {
                            prop_assert_eq!((r.value, r.inserted), (*v, true));
                            let ch = r.leaf_change.unwrap();
                            prop_assert_eq!(ch.version_after, ch.version_before + 1);
                            prop_assert_eq!(index.leaf_version(ch.leaf), Some(ch.version_after));
                            model.insert(k.clone(), *v);
                        }
                    }
                }
            }
            Op::Remove(k) => prop_assert_eq!(index.remove(k), model.remove(k)),
            Op::Scan(s, e, fwd, limit) => {
                let (s, e) = (as_ref(s), as_ref(e));
                let dir = if *fwd { ScanDirection::Forward } else { ScanDirection::Reverse };
                let (got, leaves) = index.scan_collect((s, e), dir, *limit);
                let want = model_scan(&model, s, e, *fwd, *limit);
                prop_assert_eq!(&got, &want);
                if *limit > 0 && !range_is_empty(s, e) {
                    prop_assert!(!leaves.is_empty(), "a non-empty scan must report a leaf");
                }
                for (leaf, v) in leaves {
                    prop_assert!(index.validate_leaf(leaf, v));
                }
            }
        }
        prop_assert_eq!(index.len(), model.len());
    }
    index.check_invariants().map_err(TestCaseError::fail)?;
    let (all, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX);
    let want: Vec<_> = model.into_iter().collect();
    prop_assert_eq!(all, want);
    Ok(())
}

/// Does `k` fall into the part of the range that a scan returning `got`
/// (with `limit`) is responsible for?
fn covered(k: &[u8], s: Bound<&[u8]>, e: Bound<&[u8]>, forward: bool, limit: usize, got: &[(Vec<u8>, u64)]) -> bool {
    if range_is_empty(s, e) || !in_range(k, s, e) {
        return false;
    }
    if got.len() < limit {
        return true; // the whole range was examined
    }
    let last = &got.last().unwrap().0;
    if forward {
        k <= last.as_slice()
    } else {
        k >= last.as_slice()
    }
}

fn any_changed(index: &OrderedIndex, leaves: &[(LeafRef, u64)]) -> bool {
    leaves.iter().any(|&(l, v)| !index.validate_leaf(l, v))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn ordered_matches_btreemap_small_nodes(ops in prop::collection::vec(op_strategy(), 1..400)) {
        let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: MAX_KEY, node_capacity: 4 });
        check_ops(&index, &ops)?;
    }

    #[test]
    fn ordered_matches_btreemap_default_nodes(ops in prop::collection::vec(op_strategy(), 1..400)) {
        let index = OrderedIndex::new(MAX_KEY);
        check_ops(&index, &ops)?;
    }

    /// Phantom detection: after a scan, inserting an absent key into the
    /// examined interval (or removing a returned key) changes the version of
    /// at least one reported leaf.
    #[test]
    fn scan_leaf_versions_detect_phantoms(
        initial in prop::collection::btree_set(valid_key(), 0..200),
        s in bound_strategy(),
        e in bound_strategy(),
        forward in any::<bool>(),
        limit in 1usize..30,
        probe in valid_key(),
        cap in 4usize..9,
    ) {
        let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: MAX_KEY + 8, node_capacity: cap });
        for (i, k) in initial.iter().enumerate() {
            index.insert(k, i as u64).unwrap();
        }
        let (s, e) = (as_ref(&s), as_ref(&e));
        prop_assume!(!range_is_empty(s, e));
        let dir = if forward { ScanDirection::Forward } else { ScanDirection::Reverse };
        let (got, leaves) = index.scan_collect((s, e), dir, limit);
        prop_assert!(!leaves.is_empty());
        prop_assert!(!any_changed(&index, &leaves));
        if initial.contains(&probe) {
            // Removing a key that the scan examined must be detected.
            index.remove(&probe).unwrap();
            if covered(&probe, s, e, forward, limit, &got) {
                prop_assert!(any_changed(&index, &leaves), "remove of {:?} not detected", probe);
            }
        } else {
            index.insert(&probe, 7).unwrap();
            if covered(&probe, s, e, forward, limit, &got) {
                prop_assert!(any_changed(&index, &leaves), "phantom {:?} not detected", probe);
            }
        }
        // Overwriting an existing value is not a structural change.
        let (fresh, leaves2) = index.scan_collect((s, e), dir, limit);
        if let Some((k, _)) = fresh.first() {
            index.insert(k, 12345).unwrap();
            prop_assert!(!any_changed(&index, &leaves2));
        }
        index.check_invariants().map_err(TestCaseError::fail)?;
    }
}

#[test]
fn empty_index_scans_report_the_root_leaf() {
    let index = OrderedIndex::new(8);
    for dir in [ScanDirection::Forward, ScanDirection::Reverse] {
        let (got, leaves) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), dir, 10);
        assert!(got.is_empty());
        assert_eq!(leaves.len(), 1);
        let (leaf, v) = leaves[0];
        index.insert(b"x", 1).unwrap();
        assert!(!index.validate_leaf(leaf, v));
        index.remove(b"x");
    }
}

#[test]
fn empty_range_between_keys_is_protected() {
    let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 4 });
    for i in 0u64..200 {
        index.insert(&(i * 10).to_be_bytes(), i).unwrap();
    }
    let lo = 501u64.to_be_bytes();
    let hi = 509u64.to_be_bytes();
    for dir in [ScanDirection::Forward, ScanDirection::Reverse] {
        let (got, leaves) = index.scan_collect((Bound::Included(&lo[..]), Bound::Included(&hi[..])), dir, 5);
        assert!(got.is_empty());
        assert!(!leaves.is_empty());
        // An insert far away (different leaf) leaves these leaves unchanged.
        index.insert(&5_000_000u64.to_be_bytes(), 0).unwrap();
        index.remove(&5_000_000u64.to_be_bytes());
        assert!(leaves.iter().all(|&(l, v)| index.validate_leaf(l, v)));
        index.insert(&505u64.to_be_bytes(), 0).unwrap();
        assert!(leaves.iter().any(|&(l, v)| !index.validate_leaf(l, v)));
        index.remove(&505u64.to_be_bytes());
    }
}

#[test]
fn key_too_long_is_an_error_not_a_panic() {
    let index = OrderedIndex::new(4);
    let long = [1u8; 5];
    assert_eq!(index.insert(&long, 1), Err(IndexError::KeyTooLong { len: 5, max: 4 }));
    assert!(index.get_or_insert_with(&long, || 1).is_err());
    assert_eq!(index.get(&long), None);
    assert_eq!(index.remove(&long), None);
    // Long bounds in scans are fine.
    let (got, _) = index.scan_collect((Bound::Included(&long[..]), Bound::Unbounded), ScanDirection::Forward, 10);
    assert!(got.is_empty());
}

#[test]
fn leaf_refs_of_other_indexes_are_rejected() {
    let a = OrderedIndex::new(8);
    let b = OrderedIndex::new(8);
    let (_, leaves) = a.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1);
    let (leaf, v) = leaves[0];
    assert_eq!(a.leaf_version(leaf), Some(v));
    assert_eq!(b.leaf_version(leaf), None);
    assert!(!b.validate_leaf(leaf, v));
}

#[test]
fn visit_can_stop_early_and_limit_is_respected() {
    let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: 8, node_capacity: 4 });
    for i in 0u32..100 {
        index.insert(&i.to_be_bytes(), i as u64).unwrap();
    }
    let mut seen = Vec::new();
    index.scan(
        (Bound::Unbounded, Bound::Unbounded),
        ScanDirection::Reverse,
        usize::MAX,
        |_, v| {
            seen.push(v);
            v > 90
        },
        |_, _| {},
    );
    assert_eq!(seen, (90..100).rev().collect::<Vec<u64>>());
    let (got, _) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 7);
    assert_eq!(got.len(), 7);
    let (got, leaves) = index.scan_collect((Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 0);
    assert!(got.is_empty() && leaves.is_empty());
}
