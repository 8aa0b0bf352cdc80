//! The verdict on a claim: our ratio, measured over several rounds, against
//! the paper's value or range.
//!
//! A figure's benches run `rounds` times (at least [`MIN_ROUNDS`] in a full
//! run), and the claim's ratio is computed in each round from that round's
//! reports. [`Spread`] keeps the median and the extremes of those ratios;
//! `spread = max - min` is the noise we measured on this machine, in the
//! ratio's own units. [`verdict`] then decides, in this order:
//!
//! 1. **inconclusive** when `min <= 1 <= max` (some rounds say one engine
//!    wins, others that it does not, or that there is no difference), or
//!    when the paper's effect is smaller than our spread, both taken as
//!    factors: `|ln paper_mid| < ln(max / min)` with `paper_mid =
//!    sqrt(low * high)`. A difference the noise can hide cannot confirm or
//!    refute the paper. Factors, not differences, because the noise of a
//!    ratio grows with it: rounds of 2,700x-5,700x say as clearly that a
//!    2,720x effect exists as rounds of 1.15x-1.25x say it of a 1.5x one,
//!    while a 1.10x effect against rounds of 1.02x-1.25x is lost in them.
//! 2. **not reproduced** when the median lies on the other side of 1 than
//!    the paper's range (the other engine wins). A range that contains 1
//!    has no side, so this never applies to it.
//! 3. **reproduced** when the median lies within the paper's range widened
//!    by the whole spread on each side: `[low - spread, high + spread]`.
//!    The whole spread on each side, not only the part of it between the
//!    median and that side's extreme, because three rounds place the
//!    median only roughly; no fixed factor, so a run with little noise
//!    must land close to the paper.
//! 4. **direction** otherwise: the paper's engine wins, by a margin outside
//!    that widened range (for a range containing 1: **not reproduced**).
//!
//! A claim about one run's own value (a count per transaction, entries
//! into a stage: the paper's "at most one sfence per transaction") is not
//! a ratio; [`verdict_absolute`] judges it: **reproduced** when the value
//! lies in the paper's range in every round, **not reproduced** when in
//! none, **inconclusive** when in some.
//!
//! A median of exactly 1 always has `min <= 1 <= max`, so "no effect" is
//! never reproduced, however small the paper's effect. A single round
//! (allowed in smoke runs only) has no spread: the rule then compares the
//! bare ratio with the bare range.

use serde::Serialize;

/// Rounds a full run needs at least (and runs by default): the fewest with
/// a median distinct from both extremes.
pub const MIN_ROUNDS: usize = 3;

/// The outcome for one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
        Some(Spread { median, min: sorted[0], max: sorted[sorted.len() - 1], rounds: sorted.len() })
    }

    /// `max - min`: the noise measured over the rounds.
    pub fn width(&self) -> f64 {
        self.max - self.min
    }
}

/// The verdict on `ours` against the paper's `(low, high)` (see the module
/// documentation for the rule).
pub fn verdict(ours: &Spread, (low, high): (f64, f64)) -> Verdict {
    debug_assert!(low <= high, "paper range {low}-{high}");
    debug_assert!(ours.min <= ours.median && ours.median <= ours.max, "{ours:?}");
    let spread = ours.width();
    let paper_effect = (low * high).sqrt().ln().abs();
    let our_noise = (ours.max / ours.min).ln();
    if (ours.min <= 1.0 && 1.0 <= ours.max) || paper_effect < our_noise {
        return Verdict::Inconclusive;
    }
    // Here every round lies on the median's side of 1.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Three rounds with these ratios.
    fn rounds(a: f64, b: f64, c: f64) -> Spread {
        Spread::of(&[a, b, c]).unwrap()
    }

    #[test]
    fn the_spread_is_the_median_and_the_extremes() {
        assert_eq!(rounds(1.3, 1.1, 1.2), Spread { median: 1.2, min: 1.1, max: 1.3, rounds: 3 });
        let even = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((even.median, even.min, even.max, even.rounds), (2.5, 1.0, 4.0, 4));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, 0.0, 2.0]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN, 2.0]), None);
        assert_eq!(Spread::of(&[1.0, f64::INFINITY, 2.0]), None);
    }

    #[test]
    fn no_effect_is_never_reproduced_however_small_the_paper_s_effect() {
        for width in [0.0, 0.001, 0.01, 0.05, 0.1, 0.5, 2.0] {
            for (low, high) in [(1.1, 1.1), (1.02, 1.2), (0.9, 0.9), (1.0, 1.2), (1.54, 1.82)] {
                let ours = Spread { median: 1.0, min: 1.0 - width / 2.0, max: 1.0 + width, rounds: 3 };
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
}
