//! A pool: header, named roots and a crash-safe allocator of fixed-size
//! chunks (2 MiB by default, Zen's page-level unit), over any backend.
//!
//! Crash safety of the metadata rests on one rule: every mutable metadata
//! word changes by a single failure-atomic 8-byte store that is persisted
//! before the change is used. The header is written once at creation and
//! checksummed; a chunk's table entry is its whole state (free-zero,
//! free-dirty or owned-by-tag), so no crash can leave a chunk half allocated;
//! a root slot becomes valid by one store of its state word after its name
//! and value are durable.
//!
//! Explained in docs/format.md (and ARCHITECTURE.md §3).

use crate::backend::{BackendInfo, PmBackend, PmOptions};
use crate::error::{PoolError, PoolResult};
use crate::layout::{self, header};
use crate::mapping::Mapping;
use crate::prefault::{Prefault, PrefaultTarget};
use crate::structure::Structure;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Index of a data chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkId(pub u64);

/// The 56-bit tag an engine stores in the chunk table to claim a chunk, so
/// that after a restart it finds its chunks by scanning the table (nothing
/// is leaked between allocation and linking).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkOwner(u64);

impl ChunkOwner {
    /// Builds a tag; `None` if it does not fit in 56 bits or is zero.
    pub fn new(tag: u64) -> Option<Self> {
        (tag != 0 && tag <= layout::CHUNK_OWNER_MASK).then_some(Self(tag))
    }
    /// A tag from an engine-defined kind (16 bits), group (24 bits) and
    /// thread (16 bits), e.g. (zen heap, table, worker).
    pub fn compose(kind: u16, group: u32, thread: u16) -> Self {
        assert!(kind != 0, "chunk owner kind 0 is reserved");
        assert!(group < (1 << 24), "chunk owner group {group} exceeds 24 bits");
        Self(((kind as u64) << 40) | ((group as u64) << 16) | thread as u64)
    }
    /// The raw tag.
    pub fn tag(&self) -> u64 {
        self.0
    }
    /// Kind part of a composed tag.
    pub fn kind(&self) -> u16 {
        (self.0 >> 40) as u16
    }
    /// Group part of a composed tag.
    pub fn group(&self) -> u32 {
        ((self.0 >> 16) & 0xFF_FFFF) as u32
    }
    /// Thread part of a composed tag.
    pub fn thread(&self) -> u16 {
        self.0 as u16
    }
}

/// Decoded, immutable pool geometry from the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolGeometry {
    /// Pool size in bytes.
    pub size: u64,
    /// Chunk size in bytes.
    pub chunk_size: u64,
    /// Number of data chunks.
    pub chunk_count: u64,
    /// Offset of chunk 0.
    pub data_offset: u64,
    /// Creation time (Unix seconds).
    pub created_unix_seconds: u64,
    /// Random identifier.
    pub pool_id: u64,
    /// Size the creator asked for.
    pub requested_size: u64,
    /// Creator version string.
    pub creator: String,
    /// Layout version in the header (`layout::OLDEST_LAYOUT_VERSION` to
    /// `layout::LAYOUT_VERSION`).
    pub layout_version: u32,
}

/// Everything `pmtx pool info` prints.
#[derive(Clone, Debug)]
pub struct PoolInfo {
    /// The file, if any.
    pub path: Option<PathBuf>,
    /// Geometry from the header.
    pub geometry: PoolGeometry,
    /// Backend, mapping, flush instruction and domain.
    pub backend: BackendInfo,
    /// Whether the last close was clean (read at open).
    pub was_clean_shutdown: bool,
    /// Times the pool has been opened.
    pub open_count: u64,
    /// Chunks owned by some engine.
    pub chunks_used: u64,
    /// Named roots and their values.
    pub roots: Vec<(String, u64)>,
}

/// Result of a full metadata check.
#[derive(Clone, Debug)]
pub struct PoolCheckReport {
    /// Geometry from the header.
    pub geometry: PoolGeometry,
    /// Chunks owned.
    pub chunks_used: u64,
    /// Free chunks known to be zero.
    pub chunks_free_zero: u64,
    /// Free chunks that were used before.
    pub chunks_free_dirty: u64,
    /// Valid named roots.
    pub roots: u64,
}

/// A pool over backend `B`.
pub struct Pool<B: PmBackend> {
    backend: B,
    geometry: PoolGeometry,
    label: PathBuf,
    was_clean_shutdown: bool,
    /// Engine sessions begun on this pool object
    /// ([`Pool::begin_engine_session`]).
    engine_sessions: std::sync::atomic::AtomicU64,
    /// Serialises allocation decisions; the persistent state is the table.
    allocation: Mutex<AllocationHint>,
    /// Serialises root-slot creation.
    roots_lock: Mutex<()>,
    /// Free chunks populated ahead of the allocator (`prefault`).
    prefault: Prefault,
}

