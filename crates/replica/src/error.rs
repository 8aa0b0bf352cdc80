//! Errors of a replicated database.

use crate::types::NodeId;
use pmtx_engine::DbError;

/// Why a replicated call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The node does not lead the cluster (or leads but has not caught up
    /// yet): send writes and linearizable reads to the leader.
    #[error("node {node} is not the leader{}", match leader {
        Some((id, addr)) => format!("; the leader is node {id} at {addr}"),
        None => "; no leader is known now".to_string(),
    })]
    NotLeader {
        /// This node.
        node: NodeId,
        /// The leader this node knows of, with its address.
        leader: Option<(NodeId, String)>,
    },
    /// The transaction committed on the leader but the leader lost its
    /// leadership before a majority acknowledged it: it may or may not be
    /// in the replicated history (a new leader decides). Not acknowledged.
    #[error("node {node} lost its leadership before the commit was replicated; its outcome is unknown")]
    OutcomeUnknown {
        /// This node.
        node: NodeId,
    },
    /// The local database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// Raft failed, or a request could not be carried out.
    #[error("replication: {0}")]
    Raft(String),
    /// The node is shutting down or shut down.
    #[error("node {0} is shut down")]
    Shutdown(NodeId),
    /// Options that cannot work.
    #[error("invalid replication options: {0}")]
    InvalidConfig(String),
    /// The pool is not a replica's pool, or its replication state is damaged.
    #[error("pool {path}: {detail}")]
    BadPool {
        /// The pool file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// A file beside the pool (snapshot) failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Result of replicated calls.
pub type ReplicaResult<T> = Result<T, ReplicaError>;
