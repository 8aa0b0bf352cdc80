//! Pool creation, reopening, bad input, allocator and roots on real files.

use pmtx_pm::{layout, ChunkOwner, Direct, MappingKind, PmBackend, PmOptions, Pool, PoolError, Structure};
use std::io::{Seek, SeekFrom, Write};

const SIZE: u64 = 16 << 20;
const CHUNK: u64 = 1 << 20;

fn options() -> PmOptions {
    PmOptions::default()
}

#[test]
fn create_then_reopen_keeps_geometry_roots_and_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.pool");
    let owner = ChunkOwner::compose(3, 7, 1);
    let (id, chunk) = {
        let pool = Pool::<Direct>::create(&path, SIZE, CHUNK, &options()).unwrap();
        assert_eq!(pool.backend().info().mapping, MappingKind::SharedFile);
        let chunk = pool.allocate_chunk(owner, true).unwrap();
        pool.backend().write(pool.chunk_offset(chunk), b"hello");
        pool.backend().persist(pool.chunk_offset(chunk), 5);
        pool.set_root("engine.catalog", 42).unwrap();
        pool.set_root("engine.catalog", 43).unwrap();
        let id = pool.geometry().pool_id;
        pool.close();
        (id, chunk)
    };
    let pool = Pool::<Direct>::open(&path, &options()).unwrap();
    assert!(pool.was_clean_shutdown());
    assert_eq!(pool.geometry().pool_id, id);
    assert_eq!(pool.root("engine.catalog"), Some(43));
    assert_eq!(pool.root("missing"), None);
    assert_eq!(pool.chunks_owned_by(owner), vec![chunk]);
    assert_eq!(pool.chunk_owner(chunk).unwrap().group(), 7);
    let mut bytes = [0u8; 5];
    pool.backend().read(pool.chunk_offset(chunk), &mut bytes);
    assert_eq!(&bytes, b"hello");
    drop(pool); // no close: next open must see an unclean shutdown
    let pool = Pool::<Direct>::open(&path, &options()).unwrap();
    assert!(!pool.was_clean_shutdown());
    assert_eq!(pool.info().open_count, 2);
}

#[test]
fn allocator_reports_full_and_reuses_freed_chunks_zeroed() {
    let pool = Pool::<Direct>::create_in_memory(SIZE, CHUNK, &options()).unwrap();
    let owner = ChunkOwner::new(9).unwrap();
    let count = pool.geometry().chunk_count;
    let chunks: Vec<_> = (0..count).map(|_| pool.allocate_chunk(owner, false).unwrap()).collect();
    match pool.allocate_chunk(owner, false) {
        Err(PoolError::Full { chunks, .. }) => assert_eq!(chunks, count),
        other => panic!("expected Full, got {other:?}"),
    }
    let victim = chunks[2];
    pool.backend().write(pool.chunk_offset(victim) + 100, &[0xAB; 64]);
    pool.free_chunk(victim);
    assert_eq!(pool.free_chunks(), 1);
    let again = pool.allocate_chunk(owner, true).unwrap();
    assert_eq!(again, victim);
    let mut bytes = [1u8; 64];
    pool.backend().read(pool.chunk_offset(again) + 100, &mut bytes);
    assert_eq!(bytes, [0u8; 64], "a zeroed allocation of a dirty chunk must be zero");
}

#[test]
fn second_open_of_a_locked_pool_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.pool");
    let _pool = Pool::<Direct>::create(&path, SIZE, CHUNK, &options()).unwrap();
    match Pool::<Direct>::open(&path, &options()) {
        Err(PoolError::Locked(p)) => assert_eq!(p, path),
        Err(other) => panic!("expected Locked, got {other}"),
        Ok(_) => panic!("expected Locked, got a pool"),
    }
}

fn open_error(path: &std::path::Path) -> PoolError {
    match Pool::<Direct>::open(path, &options()) {
        Err(error) => error,
        Ok(_) => panic!("opening {} should fail", path.display()),
    }
}

