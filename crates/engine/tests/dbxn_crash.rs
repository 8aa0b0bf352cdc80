//! Crash consistency of the DBXN family under the `sim` backend.
//!
//! Two workers run transfers between their own accounts (worker `w` owns
//! accounts `8w..8w+8`), store their sequence number in `seq/<w>`, and
//! every transaction also increments one shared `counter` row — a hot
//! read-modify-write that makes transactions of different workers depend on
//! each other, which is exactly what the parity rule must order. The test
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

use pmtx_engine::{Database, DbOptions, DbxnOptions, EngineKind, PoolLocation, TableSchema};
use pmtx_pm::sim::{CapturePolicy, CrashState, ImageBudget};
use pmtx_pm::{Direct, PmOptions, Pool, Sim};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WORKERS: usize = 2;
const PER_WORKER: u64 = 8;
const ACCOUNTS: u64 = PER_WORKER * WORKERS as u64;
const INITIAL: i64 = 1_000;
const TXNS: u64 = 150;
const POOL_SIZE: u64 = 4 << 20;
const CHUNK: u64 = 64 << 10;
const STATES_CHECKED: usize = 60;
const BUDGET: ImageBudget =
    ImageBudget { random_subsets: 2, random_prefixes: 2, exhaustive_limit: 16, all_but_lines: 2 };

fn seed() -> u64 {
    std::env::var("PMTX_CRASH_SEED")
        .ok()
        .and_then(|text| {
            let text = text.trim();
            match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => text.parse().ok(),
            }
        })
        .unwrap_or(0xDB7_C4A5)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("accounts").max_value_len(512), TableSchema::hashed("meta").max_value_len(16)]
}

fn options(engine: EngineKind, dbxn: DbxnOptions, seed: u64) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.workers = WORKERS;
    options.pool = PoolLocation::InMemory { size: POOL_SIZE };
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options.pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    options.seed = seed;
    options.dbxn = dbxn;
    options
}

fn account_key(account: u64) -> [u8; 8] {
    account.to_be_bytes()
}

fn seq_key(worker: usize) -> Vec<u8> {
    format!("seq/{worker}").into_bytes()
}

/// Balance rows carry padding so some records are large (256-byte aligned).
fn balance_row(balance: i64, k: u64) -> Vec<u8> {
    let mut row = balance.to_le_bytes().to_vec();
    row.resize(8 + (k as usize * 53) % 300, 0xAB);
    row
}

fn balance_of(row: &[u8]) -> i64 {
    i64::from_le_bytes(row[..8].try_into().expect("8-byte balance"))
}

