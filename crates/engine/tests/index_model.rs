//! Model-based property tests of the concurrent indexes against `BTreeMap`
//! (single-threaded).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use pmtx_engine::internals::index::{Finger, IndexError, LeafRef, OrderedIndex, OrderedIndexConfig, ScanDirection};
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

/// Longest key of the mixed-length tests: long enough for keys that share
/// their inline 16-byte prefix and differ only in the blob.
const MAX_MIXED_KEY: usize = 40;

/// Keys of 0..=40 bytes mixing inline (at most 16 bytes) and blob keys:
/// small alphabets with zeros (prefixes of each other, trailing zero bytes),
/// and keys sharing one of a few 16-byte prefixes (which the inline words
/// cannot tell apart), some cut back to 15..=17 bytes.
fn mixed_valid_key() -> impl Strategy<Value = Vec<u8>> {
    let prefixes: [[u8; 16]; 3] = [[0; 16], [1; 16], *b"0123456789abcdef"];
    prop_oneof![
        3 => prop::collection::vec(0u8..3, 0..=MAX_MIXED_KEY),
        3 => (0..prefixes.len(), prop::collection::vec(0u8..3, 0..=MAX_MIXED_KEY - 16)).prop_map(move |(p, tail)| {
            let mut k = prefixes[p].to_vec();
            k.extend(tail);
            k
        }),
        1 => (0..prefixes.len(), 15usize..=17).prop_map(move |(p, len)| {
            let mut k = prefixes[p].to_vec();
            k.resize(len, 0);
            k
        }),
    ]
}

/// Mixed keys, occasionally longer than the maximum.
fn mixed_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        9 => mixed_valid_key(),
        1 => prop::collection::vec(0u8..3, MAX_MIXED_KEY + 1..MAX_MIXED_KEY + 4),
    ]
}

fn mixed_bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => mixed_key().prop_map(Bound::Included),
        3 => mixed_key().prop_map(Bound::Excluded),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Get(Vec<u8>),
    Insert(Vec<u8>, u64),
    GetOrInsert(Vec<u8>, u64),
    /// `get_or_insert_near` with the one finger the whole sequence shares:
    /// stale after other operations' splits, removes and unlinks.
    GetOrInsertNear(Vec<u8>, u64),
    Remove(Vec<u8>),
    /// `remove_if` with the key's current value (if `true` and present) or
    /// with the given value.
    RemoveIf(Vec<u8>, u64, bool),
    /// Remove every present key in the range (empties whole leaves).
    RemoveRange(Bound<Vec<u8>>, Bound<Vec<u8>>),
    Scan(Bound<Vec<u8>>, Bound<Vec<u8>>, bool, usize),
    /// Turn unlinking of emptied leaves off (as if every attempt lost its
    /// race, leaving empty leaves behind) or back on.
    SetUnlinking(bool),
}

fn ops_over(keys: BoxedStrategy<Vec<u8>>, bounds: BoxedStrategy<Bound<Vec<u8>>>) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => keys.clone().prop_map(Op::Get),
        4 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        3 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| Op::GetOrInsertNear(k, v)),
        3 => keys.clone().prop_map(Op::Remove),
        1 => (keys, any::<u64>(), any::<bool>()).prop_map(|(k, v, cur)| Op::RemoveIf(k, v, cur)),
        1 => (bounds.clone(), bounds.clone()).prop_map(|(s, e)| Op::RemoveRange(s, e)),
        2 => (bounds.clone(), bounds, any::<bool>(), 0usize..40)
            .prop_map(|(s, e, fwd, lim)| Op::Scan(s, e, fwd, lim)),
        1 => any::<bool>().prop_map(Op::SetUnlinking),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    ops_over(key_strategy().boxed(), bound_strategy().boxed())
}

