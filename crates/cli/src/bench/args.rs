//! The flags of `pmtx bench` and their parsers.
//!
//! Every value is checked by clap (exit code 2 with a message naming the
//! flag) or, for combinations, by [`BenchArgs::validate`] (exit code 2 too).
//! Engine and workload names come from the engine and workload crates, so
//! new engines show up here without touching the CLI.

use super::spec::{self, parse_entry, EngineEntry, EngineSpec};
use crate::pm_args::{FlushArg, MediaArgs, ModelArg, PmArgs, PmKind};
use crate::units::{format_bytes, parse_seconds, parse_size};
use crate::CliError;
use clap::{Args, ValueEnum};
use pmtx_pm::{layout, BackendKind, PmOptions};
use pmtx_workloads::queue::QueueMix;
use pmtx_workloads::tpcc::TpccMix;
use pmtx_workloads::{WorkloadOptions, YcsbVariant, WORKLOAD_NAMES};
use std::path::PathBuf;
use std::time::Duration;

/// `pmtx bench`
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workload to run: tpcc, smallbank, ycsb, queue, or an SP³ micro
    /// workload: sps, sp3-queue, hash, rbtree, btree.
    #[arg(long, value_parser = parse_workload)]
    pub workload: String,
    /// Engines to compare, comma-separated, each optionally with options
    /// (`dbxn:nt=off`), or a preset (`dbxn-ablation`).
    #[arg(long, value_delimiter = ',', value_parser = parse_entry, default_value = "group-commit",
          help = spec::short_help(), long_help = spec::long_help())]
    pub engine: Vec<EngineEntry>,
    /// Worker thread counts to run, comma-separated (each engine runs each count).
    #[arg(long, value_delimiter = ',', value_parser = parse_threads, default_value = "1")]
    pub threads: Vec<usize>,
    /// Measured time per run, in seconds (fractions allowed).
    #[arg(long, default_value = "5", value_parser = parse_seconds)]
    pub duration: Duration,
    /// Warm-up time per run before measuring, in seconds (0 = none).
    #[arg(long, default_value = "1", value_parser = parse_warmup)]
    pub warmup: Duration,
    /// Instead of a measured time, each worker runs exactly N measured
    /// transactions (attempts that commit, roll back or give up each count
    /// once), after --warmup-transactions. With one thread and a seed, the
    /// run then does the same work every time (the deterministic yardstick
    /// of `scripts/count-instructions`). Not with --warmup, --duration or
    /// --pmdk.
    #[arg(long, value_name = "N", value_parser = parse_transactions, conflicts_with_all = ["warmup", "duration", "pmdk"])]
    pub transactions: Option<u64>,
    /// With --transactions: each worker first runs this many unmeasured
    /// transactions, and the measured ones start once every worker has
    /// [default: 0].
    #[arg(long, value_name = "N", requires = "transactions")]
    pub warmup_transactions: Option<u64>,
    /// Run on a cluster of this many nodes in this process (Raft over TCP
    /// on loopback), beside the same engine on one local pool: throughput,
    /// commit latency, bytes sent per transaction. Durable engines only;
    /// not with --pmdk, --recover, --transactions, --json, --csv or
    /// --route-by-partition.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=7))]
    pub replicas: Option<u64>,
    /// Seed of the clients (the same for every engine and thread count).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per run to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub pool_options: PoolRunArgs,
    /// After each durable engine's measured phase, crash the database while
    /// the workers keep running (no clean shutdown), reopen the pool with the
    /// same engine and options, time the recovery and run the consistency
    /// check on the recovered database (it replaces the check before the
    /// crash). Reported as "recovery" in the table and JSON.
    #[arg(long, help_heading = "Engine and pool")]
    pub recover: bool,
    /// Whether the measured phase runs on provisioned pool chunks. `auto`:
    /// at the end of the warm-up, the free chunks the measured phase is
    /// expected to allocate (twice the warm-up's rate, over the measured
    /// duration, plus --prefault-chunks) are populated before the phase
    /// starts, as a long-lived pool has them: a log engine reuses the chunks
    /// its checkpoints free, while the pages of a new pool file are
    /// allocated and zeroed by the kernel at first touch, on the cores the
    /// workers need (on a two-core machine that costs a durable engine a
    /// third of its two-thread throughput). `off`: the phase measures a
    /// fresh pool's first seconds. Needs a warm-up; durable engines only.
    /// The report gives what was provisioned and what the phase allocated.
    #[arg(long, value_enum, default_value_t = Provision::Auto, help_heading = "Engine and pool")]
    pub provision: Provision,
    /// Also run the PMDK (libpmemobj) baseline of the micro workload at each
    /// thread count, after the engines (sps, sp3-queue, hash, rbtree, btree
    /// only).
    ///
    /// Each operation is one libpmemobj undo-log transaction, with the same
    /// workload options, thread counts, duration, warm-up and seed as the
    /// engine runs. Each run gets a fresh pool file, removed afterwards:
    /// PATH.pmdk with --pool PATH (it must not exist: it is never replaced),
    /// else a temporary file in the system's temporary directory. Its size is what
    /// the workload needs (at least 64 MiB), not --pool-size: libpmemobj
    /// allocates its whole pool file up front.
    ///
    /// libpmem flushes cache lines only on real PM or with
    /// PMEM_IS_PMEM_FORCE=1 in the environment when pmtx starts (else it
    /// msyncs the page cache). The --pm options (the emulated latency model,
    /// --msync, --eadr, --flush) and --recover do not apply to PMDK: the fair
    /// comparison is `PMEM_IS_PMEM_FORCE=1 pmtx bench --pm direct --pmdk ...`.
    /// Reported as "pmdk" rows, with engine tps / pmdk tps per thread count,
    /// and as `pmdk_runs` in the JSON. Needs libpmemobj when pmtx is built
    /// (Debian package libpmemobj-dev).
    #[arg(long, help_heading = "Engine and pool")]
    pub pmdk: bool,
    /// The Zen paper's ratio P of NVM to DRAM capacity (zen-plus.txt §5.1:
    /// 4, 8 or 16): every engine's DRAM budget becomes the loaded database
    /// size (keys plus values of the rows the workload loads) divided by P,
    /// the same for all engines of the run: the Met-Cache of zen, zen+,
    /// zen-naive-alloc and wbl (cache=), the DRAM tables of mmdb (dram=),
    /// whose other rows then live in the pool used as volatile memory, and
    /// foedus's volatile rows over its snapshot pages (cache=).
    /// Engines without a DRAM budget ignore it. A number of at least 1;
    /// not with cache= or dram= in --engine; workloads that state their
    /// database size only (ycsb; tpcc, whose order lines count at their
    /// expected 10 per order).
    #[arg(long, value_name = "P", value_parser = parse_nvm_dram_ratio, help_heading = "Engine and pool")]
    pub nvm_dram_ratio: Option<f64>,
    /// Route each transaction through the engine's transaction assignment
    /// (zen+ on several NUMA nodes: Algorithm 3 of zen-plus.txt §4.2.2, the
    /// node most of its keys' soft partitions map to, balanced by the
    /// nodes' pending transactions). Each worker draws its transactions
    /// ahead, asks Database::assign_transaction for a worker and hands a
    /// transaction assigned to another worker to that worker's bounded
    /// queue; each worker runs the transactions in its queue before drawing
    /// its next one, and runs a transaction itself when the engine has no
    /// preference (other engines, one node) or the target's queue is full.
    /// At the end every queued transaction still runs (after the measured
    /// phase: not measured). Reported as "routing"
    /// in the table and JSON (assigned, forwarded, received, per worker).
    /// ycsb only.
    #[arg(long, help_heading = "Engine and pool")]
    pub route_by_partition: bool,
    #[command(flatten)]
    pub pm: BenchPmArgs,
    #[command(flatten)]
    pub workload_options: WorkloadArgs,
}

