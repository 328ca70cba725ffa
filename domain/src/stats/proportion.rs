//! Confidence intervals for pass rates.
//!
//! A rate always pools its numerator and denominator (19 of 30, not the mean of 90% and 50%).
//! With one answer per item the Wilson score interval is right; with several repetitions per
//! item the answers are correlated and the interval must be clustered by item, or it is too
//! narrow.

use super::{two_sided_z, Interval};

/// Wilson score interval for `successes` of `trials` (no continuity correction; Newcombe 1998,
/// method 3). `None` when there are no trials or the level is out of range.
pub fn wilson(successes: u64, trials: u64, confidence: f64) -> Option<Interval> {
    if trials == 0 || successes > trials {
        return None;
    }
    let z = two_sided_z(confidence)?;
    let n = trials as f64;
    let p = successes as f64 / n;
    let z2 = z * z;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half_width = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    Some(Interval {
        lower: (centre - half_width).max(0.0),
        upper: (centre + half_width).min(1.0),
    })
}

/// Passes and answers of one item over its repetitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemTally {
    pub passes: u64,
    pub answers: u64,
}

/// Sums over items that a clustered interval needs; they add up, so a run's tally grows as
/// results arrive and never needs the items again.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClusterSums {
    pub items: u64,
    pub passes: u64,
    pub answers: u64,
    /// Σ passes², Σ passes·answers and Σ answers² over items.
    pub passes_sq: f64,
    pub passes_answers: f64,
    pub answers_sq: f64,
}

impl ClusterSums {
    pub fn add(&mut self, item: ItemTally) {
        if item.answers == 0 {
            return;
        }
        let (y, m) = (item.passes as f64, item.answers as f64);
        self.items += 1;
        self.passes += item.passes;
        self.answers += item.answers;
        self.passes_sq += y * y;
        self.passes_answers += y * m;
        self.answers_sq += m * m;
    }

    /// Adds another set's sums (say, one category's to the whole run's).
    pub fn merge(&mut self, other: &ClusterSums) {
        self.items += other.items;
        self.passes += other.passes;
        self.answers += other.answers;
        self.passes_sq += other.passes_sq;
        self.passes_answers += other.passes_answers;
        self.answers_sq += other.answers_sq;
    }

    pub fn of(items: impl IntoIterator<Item = ItemTally>) -> ClusterSums {
        let mut sums = ClusterSums::default();
        for item in items {
            sums.add(item);
        }
        sums
    }
}

/// Interval for a pooled pass rate whose answers are clustered by item (repetitions of one
/// prompt are not independent): the ratio estimator's cluster-robust variance,
/// `C/(C−1) · Σ(yᵢ − p·mᵢ)² / N²`, with a normal quantile, clamped to [0, 1].
///
/// With one answer per item this is the Wald interval (times `n/(n−1)`), so prefer
/// [`wilson`] there; the report uses this only when items have several repetitions. When every
/// item agrees with itself and with the others (all pass, or all fail) the variance is zero
/// and the Wilson interval over items is returned instead of a zero-width one (over answers,
/// when every item passes the same share of its answers).
pub fn clustered(sums: &ClusterSums, confidence: f64) -> Option<Interval> {
    if sums.items < 2 || sums.answers == 0 {
        return None;
    }
    let z = two_sided_z(confidence)?;
    let n = sums.answers as f64;
    let c = sums.items as f64;
    let p = sums.passes as f64 / n;
    // Σ(y − p·m)² expanded, so it comes from sums that can be kept incrementally.
    let residual =
        (sums.passes_sq - 2.0 * p * sums.passes_answers + p * p * sums.answers_sq).max(0.0);
    let variance = c / (c - 1.0) * residual / (n * n);
    if variance <= 0.0 || every_item_at_the_same_rate(sums) {
        // All pass or all fail: Wilson over items. Every item at the same rate in between (each
        // answer following one of its two instructions): Wilson over answers, which keeps the
        // estimate inside its interval.
        return match sums.passes {
            0 => wilson(0, sums.items, confidence),
            passes if passes == sums.answers => wilson(sums.items, sums.items, confidence),
            passes => wilson(passes, sums.answers, confidence),
        };
    }
    let half_width = z * variance.sqrt();
    Some(Interval {
        lower: (p - half_width).max(0.0),
        upper: (p + half_width).min(1.0),
    })
}

