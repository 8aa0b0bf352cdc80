//! What the Raft log carries and what crosses the network.

use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// A node's id in the cluster (Raft's node id).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The Raft type configuration of a pmtx cluster: entries carry batches
    /// of committed write sets; a node is a TCP address.
    pub TypeConfig:
        D = Batch,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One write of a committed transaction, as its after-image: what a
/// follower replays. Reads are not shipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// The table's position in the pool's schema.
    pub table: u32,
    /// The row's key.
    pub key: Vec<u8>,
    /// The row's new value; `None` deletes it.
    pub value: Option<Vec<u8>>,
}

/// The writes of one committed transaction, in the order it made them,
/// packed into one buffer as records (see [`WriteSet::push`]): a write
/// costs no allocation of its own when it is recorded, and the set is
/// encoded, sent, cloned and decoded as one byte string.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteSet {
    #[serde(with = "byte_string")]
    packed: Vec<u8>,
    /// Undo rows the executing node wrote for it (its before-images).
    /// Nothing reads it since the rows became a ring that applying does
    /// not delete from; it stays so that logs written before still decode.
    pub undo_rows: u32,
}

impl WriteSet {
    /// Appends a write: row `key` of table `table` becomes `value` (`None`:
    /// deleted). Keys are at most 65,535 bytes, as in every pmtx table.
    pub fn push(&mut self, table: u32, key: &[u8], value: Option<&[u8]>) {
        encode_record(table, key, value, &mut self.packed);
    }

    /// Whether it holds no write.
    pub fn is_empty(&self) -> bool {
        self.packed.is_empty()
    }

    /// Forgets every write (keeping the buffer).
    pub fn clear(&mut self) {
        self.packed.clear();
    }

    /// Takes the writes, leaving an empty set with room for as many bytes.
    pub(crate) fn take(&mut self) -> WriteSet {
        let room = Vec::with_capacity(self.packed.len());
        WriteSet { packed: std::mem::replace(&mut self.packed, room), undo_rows: std::mem::take(&mut self.undo_rows) }
    }

    /// The writes, decoded; an error names a damaged set.
    pub fn writes(&self) -> Result<Vec<Write>, DamagedRecords> {
        self.records()
            .map(|record| {
                record.map(|(table, key, value)| Write { table, key: key.to_vec(), value: value.map(<[u8]>::to_vec) })
            })
            .collect()
    }

    /// The writes, borrowed from the buffer, in order.
    pub(crate) fn records(&self) -> Records<'_> {
        Records { bytes: &self.packed }
    }
}

/// A packed record list (a write set, an undo row) that does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a packed write record is damaged")]
pub struct DamagedRecords;

/// Bytes of a record besides its key and value.
pub(crate) const RECORD_HEADER: usize = 4 + 2 + 1 + 4;

/// Appends one record: `table` (u32 LE), the key's length (u16 LE), the
/// key, then 0 (no value) or 1, the value's length (u32 LE) and the value.
pub(crate) fn encode_record(table: u32, key: &[u8], value: Option<&[u8]>, out: &mut Vec<u8>) {
    debug_assert!(key.len() <= u16::MAX as usize);
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
    match value {
        Some(value) => {
            out.push(1);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        None => out.push(0),
    }
}

/// The records of a packed buffer, borrowed: `(table, key, value)`.
pub(crate) struct Records<'a> {
    bytes: &'a [u8],
}

impl<'a> Records<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }
}

/// A decoded record: table, key, value (`None`: absent or deleted).
pub(crate) type Record<'a> = (u32, &'a [u8], Option<&'a [u8]>);

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DamagedRecords>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.is_empty() {
            return None;
        }
        let record = decode_record(self.bytes);
        match record {
            Ok((record, rest)) => {
                self.bytes = rest;
                Some(Ok(record))
            }
            Err(error) => {
                self.bytes = &[];
                Some(Err(error))
            }
        }
    }
}

fn decode_record(bytes: &[u8]) -> Result<(Record<'_>, &[u8]), DamagedRecords> {
    let header = bytes.get(..6).ok_or(DamagedRecords)?;
    let table = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let key_len = u16::from_le_bytes(header[4..6].try_into().expect("2 bytes")) as usize;
    let key = bytes.get(6..6 + key_len).ok_or(DamagedRecords)?;
    let rest = &bytes[6 + key_len..];
    match rest.first() {
        Some(0) => Ok(((table, key, None), &rest[1..])),
        Some(1) => {
            let len = rest.get(1..5).ok_or(DamagedRecords)?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let value = rest.get(5..5 + len).ok_or(DamagedRecords)?;
            Ok(((table, key, Some(value)), &rest[5 + len..]))
        }
        _ => Err(DamagedRecords),
    }
}

/// Serde for a `Vec<u8>` as a byte string (bincode: a length and the bytes,
/// copied whole instead of element by element).
mod byte_string {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(Bytes)
    }

    struct Bytes;

    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("a byte string")
        }

        fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(bytes)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(byte) = seq.next_element()? {
                bytes.push(byte);
            }
            Ok(bytes)
        }
    }
}

/// Which leader term of which node produced a batch: a node's pool holds
/// the writes of its own current leadership already (it executed them),
/// and only those.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// The node that executed the transactions.
    pub node: NodeId,
    /// That node's leadership incarnation (bumped, durably, each time it
    /// starts leading and each time it rolls back what it executed).
    pub incarnation: u64,
}

