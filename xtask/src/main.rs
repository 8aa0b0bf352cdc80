//! pmtx's development tasks (`cargo xtask ...`).
//!
//! `cargo xtask install-capi --prefix DIR`: the C interface's libraries,
//! headers and pkg-config file under `DIR` (see `install_capi`).
//!
//! `cargo xtask instructions`: the instruction yardstick. It runs
//! `pmtx bench` under callgrind at one thread for a fixed number of
//! transactions (`--transactions`, so every run does the same work) and
//! prints, per engine and workload, the instructions per committed
//! transaction: in all, per transaction type and per part of a
//! transaction, with callgrind's simulated cache misses as a memory proxy.
//! Instructions do not depend on how fast the machine runs, with one
//! exception: work driven by wall-clock epochs (reclamation, group commit)
//! grows per transaction when a busy machine slows the run. With the
//! default `--epoch-ms 2000` two runs of one binary on an otherwise idle
//! machine agree within 0.1 % (`--repeat 2` shows it); a wall clock here
//! spreads 1.3-1.5x. Compare binaries counted under the same load (for
//! example both at once, one per core: callgrind runs on one).

mod callgrind;
mod components;
mod install_capi;

use callgrind::Profile;
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "pmtx's development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Count instructions per committed transaction under callgrind.
    Instructions(InstructionArgs),
    /// Build the C interface and install its libraries, headers and
    /// pkg-config file under a prefix.
    InstallCapi(install_capi::InstallArgs),
}

/// The workloads the yardstick knows, with the bench flags of each.
const WORKLOADS: [(&str, &[&str], &str); 4] = [
    ("tpcc", &["--workload", "tpcc"], "TPC-C, 1 warehouse, the standard mix"),
    (
        "tpcc-np",
        &["--workload", "tpcc", "--tpcc-mix", "new_order=50,payment=50"],
        "TPC-C, 1 warehouse, NewOrder and Payment 50/50",
    ),
    ("ycsb", &["--workload", "ycsb"], "YCSB A: 100K rows of 1 KB, 16 ops, 50 % reads, 50 % updates, theta 0.99"),
    ("smallbank", &["--workload", "smallbank"], "Smallbank, the standard mix"),
];

#[derive(clap::Args)]
struct InstructionArgs {
    /// Engines, comma-separated (any `pmtx bench --engine` entry).
    #[arg(long, value_delimiter = ',', default_value = "zen,dbxn,silo,group-commit,sp3")]
    engine: Vec<String>,
    /// Workloads, comma-separated: tpcc, tpcc-np (NewOrder+Payment 50/50),
    /// ycsb, smallbank.
    #[arg(long, value_delimiter = ',', default_value = "tpcc,tpcc-np,ycsb,smallbank")]
    workload: Vec<String>,
    /// Measured transactions per run.
    #[arg(long, default_value_t = 2000)]
    transactions: u64,
    /// Unmeasured transactions before them (warm caches, allocator, Met-Cache).
    #[arg(long, default_value_t = 500)]
    warmup_transactions: u64,
    /// Epoch length given to `pmtx bench --epoch-ms`. Under callgrind a
    /// run is about 50 times slower, so the bench's 40 ms would end an epoch
    /// every few transactions: epoch-driven work (reclamation horizons,
    /// group commit) would grow per transaction and vary with the machine's
    /// load. 2000 ms keeps about a native run's transactions per epoch, and
    /// two runs then agree within 0.1 %.
    #[arg(long, default_value_t = 2000)]
    epoch_ms: u64,
    /// Leave out callgrind's cache simulation (about twice as fast; no
    /// miss counts).
    #[arg(long)]
    no_cache_sim: bool,
    /// Run each combination this many times and print how far the runs'
    /// instructions per transaction lie apart.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// The pmtx binary to count (default: build target/release/pmtx).
    #[arg(long)]
    pmtx: Option<PathBuf>,
    /// Where the callgrind and bench outputs go.
    #[arg(long, default_value = "target/instructions")]
    out: PathBuf,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// An earlier `--json` file: print each figure beside it, with the ratio.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// More `pmtx bench` flags, after `--` (e.g. `-- --theta 0`).
    #[arg(last = true)]
    bench_args: Vec<String>,
}

