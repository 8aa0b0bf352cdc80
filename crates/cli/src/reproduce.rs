//! `pmtx reproduce NAME`: a figure of one of the papers, scaled to this
//! machine. Each figure is one or more `pmtx bench` runs (the engines,
//! workload and parameters of the paper's experiment) and the paper's
//! claims about it; the command runs the benches, then prints each claim
//! beside our figure, its interval and a verdict, and writes the bench
//! reports, a plot of each, the verdicts as JSON (`verdicts.json`) and what
//! the results page says of the run (`run.json`: command, start, budget,
//! machine); `--report FILE` writes that page too (`pmtx report`).
//!
//! A claim is a ratio between two runs (throughput, median latency or
//! recovery time of an engine at a thread count, or a count per
//! transaction such as NVM bytes written), or one run's own count, with
//! the paper's value or range and where in the paper it stands
//! (`source`). A figure runs in rounds (`--rounds`, at least
//! [`MIN_ROUNDS`]): each round runs every bench of the figure once, and
//! each bench runs all its engines one after the other, so drift of the
//! machine over the minutes of a figure reaches every engine in every
//! round alike. Each round's reports are kept
//! (`<out>/<figure>-<bench>-round<r>.json`); a claim's ratio is computed
//! per round from that round's reports and reported as the median, the
//! order-statistics interval of the median and the minimum and maximum
//! over the rounds. With `--budget`, the time the minimum rounds leave
//! goes to more rounds of the figures with a claim more rounds could
//! decide ([`verdict::next_figure`]), each claim reporting the rounds it
//! got. The verdict rule (reproduced, direction, inconclusive, not
//! reproduced) and the interval are in [`verdict`]; **not run** when an
//! engine it needs is not built or a run gave no value, **failed** when a
//! bench of the figure failed. Each claim carries the reason its figure can
//! differ here (two cores instead of 10-16 threads, no RTM, the emulated
//! medium).

mod more_figures;
pub mod run_meta;
pub(crate) mod verdict;

use crate::bench::report::{Report, RunJson};
use crate::bench::BenchArgs;
use crate::plot::PlotArgs;
use crate::CliError;
use clap::{Args, Parser};
use run_meta::ClaimRecord;
use std::path::{Path, PathBuf};
use std::time::Instant;
use verdict::{next_figure, outlook, verdict, verdict_absolute, FigureState, Outlook, Spread, Verdict, MIN_ROUNDS};

/// Measured seconds of every run with `--smoke`.
const SMOKE_DURATION_S: f64 = 0.3;
/// Warm-up seconds of every run with `--smoke`.
const SMOKE_WARMUP_S: f64 = 0.2;
/// Warm-up seconds of every other run (the bench's default; a figure may
/// pass its own `--warmup`).
#[cfg(test)]
const WARMUP_S: f64 = 1.0;
/// Measured seconds of a run: tens of thousands of transactions and more
/// at every engine's rate here, and short enough for three rounds of every
/// figure within 30 minutes (most of a run's time is its load and check;
/// 25 minutes before Mnemosyne, Pisces and FOEDUS joined the figures).
const DURATION_S: f64 = 1.5;
/// Seconds a smoke run spends loading and checking its tiny data (for the
/// estimate printed at the start).
const SMOKE_OVERHEAD_S: f64 = 1.0;

/// `pmtx reproduce`.
#[derive(Args, Debug)]
pub struct ReproduceArgs {
    /// Figures to reproduce (see --list), or `all` for every figure whose
    /// engines are built.
    #[arg(required_unless_present = "list")]
    names: Vec<String>,
    /// List the figures, what each runs and what it needs.
    #[arg(long)]
    list: bool,
    /// Directory for the bench reports (one per bench and round), plots
    /// and verdicts.
    #[arg(long, default_value = "pmtx-reproduce")]
    out: PathBuf,
    /// Measured seconds per bench run [default: each figure's own].
    #[arg(long, value_parser = crate::units::parse_seconds)]
    duration: Option<std::time::Duration>,
    /// Rounds: each runs every bench of the figure once; a claim reports
    /// the median ratio over the rounds and its spread (min-max), and the
    /// verdict weighs the paper's effect against that spread. At least 3,
    /// except with --smoke.
    #[arg(long, default_value_t = MIN_ROUNDS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
    rounds: usize,
    /// Tiny data and 0.3 s runs: checks that a figure runs, not what it
    /// shows (for tests); accepts --rounds below 3. Every verdict is then
    /// marked `"smoke": true`.
    #[arg(long)]
    smoke: bool,
    /// Wall-clock budget of the whole command, e.g. 60m, 90s or 1h: after
    /// --rounds rounds of every figure, the rest goes, one round at a
    /// time, to the figure whose inconclusive claims are nearest to being
    /// decided per second of its round (projected from their rounds'
    /// spread), up to 30 rounds a figure; a figure stops as soon as none
    /// of its claims is left that more rounds could decide. Without it
    /// every figure runs --rounds rounds.
    #[arg(long, value_parser = crate::units::parse_duration)]
    budget: Option<std::time::Duration>,
    /// Also write the results page (`pmtx report`) of the output directory
    /// to this Markdown file, its charts in a folder beside it.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

/// Which run of a figure's bench a claim reads.
#[derive(Clone, Copy, Debug)]
struct Pick {
    /// Index of the bench in the figure.
    bench: usize,
    /// The run's engine label (the `--engine` entry).
    engine: &'static str,
    /// Its thread count: the largest of the bench (`None`) or this one.
    threads: Option<usize>,
}

/// What a claim compares.
#[derive(Clone, Copy, Debug)]
enum Measure {
    /// Committed transactions per second.
    Throughput,
    /// Median latency to the durable acknowledgement.
    MedianLatency,
    /// Time from the crash until the database takes transactions.
    Recovery,
    /// Committed short transactions per second: with `--long-threads`, the
    /// `short` type's; without, every transaction is a short one.
    ShortThroughput,
    /// Aborted attempts over all attempts (`aborted / (committed +
    /// aborted)`) of the measured phase.
    AbortRatio,
    /// Cache lines flushed (`clwb`) per committed transaction.
    FlushesPerTxn,
    /// Store fences (`sfence`) per committed transaction.
    FencesPerTxn,
    /// Bytes stored into the pool (NVM writes, persisted or not) per
    /// committed transaction.
    BytesPerTxn,
    /// An engine counter of the measured phase (`engine_counters`), in all.
    EngineCounter(&'static str),
    /// `zen+`'s entries into the exclusive stage, by any trigger (α, β, γ).
    ExclusiveEntries,
}

/// The `over` of a claim about one run's own value rather than a ratio
/// (a count the paper gives, e.g. "at most one sfence per transaction"):
/// the paper's range is then the value's, and the verdict is
/// [`verdict_absolute`].
const ABSOLUTE: Pick = Pick { bench: usize::MAX, engine: "", threads: None };

/// The paper's range of a claim that gives only a direction: "more" (the
/// first engine's value is larger, no figure given).
const MORE: (f64, f64) = (1.000_001, f64::MAX);
/// ... and "less".
const LESS: (f64, f64) = (f64::MIN_POSITIVE, 0.999_999);
/// An absolute range with no upper end ("at least").
const AT_LEAST: f64 = f64::MAX;

impl Claim {
    /// Whether the claim is about one run's own value, not a ratio.
    fn is_absolute(&self) -> bool {
        self.over.engine.is_empty()
    }

    /// The paper's value or range as printed.
    fn paper_text(&self) -> String {
        let (low, high) = self.paper;
        let unit = if self.is_absolute() { "" } else { "x" };
        if (low, high) == MORE {
            "more (direction only)".to_string()
        } else if (low, high) == LESS {
            "less (direction only)".to_string()
        } else if high == AT_LEAST && low == f64::MIN_POSITIVE {
            format!("> 0{unit}")
        } else if high == AT_LEAST {
            format!(">= {low:.2}{unit}")
        } else if low == high {
            format!("{low:.2}{unit}")
        } else {
            format!("{low:.2}{unit}-{high:.2}{unit}")
        }
    }
}

/// One claim of a paper about a figure.
#[derive(Clone, Copy, Debug)]
struct Claim {
    /// What we measure, then the paper's figure for it (and the paper's
    /// setting where it differs from ours).
    text: &'static str,
    /// Where in the paper the number stands: figure and section.
    source: &'static str,
    measure: Measure,
    /// `measure(of) / measure(over)`.
    of: Pick,
    over: Pick,
    /// The paper's ratio, or its range.
    paper: (f64, f64),
    /// Why our figure can differ.
    why: &'static str,
}

/// One figure.
struct Figure {
    name: &'static str,
    paper: &'static str,
    what: &'static str,
    /// How the experiment is scaled here.
    scaled: &'static str,
    /// `pmtx bench` arguments of each bench (without --json); the smoke
    /// arguments are appended with --smoke.
    benches: Vec<Vec<&'static str>>,
    smoke: &'static [&'static str],
    /// Default measured seconds per run.
    duration_s: f64,
    /// Seconds each run spends outside its warm-up and measured phase
    /// (load, consistency check, recovery), measured on the two-core
    /// development machine; for the time estimate printed at the start.
    overhead_s: f64,
    claims: Vec<Claim>,
}

/// What the results page says of a figure: its paper's figure, what it
/// shows and how it is scaled here (None for a name no figure has).
pub(crate) fn figure_summary(name: &str) -> Option<(String, String, String)> {
    all_figures()
        .into_iter()
        .find(|figure| figure.name == name)
        .map(|figure| (figure.paper.to_string(), figure.what.to_string(), figure.scaled.to_string()))
}

/// The names of every figure, in `--list` order.
pub(crate) fn figure_names() -> Vec<&'static str> {
    all_figures().iter().map(|figure| figure.name).collect()
}

