//! A replicated database: one node of a cluster, its transactions, its
//! leadership monitor and its server.
//!
//! A transaction runs on the leader with the local engine. Each write is
//! recorded as an after-image (shipped) and a before-image (kept in the
//! pool's undo table, written in the same transaction). The commit is
//! sequenced: a mutex around validation and install gives each committed
//! transaction a sequence number in commit order, and write sets enter the
//! proposal queue in that order, so the Raft log order agrees with the
//! engine's serial order for conflicting transactions. The caller is
//! acknowledged when its commit is durable in the local pool and its batch
//! has been committed by a majority and applied. When leadership ends, the
//! node rolls back what it executed and is not applied, from the undo rows;
//! entries of that leadership that a new leader commits are replayed like
//! any other.

use crate::error::{ReplicaError, ReplicaResult};
use crate::local::{meta, Local, UNDO_RING};
use crate::network::{read_frame, write_frame, Faults, FaultyNetwork, Message, Reply, TcpNetwork, TrafficCounter};
use crate::shared::Shared;
use crate::storage::{load_snapshot, snapshot_path, LogStore, StateMachine};
use crate::types::{
    encode_record, AdminReply, AdminRequest, Batch, NodeId, NodeStatus, Origin, PoolChecksum, TypeConfig, WriteSet,
};
use openraft::raft::AppendEntriesResponse;
use openraft::{BasicNode, ChangeMembers, Config, Raft, ServerState, SnapshotPolicy};
use pmtx_engine::{
    CommitHook, DbError, DbOptions, DbResult, Outcome, TableId, Transaction, TxError, TxResult, Worker, WriteRecorder,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to run one node.
#[derive(Clone)]
pub struct ReplicaOptions {
    /// This node's id (unique in the cluster, never reused).
    pub id: NodeId,
    /// The local pool: its file, engine and (when created) user tables.
    /// Any durable engine works; replication adds three tables of its own.
    pub db: DbOptions,
    /// Address to listen on for peers and `pmtx cluster` (`127.0.0.1:0`
    /// picks a port: see [`ReplicatedDatabase::addr`]).
    pub listen: String,
    /// Address peers use to reach this node (default: the bound address).
    pub advertise: Option<String>,
    /// Raft's election timeout range, in milliseconds.
    pub election_timeout_ms: (u64, u64),
    /// Raft's heartbeat interval, in milliseconds.
    pub heartbeat_ms: u64,
    /// When the leader's connection to this node closes, stand for
    /// election as soon as the leader lease (the longest election timeout)
    /// is out, if this node's log is the most up to date of the voters',
    /// instead of waiting one more election timeout (docs/replication.md,
    /// "Failover"). On by default.
    pub fast_failover: bool,
    /// Build a snapshot after this many entries since the last one.
    pub snapshot_every: u64,
    /// Entries kept behind a snapshot (for followers that are a little
    /// behind, instead of sending them the snapshot).
    pub keep_behind_snapshot: u64,
    /// Most write sets in one log entry.
    pub max_batch: usize,
    /// How long a commit waits for a majority before it is reported as
    /// [`ReplicaError::OutcomeUnknown`].
    pub commit_timeout: Duration,
    /// Faults to inject into this node's outgoing Raft messages (tests).
    pub faults: Option<Arc<Faults>>,
    /// A deliberately broken behaviour, for the tests' controls (a test
    /// that cannot fail proves nothing): never set it otherwise.
    pub control: Option<Control>,
}

/// Deliberately broken behaviours a test turns on to check that it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Acknowledge a commit once it is durable on the leader, without
    /// waiting for a majority.
    AcknowledgeBeforeMajority,
    /// Keep what the node executed when its leadership ends instead of
    /// rolling it back.
    SkipRollback,
}

impl Control {
    /// Parses `acknowledge-before-majority` or `skip-rollback`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "acknowledge-before-majority" => Some(Self::AcknowledgeBeforeMajority),
            "skip-rollback" => Some(Self::SkipRollback),
            _ => None,
        }
    }
}

impl ReplicaOptions {
    /// Defaults: elections after 300-600 ms, heartbeats every 100 ms, a
    /// snapshot every 10,000 entries keeping 1,000 behind it, batches of up
    /// to 512 transactions, commits wait up to 5 s.
    pub fn new(id: NodeId, db: DbOptions, listen: impl Into<String>) -> Self {
        Self {
            id,
            db,
            listen: listen.into(),
            advertise: None,
            election_timeout_ms: (300, 600),
            heartbeat_ms: 100,
            fast_failover: true,
            snapshot_every: 10_000,
            keep_behind_snapshot: 1_000,
            max_batch: 512,
            commit_timeout: Duration::from_secs(5),
            faults: None,
            control: None,
        }
    }

    fn raft_config(&self) -> ReplicaResult<Config> {
        let config = Config {
            cluster_name: "pmtx".into(),
            election_timeout_min: self.election_timeout_ms.0,
            election_timeout_max: self.election_timeout_ms.1,
            heartbeat_interval: self.heartbeat_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_behind_snapshot,
            install_snapshot_timeout: 2_000,
            ..Default::default()
        };
        config.validate().map_err(|error| ReplicaError::InvalidConfig(error.to_string()))
    }
}

