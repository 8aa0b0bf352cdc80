//! Measures the load (and check) time of a workload.
//!
//! `cargo run --release -p pmtx-workloads --example load_time -- [tpcc|smallbank|ycsb] [engine] [threads] [txns] [ycsb variant]`

use pmtx_engine::{Database, DbOptions, EngineKind, PoolLocation};
use pmtx_workloads::{by_name, wait_all_acknowledged, WorkloadOptions};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("tpcc", String::as_str);
    let engine = EngineKind::parse(args.get(1).map_or("silo", String::as_str)).expect("engine: silo | group-commit");
    let threads: usize = args.get(2).map_or(2, |t| t.parse().expect("threads"));
    let txns: usize = args.get(3).map_or(0, |t| t.parse().expect("transactions per thread"));
    let mut workload_options = WorkloadOptions::default();
    if let Some(variant) = args.get(4) {
        workload_options.ycsb = variant.parse().unwrap();
    }
    let workload = by_name(name, &workload_options).unwrap();
    let mut options = DbOptions::in_memory(engine, workload.tables());
    options.workers = threads.max(1);
    options.pool = PoolLocation::InMemory { size: 4 << 30 };
    options.chunk_size = 2 << 20;
    options.epoch_interval = std::time::Duration::from_millis(40);
    let db = Arc::new(Database::open(options).unwrap());
    let start = Instant::now();
    workload.load(&db, threads, &|_, _| {}).unwrap();
    println!(
        "{name} on {engine}: load with {threads} threads took {:?} ({} bytes of log)",
        start.elapsed(),
        db.stats().log_bytes
    );
    let start = Instant::now();
    let report = workload.check(&db).unwrap();
    println!("check took {:?}, passed: {}", start.elapsed(), report.passed());
    print!("{report}");
    if txns > 0 {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for index in 0..threads {
                let mut client = workload.client(index, threads, 1);
                let db = Arc::clone(&db);
                scope.spawn(move || {
                    let mut worker = db.worker(index).unwrap();
                    for _ in 0..txns {
                        client.run_next(&mut worker).unwrap();
                        worker.drain_acknowledged(|_, _| {});
                    }
                    wait_all_acknowledged(&mut worker);
                });
            }
        });
        let elapsed = start.elapsed();
        println!(
            "{} transactions in {elapsed:?}: {:.0} txn/s",
            threads * txns,
            (threads * txns) as f64 / elapsed.as_secs_f64()
        );
        let start = Instant::now();
        let report = workload.check(&db).unwrap();
        println!("check after run took {:?}, passed: {}", start.elapsed(), report.passed());
        print!("{report}");
    }
}
