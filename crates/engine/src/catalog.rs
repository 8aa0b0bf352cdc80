//! The stored catalog: the pool keeps its engine, protocol and table list
//! (names, kinds, limits, partition prefixes, secondary indexes by name), so
//! that a program can reopen a pool from the file alone
//! ([`crate::Database::open_existing`]) and an open with a declared schema
//! is checked table by table, naming each difference (the check runs where
//! engines open their pools, `crate::engines::check_identity`; this module
//! is the format and the comparison, below the options that read it).
//!
//! Layout (docs/format.md, "Stored catalog"): one chunk owned by
//! [`CATALOG_CHUNK_KIND`], split into two halves. Each half holds a
//! 32-byte header and the encoded catalog:
//!
//! ```text
//! 0   magic "PMTXCATL"
//! 8   format version (u32)        12  payload length (u32)
//! 16  generation (u64)
//! 24  CRC-32 of bytes 0..24 and the payload (u32)    28  zero (u32)
//! 32  payload
//! ```
//!
//! A write goes to the half not holding the newest generation, is flushed
//! and fenced, and only then counts: a torn write leaves a half whose CRC
//! fails and the other half, the previous catalog, stays the newest valid
//! one. The root [`CATALOG_WRITTEN_ROOT`] is set once the first copy is
//! durable, so a pool whose catalog chunk holds no valid half is damaged
//! (not merely a pool that crashed while creating its catalog).

use crate::cc::CcProtocol;
use crate::engine::EngineKind;
use crate::error::{DbError, DbResult};
use crate::schema::{PrimaryIndexKind, SecondaryIndexSchema, TableSchema};
use pmtx_pm::{ChunkOwner, PmBackend, Pool, Structure};

/// Chunk-table kind of the catalog chunk ("CT").
pub const CATALOG_CHUNK_KIND: u16 = 0x4354;
/// Root set to 1 once the first catalog copy is durable.
pub const CATALOG_WRITTEN_ROOT: &str = "catalog.written";
/// Format version this build writes and reads.
pub const CATALOG_FORMAT_VERSION: u32 = 1;

const MAGIC: [u8; 8] = *b"PMTXCATL";
const HEADER_LEN: usize = 32;

/// What a pool stores about itself.
#[derive(Clone, Debug)]
pub struct StoredCatalog {
    /// The engine that owns the pool.
    pub engine: EngineKind,
    /// The concurrency-control protocol of the last open that wrote the
    /// catalog.
    pub protocol: CcProtocol,
    /// The tables, in table-id order. Stored secondary indexes have no key
    /// function: register one per index by name
    /// ([`crate::DbOptions::secondary_key`]).
    pub tables: Vec<TableSchema>,
    /// Format version of the stored copy.
    pub format_version: u32,
    /// How many times the catalog was written (creation counts as one).
    pub generation: u64,
}

/// Reads the newest valid catalog copy; `Ok(None)` if the pool has none
/// yet (a pool of an earlier build, or a fresh one).
pub fn read<B: PmBackend>(pool: &Pool<B>) -> DbResult<Option<StoredCatalog>> {
    let Some(chunk) = catalog_chunk(pool) else {
        return if pool.root(CATALOG_WRITTEN_ROOT).is_some() {
            Err(DbError::corrupt(Structure::Catalog, "the pool records a written catalog but holds no catalog chunk"))
        } else {
            Ok(None)
        };
    };
    let half = pool.geometry().chunk_size / 2;
    let base = pool.chunk_offset(chunk);
    let mut newest: Option<(u64, u32, Vec<u8>)> = None;
    let mut newer_format = None;
    for copy in 0..2 {
        match read_copy(pool, base + copy * half, half) {
            CopyState::Valid { generation, version, payload } => {
                if version > CATALOG_FORMAT_VERSION {
                    newer_format = Some(version);
                } else if newest.as_ref().is_none_or(|(best, _, _)| generation > *best) {
                    newest = Some((generation, version, payload));
                }
            }
            CopyState::Invalid => {}
        }
    }
    if let Some(version) = newer_format {
        // Not damage (the copy's checksum holds): untyped, as any refusal
        // of a format this build does not know.
        return Err(DbError::Corrupt(format!(
            "catalog: format version {version} was written by a newer pmtx (this build reads up to {CATALOG_FORMAT_VERSION})"
        )));
    }
    match newest {
        Some((generation, version, payload)) => {
            let mut catalog = decode(&payload)?;
            catalog.generation = generation;
            catalog.format_version = version;
            Ok(Some(catalog))
        }
        None if pool.root(CATALOG_WRITTEN_ROOT).is_some() => {
            Err(DbError::corrupt(Structure::Catalog, "both copies are damaged (checksum or header mismatch)"))
        }
        // The chunk was claimed but the first copy never became durable.
        None => Ok(None),
    }
}

