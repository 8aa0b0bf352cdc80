//! Concurrency control, written once over any row kind and any protocol.
//!
//! # Layout
//!
//! * `transaction`: a worker's transaction state (`TxState`: read, write
//!   and node sets, one-pass scans, the commit's steps), which calls the
//!   hooks of the worker's protocol; `tx_sets`: the part of that state the
//!   hooks read (`TxSets`: the read, write and node sets and the checks
//!   protocols share), below both the transaction state and the
//!   protocols; [`write_set`]: the buffered writes and their commit-time
//!   row locks; `secondaries`: the secondary-index bookkeeping of a commit.
//! * `protocols`: the `Protocol` trait (its hooks), one file per
//!   protocol (`silo`, `occ`, `tictoc`, `no_wait`, `wait_die`, `dl_detect`,
//!   `mvcc`, `hekaton`, `cicada`, `hstore`, and the PHyTM family's schemes
//!   in `phytm`), each owning its side tables, with the helpers a family
//!   shares (`two_phase`, `multi_version`, `timestamp_order`), and the
//!   catalog: one macro invocation listing every protocol on one line,
//!   which generates [`CcProtocol`] and the dispatch of the hooks.
//! * The mechanisms protocols share: the lock table (`lock_table`), the
//!   read timestamps (`read_timestamps`), the older versions
//!   (`versions`), the address index of large read and write sets
//!   (`position_index`).
//! * `concurrency`: the state one engine's workers share (the protocol's
//!   side tables) and what the engine asks of it.
//!
//! # Adding a protocol
//!
//! One new file `protocols/NAME.rs` (a worker-state type implementing
//! `Protocol` and `Named`) and one line in the list of `protocols/mod.rs`
//! (`Variant = "cli-name" => NAME::Type,`); nothing else in `cc` lists
//! protocols.
//!
//! The engines compose a protocol with a storage and a durability scheme;
//! nothing here knows which engine it runs in (each part gets its own
//! small config, such as the PHyTM family's `HybridConfig`).
//!
//! Explained in docs/concurrency.md ("Concurrency-control protocols";
//! ARCHITECTURE.md §5 for the traits).

pub(crate) mod concurrency;
pub(crate) mod lock_table;
pub(crate) mod position_index;
pub(crate) mod protocols;
pub(crate) mod read_timestamps;
pub(crate) mod secondaries;
pub(crate) mod transaction;
pub(crate) mod tx_sets;
pub(crate) mod versions;
pub mod write_set;

pub use protocols::CcProtocol;

/// Words of the per-row side tables indexed by a hash of the row's address
/// (the lock table, the read timestamps): 8 MiB each.
pub(crate) const ROW_STRIPES: usize = 1 << 20;

/// The side-table word of the row at `address`: rows are at least
/// 8-aligned, and the multiply spreads neighbours over the table.
#[inline]
pub(crate) fn row_stripe(address: usize) -> usize {
    let hash = (address as u64 >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (hash >> (64 - ROW_STRIPES.trailing_zeros())) as usize
}
