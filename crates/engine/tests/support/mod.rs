//! Helpers shared by the engine's crash and recovery tests (`mod support;`
//! in `dbxn_crash`, `group_commit_crash`, `zen_crash`, `zen_recovery`,
//! `recovery`; `zen_support` re-exports it for `zen_cache`):
//!
//! * seeds and the deterministic mixer;
//! * capturing `Sim` pools, and running workers while the test thread takes
//!   checkpoints;
//! * reading a database's contents (raw records, or through a read-only
//!   transaction), and recovering a crash image on any backend, catching
//!   panics;
//! * checking every image of a set of crash states against an oracle, with
//!   crashes during recovery (recovering must be idempotent and restartable);
//! * the transfer workload model (per-worker accounts, replayed balances,
//!   acknowledged sequences) the crash oracles share;
//! * a decoder for the `zen` heap layout documented in `src/zen/heap.rs`
//!   (used to find and edit LP bits in images).

// Every test crate compiles this module and uses only part of it.
#![allow(dead_code)]

use pmtx_engine::internals::pool_layout::{ZEN_HEAP_CHUNK_KIND, ZEN_HEAP_CHUNK_KIND_FORMATTED, ZEN_HEAP_FREE_WORD0};
use pmtx_engine::{
    Database, DbOptions, PoolLocation, PrimaryIndexKind, RecoveryReport, ScanDirection, TableId, TableSchema,
};
use pmtx_pm::sim::{CapturePolicy, CrashState, ImageBudget};
use pmtx_pm::{Direct, PmBackend, PmOptions, Pool, Sim};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Seeds.

/// The seed: `PMTX_CRASH_SEED` (decimal or 0x-hex) or `default`.
pub fn seed(default: u64) -> u64 {
    std::env::var("PMTX_CRASH_SEED")
        .ok()
        .and_then(|text| {
            let text = text.trim();
            match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => text.parse().ok(),
            }
        })
        .unwrap_or(default)
}

pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Default PM options with the crash simulator seeded by `seed`.
pub fn pm_options(seed: u64) -> PmOptions {
    PmOptions { sim_seed: seed, ..PmOptions::default() }
}

// ---------------------------------------------------------------------------
// Pools and workers.

/// A fresh in-memory pool of the size, chunk size and PM options of
/// `options`.
pub fn memory_pool<B: PmBackend>(options: &DbOptions) -> Arc<Pool<B>> {
    let PoolLocation::InMemory { size } = options.pool else { panic!("not an in-memory pool: {:?}", options.pool) };
    Arc::new(Pool::<B>::create_in_memory(size, options.chunk_size, &options.pm).unwrap())
}

/// A fresh in-memory `Sim` pool for `options` ([`memory_pool`]); captures
/// crash states with `capture`, if given.
pub fn sim_pool(options: &DbOptions, capture: Option<CapturePolicy>) -> Arc<Pool<Sim>> {
    let pool = memory_pool::<Sim>(options);
    if let Some(capture) = capture {
        pool.backend().set_capture(capture);
    }
    pool
}

