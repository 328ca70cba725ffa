//! Use cases of the human queue beyond labelling: senior review of labels and spot checks of
//! reviewers, gold items and the QC rates, the rater pool (invitations, figures, roles, pause,
//! deactivation, training, skills, capacity, the quality threshold) and agreement between
//! raters on a run or a queue.
//!
//! Like [`crate::service`], callers have checked the session's role; this layer checks input.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::mail::{parse_address, Mailer};
use crate::passwords::hash_password;
use crate::service::{ServiceError, ServiceResult};
use arbiter_domain::accounts::{Role, Username};
use arbiter_domain::annotation::adjudication::parse_skills;
use arbiter_domain::annotation::agreement::{
    bootstrap_ci, cohen_kappa, fleiss_kappa, krippendorff_alpha, Agreement, Level, Unit, Weighting,
};
use arbiter_domain::annotation::gold::{
    parse_share, AGREEMENT_FLOOR_SETTING, DEFAULT_AGREEMENT_FLOOR, DEFAULT_GOLD_RATE,
    DEFAULT_REVIEW_CHECK_RATE, GOLD_RATE_SETTING, REVIEW_CHECK_RATE_SETTING,
};
use arbiter_domain::annotation::pool::{
    rater_stats, RaterStats, DEFAULT_QUALITY_THRESHOLD, QUALITY_THRESHOLD_SETTING,
};
use arbiter_domain::annotation::pool::{NewRater, RaterUpdate};
use arbiter_domain::annotation::review::ReviewDecision;
use arbiter_store::{now_ms, Store};

/// Longest reason a reviewer may give.
const MAX_REASON_CHARS: usize = 2_000;
/// Rater pairs need this many shared items before their kappa is shown.
const MIN_SHARED_ITEMS: usize = 5;
/// Resamples of the bootstrap interval around alpha, for up to 5,000 items.
const BOOTSTRAP_RESAMPLES: usize = 1_000;
/// Item draws one interval may cost (resamples × items): about 0.6 s here (`bench agreement`
/// measured 117 ns per draw), so a run or queue page stays quick.
const BOOTSTRAP_BUDGET: usize = 5_000_000;
/// Fewer resamples than this make the interval's ends too noisy to show.
const MIN_BOOTSTRAP_RESAMPLES: usize = 200;

/// Resamples for an interval over `items` items: the full count for small sets, fewer for
/// larger ones, and none (no interval) beyond 25,000 items, where the budget would allow fewer
/// than the minimum. Intervals there are narrow anyway: ±0.002 at 333,000 items in
/// `bench agreement`.
pub fn bootstrap_resamples(items: usize) -> usize {
    let affordable = BOOTSTRAP_BUDGET / items.max(1);
    if affordable < MIN_BOOTSTRAP_RESAMPLES {
        0
    } else {
        affordable.min(BOOTSTRAP_RESAMPLES)
    }
}

/// Free text a senior writes for someone else to read, trimmed and at most
/// [`MAX_REASON_CHARS`] long.
fn bounded_text<'a>(text: &'a str, what: &str) -> ServiceResult<&'a str> {
    let text = text.trim();
    if text.chars().count() > MAX_REASON_CHARS {
        return Err(ServiceError::Invalid(format!(
            "{what} is longer than {MAX_REASON_CHARS} characters"
        )));
    }
    Ok(text)
}

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
    let reason = bounded_text(reason, "the reason")?;
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

/// A spot check of another reviewer's decision as typed: `uphold`, or `overturn` with the
/// right verdict (`pass` or `fail`) and a reason.
pub async fn check_review(
    store: &dyn Store,
    review_id: i64,
    checker_id: i64,
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

/// Makes an item gold with the answer a lead gives (`pass` or `fail`) and an optional note
/// that raters in training see with their feedback.
pub async fn create_gold(
    store: &dyn Store,
    lead_id: i64,
    task_id: i64,
    answer: &str,
    note: &str,
) -> ServiceResult<i64> {
    let answer_pass = match answer.trim() {
        "pass" => true,
        "fail" => false,
        other => {
            return Err(ServiceError::Invalid(format!(
                "a gold item's answer is pass or fail, not `{other}`"
            )))
        }
    };
    let note = bounded_text(note, "the note")?;
    Ok(store
        .create_gold(task_id, answer_pass, note, lead_id)
        .await?)
}

/// A rater a lead invites, as typed.
#[derive(Clone, Debug, Default)]
pub struct Invitation {
    pub username: String,
    pub role: String,
    pub email: String,
    pub skills: String,
    pub weekly_capacity_hours: String,
    /// Start in training (gold items with feedback until they pass).
    pub training: bool,
}

/// The invited rater's first password, shown once to the lead and emailed to the rater when
/// they have an address.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Invited {
    pub user_id: i64,
    pub username: String,
    pub password: String,
    /// What happened to the invitation email, in words.
    pub emailed: String,
}

