//! A node's pool: the user's tables plus three of replication's own, and
//! the synchronous steps on them (log rows, metadata, undo rows, applying
//! write sets, dumping and loading tables for snapshots).
//!
//! Everything replication keeps durable is in the pool, written by the
//! pool's own transactions, so it is exactly as crash-safe as the engine's
//! commits: the Raft log (`__raft_log`, each entry in chunks keyed by index),
//! the vote, committed and purged log ids, applied log id and membership,
//! the leadership incarnation (`__raft_meta`), and the before-images of the
//! transactions this node executed as leader (`__raft_undo`). Applying an
//! entry and recording the applied log id are one transaction, so a
//! restarted node neither skips nor repeats one.
//!
//! The undo rows are a ring of [`UNDO_RING`] slots, overwritten, never
//! deleted: a row is keyed by (sequence number mod the ring, row) and
//! carries the (incarnation, sequence number) of its transaction in a
//! header. It is *live* — its transaction executed here and neither
//! applied nor rolled back — only if its incarnation is the pool's and its
//! sequence number is above the undo watermark (`undo_applied`: the
//! incarnation and last sequence number of the executed transactions
//! applied), which the apply transaction records with the applied log id.
//! Rolling back bumps the incarnation in the same transaction that puts
//! the before-images back, which kills every row at once. The leader never
//! overwrites a live row: a commit more than [`UNDO_RING`] transactions
//! ahead of the watermark waits (`node.rs`, `before_commit`).

use crate::error::{ReplicaError, ReplicaResult};
use crate::types::{Records, WriteSet, RECORD_HEADER};
use pmtx_engine::{Database, DbError, DbOptions, ScanDirection, TableId, TableSchema, TxError, TxResult};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ops::Bound;
use std::path::PathBuf;

/// Replication's tables (names a user table may not take).
pub(crate) const LOG_TABLE: &str = "__raft_log";
pub(crate) const META_TABLE: &str = "__raft_meta";
pub(crate) const UNDO_TABLE: &str = "__raft_undo";

/// Bytes of an entry per log row: entries are split into chunks this long.
const LOG_CHUNK: usize = 4000;
/// Log rows per append transaction (several entries may share one).
const LOG_ROWS_PER_TXN: usize = 64;
/// Rows per transaction when a snapshot is loaded or tables are cleared.
const LOAD_ROWS_PER_TXN: usize = 256;

/// Keys of `__raft_meta`.
pub(crate) mod meta {
    pub const NODE: &[u8] = b"node";
    pub const VOTE: &[u8] = b"vote";
    pub const PURGED: &[u8] = b"purged";
    pub const APPLIED: &[u8] = b"applied";
    pub const MEMBERSHIP: &[u8] = b"membership";
    pub const INCARNATION: &[u8] = b"incarnation";
    pub const INSTALLING: &[u8] = b"installing";
    pub const UNDO_APPLIED: &[u8] = b"undo_applied";
}

/// Slots of the undo-row ring: how many executed transactions may wait to
/// be applied (each slot holds a transaction's rows; zen sizes a row for
/// the widest one the table allows, so the ring holds about this many
/// times 4 KB of pool once it has gone round).
pub const UNDO_RING: u64 = 4096;

/// Bytes before an undo row's records: incarnation and sequence number
/// (little-endian u64s).
const UNDO_HEADER: usize = 16;

/// The schemas of replication's tables, sized for `user` tables.
pub(crate) fn system_tables(user: &[TableSchema]) -> Vec<TableSchema> {
    let widest_row = user.iter().map(|table| table.max_key_len + table.max_value_len).max().unwrap_or(0);
    vec![
        TableSchema::ordered(LOG_TABLE).max_key_len(10).max_value_len(LOG_CHUNK),
        TableSchema::ordered(META_TABLE).max_key_len(32).max_value_len(LOG_CHUNK),
        TableSchema::ordered(UNDO_TABLE).max_key_len(20).max_value_len(UNDO_HEADER + undo_row_limit(widest_row)),
    ]
}

/// Bytes of before-images per undo row: a transaction's records are
/// packed into as few rows as this allows (one record always fits).
pub(crate) fn undo_row_limit(widest_row: usize) -> usize {
    (widest_row + RECORD_HEADER).max(LOG_CHUNK)
}

