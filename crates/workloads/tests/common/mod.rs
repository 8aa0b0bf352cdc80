//! Shared test helpers: open a database for a workload, run clients.

#![allow(dead_code)]

use pmtx_engine::{Database, DbOptions, EngineKind};
use pmtx_workloads::{TxnSummary, Workload};
use std::sync::Arc;

/// An in-memory database of `engine` with the workload's tables.
pub fn open(engine: EngineKind, workload: &dyn Workload) -> Arc<Database> {
    Arc::new(Database::open(DbOptions::in_memory(engine, workload.tables())).unwrap())
}

/// Runs `txns` transactions on each of `threads` clients concurrently and
/// returns every summary; waits for every acknowledgement.
pub fn run_clients(
    db: &Arc<Database>,
    workload: &dyn Workload,
    threads: usize,
    txns: usize,
    seed: u64,
) -> Vec<TxnSummary> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let mut client = workload.client(index, threads, seed);
                let db = Arc::clone(db);
                scope.spawn(move || {
                    let mut worker = db.worker(index).unwrap();
                    let mut acknowledged = 0usize;
                    let mut summaries = Vec::with_capacity(txns);
                    for _ in 0..txns {
                        let summary = client.run_next(&mut worker).unwrap_or_else(|e| panic!("client {index}: {e}"));
                        assert!(summary.attempts >= 1);
                        summaries.push(summary);
                        worker.drain_acknowledged(|_, _| acknowledged += 1);
                    }
                    acknowledged += pmtx_workloads::wait_all_acknowledged(&mut worker);
                    let committed = summaries.iter().filter(|s| s.committed).count();
                    assert_eq!(acknowledged, committed, "every commit is acknowledged once");
                    summaries
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// Panics with the report unless every check passed.
pub fn assert_consistent(workload: &dyn Workload, db: &Arc<Database>, when: &str) {
    let report = workload.check(db).unwrap();
    assert!(report.passed(), "{} check {when} failed:\n{report}", workload.name());
    assert!(!report.checks.is_empty());
}
