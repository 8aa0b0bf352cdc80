//! `pmtx plot`: draws the JSON results of `pmtx bench` as an SVG or PNG file.
//!
//! Two panels: throughput against threads (one line per engine), or one bar
//! per engine when the file has a single thread count; and the latency
//! percentiles p50/p90/p99/p99.9 of every run on a logarithmic axis. The
//! chart is laid out once against the [`Canvas`] trait and drawn by one of
//! two canvases: [`svg::SvgCanvas`] (hand-written SVG, generic font family)
//! or [`raster::RasterCanvas`] (a bitmap with a built-in 8x8 font, encoded as
//! PNG). Neither needs system fonts or graphics libraries.

mod raster;
mod svg;

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
    /// Output file; its extension picks the format, .svg or .png [default: the input with the extension .svg].
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

/// The output formats `pmtx plot` writes, chosen by the output's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

impl Format {
    fn of(path: &Path) -> Result<Self, CliError> {
        let extension = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        match extension.as_str() {
            "svg" => Ok(Self::Svg),
            "png" => Ok(Self::Png),
            other => Err(CliError::usage(format!(
                "{}: unknown output format {:?}; name the output FILE.svg or FILE.png",
                path.display(),
                other
            ))),
        }
    }
}

impl PlotArgs {
    /// Plots `input` (a `pmtx bench --json` report) into `output`.
    pub fn new(input: PathBuf, output: PathBuf) -> Self {
        Self { input, output: Some(output) }
    }
}

/// Runs `pmtx plot`.
pub fn run(args: PlotArgs) -> Result<(), CliError> {
    let output = args.output.clone().unwrap_or_else(|| args.input.with_extension("svg"));
    let format = Format::of(&output)?;
    let text = std::fs::read_to_string(&args.input)
        .map_err(|error| CliError::runtime(format!("{}: cannot read: {error}", args.input.display())))?;
    let report: PlotReport = serde_json::from_str(&text).map_err(|error| {
        CliError::runtime(format!("{}: not a `pmtx bench --json` report: {error}", args.input.display()))
    })?;
    if report.runs.is_empty() {
        return Err(CliError::runtime(format!("{}: the report has no runs to plot", args.input.display())));
    }
    let layout = Layout::of(&report);
    let (width, height) = (layout.width as u32, layout.height as u32);
    let bytes = match format {
        Format::Svg => {
            let mut canvas = svg::SvgCanvas::new(width, height);
            draw(&mut canvas, &report, &layout, &args.input);
            canvas.finish().into_bytes()
        }
        Format::Png => {
            let mut canvas = raster::RasterCanvas::new(width, height);
            draw(&mut canvas, &report, &layout, &args.input);
            canvas
                .encode_png()
                .map_err(|error| CliError::runtime(format!("{}: cannot encode PNG: {error}", output.display())))?
        }
    };
    std::fs::write(&output, bytes)
        .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", output.display())))?;
    println!("wrote {}", output.display());
    Ok(())
}

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Color(pub u8, pub u8, pub u8);

impl Color {
    const BLACK: Self = Self(0, 0, 0);
    const FRAME: Self = Self(0x33, 0x33, 0x33);
    const GRID: Self = Self(0xdd, 0xdd, 0xdd);
    const MUTED: Self = Self(0x66, 0x66, 0x66);

    /// `#rrggbb`, for SVG.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// A rectangle in logical pixels (y grows downwards).
#[derive(Clone, Copy, Debug)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// How a rectangle is painted.
#[derive(Clone, Copy, Debug)]
pub struct Paint {
    pub fill: Option<Color>,
    pub stroke: Option<Color>,
}

/// Horizontal placement of text relative to its anchor point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// How text is drawn; the anchor point is on the baseline.
#[derive(Clone, Copy, Debug)]
pub struct TextStyle {
    pub size: f64,
    pub bold: bool,
    pub anchor: Anchor,
    pub color: Color,
    /// Clockwise rotation about the anchor point, in degrees.
    pub rotate_degrees: f64,
}

impl TextStyle {
    const LABEL: Self =
        Self { size: 12.0, bold: false, anchor: Anchor::Middle, color: Color::BLACK, rotate_degrees: 0.0 };

