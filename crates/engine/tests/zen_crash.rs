//! Crash consistency of the `zen` engine under the `sim` backend.
//!
//! Two workers run transfers over 32 accounts (worker `w` owns accounts
//! `16w..16w+16`, so its effect is a deterministic function of how many of
//! its transactions survived). Transaction `k` of worker `w` also stores `k`
//! in `seq/<w>`, inserts `hist/(w,k)` and deletes `hist/(w,k-3)`, so every
//! transaction writes three tables, versions are superseded and reused
//! (a 2 MiB pool of 64 KiB chunks), and tombstones go through sweeps (a
//! sweep threshold of 2). Every transaction also increments the shared row
//! `ctr/total`, whose table is first in the LP order: the LP tuple of one
//! worker's latest transaction is then superseded by the other worker,
//! which is what the heap's LP pin must survive.
//!
//! Oracle, for every crash image of every checked crash state:
//! * recovery neither panics nor fails;
//! * the load is all-or-nothing, and present if acknowledged before the
//!   crash event;
//! * for each worker, the recovered sequence `s` is at least the last one
//!   acknowledged before the crash and at most the last one issued, its 16
//!   balances are the replay of its transactions `1..=s`, and its history
//!   rows are exactly `max(1, s-2)..=s` (no partial transaction, no
//!   resurrected delete);
//! * `ctr/total` equals the sum of the recovered sequences;
//! * money is conserved.
//!
//! For some images recovery itself runs on a capturing `Sim` pool: crashing
//! right after it, or at captured points during it (and, for one, again
//! during the second recovery), recovers the same state.
//!
//! Failures print the seed (override with `PMTX_CRASH_SEED`) and the image.

mod zen_support;

use pmtx_engine::{Database, DbOptions, EngineKind, Outcome, PoolLocation, TableSchema, ZenOptions};
use pmtx_pm::sim::{CapturePolicy, CrashState, ImageBudget};
use pmtx_pm::{Direct, PmOptions, Pool, Sim};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zen_support::{recover_image, splitmix, DbState};

const WORKERS: usize = 2;
const ACCOUNTS: u64 = 32;
const PER_WORKER: u64 = ACCOUNTS / WORKERS as u64;
const INITIAL: i64 = 1_000;
const TXNS: u64 = 400;
const POOL_SIZE: u64 = 2 << 20;
const STATES_CHECKED: usize = 120;
const RECOVERY_CRASH_STATES: usize = 6;

const RUN_BUDGET: ImageBudget =
    ImageBudget { random_subsets: 3, random_prefixes: 3, exhaustive_limit: 32, all_but_lines: 4 };
const RECOVERY_BUDGET: ImageBudget =
    ImageBudget { random_subsets: 1, random_prefixes: 2, exhaustive_limit: 4, all_but_lines: 1 };

fn tables() -> Vec<TableSchema> {
    vec![
        TableSchema::ordered("accounts").max_value_len(16).max_key_len(16),
        TableSchema::hashed("seq").max_value_len(16).max_key_len(16),
        TableSchema::ordered("hist").max_value_len(40).max_key_len(16),
        TableSchema::hashed("ctr").max_value_len(8).max_key_len(8),
    ]
}

fn options(engine: EngineKind, seed: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.workers = WORKERS;
    options.pool = PoolLocation::InMemory { size: POOL_SIZE };
    options.chunk_size = pmtx_pm::layout::MIN_CHUNK_SIZE;
    options.epoch_interval = Duration::from_millis(1);
    options.pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    options.seed = seed;
    // The shared counter, then history first in the LP order (the paper
    // advises log-like tables first); a tiny cache so reads also go to the
    // heap.
    options.zen = ZenOptions {
        cache_bytes: 4 << 10,
        lp_table_order: vec!["ctr".into(), "hist".into()],
        gc_batch: 8,
        sweep_threshold: 2,
    };
    options
}

fn account_key(account: u64) -> [u8; 8] {
    account.to_be_bytes()
}

fn seq_key(worker: usize) -> Vec<u8> {
    format!("seq/{worker}").into_bytes()
}

fn hist_key(worker: usize, k: u64) -> Vec<u8> {
    let mut key = vec![worker as u8];
    key.extend_from_slice(&k.to_be_bytes());
    key
}

fn hist_value(seed: u64, worker: usize, k: u64) -> Vec<u8> {
    let mut value = format!("w{worker} k{k} ").into_bytes();
    value.resize(24 + (splitmix(seed ^ k) % 16) as usize, b'.');
    value
}

fn transfer(seed: u64, worker: usize, k: u64) -> (u64, u64, i64) {
    let r = splitmix(seed ^ splitmix((worker as u64) << 32 | k));
    let base = worker as u64 * PER_WORKER;
    let from = r % PER_WORKER;
    let mut to = (r >> 16) % PER_WORKER;
    if to == from {
        to = (to + 1) % PER_WORKER;
    }
    (base + from, base + to, ((r >> 32) % 100) as i64 + 1)
}

