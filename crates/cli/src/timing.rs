//! Cheap, ordered timestamps for timing single persist operations.
//!
//! A plain `rdtsc` may execute before the flush and fence it is meant to
//! time have completed; `lfence` on both sides keeps the read in program
//! order (the usual recipe for timing short code). Ticks are converted with
//! the PM crate's TSC calibration.

use pmtx_pm::cpu::TscCalibration;

/// Reads the time-stamp counter after all earlier instructions completed.
#[inline(always)]
pub fn ordered_ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: lfence and rdtsc have no memory-safety preconditions and
        // SSE2 is part of the x86-64 baseline.
        unsafe {
            _mm_lfence();
            let ticks = _rdtsc();
            _mm_lfence();
            ticks
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        pmtx_pm::cpu::read_tsc()
    }
}

/// Converts TSC ticks to nanoseconds.
pub struct TickClock {
    ticks_per_ns: f64,
}

impl TickClock {
    /// Calibrates (about 20 ms).
    pub fn calibrate() -> Self {
        Self { ticks_per_ns: TscCalibration::measure().ticks_per_ns }
    }

    /// Nanoseconds between two `ordered_ticks` readings.
    #[inline(always)]
    pub fn nanoseconds(&self, start: u64, end: u64) -> u64 {
        (end.wrapping_sub(start) as f64 / self.ticks_per_ns) as u64
    }
}
