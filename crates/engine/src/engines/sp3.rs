//! The SP^3 family (`sp3`, `nvm-tx`, `nvm-ideal`): the DRAM engine shell
//! with the SP^3 log policy (`durability::sp3_log`, which documents the
//! protocol) and each engine's commit rule (all three stamp TIDs that name
//! their worker): SP^3's early release with dependencies
//! (`cc::protocols::sp3`), Silo's validation (`nvm-tx`), none (`nvm-ideal`,
//! `cc::protocols::none`).
//!
//! Explained in docs/engines/sp3.md.

use crate::cc::protocols::none::NoValidation;
use crate::cc::protocols::sp3::{Sp3EarlyRelease, Sp3Tids};
use crate::durability::sp3_log::{Sp3Log, NVM_IDEAL, NVM_TX, SP3};
use crate::engine::{Engine, EngineKind};
use crate::engines::dram::OccEngine;
use crate::error::DbResult;
use crate::options::DbOptions;
use pmtx_pm::{PmBackend, Pool};
use std::sync::Arc;

/// Opens an SP^3-family engine over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    Ok(match options.engine {
        EngineKind::Sp3 => {
            OccEngine::<_, Sp3EarlyRelease>::open_with_rule(options, open_log::<B, SP3>(options, pool)?)?
        }
        EngineKind::NvmTx => OccEngine::<_, Sp3Tids>::open_with_rule(options, open_log::<B, NVM_TX>(options, pool)?)?,
        EngineKind::NvmIdeal => {
            OccEngine::<_, NoValidation>::open_with_rule(options, open_log::<B, NVM_IDEAL>(options, pool)?)?
        }
        other => unreachable!("{other} is not an SP^3 engine"),
    })
}

