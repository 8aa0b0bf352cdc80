//! Transactions step by step (`pmtx_txn_begin` ... `pmtx_txn_commit`), the
//! transaction a `pmtx_run` body gets, and commits waiting for durability.

use crate::db::{pmtx_db, pmtx_txn_fn, DbShared};
use crate::iter::{self, pmtx_iter};
use crate::status::{guard, pmtx_status, Failure};
use parking_lot::Mutex;
use pmtx_engine::{OpenTransaction, Pending, StepState, TableId, Transaction, TxError, TxResult};
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Begin a transaction that only reads (`pmtx_txn_begin` flags).
pub const PMTX_READ_ONLY: u32 = 1;

/// A transaction handle (opaque).
#[allow(non_camel_case_types)]
pub struct pmtx_txn {
    pub(crate) cell: Arc<TxnCell>,
}

/// What a transaction's handle and its iterators share.
pub(crate) struct TxnCell {
    /// The thread that began it: the only one that may use it (threads
    /// alive at once have distinct ids).
    owner: libc::pthread_t,
    /// The transaction of a `pmtx_run` body, which `pmtx_run` ends.
    in_body: bool,
    read_only: bool,
    pub(crate) db: Arc<DbShared>,
    pub(crate) state: Mutex<TxnState>,
}

/// The transaction, while its handle lives.
pub(crate) struct TxnState {
    /// `None` once the handle is freed.
    open: Option<OpenTransaction>,
    /// Counts it in `DbShared::running` while it holds a worker slot.
    running: Option<RunningToken>,
    /// The error that ended it, for `pmtx_run`'s status.
    ended_by: Option<Failure>,
}

/// One count of `DbShared::running` and of this thread's running
/// transactions of the database, given back when dropped (always on the
/// owner thread: only it can end or free the transaction).
struct RunningToken(Arc<DbShared>);

thread_local! {
    /// Per database (by the address of its shared state): how many running
    /// transactions this thread holds.
    static RUNNING_HERE: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Adds `delta` to this thread's count of running transactions of `db`.
fn count_here(db: &DbShared, delta: isize) {
    let key = db as *const DbShared as usize;
    RUNNING_HERE.with(|counts| {
        let mut counts = counts.borrow_mut();
        let position = counts.iter().position(|(of, _)| *of == key).unwrap_or_else(|| {
            counts.push((key, 0));
            counts.len() - 1
        });
        let count = &mut counts[position].1;
        *count = count.saturating_add_signed(delta);
        if *count == 0 {
            counts.swap_remove(position);
        }
    });
}

/// This thread's running transactions of `db`.
fn running_here(db: &DbShared) -> usize {
    let key = db as *const DbShared as usize;
    RUNNING_HERE.with(|counts| counts.borrow().iter().find(|(of, _)| *of == key).map_or(0, |(_, count)| *count))
}

/// Refuses a wait for durability that could never end: on an engine that
/// acknowledges by epoch, while this thread holds running transactions of
/// the database besides its `own` ones (the epoch closes only when they
/// end, and only this thread can end them).
pub(crate) fn check_can_wait(db: &DbShared, own: usize) -> Result<(), Failure> {
    if !db.acknowledges_by_epoch {
        return Ok(());
    }
    let others = running_here(db).saturating_sub(own);
    if others > 0 {
        return Err(Failure::new(
            pmtx_status::PMTX_ERR_MISUSE,
            format!(
                "this thread holds {others} other running transaction(s) of this database, and {} acknowledges a \
                 commit only once every transaction of its epoch has ended: waiting here would never end. End \
                 them first, or commit with pmtx_txn_commit_nowait and wait later",
                db.engine
            ),
        ));
    }
    Ok(())
}

impl RunningToken {
    fn new(db: &Arc<DbShared>) -> Self {
        db.running.fetch_add(1, Ordering::AcqRel);
        // Only `check_can_wait` reads the per-thread counts, and only for
        // these engines.
        if db.acknowledges_by_epoch {
            count_here(db, 1);
        }
        Self(Arc::clone(db))
    }
}

impl Drop for RunningToken {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        if self.0.acknowledges_by_epoch {
            count_here(&self.0, -1);
        }
    }
}

