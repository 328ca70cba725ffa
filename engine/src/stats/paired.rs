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
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
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
    means.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let at_or_below = means.iter().filter(|&&mean| mean <= 0.0).count();
    let at_or_above = means.iter().filter(|&&mean| mean >= 0.0).count();
    let p_value = (2.0 * at_or_below.min(at_or_above) as f64 / resamples as f64).min(1.0);
    Some(BootstrapResult {
        mean_difference,
        interval: Interval {
            lower: quantile(&means, tail),
            upper: quantile(&means, 1.0 - tail),
        },
        p_value,
        resamples,
    })
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
}