/// Roles a lead may give in the rater pool; making admins is left to the admin command.
fn pool_role(text: &str) -> ServiceResult<Role> {
    match text.trim() {
        "" => Ok(Role::Annotator),
        other => match other.parse::<Role>() {
            Ok(Role::Admin) => Err(ServiceError::Invalid(
                "admins are made with `arbiter user`, not from the rater pool".into(),
            )),
            Ok(role) => Ok(role),
            Err(_) => Err(ServiceError::Invalid(format!(
                "unknown role `{other}`; use annotator, reviewer, researcher or lead"
            ))),
        },
    }
}

fn capacity_hours(text: &str) -> ServiceResult<f64> {
    if text.trim().is_empty() {
        return Ok(0.0);
    }
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|hours| (0.0..=168.0).contains(hours))
        .ok_or_else(|| {
            ServiceError::Invalid(format!(
                "weekly capacity is hours from 0 to 168, not `{text}`"
            ))
        })
}

fn optional_email(text: &str) -> ServiceResult<Option<String>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse_address(text).map(Some).map_err(ServiceError::Invalid)
}

/// Creates a rater's account with a random first password. Everything is checked before
/// anything is stored; the account is one row.
pub async fn invite_rater(
    store: &dyn Store,
    mailer: &Mailer,
    invitation: &Invitation,
) -> ServiceResult<Invited> {
    let username = Username::parse(&invitation.username).map_err(ServiceError::Invalid)?;
    let new = NewRater {
        username: username.as_str().to_string(),
        role: pool_role(&invitation.role)?,
        email: optional_email(&invitation.email)?,
        skills: parse_skills(&invitation.skills).map_err(ServiceError::Invalid)?,
        weekly_capacity_hours: capacity_hours(&invitation.weekly_capacity_hours)?,
        training: invitation.training,
    };
    let password = first_password();
    let to_hash = password.clone();
    let hash = tokio::task::spawn_blocking(move || hash_password(&to_hash))
        .await
        .map_err(|_| ServiceError::Internal)?
        .map_err(ServiceError::Invalid)?;
    let user_id = store.invite_rater(&new, &hash).await?;
    let emailed = match &new.email {
        None => "no email address given: pass the password on yourself".to_string(),
        Some(address) => {
            let training_note = if new.training {
                "\nYou start with training items: you see the right answer after each one."
            } else {
                ""
            };
            let body = format!(
                "You have been invited to label items in Arbiter as `{}` ({}).\n\n\
                 Your first password is: {password}\n\nAsk your lead to change it after you sign in.{training_note}",
                new.username,
                new.role.as_str(),
            );
            match mailer
                .send(
                    std::slice::from_ref(address),
                    "Your Arbiter rater account",
                    &body,
                )
                .await
            {
                Ok(()) => format!("invitation sent to {address} via {}", mailer.describe()),
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), "invitation email not sent");
                    format!(
                        "the invitation email to {address} could not be sent; pass the password on yourself"
                    )
                }
            }
        }
    };
    Ok(Invited {
        user_id,
        username: new.username,
        password,
        emailed,
    })
}

/// A first password: 16 characters from an alphabet without look-alikes.
fn first_password() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::thread_rng();
    (0..16)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
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
    /// `pause`, `resume`, `deactivate`, `activate`, `train` (back to training items),
    /// `end-training` or ''.
    pub action: String,
    pub skills: Option<String>,
    pub weekly_capacity_hours: Option<String>,
    pub role: Option<String>,
    /// '' removes the address.
    pub email: Option<String>,
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
        "train" => update.training = Some(true),
        "end-training" => update.training = Some(false),
        other => {
            return Err(ServiceError::Invalid(format!(
                "unknown action `{other}`; use pause, resume, deactivate, activate, train or end-training"
            )))
        }
    }
    let target = store.get_user(rater_id).await?;
    if let Some(role) = form.role.as_deref().filter(|role| !role.trim().is_empty()) {
        let role = pool_role(role)?;
        let current = target.as_ref().map(|user| user.role);
        // The row form always sends the role shown; only a change is one.
        if current != Some(role) {
            if rater_id == lead_id {
                return Err(ServiceError::Invalid(
                    "you cannot change your own role".into(),
                ));
            }
            update.role = Some(role);
        }
    }
    if let Some(email) = &form.email {
        update.email = Some(optional_email(email)?);
    }
    if let Some(skills) = &form.skills {
        update.skills = Some(parse_skills(skills).map_err(ServiceError::Invalid)?);
    }
    if let Some(hours) = &form.weekly_capacity_hours {
        update.weekly_capacity_hours = Some(capacity_hours(hours)?);
    }
    if target.is_some_and(|user| user.role == Role::Admin) && update.role.is_some() {
        return Err(ServiceError::Invalid(
            "an admin's role is changed with `arbiter user`, not from the rater pool".into(),
        ));
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
    let ratings: Vec<Rating> = labels
        .into_iter()
        .map(|label| Rating {
            item: label.task_id,
            rater: label.rater_id,
            rater_name: label.rater,
            pass: label.pass,
        })
        .collect();
    agreement_of(&ratings, true)
}

