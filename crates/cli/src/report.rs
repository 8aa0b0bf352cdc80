//! `pmtx report DIR...`: the results page. Reads what `pmtx reproduce`
//! wrote into each directory (`verdicts.json`, `run.json` and the rounds'
//! bench reports) and any named `pmtx bench --json` reports, and writes one
//! Markdown page: the runs it comes from (command, commit, date, machine),
//! a summary of the verdicts, the hand-written method section, then per
//! figure the paper's claims beside ours (median, interval of the median,
//! every round's range, rounds, verdict, and for an inconclusive claim
//! whether more rounds could decide it) under a chart of them, and per
//! bench report its runs under its chart.
//!
//! The charts are written as SVG into a folder named after the page
//! (`docs/results.md` -> `docs/results/`), linked relatively. The method
//! section is the text between `<!-- method -->` and `<!-- /method -->`
//! of the page being replaced, kept as it is, or [`DEFAULT_METHOD`] for a
//! new page; everything else is rewritten on every run.
//!
//! With several directories a figure comes from the last one that has it.

use crate::plot::chart::{self, ClaimBar, ClaimsChart, Format};
use crate::reproduce::run_meta::{ClaimRecord, RunMeta};
use crate::reproduce::verdict::{outlook, Outlook, Spread, Verdict};
use crate::CliError;
use clap::Args;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `pmtx report`
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Output directories of `pmtx reproduce` (each with `verdicts.json`);
    /// a figure in several comes from the last.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// The page to write; its charts go into a folder of the same name
    /// without `.md`.
    #[arg(short = 'o', long = "output", default_value = "docs/results.md")]
    output: PathBuf,
    /// A `pmtx bench --json` report to add as a section of its own, as
    /// NAME=FILE (repeatable).
    #[arg(long = "bench", value_name = "NAME=FILE")]
    benches: Vec<String>,
    /// A Markdown file to add, as it is, as a section titled TITLE (the
    /// output of a benchmark outside pmtx's commands, such as the C API's
    /// SPS against libpmemobj), as TITLE=FILE (repeatable).
    #[arg(long = "section", value_name = "TITLE=FILE")]
    sections: Vec<String>,
}

impl ClaimRecord {
    /// The interval of the median: as written, or computed from the rounds.
    fn interval(&self) -> Option<(f64, f64, f64)> {
        match (self.ci_low, self.ci_high, self.ci_level) {
            (Some(low), Some(high), Some(level)) => Some((low, high, level)),
            _ => Spread::of(&self.ours_per_round).map(|spread| (spread.ci_low, spread.ci_high, spread.ci_level)),
        }
    }

    /// Whether more rounds could decide it: as written, or computed from
    /// the rounds (older files).
    fn outlook_or_computed(&self) -> Outlook {
        self.outlook.unwrap_or_else(|| {
            outlook(&self.ours_per_round, (self.paper_low, self.paper_high), self.verdict, self.absolute)
        })
    }

    fn paper_text(&self) -> String {
        let (low, high) = (self.paper_low, self.paper_high);
        let unit = if self.absolute { "" } else { "x" };
        if low == 1.000_001 && high == f64::MAX {
            "more".to_string()
        } else if low == f64::MIN_POSITIVE && high == 0.999_999 {
            "less".to_string()
        } else if high == f64::MAX && low == f64::MIN_POSITIVE {
            format!("> 0{unit}")
        } else if high == f64::MAX {
            format!(">= {}{unit}", chart::format_ratio(low))
        } else if low == high {
            format!("{}{unit}", chart::format_ratio(low))
        } else {
            format!("{}{unit}-{}{unit}", chart::format_ratio(low), chart::format_ratio(high))
        }
    }

    /// A short label for the chart: the claim's text up to its first
    /// comma or semicolon, or its first `parts` comma-separated parts (to
    /// tell apart claims whose first parts are alike), at most 60
    /// characters.
    fn label(&self, number: usize, parts: usize) -> String {
        let text = match self.claim.strip_prefix("count behind the first claim: ") {
            Some(rest) => format!("count: {rest}"),
            None => self.claim.clone(),
        };
        let before_paper = text.split(';').next().unwrap_or(&text);
        let head: Vec<&str> = before_paper.split(',').map(str::trim).take(parts).collect();
        let head = head.join(", ");
        let mut label: String = head.chars().take(60).collect();
        if head.chars().count() > 60 {
            label.push('…');
        }
        format!("{number}. {label}")
    }
}

