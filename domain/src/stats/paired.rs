//! Tests on the items two runs share. Pairing removes the item-to-item variance that
//! dominates an unpaired comparison, so a real regression shows with far fewer items.

use super::{quantile, Interval};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use statrs::distribution::{Binomial, DiscreteCDF};

/// Exact two-sided McNemar test: under "no difference" each discordant item is equally likely
/// to have flipped either way, so the smaller flip count is Binomial(b + c, ½). The p-value is
/// twice the lower tail, capped at 1 (Fagerland, Lydersen and Laake 2013); 1 when nothing
/// flipped.
pub fn mcnemar_exact(pass_to_fail: u64, fail_to_pass: u64) -> f64 {
    let discordant = pass_to_fail + fail_to_pass;
    if discordant == 0 {
        return 1.0;
    }
    let smaller = pass_to_fail.min(fail_to_pass);
    match Binomial::new(0.5, discordant) {
        Ok(binomial) => (2.0 * binomial.cdf(smaller)).min(1.0),
        Err(_) => 1.0,
    }
}

/// A paired bootstrap of the mean score difference (candidate − baseline).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BootstrapResult {
    pub mean_difference: f64,
    pub interval: Interval,
    /// Two-sided: twice the share of resampled means on the far side of zero, capped at 1.
    pub p_value: f64,
    pub resamples: usize,
}

/// Percentile bootstrap over paired per-item score differences: items are resampled with
/// replacement, keeping each item's two scores together. Deterministic for a seed. `None` for
/// no items, no resamples or a level out of range.
pub fn paired_bootstrap(
    differences: &[f64],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<BootstrapResult> {
    if differences.is_empty() || resamples == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let n = differences.len();
    let mean_difference = differences.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut means = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let mut total = 0.0;
        for _ in 0..n {
            // Draw as u64, so the stream is the same on 32- and 64-bit targets.
            let pick = rng.gen_range(0..n as u64) as usize;
            total += differences.get(pick).copied().unwrap_or(0.0);
        }
        means.push(total / n as f64);
    }
    let (interval, far_side) = percentile_summary(&mut means, confidence);
    let p_value = (2.0 * far_side as f64 / resamples as f64).min(1.0);
    Some(BootstrapResult {
        mean_difference,
        interval,
        p_value,
        resamples,
    })
}

/// The percentile interval of resampled means, and how many lie on the far side of zero
/// (the smaller of those at or below it and those at or above it). Sorts `means`.
fn percentile_summary(means: &mut [f64], confidence: f64) -> (Interval, usize) {
    means.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let at_or_below = means.iter().filter(|&&mean| mean <= 0.0).count();
    let at_or_above = means.iter().filter(|&&mean| mean >= 0.0).count();
    let interval = Interval {
        lower: quantile(means, tail),
        upper: quantile(means, 1.0 - tail),
    };
    (interval, at_or_below.min(at_or_above))
}

/// Cases of a comparison with repetitions, grouped by what they contribute: `difference` is the
/// case's candidate passes minus baseline passes over its `paired` repetitions (those graded
/// pass or fail on both sides), and `cases` how many cases contribute exactly that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CaseGroup {
    pub difference: i64,
    pub paired: u64,
    pub cases: u64,
}

/// Paired bootstrap over cases, for runs with repetitions: the case is the unit that is
/// resampled (its repetitions are not independent), and the statistic is the pooled
/// difference in pass rate, Σ difference / Σ paired, so it agrees with the rates shown.
/// The p-value counts the resamples on the far side of zero with the usual +1 correction, so
/// it is never exactly zero. `None` without cases.
pub fn paired_cluster_bootstrap(
    groups: &[CaseGroup],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<BootstrapResult> {
    let groups: Vec<ScoreGroup> = groups
        .iter()
        .map(|group| ScoreGroup {
            score: group.difference as f64,
            weight: group.paired as f64,
            cases: group.cases,
        })
        .collect();
    grouped_bootstrap(&groups, resamples, confidence, seed)
}

/// Cases that contribute the same to a resampled statistic: each adds `score` to the
/// numerator and `weight` to the denominator of Σ score / Σ weight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreGroup {
    pub score: f64,
    pub weight: f64,
    pub cases: u64,
}

