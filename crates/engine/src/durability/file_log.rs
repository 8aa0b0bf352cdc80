//! The redo log on an ordinary file system (`dbx-disk`, and `dbx-naive`
//! with `medium=disk`): the segments of `durability::log`, byte for byte,
//! one file per segment, made durable with `fdatasync`.
//!
//! ```text
//! <log directory>/pool-id                8 bytes: the id of the pool this log belongs to
//! <log directory>/<worker>-<sequence>.seg  a segment: the 64-byte header of
//!                                          `durability::log`, then its records
//! ```
//!
//! *Durability.* Records are written with positioned writes into the page
//! cache; [`SegmentStore::sync`] `fdatasync`s each file with new bytes,
//! after an `fsync` of the directory whenever a segment file was created
//! since the last one (a file whose directory entry is lost is lost whole).
//! Group commit calls it once per epoch for every worker's file before it
//! publishes the durable epoch; the synchronous `dbx-naive` calls it for
//! each record before it acknowledges. Removals (truncation) are followed by
//! an `fsync` of the directory too, off the commit path; a removal a crash
//! undoes brings back a segment whose records are all older than the
//! checkpoint that allowed the removal, which recovery skips.
//!
//! *Torn tails.* A crash can keep any part of the unsynced bytes, so a
//! file can end in a torn record, or in records after a lost sector; the
//! scan stops at the first record whose length or CRC is wrong, as for the
//! pool, and every byte before it was synced or is of a record recovery
//! may keep (group commit: of an epoch never published, which it skips).
//!
//! *Identity.* The first open writes `pool-id` (synced with the directory);
//! a later open with another pool, or a directory that has segments but no
//! `pool-id`, is refused with a typed error instead of mixing two
//! databases' logs. The pool's root `log.medium` says its log is in files,
//! so a missing directory is an error too, not an empty log.
//!
//! *Errors.* `ENOSPC` and `EDQUOT` become [`DbError::OutOfSpace`]; every
//! other failure is [`DbError::LogFile`] with the path and the operation.
//!
//! Explained in docs/engines/dbx-disk.md (and docs/format.md, "Log files").

use crate::durability::log::{self, FoundSegment, LogRecord, LogStoreMode};
use crate::durability::log::{NewSegment, SegmentId, SegmentStore};
use crate::error::{DbError, DbResult};
use crate::log_files::{LogFile, LogStorage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Name of the file holding the pool id.
pub const POOL_ID_FILE: &str = "pool-id";
/// Suffix of segment files.
const SEGMENT_SUFFIX: &str = ".seg";

/// Maps an I/O error on the log to the typed error: out of space, or a
/// log-file error naming the path and what failed.
pub(crate) fn io_error(storage: &dyn LogStorage, name: &str, operation: &'static str, error: io::Error) -> DbError {
    let path = if name.is_empty() { storage.location() } else { format!("{}/{name}", storage.location()) };
    match error.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
            DbError::OutOfSpace(format!("redo log file {path}: cannot {operation}: {error}"))
        }
        _ => DbError::LogFile { path, operation, source: error },
    }
}

fn segment_name(worker: u16, sequence: u64) -> String {
    format!("{worker:05}-{sequence:016x}{SEGMENT_SUFFIX}")
}

/// A file a writer appends to.
pub struct FileHandle {
    name: String,
    base: u64,
    file: Arc<dyn LogFile>,
}

struct OpenSegment {
    name: String,
    /// Open for writing (segments of this life); `None` for segments found
    /// at recovery, which are only read and removed.
    file: Option<Arc<dyn LogFile>>,
}

/// Segments as files in a [`LogStorage`].
pub struct FileSegments {
    storage: Arc<dyn LogStorage>,
    segment_size: u64,
    /// Segment numbers (address = number * segment size); 0 is never used.
    next_number: AtomicU64,
    segments: Mutex<HashMap<u64, OpenSegment>>,
    /// Segment files created so far, and how many of those creations the
    /// directory has durably recorded (`fsync`ed). The lock serialises the
    /// directory syncs, so a sync that finds `synced` too low waits for one
    /// in progress instead of returning before it completes.
    created: AtomicU64,
    synced: Mutex<u64>,
    file_syncs: AtomicU64,
    directory_syncs: AtomicU64,
}

