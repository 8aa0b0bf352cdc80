//! The corruption matrix: for every durable engine whose state lives in the
//! pool, every persistent structure it writes and every kind of damage, a
//! small pool with committed data is damaged and reopened, and the outcome
//! must be one of two:
//!
//! * **detected** — opening or recovering fails with a typed corruption
//!   error naming the damaged structure ([`DbError::damaged_structure`]);
//! * **harmless** — the pool opens and every committed row reads back
//!   exactly. The classes: bytes nothing reads (reserved words such as a
//!   catalog copy's zero word, slot padding after a tuple's value, `zen`'s
//!   bitmap, which `zen-naive-alloc` rebuilds at recovery), a superseded
//!   root value record, a superseded tuple version or log record (recovery
//!   keeps the newer one), or damage recovery repaired. A committed
//!   tuple's own CRC-covered bytes are not among them: the Zen heap
//!   refuses such a slot (`storage::zen::recovery`, "Damage").
//!
//! Anything else is a failure of the cell: **silent** (the pool opened but
//! committed data is missing or changed), an error that names no damaged
//! structure or another one, or a panic.
//!
//! The pool: two workers on a 2 MiB pool of 64 KiB chunks, a sequential
//! phase of inserts, a checkpoint (log-based engines), updates and a
//! delete, then both workers updating the same rows in turn, every commit
//! acknowledged durable; for SP^3 then a dependency list by a fixed
//! sequence (a writer held between install and log record by a gate at
//! its crash point, `crate::gated`, while a reader of its version commits),
//! so every run writes the same sequence of commits and the SP^3 cells do
//! not depend on a race. Then the database is abandoned as a crash leaves
//! it (`Database::crash`) and the expected rows are what it held. Damage
//! kinds:
//!
//! * **bit flip** — one bit flipped at each of `flips` positions spread
//!   over the structure's bytes (one trial each);
//! * **truncation** — the structure cut short: the second half of its
//!   bytes (all its extents, in order) zeroed (for the pool header: the
//!   pool file cut to half its length);
//! * **torn write** — the first cache line of the structure's largest
//!   extent (its header) with every other 8-byte word zeroed, as a write
//!   that reached the media only in part.
//!
//! `pmtx crashtest --corruption-matrix` prints the matrix and exits 1 if a
//! cell fails; `tests/corrupt.rs` runs it for every engine.

use crate::gated::{Gate, Gated, Session, SP3_BEFORE_LOG};
use pmtx_engine::internals::pool_layout::CATALOG_CHUNK_KIND;
use pmtx_engine::internals::pool_layout::CHECKPOINT_CHUNK_KIND;
use pmtx_engine::internals::pool_layout::DBXN_VALUE_CHUNK_KIND;
use pmtx_engine::internals::pool_layout::LOG_CHUNK_KIND;
use pmtx_engine::internals::pool_layout::SNAPSHOT_CHUNK_KIND;
use pmtx_engine::internals::pool_layout::{PM_HOME_CHUNK_KIND, PM_HOME_FREE_WORD0, TORNBIT_LOG_CHUNK_KIND};
use pmtx_engine::{Database, DbError, DbOptions, EngineKind, TableSchema};
use pmtx_pm::{layout, Direct, PmBackend, PmOptions, Pool, Structure};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Chunk-owner kinds of Zen (and wbl) heap chunks: old (zero = free) and
/// formatted (free slots hold a marker).
const HEAP_CHUNK_KIND: u16 = 0x5A48;
const HEAP_CHUNK_KIND_FORMATTED: u16 = 0x5A46;
/// Chunk-owner kind of wbl's record log.
const WINDOW_CHUNK_KIND: u16 = 0x5742;
/// Pool size and chunk size of the matrix's pools.
const POOL_SIZE: u64 = 2 << 20;
const CHUNK: u64 = layout::MIN_CHUNK_SIZE;
/// Size of a log segment header.
const SEGMENT_HEADER: u64 = 64;

/// A kind of damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Damage {
    /// One bit flipped.
    BitFlip,
    /// The structure cut short (its tail zeroed; the pool file shortened).
    Truncation,
    /// Every other 8-byte word of one line zeroed.
    TornWrite,
}