/// `--provision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Provision {
    /// Populate the chunks the measured phase is expected to allocate.
    Auto,
    /// Measure on the pool as the warm-up left it.
    Off,
}

/// The pool and engine-timing flags of a run (`bench` and `soak`).
#[derive(Args, Clone, Debug)]
pub struct PoolRunArgs {
    /// Pool file, kept after the run [default: a temporary file per run,
    /// deleted afterwards, in /dev/shm when that is a memory file system
    /// with room for the pool (a disk file system's page cache and
    /// write-back would add costs no persistent medium has), else in the
    /// temporary directory]. Replaced at each run if it is a pmtx pool; with
    /// several engines (bench) each gets its own file (PATH with "-<engine>"
    /// added).
    #[arg(long, help_heading = "Engine and pool")]
    pub pool: Option<PathBuf>,
    /// Size of the pool file created for each run (a sparse file: only what
    /// the run writes takes disk space). Log engines keep their log until a
    /// checkpoint, and reserve room for the next checkpoint, so a fast run
    /// needs room for seconds of log besides the data.
    #[arg(long, default_value = "8GiB", value_parser = parse_size, help_heading = "Engine and pool")]
    pub pool_size: u64,
    /// Epoch length in milliseconds (group commit and TID epochs; wbl runs
    /// its own windows, `--engine wbl:window=`).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=60_000), help_heading = "Engine and pool")]
    pub epoch_ms: u64,
    /// Periodic checkpoint interval in seconds (0 = off); for foedus, the
    /// interval of its log gleaner (a snapshot replaces the checkpoint).
    #[arg(long, default_value = "10", value_parser = parse_checkpoint, help_heading = "Engine and pool")]
    pub checkpoint_s: f64,
    /// Free pool chunks a background thread keeps populated ahead of the
    /// allocator, so workers take no page faults on fresh pool pages
    /// (durable engines on a pool file; 0 = off: workers fault them in).
    #[arg(long, default_value_t = 8, help_heading = "Engine and pool")]
    pub prefault_chunks: u64,
}

