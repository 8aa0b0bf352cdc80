//! FOEDUS's log gleaner, which replaces the checkpoint when the log is
//! opened with `snapshots` (the `foedus` engine): instead of scanning the
//! DRAM tables it reads the durable redo records written since the last
//! snapshot and folds them into new snapshot pages (`durability::snapshot`).
//!
//! *Map*: one thread per worker log reads the records of epochs in
//! `[previous start epoch, new start epoch)` and buckets each write by
//! table (a table is a partition), keeping only each key's newest write (a
//! combiner). *Reduce*: per table, the bucket is sorted by key and merged
//! with the previous
//! snapshot's pages of that table (read whole, 4 KiB each) into new sorted
//! pages; a delete drops its key. Then the pages are fenced, the root page
//! written and fenced, the snapshot root switched, and the log segments
//! whose records are all older than the new start epoch are freed.
//!
//! The records a live worker is still appending to are read only below its
//! log's tail: every record of a durable epoch lies below the tail read
//! after that epoch became durable (the group commit flushed each log up
//! to a tail no larger), so no byte a writer may still store is read.
//!
//! Explained in docs/engines/foedus.md.

use super::checkpointing::next_generation;
use super::GroupCommitLog;
use crate::durability::checkpoint::CheckpointMeta;
use crate::durability::log::{FoundSegment, LogRecord, SegmentFormat, SegmentStore};
use crate::durability::snapshot::{self, Snapshot, SnapshotIndex, SnapshotWriter};
use crate::error::{DbError, DbResult};
use crate::storage::record;
use crate::storage::table::Table;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Structure};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A logged write: key, TID, value (`None`: a delete).
type Write = (Vec<u8>, u64, Option<Vec<u8>>);

/// Per table, each key's newest logged write: (TID, value).
type Buckets = HashMap<u32, HashMap<Vec<u8>, (u64, Option<Vec<u8>>)>>;

/// Keeps `(tid, value)` for `key` in `bucket` if it is the newest write of
/// the key seen (the mappers' combiner: only one write per key reaches the
/// reducer's sort).
fn keep_newest(bucket: &mut HashMap<Vec<u8>, (u64, Option<Vec<u8>>)>, key: Vec<u8>, tid: u64, value: Option<Vec<u8>>) {
    match bucket.entry(key) {
        std::collections::hash_map::Entry::Occupied(mut entry) => {
            if entry.get().0 < tid {
                entry.insert((tid, value));
            }
        }
        std::collections::hash_map::Entry::Vacant(entry) => {
            entry.insert((tid, value));
        }
    }
}

/// A worker's segments to read, oldest first, each with where to stop
/// (segment-relative; `None`: the whole segment, read as recovery does).
pub(super) type Chain = Vec<(FoundSegment, Option<u64>)>;

impl<B: PmBackend, S: SegmentStore> GroupCommitLog<B, S> {
    /// One gleaner run while transactions commit: the snapshot covers
    /// every epoch below a fresh start epoch.
    pub(super) fn take_snapshot(&self, tables: &[Table]) -> DbResult<CheckpointMeta> {
        let mut generation = self.checkpoint_generation.lock();
        let logged_before = self.logged_row_bytes();
        let start_epoch = self.epochs().advance();
        self.wait_workers_reach(start_epoch);
        // Only durable records are gleaned: a snapshot never holds a value
        // the log could still lose.
        self.wait_durable_epoch(start_epoch - 1)?;
        let previous = snapshot::current_snapshot(&self.pool)?;
        let from = previous.as_ref().map_or(0, |previous| previous.meta.start_epoch);
        let chains = self.live_chains()?;
        let buckets = self.map_logs(&chains, from, start_epoch - 1)?;
        let meta = self.reduce(previous.as_ref(), buckets, tables, next_generation(*generation)?, start_epoch)?;
        *generation += 1;
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.note_checkpoint(&meta, logged_before);
        *self.last_checkpoint.lock() = Some(meta);
        self.free_segments_before(start_epoch);
        Ok(meta)
    }

    /// Each worker's segments as the gleaner reads them: those its writer
    /// left whole, the one holding its tail up to the tail, none after.
    fn live_chains(&self) -> DbResult<Vec<Chain>> {
        let segment_size = self.store.segment_size();
        let mut chains = Vec::with_capacity(self.logs.len());
        for (worker, shared) in self.logs.iter().enumerate() {
            let segments = shared.segments.lock();
            let tail = shared.tail.load(Ordering::Acquire);
            let mut chain = Chain::new();
            let mut reached = false;
            for info in segments.iter() {
                let base = self.store.segment_base(info.id).ok_or_else(|| {
                    DbError::InvalidConfig("the log gleaner reads a redo log in the pool only".into())
                })?;
                let found = FoundSegment {
                    worker: worker as u16,
                    id: info.id,
                    sequence: info.sequence,
                    format: SegmentFormat::V2,
                };
                if tail > base && tail <= base + segment_size {
                    chain.push((found, Some(tail - base)));
                    reached = true;
                    break;
                }
                chain.push((found, Some(segment_size)));
            }
            if !reached && !segments.is_empty() {
                return Err(DbError::corrupt(
                    Structure::LogSegment,
                    format!("worker {worker}'s log tail {tail:#x} lies in none of its segments"),
                ));
            }
            chains.push(chain);
        }
        Ok(chains)
    }

