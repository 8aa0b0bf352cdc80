//! `cc=occ`: Kung-Robinson OCC with serial validation. The body and the
//! validation are Silo's; validation and the write phase of every
//! transaction run in one global critical section, which the engine's
//! commit holds (`Concurrency::serial_section`).

use crate::cc::protocols::silo::VALIDATED_AT_COMMIT;
use crate::cc::protocols::{Named, Protocol};
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

/// A worker's state under `occ`: none beyond the transaction's sets.
pub(crate) struct Occ;

impl Protocol for Occ {
    /// The critical section of validation and write phase.
    type Shared = Arc<Mutex<()>>;

    fn worker(_shared: &Self::Shared, _worker: usize) -> Self {
        Occ
    }

    fn serial_section(shared: &Self::Shared) -> Option<MutexGuard<'_, ()>> {
        Some(shared.lock())
    }
}

impl Named for Occ {
    const ISOLATION: &'static str = VALIDATED_AT_COMMIT;

    fn shared(_workers: usize) -> Self::Shared {
        Arc::new(Mutex::new(()))
    }
}
