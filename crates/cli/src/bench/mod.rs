//! `pmtx bench`: runs a workload on one or more engines and thread counts
//! and reports throughput, durable-commit latency, PM work and aborts.
//!
//! Every (engine, threads) combination gets a fresh pool and database, the
//! same data and the same client seed: load, warm up, measure, wait for the
//! outstanding acknowledgements, check consistency, close. See
//! [`runner`] for exactly what is counted.
//!
//! Output: a text report on stdout (progress on stderr), optionally the
//! JSON document of [`report::Report`] (`--json`) and a CSV row per run
//! (`--csv`). A failed consistency check fails the command (exit 1) after
//! all runs and files are done.
//!
//! `--engine` entries may carry engine options (`dbxn:nt=off`, see
//! [`spec`]); `--recover` crashes each durable engine's database after its
//! measured phase and times the recovery (see [`runner`]).
//!
//! `--route-by-partition` (ycsb) routes each transaction through the
//! engine's transaction assignment (see [`route`]).
//!
//! `--pmdk` (micro workloads only) also runs the PMDK (libpmemobj) baseline
//! of the workload at each thread count after the engines (see [`pmdk`]),
//! reported as "pmdk" rows, `pmdk_runs` in the JSON, and the ratio of each
//! engine's throughput to PMDK's.

pub(crate) mod args;
pub(crate) mod cpu;
pub(crate) mod memory;
pub(crate) mod pmdk;
mod replicated;
pub mod report;
pub(crate) mod route;
pub(crate) mod runner;
pub(crate) mod spec;

pub use args::BenchArgs;