fn u64_of(row: &[u8]) -> u64 {
    u64::from_le_bytes(row.try_into().expect("8 bytes"))
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

type DbState = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

fn read_state(db: &Database) -> DbState {
    let mut state = DbState::new();
    for schema in tables() {
        let table = db.table(db.table_id(&schema.name).unwrap()).unwrap();
        let mut rows = BTreeMap::new();
        let mut value = Vec::new();
        table.for_each_record(|key, record| {
            let snapshot = record.copy_value(&mut value).expect("no record stays locked after recovery");
            if !snapshot.is_absent() {
                rows.insert(key.to_vec(), value.clone());
            }
        });
        state.insert(schema.name, rows);
    }
    state
}

struct Acks {
    load: u64,
    events: Vec<Vec<u64>>,
}

fn check_state(seed: u64, state: &DbState, acks: &Acks, event: u64) -> Result<(), String> {
    let (accounts, meta) = (&state["accounts"], &state["meta"]);
    if accounts.is_empty() && meta.is_empty() {
        return if event >= acks.load { Err("the acknowledged load is missing".into()) } else { Ok(()) };
    }
    if accounts.len() != ACCOUNTS as usize || meta.len() != WORKERS + 1 {
        return Err(format!("partial load: {} accounts, {} meta rows", accounts.len(), meta.len()));
    }
    let mut total = 0;
    let mut sequences = 0;
    for worker in 0..WORKERS {
        let sequence = u64_of(meta.get(&seq_key(worker)).ok_or("sequence row missing")?);
        let acked = acks.events[worker].partition_point(|&ack| ack <= event) as u64;
        if sequence < acked || sequence > acks.events[worker].len() as u64 {
            return Err(format!(
                "worker {worker}: recovered sequence {sequence}, acknowledged {acked} by event {event}, issued {}",
                acks.events[worker].len()
            ));
        }
        for (account, balance) in replay(seed, worker, sequence) {
            let found = balance_of(accounts.get(&account_key(account)[..]).ok_or("account missing")?);
            if found != balance {
                return Err(format!(
                    "worker {worker}: account {account} holds {found}, replay of 1..={sequence} gives {balance}"
                ));
            }
            total += found;
        }
        sequences += sequence;
    }
    let counter = u64_of(meta.get(&b"counter"[..]).ok_or("counter missing")?);
    if counter != sequences {
        return Err(format!(
            "counter {counter} but the recovered sequences sum to {sequences}: a surviving transaction read the \
             effect of a lost one"
        ));
    }
    if total != ACCOUNTS as i64 * INITIAL {
        return Err(format!("money not conserved: {total}"));
    }
    Ok(())
}

fn recover(engine: EngineKind, dbxn: DbxnOptions, seed: u64, bytes: &[u8]) -> Result<DbState, String> {
    let pool = Arc::new(
        Pool::<Direct>::open_image(bytes, &PmOptions { sim_seed: seed, ..PmOptions::default() })
            .map_err(|error| format!("pool open failed: {error}"))?,
    );
    let db = Database::open_on_pool(options(engine, dbxn, seed), pool).map_err(|e| format!("recovery failed: {e}"))?;
    Ok(read_state(&db))
}

fn run_workload(engine: EngineKind, dbxn: DbxnOptions, seed: u64) -> (Vec<CrashState>, Acks, Vec<u8>) {
    let pm = PmOptions { sim_seed: seed, ..PmOptions::default() };
    let pool = Arc::new(Pool::<Sim>::create_in_memory(POOL_SIZE, CHUNK, &pm).unwrap());
    pool.backend().set_capture(CapturePolicy {
        every_nth: 4,
        random_per_million: 100_000,
        at_labels_only: false,
        max_states: 20_000,
    });
    let db = Arc::new(Database::open_on_pool(options(engine, dbxn, seed), Arc::clone(&pool)).unwrap());
    let accounts = db.table_id("accounts").unwrap();
    let meta = db.table_id("meta").unwrap();
    db.worker(0)
        .unwrap()
        .run(|tx| {
            for account in 0..ACCOUNTS {
                tx.put(accounts, &account_key(account), &balance_row(INITIAL, account))?;
            }
            for worker in 0..WORKERS {
                tx.put(meta, &seq_key(worker), &0u64.to_le_bytes())?;
            }
            tx.put(meta, b"counter", &0u64.to_le_bytes())
        })
        .unwrap();
    let load = pool.backend().event_count();
    let done = Arc::new(AtomicUsize::new(0));
    let events = Arc::new(Mutex::new(vec![Vec::new(); WORKERS]));
    let handles: Vec<_> = (0..WORKERS)
        .map(|id| {
            let (db, pool, done, events) = (Arc::clone(&db), Arc::clone(&pool), Arc::clone(&done), Arc::clone(&events));
            std::thread::spawn(move || {
                let mut worker = db.worker(id).unwrap();
                let mut acked = Vec::new();
                for k in 1..=TXNS {
                    let (from, to, amount) = transfer(seed, id, k);
                    worker
                        .run(|tx| {
                            let a = balance_of(&tx.get(accounts, &account_key(from))?.expect("from"));
                            let b = balance_of(&tx.get(accounts, &account_key(to))?.expect("to"));
                            let counter = u64_of(&tx.get(meta, b"counter")?.expect("counter"));
                            tx.put(accounts, &account_key(from), &balance_row(a - amount, k))?;
                            tx.put(accounts, &account_key(to), &balance_row(b + amount, k + 1))?;
                            tx.put(meta, b"counter", &(counter + 1).to_le_bytes())?;
                            tx.put(meta, &seq_key(id), &k.to_le_bytes())
                        })
                        .unwrap();
                    // Synchronous commit: durable when `run` returns.
                    acked.push(pool.backend().event_count());
                }
                events.lock().unwrap()[id] = acked;
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let mut checkpoints = 0;
    while done.load(Ordering::SeqCst) < WORKERS {
        std::thread::sleep(Duration::from_millis(3));
        db.checkpoint().unwrap();
        checkpoints += 1;
    }
    for handle in handles {
        handle.join().unwrap();
    }
    assert!(checkpoints >= 1);
    let db = Arc::into_inner(db).expect("workers dropped");
    db.close().unwrap();
    assert_eq!(pool.backend().dropped_captures(), 0, "capture cap reached");
    let states = pool.backend().take_crash_states();
    let events = std::mem::take(&mut *events.lock().unwrap());
    (states, Acks { load, events }, pool.backend().persisted_image())
}

fn crash_images_recover(engine: EngineKind, dbxn: DbxnOptions) {
    let seed = seed() ^ splitmix(engine.name().len() as u64 * 31 + dbxn.non_temporal as u64);
    let name = format!("{engine} {dbxn:?}");
    let (states, acks, final_image) = run_workload(engine, dbxn, seed);
    assert!(states.len() > STATES_CHECKED, "{name}: only {} crash states captured", states.len());
    // Evenly spread states over the run, always including the last.
    let stride = states.len() as f64 / STATES_CHECKED as f64;
    let picked: Vec<&CrashState> =
        (0..STATES_CHECKED).map(|i| &states[((i as f64 + 0.5) * stride) as usize]).chain(states.last()).collect();
    let mut images = 0;
    for state in picked {
        for image in state.images(seed, BUDGET) {
            let recovered = recover(engine, dbxn, seed, &image.bytes)
                .unwrap_or_else(|error| panic!("{name}, seed {seed:#x}, {}: {error}", image.description));
            if let Err(violation) = check_state(seed, &recovered, &acks, state.event) {
                panic!("{name}, seed {seed:#x}, {} (event {}): {violation}", image.description, state.event);
            }
            images += 1;
        }
    }
    let state = recover(engine, dbxn, seed, &final_image).unwrap_or_else(|e| panic!("{name}: final image: {e}"));
    check_state(seed, &state, &acks, u64::MAX).unwrap_or_else(|v| panic!("{name}: final image: {v}"));
    assert_eq!(u64_of(&state["meta"][&b"counter"[..]]), TXNS * WORKERS as u64);
    eprintln!("dbxn_crash: {name}, seed {seed:#x}: {} states captured, {images} images checked", states.len());
}

#[test]
fn dbxn_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::Dbxn, DbxnOptions::default());
}

#[test]
fn dbxn_with_cached_unpadded_log_crash_images_recover() {
    crash_images_recover(
        EngineKind::Dbxn,
        DbxnOptions { non_temporal: false, pad_small_to_line: false, align_large_to_256: false },
    );
}

#[test]
fn dbxn_nvm_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::DbxnNvm, DbxnOptions::default());
}

#[test]
fn dbx_naive_crash_images_recover_acknowledged_commits() {
    crash_images_recover(EngineKind::DbxNaive, DbxnOptions::default());
}
