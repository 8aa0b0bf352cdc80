//! `cc=wait-die`: two-phase locking (`protocols::two_phase`); an older
//! requester waits for younger holders, a younger one aborts (dies) and
//! retries with its original timestamp.

use crate::cc::lock_table::Conflict;
use crate::cc::protocols::two_phase::{self, TwoPhase, WaitRule};
use crate::cc::protocols::{Named, Protocol};

/// Wait-die's conflict rule.
pub(crate) struct OlderWaits;

impl WaitRule for OlderWaits {
    const RULE: Conflict = Conflict::WaitDie;
}

/// A worker's state under `wait-die`.
pub(crate) type WaitDie = TwoPhase<OlderWaits>;

impl Named for WaitDie {
    const ISOLATION: &'static str = two_phase::ISOLATION;
    const USES_LOCK_TABLE: bool = true;
    const LOCKS_ROWS: bool = true;

    fn shared(workers: usize) -> <Self as Protocol>::Shared {
        two_phase::shared::<OlderWaits>(workers)
    }
}