/// Every figure: the ones above and those of [`more_figures`].
fn all_figures() -> Vec<Figure> {
    let mut all = figures();
    all.extend(more_figures::figures());
    all
}

const fn at(bench: usize, engine: &'static str, threads: Option<usize>) -> Pick {
    Pick { bench, engine, threads }
}

const NO_RTM: &str = "no RTM here: every DBXN region runs its software path, so the HTM-driven gains cannot show";
/// Why `foedus` may lose less here than in the Zen paper.
const FOEDUS_HERE: &str = "pmtx's foedus models its DRAM budget as a cost (an evicted row keeps its DRAM copy and a \
                           miss pays a 4 KiB page read from the pool), writes its snapshot pages with stores into \
                           the pool rather than through msync, and runs on two cores against 16 threads";
const TWO_CORES: &str = "two cores here against the paper's 10-16 threads: contention and bandwidth effects are small";

fn figures() -> Vec<Figure> {
    let tpcc_smoke: &[&str] = &["--tpcc-items", "1000", "--tpcc-customers", "30"];
    let ycsb_smoke: &[&str] = &["--records", "20000"];
    let mut figures = vec![
        Figure {
            name: "dbxn-fig9",
            paper: "DBXN Fig. 9",
            what:
                "TPC-C throughput and latency against threads: DBX-DRAM (silo), DBX-NVM (group-commit), DBX-naive, DBXN",
            scaled: "1 warehouse, 1 and 2 threads (paper: 10 threads)",
            benches: vec![vec![
                "--workload",
                "tpcc",
                "--engine",
                "silo,group-commit,dbx-naive,dbxn",
                "--threads",
                "1,2",
            ]],
            smoke: tpcc_smoke,
            duration_s: DURATION_S,
            overhead_s: 5.0,
            claims: vec![
                Claim {
                    text: "dbxn's TPC-C throughput over silo's (DBX-DRAM), 2 threads; paper: 0.86x at 10 threads \
                           (432K vs 505K tps)",
                    source: "Fig. 9a, §4.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn", None),
                    over: at(0, "silo", None),
                    paper: (0.86, 0.86),
                    why: "the emulated medium charges every commit's persist; the paper's DRAM bound used HTM too",
                },
                Claim {
                    text: "dbxn's TPC-C throughput over group-commit's (DBX-NVM), 2 threads; paper: 2.1x at 10 \
                           threads",
                    source: "Fig. 9a, §4.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn", None),
                    over: at(0, "group-commit", None),
                    paper: (2.1, 2.1),
                    why: "DBX-NVM lost to its worker/logger-thread interaction; here workers append their own \
                          records and one epoch thread flushes them, so group commit keeps its throughput",
                },
                Claim {
                    text: "dbxn's TPC-C throughput over dbx-naive's, 2 threads; paper: 1.9x at 10 threads",
                    source: "Fig. 9a, §4.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn", None),
                    over: at(0, "dbx-naive", None),
                    paper: (1.9, 1.9),
                    why: NO_RTM,
                },
                Claim {
                    text: "group-commit's (DBX-NVM) median TPC-C latency over dbxn's, 2 threads; paper: 2,720x at \
                           10 threads",
                    source: "Fig. 9b, §4.2.2",
                    measure: Measure::MedianLatency,
                    of: at(0, "group-commit", None),
                    over: at(0, "dbxn", None),
                    paper: (2720.0, 2720.0),
                    why: "group commit waits for its 40 ms epoch in both; DBXN's own latency sets the ratio",
                },
                Claim {
                    text: "dbxn's median TPC-C latency over silo's (non-durable), 1 thread; paper: 1.1x (13 µs)",
                    source: "Fig. 9b, §4.2.2",
                    measure: Measure::MedianLatency,
                    of: at(0, "dbxn", Some(1)),
                    over: at(0, "silo", Some(1)),
                    paper: (1.1, 1.1),
                    why: "the emulated persist (171 ns and up per commit) and the log's CPU cost",
                },
                Claim {
                    text: "dbxn's median TPC-C latency over silo's (non-durable), 2 threads; paper: 1.15x at 10 \
                           threads (22 µs)",
                    source: "Fig. 9b, §4.2.2",
                    measure: Measure::MedianLatency,
                    of: at(0, "dbxn", None),
                    over: at(0, "silo", None),
                    paper: (1.15, 1.15),
                    why: TWO_CORES,
                },
            ],
        },
        Figure {
            name: "dbxn-fig11",
            paper: "DBXN Fig. 11",
            what: "the ablation: each row adds one design factor to the row before (TPC-C)",
            scaled: "1 warehouse, 2 threads (paper: 10 threads); the preset dbxn-ablation",
            benches: vec![vec!["--workload", "tpcc", "--engine", "dbxn-ablation", "--threads", "2"]],
            smoke: tpcc_smoke,
            duration_s: DURATION_S,
            overhead_s: 4.5,
            claims: vec![
                Claim {
                    text: "+durability: group-commit's (DBX-NVM) median TPC-C latency over silo's (DBX-DRAM), 2 \
                           threads; paper: 19.7 µs to more than 60 ms, 3,046x or more",
                    source: "Fig. 11, §4.4",
                    measure: Measure::MedianLatency,
                    of: at(0, "group-commit", None),
                    over: at(0, "silo", None),
                    paper: (3046.0, 3046.0),
                    why: "the epoch is 40 ms in both; the non-durable latency sets the ratio",
                },
                Claim {
                    text: "+synchronous log (NVM): dbx-naive's TPC-C throughput (nt-store, 64 and 256 alignment \
                           off) over silo's, 2 threads; paper: 256K vs 505K tps, 0.51x",
                    source: "Fig. 11, §4.4",
                    measure: Measure::Throughput,
                    of: at(0, "dbx-naive:nt=off:pad64=off:align256=off", None),
                    over: at(0, "silo", None),
                    paper: (0.51, 0.51),
                    why: "without RTM the DRAM bound runs the same software OCC as dbx-naive",
                },
                Claim {
                    text: "+parity version: dbxn's TPC-C throughput over dbx-naive's (both with nt-store, 64 and \
                           256 alignment off), 2 threads; paper: 1.35x",
                    source: "Fig. 11, §4.4",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn:nt=off:pad64=off:align256=off", None),
                    over: at(0, "dbx-naive:nt=off:pad64=off:align256=off", None),
                    paper: (1.35, 1.35),
                    why: NO_RTM,
                },
                Claim {
                    text: "+64 alignment: dbxn's TPC-C throughput with 64 B padding over +parity version's, 2 \
                           threads; paper: 1.1x",
                    source: "Fig. 11, §4.4",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn:nt=off:pad64=on:align256=off", None),
                    over: at(0, "dbxn:nt=off:pad64=off:align256=off", None),
                    paper: (1.1, 1.1),
                    why: "padding matters where the medium reads partial lines: with cached stores the lines are \
                          read for ownership anyway",
                },
                Claim {
                    text: "+nt-store: dbxn's TPC-C throughput with 64 B padding and nt-stores over +parity \
                           version's, 2 threads; paper: 1.18x",
                    source: "Fig. 11, §4.4",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn:nt=on:pad64=on:align256=off", None),
                    over: at(0, "dbxn:nt=off:pad64=off:align256=off", None),
                    paper: (1.18, 1.18),
                    why: "non-temporal stores save the ownership reads, which cost bandwidth, not latency, at two \
                          threads",
                },
                Claim {
                    text: "+256 alignment: dbxn's TPC-C throughput (all three on) over +parity version's, 2 \
                           threads; paper: 1.24x",
                    source: "Fig. 11, §4.4",
                    measure: Measure::Throughput,
                    of: at(0, "dbxn", None),
                    over: at(0, "dbxn:nt=off:pad64=off:align256=off", None),
                    paper: (1.24, 1.24),
                    why: "256 B alignment helps when many writers thrash the XPBuffer; two writers do not",
                },
            ],
        },
        Figure {
            name: "zen-fig8",
            paper: "Zen Fig. 8 (and Fig. 15)",
            what: "YCSB balanced, low skew: Zen against MMDB, WBL and FOEDUS",
            scaled: "200K rows of 1 KB, theta 0.6, P = 4 (DRAM budget 50 MB), 1 and 2 threads (paper: 256 GB, \
                     P = 4, 16 threads)",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "ba",
                "--theta",
                "0.6",
                "--records",
                "200000",
                "--engine",
                "zen,mmdb,wbl,foedus",
                "--threads",
                "1,2",
                "--nvm-dram-ratio",
                "4",
            ]],
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 4.5,
            // §5.2.1 gives 1.54x-7.50x for Balanced at P = 4 over MMDB, WBL
            // and FOEDUS and all three skews together (Fig. 8), and, for the
            // low-skew standard workloads A-E at P = 4 (Fig. 15, whose
            // workload A is Fig. 8's low-skew Balanced), 1.15x-1.82x over
            // MMDB and 1.36x-3.04x over WBL. A ratio both statements cover
            // lies in their intersection.
            claims: vec![
                Claim {
                    text: "zen's throughput over mmdb's, YCSB balanced, theta 0.6, 2 threads; paper (P = 4, 16 \
                           threads): 1.54x-1.82x (Fig. 8's 1.54x-7.50x over three baselines, within Fig. 15's \
                           1.15x-1.82x over MMDB)",
                    source: "Fig. 8 and Fig. 15, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "mmdb", None),
                    paper: (1.54, 1.82),
                    why: "mmdb's rows in NVM keep a DRAM copy here and pay NVM costs on top of DRAM ones, and under \
                          silo its reads write no metadata (the paper's MMDB runs Cicada)",
                },
                Claim {
                    text: "zen's throughput over wbl's, YCSB balanced, theta 0.6, 2 threads; paper (P = 4, 16 \
                           threads): 1.54x-3.04x (Fig. 8's 1.54x-7.50x over three baselines, within Fig. 15's \
                           1.36x-3.04x over WBL)",
                    source: "Fig. 8 and Fig. 15, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "wbl", None),
                    paper: (1.54, 3.04),
                    why: TWO_CORES,
                },
                Claim {
                    text: "zen's throughput over foedus's, YCSB balanced, theta 0.6, 2 threads; paper (P = 4, 16 \
                           threads): within the 1.54x-7.50x of Fig. 8 over MMDB, WBL and FOEDUS (FOEDUS is the \
                           slowest of the three there)",
                    source: "Fig. 8, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "foedus", None),
                    paper: (1.54, 7.50),
                    why: FOEDUS_HERE,
                },
                Claim {
                    text: "count behind the first claim: mmdb's NVM bytes written per committed transaction over \
                           zen's, the same runs; paper (§5.2.1, P = 4): MMDB makes 2.5 NVM writes per tuple write \
                           and 0.75 per tuple read against Zen's 1 and 0, 3.25x for Balanced's half reads; in \
                           bytes, where a metadata write is a few bytes and a tuple 1 KB, 1.75x",
                    source: "Fig. 8, §5.2.1",
                    measure: Measure::BytesPerTxn,
                    of: at(0, "mmdb", None),
                    over: at(0, "zen", None),
                    paper: (1.75, 3.25),
                    why: "mmdb's rows in the pool keep a DRAM copy here, and under silo its reads write no \
                          metadata: its extra writes are the log record and the new version",
                },
            ],
        },
        Figure {
            name: "zen-fig17",
            paper: "Zen Fig. 17",
            what: "light-weight NVM space management: zen against zen-naive-alloc (a persisted allocation bitmap)",
            scaled: "YCSB 200K rows, low skew, 2 threads (paper: 16 threads)",
            benches: ["rh", "ba", "wh"]
                .iter()
                .map(|variant| {
                    vec![
                        "--workload",
                        "ycsb",
                        "--ycsb",
                        variant,
                        "--theta",
                        "0.6",
                        "--records",
                        "200000",
                        "--engine",
                        "zen,zen-naive-alloc",
                        "--threads",
                        "2",
                    ]
                })
                .collect(),
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 2.0,
            claims: vec![
                Claim {
                    text: "zen's throughput over zen-naive-alloc's, YCSB read-heavy, theta 0.6, 2 threads; paper \
                           (P = 4, 16 threads): 1.41x-1.52x",
                    source: "Fig. 17, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "zen-naive-alloc", None),
                    paper: (1.41, 1.52),
                    why: "the bitmap's persists are a smaller share of a transaction when persists are cheap",
                },
                Claim {
                    text: "zen's throughput over zen-naive-alloc's, YCSB balanced, theta 0.6, 2 threads; paper (P \
                           = 4, 16 threads): 1.32x-2.26x",
                    source: "Fig. 17, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(1, "zen", None),
                    over: at(1, "zen-naive-alloc", None),
                    paper: (1.32, 2.26),
                    why: "as above",
                },
                Claim {
                    text: "zen's throughput over zen-naive-alloc's, YCSB write-heavy, theta 0.6, 2 threads; paper \
                           (P = 4, 16 threads): 1.30x-2.52x",
                    source: "Fig. 17, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(2, "zen", None),
                    over: at(2, "zen-naive-alloc", None),
                    paper: (1.30, 2.52),
                    why: "as above",
                },
            ],
        },
        Figure {
            name: "zen-fig20",
            paper: "Zen Fig. 20",
            what: "TPC-C at P = 4: Zen against MMDB, WBL and FOEDUS",
            scaled: "1 warehouse, P = 4 (every engine's DRAM budget a quarter of the loaded tuples, 20.3 MB), \
                     2 threads (paper: 2048 warehouses, 16 threads)",
            benches: vec![vec![
                "--workload",
                "tpcc",
                "--engine",
                "zen,mmdb,wbl,foedus",
                "--threads",
                "2",
                "--nvm-dram-ratio",
                "4",
            ]],
            smoke: tpcc_smoke,
            duration_s: DURATION_S,
            overhead_s: 4.5,
            // §5.2.2 gives one range per P over MMDB, WBL and FOEDUS
            // together, none per baseline: each baseline's speedup lies in
            // it, which is all a claim about one baseline can use.
            claims: vec![
                Claim {
                    text: "zen's TPC-C throughput over mmdb's, P = 4, 2 threads; paper (P = 4, 2048 warehouses, 16 \
                           threads): within the 1.56x-3.98x it gives over MMDB, WBL and FOEDUS together (no range \
                           per baseline)",
                    source: "Fig. 20, §5.2.2",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "mmdb", None),
                    paper: (1.56, 3.98),
                    why: "about 80 % of mmdb's rows live in the pool here (the paper's P = 4: 75 %), but each keeps \
                          its DRAM copy and Silo writes no metadata on reads (docs/engines/mmdb.md); two cores \
                          against 16 threads",
                },
                Claim {
                    text: "zen's TPC-C throughput over wbl's, P = 4, 2 threads; paper (P = 4, 2048 warehouses, 16 \
                           threads): within the 1.56x-3.98x it gives over MMDB, WBL and FOEDUS together (no range \
                           per baseline)",
                    source: "Fig. 20, §5.2.2",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "wbl", None),
                    paper: (1.56, 3.98),
                    why: TWO_CORES,
                },
                Claim {
                    text: "zen's TPC-C throughput over foedus's, P = 4, 2 threads; paper (P = 4, 2048 warehouses, \
                           16 threads): within the 1.56x-3.98x it gives over MMDB, WBL and FOEDUS together (no \
                           range per baseline)",
                    source: "Fig. 20, §5.2.2",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "foedus", None),
                    paper: (1.56, 3.98),
                    why: FOEDUS_HERE,
                },
            ],
        },
        Figure {
            name: "zen-fig22",
            paper: "Zen Fig. 22",
            what: "recovery time after a crash: MMDB replays its log, WBL and Zen scan the NVM heap",
            scaled: "YCSB 1.2M rows of 1 KB (about 1.2 GB; paper: 100 GB), 2 threads, checkpoints off (a 16 GiB \
                     sparse pool holds the log)",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "ba",
                "--records",
                "1200000",
                "--engine",
                "zen,mmdb,wbl",
                "--threads",
                "2",
                "--recover",
                "--checkpoint-s",
                "0",
                "--pool-size",
                "16GiB",
            ]],
            smoke: &["--records", "20000", "--pool-size", "256MiB"],
            duration_s: DURATION_S,
            overhead_s: 17.0,
            claims: vec![
                Claim {
                    text: "mmdb's recovery time over zen's, YCSB balanced, 1.2M rows, 2 threads; paper: 85.9 s vs \
                           3.1 s (27.7x), 100 GB after 4 million transactions",
                    source: "Fig. 22a, §5.3",
                    measure: Measure::Recovery,
                    of: at(0, "mmdb", None),
                    over: at(0, "zen", None),
                    paper: (27.7, 27.7),
                    why: "MMDB's time is its log: seconds of log here against the paper's 4 million transactions",
                },
                Claim {
                    text: "zen's recovery time over wbl's, the same runs; paper: 3.1 s vs 2.6 s (1.19x)",
                    source: "Fig. 22a, §5.3",
                    measure: Measure::Recovery,
                    of: at(0, "zen", None),
                    over: at(0, "wbl", None),
                    paper: (1.19, 1.19),
                    why: "both scan the heap; Zen checks LP bits and Tx-CTS per tuple",
                },
            ],
        },
        Figure {
            name: "zen-fig23",
            paper: "Zen Fig. 23",
            what: "the ten concurrency-control methods under Zen and under MMDB (YCSB high skew, balanced)",
            scaled: "YCSB 200K rows, theta 0.99, P = 4, 2 threads (paper: 160 GB, theta 0.95, 16 threads)",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "ba",
                "--theta",
                "0.99",
                "--records",
                "200000",
                "--engine",
                "zen:cc=silo,mmdb:cc=silo,zen:cc=no-wait,mmdb:cc=no-wait,zen:cc=mvcc,mmdb:cc=mvcc,zen:cc=hstore,\
                 mmdb:cc=hstore",
                "--threads",
                "2",
                "--nvm-dram-ratio",
                "4",
            ]],
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 3.5,
            // §5.4: "Zen achieves 1.10x-2.46x speedup in all concurrency
            // control methods", higher for OCC and MVCC than for 2PL, and
            // "limited improvement" for H-Store; no method's own number.
            claims: vec![
                Claim {
                    text: "OCC (cc=silo): zen's throughput over mmdb's, YCSB balanced, theta 0.99, 2 threads; \
                           paper (theta 0.95, 16 threads): within 1.10x-2.46x, its range over all ten methods",
                    source: "Fig. 23, §5.4",
                    measure: Measure::Throughput,
                    of: at(0, "zen:cc=silo", None),
                    over: at(0, "mmdb:cc=silo", None),
                    paper: (1.10, 2.46),
                    why: "mmdb's NVM rows keep a DRAM copy here; silo writes no metadata on reads",
                },
                Claim {
                    text: "2PL (cc=no-wait): zen's throughput over mmdb's, the same setting; paper: within \
                           1.10x-2.46x, a smaller speedup than for OCC and MVCC",
                    source: "Fig. 23, §5.4",
                    measure: Measure::Throughput,
                    of: at(0, "zen:cc=no-wait", None),
                    over: at(0, "mmdb:cc=no-wait", None),
                    paper: (1.10, 2.46),
                    why: TWO_CORES,
                },
                Claim {
                    text: "MVCC (cc=mvcc): zen's throughput over mmdb's, the same setting; paper: within \
                           1.10x-2.46x",
                    source: "Fig. 23, §5.4",
                    measure: Measure::Throughput,
                    of: at(0, "zen:cc=mvcc", None),
                    over: at(0, "mmdb:cc=mvcc", None),
                    paper: (1.10, 2.46),
                    why: TWO_CORES,
                },
                Claim {
                    text: "H-Store (cc=hstore): zen's throughput over mmdb's, the same setting; paper: within \
                           1.10x-2.46x, \"limited improvement\" (cross-partition transactions dominate)",
                    source: "Fig. 23, §5.4",
                    measure: Measure::Throughput,
                    of: at(0, "zen:cc=hstore", None),
                    over: at(0, "mmdb:cc=hstore", None),
                    paper: (1.10, 2.46),
                    why: TWO_CORES,
                },
            ],
        },
        Figure {
            name: "zen-fig26",
            paper: "Zen Fig. 26 (and Fig. 24-25)",
            what: "zen+: short transactions beside a thread running back-to-back long scans or long updates",
            scaled: "YCSB balanced, low skew, 100K rows of 1 KB, long transactions of 20K rows (paper: 2 GB of \
                     256 GB); one short thread with and without a long thread beside it (paper: 15 and 16)",
            benches: [&[][..], &["--long-kind", "scan"], &["--long-kind", "update", "--long-disjoint"]]
                .iter()
                .map(|long: &&[&'static str]| {
                    let mut bench = vec![
                        "--workload",
                        "ycsb",
                        "--ycsb",
                        "ba",
                        "--theta",
                        "0.6",
                        "--records",
                        "100000",
                        "--engine",
                        "zen+",
                    ];
                    if long.is_empty() {
                        bench.extend(["--threads", "1"]);
                    } else {
                        bench.extend(["--threads", "2", "--long-threads", "1", "--long-rows", "20000"]);
                        bench.extend(long.iter().copied());
                    }
                    bench
                })
                .collect(),
            smoke: &["--records", "50000"],
            duration_s: DURATION_S,
            overhead_s: 2.0,
            claims: vec![
                Claim {
                    text: "zen+'s short-transaction throughput (1 thread, YCSB balanced, theta 0.6) with a second \
                           thread running back-to-back scans of 20K rows, over without it; paper: 9.4-24.9 % \
                           slower (scans of 2 and 8 GB, 15 short threads)",
                    source: "Fig. 26, §5.5",
                    measure: Measure::ShortThroughput,
                    of: at(1, "zen+", None),
                    over: at(0, "zen+", None),
                    paper: (0.751, 0.906),
                    why: "the long thread shares two cores and the memory bandwidth with the short one; its \
                          snapshot versions are kept for its whole scan",
                },
                Claim {
                    text: "zen+'s short-transaction throughput (1 thread, the same setting) with a second thread \
                           running back-to-back updates of 20K rows in the other half of the table, over without \
                           it; paper: 17.3-73.7 % slower (updates of 2 GB, 15 short threads)",
                    source: "Fig. 26, §5.5",
                    measure: Measure::ShortThroughput,
                    of: at(2, "zen+", None),
                    over: at(0, "zen+", None),
                    paper: (0.263, 0.827),
                    why: "a long update of 20K rows fits the Met-Cache region here, so it never enters the \
                          exclusive stage",
                },
            ],
        },
        Figure {
            name: "phytm-fig5e",
            paper: "PHyTM Fig. 5e",
            what: "short transactions while one thread runs long ones: phytm against phtm and 2pl",
            scaled: "2 threads, one running long queries (paper: 8 threads); simulated HTM with no injected \
                     aborts: the long queries (256 rows) overflow its 512-line capacity and fall back to software",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "srq",
                "--long-threads",
                "1",
                "--engine",
                "phytm-baselines",
                "--threads",
                "2",
            ]],
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 1.0,
            claims: vec![Claim {
                text: "phytm:htm=sim's short-query (SRQ, 16 rows) throughput over phtm:htm=sim's, 2 threads of \
                       which 1 runs long queries (LRQ, 256 rows), no injected HTM aborts; paper: an order of \
                       magnitude (about 10x) at 8 threads on real HTM",
                source: "Fig. 5e, §7.1",
                measure: Measure::ShortThroughput,
                of: at(0, "phytm:htm=sim", None),
                over: at(0, "phtm:htm=sim", None),
                paper: (10.0, 10.0),
                why: "one short thread here: PHTM's global lock stops it only while the long thread holds it; \
                      the HTM is simulated",
            }],
        },
    ];
    figures.extend(zen_capacity_figures());
    figures
}