use crate::units::format_bytes;
use crate::CliError;
use pmtx_engine::engine_catalog::Isolation;
use pmtx_pm::BackendKind;
use report::{ConfigJson, Report, WorkloadOptionsJson};
use runner::{workload_error, RunSpec};
use spec::EngineSpec;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs `pmtx bench`.
pub fn run(args: BenchArgs) -> Result<(), CliError> {
    args.validate()?;
    let (backend, pm) = args.pm.resolve()?;
    let options = args.workload_options.options();
    let workload = pmtx_workloads::by_name(&args.workload, &options).map_err(workload_error)?;
    if let Some(replicas) = args.replicas {
        let refused = [
            (args.pmdk, "--pmdk"),
            (args.recover, "--recover"),
            (args.transactions.is_some(), "--transactions"),
            (args.json.is_some(), "--json"),
            (args.csv.is_some(), "--csv"),
            (args.route_by_partition, "--route-by-partition"),
        ];
        if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
            return Err(CliError::usage(format!("--replicas does not combine with {flag}")));
        }
        return replicated::run(&args, workload.as_ref(), replicas);
    }
    let git_revision = git_revision();
    let started_unix_seconds =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);

    let pid = std::process::id();
    // Everything the PMDK runs need is checked before any run starts.
    let pmdk_plan = if args.pmdk {
        Some(pmdk::Plan::new(&pmdk::Settings {
            workload: workload.name(),
            options: &options,
            threads: &args.threads,
            duration: args.duration,
            warmup: args.warmup,
            seed: args.seed,
            pool: args.pool_options.pool.as_deref(),
            pid,
        })?)
    } else {
        None
    };

    if args.route_by_partition && !workload.routable() {
        return Err(CliError::usage(format!(
            "--route-by-partition: workload {} does not plan its transactions ahead (ycsb does)",
            workload.name()
        )));
    }
    let mut engines = args.engines();
    let dram_budget = match args.nvm_dram_ratio {
        Some(ratio) => {
            let loaded = workload.loaded_bytes().ok_or_else(|| {
                CliError::usage(format!(
                    "--nvm-dram-ratio: workload {} does not state its database size (ycsb and tpcc do)",
                    workload.name()
                ))
            })?;
            let budget = spec::apply_nvm_dram_ratio(&mut engines, ratio, loaded).map_err(CliError::usage)?;
            Some((ratio, loaded, budget))
        }
        None => None,
    };
    let pmdk_runs_total = if pmdk_plan.is_some() { args.threads.len() } else { 0 };
    let runs_total = engines.len() * args.threads.len() + pmdk_runs_total;
    let phases = match args.counted() {
        Some(counted) => format!("{} transactions measured + {} warm-up per worker", counted.measured, counted.warmup),
        None => {
            format!("{:.2} s measured + {:.2} s warm-up each", args.duration.as_secs_f64(), args.warmup.as_secs_f64())
        }
    };
    println!(
        "pmtx bench: {} on {}{} x threads {} ({} run{}, {phases}, seed {})",
        workload.name(),
        engines.iter().map(EngineSpec::label).collect::<Vec<_>>().join(","),
        if pmdk_plan.is_some() { " and the PMDK baseline" } else { "" },
        args.threads.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        runs_total,
        if runs_total == 1 { "" } else { "s" },
        args.seed
    );
    if let Some((ratio, loaded, budget)) = dram_budget {
        println!(
            "NVM/DRAM ratio P = {ratio}: DRAM budget {} = loaded database {} / P, for every engine (Met-Cache of \
             zen and wbl, DRAM tables of mmdb, volatile rows of foedus; the other mmdb rows live in the pool used \
             as volatile memory, foedus's in its snapshot pages)",
            format_bytes(budget),
            format_bytes(loaded)
        );
    }
    if args.workload_options.non_standard_tpcc() && workload.name() == "tpcc" {
        println!("note: non-standard TPC-C scale (--tpcc-items/--tpcc-customers): results are not comparable");
    }
    if let Some(note) = long_threads_note(&options) {
        println!("note: {note}");
    }
    if let Some(mix) = args.workload_options.non_standard_tpcc_mix() {
        println!("note: NON-STANDARD TPC-C mix {mix} (--tpcc-mix): results are not comparable to the standard mix");
    }
    if engines.iter().any(|engine| !engine.kind.is_durable()) {
        let names: Vec<String> =
            engines.iter().filter(|engine| !engine.kind.is_durable()).map(EngineSpec::label).collect();
        println!(
            "note: {} is not durable: it ignores the pool and the PM backend{}",
            names.join(", "),
            if args.recover { " (and --recover)" } else { "" }
        );
    }
    let with_isolation = |isolation: Isolation| -> Vec<String> {
        engines.iter().filter(|engine| engine.kind.entry().isolation() == isolation).map(EngineSpec::label).collect()
    };
    let uncontrolled = with_isolation(Isolation::Uncontrolled);
    if !uncontrolled.is_empty() {
        println!(
            "note: {} has no concurrency control (an upper bound, not serializable): its consistency checks may \
             fail, which does not fail the command",
            uncontrolled.join(", ")
        );
    }
    let snapshot = with_isolation(Isolation::Snapshot);
    if !snapshot.is_empty() {
        println!(
            "note: {} is not serializable: snapshot isolation (reads at a snapshot, write-write conflicts refused, \
             reads never validated) admits write skew, e.g. two Smallbank WriteChecks on one customer; its \
             consistency checks may fail, which does not fail the command",
            snapshot.join(", ")
        );
    }
    if engines.iter().any(|engine| engine.kind == pmtx_engine::EngineKind::Mmdb) {
        println!(
            "note: mmdb (MMDB with NVM capacity) places rows in DRAM in first-touch order up to its budget and the \
             rest in the pool used as volatile memory; a row there keeps its DRAM copy and each access adds the NVM \
             access (value read, new version and metadata written; metadata on reads only under protocols that \
             write it: not silo's); aborted attempts pay no NVM write (docs/engines/mmdb.md)"
        );
    }
    let mut noted = Vec::new();
    for engine in &engines {
        let entry = engine.kind.entry();
        if entry.deviations.is_empty() || noted.contains(&engine.kind) {
            continue;
        }
        noted.push(engine.kind);
        println!("note: {} deviates from its paper (its page in docs/engines/):", entry.name);
        for deviation in entry.deviations {
            println!("  - {deviation}");
        }
    }
    if args.recover {
        println!(
            "note: --recover: each durable run keeps running {:.2} s after its measured phase, is crashed (no clean \
             shutdown), reopened and recovered; its consistency check runs on the recovered database",
            runner::CRASH_AFTER.as_secs_f64()
        );
    }

    let mut runs = Vec::with_capacity(runs_total);
    let mut position = 0;
    for engine in &engines {
        for &threads in &args.threads {
            position += 1;
            let spec = RunSpec {
                engine,
                threads,
                duration: args.duration,
                warmup: args.warmup,
                backend,
                pm: &pm,
                pool_path: pool_path(
                    args.pool_options.pool.as_deref(),
                    engine,
                    engines.len() > 1,
                    pid,
                    args.pool_options.pool_size,
                ),
                keep_pool: args.pool_options.pool.is_some(),
                pool_size: args.pool_options.pool_size,
                epoch_interval: Duration::from_millis(args.pool_options.epoch_ms),
                checkpoint_interval: args.pool_options.checkpoint_interval(),
                prefault_chunks: args.pool_options.prefault_chunks,
                seed: args.seed,
                git_revision: &git_revision,
                position: (position, runs_total),
                recover: args.recover,
                provision: args.provision == args::Provision::Auto,
                route_by_partition: args.route_by_partition,
                counted: args.counted(),
            };
            let mut run = runner::run(workload.as_ref(), &spec)?;
            if let Some(first) = runs.first().map(|first: &report::RunJson| first.throughput_tps) {
                run.tps_ratio = if first > 0.0 { run.throughput_tps / first } else { 0.0 };
            }
            println!(
                "{} x{}: {} committed in {:.2} s = {} tps; p50 {} µs, p99 {} µs; check {}",
                run.engine,
                run.threads,
                run.committed,
                run.duration_s,
                report::format_tps(run.throughput_tps),
                report::format_us(run.latency_us.p50),
                report::format_us(run.latency_us.p99),
                if run.check_passed { "passed" } else { "FAILED" }
            );
            println!(
                "  memory after load: RSS {} ({} over the {} before), {} rows loaded: {} bytes per row",
                run.rss_after_load_bytes.map_or("n/a".to_string(), report::format_size),
                run.rss_load_delta_bytes.map_or("n/a".to_string(), |delta| format!(
                    "{}{}",
                    if delta < 0 { "-" } else { "+" },
                    report::format_size(delta.unsigned_abs())
                )),
                run.rss_before_load_bytes.map_or("n/a".to_string(), report::format_size),
                run.rows_loaded,
                run.bytes_per_loaded_row.map_or("n/a".to_string(), |bytes| format!("{bytes:.0}"))
            );
            println!("  {}", run.cpu_line());
            if engine.kind.is_durable() {
                println!("  {}", run.nvm_access.line());
            }
            if let Some(allocated) = run.pool_allocated_measured_bytes {
                let provisioned = match (&run.pool_provision_error, run.pool_provisioned_bytes) {
                    (Some(error), _) => format!("provisioning failed ({error})"),
                    (None, 0) => "not provisioned".to_string(),
                    (None, bytes) => format!("{} of free chunks provisioned before it", format_bytes(bytes)),
                };
                let outran = if run.pool_provisioned_bytes > 0 && allocated > run.pool_provisioned_bytes {
                    " (more than provisioned: the rest was populated during the phase)"
                } else {
                    ""
                };
                println!(
                    "  pool: the measured phase allocated {} of chunks; {provisioned}{outran}",
                    format_bytes(allocated)
                );
            }
            if let Some(recovery) = &run.recovery {
                println!(
                    "  crashed {:.2} s after the measured phase; recovery {:.1} ms (engine: {:.1} ms) with {} of {} \
                     in use; check on the recovered database {} ({:.0} ms)",
                    recovery.crash_after_s,
                    recovery.duration_ms,
                    recovery.engine_duration_ms,
                    format_bytes(recovery.pool_used_bytes_at_crash),
                    format_bytes(recovery.pool_size_bytes),
                    if recovery.check_passed { "passed" } else { "FAILED" },
                    recovery.check_s * 1000.0
                );
            }
            if let Some(routing) = &run.routing {
                println!("  {}", routing.line());
            }
            for failure in &run.check_failures {
                println!("  check failed: {failure}");
            }
            runs.push(run);
        }
    }

    let mut pmdk_runs = Vec::with_capacity(pmdk_runs_total);
    if let Some(plan) = &pmdk_plan {
        println!("{}", plan.note(args.recover));
        for &threads in &args.threads {
            position += 1;
            let mut run = plan.run(threads, (position, runs_total), &git_revision);
            pmdk::compare(&runs, std::slice::from_mut(&mut run));
            println!(
                "{} x{}: {} committed in {:.2} s = {} tps; check {}",
                run.engine,
                run.threads,
                run.committed,
                run.duration_s,
                report::format_tps(run.throughput_tps),
                if run.check_passed { "passed" } else { "FAILED" }
            );
            if run.check_passed {
                let outcomes: Vec<String> =
                    run.outcomes.iter().map(|(name, count)| format!("{name}={count}")).collect();
                println!(
                    "  {} items loaded in {:.2} s; per thread {}{}; check: {}",
                    run.items_loaded,
                    run.load_s,
                    run.per_thread.iter().map(u64::to_string).collect::<Vec<_>>().join(" "),
                    if outcomes.is_empty() { String::new() } else { format!("; {}", outcomes.join(", ")) },
                    run.check_summary
                );
            }
            for failure in &run.check_failures {
                println!("  check failed: {failure}");
            }
            pmdk_runs.push(run);
        }
    }

    let durability =
        runs.iter().find(|run| run.durable).or(runs.first()).map(|run| run.durability.clone()).unwrap_or_default();
    let config = ConfigJson {
        workload: workload.name().to_string(),
        workload_options: WorkloadOptionsJson::new(&options),
        engines: engines.iter().map(EngineSpec::label).collect(),
        threads: args.threads.clone(),
        duration_s: args.duration.as_secs_f64(),
        warmup_s: args.warmup.as_secs_f64(),
        backend: backend.to_string(),
        latency_model: if backend == BackendKind::Emulated { pm.latency.name } else { "none" }.to_string(),
        latency_model_description: if backend == BackendKind::Emulated { pm.latency.describe() } else { String::new() },
        persistence_domain: match pm.domain {
            pmtx_pm::PersistenceDomain::Adr => "adr",
            pmtx_pm::PersistenceDomain::Eadr => "eadr",
        }
        .to_string(),
        msync: pm.msync,
        epoch_ms: args.pool_options.epoch_ms,
        checkpoint_s: args.pool_options.checkpoint_s,
        pool_size_bytes: args.pool_options.pool_size,
        pool: args.pool_options.pool.as_ref().map(|path| path.display().to_string()),
        seed: args.seed,
        recover: args.recover,
        nvm_dram_ratio: dram_budget.map(|(ratio, _, _)| ratio),
        loaded_database_bytes: dram_budget.map(|(_, loaded, _)| loaded),
        dram_budget_bytes: dram_budget.map(|(_, _, budget)| budget),
        route_by_partition: args.route_by_partition,
        transactions: args.transactions,
        warmup_transactions: args.transactions.map(|_| args.warmup_transactions.unwrap_or(0)),
        git_revision,
        pmtx_version: env!("CARGO_PKG_VERSION").to_string(),
        durability,
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        started_unix_seconds,
    };
    let report = Report { config, runs, pmdk_runs };
    print_report(&report, workload.transaction_types(), &args);

    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|error| CliError::runtime(format!("{}: cannot write JSON: {error}", path.display())))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, report::csv(&report))
            .map_err(|error| CliError::runtime(format!("{}: cannot write CSV: {error}", path.display())))?;
        println!("wrote {}", path.display());
    }

    let label = |engine: &str, threads: usize| format!("{engine} x{threads}");
    // A check of an engine without concurrency control or under snapshot
    // isolation may fail by design (the notes above say so); every other
    // failure fails the command.
    let serializable = |run: &&report::RunJson| {
        pmtx_engine::EngineKind::parse(&run.engine_name).is_none_or(|kind| kind.is_serializable())
    };
    let mut failed: Vec<String> = report
        .runs
        .iter()
        .filter(|run| !run.check_passed)
        .filter(serializable)
        .map(|run| label(&run.engine, run.threads))
        .collect();
    let mut pmdk_failed = Vec::new();
    for run in report.pmdk_runs.iter().filter(|run| !run.check_passed) {
        if run.check_failures.iter().any(|failure| failure.starts_with(pmdk::RUN_FAILED)) {
            pmdk_failed.push(label(&run.engine, run.threads));
        } else {
            failed.push(label(&run.engine, run.threads));
        }
    }
    let mut messages = Vec::new();
    if !failed.is_empty() {
        messages.push(format!("consistency check failed after run(s): {}", failed.join(", ")));
    }
    if !pmdk_failed.is_empty() {
        messages.push(format!("PMDK run(s) failed: {} (see \"check failed\" above)", pmdk_failed.join(", ")));
    }
    if messages.is_empty() {
        Ok(())
    } else {
        Err(CliError::runtime(messages.join("; ")))
    }
}