/// Runs `body(id)` for every worker id `0..workers` on its own thread while
/// the test thread waits, taking a checkpoint every `checkpoint_every` if
/// given. Returns the results by id and the number of checkpoints taken.
pub fn run_workers<T: Send>(
    db: &Database,
    workers: usize,
    checkpoint_every: Option<Duration>,
    body: impl Fn(usize) -> T + Sync,
) -> (Vec<T>, usize) {
    std::thread::scope(|scope| {
        let body = &body;
        let handles: Vec<_> = (0..workers).map(|id| scope.spawn(move || body(id))).collect();
        let mut checkpoints = 0;
        if let Some(interval) = checkpoint_every {
            // At least one checkpoint, even when a descheduled main thread
            // first looks after every worker is done: the crash images must
            // include a checkpoint's steps.
            loop {
                std::thread::sleep(interval);
                db.checkpoint().unwrap();
                checkpoints += 1;
                if handles.iter().all(|handle| handle.is_finished()) {
                    break;
                }
            }
        }
        let results = handles
            .into_iter()
            .map(|handle| handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect();
        (results, checkpoints)
    })
}

// ---------------------------------------------------------------------------
// Reading a database.

/// The present rows of one table.
pub type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every present row by table name.
pub type DbState = BTreeMap<String, Rows>;

/// Every present record of table `name`, read directly (no transaction).
pub fn table_rows(db: &Database, name: &str) -> Rows {
    let table = pmtx_engine::internals::dram_table(db, db.table_id(name).unwrap()).unwrap().expect("DRAM records");
    let mut rows = Rows::new();
    let mut value = Vec::new();
    table.for_each_row(|key, record| {
        let snapshot = record.copy_value(&mut value).expect("no record stays locked after recovery");
        if !snapshot.is_absent() {
            rows.insert(key.to_vec(), value.clone());
        }
    });
    rows
}

/// Every present record of every table, read directly (no transaction).
pub fn record_state(db: &Database, tables: &[TableSchema]) -> DbState {
    tables.iter().map(|schema| (schema.name.clone(), table_rows(db, &schema.name))).collect()
}

/// The contents through a read-only transaction: ordered tables are
/// scanned; for hashed tables the given `hashed_keys` are read.
pub fn read_state(db: &Database, tables: &[TableSchema], hashed_keys: &[Vec<u8>]) -> DbState {
    let mut worker = db.worker(0).unwrap();
    let state = read_state_with(&mut worker, db, tables, hashed_keys);
    drop(worker);
    state
}

/// [`read_state`] on `worker`, for a test that holds worker 0 (only one
/// worker of an id may exist at a time).
pub fn read_state_with(
    worker: &mut pmtx_engine::Worker,
    db: &Database,
    tables: &[TableSchema],
    hashed_keys: &[Vec<u8>],
) -> DbState {
    let state = worker
        .run_read_only(|tx| {
            let mut state = DbState::new();
            for schema in tables {
                let table = db.table_id(&schema.name).unwrap();
                let mut rows = Rows::new();
                if schema.primary == PrimaryIndexKind::Ordered {
                    for (key, value) in
                        tx.scan(table, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX)?
                    {
                        rows.insert(key, value);
                    }
                } else {
                    for key in hashed_keys {
                        if let Some(value) = tx.get(table, key)? {
                            rows.insert(key.clone(), value);
                        }
                    }
                }
                state.insert(schema.name.clone(), rows);
            }
            Ok(state)
        })
        .unwrap()
        .committed()
        .unwrap();
    // The engine's own audit (for Zen: no heap slot both live and free).
    if let Err(error) = db.check_structure() {
        panic!("engine structure audit failed: {error}");
    }
    state
}

/// A little-endian `u64` row.
pub fn le_u64(bytes: &[u8]) -> Result<u64, String> {
    Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| format!("expected 8 bytes, found {}", bytes.len()))?))
}

/// A little-endian `i64` row holding `balance` (for any account).
pub fn le_i64_row(_: u64, balance: i64) -> Vec<u8> {
    balance.to_le_bytes().to_vec()
}

/// A little-endian `i64` row.
pub fn le_i64(bytes: &[u8]) -> Result<i64, String> {
    le_u64(bytes).map(|value| value as i64)
}

// ---------------------------------------------------------------------------
// Recovering images.

/// The text of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A recovered image.
pub struct Recovered<B: PmBackend> {
    pub state: DbState,
    pub pool: Arc<Pool<B>>,
    /// What recovery reported (the engines that report one).
    pub report: Option<RecoveryReport>,
}

impl<B: PmBackend> Recovered<B> {
    /// The recovery report of an engine that always reports one.
    pub fn report(&self) -> &RecoveryReport {
        self.report.as_ref().expect("the engine reports its recovery")
    }
}

