//! The hash index against a `HashMap` model (proptest) and under
//! concurrent inserts, removals and lookups.

use pmtx_engine::internals::index::{HashEntry, HashIndex, IndexError};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;

/// A test entry: its key, and a value to tell entries of one key apart.
struct Entry {
    key: Vec<u8>,
    value: u64,
}

impl HashEntry for Entry {
    fn key(&self) -> &[u8] {
        &self.key
    }
}

/// Entries are leaked on purpose: a removed entry may still be read by a
/// concurrent lookup, which only epochs (not used here) would protect.
fn entry(key: &[u8], value: u64) -> NonNull<Entry> {
    NonNull::from(Box::leak(Box::new(Entry { key: key.to_vec(), value })))
}

fn value_of(entry: NonNull<Entry>) -> u64 {
    // SAFETY: test entries are never freed.
    unsafe { entry.as_ref() }.value
}

const MAX_KEY: usize = 12;

#[derive(Clone, Debug)]
enum Op {
    Get(Vec<u8>),
    GetOrInsert(Vec<u8>, u64),
    Remove(Vec<u8>),
    Visit,
}

fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    // Few distinct bytes and lengths 0..=14 (some too long): collisions,
    // prefixes and trailing zeros are common.
    prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 255]), 0..=14)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => key_strategy().prop_map(Op::Get),
        4 => (key_strategy(), any::<u64>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
        2 => key_strategy().prop_map(Op::Remove),
        1 => Just(Op::Visit),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn hash_index_matches_a_hashmap(ops in prop::collection::vec(op_strategy(), 1..400), shards in 1usize..5) {
        let index = HashIndex::<Entry>::with_shards(MAX_KEY, shards, None);
        let mut model: HashMap<Vec<u8>, NonNull<Entry>> = HashMap::new();
        for op in &ops {
            match op {
                Op::Get(k) => prop_assert_eq!(index.get(k), model.get(k).copied()),
                Op::GetOrInsert(k, v) => {
                    let made = entry(k, *v);
                    let result = index.get_or_insert_with(k, || made);
                    if k.len() > MAX_KEY {
                        prop_assert_eq!(result, Err(IndexError::KeyTooLong { len: k.len(), max: MAX_KEY }));
                    } else {
                        let want = match model.get(k) {
                            Some(&old) => (old, false),
                            None => {
                                model.insert(k.clone(), made);
                                (made, true)
                            }
                        };
                        prop_assert_eq!(result, Ok(want));
                    }
                }
                Op::Remove(k) => match model.get(k).copied() {
                    Some(current) => {
                        prop_assert!(!index.remove_if(k, entry(k, 0)), "only the indexed entry is removed");
                        prop_assert!(index.remove_if(k, current));
                        model.remove(k);
                    }
                    None => prop_assert!(!index.remove_if(k, entry(k, 0))),
                },
                Op::Visit => {
                    let mut all = HashMap::new();
                    index.for_each(|found| {
                        // SAFETY: test entries are never freed.
                        all.insert(unsafe { found.as_ref() }.key.clone(), found);
                    });
                    prop_assert_eq!(&all, &model);
                }
            }
            prop_assert_eq!(index.len(), model.len());
        }
    }
}

#[test]
fn concurrent_inserts_removals_and_lookups_agree_per_thread() {
    const THREADS: u64 = 4;
    const KEYS: u32 = 4000;
    let index = Arc::new(HashIndex::<Entry>::with_shards(16, 4, None));
    let handles: Vec<_> = (0..THREADS)
        .map(|thread| {
            let index = Arc::clone(&index);
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(thread);
                let mut mine: HashMap<Vec<u8>, NonNull<Entry>> = HashMap::new();
                for _ in 0..KEYS * 4 {
                    let mut key = thread.to_be_bytes().to_vec();
                    key.extend_from_slice(&rng.gen_range(0..KEYS).to_be_bytes());
                    match rng.gen_range(0..3) {
                        0 => {
                            let made = entry(&key, thread);
                            let (found, inserted) = index.get_or_insert_with(&key, || made).unwrap();
                            assert_eq!(inserted, !mine.contains_key(&key));
                            mine.entry(key).or_insert(found);
                        }
                        1 => {
                            if let Some(current) = mine.remove(&key) {
                                assert!(index.remove_if(&key, current));
                            }
                        }
                        _ => assert_eq!(index.get(&key), mine.get(&key).copied()),
                    }
                }
                // Keys every thread races for: one winner each.
                let mut won = 0u32;
                for shared in 0..500u32 {
                    let made = entry(&shared.to_be_bytes(), thread);
                    let (found, inserted) = index.get_or_insert_with(&shared.to_be_bytes(), || made).unwrap();
                    if inserted {
                        won += 1;
                        assert_eq!(value_of(found), thread);
                    }
                }
                (mine.into_iter().map(|(k, v)| (k, v.as_ptr() as usize)).collect::<Vec<_>>(), won)
            })
        })
        .collect();
    let mut total = 0;
    let mut won = 0;
    for handle in handles {
        let (mine, thread_won) = handle.join().unwrap();
        for (key, address) in &mine {
            assert_eq!(index.get(key).map(|e| e.as_ptr() as usize), Some(*address));
        }
        total += mine.len();
        won += thread_won;
    }
    assert_eq!(won, 500);
    assert_eq!(index.len(), total + 500);
}
