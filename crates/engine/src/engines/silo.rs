//! `silo`: Silo's OCC over DRAM records with no durability (the papers'
//! DBX-DRAM upper bound).
//!
//! Explained in docs/engines/silo.md.

use crate::durability::{CommitLog, EnginePolicy};
use crate::engine::{CommitTicket, EngineStats};
use crate::epoch::Epochs;
use crate::error::DbResult;
use crate::storage::commit_view::CommitView;
use crate::storage::table::Table;
use std::sync::Arc;

/// No durability: the `silo` engine.
pub(crate) struct NoLog;

impl CommitLog for NoLog {
    type Worker = ();
    fn worker(&self, _id: usize) -> DbResult<()> {
        Ok(())
    }
    fn append<V: CommitView + ?Sized>(&self, _worker: &mut (), _tid: u64, _writes: &V) -> DbResult<CommitTicket> {
        Ok(CommitTicket::Durable)
    }
    fn read_only_ticket(&self, _max_tid: u64) -> CommitTicket {
        CommitTicket::Durable
    }
    fn is_durable(&self, _ticket: CommitTicket) -> bool {
        true
    }
}

impl EnginePolicy for NoLog {
    fn recover(&self, _tables: &[Table], _epochs: &Arc<Epochs>) -> DbResult<()> {
        Ok(())
    }
    fn on_epoch(&self) {}
    fn checkpoint(&self, _tables: &[Table]) -> DbResult<()> {
        Ok(())
    }
    fn close(&self, _tables: &[Table], _clean: bool) -> DbResult<()> {
        Ok(())
    }
    fn stats(&self) -> EngineStats {
        EngineStats::default()
    }
}
