//! A Zen worker's commit steps (`engines::pipeline`'s `CommitSteps`):
//! the heap reservations, Algorithm 1's persist, the install into rows and
//! the Met-Cache, garbage and tombstones, and the maintenance after it.

use super::*;
use crate::durability::zen_persist::LpFence;

/// How long a commit that overwrites a version of another region's
/// unfenced commit waits for that region while it is busy (its worker is
/// committing, and that commit's first fence completes it) before aborting
/// (`NotYetDurable`, retried), when that region comes after its own.
const HELP_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// The same wait for a region that comes before the committer's own: the
/// committer holds its own region, and that region's worker may be waiting
/// for it (two hot rows, each last written by the other worker); regions
/// are waited for in id order only, so this side gives up soon and frees
/// its region instead of both waiting out [`HELP_WAIT`].
const HELP_WAIT_AGAINST_ORDER: std::time::Duration = std::time::Duration::from_micros(20);

/// What a Zen commit holds from its reservations to its maintenance.
pub(crate) struct Held<'s> {
    /// The worker's heap region (uncontended; a sweep waits for it).
    state: MutexGuard<'s, heap::RegionState>,
    /// The LP tuple's slot (0: nothing persisted).
    lp_slot: u64,
    /// Other regions whose unfenced commit this one overwrites a version
    /// of, locked until this commit's first fence makes it durable and it
    /// is completed (before the install).
    overwritten: Vec<(usize, MutexGuard<'s, heap::RegionState>)>,
}

/// Another region's unfenced commit an attempt read or overwrites a
/// version of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnfencedInput {
    region: usize,
    cts: u64,
    overwritten: bool,
}

/// Zen's storage and its log-free durability in the commit pipeline
/// (module comment, steps 1-6).
impl<B: PmBackend> CommitSteps for ZenWorker<B> {
    type Row = Row;
    type Shared = ZenShared<B>;
    type Held<'s>
        = Held<'s>
    where
        ZenShared<B>: 's;
    type Rule = Validating;
    /// The persist (Algorithm 1) precedes the install.
    const STAGE: CommitStage = CommitStage::LogBeforeInstall;

    #[inline]
    fn tx(&mut self) -> &mut TxState<Row> {
        &mut self.tx
    }

    #[inline]
    fn worker_id(&self) -> usize {
        self.id
    }

    #[inline]
    fn tables(shared: &ZenShared<B>) -> &[crate::storage::table::Table<Row>] {
        &shared.tables
    }

    #[inline]
    fn concurrency(shared: &ZenShared<B>) -> &Concurrency {
        &shared.cc
    }

    #[inline]
    fn global_epoch(shared: &ZenShared<B>) -> u64 {
        shared.epochs.global()
    }

