//! `foedus`: the DRAM engine shell (`engines::dram`) running Silo's OCC
//! over epoch group commit (`durability::group_commit`) whose checkpoint is
//! replaced by FOEDUS's log gleaner (`group_commit::gleaning`), which folds
//! the durable log into immutable 4 KiB snapshot pages in the pool
//! (`durability::snapshot`), with the volatile pages limited to a DRAM
//! budget over those snapshot pages (`durability::foedus_cache`).
//!
//! Explained in docs/engines/foedus.md.

use crate::engine::Engine;
use crate::engines::dram::OccEngine;
use crate::error::DbResult;
use crate::options::DbOptions;
use pmtx_pm::{PmBackend, Pool};
use std::sync::Arc;

pub use crate::durability::snapshot::SNAPSHOT_CHUNK_KIND;

use crate::durability::foedus_cache::FoedusLog;
use crate::durability::group_commit::GroupCommitLog;

/// Opens `foedus` over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    let mut config = super::group_commit_config(options);
    config.snapshots = true;
    let log = GroupCommitLog::open(config, Arc::clone(&pool))?;
    super::check_identity(options, &pool)?;
    Ok(OccEngine::open(options, FoedusLog::new(log, options.foedus.cache_bytes))?)
}