/// How a test recovers crash images: the database options and how the
/// recovered contents are read.
#[derive(Clone)]
pub struct Recovery {
    pub options: DbOptions,
    /// `None`: every record is read directly ([`record_state`]); `Some`:
    /// through a transaction, with these keys of hashed tables
    /// ([`read_state`]).
    pub hashed_keys: Option<Vec<Vec<u8>>>,
}

/// Images checked per crash state of a workload run.
pub const RUN_BUDGET: ImageBudget =
    ImageBudget { random_subsets: 3, random_prefixes: 3, exhaustive_limit: 32, all_but_lines: 4 };

/// Images checked per crash state captured during a recovery.
pub const RECOVERY_BUDGET: ImageBudget =
    ImageBudget { random_subsets: 1, random_prefixes: 2, exhaustive_limit: 4, all_but_lines: 1 };

/// Crashes during recovery: the first image of every `every`-th checked
/// crash state (the first included) is recovered on a capturing `Sim` pool;
/// `states` of the crash states captured during that recovery are checked
/// with `budget`, for the first checked state nested `first_depth` deep.
#[derive(Clone, Copy)]
pub struct DuringRecovery {
    pub every: usize,
    pub states: usize,
    pub budget: ImageBudget,
    pub first_depth: u32,
}

/// What [`Recovery::check_images`] checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub states: usize,
    pub images: usize,
    /// Recoveries crashed, and the images of those crashes checked.
    pub recovery_states: usize,
    pub recovery_images: usize,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Self) {
        self.states += other.states;
        self.images += other.images;
        self.recovery_states += other.recovery_states;
        self.recovery_images += other.recovery_images;
    }
}

impl Recovery {
    /// Reads every record directly after recovery.
    pub fn records(options: DbOptions) -> Self {
        Self { options, hashed_keys: None }
    }

    /// Reads through a transaction after recovery (`hashed_keys` of hashed
    /// tables).
    pub fn transactional(options: DbOptions, hashed_keys: Vec<Vec<u8>>) -> Self {
        Self { options, hashed_keys: Some(hashed_keys) }
    }

    pub fn seed(&self) -> u64 {
        self.options.seed
    }

    pub fn read(&self, db: &Database) -> DbState {
        match &self.hashed_keys {
            None => record_state(db, &self.options.tables),
            Some(keys) => read_state(db, &self.options.tables, keys),
        }
    }

    /// Opens `bytes` on backend `B`, recovers, reads the state; `Err` on a
    /// recovery error or panic. `before_open` may configure the pool.
    pub fn recover<B: PmBackend>(
        &self,
        bytes: &[u8],
        before_open: impl FnOnce(&Pool<B>),
    ) -> Result<Recovered<B>, String> {
        catch_unwind(AssertUnwindSafe(|| {
            let pool = Arc::new(
                Pool::<B>::open_image(bytes, &pm_options(self.options.pm.sim_seed))
                    .map_err(|error| format!("pool open failed: {error}"))?,
            );
            before_open(&pool);
            let db = Database::open_on_pool(self.options.clone(), Arc::clone(&pool))
                .map_err(|error| format!("recovery failed: {error}"))?;
            let report = db.stats().recovery;
            let state = self.read(&db);
            drop(db);
            Ok(Recovered { state, pool, report })
        }))
        .unwrap_or_else(|panic| Err(format!("recovery panicked: {}", panic_message(&*panic))))
    }

    /// Recovers `bytes` on a `Direct` pool; panics (naming the seed and
    /// `what`) if recovery fails.
    pub fn recovered_state(&self, bytes: &[u8], what: &str) -> DbState {
        let seed = self.seed();
        self.recover::<Direct>(bytes, |_| {}).unwrap_or_else(|error| panic!("seed {seed:#x}, {what}: {error}")).state
    }

