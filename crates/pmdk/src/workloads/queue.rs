//! `sp3-queue`: one persistent FIFO under one lock.
//!
//! A singly linked list of nodes `[next, value...]` allocated in the
//! enqueuing transaction and freed in the dequeuing one. Root words:
//! `WORDS + 0` head, `+ 8` tail, `+ 16` item count, `+ 24` the next sequence
//! number. The item enqueued with sequence number `s` holds the value
//! `(s, 0)`, so the queue always holds the consecutive numbers
//! `next - count .. next` from head to tail.

use super::{root, type_num, Checker, Outcome, Shape, Structure, Worker, LOAD_BATCH};
use crate::pool::{Pool, Tx};
use crate::{PmdkError, QUEUE_LOAD_MAX};
use parking_lot::Mutex;

const HEAD: u64 = root::WORDS;
const TAIL: u64 = root::WORDS + 8;
const COUNT: u64 = root::WORDS + 16;
const NEXT_SEQ: u64 = root::WORDS + 24;
/// The four queue words, snapshotted together.
const ROOT_WORDS_LEN: u64 = 32;

const ENQUEUE: usize = 0;
const DEQUEUE: usize = 1;
const DEQUEUE_EMPTY: usize = 0;

/// Node field offsets.
const NEXT: u64 = 0;
const VALUE: u64 = 8;

pub(crate) struct Queue {
    root: u64,
    node_size: u64,
    entry_size: usize,
    lock: Mutex<()>,
}

impl Queue {
    /// Appends the next item in `tx`; `value` is scratch space.
    fn enqueue(&self, tx: &Tx<'_>, value: &mut [u64]) -> Result<(), PmdkError> {
        let seq = tx.load(self.root + NEXT_SEQ);
        let tail = tx.load(self.root + TAIL);
        let node = tx.alloc(self.node_size, type_num::QUEUE_NODE, false)?;
        super::fill_value(seq, 0, self.entry_size, value);
        // The new node was allocated in this transaction: no snapshot.
        tx.set(node + NEXT, 0);
        tx.set_words(node + VALUE, value);
        tx.add_range(self.root + HEAD, ROOT_WORDS_LEN)?;
        if tail == 0 {
            tx.set(self.root + HEAD, node);
        } else {
            tx.store(tail + NEXT, node)?;
        }
        tx.set(self.root + TAIL, node);
        tx.set(self.root + COUNT, tx.load(self.root + COUNT) + 1);
        tx.set(self.root + NEXT_SEQ, seq + 1);
        Ok(())
    }

    /// Removes the head item in `tx`, reading its value into `value`;
    /// `false` if the queue is empty.
    fn dequeue(&self, tx: &Tx<'_>, value: &mut [u64]) -> Result<bool, PmdkError> {
        let head = tx.load(self.root + HEAD);
        if head == 0 {
            return Ok(false);
        }
        tx.pool().load_words(head + VALUE, value);
        let next = tx.load(head + NEXT);
        tx.add_range(self.root + HEAD, ROOT_WORDS_LEN)?;
        tx.set(self.root + HEAD, next);
        if next == 0 {
            tx.set(self.root + TAIL, 0);
        }
        tx.set(self.root + COUNT, tx.load(self.root + COUNT) - 1);
        tx.free(head)?;
        Ok(true)
    }
}

impl Structure for Queue {
    fn load(pool: &Pool, shape: &Shape, _seed: u64) -> Result<Self, PmdkError> {
        let queue = Self {
            root: pool.root(),
            node_size: VALUE + shape.stride,
            entry_size: shape.entry_size,
            lock: Mutex::new(()),
        };
        let mut value = vec![0; shape.words];
        let items = Self::loaded_items(shape);
        let mut loaded = 0;
        while loaded < items {
            let batch = LOAD_BATCH.min(items - loaded);
            pool.tx(|tx| {
                for _ in 0..batch {
                    queue.enqueue(tx, &mut value)?;
                }
                Ok(())
            })?;
            loaded += batch;
        }
        Ok(queue)
    }

    fn loaded_items(shape: &Shape) -> u64 {
        shape.entries.min(QUEUE_LOAD_MAX)
    }

    fn key_space(_shape: &Shape) -> u64 {
        1
    }

    fn op(&self, pool: &Pool, worker: &mut Worker<'_>) -> Result<Outcome, PmdkError> {
        let enqueue = worker.inserts();
        let value = &mut worker.value;
        let _guard = self.lock.lock();
        if enqueue {
            pool.tx(|tx| self.enqueue(tx, value))?;
            Ok(Outcome { kind: ENQUEUE, outcome: None })
        } else {
            let found = pool.tx(|tx| self.dequeue(tx, value))?;
            Ok(Outcome { kind: DEQUEUE, outcome: (!found).then_some(DEQUEUE_EMPTY) })
        }
    }

    fn check(pool: &Pool, shape: &Shape) -> Result<(u64, String), PmdkError> {
        let checker = Checker { pool, workload: "sp3-queue" };
        let root_off = pool.root();
        let (head, tail) = (pool.load(root_off + HEAD), pool.load(root_off + TAIL));
        let (count, next_seq) = (pool.load(root_off + COUNT), pool.load(root_off + NEXT_SEQ));
        if count > next_seq {
            return Err(checker.error(format!("{count} items but only {next_seq} were ever enqueued")));
        }
        if (head == 0) != (count == 0) || (tail == 0) != (count == 0) {
            return Err(checker.error(format!("head {head:#x}, tail {tail:#x} and count {count} disagree")));
        }
        let first = next_seq - count;
        let mut value = vec![0; shape.words];
        let (mut node, mut last, mut items) = (head, 0, 0u64);
        while node != 0 {
            if items == count {
                return Err(checker.error(format!("the list from the head is longer than the count {count}")));
            }
            let what = format!("item {items} from the head");
            checker.object(node, VALUE + shape.stride, &what)?;
            let (seq, version) = checker.value(node + VALUE, shape, &mut value, &what)?;
            if seq != first + items || version != 0 {
                return Err(checker.error(format!(
                    "{what} holds sequence number {seq} (version {version}), expected {} (FIFO order)",
                    first + items
                )));
            }
            last = node;
            node = pool.load(node + NEXT);
            items += 1;
        }
        if items != count {
            return Err(checker.error(format!("{items} items reachable from the head, count says {count}")));
        }
        if last != tail {
            return Err(checker.error(format!("the last item is at {last:#x} but the tail is {tail:#x}")));
        }
        Ok((count, format!("{count} items in FIFO order, sequence numbers {first}..{next_seq}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{assert_inconsistent, check_after};
    use crate::MicroWorkload;

    #[test]
    fn a_clean_load_passes() {
        let report = check_after::<Queue>(MicroWorkload::Queue, 600, |_| Ok(())).unwrap();
        assert_eq!(report.items, 600);
    }

    #[test]
    fn an_item_out_of_order_is_found() {
        let result = check_after::<Queue>(MicroWorkload::Queue, 600, |tx| {
            let head = tx.load(tx.pool().root() + HEAD);
            let second = tx.load(head + NEXT);
            let third = tx.load(second + NEXT);
            // Unlink the second item (keeping the count): a gap in the sequence.
            tx.store(head + NEXT, third)
        });
        assert_inconsistent(result, "FIFO order");
    }

    #[test]
    fn a_wrong_tail_is_found() {
        let result = check_after::<Queue>(MicroWorkload::Queue, 600, |tx| {
            let root_off = tx.pool().root();
            tx.store(root_off + TAIL, tx.load(root_off + HEAD))
        });
        assert_inconsistent(result, "tail");
    }
}