fn print_report(report: &Report, type_order: &[&str], args: &BenchArgs) {
    let c = &report.config;
    println!();
    println!("workload:      {} ({})", c.workload, workload_summary(report));
    println!("engines:       {}", c.engines.join(", "));
    println!(
        "backend:       {} | latency model: {} | domain: {} | msync: {}",
        c.backend,
        c.latency_model,
        c.persistence_domain,
        if c.msync { "every fence" } else { "off" }
    );
    if !c.latency_model_description.is_empty() {
        println!("latency model: {}", c.latency_model_description);
    }
    println!(
        "threads:       {} | {:.2} s measured after {:.2} s warm-up | epoch {} ms | checkpoints: {}",
        c.threads.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
        c.duration_s,
        c.warmup_s,
        c.epoch_ms,
        if c.checkpoint_s > 0.0 { format!("every {} s", c.checkpoint_s) } else { "off".to_string() }
    );
    println!(
        "pool:          {}, {} (durable engines only)",
        match &args.pool_options.pool {
            Some(path) => format!("{} (fresh for each run, kept afterwards)", path.display()),
            None => format!(
                "fresh temporary file in {} per run, deleted afterwards",
                pmtx_pm::temporary_pool_dir(c.pool_size_bytes).display()
            ),
        },
        format_bytes(c.pool_size_bytes)
    );
    if let Some(run) = report.pmdk_runs.first() {
        println!(
            "pmdk pool:     {}, {} (fresh for each run, removed afterwards) | PMEM_IS_PMEM_FORCE=1: {}",
            run.pool,
            format_bytes(run.pool_size_bytes),
            if run.pmem_forced { "set" } else { "not set" }
        );
    }
    println!(
        "seed:          {} | git revision: {} | pmtx {} | {} cpus",
        c.seed, c.git_revision, c.pmtx_version, c.cpus
    );
    println!("durability:    {}", c.durability);
    let mut shown: Vec<&str> = Vec::new();
    for run in report.runs.iter().filter(|run| run.durability != c.durability) {
        if !shown.contains(&run.engine.as_str()) {
            shown.push(&run.engine);
            println!("               {}: {}", run.engine, run.durability);
        }
    }
    println!();
    print!("{}", report::results_table(&report.runs, &report.pmdk_runs));
    println!("latency: start of the first attempt to the durable acknowledgement; PM counters per committed");
    println!("transaction, including the engine's epoch and checkpoint threads (group commit flushes there).");
    if !report.pmdk_runs.is_empty() {
        println!("pmdk: the PMDK (libpmemobj) baseline; it measures no latency, aborts or PM counters (\"-\").");
        println!();
        println!("engine throughput over PMDK's, at the same thread count:");
        print!("{}", report::pmdk_ratio_lines(&report.runs, &report.pmdk_runs));
    }
    println!();
    println!("per transaction type (tps: commits of the type per second of the measured phase):");
    print!("{}", report::per_type_table(&report.runs, &report.pmdk_runs, type_order));
    println!();
    println!("memory (process resident set from /proc/self/statm, before and after the load; durable engines: pool pages included):");
    print!("{}", report::memory_table(&report.runs));
    println!();
    println!("aborts:");
    print!("{}", report::abort_lines(&report.runs));
    let counters = report::engine_counter_lines(&report.runs);
    if !counters.is_empty() {
        println!();
        println!("engine counters (measured phase):");
        print!("{counters}");
    }
    let htm = report::htm_lines(&report.runs);
    if !htm.is_empty() {
        println!();
        println!("HTM regions (measured phase):");
        print!("{htm}");
    }
    let caches = report::cache_lines(&report.runs);
    if !caches.is_empty() {
        println!();
        println!("DRAM cache over PM (since open, load included):");
        print!("{caches}");
    }
    let log_files = report::log_file_lines(&report.runs);
    if !log_files.is_empty() {
        println!();
        println!("redo log on files (measured phase; the latency above includes each commit's wait for its sync):");
        print!("{log_files}");
    }
    if report.runs.iter().any(|run| run.recovery.is_some()) {
        println!();
        println!("recovery (crash after the measured phase, reopen with the same engine and options):");
        print!("{}", report::recovery_table(&report.runs));
        println!("  recovery ms: pool open + engine open until it accepts transactions; engine ms: as the engine");
        println!("  reports it. ckpt rows, log scanned/applied: the log engines (group-commit, the DBXN and SP^3");
        println!("  families, phytm's, mmdb); heap slots/tuples/discarded: the heap engines (zen, wbl).");
    }
    println!();
    let passed = report.runs.iter().filter(|run| run.check_passed).count();
    println!(
        "consistency checks: {passed} of {} runs passed{}{}",
        report.runs.len(),
        if c.recover { " (durable runs: checked after recovery)" } else { "" },
        if report.pmdk_runs.is_empty() {
            String::new()
        } else {
            format!(
                "; PMDK: {} of {} passed",
                report.pmdk_runs.iter().filter(|run| run.check_passed).count(),
                report.pmdk_runs.len()
            )
        }
    );
}

