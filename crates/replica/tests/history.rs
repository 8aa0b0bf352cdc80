//! A list-append history against a three-node cluster while a nemesis cuts
//! the leader off again and again (and drops, duplicates and delays Raft
//! messages): the history must be strict serializable (serializable, and
//! linearizable on the leader path). A control that acknowledges before
//! the majority must make it invalid.

mod common;

use common::node_options;
use pmtx_engine::{DbOptions, EngineKind, Outcome, TableSchema, TxResult};
use pmtx_replica::history::{check, CheckOptions, MicroOp, Status, Txn};
use pmtx_replica::{Control, Faults, NodeId, ReplicaError, ReplicatedDatabase};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn encode(list: &[u64]) -> Vec<u8> {
    list.iter().flat_map(|value| value.to_le_bytes()).collect()
}

fn decode(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks(8).map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap())).collect()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs the workload for `duration` with the nemesis; returns the history.
fn run_history(duration: Duration, control: Option<Control>, seed: u64) -> Vec<Txn> {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::new(seed);
    let nodes: Vec<ReplicatedDatabase> = (1..=3)
        .map(|id| {
            let mut options = node_options(dir.path(), id, EngineKind::Zen, &faults);
            let mut db = DbOptions::new(
                EngineKind::Zen,
                vec![TableSchema::ordered("lists").max_value_len(8 * 256)],
                common::pool_path(dir.path(), id),
            )
            .create_if_missing(true);
            db.pool = options.db.pool.clone();
            db.checkpoint_interval = None;
            options.db = db;
            options.commit_timeout = Duration::from_millis(800);
            options.control = control;
            ReplicatedDatabase::open(options).unwrap()
        })
        .collect();
    let members: Vec<(NodeId, String)> = nodes.iter().map(|node| (node.id(), node.addr().to_string())).collect();
    nodes[0].initialize(&members).unwrap();
    let all: Vec<NodeId> = members.iter().map(|(id, _)| *id).collect();
    let epoch = Instant::now();
    let now = || epoch.elapsed().as_nanos() as u64;
    let history = Mutex::new(Vec::new());
    let next_id = AtomicU64::new(0);
    let next_value = AtomicU64::new(1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The nemesis.
        scope.spawn(|| {
            faults.set_noise(2, 2, 10, Duration::from_millis(4));
            let mut rng = Rng(seed | 1);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(400 + rng.next() % 400));
                if let Some(leader) = nodes.iter().find(|node| node.is_leader()) {
                    faults.isolate(leader.id(), &all);
                    std::thread::sleep(Duration::from_millis(300 + rng.next() % 500));
                    faults.heal();
                }
            }
            faults.set_noise(0, 0, 0, Duration::ZERO);
            faults.heal();
        });
        for process in 0..3u64 {
            let (nodes, history, next_id, next_value, stop) = (&nodes, &history, &next_id, &next_value, &stop);
            scope.spawn(move || {
                let mut rng = Rng(seed ^ (process + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                while !stop.load(Ordering::Relaxed) {
                    let Some(node) = nodes.iter().find(|node| node.is_leader()) else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    let lists = node.table_id("lists").unwrap();
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    // A window of keys that moves on, so lists stay short.
                    let base = id / 60;
                    let read_only = rng.next().is_multiple_of(5);
                    let mut planned = Vec::new();
                    for _ in 0..1 + rng.next() % 4 {
                        let key = base + rng.next() % 6;
                        if read_only || rng.next().is_multiple_of(2) {
                            planned.push(MicroOp::Read { key, observed: None });
                        } else {
                            planned.push(MicroOp::Append { key, value: next_value.fetch_add(1, Ordering::Relaxed) });
                        }
                    }
                    let invoked_at = now();
                    let body = |tx: &mut pmtx_engine::Transaction<'_>| -> TxResult<Vec<MicroOp>> {
                        let mut done = Vec::new();
                        for op in &planned {
                            match op {
                                MicroOp::Read { key, .. } => {
                                    let list =
                                        tx.get(lists, &key.to_be_bytes())?.map(|b| decode(&b)).unwrap_or_default();
                                    done.push(MicroOp::Read { key: *key, observed: Some(list) });
                                }
                                MicroOp::Append { key, value } => {
                                    let mut list =
                                        tx.get(lists, &key.to_be_bytes())?.map(|b| decode(&b)).unwrap_or_default();
                                    list.push(*value);
                                    tx.put(lists, &key.to_be_bytes(), &encode(&list))?;
                                    done.push(op.clone());
                                }
                            }
                        }
                        Ok(done)
                    };
                    let result = if read_only { node.run_read_only(body) } else { node.run(body) };
                    let completed_at = now();
                    let (status, ops) = match result {
                        Ok(Outcome::Committed(ops)) => (Status::Committed, ops),
                        Ok(Outcome::RolledBack) | Err(ReplicaError::NotLeader { .. }) => (Status::Aborted, planned),
                        Err(_) => (Status::Unknown, planned),
                    };
                    // Reads of a transaction that did not commit tell nothing.
                    let ops = if status == Status::Committed {
                        ops
                    } else {
                        ops.into_iter().filter(|op| matches!(op, MicroOp::Append { .. })).collect()
                    };
                    let completed_at = if status == Status::Unknown { u64::MAX } else { completed_at };
                    history.lock().unwrap().push(Txn { id, process, ops, status, invoked_at, completed_at });
                }
            });
        }
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    // Every node ends with the same lists.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sums: Vec<_> = nodes.iter().map(|node| node.checksum().unwrap()).collect();
        if sums.windows(2).all(|pair| pair[0] == pair[1]) {
            break;
        }
        if Instant::now() > deadline {
            // A broken control may leave the replicas apart: the history
            // check below says what went wrong.
            eprintln!("replicas did not converge: {sums:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    history.into_inner().unwrap()
}

#[test]
fn list_append_history_across_failovers_is_strict_serializable() {
    let history = run_history(Duration::from_secs(8), None, 0xC0FFEE);
    let report = check(&history, &CheckOptions { strict: true });
    eprintln!("{report}");
    assert!(report.committed > 300, "too few committed transactions: {}", report.committed);
    if !report.is_valid() {
        for anomaly in &report.anomalies {
            if let pmtx_replica::history::Anomaly::IncompatibleOrder { a, b, .. } = anomaly {
                let differing: Vec<u64> =
                    a.iter().chain(b).copied().filter(|v| !(a.contains(v) && b.contains(v))).collect();
                for txn in &history {
                    let touches = txn.ops.iter().any(|op| match op {
                        MicroOp::Append { value, .. } => differing.contains(value),
                        MicroOp::Read { observed: Some(list), .. } => {
                            list.last().is_some_and(|last| differing.contains(last))
                        }
                        _ => false,
                    });
                    if touches {
                        eprintln!("{txn:?}");
                    }
                }
            }
        }
    }
    assert!(report.is_valid(), "{report}");
}

#[test]
fn control_acknowledging_before_the_majority_breaks_the_history() {
    // A loss needs an acknowledged commit on a leader the nemesis cuts off
    // before it replicates: likely in one run, not certain, so up to three.
    for seed in [0xBADC0DE, 0xBADC0DF, 0xBADC0E0] {
        let history = run_history(Duration::from_secs(8), Some(Control::AcknowledgeBeforeMajority), seed);
        let report = check(&history, &CheckOptions { strict: true });
        if !report.is_valid() {
            eprintln!(
                "the control failed as it must: {} anomalies, first: {}",
                report.anomalies.len(),
                report.anomalies[0]
            );
            return;
        }
        eprintln!("seed {seed:#x}: the control's history was valid; trying another seed");
    }
    panic!("acknowledging before the majority gave three valid histories: the test cannot fail");
}
