//! Typed configuration of an [`crate::Htm`] instance, with presets.

use std::fmt;
use std::str::FromStr;

use crate::detect::rtm_support;

/// Which implementation executes regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HtmBackendKind {
    /// Intel RTM hardware transactions, with the lock-based fallback path.
    /// Only constructible where [`crate::rtm_support`] is `Available`.
    Rtm,
    /// No hardware transactions: every region runs on the fallback path.
    None,
    /// Simulated hardware: every region runs on the fallback path, but
    /// aborts are injected from a seeded generator so the retry and fallback
    /// policy is exercised on any machine.
    Sim,
}

impl HtmBackendKind {
    /// Every backend, in a stable order.
    pub const ALL: [HtmBackendKind; 3] = [HtmBackendKind::Rtm, HtmBackendKind::None, HtmBackendKind::Sim];

    /// The name used by [`FromStr`] and [`fmt::Display`].
    pub fn name(self) -> &'static str {
        match self {
            HtmBackendKind::Rtm => "rtm",
            HtmBackendKind::None => "none",
            HtmBackendKind::Sim => "sim",
        }
    }
}

impl fmt::Display for HtmBackendKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// Error returned when parsing an unknown backend name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown HTM backend {input:?}: expected one of rtm, none, sim")]
pub struct ParseHtmBackendError {
    /// The text that failed to parse.
    pub input: String,
}

impl FromStr for HtmBackendKind {
    type Err = ParseHtmBackendError;

    /// Parses `rtm`, `none` or `sim` (ASCII case-insensitive).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        HtmBackendKind::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| ParseHtmBackendError { input: text.to_owned() })
    }
}

/// Parts per million: the unit of the injected abort rates.
pub const PER_MILLION: u32 = 1_000_000;

/// Abort injection of the `sim` backend.
///
/// Each simulated hardware attempt draws one number `x` uniformly from
/// `0..PER_MILLION`: `x < begin_abort_per_million` injects an abort at begin,
/// otherwise `x < begin_abort_per_million + commit_abort_per_million`
/// injects an abort at commit. The injected abort probability per attempt is
/// therefore exactly `(begin + commit) / PER_MILLION`. Both kinds are
/// reported as conflict aborts (they consume the conflict retry budget).
/// Independently, a region whose footprint hint exceeds
/// `capacity_footprint_lines` gets a capacity abort on every attempt, as a
/// region too large for the cache does on real hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SimAbortConfig {
    /// Seed of the abort generator; the same seed gives the same abort
    /// sequence for the same sequence of regions on one thread.
    pub seed: u64,
    /// Probability (per million attempts) of an abort injected at begin.
    pub begin_abort_per_million: u32,
    /// Probability (per million attempts) of an abort injected at commit.
    pub commit_abort_per_million: u32,
    /// Largest footprint, in cache lines, that fits a simulated transaction.
    pub capacity_footprint_lines: u32,
}

impl SimAbortConfig {
    /// Default capacity: 512 lines of 64 bytes, the 32 KiB L1 data cache that
    /// holds an RTM write set.
    pub const DEFAULT_CAPACITY_FOOTPRINT_LINES: u32 = 512;

    /// Injects `abort_per_million` aborts per million attempts, split evenly
    /// between begin and commit, with the default capacity.
    pub fn with_rate(seed: u64, abort_per_million: u32) -> Self {
        let begin = abort_per_million / 2;
        SimAbortConfig {
            seed,
            begin_abort_per_million: begin,
            commit_abort_per_million: abort_per_million - begin,
            capacity_footprint_lines: Self::DEFAULT_CAPACITY_FOOTPRINT_LINES,
        }
    }

    /// Injected aborts per million attempts (begin plus commit).
    pub fn abort_per_million(&self) -> u64 {
        u64::from(self.begin_abort_per_million) + u64::from(self.commit_abort_per_million)
    }
}

impl Default for SimAbortConfig {
    /// No injected aborts, default capacity, seed 0.
    fn default() -> Self {
        SimAbortConfig::with_rate(0, 0)
    }
}

