//! Crash consistency of the engines over Zen's tuple heap (`zen`,
//! `zen-naive-alloc`, and `wbl` with its group-commit windows) under the
//! `sim` backend.
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
//! The same run with pipelined commits (`Worker::run_pipelined`, one fence
//! per writing transaction: the LP line of a commit is fenced by a later
//! fence) acknowledges a commit when `drain_acknowledged` reports it, and a
//! crash state is captured right after every acknowledgement. The shared
//! counter makes the workers depend on each other's unfenced commits: the
//! oracle's `ctr/total` check fails if one worker's commit survives a crash
//! that loses an unfenced commit it read. Whether the two threads meet on
//! an unfenced commit is up to the scheduler there, so a third run steps
//! the two workers in lockstep to make both orders happen in every round;
//! with the `fault-injection` feature, that run must catch the broken
//! variants `zen-ack-before-next-fence` and `zen-commits-on-unfenced-writes`.
//!
//! Failures print the seed (override with `PMTX_CRASH_SEED`) and the image.

mod support;

use pmtx_engine::{CcProtocol, DbOptions, EngineKind, Outcome, PoolLocation, TableSchema, ZenOptions};
use pmtx_pm::sim::{CapturePolicy, CrashState};
use pmtx_pm::PmOptions;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{
    account_key, le_i64, le_i64_row, le_u64, splitmix, Acks, DbState, DuringRecovery, Recovery, Transfers,
    RECOVERY_BUDGET, RUN_BUDGET,
};

const WORKERS: usize = 2;
const ACCOUNTS: u64 = 32;
const PER_WORKER: u64 = ACCOUNTS / WORKERS as u64;
const TXNS: u64 = 400;
const POOL_SIZE: u64 = 2 << 20;
const STATES_CHECKED: usize = 120;
const RECOVERY_CRASH_STATES: usize = 6;

fn model(seed: u64) -> Transfers {
    Transfers { seed, workers: WORKERS, per_worker: PER_WORKER, seq_key, balance_row: le_i64_row, balance_of: le_i64 }
}

fn tables() -> Vec<TableSchema> {
    vec![
        TableSchema::ordered("accounts").max_value_len(16).max_key_len(16),
        TableSchema::hashed("seq").max_value_len(16).max_key_len(16),
        TableSchema::ordered("hist").max_value_len(40).max_key_len(16),
        TableSchema::hashed("ctr").max_value_len(8).max_key_len(8),
    ]
}

fn options(engine: EngineKind, cc: CcProtocol, seed: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.cc = cc;
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
    // wbl: windows as long as the other engines' epochs here, so a run's
    // records do not crowd out its other crash points.
    options.wbl.window = Duration::from_millis(1);
    if engine == EngineKind::ZenPlus {
        // 64-byte Met-Cache regions: a transaction passes α at its first
        // row and runs in the exclusive stage, and its new versions go to
        // the heap before its commit once they outgrow the region (direct
        // NVM writes, then the LP tuple).
        options.zen.cache_bytes = 128;
        options.zen_plus.alpha_percent = 95;
    }
    options
}

/// Whether a crash state's label is one of `engine`'s commit points: Zen's
/// "before LP" and unfenced LP lines, wbl's versions before their fence and
/// window records; and the acknowledgements of pipelined runs.
fn is_commit_point(engine: EngineKind, label: &str) -> bool {
    if label == ACK_POINT {
        return true;
    }
    if engine == EngineKind::Wbl {
        label.starts_with("wbl:")
    } else {
        label.contains("before LP") || label.contains("before their commit") || label.contains("LP flushed")
    }
}

/// The crash point captured right after each acknowledgement of a
/// pipelined run.
const ACK_POINT: &str = "zen_crash: right after an acknowledgement";

/// How the workers' transactions are acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acknowledge {
    /// `Worker::run`: durable when it returns.
    AtReturn,
    /// `Worker::run_pipelined`, reported by `drain_acknowledged`.
    Pipelined,
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

const CTR_KEY: &[u8] = b"total";

fn hashed_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..WORKERS).map(seq_key).collect();
    keys.push(CTR_KEY.to_vec());
    keys
}

