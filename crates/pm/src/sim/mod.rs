//! The crash simulator: a [`PmBackend`] that sees every store, flush and
//! fence and can say what the medium might hold after a crash.
//!
//! # Model (docs/media-model.md)
//!
//! *Live memory* is the [`Mapping`]: every store also lands there, and reads
//! are served from it without locking. Beside it, under one mutex, the
//! simulator keeps
//!
//! * the *persisted image*: what survives a crash for certain, as
//!   copy-on-write 4 KiB pages (see `pages.rs`), so capturing a crash state
//!   costs a few pointer copies;
//! * per 64 B line, the ordered list of *pending* stores not yet durable.
//!   Stores are split at 8 B boundaries (an aligned 8-byte store is
//!   failure-atomic, anything wider may tear); a sub-word store is
//!   `(offset, len <= 8 inside one aligned word, bytes)`. A store that writes
//!   what is already persisted to a word with no pending store is dropped: it
//!   cannot change any image (this keeps zeroing of fresh memory cheap).
//!
//! Per thread (a thread-local id):
//!
//! * `flush` by thread T covers the line's pending stores made so far;
//! * `write_non_temporal` by T is pending and already covered by T's flush;
//! * `fence` by T applies, in order, exactly the stores covered by T's
//!   earlier flushes to the persisted image. Another thread's fence does not.
//!
//! In the eADR domain every store is applied to the persisted image at once
//! and flushes are no-ops (fences remain crash points).
//!
//! # Crash points and capture
//!
//! Crash points are every fence (taken *before* the fence applies anything),
//! every [`PmBackend::crash_point`] and every [`Sim::capture_now`]. Each gets
//! the next global event number; [`Sim::event_count`] is the number of
//! events so far, so an acknowledgement recorded as `event_count()` after a
//! fence returned is larger than that fence's event, and every crash state
//! with `event >= ack` must contain the acknowledged commit. A
//! [`CapturePolicy`] decides which crash points are captured into
//! [`CrashState`]s (collected with [`Sim::take_crash_states`]);
//! [`CrashState::images`] derives the possible crash images: for every dirty
//! line some prefix of its pending stores (stores to one line reach the
//! medium in order, different lines independently). Everything random comes
//! from seeds (ChaCha8) and is printed in image descriptions, so any failing
//! image can be rebuilt with [`CrashState::image_with_prefixes`] or by
//! re-running with the same seed.

mod images;
mod pages;

pub use images::{CrashImage, CrashImages, CrashState, DirtyLine, ImageBudget, PendingStore};

use crate::backend::{BackendInfo, BackendKind, Direct, PersistenceDomain, PmBackend, PmOptions};
use crate::counters::{bump, note_persisted_line, COUNTERS};
use crate::cpu::{FlushInstruction, CACHE_LINE};
use crate::error::PoolResult;
use crate::mapping::Mapping;
use pages::Pages;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_ID: u64 = NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed);
}

/// The simulator's id of the calling thread (as recorded in
/// [`PendingStore::thread`]).
pub fn current_thread_id() -> u64 {
    THREAD_ID.with(|id| *id)
}

/// Which crash points are captured as [`CrashState`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapturePolicy {
    /// Capture every n-th candidate crash point (1: all of them, 0: none by
    /// this rule).
    pub every_nth: u64,
    /// Also capture each other candidate with this probability (per million),
    /// drawn from the simulator's seeded generator.
    pub random_per_million: u32,
    /// Only `crash_point` labels are candidates, not fences.
    pub at_labels_only: bool,
    /// Hold at most this many states (until taken); later captures are
    /// dropped and counted in [`Sim::dropped_captures`].
    pub max_states: usize,
}

impl CapturePolicy {
    /// Capture nothing automatically (explicit `capture_now` still works).
    pub const NONE: CapturePolicy =
        CapturePolicy { every_nth: 0, random_per_million: 0, at_labels_only: false, max_states: 0 };

    /// Every fence and every crash point, up to 100 000 held states.
    pub const fn all() -> Self {
        CapturePolicy { every_nth: 1, random_per_million: 0, at_labels_only: false, max_states: 100_000 }
    }

    /// Every `crash_point` label, no fences.
    pub const fn labels_only() -> Self {
        CapturePolicy { at_labels_only: true, ..Self::all() }
    }

