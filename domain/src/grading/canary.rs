//! The drift canary of a judge version: before a new version of a judge is trusted, it
//! re-grades a fixed reference set (the items its previous version graded that humans also
//! labelled, oldest first, at most [`REFERENCE_ITEMS`]), and the drift report says how often the
//! new version agrees with the old one's verdicts and with the humans, against the old one's own
//! record on the same items. A drop beyond the thresholds is drift, which raises an alert.
//!
//! Pure: the store picks the items, the engine asks the judge.

use serde::{Deserialize, Serialize};

use super::calibration::cohen_kappa_binary;

/// Most items one canary re-grades.
pub const REFERENCE_ITEMS: usize = 200;
/// Fewest reference items a report is judged on; with fewer it is shown but never drift.
pub const MIN_REFERENCE_ITEMS: u64 = 20;
/// New and old verdicts must agree on at least this share of the reference set.
pub const MIN_AGREEMENT_WITH_OLD: f64 = 0.85;
/// The new version's accuracy against humans may fall at most this far below the old one's.
pub const MAX_ACCURACY_DROP: f64 = 0.05;

/// One reference item: what the old version said, what the new one says, and the humans'
/// verdict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CanaryItem {
    pub old_pass: bool,
    /// `None`: the new version gave no verdict (a judge failure).
    pub new_pass: Option<bool>,
    pub human_pass: bool,
}

/// What the canary found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriftReport {
    /// Reference items re-graded.
    pub items: u64,
    /// Items the new version gave no verdict on.
    pub failures: u64,
    /// Share of the reference items where the new verdict equals the old (a failure counts as
    /// a disagreement).
    pub agreement_with_old: Option<f64>,
    /// Cohen's kappa between old and new verdicts, over the items both judged.
    pub kappa_with_old: Option<f64>,
    /// Accuracy against the humans' verdicts (a failure counts as wrong).
    pub old_accuracy: Option<f64>,
    pub new_accuracy: Option<f64>,
    /// Why the new version drifted; empty when it did not.
    pub drift: Vec<String>,
}

impl DriftReport {
    pub fn drifted(&self) -> bool {
        !self.drift.is_empty()
    }

    /// One line for an alert or a page: agreement with the old version and accuracies.
    pub fn summary(&self) -> String {
        let percent = |value: Option<f64>| {
            value.map_or_else(|| "n/a".to_string(), |v| format!("{:.1}%", v * 100.0))
        };
        format!(
            "on {} reference items: {} agree with the previous version; accuracy against humans {} (was {}); {} judge failures",
            self.items,
            percent(self.agreement_with_old),
            percent(self.new_accuracy),
            percent(self.old_accuracy),
            self.failures
        )
    }
}

/// A reference item as the store gives it: the texts the old version judged and the humans
/// labelled, with both verdicts.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceItem {
    pub work_item_id: i64,
    pub input: String,
    pub target: String,
    pub output: String,
    pub old_pass: bool,
    pub human_pass: bool,
}

/// A judge version's canary as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgeCanary {
    pub judge_id: i64,
    /// The previous version it is compared with, as a grader id (`judge:name@1`).
    pub baseline: String,
    /// `running`, `done`, `failed` or `skipped` (made before canaries existed).
    pub state: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// The reference set re-graded: identity ids, oldest first.
    pub reference_items: Vec<i64>,
    pub report: Option<DriftReport>,
    /// Why the canary could not run (the judge's endpoint was down, say).
    pub error: Option<String>,
}

impl JudgeCanary {
    /// A few words on the canary, as the version is chosen: `canary: 94.0% agree with
    /// judge:qa@1`, `canary running`, `DRIFTED from judge:qa@1`, `canary failed`.
    pub fn note(&self) -> String {
        match (&self.report, self.state.as_str()) {
            (Some(report), _) if report.drifted() => format!("DRIFTED from {}", self.baseline),
            (Some(report), _) if report.items < MIN_REFERENCE_ITEMS && report.items > 0 => format!(
                "canary: {} items of {} checked by humans, too few to call",
                report.items, self.baseline
            ),
            (Some(report), _) => match report.agreement_with_old {
                Some(agreement) => format!(
                    "canary: {:.1}% agree with {} on {} items",
                    agreement * 100.0,
                    self.baseline,
                    report.items
                ),
                None => format!("canary: {} graded nothing humans checked", self.baseline),
            },
            (None, "running") => "canary running".to_string(),
            (None, "skipped") => "no canary (made before canaries)".to_string(),
            (None, _) => "canary failed".to_string(),
        }
    }
}