fn check_state(seed: u64, state: &DbState, acks: &Acks, event: u64) -> Result<(), String> {
    let (accounts, seqs, hist, ctr) = (&state["accounts"], &state["seq"], &state["hist"], &state["ctr"]);
    if accounts.is_empty() && seqs.is_empty() && hist.is_empty() && ctr.is_empty() {
        return acks.check_empty(event);
    }
    if accounts.len() != ACCOUNTS as usize || seqs.len() != WORKERS || ctr.len() != 1 {
        return Err(format!("partial load: {} accounts, {} sequence rows", accounts.len(), seqs.len()));
    }
    let sequences = model(seed).check_accounts(acks, event, accounts, seqs, |_, _| 0)?;
    let mut expected_hist = BTreeMap::new();
    for (worker, &sequence) in sequences.iter().enumerate() {
        for k in sequence.saturating_sub(2).max(1)..=sequence {
            expected_hist.insert(hist_key(worker, k), hist_value(seed, worker, k));
        }
    }
    if *hist != expected_hist {
        let extra: Vec<_> = hist.keys().filter(|k| !expected_hist.contains_key(*k)).collect();
        let missing: Vec<_> = expected_hist.keys().filter(|k| !hist.contains_key(*k)).collect();
        return Err(format!("history rows differ: extra {extra:?}, missing {missing:?}"));
    }
    let counted = le_u64(&ctr[CTR_KEY]).map_err(|error| format!("bad counter: {error}"))?;
    let transactions: u64 = sequences.iter().sum();
    if counted != transactions {
        return Err(format!("ctr/total is {counted}, but the recovered sequences sum to {transactions}"));
    }
    Ok(())
}

/// The workload's tables.
#[derive(Clone, Copy)]
struct TableIds {
    accounts: pmtx_engine::TableId,
    seq: pmtx_engine::TableId,
    hist: pmtx_engine::TableId,
    ctr: pmtx_engine::TableId,
}

impl TableIds {
    fn of(db: &pmtx_engine::Database) -> Self {
        let id = |name| db.table_id(name).unwrap();
        Self { accounts: id("accounts"), seq: id("seq"), hist: id("hist"), ctr: id("ctr") }
    }
}

/// Transaction `k` of worker `id`: its transfer, `seq/<id>` = `k`, history
/// row `k` in and `k-3` out, and the shared counter incremented.
fn transfer(
    tx: &mut pmtx_engine::Transaction<'_>,
    ids: &TableIds,
    model: &Transfers,
    id: usize,
    k: u64,
) -> pmtx_engine::TxResult<()> {
    let seed = model.seed;
    let (from, to, amount) = model.transfer(0, id, k);
    let a = le_i64(&tx.get(ids.accounts, &account_key(from))?.expect("from exists")).unwrap();
    let b = le_i64(&tx.get(ids.accounts, &account_key(to))?.expect("to exists")).unwrap();
    tx.put(ids.accounts, &account_key(from), &(a - amount).to_le_bytes())?;
    tx.put(ids.accounts, &account_key(to), &(b + amount).to_le_bytes())?;
    tx.put(ids.seq, &seq_key(id), &k.to_le_bytes())?;
    assert!(tx.insert(ids.hist, &hist_key(id, k), &hist_value(seed, id, k))?);
    if k > 3 {
        assert!(tx.delete(ids.hist, &hist_key(id, k - 3))?);
    }
    let count = le_i64(&tx.get(ids.ctr, CTR_KEY)?.expect("counter exists")).unwrap();
    tx.put(ids.ctr, CTR_KEY, &(count + 1).to_le_bytes())?;
    Ok(())
}

