//! Crash consistency of the `group-commit` engine under the `sim` backend.
//!
//! A Smallbank-like transfer workload runs on two workers over 32 accounts
//! (worker `w` owns accounts `16w..16w+16`, so each worker's effect on the
//! balances is a deterministic function of how many of its transactions
//! survived); every transaction also stores its sequence number in the row
//! `txn/<w>`. The test thread takes checkpoints while the workers run and
//! closes the database at the end, so crash points inside checkpoints and
//! inside the clean close are captured as well.
//!
//! Oracle, for every crash image of every captured crash state:
//! * recovery neither panics nor fails;
//! * the load transaction is all-or-nothing and present if acknowledged;
//! * for each worker, the recovered sequence `s` is at least the last
//!   sequence acknowledged at or before the crash event, at most the last one
//!   issued, and the worker's 16 balances equal the replay of its
//!   transactions `1..=s` exactly (no partial transaction, a prefix);
//! * money is conserved.
//!
//! For a subset of images, recovery itself runs on a capturing `Sim` pool:
//! crashing the recovered pool right after recovery, or at any captured point
//! during recovery, and recovering again gives exactly the same state.
//!
//! Failures name the seed (override with `PMTX_CRASH_SEED`) and the image.

mod support;

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, Outcome, PoolLocation, TableSchema};
use pmtx_pm::sim::{CapturePolicy, CrashState, ImageBudget};
use pmtx_pm::{Direct, PmOptions, Pool, Sim};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{
    account_key, le_i64, le_i64_row, le_u64, Acks, DbState, DuringRecovery, Recovery, Tally, Transfers,
    RECOVERY_BUDGET, RUN_BUDGET,
};

const WORKERS: usize = 2;
const ACCOUNTS: u64 = 32;
const PER_WORKER: u64 = ACCOUNTS / WORKERS as u64;
/// Transactions per worker.
const TXNS: u64 = 900;
const POOL_SIZE: u64 = 2 << 20;
/// Crash states whose images are all checked.
const STATES_CHECKED: usize = 250;
/// Of those, states whose images are recovered on a capturing sim pool
/// (crash during recovery).
const RECOVERY_CRASH_STATES: usize = 10;
/// Second lives started from crash images of the first.
const CONTINUATIONS: usize = 4;
/// Transactions per worker in a second life.
const LIFE2_TXNS: u64 = 200;
/// Crash states checked per second life.
const LIFE2_STATES: usize = 40;
/// Crash states checked from the run that fills the pool.
const FULL_POOL_STATES: usize = 40;

fn seed() -> u64 {
    support::seed(0x6C0F_FEE5)
}

fn model(seed: u64) -> Transfers {
    Transfers { seed, workers: WORKERS, per_worker: PER_WORKER, seq_key, balance_row: le_i64_row, balance_of: le_i64 }
}

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("accounts").max_value_len(16), TableSchema::hashed("seq").max_value_len(16)]
}

fn options(seed: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(EngineKind::GroupCommit, tables());
    options.workers = WORKERS;
    options.pool = PoolLocation::InMemory { size: POOL_SIZE };
    options.chunk_size = pmtx_pm::layout::MIN_CHUNK_SIZE;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options.pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    options.seed = seed;
    options
}

/// Recovery of the transfer workload's images: every record read directly.
fn recovery(seed: u64) -> Recovery {
    Recovery::records(options(seed))
}

fn seq_key(worker: usize) -> Vec<u8> {
    format!("txn/{worker}").into_bytes()
}

/// Which transfers each worker ran: per worker, `(first sequence, salt)`
/// pairs in ascending order; a transaction uses the salt of the last pair at
/// or below its sequence. A life after a crash continues with a new salt, so
/// a transaction of an earlier life that was lost and later "resurrected"
/// does not look like the transaction that took its sequence number.
#[derive(Clone, Debug)]
struct History {
    lives: Vec<Vec<(u64, u64)>>,
}

impl History {
    fn new() -> Self {
        Self { lives: vec![vec![(1, 0)]; WORKERS] }
    }

