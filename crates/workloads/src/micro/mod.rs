//! The micro workloads of SP³ (Wang, Lu, Wu, Yang and Shu, "Improving the
//! Concurrency Performance of Persistent Memory Transactions on
//! Multicores", §IV: "entry size 128 bytes, zipfian 0.99, 50% inserts" and
//! Table I): five data structures built from rows, one operation per
//! transaction.
//!
//! | `--workload` | type                    | Table I                                 | transaction types    |
//! |--------------|-------------------------|-----------------------------------------|----------------------|
//! | `sps`        | [`sps::Sps`]            | random swaps of array entries           | `swap`               |
//! | `sp3-queue`  | [`queue::Sp3Queue`]     | insert/delete entries in a queue        | `enqueue`, `dequeue` |
//! | `hash`       | [`hash::HashTable`]     | insert/search entries in a hash table   | `insert`, `search`   |
//! | `rbtree`     | [`rbtree::RbTree`]      | insert/search nodes in a red-black tree | `insert`, `search`   |
//! | `btree`      | [`btree::BTree`]        | insert/search nodes in a B+ tree        | `insert`, `search`   |
//!
//! This module is the specification a baseline outside pmtx (the PMDK
//! `libpmemobj` one) follows to run the very same operations; each
//! workload's module documents its tables, its transactions and its check.
//!
//! # Common options ([`WorkloadOptions`])
//!
//! * `micro_entries` (default 100 000, at least 2): entries loaded (array
//!   entries, hash/B+tree rows, tree nodes; the queue loads
//!   `min(micro_entries, 10 000)` items).
//! * `entry_size` (default 128, the paper's, at least 16): bytes of each
//!   entry's value (the red-black tree adds a 40-byte node header).
//! * `insert_percent` (default 50, the paper's, 0..=100): the percentage of
//!   inserts (enqueues for the queue; the rest are searches, dequeues).
//!   `sps` ignores it.
//! * `theta` (default 0.99, the paper's; 0 = uniform): the zipfian constant
//!   of the keys, drawn with YCSB's *scrambled* zipfian
//!   ([`Zipfian::next_scrambled`]: the FNV hash of the zipfian rank modulo
//!   the key count), so the hot keys are spread over the key space instead
//!   of being the smallest keys.
//!
//! One operation per transaction. Each client has its own random generator
//! seeded with [`child_seed`]`(seed, worker_index)`; per transaction it
//! first draws the operation (`gen_range(0..100) < insert_percent` is an
//! insert or an enqueue), then the key(s).
//!
//! # Entries
//!
//! Keys are `u64` big-endian (8 bytes, so an ordered index keeps numeric
//! order). Values are sequences of little-endian `u64` words (the last one
//! cut short when `entry_size` is not a multiple of 8): word 0 is the
//! entry's id (array index, queue sequence, key), the hash, B+tree and
//! red-black-tree payloads have a version in word 1, and every later word
//! `i` is the *filler* [`filler_word`]`(id, i)`, a function of the id only.
//! A check recomputes the filler, so a value torn between two entries, or
//! one written under the wrong key, is detected. The loaded data is a
//! function of the options alone (`load_seed` is not used).
//!
//! # Crashes
//!
//! Every invariant a check tests is kept by each single transaction, so it
//! also holds on a database recovered from a crash, where the last
//! committed transactions may be lost (counts that depend on how many
//! commits survived are only bounded then).

pub mod btree;
pub mod hash;
mod kv;
pub mod queue;
pub mod rbtree;
pub mod sps;

use crate::gen::{child_seed, mix64, rng, WorkloadRng};
use crate::zipf::Zipfian;
use crate::{WorkloadError, WorkloadOptions};
use pmtx_engine::{AbortReason, TxError};
use rand::Rng;

/// Smallest `entry_size`: an id word and at least one more word.
pub const MIN_ENTRY_SIZE: usize = 16;
/// Largest `entry_size`.
pub const MAX_ENTRY_SIZE: usize = 1 << 20;
/// Largest `micro_entries` (key spaces of `2 * micro_entries` and the
/// red-black tree's node ids stay far below 2^40).
pub const MAX_ENTRIES: u64 = 1 << 36;
/// Default `micro_entries`.
pub const DEFAULT_ENTRIES: u64 = 100_000;
/// Default `entry_size` (the paper's).
pub const DEFAULT_ENTRY_SIZE: usize = 128;
/// Default `insert_percent` (the paper's).
pub const DEFAULT_INSERT_PERCENT: u32 = 50;
/// Names of the micro workloads, as [`crate::by_name`] takes them.
pub const NAMES: [&str; 5] = ["sps", "sp3-queue", "hash", "rbtree", "btree"];

