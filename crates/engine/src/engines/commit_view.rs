//! The transaction's write set as the durability schemes see it
//! ([`CommitView`]): each write's table, key and new value, read in place
//! through the write set's public accessors.

use crate::cc::write_set::WriteSet;
use crate::storage::commit_view::{CommitView, CommitWrite};

impl<R> CommitView for WriteSet<R> {
    type Writes<'a>
        = WriteSetWrites<'a, R>
    where
        Self: 'a;

    #[inline]
    fn write_count(&self) -> usize {
        self.len()
    }

    #[inline]
    fn writes(&self) -> WriteSetWrites<'_, R> {
        WriteSetWrites { set: self, next: 0, end: self.len() }
    }
}

/// The writes of a [`WriteSet`], in its order.
pub struct WriteSetWrites<'a, R> {
    set: &'a WriteSet<R>,
    next: usize,
    end: usize,
}

impl<'a, R> Iterator for WriteSetWrites<'a, R> {
    type Item = CommitWrite<'a>;

    #[inline]
    fn next(&mut self) -> Option<CommitWrite<'a>> {
        if self.next == self.end {
            return None;
        }
        let write = self.set.view(self.next);
        self.next += 1;
        Some(CommitWrite { table: write.table, key: write.key, value: write.value })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }
}

impl<R> ExactSizeIterator for WriteSetWrites<'_, R> {}
