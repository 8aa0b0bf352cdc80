//! FOEDUS's snapshots: immutable 4 KiB pages of sorted rows in the pool,
//! written by the log gleaner (`group_commit::gleaning`) in place of a
//! checkpoint, and read back at recovery.
//!
//! A snapshot of generation `g` is a run of 4 KiB pages in chunks owned by
//! `ChunkOwner::compose(SNAPSHOT_CHUNK_KIND, g, index)`; page `p` lies in
//! chunk `p / pages_per_chunk` at `(p % pages_per_chunk) * 4096`. Page 0 is
//! the root page; the pages of one table follow each other, sorted by key.
//!
//! ```text
//! root page:  magic u64 "PMTXSNRT", generation u64, start epoch u64,
//!             end epoch u64, chunk count u64, page count u64 (root
//!             included), table count u32, crc32 u32 (of bytes 0..52 and
//!             56..64+24n), rows u64; then n directory entries of 24 B:
//!             table u32, reserved u32, first page u64, page slots u64
//! data page:  magic u64 "PMTXSNPG", generation u64, table u32, rows u16,
//!             span u16 (4 KiB units the page takes: more than 1 only for
//!             a row larger than a page), used bytes u32, crc32 u32 (of
//!             bytes 0..28 and 32..used); rows from byte 32, 8-byte
//!             aligned: key length u16, reserved u16, value length u32,
//!             tid u64, key, value, padding
//! ```
//!
//! A page run never crosses a chunk: the slots left at a chunk's end are
//! one empty page (no rows) spanning them. The snapshot becomes *the*
//! snapshot by one persisted 8-byte store, the pool root `foedus.snapshot`
//! = g, after every page and the root page are durable; chunks of any
//! other generation are garbage, freed at recovery or right after the
//! switch. Every row carries its TID; recovery replays the log from the
//! snapshot's start epoch over it with the per-key newest-TID rule.
//!
//! Explained in docs/engines/foedus.md (and docs/format.md, "Snapshot chunk").

use crate::durability::checkpoint::CheckpointMeta;
use crate::error::{DbError, DbResult};
use crate::storage::record;
use pmtx_pm::{ChunkId, ChunkOwner, PmBackend, Pool, PoolError, Structure};

/// Chunk-owner kind of snapshot chunks.
pub const SNAPSHOT_CHUNK_KIND: u16 = 0x21;
/// Root holding the current snapshot generation (absent = none).
pub const SNAPSHOT_ROOT: &str = "foedus.snapshot";
/// Bytes of a snapshot page.
pub const PAGE_SIZE: u64 = 4096;
const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"PMTXSNRT");
const PAGE_MAGIC: u64 = u64::from_le_bytes(*b"PMTXSNPG");
const PAGE_HEADER: usize = 32;
const ROW_HEADER: usize = 16;
const ROOT_HEADER: usize = 64;
const DIRECTORY_ENTRY: usize = 24;
/// Most tables a root page can list.
pub const MAX_TABLES: usize = (PAGE_SIZE as usize - ROOT_HEADER) / DIRECTORY_ENTRY;
const GENERATION_MASK: u64 = 0xFF_FFFF;

/// One row of a snapshot: key, TID, value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRow {
    /// Primary key.
    pub key: Vec<u8>,
    /// TID of the version.
    pub tid: u64,
    /// Value.
    pub value: Vec<u8>,
}

/// Where a table's pages lie in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TablePages {
    /// Table id.
    pub table: u32,
    /// First page slot.
    pub first: u64,
    /// Page slots (4 KiB units) the table takes.
    pub slots: u64,
}

/// Where each page of an installed snapshot starts, by its first key: the
/// snapshot pointers a page cache keeps for the rows it evicted (one entry
/// per page, the role of FOEDUS's intermediate snapshot pages).
#[derive(Clone, Debug, Default)]
pub struct SnapshotIndex {
    /// Replay the log from this epoch over the snapshot: every version of
    /// an earlier epoch is in it.
    pub start_epoch: u64,
    /// Per table: (first key of the page, pool offset of the page), in key
    /// order.
    pub tables: std::collections::HashMap<u32, Vec<(Vec<u8>, u64)>>,
}

impl SnapshotIndex {
    /// The pool offset of the page that holds `key` of `table`, if the
    /// snapshot has a page for it (the key itself may be absent).
    pub fn page_of(&self, table: u32, key: &[u8]) -> Option<u64> {
        let pages = self.tables.get(&table)?;
        let after = pages.partition_point(|(first, _)| first.as_slice() <= key);
        after.checked_sub(1).map(|index| pages[index].1)
    }
}