impl Damage {
    /// Every kind.
    pub const ALL: [Damage; 3] = [Damage::BitFlip, Damage::Truncation, Damage::TornWrite];

    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            Damage::BitFlip => "bit-flip",
            Damage::Truncation => "truncation",
            Damage::TornWrite => "torn-write",
        }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct MatrixConfig {
    /// Engines (default: [`matrix_engines`]).
    pub engines: Vec<EngineKind>,
    /// Bit-flip trials per structure.
    pub flips: usize,
    /// Seed of the flip positions.
    pub seed: u64,
    /// A change to the engines' options (a control: a deliberately broken
    /// check, `pmtx_engine::Fault::DAMAGE_CHECKS`).
    pub engine_options: Option<crate::EngineOptionsHook>,
}

impl Default for MatrixConfig {
    fn default() -> Self {
        Self { engines: matrix_engines(), flips: 8, seed: 0xC022, engine_options: None }
    }
}

impl MatrixConfig {
    /// CI's size (`tests/corrupt.rs`): every engine, structure and damage
    /// kind, fewer bit flips per structure.
    pub fn quick() -> Self {
        Self { flips: 3, ..Self::default() }
    }
}

/// The durable engines whose whole durable state is in the pool (the
/// matrix damages pool bytes; `dbx-disk`'s log files are not in it).
pub fn matrix_engines() -> Vec<EngineKind> {
    EngineKind::ALL.into_iter().filter(|engine| engine.is_durable() && *engine != EngineKind::DbxDisk).collect()
}

/// The outcome of one damaged pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrialOutcome {
    /// A typed corruption error naming the structure.
    Detected(String),
    /// The pool opened and every committed row read back.
    Harmless,
    /// The pool opened and committed data is missing or changed.
    Silent(String),
    /// Another error (naming no structure, or another one), or a panic.
    Wrong(String),
}

/// One cell: an engine, a structure, a damage kind.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Engine.
    pub engine: EngineKind,
    /// Damaged structure.
    pub structure: Structure,
    /// Damage kind.
    pub damage: Damage,
    /// Trials detected.
    pub detected: usize,
    /// Trials harmless.
    pub harmless: usize,
    /// Failed trials: (where, outcome).
    pub failures: Vec<(String, TrialOutcome)>,
}

impl Cell {
    /// `detected`, `harmless`, `detected+harmless` (some of each) or
    /// `FAILED`.
    pub fn verdict(&self) -> &'static str {
        if !self.failures.is_empty() {
            "FAILED"
        } else if self.harmless == 0 {
            "detected"
        } else if self.detected == 0 {
            "harmless"
        } else {
            "detected+harmless"
        }
    }

    /// Whether every trial was detected or harmless.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The whole matrix.
#[derive(Clone, Debug, Default)]
pub struct MatrixReport {
    /// Cells, by engine, structure and damage.
    pub cells: Vec<Cell>,
    /// Structures an engine does not write (engine, structure), so no cell.
    pub absent: Vec<(EngineKind, Structure)>,
}

impl MatrixReport {
    /// Cells that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Cell> {
        self.cells.iter().filter(|cell| !cell.passed())
    }

    /// Trials in all cells.
    pub fn trials(&self) -> usize {
        self.cells.iter().map(|cell| cell.detected + cell.harmless + cell.failures.len()).sum()
    }

    /// Counts of cells by verdict.
    pub fn verdict_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for cell in &self.cells {
            *counts.entry(cell.verdict()).or_default() += 1;
        }
        counts
    }

    /// The table, one line per cell, then the failures.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "{:<16} {:<22} {:<11} {:<18} {:>8} {:>8}\n",
            "engine", "structure", "damage", "verdict", "detected", "harmless"
        ));
        for cell in &self.cells {
            out.push_str(&format!(
                "{:<16} {:<22} {:<11} {:<18} {:>8} {:>8}\n",
                cell.engine.name(),
                cell.structure.name(),
                cell.damage.name(),
                cell.verdict(),
                cell.detected,
                cell.harmless
            ));
        }
        for cell in self.failed() {
            for (place, outcome) in &cell.failures {
                out.push_str(&format!(
                    "FAILED {} / {} / {} at {place}: {outcome:?}\n",
                    cell.engine.name(),
                    cell.structure.name(),
                    cell.damage.name()
                ));
            }
            if let Some(reason) = known_gap(cell.engine, cell.structure, cell.damage) {
                out.push_str(&format!("    known gap: {reason}\n"));
            }
        }
        let counts: Vec<String> =
            self.verdict_counts().into_iter().map(|(verdict, count)| format!("{count} {verdict}")).collect();
        out.push_str(&format!(
            "corruption matrix: {} engines, {} cells ({}), {} trials\n",
            self.cells.iter().map(|cell| cell.engine.code()).collect::<std::collections::BTreeSet<_>>().len(),
            self.cells.len(),
            counts.join(", "),
            self.trials()
        ));
        out
    }
}

