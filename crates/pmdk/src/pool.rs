//! A libpmemobj pool and its transactions, with a safe interface.
//!
//! Memory in the pool is read and written only through [`Pool::load`] and
//! [`Tx::set`]: bounds-checked, 8-byte aligned words accessed as `AtomicU64`
//! with relaxed ordering (a plain `mov` on x86-64). Concurrent access to a
//! word from two threads is therefore never undefined behaviour; keeping it
//! meaningful is the workloads' job: every structure is read and written
//! only under its DRAM locks, which also order the accesses.
//!
//! [`Pool::tx`] runs a closure as one libpmemobj transaction begun with a NULL
//! `jmp_buf` (see the `ffi` module: no `longjmp` can happen). A failing
//! libpmemobj call inside the transaction (snapshot, allocation, free) has
//! already aborted it and applied the undo log when it returns; the [`Tx`]
//! method returns the error, the closure propagates it with `?`, and
//! [`Pool::tx`] ends the transaction and returns the error. A closure that
//! returns an error of its own, or panics, aborts the transaction.

use crate::ffi::{self, PmemObjPool, PmemOid};
use crate::PmdkError;
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of the root object: see [`crate::workloads::root`].
pub(crate) const ROOT_SIZE: usize = 128;

/// The calling thread's last libpmemobj error message.
pub(crate) fn last_error_message() -> String {
    // SAFETY: pmemobj_errormsg takes no arguments and returns a pointer to a
    // thread-local, NUL-terminated buffer (never NULL in PMDK 1.x; checked
    // anyway) that stays valid until the thread's next libpmemobj call; it is
    // copied out before any other call.
    unsafe {
        let message = ffi::pmemobj_errormsg();
        if message.is_null() {
            return String::from("(no libpmemobj error message)");
        }
        let text = CStr::from_ptr(message).to_string_lossy().into_owned();
        if text.is_empty() {
            String::from("(no libpmemobj error message)")
        } else {
            text
        }
    }
}

fn c_path(path: &Path) -> Result<CString, PmdkError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| PmdkError::InvalidConfig(format!("pool path {} contains a NUL byte", path.display())))
}

/// An open libpmemobj pool: the handle, the base address of its mapping and
/// the offset of its root object. Closed on drop.
pub(crate) struct Pool {
    pop: NonNull<PmemObjPool>,
    /// Address of pool offset 0 (`pmemobj_direct(oid) == base + oid.off`).
    base: NonNull<u8>,
    /// Bytes mapped from `base` (the pool file's length).
    len: u64,
    uuid_lo: u64,
    root: u64,
}

// SAFETY: a PMEMobjpool handle may be used from any thread: libpmemobj's
// transactions, allocator and lanes are thread-safe (transaction state is
// thread-local, lanes are taken per transaction); pmemobj_close needs
// exclusive access, which `Drop` has. The base pointer is only used through
// `load`/`set`, which access words atomically.
unsafe impl Send for Pool {}
// SAFETY: see `Send`; every `&self` method is safe to call concurrently.
unsafe impl Sync for Pool {}

impl Pool {
    /// Creates a pool file at `path` (which must not exist) of `size` bytes.
    pub(crate) fn create(path: &Path, layout: &str, size: u64) -> Result<Self, PmdkError> {
        let c_path = c_path(path)?;
        let c_layout = CString::new(layout).expect("layout names contain no NUL");
        let bytes =
            usize::try_from(size).map_err(|_| PmdkError::InvalidConfig(format!("pool size {size} too large")))?;
        // SAFETY: both strings are valid NUL-terminated C strings that outlive
        // the call; pmemobj_create copies what it keeps. It returns NULL on
        // failure with the reason in pmemobj_errormsg.
        let pop = unsafe { ffi::pmemobj_create(c_path.as_ptr(), c_layout.as_ptr(), bytes, 0o600) };
        let Some(pop) = NonNull::new(pop) else {
            return Err(PmdkError::PoolCreate { path: path.to_path_buf(), size, message: last_error_message() });
        };
        Self::from_handle(pop, path)
    }

    /// Opens the existing pool at `path`, which must have been created with
    /// `layout`.
    pub(crate) fn open(path: &Path, layout: &str) -> Result<Self, PmdkError> {
        let c_path = c_path(path)?;
        let c_layout = CString::new(layout).expect("layout names contain no NUL");
        // SAFETY: as in `create`; pmemobj_open returns NULL on failure (for
        // example a different layout name) with the reason in
        // pmemobj_errormsg.
        let pop = unsafe { ffi::pmemobj_open(c_path.as_ptr(), c_layout.as_ptr()) };
        let Some(pop) = NonNull::new(pop) else {
            return Err(PmdkError::PoolOpen { path: path.to_path_buf(), message: last_error_message() });
        };
        Self::from_handle(pop, path)
    }