fn workload_summary(report: &Report) -> String {
    let o = &report.config.workload_options;
    match report.config.workload.as_str() {
        "tpcc" => format!(
            "{} warehouse{}, {} items, {} customers per district, {}",
            o.warehouses,
            if o.warehouses == 1 { "" } else { "s" },
            o.tpcc_items,
            o.tpcc_customers_per_district,
            if o.tpcc_mix_standard {
                "standard mix".to_string()
            } else {
                let mix: Vec<String> = pmtx_workloads::tpcc::TRANSACTION_TYPES
                    .iter()
                    .filter_map(|name| o.tpcc_mix.get(*name).map(|weight| format!("{name}={weight}")))
                    .collect();
                format!("NON-STANDARD mix {}", mix.join(","))
            }
        ),
        "smallbank" => format!(
            "{} accounts, {}",
            o.accounts,
            match o.hotspot {
                Some(hot) => format!("{hot} hot accounts at p={}", o.hotspot_probability),
                None => "uniform access".to_string(),
            }
        ),
        "ycsb" => format!(
            "variant {}, {} records of {}x{} B, theta {}, {} ops/txn{}",
            o.ycsb,
            o.records,
            o.fields,
            o.field_size,
            o.theta,
            o.ops_per_txn,
            if o.long_threads > 0 {
                format!(", long transactions on {} worker(s)", o.long_threads)
            } else {
                String::new()
            }
        ),
        "queue" => queue_summary(o),
        "sps" => {
            format!("{} entries of {} B, theta {}, one swap per transaction", o.micro_entries, o.entry_size, o.theta)
        }
        "sp3-queue" => format!(
            "one shared queue, {} items of {} B loaded, {}% enqueues",
            o.micro_entries.min(pmtx_workloads::micro::queue::LOAD_LIMIT),
            o.entry_size,
            o.insert_percent
        ),
        "hash" | "btree" | "rbtree" => format!(
            "{} entries of {} B loaded, keys 0..{} at theta {}, {}% inserts, one operation per transaction",
            o.micro_entries,
            o.entry_size,
            o.micro_entries.saturating_mul(2),
            o.theta,
            o.insert_percent
        ),
        _ => String::new(),
    }
}