impl FileSegments {
    /// The log in `storage` for the pool with id `pool_id`, whose segments
    /// are `segment_size` bytes. `expect_existing`: the pool says its log is
    /// in files already (a directory without `pool-id` and segments is then
    /// a lost log, not a new one).
    pub fn open(
        storage: Arc<dyn LogStorage>,
        pool_id: u64,
        segment_size: u64,
        expect_existing: bool,
    ) -> DbResult<Self> {
        let storage_ref = &*storage;
        let names = storage.list().map_err(|e| io_error(storage_ref, "", "list the directory", e))?;
        let has_segments = names.iter().any(|name| name.ends_with(SEGMENT_SUFFIX));
        match storage.read_if_exists(POOL_ID_FILE).map_err(|e| io_error(storage_ref, POOL_ID_FILE, "read", e))? {
            Some(bytes) => {
                let found = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                if found != Some(pool_id) {
                    return Err(DbError::SchemaMismatch(format!(
                        "the redo log in {} belongs to another pool (its {POOL_ID_FILE} says {}, this pool's id is \
                         {pool_id:#x}); remove the directory only if its database is no longer needed",
                        storage.location(),
                        found.map_or_else(|| format!("{} bytes", bytes.len()), |id| format!("{id:#x}"))
                    )));
                }
            }
            None if has_segments => {
                return Err(DbError::Corrupt(format!(
                    "the redo log in {} has segments but no {POOL_ID_FILE}: it cannot be matched to this pool",
                    storage.location()
                )));
            }
            None if expect_existing => {
                return Err(DbError::Corrupt(format!(
                    "the pool keeps its redo log in files, but {} holds none (no {POOL_ID_FILE}): the log was \
                     removed or the directory is not this pool's",
                    storage.location()
                )));
            }
            None => {
                let file =
                    storage.create(POOL_ID_FILE).map_err(|e| io_error(storage_ref, POOL_ID_FILE, "create", e))?;
                file.write_at(0, &pool_id.to_le_bytes())
                    .map_err(|e| io_error(storage_ref, POOL_ID_FILE, "write", e))?;
                file.sync_data().map_err(|e| io_error(storage_ref, POOL_ID_FILE, "sync", e))?;
                storage.sync_directory().map_err(|e| io_error(storage_ref, "", "sync the directory", e))?;
            }
        }
        Ok(Self {
            storage,
            segment_size,
            next_number: AtomicU64::new(1),
            segments: Mutex::new(HashMap::new()),
            created: AtomicU64::new(0),
            synced: Mutex::new(0),
            file_syncs: AtomicU64::new(0),
            directory_syncs: AtomicU64::new(0),
        })
    }

    fn number(&self) -> u64 {
        self.next_number.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes every segment creation so far durable.
    fn sync_directory_for(&self, needed: u64) -> DbResult<()> {
        let mut synced = self.synced.lock();
        if *synced >= needed {
            return Ok(());
        }
        let created = self.created.load(Ordering::Acquire);
        self.storage.sync_directory().map_err(|e| io_error(&*self.storage, "", "sync the directory", e))?;
        self.directory_syncs.fetch_add(1, Ordering::Relaxed);
        *synced = created;
        Ok(())
    }
}

impl SegmentStore for FileSegments {
    type Error = DbError;
    type Handle = FileHandle;
    const IN_POOL: bool = false;

    fn segment_size(&self) -> u64 {
        self.segment_size
    }

