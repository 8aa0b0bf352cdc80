//! The DBXN family through the public API: the parity rule on constructed
//! record states, HTM abort injection and statistics, the NVM-friendly log
//! layout, checkpoints with log (and value chunk) truncation, and recovery.

use pmtx_engine::internals::log::{self, LogLayout, LogShared, LogStoreMode, LogWriter};
use pmtx_engine::internals::pool_layout::DBXN_VALUE_CHUNK_KIND;
use pmtx_engine::internals::record::{self, Record, RowKind, UNPERSISTED};
use pmtx_engine::internals::WriteSet;
use pmtx_engine::{
    AbortReason, Database, DbError, DbOptions, DbxnOptions, EngineKind, Outcome, PoolLocation, TableId, TableSchema,
    Worker,
};
use pmtx_htm::HtmConfig;
use pmtx_pm::{Direct, PmBackend, PmOptions, Pool};
use std::sync::Arc;
use std::time::Duration;

const FAMILY: [EngineKind; 3] = [EngineKind::Dbxn, EngineKind::DbxnNvm, EngineKind::DbxNaive];

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("t").max_value_len(2048)]
}

fn get(worker: &mut Worker, table: TableId, key: &[u8]) -> Option<Vec<u8>> {
    worker.run_read_only(|tx| tx.get(table, key)).unwrap().committed().unwrap()
}

/// Marks the record of `key` as installed-but-not-durable (what a DBXN
/// writer leaves between its commit region and its log fence).
fn make_unpersisted(db: &Database, table: TableId, key: &[u8]) -> u64 {
    let record = pmtx_engine::internals::dram_table(db, table).unwrap().expect("DRAM records").lookup(key).unwrap();
    let word = record.lock(1).expect("unlocked");
    record.store_word(word | UNPERSISTED);
    record::tid_of(word)
}

#[test]
fn parity_rule_on_constructed_states() {
    let db = Database::open(DbOptions::in_memory(EngineKind::Dbxn, tables())).unwrap();
    let t = db.table_id("t").unwrap();
    let mut worker = db.worker(1).unwrap();
    worker.run(|tx| tx.put(t, b"x", b"10")).unwrap();
    let record = pmtx_engine::internals::dram_table(&db, t).unwrap().expect("DRAM records").lookup(b"x").unwrap();

    // The bit stays set for two attempts, then the "writer's log" becomes
    // durable while the third attempt runs: exactly two NotYetDurable aborts,
    // and the third attempt, which read the odd version, commits.
    let tid = make_unpersisted(&db, t, b"x");
    let mut attempt = 0;
    let finished = worker
        .run(|tx| {
            attempt += 1;
            let x = tx.get(t, b"x")?.expect("present");
            assert_eq!(x, b"10", "an odd version is read, not an early abort");
            if attempt == 3 {
                assert!(record.clear_unpersisted(tid));
            }
            tx.put(t, b"y", &x)
        })
        .unwrap();
    assert_eq!(finished.attempts, 3);
    assert_eq!(worker.stats().aborts[AbortReason::NotYetDurable.index()], 2);
    assert_eq!(worker.stats().total_aborts(), 2);
    assert_eq!(get(&mut worker, t, b"y").as_deref(), Some(&b"10"[..]));
    worker.reset_stats();

    // Read-only transactions follow the same rule.
    let tid = make_unpersisted(&db, t, b"x");
    let mut attempt = 0;
    let finished = worker
        .run_read_only(|tx| {
            attempt += 1;
            let x = tx.get(t, b"x")?;
            if attempt == 2 {
                record.clear_unpersisted(tid);
            }
            Ok(x)
        })
        .unwrap();
    assert_eq!(finished.attempts, 2);
    assert_eq!(worker.stats().aborts[AbortReason::NotYetDurable.index()], 1);

    // Clearing never clobbers a later version: the compare-exchange only
    // matches the writer's own TID.
    let word = record.word();
    assert!(!record.clear_unpersisted(record::tid_of(word) + 1));
    assert_eq!(record.word(), word);
    // A changed (not just odd) version is an ordinary validation failure.
    let mut attempt = 0;
    worker
        .run(|tx| {
            attempt += 1;
            let x = tx.get(t, b"x")?;
            if attempt == 1 {
                let record =
                    pmtx_engine::internals::dram_table(&db, t).unwrap().expect("DRAM records").lookup(b"x").unwrap();
                let word = record.lock(1).unwrap();
                record.store_word(record::word_of(record::tid_of(word) + 1, 0));
            }
            tx.put(t, b"z", &x.unwrap())
        })
        .unwrap();
    assert_eq!(worker.stats().aborts[AbortReason::ReadValidation.index()], 1);
}

