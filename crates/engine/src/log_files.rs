//! The files of a redo log kept outside the pool, on an ordinary file
//! system (`dbx-disk`, `dbx-naive:medium=disk`): the small interface the
//! file log needs ([`LogStorage`], [`LogFile`]) over a real directory
//! ([`OsLogStorage`]: positioned writes, `fdatasync`, `fsync` of the
//! directory) or in memory ([`MemoryLogStorage`], for tests).
//!
//! Media model of a file (what the file log is correct under, and what
//! [`MemoryLogStorage`] enforces): bytes written to a file are durable only
//! once a later `sync_data` of that file returned; a file created or
//! removed is so durably only once a later `sync_directory` returned. Until
//! then a crash may keep any part of the unsynced writes (whole sectors, in
//! any order) or none of them, and may keep or lose the creation or the
//! removal. A process kill loses nothing (the page cache survives it); a
//! power failure or kernel crash may lose everything unsynced.
//!
//! This module sits at the bottom of the crate (beside the options that name
//! a [`MemoryLogStorage`]) and knows nothing of records or segments.
//!
//! Explained in docs/engines/dbx-disk.md.

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory of log files.
pub trait LogStorage: Send + Sync + fmt::Debug {
    /// Where the files are, for messages (a path, or "memory").
    fn location(&self) -> String;
    /// Creates the empty file `name`, which must not exist.
    fn create(&self, name: &str) -> io::Result<Arc<dyn LogFile>>;
    /// The whole contents of `name`.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// `name`'s contents, or `None` when there is no such file.
    fn read_if_exists(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match self.read(name) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }
    /// The names of every file, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Removes `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes every creation and removal so far durable (`fsync` of the
    /// directory).
    fn sync_directory(&self) -> io::Result<()>;
}

/// One open log file.
pub trait LogFile: Send + Sync {
    /// Writes all of `bytes` at `offset` (a positioned write; the file grows
    /// as needed).
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes every byte written so far durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
}

/// Log files in a directory of the file system.
#[derive(Debug)]
pub struct OsLogStorage {
    path: PathBuf,
    /// The directory itself, kept open for `fsync`.
    directory: File,
}

impl OsLogStorage {
    /// The directory `path`, created (one level: its parent must exist) if
    /// missing.
    pub fn open_or_create(path: &Path) -> io::Result<(Self, bool)> {
        let created = match std::fs::create_dir(path) {
            Ok(()) => true,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                if !path.is_dir() {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a directory"));
                }
                false
            }
            Err(error) => return Err(error),
        };
        let directory = File::open(path)?;
        if created {
            // The new directory's own entry must survive a power failure
            // before any file in it counts.
            if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
                File::open(parent)?.sync_all()?;
            }
        }
        Ok((Self { path: path.to_path_buf(), directory }, created))
    }
}

struct OsLogFile(File);

impl LogFile for OsLogFile {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all_at(bytes, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl LogStorage for OsLogStorage {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn LogFile>> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(self.path.join(name))?;
        Ok(Arc::new(OsLogFile(file)))
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path.join(name))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.path.join(name))
    }

    fn sync_directory(&self) -> io::Result<()> {
        self.directory.sync_all()
    }
}

/// Log files in memory that keep what was synced apart from what was only
/// written, so a test can crash them as a power failure would
/// ([`MemoryLogStorage::crash`]). Clones share the same files: a test keeps
/// one clone, the database (through `DbOptions::log_directory`) the other,
/// and reopens the database on the crashed files.
///
/// The default preset of in-memory databases (`DbOptions::in_memory`) logs
/// here, since a pool in anonymous memory has no directory beside it.
#[derive(Clone, Default)]
pub struct MemoryLogStorage {
    state: Arc<Mutex<MemoryState>>,
}

