//! Comparing two runs with several samples per item on pass@k, pass^k and maj@k.
//!
//! Items are paired by case and turn; an item enters a test at k only when both runs can score
//! it there. The k tested follow what the items reach (the median of the samples both runs
//! decided), so one item sampled more often cannot set them. A conversation's turns are not
//! independent, so the unit of every test is the case: its turns' differences are summed.
//! - The interval is a percentile bootstrap over cases of the mean per-item difference.
//! - The p-value is exact McNemar when every case's difference is −1, 0 or +1 on one item
//!   (maj@k always, pass@k and pass^k at k = n); otherwise a sign-flip permutation test of the
//!   case totals. A bootstrap p-value would call a handful of same-direction changes
//!   significant.

use super::compare::{ALPHA, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};
use crate::stats::paired::{
    grouped_bootstrap, mcnemar_exact, sign_flip_test, BootstrapResult, ScoreGroup,
};
use crate::stats::sampling::{compared_ks, item_score, samples_used, SampleMetric, VotedSample};
use crate::stats::DEFAULT_CONFIDENCE;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// A metric over samples compared on the cases both runs can score at that k.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SampleMetricTest {
    pub metric: SampleMetric,
    pub k: u64,
    /// Items (case and turn) in the test, and the cases they belong to.
    pub items: u64,
    pub cases: u64,
    /// Samples each side's scores rest on.
    pub baseline_samples: u64,
    pub candidate_samples: u64,
    pub baseline: f64,
    pub candidate: f64,
    /// The interval of the difference (bootstrap over cases).
    pub bootstrap: Option<BootstrapResult>,
    /// "exact McNemar" or "sign-flip permutation over cases".
    pub method: String,
    pub p_value: f64,
    pub adjusted_p: f64,
}

impl SampleMetricTest {
    pub fn label(&self) -> String {
        self.metric.label(self.k)
    }

    pub fn difference(&self) -> f64 {
        self.candidate - self.baseline
    }

    /// Significantly lower on the candidate, after correction.
    pub fn is_regression(&self) -> bool {
        self.adjusted_p < ALPHA && self.difference() < 0.0
    }

    pub fn is_improvement(&self) -> bool {
        self.adjusted_p < ALPHA && self.difference() > 0.0
    }
}

/// What a comparison of metrics over samples reads of one run: each item's samples (keyed by
/// case id and turn) in repetition order, with their answers and final verdicts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunSamples {
    pub items: HashMap<(String, i64), Vec<VotedSample>>,
}

/// One item both runs sampled: its (case id, turn), the baseline's samples, the candidate's.
type SharedItem<'a> = (&'a (String, i64), &'a [VotedSample], &'a [VotedSample]);

/// pass@k, pass^k and maj@k of two runs compared at the k [`compared_ks`] gives for the median
/// number of samples both runs decided per item; empty with one sample per item. Adjusted
/// p-values are set by the page's correction.
pub fn compare_sample_metrics(
    baseline: &RunSamples,
    candidate: &RunSamples,
) -> Vec<SampleMetricTest> {
    let mut shared: Vec<SharedItem<'_>> = baseline
        .items
        .iter()
        .filter_map(|(key, base)| Some((key, &base[..], &candidate.items.get(key)?[..])))
        .collect();
    // A stable order, so the seeded draws do not depend on the hash maps'.
    shared.sort_by(|a, b| a.0.cmp(b.0));
    let decided = |samples: &[VotedSample]| {
        samples
            .iter()
            .filter(|sample| sample.verdict.is_some())
            .count() as u64
    };
    let mut reach: Vec<u64> = shared
        .iter()
        .map(|(_, base, cand)| decided(base).min(decided(cand)))
        .collect();
    reach.sort_unstable();
    let Some(&median) = reach.get(reach.len() / 2) else {
        return Vec::new();
    };
    let mut tests = Vec::new();
    for k in compared_ks(median) {
        for (offset, metric) in [
            SampleMetric::PassAtK,
            SampleMetric::PassAllK,
            SampleMetric::MajAtK,
        ]
        .into_iter()
        .enumerate()
        {
            let seed = BOOTSTRAP_SEED ^ k ^ ((offset as u64) << 32);
            tests.extend(test_at(metric, k, &shared, seed));
        }
    }
    tests
}

