//! What the charts of `pmtx plot` and `pmtx report` share: the font, the
//! output formats and the claims chart (each claim's ratio over the
//! rounds beside the paper's range).
//!
//! Charts are drawn with plotters: its SVG backend writes real `<text>`
//! elements, its bitmap backend rasterizes the same chart for PNG. Text is
//! measured (and, in PNG, drawn) with DejaVu Sans, compiled into the
//! binary (`crates/cli/assets`), so labels are placed the same on every
//! machine; an SVG names the family `sans-serif`, which viewers draw with
//! their own sans-serif face.

use crate::CliError;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use std::sync::Once;

/// The family every chart's text uses.
pub const FONT: &str = "sans-serif";

static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Registers the compiled-in face under [`FONT`] (once per process).
pub fn register_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            if plotters::style::register_font(FONT, style, DEJAVU_SANS).is_err() {
                panic!("the compiled-in DejaVu Sans does not parse");
            }
        }
    });
}

/// The output formats, chosen by the output's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

impl Format {
    pub fn of(path: &Path) -> Result<Self, CliError> {
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

/// A drawing error as text.
pub fn drawing_error(error: impl std::fmt::Display) -> String {
    format!("cannot draw the chart: {error}")
}

/// A chart that draws on any plotters backend.
pub trait Drawing {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `chart` on `size` pixels into the bytes of `format` (SVG text, or
/// a PNG encoded with the `png` crate).
pub fn render(format: Format, size: (u32, u32), chart: &impl Drawing) -> Result<Vec<u8>, String> {
    register_font();
    match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                chart.draw(root)?;
            }
            Ok(svg.into_bytes())
        }
        Format::Png => {
            let mut pixels = vec![255u8; size.0 as usize * size.1 as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
                chart.draw(root)?;
            }
            let mut bytes = Vec::new();
            let mut encoder = png::Encoder::new(&mut bytes, size.0, size.1);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().map_err(|error| format!("cannot encode PNG: {error}"))?;
            writer.write_image_data(&pixels).map_err(|error| format!("cannot encode PNG: {error}"))?;
            writer.finish().map_err(|error| format!("cannot encode PNG: {error}"))?;
            Ok(bytes)
        }
    }
}

/// Distinct colours for engines (Okabe-Ito, colour-blind safe).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x99, 0x88, 0x22),
    RGBColor(0x00, 0x00, 0x00),
];

/// One claim as the claims chart draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimBar {
    /// The label on the left (short).
    pub label: String,
    /// The paper's range (`f64::MAX` above: no upper end; below
    /// `f64::MIN_POSITIVE`: no lower end).
    pub paper: (f64, f64),
    /// Our median, the interval of the median the verdict weighs, and
    /// every round's value.
    pub median: f64,
    pub ci: (f64, f64),
    pub per_round: Vec<f64>,
    /// The verdict, as written in `verdicts.json`.
    pub verdict: String,
}

/// The colour of a verdict.
pub fn verdict_color(verdict: &str) -> RGBColor {
    match verdict {
        "reproduced" => RGBColor(0x00, 0x9e, 0x73),
        "direction" => RGBColor(0x00, 0x72, 0xb2),
        "inconclusive" => RGBColor(0xe6, 0x9f, 0x00),
        "not reproduced" => RGBColor(0xd5, 0x5e, 0x00),
        _ => RGBColor(0x88, 0x88, 0x88),
    }
}

const PAPER_FILL: RGBColor = RGBColor(0xcc, 0xcc, 0xcc);

/// The size of the claims chart for `count` claims.
pub fn claims_size(count: usize) -> (u32, u32) {
    (1240, 150 + 50 * count.max(1) as u32)
}

/// Width of the legend column right of a chart.
pub const LEGEND_WIDTH: u32 = 250;

/// How a legend entry is drawn.
#[derive(Clone, Copy, Debug)]
pub enum Glyph {
    /// A filled box.
    Band(RGBColor),
    /// A line of this width.
    Line(RGBColor, u32),
    /// A dot.
    Dot(RGBColor),
}

/// A legend in the column right of a chart: entries from `top` down, at
/// `left` (pixels of `root`).
pub fn draw_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (left, top): (i32, i32),
    entries: &[(Glyph, String)],
) -> Result<(), String> {
    let style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (index, (glyph, label)) in entries.iter().enumerate() {
        let y = top + 22 * index as i32;
        match *glyph {
            Glyph::Band(color) => root.draw(&Rectangle::new([(left, y - 6), (left + 20, y + 6)], color.filled())),
            Glyph::Line(color, width) => {
                root.draw(&PathElement::new(vec![(left, y), (left + 20, y)], color.stroke_width(width)))
            }
            Glyph::Dot(color) => root.draw(&Circle::new((left + 10, y), 6, color.filled())),
        }
        .map_err(drawing_error)?;
        root.draw(&Text::new(label.clone(), (left + 28, y), style.clone())).map_err(drawing_error)?;
    }
    Ok(())
}

