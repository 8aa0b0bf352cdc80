//! Serializability of every engine: transfers with concurrent audits, write
//! skew, phantoms, read-your-writes, rollback, and bad input; and, for the
//! snapshot-isolation engine (`pisces`), what SI guarantees (the tests it
//! legitimately fails are left out, each with its reason, at the end).

use pmtx_engine::{
    prefix_range, AbortReason, CcProtocol, Database, DbError, DbOptions, EngineKind, Outcome, ScanDirection,
    TableSchema, TxError,
};
use pmtx_htm::HtmConfig;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

const ACCOUNTS: u64 = 64;
const INITIAL: u64 = 1_000;
/// How long transfer threads go on, past their quota, waiting for a first
/// audit to complete beside them.
const AUDIT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// An engine, the HTM configuration it runs with (`none` unless a test
/// module asks for simulated aborts) and its concurrency-control protocol.
#[derive(Clone, Copy, Debug)]
struct Setup {
    engine: EngineKind,
    htm: HtmConfig,
    cc: CcProtocol,
    /// `zen+` with a tiny Met-Cache and low α and γ, so that larger
    /// transactions and retried ones run in the exclusive stage (with
    /// direct NVM writes) beside ordinary ones.
    exclusive_stress: bool,
    /// Where dbx-naive's log goes (memory log files for `Disk`).
    medium: pmtx_engine::LogMedium,
    /// `foedus` with its gleaner running every few milliseconds and a
    /// DRAM budget of a few rows, so snapshots, evictions and misses run
    /// beside the transactions.
    gleaner_stress: bool,
}

impl Setup {
    /// `engine` with `sim` HTM injecting `per_million` aborts per region.
    fn sim(engine: EngineKind, per_million: u32) -> Self {
        Setup { htm: HtmConfig::sim(0xD8C5 ^ per_million as u64, per_million), ..Setup::from(engine) }
    }

    /// `zen+` entering its exclusive stage often (see `exclusive_stress`).
    fn zen_plus_exclusive() -> Self {
        Setup { exclusive_stress: true, ..Setup::from(EngineKind::ZenPlus) }
    }

    /// `engine` running protocol `cc`.
    fn cc(engine: EngineKind, cc: CcProtocol) -> Self {
        Setup { cc, ..Setup::from(engine) }
    }

    /// Whether every read takes a lock: the 2PL protocols, and the PHyTM
    /// family's software paths (2pl always, phytm and phtm without HTM,
    /// where phtm's global lock excludes any second transaction).
    fn locks_reads(&self) -> bool {
        use pmtx_engine::EngineKind;
        self.cc.uses_lock_table()
            || self.engine == EngineKind::TwoPl
            || (matches!(self.engine, EngineKind::Phytm | EngineKind::PhytmPaper | EngineKind::Phtm)
                && self.htm.backend == pmtx_htm::HtmBackendKind::None)
    }

    /// Whether every transaction runs alone (phtm's global lock, without
    /// HTM).
    fn runs_alone(&self) -> bool {
        self.engine == pmtx_engine::EngineKind::Phtm && self.htm.backend == pmtx_htm::HtmBackendKind::None
    }

    /// With `exclusive_stress`: the run did cross the exclusive stage.
    fn check_crossed_exclusive_stage(&self, db: &Database) {
        if !self.exclusive_stress {
            return;
        }
        let stats = db.stats();
        let entries: u64 = stats
            .engine_counters
            .iter()
            .filter(|(name, _)| name.starts_with("exclusive_entries"))
            .map(|(_, n)| n)
            .sum();
        assert!(entries > 0, "no exclusive stage: {:?}", stats.engine_counters);
    }

    fn options(self, tables: Vec<TableSchema>) -> DbOptions {
        let mut options = DbOptions::in_memory(self.engine, tables);
        options.htm = self.htm;
        options.cc = self.cc;
        options.dbxn.medium = self.medium;
        if self.gleaner_stress {
            options.checkpoint_interval = Some(std::time::Duration::from_millis(3));
            options.foedus.cache_bytes = 256;
        }
        if self.exclusive_stress {
            // 4 workers: 400-byte regions, α at 200 bytes — about two rows
            // and their new versions; a transaction that retried 200
            // accesses' worth enters too (γ).
            options.zen.cache_bytes = 1600;
            options.zen_plus.alpha_percent = 50;
            options.zen_plus.gamma_tuples = 200;
        }
        options
    }

    /// `engine` with its synchronous log on (memory) files.
    fn disk(engine: EngineKind) -> Self {
        Setup { medium: pmtx_engine::LogMedium::Disk, ..Setup::from(engine) }
    }
}

impl From<EngineKind> for Setup {
    fn from(engine: EngineKind) -> Self {
        Setup {
            engine,
            htm: HtmConfig::software(),
            cc: engine.default_cc(),
            exclusive_stress: false,
            medium: pmtx_engine::LogMedium::Pm,
            gleaner_stress: false,
        }
    }
}

fn open(setup: impl Into<Setup>) -> Database {
    let tables = vec![TableSchema::ordered("accounts").max_value_len(64), TableSchema::hashed("flags")];
    Database::open(setup.into().options(tables)).unwrap()
}

fn key(account: u64) -> [u8; 8] {
    account.to_be_bytes()
}

fn balance(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().unwrap())
}

fn load(db: &Database) {
    let accounts = db.table_id("accounts").unwrap();
    let mut worker = db.worker(0).unwrap();
    worker
        .run(|tx| {
            for account in 0..ACCOUNTS {
                tx.put(accounts, &key(account), &INITIAL.to_le_bytes())?;
            }
            Ok(())
        })
        .unwrap();
}

