//! `pmtx serve` (run one node of a replicated cluster) and `pmtx cluster`
//! (ask a node about the cluster, change its membership).

use crate::error::CliError;
use clap::{Args, Subcommand};
use pmtx_engine::spec::EngineSpec;
use pmtx_engine::{DbOptions, PoolLocation, TableSchema};
use pmtx_replica::{AdminReply, AdminRequest, NodeId, ReplicaError, ReplicaOptions, ReplicatedDatabase};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Arguments of `pmtx serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// This node's id (1-255 with --bank; unique in the cluster, never reused).
    #[arg(long)]
    id: NodeId,
    /// The node's pool file (created if missing).
    #[arg(long)]
    pool: PathBuf,
    /// Address to listen on for peers and `pmtx cluster`.
    #[arg(long, default_value = "127.0.0.1:7001")]
    listen: String,
    /// The cluster's members as ID=ADDR,ID=ADDR,... (with --init: the
    /// voters of the new cluster, this node included).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Start a new cluster of --peers (once, on one node; ignored if the
    /// pool already belongs to a cluster).
    #[arg(long)]
    init: bool,
    /// The engine of a new pool, with options (`zen`, `sp3`, `dbxn:nt=off`, ...).
    #[arg(long, default_value = "zen")]
    engine: String,
    /// A table of a new pool: NAME, NAME:hash, or NAME:ordered:VALUE_BYTES (repeat).
    #[arg(long = "table")]
    tables: Vec<String>,
    /// Size of a new pool file.
    #[arg(long, default_value = "1GiB", value_parser = crate::units::parse_size)]
    pool_size: u64,
    /// Run the bank example: transfers from this many threads while this
    /// node leads, each acknowledged one printed as `ack ID` on stdout.
    #[arg(long, default_value_t = 0)]
    bank: usize,
    /// Raft's election timeout range in milliseconds, MIN-MAX.
    #[arg(long, default_value = "300-600")]
    election_ms: String,
    /// Raft's heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    /// Wait for openraft's own election timer after the leader's
    /// connection closes, instead of standing as soon as its lease (the
    /// longest election timeout) is out.
    #[arg(long)]
    no_fast_failover: bool,
    /// Build a snapshot after this many log entries.
    #[arg(long, default_value_t = 10_000)]
    snapshot_every: u64,
    /// A deliberately broken behaviour for tests' controls
    /// (acknowledge-before-majority, skip-rollback); never in production.
    #[arg(long, hide = true)]
    control: Option<String>,
}

/// Arguments of `pmtx cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    action: ClusterAction,
    /// Address of a node of the cluster.
    #[arg(long, global = true, default_value = "127.0.0.1:7001")]
    node: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum ClusterAction {
    /// The node's role, term, leader, log and members.
    Status,
    /// Add a node (a learner that catches up, then a voter).
    Add {
        /// The new node's id.
        #[arg(long)]
        id: NodeId,
        /// The new node's address.
        #[arg(long)]
        addr: String,
    },
    /// Remove a node from the cluster.
    Remove {
        /// The node's id.
        #[arg(long)]
        id: NodeId,
    },
    /// A checksum of every table of the node's pool at its applied index.
    Checksum,
}

/// Set by SIGINT and SIGTERM: the handler may only store to an atomic, so
/// this one flag is process-wide.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn parse_peers(peers: &[String]) -> Result<Vec<(NodeId, String)>, CliError> {
    peers
        .iter()
        .filter(|peer| !peer.is_empty())
        .map(|peer| {
            let (id, addr) =
                peer.split_once('=').ok_or_else(|| CliError::usage(format!("--peers: {peer:?} is not ID=ADDR")))?;
            let id = id.parse().map_err(|_| CliError::usage(format!("--peers: {id:?} is not a node id")))?;
            Ok((id, addr.to_string()))
        })
        .collect()
}

fn parse_table(text: &str) -> Result<TableSchema, CliError> {
    let mut parts = text.split(':');
    let name = parts.next().unwrap_or_default();
    if name.is_empty() {
        return Err(CliError::usage(format!("--table {text:?}: no name")));
    }
    let mut schema = match parts.next() {
        None | Some("ordered") => TableSchema::ordered(name),
        Some("hash") => TableSchema::hashed(name),
        Some(other) => return Err(CliError::usage(format!("--table {text:?}: {other:?} is not ordered or hash"))),
    };
    if let Some(bytes) = parts.next() {
        let bytes = bytes.parse().map_err(|_| CliError::usage(format!("--table {text:?}: bad value size")))?;
        schema = schema.max_value_len(bytes);
    }
    Ok(schema)
}

fn replica_error(error: ReplicaError) -> CliError {
    match error {
        ReplicaError::InvalidConfig(_) => CliError::usage(error.to_string()),
        other => CliError::runtime(other.to_string()),
    }
}

