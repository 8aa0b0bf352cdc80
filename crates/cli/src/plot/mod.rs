//! `pmtx plot`: draws the JSON results of `pmtx bench` as an SVG or PNG file.
//!
//! Two panels: throughput against threads (one line per engine), or one bar
//! per engine when the file has a single thread count; and the latency
//! percentiles p50/p90/p99/p99.9 of every run on a logarithmic axis. Drawn
//! with plotters ([`chart`]): real `<text>` in SVG, the same chart
//! rasterized for PNG.

pub mod chart;

use crate::CliError;
use chart::{draw_legend, drawing_error, Drawing, Format, Glyph, FONT, LEGEND_WIDTH, PALETTE};
use clap::Args;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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
    let bench = BenchChart { report: &report, input: &args.input };
    let bytes = chart::render(format, bench.size(), &bench)
        .map_err(|error| CliError::runtime(format!("{}: {error}", output.display())))?;
    std::fs::write(&output, bytes)
        .map_err(|error| CliError::runtime(format!("{}: cannot write: {error}", output.display())))?;
    println!("wrote {}", output.display());
    Ok(())
}

/// The bench chart of one report.
struct BenchChart<'a> {
    report: &'a PlotReport,
    input: &'a Path,
}

/// Width of the chart; the legend and long run labels add to it.
const WIDTH: u32 = 1100;
/// Height of each of the two panels.
const PANEL_HEIGHT: u32 = 420;
/// Colours of the four latency percentiles.
const PERCENTILE_COLORS: [RGBColor; 4] =
    [RGBColor(0x9e, 0xca, 0xe1), RGBColor(0x42, 0x92, 0xc6), RGBColor(0x08, 0x51, 0x9c), RGBColor(0x08, 0x30, 0x6b)];
const PERCENTILE_NAMES: [&str; 4] = ["p50", "p90", "p99", "p99.9"];

impl BenchChart<'_> {
    /// Engines in run order.
    fn engines(&self) -> Vec<&str> {
        let mut engines: Vec<&str> = Vec::new();
        for run in &self.report.runs {
            if !engines.contains(&run.engine.as_str()) {
                engines.push(&run.engine);
            }
        }
        engines
    }

    fn threads(&self) -> Vec<usize> {
        let mut threads: Vec<usize> = self.report.runs.iter().map(|run| run.threads).collect();
        threads.sort_unstable();
        threads.dedup();
        threads
    }

    /// Rows the run labels under the latency bars take: labels wider than
    /// their bar group alternate between rows, so each has as many groups'
    /// width as there are rows.
    fn label_rows(&self) -> u32 {
        let label_chars = self.report.runs.iter().map(|run| run_label(run).chars().count()).max().unwrap_or(0);
        let slot = (WIDTH - 100 - LEGEND_WIDTH) as f64 / self.report.runs.len().max(1) as f64;
        ((label_chars as f64 * 7.5 + 8.0) / slot).ceil().clamp(1.0, 8.0) as u32
    }

    /// Height of the latency panel's label area.
    fn label_area(&self) -> u32 {
        32 + 18 * self.label_rows()
    }

    fn size(&self) -> (u32, u32) {
        (WIDTH, 70 + 2 * PANEL_HEIGHT + self.label_area().saturating_sub(50))
    }
}

impl Drawing for BenchChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(drawing_error)?;
        let root = root
            .titled(&title(&self.report.config), (FONT, 20).into_font().style(FontStyle::Bold))
            .map_err(drawing_error)?;
        let (_, height) = root.dim_in_pixel();
        let muted = BLACK.mix(0.6);
        let source = TextStyle::from((FONT, 12).into_font()).color(&muted).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(self.input.display().to_string(), (WIDTH as i32 / 2, 0), source))
            .map_err(drawing_error)?;
        let (top, bottom) = root.split_vertically(PANEL_HEIGHT.min(height));
        let engines = self.engines();
        let threads = self.threads();
        if threads.len() > 1 {
            self.throughput_lines(&top, &engines, &threads)?;
        } else {
            self.throughput_bars(&top, &engines, threads.first().copied().unwrap_or(1))?;
        }
        self.latency_bars(&bottom)
    }
}

