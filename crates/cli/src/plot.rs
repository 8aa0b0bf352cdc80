//! `pmtx plot`: draws the JSON results of `pmtx bench` as an SVG file.
//!
//! Two panels: throughput against threads (one line per engine), or one bar
//! per engine when the file has a single thread count; and the latency
//! percentiles p50/p90/p99/p99.9 of every run on a logarithmic axis. The
//! SVG is written by hand and uses only generic font families, so it needs
//! no font files and no plotting library.

use crate::CliError;
use clap::Args;
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `pmtx plot`
#[derive(Args, Debug)]
pub struct PlotArgs {
    /// JSON file written by `pmtx bench --json`.
    input: PathBuf,
    /// Output file (SVG) [default: the input with the extension .svg].
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
}

/// The parts of the bench report the plot reads.
#[derive(Debug, Deserialize)]
struct PlotReport {
    #[serde(default)]
    config: PlotConfig,
    runs: Vec<PlotRun>,
}

#[derive(Debug, Default, Deserialize)]
struct PlotConfig {
    #[serde(default)]
    workload: String,
    #[serde(default)]
    backend: String,
    #[serde(default)]
    latency_model: String,
    #[serde(default)]
    git_revision: String,
    #[serde(default)]
    duration_s: f64,
}

#[derive(Debug, Deserialize)]
struct PlotRun {
    engine: String,
    threads: usize,
    throughput_tps: f64,
    latency_us: PlotLatency,
}

#[derive(Debug, Deserialize)]
struct PlotLatency {
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
}

/// Runs `pmtx plot`.
pub fn run(args: PlotArgs) -> Result<(), CliError> {
    let output = args.output.clone().unwrap_or_else(|| args.input.with_extension("svg"));
    let extension = output.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    if extension == "png" {
        return Err(CliError::usage(
            "PNG output needs a raster image encoder, which this build does not include; \
             write SVG instead (-o FILE.svg) and convert it with any SVG tool if needed",
        ));
    }
    let text = std::fs::read_to_string(&args.input)
        .map_err(|error| CliError::runtime(format!("{}: cannot read: {error}", args.input.display())))?;
    let report: PlotReport = serde_json::from_str(&text).map_err(|error| {
        CliError::runtime(format!("{}: not a `pmtx bench --json` report: {error}", args.input.display()))
    })?;
    if report.runs.is_empty() {
        return Err(CliError::runtime(format!("{}: the report has no runs to plot", args.input.display())));
    }
    let svg = render(&report, &args.input);
    std::fs::write(&output, svg)
        .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", output.display())))?;
    println!("wrote {}", output.display());
    Ok(())
}

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 400.0;
const TITLE_HEIGHT: f64 = 50.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 80.0;

/// Distinct colours for engines (Okabe-Ito, colour-blind safe).
const PALETTE: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"];
/// Colours of the four latency percentiles.
const PERCENTILE_COLORS: [&str; 4] = ["#9ecae1", "#4292c6", "#08519c", "#08306b"];
const PERCENTILE_NAMES: [&str; 4] = ["p50", "p90", "p99", "p99.9"];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" step (1, 2 or 5 times a power of ten) for about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: usize) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / ticks as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// 1234567 -> "1.23M", 45000 -> "45k", 12 -> "12".
fn format_si(value: f64) -> String {
    let (scaled, suffix) = if value.abs() >= 1e9 {
        (value / 1e9, "G")
    } else if value.abs() >= 1e6 {
        (value / 1e6, "M")
    } else if value.abs() >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let digits = if scaled == scaled.trunc() || scaled.abs() >= 100.0 {
        0
    } else if scaled.abs() >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{scaled:.digits$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text };
    format!("{text}{suffix}")
}

/// Microseconds with a unit that fits: "850 µs", "1.2 ms", "3 s".
fn format_latency(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", format_si(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", format_si(us / 1e3))
    } else {
        format!("{} µs", format_si(us))
    }
}

/// The plot area of a panel.
struct Area {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
}

impl Area {
    fn panel(index: usize) -> Self {
        Self {
            left: LEFT,
            top: TITLE_HEIGHT + index as f64 * PANEL_HEIGHT + TOP,
            width: WIDTH - LEFT - RIGHT,
            height: PANEL_HEIGHT - TOP - BOTTOM,
        }
    }

    fn bottom(&self) -> f64 {
        self.top + self.height
    }

    fn right(&self) -> f64 {
        self.left + self.width
    }
}

