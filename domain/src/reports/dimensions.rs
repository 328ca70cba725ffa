//! A run's rubric, dimension by dimension: how the raters' consensus on each item is spread
//! over the dimension's values, and for ordinal and numeric dimensions the mean with a
//! bootstrap interval over items. Items whose raters split on a dimension, or left an optional
//! one open, are counted apart rather than guessed.

use serde::{Deserialize, Serialize};

use crate::annotation::consensus::{answer_in_words, Consensus, DimensionConsensus};
use crate::annotation::rubric::{DimensionAnswer, DimensionKind, Rubric};
use crate::stats::paired::paired_bootstrap;
use crate::stats::Interval;

/// Resamples of the interval around a dimension's mean.
const RESAMPLES: usize = 2_000;

/// One dimension over a run's decided items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DimensionSummary {
    pub key: String,
    pub question: String,
    /// `nominal`, `ordinal`, `interval`, or `text`.
    pub level: String,
    /// Items per value, in the dimension's own order (every point or option, zeros included);
    /// empty for numeric and free-text dimensions.
    pub distribution: Vec<(String, u64)>,
    /// Ordinal and numeric: the mean over items with a consensus, and its 95% interval.
    pub mean: Option<f64>,
    pub interval: Option<Interval>,
    pub decided: u64,
    /// Items whose raters split evenly on this dimension.
    pub split: u64,
    /// Items with no answer to it (optional and left open, or free text).
    pub open: u64,
}

/// Each dimension of `rubric` over the consensus of each item.
pub fn summarize(rubric: &Rubric, items: &[Consensus]) -> Vec<DimensionSummary> {
    rubric
        .dimensions
        .iter()
        .map(|dimension| {
            let (mut decided, mut split, mut open) = (Vec::new(), 0, 0);
            for consensus in items {
                match consensus.get(&dimension.key) {
                    Some(DimensionConsensus::Decided { answer }) => decided.push(answer),
                    Some(DimensionConsensus::Split) => split += 1,
                    _ => open += 1,
                }
            }
            let numbers: Vec<f64> = decided
                .iter()
                .filter_map(|answer| match answer {
                    DimensionAnswer::Number(value) => Some(*value),
                    _ => None,
                })
                .collect();
            let averaged = matches!(
                dimension.kind,
                DimensionKind::Ordinal { .. } | DimensionKind::Numeric { .. }
            );
            let bootstrap = averaged
                .then(|| paired_bootstrap(&numbers, RESAMPLES, 0.95, 7))
                .flatten();
            DimensionSummary {
                key: dimension.key.clone(),
                question: dimension.question.clone(),
                level: dimension
                    .kind
                    .level()
                    .map_or("text", |level| level.as_str())
                    .to_string(),
                distribution: distribution(&dimension.kind, &decided),
                mean: bootstrap.map(|result| result.mean_difference),
                interval: bootstrap.map(|result| result.interval),
                decided: decided.len() as u64,
                split,
                open,
            }
        })
        .collect()
}

/// Items per value in the dimension's order; several options count once each they were kept.
fn distribution(kind: &DimensionKind, decided: &[&DimensionAnswer]) -> Vec<(String, u64)> {
    let count = |matches: &dyn Fn(&DimensionAnswer) -> bool| {
        decided.iter().filter(|answer| matches(answer)).count() as u64
    };
    match kind {
        DimensionKind::Binary => [true, false]
            .into_iter()
            .map(|pass| {
                let answer = DimensionAnswer::Binary(pass);
                (
                    answer_in_words(kind, &answer),
                    count(&|given| *given == answer),
                )
            })
            .collect(),
        DimensionKind::Ordinal { scale } => (1..=scale.len())
            .map(|point| {
                let answer = DimensionAnswer::Number(point as f64);
                (
                    answer_in_words(kind, &answer),
                    count(&|given| *given == answer),
                )
            })
            .collect(),
        DimensionKind::Categorical { options, .. } => options
            .iter()
            .map(|option| {
                let chosen = |given: &DimensionAnswer| {
                    matches!(given, DimensionAnswer::Texts(kept) if kept.contains(option))
                };
                (option.clone(), count(&chosen))
            })
            .collect(),
        DimensionKind::Numeric { .. } | DimensionKind::FreeText { .. } => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_dimension_is_spread_over_its_values_and_averaged_by_level() {
        let rubric: Rubric = serde_json::from_value(json!({"dimensions": [
            {"key": "correct", "question": "Correct?", "kind": "binary"},
            {"key": "helpful", "question": "Helpful?", "kind": "ordinal", "scale": [
                {"label": "Poor", "description": "p"}, {"label": "Fair", "description": "f"},
                {"label": "Good", "description": "g"}]},
            {"key": "issues", "question": "Issues?", "kind": "categorical",
             "options": ["factual", "unsafe"], "multiple": true, "required": false},
            {"key": "score", "question": "Score?", "kind": "numeric", "min": 0, "max": 10}
        ]}))
        .unwrap();
        let item =
            |value: serde_json::Value| -> Consensus { serde_json::from_value(value).unwrap() };
        let items = [
            item(json!({
                "correct": {"state": "decided", "answer": true},
                "helpful": {"state": "decided", "answer": 3.0},
                "issues": {"state": "decided", "answer": ["factual"]},
                "score": {"state": "decided", "answer": 8.0}})),
            item(json!({
                "correct": {"state": "decided", "answer": false},
                "helpful": {"state": "decided", "answer": 1.0},
                "issues": {"state": "open"},
                "score": {"state": "decided", "answer": 4.0}})),
            item(json!({
                "correct": {"state": "split"},
                "helpful": {"state": "decided", "answer": 3.0},
                "issues": {"state": "decided", "answer": ["factual", "unsafe"]},
                "score": {"state": "split"}})),
        ];
        let summary = summarize(&rubric, &items);
        assert_eq!(
            summary[0].distribution,
            vec![("pass".to_string(), 1), ("fail".to_string(), 1)]
        );
        assert_eq!((summary[0].decided, summary[0].split), (2, 1));
        assert_eq!(summary[0].mean, None, "no mean of pass and fail");
        assert_eq!(
            summary[1].distribution,
            vec![
                ("1 (Poor)".to_string(), 1),
                ("2 (Fair)".to_string(), 0),
                ("3 (Good)".to_string(), 2)
            ]
        );
        let mean = summary[1].mean.unwrap();
        assert!((mean - 7.0 / 3.0).abs() < 1e-12);
        let interval = summary[1].interval.unwrap();
        assert!(interval.lower <= mean && mean <= interval.upper);
        assert_eq!(summary[1].level, "ordinal");
        assert_eq!(
            summary[2].distribution,
            vec![("factual".to_string(), 2), ("unsafe".to_string(), 1)]
        );
        assert_eq!(summary[2].open, 1);
        assert_eq!(summary[3].mean, Some(6.0));
        assert!(summary[3].distribution.is_empty());
        assert_eq!(summary[3].split, 1);
    }
}
