//! Crash recovery without logs (zen-plus.txt §3.3.3, Algorithm 2).
//!
//! Regions are found through the pool's chunk table (owner tags); each is
//! scanned by its own thread, tables in the LP order (§3.3.4) so LP bits are
//! met early. Per region, `ts_commit` is the largest Tx-CTS of a CRC-valid
//! tuple with the LP bit. A tuple with Tx-CTS <= `ts_commit` is committed —
//! a region is written by one thread with growing Tx-CTS, and a transaction
//! sets its LP bit only after all its tuples are durable — and goes through
//! `update_index_gc` (the newest version of a key wins; the loser becomes a
//! free slot of its region). Otherwise it waits in the pending list until
//! the region is scanned; still above `ts_commit` then, it belongs to the
//! transaction that was persisting at the crash, or to the pipelined commit
//! before it whose LP line was flushed but not yet fenced (its LP store did
//! not reach the medium: it was never acknowledged), and is discarded: its
//! word 0 is set to 0 and flushed, one fence per region.
//!
//! Why `ts_commit` is high enough: the slot of a region's latest LP tuple
//! known durable is pinned (never reused) until a newer transaction of the
//! region is known durable, so the LP tuple of the region's last
//! acknowledged transaction is always in the heap (`storage::zen::heap`,
//! "The LP pin", "Unfenced commits"). Why it is not too high: a pipelined
//! commit's LP store follows its first fence, so if it is durable so is
//! every other tuple of that commit; and a region's commits stamp growing
//! Tx-CTS, so no tuple of an unfinished commit lies at or below an LP tuple
//! that reached the medium.
//!
//! Slots that are not CRC-valid tuples (torn overwrites of stale versions,
//! half-written tuples) are erased too; a committed tuple is never among
//! them, since all of it was durable before its transaction's LP bit.
//!
//! # Damage
//!
//! A crash leaves only two kinds of CRC-invalid slot: a tuple of the
//! transaction persisting at the crash (its Tx-CTS above the region's
//! horizon, without the LP bit, which is stored only once everything else
//! is durable), and a torn reuse of a superseded version, whose header
//! line — word 0 is the first store to it — is the old one whole. So
//! recovery refuses the pool (`CorruptStructure { ZenHeap }`), before it
//! erases anything, when a CRC-invalid slot has
//!
//! * a word 0 holding no valid Tx-CTS (word 0 is one failure-atomic
//!   store), or word-1 reserved bits set (zero in every version, so in any
//!   byte-wise mix of two);
//! * the LP bit with a Tx-CTS above its region's horizon, or (wbl) a
//!   Tx-CTS above the durable window's `c_d`;
//! * a Tx-CTS at or below the horizon (so it claims to be a committed,
//!   superseded version) while its row has no newer intact version: by
//!   key, when the header line holds the whole key, and by tuple ID (a row
//!   keeps its tuple ID until its tombstone is released, and the sweep
//!   erases the row's older versions before that). A superseded tombstone
//!   may have been released, so its key may have no version left, but
//!   none older than it;
//!
//! and (LP rule) when one region holds tuples above its horizon with more
//! than two different Tx-CTS: one transaction of a region persists at a
//! time, after at most one pipelined commit whose LP line was flushed but
//! not yet fenced (`storage::zen::heap`, "Unfenced commits": the first
//! fence of the next commit of the region covers it), and `zen+` erases an
//! attempt's direct writes before its region commits anything else, so
//! committed tuples lost their LP tuple.
//!
//! In a formatted chunk (`HEAP_CHUNK_KIND_FORMATTED`) every free slot's
//! word 0 holds `FREE_WORD0` (formatting and every erase store it), so a
//! zero word 0 is a zeroed tuple: refused, before anything is erased. What
//! stays undetected: in old-kind chunks, committed tuples zeroed whole read
//! as slots never written, unless the zeroing leaves two transactions above
//! a horizon; damage to an
//! older, superseded version is harmless (the newer one is kept).
//!
//! Idempotence: recovery writes only the free marker (0 in old-kind chunks)
//! into word 0 of slots it
//! discards, never touches a committed tuple, and rebuilds everything else
//! in DRAM, so a crash during recovery recovers to the same state. After
//! recovery no discarded tuple remains, so a later crash cannot mistake it
//! for a committed one once `ts_commit` has grown past it.
//!
//! # Under WBL's window rule (`wbl`)
//!
//! The commit horizon is not found in the heap but given: the latest
//! durable group-commit record (`durability::wbl_window`). A tuple at or
//! below its `c_p` is committed (`update_index_gc` as above); one in
//! (`c_p`, `c_d`] belongs to a window that never became durable and is
//! erased like the LP rule's unfinished tuples (same idempotence); one above
//! `c_d` cannot have been written by a correct engine and fails recovery as
//! damage. LP bits play no part and nothing is pinned.
//!
//! Afterwards: tombstones that are their key's latest version are queued for
//! the sweep, secondary indexes are rebuilt from live rows, tuple IDs resume
//! above the largest seen, each region resumes above its largest Tx-CTS, and
//! `zen-naive-alloc` rewrites its bitmaps to match the free lists.
//!
//! Explained in docs/engines/zen.md.

