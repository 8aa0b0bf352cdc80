//! Crash consistency of the synchronous-log engines (the DBXN family, the
//! Zen paper's MMDB, SP^3 with its NVM-TX baseline, and the PHyTM family)
//! under the `sim` backend.
//!
//! Two workers run transfers between their own accounts (worker `w` owns
//! accounts `8w..8w+8`), store their sequence number in `seq/<w>`, and
//! every transaction also increments one shared `counter` row — a hot
//! read-modify-write that makes transactions of different workers depend on
//! each other, which is exactly what the parity rule (DBXN) and the
//! dependency sets (SP^3, whose transactions read each other's versions
//! before their logs are durable) must order. The test
//! thread takes checkpoints while they run, then closes the database.
//!
//! Oracle for every crash image of the sampled crash states (recovery on a
//! `Direct` pool over the image):
//! * recovery succeeds;
//! * per worker, the recovered sequence `s` is at least the last one
//!   acknowledged at or before the crash event and at most the last issued,
//!   and the worker's balances equal the replay of its transactions `1..=s`
//!   (no partial transaction);
//! * `counter` equals the sum of the recovered sequences: no transaction
//!   survived that read the effect of a lost one;
//! * money is conserved.
//!
//! Failures name the seed (override with `PMTX_CRASH_SEED`) and the image.

mod support;

use pmtx_engine::{CcProtocol, DbOptions, DbxnOptions, EngineKind, PoolLocation, TableSchema};
use pmtx_pm::sim::{CapturePolicy, CrashState, ImageBudget};
use pmtx_pm::PmOptions;
use std::time::Duration;
use support::{account_key, le_u64, splitmix, Acks, DbState, Recovery, Transfers};

const WORKERS: usize = 2;
const PER_WORKER: u64 = 8;
const ACCOUNTS: u64 = PER_WORKER * WORKERS as u64;
const TXNS: u64 = 150;
const POOL_SIZE: u64 = 4 << 20;
const CHUNK: u64 = 64 << 10;
const STATES_CHECKED: usize = 60;
const BUDGET: ImageBudget =
    ImageBudget { random_subsets: 2, random_prefixes: 2, exhaustive_limit: 16, all_but_lines: 2 };

fn model(seed: u64) -> Transfers {
    Transfers { seed, workers: WORKERS, per_worker: PER_WORKER, seq_key, balance_row, balance_of }
}

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("accounts").max_value_len(512), TableSchema::hashed("meta").max_value_len(16)]
}

fn options(engine: EngineKind, cc: CcProtocol, dbxn: DbxnOptions, seed: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.cc = cc;
    options.workers = WORKERS;
    options.pool = PoolLocation::InMemory { size: POOL_SIZE };
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options.pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    options.seed = seed;
    options.dbxn = dbxn;
    if engine == EngineKind::Mmdb {
        // A DRAM budget of 1 KiB (a few rows): the others live in the pool
        // used as volatile memory, which recovery must ignore.
        options.mmdb.dram_bytes = 1 << 10;
    }
    if engine.is_hybrid() {
        // 10 % injected aborts: every path of the PHyTM family runs.
        options.htm = pmtx_htm::HtmConfig::sim(seed, 100_000);
    }
    options
}

fn seq_key(worker: usize) -> Vec<u8> {
    format!("seq/{worker}").into_bytes()
}

/// Balance rows carry padding (by `k`) so some records are large (256-byte
/// aligned).
fn balance_row(k: u64, balance: i64) -> Vec<u8> {
    let mut row = balance.to_le_bytes().to_vec();
    row.resize(8 + (k as usize * 53) % 300, 0xAB);
    row
}

fn balance_of(row: &[u8]) -> Result<i64, String> {
    let bytes = row.get(..8).ok_or_else(|| format!("a {}-byte balance row", row.len()))?;
    Ok(i64::from_le_bytes(bytes.try_into().unwrap()))
}

fn check_state(seed: u64, state: &DbState, acks: &Acks, event: u64) -> Result<(), String> {
    let (accounts, meta) = (&state["accounts"], &state["meta"]);
    if accounts.is_empty() && meta.is_empty() {
        return acks.check_empty(event);
    }
    if accounts.len() != ACCOUNTS as usize || meta.len() != WORKERS + 1 {
        return Err(format!("partial load: {} accounts, {} meta rows", accounts.len(), meta.len()));
    }
    let sequences = model(seed).check_accounts(acks, event, accounts, meta, |_, _| 0)?;
    let counter = le_u64(meta.get(&b"counter"[..]).ok_or("counter missing")?)?;
    let sequences: u64 = sequences.iter().sum();
    if counter != sequences {
        return Err(format!(
            "counter {counter} but the recovered sequences sum to {sequences}: a surviving transaction read the \
             effect of a lost one"
        ));
    }
    Ok(())
}