/// Agreement per queue (eval) over the labels of the last `days` days, queues by name.
pub async fn queue_agreement(
    store: &dyn Store,
    days: i64,
    with_interval: bool,
) -> ServiceResult<Vec<(String, AgreementReport)>> {
    let since = now_ms() - days * 24 * 3_600_000;
    let mut by_queue: BTreeMap<String, Vec<Rating>> = BTreeMap::new();
    for label in store.queue_labels(since).await? {
        by_queue.entry(label.queue).or_default().push(Rating {
            item: label.task_id,
            rater: label.rater_id,
            rater_name: label.rater,
            pass: label.pass,
        });
    }
    by_queue
        .into_iter()
        .map(|(queue, ratings)| Ok((queue, agreement_of(&ratings, with_interval)?)))
        .collect()
}

/// One standing label, as agreement statistics see it.
#[derive(Clone, Debug)]
pub struct Rating {
    pub item: i64,
    pub rater: i64,
    pub rater_name: String,
    pub pass: bool,
}

/// Alpha (with a bootstrap interval when asked: it costs a thousand resamples), Fleiss' kappa
/// and Cohen's kappa per rater pair over one rubric dimension, the pass/fail verdict.
pub fn agreement_of(ratings: &[Rating], with_interval: bool) -> ServiceResult<AgreementReport> {
    let mut items: BTreeMap<i64, Vec<(u64, bool)>> = BTreeMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    for rating in ratings {
        let rater = rating.rater as u64;
        names
            .entry(rater)
            .or_insert_with(|| rating.rater_name.clone());
        items
            .entry(rating.item)
            .or_default()
            .push((rater, rating.pass));
    }
    let units: Vec<Unit<bool>> = items
        .values()
        .map(|ratings| Unit::new(ratings.clone()))
        .collect();
    let alpha = krippendorff_alpha(&units, Level::Nominal)
        .map_err(|err| ServiceError::Invalid(err.to_string()))?;
    let alpha_interval = if with_interval {
        bootstrap_ci(
            &units,
            Level::Nominal,
            // Only items with two or more labels enter the resampling.
            bootstrap_resamples(items.values().filter(|ratings| ratings.len() >= 2).count()),
            0.95,
            7,
        )
    } else {
        None
    };
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
    // Pairs from the items they share, in one pass over the items.
    let mut shared: BTreeMap<(u64, u64), Vec<(bool, bool)>> = BTreeMap::new();
    for ratings in items.values() {
        for (index, &(first, first_pass)) in ratings.iter().enumerate() {
            for &(second, second_pass) in &ratings[index + 1..] {
                let (key, value) = if first < second {
                    ((first, second), (first_pass, second_pass))
                } else {
                    ((second, first), (second_pass, first_pass))
                };
                shared.entry(key).or_default().push(value);
            }
        }
    }
    let pairs = shared
        .into_iter()
        .filter(|(_, shared)| shared.len() >= MIN_SHARED_ITEMS)
        .map(|((first, second), shared)| PairAgreement {
            first: names[&first].clone(),
            second: names[&second].clone(),
            shared_items: shared.len() as u64,
            kappa: cohen_kappa(&shared, Weighting::Unweighted),
        })
        .collect();
    Ok(AgreementReport {
        items: items.values().filter(|ratings| ratings.len() >= 2).count() as u64,
        labels: ratings.len() as u64,
        alpha,
        alpha_interval,
        fleiss,
        pairs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_sets_get_fewer_bootstrap_resamples_and_then_none() {
        assert_eq!(bootstrap_resamples(0), 1_000);
        assert_eq!(bootstrap_resamples(5_000), 1_000);
        assert_eq!(bootstrap_resamples(10_000), 500);
        assert_eq!(bootstrap_resamples(25_000), 200);
        assert_eq!(
            bootstrap_resamples(25_001),
            0,
            "no interval beyond the budget"
        );
        assert_eq!(bootstrap_resamples(10_000_000), 0);
    }
}