fn replay(seed: u64, worker: usize, upto: u64) -> BTreeMap<u64, i64> {
    let base = worker as u64 * PER_WORKER;
    let mut balances: BTreeMap<u64, i64> = (base..base + PER_WORKER).map(|a| (a, INITIAL)).collect();
    for k in 1..=upto {
        let (from, to, amount) = transfer(seed, worker, k);
        *balances.get_mut(&from).unwrap() -= amount;
        *balances.get_mut(&to).unwrap() += amount;
    }
    balances
}

const CTR_KEY: &[u8] = b"total";

fn hashed_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..WORKERS).map(seq_key).collect();
    keys.push(CTR_KEY.to_vec());
    keys
}

struct Acks {
    load: u64,
    events: Vec<Vec<u64>>,
    issued: Vec<u64>,
}

impl Acks {
    fn acked_by(&self, worker: usize, event: u64) -> u64 {
        self.events[worker].partition_point(|&ack| ack <= event) as u64
    }
}

fn decode_i64(bytes: &[u8]) -> i64 {
    i64::from_le_bytes(bytes.try_into().expect("8-byte balance"))
}

fn check_state(seed: u64, state: &DbState, acks: &Acks, event: u64) -> Result<(), String> {
    let (accounts, seqs, hist, ctr) = (&state["accounts"], &state["seq"], &state["hist"], &state["ctr"]);
    if accounts.is_empty() && seqs.is_empty() && hist.is_empty() && ctr.is_empty() {
        if event >= acks.load {
            return Err(format!("the load (acknowledged at event {}) is missing", acks.load));
        }
        return Ok(());
    }
    if accounts.len() != ACCOUNTS as usize || seqs.len() != WORKERS || ctr.len() != 1 {
        return Err(format!("partial load: {} accounts, {} sequence rows", accounts.len(), seqs.len()));
    }
    let mut total = 0i64;
    let mut transactions = 0;
    let mut expected_hist = BTreeMap::new();
    for worker in 0..WORKERS {
        let raw = &seqs[&seq_key(worker)];
        let sequence = u64::from_le_bytes(raw.as_slice().try_into().map_err(|_| "bad sequence row".to_string())?);
        let acked = acks.acked_by(worker, event);
        if sequence < acked {
            return Err(format!("worker {worker}: sequence {sequence} recovered but {acked} acknowledged by {event}"));
        }
        transactions += sequence;
        if sequence > acks.issued[worker] {
            return Err(format!("worker {worker}: sequence {sequence} beyond {} issued", acks.issued[worker]));
        }
        for (account, balance) in replay(seed, worker, sequence) {
            let found = accounts.get(&account_key(account)[..]).map(|b| decode_i64(b));
            if found != Some(balance) {
                return Err(format!(
                    "worker {worker}: account {account} holds {found:?}, after transactions 1..={sequence} it \
                     must hold {balance}"
                ));
            }
            total += balance;
        }
        for k in sequence.saturating_sub(2).max(1)..=sequence {
            expected_hist.insert(hist_key(worker, k), hist_value(seed, worker, k));
        }
    }
    if *hist != expected_hist {
        let extra: Vec<_> = hist.keys().filter(|k| !expected_hist.contains_key(*k)).collect();
        let missing: Vec<_> = expected_hist.keys().filter(|k| !hist.contains_key(*k)).collect();
        return Err(format!("history rows differ: extra {extra:?}, missing {missing:?}"));
    }
    if total != ACCOUNTS as i64 * INITIAL {
        return Err(format!("money not conserved: {total}"));
    }
    let counted = u64::from_le_bytes(ctr[CTR_KEY].as_slice().try_into().map_err(|_| "bad counter".to_string())?);
    if counted != transactions {
        return Err(format!("ctr/total is {counted}, but the recovered sequences sum to {transactions}"));
    }
    Ok(())
}

