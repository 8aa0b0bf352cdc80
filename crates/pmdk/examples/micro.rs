//! Runs one PMDK micro workload and prints its throughput.
//!
//! `PMEM_IS_PMEM_FORCE=1 cargo run --release -p pmtx-pmdk --example micro --
//! WORKLOAD THREADS SECONDS [POOL_PATH]` (default pool path
//! `/dev/shm/pmtx-pmdk-micro.pool`, removed afterwards).

use pmtx_pmdk::{run, MicroConfig, MicroWorkload, RunLength};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: micro WORKLOAD THREADS SECONDS [POOL_PATH]";
    let workload = MicroWorkload::parse(args.first().expect(usage)).unwrap_or_else(|error| panic!("{error}"));
    let threads = args.get(1).map_or(1, |text| text.parse().expect(usage));
    let seconds: f64 = args.get(2).map_or(2.0, |text| text.parse().expect(usage));
    let path = args.get(3).cloned().unwrap_or_else(|| "/dev/shm/pmtx-pmdk-micro.pool".into());
    let config = MicroConfig {
        workload,
        threads,
        length: RunLength::Duration(Duration::from_secs_f64(seconds)),
        warmup: Duration::from_millis(500),
        ..MicroConfig::default()
    };
    let pool_size = config.suggested_pool_size();
    match run(path.as_ref(), pool_size, &config, |progress| eprintln!("{progress:?}")) {
        Ok(result) => {
            println!(
                "{workload} threads {threads}: {:.0} tx/s ({} tx in {:.2} s; per thread {:?}; {:?}; {:?}; pool {} MiB, load {:.2} s, PMEM_IS_PMEM_FORCE=1: {})",
                result.throughput(),
                result.total,
                result.elapsed.as_secs_f64(),
                result.per_thread,
                result.committed_by_type().collect::<Vec<_>>(),
                result.outcomes_by_name().collect::<Vec<_>>(),
                pool_size >> 20,
                result.load_elapsed.as_secs_f64(),
                result.pmem_forced,
            );
            println!("check: {}", result.check.summary);
        }
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
