//! Crash states and the crash images derived from them.
//!
//! A [`CrashState`] is what the simulator knew at one crash point: the
//! persisted image (shared copy-on-write pages) and, for every dirty line,
//! the ordered stores not yet durable. A crash image picks, for each dirty
//! line, a prefix of its pending stores (stores to one line reach the medium
//! in order; lines are independent). The choice is a *prefix vector* with one
//! entry per dirty line, in [`CrashState::dirty_lines`] order.

use super::pages::Pages;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

/// One store not yet durable: at most 8 bytes inside one aligned word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingStore {
    /// Global store sequence number (program order across all threads).
    pub seq: u64,
    /// Byte offset in the pool.
    pub offset: u64,
    /// Number of bytes (1..=8); `offset..offset+len` stays in one aligned word.
    pub len: u8,
    /// The stored bytes (`bytes[..len]`).
    pub bytes: [u8; 8],
    /// Simulator id of the storing thread.
    pub thread: u64,
    /// Whether it was a non-temporal store.
    pub non_temporal: bool,
}

impl PendingStore {
    /// The stored bytes.
    pub fn data(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// A 64 B line with stores that are not yet durable.
#[derive(Clone, Debug)]
pub struct DirtyLine {
    /// Byte offset of the line in the pool.
    pub offset: u64,
    /// Pending stores, oldest first.
    pub stores: Vec<PendingStore>,
    /// How many of `stores` (a prefix) some flush has covered.
    pub flushed: usize,
}

/// What the medium may hold if the machine crashed at one crash point.
#[derive(Clone)]
pub struct CrashState {
    /// Global event number of the crash point.
    pub event: u64,
    /// `"fence"`, the `crash_point` label, or the `capture_now` label.
    pub label: &'static str,
    pub(crate) persisted: Pages,
    pub(crate) lines: Vec<DirtyLine>,
}

impl std::fmt::Debug for CrashState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashState")
            .field("event", &self.event)
            .field("label", &self.label)
            .field("len", &self.persisted.len())
            .field("dirty_lines", &self.lines.len())
            .field("pending_stores", &self.pending_stores())
            .finish()
    }
}

/// How many images to derive from one crash state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageBudget {
    /// Random subsets of dirty lines that get a random prefix.
    pub random_subsets: usize,
    /// Random prefix vectors per subset.
    pub random_prefixes: usize,
    /// Enumerate every prefix vector when there are at most this many.
    pub exhaustive_limit: u64,
    /// "All but line L" images: for the first this-many dirty lines, plus
    /// this-many more chosen at random from the rest.
    pub all_but_lines: usize,
}

impl Default for ImageBudget {
    fn default() -> Self {
        Self { random_subsets: 20, random_prefixes: 20, exhaustive_limit: 4096, all_but_lines: 64 }
    }
}

/// One possible content of the pool after a crash.
#[derive(Clone)]
pub struct CrashImage {
    /// The pool bytes (load with `Mapping::from_bytes`).
    pub bytes: Vec<u8>,
    /// Stores applied per dirty line, in `CrashState::dirty_lines` order;
    /// `CrashState::image_with_prefixes` rebuilds exactly these bytes.
    pub prefixes: Vec<usize>,
    /// Event, label, seed, image index, how the choice was made and the
    /// prefix of each dirty line.
    pub description: String,
}

impl std::fmt::Debug for CrashImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

impl CrashState {
    /// Pool length in bytes.
    pub fn len(&self) -> u64 {
        self.persisted.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.persisted.len() == 0
    }

    /// Lines with pending stores, in address order.
    pub fn dirty_lines(&self) -> &[DirtyLine] {
        &self.lines
    }

    /// Total number of pending stores.
    pub fn pending_stores(&self) -> usize {
        self.lines.iter().map(|line| line.stores.len()).sum()
    }

    /// Number of distinct prefix vectors (product of `stores + 1`), `None`
    /// on overflow.
    pub fn combinations(&self) -> Option<u64> {
        self.lines.iter().try_fold(1u64, |product, line| product.checked_mul(line.stores.len() as u64 + 1))
    }

