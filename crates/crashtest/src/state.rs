//! Reading the whole logical state of a database, with structural checks.
//!
//! Ordered tables are read through the public API in paged read-only scans;
//! hash tables (no range scans) through the engine's row dump
//! (`Database::for_each_row`, which works on every engine, Zen included)
//! and a point read of every key the dump lists or the caller knows, which
//! must agree with the dump. Alongside, every record is inspected directly:
//! no record may be left locked after recovery, the ordered index must
//! return exactly the live records, point reads of a hash table must match
//! its records, and every secondary index must list exactly the live rows
//! of its table.

use crate::Finding;
use pmtx_engine::internals::record::LOCKED;
use pmtx_engine::{Database, Outcome, PrimaryIndexKind, ScanDirection, TableId, TableSchema, Worker};
use std::collections::BTreeMap;
use std::ops::Bound;

/// Live rows of one table, by key.
pub type TableRows = BTreeMap<Vec<u8>, Vec<u8>>;

/// A (key, value) pair.
type Row = (Vec<u8>, Vec<u8>);

/// Rows per page of the read-only scans.
const PAGE_ROWS: usize = 512;

/// The live rows of every table, in table-id order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbState {
    /// (table name, rows).
    pub tables: Vec<(String, TableRows)>,
}

impl DbState {
    /// Rows of the table named `name` (empty if unknown).
    pub fn table(&self, name: &str) -> &TableRows {
        static EMPTY: TableRows = TableRows::new();
        self.tables.iter().find(|(table, _)| table == name).map_or(&EMPTY, |(_, rows)| rows)
    }

    /// Total number of live rows.
    pub fn rows(&self) -> usize {
        self.tables.iter().map(|(_, rows)| rows.len()).sum()
    }

    /// FNV-1a digest of every (table, key, value), for reports.
    pub fn digest(&self) -> u64 {
        let mut hash = 0xCBF2_9CE4_8422_2325u64;
        let mut feed = |bytes: &[u8]| {
            for &byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
                hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01B3);
            }
        };
        for (name, rows) in &self.tables {
            feed(name.as_bytes());
            for (key, value) in rows {
                feed(key);
                feed(value);
            }
        }
        hash
    }

    /// A short description of the first difference to `other`.
    pub fn first_difference(&self, other: &DbState) -> String {
        for ((name, mine), (_, theirs)) in self.tables.iter().zip(&other.tables) {
            if mine == theirs {
                continue;
            }
            let keys: std::collections::BTreeSet<&Vec<u8>> = mine.keys().chain(theirs.keys()).collect();
            for key in keys {
                let (a, b) = (mine.get(key), theirs.get(key));
                if a != b {
                    return format!(
                        "table {name}: {} rows vs {} rows; key {} is {} vs {}",
                        mine.len(),
                        theirs.len(),
                        hex(key),
                        a.map_or("absent".to_string(), |v| hex(v)),
                        b.map_or("absent".to_string(), |v| hex(v))
                    );
                }
            }
        }
        format!("digests {:#018x} vs {:#018x}", self.digest(), other.digest())
    }
}

/// Hex of at most 24 bytes.
pub fn hex(bytes: &[u8]) -> String {
    let mut text: String = bytes.iter().take(24).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 24 {
        text.push_str(&format!("..({} bytes)", bytes.len()));
    }
    text
}

fn structure(detail: String) -> Finding {
    Finding::new("structure", detail)
}

fn scan_page(
    worker: &mut Worker,
    table: TableId,
    secondary: Option<u32>,
    from: &[u8],
    inclusive: bool,
) -> Result<Vec<Row>, Finding> {
    let lower = if from.is_empty() && inclusive {
        Bound::Unbounded
    } else if inclusive {
        Bound::Included(from)
    } else {
        Bound::Excluded(from)
    };
    let range = (lower, Bound::Unbounded);
    let result = worker.run_pipelined(0, true, |tx| match secondary {
        None => tx.scan(table, range, ScanDirection::Forward, PAGE_ROWS),
        Some(position) => tx.scan_secondary(table, position, range, ScanDirection::Forward, usize::MAX),
    });
    worker.drain_acknowledged(|_, _| {});
    match result {
        Ok((Outcome::Committed(rows), _)) => Ok(rows),
        Ok((Outcome::RolledBack, _)) => Err(structure(format!("a read-only scan of table #{} rolled back", table.0))),
        Err(error) => Err(Finding::new("read-error", format!("scan of table #{} failed: {error}", table.0))),
    }
}

