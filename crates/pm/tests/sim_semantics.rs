//! Store, flush, fence and capture semantics of the crash simulator.

use pmtx_pm::sim::{CapturePolicy, ImageBudget};
use pmtx_pm::{
    reset_thread_counters, thread_counters, BackendKind, Mapping, PersistenceDomain, PmBackend, PmOptions, Sim,
};

const POOL: u64 = 64 << 10;

fn sim_with(options: PmOptions) -> Sim {
    Sim::from_mapping(Mapping::anonymous(POOL).unwrap(), &options).unwrap()
}

fn sim() -> Sim {
    sim_with(PmOptions::default())
}

fn word(bytes: &[u8], offset: u64) -> u64 {
    u64::from_ne_bytes(bytes[offset as usize..offset as usize + 8].try_into().unwrap())
}

#[test]
fn info_reports_sim() {
    let sim = sim_with(PmOptions { sim_seed: 77, ..PmOptions::default() });
    assert_eq!(sim.info().kind, BackendKind::Sim);
    assert_eq!(sim.seed(), 77);
    assert_eq!(sim.len(), POOL);
}

#[test]
fn store_needs_flush_and_fence_of_the_same_thread() {
    let sim = sim();
    sim.store_u64(128, 5);
    assert_eq!(sim.load_u64(128), 5, "reads see live memory");
    sim.fence();
    assert_eq!(word(&sim.persisted_image(), 128), 0, "a fence without flush persists nothing");
    assert_eq!(sim.pending_stores(), 1);
    sim.flush(128, 8);
    assert_eq!(word(&sim.persisted_image(), 128), 0, "a flush without fence persists nothing");
    sim.fence();
    assert_eq!(word(&sim.persisted_image(), 128), 5);
    assert_eq!(sim.pending_stores(), 0);
    assert_eq!(sim.dirty_lines(), 0);
    assert_eq!(sim.persisted_image(), sim.live_image());
}

#[test]
fn flush_covers_only_stores_made_before_it() {
    let sim = sim();
    sim.store_u64(64, 1);
    sim.flush(64, 8);
    sim.store_u64(72, 2);
    sim.store_u64(64, 3);
    sim.fence();
    let persisted = sim.persisted_image();
    assert_eq!((word(&persisted, 64), word(&persisted, 72)), (1, 0));
    assert_eq!(sim.pending_stores(), 2);
    sim.persist(64, 16);
    let persisted = sim.persisted_image();
    assert_eq!((word(&persisted, 64), word(&persisted, 72)), (3, 2));
}

#[test]
fn another_threads_fence_does_not_complete_my_flush() {
    let sim = sim();
    sim.store_u64(256, 9);
    sim.flush(256, 8);
    std::thread::scope(|scope| {
        scope.spawn(|| sim.fence());
    });
    assert_eq!(word(&sim.persisted_image(), 256), 0);
    // Another thread's flush + fence does make the line durable (it writes
    // back the whole line, including my store).
    std::thread::scope(|scope| {
        scope.spawn(|| sim.persist(256, 8));
    });
    assert_eq!(word(&sim.persisted_image(), 256), 9);
}

#[test]
fn non_temporal_stores_are_durable_after_the_writers_fence() {
    let sim = sim();
    std::thread::scope(|scope| {
        scope.spawn(|| sim.write_non_temporal(512, &[7u8; 100]));
    });
    sim.fence();
    assert!(sim.persisted_image()[512..612].iter().all(|&b| b == 0), "fence of another thread");
    sim.write_non_temporal(1024, &[8u8; 100]);
    sim.fence();
    let persisted = sim.persisted_image();
    assert!(persisted[1024..1124].iter().all(|&b| b == 8));
    assert!(persisted[512..612].iter().all(|&b| b == 0));
}

#[test]
fn failed_compare_exchange_stores_nothing() {
    let sim = sim();
    assert_eq!(sim.compare_exchange_u64(8, 1, 2), Err(0));
    assert_eq!(sim.pending_stores(), 0);
    assert_eq!(sim.compare_exchange_u64(8, 0, 2), Ok(0));
    assert_eq!(sim.pending_stores(), 1);
}

#[test]
fn stores_of_already_persisted_values_are_not_pending() {
    let sim = sim();
    sim.write_zeros(0, 8192);
    assert_eq!(sim.pending_stores(), 0);
    sim.store_u64(0, 1);
    sim.store_u64(0, 0); // same word now has a pending store: must be kept
    assert_eq!(sim.pending_stores(), 2);
}