    fn from_handle(pop: NonNull<PmemObjPool>, path: &Path) -> Result<Self, PmdkError> {
        // Closes `pop` if anything below fails.
        struct CloseOnError(Option<NonNull<PmemObjPool>>);
        impl Drop for CloseOnError {
            fn drop(&mut self) {
                if let Some(pop) = self.0 {
                    // SAFETY: `pop` is an open handle no one else holds.
                    unsafe { ffi::pmemobj_close(pop.as_ptr()) }
                }
            }
        }
        let mut guard = CloseOnError(Some(pop));
        let len = std::fs::metadata(path).map_err(|source| PmdkError::Io { path: path.to_path_buf(), source })?.len();
        // SAFETY: `pop` is an open pool handle; pmemobj_root allocates the
        // zeroed root object on first use (outside any transaction: this
        // thread has none open) and returns OID_NULL on failure.
        let root = unsafe { ffi::pmemobj_root(pop.as_ptr(), ROOT_SIZE) };
        if root.is_null() {
            return Err(PmdkError::PoolOpen {
                path: path.to_path_buf(),
                message: format!("cannot allocate the root object: {}", last_error_message()),
            });
        }
        // SAFETY: `root` is a valid, non-null object id of the open pool.
        let root_ptr = unsafe { ffi::pmemobj_direct(root) } as *mut u8;
        // libpmemobj maps a pool contiguously, and pmemobj_direct is
        // `pool base + oid.off` (pmemobj_direct_inline in base.h), so the
        // base follows from any one object; wrapping_sub keeps it a plain
        // address computation.
        let base = NonNull::new(root_ptr.wrapping_sub(root.off as usize)).ok_or_else(|| PmdkError::PoolOpen {
            path: path.to_path_buf(),
            message: "pmemobj_direct returned NULL for the root object".into(),
        })?;
        if root.off.checked_add(ROOT_SIZE as u64).is_none_or(|end| end > len)
            || !(base.as_ptr() as usize).is_multiple_of(8)
        {
            return Err(PmdkError::PoolOpen {
                path: path.to_path_buf(),
                message: format!("unexpected pool mapping (root at offset {}, file length {len})", root.off),
            });
        }
        guard.0 = None;
        Ok(Self { pop, base, len, uuid_lo: root.pool_uuid_lo, root: root.off })
    }

    /// Offset of the root object ([`ROOT_SIZE`] bytes, zeroed at creation).
    pub(crate) fn root(&self) -> u64 {
        self.root
    }

