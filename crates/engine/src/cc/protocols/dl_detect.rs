//! `cc=dl-detect`: two-phase locking (`protocols::two_phase`); requesters
//! wait, and a requester whose wait would close a cycle in the wait-for
//! graph aborts (the cycle's youngest member: `cc::lock_table`).

use crate::cc::lock_table::Conflict;
use crate::cc::protocols::two_phase::{self, TwoPhase, WaitRule};
use crate::cc::protocols::{Named, Protocol};

/// Deadlock detection's conflict rule.
pub(crate) struct BreakCycles;

impl WaitRule for BreakCycles {
    const RULE: Conflict = Conflict::DlDetect;
}

/// A worker's state under `dl-detect`.
pub(crate) type DlDetect = TwoPhase<BreakCycles>;

impl Named for DlDetect {
    const ISOLATION: &'static str = two_phase::ISOLATION;
    const USES_LOCK_TABLE: bool = true;
    const LOCKS_ROWS: bool = true;

    fn shared(workers: usize) -> <Self as Protocol>::Shared {
        two_phase::shared::<BreakCycles>(workers)
    }
}
