//! The verdict on a claim: our ratio, measured over several rounds, against
//! the paper's value or range.
//!
//! A figure's benches run `rounds` times (at least [`MIN_ROUNDS`] in a full
//! run, more with `--budget`), and the claim's ratio is computed in each
//! round from that round's reports. [`Spread`] keeps the median, the
//! extremes and a confidence interval of the median of those ratios.
//!
//! **The interval.** An order-statistics interval of the median:
//! `[x_(k), x_(n+1-k)]` of the `n` sorted ratios, with the largest `k`
//! whose coverage `1 - 2 P(Bin(n, 1/2) < k)` is still at least
//! [`CI_LEVEL`] (75 %). No resampling and no assumption about the ratios'
//! distribution, only that rounds are independent. The level is the one
//! three rounds' `[min, max]` has (`1 - 2/8`), so at three rounds the
//! interval *is* `[min, max]` and the rule below is exactly the one every
//! run used before rounds could be added; with more rounds the interval
//! drops the outermost rounds while keeping at least that confidence (at
//! 4 and 5 rounds it is still `[min, max]`, at 6 it is the 2nd and 5th).
//! Fewer than three rounds (smoke runs) take `[min, max]` too.
//!
//! [`verdict`] then decides on the interval `[lo, hi]`, its width `w = hi -
//! lo`, in this order:
//!
//! 1. **inconclusive** when `lo <= 1 <= hi` (rounds within the interval
//!    say one engine wins and that it does not), or when the paper's
//!    effect is smaller than our interval, both taken as factors: `|ln
//!    paper_mid| < ln(hi / lo)` with `paper_mid = sqrt(low * high)`. A
//!    difference the noise can hide cannot confirm or refute the paper.
//!    Factors, not differences, because the noise of a ratio grows with
//!    it: rounds of 2,700x-5,700x say as clearly that a 2,720x effect
//!    exists as rounds of 1.15x-1.25x say it of a 1.5x one, while a 1.10x
//!    effect against rounds of 1.02x-1.25x is lost in them.
//! 2. **not reproduced** when the median lies on the other side of 1 than
//!    the paper's range (the other engine wins). A range that contains 1
//!    has no side, so this never applies to it.
//! 3. **reproduced** when the median lies within the paper's range widened
//!    by the whole interval on each side: `[low - w, high + w]`. The whole
//!    width on each side, not only the part of it between the median and
//!    that side's end, because a few rounds place the median only
//!    roughly; no fixed factor, so a run with little noise must land
//!    close to the paper.
//! 4. **direction** otherwise: the paper's engine wins, by a margin outside
//!    that widened range (for a range containing 1: **not reproduced**).
//!
//! A claim about one run's own value (a count per transaction, entries
//! into a stage: the paper's "at most one sfence per transaction") is not
//! a ratio; [`verdict_absolute`] judges it: **reproduced** when the value
//! lies in the paper's range in every round, **not reproduced** when in
//! none, **inconclusive** when in some.
//!
//! A median of exactly 1 always has `lo <= 1 <= hi`, so "no effect" is
//! never reproduced, however small the paper's effect. A single round
//! (allowed in smoke runs only) has no spread: the rule then compares the
//! bare ratio with the bare range.
//!
//! **Whether more rounds could decide** an inconclusive claim is
//! [`outlook`]: it projects the interval's width at `N` rounds from the
//! rounds so far and reports the `N` at which the interval would both
//! exclude 1 and be narrower than the paper's effect, or that no `N` up to
//! [`MAX_ROUNDS`] would (the effect is below what this machine's noise
//! lets a run show). [`next_figure`] spends a time budget on those
//! figures: see there.

use serde::{Deserialize, Serialize};

/// Rounds a full run needs at least (and runs by default): the fewest with
/// a median distinct from both extremes.
pub const MIN_ROUNDS: usize = 3;

/// The least coverage of the median's interval: that of three rounds'
/// `[min, max]`.
pub const CI_LEVEL: f64 = 0.75;

/// Rounds a figure gets at most with `--budget`, and the horizon of
/// [`outlook`]: a claim that would need more is reported as below what
/// this machine can show.
pub const MAX_ROUNDS: usize = 30;

