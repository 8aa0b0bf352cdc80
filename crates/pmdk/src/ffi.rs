//! The few libpmemobj (PMDK 1.x) functions this crate calls, declared by hand
//! from `<libpmemobj/*.h>` (no bindgen).
//!
//! Transactions are begun with a NULL `jmp_buf`. libpmemobj copies the buffer
//! into its per-transaction data when one is given and zeroes it otherwise;
//! it `longjmp`s at an abort only if that copy is not all zeroes
//! (`obj_tx_abort` in `tx.c`: `if (!util_is_zeroed(txd->env, ...))
//! longjmp(...)`). With NULL every failure instead sets the stage to
//! `TX_STAGE_ONABORT` (the undo log already applied) and returns an error
//! code or `OID_NULL` to the caller, so no `longjmp` ever crosses a Rust
//! frame. This crate never nests transactions (a nested begin would let an
//! inner abort propagate to the outer transaction from `pmemobj_tx_end`) and
//! never begins one with a non-NULL buffer. Misuse of the stage machine
//! (commit outside `TX_STAGE_WORK`, end during `TX_STAGE_WORK`) is a `FATAL`
//! in libpmemobj, which aborts the process; `pool::Pool::tx` keeps to the
//! documented order.

use std::os::raw::{c_char, c_int, c_void};

/// `PMEMobjpool`: opaque pool handle.
#[repr(C)]
pub struct PmemObjPool {
    _private: [u8; 0],
}

/// `PMEMoid`: a persistent pointer (pool uuid low half, offset in the pool).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmemOid {
    /// Low 64 bits of the pool's uuid.
    pub pool_uuid_lo: u64,
    /// Offset of the object from the start of the pool.
    pub off: u64,
}

impl PmemOid {
    /// `OID_IS_NULL`.
    pub fn is_null(self) -> bool {
        self.off == 0
    }
}

/// `TX_STAGE_WORK` of `enum pobj_tx_stage` (NONE 0, WORK 1, ONCOMMIT 2,
/// ONABORT 3, FINALLY 4): a transaction is open and may be modified.
pub const TX_STAGE_WORK: c_int = 1;

/// `TX_PARAM_NONE`: terminates the variadic parameter list of
/// `pmemobj_tx_begin` (an `enum pobj_tx_param`, read with
/// `va_arg(argp, enum pobj_tx_param)`, i.e. as an `int`).
pub const TX_PARAM_NONE: c_int = 0;

extern "C" {
    /// `PMEMobjpool *pmemobj_create(const char *path, const char *layout,
    /// size_t poolsize, mode_t mode)`.
    pub fn pmemobj_create(
        path: *const c_char,
        layout: *const c_char,
        poolsize: usize,
        mode: libc::mode_t,
    ) -> *mut PmemObjPool;
    /// `PMEMobjpool *pmemobj_open(const char *path, const char *layout)`.
    pub fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut PmemObjPool;
    /// `void pmemobj_close(PMEMobjpool *pop)`.
    pub fn pmemobj_close(pop: *mut PmemObjPool);
    /// `PMEMoid pmemobj_root(PMEMobjpool *pop, size_t size)`: the root object,
    /// allocated zeroed (or grown) to at least `size` bytes.
    pub fn pmemobj_root(pop: *mut PmemObjPool, size: usize) -> PmemOid;
    /// `void *pmemobj_direct(PMEMoid oid)`: the exported (non-inline) form of
    /// the header's `pmemobj_direct_inline`, `pop + oid.off`.
    pub fn pmemobj_direct(oid: PmemOid) -> *mut c_void;
    /// `const char *pmemobj_errormsg(void)`: the calling thread's last error.
    pub fn pmemobj_errormsg() -> *const c_char;

    /// `int pmemobj_tx_begin(PMEMobjpool *pop, jmp_buf env, ...)`; the
    /// parameter list ends with `TX_PARAM_NONE`. `env` is passed NULL.
    pub fn pmemobj_tx_begin(pop: *mut PmemObjPool, env: *mut c_void, ...) -> c_int;
    /// `int pmemobj_tx_add_range_direct(const void *ptr, size_t size)`.
    pub fn pmemobj_tx_add_range_direct(ptr: *const c_void, size: usize) -> c_int;
    /// `PMEMoid pmemobj_tx_alloc(size_t size, uint64_t type_num)`.
    pub fn pmemobj_tx_alloc(size: usize, type_num: u64) -> PmemOid;
    /// `PMEMoid pmemobj_tx_zalloc(size_t size, uint64_t type_num)`.
    pub fn pmemobj_tx_zalloc(size: usize, type_num: u64) -> PmemOid;
    /// `int pmemobj_tx_free(PMEMoid oid)`.
    pub fn pmemobj_tx_free(oid: PmemOid) -> c_int;
    /// `void pmemobj_tx_commit(void)`.
    pub fn pmemobj_tx_commit();
    /// `int pmemobj_tx_end(void)`: 0 after a commit, the abort's error
    /// number otherwise.
    pub fn pmemobj_tx_end() -> c_int;
    /// `void pmemobj_tx_abort(int errnum)`.
    pub fn pmemobj_tx_abort(errnum: c_int);
    /// `enum pobj_tx_stage pmemobj_tx_stage(void)`.
    pub fn pmemobj_tx_stage() -> c_int;
    /// `int pmemobj_tx_errno(void)`: the error number of the last failure.
    pub fn pmemobj_tx_errno() -> c_int;
}