fn run_workload(
    options: DbOptions,
    acknowledge: Acknowledge,
) -> (Vec<CrashState>, Acks, Vec<u8>, pmtx_engine::EngineStats) {
    let seed = options.seed;
    let model = model(seed);
    let capture = CapturePolicy { every_nth: 4, random_per_million: 100_000, at_labels_only: false, max_states: 6_000 };
    let (pool, db, load) = model.create_loaded(options, capture, "seq", &[("ctr", CTR_KEY, &0u64.to_le_bytes())]);
    let ids = TableIds::of(&db);
    let (events, _) = support::run_workers(&db, WORKERS, None, |id| {
        let mut worker = db.worker(id).unwrap();
        let mut acked = Vec::with_capacity(TXNS as usize);
        // Acknowledged in order; the crash state right after is captured.
        let record = |acked: &mut Vec<u64>, tag: u32| {
            assert_eq!(tag as usize, acked.len() + 1, "acknowledged out of order");
            acked.push(pool.backend().capture_now(ACK_POINT));
        };
        for k in 1..=TXNS {
            let body = |tx: &mut pmtx_engine::Transaction<'_>| transfer(tx, &ids, &model, id, k);
            match acknowledge {
                Acknowledge::AtReturn => {
                    let finished = worker.run(body).unwrap();
                    assert_eq!(finished.outcome, Outcome::Committed(()));
                    // Acknowledged: `run` returned after the LP fence (wbl:
                    // after the window's record).
                    acked.push(pool.backend().event_count());
                }
                Acknowledge::Pipelined => {
                    let (outcome, _) = worker.run_pipelined(k as u32, false, body).unwrap();
                    assert_eq!(outcome, Outcome::Committed(()));
                    worker.drain_acknowledged(|tag, _| record(&mut acked, tag));
                }
            }
        }
        worker.wait_all_acknowledged(|tag, _| record(&mut acked, tag)).unwrap();
        acked
    });
    let stats = db.stats();
    db.close().unwrap();
    let states = pool.backend().take_crash_states();
    assert_eq!(pool.backend().dropped_captures(), 0, "capture cap reached");
    (states, Acks::all_acknowledged(load, events), pool.backend().persisted_image(), stats)
}

fn crash_images_recover_acknowledged_prefixes(engine: EngineKind, cc: CcProtocol, default_seed: u64) {
    check_run(engine, cc, default_seed, Acknowledge::AtReturn, |_| {});
}

/// Runs the workload (`configure` may change the options) and checks its
/// crash images; panics (naming the seed) at the first violation.
fn check_run(
    engine: EngineKind,
    cc: CcProtocol,
    default_seed: u64,
    acknowledge: Acknowledge,
    configure: impl Fn(&mut DbOptions),
) -> pmtx_engine::EngineStats {
    let seed = support::seed(default_seed);
    eprintln!("zen_crash ({engine}, cc={cc}, {acknowledge:?}): seed {seed:#x} (set PMTX_CRASH_SEED to replay)");
    let started = Instant::now();
    let options = {
        let mut options = options(engine, cc, seed);
        configure(&mut options);
        options
    };
    let (states, acks, final_image, stats) = run_workload(options.clone(), acknowledge);
    let captured = states.len();
    assert!(stats.heap_sweeps > 0, "seed {seed:#x}: no tombstone sweep ran: {stats:?}");
    assert!(states.iter().any(|s| is_commit_point(engine, s.label)), "no commit crash point captured");
    if engine == EngineKind::ZenPlus {
        let counter = |name: &str| stats.engine_counters.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
        assert!(counter("exclusive_entries_alpha") > 0, "no exclusive stage: {:?}", stats.engine_counters);
        assert!(counter("direct_nvm_writes") > 0, "no direct NVM write: {:?}", stats.engine_counters);
        assert!(states.iter().any(|s| s.label.contains("before their commit")), "no direct-write crash point");
    }
    let run_time = started.elapsed();
    // Every commit point (and zen+'s direct writes) is a prime candidate.
    let picked = support::pick_states(seed, states, STATES_CHECKED, |state| is_commit_point(engine, state.label));
    let during = DuringRecovery {
        every: (picked.len() / RECOVERY_CRASH_STATES).max(1),
        states: 6,
        budget: RECOVERY_BUDGET,
        first_depth: 2,
    };
    let recovery = Recovery::transactional(options, hashed_keys());
    let tally = recovery.check_images(&format!("{engine}"), &picked, RUN_BUDGET, Some(&during), |state, event| {
        check_state(seed, state, &acks, event)
    });
    let recovered = recovery
        .recover::<pmtx_pm::Direct>(&final_image, |_| {})
        .unwrap_or_else(|error| panic!("seed {seed:#x}, final image: {error}"));
    assert!(recovered.report().clean_shutdown);
    let state = recovered.state;
    check_state(seed, &state, &acks, u64::MAX).unwrap_or_else(|v| panic!("seed {seed:#x}, final image: {v}"));
    for worker in 0..WORKERS {
        assert_eq!(le_u64(&state["seq"][&seq_key(worker)]), Ok(TXNS));
    }
    eprintln!(
        "zen_crash ({engine}): seed {seed:#x}: captured {captured} states; checked {} states / {} images, {} images \
         of crashes during recovery; run {run_time:?}, total {:?}; {stats:?}",
        tally.states,
        tally.images,
        tally.recovery_images,
        started.elapsed()
    );
    assert_eq!(tally.states, picked.len());
    stats
}