    fn create_segment(&self, worker: u16, sequence: u64, header: &[u8]) -> DbResult<NewSegment<FileHandle>> {
        let name = segment_name(worker, sequence);
        let file = self.storage.create(&name).map_err(|e| io_error(&*self.storage, &name, "create", e))?;
        let mut first = header.to_vec();
        first.extend_from_slice(&[0u8; 8]);
        if let Err(error) = file.write_at(0, &first) {
            let _ = self.storage.remove(&name);
            return Err(io_error(&*self.storage, &name, "write the segment header", error));
        }
        let number = self.number();
        let base = number.checked_mul(self.segment_size).ok_or_else(|| {
            DbError::Corrupt(format!("log segment number {number} is beyond the address space; reopen the database"))
        })?;
        self.segments.lock().insert(number, OpenSegment { name: name.clone(), file: Some(Arc::clone(&file)) });
        // IMPORTANT: counted before the writer publishes its tail in this
        // segment, so a flusher that syncs the segment also syncs its
        // directory entry (`sync` reads `created` after the ranges).
        self.created.fetch_add(1, Ordering::AcqRel);
        Ok(NewSegment { id: SegmentId(number), base, handle: FileHandle { name, base, file } })
    }

    fn write(&self, handle: &FileHandle, address: u64, bytes: &[u8], _mode: LogStoreMode) -> DbResult<()> {
        debug_assert!(address >= handle.base && address + bytes.len() as u64 <= handle.base + self.segment_size);
        handle
            .file
            .write_at(address - handle.base, bytes)
            .map_err(|error| io_error(&*self.storage, &handle.name, "write a record", error))
    }

