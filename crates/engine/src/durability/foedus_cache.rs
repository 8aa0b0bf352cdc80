//! `foedus`'s durability with its DRAM budget: epoch group commit whose
//! log the gleaner folds into snapshot pages (`group_commit`, opened with
//! `snapshots`), plus the model of FOEDUS's volatile-page pool of limited
//! size over those snapshot pages.
//!
//! **Residency.** Each row's `home` word (`storage::record`, otherwise used
//! by `mmdb` only) says where FOEDUS would find it: `UNTRACKED` (not seen
//! since the engine opened: counted at the next eviction pass), `RESIDENT`
//! or `REFERENCED` (in a volatile page; `REFERENCED` once touched since
//! the last pass), or `EVICTED + page` (only in the snapshot, `page` the
//! pool offset of its 4 KiB snapshot page divided by 4096: the snapshot
//! pointer).
//!
//! **Eviction** runs after each snapshot the gleaner installs, as FOEDUS
//! drops volatile pages equal to the snapshot: it walks every row once,
//! re-points evicted rows at the new snapshot's pages (the old ones are
//! freed), sums the bytes (key plus value) of the resident rows, and while
//! they exceed the budget evicts rows whose newest version is in the
//! snapshot (its epoch is below the snapshot's start epoch), a clock's
//! second chance sparing `REFERENCED` rows once.
//!
//! **Trigger.** Besides every `--checkpoint-s` seconds, the gleaner runs
//! when the volatile pool is full, as FOEDUS triggers a snapshot when its
//! volatile page pool reaches a threshold: the resident bytes of the last
//! pass plus the bytes made resident since (rows first seen, misses)
//! exceed the budget, and at least a quarter of the budget was made
//! resident since the last pass (so a pass that could not reach the
//! budget, its rows being newer than the snapshot, does not re-trigger at
//! once). A bulk load beyond the budget is thus gleaned and evicted within
//! the checkpointer's pressure gap, and a run starts, as the paper's FOEDUS
//! does, with the rows beyond the budget only in snapshot pages.
//!
//! **A miss**: a transaction that reads or writes an evicted row first
//! reads the row's whole 4 KiB snapshot page from the pool (charged as NVM
//! reads by the backend; Zen's read amplification), and the row becomes
//! resident again, except on a read while the volatile pool is at its
//! budget: FOEDUS then reads the row through its snapshot page without a
//! volatile copy, so the row stays evicted and its next read pays the page
//! again (a write always takes a volatile copy).
//!
//! What is a model here: the DRAM record keeps the row's authoritative
//! copy while it is evicted (indexes, protocol, log and recovery are the
//! shell's, unchanged), so the engine's DRAM use does not shrink; only the
//! cost of FOEDUS's access to the snapshot page is paid (as `mmdb` pays the
//! NVM access of its rows beyond its budget).
//!
//! Explained in docs/engines/foedus.md.

use crate::durability::group_commit::GroupCommitLog;
use crate::durability::log::LogWriter;
use crate::durability::segments::PoolSegments;
use crate::durability::snapshot::{SnapshotIndex, PAGE_SIZE};
use crate::durability::{CommitLog, EnginePolicy};
use crate::epoch::Epochs;
use crate::error::DbResult;
use crate::stats::{CommitTicket, EngineStats};
use crate::storage::commit_view::CommitView;
use crate::storage::record::{self, Record};
use crate::storage::table::Table;
use pmtx_pm::PmBackend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes a row takes in a volatile page (key plus value capacity).
#[inline]
fn row_bytes(key: &[u8], row: &Record) -> u64 {
    (key.len() + row.value_capacity()) as u64
}

const UNTRACKED: u32 = 0;
const RESIDENT: u32 = 1;
const REFERENCED: u32 = 2;
/// `home` of an evicted row: this plus its snapshot page's number.
const EVICTED: u32 = 3;

