//! The driver shared by the five workloads: pool creation, the root object,
//! values, worker threads, counters, and the check of the reopened pool.

mod btree;
mod hash;
mod queue;
mod rbtree;
mod sps;

use crate::pool::{CreatedFile, Pool};
use crate::{CheckReport, MicroConfig, MicroResult, MicroWorkload, PmdkError, Progress, RunLength};
use pmtx_workloads::gen::{child_seed, mix64, rng, WorkloadRng};
use pmtx_workloads::zipf::Zipfian;
use rand::Rng;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// The root object's words (offsets from the root object's start). The
/// first four are common; each workload uses `WORDS + 8 * i` for its own.
pub(crate) mod root {
    /// `MAGIC_VALUE` once the pool is set up.
    pub(crate) const MAGIC: u64 = 0;
    /// The workload's index in `MicroWorkload::ALL`.
    pub(crate) const WORKLOAD: u64 = 8;
    /// `MicroConfig::entries` of the run that created the pool.
    pub(crate) const ENTRIES: u64 = 16;
    /// `MicroConfig::entry_size`.
    pub(crate) const ENTRY_SIZE: u64 = 24;
    /// The first workload-specific word (12 words up to `ROOT_SIZE`).
    pub(crate) const WORDS: u64 = 32;
    /// "PMTXMICR".
    pub(crate) const MAGIC_VALUE: u64 = u64::from_le_bytes(*b"PMTXMICR");
}

/// libpmemobj type numbers of the objects allocated (for pool inspection).
pub(crate) mod type_num {
    pub(crate) const SPS_ARRAY: u64 = 1;
    pub(crate) const QUEUE_NODE: u64 = 2;
    pub(crate) const HASH_BUCKETS: u64 = 3;
    pub(crate) const HASH_NODE: u64 = 4;
    pub(crate) const RB_NODE: u64 = 5;
    pub(crate) const BTREE_NODE: u64 = 6;
}

/// Inserts per transaction while loading the maps and the queue.
pub(crate) const LOAD_BATCH: u64 = 256;

/// Sizes derived from the configuration (or read back from a pool's root).
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    /// Entries loaded.
    pub(crate) entries: u64,
    /// Value bytes.
    pub(crate) entry_size: usize,
    /// Words holding a value (`entry_size` rounded up to 8 bytes; the bytes
    /// past `entry_size` are zero).
    pub(crate) words: usize,
    /// `8 * words`.
    pub(crate) stride: u64,
    /// Keys of the maps: `[0, 2 * entries)`.
    pub(crate) key_space: u64,
}

impl Shape {
    fn new(entries: u64, entry_size: usize) -> Self {
        let words = entry_size.div_ceil(8);
        Self { entries, entry_size, words, stride: 8 * words as u64, key_space: 2 * entries }
    }
}

/// Word `index` of the value of `entry_size` bytes for `(key, version)`: the
/// key, the version, then a filler that is a function of both and of the
/// position; bytes past `entry_size` are zero.
pub(crate) fn value_word(key: u64, version: u64, index: usize, entry_size: usize) -> u64 {
    let word = match index {
        0 => key,
        1 => version,
        _ => mix64(key.rotate_left(23) ^ mix64(version ^ ((index as u64) << 40))),
    };
    let remaining = entry_size - 8 * index;
    if remaining >= 8 {
        word
    } else {
        word & ((1u64 << (8 * remaining)) - 1)
    }
}

/// Fills `out` (`Shape::words` words) with the value of `(key, version)`.
pub(crate) fn fill_value(key: u64, version: u64, entry_size: usize, out: &mut [u64]) {
    for (index, word) in out.iter_mut().enumerate() {
        *word = value_word(key, version, index, entry_size);
    }
}

/// Checks that `words` is a well-formed value and returns its
/// `(key, version)`.
pub(crate) fn verify_value(words: &[u64], entry_size: usize) -> Result<(u64, u64), String> {
    let (key, version) = (words[0], words[1]);
    for (index, &word) in words.iter().enumerate().skip(2) {
        let expected = value_word(key, version, index, entry_size);
        if word != expected {
            return Err(format!(
                "value of key {key} version {version:#x}: word {index} is {word:#018x}, expected {expected:#018x}"
            ));
        }
    }
    Ok((key, version))
}

