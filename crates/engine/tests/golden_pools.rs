//! Pools written by an earlier build keep opening: two small pool files
//! per durable engine, created with a few rows and then closed cleanly
//! (`<engine>.pool.sparse`: the checkpoint or heap format) or abandoned as
//! a crash leaves them (`<engine>.crashed.pool.sparse`: recovery from the
//! log, or the heap's), are kept under `tests/golden/` and must open and
//! read back the same rows (or be refused with a clear error naming what
//! changed). Opening one as the wrong engine is refused with the engine
//! the pool belongs to, which pins the engine codes on disk.
//!
//! The pools are stored sparse: only the pages that are not all zero,
//! since a fresh pool is mostly zero (format below); so are the files of
//! `dbx-disk`'s log directory (`<engine>[.crashed].log/<file>.sparse`).
//! To write them anew, after a deliberate format change (which must also
//! change the layout version, so old pools are refused rather than
//! misread):
//!
//! ```text
//! cargo test -p pmtx-engine --test golden_pools -- --ignored write_golden_pools
//! ```
//!
//! (with `PMTX_GOLDEN_ENGINE=NAME` for a new engine's pools alone).

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, LogMedium, PoolLocation, TableSchema};
use std::path::{Path, PathBuf};

/// Pool size: 32 chunks of the smallest size, room for every durable
/// engine with one worker (a log segment, a checkpoint and its reserve, or
/// a heap chunk per table). The files are stored sparse, so only the pages
/// written count.
const POOL_SIZE: u64 = 2 << 20;
/// The smallest chunk size the pool accepts.
const CHUNK: u64 = pmtx_pm::layout::MIN_CHUNK_SIZE;
/// Granularity of the sparse form.
const PAGE: usize = 4096;
/// Magic of the sparse form.
const SPARSE_MAGIC: &[u8; 8] = b"PMTXSPRS";

/// A table's rows as (key, value), in key order.
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("rows").max_value_len(64), TableSchema::hashed("meta").max_value_len(64)]
}

/// The rows every golden pool holds, by table: `rows` after six inserts,
/// an update of `k01` and a delete of `k03`; `meta` with one row.
fn expected() -> (Rows, Rows) {
    let rows = [0u8, 1, 2, 4, 5]
        .iter()
        .map(|&i| {
            let value = if i == 1 { b"updated".to_vec() } else { format!("value {i}").into_bytes() };
            (format!("k{i:02}").into_bytes(), value)
        })
        .collect();
    let meta = vec![(b"count".to_vec(), 5u64.to_le_bytes().to_vec())];
    (rows, meta)
}

fn options(engine: EngineKind, path: &Path) -> DbOptions {
    let mut options = DbOptions::new(engine, tables(), path);
    options.pool = PoolLocation::File { path: path.to_path_buf(), size: POOL_SIZE };
    options.chunk_size = CHUNK;
    options.workers = 1;
    options.prefault_chunks = 0;
    options.checkpoint_interval = None;
    options.zen.cache_bytes = 1 << 20;
    options
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("golden")
}

/// How the golden pool's writer left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shutdown {
    /// `Database::close`.
    Clean,
    /// `Database::crash`: no final checkpoint, no clean-shutdown mark.
    Crashed,
}

/// The golden files' name without extension.
fn stem(engine: EngineKind, shutdown: Shutdown) -> String {
    // `zen+` is not a portable file name everywhere.
    let name = engine.name().replace('+', "-plus");
    match shutdown {
        Shutdown::Clean => name,
        Shutdown::Crashed => format!("{name}.crashed"),
    }
}

fn golden_file(engine: EngineKind, shutdown: Shutdown) -> PathBuf {
    golden_dir().join(format!("{}.pool.sparse", stem(engine, shutdown)))
}

/// The files of the redo log directory of a golden pool of `engine`, each
/// stored sparse (`<name>.sparse`).
fn golden_log_dir(engine: EngineKind, shutdown: Shutdown) -> PathBuf {
    golden_dir().join(format!("{}.log", stem(engine, shutdown)))
}

fn durable_engines() -> impl Iterator<Item = EngineKind> {
    EngineKind::ALL.into_iter().filter(|engine| engine.is_durable())
}

/// The sparse form: magic, the file length (u64 LE), the page count
/// (u64 LE), then per page that is not all zero its index (u64 LE) and
/// its `PAGE` bytes (the last page of the file may be shorter).
fn to_sparse(bytes: &[u8]) -> Vec<u8> {
    let pages: Vec<(usize, &[u8])> =
        bytes.chunks(PAGE).enumerate().filter(|(_, page)| page.iter().any(|&byte| byte != 0)).collect();
    let mut out = Vec::new();
    out.extend_from_slice(SPARSE_MAGIC);
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&(pages.len() as u64).to_le_bytes());
    for (index, page) in pages {
        out.extend_from_slice(&(index as u64).to_le_bytes());
        out.extend_from_slice(page);
    }
    out
}

