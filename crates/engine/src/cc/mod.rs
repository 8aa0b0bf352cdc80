//! Concurrency control, written once over any row kind: Silo's OCC
//! ([`silo`]: read/write/node sets, one-pass scans, lock–validate–TID) and
//! the address index of large read and write sets (`position_index`).
//! The engines compose a protocol with a storage and a durability scheme.

pub(crate) mod position_index;
pub mod silo;
