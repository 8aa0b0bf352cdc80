//! Helpers shared by the `zen_*` tests: seeds, recovering an image on any
//! backend (catching panics), reading a database's contents through
//! transactions, and a decoder for the heap layout documented in
//! `src/zen/heap.rs` (used to find and edit LP bits in images).

#![allow(dead_code)]

use pmtx_engine::{Database, DbOptions, ScanDirection, TableSchema, ZEN_HEAP_CHUNK_KIND};
use pmtx_pm::{PmBackend, PmOptions, Pool};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The seed: `PMTX_CRASH_SEED` (decimal or 0x-hex) or `default`.
pub fn seed(default: u64) -> u64 {
    std::env::var("PMTX_CRASH_SEED")
        .ok()
        .and_then(|text| {
            let text = text.trim();
            match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => text.parse().ok(),
            }
        })
        .unwrap_or(default)
}

pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Every present row by table name. Ordered tables are scanned; for hashed
/// tables the given `hashed_keys` are read.
pub type DbState = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

pub fn read_state(db: &Database, tables: &[TableSchema], hashed_keys: &[Vec<u8>]) -> DbState {
    let mut worker = db.worker(0).unwrap();
    worker
        .run_read_only(|tx| {
            let mut state = DbState::new();
            for schema in tables {
                let table = db.table_id(&schema.name).unwrap();
                let mut rows = BTreeMap::new();
                if schema.primary == pmtx_engine::PrimaryIndexKind::Ordered {
                    for (key, value) in
                        tx.scan(table, (Bound::Unbounded, Bound::Unbounded), ScanDirection::Forward, usize::MAX)?
                    {
                        rows.insert(key, value);
                    }
                } else {
                    for key in hashed_keys {
                        if let Some(value) = tx.get(table, key)? {
                            rows.insert(key.clone(), value);
                        }
                    }
                }
                state.insert(schema.name.clone(), rows);
            }
            Ok(state)
        })
        .unwrap()
        .committed()
        .unwrap()
}

/// Opens `bytes` on backend `B`, recovers with `options`, reads the state;
/// `Err` on a recovery error or panic. `before_open` may configure the pool.
pub fn recover_image<B: PmBackend>(
    options: &DbOptions,
    bytes: &[u8],
    hashed_keys: &[Vec<u8>],
    before_open: impl FnOnce(&Pool<B>),
) -> Result<(DbState, Arc<Pool<B>>, pmtx_engine::RecoveryReport), String> {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let pool = Arc::new(
            Pool::<B>::open_image(bytes, &PmOptions { sim_seed: options.pm.sim_seed, ..PmOptions::default() })
                .map_err(|error| format!("pool open failed: {error}"))?,
        );
        before_open(&pool);
        let db = Database::open_on_pool(options.clone(), Arc::clone(&pool))
            .map_err(|error| format!("recovery failed: {error}"))?;
        let report = db.stats().recovery.expect("zen reports recovery");
        let state = read_state(&db, &options.tables, hashed_keys);
        drop(db);
        Ok((state, pool, report))
    }));
    match result {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("recovery panicked: {message}"))
        }
    }
}

/// One NVM-tuple header found in an image.
#[derive(Clone, Copy, Debug)]
pub struct HeapSlot {
    /// Byte offset in the pool.
    pub offset: u64,
    /// Owning table (chunk-owner group) and thread.
    pub table: u32,
    pub thread: u16,
    /// Word 0: LP bit and Tx-CTS.
    pub word0: u64,
}

pub const LP_BIT: u64 = 1 << 63;

/// Every non-empty slot of every heap chunk of `pool`, decoding the layout
/// of `src/zen/heap.rs` (slot size = round16(26 + max key + max value),
/// slots after a 64-byte-rounded bitmap of one bit per slot).
pub fn heap_slots<B: PmBackend>(pool: &Pool<B>, tables: &[TableSchema]) -> Vec<HeapSlot> {
    let chunk_size = pool.geometry().chunk_size;
    let mut slots = Vec::new();
    for (chunk, owner) in pool.owned_chunks() {
        if owner.kind() != ZEN_HEAP_CHUNK_KIND {
            continue;
        }
        let schema = &tables[owner.group() as usize];
        let slot_size = (26 + schema.max_key_len as u64 + schema.max_value_len as u64).div_ceil(16) * 16;
        let mut count = chunk_size * 8 / (slot_size * 8 + 1);
        let bitmap = |n: u64| n.div_ceil(8).div_ceil(64) * 64;
        while bitmap(count) + count * slot_size > chunk_size {
            count -= 1;
        }
        let start = pool.chunk_offset(chunk) + bitmap(count);
        for index in 0..count {
            let offset = start + index * slot_size;
            assert_eq!(offset % 16, 0, "slot headers are 16-byte aligned");
            assert!(offset % 64 <= 48, "a 16-byte header never straddles a line");
            let word0 = pool.backend().load_u64(offset);
            if word0 != 0 {
                slots.push(HeapSlot { offset, table: owner.group(), thread: owner.thread(), word0 });
            }
        }
    }
    slots
}
