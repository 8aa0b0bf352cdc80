//! openraft's log storage and state machine, over the node's pool.

use crate::local::{decode, encode, meta, TablesImage};
use crate::shared::Shared;
use crate::types::{NodeId, TypeConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership, Vote,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::PathBuf;
use std::sync::Arc;

type StorageResult<T> = Result<T, StorageError<NodeId>>;

fn read_error(error: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read(&error).into()
}

fn write_error(error: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::write(&error).into()
}

/// The live log entries, kept in memory as well as in the pool so that
/// replication reads them without decoding rows.
type Entries = Arc<Mutex<BTreeMap<u64, Entry<TypeConfig>>>>;

/// The Raft log and vote of a node, in `__raft_log` and `__raft_meta`.
pub(crate) struct LogStore {
    shared: Arc<Shared>,
    entries: Entries,
    /// One past the highest index whose rows may exist in the pool (the
    /// stored rows at open, then every append): appends below it clear the
    /// index's old rows first.
    written_end: u64,
    /// The lowest index whose rows may exist in the pool (a purge a crash
    /// cut short leaves rows below the live entries).
    rows_from: u64,
}

impl LogStore {
    /// Loads the stored log.
    pub fn open(shared: Arc<Shared>) -> Result<Self, pmtx_engine::DbError> {
        let mut entries = BTreeMap::new();
        let mut rows_from = u64::MAX;
        let purged = shared.local.get_meta::<Option<LogId<NodeId>>>(meta::PURGED)?.flatten().map(|log_id| log_id.index);
        for (index, bytes) in shared.local.read_log()? {
            rows_from = rows_from.min(index);
            if purged.is_some_and(|purged| index <= purged) {
                // Left by a purge a crash cut short; the next purge deletes it.
                continue;
            }
            let entry: Entry<TypeConfig> = decode(&bytes, "log entry")?;
            if entry.log_id.index != index {
                return Err(pmtx_engine::DbError::Corrupt(format!(
                    "replication log row {index} holds entry {}",
                    entry.log_id.index
                )));
            }
            entries.insert(index, entry);
        }
        // Rows a crash left past a truncation count as written.
        let written_end = entries.keys().next_back().map_or(0, |last| last + 1);
        let store = Self { shared, entries: Arc::new(Mutex::new(entries)), written_end, rows_from };
        store.note_end(&store.entries.lock());
        Ok(store)
    }

    /// Publishes where the log ends now.
    fn note_end(&self, live: &BTreeMap<u64, Entry<TypeConfig>>) {
        let end = live.keys().next_back().map_or(0, |last| last + 1);
        self.shared.log_end.store(end, std::sync::atomic::Ordering::Release);
        *self.shared.last_log.lock() =
            live.values().next_back().map(|entry| (entry.log_id.leader_id.term, entry.log_id.index));
    }
}

/// Reads log entries for replication.
pub(crate) struct LogReader {
    entries: Entries,
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Ok(self.entries.lock().range(range).map(|(_, entry)| entry.clone()).collect())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        LogReader { entries: Arc::clone(&self.entries) }.try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let purged: Option<LogId<NodeId>> =
            self.shared.local.get_meta::<Option<LogId<NodeId>>>(meta::PURGED).map_err(read_error)?.flatten();
        let last = self.entries.lock().values().next_back().map(|entry| entry.log_id).or(purged);
        Ok(LogState { last_purged_log_id: purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader { entries: Arc::clone(&self.entries) }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.shared.local.put_meta(meta::VOTE, vote).map_err(write_error)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.shared.local.get_meta(meta::VOTE).map_err(read_error)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let encoded: Vec<(u64, Vec<u8>)> = entries.iter().map(|entry| (entry.log_id.index, encode(entry))).collect();
        // Rows past the log's end can only be left by a truncation that a
        // crash interrupted: overwrite when appending at or before the
        // highest index ever written since the open.
        let first = encoded.first().map_or(u64::MAX, |(index, _)| *index);
        let overwrite = first < self.written_end;
        self.written_end = self.written_end.max(encoded.last().map_or(0, |(index, _)| index + 1));
        // The pool's commit is durable when it returns: the flush is done.
        let result = self.shared.local.append_log(&encoded, overwrite);
        match result {
            Ok(()) => {
                let mut live = self.entries.lock();
                for entry in entries {
                    live.insert(entry.log_id.index, entry);
                }
                self.note_end(&live);
                drop(live);
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                let message = error.to_string();
                callback.log_io_completed(Err(std::io::Error::other(message)));
                Err(write_error(error))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let last = self.entries.lock().keys().next_back().copied();
        if let Some(last) = last {
            if last >= log_id.index {
                self.shared.local.delete_log(log_id.index, last + 1, true).map_err(write_error)?;
            }
        }
        let mut live = self.entries.lock();
        live.retain(|index, _| *index < log_id.index);
        self.note_end(&live);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // Record the purge first: entries at or below it are never read
        // again, so rows a crash leaves behind are only dead weight, and
        // they are deleted by the next purge.
        self.shared.local.put_meta(meta::PURGED, &Some(log_id)).map_err(write_error)?;
        let first = self.entries.lock().keys().next().copied();
        let from = first.unwrap_or(log_id.index + 1).min(self.rows_from);
        self.shared.local.delete_log(from, log_id.index + 1, false).map_err(write_error)?;
        self.rows_from = log_id.index + 1;
        self.entries.lock().retain(|index, _| *index > log_id.index);
        Ok(())
    }
}

/// A snapshot kept beside the pool: its meta and its data.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    data: Vec<u8>,
    crc: u32,
}

/// The file that holds a node's current snapshot.
pub(crate) fn snapshot_path(pool: &std::path::Path) -> PathBuf {
    let mut name = pool.as_os_str().to_owned();
    name.push(".snapshot");
    PathBuf::from(name)
}

fn save_snapshot(
    path: &std::path::Path,
    meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
    data: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    let stored = StoredSnapshot { meta: meta.clone(), data: data.to_vec(), crc: crc32fast::hash(data) };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&encode(&stored))?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(directory) = path.parent() {
        if let Ok(directory) = std::fs::File::open(directory) {
            let _ = directory.sync_all();
        }
    }
    Ok(())
}

/// A snapshot's meta and data.
pub(crate) type SnapshotParts = (SnapshotMeta<NodeId, openraft::BasicNode>, Vec<u8>);

/// Reads the snapshot kept at `path`, if there is one.
pub(crate) fn load_snapshot(path: &std::path::Path) -> std::io::Result<Option<SnapshotParts>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let stored: StoredSnapshot = bincode::deserialize(&bytes).map_err(|error| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {error}", path.display()))
    })?;
    if crc32fast::hash(&stored.data) != stored.crc {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: checksum mismatch", path.display()),
        ));
    }
    Ok(Some((stored.meta, stored.data)))
}

