//! Ordered-index costs: memory per key and single-thread point-operation
//! latency, the numbers behind the node layout chosen in
//! `src/index/btree.rs`.
//!
//! For each key shape (9-byte and 24-byte keys, inserted in ascending or in
//! random order) one round builds a fresh index of `N` keys and reports
//!
//! * `bytes/key`: heap bytes held by the index after the inserts (nodes and
//!   key blobs, counted by a wrapping global allocator) divided by `N`;
//! * `insert ns`: mean time of one `insert` while building it;
//! * `get ns`: mean time of one `get` of a random present key (a fixed
//!   pseudo-random permutation, so every run probes the same keys).
//!
//! Every figure is the median over the rounds.  The run is deterministic
//! apart from timing, so two builds can be compared by alternating them:
//!
//! ```sh
//! cargo bench -p pmtx-engine --bench index            # N = 1M, 5 rounds
//! cargo bench -p pmtx-engine --bench index -- 200000 3
//! cargo bench -p pmtx-engine --bench index -- 1000000 5 24B random
//! ```
//!
//! It uses nothing but the public `OrderedIndex` API, so the same file runs
//! against older versions of the index.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use pmtx_engine::internals::index::OrderedIndex;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// System allocator that keeps a running total of live heap bytes.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments and
// only adds bookkeeping on a separate atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Key number `i` of a shape: a big-endian 8-byte counter (so ascending `i`
/// is ascending key order); with `scatter`, the counter is replaced by a
/// pseudo-random 64-bit value (distinct for distinct `i`).  9-byte keys are
/// the counter and one constant byte.  Longer keys are laid out like
/// composite keys whose leading and trailing columns repeat (TPC-C's
/// `(warehouse, district, order, line)`): a 4-byte constant, the counter,
/// and constant padding, so keys of one table share their first bytes.
fn make_key(i: u64, len: usize, scatter: bool) -> Vec<u8> {
    let n = if scatter { i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ 0x5555 } else { i };
    let mut k = Vec::with_capacity(len);
    if len > 9 {
        k.extend_from_slice(&[0, 0, 0, 7]);
    }
    k.extend_from_slice(&n.to_be_bytes());
    k.resize(len, 0x42);
    k
}

struct Round {
    bytes_per_key: f64,
    insert_ns: f64,
    get_ns: f64,
}

fn round(n: usize, len: usize, random_order: bool) -> Round {
    let mut ids: Vec<u64> = (0..n as u64).collect();
    if random_order {
        ids.shuffle(&mut ChaCha8Rng::seed_from_u64(1));
    }
    let keys: Vec<Vec<u8>> = ids.iter().map(|&i| make_key(i, len, random_order)).collect();
    let mut probes: Vec<usize> = (0..n).collect();
    probes.shuffle(&mut ChaCha8Rng::seed_from_u64(2));

    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let index = OrderedIndex::new(len);
    let t = Instant::now();
    for (v, k) in keys.iter().enumerate() {
        index.insert(k, v as u64).unwrap();
    }
    let insert_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let bytes = LIVE_BYTES.load(Ordering::Relaxed) - before;

    let t = Instant::now();
    let mut sum = 0u64;
    for &p in &probes {
        sum = sum.wrapping_add(index.get(&keys[p]).unwrap());
    }
    let get_ns = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(sum, (0..n as u64).fold(0u64, |a, b| a.wrapping_add(b)));
    drop(index);
    Round { bytes_per_key: bytes as f64 / n as f64, insert_ns, get_ns }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; numbers are positional.
    let nums: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = nums.first().copied().unwrap_or(1_000_000);
    let rounds = nums.get(1).copied().unwrap_or(5).max(1);
    // Warm the allocator and the CPU frequency once.
    let _ = round(n.min(100_000), 9, true);
    let _ = rand::thread_rng().gen::<u8>();
    println!(
        "{:<14} {:>10} {:>10} {:>10}   (N = {n}, median of {rounds})",
        "shape", "bytes/key", "insert ns", "get ns"
    );
    // Other arguments select the shapes whose name contains all of them
    // (`9B`, `random`, ...).
    let filter: Vec<String> =
        std::env::args().skip(1).filter(|a| a.parse::<usize>().is_err() && !a.starts_with('-')).collect();
    for (len, random_order) in [(9, false), (9, true), (24, false), (24, true)] {
        let name = format!("{len}B {}", if random_order { "random" } else { "seq" });
        if !filter.iter().all(|f| name.contains(f.as_str())) {
            continue;
        }
        let rs: Vec<Round> = (0..rounds).map(|_| round(n, len, random_order)).collect();
        println!(
            "{name:<14} {:>10.1} {:>10.1} {:>10.1}",
            median(rs.iter().map(|r| r.bytes_per_key).collect()),
            median(rs.iter().map(|r| r.insert_ns).collect()),
            median(rs.iter().map(|r| r.get_ns).collect()),
        );
    }
}
