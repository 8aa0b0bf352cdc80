//! Checkpoints of all tables into the pool, shared by the log-based engines.
//!
//! A checkpoint of generation `g` is a chain of chunks owned by
//! `ChunkOwner::compose(CHECKPOINT_CHUNK_KIND, g, index)`:
//!
//! ```text
//! chunk header (64 B): magic u64 "PMTXCKPT", generation u64, index u64,
//!                      used bytes u64, start epoch u64, end epoch u64,
//!                      chunk count u64 (chunk 0 only), crc32 at 56 of 0..56
//! rows, 8-byte aligned: u32 total length, u32 crc32 of bytes 8..total,
//!                      u32 table, u16 key length, u16 reserved, u64 tid,
//!                      u32 value length, u32 reserved, key, value, padding
//! ```
//!
//! The checkpoint becomes *the* checkpoint by one persisted 8-byte store: the
//! pool root `ckpt.generation` = g, written after every chunk (and chunk 0's
//! header, last) is durable. Chunks of any other generation are garbage,
//! freed at recovery or right after the switch.
//!
//! Consistency: the rows are read with stable (seqlock) reads while
//! transactions run, so the image is fuzzy; every row carries its TID and
//! recovery replays the log from the checkpoint's start epoch, applying a
//! logged write only if its TID is newer (a per-key Thomas write rule). Every
//! transaction of an epoch below the start epoch had installed before the
//! scan began, so the checkpoint holds its effects (or newer ones).
//!
//! Explained in ARCHITECTURE.md §6 and docs/format.md ("Checkpoint chunk").

use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::storage::record::{self, Record};
use crate::storage::table::Table;
use pmtx_pm::{ChunkId, ChunkOwner, PmBackend, Pool, PoolError, Structure};

/// Chunk-owner kind of checkpoint chunks.
pub const CHECKPOINT_CHUNK_KIND: u16 = 0x20;
/// Root holding the current checkpoint generation (absent = none).
pub const CHECKPOINT_ROOT: &str = "ckpt.generation";
const CHECKPOINT_MAGIC: u64 = u64::from_le_bytes(*b"PMTXCKPT");
const CHUNK_HEADER: u64 = 64;
const ROW_HEADER: usize = 32;
const GENERATION_MASK: u64 = 0xFF_FFFF;

/// What a finished checkpoint covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// Generation.
    pub generation: u64,
    /// Epoch at which the scan began: replay the log from here.
    pub start_epoch: u64,
    /// Highest epoch of a row in it.
    pub end_epoch: u64,
    /// Rows written.
    pub rows: u64,
    /// Chunks used.
    pub chunks: u64,
}

fn owner(generation: u64, index: u64) -> DbResult<ChunkOwner> {
    if index > u16::MAX as u64 {
        return Err(DbError::OutOfSpace("checkpoint needs more than 65536 chunks".into()));
    }
    Ok(ChunkOwner::compose(CHECKPOINT_CHUNK_KIND, (generation & GENERATION_MASK) as u32, index as u16))
}

fn full(error: PoolError) -> DbError {
    match error {
        PoolError::Full { .. } => DbError::OutOfSpace(format!("no chunk left for a checkpoint: {error}")),
        other => DbError::Pool(other),
    }
}

struct ChunkWriter<'p, B: PmBackend> {
    pool: &'p Pool<B>,
    generation: u64,
    chunks: Vec<(ChunkId, u64)>,
    position: u64,
    buffer: Vec<u8>,
}

impl<'p, B: PmBackend> ChunkWriter<'p, B> {
    fn current_offset(&self) -> u64 {
        self.pool.chunk_offset(self.chunks.last().expect("a chunk").0)
    }

    fn new_chunk(&mut self) -> DbResult<()> {
        if let Some(last) = self.chunks.last_mut() {
            last.1 = self.position;
        }
        let index = self.chunks.len() as u64;
        let chunk = self.pool.allocate_chunk(owner(self.generation, index)?, false).map_err(full)?;
        self.chunks.push((chunk, 0));
        self.position = CHUNK_HEADER;
        Ok(())
    }

