//! Comparing checkpoints on the items their runs share: per-category paired tables, exact
//! McNemar tests, intervals for the difference, a multiple-comparison correction across every
//! test on the page, and the list of items whose verdict changed, regressions first.

use super::sample_compare::SampleMetricTest;
use super::snapshot::{Snapshot, VERDICT_FAIL, VERDICT_PASS};
use crate::ids::IdentityId;
use crate::stats::correction::Correction;
use crate::stats::paired::{mcnemar_exact, paired_cluster_bootstrap, BootstrapResult, CaseGroup};
use crate::stats::proportion::{paired_difference, PairedTable};
use crate::stats::{Interval, DEFAULT_CONFIDENCE};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Significance level for flagging a regression after correction.
pub const ALPHA: f64 = 0.05;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PairedCategory {
    pub category: String,
    pub table: PairedTable,
    /// Identities of the category in both runs (graded or not).
    pub shared: u64,
    pub baseline_rate: Option<f64>,
    pub candidate_rate: Option<f64>,
    /// Candidate minus baseline on items graded pass/fail in both.
    pub delta: Option<f64>,
    pub interval: Option<Interval>,
    pub p_value: f64,
    /// After the page's correction across all its tests.
    pub adjusted_p: f64,
    /// With repetitions: the paired bootstrap over cases that replaces McNemar's test and
    /// Newcombe's interval (which would treat a case's repetitions as independent items).
    pub cluster_bootstrap: Option<BootstrapResult>,
}

impl PairedCategory {
    fn finish(&mut self) {
        let t = &self.table;
        let n = t.total();
        self.baseline_rate = (n > 0).then(|| (t.both_pass + t.pass_to_fail) as f64 / n as f64);
        self.candidate_rate = (n > 0).then(|| (t.both_pass + t.fail_to_pass) as f64 / n as f64);
        self.delta = t.delta();
        match self.cluster_bootstrap {
            Some(bootstrap) => {
                self.interval = Some(bootstrap.interval);
                self.p_value = bootstrap.p_value;
            }
            None => {
                self.interval = paired_difference(t, DEFAULT_CONFIDENCE);
                self.p_value = mcnemar_exact(t.pass_to_fail, t.fail_to_pass);
            }
        }
        self.adjusted_p = self.p_value;
    }

    /// The test behind `p_value` and `interval`, in words.
    pub fn method(&self) -> &'static str {
        if self.cluster_bootstrap.is_some() {
            "paired bootstrap over cases"
        } else {
            "exact McNemar"
        }
    }

    /// Significantly worse on the candidate, after correction.
    pub fn is_regression(&self) -> bool {
        self.adjusted_p < ALPHA && self.table.pass_to_fail > self.table.fail_to_pass
    }

    pub fn is_improvement(&self) -> bool {
        self.adjusted_p < ALPHA && self.table.fail_to_pass > self.table.pass_to_fail
    }
}

/// One candidate against the baseline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PairedComparison {
    pub overall: PairedCategory,
    pub categories: Vec<PairedCategory>,
    /// Identities whose verdict differs in any way (including to or from error or uncertain).
    pub changed: u64,
    /// With several samples per item: pass@k, pass^k and maj@k compared at a few k (see
    /// [`super::sample_compare`]), in the same correction family as the tests above.
    #[serde(default)]
    pub sample_metrics: Vec<SampleMetricTest>,
    /// For likelihood evals: the paired t-test on the right answer's log-likelihood per item
    /// (a finer signal than right or wrong; not in the correction family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<super::likelihood::PairedValueTest>,
    /// For rolling-likelihood evals: the paired bootstrap of bits per byte over the documents
    /// both runs scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling: Option<super::rolling::PairedBitsPerByte>,
}

/// Why two runs cannot be paired.
pub fn unpairable_reason(baseline: &Snapshot, candidate: &Snapshot) -> Option<String> {
    (baseline.identity_hash != candidate.identity_hash || baseline.len() != candidate.len()).then(|| {
        format!(
            "the runs do not share one list of result identities ({} vs {}): compare runs launched with the same dataset revision, case ids and repetitions",
            baseline.len(),
            candidate.len()
        )
    })
}

