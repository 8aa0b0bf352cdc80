//! Per-instance region statistics.
//!
//! Counters are sharded: each thread increments the shard chosen by hashing
//! the address of one of its thread-local variables, and each shard sits in
//! its own cache lines, so threads rarely share a counter line. Counters are
//! only ever updated outside hardware transactions (an update inside one
//! would join its write set and be rolled back on abort).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter per event; the index into a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    Regions,
    HardwareCommits,
    FallbackExecutions,
    FallbackRetries,
    ExplicitRegionAborts,
    ConflictAborts,
    CapacityAborts,
    ExplicitAborts,
    LockHeldAborts,
    OtherAborts,
    SimBeginAborts,
    SimCommitAborts,
    SimCapacityAborts,
}

const COUNTER_COUNT: usize = Counter::SimCapacityAborts as usize + 1;
const SHARD_BITS: u32 = 4;
const SHARD_COUNT: usize = 1 << SHARD_BITS;

#[repr(align(64))]
#[derive(Debug, Default)]
struct Shard {
    counters: [AtomicU64; COUNTER_COUNT],
}

thread_local! {
    /// Only its address is used: it differs between live threads.
    static SHARD_ANCHOR: u8 = const { 0 };
}

/// The shard of the calling thread (Fibonacci hashing of a thread-local
/// address, so that every address bit reaches the top bits).
fn shard_index() -> usize {
    let address = SHARD_ANCHOR.with(|anchor| std::ptr::from_ref(anchor).addr()) as u64;
    (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - SHARD_BITS)) as usize
}

/// Live counters of one [`crate::Htm`] instance.
#[derive(Debug, Default)]
pub struct HtmStats {
    shards: [Shard; SHARD_COUNT],
}