use crate::error::{DbError, DbResult};
use crate::stats::RecoveryReport;
use crate::storage::record;
use crate::storage::record::RowKind;
use crate::storage::table::Table;
use crate::storage::zen::cache::{Row, ABSENT};
use crate::storage::zen::heap::{
    decode_slot, is_heap_chunk_kind, Heap, SlotContent, SlotKind, Tombstone, CTS_MASK, DELETED_BIT,
    HEAP_CHUNK_KIND_FORMATTED, KEY_LEN_AT, LP_BIT, META_LEN, TUPLE_ID_MASK,
};
use crate::storage::zen::meta::ZenTableMeta;
use parking_lot::Mutex;
use pmtx_pm::{ChunkId, PmBackend, Pool, Structure, CACHE_LINE};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What decides that a tuple is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitHorizon {
    /// Zen (Algorithm 2): per region, the largest Tx-CTS of an LP tuple.
    LastPersisted,
    /// WBL: the latest durable record's window; committed at or below
    /// `persisted` (c_p), discarded in (`persisted`, `dirty`] (c_d).
    Window {
        /// c_p.
        persisted: u64,
        /// c_d.
        dirty: u64,
    },
}

/// What recovery found.
pub(crate) struct Recovered {
    /// Largest Tx-CTS in any slot (committed or not).
    pub(crate) max_cts: u64,
    pub(crate) report: RecoveryReport,
}

/// What a CRC-invalid slot's header line says (module documentation,
/// "Damage"): `Err` if it holds what no write of a correct engine leaves
/// there, damaged or torn.
fn suspect_of(
    bytes: &[u8],
    table: u32,
    slot: u64,
    geometry: &crate::storage::zen::heap::SlotGeometry,
) -> Result<Suspect, String> {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (word0, word1) = (word(0), word(8));
    let cts = word0 & CTS_MASK;
    // Word 0 is one failure-atomic store of a valid Tx-CTS (or the erase's
    // zero, which reads as an empty slot); word 1's reserved bits are zero
    // in every version, so in any byte-wise mix of two of them.
    if cts == 0 || cts > record::MAX_TID {
        return Err(format!("word 0 {word0:#018x} holds no valid Tx-CTS"));
    }
    if word1 & !(DELETED_BIT | TUPLE_ID_MASK) != 0 {
        return Err(format!("word 1 {word1:#018x} has reserved bits set"));
    }
    // The key, if the header line holds all of it (the line a torn reuse
    // keeps whole).
    let line_end = CACHE_LINE - slot % CACHE_LINE;
    let key = (META_LEN <= line_end)
        .then(|| usize::from(u16::from_le_bytes(bytes[KEY_LEN_AT..KEY_LEN_AT + 2].try_into().expect("2 bytes"))))
        .filter(|&key_len| key_len <= geometry.max_key && META_LEN + key_len as u64 <= line_end)
        .map(|key_len| bytes[META_LEN as usize..META_LEN as usize + key_len].to_vec());
    Ok(Suspect {
        table,
        slot,
        cts,
        lp: word0 & LP_BIT != 0,
        deleted: word1 & DELETED_BIT != 0,
        tuple_id: word1 & TUPLE_ID_MASK,
        key,
    })
}

fn damaged_slot(table: u32, slot: u64, detail: impl std::fmt::Display) -> DbError {
    DbError::corrupt(Structure::ZenHeap, format!("heap slot {slot:#x} of table #{table} fails its checksum: {detail}"))
}