/// The outcome for one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within the paper's value or range widened by our spread, on its side of 1.
    Reproduced,
    /// On the paper's side of 1, outside the widened range.
    Direction,
    /// Our spread includes 1, or is larger than the paper's effect.
    Inconclusive,
    /// On the other side of 1 than the paper.
    #[serde(rename = "not reproduced")]
    NotReproduced,
    /// An engine the figure needs is not built, or a run gave no value.
    #[serde(rename = "not run")]
    NotRun,
    /// A bench of the figure failed.
    Failed,
}

impl Verdict {
    /// The verdict as printed and written to `verdicts.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::Direction => "direction",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotReproduced => "not reproduced",
            Verdict::NotRun => "not run",
            Verdict::Failed => "failed",
        }
    }
}

/// A claim's ratio over the rounds of its figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The median of the rounds' ratios (the mean of the middle two for an
    /// even count).
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many rounds gave a ratio.
    pub rounds: usize,
    /// The order-statistics interval of the median (see the module
    /// documentation) and its exact coverage.
    pub ci_low: f64,
    pub ci_high: f64,
    pub ci_level: f64,
}

/// `P(Bin(n, 1/2) <= j)`.
fn binomial_half_cdf(n: usize, j: usize) -> f64 {
    let mut term = 0.5f64.powi(n as i32);
    let mut sum = 0.0;
    for i in 0..=j.min(n) {
        sum += term;
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    sum
}

/// The 1-based rank `k` of the interval `[x_(k), x_(n+1-k)]` of the median
/// of `n` values and its coverage: the largest `k` whose coverage is at
/// least [`CI_LEVEL`], or 1 (`[min, max]`) when even that falls short.
pub fn median_interval_rank(n: usize) -> (usize, f64) {
    let coverage = |k: usize| 1.0 - 2.0 * binomial_half_cdf(n, k - 1);
    let mut k = 1;
    while k < n.div_ceil(2) && coverage(k + 1) >= CI_LEVEL {
        k += 1;
    }
    (k, if n == 0 { 0.0 } else { coverage(k) })
}

impl Spread {
    /// The spread of `ratios` (one per round); None when there is none or
    /// one is not a finite positive number.
    pub fn of(ratios: &[f64]) -> Option<Spread> {
        if ratios.is_empty() || ratios.iter().any(|ratio| !ratio.is_finite() || *ratio <= 0.0) {
            return None;
        }
        let mut sorted = ratios.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 { sorted[middle] } else { (sorted[middle - 1] + sorted[middle]) / 2.0 };
        let n = sorted.len();
        let (k, ci_level) = median_interval_rank(n);
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            rounds: n,
            ci_low: sorted[k - 1],
            ci_high: sorted[n - k],
            ci_level,
        })
    }

    /// `ci_high - ci_low`: the noise the verdict weighs.
    pub fn width(&self) -> f64 {
        self.ci_high - self.ci_low
    }
}

/// The verdict on `ours` against the paper's `(low, high)` (see the module
/// documentation for the rule).
pub fn verdict(ours: &Spread, (low, high): (f64, f64)) -> Verdict {
    debug_assert!(low <= high, "paper range {low}-{high}");
    debug_assert!(ours.ci_low <= ours.median && ours.median <= ours.ci_high, "{ours:?}");
    let spread = ours.width();
    let paper_effect = (low * high).sqrt().ln().abs();
    let our_noise = (ours.ci_high / ours.ci_low).ln();
    if (ours.ci_low <= 1.0 && 1.0 <= ours.ci_high) || paper_effect < our_noise {
        return Verdict::Inconclusive;
    }
    // Here the whole interval lies on the median's side of 1.
    let paper_has_a_side = high < 1.0 || low > 1.0;
    let same_side = (ours.median > 1.0) == (low > 1.0);
    if paper_has_a_side && !same_side {
        return Verdict::NotReproduced;
    }
    if ours.median >= low - spread && ours.median <= high + spread {
        Verdict::Reproduced
    } else if paper_has_a_side {
        Verdict::Direction
    } else {
        Verdict::NotReproduced
    }
}

