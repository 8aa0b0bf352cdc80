//! The one interface through which every store into a pool goes.
//!
//! Engines are generic over `B: PmBackend`, so with [`Direct`] a write
//! compiles to a bounds check plus a plain store, while [`crate::Sim`] sees
//! every store, flush and fence and can produce crash images. The PM crate
//! never hands out a raw pointer for writing: a store the simulator cannot see
//! is a crash bug it cannot catch.
//!
//! Contract for callers: concurrent accesses to the same bytes must be 8-byte
//! aligned words through `load_u64` / `store_u64` / `compare_exchange_u64`;
//! byte-range `read`/`write` must not race with writes to overlapping bytes
//! (engines write new data into fresh space and publish it with a word store).

use crate::counters::{bump, note_persisted_line, COUNTERS};
use crate::cpu::{self, FlushInstruction, TscCalibration, CACHE_LINE};
use crate::error::{PoolError, PoolResult};
use crate::mapping::{Mapping, MappingKind};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which backend a pool runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Real instructions on the mapped memory.
    Direct,
    /// Real instructions plus an injected media-latency model.
    Emulated,
    /// The crash simulator.
    Sim,
}

impl BackendKind {
    /// Parses `direct`, `emulated` or `sim`.
    pub fn parse(text: &str) -> PoolResult<Self> {
        match text {
            "direct" => Ok(Self::Direct),
            "emulated" => Ok(Self::Emulated),
            "sim" => Ok(Self::Sim),
            other => Err(PoolError::InvalidOption(format!(
                "unknown PM backend {other:?} (expected direct, emulated or sim)"
            ))),
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Direct => "direct",
            Self::Emulated => "emulated",
            Self::Sim => "sim",
        })
    }
}

/// Where stores become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistenceDomain {
    /// Asynchronous DRAM refresh: the memory controller is durable, caches are
    /// not; every persisted line needs a flush and a fence.
    Adr,
    /// Extended ADR: caches are durable too; flushes are elided, fences kept
    /// for ordering.
    Eadr,
}

impl std::fmt::Display for PersistenceDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Adr => "adr (memory controller; caches must be flushed)",
            Self::Eadr => "eadr (cpu caches are persistent; flushes elided)",
        })
    }
}

/// The latency model of the `emulated` backend, charged at fence time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyModel {
    /// Preset name, for reports.
    pub name: &'static str,
    /// Cost of a persisted 64 B line continuing a sequential stream (same or
    /// next 256 B block as the previous persisted line).
    pub sequential_line_ns: u64,
    /// Cost of a persisted 64 B line starting a new stream.
    pub random_line_ns: u64,
    /// Extra cost per fence.
    pub fence_ns: u64,
    /// Cost of a `read` call per 64 B line (a media read miss); 0 disables it.
    pub read_line_ns: u64,
}

impl LatencyModel {
    /// DRAM: no injected cost.
    pub const DRAM: LatencyModel =
        LatencyModel { name: "dram", sequential_line_ns: 0, random_line_ns: 0, fence_ns: 0, read_line_ns: 0 };
    /// Optane DC PMem (first generation), from FAST'20 "An Empirical Guide to
    /// the Behavior and Use of Scalable Persistent Memory" and DBXN Table 2:
    /// ~170 ns per sequential persistent 64 B write, ~510 ns per random one,
    /// 256 B internal write unit, ~300 ns read miss.
    pub const OPTANE: LatencyModel =
        LatencyModel { name: "optane", sequential_line_ns: 170, random_line_ns: 510, fence_ns: 0, read_line_ns: 300 };

    /// The SP^3 paper's emulation (sp3.txt §IV-A): a fixed 500 ns of extra
    /// write latency after each flushed line, sequential or not, and no
    /// read cost.
    pub const SP3_500NS: LatencyModel =
        LatencyModel { name: "sp3-500ns", sequential_line_ns: 500, random_line_ns: 500, fence_ns: 0, read_line_ns: 0 };

