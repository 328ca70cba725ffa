//! The rater pool's figures from each rater's recent labels: velocity, time per item, review
//! acceptance, gold accuracy, agreement with the final verdicts, how often their own review
//! decisions were upheld, and whether a lead should look at them.
//!
//! Pure: the store supplies the labels ([`RaterRecord`]).

use crate::ids::UserId;
use crate::spreadsheet::quote_formulas;
use serde::{Deserialize, Serialize};

/// The setting that holds the quality threshold below which raters are flagged (and which a
/// rater in training must reach on gold items).
pub const QUALITY_THRESHOLD_SETTING: &str = "rater_quality_threshold";
/// Flag raters whose review acceptance, gold accuracy or agreement with consensus is below 70%
/// by default.
pub const DEFAULT_QUALITY_THRESHOLD: f64 = 0.7;

/// Velocity is measured over the last week.
const VELOCITY_DAYS: i64 = 7;
const DAY_MS: i64 = 24 * 3_600_000;
/// Below this many reviewed or decided labels a share says too little to flag anyone on.
const MIN_LABELS_TO_FLAG: u64 = 5;

/// One rater's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterStats {
    pub id: UserId,
    pub username: String,
    pub role: String,
    pub active: bool,
    pub paused: bool,
    pub skills: Vec<String>,
    pub weekly_capacity_hours: f64,
    /// Labels per day over the last week.
    pub items_per_day: f64,
    pub median_seconds_per_item: Option<f64>,
    /// Share of reviewed labels a reviewer accepted.
    pub review_acceptance: Option<f64>,
    /// Share of labels that match the item's final human verdict.
    pub agreement_with_consensus: Option<f64>,
    /// Per rubric dimension (by key, in key order): the share of the rater's answers that
    /// match the raters' consensus on decided items, and how many there were.
    #[serde(default)]
    pub agreement_by_dimension: Vec<(String, f64, u64)>,
    /// Share of gold items answered right, and how many were answered.
    pub gold_accuracy: Option<f64>,
    pub gold_answered: u64,
    /// For reviewers: share of their spot-checked decisions another senior upheld.
    pub reviews_upheld: Option<f64>,
    pub email: Option<String>,
    /// In training since (gold items with feedback only).
    pub training_since: Option<i64>,
    pub labels_30d: u64,
    pub last_active: Option<i64>,
    /// Why a lead should look at this rater, when below the quality threshold.
    pub flag: Option<String>,
}

/// The figures of every rater at `now`, flagging those whose review acceptance or agreement
/// with consensus is below `threshold` (once there are enough labels to say so).
pub fn rater_stats(records: &[RaterRecord], now: i64, threshold: f64) -> Vec<RaterStats> {
    records
        .iter()
        .map(|record| stats_of(record, now, threshold))
        .collect()
}