#[test]
fn zen_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Silo, 0x2E40_C0DE);
}

/// Pipelined commits (one fence per writing transaction, the LP line's
/// fence left to a later one): every acknowledged commit survives, and no
/// commit survives without the unfenced commits of the other worker it read
/// (the shared counter). How often one worker meets the other's unfenced
/// commit is up to the scheduler here (none is possible);
/// `zen_interleaved_pipelined_commits_recover_acknowledged_prefixes` makes
/// it happen.
fn pipelined_crash_images_recover_acknowledged_prefixes(engine: EngineKind, cc: CcProtocol, default_seed: u64) {
    let stats = check_run(engine, cc, default_seed, Acknowledge::Pipelined, |_| {});
    let counter = |name: &str| stats.engine_counters.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
    assert!(counter("unfenced_completed") >= 2 * TXNS, "{:?}", stats.engine_counters);
}

#[test]
fn zen_pipelined_crash_images_recover_acknowledged_prefixes() {
    pipelined_crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Silo, 0x2E40_F1CE);
}

#[test]
fn zen_pipelined_under_no_wait_crash_images_recover_acknowledged_prefixes() {
    pipelined_crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::NoWait, 0x2E40_F102);
}

#[test]
fn zen_pipelined_under_hekaton_crash_images_recover_acknowledged_prefixes() {
    pipelined_crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Hekaton, 0x2E40_F14E);
}

#[test]
fn zen_naive_alloc_pipelined_crash_images_recover_acknowledged_prefixes() {
    pipelined_crash_images_recover_acknowledged_prefixes(EngineKind::ZenNaiveAlloc, CcProtocol::Silo, 0x2E40_F1A1);
}

#[test]
fn zen_plus_pipelined_crash_images_recover_acknowledged_prefixes() {
    pipelined_crash_images_recover_acknowledged_prefixes(EngineKind::ZenPlus, CcProtocol::Hekaton, 0x2E40_F1B5);
}

/// Rounds of [`interleaved_pipelined_commits`].
const INTERLEAVED_ROUNDS: u64 = 20;

/// A step of [`interleaved_pipelined_commits`] after worker 0's commit.
#[derive(Clone, Copy)]
enum Step {
    SecondCommits,
    SecondReads,
    FirstDrains,
}

