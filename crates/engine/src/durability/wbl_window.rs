//! Write-behind logging's group commit (Arulraj et al., VLDB 2016, as
//! zen-plus.txt §2.3 and §5.1 describe and run it) over Zen's tuple heap:
//! the record log in the pool, the window rule, and the committer of the
//! `wbl` engine.
//!
//! `wbl` writes every new version into a free heap slot at commit and
//! makes it durable there (`durability::zen_persist::persist_versions`:
//! the versions, their `clwb`s and one fence), exactly once; there is no
//! redo log of values and no LP bit. What makes versions *committed* is a small record, written
//! once per group-commit window (100 µs by default):
//!
//! * `c_p`, the persisted commit timestamp: every transaction with a
//!   timestamp (TID) at or below it has all its versions durable;
//! * `c_d`, the dirty commit timestamp: no version in the heap has a
//!   timestamp above it.
//!
//! Recovery keeps the versions at or below `c_p` of the latest durable
//! record and discards those in (`c_p`, `c_d`]; a version above `c_d` is
//! damage. A commit is acknowledged once a record with `c_p` at or above its
//! TID is durable.
//!
//! # Windows are epochs
//!
//! A window is an epoch of the engine's [`Epochs`] (the high bits of every
//! TID), and every advance of the `wbl` engine's global epoch goes through
//! [`WriteBehindLog::advance_epoch`] under the log's lock. Two invariants:
//!
//! * (I1) *every TID in the heap is at most the `c_d` of the latest durable
//!   record.* A commit's TID lies in an epoch at most the global epoch, and
//!   the global epoch moves to `e` only after a record with `c_d` at or
//!   above the last TID of `e` is durable ([`WriteBehindLog::advance_epoch`]
//!   writes one first when the last record does not cover `e`).
//! * (I2) *every commit with a TID at or below the `c_p` of a durable record
//!   had all its versions durable before that record was written.* A group
//!   commit ([`WriteBehindLog::group_commit`]) reads the global epoch `g`,
//!   waits until every active worker announced `g` or later (so every
//!   attempt that could still pick a TID in an epoch below `g` has ended,
//!   its versions fenced by its own commit), and only then writes `c_p` =
//!   the last TID of `g - 1`. A worker that stops announcing in the middle
//!   of a commit (the heap's wait for space) announces again before it
//!   picks its TID.
//!
//! After the record the durable epoch is published (`Epochs::set_durable`),
//! which acknowledges every commit of epochs below `g`, and the epoch
//! advances to open the next window. A window is skipped when no worker
//! committed a write above the durable epoch (nor superseded versions
//! stamped above it) and no commit waits, so an idle database does not
//! spend epochs (a pool has 2^29 of them).
//!
//! # Reuse of superseded versions
//!
//! A version superseded by a commit in (`c_p`, `c_d`] is what recovery
//! falls back to if that commit's window is lost, so the heap frees a
//! superseded slot only once its successor's epoch is durable (the heap's
//! horizon is at most the durable epoch + 1 under `storage::zen::heap::CommitRule::Window`).
//!
//! # The record log
//!
//! One chunk of the pool (owner kind [`WINDOW_CHUNK_KIND`]) is a ring of
//! 64-byte records, one per cache line (all integers little-endian):
//!
//! ```text
//! +0   u64  magic "PMTXWBL1"
//! +8   u64  sequence (1, 2, ...; record n lives in line n mod lines)
//! +16  u64  c_p (a TID)
//! +24  u64  c_d (a TID, >= c_p)
//! +32  u32  CRC-32 of bytes 0..32
//! +36  28 bytes of zero
//! ```
//!
//! A record is written with ordinary stores into its line, `clwb`'d and
//! fenced (one fence per window). Stores to one line reach the medium in
//! order, so a crash leaves the line with a prefix of the new record over
//! the old one, which fails the CRC (it covers the sequence); the previous
//! record, in another line, is intact. Recovery takes the CRC-valid record
//! with the highest sequence. A fresh pool has no record: nothing has
//! committed, and no version may exist (`c_p` = `c_d` = 0).
//!
//! Explained in docs/engines/wbl.md (and docs/format.md, "WBL record log").