/// Reads the catalog of the pool file at `path` without opening it (an
/// unclean pool stays unclean, nothing is written); `Ok(None)` if it
/// stores none.
pub fn read_file(path: &std::path::Path) -> DbResult<Option<StoredCatalog>> {
    let (_, _, stored) = Pool::<pmtx_pm::Direct>::inspect_with(path, &pmtx_pm::PmOptions::default(), read)?;
    stored
}

/// Writes `engine`, `protocol` and `tables` as the pool's catalog (crash
/// atomic: the previous copy stays valid until this one is durable).
pub fn write<B: PmBackend>(
    pool: &Pool<B>,
    engine: EngineKind,
    protocol: CcProtocol,
    tables: &[TableSchema],
) -> DbResult<()> {
    let payload = encode(engine, protocol, tables);
    let half = pool.geometry().chunk_size / 2;
    if (HEADER_LEN + payload.len()) as u64 > half {
        return Err(DbError::InvalidConfig(format!(
            "the table list needs {} bytes of catalog, more than the {half} bytes half a chunk holds; use larger chunks",
            HEADER_LEN + payload.len()
        )));
    }
    let chunk = match catalog_chunk(pool) {
        Some(chunk) => chunk,
        None => {
            pool.allocate_chunk(ChunkOwner::compose(CATALOG_CHUNK_KIND, 0, 0), true).map_err(|error| match error {
                pmtx_pm::PoolError::Full { .. } => {
                    DbError::OutOfSpace(format!("no free chunk for the table catalog ({error})"))
                }
                other => DbError::Pool(other),
            })?
        }
    };
    let base = pool.chunk_offset(chunk);
    // The copy to overwrite: the older valid one, or an invalid one.
    let states = [read_copy(pool, base, half), read_copy(pool, base + half, half)];
    let generation_of = |state: &CopyState| match state {
        CopyState::Valid { generation, .. } => Some(*generation),
        CopyState::Invalid => None,
    };
    let (target, generation) = match (generation_of(&states[0]), generation_of(&states[1])) {
        (None, None) => (0, 1),
        (Some(g), None) => (1, g + 1),
        (None, Some(g)) => (0, g + 1),
        (Some(a), Some(b)) if a >= b => (1, a + 1),
        (Some(_), Some(b)) => (0, b + 1),
    };
    let mut header = [0u8; HEADER_LEN];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&CATALOG_FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[16..24].copy_from_slice(&generation.to_le_bytes());
    let crc = copy_crc(&header, &payload);
    header[24..28].copy_from_slice(&crc.to_le_bytes());
    let offset = base + target * half;
    let backend = pool.backend();
    backend.write(offset + HEADER_LEN as u64, &payload);
    backend.write(offset, &header);
    backend.flush(offset, (HEADER_LEN + payload.len()) as u64);
    backend.fence();
    if pool.root(CATALOG_WRITTEN_ROOT).is_none() {
        pool.set_root(CATALOG_WRITTEN_ROOT, 1)?;
    }
    Ok(())
}

