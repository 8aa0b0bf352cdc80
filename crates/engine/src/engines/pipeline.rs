//! One commit pipeline for every engine: the steps of a commit, in order,
//! written once over the three parts an engine composes. The protocol's
//! transaction state (`cc::transaction::TxState`) locks, validates and
//! picks the TID under the engine's commit rule
//! (`cc::protocols::commit_rule`); the durability scheme says where its
//! step sits ([`CommitStage`]); the storage (DRAM records in `dram.rs`,
//! Zen's heap and Met-Cache in `zen/worker/`) supplies the hooks of
//! [`CommitSteps`].
//!
//! A writing commit, in [`commit`]:
//!
//! 0. `enter` (before `occ`'s serial section): the region validation and
//!    install run in (software; DBX's elided HTM region; one hardware
//!    attempt on a hybrid engine's hardware path), or an abort;
//! 1. `prepare`, nothing locked: reserve what the commit needs (log space;
//!    Zen's heap slots, holding the worker's heap region until step 8);
//! 2. lock the write set in address order, read the global epoch (the
//!    serialization point);
//! 3. validate and pick the TID (the protocol's `commit_timestamp`, or a
//!    TID fixed earlier; the commit rule stamps it and collects SP^3's
//!    dependencies); then, in the stages whose log precedes the unlock,
//!    `check_inputs_durable` (Zen: a version of another worker's pipelined
//!    commit, whose last fence is still to come, is made durable no later
//!    than this commit, or the attempt aborts);
//! 4. `persist_before_install` (stage `LogBeforeInstall`: the redo record;
//!    Zen: Algorithm 1's persist);
//! 5. `begin_install`, then `install` each write, rows still locked
//!    (values, secondary indexes, older versions), then `installed` (Zen:
//!    garbage and tombstones stamped);
//! 6. `log_while_locked` (stage `LogAfterInstallLocked`);
//! 7. unlock: store each row's new word (TID, absent bit, DBXN's parity
//!    bit while its log is not durable);
//! 8. `after_unlock` (stages `LogAfterInstallParity`: log, then clear the
//!    parity; `LogAfterUnlock`: SP^3's log with its dependencies), then
//!    `finish` (Zen: the LP pin, reclamation) gives the ticket.
//!
//! With a log that follows the install (`LogAfterInstallParity`,
//! `LogAfterUnlock`), steps 2-7 run inside the region, so a hardware
//! attempt covers lock, validation and install and no flush; the other
//! stages run them in software (a flush would abort every hardware
//! attempt). A read-only attempt validates in the region, passes
//! `check_inputs_durable` and takes the ticket `read_only_ticket` gives.
//!
//! Every hook is resolved at compile time (no `dyn`): a worker's commit is
//! one monomorphized function.
//!
//! Explained in ARCHITECTURE.md §5 (how an engine is composed) and §2 (one
//! transaction).

use crate::cc::concurrency::Concurrency;
use crate::cc::protocols::commit_rule::CommitRule;
use crate::cc::transaction::TxState;
use crate::durability::CommitStage;
use crate::error::{AbortReason, DbResult, TxError, TxResult};
use crate::stats::CommitTicket;
use crate::storage::record::{self, RowKind, ABSENT};
use crate::storage::table::Table;
use pmtx_htm::{AttemptAbort, ExplicitAbort, Htm, RegionAbort};

/// Where a commit's validation and install run.
#[derive(Clone, Copy)]
pub(crate) enum Region<'a> {
    /// In software.
    Software,
    /// DBX's elided region: hardware attempts, then the same body in
    /// software (`Htm::elide`); the attempt aborts only for the body's own
    /// reasons.
    Elide(&'a Htm),
    /// One hardware attempt (the hybrid engines' hardware paths): any abort
    /// aborts the transaction attempt.
    Attempt(&'a Htm),
}

impl Region<'_> {
    /// Runs `body` here; its abort reason travels as the region's explicit
    /// abort code, since a hardware abort discards every store of the body.
    pub(crate) fn run<T>(
        self,
        footprint_lines: u32,
        mut body: impl FnMut() -> Result<T, AbortReason>,
    ) -> Result<T, AbortReason> {
        fn encode(reason: AbortReason) -> RegionAbort {
            RegionAbort::Explicit(reason.index() as u8)
        }
        fn decode(abort: ExplicitAbort) -> AbortReason {
            AbortReason::from_index(usize::from(abort.code)).unwrap_or(AbortReason::Region)
        }
        match self {
            Region::Software => body(),
            Region::Elide(htm) => htm.elide(footprint_lines, |_| body().map_err(encode)).map_err(decode),
            Region::Attempt(htm) => {
                htm.attempt_hardware(footprint_lines, |_| body().map_err(encode)).map_err(|abort| match abort {
                    AttemptAbort::Transient => AbortReason::Region,
                    AttemptAbort::Capacity => AbortReason::HtmCapacity,
                    AttemptAbort::Explicit(explicit) => decode(explicit),
                })
            }
        }
    }
}