impl ScoreGroup {
    /// Groups per-case scores (a weight of one each, so the statistic is their mean) by value,
    /// in a stable order.
    pub fn of_scores(scores: &[f64]) -> Vec<ScoreGroup> {
        let mut sorted = scores.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mut groups: Vec<ScoreGroup> = Vec::new();
        for score in sorted {
            match groups.last_mut() {
                Some(group) if group.score.to_bits() == score.to_bits() => group.cases += 1,
                _ => groups.push(ScoreGroup {
                    score,
                    weight: 1.0,
                    cases: 1,
                }),
            }
        }
        groups
    }
}

/// Percentile bootstrap over cases of Σ score / Σ weight, for cases that fall into few groups
/// (a case's score over its repetitions, or a metric over samples, takes few values). Drawing
/// N cases with replacement is the same as drawing how many cases of each group are drawn
/// from a multinomial, so each resample costs one binomial draw per group instead of one draw
/// per case, which keeps a million cases fast. The p-value (for a difference: against zero)
/// counts the resamples on the far side of zero with the +1 correction. `None` without cases
/// or weight, without resamples, or with a level out of range.
pub fn grouped_bootstrap(
    groups: &[ScoreGroup],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<BootstrapResult> {
    let total_cases: u64 = groups.iter().map(|g| g.cases).sum();
    if total_cases == 0 || resamples == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let pooled = |counts: &mut dyn Iterator<Item = (&ScoreGroup, u64)>| {
        let (mut score, mut weight) = (0.0, 0.0);
        for (group, drawn) in counts {
            score += group.score * drawn as f64;
            weight += group.weight * drawn as f64;
        }
        (weight > 0.0).then(|| score / weight)
    };
    let mean_difference = pooled(&mut groups.iter().map(|g| (g, g.cases)))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut means = Vec::with_capacity(resamples);
    let mut drawn = vec![0u64; groups.len()];
    for _ in 0..resamples {
        // Multinomial by sequential binomials: each group takes its share of what is left.
        let mut left = total_cases;
        let mut weight_left = total_cases;
        for (slot, group) in drawn.iter_mut().zip(groups) {
            *slot = if weight_left == 0 || left == 0 {
                0
            } else if group.cases >= weight_left {
                left
            } else {
                let p = group.cases as f64 / weight_left as f64;
                rand_distr::Binomial::new(left, p).map_or(0, |b| rng.sample(b))
            };
            left -= *slot;
            weight_left -= group.cases;
        }
        if let Some(mean) = pooled(&mut groups.iter().zip(drawn.iter().copied())) {
            means.push(mean);
        }
    }
    if means.is_empty() {
        return None;
    }
    let (interval, far_side) = percentile_summary(&mut means, confidence);
    let p_value = ((1 + 2 * far_side) as f64 / (1 + means.len()) as f64).min(1.0);
    Some(BootstrapResult {
        mean_difference,
        interval,
        p_value,
        resamples: means.len(),
    })
}

/// Two-sided sign-flip permutation test of paired differences (cluster totals, for
/// clustered data): under "no difference" each case's total is as likely to have either sign,
/// so the observed sum is compared with sums under random signs. `groups` lists each distinct
/// absolute difference with how many cases have it (zeros say nothing and are left out);
/// drawing how many of a group are positive is one binomial draw, so a million cases cost no
/// more than a few groups. The p-value counts resamples at least as extreme with the +1
/// correction. 1 when no case differs.
pub fn sign_flip_test(groups: &[(f64, u64)], observed: f64, resamples: usize, seed: u64) -> f64 {
    let differing: Vec<(f64, u64)> = groups
        .iter()
        .copied()
        .filter(|(magnitude, cases)| *magnitude > 0.0 && *cases > 0)
        .collect();
    if differing.is_empty() || resamples == 0 {
        return 1.0;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    // A tolerance for float sums: a resample equal to the observed one counts as extreme.
    let threshold = observed.abs() * (1.0 - 1e-9) - 1e-12;
    let mut extreme = 0usize;
    for _ in 0..resamples {
        let total: f64 = differing
            .iter()
            .map(|&(magnitude, cases)| {
                let positive = rand_distr::Binomial::new(cases, 0.5).map_or(0, |b| rng.sample(b));
                magnitude * (2.0 * positive as f64 - cases as f64)
            })
            .sum();
        extreme += usize::from(total.abs() >= threshold);
    }
    ((1 + extreme) as f64 / (1 + resamples) as f64).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact binomial tails computed independently with Python's `fractions` and `math.comb`
    /// (rational arithmetic, no floating point until the end); the first two by hand:
    /// 2·(1 + 10)/2¹⁰ and 2·1/2⁵.
    #[test]
    fn mcnemar_matches_exact_binomial_tails() {
        for (b, c, expected) in [
            (1, 9, 0.021_484_375),
            (0, 5, 0.0625),
            (3, 3, 1.0),
            (10, 25, 0.016_673_847_800_120_71),
            (59, 121, 4.434_449_263_755_176e-6),
            (112, 88, 0.103_639_038_437_857_16),
            (0, 0, 1.0),
        ] {
            let p = mcnemar_exact(b, c);
            assert!(
                (p - expected).abs() <= 1e-9 * expected.max(1e-3),
                "b={b} c={c}: got {p}, expected {expected}"
            );
            assert_eq!(mcnemar_exact(c, b), p, "symmetric in the two directions");
        }
    }

    #[test]
    fn mcnemar_rejects_at_the_right_rate_under_the_null() {
        // 400 discordant items each flipping either way at random: p < 0.05 in at most 5% of
        // trials (the exact test is conservative).
        let mut rng = StdRng::seed_from_u64(5);
        let trials = 2_000;
        let rejected = (0..trials)
            .filter(|_| {
                let b = (0..400).filter(|_| rng.gen_bool(0.5)).count() as u64;
                mcnemar_exact(b, 400 - b) < 0.05
            })
            .count();
        let rate = rejected as f64 / trials as f64;
        assert!((0.03..=0.055).contains(&rate), "rejection rate {rate}");
    }

    #[test]
    fn bootstrap_finds_a_shift_and_not_a_non_shift() {
        let shifted: Vec<f64> = (0..300)
            .map(|i| 0.1 + ((i % 7) as f64 - 3.0) * 0.05)
            .collect();
        let result = paired_bootstrap(&shifted, 2_000, 0.95, 1).unwrap();
        assert!((result.mean_difference - shifted.iter().sum::<f64>() / 300.0).abs() < 1e-12);
        assert!(
            result.interval.lower > 0.0 && result.p_value < 0.01,
            "{result:?}"
        );
        let centred: Vec<f64> = (0..300).map(|i| ((i % 7) as f64 - 3.0) * 0.05).collect();
        let result = paired_bootstrap(&centred, 2_000, 0.95, 1).unwrap();
        assert!(
            result.interval.contains(0.0) && result.p_value > 0.5,
            "{result:?}"
        );
        assert_eq!(
            paired_bootstrap(&centred, 2_000, 0.95, 1),
            Some(result),
            "deterministic"
        );
        assert_eq!(paired_bootstrap(&[], 10, 0.95, 1), None);
    }

    /// Expands groups into one (difference, paired) pair per case, for the item-by-item check.
    fn cases_of(groups: &[CaseGroup]) -> Vec<(i64, u64)> {
        groups
            .iter()
            .flat_map(|g| std::iter::repeat_n((g.difference, g.paired), g.cases as usize))
            .collect()
    }

    /// The same bootstrap done the slow way: resample cases one by one.
    fn case_by_case(cases: &[(i64, u64)], resamples: usize, seed: u64) -> (f64, f64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut means: Vec<f64> = (0..resamples)
            .map(|_| {
                let (mut d, mut n) = (0i64, 0u64);
                for _ in 0..cases.len() {
                    let (difference, paired) = cases[rng.gen_range(0..cases.len())];
                    d += difference;
                    n += paired;
                }
                d as f64 / n as f64
            })
            .collect();
        means.sort_by(f64::total_cmp);
        (quantile(&means, 0.025), quantile(&means, 0.975))
    }

    #[test]
    fn grouped_cluster_bootstrap_agrees_with_resampling_case_by_case() {
        // 3 repetitions per case: most cases unchanged, some one or two passes better or worse.
        let groups = [
            CaseGroup {
                difference: 0,
                paired: 3,
                cases: 700,
            },
            CaseGroup {
                difference: 1,
                paired: 3,
                cases: 120,
            },
            CaseGroup {
                difference: -1,
                paired: 3,
                cases: 80,
            },
            CaseGroup {
                difference: 2,
                paired: 3,
                cases: 30,
            },
            CaseGroup {
                difference: -2,
                paired: 2,
                cases: 20,
            },
            CaseGroup {
                difference: 0,
                paired: 1,
                cases: 50,
            },
        ];
        let grouped = paired_cluster_bootstrap(&groups, 4_000, 0.95, 3).unwrap();
        let cases = cases_of(&groups);
        let d: i64 = cases.iter().map(|c| c.0).sum();
        let n: u64 = cases.iter().map(|c| c.1).sum();
        assert!((grouped.mean_difference - d as f64 / n as f64).abs() < 1e-12);
        let (lower, upper) = case_by_case(&cases, 4_000, 4);
        // Two Monte Carlo estimates of the same percentiles: equal up to simulation noise.
        assert!(
            (grouped.interval.lower - lower).abs() < 0.004,
            "{grouped:?} vs {lower}"
        );
        assert!(
            (grouped.interval.upper - upper).abs() < 0.004,
            "{grouped:?} vs {upper}"
        );
        assert!(
            grouped.interval.lower > 0.0 && grouped.p_value < 0.01,
            "{grouped:?}"
        );
        assert_eq!(
            paired_cluster_bootstrap(&groups, 4_000, 0.95, 3),
            Some(grouped)
        );
    }

    #[test]
    fn cluster_bootstrap_is_wider_than_treating_repetitions_as_independent() {
        // Whole cases flip together (all 4 repetitions), as a correlated regression does:
        // the case-level interval must be about twice as wide as an identity-level one.
        let groups = [
            CaseGroup {
                difference: 0,
                paired: 4,
                cases: 900,
            },
            CaseGroup {
                difference: -4,
                paired: 4,
                cases: 60,
            },
            CaseGroup {
                difference: 4,
                paired: 4,
                cases: 40,
            },
        ];
        let clustered = paired_cluster_bootstrap(&groups, 4_000, 0.95, 9).unwrap();
        let identities = [
            CaseGroup {
                difference: 0,
                paired: 1,
                cases: 3_600,
            },
            CaseGroup {
                difference: -1,
                paired: 1,
                cases: 240,
            },
            CaseGroup {
                difference: 1,
                paired: 1,
                cases: 160,
            },
        ];
        let naive = paired_cluster_bootstrap(&identities, 4_000, 0.95, 9).unwrap();
        assert!((clustered.mean_difference - naive.mean_difference).abs() < 1e-12);
        let width = |r: &BootstrapResult| r.interval.upper - r.interval.lower;
        let ratio = width(&clustered) / width(&naive);
        assert!((1.7..2.3).contains(&ratio), "width ratio {ratio}");
        assert!(clustered.p_value > naive.p_value);
    }

    #[test]
    fn sign_flips_agree_with_the_exact_binomial_for_unit_differences() {
        // Five cases all better by one: the exact two-sided p is 2/2⁵ (McNemar's 0.0625).
        let p = sign_flip_test(&[(1.0, 5)], 5.0, 20_000, 3);
        assert!((p - 0.0625).abs() < 0.006, "p = {p}");
        // 10 better and 25 worse: McNemar gives 0.01667.
        let p = sign_flip_test(&[(1.0, 35)], -15.0, 20_000, 4);
        assert!((p - 0.016_673_847_8).abs() < 0.004, "p = {p}");
        assert_eq!(
            sign_flip_test(&[(0.0, 50)], 0.0, 100, 1),
            1.0,
            "nothing differs"
        );
        // Mixed magnitudes (fractional scores): a consistent shift is found.
        let p = sign_flip_test(&[(0.25, 60), (0.5, 30)], 0.25 * 40.0 + 0.5 * 20.0, 5_000, 5);
        assert!(p < 0.01, "p = {p}");
    }

    #[test]
    fn cluster_bootstrap_without_cases_is_none_and_never_gives_p_zero() {
        assert_eq!(paired_cluster_bootstrap(&[], 100, 0.95, 1), None);
        let all_better = [CaseGroup {
            difference: 2,
            paired: 2,
            cases: 500,
        }];
        let result = paired_cluster_bootstrap(&all_better, 999, 0.95, 1).unwrap();
        assert_eq!(result.p_value, 1.0 / 1_000.0);
    }
}