/// Largest thread number owning a heap chunk, if any (to size the regions).
pub(crate) fn max_heap_thread<B: PmBackend>(pool: &Pool<B>) -> Option<u16> {
    pool.owned_chunks().into_iter().filter(|(_, owner)| is_heap_chunk_kind(owner.kind())).map(|(_, o)| o.thread()).max()
}

struct Pending {
    table: u32,
    slot: u64,
    cts: u64,
    deleted: bool,
    tuple_id: u64,
    key: Vec<u8>,
    value_len: usize,
}

/// A slot that fails its CRC, as its header line (words 0 and 1 and, if
/// the line holds it, the key) describes it (module documentation,
/// "Damage").
struct Suspect {
    table: u32,
    slot: u64,
    cts: u64,
    lp: bool,
    deleted: bool,
    tuple_id: u64,
    key: Option<Vec<u8>>,
}

#[derive(Default)]
struct RegionScan {
    clean: Vec<(u32, u64)>,
    /// Slots to erase once every region is scanned.
    erase: Vec<(u32, u64)>,
    suspects: Vec<Suspect>,
    /// (Tx-CTS, slot) of the CRC-valid tuples above the commit horizon.
    uncommitted: Vec<(u64, u64)>,
    ts_commit: u64,
    lp_slot: u64,
    max_cts: u64,
    scanned: u64,
    discarded: u64,
    max_tuple_id: Vec<u64>,
}

struct Context<'a, B: PmBackend> {
    pool: &'a Pool<B>,
    tables: &'a [Table<Row>],
    heap: &'a Heap,
    /// Per region: freed slots found by any scanning thread.
    losers: Vec<Mutex<Vec<(u64, SlotKind)>>>,
}