/// The smallest TID a commit may take, or the one it must take.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TidFloor {
    /// Above this (the worker's last TID).
    Above(u64),
    /// Exactly this, fixed before the commit (`zen+`'s direct NVM writes
    /// carry it already).
    Fixed(u64),
}

/// What a storage and its durability scheme do at each step of
/// [`commit`] (see the module comment for the order). `Shared` is the
/// engine's shared state, borrowed for the whole commit; `Held` is what a
/// writing commit holds from `prepare` to `finish`.
pub(crate) trait CommitSteps: Sized {
    /// The row type of the storage's tables.
    type Row: RowKind;
    /// The engine's shared state.
    type Shared;
    /// What a writing commit holds from `prepare` to `finish` (Zen: its
    /// worker's heap region, locked).
    type Held<'s>
    where
        Self::Shared: 's;
    /// The engine's commit rule.
    type Rule: CommitRule;
    /// Where the durability scheme's step sits.
    const STAGE: CommitStage;

    /// The transaction state.
    fn tx(&mut self) -> &mut TxState<Self::Row>;
    /// The worker's number.
    fn worker_id(&self) -> usize;
    /// The tables.
    fn tables(shared: &Self::Shared) -> &[Table<Self::Row>];
    /// The protocol's shared state.
    fn concurrency(shared: &Self::Shared) -> &Concurrency;
    /// The global epoch (read at the serialization point).
    fn global_epoch(shared: &Self::Shared) -> u64;

