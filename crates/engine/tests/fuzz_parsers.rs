//! Fuzzing the persistent-structure parsers (`pmtx_engine::internals::fuzz`) on
//! stable Rust (`tests/fuzz_support`): each target runs over its committed
//! corpus (`tests/fuzz_corpus/<target>/`) and a short budget of mutations,
//! and must never panic. The long run (10^6 executions per target and
//! more) is the example:
//!
//! ```text
//! cargo run --release -p pmtx-engine --example fuzz_parsers -- --iterations 1000000
//! ```
//!
//! The corpus holds real structures taken from pools; to write it anew
//! (after a format change):
//!
//! ```text
//! cargo test -p pmtx-engine --test fuzz_parsers -- --ignored write_fuzz_corpus
//! ```

mod fuzz_support;

use fuzz_support::{corpus, corpus_dir, run, HEAP_MAX_KEY, HEAP_MAX_VALUE, TARGETS};
use pmtx_engine::{Database, DbOptions, EngineKind, PoolLocation, TableSchema};
use pmtx_pm::{layout, Direct, PmBackend, Pool};
use std::sync::Arc;

/// Mutations per target in the test (about a second in a debug build).
const CI_ITERATIONS: u64 = 200_000;

#[test]
fn parsers_survive_the_corpus_and_its_mutations() {
    for (index, target) in TARGETS.iter().enumerate() {
        let report = run(target, CI_ITERATIONS, 0xF022 + index as u64);
        eprintln!(
            "fuzz {}: {} executions, {} distinct outcomes, {} inputs in the pool",
            target.name, report.executions, report.outcomes, report.pool
        );
        assert_eq!(report.executions, CI_ITERATIONS + corpus(target).len() as u64);
        // The corpus and its mutations reach accepted and refused inputs.
        assert!(report.outcomes >= 2, "{}: only {} outcomes", target.name, report.outcomes);
    }
}

#[test]
fn the_corpus_holds_valid_structures() {
    // Each corpus starts from structures the parsers accept, so the
    // mutations explore around valid inputs, not only the first checks.
    let accepted = |name: &str, bytes: &[u8]| -> bool {
        match name {
            "pool" => pmtx_engine::internals::fuzz::parse_pool(bytes).is_ok(),
            "log" => {
                pmtx_engine::internals::fuzz::parse_log_segment(bytes).is_ok_and(|(records, _)| !records.is_empty())
            }
            "checkpoint" => pmtx_engine::internals::fuzz::parse_checkpoint_chunk(bytes).is_ok_and(|rows| rows > 0),
            "heap" => pmtx_engine::internals::fuzz::parse_heap_slot(bytes, HEAP_MAX_KEY, HEAP_MAX_VALUE)
                .is_ok_and(|t| t.is_some()),
            "wbl" => pmtx_engine::internals::fuzz::parse_wbl_record(bytes).is_some(),
            other => panic!("unknown target {other}"),
        }
    };
    for target in &TARGETS {
        let inputs = corpus(target);
        assert!(
            inputs.iter().any(|bytes| accepted(target.name, bytes)),
            "{}: no valid input in the corpus",
            target.name
        );
    }
}

fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("rows").max_key_len(HEAP_MAX_KEY).max_value_len(HEAP_MAX_VALUE)]
}

/// A crashed in-memory pool of `engine` with some rows, as bytes.
fn pool_bytes(engine: EngineKind) -> Vec<u8> {
    const SIZE: u64 = 2 << 20;
    let mut options = DbOptions::in_memory(engine, tables());
    options.pool = PoolLocation::InMemory { size: SIZE };
    options.chunk_size = layout::MIN_CHUNK_SIZE;
    options.workers = 1;
    options.prefault_chunks = 0;
    options.checkpoint_interval = None;
    options.zen.cache_bytes = 1 << 20;
    let pool = Arc::new(Pool::<Direct>::create_in_memory(SIZE, layout::MIN_CHUNK_SIZE, &options.pm).unwrap());
    let db = Database::open_on_pool(options, Arc::clone(&pool)).unwrap();
    let rows = db.table_id("rows").unwrap();
    let mut worker = db.worker(0).unwrap();
    for i in 0..12u32 {
        worker.run(|tx| tx.put(rows, format!("key{i}").as_bytes(), format!("value {i}").as_bytes())).unwrap();
    }
    db.checkpoint().unwrap();
    for i in 0..6u32 {
        worker.run(|tx| tx.put(rows, format!("key{i}").as_bytes(), format!("second {i}").as_bytes())).unwrap();
    }
    worker.run(|tx| tx.delete(rows, b"key7").map(|_| ())).unwrap();
    drop(worker);
    db.crash().unwrap();
    drop(db);
    let mut bytes = vec![0u8; SIZE as usize];
    pool.backend().read(0, &mut bytes);
    bytes
}

fn used(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1).next_multiple_of(8)
}

#[test]
#[ignore]
fn write_fuzz_corpus() {
    let write = |target: &str, name: String, bytes: &[u8]| {
        let dir = corpus_dir().join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    for engine in [EngineKind::GroupCommit, EngineKind::Sp3, EngineKind::Zen, EngineKind::Wbl] {
        let bytes = pool_bytes(engine);
        let view = Pool::<Direct>::open_image(&bytes, &Default::default()).unwrap();
        // Header, roots and the chunk table (the chunks are not parsed).
        let metadata = (layout::CHUNK_TABLE_OFFSET + view.geometry().chunk_count * 8) as usize;
        write("pool", format!("{engine}.bin"), &bytes[..metadata]);
        for (chunk, owner) in view.owned_chunks() {
            let start = view.chunk_offset(chunk) as usize;
            let chunk_bytes = &bytes[start..start + layout::MIN_CHUNK_SIZE as usize];
            let end = used(chunk_bytes);
            match owner.kind() {
                pmtx_engine::internals::pool_layout::LOG_CHUNK_KIND => {
                    // The used bytes and a little room, as a short segment.
                    write(
                        "log",
                        format!("{engine}-{}.bin", chunk.0),
                        &chunk_bytes[..(end + 256).min(chunk_bytes.len())],
                    );
                }
                pmtx_engine::internals::pool_layout::CHECKPOINT_CHUNK_KIND => {
                    write("checkpoint", format!("{engine}-{}.bin", chunk.0), &chunk_bytes[..end.max(64)]);
                }
                0x5A48 | 0x5A46 => {
                    // The first valid tuples (each input one slot: the
                    // parser takes the slot size from the table's geometry).
                    let slot = (26 + HEAP_MAX_KEY + HEAP_MAX_VALUE).div_ceil(16) * 16;
                    let mut found = 0;
                    for at in (0..4096).step_by(16) {
                        let bytes = &chunk_bytes[at..at + slot];
                        if found < 4
                            && pmtx_engine::internals::fuzz::parse_heap_slot(bytes, HEAP_MAX_KEY, HEAP_MAX_VALUE)
                                .is_ok_and(|tuple| tuple.is_some())
                        {
                            write("heap", format!("{engine}-{}-{at}.bin", chunk.0), bytes);
                            found += 1;
                        }
                    }
                }
                0x5742 => {
                    for index in 0..4 {
                        let at = index * 64;
                        if chunk_bytes[at..at + 8] != [0; 8] {
                            write("wbl", format!("{engine}-{index}.bin"), &chunk_bytes[at..at + 64]);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
