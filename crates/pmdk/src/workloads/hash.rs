//! `hash`: a persistent chained hash table, one lock per bucket.
//!
//! Root words: `WORDS + 0` offset of the bucket array (`buckets` words, each
//! the offset of its chain's first node or 0), `+ 8` the bucket count (a
//! power of two >= `entries`). Nodes are `[next, key, value...]`, allocated
//! in the inserting transaction and pushed at the chain's head. A key lives
//! in bucket `mix64(key) & (buckets - 1)`.

use super::{map, root, type_num, Checker, Outcome, Shape, Structure, Worker, LOAD_BATCH};
use crate::pool::{Pool, Tx};
use crate::PmdkError;
use parking_lot::Mutex;
use pmtx_workloads::gen::mix64;

const BUCKETS: u64 = root::WORDS;
const BUCKET_COUNT: u64 = root::WORDS + 8;

/// Node field offsets.
const NEXT: u64 = 0;
const KEY: u64 = 8;
const VALUE: u64 = 16;

pub(crate) struct Hash {
    buckets: u64,
    mask: u64,
    node_size: u64,
    shape: Shape,
    /// One lock per bucket.
    locks: Vec<Mutex<()>>,
}

fn bucket_of(key: u64, mask: u64) -> u64 {
    mix64(key) & mask
}

impl Hash {
    fn slot(&self, key: u64) -> (u64, usize) {
        let bucket = bucket_of(key, self.mask);
        (self.buckets + 8 * bucket, bucket as usize)
    }

    /// The node holding `key` in the chain starting at `slot`, or 0.
    fn find(&self, tx: &Tx<'_>, slot: u64, key: u64) -> u64 {
        let mut node = tx.load(slot);
        while node != 0 && tx.load(node + KEY) != key {
            node = tx.load(node + NEXT);
        }
        node
    }

    /// Inserts or overwrites `key` with the value `(key, version)`; `true`
    /// if the key is new. The caller holds the bucket's lock.
    fn insert(&self, tx: &Tx<'_>, key: u64, version: u64, value: &mut [u64]) -> Result<bool, PmdkError> {
        let (slot, _) = self.slot(key);
        super::fill_value(key, version, self.shape.entry_size, value);
        let node = self.find(tx, slot, key);
        if node != 0 {
            tx.add_range(node + VALUE, self.shape.stride)?;
            tx.set_words(node + VALUE, value);
            return Ok(false);
        }
        let node = tx.alloc(self.node_size, type_num::HASH_NODE, false)?;
        // Allocated in this transaction: no snapshot.
        tx.set(node + NEXT, tx.load(slot));
        tx.set(node + KEY, key);
        tx.set_words(node + VALUE, value);
        tx.store(slot, node)?;
        Ok(true)
    }
}

impl Structure for Hash {
    fn load(pool: &Pool, shape: &Shape, seed: u64) -> Result<Self, PmdkError> {
        let root_off = pool.root();
        let bucket_count = shape.entries.next_power_of_two();
        let buckets = pool.tx(|tx| {
            let buckets = tx.alloc(8 * bucket_count, type_num::HASH_BUCKETS, true)?;
            tx.add_range(root_off + BUCKETS, 16)?;
            tx.set(root_off + BUCKETS, buckets);
            tx.set(root_off + BUCKET_COUNT, bucket_count);
            Ok(buckets)
        })?;
        let hash = Self {
            buckets,
            mask: bucket_count - 1,
            node_size: VALUE + shape.stride,
            shape: shape.clone(),
            locks: (0..bucket_count).map(|_| Mutex::new(())).collect(),
        };
        let mut value = vec![0; shape.words];
        for batch in super::shuffled(shape.entries, seed).chunks(LOAD_BATCH as usize) {
            pool.tx(|tx| {
                for &key in batch {
                    hash.insert(tx, key, 0, &mut value)?;
                }
                Ok(())
            })?;
        }
        Ok(hash)
    }