    /// Every preset.
    pub const PRESETS: [LatencyModel; 3] = [Self::DRAM, Self::OPTANE, Self::SP3_500NS];

    /// Looks a preset up by name (`dram`, `optane`, `sp3-500ns`).
    pub fn preset(name: &str) -> PoolResult<Self> {
        Self::PRESETS.into_iter().find(|model| model.name == name).ok_or_else(|| {
            let names: Vec<&str> = Self::PRESETS.iter().map(|model| model.name).collect();
            PoolError::InvalidOption(format!("unknown latency model {name:?} (expected one of {})", names.join(", ")))
        })
    }
}

/// Options for opening the backend of a pool; each backend reads its part.
#[derive(Clone, Debug)]
pub struct PmOptions {
    /// Override the flush instruction (default: detected from CPUID).
    pub flush_instruction: Option<FlushInstruction>,
    /// ADR (flush + fence) or eADR (fence only).
    pub domain: PersistenceDomain,
    /// Also `msync` the flushed ranges at every fence, for power-failure
    /// durability on a non-DAX file (slow: a synchronous write per fence).
    pub msync: bool,
    /// Latency model of the `emulated` backend.
    pub latency: LatencyModel,
    /// Seed of the crash simulator.
    pub sim_seed: u64,
}

impl Default for PmOptions {
    fn default() -> Self {
        Self {
            flush_instruction: None,
            domain: PersistenceDomain::Adr,
            msync: false,
            latency: LatencyModel::OPTANE,
            sim_seed: 0,
        }
    }
}

/// What a backend is, for `pool info` and benchmark reports.
#[derive(Clone, Debug)]
pub struct BackendInfo {
    /// Backend kind.
    pub kind: BackendKind,
    /// Mapping kind (DAX or not).
    pub mapping: MappingKind,
    /// Flush instruction in use.
    pub flush_instruction: FlushInstruction,
    /// Persistence domain.
    pub domain: PersistenceDomain,
    /// Whether fences also `msync`.
    pub msync: bool,
    /// Latency model (emulated backend only).
    pub latency: Option<LatencyModel>,
}

impl BackendInfo {
    /// One honest sentence on what an acknowledged persist survives.
    pub fn durability(&self) -> &'static str {
        match (self.kind, self.mapping, self.msync) {
            (BackendKind::Sim, _, _) => "simulated: durability is what the crash simulator's images allow",
            (_, MappingKind::Dax, _) => "power failure (DAX mapping with MAP_SYNC)",
            (_, MappingKind::SharedFile, true) => "power failure (non-DAX file, msync at every fence)",
            (_, MappingKind::SharedFile, false) => {
                "process crash only: non-DAX file without msync; a power failure may lose acknowledged commits"
            }
            (_, MappingKind::Anonymous, _) => "none: anonymous memory",
        }
    }
}

