//! Use cases for grading: judges, each eval's versioned triage policy, freezing both into a
//! manifest, judge calibration against human labels, recalibration of thresholds, and the cost
//! of a run by stage.
//!
//! Callers have checked the session's role; this layer checks input.

use arbiter_domain::ids::{CheckpointId, EvalId, RunId, UserId};
use serde::{Deserialize, Serialize};

use crate::clients::model::probe_fingerprint;
use crate::error::{ServiceError, ServiceResult};
use crate::reports::charts::reliability_diagram_svg;
use arbiter_domain::accounts::User;
use arbiter_domain::grading::calibration::{
    judge_accuracy, recalibrate_accept_threshold, reliability_bins, LabelledJudgement,
    Recalibration,
};
use arbiter_domain::grading::judge::{
    validate_rubric, Judge, JudgeReport, JudgeSpec, NewJudge, DEFAULT_RUBRIC,
};
use arbiter_domain::grading::pairwise::{validate_pairwise_rubric, DEFAULT_PAIRWISE_RUBRIC};
use arbiter_domain::grading::scale::JudgeScale;
use arbiter_domain::grading::scale_calibration::{
    calibrate_scale, raters_point, ScaleCalibration, ScoredAgainstRaters,
};
use arbiter_domain::grading::triage::{FrozenRubric, FrozenTriage, PolicyVersion, TriagePolicy};
use arbiter_domain::grading::tuning::AutoTuning;
use arbiter_domain::run::CostReport;
use arbiter_store::Store;

/// Most tokens a judge may write: a verdict and a short rationale.
pub const MAX_JUDGE_TOKENS: i64 = 4096;
/// Human-labelled items a recalibration must have above its new threshold.
pub const MIN_ITEMS_ABOVE_THRESHOLD: u64 = 30;
/// Bins of the reliability diagram (0.05 wide over 0.5–1.0).
const RELIABILITY_BINS: usize = 10;

/// A judge as typed into the form.
#[derive(Clone, Debug)]
pub struct JudgeForm {
    pub name: String,
    pub checkpoint_id: CheckpointId,
    /// The judge's prompt; for a scale judge, empty (or the PASS/FAIL default) asks for the
    /// prompt made from the dimension's anchors.
    pub rubric: String,
    pub max_tokens: i64,
    /// A judge on a rubric's scale: the rubric's name ('' for a PASS/FAIL judge), the ordinal
    /// dimension's key, and the point from which an answer passes ('' for the rubric's own).
    pub scale_rubric: String,
    pub scale_dimension: String,
    pub scale_pass_at_least: String,
    /// A pairwise judge (A, B or TIE on two answers); its prompt, left empty or as the
    /// PASS/FAIL default, is the pairwise default.
    pub pairwise: bool,
    /// Answers graded in one call: 1 for one per call; more only for a PASS/FAIL judge.
    pub batch_items: i64,
}

