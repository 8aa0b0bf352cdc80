//! The raster canvas behind `pmtx plot -o FILE.png`: an RGB bitmap drawn
//! at twice the logical size, text from the public-domain 8x8 bitmap font
//! of the `font8x8` crate, encoded by the pure-Rust `png` crate. Nothing
//! here needs system fonts or graphics libraries.

use super::{Anchor, Canvas, Color, Paint, Rect, TextStyle};
use font8x8::legacy::{BASIC_LEGACY, LATIN_LEGACY};

/// Device pixels per logical pixel: the PNG is drawn at double size so the
/// 8x8 glyphs scale to readable text.
const DEVICE_SCALE: f64 = 2.0;

/// An RGB bitmap with a white background.
pub struct RasterCanvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

/// The 8 rows of the glyph for `c` (least significant bit = leftmost
/// pixel); characters the font lacks draw as `?`.
fn glyph(c: char) -> [u8; 8] {
    let code = c as u32;
    match code {
        0x20..=0x7e => BASIC_LEGACY[code as usize],
        0xa0..=0xff => LATIN_LEGACY[(code - 0xa0) as usize],
        _ => BASIC_LEGACY[b'?' as usize],
    }
}

/// Glyph magnification for a logical font size: 12 px text becomes 16
/// device pixels (8 logical), headings 24.
fn glyph_scale(size: f64) -> f64 {
    (size * DEVICE_SCALE / 10.0).round().max(1.0)
}

impl RasterCanvas {
    /// A white canvas of `width` x `height` logical pixels.
    pub fn new(width: u32, height: u32) -> Self {
        let width = (f64::from(width) * DEVICE_SCALE) as usize;
        let height = (f64::from(height) * DEVICE_SCALE) as usize;
        Self { width, height, pixels: vec![255; width * height * 3] }
    }

    /// Size in device pixels.
    #[cfg(test)]
    pub fn dimensions(&self) -> (usize, usize) {
        (self.width, self.height)
    }

    /// The colour of one device pixel (tests read the picture back).
    #[cfg(test)]
    pub fn pixel(&self, x: usize, y: usize) -> Color {
        let at = (y * self.width + x) * 3;
        Color(self.pixels[at], self.pixels[at + 1], self.pixels[at + 2])
    }

    fn put(&mut self, x: i64, y: i64, color: Color) {
        if x < 0 || y < 0 || x as usize >= self.width || y as usize >= self.height {
            return;
        }
        let at = (y as usize * self.width + x as usize) * 3;
        self.pixels[at..at + 3].copy_from_slice(&[color.0, color.1, color.2]);
    }

    /// Fills device pixels [x0, x1) x [y0, y1), clipped to the canvas.
    fn fill(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, color: Color) {
        let (x0, x1) = (x0.round() as i64, x1.round() as i64);
        let (y0, y1) = (y0.round() as i64, y1.round() as i64);
        for y in y0.max(0)..y1.min(self.height as i64) {
            for x in x0.max(0)..x1.min(self.width as i64) {
                self.put(x, y, color);
            }
        }
    }

    /// A straight segment `width` logical pixels wide, in logical coordinates.
    fn segment(&mut self, from: (f64, f64), to: (f64, f64), color: Color, width: f64) {
        let (x0, y0) = (from.0 * DEVICE_SCALE, from.1 * DEVICE_SCALE);
        let (x1, y1) = (to.0 * DEVICE_SCALE, to.1 * DEVICE_SCALE);
        let half = (width * DEVICE_SCALE / 2.0).max(0.5);
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).ceil().max(1.0) as usize;
        for step in 0..=steps {
            let t = step as f64 / steps as f64;
            let (x, y) = (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t);
            self.fill(x - half, y - half, x + half, y + half, color);
        }
    }

    /// Encodes the bitmap as an 8-bit RGB PNG.
    pub fn encode_png(&self) -> Result<Vec<u8>, png::EncodingError> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&self.pixels)?;
        writer.finish()?;
        Ok(bytes)
    }
}