fn transfers_and_audits(engine: impl Into<Setup>) {
    let setup = engine.into();
    let db = Arc::new(open(setup));
    load(&db);
    let accounts = db.table_id("accounts").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let audits = Arc::new(AtomicU64::new(0));
    let transfers = Arc::new(AtomicU64::new(0));
    let gave_up = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(4));
    let mut handles = Vec::new();
    for id in 0..3usize {
        let (db, transfers, audits, gave_up, barrier) =
            (db.clone(), transfers.clone(), audits.clone(), gave_up.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            let mut worker = db.worker(id).unwrap();
            let mut state = 0x9E3779B97F4A7C15u64 ^ id as u64;
            barrier.wait();
            let start = std::time::Instant::now();
            // 1500 transfers, and more until an audit has completed beside
            // them: on two loaded cores the auditor may not be scheduled at
            // all while the first 1500 run.
            for done in 0u64.. {
                if done >= 1500 && (audits.load(Ordering::Relaxed) > 0 || start.elapsed() > AUDIT_WAIT) {
                    break;
                }
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let from = state % ACCOUNTS;
                let to = (state >> 20) % ACCOUNTS;
                let amount = (state >> 40) % 50;
                let outcome = worker.run(|tx| {
                    let a = balance(&tx.get(accounts, &key(from))?.unwrap());
                    if a < amount || from == to {
                        return Err(tx.rollback());
                    }
                    let b = balance(&tx.get(accounts, &key(to))?.unwrap());
                    tx.put(accounts, &key(from), &(a - amount).to_le_bytes())?;
                    tx.put(accounts, &key(to), &(b + amount).to_le_bytes())?;
                    Ok(())
                });
                match outcome {
                    Ok(outcome) if matches!(outcome.outcome, Outcome::Committed(())) => {
                        transfers.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    // A worker gives a transaction up after its attempt
                    // budget; on two loaded cores that happens when the
                    // holder it keeps meeting is descheduled for a while.
                    // Counted, and bounded below.
                    Err(DbError::TooManyAborts { .. }) => {
                        gave_up.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => panic!("transfer failed: {error}"),
                }
            }
        }));
    }
    {
        let (db, stop, audits, gave_up, barrier) =
            (db.clone(), stop.clone(), audits.clone(), gave_up.clone(), barrier.clone());
        handles.push(std::thread::spawn(move || {
            let mut worker = db.worker(3).unwrap();
            barrier.wait();
            while !stop.load(Ordering::Relaxed) {
                let audit = worker.run_read_only(|tx| {
                    let rows = tx.scan(accounts, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1000)?;
                    assert_eq!(rows.len() as u64, ACCOUNTS);
                    Ok(rows.iter().map(|(_, v)| balance(v)).sum::<u64>())
                });
                let total = match audit {
                    Ok(finished) => finished.committed().unwrap(),
                    Err(DbError::TooManyAborts { .. }) => {
                        gave_up.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(error) => panic!("audit failed: {error}"),
                };
                assert_eq!(total, ACCOUNTS * INITIAL, "an audit saw a non-serializable state");
                audits.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let auditor = handles.pop().unwrap();
    for handle in handles {
        handle.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    auditor.join().unwrap();
    let (transfers, gave_up) = (transfers.load(Ordering::Relaxed), gave_up.load(Ordering::Relaxed));
    assert!(transfers > 100, "too few transfers committed");
    assert!(gave_up * 20 < transfers, "{gave_up} transactions gave up against {transfers} transfers committed");
    assert!(audits.load(Ordering::Relaxed) > 0, "no audit completed");
    let mut worker = db.worker(0).unwrap();
    let total = worker
        .run_read_only(|tx| {
            let mut total = 0;
            for account in 0..ACCOUNTS {
                total += balance(&tx.get(accounts, &key(account))?.unwrap());
            }
            Ok(total)
        })
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(total, ACCOUNTS * INITIAL);
    setup.check_crossed_exclusive_stage(&db);
}

/// Two transactions each read both flags and set one if the other is clear:
/// under serializability at most one can commit with both reading "clear".
///
/// Under OCC the inner transaction commits and the outer one aborts at
/// validation; under two-phase locking (or H-Store's partition locks) the
/// inner one cannot take the write lock of a row the outer one has read,
/// and gives up instead.
fn write_skew_is_rejected(engine: impl Into<Setup>) {
    let setup = engine.into();
    let locking = setup.locks_reads();
    let mut options =
        setup.options(vec![TableSchema::ordered("accounts").max_value_len(64), TableSchema::hashed("flags")]);
    if locking {
        // The inner transaction can never commit while the outer one is
        // open: a few attempts show it.
        options.max_attempts = 3;
    }
    let db = Database::open(options).unwrap();
    let flags = db.table_id("flags").unwrap();
    let mut first = db.worker(0).unwrap();
    let mut second = db.worker(1).unwrap();
    // Interleave by hand through the pipelined API: begin both, read both,
    // then commit one after the other.
    let mut phase = 0;
    let outcome_a = first.run(|tx_a| {
        let a_sees_b = tx_a.get(flags, b"b")?;
        if phase == 0 {
            phase = 1;
            // The second transaction runs completely inside the first. It
            // must not wait for durability while the first is open (group
            // commit would wait for the first to leave its epoch), hence
            // the pipelined call.
            let inner = second.run_pipelined(0, false, |tx_b| {
                let b_sees_a = tx_b.get(flags, b"a")?;
                if b_sees_a.is_none() {
                    tx_b.put(flags, b"b", b"on")?;
                }
                Ok(())
            });
            if locking {
                match inner {
                    Err(DbError::TooManyAborts { last, .. }) => assert!(
                        matches!(last, AbortReason::LockConflict | AbortReason::LockTimeout | AbortReason::Deadlock),
                        "the inner transaction gave up for {last}"
                    ),
                    other => panic!("the inner transaction must not commit under 2PL: {:?}", other.map(|o| o.0)),
                }
            } else {
                assert!(matches!(inner.unwrap().0, Outcome::Committed(())));
            }
        }
        if a_sees_b.is_none() {
            tx_a.put(flags, b"a", b"on")?;
        }
        Ok(a_sees_b.is_none())
    });
    let finished = outcome_a.unwrap();
    second.wait_all_acknowledged(|_, _| {}).expect("acknowledged");
    if locking {
        assert_eq!(finished.attempts, 1, "under 2PL the first transaction holds its locks and commits");
    } else {
        assert!(finished.attempts >= 2, "the first transaction must have aborted once");
    }
    let mut worker = db.worker(2).unwrap();
    let both = worker
        .run_read_only(|tx| Ok((tx.get(flags, b"a")?.is_some(), tx.get(flags, b"b")?.is_some())))
        .unwrap()
        .committed()
        .unwrap();
    assert_ne!(both, (true, true), "write skew committed");
}

/// A scan's result cannot change under a committed transaction: a
/// transaction that scanned a range and then sees a concurrent insert into
/// it commits only after retrying.
///
/// Under H-Store the scan holds the partitions of its range, so the insert
/// cannot run inside it at all: it gives up, and the scan commits at once.
fn phantoms_are_detected(engine: impl Into<Setup>) {
    let setup = engine.into();
    // H-Store's partition locks, and phtm's global lock without HTM, keep
    // the insert out while the scanner runs.
    let partitioned = setup.cc == CcProtocol::HStore || setup.runs_alone();
    let mut options =
        setup.options(vec![TableSchema::ordered("accounts").max_value_len(64), TableSchema::hashed("flags")]);
    if partitioned {
        options.max_attempts = 3;
    }
    let db = Database::open(options).unwrap();
    let accounts = db.table_id("accounts").unwrap();
    load(&db);
    let mut scanner = db.worker(0).unwrap();
    let mut inserter = db.worker(1).unwrap();
    let mut inserted = false;
    let finished = scanner
        .run(|tx| {
            let low = key(10);
            let high = key(20);
            let rows = tx.scan(
                accounts,
                (Bound::Included(&low[..]), Bound::Excluded(&high[..])),
                ScanDirection::Forward,
                100,
            )?;
            if !inserted {
                inserted = true;
                let mut new_key = key(15).to_vec();
                new_key.push(1);
                let insert = inserter.run_pipelined(0, false, |tx2| tx2.put(accounts, &new_key, &7u64.to_le_bytes()));
                if partitioned {
                    assert!(
                        matches!(insert, Err(DbError::TooManyAborts { .. })),
                        "the insert into a locked partition must not commit"
                    );
                } else {
                    insert.unwrap();
                }
            }
            tx.put(accounts, b"count", &(rows.len() as u64).to_le_bytes())?;
            Ok(rows.len())
        })
        .unwrap();
    inserter.wait_all_acknowledged(|_, _| {}).expect("acknowledged");
    if partitioned {
        assert_eq!(finished.attempts, 1, "nothing could change the scanned partitions");
        assert_eq!(finished.committed(), Some(10));
    } else {
        assert!(finished.attempts >= 2, "the phantom must force a retry");
        assert_eq!(finished.committed(), Some(11));
    }
}

fn reverse_scans_limits_and_secondary(engine: impl Into<Setup>) {
    fn by_parity(_key: &[u8], value: &[u8]) -> Vec<u8> {
        vec![value[0] % 2]
    }
    let tables = vec![TableSchema::ordered("t").secondary("parity", by_parity)];
    let db = Database::open(engine.into().options(tables)).unwrap();
    let table = db.table_id("t").unwrap();
    let parity = db.secondary_id(table, "parity").unwrap();
    let mut worker = db.worker(0).unwrap();
    worker
        .run(|tx| {
            for i in 0u8..20 {
                assert!(tx.insert(table, &[i], &[i])?);
            }
            assert!(!tx.insert(table, &[3], &[99])?, "duplicate insert must report false");
            Ok(())
        })
        .unwrap();
    let rows = worker
        .run_read_only(|tx| tx.scan(table, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Reverse, 3))
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(rows.iter().map(|(k, _)| k[0]).collect::<Vec<_>>(), vec![19, 18, 17]);
    let odd = worker
        .run_read_only(|tx| {
            let mut upper = Vec::new();
            tx.scan_secondary(table, parity, prefix_range(&[1], &mut upper), ScanDirection::Forward, 100)
        })
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(odd.len(), 10);
    assert!(odd.iter().all(|(k, v)| k[0] % 2 == 1 && v[0] == k[0]));
    // Deletes hide rows from scans and gets; updates of absent keys fail.
    worker
        .run(|tx| {
            assert!(tx.delete(table, &[5])?);
            assert!(!tx.delete(table, &[5])?, "read-your-own-delete");
            assert!(!tx.update(table, &[200], &[1])?);
            Ok(())
        })
        .unwrap();
    let after = worker
        .run_read_only(|tx| tx.scan(table, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 100))
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(after.len(), 19);

    // Secondary keys that change (an update, or a delete and re-insert)
    // move the row: it is found under its new key only, with a limit that
    // counts rows actually delivered, inside and after the transaction.
    let parity_rows = |tx: &mut pmtx_engine::Transaction<'_>, bit: u8, limit: usize| {
        let mut upper = Vec::new();
        tx.scan_secondary(table, parity, prefix_range(&[bit], &mut upper), ScanDirection::Forward, limit)
            .map(|rows| rows.into_iter().map(|(k, _)| k[0]).collect::<Vec<u8>>())
    };
    worker
        .run(|tx| {
            assert!(tx.update(table, &[1], &[2])?, "1 becomes even");
            assert!(tx.delete(table, &[3])?);
            assert!(tx.insert(table, &[3], &[4])?, "3 is re-inserted even");
            assert!(tx.update(table, &[4], &[5])?, "4 becomes odd");
            assert_eq!(parity_rows(tx, 1, 3)?, vec![4, 7, 9], "inside the transaction");
            Ok(())
        })
        .unwrap();
    let (odd, even, first_odd) = worker
        .run_read_only(|tx| Ok((parity_rows(tx, 1, 100)?, parity_rows(tx, 0, 100)?, parity_rows(tx, 1, 2)?)))
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(odd, vec![4, 7, 9, 11, 13, 15, 17, 19]);
    assert_eq!(even, vec![0, 1, 2, 3, 6, 8, 10, 12, 14, 16, 18]);
    assert_eq!(first_odd, vec![4, 7], "the limit counts current rows, not stale entries");
}

/// Whether a transaction nested inside another on the same thread can
/// never commit while the outer one is open: the locking protocols (the
/// outer holds its read locks), H-Store's partitions and phtm's global
/// lock without HTM.
fn nested_blocks(setup: &Setup) -> bool {
    setup.locks_reads() || setup.cc == CcProtocol::HStore || setup.runs_alone()
}

/// Rows `a0`..`a15` of the secondary-key tests below.
const ROWS: u8 = 16;

/// The secondary key of an `items` row: its group, the value's first byte.
fn group_of(_key: &[u8], value: &[u8]) -> Vec<u8> {
    vec![value[0]]
}

/// Loads `items` with row `a<i>` in group `i % 4`.
fn load_groups(db: &Database, items: pmtx_engine::TableId) {
    db.worker(0)
        .unwrap()
        .run(|tx| {
            for i in 0..ROWS {
                tx.put(items, &[b'a', i], &[i % 4])?;
            }
            Ok(())
        })
        .unwrap();
}

/// A secondary-index scan agrees with the rows the same transaction read
/// by primary key, although a commit between the reads and the scan moved
/// rows into and out of the scanned key: for read-write transactions that
/// write nothing and for read-only ones, full and limited scans, both
/// directions. (A multi-version snapshot lost the rows whose old entry the
/// commit had removed.)
fn secondary_scans_agree_with_primary_reads(engine: impl Into<Setup>) {
    let setup = engine.into();
    let blocks = nested_blocks(&setup);
    let mut options = setup.options(vec![TableSchema::ordered("items").max_value_len(8).secondary("group", group_of)]);
    if blocks {
        options.max_attempts = 3;
    }
    let db = Database::open(options).unwrap();
    let items = db.table_id("items").unwrap();
    let group = db.secondary_id(items, "group").unwrap();
    load_groups(&db, items);
    let mut reader = db.worker(0).unwrap();
    let mut mover = db.worker(1).unwrap();
    for read_only in [false, true] {
        let mut moved = false;
        let mut body = |tx: &mut pmtx_engine::Transaction<'_>| {
            let mut by_primary = Vec::new();
            for i in 0..ROWS {
                if tx.get(items, &[b'a', i])?.unwrap()[0] == 2 {
                    by_primary.push(i);
                }
            }
            if !moved {
                moved = true;
                // Swap the groups of a row in group 2 and one outside it.
                let inner = mover.run_pipelined(0, false, |tx2| {
                    let a = tx2.get(items, &[b'a', 10])?.unwrap();
                    let b = tx2.get(items, &[b'a', 3])?.unwrap();
                    tx2.put(items, &[b'a', 10], &b)?;
                    tx2.put(items, &[b'a', 3], &a)?;
                    Ok(())
                });
                match inner {
                    Ok((outcome, _)) => assert!(!blocks && matches!(outcome, Outcome::Committed(()))),
                    Err(DbError::TooManyAborts { .. }) => assert!(blocks, "the move gave up"),
                    Err(error) => panic!("the move failed: {error}"),
                }
            }
            let scan = |tx: &mut pmtx_engine::Transaction<'_>, direction, limit| {
                let mut upper = Vec::new();
                tx.scan_secondary(items, group, prefix_range(&[2], &mut upper), direction, limit)
                    .map(|rows| rows.into_iter().map(|(key, _)| key[1]).collect::<Vec<u8>>())
            };
            let forward = scan(tx, ScanDirection::Forward, 100)?;
            let reverse = scan(tx, ScanDirection::Reverse, 100)?;
            let first_two = scan(tx, ScanDirection::Forward, 2)?;
            Ok((by_primary, forward, reverse, first_two))
        };
        let finished = if read_only { reader.run_read_only(&mut body) } else { reader.run(&mut body) }.unwrap();
        let (by_primary, forward, reverse, first_two) = finished.committed().unwrap();
        assert_eq!(by_primary.len(), 4, "{setup:?}: four rows in group 2");
        assert_eq!(forward, by_primary, "{setup:?} (read-only {read_only}): the scan disagrees with the primary reads");
        let mut reversed = by_primary.clone();
        reversed.reverse();
        assert_eq!(reverse, reversed, "{setup:?} (read-only {read_only}): reverse scan");
        assert_eq!(first_two, by_primary[..2], "{setup:?} (read-only {read_only}): limited scan");
        mover.wait_all_acknowledged(|_, _| {}).unwrap();
    }
}

/// Two transactions that each insert into a range only while it holds
/// fewer than `BOUND` rows never leave more than `BOUND` rows, whatever
/// their timestamps: the second begins after the first, commits its insert
/// before the first scans, and the first must then see it (or retry).
/// (Timestamp ordering let the first, older one scan below the second's
/// insert and commit its own: three rows, a phantom.)
fn bounded_range_inserts_are_serializable(engine: impl Into<Setup>) {
    const BOUND: usize = 2;
    let setup = engine.into();
    let blocks = nested_blocks(&setup);
    let mut options = setup.options(vec![TableSchema::ordered("slots").max_value_len(8)]);
    if blocks {
        options.max_attempts = 3;
    }
    let db = Database::open(options).unwrap();
    let slots = db.table_id("slots").unwrap();
    let range = || (Bound::Included(&b"r"[..]), Bound::Excluded(&b"s"[..]));
    let fill = |tx: &mut pmtx_engine::Transaction<'_>, slot: u8| -> Result<bool, TxError> {
        let rows = tx.scan(slots, range(), ScanDirection::Forward, 100)?;
        if rows.len() < BOUND {
            tx.put(slots, &[b'r', slot], &[slot])?;
            return Ok(true);
        }
        Ok(false)
    };
    let mut first = db.worker(0).unwrap();
    let mut second = db.worker(1).unwrap();
    first.run(|tx| tx.put(slots, b"r\x01", &[1])).unwrap();
    let mut nested = false;
    let finished = first
        .run(|tx| {
            if !nested {
                nested = true;
                match second.run_pipelined(0, false, |tx2| fill(tx2, 2)) {
                    Ok((outcome, _)) => assert!(matches!(outcome, Outcome::Committed(true))),
                    Err(DbError::TooManyAborts { .. }) => assert!(blocks, "the nested insert gave up"),
                    Err(error) => panic!("the nested insert failed: {error}"),
                }
            }
            fill(tx, 3)
        })
        .unwrap();
    second.wait_all_acknowledged(|_, _| {}).unwrap();
    let rows =
        first.run_read_only(|tx| tx.scan(slots, range(), ScanDirection::Forward, 100)).unwrap().committed().unwrap();
    let keys: Vec<u8> = rows.iter().map(|(key, _)| key[1]).collect();
    assert!(
        keys.len() <= BOUND,
        "{setup:?}: the range holds {keys:?}, more than {BOUND} (the first inserted: {:?})",
        finished.committed()
    );
    assert_eq!(keys.len(), BOUND, "{setup:?}: one of the two fills the range: {keys:?}");
}

/// Both patterns above from two threads at once, with rows moving between
/// secondary keys, deleted and re-inserted (so stale entries meet
/// reclamation), and ranges filled and drained: every transaction's
/// secondary scan agrees with its primary reads, and no transaction ever
/// sees the bounded range over its bound.
///
/// Under snapshot isolation two transactions that both read the range one
/// row short of the bound may both insert (a write skew over the range,
/// which SI admits), so there the bound is one higher: with two threads
/// an insert needs a snapshot below the bound, and the other thread can
/// add only one row while it runs, since its next insert would need to
/// read the range below the bound again.
fn secondary_and_range_invariants_under_concurrency(engine: impl Into<Setup>) {
    const BOUND: usize = 3;
    const ITERATIONS: u64 = 300;
    let setup = engine.into();
    let limit = match pmtx_engine::engine_catalog::entry(setup.engine).isolation() {
        pmtx_engine::engine_catalog::Isolation::Snapshot => BOUND + 1,
        _ => BOUND,
    };
    let seed = 0x005E_C00D ^ ITERATIONS;
    let db = Database::open(setup.options(vec![
        TableSchema::ordered("items").max_value_len(8).secondary("group", group_of),
        TableSchema::ordered("slots").max_value_len(8),
    ]))
    .unwrap();
    let items = db.table_id("items").unwrap();
    let group = db.secondary_id(items, "group").unwrap();
    let slots = db.table_id("slots").unwrap();
    load_groups(&db, items);
    let range = || (Bound::Included(&b"r"[..]), Bound::Excluded(&b"s"[..]));
    let failure = std::sync::Mutex::new(None::<String>);
    std::thread::scope(|scope| {
        for id in 0..2u64 {
            let (db, failure) = (&db, &failure);
            scope.spawn(move || {
                let mut worker = db.worker(id as usize).unwrap();
                let mut state = seed ^ (id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut next = move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                for _ in 0..ITERATIONS {
                    let (choice, row, target) = (next() % 100, (next() % ROWS as u64) as u8, (next() % 4) as u8);
                    let result = match choice {
                        0..=29 => worker.run(|tx| {
                            if tx.get(items, &[b'a', row])?.is_some() {
                                tx.put(items, &[b'a', row], &[target])?;
                            }
                            Ok(None)
                        }),
                        30..=39 => worker.run(|tx| {
                            if tx.get(items, &[b'a', row])?.is_some() {
                                tx.delete(items, &[b'a', row])?;
                            } else {
                                tx.put(items, &[b'a', row], &[target])?;
                            }
                            Ok(None)
                        }),
                        40..=79 => {
                            let check = |tx: &mut pmtx_engine::Transaction<'_>| {
                                let mut by_primary = Vec::new();
                                for i in 0..ROWS {
                                    if tx.get(items, &[b'a', i])?.is_some_and(|value| value[0] == target) {
                                        by_primary.push(i);
                                    }
                                }
                                let mut upper = Vec::new();
                                let direction =
                                    if row % 2 == 0 { ScanDirection::Forward } else { ScanDirection::Reverse };
                                let mut scanned: Vec<u8> = tx
                                    .scan_secondary(items, group, prefix_range(&[target], &mut upper), direction, 100)?
                                    .into_iter()
                                    .map(|(key, _)| key[1])
                                    .collect();
                                if direction == ScanDirection::Reverse {
                                    scanned.reverse();
                                }
                                Ok((by_primary != scanned)
                                    .then(|| format!("group {target}: primary {by_primary:?}, scan {scanned:?}")))
                            };
                            if choice < 60 {
                                worker.run_read_only(check)
                            } else {
                                worker.run(check)
                            }
                        }
                        _ => worker.run(|tx| {
                            let rows = tx.scan(slots, range(), ScanDirection::Forward, 100)?;
                            if rows.len() > limit {
                                return Ok(Some(format!("the range holds {} rows", rows.len())));
                            }
                            if rows.len() < BOUND {
                                tx.put(slots, &[b'r', row], &[row])?;
                            } else {
                                tx.delete(slots, &rows[(row as usize) % rows.len()].0)?;
                            }
                            Ok(None)
                        }),
                    };
                    match result {
                        Ok(finished) => {
                            if let Some(Some(message)) = finished.committed() {
                                failure.lock().unwrap().get_or_insert(message);
                            }
                        }
                        // The locking protocols may give up on a conflict.
                        Err(DbError::TooManyAborts { .. }) => {}
                        Err(error) => panic!("{error}"),
                    }
                }
                worker.wait_all_acknowledged(|_, _| {}).unwrap();
            });
        }
    });
    let failure = failure.into_inner().unwrap();
    assert!(failure.is_none(), "{setup:?} (seed {seed:#x}): {}", failure.unwrap_or_default());
}

/// A transaction whose read and write sets are far larger than a linear
/// search is used for sees its own writes, rewrites and deletes in place,
/// and commits exactly its last values.
fn large_transactions_read_their_own_writes(engine: impl Into<Setup>) {
    let setup = engine.into();
    let db = open(setup);
    let accounts = db.table_id("accounts").unwrap();
    load(&db);
    let mut worker = db.worker(0).unwrap();
    let expected = |account: u64| -> Option<u64> {
        match account {
            0..60 => Some(INITIAL + 2 * account + 1),
            100..150 => Some(account),
            // Deleted by the transaction (60..64) or never present.
            _ => None,
        }
    };
    worker
        .run(|tx| {
            for account in 0..ACCOUNTS {
                let old = balance(&tx.get(accounts, &key(account))?.unwrap());
                tx.put(accounts, &key(account), &(old + 2 * account).to_le_bytes())?;
            }
            for account in 0..ACCOUNTS {
                let seen = balance(&tx.get(accounts, &key(account))?.unwrap());
                assert_eq!(seen, INITIAL + 2 * account, "own write of account {account}");
                tx.put(accounts, &key(account), &(seen + 1).to_le_bytes())?;
            }
            for account in 60..ACCOUNTS {
                assert!(tx.delete(accounts, &key(account))?);
                assert_eq!(tx.get(accounts, &key(account))?, None);
            }
            for account in 100..150 {
                assert!(tx.insert(accounts, &key(account), &account.to_le_bytes())?);
            }
            let rows = tx.scan(accounts, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1_000)?;
            let seen: Vec<(u64, u64)> =
                rows.iter().map(|(k, v)| (u64::from_be_bytes(k.as_slice().try_into().unwrap()), balance(v))).collect();
            let wanted: Vec<(u64, u64)> =
                (0..150).filter_map(|account| expected(account).map(|value| (account, value))).collect();
            assert_eq!(seen, wanted, "scan inside the transaction");
            Ok(())
        })
        .unwrap();
    let committed = worker
        .run(|tx| (0..150).map(|account| tx.get(accounts, &key(account))).collect::<Result<Vec<_>, _>>())
        .unwrap()
        .committed()
        .unwrap();
    for (account, value) in committed.into_iter().enumerate() {
        let account = account as u64;
        assert_eq!(value.map(|bytes| balance(&bytes)), expected(account), "account {account} after commit");
    }
    setup.check_crossed_exclusive_stage(&db);
}

fn bad_input_is_typed(engine: impl Into<Setup>) {
    let db = open(engine);
    let accounts = db.table_id("accounts").unwrap();
    assert!(matches!(db.table_id("nope"), Err(DbError::UnknownTable(_))));
    let mut worker = db.worker(0).unwrap();
    let error = worker.run(|tx| tx.put(accounts, b"k", &[0u8; 65])).unwrap_err();
    assert!(matches!(error, DbError::ValueTooLarge { len: 65, max: 64, .. }), "{error}");
    let error = worker.run(|tx| tx.put(accounts, &[1u8; 65], b"v")).unwrap_err();
    assert!(matches!(error, DbError::KeyTooLong { .. }), "{error}");
    let hash = db.table_id("flags").unwrap();
    let error =
        worker.run(|tx| tx.scan(hash, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, 1)).unwrap_err();
    assert!(matches!(error, DbError::InvalidConfig(_)), "{error}");
    assert!(matches!(db.worker(99), Err(DbError::InvalidConfig(_))));
    // A body that always aborts gives up after max_attempts.
    let error = worker.run(|_tx| -> Result<(), TxError> { Err(TxError::Abort(AbortReason::ReadValidation)) });
    assert!(matches!(error, Err(DbError::TooManyAborts { .. })));
}

macro_rules! for_each_engine {
    ($($test:ident),*) => {
        mod silo {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Silo) })*
        }
        mod group_commit {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::GroupCommit) })*
        }
        mod zen {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Zen) })*
        }
        mod zen_naive_alloc {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::ZenNaiveAlloc) })*
        }
        mod zen_plus {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::ZenPlus) })*
        }
        mod dbxn {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Dbxn) })*
        }
        mod dbxn_nvm {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::DbxnNvm) })*
        }
        mod dbx_naive {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::DbxNaive) })*
        }
        // The DBXN paper's disk rows: group commit and dbx-naive with their
        // logs on files (the in-memory preset's memory log files).
        mod dbx_disk {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::DbxDisk) })*
        }
        mod dbx_naive_disk {
            $(#[test] fn $test() { super::$test(super::Setup::disk(pmtx_engine::EngineKind::DbxNaive)) })*
        }
        // SP^3 and its serializable baseline (nvm-ideal is not serializable).
        mod sp3 {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Sp3) })*
        }
        mod nvm_tx {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::NvmTx) })*
        }
        mod mmdb {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Mmdb) })*
        }
        mod wbl {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Wbl) })*
        }
        // SP^3's Mnemosyne baseline: TinySTM's encounter-time write locks.
        mod mnemosyne {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Mnemosyne) })*
        }
        mod foedus {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Foedus) })*
        }
        mod foedus_gleaner_stress {
            $(#[test] fn $test() {
                super::$test(super::Setup { gleaner_stress: true, ..super::Setup::from(pmtx_engine::EngineKind::Foedus) })
            })*
        }
        // DBXN with simulated HTM aborts in each commit region (an abort
        // retries, then runs the same body in software).
        mod dbxn_sim_htm_1pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Dbxn, 10_000)) })*
        }
        mod dbxn_sim_htm_10pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Dbxn, 100_000)) })*
        }
        mod dbxn_sim_htm_50pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Dbxn, 500_000)) })*
        }
        mod dbxn_nvm_sim_htm_1pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::DbxnNvm, 10_000)) })*
        }
        mod dbxn_nvm_sim_htm_10pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::DbxnNvm, 100_000)) })*
        }
        mod dbxn_nvm_sim_htm_50pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::DbxnNvm, 500_000)) })*
        }
        // (dbx-naive logs inside its commit region, so it runs no HTM; it
        // is tested once above.)
        // The PHyTM family: every path with simulated HTM aborts per
        // hardware attempt, and the software paths alone without HTM.
        mod phytm_sim_htm_1pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Phytm, 10_000)) })*
        }
        mod phytm_sim_htm_10pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Phytm, 100_000)) })*
        }
        mod phytm_sim_htm_50pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Phytm, 500_000)) })*
        }
        mod phytm_no_htm {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Phytm) })*
        }
        mod phytm_paper_sim_htm_10pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::PhytmPaper, 100_000)) })*
        }
        mod phtm_sim_htm_1pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Phtm, 10_000)) })*
        }
        mod phtm_sim_htm_10pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Phtm, 100_000)) })*
        }
        mod phtm_sim_htm_50pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::Phtm, 500_000)) })*
        }
        mod phtm_no_htm {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Phtm) })*
        }
        // 2pl has no hardware path: the rate changes nothing, test each
        // rate anyway, as the issue's matrix asks.
        mod two_pl_sim_htm_1pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::TwoPl, 10_000)) })*
        }
        mod two_pl_sim_htm_10pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::TwoPl, 100_000)) })*
        }
        mod two_pl_sim_htm_50pct {
            $(#[test] fn $test() { super::$test(super::Setup::sim(pmtx_engine::EngineKind::TwoPl, 500_000)) })*
        }
    };
}

