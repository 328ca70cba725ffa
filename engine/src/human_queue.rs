//! Use cases of the human queue beyond labelling: senior review of labels, the rater pool
//! (figures, pause, deactivation, skills, capacity, the quality threshold) and agreement between
//! raters on a run.
//!
//! Like [`crate::service`], callers have checked the session's role; this layer checks input.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::annotation::adjudication::parse_skills;
use crate::annotation::agreement::{
    bootstrap_ci, cohen_kappa, fleiss_kappa, krippendorff_alpha, Agreement, Level, Unit, Weighting,
};
use crate::annotation::pool::{rater_stats, RaterStats};
use crate::service::{ServiceError, ServiceResult};
use crate::store::{now_ms, RaterUpdate, ReviewDecision, Store};

/// Longest reason a reviewer may give.
const MAX_REASON_CHARS: usize = 2_000;
/// The setting that holds the quality threshold below which raters are flagged.
const QUALITY_THRESHOLD_SETTING: &str = "rater_quality_threshold";
/// Flag raters whose review acceptance or agreement with consensus is below 70% by default.
pub const DEFAULT_QUALITY_THRESHOLD: f64 = 0.7;
/// Rater pairs need this many shared items before their kappa is shown.
const MIN_SHARED_ITEMS: usize = 5;
/// Resamples of the bootstrap interval around alpha.
const BOOTSTRAP_RESAMPLES: usize = 1_000;

/// A reviewer's decision as typed: `accept`, `correct` (with `pass` or `fail`) or `reject`
/// (with a reason).
pub async fn review(
    store: &dyn Store,
    label_id: i64,
    reviewer_id: i64,
    decision: &str,
    verdict: &str,
    reason: &str,
) -> ServiceResult<()> {
    let reason = reason.trim();
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(ServiceError::Invalid(format!(
            "the reason is longer than {MAX_REASON_CHARS} characters"
        )));
    }
    let decision = match (decision.trim(), verdict.trim()) {
        ("accept", _) => ReviewDecision::Accept,
        ("correct", "pass") => ReviewDecision::Correct { pass: true },
        ("correct", "fail") => ReviewDecision::Correct { pass: false },
        ("correct", other) => {
            return Err(ServiceError::Invalid(format!(
                "a correction needs the right verdict, pass or fail, not `{other}`"
            )))
        }
        ("reject", _) if reason.is_empty() => {
            return Err(ServiceError::Invalid(
                "say why the label is rejected; the rater sees the reason".into(),
            ))
        }
        ("reject", _) => ReviewDecision::Reject,
        (other, _) => {
            return Err(ServiceError::Invalid(format!(
                "unknown decision `{other}`; use accept, correct or reject"
            )))
        }
    };
    Ok(store
        .review_label(label_id, reviewer_id, decision, reason)
        .await?)
}

/// The quality threshold a lead set (or the default).
pub async fn quality_threshold(store: &dyn Store) -> ServiceResult<f64> {
    Ok(store
        .setting(QUALITY_THRESHOLD_SETTING)
        .await?
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_QUALITY_THRESHOLD))
}

pub async fn set_quality_threshold(store: &dyn Store, text: &str) -> ServiceResult<()> {
    let threshold: f64 = text
        .trim()
        .parse()
        .ok()
        .filter(|value| (0.0..=1.0).contains(value))
        .ok_or_else(|| {
            ServiceError::Invalid(format!(
                "the quality threshold is a share between 0 and 1, not `{text}`"
            ))
        })?;
    Ok(store
        .set_setting(QUALITY_THRESHOLD_SETTING, &threshold.to_string())
        .await?)
}

/// Every rater's figures, flagged against the lead's threshold.
pub async fn rater_table(store: &dyn Store) -> ServiceResult<(Vec<RaterStats>, f64)> {
    let threshold = quality_threshold(store).await?;
    let records = store.raters().await?;
    Ok((rater_stats(&records, now_ms(), threshold), threshold))
}

/// A lead's change to a rater, as typed ('' leaves a field as it is).
#[derive(Clone, Debug, Default)]
pub struct RaterForm {
    /// `pause`, `resume`, `deactivate`, `activate` or ''.
    pub action: String,
    pub skills: Option<String>,
    pub weekly_capacity_hours: Option<String>,
}