/// Where the search for a free chunk starts: no chunk below `next` is free.
///
/// Allocation is lowest-free-first, and a free lowers the hint, so freed
/// chunks (log segments a checkpoint truncated, say) are reused before
/// untouched ones. A rotating search would touch every chunk of the pool
/// before reusing any, so a log-heavy run would make the whole pool file
/// resident (and, for a sparse file, allocate all of it on disk).
struct AllocationHint {
    next: u64,
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn random_id() -> u64 {
    use rand::RngCore;
    rand::rngs::OsRng.next_u64()
}

impl<B: PmBackend> Pool<B> {
    /// Creates a pool file of `size` bytes (which must not exist yet).
    pub fn create(path: &Path, size: u64, chunk_size: u64, options: &PmOptions) -> PoolResult<Self> {
        validate_create(path, size, chunk_size)?;
        let mapping = Mapping::create_file(path, size)?;
        let result = Self::format(mapping, size, chunk_size, options);
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// Creates a pool in anonymous memory (simulations, tests).
    pub fn create_in_memory(size: u64, chunk_size: u64, options: &PmOptions) -> PoolResult<Self> {
        let label = Path::new("<memory>");
        validate_create(label, size, chunk_size)?;
        Self::format(Mapping::anonymous(size)?, size, chunk_size, options)
    }

    /// Opens an existing pool file, validating header and chunk table.
    pub fn open(path: &Path, options: &PmOptions) -> PoolResult<Self> {
        let mapping = Mapping::open_file(path)?;
        Self::open_mapping(mapping, path, options)
    }

    /// Opens a crash image (or any byte copy of a pool) in anonymous memory.
    pub fn open_image(bytes: &[u8], options: &PmOptions) -> PoolResult<Self> {
        let label = Path::new("<image>");
        if (bytes.len() as u64) < layout::MIN_POOL_SIZE {
            return Err(PoolError::TooSmall {
                path: label.into(),
                size: bytes.len() as u64,
                minimum: layout::MIN_POOL_SIZE,
            });
        }
        Self::open_mapping(Mapping::from_bytes(bytes)?, label, options)
    }

    fn format(mapping: Mapping, size: u64, chunk_size: u64, options: &PmOptions) -> PoolResult<Self> {
        let label = mapping.path().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("<memory>"));
        let (chunk_count, data_offset) = layout::geometry(size, chunk_size).ok_or(PoolError::TooSmall {
            path: label.clone(),
            size,
            minimum: layout::MIN_POOL_SIZE,
        })?;
        let backend = B::from_mapping(mapping, options)?;
        let geometry = PoolGeometry {
            size,
            chunk_size,
            chunk_count,
            data_offset,
            created_unix_seconds: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            pool_id: random_id(),
            requested_size: size,
            creator: format!("pmtx {}", env!("CARGO_PKG_VERSION")),
            layout_version: layout::LAYOUT_VERSION,
        };
        // The file is fresh (zero) so the chunk table already says "free,
        // zero" everywhere and the root table is empty. Make sure of it for
        // anonymous memory and reused files alike, then persist the header
        // last: a crash before the header is durable leaves a file that
        // `open` rejects as not-a-pool, never a half-formatted pool.
        backend.write_zeros(layout::CLEAN_SHUTDOWN_OFFSET, data_offset - layout::CLEAN_SHUTDOWN_OFFSET);
        backend.flush(layout::CLEAN_SHUTDOWN_OFFSET, data_offset - layout::CLEAN_SHUTDOWN_OFFSET);
        backend.fence();
        let record = encode_header(&geometry);
        backend.write(layout::HEADER_OFFSET, &record);
        backend.persist(layout::HEADER_OFFSET, record.len() as u64);
        backend.crash_point("pool header written");
        Ok(Self {
            backend,
            geometry,
            label,
            was_clean_shutdown: true,
            engine_sessions: Default::default(),
            allocation: Mutex::new(AllocationHint { next: 0 }),
            roots_lock: Mutex::new(()),
            prefault: Prefault::new(chunk_count),
        })
    }

    /// Validates a pool file like [`Pool::open`] but writes nothing: the
    /// clean-shutdown flag and the open count stay as found (so an unclean
    /// pool stays unclean). For `pmtx pool info` / `pool check`; the pool
    /// itself is not handed out, so nothing can be written through it.
    pub fn inspect(path: &Path, options: &PmOptions) -> PoolResult<(PoolInfo, PoolCheckReport)> {
        let mapping = Mapping::open_file(path)?;
        let (pool, report) = Self::validate_mapping(mapping, path, options)?;
        Ok((pool.info(), report))
    }

    /// Like [`Pool::inspect`], and lends the validated pool to `read` for
    /// reads of engine structures (the stored catalog) before dropping it.
    /// Nothing is written unless `read` writes: it must only read.
    pub fn inspect_with<T>(
        path: &Path,
        options: &PmOptions,
        read: impl FnOnce(&Self) -> T,
    ) -> PoolResult<(PoolInfo, PoolCheckReport, T)> {
        let mapping = Mapping::open_file(path)?;
        let (pool, report) = Self::validate_mapping(mapping, path, options)?;
        let value = read(&pool);
        Ok((pool.info(), report, value))
    }

    fn open_mapping(mapping: Mapping, label: &Path, options: &PmOptions) -> PoolResult<Self> {
        let (pool, _) = Self::validate_mapping(mapping, label, options)?;
        let clean = pool.was_clean_shutdown;
        // IMPORTANT: clear the flag durably before anyone writes, so a crash
        // from here on is never mistaken for a clean shutdown.
        pool.backend.store_u64(layout::CLEAN_SHUTDOWN_OFFSET, 0);
        let opens = pool.backend.load_u64(layout::OPEN_COUNT_OFFSET);
        pool.backend.store_u64(layout::OPEN_COUNT_OFFSET, opens.wrapping_add(1));
        pool.backend.persist(layout::CLEAN_SHUTDOWN_OFFSET, 16);
        Ok(Self { was_clean_shutdown: clean, ..pool })
    }