/// Tables of the matrix's pools.
fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("rows").max_value_len(48), TableSchema::hashed("meta").max_value_len(16)]
}

fn options(engine: EngineKind, seed: u64) -> DbOptions {
    let mut options = crate::db_options(engine, tables(), 2, seed, POOL_SIZE, CHUNK);
    options.prefault_chunks = 0;
    options
}

type Rows = Vec<(u32, Vec<u8>, Vec<u8>)>;

fn read_rows(db: &Database) -> Result<Rows, DbError> {
    let mut rows = Vec::new();
    for (index, name) in ["rows", "meta"].into_iter().enumerate() {
        let table = db.table_id(name)?;
        db.for_each_row(table, |key, value| rows.push((index as u32, key.to_vec(), value.to_vec())))?;
    }
    rows.sort();
    Ok(rows)
}

/// A span of bytes of one structure.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    len: u64,
}

/// A crashed pool image with committed data, and where its structures are.
struct Base {
    engine: EngineKind,
    options: DbOptions,
    bytes: Vec<u8>,
    expected: Rows,
    structures: BTreeMap<Structure, Vec<Span>>,
}

fn last_nonzero(bytes: &[u8], start: u64, len: u64) -> u64 {
    let slice = &bytes[start as usize..(start + len) as usize];
    slice.iter().rposition(|&b| b != 0).map_or(0, |p| p as u64 + 1).next_multiple_of(8)
}

fn word(bytes: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(bytes[at as usize..at as usize + 8].try_into().expect("8 bytes"))
}

/// Spans of the dependency lists of the SP^3 log records in segment
/// `[start, start + used)` (record: len u32, crc u32, tid u64, writes u32,
/// dependency count u32, dependency TIDs).
fn dependency_spans(bytes: &[u8], start: u64, used: u64) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut at = start + SEGMENT_HEADER;
    while at + 24 <= start + used {
        let len = u64::from(u32::from_le_bytes(bytes[at as usize..at as usize + 4].try_into().expect("4")));
        if len < 24 || len % 8 != 0 || at + len > start + used {
            break;
        }
        let count = u64::from(u32::from_le_bytes(bytes[at as usize + 20..at as usize + 24].try_into().expect("4")));
        if count > 0 && &bytes[at as usize + 16..at as usize + 20] != b"FILL" && 24 + count * 8 <= len {
            spans.push(Span { start: at + 24, len: count * 8 });
        }
        at += len;
    }
    spans
}

/// Both workers update the same `keys` rows in turn (read-modify-write),
/// from one thread: the same sequence of commits on every run.
fn alternating_updates(db: &Database, rows: pmtx_engine::TableId, keys: u32) -> Result<(), DbError> {
    let mut workers = [db.worker(0)?, db.worker(1)?];
    for round in 0..30u32 {
        let id = round as usize % 2;
        let key = format!("k{:02}", round % keys);
        workers[id].run(|tx| {
            let old = tx.get(rows, key.as_bytes())?.unwrap_or_default();
            let value = format!("w{id} r{round} {}", old.len());
            tx.put(rows, key.as_bytes(), value.as_bytes())
        })?;
    }
    Ok(())
}

