//! Key representation of the ordered index: 16 bytes inline, the rest (of
//! longer keys only) in an immutable heap blob.
//!
//! # Stored keys
//!
//! Every key slot of a node is three 64-bit words:
//!
//! ```text
//!   p0  = bytes  0..8  of the key, zero padded, big-endian
//!   p1  = bytes  8..16 of the key, zero padded, big-endian
//!   tag = (len << 1) | 1             if len <= INLINE_KEY_LEN (no blob)
//!       = a blob [len: usize][bytes; len], otherwise:
//!         bits 48..64  bytes 16..18 of the key, zero padded, big-endian
//!                      (the *extra* word)
//!         bits  3..48  the blob's address
//!         bit   1      1: the extra word is there
//!       or, where an address does not fit in 48 bits, the bare address
//!       (bit 1 clear, no extra word)
//!   (all three 0: empty slot)
//! ```
//!
//! Blobs are `usize`-aligned (at least 4 bytes), so a blob tag has its low
//! bit clear and an inline tag has it set; an empty slot's tag (0) is
//! neither. The extra word is there because keys of one table often share
//! their first 16 bytes: a secondary index's composite key (secondary key,
//! then primary key) of TPC-C's orders by customer has 20 bytes, and every
//! order of one customer has the same first 16, so without it each
//! comparison between them read the blob — a cache miss per comparison in
//! a leaf's binary search.
//!
//! # Order
//!
//! Keys compare as byte strings (lexicographically, a proper prefix sorting
//! first).  Write `pad(k)` for the first 16 bytes of `k`, zero padded, which
//! `(p0, p1)` orders as a 32-digit base-256 number.  If `a < b` then
//! `pad(a) <= pad(b)`: either `a` is a proper prefix of `b`, and `pad(a)` has
//! zeros where `pad(b)` has bytes `>= 0`; or `a` and `b` first differ at
//! some `i` with `a[i] < b[i]`, and the padded prefixes agree before `i` and
//! either differ the same way at `i` (if `i < 16`) or are equal.  Hence when
//! the padded prefixes differ they give the order of the keys.  If they are
//! equal:
//!
//! * both keys are at most 16 bytes: the shorter one, of length `m`, equals
//!   the first `m` bytes of the longer one and the rest of the longer one is
//!   zeros (`"ab"` vs `"ab\0"`: both pad to `"ab\0\0..."`), so the shorter
//!   is a proper prefix of the longer and sorts first; equal lengths mean
//!   equal keys;
//! * one key has at most 16 bytes, the other more: the short one is again a
//!   prefix of the long one's first 16 bytes, so it sorts first;
//! * both are longer than 16 bytes: their first 16 bytes are equal, so the
//!   order is that of the remaining bytes. The same argument over bytes
//!   16..18, zero padded, says that differing extra words give it; else it
//!   is read from the blobs.
//!
//! So only comparisons between two long keys with equal 18-byte prefixes
//! dereference a blob, and an index whose keys are all at most 16 bytes
//! never allocates one.
//!
//! # Blob lifetime
//!
//! A blob is fully written before its address is published with a `Release`
//! store and is never mutated afterwards, so optimistic readers that obtained
//! the address through an `Acquire` load may read its bytes without
//! synchronization for as long as the blob is alive.  Blobs that are removed
//! from the tree while readers may still hold their address are freed
//! through `crossbeam-epoch` (see `btree.rs`).

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cmp::Ordering;
use std::mem::{align_of, size_of};

/// Keys of at most this many bytes are stored entirely inline.
pub(crate) const INLINE_KEY_LEN: usize = 16;

const HEADER: usize = size_of::<usize>();

// Node words are 64-bit; addresses must fit.
const _: () = assert!(size_of::<usize>() <= size_of::<u64>());
// Blob addresses must have the two low bits clear to be told apart from
// inline tags and to hold the extra-word flag.
const _: () = assert!(align_of::<usize>() >= 4);

/// Tag bit of a blob tag that carries the extra word.
const EXTRA_PRESENT: u64 = 0b10;
/// The address bits of a blob tag that carries the extra word.
const EXTRA_ADDRESS_MASK: u64 = ((1 << 48) - 1) & !0b11;
/// Bytes of a long key the extra word holds (after the 16 inline ones).
const EXTRA_LEN: usize = 2;

/// The three words of a stored key (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyWords {
    pub(crate) p0: u64,
    pub(crate) p1: u64,
    pub(crate) tag: u64,
}

impl KeyWords {
    /// The words of an empty slot.
    pub(crate) const EMPTY: KeyWords = KeyWords { p0: 0, p1: 0, tag: 0 };