impl PoolRunArgs {
    /// Checks the pool size and path.
    pub fn validate(&self) -> Result<(), CliError> {
        let minimum = layout::MIN_POOL_SIZE.max(2 * layout::DEFAULT_CHUNK_SIZE);
        if self.pool_size < minimum || layout::geometry(self.pool_size, layout::DEFAULT_CHUNK_SIZE).is_none() {
            return Err(CliError::usage(format!(
                "--pool-size {} is too small: the minimum is {}",
                format_bytes(self.pool_size),
                format_bytes(minimum)
            )));
        }
        if let Some(pool) = &self.pool {
            if pool.is_dir() {
                return Err(CliError::usage(format!("--pool {}: is a directory; give a file path", pool.display())));
            }
        }
        Ok(())
    }

    /// The checkpoint interval (`None` when off).
    pub fn checkpoint_interval(&self) -> Option<Duration> {
        (self.checkpoint_s > 0.0).then(|| Duration::from_secs_f64(self.checkpoint_s))
    }
}

/// Which backend to run on (`bench` also offers the crash simulator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchPm {
    /// Real store, flush and fence instructions on the mapped pool.
    Direct,
    /// Direct plus a media-latency model charged at every fence.
    Emulated,
    /// The crash simulator (slow; for testing the driver, not for numbers).
    Sim,
}

/// The backend flags of `bench`.
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "PM backend")]
pub struct BenchPmArgs {
    /// PM backend to run on. The default emulates Optane PMem on an ordinary
    /// file, so figures mean something on machines without PM; on real PM
    /// (a DAX pool) use `direct`.
    #[arg(long = "pm", value_enum, default_value_t = BenchPm::Emulated)]
    pub pm: BenchPm,
    /// Latency model of the emulated backend [default: optane; only with --pm emulated].
    #[arg(long = "pm-model", value_enum)]
    pub pm_model: Option<ModelArg>,
    #[command(flatten)]
    pub media: MediaArgs,
    /// Also msync the flushed ranges at every fence (power-failure durability
    /// on a non-DAX file; one synchronous write per fence).
    #[arg(long)]
    pub msync: bool,
    /// Assume an eADR platform: caches are persistent, flushes are elided,
    /// fences kept for ordering.
    #[arg(long, conflicts_with = "flush")]
    pub eadr: bool,
    /// Flush instruction to use instead of the one CPUID picks; must exist on this CPU.
    #[arg(long, value_enum)]
    pub flush: Option<FlushArg>,
}

impl BenchPmArgs {
    /// The backend kind and validated pool options.
    pub fn resolve(&self) -> Result<(BackendKind, PmOptions), CliError> {
        let (kind, pm) = match self.pm {
            BenchPm::Direct => (BackendKind::Direct, PmKind::Direct),
            BenchPm::Emulated => (BackendKind::Emulated, PmKind::Emulated),
            // The simulator takes no latency model: validate like `direct`.
            BenchPm::Sim => (BackendKind::Sim, PmKind::Direct),
        };
        let shared = PmArgs {
            pm,
            pm_model: self.pm_model,
            media: self.media,
            msync: self.msync,
            eadr: self.eadr,
            flush: self.flush,
        };
        let options = shared.options().map_err(|error| match self.pm {
            BenchPm::Sim => CliError::usage(error.to_string().replace("--pm emulated", "--pm emulated (not sim)")),
            _ => error,
        })?;
        Ok((kind, options))
    }
}