/// The labels of a figure's claims: each claim's first part, or as many
/// parts as make them differ (up to 3).
fn labels(claims: &[(usize, &ClaimRecord)]) -> Vec<String> {
    let mut parts = 1;
    loop {
        let heads: Vec<String> = claims.iter().map(|(_, claim)| claim.label(0, parts)).collect();
        let unique = heads.iter().enumerate().all(|(index, head)| !heads[..index].contains(head));
        if unique || parts == 3 {
            return claims.iter().map(|(number, claim)| claim.label(*number, parts)).collect();
        }
        parts += 1;
    }
}

/// One results directory.
struct Source {
    dir: PathBuf,
    run: Option<RunMeta>,
    claims: Vec<ClaimRecord>,
    /// `git_revision` and start of its bench reports (the first found).
    revision: Option<String>,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| CliError::runtime(format!("{}: cannot read: {error}", path.display())))?;
    serde_json::from_str(&text).map_err(|error| CliError::runtime(format!("{}: {error}", path.display())))
}

fn read_source(dir: &Path) -> Result<Source, CliError> {
    let claims: Vec<ClaimRecord> = read_json(&dir.join("verdicts.json"))?;
    let run_path = dir.join("run.json");
    let run = if run_path.exists() { Some(read_json::<RunMeta>(&run_path)?) } else { None };
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| CliError::runtime(format!("{}: cannot read: {error}", dir.display())))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.to_string_lossy().contains("-round") && path.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    let revision = names.iter().find_map(|path| {
        let report: serde_json::Value = read_json(path).ok()?;
        report["config"]["git_revision"].as_str().map(str::to_string)
    });
    Ok(Source { dir: dir.to_path_buf(), run, claims, revision })
}

