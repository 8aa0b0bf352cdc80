//! The DBXN family (`dbxn`, `dbxn-nvm`, `dbx-naive`) and the Zen paper's
//! `mmdb` (`dbx-naive` with plain log writes): the DRAM engine shell with
//! DBXN's synchronous log policy (`durability::dbxn_log`, which documents
//! the protocol).
//!
//! Explained in docs/engines/dbxn.md (and docs/engines/mmdb.md).

use crate::durability::dbxn_log::{DbxnLog, DbxnLogConfig, SkippedFence};
use crate::durability::file_log::open_file_segments;
use crate::durability::log::{LogLayout, SegmentStore};
use crate::engine::{Engine, EngineKind};
use crate::engines::dram::OccEngine;
use crate::error::{DbError, DbResult};
use crate::options::DbOptions;
use crate::options::LogMedium;
use pmtx_htm::{Htm, HtmBackendKind};
use pmtx_pm::{PmBackend, Pool};
use std::sync::Arc;

/// Opens a DBXN-family engine (or `mmdb`) over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    Ok(match options.engine {
        EngineKind::DbxNaive if options.dbxn.medium == LogMedium::Disk => {
            let store = open_file_segments(&super::file_log_directory(options), &pool)?;
            OccEngine::open(options, open_log_in::<B, false, _>(options, pool, store)?)?
        }
        // mmdb's log is always in PM (the Zen paper's MMDB).
        EngineKind::DbxNaive | EngineKind::Mmdb | EngineKind::MmdbIdeal => {
            OccEngine::open(options, open_log::<B, false>(options, pool)?)?
        }
        EngineKind::Dbxn | EngineKind::DbxnNvm => OccEngine::open(options, open_log::<B, true>(options, pool)?)?,
        other => unreachable!("{other} is not a DBXN engine"),
    })
}

/// The DBXN log of `options` (engines of the DBXN, `mmdb` and PHyTM
/// families) with its segments in the pool, after the pool's identity
/// check. `PARITY`: see [`DbxnLog`].
pub(crate) fn open_log<B: PmBackend, const PARITY: bool>(
    options: &DbOptions,
    pool: Arc<Pool<B>>,
) -> DbResult<DbxnLog<B, PARITY>> {
    let log = DbxnLog::open(log_config(options)?, Arc::clone(&pool))?;
    super::check_identity(options, &pool)?;
    Ok(log)
}

/// [`open_log`] with the log's segments in `store`.
fn open_log_in<B: PmBackend, const PARITY: bool, S: SegmentStore>(
    options: &DbOptions,
    pool: Arc<Pool<B>>,
    store: S,
) -> DbResult<DbxnLog<B, PARITY, S>> {
    let log = DbxnLog::open_in(log_config(options)?, Arc::clone(&pool), store)?;
    super::check_identity(options, &pool)?;
    Ok(log)
}