/// Workload options; unset ones take the workload's defaults.
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Workload options")]
pub struct WorkloadArgs {
    /// TPC-C: warehouses [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub warehouses: Option<u32>,
    /// Smallbank: accounts [default: 250000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub accounts: Option<u64>,
    /// Smallbank: number of hot accounts [default: none, uniform access].
    #[arg(long)]
    pub hotspot: Option<u64>,
    /// Smallbank: probability that an access goes to a hot account [default: 0.9].
    #[arg(long, value_parser = parse_probability)]
    pub hotspot_probability: Option<f64>,
    /// YCSB variant: A..F, ro, rh, ba, wh, srq, lrq, sru, lru [default: A].
    #[arg(long, value_parser = parse_ycsb)]
    pub ycsb: Option<YcsbVariant>,
    /// YCSB srq/lrq/sru/lru: PHyTM's mixed workload (its Fig. 5e). The
    /// first N workers (index < N) run the long transaction of the pair (lrq
    /// or lru: 256 rows) and the others the short one (srq or sru: 16 rows),
    /// whichever of the pair --ycsb names; the per-type results are then "short" and "long"
    /// (committed, tps, latency of each class). N must be below every
    /// --threads count [default: 0: every worker runs --ycsb].
    #[arg(long, value_name = "N", value_parser = parse_long_threads)]
    pub long_threads: Option<usize>,
    /// YCSB with --long-threads and a point variant (A..F, ro, rh, ba,
    /// wh): the long threads run long-running transactions of this kind
    /// beside the variant (Zen+'s Fig. 24-26): scan (read-only) or update
    /// (one field of each row), over --long-rows consecutive rows from a
    /// random start; types "short" and "long" by transaction.
    #[arg(long, value_name = "KIND", value_parser = parse_long_kind)]
    pub long_kind: Option<pmtx_workloads::ycsb::LongKind>,
    /// YCSB with --long-threads: rows of a long transaction [default: 256
    /// for the srq/lrq/sru/lru pairs, 10000 with --long-kind].
    #[arg(long, value_name = "ROWS", value_parser = parse_positive_usize)]
    pub long_rows: Option<usize>,
    /// YCSB with --long-kind: a long thread runs this many transactions of
    /// the variant between two long ones (Fig. 24 and 25) [default: 0: only
    /// long ones].
    #[arg(long, value_name = "N")]
    pub long_every: Option<usize>,
    /// YCSB with --long-kind update: long transactions update the upper
    /// half of the table, the others use the lower half, so they never
    /// conflict (Fig. 25).
    #[arg(long)]
    pub long_disjoint: bool,
    /// YCSB and the micro workloads: zipfian constant, 0 = uniform [default: 0.99].
    #[arg(long, value_parser = parse_theta)]
    pub theta: Option<f64>,
    /// YCSB: rows [default: 100000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub records: Option<u64>,
    /// YCSB: operations per transaction [default: 16].
    #[arg(long, value_parser = parse_positive_usize)]
    pub ops_per_txn: Option<usize>,
    /// YCSB: bytes per field; queue: bytes per item [default: 100].
    #[arg(long, value_parser = parse_positive_usize)]
    pub field_size: Option<usize>,
    /// YCSB: fields per row [default: 10].
    #[arg(long, value_parser = parse_positive_usize)]
    pub fields: Option<usize>,
    /// TPC-C: items and stock rows per warehouse [default: 100000]. NON-STANDARD
    /// when changed: for quick tests only.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub tpcc_items: Option<u32>,
    /// TPC-C: customers per district [default: 3000]. NON-STANDARD when
    /// changed: for quick tests only.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub tpcc_customers: Option<u32>,
    /// TPC-C: transaction mix as TYPE=WEIGHT,... over new_order, payment,
    /// order_status, delivery, stock_level (positive integer weights; types
    /// not listed do not run), e.g. new_order=50,payment=50 [default: the
    /// standard mix new_order=45,payment=43,order_status=4,delivery=4,
    /// stock_level=4]. Any other proportions are a NON-STANDARD mix, marked
    /// in the report and the JSON (`tpcc_mix`, `tpcc_mix_standard`).
    #[arg(long, value_name = "MIX", value_parser = parse_tpcc_mix)]
    pub tpcc_mix: Option<TpccMix>,
    /// Queue: items per partition (one partition per thread) after load
    /// [default: 1000].
    #[arg(long, value_parser = parse_queue_length)]
    pub queue_length: Option<u64>,
    /// Queue: rows a peek scans from the head of its partition [default: 10].
    #[arg(long, value_parser = parse_positive_usize)]
    pub queue_scan: Option<usize>,
    /// Queue: transaction mix as TYPE=WEIGHT,... over enqueue, dequeue and
    /// peek (positive integer weights; types not listed do not run)
    /// [default: enqueue=45,dequeue=45,peek=10].
    #[arg(long, value_name = "MIX", value_parser = parse_queue_mix)]
    pub queue_mix: Option<QueueMix>,
    /// Micro workloads (sps, sp3-queue, hash, rbtree, btree): entries
    /// loaded; the sp3-queue loads at most 10000 items [default: 100000].
    #[arg(long, value_parser = parse_micro_entries)]
    pub micro_entries: Option<u64>,
    /// Micro workloads: bytes of each entry's value (the rbtree adds a
    /// 40-byte node header) [default: 128].
    #[arg(long, value_parser = parse_entry_size)]
    pub entry_size: Option<usize>,
    /// Micro workloads: percentage of inserts (sp3-queue: enqueues), 0 to
    /// 100; sps ignores it [default: 50].
    #[arg(long, value_parser = parse_insert_percent)]
    pub insert_percent: Option<u32>,
}

