//! A mutation fuzzer for the persistent-structure parsers
//! (`pmtx_engine::internals::fuzz`), on stable Rust: each target starts from its
//! committed corpus (`tests/fuzz_corpus/<target>/`, real structures taken
//! from pools by `write_fuzz_corpus`) and runs its parser on mutations of
//! the inputs in its pool — bit flips, random bytes, interesting words at
//! 8-byte positions (0, all ones, lengths, the input's own length),
//! truncations, extensions, CRC-preserving splices of another input. An
//! input whose outcome (the parser's result, reduced to its kind and
//! counts) was not seen before joins the pool, so mutations build on inputs
//! that reached new outcomes (outcome-guided, not coverage-guided: stable
//! Rust has no coverage instrumentation to read). A panic fails the run and
//! saves the input under `target/fuzz-crashes/`.

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Keys and values of the heap corpus's table (the slot geometry).
pub const HEAP_MAX_KEY: usize = 16;
/// See [`HEAP_MAX_KEY`].
pub const HEAP_MAX_VALUE: usize = 48;

/// A parser under test: runs it on `bytes` and returns its outcome
/// signature.
pub struct Target {
    /// Name (the corpus directory).
    pub name: &'static str,
    /// Runs the parser.
    pub run: fn(&[u8]) -> String,
    /// Recomputes the checksums a mutation broke (half the mutations), so
    /// the parser behind them sees garbage: the pool header's, log segment
    /// headers' and records', checkpoint headers' and rows', Zen tuples',
    /// wbl records'.
    pub fix_checksums: fn(&mut [u8]),
}

fn store_crc(bytes: &mut [u8], covered: std::ops::Range<usize>, at: usize) {
    if at + 4 <= bytes.len() && covered.end <= bytes.len() {
        let crc = crc32fast::hash(&bytes[covered]);
        bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fn fix_pool(bytes: &mut [u8]) {
    store_crc(bytes, 0..504, 504);
}

fn fix_checkpoint(bytes: &mut [u8]) {
    store_crc(bytes, 0..56, 56);
    let mut at = 64;
    while at + 32 <= bytes.len() {
        let total = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if total < 32 || at + total > bytes.len() {
            break;
        }
        store_crc(bytes, at + 8..at + total, at + 4);
        at += total;
    }
}

fn fix_wbl(bytes: &mut [u8]) {
    store_crc(bytes, 0..32, 32);
}

fn kind_of_error(text: &str) -> String {
    // The message without its numbers and names: one signature per kind of
    // refusal.
    let text: String = text.split('"').step_by(2).collect();
    text.split_whitespace()
        .filter(|word| !word.chars().any(|c| c.is_ascii_digit()))
        .take(10)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every target.
pub const TARGETS: [Target; 5] = [
    Target {
        name: "pool",
        run: |bytes| match pmtx_engine::internals::fuzz::parse_pool(bytes) {
            Ok(report) => format!("ok roots {} used {}", report.roots, report.chunks_used.min(4)),
            Err(error) => {
                // The variant and structure; for an inconsistency also its
                // kind (the detail without numbers, names or bytes).
                let debug = format!("{error:?}");
                let variant = debug.split([' ', '{', '(']).next().unwrap_or_default().to_string();
                let detail = match &error {
                    pmtx_pm::PoolError::Corrupt { detail, .. } => kind_of_error(detail),
                    _ => String::new(),
                };
                format!("{variant} {:?} {detail}", error.damaged_structure())
            }
        },
        fix_checksums: fix_pool,
    },
    Target {
        name: "log",
        run: |bytes| match pmtx_engine::internals::fuzz::parse_log_segment(bytes) {
            Ok((records, end)) => format!(
                "ok {} stop {} later {} durable {:?}",
                records.len().min(8),
                end.stopped_at.is_some(),
                end.later.len().min(2),
                end.durable_end.map(|end| end.is_some()).map_err(|_| "damaged")
            ),
            Err(error) => kind_of_error(&error),
        },
        fix_checksums: pmtx_engine::internals::fuzz::reseal_log_segment,
    },
    Target {
        name: "checkpoint",
        run: |bytes| match pmtx_engine::internals::fuzz::parse_checkpoint_chunk(bytes) {
            Ok(rows) => format!("ok {}", rows.min(8)),
            Err(error) => kind_of_error(&error),
        },
        fix_checksums: fix_checkpoint,
    },
    Target {
        name: "heap",
        run: |bytes| match pmtx_engine::internals::fuzz::parse_heap_slot(bytes, HEAP_MAX_KEY, HEAP_MAX_VALUE) {
            Ok(Some((_, lp, deleted, key, value))) => format!("tuple {lp} {deleted} {} {}", key.min(4), value.min(4)),
            Ok(None) => "empty".into(),
            Err(error) => kind_of_error(&error),
        },
        fix_checksums: pmtx_engine::internals::fuzz::reseal_heap_slot,
    },
    Target {
        name: "wbl",
        run: |bytes| match pmtx_engine::internals::fuzz::parse_wbl_record(bytes) {
            Some((_, persisted, dirty)) => format!("record {}", persisted == dirty),
            None => "none".into(),
        },
        fix_checksums: fix_wbl,
    },
];

/// The committed corpus directory.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fuzz_corpus")
}

/// The committed corpus of `target`.
pub fn corpus(target: &Target) -> Vec<Vec<u8>> {
    let dir = corpus_dir().join(target.name);
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    names.sort();
    names.into_iter().map(|path| std::fs::read(&path).expect("a corpus file")).collect()
}

/// SplitMix64.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    /// The next word.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number below `bound` (> 0).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

/// One mutation of `input` (`others`: the pool, for splices).
pub fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        if bytes.is_empty() {
            bytes.push(rng.next() as u8);
            continue;
        }
        match rng.below(8) {
            0 | 1 => {
                let at = rng.below(bytes.len());
                bytes[at] ^= 1 << rng.below(8);
            }
            2 => {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next() as u8;
            }
            3 | 4 => {
                let words = [
                    0u64,
                    u64::MAX,
                    u32::MAX as u64,
                    1 << 63,
                    bytes.len() as u64,
                    rng.next() % 4096,
                    (rng.next() % 64) * 8,
                    rng.next(),
                ];
                let value = words[rng.below(words.len())];
                let at = rng.below(bytes.len().div_ceil(8)) * 8;
                let width = [4usize, 8][rng.below(2)];
                for (i, byte) in value.to_le_bytes().iter().take(width).enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
            }
            5 => {
                let len = rng.below(bytes.len() + 1);
                bytes.truncate(len);
            }
            6 => {
                let extra = rng.below(256);
                let fill = if rng.below(2) == 0 { 0 } else { rng.next() as u8 };
                bytes.extend(std::iter::repeat_n(fill, extra));
            }
            _ => {
                // Splice: a range of another input at the same place.
                let other = &others[rng.below(others.len())];
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let len = rng.below(other.len() - start + 1).min(512);
                    let at = start.min(bytes.len());
                    let end = (at + len).min(bytes.len());
                    bytes[at..end].copy_from_slice(&other[start..start + (end - at)]);
                }
            }
        }
    }
    bytes
}