/// What one transaction did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    /// Index into `MicroWorkload::type_names`.
    pub(crate) kind: usize,
    /// Index into `MicroWorkload::outcome_names`, if one applies.
    pub(crate) outcome: Option<usize>,
}

/// Type indices of the maps (`insert`, `search`) and their outcomes.
pub(crate) mod map {
    pub(crate) const INSERT: usize = 0;
    pub(crate) const SEARCH: usize = 1;
    pub(crate) const INSERT_NEW: usize = 0;
    pub(crate) const INSERT_OVERWRITE: usize = 1;
    pub(crate) const SEARCH_HIT: usize = 2;
    pub(crate) const SEARCH_MISS: usize = 3;

    /// The outcome of an insert that added a key (`new`) or overwrote one.
    pub(crate) fn inserted(new: bool) -> super::Outcome {
        super::Outcome { kind: INSERT, outcome: Some(if new { INSERT_NEW } else { INSERT_OVERWRITE }) }
    }

    /// The outcome of a search that found its key or not.
    pub(crate) fn searched(found: bool) -> super::Outcome {
        super::Outcome { kind: SEARCH, outcome: Some(if found { SEARCH_HIT } else { SEARCH_MISS }) }
    }
}

/// A worker thread's state.
pub(crate) struct Worker<'a> {
    pub(crate) rng: WorkloadRng,
    zipf: &'a Zipfian,
    insert_percent: u32,
    /// Scratch words for a value.
    pub(crate) value: Vec<u64>,
}

impl Worker<'_> {
    /// Whether the next transaction inserts (enqueues).
    pub(crate) fn inserts(&mut self) -> bool {
        self.rng.gen_range(0..100u32) < self.insert_percent
    }

    /// A key (index) drawn by zipf, scrambled over the key space.
    pub(crate) fn key(&mut self) -> u64 {
        self.zipf.next_scrambled(&mut self.rng)
    }

    /// Two distinct keys: the second drawn again until it differs, up to
    /// 64 times, then uniformly among the others (a key space whose hot key
    /// takes nearly every draw). The same draws as pmtx's `sps`
    /// (`pmtx_workloads::micro::KeyGenerator::two_keys`).
    pub(crate) fn two_keys(&mut self) -> (u64, u64) {
        let first = self.key();
        for _ in 0..64 {
            let second = self.key();
            if second != first {
                return (first, second);
            }
        }
        let second = self.rng.gen_range(0..self.zipf.items() - 1);
        (first, if second >= first { second + 1 } else { second })
    }

    /// The version of a value written by a run transaction.
    pub(crate) fn version(&mut self) -> u64 {
        self.rng.gen()
    }
}