/// One metric at one k over the items both runs can score there.
fn test_at(
    metric: SampleMetric,
    k: u64,
    shared: &[SharedItem<'_>],
    seed: u64,
) -> Option<SampleMetricTest> {
    // Per case: (summed difference, items, summed baseline, summed candidate).
    let mut cases: BTreeMap<&str, (f64, u64, f64, f64)> = BTreeMap::new();
    let (mut baseline_samples, mut candidate_samples) = (0, 0);
    for ((case_id, _), base, cand) in shared {
        let (Some(base_score), Some(cand_score)) =
            (item_score(metric, base, k), item_score(metric, cand, k))
        else {
            continue;
        };
        let case = cases.entry(case_id.as_str()).or_default();
        case.0 += cand_score - base_score;
        case.1 += 1;
        case.2 += base_score;
        case.3 += cand_score;
        baseline_samples += samples_used(metric, base, k);
        candidate_samples += samples_used(metric, cand, k);
    }
    let items: u64 = cases.values().map(|case| case.1).sum();
    if items == 0 {
        return None;
    }
    let total = |pick: fn(&(f64, u64, f64, f64)) -> f64| cases.values().map(pick).sum::<f64>();
    let baseline = total(|case| case.2) / items as f64;
    let candidate = total(|case| case.3) / items as f64;
    let bootstrap = grouped_bootstrap(
        &case_groups(cases.values().map(|case| (case.0, case.1))),
        BOOTSTRAP_RESAMPLES,
        DEFAULT_CONFIDENCE,
        seed,
    );
    let unit_differences = cases
        .values()
        .all(|case| case.1 == 1 && [-1.0, 0.0, 1.0].contains(&case.0));
    let (method, p_value) = if unit_differences {
        let worse = cases.values().filter(|case| case.0 < 0.0).count() as u64;
        let better = cases.values().filter(|case| case.0 > 0.0).count() as u64;
        ("exact McNemar", mcnemar_exact(worse, better))
    } else {
        let mut magnitudes: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
        for case in cases.values() {
            let entry = magnitudes
                .entry(case.0.abs().to_bits())
                .or_insert((case.0.abs(), 0));
            entry.1 += 1;
        }
        let groups: Vec<(f64, u64)> = magnitudes.into_values().collect();
        let observed = total(|case| case.0);
        (
            "sign-flip permutation over cases",
            sign_flip_test(&groups, observed, sign_flips(groups.len()), seed ^ 0x5f11),
        )
    };
    Some(SampleMetricTest {
        metric,
        k,
        items,
        cases: cases.len() as u64,
        baseline_samples,
        candidate_samples,
        baseline,
        candidate,
        bootstrap,
        method: method.to_string(),
        p_value,
        adjusted_p: p_value,
    })
}

/// Binomial draws one permutation test may spend, over all its groups.
const SIGN_FLIP_DRAWS: usize = 2_000_000;

/// Resamples for a sign-flip test over `groups` distinct magnitudes: many when there are few
/// (a p-value can go no lower than one over the resamples, and a page corrects over dozens of
/// tests), never fewer than the bootstrap's.
fn sign_flips(groups: usize) -> usize {
    (SIGN_FLIP_DRAWS / groups.max(1)).clamp(BOOTSTRAP_RESAMPLES, 100_000)
}

/// Cases grouped by (summed difference, items), in a stable order.
fn case_groups(cases: impl Iterator<Item = (f64, u64)>) -> Vec<ScoreGroup> {
    let mut counts: BTreeMap<(u64, u64), (f64, u64, u64)> = BTreeMap::new();
    for (difference, items) in cases {
        let entry = counts
            .entry((difference.to_bits(), items))
            .or_insert((difference, items, 0));
        entry.2 += 1;
    }
    counts
        .into_values()
        .map(|(score, weight, cases)| ScoreGroup {
            score,
            weight: weight as f64,
            cases,
        })
        .collect()
}