#[derive(Default)]
struct MemoryState {
    /// The directory as the running program sees it: name -> file id.
    names: BTreeMap<String, u64>,
    /// The directory as of the last `sync_directory`.
    durable_names: BTreeMap<String, u64>,
    /// Contents as written, by file id (files removed from `names` keep
    /// theirs while `durable_names` may still bring them back).
    written: BTreeMap<u64, Vec<u8>>,
    /// Contents as of each file's last `sync_data`, by file id.
    synced: BTreeMap<u64, Vec<u8>>,
    next_id: u64,
    /// Most bytes all files may hold (`None`: unbounded); a write beyond it
    /// fails with `ENOSPC`.
    capacity: Option<u64>,
    /// Syncs fail with `EIO` (a dying disk), for tests of the poisoning.
    failing_syncs: bool,
}

impl MemoryState {
    fn live_bytes(&self) -> u64 {
        self.names.values().filter_map(|id| self.written.get(id)).map(|bytes| bytes.len() as u64).sum()
    }

    /// Gives every file a fresh id above `floor`, so handles opened before
    /// (a crashed process's) reach none of them.
    fn renumber_from(&mut self, floor: u64) {
        let mut names = BTreeMap::new();
        let mut written = BTreeMap::new();
        let mut synced = BTreeMap::new();
        let mut next = floor;
        for (name, id) in &self.names {
            next += 1;
            names.insert(name.clone(), next);
            written.insert(next, self.written.get(id).cloned().unwrap_or_default());
            synced.insert(next, self.synced.get(id).cloned().unwrap_or_default());
        }
        self.durable_names = names.clone();
        self.names = names;
        self.written = written;
        self.synced = synced;
        self.next_id = next;
    }

    /// Drops contents no name (live or durable) can reach any more.
    fn collect(&mut self) {
        let reachable: std::collections::BTreeSet<u64> =
            self.names.values().chain(self.durable_names.values()).copied().collect();
        self.written.retain(|id, _| reachable.contains(id));
        self.synced.retain(|id, _| reachable.contains(id));
    }
}

impl fmt::Debug for MemoryLogStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("MemoryLogStorage")
            .field("files", &state.names.len())
            .field("capacity", &state.capacity)
            .finish()
    }
}

/// Sector size of the torn writes [`MemoryLogStorage::crash_torn`] makes.
const SECTOR: usize = 512;

impl MemoryLogStorage {
    /// Empty storage whose files may hold at most `bytes` in all.
    pub fn with_capacity(bytes: u64) -> Self {
        let storage = Self::default();
        storage.state.lock().capacity = Some(bytes);
        storage
    }

    /// A power failure: every file keeps exactly what its last
    /// `sync_data` made durable, and the directory what its last
    /// `sync_directory` made durable (an unsynced creation is lost, an
    /// unsynced removal undone). Files opened before are cut off (their
    /// writes and syncs go nowhere), as a dead process's are.
    pub fn crash(&self) {
        let image = self.crash_image();
        let mut state = self.state.lock();
        let next_id = state.next_id;
        *state = std::mem::take(&mut *image.state.lock());
        state.renumber_from(next_id);
    }

    /// What [`MemoryLogStorage::crash`] would leave, as new storage; this
    /// one goes on unchanged (a snapshot of the durable state while
    /// writers run).
    pub fn crash_image(&self) -> MemoryLogStorage {
        let state = self.state.lock();
        let mut image = MemoryState { capacity: state.capacity, ..MemoryState::default() };
        for (name, id) in &state.durable_names {
            image.next_id += 1;
            image.names.insert(name.clone(), image.next_id);
            image.written.insert(image.next_id, state.synced.get(id).cloned().unwrap_or_default());
        }
        image.durable_names = image.names.clone();
        image.synced = image.written.clone();
        MemoryLogStorage { state: Arc::new(Mutex::new(image)) }
    }