/// SP^3's dependency record, by a fixed sequence: worker 0's update of
/// `k00` is held after its install, before its log record
/// ([`crate::gated`]); worker 1 reads that version and commits, logging a
/// dependency on it (its commit then waits for worker 0's record); once
/// the log holds the dependent record worker 0 goes on. `Err` if a step
/// does not happen within a generous bound.
fn dependent_commit(
    db: &Database,
    pool: &Pool<Gated>,
    gate: &Session,
    rows: pmtx_engine::TableId,
) -> Result<(), String> {
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(20);
    gate.arm(SP3_BEFORE_LOG, true);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| -> Result<(), DbError> {
            let mut worker = db.worker(0)?;
            worker.run(|tx| tx.put(rows, b"k00", b"held before its log record")).map(|_| ())
        });
        if !gate.wait_held(LIMIT) {
            gate.release();
            let _ = writer.join();
            return Err("sp3: the writer never reached its log record".to_string());
        }
        let reader = scope.spawn(|| -> Result<(), DbError> {
            let mut worker = db.worker(1)?;
            // A record first, so the dependent one is not the first of its
            // segment (a damaged first record is not told from a segment
            // whose header write a crash tore: `durability::group_commit`).
            worker.run(|tx| tx.put(rows, b"k02", b"before the dependent"))?;
            worker
                .run(|tx| {
                    let seen = tx.get(rows, b"k00")?.unwrap_or_default();
                    tx.put(rows, b"k01", format!("read {}", seen.len()).as_bytes())
                })
                .map(|_| ())
        });
        let started = std::time::Instant::now();
        while !holds_dependencies(pool) && started.elapsed() < LIMIT {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let logged = holds_dependencies(pool);
        gate.release();
        let joined = |handle: std::thread::ScopedJoinHandle<'_, Result<(), DbError>>| {
            handle.join().unwrap_or(Err(DbError::Closed)).map_err(|error| format!("sp3: dependent commit: {error}"))
        };
        joined(writer)?;
        joined(reader)?;
        if logged {
            Ok(())
        } else {
            Err("sp3: the reader of an unlogged version logged no dependency".to_string())
        }
    })
}

/// Whether a log segment of `pool` holds a record with dependencies.
fn holds_dependencies<B: PmBackend>(pool: &Pool<B>) -> bool {
    pool.owned_chunks().into_iter().filter(|(_, owner)| owner.kind() == LOG_CHUNK_KIND).any(|(chunk, _)| {
        let mut bytes = vec![0u8; CHUNK as usize];
        pool.backend().read(pool.chunk_offset(chunk), &mut bytes);
        let used = last_nonzero(&bytes, 0, CHUNK);
        !dependency_spans(&bytes, 0, used).is_empty()
    })
}