/// One of the five structures: its DRAM side (locks and the pool offsets it
/// needs), its load, its transactions and its check.
pub(crate) trait Structure: Sync + Sized {
    /// Builds the structure in a freshly created pool whose root header is
    /// written (single-threaded), recording its offsets in the root object.
    fn load(pool: &Pool, shape: &Shape, seed: u64) -> Result<Self, PmdkError>;
    /// Items in the structure after the load (default: every entry).
    fn loaded_items(shape: &Shape) -> u64 {
        shape.entries
    }
    /// The number of ranks the key generator draws from (default: the
    /// maps' key space).
    fn key_space(shape: &Shape) -> u64 {
        shape.key_space
    }
    /// Runs one transaction.
    fn op(&self, pool: &Pool, worker: &mut Worker<'_>) -> Result<Outcome, PmdkError>;
    /// Checks the structure in a reopened pool; returns the item count and a
    /// summary.
    fn check(pool: &Pool, shape: &Shape) -> Result<(u64, String), PmdkError>;
}

/// Items expected after a run from all committed transactions (including
/// the warm-up).
fn expected_items(workload: MicroWorkload, loaded: u64, totals: &[u64; SLOTS]) -> u64 {
    let outcome = |i: usize| totals[TYPES + i];
    match workload {
        MicroWorkload::Sps => loaded,
        // enqueues - (dequeues - empty dequeues)
        MicroWorkload::Queue => loaded + totals[0] - (totals[1] - outcome(0)),
        MicroWorkload::Hash | MicroWorkload::RbTree | MicroWorkload::BTree => loaded + outcome(map::INSERT_NEW),
    }
}

/// Counter slots per thread: transaction types, then outcomes.
const TYPES: usize = 4;
const SLOTS: usize = 8;

/// A thread's counters, each written only by its thread; on its own cache
/// lines.
#[repr(align(128))]
#[derive(Default)]
struct Counters {
    slots: [AtomicU64; SLOTS],
}

impl Counters {
    fn bump(&self, slot: usize) {
        // Single writer: a load and a store, no locked instruction.
        let counter = &self.slots[slot];
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> [u64; SLOTS] {
        std::array::from_fn(|slot| self.slots[slot].load(Ordering::Relaxed))
    }
}

fn sum(snapshots: &[[u64; SLOTS]]) -> [u64; SLOTS] {
    let mut total = [0; SLOTS];
    for snapshot in snapshots {
        for (t, s) in total.iter_mut().zip(snapshot) {
            *t += s;
        }
    }
    total
}

/// Writes the common root words of a fresh pool.
fn write_root_header(pool: &Pool, workload: MicroWorkload, shape: &Shape) -> Result<(), PmdkError> {
    let root_off = pool.root();
    pool.tx(|tx| {
        tx.add_range(root_off, root::WORDS)?;
        tx.set(root_off + root::MAGIC, root::MAGIC_VALUE);
        tx.set(root_off + root::WORKLOAD, workload as u64);
        tx.set(root_off + root::ENTRIES, shape.entries);
        tx.set(root_off + root::ENTRY_SIZE, shape.entry_size as u64);
        Ok(())
    })
}

/// See [`crate::run`] (configuration and pool size already validated).
pub(crate) fn run(
    path: &Path,
    pool_size: u64,
    config: &MicroConfig,
    mut progress: impl FnMut(Progress),
) -> Result<MicroResult, PmdkError> {
    match path.symlink_metadata() {
        Ok(_) => return Err(PmdkError::PoolExists { path: path.to_path_buf() }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(PmdkError::Io { path: path.to_path_buf(), source }),
    }
    // The path did not exist: whatever is there from now on is this run's.
    let _file = CreatedFile { path: path.to_path_buf(), keep: config.keep_pool };
    let load_start = Instant::now();
    let pool = Pool::create(path, &config.workload.layout(), pool_size)?;
    let shape = Shape::new(config.entries, config.entry_size);
    write_root_header(&pool, config.workload, &shape)?;
    let run = match config.workload {
        MicroWorkload::Sps => drive::<sps::Sps>(&pool, config, &shape, load_start, &mut progress)?,
        MicroWorkload::Queue => drive::<queue::Queue>(&pool, config, &shape, load_start, &mut progress)?,
        MicroWorkload::Hash => drive::<hash::Hash>(&pool, config, &shape, load_start, &mut progress)?,
        MicroWorkload::RbTree => drive::<rbtree::RbTree>(&pool, config, &shape, load_start, &mut progress)?,
        MicroWorkload::BTree => drive::<btree::BTree>(&pool, config, &shape, load_start, &mut progress)?,
    };
    drop(pool);
    let expected = expected_items(config.workload, run.loaded, &run.totals);
    let check = check_path(path, config.workload, Some(expected))?;
    progress(Progress::Checked { items: check.items });
    let measured = run.measured;
    Ok(MicroResult {
        workload: config.workload,
        committed: measured[..config.workload.type_names().len()].to_vec(),
        outcomes: measured[TYPES..TYPES + config.workload.outcome_names().len()].to_vec(),
        total: measured[..TYPES].iter().sum(),
        elapsed: run.elapsed,
        per_thread: run.per_thread,
        load_elapsed: run.load_elapsed,
        check,
        pmem_forced: crate::pmem_forced(),
    })
}

/// Counts of one [`drive`].
struct Driven {
    loaded: u64,
    load_elapsed: Duration,
    /// Measured interval, summed over threads.
    measured: [u64; SLOTS],
    /// Everything, including the warm-up.
    totals: [u64; SLOTS],
    per_thread: Vec<u64>,
    elapsed: Duration,
}

/// Sets the stop flag when a worker ends (also by panic) and counts it.
struct Finished<'a> {
    finished: &'a AtomicUsize,
    stop: &'a AtomicBool,
    failed: bool,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        if self.failed || std::thread::panicking() {
            self.stop.store(true, Ordering::SeqCst);
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
}

/// Loads `S`, runs the workers and collects their counts.
fn drive<S: Structure>(
    pool: &Pool,
    config: &MicroConfig,
    shape: &Shape,
    load_start: Instant,
    progress: &mut dyn FnMut(Progress),
) -> Result<Driven, PmdkError> {
    let structure = S::load(pool, shape, child_seed(config.seed, u64::MAX))?;
    let loaded = S::loaded_items(shape);
    let load_elapsed = load_start.elapsed();
    progress(Progress::Loaded { items: loaded, elapsed: load_elapsed });

    let zipf = Zipfian::new(S::key_space(shape), config.theta);
    let threads = config.threads;
    let counters: Vec<Counters> = (0..threads).map(|_| Counters::default()).collect();
    let finish_times: Vec<Mutex<Option<Instant>>> = (0..threads).map(|_| Mutex::new(None)).collect();
    let stop = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    let barrier = Barrier::new(threads + 1);
    let ops_limit = match config.length {
        RunLength::OpsPerThread(ops) => Some(ops),
        RunLength::Duration(_) => None,
    };

    let (errors, measured_start, measured_end, start_snapshots, end_snapshots, final_snapshots) =
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let (structure, counters, finish_times) = (&structure, &counters, &finish_times);
                    let (stop, finished, barrier, zipf) = (&stop, &finished, &barrier, &zipf);
                    scope.spawn(move || -> Result<(), PmdkError> {
                        let mut done = Finished { finished, stop, failed: false };
                        let mut worker = Worker {
                            rng: rng(child_seed(config.seed, thread as u64)),
                            zipf,
                            insert_percent: config.insert_percent,
                            value: vec![0; shape.words],
                        };
                        let counters = &counters[thread];
                        barrier.wait();
                        let mut ops = 0u64;
                        let result = loop {
                            if stop.load(Ordering::Relaxed) || ops_limit.is_some_and(|limit| ops >= limit) {
                                break Ok(());
                            }
                            match structure.op(pool, &mut worker) {
                                Ok(outcome) => {
                                    counters.bump(outcome.kind);
                                    if let Some(index) = outcome.outcome {
                                        counters.bump(TYPES + index);
                                    }
                                    ops += 1;
                                }
                                Err(error) => break Err(error),
                            }
                        };
                        *finish_times[thread].lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                        done.failed = result.is_err();
                        result
                    })
                })
                .collect();

