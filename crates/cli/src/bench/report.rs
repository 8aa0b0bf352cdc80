//! The results of `pmtx bench`: the JSON schema, the CSV rows and the text
//! tables.
//!
//! The JSON field names are a stable interface (`pmtx plot` and external
//! scripts read them): add fields, do not rename or remove them.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The whole `--json` document.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// What was run.
    pub config: ConfigJson,
    /// One entry per (engine, threads), in run order.
    pub runs: Vec<RunJson>,
    /// `--pmdk`: one entry per thread count, the PMDK (libpmemobj) baseline
    /// of the micro workload, run after the engines (empty without
    /// `--pmdk`; missing in reports written before the flag existed).
    #[serde(default)]
    pub pmdk_runs: Vec<PmdkRunJson>,
}

/// One run of the PMDK (libpmemobj) baseline (`--pmdk`): the micro
/// workload as libpmemobj undo-log transactions on a fresh pool
/// (`pmtx_pmdk::run`). No latency or PM counters are measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PmdkRunJson {
    /// Always "pmdk" (the label of its rows in the tables and the CSV).
    pub engine: String,
    /// Workload name.
    pub workload: String,
    /// Worker threads.
    pub threads: usize,
    /// Measured seconds (0 if the run failed).
    pub duration_s: f64,
    /// Warm-up seconds.
    pub warmup_s: f64,
    /// Seconds spent creating the pool and loading.
    pub load_s: f64,
    /// Items in the structure after the load.
    pub items_loaded: u64,
    /// Transactions committed in the measured interval (each operation is
    /// one transaction; searches and empty dequeues included).
    pub committed: u64,
    /// `committed / duration_s`.
    pub throughput_tps: f64,
    /// `throughput_tps` over the first engine run's (the "vs first" column).
    pub tps_ratio: f64,
    /// Committed transactions by type (the workload's transaction types).
    pub per_type: BTreeMap<String, u64>,
    /// Outcome counters in the measured interval (`dequeue-empty`;
    /// `insert-new`, `insert-overwrite`, `search-hit`, `search-miss`).
    pub outcomes: BTreeMap<String, u64>,
    /// Committed transactions per worker thread.
    pub per_thread: Vec<u64>,
    /// For each engine run with the same thread count: its throughput over
    /// this run's (keyed by the engine label; missing if this run has no
    /// throughput).
    #[serde(default)]
    pub engine_over_pmdk: BTreeMap<String, f64>,
    /// Whether the run completed and the reopened pool passed the check of
    /// the structure's invariants.
    pub check_passed: bool,
    /// The failed check, or the error that ended the run.
    pub check_failures: Vec<String>,
    /// What the check verified (empty if it did not pass).
    #[serde(default)]
    pub check_summary: String,
    /// Whether `PMEM_IS_PMEM_FORCE=1` was set: libpmem then flushes cache
    /// lines instead of calling msync on a file that is not on real PM.
    pub pmem_forced: bool,
    /// Pool file (created fresh for the run and removed afterwards).
    pub pool: String,
    /// Pool size (`pmtx_pmdk::MicroConfig::suggested_pool_size`).
    pub pool_size_bytes: u64,
    /// Seed of the load order and the workers' key streams.
    pub seed: u64,
    /// Source revision.
    pub git_revision: String,
}

/// The configuration shared by every run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConfigJson {
    /// Workload name.
    pub workload: String,
    /// The workload options used (all of them, defaults included).
    pub workload_options: WorkloadOptionsJson,
    /// Engine labels (with their options), in run order.
    pub engines: Vec<String>,
    /// Thread counts, in run order.
    pub threads: Vec<usize>,
    /// Measured seconds per run.
    pub duration_s: f64,
    /// Warm-up seconds per run.
    pub warmup_s: f64,
    /// Backend kind requested (direct, emulated, sim).
    pub backend: String,
    /// Latency model ("none" unless emulated).
    pub latency_model: String,
    /// What the latency model charges, with its parameters (empty unless
    /// emulated).
    #[serde(default)]
    pub latency_model_description: String,
    /// Persistence domain (adr, eadr).
    pub persistence_domain: String,
    /// Whether fences also msync.
    pub msync: bool,
    /// Epoch length.
    pub epoch_ms: u64,
    /// Checkpoint interval, 0 = off.
    pub checkpoint_s: f64,
    /// Pool size per run.
    pub pool_size_bytes: u64,
    /// `--pool`, if given (else temporary files).
    pub pool: Option<String>,
    /// Client seed.
    pub seed: u64,
    /// `--recover`: durable runs were crashed after the measured phase and
    /// recovered (see `RunJson::recovery`).
    #[serde(default)]
    pub recover: bool,
    /// `--nvm-dram-ratio`: the Zen paper's ratio P of NVM to DRAM, if given.
    #[serde(default)]
    pub nvm_dram_ratio: Option<f64>,
    /// With `--nvm-dram-ratio`: the loaded database size (keys plus values).
    #[serde(default)]
    pub loaded_database_bytes: Option<u64>,
    /// With `--nvm-dram-ratio`: every engine's DRAM budget,
    /// `loaded_database_bytes / nvm_dram_ratio`.
    #[serde(default)]
    pub dram_budget_bytes: Option<u64>,
    /// `--route-by-partition`: transactions were routed by the engine's
    /// assignment (see `RunJson::routing`).
    #[serde(default)]
    pub route_by_partition: bool,
    /// `--transactions`: measured transactions per worker (the run was
    /// counted, not timed; `duration_s` is then the default, unused).
    #[serde(default)]
    pub transactions: Option<u64>,
    /// `--warmup-transactions` with `--transactions` (0 when not given).
    #[serde(default)]
    pub warmup_transactions: Option<u64>,
    /// `git rev-parse --short HEAD` of the source tree ("unknown" if none).
    pub git_revision: String,
    /// pmtx version.
    pub pmtx_version: String,
    /// What an acknowledged commit survives (of the durable runs).
    pub durability: String,
    /// Logical CPUs of the machine.
    pub cpus: usize,
    /// Start of the benchmark (Unix seconds).
    pub started_unix_seconds: u64,
}