/// A snapshot found through the root: its metadata, chunks and directory.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Generation, epochs, rows, chunks.
    pub meta: CheckpointMeta,
    /// Its chunks in page order.
    pub chunks: Vec<ChunkId>,
    /// Per table, where its pages lie.
    pub directory: Vec<TablePages>,
}

fn owner(generation: u64, index: u64) -> DbResult<ChunkOwner> {
    if index > u16::MAX as u64 {
        return Err(DbError::OutOfSpace("a snapshot needs more than 65536 chunks".into()));
    }
    Ok(ChunkOwner::compose(SNAPSHOT_CHUNK_KIND, (generation & GENERATION_MASK) as u32, index as u16))
}

fn full(error: PoolError) -> DbError {
    match error {
        PoolError::Full { .. } => DbError::OutOfSpace(format!("no chunk left for a snapshot: {error}")),
        other => DbError::Pool(other),
    }
}

fn corrupt(generation: u64, detail: impl std::fmt::Display) -> DbError {
    DbError::corrupt(Structure::Checkpoint, format!("snapshot generation {generation}: {detail}"))
}

fn pages_per_chunk<B: PmBackend>(pool: &Pool<B>) -> u64 {
    pool.geometry().chunk_size / PAGE_SIZE
}

/// Checks that a pool's chunks hold whole snapshot pages.
pub fn check_geometry<B: PmBackend>(pool: &Pool<B>) -> DbResult<()> {
    let chunk_size = pool.geometry().chunk_size;
    if chunk_size < 2 * PAGE_SIZE || !chunk_size.is_multiple_of(PAGE_SIZE) {
        return Err(DbError::InvalidConfig(format!(
            "snapshot pages are {PAGE_SIZE} bytes: the pool's chunks ({chunk_size} bytes) must hold at least two"
        )));
    }
    Ok(())
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"))
}

fn half(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"))
}

fn page_crc(page: &[u8], used: usize) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&page[0..28]);
    hasher.update(&page[32..used]);
    hasher.finalize()
}

/// Writes the pages of a new snapshot, table by table, rows in key order.
pub struct SnapshotWriter<'p, B: PmBackend> {
    pool: &'p Pool<B>,
    generation: u64,
    chunks: Vec<ChunkId>,
    /// The next free page slot (slot 0 is the root page).
    next_slot: u64,
    page: Vec<u8>,
    rows_in_page: u16,
    table: Option<u32>,
    directory: Vec<TablePages>,
    rows: u64,
    end_epoch: u64,
    last_key: Option<Vec<u8>>,
    /// The `foedus-root-before-pages` broken variant: the pages' ranges,
    /// written with ordinary stores and flushed only after the root switch.
    unflushed_pages: Option<Vec<(u64, u64)>>,
    /// The first key of the page being filled.
    first_key: Vec<u8>,
    index: SnapshotIndex,
}

impl<'p, B: PmBackend> SnapshotWriter<'p, B> {
    /// A writer of snapshot `generation`; allocates its first chunk.
    pub fn new(pool: &'p Pool<B>, generation: u64) -> DbResult<Self> {
        check_geometry(pool)?;
        let mut writer = Self {
            pool,
            generation,
            chunks: Vec::new(),
            next_slot: 1,
            page: Vec::with_capacity(PAGE_SIZE as usize),
            rows_in_page: 0,
            table: None,
            directory: Vec::new(),
            rows: 0,
            end_epoch: 0,
            last_key: None,
            unflushed_pages: None,
            first_key: Vec::new(),
            index: SnapshotIndex::default(),
        };
        writer.ensure_chunk(0)?;
        Ok(writer)
    }

    /// Broken on purpose (`foedus-root-before-pages`): the pages are
    /// written with ordinary stores and flushed after the root switch.
    pub fn with_pages_flushed_after_root(mut self) -> Self {
        self.unflushed_pages = Some(Vec::new());
        self
    }

    fn ensure_chunk(&mut self, slot: u64) -> DbResult<()> {
        let index = slot / pages_per_chunk(self.pool);
        while self.chunks.len() as u64 <= index {
            let chunk = self.pool.allocate_chunk(owner(self.generation, self.chunks.len() as u64)?, false);
            match chunk {
                Ok(chunk) => self.chunks.push(chunk),
                Err(error) => return Err(full(error)),
            }
        }
        Ok(())
    }