/// DBXN's commit region is elided: a simulated abort retries the hardware
/// attempt and, past the budget, runs the same lock + validate + install
/// body in software; it never aborts the transaction. dbx-naive logs inside
/// its region, so it has no HTM instance at all.
#[test]
fn htm_sim_aborts_retry_then_fall_back_to_the_same_commit() {
    for rate in [500_000u32, 1_000_000] {
        let mut options = DbOptions::in_memory(EngineKind::Dbxn, tables());
        options.htm = HtmConfig::sim(7, rate);
        let db = Database::open(options).unwrap();
        let t = db.table_id("t").unwrap();
        let mut worker = db.worker(0).unwrap();
        for i in 0u32..300 {
            let outcome = worker.run(|tx| tx.put(t, &i.to_be_bytes(), b"v")).unwrap();
            assert_eq!(outcome.outcome, Outcome::Committed(()));
            assert_eq!(outcome.attempts, 1, "an injected abort never aborts the transaction");
        }
        let htm = db.stats().htm.expect("sim HTM reports statistics");
        assert_eq!(worker.stats().aborts[AbortReason::Region.index()], 0);
        assert_eq!(htm.regions, 300, "one region per commit: {htm:?}");
        assert_eq!(htm.hardware_commits + htm.fallback_executions, 300, "{htm:?}");
        let attempts = htm.sim_injected_aborts() + htm.hardware_commits;
        let observed = htm.sim_injected_aborts() as f64 / attempts as f64;
        let expected = f64::from(rate) / 1e6;
        assert!((observed - expected).abs() < 0.1, "abort rate {observed}, injected {expected}: {htm:?}");
        if rate == 1_000_000 {
            // Every hardware attempt aborts: every commit ran the fallback.
            assert_eq!(htm.fallback_executions, 300, "{htm:?}");
        }
        for i in 0u32..300 {
            assert_eq!(get(&mut worker, t, &i.to_be_bytes()).as_deref(), Some(&b"v"[..]));
        }
    }
    let mut options = DbOptions::in_memory(EngineKind::DbxNaive, tables());
    options.htm = HtmConfig::sim(7, 100_000);
    assert!(Database::open(options).unwrap().stats().htm.is_none(), "dbx-naive runs no region");
    // `none`: no HTM instance at all (the software path, no global lock).
    let db = Database::open(DbOptions::in_memory(EngineKind::Dbxn, tables())).unwrap();
    assert!(db.stats().htm.is_none());
    // `rtm` where it is not available is a typed configuration error.
    if !pmtx_htm::rtm_support().is_available() {
        let mut options = DbOptions::in_memory(EngineKind::Dbxn, tables());
        options.htm = HtmConfig::rtm();
        assert!(matches!(Database::open(options), Err(DbError::InvalidConfig(_))));
    }
}

/// A write set of `(key, value)` pairs over throwaway records (the log
/// never touches the rows), and the records to free afterwards.
fn write_set(writes: &[(Vec<u8>, Option<Vec<u8>>)]) -> (WriteSet<Record>, Vec<std::ptr::NonNull<Record>>) {
    let mut set = WriteSet::default();
    let mut rows = Vec::new();
    for (key, value) in writes {
        let row = Record::allocate(key, 0);
        // SAFETY: the record lives until `free_rows`.
        set.push(TableId(0), unsafe { row.as_ref() }, key, value.as_deref(), false);
        rows.push(row);
    }
    (set, rows)
}

fn free_rows(rows: Vec<std::ptr::NonNull<Record>>) {
    for row in rows {
        // SAFETY: the write set that referenced it is gone.
        unsafe { Record::free(row) };
    }
}