    /// Each crash point with probability `per_million / 10^6`.
    pub const fn random(per_million: u32) -> Self {
        CapturePolicy { every_nth: 0, random_per_million: per_million, ..Self::all() }
    }
}

impl Default for CapturePolicy {
    fn default() -> Self {
        Self::NONE
    }
}

#[derive(Default)]
struct Line {
    /// Pending stores, oldest first (ascending `seq`).
    stores: VecDeque<PendingStore>,
    /// Bit w set: some pending store touches word w of the line.
    word_mask: u8,
    /// Stores with `seq` below this are covered by some thread's flush.
    flushed_upto: u64,
}

impl Line {
    fn recompute_mask(&mut self) {
        self.word_mask = self.stores.iter().fold(0, |mask, store| mask | word_bit(store.offset));
    }
}

fn word_bit(offset: u64) -> u8 {
    1 << ((offset % CACHE_LINE) / 8)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum EventKind {
    Fence,
    Label,
}

struct SimState {
    persisted: Pages,
    /// Dirty lines by line index (offset / 64), in address order.
    lines: BTreeMap<u64, Line>,
    /// Per thread: line index -> stores with `seq` below the value are
    /// covered by that thread's flushes since its last fence.
    flush_marks: HashMap<u64, HashMap<u64, u64>>,
    next_seq: u64,
    events: u64,
    candidates: u64,
    policy: CapturePolicy,
    capture_rng: ChaCha8Rng,
    captured: Vec<CrashState>,
    dropped: u64,
}

impl SimState {
    fn apply_now(&mut self, offset: u64, source: &[u8]) {
        self.persisted.write(offset, source);
    }

    /// Appends the 8 B pieces of a store to their lines' pending lists.
    fn record(&mut self, offset: u64, source: &[u8], thread: u64, non_temporal: bool) {
        let end = offset + source.len() as u64;
        let mut position = offset;
        while position < end {
            let piece_end = ((position & !7) + 8).min(end);
            let len = (piece_end - position) as usize;
            let data = &source[(position - offset) as usize..(piece_end - offset) as usize];
            let line_index = position / CACHE_LINE;
            let bit = word_bit(position);
            let word_pending = self.lines.get(&line_index).is_some_and(|line| line.word_mask & bit != 0);
            let mut current = [0u8; 8];
            if !word_pending {
                self.persisted.read_within_page(position, &mut current[..len]);
            }
            if word_pending || current[..len] != *data {
                let mut bytes = [0u8; 8];
                bytes[..len].copy_from_slice(data);
                let seq = self.next_seq;
                self.next_seq += 1;
                let line = self.lines.entry(line_index).or_default();
                line.stores.push_back(PendingStore {
                    seq,
                    offset: position,
                    len: len as u8,
                    bytes,
                    thread,
                    non_temporal,
                });
                line.word_mask |= bit;
            }
            position = piece_end;
        }
    }

    /// `thread` flushes line `line_index`: covers its pending stores so far.
    fn mark_flushed(&mut self, thread: u64, line_index: u64) {
        if let Some(line) = self.lines.get_mut(&line_index) {
            line.flushed_upto = self.next_seq;
            self.flush_marks.entry(thread).or_default().insert(line_index, self.next_seq);
        }
    }

    /// `thread` fences: its flushed stores become durable.
    fn apply_flushes(&mut self, thread: u64) {
        let Some(marks) = self.flush_marks.remove(&thread) else {
            return;
        };
        for (line_index, upto) in marks {
            let Entry::Occupied(mut entry) = self.lines.entry(line_index) else {
                continue;
            };
            let line = entry.get_mut();
            let mut applied = false;
            while line.stores.front().is_some_and(|store| store.seq < upto) {
                let store = line.stores.pop_front().expect("front exists");
                self.persisted.write(store.offset, store.data());
                applied = true;
            }
            if line.stores.is_empty() {
                entry.remove();
            } else if applied {
                line.recompute_mask();
            }
        }
    }

    fn snapshot(&self, event: u64, label: &'static str) -> CrashState {
        let lines = self
            .lines
            .iter()
            .map(|(&index, line)| DirtyLine {
                offset: index * CACHE_LINE,
                flushed: line.stores.iter().take_while(|store| store.seq < line.flushed_upto).count(),
                stores: line.stores.iter().copied().collect(),
            })
            .collect();
        CrashState { event, label, persisted: self.persisted.clone(), lines }
    }

    fn store_state(&mut self, state: CrashState) {
        if self.captured.len() < self.policy.max_states {
            self.captured.push(state);
        } else {
            self.dropped += 1;
        }
    }

    /// Numbers a crash point and captures it if the policy says so.
    fn crash_event(&mut self, kind: EventKind, label: &'static str) -> u64 {
        let event = self.events;
        self.events += 1;
        let policy = self.policy;
        if policy.at_labels_only && kind == EventKind::Fence {
            return event;
        }
        self.candidates += 1;
        let mut capture = policy.every_nth > 0 && self.candidates.is_multiple_of(policy.every_nth);
        if !capture && policy.random_per_million > 0 {
            capture = self.capture_rng.gen_range(0..1_000_000u32) < policy.random_per_million;
        }
        if capture {
            let state = self.snapshot(event, label);
            self.store_state(state);
        }
        event
    }
}

/// The crash simulator backend (see the module documentation).
pub struct Sim {
    /// Live memory; `Direct` without flush instructions does the loads,
    /// stores and store counters.
    direct: Direct,
    domain: PersistenceDomain,
    flush_instruction: FlushInstruction,
    seed: u64,
    state: Mutex<SimState>,
}

impl Sim {
    /// The seed from `PmOptions::sim_seed`.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Sets which crash points are captured from now on.
    pub fn set_capture(&self, policy: CapturePolicy) {
        self.state.lock().policy = policy;
    }

    /// The capture policy in force.
    pub fn capture_policy(&self) -> CapturePolicy {
        self.state.lock().policy
    }

    /// Number of crash-point events so far (the next event's number).
    pub fn event_count(&self) -> u64 {
        self.state.lock().events
    }

    /// Makes a crash point labelled `label`, captures it regardless of the
    /// policy (still bounded by `max_states`) and returns its event number.
    pub fn capture_now(&self, label: &'static str) -> u64 {
        let mut state = self.state.lock();
        let event = state.events;
        state.events += 1;
        let snapshot = state.snapshot(event, label);
        state.store_state(snapshot);
        event
    }

    /// Makes a crash point labelled `label` and returns its state directly
    /// (not stored in the simulator).
    pub fn crash_state_now(&self, label: &'static str) -> CrashState {
        let mut state = self.state.lock();
        let event = state.events;
        state.events += 1;
        state.snapshot(event, label)
    }

    /// The crash images of a crash right now (see [`CrashState::images`]).
    pub fn crash_images_now(&self, seed: u64, budget: ImageBudget) -> Vec<CrashImage> {
        self.crash_state_now("now").images(seed, budget).collect()
    }

    /// Takes the captured crash states, oldest first.
    pub fn take_crash_states(&self) -> Vec<CrashState> {
        std::mem::take(&mut self.state.lock().captured)
    }

    /// Number of captured states held.
    pub fn captured_count(&self) -> usize {
        self.state.lock().captured.len()
    }

    /// Captures dropped because `max_states` were held.
    pub fn dropped_captures(&self) -> u64 {
        self.state.lock().dropped
    }

    /// The bytes that are durable now (what a crash with nothing pending
    /// written back would leave).
    pub fn persisted_image(&self) -> Vec<u8> {
        self.state.lock().persisted.to_vec()
    }

    /// A copy of live memory; callers make sure no thread is writing.
    pub fn live_image(&self) -> Vec<u8> {
        self.direct.mapping().snapshot()
    }

    /// Number of lines with pending stores.
    pub fn dirty_lines(&self) -> usize {
        self.state.lock().lines.len()
    }

    /// Number of pending (not yet durable) stores.
    pub fn pending_stores(&self) -> usize {
        self.state.lock().lines.values().map(|line| line.stores.len()).sum()
    }

    fn eadr(&self) -> bool {
        self.domain == PersistenceDomain::Eadr
    }

    /// Performs the live store `live` under the mutex (so the pending order
    /// of a word is its order in memory) and records it if `live` stored.
    fn store(&self, offset: u64, source: &[u8], non_temporal: bool, live: impl FnOnce() -> bool) {
        let mut state = self.state.lock();
        if !live() {
            return;
        }
        if self.eadr() {
            state.apply_now(offset, source);
            return;
        }
        let thread = current_thread_id();
        state.record(offset, source, thread, non_temporal);
        if non_temporal && !source.is_empty() {
            for line_index in offset / CACHE_LINE..=(offset + source.len() as u64 - 1) / CACHE_LINE {
                state.mark_flushed(thread, line_index);
            }
        }
    }
}

impl PmBackend for Sim {
    fn from_mapping(mapping: Mapping, options: &PmOptions) -> PoolResult<Self> {
        let live_options = PmOptions {
            flush_instruction: Some(FlushInstruction::None),
            domain: PersistenceDomain::Adr,
            msync: false,
            ..options.clone()
        };
        let direct = Direct::from_mapping(mapping, &live_options)?;
        let persisted = Pages::build(direct.len(), |offset, buffer| direct.read(offset, buffer));
        let flush_instruction = match options.domain {
            PersistenceDomain::Eadr => FlushInstruction::None,
            PersistenceDomain::Adr => options.flush_instruction.unwrap_or(FlushInstruction::Clwb),
        };
        let state = SimState {
            persisted,
            lines: BTreeMap::new(),
            flush_marks: HashMap::new(),
            next_seq: 0,
            events: 0,
            candidates: 0,
            policy: CapturePolicy::NONE,
            capture_rng: ChaCha8Rng::seed_from_u64(options.sim_seed),
            captured: Vec::new(),
            dropped: 0,
        };
        Ok(Self { direct, domain: options.domain, flush_instruction, seed: options.sim_seed, state: Mutex::new(state) })
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: BackendKind::Sim,
            mapping: self.direct.mapping().kind(),
            flush_instruction: self.flush_instruction,
            domain: self.domain,
            msync: false,
            latency: None,
        }
    }

    fn mapping(&self) -> &Mapping {
        self.direct.mapping()
    }

    #[inline]
    fn read(&self, offset: u64, destination: &mut [u8]) {
        self.direct.read(offset, destination)
    }

    #[inline]
    fn load_u64(&self, offset: u64) -> u64 {
        self.direct.load_u64(offset)
    }

    fn write(&self, offset: u64, source: &[u8]) {
        self.store(offset, source, false, || {
            self.direct.write(offset, source);
            true
        });
    }

    fn store_u64(&self, offset: u64, value: u64) {
        self.store(offset, &value.to_ne_bytes(), false, || {
            self.direct.store_u64(offset, value);
            true
        });
    }

    fn compare_exchange_u64(&self, offset: u64, current: u64, new: u64) -> Result<u64, u64> {
        let mut result = Err(current);
        self.store(offset, &new.to_ne_bytes(), false, || {
            result = self.direct.compare_exchange_u64(offset, current, new);
            result.is_ok()
        });
        result
    }

    fn write_non_temporal(&self, offset: u64, source: &[u8]) {
        self.store(offset, source, true, || {
            self.direct.write_non_temporal(offset, source);
            true
        });
    }

    fn flush(&self, offset: u64, len: u64) {
        // Range check (a no-op otherwise: `direct` has no flush instruction).
        self.direct.flush(offset, len);
        if len == 0 || self.eadr() {
            return;
        }
        let first = offset / CACHE_LINE;
        let last = (offset + len - 1) / CACHE_LINE;
        let base = self.direct.mapping().base() as u64;
        COUNTERS.with(|c| {
            for line_index in first..=last {
                bump(&c.lines_flushed, 1);
                note_persisted_line(c, base + line_index * CACHE_LINE);
            }
        });
        let thread = current_thread_id();
        let mut state = self.state.lock();
        for line_index in first..=last {
            state.mark_flushed(thread, line_index);
        }
    }

    fn fence(&self) {
        self.direct.fence();
        let mut state = self.state.lock();
        state.crash_event(EventKind::Fence, "fence");
        if !self.eadr() {
            state.apply_flushes(current_thread_id());
        }
    }

    fn crash_point(&self, label: &'static str) {
        self.state.lock().crash_event(EventKind::Label, label);
    }
}
