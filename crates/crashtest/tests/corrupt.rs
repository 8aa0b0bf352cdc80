//! Corrupt input: byte mutations of a valid `group-commit` pool image (after
//! a short run and a checkpoint, with log records after it) in the pool
//! header, the clean-shutdown word, the root table, the chunk table, log
//! segments (kind 0x10: header and records) and checkpoint chunks (kind
//! 0x20: header and rows). Raw mutations (bit flips, bytes, interesting
//! words) mostly break a checksum; *checksum-fixed* mutations change the
//! content of a log record, a checkpoint row, a chunk header or the pool
//! header and recompute its CRC, so the parsers behind the checksums see
//! garbage. Opening the image (`Pool::open_image`) and recovering it
//! (`Database::open_on_pool`), then reading every table, must return `Ok`
//! or a typed error — never panic, never hang.
//!
//! Also here: running out of pool space mid-run returns
//! `DbError::OutOfSpace`, and everything acknowledged before stays intact
//! after reopening.

use pmtx_crashtest::harness::{Harness, WorkerEvents, WorkerPlan};
use pmtx_crashtest::matrix::{Damage, MatrixConfig};
use pmtx_crashtest::recover::recover_image;
use pmtx_crashtest::{db_options, durable_engines, parse_seed, Scale, WorkloadKind};
use pmtx_engine::{Database, DbError, DbOptions, EngineKind, TableSchema};
use pmtx_pm::{layout, Direct, Pool, PoolError, Sim, Structure};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{RngSeed, TestRunner};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

const POOL_SIZE: u64 = 2 << 20;
const CHUNK: u64 = layout::MIN_CHUNK_SIZE;
const LOG_KIND: u16 = pmtx_engine::internals::pool_layout::LOG_CHUNK_KIND;
const CHECKPOINT_KIND: u16 = pmtx_engine::internals::pool_layout::CHECKPOINT_CHUNK_KIND;

struct Quiet;

impl WorkerEvents for Quiet {
    fn started(&mut self, _s: u64) {}
    fn committed(&mut self, _s: u64, _order: Option<u32>) {}
    fn acknowledged(&mut self, _s: u64) {}
}

/// A valid image and where its structures are.
struct Base {
    harness: Harness,
    options: DbOptions,
    bytes: Vec<u8>,
    chunk_table: (u64, u64),
    /// (chunk offset, used bytes, segment sequence) of log segments.
    logs: Vec<(u64, u64, u64)>,
    /// (chunk offset, used bytes) of checkpoint chunks.
    checkpoints: Vec<(u64, u64)>,
}

fn used_bytes(bytes: &[u8], offset: u64) -> u64 {
    let chunk = &bytes[offset as usize..(offset + CHUNK) as usize];
    let last = chunk.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1) as u64;
    last.div_ceil(8) * 8
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let scale = Scale { accounts: 40, ..Scale::default() };
        let harness = Harness::new(WorkloadKind::Smallbank, scale, 2, 0xF022).unwrap();
        let options = db_options(EngineKind::GroupCommit, harness.tables(), 2, 0xF022, POOL_SIZE, CHUNK);
        let pool = Arc::new(Pool::<Sim>::create_in_memory(POOL_SIZE, CHUNK, &options.pm).unwrap());
        let db = Arc::new(Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap());
        harness.load(&db).unwrap();
        let stop = AtomicBool::new(false);
        for round in 0..2u64 {
            std::thread::scope(|scope| {
                for worker in 0..2 {
                    let (db, harness, stop) = (&db, &harness, &stop);
                    scope.spawn(move || {
                        harness
                            .run_worker(
                                db,
                                WorkerPlan { id: worker, first: round * 60 + 1, count: Some(60), fake_ack: false },
                                stop,
                                &mut Quiet,
                            )
                            .unwrap()
                    });
                }
            });
            if round == 0 {
                db.checkpoint().unwrap();
            }
        }
        drop(db);
        let bytes = pool.backend().persisted_image();
        drop(pool);
        let view = Pool::<Direct>::open_image(&bytes, &options.pm).unwrap();
        let geometry = view.geometry().clone();
        let mut logs = Vec::new();
        let mut checkpoints = Vec::new();
        for (chunk, owner) in view.owned_chunks() {
            let offset = view.chunk_offset(chunk);
            let used = used_bytes(&bytes, offset);
            if owner.kind() == LOG_KIND {
                let sequence = u64::from_le_bytes(bytes[offset as usize + 8..offset as usize + 16].try_into().unwrap());
                logs.push((offset, used, sequence));
            } else if owner.kind() == CHECKPOINT_KIND {
                checkpoints.push((offset, used));
            }
        }
        assert!(!logs.is_empty() && !checkpoints.is_empty(), "the base image has log segments and a checkpoint");
        let chunk_table = (layout::CHUNK_TABLE_OFFSET, geometry.chunk_count * 8);
        // The unmodified image recovers cleanly.
        let clean = recover_image::<Direct>(&harness, &options, &bytes, None, true, |_| {});
        assert!(clean.findings.is_empty(), "the base image must recover: {:?}", clean.findings);
        Base { harness, options, bytes, chunk_table, logs, checkpoints }
    })
}

