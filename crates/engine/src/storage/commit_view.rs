//! A storage-neutral view of a commit: the writes a durability scheme
//! encodes (table, key, new value or delete), whatever rows the storage
//! keeps them in. The transaction's write set implements it
//! (`engines::commit_view`); the logs are generic over it, so each commit
//! path is monomorphized and reads the writes where they already are (no
//! copy, no allocation, no dynamic call per write).

use crate::schema::TableId;

/// One write of a commit, as a durability scheme encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitWrite<'a> {
    /// Table.
    pub table: TableId,
    /// Primary key.
    pub key: &'a [u8],
    /// New value, `None` for a delete.
    pub value: Option<&'a [u8]>,
}

/// The writes of a commit, in the order the commit made them (the order
/// a log record lists them in).
pub trait CommitView {
    /// Iterator over the writes.
    type Writes<'a>: Iterator<Item = CommitWrite<'a>>
    where
        Self: 'a;
    /// Number of writes.
    fn write_count(&self) -> usize;
    /// Every write, in order.
    fn writes(&self) -> Self::Writes<'_>;
}

/// A plain list of writes (tests, tools).
impl<'w> CommitView for [CommitWrite<'w>] {
    type Writes<'a>
        = SliceWrites<'a, 'w>
    where
        Self: 'a;

    #[inline]
    fn write_count(&self) -> usize {
        self.len()
    }

    #[inline]
    fn writes(&self) -> SliceWrites<'_, 'w> {
        SliceWrites(self.iter())
    }
}

/// The writes of a `[CommitWrite]`.
pub struct SliceWrites<'a, 'w>(std::slice::Iter<'a, CommitWrite<'w>>);

impl<'a, 'w: 'a> Iterator for SliceWrites<'a, 'w> {
    type Item = CommitWrite<'a>;

    #[inline]
    fn next(&mut self) -> Option<CommitWrite<'a>> {
        self.0.next().map(|write| CommitWrite { table: write.table, key: write.key, value: write.value })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}