/// This thread's identity: `pthread_self`, a register read, where
/// `std::thread::current()` clones a reference-counted handle.
fn this_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() }
}

impl TxnState {
    /// Runs `step` in the running attempt; an error that ends the
    /// transaction is kept for `pmtx_run`.
    pub(crate) fn step<R>(&mut self, step: impl FnOnce(&mut Transaction<'_>) -> TxResult<R>) -> Result<R, Failure> {
        let open = self.open.as_mut().ok_or_else(freed)?;
        let result = open.ops(step);
        self.settle();
        result.map_err(|error| self.failure(error))
    }

    /// The failure of `error`, recorded if it ended the transaction.
    fn failure(&mut self, error: TxError) -> Failure {
        let failure = Failure::from(error);
        let ended = self.open.as_ref().is_some_and(|open| matches!(open.state(), StepState::Ended(_)));
        if ended && self.ended_by.is_none() {
            self.ended_by = Some(Failure::new(failure.status, failure.message.clone()));
        }
        failure
    }

    /// Gives the running count back once the transaction ended.
    fn settle(&mut self) {
        let ended = self.open.as_ref().is_none_or(|open| matches!(open.state(), StepState::Ended(_)));
        if ended {
            self.running = None;
        }
    }

    /// Ends the transaction (rolling back a running attempt) for good.
    fn end(&mut self) {
        self.open = None;
        self.running = None;
    }
}

/// The failure of a step on a freed transaction (reached by an iterator).
pub(crate) fn freed() -> Failure {
    Failure::new(pmtx_status::PMTX_ERR_ENDED, "the iterator's transaction was freed")
}

impl TxnCell {
    /// Checks that the database is open and the caller is the owner thread.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        if self.db.closed.load(Ordering::Acquire) {
            return Err(Failure::new(pmtx_status::PMTX_ERR_CLOSED, "the database was closed"));
        }
        self.check_thread()
    }

    /// Checks that the caller is the owner thread (also after close).
    pub(crate) fn check_thread(&self) -> Result<(), Failure> {
        if this_thread() != self.owner {
            return Err(Failure::new(
                pmtx_status::PMTX_ERR_WRONG_THREAD,
                "a transaction (and its iterators) can be used, and freed, only by the thread that began it",
            ));
        }
        Ok(())
    }

    /// The id `table` if the database has it; whether it is ordered.
    pub(crate) fn table(&self, table: u32) -> Result<(TableId, bool), Failure> {
        match self.db.tables.get(table as usize) {
            Some((_, ordered)) => Ok((TableId(table), *ordered)),
            None => Err(Failure::new(
                pmtx_status::PMTX_ERR_UNKNOWN_TABLE,
                format!("no table with id {table} (the database has {} tables)", self.db.tables.len()),
            )),
        }
    }

    fn writable(&self) -> Result<(), Failure> {
        if self.read_only {
            return Err(Failure::new(pmtx_status::PMTX_ERR_MISUSE, "a write in a read-only transaction"));
        }
        Ok(())
    }

    fn not_in_body(&self, call: &str) -> Result<(), Failure> {
        if self.in_body {
            return Err(Failure::new(
                pmtx_status::PMTX_ERR_MISUSE,
                format!("{call} on the transaction of a pmtx_run body: return from the body instead"),
            ));
        }
        Ok(())
    }
}