    fn salt(&self, worker: usize, k: u64) -> u64 {
        self.lives[worker].iter().rev().find(|(first, _)| *first <= k).map(|(_, salt)| *salt).unwrap_or(0)
    }

    /// Transactions from `first[w]` on use `salt`.
    fn continued(&self, first: &[u64], salt: u64) -> Self {
        let mut next = self.clone();
        for (worker, &first) in first.iter().enumerate() {
            next.lives[worker].retain(|(start, _)| *start < first);
            next.lives[worker].push((first, salt));
        }
        next
    }
}

fn sequences(state: &DbState) -> Option<Vec<u64>> {
    (0..WORKERS).map(|worker| state["seq"].get(&seq_key(worker)).map(|raw| le_u64(raw).unwrap())).collect()
}

/// What one life of the database acknowledged, for the oracle.
struct Oracle {
    history: History,
    acks: Acks,
}

/// Checks a recovered state against the oracle; `Err` describes the violation.
fn check_state(seed: u64, state: &DbState, oracle: &Oracle, event: u64) -> Result<(), String> {
    let accounts = &state["accounts"];
    let seqs = &state["seq"];
    if accounts.is_empty() && seqs.is_empty() {
        return oracle.acks.check_empty(event);
    }
    if accounts.len() != ACCOUNTS as usize || seqs.len() != WORKERS {
        return Err(format!("partial load: {} accounts, {} sequence rows", accounts.len(), seqs.len()));
    }
    let salt = |worker, k| oracle.history.salt(worker, k);
    model(seed).check_accounts(&oracle.acks, event, accounts, seqs, salt).map(|_| ())
}

fn capture_policy() -> CapturePolicy {
    // Candidates are fences and labels; keep about one in three, with a
    // generous cap, and subsample afterwards.
    CapturePolicy { every_nth: 2, random_per_million: 150_000, at_labels_only: false, max_states: 6_000 }
}

/// How [`run_transfers`] runs.
#[derive(Clone, Copy)]
struct RunMode {
    /// The test thread takes checkpoints while the workers run.
    checkpoints: bool,
    /// Workers stop at `DbError::OutOfSpace`.
    until_full: bool,
}

const WITH_CHECKPOINTS: RunMode = RunMode { checkpoints: true, until_full: false };
const UNTIL_FULL: RunMode = RunMode { checkpoints: false, until_full: true };

/// Runs transfers `first[w]..first[w] + count` with `history` on every
/// worker while the test thread takes checkpoints (if `mode.checkpoints`).
/// Returns the acknowledgement events per worker and the last sequence each
/// worker committed; with `mode.until_full`, a worker stops at its first
/// `DbError::OutOfSpace` (any other error fails the test).
fn run_transfers(
    db: &Database,
    pool: &Arc<Pool<Sim>>,
    seed: u64,
    history: &History,
    first: &[u64],
    count: u64,
    mode: RunMode,
) -> (Vec<Vec<u64>>, Vec<u64>) {
    let RunMode { checkpoints, until_full } = mode;
    let model = model(seed);
    let accounts = db.table_id("accounts").unwrap();
    let seq = db.table_id("seq").unwrap();
    // Checkpoints while the workers run: crash points inside them are
    // captured with everything else.
    let checkpoints_before = db.stats().checkpoints;
    let interval = checkpoints.then_some(Duration::from_millis(4));
    let (results, _) = support::run_workers(db, WORKERS, interval, |id| {
        let first = first[id];
        let mut worker = db.worker(id).unwrap();
        let mut acked = Vec::with_capacity(count as usize);
        let mut record = |tag: u32, _: Duration| {
            assert_eq!(tag as u64, first + acked.len() as u64, "acknowledgements arrive in commit order");
            acked.push(pool.backend().event_count());
        };
        let mut last = first - 1;
        for k in first..first + count {
            let (from, to, amount) = model.transfer(history.salt(id, k), id, k);
            let result = worker.run_pipelined(k as u32, false, |tx| {
                let a = le_i64(&tx.get(accounts, &account_key(from))?.expect("from exists")).unwrap();
                let b = le_i64(&tx.get(accounts, &account_key(to))?.expect("to exists")).unwrap();
                let previous = tx.get(seq, &seq_key(id))?.expect("sequence row exists");
                assert_eq!(le_u64(&previous), Ok(k - 1));
                tx.put(accounts, &account_key(from), &(a - amount).to_le_bytes())?;
                tx.put(accounts, &account_key(to), &(b + amount).to_le_bytes())?;
                tx.put(seq, &seq_key(id), &k.to_le_bytes())?;
                Ok(())
            });
            match result {
                Ok((outcome, _)) => assert_eq!(outcome, Outcome::Committed(())),
                Err(DbError::OutOfSpace(_)) if until_full => break,
                Err(error) => panic!("worker {id}, transaction {k}: {error}"),
            }
            last = k;
            worker.drain_acknowledged(&mut record);
            // Every few transactions wait for durability, so the run
            // spans many epochs with a few records each.
            if k % 6 == 0 {
                worker.wait_all_acknowledged(&mut record).expect("acknowledged");
            }
        }
        worker.wait_all_acknowledged(&mut record).expect("acknowledged");
        (acked, last)
    });
    if checkpoints {
        assert!(db.stats().checkpoints >= checkpoints_before + 2, "too few checkpoints ran during the workload");
    }
    results.into_iter().unzip()
}