/// Every protocol besides Silo on both storages: DRAM records (`silo`,
/// `group-commit`) and the Zen heap.
macro_rules! for_each_protocol {
    ($($test:ident),*) => {
        mod protocols {
            mod occ_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::Occ)) })* }
            mod occ_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::GroupCommit, pmtx_engine::CcProtocol::Occ)) })* }
            mod occ_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::Occ)) })* }
            mod tictoc_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::TicToc)) })* }
            mod tictoc_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::TicToc)) })* }
            mod tictoc_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::TicToc)) })* }
            mod hekaton_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::Hekaton)) })* }
            mod hekaton_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::GroupCommit, pmtx_engine::CcProtocol::Hekaton)) })* }
            mod hekaton_dbxn { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::Hekaton)) })* }
            mod hekaton_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::Hekaton)) })* }
            mod mvcc_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::Mvcc)) })* }
            mod mvcc_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::GroupCommit, pmtx_engine::CcProtocol::Mvcc)) })* }
            mod mvcc_dbxn { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::Mvcc)) })* }
            mod mvcc_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::Mvcc)) })* }
            mod cicada_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::Cicada)) })* }
            mod cicada_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::GroupCommit, pmtx_engine::CcProtocol::Cicada)) })* }
            mod cicada_dbxn { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::Cicada)) })* }
            mod cicada_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::Cicada)) })* }
            // The Zen paper runs its MMDB and WBL baselines over Cicada.
            mod cicada_mmdb { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Mmdb, pmtx_engine::CcProtocol::Cicada)) })* }
            mod cicada_wbl { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Wbl, pmtx_engine::CcProtocol::Cicada)) })* }
            mod hstore_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::HStore)) })* }
            mod hstore_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::GroupCommit, pmtx_engine::CcProtocol::HStore)) })* }
            mod hstore_dbxn { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::HStore)) })* }
            mod hstore_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::HStore)) })* }
            mod no_wait_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::NoWait)) })* }
            mod no_wait_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::NoWait)) })* }
            mod no_wait_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::NoWait)) })* }
            mod wait_die_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::WaitDie)) })* }
            mod wait_die_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::GroupCommit, pmtx_engine::CcProtocol::WaitDie)) })* }
            mod wait_die_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::WaitDie)) })* }
            mod dl_detect_dram { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Silo, pmtx_engine::CcProtocol::DlDetect)) })* }
            mod dl_detect_durable { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Dbxn, pmtx_engine::CcProtocol::DlDetect)) })* }
            mod dl_detect_zen { $(#[test] fn $test() { super::super::$test(super::super::Setup::cc(pmtx_engine::EngineKind::Zen, pmtx_engine::CcProtocol::DlDetect)) })* }
        }
    };
}