/// What a run did.
#[derive(Debug, Default)]
pub struct RunReport {
    /// Parser executions.
    pub executions: u64,
    /// Distinct outcome signatures reached.
    pub outcomes: usize,
    /// Inputs in the pool at the end (corpus plus new-outcome inputs).
    pub pool: usize,
}

/// Runs `target` over its corpus and `iterations` mutations from `seed`.
/// Panics (after saving the input) if the parser panics.
pub fn run(target: &Target, iterations: u64, seed: u64) -> RunReport {
    let mut pool = corpus(target);
    assert!(!pool.is_empty(), "{}: empty corpus", target.name);
    let mut seen = HashSet::new();
    let mut report = RunReport::default();
    let execute = |bytes: &[u8], report: &mut RunReport| -> String {
        report.executions += 1;
        match std::panic::catch_unwind(|| (target.run)(bytes)) {
            Ok(outcome) => outcome,
            Err(_) => {
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-crashes");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{}-{}.bin", target.name, report.executions));
                let _ = std::fs::write(&path, bytes);
                panic!("{}: the parser panicked on an input saved as {}", target.name, path.display());
            }
        }
    };
    for input in pool.clone() {
        let outcome = execute(&input, &mut report);
        seen.insert(outcome);
    }
    let mut rng = Rng::new(seed);
    for _ in 0..iterations {
        let parent = rng.below(pool.len());
        let mut child = mutate(&mut rng, &pool[parent], &pool);
        if rng.below(2) == 0 {
            (target.fix_checksums)(&mut child);
        }
        let outcome = execute(&child, &mut report);
        if seen.insert(outcome) && pool.len() < 4096 {
            pool.push(child);
        }
    }
    report.outcomes = seen.len();
    report.pool = pool.len();
    report
}