    /// Whether `[off, off + len)` lies inside the mapping and `off` is 8-byte
    /// aligned (what every persistent pointer of this crate is).
    pub(crate) fn contains(&self, off: u64, len: u64) -> bool {
        off != 0 && off.is_multiple_of(8) && off.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// The word at offset `off`, read atomically (relaxed).
    ///
    /// # Panics
    /// If `off` is not an 8-byte aligned offset inside the pool.
    #[inline]
    pub(crate) fn load(&self, off: u64) -> u64 {
        self.word(off).load(Ordering::Relaxed)
    }

    /// Reads `out.len()` consecutive words starting at `off`.
    pub(crate) fn load_words(&self, off: u64, out: &mut [u64]) {
        for (i, word) in out.iter_mut().enumerate() {
            *word = self.load(off + 8 * i as u64);
        }
    }

    #[inline]
    fn word(&self, off: u64) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off.checked_add(8).is_some_and(|end| end <= self.len),
            "pool offset {off:#x} is not an aligned word inside the {}-byte pool",
            self.len
        );
        // SAFETY: `off` is 8-byte aligned and `off + 8 <= len` (checked
        // above), and `base` is 8-byte aligned (checked at open), so the
        // address is an aligned word of the pool mapping, which stays mapped
        // while `self` lives (the returned reference borrows `self`).
        // AtomicU64 has the size and alignment of u64, and every Rust access
        // to pool memory goes through AtomicU64 (no `&`/`&mut` to plain
        // data), so there are no data races on the Rust side. libpmemobj
        // writes these words only on behalf of the thread whose transaction
        // covers them (undo on abort), which holds the structure's lock.
        unsafe { &*(self.base.as_ptr().add(off as usize) as *const AtomicU64) }
    }

    fn address(&self, off: u64, len: u64) -> *const u8 {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "pool range {off:#x}+{len} outside the {}-byte pool",
            self.len
        );
        self.base.as_ptr().wrapping_add(off as usize)
    }

    /// Runs `body` as one libpmemobj transaction: committed if it returns
    /// `Ok`, aborted (undo log applied) if it returns `Err` or panics or a
    /// libpmemobj call inside it fails.
    ///
    /// Must not be called inside another transaction of this thread (the
    /// crate never nests them; [`Tx`] is neither `Send` nor able to start
    /// one).
    pub(crate) fn tx<T>(&self, body: impl FnOnce(&Tx<'_>) -> Result<T, PmdkError>) -> Result<T, PmdkError> {
        // SAFETY: `pop` is an open pool; env is NULL, so a failure returns
        // an error code instead of longjmp-ing; TX_PARAM_NONE (an int, the
        // type libpmemobj reads with va_arg) ends the parameter list.
        let rc = unsafe { ffi::pmemobj_tx_begin(self.pop.as_ptr(), ptr::null_mut(), ffi::TX_PARAM_NONE) };
        // From here on, pmemobj_tx_end must be called exactly once (also when
        // begin failed, as tx_base.h requires), after an abort if the
        // transaction is still in TX_STAGE_WORK: the guard does both, also
        // when `body` panics.
        let guard = EndGuard { active: true };
        if rc != 0 {
            let error = tx_error("pmemobj_tx_begin", rc);
            drop(guard);
            return Err(error);
        }
        let tx = Tx { pool: self, failed: Cell::new(false), _not_send: PhantomData };
        let value = body(&tx)?;
        if tx.failed.get() {
            // The body swallowed a failure: the transaction is already aborted.
            return Err(PmdkError::Transaction {
                op: "transaction body",
                errno: libc::ECANCELED,
                message: "a failed libpmemobj call inside the transaction was ignored".into(),
            });
        }
        // SAFETY: no arguments; this thread's transaction is in
        // TX_STAGE_WORK (begin succeeded and no call failed: a failure sets
        // `failed`), the stage pmemobj_tx_commit requires. It flushes the
        // snapshotted ranges and allocations, drains and publishes.
        unsafe { ffi::pmemobj_tx_commit() };
        let mut guard = guard;
        guard.active = false;
        // SAFETY: ends this thread's committed transaction (TX_STAGE_ONCOMMIT,
        // not WORK, as pmemobj_tx_end requires); returns 0 after a commit.
        let rc = unsafe { ffi::pmemobj_tx_end() };
        if rc != 0 {
            return Err(tx_error("pmemobj_tx_end", rc));
        }
        Ok(value)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: `pop` is open and `&mut self` proves no other thread uses
        // it; no transaction is open (`Pool::tx` ends each one before it
        // returns, also on panic).
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) }
    }
}

/// Ends the thread's transaction when dropped, aborting it first if it is
/// still in `TX_STAGE_WORK`.
struct EndGuard {
    active: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        // SAFETY: called only between a pmemobj_tx_begin and its
        // pmemobj_tx_end on this thread. pmemobj_tx_stage only reads the
        // thread-local stage. pmemobj_tx_abort is called only in
        // TX_STAGE_WORK (its precondition); the transaction was begun with a
        // NULL jmp_buf, so it returns instead of longjmp-ing. pmemobj_tx_end
        // is then called outside TX_STAGE_WORK, as it requires.
        unsafe {
            if ffi::pmemobj_tx_stage() == ffi::TX_STAGE_WORK {
                ffi::pmemobj_tx_abort(libc::ECANCELED);
            }
            ffi::pmemobj_tx_end();
        }
    }
}

/// The error of a failed libpmemobj transaction call `op` with error number
/// `errno` (ENOMEM means the pool, or its undo log, is out of space).
fn tx_error(op: &'static str, errno: c_int) -> PmdkError {
    let message = last_error_message();
    if errno == libc::ENOMEM {
        PmdkError::OutOfSpace { op, message }
    } else {
        PmdkError::Transaction { op, errno, message }
    }
}

/// The open transaction of the calling thread inside [`Pool::tx`].
pub(crate) struct Tx<'p> {
    pool: &'p Pool,
    /// A libpmemobj call failed: the transaction is aborted; no more writes.
    failed: Cell<bool>,
    /// The transaction is the thread's: `Tx` must not move to another thread.
    _not_send: PhantomData<*mut ()>,
}