/// One (engine, workload) count.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Count {
    engine: String,
    workload: String,
    committed: u64,
    /// Instructions per committed transaction.
    instructions: f64,
    /// Every run's instructions per committed transaction (`--repeat`).
    runs: Vec<f64>,
    /// Per transaction type: instructions of the type's client function
    /// (its retries included) per committed transaction of the type.
    per_type: BTreeMap<String, f64>,
    /// Per part, instructions per committed transaction.
    components: BTreeMap<String, f64>,
    /// Simulated misses and data accesses per committed transaction
    /// (I1mr, ILmr, LLmiss = DLmr + DLmw, Dr, Dw), empty without the cache
    /// simulation.
    memory: BTreeMap<String, f64>,
    /// The machine's 1-minute load average when the run ended (a busy
    /// machine slows the run, so more epochs pass per transaction and
    /// epoch-driven work such as reclamation grows).
    #[serde(default)]
    load_average: Option<f64>,
}

/// The 1-minute load average (`/proc/loadavg`), where there is one.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

#[derive(Serialize, Deserialize)]
struct Results {
    transactions: u64,
    warmup_transactions: u64,
    epoch_ms: u64,
    pmtx: String,
    git_revision: String,
    counts: Vec<Count>,
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Instructions(args) => instructions(&args),
        Task::InstallCapi(args) => install_capi::install(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn instructions(args: &InstructionArgs) -> Result<(), String> {
    for workload in &args.workload {
        if !WORKLOADS.iter().any(|(name, _, _)| name == workload) {
            let names: Vec<_> = WORKLOADS.iter().map(|(name, _, _)| *name).collect();
            return Err(format!("unknown workload {workload:?}: one of {}", names.join(", ")));
        }
    }
    if args.transactions == 0 || args.repeat == 0 {
        return Err("--transactions and --repeat must be at least 1".into());
    }
    let baseline: Option<Results> = match &args.baseline {
        Some(path) => Some(
            serde_json::from_str(&std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?)
                .map_err(|e| format!("{}: not a results file of this command: {e}", path.display()))?,
        ),
        None => None,
    };
    let valgrind = Command::new("valgrind").arg("--version").output();
    if !valgrind.is_ok_and(|output| output.status.success()) {
        return Err("valgrind is not installed: install Debian's valgrind (`apt-get install valgrind`)".into());
    }
    let pmtx = match &args.pmtx {
        Some(path) => path.clone(),
        None => {
            eprintln!("building target/release/pmtx ...");
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "--release", "--locked", "-p", "pmtx-cli"])
                .status()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !status.success() {
                return Err("cargo build failed".into());
            }
            PathBuf::from("target/release/pmtx")
        }
    };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let total = args.engine.len() * args.workload.len() * args.repeat as usize;
    let mut counts = Vec::new();
    let mut git_revision = String::from("unknown");
    let mut position = 0;
    for workload in &args.workload {
        for engine in &args.engine {
            let mut runs = Vec::new();
            for round in 0..args.repeat {
                position += 1;
                eprintln!("[{position}/{total}] {engine} on {workload} (run {} of {}) ...", round + 1, args.repeat);
                let (count, revision) = count_one(args, &pmtx, engine, workload, round)?;
                git_revision = revision;
                runs.push(count);
            }
            let mut count = runs[0].clone();
            count.runs = runs.iter().map(|run| run.instructions).collect();
            counts.push(count);
        }
    }
    let results = Results {
        transactions: args.transactions,
        warmup_transactions: args.warmup_transactions,
        epoch_ms: args.epoch_ms,
        pmtx: pmtx.display().to_string(),
        git_revision,
        counts,
    };
    print!("{}", render(&results, baseline.as_ref()));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs one bench under callgrind and reads its counts.
fn count_one(
    args: &InstructionArgs,
    pmtx: &Path,
    engine: &str,
    workload: &str,
    round: u32,
) -> Result<(Count, String), String> {
    let flags = WORKLOADS.iter().find(|(name, _, _)| *name == workload).map(|(_, flags, _)| *flags).unwrap_or(&[]);
    let stem = format!("{}-{workload}-{round}", engine.replace([':', '=', ',', '/'], "_"));
    let profile_path = args.out.join(format!("{stem}.callgrind"));
    let json_path = args.out.join(format!("{stem}.json"));
    let pool = std::env::temp_dir().join(format!("pmtx-instructions-{}.pool", std::process::id()));
    let shm = Path::new("/dev/shm");
    let pool = if shm.is_dir() { shm.join(pool.file_name().expect("a file name")) } else { pool };
    let mut command = Command::new("valgrind");
    command.args(["--tool=callgrind", "--toggle-collect=*measured_transaction*"]);
    command.arg(format!("--callgrind-out-file={}", profile_path.display()));
    if !args.no_cache_sim {
        // Fixed caches, so the counts do not depend on the host's.
        command.args(["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64"]);
    }
    command.arg(pmtx).arg("bench").args(flags);
    command.args(["--engine", engine, "--threads", "1", "--pm", "direct", "--eadr"]);
    command.arg("--transactions").arg(args.transactions.to_string());
    command.arg("--warmup-transactions").arg(args.warmup_transactions.to_string());
    command.arg("--epoch-ms").arg(args.epoch_ms.to_string());
    command.arg("--pool").arg(&pool).arg("--json").arg(&json_path);
    command.args(&args.bench_args);
    let log_path = args.out.join(format!("{stem}.log"));
    let log = std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    command.stdout(log.try_clone().map_err(|e| e.to_string())?).stderr(log);
    let status = command.status().map_err(|e| format!("cannot run valgrind: {e}"))?;
    let _ = std::fs::remove_file(&pool);
    if !status.success() {
        return Err(format!("{engine} on {workload}: pmtx bench under valgrind failed; see {}", log_path.display()));
    }
    let bench: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&json_path).map_err(|e| format!("{}: {e}", json_path.display()))?,
    )
    .map_err(|e| format!("{}: {e}", json_path.display()))?;
    let run = &bench["runs"][0];
    let committed = run["committed"].as_u64().ok_or("the bench JSON has no committed count")?;
    if committed == 0 {
        return Err(format!("{engine} on {workload}: nothing committed"));
    }
    let revision = bench["config"]["git_revision"].as_str().unwrap_or("unknown").to_string();
    let text =
        std::fs::read_to_string(&profile_path).map_err(|error| format!("{}: {error}", profile_path.display()))?;
    let profile = Profile::parse(&text).map_err(|error| format!("{}: {error}", profile_path.display()))?;
    let ir = profile.event("Ir").ok_or("the profile has no Ir event")?;
    let per = |cost: u64, count: u64| cost as f64 / count.max(1) as f64;
    let instructions = per(profile.totals[ir], committed);

    // Per type: the client's function of that type (`...Client::<type>`);
    // a workload with one type, or without such functions, has the total.
    let mut per_type = BTreeMap::new();
    if let Some(types) = run["per_type"].as_object() {
        for (name, figures) in types {
            let type_committed = figures["committed"].as_u64().unwrap_or(0);
            let suffix = format!("Client::{name}");
            let cost: u64 = profile
                .functions
                .iter()
                .filter(|(function, _)| function.starts_with("pmtx_workloads::") && function.ends_with(&suffix))
                .map(|(_, function)| function.inclusive()[ir])
                .sum();
            if cost > 0 {
                per_type.insert(name.clone(), per(cost, type_committed));
            } else if types.len() == 1 {
                per_type.insert(name.clone(), instructions);
            }
        }
    }
    let parts = components::split(&profile);
    let components = components::COMPONENTS
        .iter()
        .zip(&parts)
        .map(|(name, cost)| (name.to_string(), per(cost[ir], committed)))
        .collect();
    let mut memory = BTreeMap::new();
    let event = |name: &str| profile.event(name).map(|index| profile.totals[index]);
    if let (Some(i1), Some(il), Some(dlr), Some(dlw), Some(dr), Some(dw)) =
        (event("I1mr"), event("ILmr"), event("DLmr"), event("DLmw"), event("Dr"), event("Dw"))
    {
        memory.insert("I1mr".to_string(), per(i1, committed));
        memory.insert("ILmr".to_string(), per(il, committed));
        memory.insert("LLmiss".to_string(), per(dlr + dlw, committed));
        memory.insert("Dr".to_string(), per(dr, committed));
        memory.insert("Dw".to_string(), per(dw, committed));
    }
    let count = Count {
        engine: engine.to_string(),
        workload: workload.to_string(),
        committed,
        instructions,
        runs: vec![instructions],
        per_type,
        components,
        memory,
        load_average: load_average(),
    };
    Ok((count, revision))
}