use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::storage::record::{self, MAX_EPOCH};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pmtx_pm::{ChunkOwner, PmBackend, Pool, PoolError, Structure, CACHE_LINE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Chunk-owner kind of the record log ("WB").
pub const WINDOW_CHUNK_KIND: u16 = 0x5742;

const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"PMTXWBL1");
/// Bytes of a record that carry data (the rest of its line stays zero).
const RECORD_BYTES: usize = 40;
const CRC_AT: usize = 32;

const _: () = assert!(RECORD_BYTES <= CACHE_LINE as usize, "a record never spans two lines");

/// One group-commit record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowRecord {
    /// Position in the log (the newest valid record wins).
    pub(crate) sequence: u64,
    /// `c_p`: every transaction with a TID at or below it is durable.
    pub(crate) persisted: u64,
    /// `c_d`: no version has a TID above it.
    pub(crate) dirty: u64,
}

impl WindowRecord {
    fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut bytes = [0u8; RECORD_BYTES];
        for (at, word) in [RECORD_MAGIC, self.sequence, self.persisted, self.dirty].into_iter().enumerate() {
            bytes[at * 8..at * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        let crc = crc32fast::hash(&bytes[..CRC_AT]);
        bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// The record in `bytes`, if they hold a whole, plausible one.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let word = |at: usize| u64::from_le_bytes(bytes[at * 8..at * 8 + 8].try_into().expect("8 bytes"));
        let stored = u32::from_le_bytes(bytes[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes"));
        if word(0) != RECORD_MAGIC || stored != crc32fast::hash(&bytes[..CRC_AT]) {
            return None;
        }
        let record = Self { sequence: word(1), persisted: word(2), dirty: word(3) };
        (record.sequence != 0 && record.persisted <= record.dirty && record.dirty <= record::MAX_TID).then_some(record)
    }
}

/// Parses one wbl record (its 64 bytes) as recovery does: (sequence, c_p,
/// c_d) if it is whole and plausible. For fuzzing; never panics.
pub fn parse_record(bytes: &[u8]) -> Option<(u64, u64, u64)> {
    let bytes = bytes.get(..RECORD_BYTES)?;
    WindowRecord::decode(bytes).map(|record| (record.sequence, record.persisted, record.dirty))
}

/// The last TID of `epoch` (a window's whole range ends there).
fn last_tid_of_epoch(epoch: u64) -> u64 {
    record::first_tid_of_epoch(epoch + 1) - 1
}

/// What the committer knows of the latest durable record.
struct LogState {
    /// Sequence of the next record.
    next_sequence: u64,
    /// The latest record's `c_p`.
    persisted: u64,
    /// The epoch whose last TID is the latest record's `c_d`.
    dirty_epoch: u64,
}

/// The record log and the committer of `wbl` (see the module docs).
pub(crate) struct WriteBehindLog<B: PmBackend> {
    pool: Arc<Pool<B>>,
    epochs: Arc<Epochs>,
    /// Pool offset of the log's chunk.
    base: u64,
    /// Records the ring holds.
    lines: u64,
    /// Serialises records and epoch advances (invariant I1).
    state: Mutex<LogState>,
    /// Per worker: the epoch of its latest writing commit, or the stamp
    /// of the versions it superseded if later (each worker writes only its
    /// own line), so an idle window is skipped once both are durable.
    committed_epoch: Vec<CachePadded<AtomicU64>>,
    /// Per worker: the epoch it waits for to become durable (0: none).
    awaited_epoch: Vec<CachePadded<AtomicU64>>,
    /// Set by close and crash: no record is written any more.
    closed: AtomicBool,
    records_written: AtomicU64,
}

impl<B: PmBackend> WriteBehindLog<B> {
    /// Finds the log in `pool` (or creates it) and returns it with the
    /// latest durable record, if any.
    pub(crate) fn open(
        pool: &Arc<Pool<B>>,
        epochs: &Arc<Epochs>,
        workers: usize,
    ) -> DbResult<(Self, Option<WindowRecord>)> {
        let chunks: Vec<_> =
            pool.owned_chunks().into_iter().filter(|(_, owner)| owner.kind() == WINDOW_CHUNK_KIND).collect();
        let chunk_size = pool.geometry().chunk_size;
        let (chunk, latest) = match chunks.as_slice() {
            [] => {
                // IMPORTANT: zeroed, so no line of a previous owner reads
                // as a record.
                let chunk = pool.allocate_chunk(ChunkOwner::compose(WINDOW_CHUNK_KIND, 0, 0), true).map_err(
                    |error| match error {
                        PoolError::Full { .. } => {
                            DbError::OutOfSpace(format!("no chunk left for the wbl record log: {error}"))
                        }
                        other => DbError::Pool(other),
                    },
                )?;
                (chunk, None)
            }
            [(chunk, _)] => {
                let mut bytes = vec![0u8; chunk_size as usize];
                pool.backend().read(pool.chunk_offset(*chunk), &mut bytes);
                let latest = bytes
                    .chunks_exact(CACHE_LINE as usize)
                    .filter_map(WindowRecord::decode)
                    .max_by_key(|record| record.sequence);
                (*chunk, latest)
            }
            more => {
                return Err(DbError::corrupt(
                    Structure::WblLog,
                    format!("the pool holds {} wbl record logs; one is allowed", more.len()),
                ))
            }
        };
        let log = Self {
            base: pool.chunk_offset(chunk),
            lines: chunk_size / CACHE_LINE,
            pool: Arc::clone(pool),
            epochs: Arc::clone(epochs),
            state: Mutex::new(LogState {
                next_sequence: latest.map_or(1, |record| record.sequence + 1),
                persisted: latest.map_or(0, |record| record.persisted),
                dirty_epoch: latest.map_or(0, |record| record::epoch_of_tid(record.dirty)),
            }),
            committed_epoch: (0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            awaited_epoch: (0..workers).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            closed: AtomicBool::new(false),
            records_written: AtomicU64::new(0),
        };
        Ok((log, latest))
    }

    /// Writes the record (`persisted`, last TID of `dirty_epoch`) and makes
    /// it durable: ordinary stores into its line, `clwb`, one fence.
    fn write_record(&self, state: &mut LogState, persisted: u64, dirty_epoch: u64) {
        debug_assert!(persisted <= last_tid_of_epoch(dirty_epoch));
        let record = WindowRecord { sequence: state.next_sequence, persisted, dirty: last_tid_of_epoch(dirty_epoch) };
        let offset = self.base + (record.sequence % self.lines) * CACHE_LINE;
        let backend = self.pool.backend();
        backend.write(offset, &record.encode());
        backend.flush(offset, RECORD_BYTES as u64);
        backend.crash_point("wbl: window record written, before its fence");
        backend.fence();
        backend.crash_point("wbl: window record durable");
        state.next_sequence += 1;
        state.persisted = persisted;
        state.dirty_epoch = dirty_epoch;
        self.records_written.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts a life after recovery, which left only committed versions in
    /// the heap, every TID of them at most the last TID of `first_epoch -
    /// 1`: a record saying so (everything committed, the next window
    /// open) is made durable, then the epochs move to `first_epoch`. So no
    /// version discarded by this recovery can ever be covered by a later
    /// record, and a crash before the record recovers the same state again.
    pub(crate) fn start(&self, first_epoch: u64) -> DbResult<()> {
        if first_epoch + 1 >= MAX_EPOCH {
            return Err(DbError::Corrupt(format!(
                "recovered epoch {first_epoch} leaves no wbl window to run in (the largest epoch is {MAX_EPOCH})"
            )));
        }
        let mut state = self.state.lock();
        self.write_record(&mut state, last_tid_of_epoch(first_epoch - 1), first_epoch + 1);
        self.epochs.raise(first_epoch);
        Ok(())
    }

    /// Advances the global epoch, first making durable a record whose `c_d`
    /// covers the new epoch if the latest one does not (invariant I1). The
    /// `wbl` engine's only way to advance its epoch. `None` once closed, or
    /// when the epochs are exhausted (the database is then poisoned).
    pub(crate) fn advance_epoch(&self) -> Option<u64> {
        let mut state = self.state.lock();
        self.advance_locked(&mut state)
    }

    fn advance_locked(&self, state: &mut LogState) -> Option<u64> {
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        let next = self.epochs.global() + 1;
        if next + 1 >= MAX_EPOCH {
            self.closed.store(true, Ordering::SeqCst);
            eprintln!("pmtx: wbl used every epoch a TID can hold; the database is poisoned");
            return None;
        }
        if next > state.dirty_epoch {
            let persisted = state.persisted;
            self.write_record(state, persisted, next + 1);
        }
        let advanced = self.epochs.advance();
        debug_assert_eq!(advanced, next, "only the write-behind log advances wbl's epoch");
        Some(advanced)
    }

    /// Worker `worker` committed a write that needs `epoch` durable: the
    /// epoch of its TID, or the reclamation stamp of the versions it
    /// superseded if later (they are reused once that epoch is durable).
    #[inline]
    pub(crate) fn note_commit(&self, worker: usize, epoch: u64) {
        self.committed_epoch[worker].store(epoch, Ordering::Release);
    }

    /// Whether a commit or a waiter needs an epoch above the durable one.
    fn window_pending(&self) -> bool {
        let durable = self.epochs.durable();
        self.committed_epoch.iter().chain(&self.awaited_epoch).any(|epoch| epoch.load(Ordering::Acquire) > durable)
    }

    /// One group commit (invariant I2): waits until every active worker
    /// works in the current epoch `g` or later, makes the record (`c_p` =
    /// last TID of `g - 1`) durable, publishes `g - 1` as the durable epoch
    /// and opens the next window. Skipped when nothing waits for it unless
    /// `force`.
    pub(crate) fn group_commit(&self, force: bool) {
        if !force && !self.window_pending() {
            return;
        }
        let target = self.epochs.global();
        let mut spins = 0u32;
        while self.epochs.min_active() < target {
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        let mut state = self.state.lock();
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let persisted_epoch = target - 1;
        // A sweep may have advanced the epoch meanwhile: cover it too.
        let dirty_epoch = (self.epochs.global() + 1).max(state.dirty_epoch);
        self.write_record(&mut state, last_tid_of_epoch(persisted_epoch), dirty_epoch);
        // IMPORTANT: only after the record's fence.
        self.epochs.set_durable(persisted_epoch);
        self.advance_locked(&mut state);
    }

    /// Waits until `epoch` is durable; [`DbError::Closed`] once the log is
    /// closed first. `worker` is idle (not announced) while it waits.
    pub(crate) fn wait_durable(&self, worker: usize, epoch: u64) -> DbResult<()> {
        if self.epochs.durable() >= epoch {
            return Ok(());
        }
        // A read-only commit's epoch may hold no commit of this worker: the
        // wait itself asks for the window.
        self.awaited_epoch[worker].store(epoch, Ordering::Release);
        let mut spins = 0u32;
        let result = loop {
            if self.epochs.durable() >= epoch {
                break Ok(());
            }
            if self.closed.load(Ordering::SeqCst) {
                break Err(DbError::Closed);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        };
        self.awaited_epoch[worker].store(0, Ordering::Release);
        result
    }

    /// Clean close, with no transaction running: makes every commit
    /// durable (two group commits: the first opens a window above every
    /// commit, the second makes the epochs below it durable), then writes
    /// no more.
    pub(crate) fn finish(&self) {
        while self.window_pending() && !self.closed.load(Ordering::SeqCst) {
            self.group_commit(true);
        }
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Crash or drop: no record is written any more, and waiters give up.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Records written since open.
    pub(crate) fn records_written(&self) -> u64 {
        self.records_written.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_pm::{Direct, PmOptions};

    fn pool() -> Arc<Pool<Direct>> {
        Arc::new(Pool::create_in_memory(4 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &PmOptions::default()).expect("pool"))
    }

    #[test]
    fn a_record_round_trips_and_a_torn_one_is_rejected() {
        let record = WindowRecord { sequence: 7, persisted: 41, dirty: 99 };
        let bytes = record.encode();
        assert_eq!(WindowRecord::decode(&bytes), Some(record));
        for torn_word in 0..5 {
            let mut torn = bytes;
            torn[torn_word * 8] ^= 1;
            assert_eq!(WindowRecord::decode(&torn), None, "word {torn_word} changed");
        }
        let inverted = WindowRecord { sequence: 1, persisted: 100, dirty: 99 }.encode();
        assert_eq!(WindowRecord::decode(&inverted), None, "c_p above c_d");
        assert_eq!(WindowRecord::decode(&[0u8; RECORD_BYTES]), None);
    }

    /// The newest valid record wins, across the ring's wrap and past a torn
    /// newest line; a reopened log continues its sequence.
    #[test]
    fn the_newest_valid_record_is_found_after_wrapping() {
        let pool = pool();
        let epochs = Arc::new(Epochs::new(1, 1));
        let (log, latest) = WriteBehindLog::open(&pool, &epochs, 1).unwrap();
        assert_eq!(latest, None, "a fresh pool has no record");
        let wraps = log.lines + 5;
        {
            let mut state = log.state.lock();
            for epoch in 1..=wraps {
                log.write_record(&mut state, last_tid_of_epoch(epoch), epoch + 1);
            }
        }
        let (again, latest) = WriteBehindLog::open(&pool, &epochs, 1).unwrap();
        let latest = latest.unwrap();
        assert_eq!(latest.sequence, wraps);
        assert_eq!(latest.persisted, last_tid_of_epoch(wraps));
        assert_eq!(latest.dirty, last_tid_of_epoch(wraps + 1));
        // Tear the newest record: the one before it is found.
        let newest = again.base + (wraps % again.lines) * CACHE_LINE;
        pool.backend().store_u64(newest + 16, 12345);
        let (_, latest) = WriteBehindLog::open(&pool, &epochs, 1).unwrap();
        assert_eq!(latest.unwrap().sequence, wraps - 1);
    }

    /// The epoch never passes the durable c_d (I1), a group commit
    /// publishes only what every announced worker has left behind (I2),
    /// and an idle window is skipped.
    #[test]
    fn epochs_stay_under_the_dirty_bound_and_group_commits_wait_for_workers() {
        let pool = pool();
        let epochs = Arc::new(Epochs::new(2, 1));
        let (log, _) = WriteBehindLog::open(&pool, &epochs, 2).unwrap();
        log.start(3).unwrap();
        assert_eq!((epochs.global(), epochs.durable()), (3, 2));
        let dirty = |log: &WriteBehindLog<Direct>| log.state.lock().dirty_epoch;
        assert_eq!(dirty(&log), 4);
        for _ in 0..5 {
            let written = log.records_written();
            let epoch = log.advance_epoch().unwrap();
            assert!(dirty(&log) >= epoch, "epoch {epoch} above the durable c_d");
            assert!(log.records_written() <= written + 1);
        }
        let written = log.records_written();
        log.group_commit(false);
        assert_eq!(log.records_written(), written, "nothing committed: the window is skipped");
        // Worker 0 commits in the current epoch and is still announced
        // there when the next window opens.
        epochs.enter(0);
        let current = epochs.global();
        log.note_commit(0, current);
        log.advance_epoch().unwrap();
        std::thread::scope(|scope| {
            let committer = scope.spawn(|| log.group_commit(false));
            std::thread::sleep(Duration::from_millis(20));
            assert!(epochs.durable() < current, "published epoch {current} while worker 0 was still in it");
            epochs.leave(0);
            committer.join().unwrap();
        });
        assert_eq!(epochs.durable(), current, "the group commit covers worker 0's commit once it left");
        let written = log.records_written();
        log.group_commit(false);
        assert_eq!(log.records_written(), written, "every commit is durable: the window is skipped");
        let state = log.state.lock();
        assert_eq!(state.persisted, last_tid_of_epoch(current));
        assert!(state.dirty_epoch >= epochs.global());
    }
}
