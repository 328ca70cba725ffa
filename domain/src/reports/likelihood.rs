//! What a likelihood eval's report shows beside its pass rate: lm-eval's `acc`, `acc_norm` and
//! `acc_bytes`, the probability the model puts on the right answer, how often the right answer
//! is the greedy continuation, and the right answer's mean log-likelihood, each with a 95%
//! interval (mean ± z · standard error, the sample standard deviation over √n as lm-eval
//! reports it). Comparisons add a paired test on the right answer's log-likelihood per item.
//!
//! Pure: the scores come from the store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::likelihood::{ChoiceScores, Selection};
use crate::stats::{two_sided_z, Interval, DEFAULT_CONFIDENCE};

/// One metric over a run's scored items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LikelihoodMetric {
    /// `acc`, `acc_norm`, `acc_bytes`, `p_right`, `right_is_greedy`, `right_logprob`.
    pub name: String,
    pub what: String,
    /// `None` without items.
    pub mean: Option<f64>,
    /// Sample standard deviation over √n (`None` below two items).
    pub stderr: Option<f64>,
    pub interval: Option<Interval>,
    /// Items it is over (those with a right answer).
    pub items: u64,
}

/// A likelihood run's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LikelihoodReport {
    /// Scored answers (every repetition).
    pub scored: u64,
    /// Scored answers whose item names no right choice (left out of the metrics).
    pub without_answer: u64,
    /// Choices whose first token began inside the context (the boundary fell in a token).
    pub split_tokens: u64,
    /// Which reading the verdicts follow.
    pub graded_by: String,
    pub metrics: Vec<LikelihoodMetric>,
}

/// The metrics over every scored answer of a run.
pub fn likelihood_report(scores: &[ChoiceScores], graded_by: Selection) -> LikelihoodReport {
    let with_answer: Vec<&ChoiceScores> = scores.iter().filter(|s| !s.gold.is_empty()).collect();
    let as_number = |flag: bool| if flag { 1.0 } else { 0.0 };
    let mut metrics: Vec<LikelihoodMetric> = Selection::ALL
        .iter()
        .map(|&selection| {
            let values: Vec<f64> = with_answer
                .iter()
                .filter_map(|s| s.correct(selection))
                .map(as_number)
                .collect();
            metric(
                selection.metric(),
                match selection {
                    Selection::Raw => "the most likely choice is right",
                    Selection::Chars => "the most likely per character is right",
                    Selection::Bytes => "the most likely per byte is right",
                },
                &values,
            )
        })
        .collect();
    let probabilities: Vec<f64> = with_answer
        .iter()
        .filter_map(|s| s.gold_probability())
        .collect();
    metrics.push(metric(
        "p_right",
        "probability on the right answer among the choices",
        &probabilities,
    ));
    let greedy: Vec<f64> = with_answer
        .iter()
        .filter_map(|s| s.gold_greedy())
        .map(as_number)
        .collect();
    metrics.push(metric(
        "right_is_greedy",
        "the right answer is the greedy continuation",
        &greedy,
    ));
    let logprobs: Vec<f64> = with_answer
        .iter()
        .filter_map(|s| s.gold_logprob())
        .collect();
    metrics.push(metric(
        "right_logprob",
        "log-likelihood of the right answer",
        &logprobs,
    ));
    LikelihoodReport {
        scored: scores.len() as u64,
        without_answer: (scores.len() - with_answer.len()) as u64,
        split_tokens: scores
            .iter()
            .flat_map(|s| &s.choices)
            .filter(|choice| choice.score.split_token)
            .count() as u64,
        graded_by: graded_by.metric().into(),
        metrics,
    }
}

fn metric(name: &str, what: &str, values: &[f64]) -> LikelihoodMetric {
    let (mean, stderr) = mean_and_stderr(values);
    let z = two_sided_z(DEFAULT_CONFIDENCE).expect("the default level is valid");
    let mean = (!values.is_empty()).then_some(mean);
    LikelihoodMetric {
        name: name.into(),
        what: what.into(),
        mean,
        stderr,
        interval: mean.zip(stderr).map(|(mean, stderr)| Interval {
            lower: mean - z * stderr,
            upper: mean + z * stderr,
        }),
        items: values.len() as u64,
    }
}

/// The mean and its standard error (sample standard deviation over √n).
fn mean_and_stderr(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len();
    if n == 0 {
        return (f64::NAN, None);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, None);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, Some((variance / n as f64).sqrt()))
}

/// A paired test of a per-item value between two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PairedValueTest {
    pub name: String,
    /// Items both runs scored.
    pub items: u64,
    /// Mean of candidate minus baseline.
    pub mean_difference: f64,
    pub interval: Option<Interval>,
    /// Two-sided paired t-test.
    pub p_value: Option<f64>,
}