    /// The durable bytes only (nothing pending applied).
    pub fn persisted_image(&self) -> Vec<u8> {
        self.persisted.to_vec()
    }

    /// The image with `prefixes[i]` stores of dirty line `i` applied.
    pub fn image_with_prefixes(&self, prefixes: &[usize]) -> Vec<u8> {
        let mut bytes = self.persisted.to_vec();
        self.apply(&mut bytes, prefixes);
        bytes
    }

    fn apply(&self, bytes: &mut [u8], prefixes: &[usize]) {
        assert_eq!(prefixes.len(), self.lines.len(), "one prefix per dirty line");
        for (line, &prefix) in self.lines.iter().zip(prefixes) {
            for store in &line.stores[..prefix] {
                let start = store.offset as usize;
                bytes[start..start + store.len as usize].copy_from_slice(store.data());
            }
        }
    }

    /// Crash images of this state, deterministic in `seed`: first nothing
    /// extra, everything, flushed-but-not-fenced and "all but line L"; then
    /// every prefix vector if there are at most `budget.exhaustive_limit`,
    /// else `random_subsets x random_prefixes` seeded random choices.
    /// Duplicate prefix vectors are skipped.
    pub fn images(&self, seed: u64, budget: ImageBudget) -> CrashImages<'_> {
        let mixed = seed ^ self.event.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        CrashImages {
            state: self,
            seed,
            budget,
            rng: ChaCha8Rng::seed_from_u64(mixed),
            base: None,
            seen: HashSet::new(),
            stage: Stage::Fixed(0),
            produced: 0,
        }
    }
}

enum Stage {
    Fixed(u8),
    AllBut { lines: Vec<usize>, next: usize },
    Exhaustive { counter: Vec<usize>, done: bool },
    Random { subset_index: usize, prefix_index: usize, subset: Vec<usize>, rest: Vec<usize> },
    Done,
}

/// Iterator over the crash images of one [`CrashState`].
pub struct CrashImages<'a> {
    state: &'a CrashState,
    seed: u64,
    budget: ImageBudget,
    rng: ChaCha8Rng,
    base: Option<Vec<u8>>,
    seen: HashSet<u64>,
    stage: Stage,
    produced: usize,
}

