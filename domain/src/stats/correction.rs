//! Multiple-comparison corrections. When a comparison page tests many categories (or many
//! evals) at once, some raw p-values fall under 0.05 by chance alone; these adjust them.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Correction {
    /// Holm's step-down method: controls the family-wise error rate (any false alarm), uniformly
    /// more powerful than Bonferroni. The default for a promotion decision.
    #[default]
    Holm,
    /// Benjamini–Hochberg: controls the false discovery rate; for exploring many categories.
    BenjaminiHochberg,
    None,
}

impl Correction {
    pub fn parse(name: &str) -> Option<Correction> {
        match name {
            "holm" => Some(Correction::Holm),
            "bh" | "fdr" => Some(Correction::BenjaminiHochberg),
            "none" => Some(Correction::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Correction::Holm => "holm",
            Correction::BenjaminiHochberg => "bh",
            Correction::None => "none",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Correction::Holm => "Holm (family-wise error)",
            Correction::BenjaminiHochberg => "Benjamini–Hochberg (false discovery rate)",
            Correction::None => "no correction",
        }
    }

    /// Adjusted p-values in the input's order.
    pub fn adjust(self, p_values: &[f64]) -> Vec<f64> {
        match self {
            Correction::Holm => holm(p_values),
            Correction::BenjaminiHochberg => benjamini_hochberg(p_values),
            Correction::None => p_values.to_vec(),
        }
    }
}

fn ascending_order(p_values: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..p_values.len()).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    order
}

/// Holm: the k-th smallest p (from 0) times (m − k), made monotone upwards, capped at 1.
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut adjusted = vec![1.0; m];
    let mut running = 0.0_f64;
    for (rank, &index) in ascending_order(p_values).iter().enumerate() {
        running = running.max((p_values[index] * (m - rank) as f64).min(1.0));
        adjusted[index] = running;
    }
    adjusted
}

/// Benjamini–Hochberg: the k-th smallest p (from 1) times m / k, made monotone downwards from
/// the largest, capped at 1.
pub fn benjamini_hochberg(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut adjusted = vec![1.0; m];
    let mut running = 1.0_f64;
    for (rank, &index) in ascending_order(p_values).iter().enumerate().rev() {
        running = running.min(p_values[index] * m as f64 / (rank + 1) as f64);
        adjusted[index] = running.min(1.0);
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand from the definitions (those of R's `p.adjust`): Holm sorts to 0.005, 0.01, 0.03, 0.04, 0.2 and multiplies by 5, 4, 3, 2, 1;
    /// BH multiplies by 5/1 … 5/5 and takes running minima from the top.
    #[test]
    fn adjustments_match_hand_worked_values() {
        let p = [0.01, 0.04, 0.03, 0.005, 0.2];
        let expected_holm = [0.04, 0.09, 0.09, 0.025, 0.2];
        let expected_bh = [0.025, 0.05, 0.05, 0.025, 0.2];
        for (got, want) in holm(&p).iter().zip(expected_holm) {
            assert!((got - want).abs() < 1e-12, "holm {got} vs {want}");
        }
        for (got, want) in benjamini_hochberg(&p).iter().zip(expected_bh) {
            assert!((got - want).abs() < 1e-12, "bh {got} vs {want}");
        }
        assert_eq!(Correction::None.adjust(&p), p.to_vec());
        assert!(holm(&[]).is_empty());
        assert_eq!(holm(&[0.6, 0.7]), vec![1.0, 1.0]);
    }
}
