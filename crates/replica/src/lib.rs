//! pmtx-replica: a pmtx pool per node, kept identical by Raft.
//!
//! Transactions execute on the leader with its local engine; their write
//! sets go through the Raft log ([openraft](https://docs.rs/openraft)) in
//! commit order, and followers replay them into their own pools. A commit
//! is acknowledged once it is durable in the leader's pool and committed by
//! a majority. See [`ReplicatedDatabase`] and ARCHITECTURE.md.

pub mod bank;
mod error;
mod failover;
pub mod history;
mod local;
mod network;
mod node;
mod shared;
mod storage;
mod types;

pub use error::{ReplicaError, ReplicaResult};
pub use local::UNDO_RING;
pub use network::{admin_call, Faults, FaultyNetwork, TcpNetwork, TrafficCounter};
pub use node::{Control, ReplicaOptions, ReplicatedDatabase};
pub use types::{
    AdminReply, AdminRequest, Batch, DamagedRecords, NodeId, NodeStatus, Origin, PoolChecksum, Write, WriteSet,
};

/// The tables of a replica's pool for these user tables: the user's, then
/// replication's own (to create and load a pool before its node first
/// opens it, as `pmtx bench --replicas` does).
pub fn pool_tables(user: Vec<pmtx_engine::TableSchema>) -> Vec<pmtx_engine::TableSchema> {
    let system = local::system_tables(&user);
    user.into_iter().chain(system).collect()
}
