//! A one-line progress indicator on stderr.
//!
//! On a terminal the line is redrawn in place (at most ten times a second);
//! otherwise (logs, pipes, tests) each phase is printed once as its own line.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Progress over a fixed number of phases.
pub struct Progress {
    total: usize,
    interactive: bool,
    last_draw: Option<Instant>,
    width: usize,
}

impl Progress {
    /// A new indicator for `total` phases.
    pub fn new(total: usize) -> Self {
        Self { total, interactive: std::io::stderr().is_terminal(), last_draw: None, width: 0 }
    }

    /// Announces phase `index` (0-based) called `name`.
    pub fn phase(&mut self, index: usize, name: &str) {
        if self.interactive {
            self.last_draw = None;
            self.update(index, name, 0.0);
        } else {
            eprintln!("[{}/{}] {name}", index + 1, self.total);
        }
    }

    /// Redraws the line with `fraction` of the current phase done.
    pub fn update(&mut self, index: usize, name: &str, fraction: f64) {
        if !self.interactive || self.last_draw.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return;
        }
        self.last_draw = Some(Instant::now());
        const BAR: usize = 20;
        let filled = ((fraction.clamp(0.0, 1.0)) * BAR as f64).round() as usize;
        let line =
            format!("[{}/{}] [{}{}] {name}", index + 1, self.total, "#".repeat(filled), "-".repeat(BAR - filled));
        let pad = self.width.saturating_sub(line.len());
        self.width = line.len();
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r{line}{}", " ".repeat(pad));
        let _ = stderr.flush();
    }

    /// Erases the line (terminal only).
    pub fn finish(&mut self) {
        if self.interactive && self.width > 0 {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r{}\r", " ".repeat(self.width));
            let _ = stderr.flush();
            self.width = 0;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