impl BenchChart<'_> {
    fn throughput_lines<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        engines: &[&str],
        threads: &[usize],
    ) -> Result<(), String> {
        let max = self.report.runs.iter().map(|run| run.throughput_tps).fold(0.0, f64::max).max(1.0);
        let (first, last) = (threads[0] as f64, threads[threads.len() - 1] as f64);
        let pad = ((last - first) * 0.05).max(0.1);
        let mut chart = ChartBuilder::on(area)
            .caption("throughput against threads", (FONT, 16))
            .margin(12)
            .margin_top(24)
            .margin_right(LEGEND_WIDTH as i32)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(first - pad..last + pad, 0.0..max * 1.1)
            .map_err(drawing_error)?;
        chart
            .configure_mesh()
            .x_labels(threads.len().min(12))
            .x_label_formatter(&|x| if (x - x.round()).abs() < 1e-9 { format!("{x:.0}") } else { String::new() })
            .y_label_formatter(&|y| format_si(*y))
            .x_desc("threads")
            .y_desc("committed transactions / s")
            .light_line_style(BLACK.mix(0.03))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(drawing_error)?;
        for (index, engine) in engines.iter().enumerate() {
            let color = PALETTE[index % PALETTE.len()];
            let mut points: Vec<(f64, f64)> = self
                .report
                .runs
                .iter()
                .filter(|run| run.engine == *engine)
                .map(|run| (run.threads as f64, run.throughput_tps))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2))).map_err(drawing_error)?;
            chart
                .draw_series(points.iter().map(|point| Circle::new(*point, 4, color.filled())))
                .map_err(drawing_error)?;
        }
        let entries: Vec<(Glyph, String)> = engines
            .iter()
            .enumerate()
            .map(|(index, engine)| (Glyph::Line(PALETTE[index % PALETTE.len()], 3), engine.to_string()))
            .collect();
        legend(area, &entries)
    }

    fn throughput_bars<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        engines: &[&str],
        threads: usize,
    ) -> Result<(), String> {
        let max = self.report.runs.iter().map(|run| run.throughput_tps).fold(0.0, f64::max).max(1.0);
        let count = self.report.runs.len();
        let mut chart = ChartBuilder::on(area)
            .caption(format!("throughput, {threads} thread(s)"), (FONT, 16))
            .margin(12)
            .margin_top(24)
            .margin_right(LEGEND_WIDTH as i32)
            .x_label_area_size(20)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..count as f64 - 0.5, 0.0..max * 1.15)
            .map_err(drawing_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&|y| format_si(*y))
            .y_desc("committed transactions / s")
            .light_line_style(BLACK.mix(0.03))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(drawing_error)?;
        for (index, engine) in engines.iter().enumerate() {
            let color = PALETTE[index % PALETTE.len()];
            let bars = self.report.runs.iter().enumerate().filter(|(_, run)| run.engine == *engine).map(|(at, run)| {
                Rectangle::new([(at as f64 - 0.35, 0.0), (at as f64 + 0.35, run.throughput_tps)], color.filled())
            });
            chart.draw_series(bars).map_err(drawing_error)?;
            let values =
                self.report.runs.iter().enumerate().filter(|(_, run)| run.engine == *engine).map(|(at, run)| {
                    Text::new(
                        format_si(run.throughput_tps),
                        (at as f64, run.throughput_tps),
                        TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )
                });
            chart.draw_series(values).map_err(drawing_error)?;
        }
        let entries: Vec<(Glyph, String)> = engines
            .iter()
            .enumerate()
            .map(|(index, engine)| (Glyph::Band(PALETTE[index % PALETTE.len()]), engine.to_string()))
            .collect();
        legend(area, &entries)
    }

    fn latency_bars<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let runs = &self.report.runs;
        let values = runs.iter().flat_map(percentiles).filter(|value| *value > 0.0);
        let (low, high) = values.fold((f64::MAX, f64::MIN), |(low, high), value| (low.min(value), high.max(value)));
        let (low, high) = if low > high { (1.0, 10.0) } else { (low / 2.0, high * 2.0) };
        let mut chart = ChartBuilder::on(area)
            .caption("latency to the durable acknowledgement", (FONT, 16))
            .margin(12)
            .margin_top(24)
            .margin_right(LEGEND_WIDTH as i32)
            .x_label_area_size(self.label_area())
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5..runs.len() as f64 - 0.5, (low..high).log_scale())
            .map_err(drawing_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&|y| format_latency(*y))
            .y_desc("latency (log scale)")
            .light_line_style(BLACK.mix(0.03))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(drawing_error)?;
        for (slot, color) in PERCENTILE_COLORS.into_iter().enumerate() {
            let bars = runs.iter().enumerate().map(|(at, run)| {
                let left = at as f64 - 0.4 + slot as f64 * 0.2;
                let value = percentiles(run)[slot].max(low);
                Rectangle::new([(left, low), (left + 0.18, value)], color.filled())
            });
            chart.draw_series(bars).map_err(drawing_error)?;
        }
        // Run labels under their bars, alternating between rows when wider
        // than a bar group.
        let rows = self.label_rows() as i32;
        let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        let (origin_x, origin_y) = area.get_base_pixel();
        for (at, run) in runs.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(at as f64, low));
            let (x, y) = (x - origin_x, y - origin_y);
            let row = at as i32 % rows;
            let tick = y + 4 + 18 * row;
            area.draw(&PathElement::new(vec![(x, y), (x, tick)], BLACK.mix(0.3).stroke_width(1)))
                .map_err(drawing_error)?;
            area.draw(&Text::new(run_label(run), (x, tick + 2), style.clone())).map_err(drawing_error)?;
        }
        let entries: Vec<(Glyph, String)> = PERCENTILE_NAMES
            .iter()
            .zip(PERCENTILE_COLORS)
            .map(|(name, color)| (Glyph::Band(color), name.to_string()))
            .collect();
        legend(area, &entries)
    }
}