/// Begins a transaction of `shared`'s database on this thread.
fn begin(shared: &Arc<DbShared>, read_only: bool, in_body: bool) -> Result<Arc<TxnCell>, Failure> {
    // Read-locked only while the transaction begins: `pmtx_close` waits
    // for that, then refuses while the transaction runs.
    let database = shared.database.read();
    let database =
        database.as_ref().ok_or_else(|| Failure::new(pmtx_status::PMTX_ERR_CLOSED, "the database was closed"))?;
    let running = RunningToken::new(shared);
    let open = database.begin(read_only)?;
    Ok(Arc::new(TxnCell {
        owner: this_thread(),
        in_body,
        read_only,
        db: Arc::clone(shared),
        state: Mutex::new(TxnState { open: Some(open), running: Some(running), ended_by: None }),
    }))
}

/// The cell of a transaction handle, checked for use by this thread.
///
/// # Safety
/// `txn` is NULL or a live handle.
unsafe fn cell<'a>(txn: *mut pmtx_txn) -> Result<&'a TxnCell, Failure> {
    // SAFETY: null or live by the caller's contract.
    let handle = unsafe { txn.as_ref() }.ok_or_else(|| Failure::argument("txn is NULL"))?;
    handle.cell.check()?;
    Ok(&handle.cell)
}

/// `pmtx_run` and `pmtx_run_read_only`.
pub(crate) fn run(
    shared: &Arc<DbShared>,
    read_only: bool,
    body: pmtx_txn_fn,
    ctx: *mut c_void,
) -> Result<pmtx_status, Failure> {
    let body = body.ok_or_else(|| Failure::argument("body is NULL"))?;
    check_can_wait(shared, 0)?;
    let cell = begin(shared, read_only, true)?;
    /// Frees the body's handle however `run` returns.
    struct BodyHandle(*mut pmtx_txn);
    impl Drop for BodyHandle {
        fn drop(&mut self) {
            // SAFETY: from `Box::into_raw` below, freed only here.
            let handle = unsafe { Box::from_raw(self.0) };
            handle.cell.state.lock().end();
        }
    }
    let handle = BodyHandle(Box::into_raw(Box::new(pmtx_txn { cell: Arc::clone(&cell) })));
    loop {
        // SAFETY: the caller's function (contract of pmtx_run) called with
        // a live handle and the caller's context.
        let returned = unsafe { body(handle.0, ctx) };
        let mut state = cell.state.lock();
        let open = state.open.as_mut().expect("pmtx_run's transaction lives until pmtx_run returns");
        match open.state() {
            StepState::Conflicted(_) => {
                let retried = open.retry();
                state.settle();
                retried?;
            }
            StepState::Ended(how) => {
                return Err(state.ended_by.take().unwrap_or_else(|| {
                    Failure::new(pmtx_status::PMTX_ERR_ENDED, format!("the transaction has ended ({how})"))
                }))
            }
            StepState::Active if returned != 0 => {
                open.rollback();
                state.settle();
                return Ok(pmtx_status::PMTX_ROLLBACK);
            }
            StepState::Active => {
                // The body may have begun a transaction and left it running.
                if let Err(failure) = check_can_wait(&cell.db, 1) {
                    open.rollback();
                    state.settle();
                    return Err(failure);
                }
                match open.commit() {
                    Ok(_) => {
                        state.settle();
                        return Ok(pmtx_status::PMTX_OK);
                    }
                    Err(TxError::Abort(_)) => {
                        let retried = open.retry();
                        state.settle();
                        retried?;
                    }
                    Err(error) => {
                        state.settle();
                        return Err(error.into());
                    }
                }
            }
        }
    }
}

