//! `cc=silo` (the default): Silo's OCC (Silo §4.4). The body reads without
//! locks and remembers each version read; the commit locks the write set,
//! validates the read set (every version unchanged and not locked by
//! another) and the node set (no phantom in a scanned range), and picks a
//! TID above everything read or overwritten. Every hook is the trait's
//! default: Silo needs no side table.

use crate::cc::protocols::{Named, Protocol};

/// The isolation of the protocols that validate at commit.
pub(crate) const VALIDATED_AT_COMMIT: &str =
    "strictly serializable; reads see the latest committed versions, validated at commit";

/// A worker's state under Silo: none beyond the transaction's sets.
pub(crate) struct Silo;

impl Protocol for Silo {
    type Shared = ();

    fn worker(_shared: &(), _worker: usize) -> Self {
        Silo
    }
}

impl Named for Silo {
    const ISOLATION: &'static str = VALIDATED_AT_COMMIT;

    fn shared(_workers: usize) {}
}