/// Whether every item passes the same share of its answers, decided in integers: the
/// floating-point residual of rates like 2/5 is a rounding error, not zero. The sums are whole
/// numbers; `false` when they are too large to multiply exactly (the residual decides).
fn every_item_at_the_same_rate(sums: &ClusterSums) -> bool {
    let whole = |x: f64| (x.fract() == 0.0 && x.abs() < 2f64.powi(53)).then_some(x as i128);
    let (Some(yy), Some(ym), Some(mm)) = (
        whole(sums.passes_sq),
        whole(sums.passes_answers),
        whole(sums.answers_sq),
    ) else {
        return false;
    };
    let (y, m) = (i128::from(sums.passes), i128::from(sums.answers));
    // M²·Σ(yᵢ − p·mᵢ)² with p = Y/M, expanded: Σy²·M² − 2·Y·M·Σym + Y²·Σm².
    let residual = (|| {
        yy.checked_mul(m)?
            .checked_mul(m)?
            .checked_sub(y.checked_mul(2)?.checked_mul(m)?.checked_mul(ym)?)?
            .checked_add(y.checked_mul(y)?.checked_mul(mm)?)
    })();
    residual == Some(0)
}

/// The 2×2 table of two runs' verdicts on the items they share.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
pub struct PairedTable {
    pub both_pass: u64,
    /// Passed on the baseline, fails on the candidate: regressions.
    pub pass_to_fail: u64,
    /// Failed on the baseline, passes on the candidate: improvements.
    pub fail_to_pass: u64,
    pub both_fail: u64,
}

impl PairedTable {
    pub fn total(&self) -> u64 {
        self.both_pass + self.pass_to_fail + self.fail_to_pass + self.both_fail
    }

    pub fn add(&mut self, other: &PairedTable) {
        self.both_pass += other.both_pass;
        self.pass_to_fail += other.pass_to_fail;
        self.fail_to_pass += other.fail_to_pass;
        self.both_fail += other.both_fail;
    }

    /// Candidate pass rate minus baseline pass rate on the shared items.
    pub fn delta(&self) -> Option<f64> {
        let n = self.total();
        (n > 0).then(|| (self.fail_to_pass as f64 - self.pass_to_fail as f64) / n as f64)
    }
}