impl WorkloadArgs {
    /// Checks that workload-specific flags name the workload that runs.
    pub fn validate(&self, workload: &str) -> Result<(), CliError> {
        if self.tpcc_mix.is_some() && workload != "tpcc" {
            return Err(CliError::usage(format!("--tpcc-mix applies to --workload tpcc only, not {workload}")));
        }
        let queue_flags = [
            ("--queue-length", self.queue_length.is_some()),
            ("--queue-scan", self.queue_scan.is_some()),
            ("--queue-mix", self.queue_mix.is_some()),
        ];
        if let Some((flag, _)) = queue_flags.iter().find(|(_, given)| *given).filter(|_| workload != "queue") {
            return Err(CliError::usage(format!("{flag} applies to --workload queue only, not {workload}")));
        }
        if let Some(long_threads) = self.long_threads.filter(|&n| n > 0) {
            let variant = self.ycsb.unwrap_or_default();
            if workload != "ycsb" {
                return Err(CliError::usage(format!(
                    "--long-threads applies to --workload ycsb (with --ycsb srq, lrq, sru or lru, or --long-kind) \
                     only, not {workload}"
                )));
            }
            match (variant.short_long_pair(), self.long_kind) {
                (None, None) => {
                    return Err(CliError::usage(format!(
                        "--long-threads {long_threads} needs --ycsb srq, lrq, sru or lru (a short/long pair), not \
                         --ycsb {variant}, or --long-kind scan|update beside it"
                    )))
                }
                (Some(_), Some(kind)) => {
                    return Err(CliError::usage(format!(
                        "--long-kind {kind} goes with a point variant; --ycsb {variant} pairs its own long transaction"
                    )))
                }
                _ => {}
            }
        }
        let long_flags = [
            ("--long-kind", self.long_kind.is_some()),
            ("--long-rows", self.long_rows.is_some()),
            ("--long-every", self.long_every.is_some()),
            ("--long-disjoint", self.long_disjoint),
        ];
        if let Some((flag, _)) = long_flags.iter().find(|(_, given)| *given) {
            if workload != "ycsb" || self.long_threads.unwrap_or(0) == 0 {
                return Err(CliError::usage(format!("{flag} applies to --workload ycsb with --long-threads only")));
            }
        }
        if self.long_every.is_some() && self.long_kind.is_none() {
            return Err(CliError::usage("--long-every needs --long-kind (a pair's long threads run only long ones)"));
        }
        if self.long_disjoint && self.long_kind != Some(pmtx_workloads::ycsb::LongKind::Update) {
            return Err(CliError::usage("--long-disjoint applies to --long-kind update"));
        }
        let micro_flags = [
            ("--micro-entries", self.micro_entries.is_some()),
            ("--entry-size", self.entry_size.is_some()),
            ("--insert-percent", self.insert_percent.is_some()),
        ];
        let micro = pmtx_workloads::micro::NAMES.contains(&workload);
        if let Some((flag, _)) = micro_flags.iter().find(|(_, given)| *given).filter(|_| !micro) {
            return Err(CliError::usage(format!(
                "{flag} applies to the micro workloads ({}) only, not {workload}",
                pmtx_workloads::micro::NAMES.join(", ")
            )));
        }
        Ok(())
    }

    /// Checks the flags that depend on the thread count of a run
    /// (`threads`: every count that will run).
    pub fn validate_threads(&self, threads: &[usize]) -> Result<(), CliError> {
        let long_threads = self.long_threads.unwrap_or(0);
        // Long threads that run short transactions too measure both classes.
        let long_threads_run_short = self.long_kind.is_some() && self.long_every.unwrap_or(0) > 0;
        let too_few: Vec<String> = threads
            .iter()
            .filter(|&&count| long_threads > 0 && count <= long_threads && !long_threads_run_short)
            .map(usize::to_string)
            .collect();
        if !too_few.is_empty() {
            return Err(CliError::usage(format!(
                "--long-threads {long_threads} leaves no thread for short transactions at --threads {}: every thread \
                 count must be at least {}",
                too_few.join(","),
                long_threads + 1
            )));
        }
        Ok(())
    }

    /// The workload options: defaults overridden by the flags given.
    pub fn options(&self) -> WorkloadOptions {
        let mut options = WorkloadOptions::default();
        if let Some(value) = self.warehouses {
            options.warehouses = value;
        }
        if let Some(value) = self.accounts {
            options.accounts = value;
        }
        if self.hotspot.is_some() {
            options.hotspot = self.hotspot;
        }
        if let Some(value) = self.hotspot_probability {
            options.hotspot_probability = value;
        }
        if let Some(value) = self.ycsb {
            options.ycsb = value;
        }
        if let Some(value) = self.theta {
            options.theta = value;
        }
        if let Some(value) = self.long_threads {
            options.long_threads = value;
        }
        options.long_kind = self.long_kind;
        options.long_rows = self.long_rows;
        options.long_every = self.long_every.unwrap_or(0);
        options.long_disjoint = self.long_disjoint;
        if let Some(value) = self.records {
            options.records = value;
        }
        if let Some(value) = self.ops_per_txn {
            options.ops_per_txn = value;
        }
        if let Some(value) = self.field_size {
            options.field_size = value;
        }
        if let Some(value) = self.fields {
            options.fields = value;
        }
        if let Some(value) = self.tpcc_items {
            options.items = value;
        }
        if let Some(value) = self.tpcc_customers {
            options.customers_per_district = value;
        }
        if let Some(mix) = self.tpcc_mix {
            options.tpcc_mix = mix.0;
        }
        if let Some(value) = self.queue_length {
            options.queue_length = value;
        }
        if let Some(value) = self.queue_scan {
            options.queue_scan = value;
        }
        if let Some(mix) = self.queue_mix {
            options.queue_mix = mix.0;
        }
        if let Some(value) = self.micro_entries {
            options.micro_entries = value;
        }
        if let Some(value) = self.entry_size {
            options.entry_size = value;
        }
        if let Some(value) = self.insert_percent {
            options.insert_percent = value;
        }
        options
    }