/// Stores a judge; saving under an existing name makes the next version of that judge.
pub async fn define_judge(
    store: &dyn Store,
    form: &JudgeForm,
    created_by: Option<UserId>,
) -> ServiceResult<Judge> {
    let name = form.name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.contains(char::is_whitespace) {
        return Err(ServiceError::Invalid(
            "a judge needs a name of 1 to 100 characters without spaces".into(),
        ));
    }
    if !(1..=MAX_JUDGE_TOKENS).contains(&form.max_tokens) {
        return Err(ServiceError::Invalid(format!(
            "a judge's max tokens must be between 1 and {MAX_JUDGE_TOKENS}"
        )));
    }
    let max_batch = i64::from(arbiter_domain::grading::batch::MAX_BATCH_ITEMS);
    if !(1..=max_batch).contains(&form.batch_items) {
        return Err(ServiceError::Invalid(format!(
            "a judge grades between 1 and {max_batch} answers per call, not {}",
            form.batch_items
        )));
    }
    if form.batch_items > 1 && (form.pairwise || !form.scale_rubric.trim().is_empty()) {
        return Err(ServiceError::Invalid(
            "only a PASS/FAIL judge grades several answers per call: a scale or pairwise judge answers one per call".into(),
        ));
    }
    if form.pairwise {
        if !form.scale_rubric.trim().is_empty() {
            return Err(ServiceError::Invalid(
                "a pairwise judge compares two answers; it scores no rubric scale".into(),
            ));
        }
        let prompt = match form.rubric.trim() {
            "" => DEFAULT_PAIRWISE_RUBRIC.to_string(),
            written if written == DEFAULT_RUBRIC.trim() => DEFAULT_PAIRWISE_RUBRIC.to_string(),
            _ => form.rubric.clone(),
        };
        validate_pairwise_rubric(&prompt).map_err(ServiceError::Invalid)?;
        let new = NewJudge {
            name: name.to_string(),
            checkpoint_id: form.checkpoint_id,
            rubric: prompt,
            max_tokens: form.max_tokens,
            scale: None,
            pairwise: true,
            batch_items: 1,
        };
        return Ok(store.create_judge(&new, created_by).await?);
    }
    let (scale, prompt) = match judge_scale(store, form).await? {
        // The form starts from the PASS/FAIL prompt; left as it is, a scale judge gets the
        // prompt made for its scale.
        Some((scale, default_prompt))
            if form.rubric.trim().is_empty() || form.rubric.trim() == DEFAULT_RUBRIC.trim() =>
        {
            (Some(scale), default_prompt)
        }
        // A prompt the researcher wrote must not still ask for PASS or FAIL (the one made
        // from the anchors may quote any words the anchors use).
        Some((scale, _)) => {
            scale
                .check_prompt(&form.rubric)
                .map_err(ServiceError::Invalid)?;
            (Some(scale), form.rubric.clone())
        }
        None => (None, form.rubric.clone()),
    };
    validate_rubric(&prompt).map_err(ServiceError::Invalid)?;
    let new = NewJudge {
        name: name.to_string(),
        checkpoint_id: form.checkpoint_id,
        rubric: prompt,
        max_tokens: form.max_tokens,
        scale,
        pairwise: false,
        batch_items: form.batch_items,
    };
    Ok(store.create_judge(&new, created_by).await?)
}

/// The scale a judge form asks for (on the rubric's newest version) and the prompt made from
/// its anchors; `None` for a PASS/FAIL judge.
async fn judge_scale(
    store: &dyn Store,
    form: &JudgeForm,
) -> ServiceResult<Option<(JudgeScale, String)>> {
    let name = form.scale_rubric.trim();
    if name.is_empty() {
        return Ok(None);
    }
    let stored = store.latest_rubric(name).await?.ok_or_else(|| {
        ServiceError::NotFound(format!(
            "there is no rubric `{name}`; define it on the Rubrics page"
        ))
    })?;
    let pass_at_least = match form.scale_pass_at_least.trim() {
        "" => None,
        text => Some(parse_number::<u8>(text, "the pass point")?),
    };
    let key = form.scale_dimension.trim();
    let scale = JudgeScale::of_rubric(
        (stored.id, &stored.name, stored.version),
        &stored.rubric,
        key,
        pass_at_least,
    )
    .map_err(ServiceError::Invalid)?;
    let dimension = stored
        .rubric
        .dimension(key)
        .expect("of_rubric found the dimension");
    let prompt = scale.default_prompt(dimension);
    Ok(Some((scale, prompt)))
}

/// A policy as typed into the form: numbers as text, judges by id ('' for none).
#[derive(Clone, Debug, Default)]
pub struct PolicyForm {
    pub cheap_judge: String,
    pub strong_judge: String,
    pub accept_threshold: String,
    pub escalate_threshold: String,
    pub audit_rate: String,
    pub judge_samples: String,
    pub human_usd_per_label: String,
    /// Raters per human item ('' for 1).
    pub human_overlap: String,
    /// Share of human labels a reviewer checks ('' for the default).
    pub review_rate: String,
    /// Skill tag raters need ('' for none).
    pub required_skill: String,
    /// The rubric raters answer, by name ('' for pass or fail).
    pub rubric: String,
    /// Re-tuning: the target error rate in percent ('' for none: only people change the
    /// policy), the accept threshold's bounds and the judge floor in percent ('' for the
    /// defaults).
    pub tune_target_error_percent: String,
    pub tune_min_accept: String,
    pub tune_max_accept: String,
    pub tune_judge_floor_percent: String,
    pub note: String,
}