fn mixed_op_strategy() -> impl Strategy<Value = Op> {
    ops_over(mixed_key().boxed(), mixed_bound().boxed())
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
    let max_key = index.max_key_len();
    let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut finger = Finger::default();
    for op in ops {
        match op {
            Op::Get(k) => prop_assert_eq!(index.get(k), model.get(k).copied()),
            Op::Insert(k, v) => {
                let r = index.insert(k, *v);
                if k.len() > max_key {
                    prop_assert_eq!(r, Err(IndexError::KeyTooLong { len: k.len(), max: max_key }));
                } else {
                    prop_assert_eq!(r, Ok(model.insert(k.clone(), *v)));
                }
            }
            Op::GetOrInsert(k, v) | Op::GetOrInsertNear(k, v) => {
                let r = match op {
                    Op::GetOrInsertNear(..) => index.get_or_insert_near(k, || *v, Some(&mut finger)),
                    _ => index.get_or_insert_with_info(k, || *v),
                };
                if k.len() > max_key {
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
            Op::RemoveIf(k, v, current) => {
                let expected = match model.get(k) {
                    Some(&cur) if *current => cur,
                    _ => *v,
                };
                let want = model.get(k) == Some(&expected);
                let (_, before) =
                    index.scan_collect((Bound::Included(k), Bound::Included(k)), ScanDirection::Forward, 1);
                prop_assert_eq!(index.remove_if(k, expected), want);
                if want {
                    model.remove(k);
                } else {
                    // A failed remove_if is not a structural change.
                    for (leaf, v) in before {
                        prop_assert!(index.validate_leaf(leaf, v));
                    }
                }
            }
            Op::RemoveRange(s, e) => {
                let (s, e) = (as_ref(s), as_ref(e));
                if !range_is_empty(s, e) {
                    let doomed: Vec<Vec<u8>> = model.range::<[u8], _>((s, e)).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        prop_assert_eq!(index.remove(&k), model.remove(&k));
                    }
                }
            }
            Op::SetUnlinking(on) => index.set_unlinking(*on),
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

/// Builds an index of `initial` minus `removed`, scans, then checks that a
/// remove of a returned key or an insert of `probe` into the examined
/// interval invalidates a reported leaf, and that an overwrite does not.
#[allow(clippy::too_many_arguments)]
fn check_phantoms(
    max_key_len: usize,
    cap: usize,
    initial: &BTreeSet<Vec<u8>>,
    removed: &[Vec<u8>],
    (s, e): (Bound<Vec<u8>>, Bound<Vec<u8>>),
    forward: bool,
    limit: usize,
    probe: &[u8],
) -> Result<(), TestCaseError> {
    let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len, node_capacity: cap });
    let mut present = initial.clone();
    for (i, k) in initial.iter().enumerate() {
        index.insert(k, i as u64).unwrap();
    }
    for k in removed {
        prop_assert_eq!(index.remove(k).is_some(), present.remove(k));
    }
    let (s, e) = (as_ref(&s), as_ref(&e));
    prop_assume!(!range_is_empty(s, e));
    let dir = if forward { ScanDirection::Forward } else { ScanDirection::Reverse };
    let (got, leaves) = index.scan_collect((s, e), dir, limit);
    prop_assert!(!leaves.is_empty());
    prop_assert!(!any_changed(&index, &leaves));
    if present.contains(probe) {
        // Removing a key that the scan examined must be detected.
        index.remove(probe).unwrap();
        if covered(probe, s, e, forward, limit, &got) {
            prop_assert!(any_changed(&index, &leaves), "remove of {:?} not detected", probe);
        }
    } else {
        index.insert(probe, 7).unwrap();
        if covered(probe, s, e, forward, limit, &got) {
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
    Ok(())
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
        check_phantoms(MAX_KEY + 8, cap, &initial, &[], (s, e), forward, limit, &probe)?;
    }

    /// The same with mixed-length keys, after removals that unlink leaves
    /// (so the scanned interval may belong to a neighbour that took over the
    /// range of an unlinked leaf).
    #[test]
    fn scan_leaf_versions_detect_phantoms_after_unlinks(
        initial in prop::collection::btree_set(mixed_valid_key(), 0..250),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..200),
        s in mixed_bound(),
        e in mixed_bound(),
        forward in any::<bool>(),
        limit in 1usize..30,
        probe in mixed_valid_key(),
        cap in 4usize..9,
    ) {
        let keys: Vec<Vec<u8>> = initial.iter().cloned().collect();
        let removed: Vec<Vec<u8>> =
            if keys.is_empty() { Vec::new() } else { removed.iter().map(|i| i.get(&keys).clone()).collect() };
        check_phantoms(MAX_MIXED_KEY, cap, &initial, &removed, (s, e), forward, limit, &probe)?;
    }

    #[test]
    fn ordered_mixed_keys_match_btreemap_small_nodes(ops in prop::collection::vec(mixed_op_strategy(), 1..400)) {
        let index = OrderedIndex::with_config(OrderedIndexConfig { max_key_len: MAX_MIXED_KEY, node_capacity: 4 });
        check_ops(&index, &ops)?;
    }

    #[test]
    fn ordered_mixed_keys_match_btreemap_default_nodes(ops in prop::collection::vec(mixed_op_strategy(), 1..400)) {
        let index = OrderedIndex::new(MAX_MIXED_KEY);
        check_ops(&index, &ops)?;
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