#[derive(Clone, Debug)]
enum Edit {
    Flip { at: u64, bit: u8 },
    Byte { at: u64, value: u8 },
    Word { at: u64, value: u64 },
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    let word = prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        Just(u32::MAX as u64),
        Just(0x8000_0000_0000_0000),
        (0u64..1 << 24),
        any::<u64>()
    ];
    prop_oneof![
        (any::<u64>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (any::<u64>(), any::<u8>()).prop_map(|(at, value)| Edit::Byte { at, value }),
        (any::<u64>(), word).prop_map(|(at, value)| Edit::Word { at, value }),
    ]
}

/// Applies `edit` inside `start..start+len` (positions taken modulo len).
fn apply(bytes: &mut [u8], start: u64, len: u64, edit: &Edit) {
    if len == 0 {
        return;
    }
    match *edit {
        Edit::Flip { at, bit } => bytes[(start + at % len) as usize] ^= 1 << bit,
        Edit::Byte { at, value } => bytes[(start + at % len) as usize] = value,
        Edit::Word { at, value } => {
            let at = start + (at % len) / 8 * 8;
            let end = (at + 8).min(start + len);
            let value = value.to_le_bytes();
            bytes[at as usize..end as usize].copy_from_slice(&value[..(end - at) as usize]);
        }
    }
}

/// The 8-aligned records of a chunk from offset 64: (offset, length).
fn records(bytes: &[u8], chunk: u64, header: u64) -> Vec<(u64, u64)> {
    let mut found = Vec::new();
    let mut position = chunk + 64;
    while position + header <= chunk + CHUNK {
        let total = u32::from_le_bytes(bytes[position as usize..position as usize + 4].try_into().unwrap()) as u64;
        if total < header || !total.is_multiple_of(8) || position + total > chunk + CHUNK {
            break;
        }
        found.push((position, total));
        position += total;
    }
    found
}

#[derive(Clone, Copy, Debug)]
enum Region {
    Header,
    HeaderCrcFixed,
    CleanShutdown,
    Roots,
    ChunkTable,
    LogHeader,
    LogHeaderCrcFixed,
    LogRecords,
    LogRecordCrcFixed,
    CheckpointHeader,
    CheckpointHeaderCrcFixed,
    CheckpointRows,
    CheckpointRowCrcFixed,
}

const REGIONS: [Region; 13] = [
    Region::Header,
    Region::HeaderCrcFixed,
    Region::CleanShutdown,
    Region::Roots,
    Region::ChunkTable,
    Region::LogHeader,
    Region::LogHeaderCrcFixed,
    Region::LogRecords,
    Region::LogRecordCrcFixed,
    Region::CheckpointHeader,
    Region::CheckpointHeaderCrcFixed,
    Region::CheckpointRows,
    Region::CheckpointRowCrcFixed,
];

