//! Mnemosyne's durability (Volos et al., ASPLOS 2011, mode `pwb` of
//! `mnemosyne-gcc`): a per-worker torn-bit redo log (`tornbit_log`) made
//! durable by one fence at commit, then a write-back of the new values in
//! place into the rows' persistent home slots (`storage::pm_home`) with
//! plain stores, and truncation later, on a background thread
//! (`mnemosyne_truncation`): flush the written-back lines, fence, advance
//! the log head, fence.
//!
//! **Commit** (`CommitStage::LogBeforeInstall`): `prepare` encodes the
//! fragment (per write: table and key length, value length or a delete,
//! key and value words), adopts the head the truncation thread made
//! durable, hands the written-back lines over to that thread every
//! [`TRUNCATE_AFTER_WRITES`] versions or when the log is half full, and
//! truncates inline only when the fragment does not fit; `append` writes the fragment,
//! its commit marker and sequence number (the commit TID) as non-temporal
//! stores and issues the commit's only fence; the install then writes each
//! new version into its home slot with plain stores (`on_row_install`) and
//! adds the lines to the worker's flush set.
//!
//! **Truncation** runs on the truncation thread (and inline when a log is
//! full, and when the worker goes away): flush the handed-over lines,
//! fence, store the head, fence. Each log is truncated in its own order,
//! not in global sequence order as Mnemosyne's log manager does;
//! recovery's per-slot TID check makes that safe (below).
//!
//! **Recovery.** (1) Scan each log from its head to its stable tail: the
//! committed fragments, in sequence order. (2) Scan the home slots: per key
//! the copy with the largest TID (a present value or a delete) wins; losing
//! copies and slots torn by the crash (bad CRC, below) are freed; a slot
//! that fails its CRC and cannot have been torn, or whose word 0 is zero,
//! refuses the pool (`CorruptStructure`, `PmHome`). (3) Replay the
//! fragments: a write whose sequence number is below the winning copy's
//! TID is skipped (that slot already holds a newer version made durable by
//! another worker's truncation), otherwise it is written in place (a new
//! slot if the key has none or it is too small). (4) Flush, fence, reset
//! the logs. (5) Rebuild the DRAM records and indexes from the winning
//! copies.
//!
//! **Torn or damaged.** A crash can leave torn only a slot written since
//! the last truncation of the log whose fragment wrote it (truncation
//! flushes and fences every write-back before the head passes its
//! fragment), and that fragment is then still in the log, with the slot's
//! new TID as its sequence number and the key among its writes (a
//! relocation's delete at the old slot and recovery's replays too). Word 0
//! is the first store of each write into a slot's first line, and a line
//! keeps a prefix of its stores (the media model), so a slot failing its
//! CRC after a crash is one of: (a) a first line that took part of a write
//! and so its header: the TID in word 0 is a logged fragment's; (b) a whole
//! first line (its own check holds) of an older version while later lines
//! took the write: either a delete (a freed slot reused, nothing of it
//! needed) or a version of a key that a logged write of at least its TID
//! rewrites. Any other slot that fails its CRC, or a whole first line of a
//! present version with no logged write of its key, is damage to a version
//! already durable, which no log can restore: refused. A zero word 0 is
//! damage too, since new chunks are formatted (`storage::pm_home`). A
//! damaged slot that the rules accept is one the replay rewrites, so no
//! acknowledged version is lost either way. The check costs nothing per
//! transaction: no write, flush or fence is added to commit or truncation.
//!
//! Why no acknowledged commit is lost: a fragment leaves its log only after
//! its write-back lines were flushed and fenced, so each key's newest
//! acknowledged version is either durable and whole in a slot or still in a
//! log; a slot torn by a later write-back belongs to a fragment still in a
//! log, and the replay rewrites the whole slot. A fragment is acknowledged
//! only after its fence, and its writes are installed (visible) only after
//! it, so nothing recovered depends on a fragment that was lost.
//!
//! Explained in docs/engines/mnemosyne.md (and docs/engines/pisces.md).

