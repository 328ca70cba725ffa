//! Metrics over several samples per item: pass@k (Chen et al., 2021, "Evaluating Large
//! Language Models Trained on Code", the unbiased estimator), pass^k (all of k samples
//! correct, as τ-bench reports it), and maj@k (a vote over the extracted answers), each
//! averaged over items with a percentile bootstrap over items for its interval.
//!
//! With n samples of an item of which c are correct:
//! - pass@k = 1 − C(n−c, k) / C(n, k): the chance that at least one of k samples drawn
//!   without replacement is correct. Computed as 1 − Π_{i=n−c+1..n} (1 − k/i), the paper's
//!   numerically stable form.
//! - pass^k = C(c, k) / C(n, k): the chance that all k drawn samples are correct, computed as
//!   Π_{i=0..k−1} (c − i)/(n − i).
//!
//! Items with fewer than k graded samples are left out of that k's figure and counted.

use super::paired::{grouped_bootstrap, ScoreGroup};
use super::{Interval, DEFAULT_CONFIDENCE};
use serde::{Deserialize, Serialize};

/// Bootstrap resamples behind each interval.
const BOOTSTRAP_RESAMPLES: usize = 1000;

/// The unbiased pass@k estimate for one item; `None` when k is 0 or more than n.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    let mut all_wrong = 1.0;
    for i in (n - c + 1)..=n {
        all_wrong *= 1.0 - k as f64 / i as f64;
    }
    Some(1.0 - all_wrong)
}

/// The pass^k estimate for one item (all of k samples correct); `None` when k is 0 or more
/// than n.
pub fn pass_all_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    let mut all_right = 1.0;
    for i in 0..k {
        if c < i + 1 {
            return Some(0.0);
        }
        all_right *= (c - i) as f64 / (n - i) as f64;
    }
    Some(all_right)
}

/// The outcome of a majority vote over extracted answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote {
    /// The most frequent answer; on a tie, the one that reached that count first (as
    /// lm-evaluation-harness's `majority_vote` takes `Counter.most_common`).
    pub answer: String,
    /// Whether another answer had as many votes.
    pub tied: bool,
}

/// The majority of `answers` (samples without an extracted answer are left out); `None` when
/// no sample has one.
pub fn majority_vote<'a>(answers: impl IntoIterator<Item = &'a str>) -> Option<Vote> {
    let mut counts: Vec<(&str, u64)> = Vec::new();
    for answer in answers {
        match counts.iter_mut().find(|(seen, _)| *seen == answer) {
            Some((_, count)) => *count += 1,
            None => counts.push((answer, 1)),
        }
    }
    let best = counts.iter().map(|(_, count)| *count).max()?;
    let mut leaders = counts.iter().filter(|(_, count)| *count == best);
    let (answer, _) = leaders.next()?;
    Some(Vote {
        answer: answer.to_string(),
        tied: leaders.next().is_some(),
    })
}

/// Which metric a row reports; ordered as tables list them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SampleMetric {
    PassAtK,
    PassAllK,
    /// The majority of the first k samples' extracted answers is right.
    MajAtK,
}

impl SampleMetric {
    pub fn label(self, k: u64) -> String {
        match self {
            SampleMetric::PassAtK => format!("pass@{k}"),
            SampleMetric::PassAllK => format!("pass^{k}"),
            SampleMetric::MajAtK => format!("maj@{k}"),
        }
    }

    fn of(self, n: u64, c: u64, k: u64) -> Option<f64> {
        match self {
            SampleMetric::PassAtK => pass_at_k(n, c, k),
            SampleMetric::PassAllK => pass_all_k(n, c, k),
            // From the samples' answers, not their counts: see `majority_metrics`.
            SampleMetric::MajAtK => None,
        }
    }
}

/// One metric at one k over a run's items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SampleMetricRow {
    pub metric: SampleMetric,
    pub k: u64,
    /// The mean over items with at least k graded samples.
    pub value: f64,
    pub interval: Option<Interval>,
    /// Items in the figure, and the graded samples they contributed.
    pub items: u64,
    pub samples: u64,
    /// Items left out for having fewer than k graded samples.
    pub short_items: u64,
    /// maj@k: items whose vote tied (the answer that reached the top count first won).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ties: Option<u64>,
}

/// pass@k and pass^k for every k from 1 to the most samples any item has, from per-item
/// (graded samples, correct samples). The bootstrap is seeded, so a report is reproducible.
pub fn sample_metrics(per_item: &[(u64, u64)], seed: u64) -> Vec<SampleMetricRow> {
    let most = per_item.iter().map(|(n, _)| *n).max().unwrap_or(0);
    let mut rows = Vec::new();
    for metric in [SampleMetric::PassAtK, SampleMetric::PassAllK] {
        for k in 1..=most {
            let scores: Vec<(f64, u64)> = per_item
                .iter()
                .filter_map(|&(n, c)| metric.of(n, c, k).map(|score| (score, n)))
                .collect();
            if scores.is_empty() {
                continue;
            }
            let values: Vec<f64> = scores.iter().map(|(score, _)| *score).collect();
            rows.push(SampleMetricRow {
                metric,
                k,
                value: mean(&values),
                interval: bootstrap_mean(&values, seed ^ k),
                items: values.len() as u64,
                samples: scores.iter().map(|(_, n)| n).sum(),
                short_items: (per_item.len() - values.len()) as u64,
                ties: None,
            });
        }
    }
    rows
}

