//! What `pmtx soak` reports: one record per interval, and the comparison
//! of a baseline interval with the last one that decides the verdict.
//!
//! The baseline is the first interval that starts after the first minute:
//! the first minute holds the allocator's and the caches' growth to their
//! working size (and the first checkpoint), which is not a leak. A run of a
//! minute or less has no such interval and compares its first interval.

use serde::{Deserialize, Serialize};

/// Seconds of warm-up the baseline skips.
pub const BASELINE_AFTER_S: f64 = 60.0;

/// Limits of a flat run: the last interval against the baseline.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Thresholds {
    /// Resident set growth below this percentage of the baseline's...
    pub rss_growth_percent_max: f64,
    /// ...and below this many MiB.
    pub rss_growth_mib_max: f64,
    /// Probe latency p99 of the last interval below this multiple of the
    /// baseline's.
    pub probe_p99_ratio_max: f64,
    /// Rows in the primary indexes (placeholders included; the absent ones
    /// only when the workload counts its live rows) below this multiple of
    /// the baseline's...
    pub rows_indexed_ratio_max: f64,
    /// ...or grown by fewer than this many rows: a trail of a few thousand
    /// rows swings by half between samples, a leak grows by millions.
    pub rows_indexed_growth_min: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            rss_growth_percent_max: 5.0,
            rss_growth_mib_max: 32.0,
            probe_p99_ratio_max: 1.5,
            rows_indexed_ratio_max: 1.5,
            rows_indexed_growth_min: 4096,
        }
    }
}

impl Thresholds {
    /// The limits in words, for the report.
    pub fn describe(&self) -> String {
        format!(
            "flat = RSS grows by less than {}% and less than {} MiB, probe p99 ratio < {}, rows indexed (absent rows \
             where the workload counts its live rows; interval means) ratio < {} or growth < {} rows",
            self.rss_growth_percent_max,
            self.rss_growth_mib_max,
            self.probe_p99_ratio_max,
            self.rows_indexed_ratio_max,
            self.rows_indexed_growth_min
        )
    }
}

/// One interval of the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IntervalJson {
    /// Position, from 0.
    pub index: usize,
    /// Start, seconds since the workers started.
    pub start_s: f64,
    /// End, seconds since the workers started.
    pub end_s: f64,
    /// Commits acknowledged (durable) in the interval.
    pub committed: u64,
    /// `committed` per second of the interval.
    pub throughput_tps: f64,
    /// User rollbacks (a dequeue of an empty queue, TPC-C's 1%).
    pub rolled_back: u64,
    /// Transactions given up after too many aborts.
    pub gave_up: u64,
    /// Aborted attempts (retried).
    pub aborts: u64,
    /// Resident set size at the end of the interval (`/proc/self/statm`).
    pub rss_bytes: Option<u64>,
    /// Anonymous resident pages (heap, stacks; `RssAnon`).
    pub rss_anon_bytes: Option<u64>,
    /// Resident pages of mapped files, the pool among them (`RssFile`).
    pub rss_file_bytes: Option<u64>,
    /// Resident shared-memory pages (`RssShmem`).
    pub rss_shmem_bytes: Option<u64>,
    /// `EngineStats::rows_indexed` at the end of the interval (approximate
    /// while transactions run).
    pub rows_indexed: u64,
    /// Mean of `rows_indexed` sampled about every 100 ms in the interval:
    /// the rows a reclamation lag leaves indexed swing with the epoch
    /// phase, which one sample would catch at random.
    pub rows_indexed_mean: f64,
    /// Largest sample of `rows_indexed` in the interval.
    pub rows_indexed_max: u64,
    /// Live rows by the workload's own count at the end of the interval
    /// (`Workload::expected_rows`; the queue counts them).
    pub live_rows: Option<u64>,
    /// Mean of `rows_indexed` minus the live rows over the samples: the
    /// absent rows (deleted, placeholders) not yet unlinked.
    pub absent_rows_mean: Option<f64>,
    /// `EngineStats::rows_unlinked`: absent rows reclaimed since open.
    pub rows_unlinked: u64,
    /// Log bytes held in the pool (log engines).
    pub log_bytes: u64,
    /// Bytes of allocated pool chunks (durable engines). Allocation is
    /// next-fit, so the pages the pool has touched (in `rss_file_bytes`)
    /// can grow while this stays flat.
    pub pool_used_bytes: Option<u64>,
    /// Bytes the Met-Cache holds (zen).
    pub cache_bytes: u64,
    /// Chunks of the tuple heap (zen).
    pub heap_chunks: u64,
    /// Probe transactions measured in the interval.
    pub probe_count: u64,
    /// Median execution time of the probe transactions, µs.
    pub probe_p50_us: f64,
    /// 99th percentile execution time of the probe transactions, µs.
    pub probe_p99_us: f64,
    /// 1-minute load average of the machine (`/proc/loadavg`).
    pub load_average: Option<f64>,
}