/// Configuration of one [`crate::Htm`] instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HtmConfig {
    /// Which implementation runs regions.
    pub backend: HtmBackendKind,
    /// Abort injection, used only by [`HtmBackendKind::Sim`].
    pub sim: SimAbortConfig,
    /// Retries after conflict aborts (and aborts the region asked for with
    /// [`crate::RegionAbort::Retry`]) before taking the fallback path.
    pub max_conflict_retries: u32,
    /// Retries after capacity aborts before taking the fallback path.
    pub max_capacity_retries: u32,
    /// Retries after finding the fallback lock held before taking the
    /// fallback path. Each such retry first waits for the lock to be free;
    /// the bound only prevents starvation when the lock is busy all the time.
    pub max_lock_held_retries: u32,
}

impl HtmConfig {
    /// Default conflict retry budget (DrTM allows about 100).
    pub const DEFAULT_MAX_CONFLICT_RETRIES: u32 = 100;
    /// Default capacity retry budget (DrTM allows 1 to 4).
    pub const DEFAULT_MAX_CAPACITY_RETRIES: u32 = 3;
    /// Default lock-held retry budget.
    pub const DEFAULT_MAX_LOCK_HELD_RETRIES: u32 = 1_000;

    /// Every region runs on the fallback path (backend `none`).
    pub fn software() -> Self {
        HtmConfig {
            backend: HtmBackendKind::None,
            sim: SimAbortConfig::default(),
            max_conflict_retries: Self::DEFAULT_MAX_CONFLICT_RETRIES,
            max_capacity_retries: Self::DEFAULT_MAX_CAPACITY_RETRIES,
            max_lock_held_retries: Self::DEFAULT_MAX_LOCK_HELD_RETRIES,
        }
    }

    /// Simulated hardware injecting `abort_per_million` aborts per million
    /// attempts (see [`SimAbortConfig::with_rate`]).
    pub fn sim(seed: u64, abort_per_million: u32) -> Self {
        HtmConfig {
            backend: HtmBackendKind::Sim,
            sim: SimAbortConfig::with_rate(seed, abort_per_million),
            ..Self::software()
        }
    }

    /// Requests RTM; [`crate::Htm::new`] fails with
    /// [`crate::HtmError::RtmUnavailable`] where it cannot be used.
    pub fn rtm() -> Self {
        HtmConfig { backend: HtmBackendKind::Rtm, ..Self::software() }
    }

    /// RTM when [`rtm_support`] says it is available, otherwise `none`.
    pub fn auto() -> Self {
        if rtm_support().is_available() {
            Self::rtm()
        } else {
            Self::software()
        }
    }

    /// The same configuration with another backend.
    pub fn with_backend(self, backend: HtmBackendKind) -> Self {
        HtmConfig { backend, ..self }
    }
}

impl Default for HtmConfig {
    /// [`HtmConfig::software`]: correct everywhere, never probes the CPU.
    fn default() -> Self {
        Self::software()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip() {
        for kind in HtmBackendKind::ALL {
            assert_eq!(kind.to_string().parse::<HtmBackendKind>(), Ok(kind));
        }
        assert_eq!("SIM".parse::<HtmBackendKind>(), Ok(HtmBackendKind::Sim));
        let error = "hle".parse::<HtmBackendKind>().unwrap_err();
        assert_eq!(error.input, "hle");
        assert!(error.to_string().contains("rtm, none, sim"), "{error}");
        assert!("".parse::<HtmBackendKind>().is_err());
    }

    #[test]
    fn sim_rate_is_split_without_loss() {
        let sim = SimAbortConfig::with_rate(7, 100_001);
        assert_eq!(sim.abort_per_million(), 100_001);
        assert_eq!(sim.seed, 7);
        assert_eq!(HtmConfig::sim(7, 100_001).sim, sim);
    }

    #[test]
    fn presets_have_the_documented_budgets() {
        let config = HtmConfig::default();
        assert_eq!(config.backend, HtmBackendKind::None);
        assert_eq!(config.max_conflict_retries, 100);
        assert!((1..=4).contains(&config.max_capacity_retries));
        assert_eq!(HtmConfig::rtm().backend, HtmBackendKind::Rtm);
        let auto = HtmConfig::auto().backend;
        assert_eq!(auto == HtmBackendKind::Rtm, rtm_support().is_available());
    }
}
