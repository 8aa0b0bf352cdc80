//! Recovery (see the module comment of `group_commit`): load the current
//! checkpoint, check the log's roots and damaged segment headers, replay
//! each worker's chain in parallel up to the durable epoch, rebuild the
//! secondary indexes, take a new incarnation and a fresh checkpoint.

use super::checkpointing::next_generation;
use super::dependency_dag::dependency_dag_drops;
use super::{gleaning, GroupCommitLog, DURABLE_EPOCH_ROOT, LOG_INCARNATION_ROOT};
use crate::durability::log::{self, SegmentId, SegmentStore};
use crate::durability::{checkpoint, snapshot};
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::stats::RecoveryReport;
use crate::storage::record::{self, Record};
use crate::storage::table::Table;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Structure};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Installs a recovered version if it is newer than what the record holds.
fn install_recovered(record: &Record, tid: u64, value: Option<&[u8]>) -> bool {
    let word = record.lock(u32::MAX).expect("recovery locks never time out");
    let current_tid = record::tid_of(word);
    let newer = tid > current_tid || (current_tid == 0 && word & record::ABSENT != 0);
    if newer {
        // SAFETY (of the free): recovery runs alone, no reader exists.
        record.set_value_locked(value, &mut |old| unsafe { old.free() });
        record.store_word(record::word_of(tid, if value.is_some() { 0 } else { record::ABSENT }));
    } else {
        record.unlock();
    }
    newer
}

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// Recovers `tables` from the pool and raises `epochs` (the log's
    /// `EnginePolicy::recover`).
    pub(super) fn recover_from_log(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        debug_assert_eq!(epochs.capacity(), self.logs.len());
        let started = Instant::now();
        let pool = &*self.pool;
        let mut report = RecoveryReport { clean_shutdown: pool.begin_engine_session(), ..Default::default() };
        let (segments, broken) = self.store.find_segments()?;
        let has_checkpoint =
            pool.root(checkpoint::CHECKPOINT_ROOT).is_some() || pool.root(snapshot::SNAPSHOT_ROOT).is_some();
        // Every recovery ends by storing the durable epoch, and log segments
        // and checkpoints exist only after one finished: a pool holding
        // either without the root lost it, and reading it as 0 would drop
        // every committed record of a later epoch.
        let durable_epoch = match pool.root(DURABLE_EPOCH_ROOT) {
            Some(epoch) => epoch,
            None if !segments.is_empty() || !broken.is_empty() || has_checkpoint => {
                return Err(DbError::corrupt(
                    Structure::RootTable,
                    format!(
                        "root {DURABLE_EPOCH_ROOT} is missing, but the pool holds {} log segments{}",
                        segments.len() + broken.len(),
                        if has_checkpoint { " and a checkpoint" } else { "" }
                    ),
                ))
            }
            None => 0,
        };
        let current = if self.snapshots { None } else { checkpoint::current_checkpoint(pool)? };
        checkpoint::free_other_generations(pool, current.as_ref().map(|(m, _)| m.generation).unwrap_or(0));
        let previous_snapshot = if self.snapshots { snapshot::current_snapshot(pool)? } else { None };
        snapshot::free_other_generations(pool, previous_snapshot.as_ref().map_or(0, |s| s.meta.generation));
        let table_of = |id: u32| {
            tables.get(id as usize).ok_or_else(|| DbError::Corrupt(format!("persistent data names table #{id}")))
        };
        let mut max_epoch = 0u64;
        let mut start_epoch = 0u64;
        if let Some((meta, chunks)) = &current {
            *self.checkpoint_generation.lock() = meta.generation;
            self.note_checkpoint(meta, 0);
            start_epoch = meta.start_epoch;
            max_epoch = meta.end_epoch.max(meta.start_epoch);
            report.checkpoint_rows = checkpoint::read_rows(pool, chunks, |table, key, tid, value| {
                let table = table_of(table)?;
                let (record, _, _) = table.get_or_insert(key, value.len())?;
                install_recovered(record, tid, Some(value));
                Ok(())
            })?;
        }
        if let Some(previous) = &previous_snapshot {
            let meta = previous.meta;
            *self.checkpoint_generation.lock() = meta.generation;
            self.note_checkpoint(&meta, 0);
            start_epoch = meta.start_epoch;
            max_epoch = meta.end_epoch.max(meta.start_epoch);
            report.checkpoint_rows = previous.read_rows(pool, |table, key, tid, value| {
                let table = table_of(table)?;
                let (record, _, _) = table.get_or_insert(key, value.len())?;
                install_recovered(record, tid, Some(value));
                Ok(())
            })?;
        }
        let synchronous = self.synchronous;
        // Whether a valid record of `tid` found beyond an invalid one (or in
        // a segment whose header is damaged) proves the invalid bytes are
        // damage: it was durable together with everything before it in its
        // segment (the flush that made its epoch durable came after every
        // record of that epoch was written, and flushed each worker's log
        // up to its tail; a synchronous log may have several records of a
        // worker in flight under one fence, so its own fences prove
        // nothing), and the checkpoint does not cover it.
        let proves_damage = |tid: u64| {
            let epoch = record::epoch_of_tid(tid);
            epoch >= start_epoch && epoch <= durable_epoch
        };
        // A header torn while its segment was started leaves no record of
        // the segment it claims newer than the checkpoint (the header is
        // durable before any record; stale records of the chunk's earlier
        // use are older than the checkpoint that let it be freed).
        // The sequence field may be what is damaged: the records are also
        // tried under the sequences the segment could have had (the stored
        // one with any one bit flipped, and those of this life's chains).
        // Only the records a scan from the start reaches count: the same
        // ones an earlier recovery saw of a chunk's earlier use.
        let incarnation = pool.root(LOG_INCARNATION_ROOT).unwrap_or(0);
        let highest = segments.iter().map(|segment| segment.sequence & u64::from(u32::MAX)).max().unwrap_or(0);
        for &id in &broken {
            let Some(claimed) = self.store.claimed_segment(id) else { continue };
            let mut candidates: Vec<u64> = std::iter::once(claimed.sequence)
                .chain((0..64).map(|bit| claimed.sequence ^ (1 << bit)))
                .chain((0..=highest.saturating_add(2).min(1 << 16)).map(|n| (incarnation << 32) | n))
                .collect();
            candidates.sort_unstable();
            candidates.dedup();
            // The worker: the chunk owner's, or (its owner tag damaged) any.
            let workers = std::iter::once(claimed.worker)
                .chain((0..self.logs.len() as u16).filter(|&worker| worker != claimed.worker));
            let candidates: Vec<log::FoundSegment> = workers
                .flat_map(|worker| {
                    candidates.iter().map(move |&sequence| log::FoundSegment { worker, sequence, ..claimed })
                })
                .filter(|candidate| self.store.first_record_valid(candidate))
                .collect();
            for candidate in candidates {
                let sequence = candidate.sequence;
                let mut newer = None;
                self.store.scan_segment(&candidate, &mut |record| {
                    if newer.is_none() && proves_damage(record.tid) {
                        newer = Some(record.tid);
                    }
                })?;
                if let Some(tid) = newer {
                    return Err(DbError::corrupt(
                        Structure::LogSegment,
                        format!(
                            "the header of log chunk {} (worker {}, sequence {sequence:#x}) is damaged, but the chunk \
                             holds its durable record {tid:#x}",
                            id.0, candidate.worker
                        ),
                    ));
                }
            }
        }
        self.store.free(&broken);
        if durable_epoch > record::MAX_EPOCH {
            return Err(DbError::corrupt(
                Structure::RootTable,
                format!("durable epoch {durable_epoch} is beyond the largest epoch {}", record::MAX_EPOCH),
            ));
        }
        // A life's segment sequences are `incarnation << 32 | n`, and the
        // incarnation root is durable before any segment of its life.
        let previous_incarnation = pool.root(LOG_INCARNATION_ROOT).unwrap_or(0);
        if previous_incarnation >= u64::from(u32::MAX) {
            return Err(DbError::corrupt(
                Structure::RootTable,
                format!("log incarnation {previous_incarnation} is out of range"),
            ));
        }
        if let Some(segment) = segments.iter().find(|segment| segment.sequence >> 32 > previous_incarnation) {
            return Err(DbError::corrupt(
                Structure::LogSegment,
                format!(
                    "log segment of worker {} has sequence {:#x}, beyond log incarnation {previous_incarnation}",
                    segment.worker, segment.sequence
                ),
            ));
        }
        // SP^3: the records whose dependencies were never durable, and the
        // later records of their workers (see `durability::sp3_log`).
        let dropped = if self.dependency_dag {
            let dropped = dependency_dag_drops(&*self.store, &segments, start_epoch)?;
            report.log_records_missing_dependency = dropped.len() as u64;
            dropped
        } else {
            Default::default()
        };
        let dropped = &dropped;
        // Replay each worker's chain on its own thread.
        let mut by_worker: std::collections::BTreeMap<u16, Vec<log::FoundSegment>> = Default::default();
        for segment in &segments {
            by_worker.entry(segment.worker).or_default().push(*segment);
            let mut next = self.next_sequence.lock();
            if let Some(slot) = next.get_mut(segment.worker as usize) {
                *slot = (*slot).max(segment.sequence);
            }
        }
        // Segment sequences never repeat across lives. Record CRCs cover the
        // sequence, and reused chunks are not zeroed: a stale record of a
        // crashed life that recovery never saw (it lay after a torn record,
        // so its epoch may reach the next life's first epoch) would validate
        // in a new segment of the same sequence once a scan runs past a
        // record whose terminator was lost, and be replayed although it was
        // never acknowledged. So every recovery durably takes a new
        // incarnation, before any segment of this life exists, and new
        // sequences start above `incarnation << 32`.
        let incarnation = previous_incarnation + 1;
        pool.set_root(LOG_INCARNATION_ROOT, incarnation)?;
        for slot in self.next_sequence.lock().iter_mut() {
            *slot = (*slot).max(incarnation << 32);
        }
        let scanned = AtomicU64::new(0);
        let applied = AtomicU64::new(0);
        let skipped = AtomicU64::new(0);
        let seen_epoch = AtomicU64::new(max_epoch);
        let failure: Mutex<Option<DbError>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for chain in by_worker.values() {
                let (scanned, applied, skipped, seen_epoch, failure) =
                    (&scanned, &applied, &skipped, &seen_epoch, &failure);
                let store = &*self.store;
                scope.spawn(move || {
                    for segment in chain {
                        let scan = store.scan_segment(segment, &mut |record| {
                            scanned.fetch_add(1, Ordering::Relaxed);
                            if record.tid > record::MAX_TID {
                                failure.lock().get_or_insert(DbError::corrupt(
                                    Structure::LogRecord,
                                    format!("log record TID {:#x} is beyond the largest TID", record.tid),
                                ));
                                return;
                            }
                            let epoch = record::epoch_of_tid(record.tid);
                            seen_epoch.fetch_max(epoch, Ordering::Relaxed);
                            if epoch < start_epoch {
                                return;
                            }
                            if epoch > durable_epoch && !synchronous {
                                skipped.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            if dropped.contains(&record.tid) {
                                return;
                            }
                            for write in &record.writes {
                                let result = table_of(write.table).and_then(|table| {
                                    let (row, _, _) =
                                        table.get_or_insert(&write.key, write.value.as_ref().map_or(0, Vec::len))?;
                                    install_recovered(row, record.tid, write.value.as_deref());
                                    Ok(())
                                });
                                if let Err(error) = result {
                                    failure.lock().get_or_insert(error);
                                }
                            }
                            applied.fetch_add(1, Ordering::Relaxed);
                        });
                        match scan {
                            // The scan stops at the first invalid record: the
                            // end of the log, unless a durable record of the
                            // segment follows it. (The space a segment leaves
                            // unused when its writer moves on is not
                            // marked, so a damaged last record of a segment
                            // is not told from that end.)
                            Ok(end) => {
                                match (end.durable_end, end.stopped_at) {
                                    // A word that fails its check is no
                                    // claim: a crash while a reused chunk's
                                    // header was written leaves the old
                                    // bytes there, and a damaged word alone
                                    // loses no record.
                                    (Err(_), _) => {}
                                    // Only once the segment showed a record
                                    // of its own: a chunk reused for a new
                                    // segment whose header write a crash
                                    // tore may still show its old header
                                    // and durable end, with no record of
                                    // it at the start.
                                    (Ok(Some(durable)), Some(position))
                                        if position < durable && position > log::SEGMENT_HEADER =>
                                    {
                                        failure.lock().get_or_insert(DbError::corrupt(
                                            Structure::LogRecord,
                                            format!(
                                                "log record at {position:#x} of worker {} segment {:#x} is damaged or \
                                                 missing: the segment's records were durable up to {durable:#x}",
                                                segment.worker, segment.sequence
                                            ),
                                        ));
                                    }
                                    _ => {}
                                }
                                if let (Some(position), Some(&tid)) =
                                    (end.stopped_at, end.later.iter().find(|&&tid| proves_damage(tid)))
                                {
                                    failure.lock().get_or_insert(DbError::corrupt(
                                        Structure::LogRecord,
                                        format!(
                                            "log record at {position:#x} of worker {} segment {:#x} is damaged: the \
                                             durable record {tid:#x} follows it",
                                            segment.worker, segment.sequence
                                        ),
                                    ));
                                }
                            }
                            Err(error) => {
                                failure.lock().get_or_insert(error);
                            }
                        }
                    }
                });
            }
        });
        if let Some(error) = failure.into_inner() {
            return Err(error);
        }
        report.log_records_scanned = scanned.into_inner();
        report.log_records_applied = applied.into_inner();
        report.log_records_not_durable = skipped.into_inner();
        for table in tables {
            // Replayed deletes left absent rows: only replay needed them.
            table.drop_absent_rows_quiescent();
            if table.schema().secondaries.is_empty() {
                continue;
            }
            let mut value = Vec::new();
            let mut result = Ok(());
            table.for_each_row(|key, record| {
                if let Some(snapshot) = record.copy_value(&mut value) {
                    if !snapshot.is_absent() && result.is_ok() {
                        result = table.index_secondaries(key, &value, record);
                    }
                }
            });
            result?;
        }
        // Every epoch above is at most `MAX_EPOCH` (checked where read), and
        // the new life's TIDs must fit too.
        let last_epoch = seen_epoch.into_inner().max(durable_epoch);
        let first_epoch = last_epoch.checked_add(1).filter(|epoch| *epoch <= record::MAX_EPOCH).ok_or_else(|| {
            DbError::Corrupt(format!(
                "recovered epoch {last_epoch} leaves no epoch (the largest is {}) to run in",
                record::MAX_EPOCH
            ))
        })?;
        epochs.raise(first_epoch);
        self.epochs.set(Arc::clone(epochs)).map_err(|_| DbError::Corrupt("recovered twice".into()))?;
        // Fresh checkpoint, then drop the old logs (see the module comment).
        if !segments.is_empty() {
            let generation = next_generation(*self.checkpoint_generation.lock())?;
            let meta = if self.snapshots {
                // The gleaner folds every durable record into a snapshot
                // whose start epoch is above every epoch seen.
                let mut chains: Vec<gleaning::Chain> = Vec::new();
                for chain in by_worker.values() {
                    chains.push(chain.iter().map(|segment| (*segment, None)).collect());
                }
                let buckets = self.map_logs(&chains, start_epoch, durable_epoch)?;
                self.reduce(previous_snapshot.as_ref(), buckets, tables, generation, first_epoch)?
            } else {
                checkpoint::write_checkpoint(pool, tables, epochs, generation, first_epoch, |_| Ok(()))?
            };
            *self.checkpoint_generation.lock() = generation;
            self.note_checkpoint(&meta, 0);
            *self.last_checkpoint.lock() = Some(meta);
            let old: Vec<SegmentId> = segments.iter().map(|segment| segment.id).collect();
            self.store.free(&old);
        }
        pool.set_root(DURABLE_EPOCH_ROOT, first_epoch - 1)?;
        report.duration = started.elapsed();
        *self.recovery.lock() = Some(report);
        Ok(())
    }
}