pub async fn update_rater(
    store: &dyn Store,
    lead_id: i64,
    rater_id: i64,
    form: &RaterForm,
) -> ServiceResult<()> {
    let mut update = RaterUpdate::default();
    match form.action.trim() {
        "" => {}
        "pause" => update.paused = Some(true),
        "resume" => update.paused = Some(false),
        "deactivate" if rater_id == lead_id => {
            return Err(ServiceError::Invalid(
                "you cannot deactivate your own account".into(),
            ))
        }
        "deactivate" => update.active = Some(false),
        "activate" => update.active = Some(true),
        other => {
            return Err(ServiceError::Invalid(format!(
                "unknown action `{other}`; use pause, resume, deactivate or activate"
            )))
        }
    }
    if let Some(skills) = &form.skills {
        update.skills = Some(parse_skills(skills).map_err(ServiceError::Invalid)?);
    }
    if let Some(hours) = &form.weekly_capacity_hours {
        let hours: f64 = hours
            .trim()
            .parse()
            .ok()
            .filter(|hours| (0.0..=168.0).contains(hours))
            .ok_or_else(|| {
                ServiceError::Invalid(format!(
                    "weekly capacity is hours from 0 to 168, not `{hours}`"
                ))
            })?;
        update.weekly_capacity_hours = Some(hours);
    }
    if update == RaterUpdate::default() {
        return Err(ServiceError::Invalid("nothing to change".into()));
    }
    Ok(store.update_rater(rater_id, &update).await?)
}

/// Agreement between the raters of one run's human items.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgreementReport {
    /// Items with at least two standing labels.
    pub items: u64,
    pub labels: u64,
    /// Krippendorff's alpha (nominal): any number of raters per item, missing labels allowed.
    pub alpha: Agreement,
    /// 95% bootstrap interval over items, when alpha is defined often enough to have one.
    pub alpha_interval: Option<(f64, f64)>,
    /// Fleiss' kappa over the items with the most common number of raters.
    pub fleiss: Agreement,
    /// Cohen's kappa of each rater pair with enough shared items.
    pub pairs: Vec<PairAgreement>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairAgreement {
    pub first: String,
    pub second: String,
    pub shared_items: u64,
    pub kappa: Agreement,
}

pub async fn run_agreement(store: &dyn Store, run_id: i64) -> ServiceResult<AgreementReport> {
    let labels = store.run_labels(run_id).await?;
    let mut items: BTreeMap<i64, Vec<(u64, bool)>> = BTreeMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    for label in &labels {
        let rater = label.rater_id as u64;
        names.insert(rater, label.rater.clone());
        items
            .entry(label.task_id)
            .or_default()
            .push((rater, label.pass));
    }
    let units: Vec<Unit<bool>> = items
        .values()
        .map(|ratings| Unit::new(ratings.clone()))
        .collect();
    let alpha = krippendorff_alpha(&units, Level::Nominal)
        .map_err(|err| ServiceError::Invalid(err.to_string()))?;
    let alpha_interval = bootstrap_ci(&units, Level::Nominal, BOOTSTRAP_RESAMPLES, 0.95, 7);
    // Fleiss needs one number of raters: take the items with the most common count.
    let mut by_count: BTreeMap<usize, Vec<Vec<bool>>> = BTreeMap::new();
    for ratings in items.values().filter(|ratings| ratings.len() >= 2) {
        by_count
            .entry(ratings.len())
            .or_default()
            .push(ratings.iter().map(|(_, pass)| *pass).collect());
    }
    let fleiss_items = by_count
        .into_values()
        .max_by_key(|items| items.len())
        .unwrap_or_default();
    let fleiss = fleiss_kappa(&fleiss_items);
    let mut raters: Vec<u64> = names.keys().copied().collect();
    raters.sort_unstable();
    let mut pairs = Vec::new();
    for (index, &first) in raters.iter().enumerate() {
        for &second in &raters[index + 1..] {
            let shared: Vec<(bool, bool)> = items
                .values()
                .filter_map(|ratings| {
                    let of = |rater| ratings.iter().find(|(r, _)| *r == rater).map(|(_, p)| *p);
                    Some((of(first)?, of(second)?))
                })
                .collect();
            if shared.len() >= MIN_SHARED_ITEMS {
                pairs.push(PairAgreement {
                    first: names[&first].clone(),
                    second: names[&second].clone(),
                    shared_items: shared.len() as u64,
                    kappa: cohen_kappa(&shared, Weighting::Unweighted),
                });
            }
        }
    }
    Ok(AgreementReport {
        items: items.values().filter(|ratings| ratings.len() >= 2).count() as u64,
        labels: labels.len() as u64,
        alpha,
        alpha_interval,
        fleiss,
        pairs,
    })
}