/// A user table of the pool.
#[derive(Clone, Debug)]
pub(crate) struct UserTable {
    pub id: TableId,
    pub name: String,
}

/// The open pool of a node.
pub(crate) struct Local {
    pub db: Database,
    pub log: TableId,
    pub meta: TableId,
    pub undo: TableId,
    /// Bytes an undo row may hold.
    pub undo_row_limit: usize,
    pub user_tables: Vec<UserTable>,
    /// The pool file (snapshots are kept beside it).
    pub path: PathBuf,
}

fn bad(path: &std::path::Path, detail: impl Into<String>) -> ReplicaError {
    ReplicaError::BadPool { path: path.display().to_string(), detail: detail.into() }
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serialize(value).expect("serializing to a Vec cannot fail")
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, DbError> {
    bincode::deserialize(bytes).map_err(|error| DbError::Corrupt(format!("replication {what}: {error}")))
}

fn log_key(index: u64, chunk: u16) -> [u8; 10] {
    let mut key = [0u8; 10];
    key[..8].copy_from_slice(&index.to_be_bytes());
    key[8..].copy_from_slice(&chunk.to_be_bytes());
    key
}

fn undo_key(seq: u64, row: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&(seq % UNDO_RING).to_be_bytes());
    key[8..].copy_from_slice(&row.to_be_bytes());
    key
}

/// The header of the undo rows of transaction `seq` of `incarnation`.
pub(crate) fn undo_header(incarnation: u64, seq: u64) -> [u8; UNDO_HEADER] {
    let mut header = [0u8; UNDO_HEADER];
    header[..8].copy_from_slice(&incarnation.to_le_bytes());
    header[8..].copy_from_slice(&seq.to_le_bytes());
    header
}

type UndoImage = (TableId, Vec<u8>, Option<Vec<u8>>);

/// A live undo row: its transaction's sequence number, its row number and
/// its before-images.
type LiveUndo = (u64, u32, Vec<UndoImage>);

/// The records of one undo row (before-images, in the record format of
/// write sets: `crate::types::encode_record`), in the order they were
/// written.
fn decode_undo(bytes: &[u8]) -> Result<Vec<UndoImage>, DbError> {
    Records::new(bytes)
        .map(|record| {
            record
                .map(|(table, key, before)| (TableId(table), key.to_vec(), before.map(<[u8]>::to_vec)))
                .map_err(|_| DbError::Corrupt("replication undo row is damaged".into()))
        })
        .collect()
}

/// A table's rows, `(key, value)` in key order.
pub(crate) type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// A snapshot's data: every user table's rows.
#[derive(serde::Serialize, serde::Deserialize, Default)]
pub(crate) struct TablesImage {
    pub tables: Vec<(String, Rows)>,
}

impl Local {
    /// Opens (creating with `options`' user tables if missing) the pool of
    /// node `node`.
    pub fn open(mut options: DbOptions, node: u64) -> ReplicaResult<Self> {
        let path = match &options.pool {
            pmtx_engine::PoolLocation::File { path, .. } => path.clone(),
            pmtx_engine::PoolLocation::InMemory { .. } => {
                return Err(ReplicaError::InvalidConfig("a replica's pool must be a file".into()))
            }
        };
        if !options.engine.is_durable() {
            return Err(ReplicaError::InvalidConfig(format!(
                "engine {} is not durable: a replica's pool must keep what it acknowledged",
                options.engine.name()
            )));
        }
        // Options read from the pool (`DbOptions::from_pool`) list the
        // system tables already; a user's declaration may not name them.
        let system_names = [LOG_TABLE, META_TABLE, UNDO_TABLE];
        let declared_system = options.tables.iter().filter(|table| system_names.contains(&table.name.as_str())).count();
        if declared_system != 3 {
            if let Some(reserved) = options.tables.iter().find(|table| table.name.starts_with("__raft_")) {
                return Err(ReplicaError::InvalidConfig(format!("table name {} is reserved", reserved.name)));
            }
            let user: Vec<TableSchema> = options.tables.clone();
            options.tables.extend(system_tables(&user));
        }
        let db = Database::open(options)?;
        let table = |name: &str| db.table_id(name).map_err(|_| bad(&path, "is not a replica's pool (no table {name})"));
        let (log, meta, undo) = (table(LOG_TABLE)?, table(META_TABLE)?, table(UNDO_TABLE)?);
        let schemas = db.options().tables.clone();
        let user_tables = schemas
            .iter()
            .enumerate()
            .filter(|(_, schema)| !schema.name.starts_with("__raft_"))
            .map(|(position, schema)| UserTable { id: TableId(position as u32), name: schema.name.clone() })
            .collect();
        let undo_row_limit =
            schemas.iter().find(|schema| schema.name == UNDO_TABLE).map_or(0, |schema| schema.max_value_len);
        let local = Self { db, log, meta, undo, undo_row_limit, user_tables, path };
        match local.get_meta::<u64>(meta::NODE)? {
            Some(stored) if stored != node => {
                return Err(bad(&local.path, format!("belongs to node {stored}, not node {node}")));
            }
            Some(_) => {}
            None => local.put_meta(meta::NODE, &node)?,
        }
        Ok(local)
    }