    /// A power failure that also keeps a random part of what was written
    /// but not synced: each unsynced 512-byte sector of each file is kept
    /// or lost on its own, and each unsynced creation or removal happened
    /// or not, all drawn from `seed` (so a torn record can end a file).
    /// Returns the result as new storage; this one goes on unchanged.
    pub fn crash_image_torn(&self, seed: u64) -> MemoryLogStorage {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let state = self.state.lock();
        let mut image = MemoryState { capacity: state.capacity, ..MemoryState::default() };
        let mut seen = std::collections::BTreeSet::new();
        for (name, id) in state.names.iter().chain(state.durable_names.iter()) {
            if !seen.insert(name.clone()) {
                continue;
            }
            let live = state.names.get(name) == Some(id);
            let durable = state.durable_names.get(name) == Some(id);
            // A creation or removal the directory did not sync happened or
            // not, at random.
            let kept = (live && durable) || rng.gen_bool(0.5);
            if !kept {
                continue;
            }
            let synced = state.synced.get(id).cloned().unwrap_or_default();
            let latest = state.written.get(id).cloned().unwrap_or_default();
            let mut kept = synced.clone();
            kept.resize(latest.len().max(synced.len()), 0);
            for start in (0..latest.len()).step_by(SECTOR) {
                let end = (start + SECTOR).min(latest.len());
                let unsynced = synced.get(start..end) != Some(&latest[start..end]);
                if unsynced && rng.gen_bool(0.5) {
                    kept[start..end].copy_from_slice(&latest[start..end]);
                }
            }
            image.next_id += 1;
            image.names.insert(name.clone(), image.next_id);
            image.written.insert(image.next_id, kept);
        }
        image.durable_names = image.names.clone();
        image.synced = image.written.clone();
        MemoryLogStorage { state: Arc::new(Mutex::new(image)) }
    }

    /// [`MemoryLogStorage::crash_image_torn`] in place: files opened before
    /// are cut off.
    pub fn crash_torn(&self, seed: u64) {
        let image = self.crash_image_torn(seed);
        let mut state = self.state.lock();
        let next_id = state.next_id;
        *state = std::mem::take(&mut *image.state.lock());
        state.renumber_from(next_id);
    }

    /// Makes every later sync fail with `EIO` (`true`) or work again.
    pub fn fail_syncs(&self, failing: bool) {
        self.state.lock().failing_syncs = failing;
    }

    /// The names of the files as the running program sees them.
    pub fn file_names(&self) -> Vec<String> {
        self.state.lock().names.keys().cloned().collect()
    }

    /// Bytes written to every file, synced or not.
    pub fn bytes_written(&self) -> u64 {
        self.state.lock().live_bytes()
    }
}

struct MemoryLogFile {
    state: Arc<Mutex<MemoryState>>,
    id: u64,
}

impl LogFile for MemoryLogFile {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock();
        let Some(current) = state.written.get(&self.id).map(Vec::len) else {
            // Removed and unreachable: the write goes nowhere, as on a file
            // system (an unlinked file's blocks are freed at close).
            return Ok(());
        };
        let end = offset as usize + bytes.len();
        let growth = end.saturating_sub(current) as u64;
        if let Some(capacity) = state.capacity {
            if state.live_bytes() + growth > capacity {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
        }
        let data = state.written.get_mut(&self.id).expect("checked above");
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset as usize..end].copy_from_slice(bytes);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.failing_syncs {
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        if let Some(data) = state.written.get(&self.id).cloned() {
            state.synced.insert(self.id, data);
        }
        Ok(())
    }
}

impl LogStorage for MemoryLogStorage {
    fn location(&self) -> String {
        "memory".to_string()
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn LogFile>> {
        let mut state = self.state.lock();
        if state.names.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        state.next_id += 1;
        let id = state.next_id;
        state.names.insert(name.to_string(), id);
        state.written.insert(id, Vec::new());
        Ok(Arc::new(MemoryLogFile { state: Arc::clone(&self.state), id }))
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let state = self.state.lock();
        let id = state.names.get(name).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(state.written.get(id).cloned().unwrap_or_default())
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.file_names())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.state.lock();
        state.names.remove(name).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        state.collect();
        Ok(())
    }