#[test]
fn eadr_stores_are_durable_at_once() {
    let sim = sim_with(PmOptions { domain: PersistenceDomain::Eadr, ..PmOptions::default() });
    sim.set_capture(CapturePolicy::all());
    sim.write(100, b"durable");
    sim.store_u64(4096, 11);
    assert_eq!(&sim.persisted_image()[100..107], b"durable");
    assert_eq!(word(&sim.persisted_image(), 4096), 11);
    sim.fence();
    let states = sim.take_crash_states();
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].images(1, ImageBudget::default()).count(), 1);
}

#[test]
fn counters_match_direct_accounting() {
    let sim = sim();
    reset_thread_counters();
    sim.write(0, &[1u8; 128]);
    sim.flush(0, 128);
    sim.fence();
    sim.write_non_temporal(4096, &[2u8; 64]);
    sim.fence();
    let counters = thread_counters();
    assert_eq!(counters.lines_flushed, 2);
    assert_eq!(counters.fences, 2);
    assert_eq!(counters.bytes_written, 192);
    assert_eq!(counters.non_temporal_bytes, 64);
    assert!(counters.blocks_256_written >= 2);
}

#[test]
fn events_number_crash_points_and_acks_follow_fences() {
    let sim = sim();
    sim.set_capture(CapturePolicy::all());
    assert_eq!(sim.event_count(), 0);
    sim.persist(0, 8);
    let ack = sim.event_count();
    sim.crash_point("label");
    let explicit = sim.capture_now("explicit");
    let states = sim.take_crash_states();
    let summary: Vec<(u64, &str)> = states.iter().map(|s| (s.event, s.label)).collect();
    assert_eq!(summary, vec![(0, "fence"), (1, "label"), (2, "explicit")]);
    assert_eq!(ack, 1);
    assert_eq!(explicit, 2);
    assert!(sim.take_crash_states().is_empty());
}

#[test]
fn capture_policy_filters_and_bounds() {
    let sim = sim();
    sim.set_capture(CapturePolicy { every_nth: 2, ..CapturePolicy::all() });
    for _ in 0..10 {
        sim.fence();
    }
    assert_eq!(sim.captured_count(), 5);
    sim.take_crash_states();

    sim.set_capture(CapturePolicy::labels_only());
    sim.fence();
    sim.crash_point("commit");
    let states = sim.take_crash_states();
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].label, "commit");

    sim.set_capture(CapturePolicy { max_states: 3, ..CapturePolicy::all() });
    for _ in 0..5 {
        sim.fence();
    }
    assert_eq!(sim.captured_count(), 3);
    assert_eq!(sim.dropped_captures(), 2);

    sim.set_capture(CapturePolicy::NONE);
    sim.fence();
    assert_eq!(sim.captured_count(), 3);
}

#[test]
fn random_capture_is_deterministic_in_the_seed() {
    let captured = |seed: u64| {
        let sim = sim_with(PmOptions { sim_seed: seed, ..PmOptions::default() });
        sim.set_capture(CapturePolicy::random(250_000));
        for i in 0..400 {
            sim.store_u64(8 * (i % 64), i);
            sim.crash_point("point");
        }
        sim.take_crash_states().iter().map(|s| s.event).collect::<Vec<_>>()
    };
    let first = captured(3);
    assert!(first.len() > 50 && first.len() < 150, "{}", first.len());
    assert_eq!(first, captured(3));
    assert_ne!(first, captured(4));
}

#[test]
fn crash_images_reload_as_backends() {
    let sim = sim();
    sim.write(0, &[0xAB; 200]);
    sim.persist(0, 64);
    sim.store_u64(4096, 42);
    let images = sim.crash_images_now(9, ImageBudget::default());
    assert!(images.len() >= 2);
    for image in &images {
        let reloaded = Sim::from_mapping(Mapping::from_bytes(&image.bytes).unwrap(), &PmOptions::default()).unwrap();
        assert_eq!(reloaded.persisted_image(), image.bytes, "{}", image.description);
        assert_eq!(reloaded.pending_stores(), 0);
        let mut head = [0u8; 64];
        reloaded.read(0, &mut head);
        assert_eq!(head, [0xAB; 64], "persisted line is in every image");
    }
}
