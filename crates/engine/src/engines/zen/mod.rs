//! Zen (zen-plus.txt §3): a log-free engine with the tuples in a PM heap
//! and a metadata-enhanced tuple cache (Met-Cache) in DRAM.
//!
//! * storage (`storage::zen`): the NVM-tuple heap (`heap`: slot layout,
//!   per-thread regions of chunks, DRAM-only allocation,
//!   garbage queues, the LP pin, tombstone sweeps; `zen-naive-alloc`'s
//!   persisted bitmap), the Met-Cache rows and per-worker CLOCK regions
//!   (`cache`), recovery (`recovery`, Algorithm 2) and per-table heap
//!   geometry (`meta`); the rows live in the shared `storage::table::Table`
//!   (indexes, scans, reclamation);
//! * concurrency control: the shared transaction state of `cc::transaction`
//!   over the rows' CC-Meta words (`TxState<Row>`), any protocol;
//! * durability: the log-free persist of Algorithm 1 (`wbl`: one fence,
//!   no LP bit) in `durability::zen_persist`;
//! * `worker/` — the transaction path: reads (`reads.rs`), the commit
//!   pipeline's steps (`commit.rs`: persist, install, maintain), zen+'s
//!   direct NVM writes (`exclusive.rs`).
//!
//! `zen+` (§4) is the same engine with two additions: the adaptive
//! execution of long-running transactions (`adaptive.rs`: read-only
//! snapshots, the α/β/γ thresholds, the exclusive stage; the worker's
//! direct NVM writes) over Hekaton's MVCC, and the NUMA-aware soft
//! partitions (`numa.rs`).
//!
//! There is no log and no checkpoint: a clean close only marks the pool;
//! every open rebuilds the DRAM state by scanning the heap.
//!
//! `wbl` (write-behind logging) is the same engine with another commit
//! rule (`heap::CommitRule::Window`): a commit persists its versions with
//! one fence and no LP bit, and is acknowledged once the group-commit record
//! of its window is durable (`durability::wbl_window`, which documents the
//! protocol); recovery discards the versions of the windows that never
//! became durable. The record log drives the epochs (each window is one),
//! in place of Zen's ticker.
//!
//! Zen's rows live in its own tables of Met-Cache rows over the heap: the
//! engine has no DRAM-record tables (`Engine::dram_tables` is `None`), and
//! its data is read through transactions or `Engine::for_each_row`.
//!
//! Explained in docs/engines/zen.md (and docs/engines/zen-plus.md,
//! docs/engines/wbl.md).

pub(crate) mod adaptive;
pub(crate) mod numa;
pub(crate) mod wbl_meta;
mod worker;

use crate::cc::concurrency::Concurrency;
use crate::durability::wbl_window::WriteBehindLog;
use crate::engine::{CommitTicket, Engine, EngineKind, EngineStats, EngineWorker, RecoveryReport};
use crate::epoch::Epochs;
use crate::error::{DbError, DbResult};
use crate::options::{DbOptions, ZenOptions};
use crate::schema::TableId;
use crate::storage::table::RowReclaimer;
use crate::storage::zen::cache::{self, ClockRing};
use crate::storage::zen::meta::ZenTableMeta;
use crate::storage::zen::{heap, recovery};
use crossbeam_utils::CachePadded;
use heap::Heap;
use parking_lot::Mutex;
use pmtx_pm::{PmBackend, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Per-worker counters (each worker writes only its own line).
#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) cache_evictions: AtomicU64,
    pub(crate) aborts: AtomicU64,
    pub(crate) commits: AtomicU64,
    /// `zen+` on several NUMA nodes: heap reads (cache misses) from the
    /// worker's node and from another.
    pub(crate) numa_local_reads: AtomicU64,
    pub(crate) numa_remote_reads: AtomicU64,
}

impl WorkerCounters {
    /// Adds `amount` to one of these counters. Only the owning worker
    /// writes them, so a load and a store suffice; a locked add would drain
    /// the store buffer on every cached read.
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, amount: u64) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(amount), Ordering::Relaxed);
    }
}