    /// `zen+`: a transaction that is not yet committing yields to an
    /// exclusive stage; from here on it finishes.
    fn enter<'s>(&mut self, shared: &'s ZenShared<B>) -> TxResult<Region<'s>> {
        if let Some(plus) = &shared.plus {
            plus.adaptive.check(self.id, &self.adaptive).map_err(TxError::Abort)?;
        }
        Ok(Region::Software)
    }

    fn read_only_ticket(&mut self, shared: &ZenShared<B>) -> CommitTicket {
        if shared.window.is_some() {
            // wbl: what it read is committed once its window is.
            return CommitTicket::Epoch(record::epoch_of_tid(self.tx.max_read_tid()));
        }
        // A version of another worker's unfenced commit it read: durable
        // with that commit (`check_inputs_durable`). One of this worker's:
        // durable with this worker's unfenced commit, which the queue of
        // acknowledgements has before it.
        match self.unfenced_dependency.take() {
            Some(ticket) => ticket,
            None => self.own_unfenced_ticket(shared),
        }
    }

    /// Step 3's end (and a read-only attempt's). The versions the attempt
    /// read or overwrites that belong to another region's unfenced commit
    /// (module comment, "Pipelined commits") become durable no later than
    /// the attempt: a writing attempt flushes their LP lines with its own
    /// tuples, so its first fence covers them, and one that overwrites such
    /// a version also locks that region until then, to complete it before
    /// the install (or aborts with `NotYetDurable` if the region stays
    /// busy); a pipelined read-only attempt takes that commit's ticket (two
    /// or more, or a read-only attempt acknowledged at return: it flushes
    /// their LP lines and fences).
    fn check_inputs_durable<'s>(
        &mut self,
        shared: &'s ZenShared<B>,
        held: Option<&mut Held<'s>>,
    ) -> Result<(), AbortReason> {
        self.unfenced_dependency = None;
        if shared.window.is_some() || shared.faults.commits_on_unfenced_writes() {
            return Ok(());
        }
        let heap = &shared.heap;
        self.unfenced_seen.clear();
        for region in 0..heap.regions.len() {
            let cts = heap.unfenced_cts(region);
            if cts != 0 && region != self.id {
                self.unfenced_seen.push((region, cts));
            }
        }
        if self.unfenced_seen.is_empty() {
            return Ok(());
        }
        self.unfenced_inputs.clear();
        let (seen, inputs) = (&self.unfenced_seen, &mut self.unfenced_inputs);
        for read in &self.tx.reads {
            // SAFETY: see `WriteEntry::row` (rows live while the attempt is
            // announced).
            let row = unsafe { &*read.row };
            note_unfenced_input(heap, seen, inputs, row, record::tid_of(read.word), false);
        }
        for entry in self.tx.writes.entries() {
            note_unfenced_input(heap, seen, inputs, entry.row(), record::tid_of(entry.locked_word), true);
        }
        if self.unfenced_inputs.is_empty() {
            return Ok(());
        }
        match held {
            Some(held) => self.fold_unfenced_inputs(shared, held),
            None => {
                self.depend_on_unfenced_inputs(shared);
                Ok(())
            }
        }
    }

    /// Step 1-2: lock the worker's heap region, reserve one slot per write
    /// (in the write set's lock order, so the reservation order matches)
    /// and start their lines' ownership requests.
    fn prepare<'s>(&mut self, shared: &'s ZenShared<B>) -> TxResult<Held<'s>> {
        if shared.closed.load(Ordering::Relaxed) {
            return Err(TxError::Db(DbError::Poisoned("the database is closed".into())));
        }
        let (heap, pool) = (&shared.heap, &*shared.pool);
        let advance = || shared.advance_epoch();
        let mut state = heap.regions[self.id].state.lock();
        self.tx.writes.sort_by_row();
        self.reserved.clear();
        for index in 0..self.tx.writes.len() {
            let entry = &self.tx.writes.entries()[index];
            if let Some(&(reserved, _)) = self.spilled.get(&(entry.row() as *const Row as usize)) {
                self.reserved.push(reserved);
                continue;
            }
            let table = entry.table.0;
            match state.reserve(heap, pool, &shared.epochs, self.id, table, &advance) {
                Ok(reserved) => self.reserved.push(reserved),
                Err(error) => {
                    self.unreserve_all(&mut state);
                    return Err(TxError::Db(error));
                }
            }
        }
        // The reserved slots are cold: start their lines' ownership
        // requests now, so step 4's stores do not stall on them one by one.
        for (index, reserved) in self.reserved.iter().enumerate() {
            if let (true, WriteValue::Bytes(value)) = (reserved.slot != 0, self.tx.writes.value_state(index)) {
                let entry = &self.tx.writes.entries()[index];
                let value_len = value.len();
                pool.backend()
                    .prefetch_for_write(reserved.slot, META_LEN + (entry.row().key().len() + value_len) as u64);
            }
        }
        Ok(Held { state, lp_slot: 0, overwritten: Vec::new() })
    }

    fn unprepare(&mut self, _shared: &ZenShared<B>, held: &mut Held<'_>) {
        held.overwritten.clear();
        self.unreserve_all(&mut held.state);
    }

    /// The Tx-CTS: Silo's TID above the region's last (so it grows per
    /// thread), or the one the direct NVM writes carry already.
    #[inline]
    fn tid_floor(&self, held: &Held<'_>) -> TidFloor {
        match self.spill_cts {
            Some(cts) => TidFloor::Fixed(cts),
            None => TidFloor::Above(held.state.last_cts),
        }
    }

    /// Step 4: persist (Algorithm 1; wbl: the versions and one fence).
    fn persist_before_install(
        &mut self,
        shared: &ZenShared<B>,
        held: &mut Held<'_>,
        cts: u64,
    ) -> DbResult<Option<CommitTicket>> {
        debug_assert!(cts > held.state.last_cts && cts & heap::LP_BIT == 0);
        held.lp_slot = self.persist(shared, &mut held.state, cts);
        if !self.batch.is_empty() {
            // Nothing persisted, but the LP lines of other regions'
            // unfenced commits it depends on wait in the batch.
            let backend = shared.pool.backend();
            self.batch.commit(backend);
        }
        // The unfenced commits it overwrites are durable now (its first
        // fence): completed before their versions are superseded.
        for (region, mut state) in held.overwritten.drain(..) {
            state.complete_unfenced(&shared.heap, &shared.pool, &shared.epochs, region);
        }
        Ok(None)
    }

    /// Step 5: points the row at its new NVM-tuple and installs the value
    /// in this worker's Met-Cache region; the superseded slot becomes
    /// garbage, a delete's slot a tombstone.
    fn install(&mut self, shared: &ZenShared<B>, _held: &mut Held<'_>, index: usize, cts: u64) {
        let entry = &self.tx.writes.entries()[index];
        let locked_word = entry.locked_word;
        // SAFETY: see `WriteEntry::row`; the reference does not borrow
        // the write set, which `maintain_secondaries` reads.
        let row: &Row = unsafe { &*(entry.row() as *const Row) };
        if pipeline::needs_current(&self.tx, &shared.tables, index, <Validating as CommitRule>::VALIDATES) {
            self.read_locked(row, locked_word);
            pipeline::install_bookkeeping(&mut self.tx, &shared.tables, index, row, Some(&self.old_value), cts);
        } else {
            pipeline::install_bookkeeping(&mut self.tx, &shared.tables, index, row, None, cts);
        }
        let reserved = self.reserved[index];
        if reserved.slot == 0 {
            // Nothing persisted (a delete of a never-durable row).
            self.install_cache(row, cts, None);
            return;
        }
        let old_slot = row.slot();
        match self.tx.writes.value_state(index) {
            WriteValue::Bytes(bytes) => {
                row.set_slot(reserved.slot, bytes.len());
                self.install_cache(row, cts, Some(bytes));
            }
            WriteValue::Spilled(len) => {
                // Written to the heap directly: its Met-Cache region
                // was full, so the row is not cached.
                row.set_slot(reserved.slot, len);
                self.install_uncached(row);
            }
            WriteValue::Delete => {
                row.set_slot(reserved.slot, 0);
                self.install_cache(row, cts, None);
                self.tombstones.push((index, reserved.slot));
            }
        }
        if old_slot != 0 {
            // A superseded tombstone can never resurrect anything.
            let kind = if locked_word & ABSENT != 0 { SlotKind::Clean } else { SlotKind::Stale };
            self.retired.push(Garbage { slot: old_slot, stamp: 0, kind });
        }
    }

    /// Step 5's end: the garbage stamp, read after every row points at its
    /// new slot and before the rows are unlocked, stamps the superseded
    /// slots and the tombstones (held by the region while this commit is
    /// unfenced).
    fn installed(&mut self, shared: &ZenShared<B>, held: &mut Held<'_>, cts: u64) {
        // IMPORTANT: the stamp is read after every row points at its new
        // slot (reader safety) and before the rows are unlocked (so stamps of
        // one key's versions grow, which the tombstone sweep relies on).
        let stamp = heap::horizon_stamp(&shared.epochs);
        if let Some(window) = &shared.window {
            // The windows up to this commit's, and up to the stamp of what
            // it superseded (which is reused once that is durable), are
            // wanted.
            window.note_commit(self.id, record::epoch_of_tid(cts).max(stamp));
        }
        // IMPORTANT: an unfenced commit may still be lost: what it
        // superseded stays intact, and its tombstones wait, until it is
        // completed (`storage::zen::heap`, "Unfenced commits").
        let unfenced = held.state.unfenced().is_some_and(|unfenced| unfenced.cts == cts);
        for mut garbage in self.retired.drain(..) {
            garbage.stamp = stamp;
            if unfenced {
                held.state.hold_garbage(garbage);
            } else {
                shared.heap.retire(self.id, &mut held.state, garbage);
            }
        }
        for (index, slot) in self.tombstones.drain(..) {
            let entry = &self.tx.writes.entries()[index];
            let tombstone = Tombstone::new(entry.table.0, self.tx.writes.key(index), entry.row(), slot, cts, stamp);
            if unfenced {
                held.state.hold_tombstone(tombstone);
            } else {
                held.state.push_tombstone(tombstone);
            }
        }
    }

    /// Step 6: moves the region's LP pin (an unfenced commit's moves when it
    /// is completed), reclaims garbage and the tombstones the last sweep
    /// made safe, unlocks the region, sweeps if enough tombstones wait.
    fn finish(
        &mut self,
        shared: &ZenShared<B>,
        held: Held<'_>,
        cts: u64,
        _ticket: Option<CommitTicket>,
    ) -> TxResult<CommitTicket> {
        let Held { mut state, lp_slot, overwritten } = held;
        debug_assert!(overwritten.is_empty(), "completed at the persist");
        let (heap, pool) = (&shared.heap, &*shared.pool);
        state.last_cts = cts;
        let unfenced = state.unfenced();
        if lp_slot != 0 && unfenced.is_none_or(|unfenced| unfenced.cts != cts) {
            state.move_pin(heap, pool, lp_slot);
        }
        // The region's unfenced commit is this one, or an earlier one if
        // this one persisted nothing (acknowledged in order after it).
        let ticket = match unfenced {
            Some(unfenced) if unfenced.cts == cts && self.acknowledges_unfenced(shared) => CommitTicket::Durable,
            Some(unfenced) => CommitTicket::Flushed { worker: self.id as u32, cts: unfenced.cts },
            None => CommitTicket::Durable,
        };
        self.reserved.clear();
        // The direct NVM writes are committed with the rest.
        self.spilled.clear();
        self.reset_spill();
        state.drain_inbox_of(heap, self.id);
        let horizon = heap.horizon(&shared.epochs);
        state.reclaim(heap, pool, horizon, shared.options.gc_batch);
        state.reclaim_tombstones(heap, pool);
        let sweep = state.tombstones_awaiting_sweep(heap, horizon) >= shared.options.sweep_threshold.max(1);
        drop(state);
        if sweep {
            // A sweep waits for every region; this worker must not hold the
            // horizon back meanwhile (it reads nothing more).
            self.leave();
            heap.sweep(pool, &shared.epochs, &|| shared.advance_epoch());
        }
        if shared.window.is_some() && !shared.faults.ack_before_window() {
            // wbl: committed once the record of the TID's window is durable
            // (the broken variant acknowledges now).
            return Ok(CommitTicket::Epoch(record::epoch_of_tid(cts)));
        }
        Ok(ticket)
    }
}