/// One sample as a majority vote sees it: its extracted answer (`None` when none could be
/// read) and its final verdict (`Some(true)` right, `Some(false)` wrong, `None` undecided).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VotedSample {
    pub answer: Option<String>,
    pub verdict: Option<bool>,
}

impl VotedSample {
    pub fn correct(&self) -> bool {
        self.verdict == Some(true)
    }
}

/// maj@k for every k from 1 to the most samples any item has: for each item with at least k
/// samples, the majority of its first k samples' extracted answers (in repetition order;
/// samples without one are left out of the vote, an item without any counts as wrong) is
/// right when a sample with that answer was graded right. Ties are counted and stated.
pub fn majority_metrics(per_item: &[Vec<VotedSample>], seed: u64) -> Vec<SampleMetricRow> {
    let most = per_item.iter().map(Vec::len).max().unwrap_or(0) as u64;
    let mut rows = Vec::new();
    for k in 1..=most {
        let mut values = Vec::new();
        let mut ties = 0;
        for (correct, tied) in per_item
            .iter()
            .filter_map(|samples| majority_at(samples, k))
        {
            ties += u64::from(tied);
            values.push(if correct { 1.0 } else { 0.0 });
        }
        rows.push(SampleMetricRow {
            metric: SampleMetric::MajAtK,
            k,
            value: mean(&values),
            interval: bootstrap_mean(&values, seed ^ k ^ 0x6d61_6a00),
            items: values.len() as u64,
            samples: values.len() as u64 * k,
            short_items: (per_item.len() - values.len()) as u64,
            ties: Some(ties),
        });
    }
    rows
}