    /// Header and metadata validation shared by `open` and `inspect`; reads only.
    fn validate_mapping(mapping: Mapping, label: &Path, options: &PmOptions) -> PoolResult<(Self, PoolCheckReport)> {
        let actual = mapping.len();
        let mut record = vec![0u8; layout::HEADER_RECORD_SIZE as usize];
        let backend = B::from_mapping(mapping, options)?;
        if actual < layout::HEADER_RECORD_SIZE {
            return Err(PoolError::TooSmall { path: label.into(), size: actual, minimum: layout::MIN_POOL_SIZE });
        }
        backend.read(layout::HEADER_OFFSET, &mut record);
        let geometry = decode_header(&record, label, actual)?;
        let prefault = Prefault::new(geometry.chunk_count);
        let pool = Self {
            backend,
            geometry,
            label: label.to_path_buf(),
            was_clean_shutdown: false,
            engine_sessions: Default::default(),
            allocation: Mutex::new(AllocationHint { next: 0 }),
            roots_lock: Mutex::new(()),
            prefault,
        };
        let report = pool.check_metadata()?;
        let clean = pool.backend.load_u64(layout::CLEAN_SHUTDOWN_OFFSET) == layout::CLEAN_SHUTDOWN_MAGIC;
        Ok((Self { was_clean_shutdown: clean, ..pool }, report))
    }

    /// Marks the pool cleanly shut down and closes it. Engines call this only
    /// after their own state is durable; a pool dropped without `close` is
    /// treated as crashed at the next open.
    pub fn close(self) {
        self.backend.store_u64(layout::CLEAN_SHUTDOWN_OFFSET, layout::CLEAN_SHUTDOWN_MAGIC);
        self.backend.persist(layout::CLEAN_SHUTDOWN_OFFSET, 8);
    }

    /// Marks a clean shutdown without giving up the pool (for engines that
    /// share the pool through an `Arc`). Call only when all state is durable
    /// and no more writes follow; the next `open` clears the flag again.
    pub fn mark_clean_shutdown(&self) {
        self.backend.store_u64(layout::CLEAN_SHUTDOWN_OFFSET, layout::CLEAN_SHUTDOWN_MAGIC);
        self.backend.persist(layout::CLEAN_SHUTDOWN_OFFSET, 8);
    }

    /// The backend: the only way to access pool bytes.
    #[inline(always)]
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Geometry from the header.
    pub fn geometry(&self) -> &PoolGeometry {
        &self.geometry
    }

    /// Whether the previous close was clean (fast-path recovery allowed).
    pub fn was_clean_shutdown(&self) -> bool {
        self.was_clean_shutdown
    }

    /// Starts an engine's use of this pool object and says whether the
    /// engine before it shut down cleanly: for the first engine, the state
    /// found when the pool was opened ([`Pool::was_clean_shutdown`]); for an
    /// engine reopened on the same object, whether the previous one called
    /// [`Pool::mark_clean_shutdown`]. The flag is cleared durably, so a crash
    /// of this engine is never taken for a clean shutdown.
    pub fn begin_engine_session(&self) -> bool {
        if self.engine_sessions.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return self.was_clean_shutdown;
        }
        let clean = self.backend.load_u64(layout::CLEAN_SHUTDOWN_OFFSET) == layout::CLEAN_SHUTDOWN_MAGIC;
        if clean {
            self.backend.store_u64(layout::CLEAN_SHUTDOWN_OFFSET, 0);
            self.backend.persist(layout::CLEAN_SHUTDOWN_OFFSET, 8);
        }
        clean
    }

    /// Byte offset of `chunk`.
    #[inline]
    pub fn chunk_offset(&self, chunk: ChunkId) -> u64 {
        debug_assert!(chunk.0 < self.geometry.chunk_count);
        self.geometry.data_offset + chunk.0 * self.geometry.chunk_size
    }

    /// Binds the pages of `chunk` to the machine's NUMA node `node`
    /// (`mbind`; for engines placing data on a machine with several nodes,
    /// see `crate::numa`). An error leaves the placement to the kernel.
    pub fn bind_chunk_to_numa_node(&self, chunk: ChunkId, node: u32) -> PoolResult<()> {
        if chunk.0 >= self.geometry.chunk_count {
            return Err(PoolError::InvalidOption(format!("chunk {} is not in the pool", chunk.0)));
        }
        let offset = self.chunk_offset(chunk);
        // SAFETY: the chunk lies inside the mapping (its offset and size are
        // within the pool's geometry, which the mapping covers), which lives
        // as long as `self`.
        unsafe {
            crate::numa::bind_range_to_numa_node(
                self.backend.mapping().base().add(offset as usize),
                self.geometry.chunk_size,
                node,
            )
        }
    }

    /// The chunk containing `offset`, if it lies in the data area.
    pub fn chunk_of(&self, offset: u64) -> Option<ChunkId> {
        let data = offset.checked_sub(self.geometry.data_offset)?;
        let index = data / self.geometry.chunk_size;
        (index < self.geometry.chunk_count).then_some(ChunkId(index))
    }

    fn entry_offset(&self, chunk: ChunkId) -> u64 {
        layout::CHUNK_TABLE_OFFSET + chunk.0 * 8
    }

    /// Allocates a chunk for `owner`. With `zeroed`, the chunk's bytes are
    /// zero and durable before the allocation is. The table entry is durable
    /// when this returns, so after a crash the chunk is found by its owner.
    pub fn allocate_chunk(&self, owner: ChunkOwner, zeroed: bool) -> PoolResult<ChunkId> {
        self.allocate_chunk_where(owner, zeroed, |_| true)
    }

    /// As [`Pool::allocate_chunk`], a chunk on (emulated) NUMA node `node`
    /// ([`PmBackend::numa_node_of`]): the lowest free chunk of that node.
    /// On a pool with one node, any chunk.
    pub fn allocate_chunk_on_node(&self, owner: ChunkOwner, zeroed: bool, node: u32) -> PoolResult<ChunkId> {
        if self.backend.numa_nodes() <= 1 {
            return self.allocate_chunk(owner, zeroed);
        }
        self.allocate_chunk_where(owner, zeroed, |chunk| self.backend.numa_node_of(self.chunk_offset(chunk)) == node)
    }