    fn op(&self, pool: &Pool, worker: &mut Worker<'_>) -> Result<Outcome, PmdkError> {
        let insert = worker.inserts();
        let key = worker.key();
        let (slot, bucket) = self.slot(key);
        if insert {
            let version = worker.version();
            let value = &mut worker.value;
            let _guard = self.locks[bucket].lock();
            let new = pool.tx(|tx| self.insert(tx, key, version, value))?;
            Ok(map::inserted(new))
        } else {
            let value = &mut worker.value;
            let _guard = self.locks[bucket].lock();
            let found = pool.tx(|tx| {
                let node = self.find(tx, slot, key);
                if node != 0 {
                    tx.pool().load_words(node + VALUE, value);
                }
                Ok(node != 0)
            })?;
            Ok(map::searched(found))
        }
    }

    fn check(pool: &Pool, shape: &Shape) -> Result<(u64, String), PmdkError> {
        let checker = Checker { pool, workload: "hash" };
        let root_off = pool.root();
        let (buckets, bucket_count) = (pool.load(root_off + BUCKETS), pool.load(root_off + BUCKET_COUNT));
        if !bucket_count.is_power_of_two() || bucket_count < shape.entries || bucket_count > 1 << 41 {
            return Err(checker.error(format!("bucket count {bucket_count} for {} entries", shape.entries)));
        }
        checker.object(buckets, 8 * bucket_count, "the bucket array")?;
        let mut seen = vec![false; shape.key_space as usize];
        let mut value = vec![0; shape.words];
        let (mut items, mut longest) = (0u64, 0u64);
        for bucket in 0..bucket_count {
            let (mut node, mut length) = (pool.load(buckets + 8 * bucket), 0u64);
            while node != 0 {
                let what = format!("node {length} of bucket {bucket}");
                checker.object(node, VALUE + shape.stride, &what)?;
                let key = pool.load(node + KEY);
                if key >= shape.key_space {
                    return Err(checker.error(format!("{what} holds key {key}, outside the key space")));
                }
                if bucket_of(key, bucket_count - 1) != bucket {
                    return Err(checker.error(format!("{what} holds key {key}, which hashes to another bucket")));
                }
                // A duplicate key also catches a cycle in a chain.
                if std::mem::replace(&mut seen[key as usize], true) {
                    return Err(checker.error(format!("key {key} is in the table twice ({what})")));
                }
                let (value_key, _) = checker.value(node + VALUE, shape, &mut value, &what)?;
                if value_key != key {
                    return Err(checker.error(format!("{what} with key {key} holds the value of key {value_key}")));
                }
                node = pool.load(node + NEXT);
                length += 1;
                items += 1;
            }
            longest = longest.max(length);
        }
        if let Some(missing) = (0..shape.entries).find(|&key| !seen[key as usize]) {
            return Err(checker.error(format!("loaded key {missing} is missing")));
        }
        Ok((items, format!("{items} keys in {bucket_count} buckets (longest chain {longest}), values intact")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{assert_inconsistent, check_after};
    use crate::MicroWorkload;

    fn first_node(tx: &Tx<'_>) -> u64 {
        let buckets = tx.load(tx.pool().root() + BUCKETS);
        (0..).map(|bucket| tx.load(buckets + 8 * bucket)).find(|&node| node != 0).unwrap()
    }

    #[test]
    fn a_clean_load_passes() {
        let report = check_after::<Hash>(MicroWorkload::Hash, 500, |_| Ok(())).unwrap();
        assert_eq!(report.items, 500);
    }

    #[test]
    fn a_misplaced_key_is_found() {
        let result = check_after::<Hash>(MicroWorkload::Hash, 500, |tx| {
            let node = first_node(tx);
            let key = tx.load(node + KEY);
            let mask = tx.load(tx.pool().root() + BUCKET_COUNT) - 1;
            let other = (0..1000).find(|&other| bucket_of(other, mask) != bucket_of(key, mask)).unwrap();
            tx.store(node + KEY, other)
        });
        assert_inconsistent(result, "another bucket");
    }

    #[test]
    fn a_lost_node_is_found() {
        let result = check_after::<Hash>(MicroWorkload::Hash, 500, |tx| {
            let buckets = tx.load(tx.pool().root() + BUCKETS);
            let bucket = (0..).find(|&bucket| tx.load(buckets + 8 * bucket) != 0).unwrap();
            tx.store(buckets + 8 * bucket, 0)
        });
        assert_inconsistent(result, "is missing");
    }
}