    fn sync(&self, ranges: &[(u64, u64)], _mode: LogStoreMode) -> DbResult<()> {
        let needed = self.created.load(Ordering::Acquire);
        let mut files: Vec<(u64, String, Arc<dyn LogFile>)> = Vec::with_capacity(ranges.len());
        {
            let segments = self.segments.lock();
            for &(start, end) in ranges {
                if end <= start {
                    continue;
                }
                let number = start / self.segment_size;
                if files.iter().any(|(known, _, _)| *known == number) {
                    continue;
                }
                // A segment truncated meanwhile was made durable by its
                // writer before it left it (see the trait).
                if let Some(OpenSegment { name, file: Some(file) }) = segments.get(&number) {
                    files.push((number, name.clone(), Arc::clone(file)));
                }
            }
        }
        self.sync_directory_for(needed)?;
        for (_, name, file) in files {
            file.sync_data().map_err(|error| io_error(&*self.storage, &name, "sync (fdatasync)", error))?;
            self.file_syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn free(&self, segments: &[SegmentId]) {
        if segments.is_empty() {
            return;
        }
        let names: Vec<String> = {
            let mut open = self.segments.lock();
            segments.iter().filter_map(|segment| open.remove(&segment.0)).map(|segment| segment.name).collect()
        };
        for name in &names {
            // A segment that cannot be removed stays behind; all its records
            // are older than the checkpoint that freed it, so recovery skips
            // them and frees it again.
            if let Err(error) = self.storage.remove(name) {
                eprintln!("pmtx: cannot remove log segment {}/{name}: {error}", self.storage.location());
            }
        }
        // Off the commit path: make the removals durable, so the directory
        // does not grow back after a crash.
        match self.storage.sync_directory() {
            Ok(()) => {
                self.directory_syncs.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => eprintln!("pmtx: cannot sync log directory {}: {error}", self.storage.location()),
        }
    }

    fn find_segments(&self) -> DbResult<(Vec<FoundSegment>, Vec<SegmentId>)> {
        let storage = &*self.storage;
        let mut names = storage.list().map_err(|e| io_error(storage, "", "list the directory", e))?;
        names.sort();
        let mut found = Vec::new();
        let mut broken = Vec::new();
        let mut open = self.segments.lock();
        for name in names {
            let Some(stem) = name.strip_suffix(SEGMENT_SUFFIX) else { continue };
            let bytes = storage.read(&name).map_err(|e| io_error(storage, &name, "read", e))?;
            let number = self.number();
            open.insert(number, OpenSegment { name: name.clone(), file: None });
            // The header must agree with the name: a file whose header was
            // torn by a crash right after its creation is garbage.
            let named = stem.split_once('-').and_then(|(worker, sequence)| {
                Some((worker.parse::<u16>().ok()?, u64::from_str_radix(sequence, 16).ok()?))
            });
            match (log::parse_segment_header(&bytes), named) {
                (Some((worker, sequence, format)), Some(named)) if (worker, sequence) == named => {
                    found.push(FoundSegment { worker, id: SegmentId(number), sequence, format })
                }
                _ => broken.push(SegmentId(number)),
            }
        }
        found.sort_by_key(|s| (s.worker, s.sequence));
        Ok((found, broken))
    }

    fn scan_segment(&self, segment: &FoundSegment, visit: &mut dyn FnMut(LogRecord)) -> DbResult<log::ScanEnd> {
        let name = self
            .segments
            .lock()
            .get(&segment.id.0)
            .map(|open| open.name.clone())
            .ok_or_else(|| DbError::Corrupt(format!("log segment #{} is not known", segment.id.0)))?;
        let bytes = self.storage.read(&name).map_err(|e| io_error(&*self.storage, &name, "read", e))?;
        // A file longer than a segment is damage beyond the last record
        // slot: only the segment's bytes are records.
        let size = self.segment_size.min(bytes.len() as u64);
        Ok(log::scan_records(
            segment,
            size,
            |position, out| match bytes.get(position as usize..position as usize + out.len()) {
                Some(source) => {
                    out.copy_from_slice(source);
                    true
                }
                None => false,
            },
            visit,
        ))
    }

    fn file_syncs(&self) -> u64 {
        self.file_syncs.load(Ordering::Relaxed)
    }

    fn directory_syncs(&self) -> u64 {
        self.directory_syncs.load(Ordering::Relaxed)
    }
}

/// Where a file log's segments live (the engine resolves it from its
/// options).
#[derive(Clone, Debug)]
pub(crate) enum FileLogDirectory {
    /// Files in memory that model what a power failure keeps.
    Memory(crate::log_files::MemoryLogStorage),
    /// This directory, created at the first open if missing.
    Path(std::path::PathBuf),
    /// Beside a pool that is not a file: nowhere (an error at open). The
    /// engine's name, for the message.
    Unresolved { engine: String },
}

/// The file segments in `directory`, for `pool` (`dbx-disk`, `dbx-naive`
/// with `medium=disk`), created at the first open. Checks the pool's
/// `log.medium` root first, so a pool whose log is in the pool is refused,
/// and a directory missing under a pool whose log is in files is an error
/// rather than an empty log.
pub(crate) fn open_file_segments<B: pmtx_pm::PmBackend>(
    directory: &FileLogDirectory,
    pool: &pmtx_pm::Pool<B>,
) -> DbResult<FileSegments> {
    use crate::log_files::OsLogStorage;
    let expect_existing = crate::durability::group_commit::check_log_medium(pool, false)?;
    let storage: Arc<dyn LogStorage> = match directory {
        FileLogDirectory::Memory(memory) => Arc::new(memory.clone()),
        FileLogDirectory::Unresolved { engine } => {
            return Err(DbError::InvalidConfig(format!(
                "engine {engine} keeps its redo log in files beside the pool file, but the pool is not a file: set \
                 DbOptions::log_directory"
            )))
        }
        FileLogDirectory::Path(path) => {
            if expect_existing && !path.exists() {
                return Err(DbError::LogFile {
                    path: path.display().to_string(),
                    operation: "open the directory that holds this pool's redo log",
                    source: io::Error::from(io::ErrorKind::NotFound),
                });
            }
            let (storage, _) = OsLogStorage::open_or_create(path).map_err(|error| DbError::LogFile {
                path: path.display().to_string(),
                operation: "create or open the log directory (its parent must exist and be writable)",
                source: error,
            })?;
            Arc::new(storage)
        }
    };
    FileSegments::open(storage, pool.geometry().pool_id, pool.geometry().chunk_size, expect_existing)
}