/// Begins a transaction on this thread: `flags` 0 or `PMTX_READ_ONLY`.
/// It holds one of the database's worker slots until it ends (waiting for
/// one when all are taken; `PMTX_ERR_BUSY` after the engine's wait). On
/// success `*txn` is the handle: run its reads and writes, then
/// `pmtx_txn_commit` or `pmtx_txn_abort`, then `pmtx_txn_free`.
///
/// # Safety
/// `db` is a live handle; `txn` points to a writable `pmtx_txn *`.
///
/// Thread safety: any thread; the transaction then belongs to this thread.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_begin(db: *mut pmtx_db, flags: u32, txn: *mut *mut pmtx_txn) -> pmtx_status {
    guard(|| {
        if txn.is_null() {
            return Err(Failure::argument("txn (the handle's destination) is NULL"));
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { txn.write(std::ptr::null_mut()) };
        // SAFETY: null or a live handle by the caller's contract.
        let handle = unsafe { db.as_ref() }.ok_or_else(crate::db::db_is_null)?;
        if flags & !PMTX_READ_ONLY != 0 {
            return Err(Failure::argument(format!("unknown flags {:#x} of pmtx_txn_begin", flags & !PMTX_READ_ONLY)));
        }
        let cell = begin(&handle.shared, flags & PMTX_READ_ONLY != 0, false)?;
        // SAFETY: as above.
        unsafe { txn.write(Box::into_raw(Box::new(pmtx_txn { cell }))) };
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Reads the value of `key` in table `table`: copies it into `buf` (of
/// `buf_cap` bytes, owned by the caller) and sets `*value_len` (if not
/// NULL) to its length. `PMTX_NOT_FOUND` if the key is absent;
/// `PMTX_ERR_BUFFER_TOO_SMALL` (with `*value_len` set, nothing copied, the
/// transaction going on) if the value is longer than `buf_cap`. A table's
/// values are at most its `max_value_len` bytes.
///
/// # Safety
/// `txn` is a live handle; `key` has `key_len` readable bytes; `buf` has
/// `buf_cap` writable bytes (NULL if `buf_cap` is 0); `value_len` is NULL
/// or writable.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_get(
    txn: *mut pmtx_txn,
    table: u32,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    buf_cap: usize,
    value_len: *mut usize,
) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        let cell = unsafe { cell(txn) }?;
        let (table, _) = cell.table(table)?;
        // SAFETY: `key_len` readable bytes by the caller's contract.
        let key = unsafe { crate::bytes(key, key_len, "key") }?;
        let out: &mut [u8] = match (buf.is_null(), buf_cap) {
            (_, 0) => &mut [],
            (true, _) => return Err(Failure::argument(format!("buf is NULL with a capacity of {buf_cap}"))),
            // SAFETY: `buf_cap` writable bytes by the caller's contract.
            (false, _) => unsafe { std::slice::from_raw_parts_mut(buf, buf_cap) },
        };
        let found = cell.state.lock().step(|tx| {
            tx.get_with(table, key, |value| {
                if let Some(out) = out.get_mut(..value.len()) {
                    out.copy_from_slice(value);
                }
                value.len()
            })
        })?;
        let Some(len) = found else {
            return Ok(pmtx_status::PMTX_NOT_FOUND);
        };
        if !value_len.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { value_len.write(len) };
        }
        if len > buf_cap {
            return Err(Failure::new(
                pmtx_status::PMTX_ERR_BUFFER_TOO_SMALL,
                format!("the value has {len} bytes; the buffer holds {buf_cap}"),
            ));
        }
        Ok(pmtx_status::PMTX_OK)
    })
}

/// The write calls: `op` with the transaction's table id, key and value.
///
/// # Safety
/// As the write calls' contract.
unsafe fn write(
    txn: *mut pmtx_txn,
    table: u32,
    key: (*const u8, usize),
    value: (*const u8, usize),
    op: impl FnOnce(&mut Transaction<'_>, TableId, &[u8], &[u8]) -> TxResult<bool>,
    absent: pmtx_status,
) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        let cell = unsafe { cell(txn) }?;
        let (table, _) = cell.table(table)?;
        cell.writable()?;
        // SAFETY: readable bytes of the given lengths by the caller's contract.
        let (key, value) = unsafe { (crate::bytes(key.0, key.1, "key")?, crate::bytes(value.0, value.1, "value")?) };
        let done = cell.state.lock().step(|tx| op(tx, table, key, value))?;
        Ok(if done { pmtx_status::PMTX_OK } else { absent })
    })
}