/// The claims chart of a figure.
pub struct ClaimsChart<'a> {
    pub title: &'a str,
    pub claims: &'a [ClaimBar],
    /// Ratios on a logarithmic axis; else counts on a linear one.
    pub log: bool,
}

impl Drawing for ClaimsChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String> {
        draw_claims(root, self.title, self.claims, self.log)
    }
}

/// The claims chart: one row per claim, the paper's range as a grey band,
/// ours as a dot at the median (coloured by verdict), a thick bar over the
/// interval of the median and a thin error bar over every round (min to
/// max), each round a small tick. Ratios (`log`) on a logarithmic axis with
/// a line at 1; counts on a linear one.
fn draw_claims<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    claims: &[ClaimBar],
    log: bool,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(drawing_error)?;
    let values = claims.iter().flat_map(|claim| {
        let finite = |value: f64| value.is_finite() && value > f64::MIN_POSITIVE && value < f64::MAX / 2.0;
        let paper = [claim.paper.0, claim.paper.1].into_iter().filter(move |value| finite(*value));
        claim.per_round.iter().copied().chain([claim.median]).chain(paper)
    });
    let (mut low, mut high) = values.fold((f64::MAX, f64::MIN), |(low, high), value| (low.min(value), high.max(value)));
    if low > high {
        (low, high) = (1.0, 1.0);
    }
    let rows = claims.len().max(1) as f64;
    // Row 0 at the top.
    let y_range = (rows - 0.5)..-0.5;
    let label_width = 20 + 8 * claims.iter().map(|claim| claim.label.chars().count()).max().unwrap_or(4) as u32;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, (FONT, 22).into_font().style(FontStyle::Bold))
        .margin(14)
        .margin_right(LEGEND_WIDTH as i32)
        .x_label_area_size(46)
        .y_label_area_size(label_width.min(500));
    if log {
        low = low.min(1.0) / 1.25;
        high = high.max(1.0) * 1.25;
        let mut chart = builder.build_cartesian_2d((low..high).log_scale(), y_range).map_err(drawing_error)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_label_formatter(&|x| format_ratio(*x))
            .x_desc("ratio (log scale); 1 = no difference")
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(drawing_error)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(1.0, -0.5), (1.0, rows - 0.5)],
                BLACK.mix(0.6).stroke_width(1),
            )))
            .map_err(drawing_error)?;
        draw_claim_rows(&mut chart, claims, (low, high))?;
        draw_row_labels(&root, &chart, claims, low)?;
        claims_legend(&root, claims)
    } else {
        low = 0.0;
        high = if high <= 0.0 { 1.0 } else { high * 1.15 };
        let mut chart = builder.build_cartesian_2d(low..high, y_range).map_err(drawing_error)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_label_formatter(&|x| format_ratio(*x))
            .x_desc("count per transaction or per run")
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(drawing_error)?;
        draw_claim_rows(&mut chart, claims, (low, high))?;
        draw_row_labels(&root, &chart, claims, low)?;
        claims_legend(&root, claims)
    }
}

/// What the claims chart's marks mean.
fn claims_legend<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, claims: &[ClaimBar]) -> Result<(), String> {
    let mut entries = vec![
        (Glyph::Band(PAPER_FILL), "paper's value or range".to_string()),
        (Glyph::Line(BLACK, 1), "every round (min-max, ticks)".to_string()),
        (Glyph::Line(BLACK, 5), "interval of the median".to_string()),
    ];
    for claim in claims {
        let entry = format!("median: {}", claim.verdict);
        if !entries.iter().any(|(_, label)| *label == entry) {
            entries.push((Glyph::Dot(verdict_color(&claim.verdict)), entry));
        }
    }
    let (width, _) = root.dim_in_pixel();
    draw_legend(root, (width as i32 - LEGEND_WIDTH as i32 + 20, 70), &entries)
}

/// Each claim's label, left of its row, in the label area.
fn draw_row_labels<'a, DB, X>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    claims: &[ClaimBar],
    low: f64,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
{
    let style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (row, claim) in claims.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(low, row as f64));
        root.draw(&Text::new(claim.label.clone(), (x - 8, y), style.clone())).map_err(drawing_error)?;
    }
    Ok(())
}