/// One node of a replicated pmtx cluster (see the module documentation).
pub struct ReplicatedDatabase {
    shared: Arc<Shared>,
    raft: Raft<TypeConfig>,
    core: Arc<NodeCore>,
    runtime: Option<tokio::runtime::Runtime>,
    addr: String,
    traffic: Arc<TrafficCounter>,
    /// Worker slots for the application ([`DbOptions::workers`] as given).
    app_workers: usize,
    /// Replicated workers idle between [`ReplicatedDatabase::run`] calls.
    idle: parking_lot::Mutex<Vec<Worker>>,
}

/// Worker ids kept for Raft's own transactions (log appends, applies,
/// votes, roll-backs); the application's workers come after them.
const INTERNAL_WORKERS: usize = 4;

/// Tokens name a commit for its acknowledgement: the incarnation above
/// bit 40, the sequence number (writes) or the last sequence number the
/// reads may have seen (reads, with bit 63 set).
const READ_TOKEN: u64 = 1 << 63;
const INCARNATION_SHIFT: u32 = 40;

fn token(read: bool, incarnation: u64, seq: u64) -> u64 {
    debug_assert!(seq < 1 << INCARNATION_SHIFT && incarnation < 1 << 22);
    (if read { READ_TOKEN } else { 0 }) | incarnation << INCARNATION_SHIFT | seq
}

fn untoken(token: u64) -> (bool, u64, u64) {
    let read = token & READ_TOKEN != 0;
    let incarnation = (token & !READ_TOKEN) >> INCARNATION_SHIFT;
    (read, incarnation, token & ((1 << INCARNATION_SHIFT) - 1))
}

/// What one attempt wrote: after-images to ship, before-images to keep,
/// each packed as records into one buffer (no allocation per write).
#[derive(Default)]
struct Recording {
    writes: WriteSet,
    /// Before-image records, in write order.
    undo: Vec<u8>,
    /// Where each record of `undo` ends.
    undo_ends: Vec<usize>,
    /// An undo row being built (header and records).
    undo_row: Vec<u8>,
}

/// The commit hook of a replicated worker: records the writes, sequences
/// the commit, adds the undo rows, and acknowledges once replicated.
struct ReplicaHook {
    node: Arc<NodeCore>,
    recording: Recording,
    /// Held from the attempt's first operation to its end.
    gate: Option<parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>>,
    /// The commit sequencer, held from `before_commit` to `after_commit`.
    sequencer: Option<parking_lot::ArcMutexGuard<parking_lot::RawMutex, crate::shared::Leadership>>,
    /// The read-only commit's incarnation, between the two calls.
    reading: Option<Origin>,
    last_token: u64,
    /// Undo rows the last `before_commit` wrote.
    undo_rows: u32,
}

/// What a node's hooks and its handle share.
pub(crate) struct NodeCore {
    shared: Arc<Shared>,
    raft: Raft<TypeConfig>,
    runtime: tokio::runtime::Handle,
    commit_timeout: Duration,
    control: Option<Control>,
}

impl NodeCore {
    fn not_leader(&self) -> DbError {
        DbError::Replication { detail: not_leader(&self.raft, self.shared.id).to_string(), committed: false }
    }

    fn unknown(&self, why: &str) -> DbError {
        DbError::Replication {
            detail: format!("node {}: {why}; the commit's outcome is unknown", self.shared.id),
            committed: true,
        }
    }

    /// Waits until every transaction of `incarnation` up to `seq` is applied.
    fn wait_applied(&self, incarnation: u64, seq: u64) -> DbResult<()> {
        let deadline = Instant::now() + self.commit_timeout;
        let shared = &self.shared;
        let mut acks = shared.acks.lock();
        loop {
            if acks.incarnation == incarnation && acks.applied_seq >= seq {
                return Ok(());
            }
            if acks.shutdown {
                return Err(self.unknown("the node shut down"));
            }
            if acks.incarnation != incarnation {
                return Err(self.unknown("the node lost its leadership before the commit was replicated"));
            }
            if Instant::now() >= deadline {
                return Err(self.unknown(&format!("no majority within {:?}", self.commit_timeout)));
            }
            shared.acks_changed.wait_for(&mut acks, Duration::from_millis(50));
        }
    }

    /// Makes reads taken on this leader linearizable: confirms with a
    /// majority that it still leads (so no newer leader committed what the
    /// reads missed), then waits until every commit they may have seen is
    /// replicated.
    fn confirm_reads(&self, incarnation: u64, seen: u64) -> DbResult<()> {
        self.runtime.block_on(self.raft.ensure_linearizable()).map_err(|_| self.not_leader())?;
        if self.shared.leadership.lock().origin.incarnation != incarnation {
            return Err(self.not_leader());
        }
        self.wait_applied(incarnation, seen)
    }
}