/// State shared by the engine and its workers.
pub(crate) struct ZenShared<B: PmBackend> {
    /// The concurrency-control protocol's shared state.
    pub(crate) cc: Arc<Concurrency>,
    pub(crate) pool: Arc<Pool<B>>,
    pub(crate) tables: Vec<crate::storage::table::Table<cache::Row>>,
    pub(crate) metas: Vec<ZenTableMeta>,
    /// The tables' schemas, by id (`Engine::schemas`).
    pub(crate) schemas: Vec<crate::schema::TableSchema>,
    pub(crate) heap: Heap,
    pub(crate) epochs: Arc<Epochs>,
    /// Met-Cache regions, one per worker, each on its own cache lines (a
    /// worker locks its own at every install and fill).
    pub(crate) caches: Vec<CachePadded<Mutex<ClockRing>>>,
    /// Position of each table in the LP order.
    pub(crate) lp_rank: Vec<u32>,
    pub(crate) options: ZenOptions,
    pub(crate) counters: Vec<CachePadded<WorkerCounters>>,
    pub(crate) closed: AtomicBool,
    /// Reclamation queues of workers that went away.
    pub(crate) orphans: Mutex<RowReclaimer<cache::Row>>,
    /// Rows unlinked by every worker's reclamation since open.
    pub(crate) rows_unlinked: AtomicU64,
    /// Deliberately broken steps (crash-harness self-tests).
    pub(crate) faults: crate::fault::Faults,
    /// `wbl`: the group-commit record log, which also advances the epochs.
    pub(crate) window: Option<WriteBehindLog<B>>,
    /// `wbl`: its per-tuple metadata in PM (`wbl_meta`).
    pub(crate) wbl_meta: Option<wbl_meta::WblMeta<B>>,
    /// `zen+` only: its adaptive execution and soft partitions.
    pub(crate) plus: Option<ZenPlus>,
}

/// What `zen+` adds to the shared state.
pub(crate) struct ZenPlus {
    pub(crate) adaptive: adaptive::Adaptive,
    /// The soft partitions (`None` with one NUMA node).
    pub(crate) soft: Option<numa::SoftPartitions>,
    remap_interval: Duration,
    /// Where read-only transactions read.
    pub(crate) read_only_snapshot: crate::options::ReadOnlySnapshot,
}

impl<B: PmBackend> ZenShared<B> {
    /// Advances the global epoch the engine's way (`wbl`: only behind a
    /// record that covers the new epoch); `None` once that is impossible
    /// (a closed `wbl`).
    pub(crate) fn advance_epoch(&self) -> Option<u64> {
        match &self.window {
            Some(window) => window.advance_epoch(),
            None => Some(self.epochs.advance()),
        }
    }

    /// `zen+`'s periodic work on the ticker thread, every `step`: measure
    /// the free NVM space for β, and remap the partitions every
    /// `remap_interval` (Algorithm 4).
    fn plus_tick(&self, since_remap: &mut Duration, step: Duration) {
        let Some(plus) = &self.plus else { return };
        let geometry = self.pool.geometry();
        let (free_slot_bytes, garbage) = self.heap.free_slot_bytes_and_garbage();
        let free = self.pool.free_chunks() * geometry.chunk_size + free_slot_bytes;
        plus.adaptive.refresh_space(free, geometry.chunk_count * geometry.chunk_size, garbage);
        if let Some(soft) = &plus.soft {
            *since_remap += step;
            if *since_remap >= plus.remap_interval {
                *since_remap = Duration::ZERO;
                soft.remap();
            }
        }
    }
}

impl<B: PmBackend> Drop for ZenShared<B> {
    fn drop(&mut self) {
        // No worker exists any more: nothing can hold a retired row.
        self.orphans.get_mut().free_all_quiescent();
    }
}

/// The engine.
pub(crate) struct ZenEngine<B: PmBackend> {
    kind: EngineKind,
    shared: Arc<ZenShared<B>>,
    report: RecoveryReport,
    stop: Arc<AtomicBool>,
    ticker: Mutex<Option<JoinHandle<()>>>,
    /// Failures of the background thread, owed to the caller.
    health: Arc<crate::background::BackgroundHealth>,
}

/// Position of each table in the LP order (§3.3.4).
fn lp_ranks(options: &DbOptions) -> DbResult<Vec<u32>> {
    let names: Vec<&str> = options.tables.iter().map(|t| t.name.as_str()).collect();
    let mut order: Vec<usize> = Vec::new();
    for name in &options.zen.lp_table_order {
        let position = names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| DbError::InvalidConfig(format!("zen LP order names unknown table {name}")))?;
        if !order.contains(&position) {
            order.push(position);
        }
    }
    let mut rest: Vec<usize> = (0..names.len()).filter(|p| !order.contains(p)).collect();
    rest.sort_by_key(|&p| names[p]);
    order.extend(rest);
    let mut rank = vec![0u32; names.len()];
    for (position, &table) in order.iter().enumerate() {
        rank[table] = position as u32;
    }
    Ok(rank)
}

