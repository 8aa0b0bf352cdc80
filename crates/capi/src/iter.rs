//! Scans: an iterator that reads an ordered table's range in batches, in
//! its transaction.

use crate::status::{guard, pmtx_status, Failure};
use crate::txn::TxnCell;
use pmtx_engine::{ScanDirection, TableId};
use std::ops::Bound;
use std::sync::Arc;

/// Scan backwards, from the last key of the range (`pmtx_txn_scan` flags).
pub const PMTX_SCAN_REVERSE: u32 = 1;

/// Rows read per batch: enough to amortize a scan call, few enough that an
/// early stop reads little past it.
const BATCH: usize = 64;

/// An iterator over a range of an ordered table (opaque).
#[allow(non_camel_case_types)]
pub struct pmtx_iter {
    cell: Arc<TxnCell>,
    table: TableId,
    from: Option<Vec<u8>>,
    to: Option<Vec<u8>>,
    reverse: bool,
    /// The batch's keys and values, back to back.
    bytes: Vec<u8>,
    /// Per row of the batch: where its key starts, its key's and its
    /// value's lengths (the value follows the key).
    rows: Vec<(usize, usize, usize)>,
    /// The next row of the batch to hand out.
    next: usize,
    /// The last key handed out, where the next batch starts (excluded).
    last_key: Option<Vec<u8>>,
    /// No rows are left past this batch.
    exhausted: bool,
}

impl pmtx_iter {
    pub(crate) fn new(
        cell: Arc<TxnCell>,
        table: TableId,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        flags: u32,
    ) -> Result<Self, Failure> {
        if flags & !PMTX_SCAN_REVERSE != 0 {
            return Err(Failure::argument(format!("unknown flags {:#x} of pmtx_txn_scan", flags & !PMTX_SCAN_REVERSE)));
        }
        Ok(Self {
            cell,
            table,
            from: from.map(<[u8]>::to_vec),
            to: to.map(<[u8]>::to_vec),
            reverse: flags & PMTX_SCAN_REVERSE != 0,
            bytes: Vec::new(),
            rows: Vec::new(),
            next: 0,
            last_key: None,
            exhausted: false,
        })
    }

    /// Reads the next batch in the transaction.
    fn fetch(&mut self) -> Result<(), Failure> {
        let resume = self.last_key.as_deref().map(Bound::Excluded);
        let from = self.from.as_deref().map_or(Bound::Unbounded, Bound::Included);
        let to = self.to.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let (range, direction) = if self.reverse {
            ((from, resume.unwrap_or(to)), ScanDirection::Reverse)
        } else {
            ((resume.unwrap_or(from), to), ScanDirection::Forward)
        };
        let (bytes, rows) = (&mut self.bytes, &mut self.rows);
        bytes.clear();
        rows.clear();
        self.cell.state.lock().step(|tx| {
            tx.scan_with(self.table, range, direction, BATCH, |key, value| {
                rows.push((bytes.len(), key.len(), value.len()));
                bytes.extend_from_slice(key);
                bytes.extend_from_slice(value);
                true
            })
        })?;
        self.next = 0;
        self.exhausted = self.rows.len() < BATCH;
        if let Some(&(start, key_len, _)) = self.rows.last() {
            self.last_key = Some(self.bytes[start..start + key_len].to_vec());
        }
        Ok(())
    }
}

/// Moves to the next row: `*key`, `*key_len`, `*value`, `*value_len` (each
/// may be NULL if not wanted) describe it, in memory the iterator owns,
/// valid until the next call on the iterator or its free. `PMTX_END` when
/// the range has no more rows. Reading a batch needs the transaction to be
/// running (`PMTX_ERR_ENDED` otherwise); a conflict found then is
/// `PMTX_CONFLICT`, as for any step.
///
/// # Safety
/// `iter` is a live handle; the four outputs are NULL or writable.
///
/// Thread safety: the transaction's thread only.
#[no_mangle]
pub unsafe extern "C" fn pmtx_iter_next(
    iter: *mut pmtx_iter,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        let iter = unsafe { iter.as_mut() }.ok_or_else(|| Failure::argument("iter is NULL"))?;
        iter.cell.check()?;
        if iter.next == iter.rows.len() {
            if iter.exhausted {
                return Ok(pmtx_status::PMTX_END);
            }
            iter.fetch()?;
            if iter.rows.is_empty() {
                return Ok(pmtx_status::PMTX_END);
            }
        }
        let (start, row_key_len, row_value_len) = iter.rows[iter.next];
        iter.next += 1;
        let row_key = iter.bytes[start..].as_ptr();
        let row_value = iter.bytes[start + row_key_len..].as_ptr();
        // SAFETY: each output is null or writable by the caller's contract.
        unsafe {
            if !key.is_null() {
                key.write(row_key);
            }
            if !key_len.is_null() {
                key_len.write(row_key_len);
            }
            if !value.is_null() {
                value.write(row_value);
            }
            if !value_len.is_null() {
                value_len.write(row_value_len);
            }
        }
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Frees the iterator (the rows it handed out go with it).
/// `pmtx_iter_free(NULL)` does nothing.
///
/// # Safety
/// `iter` is NULL or a live handle from `pmtx_txn_scan`, not used again.
///
/// Thread safety: the transaction's thread only (`PMTX_ERR_WRONG_THREAD`,
/// and the iterator stays, on another).
#[no_mangle]
pub unsafe extern "C" fn pmtx_iter_free(iter: *mut pmtx_iter) -> pmtx_status {
    guard(|| {
        // SAFETY: null or live by the caller's contract.
        let Some(handle) = (unsafe { iter.as_ref() }) else {
            return Ok(pmtx_status::PMTX_OK);
        };
        // A closed database still lets the iterator go.
        handle.cell.check_thread()?;
        // SAFETY: from `Box::into_raw` in pmtx_txn_scan; the caller does
        // not use it again.
        drop(unsafe { Box::from_raw(iter) });
        Ok(pmtx_status::PMTX_OK)
    })
}
