//! CPU time of the measured phase: the workers' own (thread CPU clocks)
//! and the machine's, from `/proc/stat`, with the share the hypervisor
//! took (*steal*).
//!
//! Throughput on a shared virtual machine moves with what the host gives
//! the guest: a run whose vCPUs were descheduled for a fifth of the phase
//! is slower though the code did the same work. The steal share says how
//! much of the machine's time the host took over the phase; the workers'
//! CPU time says whether they ran the whole phase (a worker that waited
//! or was preempted inside the guest shows less than the phase).

use std::time::Duration;

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`, as the
/// guest kernel accounts it). `None` where the clock is unavailable.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable timespec; the call writes only it.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (status == 0).then(|| Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

/// The machine's CPU time counters (`/proc/stat`, first line, in clock
/// ticks summed over the CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// user + nice + system + idle + iowait + irq + softirq + steal.
    pub total_ticks: u64,
    pub steal_ticks: u64,
}

impl MachineCpu {
    /// The counters now (`None` off Linux or if `/proc/stat` is unreadable).
    pub fn now() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses `/proc/stat`'s aggregate `cpu` line.
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|line| line.starts_with("cpu "))?;
        let fields: Vec<u64> =
            line.split_whitespace().skip(1).map(|field| field.parse().ok()).collect::<Option<_>>()?;
        if fields.len() < 8 {
            return None;
        }
        // Guest time is already part of user time.
        Some(Self { total_ticks: fields[..8].iter().sum(), steal_ticks: fields[7] })
    }

    /// The share of the machine's CPU time between `self` and `later`
    /// that the hypervisor took (0 to 1; `None` if no time passed).
    pub fn steal_share_until(&self, later: &Self) -> Option<f64> {
        let total = later.total_ticks.checked_sub(self.total_ticks)?;
        let steal = later.steal_ticks.checked_sub(self.steal_ticks)?;
        (total > 0).then(|| steal as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_share_is_the_steal_delta_over_the_total_delta() {
        let before = MachineCpu::parse("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n").unwrap();
        assert_eq!(before, MachineCpu { total_ticks: 1000, steal_ticks: 35 });
        let after = MachineCpu::parse("cpu  200 0 90 1400 10 0 15 85 7 0\n").unwrap();
        let share = before.steal_share_until(&after).unwrap();
        assert!((share - 50.0 / 800.0).abs() < 1e-12, "{share}");
        assert_eq!(after.steal_share_until(&after), None, "no time passed");
        assert_eq!(after.steal_share_until(&before), None, "counters went backwards");
    }

    #[test]
    fn malformed_stat_lines_are_refused() {
        assert_eq!(MachineCpu::parse("intr 1 2 3\n"), None);
        assert_eq!(MachineCpu::parse("cpu  1 2 3\n"), None);
        assert_eq!(MachineCpu::parse("cpu  1 2 x 4 5 6 7 8\n"), None);
    }

    #[test]
    fn the_thread_clock_advances_with_work() {
        let start = thread_cpu_time().expect("Linux has a thread CPU clock");
        let wall = std::time::Instant::now();
        let mut x = 0u64;
        while wall.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let used = thread_cpu_time().unwrap().saturating_sub(start);
        assert!(used > Duration::ZERO && used <= wall.elapsed(), "{used:?} of CPU in {:?}", wall.elapsed());
    }
}