fn mutate(base: &Base, region: Region, pick: usize, edits: &[Edit]) -> (Vec<u8>, String) {
    let mut bytes = base.bytes.clone();
    let (log, log_used, sequence) = base.logs[pick % base.logs.len()];
    let (ckpt, ckpt_used) = base.checkpoints[pick % base.checkpoints.len()];
    let describe = |what: String| format!("{region:?} {what}, edits {edits:?}");
    let description = match region {
        Region::Header | Region::HeaderCrcFixed => {
            let fix = matches!(region, Region::HeaderCrcFixed);
            let len = if fix { layout::header::CHECKSUM as u64 } else { layout::HEADER_RECORD_SIZE };
            edits.iter().for_each(|edit| apply(&mut bytes, 0, len, edit));
            if fix {
                let crc = crc32fast::hash(&bytes[..layout::header::CHECKSUM]);
                bytes[layout::header::CHECKSUM..layout::header::CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
            }
            describe("pool header".into())
        }
        Region::CleanShutdown => {
            edits.iter().for_each(|edit| apply(&mut bytes, layout::CLEAN_SHUTDOWN_OFFSET, 16, edit));
            describe("clean-shutdown word and open count".into())
        }
        Region::Roots => {
            let len = layout::ROOT_SLOTS * layout::ROOT_SLOT_SIZE;
            edits.iter().for_each(|edit| apply(&mut bytes, layout::ROOT_TABLE_OFFSET, len, edit));
            describe("root table".into())
        }
        Region::ChunkTable => {
            let (start, len) = base.chunk_table;
            edits.iter().for_each(|edit| apply(&mut bytes, start, len, edit));
            describe("chunk table".into())
        }
        Region::LogHeader | Region::LogHeaderCrcFixed => {
            let fix = matches!(region, Region::LogHeaderCrcFixed);
            edits.iter().for_each(|edit| apply(&mut bytes, log, if fix { 28 } else { 64 }, edit));
            if fix {
                let crc = crc32fast::hash(&bytes[log as usize..log as usize + 28]);
                bytes[log as usize + 28..log as usize + 32].copy_from_slice(&crc.to_le_bytes());
            }
            describe(format!("log segment header at {log:#x}"))
        }
        Region::LogRecords => {
            edits.iter().for_each(|edit| apply(&mut bytes, log + 64, log_used.saturating_sub(64), edit));
            describe(format!("log records of the segment at {log:#x}"))
        }
        Region::LogRecordCrcFixed => {
            let list = records(&bytes, log, 24);
            let Some(&(at, total)) = list.get(pick % list.len().max(1)) else {
                return (bytes, describe("(no record)".into()));
            };
            // Content (bytes 8..total) changes, the CRC is recomputed with
            // the segment sequence (and, in log format 2, the worker from
            // the segment header), as the writer does.
            edits.iter().for_each(|edit| apply(&mut bytes, at + 8, total - 8, edit));
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&sequence.to_le_bytes());
            if bytes[log as usize..log as usize + 8] == *b"PMTXLOG2" {
                let worker = u64::from_le_bytes(bytes[log as usize + 16..log as usize + 24].try_into().unwrap());
                hasher.update(&(worker as u16).to_le_bytes());
            }
            hasher.update(&bytes[(at + 8) as usize..(at + total) as usize]);
            let crc = hasher.finalize();
            bytes[at as usize + 4..at as usize + 8].copy_from_slice(&crc.to_le_bytes());
            describe(format!("log record at {at:#x} ({total} bytes), CRC fixed"))
        }
        Region::CheckpointHeader | Region::CheckpointHeaderCrcFixed => {
            let fix = matches!(region, Region::CheckpointHeaderCrcFixed);
            edits.iter().for_each(|edit| apply(&mut bytes, ckpt, if fix { 56 } else { 64 }, edit));
            if fix {
                let crc = crc32fast::hash(&bytes[ckpt as usize..ckpt as usize + 56]);
                bytes[ckpt as usize + 56..ckpt as usize + 60].copy_from_slice(&crc.to_le_bytes());
            }
            describe(format!("checkpoint chunk header at {ckpt:#x}"))
        }
        Region::CheckpointRows => {
            edits.iter().for_each(|edit| apply(&mut bytes, ckpt + 64, ckpt_used.saturating_sub(64), edit));
            describe(format!("checkpoint rows of the chunk at {ckpt:#x}"))
        }
        Region::CheckpointRowCrcFixed => {
            let list = records(&bytes, ckpt, 32);
            let Some(&(at, total)) = list.get(pick % list.len().max(1)) else {
                return (bytes, describe("(no row)".into()));
            };
            edits.iter().for_each(|edit| apply(&mut bytes, at + 8, total - 8, edit));
            let crc = crc32fast::hash(&bytes[(at + 8) as usize..(at + total) as usize]);
            bytes[at as usize + 4..at as usize + 8].copy_from_slice(&crc.to_le_bytes());
            describe(format!("checkpoint row at {at:#x} ({total} bytes), CRC fixed"))
        }
    };
    (bytes, description)
}

/// [`recover_without_panic`] with the case's description in the error.
fn check_case(bytes: Vec<u8>, description: &str) -> Result<(), String> {
    recover_without_panic(bytes).map(|_| ()).map_err(|message| format!("{description}: {message}"))
}

