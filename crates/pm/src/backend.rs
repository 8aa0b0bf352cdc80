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
//!
//! Explained in docs/media-model.md.

use crate::counters::{bump, count_read, count_write, note_persisted_line, COUNTERS};
use crate::cpu::{self, FlushInstruction, TscCalibration, CACHE_LINE};
use crate::error::{PoolError, PoolResult};
use crate::mapping::{Mapping, MappingKind};
use crate::media::{Media, MediaParams, PendingLine, ThreadStream};
use std::cell::RefCell;
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

/// The latency model of the `emulated` backend, charged at fence time (and
/// at `read` calls).
///
/// Two kinds: per-line costs (`simple`, `sp3-500ns`: each persisted line
/// costs a fixed time at the next fence, as the papers' emulations did), and
/// the media model of [`crate::media`] (`optane`: XPLines, write-combining
/// buffers, interleaved DIMMs whose bandwidth the threads share), whose
/// per-line costs are zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyModel {
    /// Preset name, for reports.
    pub name: &'static str,
    /// The media model, for `optane`; `None` for the per-line models.
    pub media: Option<MediaParams>,
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
    pub const DRAM: LatencyModel = LatencyModel {
        name: "dram",
        media: None,
        sequential_line_ns: 0,
        random_line_ns: 0,
        fence_ns: 0,
        read_line_ns: 0,
    };
    /// Optane DC PMem (first generation) as a medium: the model of
    /// [`crate::media`] with [`MediaParams::OPTANE`] (six interleaved DIMMs;
    /// FAST'20 "An Empirical Guide to the Behavior and Use of Scalable
    /// Persistent Memory", Izraelevitz et al. 2019, DBXN Table 2).
    pub const OPTANE: LatencyModel = LatencyModel {
        name: "optane",
        media: Some(MediaParams::OPTANE),
        sequential_line_ns: 0,
        random_line_ns: 0,
        fence_ns: 0,
        read_line_ns: 0,
    };
    /// The first model (the default before the media model): every
    /// persisted 64 B line costs 170 ns at the next fence when it continues
    /// a sequential stream and 510 ns when it starts one (DBXN Table 2's
    /// lone durable writes, charged per line with no overlap), a `read`
    /// 300 ns per line.
    pub const SIMPLE: LatencyModel = LatencyModel {
        name: "simple",
        media: None,
        sequential_line_ns: 170,
        random_line_ns: 510,
        fence_ns: 0,
        read_line_ns: 300,
    };

    /// The SP^3 paper's emulation (sp3.txt §IV-A): a fixed 500 ns of extra
    /// write latency after each flushed line, sequential or not, and no
    /// read cost.
    pub const SP3_500NS: LatencyModel = LatencyModel {
        name: "sp3-500ns",
        media: None,
        sequential_line_ns: 500,
        random_line_ns: 500,
        fence_ns: 0,
        read_line_ns: 0,
    };

    /// Every preset.
    pub const PRESETS: [LatencyModel; 4] = [Self::DRAM, Self::OPTANE, Self::SIMPLE, Self::SP3_500NS];

    /// The same model over `dimms` DIMMs interleaved every
    /// `interleave_bytes` (media models only; the per-line models have no
    /// DIMMs and are returned unchanged).
    pub fn with_dimms(self, dimms: u32, interleave_bytes: u64) -> PoolResult<Self> {
        self.with_media(|media| {
            media.dimms = dimms;
            media.interleave_bytes = interleave_bytes;
        })
    }

    /// The same model with its DIMMs split over `nodes` emulated NUMA nodes,
    /// a remote access costing `remote_latency_ns` more (media models only).
    pub fn with_numa(self, nodes: u32, remote_latency_ns: u64) -> PoolResult<Self> {
        self.with_media(|media| {
            media.nodes = nodes;
            media.remote_latency_ns = remote_latency_ns;
        })
    }

    fn with_media(mut self, change: impl FnOnce(&mut MediaParams)) -> PoolResult<Self> {
        if let Some(media) = &mut self.media {
            change(media);
            media.validate().map_err(|reason| PoolError::InvalidOption(format!("media model: {reason}")))?;
        }
        Ok(self)
    }

    /// One line on what the model charges, for reports.
    pub fn describe(&self) -> String {
        match &self.media {
            Some(media) => {
                format!(
                "{}: media model, {} DIMMs interleaved every {} B, {} KiB write-combining buffer each; persist {} ns \
                 (+{} ns read for ownership), read {}/{} ns random/sequential, {}/{} MB/s write/read per DIMM",
                self.name,
                media.dimms,
                media.interleave_bytes,
                media.xpbuffer_bytes >> 10,
                media.persist_latency_ns,
                media.rfo_latency_ns,
                media.read_latency_random_ns,
                media.read_latency_sequential_ns,
                media.write_bandwidth_mb_s,
                media.read_bandwidth_mb_s
            ) + &if media.nodes > 1 {
                    format!("; {} NUMA nodes, remote access +{} ns", media.nodes, media.remote_latency_ns)
                } else {
                    String::new()
                }
            }
            None => format!(
                "{}: {} ns per sequential line, {} ns per random line, {} ns per fence, {} ns per read line",
                self.name, self.sequential_line_ns, self.random_line_ns, self.fence_ns, self.read_line_ns
            ),
        }
    }

    /// Looks a preset up by name (`dram`, `optane`, `simple`, `sp3-500ns`).
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
    /// NUMA nodes the pool's memory is split over: 1 unless the backend
    /// emulates several (`emulated` with `--pm-numa-nodes`).
    fn numa_nodes(&self) -> u32 {
        1
    }

    /// The NUMA node of the byte at `offset` (0 with one node).
    fn numa_node_of(&self, _offset: u64) -> u32 {
        0
    }

    /// Stores `source` at the 8-aligned `offset` (its length a multiple of
    /// 8) into pool memory the caller uses as *volatile* memory: never made
    /// durable, meaningless after a crash (the Zen paper's "MMDB with NVM
    /// capacity" keeps tuples there). Word by word with atomic stores, so a
    /// concurrent [`PmBackend::read_volatile`] of the same bytes is defined
    /// (it may see a mix, which its caller discards). The `emulated`
    /// backend charges what the cache's later write-back of the lines costs
    /// (their ownership reads and media writes) at the thread's next fence;
    /// this default, used by the crash simulator, also flushes the lines
    /// so that its lists of pending stores stay short (no recovery reads
    /// them).
    fn write_volatile(&self, offset: u64, source: &[u8]) {
        debug_assert!(offset.is_multiple_of(8) && source.len().is_multiple_of(8));
        for (index, word) in source.chunks_exact(8).enumerate() {
            let value = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            self.store_u64(offset + 8 * index as u64, value);
        }
        self.flush(offset, source.len() as u64);
    }

    /// Loads the `len` bytes (a multiple of 8) at the 8-aligned `offset` of
    /// volatile pool memory (see [`PmBackend::write_volatile`]) word by
    /// word, charging the read like [`PmBackend::read`], and returns their
    /// XOR (the caller needs the cost of the access, not the bytes).
    fn read_volatile(&self, offset: u64, len: u64) -> u64 {
        debug_assert!(offset.is_multiple_of(8) && len.is_multiple_of(8));
        let mut folded = 0;
        let mut word = 0;
        while word < len {
            folded ^= self.load_u64(offset + word);
            word += 8;
        }
        folded
    }

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
        COUNTERS.with(|c| count_read(c, offset, destination.len() as u64));
    }

    #[inline(always)]
    fn load_u64(&self, offset: u64) -> u64 {
        check_word(self.mapping.len(), offset);
        // SAFETY: in range and 8-aligned (the mapping is page-aligned), so a
        // valid AtomicU64 location for the mapping's lifetime.
        let value = unsafe { (*(self.address(offset) as *const AtomicU64)).load(Ordering::Acquire) };
        COUNTERS.with(|c| count_read(c, offset, 8));
        value
    }

    #[inline(always)]
    fn write(&self, offset: u64, source: &[u8]) {
        check_range(self.mapping.len(), offset, source.len() as u64);
        // SAFETY: range checked; no overlapping concurrent access by contract.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), self.address(offset), source.len()) }
        COUNTERS.with(|c| {
            bump(&c.bytes_written, source.len() as u64);
            count_write(c, offset, source.len() as u64);
        });
    }

    #[inline]
    fn write_volatile(&self, offset: u64, source: &[u8]) {
        check_range(self.mapping.len(), offset, source.len() as u64);
        assert!(offset.is_multiple_of(8) && source.len().is_multiple_of(8), "unaligned volatile write at {offset}");
        for (index, word) in source.chunks_exact(8).enumerate() {
            let value = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            // SAFETY: in range and 8-aligned (the mapping is page-aligned),
            // so a valid AtomicU64 location for the mapping's lifetime.
            unsafe { (*(self.address(offset + 8 * index as u64) as *const AtomicU64)).store(value, Ordering::Relaxed) }
        }
        COUNTERS.with(|c| {
            bump(&c.bytes_written, source.len() as u64);
            count_write(c, offset, source.len() as u64);
        });
    }

    #[inline]
    fn read_volatile(&self, offset: u64, len: u64) -> u64 {
        check_range(self.mapping.len(), offset, len);
        assert!(offset.is_multiple_of(8) && len.is_multiple_of(8), "unaligned volatile read at {offset}");
        let mut folded = 0;
        let mut word = 0;
        while word < len {
            // SAFETY: in range and 8-aligned; see write_volatile.
            folded ^= unsafe { (*(self.address(offset + word) as *const AtomicU64)).load(Ordering::Relaxed) };
            word += 8;
        }
        COUNTERS.with(|c| count_read(c, offset, len));
        folded
    }

    #[inline(always)]
    fn store_u64(&self, offset: u64, value: u64) {
        check_word(self.mapping.len(), offset);
        // SAFETY: in range and aligned; see load_u64.
        unsafe { (*(self.address(offset) as *const AtomicU64)).store(value, Ordering::Release) }
        COUNTERS.with(|c| {
            bump(&c.bytes_written, 8);
            count_write(c, offset, 8);
        });
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
            COUNTERS.with(|c| {
                bump(&c.bytes_written, 8);
                count_write(c, offset, 8);
            });
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
            count_write(c, offset, source.len() as u64);
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
    /// The medium's shared state (media models only).
    media: Option<Media>,
}

