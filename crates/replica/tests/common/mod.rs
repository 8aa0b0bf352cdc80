//! An in-process cluster on loopback for the replication tests: each node
//! has its own pool file, Raft over TCP, and the shared fault injector.

#![allow(dead_code)]

use pmtx_engine::{DbOptions, EngineKind, PoolLocation, TableSchema, TxResult};
use pmtx_replica::{Faults, NodeId, ReplicaError, ReplicaOptions, ReplicatedDatabase};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const ACCOUNTS: u64 = 16;
pub const INITIAL: u64 = 1_000;

pub fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("accounts").max_value_len(8), TableSchema::ordered("transfers").max_value_len(24)]
}

pub fn pool_path(dir: &Path, id: NodeId) -> PathBuf {
    dir.join(format!("node{id}.pool"))
}

pub fn node_options(dir: &Path, id: NodeId, engine: EngineKind, faults: &Arc<Faults>) -> ReplicaOptions {
    let mut db = DbOptions::new(engine, tables(), pool_path(dir, id)).create_if_missing(true);
    db.pool = PoolLocation::File { path: pool_path(dir, id), size: 256 << 20 };
    db.checkpoint_interval = None;
    db.epoch_interval = Duration::from_millis(2);
    let mut options = ReplicaOptions::new(id, db, "127.0.0.1:0");
    options.election_timeout_ms = (150, 300);
    options.heartbeat_ms = 40;
    options.commit_timeout = Duration::from_secs(2);
    options.faults = Some(Arc::clone(faults));
    options
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub engine: EngineKind,
    pub faults: Arc<Faults>,
    pub nodes: Vec<Option<ReplicatedDatabase>>,
}

impl Cluster {
    /// Starts `n` nodes (ids 1..=n) and initializes them as one cluster.
    pub fn start(n: u64, engine: EngineKind, tune: impl Fn(&mut ReplicaOptions)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::new(0x5EED);
        let mut nodes = Vec::new();
        for id in 1..=n {
            let mut options = node_options(dir.path(), id, engine, &faults);
            tune(&mut options);
            nodes.push(Some(ReplicatedDatabase::open(options).unwrap()));
        }
        let members: Vec<(NodeId, String)> =
            nodes.iter().flatten().map(|node| (node.id(), node.addr().to_string())).collect();
        nodes[0].as_ref().unwrap().initialize(&members).unwrap();
        let cluster = Self { dir, engine, faults, nodes };
        cluster.leader(Duration::from_secs(10));
        cluster
    }

    pub fn node(&self, id: NodeId) -> &ReplicatedDatabase {
        self.nodes[(id - 1) as usize].as_ref().expect("node is running")
    }

    pub fn running(&self) -> impl Iterator<Item = &ReplicatedDatabase> {
        self.nodes.iter().flatten()
    }

    /// The node that accepts transactions, waiting up to `timeout`.
    pub fn leader(&self, timeout: Duration) -> &ReplicatedDatabase {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(node) = self.running().find(|node| node.is_leader()) {
                return node;
            }
            assert!(Instant::now() < deadline, "no leader within {timeout:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until every running node has applied the same index and
    /// returns their checksums.
    pub fn converge(&self, timeout: Duration) -> Vec<pmtx_replica::PoolChecksum> {
        let deadline = Instant::now() + timeout;
        loop {
            let sums: Vec<_> = self.running().map(|node| node.checksum().unwrap()).collect();
            if sums.windows(2).all(|pair| pair[0] == pair[1]) {
                return sums;
            }
            assert!(Instant::now() < deadline, "replicas did not converge: {sums:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

pub fn value(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// Creates the accounts (each with `INITIAL`).
pub fn seed_accounts(node: &ReplicatedDatabase) {
    let accounts = node.table_id("accounts").unwrap();
    node.run(|tx| {
        for account in 0..ACCOUNTS {
            tx.insert(accounts, &key(account), &INITIAL.to_le_bytes())?;
        }
        Ok(())
    })
    .unwrap();
}

/// Moves `amount` from `from` to `to` and records transfer `id`.
pub fn transfer(node: &ReplicatedDatabase, id: u64, from: u64, to: u64, amount: u64) -> Result<bool, ReplicaError> {
    let accounts = node.table_id("accounts").unwrap();
    let transfers = node.table_id("transfers").unwrap();
    let outcome = node.run(|tx| -> TxResult<bool> {
        // Accounts are missing only where a broken control lost them.
        let Some(balance) = tx.get(accounts, &key(from))?.map(|bytes| value(&bytes)) else { return Ok(false) };
        if balance < amount {
            return Ok(false);
        }
        let Some(other) = tx.get(accounts, &key(to))?.map(|bytes| value(&bytes)) else { return Ok(false) };
        tx.put(accounts, &key(from), &(balance - amount).to_le_bytes())?;
        tx.put(accounts, &key(to), &(other + amount).to_le_bytes())?;
        let mut record = Vec::with_capacity(24);
        record.extend_from_slice(&from.to_le_bytes());
        record.extend_from_slice(&to.to_le_bytes());
        record.extend_from_slice(&amount.to_le_bytes());
        tx.insert(transfers, &key(id), &record)?;
        Ok(true)
    })?;
    Ok(outcome == pmtx_engine::Outcome::Committed(true))
}

/// The bank's total and the transfer ids present, read on `node` as of its
/// applied index.
pub fn audit(node: &ReplicatedDatabase) -> (u64, Vec<u64>) {
    let accounts = node.table_id("accounts").unwrap();
    let transfers = node.table_id("transfers").unwrap();
    let (outcome, _) = node
        .read_stale(|tx| {
            let mut total = 0;
            let all = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
            tx.scan_with(accounts, all, pmtx_engine::ScanDirection::Forward, usize::MAX, |_, v| {
                total += value(v);
                true
            })?;
            let mut ids = Vec::new();
            tx.scan_with(transfers, all, pmtx_engine::ScanDirection::Forward, usize::MAX, |k, _| {
                ids.push(u64::from_be_bytes(k.try_into().unwrap()));
                true
            })?;
            Ok((total, ids))
        })
        .unwrap();
    match outcome {
        pmtx_engine::Outcome::Committed(result) => result,
        pmtx_engine::Outcome::RolledBack => unreachable!(),
    }
}