/// Two workers' pipelined commits stepped in lockstep (worker 0 on a
/// thread of its own), so that the cross-worker dependency happens in
/// every round instead of when the scheduler makes it: worker 0's commit
/// `k` is left unfenced, then worker 1's commit `k` (`run`: acknowledged
/// at return) reads and overwrites the shared counter worker 0 just wrote,
/// before or after worker 0 drains its acknowledgements (see the rounds
/// below); a crash state is taken after each step. Every image of every
/// state is checked (`check_state`); panics, naming the seed, at the first
/// violation. The ticker's completion of commits left unfenced for a step
/// (at most 5 ms) can pre-empt a round, never all of them.
fn interleaved_pipelined_commits(
    engine: EngineKind,
    cc: CcProtocol,
    default_seed: u64,
    configure: impl Fn(&mut DbOptions),
) -> (support::Tally, pmtx_engine::EngineStats) {
    let seed = support::seed(default_seed);
    eprintln!(
        "zen_crash ({engine}, cc={cc}, interleaved pipelined commits): seed {seed:#x} (set PMTX_CRASH_SEED to replay)"
    );
    let options = {
        let mut options = options(engine, cc, seed);
        options.epoch_interval = Duration::from_secs(1);
        configure(&mut options);
        options
    };
    let model = model(seed);
    let (pool, db, load) =
        model.create_loaded(options.clone(), CapturePolicy::NONE, "seq", &[("ctr", CTR_KEY, &0u64.to_le_bytes())]);
    let ids = TableIds::of(&db);
    // Worker 0 runs on its own thread (a fence orders only its own
    // thread's flushes), in lockstep with this one: `Some(k)` commits its
    // transaction `k`, `None` drains its acknowledgements.
    let (to_first, first_inbox) = std::sync::mpsc::channel::<Option<u64>>();
    let (first_done, from_first) = std::sync::mpsc::channel::<()>();
    let mut states = Vec::new();
    let mut second_acks = Vec::new();
    let first_acks = std::thread::scope(|scope| {
        let (db, pool, ids, model) = (&db, &pool, &ids, &model);
        let first = scope.spawn(move || {
            let mut worker = db.worker(0).unwrap();
            let mut acks = Vec::new();
            let record = |acks: &mut Vec<u64>, tag: u32| {
                assert_eq!(tag as usize, acks.len() + 1, "acknowledged out of order");
                acks.push(pool.backend().event_count());
            };
            while let Ok(step) = first_inbox.recv() {
                match step {
                    Some(k) => {
                        let (outcome, _) =
                            worker.run_pipelined(k as u32, false, |tx| transfer(tx, ids, model, 0, k)).unwrap();
                        assert_eq!(outcome, Outcome::Committed(()));
                    }
                    None => worker.drain_acknowledged(|tag, _| record(&mut acks, tag)),
                }
                first_done.send(()).unwrap();
            }
            worker.wait_all_acknowledged(|tag, _| record(&mut acks, tag)).unwrap();
            acks
        });
        let mut second = db.worker(1).unwrap();
        let first_step = |step: Option<u64>| {
            to_first.send(step).unwrap();
            from_first.recv().unwrap();
        };
        for k in 1..=INTERLEAVED_ROUNDS {
            first_step(Some(k));
            // Odd rounds: worker 1 commits on worker 0's unfenced commit
            // first; even rounds: worker 0 drains first, then worker 1
            // reads the counter (a read-only transaction acknowledged at
            // return: it fences worker 0's commit again) and commits.
            let steps: &[Step] = if k % 2 == 1 {
                &[Step::SecondCommits, Step::FirstDrains]
            } else {
                &[Step::FirstDrains, Step::SecondReads, Step::SecondCommits]
            };
            for step in steps {
                match step {
                    Step::SecondCommits => {
                        let finished = second.run(|tx| transfer(tx, ids, model, 1, k)).unwrap();
                        assert_eq!(finished.outcome, Outcome::Committed(()));
                        second_acks.push(pool.backend().event_count());
                    }
                    Step::SecondReads => {
                        let finished = second.run_read_only(|tx| tx.get(ids.ctr, CTR_KEY)).unwrap();
                        let count = le_u64(&finished.committed().flatten().expect("counter exists"));
                        assert_eq!(count, Ok(2 * k - 1));
                    }
                    Step::FirstDrains => first_step(None),
                }
                states.push(pool.backend().crash_state_now(ACK_POINT));
            }
        }
        drop(to_first);
        first.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    states.push(pool.backend().crash_state_now(ACK_POINT));
    let stats = db.stats();
    db.close().unwrap();
    let acks = Acks::all_acknowledged(load, vec![first_acks, second_acks]);
    let recovery = Recovery::transactional(options, hashed_keys());
    let tally = recovery.check_images("interleaved pipelined commits", &states, RUN_BUDGET, None, |state, event| {
        check_state(seed, state, &acks, event)
    });
    assert_eq!(tally.states, states.len());
    (tally, stats)
}

fn interleaved_pipelined_commits_recover_acknowledged_prefixes(
    engine: EngineKind,
    cc: CcProtocol,
    default_seed: u64,
    configure: impl Fn(&mut DbOptions),
) {
    let (tally, stats) = interleaved_pipelined_commits(engine, cc, default_seed, configure);
    // Some states had lines still pending (the unfenced commits), and
    // worker 1's reads fenced worker 0's unfenced commits again.
    assert!(tally.images > tally.states, "{tally:?}");
    let counter = |name: &str| stats.engine_counters.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
    assert!(counter("unfenced_fenced_again") > 0, "{:?}", stats.engine_counters);
}

#[test]
fn zen_interleaved_pipelined_commits_recover_acknowledged_prefixes() {
    interleaved_pipelined_commits_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Silo, 0x2E40_F11E, |_| {});
}

#[test]
fn zen_interleaved_under_no_wait_recover_acknowledged_prefixes() {
    interleaved_pipelined_commits_recover_acknowledged_prefixes(
        EngineKind::Zen,
        CcProtocol::NoWait,
        0x2E40_F12E,
        |_| {},
    );
}

#[test]
fn zen_interleaved_under_hekaton_recover_acknowledged_prefixes() {
    interleaved_pipelined_commits_recover_acknowledged_prefixes(
        EngineKind::Zen,
        CcProtocol::Hekaton,
        0x2E40_F13E,
        |_| {},
    );
}

#[test]
fn zen_naive_alloc_interleaved_recover_acknowledged_prefixes() {
    interleaved_pipelined_commits_recover_acknowledged_prefixes(
        EngineKind::ZenNaiveAlloc,
        CcProtocol::Silo,
        0x2E40_F14E,
        |_| {},
    );
}

#[test]
fn zen_plus_interleaved_recover_acknowledged_prefixes() {
    // Regions large enough to stay out of the exclusive stage, whose
    // commits are not pipelined.
    interleaved_pipelined_commits_recover_acknowledged_prefixes(
        EngineKind::ZenPlus,
        CcProtocol::Hekaton,
        0x2E40_F15E,
        |options| options.zen.cache_bytes = 64 << 10,
    );
}

/// The controls: the interleaved pipelined commits must catch each broken
/// variant of the pipelined commit (feature `fault-injection`: `cargo test -p pmtx-engine
/// --features fault-injection --test zen_crash`).
#[cfg(feature = "fault-injection")]
fn pipelined_broken_variant_is_caught(fault: pmtx_engine::Fault, default_seed: u64) {
    let caught = std::panic::catch_unwind(|| {
        interleaved_pipelined_commits(EngineKind::Zen, CcProtocol::Silo, default_seed, |options| {
            options.fault = Some(fault)
        })
    });
    let message = match caught {
        Ok((tally, _)) => panic!("interleaved pipelined commits ({tally:?}) missed {}", fault.name()),
        Err(panic) => support::panic_message(&*panic),
    };
    eprintln!("{} caught: {message}", fault.name());
}

#[cfg(feature = "fault-injection")]
#[test]
fn zen_ack_before_next_fence_is_caught() {
    pipelined_broken_variant_is_caught(pmtx_engine::Fault::ZenAckBeforeNextFence, 0x2E40_FA01);
}

#[cfg(feature = "fault-injection")]
#[test]
fn zen_commits_on_unfenced_writes_is_caught() {
    pipelined_broken_variant_is_caught(pmtx_engine::Fault::ZenCommitsOnUnfencedWrites, 0x2E40_FA02);
}

#[test]
fn zen_naive_alloc_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::ZenNaiveAlloc, CcProtocol::Silo, 0x2E40_0A11);
}