for_each_protocol!(
    transfers_and_audits,
    write_skew_is_rejected,
    phantoms_are_detected,
    reverse_scans_limits_and_secondary,
    large_transactions_read_their_own_writes,
    bad_input_is_typed,
    secondary_scans_agree_with_primary_reads,
    bounded_range_inserts_are_serializable,
    secondary_and_range_invariants_under_concurrency
);

/// A multi-version reader sees its snapshot: a transfer that commits while
/// an audit is half-way through neither shows in the audit nor aborts it.
fn snapshot_reads_do_not_abort(setup: Setup) {
    let engine = setup.engine;
    let db = open(setup);
    load(&db);
    let accounts = db.table_id("accounts").unwrap();
    let mut auditor = db.worker(0).unwrap();
    let mut transfer = db.worker(1).unwrap();
    let mut moved = false;
    let finished = auditor
        .run_read_only(|tx| {
            let mut total = 0;
            for account in 0..ACCOUNTS {
                total += balance(&tx.get(accounts, &key(account))?.unwrap());
                if account == ACCOUNTS / 2 && !moved {
                    moved = true;
                    // Move 100 from an account read to one not yet read.
                    let (outcome, _) = transfer
                        .run_pipelined(0, false, |tx2| {
                            let from = balance(&tx2.get(accounts, &key(0))?.unwrap());
                            let to = balance(&tx2.get(accounts, &key(ACCOUNTS - 1))?.unwrap());
                            tx2.put(accounts, &key(0), &(from - 100).to_le_bytes())?;
                            tx2.put(accounts, &key(ACCOUNTS - 1), &(to + 100).to_le_bytes())?;
                            Ok(())
                        })
                        .unwrap();
                    assert!(matches!(outcome, Outcome::Committed(())), "{engine}: the transfer commits");
                }
            }
            Ok(total)
        })
        .unwrap();
    assert_eq!(finished.attempts, 1, "{engine}: a snapshot reader never aborts");
    assert_eq!(finished.committed(), Some(ACCOUNTS * INITIAL), "{engine}: the audit saw its snapshot");
    transfer.wait_all_acknowledged(|_, _| {}).unwrap();
    // A new transaction sees the transfer.
    let last = worker_get(&db, ACCOUNTS - 1);
    assert_eq!(last, INITIAL + 100, "{engine}: the transfer is visible afterwards");
}

