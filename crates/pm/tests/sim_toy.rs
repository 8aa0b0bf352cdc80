//! Proves the crash simulator on a toy commit protocol: the correct toy passes
//! every crash image, and each variant with one flush or one fence removed is
//! caught by the recovery oracle.

use pmtx_pm::sim::{CapturePolicy, CrashState, ImageBudget};
use pmtx_pm::{Direct, FlushInstruction, Mapping, PmBackend, PmOptions, Sim};

const POOL: u64 = 1 << 20;
/// Record of transaction i: three words (a, b, check) at RECORDS + 32 i,
/// so two records share a line.
const RECORDS: u64 = 4096;
/// Commit flag of transaction i (value i + 1) at FLAGS + 8 i: eight per line.
const FLAGS: u64 = 512 << 10;
const TXNS: u64 = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Correct,
    NoRecordFlush,
    NoFenceBeforeFlag,
    NoFinalFence,
}

fn record(i: u64) -> [u64; 3] {
    let a = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let b = !a ^ (i << 32);
    [a, b, a.rotate_left(17) ^ b ^ 0xC0FF_EE00 ^ i]
}

fn options(seed: u64) -> PmOptions {
    PmOptions { sim_seed: seed, ..PmOptions::default() }
}

/// One toy transaction on `backend`; returns nothing, the caller acks.
fn transaction<B: PmBackend>(backend: &B, i: u64, variant: Variant) {
    let offset = RECORDS + 32 * i;
    let bytes: Vec<u8> = record(i).iter().flat_map(|w| w.to_ne_bytes()).collect();
    backend.write(offset, &bytes);
    if variant != Variant::NoRecordFlush {
        backend.flush(offset, 24);
    }
    if variant != Variant::NoFenceBeforeFlag {
        backend.fence();
    }
    backend.crash_point("before commit flag");
    backend.store_u64(FLAGS + 8 * i, i + 1);
    backend.crash_point("after commit flag");
    backend.flush(FLAGS + 8 * i, 8);
    if variant != Variant::NoFinalFence {
        backend.fence();
    }
}

/// Runs the toy with capture at every fence and crash point; returns the
/// crash states and, per transaction, the event count at acknowledgement.
fn run(variant: Variant, seed: u64, txns: std::ops::Range<u64>) -> (Vec<CrashState>, Vec<(u64, u64)>) {
    let sim = Sim::from_mapping(Mapping::anonymous(POOL).unwrap(), &options(seed)).unwrap();
    sim.set_capture(CapturePolicy::all());
    let mut acks = Vec::new();
    for i in txns {
        transaction(&sim, i, variant);
        acks.push((i, sim.event_count()));
    }
    sim.capture_now("end");
    assert_eq!(sim.dropped_captures(), 0);
    (sim.take_crash_states(), acks)
}

/// Recovery oracle on a loaded image: a set flag implies a complete record;
/// an acknowledged commit (acked at or before `event`) has its flag set.
fn check<B: PmBackend>(backend: &B, acks: &[(u64, u64)], event: u64) -> Result<usize, String> {
    let mut committed = 0;
    for &(i, acked_at) in acks {
        let flag = backend.load_u64(FLAGS + 8 * i);
        if flag == 0 {
            if acked_at <= event {
                return Err(format!("transaction {i} acknowledged at event {acked_at} is lost"));
            }
            continue;
        }
        if flag != i + 1 {
            return Err(format!("transaction {i}: garbage flag {flag:#x}"));
        }
        for (k, expected) in record(i).iter().enumerate() {
            let found = backend.load_u64(RECORDS + 32 * i + 8 * k as u64);
            if found != *expected {
                return Err(format!("transaction {i} committed but word {k} is {found:#x}, not {expected:#x}"));
            }
        }
        committed += 1;
    }
    Ok(committed)
}

fn load(bytes: &[u8]) -> Direct {
    let options = PmOptions { flush_instruction: Some(FlushInstruction::None), ..PmOptions::default() };
    Direct::from_mapping(Mapping::from_bytes(bytes).unwrap(), &options).unwrap()
}

struct Outcome {
    images: usize,
    first_failure: Option<String>,
    committed_seen: std::collections::BTreeSet<usize>,
}