/// The workload options, as used.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadOptionsJson {
    /// TPC-C warehouses.
    pub warehouses: u32,
    /// TPC-C items (100000 is standard).
    pub tpcc_items: u32,
    /// TPC-C customers per district (3000 is standard).
    pub tpcc_customers_per_district: u32,
    /// Smallbank accounts.
    pub accounts: u64,
    /// Smallbank hot accounts.
    pub hotspot: Option<u64>,
    /// Smallbank hot-access probability.
    pub hotspot_probability: f64,
    /// YCSB variant.
    pub ycsb: String,
    /// YCSB zipfian constant.
    pub theta: f64,
    /// YCSB srq/lrq/sru/lru: workers 0..long_threads ran the long
    /// transaction of the pair, the others the short one (`per_type`
    /// "long" and "short"); 0: every worker ran `ycsb`.
    #[serde(default)]
    pub long_threads: usize,
    /// YCSB with `long_threads` and a point variant: what the long threads
    /// ran ("scan" or "update"; empty: the pair's long transaction).
    #[serde(default)]
    pub long_kind: String,
    /// YCSB: rows of a long transaction (0 without `long_threads`).
    #[serde(default)]
    pub long_rows: usize,
    /// YCSB: transactions of the variant a long thread ran between two long
    /// ones.
    #[serde(default)]
    pub long_every: usize,
    /// YCSB: long updates on the upper half of the table, the others on the
    /// lower half.
    #[serde(default)]
    pub long_disjoint: bool,
    /// YCSB rows.
    pub records: u64,
    /// YCSB operations per transaction.
    pub ops_per_txn: usize,
    /// YCSB bytes per field.
    pub field_size: usize,
    /// YCSB fields per row.
    pub fields: usize,
    /// Seed of the loaded data.
    pub load_seed: u64,
    /// TPC-C transaction mix: weight by type name (types that do not run
    /// are left out).
    #[serde(default = "standard_tpcc_mix")]
    pub tpcc_mix: BTreeMap<String, u32>,
    /// Whether `tpcc_mix` has the proportions of the standard mix (45%
    /// NewOrder, 43% Payment, 4% each of the others); false marks a
    /// non-standard mix such as `--tpcc-mix new_order=50,payment=50`.
    #[serde(default = "yes")]
    pub tpcc_mix_standard: bool,
    /// Queue: items per partition after load.
    #[serde(default)]
    pub queue_length: u64,
    /// Queue: rows a peek scans.
    #[serde(default)]
    pub queue_scan: usize,
    /// Queue: transaction mix (`enqueue=45,dequeue=45,peek=10`).
    #[serde(default)]
    pub queue_mix: String,
    /// Micro workloads: entries loaded.
    #[serde(default)]
    pub micro_entries: u64,
    /// Micro workloads: bytes of each entry's value.
    #[serde(default)]
    pub entry_size: usize,
    /// Micro workloads: percentage of inserts (enqueues).
    #[serde(default)]
    pub insert_percent: u32,
}

/// Rows of a long YCSB transaction under `options`.
pub fn long_rows(options: &pmtx_workloads::WorkloadOptions) -> usize {
    options.long_rows.unwrap_or(if options.long_kind.is_some() {
        pmtx_workloads::ycsb::DEFAULT_LONG_ROWS
    } else {
        pmtx_workloads::ycsb::LONG_RANGE_ROWS
    })
}

fn standard_tpcc_mix() -> BTreeMap<String, u32> {
    mix_json(pmtx_workloads::tpcc::TpccMix::default())
}

fn mix_json(mix: pmtx_workloads::tpcc::TpccMix) -> BTreeMap<String, u32> {
    mix.entries().map(|(name, weight)| (name.to_string(), weight)).collect()
}

fn yes() -> bool {
    true
}

impl WorkloadOptionsJson {
    /// Describes `options`.
    pub fn new(options: &pmtx_workloads::WorkloadOptions) -> Self {
        Self {
            warehouses: options.warehouses,
            tpcc_items: options.items,
            tpcc_customers_per_district: options.customers_per_district,
            accounts: options.accounts,
            hotspot: options.hotspot,
            hotspot_probability: options.hotspot_probability,
            ycsb: options.ycsb.name().to_string(),
            theta: options.theta,
            long_threads: options.long_threads,
            long_kind: options.long_kind.map_or(String::new(), |kind| kind.name().to_string()),
            long_rows: if options.long_threads > 0 { long_rows(options) } else { 0 },
            long_every: options.long_every,
            long_disjoint: options.long_disjoint,
            records: options.records,
            ops_per_txn: options.ops_per_txn,
            field_size: options.field_size,
            fields: options.fields,
            load_seed: options.load_seed,
            tpcc_mix: mix_json(pmtx_workloads::tpcc::TpccMix(options.tpcc_mix)),
            tpcc_mix_standard: pmtx_workloads::tpcc::TpccMix(options.tpcc_mix).is_standard(),
            queue_length: options.queue_length,
            queue_scan: options.queue_scan,
            queue_mix: pmtx_workloads::queue::QueueMix(options.queue_mix).to_string(),
            micro_entries: options.micro_entries,
            entry_size: options.entry_size,
            insert_percent: options.insert_percent,
        }
    }
}

