//! Region semantics on the `none` and `sim` backends (and `rtm` where the
//! CPU has it): paths, explicit aborts, retries, injected aborts and the
//! fallback policy.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pmtx_htm::{
    rtm_support, ExplicitAbort, Htm, HtmBackendKind, HtmConfig, HtmStatsSnapshot, RegionAbort, RegionPath,
    SimAbortConfig, MAX_EXPLICIT_ABORT_CODE,
};

/// A `sim` instance with the given injection and capacity retry budget.
fn sim(config: SimAbortConfig, max_capacity_retries: u32) -> Htm {
    Htm::new(HtmConfig { backend: HtmBackendKind::Sim, sim: config, max_capacity_retries, ..HtmConfig::software() })
        .expect("valid sim config")
}

#[test]
fn none_always_runs_the_fallback_path() {
    let htm = Htm::software();
    for _ in 0..100 {
        let (path, attempt, simulated) =
            htm.atomic(|context| (context.path(), context.attempt(), context.is_simulated_hardware()));
        assert_eq!((path, attempt, simulated), (RegionPath::Fallback, 0, false));
    }
    let stats = htm.stats().snapshot();
    assert_eq!(stats.regions, 100);
    assert_eq!(stats.fallback_executions, 100);
    assert_eq!(stats.hardware_attempts(), 0);
}

#[test]
fn sim_runs_bodies_under_the_fallback_discipline() {
    let htm = Htm::new(HtmConfig::sim(3, 100_000)).unwrap();
    for _ in 0..200 {
        let path = htm.atomic(|context| context.path());
        assert_eq!(path, RegionPath::Fallback);
    }
    let stats = htm.stats().snapshot();
    assert_eq!(stats.regions, 200);
    assert_eq!(stats.hardware_commits + stats.fallback_executions, 200);
}

#[test]
fn explicit_abort_returns_the_code_on_every_software_backend() {
    for htm in [Htm::software(), Htm::new(HtmConfig::sim(5, 0)).unwrap()] {
        let mut runs = 0;
        let outcome: Result<(), ExplicitAbort> = htm.try_atomic(|context| {
            runs += 1;
            Err(context.abort_explicit(42))
        });
        assert_eq!(outcome, Err(ExplicitAbort { code: 42 }));
        assert_eq!(runs, 1, "an explicit abort is not retried ({})", htm.backend());
        // Reserved codes are clamped identically on every path.
        let outcome: Result<(), _> = htm.try_atomic(|_| Err(RegionAbort::Explicit(0xff)));
        assert_eq!(outcome, Err(ExplicitAbort { code: MAX_EXPLICIT_ABORT_CODE }));
        let stats = htm.stats().snapshot();
        assert_eq!(stats.explicit_region_aborts, 2);
        assert_eq!(stats.regions, 2);
    }
    // On sim the explicit abort is also counted as an aborted (simulated) hardware attempt.
    let htm = Htm::new(HtmConfig::sim(5, 0)).unwrap();
    let _ = htm.try_atomic(|context| Err::<(), _>(context.abort_explicit(1)));
    assert_eq!(htm.stats().snapshot().explicit_aborts, 1);
}

#[test]
fn retry_requests_rerun_the_body() {
    // none: the fallback path reruns until the body stops asking.
    let htm = Htm::software();
    let mut runs = 0u32;
    let value = htm.try_atomic(|context| {
        runs += 1;
        assert_eq!(context.attempt(), runs - 1);
        if runs < 4 {
            Err(context.retry())
        } else {
            Ok(runs)
        }
    });
    assert_eq!(value, Ok(4));
    let stats = htm.stats().snapshot();
    assert_eq!((stats.fallback_retries, stats.fallback_executions), (3, 1));

    // sim: retry requests are explicit aborts spending the conflict budget.
    let htm = Htm::new(HtmConfig { max_conflict_retries: 2, ..HtmConfig::sim(9, 0) }).unwrap();
    let mut runs = 0u32;
    let value = htm.try_atomic(|context| {
        runs += 1;
        if runs <= 3 {
            assert!(context.is_simulated_hardware());
            Err(RegionAbort::Retry)
        } else {
            Ok((context.is_simulated_hardware(), context.attempt()))
        }
    });
    // Three simulated attempts (one plus two retries), then the fallback.
    assert_eq!(value, Ok((false, 3)));
    let stats = htm.stats().snapshot();
    assert_eq!(stats.explicit_aborts, 3);
    assert_eq!(stats.fallback_executions, 1);
    assert_eq!(stats.hardware_commits, 0);
}

