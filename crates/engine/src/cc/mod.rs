//! Concurrency control, written once over any row kind: the transaction
//! state and Silo's OCC ([`silo`]: read/write/node sets, one-pass scans,
//! lock–validate–TID), the protocol choice and what the protocols share
//! ([`protocol`]: `occ`'s serial validation), the lock table of the
//! two-phase-locking protocols (`lock_table`), and the address index of
//! large read and write sets (`position_index`).
//! The engines compose a protocol with a storage and a durability scheme.

pub(crate) mod concurrency;
pub(crate) mod lock_table;
pub(crate) mod position_index;
pub mod protocol;
pub mod silo;
pub(crate) mod tictoc;
pub(crate) mod versions;

pub use protocol::CcProtocol;