    fn sync_directory(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.failing_syncs {
            return Err(io::Error::from_raw_os_error(5)); // EIO
        }
        state.durable_names = state.names.clone();
        state.collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_exactly_what_was_synced() {
        let storage = MemoryLogStorage::default();
        let a = storage.create("a").unwrap();
        a.write_at(0, b"hello").unwrap();
        storage.sync_directory().unwrap();
        a.sync_data().unwrap();
        a.write_at(5, b" world").unwrap();
        let b = storage.create("b").unwrap();
        b.write_at(0, b"lost").unwrap();
        b.sync_data().unwrap();
        storage.crash();
        assert_eq!(storage.read("a").unwrap(), b"hello", "the unsynced write is gone");
        assert!(storage.read("b").is_err(), "a creation the directory never synced is gone");
        storage.remove("a").unwrap();
        storage.crash();
        assert_eq!(storage.read("a").unwrap(), b"hello", "an unsynced removal is undone");
        storage.remove("a").unwrap();
        storage.sync_directory().unwrap();
        storage.crash();
        assert!(storage.list().unwrap().is_empty());
    }

    #[test]
    fn torn_crashes_keep_the_synced_part_and_sectors_of_the_rest() {
        for seed in 0..32 {
            let storage = MemoryLogStorage::default();
            let file = storage.create("f").unwrap();
            storage.sync_directory().unwrap();
            file.write_at(0, &[1u8; 1000]).unwrap();
            file.sync_data().unwrap();
            file.write_at(1000, &[2u8; 3000]).unwrap();
            storage.crash_torn(seed);
            let bytes = storage.read("f").unwrap();
            assert_eq!(&bytes[..1000], &[1u8; 1000][..], "seed {seed}");
            for (index, sector) in bytes[1000.min(bytes.len())..].chunks(SECTOR).enumerate() {
                let offset = 1000 + index * SECTOR;
                for (at, byte) in sector.iter().enumerate() {
                    let at = offset + at;
                    // A sector is kept whole or not at all.
                    let sector_start = at / SECTOR * SECTOR;
                    let kept = bytes[sector_start.max(1000)..(sector_start + SECTOR).min(bytes.len())].contains(&2);
                    assert_eq!(*byte, if kept { 2 } else { 0 }, "seed {seed}, byte {at}");
                }
            }
        }
    }

    #[test]
    fn writes_beyond_the_capacity_fail_with_enospc_and_syncs_can_fail() {
        let storage = MemoryLogStorage::with_capacity(100);
        let file = storage.create("f").unwrap();
        file.write_at(0, &[0u8; 100]).unwrap();
        let error = file.write_at(100, &[0u8; 1]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull, "{error}");
        file.write_at(50, &[1u8; 50]).unwrap();
        storage.fail_syncs(true);
        assert_eq!(file.sync_data().unwrap_err().raw_os_error(), Some(5));
        storage.fail_syncs(false);
        file.sync_data().unwrap();
    }

    #[test]
    fn os_storage_creates_one_level_and_lists_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (storage, created) = OsLogStorage::open_or_create(&path).unwrap();
        assert!(created);
        let file = storage.create("x").unwrap();
        file.write_at(4, b"abcd").unwrap();
        file.sync_data().unwrap();
        storage.sync_directory().unwrap();
        assert_eq!(storage.read("x").unwrap(), b"\0\0\0\0abcd");
        assert_eq!(storage.list().unwrap(), vec!["x".to_string()]);
        assert_eq!(storage.create("x").err().map(|e| e.kind()), Some(io::ErrorKind::AlreadyExists));
        storage.remove("x").unwrap();
        assert_eq!(storage.read_if_exists("x").unwrap(), None);
        let (_, created) = OsLogStorage::open_or_create(&path).unwrap();
        assert!(!created);
        let missing = OsLogStorage::open_or_create(&dir.path().join("no/such/dir")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