            // IMPORTANT: the clock starts before the barrier releases the
            // workers. Read after it, on a loaded machine the workers could
            // finish every operation before this thread ran again, and a
            // fixed-count run would measure a zero-length interval (its end,
            // the last worker's finish, lying before the start).
            let started = Instant::now();
            barrier.wait();
            let snapshot = || counters.iter().map(Counters::snapshot).collect::<Vec<_>>();
            let all_done = || finished.load(Ordering::SeqCst) == threads;
            let mut next_report = started + Duration::from_secs(1);
            let mut report = |warmup: bool| {
                let now = Instant::now();
                if now >= next_report {
                    next_report = now + Duration::from_secs(1);
                    let committed = sum(&snapshot())[..TYPES].iter().sum();
                    progress(Progress::Running { elapsed: now - started, committed, warmup });
                }
            };
            // Sleeps until `deadline`, reporting, unless all workers end.
            let mut wait_until = |deadline: Option<Instant>, warmup: bool| loop {
                if all_done() || stop.load(Ordering::SeqCst) {
                    return;
                }
                report(warmup);
                let now = Instant::now();
                let nap = match deadline {
                    Some(deadline) if now >= deadline => return,
                    Some(deadline) => (deadline - now).min(Duration::from_millis(20)),
                    None => Duration::from_millis(5),
                };
                std::thread::sleep(nap);
            };

