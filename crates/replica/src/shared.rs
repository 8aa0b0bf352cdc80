//! The state a node's Raft storage, its leader path and its monitor share.

use crate::local::Local;
use crate::types::{NodeId, Origin, WriteSet};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Where the node's own leadership stands.
#[derive(Debug)]
pub(crate) struct Leadership {
    /// Accepting transactions: leading, and every entry appended before
    /// this leadership began is applied.
    pub active: bool,
    /// The term it leads in while active.
    pub term: u64,
    /// Who executes now: this node and its current incarnation.
    pub origin: Origin,
    /// The sequence number the next committed transaction takes.
    pub next_seq: u64,
    /// No transaction executed here waits to be applied or rolled back:
    /// the pool holds exactly the applied state (false from an activation
    /// until the step-down's roll-back).
    pub clean: bool,
}

/// Acknowledgement bookkeeping of the current incarnation.
#[derive(Debug)]
pub(crate) struct Acks {
    /// The incarnation whose transactions waiters wait for.
    pub incarnation: u64,
    /// Every transaction of it up to this sequence number is applied
    /// (committed by a majority); 0 before any.
    pub applied_seq: u64,
    /// The node is shut down: nothing more will be acknowledged.
    pub shutdown: bool,
}

/// Shared by the storage, the leader path and the monitor of one node.
pub(crate) struct Shared {
    pub id: NodeId,
    pub local: Local,
    /// Held shared by each leader transaction from its first operation to
    /// its commit; taken exclusively to roll back or dump the tables, so
    /// those see no transaction half-way.
    pub gate: Arc<RwLock<()>>,
    /// Serializes applying entries, rolling back and dumping the tables.
    pub apply_lock: Mutex<()>,
    /// The commit sequencer: taken around each leader commit, so commit
    /// order, sequence numbers and the proposal queue agree.
    pub leadership: Arc<Mutex<Leadership>>,
    /// Committed write sets waiting to be proposed, in sequence order.
    pub proposals: Mutex<VecDeque<(u64, WriteSet)>>,
    pub proposals_ready: tokio::sync::Notify,
    pub acks: Mutex<Acks>,
    pub acks_changed: Condvar,
    /// Held while a batch is being proposed; an activation takes it so
    /// that every proposal of an earlier leadership is in the log first.
    pub proposing: tokio::sync::Mutex<()>,
    /// One past the index of the last entry appended to the log (0: none).
    pub log_end: std::sync::atomic::AtomicU64,
    /// The (term, index) of the last entry in the log.
    pub last_log: Mutex<Option<(u64, u64)>>,
    /// When this node last accepted an append (or heartbeat) from a leader.
    pub last_append: Mutex<Instant>,
    /// When a connection on which a leader sent appends last closed, and
    /// that leader.
    pub leader_connection_closed: Mutex<Option<(Instant, NodeId)>>,
    /// Wakes [`crate::failover::watch`] after such a close.
    pub leader_connection_notify: tokio::sync::Notify,
}

impl Shared {
    pub fn new(id: NodeId, local: Local, incarnation: u64) -> Self {
        Self {
            id,
            local,
            gate: Arc::new(RwLock::new(())),
            apply_lock: Mutex::new(()),
            leadership: Arc::new(Mutex::new(Leadership {
                active: false,
                term: 0,
                origin: Origin { node: id, incarnation },
                next_seq: 1,
                clean: true,
            })),
            proposals: Mutex::new(VecDeque::new()),
            proposals_ready: tokio::sync::Notify::new(),
            acks: Mutex::new(Acks { incarnation, applied_seq: 0, shutdown: false }),
            acks_changed: Condvar::new(),
            proposing: tokio::sync::Mutex::new(()),
            log_end: std::sync::atomic::AtomicU64::new(0),
            last_log: Mutex::new(None),
            last_append: Mutex::new(Instant::now()),
            leader_connection_closed: Mutex::new(None),
            leader_connection_notify: tokio::sync::Notify::new(),
        }
    }

    /// The origin whose batches this node's pool holds already.
    pub fn current_origin(&self) -> Origin {
        Origin { node: self.id, incarnation: self.acks.lock().incarnation }
    }
}