    /// As [`Pool::allocate_chunk`] with `zeroed`, but `format` is called with
    /// the chunk's offset once its bytes are zero and before its table entry
    /// is stored: `format` stores the chunk's initial content and flushes it
    /// (no fence); a fence makes it durable before the entry is stored, so
    /// after a crash an owned chunk is always formatted (a chunk free and
    /// zero is first marked free and dirty, with a fence of its own). With `node`, a
    /// chunk on that (emulated) NUMA node, as [`Pool::allocate_chunk_on_node`].
    pub fn allocate_chunk_formatted(
        &self,
        owner: ChunkOwner,
        node: Option<u32>,
        format: &dyn Fn(u64),
    ) -> PoolResult<ChunkId> {
        let format = Some(format);
        match node {
            Some(node) if self.backend.numa_nodes() > 1 => self.allocate_chunk_inner(
                owner,
                true,
                |chunk| self.backend.numa_node_of(self.chunk_offset(chunk)) == node,
                format,
            ),
            _ => self.allocate_chunk_inner(owner, true, |_| true, format),
        }
    }

    /// The lowest free chunk that `fits`, allocated for `owner`.
    fn allocate_chunk_where(
        &self,
        owner: ChunkOwner,
        zeroed: bool,
        fits: impl Fn(ChunkId) -> bool,
    ) -> PoolResult<ChunkId> {
        self.allocate_chunk_inner(owner, zeroed, fits, None)
    }

    /// The lowest free chunk that `fits`, formatted by `format` (see
    /// [`Pool::allocate_chunk_formatted`]) and allocated for `owner`.
    fn allocate_chunk_inner(
        &self,
        owner: ChunkOwner,
        zeroed: bool,
        fits: impl Fn(ChunkId) -> bool,
        format: Option<&dyn Fn(u64)>,
    ) -> PoolResult<ChunkId> {
        let mut hint = self.allocation.lock();
        let count = self.geometry.chunk_count;
        // The lowest free chunk passed over (another node's): the hint may
        // not move beyond it.
        let mut skipped = None;
        for index in hint.next.min(count)..count {
            let chunk = ChunkId(index);
            let entry_offset = self.entry_offset(chunk);
            let entry = self.backend.load_u64(entry_offset);
            if entry != layout::CHUNK_FREE_ZERO && entry != layout::CHUNK_FREE_DIRTY {
                continue;
            }
            if !fits(chunk) {
                skipped.get_or_insert(index);
                continue;
            }
            if zeroed && entry == layout::CHUNK_FREE_DIRTY {
                let offset = self.chunk_offset(chunk);
                self.backend.write_zeros(offset, self.geometry.chunk_size);
                self.backend.flush(offset, self.geometry.chunk_size);
            }
            if let Some(format) = format {
                if entry == layout::CHUNK_FREE_ZERO {
                    // IMPORTANT: a free chunk marked zero must hold zeros
                    // (the pool's open checks it), so it is marked dirty,
                    // durably, before the format may reach the medium. One
                    // more fence per formatted chunk, none per write.
                    self.backend.store_u64(entry_offset, layout::CHUNK_FREE_DIRTY);
                    self.backend.persist(entry_offset, 8);
                }
                format(self.chunk_offset(chunk));
            }
            if format.is_some() || (zeroed && entry == layout::CHUNK_FREE_DIRTY) {
                // IMPORTANT: the zeroes and the format are durable before the
                // entry may reach the medium: lines reach it in any order, so
                // one fence after the entry would allow an image with the
                // chunk owned and some of its lines still old (which Zen's
                // recovery rightly refuses as damage). Per chunk, not per
                // transaction.
                self.backend.fence();
            }
            let tag = (layout::CHUNK_OWNED_MARKER << 56) | owner.tag();
            self.backend.store_u64(entry_offset, tag);
            self.backend.persist(entry_offset, 8);
            hint.next = skipped.unwrap_or(chunk.0 + 1);
            drop(hint);
            self.prefault.allocated(chunk.0);
            return Ok(chunk);
        }
        hint.next = skipped.unwrap_or(count);
        Err(PoolError::Full { chunks: count, chunk_size: self.geometry.chunk_size })
    }

    /// The pool's file (`<memory>` or `<image>` for a pool in memory), as
    /// errors name it.
    pub fn label(&self) -> &Path {
        &self.label
    }

    /// Keeps the page tables of the `ahead` free chunks the allocator hands
    /// out next populated for writing, from a background thread, so the
    /// workers that get them take no page faults (module `prefault`). A
    /// no-op for `ahead == 0` and for pools in anonymous memory.
    pub fn start_prefault(self: &Arc<Self>, ahead: u64) -> PoolResult<()> {
        crate::prefault::start(self, ahead).map_err(|source| PoolError::Io {
            path: self.label.clone(),
            operation: "spawn prefault thread",
            source,
        })
    }

    /// Makes sure, in the calling thread, that the `chunks` lowest free
    /// chunks (the ones the allocator hands out next) are populated;
    /// returns how many it had to populate. A benchmark calls this before
    /// its measured phase so that the phase runs as a long-lived pool does,
    /// on chunks whose pages exist (a log engine reuses the chunks a
    /// checkpoint freed), rather than paying the kernel's zeroing of fresh
    /// pages of a new pool file. Changes no byte.
    pub fn populate_free_chunks(&self, chunks: u64) -> PoolResult<u64> {
        let mut populated = 0;
        while populated < chunks {
            match self.prefault_next_free_chunk(chunks) {
                Ok(true) => populated += 1,
                Ok(false) => break,
                Err(source) => {
                    return Err(PoolError::Io { path: self.label.clone(), operation: "populate free chunks", source })
                }
            }
        }
        Ok(populated)
    }