/// Opens (recovering) a Zen engine over `pool`.
pub(crate) fn open<B: PmBackend>(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<dyn Engine>> {
    Ok(ZenEngine::open(options, pool)?)
}

impl<B: PmBackend> ZenEngine<B> {
    fn open(options: &DbOptions, pool: Arc<Pool<B>>) -> DbResult<Arc<Self>> {
        let kind = options.engine;
        debug_assert!(kind.uses_tuple_heap());
        if options.workers > u16::MAX as usize {
            return Err(DbError::InvalidConfig("zen supports at most 65535 workers".into()));
        }
        super::check_identity(options, &pool)?;
        let chunk_size = pool.geometry().chunk_size;
        let epochs = Arc::new(Epochs::new(options.workers, 1));
        let tables = options
            .tables
            .iter()
            .enumerate()
            .map(|(position, schema)| {
                crate::storage::table::Table::new(TableId(position as u32), schema.clone(), Some(Arc::clone(&epochs)))
            })
            .collect::<DbResult<Vec<_>>>()?;
        let metas =
            options.tables.iter().map(|schema| ZenTableMeta::new(schema, chunk_size)).collect::<DbResult<Vec<_>>>()?;
        let lp_rank = lp_ranks(options)?;
        let regions = options.workers.max(recovery::max_heap_thread(&pool).map_or(0, |t| t as usize + 1));
        let topology = if kind == EngineKind::ZenPlus {
            let machine = pmtx_pm::numa::machine_numa_nodes().len() as u32;
            numa::Topology::choose(options.zen_plus.numa_nodes, machine, pool.backend().numa_nodes(), options.workers)
                .map_err(|reason| DbError::InvalidConfig(format!("zen+: {reason}")))?
        } else {
            None
        };
        let placement = (0..regions).map(|region| match &topology {
            Some(topology) if region < options.workers => {
                let node = topology.node_of_worker(region);
                match topology.source {
                    numa::NodeSource::Machine => heap::ChunkPlacement::Bound(node),
                    numa::NodeSource::Backend => heap::ChunkPlacement::OnNode(node),
                    numa::NodeSource::Logical => heap::ChunkPlacement::Anywhere,
                }
            }
            _ => heap::ChunkPlacement::Anywhere,
        });
        let rule = if kind == EngineKind::Wbl { heap::CommitRule::Window } else { heap::CommitRule::LastPersisted };
        let heap = Heap::new(
            &pool,
            metas.iter().map(|t| t.geometry).collect(),
            regions,
            kind == EngineKind::ZenNaiveAlloc,
            rule,
        )
        .with_placement(placement);
        let faults = options.faults();
        // wbl's metadata region: freed (whatever a previous life left)
        // before recovery, which never reads it.
        let wbl_meta = (kind == EngineKind::Wbl).then(|| wbl_meta::WblMeta::open(Arc::clone(&pool), options.cc));
        let (window, horizon) = match rule {
            heap::CommitRule::LastPersisted => (None, recovery::CommitHorizon::LastPersisted),
            heap::CommitRule::Window => {
                let (window, record) = WriteBehindLog::open(&pool, &epochs, options.workers)?;
                // A fresh pool has no record: nothing committed, no version.
                let (persisted, dirty) = record.map_or((0, 0), |record| (record.persisted, record.dirty));
                // The broken variant keeps the dirty window as committed.
                let persisted = if faults.keep_dirty_window() { dirty } else { persisted };
                (Some(window), recovery::CommitHorizon::Window { persisted, dirty })
            }
        };
        // IMPORTANT: recovery rebuilds the indexes from several threads that
        // announce no epoch; the pin keeps every index array they retire
        // (hash-table growth) alive until all of them are done.
        let mut recovered = {
            let _rebuilding = epochs.pin_background();
            recovery::recover(&pool, &tables, &metas, &heap, &lp_rank, horizon)?
        };
        let first_epoch = crate::storage::record::epoch_of_tid(recovered.max_cts) + 1;
        match (&window, horizon) {
            (Some(window), recovery::CommitHorizon::Window { persisted, dirty }) => {
                recovered.report.wbl_window = Some((persisted, dirty));
                // New TIDs start above the old window's c_d, as in WBL.
                let first_epoch = first_epoch.max(crate::storage::record::epoch_of_tid(dirty) + 1);
                window.start(first_epoch)?;
            }
            _ => epochs.raise(first_epoch),
        }
        let region_budget = options.zen.cache_bytes / options.workers as u64;
        let plus = (kind == EngineKind::ZenPlus).then(|| ZenPlus {
            adaptive: adaptive::Adaptive::new(&options.zen_plus, options.workers, region_budget),
            soft: topology
                .map(|topology| numa::SoftPartitions::new(topology, options.workers, &options.zen_plus, options.seed)),
            remap_interval: options.zen_plus.remap_interval,
            read_only_snapshot: options.zen_plus.read_only_snapshot,
        });
        let shared = Arc::new(ZenShared {
            cc: Arc::new(Concurrency::after_recovery(options.cc, options.workers, &tables)),
            pool,
            tables,
            metas,
            schemas: options.tables.clone(),
            heap,
            epochs,
            caches: (0..options.workers).map(|_| CachePadded::new(Mutex::new(ClockRing::new(region_budget)))).collect(),
            lp_rank,
            options: options.zen.clone(),
            counters: (0..options.workers).map(|_| CachePadded::new(WorkerCounters::default())).collect(),
            closed: AtomicBool::new(false),
            orphans: Mutex::new(RowReclaimer::default()),
            rows_unlinked: AtomicU64::new(0),
            faults,
            window,
            wbl_meta,
            plus,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let health = Arc::new(crate::background::BackgroundHealth::default());
        let ticker = if shared.window.is_some() {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            let interval = options.wbl.window;
            let on_panic = {
                let shared = Arc::clone(&shared);
                // No window closes any more: waits for durability give up.
                move || shared.window.as_ref().expect("wbl has a write-behind log").close()
            };
            crate::background::spawn(
                "pmtx-wbl-window",
                &health,
                move || window_loop(&shared, &stop, interval, faults),
                on_panic,
            )?
        } else {
            let (epochs, stop) = (Arc::clone(&shared.epochs), Arc::clone(&stop));
            let interval = options.epoch_interval;
            // The ticker completes pipelined commits left unfenced for a
            // whole step (the time bound of `worker`'s module comment);
            // zen+: it also measures space and remaps partitions. It holds
            // the shared state until the engine stops it.
            let ticking = Arc::clone(&shared);
            let mut since_remap = Duration::ZERO;
            let mut unfenced_seen = Vec::new();
            crate::background::spawn(
                "pmtx-zen-epoch",
                &health,
                move || {
                    ticker_loop(&epochs, &stop, interval, faults, |step| {
                        ticking.heap.complete_stale_unfenced(&ticking.pool, &ticking.epochs, &mut unfenced_seen);
                        ticking.plus_tick(&mut since_remap, step);
                    })
                },
                || {},
            )?
        };
        Ok(Arc::new(Self { kind, shared, report: recovered.report, stop, ticker: Mutex::new(Some(ticker)), health }))
    }

    fn stop_ticker(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.ticker.lock().take() {
            // A panic is caught and recorded (`background::spawn`).
            if let Err(payload) = handle.join() {
                self.health.thread_panicked("pmtx-zen-epoch", payload.as_ref());
            }
        }
    }
}

/// Advances the epoch (TID epochs and the reclamation horizon); sleeps in
/// short steps so close does not wait a whole interval, calling `tick`
/// with the step after each.
fn ticker_loop(
    epochs: &Epochs,
    stop: &AtomicBool,
    interval: Duration,
    faults: crate::fault::Faults,
    mut tick: impl FnMut(Duration),
) {
    let step = interval.min(Duration::from_millis(5));
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(step);
        tick(step);
        waited += step;
        if waited >= interval {
            waited = Duration::ZERO;
            if faults.epoch_panics() {
                panic!("injected panic of the epoch thread");
            }
            epochs.advance();
        }
    }
}

/// `wbl`: one group commit per window (`WriteBehindLog::group_commit`,
/// which also opens the next window); sleeps in short steps so close does
/// not wait a whole interval.
fn window_loop<B: PmBackend>(
    shared: &ZenShared<B>,
    stop: &AtomicBool,
    interval: Duration,
    faults: crate::fault::Faults,
) {
    let window = shared.window.as_ref().expect("wbl has a write-behind log");
    let step = interval.min(Duration::from_millis(5));
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(step);
        waited += step;
        if waited >= interval {
            waited = Duration::ZERO;
            if faults.epoch_panics() {
                panic!("injected panic of the window thread");
            }
            window.group_commit(false);
        }
    }
}

impl<B: PmBackend> Engine for ZenEngine<B> {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn schemas(&self) -> &[crate::schema::TableSchema] {
        &self.shared.schemas
    }

    fn worker(self: Arc<Self>, id: usize) -> DbResult<Box<dyn EngineWorker>> {
        Ok(Box::new(worker::ZenWorker::new(Arc::clone(&self.shared), id)))
    }

    fn is_durable(&self, ticket: CommitTicket) -> bool {
        match ticket {
            CommitTicket::Durable => true,
            // Only wbl hands out epoch tickets.
            CommitTicket::Epoch(epoch) => self.shared.epochs.durable() >= epoch,
            // A pipelined commit: durable once its region no longer
            // publishes it as unfenced (`heap::unfenced`).
            CommitTicket::Flushed { worker, cts } => self.shared.heap.unfenced_cts(worker as usize) != cts,
        }
    }

    fn stats(&self) -> EngineStats {
        let mut stats = EngineStats { recovery: Some(self.report.clone()), ..Default::default() };
        self.health.report(&mut stats);
        for counters in &self.shared.counters {
            stats.cache_hits += counters.cache_hits.load(Ordering::Relaxed);
            stats.cache_misses += counters.cache_misses.load(Ordering::Relaxed);
            stats.cache_evictions += counters.cache_evictions.load(Ordering::Relaxed);
            stats.aborts += counters.aborts.load(Ordering::Relaxed);
        }
        stats.cache_bytes = self.shared.caches.iter().map(|c| c.lock().bytes()).sum();
        let (free, chunks, garbage) = self.shared.heap.space();
        stats.heap_free_slots = free;
        stats.heap_chunks = chunks;
        stats.heap_garbage = garbage;
        stats.heap_sweeps = self.shared.heap.counters.sweeps.load(Ordering::Relaxed);
        if self.shared.window.is_none() {
            let (mut completed, mut fenced_again) = (0, 0);
            for region in &self.shared.heap.regions {
                let state = region.state.lock();
                completed += state.unfenced_completed;
                fenced_again += state.unfenced_fenced_again;
            }
            stats.engine_counters.extend([("unfenced_completed", completed), ("unfenced_fenced_again", fenced_again)]);
        }
        stats.rows_indexed = self.shared.tables.iter().map(|table| table.indexed_rows() as u64).sum();
        stats.rows_unlinked = self.shared.rows_unlinked.load(Ordering::Relaxed);
        if let Some(window) = &self.shared.window {
            stats.durable_epoch = self.shared.epochs.durable();
            stats.window_records = window.records_written();
        }
        if let Some(plus) = &self.shared.plus {
            stats.engine_counters.extend(plus.adaptive.stats());
            let reads = |field: fn(&WorkerCounters) -> &AtomicU64| -> u64 {
                self.shared.counters.iter().map(|counters| field(counters).load(Ordering::Relaxed)).sum()
            };
            let soft = plus.soft.as_ref();
            let load = |counter: Option<&AtomicU64>| counter.map_or(0, |counter| counter.load(Ordering::Relaxed));
            stats.engine_counters.extend([
                ("numa_local_reads", reads(|c| &c.numa_local_reads)),
                ("numa_remote_reads", reads(|c| &c.numa_remote_reads)),
                ("numa_chunks_misplaced", self.shared.heap.counters.chunks_misplaced.load(Ordering::Relaxed)),
                ("numa_remaps", load(soft.map(|soft| &soft.remaps))),
                ("numa_partitions_moved", load(soft.map(|soft| &soft.partitions_moved))),
                ("numa_assigned", load(soft.map(|soft| &soft.assigned))),
                ("numa_assigned_by_load", load(soft.map(|soft| &soft.assigned_by_load))),
            ]);
        }
        stats
    }

    fn assign_transaction(&self, keys: &[(TableId, &[u8])]) -> Option<usize> {
        let soft = self.shared.plus.as_ref()?.soft.as_ref()?;
        let tables = &self.shared.tables;
        Some(soft.assign(keys.iter().filter_map(|&(table, key)| {
            tables.get(table.0 as usize).map(|table| (key, table.schema().partition_prefix))
        })))
    }

    fn checkpoint(&self) -> DbResult<()> {
        Ok(()) // log-free: nothing to checkpoint
    }

    fn background_error(&self) -> DbResult<()> {
        self.health.take_error()
    }

    fn close(&self) -> DbResult<()> {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_ticker();
        if self.health.has_panicked() {
            // Not trusted: no clean-shutdown mark, the next open recovers.
            if let Some(window) = &self.shared.window {
                window.close();
            }
            return self.health.take_error();
        }
        // zen: every commit is durable already but a pipelined one whose
        // worker still exists (its drop would have fenced it): fenced here.
        // wbl: the last windows' records make every commit durable (no
        // transaction runs).
        let (heap, pool) = (&self.shared.heap, &*self.shared.pool);
        for region in 0..heap.regions.len() {
            heap.regions[region].state.lock().fence_unfenced(heap, pool, &self.shared.epochs, region);
        }
        if let Some(window) = &self.shared.window {
            window.finish();
        }
        if let Some(meta) = &self.shared.wbl_meta {
            // Read by no one: nothing in it is needed after the close.
            meta.close();
        }
        self.shared.pool.mark_clean_shutdown();
        Ok(())
    }

    /// Every row's latest version against the allocator's free, deferred
    /// and garbage lists (`Heap::audit`).
    fn check_structure(&self) -> DbResult<Option<String>> {
        let mut live = Vec::new();
        for (position, table) in self.shared.tables.iter().enumerate() {
            table.for_each_row(|_, row: &cache::Row| {
                let slot = row.slot();
                if slot != 0 {
                    live.push((position as u32, slot));
                }
            });
        }
        let audit = self
            .shared
            .heap
            .audit(&self.shared.pool, &live)
            .map_err(|problem| DbError::Corrupt(format!("zen heap: {problem}")))?;
        Ok(Some(format!(
            "zen heap: {} live, {} free, {} deferred, {} garbage slots; none both live and free",
            audit.live, audit.free, audit.deferred, audit.garbage
        )))
    }

    fn for_each_row(&self, table: TableId, visit: &mut dyn FnMut(&[u8], &[u8])) -> DbResult<()> {
        let zen_table =
            self.shared.tables.get(table.0 as usize).ok_or_else(|| DbError::UnknownTable(format!("#{}", table.0)))?;
        let backend = self.shared.pool.backend();
        let mut value = Vec::new();
        zen_table.for_each_row(|key, row: &cache::Row| {
            if row.word() & cache::ABSENT != 0 || row.slot() == 0 {
                return;
            }
            // Quiescent: the row's latest tuple holds its value.
            value.resize(row.len(), 0);
            backend.read(row.slot() + heap::META_LEN + key.len() as u64, &mut value);
            visit(key, &value);
        });
        Ok(())
    }

    fn close_on_drop(&self) -> DbResult<()> {
        self.shared.closed.store(true, Ordering::SeqCst);
        // wbl: no record any more; a group commit waiting for workers gives
        // up, and so do waits for durability.
        if let Some(window) = &self.shared.window {
            window.close();
        }
        self.stop_ticker();
        Ok(())
    }
}

impl<B: PmBackend> Drop for ZenEngine<B> {
    fn drop(&mut self) {
        self.stop_ticker();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::WriteOp;
    use crate::schema::TableSchema;
    use pmtx_pm::Direct;

    fn engine(kind: EngineKind) -> Arc<ZenEngine<Direct>> {
        let mut options = DbOptions::in_memory(kind, vec![TableSchema::ordered("t").max_value_len(32)]);
        options.workers = 1;
        options.epoch_interval = Duration::from_millis(1);
        let pool =
            Arc::new(Pool::<Direct>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options.pm).unwrap());
        ZenEngine::open(&options, pool).unwrap()
    }

    fn commit(worker: &mut dyn EngineWorker, key: u64, op: WriteOp<'_>) {
        worker.begin(false, 1);
        worker.write(TableId(0), &key.to_be_bytes(), op).unwrap();
        let ticket = worker.commit().unwrap();
        worker.wait_durable(ticket).unwrap();
        worker.idle();
    }

    /// The audit passes on the states transactions leave (inserts, updates
    /// with garbage waiting, deletes) and fails when a live slot is also
    /// put on a free list or listed twice.
    #[test]
    fn audit_finds_a_slot_both_live_and_free() {
        for kind in [EngineKind::Zen, EngineKind::ZenNaiveAlloc, EngineKind::Wbl] {
            let engine = engine(kind);
            let mut worker = Arc::clone(&engine).worker(0).expect("worker");
            for key in 0..40u64 {
                commit(worker.as_mut(), key, WriteOp::Put(b"first"));
            }
            for key in 0..20u64 {
                commit(worker.as_mut(), key, WriteOp::Put(b"second"));
            }
            for key in 30..40u64 {
                commit(worker.as_mut(), key, WriteOp::Delete);
            }
            let summary = engine.check_structure().unwrap().unwrap();
            assert!(summary.contains("40 live"), "{kind:?}: {summary}");

            let mut live = 0;
            engine.shared.tables[0].for_each_row(|_, row: &cache::Row| {
                if live == 0 && row.slot() != 0 {
                    live = row.slot();
                }
            });
            assert_ne!(live, 0);
            {
                let mut state = engine.shared.heap.regions[0].state.lock();
                state.heaps[0].clean.push(live);
            }
            let error = engine.check_structure().unwrap_err().to_string();
            assert!(error.contains("both Live and Free"), "{kind:?}: {error}");
            {
                let mut state = engine.shared.heap.regions[0].state.lock();
                state.heaps[0].clean.pop();
            }
            engine.check_structure().unwrap();
            {
                let slot_size = engine.shared.heap.geometries[0].slot_size;
                let mut state = engine.shared.heap.regions[0].state.lock();
                let (free, _) = state.heaps[0].pop(slot_size).unwrap();
                state.heaps[0].clean.extend([free, free]);
            }
            let error = engine.check_structure().unwrap_err().to_string();
            assert!(error.contains("both Free and Free"), "{kind:?}: {error}");
            {
                let mut state = engine.shared.heap.regions[0].state.lock();
                state.heaps[0].clean.pop();
            }
            engine.check_structure().unwrap();
            if kind == EngineKind::ZenNaiveAlloc {
                // A live slot whose persisted bitmap bit is clear.
                let (word_offset, mask) = engine.shared.heap.bitmap_bit(live);
                let backend = engine.shared.pool.backend();
                backend.store_u64(word_offset, backend.load_u64(word_offset) & !mask);
                let error = engine.check_structure().unwrap_err().to_string();
                assert!(error.contains("free in the persisted bitmap"), "{error}");
            }
            engine.close().unwrap();
        }
    }

    /// A `wbl` engine on a sim pool whose windows never close by themselves
    /// (the test drives the group commits), its pool and options.
    fn wbl_on_sim() -> (Arc<ZenEngine<pmtx_pm::Sim>>, Arc<Pool<pmtx_pm::Sim>>, DbOptions) {
        let mut options = DbOptions::in_memory(EngineKind::Wbl, vec![TableSchema::hashed("t").max_value_len(32)]);
        options.workers = 2;
        options.wbl.window = Duration::from_secs(3600);
        let pool = Arc::new(
            Pool::<pmtx_pm::Sim>::create_in_memory(16 << 20, pmtx_pm::layout::MIN_CHUNK_SIZE, &options.pm).unwrap(),
        );
        (ZenEngine::open(&options, Arc::clone(&pool)).unwrap(), pool, options)
    }

    /// wbl persists per-tuple metadata as the WBL design keeps it in NVM
    /// (`wbl_meta`): a writing commit one fence per version it supersedes
    /// plus one for its new versions (Zen: two in all with `run`, one pipelined); a read-only
    /// transaction none under Silo's OCC, one per tuple read under a
    /// protocol that writes metadata on reads (Cicada's read timestamps).
    #[test]
    fn wbl_persists_per_tuple_metadata_with_a_fence_each() {
        for (cc, read_fences) in [(crate::cc::CcProtocol::Silo, 0), (crate::cc::CcProtocol::Cicada, 4)] {
            let mut options = DbOptions::in_memory(EngineKind::Wbl, vec![TableSchema::hashed("t").max_value_len(32)]);
            options.workers = 1;
            options.cc = cc;
            let engine = crate::engines::open(&options).expect("open");
            let mut worker = Arc::clone(&engine).worker(0).expect("worker");
            // Four keys (written twice: the metadata region's chunk is
            // allocated, a fence of the pool's chunk table), then three of
            // them overwritten and one new, in one transaction.
            let put_all = |worker: &mut Box<dyn EngineWorker>, keys: std::ops::Range<u64>, value: &[u8]| {
                counters_of_committed(worker.as_mut(), false, &mut |worker| {
                    keys.clone()
                        .try_for_each(|key| worker.write(TableId(0), &key.to_be_bytes(), WriteOp::Put(value)).map(drop))
                })
            };
            for _ in 0..2 {
                put_all(&mut worker, 0..4, b"one");
            }
            let writing = put_all(&mut worker, 1..5, b"two");
            // A write reads its row first (every protocol), so under a
            // protocol that writes metadata on reads the three present rows
            // also get their read timestamps persisted.
            assert_eq!(
                writing.fences,
                3 + 1 + if read_fences > 0 { 3 } else { 0 },
                "{cc}: three superseded versions claimed, one fence for the versions"
            );
            let mut value = Vec::new();
            let reading = counters_of_committed(worker.as_mut(), true, &mut |worker| {
                (0..4u64).try_for_each(|key| {
                    worker.get(TableId(0), &key.to_be_bytes(), &mut value).map(|found| assert!(found))
                })
            });
            assert_eq!(reading.fences, read_fences, "{cc}: {reading:?}");
            drop(worker);
            engine.close().expect("close");
        }
    }

    /// Runs `body` as a transaction until an attempt commits (a descheduled
    /// attempt may cross an epoch, which a timestamp-ordered commit
    /// refuses) and returns the persistence counters of that attempt.
    fn counters_of_committed(
        worker: &mut dyn EngineWorker,
        read_only: bool,
        body: &mut dyn FnMut(&mut dyn EngineWorker) -> crate::error::TxResult<()>,
    ) -> pmtx_pm::PmCounters {
        loop {
            let before = pmtx_pm::thread_counters();
            worker.begin(read_only, 1);
            match body(worker).and_then(|()| worker.commit()) {
                Ok(_) => {
                    worker.idle();
                    return pmtx_pm::thread_counters().since(&before);
                }
                Err(crate::error::TxError::Abort(_)) => {
                    worker.abort();
                    worker.idle();
                }
                Err(error) => panic!("{error:?}"),
            }
        }
    }

    /// Recovers `image` as `wbl` and reads `keys`; also returns the report.
    fn recover_wbl(options: &DbOptions, image: &[u8], keys: &[u64]) -> (Vec<Option<Vec<u8>>>, RecoveryReport) {
        let pool = Arc::new(Pool::<Direct>::open_image(image, &options.pm).unwrap());
        let engine = crate::engines::open_on_pool(options, pool).unwrap();
        let report = engine.stats().recovery.unwrap();
        let mut worker = Arc::clone(&engine).worker(0).expect("worker");
        worker.begin(true, 1);
        let values = keys
            .iter()
            .map(|key| {
                let mut value = Vec::new();
                worker.get(TableId(0), &key.to_be_bytes(), &mut value).unwrap().then_some(value)
            })
            .collect();
        worker.commit().unwrap();
        drop(worker);
        engine.close().unwrap();
        (values, report)
    }

    fn write(worker: &mut dyn EngineWorker, key: u64, value: &[u8]) -> CommitTicket {
        worker.begin(false, 1);
        worker.write(TableId(0), &key.to_be_bytes(), WriteOp::Put(value)).unwrap();
        let ticket = worker.commit().unwrap();
        worker.idle();
        ticket
    }

    /// A wbl commit's versions are durable when it returns (one fence, no
    /// LP bit, after the metadata persist of the version it supersedes), but it is acknowledged only once its window's record is:
    /// a crash before that record recovers the version it superseded (kept
    /// intact meanwhile) and discards the new one, even though a reader
    /// already saw it; a crash after recovers the new one.
    #[test]
    fn wbl_acknowledges_with_the_window_record_and_recovery_discards_the_dirty_window() {
        let (engine, pool, options) = wbl_on_sim();
        let window = engine.shared.window.as_ref().unwrap();
        let mut writer = Arc::clone(&engine).worker(0).expect("worker");
        let mut reader = Arc::clone(&engine).worker(1).expect("worker");
        // An overwrite of another key first: its metadata region's chunk
        // is allocated (a fence of the pool's chunk table) before the
        // counted commit.
        write(writer.as_mut(), 2, b"warm");
        write(writer.as_mut(), 2, b"warm");
        let first = write(writer.as_mut(), 1, b"first");
        window.group_commit(true);
        window.group_commit(true);
        assert!(engine.is_durable(first), "two group commits cover a commit of the epoch before them");
        let before = pmtx_pm::thread_counters();
        let second = write(writer.as_mut(), 1, b"second");
        let persisted = pmtx_pm::thread_counters().since(&before);
        assert_eq!(
            persisted.fences, 2,
            "one fence for the superseded version's metadata, one for the new versions, no LP bit"
        );
        assert!(matches!(second, CommitTicket::Epoch(_)));
        assert!(!engine.is_durable(second), "acknowledged before its window's record");
        // A reader sees the new version and must wait for the same window.
        let mut value = Vec::new();
        reader.begin(true, 1);
        assert!(reader.get(TableId(0), &1u64.to_be_bytes(), &mut value).unwrap());
        assert_eq!(value, b"second");
        let seen = reader.commit().unwrap();
        reader.idle();
        assert_eq!(seen, second, "a read-only commit waits for the window of what it read");
        let dirty = pool.backend().persisted_image();
        // The superseded version is still intact, garbage or not.
        let (values, report) = recover_wbl(&options, &dirty, &[1]);
        assert_eq!(values, vec![Some(b"first".to_vec())], "the dirty window was not discarded");
        assert!(report.heap_tuples_discarded >= 1, "{report:?}");
        let (persisted, dirty_bound) = report.wbl_window.unwrap();
        let CommitTicket::Epoch(epoch) = second else { unreachable!() };
        assert!(persisted < crate::storage::record::first_tid_of_epoch(epoch));
        assert!(dirty_bound >= crate::storage::record::first_tid_of_epoch(epoch), "c_d covers every written TID");
        window.group_commit(true);
        window.group_commit(true);
        assert!(engine.is_durable(second));
        let committed = pool.backend().persisted_image();
        let (values, report) = recover_wbl(&options, &committed, &[1]);
        assert_eq!(values, vec![Some(b"second".to_vec())]);
        assert_eq!(report.heap_tuples_discarded, 0, "{report:?}");
        drop((writer, reader));
        engine.close().unwrap();
    }

    /// Recovering a recovered image again gives the same state (the
    /// discarded versions are erased before the new life's record), and a
    /// commit of the new life is above the old window.
    #[test]
    fn wbl_recovery_is_idempotent_and_the_next_life_starts_above_the_old_window() {
        let (engine, pool, options) = wbl_on_sim();
        let window = engine.shared.window.as_ref().unwrap();
        let mut worker = Arc::clone(&engine).worker(0).expect("worker");
        write(worker.as_mut(), 1, b"kept");
        window.group_commit(true);
        window.group_commit(true);
        write(worker.as_mut(), 2, b"lost");
        let image = pool.backend().persisted_image();
        drop(worker);
        engine.close_on_drop().unwrap();

        let recovered = Arc::new(Pool::<pmtx_pm::Sim>::open_image(&image, &options.pm).unwrap());
        let again = crate::engines::open_on_pool(&options, Arc::clone(&recovered)).unwrap();
        let (old_persisted, old_dirty) = again.stats().recovery.unwrap().wbl_window.unwrap();
        let mut worker = Arc::clone(&again).worker(0).expect("worker");
        let ticket = write(worker.as_mut(), 3, b"new life");
        let CommitTicket::Epoch(epoch) = ticket else { panic!("wbl hands out epoch tickets") };
        assert!(crate::storage::record::first_tid_of_epoch(epoch) > old_dirty, "a new TID inside the old window");
        drop(worker);
        again.close_on_drop().unwrap();
        // Crash right after recovery (the new life's commit not durable).
        let image = recovered.backend().persisted_image();
        let (values, report) = recover_wbl(&options, &image, &[1, 2, 3]);
        assert_eq!(values, vec![Some(b"kept".to_vec()), None, None]);
        assert_eq!(report.heap_tuples_discarded, 1, "only the new life's unacknowledged commit");
        let (persisted, _) = report.wbl_window.unwrap();
        assert!(persisted >= old_dirty && old_dirty > old_persisted, "the new life's record covers the old window");
    }
}