/// The Zen paper's figures at other NVM/DRAM ratios (Fig. 9, P = 8, and
/// Fig. 10, P = 16) and against the ideal, all-DRAM MMDB (Fig. 19). For
/// P = 8 the paper gives no number, only "similar results" to P = 4 and
/// 16: its claims are the direction (Zen faster, [`MORE`]).
fn zen_capacity_figures() -> Vec<Figure> {
    let ycsb_smoke: &[&str] = &["--records", "20000"];
    vec![
        Figure {
            name: "zen-fig9",
            paper: "Zen Fig. 9",
            what: "YCSB balanced, low skew, P = 8: Zen against MMDB and WBL",
            scaled: "100K rows of 1 KB, theta 0.6, P = 8 (DRAM budget 12.6 MB), 2 threads (paper: 256 GB, 16 \
                     threads)",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "ba",
                "--theta",
                "0.6",
                "--records",
                "100000",
                "--engine",
                "zen,mmdb,wbl",
                "--threads",
                "2",
                "--nvm-dram-ratio",
                "8",
            ]],
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 2.0,
            // §5.2.1 gives no number for P = 8: "In another typical
            // setting P = 8, we observe similar results as shown in Fig.
            // 9", that is, Zen the fastest as at P = 4 and 16. Only the
            // direction is a claim.
            claims: vec![
                Claim {
                    text: "zen's throughput over mmdb's, YCSB balanced, theta 0.6, P = 8, 2 threads; paper (16 \
                           threads): no number, \"similar results\" to P = 4 and P = 16, where Zen is faster: \
                           direction only",
                    source: "Fig. 9, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "mmdb", None),
                    paper: MORE,
                    why: "mmdb's rows in NVM keep a DRAM copy here; silo writes no metadata on reads",
                },
                Claim {
                    text: "zen's throughput over wbl's, the same runs; paper: no number, \"similar results\" to \
                           P = 4 and P = 16, where Zen is faster: direction only",
                    source: "Fig. 9, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "wbl", None),
                    paper: MORE,
                    why: "wbl's metadata persists here follow its commits' writes; silo writes none on reads \
                          (docs/engines/wbl.md)",
                },
            ],
        },
        Figure {
            name: "zen-fig10",
            paper: "Zen Fig. 10",
            what: "YCSB balanced, low skew, P = 16: Zen against MMDB and WBL",
            scaled: "200K rows of 1 KB, theta 0.6, P = 16 (DRAM budget 12.6 MB), 2 threads (paper: 256 GB, 16 \
                     threads)",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "ba",
                "--theta",
                "0.6",
                "--records",
                "200000",
                "--engine",
                "zen,mmdb,wbl",
                "--threads",
                "2",
                "--nvm-dram-ratio",
                "16",
            ]],
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 4.5,
            // §5.2.1: "1.02x–4.20x speedup for Balanced" over MMDB, WBL and
            // FOEDUS together, all three skews (Fig. 10).
            claims: vec![
                Claim {
                    text: "zen's throughput over mmdb's, YCSB balanced, theta 0.6, P = 16, 2 threads; paper (16 \
                           threads): within the 1.02x-4.20x it gives for Balanced over MMDB, WBL and FOEDUS",
                    source: "Fig. 10, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "mmdb", None),
                    paper: (1.02, 4.20),
                    why: "mmdb's rows in NVM keep a DRAM copy here; silo writes no metadata on reads",
                },
                Claim {
                    text: "zen's throughput over wbl's, the same runs; paper: within the 1.02x-4.20x it gives for \
                           Balanced over MMDB, WBL and FOEDUS",
                    source: "Fig. 10, §5.2.1",
                    measure: Measure::Throughput,
                    of: at(0, "zen", None),
                    over: at(0, "wbl", None),
                    paper: (1.02, 4.20),
                    why: "wbl's metadata persists here follow its commits' writes; silo writes none on reads \
                          (docs/engines/wbl.md)",
                },
                Claim {
                    text: "count behind the first claim: mmdb's NVM bytes written per committed transaction over \
                           zen's, the same runs; paper (§5.2.1's count at P = 16, 15/16 of the rows in NVM): \
                           2.875 NVM writes per tuple write and 0.94 per read against Zen's 1 and 0, 3.81x for \
                           Balanced; in bytes (tuples only) 1.94x",
                    source: "Fig. 10, §5.2.1",
                    measure: Measure::BytesPerTxn,
                    of: at(0, "mmdb", None),
                    over: at(0, "zen", None),
                    paper: (1.94, 3.81),
                    why: "mmdb's rows in the pool keep a DRAM copy here, and under silo its reads write no \
                          metadata: its extra writes are the log record and the new version",
                },
            ],
        },
        Figure {
            name: "zen-fig19",
            paper: "Zen Fig. 19",
            what: "Zen with a small database against the ideal MMDB (everything in DRAM)",
            scaled: "YCSB balanced, theta 0.6, 2 threads: mmdb-ideal and zen (small) on 80K rows, zen's Met-Cache \
                     50.4 MB, the budget P = 4 gives 200K rows (paper: 100 GB and 256 GB, 64 GB DRAM, 16 threads)",
            benches: vec![vec![
                "--workload",
                "ycsb",
                "--ycsb",
                "ba",
                "--theta",
                "0.6",
                "--records",
                "80000",
                "--engine",
                "mmdb-ideal,zen:cache=50400000",
                "--threads",
                "2",
                "--checkpoint-s",
                "0",
            ]],
            smoke: ycsb_smoke,
            duration_s: DURATION_S,
            overhead_s: 3.0,
            claims: vec![Claim {
                text: "zen (small)'s throughput over mmdb-ideal's, YCSB balanced, theta 0.6, 2 threads; paper \
                       (16 threads): \"only slightly (6%-11%) slower\", 0.89x-0.94x",
                source: "Fig. 19, §5.2.1",
                measure: Measure::Throughput,
                of: at(0, "zen:cache=50400000", None),
                over: at(0, "mmdb-ideal", None),
                paper: (0.89, 0.94),
                why: "the Met-Cache holds 63 % of the small database, as the paper's 64 of 100 GB; two threads \
                      leave the NVM bandwidth Zen's writes need mostly idle",
            }],
        },
    ]
}