#[test]
fn sim_injects_aborts_at_the_configured_rate() {
    for (abort_per_million, regions) in [(10_000u32, 20_000u64), (100_000, 10_000), (500_000, 10_000)] {
        let htm = Htm::new(HtmConfig::sim(0x5eed, abort_per_million)).unwrap();
        for _ in 0..regions {
            htm.atomic(|_| ());
        }
        let stats = htm.stats().snapshot();
        assert_eq!(stats.regions, regions);
        assert_eq!(stats.hardware_commits + stats.fallback_executions, regions);
        assert_eq!(stats.sim_injected_aborts(), stats.conflict_aborts);
        assert!(stats.sim_begin_aborts > 0 && stats.sim_commit_aborts > 0, "{stats}");
        let observed = stats.sim_injected_aborts() as f64 / stats.hardware_attempts() as f64;
        let expected = f64::from(abort_per_million) / 1e6;
        assert!((observed - expected).abs() < 0.02, "rate {abort_per_million}: observed {observed} ({stats})");
    }
}

/// Runs `regions` regions single-threaded and returns the attempt count of
/// each: the visible form of the abort sequence.
fn attempt_sequence(htm: &Htm, regions: usize) -> Vec<u32> {
    (0..regions).map(|_| htm.atomic(|context| context.attempt())).collect()
}

#[test]
fn sim_is_deterministic_for_a_seed() {
    let first = Htm::new(HtmConfig::sim(1234, 300_000)).unwrap();
    let second = Htm::new(HtmConfig::sim(1234, 300_000)).unwrap();
    let other = Htm::new(HtmConfig::sim(4321, 300_000)).unwrap();
    let sequence = attempt_sequence(&first, 2_000);
    assert_eq!(sequence, attempt_sequence(&second, 2_000));
    assert_ne!(sequence, attempt_sequence(&other, 2_000));
    assert_eq!(first.stats().snapshot(), second.stats().snapshot());
    assert!(sequence.iter().any(|&attempts| attempts > 0));
}

#[test]
fn capacity_aborts_past_the_threshold_then_fall_back() {
    let htm = sim(SimAbortConfig { capacity_footprint_lines: 8, ..SimAbortConfig::default() }, 3);
    // At the threshold: fits, commits in (simulated) hardware.
    for _ in 0..10 {
        let simulated = htm.atomic_with_footprint(8, |context| context.is_simulated_hardware());
        assert!(simulated);
    }
    let fitting = htm.stats().snapshot();
    assert_eq!((fitting.hardware_commits, fitting.capacity_aborts), (10, 0));
    // Past it: 1 + max_capacity_retries capacity aborts, then the fallback.
    for _ in 0..10 {
        let (path, simulated, attempt) = htm
            .atomic_with_footprint(9, |context| (context.path(), context.is_simulated_hardware(), context.attempt()));
        assert_eq!((path, simulated, attempt), (RegionPath::Fallback, false, 4));
    }
    let spilled = htm.stats().snapshot().since(&fitting);
    assert_eq!(spilled.capacity_aborts, 40);
    assert_eq!(spilled.sim_capacity_aborts, 40);
    assert_eq!(spilled.fallback_executions, 10);
    assert_eq!(spilled.hardware_commits, 0);
    assert_eq!(spilled.conflict_aborts, 0);
}

#[test]
fn conflict_budget_exhaustion_falls_back() {
    let config = HtmConfig { max_conflict_retries: 5, ..HtmConfig::sim(77, 1_000_000) };
    let htm = Htm::new(config).unwrap();
    for _ in 0..10 {
        let attempt = htm.atomic(|context| {
            assert_eq!(context.path(), RegionPath::Fallback);
            assert!(!context.is_simulated_hardware(), "every simulated attempt aborts at this rate");
            context.attempt()
        });
        assert_eq!(attempt, 6);
    }
    let stats = htm.stats().snapshot();
    assert_eq!(stats.conflict_aborts, 60);
    assert_eq!(stats.sim_injected_aborts(), 60);
    assert_eq!(stats.fallback_executions, 10);
    htm.stats().reset();
    assert_eq!(htm.stats().snapshot(), HtmStatsSnapshot::default());
}