    /// Whether a non-standard TPC-C scale was asked for.
    pub fn non_standard_tpcc(&self) -> bool {
        self.tpcc_items.is_some() || self.tpcc_customers.is_some()
    }

    /// The TPC-C mix asked for, if it is not the standard one.
    pub fn non_standard_tpcc_mix(&self) -> Option<TpccMix> {
        self.tpcc_mix.filter(|mix| !mix.is_standard())
    }
}

impl BenchArgs {
    /// `--transactions` with its warm-up, if the run is counted.
    pub fn counted(&self) -> Option<super::runner::Counted> {
        self.transactions
            .map(|measured| super::runner::Counted { warmup: self.warmup_transactions.unwrap_or(0), measured })
    }

    /// Checks what clap cannot check flag by flag.
    pub fn validate(&self) -> Result<(), CliError> {
        self.pool_options.validate()?;
        self.workload_options.validate(&self.workload)?;
        self.workload_options.validate_threads(&self.threads)?;
        if self.pmdk && !pmtx_workloads::micro::NAMES.contains(&self.workload.as_str()) {
            return Err(CliError::usage(format!(
                "--pmdk applies to the micro workloads ({}) only, not {}: the PMDK baseline exists for them alone",
                pmtx_workloads::micro::NAMES.join(", "),
                self.workload
            )));
        }
        Ok(())
    }

    /// The engines to run, presets expanded, in order.
    pub fn engines(&self) -> Vec<EngineSpec> {
        self.engine.iter().flat_map(|entry| entry.0.iter().cloned()).collect()
    }
}

/// Parses a `--workload` name.
pub fn parse_workload(text: &str) -> Result<String, String> {
    let name = text.trim().to_ascii_lowercase();
    let name = if name == "tpc-c" { "tpcc".to_string() } else { name };
    if WORKLOAD_NAMES.contains(&name.as_str()) {
        Ok(name)
    } else {
        Err(format!("unknown workload {text:?}; valid workloads: {}", WORKLOAD_NAMES.join(", ")))
    }
}

/// Parses a thread count (1 to 1024).
pub fn parse_threads(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(threads) if (1..=1024).contains(&threads) => Ok(threads),
        _ => Err(format!("invalid thread count {text:?}: expected an integer from 1 to 1024")),
    }
}

/// Like [`parse_seconds`] but 0 is allowed.
fn parse_transactions(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("`{text}` is not a whole number of transactions")),
    }
}

fn parse_warmup(text: &str) -> Result<Duration, String> {
    if text.trim().parse::<f64>().is_ok_and(|seconds| seconds == 0.0) {
        return Ok(Duration::ZERO);
    }
    parse_seconds(text)
}

fn parse_checkpoint(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && (0.0..=86_400.0).contains(&seconds) => Ok(seconds),
        _ => Err(format!("invalid checkpoint interval {text:?}: expected seconds from 0 (off) to 86400")),
    }
}

/// `--nvm-dram-ratio`: a finite number of at least 1.
pub(crate) fn parse_nvm_dram_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if ratio.is_finite() && ratio >= 1.0 => Ok(ratio),
        Ok(_) => Err(format!(
            "invalid NVM/DRAM ratio {text:?}: P must be a number of at least 1 (the paper's P is 4, 8 or 16; 1 \
             gives every engine DRAM for the whole database)"
        )),
        Err(_) => Err(format!("invalid NVM/DRAM ratio {text:?}: expected a number of at least 1, e.g. 4")),
    }
}

fn parse_probability(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("invalid probability {text:?}: expected a number from 0 to 1")),
    }
}

fn parse_theta(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(theta) if theta.is_finite() && theta >= 0.0 => Ok(theta),
        _ => Err(format!("invalid zipfian constant {text:?}: expected a number of at least 0 (0 = uniform)")),
    }
}

fn parse_long_threads(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        // At least one short thread, and thread counts stop at 1024.
        Ok(value) if value < 1024 => Ok(value),
        _ => Err(format!("invalid long-thread count {text:?}: expected an integer from 0 to 1023")),
    }
}

fn parse_long_kind(text: &str) -> Result<pmtx_workloads::ycsb::LongKind, String> {
    pmtx_workloads::ycsb::LongKind::parse(text).map_err(|error| error.to_string())
}

fn parse_positive_usize(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(value) if value > 0 => Ok(value),
        _ => Err(format!("invalid value {text:?}: expected a positive integer")),
    }
}