/// What `--long-threads` makes each worker run (None when it is off).
fn long_threads_note(options: &pmtx_workloads::WorkloadOptions) -> Option<String> {
    if options.long_threads == 0 {
        return None;
    }
    let n = options.long_threads;
    let workers = if n == 1 { "worker 0 runs".to_string() } else { format!("workers 0 to {} run", n - 1) };
    if let Some(kind) = options.long_kind {
        let rows = report::long_rows(options);
        let every = match options.long_every {
            0 => "only long transactions".to_string(),
            every => format!("{every} {} transactions, then a long one, in turn", options.ycsb),
        };
        return Some(format!(
            "--long-threads {n} --long-kind {kind}: {workers} {every}: a long {kind} of {rows} consecutive rows{} \
             (type \"long\"); the other workers run {} (type \"short\"){}; the per-type table gives each class's \
             throughput",
            if kind == pmtx_workloads::ycsb::LongKind::Scan { ", read-only" } else { "" },
            options.ycsb,
            if options.long_disjoint {
                ", on the lower half of the table (the long updates own the upper half)"
            } else {
                ""
            }
        ));
    }
    let (short, long) = options.ycsb.short_long_pair()?;
    let rows = |variant| {
        if variant == short {
            pmtx_workloads::ycsb::SHORT_RANGE_ROWS
        } else {
            report::long_rows(options)
        }
    };
    Some(format!(
        "--long-threads {n}: worker{} {} run{} {long} ({} rows per transaction, type \"long\"), the others {short} \
         ({} rows, type \"short\"); the per-type table gives each class's throughput",
        if n == 1 { "" } else { "s" },
        if n == 1 { "0".to_string() } else { format!("0 to {}", n - 1) },
        if n == 1 { "s" } else { "" },
        rows(long),
        rows(short)
    ))
}