/// Engine names in a bench argument list (the `--engine` value, presets
/// expanded by their first names).
fn engines_needed(figure: &Figure) -> Vec<String> {
    let mut needed = Vec::new();
    for bench in &figure.benches {
        if let Some(position) = bench.iter().position(|arg| *arg == "--engine") {
            for entry in bench[position + 1].split(',') {
                let name = entry.split(':').next().unwrap_or(entry);
                let name = match name {
                    "dbxn-ablation" => "dbxn",
                    "phytm-baselines" => "phytm",
                    other => other,
                };
                if !needed.iter().any(|known: &String| known == name) {
                    needed.push(name.to_string());
                }
            }
        }
    }
    needed
}

fn missing_engines(figure: &Figure) -> Vec<String> {
    engines_needed(figure).into_iter().filter(|name| !pmtx_engine::spec::is_engine_name(name)).collect()
}

impl ClaimRecord {
    fn new(figure: &Figure, claim: &Claim, args: &ReproduceArgs) -> Self {
        ClaimRecord {
            figure: figure.name.to_string(),
            claim: claim.text.to_string(),
            source: claim.source.to_string(),
            paper_low: claim.paper.0,
            paper_high: claim.paper.1,
            rounds: args.rounds,
            ours_median: None,
            ours_min: None,
            ours_max: None,
            ours_per_round: Vec::new(),
            ci_low: None,
            ci_high: None,
            ci_level: None,
            outlook: Some(Outlook::Decided),
            absolute: claim.is_absolute(),
            of_median: None,
            over_median: None,
            verdict: Verdict::NotRun,
            smoke: args.smoke,
            why: claim.why.to_string(),
        }
    }
}