fn run_workload(engine: EngineKind, seed: u64) -> (Vec<CrashState>, Acks, Vec<u8>, pmtx_engine::EngineStats) {
    let pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    let pool = Arc::new(Pool::<Sim>::create_in_memory(POOL_SIZE, pmtx_pm::layout::MIN_CHUNK_SIZE, &pm).unwrap());
    pool.backend().set_capture(CapturePolicy {
        every_nth: 4,
        random_per_million: 100_000,
        at_labels_only: false,
        max_states: 6_000,
    });
    let db = Arc::new(Database::open_on_pool(options(engine, seed), Arc::clone(&pool)).unwrap());
    let accounts = db.table_id("accounts").unwrap();
    let seq = db.table_id("seq").unwrap();
    let hist = db.table_id("hist").unwrap();
    let ctr = db.table_id("ctr").unwrap();
    db.worker(0)
        .unwrap()
        .run(|tx| {
            for account in 0..ACCOUNTS {
                tx.put(accounts, &account_key(account), &INITIAL.to_le_bytes())?;
            }
            for worker in 0..WORKERS {
                tx.put(seq, &seq_key(worker), &0u64.to_le_bytes())?;
            }
            tx.put(ctr, CTR_KEY, &0u64.to_le_bytes())?;
            Ok(())
        })
        .unwrap();
    let load = pool.backend().event_count();
    let events = Arc::new(Mutex::new(vec![Vec::new(); WORKERS]));
    std::thread::scope(|scope| {
        for id in 0..WORKERS {
            let (db, pool, events) = (&db, &pool, &events);
            scope.spawn(move || {
                let mut worker = db.worker(id).unwrap();
                let mut acked = Vec::with_capacity(TXNS as usize);
                for k in 1..=TXNS {
                    let (from, to, amount) = transfer(seed, id, k);
                    let finished = worker
                        .run(|tx| {
                            let a = decode_i64(&tx.get(accounts, &account_key(from))?.expect("from exists"));
                            let b = decode_i64(&tx.get(accounts, &account_key(to))?.expect("to exists"));
                            tx.put(accounts, &account_key(from), &(a - amount).to_le_bytes())?;
                            tx.put(accounts, &account_key(to), &(b + amount).to_le_bytes())?;
                            tx.put(seq, &seq_key(id), &k.to_le_bytes())?;
                            assert!(tx.insert(hist, &hist_key(id, k), &hist_value(seed, id, k))?);
                            if k > 3 {
                                assert!(tx.delete(hist, &hist_key(id, k - 3))?);
                            }
                            let count = decode_i64(&tx.get(ctr, CTR_KEY)?.expect("counter exists"));
                            tx.put(ctr, CTR_KEY, &(count + 1).to_le_bytes())?;
                            Ok(())
                        })
                        .unwrap();
                    assert_eq!(finished.outcome, Outcome::Committed(()));
                    // Acknowledged: `run` returned after the LP fence.
                    acked.push(pool.backend().event_count());
                }
                events.lock().unwrap()[id] = acked;
            });
        }
    });
    let stats = db.stats();
    let db = Arc::into_inner(db).expect("workers dropped");
    db.close().unwrap();
    let states = pool.backend().take_crash_states();
    assert_eq!(pool.backend().dropped_captures(), 0, "capture cap reached");
    let events = std::mem::take(&mut *events.lock().unwrap());
    let issued = events.iter().map(|e| e.len() as u64).collect();
    (states, Acks { load, events, issued }, pool.backend().persisted_image(), stats)
}

fn pick_states(seed: u64, states: Vec<CrashState>, count: usize) -> Vec<CrashState> {
    if states.len() <= count {
        return states;
    }
    // Every "before LP" label is a prime candidate; keep a third of the
    // picks for them, the rest spread evenly.
    let (labelled, others): (Vec<_>, Vec<_>) = states.into_iter().partition(|s| s.label.contains("before LP"));
    let take_evenly = |list: Vec<CrashState>, n: usize, salt: u64| -> Vec<CrashState> {
        if list.len() <= n {
            return list;
        }
        let stride = list.len() as f64 / n as f64;
        let offset = (splitmix(seed ^ salt) % 1000) as f64 / 1000.0 * stride;
        let len = list.len();
        let wanted: std::collections::BTreeSet<usize> =
            (0..n).map(|i| ((offset + i as f64 * stride) as usize).min(len - 1)).collect();
        list.into_iter().enumerate().filter(|(i, _)| wanted.contains(i)).map(|(_, s)| s).collect()
    };
    let mut picked = take_evenly(labelled, count / 3, 1);
    let rest = count - picked.len();
    picked.extend(take_evenly(others, rest, 2));
    picked.sort_by_key(|s| s.event);
    picked
}

