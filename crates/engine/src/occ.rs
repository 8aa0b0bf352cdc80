//! Silo-style optimistic concurrency control over DRAM records, shared by the
//! log-based engines. What differs between them (no log, epoch group
//! commit, synchronous logs) is a [`CommitLog`] policy.
//!
//! Commit protocol (Silo §4.4; DBX's software path):
//! 1. lock the write set in a global order (record address);
//! 2. read the global epoch (the serialization point);
//! 3. validate the read set (version unchanged, not locked by another) and
//!    the scanned leaves (phantoms);
//! 4. pick a TID above everything read or written and in the current epoch;
//! 5. hand the redo record to the log policy;
//! 6. install the values and release each lock with the new version.
//!
//! Where step 5 sits is the policy's [`CommitStage`]: before the install
//! (silo, group-commit), after the install but before the locks are released
//! (dbx-naive: a synchronous log inside the commit region, DBXN Fig. 5(a)),
//! or after the locks are released with the UNPERSISTED bit set (DBXN's
//! parity versions), followed by clearing the bit. A read that sees
//! UNPERSISTED puts the word *without* the bit (the paper's "next even
//! version") in the read set, so it validates only once the writer's log is
//! durable and the bit is cleared.

use crate::engine::{CommitTicket, EngineWorker, ScanRequest, WriteOp};
use crate::epoch::Epochs;
use crate::error::{AbortReason, DbError, DbResult, TxError, TxResult};
use crate::position_index::PositionIndex;
use crate::record::{self, Record, ABSENT, LOCKED, UNPERSISTED};
use crate::schema::TableId;
use crate::table::{self, ScannedLeaf, Table};
use crossbeam_epoch as epoch;
use std::sync::Arc;

/// How long a committing writer spins for a record lock before aborting.
const LOCK_SPINS: u32 = 256;

/// One buffered write.
pub struct WriteEntry {
    /// Table.
    pub table: TableId,
    /// Primary key.
    pub key: Vec<u8>,
    /// New value, `None` for a delete.
    pub value: Option<Vec<u8>>,
    /// The record (alive as long as its table).
    pub record: *const Record,
    /// Whether the commit adds secondary-index entries for this row (a new
    /// row, or a secondary key changed); see `Table::secondaries_to_index`.
    pub index_secondaries: bool,
}

// SAFETY: the record pointer refers to a record owned by a table that
// outlives the worker (the engine holds the tables in an Arc).
unsafe impl Send for WriteEntry {}

impl WriteEntry {
    /// The record.
    pub fn record(&self) -> &Record {
        // SAFETY: records live as long as their table (see Send above).
        unsafe { &*self.record }
    }
}

/// Where a policy's log step sits in the commit (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitStage {
    /// Append with the write set locked and validated, then install and
    /// unlock (silo, group-commit).
    LogBeforeInstall,
    /// Install with the write set still locked, append (the policy makes the
    /// record durable), then unlock: the log is inside the commit region, so
    /// no parity is needed (dbx-naive).
    LogAfterInstallLocked,
    /// Install with UNPERSISTED and unlock, append (durable when `append`
    /// returns), then clear UNPERSISTED on each written record unless a
    /// later writer replaced the version (dbxn).
    LogAfterInstallParity,
}