fn stats_of(record: &RaterRecord, now: i64, threshold: f64) -> RaterStats {
    let labels = &record.labels;
    let recent = labels
        .iter()
        .filter(|label| label.created_at >= now - VELOCITY_DAYS * DAY_MS)
        .count();
    let mut durations: Vec<i64> = labels
        .iter()
        .filter_map(|label| label.duration_ms)
        .collect();
    durations.sort_unstable();
    let reviewed: Vec<bool> = labels
        .iter()
        .filter_map(|label| label.review.as_deref())
        .filter(|review| *review != "pending")
        .map(|review| review == "accepted")
        .collect();
    let decided: Vec<bool> = labels
        .iter()
        .filter_map(|label| label.matches_final)
        .collect();
    let review_acceptance = share(&reviewed);
    let agreement_with_consensus = share(&decided);
    let mut by_dimension: std::collections::BTreeMap<&str, Vec<bool>> =
        std::collections::BTreeMap::new();
    for (key, matched) in labels.iter().flat_map(|label| &label.dimension_matches) {
        by_dimension.entry(key).or_default().push(*matched);
    }
    let agreement_by_dimension: Vec<(String, f64, u64)> = by_dimension
        .into_iter()
        .filter_map(|(key, matched)| {
            Some((key.to_string(), share(&matched)?, matched.len() as u64))
        })
        .collect();
    let ratio = |part: u64, all: u64| (all > 0).then(|| part as f64 / all as f64);
    let gold_accuracy = ratio(record.gold_right, record.gold_answered);
    let reviews_upheld = ratio(record.reviews_upheld, record.reviews_checked);
    let dimension_flags = agreement_by_dimension.iter().map(|(key, value, count)| {
        (
            format!("agreement with consensus on `{key}`"),
            Some(*value),
            *count as usize,
        )
    });
    let flag = [
        (
            "gold accuracy".to_string(),
            gold_accuracy,
            record.gold_answered as usize,
        ),
        (
            "review acceptance".to_string(),
            review_acceptance,
            reviewed.len(),
        ),
        (
            "agreement with consensus".to_string(),
            agreement_with_consensus,
            decided.len(),
        ),
        (
            "reviews upheld on spot checks".to_string(),
            reviews_upheld,
            record.reviews_checked as usize,
        ),
    ]
    .into_iter()
    .chain(dimension_flags)
    .find_map(|(what, value, count)| {
        let value = value?;
        (count as u64 >= MIN_LABELS_TO_FLAG && value < threshold).then(|| {
            format!(
                "{what} {:.0}% is below {:.0}% ({count} labels)",
                value * 100.0,
                threshold * 100.0
            )
        })
    });
    RaterStats {
        id: record.id,
        username: record.username.clone(),
        role: record.role.clone(),
        active: record.active,
        paused: record.paused,
        skills: record.skills.clone(),
        weekly_capacity_hours: record.weekly_capacity_hours,
        items_per_day: recent as f64 / VELOCITY_DAYS as f64,
        median_seconds_per_item: median(&durations).map(|ms| ms / 1000.0),
        review_acceptance,
        agreement_with_consensus,
        agreement_by_dimension,
        gold_accuracy,
        gold_answered: record.gold_answered,
        reviews_upheld,
        email: record.email.clone(),
        training_since: record.training_since,
        labels_30d: labels.len() as u64,
        last_active: labels.iter().map(|label| label.created_at).max(),
        flag,
    }
}

fn share(outcomes: &[bool]) -> Option<f64> {
    (!outcomes.is_empty())
        .then(|| outcomes.iter().filter(|&&ok| ok).count() as f64 / outcomes.len() as f64)
}

/// The median of sorted values (the mean of the middle two for an even count).
pub fn median(sorted: &[i64]) -> Option<f64> {
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2] as f64),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) as f64 / 2.0),
    }
}

