//! TinySTM's concurrency control as Mnemosyne's `pwb` mode runs it
//! (`mnemosyne-gcc`, `mtm/src/mode/pwb/`), over rows: chosen by the engine
//! (`mnemosyne`), not by `cc=`.
//!
//! * **Encounter-time write locks** ("Acquire lock (ETL)" in
//!   `pwb_write_internal`): the first write of a row takes its stripe of a
//!   2^20-stripe lock table exclusively; a stripe held by another writer
//!   aborts the attempt at once (the contention manager's default:
//!   restart). Writers of a row are serialized from their first write to
//!   the end of their write-back.
//! * **Invisible reads, validated at commit**: a read takes no lock; the
//!   commit validates that every version read is unchanged and unlocked
//!   (the row's version word is TinySTM's versioned lock: its TID is the
//!   version, its lock bit taken at commit for the install).
//! * **Global clock**: every writing commit increments one shared counter
//!   (TinySTM's `FETCH_INC(clock)`), the contention point the design keeps;
//!   the commit's TID stays Silo's (above every version read or
//!   overwritten), which orders a row's versions as the clock would.
//!
//! Not modelled: LSA snapshot extension during the body (the commit
//! validates instead), and skipping validation when the clock did not move
//! (unsafe here: a row read before a concurrent writer's install would
//! not be re-checked).
//!
//! Explained in docs/engines/mnemosyne.md.

use crate::cc::lock_table::{Conflict, HeldLocks, LockTable};
use crate::cc::protocols::{Protocol, TidBounds};
use crate::cc::tx_sets::TxSets;
use crate::error::AbortReason;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What TinySTM's workers share: the write-lock stripes and the clock.
pub(crate) struct TinyShared {
    locks: LockTable,
    clock: CachePadded<AtomicU64>,
}

/// One worker's state under TinySTM.
pub(crate) struct TinyStm {
    shared: Arc<TinyShared>,
    held: HeldLocks,
}

impl TinyStm {
    /// The shared state for `workers` workers.
    pub(crate) fn shared(workers: usize) -> Arc<TinyShared> {
        Arc::new(TinyShared { locks: LockTable::new(Conflict::NoWait, workers), clock: CachePadded::default() })
    }
}

impl Protocol for TinyStm {
    type Shared = Arc<TinyShared>;

    fn worker(shared: &Self::Shared, worker: usize) -> Self {
        Self { shared: Arc::clone(shared), held: HeldLocks::new(worker) }
    }

    fn may_unlink(shared: &Self::Shared, address: usize, _tid: u64) -> bool {
        !shared.locks.is_held(address)
    }

    #[inline]
    fn begin(&mut self, attempt: u32, _epoch: u64) {
        self.shared.locks.begin(&self.held, attempt <= 1);
    }

    #[inline]
    fn abort(&mut self) {
        self.shared.locks.release_all(&mut self.held);
    }

    #[inline]
    fn release_locks(&mut self) {
        self.shared.locks.release_all(&mut self.held);
    }

    /// Encounter-time locking: the write lock at the first write.
    #[inline]
    fn write(&mut self, _accesses: usize, address: usize, _word: u64) -> Result<(), AbortReason> {
        self.shared.locks.acquire(&mut self.held, address, true)
    }

    fn commit_timestamp<R: RowKind>(
        &self,
        tx: &TxSets<R>,
        tables: &[Table<R>],
        bounds: TidBounds,
    ) -> Result<u64, AbortReason> {
        self.validate_reads(tx, tables)?;
        self.shared.clock.fetch_add(1, Ordering::AcqRel);
        Ok(tx.commit_tid(bounds.max_locked, bounds.floor, bounds.epoch))
    }
}