#[test]
fn zen_under_no_wait_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::NoWait, 0x2E40_02B1);
}

#[test]
fn zen_under_tictoc_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::TicToc, 0x2E40_71C7);
}

#[test]
fn zen_under_hekaton_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Hekaton, 0x2E40_4E4A);
}

#[test]
fn zen_under_cicada_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Cicada, 0x2E40_C1CA);
}

#[test]
fn zen_under_mvcc_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::Mvcc, 0x2E40_3CC0);
}

#[test]
fn zen_under_hstore_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::HStore, 0x2E40_4570);
}

#[test]
fn zen_under_dl_detect_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Zen, CcProtocol::DlDetect, 0x2E40_0D1D);
}

#[test]
fn wbl_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::Wbl, CcProtocol::Silo, 0x2E40_0B1E);
}

#[test]
fn wbl_under_cicada_crash_images_recover_acknowledged_prefixes() {
    // The Zen paper runs its WBL baseline over Cicada.
    crash_images_recover_acknowledged_prefixes(EngineKind::Wbl, CcProtocol::Cicada, 0x2E40_0B1C);
}

/// zen+ with every transaction in the exclusive stage and most of them
/// writing tuples to the heap before their commit (see `options`).
#[test]
fn zen_plus_exclusive_crash_images_recover_acknowledged_prefixes() {
    crash_images_recover_acknowledged_prefixes(EngineKind::ZenPlus, CcProtocol::Hekaton, 0x2E40_9105);
}
