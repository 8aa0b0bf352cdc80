//! The database handle: options, open, close, table ids, and transaction
//! bodies run with retries (`pmtx_run`).

use crate::status::{guard, pmtx_status, Failure};
use crate::txn::{self, pmtx_txn};
use parking_lot::RwLock;
use pmtx_engine::spec::EngineSpec;
use pmtx_engine::{Database, DbOptions, EngineKind, PoolLocation, PrimaryIndexKind, TableSchema};
use pmtx_pm::{BackendKind, LatencyModel, PersistenceDomain};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Create the pool file if it does not exist (`pmtx_options.flags`).
pub const PMTX_CREATE: u32 = 1;
/// The machine's caches are in the persistence domain (eADR): no cache-line
/// flushes, fences only (`pmtx_options.flags`).
pub const PMTX_EADR: u32 = 2;
/// Also `msync` what each fence persists, for durability across power
/// failures on an ordinary (non-DAX) file; slow (`pmtx_options.flags`).
pub const PMTX_MSYNC: u32 = 4;
/// An ordered table (B+tree): point reads, writes and range scans
/// (`pmtx_table_def.kind`).
pub const PMTX_ORDERED: u32 = 0;
/// A hash table: point reads and writes only, no scans
/// (`pmtx_table_def.kind`).
pub const PMTX_HASHED: u32 = 1;

/// One table of a new database.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct pmtx_table_def {
    /// Its name, NUL-terminated (read during `pmtx_open` only).
    pub name: *const c_char,
    /// `PMTX_ORDERED` or `PMTX_HASHED`.
    pub kind: u32,
    /// Longest key in bytes; 0: 64.
    pub max_key_len: u32,
    /// Longest value in bytes; 0: 1024.
    pub max_value_len: u32,
}

/// How `pmtx_open` opens a database. Fill it with `pmtx_options_init`,
/// then set the fields you need; pmtx reads it during `pmtx_open` only.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct pmtx_options {
    /// The engine and its options, `ENGINE[:KEY=VALUE]...` as `pmtx bench
    /// --engine` takes it (`"zen"`, `"silo"`, `"dbxn:nt=off"`). NULL: the
    /// engine the pool stores, or `"zen"` for a new pool.
    pub engine: *const c_char,
    /// The tables (`table_count` of them). None (NULL, 0): take the engine
    /// and the tables from the pool file, which must exist.
    pub tables: *const pmtx_table_def,
    /// How many entries `tables` has.
    pub table_count: usize,
    /// `PMTX_CREATE`, `PMTX_EADR`, `PMTX_MSYNC`, or'ed.
    pub flags: u32,
    /// Most threads that run transactions at once; 0: the number of CPUs,
    /// at least 4. More threads than this wait for a free slot.
    pub workers: u32,
    /// Size in bytes of a pool file `PMTX_CREATE` creates; 0: 1 GiB.
    pub pool_size: u64,
    /// How pmtx writes to persistent memory: `"direct"` (real flushes and
    /// fences on the mapped file; the default for NULL) or `"emulated"`,
    /// `"emulated:MODEL"` (adds a media-latency model, `optane` by default).
    pub pm: *const c_char,
}

/// The database handle (opaque).
#[allow(non_camel_case_types)]
pub struct pmtx_db {
    pub(crate) shared: Arc<DbShared>,
}

/// What a database's handles share: the database itself until
/// `pmtx_close`, and what the transaction handles check.
pub(crate) struct DbShared {
    /// The database; `None` once closed. Read-locked while a transaction
    /// begins or a commit is waited for, write-locked by `pmtx_close`.
    pub(crate) database: RwLock<Option<Database>>,
    /// Set by `pmtx_close`: every later call on this database's handles
    /// gets `PMTX_ERR_CLOSED`.
    pub(crate) closed: AtomicBool,
    /// Transactions holding a worker slot (begun and not ended).
    pub(crate) running: AtomicUsize,
    /// Per table id: its name and whether it is ordered.
    pub(crate) tables: Vec<(String, bool)>,
    /// The engine's name, for messages.
    pub(crate) engine: &'static str,
    /// Whether the engine acknowledges a commit only once every transaction
    /// running in its epoch has ended (see `txn::check_can_wait`).
    pub(crate) acknowledges_by_epoch: bool,
}

