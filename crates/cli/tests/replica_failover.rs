//! Three `pmtx serve --bank` processes on loopback; the leader is killed
//! with SIGKILL again and again under load, each time once the node killed
//! before was restarted and caught up. Afterwards every acknowledged
//! transfer is on every replica, the bank's total is kept and the replicas
//! are identical, and the median failover (kill to a new leader accepting
//! writes) is under 1 s. `PMTX_SOAK_KILLS=200` makes it the soak run
//! (default 20); `PMTX_SOAK_NO_FAST_FAILOVER=1` runs the nodes without
//! fast failover (bound 3 s). A control run with acknowledgements before the majority must fail.

use pmtx_replica::{AdminReply, AdminRequest, NodeStatus, PoolChecksum};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PMTX: &str = env!("CARGO_BIN_EXE_pmtx");

/// The two tests run one after the other: six nodes on two cores would
/// measure the machine, not the failover.
static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Node {
    id: u64,
    addr: String,
    pool: PathBuf,
    child: Option<Child>,
}

/// Everything the nodes' stdout said was acknowledged.
type Acks = Arc<Mutex<BTreeSet<u64>>>;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn ask(runtime: &tokio::runtime::Runtime, addr: &str, request: AdminRequest) -> Option<AdminReply> {
    runtime.block_on(pmtx_replica::admin_call(addr, request, Duration::from_secs(5))).ok()
}

fn status(runtime: &tokio::runtime::Runtime, addr: &str) -> Option<NodeStatus> {
    match ask(runtime, addr, AdminRequest::Status)? {
        AdminReply::Status(status) => Some(status),
        _ => None,
    }
}