/// Writes `value` under `key` in table `table`, inserting or overwriting.
/// Buffered until the commit; pmtx copies key and value.
///
/// # Safety
/// `txn` is a live handle; `key` and `value` have `key_len` and
/// `value_len` readable bytes.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_put(
    txn: *mut pmtx_txn,
    table: u32,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> pmtx_status {
    // SAFETY: the caller's contract is this function's.
    unsafe {
        write(
            txn,
            table,
            (key, key_len),
            (value, value_len),
            |tx, table, key, value| tx.put(table, key, value).map(|()| true),
            pmtx_status::PMTX_OK,
        )
    }
}

/// Inserts `value` under `key` if the key is absent; `PMTX_EXISTS` (nothing
/// written) if it is present.
///
/// # Safety
/// As `pmtx_txn_put`.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_insert(
    txn: *mut pmtx_txn,
    table: u32,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> pmtx_status {
    // SAFETY: the caller's contract is this function's.
    unsafe {
        write(
            txn,
            table,
            (key, key_len),
            (value, value_len),
            |tx, table, key, value| tx.insert(table, key, value),
            pmtx_status::PMTX_EXISTS,
        )
    }
}

/// Overwrites the value of `key` if the key is present; `PMTX_NOT_FOUND`
/// (nothing written) if it is absent.
///
/// # Safety
/// As `pmtx_txn_put`.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_update(
    txn: *mut pmtx_txn,
    table: u32,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> pmtx_status {
    // SAFETY: the caller's contract is this function's.
    unsafe {
        write(
            txn,
            table,
            (key, key_len),
            (value, value_len),
            |tx, table, key, value| tx.update(table, key, value),
            pmtx_status::PMTX_NOT_FOUND,
        )
    }
}

/// Deletes `key`; `PMTX_NOT_FOUND` if it is absent.
///
/// # Safety
/// `txn` is a live handle; `key` has `key_len` readable bytes.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_delete(
    txn: *mut pmtx_txn,
    table: u32,
    key: *const u8,
    key_len: usize,
) -> pmtx_status {
    // SAFETY: the caller's contract is this function's (no value).
    unsafe {
        write(
            txn,
            table,
            (key, key_len),
            (std::ptr::null(), 0),
            |tx, table, key, _| tx.delete(table, key),
            pmtx_status::PMTX_NOT_FOUND,
        )
    }
}

