//! Durability of the redo log on a file (`dbx-disk`, `dbx-naive` with
//! `medium=disk`) at its real durable point: the `fdatasync`.
//!
//! A killed process keeps the page cache, so the kill harness cannot tell a
//! log that was synced from one that was only written. Here the log lives in
//! `MemoryLogStorage`, which keeps what each file's last sync made durable
//! apart from what was only written. While two workers commit, the test
//! thread takes crash states: the acknowledged sequence of each worker
//! (read first), the durable-epoch root of the pool, then an image of the
//! log files as a power failure would leave them — only what was synced,
//! or that plus a random part of the unsynced sectors (torn records at the
//! files' tails) — then each worker's started sequence. Each state is
//! recovered in a fresh engine: a copy of the pool taken before the run
//! (the run writes nothing to the pool but the durable-epoch root, which is
//! set to the value read) and the log image. A pool with the root read
//! before the log image is a state a real crash reaches: the one right
//! after the log's sync, before the root's persist.
//!
//! Oracle: for each worker, the recovered sequence `s` lies between the
//! last acknowledged and the last started, and its accounts equal the
//! replay of its transactions `1..=s`; every transaction also increments a
//! shared counter it reads (so each depends on the one before it in commit
//! order), which must equal the number of recovered transactions: a
//! transaction applied without one it read from is caught.
//!
//! Controls: `dbx-disk` publishing the durable epoch before the log is
//! synced (`group-commit-epoch-before-log`), and `dbx-naive` acknowledging
//! before its sync (`dbxn-ack-before-fence`), must each lose an
//! acknowledged commit. They run a fixed sequence, not a race with the
//! sync: one commit while the engine is held (`pmtx_crashtest::gated`) at
//! the point where it claims durability — the flush thread after its
//! publish, or the committer after its logging phase — where the crash
//! image is taken. Failures name the seed (`PMTX_CRASHTEST_SEED`).

use pmtx_crashtest::parse_seed;
use pmtx_engine::{
    Database, DbError, DbOptions, EngineKind, Fault, LogDirectory, LogMedium, MemoryLogStorage, TableSchema, TxError,
};
use pmtx_pm::{Direct, PmBackend, PmOptions, Pool};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const WORKERS: usize = 2;
const ACCOUNTS_PER_WORKER: u64 = 8;
const INITIAL: i64 = 1_000;
const POOL_SIZE: u64 = 8 << 20;
const CHUNK: u64 = 64 << 10;
const DURABLE_EPOCH_ROOT: &str = "log.durable_epoch";

fn seed() -> u64 {
    std::env::var("PMTX_CRASHTEST_SEED").ok().and_then(|text| parse_seed(&text)).unwrap_or(0xD15C_0001)
}

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::hashed("accounts").max_value_len(8), TableSchema::hashed("meta").max_value_len(8)]
}

fn account_key(worker: usize, account: u64) -> Vec<u8> {
    (worker as u64 * ACCOUNTS_PER_WORKER + account).to_be_bytes().to_vec()
}

fn seq_key(worker: usize) -> Vec<u8> {
    format!("seq/{worker}").into_bytes()
}

const TOTAL_KEY: &[u8] = b"total";

/// Transaction `s` of `worker`: moves an amount between two of its accounts.
fn transfer_of(worker: usize, s: u64) -> (u64, u64, i64) {
    let mix = s.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ worker as u64;
    let from = mix % ACCOUNTS_PER_WORKER;
    let to = (from + 1 + (mix >> 8) % (ACCOUNTS_PER_WORKER - 1)) % ACCOUNTS_PER_WORKER;
    (from, to, 1 + (mix >> 16) as i64 % 50)
}

/// The balances of `worker`'s accounts after its transactions `1..=s`.
fn expected_balances(worker: usize, s: u64) -> Vec<i64> {
    let mut balances = vec![INITIAL; ACCOUNTS_PER_WORKER as usize];
    for seq in 1..=s {
        let (from, to, amount) = transfer_of(worker, seq);
        balances[from as usize] -= amount;
        balances[to as usize] += amount;
    }
    balances
}