/// Recovers on a capturing sim pool and checks that crashing after or
/// during recovery (twice over when `depth` > 1) recovers the same state.
fn check_crash_during_recovery(options: &DbOptions, bytes: &[u8], description: &str, depth: u32) -> (DbState, usize) {
    let seed = options.seed;
    let keys = hashed_keys();
    let (state, pool, _) = recover_image::<Sim>(options, bytes, &keys, |pool| {
        pool.backend().set_capture(CapturePolicy { max_states: 2_000, ..CapturePolicy::all() })
    })
    .unwrap_or_else(|error| panic!("seed {seed:#x}, {description}: {error}"));
    let after = pool.backend().persisted_image();
    let states = pool.backend().take_crash_states();
    drop(pool);
    let (again, _, report) = recover_image::<Direct>(options, &after, &keys, |_| {})
        .unwrap_or_else(|error| panic!("seed {seed:#x}, {description}, recovered twice: {error}"));
    assert_eq!(again, state, "seed {seed:#x}, {description}: recovering the recovered pool changed the state");
    assert_eq!(report.heap_tuples_discarded, 0, "seed {seed:#x}, {description}: a second recovery discarded tuples");
    let count = states.len();
    let picks: Vec<usize> =
        if count <= 6 { (0..count).collect() } else { (0..6).map(|i| i * (count - 1) / 5).collect() };
    let mut images = 0;
    for index in picks {
        for image in states[index].images(seed, RECOVERY_BUDGET) {
            let label = format!("{description}, crash during recovery at {}", image.description);
            let recovered = if depth > 1 && images == 0 {
                check_crash_during_recovery(options, &image.bytes, &label, depth - 1).0
            } else {
                recover_image::<Direct>(options, &image.bytes, &keys, |_| {})
                    .unwrap_or_else(|error| panic!("seed {seed:#x}, {label}: {error}"))
                    .0
            };
            assert_eq!(recovered, state, "seed {seed:#x}, {label}: recovered to another state");
            images += 1;
        }
    }
    (state, images)
}

fn crash_images_recover_acknowledged_prefixes(engine: EngineKind, default_seed: u64) {
    let seed = zen_support::seed(default_seed);
    eprintln!("zen_crash ({engine}): seed {seed:#x} (set PMTX_CRASH_SEED to replay)");
    let started = Instant::now();
    let (states, acks, final_image, stats) = run_workload(engine, seed);
    let captured = states.len();
    assert!(stats.heap_sweeps > 0, "seed {seed:#x}: no tombstone sweep ran: {stats:?}");
    assert!(states.iter().any(|s| s.label.contains("before LP")), "no LP crash point captured");
    let run_time = started.elapsed();
    let options = options(engine, seed);
    let picked = pick_states(seed, states, STATES_CHECKED);
    let recovery_every = (picked.len() / RECOVERY_CRASH_STATES).max(1);
    let keys = hashed_keys();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let tally = Mutex::new((0usize, 0usize, 0usize));
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                if index >= picked.len() || failed.load(Ordering::SeqCst) {
                    return;
                }
                let state = &picked[index];
                let result = catch_unwind(AssertUnwindSafe(|| {
                    let (mut images, mut recovery_images) = (0, 0);
                    for (position, image) in state.images(seed, RUN_BUDGET).enumerate() {
                        let recovered = if position == 0 && index.is_multiple_of(recovery_every) {
                            let depth = if index == 0 { 2 } else { 1 };
                            let (state, checked) =
                                check_crash_during_recovery(&options, &image.bytes, &image.description, depth);
                            recovery_images += checked;
                            state
                        } else {
                            recover_image::<Direct>(&options, &image.bytes, &keys, |_| {})
                                .unwrap_or_else(|error| panic!("seed {seed:#x}, {}: {error}", image.description))
                                .0
                        };
                        if let Err(violation) = check_state(seed, &recovered, &acks, state.event) {
                            panic!("seed {seed:#x}, {} ({}): {violation}", image.description, state.label);
                        }
                        images += 1;
                    }
                    let mut tally = tally.lock().unwrap();
                    tally.0 += 1;
                    tally.1 += images;
                    tally.2 += recovery_images;
                }));
                if let Err(panic) = result {
                    failed.store(true, Ordering::SeqCst);
                    std::panic::resume_unwind(panic);
                }
            });
        }
    });
    let (state, _, report) = recover_image::<Direct>(&options, &final_image, &keys, |_| {})
        .unwrap_or_else(|error| panic!("seed {seed:#x}, final image: {error}"));
    assert!(report.clean_shutdown);
    check_state(seed, &state, &acks, u64::MAX).unwrap_or_else(|v| panic!("seed {seed:#x}, final image: {v}"));
    for worker in 0..WORKERS {
        assert_eq!(decode_i64(&state["seq"][&seq_key(worker)]) as u64, TXNS);
    }
    let (states_checked, images, recovery_images) = tally.into_inner().unwrap();
    eprintln!(
        "zen_crash ({engine}): seed {seed:#x}: captured {captured} states; checked {states_checked} states / {images} \
         images, {recovery_images} images of crashes during recovery; run {run_time:?}, total {:?}; {stats:?}",
        started.elapsed()
    );
    assert_eq!(states_checked, picked.len());
}

#[test]
fn zen_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, 0x2E40_C0DE);
}

#[test]
fn zen_naive_alloc_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::ZenNaiveAlloc, 0x2E40_0A11);
}