fn parse_number<T: std::str::FromStr>(text: &str, what: &str) -> ServiceResult<T> {
    text.trim()
        .parse()
        .map_err(|_| ServiceError::Invalid(format!("{what} must be a number, not `{text}`")))
}

fn parse_judge(text: &str, what: &str) -> ServiceResult<Option<i64>> {
    match text.trim() {
        "" => Ok(None),
        text => parse_number(text, what).map(Some),
    }
}

impl PolicyForm {
    /// The re-tuning bounds typed, `None` without a target error rate.
    fn auto_tuning(&self) -> ServiceResult<Option<AutoTuning>> {
        let target = match self.tune_target_error_percent.trim() {
            "" => return Ok(None),
            text => parse_number::<f64>(text, "the re-tuning target error rate")? / 100.0,
        };
        let (min, max, floor) = arbiter_domain::grading::tuning::DEFAULT_BOUNDS;
        let or = |text: &str, default: f64, what: &str| match text.trim() {
            "" => Ok(default),
            text => parse_number::<f64>(text, what),
        };
        Ok(Some(AutoTuning {
            target_error_rate: target,
            min_accept_threshold: or(&self.tune_min_accept, min, "the lowest accept threshold")?,
            max_accept_threshold: or(&self.tune_max_accept, max, "the highest accept threshold")?,
            judge_floor: or(
                &self.tune_judge_floor_percent,
                floor * 100.0,
                "the judge floor",
            )? / 100.0,
        }))
    }

    pub fn parse(&self) -> ServiceResult<TriagePolicy> {
        let policy = TriagePolicy {
            cheap_judge: parse_judge(&self.cheap_judge, "the cheap judge")?,
            strong_judge: parse_judge(&self.strong_judge, "the strong judge")?,
            accept_threshold: parse_number(&self.accept_threshold, "the accept threshold")?,
            escalate_threshold: parse_number(&self.escalate_threshold, "the escalate threshold")?,
            audit_rate: parse_number(&self.audit_rate, "the audit rate")?,
            judge_samples: parse_number(&self.judge_samples, "judge samples")?,
            human_usd_per_label: parse_number(&self.human_usd_per_label, "the human label price")?,
            human_overlap: match self.human_overlap.trim() {
                "" => 1,
                text => parse_number(text, "raters per item")?,
            },
            review_rate: match self.review_rate.trim() {
                "" => arbiter_domain::grading::triage::DEFAULT_REVIEW_RATE,
                text => parse_number(text, "the review rate")?,
            },
            required_skill: match self.required_skill.trim() {
                "" => None,
                skill => Some(skill.to_lowercase()),
            },
            rubric: match self.rubric.trim() {
                "" => None,
                name => Some(name.to_string()),
            },
            auto_tuning: self.auto_tuning()?,
        };
        policy.validate().map_err(ServiceError::Invalid)?;
        Ok(policy)
    }
}

