//! What the two-phase-locking protocols (`no-wait`, `wait-die`,
//! `dl-detect`) share: a shared lock before every read and an exclusive one
//! before every write of the body, in the lock table (`cc::lock_table`),
//! held to the end of the attempt (strict 2PL). They differ only in what a
//! requester does on a conflict ([`WaitRule`]).
//!
//! Every row read stays share-locked until the attempt ends (and
//! reclamation leaves locked rows alone), so the commit validates only the
//! node set (phantoms).

use crate::cc::lock_table::{Conflict, HeldLocks, LockTable};
use crate::cc::protocols::Protocol;
use crate::cc::tx_sets::TxSets;
use crate::error::AbortReason;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use std::marker::PhantomData;
use std::sync::Arc;

/// The isolation of the two-phase-locking protocols.
pub(crate) const ISOLATION: &str = "strictly serializable; reads see the latest committed versions under shared locks";

/// A two-phase-locking protocol's conflict rule.
pub(crate) trait WaitRule: Send + 'static {
    /// What a requester does on a conflict.
    const RULE: Conflict;
}

/// One worker's state under a two-phase-locking protocol.
pub(crate) struct TwoPhase<W: WaitRule> {
    locks: Arc<LockTable>,
    /// Locks held by the attempt.
    held: HeldLocks,
    rule: PhantomData<W>,
}

/// The lock table of a two-phase-locking protocol for `workers` workers.
pub(crate) fn shared<W: WaitRule>(workers: usize) -> Arc<LockTable> {
    Arc::new(LockTable::new(W::RULE, workers))
}

impl<W: WaitRule> Protocol for TwoPhase<W> {
    type Shared = Arc<LockTable>;

    fn worker(shared: &Self::Shared, worker: usize) -> Self {
        Self { locks: Arc::clone(shared), held: HeldLocks::new(worker), rule: PhantomData }
    }

    fn may_unlink(shared: &Self::Shared, address: usize, _tid: u64) -> bool {
        !shared.is_held(address)
    }

    #[inline]
    fn begin(&mut self, attempt: u32, _epoch: u64) {
        self.locks.begin(&self.held, attempt <= 1);
    }

    #[inline]
    fn abort(&mut self) {
        self.locks.release_all(&mut self.held);
    }

    #[inline]
    fn release_locks(&mut self) {
        self.locks.release_all(&mut self.held);
    }

    /// The shared lock comes first, so the value read stays the committed
    /// one until the attempt ends.
    #[inline]
    fn read(&mut self, _accesses: usize, address: usize) -> Result<(), AbortReason> {
        self.locks.acquire(&mut self.held, address, false)
    }

    /// The exclusive lock of a row about to be written (an upgrade of the
    /// shared lock its read took).
    #[inline]
    fn write(&mut self, _accesses: usize, address: usize, _word: u64) -> Result<(), AbortReason> {
        self.locks.acquire(&mut self.held, address, true)
    }

    fn validate_reads<R: RowKind>(&self, tx: &TxSets<R>, tables: &[Table<R>]) -> Result<(), AbortReason> {
        tx.validate_leaves(tables)
    }
}