/// The paired t-test of the right answer's log-likelihood: per case (its repetitions
/// averaged), candidate minus baseline, over the cases both runs scored. `None` when they share
/// fewer than two.
pub fn paired_right_logprob(
    baseline: &[(String, i64, ChoiceScores)],
    candidate: &[(String, i64, ChoiceScores)],
) -> Option<PairedValueTest> {
    fn per_case(rows: &[(String, i64, ChoiceScores)]) -> BTreeMap<&str, f64> {
        let mut sums: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
        for (case, _, scores) in rows {
            if let Some(logprob) = scores.gold_logprob() {
                let entry = sums.entry(case.as_str()).or_default();
                entry.0 += logprob;
                entry.1 += 1;
            }
        }
        sums.into_iter()
            .map(|(case, (sum, count))| (case, sum / f64::from(count)))
            .collect()
    }
    let before = per_case(baseline);
    let after = per_case(candidate);
    let differences: Vec<f64> = after
        .iter()
        .filter_map(|(case, value)| before.get(case).map(|old| value - old))
        .collect();
    let (mean, stderr) = mean_and_stderr(&differences);
    let stderr = stderr?;
    let freedom = (differences.len() - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, freedom).ok()?;
    let critical = t.inverse_cdf(0.5 + DEFAULT_CONFIDENCE / 2.0);
    let p_value = if stderr > 0.0 {
        Some((2.0 * (1.0 - t.cdf((mean / stderr).abs()))).clamp(0.0, 1.0))
    } else {
        Some(if mean == 0.0 { 1.0 } else { 0.0 })
    };
    Some(PairedValueTest {
        name: "right_logprob".into(),
        items: differences.len() as u64,
        mean_difference: mean,
        interval: Some(Interval {
            lower: mean - critical * stderr,
            upper: mean + critical * stderr,
        }),
        p_value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(logprobs: &[f64], gold: usize) -> ChoiceScores {
        let texts: Vec<String> = (0..logprobs.len()).map(|i| "x".repeat(i + 1)).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        ChoiceScores::for_tests(logprobs, &texts, vec![gold])
    }

    #[test]
    fn accuracies_and_the_probability_on_the_right_answer() {
        // Item 1: raw picks choice 0 (right); per char choice 1 (-1.2/2 = -0.6 > -0.8).
        // Item 2: both pick choice 1 (wrong).
        let runs = [scores(&[-0.8, -1.2], 0), scores(&[-3.0, -0.5], 0)];
        let report = likelihood_report(&runs, Selection::Raw);
        let get = |name: &str| report.metrics.iter().find(|m| m.name == name).unwrap();
        assert_eq!(get("acc").mean, Some(0.5));
        assert_eq!(get("acc_norm").mean, Some(0.0));
        assert_eq!(get("acc").items, 2);
        let p_first = 1.0 / (1.0 + (-0.4f64).exp());
        let p_second = 1.0 / (1.0 + (2.5f64).exp());
        assert!((get("p_right").mean.unwrap() - (p_first + p_second) / 2.0).abs() < 1e-12);
        assert_eq!(get("right_is_greedy").mean, Some(0.5));
        assert_eq!(get("right_logprob").mean, Some((-0.8 - 3.0) / 2.0));
        // No scored item yet: no mean (and the report still reads back).
        let empty = likelihood_report(&[], Selection::Raw);
        assert!(empty.metrics.iter().all(|metric| metric.mean.is_none()));
        let json = serde_json::to_string(&empty).unwrap();
        assert_eq!(
            serde_json::from_str::<LikelihoodReport>(&json).unwrap(),
            empty
        );
        // lm-eval's standard error: sample sd over √n; for acc [1, 0]: sd 0.7071, se 0.5.
        assert!((get("acc").stderr.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(report.scored, 2);
        assert_eq!(report.graded_by, "acc");
    }

    #[test]
    fn the_paired_test_on_the_right_answers_log_likelihood() {
        let rows = |values: &[f64]| -> Vec<(String, i64, ChoiceScores)> {
            values
                .iter()
                .enumerate()
                .map(|(i, &v)| (format!("c{i}"), 0, scores(&[v, -5.0], 0)))
                .collect()
        };
        let baseline = rows(&[-2.0, -2.0, -2.0, -2.0]);
        let candidate = rows(&[-1.0, -1.5, -0.5, -1.0]);
        let test = paired_right_logprob(&baseline, &candidate).unwrap();
        assert_eq!(test.items, 4);
        assert_eq!(test.mean_difference, 1.0);
        // Differences 1, 0.5, 1.5, 1: sd 0.408, se 0.204, t = 4.90 on 3 degrees of freedom:
        // two-sided p = 0.0163 (from the t distribution's closed form for 3 degrees).
        assert!((test.p_value.unwrap() - 0.01628).abs() < 1e-4, "{test:?}");
        let interval = test.interval.unwrap();
        assert!(interval.lower > 0.0 && interval.upper < 2.0);
        // Cases only one run scored are left out; under two shared cases there is no test.
        assert!(paired_right_logprob(&baseline[..1], &candidate).is_none());
    }
}