impl ReplicaHook {
    /// The commit sequencer, once the ring holds no live undo row in the
    /// slot of its next sequence number (`local.rs`: that slot's previous
    /// transaction is applied). Waits without it (the proposer needs it to
    /// propose the transactions before) up to the commit timeout.
    fn sequence_with_undo_room(
        &self,
    ) -> TxResult<parking_lot::ArcMutexGuard<parking_lot::RawMutex, crate::shared::Leadership>> {
        let shared = &self.node.shared;
        let deadline = std::time::Instant::now() + self.node.commit_timeout;
        loop {
            let leadership = shared.leadership.lock_arc();
            if !leadership.active {
                drop(leadership);
                return Err(TxError::Db(self.node.not_leader()));
            }
            let (incarnation, seq) = (leadership.origin.incarnation, leadership.next_seq);
            let mut acks = shared.acks.lock();
            if acks.incarnation != incarnation || seq <= acks.applied_seq + UNDO_RING {
                return Ok(leadership);
            }
            drop(leadership);
            while acks.incarnation == incarnation && seq > acks.applied_seq + UNDO_RING && !acks.shutdown {
                if shared.acks_changed.wait_until(&mut acks, deadline).timed_out() {
                    return Err(TxError::Db(DbError::Replication {
                        detail: format!(
                            "{UNDO_RING} transactions executed here wait for a majority (none answered within {:?}); \
                             nothing of this one was committed",
                            self.node.commit_timeout
                        ),
                        committed: false,
                    }));
                }
            }
            if acks.shutdown {
                return Err(TxError::Db(self.node.not_leader()));
            }
        }
    }
}

impl WriteRecorder for ReplicaHook {
    fn record(&mut self, table: TableId, key: &[u8], before: Option<&[u8]>, after: Option<&[u8]>) {
        let recording = &mut self.recording;
        recording.writes.push(table.0, key, after);
        encode_record(table.0, key, before, &mut recording.undo);
        recording.undo_ends.push(recording.undo.len());
    }
}

impl CommitHook for ReplicaHook {
    fn begin_attempt(&mut self, _read_only: bool) {
        self.recording.writes.clear();
        self.recording.undo.clear();
        self.recording.undo_ends.clear();
        if self.gate.is_none() {
            self.gate = Some(self.node.shared.gate.read_arc());
        }
    }

    fn before_commit(&mut self, tx: &mut Transaction<'_>) -> TxResult<()> {
        let shared = &self.node.shared;
        if self.recording.writes.is_empty() {
            let leadership = shared.leadership.lock();
            if !leadership.active {
                return Err(TxError::Db(self.node.not_leader()));
            }
            self.reading = Some(leadership.origin);
            return Ok(());
        }
        let leadership = self.sequence_with_undo_room()?;
        let (origin, seq) = (leadership.origin, leadership.next_seq);
        let (undo_table, limit) = (shared.local.undo, shared.local.undo_row_limit);
        // The before-images, packed into as few rows as fit: a row is the
        // header and the records from `start` to `end`.
        let (undo, row) = (&self.recording.undo, &mut self.recording.undo_row);
        let header = crate::local::undo_header(origin.incarnation, seq);
        let (mut rows, mut start, mut end) = (0u32, 0usize, 0usize);
        for &record_end in &self.recording.undo_ends {
            if end > start && record_end - start > limit {
                row.clear();
                row.extend_from_slice(&header);
                row.extend_from_slice(&undo[start..end]);
                // On failure the guard drops with the error: the sequencer is free.
                tx.put(undo_table, &Local::undo_key(seq, rows), row)?;
                rows += 1;
                start = end;
            }
            end = record_end;
        }
        row.clear();
        row.extend_from_slice(&header);
        row.extend_from_slice(&undo[start..end]);
        tx.put(undo_table, &Local::undo_key(seq, rows), row)?;
        self.undo_rows = rows + 1;
        self.sequencer = Some(leadership);
        Ok(())
    }

    fn after_commit(&mut self, committed: bool) {
        let shared = &self.node.shared;
        if let Some(origin) = self.reading.take() {
            if committed {
                let leadership = shared.leadership.lock();
                self.last_token = token(true, origin.incarnation, leadership.next_seq - 1);
            }
            return;
        }
        let Some(mut leadership) = self.sequencer.take() else { return };
        if committed {
            let seq = leadership.next_seq;
            leadership.next_seq += 1;
            self.last_token = token(false, leadership.origin.incarnation, seq);
            let mut writes = self.recording.writes.take();
            writes.undo_rows = self.undo_rows;
            shared.proposals.lock().push_back((seq, writes));
            drop(leadership);
            shared.proposals_ready.notify_one();
        }
    }

    fn end_attempt(&mut self) {
        self.sequencer = None;
        self.reading = None;
        self.gate = None;
    }

    fn last_token(&self) -> u64 {
        self.last_token
    }