#[test]
fn log_layout_pads_aligns_and_scans() {
    let pm = PmOptions::default();
    for layout in [
        LogLayout::NVM,
        LogLayout::PLAIN,
        LogLayout { non_temporal: true, pad_small_to_line: false, align_large_to_256: true },
        LogLayout { non_temporal: false, pad_small_to_line: true, align_large_to_256: false },
    ] {
        let pool = Arc::new(Pool::<Direct>::create_in_memory(4 << 20, 64 << 10, &pm).unwrap());
        let shared = Arc::new(LogShared::default());
        let mut writer =
            LogWriter::new(Arc::clone(&pool), 3, LogStoreMode::Cached, shared, 1).unwrap().with_layout(layout);
        let mut expected = Vec::new();
        let mut previous_end = 0;
        // Value sizes give small and large records, enough to roll segments.
        for i in 0u64..400 {
            let size = [1usize, 40, 180, 230, 300, 700, 1500][i as usize % 7];
            let writes = vec![(i.to_be_bytes().to_vec(), Some(vec![i as u8; size])), (b"gone".to_vec(), None)];
            let (set, rows) = write_set(&writes);
            let raw = log::record_length(&set);
            writer.prepare(&set).unwrap();
            drop(set);
            free_rows(rows);
            let tid = record::first_tid_of_epoch(1) + i;
            let Ok((start, end)) = writer.append_prepared(tid);
            let Ok(()) = writer.make_durable((start, end));
            let record_len = layout.padded_len(raw);
            // No terminator follows a record: its range ends with it.
            let record_start = end - record_len;
            if raw < 256 && layout.pad_small_to_line {
                assert_eq!(record_len % 64, 0, "{layout:?}: small record padded to lines");
            }
            if layout.pad_small_to_line && layout.align_large_to_256 {
                assert_eq!(record_start % 64, 0, "{layout:?}: every record starts on a line");
            }
            if raw >= 256 && layout.align_large_to_256 {
                assert_eq!(record_start % 256, 0, "{layout:?}: large record starts on 256 B");
                assert_eq!(record_len % 256, 0, "{layout:?}: large record padded to 256 B");
            }
            if !layout.pad_small_to_line && !layout.align_large_to_256 {
                assert_eq!(record_len, raw);
                if previous_end != 0 && start == previous_end {
                    assert_eq!(record_start, start, "plain records are packed");
                }
            }
            previous_end = end;
            expected.push((tid, writes));
        }
        let (segments, broken) = log::find_segments(&pool);
        assert!(broken.is_empty());
        assert!(segments.len() > 1, "{layout:?}: segments rolled");
        let mut scanned = Vec::new();
        for segment in &segments {
            log::scan_segment(&pool, segment, |record| scanned.push(record));
        }
        assert_eq!(scanned.len(), expected.len(), "{layout:?}: fillers are skipped, every record found");
        for (record, (tid, writes)) in scanned.iter().zip(&expected) {
            assert_eq!(record.tid, *tid);
            assert_eq!(record.writes.len(), 2);
            assert_eq!(record.writes[0].key, writes[0].0);
            assert_eq!(record.writes[0].value, writes[0].1);
            assert_eq!(record.writes[1].value, None);
        }
    }
}

/// Non-temporal stores versus memcpy + clwb, seen in the worker's counters.
#[test]
fn non_temporal_option_changes_how_records_persist() {
    for non_temporal in [true, false] {
        let mut options = DbOptions::in_memory(EngineKind::Dbxn, tables());
        options.dbxn = DbxnOptions { non_temporal, ..DbxnOptions::default() };
        let db = Database::open(options).unwrap();
        let t = db.table_id("t").unwrap();
        let mut worker = db.worker(0).unwrap();
        worker.run(|tx| tx.put(t, b"warm", b"up")).unwrap();
        let before = pmtx_pm::thread_counters();
        for i in 0u32..50 {
            worker.run(|tx| tx.put(t, &i.to_be_bytes(), &[7u8; 100])).unwrap();
        }
        let done = pmtx_pm::thread_counters().since(&before);
        assert!(done.fences >= 50, "one fence per commit at least: {done:?}");
        if non_temporal {
            assert!(done.non_temporal_bytes >= 50 * 192, "{done:?}");
            assert_eq!(done.lines_flushed, 0, "{done:?}");
        } else {
            assert_eq!(done.non_temporal_bytes, 0, "{done:?}");
            assert!(done.lines_flushed >= 50 * 2, "{done:?}");
        }
    }
}

fn value_chunks<B: PmBackend>(pool: &Pool<B>) -> usize {
    pool.owned_chunks().iter().filter(|(_, owner)| owner.kind() == DBXN_VALUE_CHUNK_KIND).count()
}

