//! The PHyTM family (`phytm`, `phytm-paper`, `phtm`, `2pl`): the DRAM
//! engine shell running the hybrid paths of `cc::protocols::phytm` (the
//! scheme chosen from the engine kind by `engines::hybrid`), over the
//! synchronous redo log DBXN uses (`durability::dbxn_log`, parity mode):
//! a commit installs its versions odd, makes its record durable (the
//! paper's logged bit is the record's completion), then turns them even,
//! all while its row locks in the lock table are held.
//!
//! Explained in docs/engines/phytm.md.

use crate::durability::dbxn_log::DbxnLog;
use crate::engine::Engine;
use crate::engines::dram::OccEngine;
use crate::error::DbResult;
use crate::options::DbOptions;
use pmtx_pm::{PmBackend, Pool};
use std::sync::Arc;

/// Opens a PHyTM-family engine over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    debug_assert!(options.engine.is_hybrid());
    let log: DbxnLog<B, true> = crate::engines::dbxn::open_log(options, pool)?;
    Ok(OccEngine::open(options, log)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{CommitTicket, Engine as _, EngineKind, WriteOp};
    use crate::engines::test_support::{pause_worker_0, put, put_on_thread, Pause, T};
    use crate::error::{AbortReason, TxError};
    use crate::schema::TableSchema;
    use crate::storage::record::UNPERSISTED;

    use pmtx_htm::HtmConfig;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    type Engine = Arc<OccEngine<DbxnLog<pmtx_pm::Direct, true>>>;

    /// An engine of `kind` whose worker 0 pauses between install and log
    /// while `armed`: it sends on the first channel and waits on the second.
    fn paused_engine(
        kind: EngineKind,
        htm: HtmConfig,
    ) -> (Engine, Arc<AtomicBool>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let mut options = DbOptions::in_memory(kind, vec![TableSchema::hashed("t")]);
        options.workers = 3;
        options.htm = htm;
        let pool = Arc::new(Pool::<pmtx_pm::Direct>::create_in_memory(16 << 20, 256 << 10, &options.pm).expect("pool"));
        let mut log = crate::engines::dbxn::open_log::<_, true>(&options, pool).expect("open");
        let (hook, Pause { armed, installed: installed_rx, go: go_tx }) = pause_worker_0();
        log.set_before_log_hook(hook);
        (OccEngine::open(&options, log).expect("engine"), armed, installed_rx, go_tx)
    }

    fn path_commits(engine: &Engine, path: &str) -> u64 {
        engine.stats().path_commits.iter().find(|(name, _)| *name == path).map_or(0, |(_, commits)| *commits)
    }

    #[test]
    fn each_engine_commits_on_its_paths() {
        let sim = HtmConfig::sim(7, 0);
        let cases = [
            (EngineKind::Phytm, sim, "fast_htm"),
            (EngineKind::Phytm, HtmConfig::software(), "stm"),
            (EngineKind::Phtm, sim, "fast_htm"),
            (EngineKind::Phtm, HtmConfig::software(), "global_lock"),
            (EngineKind::TwoPl, sim, "stm"),
        ];
        for (kind, htm, expected) in cases {
            let (engine, _, _, _) = paused_engine(kind, htm);
            let mut worker = Arc::clone(&engine).worker(1).expect("worker");
            for key in 0u32..20 {
                put(worker.as_mut(), &key.to_be_bytes(), b"v").expect("commits");
            }
            assert_eq!(path_commits(&engine, expected), 20, "{kind} htm={}", htm.backend);
            drop(worker);
            engine.close().expect("close");
        }
    }

    #[test]
    fn a_transaction_too_large_for_the_hardware_moves_to_software() {
        for (kind, software) in [(EngineKind::Phytm, "stm"), (EngineKind::Phtm, "global_lock")] {
            let (engine, _, _, _) = paused_engine(kind, HtmConfig::sim(7, 0));
            let mut worker = Arc::clone(&engine).worker(1).expect("worker");
            let capacity = HtmConfig::sim(7, 0).sim.capacity_footprint_lines;
            let rows = capacity / crate::cc::protocols::phytm::LINES_PER_ACCESS + 10;
            let mut attempt = 1;
            let committed = loop {
                worker.begin(false, attempt);
                let mut body = || -> Result<CommitTicket, TxError> {
                    for key in 0..rows {
                        worker.write(T, &key.to_be_bytes(), WriteOp::Put(b"long"))?;
                    }
                    worker.commit()
                };
                match body() {
                    Ok(ticket) => break ticket,
                    Err(TxError::Abort(reason)) => {
                        assert_eq!(reason, AbortReason::HtmCapacity, "{kind}: only capacity aborts here");
                        worker.abort();
                        attempt += 1;
                    }
                    Err(error) => panic!("{kind}: {error}"),
                }
            };
            assert_eq!(committed, CommitTicket::Durable);
            assert_eq!(attempt, 2, "{kind}: one capacity abort, then the software path");
            assert_eq!(path_commits(&engine, software), 1, "{kind}");
            drop(worker);
            engine.close().expect("close");
        }
    }

    /// The corrected protocol against the paper's emulation: a Fast HTM
    /// reader sees the installed version of a writer whose log is not yet
    /// durable. Under `phytm` the version is odd and the reader cannot
    /// commit; under `phytm-paper` it commits on it (what a crash can
    /// then take back, which is why that variant is excluded from
    /// durability claims).
    #[test]
    fn a_fast_htm_reader_never_commits_on_a_write_whose_log_is_not_durable() {
        for kind in [EngineKind::Phytm, EngineKind::PhytmPaper] {
            let (engine, armed, installed, go) = paused_engine(kind, HtmConfig::sim(7, 0));
            let mut writer = Arc::clone(&engine).worker(0).expect("worker");
            let mut reader = Arc::clone(&engine).worker(1).expect("worker");
            put(writer.as_mut(), b"x", b"1").expect("load");
            armed.store(true, Ordering::SeqCst);
            let paused = std::thread::spawn(move || {
                let ticket = put(writer.as_mut(), b"x", b"2");
                (writer, ticket)
            });
            installed.recv().expect("writer installed");
            let record = engine.dram_tables().expect("DRAM records")[0].lookup(b"x").expect("row");
            let mut value = Vec::new();
            reader.begin(true, 1);
            assert!(reader.get(T, b"x", &mut value).expect("fast htm reads without locks"));
            assert_eq!(value, b"2", "{kind}: the install is visible");
            let committed = reader.commit();
            if kind == EngineKind::Phytm {
                assert_ne!(record.word() & UNPERSISTED, 0, "installed, log not durable: odd version");
                assert!(matches!(committed, Err(TxError::Abort(AbortReason::NotYetDurable))), "{committed:?}");
                reader.abort();
            } else {
                assert_eq!(record.word() & UNPERSISTED, 0, "phytm-paper installs even versions");
                assert_eq!(committed.expect("the paper's emulation commits on it"), CommitTicket::Durable);
            }
            // Retries move the reader to Slow HTM, whose reads check the
            // row's lock, then to the STM path, whose reads take it: the
            // writer holds it until its log is durable, so neither reads.
            let fast = crate::cc::protocols::phytm::FAST_HTM_ATTEMPTS;
            let slow = crate::cc::protocols::phytm::SLOW_HTM_ATTEMPTS;
            for attempt in 2..=fast + slow + 1 {
                reader.begin(true, attempt);
                let read = reader.get(T, b"x", &mut value);
                if attempt > fast + slow {
                    assert!(matches!(read, Err(TxError::Abort(AbortReason::LockConflict))), "stm: {read:?}");
                } else if attempt > fast {
                    assert!(matches!(read, Err(TxError::Abort(AbortReason::Region))), "slow htm: {read:?}");
                }
                reader.abort();
            }
            go.send(()).expect("writer alive");
            let (writer, ticket) = paused.join().expect("writer");
            assert_eq!(ticket.expect("writer commits"), CommitTicket::Durable);
            reader.begin(true, 1);
            assert!(reader.get(T, b"x", &mut value).expect("read"));
            assert_eq!(value, b"2");
            reader.commit().expect("durable now");
            drop((writer, reader));
            engine.close().expect("close");
        }
    }

    #[test]
    fn phtm_runs_its_software_path_alone() {
        let (engine, armed, installed, go) = paused_engine(EngineKind::Phtm, HtmConfig::software());
        let mut writer = Arc::clone(&engine).worker(0).expect("worker");
        put(writer.as_mut(), b"x", b"1").expect("load");
        armed.store(true, Ordering::SeqCst);
        let paused = put_on_thread(writer, b"x", b"2");
        installed.recv().expect("writer installed");
        // The writer holds the global lock: no other transaction gets in
        // (each attempt gives up after a bounded wait and retries).
        let committed = Arc::new(AtomicBool::new(false));
        let other_committed = Arc::clone(&committed);
        let engine_for_other = Arc::clone(&engine);
        let other = std::thread::spawn(move || {
            let mut other = engine_for_other.worker(1).expect("worker");
            let mut timeouts = 0;
            for attempt in 1.. {
                other.begin(false, attempt);
                let done = other.write(T, b"y", WriteOp::Put(b"3")).and_then(|_| other.commit());
                match done {
                    Ok(_) => break,
                    Err(TxError::Abort(AbortReason::LockTimeout)) => {
                        timeouts += 1;
                        other.abort();
                    }
                    Err(error) => panic!("{error}"),
                }
            }
            other_committed.store(true, Ordering::SeqCst);
            (other, timeouts)
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!committed.load(Ordering::SeqCst), "a second transaction committed beside the global lock");
        go.send(()).expect("writer alive");
        let (writer, ticket) = paused.join().expect("writer");
        ticket.expect("writer commits");
        let (other, timeouts) = other.join().expect("other");
        assert!(timeouts >= 1, "the second transaction waited out the global lock");
        assert_eq!(path_commits(&engine, "global_lock"), 3);
        drop((writer, other));
        engine.close().expect("close");
    }
}