/// Notes in `inputs` the unfenced commit (of `seen`: region, Tx-CTS) that
/// the version `tid` of `row`, read or (`locked`: this attempt holds the
/// row) overwritten, belongs to, if any. A row that no longer carries
/// `tid` was superseded, which a writer does only once the version is
/// durable and its commit completed; a version with the Tx-CTS of another
/// region's unfenced commit is that commit's only if its slot lies in that
/// region.
#[inline]
fn note_unfenced_input(
    heap: &heap::Heap,
    seen: &[(usize, u64)],
    inputs: &mut Vec<UnfencedInput>,
    row: &Row,
    tid: u64,
    locked: bool,
) {
    if tid == 0 || !seen.iter().any(|&(_, cts)| cts == tid) {
        return;
    }
    if !locked && record::tid_of(row.word()) != tid {
        return;
    }
    let slot = row.slot();
    if slot == 0 {
        // No tuple: a delete of a row that never reached the heap, which
        // changes nothing a crash could lose.
        return;
    }
    let (_, region) = heap.owner_of(slot);
    if !seen.iter().any(|&(owner, cts)| owner == region && cts == tid) {
        return;
    }
    match inputs.iter_mut().find(|input| input.region == region && input.cts == tid) {
        Some(input) => input.overwritten |= locked,
        None => inputs.push(UnfencedInput { region, cts: tid, overwritten: locked }),
    }
}