    /// `true` for an empty slot (or a torn read of one).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.tag == 0
    }

    /// Address of the blob holding the full key, if the key is long.
    #[inline]
    pub(crate) fn blob(&self) -> Option<u64> {
        if self.tag & 1 == 0 && self.tag != 0 {
            Some(blob_address(self.tag))
        } else {
            None
        }
    }

    /// Whether a blob tag's extra word, if it has one, holds bytes 16..18
    /// of `key` (the index's invariant checks).
    pub(crate) fn extra_is_of(&self, key: &[u8]) -> bool {
        self.tag & 1 == 1 || self.tag & EXTRA_PRESENT == 0 || (self.tag >> 48) as u16 == extra_word(key)
    }

    /// Length of an inline key.
    #[inline]
    fn inline_len(&self) -> Option<usize> {
        if self.tag & 1 == 1 {
            Some((self.tag >> 1) as usize)
        } else {
            None
        }
    }

    /// Words for `key`, allocating a blob if it is longer than
    /// [`INLINE_KEY_LEN`].
    pub(crate) fn new_owned(key: &[u8]) -> KeyWords {
        let (p0, p1) = prefix_words(key);
        let tag = if key.len() <= INLINE_KEY_LEN { inline_tag(key.len()) } else { blob_tag(alloc_key(key), key) };
        KeyWords { p0, p1, tag }
    }

    /// The key's bytes: the inline bytes copied into `buf`, or the blob's.
    ///
    /// # Safety
    ///
    /// `self` must not be empty, and if it refers to a blob, the blob must
    /// stay live for `'a` (see [`key_bytes`]).
    #[inline]
    pub(crate) unsafe fn bytes<'a>(&self, buf: &'a mut [u8; INLINE_KEY_LEN]) -> &'a [u8] {
        match self.inline_len() {
            Some(len) => {
                buf[..8].copy_from_slice(&self.p0.to_be_bytes());
                buf[8..].copy_from_slice(&self.p1.to_be_bytes());
                // A torn read may produce any odd tag; clamp so the slice is
                // in bounds (the caller's validation then fails).
                &buf[..len.min(INLINE_KEY_LEN)]
            }
            // SAFETY: the caller guarantees a live blob.
            None => unsafe { key_bytes(blob_address(self.tag)) },
        }
    }
}

/// A key to search for: its prefix words, its length and its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SearchKey<'a> {
    p0: u64,
    p1: u64,
    /// Bytes 16..18, zero padded (0 for keys of at most 16 bytes).
    extra: u16,
    len: usize,
    /// The full key.  Only read when the key is longer than
    /// [`INLINE_KEY_LEN`].
    bytes: &'a [u8],
}

impl<'a> SearchKey<'a> {
    /// Search key for `key`.
    #[inline]
    pub(crate) fn new(key: &'a [u8]) -> Self {
        let (p0, p1) = prefix_words(key);
        SearchKey { p0, p1, extra: extra_word(key), len: key.len(), bytes: key }
    }

    /// Search key for a stored key.
    ///
    /// # Safety
    ///
    /// `words` must not be empty, and if it refers to a blob, the blob must
    /// stay live for `'a` (see [`key_bytes`]).
    #[inline]
    pub(crate) unsafe fn from_words(words: KeyWords) -> Self {
        match words.inline_len() {
            // Inline keys are compared by words and length alone; their
            // bytes are never read.
            Some(len) => SearchKey { p0: words.p0, p1: words.p1, extra: 0, len, bytes: &[] },
            None => {
                // SAFETY: the caller guarantees a live blob.
                let bytes = unsafe { key_bytes(blob_address(words.tag)) };
                SearchKey { p0: words.p0, p1: words.p1, extra: extra_word(bytes), len: bytes.len(), bytes }
            }
        }
    }

    /// Compares the stored key whose prefix words are `p0`, `p1` with
    /// `self`, if the prefix words decide it.
    #[inline(always)]
    pub(crate) fn cmp_prefix(&self, p0: u64, p1: impl FnOnce() -> u64) -> Option<Ordering> {
        if p0 != self.p0 {
            return Some(p0.cmp(&self.p0));
        }
        let p1 = p1();
        if p1 != self.p1 {
            return Some(p1.cmp(&self.p1));
        }
        None
    }