/// Opens and recovers `bytes` on another thread (a hang fails the test).
/// Returns the typed errors the open or recovery reported (empty when the
/// damaged pool opened), or the panic message if recovery panicked.
fn recover_without_panic(bytes: Vec<u8>) -> Result<Vec<String>, String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let base = base();
        let recovered = recover_image::<Direct>(&base.harness, &base.options, &bytes, None, true, |_| {});
        let (panics, errors): (Vec<_>, Vec<_>) = recovered
            .findings
            .into_iter()
            .filter(|finding| finding.oracle == "recovery-panic" || finding.oracle == "recovery-error")
            .partition(|finding| finding.oracle == "recovery-panic");
        let detail = |findings: Vec<pmtx_crashtest::Finding>| -> Vec<String> {
            findings.into_iter().map(|finding| finding.detail).collect()
        };
        let _ = sender.send((detail(panics), detail(errors)));
    });
    match receiver.recv_timeout(Duration::from_secs(20)) {
        Ok((panics, errors)) if panics.is_empty() => Ok(errors),
        Ok((panics, _)) => Err(format!("recovery panicked: {}", panics.join("; "))),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("the recovery thread panicked outside recovery".into()),
        Err(mpsc::RecvTimeoutError::Timeout) => Err("recovery did not finish within 20 s (hang)".into()),
    }
}

fn fuzz_cases() -> u32 {
    std::env::var("PMTX_FUZZ_CASES").ok().and_then(|text| text.parse().ok()).unwrap_or(416)
}

/// The cases are fixed (reproducible CI); `PMTX_FUZZ_SEED` explores others.
fn fuzz_seed() -> u64 {
    std::env::var("PMTX_FUZZ_SEED").ok().and_then(|text| parse_seed(&text)).unwrap_or(0xC0_2207)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: fuzz_cases(),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(fuzz_seed()),
        ..ProptestConfig::default()
    })]

    /// 416 cases (`PMTX_FUZZ_CASES` to change) over 13 regions, 32 per region
    /// on average.
    #[test]
    fn corrupt_pool_opens_or_fails_with_a_typed_error(
        region in 0..REGIONS.len(),
        pick in any::<usize>(),
        edits in proptest::collection::vec(edit_strategy(), 1..6),
    ) {
        let base = base();
        let (bytes, description) = mutate(base, REGIONS[region], pick, &edits);
        if let Err(message) = check_case(bytes, &description) {
            prop_assert!(false, "{message}");
        }
    }
}

