//! The SVG canvas: every drawing call becomes one element. Text uses the
//! generic `sans-serif` family, so the file needs no font files, and marks
//! carry `<title>` tooltips with their exact values.

use super::{Anchor, Canvas, Color, Paint, Rect, TextStyle};
use std::fmt::Write as _;

/// Builds an SVG document in memory.
pub struct SvgCanvas {
    document: String,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn tooltip(tip: Option<&str>) -> String {
    tip.map(|tip| format!("<title>{}</title>", escape(tip))).unwrap_or_default()
}

impl SvgCanvas {
    /// An empty white canvas of the given size in pixels.
    pub fn new(width: u32, height: u32) -> Self {
        let mut document = String::new();
        let _ = writeln!(
            document,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(document, r#"<rect width="100%" height="100%" fill="white"/>"#);
        Self { document }
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.document.push_str("</svg>\n");
        self.document
    }
}

impl Canvas for SvgCanvas {
    fn rect(&mut self, rect: Rect, paint: Paint, tip: Option<&str>) {
        let fill = paint.fill.map_or("none".to_string(), Color::hex);
        let stroke = paint.stroke.map(|c| format!(r#" stroke="{}""#, c.hex())).unwrap_or_default();
        let (x, y, w, h) = (rect.x, rect.y, rect.width.max(0.0), rect.height.max(0.0));
        let _ = writeln!(
            self.document,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"{stroke}>{}</rect>"#,
            tooltip(tip)
        );
    }

    fn line(&mut self, from: (f64, f64), to: (f64, f64), color: Color) {
        let _ = writeln!(
            self.document,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}"/>"#,
            from.0,
            from.1,
            to.0,
            to.1,
            color.hex()
        );
    }

    fn polyline(&mut self, points: &[(f64, f64)], color: Color, width: f64) {
        let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            self.document,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{width}"/>"#,
            path.join(" "),
            color.hex()
        );
    }

    fn dot(&mut self, center: (f64, f64), radius: f64, color: Color, tip: Option<&str>) {
        let _ = writeln!(
            self.document,
            r#"<circle cx="{:.1}" cy="{:.1}" r="{radius}" fill="{}">{}</circle>"#,
            center.0,
            center.1,
            color.hex(),
            tooltip(tip)
        );
    }

    fn text(&mut self, at: (f64, f64), text: &str, style: TextStyle) {
        let (x, y) = at;
        let anchor = match style.anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let mut attributes = format!(r#"x="{x:.1}" y="{y:.1}" text-anchor="{anchor}""#);
        if style.size != 12.0 {
            let _ = write!(attributes, r#" font-size="{}""#, style.size);
        }
        if style.bold {
            attributes.push_str(r#" font-weight="bold""#);
        }
        if style.color != Color::BLACK {
            let _ = write!(attributes, r#" fill="{}""#, style.color.hex());
        }
        if style.rotate_degrees != 0.0 {
            let _ = write!(attributes, r#" transform="rotate({} {x:.1} {y:.1})""#, style.rotate_degrees);
        }
        let _ = writeln!(self.document, "<text {attributes}>{}</text>", escape(text));
    }
}
