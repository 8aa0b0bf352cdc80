//! What the Raft log carries and what crosses the network.

use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// A node's id in the cluster (Raft's node id).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The Raft type configuration of a pmtx cluster: entries carry batches
    /// of committed write sets; a node is a TCP address.
    pub TypeConfig:
        D = Batch,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One write of a committed transaction, as its after-image: what a
/// follower replays. Reads are not shipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// The table's position in the pool's schema.
    pub table: u32,
    /// The row's key.
    pub key: Vec<u8>,
    /// The row's new value; `None` deletes it.
    pub value: Option<Vec<u8>>,
}

/// The writes of one committed transaction, in the order it made them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteSet {
    /// The writes.
    pub writes: Vec<Write>,
    /// Undo rows the executing node wrote for it (its before-images); the
    /// node deletes them when it applies the entry, others ignore it.
    pub undo_rows: u32,
}

/// Which leader term of which node produced a batch: a node's pool holds
/// the writes of its own current leadership already (it executed them),
/// and only those.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// The node that executed the transactions.
    pub node: NodeId,
    /// That node's leadership incarnation (bumped, durably, each time it
    /// starts leading and each time it rolls back what it executed).
    pub incarnation: u64,
}

/// A Raft log entry's payload: the write sets of transactions committed on
/// the leader, consecutive in its commit order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Who executed them.
    pub origin: Origin,
    /// The sequence number of the first write set; the others follow
    /// without gaps.
    pub first_seq: u64,
    /// The write sets, in commit order.
    pub txns: Vec<WriteSet>,
}

impl Batch {
    /// The sequence number of the last write set (`first_seq - 1` if empty).
    pub fn last_seq(&self) -> u64 {
        self.first_seq + self.txns.len() as u64 - 1
    }
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "batch of {} txns from node {} incarnation {} seq {}",
            self.txns.len(),
            self.origin.node,
            self.origin.incarnation,
            self.first_seq
        )
    }
}

/// What applying an entry answers (nothing a client needs: commits are
/// acknowledged through the node's own bookkeeping).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied;

/// The state of one node, as `pmtx cluster status` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// This node's id.
    pub id: NodeId,
    /// Leader, Follower, Candidate, Learner or Shutdown.
    pub role: String,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of, with its address.
    pub leader: Option<(NodeId, String)>,
    /// The index of the last log entry.
    pub last_log_index: Option<u64>,
    /// The index of the last applied entry.
    pub applied_index: Option<u64>,
    /// Voters and learners with their addresses.
    pub voters: Vec<(NodeId, String)>,
    /// Learners (receive the log, do not vote).
    pub learners: Vec<(NodeId, String)>,
    /// Whether this node accepts transactions now (leading and caught up).
    pub accepting_writes: bool,
}

/// A checksum of every user table of a node's pool at an applied index,
/// to compare replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolChecksum {
    /// The applied index the checksum is of.
    pub applied_index: Option<u64>,
    /// Per table: name, rows, CRC-32C of the rows in key order.
    pub tables: Vec<(String, u64, u32)>,
}

/// A request of `pmtx cluster` to a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    /// The node's status.
    Status,
    /// Add a node (as a learner, then a voter): sent to the leader.
    Add {
        /// Its id.
        id: NodeId,
        /// Its address.
        addr: String,
    },
    /// Remove a node from the voters and learners: sent to the leader.
    Remove {
        /// Its id.
        id: NodeId,
    },
    /// A checksum of the user tables, taken when the node is quiet.
    Checksum,
    /// Start a cluster of this node alone, or of the given members.
    Initialize {
        /// Members with addresses.
        members: Vec<(NodeId, String)>,
    },
}

/// A node's answer to an [`AdminRequest`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminReply {
    /// The status.
    Status(NodeStatus),
    /// Done.
    Done,
    /// The checksum.
    Checksum(PoolChecksum),
    /// Refused or failed, with the reason.
    Error(String),
}
