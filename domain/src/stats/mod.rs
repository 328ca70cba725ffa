//! Statistics for reports and checkpoint comparisons. Pure functions over counts and scores,
//! no I/O, so each is checked alone against published or independently computed values.
//!
//! - [`proportion`]: intervals for a pass rate (Wilson; clustered over repetitions) and for the
//!   difference of two paired pass rates (Newcombe's score method).
//! - [`paired`]: tests on the items two runs share (exact McNemar for pass/fail, a paired
//!   bootstrap for scores).
//! - [`correction`]: adjusted p-values when many evals or categories are compared at once.
//! - [`sampling`]: pass@k, pass^k and maj@k over several samples per item.

pub mod correction;
pub mod paired;
pub mod proportion;
pub mod sampling;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

/// The confidence level used wherever a page does not choose one.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// A two-sided confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Interval {
    pub lower: f64,
    pub upper: f64,
}

impl Interval {
    pub fn contains(&self, value: f64) -> bool {
        self.lower <= value && value <= self.upper
    }

    /// Whether the whole interval lies on one side of `value` (for a difference: of zero).
    pub fn excludes(&self, value: f64) -> bool {
        !self.contains(value)
    }
}

/// The standard normal quantile for a two-sided interval at `confidence` (1.96 at 95%).
/// `None` unless `0 < confidence < 1`.
pub fn two_sided_z(confidence: f64) -> Option<f64> {
    if !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let normal = Normal::standard();
    Some(normal.inverse_cdf(0.5 + confidence / 2.0))
}

/// Quantile of sorted, non-empty data with linear interpolation (Hyndman–Fan type 7); NaN for
/// empty data.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    let last = sorted.len().saturating_sub(1);
    let h = p.clamp(0.0, 1.0) * last as f64;
    let below = (h.floor() as usize).min(last);
    let above = (below + 1).min(last);
    match (sorted.get(below), sorted.get(above)) {
        (Some(lo), Some(hi)) => lo + (h - below as f64) * (hi - lo),
        _ => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_matches_the_normal_table() {
        assert!((two_sided_z(0.95).unwrap() - 1.959_964).abs() < 1e-6);
        assert!((two_sided_z(0.99).unwrap() - 2.575_829).abs() < 1e-6);
        assert!((two_sided_z(0.90).unwrap() - 1.644_854).abs() < 1e-6);
        assert_eq!(two_sided_z(1.0), None);
        assert_eq!(two_sided_z(0.0), None);
        assert_eq!(two_sided_z(f64::NAN), None);
    }

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let data = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&data, 0.0), 1.0);
        assert_eq!(quantile(&data, 1.0), 4.0);
        assert!((quantile(&data, 0.5) - 2.5).abs() < 1e-12);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