            let (measured_start, start_snapshots, measured_end, end_snapshots) = match config.length {
                RunLength::Duration(duration) => {
                    if !config.warmup.is_zero() {
                        wait_until(Some(started + config.warmup), true);
                    }
                    let measured_start = Instant::now();
                    let start_snapshots = snapshot();
                    wait_until(Some(measured_start + duration), false);
                    stop.store(true, Ordering::SeqCst);
                    let end_snapshots = snapshot();
                    (measured_start, start_snapshots, Instant::now(), end_snapshots)
                }
                RunLength::OpsPerThread(_) => {
                    wait_until(None, false);
                    (started, vec![[0; SLOTS]; threads], started, Vec::new())
                }
            };
            let errors: Vec<PmdkError> = handles
                .into_iter()
                .filter_map(|handle| match handle.join() {
                    Ok(result) => result.err(),
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect();
            (errors, measured_start, measured_end, start_snapshots, end_snapshots, snapshot())
        });
    if let Some(error) = errors.into_iter().next() {
        return Err(error);
    }

    // With a fixed number of operations, everything is measured, up to the
    // last worker's end.
    let (end_snapshots, elapsed) = match config.length {
        RunLength::Duration(_) => (end_snapshots, measured_end - measured_start),
        RunLength::OpsPerThread(_) => {
            let last = finish_times
                .iter()
                .filter_map(|time| *time.lock().unwrap_or_else(|e| e.into_inner()))
                .max()
                .unwrap_or(measured_start);
            (final_snapshots.clone(), last - measured_start)
        }
    };
    let per_thread = end_snapshots
        .iter()
        .zip(&start_snapshots)
        .map(|(end, start)| (0..TYPES).map(|slot| end[slot] - start[slot]).sum())
        .collect();
    let (end, start) = (sum(&end_snapshots), sum(&start_snapshots));
    let measured = std::array::from_fn(|slot| end[slot] - start[slot]);
    Ok(Driven { loaded, load_elapsed, measured, totals: sum(&final_snapshots), per_thread, elapsed })
}

/// Opens the pool at `path`, checks its structure (and, if given, that it
/// holds `expected_items` items) and closes it.
pub(crate) fn check_path(
    path: &Path,
    workload: MicroWorkload,
    expected_items: Option<u64>,
) -> Result<CheckReport, PmdkError> {
    let pool = Pool::open(path, &workload.layout())?;
    let inconsistent = |message: String| PmdkError::Inconsistent { workload: workload.name(), message };
    let root_off = pool.root();
    if pool.load(root_off + root::MAGIC) != root::MAGIC_VALUE {
        return Err(inconsistent("the root object was never set up (the load did not commit)".into()));
    }
    if pool.load(root_off + root::WORKLOAD) != workload as u64 {
        return Err(inconsistent(format!(
            "the pool holds workload number {}, not {workload}",
            pool.load(root_off + root::WORKLOAD)
        )));
    }
    let entries = pool.load(root_off + root::ENTRIES);
    let entry_size = pool.load(root_off + root::ENTRY_SIZE);
    if entries == 0 || entries > 1 << 40 || !(16..=1 << 20).contains(&entry_size) {
        return Err(inconsistent(format!("implausible root header: {entries} entries of {entry_size} bytes")));
    }
    let shape = Shape::new(entries, entry_size as usize);
    let (items, summary) = match workload {
        MicroWorkload::Sps => sps::Sps::check(&pool, &shape)?,
        MicroWorkload::Queue => queue::Queue::check(&pool, &shape)?,
        MicroWorkload::Hash => hash::Hash::check(&pool, &shape)?,
        MicroWorkload::RbTree => rbtree::RbTree::check(&pool, &shape)?,
        MicroWorkload::BTree => btree::BTree::check(&pool, &shape)?,
    };
    if let Some(expected) = expected_items {
        if items != expected {
            return Err(inconsistent(format!(
                "{items} items after the run, but the committed transactions leave {expected}"
            )));
        }
    }
    Ok(CheckReport { workload, items, entries, entry_size: shape.entry_size, summary })
}

/// A seeded permutation of `0..count` (the load order of the maps).
pub(crate) fn shuffled(count: u64, seed: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..count).collect();
    let mut rng = rng(seed);
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.gen_range(0..=i));
    }
    keys
}