fn options(engine: EngineKind, medium: LogMedium, storage: &MemoryLogStorage, fault: Option<Fault>) -> DbOptions {
    let mut options = DbOptions::in_memory(engine, tables());
    options.workers = WORKERS;
    options.chunk_size = CHUNK;
    options.epoch_interval = Duration::from_millis(1);
    options.checkpoint_interval = None;
    options.dbxn.medium = medium;
    options.log_directory = LogDirectory::Memory(storage.clone());
    options.fault = fault;
    options
}

/// One crash state taken during the run.
struct CrashState {
    acknowledged: Vec<u64>,
    durable_epoch: u64,
    log: MemoryLogStorage,
    started: Vec<u64>,
    torn: bool,
}

struct Run {
    pool_image: Vec<u8>,
    states: Vec<CrashState>,
    acknowledged: u64,
}

fn u64_of(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte value"))
}

/// Loads the accounts and closes cleanly.
fn load<B: PmBackend>(engine: EngineKind, medium: LogMedium, storage: &MemoryLogStorage, pool: &Arc<Pool<B>>) {
    let db = Database::open_on_pool(options(engine, medium, storage, None), Arc::clone(pool)).expect("open");
    let (accounts, meta) = (db.table_id("accounts").unwrap(), db.table_id("meta").unwrap());
    let mut worker = db.worker(0).unwrap();
    worker
        .run(|tx| {
            for w in 0..WORKERS {
                for account in 0..ACCOUNTS_PER_WORKER {
                    tx.put(accounts, &account_key(w, account), &INITIAL.to_le_bytes())?;
                }
                tx.put(meta, &seq_key(w), &0u64.to_le_bytes())?;
            }
            tx.put(meta, TOTAL_KEY, &0u64.to_le_bytes())
        })
        .expect("load");
    drop(worker);
    db.close().expect("clean close");
}