/// The verdicts of a figure none of whose claims was measured.
fn unmeasured<'a>(
    figure: &'a Figure,
    args: &'a ReproduceArgs,
    verdict: Verdict,
    why: &'a str,
) -> impl Iterator<Item = ClaimRecord> + 'a {
    figure.claims.iter().map(move |claim| ClaimRecord {
        verdict,
        why: why.to_string(),
        ..ClaimRecord::new(figure, claim, args)
    })
}

#[derive(Parser)]
struct BenchCommand {
    #[command(flatten)]
    args: BenchArgs,
}

/// One `pmtx bench` invocation of a figure in one round.
struct Planned {
    /// Index of the bench in its figure.
    bench: usize,
    /// Its command line, and where it writes its report.
    command: Vec<String>,
    json: PathBuf,
    /// (engine, threads) runs it makes, and its estimated seconds.
    runs: usize,
    estimate_s: f64,
}

/// The bench invocations of one round of `figure`, parsed and checked
/// before anything runs.
fn plan_round(figure: &Figure, args: &ReproduceArgs, round: usize) -> Result<Vec<Planned>, CliError> {
    let (duration_s, overhead_s) = match (args.duration, args.smoke) {
        (Some(duration), true) => (duration.as_secs_f64(), SMOKE_OVERHEAD_S),
        (Some(duration), false) => (duration.as_secs_f64(), figure.overhead_s),
        (None, true) => (SMOKE_DURATION_S, SMOKE_OVERHEAD_S),
        (None, false) => (figure.duration_s, figure.overhead_s),
    };
    let mut planned = Vec::new();
    for (index, bench) in figure.benches.iter().enumerate() {
        let json = args.out.join(report_name(figure.name, index, round));
        let command = bench_command(figure, bench, &format!("{duration_s}"), &json, args.smoke);
        let parsed = BenchCommand::try_parse_from(&command)
            .map_err(|error| CliError::runtime(format!("{}: bad bench arguments: {error}", figure.name)))?;
        // The warm-up the bench runs with: its default (WARMUP_S), a
        // figure's own --warmup, or the smoke one.
        let warmup_s = parsed.args.warmup.as_secs_f64();
        // --pmdk adds the PMDK baseline's run at every thread count.
        let runs = (parsed.args.engines().len() + usize::from(parsed.args.pmdk)) * parsed.args.threads.len();
        let estimate_s = runs as f64 * (duration_s + warmup_s + overhead_s);
        planned.push(Planned { bench: index, command, json, runs, estimate_s });
    }
    Ok(planned)
}

/// The report of bench `index` (0-based) of `figure` in `round` (0-based).
fn report_name(figure: &str, index: usize, round: usize) -> String {
    format!("{figure}-{}-round{}.json", index + 1, round + 1)
}

fn format_minutes(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    format!("{}:{:02}", seconds / 60, seconds % 60)
}

