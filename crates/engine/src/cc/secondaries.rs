//! Secondary-index bookkeeping of a transaction ([`TxState`]): the
//! entries a commit adds and drops under its row locks, and, for the
//! multi-version protocols, the entries added before the commit's TID and
//! the stale ones kept until no snapshot reads the versions that carry
//! them (`cc::versions`).
//!
//! Explained in docs/concurrency.md ("Secondary indexes under the multi-version
//! protocols").

use crate::cc::transaction::TxState;
use crate::cc::tx_sets::AddedSecondary;
use crate::cc::write_set::WriteValue;
use crate::storage::record::RowKind;
use crate::storage::table::{self, SecondaryAdded, Table};

impl<R: RowKind> TxState<R> {
    /// Multi-version protocols: adds the secondary entries of the write
    /// set's new keys now that the write set is locked, before the commit
    /// picks its TID (`Hekaton`: a snapshot at or above the TID is taken
    /// after the entries exist, and meets the locked row through them) or
    /// checks range reads (`mvcc`, `cicada`). An entry that is there
    /// already is a stale one the row takes back. The attempt's own scans
    /// of the leaves that receive them are moved forward, as for its
    /// placeholders.
    pub(crate) fn add_secondaries(&mut self, tables: &[Table<R>]) {
        if !self.keeps_versions() {
            return;
        }
        debug_assert!(self.sets.added_secondaries.is_empty());
        for write in 0..self.sets.writes.len() {
            let entry = &self.sets.writes.entries()[write];
            let (table_id, row) = (entry.table, entry.row());
            let table = &tables[table_id.0 as usize];
            if !entry.index_secondaries || table.schema().secondaries.is_empty() {
                continue;
            }
            // (`zen+` never spills a row of a table with secondary indexes.)
            let WriteValue::Bytes(value) = self.sets.writes.value_state(write) else { continue };
            let key = self.sets.writes.key(write);
            for position in 0..table.schema().secondaries.len() as u32 {
                let composite = table::secondary_index_key(table.schema(), position, key, value);
                let (inserted, change) = match table.add_secondary(position, &composite, row) {
                    Ok(SecondaryAdded::Inserted(change)) => (true, change),
                    Ok(SecondaryAdded::Present) => (false, None),
                    Err(error) => unreachable!("secondary key lengths are checked when a write is buffered: {error}"),
                };
                self.sets.added_secondaries.push(AddedSecondary {
                    write,
                    position,
                    composite,
                    inserted,
                    leaf: change.map(|change| change.leaf),
                });
                Self::note_own_insert(&mut self.sets.leaves, table_id, Some(position), change);
            }
        }
    }

    /// Undoes [`TxState::add_secondaries`] for an attempt that does not
    /// commit (rows still locked).
    pub(crate) fn remove_added_secondaries(&mut self, tables: &[Table<R>]) {
        for added in self.sets.added_secondaries.drain(..) {
            if added.inserted {
                let entry = &self.sets.writes.entries()[added.write];
                tables[entry.table.0 as usize].remove_secondary(added.position, &added.composite, entry.row());
            }
        }
    }

    /// Secondary-index maintenance for write `index` (row locked): drops
    /// the entries of the row's current value that the new value does not
    /// keep (`current` is that value, read under the lock), and adds the new
    /// value's entries when the body found it needs them.
    ///
    /// Multi-version protocols keep the entries the new value drops until
    /// no snapshot older than the commit (`tid`) is left, since such a
    /// snapshot reads the old value and must find the row under its key
    /// (`VersionStore::defer_unindex`); the new entries are in already
    /// ([`TxState::add_secondaries`]) unless the commit did not validate
    /// (`nvm-ideal`).
    pub(crate) fn maintain_secondaries(&mut self, tables: &[Table<R>], index: usize, current: Option<&[u8]>, tid: u64) {
        let entry = &self.sets.writes.entries[index];
        let table = &tables[entry.table.0 as usize];
        if table.schema().secondaries.is_empty() {
            return;
        }
        let key = self.sets.writes.key(index);
        let new = self.sets.writes.value(index);
        if let Some(snapshot) = self.protocol.snapshot() {
            let (versions, queue) = snapshot.parts();
            let (table_id, row) = (entry.table.0, entry.row());
            let address = row as *const R as usize;
            if let Some(old) = current {
                table.stale_secondaries(key, old, new, |position, composite| {
                    versions.defer_unindex(queue, address, (table_id, position), composite, tid);
                });
            }
            let (true, Some(value)) = (entry.index_secondaries, new) else { return };
            let mut added = self.sets.added_secondaries.iter().filter(|added| added.write == index).peekable();
            if added.peek().is_none() {
                // Not added before the TID: add them now.
                for position in 0..table.schema().secondaries.len() as u32 {
                    let composite = table::secondary_index_key(table.schema(), position, key, value);
                    match table.add_secondary(position, &composite, row) {
                        Ok(SecondaryAdded::Inserted(_)) => {}
                        Ok(SecondaryAdded::Present) => versions.cancel_unindex(address, position, &composite),
                        Err(error) => {
                            unreachable!("secondary key lengths are checked when a write is buffered: {error}")
                        }
                    }
                }
            } else {
                for added in added.filter(|added| !added.inserted) {
                    versions.cancel_unindex(address, added.position, &added.composite);
                }
            }
            return;
        }
        if let Some(old) = current {
            table.unindex_secondaries(key, old, new, entry.row());
        }
        if let (true, Some(value)) = (entry.index_secondaries, new) {
            if let Err(error) = table.index_secondaries(key, value, entry.row()) {
                unreachable!("secondary key lengths are checked when a write is buffered: {error}");
            }
        }
    }
}
