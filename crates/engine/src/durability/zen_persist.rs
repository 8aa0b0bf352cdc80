//! Zen's log-free persist (zen-plus.txt §3.3, Algorithm 1) and WBL's
//! persist at commit, over the NVM-tuple heap (`storage::zen::heap`, which
//! documents the tuple format, "torn reuse" and the slots' reclamation).
//!
//! # Zen's persist (Algorithm 1) — one or two fences per writing commit
//!
//! 1. for each new version, in persist order, into a free slot (never over
//!    the previous version): store word 0 (Tx-CTS, LP clear) *first*, then
//!    the rest of the tuple;
//! 2. flush every line of every tuple except the line holding the last
//!    tuple's header (`PersistBatch`, each line once), and any line the
//!    caller adds to the batch first (the worker's previous LP line, when
//!    another thread flushed it);
//! 3. **fence 1**; crash point `zen: tuples durable, before LP`;
//! 4. store word 0 of the last tuple again with the LP bit; flush its line;
//! 5. [`LpFence::Now`]: **fence 2**, and the commit is durable
//!    (`Database::run`, which acknowledges at return). [`LpFence::Later`]
//!    (pipelined commits): no fence, as in the paper — "the algorithm is
//!    optimized to not issue `sfence` after the last `clwb`" (§3.3.1); crash
//!    point `zen: LP flushed, its fence left to a later one`. The commit
//!    becomes durable at the next fence that follows a flush of its LP
//!    line by the same thread: normally its worker's next commit's fence 1
//!    (`engines::zen::worker` documents every way and the bound).
//!
//! Every tuple of a transaction carries its Tx-CTS; the last one (a tuple of
//! the table first in the LP order, §3.3.4) carries the LP bit. Stores to one
//! line reach the medium in order, so if the LP store is durable the rest of
//! that line is too, and fence 1 made every other line durable — whether
//! the LP line then reaches the medium by fence 2, by a later fence or by
//! an eviction. Read-only commits issue none.
//!
//! WBL (`persist_versions`) writes the versions the same way, word 0
//! first, and issues one fence with no LP bit: its transactions commit
//! with their window's record (`durability::wbl_window`).
//!
//! Explained in docs/engines/zen.md.

use crate::fault::Faults;
use crate::storage::zen::heap::LP_BIT;
use pmtx_pm::{PersistBatch, PmBackend, CACHE_LINE};

/// Stores the `count` tuples `tuple(0..count)` (slot, encoded bytes) into
/// their slots, word 0 of each first; `word0` may change a word 0.
fn store_tuples<'a, B: PmBackend>(
    backend: &B,
    count: usize,
    tuple: &impl Fn(usize) -> (u64, &'a [u8]),
    word0: impl Fn(usize, u64) -> u64,
) {
    for position in 0..count {
        let (slot, bytes) = tuple(position);
        debug_assert!(slot.is_multiple_of(16));
        let first = word0(position, u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")));
        // IMPORTANT: word 0 is the first store to the header line (see
        // "torn reuse").
        backend.store_u64(slot, first);
        backend.write(slot + 8, &bytes[8..]);
    }
}

/// WBL's persist at commit: stores the `count` versions `tuple(0..count)`
/// (slot, encoded bytes) of one transaction into their free slots, flushes
/// every line and issues **one fence**. No LP bit: the transaction commits
/// with its window's record (`durability::wbl_window`).
pub(crate) fn persist_versions<'a, B: PmBackend>(
    backend: &B,
    batch: &mut PersistBatch,
    count: usize,
    tuple: impl Fn(usize) -> (u64, &'a [u8]),
) {
    if count == 0 {
        return;
    }
    store_tuples(backend, count, &tuple, |_, word0| word0);
    for position in 0..count {
        let (slot, bytes) = tuple(position);
        batch.add(slot, bytes.len() as u64);
    }
    batch.flush(backend);
    backend.crash_point("wbl: versions written, before their fence");
    backend.fence();
}

/// Whether Algorithm 1 fences the LP line itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LpFence {
    /// Fence 2: the commit is durable when the persist returns.
    Now,
    /// The LP line is flushed and its fence left to a later one (pipelined
    /// commits, as in the paper).
    Later,
}

/// Algorithm 1 (see the module documentation): persists the `count` tuples
/// `tuple(0..count)` (slot, encoded bytes) of one transaction; the last one
/// gets the LP bit. Lines already in `batch` are flushed with the tuples'.
/// One fence, and a second one with [`LpFence::Now`].
pub(crate) fn persist_tuples<'a, B: PmBackend>(
    backend: &B,
    batch: &mut PersistBatch,
    count: usize,
    tuple: impl Fn(usize) -> (u64, &'a [u8]),
    faults: Faults,
    lp_fence: LpFence,
) {
    if count == 0 {
        return;
    }
    let (last_slot, last_bytes) = tuple(count - 1);
    store_tuples(backend, count, &tuple, |position, word0| {
        if faults.lp_on_first_tuple() && position == 0 && count > 1 {
            word0 | LP_BIT // broken on purpose: before the fence
        } else {
            word0
        }
    });
    for position in 0..count - 1 {
        let (slot, bytes) = tuple(position);
        batch.add(slot, bytes.len() as u64);
    }
    let after_header_line = (last_slot & !(CACHE_LINE - 1)) + CACHE_LINE;
    let last_end = last_slot + last_bytes.len() as u64;
    if last_end > after_header_line {
        batch.add(after_header_line, last_end - after_header_line);
    }
    batch.flush(backend);
    if !faults.skip_first_fence() {
        backend.fence();
    }
    backend.crash_point("zen: tuples durable, before LP");
    let cts = u64::from_le_bytes(last_bytes[..8].try_into().expect("8 bytes"));
    // IMPORTANT: the commit point. Everything else of the transaction is
    // durable (fence 1); this 8-byte store is failure-atomic.
    backend.store_u64(last_slot, cts | LP_BIT);
    backend.flush(last_slot, 8);
    match lp_fence {
        LpFence::Now if !faults.lp_unfenced() => backend.fence(),
        LpFence::Now => {}
        LpFence::Later => backend.crash_point("zen: LP flushed, its fence left to a later one"),
    }
}

/// Writes the encoded tuple `bytes` into `slot` ahead of its transaction's
/// commit (`zen+`'s direct NVM writes in the exclusive stage) and adds its
/// lines to `batch`, for the caller to flush and fence. Word 0 first, as in
/// Algorithm 1 ("torn reuse"), and without the LP bit: the tuple stays
/// uncommitted — above its region's commit horizon — until the commit's LP
/// tuple is durable, after a fence that covers it.
pub(crate) fn write_tuple_early<B: PmBackend>(
    backend: &B,
    batch: &mut PersistBatch,
    slot: u64,
    bytes: &[u8],
    faults: Faults,
) {
    debug_assert!(slot.is_multiple_of(16));
    let mut word0 = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if faults.spill_with_lp() {
        word0 |= LP_BIT; // broken on purpose: committed before its transaction
    }
    // IMPORTANT: word 0 is the first store to the header line.
    backend.store_u64(slot, word0);
    backend.write(slot + 8, &bytes[8..]);
    batch.add(slot, bytes.len() as u64);
}