/// The environment variable with which libpmem persists a mapping with
/// cache-line flushes and fences even on a file that is not on real PM.
const PMEM_FORCE: &str = "PMEM_IS_PMEM_FORCE";

/// Makes the PMDK baseline of a figure (`--pmdk`) persist with cache-line
/// flushes, as pmtx's engines on `--pm direct` do, instead of `msync` on a
/// pool file in `/tmp` (which measures the page cache, at tens of
/// transactions per second): sets `PMEM_IS_PMEM_FORCE=1` unless it is
/// set. Call it before any thread starts (libpmem reads the variable once,
/// at its first pool; changing the environment is unsound while another
/// thread may read it).
pub fn force_pmem_flushes() {
    if std::env::var_os(PMEM_FORCE).is_none() {
        std::env::set_var(PMEM_FORCE, "1");
    }
}

/// Writes the results page of an output directory (`--report`). The
/// caller passes `pmtx report`'s writer, which reads this module's figures
/// (so this module does not import it back).
pub type PageWriter = fn(&std::path::Path, &std::path::Path) -> Result<(), CliError>;

/// Runs `pmtx reproduce`.
pub fn run(args: ReproduceArgs, write_page: PageWriter) -> Result<(), CliError> {
    let figures = all_figures();
    if args.list {
        for figure in &figures {
            let missing = missing_engines(figure);
            println!(
                "{:<12} {}: {}\n             runs: {} bench(es), {} claim(s); scaled: {}\n             needs: {}{}",
                figure.name,
                figure.paper,
                figure.what,
                figure.benches.len(),
                figure.claims.len(),
                figure.scaled,
                engines_needed(figure).join(", "),
                if missing.is_empty() { String::new() } else { format!(" (not built: {})", missing.join(", ")) }
            );
        }
        println!("\nNot reproduced here (cannot be scaled to this machine):");
        for unscaled in more_figures::UNSCALED {
            println!(
                "{:<12} {}: {}\n             why not: {}",
                unscaled.name, unscaled.paper, unscaled.what, unscaled.why
            );
        }
        return Ok(());
    }
    if args.rounds < MIN_ROUNDS && !args.smoke {
        return Err(CliError::usage(format!(
            "--rounds {}: a full run needs at least {MIN_ROUNDS} rounds (a claim's spread is measured over them); \
             fewer only with --smoke",
            args.rounds
        )));
    }
    let mut chosen = Vec::new();
    for name in &args.names {
        if name == "all" {
            chosen.extend(figures.iter().filter(|figure| missing_engines(figure).is_empty()));
            continue;
        }
        match figures.iter().find(|figure| figure.name == name) {
            Some(figure) => chosen.push(figure),
            None => {
                if let Some(unscaled) = more_figures::UNSCALED.iter().find(|unscaled| unscaled.name == name) {
                    return Err(CliError::usage(format!(
                        "{name} ({}) is not reproduced here: {}",
                        unscaled.paper, unscaled.why
                    )));
                }
                let names: Vec<&str> = figures.iter().map(|figure| figure.name).collect();
                return Err(CliError::usage(format!(
                    "unknown figure {name:?} (expected one of {}, or all; see --list)",
                    names.join(", ")
                )));
            }
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|error| CliError::runtime(format!("{}: cannot create: {error}", args.out.display())))?;

    // Every round of every figure that can run, planned up front: the
    // estimate, and bad arguments found before the first bench.
    let mut plans = Vec::new();
    for figure in &chosen {
        let rounds = if missing_engines(figure).is_empty() {
            (0..args.rounds).map(|round| plan_round(figure, &args, round)).collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        plans.push(rounds);
    }
    let estimate_s: f64 = plans.iter().flatten().flatten().map(|planned| planned.estimate_s).sum();
    let invocations = plans.iter().flatten().flatten().count();
    let runs: usize = plans.iter().flatten().flatten().map(|planned| planned.runs).sum();
    println!(
        "pmtx reproduce: {} figure(s), {} round(s) each: {invocations} bench invocations, {runs} runs; estimated \
         time {} (min:s){}",
        chosen.len(),
        args.rounds,
        format_minutes(estimate_s),
        if args.smoke {
            " (--smoke: tiny data, short runs: the verdicts check that figures run, not what they show)"
        } else {
            ""
        }
    );

    if let Some(budget) = args.budget {
        println!(
            "budget {}: after these rounds, more rounds of the figures whose inconclusive claims more rounds \
             could decide, up to {} rounds a figure",
            format_minutes(budget.as_secs_f64()),
            verdict::MAX_ROUNDS
        );
    }
    write_run_json(&args, estimate_s)?;

    let started = Instant::now();
    let mut remaining_s = estimate_s;
    let mut position = 0;
    let mut states: Vec<FigureRun> = Vec::new();
    for (figure, rounds) in chosen.into_iter().zip(plans) {
        let mut state =
            FigureRun { figure, reports: Vec::new(), round_s: Vec::new(), outcome: Ok(()), no_more_rounds: false };
        let missing = missing_engines(figure);
        if !missing.is_empty() {
            println!("== {} ({}): not run: needs {} (not built)", figure.name, figure.paper, missing.join(", "));
            state.outcome = Err((Verdict::NotRun, format!("needs {}", missing.join(", "))));
            states.push(state);
            continue;
        }
        println!("== {} ({}): {}\n   scaled: {}", figure.name, figure.paper, figure.what, figure.scaled);
        // A figure that fails (a bench error) is reported and the others
        // still run; the command fails at the end.
        for (round, planned) in rounds.iter().enumerate() {
            let progress = |position: usize, bench: &Planned| {
                format!(
                    "   {} round {}/{}, bench {}/{} (invocation {position} of {invocations}; {} elapsed, about {} \
                     left)",
                    figure.name,
                    round + 1,
                    args.rounds,
                    bench.bench + 1,
                    figure.benches.len(),
                    format_minutes(started.elapsed().as_secs_f64()),
                    format_minutes(remaining_s)
                )
            };
            let outcome = state.run_round(planned, |bench| {
                position += 1;
                println!("{}\n   $ {}", progress(position, bench), bench.command.join(" "));
            });
            remaining_s -= planned.iter().map(|bench| bench.estimate_s).sum::<f64>();
            if outcome.is_err() {
                // The figure's later rounds are skipped: take them off the
                // estimate.
                remaining_s -= rounds[round + 1..].iter().flatten().map(|bench| bench.estimate_s).sum::<f64>();
                break;
            }
        }
        if let Err((_, error)) = &state.outcome {
            println!("   {}: failed: {error}", figure.name);
        }
        states.push(state);
    }

    // More rounds where they can decide, within the budget.
    if let Some(budget) = args.budget {
        loop {
            let left_s = budget.as_secs_f64() - started.elapsed().as_secs_f64();
            let views: Vec<FigureState> = states.iter().map(|state| state.view(&args)).collect();
            let Some(index) = next_figure(&views, left_s) else { break };
            let state = &mut states[index];
            let round = state.reports.len();
            let planned = plan_round(state.figure, &args, round)?;
            let undecided = views[index].outlooks.iter().filter(|o| matches!(o, Outlook::MoreRounds { .. })).count();
            println!(
                "== {}: round {} for {undecided} claim(s) more rounds could decide ({} of the budget left)",
                state.figure.name,
                round + 1,
                format_minutes(left_s)
            );
            if state.run_round(&planned, |bench| println!("   $ {}", bench.command.join(" "))).is_err() {
                // The minimum rounds stand: the figure keeps them and its
                // verdicts, and gets no more rounds.
                let error = std::mem::replace(&mut state.outcome, Ok(())).err().map(|(_, error)| error);
                println!(
                    "   {}: extra round {} failed ({}); the figure keeps its {round} rounds and gets no more",
                    state.figure.name,
                    round + 1,
                    error.unwrap_or_default()
                );
                state.no_more_rounds = true;
            }
        }
    }

    let mut verdicts = Vec::new();
    let mut failed = Vec::new();
    for state in &states {
        let figure = state.figure;
        if let Err((verdict, why)) = &state.outcome {
            if *verdict == Verdict::Failed {
                failed.push(figure.name);
            }
            verdicts.extend(unmeasured(figure, &args, *verdict, why));
            continue;
        }
        println!();
        println!(
            "{} ({}): the paper's claims beside ours (median over {} round(s) [interval of the median]){}",
            figure.name,
            figure.paper,
            state.reports.len(),
            if args.smoke { "; SMOKE run: not evidence" } else { "" }
        );
        for claim in &figure.claims {
            let json = judge(figure, claim, &state.reports, &args);
            let paper = claim.paper_text();
            let unit = if claim.is_absolute() { "" } else { "x" };
            let ours = match (json.ours_median, json.ci_low, json.ci_high) {
                (Some(median), Some(low), Some(high)) if claim.is_absolute() => {
                    format!("{median:.3} [{low:.3}-{high:.3}]")
                }
                (Some(median), Some(low), Some(high)) => format!("{median:.2}{unit} [{low:.2}-{high:.2}]"),
                _ => "n/a".to_string(),
            };
            let values = match (json.of_median, json.over_median) {
                (Some(of), Some(over)) => {
                    format!(" ({} {of:.3}, {} {over:.3}, medians)", claim.of.engine, claim.over.engine)
                }
                _ => String::new(),
            };
            println!(
                "  {}\n      {}: paper {paper}  ours {ours}{values}  {}",
                claim.text,
                claim.source,
                json.verdict.as_str()
            );
            match json.outlook.unwrap_or(Outlook::Decided) {
                Outlook::MoreRounds { rounds } => {
                    println!("      inconclusive after {} rounds; about {rounds} would decide it", json.rounds)
                }
                Outlook::Never => println!("      inconclusive: more rounds would not decide it here"),
                Outlook::Decided => {}
            }
            if json.verdict != Verdict::Reproduced {
                println!("      why it can differ here: {}", json.why);
            }
            verdicts.push(json);
        }
    }
    println!();
    let path = args.out.join("verdicts.json");
    std::fs::write(&path, serde_json::to_string_pretty(&verdicts)?)
        .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", path.display())))?;
    let inconclusive = verdicts.iter().filter(|claim| claim.verdict == Verdict::Inconclusive).count();
    println!(
        "wrote {} ({} elapsed): {} claim(s), {inconclusive} inconclusive",
        path.display(),
        format_minutes(started.elapsed().as_secs_f64()),
        verdicts.len()
    );
    if let Some(report) = &args.report {
        write_page(&args.out, report)?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::runtime(format!("figures that failed: {}", failed.join(", "))))
    }
}

/// A figure's rounds so far in one `pmtx reproduce`.
struct FigureRun<'a> {
    figure: &'a Figure,
    /// Each finished round's reports, one per bench.
    reports: Vec<Vec<Report>>,
    /// Seconds each finished round took.
    round_s: Vec<f64>,
    /// Err: the verdict of every claim (not run, failed) and why.
    outcome: Result<(), (Verdict, String)>,
    /// An extra round of the budget failed: the figure keeps the rounds it
    /// has and gets no more.
    no_more_rounds: bool,
}