/// The durability side of commit.
pub trait CommitLog: Send + Sync + 'static {
    /// Where `append` runs in the commit.
    const STAGE: CommitStage = CommitStage::LogBeforeInstall;
    /// Per-worker state (its log buffer).
    type Worker: Send;
    /// Per-worker state for worker `id`.
    fn worker(&self, id: usize) -> DbResult<Self::Worker>;
    /// Called before the commit region of a transaction that writes, with
    /// nothing locked: prepare the redo record (reserve log space). An error
    /// ends the transaction. Policies whose stage is `LogAfterInstall*` must
    /// make `append` infallible here, since nothing can be undone after the
    /// install.
    fn prepare(&self, _worker: &mut Self::Worker, _writes: &[WriteEntry]) -> DbResult<()> {
        Ok(())
    }
    /// Called before each commit region (validation, and install for
    /// writers): the HTM abort-injection gate. `Err` aborts the attempt
    /// before anything is locked or installed.
    fn region_gate(&self) -> Result<(), AbortReason> {
        Ok(())
    }
    /// Appends the redo record of `tid` at the point [`CommitLog::STAGE`]
    /// says. Returns the ticket of the commit.
    fn append(&self, worker: &mut Self::Worker, tid: u64, writes: &[WriteEntry]) -> DbResult<CommitTicket>;
    /// Ticket for a read-only transaction that read data up to `max_tid`.
    fn read_only_ticket(&self, max_tid: u64) -> CommitTicket;
    /// Whether `ticket` is durable.
    fn is_durable(&self, ticket: CommitTicket) -> bool;
}

/// Shared state of an OCC engine.
pub struct OccShared<L: CommitLog> {
    /// Tables by id.
    pub tables: Vec<Table>,
    /// Epochs.
    pub epochs: Arc<Epochs>,
    /// Durability policy.
    pub log: L,
}

impl<L: CommitLog> OccShared<L> {
    /// Table `id`, or an error.
    pub fn table(&self, id: TableId) -> TxResult<&Table> {
        self.tables.get(id.0 as usize).ok_or_else(|| TxError::Db(DbError::UnknownTable(format!("#{}", id.0))))
    }
}

struct ReadEntry {
    record: *const Record,
    word: u64,
}

// SAFETY: as for WriteEntry.
unsafe impl Send for ReadEntry {}

fn read_record_of(entry: &ReadEntry) -> *const Record {
    entry.record
}

fn write_record_of(entry: &WriteEntry) -> *const Record {
    entry.record
}

struct LeafEntry {
    table: TableId,
    leaf: ScannedLeaf,
}

/// A worker of an OCC engine.
pub struct OccWorker<L: CommitLog> {
    shared: Arc<OccShared<L>>,
    id: usize,
    log: L::Worker,
    reads: Vec<ReadEntry>,
    read_positions: PositionIndex,
    writes: Vec<WriteEntry>,
    write_positions: PositionIndex,
    leaves: Vec<LeafEntry>,
    last_tid: u64,
    scratch: Vec<u8>,
    active: bool,
}

impl<L: CommitLog> OccWorker<L> {
    /// Worker `id` over `shared`.
    pub fn new(shared: Arc<OccShared<L>>, id: usize) -> DbResult<Self> {
        assert!(id < shared.epochs.capacity(), "worker id {id} beyond the configured worker count");
        let log = shared.log.worker(id)?;
        Ok(Self {
            shared,
            id,
            log,
            reads: Vec::new(),
            read_positions: PositionIndex::default(),
            writes: Vec::new(),
            write_positions: PositionIndex::default(),
            leaves: Vec::new(),
            last_tid: 0,
            scratch: Vec::new(),
            active: false,
        })
    }

    fn find_write(&self, record: *const Record) -> Option<usize> {
        self.write_positions.find(&self.writes, write_record_of, record)
    }

    fn find_read(&self, record: *const Record) -> Option<usize> {
        self.read_positions.find(&self.reads, read_record_of, record)
    }

    /// Reads `record` stably and remembers its version.
    fn read_record(&mut self, record: &Record, out: &mut Vec<u8>) -> TxResult<bool> {
        if let Some(position) = self.find_write(record) {
            return Ok(match &self.writes[position].value {
                Some(value) => {
                    out.clear();
                    out.extend_from_slice(value);
                    true
                }
                None => false,
            });
        }
        let guard = epoch::pin();
        let snapshot = record.read_stable(out, &guard).ok_or(TxError::Abort(AbortReason::UnstableRead))?;
        if self.find_read(record).is_none() {
            // DBXN: an odd (UNPERSISTED) version is not an early abort; the
            // read set holds the next even version, which validates only once
            // the writer's log is durable. No-op for the other engines.
            self.reads.push(ReadEntry { record, word: snapshot.word & !UNPERSISTED });
            self.read_positions.pushed(&self.reads, read_record_of);
        }
        Ok(!snapshot.is_absent())
    }