/// One item's maj@k: whether the majority of its first k samples' answers is right, and
/// whether the vote tied; `None` when it has fewer than k samples.
fn majority_at(samples: &[VotedSample], k: u64) -> Option<(bool, bool)> {
    let first = samples.get(..usize::try_from(k).ok()?)?;
    let vote = majority_vote(first.iter().filter_map(|sample| sample.answer.as_deref()));
    let correct = vote.as_ref().is_some_and(|vote| {
        first
            .iter()
            .find(|sample| sample.answer.as_deref() == Some(vote.answer.as_str()))
            .is_some_and(VotedSample::correct)
    });
    Some((correct, vote.is_some_and(|vote| vote.tied)))
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// A 95% percentile bootstrap interval of the mean, resampling items; `None` for fewer than
/// two items.
fn bootstrap_mean(values: &[f64], seed: u64) -> Option<Interval> {
    if values.len() < 2 {
        return None;
    }
    grouped_bootstrap(
        &ScoreGroup::of_scores(values),
        BOOTSTRAP_RESAMPLES,
        DEFAULT_CONFIDENCE,
        seed,
    )
    .map(|result| result.interval)
}

/// The k at which two runs are compared on a metric over samples: 10, 100, … up to half the
/// samples, and the number of samples itself, never below 2 (at k = 1, pass@k is the pass rate
/// the page already tests). A handful of tests, so the page's correction keeps its power.
pub fn compared_ks(samples: u64) -> Vec<u64> {
    let mut ks: Vec<u64> = std::iter::successors(Some(10u64), |k| k.checked_mul(10))
        .take_while(|k| k.saturating_mul(2) <= samples)
        .collect();
    if samples >= 2 {
        ks.push(samples);
    }
    ks
}

/// One item's score on `metric` at `k` from its samples in repetition order: pass@k and
/// pass^k over its decided samples, maj@k over its first k samples' answers (1 or 0). `None`
/// when the item has too few samples for k.
pub fn item_score(metric: SampleMetric, samples: &[VotedSample], k: u64) -> Option<f64> {
    match metric {
        SampleMetric::MajAtK => {
            majority_at(samples, k).map(|(correct, _)| if correct { 1.0 } else { 0.0 })
        }
        SampleMetric::PassAtK | SampleMetric::PassAllK => {
            let decided = samples
                .iter()
                .filter(|sample| sample.verdict.is_some())
                .count() as u64;
            let correct = samples.iter().filter(|sample| sample.correct()).count() as u64;
            metric.of(decided, correct, k)
        }
    }
}

/// Samples an item's score at `k` rests on: its decided samples for pass@k and pass^k, its
/// first k for maj@k.
pub fn samples_used(metric: SampleMetric, samples: &[VotedSample], k: u64) -> u64 {
    match metric {
        SampleMetric::MajAtK => k,
        SampleMetric::PassAtK | SampleMetric::PassAllK => samples
            .iter()
            .filter(|sample| sample.verdict.is_some())
            .count() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C(n, k) as a float, from the product formula (exact for the small cases used here).
    fn choose(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    #[test]
    fn pass_at_k_matches_the_closed_form() {
        for n in 1..=12 {
            for c in 0..=n {
                for k in 1..=n {
                    let closed = 1.0 - choose(n - c, k) / choose(n, k);
                    let estimate = pass_at_k(n, c, k).unwrap();
                    assert!((estimate - closed).abs() < 1e-12, "n={n} c={c} k={k}");
                    let all = choose(c, k) / choose(n, k);
                    assert!((pass_all_k(n, c, k).unwrap() - all).abs() < 1e-12);
                }
            }
        }
        assert_eq!(pass_at_k(5, 2, 6), None, "k above n");
        assert_eq!(pass_at_k(5, 2, 0), None);
    }

    /// Values of the paper's estimator (`1 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))`)
    /// at the paper's n = 200, worked out by hand from the closed form.
    #[test]
    fn pass_at_k_agrees_with_the_papers_estimator_at_n_200() {
        // c = 1: pass@k = k / n exactly.
        assert!((pass_at_k(200, 1, 1).unwrap() - 0.005).abs() < 1e-12);
        assert!((pass_at_k(200, 1, 100).unwrap() - 0.5).abs() < 1e-12);
        // c = 2, k = 10: 1 − (190·189)/(200·199).
        let expected = 1.0 - (190.0 * 189.0) / (200.0 * 199.0);
        assert!((pass_at_k(200, 2, 10).unwrap() - expected).abs() < 1e-12);
        // More than n − k correct: certain.
        assert_eq!(pass_at_k(200, 195, 10), Some(1.0));
        // pass@1 is the plain pass rate.
        assert!((pass_at_k(200, 37, 1).unwrap() - 37.0 / 200.0).abs() < 1e-12);
    }

    #[test]
    fn majority_votes_state_their_ties() {
        let vote = majority_vote(["4", "5", "4"]).unwrap();
        assert_eq!(
            vote,
            Vote {
                answer: "4".into(),
                tied: false
            }
        );
        let tie = majority_vote(["5", "4", "4", "5"]).unwrap();
        assert_eq!(
            tie,
            Vote {
                answer: "5".into(),
                tied: true
            },
            "first to the top count"
        );
        assert!(majority_vote(std::iter::empty()).is_none());
    }

    #[test]
    fn metrics_cover_every_k_and_count_short_items() {
        // Two items with four samples, one with two.
        let rows = sample_metrics(&[(4, 1), (4, 4), (2, 0)], 7);
        let pass_at = |k| {
            rows.iter()
                .find(|row| row.metric == SampleMetric::PassAtK && row.k == k)
                .unwrap()
                .clone()
        };
        assert_eq!(pass_at(1).items, 3);
        assert!((pass_at(1).value - (0.25 + 1.0 + 0.0) / 3.0).abs() < 1e-12);
        assert_eq!(pass_at(4).items, 2);
        assert_eq!(pass_at(4).short_items, 1);
        assert_eq!(pass_at(4).samples, 8);
        assert!((pass_at(4).value - 1.0).abs() < 1e-12);
        let interval = pass_at(1).interval.unwrap();
        assert!(interval.lower <= pass_at(1).value && pass_at(1).value <= interval.upper);
        let all4 = rows
            .iter()
            .find(|row| row.metric == SampleMetric::PassAllK && row.k == 4)
            .unwrap();
        assert!(
            (all4.value - 0.5).abs() < 1e-12,
            "only the all-correct item"
        );
        assert_eq!(
            rows,
            sample_metrics(&[(4, 1), (4, 4), (2, 0)], 7),
            "reproducible"
        );
    }

    fn sample(answer: Option<&str>, correct: bool) -> VotedSample {
        VotedSample {
            answer: answer.map(String::from),
            verdict: Some(correct),
        }
    }

    #[test]
    fn maj_at_k_votes_over_the_first_k_answers_and_states_ties() {
        let items = vec![
            // 4, 4, 5: the majority is right at k = 3; at k = 1 the first answer is.
            vec![
                sample(Some("4"), true),
                sample(Some("5"), false),
                sample(Some("4"), true),
            ],
            // No answer read at first, then two wrong ones.
            vec![
                sample(None, false),
                sample(Some("7"), false),
                sample(Some("7"), false),
            ],
            // A tie at k = 2: the answer that reached the top count first wins (5, wrong).
            vec![sample(Some("5"), false), sample(Some("4"), true)],
        ];
        let rows = majority_metrics(&items, 1);
        let summary: Vec<(String, f64, u64, u64, Option<u64>)> = rows
            .iter()
            .map(|row| {
                (
                    row.metric.label(row.k),
                    row.value,
                    row.items,
                    row.short_items,
                    row.ties,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("maj@1".to_string(), 1.0 / 3.0, 3, 0, Some(0)),
                // Two ties: 4 against 5 (4 came first: right) and 5 against 4 (wrong).
                ("maj@2".to_string(), 1.0 / 3.0, 3, 0, Some(2)),
                ("maj@3".to_string(), 0.5, 2, 1, Some(0)),
            ]
        );
    }
}