impl FigureRun<'_> {
    /// Runs one round (`announce` before each bench); a bench error marks
    /// the figure failed.
    fn run_round(&mut self, planned: &[Planned], mut announce: impl FnMut(&Planned)) -> Result<(), ()> {
        let round_started = Instant::now();
        let mut round_reports = Vec::new();
        for bench in planned {
            announce(bench);
            match run_bench(bench) {
                Ok(report) => round_reports.push(report),
                Err(error) => {
                    self.outcome = Err((Verdict::Failed, error.to_string()));
                    return Err(());
                }
            }
        }
        self.reports.push(round_reports);
        self.round_s.push(round_started.elapsed().as_secs_f64());
        Ok(())
    }

    /// What the budget's rule sees of it: a figure that failed or did not
    /// run has nothing more rounds could decide.
    fn view(&self, args: &ReproduceArgs) -> FigureState {
        let rounds = self.reports.len();
        let round_s = self.round_s.iter().sum::<f64>() / rounds.max(1) as f64;
        let outlooks = if self.outcome.is_ok() && !self.no_more_rounds {
            self.figure
                .claims
                .iter()
                .map(|claim| judge(self.figure, claim, &self.reports, args).outlook.unwrap_or(Outlook::Decided))
                .collect()
        } else {
            Vec::new()
        };
        FigureState { rounds, round_s, outlooks }
    }
}

/// `<out>/run.json`: what the results page says about the run (the
/// command, the machine, when), written before the first bench.
fn write_run_json(args: &ReproduceArgs, estimate_s: f64) -> Result<(), CliError> {
    let command: Vec<String> = std::env::args().skip(1).collect();
    let run = run_meta::RunMeta {
        command: format!("pmtx {}", command.join(" ")),
        started_unix_seconds: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs()),
        budget_s: args.budget.map(|budget| budget.as_secs_f64()),
        min_rounds: args.rounds,
        estimate_s,
        smoke: args.smoke,
        cpu_model: run_meta::cpu_model(),
        cpus: std::thread::available_parallelism().map_or(0, |cpus| cpus.get()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        git_revision: Some(crate::bench::git_revision()),
    };
    let path = args.out.join("run.json");
    std::fs::write(&path, serde_json::to_string_pretty(&run)?)
        .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", path.display())))
}

/// The entry of `claim`: its ratio in every round, their spread and the
/// verdict (`not run` when a round lacks a value).
fn judge(figure: &Figure, claim: &Claim, reports: &[Vec<Report>], args: &ReproduceArgs) -> ClaimRecord {
    let mut json = ClaimRecord::new(figure, claim, args);
    if claim.is_absolute() {
        let per_round: Option<Vec<f64>> =
            reports.iter().map(|round| value_of(round, claim.of, claim.measure)).collect();
        let Some(per_round) = per_round.filter(|values| !values.is_empty()) else {
            json.why = format!("a round has no value for it (a run is missing); {}", claim.why);
            return json;
        };
        let mut sorted = per_round.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        json.rounds = per_round.len();
        json.ours_median = Some(median);
        json.of_median = Some(median);
        json.ours_min = sorted.first().copied();
        json.ours_max = sorted.last().copied();
        let (k, level) = verdict::median_interval_rank(sorted.len());
        json.ci_low = Some(sorted[k - 1]);
        json.ci_high = Some(sorted[sorted.len() - k]);
        json.ci_level = Some(level);
        json.verdict = verdict_absolute(&per_round, claim.paper);
        json.outlook = Some(outlook(&per_round, claim.paper, json.verdict, true));
        json.ours_per_round = per_round;
        return json;
    }
    let medians = |pick: Pick| {
        let values: Option<Vec<f64>> = reports.iter().map(|round| value_of(round, pick, claim.measure)).collect();
        values.and_then(|values| Spread::of(&values).map(|spread| spread.median))
    };
    json.of_median = medians(claim.of);
    json.over_median = medians(claim.over);
    let per_round: Option<Vec<f64>> = reports.iter().map(|round| ratio(round, claim)).collect();
    let Some(per_round) = per_round else {
        json.why = format!("a round has no value for it (a run is missing or measured 0); {}", claim.why);
        return json;
    };
    let Some(spread) = Spread::of(&per_round) else {
        return json;
    };
    json.rounds = spread.rounds;
    json.ours_median = Some(spread.median);
    json.ours_min = Some(spread.min);
    json.ours_max = Some(spread.max);
    json.ci_low = Some(spread.ci_low);
    json.ci_high = Some(spread.ci_high);
    json.ci_level = Some(spread.ci_level);
    json.verdict = verdict(&spread, claim.paper);
    json.outlook = Some(outlook(&per_round, claim.paper, json.verdict, false));
    json.ours_per_round = per_round;
    json
}

/// Runs one bench invocation, writing its report and a plot of it
/// (`.svg` beside the `.json`); the report.
fn run_bench(planned: &Planned) -> Result<Report, CliError> {
    let parsed = BenchCommand::try_parse_from(&planned.command)
        .map_err(|error| CliError::runtime(format!("bad bench arguments: {error}")))?;
    crate::bench::run(parsed.args)?;
    let report = read_report(&planned.json)?;
    crate::plot::run(PlotArgs::new(planned.json.clone(), planned.json.with_extension("svg")))?;
    Ok(report)
}

/// The `pmtx bench` command line of one of `figure`'s benches; with
/// `smoke`, the figure's smoke arguments replace the bench's own values of
/// the same options (a smoke `--records` replaces the figure's).
fn bench_command(figure: &Figure, bench: &[&str], duration: &str, json: &Path, smoke: bool) -> Vec<String> {
    let mut command: Vec<String> = vec!["pmtx bench".to_string()];
    command.extend(bench.iter().map(|arg| arg.to_string()));
    command.extend(["--duration".to_string(), duration.to_string(), "--json".to_string(), json.display().to_string()]);
    if smoke {
        let warmup = format!("{SMOKE_WARMUP_S}");
        let mut extra = vec!["--warmup", &warmup];
        extra.extend(figure.smoke.iter().copied());
        for pair in extra.chunks(2) {
            let (flag, value) = (pair[0], pair.get(1).copied().unwrap_or_default());
            match command.iter().position(|arg| arg == flag) {
                Some(at) if at + 1 < command.len() => command[at + 1] = value.to_string(),
                _ => command.extend([flag.to_string(), value.to_string()]),
            }
        }
    }
    command
}

fn read_report(path: &Path) -> Result<Report, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| CliError::runtime(format!("{}: cannot read: {error}", path.display())))?;
    serde_json::from_str(&text).map_err(|error| CliError::runtime(format!("{}: {error}", path.display())))
}