/// Reads every table of `db` (opened with `tables`, in order) and checks the
/// structure. Needs worker slot 0 and a quiescent database.
///
/// Hash tables cannot be scanned through the API: their rows are those of
/// the engine's row dump (`Database::for_each_row`), so rows whose keys
/// nobody predicts (TPC-C's HISTORY) are read too. Every key of the dump,
/// of the records and of `hash_keys(table)` (keys the caller knows must be
/// answered, e.g. Smallbank's account names) is also read with a point
/// read, which must give the dump's value (or absence). The direct record checks (no
/// record left locked, index agrees with records) apply to engines whose
/// tables hold the rows in records; engines that keep rows elsewhere (Zen)
/// leave every record list empty and are checked through the API plus the
/// engine's own audit (`Database::check_structure`; for Zen, no heap slot
/// both live and free).
pub fn read_state(
    db: &Database,
    tables: &[TableSchema],
    hash_keys: &dyn Fn(TableId) -> Vec<Vec<u8>>,
) -> Result<DbState, Finding> {
    let mut worker = db.worker(0).map_err(|error| Finding::new("read-error", format!("worker 0: {error}")))?;
    let mut state = DbState { tables: Vec::with_capacity(tables.len()) };
    let mut uses_records = false;
    for position in 0..tables.len() {
        if let Ok(Some(table)) = pmtx_engine::internals::dram_table(db, TableId(position as u32)) {
            table.for_each_row(|_, _| uses_records = true);
        }
    }
    for (position, schema) in tables.iter().enumerate() {
        let id = TableId(position as u32);
        let table = pmtx_engine::internals::dram_table(db, id)
            .map_err(|error| structure(format!("table {}: {error}", schema.name)))?;
        // Direct view of the records (an engine without them has none).
        let mut direct = TableRows::new();
        let mut locked = Vec::new();
        let mut unstable = Vec::new();
        let mut value = Vec::new();
        table.into_iter().for_each(|table| {
            table.for_each_row(|key, record| {
                if record.word() & LOCKED != 0 {
                    locked.push(key.to_vec());
                    return;
                }
                match record.copy_value(&mut value) {
                    Some(snapshot) if !snapshot.is_absent() => {
                        direct.insert(key.to_vec(), value.clone());
                    }
                    Some(_) => {}
                    None => unstable.push(key.to_vec()),
                }
            })
        });
        if let Some(key) = locked.first() {
            return Err(structure(format!(
                "table {}: {} records left locked after recovery (first key {})",
                schema.name,
                locked.len(),
                hex(key)
            )));
        }
        if let Some(key) = unstable.first() {
            return Err(structure(format!("table {}: record {} has no stable value", schema.name, hex(key))));
        }
        let rows = match schema.primary {
            PrimaryIndexKind::Ordered => {
                let mut scanned = TableRows::new();
                let mut from = Vec::new();
                let mut inclusive = true;
                loop {
                    let page = scan_page(&mut worker, id, None, &from, inclusive)?;
                    let full = page.len() == PAGE_ROWS;
                    for (key, value) in page {
                        if let Some((last, _)) = scanned.last_key_value() {
                            if *last >= key {
                                return Err(structure(format!(
                                    "table {}: scan returned key {} after {} (not ascending)",
                                    schema.name,
                                    hex(&key),
                                    hex(last)
                                )));
                            }
                        }
                        scanned.insert(key, value);
                    }
                    match scanned.last_key_value() {
                        Some((last, _)) if full => {
                            from.clone_from(last);
                            inclusive = false;
                        }
                        _ => break,
                    }
                }
                if uses_records && scanned != direct {
                    let probe = DbState { tables: vec![(schema.name.clone(), scanned)] };
                    let records = DbState { tables: vec![(schema.name.clone(), direct)] };
                    return Err(structure(format!(
                        "the ordered index disagrees with the records: {}",
                        probe.first_difference(&records)
                    )));
                }
                scanned
            }
            PrimaryIndexKind::Hash => {
                let mut dumped = TableRows::new();
                let mut repeated = None;
                db.for_each_row(id, |key, value| {
                    if dumped.insert(key.to_vec(), value.to_vec()).is_some() {
                        repeated.get_or_insert_with(|| key.to_vec());
                    }
                })
                .map_err(|error| {
                    Finding::new("read-error", format!("table {}: row dump failed: {error}", schema.name))
                })?;
                if let Some(key) = repeated {
                    return Err(structure(format!(
                        "table {}: the row dump lists key {} twice",
                        schema.name,
                        hex(&key)
                    )));
                }
                if uses_records && dumped != direct {
                    let dump = DbState { tables: vec![(schema.name.clone(), dumped)] };
                    let records = DbState { tables: vec![(schema.name.clone(), direct)] };
                    return Err(structure(format!(
                        "the row dump disagrees with the records: {}",
                        dump.first_difference(&records)
                    )));
                }
                // Every key must answer a point read with the dump's value.
                let mut keys: std::collections::BTreeSet<Vec<u8>> = dumped.keys().cloned().collect();
                keys.extend(direct.keys().cloned());
                keys.extend(hash_keys(id));
                let keys: Vec<Vec<u8>> = keys.into_iter().collect();
                for chunk in keys.chunks(256) {
                    let result = worker.run_pipelined(0, true, |tx| {
                        let mut found = Vec::with_capacity(chunk.len());
                        for key in chunk {
                            found.push(tx.get(id, key)?);
                        }
                        Ok(found)
                    });
                    worker.drain_acknowledged(|_, _| {});
                    match result {
                        Ok((Outcome::Committed(found), _)) => {
                            let wrong = chunk.iter().zip(found).find(|(key, value)| value.as_ref() != dumped.get(*key));
                            let Some((key, found)) = wrong else { continue };
                            return Err(structure(format!(
                                "table {}: point read of {} gives {} but the row dump holds {}",
                                schema.name,
                                hex(key),
                                found.map_or("absent".into(), |v| hex(&v)),
                                dumped.get(key).map_or("absent".into(), |v| hex(v))
                            )));
                        }
                        Ok((Outcome::RolledBack, _)) => {
                            return Err(structure(format!("table {}: a read-only get rolled back", schema.name)))
                        }
                        Err(error) => {
                            return Err(Finding::new(
                                "read-error",
                                format!("table {}: point reads failed: {error}", schema.name),
                            ))
                        }
                    }
                }
                dumped
            }
        };
        for (position, secondary) in schema.secondaries.iter().enumerate() {
            let listed = scan_page(&mut worker, id, Some(position as u32), &[], true)?;
            let mut seen = std::collections::BTreeSet::new();
            for (key, value) in &listed {
                if rows.get(key) != Some(value) {
                    return Err(structure(format!(
                        "table {}: secondary index {} lists key {} with a value that is not the row's ({})",
                        schema.name,
                        secondary.name,
                        hex(key),
                        rows.get(key).map_or("no such row".to_string(), |_| "different value".to_string())
                    )));
                }
                if !seen.insert(key.clone()) {
                    return Err(structure(format!(
                        "table {}: secondary index {} lists key {} twice",
                        schema.name,
                        secondary.name,
                        hex(key)
                    )));
                }
            }
            if seen.len() != rows.len() {
                return Err(structure(format!(
                    "table {}: secondary index {} lists {} rows, the table has {}",
                    schema.name,
                    secondary.name,
                    seen.len(),
                    rows.len()
                )));
            }
        }
        state.tables.push((schema.name.clone(), rows));
    }
    drop(worker);
    db.check_structure().map_err(|error| structure(format!("engine audit: {error}")))?;
    Ok(state)
}