/// The state machine: the user tables of the pool.
pub(crate) struct StateMachine {
    shared: Arc<Shared>,
}

impl StateMachine {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Builds snapshots from the pool's tables.
pub(crate) struct SnapshotBuilder {
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let shared = Arc::clone(&self.shared);
        let (meta, data) = tokio::task::spawn_blocking(move || -> Result<_, Box<StorageError<NodeId>>> {
            // No leader transaction half-way, nothing applied meanwhile.
            let _gate = shared.gate.write();
            let _apply = shared.apply_lock.lock();
            let local = &shared.local;
            let image = local.dump_tables().map_err(|error| Box::new(read_error(error)))?;
            let applied: Option<LogId<NodeId>> = local
                .get_meta::<Option<LogId<NodeId>>>(meta::APPLIED)
                .map_err(|error| Box::new(read_error(error)))?
                .flatten();
            let membership: StoredMembership<NodeId, openraft::BasicNode> =
                local.get_meta(meta::MEMBERSHIP).map_err(|error| Box::new(read_error(error)))?.unwrap_or_default();
            let id = match applied {
                Some(log_id) => format!("{}-{}-{}", log_id.leader_id.term, log_id.index, std::process::id()),
                None => format!("empty-{}", std::process::id()),
            };
            let meta = SnapshotMeta { last_log_id: applied, last_membership: membership, snapshot_id: id };
            let data = encode(&image);
            save_snapshot(&snapshot_path(&local.path), &meta, &data).map_err(|error| Box::new(write_error(error)))?;
            Ok((meta, data))
        })
        .await
        .map_err(|error| write_error(std::io::Error::other(error.to_string())))?
        .map_err(|error| *error)?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

/// Installs a snapshot's tables: marks the pool as being installed, loads
/// the tables, then records the snapshot's applied log id and membership
/// and clears the mark. After a crash with the mark set, the open redoes
/// the load from the snapshot file.
pub(crate) fn install(
    local: &crate::local::Local,
    meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
    data: &[u8],
) -> Result<(), crate::error::ReplicaError> {
    let image: TablesImage = decode(data, "snapshot")?;
    local.put_meta(meta::INSTALLING, &meta.snapshot_id)?;
    local.load_tables(&image)?;
    let applied = encode(&meta.last_log_id);
    let membership = encode(&meta.last_membership);
    local.db.run(|tx| {
        tx.put(local.meta, meta::APPLIED, &applied)?;
        tx.put(local.meta, meta::MEMBERSHIP, &membership)?;
        tx.delete(local.meta, meta::INSTALLING)?;
        Ok(())
    })?;
    Ok(())
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, openraft::BasicNode>)> {
        let local = &self.shared.local;
        let applied = local.get_meta::<Option<LogId<NodeId>>>(meta::APPLIED).map_err(read_error)?.flatten();
        let membership = local.get_meta(meta::MEMBERSHIP).map_err(read_error)?.unwrap_or_default();
        Ok((applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<crate::types::Applied>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let shared = &self.shared;
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let _apply = shared.apply_lock.lock();
        let own = shared.current_origin();
        // Consecutive entries are applied in one transaction (up to a
        // membership entry, which ends a group).
        let mut start = 0;
        while start < entries.len() {
            let mut end = start;
            let mut membership = None;
            while end < entries.len() && membership.is_none() && end - start < 64 {
                if let EntryPayload::Membership(config) = &entries[end].payload {
                    membership = Some(encode(&StoredMembership::new(Some(entries[end].log_id), config.clone())));
                }
                end += 1;
            }
            let group = &entries[start..end];
            let batches: Vec<(&crate::types::Batch, bool)> = group
                .iter()
                .filter_map(|entry| match &entry.payload {
                    EntryPayload::Normal(batch) => Some((batch, batch.origin == own)),
                    _ => None,
                })
                .collect();
            let last = group.last().expect("a group has an entry").log_id;
            shared
                .local
                .apply(&batches, &encode(&Some(last)), membership.as_deref())
                .map_err(|error| StorageError::from(StorageIOError::apply(last, &error)))?;
            if let Some(last_seq) = batches
                .iter()
                .filter(|(batch, here)| *here && !batch.txns.is_empty())
                .map(|(batch, _)| batch.last_seq())
                .max()
            {
                let mut acks = shared.acks.lock();
                if acks.incarnation == own.incarnation && last_seq > acks.applied_seq {
                    acks.applied_seq = last_seq;
                    shared.acks_changed.notify_all();
                }
            }
            start = end;
        }
        Ok(vec![crate::types::Applied; entries.len()])
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { shared: Arc::clone(&self.shared) }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let shared = Arc::clone(&self.shared);
        let meta = meta.clone();
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            save_snapshot(&snapshot_path(&shared.local.path), &meta, &data).map_err(|error| error.to_string())?;
            let _gate = shared.gate.write();
            let _apply = shared.apply_lock.lock();
            install(&shared.local, &meta, &data).map_err(|error| error.to_string())
        })
        .await
        .map_err(|error| write_error(std::io::Error::other(error.to_string())))?
        .map_err(|error| write_error(std::io::Error::other(error)))
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let loaded = load_snapshot(&snapshot_path(&self.shared.local.path)).map_err(read_error)?;
        Ok(loaded.map(|(meta, data)| Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}