/// One (engine, threads) run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunJson {
    /// The run's label: the `--engine` entry as given (engine name plus
    /// `:key=value` options, e.g. `dbxn:nt=off`), or just the engine name.
    pub engine: String,
    /// The engine's name without options (`dbxn`).
    #[serde(default)]
    pub engine_name: String,
    /// Every option of the engine with the value in effect, defaults
    /// included (empty for engines without options).
    #[serde(default)]
    pub engine_options: BTreeMap<String, String>,
    /// Workload name.
    pub workload: String,
    /// Worker threads.
    pub threads: usize,
    /// Measured seconds (wall clock of the measured phase).
    pub duration_s: f64,
    /// Warm-up seconds.
    pub warmup_s: f64,
    /// Seconds spent loading.
    pub load_s: f64,
    /// Resident set size of the process (`/proc/self/statm`) once the
    /// database was open, just before the load (bytes; None where
    /// unavailable). With several runs in one invocation it includes what
    /// earlier runs left allocated.
    #[serde(default)]
    pub rss_before_load_bytes: Option<u64>,
    /// Resident set size right after the load (bytes).
    #[serde(default)]
    pub rss_after_load_bytes: Option<u64>,
    /// `rss_after_load_bytes - rss_before_load_bytes`: what the loaded
    /// rows cost in memory (indexes, records, values; and, for durable
    /// engines, the pool pages the load touched, which are mapped into the
    /// process).
    #[serde(default)]
    pub rss_load_delta_bytes: Option<i64>,
    /// Rows present right after the load, over every table
    /// (`Database::for_each_row`).
    #[serde(default)]
    pub rows_loaded: u64,
    /// `rss_load_delta_bytes / rows_loaded`.
    #[serde(default)]
    pub bytes_per_loaded_row: Option<f64>,
    /// Transactions started in the measured phase whose commit was
    /// acknowledged durable (for non-durable engines: committed).
    pub committed: u64,
    /// Aborted attempts (retried) in the measured phase.
    pub aborted: u64,
    /// Transactions the workload rolled back (e.g. TPC-C NewOrder's 1%).
    pub rolled_back: u64,
    /// Transactions given up after too many aborts.
    pub gave_up: u64,
    /// `committed / duration_s`.
    pub throughput_tps: f64,
    /// `throughput_tps` over the first run's.
    pub tps_ratio: f64,
    /// Start to durable acknowledgement, all transaction types.
    pub latency_us: LatencyJson,
    /// By transaction type.
    pub per_type: BTreeMap<String, TypeJson>,
    /// PM work per committed transaction.
    pub pm: PmJson,
    /// The workers' reads and writes of pool memory per committed
    /// transaction and per tuple it accessed.
    #[serde(default)]
    pub nvm_access: NvmAccessJson,
    /// HTM region statistics (zeros for engines without HTM).
    pub htm: HtmJson,
    /// Aborted attempts by reason (every reason listed).
    pub aborts_by_reason: BTreeMap<String, u64>,
    /// Backend kind (direct, emulated, sim; "none" for a non-durable engine).
    pub backend: String,
    /// Latency model ("none" unless emulated).
    pub latency_model: String,
    /// Whether the engine makes commits durable.
    pub durable: bool,
    /// What an acknowledged commit survives.
    pub durability: String,
    /// Pool file used (None for non-durable engines).
    pub pool: Option<String>,
    /// Client seed.
    pub seed: u64,
    /// Source revision.
    pub git_revision: String,
    /// Whether the workload's consistency check passed after the run.
    pub check_passed: bool,
    /// The failed checks, if any.
    pub check_failures: Vec<String>,
    /// Engine statistics at the end of the run.
    pub engine_stats: EngineStatsJson,
    /// Engine-specific counters of the measured phase, by name
    /// (`EngineStats::engine_counters`; `zen+`: entries into the exclusive
    /// stage by trigger, aborts and waits it caused, snapshot reads, direct
    /// NVM writes, maintenance, NUMA placement); empty for other engines.
    #[serde(default)]
    pub engine_counters: BTreeMap<String, u64>,
    /// `--recover`: the crash after the measured phase and the recovery
    /// (None without `--recover` and for non-durable engines).
    #[serde(default)]
    pub recovery: Option<RecoveryJson>,
    /// `--provision auto`: bytes of the lowest free pool chunks made sure
    /// to be populated before the measured phase (0: not provisioned).
    #[serde(default)]
    pub pool_provisioned_bytes: u64,
    /// Why provisioning failed, if it did (the run went on without it).
    #[serde(default)]
    pub pool_provision_error: Option<String>,
    /// Growth of the pool's allocated chunks over the measured phase
    /// (bytes; None without a pool). More than provisioned: the rest was
    /// populated during the phase. Chunks a checkpoint freed and the phase
    /// reused do not count.
    #[serde(default)]
    pub pool_allocated_measured_bytes: Option<u64>,
    /// The redo log files of the measured phase (None unless the engine
    /// keeps its log on a file system).
    #[serde(default)]
    pub log_file: Option<LogFileJson>,
    /// `--route-by-partition`: how the transactions were routed (None
    /// without it).
    #[serde(default)]
    pub routing: Option<RoutingJson>,
    /// CPU time the workers used in the measured phase, summed over them
    /// (their thread clocks; None where unavailable).
    #[serde(default)]
    pub worker_cpu_s: Option<f64>,
    /// Share of the machine's CPU time over the measured phase that the
    /// hypervisor took from this virtual machine (`/proc/stat` steal, 0 to
    /// 1; None off Linux). Runs with more steal are slower for reasons
    /// outside the engine.
    #[serde(default)]
    pub host_steal_share: Option<f64>,
}

impl RunJson {
    /// Commits per second of the workers' own CPU time.
    pub fn commits_per_worker_cpu_s(&self) -> Option<f64> {
        self.worker_cpu_s.filter(|&cpu| cpu > 0.0).map(|cpu| self.committed as f64 / cpu)
    }

    /// The run's CPU line: the workers' CPU time against the wall time it
    /// could have been, commits per worker CPU-second, and the steal.
    pub fn cpu_line(&self) -> String {
        let workers = match self.worker_cpu_s {
            Some(cpu) => {
                let possible = self.duration_s * self.threads as f64;
                format!(
                    "workers on CPU {cpu:.2} s of {possible:.2} s ({:.0} %), {} commits per worker CPU-second",
                    100.0 * cpu / possible.max(f64::MIN_POSITIVE),
                    self.commits_per_worker_cpu_s().map_or("n/a".to_string(), format_tps)
                )
            }
            None => "workers' CPU time n/a".to_string(),
        };
        let steal = match self.host_steal_share {
            Some(share) => format!("; host steal {:.1} % of the machine's CPU time", 100.0 * share),
            None => String::new(),
        };
        format!("cpu: {workers}{steal}")
    }
}

/// `--route-by-partition`: the transactions of a run, whole run (warm-up
/// and measured phase, each transaction counted once, where it was drawn
/// and where it ran).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RoutingJson {
    /// Transactions drawn (all workers).
    pub generated: u64,
    /// Transactions the engine assigned a worker to
    /// (`Database::assign_transaction` answered; 0 when it has no
    /// preference).
    pub assigned: u64,
    /// Assigned to another worker and handed to its queue.
    pub forwarded: u64,
    /// Assigned to another worker whose queue was full: run by the worker
    /// that drew it.
    pub queue_full: u64,
    /// Transactions run (all workers): equals `generated` (no transaction
    /// lost or run twice) unless the run failed or was crashed.
    pub executed: u64,
    /// Per worker.
    pub workers: Vec<RoutingWorkerJson>,
}

/// One worker's share of [`RoutingJson`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RoutingWorkerJson {
    /// Transactions it drew.
    pub generated: u64,
    /// Of those, handed to another worker's queue.
    pub forwarded: u64,
    /// Transactions it ran from its queue (drawn by another worker).
    pub received: u64,
    /// Transactions it ran (its own and received).
    pub executed: u64,
    /// Its acknowledged commits of the measured phase (their sum is the
    /// run's `committed`).
    pub committed: u64,
}

impl RoutingJson {
    /// One line for the table output.
    pub fn line(&self) -> String {
        let share = |count: u64| if self.generated > 0 { 100.0 * count as f64 / self.generated as f64 } else { 0.0 };
        format!(
            "routing: {} transactions drawn, {} assigned by the engine ({:.0} %), {} forwarded to another worker \
             ({:.0} %), {} run locally because the target's queue was full; {} run",
            self.generated,
            self.assigned,
            share(self.assigned),
            self.forwarded,
            share(self.forwarded),
            self.queue_full,
            self.executed
        )
    }
}

