//! `mnemosyne`: the DRAM engine shell (`engines::dram`) running TinySTM's
//! encounter-time locking (`cc::protocols::tinystm`) over Mnemosyne's
//! durability
//! (`durability::mnemosyne_log`: torn-bit redo log, write-back into the
//! persistent home slots of `storage::pm_home`, truncation).
//!
//! Explained in docs/engines/mnemosyne.md.

use crate::durability::mnemosyne_log::{MnemosyneConfig, MnemosyneLog, WriteBack};
use crate::engine::Engine;
use crate::engines::dram::OccEngine;
use crate::error::DbResult;
use crate::options::DbOptions;
use pmtx_pm::{PmBackend, Pool};
use std::sync::Arc;

pub use crate::durability::tornbit_log::TORNBIT_LOG_CHUNK_KIND;
pub use crate::storage::pm_home::PM_HOME_CHUNK_KIND;

/// Ring words of each worker's log: 0, the whole pool chunk (2 MiB by
/// default, the order of Mnemosyne's per-thread log), so a bulk-load
/// transaction's fragment fits.
pub(crate) const LOG_WORDS: u64 = 0;

/// Opens `mnemosyne` over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    if options.workers > crate::cc::protocols::MAX_LOCKING_WORKERS {
        return Err(crate::error::DbError::InvalidConfig(format!(
            "mnemosyne's write locks name their holders with a bit per worker: at most {} workers, got {}",
            crate::cc::protocols::MAX_LOCKING_WORKERS,
            options.workers
        )));
    }
    let faults = options.faults();
    let config = MnemosyneConfig {
        log_words: LOG_WORDS,
        ack_before_fence: faults.mnemosyne_ack_before_fence(),
        write_back: WriteBack::AtInstall,
        unchecked_home_slots: faults.unchecked_home_slots(),
    };
    let log = MnemosyneLog::open(config, Arc::clone(&pool))?;
    super::check_identity(options, &pool)?;
    Ok(OccEngine::open(options, log)?)
}