/// Pairs two snapshots position by position. `Err` explains why they cannot be paired.
pub fn compare_snapshots(
    baseline: &Snapshot,
    candidate: &Snapshot,
) -> Result<PairedComparison, String> {
    if let Some(reason) = unpairable_reason(baseline, candidate) {
        return Err(reason);
    }
    let category_count = baseline.header.categories.len();
    let mut categories: Vec<PairedCategory> = baseline
        .header
        .categories
        .iter()
        .map(|name| PairedCategory {
            category: name.clone(),
            ..PairedCategory::default()
        })
        .collect();
    let mut changed = 0;
    for ((&base, &cand), &category) in baseline
        .verdicts
        .iter()
        .zip(&candidate.verdicts)
        .zip(&baseline.categories)
    {
        changed += u64::from(base != cand);
        let Some(entry) = categories.get_mut(usize::from(category)) else {
            continue;
        };
        entry.shared += 1;
        let table = &mut entry.table;
        match (base, cand) {
            (VERDICT_PASS, VERDICT_PASS) => table.both_pass += 1,
            (VERDICT_PASS, VERDICT_FAIL) => table.pass_to_fail += 1,
            (VERDICT_FAIL, VERDICT_PASS) => table.fail_to_pass += 1,
            (VERDICT_FAIL, VERDICT_FAIL) => table.both_fail += 1,
            _ => {}
        }
    }
    let mut overall = PairedCategory {
        category: "all".into(),
        ..PairedCategory::default()
    };
    if let Some(groups) = case_groups(baseline, candidate) {
        for (category, groups) in categories.iter_mut().zip(&groups.per_category) {
            category.cluster_bootstrap = bootstrap_cases(groups);
        }
        overall.cluster_bootstrap = bootstrap_cases(&groups.overall);
    }
    for category in &mut categories {
        overall.table.add(&category.table);
        overall.shared += category.shared;
        category.finish();
    }
    overall.finish();
    if category_count == 1 && categories[0].category.is_empty() {
        categories.clear();
    }
    categories.sort_by(|a, b| b.shared.cmp(&a.shared).then(a.category.cmp(&b.category)));
    Ok(PairedComparison {
        overall,
        categories,
        changed,
        sample_metrics: Vec::new(),
        likelihood: None,
        rolling: None,
    })
}

/// Resamples per cluster bootstrap; the seed is fixed so a page shows the same numbers on
/// every view.
pub(super) const BOOTSTRAP_RESAMPLES: usize = 2_000;
pub(super) const BOOTSTRAP_SEED: u64 = 20_240_601;

fn bootstrap_cases(groups: &HashMap<(i64, u64), u64>) -> Option<BootstrapResult> {
    let mut groups: Vec<CaseGroup> = groups
        .iter()
        .map(|(&(difference, paired), &cases)| CaseGroup {
            difference,
            paired,
            cases,
        })
        .collect();
    // A stable order, so the seeded draws do not depend on the hash map's.
    groups.sort();
    paired_cluster_bootstrap(
        &groups,
        BOOTSTRAP_RESAMPLES,
        DEFAULT_CONFIDENCE,
        BOOTSTRAP_SEED,
    )
}

/// Per category (the baseline's codes) and overall: how many cases contribute each
/// (candidate passes − baseline passes, repetitions graded pass/fail on both sides).
struct CaseGroups {
    per_category: Vec<HashMap<(i64, u64), u64>>,
    overall: HashMap<(i64, u64), u64>,
}

/// Groups the cases of two snapshots with repetitions; `None` when either lacks the checked
/// repetition-by-repetition layout (then identities are paired one by one).
fn case_groups(baseline: &Snapshot, candidate: &Snapshot) -> Option<CaseGroups> {
    let cases = baseline
        .header
        .cases
        .filter(|&c| Some(c) == candidate.header.cases)? as usize;
    let repetitions = baseline.len() / cases;
    let mut groups = CaseGroups {
        per_category: vec![HashMap::new(); baseline.header.categories.len()],
        overall: HashMap::new(),
    };
    for case in 0..cases {
        let (mut difference, mut paired) = (0i64, 0u64);
        for repetition in 0..repetitions {
            let at = repetition * cases + case;
            let (base, cand) = (baseline.verdicts[at], candidate.verdicts[at]);
            let graded = |v: u8| v == VERDICT_PASS || v == VERDICT_FAIL;
            if graded(base) && graded(cand) {
                paired += 1;
                difference += i64::from(cand == VERDICT_PASS) - i64::from(base == VERDICT_PASS);
            }
        }
        if paired == 0 {
            continue;
        }
        *groups.overall.entry((difference, paired)).or_default() += 1;
        if let Some(category) = groups
            .per_category
            .get_mut(usize::from(baseline.categories[case]))
        {
            *category.entry((difference, paired)).or_default() += 1;
        }
    }
    Some(groups)
}