/// A transaction body for `pmtx_run`: runs the transaction's reads and
/// writes on `txn` and returns 0 to commit, or any other value to roll back
/// (`PMTX_ROLLBACK` by convention). If one of its calls returned
/// `PMTX_CONFLICT`, the attempt is retried whatever the body returns, so a
/// body can return on the first error it gets. `ctx` is the pointer given
/// to `pmtx_run`. The body may run several times; it must not commit, roll
/// back or free `txn`, which is valid only during the call. A C++ body
/// must not let an exception escape.
#[allow(non_camel_case_types)]
pub type pmtx_txn_fn = Option<unsafe extern "C" fn(txn: *mut pmtx_txn, ctx: *mut c_void) -> c_int>;

/// Fills `options` with the defaults: engine from the pool (or `zen`), no
/// tables, no flags, workers and pool size chosen by pmtx, `direct` PM.
///
/// # Safety
/// `options` is NULL (then nothing happens) or points to a writable
/// `pmtx_options`.
///
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn pmtx_options_init(options: *mut pmtx_options) {
    if options.is_null() {
        return;
    }
    let defaults = pmtx_options {
        engine: std::ptr::null(),
        tables: std::ptr::null(),
        table_count: 0,
        flags: 0,
        workers: 0,
        pool_size: 0,
        pm: std::ptr::null(),
    };
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { options.write(defaults) };
}