    /// Compares a stored key whose prefix words equal `self`'s and whose tag
    /// is `tag` (not empty) with `self`.
    ///
    /// # Safety
    ///
    /// If `tag` is a blob address, the blob must be live for the duration of
    /// the call.
    #[inline(always)]
    pub(crate) unsafe fn cmp_tail(&self, tag: u64) -> Ordering {
        debug_assert_ne!(tag, 0);
        let self_long = self.len > INLINE_KEY_LEN;
        if tag & 1 == 1 {
            if self_long {
                Ordering::Less
            } else {
                ((tag >> 1) as usize).cmp(&self.len)
            }
        } else if !self_long {
            Ordering::Greater
        } else {
            if tag & EXTRA_PRESENT != 0 {
                let stored_extra = (tag >> 48) as u16;
                if stored_extra != self.extra {
                    // Differing padded bytes 16..18 decide (module docs),
                    // without reading the blob.
                    return stored_extra.cmp(&self.extra);
                }
            }
            // SAFETY: the caller guarantees a live blob.  Blobs are only
            // made for keys longer than INLINE_KEY_LEN.
            let stored = unsafe { key_bytes(blob_address(tag)) };
            stored[INLINE_KEY_LEN..].cmp(&self.bytes[INLINE_KEY_LEN..])
        }
    }

    /// Compares the inline stored key `words` (no blob: indexes without
    /// long keys) with `self`: prefix words, then lengths, as
    /// [`cmp_key`](Self::cmp_key) would on the key's search key.
    #[inline(always)]
    pub(crate) fn cmp_inline_words(&self, words: KeyWords) -> Ordering {
        debug_assert!(words.inline_len().is_some());
        (words.p0, words.p1, (words.tag >> 1) as usize).cmp(&(self.p0, self.p1, self.len))
    }

    /// Compares `self` with `other` (both search keys).
    #[inline]
    pub(crate) fn cmp_key(&self, other: &SearchKey<'_>) -> Ordering {
        match (self.p0, self.p1).cmp(&(other.p0, other.p1)) {
            Ordering::Equal => {}
            decided => return decided,
        }
        match (self.len > INLINE_KEY_LEN, other.len > INLINE_KEY_LEN) {
            (false, false) => self.len.cmp(&other.len),
            (false, true) => Ordering::Less,
            (true, false) => Ordering::Greater,
            (true, true) => self.bytes[INLINE_KEY_LEN..].cmp(&other.bytes[INLINE_KEY_LEN..]),
        }
    }
}

/// The zero-padded big-endian words of the first 16 bytes of `key`.
#[inline]
pub(crate) fn prefix_words(key: &[u8]) -> (u64, u64) {
    let mut b = [0u8; INLINE_KEY_LEN];
    let n = key.len().min(INLINE_KEY_LEN);
    b[..n].copy_from_slice(&key[..n]);
    let (a, c) = b.split_at(8);
    (u64::from_be_bytes(a.try_into().unwrap()), u64::from_be_bytes(c.try_into().unwrap()))
}

/// Bytes 16..18 of `key`, zero padded, big-endian (0 for a key of at most
/// 16 bytes).
#[inline]
fn extra_word(key: &[u8]) -> u16 {
    let mut b = [0u8; EXTRA_LEN];
    let tail = key.get(INLINE_KEY_LEN..).unwrap_or(&[]);
    let n = tail.len().min(EXTRA_LEN);
    b[..n].copy_from_slice(&tail[..n]);
    u16::from_be_bytes(b)
}

/// Tag of a long key `key` held in the blob at `address`: with the extra
/// word where the address fits in 48 bits.
#[inline]
fn blob_tag(address: u64, key: &[u8]) -> u64 {
    debug_assert!(address & 0b11 == 0 && address != 0);
    if address & !EXTRA_ADDRESS_MASK == 0 {
        address | EXTRA_PRESENT | (u64::from(extra_word(key)) << 48)
    } else {
        address
    }
}

/// The blob address of a (non-empty, non-inline) blob tag.
#[inline]
fn blob_address(tag: u64) -> u64 {
    if tag & EXTRA_PRESENT != 0 {
        tag & EXTRA_ADDRESS_MASK
    } else {
        tag
    }
}

/// Tag word of an inline key of `len <= INLINE_KEY_LEN` bytes.
#[inline]
pub(crate) fn inline_tag(len: usize) -> u64 {
    debug_assert!(len <= INLINE_KEY_LEN);
    ((len as u64) << 1) | 1
}

fn layout(len: usize) -> Layout {
    // `len` is the length of an existing slice (or was read from a blob we
    // created from one), so `HEADER + len` cannot exceed `isize::MAX` rounded
    // to the alignment in practice.
    Layout::from_size_align(HEADER + len, align_of::<usize>()).expect("key blob layout overflow")
}