#[test]
fn bad_files_give_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    // Missing.
    assert!(matches!(open_error(&dir.path().join("nope")), PoolError::NotFound(_)));
    // Garbage.
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, vec![0x5Au8; 1 << 20]).unwrap();
    assert!(matches!(open_error(&garbage), PoolError::BadMagic { .. }));
    // Empty and tiny.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(open_error(&empty), PoolError::TooSmall { .. }));
    let tiny = dir.path().join("tiny");
    std::fs::write(&tiny, b"PMTXPOOL").unwrap();
    assert!(matches!(open_error(&tiny), PoolError::TooSmall { .. }));
    // Truncated.
    let truncated = dir.path().join("truncated");
    Pool::<Direct>::create(&truncated, SIZE, CHUNK, &options()).unwrap().close();
    std::fs::OpenOptions::new().write(true).open(&truncated).unwrap().set_len(SIZE / 2).unwrap();
    assert!(matches!(open_error(&truncated), PoolError::Truncated { expected: SIZE, .. }));
    // Flipped header byte.
    let flipped = dir.path().join("flipped");
    Pool::<Direct>::create(&flipped, SIZE, CHUNK, &options()).unwrap().close();
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(&flipped).unwrap();
    file.seek(SeekFrom::Start(layout::header::CHUNK_SIZE as u64 + 2)).unwrap();
    file.write_all(&[0x01]).unwrap();
    drop(file);
    let error = open_error(&flipped);
    assert!(matches!(error, PoolError::ChecksumMismatch { .. }), "{error}");
    assert!(error.to_string().contains("damaged"));
    // Another version: without the checksum fixed it is damage; with it, a
    // newer version is a newer format and an older one unsupported.
    let set_version = |name: &str, version: u32, fix_crc: bool| {
        let path = dir.path().join(name);
        Pool::<Direct>::create(&path, SIZE, CHUNK, &options()).unwrap().close();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[layout::header::VERSION..layout::header::VERSION + 4].copy_from_slice(&version.to_le_bytes());
        if fix_crc {
            let crc = crc32fast::hash(&bytes[..layout::header::CHECKSUM]);
            bytes[layout::header::CHECKSUM..layout::header::CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
        }
        std::fs::write(&path, bytes).unwrap();
        open_error(&path)
    };
    let error = set_version("damaged-version", 99, false);
    assert!(matches!(error, PoolError::ChecksumMismatch { structure: Structure::PoolHeader, .. }), "{error}");
    let error = set_version("newer", 99, true);
    assert!(matches!(error, PoolError::NewerFormat { found: 99, structure: Structure::PoolHeader, .. }), "{error}");
    assert!(error.to_string().contains("newer pmtx"), "{error}");
    assert_eq!(error.damaged_structure(), None, "a newer format is not damage");
    let error = set_version("older", 0, true);
    assert!(matches!(error, PoolError::UnsupportedVersion { found: 0, .. }), "{error}");
    // Corrupt chunk table entry.
    let table = dir.path().join("table");
    Pool::<Direct>::create(&table, SIZE, CHUNK, &options()).unwrap().close();
    let mut file = std::fs::OpenOptions::new().write(true).open(&table).unwrap();
    file.seek(SeekFrom::Start(layout::CHUNK_TABLE_OFFSET + 8)).unwrap();
    file.write_all(&0x1234u64.to_le_bytes()).unwrap();
    drop(file);
    let error = open_error(&table);
    assert!(matches!(error, PoolError::Corrupt { structure: Structure::ChunkTable, .. }), "{error}");
    assert!(error.to_string().contains("chunk table entry 1"), "{error}");
}

#[test]
fn create_rejects_bad_sizes_and_existing_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small");
    assert!(matches!(Pool::<Direct>::create(&path, 4096, CHUNK, &options()), Err(PoolError::TooSmall { .. })));
    assert!(!path.exists(), "a refused create must not leave a file");
    assert!(matches!(Pool::<Direct>::create(&path, SIZE, 3000, &options()), Err(PoolError::InvalidOption(_))));
    std::fs::write(&path, b"precious").unwrap();
    assert!(matches!(Pool::<Direct>::create(&path, SIZE, CHUNK, &options()), Err(PoolError::AlreadyExists(_))));
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[test]
fn root_names_are_validated_and_slots_are_bounded() {
    let pool = Pool::<Direct>::create_in_memory(SIZE, CHUNK, &options()).unwrap();
    assert!(matches!(pool.set_root("", 1), Err(PoolError::Root { .. })));
    assert!(matches!(pool.set_root(&"x".repeat(49), 1), Err(PoolError::Root { .. })));
    for index in 0..layout::ROOT_SLOTS {
        pool.set_root(&format!("root-{index}"), index).unwrap();
    }
    assert!(matches!(pool.set_root("one-more", 1), Err(PoolError::Root { .. })));
    assert_eq!(pool.root("root-17"), Some(17));
    assert_eq!(pool.roots().len() as u64, layout::ROOT_SLOTS);
}