impl Canvas for RasterCanvas {
    fn rect(&mut self, rect: Rect, paint: Paint, _tip: Option<&str>) {
        let s = DEVICE_SCALE;
        let (x0, y0) = (rect.x * s, rect.y * s);
        let (x1, y1) = ((rect.x + rect.width.max(0.0)) * s, (rect.y + rect.height.max(0.0)) * s);
        if let Some(fill) = paint.fill {
            self.fill(x0, y0, x1, y1, fill);
        }
        if let Some(stroke) = paint.stroke {
            self.fill(x0, y0, x1, y0 + s, stroke);
            self.fill(x0, y1 - s, x1, y1, stroke);
            self.fill(x0, y0, x0 + s, y1, stroke);
            self.fill(x1 - s, y0, x1, y1, stroke);
        }
    }

    fn line(&mut self, from: (f64, f64), to: (f64, f64), color: Color) {
        self.segment(from, to, color, 1.0);
    }

    fn polyline(&mut self, points: &[(f64, f64)], color: Color, width: f64) {
        for pair in points.windows(2) {
            self.segment(pair[0], pair[1], color, width);
        }
    }

    fn dot(&mut self, center: (f64, f64), radius: f64, color: Color, _tip: Option<&str>) {
        let (cx, cy, r) = (center.0 * DEVICE_SCALE, center.1 * DEVICE_SCALE, radius * DEVICE_SCALE);
        for y in (cy - r).floor() as i64..=(cy + r).ceil() as i64 {
            for x in (cx - r).floor() as i64..=(cx + r).ceil() as i64 {
                let (dx, dy) = (x as f64 + 0.5 - cx, y as f64 + 0.5 - cy);
                if dx * dx + dy * dy <= r * r {
                    self.put(x, y, color);
                }
            }
        }
    }

    /// Text is laid out unrotated from its anchor and then, for every
    /// device pixel near it, sampled through the inverse rotation, so
    /// rotated labels have no holes.
    fn text(&mut self, at: (f64, f64), text: &str, style: TextStyle) {
        let glyphs: Vec<[u8; 8]> = text.chars().map(glyph).collect();
        if glyphs.is_empty() {
            return;
        }
        let scale = glyph_scale(style.size);
        let advance = 8.0 * scale;
        let text_width = advance * glyphs.len() as f64;
        let (anchor_x, anchor_y) = (at.0 * DEVICE_SCALE, at.1 * DEVICE_SCALE);
        let left = match style.anchor {
            Anchor::Start => anchor_x,
            Anchor::Middle => anchor_x - text_width / 2.0,
            Anchor::End => anchor_x - text_width,
        };
        // Rows 0..7 of a glyph stand on the baseline; row 7 is the descender.
        let top = anchor_y - 7.0 * scale;
        let bottom = top + 8.0 * scale;
        let (sin, cos) = style.rotate_degrees.to_radians().sin_cos();
        let corners = [(left, top), (left + text_width, top), (left, bottom), (left + text_width, bottom)];
        let rotate = |(u, v): (f64, f64)| {
            let (du, dv) = (u - anchor_x, v - anchor_y);
            (anchor_x + du * cos - dv * sin, anchor_y + du * sin + dv * cos)
        };
        let rotated: Vec<(f64, f64)> = corners.iter().map(|&corner| rotate(corner)).collect();
        let min_x = rotated.iter().map(|p| p.0).fold(f64::INFINITY, f64::min).floor() as i64 - 1;
        let max_x = rotated.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max).ceil() as i64 + 1;
        let min_y = rotated.iter().map(|p| p.1).fold(f64::INFINITY, f64::min).floor() as i64 - 1;
        let max_y = rotated.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max).ceil() as i64 + 1;
        let inked = |u: f64, v: f64| {
            if u < left || v < top || u >= left + text_width || v >= bottom {
                return false;
            }
            let column = ((u - left) / scale) as usize;
            let row = ((v - top) / scale) as usize;
            let (index, bit) = (column / 8, column % 8);
            glyphs.get(index).is_some_and(|g| g[row.min(7)] >> bit & 1 == 1)
        };
        for y in min_y.max(0)..=max_y.min(self.height as i64 - 1) {
            for x in min_x.max(0)..=max_x.min(self.width as i64 - 1) {
                let (dx, dy) = (x as f64 + 0.5 - anchor_x, y as f64 + 0.5 - anchor_y);
                let (u, v) = (anchor_x + dx * cos + dy * sin, anchor_y - dx * sin + dy * cos);
                // Bold: each glyph pixel is widened by one device pixel.
                if inked(u, v) || (style.bold && inked(u - 1.0, v)) {
                    self.put(x, y, style.color);
                }
            }
        }
    }
}