/// The comparison of the baseline interval with the last.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SummaryJson {
    /// Index of the baseline interval.
    pub baseline_interval: usize,
    /// Index of the last interval.
    pub last_interval: usize,
    /// Whether the baseline is the first interval after the first minute
    /// (false: the run was too short and the first interval is used).
    pub baseline_after_first_minute: bool,
    /// RSS of the last interval minus the baseline's, bytes.
    pub rss_growth_bytes: Option<i64>,
    /// The same in percent of the baseline's RSS.
    pub rss_growth_percent: Option<f64>,
    /// Probe p50 of the last interval / the baseline's.
    pub probe_p50_ratio: Option<f64>,
    /// Probe p99 of the last interval / the baseline's.
    pub probe_p99_ratio: Option<f64>,
    /// Mean rows indexed of the last interval / the baseline's.
    pub rows_indexed_ratio: Option<f64>,
    /// Mean absent rows indexed of the last interval / the baseline's
    /// (workloads that count their live rows).
    pub absent_rows_ratio: Option<f64>,
    /// "flat" or "growing".
    pub verdict: String,
    /// What exceeded its limit (empty when flat).
    pub reasons: Vec<String>,
    /// The limits applied.
    pub thresholds: Thresholds,
}

/// A ratio, or `None` when the baseline is zero.
fn ratio(last: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0).then(|| last / baseline)
}