/// A crash after the measured phase and the recovery that followed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RecoveryJson {
    /// How long the workers kept running after the measured phase before
    /// the crash (seconds).
    pub crash_after_s: f64,
    /// Wall time of the reopen: pool open plus engine open with recovery,
    /// until the database accepts transactions (milliseconds).
    pub duration_ms: f64,
    /// Recovery's own time as the engine reports it (milliseconds).
    pub engine_duration_ms: f64,
    /// Whether the pool was marked cleanly shut down (false after a crash).
    pub clean_shutdown: bool,
    /// Pool bytes held by allocated chunks at the crash.
    pub pool_used_bytes_at_crash: u64,
    /// Pool bytes held by allocated chunks after recovery.
    pub pool_used_bytes: u64,
    /// Pool size.
    pub pool_size_bytes: u64,
    /// Rows loaded from the checkpoint.
    pub checkpoint_rows: u64,
    /// Log records scanned.
    pub log_records_scanned: u64,
    /// Log records applied.
    pub log_records_applied: u64,
    /// Log records skipped because their epoch was not durable.
    pub log_records_not_durable: u64,
    /// Tuple slots scanned in the heap (zen).
    pub heap_slots_scanned: u64,
    /// Live tuples recovered from the heap (zen).
    pub heap_tuples_recovered: u64,
    /// Tuples of unfinished transactions or torn slots discarded (zen).
    pub heap_tuples_discarded: u64,
    /// Whether the workload's consistency check passed on the recovered
    /// database.
    pub check_passed: bool,
    /// The failed checks, if any.
    pub check_failures: Vec<String>,
    /// Seconds the consistency check took.
    pub check_s: f64,
}

impl RecoveryJson {
    /// Fills the counters from the engine's report.
    pub fn counters(&mut self, report: &pmtx_engine::RecoveryReport) {
        self.engine_duration_ms = report.duration.as_secs_f64() * 1000.0;
        self.clean_shutdown = report.clean_shutdown;
        self.checkpoint_rows = report.checkpoint_rows;
        self.log_records_scanned = report.log_records_scanned;
        self.log_records_applied = report.log_records_applied;
        self.log_records_not_durable = report.log_records_not_durable;
        self.heap_slots_scanned = report.heap_slots_scanned;
        self.heap_tuples_recovered = report.heap_tuples_recovered;
        self.heap_tuples_discarded = report.heap_tuples_discarded;
    }
}

/// Latency summary in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct LatencyJson {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl LatencyJson {
    /// Summarises a histogram of nanoseconds (zeros when empty).
    pub fn from_nanoseconds(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Self {
            mean: histogram.mean() / 1000.0,
            p50: us(histogram.value_at_quantile(0.5)),
            p90: us(histogram.value_at_quantile(0.9)),
            p99: us(histogram.value_at_quantile(0.99)),
            p999: us(histogram.value_at_quantile(0.999)),
            max: us(histogram.max()),
        }
    }
}

/// One transaction type.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TypeJson {
    /// Acknowledged commits of this type.
    pub committed: u64,
    /// `committed / duration_s` of the run: this type's share of
    /// `throughput_tps` (with `--long-threads`, each class's throughput).
    #[serde(default)]
    pub throughput_tps: f64,
    /// Rollbacks of this type.
    pub rolled_back: u64,
    /// Attempts of this type that aborted (conflicts) and were retried.
    #[serde(default)]
    pub aborted_attempts: u64,
    /// `aborted_attempts` over every attempt of the type (aborted, committed
    /// or rolled back): the share of the type's work a conflict threw away.
    #[serde(default)]
    pub abort_rate: f64,
    /// Mean latency (µs).
    pub mean: f64,
    /// Median (µs).
    pub p50: f64,
    /// 90th percentile (µs).
    pub p90: f64,
    /// 99th percentile (µs).
    pub p99: f64,
    /// 99.9th percentile (µs).
    pub p999: f64,
    /// Maximum (µs).
    pub max: f64,
}

impl TypeJson {
    /// Builds from counts, a latency summary and the measured seconds of the run.
    pub fn new(committed: u64, rolled_back: u64, latency: LatencyJson, duration_s: f64) -> Self {
        Self {
            committed,
            throughput_tps: committed as f64 / duration_s.max(f64::MIN_POSITIVE),
            rolled_back,
            aborted_attempts: 0,
            abort_rate: 0.0,
            mean: latency.mean,
            p50: latency.p50,
            p90: latency.p90,
            p99: latency.p99,
            p999: latency.p999,
            max: latency.max,
        }
    }

    /// Records the type's aborted (and retried) attempts.
    pub fn set_aborts(&mut self, aborted_attempts: u64) {
        self.aborted_attempts = aborted_attempts;
        let attempts = aborted_attempts + self.committed + self.rolled_back;
        self.abort_rate = if attempts == 0 { 0.0 } else { aborted_attempts as f64 / attempts as f64 };
    }
}

/// PM counters per committed transaction.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PmJson {
    /// Cache lines flushed.
    pub flushes_per_txn: f64,
    /// Store fences.
    pub fences_per_txn: f64,
    /// Bytes stored into the pool.
    pub bytes_per_txn: f64,
    /// 256-byte media blocks written.
    pub blocks_256_per_txn: f64,
    /// Bytes written with non-temporal stores.
    pub nt_bytes_per_txn: f64,
    /// Emulated media stall (ns).
    pub stall_ns_per_txn: f64,
    /// msync calls.
    pub msyncs_per_txn: f64,
    /// XPLines the media model wrote to the medium.
    #[serde(default)]
    pub media_xplines_written_per_txn: f64,
    /// XPLines the media model read from the medium.
    #[serde(default)]
    pub media_xplines_read_per_txn: f64,
    /// Which threads the counters cover.
    pub scope: String,
}

impl PmJson {
    /// Per-transaction values of `counters` over `committed` commits.
    pub fn new(counters: &pmtx_pm::PmCounters, committed: u64, scope: &str) -> Self {
        let per = |value: u64| if committed == 0 { 0.0 } else { value as f64 / committed as f64 };
        Self {
            flushes_per_txn: per(counters.lines_flushed),
            fences_per_txn: per(counters.fences),
            bytes_per_txn: per(counters.bytes_written),
            blocks_256_per_txn: per(counters.blocks_256_written),
            nt_bytes_per_txn: per(counters.non_temporal_bytes),
            stall_ns_per_txn: per(counters.stall_ns),
            msyncs_per_txn: per(counters.msyncs),
            media_xplines_written_per_txn: per(counters.media_xplines_written),
            media_xplines_read_per_txn: per(counters.media_xplines_read),
            scope: scope.to_string(),
        }
    }
}

/// The worker threads' accesses to pool memory (NVM) in the measured
/// phase, per committed transaction and per tuple those transactions read
/// or wrote: the Zen paper's arithmetic of NVM writes per tuple (§5.2.1).
/// A read or a write is one access to one object, whatever its length
/// (a tuple, a log record, a metadata word: one backend call), and its
/// lines are counted beside it. Work of aborted attempts counts (it costs
/// the same); their tuples do not. Background threads (group-commit
/// flushes, checkpoints, `wbl`'s window records) are not included: see
/// `pm` for them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NvmAccessJson {
    /// Tuples read per committed transaction (gets and scanned rows).
    pub tuples_read_per_txn: f64,
    /// Tuples written per committed transaction.
    pub tuples_written_per_txn: f64,
    /// Reads of pool memory per committed transaction.
    pub reads_per_txn: f64,
    /// 64-byte lines those reads touched.
    pub lines_read_per_txn: f64,
    /// Writes to pool memory per committed transaction.
    pub writes_per_txn: f64,
    /// 64-byte lines those writes touched.
    pub lines_written_per_txn: f64,
    /// The workers' `clwb`s (lines flushed) per committed transaction.
    pub flushes_per_txn: f64,
    /// The workers' `sfence`s per committed transaction.
    pub fences_per_txn: f64,
    /// `reads_per_txn` over the tuples accessed (read plus written) per
    /// transaction; for a read-only mix, NVM reads per tuple read.
    pub reads_per_tuple: f64,
    /// `writes_per_txn` over the tuples accessed per transaction; for a
    /// read-only mix, NVM writes per tuple read.
    pub writes_per_tuple: f64,
}