    /// Recovers on a capturing sim pool and checks that crashing after or
    /// during recovery (nested `depth` deep) recovers the same state, and
    /// that a second recovery discards nothing. Returns the state and the
    /// number of mid-recovery crash images checked at this level.
    pub fn check_crash_during_recovery(
        &self,
        bytes: &[u8],
        description: &str,
        during: &DuringRecovery,
        depth: u32,
    ) -> (DbState, usize) {
        let seed = self.seed();
        let first = self
            .recover::<Sim>(bytes, |pool| {
                pool.backend().set_capture(CapturePolicy { max_states: 2_000, ..CapturePolicy::all() })
            })
            .unwrap_or_else(|error| panic!("seed {seed:#x}, {description}: {error}"));
        let after = first.pool.backend().persisted_image();
        let states = first.pool.backend().take_crash_states();
        let state = first.state;
        drop(first.pool);
        let again = self
            .recover::<Direct>(&after, |_| {})
            .unwrap_or_else(|error| panic!("seed {seed:#x}, {description}, recovered twice: {error}"));
        assert_eq!(
            again.state, state,
            "seed {seed:#x}, {description}: recovering the recovered pool changed the state"
        );
        let discarded = again.report.map_or(0, |report| report.heap_tuples_discarded);
        assert_eq!(discarded, 0, "seed {seed:#x}, {description}: a second recovery discarded tuples");
        // Spread a handful of mid-recovery crash states over the recovery.
        let count = states.len();
        let n = during.states;
        let picks: Vec<usize> =
            if count <= n { (0..count).collect() } else { (0..n).map(|i| i * (count - 1) / (n - 1)).collect() };
        let mut images = 0;
        for index in picks {
            for image in states[index].images(seed, during.budget) {
                let label = format!("{description}, crash during recovery at {}", image.description);
                let recovered = if depth > 1 && images == 0 {
                    self.check_crash_during_recovery(&image.bytes, &label, during, depth - 1).0
                } else {
                    self.recovered_state(&image.bytes, &label)
                };
                assert_eq!(recovered, state, "seed {seed:#x}, {label}: recovered to another state");
                images += 1;
            }
        }
        (state, images)
    }

    /// Recovers every image (within `budget`) of every state in `picked` on
    /// two threads and checks it with `oracle(state, crash event)`; crashes
    /// during recovery as `during` says. `context` names the run in failures.
    pub fn check_images<S: Borrow<CrashState> + Sync>(
        &self,
        context: &str,
        picked: &[S],
        budget: ImageBudget,
        during: Option<&DuringRecovery>,
        oracle: impl Fn(&DbState, u64) -> Result<(), String> + Sync,
    ) -> Tally {
        let seed = self.seed();
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let tally = Mutex::new(Tally::default());
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= picked.len() || failed.load(Ordering::SeqCst) {
                        return;
                    }
                    let state = picked[index].borrow();
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        let mut checked = Tally { states: 1, ..Tally::default() };
                        for (position, image) in state.images(seed, budget).enumerate() {
                            let description = format!("{context}, {} ({})", image.description, state.label);
                            let recovered = match during {
                                Some(during) if position == 0 && index.is_multiple_of(during.every) => {
                                    let depth = if index == 0 { during.first_depth } else { 1 };
                                    let (recovered, images) =
                                        self.check_crash_during_recovery(&image.bytes, &description, during, depth);
                                    checked.recovery_states += 1;
                                    checked.recovery_images += images;
                                    recovered
                                }
                                _ => self.recovered_state(&image.bytes, &description),
                            };
                            if let Err(violation) = oracle(&recovered, state.event) {
                                panic!("seed {seed:#x}, {description}, event {}: {violation}", state.event);
                            }
                            checked.images += 1;
                        }
                        *tally.lock().unwrap() += checked;
                    }));
                    if let Err(panic) = result {
                        failed.store(true, Ordering::SeqCst);
                        std::panic::resume_unwind(panic);
                    }
                });
            }
        });
        tally.into_inner().unwrap()
    }
}