fn parse_tpcc_mix(text: &str) -> Result<TpccMix, String> {
    TpccMix::parse(text).map_err(|error| match error {
        pmtx_workloads::WorkloadError::InvalidOption(message) => message,
        other => other.to_string(),
    })
}

fn parse_queue_mix(text: &str) -> Result<QueueMix, String> {
    QueueMix::parse(text).map_err(|error| match error {
        pmtx_workloads::WorkloadError::InvalidOption(message) => message,
        other => other.to_string(),
    })
}

fn parse_queue_length(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(length) if length <= pmtx_workloads::queue::MAX_QUEUE_LENGTH => Ok(length),
        _ => Err(format!(
            "invalid queue length {text:?}: expected an integer from 0 to {}",
            pmtx_workloads::queue::MAX_QUEUE_LENGTH
        )),
    }
}

fn parse_micro_entries(text: &str) -> Result<u64, String> {
    use pmtx_workloads::micro::MAX_ENTRIES;
    match text.trim().parse::<u64>() {
        Ok(entries) if (2..=MAX_ENTRIES).contains(&entries) => Ok(entries),
        _ => Err(format!("invalid entry count {text:?}: expected an integer from 2 to {MAX_ENTRIES}")),
    }
}

fn parse_entry_size(text: &str) -> Result<usize, String> {
    use pmtx_workloads::micro::{MAX_ENTRY_SIZE, MIN_ENTRY_SIZE};
    match text.trim().parse::<usize>() {
        Ok(size) if (MIN_ENTRY_SIZE..=MAX_ENTRY_SIZE).contains(&size) => Ok(size),
        _ => Err(format!(
            "invalid entry size {text:?}: expected bytes from {MIN_ENTRY_SIZE} (an id and one more 8-byte word) to \
             {MAX_ENTRY_SIZE}"
        )),
    }
}

fn parse_insert_percent(text: &str) -> Result<u32, String> {
    match text.trim().trim_end_matches('%').trim().parse::<u32>() {
        Ok(percent) if percent <= 100 => Ok(percent),
        _ => Err(format!("invalid insert percentage {text:?}: expected an integer from 0 to 100")),
    }
}