impl NvmAccessJson {
    /// The values of the workers' `counters` over `committed` commits that
    /// read and wrote `tuples`.
    pub fn new(counters: &pmtx_pm::PmCounters, committed: u64, tuples: (u64, u64)) -> Self {
        let per = |value: u64| if committed == 0 { 0.0 } else { value as f64 / committed as f64 };
        let accessed = tuples.0 + tuples.1;
        let per_tuple = |value: u64| if accessed == 0 { 0.0 } else { value as f64 / accessed as f64 };
        Self {
            tuples_read_per_txn: per(tuples.0),
            tuples_written_per_txn: per(tuples.1),
            reads_per_txn: per(counters.reads),
            lines_read_per_txn: per(counters.lines_read),
            writes_per_txn: per(counters.writes),
            lines_written_per_txn: per(counters.lines_written),
            flushes_per_txn: per(counters.lines_flushed),
            fences_per_txn: per(counters.fences),
            reads_per_tuple: per_tuple(counters.reads),
            writes_per_tuple: per_tuple(counters.writes),
        }
    }

    /// One line for the text report.
    pub fn line(&self) -> String {
        format!(
            "NVM access per txn (workers): {:.1} tuples read, {:.1} written; {:.2} reads ({:.1} lines), {:.2} writes \
             ({:.1} lines), {:.2} clwb, {:.2} sfence; per tuple accessed: {:.3} reads, {:.3} writes",
            self.tuples_read_per_txn,
            self.tuples_written_per_txn,
            self.reads_per_txn,
            self.lines_read_per_txn,
            self.writes_per_txn,
            self.lines_written_per_txn,
            self.flushes_per_txn,
            self.fences_per_txn,
            self.reads_per_tuple,
            self.writes_per_tuple
        )
    }
}

/// HTM region counters of the measured phase.
///
/// The DBXN engines (`dbxn`, `dbxn-nvm`) and the PHyTM family (`phytm`,
/// `phytm-paper`, `phtm`) run HTM regions with the engine option `htm=sim`
/// or `htm=rtm`: DBXN's commit region (validation plus install) is elided
/// (hardware attempts, then the same body in software: `fallbacks`), and
/// each commit of a PHyTM hardware path is one hardware attempt. The
/// counters below are the engine's `pmtx_htm::Htm` instance's. With
/// `htm=none` (the default) and for every other engine there is no HTM
/// instance: the hardware counters are 0 and every commit ran the software
/// path (`software_path_commits` = `committed`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HtmJson {
    /// Regions committed in (real or simulated) hardware.
    pub hw_commits: u64,
    /// Aborted hardware attempts.
    pub aborts: u64,
    /// Regions finished on the fallback path.
    pub fallbacks: u64,
    /// HTM backend of the engine: rtm, sim or none (none also for engines
    /// without HTM regions).
    #[serde(default)]
    pub backend: String,
    /// Regions run (committed or explicitly aborted).
    #[serde(default)]
    pub regions: u64,
    /// Regions that ended in an explicit abort (with `htm=sim`: an injected
    /// abort, after which the transaction attempt aborts and is retried).
    #[serde(default)]
    pub explicit_region_aborts: u64,
    /// Commits of the measured phase that ran on the software path: every
    /// commit without an HTM instance, else the fallback executions.
    #[serde(default)]
    pub software_path_commits: u64,
    /// The PHyTM family: commits of the measured phase by path
    /// (`fast_htm`, `slow_htm`, `stm`, `stm_exclusive`, `global_lock`);
    /// empty for other engines.
    #[serde(default)]
    pub path_commits: BTreeMap<String, u64>,
}

impl HtmJson {
    /// The counters of `stats` (None: no HTM instance) for `committed`
    /// measured commits on `backend`.
    pub fn new(backend: &str, stats: Option<&pmtx_htm::HtmStatsSnapshot>, committed: u64) -> Self {
        match stats {
            Some(stats) => Self {
                hw_commits: stats.hardware_commits,
                aborts: stats.total_aborts(),
                fallbacks: stats.fallback_executions,
                backend: backend.to_string(),
                regions: stats.regions,
                explicit_region_aborts: stats.explicit_region_aborts,
                software_path_commits: stats.fallback_executions,
                path_commits: BTreeMap::new(),
            },
            None => Self { backend: backend.to_string(), software_path_commits: committed, ..Self::default() },
        }
    }

    /// The same counters with the commits by path (`EngineStats::path_commits`).
    pub fn with_paths(mut self, paths: BTreeMap<String, u64>) -> Self {
        self.path_commits = paths;
        self
    }
}

/// The redo log files of an engine that keeps its log on a file system
/// (`dbx-disk`, `dbx-naive:medium=disk`), over the measured phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LogFileJson {
    /// The directory of the log files.
    pub directory: String,
    /// `fdatasync` calls on log files.
    pub fdatasyncs: u64,
    /// `fdatasync` calls per committed transaction.
    pub fdatasyncs_per_txn: f64,
    /// `fsync` calls on the directory (new segment files, removals).
    pub directory_syncs: u64,
}

impl LogFileJson {
    /// The counts `(fdatasyncs, directory syncs)` of a run of `committed`
    /// transactions with its log in `directory`.
    pub fn new(directory: std::path::PathBuf, (fdatasyncs, directory_syncs): (u64, u64), committed: u64) -> Self {
        Self {
            directory: directory.display().to_string(),
            fdatasyncs,
            fdatasyncs_per_txn: if committed == 0 { 0.0 } else { fdatasyncs as f64 / committed as f64 },
            directory_syncs,
        }
    }
}

/// One line per run whose engine has a DRAM cache over PM that was used:
/// its counters since open (load included).
pub fn cache_lines(runs: &[RunJson]) -> String {
    let mut out = String::new();
    for run in runs {
        let stats = &run.engine_stats;
        if stats.cache_hits + stats.cache_misses + stats.cache_evictions == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "  {} x{}: {} hits, {} misses, {} evictions, {} resident at the end",
            run.engine,
            run.threads,
            stats.cache_hits,
            stats.cache_misses,
            stats.cache_evictions,
            crate::units::format_bytes(stats.cache_bytes)
        );
    }
    out
}

