//! `cc=hstore`: H-Store. A transaction takes the exclusive lock of every
//! partition it touches (one per worker; the lock table's wait-die order)
//! before it touches the index, and needs no other concurrency control:
//! every partition read is still locked at commit, so nothing read or
//! scanned can have changed.

use crate::cc::lock_table::{Conflict, HeldLocks, LockTable};
use crate::cc::protocols::{Named, Protocol};
use crate::cc::tx_sets::TxSets;
use crate::storage::request::ScanRequest;
use crate::error::AbortReason;
use crate::schema::TableId;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use std::sync::Arc;

/// The partitions and their locks.
pub(crate) struct Partitions {
    locks: LockTable,
    /// The partition count (one per worker).
    count: usize,
}

impl Partitions {
    /// The lock address of the partition of `key` in table `table`, whose
    /// keys name their partition by their first `prefix` bytes. Partition
    /// lock addresses are small multiples of 64, which no row has.
    pub(crate) fn partition_address(&self, table: u32, prefix: Option<usize>, key: &[u8]) -> usize {
        let named = match prefix {
            Some(len) if key.len() >= len => &key[..len],
            _ => key,
        };
        let mut hash = if prefix.is_some() { 0 } else { u64::from(table) + 1 };
        for &byte in named {
            hash = (hash.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        Self::partition_lock_address((hash >> 32) as usize % self.count)
    }

    /// The lock address of partition `partition`.
    fn partition_lock_address(partition: usize) -> usize {
        (partition + 1) << 6
    }
}

/// A worker's state under H-Store.
pub(crate) struct HStore {
    partitions: Arc<Partitions>,
    /// Partition locks held by the attempt.
    held: HeldLocks,
}

impl Protocol for HStore {
    type Shared = Arc<Partitions>;

    fn worker(shared: &Self::Shared, worker: usize) -> Self {
        Self { partitions: Arc::clone(shared), held: HeldLocks::new(worker) }
    }

    fn may_unlink(shared: &Self::Shared, address: usize, _tid: u64) -> bool {
        !shared.locks.is_held(address)
    }

    #[inline]
    fn begin(&mut self, attempt: u32, _epoch: u64) {
        self.partitions.locks.begin(&self.held, attempt <= 1);
    }

    #[inline]
    fn abort(&mut self) {
        self.partitions.locks.release_all(&mut self.held);
    }

    #[inline]
    fn release_locks(&mut self) {
        self.partitions.locks.release_all(&mut self.held);
    }

    /// The exclusive lock of the partition of `key` in `table`.
    #[inline]
    fn access_key(&mut self, table: TableId, partition_prefix: Option<usize>, key: &[u8]) -> Result<(), AbortReason> {
        let address = self.partitions.partition_address(table.0, partition_prefix, key);
        self.partitions.locks.acquire(&mut self.held, address, true)
    }

    /// The partitions a scan of `request` may touch: the one its bounds
    /// share when both lie in one partition of a primary index that names
    /// partitions by a key prefix, else every partition.
    fn access_range(&mut self, partition_prefix: Option<usize>, request: &ScanRequest<'_>) -> Result<(), AbortReason> {
        let prefix = partition_prefix;
        let one_partition = match (request.secondary, prefix, bound_key(request.range.0), bound_key(request.range.1)) {
            (None, Some(len), Some(low), Some(high))
                if low.len() >= len && high.len() >= len && low[..len] == high[..len] =>
            {
                Some(low)
            }
            _ => None,
        };
        let partitions = &*self.partitions;
        match one_partition {
            Some(key) => {
                let address = partitions.partition_address(request.table.0, prefix, key);
                partitions.locks.acquire(&mut self.held, address, true)
            }
            None => {
                for partition in 0..partitions.count {
                    let address = Partitions::partition_lock_address(partition);
                    partitions.locks.acquire(&mut self.held, address, true)?;
                }
                Ok(())
            }
        }
    }

    /// Every partition read is still locked: nothing to validate.
    fn validate_reads<R: RowKind>(&self, _tx: &TxSets<R>, _tables: &[Table<R>]) -> Result<(), AbortReason> {
        Ok(())
    }
}

impl Named for HStore {
    const ISOLATION: &'static str =
        "strictly serializable; reads see the latest committed versions under partition locks";
    const USES_LOCK_TABLE: bool = true;

    fn shared(workers: usize) -> Self::Shared {
        Arc::new(Partitions { locks: LockTable::new(Conflict::WaitDie, workers), count: workers.max(1) })
    }
}

/// The key of a bound, if it has one.
fn bound_key(bound: std::ops::Bound<&[u8]>) -> Option<&[u8]> {
    match bound {
        std::ops::Bound::Included(key) | std::ops::Bound::Excluded(key) => Some(key),
        std::ops::Bound::Unbounded => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_the_declared_prefix() {
        let partitions = HStore::shared(8);
        let warehouse_3 = [0, 0, 0, 3];
        let a = partitions.partition_address(0, Some(4), &[&warehouse_3[..], b"district 1"].concat());
        let b = partitions.partition_address(5, Some(4), &[&warehouse_3[..], b"order 77"].concat());
        assert_eq!(a, b, "one warehouse is one partition, in every table");
        let spread: std::collections::HashSet<usize> =
            (0u32..64).map(|w| partitions.partition_address(0, Some(4), &w.to_be_bytes())).collect();
        assert!(spread.len() > 4, "warehouses spread over the partitions: {spread:?}");
        assert!(spread.iter().all(|&address| address % 64 == 0 && address <= 8 << 6));
        assert_eq!(partitions.count, 8);
    }
}
