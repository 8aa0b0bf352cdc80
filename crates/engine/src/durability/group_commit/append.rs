//! The workers' side ([`CommitLog`]): each worker slot's log writer, the
//! append of a commit's redo record (held to the checkpoint's reserve),
//! and the epoch tickets that say when a commit is durable.

use super::reserve::row_bytes;
use super::GroupCommitLog;
use crate::durability::log::{LogStoreMode, LogWriter, SegmentStore};
use crate::durability::CommitLog;
use crate::error::{DbError, DbResult};
use crate::stats::CommitTicket;
use crate::storage::commit_view::CommitView;
use crate::storage::record;
use pmtx_pm::PmBackend;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<B: PmBackend, S: SegmentStore> CommitLog for GroupCommitLog<B, S> {
    type Worker = LogWriter<S>;

    fn worker(&self, id: usize) -> DbResult<LogWriter<S>> {
        let shared = Arc::clone(&self.logs[id]);
        // A previous writer of this slot may have unflushed bytes: make them
        // durable before the slot's tail moves to a new segment.
        {
            let _guard = self.flush_lock.lock();
            let tail = shared.tail.load(Ordering::Acquire);
            let flushed = shared.flushed.load(Ordering::Acquire);
            if tail > flushed {
                self.store.sync(&[(flushed, tail)], LogStoreMode::Cached).map_err(Into::into)?;
                shared.flushed.store(tail, Ordering::Release);
            }
        }
        let sequence = {
            let mut next = self.next_sequence.lock();
            // Above what an earlier writer of the slot rolled to.
            next[id] = next[id].max(shared.last_sequence.load(Ordering::Acquire));
            // Recovery bounds every sequence read from the pool, so this
            // overflows only after 2^32 segments in one life.
            next[id] = next[id].checked_add(1).ok_or_else(|| {
                DbError::Corrupt(format!("log sequence of worker {id} exhausted; recover the pool to start anew"))
            })?;
            next[id]
        };
        LogWriter::in_store(Arc::clone(&self.store), id as u16, LogStoreMode::Cached, shared, sequence)
    }

    fn append<V: CommitView + ?Sized>(
        &self,
        worker: &mut LogWriter<S>,
        tid: u64,
        writes: &V,
    ) -> DbResult<CommitTicket> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(DbError::Poisoned("the database is closed".into()));
        }
        if !worker.fits(writes) {
            // This record starts a new segment: keep the checkpoint's reserve.
            self.admit_new_segment()?;
        }
        self.admit_file_record()?;
        worker.append(tid, writes)?;
        self.logged_row_bytes[worker.worker() as usize].fetch_add(row_bytes(writes), Ordering::Relaxed);
        Ok(CommitTicket::Epoch(record::epoch_of_tid(tid)))
    }

    fn read_only_ticket(&self, max_tid: u64) -> CommitTicket {
        CommitTicket::Epoch(record::epoch_of_tid(max_tid))
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        match ticket {
            CommitTicket::Durable => true,
            CommitTicket::Epoch(epoch) => self.epochs().durable() >= epoch,
            CommitTicket::Flushed { .. } => unreachable!("only Zen's heap hands out flushed tickets"),
        }
    }

    fn delete_is_durable(&self, tid: u64) -> bool {
        self.synchronous || record::epoch_of_tid(tid) <= self.epochs().durable()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}