#[test]
fn sim_counts_lock_held_aborts_while_a_fallback_runs() {
    // Thread A runs a region too large for the simulated capacity, so it runs
    // on the fallback path; while it holds the lock, thread B's small region
    // must see a lock-held abort, after which A finishes.
    let htm = sim(SimAbortConfig { capacity_footprint_lines: 1, ..SimAbortConfig::default() }, 0);
    let fallback_running = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            htm.atomic_with_footprint(100, |context| {
                assert_eq!(context.path(), RegionPath::Fallback);
                fallback_running.store(true, Ordering::Release);
                while htm.stats().snapshot().lock_held_aborts == 0 {
                    std::thread::yield_now();
                }
            })
        });
        while !fallback_running.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let simulated = htm.atomic(|context| context.is_simulated_hardware());
        assert!(simulated, "after waiting for the lock the small region commits in simulated hardware");
    });
    let stats = htm.stats().snapshot();
    assert!(stats.lock_held_aborts >= 1, "{stats}");
    assert_eq!(stats.fallback_executions, 1);
    assert_eq!(stats.hardware_commits, 1);
}

#[test]
fn panicking_body_releases_the_fallback_lock() {
    let htm = Htm::software();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| htm.atomic(|_| panic!("body failed"))));
    assert!(outcome.is_err());
    assert_eq!(htm.atomic(|_| 5), 5);
}

const THREADS: u64 = 4;
const REGIONS_PER_THREAD: u64 = 10_000;

/// Increments a shared counter with a separate load and store inside each
/// region, so any overlap of two regions loses an update.
fn increment_concurrently(htm: &Htm, footprint_of: impl Fn(u64) -> u32 + Sync) -> u64 {
    let counter = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for region in 0..REGIONS_PER_THREAD {
                    htm.atomic_with_footprint(footprint_of(region), |_| {
                        let value = counter.load(Ordering::Relaxed);
                        counter.store(value + 1, Ordering::Relaxed);
                    });
                }
            });
        }
    });
    counter.load(Ordering::Relaxed)
}

fn assert_exact_count(htm: &Htm, footprint_of: impl Fn(u64) -> u32 + Sync) {
    let total = increment_concurrently(htm, footprint_of);
    let stats = htm.stats().snapshot();
    assert_eq!(total, THREADS * REGIONS_PER_THREAD, "lost updates on {} ({stats})", htm.backend());
    assert_eq!(stats.regions, THREADS * REGIONS_PER_THREAD);
    assert_eq!(stats.hardware_commits + stats.fallback_executions, stats.regions, "{stats}");
}

#[test]
fn concurrent_increments_are_exact_on_none() {
    let htm = Htm::software();
    assert_exact_count(&htm, |_| 0);
    assert_eq!(htm.stats().snapshot().fallback_executions, THREADS * REGIONS_PER_THREAD);
}

#[test]
fn concurrent_increments_are_exact_on_sim() {
    for abort_per_million in [10_000, 100_000, 500_000] {
        let htm = Htm::new(HtmConfig::sim(abort_per_million.into(), abort_per_million)).unwrap();
        assert_exact_count(&htm, |_| 0);
        assert!(htm.stats().snapshot().sim_injected_aborts() > 0);
    }
}

#[test]
fn concurrent_increments_are_exact_on_sim_with_capacity_fallbacks() {
    let htm = Htm::new(HtmConfig {
        sim: SimAbortConfig { capacity_footprint_lines: 16, ..SimAbortConfig::with_rate(11, 100_000) },
        ..HtmConfig::sim(11, 100_000)
    })
    .unwrap();
    // Every seventh region is too large and ends on the fallback path.
    assert_exact_count(&htm, |region| if region % 7 == 0 { 64 } else { 4 });
    let stats = htm.stats().snapshot();
    assert!(stats.fallback_executions >= THREADS * REGIONS_PER_THREAD.div_ceil(7), "{stats}");
    assert!(stats.capacity_aborts > 0);
}

#[test]
fn concurrent_increments_are_exact_on_rtm_where_available() {
    if !rtm_support().is_available() {
        eprintln!("skipped: {}", rtm_support());
        return;
    }
    let htm = Htm::new(HtmConfig::rtm()).unwrap();
    assert_exact_count(&htm, |_| 0);
}