    /// Free chunks the prefault thread has populated so far.
    pub fn prefaulted_chunks(&self) -> u64 {
        self.prefault.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Populates the first of the `ahead` lowest free chunks that is not
    /// populated yet; `Ok(false)` when all of them are.
    pub(crate) fn prefault_next_free_chunk(&self, ahead: u64) -> std::io::Result<bool> {
        let target = {
            let hint = self.allocation.lock();
            let count = self.geometry.chunk_count;
            let mut free_seen = 0;
            let mut target = None;
            for index in hint.next.min(count)..count {
                let entry = self.backend.load_u64(self.entry_offset(ChunkId(index)));
                if entry != layout::CHUNK_FREE_ZERO && entry != layout::CHUNK_FREE_DIRTY {
                    continue;
                }
                if !self.prefault.is_populated(index) {
                    target = Some(index);
                    break;
                }
                free_seen += 1;
                if free_seen >= ahead {
                    break;
                }
            }
            target
        };
        let Some(index) = target else { return Ok(false) };
        self.backend.mapping().populate_for_write(self.chunk_offset(ChunkId(index)), self.geometry.chunk_size)?;
        self.prefault.mark_populated(index);
        self.prefault.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    /// Returns `chunk` to the pool. The caller must hold no live data there.
    pub fn free_chunk(&self, chunk: ChunkId) {
        let entry_offset = self.entry_offset(chunk);
        let mut hint = self.allocation.lock();
        debug_assert!(self.chunk_owner(chunk).is_some(), "freeing a free chunk {chunk:?}");
        self.backend.store_u64(entry_offset, layout::CHUNK_FREE_DIRTY);
        self.backend.persist(entry_offset, 8);
        hint.next = hint.next.min(chunk.0);
    }

    /// Owner of `chunk`, or `None` if free.
    pub fn chunk_owner(&self, chunk: ChunkId) -> Option<ChunkOwner> {
        let entry = self.backend.load_u64(self.entry_offset(chunk));
        (entry >> 56 == layout::CHUNK_OWNED_MARKER).then_some(ChunkOwner(entry & layout::CHUNK_OWNER_MASK))
    }

    /// Every owned chunk with its owner, in chunk order.
    pub fn owned_chunks(&self) -> Vec<(ChunkId, ChunkOwner)> {
        (0..self.geometry.chunk_count)
            .filter_map(|index| self.chunk_owner(ChunkId(index)).map(|owner| (ChunkId(index), owner)))
            .collect()
    }

    /// Chunks owned by `owner`, in chunk order.
    pub fn chunks_owned_by(&self, owner: ChunkOwner) -> Vec<ChunkId> {
        self.owned_chunks().into_iter().filter(|(_, o)| *o == owner).map(|(c, _)| c).collect()
    }

    /// Number of chunks still free.
    pub fn free_chunks(&self) -> u64 {
        self.geometry.chunk_count - self.owned_chunks().len() as u64
    }

    fn root_slot_offset(slot: u64) -> u64 {
        layout::ROOT_TABLE_OFFSET + slot * layout::ROOT_SLOT_SIZE
    }

    fn slot_name(&self, slot: u64) -> Option<String> {
        let offset = Self::root_slot_offset(slot);
        let state = self.backend.load_u64(offset + layout::root_slot::STATE);
        if state == 0 {
            return None;
        }
        let mut name = [0u8; layout::ROOT_NAME_MAX];
        self.backend.read(offset + layout::root_slot::NAME, &mut name);
        let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        Some(String::from_utf8_lossy(&name[..len]).into_owned())
    }

    fn find_root_slot(&self, name: &str) -> Option<u64> {
        (0..layout::ROOT_SLOTS).find(|slot| self.slot_name(*slot).as_deref() == Some(name))
    }

    fn value_record_offset(slot: u64, seq: u16) -> u64 {
        layout::ROOT_VALUES_OFFSET
            + slot * 2 * layout::ROOT_VALUE_RECORD_SIZE
            + u64::from(seq & 1) * layout::ROOT_VALUE_RECORD_SIZE
    }

    /// The value of the root in `slot` (whose state word is not zero),
    /// checked: the state word must match the name, and for a checksummed
    /// slot the current value record its sequence and CRC.
    fn slot_value(&self, slot: u64) -> Result<u64, String> {
        let mut bytes = [0u8; layout::ROOT_SLOT_SIZE as usize];
        self.backend.read(Self::root_slot_offset(slot), &mut bytes);
        let mut records = [0u8; 2 * layout::ROOT_VALUE_RECORD_SIZE as usize];
        self.backend.read(Self::value_record_offset(slot, 0), &mut records);
        check_root_slot(slot, &bytes, &records)
    }

    /// The value of root `name`, if it exists. Root values are checked when
    /// the pool is opened ([`Pool::check_metadata`]); a value record found
    /// damaged later reads as absent.
    pub fn root(&self, name: &str) -> Option<u64> {
        self.find_root_slot(name).and_then(|slot| self.slot_value(slot).ok())
    }

    /// Writes `value` into the value record of `slot` for sequence `seq`
    /// and makes it durable (the state word still points to the other
    /// record).
    fn write_value_record(&self, slot: u64, name: &[u8], seq: u16, value: u64) {
        let at = Self::value_record_offset(slot, seq);
        let crc = root_value_crc(crc32fast::hash(name), seq, value);
        self.backend.store_u64(at, value);
        self.backend.store_u64(at + 8, u64::from(seq) | (u64::from(crc) << 32));
        self.backend.flush(at, layout::ROOT_VALUE_RECORD_SIZE);
    }

    /// Sets root `name` to `value`, creating it if needed; durable on return.
    pub fn set_root(&self, name: &str, value: u64) -> PoolResult<()> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > layout::ROOT_NAME_MAX || bytes.contains(&0) {
            return Err(PoolError::Root {
                name: name.into(),
                detail: format!("names are 1 to {} bytes without NUL", layout::ROOT_NAME_MAX),
            });
        }
        let _guard = self.roots_lock.lock();
        if let Some(slot) = self.find_root_slot(name) {
            let offset = Self::root_slot_offset(slot);
            let state = self.backend.load_u64(offset + layout::root_slot::STATE);
            // A layout-1 slot becomes a checksummed one with sequence 1.
            let seq = if state >> 48 == layout::ROOT_TAG_V2 { ((state >> 32) as u16).wrapping_add(1) } else { 1 };
            self.write_value_record(slot, bytes, seq, value);
            self.backend.fence();
            self.backend.crash_point("root value record written, before its state word");
            // IMPORTANT: the record is durable before the state word points
            // to it: a crash leaves the old value current, never a torn one.
            self.backend.store_u64(offset + layout::root_slot::STATE, root_state_v2(bytes, seq));
            self.backend.persist(offset, 8);
            return Ok(());
        }
        let slot = (0..layout::ROOT_SLOTS)
            .find(|slot| self.backend.load_u64(Self::root_slot_offset(*slot)) == 0)
            .ok_or_else(|| PoolError::Root {
                name: name.into(),
                detail: format!("all {} root slots are in use", layout::ROOT_SLOTS),
            })?;
        let offset = Self::root_slot_offset(slot);
        let mut padded = [0u8; layout::ROOT_NAME_MAX];
        padded[..bytes.len()].copy_from_slice(bytes);
        self.backend.write(offset + layout::root_slot::NAME, &padded);
        self.backend.store_u64(offset + layout::root_slot::VALUE, 0);
        self.backend.flush(offset, layout::ROOT_SLOT_SIZE);
        self.write_value_record(slot, bytes, 1, value);
        self.backend.fence();
        // IMPORTANT: the state word is stored only after name and value are
        // durable; it is the single store that makes the root exist.
        self.backend.store_u64(offset + layout::root_slot::STATE, root_state_v2(bytes, 1));
        self.backend.persist(offset, 8);
        Ok(())
    }

    /// All named roots (a root whose value is damaged is left out).
    pub fn roots(&self) -> Vec<(String, u64)> {
        (0..layout::ROOT_SLOTS).filter_map(|slot| Some((self.slot_name(slot)?, self.slot_value(slot).ok()?))).collect()
    }

    /// Validates the chunk table and root table.
    pub fn check_metadata(&self) -> PoolResult<PoolCheckReport> {
        let corrupt = |structure, detail: String| PoolError::Corrupt { path: self.label.clone(), structure, detail };
        let entries = (0..self.geometry.chunk_count)
            .map(|index| (index, self.backend.load_u64(self.entry_offset(ChunkId(index)))));
        let (used, zero, dirty) = classify_chunk_table(entries, |index| {
            // A chunk never used is zero: one that holds data lost its
            // owner's entry (allocation makes the entry durable before
            // anything is written into the chunk). Its first page holds
            // every engine's chunk header (and a Zen chunk's first slots,
            // after its bitmap); reading it costs the page fault the first
            // line would.
            let mut line = vec![0u8; FREE_ZERO_CHECK_BYTES.min(self.geometry.chunk_size) as usize];
            self.backend.read(self.chunk_offset(ChunkId(index)), &mut line);
            line.iter().any(|&byte| byte != 0)
        })
        .map_err(|detail| corrupt(Structure::ChunkTable, detail))?;
        let mut roots = 0;
        for slot in 0..layout::ROOT_SLOTS {
            let offset = Self::root_slot_offset(slot);
            let state = self.backend.load_u64(offset);
            if state == 0 {
                continue;
            }
            self.slot_value(slot).map_err(|detail| corrupt(Structure::RootTable, detail))?;
            roots += 1;
        }
        Ok(PoolCheckReport {
            geometry: self.geometry.clone(),
            chunks_used: used,
            chunks_free_zero: zero,
            chunks_free_dirty: dirty,
            roots,
        })
    }

    /// Summary for `pmtx pool info` and benchmark reports.
    pub fn info(&self) -> PoolInfo {
        PoolInfo {
            path: self.backend.mapping().path().map(Path::to_path_buf),
            geometry: self.geometry.clone(),
            backend: self.backend.info(),
            was_clean_shutdown: self.was_clean_shutdown,
            open_count: self.backend.load_u64(layout::OPEN_COUNT_OFFSET),
            chunks_used: self.owned_chunks().len() as u64,
            roots: self.roots(),
        }
    }
}

impl<B: PmBackend> PrefaultTarget for Pool<B> {
    fn prefault_state(&self) -> &Prefault {
        &self.prefault
    }