/// A Raft log entry's payload: the write sets of transactions committed on
/// the leader, consecutive in its commit order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Who executed them.
    pub origin: Origin,
    /// The sequence number of the first write set; the others follow
    /// without gaps.
    pub first_seq: u64,
    /// The write sets, in commit order.
    pub txns: Vec<WriteSet>,
}

impl Batch {
    /// The sequence number of the last write set (`first_seq - 1` if empty).
    pub fn last_seq(&self) -> u64 {
        self.first_seq + self.txns.len() as u64 - 1
    }
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "batch of {} txns from node {} incarnation {} seq {}",
            self.txns.len(),
            self.origin.node,
            self.origin.incarnation,
            self.first_seq
        )
    }
}

/// What applying an entry answers (nothing a client needs: commits are
/// acknowledged through the node's own bookkeeping).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied;

/// The state of one node, as `pmtx cluster status` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// This node's id.
    pub id: NodeId,
    /// Leader, Follower, Candidate, Learner or Shutdown.
    pub role: String,
    /// The current term.
    pub term: u64,
    /// The leader this node knows of, with its address.
    pub leader: Option<(NodeId, String)>,
    /// The index of the last log entry.
    pub last_log_index: Option<u64>,
    /// The term of the last log entry (with its index, how up to date the
    /// log is in an election).
    pub last_log_term: Option<u64>,
    /// The index of the last applied entry.
    pub applied_index: Option<u64>,
    /// Voters and learners with their addresses.
    pub voters: Vec<(NodeId, String)>,
    /// Learners (receive the log, do not vote).
    pub learners: Vec<(NodeId, String)>,
    /// Whether this node accepts transactions now (leading and caught up).
    pub accepting_writes: bool,
}

/// A checksum of every user table of a node's pool at an applied index,
/// to compare replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolChecksum {
    /// The applied index the checksum is of.
    pub applied_index: Option<u64>,
    /// Per table: name, rows, CRC-32C of the rows in key order.
    pub tables: Vec<(String, u64, u32)>,
}

/// A request of `pmtx cluster` to a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    /// The node's status.
    Status,
    /// Add a node (as a learner, then a voter): sent to the leader.
    Add {
        /// Its id.
        id: NodeId,
        /// Its address.
        addr: String,
    },
    /// Remove a node from the voters and learners: sent to the leader.
    Remove {
        /// Its id.
        id: NodeId,
    },
    /// A checksum of the user tables, taken when the node is quiet.
    Checksum,
    /// Start a cluster of this node alone, or of the given members.
    Initialize {
        /// Members with addresses.
        members: Vec<(NodeId, String)>,
    },
}

/// A node's answer to an [`AdminRequest`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminReply {
    /// The status.
    Status(NodeStatus),
    /// Done.
    Done,
    /// The checksum.
    Checksum(PoolChecksum),
    /// Refused or failed, with the reason.
    Error(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> WriteSet {
        let mut set = WriteSet::default();
        set.push(3, b"key", Some(b"value"));
        set.push(0, b"", None);
        set.push(u32::MAX, &[7; 300], Some(&[]));
        set.undo_rows = 2;
        set
    }

    #[test]
    fn a_write_set_keeps_its_writes_in_order_through_bincode() {
        let batch = Batch { origin: Origin { node: 2, incarnation: 9 }, first_seq: 41, txns: vec![set(), set()] };
        let bytes = bincode::serialize(&batch).unwrap();
        // A byte string, not a sequence of bytes each with a header: the
        // packed writes plus a length and the undo row count per set.
        let packed = set().packed.len();
        assert_eq!(bytes.len(), 8 + 8 + 8 + 8 + 2 * (8 + packed + 4));
        let decoded: Batch = bincode::deserialize(&bytes).unwrap();
        assert_eq!(decoded, batch);
        assert_eq!(
            decoded.txns[1].writes().unwrap(),
            vec![
                Write { table: 3, key: b"key".to_vec(), value: Some(b"value".to_vec()) },
                Write { table: 0, key: Vec::new(), value: None },
                Write { table: u32::MAX, key: vec![7; 300], value: Some(Vec::new()) },
            ]
        );
        assert_eq!(decoded.txns[1].undo_rows, 2);
    }

    #[test]
    fn a_damaged_write_set_is_reported_not_replayed_short() {
        let whole = set().packed;
        for cut in 1..whole.len() {
            let records: Vec<_> = Records::new(&whole[..cut]).collect();
            // A cut inside a record damages it; a cut between records
            // leaves whole records only.
            let boundaries = [3 + 6 + 1 + 4 + 5, 3 + 6 + 1 + 4 + 5 + 6 + 1];
            if boundaries.contains(&cut) {
                assert!(records.iter().all(Result::is_ok), "cut at {cut}");
            } else {
                assert_eq!(records.last(), Some(&Err(DamagedRecords)), "cut at {cut}");
            }
        }
        let mut bad_tag = whole.clone();
        bad_tag[4 + 2 + 3] = 2;
        assert_eq!(Records::new(&bad_tag).next(), Some(Err(DamagedRecords)));
    }
}
