//! How `mmdb` configures its volatile NVM region (`storage::nvm_tuples`,
//! which documents the model) from its options.
//!
//! Explained in docs/engines/mmdb.md.

use crate::cc::CcProtocol;
use crate::options::DbOptions;
use crate::storage::nvm_tuples::NvmTuplesConfig;

pub use crate::storage::nvm_tuples::NVM_TUPLE_CHUNK_KIND;

/// Whether `cc` writes per-row metadata when a transaction reads a row
/// (a read timestamp, or a read lock).
pub(crate) fn writes_metadata_on_read(cc: CcProtocol) -> bool {
    matches!(
        cc,
        CcProtocol::TicToc
            | CcProtocol::Mvcc
            | CcProtocol::Cicada
            | CcProtocol::NoWait
            | CcProtocol::WaitDie
            | CcProtocol::DlDetect
    )
}

/// The region `options` ask for (`mmdb`).
pub(crate) fn config(options: &DbOptions) -> NvmTuplesConfig {
    NvmTuplesConfig { dram_budget: options.mmdb.dram_bytes, metadata_on_read: writes_metadata_on_read(options.cc) }
}