fn from_sparse(sparse: &[u8]) -> Vec<u8> {
    let word = |at: usize| u64::from_le_bytes(sparse[at..at + 8].try_into().expect("8 bytes")) as usize;
    assert_eq!(&sparse[..8], SPARSE_MAGIC, "not a sparse pool file");
    let (length, count) = (word(8), word(16));
    let mut bytes = vec![0u8; length];
    let mut at = 24;
    for _ in 0..count {
        let start = word(at) * PAGE;
        let end = (start + PAGE).min(length);
        bytes[start..end].copy_from_slice(&sparse[at + 8..at + 8 + (end - start)]);
        at += 8 + (end - start);
    }
    assert_eq!(at, sparse.len(), "trailing bytes in the sparse pool file");
    bytes
}

/// Writes the rows of [`expected`] in a few transactions.
fn fill(db: &Database) {
    let rows = db.table_id("rows").unwrap();
    let meta = db.table_id("meta").unwrap();
    let mut worker = db.worker(0).unwrap();
    for i in 0u8..6 {
        worker.run(|tx| tx.put(rows, format!("k{i:02}").as_bytes(), format!("value {i}").as_bytes())).unwrap();
    }
    worker.run(|tx| tx.update(rows, b"k01", b"updated").map(|_| ())).unwrap();
    worker.run(|tx| tx.delete(rows, b"k03").map(|_| ())).unwrap();
    worker.run(|tx| tx.put(meta, b"count", &5u64.to_le_bytes())).unwrap();
}

fn read_all(db: &Database, table: &str) -> Rows {
    let mut rows = Vec::new();
    db.for_each_row(db.table_id(table).unwrap(), |key, value| rows.push((key.to_vec(), value.to_vec()))).unwrap();
    rows.sort();
    rows
}

/// Restores the golden pool of `engine` into `dir`; its path. A pool whose
/// redo log lives in files (`dbx-disk`) also gets its log directory.
fn restore(engine: EngineKind, shutdown: Shutdown, dir: &Path) -> PathBuf {
    let golden = golden_file(engine, shutdown);
    let sparse = std::fs::read(&golden).unwrap_or_else(|error| panic!("{}: {error}", golden.display()));
    let path = dir.join("golden.pool");
    std::fs::write(&path, from_sparse(&sparse)).unwrap();
    if let Some(log_directory) = options(engine, &path).log_directory_path() {
        std::fs::create_dir(&log_directory).unwrap();
        for entry in std::fs::read_dir(golden_log_dir(engine, shutdown)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let name = name.strip_suffix(".sparse").expect("log files are stored sparse");
            std::fs::write(log_directory.join(name), from_sparse(&std::fs::read(entry.path()).unwrap())).unwrap();
        }
    }
    path
}

/// Opens the golden pool of `engine` left by `shutdown` and checks its rows.
fn open_and_read(shutdown: Shutdown) {
    let (rows, meta) = expected();
    for engine in durable_engines() {
        let case = format!("{engine} ({shutdown:?})");
        let dir = tempfile::tempdir().unwrap();
        let path = restore(engine, shutdown, dir.path());
        let db = Database::open(options(engine, &path)).unwrap_or_else(|error| panic!("{case}: {error}"));
        if let Some(recovery) = db.stats().recovery {
            assert_eq!(recovery.clean_shutdown, shutdown == Shutdown::Clean, "{case}: {recovery:?}");
        }
        assert_eq!(read_all(&db, "rows"), rows, "{case}: rows");
        assert_eq!(read_all(&db, "meta"), meta, "{case}: meta");
        // And through a transaction.
        let table = db.table_id("rows").unwrap();
        let mut worker = db.worker(0).unwrap();
        let read = worker.run_read_only(|tx| Ok((tx.get(table, b"k01")?, tx.get(table, b"k03")?))).unwrap();
        assert_eq!(read.committed(), Some((Some(b"updated".to_vec()), None)), "{case}");
        drop(worker);
        db.close().unwrap_or_else(|error| panic!("{case}: close: {error}"));
    }
}

#[test]
fn every_durable_engine_opens_its_golden_pool_and_reads_the_rows() {
    open_and_read(Shutdown::Clean);
}

#[test]
fn every_durable_engine_recovers_its_crashed_golden_pool() {
    open_and_read(Shutdown::Crashed);
}