/// The drift report of `items`.
pub fn drift_report(items: &[CanaryItem]) -> DriftReport {
    let count = items.len() as u64;
    let share = |n: usize| (count > 0).then(|| n as f64 / count as f64);
    let agreeing = items
        .iter()
        .filter(|item| item.new_pass == Some(item.old_pass))
        .count();
    let old_right = items
        .iter()
        .filter(|item| item.old_pass == item.human_pass)
        .count();
    let new_right = items
        .iter()
        .filter(|item| item.new_pass == Some(item.human_pass))
        .count();
    let kappa_with_old = cohen_kappa_binary(
        items
            .iter()
            .filter_map(|item| Some((item.old_pass, item.new_pass?))),
    );
    let mut report = DriftReport {
        items: count,
        failures: items.iter().filter(|item| item.new_pass.is_none()).count() as u64,
        agreement_with_old: share(agreeing),
        kappa_with_old,
        old_accuracy: share(old_right),
        new_accuracy: share(new_right),
        drift: Vec::new(),
    };
    if count < MIN_REFERENCE_ITEMS {
        return report;
    }
    if let Some(agreement) = report
        .agreement_with_old
        .filter(|a| *a < MIN_AGREEMENT_WITH_OLD)
    {
        report.drift.push(format!(
            "agrees with the previous version on {:.1}% of the reference items (at least {:.0}% expected)",
            agreement * 100.0,
            MIN_AGREEMENT_WITH_OLD * 100.0
        ));
    }
    if let (Some(new), Some(old)) = (report.new_accuracy, report.old_accuracy) {
        if old - new > MAX_ACCURACY_DROP {
            report.drift.push(format!(
                "is right against humans on {:.1}% of them, {:.1} points below the previous version",
                new * 100.0,
                (old - new) * 100.0
            ));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(pattern: &[(bool, Option<bool>, bool)], times: usize) -> Vec<CanaryItem> {
        pattern
            .iter()
            .cycle()
            .take(pattern.len() * times)
            .map(|&(old_pass, new_pass, human_pass)| CanaryItem {
                old_pass,
                new_pass,
                human_pass,
            })
            .collect()
    }

    #[test]
    fn a_version_that_agrees_and_is_as_right_has_not_drifted() {
        // 10 items ×3: the new version differs from the old once in ten, where the old was
        // wrong and the new right.
        let pattern = [
            (true, Some(true), true),
            (true, Some(true), true),
            (false, Some(false), false),
            (false, Some(false), false),
            (true, Some(true), true),
            (false, Some(false), false),
            (true, Some(true), false),
            (false, Some(false), false),
            (true, Some(true), true),
            (true, Some(false), false),
        ];
        let report = drift_report(&items(&pattern, 3));
        assert_eq!(report.items, 30);
        assert_eq!(report.agreement_with_old, Some(0.9));
        assert_eq!(report.old_accuracy, Some(0.8));
        assert_eq!(report.new_accuracy, Some(0.9));
        assert!(!report.drifted(), "{report:?}");
        assert!(report.summary().contains("90.0% agree"));
    }

    #[test]
    fn disagreement_failures_and_lost_accuracy_are_drift() {
        // The new version fails on a third and flips a third.
        let pattern = [
            (true, Some(true), true),
            (true, None, true),
            (false, Some(true), false),
        ];
        let report = drift_report(&items(&pattern, 10));
        assert_eq!(report.failures, 10);
        assert_eq!(report.agreement_with_old, Some(1.0 / 3.0));
        assert_eq!(
            (report.old_accuracy, report.new_accuracy),
            (Some(1.0), Some(1.0 / 3.0))
        );
        assert_eq!(report.drift.len(), 2, "{report:?}");
        assert!(report.drift[1].contains("66.7 points below"), "{report:?}");
        // Too few items to call: the figures stand, the verdict waits.
        let few = drift_report(&items(&pattern, 3));
        assert_eq!(few.items, 9);
        assert!(!few.drifted());
        assert_eq!(drift_report(&[]).agreement_with_old, None);
    }
}