fn build_base(engine: EngineKind, config: &MatrixConfig) -> Result<Base, String> {
    let mut options = options(engine, config.seed);
    if let Some(hook) = &config.engine_options {
        (hook.apply)(&mut options);
    }
    // Taken before the pool exists, so no other pool is gated meanwhile.
    let gate = Gate::get().take();
    let pool =
        Arc::new(Pool::<Gated>::create_in_memory(POOL_SIZE, CHUNK, &options.pm).map_err(|error| error.to_string())?);
    let db = Database::open_on_pool(options.clone(), Arc::clone(&pool)).map_err(|error| error.to_string())?;
    let failed = |what: &str, error: DbError| format!("{engine}: {what}: {error}");
    let rows = db.table_id("rows").map_err(|e| failed("table", e))?;
    let meta = db.table_id("meta").map_err(|e| failed("table", e))?;
    {
        let mut worker = db.worker(0).map_err(|e| failed("worker", e))?;
        for i in 0..24u32 {
            worker
                .run(|tx| tx.put(rows, format!("k{i:02}").as_bytes(), format!("value {i} first").as_bytes()))
                .map_err(|e| failed("insert", e))?;
        }
        db.checkpoint().map_err(|e| failed("checkpoint", e))?;
        for i in (0..24u32).step_by(3) {
            worker
                .run(|tx| tx.put(rows, format!("k{i:02}").as_bytes(), format!("value {i} second").as_bytes()))
                .map_err(|e| failed("update", e))?;
        }
        worker.run(|tx| tx.delete(rows, b"k05").map(|_| ())).map_err(|e| failed("delete", e))?;
        worker.run(|tx| tx.put(meta, b"count", &23u64.to_le_bytes())).map_err(|e| failed("meta", e))?;
    }
    // Both workers update the same rows, in turn; SP^3 then logs a
    // dependency list by a fixed sequence (`dependent_commit`).
    alternating_updates(&db, rows, 4).map_err(|e| failed("alternating update", e))?;
    if engine == EngineKind::Sp3 {
        dependent_commit(&db, &pool, &gate, rows)?;
    }
    // Wait until the durable epoch moved twice after the workers stopped:
    // the second flush began after every commit, so each worker's segment
    // records its durable end past every record (a synchronous log records
    // it at each epoch's flush, not at each commit). Zen and wbl keep no log.
    let zen_family =
        matches!(engine, EngineKind::Zen | EngineKind::ZenNaiveAlloc | EngineKind::ZenPlus | EngineKind::Wbl);
    let before = db.stats().durable_epoch;
    for _ in 0..if zen_family { 0 } else { 10_000 } {
        if db.stats().durable_epoch >= before + 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let expected = read_rows(&db).map_err(|e| failed("read", e))?;
    db.crash().map_err(|e| failed("crash", e))?;
    drop(db);
    let mut bytes = vec![0u8; POOL_SIZE as usize];
    pool.backend().read(0, &mut bytes);
    drop(pool);
    let view = Pool::<Direct>::open_image(&bytes, &PmOptions::default()).map_err(|e| e.to_string())?;
    let geometry = view.geometry().clone();
    let mut structures: BTreeMap<Structure, Vec<Span>> = BTreeMap::new();
    structures.insert(Structure::PoolHeader, vec![Span { start: 0, len: layout::HEADER_RECORD_SIZE }]);
    let mut roots = Vec::new();
    for slot in 0..layout::ROOT_SLOTS {
        let at = layout::ROOT_TABLE_OFFSET + slot * layout::ROOT_SLOT_SIZE;
        if word(&bytes, at) != 0 {
            roots.push(Span { start: at, len: layout::ROOT_SLOT_SIZE });
            roots.push(Span { start: layout::ROOT_VALUES_OFFSET + slot * 32, len: 32 });
        }
    }
    structures.insert(Structure::RootTable, roots);
    structures
        .insert(Structure::ChunkTable, vec![Span { start: layout::CHUNK_TABLE_OFFSET, len: geometry.chunk_count * 8 }]);
    for (chunk, owner) in view.owned_chunks() {
        let start = view.chunk_offset(chunk);
        let used = last_nonzero(&bytes, start, CHUNK);
        if used == 0 {
            continue;
        }
        let mut add = |structure, span: Span| structures.entry(structure).or_default().push(span);
        match owner.kind() {
            LOG_CHUNK_KIND => {
                add(Structure::LogSegment, Span { start, len: SEGMENT_HEADER });
                if used > SEGMENT_HEADER {
                    add(Structure::LogRecord, Span { start: start + SEGMENT_HEADER, len: used - SEGMENT_HEADER });
                }
                if engine == EngineKind::Sp3 {
                    for span in dependency_spans(&bytes, start, used) {
                        add(Structure::Sp3Dependencies, span);
                    }
                }
            }
            // FOEDUS's snapshot pages take the place of the checkpoint.
            CHECKPOINT_CHUNK_KIND | SNAPSHOT_CHUNK_KIND => add(Structure::Checkpoint, Span { start, len: used }),
            DBXN_VALUE_CHUNK_KIND => add(Structure::DbxnValues, Span { start, len: used }),
            HEAP_CHUNK_KIND | HEAP_CHUNK_KIND_FORMATTED => add(Structure::ZenHeap, Span { start, len: used }),
            WINDOW_CHUNK_KIND => add(Structure::WblLog, Span { start, len: used }),
            PM_HOME_CHUNK_KIND => {
                // Up to the end of the last slot ever written (every slot
                // of a formatted chunk holds at least the free marker).
                let size = (u64::from(owner.group()) * 64).max(64);
                let written = (0..CHUNK / size)
                    .rev()
                    .find(|slot| word(&bytes, start + slot * size) != PM_HOME_FREE_WORD0)
                    .map_or(0, |slot| (slot + 1) * size);
                if written > 0 {
                    add(Structure::PmHome, Span { start, len: written });
                }
            }
            TORNBIT_LOG_CHUNK_KIND => add(Structure::TornBitLog, Span { start, len: used }),
            CATALOG_CHUNK_KIND => {
                // Two copies, one per half; each span is a copy's written
                // bytes (header and payload), not the zeros after it.
                let half = CHUNK / 2;
                for copy in 0..2 {
                    let at = start + copy * half;
                    let len = last_nonzero(&bytes, at, half);
                    if len > 0 {
                        add(Structure::Catalog, Span { start: at, len });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Base { engine, options, bytes, expected, structures })
}

/// A small deterministic generator (SplitMix64).
struct Positions(u64);

impl Positions {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The damaged images of one cell, each with where it was damaged.
fn damaged_images(
    base: &Base,
    structure: Structure,
    spans: &[Span],
    damage: Damage,
    config: &MatrixConfig,
) -> Vec<(String, Vec<u8>)> {
    let total: u64 = spans.iter().map(|span| span.len).sum();
    let locate = |mut offset: u64| -> u64 {
        for span in spans {
            if offset < span.len {
                return span.start + offset;
            }
            offset -= span.len;
        }
        unreachable!("offset within the spans")
    };
    let mut images = Vec::new();
    match damage {
        Damage::BitFlip => {
            let mut positions = Positions(config.seed ^ (structure as u64) << 32 ^ base.engine.code());
            for trial in 0..config.flips {
                // Spread the trials over the structure, each at a random
                // byte of its share.
                let share = total.div_ceil(config.flips as u64).max(1);
                let offset = (trial as u64 * share + positions.next() % share).min(total - 1);
                let at = locate(offset);
                let bit = (positions.next() % 8) as u8;
                let mut bytes = base.bytes.clone();
                bytes[at as usize] ^= 1 << bit;
                images.push((format!("byte {at:#x} bit {bit}"), bytes));
            }
        }
        Damage::Truncation => {
            if structure == Structure::PoolHeader {
                let len = base.bytes.len() / 2;
                images.push((format!("file cut to {len} bytes"), base.bytes[..len].to_vec()));
            } else {
                // The structure's bytes (all its extents, in order) cut in
                // half: the second half zeroed.
                let mut bytes = base.bytes.clone();
                for offset in (total / 2)..total {
                    bytes[locate(offset) as usize] = 0;
                }
                images.push((format!("second half of {total} bytes zeroed"), bytes));
            }
        }
        Damage::TornWrite => {
            // The first line of the structure's largest extent (where its
            // header is), every other 8-byte word zeroed.
            let span = spans.iter().max_by_key(|span| (span.len, span.start)).expect("a span");
            let line = span.start & !63;
            let mut bytes = base.bytes.clone();
            for word in (1..8).step_by(2) {
                let at = (line + word * 8) as usize;
                bytes[at..at + 8].fill(0);
            }
            images.push((format!("line {line:#x}, odd words zeroed"), bytes));
        }
    }
    images
}

/// Whether an error naming `found` is a detection of damage to `damaged`.
/// A chunk-table entry is its chunk's identity, so damage there may be
/// found by the structure the chunk holds; an SP^3 dependency list is part
/// of its log record.
fn names(damaged: Structure, found: Structure) -> bool {
    found == damaged
        || (damaged == Structure::ChunkTable
            && matches!(
                found,
                Structure::LogSegment
                    | Structure::LogRecord
                    | Structure::Checkpoint
                    | Structure::ZenHeap
                    | Structure::WblLog
                    | Structure::DbxnValues
                    | Structure::Catalog
                    | Structure::PmHome
                    | Structure::TornBitLog
            ))
        || (damaged == Structure::Sp3Dependencies && found == Structure::LogRecord)
}

/// Cells this build is known to fail, with the reason: a failure there is
/// reported (and `pmtx crashtest --corruption-matrix` exits 1), and the
/// test requires every other cell to pass.
pub fn known_gap(engine: EngineKind, structure: Structure, damage: Damage) -> Option<&'static str> {
    // The Zen-family heap truncation gap (a committed tuple zeroed whole
    // read as a slot never written) closed when heap chunks were formatted
    // with a free marker in every slot (`storage::zen::heap`, "Chunks and
    // slots"); the home-slot gap of mnemosyne and pisces (a damaged slot
    // read as a write-back the crash tore) closed when recovery began to ask
    // the logs which slots a crash can have torn and home chunks were
    // formatted (`durability::mnemosyne_log`, "Torn or damaged"). One is
    // left, by design of Mnemosyne's log:
    let _ = (engine, damage);
    match structure {
        Structure::TornBitLog => Some(
            "Mnemosyne's log words carry torn bits, not checksums: damage to a committed fragment reads as a torn \
             tail (the fragments after it are dropped) or as a wrong value",
        ),
        _ => None,
    }
}

fn classify(structure: Structure, error: &DbError) -> TrialOutcome {
    match error.damaged_structure() {
        Some(found) if names(structure, found) => TrialOutcome::Detected(error.to_string()),
        _ => TrialOutcome::Wrong(error.to_string()),
    }
}

fn trial(base: &Base, structure: Structure, bytes: &[u8]) -> TrialOutcome {
    let run = || -> TrialOutcome {
        let pool = match Pool::<Direct>::open_image(bytes, &base.options.pm) {
            Ok(pool) => Arc::new(pool),
            Err(error) => return classify(structure, &DbError::Pool(error)),
        };
        let db = match Database::open_on_pool(base.options.clone(), pool) {
            Ok(db) => db,
            Err(error) => return classify(structure, &error),
        };
        let outcome = match read_rows(&db) {
            Ok(rows) if rows == base.expected => TrialOutcome::Harmless,
            Ok(rows) => TrialOutcome::Silent(describe_difference(&base.expected, &rows)),
            Err(error) => classify(structure, &error),
        };
        let _ = db.crash();
        outcome
    };
    crate::panics::catch(run).unwrap_or_else(|panic| TrialOutcome::Wrong(format!("panic: {panic}")))
}

fn describe_difference(expected: &Rows, found: &Rows) -> String {
    let expected_map: BTreeMap<_, _> = expected.iter().map(|(t, k, v)| ((*t, k.clone()), v.clone())).collect();
    let found_map: BTreeMap<_, _> = found.iter().map(|(t, k, v)| ((*t, k.clone()), v.clone())).collect();
    let mut differences = Vec::new();
    for (key, value) in &expected_map {
        match found_map.get(key) {
            None => differences.push(format!("{} missing", String::from_utf8_lossy(&key.1))),
            Some(other) if other != value => differences.push(format!(
                "{} = {:?}, committed {:?}",
                String::from_utf8_lossy(&key.1),
                String::from_utf8_lossy(other),
                String::from_utf8_lossy(value)
            )),
            _ => {}
        }
    }
    for key in found_map.keys().filter(|key| !expected_map.contains_key(key)) {
        differences.push(format!("{} appeared", String::from_utf8_lossy(&key.1)));
    }
    differences.truncate(4);
    differences.join("; ")
}

/// Runs the matrix for one engine.
pub fn run_engine(engine: EngineKind, config: &MatrixConfig) -> Result<MatrixReport, String> {
    let base = build_base(engine, config)?;
    // The undamaged image must recover with every row.
    let clean = trial(&base, Structure::PoolHeader, &base.bytes);
    if clean != TrialOutcome::Harmless {
        return Err(format!("{engine}: the undamaged pool does not recover: {clean:?}"));
    }
    let mut report = MatrixReport::default();
    for structure in Structure::ALL {
        let Some(spans) = base.structures.get(&structure).filter(|spans| !spans.is_empty()) else {
            report.absent.push((engine, structure));
            continue;
        };
        for damage in Damage::ALL {
            let mut cell = Cell { engine, structure, damage, detected: 0, harmless: 0, failures: Vec::new() };
            for (place, bytes) in damaged_images(&base, structure, spans, damage, config) {
                match trial(&base, structure, &bytes) {
                    TrialOutcome::Detected(_) => cell.detected += 1,
                    TrialOutcome::Harmless => cell.harmless += 1,
                    failure => cell.failures.push((place, failure)),
                }
            }
            report.cells.push(cell);
        }
    }
    Ok(report)
}

/// Runs the matrix for every engine of `config`.
pub fn run_matrix(config: &MatrixConfig, progress: &dyn Fn(&str)) -> Result<MatrixReport, String> {
    let mut report = MatrixReport::default();
    for &engine in &config.engines {
        progress(&format!("corruption matrix: {engine}"));
        let one = run_engine(engine, config)?;
        report.cells.extend(one.cells);
        report.absent.extend(one.absent);
    }
    Ok(report)
}