/// Compares the baseline interval with the last; `None` without intervals.
pub fn summarize(intervals: &[IntervalJson], thresholds: Thresholds) -> Option<SummaryJson> {
    let last = intervals.last()?;
    let after_first_minute = intervals.iter().find(|interval| interval.start_s >= BASELINE_AFTER_S - 1e-6);
    let baseline = after_first_minute.unwrap_or(&intervals[0]);
    let rss_growth_bytes = baseline.rss_bytes.zip(last.rss_bytes).map(|(baseline, last)| last as i64 - baseline as i64);
    let rss_growth_percent = rss_growth_bytes
        .zip(baseline.rss_bytes)
        .and_then(|(growth, baseline)| ratio(growth as f64, baseline as f64))
        .map(|fraction| fraction * 100.0);
    let probe_p50_ratio = ratio(last.probe_p50_us, baseline.probe_p50_us);
    let probe_p99_ratio = ratio(last.probe_p99_us, baseline.probe_p99_us);
    let rows_indexed_ratio = ratio(last.rows_indexed_mean, baseline.rows_indexed_mean);
    let absent_rows_ratio = baseline.absent_rows_mean.zip(last.absent_rows_mean).and_then(|(b, l)| ratio(l, b));

    let mut reasons = Vec::new();
    if let (Some(growth), Some(percent)) = (rss_growth_bytes, rss_growth_percent) {
        let mib = growth as f64 / (1u64 << 20) as f64;
        if percent >= thresholds.rss_growth_percent_max || mib >= thresholds.rss_growth_mib_max {
            reasons.push(format!(
                "RSS grew by {mib:.1} MiB ({percent:.1}%; limits {}% and {} MiB)",
                thresholds.rss_growth_percent_max, thresholds.rss_growth_mib_max
            ));
        }
    }
    if let Some(p99) = probe_p99_ratio.filter(|&p99| p99 >= thresholds.probe_p99_ratio_max) {
        reasons.push(format!("probe p99 ratio {p99:.2} (limit {})", thresholds.probe_p99_ratio_max));
    }
    // Live rows may wander (a queue's length is a random walk): judge the
    // absent rows where the workload counts the live ones.
    let (what, rows_ratio, rows_growth) = match (baseline.absent_rows_mean, last.absent_rows_mean) {
        (Some(before), Some(after)) => ("absent rows indexed", absent_rows_ratio, after - before),
        _ => ("rows indexed", rows_indexed_ratio, last.rows_indexed_mean - baseline.rows_indexed_mean),
    };
    if let Some(rows) = rows_ratio.filter(|&rows| {
        rows >= thresholds.rows_indexed_ratio_max && rows_growth >= thresholds.rows_indexed_growth_min as f64
    }) {
        reasons.push(format!(
            "{what} ratio {rows:.2}, {rows_growth:.0} more (limits {} and {} rows)",
            thresholds.rows_indexed_ratio_max, thresholds.rows_indexed_growth_min
        ));
    }
    Some(SummaryJson {
        baseline_interval: baseline.index,
        last_interval: last.index,
        baseline_after_first_minute: after_first_minute.is_some(),
        rss_growth_bytes,
        rss_growth_percent,
        probe_p50_ratio,
        probe_p99_ratio,
        rows_indexed_ratio,
        absent_rows_ratio,
        verdict: if reasons.is_empty() { "flat" } else { "growing" }.to_string(),
        reasons,
        thresholds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(index: usize, start_s: f64, rss_mib: u64, p99: f64, rows: u64) -> IntervalJson {
        IntervalJson {
            index,
            start_s,
            end_s: start_s + 10.0,
            rss_bytes: Some(rss_mib << 20),
            probe_p50_us: p99 / 2.0,
            probe_p99_us: p99,
            rows_indexed: rows,
            rows_indexed_mean: rows as f64,
            rows_indexed_max: rows,
            ..IntervalJson::default()
        }
    }

    #[test]
    fn the_baseline_is_the_first_interval_after_the_first_minute() {
        let intervals: Vec<_> = (0..10).map(|i| interval(i, i as f64 * 10.0, 100 + i as u64, 10.0, 2000)).collect();
        let summary = summarize(&intervals, Thresholds::default()).unwrap();
        assert_eq!((summary.baseline_interval, summary.last_interval), (6, 9));
        assert!(summary.baseline_after_first_minute);
        assert_eq!(summary.rss_growth_bytes, Some(3 << 20));
        assert_eq!(summary.verdict, "flat", "{:?}", summary.reasons);
        assert_eq!(summary.probe_p99_ratio, Some(1.0));
    }

    #[test]
    fn a_short_run_compares_its_first_interval() {
        let intervals = vec![interval(0, 0.0, 100, 10.0, 2000), interval(1, 1.0, 100, 10.0, 2000)];
        let summary = summarize(&intervals, Thresholds::default()).unwrap();
        assert_eq!(summary.baseline_interval, 0);
        assert!(!summary.baseline_after_first_minute);
        assert!(summarize(&[], Thresholds::default()).is_none());
    }

    #[test]
    fn growth_of_memory_latency_or_rows_is_growing() {
        let base = interval(0, 60.0, 1000, 10.0, 2000);
        // A small count that swings by half is not growth.
        let swing = summarize(&[base.clone(), interval(1, 70.0, 1000, 10.0, 3000)], Thresholds::default()).unwrap();
        assert_eq!(swing.verdict, "flat", "{:?}", swing.reasons);
        let cases = [
            (interval(1, 70.0, 1040, 10.0, 2000), "RSS grew by 40.0 MiB"),
            (interval(1, 70.0, 1000, 15.0, 2000), "probe p99 ratio 1.50"),
            (interval(1, 70.0, 1000, 10.0, 2000 + 4096), "rows indexed ratio 3.05"),
        ];
        for (last, reason) in cases {
            let summary = summarize(&[base.clone(), last], Thresholds::default()).unwrap();
            assert_eq!(summary.verdict, "growing");
            assert!(summary.reasons.iter().any(|text| text.starts_with(reason)), "{:?}", summary.reasons);
        }
        // 6% of a small resident set is growth even below 32 MiB.
        let small = [interval(0, 60.0, 100, 10.0, 2000), interval(1, 70.0, 106, 10.0, 2000)];
        assert_eq!(summarize(&small, Thresholds::default()).unwrap().verdict, "growing");
    }

    #[test]
    fn absent_rows_decide_where_the_live_rows_are_counted() {
        let with_live = |index: usize, rows: u64, live: u64| IntervalJson {
            live_rows: Some(live),
            absent_rows_mean: Some((rows - live) as f64),
            ..interval(index, 60.0 + index as f64 * 10.0, 1000, 10.0, rows)
        };
        // The queue grew by 20 000 live rows; its trail stayed at 4 000.
        let summary =
            summarize(&[with_live(0, 6000, 2000), with_live(1, 26_000, 22_000)], Thresholds::default()).unwrap();
        assert_eq!(summary.verdict, "flat", "{:?}", summary.reasons);
        assert_eq!(summary.absent_rows_ratio, Some(1.0));
        assert!(summary.rows_indexed_ratio.unwrap() > 4.0);
        // The trail grew: unlinking falls behind.
        let summary =
            summarize(&[with_live(0, 6000, 2000), with_live(1, 30_000, 2000)], Thresholds::default()).unwrap();
        assert_eq!(summary.verdict, "growing");
        assert!(summary.reasons[0].starts_with("absent rows indexed ratio 7.00"), "{:?}", summary.reasons);
    }

    #[test]
    fn missing_figures_do_not_decide() {
        let mut base = interval(0, 0.0, 100, 0.0, 0);
        base.rss_bytes = None;
        let summary = summarize(&[base.clone(), base], Thresholds::default()).unwrap();
        assert_eq!(summary.verdict, "flat");
        assert_eq!((summary.rss_growth_bytes, summary.probe_p99_ratio, summary.rows_indexed_ratio), (None, None, None));
    }
}
