//! SP^3's commit rule (sp3.txt §3, Algorithm 1): Silo's validation, then
//! early lock release: the commit unlocks before its log record is
//! durable, so a later transaction may read or overwrite its versions.
//! Each commit therefore names the transactions it depends on, the
//! writers of the versions it read or overwrote whose records were not
//! yet durable (`lastTid` per worker, the paper's depSet), and is
//! acknowledged only when they are durable too; recovery replays the
//! dependency graph (`durability::sp3_log`).
//!
//! A TID names its writer in its low bits (`storage::record::sp3_writer_of`),
//! so a dependency is one TID and "durable" is a comparison with the
//! writer's durable TID. One TID per other worker suffices: a worker's
//! commits become durable in TID order.
//!
//! Explained in docs/engines/sp3.md.

use super::commit_rule::CommitRule;
use crate::cc::tx_sets::TxSets;
use crate::storage::record::{self, sp3_writer_of, RowKind, SP3_MAX_WORKERS, SP3_WORKER_BITS};

/// The smallest TID at or above `tid` whose low bits name `worker`: the
/// TIDs of the SP^3 family (`sp3`, `nvm-tx`, `nvm-ideal`), whose log
/// tracks each worker's durable TID.
#[inline]
pub(crate) fn stamp_worker(tid: u64, worker: usize) -> u64 {
    let low = SP3_MAX_WORKERS as u64 - 1;
    let stamped = (tid & !low) | worker as u64;
    let stamped = if stamped < tid { stamped + (1 << SP3_WORKER_BITS) } else { stamped };
    debug_assert!(stamped >= tid && stamped < record::MAX_TID);
    stamped
}

/// `nvm-tx`'s rule: Silo's validation with the family's TIDs (its log is
/// written with the write set still locked, so nothing depends on it).
pub(crate) struct Sp3Tids;

impl CommitRule for Sp3Tids {
    #[inline]
    fn stamp_tid(tid: u64, worker: usize) -> u64 {
        stamp_worker(tid, worker)
    }
}

/// SP^3's early lock release with dependencies.
pub(crate) struct Sp3EarlyRelease;

impl CommitRule for Sp3EarlyRelease {
    const TRACKS_DEPENDENCIES: bool = true;

    #[inline]
    fn stamp_tid(tid: u64, worker: usize) -> u64 {
        stamp_worker(tid, worker)
    }

    /// Algorithm 1, step 2: the writer of every version read or
    /// overwritten, unless it is this worker (its own commits are durable
    /// in order) or already durable with its own dependencies. Only the
    /// newest TID per writer is kept.
    fn collect_dependencies<R: RowKind>(
        tx: &TxSets<R>,
        own: usize,
        durable: impl Fn(u64) -> bool,
        dependencies: &mut Vec<u64>,
    ) {
        dependencies.clear();
        let words = tx.read_words().chain(tx.writes.entries().iter().map(|entry| entry.locked_word));
        for word in words {
            let tid = record::tid_of(word);
            if tid == 0 || tid >= record::MAX_TID || sp3_writer_of(tid) == own || durable(tid) {
                continue;
            }
            let writer = sp3_writer_of(tid);
            match dependencies.iter_mut().find(|known| sp3_writer_of(**known) == writer) {
                Some(known) => *known = (*known).max(tid),
                None => dependencies.push(tid),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tids_name_their_worker_and_grow() {
        for (tid, worker) in [(1u64, 0usize), (1, 2), (255, 1), (256, 1), (0x5_0000_0101, 0), (0x5_0000_0101, 1)] {
            let stamped = stamp_worker(tid, worker);
            assert!(stamped >= tid, "{tid:#x} on worker {worker} became {stamped:#x}");
            assert!(stamped < tid + 256);
            assert_eq!(sp3_writer_of(stamped), worker);
        }
    }
}
