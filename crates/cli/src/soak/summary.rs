//! What `pmtx soak` reports: one record per interval, and the comparison
//! of a baseline window with the last one that decides the verdict.
//!
//! The baseline window is the minute after the first (the intervals that
//! start in 60..120 s): the first minute holds the allocator's and the
//! caches' growth to their working size (and the first checkpoint), which is
//! not a leak. The last window is the intervals that start in the run's last
//! minute. Each window's figures are medians of its intervals, so that one
//! interval disturbed by another process on the machine decides nothing. A
//! run with no interval after the first minute compares its first interval
//! with the last.

use serde::{Deserialize, Serialize};

/// Seconds of warm-up the baseline skips, and the length of the windows.
pub const WINDOW_S: f64 = 60.0;
/// Slack of the window bounds: an interval starts a little after its
/// scheduled time.
const EPSILON_S: f64 = 1e-3;

/// Limits of a flat run: the last interval against the baseline.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Thresholds {
    /// Resident set growth below this percentage of the baseline's...
    pub rss_growth_percent_max: f64,
    /// ...and below this many MiB...
    pub rss_growth_mib_max: f64,
    /// ...or below this many MiB at all: allocator high-water marks and a
    /// queue's wandering length move a small resident set by a few MiB.
    pub rss_growth_mib_min: f64,
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
            rss_growth_mib_min: 4.0,
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
            "medians of the minute after the first against the last minute; flat = RSS grows by less than {} MiB, \
             or by less than both {}% and {} MiB; probe p99 ratio < {}; rows indexed (absent rows where the \
             workload counts its live rows; interval means) ratio < {} or growth < {} rows",
            self.rss_growth_mib_min,
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

/// The medians of the intervals of one window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WindowJson {
    /// Index of its first interval.
    pub first_interval: usize,
    /// Index of its last interval.
    pub last_interval: usize,
    /// Start of its first interval, seconds.
    pub start_s: f64,
    /// End of its last interval, seconds.
    pub end_s: f64,
    /// Median throughput, commits per second.
    pub throughput_tps: f64,
    /// Median resident set.
    pub rss_bytes: Option<u64>,
    /// Median anonymous part.
    pub rss_anon_bytes: Option<u64>,
    /// Median file part.
    pub rss_file_bytes: Option<u64>,
    /// Median pool chunks in use (durable engines).
    pub pool_used_bytes: Option<u64>,
    /// Median probe p50, µs.
    pub probe_p50_us: f64,
    /// Median probe p99, µs.
    pub probe_p99_us: f64,
    /// Median of the interval means of rows indexed.
    pub rows_indexed_mean: f64,
    /// Median live rows (workloads that count them).
    pub live_rows: Option<u64>,
    /// Median of the interval means of absent rows indexed.
    pub absent_rows_mean: Option<f64>,
    /// Median 1-minute load average.
    pub load_average: Option<f64>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median of a figure every interval has, or `None` if one lacks it.
fn median_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.collect::<Option<Vec<f64>>>().filter(|values| !values.is_empty()).map(median)
}

impl WindowJson {
    fn new(intervals: &[&IntervalJson]) -> Self {
        let f = |figure: &dyn Fn(&IntervalJson) -> f64| median(intervals.iter().map(|i| figure(i)).collect());
        let optional = |figure: &dyn Fn(&IntervalJson) -> Option<f64>| median_of(intervals.iter().map(|i| figure(i)));
        let bytes = |figure: &dyn Fn(&IntervalJson) -> Option<u64>| {
            optional(&|interval| figure(interval).map(|value| value as f64)).map(|value| value.round() as u64)
        };
        Self {
            first_interval: intervals.first().map_or(0, |interval| interval.index),
            last_interval: intervals.last().map_or(0, |interval| interval.index),
            start_s: intervals.first().map_or(0.0, |interval| interval.start_s),
            end_s: intervals.last().map_or(0.0, |interval| interval.end_s),
            throughput_tps: f(&|interval| interval.throughput_tps),
            rss_bytes: bytes(&|interval| interval.rss_bytes),
            rss_anon_bytes: bytes(&|interval| interval.rss_anon_bytes),
            rss_file_bytes: bytes(&|interval| interval.rss_file_bytes),
            pool_used_bytes: bytes(&|interval| interval.pool_used_bytes),
            probe_p50_us: f(&|interval| interval.probe_p50_us),
            probe_p99_us: f(&|interval| interval.probe_p99_us),
            rows_indexed_mean: f(&|interval| interval.rows_indexed_mean),
            live_rows: bytes(&|interval| interval.live_rows),
            absent_rows_mean: optional(&|interval| interval.absent_rows_mean),
            load_average: optional(&|interval| interval.load_average),
        }
    }
}