/// Loads the accounts, closes cleanly, reopens, copies the pool, then runs
/// the workers while the test thread takes `states` crash states.
fn run(engine: EngineKind, medium: LogMedium, fault: Option<Fault>, seed: u64, states: usize) -> Run {
    let storage = MemoryLogStorage::default();
    let pm = PmOptions::default();
    let pool = Arc::new(Pool::<Direct>::create_in_memory(POOL_SIZE, CHUNK, &pm).expect("pool"));
    load(engine, medium, &storage, &pool);
    let db =
        Arc::new(Database::open_on_pool(options(engine, medium, &storage, fault), Arc::clone(&pool)).expect("reopen"));
    // Nothing but the durable-epoch root changes in the pool from here on
    // (the log is in files, no checkpoint runs), and the root is replaced
    // in every copy.
    let mut pool_image = vec![0u8; POOL_SIZE as usize];
    pool.backend().read(0, &mut pool_image);
    let acknowledged: Vec<AtomicU64> = (0..WORKERS).map(|_| AtomicU64::new(0)).collect();
    let started: Vec<AtomicU64> = (0..WORKERS).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let mut taken = Vec::with_capacity(states);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    std::thread::scope(|scope| {
        for w in 0..WORKERS {
            let (db, acknowledged, started, stop) = (&db, &acknowledged[w], &started[w], &stop);
            scope.spawn(move || {
                let (accounts, meta) = (db.table_id("accounts").unwrap(), db.table_id("meta").unwrap());
                let mut worker = db.worker(w).unwrap();
                let mut s = 0;
                while !stop.load(Ordering::SeqCst) {
                    s += 1;
                    let (from, to, amount) = transfer_of(w, s);
                    started.store(s, Ordering::SeqCst);
                    // Pipelined: the worker goes on committing while its
                    // epoch fills, so the log always holds records that are
                    // written and not yet synced.
                    let result = worker.run_pipelined(s as u32, false, |tx| {
                        let balance = |tx: &mut pmtx_engine::Transaction<'_>, key: &[u8]| -> Result<i64, TxError> {
                            Ok(i64::from_le_bytes(tx.get(accounts, key)?.expect("account").try_into().unwrap()))
                        };
                        let (from_key, to_key) = (account_key(w, from), account_key(w, to));
                        let (a, b) = (balance(tx, &from_key)?, balance(tx, &to_key)?);
                        tx.put(accounts, &from_key, &(a - amount).to_le_bytes())?;
                        tx.put(accounts, &to_key, &(b + amount).to_le_bytes())?;
                        tx.put(meta, &seq_key(w), &s.to_le_bytes())?;
                        let total = u64_of(&tx.get(meta, TOTAL_KEY)?.expect("total"));
                        tx.put(meta, TOTAL_KEY, &(total + 1).to_le_bytes())
                    });
                    if let Err(error) = result {
                        panic!("worker {w}, transaction {s}: {error}");
                    }
                    worker.drain_acknowledged(|tag, _| acknowledged.store(u64::from(tag), Ordering::SeqCst));
                    if s % 64 == 0 {
                        // Keeps the run's transactions in a few epochs' worth.
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            });
        }
        for index in 0..states {
            std::thread::sleep(Duration::from_micros(rng.gen_range(100..1500)));
            let acknowledged: Vec<u64> = acknowledged.iter().map(|a| a.load(Ordering::SeqCst)).collect();
            let durable_epoch = pool.root(DURABLE_EPOCH_ROOT).unwrap_or(0);
            let torn = index % 2 == 1;
            let log = if torn { storage.crash_image_torn(rng.gen()) } else { storage.crash_image() };
            let started: Vec<u64> = started.iter().map(|s| s.load(Ordering::SeqCst)).collect();
            taken.push(CrashState { acknowledged, durable_epoch, log, started, torn });
        }
        stop.store(true, Ordering::SeqCst);
    });
    let acknowledged = acknowledged.iter().map(|a| a.load(Ordering::SeqCst)).sum();
    Arc::into_inner(db).expect("workers are gone").crash().expect("crash");
    Run { pool_image, states: taken, acknowledged }
}

/// Recovers `state` and checks the oracle; `Err` describes the violation.
fn check(engine: EngineKind, medium: LogMedium, run: &Run, state: &CrashState) -> Result<(), String> {
    let pm = PmOptions::default();
    let pool = Arc::new(Pool::<Direct>::open_image(&run.pool_image, &pm).map_err(|e| e.to_string())?);
    pool.set_root(DURABLE_EPOCH_ROOT, state.durable_epoch).map_err(|e| e.to_string())?;
    let db = Database::open_on_pool(options(engine, medium, &state.log, None), Arc::clone(&pool))
        .map_err(|error| format!("recovery failed: {error}"))?;
    let (accounts, meta) = (db.table_id("accounts").unwrap(), db.table_id("meta").unwrap());
    let mut worker = db.worker(0).unwrap();
    let read = worker
        .run(|tx| {
            let mut seqs = Vec::new();
            let mut balances = Vec::new();
            for w in 0..WORKERS {
                seqs.push(u64_of(&tx.get(meta, &seq_key(w))?.expect("seq row")));
                let mut own = Vec::new();
                for account in 0..ACCOUNTS_PER_WORKER {
                    let bytes = tx.get(accounts, &account_key(w, account))?.expect("account");
                    own.push(i64::from_le_bytes(bytes.try_into().unwrap()));
                }
                balances.push(own);
            }
            Ok((seqs, balances, u64_of(&tx.get(meta, TOTAL_KEY)?.expect("total"))))
        })
        .map_err(|error| format!("reading the recovered state: {error}"))?;
    let (seqs, balances, total) = read.committed().expect("read-only");
    drop(worker);
    for w in 0..WORKERS {
        let s = seqs[w];
        if s < state.acknowledged[w] || s > state.started[w] {
            return Err(format!(
                "worker {w}: recovered sequence {s}, acknowledged {} and started {} (an acknowledged commit lost, or \
                 one never started)",
                state.acknowledged[w], state.started[w]
            ));
        }
        if balances[w] != expected_balances(w, s) {
            return Err(format!("worker {w}: balances {:?} are not those of transactions 1..={s}", balances[w]));
        }
    }
    if total != seqs.iter().sum::<u64>() {
        return Err(format!(
            "the shared counter is {total} but {} transactions were recovered: one was applied without a \
             transaction it read from",
            seqs.iter().sum::<u64>()
        ));
    }
    db.close().map_err(|error| format!("close after recovery: {error}"))
}

fn describe(state: &CrashState) -> String {
    format!(
        "{} image, acknowledged {:?}, started {:?}, durable epoch {}",
        if state.torn { "torn" } else { "synced-only" },
        state.acknowledged,
        state.started,
        state.durable_epoch
    )
}

fn every_acknowledged_commit_survives(engine: EngineKind, medium: LogMedium) {
    let seed = seed();
    let run = run(engine, medium, None, seed, 24);
    assert!(run.acknowledged > 200, "{engine}: only {} commits were acknowledged", run.acknowledged);
    let mut lost_unsynced = 0;
    for (index, state) in run.states.iter().enumerate() {
        if let Err(violation) = check(engine, medium, &run, state) {
            panic!("{engine} medium={medium}, seed {seed:#x}, state {index} ({}): {violation}", describe(state));
        }
        lost_unsynced += (state.started.iter().sum::<u64>() > state.acknowledged.iter().sum::<u64>()) as u64;
    }
    // The states fell while commits were in flight, so the images had
    // unsynced records to drop.
    assert!(lost_unsynced > 0, "{engine}: no crash state had a commit in flight");
}

#[test]
fn dbx_disk_keeps_every_acknowledged_commit_at_the_fdatasync() {
    every_acknowledged_commit_survives(EngineKind::DbxDisk, LogMedium::Pm);
}

#[test]
fn dbx_naive_on_disk_keeps_every_acknowledged_commit_at_the_fdatasync() {
    every_acknowledged_commit_survives(EngineKind::DbxNaive, LogMedium::Disk);
}

/// Where a control takes its crash image (`pmtx_crashtest::gated`).
#[derive(Clone, Copy)]
enum HeldAt {
    /// In the flush thread, right after it published a durable epoch:
    /// taken once worker 0's commit is acknowledged (the broken group
    /// commit publishes before syncing the epoch's log).
    EpochPublished,
    /// In the committing thread, right after its logging phase (where a
    /// correct synchronous log's record is durable); the commit is
    /// acknowledged right after it with nothing synced in between.
    LoggingPhase,
}

/// A protocol that acknowledges before the sync is caught, by a fixed
/// sequence: worker 0 commits one transaction while the engine is held
/// at the point where it claims durability (`held`), the crash image of
/// the log is taken there, and recovering it must lose that acknowledged
/// commit. No race with the log's sync decides the outcome.
fn broken_is_caught(engine: EngineKind, medium: LogMedium, fault: Fault, held: HeldAt) {
    use pmtx_crashtest::gated::{Gate, Gated, DBXN_LOG_DURABLE, EPOCH_PUBLISHED_BEFORE_LOG};
    const LIMIT: Duration = Duration::from_secs(30);
    // Taken before the pool exists: no other test's pool is gated.
    let gate = Gate::get().take();
    let storage = MemoryLogStorage::default();
    let pool = Arc::new(Pool::<Gated>::create_in_memory(POOL_SIZE, CHUNK, &PmOptions::default()).expect("pool"));
    load(engine, medium, &storage, &pool);
    let mut options = options(engine, medium, &storage, Some(fault));
    if matches!(held, HeldAt::LoggingPhase) {
        // No epoch flush (which syncs a synchronous log's tails too) runs
        // between the record's write and the held point.
        options.epoch_interval = Duration::from_secs(3600);
    }
    let db = Database::open_on_pool(options, Arc::clone(&pool)).expect("reopen");
    let mut pool_image = vec![0u8; POOL_SIZE as usize];
    pool.backend().read(0, &mut pool_image);
    let (accounts, meta) = (db.table_id("accounts").unwrap(), db.table_id("meta").unwrap());
    let transfer = |tx: &mut pmtx_engine::Transaction<'_>| -> Result<(), TxError> {
        let (from, to, amount) = transfer_of(0, 1);
        let balance = |tx: &mut pmtx_engine::Transaction<'_>, key: &[u8]| -> Result<i64, TxError> {
            Ok(i64::from_le_bytes(tx.get(accounts, key)?.expect("account").try_into().unwrap()))
        };
        let (from_key, to_key) = (account_key(0, from), account_key(0, to));
        let (a, b) = (balance(tx, &from_key)?, balance(tx, &to_key)?);
        tx.put(accounts, &from_key, &(a - amount).to_le_bytes())?;
        tx.put(accounts, &to_key, &(b + amount).to_le_bytes())?;
        tx.put(meta, &seq_key(0), &1u64.to_le_bytes())?;
        let total = u64_of(&tx.get(meta, TOTAL_KEY)?.expect("total"));
        tx.put(meta, TOTAL_KEY, &(total + 1).to_le_bytes())
    };
    let take = || CrashState {
        acknowledged: vec![1, 0],
        durable_epoch: pool.root(DURABLE_EPOCH_ROOT).unwrap_or(0),
        log: storage.crash_image(),
        started: vec![1, 0],
        torn: false,
    };
    let state = match held {
        HeldAt::EpochPublished => {
            gate.arm(EPOCH_PUBLISHED_BEFORE_LOG, false);
            let (_, pending) = db.run_pipelined(transfer).expect("commit");
            let pending = pending.expect("committed");
            // Each flush is held after its publish; the first one whose
            // epoch covers the commit is where its crash image is taken.
            loop {
                assert!(gate.wait_held(LIMIT), "{engine}: no flush published an epoch");
                if db.is_durable(&pending) {
                    break take();
                }
                gate.release();
            }
        }
        HeldAt::LoggingPhase => {
            gate.arm(DBXN_LOG_DURABLE, true);
            std::thread::scope(|scope| {
                let committer = scope.spawn(|| db.run_pipelined(transfer).expect("commit").1.expect("committed"));
                assert!(gate.wait_held(LIMIT), "{engine}: the commit never reached its logging phase");
                let state = take();
                gate.release();
                let pending = committer.join().expect("committer");
                assert!(db.is_durable(&pending), "{engine} with {}: the commit is acknowledged", fault.name());
                state
            })
        }
    };
    drop(gate);
    db.crash().expect("crash");
    let run = Run { pool_image, states: Vec::new(), acknowledged: 1 };
    let outcome = check(engine, medium, &run, &state);
    assert!(outcome.is_err(), "{engine} with {} kept the acknowledged commit ({})", fault.name(), describe(&state));
}

