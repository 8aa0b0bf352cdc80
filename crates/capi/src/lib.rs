//! The C interface of pmtx: `libpmtx.so` and `libpmtx.a` with the header
//! `include/pmtx.h`, generated from these sources by cbindgen and checked
//! in (the `header` test fails when they drift apart). docs/c-api.md is
//! the guide; the header's comments are the reference.
//!
//! Handles are opaque pointers: a database (`pmtx_db`), a transaction
//! (`pmtx_txn`), an iterator (`pmtx_iter`) and a commit waiting for
//! durability (`pmtx_pending`). Every entry point checks its pointers,
//! catches panics (a Rust panic never unwinds into C) and returns a
//! [`pmtx_status`]; on an error, `pmtx_errmsg()` gives the message.
//!
//! Thread safety: a database handle may be used from any number of threads
//! at once (except `pmtx_close`); a transaction and its iterators belong to
//! the thread that began the transaction, and other threads get
//! `PMTX_ERR_WRONG_THREAD`.

mod db;
mod iter;
mod status;
mod txn;

pub use db::{
    pmtx_close, pmtx_open, pmtx_options, pmtx_options_init, pmtx_run, pmtx_run_read_only, pmtx_table, pmtx_table_def,
    pmtx_txn_fn, PMTX_CREATE, PMTX_EADR, PMTX_HASHED, PMTX_MSYNC, PMTX_ORDERED,
};
pub use iter::{pmtx_iter, pmtx_iter_free, pmtx_iter_next, PMTX_SCAN_REVERSE};
pub use status::pmtx_status;
pub use txn::{
    pmtx_pending, pmtx_pending_free, pmtx_pending_is_durable, pmtx_pending_wait, pmtx_txn, pmtx_txn_abort,
    pmtx_txn_begin, pmtx_txn_commit, pmtx_txn_commit_nowait, pmtx_txn_delete, pmtx_txn_free, pmtx_txn_get,
    pmtx_txn_insert, pmtx_txn_put, pmtx_txn_retry, pmtx_txn_scan, pmtx_txn_update, PMTX_READ_ONLY,
};

use std::ffi::{c_char, c_int};

/// The message of this thread's last failed call: a NUL-terminated string
/// owned by pmtx, valid until this thread's next failing call (do not free
/// it). Empty if no call of this thread has failed.
///
/// Thread safety: any thread; each thread has its own message.
#[no_mangle]
pub extern "C" fn pmtx_errmsg() -> *const c_char {
    status::last_message()
}

/// The name of status code `status` (`"PMTX_CONFLICT"`), or
/// `"PMTX_UNKNOWN_STATUS"` for a code that is none of them. A static
/// string: do not free it.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn pmtx_status_name(status: c_int) -> *const c_char {
    match pmtx_status::from_code(status) {
        Some(status) => status.name().as_ptr(),
        None => c"PMTX_UNKNOWN_STATUS".as_ptr(),
    }
}

/// The library's version, `"MAJOR.MINOR.PATCH"`. A static string.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn pmtx_version() -> *const c_char {
    const VERSION: &std::ffi::CStr =
        match std::ffi::CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(version) => version,
            Err(_) => panic!("the package version has no NUL"),
        };
    VERSION.as_ptr()
}

/// Builds a byte slice from a C pointer and length (a null pointer with
/// length 0 is the empty slice).
///
/// # Safety
/// A non-null `data` points to `len` readable bytes that stay unchanged for
/// the lifetime `'a` the caller picks.
unsafe fn bytes<'a>(data: *const u8, len: usize, what: &str) -> Result<&'a [u8], status::Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(status::Failure::argument(format!("{what} is NULL with a length of {len}")));
    }
    // SAFETY: non-null and, by the caller's contract, `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}