use crate::durability::mnemosyne_truncation::{TruncationSlot, Truncator};
use crate::durability::tornbit_log::TornBitLog;
use crate::durability::{CommitLog, CommitStage, EnginePolicy};
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::schema::TableId;
use crate::stats::{CommitTicket, EngineStats};
use crate::storage::commit_view::CommitView;
use crate::storage::pm_home::{PmHome, ScannedSlot, SlotImage, TornSlot, UNIT};
use crate::storage::record::{self, Record};
use crate::storage::table::Table;
use pmtx_pm::{PmBackend, Pool, Structure};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A worker hands its write-backs over to the truncation thread once it
/// wrote back this many versions since it last did (or when its log is
/// half full): a bounded flush set bounds both the lines a truncation
/// flushes at once and the replay after a crash.
pub(crate) const TRUNCATE_AFTER_WRITES: usize = 256;

/// A delete in a fragment (the value-length value).
const DELETE: u64 = u64::MAX;

/// When a commit writes its new values back into their home slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteBack {
    /// While installing, rows locked, before they become visible
    /// (Mnemosyne's write-back after the log fence).
    AtInstall,
    /// After the commit unlocked its rows (visible), each row re-locked
    /// briefly and skipped if a newer commit replaced it: Pisces' third
    /// stage. Deletes and slot relocations are still written at install.
    AfterUnlock,
}

/// What the policy is opened with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MnemosyneConfig {
    /// Ring words per worker log (0: the whole chunk).
    pub(crate) log_words: u64,
    /// Broken variant: acknowledge without the commit's fence.
    pub(crate) ack_before_fence: bool,
    /// When values are written back.
    pub(crate) write_back: WriteBack,
    /// Broken variant (the corruption matrix's control): recovery takes
    /// every home slot that fails its check for one a crash tore, and a
    /// zero slot for one never written, as before the check existed.
    pub(crate) unchecked_home_slots: bool,
}

/// Mnemosyne's durability over the home slots (module docs).
pub(crate) struct MnemosyneLog<B: PmBackend> {
    pool: Arc<Pool<B>>,
    home: Arc<PmHome<B>>,
    config: MnemosyneConfig,
    truncator: Arc<Truncator>,
    /// Truncations a worker did inline (its log was full).
    truncations: AtomicU64,
    relocations: AtomicU64,
    replayed: AtomicU64,
    /// Write-backs after unlock done, and skipped for a newer version.
    written_back: AtomicU64,
    superseded: AtomicU64,
}

/// One worker's log, its encoded fragment and its flush set.
pub(crate) struct MnemosyneWorker<B: PmBackend> {
    log: TornBitLog<B>,
    payload: Vec<u64>,
    /// Home-slot ranges written back and not yet handed over.
    flush_set: Vec<(u64, u64)>,
    /// The log's truncation state, shared with the truncation thread.
    truncation: Arc<TruncationSlot>,
    truncator: Arc<Truncator>,
    home: Arc<PmHome<B>>,
    /// The log position handed over last.
    handed_over: u64,
    truncations: u64,
    /// A row's value copied for its write-back (`WriteBack::AfterUnlock`).
    value: Vec<u8>,
    /// Home slots this worker reserved (units, offset): `prepare` makes
    /// sure each write of the commit has one of its size, so a commit whose
    /// fragment is durable never lacks a slot to write back into (the pool
    /// runs out in `prepare`, with a typed error, before anything is
    /// logged).
    spares: Vec<(u32, u64)>,
    /// Scratch: slot sizes the commit's writes need.
    demand: Vec<u32>,
    /// A version had no slot (cannot happen with `spares`; if it did, the
    /// log keeps every fragment from then on, and recovery replays them).
    unplaced: bool,
}

impl<B: PmBackend> MnemosyneWorker<B> {
    /// Truncates the whole log on this thread: what was handed over and the
    /// flush set, fence, head, fence.
    fn truncate_all(&mut self) {
        let tail = self.log.tail();
        self.truncation.truncate(self.log.backend(), &mut self.flush_set, Some(tail));
        self.log.adopt_head(tail);
        self.handed_over = tail;
        self.truncations += 1;
    }