/// The queue workload's options in one line (also used by `soak`).
pub(crate) fn queue_summary(o: &WorkloadOptionsJson) -> String {
    format!(
        "{} items of {} B per partition (one per thread), peeks scan {} rows, mix {}",
        o.queue_length, o.field_size, o.queue_scan, o.queue_mix
    )
}

/// The pool file of a run: `--pool` (with "-<engine label>" before the
/// extension when several engines run), else a temporary file of
/// `pool_size` bytes (in memory when there is room:
/// [`pmtx_pm::temporary_pool_dir`]). The label is made file-name safe
/// (`dbxn:nt=off` becomes `dbxn.nt-off`).
fn pool_path(pool: Option<&Path>, engine: &EngineSpec, several_engines: bool, pid: u32, pool_size: u64) -> PathBuf {
    let name = engine.file_label();
    match pool {
        None => pmtx_pm::temporary_pool_dir(pool_size).join(format!("pmtx-bench-{name}-{pid}.pool")),
        Some(path) if !several_engines => path.to_path_buf(),
        Some(path) => {
            let stem = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
            let name = match path.extension() {
                Some(extension) => format!("{stem}-{name}.{}", extension.to_string_lossy()),
                None => format!("{stem}-{name}"),
            };
            path.with_file_name(name)
        }
    }
}