#[test]
fn msync_mode_syncs_at_fences_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("msync.pool");
    let options = PmOptions { msync: true, ..PmOptions::default() };
    let pool = Pool::<Direct>::create(&path, SIZE, CHUNK, &options).unwrap();
    assert!(pool.backend().info().durability().contains("power failure"));
    let chunk = pool.allocate_chunk(ChunkOwner::new(1).unwrap(), false).unwrap();
    pmtx_pm::reset_thread_counters();
    pool.backend().write(pool.chunk_offset(chunk), &[7u8; 100]);
    pool.backend().persist(pool.chunk_offset(chunk), 100);
    let counters = pmtx_pm::thread_counters();
    assert_eq!(counters.fences, 1);
    assert_eq!(counters.msyncs, 1);
    assert_eq!(counters.lines_flushed, 2);
}

#[test]
fn eadr_elides_flushes_but_keeps_fences() {
    let options = PmOptions { domain: pmtx_pm::PersistenceDomain::Eadr, ..PmOptions::default() };
    let pool = Pool::<Direct>::create_in_memory(SIZE, CHUNK, &options).unwrap();
    pmtx_pm::reset_thread_counters();
    pool.backend().write(layout::CHUNK_TABLE_OFFSET + 4096, &[1u8; 256]);
    pool.backend().persist(layout::CHUNK_TABLE_OFFSET + 4096, 256);
    let counters = pmtx_pm::thread_counters();
    assert_eq!(counters.lines_flushed, 0);
    assert_eq!(counters.fences, 1);
    assert_eq!(counters.bytes_written, 256);
}

#[test]
fn inspect_validates_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inspect.pool");
    let pool = Pool::<Direct>::create(&path, SIZE, CHUNK, &options()).unwrap();
    pool.allocate_chunk(ChunkOwner::new(5).unwrap(), false).unwrap();
    drop(pool); // never closed: unclean
    let before = std::fs::read(&path).unwrap();
    let (info, report) = Pool::<Direct>::inspect(&path, &options()).unwrap();
    assert!(!info.was_clean_shutdown);
    assert_eq!(info.open_count, 0);
    assert_eq!((info.chunks_used, report.chunks_used), (1, 1));
    assert_eq!(std::fs::read(&path).unwrap(), before, "inspect must not change the file");
    let pool = Pool::<Direct>::open(&path, &options()).unwrap();
    assert!(!pool.was_clean_shutdown(), "an unclean pool stays unclean after inspect");
}

/// Pages of `[offset, offset + len)` of the file at `path` in the page
/// cache, observed through a mapping of our own (`mincore`).
fn resident_pages(path: &std::path::Path, offset: u64, len: u64) -> usize {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    let size = file.metadata().unwrap().len() as usize;
    // SAFETY: a fresh read-only shared mapping of the whole file, unmapped
    // below; mincore writes one byte per page into a vector of that size.
    unsafe {
        let base = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
        assert_ne!(base, libc::MAP_FAILED);
        let pages = len.div_ceil(4096) as usize;
        let mut residency = vec![0u8; pages];
        let rc = libc::mincore(base.cast::<u8>().add(offset as usize).cast(), len as usize, residency.as_mut_ptr());
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        libc::munmap(base, size);
        residency.iter().filter(|byte| **byte & 1 != 0).count()
    }
}

fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

#[test]
fn prefault_populates_the_next_free_chunks_and_changes_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prefault.pool");
    let pool = std::sync::Arc::new(Pool::<Direct>::create(&path, 64 << 20, CHUNK, &options()).unwrap());
    let owner = ChunkOwner::new(5).unwrap();
    // Own the first 40 chunks without touching them, so the free chunks the
    // test watches lie far beyond the pages the kernel may have read ahead
    // around the pool's metadata.
    let mut first = pool.allocate_chunk(owner, false).unwrap();
    for _ in 1..40 {
        first = pool.allocate_chunk(owner, false).unwrap();
    }
    let chunk_pages = (CHUNK / 4096) as usize;
    let resident = |index: u64| resident_pages(&path, pool.chunk_offset(pmtx_pm::ChunkId(index)), CHUNK);
    let (next, after) = (first.0 + 1, first.0 + 2);
    pool.start_prefault(1).unwrap();
    // A second start (another engine opened over the pool) with a wider
    // window must not add a thread: the window below stays one chunk.
    pool.start_prefault(4).unwrap();
    assert!(wait_until(|| pool.prefaulted_chunks() == 1), "the next free chunk gets populated");
    assert_eq!(resident(next), chunk_pages, "its pages are in memory");
    // Only `ahead` chunks (neighbours may be resident anyway: a disk
    // filesystem reads ahead around faulted pages).
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(pool.prefaulted_chunks(), 1, "a chunk beyond the window is left alone");
    let mut bytes = vec![1u8; CHUNK as usize];
    pool.backend().read(pool.chunk_offset(pmtx_pm::ChunkId(next)), &mut bytes);
    assert!(bytes.iter().all(|byte| *byte == 0), "populating changes no byte");
    assert_eq!(pool.allocate_chunk(owner, false).unwrap().0, next, "lowest free chunk first");
    assert!(wait_until(|| pool.prefaulted_chunks() == 2), "an allocation moves the window");
    assert_eq!(resident(after), chunk_pages);
    // The thread holds no strong reference while idle: dropping the pool
    // releases the file at once.
    drop(pool);
    Pool::<Direct>::open(&path, &options()).expect("the pool file is free after drop");
}