fn check_all(states: &[CrashState], acks: &[(u64, u64)], seed: u64) -> Outcome {
    let mut outcome = Outcome { images: 0, first_failure: None, committed_seen: Default::default() };
    for state in states {
        for image in state.images(seed, ImageBudget::default()) {
            outcome.images += 1;
            match check(&load(&image.bytes), acks, state.event) {
                Ok(committed) => {
                    outcome.committed_seen.insert(committed);
                }
                Err(error) => {
                    outcome.first_failure = Some(format!("{error} in {}", image.description));
                    return outcome;
                }
            }
        }
    }
    outcome
}

#[test]
fn correct_toy_passes_every_image() {
    let seed = 0x5EED_0001;
    let (states, acks) = run(Variant::Correct, seed, 0..TXNS);
    // 2 fences + 2 crash points per transaction, plus the final capture.
    assert_eq!(states.len() as u64, 4 * TXNS + 1);
    let outcome = check_all(&states, &acks, seed);
    assert_eq!(outcome.first_failure, None, "seed {seed:#x}");
    assert!(outcome.images > states.len(), "only {} images", outcome.images);
    // The images are meaningful: both uncommitted and fully committed states appear.
    assert!(outcome.committed_seen.contains(&0));
    assert!(outcome.committed_seen.contains(&(TXNS as usize)));
}

#[test]
fn acknowledged_commits_are_durable_in_every_image() {
    let seed = 0x5EED_0002;
    let (states, acks) = run(Variant::Correct, seed, 0..TXNS);
    let mut checked = 0;
    for state in &states {
        let required: Vec<u64> = acks.iter().filter(|(_, at)| *at <= state.event).map(|(i, _)| *i).collect();
        for image in state.images(seed, ImageBudget::default()) {
            let backend = load(&image.bytes);
            for &i in &required {
                assert_eq!(backend.load_u64(FLAGS + 8 * i), i + 1, "ack of {i} lost in {}", image.description);
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
    // Every acknowledgement comes after the fence that made it durable.
    let last = states.last().unwrap();
    assert_eq!(last.label, "end");
    assert!(acks.iter().all(|(_, at)| *at <= last.event));
}

#[test]
fn missing_record_flush_is_caught() {
    let seed = 0x5EED_0003;
    let (states, acks) = run(Variant::NoRecordFlush, seed, 0..TXNS);
    let failure = check_all(&states, &acks, seed).first_failure.expect("a missing flush must be caught");
    assert!(failure.contains("committed but word"), "{failure}");
    assert!(failure.contains("seed 0x5eed0003"), "{failure}");
}

#[test]
fn missing_fence_before_commit_flag_is_caught() {
    let seed = 0x5EED_0004;
    let (states, acks) = run(Variant::NoFenceBeforeFlag, seed, 0..TXNS);
    let failure = check_all(&states, &acks, seed).first_failure.expect("a missing fence must be caught");
    assert!(failure.contains("committed but word"), "{failure}");
}

#[test]
fn missing_final_fence_loses_acknowledged_commits() {
    let seed = 0x5EED_0005;
    let (states, acks) = run(Variant::NoFinalFence, seed, 0..TXNS);
    let failure = check_all(&states, &acks, seed).first_failure.expect("an early ack must be caught");
    assert!(failure.contains("is lost"), "{failure}");
}

#[test]
fn correct_toy_passes_with_two_threads_sharing_flag_lines() {
    let seed = 0x5EED_0006;
    let sim = Sim::from_mapping(Mapping::anonymous(POOL).unwrap(), &options(seed)).unwrap();
    sim.set_capture(CapturePolicy::all());
    let acks = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            let (sim, acks) = (&sim, &acks);
            scope.spawn(move || {
                // Interleaved transaction numbers: the threads share flag lines.
                for i in (thread..TXNS).step_by(2) {
                    transaction(sim, i, Variant::Correct);
                    acks.lock().unwrap().push((i, sim.event_count()));
                }
            });
        }
    });
    let acks = acks.into_inner().unwrap();
    let states = sim.take_crash_states();
    assert_eq!(states.len() as u64, 4 * TXNS);
    let outcome = check_all(&states, &acks, seed);
    assert_eq!(outcome.first_failure, None);
}