#[test]
fn a_golden_pool_opened_as_another_engine_names_its_own() {
    for engine in durable_engines() {
        let dir = tempfile::tempdir().unwrap();
        let path = restore(engine, Shutdown::Clean, dir.path());
        // Another engine with the same log medium, so the engine check is
        // the one that refuses.
        let mut wrong = match engine {
            EngineKind::GroupCommit => options(EngineKind::Dbxn, &path),
            EngineKind::DbxDisk => {
                let mut wrong = options(EngineKind::DbxNaive, &path);
                wrong.dbxn.medium = LogMedium::Disk;
                wrong
            }
            _ => options(EngineKind::GroupCommit, &path),
        };
        wrong.workers = 1;
        let other = wrong.engine;
        let error = Database::open(wrong).err().unwrap_or_else(|| panic!("{engine} opened as {other}"));
        match error {
            DbError::SchemaMismatch(message) => {
                assert!(message.contains(&format!("belongs to {engine},")), "{engine} as {other}: {message}")
            }
            other_error => panic!("{engine} as {other}: {other_error}"),
        }
    }
}

/// Pools of `mnemosyne` and `pisces` whose home slots an older build
/// wrote (home-slot format version 1: chunk kind "PH", unformatted, no
/// first-line check; kept as `<engine>.home-v1.pool.sparse`) are refused
/// with the typed error naming the structure and the versions, not misread.
#[test]
fn an_older_home_slot_format_is_refused_by_name() {
    for engine in [EngineKind::Mnemosyne, EngineKind::Pisces] {
        let golden = golden_dir().join(format!("{}.home-v1.pool.sparse", engine.name()));
        let sparse = std::fs::read(&golden).unwrap_or_else(|error| panic!("{}: {error}", golden.display()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("golden.pool");
        std::fs::write(&path, from_sparse(&sparse)).unwrap();
        let error = Database::open(options(engine, &path)).err().unwrap_or_else(|| panic!("{engine} opened"));
        match &error {
            DbError::Pool(pmtx_pm::PoolError::OlderFormat { structure, found: 1, oldest: 2, .. }) => {
                assert_eq!(*structure, pmtx_pm::Structure::PmHome, "{engine}: {error}");
                assert!(error.to_string().contains("recreate the pool"), "{engine}: {error}");
            }
            other => panic!("{engine}: {other}"),
        }
    }
}

#[test]
fn the_sparse_form_round_trips() {
    let mut bytes = vec![0u8; 3 * PAGE + 100];
    bytes[5] = 1;
    bytes[2 * PAGE + 7] = 9;
    bytes[3 * PAGE + 99] = 3;
    let sparse = to_sparse(&bytes);
    assert!(sparse.len() < bytes.len());
    assert_eq!(from_sparse(&sparse), bytes);
}

/// Writes the golden pools (see the module comment); not a check.
#[test]
#[ignore]
fn write_golden_pools() {
    std::fs::create_dir_all(golden_dir()).unwrap();
    // PMTX_GOLDEN_ENGINE=NAME writes one engine's pools only (a new engine),
    // leaving the others as an earlier build wrote them.
    let only = std::env::var("PMTX_GOLDEN_ENGINE").ok();
    for engine in durable_engines().filter(|engine| only.as_deref().is_none_or(|name| name == engine.name())) {
        for shutdown in [Shutdown::Clean, Shutdown::Crashed] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("golden.pool");
            let create = options(engine, &path).create_if_missing(true);
            let db = Database::open(create).unwrap_or_else(|error| panic!("{engine}: {error}"));
            fill(&db);
            match shutdown {
                Shutdown::Clean => db.close().unwrap(),
                Shutdown::Crashed => {
                    db.crash().unwrap();
                    drop(db);
                }
            }
            let sparse = to_sparse(&std::fs::read(&path).unwrap());
            std::fs::write(golden_file(engine, shutdown), &sparse).unwrap();
            let mut bytes = sparse.len();
            if let Some(log_directory) = options(engine, &path).log_directory_path() {
                let golden_log = golden_log_dir(engine, shutdown);
                if golden_log.exists() {
                    std::fs::remove_dir_all(&golden_log).unwrap();
                }
                std::fs::create_dir_all(&golden_log).unwrap();
                for entry in std::fs::read_dir(&log_directory).unwrap() {
                    let entry = entry.unwrap();
                    let sparse = to_sparse(&std::fs::read(entry.path()).unwrap());
                    bytes += sparse.len();
                    let name = format!("{}.sparse", entry.file_name().into_string().unwrap());
                    std::fs::write(golden_log.join(name), sparse).unwrap();
                }
            }
            println!("{engine} ({shutdown:?}): {bytes} bytes");
        }
    }
}