/// One line per run whose redo log is on files: its syncs.
pub fn log_file_lines(runs: &[RunJson]) -> String {
    let mut out = String::new();
    for run in runs {
        if let Some(log) = &run.log_file {
            let _ = writeln!(
                out,
                "  {} x{}: redo log in {}: {} fdatasyncs ({:.3} per transaction), {} directory syncs",
                run.engine, run.threads, log.directory, log.fdatasyncs, log.fdatasyncs_per_txn, log.directory_syncs
            );
        }
    }
    out
}

/// Engine-wide statistics at the end of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EngineStatsJson {
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Log bytes held in the pool.
    pub log_bytes: u64,
    /// Highest durable epoch.
    pub durable_epoch: u64,
    /// DRAM cache over PM (zen's Met-Cache, foedus's volatile rows over its
    /// snapshot pages): reads served from DRAM since open.
    #[serde(default)]
    pub cache_hits: u64,
    /// Cache misses since open (zen: a tuple copied from the PM heap;
    /// foedus: a whole 4 KiB snapshot page read for one row).
    #[serde(default)]
    pub cache_misses: u64,
    /// Cache evictions since open.
    #[serde(default)]
    pub cache_evictions: u64,
    /// Bytes the cache holds at the end of the run.
    #[serde(default)]
    pub cache_bytes: u64,
}

/// The CSV file: a header and one row per run (engine runs, then the PMDK
/// runs of `--pmdk`).
pub fn csv(report: &Report) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    // The mix is the same for every run; only TPC-C rows carry it.
    let options = &report.config.workload_options;
    let mix = options.tpcc_mix.iter().map(|(name, weight)| format!("{name}={weight}")).collect::<Vec<_>>().join(";");
    for run in &report.runs {
        let l = &run.latency_us;
        let p = &run.pm;
        let recovery = run.recovery.as_ref();
        let tpcc = run.workload == "tpcc";
        let _ = writeln!(
            out,
            "{},{},{},{:.3},{},{},{},{},{:.1},{:.4},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.3},{:.3},{:.1},{:.3},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&run.engine),
            csv_field(&run.workload),
            run.threads,
            run.duration_s,
            run.committed,
            run.aborted,
            run.rolled_back,
            run.gave_up,
            run.throughput_tps,
            run.tps_ratio,
            l.mean,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            p.flushes_per_txn,
            p.fences_per_txn,
            p.bytes_per_txn,
            p.blocks_256_per_txn,
            p.nt_bytes_per_txn,
            p.stall_ns_per_txn,
            run.htm.hw_commits,
            run.htm.aborts,
            run.htm.fallbacks,
            csv_field(&run.backend),
            csv_field(&run.latency_model),
            run.seed,
            csv_field(&run.git_revision),
            run.check_passed,
            csv_field(&run.engine_name),
            csv_field(&run.engine_options.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")),
            csv_field(&run.htm.backend),
            run.htm.regions,
            run.htm.software_path_commits,
            recovery.map_or(String::new(), |r| format!("{:.3}", r.duration_ms)),
            recovery.map_or(String::new(), |r| format!("{:.3}", r.engine_duration_ms)),
            recovery.map_or(String::new(), |r| r.pool_used_bytes_at_crash.to_string()),
            recovery.map_or(String::new(), |r| r.pool_size_bytes.to_string()),
            recovery.map_or(String::new(), |r| r.check_passed.to_string()),
            run.rss_before_load_bytes.map_or(String::new(), |v| v.to_string()),
            run.rss_after_load_bytes.map_or(String::new(), |v| v.to_string()),
            run.rss_load_delta_bytes.map_or(String::new(), |v| v.to_string()),
            run.rows_loaded,
            run.bytes_per_loaded_row.map_or(String::new(), |v| format!("{v:.1}")),
            if tpcc { csv_field(&mix) } else { String::new() },
            if tpcc { options.tpcc_mix_standard.to_string() } else { String::new() },
            if run.workload == "ycsb" { options.long_threads.to_string() } else { String::new() },
            csv_field(&per_type_tps(run.per_type.iter().map(|(name, t)| (name, t.throughput_tps)))),
            run.worker_cpu_s.map_or(String::new(), |v| format!("{v:.3}")),
            run.host_steal_share.map_or(String::new(), |v| format!("{v:.4}")),
        );
    }
    // PMDK rows: the columns an engine run has and a PMDK run does not
    // (aborts, latency, PM counters, HTM, recovery, memory) stay empty.
    for run in &report.pmdk_runs {
        let mut cells: Vec<String> = vec![String::new(); csv_header_columns().count()];
        let mut set = |column: &str, value: String| {
            let index = csv_header_columns().position(|name| name == column).expect("a CSV column");
            cells[index] = value;
        };
        set("engine", csv_field(&run.engine));
        set("workload", csv_field(&run.workload));
        set("threads", run.threads.to_string());
        set("duration_s", format!("{:.3}", run.duration_s));
        set("committed", run.committed.to_string());
        set("throughput_tps", format!("{:.1}", run.throughput_tps));
        set("tps_ratio", format!("{:.4}", run.tps_ratio));
        set("backend", "libpmemobj".to_string());
        set("latency_model", "none".to_string());
        set("seed", run.seed.to_string());
        set("git_revision", csv_field(&run.git_revision));
        set("check_passed", run.check_passed.to_string());
        set("engine_name", csv_field(&run.engine));
        set("engine_options", format!("pmem_forced={}", run.pmem_forced));
        set("rows_loaded", run.items_loaded.to_string());
        let duration_s = run.duration_s.max(f64::MIN_POSITIVE);
        set(
            "per_type_tps",
            csv_field(&per_type_tps(run.per_type.iter().map(|(name, &count)| (name, count as f64 / duration_s)))),
        );
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// The `per_type_tps` cell: `type=tps` by type, `;`-separated (one cell
/// whatever the workload's types).
fn per_type_tps<'a>(types: impl Iterator<Item = (&'a String, f64)>) -> String {
    types.map(|(name, tps)| format!("{name}={tps:.1}")).collect::<Vec<_>>().join(";")
}

/// The CSV header, without the line break.
const CSV_HEADER: &str = "engine,workload,threads,duration_s,committed,aborted,rolled_back,gave_up,throughput_tps,tps_ratio,\
         lat_mean_us,lat_p50_us,lat_p90_us,lat_p99_us,lat_p999_us,lat_max_us,\
         flushes_per_txn,fences_per_txn,bytes_per_txn,blocks_256_per_txn,nt_bytes_per_txn,stall_ns_per_txn,\
         htm_hw_commits,htm_aborts,htm_fallbacks,backend,latency_model,seed,git_revision,check_passed,\
         engine_name,engine_options,htm_backend,htm_regions,htm_software_path_commits,\
         recovery_ms,recovery_engine_ms,recovery_pool_used_bytes_at_crash,recovery_pool_size_bytes,recovery_check_passed,\
         rss_before_load_bytes,rss_after_load_bytes,rss_load_delta_bytes,rows_loaded,bytes_per_loaded_row,\
         tpcc_mix,tpcc_mix_standard,long_threads,per_type_tps,worker_cpu_s,host_steal_share";