/// Creates a capturing sim pool and a database on it, and loads it;
/// returns the load's acknowledgement event.
fn create_and_load(seed: u64) -> (Arc<Pool<Sim>>, Database, u64) {
    model(seed).create_loaded(options(seed), capture_policy(), "seq", &[])
}

/// Life 1: load, transfers with checkpoints, clean close. Returns the
/// captured crash states, the oracle and the final persisted image.
fn run_first_life(seed: u64) -> (Vec<CrashState>, Oracle, Vec<u8>) {
    let (pool, db, load) = create_and_load(seed);
    let history = History::new();
    let (events, issued) = run_transfers(&db, &pool, seed, &history, &[1; WORKERS], TXNS, WITH_CHECKPOINTS);
    db.close().unwrap();
    let states = pool.backend().take_crash_states();
    assert_eq!(pool.backend().dropped_captures(), 0, "capture cap reached; raise max_states or every_nth");
    let final_image = pool.backend().persisted_image();
    let acks = Acks { load: Some(load), base: vec![0; WORKERS], events, issued };
    (states, Oracle { history, acks }, final_image)
}

/// Picks `count` states: every checkpoint/close label first (evenly thinned
/// if too many), then evenly spread others, deterministic in `seed`.
fn pick_states(seed: u64, states: Vec<CrashState>, count: usize) -> Vec<CrashState> {
    support::pick_states(seed, states, count, |state| state.label.contains("checkpoint"))
}

/// Checks every image (within `budget`) of every state in `picked` against
/// `oracle`; every `recovery_every`-th state's first image is also
/// recovered with crashes during recovery.
fn check_states(
    seed: u64,
    context: &str,
    picked: &[CrashState],
    oracle: &Oracle,
    budget: ImageBudget,
    recovery_every: usize,
) -> Tally {
    let during = DuringRecovery { every: recovery_every, states: 8, budget: RECOVERY_BUDGET, first_depth: 1 };
    recovery(seed)
        .check_images(context, picked, budget, Some(&during), |state, event| check_state(seed, state, oracle, event))
}

fn label_counts(states: &[CrashState]) -> BTreeMap<&'static str, usize> {
    states.iter().fold(BTreeMap::new(), |mut map, s| {
        *map.entry(s.label).or_default() += 1;
        map
    })
}

