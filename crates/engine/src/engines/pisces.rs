//! `pisces`: the DRAM engine shell (`engines::dram`) running Pisces'
//! dual-version concurrency control (`cc::protocols::dvcc`, snapshot
//! isolation) over a three-stage commit: the redo log made durable
//! (Mnemosyne's torn-bit log, `durability::tornbit_log`), the versions made
//! visible (installed and unlocked), then written back in place into the
//! persistent home slots (`storage::pm_home`) by
//! `durability::mnemosyne_log` in its after-unlock write-back mode.
//!
//! Explained in docs/engines/pisces.md.

use crate::durability::mnemosyne_log::{MnemosyneConfig, MnemosyneLog, WriteBack};
use crate::engine::Engine;
use crate::engines::dram::OccEngine;
use crate::error::DbResult;
use crate::options::DbOptions;
use pmtx_pm::{PmBackend, Pool};
use std::sync::Arc;

/// Opens `pisces` over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    let faults = options.faults();
    let config = MnemosyneConfig {
        log_words: super::mnemosyne::LOG_WORDS,
        ack_before_fence: faults.pisces_visible_before_persist(),
        write_back: WriteBack::AfterUnlock,
        unchecked_home_slots: faults.unchecked_home_slots(),
    };
    let log = MnemosyneLog::open(config, Arc::clone(&pool))?;
    super::check_identity(options, &pool)?;
    Ok(OccEngine::open(options, log)?)
}