/// What the DBXN log of the engine `options` name does differently.
fn log_config(options: &DbOptions) -> DbResult<DbxnLogConfig> {
    let kind = options.engine;
    debug_assert!(
        kind.is_hybrid()
            || matches!(kind, EngineKind::Dbxn | EngineKind::DbxnNvm | EngineKind::DbxNaive)
            || kind.is_mmdb()
    );
    // The hybrid engines keep their HTM with their paths (`cc::hybrid`);
    // dbx-naive's log sits inside its commit region, which would abort
    // every hardware attempt, so it runs the software path only.
    let htm = match options.htm.backend {
        _ if !matches!(kind, EngineKind::Dbxn | EngineKind::DbxnNvm) => None,
        HtmBackendKind::None => None,
        HtmBackendKind::Sim | HtmBackendKind::Rtm => Some(
            Htm::new(options.htm)
                .map_err(|error| DbError::InvalidConfig(format!("htm {}: {error}", options.htm.backend)))?,
        ),
    };
    let faults = options.faults();
    // The broken variants acknowledge without the record's fence (dbxn,
    // mmdb, dbxn-nvm, dbx-naive and phtm always, 2pl every other commit).
    let fence_before_record = kind == EngineKind::DbxnNvm && faults.fence_before_record();
    let skipped_fence = if faults.ack_before_fence()
        || fence_before_record
        || (kind == EngineKind::DbxNaive && faults.fence_left_to_next_commit())
        || (kind == EngineKind::Phtm && faults.xend_persists_log())
    {
        SkippedFence::Always
    } else if kind == EngineKind::TwoPl && faults.fence_per_two_commits() {
        SkippedFence::EveryOther
    } else {
        SkippedFence::Never
    };
    Ok(DbxnLogConfig {
        log: super::group_commit_config(options),
        // mmdb is the Zen paper's plain WAL: ordinary stores + clwb.
        layout: if kind.is_mmdb() {
            LogLayout::PLAIN
        } else {
            LogLayout {
                non_temporal: options.dbxn.non_temporal,
                pad_small_to_line: options.dbxn.pad_small_to_line,
                align_large_to_256: options.dbxn.align_large_to_256,
            }
        },
        htm,
        value_copies: kind == EngineKind::DbxnNvm,
        nvm_tuples: (kind == EngineKind::Mmdb).then(|| super::nvm_tuples::config(options)),
        fence_before_record,
        skipped_fence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CommitTicket;
    use crate::engine::{Engine, WriteOp};
    use crate::engines::test_support::{pause_worker_0, put, put_on_thread, Pause, T};
    use crate::error::AbortReason;
    use crate::error::TxError;
    use crate::schema::TableSchema;
    use crate::storage::record::UNPERSISTED;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    /// An engine whose worker 0 pauses between install and log while
    /// `armed`: it sends on the first channel and waits on the second.
    #[allow(clippy::type_complexity)]
    fn paused_engine<const PARITY: bool>(
        kind: EngineKind,
    ) -> (Arc<OccEngine<DbxnLog<pmtx_pm::Direct, PARITY>>>, Arc<AtomicBool>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let mut options = DbOptions::in_memory(kind, vec![TableSchema::hashed("t")]);
        options.workers = 3;
        let pool = Arc::new(Pool::<pmtx_pm::Direct>::create_in_memory(16 << 20, 256 << 10, &options.pm).expect("pool"));
        let mut log = open_log::<_, PARITY>(&options, pool).expect("open");
        let (hook, Pause { armed, installed: installed_rx, go: go_tx }) = pause_worker_0();
        log.set_before_log_hook(hook);
        (OccEngine::open(&options, log).expect("engine"), armed, installed_rx, go_tx)
    }

    #[test]
    fn a_reader_of_an_unpersisted_version_commits_only_once_the_log_is_durable() {
        let (engine, armed, installed, go) = paused_engine::<true>(EngineKind::Dbxn);
        let mut writer = Arc::clone(&engine).worker(0).expect("worker");
        let mut reader = Arc::clone(&engine).worker(1).expect("worker");
        let mut other = Arc::clone(&engine).worker(2).expect("worker");
        put(writer.as_mut(), b"x", b"1").expect("load");
        armed.store(true, Ordering::SeqCst);
        let paused = put_on_thread(writer, b"x", b"2");
        installed.recv().expect("writer installed");
        let record = engine.dram_tables().expect("DRAM records")[0].lookup(b"x").expect("row");
        assert_ne!(record.word() & UNPERSISTED, 0, "installed, log not durable: odd version");
        // The reader sees the installed value but cannot commit yet.
        let mut value = Vec::new();
        reader.begin(true, 1);
        assert!(reader.get(T, b"x", &mut value).expect("an odd version is no early abort"));
        assert_eq!(value, b"2");
        assert!(matches!(reader.commit(), Err(TxError::Abort(AbortReason::NotYetDurable))));
        // Nor can a writer overwrite it.
        assert!(matches!(put(other.as_mut(), b"x", b"3"), Err(TxError::Abort(AbortReason::NotYetDurable))));
        // A reader that saw the odd version commits once the log is durable:
        // no spurious abort.
        reader.begin(false, 1);
        assert!(reader.get(T, b"x", &mut value).expect("read"));
        assert_eq!(value, b"2");
        reader.write(T, b"y", WriteOp::Put(&value)).expect("write");
        go.send(()).expect("writer alive");
        let (writer, ticket) = paused.join().expect("writer");
        assert_eq!(ticket.expect("writer commits"), CommitTicket::Durable);
        assert_eq!(record.word() & UNPERSISTED, 0, "even after the log is durable");
        assert_eq!(reader.commit().expect("validates against the next even version"), CommitTicket::Durable);
        reader.begin(true, 1);
        assert!(reader.get(T, b"y", &mut value).expect("read"));
        assert_eq!(value, b"2");
        reader.commit().expect("read-only");
        drop((writer, reader, other));
        engine.close().expect("close");
    }

    #[test]
    fn dbx_naive_logs_inside_the_region() {
        let (engine, armed, installed, go) = paused_engine::<false>(EngineKind::DbxNaive);
        let mut writer = Arc::clone(&engine).worker(0).expect("worker");
        let mut reader = Arc::clone(&engine).worker(1).expect("worker");
        put(writer.as_mut(), b"x", b"1").expect("load");
        armed.store(true, Ordering::SeqCst);
        let paused = std::thread::spawn(move || put(writer.as_mut(), b"x", b"2"));
        installed.recv().expect("writer installed");
        let record = engine.dram_tables().expect("DRAM records")[0].lookup(b"x").expect("row");
        assert_eq!(record.word() & UNPERSISTED, 0, "dbx-naive never sets the parity bit");
        assert_ne!(
            record.word() & crate::storage::record::LOCKED,
            0,
            "the log is written while the region holds the locks"
        );
        let mut value = Vec::new();
        reader.begin(true, 1);
        assert!(matches!(reader.get(T, b"x", &mut value), Err(TxError::Abort(AbortReason::UnstableRead))));
        reader.abort();
        go.send(()).expect("writer alive");
        assert_eq!(paused.join().expect("writer").expect("commits"), CommitTicket::Durable);
        reader.begin(true, 1);
        assert!(reader.get(T, b"x", &mut value).expect("read"));
        assert_eq!(value, b"2");
        reader.commit().expect("read-only");
        drop(reader);
        engine.close().expect("close");
    }

    /// mmdb is the Zen paper's WAL in PM: each writing commit writes its
    /// record with ordinary stores, `clwb`s it and issues exactly one fence
    /// before it returns durable, whatever `DbOptions::dbxn` asks for; a
    /// read-only commit issues none. `dbx-naive` with the same options
    /// writes non-temporally, so the counters tell the two layouts apart.
    #[test]
    fn mmdb_logs_each_commit_with_clwb_and_one_fence() {
        const COMMITS: u64 = 20;
        for kind in [EngineKind::Mmdb, EngineKind::DbxNaive] {
            let mut options = DbOptions::in_memory(kind, vec![TableSchema::hashed("t")]);
            options.workers = 1;
            options.dbxn = crate::options::DbxnOptions::default();
            assert!(options.dbxn.non_temporal, "the options ask for non-temporal log stores");
            let engine = crate::engines::open(&options).expect("open");
            let mut worker = Arc::clone(&engine).worker(0).expect("worker");
            // The first commit allocates the worker's log segment.
            put(worker.as_mut(), b"warm-up", b"0").expect("commit");
            let before = pmtx_pm::thread_counters();
            for round in 0..COMMITS {
                let ticket = put(worker.as_mut(), &round.to_be_bytes(), b"value").expect("commit");
                assert_eq!(ticket, CommitTicket::Durable, "{kind}: synchronous log");
            }
            let writing = pmtx_pm::thread_counters().since(&before);
            assert_eq!(writing.fences, COMMITS, "{kind}: one fence per writing commit");
            if kind == EngineKind::Mmdb {
                assert_eq!(writing.non_temporal_bytes, 0, "mmdb writes its log with ordinary stores");
                assert!(writing.lines_flushed >= COMMITS, "mmdb clwbs every record: {writing:?}");
            } else {
                assert!(writing.non_temporal_bytes > 0, "dbx-naive follows the options: {writing:?}");
            }
            let before = pmtx_pm::thread_counters();
            let mut value = Vec::new();
            worker.begin(true, 1);
            assert!(worker.get(T, &0u64.to_be_bytes(), &mut value).expect("read"));
            assert_eq!(worker.commit().expect("read-only"), CommitTicket::Durable);
            assert_eq!(
                pmtx_pm::thread_counters().since(&before).fences,
                0,
                "{kind}: read-only commits persist nothing"
            );
            drop(worker);
            engine.close().expect("close");
        }
    }
}