/// A survey for bug hunting (not run by default): `PMTX_FUZZ_CASES` random
/// cases (default 4000, seed `PMTX_FUZZ_SEED`), reporting every distinct
/// panic location with one reproducing mutation instead of stopping at the
/// first.
#[test]
#[ignore = "bug-hunting survey; run with --ignored"]
fn survey_panic_sites() {
    let base = base();
    let cases = std::env::var("PMTX_FUZZ_CASES").ok().and_then(|text| text.parse().ok()).unwrap_or(4000u32);
    let config = ProptestConfig { rng_seed: RngSeed::Fixed(fuzz_seed()), ..ProptestConfig::default() };
    let mut runner = TestRunner::new(config);
    let strategy = (0..REGIONS.len(), any::<usize>(), proptest::collection::vec(edit_strategy(), 1..6));
    let mut sites: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    // Per region: (cases, byte edits, recovered, refused with a typed error).
    let mut tally = [(0u64, 0u64, 0u64, 0u64); REGIONS.len()];
    let started = std::time::Instant::now();
    for _ in 0..cases {
        let (region, pick, edits) = strategy.new_tree(&mut runner).unwrap().current();
        let (bytes, description) = mutate(base, REGIONS[region], pick, &edits);
        let counts = &mut tally[region];
        counts.0 += 1;
        counts.1 += edits.len() as u64;
        match recover_without_panic(bytes) {
            Ok(errors) if errors.is_empty() => counts.2 += 1,
            Ok(_) => counts.3 += 1,
            Err(message) => {
                let site = message.split(':').take(3).collect::<Vec<_>>().join(":");
                let entry = sites.entry(site).or_insert((0, format!("{description}: {message}")));
                entry.0 += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    for (site, (count, example)) in &sites {
        eprintln!("{count} cases at {site}\n    e.g. {example}");
    }
    for (region, (count, edits, recovered, refused)) in REGIONS.iter().zip(tally) {
        eprintln!("{region:?}: {count} cases, {edits} edits, {recovered} recovered, {refused} typed errors");
    }
    let edits: u64 = tally.iter().map(|counts| counts.1).sum();
    eprintln!(
        "survey: {cases} mutated pools ({edits} edits, seed {:#x}) opened and recovered in {:.1} s, {} panic or \
         hang sites",
        fuzz_seed(),
        elapsed.as_secs_f64(),
        sites.len()
    );
    assert!(sites.is_empty(), "{} distinct panic sites in {cases} cases", sites.len());
}

/// Every region is hit by the deterministic sweep too (so a region whose
/// proptest cases happened to be few is still covered).
#[test]
fn every_region_single_flip() {
    let base = base();
    for (index, region) in REGIONS.iter().enumerate() {
        for pick in 0..3 {
            let edits = [Edit::Flip { at: (pick * 977 + index * 31) as u64, bit: (pick % 8) as u8 }];
            let (bytes, description) = mutate(base, *region, pick, &edits);
            check_case(bytes, &description).unwrap_or_else(|message| panic!("{message}"));
        }
    }
}

/// Durable engines not run by the out-of-space test, with the reason.
const OUT_OF_SPACE_SKIPPED: &[(&str, &str)] = &[];

/// Fills a tiny pool until the engine reports `OutOfSpace`; everything
/// acknowledged before must be there after reopening the same pool.
#[test]
fn out_of_space_is_a_clear_error_and_keeps_committed_data() {
    let mut problems = Vec::new();
    for engine in durable_engines() {
        if OUT_OF_SPACE_SKIPPED.iter().any(|(name, _)| *name == engine.name()) {
            continue;
        }
        if let Err(problem) = fill_until_full(engine) {
            problems.push(format!("{engine}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn fill_until_full(engine: EngineKind) -> Result<(), String> {
    const VALUE: usize = 1000;
    let tables = vec![TableSchema::ordered("blobs").max_key_len(8).max_value_len(VALUE)];
    let size = 24 * CHUNK;
    let options = db_options(engine, tables, 1, 0x0F5, size, CHUNK);
    let pool = Arc::new(Pool::<Direct>::create_in_memory(size, CHUNK, &options.pm).map_err(|e| e.to_string())?);
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).map_err(|e| format!("open: {e}"))?;
    let blobs = db.table_id("blobs").map_err(|e| e.to_string())?;
    let value_of = |key: u64| -> Vec<u8> { (0..VALUE).map(|i| (key as usize * 31 + i) as u8).collect() };
    let mut acknowledged = 0u64;
    let mut error = None;
    {
        let mut worker = db.worker(0).map_err(|e| e.to_string())?;
        // Each transaction inserts 8 new rows (about 8 KB); far more than the
        // pool holds.
        for batch in 0..10_000u64 {
            let result = worker.run(|tx| {
                for key in batch * 8..batch * 8 + 8 {
                    tx.put(blobs, &key.to_be_bytes(), &value_of(key))?;
                }
                Ok(())
            });
            match result {
                Ok(_) => acknowledged = batch * 8 + 8,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            if batch % 16 == 15 {
                // Checkpoints may free log space, or run out of space too.
                if let Err(e) = db.checkpoint() {
                    error = Some(e);
                    break;
                }
            }
        }
    }
    match &error {
        Some(DbError::OutOfSpace(_)) | Some(DbError::Pool(PoolError::Full { .. })) => {}
        Some(other) => return Err(format!("filling the pool ended with {other:?}, expected OutOfSpace")),
        None => return Err("10 000 transactions of 8 KB fit a 1.5 MiB pool?".into()),
    }
    if !matches!(error, Some(DbError::OutOfSpace(_))) {
        return Err(format!("the error is {error:?}, not DbError::OutOfSpace"));
    }
    drop(db);
    let db = Database::open_on_pool(options, Arc::clone(&pool))
        .map_err(|e| format!("reopening after OutOfSpace (with {acknowledged} rows acknowledged) failed: {e}"))?;
    let mut worker = db.worker(0).map_err(|e| e.to_string())?;
    let missing = worker
        .run_read_only(|tx| {
            let mut missing = Vec::new();
            for key in 0..acknowledged {
                if tx.get(blobs, &key.to_be_bytes())? != Some(value_of(key)) {
                    missing.push(key);
                }
            }
            Ok(missing)
        })
        .map_err(|e| format!("reading after reopen: {e}"))?
        .committed()
        .unwrap_or_default();
    if !missing.is_empty() {
        return Err(format!(
            "{} of {acknowledged} acknowledged rows are missing or wrong after reopening (first key {})",
            missing.len(),
            missing[0]
        ));
    }
    pool.check_metadata().map_err(|e| format!("pool metadata after reopen: {e}"))?;
    eprintln!("{engine}: out of space after {acknowledged} acknowledged rows ({error:?}); all intact after reopening");
    Ok(())
}

/// How opening and recovering a damaged image ended.
#[derive(Debug)]
enum Outcome {
    /// `Pool::open_image` refused it.
    OpenFailed(PoolError),
    /// The pool opened; `Database::open_on_pool` (recovery) refused it.
    RecoveryFailed(DbError),
    /// Both succeeded.
    Recovered,
}

/// Opens and recovers `bytes` on another thread; `Err` if that panicked or
/// took longer than 20 s (a hang).
fn open_and_recover(bytes: Vec<u8>) -> Result<Outcome, String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let options = &base().options;
        let outcome = match Pool::<Direct>::open_image(&bytes, &options.pm) {
            Err(error) => Outcome::OpenFailed(error),
            Ok(pool) => match Database::open_on_pool(options.clone(), Arc::new(pool)) {
                Err(error) => Outcome::RecoveryFailed(error),
                Ok(_) => Outcome::Recovered,
            },
        };
        let _ = sender.send(outcome);
    });
    match receiver.recv_timeout(Duration::from_secs(20)) {
        Ok(outcome) => Ok(outcome),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("open or recovery panicked".into()),
        Err(mpsc::RecvTimeoutError::Timeout) => Err("open or recovery did not finish within 20 s (hang)".into()),
    }
}

/// Applies one checksum-fixed edit to every candidate structure of `region`
/// (bugs the fuzz tests found once): open and recovery must not panic or
/// hang, and must end in an outcome `expected` accepts (a typed error).
fn reproduce(region: Region, edit: Edit, expected: impl Fn(&Outcome) -> bool) {
    let base = base();
    let candidates = match region {
        Region::LogHeaderCrcFixed => base.logs.len(),
        Region::CheckpointHeaderCrcFixed => base.checkpoints.len(),
        _ => 1,
    };
    assert!(candidates > 0, "the base pool has no {region:?} to damage");
    for pick in 0..candidates {
        let (bytes, description) = mutate(base, region, pick, std::slice::from_ref(&edit));
        let outcome = open_and_recover(bytes).unwrap_or_else(|message| panic!("{description}: {message}"));
        assert!(expected(&outcome), "{description}: unexpected outcome {outcome:?}");
    }
}

/// A `PoolError::Corrupt` refusing the header's geometry.
fn bad_geometry(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::OpenFailed(PoolError::Corrupt { detail, .. }) if detail.contains("geometry"))
}

/// A `DbError::Corrupt` whose message contains `text`.
fn corrupt_mentioning(text: &'static str) -> impl Fn(&Outcome) -> bool {
    move |outcome| match outcome {
        Outcome::RecoveryFailed(DbError::Corrupt(message)) => message.contains(text),
        Outcome::RecoveryFailed(error @ DbError::CorruptStructure { .. }) => error.to_string().contains(text),
        _ => false,
    }
}

#[test]
fn header_claiming_a_pool_size_near_u64_max_is_refused() {
    // Pool header field "pool size" (offset 16) = u64::MAX, header CRC fixed:
    // once an overflow in `layout::geometry`.
    reproduce(Region::HeaderCrcFixed, Edit::Word { at: 16, value: u64::MAX }, bad_geometry);
    reproduce(Region::HeaderCrcFixed, Edit::Word { at: 16, value: u64::MAX - 7 }, bad_geometry);
}

#[test]
fn header_claiming_a_2_pow_63_byte_pool_is_refused_at_once() {
    // Pool header field "pool size" (offset 16) = 2^63, header CRC fixed:
    // once a loop of ~2^47 steps in `layout::geometry`.
    // The refusal is checked on a thread; the bound only keeps a regression
    // to that loop (hours of work) from hanging the suite, it measures
    // nothing.
    let (done, refused) = std::sync::mpsc::channel();
    let check = std::thread::spawn(move || {
        reproduce(Region::HeaderCrcFixed, Edit::Word { at: 16, value: 1 << 63 }, bad_geometry);
        let _ = done.send(());
    });
    match refused.recv_timeout(Duration::from_secs(600)) {
        // Done, or the check panicked (its join reports the failure).
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => check.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the geometry check still walks the claimed 2^63 bytes")
        }
    }
}

#[test]
fn log_segment_sequence_u64_max_is_refused() {
    // Log segment header field "sequence" (offset 8) = u64::MAX, CRC fixed:
    // once an overflow of the next sequence in group commit.
    reproduce(
        Region::LogHeaderCrcFixed,
        Edit::Word { at: 8, value: u64::MAX },
        corrupt_mentioning("beyond log incarnation"),
    );
}

#[test]
fn checkpoint_end_epoch_u64_max_is_refused() {
    // Checkpoint chunk header field "end epoch" (offset 40) = u64::MAX, CRC
    // fixed: once an overflow of recovery's first epoch.
    let refused = |outcome: &Outcome| {
        corrupt_mentioning("beyond the largest epoch")(outcome) || corrupt_mentioning("with epochs")(outcome)
    };
    reproduce(Region::CheckpointHeaderCrcFixed, Edit::Word { at: 40, value: u64::MAX }, refused);
}

/// `bytes` with the value of root `name` set to `value` (the root table is
/// not checksummed beyond each slot's name).
fn with_root(name: &str, value: u64) -> Vec<u8> {
    let mut bytes = base().bytes.clone();
    let slot = (0..layout::ROOT_SLOTS)
        .map(|slot| (layout::ROOT_TABLE_OFFSET + slot * layout::ROOT_SLOT_SIZE) as usize)
        .find(|&at| {
            let field = &bytes[at + layout::root_slot::NAME as usize..at + layout::ROOT_SLOT_SIZE as usize];
            field.split(|&b| b == 0).next() == Some(name.as_bytes())
        })
        .unwrap_or_else(|| panic!("the base pool has no root {name:?}"));
    // A valid root holding `value`: rewritten as a layout-1 slot (the state
    // word and the value in the slot, no value record), which pools keep
    // reading, so the value passes every checksum.
    let at = slot + layout::root_slot::VALUE as usize;
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    let state = (layout::ROOT_TAG << 32) | u64::from(crc32fast::hash(name.as_bytes()));
    bytes[slot..slot + 8].copy_from_slice(&state.to_le_bytes());
    bytes
}

#[test]
fn engine_root_of_zero_is_a_schema_mismatch() {
    // Engine codes start at 1; naming the owner of code 0 once underflowed.
    let outcome = open_and_recover(with_root("engine.kind", 0)).unwrap_or_else(|message| panic!("{message}"));
    assert!(
        matches!(&outcome, Outcome::RecoveryFailed(DbError::SchemaMismatch(message)) if message.contains("unknown engine")),
        "{outcome:?}"
    );
}

#[test]
fn checkpoint_generation_u64_max_is_refused() {
    // Recovery and the next checkpoint number generation + 1.
    let outcome = open_and_recover(with_root(pmtx_engine::internals::pool_layout::CHECKPOINT_ROOT, u64::MAX))
        .unwrap_or_else(|m| panic!("{m}"));
    assert!(corrupt_mentioning("generation is out of range")(&outcome), "{outcome:?}");
}

#[test]
fn durable_epoch_beyond_the_largest_epoch_is_refused() {
    let value = pmtx_engine::internals::record::MAX_EPOCH + 1;
    let outcome = open_and_recover(with_root("log.durable_epoch", value)).unwrap_or_else(|m| panic!("{m}"));
    assert!(corrupt_mentioning("beyond the largest epoch")(&outcome), "{outcome:?}");
}

#[test]
fn checkpoint_at_the_largest_epoch_leaves_no_epoch_to_run_in() {
    // End epoch exactly `MAX_EPOCH` passes the bound, but the next life's
    // first epoch would not fit a TID.
    let max = pmtx_engine::internals::record::MAX_EPOCH;
    reproduce(
        Region::CheckpointHeaderCrcFixed,
        Edit::Word { at: 40, value: max },
        corrupt_mentioning("leaves no epoch"),
    );
}

#[test]
fn checkpoint_row_tid_beyond_the_end_epoch_is_refused() {
    // Row field "tid" (offset 16; the edit applies from offset 8), row CRC
    // fixed: once installed as a version word whose high bits were lost.
    for value in [u64::MAX, pmtx_engine::internals::record::MAX_TID] {
        let (bytes, description) = mutate(base(), Region::CheckpointRowCrcFixed, 0, &[Edit::Word { at: 8, value }]);
        let outcome = open_and_recover(bytes).unwrap_or_else(|message| panic!("{description}: {message}"));
        assert!(corrupt_mentioning("beyond the checkpoint's end epoch")(&outcome), "{description}: {outcome:?}");
    }
}

#[test]
fn log_record_tid_beyond_the_largest_tid_is_refused() {
    // Record field "tid" (offset 8; the edit applies from offset 8), record
    // CRC fixed with the segment sequence.
    let (bytes, description) = mutate(base(), Region::LogRecordCrcFixed, 0, &[Edit::Word { at: 0, value: u64::MAX }]);
    let outcome = open_and_recover(bytes).unwrap_or_else(|message| panic!("{description}: {message}"));
    assert!(corrupt_mentioning("beyond the largest TID")(&outcome), "{description}: {outcome:?}");
}

/// The corruption matrix (`pmtx_crashtest::matrix`) at CI's size
/// ([`MatrixConfig::quick`]): every durable engine whose state is in the
/// pool, every structure it writes, every damage kind; each damaged pool
/// must be refused naming the structure or open with every committed row.
/// An engine added without detection of damage to what it writes fails
/// here. `pmtx crashtest --corruption-matrix` runs the full size.
#[test]
fn corruption_matrix_detects_or_survives_every_damage() {
    let config = MatrixConfig::quick();
    let report = pmtx_crashtest::matrix::run_matrix(&config, &|line| eprintln!("{line}")).unwrap();
    println!("{}", report.render());
    let engines = pmtx_crashtest::matrix::matrix_engines();
    // Every engine has cells for the pool's own structures and its own.
    for engine in &engines {
        let structures: Vec<Structure> =
            report.cells.iter().filter(|cell| cell.engine == *engine).map(|cell| cell.structure).collect();
        for structure in [Structure::PoolHeader, Structure::RootTable, Structure::ChunkTable] {
            assert!(structures.contains(&structure), "{engine}: no {structure} cells");
        }
        let own = if matches!(engine, EngineKind::Zen | EngineKind::ZenNaiveAlloc | EngineKind::ZenPlus) {
            vec![Structure::ZenHeap]
        } else if *engine == EngineKind::Wbl {
            vec![Structure::ZenHeap, Structure::WblLog]
        } else if matches!(engine, EngineKind::Mnemosyne | EngineKind::Pisces) {
            vec![Structure::PmHome, Structure::TornBitLog]
        } else {
            vec![Structure::LogSegment, Structure::LogRecord, Structure::Checkpoint]
        };
        for structure in own {
            assert!(structures.contains(&structure), "{engine}: no {structure} cells");
        }
    }
    // SP^3's pool holds a dependency list on every run (a fixed sequence,
    // not a race), and every engine stores a catalog.
    assert!(
        report.cells.iter().any(|cell| cell.engine == EngineKind::Sp3 && cell.structure == Structure::Sp3Dependencies),
        "sp3 logs a dependency list"
    );
    for engine in &engines {
        assert!(
            report.cells.iter().any(|cell| cell.engine == *engine && cell.structure == Structure::Catalog),
            "{engine}: no catalog cells"
        );
    }
    assert!(report.cells.iter().any(|cell| cell.structure == Structure::DbxnValues), "dbxn-nvm keeps value chunks");
    // No cell accepts damage to the home slots silently any more.
    assert!(
        report.cells.iter().filter(|cell| cell.structure == Structure::PmHome).all(|cell| cell.passed()),
        "a home-slot cell failed:\n{}",
        report.render()
    );
    // Every cell passes but the known gaps, where only silent acceptance
    // (never a panic or an unnamed error) is allowed.
    for cell in report.failed() {
        let gap = pmtx_crashtest::matrix::known_gap(cell.engine, cell.structure, cell.damage);
        assert!(gap.is_some(), "cell failed:\n{}", report.render());
        for (place, outcome) in &cell.failures {
            assert!(
                matches!(outcome, pmtx_crashtest::matrix::TrialOutcome::Silent(_)),
                "{} / {} / {} at {place}: {outcome:?}",
                cell.engine,
                cell.structure,
                cell.damage
            );
        }
    }
}

/// The control of the home-slot check: with recovery taking every slot
/// that fails its CRC for a torn write-back (`Fault::UncheckedHomeSlots`),
/// the pisces and mnemosyne home-slot cells lose committed rows silently,
/// and the bit-flip and truncation cells fail.
#[test]
fn corruption_matrix_control_unchecked_home_slots_fails() {
    let fault = pmtx_engine::Fault::UncheckedHomeSlots;
    let config = MatrixConfig {
        engines: vec![EngineKind::Mnemosyne, EngineKind::Pisces],
        engine_options: Some(pmtx_crashtest::EngineOptionsHook::new(fault.name(), move |options| {
            options.fault = Some(fault)
        })),
        ..MatrixConfig::quick()
    };
    let report = pmtx_crashtest::matrix::run_matrix(&config, &|line| eprintln!("{line}")).unwrap();
    println!("{}", report.render());
    for engine in [EngineKind::Mnemosyne, EngineKind::Pisces] {
        for damage in [Damage::BitFlip, Damage::Truncation] {
            let cell = report
                .cells
                .iter()
                .find(|cell| cell.engine == engine && cell.structure == Structure::PmHome && cell.damage == damage)
                .unwrap_or_else(|| panic!("{engine}: no home-slot {damage} cell"));
            assert!(
                !cell.passed()
                    && cell
                        .failures
                        .iter()
                        .all(|(_, outcome)| matches!(outcome, pmtx_crashtest::matrix::TrialOutcome::Silent(_))),
                "{engine} / {damage} passed without the check:\n{}",
                report.render()
            );
        }
    }
}
