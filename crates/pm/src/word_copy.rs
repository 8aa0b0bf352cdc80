//! Bulk copies between private bytes and words other threads may access
//! concurrently (a seqlock's value words: readers copy while a writer may
//! be storing, and re-check a version word afterwards to reject a torn
//! copy).
//!
//! Plain `memcpy` on such words would be a data race in Rust's memory
//! model; a relaxed atomic load or store per word is not, but costs a
//! load, a store and the loop's counting per 8 bytes. Here the words move
//! 64 bytes per step through SSE2 registers (every x86-64 CPU has them) in
//! inline assembly, which the compiler does not see into: to the program
//! each copy is one opaque operation whose effect is that of a relaxed
//! atomic access to each word (each 16-byte access is two naturally
//! aligned 8-byte halves), so no data race arises in the abstract machine.
//! Whether a half of an SSE access is itself single-copy atomic does not
//! matter to the callers: a seqlock rejects any copy that raced a writer.
//! Other architectures use one relaxed atomic access per word.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

/// Copies `words` into the first `words.len() * 8` bytes of `out`
/// (as relaxed loads of each word; module documentation).
///
/// # Panics
/// If `out` is shorter than the words.
#[inline]
pub fn load_words(words: &[AtomicU64], out: &mut [MaybeUninit<u8>]) {
    let out = &mut out[..words.len() * 8];
    #[cfg(target_arch = "x86_64")]
    {
        let blocks = words.len() / 8;
        let done = blocks * 8;
        // SAFETY: the source is `blocks * 64` bytes of `words` and the
        // destination as many bytes of `out` (both checked by the slicing
        // above). The reads of `words` count as relaxed atomic loads
        // (module documentation).
        unsafe { copy_blocks(words.as_ptr().cast(), out.as_mut_ptr().cast(), blocks) };
        load_tail(&words[done..], &mut out[done * 8..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    load_tail(words, out);
}

/// The words past the last whole 64-byte block, one at a time.
#[inline]
fn load_tail(words: &[AtomicU64], out: &mut [MaybeUninit<u8>]) {
    assert!(out.len() >= words.len() * 8);
    let destination = out.as_mut_ptr().cast::<u64>();
    for (at, word) in words.iter().enumerate() {
        // SAFETY: word `at` of `out` lies within it (asserted above); an
        // unaligned store of initialized bytes.
        unsafe { destination.add(at).write_unaligned(word.load(Ordering::Relaxed)) };
    }
}

/// Stores `bytes` (a whole number of words) into the first
/// `bytes.len() / 8` of `words` (as relaxed stores of each word; module
/// documentation).
///
/// # Panics
/// If `bytes` is not a whole number of words or `words` is too short.
#[inline]
pub fn store_words(words: &[AtomicU64], bytes: &[u8]) {
    assert!(bytes.len().is_multiple_of(8), "whole words only");
    let words = &words[..bytes.len() / 8];
    #[cfg(target_arch = "x86_64")]
    {
        let blocks = words.len() / 8;
        let done = blocks * 8;
        // SAFETY: the destination is `blocks * 64` bytes of `words` (stores
        // that count as relaxed atomic stores; the words' cells allow
        // writes through a shared reference), the source as many of
        // `bytes`.
        unsafe { copy_blocks(bytes.as_ptr(), words.as_ptr().cast_mut().cast(), blocks) };
        store_tail(&words[done..], &bytes[done * 8..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    store_tail(words, bytes);
}

/// Copies `blocks` blocks of 64 bytes from `source` to `destination`
/// through four SSE2 registers a step (unaligned moves, no stack use).
///
/// # Safety
/// `blocks * 64` bytes at `source` must be readable and as many at
/// `destination` writable; the two must not overlap.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn copy_blocks(source: *const u8, destination: *mut u8, blocks: usize) {
    if blocks == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        core::arch::asm!(
            "2:",
            "movdqu {a}, xmmword ptr [{src}]",
            "movdqu {b}, xmmword ptr [{src} + 16]",
            "movdqu {c}, xmmword ptr [{src} + 32]",
            "movdqu {d}, xmmword ptr [{src} + 48]",
            "movdqu xmmword ptr [{dst}], {a}",
            "movdqu xmmword ptr [{dst} + 16], {b}",
            "movdqu xmmword ptr [{dst} + 32], {c}",
            "movdqu xmmword ptr [{dst} + 48], {d}",
            "add {src}, 64",
            "add {dst}, 64",
            "dec {n}",
            "jnz 2b",
            src = inout(reg) source => _,
            dst = inout(reg) destination => _,
            n = inout(reg) blocks => _,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            d = out(xmm_reg) _,
            options(nostack),
        );
    }
}

#[inline]
fn store_tail(words: &[AtomicU64], bytes: &[u8]) {
    for (word, chunk) in words.iter().zip(bytes.chunks_exact(8)) {
        word.store(u64::from_ne_bytes(chunk.try_into().expect("8 bytes")), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_round_trips_and_nothing_past_it_changes() {
        for len in 0..40usize {
            let bytes: Vec<u8> = (0..len * 8).map(|at| (at * 13 + len) as u8).collect();
            let words: Vec<AtomicU64> = (0..len + 1).map(|_| AtomicU64::new(u64::MAX)).collect();
            store_words(&words, &bytes);
            assert_eq!(words[len].load(Ordering::Relaxed), u64::MAX, "word past {len} words");
            for (at, word) in words[..len].iter().enumerate() {
                let expected = u64::from_ne_bytes(bytes[at * 8..at * 8 + 8].try_into().unwrap());
                assert_eq!(word.load(Ordering::Relaxed), expected, "word {at} of {len}");
            }
            let mut out = vec![MaybeUninit::new(0xAAu8); len * 8 + 8];
            load_words(&words[..len], &mut out);
            // SAFETY: every byte of `out` was initialized above.
            let out: Vec<u8> = out.iter().map(|byte| unsafe { byte.assume_init() }).collect();
            assert_eq!(&out[..len * 8], &bytes[..], "{len} words");
            assert_eq!(&out[len * 8..], &[0xAA; 8], "the byte past {len} words");
        }
    }

    #[test]
    #[should_panic(expected = "whole words only")]
    fn a_partial_word_is_refused() {
        let words = [AtomicU64::new(0)];
        store_words(&words, &[1, 2, 3]);
    }
}