fn csv_header_columns() -> impl Iterator<Item = &'static str> {
    CSV_HEADER.split(',')
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// A plain-text table: text columns left-aligned, numbers right-aligned.
pub struct Table {
    header: Vec<String>,
    left: Vec<usize>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles; the first column is left-aligned.
    pub fn new(header: &[&str]) -> Self {
        Self::with_left_columns(header, &[0])
    }

    /// A table whose columns `left` are left-aligned.
    pub fn with_left_columns(header: &[&str], left: &[usize]) -> Self {
        Self { header: header.iter().map(|title| title.to_string()).collect(), left: left.to_vec(), rows: Vec::new() }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with `indent` spaces before each line.
    pub fn render(&self, indent: usize) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|title| title.chars().count()).collect();
        for row in &self.rows {
            for (column, cell) in row.iter().enumerate().take(columns) {
                widths[column] = widths[column].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            out.push_str(&" ".repeat(indent));
            for (column, cell) in cells.iter().enumerate().take(columns) {
                if column > 0 {
                    out.push_str("  ");
                }
                let pad = widths[column].saturating_sub(cell.chars().count());
                if self.left.contains(&column) {
                    out.push_str(cell);
                    out.push_str(&" ".repeat(pad));
                } else {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                }
            }
            let trimmed = out.trim_end().len();
            out.truncate(trimmed);
            out.push('\n');
        };
        line(&mut out, &self.header);
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }
}

/// A latency in µs with a precision that suits its size.
pub fn format_us(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// A per-transaction count.
pub fn format_per_txn(value: f64) -> String {
    if value < 100.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.0}")
    }
}

/// Transactions per second.
pub fn format_tps(tps: f64) -> String {
    if tps < 100.0 {
        format!("{tps:.1}")
    } else {
        format!("{tps:.0}")
    }
}

/// The main results table: the engine runs, then the PMDK runs (with "-"
/// for what they do not measure).
pub fn results_table(runs: &[RunJson], pmdk_runs: &[PmdkRunJson]) -> String {
    let mut table = Table::new(&[
        "engine",
        "threads",
        "committed",
        "aborted",
        "tps",
        "mean µs",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "flush/txn",
        "fence/txn",
        "bytes/txn",
        "256B/txn",
        "vs first",
    ]);
    for run in runs {
        let l = &run.latency_us;
        let p = &run.pm;
        table.row(vec![
            run.engine.clone(),
            run.threads.to_string(),
            run.committed.to_string(),
            run.aborted.to_string(),
            format_tps(run.throughput_tps),
            format_us(l.mean),
            format_us(l.p50),
            format_us(l.p90),
            format_us(l.p99),
            format_us(l.p999),
            format_us(l.max),
            format_per_txn(p.flushes_per_txn),
            format_per_txn(p.fences_per_txn),
            format_per_txn(p.bytes_per_txn),
            format_per_txn(p.blocks_256_per_txn),
            format!("{:.2}x", run.tps_ratio),
        ]);
    }
    for run in pmdk_runs {
        let mut row = vec![
            run.engine.clone(),
            run.threads.to_string(),
            run.committed.to_string(),
            "-".to_string(),
            format_tps(run.throughput_tps),
        ];
        row.extend(std::iter::repeat_n("-".to_string(), 10));
        row.push(format!("{:.2}x", run.tps_ratio));
        table.row(row);
    }
    table.render(0)
}

/// One line per (thread count, engine) with a PMDK run at that count:
/// engine throughput over PMDK's.
pub fn pmdk_ratio_lines(runs: &[RunJson], pmdk_runs: &[PmdkRunJson]) -> String {
    let mut out = String::new();
    for pmdk in pmdk_runs {
        for run in runs.iter().filter(|run| run.threads == pmdk.threads) {
            let ratio = match pmdk.engine_over_pmdk.get(&run.engine) {
                Some(ratio) => format!("{ratio:.2}x"),
                None => "n/a (the PMDK run has no throughput)".to_string(),
            };
            let _ = writeln!(out, "  {}/pmdk x{}: {ratio}", run.engine, run.threads);
        }
    }
    out
}

/// Resident memory after the load of every run.
pub fn memory_table(runs: &[RunJson]) -> String {
    let mut table =
        Table::new(&["engine", "threads", "RSS before load", "RSS after load", "delta", "rows loaded", "bytes/row"]);
    let size = |bytes: Option<u64>| bytes.map_or("n/a".to_string(), format_size);
    for run in runs {
        table.row(vec![
            run.engine.clone(),
            run.threads.to_string(),
            size(run.rss_before_load_bytes),
            size(run.rss_after_load_bytes),
            run.rss_load_delta_bytes.map_or("n/a".to_string(), |delta| {
                format!("{}{}", if delta < 0 { "-" } else { "+" }, format_size(delta.unsigned_abs()))
            }),
            run.rows_loaded.to_string(),
            run.bytes_per_loaded_row.map_or("n/a".to_string(), |bytes| format!("{bytes:.0}")),
        ]);
    }
    table.render(2)
}