/// A NUL-terminated string argument as UTF-8.
///
/// # Safety
/// A non-null `text` points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn text<'a>(text: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if text.is_null() {
        return Err(Failure::argument(format!("{what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let text = unsafe { CStr::from_ptr(text) };
    text.to_str().map_err(|_| Failure::argument(format!("{what} is not UTF-8")))
}

/// Opens (recovering as needed) or creates the database in the pool file
/// `path`. With `options` NULL, or with no tables in them, the pool file
/// must exist and says which engine and tables it holds. With tables, a new
/// pool (`PMTX_CREATE`) stores them, and an existing one must hold the
/// same engine and tables (`PMTX_ERR_SCHEMA_MISMATCH` otherwise).
/// On success `*db` is the handle (close it with `pmtx_close`); on an
/// error `*db` is NULL.
///
/// # Safety
/// `path` is a NUL-terminated string; `options` is NULL or points to a
/// `pmtx_options` (filled by `pmtx_options_init`) whose strings and table
/// array are valid; `db` points to a writable `pmtx_db *`.
///
/// Thread safety: any thread. One process opens a pool file at a time
/// (`PMTX_ERR_LOCKED`).
#[no_mangle]
pub unsafe extern "C" fn pmtx_open(
    path: *const c_char,
    options: *const pmtx_options,
    db: *mut *mut pmtx_db,
) -> pmtx_status {
    guard(|| {
        if db.is_null() {
            return Err(Failure::argument("db (the handle's destination) is NULL"));
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { db.write(std::ptr::null_mut()) };
        if path.is_null() {
            return Err(Failure::argument("path is NULL"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
        // SAFETY: null or valid by the caller's contract.
        let options = unsafe { options.as_ref() };
        let database = Database::open(database_options(path, options)?)?;
        let tables = database
            .options()
            .tables
            .iter()
            .map(|schema| (schema.name.clone(), schema.primary == PrimaryIndexKind::Ordered))
            .collect();
        let entry = database.engine().entry();
        let shared = DbShared {
            database: RwLock::new(Some(database)),
            closed: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            tables,
            engine: entry.name,
            acknowledges_by_epoch: entry.acknowledges_by_epoch(),
        };
        let handle = Box::new(pmtx_db { shared: Arc::new(shared) });
        // SAFETY: as above.
        unsafe { db.write(Box::into_raw(handle)) };
        Ok(pmtx_status::PMTX_OK)
    })
}

/// The engine's options for `pmtx_open`.
fn database_options(path: PathBuf, given: Option<&pmtx_options>) -> Result<DbOptions, Failure> {
    let Some(given) = given else {
        return Ok(DbOptions::from_pool(path)?);
    };
    let known_flags = PMTX_CREATE | PMTX_EADR | PMTX_MSYNC;
    if given.flags & !known_flags != 0 {
        return Err(Failure::argument(format!(
            "unknown flags {:#x} in pmtx_options.flags",
            given.flags & !known_flags
        )));
    }
    let spec = if given.engine.is_null() {
        None
    } else {
        // SAFETY: a non-null engine is a NUL-terminated string (contract of pmtx_open).
        let engine = unsafe { text(given.engine, "pmtx_options.engine") }?;
        Some(EngineSpec::parse(engine).map_err(Failure::argument)?)
    };
    // SAFETY: `tables` has `table_count` entries (contract of pmtx_open).
    let tables = unsafe { table_schemas(given) }?;
    let mut options = if tables.is_empty() {
        let mut options = DbOptions::from_pool(&path)?;
        if let Some(spec) = &spec {
            if spec.kind != options.engine {
                return Err(Failure::new(
                    pmtx_status::PMTX_ERR_SCHEMA_MISMATCH,
                    format!(
                        "{} holds a database of engine {}, not {}",
                        path.display(),
                        options.engine.name(),
                        spec.kind.name()
                    ),
                ));
            }
            let seed = options.seed;
            spec.apply(&mut options, seed);
        }
        options
    } else {
        let spec = spec.unwrap_or_else(|| EngineSpec::plain(EngineKind::Zen));
        let mut options = DbOptions::new(spec.kind, tables, &path);
        let seed = options.seed;
        spec.apply(&mut options, seed);
        if given.pool_size != 0 {
            options.pool = PoolLocation::File { path, size: given.pool_size };
        }
        options.create_if_missing(given.flags & PMTX_CREATE != 0)
    };
    options.workers = match given.workers {
        0 => std::thread::available_parallelism().map_or(4, |cpus| cpus.get().max(4)),
        workers => workers as usize,
    };
    if given.flags & PMTX_EADR != 0 {
        options.pm.domain = PersistenceDomain::Eadr;
    }
    options.pm.msync = given.flags & PMTX_MSYNC != 0;
    if !given.pm.is_null() {
        // SAFETY: a NUL-terminated string (contract of pmtx_open).
        let pm = unsafe { text(given.pm, "pmtx_options.pm") }?;
        let (backend, model) = pm.split_once(':').map_or((pm, None), |(backend, model)| (backend, Some(model)));
        options.backend = match BackendKind::parse(backend).map_err(|error| Failure::argument(error.to_string()))? {
            BackendKind::Sim => {
                return Err(Failure::argument("pmtx_options.pm: the crash simulator is for pmtx's own tests"))
            }
            kind => kind,
        };
        if let Some(model) = model {
            if options.backend != BackendKind::Emulated {
                return Err(Failure::argument(format!("pmtx_options.pm {pm:?}: a latency model needs \"emulated\"")));
            }
            options.pm.latency = LatencyModel::preset(model).map_err(|error| Failure::argument(error.to_string()))?;
        }
    }
    Ok(options)
}

/// The schemas of `given.tables`.
///
/// # Safety
/// `given.tables` is NULL or has `given.table_count` readable entries whose
/// names are NUL-terminated strings.
unsafe fn table_schemas(given: &pmtx_options) -> Result<Vec<TableSchema>, Failure> {
    if given.table_count == 0 {
        return Ok(Vec::new());
    }
    if given.tables.is_null() {
        return Err(Failure::argument(format!("pmtx_options.tables is NULL but table_count is {}", given.table_count)));
    }
    // SAFETY: non-null with `table_count` entries by the caller's contract.
    let defs = unsafe { std::slice::from_raw_parts(given.tables, given.table_count) };
    defs.iter()
        .enumerate()
        .map(|(index, def)| {
            // SAFETY: a NUL-terminated name by the caller's contract.
            let name = unsafe { text(def.name, &format!("pmtx_options.tables[{index}].name")) }?;
            let schema = match def.kind {
                PMTX_ORDERED => TableSchema::ordered(name),
                PMTX_HASHED => TableSchema::hashed(name),
                other => {
                    return Err(Failure::argument(format!(
                        "table {name:?}: kind {other} is neither PMTX_ORDERED nor PMTX_HASHED"
                    )))
                }
            };
            let schema = match def.max_key_len {
                0 => schema,
                len => schema.max_key_len(len as usize),
            };
            Ok(match def.max_value_len {
                0 => schema,
                len => schema.max_value_len(len as usize),
            })
        })
        .collect()
}

/// Closes the database `*db`: makes every commit durable, marks a clean
/// shutdown, frees the handle and sets `*db` to NULL, so that a later call
/// with it fails with `PMTX_ERR_ARGUMENT` instead of touching freed memory.
/// Fails with `PMTX_ERR_BUSY` (and closes nothing) while transactions of
/// the database are running; any other status means the handle is freed
/// (an error reports what the shutdown met). Later calls on the database's
/// transactions, iterators and pending commits return `PMTX_ERR_CLOSED`.
/// Closing a NULL `*db` does nothing.
///
/// # Safety
/// `db` points to NULL or to a handle from `pmtx_open`.
///
/// Thread safety: no other thread may use the handle during or after the
/// call.
#[no_mangle]
pub unsafe extern "C" fn pmtx_close(db: *mut *mut pmtx_db) -> pmtx_status {
    guard(|| {
        if db.is_null() {
            return Err(Failure::argument("db (the address of the handle) is NULL"));
        }
        // SAFETY: readable by the caller's contract.
        let handle_ptr = unsafe { db.read() };
        // SAFETY: null or a live handle by the caller's contract.
        let Some(handle) = (unsafe { handle_ptr.as_ref() }) else {
            return Ok(pmtx_status::PMTX_OK);
        };
        let shared = Arc::clone(&handle.shared);
        let mut slot = shared.database.write();
        let running = shared.running.load(Ordering::Acquire);
        if running > 0 {
            return Err(Failure::new(
                pmtx_status::PMTX_ERR_BUSY,
                format!(
                    "{running} transaction(s) of this database are running: commit, roll back or free them \
                     before pmtx_close"
                ),
            ));
        }
        let database = slot.take();
        shared.closed.store(true, Ordering::Release);
        drop(slot);
        // SAFETY: from `Box::into_raw` in pmtx_open; `*db` is cleared so
        // the caller's copy does not reach it again.
        unsafe {
            db.write(std::ptr::null_mut());
            drop(Box::from_raw(handle_ptr));
        }
        if let Some(database) = database {
            database.close()?;
        }
        Ok(pmtx_status::PMTX_OK)
    })
}

/// The failure of a call given a NULL database.
pub(crate) fn db_is_null() -> Failure {
    Failure::argument("db is NULL: not opened, or closed by pmtx_close")
}

/// The id of table `name` in `*table`, for the transaction calls.
/// `PMTX_ERR_UNKNOWN_TABLE` if the database has no such table.
///
/// # Safety
/// `db` is a live handle, `name` a NUL-terminated string, `table` points to
/// a writable `uint32_t`.
///
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn pmtx_table(db: *mut pmtx_db, name: *const c_char, table: *mut u32) -> pmtx_status {
    guard(|| {
        // SAFETY: null or a live handle by the caller's contract.
        let handle = unsafe { db.as_ref() }.ok_or_else(db_is_null)?;
        // SAFETY: NUL-terminated by the caller's contract.
        let name = unsafe { text(name, "name") }?;
        if table.is_null() {
            return Err(Failure::argument("table (the id's destination) is NULL"));
        }
        let id = handle.shared.tables.iter().position(|(table, _)| table == name).ok_or_else(|| {
            let names: Vec<&str> = handle.shared.tables.iter().map(|(name, _)| name.as_str()).collect();
            Failure::new(
                pmtx_status::PMTX_ERR_UNKNOWN_TABLE,
                format!("no table {name:?} (the database has {})", names.join(", ")),
            )
        })?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { table.write(id as u32) };
        Ok(pmtx_status::PMTX_OK)
    })
}

/// Runs `body` as a transaction until it commits: a conflict (an attempt's
/// `PMTX_CONFLICT`) runs it again after a random backoff, up to the
/// engine's attempt limit (`PMTX_ERR_TOO_MANY_ABORTS`). Returns `PMTX_OK`
/// once the commit is durable, `PMTX_ROLLBACK` if the body returned
/// non-zero, or the error that ended the transaction.
///
/// # Safety
/// `db` is a live handle; `body` is a valid function (see `pmtx_txn_fn`)
/// and `ctx` whatever it expects.
///
/// Thread safety: any number of threads at once, each with its own body
/// and context.
#[no_mangle]
pub unsafe extern "C" fn pmtx_run(db: *mut pmtx_db, body: pmtx_txn_fn, ctx: *mut c_void) -> pmtx_status {
    guard(|| {
        // SAFETY: null or a live handle by the caller's contract.
        let handle = unsafe { db.as_ref() }.ok_or_else(db_is_null)?;
        txn::run(&handle.shared, false, body, ctx)
    })
}

/// `pmtx_run` for a body that only reads (its writes fail with
/// `PMTX_ERR_MISUSE`).
///
/// # Safety
/// As `pmtx_run`.
///
/// Thread safety: as `pmtx_run`.
#[no_mangle]
pub unsafe extern "C" fn pmtx_run_read_only(db: *mut pmtx_db, body: pmtx_txn_fn, ctx: *mut c_void) -> pmtx_status {
    guard(|| {
        // SAFETY: null or a live handle by the caller's contract.
        let handle = unsafe { db.as_ref() }.ok_or_else(db_is_null)?;
        txn::run(&handle.shared, true, body, ctx)
    })
}