    /// Records an own insert's leaf change: if this transaction scanned that
    /// leaf at exactly the version before the insert, move it forward (Silo's
    /// node-set update), so its own insert is not taken for a phantom.
    fn note_own_insert(&mut self, table: TableId, change: Option<crate::index::LeafChange>) {
        if let Some(change) = change {
            for entry in &mut self.leaves {
                if entry.table == table
                    && entry.leaf.secondary.is_none()
                    && entry.leaf.leaf == change.leaf
                    && entry.leaf.version == change.version_before
                {
                    entry.leaf.version = change.version_after;
                }
            }
        }
    }

    /// The append of the `LogAfterInstall*` stages. The policy reserved the
    /// record in `prepare`; a failure here would leave installed versions
    /// without a log, which no policy may allow.
    fn append_after_install(&mut self, tid: u64) -> CommitTicket {
        match self.shared.log.append(&mut self.log, tid, &self.writes) {
            Ok(ticket) => ticket,
            Err(error) => panic!("log append failed after install (the policy's prepare must prevent it): {error}"),
        }
    }

    fn release_locks(&self, locked: usize) {
        for write in &self.writes[..locked] {
            write.record().unlock();
        }
    }

    fn clear(&mut self) {
        self.reads.clear();
        self.read_positions.clear();
        self.writes.clear();
        self.write_positions.clear();
        self.leaves.clear();
    }

    fn validate_reads(&self) -> Result<(), AbortReason> {
        for read in &self.reads {
            // SAFETY: see ReadEntry.
            let record = unsafe { &*read.record };
            let current = record.word();
            if current & !LOCKED != read.word {
                if current & !LOCKED == read.word | UNPERSISTED {
                    return Err(AbortReason::NotYetDurable);
                }
                return Err(AbortReason::ReadValidation);
            }
            if current & LOCKED != 0 && self.find_write(read.record).is_none() {
                return Err(AbortReason::ReadValidation);
            }
        }
        for entry in &self.leaves {
            let table = &self.shared.tables[entry.table.0 as usize];
            if !table.validate_leaf(&entry.leaf) {
                return Err(AbortReason::NodeValidation);
            }
        }
        Ok(())
    }

