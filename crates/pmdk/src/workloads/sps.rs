//! `sps`: swaps of two entries of a persistent array, one lock per entry.
//!
//! Root words: `WORDS + 0` = offset of the array (`entries * stride` bytes,
//! one object). Entry `i` is loaded with the value `(i, 0)`; a swap exchanges
//! whole entries, so the array always holds a permutation of those values.

use super::{root, type_num, Checker, Outcome, Shape, Structure, Worker};
use crate::pool::Pool;
use crate::PmdkError;
use parking_lot::Mutex;

const ARRAY: u64 = root::WORDS;

pub(crate) struct Sps {
    array: u64,
    stride: u64,
    words: u64,
    /// One lock per entry, taken in index order.
    locks: Vec<Mutex<()>>,
}

impl Structure for Sps {
    fn load(pool: &Pool, shape: &Shape, _seed: u64) -> Result<Self, PmdkError> {
        let root_off = pool.root();
        let mut value = vec![0; shape.words];
        let array = pool.tx(|tx| {
            let array = tx.alloc(shape.entries * shape.stride, type_num::SPS_ARRAY, false)?;
            for id in 0..shape.entries {
                super::fill_value(id, 0, shape.entry_size, &mut value);
                // Allocated in this transaction: no snapshot needed.
                tx.set_words(array + id * shape.stride, &value);
            }
            tx.store(root_off + ARRAY, array)?;
            Ok(array)
        })?;
        let locks = (0..shape.entries).map(|_| Mutex::new(())).collect();
        Ok(Self { array, stride: shape.stride, words: shape.words as u64, locks })
    }

    fn key_space(shape: &Shape) -> u64 {
        // Swaps draw array indices, not map keys.
        shape.entries
    }

    fn op(&self, pool: &Pool, worker: &mut Worker<'_>) -> Result<Outcome, PmdkError> {
        let (first, second) = worker.two_keys();
        let (low, high) = (first.min(second), first.max(second));
        let _low = self.locks[low as usize].lock();
        let _high = self.locks[high as usize].lock();
        let (a, b) = (self.array + low * self.stride, self.array + high * self.stride);
        pool.tx(|tx| {
            tx.add_range(a, self.stride)?;
            tx.add_range(b, self.stride)?;
            for word in 0..self.words {
                let (x, y) = (tx.load(a + 8 * word), tx.load(b + 8 * word));
                tx.set(a + 8 * word, y);
                tx.set(b + 8 * word, x);
            }
            Ok(())
        })?;
        Ok(Outcome { kind: 0, outcome: None })
    }

    fn check(pool: &Pool, shape: &Shape) -> Result<(u64, String), PmdkError> {
        let checker = Checker { pool, workload: "sps" };
        let array = pool.load(pool.root() + ARRAY);
        checker.object(array, shape.entries * shape.stride, "the array")?;
        let mut seen = vec![false; shape.entries as usize];
        let mut value = vec![0; shape.words];
        for index in 0..shape.entries {
            let what = format!("entry {index}");
            let (id, version) = checker.value(array + index * shape.stride, shape, &mut value, &what)?;
            if id >= shape.entries || version != 0 {
                return Err(checker.error(format!("{what} holds id {id} version {version} (not a loaded entry)")));
            }
            if std::mem::replace(&mut seen[id as usize], true) {
                return Err(checker.error(format!("id {id} appears twice (second time at {what})")));
            }
        }
        // `entries` distinct ids below `entries`: a permutation.
        Ok((shape.entries, format!("{} entries hold a permutation of the loaded ids", shape.entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{assert_inconsistent, check_after};
    use crate::MicroWorkload;

    #[test]
    fn a_clean_load_passes() {
        let report = check_after::<Sps>(MicroWorkload::Sps, 50, |_| Ok(())).unwrap();
        assert_eq!(report.items, 50);
    }

    #[test]
    fn a_duplicated_id_is_found() {
        let result = check_after::<Sps>(MicroWorkload::Sps, 50, |tx| {
            let array = tx.load(tx.pool().root() + ARRAY);
            let stride = 40;
            for word in 0..5 {
                tx.store(array + stride + 8 * word, tx.load(array + 8 * word))?;
            }
            Ok(())
        });
        assert_inconsistent(result, "appears twice");
    }

    #[test]
    fn a_torn_entry_is_found() {
        let result = check_after::<Sps>(MicroWorkload::Sps, 50, |tx| {
            let array = tx.load(tx.pool().root() + ARRAY);
            tx.store(array + 3 * 40 + 16, 0)
        });
        assert_inconsistent(result, "entry 3");
    }
}