/// Provisioning populates the lowest free chunks in the caller's thread,
/// skips owned and already populated ones, stops at the free end of the
/// pool, and changes no byte.
#[test]
fn populate_free_chunks_provisions_the_next_free_chunks_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provision.pool");
    let pool = Pool::<Direct>::create(&path, 64 << 20, CHUNK, &options()).unwrap();
    let owner = ChunkOwner::new(5).unwrap();
    let mut first = pool.allocate_chunk(owner, false).unwrap();
    for _ in 1..40 {
        first = pool.allocate_chunk(owner, false).unwrap();
    }
    let chunk_pages = (CHUNK / 4096) as usize;
    let resident = |index: u64| resident_pages(&path, pool.chunk_offset(pmtx_pm::ChunkId(index)), CHUNK);
    assert_eq!(pool.populate_free_chunks(3).unwrap(), 3);
    for index in first.0 + 1..=first.0 + 3 {
        assert_eq!(resident(index), chunk_pages, "free chunk {index} is populated");
    }
    // The three are populated already: the next call moves on.
    assert_eq!(pool.populate_free_chunks(4).unwrap(), 1, "one more within the four lowest free chunks");
    let free = pool.free_chunks();
    assert_eq!(pool.populate_free_chunks(u64::MAX).unwrap(), free - 4, "stops at the end of the pool");
    let mut bytes = vec![1u8; CHUNK as usize];
    pool.backend().read(pool.chunk_offset(pmtx_pm::ChunkId(first.0 + 1)), &mut bytes);
    assert!(bytes.iter().all(|byte| *byte == 0), "populating changes no byte");
}

/// An engine reopened on the same pool object learns how the engine before
/// it ended, not how the pool was found when it was opened.
#[test]
fn each_engine_session_sees_how_the_previous_one_ended() {
    let pool = Pool::<Direct>::create_in_memory(8 << 20, 1 << 20, &options()).unwrap();
    assert!(pool.begin_engine_session(), "a new pool holds nothing to recover");
    // That engine went away without marking a clean shutdown.
    assert!(!pool.begin_engine_session(), "a dropped engine is a crash");
    pool.mark_clean_shutdown();
    assert!(pool.begin_engine_session(), "a cleanly closed engine");
    assert!(!pool.begin_engine_session(), "the session cleared the flag");
}

/// With emulated NUMA nodes, a chunk is allocated on the node asked for
/// (the lowest free one there), and chunks passed over stay the lowest
/// free ones for the next allocation.
#[test]
fn chunks_are_allocated_on_the_node_asked_for() {
    use pmtx_pm::{Emulated, LatencyModel};
    let latency = LatencyModel::OPTANE.with_numa(2, 150).unwrap();
    let options = PmOptions { latency, ..PmOptions::default() };
    let chunk = 2 << 20;
    let pool = Pool::<Emulated>::create_in_memory(64 << 20, chunk, &options).unwrap();
    let backend = pool.backend();
    assert_eq!(backend.numa_nodes(), 2);
    let owner = ChunkOwner::new(5).unwrap();
    let first = pmtx_pm::ChunkId(0);
    let first_node = backend.numa_node_of(pool.chunk_offset(first));
    let other_node = 1 - first_node;
    let on_other = pool.allocate_chunk_on_node(owner, false, other_node).unwrap();
    assert_eq!(backend.numa_node_of(pool.chunk_offset(on_other)), other_node);
    assert_eq!(on_other.0, 1, "the first chunk of the other node");
    let passed_over = pool.allocate_chunk_on_node(owner, false, first_node).unwrap();
    assert_eq!(passed_over, first, "the chunk passed over is still the lowest free one");
    assert_eq!(pool.allocate_chunk(owner, false).unwrap().0, 2, "the hint did not skip free chunks");
    // One node only: any chunk.
    let single = Pool::<Direct>::create_in_memory(16 << 20, chunk, &options).unwrap();
    assert_eq!(single.backend().numa_nodes(), 1);
    single.allocate_chunk_on_node(owner, false, 3).unwrap();
}

