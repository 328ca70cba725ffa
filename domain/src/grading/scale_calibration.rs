//! How a scale judge (see [`super::scale`]) does against the raters' consensus on the same
//! rubric dimension: quadratic-weighted Cohen's kappa between its point and theirs, the
//! confusion table, exact and within-one agreement, the mean absolute error of its expected
//! score, and the reliability of its probability of passing against the raters' pass or fail.
//!
//! Every item counts once in the point statistics; the pass reliability weighs an audited item
//! by its inverse sampling rate, as the verdict calibration does. Pure.

use serde::{Deserialize, Serialize};

use super::calibration::{
    judge_accuracy, reliability_bins, JudgeAccuracy, LabelledJudgement, ReliabilityBin,
};
use super::scale::{JudgeScale, ScoreReading, ScoreRecord};
use crate::annotation::agreement::{CohenAccumulator, Statistic, Weighting};
use crate::annotation::consensus::{Consensus, DimensionConsensus};
use crate::annotation::rubric::DimensionAnswer;

/// One item the judge scored and the raters decided on the same dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredAgainstRaters {
    pub judge: ScoreRecord,
    /// The raters' consensus point.
    pub raters_point: u8,
    /// Probability that the item was sent to humans (1 for an escalation).
    pub sampling_rate: f64,
}

/// The calibration of a scale judge on its dimension.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleCalibration {
    pub items: u64,
    /// Quadratic-weighted Cohen's kappa, judge's point against the raters'.
    pub weighted_kappa: Option<f64>,
    /// Why the kappa is undefined, when it is.
    pub kappa_undefined: Option<String>,
    /// Share of items where the points are equal, and within one point.
    pub exact: Option<f64>,
    pub within_one: Option<f64>,
    /// Mean |expected score − raters' point|.
    pub mean_absolute_error: Option<f64>,
    /// Items by judge's point (rows, lowest first) and raters' point (columns).
    pub confusion: Vec<Vec<u64>>,
    /// The judge's pass or fail from its probability of passing, against the raters'
    /// (items with logprobs only).
    pub pass_accuracy: JudgeAccuracy,
    pub pass_bins: Vec<ReliabilityBin>,
}

/// The raters' decided point on `dimension`, from a task's consensus; `None` while split or
/// open, or for an answer that is not a whole point.
pub fn raters_point(consensus: &Consensus, dimension: &str) -> Option<u8> {
    match consensus.get(dimension)? {
        DimensionConsensus::Decided {
            answer: DimensionAnswer::Number(point),
        } if point.fract() == 0.0 && (1.0..=255.0).contains(point) => Some(*point as u8),
        _ => None,
    }
}