/// The pool as CSV, for a lead's spreadsheet.
pub fn stats_csv(stats: &[RaterStats]) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record([
        "username",
        "role",
        "active",
        "paused",
        "skills",
        "weekly_capacity_hours",
        "items_per_day",
        "median_seconds_per_item",
        "review_acceptance",
        "agreement_with_consensus",
        "gold_accuracy",
        "gold_answered",
        "reviews_upheld",
        "in_training",
        "email",
        "labels_30d",
        "last_active_ms",
        "flag",
        "agreement_by_dimension",
    ]);
    let optional = |value: Option<f64>| value.map(|v| format!("{v:.4}")).unwrap_or_default();
    for rater in stats {
        let mut record = [
            rater.username.clone(),
            rater.role.clone(),
            rater.active.to_string(),
            rater.paused.to_string(),
            rater.skills.join(" "),
            rater.weekly_capacity_hours.to_string(),
            format!("{:.2}", rater.items_per_day),
            optional(rater.median_seconds_per_item),
            optional(rater.review_acceptance),
            optional(rater.agreement_with_consensus),
            optional(rater.gold_accuracy),
            rater.gold_answered.to_string(),
            optional(rater.reviews_upheld),
            rater.training_since.is_some().to_string(),
            rater.email.clone().unwrap_or_default(),
            rater.labels_30d.to_string(),
            rater
                .last_active
                .map(|at| at.to_string())
                .unwrap_or_default(),
            rater.flag.clone().unwrap_or_default(),
            // Last, so the columns before it stay where spreadsheets expect them.
            rater
                .agreement_by_dimension
                .iter()
                .map(|(key, value, count)| format!("{key}={value:.4} ({count})"))
                .collect::<Vec<_>>()
                .join("; "),
        ];
        // Emails and skills are typed by people: nothing in them runs in a spreadsheet.
        quote_formulas(&mut record);
        let _ = writer.write_record(&record);
    }
    String::from_utf8(writer.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// A member of the rater pool with what their labels show, over the last 30 days.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterRecord {
    pub id: UserId,
    pub username: String,
    pub role: String,
    pub active: bool,
    pub paused: bool,
    pub skills: Vec<String>,
    pub weekly_capacity_hours: f64,
    pub email: Option<String>,
    /// Set while the rater is in training (gold items only, with feedback).
    pub training_since: Option<i64>,
    /// Gold answers over the last 30 days: right, and all.
    pub gold_right: u64,
    pub gold_answered: u64,
    /// The rater's own review decisions spot-checked by another senior: upheld, and all.
    pub reviews_upheld: u64,
    pub reviews_checked: u64,
    /// Each label: when, how long it took (lease to submission), its review decision, and
    /// whether it matched the item's final human verdict (`None` while undecided).
    pub labels: Vec<RaterLabel>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterLabel {
    pub created_at: i64,
    pub duration_ms: Option<i64>,
    pub review: Option<String>,
    pub matches_final: Option<bool>,
    /// For a rubric label on a decided item: whether each answered dimension matches the
    /// raters' consensus (see `consensus::matches_consensus`).
    #[serde(default)]
    pub dimension_matches: Vec<(String, bool)>,
}

/// What a lead changes about a rater; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RaterUpdate {
    pub active: Option<bool>,
    pub paused: Option<bool>,
    pub skills: Option<Vec<String>>,
    pub weekly_capacity_hours: Option<f64>,
    pub role: Option<crate::accounts::Role>,
    /// `Some(None)` removes the address.
    pub email: Option<Option<String>>,
    /// `Some(true)` sends the rater to training (their lease is released); `Some(false)` ends it.
    pub training: Option<bool>,
}

/// A rater a lead invites: the account and its place in the pool, created in one statement.
#[derive(Clone, Debug)]
pub struct NewRater {
    pub username: String,
    pub role: crate::accounts::Role,
    pub email: Option<String>,
    pub skills: Vec<String>,
    pub weekly_capacity_hours: f64,
    /// New raters usually start in training.
    pub training: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::pool::RaterLabel;

    fn label(
        days_ago: i64,
        seconds: i64,
        review: Option<&str>,
        matches: Option<bool>,
    ) -> RaterLabel {
        RaterLabel {
            created_at: 100 * DAY_MS - days_ago * DAY_MS,
            duration_ms: Some(seconds * 1000),
            review: review.map(str::to_string),
            matches_final: matches,
            dimension_matches: Vec::new(),
        }
    }

    fn record(labels: Vec<RaterLabel>) -> RaterRecord {
        RaterRecord {
            id: UserId(1),
            username: "ann".into(),
            role: "annotator".into(),
            active: true,
            paused: false,
            skills: vec!["math".into()],
            weekly_capacity_hours: 10.0,
            email: None,
            training_since: None,
            gold_right: 0,
            gold_answered: 0,
            reviews_upheld: 0,
            reviews_checked: 0,
            labels,
        }
    }