    fn anchored(self, anchor: Anchor) -> Self {
        Self { anchor, ..self }
    }
}

/// What the chart layout needs from an output format. Tooltips are kept
/// where the format can show them (SVG) and dropped elsewhere.
pub trait Canvas {
    fn rect(&mut self, rect: Rect, paint: Paint, tip: Option<&str>);
    /// A hairline (one logical pixel wide).
    fn line(&mut self, from: (f64, f64), to: (f64, f64), color: Color);
    fn polyline(&mut self, points: &[(f64, f64)], color: Color, width: f64);
    fn dot(&mut self, center: (f64, f64), radius: f64, color: Color, tip: Option<&str>);
    fn text(&mut self, at: (f64, f64), text: &str, style: TextStyle);
}

/// Smallest chart width; labels, legend names and the title widen it.
const MIN_WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 400.0;
const TITLE_HEIGHT: f64 = 50.0;
/// Width of one character of 12 px text, generous enough for both the
/// raster font (8 px) and typical sans-serif faces.
const CHAR_WIDTH: f64 = 8.0;
/// Title characters are 1.5 times as wide (16 px bold).
const TITLE_CHAR_WIDTH: f64 = 12.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 80.0;

/// Distinct colours for engines (Okabe-Ito, colour-blind safe).
const PALETTE: [Color; 8] = [
    Color(0x00, 0x72, 0xb2),
    Color(0xd5, 0x5e, 0x00),
    Color(0x00, 0x9e, 0x73),
    Color(0xcc, 0x79, 0xa7),
    Color(0xe6, 0x9f, 0x00),
    Color(0x56, 0xb4, 0xe9),
    Color(0xf0, 0xe4, 0x42),
    Color(0x00, 0x00, 0x00),
];
/// Colours of the four latency percentiles.
const PERCENTILE_COLORS: [Color; 4] =
    [Color(0x9e, 0xca, 0xe1), Color(0x42, 0x92, 0xc6), Color(0x08, 0x51, 0x9c), Color(0x08, 0x30, 0x6b)];
const PERCENTILE_NAMES: [&str; 4] = ["p50", "p90", "p99", "p99.9"];

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
    fn panel(index: usize, layout: &Layout) -> Self {
        Self {
            left: LEFT,
            top: TITLE_HEIGHT + index as f64 * PANEL_HEIGHT + TOP,
            width: layout.width - LEFT - layout.right,
            height: PANEL_HEIGHT - TOP - BOTTOM,
        }
    }

    fn bottom(&self) -> f64 {
        self.top + self.height
    }

    fn right(&self) -> f64 {
        self.left + self.width
    }

    fn center_x(&self) -> f64 {
        self.left + self.width / 2.0
    }
}

/// The chart's size, computed before drawing so that long engine names,
/// run labels and titles fit instead of running off the canvas.
struct Layout {
    title: String,
    width: f64,
    height: f64,
    /// Right margin (legend).
    right: f64,
    /// Run labels under the latency bars stand vertically.
    vertical_labels: bool,
}