fn worker_get(db: &Database, account: u64) -> u64 {
    let accounts = db.table_id("accounts").unwrap();
    let mut worker = db.worker(2).unwrap();
    worker.run(|tx| Ok(balance(&tx.get(accounts, &key(account))?.unwrap()))).unwrap().committed().unwrap()
}

#[test]
fn snapshot_reads_do_not_abort_on_dram() {
    snapshot_reads_do_not_abort(Setup::cc(EngineKind::Silo, CcProtocol::Hekaton));
}

#[test]
fn snapshot_reads_do_not_abort_on_group_commit() {
    snapshot_reads_do_not_abort(Setup::cc(EngineKind::GroupCommit, CcProtocol::Hekaton));
}

#[test]
fn snapshot_reads_do_not_abort_on_zen() {
    snapshot_reads_do_not_abort(Setup::cc(EngineKind::Zen, CcProtocol::Hekaton));
}

/// zen+'s read-only transactions read at the oldest running snapshot.
#[test]
fn snapshot_reads_do_not_abort_on_zen_plus() {
    snapshot_reads_do_not_abort(Setup::cc(EngineKind::ZenPlus, CcProtocol::Hekaton));
}

/// zen+'s read-only transactions and a commit acknowledged before they
/// began, while an older transaction still runs: at the oldest running
/// snapshot (the paper's, the default) they miss it; at the current one
/// (`snapshot=current`) they see it.
fn zen_plus_read_only_snapshot(snapshot: pmtx_engine::ReadOnlySnapshot) -> (u64, u64) {
    let mut options = Setup::from(EngineKind::ZenPlus)
        .options(vec![TableSchema::ordered("accounts").max_value_len(64), TableSchema::hashed("flags")]);
    options.zen_plus.read_only_snapshot = snapshot;
    let db = Database::open(options).unwrap();
    load(&db);
    let accounts = db.table_id("accounts").unwrap();
    let mut older = db.worker(0).unwrap();
    let mut writer = db.worker(1).unwrap();
    let mut reader = db.worker(2).unwrap();
    let mut seen = None;
    older
        .run(|tx| {
            let before = balance(&tx.get(accounts, &key(5))?.unwrap());
            if seen.is_none() {
                writer.run(|tx2| tx2.put(accounts, &key(5), &(INITIAL + 1).to_le_bytes())).unwrap();
                // Acknowledged: the read-only transaction begins after it.
                let read = reader.run_read_only(|tx3| Ok(balance(&tx3.get(accounts, &key(5))?.unwrap()))).unwrap();
                assert_eq!(read.attempts, 1, "read-only transactions never abort");
                seen = read.committed();
            }
            Ok(before)
        })
        .unwrap();
    drop((older, writer, reader));
    (seen.unwrap(), worker_get(&db, 5))
}