impl Tx<'_> {
    /// The pool, for reads.
    #[inline]
    pub(crate) fn pool(&self) -> &Pool {
        self.pool
    }

    /// The word at `off` (as [`Pool::load`]).
    #[inline]
    pub(crate) fn load(&self, off: u64) -> u64 {
        self.pool.load(off)
    }

    /// Records that libpmemobj aborted the transaction in `op` (returning
    /// `rc`, or 0 if the call returns no error number) and builds the error.
    fn fail(&self, op: &'static str, rc: c_int) -> PmdkError {
        self.failed.set(true);
        let errno = if rc != 0 {
            rc
        } else {
            // SAFETY: no arguments; reads this thread's last transaction error.
            unsafe { ffi::pmemobj_tx_errno() }
        };
        tx_error(op, if errno == 0 { libc::ECANCELED } else { errno })
    }

    /// Snapshots `[off, off + len)` into the undo log
    /// (`pmemobj_tx_add_range_direct`): from now on the range may be
    /// written with [`Tx::set`] and is restored if the transaction aborts.
    /// Ranges already snapshotted or allocated in this transaction cost only
    /// a lookup.
    pub(crate) fn add_range(&self, off: u64, len: u64) -> Result<(), PmdkError> {
        assert!(!self.failed.get(), "transaction used after a failed libpmemobj call");
        let address = self.pool.address(off, len);
        // SAFETY: this thread's transaction is in TX_STAGE_WORK (`failed` is
        // false, and every failing call sets it); the range lies inside the
        // pool mapping (checked by `address`). On failure libpmemobj aborts
        // the transaction and returns an error number (no longjmp: NULL
        // jmp_buf).
        let rc = unsafe { ffi::pmemobj_tx_add_range_direct(address.cast(), len as usize) };
        if rc != 0 {
            return Err(self.fail("pmemobj_tx_add_range_direct", rc));
        }
        Ok(())
    }

    /// Writes a word. The word must lie in a range snapshotted with
    /// [`Tx::add_range`] or allocated in this transaction (otherwise an abort
    /// or crash would not undo it: a crash-consistency bug, not memory
    /// unsafety).
    #[inline]
    pub(crate) fn set(&self, off: u64, value: u64) {
        assert!(!self.failed.get(), "transaction used after a failed libpmemobj call");
        self.pool.word(off).store(value, Ordering::Relaxed);
    }

    /// Snapshots the word at `off` and writes it.
    pub(crate) fn store(&self, off: u64, value: u64) -> Result<(), PmdkError> {
        self.add_range(off, 8)?;
        self.set(off, value);
        Ok(())
    }

    /// Writes consecutive words from `off` (preconditions of [`Tx::set`]).
    pub(crate) fn set_words(&self, off: u64, words: &[u64]) {
        for (i, &word) in words.iter().enumerate() {
            self.set(off + 8 * i as u64, word);
        }
    }

    /// Moves `count` words from `from` to `to` (overlap allowed, as
    /// `memmove`); the destination must be writable (see [`Tx::set`]).
    pub(crate) fn move_words(&self, from: u64, to: u64, count: u64) {
        if to > from {
            for i in (0..count).rev() {
                self.set(to + 8 * i, self.load(from + 8 * i));
            }
        } else {
            for i in 0..count {
                self.set(to + 8 * i, self.load(from + 8 * i));
            }
        }
    }

    /// Allocates `size` bytes (`pmemobj_tx_alloc`, contents undefined;
    /// `zeroed` uses `pmemobj_tx_zalloc`) of type number `type_num`; the
    /// allocation is undone if the transaction aborts. Returns its offset.
    pub(crate) fn alloc(&self, size: u64, type_num: u64, zeroed: bool) -> Result<u64, PmdkError> {
        assert!(!self.failed.get(), "transaction used after a failed libpmemobj call");
        let size = usize::try_from(size).expect("allocation size fits usize");
        // SAFETY: this thread's transaction is in TX_STAGE_WORK (see
        // `add_range`); the functions return OID_NULL after aborting the
        // transaction on failure (out of space), without longjmp.
        let oid = unsafe {
            if zeroed {
                ffi::pmemobj_tx_zalloc(size, type_num)
            } else {
                ffi::pmemobj_tx_alloc(size, type_num)
            }
        };
        if oid.is_null() {
            return Err(self.fail(if zeroed { "pmemobj_tx_zalloc" } else { "pmemobj_tx_alloc" }, 0));
        }
        if !self.pool.contains(oid.off, size as u64) {
            // Not expected from libpmemobj; refuse to write through it.
            self.failed.set(true);
            // SAFETY: the transaction is in TX_STAGE_WORK (the allocation
            // succeeded); aborting returns (NULL jmp_buf).
            unsafe { ffi::pmemobj_tx_abort(libc::EFAULT) };
            return Err(PmdkError::Transaction {
                op: "pmemobj_tx_alloc",
                errno: libc::EFAULT,
                message: format!("allocation at offset {:#x} outside the pool or misaligned", oid.off),
            });
        }
        Ok(oid.off)
    }

    /// Frees the object at `off` when the transaction commits
    /// (`pmemobj_tx_free`).
    pub(crate) fn free(&self, off: u64) -> Result<(), PmdkError> {
        assert!(!self.failed.get(), "transaction used after a failed libpmemobj call");
        let oid = PmemOid { pool_uuid_lo: self.pool.uuid_lo, off };
        // SAFETY: TX_STAGE_WORK as above; `oid` names an object of this pool
        // (the callers pass offsets returned by `alloc`). On failure it aborts
        // and returns an error number (no longjmp).
        let rc = unsafe { ffi::pmemobj_tx_free(oid) };
        if rc != 0 {
            return Err(self.fail("pmemobj_tx_free", rc));
        }
        Ok(())
    }
}