/// The git revision the binary was built from (`build.rs`): `-dirty` when
/// the checkout had uncommitted changes then, `unknown` without git.
pub(crate) fn git_revision() -> String {
    env!("PMTX_GIT_REVISION").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_paths() {
        let silo = &EngineSpec::plain(pmtx_engine::EngineKind::Silo);
        assert_eq!(pool_path(Some(Path::new("/x/b.pool")), silo, false, 1, 1 << 20), PathBuf::from("/x/b.pool"));
        assert_eq!(pool_path(Some(Path::new("/x/b.pool")), silo, true, 1, 1 << 20), PathBuf::from("/x/b-silo.pool"));
        assert_eq!(pool_path(Some(Path::new("/x/b")), silo, true, 1, 1 << 20), PathBuf::from("/x/b-silo"));
        let temp = pool_path(None, &EngineSpec::plain(pmtx_engine::EngineKind::GroupCommit), true, 7, 1 << 20);
        assert_eq!(temp.parent(), Some(pmtx_pm::temporary_pool_dir(1 << 20).as_path()));
        assert!(temp.ends_with("pmtx-bench-group-commit-7.pool"), "{}", temp.display());
        let options = spec::parse_spec("dbxn:nt=off:align256=off").unwrap();
        let kept = pool_path(Some(Path::new("/x/b.pool")), &options, true, 1, 1 << 20);
        assert_eq!(kept, PathBuf::from("/x/b-dbxn.nt-off.align256-off.pool"));
        let temp = pool_path(None, &options, true, 7, 1 << 20);
        assert!(temp.ends_with("pmtx-bench-dbxn.nt-off.align256-off-7.pool"), "{}", temp.display());
    }
}
