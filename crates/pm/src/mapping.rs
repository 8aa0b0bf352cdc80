//! Memory behind a pool: a mapped file (DAX with `MAP_SYNC` when possible) or
//! anonymous memory for simulations and crash images.
//!
//! A `Mapping` owns its address range; backends borrow the base pointer. No
//! other module calls `mmap`.
//!
//! Explained in docs/media-model.md ("Mappings").

use crate::error::{PoolError, PoolResult};
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// How the pool's bytes are mapped, which decides what a flush protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappingKind {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` on a DAX file: flush + fence reaches
    /// the persistence domain; survives power failure.
    Dax,
    /// Plain `MAP_SHARED` on an ordinary file: flushes reach the page cache,
    /// which survives a process crash but not a power failure, unless each
    /// persist point also calls `msync`.
    SharedFile,
    /// Anonymous memory (crash simulation, images, tests): nothing survives
    /// the process.
    Anonymous,
}

impl std::fmt::Display for MappingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Dax => "dax (MAP_SYNC)",
            Self::SharedFile => "shared file mapping (not DAX)",
            Self::Anonymous => "anonymous memory",
        })
    }
}

/// A mapped address range.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    kind: MappingKind,
    path: Option<PathBuf>,
    /// Keeps the file (and its flock) alive as long as the mapping.
    _file: Option<File>,
}

// SAFETY: the mapping is plain shared memory; concurrent access discipline is
// enforced by the backends (atomics for 8-byte words, disjoint ranges else).
unsafe impl Send for Mapping {}
// SAFETY: see above.
unsafe impl Sync for Mapping {}

fn io_error(path: &Path, operation: &'static str, source: std::io::Error) -> PoolError {
    PoolError::Io { path: path.to_path_buf(), operation, source }
}

impl Mapping {
    /// Creates `path` (which must not exist) with `size` bytes, locks and maps it.
    pub fn create_file(path: &Path, size: u64) -> PoolResult<Self> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                PoolError::AlreadyExists(path.to_path_buf())
            } else {
                io_error(path, "create", e)
            }
        })?;
        lock_exclusive(&file, path)?;
        file.set_len(size).map_err(|e| io_error(path, "set_len", e))?;
        Self::map_file(file, path, size)
    }

    /// Opens, locks and maps an existing file with its full length.
    pub fn open_file(path: &Path) -> PoolResult<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                PoolError::NotFound(path.to_path_buf())
            } else {
                io_error(path, "open", e)
            }
        })?;
        lock_exclusive(&file, path)?;
        let size = file.metadata().map_err(|e| io_error(path, "stat", e))?.len();
        if size == 0 {
            return Err(PoolError::TooSmall { path: path.to_path_buf(), size, minimum: crate::layout::MIN_POOL_SIZE });
        }
        Self::map_file(file, path, size)
    }

    fn map_file(file: File, path: &Path, size: u64) -> PoolResult<Self> {
        let len = usize::try_from(size)
            .map_err(|_| PoolError::InvalidOption(format!("pool size {size} does not fit the address space")))?;
        let fd = file.as_raw_fd();
        // SAFETY: mapping a file we opened read-write, with a length equal to
        // its size; the kernel picks the address. MAP_SYNC fails with
        // EOPNOTSUPP (or EINVAL on older kernels) when the file is not on DAX.
        let dax = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                fd,
                0,
            )
        };
        let (base, kind) = if dax != libc::MAP_FAILED {
            (dax, MappingKind::Dax)
        } else {
            // SAFETY: as above, without MAP_SYNC.
            let shared = unsafe {
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            };
            if shared == libc::MAP_FAILED {
                return Err(io_error(path, "mmap", std::io::Error::last_os_error()));
            }
            (shared, MappingKind::SharedFile)
        };
        Ok(Self { base: base as *mut u8, len, kind, path: Some(path.to_path_buf()), _file: Some(file) })
    }

    /// Zero-filled anonymous memory of `size` bytes.
    pub fn anonymous(size: u64) -> PoolResult<Self> {
        let len = usize::try_from(size)
            .map_err(|_| PoolError::InvalidOption(format!("pool size {size} does not fit the address space")))?;
        if len == 0 {
            return Err(PoolError::InvalidOption("anonymous mapping of zero bytes".into()));
        }
        // SAFETY: a fresh private anonymous mapping; the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io_error(Path::new("<anonymous>"), "mmap", std::io::Error::last_os_error()));
        }
        Ok(Self { base: base as *mut u8, len, kind: MappingKind::Anonymous, path: None, _file: None })
    }

    /// Anonymous memory holding a copy of `bytes` (a crash image).
    pub fn from_bytes(bytes: &[u8]) -> PoolResult<Self> {
        let mapping = Self::anonymous(bytes.len() as u64)?;
        // SAFETY: the fresh mapping has exactly bytes.len() writable bytes and
        // nobody else references it yet.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), mapping.base, bytes.len()) };
        Ok(mapping)
    }

    /// Base address (crate-internal: only backends dereference it).
    #[inline(always)]
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Never true: mappings are created non-empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How the memory is mapped.
    pub fn kind(&self) -> MappingKind {
        self.kind
    }

    /// The file behind the mapping, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The page-aligned part of the mapping covering `[offset, offset+len)`
    /// as `(address, length)`, or `None` for anonymous memory (nothing to
    /// sync or populate) and empty ranges.
    fn file_pages(&self, offset: u64, len: u64) -> Option<(*mut libc::c_void, usize)> {
        if self.kind == MappingKind::Anonymous || len == 0 {
            return None;
        }
        let start = offset & !(PAGE - 1);
        let end = offset.saturating_add(len).min(self.len as u64);
        // SAFETY: start < end <= len, so the address lies inside our mapping.
        (start < end).then(|| (unsafe { self.base.add(start as usize) } as *mut libc::c_void, (end - start) as usize))
    }

    /// Synchronously writes the pages covering `[offset, offset+len)` to the
    /// file (`msync(MS_SYNC)`); a no-op for anonymous memory.
    pub(crate) fn sync_range(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let Some((address, length)) = self.file_pages(offset, len) else { return Ok(()) };
        // SAFETY: a page-aligned range inside our mapping.
        os_result(unsafe { libc::msync(address, length, libc::MS_SYNC) })
    }

    /// Populates the page tables of `[offset, offset+len)` for writing
    /// (`madvise(MADV_POPULATE_WRITE)`) without changing a byte, so later
    /// stores there take no page fault (on a file that is not DAX, the
    /// fault would also allocate and zero the page). Only file mappings:
    /// anonymous memory (simulations, images) is left alone. Errors when the
    /// kernel lacks the advice (before Linux 5.14) or cannot back the range.
    pub(crate) fn populate_for_write(&self, offset: u64, len: u64) -> std::io::Result<()> {
        let Some((address, length)) = self.file_pages(offset, len) else { return Ok(()) };
        // SAFETY: a page-aligned range inside our mapping; the advice reads
        // and writes no byte of it.
        os_result(unsafe { libc::madvise(address, length, libc::MADV_POPULATE_WRITE) })
    }

    /// A copy of all bytes (used by the simulator's initial persisted image).
    pub(crate) fn snapshot(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.len];
        // SAFETY: reading our own mapped range into a fresh buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.base, bytes.as_mut_ptr(), self.len) };
        bytes
    }
}

