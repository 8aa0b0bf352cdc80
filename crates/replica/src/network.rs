//! The transport: framed messages over TCP (tokio), one connection per
//! peer, reconnected on failure; and a fault-injecting wrapper for tests.
//!
//! A frame is a little-endian `u32` length and that many bytes of bincode.
//! A connection carries one request at a time, answered in order.

use crate::types::{AdminReply, AdminRequest, NodeId, TypeConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame accepted (a snapshot chunk or a batch of entries).
const MAX_FRAME: usize = 256 << 20;
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A request from one node (or `pmtx cluster`) to another.
#[derive(Serialize, Deserialize)]
pub(crate) enum Message {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Admin(AdminRequest),
}

/// The answer to a [`Message`].
#[derive(Serialize, Deserialize)]
pub(crate) enum Reply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Admin(AdminReply),
}

/// Writes one frame.
pub(crate) async fn write_frame<T: Serialize>(stream: &mut TcpStream, value: &T) -> std::io::Result<usize> {
    let bytes = bincode::serialize(value).map_err(|error| std::io::Error::other(error.to_string()))?;
    let mut frame = Vec::with_capacity(4 + bytes.len());
    frame.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    frame.extend_from_slice(&bytes);
    stream.write_all(&frame).await?;
    Ok(frame.len())
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub(crate) async fn read_frame<T: for<'de> Deserialize<'de>>(stream: &mut TcpStream) -> std::io::Result<Option<T>> {
    let mut length = [0u8; 4];
    match stream.read_exact(&mut length).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {length} bytes")));
    }
    let mut bytes = vec![0u8; length];
    stream.read_exact(&mut bytes).await?;
    bincode::deserialize(&bytes)
        .map(Some)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error.to_string()))
}

/// Bytes sent by this process's Raft clients (for the benchmark's bytes
/// per transaction).
#[derive(Default, Debug)]
pub struct TrafficCounter {
    bytes: std::sync::atomic::AtomicU64,
}

impl TrafficCounter {
    /// Bytes sent so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A connection to one address, made on first use and again after a
/// failure.
pub(crate) struct Connection {
    addr: String,
    stream: Option<TcpStream>,
    traffic: Arc<TrafficCounter>,
}

/// Why a call failed: the peer could not be reached, or the exchange broke.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("{0}: {1}")]
    Exchange(String, std::io::Error),
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
}

impl Connection {
    pub fn new(addr: String, traffic: Arc<TrafficCounter>) -> Self {
        Self { addr, stream: None, traffic }
    }