#[test]
fn dbx_disk_publishing_the_epoch_before_the_sync_is_caught() {
    broken_is_caught(EngineKind::DbxDisk, LogMedium::Pm, Fault::GroupCommitEpochBeforeLog, HeldAt::EpochPublished);
}

#[test]
fn dbx_naive_on_disk_acknowledging_before_the_sync_is_caught() {
    broken_is_caught(EngineKind::DbxNaive, LogMedium::Disk, Fault::DbxnAckBeforeFence, HeldAt::LoggingPhase);
}

/// A failed `fdatasync` poisons the database: the commit it belonged to
/// fails with a typed error, nobody (not even a reader of its write) is
/// told anything is durable from then on, and after a power failure the
/// acknowledged commits are all there and the failed one is not.
#[test]
fn a_failed_fdatasync_poisons_the_database() {
    for (engine, medium) in [(EngineKind::DbxNaive, LogMedium::Disk), (EngineKind::DbxDisk, LogMedium::Pm)] {
        let storage = MemoryLogStorage::default();
        let pool = Arc::new(Pool::<Direct>::create_in_memory(POOL_SIZE, CHUNK, &PmOptions::default()).unwrap());
        let db = Database::open_on_pool(options(engine, medium, &storage, None), Arc::clone(&pool)).unwrap();
        let meta = db.table_id("meta").unwrap();
        let mut worker = db.worker(0).unwrap();
        for i in 0..20u64 {
            worker.run(|tx| tx.put(meta, &i.to_be_bytes(), &i.to_le_bytes())).expect("healthy commits");
        }
        storage.fail_syncs(true);
        let error = worker.run(|tx| tx.put(meta, b"failed", b"x")).unwrap_err();
        match engine {
            // The synchronous log's commit sees its own sync fail.
            EngineKind::DbxNaive => assert!(
                matches!(&error, DbError::LogFile { operation, .. } if operation.contains("fdatasync")),
                "{engine}: {error}"
            ),
            // Group commit's epoch thread fails; the waiting commit learns
            // that the database is gone.
            _ => assert!(matches!(error, DbError::Closed), "{engine}: {error}"),
        }
        // A reader of the failed write commits nothing durable either.
        let mut reader = db.worker(1).unwrap();
        let read = reader.run(|tx| tx.get(meta, b"failed"));
        assert!(matches!(read, Err(DbError::Closed)), "{engine}: a reader was acknowledged: {read:?}");
        let write = worker.run(|tx| tx.put(meta, b"later", b"y")).unwrap_err();
        assert!(matches!(write, DbError::Poisoned(_) | DbError::Closed), "{engine}: {write}");
        drop((worker, reader));
        let _ = db.crash();
        drop(db);
        storage.fail_syncs(false);
        storage.crash();
        let db = Database::open_on_pool(options(engine, medium, &storage, None), pool).expect("recover");
        let mut worker = db.worker(0).unwrap();
        let (present, failed) = worker
            .run(|tx| {
                let mut present = 0;
                for i in 0..20u64 {
                    present += tx.get(meta, &i.to_be_bytes())?.is_some() as u64;
                }
                Ok((present, tx.get(meta, b"failed")?.is_some()))
            })
            .unwrap()
            .committed()
            .unwrap();
        assert_eq!(present, 20, "{engine}: acknowledged commits lost");
        assert!(!failed, "{engine}: the commit whose sync failed survived a crash that dropped unsynced bytes");
        drop(worker);
        db.close().unwrap();
    }
}

