//! Quality control settings and gold items: the rate of gold items served, the rate of review
//! decisions spot-checked, the rater quality threshold, and making a finished item gold.

use crate::annotation::review::bounded_text;
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::annotation::gold::{
    parse_share, GoldAnswer, AGREEMENT_FLOOR_SETTING, DEFAULT_AGREEMENT_FLOOR, DEFAULT_GOLD_RATE,
    DEFAULT_REVIEW_CHECK_RATE, GOLD_RATE_SETTING, REVIEW_CHECK_RATE_SETTING,
};
use arbiter_domain::annotation::pool::{DEFAULT_QUALITY_THRESHOLD, QUALITY_THRESHOLD_SETTING};
use arbiter_domain::ids::{TaskId, UserId};
use arbiter_store::Store;
use serde::Serialize;

/// A share-valued setting (the default when unset).
async fn share_setting(store: &dyn Store, name: &str, default: f64) -> ServiceResult<f64> {
    Ok(store
        .setting(name)
        .await?
        .and_then(|value| value.parse().ok())
        .unwrap_or(default))
}

/// The quality threshold a lead set (or the default).
pub async fn quality_threshold(store: &dyn Store) -> ServiceResult<f64> {
    share_setting(store, QUALITY_THRESHOLD_SETTING, DEFAULT_QUALITY_THRESHOLD).await
}

pub async fn set_quality_threshold(store: &dyn Store, text: &str) -> ServiceResult<()> {
    let threshold =
        parse_share(text, "the quality threshold", 1.0).map_err(ServiceError::Invalid)?;
    Ok(store
        .set_setting(QUALITY_THRESHOLD_SETTING, &threshold.to_string())
        .await?)
}

/// The QC rates and the agreement floor a lead sets on the queue page.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueSettings {
    /// Share of claims served a gold item.
    pub gold_rate: f64,
    /// Share of reviewers' decisions spot-checked by another senior.
    pub review_check_rate: f64,
    /// Krippendorff's alpha below which a queue raises an alert.
    pub agreement_floor: f64,
}

pub async fn queue_settings(store: &dyn Store) -> ServiceResult<QueueSettings> {
    Ok(QueueSettings {
        gold_rate: share_setting(store, GOLD_RATE_SETTING, DEFAULT_GOLD_RATE).await?,
        review_check_rate: share_setting(
            store,
            REVIEW_CHECK_RATE_SETTING,
            DEFAULT_REVIEW_CHECK_RATE,
        )
        .await?,
        agreement_floor: share_setting(store, AGREEMENT_FLOOR_SETTING, DEFAULT_AGREEMENT_FLOOR)
            .await?,
    })
}

/// Sets the three together, as typed; nothing changes unless all three are valid. Gold is at
/// most half of a rater's work (more and the queue stops moving).
pub async fn set_queue_settings(
    store: &dyn Store,
    gold_rate: &str,
    review_check_rate: &str,
    agreement_floor: &str,
) -> ServiceResult<()> {
    let gold_rate = parse_share(gold_rate, "the gold rate", 0.5).map_err(ServiceError::Invalid)?;
    let check_rate = parse_share(review_check_rate, "the spot-check rate", 1.0)
        .map_err(ServiceError::Invalid)?;
    let floor =
        parse_share(agreement_floor, "the agreement floor", 1.0).map_err(ServiceError::Invalid)?;
    Ok(store
        .set_settings(&[
            (GOLD_RATE_SETTING, gold_rate.to_string()),
            (REVIEW_CHECK_RATE_SETTING, check_rate.to_string()),
            (AGREEMENT_FLOOR_SETTING, floor.to_string()),
        ])
        .await?)
}

/// Makes an item gold with the answer a lead gives (`pass` or `fail`; for a pair `a`, `b`,
/// `tie` or `both_bad`, sides as shown) and an optional note that raters in training see with
/// their feedback.
pub async fn create_gold(
    store: &dyn Store,
    lead_id: UserId,
    task_id: TaskId,
    answer: &str,
    note: &str,
) -> ServiceResult<i64> {
    let answer = GoldAnswer::parse(answer.trim()).map_err(ServiceError::Invalid)?;
    let note = bounded_text(note, "the note")?;
    Ok(store.create_gold(task_id, answer, note, lead_id).await?)
}