impl HtmStats {
    #[inline]
    pub(crate) fn increment(&self, counter: Counter) {
        self.shards[shard_index()].counters[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn total(&self, counter: Counter) -> u64 {
        self.shards.iter().map(|shard| shard.counters[counter as usize].load(Ordering::Relaxed)).sum()
    }

    /// Sums the counters. Concurrent regions may be partly counted; a
    /// snapshot taken while no region runs is exact.
    pub fn snapshot(&self) -> HtmStatsSnapshot {
        HtmStatsSnapshot {
            regions: self.total(Counter::Regions),
            hardware_commits: self.total(Counter::HardwareCommits),
            fallback_executions: self.total(Counter::FallbackExecutions),
            fallback_retries: self.total(Counter::FallbackRetries),
            explicit_region_aborts: self.total(Counter::ExplicitRegionAborts),
            conflict_aborts: self.total(Counter::ConflictAborts),
            capacity_aborts: self.total(Counter::CapacityAborts),
            explicit_aborts: self.total(Counter::ExplicitAborts),
            lock_held_aborts: self.total(Counter::LockHeldAborts),
            other_aborts: self.total(Counter::OtherAborts),
            sim_begin_aborts: self.total(Counter::SimBeginAborts),
            sim_commit_aborts: self.total(Counter::SimCommitAborts),
            sim_capacity_aborts: self.total(Counter::SimCapacityAborts),
        }
    }

    /// Sets every counter to zero. Increments racing with the reset may
    /// survive it; reset between measurement phases.
    pub fn reset(&self) {
        for shard in &self.shards {
            for counter in &shard.counters {
                counter.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// A point-in-time copy of [`HtmStats`].
///
/// "Hardware" counts refer to hardware attempts, which the `sim` backend
/// simulates (its "hardware commits" are simulated attempts that were not
/// injected an abort).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HtmStatsSnapshot {
    /// Regions that finished (committed, or returned an explicit abort).
    pub regions: u64,
    /// Regions committed by a hardware (or simulated hardware) attempt.
    pub hardware_commits: u64,
    /// Regions that finished on the fallback path.
    pub fallback_executions: u64,
    /// Fallback-path executions the body asked to rerun with
    /// [`crate::RegionAbort::Retry`].
    pub fallback_retries: u64,
    /// Regions that returned [`crate::ExplicitAbort`] to their caller.
    pub explicit_region_aborts: u64,
    /// Hardware attempts aborted by a conflict (including injected
    /// begin and commit aborts).
    pub conflict_aborts: u64,
    /// Hardware attempts aborted because the footprint did not fit.
    pub capacity_aborts: u64,
    /// Hardware attempts aborted by the body ([`crate::RegionAbort`]).
    pub explicit_aborts: u64,
    /// Hardware attempts aborted because the fallback lock was held.
    pub lock_held_aborts: u64,
    /// Hardware attempts aborted for any other reason (interrupts, system
    /// calls, unsupported instructions); these go straight to the fallback.
    pub other_aborts: u64,
    /// `sim`: aborts injected at begin (also counted in `conflict_aborts`).
    pub sim_begin_aborts: u64,
    /// `sim`: aborts injected at commit (also counted in `conflict_aborts`).
    pub sim_commit_aborts: u64,
    /// `sim`: capacity aborts (also counted in `capacity_aborts`).
    pub sim_capacity_aborts: u64,
}

impl HtmStatsSnapshot {
    /// Aborted hardware attempts, all reasons.
    pub fn total_aborts(&self) -> u64 {
        self.conflict_aborts + self.capacity_aborts + self.explicit_aborts + self.lock_held_aborts + self.other_aborts
    }

    /// Aborts injected by the `sim` backend.
    pub fn sim_injected_aborts(&self) -> u64 {
        self.sim_begin_aborts + self.sim_commit_aborts + self.sim_capacity_aborts
    }

    /// Hardware attempts: commits plus aborts.
    pub fn hardware_attempts(&self) -> u64 {
        self.hardware_commits + self.total_aborts()
    }

    /// The counts accumulated since `earlier` (saturating at zero, so a reset
    /// in between gives zeros rather than wrapping).
    pub fn since(&self, earlier: &HtmStatsSnapshot) -> HtmStatsSnapshot {
        HtmStatsSnapshot {
            regions: self.regions.saturating_sub(earlier.regions),
            hardware_commits: self.hardware_commits.saturating_sub(earlier.hardware_commits),
            fallback_executions: self.fallback_executions.saturating_sub(earlier.fallback_executions),
            fallback_retries: self.fallback_retries.saturating_sub(earlier.fallback_retries),
            explicit_region_aborts: self.explicit_region_aborts.saturating_sub(earlier.explicit_region_aborts),
            conflict_aborts: self.conflict_aborts.saturating_sub(earlier.conflict_aborts),
            capacity_aborts: self.capacity_aborts.saturating_sub(earlier.capacity_aborts),
            explicit_aborts: self.explicit_aborts.saturating_sub(earlier.explicit_aborts),
            lock_held_aborts: self.lock_held_aborts.saturating_sub(earlier.lock_held_aborts),
            other_aborts: self.other_aborts.saturating_sub(earlier.other_aborts),
            sim_begin_aborts: self.sim_begin_aborts.saturating_sub(earlier.sim_begin_aborts),
            sim_commit_aborts: self.sim_commit_aborts.saturating_sub(earlier.sim_commit_aborts),
            sim_capacity_aborts: self.sim_capacity_aborts.saturating_sub(earlier.sim_capacity_aborts),
        }
    }
}

impl fmt::Display for HtmStatsSnapshot {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "regions={} hardware_commits={} fallback_executions={} aborts={} \
             (conflict={} capacity={} explicit={} lock_held={} other={}) sim_injected={} \
             fallback_retries={} explicit_region_aborts={}",
            self.regions,
            self.hardware_commits,
            self.fallback_executions,
            self.total_aborts(),
            self.conflict_aborts,
            self.capacity_aborts,
            self.explicit_aborts,
            self.lock_held_aborts,
            self.other_aborts,
            self.sim_injected_aborts(),
            self.fallback_retries,
            self.explicit_region_aborts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_cache_line_aligned() {
        assert_eq!(std::mem::align_of::<Shard>(), 64);
        assert_eq!(std::mem::size_of::<Shard>() % 64, 0);
        assert!(shard_index() < SHARD_COUNT);
    }

    #[test]
    fn counters_sum_across_threads_and_reset() {
        let stats = HtmStats::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        stats.increment(Counter::ConflictAborts);
                    }
                    stats.increment(Counter::SimCapacityAborts);
                });
            }
        });
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.conflict_aborts, 4000);
        assert_eq!(snapshot.sim_capacity_aborts, 4);
        assert_eq!(snapshot.total_aborts(), 4000);
        assert_eq!(snapshot.since(&snapshot), HtmStatsSnapshot::default());
        stats.reset();
        assert_eq!(stats.snapshot(), HtmStatsSnapshot::default());
        assert!(snapshot.to_string().contains("conflict=4000"));
    }
}