fn draw_claim_rows<'a, DB, X>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    claims: &[ClaimBar],
    (low, high): (f64, f64),
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
{
    let clip = |value: f64| value.clamp(low, high);
    // The paper's ranges, a point value as a narrow band.
    chart
        .draw_series(claims.iter().enumerate().map(|(row, claim)| {
            let y = row as f64;
            let (mut from, mut to) = (clip(claim.paper.0), clip(claim.paper.1));
            if from == to {
                from = clip(from * 0.985);
                to = clip(to * 1.015);
            }
            Rectangle::new([(from, y - 0.32), (to, y + 0.32)], PAPER_FILL.filled())
        }))
        .map_err(drawing_error)?;
    // Every round: a thin error bar from the least to the largest, with
    // caps, and a tick per round.
    let ink = BLACK.mix(0.75);
    let mut whiskers = Vec::new();
    for (row, claim) in claims.iter().enumerate() {
        let y = row as f64;
        let (min, max) =
            claim.per_round.iter().fold((f64::MAX, f64::MIN), |(min, max), value| (min.min(*value), max.max(*value)));
        if min > max {
            continue;
        }
        whiskers.push(PathElement::new(vec![(clip(min), y), (clip(max), y)], ink.stroke_width(1)));
        for end in [min, max] {
            whiskers.push(PathElement::new(vec![(clip(end), y - 0.14), (clip(end), y + 0.14)], ink.stroke_width(1)));
        }
        for value in &claim.per_round {
            whiskers
                .push(PathElement::new(vec![(clip(*value), y - 0.07), (clip(*value), y + 0.07)], ink.stroke_width(1)));
        }
    }
    chart.draw_series(whiskers).map_err(drawing_error)?;
    // The interval of the median.
    chart
        .draw_series(claims.iter().enumerate().map(|(row, claim)| {
            let y = row as f64;
            PathElement::new(vec![(clip(claim.ci.0), y), (clip(claim.ci.1), y)], BLACK.stroke_width(5))
        }))
        .map_err(drawing_error)?;
    // The median, coloured by verdict.
    let mut shown: Vec<&str> = Vec::new();
    for claim in claims {
        if !shown.contains(&claim.verdict.as_str()) {
            shown.push(&claim.verdict);
        }
    }
    for verdict in shown {
        let color = verdict_color(verdict);
        chart
            .draw_series(
                claims
                    .iter()
                    .enumerate()
                    .filter(|(_, claim)| claim.verdict == verdict)
                    .map(|(row, claim)| Circle::new((clip(claim.median), row as f64), 4, color.filled())),
            )
            .map_err(drawing_error)?;
    }
    Ok(())
}

/// A ratio or count on an axis or label: 3 significant digits, no
/// trailing zeros ("0.5", "1.25", "2720").
pub fn format_ratio(value: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    let digits = (2 - value.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{value:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(label: &str, verdict: &str, per_round: &[f64]) -> ClaimBar {
        let mut sorted = per_round.to_vec();
        sorted.sort_by(f64::total_cmp);
        ClaimBar {
            label: label.into(),
            paper: (1.5, 1.8),
            median: sorted[sorted.len() / 2],
            ci: (sorted[0], sorted[sorted.len() - 1]),
            per_round: per_round.to_vec(),
            verdict: verdict.into(),
        }
    }

    #[test]
    fn ratios_have_three_significant_digits() {
        assert_eq!(format_ratio(0.5), "0.5");
        assert_eq!(format_ratio(1.254), "1.25");
        assert_eq!(format_ratio(2720.0), "2720");
        assert_eq!(format_ratio(0.0123), "0.0123");
        assert_eq!(format_ratio(0.0), "0");
    }

    /// The claims chart is an SVG with real text: each claim's label, the
    /// legend of every verdict shown, and the axis; one dot per claim and a
    /// band per paper range.
    #[test]
    fn the_claims_chart_has_text_and_one_row_per_claim() {
        let claims = [
            claim("zen over mmdb", "reproduced", &[1.6, 1.7, 1.65]),
            claim("zen over wbl <P=4>", "inconclusive", &[0.9, 1.2, 1.4]),
            ClaimBar { paper: (1.000_001, f64::MAX), ..claim("direction only", "direction", &[3.0, 3.1, 2.9]) },
        ];
        let size = claims_size(claims.len());
        let chart = ClaimsChart { title: "Fig. 8", claims: &claims, log: true };
        let svg = String::from_utf8(render(Format::Svg, size, &chart).unwrap()).unwrap();
        if let Some(path) = std::env::var_os("PMTX_CHART_SAMPLE") {
            std::fs::write(path, &svg).unwrap();
        }
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts: Vec<&str> = svg.split("<text").skip(1).map(|text| text.split_once('>').unwrap().1).collect();
        let has = |needle: &str| texts.iter().any(|text| text.contains(needle));
        for needle in [
            "Fig. 8",
            "zen over mmdb",
            "zen over wbl &lt;P=4&gt;",
            "direction only",
            "median: reproduced",
            "median: inconclusive",
            "median: direction",
            "value or range",
            "ratio (log scale)",
        ] {
            assert!(has(needle), "no <text> with {needle:?} in {texts:?}");
        }
        assert!(svg.contains(r#"font-family="sans-serif""#));
        // Three dots plus three legend glyphs.
        assert_eq!(svg.matches("<circle").count(), 6);
        let png = render(Format::Png, size, &chart).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    }

    #[test]
    fn output_format_follows_the_extension() {
        assert_eq!(Format::of(Path::new("a/r.svg")).unwrap(), Format::Svg);
        assert_eq!(Format::of(Path::new("r.PNG")).unwrap(), Format::Png);
        assert!(Format::of(Path::new("r.jpg")).is_err());
        assert!(Format::of(Path::new("r")).is_err());
    }
}