    #[test]
    fn velocity_time_and_shares_come_from_the_labels() {
        let labels = vec![
            label(1, 10, Some("accepted"), Some(true)),
            label(2, 30, Some("rejected"), Some(false)),
            label(3, 20, None, Some(true)),
            label(20, 40, Some("pending"), None),
        ];
        let stats = &rater_stats(&[record(labels)], 100 * DAY_MS, 0.6)[0];
        assert!((stats.items_per_day - 3.0 / 7.0).abs() < 1e-9);
        assert_eq!(stats.median_seconds_per_item, Some(25.0));
        assert_eq!(stats.review_acceptance, Some(0.5));
        assert!((stats.agreement_with_consensus.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(stats.labels_30d, 4);
        assert_eq!(stats.flag, None, "too few labels to flag on");
    }

    #[test]
    fn raters_below_the_threshold_are_flagged_once_there_is_enough_evidence() {
        let labels = (0..6)
            .map(|i| {
                label(
                    1,
                    10,
                    Some(if i < 2 { "accepted" } else { "rejected" }),
                    None,
                )
            })
            .collect();
        let stats = &rater_stats(&[record(labels)], 100 * DAY_MS, 0.7)[0];
        assert!(stats
            .flag
            .as_deref()
            .unwrap()
            .contains("review acceptance 33%"));
        // Gold accuracy flags a rater whom no reviewer has seen yet.
        let mut guesser = record(Vec::new());
        (guesser.gold_right, guesser.gold_answered) = (3, 8);
        let stats = &rater_stats(&[guesser], 100 * DAY_MS, 0.7)[0];
        assert_eq!(stats.gold_accuracy, Some(0.375));
        assert!(stats.flag.as_deref().unwrap().contains("gold accuracy 38%"));
        // A reviewer whose decisions are often overturned on spot checks is flagged too.
        let mut reviewer = record(Vec::new());
        (reviewer.reviews_upheld, reviewer.reviews_checked) = (2, 6);
        let stats = &rater_stats(&[reviewer], 100 * DAY_MS, 0.7)[0];
        assert!(stats.flag.as_deref().unwrap().contains("reviews upheld"));
        // Agreement per rubric dimension, each flagged apart: right on the verdict, often not
        // on `helpful`.
        let labels = (0..6)
            .map(|i| RaterLabel {
                dimension_matches: vec![("correct".into(), true), ("helpful".into(), i == 0)],
                ..label(1, 10, None, Some(true))
            })
            .collect();
        let stats = &rater_stats(&[record(labels)], 100 * DAY_MS, 0.7)[0];
        assert_eq!(
            stats.agreement_by_dimension,
            [
                ("correct".to_string(), 1.0, 6),
                ("helpful".to_string(), 1.0 / 6.0, 6)
            ]
        );
        assert!(
            stats
                .flag
                .as_deref()
                .unwrap()
                .contains("agreement with consensus on `helpful` 17%"),
            "{:?}",
            stats.flag
        );
        let empty = &rater_stats(&[record(Vec::new())], 100 * DAY_MS, 0.7)[0];
        assert_eq!(
            (empty.median_seconds_per_item, empty.flag.clone()),
            (None, None)
        );
    }

    #[test]
    fn the_csv_has_a_header_and_a_row_per_rater() {
        let csv = stats_csv(&rater_stats(&[record(Vec::new())], 0, 0.7));
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("username,role,active"));
        assert!(lines[1].starts_with("ann,annotator,true,false,math"));
    }

    /// Before the fix an email such as `=cmd|…` became a live formula in the lead's spreadsheet.
    #[test]
    fn the_csv_never_starts_a_formula() {
        let hostile = RaterRecord {
            email: Some("=1+1@x.test".into()),
            skills: vec!["@code".into()],
            ..record(Vec::new())
        };
        let csv = stats_csv(&rater_stats(&[hostile], 0, 0.7));
        let mut reader = csv::Reader::from_reader(csv.as_bytes());
        let row = reader.records().next().unwrap().unwrap();
        assert_eq!((&row[4], &row[14]), ("'@code", "'=1+1@x.test"));
    }
}