    /// Hands the flush set over to the truncation thread when it is large
    /// or the log is half full (and grew since the last hand-over).
    fn maybe_hand_over(&mut self) {
        if self.unplaced {
            return;
        }
        let log = &self.log;
        let half_full = log.used() * 2 > log.capacity() && log.tail() - self.handed_over >= log.capacity() / 4;
        if self.flush_set.len() >= TRUNCATE_AFTER_WRITES || (half_full && !self.flush_set.is_empty()) {
            let tail = log.tail();
            self.truncation.hand_over(&mut self.flush_set, tail);
            self.handed_over = tail;
            self.truncator.wake();
        }
    }
}

impl<B: PmBackend> Drop for MnemosyneWorker<B> {
    /// A later worker of the slot starts at the durable head, so nothing
    /// may stay between head and tail.
    fn drop(&mut self) {
        let durable = self.truncation.durable_head();
        self.log.adopt_head(durable);
        if self.log.used() > 0 && !self.unplaced {
            self.truncate_all();
        }
        self.truncator.unregister(&self.truncation);
        for (_, offset) in self.spares.drain(..) {
            self.home.free(offset);
        }
    }
}

/// Appends the logical values of `bytes`, padded to 8 bytes.
fn push_bytes(out: &mut Vec<u64>, bytes: &[u8]) {
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        out.push(u64::from_le_bytes(word));
    }
}

/// Reads `len` bytes from logical values (`None` past their end).
fn take_bytes(values: &mut std::iter::Copied<std::slice::Iter<'_, u64>>, len: usize) -> Option<Vec<u8>> {
    if len.div_ceil(8) > values.len() {
        return None;
    }
    let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
    for _ in 0..len.div_ceil(8) {
        bytes.extend_from_slice(&values.next()?.to_le_bytes());
    }
    bytes.truncate(len);
    Some(bytes)
}

/// A row's identity in the home slots: table and key.
type SlotKey = (u32, Vec<u8>);
/// The newest copy of a row: TID, slot offset, value (`None`: deleted).
type NewestCopy = (u64, u64, Option<Vec<u8>>);

/// One write of a replayed fragment.
struct LoggedWrite {
    table: u32,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

/// What the logs hold at recovery: the writes a crash may have left torn
/// in their home slots (module docs, "Torn or damaged").
struct InFlight<'a> {
    /// Sequence numbers (commit TIDs) of the fragments in the logs.
    sqns: HashSet<u64>,
    /// Each logged write: its sequence number and the write.
    writes: Vec<(u64, &'a LoggedWrite)>,
}

impl<'a> InFlight<'a> {
    fn new(fragments: &'a [(u64, Vec<LoggedWrite>)]) -> Self {
        Self {
            sqns: fragments.iter().map(|(sqn, _)| *sqn).collect(),
            writes: fragments.iter().flat_map(|(sqn, writes)| writes.iter().map(move |write| (*sqn, write))).collect(),
        }
    }

    /// Whether a crash can have left `slot` failing its CRC: its first
    /// line is a whole delete (a free slot's reuse torn: nothing lost), or
    /// a whole version of a key a logged write outranks or is, or, not
    /// whole, a line whose header a logged fragment wrote.
    fn may_have_torn(&self, slot: &TornSlot) -> bool {
        match &slot.line {
            Some(line) => {
                !line.present
                    || self.writes.iter().any(|(sqn, write)| {
                        *sqn >= line.tid
                            && write.table == line.table
                            && write.key.len() == line.key_len
                            && write.key.starts_with(&line.key_prefix)
                    })
            }
            None => slot.tid.is_some_and(|tid| self.sqns.contains(&tid)),
        }
    }
}

fn decode_fragment(values: &[u64]) -> Option<Vec<LoggedWrite>> {
    let mut values = values.iter().copied();
    let mut writes = Vec::new();
    while let Some(ids) = values.next() {
        let length = values.next()?;
        let key = take_bytes(&mut values, (ids >> 32) as usize & 0xFFFF)?;
        let value = if length == DELETE { None } else { Some(take_bytes(&mut values, usize::try_from(length).ok()?)?) };
        writes.push(LoggedWrite { table: ids as u32, key, value });
    }
    Some(writes)
}

impl<B: PmBackend> MnemosyneLog<B> {
    /// The policy over `pool`.
    pub(crate) fn open(config: MnemosyneConfig, pool: Arc<Pool<B>>) -> DbResult<Self> {
        crate::storage::pm_home::check_no_unformatted_chunks(&pool)?;
        let home = Arc::new(PmHome::open(Arc::clone(&pool)));
        let truncator = Truncator::start(Arc::clone(&pool))
            .map_err(|error| DbError::InvalidConfig(format!("cannot start thread pmtx-truncate: {error}")))?;
        Ok(Self {
            pool,
            home,
            config,
            truncator: Arc::new(truncator),
            truncations: AtomicU64::new(0),
            relocations: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            written_back: AtomicU64::new(0),
            superseded: AtomicU64::new(0),
        })
    }