/// Periodic checkpoints truncate the log (and dbxn-nvm's value chunks);
/// dropping without close and reopening recovers every committed row; a
/// clean close leaves neither log nor value chunks.
#[test]
fn checkpoints_truncate_and_recovery_restores_commits() {
    for engine in FAMILY {
        for dbxn in [
            DbxnOptions::default(),
            DbxnOptions {
                non_temporal: false,
                pad_small_to_line: false,
                align_large_to_256: false,
                ..Default::default()
            },
        ] {
            let mut options = DbOptions::in_memory(engine, tables());
            options.workers = 2;
            options.pool = PoolLocation::InMemory { size: 16 << 20 };
            options.chunk_size = 64 << 10;
            options.checkpoint_interval = Some(Duration::from_millis(15));
            options.dbxn = dbxn;
            let pool = Arc::new(Pool::<Direct>::create_in_memory(16 << 20, 64 << 10, &options.pm).unwrap());
            let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
            let t = db.table_id("t").unwrap();
            let mut worker = db.worker(0).unwrap();
            let mut round = 0u32;
            let mut saw_values = false;
            while db.stats().log_segments_freed == 0 || round < 400 {
                let value = vec![round as u8; 40 + (round as usize * 37) % 600];
                loop {
                    match worker.run(|tx| tx.put(t, &(round % 64).to_be_bytes(), &value)) {
                        Ok(_) => break,
                        // The log outran a checkpointer that a loaded
                        // machine left unscheduled: wait for its next
                        // checkpoint to free log space, then write again.
                        Err(DbError::OutOfSpace(_)) => {
                            let before = db.stats().checkpoints;
                            let waited = std::time::Instant::now();
                            while db.stats().checkpoints == before {
                                assert!(
                                    waited.elapsed() < Duration::from_secs(120),
                                    "{engine}: no checkpoint freed log space"
                                );
                                std::thread::sleep(Duration::from_millis(5));
                            }
                        }
                        Err(error) => panic!("{engine}: {error}"),
                    }
                }
                saw_values |= value_chunks(&pool) > 0;
                round += 1;
                assert!(round < 200_000, "{engine}: the log was never truncated");
            }
            assert!(db.stats().checkpoints > 0);
            assert_eq!(saw_values, engine == EngineKind::DbxnNvm, "{engine}: value chunks");
            let mut expected = std::collections::BTreeMap::new();
            for k in 0u32..64 {
                expected.insert(k, get(&mut worker, t, &k.to_be_bytes()));
            }
            drop(worker);
            drop(db); // no clean close: the next open recovers from log + checkpoint
            let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap();
            let report = db.stats().recovery.expect("recovered");
            assert!(report.log_records_scanned > 0, "{engine}: {report:?}");
            assert_eq!(value_chunks(&pool), 0, "{engine}: recovery drops value copies");
            let mut worker = db.worker(1).unwrap();
            for (k, value) in &expected {
                assert_eq!(&get(&mut worker, t, &k.to_be_bytes()), value, "{engine}: key {k} after recovery");
            }
            worker.run(|tx| tx.put(t, b"after", b"reopen")).unwrap();
            drop(worker);
            db.close().unwrap();
            assert_eq!(value_chunks(&pool), 0);
            assert!(
                pool.owned_chunks().iter().all(|(_, owner)| owner.kind() != log::LOG_CHUNK_KIND),
                "{engine}: a clean close frees every log segment"
            );
            let db = Database::open_on_pool(options, Arc::clone(&pool)).unwrap();
            assert_eq!(db.stats().recovery.expect("opened").log_records_scanned, 0, "{engine}: no log after close");
            assert_eq!(get(&mut db.worker(0).unwrap(), t, b"after").as_deref(), Some(&b"reopen"[..]));
            assert_eq!(db.engine(), engine);
        }
    }
}

#[test]
fn a_pool_names_its_engine() {
    let pool = Arc::new(Pool::<Direct>::create_in_memory(8 << 20, 64 << 10, &PmOptions::default()).unwrap());
    let mut options = DbOptions::in_memory(EngineKind::Dbxn, tables());
    options.chunk_size = 64 << 10;
    Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap().close().unwrap();
    options.engine = EngineKind::GroupCommit;
    assert!(matches!(Database::open_on_pool(options, pool), Err(DbError::SchemaMismatch(_))));
    for engine in FAMILY {
        assert_eq!(EngineKind::parse(engine.name()), Some(engine));
        assert!(engine.is_durable());
    }
}
