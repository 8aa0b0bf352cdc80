//! A replicated bank: start three of these (one with --init) and each
//! node's threads transfer money while it leads; kill the leader and
//! another takes over without losing an acknowledged transfer.
//!
//! ```sh
//! P=1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103
//! cargo run --release -p pmtx-replica --example replicated_bank -- --id 1 --pool /tmp/bank1.pool --listen 127.0.0.1:7101 --peers $P --init &
//! cargo run --release -p pmtx-replica --example replicated_bank -- --id 2 --pool /tmp/bank2.pool --listen 127.0.0.1:7102 --peers $P &
//! cargo run --release -p pmtx-replica --example replicated_bank -- --id 3 --pool /tmp/bank3.pool --listen 127.0.0.1:7103 --peers $P &
//! ```
//!
//! Every second each node prints its role, the transfers it acknowledged
//! and the bank's total as its pool holds it (which must not change).

use pmtx_engine::{DbOptions, EngineKind, PoolLocation};
use pmtx_replica::{bank, NodeId, ReplicaOptions, ReplicatedDatabase};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

struct Args {
    id: NodeId,
    pool: PathBuf,
    listen: String,
    peers: Vec<(NodeId, String)>,
    init: bool,
    threads: usize,
    seconds: Option<u64>,
}

fn usage(problem: &str) -> ! {
    eprintln!("{problem}");
    eprintln!(
        "usage: replicated_bank --id N --pool FILE --listen ADDR --peers ID=ADDR,... [--init] [--threads N] [--seconds S]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        id: 0,
        pool: PathBuf::new(),
        listen: String::new(),
        peers: Vec::new(),
        init: false,
        threads: 2,
        seconds: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--id" => args.id = value().parse().unwrap_or_else(|_| usage("--id: not a number")),
            "--pool" => args.pool = PathBuf::from(value()),
            "--listen" => args.listen = value(),
            "--peers" => {
                args.peers = value()
                    .split(',')
                    .map(|peer| {
                        let (id, addr) = peer.split_once('=').unwrap_or_else(|| usage("--peers: ID=ADDR,..."));
                        (id.parse().unwrap_or_else(|_| usage("--peers: bad id")), addr.to_string())
                    })
                    .collect()
            }
            "--init" => args.init = true,
            "--threads" => args.threads = value().parse().unwrap_or_else(|_| usage("--threads: not a number")),
            "--seconds" => args.seconds = Some(value().parse().unwrap_or_else(|_| usage("--seconds: not a number"))),
            other => usage(&format!("unknown option {other}")),
        }
    }
    if args.id == 0 || args.pool.as_os_str().is_empty() || args.listen.is_empty() {
        usage("--id, --pool and --listen are required");
    }
    args
}

fn main() {
    let args = parse();
    let mut db = DbOptions::new(EngineKind::Zen, bank::tables(), &args.pool).create_if_missing(true);
    db.pool = PoolLocation::File { path: args.pool.clone(), size: 256 << 20 };
    db.workers = args.threads.max(1);
    let node =
        ReplicatedDatabase::open(ReplicaOptions::new(args.id, db, args.listen.clone())).unwrap_or_else(|error| {
            eprintln!("cannot start node {}: {error}", args.id);
            std::process::exit(1)
        });
    if args.init {
        if let Err(error) = node.initialize(&args.peers) {
            eprintln!("not initializing: {error}");
        }
    }
    let stop = AtomicBool::new(false);
    let acknowledged = AtomicU64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            bank::run_while_leading(&node, args.threads, &stop, &|_| {
                acknowledged.fetch_add(1, Ordering::Relaxed);
            })
        });
        let mut elapsed = 0;
        while args.seconds.is_none_or(|seconds| elapsed < seconds) {
            std::thread::sleep(Duration::from_secs(1));
            elapsed += 1;
            let status = node.status();
            let total = bank::audit_node(&node).map(|(total, ids)| format!("total {total}, {} transfers", ids.len()));
            println!(
                "node {} {:<9} term {:<3} acknowledged {:<8} {}",
                node.id(),
                status.role,
                status.term,
                acknowledged.load(Ordering::Relaxed),
                total.unwrap_or_else(|error| format!("({error})"))
            );
        }
        stop.store(true, Ordering::Relaxed);
    });
    node.shutdown().expect("clean shutdown");
}