/// Allocates a blob holding a copy of `key` and returns its address (never 0,
/// low bit clear).
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
            assert_eq!(b & 1, 0);
            // SAFETY: `b` is live until the `free_key` below.
            assert_eq!(unsafe { key_bytes(b) }, key);
            // SAFETY: allocated above, freed once, no outstanding borrows.
            unsafe { free_key(b) };
        }
    }

    /// A blob tag keeps its address and carries bytes 16..18 when the
    /// address fits in 48 bits; otherwise it is the bare address.
    #[test]
    fn blob_tags_keep_the_address_and_bytes_16_to_18() {
        let key = [b"0123456789abcdef".as_slice(), b"\x12\x34tail"].concat();
        let low = 0x0000_7f00_1234_5678;
        let tag = blob_tag(low, &key);
        assert_eq!(tag & 1, 0);
        assert_eq!(blob_address(tag), low);
        assert_eq!(tag >> 48, 0x1234);
        assert!(KeyWords { p0: 1, p1: 1, tag }.extra_is_of(&key));
        assert!(!KeyWords { p0: 1, p1: 1, tag }.extra_is_of(b"0123456789abcdef\x12\x35"));
        let seventeen = [b"0123456789abcdef".as_slice(), b"\x9a"].concat();
        assert_eq!(blob_tag(low, &seventeen) >> 48, 0x9a00);
        // An address above 48 bits (5-level paging) is kept whole.
        let high = 0x0100_0000_0000_0008;
        assert_eq!(blob_tag(high, &key), high);
        assert_eq!(blob_address(high), high);
        assert!(KeyWords { p0: 1, p1: 1, tag: high }.extra_is_of(&key));
    }

    /// The word comparison agrees with byte-string order, including the
    /// tricky cases of the module documentation.
    #[test]
    fn word_order_is_byte_order() {
        let mut keys: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\0".to_vec(),
            b"ab".to_vec(),
            b"ab\0".to_vec(),
            b"ab\0\0".to_vec(),
            b"ab\x01".to_vec(),
            [0u8; 16].to_vec(),
            [0u8; 17].to_vec(),
            [0u8; 30].to_vec(),
            [b"0123456789abcdef".as_slice(), b""].concat(),
            [b"0123456789abcdef".as_slice(), b"\0"].concat(),
            [b"0123456789abcdef".as_slice(), b"x"].concat(),
            [b"0123456789abcdef".as_slice(), b"xy"].concat(),
            [b"0123456789abcde".as_slice(), b""].concat(),
            [b"0123456789abcde".as_slice(), b"\xff"].concat(),
            [b"0123456789abcde".as_slice(), b"\xff\0"].concat(),
            // Equal first 16 bytes, told apart by bytes 16..18 or past them.
            [b"0123456789abcdef".as_slice(), b"x\0"].concat(),
            [b"0123456789abcdef".as_slice(), b"xy\0"].concat(),
            [b"0123456789abcdef".as_slice(), b"xya"].concat(),
            [b"0123456789abcdef".as_slice(), b"xyb"].concat(),
            [b"0123456789abcdef".as_slice(), b"xz"].concat(),
            [b"0123456789abcdef".as_slice(), b"\xff\xff\xff"].concat(),
            vec![0xff; 40],
        ];
        keys.sort();
        let words: Vec<KeyWords> = keys.iter().map(|k| KeyWords::new_owned(k)).collect();
        for (a, wa) in keys.iter().zip(&words) {
            // SAFETY: all blobs live until freed at the end of the test.
            let sa = unsafe { SearchKey::from_words(*wa) };
            let mut buf = [0u8; INLINE_KEY_LEN];
            // SAFETY: as above.
            assert_eq!(unsafe { wa.bytes(&mut buf) }, a.as_slice());
            for (b, wb) in keys.iter().zip(&words) {
                let want = a.cmp(b);
                let sb = SearchKey::new(b);
                assert_eq!(sa.cmp_key(&sb), want, "{a:?} vs {b:?}");
                let got = sb
                    .cmp_prefix(wa.p0, || wa.p1)
                    // SAFETY: as above.
                    .unwrap_or_else(|| unsafe { sb.cmp_tail(wa.tag) });
                assert_eq!(got, want, "stored {a:?} vs probe {b:?}");
                if wa.inline_len().is_some() {
                    assert_eq!(sb.cmp_inline_words(*wa), want, "inline stored {a:?} vs probe {b:?}");
                }
                let _ = wb;
            }
        }
        for w in words {
            if let Some(b) = w.blob() {
                // SAFETY: allocated above, freed once.
                unsafe { free_key(b) };
            }
        }
    }
}
