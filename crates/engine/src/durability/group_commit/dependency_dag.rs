//! SP^3's recovery rule: the logged records whose dependencies were never
//! durable, which replay must drop (only logs opened with
//! `GroupCommitConfig::dependency_dag` carry dependencies).

use crate::durability::log::{self, SegmentStore};
use crate::error::{DbError, DbResult};
use crate::storage::record;

/// SP^3's dependency DAG over every complete record at or above
/// `start_epoch` (older ones are in the checkpoint): in TID order (every
/// dependency and every earlier record of the same worker has a smaller
/// TID), a record is kept when every dependency at or above `start_epoch` is
/// kept and its worker's earlier records are; returns the TIDs dropped. SP^3
/// TIDs carry their worker, so they are unique across workers.
pub(super) fn dependency_dag_drops<S: SegmentStore>(
    store: &S,
    segments: &[log::FoundSegment],
    start_epoch: u64,
) -> DbResult<std::collections::HashSet<u64>> {
    // Each worker's chain is scanned on its own thread, as the replay does.
    let mut chains: std::collections::BTreeMap<u16, Vec<&log::FoundSegment>> = Default::default();
    for segment in segments {
        chains.entry(segment.worker).or_default().push(segment);
    }
    let mut nodes: Vec<(u64, u16, Vec<u64>)> = std::thread::scope(|scope| {
        let scans: Vec<_> = chains
            .values()
            .map(|chain| {
                scope.spawn(move || -> DbResult<Vec<(u64, u16, Vec<u64>)>> {
                    let mut nodes = Vec::new();
                    for segment in chain {
                        store.scan_segment(segment, &mut |record| {
                            if record.tid <= record::MAX_TID && record::epoch_of_tid(record.tid) >= start_epoch {
                                nodes.push((record.tid, segment.worker, record.dependencies));
                            }
                        })?;
                    }
                    Ok(nodes)
                })
            })
            .collect();
        let mut nodes = Vec::new();
        for scan in scans {
            nodes.extend(scan.join().expect("a log scan panicked")?);
        }
        Ok::<_, DbError>(nodes)
    })?;
    nodes.sort_unstable_by_key(|(tid, _, _)| *tid);
    let mut kept = std::collections::HashSet::with_capacity(nodes.len());
    let mut dropped = std::collections::HashSet::new();
    let mut broken_workers = std::collections::HashSet::new();
    for (tid, worker, dependencies) in nodes {
        let complete = !broken_workers.contains(&worker)
            && dependencies
                .iter()
                .all(|dependency| record::epoch_of_tid(*dependency) < start_epoch || kept.contains(dependency));
        if complete {
            kept.insert(tid);
        } else {
            broken_workers.insert(worker);
            dropped.insert(tid);
        }
    }
    Ok(dropped)
}
