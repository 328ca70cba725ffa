//! Senior review of labels, and another senior's spot check of a reviewer's decision.

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::annotation::preference::Preference;
use arbiter_domain::annotation::review::{PairReviewDecision, ReviewDecision};
use arbiter_domain::annotation::rubric::RubricAnswer;
use arbiter_domain::ids::UserId;
use arbiter_store::Store;

/// Longest reason a reviewer may give.
const MAX_REASON_CHARS: usize = 2_000;

/// Free text a senior writes for someone else to read, trimmed and at most
/// [`MAX_REASON_CHARS`] long.
pub(crate) fn bounded_text<'a>(text: &'a str, what: &str) -> ServiceResult<&'a str> {
    let text = text.trim();
    if text.chars().count() > MAX_REASON_CHARS {
        return Err(ServiceError::Invalid(format!(
            "{what} is longer than {MAX_REASON_CHARS} characters"
        )));
    }
    Ok(text)
}

/// A reviewer's decision as typed: `accept`, `correct` (with `pass` or `fail`; a rubric label
/// also with its corrected `answers`, JSON by dimension key, whose verdict then stands) or
/// `reject` (with a reason).
pub async fn review(
    store: &dyn Store,
    label_id: i64,
    reviewer_id: UserId,
    decision: &str,
    verdict: &str,
    answers: &str,
    reason: &str,
) -> ServiceResult<()> {
    let reason = bounded_text(reason, "the reason")?;
    let decision = match (decision.trim(), verdict.trim()) {
        ("accept", _) => ReviewDecision::Accept,
        ("correct", _) if !answers.trim().is_empty() => {
            corrected_answers(store, label_id, answers).await?
        }
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

/// A rubric label's answers corrected by a reviewer: read as JSON by dimension key and checked
/// against the label's rubric (every required dimension, each of its kind), with the verdict
/// they give.
async fn corrected_answers(
    store: &dyn Store,
    label_id: i64,
    answers: &str,
) -> ServiceResult<ReviewDecision> {
    let (rubric_id, given) = store.label_rubric(label_id).await?.ok_or_else(|| {
        ServiceError::Invalid(
            "this label answers pass or fail, not a rubric: correct its verdict".into(),
        )
    })?;
    let (_, answers, pass) = crate::rubrics::checked_answers(store, rubric_id, answers)
        .await
        .map_err(|err| match err {
            ServiceError::Invalid(problem) => {
                ServiceError::Invalid(format!("the corrected answers: {problem}"))
            }
            other => other,
        })?;
    // The form starts from the rater's answers: sent unchanged, they are accepted, not a
    // correction that would count against the rater.
    if serde_json::from_str::<RubricAnswer>(&given).ok().as_ref() == Some(&answers) {
        return Ok(ReviewDecision::Accept);
    }
    Ok(ReviewDecision::CorrectAnswers { answers, pass })
}

/// A reviewer's decision on a rater's preference as typed: `accept`, `correct` (with the right
/// choice, `a`, `b`, `tie` or `both_bad`, sides as shown) or `reject` (with a reason).
pub async fn review_preference(
    store: &dyn Store,
    label_id: i64,
    reviewer_id: UserId,
    decision: &str,
    choice: &str,
    reason: &str,
) -> ServiceResult<()> {
    let reason = bounded_text(reason, "the reason")?;
    let decision = match decision.trim() {
        "accept" => PairReviewDecision::Accept,
        "correct" => {
            PairReviewDecision::Correct(Preference::parse(choice.trim()).map_err(|refusal| {
                ServiceError::Invalid(format!("a correction needs the right choice: {refusal}"))
            })?)
        }
        "reject" if reason.is_empty() => {
            return Err(ServiceError::Invalid(
                "say why the preference is rejected; the rater sees the reason".into(),
            ))
        }
        "reject" => PairReviewDecision::Reject,
        other => {
            return Err(ServiceError::Invalid(format!(
                "unknown decision `{other}`; use accept, correct or reject"
            )))
        }
    };
    Ok(store
        .review_preference(label_id, reviewer_id, decision, reason)
        .await?)
}

/// A spot check of another reviewer's decision as typed: `uphold`, or `overturn` with the
/// right verdict (`pass` or `fail`) and a reason.
pub async fn check_review(
    store: &dyn Store,
    review_id: i64,
    checker_id: UserId,
    decision: &str,
    verdict: &str,
    reason: &str,
) -> ServiceResult<()> {
    let reason = bounded_text(reason, "the reason")?;
    let overturn_to = match (decision.trim(), verdict.trim()) {
        ("uphold", _) => None,
        ("overturn", "pass") => Some(true),
        ("overturn", "fail") => Some(false),
        ("overturn", other) => {
            return Err(ServiceError::Invalid(format!(
                "overturning needs the right verdict, pass or fail, not `{other}`"
            )))
        }
        (other, _) => {
            return Err(ServiceError::Invalid(format!(
                "unknown check decision `{other}`; use uphold or overturn"
            )))
        }
    };
    Ok(store
        .check_review(review_id, checker_id, overturn_to, reason)
        .await?)
}
