//! Concurrency control, written once over any row kind: the transaction
//! state and Silo's OCC ([`silo`]: read/write/node sets, one-pass scans,
//! lock–validate–TID), the protocol choice and what the protocols share
//! ([`protocol`]: `occ`'s serial validation), the lock table of the
//! two-phase-locking protocols (`lock_table`), and the address index of
//! large read and write sets (`position_index`).
//! The engines compose a protocol with a storage and a durability scheme.

pub(crate) mod concurrency;
pub mod hybrid;
pub(crate) mod lock_table;
pub(crate) mod position_index;
pub mod protocol;
pub mod silo;
pub(crate) mod tictoc;
pub(crate) mod versions;

pub use protocol::CcProtocol;

/// Words of the per-row side tables indexed by a hash of the row's address
/// (the lock table, TicToc's read timestamps): 8 MiB each.
pub(crate) const ROW_STRIPES: usize = 1 << 20;

/// The side-table word of the row at `address`: rows are at least
/// 8-aligned, and the multiply spreads neighbours over the table.
#[inline]
pub(crate) fn row_stripe(address: usize) -> usize {
    let hash = (address as u64 >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (hash >> (64 - ROW_STRIPES.trailing_zeros())) as usize
}