impl Layout {
    fn of(report: &PlotReport) -> Self {
        let title = title(&report.config);
        let legend_chars = report.runs.iter().map(|run| run.engine.chars().count()).max().unwrap_or(0).max(5);
        let right = RIGHT.max(48.0 + legend_chars as f64 * CHAR_WIDTH);
        let label_chars = report.runs.iter().map(|run| run_label(run).chars().count()).max().unwrap_or(0);
        let mut width = MIN_WIDTH.max(title.chars().count() as f64 * TITLE_CHAR_WIDTH + 40.0);
        width = width.max(MIN_WIDTH - RIGHT + right);
        let slot = (width - LEFT - right) / report.runs.len().max(1) as f64;
        let vertical_labels = label_chars as f64 * CHAR_WIDTH > slot - 6.0;
        let mut height = TITLE_HEIGHT + 2.0 * PANEL_HEIGHT;
        if vertical_labels {
            height = height - BOTTOM + 16.0 + label_chars as f64 * CHAR_WIDTH + 12.0;
            height = height.max(TITLE_HEIGHT + 2.0 * PANEL_HEIGHT);
        }
        Self { title, width: width.ceil(), height: height.ceil(), right, vertical_labels }
    }
}

/// "engine xT", the label of one run.
fn run_label(run: &PlotRun) -> String {
    format!("{} x{}", run.engine, run.threads)
}

fn title(c: &PlotConfig) -> String {
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
    title
}

/// Lays the whole chart out on `canvas`.
fn draw(canvas: &mut dyn Canvas, report: &PlotReport, layout: &Layout, input: &Path) {
    let center = layout.width / 2.0;
    canvas.text((center, 28.0), &layout.title, TextStyle { size: 16.0, bold: true, ..TextStyle::LABEL });
    canvas.text(
        (center, 44.0),
        &input.display().to_string(),
        TextStyle { size: 10.0, color: Color::MUTED, ..TextStyle::LABEL },
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

    let area = Area::panel(0, layout);
    if threads.len() > 1 {
        throughput_lines(canvas, report, &area, &engines, &threads, &color);
    } else {
        throughput_bars(canvas, report, &area, threads[0], &color);
    }
    latency_bars(canvas, report, &Area::panel(1, layout), layout.vertical_labels);
}

/// Horizontal grid lines and labels of a linear y axis from 0 to the
/// returned maximum.
fn linear_y_axis(canvas: &mut dyn Canvas, area: &Area, max_value: f64, label: &str) -> f64 {
    let step = nice_step(max_value * 1.05, 5);
    let top_value = (max_value * 1.05 / step).ceil().max(1.0) * step;
    let mut value = 0.0;
    while value <= top_value * 1.000_001 {
        let y = area.bottom() - value / top_value * area.height;
        canvas.line((area.left, y), (area.right(), y), Color::GRID);
        canvas.text((area.left - 6.0, y + 4.0), &format_si(value), TextStyle::LABEL.anchored(Anchor::End));
        value += step;
    }
    axis_frame(canvas, area, label);
    top_value
}

fn axis_frame(canvas: &mut dyn Canvas, area: &Area, y_label: &str) {
    let frame = Rect { x: area.left, y: area.top, width: area.width, height: area.height };
    canvas.rect(frame, Paint { fill: None, stroke: Some(Color::FRAME) }, None);
    canvas.text(
        (area.left - 62.0, area.top + area.height / 2.0),
        y_label,
        TextStyle { rotate_degrees: -90.0, ..TextStyle::LABEL },
    );
}

fn panel_title(canvas: &mut dyn Canvas, area: &Area, title: &str) {
    canvas.text((area.center_x(), area.top - 12.0), title, TextStyle { size: 14.0, bold: true, ..TextStyle::LABEL });
}

fn legend(canvas: &mut dyn Canvas, area: &Area, entries: &[(String, Color)]) {
    let x = area.right() + 16.0;
    for (index, (name, color)) in entries.iter().enumerate() {
        let y = area.top + 10.0 + index as f64 * 20.0;
        let swatch = Rect { x, y: y - 9.0, width: 14.0, height: 10.0 };
        canvas.rect(swatch, Paint { fill: Some(*color), stroke: None }, None);
        canvas.text((x + 20.0, y), name, TextStyle::LABEL.anchored(Anchor::Start));
    }
}

fn throughput_lines(
    canvas: &mut dyn Canvas,
    report: &PlotReport,
    area: &Area,
    engines: &[&str],
    threads: &[usize],
    color: &dyn Fn(&str) -> Color,
) {
    panel_title(canvas, area, "Throughput (committed transactions per second)");
    let max_tps = report.runs.iter().map(|run| run.throughput_tps).fold(0.0, f64::max);
    let top = linear_y_axis(canvas, area, max_tps, "transactions / s");
    let max_threads = *threads.last().unwrap_or(&1) as f64;
    let x_of = |t: usize| area.left + 20.0 + (t as f64 / max_threads) * (area.width - 40.0);
    let y_of = |tps: f64| area.bottom() - tps / top * area.height;
    let mut last_label = f64::NEG_INFINITY;
    for &t in threads {
        let x = x_of(t);
        canvas.line((x, area.bottom()), (x, area.bottom() + 5.0), Color::FRAME);
        if x - last_label >= 24.0 {
            canvas.text((x, area.bottom() + 18.0), &t.to_string(), TextStyle::LABEL);
            last_label = x;
        }
    }
    canvas.text((area.center_x(), area.bottom() + 40.0), "worker threads", TextStyle::LABEL);
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
        let path: Vec<(f64, f64)> = points.iter().map(|(t, tps)| (x_of(*t), y_of(*tps))).collect();
        canvas.polyline(&path, stroke, 2.0);
        for (t, tps) in &points {
            let tip = format!("{engine} x{t}: {} tps", format_si(*tps));
            canvas.dot((x_of(*t), y_of(*tps)), 4.0, stroke, Some(&tip));
        }
        entries.push((engine.to_string(), stroke));
    }
    legend(canvas, area, &entries);
}

