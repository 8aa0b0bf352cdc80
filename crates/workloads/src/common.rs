//! Helpers shared by the workloads: table-id verification, the parallel
//! loader, paged read-only scans.

use crate::WorkloadError;
use pmtx_engine::{Database, DbError, Outcome, ScanDirection, TableId, TableSchema, Transaction, TxError, Worker};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Rows per page of the paged scans of checks.
pub(crate) const PAGE_ROWS: usize = 1000;

/// Largest redo record a load transaction should produce (fits the 256 KiB
/// log segments of `DbOptions::in_memory` with room to spare).
pub(crate) const LOAD_BATCH_BYTES: usize = 48 << 10;

/// Checks that `db` was opened with `tables` in this order (table ids are
/// positions) and returns their ids.
pub(crate) fn verify_tables(db: &Database, tables: &[TableSchema]) -> Result<Vec<TableId>, WorkloadError> {
    tables
        .iter()
        .enumerate()
        .map(|(position, schema)| {
            let id = db.table_id(&schema.name).map_err(|_| {
                WorkloadError::InvalidOption(format!(
                    "the database has no table {:?}: open it with the workload's tables()",
                    schema.name
                ))
            })?;
            if id != TableId(position as u32) {
                return Err(WorkloadError::InvalidOption(format!(
                    "table {:?} has id {} instead of {position}: open the database with exactly the workload's \
                     tables(), in order",
                    schema.name, id.0
                )));
            }
            Ok(id)
        })
        .collect()
}

/// A corrupt-data error for a transaction body.
pub(crate) fn corrupt(message: impl Into<String>) -> TxError {
    TxError::Db(DbError::Corrupt(message.into()))
}

/// Inserts every row in one transaction; a row that already exists is an
/// error (the database was loaded before).
pub(crate) fn insert_rows(worker: &mut Worker, rows: &[(TableId, Vec<u8>, Vec<u8>)]) -> Result<(), DbError> {
    worker.run_pipelined(0, false, |tx| insert_all(tx, rows))?;
    Ok(())
}

/// Inserts `rows` inside a transaction body.
pub(crate) fn insert_all(tx: &mut Transaction<'_>, rows: &[(TableId, Vec<u8>, Vec<u8>)]) -> Result<(), TxError> {
    for (table, key, value) in rows {
        if !tx.insert(*table, key, value)? {
            return Err(TxError::Db(DbError::InvalidConfig(format!(
                "load: a row of table #{} already exists; load expects an empty database",
                table.0
            ))));
        }
    }
    Ok(())
}

/// Runs `run(worker, worker_slot, task_index, task)` for every task on `threads` workers
/// (slots `0..threads`, capped at the database's worker count) with
/// pipelined commits, then waits until everything is durable. `run`
/// returns the rows it loaded, which feed `progress(done, total)`.
pub(crate) fn load_parallel<T: Sync>(
    db: &Arc<Database>,
    threads: usize,
    tasks: &[T],
    total_rows: u64,
    progress: &(dyn Fn(u64, u64) + Sync),
    run: impl Fn(&mut Worker, usize, usize, &T) -> Result<u64, WorkloadError> + Sync,
) -> Result<(), WorkloadError> {
    let threads = threads.clamp(1, db.options().workers).min(tasks.len().max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<WorkloadError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for slot in 0..threads {
            let (next, done, failed, first_error, run) = (&next, &done, &failed, &first_error, &run);
            scope.spawn(move || {
                let result = (|| -> Result<(), WorkloadError> {
                    let mut worker = db.worker(slot)?;
                    while !failed.load(Ordering::Relaxed) {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(task) = tasks.get(index) else { break };
                        let rows = run(&mut worker, slot, index, task)?;
                        let now = done.fetch_add(rows, Ordering::Relaxed) + rows;
                        progress(now.min(total_rows), total_rows);
                        worker.drain_acknowledged(|_, _| {});
                    }
                    wait_all_acknowledged(&mut worker);
                    Ok(())
                })();
                if let Err(error) = result {
                    failed.store(true, Ordering::Relaxed);
                    first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(error);
                }
            });
        }
    });
    if let Some(error) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(error);
    }
    progress(total_rows, total_rows);
    Ok(())
}

/// Waits until every pipelined commit of `worker` is durable; returns how
/// many were acknowledged. A database closed or crashed meanwhile
/// acknowledges no more: the count then says how many were.
pub fn wait_all_acknowledged(worker: &mut Worker) -> usize {
    let mut acknowledged = 0;
    if let Err(error) = worker.wait_all_acknowledged(|_, _| acknowledged += 1) {
        debug_assert!(matches!(error, pmtx_engine::DbError::Closed), "{error}");
    }
    acknowledged
}

/// Visits every row of `table` with `lower <= key < upper` in key order, in
/// read-only transactions of [`PAGE_ROWS`] rows (consistent only if the
/// database is quiescent).
pub(crate) fn scan_pages(
    worker: &mut Worker,
    table: TableId,
    lower: &[u8],
    upper: Option<&[u8]>,
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), WorkloadError>,
) -> Result<(), WorkloadError> {
    let mut from = lower.to_vec();
    let mut inclusive = true;
    loop {
        let lower_bound = if inclusive { Bound::Included(from.as_slice()) } else { Bound::Excluded(from.as_slice()) };
        let upper_bound = upper.map_or(Bound::Unbounded, Bound::Excluded);
        let (outcome, _) = worker.run_pipelined(0, true, |tx| {
            tx.scan(table, (lower_bound, upper_bound), ScanDirection::Forward, PAGE_ROWS)
        })?;
        worker.drain_acknowledged(|_, _| {});
        let Outcome::Committed(rows) = outcome else {
            return Err(WorkloadError::Inconsistent("a read-only scan rolled back".into()));
        };
        for (key, value) in &rows {
            visit(key, value)?;
        }
        match rows.last() {
            Some((key, _)) if rows.len() == PAGE_ROWS => {
                from.clone_from(key);
                inclusive = false;
            }
            _ => return Ok(()),
        }
    }
}

/// Counts the rows of the table named `table` (ordered or hash) with the
/// engine's row dump ([`Database::for_each_row`]); the database must be
/// quiescent.
pub fn count_rows(db: &Database, table: &str) -> Result<u64, WorkloadError> {
    let id = db.table_id(table)?;
    let mut count = 0u64;
    db.for_each_row(id, |_, _| count += 1)?;
    Ok(count)
}