/// The verdict on a run's own value, one per round, against the paper's
/// range of that value (inclusive): reproduced when every round lies in
/// it, not reproduced when none does, inconclusive otherwise (and not run
/// without rounds).
pub fn verdict_absolute(values: &[f64], (low, high): (f64, f64)) -> Verdict {
    debug_assert!(low <= high, "paper range {low}-{high}");
    let inside = values.iter().filter(|value| (low..=high).contains(*value)).count();
    match inside {
        _ if values.is_empty() => Verdict::NotRun,
        0 => Verdict::NotReproduced,
        n if n == values.len() => Verdict::Reproduced,
        _ => Verdict::Inconclusive,
    }
}

/// Whether more rounds could decide a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outlook {
    /// The verdict is not inconclusive (or the claim was not measured).
    Decided,
    /// Inconclusive now; by the projection of [`outlook`], about `rounds`
    /// rounds in all would decide it.
    MoreRounds { rounds: usize },
    /// Inconclusive, and no number of rounds up to [`MAX_ROUNDS`] would
    /// decide it: the paper's effect is below this machine's noise, the
    /// ratio sits at 1, or (a count) it lies inside the paper's bound in
    /// some rounds and outside in others.
    Never,
}

/// Two-sided normal quantile of [`CI_LEVEL`] (75 %), times the median's
/// standard error factor `sqrt(pi / 2)`: the projected half-width of the
/// median's interval, in units of the per-round deviation over `sqrt(N)`.
const HALF_WIDTH_FACTOR: f64 = 1.150_3 * 1.253_3;