    fn row(&mut self, table: u32, key: &[u8], tid: u64, value: &[u8]) -> DbResult<()> {
        let buffer = &mut self.buffer;
        buffer.clear();
        buffer.resize(ROW_HEADER, 0);
        buffer[8..12].copy_from_slice(&table.to_le_bytes());
        buffer[12..14].copy_from_slice(&(key.len() as u16).to_le_bytes());
        buffer[16..24].copy_from_slice(&tid.to_le_bytes());
        buffer[24..28].copy_from_slice(&(value.len() as u32).to_le_bytes());
        buffer.extend_from_slice(key);
        buffer.extend_from_slice(value);
        buffer.resize(buffer.len().next_multiple_of(8), 0);
        let total = buffer.len() as u32;
        buffer[0..4].copy_from_slice(&total.to_le_bytes());
        let crc = crc32fast::hash(&buffer[8..]);
        buffer[4..8].copy_from_slice(&crc.to_le_bytes());
        let chunk_size = self.pool.geometry().chunk_size;
        if CHUNK_HEADER + total as u64 > chunk_size {
            return Err(DbError::OutOfSpace(format!("a row of {total} bytes does not fit a {chunk_size}-byte chunk")));
        }
        if self.position + total as u64 > chunk_size {
            self.new_chunk()?;
        }
        let at = self.current_offset() + self.position;
        self.pool.backend().write_non_temporal(at, &self.buffer);
        self.position += total as u64;
        Ok(())
    }