/// Saves the next version of an eval's policy; runs launched from now on use it.
/// Refuses `user` changing how an eval is graded unless they act for the team of whoever
/// defined it (leads and admins for every team; only they for evals the operator or a tool
/// defined). The policy is frozen into every later launch, that team's suites included.
pub async fn check_eval_owner(
    store: &dyn Store,
    user: &User,
    eval_id: EvalId,
) -> ServiceResult<()> {
    let team = store
        .eval_team(eval_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no eval with id {eval_id}")))?;
    let allowed = match &team {
        Some(team) => user.acts_for_team(team),
        None => user.oversees_every_team(),
    };
    if allowed {
        return Ok(());
    }
    Err(ServiceError::Forbidden(match team {
        Some(team) => format!(
            "eval {eval_id} belongs to team `{team}`; only its members, leads and admins change its triage policy"
        ),
        None => format!("eval {eval_id} was defined by the operator; only leads and admins change its triage policy"),
    }))
}

pub async fn save_policy(
    store: &dyn Store,
    eval_id: EvalId,
    form: &PolicyForm,
    created_by: Option<UserId>,
) -> ServiceResult<i64> {
    let policy = form.parse()?;
    // The rubric must exist and decide pass or fail now; its newest version at each launch is
    // what that run's raters answer.
    let rubric = match &policy.rubric {
        Some(name) => Some(freeze_rubric(store, name).await?),
        None => None,
    };
    for id in [policy.cheap_judge, policy.strong_judge]
        .into_iter()
        .flatten()
    {
        // An unknown judge is refused by the store with its own message.
        if let Some(judge) = store.get_judge(id).await? {
            if judge.pairwise {
                return Err(ServiceError::Invalid(format!(
                    "judge {} compares two answers; triage of single answers needs a PASS/FAIL or scale judge (a pairwise judge is asked first when pairs are sent from Compare)",
                    judge.grader_id()
                )));
            }
            if let Some(scale) = &judge.scale {
                check_scale_decides(&judge.grader_id(), scale, rubric.as_ref())?;
            }
        }
    }
    let note = form.note.trim().chars().take(1000).collect::<String>();
    Ok(store
        .save_grading_policy(eval_id, &policy, &note, None, created_by)
        .await?)
}

/// A judge on a rubric's scale must decide the verdict the policy's raters decide (see
/// [`JudgeScale::check_decides`]), on the rubric as frozen now: otherwise their labels could
/// never calibrate or re-tune it. Checked when the policy is saved and again at launch.
fn check_scale_decides(
    grader_id: &str,
    scale: &JudgeScale,
    rubric: Option<&FrozenRubric>,
) -> ServiceResult<()> {
    let Some(rubric) = rubric else {
        return Err(ServiceError::Invalid(format!(
            "judge {grader_id} scores rubric `{}`, so the policy's raters must answer that rubric",
            scale.rubric_name
        )));
    };
    scale
        .check_decides(&rubric.name, &rubric.rubric)
        .map_err(|why| ServiceError::Invalid(format!("judge {grader_id}: {why}")))
}

/// The eval's newest policy with its judges resolved, for a manifest; `None` without one.
pub async fn freeze_triage(
    store: &dyn Store,
    eval_id: EvalId,
) -> ServiceResult<Option<FrozenTriage>> {
    let Some(latest) = store.grading_policies(eval_id).await?.into_iter().next() else {
        return Ok(None);
    };
    // Both judges' endpoints are probed at once: a launch waits for the slower, not the sum.
    let freeze = |id: Option<i64>| async move {
        match id {
            Some(id) => freeze_judge(store, id).await.map(Some),
            None => Ok(None),
        }
    };
    let (cheap_judge, strong_judge) = tokio::join!(
        freeze(latest.policy.cheap_judge),
        freeze(latest.policy.strong_judge)
    );
    let (cheap_judge, strong_judge) = (cheap_judge?, strong_judge?);
    let rubric = match &latest.policy.rubric {
        Some(name) => Some(freeze_rubric(store, name).await?),
        None => None,
    };
    // The rubric may have changed since the policy was saved: a scale judge must still decide
    // its verdict, or the launch is refused with the reason.
    for judge in [&cheap_judge, &strong_judge].into_iter().flatten() {
        if let Some(scale) = &judge.scale {
            check_scale_decides(&judge.grader_id(), scale, rubric.as_ref())?;
        }
    }
    Ok(Some(FrozenTriage {
        policy_version: latest.version,
        policy: latest.policy,
        cheap_judge,
        strong_judge,
        rubric,
    }))
}

/// The newest version of the rubric `name`, which must decide pass or fail.
async fn freeze_rubric(
    store: &dyn Store,
    name: &str,
) -> ServiceResult<arbiter_domain::grading::triage::FrozenRubric> {
    let stored = store.latest_rubric(name).await?.ok_or_else(|| {
        ServiceError::Invalid(format!(
            "the triage policy names rubric `{name}`, which does not exist; define it on the Rubrics page"
        ))
    })?;
    crate::rubrics::check_decides(&stored)?;
    Ok(arbiter_domain::grading::triage::FrozenRubric {
        id: stored.id,
        name: stored.name,
        version: stored.version,
        content_hash: stored.content_hash,
        rubric: stored.rubric,
    })
}

pub(crate) async fn freeze_judge(store: &dyn Store, judge_id: i64) -> ServiceResult<JudgeSpec> {
    let judge = store
        .get_judge(judge_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no judge with id {judge_id}")))?;
    let checkpoint = store
        .list_checkpoints()
        .await?
        .into_iter()
        .find(|checkpoint| checkpoint.id == judge.checkpoint_id)
        .ok_or_else(|| {
            ServiceError::NotFound(format!(
                "the judge's checkpoint {} is gone",
                judge.checkpoint_id
            ))
        })?;
    // The model actually served, when the endpoint says; a changed judge model must never reuse
    // cached grades.
    let probed = probe_fingerprint(&checkpoint).await;
    let served = probed
        .served_model
        .unwrap_or_else(|| checkpoint.model.clone());
    Ok(JudgeSpec {
        judge_id: judge.id,
        name: judge.name.clone(),
        version: judge.version,
        rubric: judge.rubric.clone(),
        max_tokens: u32::try_from(judge.max_tokens).unwrap_or(1),
        checkpoint_name: checkpoint.name.clone(),
        endpoint_urls: std::iter::once(checkpoint.base_url.clone())
            .chain(checkpoint.replica_urls.iter().cloned())
            .collect(),
        served_model: checkpoint.model.clone(),
        fingerprint: format!(
            "{served}|{}|{}",
            checkpoint.engine_build, checkpoint.parallel_layout
        ),
        scale: judge.scale.clone(),
        pairwise: judge.pairwise,
        batch_items: u32::try_from(judge.batch_items).unwrap_or(1),
    })
}

pub async fn judge_report(store: &dyn Store, judge_id: i64) -> ServiceResult<JudgeReport> {
    let judge = store
        .get_judge(judge_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no judge with id {judge_id}")))?;
    let labelled = labelled_judgements(store, &judge.grader_id()).await?;
    let bins = reliability_bins(&labelled, RELIABILITY_BINS);
    let (grades, cost_usd) = store.judge_usage(&judge.grader_id()).await?;
    let scale_calibration = match &judge.scale {
        Some(scale) => Some(scale_calibration(store, &judge.grader_id(), scale).await?),
        None => None,
    };
    let canary = store
        .judge_canaries()
        .await?
        .into_iter()
        .find(|canary| canary.judge_id == judge.id);
    Ok(JudgeReport {
        canary,
        scale_calibration,
        reliability_svg: reliability_diagram_svg(
            &bins,
            &format!("{} against human labels", judge.grader_id()),
        ),
        accuracy: judge_accuracy(&labelled),
        bins,
        grades,
        cost_usd,
        judge,
    })
}

/// A scale judge's points against the raters' consensus on its dimension, on items whose
/// raters answered any version of the judge's rubric (a launch refuses a version whose scale
/// differs, so every point compared is on the judge's scale; others are left out).
async fn scale_calibration(
    store: &dyn Store,
    grader_id: &str,
    scale: &JudgeScale,
) -> ServiceResult<ScaleCalibration> {
    let items: Vec<ScoredAgainstRaters> = store
        .human_scored_judgements(grader_id, &scale.rubric_name)
        .await?
        .into_iter()
        .filter_map(|row| {
            Some(ScoredAgainstRaters {
                raters_point: raters_point(&row.consensus, &scale.dimension)?,
                judge: row.score,
                sampling_rate: row.sampling_rate,
            })
        })
        .collect();
    Ok(calibrate_scale(scale, &items, RELIABILITY_BINS))
}

pub(crate) async fn labelled_judgements(
    store: &dyn Store,
    grader_id: &str,
) -> ServiceResult<Vec<LabelledJudgement>> {
    Ok(store
        .human_checked_judgements(grader_id)
        .await?
        .into_iter()
        .map(|checked| LabelledJudgement {
            confidence: checked.confidence,
            judge_pass: checked.judge_pass,
            human_pass: checked.human_pass,
            // An audited verdict stands for the unlabelled ones accepted beside it.
            weight: 1.0 / checked.sampling_rate,
        })
        .collect())
}

/// What a recalibration changed and the data it used; stored with the new policy version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRecord {
    pub judge: String,
    pub target_error_rate: f64,
    pub old_accept_threshold: f64,
    pub old_escalate_threshold: f64,
    pub new_accept_threshold: f64,
    pub new_escalate_threshold: f64,
    pub result: Recalibration,
}

/// Sets the eval's accept threshold to the lowest confidence at which the cheap judge's
/// human-checked verdicts have at most `target_error_rate` errors, as a new policy version
/// that records the old and new thresholds and the data used.
pub async fn recalibrate(
    store: &dyn Store,
    eval_id: EvalId,
    target_error_rate: f64,
    created_by: Option<UserId>,
) -> ServiceResult<(i64, CalibrationRecord)> {
    let latest: PolicyVersion = store
        .grading_policies(eval_id)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| {
            ServiceError::Invalid("this eval has no triage policy to recalibrate".into())
        })?;
    let judge_id = latest
        .policy
        .cheap_judge
        .ok_or_else(|| ServiceError::Invalid("the policy has no judge to recalibrate".into()))?;
    let judge = store
        .get_judge(judge_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no judge with id {judge_id}")))?;
    let labelled = labelled_judgements(store, &judge.grader_id()).await?;
    let result =
        recalibrate_accept_threshold(&labelled, target_error_rate, MIN_ITEMS_ABOVE_THRESHOLD)
            .map_err(ServiceError::Invalid)?;
    let old = &latest.policy;
    let new_policy = TriagePolicy {
        accept_threshold: result.accept_threshold,
        escalate_threshold: old.escalate_threshold.min(result.accept_threshold),
        ..old.clone()
    };
    let record = CalibrationRecord {
        judge: judge.grader_id(),
        target_error_rate,
        old_accept_threshold: old.accept_threshold,
        old_escalate_threshold: old.escalate_threshold,
        new_accept_threshold: new_policy.accept_threshold,
        new_escalate_threshold: new_policy.escalate_threshold,
        result,
    };
    let note = format!(
        "recalibrated {} for at most {:.1}% errors: accept at {:.3} (was {:.3}); {:.1}% estimated \
         errors above it; an estimated {:.0}% of judged verdicts accepted ({} of {} human-checked \
         items above the threshold; audited items weighted by the inverse audit rate)",
        record.judge,
        target_error_rate * 100.0,
        record.new_accept_threshold,
        record.old_accept_threshold,
        result.expected_error_rate * 100.0,
        result.accepted_fraction * 100.0,
        result.items_above,
        result.items_used,
    );
    let version = store
        .save_grading_policy(
            eval_id,
            &new_policy,
            &note,
            Some(&serde_json::to_string(&record).expect("records always serialize")),
            created_by,
        )
        .await?;
    Ok((version, record))
}

pub async fn run_cost_report(store: &dyn Store, run_id: RunId) -> ServiceResult<CostReport> {
    let manifest = store
        .run_manifest(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))?;
    let costs = store.run_costs(run_id).await?;
    // Without a policy no price per label was set: labels are counted, not priced.
    let human_price = manifest
        .triage
        .as_ref()
        .map_or(0.0, |triage| triage.policy.human_usd_per_label);
    let human_usd = costs.human_labels as f64 * human_price;
    let total_usd = costs.generation_usd + costs.judging_usd + human_usd;
    Ok(CostReport {
        usd_per_item: total_usd / manifest.expected_results().max(1) as f64,
        human_usd,
        total_usd,
        costs,
    })
}