/// The comparison of the baseline window with the last.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SummaryJson {
    /// The minute after the first (or the first interval of a short run).
    pub baseline: WindowJson,
    /// The last minute.
    pub last: WindowJson,
    /// Whether the baseline is the minute after the first (false: the run
    /// has no interval after its first minute and the first is used).
    pub baseline_after_first_minute: bool,
    /// RSS of the last window minus the baseline's, bytes.
    pub rss_growth_bytes: Option<i64>,
    /// The same in percent of the baseline's RSS.
    pub rss_growth_percent: Option<f64>,
    /// Probe p50 of the last window / the baseline's.
    pub probe_p50_ratio: Option<f64>,
    /// Probe p99 of the last window / the baseline's.
    pub probe_p99_ratio: Option<f64>,
    /// Rows indexed of the last window / the baseline's.
    pub rows_indexed_ratio: Option<f64>,
    /// Absent rows indexed of the last window / the baseline's (workloads
    /// that count their live rows).
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

/// Compares the baseline window with the last; `None` without intervals.
pub fn summarize(intervals: &[IntervalJson], thresholds: Thresholds) -> Option<SummaryJson> {
    let end_s = intervals.last()?.end_s;
    let after_first_minute: Vec<&IntervalJson> = intervals
        .iter()
        .filter(|interval| interval.start_s >= WINDOW_S - EPSILON_S && interval.start_s < 2.0 * WINDOW_S - EPSILON_S)
        .collect();
    let baseline_after_first_minute = !after_first_minute.is_empty();
    let baseline = if baseline_after_first_minute { after_first_minute } else { vec![&intervals[0]] };
    let mut last: Vec<&IntervalJson> =
        intervals.iter().filter(|interval| interval.start_s >= end_s - WINDOW_S - EPSILON_S).collect();
    if !baseline_after_first_minute {
        // A short run: its first interval against its last.
        last = vec![intervals.last()?];
    }
    let (baseline, last) = (WindowJson::new(&baseline), WindowJson::new(&last));

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
        if mib >= thresholds.rss_growth_mib_min
            && (percent >= thresholds.rss_growth_percent_max || mib >= thresholds.rss_growth_mib_max)
        {
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
        baseline,
        last,
        baseline_after_first_minute,
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

    /// An interval made from its index and start.
    type Make<'a> = &'a dyn Fn(usize, f64) -> IntervalJson;

    /// 20 intervals of 10 s: `early` until 140 s, `late` in the last minute.
    fn run(early: Make<'_>, late: Make<'_>) -> SummaryJson {
        let intervals: Vec<IntervalJson> = (0..20)
            .map(|index| {
                let start_s = index as f64 * 10.0;
                if index < 14 {
                    early(index, start_s)
                } else {
                    late(index, start_s)
                }
            })
            .collect();
        summarize(&intervals, Thresholds::default()).unwrap()
    }

    #[test]
    fn the_minute_after_the_first_is_compared_with_the_last_by_medians() {
        let intervals: Vec<_> = (0..60)
            .map(|i| {
                // One interval of the last minute disturbed by another process.
                let p99 = if i == 58 { 100.0 } else { 10.0 };
                interval(i, i as f64 * 10.0 + 0.01 * (i > 0) as u8 as f64, 100 + (i % 2) as u64, p99, 2000)
            })
            .collect();
        let summary = summarize(&intervals, Thresholds::default()).unwrap();
        assert!(summary.baseline_after_first_minute);
        assert_eq!((summary.baseline.first_interval, summary.baseline.last_interval), (6, 11));
        assert_eq!((summary.last.first_interval, summary.last.last_interval), (54, 59));
        assert_eq!(summary.probe_p99_ratio, Some(1.0));
        assert_eq!(summary.rss_growth_bytes, Some(0));
        assert_eq!(summary.verdict, "flat", "{:?}", summary.reasons);
    }

    #[test]
    fn a_short_run_compares_its_first_interval_with_its_last() {
        let intervals: Vec<_> = (0..3).map(|i| interval(i, i as f64, 100, 10.0, 2000)).collect();
        let summary = summarize(&intervals, Thresholds::default()).unwrap();
        assert!(!summary.baseline_after_first_minute);
        assert_eq!((summary.baseline.first_interval, summary.last.first_interval), (0, 2));
        assert!(summarize(&[], Thresholds::default()).is_none());
    }

    #[test]
    fn growth_of_memory_latency_or_rows_is_growing() {
        let base = |index, start_s| interval(index, start_s, 1000, 10.0, 2000);
        let cases: [(Make<'_>, &str); 3] = [
            (&|index, start_s| interval(index, start_s, 1040, 10.0, 2000), "RSS grew by 40.0 MiB"),
            (&|index, start_s| interval(index, start_s, 1000, 15.0, 2000), "probe p99 ratio 1.50"),
            (&|index, start_s| interval(index, start_s, 1000, 10.0, 2000 + 4096), "rows indexed ratio 3.05"),
        ];
        for (late, reason) in cases {
            let summary = run(&base, late);
            assert_eq!(summary.verdict, "growing");
            assert!(summary.reasons.iter().any(|text| text.starts_with(reason)), "{:?}", summary.reasons);
        }
        // A small count that swings by half is not growth.
        let swing = run(&base, &|index, start_s| interval(index, start_s, 1000, 10.0, 3000));
        assert_eq!(swing.verdict, "flat", "{:?}", swing.reasons);
        // 6% of a small resident set is growth even below 32 MiB...
        let small = run(&|index, start_s| interval(index, start_s, 100, 10.0, 2000), &|index, start_s| {
            interval(index, start_s, 106, 10.0, 2000)
        });
        assert_eq!(small.verdict, "growing");
        // ...but not 2 MiB of a tiny one.
        let tiny = run(&|index, start_s| interval(index, start_s, 18, 10.0, 2000), &|index, start_s| {
            interval(index, start_s, 20, 10.0, 2000)
        });
        assert_eq!(tiny.verdict, "flat", "{:?}", tiny.reasons);
    }

    #[test]
    fn absent_rows_decide_where_the_live_rows_are_counted() {
        let with_live = |rows: u64, live: u64| {
            move |index, start_s| IntervalJson {
                live_rows: Some(live),
                absent_rows_mean: Some((rows - live) as f64),
                ..interval(index, start_s, 1000, 10.0, rows)
            }
        };
        // The queue grew by 20 000 live rows; its trail stayed at 4 000.
        let summary = run(&with_live(6000, 2000), &with_live(26_000, 22_000));
        assert_eq!(summary.verdict, "flat", "{:?}", summary.reasons);
        assert_eq!(summary.absent_rows_ratio, Some(1.0));
        assert!(summary.rows_indexed_ratio.unwrap() > 4.0);
        // The trail grew: unlinking falls behind.
        let summary = run(&with_live(6000, 2000), &with_live(30_000, 2000));
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
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
        assert_eq!(median_of([Some(1.0), None].into_iter()), None);
    }
}
