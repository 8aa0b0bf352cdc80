//! What a transaction asks of the tables: one write ([`WriteOp`]) and one
//! range scan ([`ScanRequest`]). They cross the engine trait and reach the
//! concurrency control and the tables, so they live with the tables.

use crate::index::ScanDirection;
use crate::schema::TableId;
use std::ops::Bound;

/// One write of a transaction body.
#[derive(Clone, Copy, Debug)]
pub enum WriteOp<'a> {
    /// Insert or overwrite.
    Put(&'a [u8]),
    /// Insert only if absent; returns false (and writes nothing) if present.
    Insert(&'a [u8]),
    /// Overwrite only if present; returns false if absent.
    Update(&'a [u8]),
    /// Delete if present; returns false if absent.
    Delete,
}

/// A range scan request.
#[derive(Clone, Copy, Debug)]
pub struct ScanRequest<'a> {
    /// Table.
    pub table: TableId,
    /// `None` for the primary index, else a secondary index position.
    pub secondary: Option<u32>,
    /// Key range (secondary: over secondary keys).
    pub range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
    /// Direction.
    pub direction: ScanDirection,
    /// At most this many rows.
    pub limit: usize,
}