    /// Step 0: where validation and install run, or why the attempt
    /// aborts before committing.
    fn enter<'s>(&mut self, shared: &'s Self::Shared) -> TxResult<Region<'s>> {
        let _ = shared;
        Ok(Region::Software)
    }
    /// The region's run ended with `result` (a hybrid path remembers a
    /// capacity abort).
    fn region_result<T>(&mut self, result: &Result<T, AbortReason>) {
        let _ = result;
    }
    /// Collects the transactions the attempt depends on (a commit rule
    /// that tracks them: [`CommitRule::collect_dependencies`], asking the
    /// durability scheme which are durable).
    fn collect_dependencies(&mut self, shared: &Self::Shared) {
        let _ = shared;
    }
    /// The ticket of a validated read-only attempt.
    fn read_only_ticket(&mut self, shared: &Self::Shared) -> CommitTicket;
    /// After validation (a writing attempt: step 3, its write set locked,
    /// its TID stamped, `held` what it holds; a read-only one: before its
    /// ticket, `held` `None`): arranges that every version the attempt read
    /// or overwrites is durable before the attempt is (Zen: another
    /// worker's pipelined commit whose last fence is still to come), or
    /// says why the attempt aborts (nothing installed).
    #[inline]
    fn check_inputs_durable<'s>(
        &mut self,
        shared: &'s Self::Shared,
        held: Option<&mut Self::Held<'s>>,
    ) -> Result<(), AbortReason> {
        let _ = (shared, held);
        Ok(())
    }

    /// Step 1: reserves what the commit needs, nothing locked. An error
    /// ends the transaction with nothing reserved.
    fn prepare<'s>(&mut self, shared: &'s Self::Shared) -> TxResult<Self::Held<'s>>;
    /// Returns what `prepare` reserved (the commit aborts after it).
    fn unprepare(&mut self, shared: &Self::Shared, held: &mut Self::Held<'_>) {
        let _ = (shared, held);
    }
    /// Step 3's TID rule.
    fn tid_floor(&self, held: &Self::Held<'_>) -> TidFloor;

    /// Step 4, write set locked and validated: the durability before the
    /// install (a ticket when this step gives the commit's). An error
    /// aborts the commit with nothing installed.
    fn persist_before_install(
        &mut self,
        shared: &Self::Shared,
        held: &mut Self::Held<'_>,
        tid: u64,
    ) -> DbResult<Option<CommitTicket>> {
        let _ = (shared, held, tid);
        Ok(None)
    }
    /// Step 5, before the first install (inside the region).
    fn begin_install(&mut self, shared: &Self::Shared) {
        let _ = shared;
    }
    /// Step 5: installs write `index` (its row locked) at `tid`.
    fn install(&mut self, shared: &Self::Shared, held: &mut Self::Held<'_>, index: usize, tid: u64);
    /// Step 5, after the last install, rows still locked.
    fn installed(&mut self, shared: &Self::Shared, held: &mut Self::Held<'_>, tid: u64) {
        let _ = (shared, held, tid);
    }
    /// Step 6 (`LogAfterInstallLocked`): the log with the versions
    /// installed and still locked. An error here comes after the install:
    /// the scheme poisoned itself first (`CommitLog::prepare`).
    fn log_while_locked(
        &mut self,
        shared: &Self::Shared,
        held: &mut Self::Held<'_>,
        tid: u64,
    ) -> DbResult<Option<CommitTicket>> {
        let _ = (shared, held, tid);
        Ok(None)
    }
    /// Step 7: the bits a row's new word carries besides its TID and the
    /// absent bit (DBXN's parity: not yet durable).
    fn unlock_flags(&self, shared: &Self::Shared) -> u64 {
        let _ = shared;
        0
    }
    /// Step 8 for the stages whose log follows the install: the log (with
    /// the dependencies collected); the commit's ticket.
    fn after_unlock(&mut self, shared: &Self::Shared, held: &mut Self::Held<'_>, tid: u64) -> CommitTicket {
        let _ = (shared, held, tid);
        unreachable!("only the stages whose log follows the install log after unlocking")
    }
    /// Step 8: the commit at `tid` is done (`ticket`: the one its
    /// durability gave, if any); maintenance; the ticket acknowledged.
    fn finish(
        &mut self,
        shared: &Self::Shared,
        held: Self::Held<'_>,
        tid: u64,
        ticket: Option<CommitTicket>,
    ) -> TxResult<CommitTicket>;
}

/// Commits the attempt `worker` runs (see the module comment).
pub(crate) fn commit<W: CommitSteps>(shared: &W::Shared, worker: &mut W) -> TxResult<CommitTicket> {
    let region = worker.enter(shared)?;
    // `occ`: validation and write phase in one critical section.
    let _serial = W::concurrency(shared).serial_section();
    let footprint = worker.tx().footprint_lines();
    if worker.tx().is_read_only() {
        let validated = {
            let tx = &*worker.tx();
            region.run(footprint, || if W::Rule::VALIDATES { tx.validate(W::tables(shared)) } else { Ok(()) })
        };
        worker.region_result(&validated);
        validated.map_err(TxError::Abort)?;
        if W::Rule::TRACKS_DEPENDENCIES {
            worker.collect_dependencies(shared);
        }
        worker.check_inputs_durable(shared, None).map_err(TxError::Abort)?;
        return Ok(worker.read_only_ticket(shared));
    }
    let mut held = worker.prepare(shared)?;
    match W::STAGE {
        CommitStage::LogAfterInstallParity | CommitStage::LogAfterUnlock => {
            let flags = worker.unlock_flags(shared);
            let installed = region.run(footprint, || {
                let tid = lock_and_stamp(shared, worker, &held).inspect_err(|_| worker.unprepare(shared, &mut held))?;
                worker.begin_install(shared);
                install_and_unlock(shared, worker, &mut held, tid, flags);
                Ok(tid)
            });
            worker.region_result(&installed);
            let tid = installed.map_err(TxError::Abort)?;
            let ticket = worker.after_unlock(shared, &mut held, tid);
            worker.finish(shared, held, tid, Some(ticket))
        }
        CommitStage::LogBeforeInstall | CommitStage::LogAfterInstallLocked => {
            let tid = match lock_and_stamp(shared, worker, &held) {
                Ok(tid) => tid,
                Err(reason) => {
                    worker.unprepare(shared, &mut held);
                    return Err(TxError::Abort(reason));
                }
            };
            if let Err(reason) = worker.check_inputs_durable(shared, Some(&mut held)) {
                let tx = worker.tx();
                tx.remove_added_secondaries(W::tables(shared));
                tx.release(tx.writes.len());
                worker.unprepare(shared, &mut held);
                return Err(TxError::Abort(reason));
            }
            debug_assert!(!W::Rule::TRACKS_DEPENDENCIES, "dependency tracking logs after unlocking");
            let mut ticket = match worker.persist_before_install(shared, &mut held, tid) {
                Ok(ticket) => ticket,
                Err(error) => {
                    let locked = worker.tx().writes.len();
                    worker.tx().release(locked);
                    worker.unprepare(shared, &mut held);
                    return Err(TxError::Db(error));
                }
            };
            install_writes(shared, worker, &mut held, tid);
            let mut failure = None;
            if W::STAGE == CommitStage::LogAfterInstallLocked {
                match worker.log_while_locked(shared, &mut held, tid) {
                    Ok(done) => ticket = done,
                    Err(error) => failure = Some(error),
                }
            }
            unlock(worker.tx(), tid, 0);
            let result = worker.finish(shared, held, tid, ticket);
            match failure {
                Some(error) => Err(TxError::Db(error)),
                None => result,
            }
        }
    }
}

/// Steps 2-3: locks the write set, reads the epoch, validates and stamps
/// the TID under the commit rule (collecting SP^3's dependencies). On an
/// abort nothing is left locked.
#[inline]
fn lock_and_stamp<W: CommitSteps>(shared: &W::Shared, worker: &mut W, held: &W::Held<'_>) -> Result<u64, AbortReason> {
    let floor = worker.tid_floor(held);
    let id = worker.worker_id();
    let tx = worker.tx();
    let max_locked = tx.lock_writes()?;
    let epoch = W::global_epoch(shared);
    let tables = W::tables(shared);
    let stamped = match floor {
        TidFloor::Fixed(tid) => tx.validate_at_fixed_tid(tables, max_locked, tid),
        TidFloor::Above(floor) if W::Rule::VALIDATES => tx.validate_and_stamp(tables, max_locked, floor, epoch),
        // `nvm-ideal`: no read validation at all.
        TidFloor::Above(floor) => Ok(tx.commit_tid(max_locked, floor, epoch)),
    };
    let tid = match stamped {
        Ok(tid) => W::Rule::stamp_tid(tid, id),
        Err(reason) => {
            tx.release(tx.writes.len());
            return Err(reason);
        }
    };
    // A TID fixed earlier (`zen+`'s direct writes) may lie in an older
    // epoch; the durability scheme that orders by epochs (`wbl`) never
    // fixes one.
    debug_assert!(matches!(floor, TidFloor::Fixed(_)) || record::epoch_of_tid(tid) >= epoch);
    if W::Rule::TRACKS_DEPENDENCIES {
        worker.collect_dependencies(shared);
    }
    Ok(tid)
}

/// Step 5: installs every write (rows locked), then `installed`.
#[inline]
fn install_writes<W: CommitSteps>(shared: &W::Shared, worker: &mut W, held: &mut W::Held<'_>, tid: u64) {
    for index in 0..worker.tx().writes.len() {
        worker.install(shared, held, index, tid);
    }
    worker.installed(shared, held, tid);
}

/// Steps 5 and 7 of the stages whose log follows the install.
#[inline]
fn install_and_unlock<W: CommitSteps>(
    shared: &W::Shared,
    worker: &mut W,
    held: &mut W::Held<'_>,
    tid: u64,
    flags: u64,
) {
    install_writes(shared, worker, held, tid);
    unlock(worker.tx(), tid, flags);
}

/// Step 7: stores each written row's new word, which unlocks it.
#[inline]
fn unlock<R: RowKind>(tx: &mut TxState<R>, tid: u64, flags: u64) {
    for entry in tx.writes.entries() {
        let absent = if entry.is_delete() { ABSENT } else { 0 };
        entry.row().store_word(record::word_of(tid, absent | flags));
    }
}

/// The bookkeeping of installing write `index` of `tx` at `tid` that is
/// the same for every storage: secondary indexes (maintained while the
/// row is locked, so a secondary scan that misses an entry sees the leaf
/// version change or meets the locked row) and the protocol's older
/// version. `current` is the row's committed value (read when
/// [`needs_current`] says so; `None` for an absent row).
#[inline]
pub(crate) fn install_bookkeeping<R: RowKind>(
    tx: &mut TxState<R>,
    tables: &[Table<R>],
    index: usize,
    row: &R,
    current: Option<&[u8]>,
    tid: u64,
) {
    let entry = &tx.writes.entries()[index];
    let (table, locked_word) = (entry.table, entry.locked_word);
    if !tables[table.0 as usize].schema().secondaries.is_empty() {
        tx.maintain_secondaries(tables, index, current, tid);
    }
    if tx.keeps_versions() {
        tx.preserve_version(row, locked_word, current, tid);
    }
}

/// Whether installing write `index` needs the row's committed value
/// (secondary indexes or a multi-version protocol) and the row has one.
///
/// Not for secondary indexes alone when the write is an update whose body
/// found its secondary keys unchanged (`index_secondaries` unset) and the
/// commit `validated` its reads: the committed value is then the one the
/// body compared against (the row's first access entered the read set),
/// so no entry changes.
#[inline]
pub(crate) fn needs_current<R: RowKind>(tx: &TxState<R>, tables: &[Table<R>], index: usize, validated: bool) -> bool {
    let entry = &tx.writes.entries()[index];
    if entry.locked_word & ABSENT != 0 {
        return false;
    }
    if tx.keeps_versions() {
        return true;
    }
    let keys_kept = validated && !entry.is_delete() && !entry.index_secondaries;
    !keys_kept && !tables[entry.table.0 as usize].schema().secondaries.is_empty()
}