impl<B: PmBackend> Context<'_, B> {
    /// Algorithm 2's `updateIndexGC`: keep the newest version of the key.
    #[allow(clippy::too_many_arguments)]
    fn update_index_gc(
        &self,
        table: u32,
        key: &[u8],
        cts: u64,
        deleted: bool,
        tuple_id: u64,
        value_len: usize,
        slot: u64,
    ) -> DbResult<()> {
        let (row, _, _) = self.tables[table as usize].get_or_insert(key, 0)?;
        let word = row.lock(u32::MAX).expect("recovery locks never time out");
        let current = row.slot();
        let kind_of = |absent: bool| if absent { SlotKind::Clean } else { SlotKind::Stale };
        let loser = if current != 0 && cts <= record::tid_of(word) {
            row.store_word(word);
            if cts == record::tid_of(word) {
                // One transaction writes a key once and a key's Tx-CTS grow:
                // only a damaged heap holds two such versions.
                return Err(DbError::corrupt(
                    Structure::ZenHeap,
                    format!("zen heap holds two versions of one key of table #{table} with Tx-CTS {cts}"),
                ));
            }
            (slot, kind_of(deleted))
        } else {
            let old_kind = kind_of(word & ABSENT != 0);
            row.set_slot(slot, value_len);
            row.set_tuple_id(tuple_id);
            row.store_word(record::word_of(cts, if deleted { ABSENT } else { 0 }));
            if current == 0 {
                return Ok(());
            }
            (current, old_kind)
        };
        let (_, region) = self.heap.owner_of(loser.0);
        self.losers[region].lock().push(loser);
        Ok(())
    }

    /// Algorithm 2's `scanRegion`, or its form under WBL's window.
    fn scan_region(
        &self,
        mut chunks: Vec<(u32, ChunkId, bool)>,
        lp_rank: &[u32],
        horizon: CommitHorizon,
    ) -> DbResult<RegionScan> {
        chunks.sort_by_key(|&(table, chunk, _)| (lp_rank[table as usize], chunk));
        let backend = self.pool.backend();
        let chunk_size = self.pool.geometry().chunk_size;
        let mut buffer = vec![0u8; chunk_size as usize];
        let mut scan = RegionScan { max_tuple_id: vec![0; self.tables.len()], ..Default::default() };
        let window = match horizon {
            CommitHorizon::LastPersisted => None,
            CommitHorizon::Window { persisted, dirty } => {
                scan.ts_commit = persisted;
                Some(dirty)
            }
        };
        let mut pending: Vec<Pending> = Vec::new();
        let mut erase: Vec<(u32, u64)> = Vec::new();
        for (table, chunk, formatted) in chunks {
            let geometry = self.heap.geometries[table as usize];
            let chunk_offset = self.pool.chunk_offset(chunk);
            backend.read(chunk_offset, &mut buffer);
            for index in 0..geometry.slots_per_chunk {
                let at = (geometry.first_slot + index * geometry.slot_size) as usize;
                let slot = chunk_offset + at as u64;
                scan.scanned += 1;
                let tuple = match decode_slot(&buffer[at..at + geometry.slot_size as usize], &geometry) {
                    SlotContent::Empty => {
                        // In a formatted chunk every free slot holds the free
                        // marker (written before the chunk was owned, and by
                        // every erase): a zero word 0 is a zeroed tuple.
                        if formatted && buffer[at..at + 8] == [0; 8] {
                            return Err(DbError::corrupt(
                                Structure::ZenHeap,
                                format!(
                                    "heap slot {slot:#x} of table #{table} has word 0 zero in a formatted chunk,                                      whose free slots hold the free marker: the slot was zeroed"
                                ),
                            ));
                        }
                        scan.clean.push((table, slot));
                        continue;
                    }
                    SlotContent::Invalid => {
                        erase.push((table, slot));
                        let suspect = suspect_of(&buffer[at..at + geometry.slot_size as usize], table, slot, &geometry)
                            .map_err(|detail| damaged_slot(table, slot, detail))?;
                        scan.suspects.push(suspect);
                        continue;
                    }
                    SlotContent::Tuple(tuple) => tuple,
                };
                scan.max_cts = scan.max_cts.max(tuple.cts);
                let max_id = &mut scan.max_tuple_id[table as usize];
                *max_id = (*max_id).max(tuple.tuple_id);
                if let Some(dirty) = window {
                    if tuple.cts > dirty {
                        // A correct engine writes no version above the
                        // latest durable window's c_d: the record log lost
                        // its latest record (or the slot is damaged under a
                        // valid CRC).
                        return Err(DbError::corrupt(
                            Structure::WblLog,
                            format!(
                                "wbl heap slot {slot:#x} holds Tx-CTS {:#x}, above the durable window's c_d {dirty:#x}: \
                                 the record log lost its latest window",
                                tuple.cts
                            ),
                        ));
                    }
                } else if tuple.lp && tuple.cts > scan.ts_commit {
                    scan.ts_commit = tuple.cts;
                    scan.lp_slot = slot;
                }
                if tuple.cts <= scan.ts_commit {
                    self.update_index_gc(
                        table,
                        tuple.key,
                        tuple.cts,
                        tuple.deleted,
                        tuple.tuple_id,
                        tuple.value.len(),
                        slot,
                    )?;
                } else {
                    pending.push(Pending {
                        table,
                        slot,
                        cts: tuple.cts,
                        deleted: tuple.deleted,
                        tuple_id: tuple.tuple_id,
                        key: tuple.key.to_vec(),
                        value_len: tuple.value.len(),
                    });
                }
            }
        }
        for tuple in pending {
            if tuple.cts <= scan.ts_commit {
                self.update_index_gc(
                    tuple.table,
                    &tuple.key,
                    tuple.cts,
                    tuple.deleted,
                    tuple.tuple_id,
                    tuple.value_len,
                    tuple.slot,
                )?;
            } else {
                // The crash hit while this transaction was persisting, or
                // (window rule) before its window's record was durable.
                erase.push((tuple.table, tuple.slot));
                scan.uncommitted.push((tuple.cts, tuple.slot));
            }
        }
        // Erased by `recover` once every region is scanned and no slot
        // proved damaged.
        scan.erase = erase;
        Ok(scan)
    }
}