#[test]
fn group_commit_crash_images_recover_acknowledged_prefixes() {
    let seed = seed();
    eprintln!("group_commit_crash: seed {seed:#x} (set PMTX_CRASH_SEED to replay)");
    let started = Instant::now();
    let (states, oracle, final_image) = run_first_life(seed);
    let captured = states.len();
    let labels = label_counts(&states);
    assert!(
        labels.keys().any(|l| l.contains("checkpoint root switched"))
            && labels.keys().any(|l| l.contains("before root switch")),
        "seed {seed:#x}: no crash state inside a checkpoint was captured: {labels:?}"
    );
    let run_time = started.elapsed();
    let picked = pick_states(seed, states, STATES_CHECKED);
    let recovery_every = (picked.len() / RECOVERY_CRASH_STATES).max(1);
    let tally = check_states(seed, "life 1", &picked, &oracle, RUN_BUDGET, recovery_every);
    // The cleanly closed pool: everything acknowledged, the fast path.
    let state = recovery(seed).recovered_state(&final_image, "final image");
    check_state(seed, &state, &oracle, u64::MAX).unwrap_or_else(|v| panic!("seed {seed:#x}, final image: {v}"));
    assert_eq!(sequences(&state), Some(vec![TXNS; WORKERS]), "seed {seed:#x}: final image lacks commits");
    eprintln!(
        "group_commit_crash: seed {seed:#x}: captured {captured} crash states {labels:?}; checked {} states / {} \
         images, {} recoveries crashed at {} images; run {:?}, total {:?}",
        tally.states,
        tally.images,
        tally.recovery_states,
        tally.recovery_images,
        run_time,
        started.elapsed()
    );
    assert_eq!(tally.states, picked.len());
    assert!(tally.recovery_states >= 1);
}