    /// Map: the writes of every record of an epoch in `from..=to`,
    /// bucketed by table, one thread per worker chain.
    pub(super) fn map_logs(&self, chains: &[Chain], from: u64, to: u64) -> DbResult<Buckets> {
        let buckets: Mutex<Buckets> = Mutex::new(HashMap::new());
        let failure: Mutex<Option<DbError>> = Mutex::new(None);
        let store = &*self.store;
        std::thread::scope(|scope| {
            for chain in chains.iter().filter(|chain| !chain.is_empty()) {
                let (buckets, failure) = (&buckets, &failure);
                scope.spawn(move || {
                    let mut local: Buckets = HashMap::new();
                    let mut visit = |record: LogRecord| {
                        let epoch = record::epoch_of_tid(record.tid);
                        if epoch < from || epoch > to {
                            return;
                        }
                        for write in record.writes {
                            keep_newest(local.entry(write.table).or_default(), write.key, record.tid, write.value);
                        }
                    };
                    for (segment, end) in chain {
                        let scanned = match end {
                            Some(end) => store.scan_live(segment, *end, &mut visit),
                            None => store.scan_segment(segment, &mut visit).map(|_| ()),
                        };
                        if let Err(error) = scanned {
                            failure.lock().get_or_insert(error);
                            return;
                        }
                    }
                    let mut buckets = buckets.lock();
                    for (table, writes) in local {
                        let bucket = buckets.entry(table).or_default();
                        for (key, (tid, value)) in writes {
                            keep_newest(bucket, key, tid, value);
                        }
                    }
                });
            }
        });
        match failure.into_inner() {
            Some(error) => Err(error),
            None => Ok(buckets.into_inner()),
        }
    }

    /// Reduce: per table, the newest logged write of each key merged with
    /// the previous snapshot's rows into the pages of snapshot
    /// `generation`, which is then installed (see the module comment).
    pub(super) fn reduce(
        &self,
        previous: Option<&Snapshot>,
        mut buckets: Buckets,
        tables: &[Table],
        generation: u64,
        start_epoch: u64,
    ) -> DbResult<CheckpointMeta> {
        if let Some(table) = buckets.keys().find(|table| !tables.iter().any(|t| t.id().0 == **table)) {
            return Err(DbError::Corrupt(format!("the redo log names table #{table}")));
        }
        let pool = &*self.pool;
        let mut writer = SnapshotWriter::new(pool, generation)?;
        if self.faults.foedus_root_before_pages() {
            writer = writer.with_pages_flushed_after_root();
        }
        let mut old_rows: Vec<snapshot::SnapshotRow> = Vec::new();
        let mut write_tables = |writer: &mut SnapshotWriter<'_, B>| -> DbResult<()> {
            for table in tables {
                let id = table.id().0;
                // One write per key (the mappers kept the newest), in key
                // order.
                let mut writes: Vec<Write> = buckets
                    .remove(&id)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(key, (tid, value))| (key, tid, value))
                    .collect();
                writes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                old_rows.clear();
                if let Some((snapshot, pages)) =
                    previous.and_then(|previous| previous.table(id).map(|pages| (previous, pages)))
                {
                    snapshot.read_table(pool, pages, |key, tid, value| {
                        old_rows.push(snapshot::SnapshotRow { key: key.to_vec(), tid, value: value.to_vec() });
                        Ok(())
                    })?;
                    if !old_rows.is_sorted_by(|a, b| a.key < b.key) {
                        return Err(DbError::corrupt(
                            Structure::Checkpoint,
                            format!(
                                "snapshot generation {}: table #{id}'s rows are out of order",
                                snapshot.meta.generation
                            ),
                        ));
                    }
                }
                merge_table(writer, id, &old_rows, &writes)?;
            }
            Ok(())
        };
        if let Err(error) = write_tables(&mut writer) {
            writer.abandon_unfinished();
            return Err(error);
        }
        let (meta, index) = writer.install(start_epoch)?;
        *self.snapshot_index.lock() = Some(Arc::new(index));
        Ok(meta)
    }

    /// The page index of the last snapshot this log installed (`None`
    /// before the first).
    pub(crate) fn snapshot_index(&self) -> Option<Arc<SnapshotIndex>> {
        self.snapshot_index.lock().clone()
    }
}

/// Writes table `id`: the previous rows (sorted, unique) merged with the
/// newest logged write of each key (sorted, unique).
fn merge_table<B: PmBackend>(
    writer: &mut SnapshotWriter<'_, B>,
    id: u32,
    old_rows: &[snapshot::SnapshotRow],
    writes: &[Write],
) -> DbResult<()> {
    writer.begin_table(id)?;
    let (mut old, mut new) = (old_rows.iter().peekable(), writes.iter().peekable());
    loop {
        match (old.peek(), new.peek()) {
            (None, None) => return Ok(()),
            (Some(row), write) if write.is_none_or(|write| row.key < write.0) => {
                writer.row(&row.key, row.tid, &row.value)?;
                old.next();
            }
            (row, Some((key, tid, value))) => {
                // A write replaces the row of its key if newer (the rows
                // are of earlier epochs than every write gleaned now).
                let replaced = row.filter(|row| row.key == *key);
                match replaced {
                    Some(row) if row.tid > *tid => writer.row(&row.key, row.tid, &row.value)?,
                    _ => match value {
                        Some(value) => writer.row(key, *tid, value)?,
                        None => writer.note_delete(*tid),
                    },
                }
                if replaced.is_some() {
                    old.next();
                }
                new.next();
            }
            (Some(_), None) => unreachable!("matched by the first arm"),
        }
    }
}