/// Helpers for the checks: an error for `workload` and offset validation.
pub(crate) struct Checker<'p> {
    pub(crate) pool: &'p Pool,
    pub(crate) workload: &'static str,
}

impl Checker<'_> {
    /// An [`PmdkError::Inconsistent`] with `message`.
    pub(crate) fn error(&self, message: impl Into<String>) -> PmdkError {
        PmdkError::Inconsistent { workload: self.workload, message: message.into() }
    }

    /// Fails unless `[off, off + len)` is an aligned range of the pool.
    pub(crate) fn object(&self, off: u64, len: u64, what: &str) -> Result<(), PmdkError> {
        if self.pool.contains(off, len) {
            Ok(())
        } else {
            Err(self.error(format!("{what} at offset {off:#x} (+{len} bytes) is outside the pool or misaligned")))
        }
    }

    /// Reads and verifies the value at `off`; returns `(key, version)`.
    pub(crate) fn value(&self, off: u64, shape: &Shape, buf: &mut [u64], what: &str) -> Result<(u64, u64), PmdkError> {
        self.object(off, shape.stride, what)?;
        self.pool.load_words(off, buf);
        verify_value(buf, shape.entry_size).map_err(|message| self.error(format!("{what}: {message}")))
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Builds a loaded pool, lets a test corrupt it, and runs the check.

    use super::*;

    /// Creates a pool for `workload` with `entries` entries, loads it,
    /// applies `corrupt` in a transaction and returns the check's result.
    pub(crate) fn check_after<S: Structure>(
        workload: MicroWorkload,
        entries: u64,
        corrupt: impl FnOnce(&crate::pool::Tx<'_>) -> Result<(), PmdkError>,
    ) -> Result<CheckReport, PmdkError> {
        let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
        let path = dir.path().join("pool");
        let shape = Shape::new(entries, 40);
        {
            let pool = Pool::create(&path, &workload.layout(), 16 << 20).unwrap();
            write_root_header(&pool, workload, &shape).unwrap();
            S::load(&pool, &shape, 1).unwrap();
            pool.tx(corrupt).unwrap();
        }
        check_path(&path, workload, Some(S::loaded_items(&shape)))
    }

    /// Asserts that the check fails with a message containing `needle`.
    pub(crate) fn assert_inconsistent(result: Result<CheckReport, PmdkError>, needle: &str) {
        match result {
            Err(PmdkError::Inconsistent { message, .. }) => {
                assert!(message.contains(needle), "expected {needle:?} in {message:?}")
            }
            other => panic!("expected an inconsistency ({needle}), got {other:?}"),
        }
    }

    #[test]
    fn values_round_trip_and_detect_damage() {
        for entry_size in [16usize, 17, 100, 128] {
            let mut words = vec![0; entry_size.div_ceil(8)];
            fill_value(5, 9, entry_size, &mut words);
            assert_eq!(verify_value(&words, entry_size), Ok((5, 9)));
            if words.len() > 2 {
                *words.last_mut().unwrap() ^= 1;
                assert!(verify_value(&words, entry_size).is_err());
            }
        }
        // Padding past `entry_size` is zero.
        let mut words = vec![0; 3];
        fill_value(1, 2, 17, &mut words);
        assert_eq!(words[2] >> 8, 0);
    }
}