    fn header(&self, index: usize, used: u64, meta: &CheckpointMeta) -> [u8; CHUNK_HEADER as usize] {
        let mut header = [0u8; CHUNK_HEADER as usize];
        for (at, value) in [
            (0, CHECKPOINT_MAGIC),
            (8, self.generation),
            (16, index as u64),
            (24, used),
            (32, meta.start_epoch),
            (40, meta.end_epoch),
            (48, if index == 0 { self.chunks.len() as u64 } else { 0 }),
        ] {
            header[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        let crc = crc32fast::hash(&header[0..56]);
        header[56..60].copy_from_slice(&crc.to_le_bytes());
        header
    }
}

/// Writes a checkpoint of `tables` as generation `generation` and makes it
/// current. `wait_durable(epoch)` must return once every commit of epochs
/// up to `epoch` is durable in the log (so the checkpoint never holds a
/// value the log could still lose).
pub fn write_checkpoint<B: PmBackend>(
    pool: &Pool<B>,
    tables: &[Table],
    epochs: &Epochs,
    generation: u64,
    start_epoch: u64,
    wait_durable: impl FnOnce(u64) -> DbResult<()>,
) -> DbResult<CheckpointMeta> {
    let mut writer = ChunkWriter { pool, generation, chunks: Vec::new(), position: 0, buffer: Vec::new() };
    writer.new_chunk()?;
    let mut meta = CheckpointMeta { generation, start_epoch, ..Default::default() };
    let mut value = Vec::new();
    let mut failure = None;
    for table in tables {
        // Announced as a background reader while rows are read, so no value
        // buffer or row it may still reach is freed under it; one pin per
        // table, so a long checkpoint does not hold reclamation back.
        let _pin = epochs.pin_background();
        table.for_each_row(|key, record: &Record| {
            if failure.is_some() {
                return;
            }
            let Some(snapshot) = stable_copy(record, &mut value) else {
                failure = Some(DbError::Corrupt("a record stayed locked during the checkpoint".into()));
                return;
            };
            if snapshot.word == record::REMOVED {
                // Unlinked by reclamation after the scan read its leaf: an
                // absent row whose delete is durable (reclamation waits for
                // that), with no TID of its own.
                return;
            }
            // A deleted row is left out, but its delete counts for the
            // epoch the log must be durable up to before the checkpoint
            // becomes current: else a checkpoint taken right after a
            // delete-only transaction could hold that delete while its epoch
            // is not durable, and a crash would lose the row although the
            // delete was never acknowledged.
            let tid = record::tid_of(snapshot.word);
            meta.end_epoch = meta.end_epoch.max(record::epoch_of_tid(tid));
            if snapshot.is_absent() {
                return;
            }
            meta.rows += 1;
            if let Err(error) = writer.row(table.id().0, key, tid, &value) {
                failure = Some(error);
            }
        });
    }
    if let Some(error) = failure {
        abandon(pool, &writer.chunks);
        return Err(error);
    }
    if let Some(last) = writer.chunks.last_mut() {
        last.1 = writer.position;
    }
    meta.chunks = writer.chunks.len() as u64;
    if let Err(error) = wait_durable(meta.end_epoch) {
        abandon(pool, &writer.chunks);
        return Err(error);
    }
    let backend = pool.backend();
    // Rows went out non-temporally; headers of chunks 1.. now, chunk 0's
    // header after everything else is durable.
    for (index, (chunk, used)) in writer.chunks.iter().enumerate().skip(1) {
        backend.write(pool.chunk_offset(*chunk), &writer.header(index, *used, &meta));
        backend.flush(pool.chunk_offset(*chunk), CHUNK_HEADER);
    }
    backend.fence();
    let (first, used) = writer.chunks[0];
    backend.write(pool.chunk_offset(first), &writer.header(0, used, &meta));
    backend.persist(pool.chunk_offset(first), CHUNK_HEADER);
    backend.crash_point("checkpoint complete, before root switch");
    // IMPORTANT: the commit point of the checkpoint.
    pool.set_root(CHECKPOINT_ROOT, generation)?;
    backend.crash_point("checkpoint root switched");
    free_other_generations(pool, generation);
    Ok(meta)
}

/// A stable read of `record` while transactions run. A committing writer
/// holds the record's lock only briefly, but it may be descheduled while it
/// does (more threads than cores), which outlasts one bounded `copy_value`;
/// that is contention, not corruption, so retry (yielding) for a long while.
fn stable_copy(record: &Record, value: &mut Vec<u8>) -> Option<record::Snapshot> {
    // A committer holds a row's lock only while it installs, but on a
    // loaded machine (the crash simulator capturing states, more threads
    // than cores) it can be descheduled for seconds: the bound only tells a
    // lock that is never released from a slow one, and the checkpoint
    // sleeps between looks so the holder gets the core.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for attempt in 0u32.. {
        if let Some(snapshot) = record.copy_value(value) {
            return Some(snapshot);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        if attempt < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    None
}

fn abandon<B: PmBackend>(pool: &Pool<B>, chunks: &[(ChunkId, u64)]) {
    for (chunk, _) in chunks {
        pool.free_chunk(*chunk);
    }
}

/// Frees every checkpoint chunk not of `keep` (old or abandoned checkpoints).
pub fn free_other_generations<B: PmBackend>(pool: &Pool<B>, keep: u64) {
    for (chunk, chunk_owner) in pool.owned_chunks() {
        if chunk_owner.kind() == CHECKPOINT_CHUNK_KIND && chunk_owner.group() as u64 != keep & GENERATION_MASK {
            pool.free_chunk(chunk);
        }
    }
}

/// The current checkpoint's metadata, validated; `None` if there is none.
pub fn current_checkpoint<B: PmBackend>(pool: &Pool<B>) -> DbResult<Option<(CheckpointMeta, Vec<ChunkId>)>> {
    let Some(generation) = pool.root(CHECKPOINT_ROOT) else {
        return Ok(None);
    };
    let mut chunks: Vec<(u16, ChunkId)> = pool
        .owned_chunks()
        .into_iter()
        .filter(|(_, o)| o.kind() == CHECKPOINT_CHUNK_KIND && o.group() as u64 == generation & GENERATION_MASK)
        .map(|(chunk, o)| (o.thread(), chunk))
        .collect();
    chunks.sort();
    let corrupt =
        |detail: String| DbError::corrupt(Structure::Checkpoint, format!("generation {generation}: {detail}"));
    if generation == u64::MAX {
        // Generations count checkpoints; the next one could not be numbered.
        return Err(corrupt("the generation is out of range".into()));
    }
    let Some(&(_, first)) = chunks.first() else {
        return Err(corrupt("no chunks found".into()));
    };
    let header = read_header(pool, first).ok_or_else(|| corrupt("chunk 0 header is damaged".into()))?;
    if header.generation != generation || header.chunk_count != chunks.len() as u64 {
        return Err(corrupt(format!(
            "header says generation {} with {} chunks, found {} chunks",
            header.generation,
            header.chunk_count,
            chunks.len()
        )));
    }
    // Epochs feed TIDs and recovery's next epoch: bound them before any
    // arithmetic (a damaged header may hold any value under a valid CRC).
    if header.start_epoch > record::MAX_EPOCH || header.end_epoch > record::MAX_EPOCH {
        return Err(corrupt(format!(
            "header claims epochs {}..{}, beyond the largest epoch {}",
            header.start_epoch,
            header.end_epoch,
            record::MAX_EPOCH
        )));
    }
    for (position, (index, _)) in chunks.iter().enumerate() {
        if *index as usize != position {
            return Err(corrupt(format!("chunk {position} is missing")));
        }
    }
    let meta = CheckpointMeta {
        generation,
        start_epoch: header.start_epoch,
        end_epoch: header.end_epoch,
        rows: 0,
        chunks: chunks.len() as u64,
    };
    Ok(Some((meta, chunks.into_iter().map(|(_, c)| c).collect())))
}

struct ChunkHeader {
    generation: u64,
    index: u64,
    used: u64,
    start_epoch: u64,
    end_epoch: u64,
    chunk_count: u64,
}

fn read_header<B: PmBackend>(pool: &Pool<B>, chunk: ChunkId) -> Option<ChunkHeader> {
    let mut header = [0u8; CHUNK_HEADER as usize];
    pool.backend().read(pool.chunk_offset(chunk), &mut header);
    parse_chunk_header(&header)
}

/// The header of a checkpoint chunk (its first 64 bytes), if magic and CRC
/// hold.
fn parse_chunk_header(header: &[u8]) -> Option<ChunkHeader> {
    let header = header.get(..CHUNK_HEADER as usize)?;
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8"));
    if word(0) != CHECKPOINT_MAGIC
        || u32::from_le_bytes(header[56..60].try_into().ok()?) != crc32fast::hash(&header[0..56])
    {
        return None;
    }
    Some(ChunkHeader {
        generation: word(8),
        index: word(16),
        used: word(24),
        start_epoch: word(32),
        end_epoch: word(40),
        chunk_count: word(48),
    })
}

/// (table, key, tid, value) of a checkpoint row.
type Row<'a> = (u32, &'a [u8], u64, &'a [u8]);

/// A checkpoint row, whole (`bytes`: its `total` bytes): (table, key, tid,
/// value), checked against its CRC and the checkpoint's end epoch.
fn parse_row(bytes: &[u8], end_epoch: u64) -> Result<Row<'_>, String> {
    if bytes.len() < ROW_HEADER {
        return Err(format!("a row of {} bytes is shorter than its header", bytes.len()));
    }
    if crc32fast::hash(&bytes[8..]) != u32::from_le_bytes(bytes[4..8].try_into().expect("4")) {
        return Err("row checksum mismatch".into());
    }
    let table = u32::from_le_bytes(bytes[8..12].try_into().expect("4"));
    let key_len = u16::from_le_bytes(bytes[12..14].try_into().expect("2")) as usize;
    let tid = u64::from_le_bytes(bytes[16..24].try_into().expect("8"));
    let value_len = u32::from_le_bytes(bytes[24..28].try_into().expect("4")) as usize;
    // Every row's TID is of an epoch at most the checkpoint's end epoch
    // (the writer takes the maximum over the rows it writes).
    if tid > record::MAX_TID || record::epoch_of_tid(tid) > end_epoch {
        return Err(format!("TID {tid:#x} is beyond the checkpoint's end epoch {end_epoch}"));
    }
    let key = bytes.get(ROW_HEADER..ROW_HEADER + key_len).ok_or("row key out of bounds")?;
    let value = bytes.get(ROW_HEADER + key_len..ROW_HEADER + key_len + value_len).ok_or("row value out of bounds")?;
    Ok((table, key, tid, value))
}

/// Parses one checkpoint chunk's bytes as recovery reads them (header,
/// then every row up to its used bytes); returns the rows' count. For
/// fuzzing; never panics.
pub fn parse_chunk(bytes: &[u8]) -> Result<u64, String> {
    let header = parse_chunk_header(bytes).ok_or("chunk header is damaged")?;
    if header.used > bytes.len() as u64 || header.used < CHUNK_HEADER {
        return Err(format!("used bytes {} outside the chunk", header.used));
    }
    if header.start_epoch > record::MAX_EPOCH || header.end_epoch > record::MAX_EPOCH {
        return Err("epochs out of range".into());
    }
    let mut at = CHUNK_HEADER;
    let mut rows = 0;
    while at < header.used {
        let head = bytes.get(at as usize..at as usize + 4).ok_or("row header cut")?;
        let total = u32::from_le_bytes(head.try_into().expect("4")) as u64;
        if total < ROW_HEADER as u64 || !total.is_multiple_of(8) || at + total > header.used {
            return Err(format!("bad row length at {at}"));
        }
        parse_row(&bytes[at as usize..(at + total) as usize], header.end_epoch)?;
        rows += 1;
        at += total;
    }
    Ok(rows)
}

/// Visits (table, key, tid, value) of every row of a checkpoint.
pub fn read_rows<B: PmBackend>(
    pool: &Pool<B>,
    chunks: &[ChunkId],
    mut visit: impl FnMut(u32, &[u8], u64, &[u8]) -> DbResult<()>,
) -> DbResult<u64> {
    let chunk_size = pool.geometry().chunk_size;
    let mut rows = 0;
    let mut bytes = Vec::new();
    let mut first = None;
    for (position, chunk) in chunks.iter().enumerate() {
        let header = read_header(pool, *chunk)
            .ok_or_else(|| DbError::corrupt(Structure::Checkpoint, format!("chunk {position} header is damaged")))?;
        if header.index != position as u64 || header.used > chunk_size || header.used < CHUNK_HEADER {
            return Err(DbError::corrupt(Structure::Checkpoint, format!("chunk {position} header is inconsistent")));
        }
        // Every chunk of a checkpoint carries the same generation and epochs.
        let first = *first.get_or_insert((header.generation, header.start_epoch, header.end_epoch));
        if (header.generation, header.start_epoch, header.end_epoch) != first {
            return Err(DbError::corrupt(
                Structure::Checkpoint,
                format!(
                    "checkpoint chunk {position} header says generation {} with epochs {}..{}, chunk 0 generation {} \
                 with epochs {}..{}",
                    header.generation, header.start_epoch, header.end_epoch, first.0, first.1, first.2
                ),
            ));
        }
        let base = pool.chunk_offset(*chunk);
        let mut at = CHUNK_HEADER;
        while at < header.used {
            let mut head = [0u8; 8];
            pool.backend().read(base + at, &mut head);
            let total = u32::from_le_bytes(head[0..4].try_into().expect("4")) as u64;
            if total < ROW_HEADER as u64 || !total.is_multiple_of(8) || at + total > header.used {
                return Err(DbError::corrupt(
                    Structure::Checkpoint,
                    format!("chunk {position}: bad row length at {at}"),
                ));
            }
            bytes.resize(total as usize, 0);
            pool.backend().read(base + at, &mut bytes);
            let (table, key, tid, value) = parse_row(&bytes, header.end_epoch).map_err(|detail| {
                DbError::corrupt(Structure::Checkpoint, format!("chunk {position}, row at {at}: {detail}"))
            })?;
            visit(table, key, tid, value)?;
            rows += 1;
            at += total;
        }
    }
    Ok(rows)
}