/// The SP^3-family log of `options` in `pool` (`MODE`: see [`Sp3Log`]),
/// after the pool's identity check.
pub(crate) fn open_log<B: PmBackend, const MODE: u8>(
    options: &DbOptions,
    pool: Arc<Pool<B>>,
) -> DbResult<Sp3Log<B, MODE>> {
    debug_assert_eq!(
        MODE,
        match options.engine {
            EngineKind::Sp3 => SP3,
            EngineKind::NvmTx => NVM_TX,
            _ => NVM_IDEAL,
        }
    );
    let log = Sp3Log::open(super::group_commit_config(options), Arc::clone(&pool))?;
    super::check_identity(options, &pool)?;
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::protocols::commit_rule::CommitRule;
    use crate::engine::{CommitTicket, WriteOp};
    use crate::engines::test_support::{pause_worker_0, put, put_on_thread, Pause, T};
    use crate::error::{AbortReason, TxError};
    use crate::schema::TableSchema;
    use crate::storage::record::{self, LOCKED};

    use pmtx_pm::{Direct, Sim};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    fn options(kind: EngineKind) -> DbOptions {
        let mut options = DbOptions::in_memory(kind, vec![TableSchema::hashed("t")]);
        options.workers = 3;
        options
    }

    /// An engine on a sim pool whose worker 0 pauses between install and
    /// log while `armed`: it sends on the first channel and waits on the
    /// second.
    #[allow(clippy::type_complexity)]
    fn paused_engine<const MODE: u8, C: CommitRule>(
        kind: EngineKind,
    ) -> (Arc<OccEngine<Sp3Log<Sim, MODE>, C>>, Arc<Pool<Sim>>, Arc<AtomicBool>, mpsc::Receiver<()>, mpsc::Sender<()>)
    {
        let options = options(kind);
        let pool = Arc::new(Pool::<Sim>::create_in_memory(16 << 20, 256 << 10, &options.pm).expect("pool"));
        let mut log = open_log::<_, MODE>(&options, Arc::clone(&pool)).expect("open");
        let (hook, Pause { armed, installed: installed_rx, go: go_tx }) = pause_worker_0();
        log.set_before_log_hook(hook);
        (OccEngine::open_with_rule(&options, log).expect("engine"), pool, armed, installed_rx, go_tx)
    }

    /// The value of `key` after recovering `image` on a direct pool, and
    /// the records recovery dropped for a missing dependency.
    fn recover(kind: EngineKind, image: &[u8], keys: &[&[u8]]) -> (Vec<Option<Vec<u8>>>, u64) {
        let options = options(kind);
        let pool = Arc::new(Pool::<Direct>::open_image(image, &options.pm).expect("image"));
        let engine = crate::engines::open_on_pool(&options, pool).expect("recovery");
        let dropped = engine.stats().recovery.expect("recovered").log_records_missing_dependency;
        let mut worker = Arc::clone(&engine).worker(0).expect("worker");
        worker.begin(true, 1);
        let values = keys
            .iter()
            .map(|key| {
                let mut value = Vec::new();
                worker.get(T, key, &mut value).expect("read").then_some(value)
            })
            .collect();
        worker.commit().expect("read-only");
        drop(worker);
        engine.close().expect("close");
        (values, dropped)
    }

    #[test]
    fn a_dependent_goes_on_waits_for_its_dependency_and_is_dropped_without_it() {
        let (engine, pool, armed, installed, go) =
            paused_engine::<{ crate::durability::sp3_log::SP3 }, Sp3EarlyRelease>(EngineKind::Sp3);
        let mut writer = Arc::clone(&engine).worker(0).expect("worker");
        let mut reader = Arc::clone(&engine).worker(1).expect("worker");
        put(writer.as_mut(), b"x", b"1").expect("load");
        armed.store(true, Ordering::SeqCst);
        let paused = put_on_thread(writer, b"x", b"2");
        installed.recv().expect("writer installed");
        let record = engine.dram_tables().expect("DRAM records")[0].lookup(b"x").expect("row");
        assert_eq!(record.word() & LOCKED, 0, "sp3 unlocks before its log is written");
        // The reader reads the unlogged version without aborting, and its
        // commit persists its own record, then waits for the writer's.
        let (done_tx, done_rx) = mpsc::channel();
        let dependent = std::thread::spawn(move || {
            let mut value = Vec::new();
            reader.begin(false, 1);
            assert!(reader.get(T, b"x", &mut value).expect("no abort on an unlogged version"));
            assert_eq!(value, b"2");
            reader.write(T, b"y", WriteOp::Put(&value)).expect("write");
            let ticket = reader.commit();
            done_tx.send(()).expect("test alive");
            (reader, ticket)
        });
        assert!(
            done_rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the dependent acknowledged before its dependency was durable"
        );
        // Crash now: the dependent's record is durable, its dependency's is not.
        let crashed = pool.backend().persisted_image();
        go.send(()).expect("writer alive");
        let (writer, ticket) = paused.join().expect("writer");
        assert_eq!(ticket.expect("writer commits"), CommitTicket::Durable);
        let (reader, ticket) = dependent.join().expect("dependent");
        assert_eq!(ticket.expect("dependent commits"), CommitTicket::Durable);
        drop((writer, reader));
        let done = pool.backend().persisted_image();
        engine.close().expect("close");

        let (values, dropped) = recover(EngineKind::Sp3, &crashed, &[b"x", b"y"]);
        assert_eq!(values, vec![Some(b"1".to_vec()), None], "the dependent survived without its dependency");
        assert_eq!(dropped, 1, "recovery dropped the dependent's record");
        let (values, dropped) = recover(EngineKind::Sp3, &done, &[b"x", b"y"]);
        assert_eq!(values, vec![Some(b"2".to_vec()), Some(b"2".to_vec())]);
        assert_eq!(dropped, 0);
    }

    #[test]
    fn nvm_tx_holds_its_locks_while_logging() {
        let (engine, _pool, armed, installed, go) =
            paused_engine::<{ crate::durability::sp3_log::NVM_TX }, Sp3Tids>(EngineKind::NvmTx);
        let mut writer = Arc::clone(&engine).worker(0).expect("worker");
        let mut reader = Arc::clone(&engine).worker(1).expect("worker");
        put(writer.as_mut(), b"x", b"1").expect("load");
        armed.store(true, Ordering::SeqCst);
        let paused = std::thread::spawn(move || put(writer.as_mut(), b"x", b"2"));
        installed.recv().expect("writer installed");
        let record = engine.dram_tables().expect("DRAM records")[0].lookup(b"x").expect("row");
        assert_ne!(record.word() & LOCKED, 0, "nvm-tx logs with the write set locked");
        let mut value = Vec::new();
        reader.begin(true, 1);
        assert!(matches!(reader.get(T, b"x", &mut value), Err(TxError::Abort(AbortReason::UnstableRead))));
        reader.abort();
        go.send(()).expect("writer alive");
        assert_eq!(paused.join().expect("writer").expect("commits"), CommitTicket::Durable);
        drop(reader);
        engine.close().expect("close");
    }

    #[test]
    fn nvm_ideal_never_validates_and_sp3_does() {
        for kind in [EngineKind::NvmIdeal, EngineKind::Sp3] {
            let options = options(kind);
            let engine = crate::engines::open(&options).expect("open");
            let mut first = Arc::clone(&engine).worker(0).expect("worker");
            let mut second = Arc::clone(&engine).worker(1).expect("worker");
            put(first.as_mut(), b"x", b"1").expect("load");
            // `first` reads x, `second` overwrites it, `first` commits a
            // write based on the stale read: a lost update.
            let mut value = Vec::new();
            first.begin(false, 1);
            assert!(first.get(T, b"x", &mut value).expect("read"));
            put(second.as_mut(), b"x", b"2").expect("overwrite");
            first.write(T, b"y", WriteOp::Put(&value)).expect("write");
            let outcome = first.commit();
            if kind == EngineKind::NvmIdeal {
                assert_eq!(outcome.expect("no validation"), CommitTicket::Durable);
            } else {
                assert!(matches!(outcome, Err(TxError::Abort(_))), "sp3 validates its reads");
                first.abort();
            }
            drop((first, second));
            engine.close().expect("close");
        }
    }

    #[test]
    fn a_new_worker_of_a_slot_commits_above_the_last_one() {
        let engine = crate::engines::open(&options(EngineKind::Sp3)).expect("open");
        let mut first = Arc::clone(&engine).worker(0).expect("worker");
        for round in 0..10u8 {
            put(first.as_mut(), b"x", &[round]).expect("commit");
        }
        drop(first);
        // The next instance of slot 0 reads and overwrites nothing: only
        // the slot's own history keeps its TID above the last one.
        let mut second = Arc::clone(&engine).worker(0).expect("worker");
        put(second.as_mut(), b"y", b"1").expect("commit");
        drop(second);
        let x = engine.dram_tables().expect("DRAM records")[0].lookup(b"x").expect("x").word();
        let y = engine.dram_tables().expect("DRAM records")[0].lookup(b"y").expect("y").word();
        assert!(record::tid_of(y) > record::tid_of(x), "slot 0's TIDs went back: {x:#x} then {y:#x}");
        engine.close().expect("close");
    }
}