/// Adjusts every test on the page together: each candidate's overall test, its per-category
/// tests and its tests of metrics over samples form one family.
pub fn apply_correction(comparisons: &mut [PairedComparison], correction: Correction) {
    let mut raw = Vec::new();
    for comparison in comparisons.iter() {
        raw.push(comparison.overall.p_value);
        raw.extend(comparison.categories.iter().map(|c| c.p_value));
        raw.extend(comparison.sample_metrics.iter().map(|t| t.p_value));
    }
    let adjusted = correction.adjust(&raw);
    let mut values = adjusted.into_iter();
    for comparison in comparisons.iter_mut() {
        comparison.overall.adjusted_p = values.next().unwrap_or(1.0);
        for category in &mut comparison.categories {
            category.adjusted_p = values.next().unwrap_or(1.0);
        }
        for test in &mut comparison.sample_metrics {
            test.adjusted_p = values.next().unwrap_or(1.0);
        }
    }
}

/// How an item's verdict changed, in the order the diff lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// pass → fail: a regression.
    Regression,
    /// pass → uncertain, error or pending: lost a pass, not yet a fail.
    LostPass,
    /// fail → pass.
    Improvement,
    /// Any other change (fail → error, error → pass, …).
    Other,
}

impl Change {
    pub fn of(baseline: u8, candidate: u8) -> Option<Change> {
        if baseline == candidate {
            return None;
        }
        Some(match (baseline, candidate) {
            (VERDICT_PASS, VERDICT_FAIL) => Change::Regression,
            (VERDICT_PASS, _) => Change::LostPass,
            (VERDICT_FAIL, VERDICT_PASS) => Change::Improvement,
            _ => Change::Other,
        })
    }

    pub fn parse(text: &str) -> Option<Change> {
        [
            Change::Regression,
            Change::LostPass,
            Change::Improvement,
            Change::Other,
        ]
        .into_iter()
        .find(|change| change.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Change::Regression => "regression",
            Change::LostPass => "lost_pass",
            Change::Improvement => "improvement",
            Change::Other => "other",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Change::Regression => "pass → fail",
            Change::LostPass => "pass → not graded",
            Change::Improvement => "fail → pass",
            Change::Other => "other change",
        }
    }
}

/// Which changed items to list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffFilter {
    pub category: Option<String>,
    pub change: Option<Change>,
    /// Outcome name (ok, truncated, …) on either side.
    pub outcome: Option<String>,
}

/// A changed item: its position in both snapshots and both work item ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangedItem {
    pub position: usize,
    pub change: Change,
    pub baseline_id: IdentityId,
    pub candidate_id: IdentityId,
}

/// Every changed item passing the filter, regressions first, each kind in identity order.
/// One pass over the columns (about 10 ms per million identities); no text is read.
pub fn changed_items(
    baseline: &Snapshot,
    candidate: &Snapshot,
    filter: &DiffFilter,
) -> Vec<ChangedItem> {
    let category = match &filter.category {
        Some(name) => match baseline.category_code(name) {
            Some(code) => Some(code),
            None => return Vec::new(),
        },
        None => None,
    };
    let outcome = filter
        .outcome
        .as_deref()
        .map(|name| super::snapshot::outcome_code(Some(name)));
    let mut items: Vec<ChangedItem> = Vec::new();
    for position in 0..baseline.len().min(candidate.len()) {
        let (Some(&base), Some(&cand)) = (
            baseline.verdicts.get(position),
            candidate.verdicts.get(position),
        ) else {
            continue;
        };
        let Some(change) = Change::of(base, cand) else {
            continue;
        };
        if filter.change.is_some_and(|wanted| wanted != change) {
            continue;
        }
        if category.is_some_and(|code| baseline.categories.get(position) != Some(&code)) {
            continue;
        }
        if let Some(code) = outcome {
            if baseline.outcomes.get(position) != Some(&code)
                && candidate.outcomes.get(position) != Some(&code)
            {
                continue;
            }
        }
        items.push(ChangedItem {
            position,
            change,
            baseline_id: baseline
                .identity_ids
                .get(position)
                .copied()
                .unwrap_or_default(),
            candidate_id: candidate
                .identity_ids
                .get(position)
                .copied()
                .unwrap_or_default(),
        });
    }
    // Stable: identity order within each kind.
    items.sort_by_key(|item| item.change);
    items
}