/// Removes a pool file this crate created, unless it should be kept.
pub(crate) struct CreatedFile {
    pub(crate) path: PathBuf,
    pub(crate) keep: bool,
}

impl Drop for CreatedFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap()
    }

    #[test]
    fn an_error_or_panic_in_the_body_rolls_the_transaction_back() {
        let dir = scratch();
        let pool = Pool::create(&dir.path().join("pool"), "pmtx-pool-test", 16 << 20).unwrap();
        let word = pool.root() + 8;
        pool.tx(|tx| tx.store(word, 1)).unwrap();
        assert_eq!(pool.load(word), 1);

        let error = pool
            .tx(|tx| -> Result<(), PmdkError> {
                tx.store(word, 2)?;
                Err(PmdkError::InvalidConfig("the body's own error".into()))
            })
            .unwrap_err();
        assert!(matches!(error, PmdkError::InvalidConfig(_)));
        assert_eq!(pool.load(word), 1, "rolled back");

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.tx(|tx| -> Result<(), PmdkError> {
                tx.store(word, 3)?;
                panic!("inside a transaction");
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(pool.load(word), 1, "rolled back after the panic");

        // The thread's transaction state is clean: the next one commits.
        pool.tx(|tx| tx.store(word, 4)).unwrap();
        assert_eq!(pool.load(word), 4);
    }

    #[test]
    fn a_failed_allocation_aborts_and_reports_out_of_space() {
        let dir = scratch();
        let pool = Pool::create(&dir.path().join("pool"), "pmtx-pool-test", 16 << 20).unwrap();
        let word = pool.root() + 8;
        let error = pool
            .tx(|tx| {
                tx.store(word, 7)?;
                tx.alloc(1 << 30, 1, false)
            })
            .unwrap_err();
        assert!(matches!(error, PmdkError::OutOfSpace { op: "pmemobj_tx_alloc", .. }), "{error}");
        assert_eq!(pool.load(word), 0, "rolled back");
        let object = pool.tx(|tx| tx.alloc(64, 1, true)).unwrap();
        assert!(pool.contains(object, 64));
        assert_eq!(pool.load(object), 0);
        pool.tx(|tx| tx.free(object)).unwrap();
    }

    #[test]
    fn a_reopened_pool_keeps_committed_words() {
        let dir = scratch();
        let path = dir.path().join("pool");
        {
            let pool = Pool::create(&path, "pmtx-pool-test", 16 << 20).unwrap();
            pool.tx(|tx| tx.store(pool.root() + 16, 0xABCD)).unwrap();
        }
        let pool = Pool::open(&path, "pmtx-pool-test").unwrap();
        assert_eq!(pool.load(pool.root() + 16), 0xABCD);
        drop(pool);
        match Pool::open(&path, "another-layout") {
            Err(PmdkError::PoolOpen { message, .. }) => assert!(message.contains("layout"), "{message}"),
            other => panic!("expected a layout mismatch, got {:?}", other.map(|_| ())),
        }
    }
}