/// A full file system is `DbError::OutOfSpace`, never a panic, and the
/// acknowledged commits survive.
#[test]
fn a_full_disk_is_out_of_space() {
    for (engine, medium) in [(EngineKind::DbxDisk, LogMedium::Pm), (EngineKind::DbxNaive, LogMedium::Disk)] {
        let storage = MemoryLogStorage::with_capacity(200 << 10);
        let pool = Arc::new(Pool::<Direct>::create_in_memory(POOL_SIZE, CHUNK, &PmOptions::default()).unwrap());
        let db = Database::open_on_pool(options(engine, medium, &storage, None), Arc::clone(&pool)).unwrap();
        let meta = db.table_id("meta").unwrap();
        let mut worker = db.worker(0).unwrap();
        let mut acknowledged = 0u64;
        let error = loop {
            match worker.run(|tx| tx.put(meta, &acknowledged.to_be_bytes(), &acknowledged.to_le_bytes())) {
                Ok(_) => acknowledged += 1,
                Err(error) => break error,
            }
            assert!(acknowledged < 100_000, "{engine}: 200 KiB never filled");
        };
        assert!(matches!(error, DbError::OutOfSpace(_)), "{engine}: {error}");
        assert!(error.to_string().contains("redo log file"), "{engine}: {error}");
        drop(worker);
        let _ = db.crash();
        drop(db);
        storage.crash();
        let db = Database::open_on_pool(options(engine, medium, &storage, None), pool).expect("recover");
        let mut worker = db.worker(0).unwrap();
        let present = worker
            .run(|tx| {
                let mut present = 0;
                for i in 0..acknowledged {
                    present += tx.get(meta, &i.to_be_bytes())?.is_some() as u64;
                }
                Ok(present)
            })
            .unwrap()
            .committed()
            .unwrap();
        assert_eq!(present, acknowledged, "{engine}: acknowledged commits lost");
    }
}