    fn commit_inner(&mut self) -> TxResult<CommitTicket> {
        if self.writes.is_empty() {
            self.shared.log.region_gate().map_err(TxError::Abort)?;
            self.validate_reads().map_err(TxError::Abort)?;
            let max_tid = self.reads.iter().map(|r| record::tid_of(r.word)).max().unwrap_or(0);
            return Ok(self.shared.log.read_only_ticket(max_tid));
        }
        // 0. Reserve the log record (may fail; nothing is locked yet), then
        //    the HTM gate of the commit region.
        self.shared.log.prepare(&mut self.log, &self.writes)?;
        self.shared.log.region_gate().map_err(TxError::Abort)?;
        // 1. Lock the write set in address order.
        self.writes.sort_by_key(|w| w.record as usize);
        self.write_positions.rebuild(&self.writes, write_record_of);
        let mut max_tid = self.last_tid;
        for index in 0..self.writes.len() {
            match self.writes[index].record().lock(LOCK_SPINS) {
                Some(word) => max_tid = max_tid.max(record::tid_of(word)),
                None => {
                    self.release_locks(index);
                    return Err(TxError::Abort(AbortReason::WriteLock));
                }
            }
        }
        // 2. Serialization point.
        let epoch = self.shared.epochs.global();
        // 3. Validate.
        if let Err(reason) = self.validate_reads() {
            self.release_locks(self.writes.len());
            return Err(TxError::Abort(reason));
        }
        // 4. TID.
        for read in &self.reads {
            max_tid = max_tid.max(record::tid_of(read.word));
        }
        let tid = (max_tid + 1).max(record::first_tid_of_epoch(epoch));
        debug_assert!(record::epoch_of_tid(tid) >= epoch);
        // 5. Log, where the policy's stage says, and 6. install and unlock.
        let mut ticket = None;
        if L::STAGE == CommitStage::LogBeforeInstall {
            match self.shared.log.append(&mut self.log, tid, &self.writes) {
                Ok(done) => ticket = Some(done),
                Err(error) => {
                    self.release_locks(self.writes.len());
                    return Err(TxError::Db(error));
                }
            }
        }
        let guard = epoch::pin();
        for write in &self.writes {
            write.record().set_value_locked(write.value.as_deref(), &guard);
        }
        // Secondary entries go in while the rows are still locked, so a
        // secondary scan that misses one sees the leaf version change (a
        // phantom) or meets the locked row; never a committed row it cannot
        // find.
        for write in &self.writes {
            if let (true, Some(value)) = (write.index_secondaries, &write.value) {
                let table = &self.shared.tables[write.table.0 as usize];
                if let Err(error) = table.index_secondaries(&write.key, value, write.record()) {
                    unreachable!("secondary key lengths are checked when a write is buffered: {error}");
                }
            }
        }
        if L::STAGE == CommitStage::LogAfterInstallLocked {
            ticket = Some(self.append_after_install(tid));
        }
        let parity = if L::STAGE == CommitStage::LogAfterInstallParity { UNPERSISTED } else { 0 };
        for write in &self.writes {
            let flags = if write.value.is_none() { ABSENT } else { 0 };
            write.record().store_word(record::word_of(tid, flags | parity));
        }
        drop(guard);
        if L::STAGE == CommitStage::LogAfterInstallParity {
            // DBXN's logging and commit phases: outside the region, the
            // record is written and made durable, then each written version
            // turns even (a later writer's version is never clobbered).
            ticket = Some(self.append_after_install(tid));
            for write in &self.writes {
                write.record().clear_unpersisted(tid);
            }
        }
        let ticket = ticket.expect("every stage appends");
        self.last_tid = tid;
        Ok(ticket)
    }
}

impl<L: CommitLog> EngineWorker for OccWorker<L> {
    fn begin(&mut self, _read_only: bool) {
        self.clear();
        if !self.active {
            self.shared.epochs.enter(self.id);
            self.active = true;
        } else {
            // Re-announce so a long-running worker does not hold back group
            // commit with a stale epoch.
            self.shared.epochs.enter(self.id);
        }
    }

    fn get(&mut self, table_id: TableId, key: &[u8], out: &mut Vec<u8>) -> TxResult<bool> {
        let shared = Arc::clone(&self.shared);
        let table = shared.table(table_id)?;
        table.check_key(key)?;
        // DBX's get-with-insert: a read of an absent key inserts a
        // placeholder so a concurrent insert of that key conflicts with it.
        let (record, inserted, change) = table.get_or_insert(key)?;
        if inserted {
            self.note_own_insert(table_id, change);
        }
        self.read_record(record, out)
    }