// ---------------------------------------------------------------------------
// Choosing crash states.

/// Picks `count` states: the `prime` ones first (a third of the picks,
/// evenly thinned if too many), then evenly spread others, deterministic in
/// `seed`; in event order.
pub fn pick_states(
    seed: u64,
    states: Vec<CrashState>,
    count: usize,
    prime: impl Fn(&CrashState) -> bool,
) -> Vec<CrashState> {
    if states.len() <= count {
        return states;
    }
    let (labelled, others): (Vec<_>, Vec<_>) = states.into_iter().partition(|state| prime(state));
    let take_evenly = |list: Vec<CrashState>, n: usize, salt: u64| -> Vec<CrashState> {
        if list.len() <= n {
            return list;
        }
        let stride = list.len() as f64 / n as f64;
        let offset = (splitmix(seed ^ salt) % 1000) as f64 / 1000.0 * stride;
        let len = list.len();
        let wanted: BTreeSet<usize> = (0..n).map(|i| ((offset + i as f64 * stride) as usize).min(len - 1)).collect();
        list.into_iter().enumerate().filter(|(i, _)| wanted.contains(i)).map(|(_, s)| s).collect()
    };
    let mut picked = take_evenly(labelled, count / 3, 1);
    let rest = count - picked.len();
    picked.extend(take_evenly(others, rest, 2));
    picked.sort_by_key(|s| s.event);
    picked
}

// ---------------------------------------------------------------------------
// The transfer workload.

pub fn account_key(account: u64) -> [u8; 8] {
    account.to_be_bytes()
}

/// What every account holds after the load.
pub const INITIAL_BALANCE: i64 = 1_000;

/// Transfers between accounts: worker `w` owns accounts
/// `per_worker * w..per_worker * (w + 1)`, each loaded with
/// [`INITIAL_BALANCE`], so
/// its effect on the balances is a deterministic function of how many of its
/// transactions survived.
#[derive(Clone, Copy, Debug)]
pub struct Transfers {
    pub seed: u64,
    pub workers: usize,
    pub per_worker: u64,
    /// The key of worker `w`'s sequence row (the number of its transactions
    /// that committed).
    pub seq_key: fn(usize) -> Vec<u8>,
    /// The row of `account` holding a balance, and the balance in a row.
    pub balance_row: fn(u64, i64) -> Vec<u8>,
    pub balance_of: fn(&[u8]) -> Result<i64, String>,
}

impl Transfers {
    pub fn accounts(&self) -> u64 {
        self.per_worker * self.workers as u64
    }

    /// Transaction `k` (from 1) of `worker` with `salt` (0 unless a later
    /// life changes it): (from, to, amount).
    pub fn transfer(&self, salt: u64, worker: usize, k: u64) -> (u64, u64, i64) {
        let r = splitmix(self.seed ^ splitmix(salt.wrapping_mul(0x9E37_79B9) ^ ((worker as u64) << 32 | k)));
        let base = worker as u64 * self.per_worker;
        let from = r % self.per_worker;
        let mut to = (r >> 16) % self.per_worker;
        if to == from {
            to = (to + 1) % self.per_worker;
        }
        (base + from, base + to, ((r >> 32) % 100) as i64 + 1)
    }