fn render(report: &PlotReport, input: &Path) -> String {
    let height = TITLE_HEIGHT + 2.0 * PANEL_HEIGHT;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let c = &report.config;
    let mut title = format!("pmtx bench: {}", if c.workload.is_empty() { "?" } else { &c.workload });
    if !c.backend.is_empty() {
        let _ = write!(title, " | backend {}", c.backend);
        if !c.latency_model.is_empty() && c.latency_model != "none" {
            let _ = write!(title, " ({})", c.latency_model);
        }
    }
    if c.duration_s > 0.0 {
        let _ = write!(title, " | {} s per run", format_si(c.duration_s));
    }
    if !c.git_revision.is_empty() {
        let _ = write!(title, " | rev {}", c.git_revision);
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="16" font-weight="bold">{}</text>"#,
        WIDTH / 2.0,
        escape(&title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="44" text-anchor="middle" font-size="10" fill="#666">{}</text>"##,
        WIDTH / 2.0,
        escape(&input.display().to_string())
    );

    let mut engines: Vec<&str> = Vec::new();
    for run in &report.runs {
        if !engines.contains(&run.engine.as_str()) {
            engines.push(&run.engine);
        }
    }
    let color = |engine: &str| PALETTE[engines.iter().position(|e| *e == engine).unwrap_or(0) % PALETTE.len()];
    let mut threads: Vec<usize> = report.runs.iter().map(|run| run.threads).collect();
    threads.sort_unstable();
    threads.dedup();

    let area = Area::panel(0);
    if threads.len() > 1 {
        throughput_lines(&mut svg, report, &area, &engines, &threads, &color);
    } else {
        throughput_bars(&mut svg, report, &area, threads[0], &color);
    }
    latency_bars(&mut svg, report, &Area::panel(1));
    svg.push_str("</svg>\n");
    svg
}

/// Horizontal grid lines and labels of a linear y axis from 0 to the
/// returned maximum.
fn linear_y_axis(svg: &mut String, area: &Area, max_value: f64, label: &str) -> f64 {
    let step = nice_step(max_value * 1.05, 5);
    let top_value = (max_value * 1.05 / step).ceil().max(1.0) * step;
    let mut value = 0.0;
    while value <= top_value * 1.000_001 {
        let y = area.bottom() - value / top_value * area.height;
        let _ = writeln!(
            svg,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            area.left,
            area.right(),
            area.left - 6.0,
            y + 4.0,
            format_si(value)
        );
        value += step;
    }
    axis_frame(svg, area, label);
    top_value
}

fn axis_frame(svg: &mut String, area: &Area, y_label: &str) {
    let _ = writeln!(
        svg,
        r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
        area.left, area.top, area.width, area.height
    );
    let (x, y) = (area.left - 62.0, area.top + area.height / 2.0);
    let _ = writeln!(
        svg,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle" transform="rotate(-90 {x:.1} {y:.1})">{}</text>"#,
        escape(y_label)
    );
}

fn panel_title(svg: &mut String, area: &Area, title: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#,
        area.left + area.width / 2.0,
        area.top - 12.0,
        escape(title)
    );
}

fn legend(svg: &mut String, area: &Area, entries: &[(String, &str)]) {
    let x = area.right() + 16.0;
    for (index, (name, color)) in entries.iter().enumerate() {
        let y = area.top + 10.0 + index as f64 * 20.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            y - 9.0,
            x + 20.0,
            y,
            escape(name)
        );
    }
}

fn throughput_lines(
    svg: &mut String,
    report: &PlotReport,
    area: &Area,
    engines: &[&str],
    threads: &[usize],
    color: &dyn Fn(&str) -> &'static str,
) {
    panel_title(svg, area, "Throughput (committed transactions per second)");
    let max_tps = report.runs.iter().map(|run| run.throughput_tps).fold(0.0, f64::max);
    let top = linear_y_axis(svg, area, max_tps, "transactions / s");
    let max_threads = *threads.last().unwrap_or(&1) as f64;
    let x_of = |t: usize| area.left + 20.0 + (t as f64 / max_threads) * (area.width - 40.0);
    let y_of = |tps: f64| area.bottom() - tps / top * area.height;
    let mut last_label = f64::NEG_INFINITY;
    for &t in threads {
        let x = x_of(t);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/>"##,
            area.bottom(),
            area.bottom() + 5.0
        );
        if x - last_label >= 24.0 {
            let _ =
                writeln!(svg, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{t}</text>"#, area.bottom() + 18.0);
            last_label = x;
        }
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">worker threads</text>"#,
        area.left + area.width / 2.0,
        area.bottom() + 40.0
    );
    let mut entries = Vec::new();
    for &engine in engines {
        let mut points: Vec<(usize, f64)> = report
            .runs
            .iter()
            .filter(|run| run.engine == engine)
            .map(|run| (run.threads, run.throughput_tps))
            .collect();
        points.sort_by_key(|(t, _)| *t);
        let stroke = color(engine);
        let path: Vec<String> = points.iter().map(|(t, tps)| format!("{:.1},{:.1}", x_of(*t), y_of(*tps))).collect();
        let _ =
            writeln!(svg, r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="2"/>"#, path.join(" "));
        for (t, tps) in &points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{stroke}"><title>{} x{t}: {} tps</title></circle>"#,
                x_of(*t),
                y_of(*tps),
                escape(engine),
                format_si(*tps)
            );
        }
        entries.push((engine.to_string(), stroke));
    }
    legend(svg, area, &entries);
}