    fn is_anonymous(&self) -> bool {
        self.backend().mapping().kind() == crate::MappingKind::Anonymous
    }

    fn prefault_next_free_chunk(&self, ahead: u64) -> std::io::Result<bool> {
        Pool::prefault_next_free_chunk(self, ahead)
    }
}

/// Bytes at the start of each free, never-used chunk that `Pool::open`
/// checks are zero.
const FREE_ZERO_CHECK_BYTES: u64 = 4096;

/// The value of a used root slot (`bytes`: its 64 bytes; `records`: its two
/// value records), checked: the state word must match the name, and for a
/// checksummed slot the current value record its sequence and CRC.
fn check_root_slot(slot: u64, bytes: &[u8; 64], records: &[u8; 32]) -> Result<u64, String> {
    let word = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let state = word(bytes, layout::root_slot::STATE as usize);
    let name = &bytes[layout::root_slot::NAME as usize..];
    let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    let name = &name[..len];
    let name_crc = crc32fast::hash(name);
    let shown = String::from_utf8_lossy(name);
    if len == 0 || state as u32 != name_crc {
        return Err(format!("root slot {slot} has a bad state word {state:#018x}"));
    }
    if state >> 32 == layout::ROOT_TAG {
        // Layout 1: the value word alone, no checksum.
        return Ok(word(bytes, layout::root_slot::VALUE as usize));
    }
    if state >> 48 != layout::ROOT_TAG_V2 {
        return Err(format!("root slot {slot} ({shown:?}) has a bad state word {state:#018x}"));
    }
    let seq = (state >> 32) as u16;
    let at = usize::from(seq & 1) * layout::ROOT_VALUE_RECORD_SIZE as usize;
    let value = word(records, at);
    let check = word(records, at + 8);
    let computed = root_value_crc(name_crc, seq, value);
    if check as u32 != u32::from(seq) || (check >> 32) as u32 != computed {
        return Err(format!(
            "root {shown:?} (slot {slot}): value record {} does not match (state sequence {seq}, record \
             {check:#018x}, crc of value {computed:#010x})",
            seq & 1
        ));
    }
    Ok(value)
}

/// What a chunk table entry says, or `None` for an invalid entry.
fn chunk_entry_state(entry: u64) -> Option<ChunkState> {
    match entry {
        layout::CHUNK_FREE_ZERO => Some(ChunkState::FreeZero),
        layout::CHUNK_FREE_DIRTY => Some(ChunkState::FreeDirty),
        _ if entry >> 56 == layout::CHUNK_OWNED_MARKER && entry & layout::CHUNK_OWNER_MASK != 0 => {
            Some(ChunkState::Owned)
        }
        _ => None,
    }
}

enum ChunkState {
    FreeZero,
    FreeDirty,
    Owned,
}

/// Parses the metadata of a pool image, as `Pool::open` checks it, without
/// mapping it: the header record (the file is taken to be as long as the
/// header says, so an image may stop anywhere after its first 512 bytes),
/// then every root slot and every chunk table entry the image holds. For
/// fuzzing the parsers on arbitrary bytes; never panics.
pub fn parse_pool_metadata(bytes: &[u8]) -> PoolResult<PoolCheckReport> {
    let label = Path::new("<bytes>");
    let record = bytes.get(..layout::HEADER_RECORD_SIZE as usize).ok_or(PoolError::TooSmall {
        path: label.into(),
        size: bytes.len() as u64,
        minimum: layout::MIN_POOL_SIZE,
    })?;
    let geometry = decode_header(record, label, u64::MAX)?;
    let corrupt = |structure, detail: String| PoolError::Corrupt { path: label.into(), structure, detail };
    let mut roots = 0;
    for slot in 0..layout::ROOT_SLOTS {
        let at = (layout::ROOT_TABLE_OFFSET + slot * layout::ROOT_SLOT_SIZE) as usize;
        let records_at = (layout::ROOT_VALUES_OFFSET + slot * 2 * layout::ROOT_VALUE_RECORD_SIZE) as usize;
        let (Some(slot_bytes), Some(records)) = (bytes.get(at..at + 64), bytes.get(records_at..records_at + 32)) else {
            break;
        };
        if slot_bytes[..8] == [0; 8] {
            continue;
        }
        let slot_bytes: &[u8; 64] = slot_bytes.try_into().expect("64 bytes");
        let records: &[u8; 32] = records.try_into().expect("32 bytes");
        check_root_slot(slot, slot_bytes, records).map_err(|detail| corrupt(Structure::RootTable, detail))?;
        roots += 1;
    }
    let entries = (0..geometry.chunk_count).map_while(|index| {
        let at = (layout::CHUNK_TABLE_OFFSET + index * 8) as usize;
        let entry = bytes.get(at..at + 8)?;
        Some((index, u64::from_le_bytes(entry.try_into().expect("8 bytes"))))
    });
    // The chunks' contents are not parsed here.
    let (used, zero, dirty) =
        classify_chunk_table(entries, |_| false).map_err(|detail| corrupt(Structure::ChunkTable, detail))?;
    Ok(PoolCheckReport { geometry, chunks_used: used, chunks_free_zero: zero, chunks_free_dirty: dirty, roots })
}

/// Counts the chunk table's `(index, entry)` pairs as (owned, free and
/// never used, free and used before); `holds_data(index)` says whether a
/// chunk marked never used holds data. `Err` names the first entry that is
/// no valid state, or a never-used chunk that holds data. The one
/// classification of the table for [`Pool::check_metadata`] and
/// [`parse_pool_metadata`].
fn classify_chunk_table(
    entries: impl Iterator<Item = (u64, u64)>,
    mut holds_data: impl FnMut(u64) -> bool,
) -> Result<(u64, u64, u64), String> {
    let (mut used, mut zero, mut dirty) = (0, 0, 0);
    for (index, entry) in entries {
        match chunk_entry_state(entry) {
            Some(ChunkState::FreeZero) if holds_data(index) => {
                return Err(format!("chunk {index} is marked free and never used, but holds data"))
            }
            Some(ChunkState::FreeZero) => zero += 1,
            Some(ChunkState::FreeDirty) => dirty += 1,
            Some(ChunkState::Owned) => used += 1,
            None => return Err(format!("chunk table entry {index} holds invalid value {entry:#018x}")),
        }
    }
    Ok((used, zero, dirty))
}

/// State word of a checksummed root slot whose current value record has
/// sequence `seq`.
fn root_state_v2(name: &[u8], seq: u16) -> u64 {
    (layout::ROOT_TAG_V2 << 48) | (u64::from(seq) << 32) | crc32fast::hash(name) as u64
}

/// CRC of a root value record: the name's CRC, the sequence and the value.
fn root_value_crc(name_crc: u32, seq: u16, value: u64) -> u32 {
    let mut bytes = [0u8; 14];
    bytes[0..4].copy_from_slice(&name_crc.to_le_bytes());
    bytes[4..6].copy_from_slice(&seq.to_le_bytes());
    bytes[6..14].copy_from_slice(&value.to_le_bytes());
    crc32fast::hash(&bytes)
}

fn validate_create(path: &Path, size: u64, chunk_size: u64) -> PoolResult<()> {
    if !chunk_size.is_power_of_two() || chunk_size < layout::MIN_CHUNK_SIZE {
        return Err(PoolError::InvalidOption(format!(
            "chunk size {chunk_size} must be a power of two of at least {}",
            layout::MIN_CHUNK_SIZE
        )));
    }
    if size < layout::MIN_POOL_SIZE || layout::geometry(size, chunk_size).is_none() {
        return Err(PoolError::TooSmall {
            path: path.into(),
            size,
            minimum: layout::MIN_POOL_SIZE.max(chunk_size.saturating_mul(2).saturating_add(layout::CHUNK_TABLE_OFFSET)),
        });
    }
    Ok(())
}

fn encode_header(geometry: &PoolGeometry) -> Vec<u8> {
    let mut record = vec![0u8; layout::HEADER_RECORD_SIZE as usize];
    record[header::MAGIC..header::MAGIC + 8].copy_from_slice(&layout::MAGIC);
    record[header::VERSION..header::VERSION + 4].copy_from_slice(&layout::LAYOUT_VERSION.to_le_bytes());
    record[header::RECORD_SIZE..header::RECORD_SIZE + 4]
        .copy_from_slice(&(layout::HEADER_RECORD_SIZE as u32).to_le_bytes());
    for (at, value) in [
        (header::POOL_SIZE, geometry.size),
        (header::CHUNK_SIZE, geometry.chunk_size),
        (header::CHUNK_COUNT, geometry.chunk_count),
        (header::DATA_OFFSET, geometry.data_offset),
        (header::CREATED_UNIX_SECONDS, geometry.created_unix_seconds),
        (header::POOL_ID, geometry.pool_id),
        (header::REQUESTED_SIZE, geometry.requested_size),
    ] {
        record[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    let creator = geometry.creator.as_bytes();
    let creator_len = creator.len().min(31);
    record[header::CREATOR..header::CREATOR + creator_len].copy_from_slice(&creator[..creator_len]);
    let checksum = crc32fast::hash(&record[..header::CHECKSUM]);
    record[header::CHECKSUM..header::CHECKSUM + 4].copy_from_slice(&checksum.to_le_bytes());
    record
}

/// Parses and validates a header record read from a pool of `actual` bytes.
pub(crate) fn decode_header(record: &[u8], path: &Path, actual: u64) -> PoolResult<PoolGeometry> {
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&record[header::MAGIC..header::MAGIC + 8]);
    if magic != layout::MAGIC {
        return Err(PoolError::BadMagic { path: path.into(), found: magic });
    }
    // The checksum first: every layout keeps the magic, the version at 8
    // and the CRC-32 of bytes 0..504 at 504, so a damaged version field is
    // reported as damage, and a valid newer version as a newer format.
    let stored = read_u32(record, header::CHECKSUM);
    let computed = crc32fast::hash(&record[..header::CHECKSUM]);
    if stored != computed {
        return Err(PoolError::ChecksumMismatch {
            path: path.into(),
            structure: Structure::PoolHeader,
            stored,
            computed,
        });
    }
    let version = read_u32(record, header::VERSION);
    if version > layout::LAYOUT_VERSION {
        return Err(PoolError::NewerFormat {
            path: path.into(),
            structure: Structure::PoolHeader,
            found: version,
            supported: layout::LAYOUT_VERSION,
        });
    }
    if version < layout::OLDEST_LAYOUT_VERSION {
        return Err(PoolError::UnsupportedVersion {
            path: path.into(),
            found: version,
            supported: layout::LAYOUT_VERSION,
        });
    }
    let corrupt = |detail: String| PoolError::Corrupt { path: path.into(), structure: Structure::PoolHeader, detail };
    let size = read_u64(record, header::POOL_SIZE);
    let chunk_size = read_u64(record, header::CHUNK_SIZE);
    let chunk_count = read_u64(record, header::CHUNK_COUNT);
    let data_offset = read_u64(record, header::DATA_OFFSET);
    if read_u32(record, header::RECORD_SIZE) as u64 != layout::HEADER_RECORD_SIZE {
        return Err(corrupt("header record size field is wrong".into()));
    }
    if !chunk_size.is_power_of_two() || chunk_size < layout::MIN_CHUNK_SIZE {
        return Err(corrupt(format!("chunk size {chunk_size} is invalid")));
    }
    if layout::geometry(size, chunk_size) != Some((chunk_count, data_offset)) {
        return Err(corrupt(format!(
            "geometry (size {size}, chunk size {chunk_size}, {chunk_count} chunks at {data_offset}) is inconsistent"
        )));
    }
    if actual < size {
        return Err(PoolError::Truncated { path: path.into(), expected: size, actual });
    }
    let creator_bytes = &record[header::CREATOR..header::CREATOR + 32];
    let creator_len = creator_bytes.iter().position(|b| *b == 0).unwrap_or(32);
    Ok(PoolGeometry {
        size,
        chunk_size,
        chunk_count,
        data_offset,
        created_unix_seconds: read_u64(record, header::CREATED_UNIX_SECONDS),
        pool_id: read_u64(record, header::POOL_ID),
        requested_size: read_u64(record, header::REQUESTED_SIZE),
        creator: String::from_utf8_lossy(&creator_bytes[..creator_len]).into_owned(),
        layout_version: version,
    })
}