#[test]
fn zen_plus_read_only_at_the_oldest_snapshot_misses_an_acknowledged_commit() {
    let (seen, after) = zen_plus_read_only_snapshot(pmtx_engine::ReadOnlySnapshot::Oldest);
    assert_eq!(seen, INITIAL, "the oldest running snapshot predates the commit");
    assert_eq!(after, INITIAL + 1);
}

#[test]
fn zen_plus_read_only_at_the_current_snapshot_sees_an_acknowledged_commit() {
    let (seen, after) = zen_plus_read_only_snapshot(pmtx_engine::ReadOnlySnapshot::Current);
    assert_eq!(seen, INITIAL + 1, "strictly serializable: an acknowledged commit is visible");
    assert_eq!(after, INITIAL + 1);
}

/// zen+ with frequent exclusive stages: larger and retried transactions
/// run alone (the others abort or wait), with direct NVM writes, beside
/// ordinary ones. (Write skew and phantoms open a second transaction on
/// the same thread inside the first, which an exclusive stage would wait
/// for forever: they run in `zen_plus` above with the default thresholds.)
mod zen_plus_exclusive {
    #[test]
    fn transfers_and_audits() {
        super::transfers_and_audits(super::Setup::zen_plus_exclusive())
    }
    #[test]
    fn reverse_scans_limits_and_secondary() {
        super::reverse_scans_limits_and_secondary(super::Setup::zen_plus_exclusive())
    }
    #[test]
    fn large_transactions_read_their_own_writes() {
        super::large_transactions_read_their_own_writes(super::Setup::zen_plus_exclusive())
    }
    #[test]
    fn bad_input_is_typed() {
        super::bad_input_is_typed(super::Setup::zen_plus_exclusive())
    }
    #[test]
    fn secondary_and_range_invariants_under_concurrency() {
        super::secondary_and_range_invariants_under_concurrency(super::Setup::zen_plus_exclusive())
    }
}