/// Bytes in MiB or GiB, for the memory table.
pub fn format_size(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Per-type throughput and latency lines of every run, in the workload's
/// type order, then the PMDK runs' committed transactions by type.
pub fn per_type_table(runs: &[RunJson], pmdk_runs: &[PmdkRunJson], type_order: &[&str]) -> String {
    let mut table = Table::with_left_columns(
        &[
            "engine",
            "threads",
            "type",
            "committed",
            "tps",
            "rolled back",
            "aborts",
            "abort %",
            "mean µs",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "p99.9 µs",
            "max µs",
        ],
        &[0, 2],
    );
    for run in runs {
        let mut names: Vec<&str> = type_order.iter().copied().filter(|name| run.per_type.contains_key(*name)).collect();
        names.extend(run.per_type.keys().map(String::as_str).filter(|name| !type_order.contains(name)));
        for name in names {
            let t = &run.per_type[name];
            table.row(vec![
                run.engine.clone(),
                run.threads.to_string(),
                name.to_string(),
                t.committed.to_string(),
                format_tps(t.throughput_tps),
                t.rolled_back.to_string(),
                t.aborted_attempts.to_string(),
                format!("{:.2}", t.abort_rate * 100.0),
                format_us(t.mean),
                format_us(t.p50),
                format_us(t.p90),
                format_us(t.p99),
                format_us(t.p999),
                format_us(t.max),
            ]);
        }
    }
    for run in pmdk_runs {
        let mut names: Vec<&str> = type_order.iter().copied().filter(|name| run.per_type.contains_key(*name)).collect();
        names.extend(run.per_type.keys().map(String::as_str).filter(|name| !type_order.contains(name)));
        for name in names {
            let committed = run.per_type[name];
            let mut row = vec![
                run.engine.clone(),
                run.threads.to_string(),
                name.to_string(),
                committed.to_string(),
                format_tps(committed as f64 / run.duration_s.max(f64::MIN_POSITIVE)),
                "-".to_string(),
            ];
            row.extend(std::iter::repeat_n("-".to_string(), 6));
            table.row(row);
        }
    }
    table.render(2)
}

/// The recovery table of the runs that crashed and recovered (`--recover`).
pub fn recovery_table(runs: &[RunJson]) -> String {
    let mut table = Table::with_left_columns(
        &[
            "engine",
            "threads",
            "recovery ms",
            "engine ms",
            "pool used at crash",
            "pool size",
            "ckpt rows",
            "log scanned",
            "log applied",
            "heap slots",
            "heap tuples",
            "discarded",
            "check",
        ],
        &[0, 12],
    );
    let mib = |bytes: u64| {
        if bytes >= 1 << 30 {
            format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
        } else {
            format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
        }
    };
    for run in runs {
        let Some(r) = &run.recovery else { continue };
        table.row(vec![
            run.engine.clone(),
            run.threads.to_string(),
            format!("{:.1}", r.duration_ms),
            format!("{:.1}", r.engine_duration_ms),
            format!(
                "{} ({:.0}%)",
                mib(r.pool_used_bytes_at_crash),
                percent(r.pool_used_bytes_at_crash, r.pool_size_bytes)
            ),
            mib(r.pool_size_bytes),
            r.checkpoint_rows.to_string(),
            r.log_records_scanned.to_string(),
            r.log_records_applied.to_string(),
            r.heap_slots_scanned.to_string(),
            r.heap_tuples_recovered.to_string(),
            r.heap_tuples_discarded.to_string(),
            if r.check_passed { "passed" } else { "FAILED" }.to_string(),
        ]);
    }
    table.render(2)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// One line per run with its HTM counters (runs with an HTM instance).
pub fn htm_lines(runs: &[RunJson]) -> String {
    let mut out = String::new();
    for run in runs.iter().filter(|run| run.htm.backend != "none" && !run.htm.backend.is_empty()) {
        let h = &run.htm;
        let _ = writeln!(
            out,
            "  {} x{}: htm {}: {} regions, {} hardware commits, {} aborted attempts, {} fallbacks, \
             {} explicit region aborts",
            run.engine,
            run.threads,
            h.backend,
            h.regions,
            h.hw_commits,
            h.aborts,
            h.fallbacks,
            h.explicit_region_aborts
        );
    }
    for run in runs.iter().filter(|run| run.htm.path_commits.values().any(|&commits| commits > 0)) {
        let total: u64 = run.htm.path_commits.values().sum();
        let paths: Vec<String> = run
            .htm
            .path_commits
            .iter()
            .filter(|(_, &commits)| commits > 0)
            .map(|(path, commits)| format!("{path} {commits} ({:.1} %)", *commits as f64 * 100.0 / total as f64))
            .collect();
        let _ = writeln!(out, "  {} x{}: commits by path: {}", run.engine, run.threads, paths.join(", "));
    }
    out
}

/// One line per run with its engine-specific counters (measured phase;
/// the nonzero ones, and the exclusive-stage entries even when zero).
pub fn engine_counter_lines(runs: &[RunJson]) -> String {
    let mut out = String::new();
    for run in runs.iter().filter(|run| !run.engine_counters.is_empty()) {
        let shown: Vec<String> = run
            .engine_counters
            .iter()
            .filter(|(name, &count)| count > 0 || name.starts_with("exclusive_entries"))
            .map(|(name, count)| format!("{name}={count}"))
            .collect();
        let _ = writeln!(out, "  {} x{}: {}", run.engine, run.threads, shown.join(", "));
    }
    out
}

/// One line per run with its nonzero abort reasons.
pub fn abort_lines(runs: &[RunJson]) -> String {
    let mut out = String::new();
    for run in runs {
        let reasons: Vec<String> = run
            .aborts_by_reason
            .iter()
            .filter(|(_, count)| **count > 0)
            .map(|(reason, count)| format!("{reason}={count}"))
            .collect();
        let _ = writeln!(
            out,
            "  {} x{}: {} aborted attempts{}{}{}",
            run.engine,
            run.threads,
            run.aborted,
            if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
            if run.rolled_back > 0 { format!(", {} rolled back", run.rolled_back) } else { String::new() },
            if run.gave_up > 0 { format!(", {} gave up after too many aborts", run.gave_up) } else { String::new() },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut table = Table::new(&["engine", "tps"]);
        table.row(vec!["silo".into(), "12345".into()]);
        table.row(vec!["group-commit".into(), "7".into()]);
        let text = table.render(0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "engine          tps");
        assert_eq!(lines[1], "silo          12345");
        assert_eq!(lines[2], "group-commit      7");
    }

    #[test]
    fn latency_summary() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3).unwrap();
        assert_eq!(LatencyJson::from_nanoseconds(&histogram).max, 0.0);
        for ns in 1..=1000u64 {
            histogram.record(ns * 1000).unwrap();
        }
        let summary = LatencyJson::from_nanoseconds(&histogram);
        assert!((summary.p50 - 500.0).abs() < 1.0, "{summary:?}");
        assert!((summary.max - 1000.0).abs() < 1.0, "{summary:?}");
        assert!(summary.p90 <= summary.p99 && summary.p99 <= summary.p999);
    }

    #[test]
    fn reports_without_pmdk_runs_still_parse() {
        let config = ConfigJson {
            workload: "hash".into(),
            workload_options: WorkloadOptionsJson::new(&pmtx_workloads::WorkloadOptions::default()),
            engines: vec!["sp3".into()],
            threads: vec![1],
            duration_s: 1.0,
            warmup_s: 0.0,
            backend: "direct".into(),
            latency_model: "none".into(),
            latency_model_description: String::new(),
            persistence_domain: "adr".into(),
            msync: false,
            epoch_ms: 40,
            checkpoint_s: 0.0,
            pool_size_bytes: 1 << 30,
            pool: None,
            seed: 42,
            recover: false,
            nvm_dram_ratio: None,
            loaded_database_bytes: None,
            dram_budget_bytes: None,
            route_by_partition: false,
            transactions: None,
            warmup_transactions: None,
            git_revision: "unknown".into(),
            pmtx_version: "0".into(),
            durability: String::new(),
            cpus: 1,
            started_unix_seconds: 0,
        };
        let mut value = serde_json::to_value(Report { config, runs: Vec::new(), pmdk_runs: Vec::new() }).unwrap();
        assert!(value["pmdk_runs"].is_array());
        value.as_object_mut().unwrap().remove("pmdk_runs");
        let report: Report = serde_json::from_value(value).unwrap();
        assert!(report.pmdk_runs.is_empty());
        // The CSV of a report without runs is its header.
        assert_eq!(csv(&report).lines().count(), 1);
    }

    #[test]
    fn csv_quotes_only_when_needed() {
        assert_eq!(csv_field("silo"), "silo");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