    fn write(&mut self, table_id: TableId, key: &[u8], op: WriteOp<'_>) -> TxResult<bool> {
        let shared = Arc::clone(&self.shared);
        let table = shared.table(table_id)?;
        table.check_key(key)?;
        if let WriteOp::Put(value) | WriteOp::Insert(value) | WriteOp::Update(value) = op {
            table.check_value(value)?;
        }
        let (record, inserted, change) = table.get_or_insert(key)?;
        if inserted {
            self.note_own_insert(table_id, change);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let present = self.read_record(record, &mut scratch);
        self.scratch = scratch;
        let present = present?;
        let (value, applies) = match op {
            WriteOp::Put(value) => (Some(value.to_vec()), true),
            WriteOp::Insert(value) => (Some(value.to_vec()), !present),
            WriteOp::Update(value) => (Some(value.to_vec()), present),
            WriteOp::Delete => (None, present),
        };
        if !applies {
            return Ok(false);
        }
        // `scratch` holds the row as this transaction sees it (its own
        // earlier write, or the committed row it just validated against).
        let index_secondaries = match &value {
            Some(new) if !table.schema().secondaries.is_empty() => {
                table::secondaries_to_index(table.schema(), key, new, present.then_some(self.scratch.as_slice()))?
            }
            _ => false,
        };
        match self.find_write(record) {
            Some(position) => {
                let write = &mut self.writes[position];
                write.value = value;
                write.index_secondaries |= index_secondaries;
            }
            None => {
                self.writes.push(WriteEntry { table: table_id, key: key.to_vec(), value, record, index_secondaries });
                self.write_positions.pushed(&self.writes, write_record_of);
            }
        }
        Ok(true)
    }

    fn scan(&mut self, request: ScanRequest<'_>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> TxResult<()> {
        let shared = Arc::clone(&self.shared);
        let table = shared.table(request.table)?;
        // (primary key, index key for secondary scans, record).
        let mut rows: Vec<table::ScannedRow<Record>> = Vec::new();
        let mut leaves = Vec::new();
        // The index counts absent placeholders too, so the limit is applied
        // here to present rows. Absent rows before the cut still enter the
        // read set below: a later insert into one of them is a phantom that
        // the leaf versions alone would not show.
        let mut present_rows = 0usize;
        let writes = &self.writes;
        let write_positions = &self.write_positions;
        table.scan(
            request.secondary,
            request.range,
            request.direction,
            usize::MAX,
            |key, index_key, record| {
                let own = write_positions.find(writes, write_record_of, record).map(|at| &writes[at]);
                let present = match own {
                    Some(write) => write.value.is_some(),
                    None => record.word() & ABSENT == 0,
                };
                let index_key = if request.secondary.is_some() { index_key.to_vec() } else { Vec::new() };
                rows.push((key.to_vec(), index_key, record as *const Record));
                present_rows += present as usize;
                // A secondary entry may be stale (checked below, once the row
                // is read stably), so secondary scans do not stop early.
                request.secondary.is_some() || present_rows < request.limit
            },
            |leaf| leaves.push(LeafEntry { table: request.table, leaf }),
        )?;
        self.leaves.extend(leaves);
        if let Some(position) = request.secondary {
            let own = self.writes.iter().filter(|write| write.table == request.table && write.index_secondaries);
            let own = own.filter_map(|write| Some((write.key.as_slice(), write.value.as_deref()?, write.record)));
            table::merge_own_secondary_rows(table.schema(), position, request.range, request.direction, &mut rows, own);
        }
        let mut value = Vec::new();
        let mut delivered = 0;
        for (key, index_key, record) in rows {
            if delivered >= request.limit {
                break;
            }
            // SAFETY: records live as long as their table.
            let record = unsafe { &*record };
            if self.read_record(record, &mut value)?
                && request.secondary.is_none_or(|position| {
                    table::secondary_entry_is_current(table.schema(), position, &index_key, &key, &value)
                })
            {
                delivered += 1;
                if !visit(&key, &value) {
                    break;
                }
            }
        }
        Ok(())
    }

    fn commit(&mut self) -> TxResult<CommitTicket> {
        let result = self.commit_inner();
        self.clear();
        result
    }

    fn abort(&mut self) {
        self.clear();
    }

    fn idle(&mut self) {
        if self.active {
            self.shared.epochs.leave(self.id);
            self.active = false;
        }
    }

    fn wait_durable(&mut self, ticket: CommitTicket) {
        // Going idle first: a waiting worker must not hold back the epoch it
        // waits for.
        self.idle();
        let mut spins = 0u32;
        while !self.shared.log.is_durable(ticket) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}

impl<L: CommitLog> Drop for OccWorker<L> {
    fn drop(&mut self) {
        self.shared.epochs.leave(self.id);
    }
}