/// Runs recovery over `pool` into `tables` and `heap` (which must have a
/// region for every thread owning heap chunks).
pub(crate) fn recover<B: PmBackend>(
    pool: &Pool<B>,
    tables: &[Table<Row>],
    metas: &[ZenTableMeta],
    heap: &Heap,
    lp_rank: &[u32],
    horizon: CommitHorizon,
) -> DbResult<Recovered> {
    let started = Instant::now();
    let regions = heap.regions.len();
    let mut chunks: Vec<Vec<(u32, ChunkId, bool)>> = vec![Vec::new(); regions];
    for (chunk, owner) in pool.owned_chunks() {
        if !is_heap_chunk_kind(owner.kind()) {
            continue;
        }
        let formatted = owner.kind() == HEAP_CHUNK_KIND_FORMATTED;
        let (table, thread) = (owner.group(), owner.thread() as usize);
        if table as usize >= tables.len() || thread >= regions {
            return Err(DbError::corrupt(
                Structure::ChunkTable,
                format!("heap chunk {} is owned by table #{table}, thread {thread}, which do not exist", chunk.0),
            ));
        }
        heap.register_chunk(chunk, table, thread as u16, formatted);
        heap.regions[thread].state.lock().add_recovered_chunk(table, chunk);
        chunks[thread].push((table, chunk, formatted));
    }
    let context = Context { pool, tables, heap, losers: (0..regions).map(|_| Mutex::new(Vec::new())).collect() };
    let scans: Vec<DbResult<RegionScan>> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|region_chunks| {
                let context = &context;
                scope.spawn(move || context.scan_region(region_chunks, lp_rank, horizon))
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("recovery scan thread panicked")).collect()
    });
    let scans = scans.into_iter().collect::<DbResult<Vec<RegionScan>>>()?;
    let mut newest_by_id: Option<Vec<std::collections::HashMap<u64, u64>>> = None;
    // Refuse the pool before erasing anything if a CRC-invalid slot is not
    // what a crash leaves (module documentation, "Damage").
    for scan in &scans {
        if horizon == CommitHorizon::LastPersisted {
            // One transaction of a region persists at a time, after at most
            // one pipelined commit whose LP line was not yet fenced (the
            // persisting one's first fence covers it), and one that does not
            // commit is erased before the region commits anything else
            // (`zen+`'s direct writes): every slot above the horizon holds
            // the Tx-CTS of one of those two. A third Tx-CTS means committed
            // tuples lost their LP tuple (zeroed, or its Tx-CTS damaged).
            let above = scan.uncommitted.iter().copied().chain(
                scan.suspects
                    .iter()
                    .filter(|suspect| suspect.cts > scan.ts_commit)
                    .map(|suspect| (suspect.cts, suspect.slot)),
            );
            let mut seen: [Option<(u64, u64)>; 2] = [None, None];
            for (cts, slot) in above {
                match seen {
                    [None, _] => seen[0] = Some((cts, slot)),
                    [Some((first, _)), _] if first == cts => {}
                    [Some(_), None] => seen[1] = Some((cts, slot)),
                    [Some(_), Some((second, _))] if second == cts => {}
                    [Some((first, first_slot)), Some((second, second_slot))] => {
                        return Err(DbError::corrupt(
                            Structure::ZenHeap,
                            format!(
                                "heap slots {first_slot:#x}, {second_slot:#x} and {slot:#x} hold uncommitted Tx-CTS \
                                 {first:#x}, {second:#x} and {cts:#x} of one region (its commit horizon is {:#x}): \
                                 committed tuples lost their LP tuple",
                                scan.ts_commit
                            ),
                        ));
                    }
                }
            }
        }
        for suspect in &scan.suspects {
            let damaged = |detail: String| Err(damaged_slot(suspect.table, suspect.slot, detail));
            let above = match horizon {
                CommitHorizon::LastPersisted => suspect.cts > scan.ts_commit,
                CommitHorizon::Window { persisted, dirty } => {
                    if suspect.cts > dirty {
                        return damaged(format!(
                            "it claims Tx-CTS {:#x}, above the durable window's c_d {dirty:#x}",
                            suspect.cts
                        ));
                    }
                    suspect.cts > persisted
                }
            };
            if above {
                // The transaction persisting at the crash: its tuples are
                // torn, but none has its LP bit, stored only once the whole
                // transaction was durable.
                if suspect.lp && horizon == CommitHorizon::LastPersisted {
                    return damaged(format!(
                        "it carries the LP bit with Tx-CTS {:#x}, above its region's commit horizon {:#x}",
                        suspect.cts, scan.ts_commit
                    ));
                }
                continue;
            }
            // Claims a committed Tx-CTS: only a torn reuse of a superseded
            // version is that. A superseded version that is not a
            // tombstone has a newer committed version of its row in the
            // heap, found by key and by tuple ID (a row keeps its tuple ID
            // until its tombstone is released, and a tombstone is
            // released only after the sweep erased its key's older
            // versions). A released tombstone's key may have no version
            // left, but none older than it.
            let table = &tables[suspect.table as usize];
            let newer = |recovered: Option<u64>| recovered.is_some_and(|recovered| recovered > suspect.cts);
            let by_key = suspect
                .key
                .as_ref()
                .map(|key| table.lookup(key).filter(|row| row.slot() != 0).map(|row| record::tid_of(row.word())));
            if let Some(recovered) = by_key {
                let released_tombstone = suspect.deleted && recovered.is_none();
                if !released_tombstone && !newer(recovered) {
                    return damaged(format!(
                        "it claims committed Tx-CTS {:#x} of key {:02x?}, whose newest intact version is {}: a \
                         committed version is damaged",
                        suspect.cts,
                        suspect.key.as_deref().unwrap_or_default(),
                        recovered.map_or("none".to_string(), |cts| format!("{cts:#x}"))
                    ));
                }
            }
            if !suspect.deleted {
                let by_id = newest_by_id.get_or_insert_with(|| {
                    tables
                        .iter()
                        .map(|table| {
                            let mut newest = std::collections::HashMap::new();
                            table.for_each_row(|_, row: &Row| {
                                if row.slot() != 0 {
                                    newest.insert(row.tuple_id(), record::tid_of(row.word()));
                                }
                            });
                            newest
                        })
                        .collect::<Vec<_>>()
                });
                let recovered = by_id[suspect.table as usize].get(&suspect.tuple_id).copied();
                if !newer(recovered) {
                    return damaged(format!(
                        "it claims committed Tx-CTS {:#x} of tuple {}, whose newest intact version is {}: a committed \
                         version is damaged",
                        suspect.cts,
                        suspect.tuple_id,
                        recovered.map_or("none".to_string(), |cts| format!("{cts:#x}"))
                    ));
                }
            }
        }
    }
    let backend = pool.backend();
    let mut scans = scans;
    for scan in &mut scans {
        if scan.erase.is_empty() {
            continue;
        }
        for &(table, slot) in &scan.erase {
            backend.store_u64(slot, heap.free_word(slot));
            backend.flush(slot, 8);
            scan.clean.push((table, slot));
        }
        // IMPORTANT: discarded tuples are gone before any new commit can
        // raise this region's ts_commit above them.
        backend.fence();
        scan.discarded = scan.erase.len() as u64;
    }
    let mut report = RecoveryReport { clean_shutdown: pool.begin_engine_session(), ..Default::default() };
    let mut max_cts = 0;
    let mut max_tuple_id = vec![0u64; tables.len()];
    for (index, scan) in scans.into_iter().enumerate() {
        report.heap_slots_scanned += scan.scanned;
        report.heap_tuples_discarded += scan.discarded;
        max_cts = max_cts.max(scan.max_cts);
        for (max, found) in max_tuple_id.iter_mut().zip(&scan.max_tuple_id) {
            *max = (*max).max(*found);
        }
        let mut state = heap.regions[index].state.lock();
        // The pin first: a freed pinned slot is held back.
        state.set_recovered(scan.lp_slot, scan.max_cts);
        for (table, slot) in scan.clean {
            state.add_free(table, slot, SlotKind::Clean);
        }
        for (slot, kind) in context.losers[index].lock().drain(..) {
            let (table, _) = heap.owner_of(slot);
            state.add_free(table, slot, kind);
        }
    }
    let mut live = 0u64;
    for (table_index, table) in tables.iter().enumerate() {
        metas[table_index].next_tuple_id.store(max_tuple_id[table_index] + 1, Ordering::Relaxed);
        let mut value = Vec::new();
        let mut result = Ok(());
        table.for_each_row(|key, row: &Row| {
            let word = row.word();
            let slot = row.slot();
            if slot == 0 {
                return;
            }
            if word & ABSENT != 0 {
                let (_, region) = heap.owner_of(slot);
                let tombstone = Tombstone::new(table_index as u32, key, row, slot, record::tid_of(word), 0);
                heap.regions[region].state.lock().add_tombstone(tombstone);
                return;
            }
            live += 1;
            if table.schema.secondaries.is_empty() || result.is_err() {
                return;
            }
            value.resize(row.len(), 0);
            backend.read(slot + META_LEN + key.len() as u64, &mut value);
            result = table.index_secondaries(key, &value, row);
        });
        result?;
    }
    if heap.naive_alloc {
        for region in 0..regions {
            heap.rebuild_bitmaps(pool, region);
        }
    }
    report.heap_tuples_recovered = live;
    report.duration = started.elapsed();
    Ok(Recovered { max_cts, report })
}