    /// Creates a database on a fresh `Sim` pool capturing with `capture`
    /// ([`sim_pool`]) and loads it in one transaction: every account of
    /// table `accounts` holding [`INITIAL_BALANCE`], every worker's sequence
    /// row of `seq_table` at 0, and every `(table, key, value)` of `extra`.
    /// Returns the pool, the database and the event count when the load was
    /// acknowledged.
    pub fn create_loaded(
        &self,
        options: DbOptions,
        capture: CapturePolicy,
        seq_table: &str,
        extra: &[(&str, &[u8], &[u8])],
    ) -> (Arc<Pool<Sim>>, Database, u64) {
        let pool = sim_pool(&options, Some(capture));
        let db = Database::open_on_pool(options, Arc::clone(&pool)).unwrap();
        let accounts = db.table_id("accounts").unwrap();
        let seqs = db.table_id(seq_table).unwrap();
        let extra: Vec<(TableId, &[u8], &[u8])> =
            extra.iter().map(|&(table, key, value)| (db.table_id(table).unwrap(), key, value)).collect();
        db.worker(0)
            .unwrap()
            .run(|tx| {
                for account in 0..self.accounts() {
                    tx.put(accounts, &account_key(account), &(self.balance_row)(account, INITIAL_BALANCE))?;
                }
                for worker in 0..self.workers {
                    tx.put(seqs, &(self.seq_key)(worker), &0u64.to_le_bytes())?;
                }
                for &(table, key, value) in &extra {
                    tx.put(table, key, value)?;
                }
                Ok(())
            })
            .unwrap();
        let load = pool.backend().event_count();
        (pool, db, load)
    }

    /// Balances of `worker`'s accounts after its transactions `1..=upto`,
    /// transaction `k` with salt `salt(k)`.
    pub fn replay(&self, worker: usize, upto: u64, salt: impl Fn(u64) -> u64) -> BTreeMap<u64, i64> {
        let base = worker as u64 * self.per_worker;
        let mut balances: BTreeMap<u64, i64> = (base..base + self.per_worker).map(|a| (a, INITIAL_BALANCE)).collect();
        for k in 1..=upto {
            let (from, to, amount) = self.transfer(salt(k), worker, k);
            *balances.get_mut(&from).unwrap() -= amount;
            *balances.get_mut(&to).unwrap() += amount;
        }
        balances
    }

    /// Checks the recovered `accounts` and sequence rows `seqs` against
    /// `acks` for a crash at `event`: each worker's sequence lies between
    /// the acknowledged and the issued one, its balances are exactly the
    /// replay of its transactions up to it (transaction `k` of worker `w`
    /// with salt `salt(w, k)`), and money is conserved. Returns the
    /// recovered sequences.
    pub fn check_accounts(
        &self,
        acks: &Acks,
        event: u64,
        accounts: &Rows,
        seqs: &Rows,
        salt: impl Fn(usize, u64) -> u64,
    ) -> Result<Vec<u64>, String> {
        let mut total = 0i64;
        let mut sequences = Vec::with_capacity(self.workers);
        for worker in 0..self.workers {
            let key = (self.seq_key)(worker);
            let raw =
                seqs.get(&key).ok_or_else(|| format!("sequence row {:?} missing", String::from_utf8_lossy(&key)))?;
            let sequence = le_u64(raw).map_err(|error| format!("worker {worker}: bad sequence row: {error}"))?;
            acks.check_sequence(worker, sequence, event)?;
            for (account, expected) in self.replay(worker, sequence, |k| salt(worker, k)) {
                let raw =
                    accounts.get(&account_key(account)[..]).ok_or_else(|| format!("account {account} missing"))?;
                let found = (self.balance_of)(raw).map_err(|error| format!("account {account}: {error}"))?;
                if found != expected {
                    return Err(format!(
                        "worker {worker}: account {account} holds {found}, but after its transactions \
                         1..={sequence} it must hold {expected} (partial, out-of-order or resurrected transaction)"
                    ));
                }
                total += found;
            }
            sequences.push(sequence);
        }
        if total != self.accounts() as i64 * INITIAL_BALANCE {
            return Err(format!("money not conserved: total {total}"));
        }
        Ok(sequences)
    }
}

/// What a run of transfers acknowledged, for the oracles.
#[derive(Clone, Debug)]
pub struct Acks {
    /// Event count when the load transaction was acknowledged; `None` when
    /// the load happened in an earlier life (it must be present).
    pub load: Option<u64>,
    /// Per worker: the sequence this life started from (already durable).
    pub base: Vec<u64>,
    /// Per worker: `events[i]` = event count when transaction `base + i + 1`
    /// was acknowledged (non-decreasing).
    pub events: Vec<Vec<u64>>,
    /// Per worker: highest sequence issued (committed, acknowledged or not).
    pub issued: Vec<u64>,
}