/// Names every difference between the stored tables and the declared ones;
/// empty if they agree. Declared tables past the end of the stored list
/// are reported separately (they can be added).
pub(crate) fn differences(stored: &[TableSchema], declared: &[TableSchema]) -> (Vec<String>, Vec<String>) {
    let mut differences = Vec::new();
    for (position, stored) in stored.iter().enumerate() {
        let Some(declared) = declared.get(position) else {
            differences.push(format!("table `{}` (id {position}) is in the pool but not declared", stored.name));
            continue;
        };
        if stored.name != declared.name {
            differences.push(format!(
                "table id {position} is `{}` in the pool but `{}` is declared there",
                stored.name, declared.name
            ));
            continue;
        }
        let name = &stored.name;
        let mut field = |what: &str, in_pool: String, given: String| {
            if in_pool != given {
                differences.push(format!("table `{name}`: {what} is {in_pool} in the pool, {given} declared"));
            }
        };
        field("the primary index", kind_name(stored.primary).into(), kind_name(declared.primary).into());
        field("max_value_len", stored.max_value_len.to_string(), declared.max_value_len.to_string());
        field("max_key_len", stored.max_key_len.to_string(), declared.max_key_len.to_string());
        field(
            "the partition prefix",
            format!("{:?}", stored.partition_prefix),
            format!("{:?}", declared.partition_prefix),
        );
        let names = |table: &TableSchema| table.secondaries.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        field("the secondary index list", format!("{:?}", names(stored)), format!("{:?}", names(declared)));
    }
    let added = declared.iter().skip(stored.len()).map(|table| table.name.clone()).collect();
    (differences, added)
}

fn kind_name(kind: PrimaryIndexKind) -> &'static str {
    match kind {
        PrimaryIndexKind::Ordered => "ordered",
        PrimaryIndexKind::Hash => "hash",
    }
}

fn catalog_chunk<B: PmBackend>(pool: &Pool<B>) -> Option<pmtx_pm::ChunkId> {
    pool.owned_chunks().into_iter().find(|(_, owner)| owner.kind() == CATALOG_CHUNK_KIND).map(|(chunk, _)| chunk)
}

enum CopyState {
    Valid { generation: u64, version: u32, payload: Vec<u8> },
    Invalid,
}

fn read_copy<B: PmBackend>(pool: &Pool<B>, offset: u64, half: u64) -> CopyState {
    let mut header = [0u8; HEADER_LEN];
    pool.backend().read(offset, &mut header);
    if header[0..8] != MAGIC {
        return CopyState::Invalid;
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes")) as u64;
    let generation = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(header[24..28].try_into().expect("4 bytes"));
    if len > half - HEADER_LEN as u64 {
        return CopyState::Invalid;
    }
    let mut payload = vec![0u8; len as usize];
    pool.backend().read(offset + HEADER_LEN as u64, &mut payload);
    if copy_crc(&header, &payload) != crc {
        return CopyState::Invalid;
    }
    CopyState::Valid { generation, version, payload }
}

fn copy_crc(header: &[u8; HEADER_LEN], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[0..24]);
    hasher.update(payload);
    hasher.finalize()
}

fn encode(engine: EngineKind, protocol: CcProtocol, tables: &[TableSchema]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&engine.code().to_le_bytes());
    put_str(&mut out, protocol.name());
    out.extend_from_slice(&(tables.len() as u32).to_le_bytes());
    for table in tables {
        put_str(&mut out, &table.name);
        out.extend_from_slice(&(table.max_value_len as u64).to_le_bytes());
        out.extend_from_slice(&(table.max_key_len as u64).to_le_bytes());
        out.push(match table.primary {
            PrimaryIndexKind::Ordered => 0,
            PrimaryIndexKind::Hash => 1,
        });
        match table.partition_prefix {
            None => out.push(0),
            Some(len) => {
                out.push(1);
                out.extend_from_slice(&(len as u64).to_le_bytes());
            }
        }
        out.extend_from_slice(&(table.secondaries.len() as u32).to_le_bytes());
        for secondary in &table.secondaries {
            put_str(&mut out, &secondary.name);
        }
    }
    out
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// A bounds-checked reader of an encoded catalog: a copy whose CRC matches
/// but whose contents do not parse is reported, never trusted.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> DbResult<&'a [u8]> {
        if self.bytes.len() < len {
            return Err(DbError::corrupt(Structure::Catalog, "the encoded table list ends early"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self) -> DbResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> DbResult<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> DbResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn size(&mut self) -> DbResult<usize> {
        usize::try_from(self.u64()?)
            .map_err(|_| DbError::corrupt(Structure::Catalog, "a size does not fit this machine"))
    }
    fn string(&mut self) -> DbResult<String> {
        let len = self.u32()? as usize;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| DbError::corrupt(Structure::Catalog, "a name is not UTF-8"))
    }
}