    fn is_acknowledged(&self, token: u64) -> bool {
        if token == 0 || self.node.control == Some(Control::AcknowledgeBeforeMajority) {
            return true;
        }
        // A pipelined read is acknowledged once what it saw is replicated
        // (its leadership is confirmed by the replication itself).
        let (_, incarnation, seq) = untoken(token);
        let acks = self.node.shared.acks.lock();
        acks.incarnation == incarnation && acks.applied_seq >= seq
    }

    fn wait_acknowledged(&mut self, token: u64) -> DbResult<()> {
        if token == 0 {
            return Ok(());
        }
        let (read, incarnation, seq) = untoken(token);
        if read {
            return self.node.confirm_reads(incarnation, seq);
        }
        if self.node.control == Some(Control::AcknowledgeBeforeMajority) {
            return Ok(());
        }
        self.node.wait_applied(incarnation, seq)
    }
}

impl ReplicatedDatabase {
    /// Opens (creating if the options say so) the node's pool, recovers
    /// it (redoing an interrupted snapshot install, rolling back what it
    /// executed as leader and did not apply), starts Raft and listens.
    /// A new cluster also needs [`ReplicatedDatabase::initialize`] once,
    /// on one node.
    pub fn open(options: ReplicaOptions) -> ReplicaResult<Self> {
        let config = Arc::new(options.raft_config()?);
        if options.max_batch == 0 {
            return Err(ReplicaError::InvalidConfig("max_batch must be at least 1".into()));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("pmtx-node-{}", options.id))
            .enable_all()
            .build()
            .map_err(|source| ReplicaError::Io { path: "tokio runtime".into(), source })?;
        let mut db = options.db.clone();
        // Raft's own transactions (log appends, applies, votes) need
        // worker slots beside the application's threads.
        let app_workers = db.workers;
        db.workers += INTERNAL_WORKERS;
        let local = Local::open(db, options.id)?;
        let incarnation = recover(&local)?;
        let shared = Arc::new(Shared::new(options.id, local, incarnation));
        let log_store = LogStore::open(Arc::clone(&shared))?;
        let state_machine = StateMachine::new(Arc::clone(&shared));
        let traffic = Arc::new(TrafficCounter::default());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(&options.listen))
            .map_err(|source| ReplicaError::Io { path: options.listen.clone(), source })?;
        let bound =
            listener.local_addr().map_err(|source| ReplicaError::Io { path: options.listen.clone(), source })?;
        let addr = options.advertise.clone().unwrap_or_else(|| bound.to_string());
        let tcp = TcpNetwork::new(Arc::clone(&traffic));
        let raft = match &options.faults {
            Some(faults) => {
                let network = FaultyNetwork::new(tcp, options.id, Arc::clone(faults));
                runtime.block_on(Raft::new(options.id, config, network, log_store, state_machine))
            }
            None => runtime.block_on(Raft::new(options.id, config, tcp, log_store, state_machine)),
        }
        .map_err(|error| ReplicaError::Raft(error.to_string()))?;
        if options.fast_failover {
            let lease = Duration::from_millis(options.election_timeout_ms.1);
            runtime.spawn(crate::failover::watch(raft.clone(), Arc::clone(&shared), lease));
        }
        runtime.spawn(serve(listener, raft.clone(), Arc::clone(&shared), addr.clone(), options.fast_failover));
        runtime.spawn(propose(raft.clone(), Arc::clone(&shared), options.max_batch));
        runtime.spawn(monitor(raft.clone(), Arc::clone(&shared), options.control));
        let core = Arc::new(NodeCore {
            shared: Arc::clone(&shared),
            raft: raft.clone(),
            runtime: runtime.handle().clone(),
            commit_timeout: options.commit_timeout,
            control: options.control,
        });
        Ok(Self {
            shared,
            raft,
            core,
            runtime: Some(runtime),
            addr,
            traffic,
            app_workers,
            idle: parking_lot::Mutex::new(Vec::new()),
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until shutdown")
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.shared.id
    }

    /// The address peers reach this node at.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Bytes this node has sent to peers (Raft messages).
    pub fn bytes_sent(&self) -> u64 {
        self.traffic.bytes()
    }

    /// Table id by name.
    pub fn table_id(&self, name: &str) -> ReplicaResult<TableId> {
        if name.starts_with("__raft_") {
            return Err(pmtx_engine::DbError::UnknownTable(name.to_string()).into());
        }
        Ok(self.shared.local.db.table_id(name)?)
    }

    /// Starts a new cluster whose voters are `members` (`(id, address)`),
    /// this node among them. Call once, on one node of a new cluster.
    pub fn initialize(&self, members: &[(NodeId, String)]) -> ReplicaResult<()> {
        initialize(&self.raft, &self.shared, members, &self.addr, self.runtime())
    }

    /// Waits until this node accepts transactions (leads and has caught
    /// up) or another node is known to lead; returns the leader's id, or
    /// `None` after `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Option<NodeId> {
        let deadline = Instant::now() + timeout;
        loop {
            let metrics = self.raft.metrics().borrow().clone();
            match metrics.current_leader {
                Some(leader) if leader != self.shared.id => return Some(leader),
                Some(leader) if self.shared.leadership.lock().active => return Some(leader),
                _ => {}
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether this node accepts transactions now.
    pub fn is_leader(&self) -> bool {
        self.shared.leadership.lock().active
    }

    /// This node's status.
    pub fn status(&self) -> NodeStatus {
        status(&self.raft, &self.shared)
    }

    fn not_leader(&self) -> ReplicaError {
        not_leader(&self.raft, self.shared.id)
    }

    /// A worker for application thread slot `id` whose transactions are
    /// replicated: [`Worker::run`] and [`Worker::run_read_only`] return
    /// once acknowledged as [`ReplicatedDatabase::run`] says; pipelined
    /// commits ([`Worker::run_pipelined`]) are reported by
    /// [`Worker::drain_acknowledged`] once durable here and replicated. A
    /// commit refused because this node does not lead fails with
    /// [`DbError::Replication`] (`committed: false`); one whose replication
    /// failed, with `committed: true` (its outcome is unknown).
    pub fn worker(&self, id: usize) -> ReplicaResult<Worker> {
        if id >= self.app_workers {
            return Err(ReplicaError::InvalidConfig(format!(
                "worker {id} requested but the node was opened for {} application workers",
                self.app_workers
            )));
        }
        let mut worker = self.shared.local.db.worker(INTERNAL_WORKERS + id)?;
        worker.set_commit_hook(Box::new(ReplicaHook {
            node: Arc::clone(&self.core),
            recording: Recording::default(),
            gate: None,
            sequencer: None,
            reading: None,
            last_token: 0,
            undo_rows: 0,
        }));
        Ok(worker)
    }

    /// A replicated worker for the calling thread, from the idle ones or new.
    fn lend(&self) -> ReplicaResult<Worker> {
        if let Some(worker) = self.idle.lock().pop() {
            return Ok(worker);
        }
        let deadline = Instant::now() + self.shared.local.db.options().worker_wait;
        loop {
            for id in 0..self.app_workers {
                match self.worker(id) {
                    Ok(worker) => return Ok(worker),
                    Err(ReplicaError::Db(DbError::WorkerInUse(_))) => continue,
                    Err(error) => return Err(error),
                }
            }
            if let Some(worker) = self.idle.lock().pop() {
                return Ok(worker);
            }
            if Instant::now() >= deadline {
                return Err(DbError::NoFreeWorker { workers: self.app_workers, waited: Duration::ZERO }.into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn map_error(&self, error: DbError) -> ReplicaError {
        match error {
            DbError::Replication { committed: false, .. } => self.not_leader(),
            DbError::Replication { committed: true, .. } => {
                if self.shared.acks.lock().shutdown {
                    ReplicaError::Shutdown(self.shared.id)
                } else {
                    ReplicaError::OutcomeUnknown { node: self.shared.id }
                }
            }
            other => ReplicaError::Db(other),
        }
    }

    fn with_worker<T>(&self, work: impl FnOnce(&mut Worker) -> DbResult<T>) -> ReplicaResult<T> {
        if !self.shared.leadership.lock().active {
            return Err(self.not_leader());
        }
        let mut worker = self.lend()?;
        let result = work(&mut worker);
        self.idle.lock().push(worker);
        result.map_err(|error| self.map_error(error))
    }

    /// Runs `body` (the same body [`pmtx_engine::Database::run`] takes) as
    /// a replicated transaction on this node, which must lead
    /// ([`ReplicaError::NotLeader`] names the leader otherwise). Aborts are
    /// retried; returns once the commit is durable here and committed by a
    /// majority ([`ReplicaError::OutcomeUnknown`] if that cannot be known:
    /// not acknowledged). A body that wrote nothing is confirmed as
    /// [`ReplicatedDatabase::run_read_only`] confirms. Call it from an
    /// ordinary thread, not from inside an async runtime (it blocks).
    pub fn run<R>(&self, mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>) -> ReplicaResult<Outcome<R>> {
        self.with_worker(|worker| worker.run(&mut body)).map(|finished| finished.outcome)
    }

    /// Runs a read-only `body` linearizably: on the leader, confirming its
    /// leadership with a majority after the reads (Raft's read index), and
    /// returning only once every write it may have seen is committed.
    pub fn run_read_only<R>(
        &self,
        mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> ReplicaResult<Outcome<R>> {
        self.with_worker(|worker| worker.run_read_only(&mut body)).map(|finished| finished.outcome)
    }

    /// Runs a read-only `body` on this node's pool as of its applied log
    /// index, which it returns beside the result: on a follower the data
    /// may be stale (labelled by that index); on the leader the read is
    /// linearizable ([`ReplicatedDatabase::run_read_only`]) and the index is
    /// `None`.
    pub fn read_stale<R>(
        &self,
        mut body: impl FnMut(&mut Transaction<'_>) -> TxResult<R>,
    ) -> ReplicaResult<(Outcome<R>, Option<u64>)> {
        if self.shared.leadership.lock().active {
            return self.run_read_only(body).map(|outcome| (outcome, None));
        }
        let _gate = self.shared.gate.read();
        if !self.shared.leadership.lock().clean {
            return Err(self.not_leader());
        }
        let local = &self.shared.local;
        let mut applied = None;
        let finished = local.db.run_read_only(|tx| {
            let bytes = tx.get(local.meta, meta::APPLIED)?;
            applied = bytes
                .map(|bytes| crate::local::decode::<Option<openraft::LogId<NodeId>>>(&bytes, "applied"))
                .transpose()?
                .flatten()
                .map(|log_id| log_id.index);
            body(tx)
        })?;
        Ok((finished.outcome, applied))
    }

    /// Adds node `id` at `addr`: first as a learner (it catches up from a
    /// snapshot and the log), then as a voter, through joint consensus.
    /// Call on the leader.
    pub fn add_node(&self, id: NodeId, addr: &str) -> ReplicaResult<()> {
        self.runtime().block_on(add_node(&self.raft, self.shared.id, id, addr.to_string()))
    }

    /// Removes node `id` from the voters and learners (joint consensus).
    /// Call on the leader.
    pub fn remove_node(&self, id: NodeId) -> ReplicaResult<()> {
        self.runtime().block_on(remove_node(&self.raft, self.shared.id, id))
    }

    /// A checksum of every user table as of the applied index, taken with
    /// no transaction half-way (compare it across replicas once they have
    /// applied the same index).
    pub fn checksum(&self) -> ReplicaResult<PoolChecksum> {
        checksum(&self.shared)
    }

    /// Stops Raft and closes the pool cleanly.
    pub fn shutdown(mut self) -> ReplicaResult<()> {
        self.stop()
    }

    fn stop(&mut self) -> ReplicaResult<()> {
        let Some(runtime) = self.runtime.take() else { return Ok(()) };
        self.idle.lock().clear();
        {
            let mut acks = self.shared.acks.lock();
            acks.shutdown = true;
            self.shared.acks_changed.notify_all();
        }
        self.shared.leadership.lock().active = false;
        let result = runtime.block_on(self.raft.shutdown()).map_err(|error| ReplicaError::Raft(error.to_string()));
        runtime.shutdown_timeout(Duration::from_secs(2));
        result
    }
}

impl Drop for ReplicatedDatabase {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Brings a pool to its applied state at open and returns the incarnation
/// to start from.
fn recover(local: &Local) -> ReplicaResult<u64> {
    if local.get_meta::<String>(meta::INSTALLING)?.is_some() {
        let path = snapshot_path(&local.path);
        let (snapshot_meta, data) = load_snapshot(&path)
            .map_err(|source| ReplicaError::Io { path: path.display().to_string(), source })?
            .ok_or_else(|| ReplicaError::BadPool {
                path: local.path.display().to_string(),
                detail: format!("a snapshot install was interrupted and {} is missing", path.display()),
            })?;
        crate::storage::install(local, &snapshot_meta, &data)?;
    }
    let incarnation = local.get_meta::<u64>(meta::INCARNATION)?.unwrap_or(0);
    if local.has_undo()? {
        local.roll_back_unapplied(incarnation + 1)?;
        return Ok(incarnation + 1);
    }
    Ok(incarnation)
}

fn not_leader(raft: &Raft<TypeConfig>, id: NodeId) -> ReplicaError {
    let metrics = raft.metrics().borrow().clone();
    let leader = metrics.current_leader.filter(|leader| *leader != id).map(|leader| {
        let addr = metrics.membership_config.membership().get_node(&leader).map(|node| node.addr.clone());
        (leader, addr.unwrap_or_default())
    });
    ReplicaError::NotLeader { node: id, leader }
}

fn status(raft: &Raft<TypeConfig>, shared: &Shared) -> NodeStatus {
    let metrics = raft.metrics().borrow().clone();
    let membership = metrics.membership_config.membership();
    let address = |id: NodeId| membership.get_node(&id).map(|node| node.addr.clone()).unwrap_or_default();
    NodeStatus {
        id: shared.id,
        role: format!("{:?}", metrics.state),
        term: metrics.current_term,
        leader: metrics.current_leader.map(|leader| (leader, address(leader))),
        last_log_index: metrics.last_log_index,
        last_log_term: shared.last_log.lock().map(|(term, _)| term),
        applied_index: metrics.last_applied.map(|log_id| log_id.index),
        voters: membership.voter_ids().map(|id| (id, address(id))).collect(),
        learners: membership.learner_ids().map(|id| (id, address(id))).collect(),
        accepting_writes: shared.leadership.lock().active,
    }
}

fn checksum(shared: &Shared) -> ReplicaResult<PoolChecksum> {
    let _gate = shared.gate.write();
    let _apply = shared.apply_lock.lock();
    let applied: Option<openraft::LogId<NodeId>> =
        shared.local.get_meta::<Option<openraft::LogId<NodeId>>>(meta::APPLIED)?.flatten();
    Ok(PoolChecksum { applied_index: applied.map(|log_id| log_id.index), tables: shared.local.checksum()? })
}

fn initialize(
    raft: &Raft<TypeConfig>,
    shared: &Shared,
    members: &[(NodeId, String)],
    own_addr: &str,
    runtime: &tokio::runtime::Runtime,
) -> ReplicaResult<()> {
    runtime
        .block_on(raft.initialize(voters(members, shared.id, own_addr)))
        .map_err(|error| ReplicaError::Raft(error.to_string()))
}

/// The voters of a new cluster: `members`, and this node if not among them.
fn voters(members: &[(NodeId, String)], me: NodeId, own_addr: &str) -> BTreeMap<NodeId, BasicNode> {
    let mut nodes: BTreeMap<NodeId, BasicNode> = members.iter().map(|(id, addr)| (*id, BasicNode::new(addr))).collect();
    nodes.entry(me).or_insert_with(|| BasicNode::new(own_addr));
    nodes
}

async fn add_node(raft: &Raft<TypeConfig>, me: NodeId, id: NodeId, addr: String) -> ReplicaResult<()> {
    let refuse = |error: String| match raft.metrics().borrow().current_leader {
        Some(leader) if leader != me => not_leader(raft, me),
        _ => ReplicaError::Raft(error),
    };
    raft.add_learner(id, BasicNode::new(addr), true).await.map_err(|error| refuse(error.to_string()))?;
    let mut voters: BTreeSet<NodeId> = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
    voters.insert(id);
    raft.change_membership(voters, false).await.map_err(|error| refuse(error.to_string()))?;
    Ok(())
}

async fn remove_node(raft: &Raft<TypeConfig>, me: NodeId, id: NodeId) -> ReplicaResult<()> {
    let membership = raft.metrics().borrow().membership_config.membership().clone();
    let is_voter = membership.voter_ids().any(|voter| voter == id);
    let is_learner = membership.learner_ids().any(|learner| learner == id);
    if !is_voter && !is_learner {
        return Err(ReplicaError::InvalidConfig(format!("node {id} is not a member")));
    }
    let result = if is_voter {
        let voters: BTreeSet<NodeId> = membership.voter_ids().filter(|voter| *voter != id).collect();
        if voters.is_empty() {
            return Err(ReplicaError::InvalidConfig("cannot remove the last voter".into()));
        }
        raft.change_membership(voters, false).await
    } else {
        raft.change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false).await
    };
    result.map(|_| ()).map_err(|error| match raft.metrics().borrow().current_leader {
        Some(leader) if leader != me => not_leader(raft, me),
        _ => ReplicaError::Raft(error.to_string()),
    })
}

/// Proposes queued write sets in sequence order, many per entry.
async fn propose(raft: Raft<TypeConfig>, shared: Arc<Shared>, max_batch: usize) {
    loop {
        shared.proposals_ready.notified().await;
        let _proposing = shared.proposing.lock().await;
        loop {
            let batch = {
                let leadership = shared.leadership.lock();
                let mut queue = shared.proposals.lock();
                if !leadership.active {
                    queue.clear();
                    break;
                }
                let Some(&(first_seq, _)) = queue.front() else { break };
                let take = queue.len().min(max_batch);
                let txns: Vec<WriteSet> = queue.drain(..take).map(|(_, writes)| writes).collect();
                Batch { origin: leadership.origin, first_seq, txns }
            };
            // The responder is not needed: waiters learn of the commit when
            // the entry is applied.
            if raft.client_write_ff(batch).await.is_err() {
                return;
            }
        }
    }
}

/// Follows this node's leadership: activates it once caught up, and rolls
/// back when it ends.
async fn monitor(raft: Raft<TypeConfig>, shared: Arc<Shared>, control: Option<Control>) {
    let mut metrics = raft.metrics();
    loop {
        let (state, term) = {
            let current = metrics.borrow_and_update();
            (current.state, current.current_term)
        };
        let (active, active_term) = {
            let leadership = shared.leadership.lock();
            (leadership.active, leadership.term)
        };
        if active && (state != ServerState::Leader || term != active_term) {
            let shared = Arc::clone(&shared);
            if tokio::task::spawn_blocking(move || step_down(&shared, control)).await.is_err() {
                return;
            }
            continue;
        }
        let retry = if state == ServerState::Leader && !active { !activate(&raft, &shared, term).await } else { false };
        if shared.acks.lock().shutdown {
            return;
        }
        if retry {
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        } else if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Starts accepting transactions as the leader of `term`, once every entry
/// in the log (those of earlier leaders, and any proposal of an earlier
/// leadership of this node) is applied. False if not possible now.
async fn activate(raft: &Raft<TypeConfig>, shared: &Arc<Shared>, term: u64) -> bool {
    let _proposing = shared.proposing.lock().await;
    // The API channel is FIFO: once this answers, every proposal sent
    // before is in the log.
    if raft.with_raft_state(|_| ()).await.is_err() {
        return false;
    }
    let end = shared.log_end.load(Ordering::Acquire);
    if end > 0 {
        let wait = raft.wait(Some(Duration::from_millis(500)));
        if wait.applied_index_at_least(Some(end - 1), "activate").await.is_err() {
            return false;
        }
    }
    let metrics = raft.metrics().borrow().clone();
    if metrics.state != ServerState::Leader || metrics.current_term != term {
        return false;
    }
    let shared = Arc::clone(shared);
    tokio::task::spawn_blocking(move || {
        let _apply = shared.apply_lock.lock();
        let mut leadership = shared.leadership.lock();
        let incarnation = shared.acks.lock().incarnation + 1;
        if shared.local.put_meta(meta::INCARNATION, &incarnation).is_err() {
            return false;
        }
        {
            let mut acks = shared.acks.lock();
            acks.incarnation = incarnation;
            acks.applied_seq = 0;
            shared.acks_changed.notify_all();
        }
        *leadership = crate::shared::Leadership {
            active: true,
            term,
            origin: Origin { node: shared.id, incarnation },
            next_seq: 1,
            clean: false,
        };
        true
    })
    .await
    .unwrap_or(false)
}

/// Ends this node's leadership: refuses new commits, waits for running
/// transactions, rolls back what it executed and is not applied.
fn step_down(shared: &Shared, control: Option<Control>) {
    shared.leadership.lock().active = false;
    let _gate = shared.gate.write();
    let _apply = shared.apply_lock.lock();
    let incarnation = shared.acks.lock().incarnation + 1;
    // A failure here leaves undo rows; the next open rolls them back.
    let rolled_back = if control == Some(Control::SkipRollback) {
        shared.local.put_meta(meta::INCARNATION, &incarnation).is_ok()
    } else {
        shared.local.roll_back_unapplied(incarnation).is_ok()
    };
    shared.proposals.lock().clear();
    {
        let mut acks = shared.acks.lock();
        acks.incarnation = incarnation;
        shared.acks_changed.notify_all();
    }
    let mut leadership = shared.leadership.lock();
    leadership.origin = Origin { node: shared.id, incarnation };
    leadership.clean = rolled_back;
}

/// Answers peers and `pmtx cluster` on `listener`. With fast failover, a
/// connection on which a leader sent appends that closes wakes
/// [`crate::failover::watch`].
async fn serve(
    listener: tokio::net::TcpListener,
    raft: Raft<TypeConfig>,
    shared: Arc<Shared>,
    addr: String,
    fast_failover: bool,
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        let (raft, shared, addr) = (raft.clone(), Arc::clone(&shared), addr.clone());
        tokio::spawn(async move {
            // The leader whose appends this connection carried last.
            let mut leader_here = None;
            while let Ok(Some(message)) = read_frame::<Message>(&mut stream).await {
                let reply = match message {
                    Message::Append(request) => {
                        let from = request.vote.leader_id().voted_for().filter(|_| request.vote.is_committed());
                        let reply = raft.append_entries(request).await;
                        if matches!(&reply, Ok(response) if !matches!(response, AppendEntriesResponse::HigherVote(_))) {
                            *shared.last_append.lock() = Instant::now();
                            leader_here = from;
                        }
                        Reply::Append(reply)
                    }
                    Message::Vote(request) => Reply::Vote(raft.vote(request).await),
                    Message::Snapshot(request) => Reply::Snapshot(raft.install_snapshot(request).await),
                    Message::Admin(request) => Reply::Admin(admin(&raft, &shared, &addr, request).await),
                };
                if write_frame(&mut stream, &reply).await.is_err() {
                    break;
                }
            }
            if let (Some(leader), true) = (leader_here, fast_failover) {
                if leader != shared.id {
                    crate::failover::connection_closed(&shared, leader);
                }
            }
        });
    }
}

async fn admin(raft: &Raft<TypeConfig>, shared: &Arc<Shared>, addr: &str, request: AdminRequest) -> AdminReply {
    let me = shared.id;
    let result = match request {
        AdminRequest::Status => return AdminReply::Status(status(raft, shared)),
        AdminRequest::Add { id, addr } => add_node(raft, me, id, addr).await,
        AdminRequest::Remove { id } => remove_node(raft, me, id).await,
        AdminRequest::Checksum => {
            let shared = Arc::clone(shared);
            return match tokio::task::spawn_blocking(move || checksum(&shared)).await {
                Ok(Ok(sum)) => AdminReply::Checksum(sum),
                Ok(Err(error)) => AdminReply::Error(error.to_string()),
                Err(error) => AdminReply::Error(error.to_string()),
            };
        }
        AdminRequest::Initialize { members } => {
            raft.initialize(voters(&members, me, addr)).await.map_err(|error| ReplicaError::Raft(error.to_string()))
        }
    };
    match result {
        Ok(()) => AdminReply::Done,
        Err(error) => AdminReply::Error(error.to_string()),
    }
}