/// Whether more rounds could decide the claim whose per-round values are
/// `per_round` and whose verdict on them is `verdict`. The rule, on the
/// logarithms of the ratios: `s` is their standard deviation over the
/// rounds so far, `m = |ln median|` how far the median is from 1 and `e =
/// |ln sqrt(low * high)|` the paper's effect. At `N` rounds the median's
/// interval is projected to a half-width of `h(N) = 1.44 s / sqrt(N)`
/// (the normal approximation of the 75 % interval of a median); `N`
/// rounds decide when `h(N) < m` (the interval excludes 1) and `2 h(N) <=
/// e` (it is narrower than the paper's effect). The least such `N`, if it
/// is at most [`MAX_ROUNDS`], is [`Outlook::MoreRounds`]; otherwise
/// [`Outlook::Never`]. An absolute claim (a count) is [`Outlook::Never`]
/// when inconclusive: more rounds of a count that lies on both sides of
/// the paper's bound keep it there.
pub fn outlook(per_round: &[f64], (low, high): (f64, f64), verdict: Verdict, absolute: bool) -> Outlook {
    if verdict != Verdict::Inconclusive {
        return Outlook::Decided;
    }
    let Some(spread) = Spread::of(per_round) else { return Outlook::Never };
    if absolute || spread.rounds < 2 {
        return Outlook::Never;
    }
    let logs: Vec<f64> = per_round.iter().map(|ratio| ratio.ln()).collect();
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    let variance = logs.iter().map(|log| (log - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64;
    let deviation = variance.sqrt();
    let distance = spread.median.ln().abs();
    let effect = (low * high).sqrt().ln().abs();
    if distance <= 0.0 || effect <= 0.0 {
        return Outlook::Never;
    }
    let needed = |bound: f64| (HALF_WIDTH_FACTOR * deviation / bound).powi(2);
    let rounds = needed(distance).max(needed(effect / 2.0)).ceil();
    if rounds > MAX_ROUNDS as f64 {
        Outlook::Never
    } else {
        Outlook::MoreRounds { rounds: (rounds as usize).max(spread.rounds + 1) }
    }
}

/// A figure as [`next_figure`] sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct FigureState {
    /// Rounds it has run.
    pub rounds: usize,
    /// Seconds one of its rounds took (the mean of its rounds so far).
    pub round_s: f64,
    /// Its claims' outlooks after those rounds.
    pub outlooks: Vec<Outlook>,
}

/// The figure to give one more round within `remaining_s` seconds of the
/// budget, or None to stop. A figure is a candidate while it has run fewer
/// than [`MAX_ROUNDS`] rounds, one more of its rounds fits in what is left,
/// and at least one of its claims is [`Outlook::MoreRounds`]; a figure
/// whose claims are all decided (or never will be) gets no more rounds.
/// Among the candidates the one with the most to gain per second: the sum
/// over its claims that more rounds could decide of `1 / (rounds needed -
/// rounds run)`, over its round's seconds (a claim one round from decided
/// counts fully, one twenty rounds away a twentieth); ties go to the
/// figure listed first.
pub fn next_figure(figures: &[FigureState], remaining_s: f64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (index, figure) in figures.iter().enumerate() {
        if figure.rounds >= MAX_ROUNDS || figure.round_s > remaining_s {
            continue;
        }
        let gain: f64 = figure
            .outlooks
            .iter()
            .filter_map(|outlook| match outlook {
                Outlook::MoreRounds { rounds } => Some(1.0 / rounds.saturating_sub(figure.rounds).max(1) as f64),
                _ => None,
            })
            .sum();
        if gain <= 0.0 {
            continue;
        }
        let value = gain / figure.round_s.max(1e-3);
        if best.is_none_or(|(_, best_value)| value > best_value) {
            best = Some((index, value));
        }
    }
    best.map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three rounds with these ratios.
    fn rounds(a: f64, b: f64, c: f64) -> Spread {
        Spread::of(&[a, b, c]).unwrap()
    }

    #[test]
    fn the_spread_is_the_median_and_the_extremes() {
        assert_eq!(
            rounds(1.3, 1.1, 1.2),
            Spread { median: 1.2, min: 1.1, max: 1.3, rounds: 3, ci_low: 1.1, ci_high: 1.3, ci_level: 0.75 }
        );
        let even = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((even.median, even.min, even.max, even.rounds), (2.5, 1.0, 4.0, 4));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, 0.0, 2.0]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN, 2.0]), None);
        assert_eq!(Spread::of(&[1.0, f64::INFINITY, 2.0]), None);
    }

    #[test]
    fn no_effect_is_never_reproduced_however_small_the_paper_s_effect() {
        for width in [0.0, 0.001, 0.01, 0.05, 0.1, 0.5, 1.9] {
            for (low, high) in [(1.1, 1.1), (1.02, 1.2), (0.9, 0.9), (1.0, 1.2), (1.54, 1.82)] {
                let ours = Spread::of(&[1.0 - width / 2.0, 1.0, 1.0 + width]).unwrap();
                assert_eq!(verdict(&ours, (low, high)), Verdict::Inconclusive, "{ours:?} against {low}-{high}");
            }
        }
    }

    #[test]
    fn a_spread_that_includes_one_is_inconclusive() {
        // The median far on the paper's side, one round on the other.
        assert_eq!(verdict(&rounds(0.98, 1.9, 2.0), (2.1, 2.1)), Verdict::Inconclusive);
        // A round exactly at 1.
        assert_eq!(verdict(&rounds(1.0, 1.3, 1.35), (1.35, 1.35)), Verdict::Inconclusive);
        // Below 1, reaching it.
        assert_eq!(verdict(&rounds(0.7, 0.8, 1.01), (0.86, 0.86)), Verdict::Inconclusive);
    }

    #[test]
    fn a_paper_effect_smaller_than_our_spread_is_inconclusive() {
        // A factor of 1.10 against rounds 1.14 apart, all above 1.
        assert_eq!(verdict(&rounds(1.05, 1.12, 1.20), (1.1, 1.1)), Verdict::Inconclusive);
        // 0.86 (a factor of 1.16) against rounds 1.33 apart, all below 1.
        assert_eq!(verdict(&rounds(0.6, 0.75, 0.8), (0.86, 0.86)), Verdict::Inconclusive);
        // A range's effect is its geometric middle's: sqrt(1.02 * 1.2) =
        // 1.106, against rounds 1.136 apart...
        assert_eq!(verdict(&rounds(1.25, 1.4, 1.42), (1.02, 1.2)), Verdict::Inconclusive);
        // ...and against rounds 1.077 apart it is decided.
        assert_eq!(verdict(&rounds(1.3, 1.35, 1.4), (1.02, 1.2)), Verdict::Direction);
        // A large effect with a large spread in the ratio's units but not
        // as a factor: 2,720x against rounds of 2,700x-5,700x.
        assert_eq!(verdict(&rounds(2703.0, 3132.0, 5709.0), (2720.0, 2720.0)), Verdict::Reproduced);
    }

    #[test]
    fn reproduced_within_the_range_widened_by_the_whole_spread() {
        // Inside the range itself.
        assert_eq!(verdict(&rounds(1.6, 1.7, 1.75), (1.54, 1.82)), Verdict::Reproduced);
        // A point value: 2.0 against 2.1 with a spread of 0.11 reaches it...
        assert_eq!(verdict(&rounds(1.94, 2.0, 2.05), (2.1, 2.1)), Verdict::Reproduced);
        // ...with a spread of 0.04 it does not.
        assert_eq!(verdict(&rounds(1.98, 2.0, 2.02), (2.1, 2.1)), Verdict::Direction);
        // Above a range, within the spread over its top.
        assert_eq!(verdict(&rounds(2.5, 2.6, 2.9), (1.3, 2.52)), Verdict::Reproduced);
        // Below 1: 0.80 against 0.86 with a spread of 0.08.
        assert_eq!(verdict(&rounds(0.75, 0.8, 0.83), (0.86, 0.86)), Verdict::Reproduced);
        // The widening is the whole spread on each side, not only the part
        // of it between the median and the extreme on that side: 0.05 below
        // the median here, 0.35 in all...
        assert_eq!(verdict(&rounds(1.15, 1.2, 1.5), (1.54, 1.82)), Verdict::Reproduced);
        // ...and 0.3 above it, 0.35 in all.
        assert_eq!(verdict(&rounds(2.1, 2.15, 2.45), (1.54, 1.82)), Verdict::Reproduced);
    }

    #[test]
    fn direction_on_the_paper_s_side_outside_the_widened_range() {
        assert_eq!(verdict(&rounds(1.15, 1.2, 1.25), (2.1, 2.1)), Verdict::Direction);
        assert_eq!(verdict(&rounds(1400.0, 1500.0, 1700.0), (2720.0, 2720.0)), Verdict::Direction);
        assert_eq!(verdict(&rounds(4.0, 4.1, 4.2), (1.3, 2.5)), Verdict::Direction);
        assert_eq!(verdict(&rounds(0.42, 0.45, 0.47), (0.86, 0.86)), Verdict::Direction);
    }

    #[test]
    fn the_other_side_of_one_is_not_reproduced_however_close() {
        assert_eq!(verdict(&rounds(0.85, 0.9, 0.92), (2.1, 2.1)), Verdict::NotReproduced);
        // Within the widened range (down to 0.96), but the other engine wins.
        assert_eq!(verdict(&rounds(0.93, 0.98, 0.99), (1.02, 1.2)), Verdict::NotReproduced);
        assert_eq!(verdict(&rounds(1.1, 1.15, 1.2), (0.86, 0.86)), Verdict::NotReproduced);
        assert_eq!(verdict(&rounds(0.7, 0.72, 0.75), (1.1, 2.46)), Verdict::NotReproduced);
    }

    #[test]
    fn a_range_across_one_has_no_side() {
        // Its effect is its geometric middle's: none for 0.5x-2x, so any
        // spread makes it inconclusive...
        assert_eq!(verdict(&rounds(0.44, 0.46, 0.5), (0.5, 2.0)), Verdict::Inconclusive);
        // ...and a factor of sqrt(0.8 * 2.0) = 1.26 for 0.8x-2x. Either
        // side of 1 is then reproduced within the widened range and not
        // reproduced outside it.
        assert_eq!(verdict(&rounds(0.74, 0.76, 0.8), (0.8, 2.0)), Verdict::Reproduced);
        assert_eq!(verdict(&rounds(2.0, 2.03, 2.06), (0.8, 2.0)), Verdict::Reproduced);
        assert_eq!(verdict(&rounds(0.7, 0.72, 0.75), (0.8, 2.0)), Verdict::NotReproduced);
        assert_eq!(verdict(&rounds(3.0, 3.1, 3.2), (0.8, 2.0)), Verdict::NotReproduced);
        // A spread including 1 is inconclusive here too.
        assert_eq!(verdict(&rounds(0.9, 1.05, 1.1), (0.8, 2.0)), Verdict::Inconclusive);
    }

    #[test]
    fn one_round_compares_the_bare_ratio_with_the_bare_range() {
        let one = |ratio: f64| Spread::of(&[ratio]).unwrap();
        assert_eq!(verdict(&one(1.0), (1.1, 1.1)), Verdict::Inconclusive);
        assert_eq!(verdict(&one(1.1), (1.1, 1.1)), Verdict::Reproduced);
        assert_eq!(verdict(&one(1.09), (1.1, 1.1)), Verdict::Direction);
        assert_eq!(verdict(&one(0.99), (1.1, 1.1)), Verdict::NotReproduced);
    }

    #[test]
    fn an_absolute_value_is_reproduced_only_inside_the_range_in_every_round() {
        assert_eq!(verdict_absolute(&[0.0, 0.0, 0.0], (0.0, 0.0)), Verdict::Reproduced);
        assert_eq!(verdict_absolute(&[0.9, 1.0, 0.5], (0.0, 1.0)), Verdict::Reproduced);
        assert_eq!(verdict_absolute(&[0.9, 1.2, 0.5], (0.0, 1.0)), Verdict::Inconclusive);
        assert_eq!(verdict_absolute(&[2.0, 1.2, 3.0], (0.0, 1.0)), Verdict::NotReproduced);
        assert_eq!(verdict_absolute(&[0.0, 3.0, 1.0], (1.0, f64::MAX)), Verdict::Inconclusive);
        assert_eq!(verdict_absolute(&[], (1.0, 1.0)), Verdict::NotRun);
    }

    #[test]
    fn every_verdict_has_its_printed_name() {
        for (verdict, name) in [
            (Verdict::Reproduced, "reproduced"),
            (Verdict::Direction, "direction"),
            (Verdict::Inconclusive, "inconclusive"),
            (Verdict::NotReproduced, "not reproduced"),
            (Verdict::NotRun, "not run"),
            (Verdict::Failed, "failed"),
        ] {
            assert_eq!(verdict.as_str(), name);
            assert_eq!(serde_json::to_value(verdict).unwrap(), serde_json::Value::String(name.into()));
        }
    }

    /// The interval's rank and coverage for small counts, worked by hand:
    /// [min, max] up to five rounds, then inner order statistics.
    #[test]
    fn the_median_s_interval_keeps_three_rounds_coverage() {
        assert_eq!(median_interval_rank(3), (1, 0.75));
        assert_eq!(median_interval_rank(4), (1, 0.875));
        assert_eq!(median_interval_rank(5), (1, 0.9375));
        // 6 rounds: k = 2 covers 1 - 2 * 7/64 = 0.78125.
        assert_eq!(median_interval_rank(6), (2, 0.781_25));
        // 10 rounds: k = 3 covers 1 - 2 * 56/1024; k = 4 only 0.656.
        assert_eq!(median_interval_rank(10), (3, 1.0 - 112.0 / 1024.0));
        for n in 3..=100 {
            let (k, level) = median_interval_rank(n);
            assert!(level >= CI_LEVEL && k >= 1 && k <= n.div_ceil(2), "{n}: {k} {level}");
        }
        // Smoke runs: one and two rounds take [min, max].
        assert_eq!(median_interval_rank(1).0, 1);
        assert_eq!(median_interval_rank(2).0, 1);
        let six = Spread::of(&[1.9, 1.0, 1.2, 1.3, 1.25, 1.22]).unwrap();
        assert_eq!((six.ci_low, six.ci_high, six.min, six.max), (1.2, 1.3, 1.0, 1.9));
        assert!((six.median - 1.235).abs() < 1e-12);
    }

    /// More rounds decide what three could not: three rounds whose
    /// interval reaches 1 are inconclusive; with six, the outliers fall
    /// outside the interval and the same median is decided.
    #[test]
    fn more_rounds_narrow_the_interval_and_decide() {
        let three = Spread::of(&[0.99, 1.2, 1.3]).unwrap();
        assert_eq!(verdict(&three, (1.24, 1.24)), Verdict::Inconclusive);
        let six = Spread::of(&[0.99, 1.2, 1.3, 1.21, 1.25, 1.4]).unwrap();
        assert_eq!((six.ci_low, six.ci_high), (1.2, 1.3));
        assert_eq!(verdict(&six, (1.24, 1.24)), Verdict::Reproduced);
    }

    #[test]
    fn the_outlook_projects_the_rounds_that_would_decide() {
        let paper = (1.24, 1.24);
        // Decided claims need nothing.
        assert_eq!(outlook(&[1.2, 1.22, 1.25], paper, Verdict::Reproduced, false), Outlook::Decided);
        // ln ratios 0.0, 0.1823, 0.2624: s = 0.1361, median 1.2 (m =
        // 0.1823), effect ln 1.24 = 0.2151. Excluding 1 needs (1.4418 s /
        // m)^2 = 1.16 rounds; an interval narrower than the effect needs
        // (1.4418 s / 0.1076)^2 = 3.33: 4 rounds in all.
        let per_round = [1.0, 1.2, 1.3];
        assert_eq!(outlook(&per_round, paper, Verdict::Inconclusive, false), Outlook::MoreRounds { rounds: 4 });
        // A small effect against wide rounds: (1.4418 * 0.1361 / (ln 1.02
        // / 2))^2 = 397 rounds, beyond MAX_ROUNDS.
        assert_eq!(outlook(&per_round, (1.02, 1.02), Verdict::Inconclusive, false), Outlook::Never);
        // A median at 1 is never decided, nor an inconclusive count.
        assert_eq!(outlook(&[0.9, 1.0, 1.1], paper, Verdict::Inconclusive, false), Outlook::Never);
        assert_eq!(outlook(&[0.5, 1.5, 2.0], (0.0, 1.0), Verdict::Inconclusive, true), Outlook::Never);
        // A range across 1 whose middle is 1 has no effect to show.
        assert_eq!(outlook(&[1.1, 1.2, 1.3], (0.5, 2.0), Verdict::Inconclusive, false), Outlook::Never);
        // At least one more round than run so far.
        let tight = [1.3, 1.31, 0.99, 1.32, 1.33];
        assert_eq!(outlook(&tight, paper, Verdict::Inconclusive, false), Outlook::MoreRounds { rounds: 6 });
    }

    #[test]
    fn the_budget_goes_to_the_figure_with_most_to_gain_per_second() {
        let figure =
            |rounds, round_s, outlooks: &[Outlook]| FigureState { rounds, round_s, outlooks: outlooks.to_vec() };
        let more = |rounds| Outlook::MoreRounds { rounds };
        let figures = [
            // Decided: no more rounds (stopped early).
            figure(3, 10.0, &[Outlook::Decided, Outlook::Decided]),
            // One claim one round away, 60 s a round: 1/60.
            figure(3, 60.0, &[more(4), Outlook::Never]),
            // Two claims, 2 and 7 rounds away, 20 s a round: (1/2 + 1/7) / 20 = 1/31.
            figure(3, 20.0, &[more(5), more(10)]),
            // Never decidable: no more rounds.
            figure(3, 1.0, &[Outlook::Never]),
        ];
        assert_eq!(next_figure(&figures, 600.0), Some(2));
        // With 30 s left only figures whose round fits are candidates.
        assert_eq!(next_figure(&figures, 30.0), Some(2));
        assert_eq!(next_figure(&figures, 15.0), None);
        // A figure at MAX_ROUNDS gets no more.
        let capped = [figure(MAX_ROUNDS, 1.0, &[more(MAX_ROUNDS)]), figure(3, 60.0, &[more(4)])];
        assert_eq!(next_figure(&capped, 600.0), Some(1));
        // Nothing left to decide: stop.
        assert_eq!(next_figure(&figures[..1], 600.0), None);
        assert_eq!(next_figure(&[], 600.0), None);
    }
}