/// `foedus`'s commit log: group commit with snapshots, and the budgeted
/// page cache over them (module docs).
pub(crate) struct FoedusLog<B: PmBackend> {
    inner: GroupCommitLog<B, PoolSegments<B>>,
    /// Bytes (keys plus values) of resident rows the cache may hold.
    budget: u64,
    /// Resident bytes counted by the last eviction pass.
    resident_bytes: AtomicU64,
    /// Bytes made resident since the last pass started (rows first seen,
    /// misses): the volatile pool's growth (module docs, trigger).
    grown_bytes: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl<B: PmBackend> FoedusLog<B> {
    /// `inner` (opened with `snapshots`) with a DRAM budget of `budget`
    /// bytes of rows.
    pub(crate) fn new(inner: GroupCommitLog<B, PoolSegments<B>>, budget: u64) -> Self {
        Self {
            inner,
            budget,
            resident_bytes: AtomicU64::new(0),
            grown_bytes: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// A transaction touches `row` (`write`: installs a version of it): a
    /// miss reads its snapshot page. A read miss while the volatile pool
    /// is full leaves the row evicted (FOEDUS reads it through the
    /// snapshot page without a volatile copy), so every such read pays the
    /// page again; a write always makes it resident (FOEDUS installs a
    /// volatile page for it).
    #[inline]
    fn touch(&self, row: &Record, write: bool) {
        match row.home().load(Ordering::Relaxed) {
            REFERENCED => return,
            RESIDENT => {}
            UNTRACKED => {
                self.grown_bytes.fetch_add(row_bytes(row.key(), row), Ordering::Relaxed);
            }
            evicted => {
                let page = u64::from(evicted - EVICTED) * PAGE_SIZE;
                // The whole page is read to reach one row.
                let _ = self.inner.pool().backend().read_volatile(page, PAGE_SIZE);
                self.misses.fetch_add(1, Ordering::Relaxed);
                if !write && self.pool_full() {
                    return;
                }
                self.grown_bytes.fetch_add(row_bytes(row.key(), row), Ordering::Relaxed);
            }
        }
        row.home().store(REFERENCED, Ordering::Relaxed);
    }

    /// Whether the volatile pool is at its budget: the last pass's
    /// resident bytes plus those made resident since.
    #[inline]
    fn pool_full(&self) -> bool {
        self.resident_bytes.load(Ordering::Relaxed) + self.grown_bytes.load(Ordering::Relaxed) >= self.budget
    }

    /// The eviction pass after a snapshot (module docs).
    fn evict(&self, tables: &[Table], index: &SnapshotIndex) {
        // Rows made resident from here on are counted by this pass or the
        // next trigger (at worst both: the trigger errs early).
        self.grown_bytes.store(0, Ordering::Relaxed);
        let pointer = |table: u32, key: &[u8]| {
            index
                .page_of(table, key)
                .map(|at| at / PAGE_SIZE)
                .filter(|page| *page <= u64::from(u32::MAX - EVICTED))
                .map(|page| EVICTED + page as u32)
        };
        // Pass 1: re-point evicted rows, count resident bytes.
        let mut resident = 0u64;
        for table in tables {
            // Announced as a background reader while rows are walked, so
            // no row or value buffer it reaches is freed under it; one pin
            // per table, as the checkpoint does.
            let _pin = self.inner.epochs().pin_background();
            let id = table.id().0;
            table.for_each_row(|key, row| {
                let home = row.home().load(Ordering::Relaxed);
                if home >= EVICTED {
                    // A row the new snapshot has no page for (none: an
                    // evicted row is in every later snapshot) stays resident.
                    let new = pointer(id, key).unwrap_or(RESIDENT);
                    if row.home().compare_exchange(home, new, Ordering::Relaxed, Ordering::Relaxed).is_ok()
                        && new < EVICTED
                    {
                        resident += row_bytes(key, row);
                    }
                } else {
                    resident += row_bytes(key, row);
                }
            });
        }
        // Pass 2 (and a second turn of the clock if needed): evict rows
        // whose newest version is in the snapshot.
        for _turn in 0..2 {
            if resident <= self.budget {
                break;
            }
            for table in tables {
                let _pin = self.inner.epochs().pin_background();
                let id = table.id().0;
                table.for_each_row(|key, row| {
                    if resident <= self.budget {
                        return;
                    }
                    let home = row.home().load(Ordering::Relaxed);
                    if home >= EVICTED {
                        return;
                    }
                    if home == REFERENCED {
                        let _ = row.home().compare_exchange(home, RESIDENT, Ordering::Relaxed, Ordering::Relaxed);
                        return;
                    }
                    let word = row.word();
                    if word & (record::LOCKED | record::ABSENT) != 0
                        || record::epoch_of_tid(record::tid_of(word)) >= index.start_epoch
                    {
                        return;
                    }
                    let Some(new) = pointer(id, key) else { return };
                    if row.home().compare_exchange(home, new, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                        resident = resident.saturating_sub(row_bytes(key, row));
                        self.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        }
        self.resident_bytes.store(resident, Ordering::Relaxed);
    }
}

impl<B: PmBackend> CommitLog for FoedusLog<B> {
    type Worker = LogWriter<PoolSegments<B>>;
    const VOLATILE_ROWS: bool = true;

    fn worker(&self, id: usize) -> DbResult<Self::Worker> {
        self.inner.worker(id)
    }

    fn append<V: CommitView + ?Sized>(
        &self,
        worker: &mut Self::Worker,
        tid: u64,
        writes: &V,
    ) -> DbResult<CommitTicket> {
        self.inner.append(worker, tid, writes)
    }

    #[inline]
    fn on_row_read(&self, row: &Record, _value_len: usize) {
        self.touch(row, false);
    }

    #[inline]
    fn on_row_install(
        &self,
        _worker: &mut Self::Worker,
        _table: crate::schema::TableId,
        row: &Record,
        _value: Option<&[u8]>,
        _word: u64,
    ) {
        self.touch(row, true);
    }

    fn read_only_ticket(&self, max_tid: u64) -> CommitTicket {
        self.inner.read_only_ticket(max_tid)
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        self.inner.is_durable(ticket)
    }

    fn delete_is_durable(&self, tid: u64) -> bool {
        self.inner.delete_is_durable(tid)
    }

    fn is_closed(&self) -> bool {
        CommitLog::is_closed(&self.inner)
    }
}

impl<B: PmBackend> EnginePolicy for FoedusLog<B> {
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        self.inner.recover(tables, epochs)
    }

    fn on_epoch(&self) {
        self.inner.on_epoch();
    }

    fn checkpoint(&self, tables: &[Table]) -> DbResult<()> {
        self.inner.checkpoint(tables)?;
        if let Some(index) = self.inner.snapshot_index() {
            self.evict(tables, &index);
        }
        Ok(())
    }

    /// The log fills the pool, or the volatile pool is full (module docs,
    /// trigger).
    fn log_space_low(&self) -> bool {
        let grown = self.grown_bytes.load(Ordering::Relaxed);
        let full = self.resident_bytes.load(Ordering::Relaxed) + grown > self.budget && grown >= self.budget / 4;
        full || self.inner.log_space_low()
    }

    fn close(&self, tables: &[Table], clean: bool) -> DbResult<()> {
        self.inner.close(tables, clean)
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            cache_misses: self.misses.load(Ordering::Relaxed),
            cache_evictions: self.evictions.load(Ordering::Relaxed),
            cache_bytes: self.resident_bytes.load(Ordering::Relaxed),
            ..self.inner.stats()
        }
    }
}