/// Calibrates on `items`; points outside the scale are left out.
pub fn calibrate_scale(
    scale: &JudgeScale,
    items: &[ScoredAgainstRaters],
    reliability_bin_count: usize,
) -> ScaleCalibration {
    let points = usize::from(scale.points);
    let on_scale = |point: u8| (1..=scale.points).contains(&point);
    let items: Vec<&ScoredAgainstRaters> = items
        .iter()
        .filter(|item| on_scale(item.judge.point) && on_scale(item.raters_point))
        .collect();
    let mut kappa = CohenAccumulator::with_categories(1..=scale.points);
    let mut confusion = vec![vec![0u64; points]; points];
    let (mut exact, mut within_one, mut absolute_error) = (0u64, 0u64, 0.0);
    let mut labelled = Vec::new();
    for item in &items {
        let (judge, raters) = (item.judge.point, item.raters_point);
        kappa.add_pair(judge, raters);
        confusion[usize::from(judge) - 1][usize::from(raters) - 1] += 1;
        exact += u64::from(judge == raters);
        within_one += u64::from(judge.abs_diff(raters) <= 1);
        absolute_error += (item.judge.expected - f64::from(raters)).abs();
        if let Some(probabilities) = &item.judge.probabilities {
            let reading = ScoreReading {
                point: judge,
                probabilities: Some(probabilities.clone()),
            }
            .judge_reading(scale);
            if let (Some(judge_pass), Some(confidence)) = (reading.pass, reading.confidence) {
                labelled.push(LabelledJudgement {
                    confidence,
                    judge_pass,
                    human_pass: raters >= scale.pass_at_least,
                    weight: 1.0 / item.sampling_rate,
                });
            }
        }
    }
    let count = items.len() as u64;
    let share = |n: u64| (count > 0).then(|| n as f64 / count as f64);
    ScaleCalibration {
        items: count,
        weighted_kappa: kappa.statistic(Weighting::Quadratic).value(),
        kappa_undefined: match kappa.statistic(Weighting::Quadratic) {
            Statistic::Undefined { reason } => Some(reason.to_string()),
            Statistic::Defined(_) => None,
        },
        exact: share(exact),
        within_one: share(within_one),
        mean_absolute_error: (count > 0).then(|| absolute_error / count as f64),
        confusion,
        pass_accuracy: judge_accuracy(&labelled),
        pass_bins: reliability_bins(&labelled, reliability_bin_count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scale() -> JudgeScale {
        JudgeScale {
            rubric_id: 1,
            rubric_name: "quality".into(),
            rubric_version: 1,
            dimension: "helpfulness".into(),
            points: 3,
            pass_at_least: 2,
        }
    }

    fn item(judge: u8, probabilities: Option<Vec<f64>>, raters: u8) -> ScoredAgainstRaters {
        let expected = probabilities.as_ref().map_or(f64::from(judge), |p| {
            p.iter().enumerate().map(|(i, p)| (i + 1) as f64 * p).sum()
        });
        ScoredAgainstRaters {
            judge: ScoreRecord {
                point: judge,
                expected,
                probabilities,
            },
            raters_point: raters,
            sampling_rate: 1.0,
        }
    }

    #[test]
    fn points_are_compared_with_weighted_kappa_and_a_confusion_table() {
        // Judge rows × raters columns on a 3-point scale:
        //   judge 1: raters 1 ×2, 2 ×1
        //   judge 2: raters 2 ×2
        //   judge 3: raters 1 ×1, 3 ×2
        let items = [
            item(1, None, 1),
            item(1, None, 1),
            item(1, None, 2),
            item(2, None, 2),
            item(2, None, 2),
            item(3, None, 1),
            item(3, None, 3),
            item(3, None, 3),
        ];
        let calibration = calibrate_scale(&scale(), &items, 10);
        assert_eq!(calibration.items, 8);
        assert_eq!(
            calibration.confusion,
            vec![vec![2, 1, 0], vec![0, 2, 0], vec![1, 0, 2]]
        );
        assert_eq!(calibration.exact, Some(6.0 / 8.0));
        assert_eq!(calibration.within_one, Some(7.0 / 8.0));
        assert_eq!(calibration.mean_absolute_error, Some(3.0 / 8.0));
        // Quadratic weights by hand: observed disagreement Σ d·n = 1·1 + 4·1 = 5; rows
        // (3, 2, 3), columns (3, 3, 2); expected Σ d·r·c = 1·(3·3 + 2·3 + 2·2 + 3·3) + 4·(3·2 +
        // 3·3) = 28 + 60 = 88; κ = 1 − 8·5/88.
        let kappa = calibration.weighted_kappa.unwrap();
        assert!((kappa - (1.0 - 40.0 / 88.0)).abs() < 1e-12, "{kappa}");
        // No logprobs: nothing for the pass reliability.
        assert_eq!(calibration.pass_accuracy.items, 0);
    }

    #[test]
    fn the_raters_point_is_a_decided_whole_point() {
        let consensus: Consensus = [
            (
                "a".to_string(),
                DimensionConsensus::Decided {
                    answer: DimensionAnswer::Number(4.0),
                },
            ),
            ("b".to_string(), DimensionConsensus::Split),
            (
                "c".to_string(),
                DimensionConsensus::Decided {
                    answer: DimensionAnswer::Number(2.5),
                },
            ),
            (
                "d".to_string(),
                DimensionConsensus::Decided {
                    answer: DimensionAnswer::Binary(true),
                },
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(raters_point(&consensus, "a"), Some(4));
        for key in ["b", "c", "d", "missing"] {
            assert_eq!(raters_point(&consensus, key), None, "{key}");
        }
    }

    #[test]
    fn the_probability_of_passing_is_checked_against_the_raters_pass() {
        let items = [
            // P(pass) = 0.9, raters pass: right.
            item(3, Some(vec![0.1, 0.2, 0.7]), 3),
            // P(pass) = 0.3: judged fail, raters pass: wrong.
            item(1, Some(vec![0.7, 0.2, 0.1]), 2),
            // A point off the scale is left out everywhere.
            item(4, None, 1),
        ];
        let calibration = calibrate_scale(&scale(), &items, 10);
        assert_eq!(calibration.items, 2);
        assert_eq!(calibration.pass_accuracy.items, 2);
        assert_eq!(calibration.pass_accuracy.accuracy, Some(0.5));
        let filled: Vec<_> = calibration
            .pass_bins
            .iter()
            .filter(|bin| bin.count > 0)
            .collect();
        assert_eq!(filled.len(), 2);
        // The expected scores (2.6 and 1.4) are each 0.4 and 0.6 off.
        assert!((calibration.mean_absolute_error.unwrap() - 0.5).abs() < 1e-9);
    }
}