impl<B: PmBackend> ZenWorker<B> {
    /// A writing attempt's unfenced inputs (`check_inputs_durable`): locks
    /// the region of each one it overwrites (waiting up to [`HELP_WAIT`]
    /// while that region's worker commits, whose first fence completes it,
    /// then aborting; [`HELP_WAIT_AGAINST_ORDER`] for a region before its
    /// own), then adds each one's LP line to the batch its first fence
    /// makes durable.
    fn fold_unfenced_inputs<'s>(&mut self, shared: &'s ZenShared<B>, held: &mut Held<'s>) -> Result<(), AbortReason> {
        let heap = &shared.heap;
        for index in 0..self.unfenced_inputs.len() {
            let UnfencedInput { region, cts, overwritten } = self.unfenced_inputs[index];
            if !overwritten {
                continue;
            }
            let wait = if region > self.id { HELP_WAIT } else { HELP_WAIT_AGAINST_ORDER };
            let mut spins = 0u32;
            let mut since = None;
            loop {
                if heap.unfenced_cts(region) != cts {
                    break; // completed meanwhile
                }
                // IMPORTANT: only tried: this worker holds its own region,
                // which that region's worker may be trying to take.
                if let Some(state) = heap.regions[region].state.try_lock() {
                    if state.unfenced().is_some_and(|unfenced| unfenced.cts == cts) {
                        held.overwritten.push((region, state));
                    }
                    break;
                }
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else if since.get_or_insert_with(std::time::Instant::now).elapsed() > wait {
                    held.overwritten.clear();
                    return Err(AbortReason::NotYetDurable);
                } else {
                    std::thread::yield_now();
                }
            }
        }
        for input in &self.unfenced_inputs {
            // `None`: no longer unfenced, durable already.
            if let Some(lp_slot) = heap.unfenced_lp_slot(input.region, input.cts) {
                self.batch.add(lp_slot, 8);
            }
        }
        Ok(())
    }

    /// A read-only attempt's unfenced inputs (`check_inputs_durable`): a
    /// pipelined attempt with one takes its ticket (if acknowledged on its
    /// own, only without an unfenced commit of its worker, whose ticket
    /// covers what it read of that worker); otherwise their LP lines are
    /// flushed and fenced here, and each is completed if its region is free
    /// (its worker completes it otherwise).
    fn depend_on_unfenced_inputs(&mut self, shared: &ZenShared<B>) {
        if let [input] = self.unfenced_inputs[..] {
            if self.pipelined && (self.in_order || shared.heap.unfenced_cts(self.id) == 0) {
                self.unfenced_dependency = Some(CommitTicket::Flushed { worker: input.region as u32, cts: input.cts });
                return;
            }
        }
        let (heap, backend) = (&shared.heap, shared.pool.backend());
        let mut flushed = false;
        for input in &self.unfenced_inputs {
            if let Some(lp_slot) = heap.unfenced_lp_slot(input.region, input.cts) {
                backend.flush(lp_slot, 8);
                flushed = true;
            }
        }
        if !flushed {
            return;
        }
        backend.fence();
        for input in &self.unfenced_inputs {
            if let Some(mut state) = heap.regions[input.region].state.try_lock() {
                if state.unfenced().is_some_and(|unfenced| unfenced.cts == input.cts) {
                    state.unfenced_fenced_again += 1;
                    state.complete_unfenced(heap, &shared.pool, &shared.epochs, input.region);
                }
            }
        }
    }
    /// Returns the commit's reservations, except the slots of direct NVM
    /// writes (they hold tuples: [`ZenWorker::discard_spilled`] erases
    /// them first).
    pub(super) fn unreserve_all(&mut self, state: &mut heap::RegionState) {
        for (index, reserved) in self.reserved.drain(..).enumerate() {
            let row = self.tx.writes.entries().get(index).map(|entry| entry.row() as *const Row as usize);
            if row.is_some_and(|row| self.spilled.contains_key(&row)) {
                continue;
            }
            state.unreserve(&self.shared.heap, &self.shared.pool, reserved);
        }
    }

    /// The committed value of `row` (locked by this commit, present): from
    /// the cache if it holds the version, else from its NVM-tuple.
    pub(super) fn read_locked(&mut self, row: &Row, word: u64) {
        self.old_value.clear();
        match row.cached() {
            Some(entry) if entry.cts() == record::tid_of(word) => entry.copy_into(&mut self.old_value),
            _ => {
                self.old_value.resize(row.len(), 0);
                self.shared.pool.backend().read(row.slot() + META_LEN + row.key().len() as u64, &mut self.old_value);
            }
        }
    }

    /// The ticket of a commit that wrote nothing durable: that of this
    /// worker's unfenced commit, if any (module comment, "Pipelined
    /// commits").
    pub(super) fn own_unfenced_ticket(&self, shared: &ZenShared<B>) -> CommitTicket {
        match shared.heap.unfenced_cts(self.id) {
            0 => CommitTicket::Durable,
            cts => CommitTicket::Flushed { worker: self.id as u32, cts },
        }
    }

    /// The broken variants that acknowledge a commit whose LP line is not
    /// fenced (`zen-ack-before-next-fence`, `zen-naive-alloc-lp-unfenced`).
    fn acknowledges_unfenced(&self, shared: &ZenShared<B>) -> bool {
        shared.faults.ack_before_next_fence() || shared.faults.lp_unfenced()
    }

    /// Encodes and persists the write set; returns the LP tuple's slot (0 if
    /// nothing needed persisting). Unneeded reservations are returned and
    /// their `reserved` entries zeroed. The first fence completes the
    /// region's unfenced commit; a pipelined commit becomes the region's
    /// unfenced one.
    pub(super) fn persist(&mut self, shared: &ZenShared<B>, state: &mut heap::RegionState, cts: u64) -> u64 {
        let writes = &self.tx.writes;
        if self.encoded.len() < writes.len() {
            self.encoded.resize_with(writes.len(), Vec::new);
        }
        let mut order = std::mem::take(&mut self.persist_order);
        order.clear();
        // Direct NVM writes the transaction did not change since: durable
        // content already (their fence), not rewritten unless one carries
        // the LP bit.
        let mut written_early = Vec::new();
        for index in 0..writes.len() {
            let entry = &writes.entries()[index];
            let row = entry.row();
            let spilled = self.spilled.contains_key(&(row as *const Row as usize));
            if entry.is_delete() && row.slot() == 0 && !spilled {
                // A delete of a row that never reached the heap.
                let unused = self.reserved[index];
                self.reserved[index].slot = 0;
                state.unreserve(&shared.heap, &shared.pool, unused);
                continue;
            }
            let value = match writes.value_state(index) {
                WriteValue::Spilled(_) => {
                    written_early.push(index);
                    continue;
                }
                WriteValue::Bytes(value) => value,
                WriteValue::Delete => &[],
            };
            if row.tuple_id() == 0 {
                row.set_tuple_id(self.tuple_ids.take(&shared.metas, entry.table.0 as usize));
            }
            heap::encode_tuple(
                &mut self.encoded[index],
                cts,
                row.tuple_id(),
                entry.is_delete(),
                writes.key(index),
                value,
            );
            order.push(index);
        }
        if order.is_empty() && written_early.is_empty() {
            self.persist_order = order;
            return 0;
        }
        if let Some(meta) = &shared.wbl_meta {
            // wbl: each superseded version is claimed in its NVM header
            // (transaction id, end timestamp), persisted on its own.
            for &index in &order {
                let slot = writes.entries()[index].row().slot();
                if slot != 0 {
                    meta.persist(slot, cts);
                }
            }
        }
        if shared.window.is_some() {
            // wbl: no LP bit, so no persist order and no pinned slot.
            let (reserved, encoded) = (&self.reserved, &self.encoded);
            zen_persist::persist_versions(shared.pool.backend(), &mut self.batch, order.len(), |position| {
                (reserved[order[position]].slot, encoded[order[position]].as_slice())
            });
            self.persist_order = order;
            return 0;
        }
        // §3.3.4: the LP tuple belongs to the table first in the LP order.
        let rank = |index: usize| shared.lp_rank[writes.entries()[index].table.0 as usize];
        let lp_fresh = (0..order.len()).min_by_key(|&position| rank(order[position]));
        let lp_early = written_early.iter().copied().min_by_key(|&index| rank(index));
        let lp = match (lp_fresh, lp_early) {
            (Some(position), Some(early)) if rank(early) < rank(order[position]) => {
                self.reload_early(shared, early);
                early
            }
            (Some(position), _) => order.remove(position),
            (None, Some(early)) => {
                self.reload_early(shared, early);
                early
            }
            (None, None) => unreachable!("checked above"),
        };
        order.push(lp);
        // The previous commit left unfenced: the first fence below makes it
        // durable too, once this thread flushed its LP line.
        let previous = state.unfenced();
        if let Some(line) = state.unfenced_lp_flushed_elsewhere() {
            self.batch.add(line, 8);
        }
        let lp_fence = if self.pipelined { LpFence::Later } else { LpFence::Now };
        let (reserved, encoded) = (&self.reserved, &self.encoded);
        persist_tuples(
            shared.pool.backend(),
            &mut self.batch,
            order.len(),
            |position| (reserved[order[position]].slot, encoded[order[position]].as_slice()),
            shared.faults,
            lp_fence,
        );
        self.persist_order = order;
        let lp_slot = self.reserved[lp].slot;
        if previous.is_some() {
            state.complete_unfenced(&shared.heap, &shared.pool, &shared.epochs, self.id);
        }
        if lp_fence == LpFence::Later {
            // IMPORTANT: published before the rows are unlocked (step 7):
            // a reader of this commit's versions finds it unfenced.
            state.set_unfenced(&shared.heap, self.id, cts, lp_slot);
        }
        lp_slot
    }

    /// Reads write `index`'s tuple, written early to its reserved slot,
    /// back into its encoding buffer, so it can be persisted again as the
    /// LP tuple (the same bytes: a torn rewrite leaves the same content).
    pub(super) fn reload_early(&mut self, shared: &ZenShared<B>, index: usize) {
        let key_len = self.tx.writes.key(index).len();
        let WriteValue::Spilled(len) = self.tx.writes.value_state(index) else {
            unreachable!("only spilled writes are written early")
        };
        let buffer = &mut self.encoded[index];
        buffer.clear();
        buffer.resize(META_LEN as usize + key_len + len, 0);
        shared.pool.backend().read(self.reserved[index].slot, buffer);
        // Word 0 as encoded, without the LP bit (the broken variant wrote it).
        let word0 = u64::from_le_bytes(buffer[..8].try_into().expect("8 bytes")) & heap::CTS_MASK;
        buffer[..8].copy_from_slice(&word0.to_le_bytes());
    }

    /// Unpublishes `row`'s cached value (locked by this commit) without
    /// caching the new one, which was written to the heap directly.
    pub(super) fn install_uncached(&self, row: &Row) {
        if let Some(old) = row.install_cached(std::ptr::null_mut()) {
            retire_cached(&self.shared, old, false);
        }
    }

    /// Makes the Met-Cache hold `value` (version `cts`) for `row`, locked by
    /// this commit: in place when the row's cached entry has room, else a
    /// new entry in this worker's region. A delete (`None`) unpublishes the
    /// cached value and drops its ring entry at once, so nothing keeps the
    /// deleted row from being reclaimed.
    pub(super) fn install_cache(&self, row: &Row, cts: u64, value: Option<&[u8]>) {
        let shared = &*self.shared;
        let replaced = match value {
            Some(value) => {
                if row.cached().is_some_and(|entry| entry.overwrite(cts, value)) {
                    return;
                }
                let mut ring = shared.caches[self.id].lock();
                let installed = ring.enabled().then(|| ClockRing::cost(value.len())).and_then(|cost| {
                    let evicted = ring.make_room(cost, &shared.epochs)?;
                    WorkerCounters::add(&shared.counters[self.id].cache_evictions, evicted);
                    let new = ring.allocate(cts, value, self.id);
                    let old = row.install_cached(new.as_ptr());
                    ring.admit(row, new, cost);
                    Some(old)
                });
                drop(ring);
                match installed {
                    Some(old) => old,
                    None => row.install_cached(std::ptr::null_mut()),
                }
            }
            None => row.install_cached(std::ptr::null_mut()),
        };
        // The replaced entry goes back to its region (no region lock is held
        // here, so two committers never wait for each other's regions); a
        // delete also releases the row's ring reference at once.
        if let Some(old) = replaced {
            retire_cached(shared, old, value.is_none());
        }
    }
}

/// Retires a cache entry unpublished from its row into the region that
/// admitted it; with `drop_entry`, that region also stops charging it (a
/// delete: nothing may keep the deleted row referenced). The caller holds
/// no region lock.
pub(super) fn retire_cached<B: PmBackend>(shared: &ZenShared<B>, entry: NonNull<Cached>, drop_entry: bool) {
    // SAFETY: unpublished but not freed: only its region frees it, below.
    let (owner, index) = unsafe { entry.as_ref() }.ring_slot();
    let mut ring = shared.caches[owner].lock();
    if drop_entry {
        ring.drop_if_holds(index, entry.as_ptr() as usize);
    }
    ring.retire(entry, &shared.epochs);
}