fn throughput_bars(
    canvas: &mut dyn Canvas,
    report: &PlotReport,
    area: &Area,
    threads: usize,
    color: &dyn Fn(&str) -> Color,
) {
    panel_title(canvas, area, &format!("Throughput with {threads} thread{}", if threads == 1 { "" } else { "s" }));
    let max_tps = report.runs.iter().map(|run| run.throughput_tps).fold(0.0, f64::max);
    let top = linear_y_axis(canvas, area, max_tps, "transactions / s");
    let slot = area.width / report.runs.len() as f64;
    let bar = (slot * 0.6).min(120.0);
    for (index, run) in report.runs.iter().enumerate() {
        let center = area.left + slot * (index as f64 + 0.5);
        let height = run.throughput_tps / top * area.height;
        let tip = format!("{}: {} tps", run.engine, format_si(run.throughput_tps));
        let shape = Rect { x: center - bar / 2.0, y: area.bottom() - height, width: bar, height };
        canvas.rect(shape, Paint { fill: Some(color(&run.engine)), stroke: None }, Some(&tip));
        canvas.text((center, area.bottom() - height - 5.0), &format_si(run.throughput_tps), TextStyle::LABEL);
        canvas.text((center, area.bottom() + 18.0), &run.engine, TextStyle::LABEL);
    }
}

