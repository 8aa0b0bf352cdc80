//! A replicated bank: the example application of `pmtx serve --bank` and
//! `examples/replicated_bank.rs`, and the failover tests' workload.
//!
//! Accounts hold balances; a transfer moves an amount between two accounts
//! and records itself under a unique id in `transfers`, in one
//! transaction. So the total of the balances never changes, and every
//! acknowledged transfer id must be present on every replica.

use crate::error::ReplicaResult;
use crate::node::ReplicatedDatabase;
use pmtx_engine::{Database, DbResult, Outcome, ScanDirection, TableId, TableSchema, TxResult};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Accounts of the bank.
pub const ACCOUNTS: u64 = 64;
/// Each account's opening balance.
pub const OPENING_BALANCE: u64 = 1_000_000;

/// The bank's tables.
pub fn tables() -> Vec<TableSchema> {
    vec![TableSchema::ordered("accounts").max_value_len(8), TableSchema::ordered("transfers").max_value_len(24)]
}

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn amount_of(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8-byte balance"))
}

/// Opens the accounts if they are not open yet (on the leader).
pub fn open_accounts(node: &ReplicatedDatabase) -> ReplicaResult<()> {
    let accounts = node.table_id("accounts")?;
    node.run(|tx| {
        for account in 0..ACCOUNTS {
            tx.insert(accounts, &key(account), &OPENING_BALANCE.to_le_bytes())?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Transfers `amount` from `from` to `to` as transfer `id`; false if the
/// balance is short. Acknowledged (replicated) when it returns `Ok`.
pub fn transfer(node: &ReplicatedDatabase, id: u64, from: u64, to: u64, amount: u64) -> ReplicaResult<bool> {
    let accounts = node.table_id("accounts")?;
    let transfers = node.table_id("transfers")?;
    let outcome = node.run(|tx| -> TxResult<bool> {
        let Some(balance) = tx.get_with(accounts, &key(from), amount_of)? else { return Ok(false) };
        let Some(other) = tx.get_with(accounts, &key(to), amount_of)? else { return Ok(false) };
        if balance < amount {
            return Ok(false);
        }
        tx.update(accounts, &key(from), &(balance - amount).to_le_bytes())?;
        tx.update(accounts, &key(to), &(other + amount).to_le_bytes())?;
        let mut record = [0u8; 24];
        record[..8].copy_from_slice(&from.to_le_bytes());
        record[8..16].copy_from_slice(&to.to_le_bytes());
        record[16..].copy_from_slice(&amount.to_le_bytes());
        tx.insert(transfers, &key(id), &record)?;
        Ok(true)
    })?;
    Ok(outcome == Outcome::Committed(true))
}

/// Transfer ids unique across nodes and restarts: the node id, the
/// process's start in milliseconds, and a counter.
pub struct TransferIds {
    prefix: u64,
    next: AtomicU64,
}

impl TransferIds {
    /// Ids for node `node` (< 256) started now.
    pub fn new(node: u64) -> Self {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        Self { prefix: (node & 0xFF) << 56 | (millis & 0xFFFF_FFFF) << 24, next: AtomicU64::new(0) }
    }

    /// The next id.
    pub fn next(&self) -> u64 {
        self.prefix | (self.next.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF)
    }
}

/// Runs transfers from `threads` threads whenever `node` leads, until
/// `stop`; calls `acknowledged(id)` for each acknowledged transfer.
pub fn run_while_leading(
    node: &ReplicatedDatabase,
    threads: usize,
    stop: &AtomicBool,
    acknowledged: &(dyn Fn(u64) + Sync),
) {
    let ids = TransferIds::new(node.id());
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let ids = &ids;
            scope.spawn(move || {
                let mut state = (node.id() << 32 | thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut opened = false;
                while !stop.load(Ordering::Relaxed) {
                    if !node.is_leader() {
                        opened = false;
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    if !opened {
                        opened = open_accounts(node).is_ok();
                        continue;
                    }
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let (from, to) = (state % ACCOUNTS, (state >> 16) % ACCOUNTS);
                    if from == to {
                        continue;
                    }
                    let id = ids.next();
                    if let Ok(true) = transfer(node, id, from, to, 1 + (state >> 40) % 100) {
                        acknowledged(id);
                    }
                }
            });
        }
    });
}

/// The total of the balances and the transfer ids of a bank pool opened
/// directly (after its node shut down).
pub fn audit(db: &Database) -> DbResult<(u64, Vec<u64>)> {
    let accounts = db.table_id("accounts")?;
    let transfers = db.table_id("transfers")?;
    let mut total = 0;
    db.for_each_row(accounts, |_, value| total += amount_of(value))?;
    let mut ids = Vec::new();
    db.for_each_row(transfers, |key, _| ids.push(u64::from_be_bytes(key.try_into().expect("8-byte id"))))?;
    Ok((total, ids))
}

/// The same audit through a node, as of its applied index (any node).
pub fn audit_node(node: &ReplicatedDatabase) -> ReplicaResult<(u64, Vec<u64>)> {
    let accounts: TableId = node.table_id("accounts")?;
    let transfers: TableId = node.table_id("transfers")?;
    let (outcome, _) = node.read_stale(|tx| {
        let mut total = 0;
        let all = (Bound::Unbounded, Bound::Unbounded);
        tx.scan_with(accounts, all, ScanDirection::Forward, usize::MAX, |_, value| {
            total += amount_of(value);
            true
        })?;
        let mut ids = Vec::new();
        tx.scan_with(transfers, all, ScanDirection::Forward, usize::MAX, |key, _| {
            ids.push(u64::from_be_bytes(key.try_into().expect("8-byte id")));
            true
        })?;
        Ok((total, ids))
    })?;
    Ok(match outcome {
        Outcome::Committed(audit) => audit,
        Outcome::RolledBack => (0, Vec::new()),
    })
}