impl Acks {
    /// A first life in which every issued transaction was acknowledged.
    pub fn all_acknowledged(load: u64, events: Vec<Vec<u64>>) -> Self {
        let issued = events.iter().map(|events| events.len() as u64).collect();
        Self { load: Some(load), base: vec![0; events.len()], events, issued }
    }

    /// Highest sequence of `worker` acknowledged at or before `event`.
    pub fn acked_by(&self, worker: usize, event: u64) -> u64 {
        self.base[worker] + self.events[worker].partition_point(|&ack| ack <= event) as u64
    }

    /// `Ok` if an empty (not yet loaded) database is allowed at `event`.
    pub fn check_empty(&self, event: u64) -> Result<(), String> {
        match self.load {
            Some(load) if event < load => Ok(()),
            _ => Err(format!("the load (acknowledged at event {:?}) is missing", self.load)),
        }
    }

    /// `Ok` if `sequence` of `worker` recovered from a crash at `event` is
    /// at least the acknowledged and at most the issued one.
    pub fn check_sequence(&self, worker: usize, sequence: u64, event: u64) -> Result<(), String> {
        let acked = self.acked_by(worker, event);
        if sequence < acked {
            return Err(format!(
                "worker {worker}: recovered sequence {sequence} but {acked} was acknowledged (or recovered in an \
                 earlier life) by event {event}"
            ));
        }
        if sequence > self.issued[worker] {
            return Err(format!(
                "worker {worker}: recovered sequence {sequence} beyond the {} transactions issued",
                self.issued[worker]
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The zen heap layout.

/// One NVM-tuple header found in an image.
#[derive(Clone, Copy, Debug)]
pub struct HeapSlot {
    /// Byte offset in the pool.
    pub offset: u64,
    /// Owning table (chunk-owner group) and thread.
    pub table: u32,
    pub thread: u16,
    /// Word 0: LP bit and Tx-CTS.
    pub word0: u64,
}

pub const LP_BIT: u64 = 1 << 63;

/// Every non-empty slot of every heap chunk of `pool`, decoding the layout
/// of `src/zen/heap.rs` (slot size = round16(26 + max key + max value),
/// slots after a 64-byte-rounded bitmap of one bit per slot).
pub fn heap_slots<B: PmBackend>(pool: &Pool<B>, tables: &[TableSchema]) -> Vec<HeapSlot> {
    let chunk_size = pool.geometry().chunk_size;
    let mut slots = Vec::new();
    for (chunk, owner) in pool.owned_chunks() {
        if owner.kind() != ZEN_HEAP_CHUNK_KIND && owner.kind() != ZEN_HEAP_CHUNK_KIND_FORMATTED {
            continue;
        }
        let schema = &tables[owner.group() as usize];
        let slot_size = (26 + schema.max_key_len as u64 + schema.max_value_len as u64).div_ceil(16) * 16;
        let mut count = chunk_size * 8 / (slot_size * 8 + 1);
        let bitmap = |n: u64| n.div_ceil(8).div_ceil(64) * 64;
        while bitmap(count) + count * slot_size > chunk_size {
            count -= 1;
        }
        let start = pool.chunk_offset(chunk) + bitmap(count);
        for index in 0..count {
            let offset = start + index * slot_size;
            assert_eq!(offset % 16, 0, "slot headers are 16-byte aligned");
            assert!(offset % 64 <= 48, "a 16-byte header never straddles a line");
            let word0 = pool.backend().load_u64(offset);
            if word0 != 0 && word0 != ZEN_HEAP_FREE_WORD0 {
                slots.push(HeapSlot { offset, table: owner.group(), thread: owner.thread(), word0 });
            }
        }
    }
    slots
}