    fn slot_offset(&self, slot: u64) -> u64 {
        let per_chunk = pages_per_chunk(self.pool);
        self.pool.chunk_offset(self.chunks[(slot / per_chunk) as usize]) + (slot % per_chunk) * PAGE_SIZE
    }

    /// Starts the pages of `table` (tables in any order, each once).
    pub fn begin_table(&mut self, table: u32) -> DbResult<()> {
        self.finish_page()?;
        if self.directory.len() >= MAX_TABLES {
            return Err(DbError::InvalidConfig(format!("a snapshot lists at most {MAX_TABLES} tables")));
        }
        self.table = Some(table);
        self.last_key = None;
        self.directory.push(TablePages { table, first: self.next_slot, slots: 0 });
        Ok(())
    }

    /// Appends a row of the current table; keys must come in increasing
    /// order.
    pub fn row(&mut self, key: &[u8], tid: u64, value: &[u8]) -> DbResult<()> {
        debug_assert!(self.table.is_some(), "a row before begin_table");
        debug_assert!(self.last_key.as_deref().is_none_or(|last| last < key), "snapshot rows out of key order");
        if key.len() > u16::MAX as usize || value.len() > u32::MAX as usize {
            return Err(DbError::InvalidConfig(format!("a row of a {}-byte key does not fit a snapshot", key.len())));
        }
        let row_bytes = (ROW_HEADER + key.len() + value.len()).next_multiple_of(8);
        let fits = |used: usize| used + row_bytes <= PAGE_SIZE as usize;
        if self.rows_in_page == u16::MAX || (!self.page.is_empty() && !fits(self.page.len())) {
            self.finish_page()?;
        }
        if self.page.is_empty() {
            self.page.resize(PAGE_HEADER, 0);
            self.first_key.clear();
            self.first_key.extend_from_slice(key);
        }
        let start = self.page.len();
        self.page.resize(start + row_bytes, 0);
        let row = &mut self.page[start..];
        row[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        row[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
        row[8..16].copy_from_slice(&tid.to_le_bytes());
        row[ROW_HEADER..ROW_HEADER + key.len()].copy_from_slice(key);
        row[ROW_HEADER + key.len()..ROW_HEADER + key.len() + value.len()].copy_from_slice(value);
        self.rows_in_page += 1;
        self.rows += 1;
        self.end_epoch = self.end_epoch.max(record::epoch_of_tid(tid));
        if cfg!(debug_assertions) {
            self.last_key = Some(key.to_vec());
        }
        Ok(())
    }

    /// Counts a delete the snapshot folds in (its epoch bounds the log the
    /// snapshot relies on, as a row's does).
    pub fn note_delete(&mut self, tid: u64) {
        self.end_epoch = self.end_epoch.max(record::epoch_of_tid(tid));
    }

    /// Writes the page being filled (non-temporally; durable at the next
    /// fence).
    fn finish_page(&mut self) -> DbResult<()> {
        if self.page.is_empty() {
            return Ok(());
        }
        let used = self.page.len();
        let span = (used as u64).div_ceil(PAGE_SIZE);
        let per_chunk = pages_per_chunk(self.pool);
        if span > per_chunk || span > u16::MAX as u64 {
            return Err(DbError::InvalidConfig(format!("a snapshot row of {used} bytes does not fit a chunk")));
        }
        // A run never crosses a chunk: fill the rest of this one with an
        // empty page.
        let left = per_chunk - self.next_slot % per_chunk;
        if span > left {
            self.write_page(self.next_slot, left, &mut page_header_only(self.generation, self.current_table()))?;
            self.next_slot += left;
        }
        let slot = self.next_slot;
        let mut page = std::mem::take(&mut self.page);
        page[20..22].copy_from_slice(&self.rows_in_page.to_le_bytes());
        self.write_page(slot, span, &mut page)?;
        let at = self.slot_offset(slot);
        let table = self.current_table();
        self.index.tables.entry(table).or_default().push((std::mem::take(&mut self.first_key), at));
        self.next_slot += span;
        page.clear();
        self.page = page;
        self.rows_in_page = 0;
        Ok(())
    }

    fn current_table(&self) -> u32 {
        self.table.unwrap_or(0)
    }

    fn write_page(&mut self, slot: u64, span: u64, page: &mut [u8]) -> DbResult<()> {
        self.ensure_chunk(slot + span - 1)?;
        let used = page.len();
        page[0..8].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
        page[8..16].copy_from_slice(&self.generation.to_le_bytes());
        page[16..20].copy_from_slice(&self.current_table().to_le_bytes());
        page[22..24].copy_from_slice(&(span as u16).to_le_bytes());
        page[24..28].copy_from_slice(&(used as u32).to_le_bytes());
        let crc = page_crc(page, used);
        page[28..32].copy_from_slice(&crc.to_le_bytes());
        let at = self.slot_offset(slot);
        match &mut self.unflushed_pages {
            None => self.pool.backend().write_non_temporal(at, page),
            Some(ranges) => {
                self.pool.backend().write(at, page);
                ranges.push((at, page.len() as u64));
            }
        }
        if let Some(entry) = self.directory.last_mut() {
            entry.slots = slot + span - entry.first;
        }
        Ok(())
    }

    /// Makes the snapshot durable and current: its pages, then its root
    /// page, then the root `foedus.snapshot` (the commit point).
    /// On an error the chunks are freed. Returns the snapshot's metadata
    /// and its page index.
    pub fn install(mut self, start_epoch: u64) -> DbResult<(CheckpointMeta, SnapshotIndex)> {
        if let Err(error) = self.finish_page() {
            self.abandon();
            return Err(error);
        }
        let meta = CheckpointMeta {
            generation: self.generation,
            start_epoch,
            end_epoch: self.end_epoch,
            rows: self.rows,
            chunks: self.chunks.len() as u64,
        };
        let mut root = vec![0u8; ROOT_HEADER + DIRECTORY_ENTRY * self.directory.len()];
        for (at, value) in [
            (0, ROOT_MAGIC),
            (8, self.generation),
            (16, start_epoch),
            (24, self.end_epoch),
            (32, self.chunks.len() as u64),
            (40, self.next_slot),
            (56, self.rows),
        ] {
            root[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        root[48..52].copy_from_slice(&(self.directory.len() as u32).to_le_bytes());
        for (index, entry) in self.directory.iter().enumerate() {
            let at = ROOT_HEADER + index * DIRECTORY_ENTRY;
            root[at..at + 4].copy_from_slice(&entry.table.to_le_bytes());
            root[at + 8..at + 16].copy_from_slice(&entry.first.to_le_bytes());
            root[at + 16..at + 24].copy_from_slice(&entry.slots.to_le_bytes());
        }
        let crc = root_crc(&root);
        root[52..56].copy_from_slice(&crc.to_le_bytes());
        let backend = self.pool.backend();
        // IMPORTANT: the data pages (non-temporal stores) are durable
        // before the root page, and the root page before the root switch.
        backend.fence();
        backend.write_non_temporal(self.slot_offset(0), &root);
        backend.fence();
        backend.crash_point("snapshot pages durable, before root switch");
        if let Err(error) = self.pool.set_root(SNAPSHOT_ROOT, self.generation) {
            self.abandon();
            return Err(error.into());
        }
        backend.crash_point("snapshot root switched");
        if let Some(ranges) = &self.unflushed_pages {
            // The broken variant's late flush of its pages.
            for &(at, len) in ranges {
                backend.flush(at, len);
            }
            backend.fence();
        }
        free_other_generations(self.pool, self.generation);
        let mut index = std::mem::take(&mut self.index);
        index.start_epoch = start_epoch;
        Ok((meta, index))
    }

    fn abandon(&self) {
        for chunk in &self.chunks {
            self.pool.free_chunk(*chunk);
        }
    }

    /// Frees the chunks of a snapshot that will not be installed.
    pub fn abandon_unfinished(self) {
        self.abandon();
    }
}

fn page_header_only(generation: u64, table: u32) -> Vec<u8> {
    let mut page = vec![0u8; PAGE_HEADER];
    page[8..16].copy_from_slice(&generation.to_le_bytes());
    page[16..20].copy_from_slice(&table.to_le_bytes());
    page
}

fn root_crc(root: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&root[0..52]);
    hasher.update(&root[56..]);
    hasher.finalize()
}

/// Frees every snapshot chunk not of generation `keep`.
pub fn free_other_generations<B: PmBackend>(pool: &Pool<B>, keep: u64) {
    for (chunk, chunk_owner) in pool.owned_chunks() {
        if chunk_owner.kind() == SNAPSHOT_CHUNK_KIND && chunk_owner.group() as u64 != keep & GENERATION_MASK {
            pool.free_chunk(chunk);
        }
    }
}

/// The current snapshot, its root page validated; `None` if there is none.
pub fn current_snapshot<B: PmBackend>(pool: &Pool<B>) -> DbResult<Option<Snapshot>> {
    let Some(generation) = pool.root(SNAPSHOT_ROOT) else {
        return Ok(None);
    };
    check_geometry(pool)?;
    let mut chunks: Vec<(u16, ChunkId)> = pool
        .owned_chunks()
        .into_iter()
        .filter(|(_, o)| o.kind() == SNAPSHOT_CHUNK_KIND && o.group() as u64 == generation & GENERATION_MASK)
        .map(|(chunk, o)| (o.thread(), chunk))
        .collect();
    chunks.sort();
    if generation == u64::MAX {
        return Err(corrupt(generation, "the generation is out of range"));
    }
    for (position, (index, _)) in chunks.iter().enumerate() {
        if *index as usize != position {
            return Err(corrupt(generation, format!("chunk {position} is missing")));
        }
    }
    let chunks: Vec<ChunkId> = chunks.into_iter().map(|(_, chunk)| chunk).collect();
    let Some(&first) = chunks.first() else {
        return Err(corrupt(generation, "no chunks found"));
    };
    let mut page = vec![0u8; PAGE_SIZE as usize];
    pool.backend().read(pool.chunk_offset(first), &mut page);
    parse_root(&page, generation, chunks.len() as u64, pages_per_chunk(pool))
        .map_err(|detail| corrupt(generation, detail))
        .map(|(meta, directory)| Some(Snapshot { meta, chunks, directory }))
}

/// A snapshot's root page, checked against the root's generation, its
/// chunk count and the pages those chunks hold.
fn parse_root(
    page: &[u8],
    generation: u64,
    chunk_count: u64,
    per_chunk: u64,
) -> Result<(CheckpointMeta, Vec<TablePages>), String> {
    if page.len() < ROOT_HEADER || word(page, 0) != ROOT_MAGIC {
        return Err("the root page is damaged".into());
    }
    let tables = half(page, 48) as usize;
    if tables > MAX_TABLES || ROOT_HEADER + tables * DIRECTORY_ENTRY > page.len() {
        return Err(format!("the root page lists {tables} tables"));
    }
    let root = &page[..ROOT_HEADER + tables * DIRECTORY_ENTRY];
    if half(root, 52) != root_crc(root) {
        return Err("the root page's checksum does not match".into());
    }
    let (start_epoch, end_epoch, chunks, pages) = (word(root, 16), word(root, 24), word(root, 32), word(root, 40));
    if word(root, 8) != generation || chunks != chunk_count {
        return Err(format!(
            "the root page says generation {} with {chunks} chunks, found {chunk_count} chunks",
            word(root, 8)
        ));
    }
    if start_epoch > record::MAX_EPOCH || end_epoch > record::MAX_EPOCH {
        return Err(format!("the root page claims epochs {start_epoch}..{end_epoch}"));
    }
    if pages == 0 || pages > chunks.saturating_mul(per_chunk) {
        return Err(format!("{pages} pages do not fit {chunks} chunks"));
    }
    let mut directory = Vec::with_capacity(tables);
    for index in 0..tables {
        let at = ROOT_HEADER + index * DIRECTORY_ENTRY;
        let entry = TablePages { table: half(root, at), first: word(root, at + 8), slots: word(root, at + 16) };
        if entry.first == 0 || entry.first.checked_add(entry.slots).is_none_or(|end| end > pages) {
            return Err(format!(
                "table #{} has pages {}+{} beyond the {pages} pages",
                entry.table, entry.first, entry.slots
            ));
        }
        directory.push(entry);
    }
    let meta = CheckpointMeta { generation, start_epoch, end_epoch, rows: word(root, 56), chunks };
    Ok((meta, directory))
}

impl Snapshot {
    fn slot_offset<B: PmBackend>(&self, pool: &Pool<B>, slot: u64) -> u64 {
        let per_chunk = pages_per_chunk(pool);
        pool.chunk_offset(self.chunks[(slot / per_chunk) as usize]) + (slot % per_chunk) * PAGE_SIZE
    }

    /// Visits the rows of `pages` (one table's directory entry) in order:
    /// each page is read whole from the pool (4 KiB, or its span).
    pub fn read_table<B: PmBackend>(
        &self,
        pool: &Pool<B>,
        pages: &TablePages,
        mut visit: impl FnMut(&[u8], u64, &[u8]) -> DbResult<()>,
    ) -> DbResult<u64> {
        let generation = self.meta.generation;
        let per_chunk = pages_per_chunk(pool);
        let end = pages.first + pages.slots;
        let mut slot = pages.first;
        let mut rows = 0;
        let mut page = vec![0u8; PAGE_SIZE as usize];
        while slot < end {
            page.resize(PAGE_SIZE as usize, 0);
            pool.backend().read(self.slot_offset(pool, slot), &mut page);
            let span = u16::from_le_bytes(page[22..24].try_into().expect("2")) as u64;
            let used = half(&page, 24) as usize;
            if word(&page, 0) != PAGE_MAGIC
                || word(&page, 8) != generation
                || half(&page, 16) != pages.table
                || span == 0
                || slot + span > end
                || slot % per_chunk + span > per_chunk
                || used < PAGE_HEADER
                || used as u64 > span * PAGE_SIZE
            {
                return Err(corrupt(generation, format!("page {slot} of table #{} is damaged", pages.table)));
            }
            if span > 1 {
                page.resize((span * PAGE_SIZE) as usize, 0);
                pool.backend().read(self.slot_offset(pool, slot), &mut page);
            }
            if half(&page, 28) != page_crc(&page, used) {
                return Err(corrupt(generation, format!("page {slot}'s checksum does not match")));
            }
            let count = u16::from_le_bytes(page[20..22].try_into().expect("2"));
            rows +=
                parse_rows(&page[..used], count, self.meta.end_epoch, &mut visit).map_err(|detail| match detail {
                    RowsError::Bad(detail) => corrupt(generation, format!("page {slot}: {detail}")),
                    RowsError::Visit(error) => error,
                })?;
            slot += span;
        }
        Ok(rows)
    }

    /// Visits (table, key, tid, value) of every row.
    pub fn read_rows<B: PmBackend>(
        &self,
        pool: &Pool<B>,
        mut visit: impl FnMut(u32, &[u8], u64, &[u8]) -> DbResult<()>,
    ) -> DbResult<u64> {
        let mut rows = 0;
        for pages in &self.directory {
            rows += self.read_table(pool, pages, |key, tid, value| visit(pages.table, key, tid, value))?;
        }
        Ok(rows)
    }

    /// The directory entry of `table`, if the snapshot holds it.
    pub fn table(&self, table: u32) -> Option<&TablePages> {
        self.directory.iter().find(|pages| pages.table == table)
    }
}

enum RowsError {
    Bad(String),
    Visit(DbError),
}

fn parse_rows(
    page: &[u8],
    count: u16,
    end_epoch: u64,
    visit: &mut impl FnMut(&[u8], u64, &[u8]) -> DbResult<()>,
) -> Result<u64, RowsError> {
    let mut at = PAGE_HEADER;
    for _ in 0..count {
        let head = page.get(at..at + ROW_HEADER).ok_or_else(|| RowsError::Bad(format!("row at {at} is cut")))?;
        let key_len = u16::from_le_bytes(head[0..2].try_into().expect("2")) as usize;
        let value_len = half(head, 4) as usize;
        let tid = word(head, 8);
        if tid > record::MAX_TID || record::epoch_of_tid(tid) > end_epoch {
            return Err(RowsError::Bad(format!("TID {tid:#x} is beyond the snapshot's end epoch {end_epoch}")));
        }
        let key = page.get(at + ROW_HEADER..at + ROW_HEADER + key_len);
        let value = page.get(at + ROW_HEADER + key_len..at + ROW_HEADER + key_len + value_len);
        let (Some(key), Some(value)) = (key, value) else {
            return Err(RowsError::Bad(format!("row at {at} runs past the page's used bytes")));
        };
        visit(key, tid, value).map_err(RowsError::Visit)?;
        at += (ROW_HEADER + key_len + value_len).next_multiple_of(8);
    }
    if at != page.len() {
        return Err(RowsError::Bad(format!("{count} rows end at {at}, the page uses {}", page.len())));
    }
    Ok(count as u64)
}

/// Parses one snapshot page's bytes as recovery reads them; returns its
/// row count. For fuzzing; never panics.
pub fn parse_page(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < PAGE_HEADER || word(bytes, 0) != PAGE_MAGIC {
        return Err("page header is damaged".into());
    }
    let used = half(bytes, 24) as usize;
    if used < PAGE_HEADER || used > bytes.len() {
        return Err(format!("used bytes {used} outside the page"));
    }
    if half(bytes, 28) != page_crc(bytes, used) {
        return Err("page checksum mismatch".into());
    }
    let count = u16::from_le_bytes(bytes[20..22].try_into().expect("2"));
    parse_rows(&bytes[..used], count, record::MAX_EPOCH, &mut |_, _, _| Ok(())).map_err(|error| match error {
        RowsError::Bad(detail) => detail,
        RowsError::Visit(error) => error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_pm::{Direct, PmOptions};

    fn pool() -> Pool<Direct> {
        Pool::create_in_memory(4 << 20, 64 << 10, &PmOptions::default()).expect("pool")
    }

    fn tid(epoch: u64, n: u64) -> u64 {
        record::first_tid_of_epoch(epoch) + n
    }

    #[test]
    fn written_rows_read_back_in_order_across_pages_and_chunks() {
        let pool = pool();
        let mut writer = SnapshotWriter::new(&pool, 1).expect("writer");
        let mut expected = Vec::new();
        for table in [0u32, 3] {
            writer.begin_table(table).expect("table");
            for n in 0..600u64 {
                let key = format!("key{n:05}").into_bytes();
                // Mostly small rows, a few larger than a page.
                let value = vec![n as u8; if n % 97 == 5 { 9000 } else { 100 + (n % 50) as usize }];
                writer.row(&key, tid(3, n), &value).expect("row");
                expected.push((table, key, tid(3, n), value));
            }
        }
        writer.begin_table(7).expect("empty table");
        let (meta, index) = writer.install(4).expect("install");
        assert_eq!(meta.rows, 1200);
        assert_eq!(meta.end_epoch, 3);
        assert!(meta.chunks > 1, "the rows span several 64 KiB chunks");
        let snapshot = current_snapshot(&pool).expect("valid").expect("installed");
        assert_eq!(snapshot.meta.start_epoch, 4);
        assert_eq!(snapshot.table(7).map(|pages| pages.slots), Some(0));
        let mut found = Vec::new();
        snapshot
            .read_rows(&pool, |table, key, tid, value| {
                found.push((table, key.to_vec(), tid, value.to_vec()));
                Ok(())
            })
            .expect("read");
        assert_eq!(found, expected);
        // Every row's page, found by the index, holds its key.
        for (table, key, _, _) in &expected {
            let at = index.page_of(*table, key).expect("a page");
            let mut page = vec![0u8; PAGE_SIZE as usize];
            pool.backend().read(at, &mut page);
            let used = (half(&page, 24) as usize).min(page.len());
            assert!(page[..used].windows(key.len()).any(|window| window == key.as_slice()), "{table} {key:?}");
        }
        assert_eq!(index.page_of(0, b"a"), None, "below the first key");
    }

    #[test]
    fn a_new_generation_frees_the_old_one_and_damage_is_reported() {
        let pool = pool();
        let write = |generation: u64| {
            let mut writer = SnapshotWriter::new(&pool, generation).expect("writer");
            writer.begin_table(0).expect("table");
            writer.row(b"a", tid(1, 1), b"value").expect("row");
            writer.install(2).expect("install");
        };
        write(1);
        write(2);
        let chunks: Vec<_> =
            pool.owned_chunks().into_iter().filter(|(_, owner)| owner.kind() == SNAPSHOT_CHUNK_KIND).collect();
        assert_eq!(chunks.len(), 1, "generation 1 was freed");
        let snapshot = current_snapshot(&pool).expect("valid").expect("installed");
        // Damage the data page's row: its checksum no longer matches.
        let at = snapshot.slot_offset(&pool, 1) + PAGE_HEADER as u64 + ROW_HEADER as u64;
        pool.backend().write(at, b"b");
        let error = snapshot.read_rows(&pool, |_, _, _, _| Ok(())).expect_err("damage found");
        assert_eq!(error.damaged_structure(), Some(Structure::Checkpoint), "{error}");
        let mut page = vec![0u8; PAGE_SIZE as usize];
        pool.backend().read(snapshot.slot_offset(&pool, 1), &mut page);
        assert!(parse_page(&page).is_err());
    }
}