    /// The metadata value of `key`.
    pub fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, DbError> {
        let bytes = self.db.run_read_only(|tx| tx.get(self.meta, key))?.committed().flatten();
        bytes.map(|bytes| decode(&bytes, std::str::from_utf8(key).unwrap_or("metadata"))).transpose()
    }

    /// Sets the metadata value of `key`, durably.
    pub fn put_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), DbError> {
        let bytes = encode(value);
        self.db.run(|tx| tx.put(self.meta, key, &bytes))?;
        Ok(())
    }

    /// Appends encoded entries `(index, bytes)`, durably, in order: a crash
    /// may keep a prefix of them, never a later one without an earlier.
    /// `overwrite`: some indexes may hold rows already (after a truncation
    /// a crash cut short); they are cleared first.
    pub fn append_log(&self, entries: &[(u64, Vec<u8>)], overwrite: bool) -> Result<(), DbError> {
        let mut start = 0;
        while start < entries.len() {
            let mut end = start;
            let mut rows = 0;
            while end < entries.len() && (rows == 0 || rows + chunks(&entries[end].1) <= LOG_ROWS_PER_TXN) {
                rows += chunks(&entries[end].1);
                end += 1;
            }
            let group = &entries[start..end];
            self.db.run(|tx| {
                for (index, bytes) in group {
                    if overwrite {
                        // A rewritten index may have more chunks than the
                        // new entry.
                        delete_log_rows(tx, self.log, *index, *index + 1)?;
                    }
                    for (chunk, part) in bytes.chunks(LOG_CHUNK).enumerate() {
                        tx.put(self.log, &log_key(*index, chunk as u16), part)?;
                    }
                    if bytes.is_empty() {
                        tx.put(self.log, &log_key(*index, 0), &[])?;
                    }
                }
                Ok(())
            })?;
            start = end;
        }
        Ok(())
    }

    /// Deletes the log rows of indexes in `[from, to)`, from the highest
    /// down when `from_top` (a truncation: a crash leaves a prefix, never a
    /// hole) or from the lowest up (a purge: a crash leaves a suffix).
    pub fn delete_log(&self, from: u64, to: u64, from_top: bool) -> Result<(), DbError> {
        let step = LOAD_ROWS_PER_TXN as u64;
        if from_top {
            let mut end = to;
            while end > from {
                let start = end.saturating_sub(step).max(from);
                self.db.run(|tx| delete_log_rows(tx, self.log, start, end))?;
                end = start;
            }
        } else {
            let mut next = from;
            while next < to {
                let upto = next.saturating_add(step).min(to);
                self.db.run(|tx| delete_log_rows(tx, self.log, next, upto))?;
                next = upto;
            }
        }
        Ok(())
    }

    /// Every stored log entry, `(index, bytes)` in index order.
    pub fn read_log(&self) -> Result<Vec<(u64, Vec<u8>)>, DbError> {
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
        self.db.for_each_row(self.log, |key, value| {
            let index = u64::from_be_bytes(key[..8].try_into().unwrap());
            match entries.last_mut() {
                Some((last, bytes)) if *last == index => bytes.extend_from_slice(value),
                _ => entries.push((index, value.to_vec())),
            }
        })?;
        Ok(entries)
    }

    /// The live undo rows (module documentation), in the order they were
    /// written (sequence number, then row).
    fn live_undo(&self) -> Result<Vec<LiveUndo>, DbError> {
        let incarnation = self.get_meta::<u64>(meta::INCARNATION)?.unwrap_or(0);
        let applied = match self.get_meta::<(u64, u64)>(meta::UNDO_APPLIED)? {
            Some((applied_incarnation, seq)) if applied_incarnation == incarnation => seq,
            _ => 0,
        };
        let mut live = Vec::new();
        let mut failure = None;
        self.db.for_each_row(self.undo, |key, value| {
            if failure.is_some() {
                return;
            }
            if key.len() != 12 || value.len() < UNDO_HEADER {
                failure =
                    Some(DbError::Corrupt("replication undo row of another format (written by an older pmtx?)".into()));
                return;
            }
            let row_incarnation = u64::from_le_bytes(value[..8].try_into().expect("8 bytes"));
            let seq = u64::from_le_bytes(value[8..16].try_into().expect("8 bytes"));
            if row_incarnation != incarnation || seq <= applied {
                return;
            }
            let row = u32::from_be_bytes(key[8..].try_into().expect("4 bytes"));
            match decode_undo(&value[UNDO_HEADER..]) {
                Ok(records) => live.push((seq, row, records)),
                Err(error) => failure = Some(error),
            }
        })?;
        if let Some(error) = failure {
            return Err(error);
        }
        live.sort_unstable_by_key(|&(seq, row, _)| (seq, row));
        debug_assert!(live.last().is_none_or(|&(last, _, _)| last - live[0].0 < UNDO_RING));
        Ok(live)
    }

    /// Before-images of every transaction executed here and not applied,
    /// in the order they were written.
    fn undo_images(&self) -> Result<Vec<UndoImage>, DbError> {
        Ok(self.live_undo()?.into_iter().flat_map(|(_, _, images)| images).collect())
    }

    /// Whether executed transactions wait to be applied or rolled back.
    pub fn has_undo(&self) -> Result<bool, DbError> {
        Ok(!self.live_undo()?.is_empty())
    }

    /// Rolls back every transaction executed here and not applied (newest
    /// first) and sets the incarnation to `incarnation` (which kills every
    /// undo row), in one transaction: afterwards the pool holds the state
    /// at its applied log id. Call with no transaction running.
    pub fn roll_back_unapplied(&self, incarnation: u64) -> Result<usize, DbError> {
        let images = self.undo_images()?;
        let inc = encode(&incarnation);
        self.db.run(|tx| {
            for (table, key, before) in images.iter().rev() {
                match before {
                    Some(value) => tx.put(*table, key, value)?,
                    None => {
                        tx.delete(*table, key)?;
                    }
                }
            }
            tx.put(self.meta, meta::INCARNATION, &inc)
        })?;
        Ok(images.len())
    }

    /// Applies entries' effects and records the last one's log id as
    /// applied (and a membership entry's membership), in one transaction.
    /// Each item is `(batch, executed_here)` of a data entry: executed
    /// here, a batch's writes are in the pool already, and the undo
    /// watermark moves past its transactions.
    pub fn apply(
        &self,
        batches: &[(&crate::types::Batch, bool)],
        applied: &[u8],
        membership: Option<&[u8]>,
    ) -> Result<(), DbError> {
        let mut watermark = None;
        for (batch, executed_here) in batches {
            if *executed_here && !batch.txns.is_empty() {
                let last = batch.last_seq();
                watermark = Some(watermark.map_or(last, |seen: u64| seen.max(last)));
            }
        }
        // Executed here: the batches' origin is this node's present one.
        let watermark = watermark.map(|seq| {
            let origin = batches.iter().find(|(_, here)| *here).expect("an executed batch").0.origin;
            encode(&(origin.incarnation, seq))
        });
        self.db.run(|tx| {
            for (batch, executed_here) in batches {
                if !*executed_here {
                    for txn in &batch.txns {
                        replay(tx, txn)?;
                    }
                }
            }
            if let Some(watermark) = &watermark {
                tx.put(self.meta, meta::UNDO_APPLIED, watermark)?;
            }
            if let Some(membership) = membership {
                tx.put(self.meta, meta::MEMBERSHIP, membership)?;
            }
            tx.put(self.meta, meta::APPLIED, applied)
        })?;
        Ok(())
    }

    /// Every user table's rows as of the applied log id: the pool's rows
    /// with the unapplied transactions' before-images put back. Call with
    /// no transaction running and nothing applied meanwhile.
    pub fn dump_tables(&self) -> Result<TablesImage, DbError> {
        let mut image = TablesImage::default();
        let mut maps: Vec<std::collections::BTreeMap<Vec<u8>, Vec<u8>>> = Vec::new();
        for table in &self.user_tables {
            let mut rows = std::collections::BTreeMap::new();
            self.db.for_each_row(table.id, |key, value| {
                rows.insert(key.to_vec(), value.to_vec());
            })?;
            maps.push(rows);
        }
        for (table, key, before) in self.undo_images()?.into_iter().rev() {
            let Some(position) = self.user_tables.iter().position(|user| user.id == table) else {
                return Err(DbError::Corrupt(format!("undo row names table #{}", table.0)));
            };
            match before {
                Some(value) => maps[position].insert(key, value),
                None => maps[position].remove(&key),
            };
        }
        for (table, rows) in self.user_tables.iter().zip(maps) {
            image.tables.push((table.name.clone(), rows.into_iter().collect()));
        }
        Ok(image)
    }

    /// Deletes every row of `table`, a group of rows per transaction.
    fn clear_table(&self, table: TableId) -> Result<(), DbError> {
        let mut keys = Vec::new();
        self.db.for_each_row(table, |key, _| keys.push(key.to_vec()))?;
        for group in keys.chunks(LOAD_ROWS_PER_TXN) {
            self.db.run(|tx| {
                for key in group {
                    tx.delete(table, key)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Replaces every user table's rows with `image`'s, in several
    /// transactions (the caller makes the whole idempotent and marks it).
    pub fn load_tables(&self, image: &TablesImage) -> ReplicaResult<()> {
        for table in &self.user_tables {
            self.clear_table(table.id)?;
        }
        self.clear_table(self.undo)?;
        for (name, rows) in &image.tables {
            let table = self
                .user_tables
                .iter()
                .find(|table| &table.name == name)
                .ok_or_else(|| bad(&self.path, format!("a snapshot holds table {name}, which this pool lacks")))?;
            for group in rows.chunks(LOAD_ROWS_PER_TXN) {
                self.db.run(|tx| {
                    for (key, value) in group {
                        tx.put(table.id, key, value)?;
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    /// CRC-32C-like checksum (crc32fast) and row count of each user table
    /// as of the applied log id.
    pub fn checksum(&self) -> Result<Vec<(String, u64, u32)>, DbError> {
        let image = self.dump_tables()?;
        Ok(image
            .tables
            .iter()
            .map(|(name, rows)| {
                let mut hasher = crc32fast::Hasher::new();
                for (key, value) in rows {
                    hasher.update(&(key.len() as u32).to_le_bytes());
                    hasher.update(key);
                    hasher.update(&(value.len() as u32).to_le_bytes());
                    hasher.update(value);
                }
                (name.clone(), rows.len() as u64, hasher.finalize())
            })
            .collect())
    }

    /// The key of undo row `position` of transaction `seq` (its slot of
    /// the ring).
    pub fn undo_key(seq: u64, position: u32) -> [u8; 12] {
        undo_key(seq, position)
    }
}

fn chunks(bytes: &[u8]) -> usize {
    bytes.len().div_ceil(LOG_CHUNK).max(1)
}

fn delete_log_rows(tx: &mut pmtx_engine::Transaction<'_>, log: TableId, from: u64, to: u64) -> TxResult<()> {
    let (low, high) = (log_key(from, 0), log_key(to, 0));
    let rows =
        tx.scan(log, (Bound::Included(&low[..]), Bound::Excluded(&high[..])), ScanDirection::Forward, usize::MAX)?;
    for (key, _) in rows {
        tx.delete(log, &key)?;
    }
    Ok(())
}

/// Replays one transaction's writes.
fn replay(tx: &mut pmtx_engine::Transaction<'_>, txn: &WriteSet) -> TxResult<()> {
    for record in txn.records() {
        let (table, key, value) =
            record.map_err(|_| TxError::Db(DbError::Corrupt("replication write set is damaged".into())))?;
        match value {
            Some(value) => tx.put(TableId(table), key, value)?,
            None => {
                tx.delete(TableId(table), key)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::encode_record;
    use pmtx_engine::{EngineKind, PoolLocation};
    use std::collections::BTreeMap;

    fn open(dir: &std::path::Path) -> Local {
        let path = dir.join("node.pool");
        let tables = vec![TableSchema::ordered("t").max_key_len(8).max_value_len(8)];
        let mut options = DbOptions::new(EngineKind::Zen, tables, path.clone()).create_if_missing(true);
        options.pool = PoolLocation::File { path, size: 64 << 20 };
        options.checkpoint_interval = None;
        Local::open(options, 1).unwrap()
    }

    /// Executes transaction `seq` of `incarnation` as a leader does: puts
    /// `seq` under key `seq % 7` and writes the before-image as its undo
    /// row in the same transaction.
    fn execute(local: &Local, table: TableId, incarnation: u64, seq: u64) {
        let key = (seq % 7).to_be_bytes();
        local
            .db
            .run(|tx| {
                let before = tx.get(table, &key)?;
                let mut row = undo_header(incarnation, seq).to_vec();
                encode_record(table.0, &key, before.as_deref(), &mut row);
                tx.put(local.undo, &Local::undo_key(seq, 0), &row)?;
                tx.put(table, &key, &seq.to_le_bytes())
            })
            .unwrap();
    }

    fn count(local: &Local, table: TableId) -> u64 {
        let mut count = 0;
        local.db.for_each_row(table, |_, _| count += 1).unwrap();
        count
    }

    fn rows(local: &Local, table: TableId) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut rows = BTreeMap::new();
        local.db.for_each_row(table, |key, value| drop(rows.insert(key.to_vec(), value.to_vec()))).unwrap();
        rows
    }

    /// The ring goes round more than once with the watermark trailing; a
    /// roll-back then restores exactly the state at the watermark, kills
    /// every row without deleting one, and the ring never grows past its
    /// slots. Rows of an older incarnation are dead whatever their number.
    #[test]
    fn the_undo_ring_rolls_back_exactly_what_is_above_the_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let local = open(dir.path());
        let table = local.user_tables[0].id;
        local.put_meta(meta::INCARNATION, &1u64).unwrap();
        let executed = 2 * UNDO_RING + 37;
        let behind = UNDO_RING - 3;
        let mut at_watermark = BTreeMap::new();
        for seq in 1..=executed {
            execute(&local, table, 1, seq);
            if seq > behind {
                local.put_meta(meta::UNDO_APPLIED, &(1u64, seq - behind)).unwrap();
            }
            if seq == executed - behind {
                at_watermark = rows(&local, table);
            }
        }
        let undo_rows = count(&local, local.undo);
        assert_eq!(undo_rows, UNDO_RING, "the ring holds one row per slot");
        assert!(local.has_undo().unwrap());
        assert_eq!(local.live_undo().unwrap().len() as u64, behind);
        let rolled_back = local.roll_back_unapplied(2).unwrap();
        assert_eq!(rolled_back as u64, behind);
        assert_eq!(rows(&local, table), at_watermark);
        assert!(!local.has_undo().unwrap());
        assert_eq!(count(&local, local.undo), undo_rows);
        // Incarnation 2: the old rows stay dead as new ones are written
        // into their slots, and only the new ones roll back.
        execute(&local, table, 2, 1);
        execute(&local, table, 2, 2);
        assert_eq!(local.live_undo().unwrap().iter().map(|&(seq, _, _)| seq).collect::<Vec<_>>(), [1, 2]);
        local.roll_back_unapplied(3).unwrap();
        assert_eq!(rows(&local, table), at_watermark);
    }

    /// An undo row of the earlier format (keyed by incarnation, sequence
    /// number and row) is refused with a typed error, not misread.
    #[test]
    fn an_undo_row_of_another_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let local = open(dir.path());
        local.db.run(|tx| tx.put(local.undo, &[0u8; 20], b"records")).unwrap();
        match local.has_undo() {
            Err(DbError::Corrupt(detail)) => assert!(detail.contains("another format"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }
}
