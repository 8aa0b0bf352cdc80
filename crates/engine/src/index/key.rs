//! Immutable, heap-allocated key blobs addressed by a thin pointer.
//!
//! The ordered index stores keys as pointers (in `AtomicWord`s) to blobs laid
//! out as `[len: usize][bytes; len]`.  A blob is fully written before its
//! address is published with a `Release` store and is never mutated
//! afterwards, so optimistic readers that obtained the address through an
//! `Acquire` load may read its bytes without synchronization for as long as
//! the blob is alive.  Blobs that are unlinked while readers may still hold
//! their address are freed through `crossbeam-epoch` (see `btree.rs`).

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::mem::{align_of, size_of};

const HEADER: usize = size_of::<usize>();

// Node words are 64-bit; addresses must fit.
const _: () = assert!(size_of::<usize>() <= size_of::<u64>());

fn layout(len: usize) -> Layout {
    // `len` is the length of an existing slice (or was read from a blob we
    // created from one), so `HEADER + len` cannot exceed `isize::MAX` rounded
    // to the alignment in practice.
    Layout::from_size_align(HEADER + len, align_of::<usize>()).expect("key blob layout overflow")
}

/// Allocates a blob holding a copy of `key` and returns its address (never 0).
pub(crate) fn alloc_key(key: &[u8]) -> u64 {
    let layout = layout(key.len());
    // SAFETY: `layout` has non-zero size (it includes the header).
    let p = unsafe { alloc(layout) };
    if p.is_null() {
        handle_alloc_error(layout);
    }
    // SAFETY: `p` is valid for writes of `HEADER + key.len()` bytes and is
    // aligned for `usize`; the source slice does not overlap fresh memory.
    unsafe {
        (p as *mut usize).write(key.len());
        std::ptr::copy_nonoverlapping(key.as_ptr(), p.add(HEADER), key.len());
    }
    p as usize as u64
}

/// Returns the bytes of the blob at `blob`.
///
/// # Safety
///
/// `blob` must be an address returned by [`alloc_key`] that has not been
/// passed to [`free_key`], and must stay so for the lifetime `'a`.
pub(crate) unsafe fn key_bytes<'a>(blob: u64) -> &'a [u8] {
    let p = blob as usize as *const u8;
    // SAFETY: per the contract the blob is live, so the header is initialized
    // and followed by `len` initialized bytes that are never mutated.
    unsafe {
        let len = (p as *const usize).read();
        std::slice::from_raw_parts(p.add(HEADER), len)
    }
}

/// Frees the blob at `blob`.
///
/// # Safety
///
/// `blob` must be an address returned by [`alloc_key`], not freed before, and
/// no reference obtained through [`key_bytes`] may be used afterwards.
pub(crate) unsafe fn free_key(blob: u64) {
    let p = blob as usize as *mut u8;
    // SAFETY: the blob is live (contract), so its header holds the length
    // used to compute the allocation layout.
    unsafe {
        let len = (p as *const usize).read();
        dealloc(p, layout(len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        for key in [&b""[..], b"a", b"hello world", &[0u8; 300][..]] {
            let b = alloc_key(key);
            assert_ne!(b, 0);
            // SAFETY: `b` is live until the `free_key` below.
            assert_eq!(unsafe { key_bytes(b) }, key);
            // SAFETY: allocated above, freed once, no outstanding borrows.
            unsafe { free_key(b) };
        }
    }
}