/// The key of entry `id`: `u64` big-endian.
pub fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The id of an 8-byte key, or `None` for a key of another length.
pub fn parse_key(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

/// Word `index` of the filler of an entry with id `id`:
/// `mix64(id * 0x9E3779B97F4A7C15 ^ index)` (wrapping multiplication;
/// [`mix64`] is the SplitMix64 finalizer).
pub fn filler_word(id: u64, index: u64) -> u64 {
    mix64(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index)
}

/// Word `index` of `value` (zero-extended if the value ends inside it).
pub fn word(value: &[u8], index: usize) -> u64 {
    let start = (index * 8).min(value.len());
    let end = (start + 8).min(value.len());
    let mut bytes = [0u8; 8];
    bytes[..end - start].copy_from_slice(&value[start..end]);
    u64::from_le_bytes(bytes)
}

/// Writes `word` as word `index` of `value` (cut at the end of the value).
pub fn set_word(value: &mut [u8], index: usize, word: u64) {
    let start = (index * 8).min(value.len());
    let end = (start + 8).min(value.len());
    value[start..end].copy_from_slice(&word.to_le_bytes()[..end - start]);
}

/// Fills `value` as the entry `id`: word 0 the id, word 1 `version` if
/// given, the filler after that.
pub fn fill_entry(value: &mut [u8], id: u64, version: Option<u64>) {
    set_word(value, 0, id);
    let first_filler = match version {
        Some(version) => {
            set_word(value, 1, version);
            2
        }
        None => 1,
    };
    for index in first_filler..value.len().div_ceil(8) {
        set_word(value, index, filler_word(id, index as u64));
    }
}

/// Whether `value` is an entry of `id` as [`fill_entry`] writes it (with a
/// version word when `versioned`; any version).
pub fn entry_matches(value: &[u8], id: u64, versioned: bool) -> bool {
    let first_filler = if versioned { 2 } else { 1 };
    value.len() >= 8
        && word(value, 0) == id
        && (first_filler..value.len().div_ceil(8)).all(|index| {
            let start = index * 8;
            let end = (start + 8).min(value.len());
            value[start..end] == filler_word(id, index as u64).to_le_bytes()[..end - start]
        })
}

/// The options every micro workload reads, validated.
#[derive(Clone, Debug)]
pub(crate) struct Common {
    pub(crate) entries: u64,
    pub(crate) entry_size: usize,
    pub(crate) insert_percent: u32,
    pub(crate) theta: f64,
}

impl Common {
    /// Validates the common options for workload `name`.
    pub(crate) fn new(name: &str, options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        let invalid = |message: String| Err(WorkloadError::InvalidOption(format!("{name}: {message}")));
        if !(2..=MAX_ENTRIES).contains(&options.micro_entries) {
            return invalid(format!("micro_entries must be from 2 to {MAX_ENTRIES}, got {}", options.micro_entries));
        }
        if !(MIN_ENTRY_SIZE..=MAX_ENTRY_SIZE).contains(&options.entry_size) {
            return invalid(format!(
                "entry_size must be from {MIN_ENTRY_SIZE} to {MAX_ENTRY_SIZE} bytes, got {}",
                options.entry_size
            ));
        }
        if options.insert_percent > 100 {
            return invalid(format!("insert_percent must be from 0 to 100, got {}", options.insert_percent));
        }
        if !(options.theta >= 0.0 && options.theta.is_finite() && options.theta != 1.0) {
            return invalid(format!("theta must be >= 0 and != 1 (0 = uniform), got {}", options.theta));
        }
        Ok(Self {
            entries: options.micro_entries,
            entry_size: options.entry_size,
            insert_percent: options.insert_percent,
            theta: options.theta,
        })
    }

    /// Load transactions of about [`crate::common::LOAD_BATCH_BYTES`]
    /// for rows of `row_len` bytes.
    pub(crate) fn rows_per_load_task(row_len: usize) -> u64 {
        (crate::common::LOAD_BATCH_BYTES / row_len.max(1)).clamp(1, 256) as u64
    }
}

/// A client's random choices: the operation and the keys.
#[derive(Clone, Debug)]
pub struct KeyGenerator {
    rng: WorkloadRng,
    zipf: Zipfian,
    insert_percent: u32,
}

impl KeyGenerator {
    /// The generator of worker `worker_index` of a run with `seed`, over
    /// keys `0..zipf.items()`.
    pub fn new(zipf: &Zipfian, insert_percent: u32, seed: u64, worker_index: usize) -> Self {
        Self { rng: rng(child_seed(seed, worker_index as u64)), zipf: zipf.clone(), insert_percent }
    }

    /// Whether the next operation inserts (enqueues): with probability
    /// `insert_percent` / 100.
    pub fn is_insert(&mut self) -> bool {
        self.rng.gen_range(0..100u32) < self.insert_percent
    }

    /// A key of the key space, scrambled zipfian (uniform for theta 0).
    pub fn key(&mut self) -> u64 {
        self.zipf.next_scrambled(&mut self.rng)
    }

    /// Two distinct keys (the second drawn again until it differs).
    ///
    /// # Panics
    /// If the key space has fewer than two keys.
    pub fn two_keys(&mut self) -> (u64, u64) {
        assert!(self.zipf.items() >= 2, "two distinct keys need a key space of at least two");
        let first = self.key();
        for _ in 0..64 {
            let second = self.key();
            if second != first {
                return (first, second);
            }
        }
        // A key space whose hot key takes nearly every draw: fall back to
        // a uniform second key.
        let second = self.rng.gen_range(0..self.zipf.items() - 1);
        (first, if second >= first { second + 1 } else { second })
    }

    /// The generator itself, for other draws.
    pub fn rng(&mut self) -> &mut WorkloadRng {
        &mut self.rng
    }
}

/// A set of `0..len` as a bit vector (checks of large tables).
#[derive(Clone, Debug)]
pub(crate) struct Bits {
    words: Vec<u64>,
    len: u64,
}

impl Bits {
    /// The empty set of `0..len`.
    pub(crate) fn new(len: u64) -> Self {
        Self { words: vec![0; len.div_ceil(64) as usize], len }
    }

    /// Adds `index` (< len); whether it was there already.
    pub(crate) fn insert(&mut self, index: u64) -> bool {
        debug_assert!(index < self.len);
        let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
        let was = self.words[word] & bit != 0;
        self.words[word] |= bit;
        was
    }

    /// How many of `0..len` are not in the set.
    pub(crate) fn missing(&self) -> u64 {
        self.len - self.words.iter().map(|word| u64::from(word.count_ones())).sum::<u64>()
    }
}

/// The error of a transaction body that found the structure in a state no
/// committed database has (a tree node pointing at a node that is not
/// there, a queue head without its item): a read-validation abort, so the
/// transaction is retried. An optimistic protocol may let a transaction
/// read rows of different commits before its validation fails; a
/// serializable engine then aborts it anyway. On a damaged database (or an
/// engine without concurrency control, `nvm-ideal`, whose lost updates
/// break the structures) the retries end in `DbError::TooManyAborts`, which
/// the benchmark driver counts as given up, and the check reports the
/// damage; the run goes on.
pub(crate) fn inconsistent() -> TxError {
    TxError::Abort(AbortReason::ReadValidation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_detect_changes() {
        for size in [16, 17, 23, 128, 131] {
            let mut value = vec![0u8; size];
            fill_entry(&mut value, 42, None);
            assert!(entry_matches(&value, 42, false), "{size}");
            assert!(!entry_matches(&value, 43, false), "{size}");
            let mut torn = value.clone();
            *torn.last_mut().unwrap() ^= 1;
            assert!(!entry_matches(&torn, 42, false), "{size}");
            fill_entry(&mut value, 7, Some(99));
            assert_eq!((word(&value, 0), word(&value, 1)), (7, 99));
            assert!(entry_matches(&value, 7, true), "{size}");
        }
        assert_eq!(parse_key(&key(0x0102)), Some(0x0102));
        assert!(key(255) < key(256));
    }

    #[test]
    fn two_keys_differ() {
        let zipf = Zipfian::new(2, 0.99);
        let mut generator = KeyGenerator::new(&zipf, 50, 1, 0);
        for _ in 0..1000 {
            let (a, b) = generator.two_keys();
            assert!(a != b && a < 2 && b < 2);
        }
    }
}