    /// Sends `message` and waits up to `timeout` for the reply.
    pub async fn call(&mut self, message: &Message, timeout: Duration) -> Result<Reply, CallError> {
        if self.stream.is_none() {
            let connect = tokio::time::timeout(CONNECT_TIMEOUT.min(timeout), TcpStream::connect(&self.addr)).await;
            let stream = match connect {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return Err(CallError::Connect(self.addr.clone(), error)),
                Err(_) => return Err(CallError::Connect(self.addr.clone(), std::io::ErrorKind::TimedOut.into())),
            };
            let _ = stream.set_nodelay(true);
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        let exchange = async {
            let sent = write_frame(stream, message).await?;
            let reply: Option<Reply> = read_frame(stream).await?;
            Ok::<_, std::io::Error>((sent, reply))
        };
        let result = tokio::time::timeout(timeout, exchange).await;
        match result {
            Ok(Ok((sent, Some(reply)))) => {
                self.traffic.add(sent);
                Ok(reply)
            }
            Ok(Ok((_, None))) => {
                self.stream = None;
                Err(CallError::Exchange(self.addr.clone(), std::io::ErrorKind::UnexpectedEof.into()))
            }
            Ok(Err(error)) => {
                self.stream = None;
                Err(CallError::Exchange(self.addr.clone(), error))
            }
            Err(_) => {
                // The reply may still come: a new connection keeps the
                // request-reply pairing simple.
                self.stream = None;
                Err(CallError::Timeout(self.addr.clone(), timeout))
            }
        }
    }
}

/// Sends one admin request to the node at `addr` (for `pmtx cluster`).
pub async fn admin_call(addr: &str, request: AdminRequest, timeout: Duration) -> Result<AdminReply, String> {
    let mut connection = Connection::new(addr.to_string(), Arc::default());
    match connection.call(&Message::Admin(request), timeout).await {
        Ok(Reply::Admin(reply)) => Ok(reply),
        Ok(_) => Err(format!("{addr} answered with something else than an admin reply")),
        Err(error) => Err(error.to_string()),
    }
}

/// Makes TCP clients to peers.
#[derive(Clone, Default)]
pub struct TcpNetwork {
    traffic: Arc<TrafficCounter>,
}

impl TcpNetwork {
    /// A network counting what it sends in `traffic`.
    pub fn new(traffic: Arc<TrafficCounter>) -> Self {
        Self { traffic }
    }
}

/// A TCP client to one peer.
pub struct TcpClient {
    target: NodeId,
    connection: Connection,
}

fn rpc_error<E: std::error::Error>(error: CallError) -> RPCError<NodeId, BasicNode, E> {
    match error {
        CallError::Connect(..) => RPCError::Unreachable(Unreachable::new(&error)),
        _ => RPCError::Network(NetworkError::new(&error)),
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    let error = std::io::Error::new(std::io::ErrorKind::InvalidData, "reply of another kind");
    RPCError::Network(NetworkError::new(&error))
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        TcpClient { target, connection: Connection::new(node.addr.clone(), Arc::clone(&self.traffic)) }
    }
}

/// How long the leader waits before it tries an unreachable peer again
/// (openraft's default is 500 ms): a restarted node that hears from no
/// leader for a lease plus its election timeout stands for election and,
/// with a higher term, deposes the leader, so a peer coming back should
/// hear from it soon. A refused connect on loopback costs microseconds;
/// one to a silent host is bounded by `CONNECT_TIMEOUT`.
const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(50);

impl RaftNetwork<TypeConfig> for TcpClient {
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.connection.call(&Message::Append(rpc), option.hard_ttl()).await.map_err(rpc_error)? {
            Reply::Append(Ok(response)) => Ok(response),
            Reply::Append(Err(error)) => Err(RPCError::RemoteError(RemoteError::new(self.target, error))),
            _ => Err(unexpected()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        match self.connection.call(&Message::Snapshot(rpc), option.hard_ttl()).await.map_err(rpc_error)? {
            Reply::Snapshot(Ok(response)) => Ok(response),
            Reply::Snapshot(Err(error)) => Err(RPCError::RemoteError(RemoteError::new(self.target, error))),
            _ => Err(unexpected()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.connection.call(&Message::Vote(rpc), option.hard_ttl()).await.map_err(rpc_error)? {
            Reply::Vote(Ok(response)) => Ok(response),
            Reply::Vote(Err(error)) => Err(RPCError::RemoteError(RemoteError::new(self.target, error))),
            _ => Err(unexpected()),
        }
    }
}

/// Faults to inject between nodes of one process (tests): which links are
/// cut, and how often a message is dropped, delayed or sent twice.
#[derive(Debug)]
pub struct Faults {
    state: parking_lot::Mutex<FaultState>,
}

#[derive(Debug)]
struct FaultState {
    /// Per node, its side of a partition (nodes on different sides cannot
    /// talk); nodes not listed talk to everyone.
    sides: std::collections::HashMap<NodeId, u32>,
    drop_percent: u32,
    duplicate_percent: u32,
    delay_percent: u32,
    max_delay: Duration,
    rng: u64,
}

/// What to do with one message.
enum Fate {
    Cut,
    LoseRequest,
    LoseReply,
    Deliver { twice: bool, delay: Duration },
}

impl Faults {
    /// No faults; `seed` drives the random choices.
    pub fn new(seed: u64) -> Arc<Self> {
        Arc::new(Self {
            state: parking_lot::Mutex::new(FaultState {
                sides: Default::default(),
                drop_percent: 0,
                duplicate_percent: 0,
                delay_percent: 0,
                max_delay: Duration::ZERO,
                rng: seed | 1,
            }),
        })
    }

    /// Cuts the network into `groups`: nodes of different groups cannot
    /// talk (both directions); nodes in no group talk to no one listed.
    pub fn partition(&self, groups: &[&[NodeId]]) {
        let mut state = self.state.lock();
        state.sides.clear();
        for (side, group) in groups.iter().enumerate() {
            for node in group.iter() {
                state.sides.insert(*node, side as u32);
            }
        }
    }

    /// Isolates `node` from every other node.
    pub fn isolate(&self, node: NodeId, all: &[NodeId]) {
        let others: Vec<NodeId> = all.iter().copied().filter(|other| *other != node).collect();
        self.partition(&[&[node], &others]);
    }

    /// Heals every partition.
    pub fn heal(&self) {
        self.state.lock().sides.clear();
    }

    /// Sets the chances (in percent) that a message is dropped, sent twice
    /// or delayed (by up to `max_delay`).
    pub fn set_noise(&self, drop_percent: u32, duplicate_percent: u32, delay_percent: u32, max_delay: Duration) {
        let mut state = self.state.lock();
        state.drop_percent = drop_percent;
        state.duplicate_percent = duplicate_percent;
        state.delay_percent = delay_percent;
        state.max_delay = max_delay;
    }

    fn fate(&self, from: NodeId, to: NodeId) -> Fate {
        let mut state = self.state.lock();
        let (a, b) = (state.sides.get(&from).copied(), state.sides.get(&to).copied());
        if (a.is_some() || b.is_some()) && a != b {
            return Fate::Cut;
        }
        let mut roll = || {
            // xorshift64: the same seed gives the same faults.
            state.rng ^= state.rng << 13;
            state.rng ^= state.rng >> 7;
            state.rng ^= state.rng << 17;
            state.rng
        };
        let (r1, r2, r3, r4) = (roll() % 100, roll() % 100, roll() % 100, roll());
        if (r1 as u32) < state.drop_percent {
            return if r4 % 2 == 0 { Fate::LoseRequest } else { Fate::LoseReply };
        }
        let twice = (r2 as u32) < state.duplicate_percent;
        let delay = if (r3 as u32) < state.delay_percent && !state.max_delay.is_zero() {
            Duration::from_micros(r4 % state.max_delay.as_micros().max(1) as u64)
        } else {
            Duration::ZERO
        };
        Fate::Deliver { twice, delay }
    }
}

/// A network whose clients pass each message through [`Faults`].
#[derive(Clone)]
pub struct FaultyNetwork<N> {
    inner: N,
    from: NodeId,
    faults: Arc<Faults>,
}

impl<N> FaultyNetwork<N> {
    /// Wraps the network of node `from`.
    pub fn new(inner: N, from: NodeId, faults: Arc<Faults>) -> Self {
        Self { inner, from, faults }
    }
}

/// A client of a [`FaultyNetwork`].
pub struct FaultyClient<C> {
    inner: C,
    from: NodeId,
    to: NodeId,
    faults: Arc<Faults>,
}

impl<N: RaftNetworkFactory<TypeConfig> + Clone> RaftNetworkFactory<TypeConfig> for FaultyNetwork<N> {
    type Network = FaultyClient<N::Network>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        FaultyClient {
            inner: self.inner.new_client(target, node).await,
            from: self.from,
            to: target,
            faults: Arc::clone(&self.faults),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("fault injected: {0}")]
struct Injected(&'static str);

macro_rules! faulty_call {
    ($self:ident, $method:ident, $rpc:ident, $option:ident) => {{
        match $self.faults.fate($self.from, $self.to) {
            Fate::Cut => Err(RPCError::Unreachable(Unreachable::new(&Injected("partitioned")))),
            Fate::LoseRequest => {
                tokio::time::sleep($option.hard_ttl().min(Duration::from_millis(50))).await;
                Err(RPCError::Network(NetworkError::new(&Injected("request lost"))))
            }
            Fate::LoseReply => {
                let _ = $self.inner.$method($rpc, $option).await;
                Err(RPCError::Network(NetworkError::new(&Injected("reply lost"))))
            }
            Fate::Deliver { twice, delay } => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if twice {
                    let copy = $rpc.clone();
                    let option_copy = RPCOption::new($option.hard_ttl());
                    let _ = $self.inner.$method(copy, option_copy).await;
                }
                $self.inner.$method($rpc, $option).await
            }
        }
    }};
}

impl<C: RaftNetwork<TypeConfig>> RaftNetwork<TypeConfig> for FaultyClient<C> {
    fn backoff(&self) -> Backoff {
        self.inner.backoff()
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        faulty_call!(self, append_entries, rpc, option)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        faulty_call!(self, install_snapshot, rpc, option)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        faulty_call!(self, vote, rpc, option)
    }
}