/// Starts a scan of ordered table `table` from `from` (included; NULL: the
/// first key) to `to` (excluded; NULL: past the last key), in key order or,
/// with `flags` `PMTX_SCAN_REVERSE`, backwards. `*iter` is the iterator
/// (`pmtx_iter_next`, then `pmtx_iter_free`); it reads rows in batches as
/// it goes, in the transaction, which must still be running then. pmtx
/// copies both bounds. `PMTX_ERR_MISUSE` on a hash table.
///
/// # Safety
/// `txn` is a live handle; `from` and `to` are NULL or have `from_len` and
/// `to_len` readable bytes; `iter` points to a writable `pmtx_iter *`.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn pmtx_txn_scan(
    txn: *mut pmtx_txn,
    table: u32,
    from: *const u8,
    from_len: usize,
    to: *const u8,
    to_len: usize,
    flags: u32,
    iter: *mut *mut pmtx_iter,
) -> pmtx_status {
    guard(|| {
        if iter.is_null() {
            return Err(Failure::argument("iter (the handle's destination) is NULL"));
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { iter.write(std::ptr::null_mut()) };
        // SAFETY: null or live by the caller's contract.
        let handle = unsafe { txn.as_ref() }.ok_or_else(|| Failure::argument("txn is NULL"))?;
        handle.cell.check()?;
        let (table, ordered) = handle.cell.table(table)?;
        if !ordered {
            return Err(Failure::new(
                pmtx_status::PMTX_ERR_MISUSE,
                format!("table {} is a hash table: only ordered tables can be scanned", table.0),
            ));
        }
        // SAFETY: readable bytes of the given lengths by the caller's contract.
        let (from, to) = unsafe {
            (
                (!from.is_null()).then(|| crate::bytes(from, from_len, "from")).transpose()?,
                (!to.is_null()).then(|| crate::bytes(to, to_len, "to")).transpose()?,
            )
        };
        let scan = iter::pmtx_iter::new(Arc::clone(&handle.cell), table, from, to, flags)?;
        // SAFETY: as above.
        unsafe { iter.write(Box::into_raw(Box::new(scan))) };
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Commits the transaction and returns once the commit is durable.
/// `PMTX_CONFLICT` if validation failed: the attempt is aborted; call
/// `pmtx_txn_retry` and run the transaction's steps again (or
/// `pmtx_txn_abort` to give up). Any other error ends it.
///
/// # Safety
/// `txn` is a live handle.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_commit(txn: *mut pmtx_txn) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        if let Some(handle) = unsafe { txn.as_ref() } {
            check_can_wait(&handle.cell.db, 1)?;
        }
        // SAFETY: as above.
        unsafe { explicit(txn, "pmtx_txn_commit", OpenTransaction::commit) }?;
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Runs `call` (commit, rollback, retry) on an explicit transaction,
/// recording an error that ends it; returns its value and the cell.
///
/// # Safety
/// `txn` is NULL or a live handle.
unsafe fn explicit<'a, T>(
    txn: *mut pmtx_txn,
    name: &str,
    call: impl FnOnce(&mut OpenTransaction) -> TxResult<T>,
) -> Result<(T, &'a TxnCell), Failure> {
    // SAFETY: null or live by the caller's contract.
    let cell = unsafe { cell(txn) }?;
    cell.not_in_body(name)?;
    let mut state = cell.state.lock();
    let open = state.open.as_mut().ok_or_else(freed)?;
    let result = call(open);
    state.settle();
    let value = result.map_err(|error| state.failure(error))?;
    Ok((value, cell))
}

/// A commit that may not be durable yet (opaque): `pmtx_pending_wait` waits
/// for it and frees it; a crash before then loses the commit.
#[allow(non_camel_case_types)]
pub struct pmtx_pending {
    db: Arc<DbShared>,
    pending: Pending,
}

/// Commits like `pmtx_txn_commit` but returns without waiting for
/// durability: `*pending` says when the commit is durable
/// (`pmtx_pending_is_durable`, `pmtx_pending_wait`). Pipelining commits
/// this way lets a thread go on while a group-commit epoch fills.
///
/// # Safety
/// `txn` is a live handle; `pending` points to a writable `pmtx_pending *`.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_commit_nowait(txn: *mut pmtx_txn, pending: *mut *mut pmtx_pending) -> pmtx_status {
    guard(|| {
        if pending.is_null() {
            return Err(Failure::argument("pending (the handle's destination) is NULL"));
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { pending.write(std::ptr::null_mut()) };
        // SAFETY: null or live by the caller's contract.
        let (committed, cell) = unsafe { explicit(txn, "pmtx_txn_commit_nowait", OpenTransaction::commit_pipelined) }?;
        let handle = Box::new(pmtx_pending { db: Arc::clone(&cell.db), pending: committed });
        // SAFETY: as above.
        unsafe { pending.write(Box::into_raw(handle)) };
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Rolls the transaction back (nothing it wrote is kept) and frees its
/// worker slot; a no-op on an ended transaction.
///
/// # Safety
/// `txn` is a live handle.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_abort(txn: *mut pmtx_txn) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        unsafe {
            explicit(txn, "pmtx_txn_abort", |open| {
                open.rollback();
                Ok(())
            })
        }?;
        Ok(pmtx_status::PMTX_OK)
    })
}

/// After `PMTX_CONFLICT`, begins the transaction's next attempt (after a
/// random backoff that grows with the attempts): run its steps again from
/// the first. `PMTX_ERR_TOO_MANY_ABORTS` (the transaction ends) once the
/// engine's attempt limit is reached; `PMTX_ERR_ARGUMENT` if the attempt
/// met no conflict.
///
/// # Safety
/// `txn` is a live handle.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_retry(txn: *mut pmtx_txn) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        unsafe { explicit(txn, "pmtx_txn_retry", |open| open.retry().map_err(TxError::from)) }?;
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Frees the transaction handle, rolling back an attempt still running;
/// its iterators then return `PMTX_ERR_ENDED`. `pmtx_txn_free(NULL)` does
/// nothing. Works after `pmtx_close` too.
///
/// # Safety
/// `txn` is NULL or a live handle from `pmtx_txn_begin`, not used again.
///
/// Thread safety: the transaction's thread only (`PMTX_ERR_WRONG_THREAD`,
/// and the handle stays, on another).
#[no_mangle]
pub unsafe extern "C" fn pmtx_txn_free(txn: *mut pmtx_txn) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        let Some(handle) = (unsafe { txn.as_ref() }) else {
            return Ok(pmtx_status::PMTX_OK);
        };
        handle.cell.check_thread()?;
        handle.cell.not_in_body("pmtx_txn_free")?;
        // SAFETY: from `Box::into_raw` in pmtx_txn_begin; the caller does
        // not use it again.
        let handle = unsafe { Box::from_raw(txn) };
        handle.cell.state.lock().end();
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Whether the commit is durable now, in `*durable`.
///
/// # Safety
/// `pending` is a live handle; `durable` points to a writable `bool`.
///
/// Thread safety: any thread, one at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn pmtx_pending_is_durable(pending: *const pmtx_pending, durable: *mut bool) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        let handle = unsafe { pending.as_ref() }.ok_or_else(|| Failure::argument("pending is NULL"))?;
        if durable.is_null() {
            return Err(Failure::argument("durable is NULL"));
        }
        let database = handle.db.database.read();
        let database =
            database.as_ref().ok_or_else(|| Failure::new(pmtx_status::PMTX_ERR_CLOSED, "the database was closed"))?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { durable.write(database.is_durable(&handle.pending)) };
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Waits until the commit is durable, then frees `pending` (whatever the
/// status, except `PMTX_ERR_MISUSE`: a wait that could never end, on an
/// engine that acknowledges by epoch while this thread holds a running
/// transaction of the database; the handle then stays). `PMTX_ERR_CLOSED`
/// if the database was closed first: the commit is then durable only if the
/// close made it so.
///
/// # Safety
/// `pending` is a live handle, not used again once freed.
///
/// Thread safety: any thread, one at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn pmtx_pending_wait(pending: *mut pmtx_pending) -> pmtx_status {
    guard(|| {
        if pending.is_null() {
            return Err(Failure::argument("pending is NULL"));
        }
        // SAFETY: non-null and live by the caller's contract.
        check_can_wait(unsafe { &(*pending).db }, 0)?;
        // SAFETY: from `Box::into_raw` in pmtx_txn_commit_nowait; the caller
        // does not use it again.
        let pmtx_pending { db, pending } = *unsafe { Box::from_raw(pending) };
        let database = db.database.read();
        let database =
            database.as_ref().ok_or_else(|| Failure::new(pmtx_status::PMTX_ERR_CLOSED, "the database was closed"))?;
        database.wait_durable(pending)?;
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Frees `pending` without waiting. `pmtx_pending_free(NULL)` does nothing.
///
/// # Safety
/// `pending` is NULL or a live handle, not used again.
///
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn pmtx_pending_free(pending: *mut pmtx_pending) {
    if !pending.is_null() {
        // SAFETY: from `Box::into_raw` in pmtx_txn_commit_nowait; the
        // caller does not use it again. Dropping it cannot panic.
        drop(unsafe { Box::from_raw(pending) });
    }
}