/// A thread's lines persisted since its last fence and its streams, for
/// the media model. Keyed by the medium's address: a thread that moves to
/// another pool starts afresh there.
struct EmulatedThread {
    media: usize,
    pending: Vec<PendingLine>,
    stream: ThreadStream,
}

thread_local! {
    static EMULATED: RefCell<EmulatedThread> = const {
        RefCell::new(EmulatedThread {
            media: 0,
            pending: Vec::new(),
            stream: ThreadStream { last_written_xpline: u64::MAX, last_read_xpline: u64::MAX, node: 0 },
        })
    };
    /// The NUMA node the calling thread runs on, for the media model's
    /// emulated nodes ([`set_thread_numa_node`]).
    static THREAD_NODE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Declares that the calling thread runs on NUMA node `node`: the
/// `emulated` backend charges its accesses to other nodes' memory the
/// remote latency. (On a machine with several real nodes the thread should
/// also be bound there; this only informs the latency model.)
pub fn set_thread_numa_node(node: u32) {
    THREAD_NODE.with(|cell| cell.set(node));
}

/// The node [`set_thread_numa_node`] declared for the calling thread (0 by
/// default).
pub fn thread_numa_node() -> u32 {
    THREAD_NODE.with(std::cell::Cell::get)
}

/// Lines of volatile writes (`PmBackend::write_volatile`) a thread's
/// pending list holds at most before the media model charges them without
/// a fence (64 KiB).
const VOLATILE_BURST_LINES: usize = 1024;

impl Emulated {
    /// The model in force.
    pub fn model(&self) -> LatencyModel {
        self.model
    }

    /// Runs `f` on this thread's state for `media`.
    fn with_thread<T>(media: &Media, f: impl FnOnce(&mut EmulatedThread) -> T) -> T {
        EMULATED.with(|state| {
            let mut state = state.borrow_mut();
            let key = media as *const Media as usize;
            if state.media != key {
                *state = EmulatedThread { media: key, pending: Vec::new(), stream: ThreadStream::default() };
            }
            state.stream.node = thread_numa_node();
            f(&mut state)
        })
    }

    /// Records the persisted lines of `[offset, offset + len)`.
    fn note_lines(&self, offset: u64, len: u64, non_temporal: bool) {
        let Some(media) = &self.media else { return };
        if len == 0 {
            return;
        }
        let end = offset + len;
        Self::with_thread(media, |state| {
            let mut line = offset & !(CACHE_LINE - 1);
            while line < end {
                // Only a non-temporal store can leave a line partly written:
                // a cached line is whole in the cache when it is flushed.
                let partial = non_temporal && (line < offset || line + CACHE_LINE > end);
                state.pending.push(PendingLine { offset: line, non_temporal, partial });
                line += CACHE_LINE;
            }
        });
    }

    /// Charges a read of `len` bytes at `offset`.
    #[inline(always)]
    fn charge_read(&self, offset: u64, len: u64) {
        if let Some(media) = &self.media {
            let now = self.tsc.now_ns();
            let charge = Self::with_thread(media, |state| media.read(now, offset, len, &mut state.stream));
            self.pay(charge);
            return;
        }
        if self.model.read_line_ns > 0 && len > 0 {
            let first = offset / CACHE_LINE;
            let last = (offset + len - 1) / CACHE_LINE;
            let waited = self.tsc.spin((last - first + 1) * self.model.read_line_ns);
            COUNTERS.with(|c| bump(&c.stall_ns, waited));
        }
    }

    /// Spins for what `charge` says and counts it.
    fn pay(&self, charge: crate::media::Charge) {
        let waited = self.tsc.spin(charge.stall_ns);
        COUNTERS.with(|c| {
            bump(&c.stall_ns, waited);
            bump(&c.media_xplines_written, charge.media_writes);
            bump(&c.media_xplines_read, charge.media_reads);
        });
    }

    /// Nanoseconds the model charges for the lines pending at a fence.
    pub fn fence_cost_ns(model: &LatencyModel, sequential_lines: u64, random_lines: u64) -> u64 {
        model.fence_ns + sequential_lines * model.sequential_line_ns + random_lines * model.random_line_ns
    }
}

impl PmBackend for Emulated {
    fn from_mapping(mapping: Mapping, options: &PmOptions) -> PoolResult<Self> {
        if let Some(media) = &options.latency.media {
            media.validate().map_err(|reason| PoolError::InvalidOption(format!("media model: {reason}")))?;
        }
        Ok(Self {
            direct: Direct::from_mapping(mapping, options)?,
            model: options.latency,
            tsc: TscCalibration::measure(),
            media: options.latency.media.map(Media::new),
        })
    }

    fn info(&self) -> BackendInfo {
        BackendInfo { kind: BackendKind::Emulated, latency: Some(self.model), ..self.direct.info() }
    }

    fn mapping(&self) -> &Mapping {
        &self.direct.mapping
    }

    fn numa_nodes(&self) -> u32 {
        self.media.as_ref().map_or(1, |media| media.params().nodes)
    }

    fn numa_node_of(&self, offset: u64) -> u32 {
        self.media.as_ref().map_or(0, |media| media.node_of(offset))
    }

    #[inline(always)]
    fn read(&self, offset: u64, destination: &mut [u8]) {
        self.direct.read(offset, destination);
        self.charge_read(offset, destination.len() as u64);
    }

    #[inline]
    fn read_volatile(&self, offset: u64, len: u64) -> u64 {
        let folded = self.direct.read_volatile(offset, len);
        self.charge_read(offset, len);
        folded
    }

    #[inline]
    fn write_volatile(&self, offset: u64, source: &[u8]) {
        self.direct.write_volatile(offset, source);
        // The lines are never flushed; the cache writes them back some time
        // later. Charged as pending lines at this thread's next fence: the
        // media model then reads each XPLine it does not hold (the
        // ownership read) and writes the evicted ones; the per-line model
        // charges them as persisted lines.
        if let Some(media) = &self.media {
            self.note_lines(offset, source.len() as u64, false);
            // A thread that never fences (read-only transactions writing
            // metadata) still pays: once this many lines wait, they are
            // charged as one write-back burst (one persist latency plus
            // what the medium does), and the list stays bounded.
            let now = self.tsc.now_ns();
            let charge = Self::with_thread(media, |state| {
                (state.pending.len() >= VOLATILE_BURST_LINES).then(|| {
                    let charge = media.fence(now, &state.pending, &mut state.stream);
                    state.pending.clear();
                    charge
                })
            });
            if let Some(charge) = charge {
                self.pay(charge);
            }
        } else if self.model.sequential_line_ns > 0 || self.model.random_line_ns > 0 {
            let base = self.direct.mapping.base() as u64;
            COUNTERS.with(|c| {
                let mut line = (base + offset) & !(CACHE_LINE - 1);
                while line < base + offset + source.len() as u64 {
                    note_persisted_line(c, line);
                    line += CACHE_LINE;
                }
            });
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
        self.direct.write_non_temporal(offset, source);
        self.note_lines(offset, source.len() as u64, true);
    }

    #[inline(always)]
    fn flush(&self, offset: u64, len: u64) {
        self.direct.flush(offset, len);
        if self.direct.flush_instruction != FlushInstruction::None {
            self.note_lines(offset, len, false);
        }
    }

    #[inline(always)]
    fn fence(&self) {
        if let Some(media) = &self.media {
            self.direct.fence_inner();
            let now = self.tsc.now_ns();
            let charge = Self::with_thread(media, |state| {
                let charge = media.fence(now, &state.pending, &mut state.stream);
                state.pending.clear();
                charge
            });
            self.pay(charge);
            return;
        }
        let (sequential, random) = COUNTERS.with(|c| (c.pending_sequential_lines.get(), c.pending_random_lines.get()));
        self.direct.fence_inner();
        let cost = Self::fence_cost_ns(&self.model, sequential, random);
        if cost > 0 {
            let waited = self.tsc.spin(cost);
            COUNTERS.with(|c| bump(&c.stall_ns, waited));
        }
    }
}