    /// The home slot of `row` (offset), if placed.
    #[inline]
    fn slot_of(row: &Record) -> Option<u64> {
        match row.home().load(Ordering::Acquire) {
            0 => None,
            unit => Some(u64::from(unit) * UNIT),
        }
    }

    fn set_slot(row: &Record, offset: u64) {
        row.home().store((offset / UNIT) as u32, Ordering::Release);
    }

    /// Every worker log's chunk the pool holds (by worker slot).
    fn log_slots(&self) -> Vec<usize> {
        let mut slots: Vec<usize> = self
            .pool
            .owned_chunks()
            .into_iter()
            .filter(|(_, owner)| owner.kind() == crate::durability::tornbit_log::TORNBIT_LOG_CHUNK_KIND)
            .map(|(_, owner)| owner.thread() as usize)
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }
}

impl<B: PmBackend> MnemosyneLog<B> {
    /// Makes sure `worker` holds a spare home slot of each write's size
    /// (one per write; usually left from earlier commits, as most writes
    /// update a row in its own slot and take none).
    fn reserve_slots<V: CommitView + ?Sized>(&self, worker: &mut MnemosyneWorker<B>, writes: &V) -> DbResult<()> {
        worker.demand.clear();
        for write in writes.writes() {
            if let Some(value) = write.value {
                worker.demand.push(PmHome::<B>::units_for(write.key.len(), value.len()));
            }
        }
        worker.demand.sort_unstable();
        let mut index = 0;
        while index < worker.demand.len() {
            let units = worker.demand[index];
            let needed = worker.demand[index..].iter().take_while(|other| **other == units).count();
            index += needed;
            let held = worker.spares.iter().filter(|(spare, _)| *spare == units).count();
            for _ in held..needed {
                let offset = self.home.allocate(units).map_err(|error| match error {
                    DbError::Pool(_) => DbError::OutOfSpace(format!(
                        "mnemosyne: no pool chunk left for a home slot of {} bytes ({error})",
                        u64::from(units) * UNIT
                    )),
                    other => other,
                })?;
                worker.spares.push((units, offset));
            }
        }
        Ok(())
    }
}

impl<B: PmBackend> CommitLog for MnemosyneLog<B> {
    const STAGE: CommitStage = CommitStage::LogBeforeInstall;
    const VOLATILE_ROWS: bool = true;
    type Worker = MnemosyneWorker<B>;

    fn worker(&self, id: usize) -> DbResult<MnemosyneWorker<B>> {
        let log = TornBitLog::open(Arc::clone(&self.pool), id, self.config.log_words).map_err(DbError::from)?;
        let truncation = self.truncator.register(log.head_offset(), log.tail());
        Ok(MnemosyneWorker {
            handed_over: log.tail(),
            log,
            payload: Vec::new(),
            flush_set: Vec::new(),
            truncation,
            truncator: Arc::clone(&self.truncator),
            truncations: 0,
            home: Arc::clone(&self.home),
            spares: Vec::new(),
            demand: Vec::new(),
            unplaced: false,
            value: Vec::new(),
        })
    }