/// Offset of the current value record of root `name` and of its slot.
fn root_record(bytes: &[u8], name: &str) -> (usize, usize) {
    let slot = (0..layout::ROOT_SLOTS as usize)
        .find(|slot| {
            let at = layout::ROOT_TABLE_OFFSET as usize + slot * 64 + 16;
            bytes[at..at + name.len()] == *name.as_bytes() && bytes[at + name.len()] == 0
        })
        .expect("the root exists");
    let slot_at = layout::ROOT_TABLE_OFFSET as usize + slot * 64;
    let state = u64::from_le_bytes(bytes[slot_at..slot_at + 8].try_into().unwrap());
    assert_eq!(state >> 48, layout::ROOT_TAG_V2, "a checksummed slot");
    let seq = (state >> 32) as u16;
    (layout::ROOT_VALUES_OFFSET as usize + slot * 32 + usize::from(seq & 1) * 16, slot_at)
}

#[test]
fn damaged_root_values_are_refused_naming_the_root_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roots.pool");
    {
        let pool = Pool::<Direct>::create(&path, SIZE, CHUNK, &options()).unwrap();
        assert_eq!(pool.geometry().layout_version, layout::LAYOUT_VERSION);
        pool.set_root("log.durable_epoch", 7).unwrap();
        for epoch in 8..=20 {
            pool.set_root("log.durable_epoch", epoch).unwrap();
        }
        pool.set_root("other", 5).unwrap();
        pool.close();
    }
    let clean = std::fs::read(&path).unwrap();
    let (record, slot) = root_record(&clean, "log.durable_epoch");
    assert_eq!(u64::from_le_bytes(clean[record..record + 8].try_into().unwrap()), 20);
    // Every single-bit flip of the value, its check word or the state word
    // is refused (no flip reads as another value).
    for (start, len) in [(record, 16), (slot, 8)] {
        for bit in 0..len * 8 {
            let mut bytes = clean.clone();
            bytes[start + bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&path, &bytes).unwrap();
            let error = open_error(&path);
            assert_eq!(error.damaged_structure(), Some(Structure::RootTable), "bit {bit} at {start}: {error}");
        }
    }
    // The previous record (a torn or older value) is not current: damaging
    // it changes nothing.
    let other = record ^ 16;
    let mut bytes = clean.clone();
    bytes[other..other + 16].fill(0xA5);
    std::fs::write(&path, &bytes).unwrap();
    let pool = Pool::<Direct>::open(&path, &options()).unwrap();
    assert_eq!(pool.root("log.durable_epoch"), Some(20));
    assert_eq!(pool.root("other"), Some(5));
}

#[test]
fn layout_1_roots_keep_reading_and_are_converted_when_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.pool");
    Pool::<Direct>::create(&path, SIZE, CHUNK, &options()).unwrap().close();
    // Rewrite as a layout-1 pool (as the previous build wrote it): header
    // version 1 and a root slot with the plain "ROOT" state and its value
    // in the slot.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[layout::header::VERSION..layout::header::VERSION + 4].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..layout::header::CHECKSUM]);
    bytes[layout::header::CHECKSUM..layout::header::CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
    let slot = layout::ROOT_TABLE_OFFSET as usize;
    let name = b"ckpt.generation";
    bytes[slot + 16..slot + 16 + name.len()].copy_from_slice(name);
    bytes[slot + 8..slot + 16].copy_from_slice(&3u64.to_le_bytes());
    let state = (layout::ROOT_TAG << 32) | u64::from(crc32fast::hash(name));
    bytes[slot..slot + 8].copy_from_slice(&state.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    {
        let pool = Pool::<Direct>::open(&path, &options()).unwrap();
        assert_eq!(pool.geometry().layout_version, 1);
        assert_eq!(pool.root("ckpt.generation"), Some(3));
        pool.set_root("ckpt.generation", 4).unwrap();
        pool.close();
    }
    let bytes = std::fs::read(&path).unwrap();
    let (record, _) = root_record(&bytes, "ckpt.generation");
    assert_eq!(u64::from_le_bytes(bytes[record..record + 8].try_into().unwrap()), 4);
    let pool = Pool::<Direct>::open(&path, &options()).unwrap();
    assert_eq!(pool.root("ckpt.generation"), Some(4));
}