/// Every access to pool memory. Offsets are bytes from the pool's start;
/// out-of-range offsets are programmer errors and panic.
pub trait PmBackend: Send + Sync + Sized + 'static {
    /// Builds the backend over `mapping`.
    fn from_mapping(mapping: Mapping, options: &PmOptions) -> PoolResult<Self>;
    /// Describes the backend.
    fn info(&self) -> BackendInfo;
    /// The mapping (for its path and kind).
    fn mapping(&self) -> &Mapping;
    /// Pool length in bytes.
    fn len(&self) -> u64 {
        self.mapping().len()
    }
    /// Never true.
    fn is_empty(&self) -> bool {
        false
    }
    /// Copies `destination.len()` bytes at `offset` out of the pool.
    fn read(&self, offset: u64, destination: &mut [u8]);
    /// Atomic (acquire) load of the aligned word at `offset`.
    fn load_u64(&self, offset: u64) -> u64;
    /// Stores `source` at `offset` (cached; durable after flush + fence).
    fn write(&self, offset: u64, source: &[u8]);
    /// Failure-atomic, release store of the aligned word at `offset`.
    fn store_u64(&self, offset: u64, value: u64);
    /// Atomic compare-exchange of the aligned word at `offset`.
    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64>;
    /// Non-temporal store of `source` at `offset`: durable after the next fence.
    fn write_non_temporal(&self, offset: u64, source: &[u8]);
    /// Starts write-back of every line overlapping `[offset, offset+len)`.
    fn flush(&self, offset: u64, len: u64);
    /// A hint that `[offset, offset + len)` (at most 32 lines of it) will
    /// soon be written: starts each line's ownership request (`prefetchw`)
    /// without waiting, so the later stores do not stall on cold lines.
    /// Reads and writes nothing and has no effect on persistence.
    #[inline]
    fn prefetch_for_write(&self, offset: u64, len: u64) {
        let mapping = self.mapping();
        let end = offset.saturating_add(len).min(mapping.len()).min(offset.saturating_add(32 * 64));
        let mut line = offset & !63;
        while line < end {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the address lies inside the mapping, and a prefetch
            // never faults and changes no memory.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(
                    mapping.base().add(line as usize) as *const i8,
                )
            };
            line += 64;
        }
    }
    /// Store fence: earlier flushes and non-temporal stores of this thread are
    /// durable and ordered before later stores.
    fn fence(&self);
    /// `flush` + `fence`.
    #[inline]
    fn persist(&self, offset: u64, len: u64) {
        self.flush(offset, len);
        self.fence();
    }
    /// Marks a point where a crash is interesting (just before or after a
    /// commit-marking store). Only the simulator acts on it.
    #[inline(always)]
    fn crash_point(&self, _label: &'static str) {}
    /// Writes `len` zero bytes at `offset`.
    fn write_zeros(&self, offset: u64, len: u64) {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let step = (len - done).min(ZEROS.len() as u64);
            self.write(offset + done, &ZEROS[..step as usize]);
            done += step;
        }
    }
}

#[inline(always)]
fn check_range(len: u64, offset: u64, size: u64) {
    assert!(
        offset.checked_add(size).is_some_and(|end| end <= len),
        "pool access out of range: offset {offset} + {size} > pool length {len}"
    );
}

#[inline(always)]
fn check_word(len: u64, offset: u64) {
    check_range(len, offset, 8);
    assert!(offset.is_multiple_of(8), "unaligned word access at offset {offset}");
}

/// Real instructions on the mapped memory.
pub struct Direct {
    mapping: Mapping,
    flush_instruction: FlushInstruction,
    domain: PersistenceDomain,
    msync: bool,
}

impl Direct {
    #[inline(always)]
    fn address(&self, offset: u64) -> *mut u8 {
        // SAFETY (of callers' later dereference): offsets are range-checked
        // before every access; `add` itself stays inside the mapping.
        self.mapping.base().wrapping_add(offset as usize)
    }

    /// The fence proper plus msync of the ranges flushed since the last fence.
    #[inline(always)]
    fn fence_inner(&self) {
        cpu::store_fence(self.flush_instruction);
        COUNTERS.with(|c| {
            bump(&c.fences, 1);
            c.pending_sequential_lines.set(0);
            c.pending_random_lines.set(0);
        });
        if self.msync {
            self.sync_pending();
        }
    }

    fn sync_pending(&self) {
        let ranges = MSYNC_PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()));
        let base = self.mapping.base() as u64;
        for (start, end) in coalesce(ranges) {
            if start < base || end > base + self.mapping.len() {
                // Recorded by another pool in this thread; that pool syncs it.
                continue;
            }
            // A failed msync means durability can no longer be promised;
            // there is no way to report it from a fence, so it is fatal.
            if let Err(error) = self.mapping.sync_range(start - base, end - start) {
                panic!("msync failed, durability lost: {error}");
            }
            COUNTERS.with(|c| bump(&c.msyncs, 1));
        }
    }
}