fn thousands(value: f64) -> String {
    if value >= 9_950.0 {
        format!("{:.1}K", value / 1000.0)
    } else {
        format!("{value:.0}")
    }
}

/// The results as text tables (with the baseline's figures and ratios).
fn render(results: &Results, baseline: Option<&Results>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\ninstructions per committed transaction (callgrind, one thread, {} measured after {} warm-up \
         transactions, --pm direct --eadr --epoch-ms {}; pmtx {})",
        results.transactions, results.warmup_transactions, results.epoch_ms, results.git_revision
    );
    let before = |count: &Count| {
        baseline.and_then(|baseline| {
            baseline.counts.iter().find(|old| old.engine == count.engine && old.workload == count.workload)
        })
    };
    let cell = |now: f64, then: Option<f64>| match then {
        Some(then) if then > 0.0 => format!("{} ({} {:.2}x)", thousands(now), thousands(then), now / then),
        _ => thousands(now),
    };
    for count in &results.counts {
        let old = before(count);
        let description = WORKLOADS.iter().find(|(name, _, _)| *name == count.workload).map_or("", |w| w.2);
        let load = count.load_average.map_or(String::new(), |load| format!("; load average {load:.2} at the end"));
        let _ = writeln!(
            out,
            "\n{} on {} ({description}): {} committed{load}",
            count.engine, count.workload, count.committed
        );
        let spread = if count.runs.len() > 1 {
            let (min, max) = count.runs.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
            format!("; {} runs differ by {:.3} %", count.runs.len(), (max - min) / min * 100.0)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  total                   {}{spread}",
            cell(count.instructions, old.map(|o| o.instructions))
        );
        for (name, value) in &count.per_type {
            let then = old.and_then(|old| old.per_type.get(name).copied());
            let _ = writeln!(out, "  type {name:<18} {}", cell(*value, then));
        }
        for name in components::COMPONENTS {
            let now = count.components.get(name).copied().unwrap_or(0.0);
            let then = old.and_then(|old| old.components.get(name).copied());
            let _ = writeln!(out, "  {name:<23} {}", cell(now, then));
        }
        if !count.memory.is_empty() {
            let figures: Vec<String> = count
                .memory
                .iter()
                .map(|(name, value)| {
                    let then = old.and_then(|old| old.memory.get(name).copied());
                    format!("{name} {}", cell(*value, then))
                })
                .collect();
            let _ = writeln!(out, "  memory (simulated, per transaction): {}", figures.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(instructions: f64) -> Count {
        Count {
            engine: "zen".into(),
            workload: "tpcc".into(),
            committed: 10,
            instructions,
            runs: vec![instructions, instructions * 1.001],
            per_type: [("new_order".to_string(), instructions * 1.2)].into(),
            components: [("index".to_string(), 100.0)].into(),
            memory: BTreeMap::new(),
            load_average: Some(1.0),
        }
    }

    #[test]
    fn renders_with_a_baseline() {
        let results = |value| Results {
            transactions: 10,
            warmup_transactions: 0,
            epoch_ms: 2000,
            pmtx: "pmtx".into(),
            git_revision: "abc".into(),
            counts: vec![count(value)],
        };
        let text = render(&results(50_000.0), Some(&results(100_000.0)));
        assert!(text.contains("total                   50.0K (100.0K 0.50x); 2 runs differ by 0.100 %"), "{text}");
        assert!(text.contains("type new_order          60.0K (120.0K 0.50x)"), "{text}");
    }
}