fn checksum(runtime: &tokio::runtime::Runtime, addr: &str) -> Option<PoolChecksum> {
    match ask(runtime, addr, AdminRequest::Checksum)? {
        AdminReply::Checksum(sum) => Some(sum),
        _ => None,
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    nodes: Vec<Node>,
    peers: String,
    acks: Acks,
    control: Option<&'static str>,
}

impl Cluster {
    fn new(control: Option<&'static str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<Node> = (1..=3)
            .map(|id| Node {
                id,
                addr: format!("127.0.0.1:{}", free_port()),
                pool: dir.path().join(format!("node{id}.pool")),
                child: None,
            })
            .collect();
        let peers = nodes.iter().map(|node| format!("{}={}", node.id, node.addr)).collect::<Vec<_>>().join(",");
        Self { _dir: dir, nodes, peers, acks: Arc::default(), control }
    }

    fn start(&mut self, index: usize, init: bool, bank: usize) -> Result<(), String> {
        let node = &self.nodes[index];
        let mut command = Command::new(PMTX);
        command.args(["serve", "--id", &node.id.to_string(), "--pool"]).arg(&node.pool);
        command.args(["--listen", &node.addr, "--peers", &self.peers, "--bank", &bank.to_string()]);
        command.args(["--pool-size", "256MiB", "--election-ms", "150-300", "--heartbeat-ms", "40"]);
        command.args(["--snapshot-every", "3000"]);
        if no_fast_failover() {
            command.arg("--no-fast-failover");
        }
        if init {
            command.arg("--init");
        }
        if let Some(control) = self.control {
            command.args(["--control", control]);
        }
        let log = std::fs::File::create(node.pool.with_extension(format!("log{}", rand_suffix()))).unwrap();
        let mut child = command.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let acks = Arc::clone(&self.acks);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(id) = line.strip_prefix("ack ") {
                    acks.lock().unwrap().insert(id.parse().unwrap());
                } else if line.starts_with("listening ") {
                    let _ = ready_tx.send(());
                }
            }
        });
        if ready_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            let status = child.wait().map(|status| status.to_string()).unwrap_or_default();
            return Err(format!("node {} did not start listening ({status})", node.id));
        }
        self.nodes[index].child = Some(child);
        Ok(())
    }

    /// The last `lines` lines of every node's log, for a failure's message.
    fn log_tails(&self, lines: usize) -> String {
        let mut logs: Vec<_> = std::fs::read_dir(self._dir.path())
            .map(|dir| {
                dir.flatten().map(|entry| entry.path()).filter(|path| path.to_string_lossy().contains(".log")).collect()
            })
            .unwrap_or_default();
        logs.sort();
        // The newest log of each node (the suffixes are times of one width).
        let newest = logs
            .iter()
            .enumerate()
            .filter(|(index, path)| logs.get(index + 1).is_none_or(|next| next.file_stem() != path.file_stem()));
        let mut out = String::new();
        for (_, path) in newest {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out += &format!("--- {} (last {lines} lines)\n", path.display());
            for line in &all[all.len().saturating_sub(lines)..] {
                out += line;
                out.push('\n');
            }
        }
        out
    }

    fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn terminate_all(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                let status = child.wait().unwrap();
                assert!(status.success(), "node {} exited with {status}", node.id);
            }
        }
    }

    /// The index of the node accepting writes, waiting up to `timeout`.
    fn leader(&self, runtime: &tokio::runtime::Runtime, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for (index, node) in self.nodes.iter().enumerate() {
                if node.child.is_some() && status(runtime, &node.addr).is_some_and(|status| status.accepting_writes) {
                    return Some(index);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Waits until node `index` follows a leader that accepts writes (the
    /// node `leader`, or one elected after it) and has applied what
    /// `leader` had applied when first asked: the cluster is whole again,
    /// so the next kill is one failure, not a second one while a restarted
    /// node still recovers. Returns the id of the leader it follows.
    fn wait_caught_up(
        &self,
        runtime: &tokio::runtime::Runtime,
        index: usize,
        leader: usize,
        timeout: Duration,
    ) -> Option<u64> {
        let deadline = Instant::now() + timeout;
        let mut target = None;
        while Instant::now() < deadline {
            if target.is_none() {
                target = status(runtime, &self.nodes[leader].addr).and_then(|status| status.applied_index);
            }
            if let (Some(target), Some(mine)) = (target, status(runtime, &self.nodes[index].addr)) {
                let followed = mine.leader.as_ref().map(|(id, _)| *id).filter(|id| {
                    self.nodes.iter().filter(|node| node.id == *id && node.child.is_some()).any(|node| {
                        status(runtime, &node.addr).is_some_and(|its| its.accepting_writes && its.term == mine.term)
                    })
                });
                if followed.is_some() && mine.applied_index.is_some_and(|applied| applied >= target) {
                    return followed;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    fn wait_for_acks(&self, more: usize, timeout: Duration) -> bool {
        let target = self.acks.lock().unwrap().len() + more;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.acks.lock().unwrap().len() >= target {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `PMTX_SOAK_NO_FAST_FAILOVER=1`: the nodes wait for openraft's own
/// election timers (`pmtx serve --no-fast-failover`), for comparison.
fn no_fast_failover() -> bool {
    std::env::var_os("PMTX_SOAK_NO_FAST_FAILOVER").is_some_and(|value| value != "0")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

/// Kills the leader `kills` times under load; returns the failover times,
/// or what was violated.
fn run(kills: usize, control: Option<&'static str>) -> Result<Vec<Duration>, String> {
    let runtime = runtime();
    let mut cluster = Cluster::new(control);
    for index in 0..3 {
        cluster.start(index, index == 0, 2)?;
    }
    let mut failovers = Vec::new();
    // Elections after a failover, before the killed node caught up.
    let mut reelections = 0;
    for kill in 0..kills {
        let leader = cluster.leader(&runtime, Duration::from_secs(20)).ok_or(format!("kill {kill}: no leader"))?;
        if !cluster.wait_for_acks(20, Duration::from_secs(20)) {
            return Err(format!("kill {kill}: the bank made no progress"));
        }
        cluster.kill(leader);
        let killed_at = Instant::now();
        let next = cluster
            .leader(&runtime, Duration::from_secs(20))
            .ok_or(format!("kill {kill}: no new leader within 20 s"))?;
        failovers.push(killed_at.elapsed());
        assert_ne!(next, leader);
        cluster.start(leader, false, 2)?;
        let Some(followed) = cluster.wait_caught_up(&runtime, leader, next, Duration::from_secs(30)) else {
            let statuses: Vec<_> = cluster.nodes.iter().map(|node| status(&runtime, &node.addr)).collect();
            return Err(format!(
                "kill {kill}: node {} did not catch up within 30 s with node {}; statuses {statuses:#?}\n{}",
                cluster.nodes[leader].id,
                cluster.nodes[next].id,
                cluster.log_tails(20)
            ));
        };
        if followed != cluster.nodes[next].id {
            reelections += 1;
        }
        if (kill + 1) % 10 == 0 {
            eprintln!("{} kills, {} transfers acknowledged", kill + 1, cluster.acks.lock().unwrap().len());
        }
    }
    cluster.wait_for_acks(20, Duration::from_secs(20));
    // Stop the load at once, as a crash would, then bring the nodes back
    // without it and let them agree.
    for index in 0..3 {
        cluster.kill(index);
    }
    for index in 0..3 {
        cluster.start(index, false, 0)?;
    }
    cluster.leader(&runtime, Duration::from_secs(30)).ok_or("no leader after the restart")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let sums = loop {
        let sums: Vec<Option<PoolChecksum>> = cluster.nodes.iter().map(|node| checksum(&runtime, &node.addr)).collect();
        if sums.iter().all(Option::is_some) && sums.windows(2).all(|pair| pair[0] == pair[1]) {
            break sums;
        }
        if Instant::now() > deadline {
            return Err(format!("replicas differ: {sums:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    cluster.terminate_all();
    let acknowledged = cluster.acks.lock().unwrap().clone();
    let mut audits = Vec::new();
    for node in &cluster.nodes {
        let db = pmtx_engine::Database::open_existing(&node.pool).map_err(|error| error.to_string())?;
        let (total, ids) = pmtx_replica::bank::audit(&db).map_err(|error| error.to_string())?;
        db.close().map_err(|error| error.to_string())?;
        let expected = pmtx_replica::bank::ACCOUNTS * pmtx_replica::bank::OPENING_BALANCE;
        if total != expected {
            return Err(format!("node {}: total {total}, expected {expected}", node.id));
        }
        let present: BTreeSet<u64> = ids.into_iter().collect();
        let lost: Vec<&u64> = acknowledged.difference(&present).collect();
        if !lost.is_empty() {
            return Err(format!(
                "node {}: {} of {} acknowledged transfers lost (first {:x})",
                node.id,
                lost.len(),
                acknowledged.len(),
                lost[0]
            ));
        }
        audits.push(present);
    }
    if audits.windows(2).any(|pair| pair[0] != pair[1]) {
        return Err("replicas hold different transfers".into());
    }
    eprintln!(
        "{kills} leader kills ({reelections} more elections while a killed node caught up): {} transfers acknowledged, {} present; checksum {:?}",
        acknowledged.len(),
        audits[0].len(),
        sums[0].as_ref().map(|sum| &sum.tables)
    );
    Ok(failovers)
}

#[test]
fn leader_kills_lose_no_acknowledged_transfer() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let kills = std::env::var("PMTX_SOAK_KILLS").ok().and_then(|kills| kills.parse().ok()).unwrap_or(20);
    let mut failovers = run(kills, None).unwrap_or_else(|violation| panic!("{violation}"));
    failovers.sort();
    let at = |fraction: f64| failovers[((failovers.len() - 1) as f64 * fraction).round() as usize];
    let (median, max) = (at(0.5), at(1.0));
    eprintln!(
        "failover (kill to a new leader accepting writes): min {:?}, p10 {:?}, median {median:?}, p90 {:?}, max {max:?}",
        at(0.0),
        at(0.1),
        at(0.9)
    );
    // A survivor stands once the leader lease (the longest election
    // timeout, 300 ms) is out after the last heartbeat, when the killed
    // leader's connections closed and its port refuses connections
    // (crates/replica/src/failover.rs); openraft's own timers, a lease
    // plus 150-300 ms and more after a lost vote, are the fallback. The
    // 200-kill soak's median was 0.32 s (docs/replication.md,
    // "Failover"); the bound leaves room for a loaded two-core machine.
    // Without fast failover a follower stands a lease plus its own
    // timeout after the last heartbeat, and 600 ms later still after
    // losing a vote to a longer log (medians 1.1-1.3 s).
    let bound = if no_fast_failover() { Duration::from_secs(3) } else { Duration::from_secs(1) };
    assert!(median < bound, "median failover {median:?}");
}

#[test]
fn control_acknowledging_before_the_majority_loses_transfers() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    match run(6, Some("acknowledge-before-majority")) {
        Err(violation) => eprintln!("the control failed as it must: {violation}"),
        Ok(_) => panic!("acknowledging before the majority lost nothing in 6 leader kills: the test cannot fail"),
    }
}