fn parse_ycsb(text: &str) -> Result<YcsbVariant, String> {
    YcsbVariant::parse(text.trim()).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvm_dram_ratio_takes_numbers_of_at_least_one() {
        assert_eq!(parse_nvm_dram_ratio("4"), Ok(4.0));
        assert_eq!(parse_nvm_dram_ratio(" 1 "), Ok(1.0));
        assert_eq!(parse_nvm_dram_ratio("2.5"), Ok(2.5));
        for (text, says) in [
            ("0.5", "at least 1"),
            ("0", "at least 1"),
            ("-4", "at least 1"),
            ("inf", "at least 1"),
            ("NaN", "at least 1"),
            ("four", "expected a number"),
            ("", "expected a number"),
        ] {
            let error = parse_nvm_dram_ratio(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn nvm_dram_ratio_is_a_bench_option() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let parsed = Cli::try_parse_from(["pmtx", "--workload", "ycsb", "--nvm-dram-ratio", "8"]).unwrap();
        assert_eq!(parsed.bench.nvm_dram_ratio, Some(8.0));
        let error = Cli::try_parse_from(["pmtx", "--workload", "ycsb", "--nvm-dram-ratio", "0.9"]).err().unwrap();
        assert!(error.to_string().contains("at least 1"), "{error}");
    }

    #[test]
    fn engines_come_from_the_engine_crate() {
        for kind in pmtx_engine::EngineKind::ALL {
            assert_eq!(parse_entry(kind.name()), Ok(EngineEntry(vec![EngineSpec::plain(kind)])));
        }
        let error = parse_entry("nope").unwrap_err();
        assert!(error.contains("valid engines") && error.contains("silo"), "{error}");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_threads("4"), Ok(4));
        for bad in ["0", "-1", "x", "1025", ""] {
            assert!(parse_threads(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_warmup("0"), Ok(Duration::ZERO));
        assert_eq!(parse_warmup("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_warmup("-1").is_err());
        assert_eq!(parse_transactions("2000"), Ok(2000));
        for bad in ["0", "-1", "1.5", "x"] {
            assert!(parse_transactions(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_checkpoint("0"), Ok(0.0));
        assert!(parse_checkpoint("nan").is_err());
        assert!(parse_probability("1.5").is_err());
        assert!(parse_theta("-0.1").is_err());
        assert_eq!(parse_workload("TPC-C"), Ok("tpcc".to_string()));
        assert_eq!(parse_tpcc_mix("new_order=50,payment=50"), Ok(TpccMix([50, 50, 0, 0, 0])));
        for bad in ["", "new_order=0", "payment=-1", "nope=1", "payment=1,payment=2", "new_order"] {
            let error = parse_tpcc_mix(bad).unwrap_err();
            assert!(error.contains("invalid TPC-C mix") && error.contains("stock_level"), "{bad:?}: {error}");
        }
        assert!(parse_workload("tpch").unwrap_err().contains("valid workloads"));
        assert_eq!(parse_micro_entries("2000"), Ok(2000));
        assert_eq!(parse_entry_size("128"), Ok(128));
        assert_eq!(parse_insert_percent("50%"), Ok(50));
        for bad in ["1", "-3", "x", ""] {
            assert!(parse_micro_entries(bad).unwrap_err().contains("from 2"), "{bad:?}");
        }
        for bad in ["15", "0", "x"] {
            assert!(parse_entry_size(bad).unwrap_err().contains("from 16"), "{bad:?}");
        }
        for bad in ["101", "-1", "x"] {
            assert!(parse_insert_percent(bad).unwrap_err().contains("0 to 100"), "{bad:?}");
        }
    }

    #[test]
    fn micro_workloads_and_their_flags() {
        for name in pmtx_workloads::micro::NAMES {
            assert_eq!(parse_workload(&name.to_ascii_uppercase()), Ok(name.to_string()));
        }
        let args = WorkloadArgs {
            micro_entries: Some(2000),
            entry_size: Some(64),
            insert_percent: Some(20),
            ..Default::default()
        };
        assert!(args.validate("rbtree").is_ok());
        let options = args.options();
        assert_eq!((options.micro_entries, options.entry_size, options.insert_percent), (2000, 64, 20));
        let error = args.validate("ycsb").unwrap_err().to_string();
        assert!(error.contains("--micro-entries applies to the micro workloads"), "{error}");
        let error = WorkloadArgs { queue_length: Some(5), ..Default::default() }.validate("sp3-queue").unwrap_err();
        assert!(error.to_string().contains("--queue-length applies to --workload queue only"), "{error}");
    }

    #[test]
    fn long_threads_need_a_ycsb_pair_and_a_short_thread() {
        let args = |variant: &str, long_threads: usize| WorkloadArgs {
            ycsb: Some(parse_ycsb(variant).unwrap()),
            long_threads: Some(long_threads),
            ..Default::default()
        };
        for variant in ["srq", "LRQ", "sru", "lru"] {
            let given = args(variant, 2);
            given.validate("ycsb").unwrap();
            given.validate_threads(&[3, 8]).unwrap();
            assert_eq!(given.options().long_threads, 2);
            let error = given.validate_threads(&[3, 1, 2]).unwrap_err().to_string();
            assert!(error.contains("--long-threads 2") && error.contains("at --threads 1,2:"), "{error}");
            let error = given.validate("smallbank").unwrap_err().to_string();
            assert!(error.contains("--long-threads applies to --workload ycsb"), "{error}");
        }
        for variant in ["A", "e", "ro", "wh"] {
            let error = args(variant, 1).validate("ycsb").unwrap_err().to_string();
            assert!(error.contains("needs --ycsb srq, lrq, sru or lru"), "{variant}: {error}");
        }
        // Zen+'s long transactions: a kind beside a point variant.
        use pmtx_workloads::ycsb::LongKind;
        let zen_plus = WorkloadArgs {
            long_kind: Some(LongKind::Update),
            long_rows: Some(5000),
            long_every: Some(100),
            long_disjoint: true,
            ..args("ba", 1)
        };
        zen_plus.validate("ycsb").unwrap();
        zen_plus.validate_threads(&[1, 2]).expect("a long thread with short transactions runs alone");
        let options = zen_plus.options();
        assert_eq!(
            (options.long_kind, options.long_rows, options.long_every, options.long_disjoint),
            (Some(LongKind::Update), Some(5000), 100, true)
        );
        for (given, needle) in [
            (WorkloadArgs { long_kind: Some(LongKind::Scan), ..args("srq", 1) }, "pairs its own long transaction"),
            (WorkloadArgs { long_kind: Some(LongKind::Scan), ..args("ba", 0) }, "with --long-threads only"),
            (WorkloadArgs { long_every: Some(3), ..args("lru", 1) }, "--long-every needs --long-kind"),
            (
                WorkloadArgs { long_kind: Some(LongKind::Scan), long_disjoint: true, ..args("ba", 1) },
                "--long-disjoint applies to --long-kind update",
            ),
        ] {
            let error = given.validate("ycsb").unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        }
        assert!(parse_long_kind("merge").unwrap_err().contains("kinds: scan, update"));
        // Unset, or 0: today's workload on any thread count.
        let off = args("A", 0);
        off.validate("tpcc").unwrap();
        off.validate_threads(&[1]).unwrap();
        assert_eq!(off.options().long_threads, 0);
        assert_eq!(WorkloadArgs::default().options().long_threads, 0);
        assert_eq!(parse_long_threads("3"), Ok(3));
        for bad in ["-1", "1024", "x", ""] {
            assert!(parse_long_threads(bad).unwrap_err().contains("from 0 to 1023"), "{bad:?}");
        }
    }
}