/// Page size of the mappings (x86-64 base pages).
const PAGE: u64 = 4096;

/// Where a temporary pool file of `bytes` goes when the user names none:
/// `/dev/shm` when it is a memory file system (tmpfs) with room for twice
/// the whole pool, else the system's temporary directory. (The file is
/// sparse: pages take room as they are first written, and a write through
/// the mapping into a full tmpfs is a SIGBUS, so the margin leaves room for
/// other users of /dev/shm and for a second pool at the same time.)
///
/// Why not always the temporary directory: on a disk file system every
/// page the engines write is a page-cache page that the kernel also writes
/// back to the disk (and, on ext4, reserves blocks and journals for in the
/// write fault). Those costs grow with the bytes an engine persists and
/// belong to no persistent medium: on real PM the pool is DAX, and the
/// emulated backend models the medium's costs itself. A memory file system
/// has neither, so the engines that write the pool are not charged twice.
pub fn temporary_pool_dir(bytes: u64) -> PathBuf {
    let memory = Path::new("/dev/shm");
    match memory_file_system_free(memory) {
        Some(free) if free / 2 >= bytes => memory.to_path_buf(),
        _ => std::env::temp_dir(),
    }
}

/// Bytes available to this user in `dir` if it is a tmpfs directory.
fn memory_file_system_free(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // `stats` is a writable statfs the call fills in (zeroed is a valid one).
    let mut stats: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(path.as_ptr(), &mut stats) } != 0 {
        return None;
    }
    if stats.f_type as u64 != libc::TMPFS_MAGIC as u64 {
        return None;
    }
    Some((stats.f_bavail as u64).saturating_mul(stats.f_bsize as u64))
}

fn os_result(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range mmap returned; backends that
        // borrowed `base` are dropped before (they own the Mapping).
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// How long a lock held elsewhere is retried before it counts as held.
///
/// A process that forks (any thread spawning a child) shares every open
/// file description with the child until the child's `exec` closes the
/// close-on-exec ones, and a `flock` belongs to the description: a pool this
/// process just closed can look locked for that moment. Real holders keep
/// the lock far longer than this.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

fn lock_exclusive(file: &File, path: &Path) -> PoolResult<()> {
    let deadline = std::time::Instant::now() + LOCK_RETRY;
    loop {
        // SAFETY: flock on a valid descriptor we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(io_error(path, "flock", error));
        }
        if std::time::Instant::now() >= deadline {
            return Err(PoolError::Locked(path.to_path_buf()));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_pools_go_to_memory_only_when_it_has_room() {
        // No file system has room for this: the temporary directory.
        assert_eq!(temporary_pool_dir(u64::MAX), std::env::temp_dir());
        let small = temporary_pool_dir(1 << 20);
        match memory_file_system_free(Path::new("/dev/shm")) {
            Some(free) if free >= 2 << 20 => assert_eq!(small, Path::new("/dev/shm")),
            _ => assert_eq!(small, std::env::temp_dir()),
        }
        // A directory on a disk file system (or missing) is not memory.
        assert_eq!(memory_file_system_free(Path::new("/nonexistent-pmtx-dir")), None);
    }
}