fn throughput_bars(
    svg: &mut String,
    report: &PlotReport,
    area: &Area,
    threads: usize,
    color: &dyn Fn(&str) -> &'static str,
) {
    panel_title(svg, area, &format!("Throughput with {threads} thread{}", if threads == 1 { "" } else { "s" }));
    let max_tps = report.runs.iter().map(|run| run.throughput_tps).fold(0.0, f64::max);
    let top = linear_y_axis(svg, area, max_tps, "transactions / s");
    let slot = area.width / report.runs.len() as f64;
    let bar = (slot * 0.6).min(120.0);
    for (index, run) in report.runs.iter().enumerate() {
        let center = area.left + slot * (index as f64 + 0.5);
        let height = run.throughput_tps / top * area.height;
        let _ = writeln!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="{bar:.1}" height="{height:.1}" fill="{}"><title>{}: {} tps</title></rect>"#,
            center - bar / 2.0,
            area.bottom() - height,
            color(&run.engine),
            escape(&run.engine),
            format_si(run.throughput_tps)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{center:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            area.bottom() - height - 5.0,
            format_si(run.throughput_tps)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{center:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            area.bottom() + 18.0,
            escape(&run.engine)
        );
    }
}

fn latency_bars(svg: &mut String, report: &PlotReport, area: &Area) {
    panel_title(svg, area, "Latency to durable acknowledgement (log scale)");
    let values = |run: &PlotRun| [run.latency_us.p50, run.latency_us.p90, run.latency_us.p99, run.latency_us.p999];
    let positive: Vec<f64> =
        report.runs.iter().flat_map(values).filter(|value| *value > 0.0 && value.is_finite()).collect();
    let low = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let high = positive.iter().copied().fold(0.0, f64::max);
    let (low_exp, high_exp) = if positive.is_empty() {
        (0, 1)
    } else {
        let low_exp = low.log10().floor() as i32;
        (low_exp, (high.log10().ceil() as i32).max(low_exp + 1))
    };
    let y_of = |us: f64| {
        let fraction = (us.log10() - low_exp as f64) / (high_exp - low_exp) as f64;
        area.bottom() - fraction.clamp(0.0, 1.0) * area.height
    };
    for exp in low_exp..=high_exp {
        let value = 10f64.powi(exp);
        let y = y_of(value);
        let _ = writeln!(
            svg,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            area.left,
            area.right(),
            area.left - 6.0,
            y + 4.0,
            format_latency(value)
        );
    }
    axis_frame(svg, area, "latency");
    let slot = area.width / report.runs.len() as f64;
    let group = (slot * 0.8).min(160.0);
    let bar = group / 4.0;
    let rotate = report.runs.len() > 6;
    for (index, run) in report.runs.iter().enumerate() {
        let center = area.left + slot * (index as f64 + 0.5);
        for (k, value) in values(run).into_iter().enumerate() {
            if value <= 0.0 || !value.is_finite() {
                continue;
            }
            let y = y_of(value);
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} x{}: {} {}</title></rect>"#,
                center - group / 2.0 + k as f64 * bar,
                bar - 1.0,
                area.bottom() - y,
                PERCENTILE_COLORS[k],
                escape(&run.engine),
                run.threads,
                PERCENTILE_NAMES[k],
                format_latency(value)
            );
        }
        let label = escape(&format!("{} x{}", run.engine, run.threads));
        let y = area.bottom() + 18.0;
        if rotate {
            let _ = writeln!(
                svg,
                r#"<text x="{center:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-30 {center:.1} {y:.1})">{label}</text>"#
            );
        } else {
            let _ = writeln!(svg, r#"<text x="{center:.1}" y="{y:.1}" text-anchor="middle">{label}</text>"#);
        }
    }
    let entries: Vec<(String, &str)> =
        PERCENTILE_NAMES.iter().zip(PERCENTILE_COLORS).map(|(name, color)| (name.to_string(), color)).collect();
    legend(svg, area, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(engine: &str, threads: usize, tps: f64) -> PlotRun {
        PlotRun {
            engine: engine.into(),
            threads,
            throughput_tps: tps,
            latency_us: PlotLatency { p50: 10.0, p90: 40.0, p99: 900.0, p999: 41_000.0 },
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(nice_step(1000.0, 5), 200.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(format_si(1_234_567.0), "1.23M");
        assert_eq!(format_si(45_000.0), "45k");
        assert_eq!(format_si(12.0), "12");
        assert_eq!(format_si(0.5), "0.5");
        assert_eq!(format_latency(41_000.0), "41 ms");
        assert_eq!(format_latency(10.0), "10 µs");
    }

    #[test]
    fn renders_lines_and_bars() {
        let report = PlotReport {
            config: PlotConfig { workload: "smallbank".into(), ..Default::default() },
            runs: vec![
                run("silo", 1, 1e6),
                run("silo", 2, 1.9e6),
                run("group-commit", 1, 8e5),
                run("group-commit", 2, 1.5e6),
            ],
        };
        let svg = render(&report, Path::new("r.json"));
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        let single = PlotReport { config: PlotConfig::default(), runs: vec![run("a<b", 4, 0.0), run("c", 4, 3.0)] };
        let svg = render(&single, Path::new("r.json"));
        assert!(svg.contains("a&lt;b") && !svg.contains("<polyline"));
    }
}