    fn prepare<V: CommitView + ?Sized>(&self, worker: &mut MnemosyneWorker<B>, writes: &V) -> DbResult<()> {
        worker.payload.clear();
        for write in writes.writes() {
            worker.payload.push(u64::from(write.table.0) | (write.key.len() as u64) << 32);
            worker.payload.push(write.value.map_or(DELETE, |value| value.len() as u64));
            push_bytes(&mut worker.payload, write.key);
            if let Some(value) = write.value {
                push_bytes(&mut worker.payload, value);
            }
        }
        // Every earlier fragment of this worker is written back (its
        // install followed its append on this worker): its lines may go.
        let durable = worker.truncation.durable_head();
        worker.log.adopt_head(durable);
        worker.maybe_hand_over();
        self.reserve_slots(worker, writes)?;
        if !worker.log.fits(worker.payload.len()) && !worker.unplaced {
            // The thread is behind: the log is full.
            let before = worker.truncations;
            worker.truncate_all();
            self.truncations.fetch_add(worker.truncations - before, Ordering::Relaxed);
        }
        if !worker.log.fits(worker.payload.len()) {
            return Err(DbError::OutOfSpace(format!(
                "a transaction's log fragment of {} words exceeds the worker log of {} words",
                TornBitLog::<B>::fragment_words(worker.payload.len()),
                worker.log.capacity()
            )));
        }
        Ok(())
    }

    fn append<V: CommitView + ?Sized>(
        &self,
        worker: &mut MnemosyneWorker<B>,
        tid: u64,
        _writes: &V,
    ) -> DbResult<CommitTicket> {
        // The commit's one fence (none in the broken variant).
        worker.log.append(&worker.payload, tid, !self.config.ack_before_fence);
        self.pool.backend().crash_point("mnemosyne: fragment durable");
        Ok(CommitTicket::Durable)
    }

    #[inline]
    fn on_row_read(&self, row: &Record, value_len: usize) {
        if let Some(slot) = Self::slot_of(row) {
            self.home.charge_read(slot, row.key().len(), value_len);
        }
    }

    fn on_row_install(
        &self,
        worker: &mut MnemosyneWorker<B>,
        table: TableId,
        row: &Record,
        value: Option<&[u8]>,
        word: u64,
    ) {
        let tid = record::tid_of(word);
        let key = row.key();
        let image = SlotImage { table: table.0, key, value, tid };
        let needed = value.map_or(0, <[u8]>::len) as u64;
        if value.is_none() && Self::slot_of(row).is_none() {
            // A delete of a row that never had a slot: nothing to outrank.
            return;
        }
        let slot = match Self::slot_of(row) {
            Some(slot) if self.home.value_capacity(slot, key.len()) >= needed => slot,
            old => {
                let units = PmHome::<B>::units_for(key.len(), row.value_capacity().max(needed as usize));
                let minimal = PmHome::<B>::units_for(key.len(), needed as usize);
                let slot = match self.home.allocate(units) {
                    Ok(slot) => slot,
                    // The spare `prepare` reserved for this write.
                    Err(_) => match worker.spares.iter().position(|(spare, _)| *spare == minimal) {
                        Some(at) => worker.spares.swap_remove(at).1,
                        None => {
                            debug_assert!(false, "prepare reserves a slot for every write");
                            // The version stays in the log, which recovery
                            // replays; the worker stops truncating.
                            worker.unplaced = true;
                            return;
                        }
                    },
                };
                if let Some(old) = old {
                    // The old copy turns into a delete at this TID, so it
                    // never outranks the new slot, then is reused.
                    let range = self.home.write(old, SlotImage { value: None, ..image });
                    worker.flush_set.push(range);
                    self.home.free(old);
                    self.relocations.fetch_add(1, Ordering::Relaxed);
                }
                Self::set_slot(row, slot);
                slot
            }
        };
        if self.config.write_back == WriteBack::AfterUnlock && value.is_some() {
            // The slot is chosen; the value follows once the commit is
            // visible (`write_back`).
            return;
        }
        let range = self.home.write(slot, image);
        worker.flush_set.push(range);
    }

    /// Every write-back of a commit follows its unlock: a newer commit of
    /// the row may have locked it since, so the row is re-locked and its
    /// version checked; a replaced version is left to its replacer (whose
    /// fragment is durable in its log until it wrote the newer one back).
    const WRITES_BACK_AFTER_UNLOCK: bool = true;

