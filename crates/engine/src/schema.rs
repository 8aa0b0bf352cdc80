//! Table schemas: name, value-size limit, primary index kind, secondary
//! ordered indexes. The pool stores them (`crate::catalog`): an open either
//! declares them, checked against what is stored, or takes them from the
//! pool ([`crate::DbOptions::from_pool`]).

/// Identifies a table by its position in the schema list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId(pub u32);

/// Kind of primary index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryIndexKind {
    /// Ordered B+tree: point operations and range scans.
    Ordered,
    /// Hash index: point operations only (scans are refused).
    Hash,
}

/// Builds the secondary key of a row from its primary key and value. The
/// primary key is appended by the engine, so secondary keys need not be
/// unique.
pub type SecondaryKeyFn = fn(primary_key: &[u8], value: &[u8]) -> Vec<u8>;

/// A secondary ordered index.
#[derive(Clone, Debug)]
pub struct SecondaryIndexSchema {
    /// Index name.
    pub name: String,
    /// Key extractor.
    pub key: SecondaryKeyFn,
    /// False for an index read from the pool's catalog whose key function
    /// the program has not registered yet (an open refuses it).
    registered: bool,
}

impl SecondaryIndexSchema {
    /// An index known by name only (from the stored catalog).
    pub(crate) fn unregistered(name: String) -> Self {
        Self { name, key: no_key_function, registered: false }
    }

    /// Gives the index its key function.
    pub(crate) fn register(&mut self, key: SecondaryKeyFn) {
        self.key = key;
        self.registered = true;
    }

    /// Whether the index has a key function.
    pub fn is_registered(&self) -> bool {
        self.registered
    }
}

/// The key function of an unregistered index: never called, since an open
/// with an unregistered index fails (`DbOptions::validate`).
fn no_key_function(_: &[u8], _: &[u8]) -> Vec<u8> {
    Vec::new()
}

/// A table.
#[derive(Clone, Debug)]
pub struct TableSchema {
    /// Unique name.
    pub name: String,
    /// Largest value in bytes.
    pub max_value_len: usize,
    /// Largest primary key in bytes.
    pub max_key_len: usize,
    /// Primary index kind.
    pub primary: PrimaryIndexKind,
    /// Secondary ordered indexes (maintained on insert; their key fields
    /// must not change in updates).
    pub secondaries: Vec<SecondaryIndexSchema>,
    /// How many leading bytes of a primary key name its partition (`hstore`
    /// locks partitions; TPC-C: the warehouse id). `None`: the whole key
    /// is hashed to a partition, and a scan takes every partition.
    pub partition_prefix: Option<usize>,
}

impl TableSchema {
    /// An ordered table with the default limits (64 B keys, 1 KiB values).
    pub fn ordered(name: &str) -> Self {
        Self {
            name: name.to_string(),
            max_value_len: 1024,
            max_key_len: 64,
            primary: PrimaryIndexKind::Ordered,
            secondaries: Vec::new(),
            partition_prefix: None,
        }
    }

    /// A hash (point-only) table with the default limits.
    pub fn hashed(name: &str) -> Self {
        Self { primary: PrimaryIndexKind::Hash, ..Self::ordered(name) }
    }

    /// Sets the value limit.
    pub fn max_value_len(mut self, len: usize) -> Self {
        self.max_value_len = len;
        self
    }

    /// Sets the key limit.
    pub fn max_key_len(mut self, len: usize) -> Self {
        self.max_key_len = len;
        self
    }

    /// Declares that the first `len` bytes of a primary key name its
    /// partition (keys of one partition in every table share them).
    pub fn partitioned_by_prefix(mut self, len: usize) -> Self {
        self.partition_prefix = Some(len);
        self
    }

    /// Adds a secondary ordered index.
    pub fn secondary(mut self, name: &str, key: SecondaryKeyFn) -> Self {
        self.secondaries.push(SecondaryIndexSchema { name: name.to_string(), key, registered: true });
        self
    }

    /// Stable digest of the persistent-relevant parts (names, limits, kinds).
    pub(crate) fn digest_into(&self, hasher: &mut crc32fast::Hasher) {
        hasher.update(self.name.as_bytes());
        hasher.update(&(self.max_value_len as u64).to_le_bytes());
        hasher.update(&(self.max_key_len as u64).to_le_bytes());
        hasher.update(&[matches!(self.primary, PrimaryIndexKind::Hash) as u8]);
        for secondary in &self.secondaries {
            hasher.update(secondary.name.as_bytes());
        }
    }
}

/// Digest of a whole schema list.
pub(crate) fn schema_digest(tables: &[TableSchema]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for table in tables {
        table.digest_into(&mut hasher);
    }
    hasher.finalize()
}

/// Encodes unsigned integers big-endian so byte order is numeric order, for
/// composite keys such as TPC-C's (w_id, d_id, o_id).
#[derive(Default, Clone, Debug)]
pub struct KeyBuilder {
    bytes: Vec<u8>,
}

impl KeyBuilder {
    /// Empty key.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends a big-endian u8.
    pub fn u8(mut self, value: u8) -> Self {
        self.bytes.push(value);
        self
    }
    /// Appends a big-endian u16.
    pub fn u16(mut self, value: u16) -> Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }
    /// Appends a big-endian u32.
    pub fn u32(mut self, value: u32) -> Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }
    /// Appends a big-endian u64.
    pub fn u64(mut self, value: u64) -> Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }
    /// Appends bytes padded with zeros (or cut) to `width`, so that
    /// fixed-width string fields compare like their text.
    pub fn fixed(mut self, value: &[u8], width: usize) -> Self {
        let take = value.len().min(width);
        self.bytes.extend_from_slice(&value[..take]);
        self.bytes.resize(self.bytes.len() + width - take, 0);
        self
    }
    /// The key.
    pub fn build(self) -> Vec<u8> {
        self.bytes
    }
}