/// The locking protocols refuse more workers than a lock word names.
#[test]
fn too_many_workers_for_a_lock_word_are_refused() {
    for cc in [CcProtocol::NoWait, CcProtocol::WaitDie, CcProtocol::DlDetect, CcProtocol::HStore] {
        let mut options = Setup::cc(EngineKind::Silo, cc).options(vec![TableSchema::hashed("t")]);
        options.workers = 64;
        let error = Database::open(options).err().expect("64 workers exceed a lock word");
        assert!(matches!(error, DbError::InvalidConfig(_)), "{error}");
        assert!(error.to_string().contains("at most 63 workers"), "{error}");
    }
}

for_each_engine!(
    transfers_and_audits,
    write_skew_is_rejected,
    phantoms_are_detected,
    reverse_scans_limits_and_secondary,
    large_transactions_read_their_own_writes,
    bad_input_is_typed,
    secondary_scans_agree_with_primary_reads,
    bounded_range_inserts_are_serializable,
    secondary_and_range_invariants_under_concurrency
);

/// `pisces` runs snapshot isolation (dual-version concurrency control), so
/// it gets every test of the suite whose property SI guarantees. Left out,
/// as SI legitimately violates them (the catalog labels pisces not
/// serializable): `write_skew_is_rejected` (write skew is SI's anomaly:
/// `pisces_admits_write_skew` checks that it commits),
/// `phantoms_are_detected` (a scan reads its snapshot and is never
/// validated) and `bounded_range_inserts_are_serializable` (a write skew
/// over a range). `secondary_and_range_invariants_under_concurrency`
/// allows SI that write skew: one row over the range's bound.
macro_rules! for_snapshot_isolation {
    ($($test:ident),*) => {
        mod pisces {
            $(#[test] fn $test() { super::$test(pmtx_engine::EngineKind::Pisces) })*
        }
    };
}

for_snapshot_isolation!(
    transfers_and_audits,
    reverse_scans_limits_and_secondary,
    large_transactions_read_their_own_writes,
    bad_input_is_typed,
    secondary_scans_agree_with_primary_reads,
    secondary_and_range_invariants_under_concurrency
);

#[test]
fn snapshot_reads_do_not_abort_on_pisces() {
    snapshot_reads_do_not_abort(Setup::from(EngineKind::Pisces));
}

/// The write skew of `write_skew_is_rejected` commits under `pisces`: each
/// transaction reads the other's flag clear at its snapshot and writes its
/// own, and no read is validated. (A serializable engine never leaves both
/// flags set.)
#[test]
fn pisces_admits_write_skew() {
    let db = open(EngineKind::Pisces);
    let flags = db.table_id("flags").unwrap();
    let mut first = db.worker(0).unwrap();
    let mut second = db.worker(1).unwrap();
    let mut inner_ran = false;
    let finished = first
        .run(|tx_a| {
            let a_sees_b = tx_a.get(flags, b"b")?;
            if !inner_ran {
                inner_ran = true;
                let inner = second.run_pipelined(0, false, |tx_b| {
                    if tx_b.get(flags, b"a")?.is_none() {
                        tx_b.put(flags, b"b", b"on")?;
                    }
                    Ok(())
                });
                assert!(matches!(inner.unwrap().0, Outcome::Committed(())));
            }
            if a_sees_b.is_none() {
                tx_a.put(flags, b"a", b"on")?;
            }
            Ok(())
        })
        .unwrap();
    second.wait_all_acknowledged(|_, _| {}).expect("acknowledged");
    assert_eq!(finished.attempts, 1, "snapshot isolation validates no read");
    let mut worker = db.worker(2).unwrap();
    let both = worker
        .run_read_only(|tx| Ok((tx.get(flags, b"a")?.is_some(), tx.get(flags, b"b")?.is_some())))
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(both, (true, true), "both sides of the write skew committed");
}

/// First committer wins under `pisces`: a transaction whose row another
/// commit replaced after its snapshot aborts, and its retry sees the other
/// commit, so no update is lost.
#[test]
fn pisces_first_committer_wins() {
    let db = open(EngineKind::Pisces);
    load(&db);
    let accounts = db.table_id("accounts").unwrap();
    let mut first = db.worker(0).unwrap();
    let mut second = db.worker(1).unwrap();
    let mut inner_ran = false;
    let finished = first
        .run(|tx| {
            let mine = balance(&tx.get(accounts, &key(0))?.unwrap());
            if !inner_ran {
                inner_ran = true;
                let inner = second.run_pipelined(0, false, |tx2| {
                    let theirs = balance(&tx2.get(accounts, &key(0))?.unwrap());
                    tx2.put(accounts, &key(0), &(theirs + 1).to_le_bytes())
                });
                assert!(matches!(inner.unwrap().0, Outcome::Committed(())));
            }
            tx.put(accounts, &key(0), &(mine + 10).to_le_bytes())
        })
        .unwrap();
    second.wait_all_acknowledged(|_, _| {}).expect("acknowledged");
    assert!(finished.attempts >= 2, "the later writer of the row must have aborted");
    assert_eq!(worker_get(&db, 0), INITIAL + 11, "no update is lost");
}

/// At most two versions of a row: while a snapshot still reads a row's
/// older version, a commit may add one version (the current one becomes
/// the older), but a second commit of the row would need a third and is
/// refused until the old snapshot ends.
#[test]
fn pisces_keeps_at_most_two_versions() {
    let mut options = Setup::from(EngineKind::Pisces)
        .options(vec![TableSchema::ordered("accounts").max_value_len(64), TableSchema::hashed("flags")]);
    options.max_attempts = 3;
    let db = Database::open(options).unwrap();
    load(&db);
    let accounts = db.table_id("accounts").unwrap();
    let mut reader = db.worker(0).unwrap();
    let mut writer = db.worker(1).unwrap();
    let bump = |writer: &mut pmtx_engine::Worker| {
        writer
            .run_pipelined(0, false, |tx| {
                let value = balance(&tx.get(accounts, &key(3))?.unwrap());
                tx.put(accounts, &key(3), &(value + 1).to_le_bytes())
            })
            .map(|(outcome, _)| outcome)
    };
    let mut checked = false;
    let seen = reader
        .run_read_only(|tx| {
            let before = balance(&tx.get(accounts, &key(3))?.unwrap());
            if !checked {
                checked = true;
                assert!(matches!(bump(&mut writer), Ok(Outcome::Committed(()))), "a second version is allowed");
                match bump(&mut writer) {
                    Err(DbError::TooManyAborts { last, .. }) => assert_eq!(last, AbortReason::WriteLock),
                    other => panic!("a third version must be refused: {:?}", other.map(|_| ())),
                }
            }
            let after = balance(&tx.get(accounts, &key(3))?.unwrap());
            assert_eq!(before, after, "the reader keeps its snapshot");
            Ok(after)
        })
        .unwrap();
    assert_eq!(seen.committed(), Some(INITIAL));
    assert!(matches!(bump(&mut writer), Ok(Outcome::Committed(()))), "the snapshot ended: the write goes through");
    writer.wait_all_acknowledged(|_, _| {}).expect("acknowledged");
    assert_eq!(worker_get(&db, 3), INITIAL + 2);
}