/// The value of `measure` in the run `pick` names: an engine's run, or,
/// for the engine label `pmdk`, the PMDK baseline's run of `--pmdk`
/// (throughput only).
fn value_of(reports: &[Report], pick: Pick, measure: Measure) -> Option<f64> {
    if pick.engine == "pmdk" {
        let runs = reports.get(pick.bench)?.pmdk_runs.iter().filter(|run| run.check_passed);
        let run = match pick.threads {
            Some(threads) => runs.into_iter().find(|run| run.threads == threads),
            None => runs.max_by_key(|run| run.threads),
        }?;
        return matches!(measure, Measure::Throughput | Measure::ShortThroughput).then_some(run.throughput_tps);
    }
    value(find(reports, pick)?, measure)
}

fn find(reports: &[Report], pick: Pick) -> Option<&RunJson> {
    let runs = reports.get(pick.bench)?.runs.iter().filter(|run| run.engine == pick.engine);
    match pick.threads {
        Some(threads) => runs.into_iter().find(|run| run.threads == threads),
        None => runs.max_by_key(|run| run.threads),
    }
}

fn value(run: &RunJson, measure: Measure) -> Option<f64> {
    match measure {
        Measure::Throughput => Some(run.throughput_tps),
        Measure::MedianLatency => Some(run.latency_us.p50),
        Measure::Recovery => run.recovery.as_ref().map(|recovery| recovery.duration_ms),
        Measure::ShortThroughput => {
            let mixed =
                pmtx_workloads::ycsb::MIXED_TRANSACTION_TYPES.iter().any(|name| run.per_type.contains_key(*name));
            if mixed {
                run.per_type.get("short").map(|short| short.throughput_tps)
            } else {
                Some(run.throughput_tps)
            }
        }
        Measure::AbortRatio => {
            let attempts = run.committed + run.aborted;
            (attempts > 0).then(|| run.aborted as f64 / attempts as f64)
        }
        Measure::FlushesPerTxn => Some(run.pm.flushes_per_txn),
        Measure::FencesPerTxn => Some(run.pm.fences_per_txn),
        Measure::BytesPerTxn => Some(run.pm.bytes_per_txn),
        Measure::EngineCounter(name) => run.engine_counters.get(name).map(|count| *count as f64),
        Measure::ExclusiveEntries => {
            let triggers = ["exclusive_entries_alpha", "exclusive_entries_beta", "exclusive_entries_gamma"];
            let counts: Option<Vec<u64>> =
                triggers.iter().map(|name| run.engine_counters.get(*name).copied()).collect();
            counts.map(|counts| counts.iter().sum::<u64>() as f64)
        }
    }
}

/// Our ratio for `claim` in one round's reports (None when a run is
/// missing or a value is 0).
fn ratio(reports: &[Report], claim: &Claim) -> Option<f64> {
    let of = value_of(reports, claim.of, claim.measure)?;
    let over = value_of(reports, claim.over, claim.measure)?;
    (over > 0.0 && of > 0.0).then(|| of / over)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_s_bench_commands_parse_in_full_and_in_smoke_runs() {
        for figure in all_figures() {
            for bench in &figure.benches {
                for smoke in [false, true] {
                    let command = bench_command(&figure, bench, "1", Path::new("out.json"), smoke);
                    if let Err(error) = BenchCommand::try_parse_from(&command) {
                        panic!("{} (smoke {smoke}): {command:?}: {error}", figure.name);
                    }
                    let records = command.iter().filter(|arg| *arg == "--records").count();
                    assert!(records <= 1, "{}: {command:?}", figure.name);
                }
            }
        }
    }

    /// Every claim reads a bench of its figure and an engine that bench
    /// runs; every figure has a unique name.
    #[test]
    fn claims_refer_to_runs_of_their_figure() {
        let figures = all_figures();
        for figure in &figures {
            assert_eq!(figures.iter().filter(|other| other.name == figure.name).count(), 1);
            for claim in &figure.claims {
                let picks = if claim.is_absolute() { vec![claim.of] } else { vec![claim.of, claim.over] };
                for pick in picks {
                    let bench = figure.benches.get(pick.bench).unwrap_or_else(|| panic!("{}: {claim:?}", figure.name));
                    let engines = bench[bench.iter().position(|arg| *arg == "--engine").unwrap() + 1];
                    let known = engines.split(',').any(|entry| entry == pick.engine)
                        || (engines == "dbxn-ablation" || engines == "phytm-baselines")
                        || (pick.engine == "pmdk" && bench.contains(&"--pmdk"));
                    assert!(known, "{}: {} is not run by {engines}", figure.name, pick.engine);
                    if let Some(threads) = pick.threads {
                        let listed = bench[bench.iter().position(|arg| *arg == "--threads").unwrap() + 1];
                        assert!(listed.split(',').any(|count| count == threads.to_string()), "{claim:?}");
                    }
                }
            }
        }
    }

    /// Every claim names its place in the paper (a figure and a section)
    /// and a range in order. A ratio's range is on one side of 1 (none of
    /// the claims is "no difference"), except the ranges the paper gives
    /// over several workloads that span 1 (SP^3 Fig. 5: 34 % to 302 % of
    /// PMDK's); an absolute claim's range is of the value itself.
    #[test]
    fn claims_cite_their_source_and_a_range_on_one_side_of_one() {
        for figure in all_figures() {
            for claim in &figure.claims {
                let (low, high) = claim.paper;
                assert!(claim.source.starts_with("Fig. ") && claim.source.contains(", §"), "{claim:?}");
                assert!(!claim.text.is_empty() && claim.text.contains("paper"), "{claim:?}");
                if claim.is_absolute() {
                    assert!(low >= 0.0 && low <= high, "{claim:?}");
                    continue;
                }
                assert!(low > 0.0 && low <= high, "{claim:?}");
                let spans_one = low < 1.0 && high > 1.0 && figure.name == "sp3-fig5";
                assert!(high < 1.0 || low > 1.0 || spans_one, "{claim:?}");
            }
        }
    }

    /// The estimate covers every round: a run of `rounds` costs that many
    /// times one round, and each round writes its own reports.
    #[test]
    fn rounds_are_planned_with_their_own_reports() {
        let figures = all_figures();
        let figure = figures.iter().find(|figure| figure.name == "zen-fig17").unwrap();
        let args = parse(&["zen-fig17", "--rounds", "4", "--out", "dir"]);
        let rounds: Vec<Vec<Planned>> =
            (0..args.rounds).map(|round| plan_round(figure, &args, round).unwrap()).collect();
        assert_eq!(rounds.len(), 4);
        let mut names: Vec<PathBuf> = rounds.iter().flatten().map(|planned| planned.json.clone()).collect();
        assert_eq!(names.len(), 4 * figure.benches.len());
        assert!(names.contains(&Path::new("dir").join("zen-fig17-3-round4.json")));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 4 * figure.benches.len(), "a report name repeats");
        // Three benches of two engines at one thread count.
        assert!(rounds[0].iter().all(|planned| planned.runs == 2));
        let per_run = figure.duration_s + WARMUP_S + figure.overhead_s;
        let round_s: f64 = rounds[0].iter().map(|planned| planned.estimate_s).sum();
        assert!((round_s - 6.0 * per_run).abs() < 1e-9, "{round_s}");
    }

    /// `pmtx reproduce all` with the default rounds stays within 30
    /// minutes by the figures' own estimates.
    #[test]
    fn the_full_run_is_estimated_under_30_minutes() {
        let args = parse(&["all"]);
        assert_eq!(args.rounds, MIN_ROUNDS);
        let mut total_s = 0.0;
        for figure in &all_figures() {
            for round in 0..args.rounds {
                total_s +=
                    plan_round(figure, &args, round).unwrap().iter().map(|planned| planned.estimate_s).sum::<f64>();
            }
        }
        assert!(total_s < 30.0 * 60.0, "estimated {}", format_minutes(total_s));
    }

    #[derive(Parser)]
    struct ReproduceCommand {
        #[command(flatten)]
        args: ReproduceArgs,
    }

    /// `pmtx reproduce WORDS...`'s arguments.
    fn parse(words: &[&str]) -> ReproduceArgs {
        let command = ["reproduce"].iter().chain(words).copied();
        ReproduceCommand::try_parse_from(command).unwrap_or_else(|error| panic!("{words:?}: {error}")).args
    }

    #[test]
    fn rounds_below_three_need_smoke() {
        let dir = std::env::temp_dir().join(format!("pmtx-reproduce-rounds-{}", std::process::id()));
        let out = dir.display().to_string();
        let error = run(parse(&["dbxn-fig9", "--rounds", "2", "--out", &out]), |_, _| Ok(())).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("at least 3 rounds"), "{error}");
        assert!(!dir.exists(), "nothing is written before the arguments are checked");
        assert!(ReproduceCommand::try_parse_from(["reproduce", "all", "--rounds", "0"]).is_err());
    }
}
