//! `cc=no-wait`: two-phase locking (`protocols::two_phase`); a conflict
//! aborts the requester at once.

use crate::cc::lock_table::Conflict;
use crate::cc::protocols::two_phase::{self, TwoPhase, WaitRule};
use crate::cc::protocols::{Named, Protocol};

/// No-wait's conflict rule.
pub(crate) struct Abort;

impl WaitRule for Abort {
    const RULE: Conflict = Conflict::NoWait;
}

/// A worker's state under `no-wait`.
pub(crate) type NoWait = TwoPhase<Abort>;

impl Named for NoWait {
    const ISOLATION: &'static str = two_phase::ISOLATION;
    const USES_LOCK_TABLE: bool = true;
    const LOCKS_ROWS: bool = true;

    fn shared(workers: usize) -> <Self as Protocol>::Shared {
        two_phase::shared::<Abort>(workers)
    }
}