thread_local! {
    /// Absolute address ranges flushed since this thread's last fence, kept
    /// only in msync mode.
    static MSYNC_PENDING: std::cell::RefCell<Vec<(u64, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn coalesce(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let page = 4096;
    for range in ranges.iter_mut() {
        range.0 &= !(page - 1);
        range.1 = (range.1 + page - 1) & !(page - 1);
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

impl PmBackend for Direct {
    fn from_mapping(mapping: Mapping, options: &PmOptions) -> PoolResult<Self> {
        let flush_instruction = match options.domain {
            PersistenceDomain::Eadr => FlushInstruction::None,
            PersistenceDomain::Adr => options.flush_instruction.unwrap_or_else(FlushInstruction::detect),
        };
        Ok(Self { mapping, flush_instruction, domain: options.domain, msync: options.msync })
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: BackendKind::Direct,
            mapping: self.mapping.kind(),
            flush_instruction: self.flush_instruction,
            domain: self.domain,
            msync: self.msync,
            latency: None,
        }
    }

    fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    #[inline(always)]
    fn read(&self, offset: u64, destination: &mut [u8]) {
        check_range(self.mapping.len(), offset, destination.len() as u64);
        // SAFETY: range checked; the backend contract forbids racing writes
        // to these bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.address(offset), destination.as_mut_ptr(), destination.len()) }
    }

    #[inline(always)]
    fn load_u64(&self, offset: u64) -> u64 {
        check_word(self.mapping.len(), offset);
        // SAFETY: in range and 8-aligned (the mapping is page-aligned), so a
        // valid AtomicU64 location for the mapping's lifetime.
        unsafe { (*(self.address(offset) as *const AtomicU64)).load(Ordering::Acquire) }
    }

    #[inline(always)]
    fn write(&self, offset: u64, source: &[u8]) {
        check_range(self.mapping.len(), offset, source.len() as u64);
        // SAFETY: range checked; no overlapping concurrent access by contract.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), self.address(offset), source.len()) }
        COUNTERS.with(|c| bump(&c.bytes_written, source.len() as u64));
    }

    #[inline(always)]
    fn store_u64(&self, offset: u64, value: u64) {
        check_word(self.mapping.len(), offset);
        // SAFETY: in range and aligned; see load_u64.
        unsafe { (*(self.address(offset) as *const AtomicU64)).store(value, Ordering::Release) }
        COUNTERS.with(|c| bump(&c.bytes_written, 8));
    }

    #[inline(always)]
    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        check_word(self.mapping.len(), offset);
        // SAFETY: in range and aligned; see load_u64.
        let result = unsafe {
            (*(self.address(offset) as *const AtomicU64)).compare_exchange(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
        };
        if result.is_ok() {
            COUNTERS.with(|c| bump(&c.bytes_written, 8));
        }
        result
    }

    #[inline(always)]
    fn write_non_temporal(&self, offset: u64, source: &[u8]) {
        check_range(self.mapping.len(), offset, source.len() as u64);
        // SAFETY: range checked; no overlapping concurrent access by contract.
        unsafe { cpu::copy_non_temporal(self.flush_instruction, self.address(offset), source.as_ptr(), source.len()) }
        let base = self.mapping.base() as u64;
        COUNTERS.with(|c| {
            bump(&c.bytes_written, source.len() as u64);
            bump(&c.non_temporal_bytes, source.len() as u64);
            let first = (base + offset) & !(CACHE_LINE - 1);
            let mut line = first;
            while line < base + offset + source.len() as u64 {
                note_persisted_line(c, line);
                line += CACHE_LINE;
            }
        });
        if self.msync {
            MSYNC_PENDING.with(|p| p.borrow_mut().push((base + offset, base + offset + source.len() as u64)));
        }
    }

    #[inline(always)]
    fn flush(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        check_range(self.mapping.len(), offset, len);
        let base = self.mapping.base() as u64;
        let start = (base + offset) & !(CACHE_LINE - 1);
        let end = base + offset + len;
        if self.flush_instruction != FlushInstruction::None {
            COUNTERS.with(|c| {
                let mut line = start;
                while line < end {
                    // SAFETY: `line` lies in the mapping (its first byte is
                    // at or after the line start of an in-range offset).
                    unsafe { cpu::flush_line(self.flush_instruction, line.max(base) as *const u8) };
                    bump(&c.lines_flushed, 1);
                    note_persisted_line(c, line);
                    line += CACHE_LINE;
                }
            });
        }
        if self.msync {
            MSYNC_PENDING.with(|p| p.borrow_mut().push((base + offset, end)));
        }
    }

    #[inline(always)]
    fn fence(&self) {
        self.fence_inner();
    }
}

/// `Direct` plus a latency model charged at fence time by spinning on the
/// calibrated TSC, as the papers emulated NVM on DRAM.
pub struct Emulated {
    direct: Direct,
    model: LatencyModel,
    tsc: TscCalibration,
}

impl Emulated {
    /// The model in force.
    pub fn model(&self) -> LatencyModel {
        self.model
    }

    /// Nanoseconds the model charges for the lines pending at a fence.
    pub fn fence_cost_ns(model: &LatencyModel, sequential_lines: u64, random_lines: u64) -> u64 {
        model.fence_ns + sequential_lines * model.sequential_line_ns + random_lines * model.random_line_ns
    }
}

impl PmBackend for Emulated {
    fn from_mapping(mapping: Mapping, options: &PmOptions) -> PoolResult<Self> {
        Ok(Self {
            direct: Direct::from_mapping(mapping, options)?,
            model: options.latency,
            tsc: TscCalibration::measure(),
        })
    }

    fn info(&self) -> BackendInfo {
        BackendInfo { kind: BackendKind::Emulated, latency: Some(self.model), ..self.direct.info() }
    }

    fn mapping(&self) -> &Mapping {
        &self.direct.mapping
    }

    #[inline(always)]
    fn read(&self, offset: u64, destination: &mut [u8]) {
        self.direct.read(offset, destination);
        if self.model.read_line_ns > 0 && !destination.is_empty() {
            let first = offset / CACHE_LINE;
            let last = (offset + destination.len() as u64 - 1) / CACHE_LINE;
            let waited = self.tsc.spin((last - first + 1) * self.model.read_line_ns);
            COUNTERS.with(|c| bump(&c.stall_ns, waited));
        }
    }

    #[inline(always)]
    fn load_u64(&self, offset: u64) -> u64 {
        self.direct.load_u64(offset)
    }

    #[inline(always)]
    fn write(&self, offset: u64, source: &[u8]) {
        self.direct.write(offset, source)
    }

    #[inline(always)]
    fn store_u64(&self, offset: u64, value: u64) {
        self.direct.store_u64(offset, value)
    }

    #[inline(always)]
    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        self.direct.compare_exchange_u64(offset, current, new)
    }

    #[inline(always)]
    fn write_non_temporal(&self, offset: u64, source: &[u8]) {
        self.direct.write_non_temporal(offset, source)
    }

    #[inline(always)]
    fn flush(&self, offset: u64, len: u64) {
        self.direct.flush(offset, len)
    }

    #[inline(always)]
    fn fence(&self) {
        let (sequential, random) = COUNTERS.with(|c| (c.pending_sequential_lines.get(), c.pending_random_lines.get()));
        self.direct.fence_inner();
        let cost = Self::fence_cost_ns(&self.model, sequential, random);
        if cost > 0 {
            let waited = self.tsc.spin(cost);
            COUNTERS.with(|c| bump(&c.stall_ns, waited));
        }
    }
}