fn decode(bytes: &[u8]) -> DbResult<StoredCatalog> {
    let mut reader = Reader { bytes };
    let code = reader.u64()?;
    let engine = EngineKind::from_code(code)
        .ok_or_else(|| DbError::corrupt(Structure::Catalog, format!("unknown engine code {code}")))?;
    let protocol_name = reader.string()?;
    let protocol = CcProtocol::ALL
        .into_iter()
        .find(|protocol| protocol.name() == protocol_name)
        .ok_or_else(|| DbError::corrupt(Structure::Catalog, format!("unknown protocol `{protocol_name}`")))?;
    let count = reader.u32()?;
    let mut tables = Vec::new();
    for _ in 0..count {
        let name = reader.string()?;
        let max_value_len = reader.size()?;
        let max_key_len = reader.size()?;
        let primary = match reader.u8()? {
            0 => PrimaryIndexKind::Ordered,
            1 => PrimaryIndexKind::Hash,
            other => {
                return Err(DbError::corrupt(
                    Structure::Catalog,
                    format!("table `{name}` has unknown index kind {other}"),
                ))
            }
        };
        let partition_prefix = match reader.u8()? {
            0 => None,
            1 => Some(reader.size()?),
            other => {
                return Err(DbError::corrupt(
                    Structure::Catalog,
                    format!("table `{name}` has a bad partition flag {other}"),
                ))
            }
        };
        let secondary_count = reader.u32()?;
        let mut secondaries = Vec::new();
        for _ in 0..secondary_count {
            secondaries.push(SecondaryIndexSchema::unregistered(reader.string()?));
        }
        tables.push(TableSchema { name, max_value_len, max_key_len, primary, secondaries, partition_prefix });
    }
    if !reader.bytes.is_empty() {
        return Err(DbError::corrupt(Structure::Catalog, "bytes left after the table list"));
    }
    Ok(StoredCatalog { engine, protocol, tables, format_version: 0, generation: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_pm::{PmOptions, Sim};

    fn schema() -> Vec<TableSchema> {
        vec![
            TableSchema::hashed("accounts").max_value_len(8),
            TableSchema::ordered("orders").partitioned_by_prefix(2).secondary("by_customer", |_, value| value.to_vec()),
        ]
    }

    fn pool() -> Pool<Sim> {
        Pool::create_in_memory(8 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &PmOptions::default()).unwrap()
    }

    #[test]
    fn a_written_catalog_reads_back_with_its_generation() {
        let pool = pool();
        assert!(read(&pool).unwrap().is_none());
        write(&pool, EngineKind::Zen, CcProtocol::default(), &schema()).unwrap();
        let stored = read(&pool).unwrap().unwrap();
        assert_eq!((stored.engine, stored.generation, stored.format_version), (EngineKind::Zen, 1, 1));
        assert_eq!(differences(&stored.tables, &schema()), (vec![], vec![]));
        assert!(!stored.tables[1].secondaries[0].is_registered());
        let mut more = schema();
        more.push(TableSchema::ordered("audit"));
        write(&pool, EngineKind::Zen, CcProtocol::default(), &more).unwrap();
        let stored = read(&pool).unwrap().unwrap();
        assert_eq!(stored.generation, 2);
        assert_eq!(stored.tables.len(), 3);
    }

    #[test]
    fn differences_name_each_table_and_field() {
        let mut declared = schema();
        declared[0].max_value_len = 16;
        declared[1].secondaries.clear();
        declared.push(TableSchema::ordered("audit"));
        let (differences, added) = differences(&schema(), &declared);
        assert_eq!(added, vec!["audit".to_string()]);
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(differences[0].contains("`accounts`: max_value_len is 8 in the pool, 16 declared"), "{differences:?}");
        assert!(differences[1].contains("`orders`: the secondary index list"), "{differences:?}");
        let (missing, _) = super::differences(&schema(), &schema()[..1]);
        assert!(missing[0].contains("`orders` (id 1) is in the pool but not declared"), "{missing:?}");
    }

    #[test]
    fn a_torn_newer_copy_leaves_the_older_one_in_force() {
        let pool = pool();
        write(&pool, EngineKind::GroupCommit, CcProtocol::default(), &schema()).unwrap();
        let mut more = schema();
        more.push(TableSchema::ordered("audit"));
        write(&pool, EngineKind::GroupCommit, CcProtocol::default(), &more).unwrap();
        // Damage the newer copy (generation 2, in the second half).
        let chunk = catalog_chunk(&pool).unwrap();
        let second = pool.chunk_offset(chunk) + pool.geometry().chunk_size / 2;
        pool.backend().write(second + HEADER_LEN as u64 + 3, &[0xFF]);
        let stored = read(&pool).unwrap().unwrap();
        assert_eq!((stored.generation, stored.tables.len()), (1, 2), "the older copy is in force");
        // Both damaged: a typed error naming the catalog.
        pool.backend().write(pool.chunk_offset(chunk) + HEADER_LEN as u64 + 3, &[0xFF]);
        match read(&pool) {
            Err(error @ DbError::CorruptStructure { .. }) => {
                assert_eq!(error.damaged_structure(), Some(Structure::Catalog), "{error}")
            }
            other => panic!("expected a damaged catalog, got {other:?}"),
        }
    }

    #[test]
    fn every_crash_image_of_adding_a_table_holds_the_old_or_the_new_catalog() {
        // Crash states at every fence of the first catalog write and of the
        // write that adds a table; every image the media model allows must
        // read back as a whole catalog, old or new, never an error.
        let pool = pool();
        let backend = pool.backend();
        backend.set_capture(pmtx_pm::sim::CapturePolicy {
            every_nth: 1,
            random_per_million: 0,
            at_labels_only: false,
            max_states: 64,
        });
        write(&pool, EngineKind::Zen, CcProtocol::default(), &schema()).unwrap();
        let first = backend.take_crash_states();
        let mut more = schema();
        more.push(TableSchema::ordered("audit"));
        write(&pool, EngineKind::Zen, CcProtocol::default(), &more).unwrap();
        let second = backend.take_crash_states();
        assert!(!first.is_empty() && !second.is_empty(), "the writes fence");
        let mut images = 0;
        for (states, allowed) in [(&first, [0usize, 2]), (&second, [2, 3])] {
            for state in states.iter() {
                for image in state.images(7, pmtx_pm::sim::ImageBudget::default()) {
                    images += 1;
                    let crashed = Pool::<Sim>::open_image(&image.bytes, &PmOptions::default()).unwrap();
                    let tables = match read(&crashed) {
                        Ok(stored) => stored.map_or(0, |stored| stored.tables.len()),
                        Err(error) => panic!("{}: {error}", image.description),
                    };
                    assert!(allowed.contains(&tables), "{}: {tables} tables", image.description);
                }
            }
        }
        assert!(images > 10, "only {images} images");
    }

    #[test]
    fn a_copy_of_a_newer_format_is_refused_clearly() {
        let pool = pool();
        write(&pool, EngineKind::GroupCommit, CcProtocol::default(), &schema()).unwrap();
        let chunk = catalog_chunk(&pool).unwrap();
        let offset = pool.chunk_offset(chunk);
        let mut header = [0u8; HEADER_LEN];
        pool.backend().read(offset, &mut header);
        let len = u32::from_le_bytes(header[12..16].try_into().unwrap()) as usize;
        let mut payload = vec![0u8; len];
        pool.backend().read(offset + HEADER_LEN as u64, &mut payload);
        header[8..12].copy_from_slice(&(CATALOG_FORMAT_VERSION + 1).to_le_bytes());
        let crc = copy_crc(&header, &payload);
        header[24..28].copy_from_slice(&crc.to_le_bytes());
        pool.backend().write(offset, &header);
        match read(&pool) {
            Err(DbError::Corrupt(message)) => assert!(message.contains("newer pmtx"), "{message}"),
            other => panic!("expected a newer-format error, got {other:?}"),
        }
    }
}
