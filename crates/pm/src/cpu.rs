//! CPU persistence instructions, chosen once from CPUID.
//!
//! This module and `mapping.rs` are the only places in the workspace that
//! execute cache-maintenance instructions. The flush instruction is picked at
//! pool-open time (CLWB, else CLFLUSHOPT, else CLFLUSH) and stored in the
//! backend, so there is no global mutable state.
//!
//! Explained in docs/media-model.md.

use std::fmt;

/// The instruction used to write a cache line back to the persistence domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstruction {
    /// `clwb`: writes back and keeps the line cached (cheapest re-read).
    Clwb,
    /// `clflushopt`: writes back and evicts; ordered by `sfence`.
    Clflushopt,
    /// `clflush`: writes back and evicts; self-ordered on Intel. On AMD we
    /// still fence after it (an `sfence` is not enough there, so the fence
    /// for this instruction is an `mfence`).
    Clflush,
    /// No instruction: the caches are inside the persistence domain (eADR) or
    /// the memory is not persistent at all. Fences still order stores.
    None,
}

impl FlushInstruction {
    /// Picks the best instruction this CPU offers (CPUID leaf 7, EBX bit 24
    /// CLWB, bit 23 CLFLUSHOPT; CLFLUSH is baseline x86-64).
    pub fn detect() -> Self {
        let features = CpuFeatures::detect();
        if features.clwb {
            FlushInstruction::Clwb
        } else if features.clflushopt {
            FlushInstruction::Clflushopt
        } else {
            FlushInstruction::Clflush
        }
    }

    /// Parses `clwb`, `clflushopt`, `clflush` or `none`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "clwb" => Some(Self::Clwb),
            "clflushopt" => Some(Self::Clflushopt),
            "clflush" => Some(Self::Clflush),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

impl fmt::Display for FlushInstruction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Clwb => "clwb",
            Self::Clflushopt => "clflushopt",
            Self::Clflush => "clflush",
            Self::None => "none",
        })
    }
}

/// The CPU features pmtx cares about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// CLWB available.
    pub clwb: bool,
    /// CLFLUSHOPT available.
    pub clflushopt: bool,
    /// AVX-512 foundation (for wide non-temporal stores; informational).
    pub avx512f: bool,
}

impl CpuFeatures {
    /// Reads CPUID leaf 7.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID exists on every x86-64 CPU; leaf 7 is queried only after
            // leaf 0 says it exists.
            let max_leaf = core::arch::x86_64::__cpuid(0).eax;
            if max_leaf < 7 {
                return Self::default();
            }
            let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
            Self {
                clwb: leaf7.ebx & (1 << 24) != 0,
                clflushopt: leaf7.ebx & (1 << 23) != 0,
                avx512f: leaf7.ebx & (1 << 16) != 0,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Self::default()
        }
    }
}

/// Size of a cache line, the unit of flushing and of the media model.
pub const CACHE_LINE: u64 = 64;

/// Writes back the cache line containing `addr` with `instruction`.
///
/// # Safety
/// `addr` must point into memory mapped in this process (any byte of the line).
#[inline(always)]
pub(crate) unsafe fn flush_line(instruction: FlushInstruction, addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    match instruction {
        FlushInstruction::Clwb => {
            // SAFETY: caller guarantees `addr` is mapped; clwb only writes
            // the line back, it never changes memory contents.
            unsafe {
                core::arch::asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags));
            }
        }
        FlushInstruction::Clflushopt => {
            // SAFETY: as above; clflushopt writes back and invalidates.
            unsafe {
                core::arch::asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags));
            }
        }
        FlushInstruction::Clflush => {
            // SAFETY: as above; clflush is baseline x86-64 (SSE2).
            unsafe { core::arch::x86_64::_mm_clflush(addr) }
        }
        FlushInstruction::None => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (instruction, addr);
}

/// Store fence: makes earlier flushes and non-temporal stores durable and
/// ordered before later stores. After `clflush` on AMD an `mfence` is needed.
#[inline(always)]
pub(crate) fn store_fence(instruction: FlushInstruction) {
    #[cfg(target_arch = "x86_64")]
    {
        if instruction == FlushInstruction::Clflush {
            // SAFETY: mfence has no memory-safety preconditions.
            unsafe { core::arch::x86_64::_mm_mfence() }
        } else {
            // SAFETY: sfence has no memory-safety preconditions.
            unsafe { core::arch::x86_64::_mm_sfence() }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = instruction;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// Non-temporal copy of `len` bytes from `src` to `dst`. Aligned 8-byte words
/// go through `movnti`; an unaligned head or tail is stored normally and
/// flushed, so the whole range is durable after the next fence either way.
///
/// # Safety
/// `dst..dst+len` must be mapped writable memory not concurrently accessed by
/// non-atomic accesses of other threads; `src..src+len` readable; no overlap.
#[inline]
pub(crate) unsafe fn copy_non_temporal(instruction: FlushInstruction, dst: *mut u8, src: *const u8, len: usize) {
    let mut done = 0usize;
    let head = (dst as usize).wrapping_neg() & 7;
    let head = head.min(len);
    if head > 0 {
        // SAFETY: within the caller's ranges.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            flush_line(instruction, dst);
        }
        done = head;
    }
    #[cfg(target_arch = "x86_64")]
    while done + 8 <= len {
        // SAFETY: dst+done is 8-aligned (head fixed alignment), in range;
        // the source may be unaligned so it is read with read_unaligned.
        unsafe {
            let word = std::ptr::read_unaligned(src.add(done) as *const i64);
            core::arch::x86_64::_mm_stream_si64(dst.add(done) as *mut i64, word);
        }
        done += 8;
    }
    if done < len {
        // SAFETY: within the caller's ranges.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
            flush_line(instruction, dst.add(done));
            if instruction != FlushInstruction::None {
                flush_line(instruction, dst.add(len - 1));
            }
        }
    }
}

/// Reads the time-stamp counter.
#[inline(always)]
pub fn read_tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no memory-safety preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::time::{SystemTime, UNIX_EPOCH};
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    }
}

/// TSC frequency measured against the monotonic clock, so emulated stalls can
/// spin on the TSC (a clock read per iteration would be too coarse).
#[derive(Clone, Copy, Debug)]
pub struct TscCalibration {
    /// TSC ticks per nanosecond.
    pub ticks_per_ns: f64,
}

impl TscCalibration {
    /// Measures for about 20 ms.
    pub fn measure() -> Self {
        let start_clock = std::time::Instant::now();
        let start_tsc = read_tsc();
        while start_clock.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let elapsed_ns = start_clock.elapsed().as_nanos() as f64;
        let ticks = read_tsc().wrapping_sub(start_tsc) as f64;
        let ticks_per_ns = if elapsed_ns > 0.0 && ticks > 0.0 { ticks / elapsed_ns } else { 1.0 };
        Self { ticks_per_ns }
    }

    /// The TSC as nanoseconds (a clock shared by the threads of one
    /// calibration: the TSC is synchronised across cores).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        (read_tsc() as f64 / self.ticks_per_ns) as u64
    }

    /// Spins for `nanoseconds` and returns the nanoseconds actually waited.
    #[inline]
    pub fn spin(&self, nanoseconds: u64) -> u64 {
        if nanoseconds == 0 {
            return 0;
        }
        let start = read_tsc();
        let target = (nanoseconds as f64 * self.ticks_per_ns) as u64;
        loop {
            let elapsed = read_tsc().wrapping_sub(start);
            if elapsed >= target {
                return (elapsed as f64 / self.ticks_per_ns) as u64;
            }
            std::hint::spin_loop();
        }
    }
}