/// Interval for the candidate's pass rate minus the baseline's on paired items: Newcombe's
/// hybrid score method for paired proportions (Newcombe 1998, "Improved confidence intervals
/// for the difference between binomial proportions based on paired data", method 10), built
/// from the two runs' Wilson intervals and the correlation of their verdicts. Unlike the Wald
/// interval it stays inside [−1, 1] and is not degenerate when no item flips.
pub fn paired_difference(table: &PairedTable, confidence: f64) -> Option<Interval> {
    let n = table.total();
    if n == 0 {
        return None;
    }
    let (a, b, c, d) = (
        table.both_pass as f64,
        table.pass_to_fail as f64,
        table.fail_to_pass as f64,
        table.both_fail as f64,
    );
    let nf = n as f64;
    let candidate_passes = table.both_pass + table.fail_to_pass;
    let baseline_passes = table.both_pass + table.pass_to_fail;
    let candidate = wilson(candidate_passes, n, confidence)?;
    let baseline = wilson(baseline_passes, n, confidence)?;
    let p1 = candidate_passes as f64 / nf;
    let p2 = baseline_passes as f64 / nf;
    // Phi coefficient of the 2×2 table, its positive numerator shrunk by n/2 (the correction of
    // Newcombe's method 11): with the raw phi, a table without a single flip gives a
    // zero-width interval, which claims certainty that 40 items cannot give. Zero when a
    // margin is empty.
    let margins = (a + b) * (c + d) * (a + c) * (b + d);
    let numerator = a * d - b * c;
    let numerator = if numerator > 0.0 {
        (numerator - nf / 2.0).max(0.0)
    } else {
        numerator
    };
    let phi = if margins == 0.0 {
        0.0
    } else {
        numerator / margins.sqrt()
    };
    let (l1, u1, l2, u2) = (
        candidate.lower,
        candidate.upper,
        baseline.lower,
        baseline.upper,
    );
    let below = ((p1 - l1).powi(2) - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2).powi(2))
        .max(0.0)
        .sqrt();
    let above = ((u1 - p1).powi(2) - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2).powi(2))
        .max(0.0)
        .sqrt();
    let delta = p1 - p2;
    Some(Interval {
        lower: (delta - below).max(-1.0),
        upper: (delta + above).min(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= tolerance
    }

    /// Newcombe (1998), "Two-sided confidence intervals for the single proportion: comparison
    /// of seven methods", Statistics in Medicine 17:857–872, Table II, method 3 (score interval
    /// without continuity correction), given to four decimals.
    #[test]
    fn wilson_reproduces_newcombes_published_intervals() {
        for (successes, trials, lower, upper) in [
            (81, 263, 0.2553, 0.3662),
            (15, 148, 0.0624, 0.1605),
            (0, 20, 0.0, 0.1611),
            (1, 29, 0.0061, 0.1718),
        ] {
            let interval = wilson(successes, trials, 0.95).unwrap();
            assert!(
                close(interval.lower, lower, 5e-5) && close(interval.upper, upper, 5e-5),
                "{successes}/{trials}: got {interval:?}, published {lower}–{upper}"
            );
        }
        assert_eq!(wilson(0, 0, 0.95), None);
        assert_eq!(wilson(3, 2, 0.95), None);
    }

    /// The interval's defining properties; its coverage is simulated below.
    #[test]
    fn paired_difference_is_centred_on_the_flips_and_bounded() {
        let table = PairedTable {
            both_pass: 36,
            pass_to_fail: 2,
            fail_to_pass: 12,
            both_fail: 0,
        };
        let interval = paired_difference(&table, 0.95).unwrap();
        let delta = table.delta().unwrap();
        assert!(close(delta, 0.2, 1e-12));
        assert!(interval.lower < delta && delta < interval.upper);
        assert!(
            interval.lower > 0.0,
            "ten more improvements than regressions in 50 is significant: {interval:?}"
        );
        // No flips at all: the difference is exactly zero, the interval is not degenerate.
        let none = PairedTable {
            both_pass: 20,
            pass_to_fail: 0,
            fail_to_pass: 0,
            both_fail: 20,
        };
        let interval = paired_difference(&none, 0.95).unwrap();
        assert!(interval.lower < 0.0 && interval.upper > 0.0, "{interval:?}");
        // Everything fails on both sides: bounded within [−1, 1].
        let all_fail = PairedTable {
            both_fail: 10,
            ..PairedTable::default()
        };
        let interval = paired_difference(&all_fail, 0.95).unwrap();
        assert!(interval.lower >= -1.0 && interval.upper <= 1.0);
        assert_eq!(paired_difference(&PairedTable::default(), 0.95), None);
    }

    #[test]
    fn clustered_interval_widens_with_correlated_repetitions() {
        // 100 items × 4 repetitions. Independent answers: about as wide as Wilson over 400.
        // Perfectly correlated answers (each item all pass or all fail): as wide as 100 answers.
        let correlated = ClusterSums::of((0..100).map(|i| ItemTally {
            passes: if i < 50 { 4 } else { 0 },
            answers: 4,
        }));
        let mixed = ClusterSums::of((0..100).map(|_| ItemTally {
            passes: 2,
            answers: 4,
        }));
        let wide = clustered(&correlated, 0.95).unwrap();
        let narrow = clustered(&mixed, 0.95).unwrap();
        let wilson_400 = wilson(200, 400, 0.95).unwrap();
        let wilson_100 = wilson(50, 100, 0.95).unwrap();
        let width = |i: Interval| i.upper - i.lower;
        assert!(
            close(width(wide), width(wilson_100), 0.01),
            "{wide:?} vs {wilson_100:?}"
        );
        // No between-item variance at all: Wilson over the 400 answers, around the estimate;
        // also for rates whose floating-point residual is a rounding error, not zero.
        assert_eq!(narrow, wilson_400);
        let two_fifths = ClusterSums::of((0..10).map(|_| ItemTally {
            passes: 2,
            answers: 5,
        }));
        assert_eq!(clustered(&two_fifths, 0.95), wilson(20, 50, 0.95));
        assert!(width(wide) > 1.8 * width(wilson_400));
        // Unanimous: falls back to Wilson over items rather than a zero-width interval.
        let all_pass = ClusterSums::of((0..30).map(|_| ItemTally {
            passes: 3,
            answers: 3,
        }));
        assert_eq!(clustered(&all_pass, 0.95), wilson(30, 30, 0.95));
        assert_eq!(clustered(&ClusterSums::default(), 0.95), None);
    }

    /// Simulated runs: each item has its own difficulty drawn around a known mean, several
    /// repetitions per item. The 95% interval must cover the true rate in 93–97% of runs.
    #[test]
    fn ninety_five_percent_intervals_cover_the_true_rate() {
        let mut rng = StdRng::seed_from_u64(2026);
        let runs = 2_000;
        let (mut wilson_covered, mut clustered_covered) = (0, 0);
        for _ in 0..runs {
            // One answer per item, true rate 0.7: Wilson.
            let passes = (0..400).filter(|_| rng.gen_bool(0.7)).count() as u64;
            if wilson(passes, 400, 0.95).unwrap().contains(0.7) {
                wilson_covered += 1;
            }
            // Five repetitions of 300 items whose own rates are 0.2 or 0.9 (mean 0.62).
            let sums = ClusterSums::of((0..300).map(|_| {
                let rate = if rng.gen_bool(0.4) { 0.2 } else { 0.9 };
                let passes = (0..5).filter(|_| rng.gen_bool(rate)).count() as u64;
                ItemTally { passes, answers: 5 }
            }));
            if clustered(&sums, 0.95).unwrap().contains(0.62) {
                clustered_covered += 1;
            }
        }
        for (name, covered) in [("wilson", wilson_covered), ("clustered", clustered_covered)] {
            let coverage = covered as f64 / runs as f64;
            assert!(
                (0.93..=0.97).contains(&coverage),
                "{name} coverage {coverage}"
            );
        }
    }

    #[test]
    fn paired_difference_covers_the_true_delta() {
        let mut rng = StdRng::seed_from_u64(99);
        let runs = 2_000;
        let mut covered = 0;
        for _ in 0..runs {
            // Baseline passes with 0.6, the candidate flips 10% of passes and 25% of fails:
            // true delta = 0.4·0.25 − 0.6·0.1 = 0.04.
            let mut table = PairedTable::default();
            for _ in 0..500 {
                let base = rng.gen_bool(0.6);
                let cand = if base {
                    !rng.gen_bool(0.1)
                } else {
                    rng.gen_bool(0.25)
                };
                match (base, cand) {
                    (true, true) => table.both_pass += 1,
                    (true, false) => table.pass_to_fail += 1,
                    (false, true) => table.fail_to_pass += 1,
                    (false, false) => table.both_fail += 1,
                }
            }
            if paired_difference(&table, 0.95).unwrap().contains(0.04) {
                covered += 1;
            }
        }
        let coverage = covered as f64 / runs as f64;
        assert!((0.93..=0.97).contains(&coverage), "coverage {coverage}");
    }
}