/// Runs `pmtx report`.
pub fn run(args: ReportArgs) -> Result<(), CliError> {
    let named = |flag: &str, given: &[String]| {
        given
            .iter()
            .map(|pair| match pair.split_once('=') {
                Some((name, file)) if !name.is_empty() => Ok((name.to_string(), PathBuf::from(file))),
                _ => Err(CliError::usage(format!("--{flag} {pair:?}: expected NAME=FILE"))),
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let benches = named("bench", &args.benches)?;
    let sections = named("section", &args.sections)?;
    let sources: Vec<&Path> = args.dirs.iter().map(PathBuf::as_path).collect();
    write_pages(&sources, &args.output, &benches, &sections)
}

/// Writes the page of one results directory (`pmtx reproduce --report`).
pub fn write_page(dir: &Path, output: &Path, benches: &[(String, PathBuf)]) -> Result<(), CliError> {
    write_pages(&[dir], output, benches, &[])
}

fn write_pages(
    dirs: &[&Path],
    output: &Path,
    benches: &[(String, PathBuf)],
    sections: &[(String, PathBuf)],
) -> Result<(), CliError> {
    let sources = dirs.iter().map(|dir| read_source(dir)).collect::<Result<Vec<_>, _>>()?;
    let previous = std::fs::read_to_string(output).ok();
    let charts_dir = output.with_extension("");
    std::fs::create_dir_all(&charts_dir)
        .map_err(|error| CliError::runtime(format!("{}: cannot create: {error}", charts_dir.display())))?;
    let charts_name = charts_dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let mut command = String::from("pmtx report");
    for dir in dirs {
        let _ = write!(command, " {}", dir.display());
    }
    let _ = write!(command, " -o {}", output.display());
    for (name, file) in benches {
        let _ = write!(command, " --bench {name}={}", file.display());
    }
    for (title, file) in sections {
        let _ = write!(command, " --section '{title}={}'", file.display());
    }
    let mut page = render_page(&sources, previous.as_deref(), &charts_dir, &charts_name, benches, &command)?;
    for (title, file) in sections {
        let text = std::fs::read_to_string(file)
            .map_err(|error| CliError::runtime(format!("{}: cannot read: {error}", file.display())))?;
        let _ = writeln!(page, "\n## {title}\n\n{}", text.trim());
    }
    std::fs::write(output, page)
        .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", output.display())))?;
    println!("wrote {} (charts in {})", output.display(), charts_dir.display());
    Ok(())
}

/// The method section of a new page.
pub const DEFAULT_METHOD: &str = "\
How to read this page. Each figure of a paper runs as one or more `pmtx bench` invocations, scaled to this \
machine, in rounds; a claim's ratio (of two runs' throughput, latency or recovery time) or count (per \
transaction or per run) is computed per round. The table gives the paper's value or range, our median over \
the rounds, the interval of the median the verdict weighs (an order-statistics interval with at least the 75 % \
coverage of three rounds' min-max), the range of every round and how many rounds the claim got. The chart \
shows the same: the paper's range as a grey band, each round as a tick on a thin bar from the least to the \
largest, the interval as a thick bar, the median as a dot in the verdict's colour.

The verdict (the rule is in `crates/cli/src/reproduce/verdict.rs`): **inconclusive** when the interval \
contains 1 or is wider, as a factor, than the paper's effect; **not reproduced** when the median is on the \
other side of 1 than the paper; **reproduced** within the paper's range widened by the interval's width; \
**direction** otherwise. A count is reproduced when every round lies in the paper's range. \
`pmtx reproduce all --budget 60m` spends what the three rounds of every figure leave of the hour on more \
rounds of the figures with an inconclusive claim that more rounds could decide, and stops a figure as soon \
as none is left; an inconclusive claim says whether about N rounds would decide it or its effect is below \
what two cores show.

Where a paper states a count (fences or lines flushed per transaction, NVM bytes written, entries into a \
stage, aborts), the claim reads the engines' counters, which do not vary between rounds; where a paper \
explains a throughput claim by a count, the count is a claim of its own beside it.

Regenerate: `pmtx reproduce all --budget 60m --out DIR`, then `pmtx report DIR -o docs/results.md` \
(several directories: each figure from the last that has it; `--bench NAME=FILE` adds a `pmtx bench` \
report, `--section TITLE=FILE` a Markdown file). How to run the benchmarks, the engine options and the media model are in \
[benchmarks.md](benchmarks.md); instructions per transaction in [instructions.md](instructions.md). The \
dated before-and-after measurements this page used to carry are in the commit history.";

/// The page's text; the charts are written into `charts_dir`, linked as
/// `charts_name/<figure>.svg`.
fn render_page(
    sources: &[Source],
    previous: Option<&str>,
    charts_dir: &Path,
    charts_name: &str,
    benches: &[(String, PathBuf)],
    command: &str,
) -> Result<String, CliError> {
    // Each figure's claims from the last source that has the figure.
    let mut figures: BTreeMap<String, (usize, Vec<ClaimRecord>)> = BTreeMap::new();
    for (index, source) in sources.iter().enumerate() {
        let mut in_source: BTreeMap<String, Vec<ClaimRecord>> = BTreeMap::new();
        for claim in &source.claims {
            in_source.entry(claim.figure.clone()).or_default().push(claim.clone());
        }
        for (figure, claims) in in_source {
            figures.insert(figure, (index, claims));
        }
    }
    let order = crate::reproduce::figure_names();
    let mut names: Vec<&String> = figures.keys().collect();
    names.sort_by_key(|name| order.iter().position(|known| known == name).unwrap_or(usize::MAX));
    let all: Vec<&ClaimRecord> = names.iter().flat_map(|name| &figures[*name].1).collect();

    let mut page = String::new();
    let w = &mut page;
    let _ = writeln!(w, "# Results\n");
    let _ = writeln!(
        w,
        "<!-- Written by `pmtx report`: only the method section between its markers is kept when the page is \
         written again. -->\n"
    );
    let _ = writeln!(
        w,
        "What pmtx measures today against the claims of the four papers it follows (DBXN, Zen/Zen+, SP^3, \
         PHyTM), scaled to this machine. Written by `{command}` from these runs:\n"
    );
    for (index, source) in sources.iter().enumerate() {
        let used = figures.values().filter(|(from, _)| *from == index).count();
        let _ = writeln!(w, "{}", describe_source(source, used));
    }
    let smoke = all.iter().any(|claim| claim.smoke);
    if smoke {
        let _ = writeln!(
            w,
            "\n**Smoke run**: tiny data and short runs; these verdicts check that figures run, not what they show."
        );
    }
    let missing: Vec<&str> = order.iter().copied().filter(|name| !figures.contains_key(*name)).collect();
    if !missing.is_empty() {
        let _ = writeln!(
            w,
            "\nThese runs cover {} of the {} figures; not on this page until a run of them (`pmtx reproduce all`) \
             is reported: {}.",
            order.len() - missing.len(),
            order.len(),
            missing.join(", ")
        );
    }

    // Summary.
    let _ = writeln!(w, "\n## Summary\n");
    let _ = writeln!(w, "| verdict | claims |\n| --- | ---: |");
    for verdict in [
        Verdict::Reproduced,
        Verdict::Direction,
        Verdict::Inconclusive,
        Verdict::NotReproduced,
        Verdict::NotRun,
        Verdict::Failed,
    ] {
        let count = all.iter().filter(|claim| claim.verdict == verdict).count();
        if count > 0 || matches!(verdict, Verdict::Reproduced | Verdict::Inconclusive) {
            let _ = writeln!(w, "| {} | {count} |", verdict.as_str());
        }
    }
    let _ = writeln!(w, "| all | {} |", all.len());
    let inconclusive: Vec<&&ClaimRecord> = all.iter().filter(|claim| claim.verdict == Verdict::Inconclusive).collect();
    let decidable =
        inconclusive.iter().filter(|claim| matches!(claim.outlook_or_computed(), Outlook::MoreRounds { .. })).count();
    let _ = writeln!(
        w,
        "\nOf the {} inconclusive claims, {decidable} could be decided by more rounds and {} not: their effect is \
         below what two cores show, or a count straddles the paper's bound.",
        inconclusive.len(),
        inconclusive.len() - decidable
    );
    let mut rounds: BTreeMap<usize, usize> = BTreeMap::new();
    for claim in all.iter().filter(|claim| claim.ours_median.is_some()) {
        *rounds.entry(claim.rounds).or_default() += 1;
    }
    let rounds: Vec<String> =
        rounds.iter().map(|(rounds, claims)| format!("{claims} claim(s) with {rounds} rounds")).collect();
    if !rounds.is_empty() {
        let _ = writeln!(w, "Rounds: {}.", rounds.join(", "));
    }

    // Method.
    let method = previous
        .and_then(|page| {
            let (_, rest) = page.split_once("<!-- method -->")?;
            let (method, _) = rest.split_once("<!-- /method -->")?;
            Some(method.trim().to_string())
        })
        .unwrap_or_else(|| DEFAULT_METHOD.to_string());
    let _ = writeln!(w, "\n## Method\n\n<!-- method -->\n{method}\n<!-- /method -->");

    // Figures.
    for name in &names {
        let claims = &figures[*name].1;
        let (paper, what, scaled) = crate::reproduce::figure_summary(name).unwrap_or_default();
        let _ = writeln!(w, "\n## {name}: {paper}\n");
        if !what.is_empty() {
            let _ = writeln!(w, "{what}. Scaled: {scaled}.\n");
        }
        let ratios: Vec<(usize, &ClaimRecord)> = claims
            .iter()
            .enumerate()
            .filter(|(_, claim)| claim.ours_median.is_some() && !claim.absolute)
            .map(|(index, claim)| (index + 1, claim))
            .collect();
        let counts: Vec<(usize, &ClaimRecord)> = claims
            .iter()
            .enumerate()
            .filter(|(_, claim)| claim.ours_median.is_some() && claim.absolute)
            .map(|(index, claim)| (index + 1, claim))
            .collect();
        for (suffix, measured, log) in [("", &ratios, true), ("-counts", &counts, false)] {
            if measured.is_empty() {
                continue;
            }
            let labels = labels(measured);
            let bars: Vec<ClaimBar> = measured
                .iter()
                .zip(labels)
                .map(|((_, claim), label)| {
                    let (low, high, _) = claim.interval().unwrap_or((0.0, 0.0, 0.0));
                    ClaimBar {
                        label,
                        paper: (claim.paper_low, claim.paper_high),
                        median: claim.ours_median.unwrap_or_default(),
                        ci: (low, high),
                        per_round: claim.ours_per_round.clone(),
                        verdict: claim.verdict.as_str().to_string(),
                    }
                })
                .collect();
            let title = format!("{name}: {}", if log { "ours beside the paper" } else { "counts beside the paper" });
            let file = format!("{name}{suffix}.svg");
            let chart = ClaimsChart { title: &title, claims: &bars, log };
            let svg = chart::render(Format::Svg, chart::claims_size(bars.len()), &chart)
                .map_err(|error| CliError::runtime(format!("{file}: {error}")))?;
            let path = charts_dir.join(&file);
            std::fs::write(&path, svg)
                .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", path.display())))?;
            let _ = writeln!(w, "![{name}: {}]({charts_name}/{file})\n", if log { "ratios" } else { "counts" });
        }
        let _ = writeln!(w, "| # | claim | source | paper | ours | interval | all rounds | rounds | verdict |");
        let _ = writeln!(w, "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |");
        for (index, claim) in claims.iter().enumerate() {
            let unit = if claim.absolute { "" } else { "x" };
            let fmt = |value: f64| format!("{}{unit}", chart::format_ratio(value));
            let (ours, interval, spread) = match (claim.ours_median, claim.interval()) {
                (Some(median), Some((low, high, level))) => {
                    let (min, max) = claim
                        .ours_per_round
                        .iter()
                        .fold((f64::MAX, f64::MIN), |(min, max), value| (min.min(*value), max.max(*value)));
                    (
                        fmt(median),
                        format!("{}-{} ({:.0} %)", fmt(low), fmt(high), level * 100.0),
                        format!("{}-{}", fmt(min), fmt(max)),
                    )
                }
                _ => ("n/a".to_string(), String::new(), String::new()),
            };
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {ours} | {interval} | {spread} | {} | {} |",
                index + 1,
                claim.claim.replace('|', "/"),
                claim.source,
                claim.paper_text(),
                claim.rounds,
                claim.verdict.as_str()
            );
        }
        let notes: Vec<String> = claims
            .iter()
            .enumerate()
            .filter(|(_, claim)| claim.verdict != Verdict::Reproduced)
            .map(|(index, claim)| {
                let outlook = match claim.outlook_or_computed() {
                    Outlook::MoreRounds { rounds } => {
                        format!("more rounds could decide it (about {rounds} in all). ")
                    }
                    Outlook::Never if claim.absolute => {
                        "more rounds would not decide it (the count lies on both sides of the paper's bound). "
                            .to_string()
                    }
                    Outlook::Never => {
                        "more rounds would not decide it: the effect is below what two cores show. ".to_string()
                    }
                    Outlook::Decided => String::new(),
                };
                format!("{}. {}: {outlook}Why it can differ here: {}", index + 1, claim.verdict.as_str(), claim.why)
            })
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(w);
            for note in notes {
                let _ = writeln!(w, "- {note}");
            }
        }
    }

    // Bench reports.
    if !benches.is_empty() {
        let _ = writeln!(w, "\n## Benchmarks\n");
    }
    for (name, file) in benches {
        let report: crate::bench::report::Report = read_json(file)?;
        let _ = writeln!(
            w,
            "### {name}\n\n`{}` workload, backend {}, {} s per run, commit {}, {} CPUs.\n",
            report.config.workload,
            report.config.backend,
            chart::format_ratio(report.config.duration_s),
            report.config.git_revision,
            report.config.cpus
        );
        let chart_file = format!("bench-{name}.svg");
        crate::plot::run(crate::plot::PlotArgs::new(file.clone(), charts_dir.join(&chart_file)))?;
        let _ = writeln!(w, "![{name}]({charts_name}/{chart_file})\n");
        let _ = writeln!(w, "| engine | threads | committed/s | p50 | p99 |\n| --- | ---: | ---: | ---: | ---: |");
        for run in &report.runs {
            let _ = writeln!(
                w,
                "| {} | {} | {:.0} | {} | {} |",
                run.engine,
                run.threads,
                run.throughput_tps,
                crate::plot::format_latency(run.latency_us.p50),
                crate::plot::format_latency(run.latency_us.p99)
            );
        }
    }
    Ok(page)
}

/// One line on where a directory's verdicts come from.
fn describe_source(source: &Source, figures_used: usize) -> String {
    let dir = source.dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let revision = source
        .run
        .as_ref()
        .and_then(|run| run.git_revision.as_deref())
        .or(source.revision.as_deref())
        .unwrap_or("unknown");
    match &source.run {
        Some(run) => {
            let budget = run
                .budget_s
                .map(|budget| format!(", budget {} min", chart::format_ratio(budget / 60.0)))
                .unwrap_or_default();
            format!(
                "- `{}` ({dir}): started {}, commit {revision}{budget}; {} figure(s) on this page. Machine: {}, {} \
                 logical CPUs, Linux {}.",
                run.command,
                crate::units::format_unix_time(run.started_unix_seconds),
                figures_used,
                run.cpu_model,
                run.cpus,
                run.kernel
            )
        }
        None => format!(
            "- `{dir}`: commit {revision}; {figures_used} figure(s) on this page (no run.json: machine not recorded)."
        ),
    }
}