fn latency_bars(canvas: &mut dyn Canvas, report: &PlotReport, area: &Area, vertical_labels: bool) {
    panel_title(canvas, area, "Latency to durable acknowledgement (log scale)");
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
        canvas.line((area.left, y), (area.right(), y), Color::GRID);
        canvas.text((area.left - 6.0, y + 4.0), &format_latency(value), TextStyle::LABEL.anchored(Anchor::End));
    }
    axis_frame(canvas, area, "latency");
    let slot = area.width / report.runs.len() as f64;
    let group = (slot * 0.8).min(160.0);
    let bar = group / 4.0;
    for (index, run) in report.runs.iter().enumerate() {
        let center = area.left + slot * (index as f64 + 0.5);
        for (k, value) in values(run).into_iter().enumerate() {
            if value <= 0.0 || !value.is_finite() {
                continue;
            }
            let y = y_of(value);
            let tip = format!("{} x{}: {} {}", run.engine, run.threads, PERCENTILE_NAMES[k], format_latency(value));
            let shape =
                Rect { x: center - group / 2.0 + k as f64 * bar, y, width: bar - 1.0, height: area.bottom() - y };
            canvas.rect(shape, Paint { fill: Some(PERCENTILE_COLORS[k]), stroke: None }, Some(&tip));
        }
        let label = run_label(run);
        if vertical_labels {
            // Reads bottom to top and ends just under the axis.
            let at = (center + 4.0, area.bottom() + 8.0);
            canvas.text(at, &label, TextStyle { anchor: Anchor::End, rotate_degrees: -90.0, ..TextStyle::LABEL });
        } else {
            canvas.text((center, area.bottom() + 18.0), &label, TextStyle::LABEL);
        }
    }
    let entries: Vec<(String, Color)> =
        PERCENTILE_NAMES.iter().zip(PERCENTILE_COLORS).map(|(name, color)| (name.to_string(), color)).collect();
    legend(canvas, area, &entries);
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

    fn svg_of(report: &PlotReport) -> String {
        let layout = Layout::of(report);
        let mut canvas = svg::SvgCanvas::new(layout.width as u32, layout.height as u32);
        draw(&mut canvas, report, &layout, Path::new("r.json"));
        canvas.finish()
    }

    fn two_engines() -> PlotReport {
        PlotReport {
            config: PlotConfig { workload: "smallbank".into(), ..Default::default() },
            runs: vec![
                run("silo", 1, 1e6),
                run("silo", 2, 1.9e6),
                run("group-commit", 1, 8e5),
                run("group-commit", 2, 1.5e6),
            ],
        }
    }

    #[test]
    fn renders_lines_and_bars() {
        let svg = svg_of(&two_engines());
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        let single = PlotReport { config: PlotConfig::default(), runs: vec![run("a<b", 4, 0.0), run("c", 4, 3.0)] };
        let svg = svg_of(&single);
        assert!(svg.contains("a&lt;b") && !svg.contains("<polyline"));
    }

    #[test]
    fn output_format_follows_the_extension() {
        assert_eq!(Format::of(Path::new("a/r.svg")).unwrap(), Format::Svg);
        assert_eq!(Format::of(Path::new("r.PNG")).unwrap(), Format::Png);
        assert!(Format::of(Path::new("r.jpg")).is_err());
        assert!(Format::of(Path::new("r")).is_err());
    }

    /// The PNG decodes to the chart's size, and the pixels where the
    /// layout put the legend swatches and the frame have their colours.
    #[test]
    fn png_decodes_and_shows_the_layout() {
        let report = two_engines();
        let layout = Layout::of(&report);
        assert_eq!((layout.width, layout.height), (MIN_WIDTH, TITLE_HEIGHT + 2.0 * PANEL_HEIGHT));
        assert!(!layout.vertical_labels);
        let mut canvas = raster::RasterCanvas::new(layout.width as u32, layout.height as u32);
        draw(&mut canvas, &report, &layout, Path::new("r.json"));
        let (width, height) = canvas.dimensions();
        assert_eq!((width, height), (2 * layout.width as usize, 2 * layout.height as usize));
        let area = Area::panel(0, &layout);
        // First legend swatch: (right + 16 .. +30, top + 1 .. +11), first engine's colour.
        let swatch = (((area.right() + 23.0) * 2.0) as usize, ((area.top + 6.0) * 2.0) as usize);
        assert_eq!(canvas.pixel(swatch.0, swatch.1), PALETTE[0]);
        let second = (swatch.0, swatch.1 + 40);
        assert_eq!(canvas.pixel(second.0, second.1), PALETTE[1]);
        // The frame's left edge, half-way down.
        assert_eq!(
            canvas.pixel((area.left * 2.0) as usize, ((area.top + area.height / 2.0) * 2.0) as usize),
            Color::FRAME
        );
        // A white spot inside the plot area, away from lines and labels.
        assert_eq!(
            canvas.pixel(((area.left + 3.0) * 2.0) as usize, ((area.top + 3.0) * 2.0) as usize),
            Color(255, 255, 255)
        );

        let bytes = canvas.encode_png().unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buffer).unwrap();
        assert_eq!((info.width as usize, info.height as usize), (width, height));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let at = (swatch.1 * width + swatch.0) * 3;
        assert_eq!(&buffer[at..at + 3], &[PALETTE[0].0, PALETTE[0].1, PALETTE[0].2]);
    }

    /// Long engine names widen the chart for the legend, and run labels
    /// too wide for their bar group stand vertically in a taller chart.
    #[test]
    fn long_names_grow_the_chart() {
        let long = "dbxn:nt=off:pad64=off:align256=off";
        let report = PlotReport {
            config: PlotConfig::default(),
            runs: (1..=2).flat_map(|t| [run("silo", t, 1e5), run(long, t, 9e4)]).collect(),
        };
        let short = Layout::of(&two_engines());
        let layout = Layout::of(&report);
        assert!(layout.width > short.width && layout.right >= 36.0 + long.len() as f64 * CHAR_WIDTH);
        let report = PlotReport {
            config: PlotConfig::default(),
            runs: (1..=2).flat_map(|t| (0..7).map(move |k| run(&format!("{long}-{k}"), t, 1e5))).collect(),
        };
        let layout = Layout::of(&report);
        assert!(layout.vertical_labels);
        let label = run_label(&report.runs[0]).len() as f64 * CHAR_WIDTH;
        let latency = Area::panel(1, &layout);
        assert!(layout.height >= latency.bottom() + 8.0 + label, "{} {}", layout.height, latency.bottom() + label);
        let svg = svg_of(&report);
        assert!(svg.contains("rotate(-90"));
    }

    /// Text inks pixels near its anchor, in the right place for its anchor
    /// and rotation, and nowhere else.
    #[test]
    fn raster_text_lands_where_anchored() {
        let inked = |canvas: &raster::RasterCanvas| {
            let (width, height) = canvas.dimensions();
            let mut points = Vec::new();
            for y in 0..height {
                for x in 0..width {
                    if canvas.pixel(x, y) != Color(255, 255, 255) {
                        points.push((x, y));
                    }
                }
            }
            points
        };
        let mut canvas = raster::RasterCanvas::new(100, 100);
        canvas.text((50.0, 50.0), "HH", TextStyle::LABEL.anchored(Anchor::Start));
        let points = inked(&canvas);
        assert!(!points.is_empty());
        // Starts at the anchor, stands on the baseline, two 16-pixel cells wide.
        assert!(points.iter().all(|&(x, y)| (100..132).contains(&x) && (86..100).contains(&y)), "{points:?}");

        let mut canvas = raster::RasterCanvas::new(100, 100);
        canvas.text((50.0, 50.0), "HH", TextStyle::LABEL.anchored(Anchor::End));
        assert!(inked(&canvas).iter().all(|&(x, _)| (68..100).contains(&x)));

        // Rotated by -90 degrees the text runs upwards from the anchor.
        let mut canvas = raster::RasterCanvas::new(100, 100);
        canvas.text(
            (50.0, 50.0),
            "HH",
            TextStyle { rotate_degrees: -90.0, ..TextStyle::LABEL.anchored(Anchor::Start) },
        );
        let points = inked(&canvas);
        assert!(!points.is_empty());
        assert!(points.iter().all(|&(x, y)| (84..102).contains(&x) && (66..102).contains(&y)), "{points:?}");

        // A character the font lacks still draws (as '?'), µ is in the font.
        let mut canvas = raster::RasterCanvas::new(40, 40);
        canvas.text((10.0, 20.0), "µ≥", TextStyle::LABEL.anchored(Anchor::Start));
        let points = inked(&canvas);
        assert!(points.iter().any(|&(x, _)| x < 36) && points.iter().any(|&(x, _)| x >= 36));
    }
}
