//! Volatile accesses (`PmBackend::read_volatile`, `write_volatile`): what
//! they store and load, how the counters see them, and that the `emulated`
//! media model charges them even for a thread that never fences.

use pmtx_pm::{reset_thread_counters, thread_counters, Direct, Emulated, PmBackend, PmOptions, Pool};

const SIZE: u64 = 8 << 20;
const CHUNK: u64 = 1 << 20;

#[test]
fn volatile_writes_and_reads_are_counted_as_one_access_each() {
    let pool = Pool::<Direct>::create_in_memory(SIZE, CHUNK, &PmOptions::default()).unwrap();
    let offset = pool.chunk_offset(pool.allocate_chunk(pmtx_pm::ChunkOwner::compose(0x77, 0, 0), true).unwrap());
    let bytes: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    reset_thread_counters();
    pool.backend().write_volatile(offset + 64, &bytes);
    let written = thread_counters();
    assert_eq!((written.writes, written.lines_written, written.bytes_written), (1, 4, 200));
    assert_eq!(written.lines_flushed, 0, "the direct backend never flushes volatile memory");
    let mut back = vec![0u8; 200];
    pool.backend().read(offset + 64, &mut back);
    assert_eq!(back, bytes);
    reset_thread_counters();
    let folded = pool.backend().read_volatile(offset + 64, 200);
    let expected = bytes.chunks_exact(8).fold(0u64, |acc, word| acc ^ u64::from_le_bytes(word.try_into().unwrap()));
    assert_eq!(folded, expected);
    let read = thread_counters();
    assert_eq!((read.reads, read.lines_read, read.bytes_read, read.writes), (1, 4, 200, 0));
}

#[test]
fn the_media_model_charges_volatile_writes_without_a_fence() {
    let pool = Pool::<Emulated>::create_in_memory(SIZE, CHUNK, &PmOptions::default()).unwrap();
    let offset = pool.chunk_offset(pool.allocate_chunk(pmtx_pm::ChunkOwner::compose(0x77, 0, 0), true).unwrap());
    let line = [7u8; 64];
    reset_thread_counters();
    // Scattered lines, as metadata words of many tuples: more than one
    // burst's worth, and no fence.
    for index in 0..2048u64 {
        pool.backend().write_volatile(offset + (index * 4096 + index * 64) % (CHUNK - 64), &line);
    }
    let counters = thread_counters();
    assert_eq!(counters.fences, 0);
    assert!(counters.media_xplines_read > 0, "ownership reads charged: {counters:?}");
    assert!(counters.stall_ns > 0, "{counters:?}");
}