fn run_workload(engine: EngineKind, cc: CcProtocol, dbxn: DbxnOptions, seed: u64) -> (Vec<CrashState>, Acks, Vec<u8>) {
    let model = model(seed);
    let options = options(engine, cc, dbxn, seed);
    let capture =
        CapturePolicy { every_nth: 4, random_per_million: 100_000, at_labels_only: false, max_states: 20_000 };
    let (pool, db, load) = model.create_loaded(options, capture, "meta", &[("meta", b"counter", &0u64.to_le_bytes())]);
    let accounts = db.table_id("accounts").unwrap();
    let meta = db.table_id("meta").unwrap();
    let (events, checkpoints) = support::run_workers(&db, WORKERS, Some(Duration::from_millis(3)), |id| {
        let mut worker = db.worker(id).unwrap();
        let mut acked = Vec::new();
        for k in 1..=TXNS {
            let (from, to, amount) = model.transfer(0, id, k);
            worker
                .run(|tx| {
                    let a = balance_of(&tx.get(accounts, &account_key(from))?.expect("from")).unwrap();
                    let b = balance_of(&tx.get(accounts, &account_key(to))?.expect("to")).unwrap();
                    let counter = le_u64(&tx.get(meta, b"counter")?.expect("counter")).unwrap();
                    tx.put(accounts, &account_key(from), &balance_row(k, a - amount))?;
                    tx.put(accounts, &account_key(to), &balance_row(k + 1, b + amount))?;
                    tx.put(meta, b"counter", &(counter + 1).to_le_bytes())?;
                    tx.put(meta, &seq_key(id), &k.to_le_bytes())
                })
                .unwrap();
            // Synchronous commit: durable when `run` returns.
            acked.push(pool.backend().event_count());
        }
        acked
    });
    assert!(checkpoints >= 1);
    if engine == EngineKind::Mmdb {
        let nvm_rows = db.stats().engine_counters.iter().find(|(name, _)| *name == "nvm_rows_now").map_or(0, |c| c.1);
        assert!(nvm_rows > ACCOUNTS / 2, "{nvm_rows} rows in volatile PM");
    }
    db.close().unwrap();
    assert_eq!(pool.backend().dropped_captures(), 0, "capture cap reached");
    let states = pool.backend().take_crash_states();
    (states, Acks::all_acknowledged(load, events), pool.backend().persisted_image())
}

fn crash_images_recover(engine: EngineKind, cc: CcProtocol, dbxn: DbxnOptions) {
    let seed = support::seed(0xDB7_C4A5)
        ^ splitmix(engine.name().len() as u64 * 31 + dbxn.non_temporal as u64 + ((cc as u64) << 8));
    let name = format!("{engine} cc={cc} {dbxn:?}");
    let (states, acks, final_image) = run_workload(engine, cc, dbxn, seed);
    assert!(states.len() > STATES_CHECKED, "{name}: only {} crash states captured", states.len());
    // Evenly spread states over the run, always including the last.
    let stride = states.len() as f64 / STATES_CHECKED as f64;
    let picked: Vec<&CrashState> =
        (0..STATES_CHECKED).map(|i| &states[((i as f64 + 0.5) * stride) as usize]).chain(states.last()).collect();
    let recovery = Recovery::records(options(engine, cc, dbxn, seed));
    let tally =
        recovery.check_images(&name, &picked, BUDGET, None, |state, event| check_state(seed, state, &acks, event));
    let state = recovery.recovered_state(&final_image, &format!("{name}: final image"));
    check_state(seed, &state, &acks, u64::MAX).unwrap_or_else(|v| panic!("{name}: final image: {v}"));
    assert_eq!(le_u64(&state["meta"][&b"counter"[..]]), Ok(TXNS * WORKERS as u64));
    eprintln!("dbxn_crash: {name}, seed {seed:#x}: {} states captured, {} images checked", states.len(), tally.images);
}

#[test]
fn dbxn_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn dbxn_with_cached_unpadded_log_crash_images_recover() {
    crash_images_recover(
        EngineKind::Dbxn,
        CcProtocol::Silo,
        DbxnOptions { non_temporal: false, pad_small_to_line: false, align_large_to_256: false, ..Default::default() },
    );
}

#[test]
fn dbxn_nvm_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::DbxnNvm, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn dbx_naive_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::DbxNaive, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn dbxn_under_wait_die_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::WaitDie, DbxnOptions::default());
}

#[test]
fn dbxn_under_tictoc_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::TicToc, DbxnOptions::default());
}

#[test]
fn dbxn_under_hekaton_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::Hekaton, DbxnOptions::default());
}

#[test]
fn dbxn_under_mvcc_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::Mvcc, DbxnOptions::default());
}

#[test]
fn dbxn_under_cicada_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::Cicada, DbxnOptions::default());
}

#[test]
fn dbxn_under_hstore_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::HStore, DbxnOptions::default());
}

#[test]
fn dbxn_under_occ_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, CcProtocol::Occ, DbxnOptions::default());
}

#[test]
fn mmdb_crash_images_recover_acknowledged_commits() {
    // The DBXN options ask for non-temporal, padded records; mmdb writes
    // plain clwb'd records whatever they say.
    crash_images_recover(EngineKind::Mmdb, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn mmdb_under_cicada_crash_images_recover_acknowledged_commits() {
    // The Zen paper runs its MMDB baseline over Cicada.
    crash_images_recover(EngineKind::Mmdb, CcProtocol::Cicada, DbxnOptions::default());
}

#[test]
fn sp3_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Sp3, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn nvm_tx_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::NvmTx, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn phytm_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Phytm, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn phtm_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Phtm, CcProtocol::Silo, DbxnOptions::default());
}

#[test]
fn two_pl_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::TwoPl, CcProtocol::Silo, DbxnOptions::default());
}