/// Runs `pmtx serve`.
pub fn run_serve(args: ServeArgs) -> Result<(), CliError> {
    let peers = parse_peers(&args.peers)?;
    if args.init && peers.iter().all(|(id, _)| *id != args.id) {
        return Err(CliError::usage("--init: --peers must list this node (ID=ADDR) among the voters"));
    }
    let (min, max) = args
        .election_ms
        .split_once('-')
        .and_then(|(min, max)| Some((min.parse().ok()?, max.parse().ok()?)))
        .ok_or_else(|| CliError::usage(format!("--election-ms {:?} is not MIN-MAX", args.election_ms)))?;
    let spec = EngineSpec::parse(&args.engine).map_err(CliError::usage)?;
    let mut tables: Vec<TableSchema> = args.tables.iter().map(|table| parse_table(table)).collect::<Result<_, _>>()?;
    if args.bank > 0 {
        tables.extend(pmtx_replica::bank::tables());
    }
    let db = if args.pool.exists() {
        DbOptions::from_pool(&args.pool).map_err(|error| CliError::runtime(error.to_string()))?
    } else {
        if tables.is_empty() {
            return Err(CliError::usage("a new pool needs its tables: --table NAME (repeat) or --bank THREADS"));
        }
        let mut options = DbOptions::new(spec.kind, tables, &args.pool).create_if_missing(true);
        let seed = options.seed;
        spec.apply(&mut options, seed);
        options.pool = PoolLocation::File { path: args.pool.clone(), size: args.pool_size };
        options
    };
    let mut db = db;
    db.workers = db.workers.max(args.bank + 2);
    let mut options = ReplicaOptions::new(args.id, db, args.listen.clone());
    options.election_timeout_ms = (min, max);
    options.heartbeat_ms = args.heartbeat_ms;
    options.fast_failover = !args.no_fast_failover;
    options.snapshot_every = args.snapshot_every;
    if let Some(control) = &args.control {
        let parsed = pmtx_replica::Control::parse(control);
        options.control = Some(parsed.ok_or_else(|| CliError::usage(format!("--control {control:?} is unknown")))?);
        eprintln!("pmtx serve: WARNING: control {control} breaks replication on purpose (for tests only)");
    }
    let node = ReplicatedDatabase::open(options).map_err(replica_error)?;
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe; the function pointer stays valid for the process.
    unsafe {
        libc::signal(libc::SIGINT, on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
    eprintln!("pmtx serve: node {} listening on {} (pool {})", node.id(), node.addr(), args.pool.display());
    println!("listening {}", node.addr());
    std::io::stdout().flush()?;
    if args.init {
        match node.initialize(&peers) {
            Ok(()) => eprintln!("pmtx serve: started a cluster of {} voters", peers.len()),
            // A pool that belongs to a cluster already keeps it.
            Err(error) => eprintln!("pmtx serve: not initializing: {error}"),
        }
    }
    let stdout = std::sync::Mutex::new(std::io::stdout());
    let acknowledged = |id: u64| {
        let mut out = stdout.lock().unwrap_or_else(|e| e.into_inner());
        // The line reaches the pipe before the next transfer starts: a
        // reader that saw it may count the transfer as acknowledged.
        let _ = writeln!(out, "ack {id}");
        let _ = out.flush();
    };
    std::thread::scope(|scope| {
        if args.bank > 0 {
            scope.spawn(|| pmtx_replica::bank::run_while_leading(&node, args.bank, &STOP, &acknowledged));
        }
        let mut leading = false;
        while !STOP.load(Ordering::Relaxed) {
            if node.is_leader() != leading {
                leading = !leading;
                let term = node.status().term;
                eprintln!("pmtx serve: node {} {} (term {term})", node.id(), if leading { "leads" } else { "follows" });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    eprintln!("pmtx serve: node {} shutting down", node.id());
    node.shutdown().map_err(replica_error)
}

/// Runs `pmtx cluster`.
pub fn run_cluster(args: ClusterArgs) -> Result<(), CliError> {
    let runtime = tokio_runtime()?;
    let timeout = Duration::from_secs(30);
    let request = match &args.action {
        ClusterAction::Status => AdminRequest::Status,
        ClusterAction::Add { id, addr } => AdminRequest::Add { id: *id, addr: addr.clone() },
        ClusterAction::Remove { id } => AdminRequest::Remove { id: *id },
        ClusterAction::Checksum => AdminRequest::Checksum,
    };
    let mut target = args.node.clone();
    // Membership changes go to the leader: follow the node's pointer once.
    let mut reply = runtime.block_on(pmtx_replica::admin_call(&target, request.clone(), timeout));
    if let (Ok(AdminReply::Error(message)), AdminRequest::Add { .. } | AdminRequest::Remove { .. }) = (&reply, &request)
    {
        if let Some(leader) = message.split(" at ").nth(1).filter(|_| message.contains("the leader is node")) {
            target = leader.trim().to_string();
            eprintln!("pmtx cluster: {} is not the leader; asking {target}", args.node);
            reply = runtime.block_on(pmtx_replica::admin_call(&target, request, timeout));
        }
    }
    match reply.map_err(|error| CliError::runtime(format!("node {target}: {error}")))? {
        AdminReply::Error(message) => Err(CliError::runtime(format!("node {target}: {message}"))),
        AdminReply::Done => {
            println!("done");
            Ok(())
        }
        AdminReply::Status(status) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
                return Ok(());
            }
            println!("node        {}", status.id);
            println!("role        {}{}", status.role, if status.accepting_writes { " (accepting writes)" } else { "" });
            println!("term        {}", status.term);
            match &status.leader {
                Some((id, addr)) => println!("leader      node {id} at {addr}"),
                None => println!("leader      none known"),
            }
            let index = |index: Option<u64>| index.map_or("-".to_string(), |index| index.to_string());
            println!("last log    {}", index(status.last_log_index));
            println!("applied     {}", index(status.applied_index));
            let list = |members: &[(NodeId, String)]| {
                members.iter().map(|(id, addr)| format!("{id}={addr}")).collect::<Vec<_>>().join(", ")
            };
            println!("voters      {}", list(&status.voters));
            println!("learners    {}", list(&status.learners));
            Ok(())
        }
        AdminReply::Checksum(sum) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&sum)?);
                return Ok(());
            }
            println!("applied index {}", sum.applied_index.map_or("-".to_string(), |index| index.to_string()));
            for (table, rows, crc) in &sum.tables {
                println!("  {table:<20} {rows:>10} rows  crc {crc:08x}");
            }
            Ok(())
        }
    }
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CliError::from)
}