    fn write_back(&self, worker: &mut MnemosyneWorker<B>, table: TableId, row: &Record, tid: u64) {
        if self.config.write_back != WriteBack::AfterUnlock {
            return;
        }
        // IMPORTANT: the lock keeps a newer commit from writing the slot
        // (or relocating the row) between the check and the write. Holders
        // are commits and write-backs, which never wait while holding it.
        let word = loop {
            if let Some(word) = row.lock(1 << 12) {
                break word;
            }
            std::thread::yield_now();
        };
        if record::tid_of(word) != tid {
            self.superseded.fetch_add(1, Ordering::Relaxed);
        } else if word & record::ABSENT == 0 {
            // (A delete was written at install.)
            if let Some(slot) = Self::slot_of(row) {
                row.read_locked(&mut worker.value);
                let image = SlotImage { table: table.0, key: row.key(), value: Some(&worker.value), tid };
                let range = self.home.write(slot, image);
                worker.flush_set.push(range);
                self.written_back.fetch_add(1, Ordering::Relaxed);
            }
        }
        row.unlock();
    }

    fn read_only_ticket(&self, _max_tid: u64) -> CommitTicket {
        // Every version read was installed after its fragment's fence.
        CommitTicket::Durable
    }

    fn is_durable(&self, _ticket: CommitTicket) -> bool {
        true
    }
}

impl<B: PmBackend> EnginePolicy for MnemosyneLog<B> {
    fn recover(&self, tables: &[Table], epochs: &Arc<Epochs>) -> DbResult<()> {
        self.pool.begin_engine_session();
        // (1) The committed fragments of every log, in sequence order: a
        // home slot written since its log's last truncation belongs to one.
        let mut logs = Vec::new();
        let mut fragments = Vec::new();
        for slot in self.log_slots() {
            let log = TornBitLog::open(Arc::clone(&self.pool), slot, self.config.log_words).map_err(DbError::from)?;
            fragments.extend(log.scan().fragments);
            logs.push(log);
        }
        fragments.sort_by_key(|fragment| fragment.sqn);
        let mut replay = Vec::with_capacity(fragments.len());
        for fragment in &fragments {
            let writes = decode_fragment(&fragment.values).ok_or_else(|| {
                DbError::corrupt(Structure::TornBitLog, format!("log fragment {} does not parse", fragment.sqn))
            })?;
            // A fragment that passed its torn bits may still be damaged (no
            // checksum): refuse what no commit could log.
            let fits = |write: &LoggedWrite| {
                tables.get(write.table as usize).is_some_and(|table| {
                    !write.key.is_empty()
                        && write.key.len() <= table.schema.max_key_len
                        && write.value.as_ref().is_none_or(|value| value.len() <= table.schema.max_value_len)
                })
            };
            if !writes.iter().all(fits) {
                return Err(DbError::corrupt(
                    Structure::TornBitLog,
                    format!("log fragment {} holds a write no table admits", fragment.sqn),
                ));
            }
            replay.push((fragment.sqn & crate::storage::pm_home::TID_MASK, writes));
        }
        // (2) The newest copy of each key; a slot that fails its CRC must be
        // one a crash could have torn.
        let mut newest: HashMap<SlotKey, NewestCopy> = HashMap::new();
        let mut losers = Vec::new();
        let mut failed = Vec::new();
        let mut zero = None;
        self.home.scan(|offset, slot| match slot {
            ScannedSlot::Free => {}
            ScannedSlot::Zero => {
                zero = zero.or(Some(offset));
            }
            ScannedSlot::Torn(torn) => failed.push((offset, torn)),
            ScannedSlot::Image { table, key, value, tid } => match newest.entry((table, key)) {
                std::collections::hash_map::Entry::Occupied(mut entry) => {
                    // A relocated row's old slot is a delete at the new
                    // slot's TID: the present copy wins the tie.
                    if tid > entry.get().0 || (tid == entry.get().0 && value.is_some()) {
                        losers.push(entry.get().1);
                        entry.insert((tid, offset, value));
                    } else {
                        losers.push(offset);
                    }
                }
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert((tid, offset, value));
                }
            },
        });
        if !self.config.unchecked_home_slots {
            if let Some(offset) = zero {
                return Err(DbError::corrupt(
                    Structure::PmHome,
                    format!(
                        "home slot at {offset:#x} is zero: chunks are formatted, so this is no slot left unwritten"
                    ),
                ));
            }
            let in_flight = InFlight::new(&replay);
            if let Some((offset, torn)) = failed.iter().find(|(_, torn)| !in_flight.may_have_torn(torn)) {
                return Err(DbError::corrupt(
                    Structure::PmHome,
                    format!(
                        "home slot at {offset:#x} fails its checksum and no write since its log's last truncation can \
                         have torn it (header TID {}): a damaged slot of a version already made durable",
                        torn.tid.map_or_else(|| "unreadable".to_string(), |tid| tid.to_string())
                    ),
                ));
            }
        }
        losers.extend(failed.iter().map(|(offset, _)| *offset));
        let mut written: Vec<(u64, u64)> = losers.iter().map(|offset| self.home.clear(*offset)).collect();
        let mut live: HashSet<u64> = newest.values().map(|(_, offset, _)| *offset).collect();
        self.home.rebuild_free_lists(&live);
        // (3) Replay the committed fragments in sequence order.
        for (sqn, writes) in replay {
            for write in writes {
                let key = (write.table, write.key);
                let needed = write.value.as_ref().map_or(0, Vec::len);
                let current = newest.get(&key).map(|(tid, offset, _)| (*tid, *offset));
                if current.is_some_and(|(tid, _)| tid > sqn) {
                    continue;
                }
                let slot = match current {
                    Some((_, offset)) if self.home.value_capacity(offset, key.1.len()) >= needed as u64 => offset,
                    old => {
                        let slot = self.home.allocate(PmHome::<B>::units_for(key.1.len(), needed))?;
                        if let Some((_, old)) = old {
                            written.push(self.home.clear(old));
                            live.remove(&old);
                            self.home.free(old);
                        }
                        live.insert(slot);
                        slot
                    }
                };
                let image = SlotImage { table: key.0, key: &key.1, value: write.value.as_deref(), tid: sqn };
                written.push(self.home.write(slot, image));
                self.replayed.fetch_add(1, Ordering::Relaxed);
                newest.insert(key, (sqn, slot, write.value));
            }
        }
        // (4) Durable in place before the logs forget.
        let backend = self.pool.backend();
        for (offset, len) in written {
            backend.flush(offset, len);
        }
        backend.fence();
        for log in &mut logs {
            log.reset_after_recovery();
        }
        // (5) The DRAM records and indexes.
        let mut max_tid = 0;
        for ((table, key), (tid, offset, value)) in newest {
            max_tid = max_tid.max(tid);
            let Some(value) = value else {
                live.remove(&offset);
                self.home.free(offset);
                continue;
            };
            let table = tables
                .get(table as usize)
                .ok_or_else(|| DbError::corrupt(Structure::PmHome, format!("a home slot names table #{table}")))?;
            let (row, _, _) = table.get_or_insert(&key, value.len())?;
            let locked = row.lock(u32::MAX).expect("recovery locks never time out");
            debug_assert_eq!(locked & record::LOCKED, 0);
            // SAFETY (of the free): recovery runs alone, no reader exists.
            row.set_value_locked(Some(&value), &mut |old| unsafe { old.free() });
            row.store_word(record::word_of(tid, 0));
            Self::set_slot(row, offset);
            table.index_secondaries(&key, &value, row)?;
        }
        let epoch = record::epoch_of_tid(max_tid) + 1;
        if epoch > record::MAX_EPOCH {
            return Err(DbError::corrupt(
                Structure::PmHome,
                format!("recovered TID {max_tid} leaves no epoch to run in"),
            ));
        }
        epochs.raise(epoch);
        Ok(())
    }