fn percentiles(run: &PlotRun) -> [f64; 4] {
    let latency = &run.latency_us;
    [latency.p50, latency.p90, latency.p99, latency.p999]
}

/// The legend of a panel, in its right column.
fn legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[(Glyph, String)]) -> Result<(), String> {
    let (width, _) = area.dim_in_pixel();
    draw_legend(area, (width as i32 - LEGEND_WIDTH as i32 + 20, 60), entries)
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
pub(crate) fn format_latency(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", format_si(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", format_si(us / 1e3))
    } else {
        format!("{} µs", format_si(us))
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
        assert_eq!(format_si(1_234_567.0), "1.23M");
        assert_eq!(format_si(45_000.0), "45k");
        assert_eq!(format_si(12.0), "12");
        assert_eq!(format_si(0.5), "0.5");
        assert_eq!(format_latency(41_000.0), "41 ms");
        assert_eq!(format_latency(10.0), "10 µs");
    }

    fn render(report: &PlotReport, format: Format) -> Vec<u8> {
        let bench = BenchChart { report, input: Path::new("r.json") };
        chart::render(format, bench.size(), &bench).unwrap()
    }

    fn svg_of(report: &PlotReport) -> String {
        String::from_utf8(render(report, Format::Svg)).unwrap()
    }

    /// The text of every `<text>` element.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .map(|text| text.split_once('>').unwrap().1.split("</text>").next().unwrap().trim().to_string())
            .collect()
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

    /// Several thread counts: one line per engine, each named in the
    /// legend, with the percentiles' legend and the axis titles as real
    /// text.
    #[test]
    fn renders_a_line_per_engine_with_real_text() {
        let svg = svg_of(&two_engines());
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts = texts(&svg);
        for expected in ["pmtx bench: smallbank", "silo", "group-commit", "p50", "p99.9", "threads", "silo x2"] {
            assert!(texts.iter().any(|text| text == expected), "no <text>{expected}</text> in {texts:?}");
        }
        // One line per engine in its colour (and its legend glyph), two
        // points on each.
        for color in ["#0072B2", "#D55E00"] {
            let lines = svg.lines().filter(|line| line.starts_with("<polyline") && line.contains(color)).count();
            assert_eq!(lines, 2, "{color}");
        }
        assert_eq!(svg.matches("<circle").count(), 4);
        // Four latency bars per run.
        assert!(svg.matches("<rect").count() >= 16);
    }

    /// One thread count: a bar per run with its value, names escaped.
    #[test]
    fn renders_bars_for_one_thread_count() {
        let single = PlotReport { config: PlotConfig::default(), runs: vec![run("a<b", 4, 0.0), run("c", 4, 3.0)] };
        let svg = svg_of(&single);
        let texts = texts(&svg);
        assert!(texts.iter().any(|text| text == "a&lt;b"), "{texts:?}");
        assert!(texts.iter().any(|text| text == "throughput, 4 thread(s)"), "{texts:?}");
        assert!(!svg.lines().any(|line| line.starts_with("<polyline") && line.contains("#0072B2")));
    }

    /// The PNG decodes to the chart's size and is not blank where the
    /// title stands.
    #[test]
    fn png_decodes_with_text_drawn() {
        let report = two_engines();
        let bench = BenchChart { report: &report, input: Path::new("r.json") };
        let (width, height) = bench.size();
        let bytes = render(&report, Format::Png);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buffer).unwrap();
        assert_eq!((info.width, info.height), (width, height));
        // The title's band (top 30 rows, middle third) has dark pixels.
        let dark = (0..30)
            .flat_map(|y| (width / 3..2 * width / 3).map(move |x| (x, y)))
            .filter(|(x, y)| buffer[((*y * width + *x) * 3) as usize] < 100)
            .count();
        assert!(dark > 50, "{dark} dark pixels in the title band");
    }

    /// Long run labels alternate between rows in a taller chart.
    #[test]
    fn long_names_grow_the_chart() {
        let long = "dbxn:nt=off:pad64=off:align256=off";
        let report = PlotReport {
            config: PlotConfig::default(),
            runs: (1..=2).flat_map(|t| (0..7).map(move |k| run(&format!("{long}-{k}"), t, 1e5))).collect(),
        };
        let bench = BenchChart { report: &report, input: Path::new("r.json") };
        let short = BenchChart { report: &two_engines(), input: Path::new("r.json") }.size();
        assert!(bench.size().1 > short.1);
        assert!(bench.label_rows() > 1);
        let svg = svg_of(&report);
        let texts = texts(&svg);
        assert!(texts.iter().any(|text| text == &format!("{long}-6 x2")), "{texts:?}");
    }
}