/// Lives after a crash: recover a crash image of life 1, keep running
/// (other transfers under the same sequence numbers), crash again anywhere,
/// recover. Records of life 1 that were never durable (skipped by the first
/// recovery) must stay dead however far the durable epoch moves on, and
/// whatever stale log bytes reused chunks still hold.
#[test]
fn group_commit_lives_after_a_crash_never_resurrect_lost_commits() {
    let seed = seed() ^ 0x11FE;
    eprintln!("group_commit_crash (lives): seed {seed:#x} (set PMTX_CRASH_SEED to replay)");
    let started = Instant::now();
    let (states, oracle, _) = run_first_life(seed);
    let load = oracle.acks.load.unwrap();
    let candidates: Vec<&CrashState> = states.iter().filter(|s| s.event > load).collect();
    let mut tally = Tally::default();
    let mut lost_commits = 0;
    for life in 0..CONTINUATIONS {
        let base_state = candidates[(life * 2 + 1) * (candidates.len() - 1) / (2 * CONTINUATIONS)];
        let images: Vec<_> = base_state.images(seed, RUN_BUDGET).collect();
        let image = &images[(1 + 3 * life) % images.len()];
        let context = format!("life 2 #{life} from {}", image.description);
        let pm = PmOptions { sim_seed: seed ^ life as u64, ..PmOptions::default() };
        let pool = Arc::new(Pool::<Sim>::open_image(&image.bytes, &pm).unwrap());
        pool.backend().set_capture(capture_policy());
        let db = Database::open_on_pool(options(seed), Arc::clone(&pool)).unwrap();
        let recovered = recovery(seed).read(&db);
        check_state(seed, &recovered, &oracle, base_state.event)
            .unwrap_or_else(|v| panic!("seed {seed:#x}, {context}: {v}"));
        let base = sequences(&recovered).expect("loaded");
        lost_commits += (0..WORKERS).filter(|&w| base[w] < oracle.acks.issued[w]).count();
        let first: Vec<u64> = base.iter().map(|s| s + 1).collect();
        let history = oracle.history.continued(&first, life as u64 + 1);
        let (events, _) = run_transfers(&db, &pool, seed, &history, &first, LIFE2_TXNS, WITH_CHECKPOINTS);
        // Crash at the end: dropped without close.
        drop(db);
        let life2_states = pool.backend().take_crash_states();
        assert_eq!(pool.backend().dropped_captures(), 0);
        let end_image = pool.backend().persisted_image();
        let issued = base.iter().map(|s| s + LIFE2_TXNS).collect();
        let oracle2 = Oracle { history, acks: Acks { load: None, base, events, issued } };
        let picked = pick_states(seed ^ life as u64, life2_states, LIFE2_STATES);
        let recovery_every = (picked.len() / 2).max(1);
        tally += check_states(seed, &context, &picked, &oracle2, RUN_BUDGET, recovery_every);
        let state = recovery(seed).recovered_state(&end_image, &format!("{context}, end image"));
        check_state(seed, &state, &oracle2, u64::MAX)
            .unwrap_or_else(|v| panic!("seed {seed:#x}, {context}, end image: {v}"));
    }
    eprintln!(
        "group_commit_crash (lives): seed {seed:#x}: {CONTINUATIONS} second lives ({lost_commits} worker logs had \
         lost commits); checked {} states / {} images, {} recoveries crashed at {} images; total {:?}",
        tally.states,
        tally.images,
        tally.recovery_states,
        tally.recovery_images,
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------
// A stale log record in a reused chunk.
//
// Recovery frees every old log segment, and chunks are reused without being
// zeroed. Records of a crashed life that lie *after* a torn record are never
// seen by recovery, so their epoch can be as high as the first epoch of the
// next life. If a later segment in the same chunk validated the stale record
// (the record CRC covers the segment's sequence and worker), a scan that runs
// past the last record written reads it as a valid one of an epoch that is
// now durable, and replays a transaction that was never acknowledged. The
// crash images below are crafted so that exactly this would happen: life 1
// leaves a torn record R2 followed by a complete R3; life 2's first segment
// (another worker's) lands in R3's chunk and its last record, not durable,
// ends where R3 begins. Every life takes new sequence numbers, so R3 never
// validates there.

const STALE_EPOCH: Duration = Duration::from_millis(200);

fn stale_options(seed: u64) -> DbOptions {
    let mut options = options(seed);
    options.tables = vec![TableSchema::ordered("t").max_value_len(8)];
    // Durability only when the test asks for it (checkpoints drive epochs;
    // the ticker is slow enough not to interfere, and is checked).
    options.epoch_interval = STALE_EPOCH;
    options
}

fn read_key(db: &Database, key: &[u8]) -> Option<u64> {
    let table = pmtx_engine::internals::dram_table(db, db.table_id("t").unwrap()).unwrap().expect("DRAM records");
    let mut value = Vec::new();
    let record = table.lookup(key)?;
    let snapshot = record.copy_value(&mut value).unwrap();
    (!snapshot.is_absent()).then(|| u64::from_le_bytes(value.as_slice().try_into().unwrap()))
}

/// Start offsets of the first `count` records of the log segment in
/// `chunk` (as found in `bytes`), fewer if a zero length comes first.
/// (Records carry no terminator: in a reused chunk, the bytes after the
/// last one are the chunk's older records.)
fn record_offsets(bytes: &[u8], chunk_offset: u64, count: u64) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut position = chunk_offset + 64;
    while (offsets.len() as u64) < count {
        let at = position as usize;
        let length = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as u64;
        if length == 0 {
            break;
        }
        offsets.push(position);
        position += length;
    }
    offsets
}

/// The first log segment's chunk.
fn log_segment(pool: &Pool<Sim>) -> pmtx_pm::ChunkId {
    let mut chunks = pool.owned_chunks().into_iter();
    chunks
        .find(|(_, owner)| owner.kind() == pmtx_engine::internals::pool_layout::LOG_CHUNK_KIND)
        .map(|(chunk, _)| chunk)
        .unwrap()
}

/// The prefix vector that applies every pending store except, in the line
/// holding `offset`, the first store at or after `offset` and everything
/// after it in that line.
fn all_but_from(state: &CrashState, offset: u64) -> Vec<usize> {
    state
        .dirty_lines()
        .iter()
        .map(|line| {
            if line.offset == offset & !63 {
                line.stores.iter().take_while(|store| store.offset < offset).count()
            } else {
                line.stores.len()
            }
        })
        .collect()
}

/// Life 1 → crafted image with R2 torn and R3 complete; `None` if the
/// ticker interfered (retry).
fn stale_life_one(seed: u64, n: u64) -> Option<(Vec<u8>, u64, pmtx_pm::ChunkId)> {
    let options = stale_options(seed);
    let pool = support::sim_pool(&options, None);
    let db = Database::open_on_pool(options, Arc::clone(&pool)).unwrap();
    let t = db.table_id("t").unwrap();
    // An empty checkpoint first, so that its chunk comes before the log
    // segment's, which life 2's worker 1 then reuses.
    db.checkpoint().unwrap();
    let mut worker = db.worker(0).unwrap();
    for k in 1..=n {
        worker.run_pipelined(k as u32, false, |tx| tx.put(t, b"acct0000", &k.to_le_bytes())).unwrap();
    }
    // Durable up to R1 (= write n), then R2, R3 stay in the current epoch.
    db.checkpoint().unwrap();
    assert_eq!(worker.pending_acknowledgements(), n as usize);
    let mut acked = 0;
    worker.drain_acknowledged(|_, _| acked += 1);
    assert_eq!(acked, n);
    let durable = db.stats().durable_epoch;
    for k in n + 1..=n + 2 {
        worker.run_pipelined(k as u32, false, |tx| tx.put(t, b"acct0000", &k.to_le_bytes())).unwrap();
    }
    let state = pool.backend().crash_state_now("R2 and R3 written, not durable");
    if db.stats().durable_epoch != durable {
        return None;
    }
    let segment = log_segment(&pool);
    let offsets = record_offsets(&pool.backend().live_image(), pool.chunk_offset(segment), n + 2);
    assert_eq!(offsets.len() as u64, n + 2);
    let (r2, r3) = (offsets[n as usize], offsets[n as usize + 1]);
    // R2's first line is lost (its header with it); everything else,
    // R3 included, reached the medium.
    let mut prefixes: Vec<usize> = state.dirty_lines().iter().map(|line| line.stores.len()).collect();
    for (index, line) in state.dirty_lines().iter().enumerate() {
        if line.offset == r2 & !63 {
            prefixes[index] = 0;
        }
    }
    assert!(r3 & !63 != r2 & !63);
    drop(worker);
    drop(db);
    Some((state.image_with_prefixes(&prefixes), r3 - pool.chunk_offset(segment), segment))
}

/// Life 2 from `image`: worker 1 fills its first segment up to R3's offset,
/// the last record non-durable (its tail lost). `None` if the
/// ticker interfered.
fn stale_life_two(seed: u64, image: &[u8], n: u64, r3_in_chunk: u64, r3_chunk: pmtx_pm::ChunkId) -> Option<Vec<u8>> {
    let pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    let pool = Arc::new(Pool::<Sim>::open_image(image, &pm).unwrap());
    let db = Database::open_on_pool(stale_options(seed), Arc::clone(&pool)).unwrap();
    assert_eq!(read_key(&db, b"acct0000"), Some(n), "life 2 recovered the acknowledged writes only");
    let t = db.table_id("t").unwrap();
    let mut worker = db.worker(1).unwrap();
    let segment = log_segment(&pool);
    assert_eq!(segment, r3_chunk, "worker 1's first segment reuses R3's chunk");
    // Records of the same length as life 1's: the one with index n ends
    // exactly where R3 starts.
    for k in 1..=n {
        worker.run_pipelined(k as u32, false, |tx| tx.put(t, b"acct0001", &k.to_le_bytes())).unwrap();
    }
    worker.wait_all_acknowledged(|_, _| {}).expect("acknowledged");
    let durable = db.stats().durable_epoch;
    worker.run_pipelined(0, false, |tx| tx.put(t, b"acct0001", &(n + 1).to_le_bytes())).unwrap();
    let state = pool.backend().crash_state_now("last record written, not durable");
    if db.stats().durable_epoch != durable {
        return None;
    }
    let offsets = record_offsets(&pool.backend().live_image(), pool.chunk_offset(segment), n + 1);
    assert_eq!(offsets.len() as u64, n + 1);
    let end = pool.chunk_offset(segment) + r3_in_chunk;
    assert_eq!(offsets[n as usize] + 56, end, "records must line up with life 1's");
    drop(worker);
    drop(db);
    Some(state.image_with_prefixes(&all_but_from(&state, end)))
}

#[test]
fn stale_record_in_a_reused_log_chunk_is_never_replayed() {
    let seed = seed();
    let n = 20;
    for attempt in 0..5 {
        let Some((image, r3, r3_chunk)) = stale_life_one(seed, n) else {
            eprintln!("life 1 attempt {attempt}: the ticker made R2/R3 durable; retrying");
            continue;
        };
        let Some(image) = stale_life_two(seed, &image, n, r3, r3_chunk) else {
            eprintln!("life 2 attempt {attempt}: the ticker interfered; retrying");
            continue;
        };
        let pool = Arc::new(Pool::<Direct>::open_image(&image, &PmOptions::default()).unwrap());
        let db = Database::open_on_pool(stale_options(seed), Arc::clone(&pool)).unwrap();
        assert_eq!(
            read_key(&db, b"acct0000"),
            Some(n),
            "seed {seed:#x}: life 1's lost write R3 was replayed from a stale record in a reused log chunk"
        );
        assert_eq!(read_key(&db, b"acct0001"), Some(n), "seed {seed:#x}: life 2's acknowledged writes");
        return;
    }
    panic!("the ticker interfered in every attempt");
}

/// A run without checkpoints until the log fills the pool, crashing at the
/// end: every crash image, the late ones taken on an almost full pool
/// included, recovers (recovery must find room for its checkpoint) to an
/// acknowledged prefix.
#[test]
fn crash_images_of_a_full_pool_recover() {
    let seed = seed() ^ 0xF011;
    let started = Instant::now();
    let (pool, db, load) = create_and_load(seed);
    let history = History::new();
    let (events, issued) = run_transfers(&db, &pool, seed, &history, &[1; WORKERS], 100_000, UNTIL_FULL);
    assert!(issued.iter().all(|&n| n < 100_000), "the log never filled the pool: {issued:?}");
    // Crash: dropped without close.
    drop(db);
    let states = pool.backend().take_crash_states();
    let end_image = pool.backend().persisted_image();
    let acks = Acks { load: Some(load), base: vec![0; WORKERS], events, issued: issued.clone() };
    let oracle = Oracle { history, acks };
    // The last states (on an almost full pool) and a spread of the others.
    let mut states = states;
    let late = states.split_off(states.len().saturating_sub(FULL_POOL_STATES / 2));
    let mut picked = pick_states(seed, states, FULL_POOL_STATES / 2);
    picked.extend(late);
    let tally = check_states(seed, "full pool", &picked, &oracle, RUN_BUDGET, (picked.len() / 3).max(1));
    let state = recovery(seed).recovered_state(&end_image, "full pool, end image");
    check_state(seed, &state, &oracle, u64::MAX).unwrap_or_else(|v| panic!("seed {seed:#x}, end image: {v}"));
    assert_eq!(sequences(&state), Some(issued.clone()), "seed {seed:#x}: every commit was acknowledged");
    eprintln!(
        "group_commit_crash (full pool): seed {seed:#x}: {issued:?} transactions until out of space; checked {} \
         states / {} images, {} recoveries crashed at {} images; total {:?}",
        tally.states,
        tally.images,
        tally.recovery_states,
        tally.recovery_images,
        started.elapsed()
    );
    assert!(tally.states > 0);
}

// ---------------------------------------------------------------------------
// Delete-only transactions racing checkpoints.
//
// A checkpoint leaves deleted rows out; the epoch of such a delete must still
// be durable before the checkpoint becomes current, or a crash right after
// the root switch recovers the delete without the transactions before it.

const DELETE_KEYS: u64 = 1000;

fn delete_tables() -> Vec<TableSchema> {
    // `seq` first: the checkpoint scans it before the keys.
    vec![TableSchema::hashed("seq").max_value_len(16), TableSchema::ordered("keys").max_value_len(16)]
}

fn delete_options(seed: u64) -> DbOptions {
    let mut options = options(seed);
    options.tables = delete_tables();
    options.workers = 1;
    // Frequent ticks: a tick between a checkpoint's start and its wait for
    // durability is what lets it skip driving an epoch itself.
    options.epoch_interval = Duration::from_micros(200);
    options
}

fn delete_key(i: u64) -> Vec<u8> {
    format!("k/{i:05}").into_bytes()
}

/// Checks a recovered state of the delete workload against the
/// acknowledgements `(tag, event)` of the writer, for a crash at `event`.
fn check_deletes(state: &DbState, acked: &[(u32, u64)], event: u64) -> Result<(), String> {
    let sequence = state["seq"].get(&b"s"[..]).map(|raw| le_u64(raw)).transpose()?.unwrap_or(0);
    let present: Vec<bool> = (0..DELETE_KEYS).map(|i| state["keys"].contains_key(&delete_key(i))).collect();
    for &(tag, ack) in acked {
        if ack > event {
            continue;
        }
        let i = tag as u64 / 2;
        if tag % 2 == 0 && sequence <= i {
            return Err(format!("acknowledged sequence {} lost", i + 1));
        }
        if tag % 2 == 1 && present[i as usize] {
            return Err(format!("acknowledged delete of key {i} lost"));
        }
    }
    // A prefix of the worker's transactions: keys below s - 1 are deleted,
    // keys from s on are not.
    for (i, &present) in present.iter().enumerate() {
        let i = i as u64;
        if i + 1 < sequence && present {
            return Err(format!("key {i} present at sequence {sequence}"));
        }
        if i >= sequence && !present {
            return Err(format!(
                "key {i} deleted but the recovered sequence is {sequence} (a delete recovered without the \
                 transactions before it)"
            ));
        }
    }
    Ok(())
}

#[test]
fn checkpoints_never_hold_an_undurable_delete() {
    let seed = seed() ^ 0xDE1E;
    let options = delete_options(seed);
    let pool = support::sim_pool(&options, None);
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
    let seq = db.table_id("seq").unwrap();
    let keys = db.table_id("keys").unwrap();
    let mut loader = db.worker(0).unwrap();
    loader.run(|tx| tx.put(seq, b"s", &0u64.to_le_bytes())).unwrap();
    for batch in (0..DELETE_KEYS).collect::<Vec<_>>().chunks(500) {
        loader
            .run(|tx| {
                for &i in batch {
                    tx.put(keys, &delete_key(i), b"present")?;
                }
                Ok(())
            })
            .unwrap();
    }
    drop(loader);
    // Crash points at the checkpoint's commit point only.
    pool.backend().set_capture(CapturePolicy { max_states: 4_000, ..CapturePolicy::labels_only() });
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let mut checkpoints = 0;
    let acked = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut worker = db.worker(0).unwrap();
            // (tag, event): tag 2i = sequence i + 1 stored, 2i + 1 = key i deleted.
            let mut acked = Vec::new();
            for i in 0..DELETE_KEYS {
                let next = i + 1;
                worker.run_pipelined((2 * i) as u32, false, |tx| tx.put(seq, b"s", &next.to_le_bytes())).unwrap();
                worker
                    .run_pipelined((2 * i + 1) as u32, false, |tx| tx.delete(keys, &delete_key(i)).map(|_| ()))
                    .unwrap();
                worker.drain_acknowledged(|tag, _| acked.push((tag, pool.backend().event_count())));
                if i % 4 == 3 {
                    worker
                        .wait_all_acknowledged(|tag, _| acked.push((tag, pool.backend().event_count())))
                        .expect("acknowledged");
                }
            }
            worker
                .wait_all_acknowledged(|tag, _| acked.push((tag, pool.backend().event_count())))
                .expect("acknowledged");
            done.store(true, Ordering::SeqCst);
            acked
        });
        while !done.load(Ordering::SeqCst) && !writer.is_finished() {
            if checkpoints < 500 {
                db.checkpoint().unwrap();
                checkpoints += 1;
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        writer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    drop(db);
    let states: Vec<CrashState> =
        pool.backend().take_crash_states().into_iter().filter(|s| s.label.contains("root switch")).collect();
    let stride = states.len().div_ceil(500).max(1);
    let states: Vec<CrashState> = states.into_iter().step_by(stride).collect();
    let budget = ImageBudget { random_subsets: 1, random_prefixes: 1, exhaustive_limit: 4, all_but_lines: 1 };
    let tally = Recovery::records(options)
        .check_images("delete workload", &states, budget, None, |state, event| check_deletes(state, &acked, event));
    eprintln!(
        "group_commit_crash (deletes): seed {seed:#x}: {checkpoints} checkpoints, {} crash states at their commit \
         point, {} images; {:?}",
        states.len(),
        tally.images,
        started.elapsed()
    );
    assert!(states.len() > 10);
}