    fn on_epoch(&self) {}

    fn checkpoint(&self, _tables: &[Table]) -> DbResult<()> {
        // No checkpoints: the home slots are the database.
        Ok(())
    }

    fn close(&self, _tables: &[Table], clean: bool) -> DbResult<()> {
        if let Some(panic) = self.truncator.stop() {
            return Err(DbError::BackgroundPanic { thread: "pmtx-truncate".into(), message: panic });
        }
        if clean {
            // The workers are gone, each truncated its log on the way out.
            self.pool.mark_clean_shutdown();
        }
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            engine_counters: vec![
                ("log_truncations", self.truncator.truncations()),
                ("log_truncations_inline", self.truncations.load(Ordering::Relaxed)),
                ("slot_relocations", self.relocations.load(Ordering::Relaxed)),
                ("replayed_writes", self.replayed.load(Ordering::Relaxed)),
                ("write_backs_after_unlock", self.written_back.load(Ordering::Relaxed)),
                ("write_backs_superseded", self.superseded.load(Ordering::Relaxed)),
            ],
            background_pm: self.truncator.counters(),
            ..EngineStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::pm_home::{decode, encode};

    fn write(table: u32, key: &[u8], value: Option<&[u8]>) -> LoggedWrite {
        LoggedWrite { table, key: key.to_vec(), value: value.map(<[u8]>::to_vec) }
    }

    /// A slot of two lines: `old` durable, then the first `words` 8-byte
    /// words of each line in `lines` taken from `new` (a crash image of a
    /// write-back of `new` over `old`).
    fn torn(old: SlotImage<'_>, new: SlotImage<'_>, lines: &[(usize, usize)]) -> TornSlot {
        let mut bytes = encode(old);
        bytes.resize(128, 0);
        let mut newer = encode(new);
        newer.resize(128, 0);
        for &(line, words) in lines {
            let at = line * 64;
            bytes[at..at + words * 8].copy_from_slice(&newer[at..at + words * 8]);
        }
        match decode(&bytes) {
            ScannedSlot::Torn(slot) => slot,
            other => panic!("not torn: {other:?}"),
        }
    }

    /// Which slots failing their CRC recovery takes for torn by the crash
    /// (module docs, "Torn or damaged"), and which for damage.
    #[test]
    fn a_slot_is_torn_only_when_a_logged_write_can_have_torn_it() {
        let value = [7u8; 60];
        let newer = [8u8; 60];
        let old = SlotImage { table: 1, key: b"k1", value: Some(&value), tid: 10 };
        let new = SlotImage { table: 1, key: b"k1", value: Some(&newer), tid: 20 };
        let logged = vec![(20, vec![write(1, b"k1", Some(&newer))])];
        let empty: Vec<(u64, Vec<LoggedWrite>)> = Vec::new();
        let (in_flight, nothing) = (InFlight::new(&logged), InFlight::new(&empty));
        // (a) The first line took part of the write: its header is the
        // logged fragment's.
        let slot = torn(old, new, &[(0, 2)]);
        assert_eq!((slot.tid, slot.line.is_none()), (Some(20), true));
        assert!(in_flight.may_have_torn(&slot));
        assert!(!nothing.may_have_torn(&slot), "no fragment in the logs: damage");
        // (b) A whole older first line, the second line new: the key has a
        // logged write at or above its TID.
        let slot = torn(old, new, &[(1, 3)]);
        assert_eq!(slot.line.as_ref().map(|line| line.tid), Some(10));
        assert!(in_flight.may_have_torn(&slot));
        assert!(!nothing.may_have_torn(&slot));
        // Only a newer write of the same key counts.
        let other_key = vec![(20, vec![write(1, b"k2", Some(&newer))])];
        assert!(!InFlight::new(&other_key).may_have_torn(&slot));
        let older = vec![(5, vec![write(1, b"k1", Some(&newer))])];
        assert!(!InFlight::new(&older).may_have_torn(&slot));
        // A whole first line of a delete (a key reaching into the second
        // line, so the CRC covers it): a freed slot's reuse torn.
        let long_key = [b'x'; 48];
        let deleted = SlotImage { table: 1, key: &long_key, value: None, tid: 10 };
        let slot = torn(deleted, new, &[(1, 3)]);
        assert_eq!(slot.line.as_ref().map(|line| line.present), Some(false));
        assert!(nothing.may_have_torn(&slot));
        // Damage: one bit of a durable version's value (second line), or
        // of its first line, with nothing logged.
        let mut bytes = encode(old);
        bytes.resize(128, 0);
        for at in [70, 30] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 4;
            let ScannedSlot::Torn(slot) = decode(&damaged) else { panic!("byte {at}: CRC holds") };
            assert!(!nothing.may_have_torn(&slot), "byte {at}: {slot:?}");
            assert!(!InFlight::new(&older).may_have_torn(&slot), "byte {at}: {slot:?}");
        }
    }
}