impl CrashImages<'_> {
    fn full(&self) -> Vec<usize> {
        self.state.lines.iter().map(|line| line.stores.len()).collect()
    }

    fn all_but_lines(&mut self) -> Vec<usize> {
        let count = self.state.lines.len();
        let first = self.budget.all_but_lines.min(count);
        let mut lines: Vec<usize> = (0..first).collect();
        let rest = count - first;
        let extra = self.budget.all_but_lines.min(rest);
        if extra > 0 {
            let mut picked: Vec<usize> = sample(&mut self.rng, rest, extra).into_iter().map(|i| first + i).collect();
            picked.sort_unstable();
            lines.extend(picked);
        }
        lines
    }

    fn start_random(&mut self, subset_index: usize) -> Stage {
        let count = self.state.lines.len();
        if count == 0 || subset_index >= self.budget.random_subsets || self.budget.random_prefixes == 0 {
            return Stage::Done;
        }
        let size = self.rng.gen_range(1..=count);
        let mut subset = sample(&mut self.rng, count, size).into_vec();
        subset.sort_unstable();
        // Lines outside the subset: nothing new, everything, or what was flushed.
        let rest = match self.rng.gen_range(0..3) {
            0 => vec![0; count],
            1 => self.full(),
            _ => self.state.lines.iter().map(|line| line.flushed).collect(),
        };
        Stage::Random { subset_index, prefix_index: 0, subset, rest }
    }

    /// The next candidate prefix vector and how it was chosen.
    fn candidate(&mut self) -> Option<(Vec<usize>, String)> {
        loop {
            let stage = std::mem::replace(&mut self.stage, Stage::Done);
            match stage {
                Stage::Fixed(which) => {
                    let choice = match which {
                        0 => (vec![0; self.state.lines.len()], "nothing pending".to_string()),
                        1 => (self.full(), "everything pending".to_string()),
                        _ => (
                            self.state.lines.iter().map(|line| line.flushed).collect(),
                            "flushed but not fenced".to_string(),
                        ),
                    };
                    self.stage = if which < 2 {
                        Stage::Fixed(which + 1)
                    } else {
                        Stage::AllBut { lines: self.all_but_lines(), next: 0 }
                    };
                    return Some(choice);
                }
                Stage::AllBut { lines, next } => {
                    if let Some(&line) = lines.get(next) {
                        let mut prefixes = self.full();
                        prefixes[line] = 0;
                        let kind = format!("all but line {:#x}", self.state.lines[line].offset);
                        self.stage = Stage::AllBut { lines, next: next + 1 };
                        return Some((prefixes, kind));
                    }
                    let exhaustive = self.state.combinations().is_some_and(|c| c <= self.budget.exhaustive_limit);
                    self.stage = if exhaustive {
                        Stage::Exhaustive { counter: vec![0; self.state.lines.len()], done: false }
                    } else {
                        self.start_random(0)
                    };
                }
                Stage::Exhaustive { mut counter, done } => {
                    if done {
                        return None;
                    }
                    let current = counter.clone();
                    // Mixed-radix increment; wraps to all zeros when finished.
                    let mut finished = true;
                    for (digit, line) in counter.iter_mut().zip(&self.state.lines) {
                        if *digit < line.stores.len() {
                            *digit += 1;
                            finished = false;
                            break;
                        }
                        *digit = 0;
                    }
                    self.stage = Stage::Exhaustive { counter, done: finished };
                    return Some((current, "exhaustive".to_string()));
                }
                Stage::Random { subset_index, prefix_index, subset, rest } => {
                    if prefix_index >= self.budget.random_prefixes {
                        self.stage = self.start_random(subset_index + 1);
                        continue;
                    }
                    let mut prefixes = rest.clone();
                    for &line in &subset {
                        prefixes[line] = self.rng.gen_range(0..=self.state.lines[line].stores.len());
                    }
                    let kind = format!(
                        "random subset {subset_index} ({} of {} lines) prefix {prefix_index}",
                        subset.len(),
                        self.state.lines.len()
                    );
                    self.stage = Stage::Random { subset_index, prefix_index: prefix_index + 1, subset, rest };
                    return Some((prefixes, kind));
                }
                Stage::Done => return None,
            }
        }
    }

    fn describe(&self, kind: &str, prefixes: &[usize]) -> String {
        const SHOWN: usize = 32;
        let mut text = format!(
            "crash image #{} of event {} ({}), seed {:#x}: {kind}; prefixes",
            self.produced, self.state.event, self.state.label, self.seed
        );
        if prefixes.is_empty() {
            text.push_str(" (no dirty lines)");
        }
        for (line, &prefix) in self.state.lines.iter().zip(prefixes).take(SHOWN) {
            let _ = write!(text, " {:#x}:{}/{}", line.offset, prefix, line.stores.len());
            if line.flushed > 0 {
                let _ = write!(text, "(f{})", line.flushed);
            }
        }
        if prefixes.len() > SHOWN {
            let _ = write!(text, " ... ({} more lines)", prefixes.len() - SHOWN);
        }
        text
    }
}

fn hash_prefixes(prefixes: &[usize]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    prefixes.hash(&mut hasher);
    hasher.finish()
}

impl Iterator for CrashImages<'_> {
    type Item = CrashImage;

    fn next(&mut self) -> Option<CrashImage> {
        loop {
            let (prefixes, kind) = self.candidate()?;
            if !self.seen.insert(hash_prefixes(&prefixes)) {
                continue;
            }
            let base = self.base.get_or_insert_with(|| self.state.persisted.to_vec());
            let mut bytes = base.clone();
            self.state.apply(&mut bytes, &prefixes);
            let description = self.describe(&kind, &prefixes);
            self.produced += 1;
            return Some(CrashImage { bytes, prefixes, description });
        }
    }
}
