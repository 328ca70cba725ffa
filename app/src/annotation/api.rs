//! Server functions for the human queue beyond labelling: senior review of labels and spot
//! checks, the rater pool, the lead's queue page (SLAs, alerts, gold items, QC rates), and
//! agreement between raters. Thin: check the role, call the engine, convert.

use arbiter_domain::annotation::gold::{GoldCandidate, GoldItem};
use arbiter_domain::annotation::pool::RaterStats;
use arbiter_domain::annotation::queue_scan::AtRiskTask;
use arbiter_domain::annotation::review::{OwnLabel, ReviewItem};
use arbiter_domain::annotation::rubric::RubricEntry;
use arbiter_domain::annotation::sla::SlaDay;
use arbiter_domain::annotation::task::{AnnotationTask, ClaimHandle, TrainingFeedback};
use arbiter_domain::health::Alert;
use arbiter_domain::ids::{RunId, TaskId, UserId};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

/// The next label waiting for review (not the reviewer's own); `None` when there is none.
#[server(endpoint = "next_review")]
pub async fn next_review() -> Result<Option<ReviewItem>, ServerFnError> {
    let (state, user) = require(Permission::Review).await?;
    let mut item = state
        .store
        .next_review(user.id)
        .await
        .map_err(store_error)?;
    if let Some(item) = item.as_mut() {
        // The label is held for this reviewer now: a failure to rebuild the prompt shows the
        // stored item rather than an error that leaves the label held.
        if let Err(err) =
            arbiter_engine::runs::show_review_as_sent(state.store.as_ref(), item).await
        {
            tracing::warn!(error = %err, "cannot show a label under review as its eval sent it");
        }
    }
    Ok(item)
}

/// A spot check of another reviewer's decision: `uphold`, or `overturn` with the right
/// `verdict` (pass or fail) and a reason.
#[server(endpoint = "check_review")]
pub async fn check_review(
    review_id: i64,
    decision: String,
    #[server(default)] verdict: String,
    #[server(default)] reason: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Review).await?;
    arbiter_engine::annotation::review::check_review(
        state.store.as_ref(),
        review_id,
        user.id,
        &decision,
        &verdict,
        &reason,
    )
    .await
    .map_err(service_error)
}

/// `decision` is `accept`, `correct` (with `verdict` pass or fail, or for a rubric label its
/// corrected `answers` as JSON by dimension key) or `reject` (with a reason).
#[server(endpoint = "review_label")]
pub async fn review_label(
    label_id: i64,
    decision: String,
    #[server(default)] verdict: String,
    #[server(default)] answers: String,
    #[server(default)] reason: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Review).await?;
    arbiter_engine::annotation::review::review(
        state.store.as_ref(),
        label_id,
        user.id,
        &decision,
        &verdict,
        &answers,
        &reason,
    )
    .await
    .map_err(service_error)
}

/// `decision` on a rater's preference is `accept`, `correct` (with `choice` a, b, tie or
/// both_bad, sides as shown) or `reject` (with a reason).
#[server(endpoint = "review_preference")]
pub async fn review_preference(
    label_id: i64,
    decision: String,
    #[server(default)] choice: String,
    #[server(default)] reason: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Review).await?;
    arbiter_engine::annotation::review::review_preference(
        state.store.as_ref(),
        label_id,
        user.id,
        &decision,
        &choice,
        &reason,
    )
    .await
    .map_err(service_error)
}

#[server(endpoint = "raters_page")]
pub async fn raters_page() -> Result<RatersPageData, ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    let (raters, threshold) = arbiter_engine::annotation::raters::rater_table(state.store.as_ref())
        .await
        .map_err(service_error)?;
    Ok(RatersPageData {
        raters,
        threshold,
        viewer_is_admin: user.role == arbiter_domain::accounts::Role::Admin,
    })
}

/// Pause, resume, deactivate, activate, `train` or `end-training` a rater (`action`), or set
/// their skills (comma-separated), weekly capacity in hours, role and email; fields left out
/// are unchanged.
#[server(endpoint = "update_rater")]
pub async fn update_rater(
    rater_id: UserId,
    #[server(default)] action: String,
    #[server(default)] skills: Option<String>,
    #[server(default)] weekly_capacity_hours: Option<String>,
    #[server(default)] role: Option<String>,
    #[server(default)] email: Option<String>,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    let form = arbiter_engine::annotation::raters::RaterForm {
        action,
        skills,
        weekly_capacity_hours,
        role,
        email,
    };
    arbiter_engine::annotation::raters::update_rater(state.store.as_ref(), user.id, rater_id, &form)
        .await
        .map_err(service_error)
}

/// The share (0 to 1) of review acceptance or agreement below which raters are flagged.
#[server(endpoint = "set_quality_threshold")]
pub async fn set_quality_threshold(threshold: String) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    arbiter_engine::annotation::quality::set_quality_threshold(state.store.as_ref(), &threshold)
        .await
        .map_err(service_error)
}

#[cfg(feature = "ssr")]
pub(crate) fn statistic_view(
    agreement: &arbiter_domain::annotation::agreement::Agreement,
) -> StatisticView {
    use arbiter_domain::annotation::agreement::Statistic;
    StatisticView {
        value: agreement.statistic.value(),
        undefined_because: match &agreement.statistic {
            Statistic::Undefined { reason } => Some(reason.to_string()),
            Statistic::Defined(_) => None,
        },
        percent_agreement: agreement.percent_agreement,
    }
}

/// A run's rubric, dimension by dimension over its decided items (empty without a rubric).
#[server(endpoint = "run_dimensions")]
pub async fn run_dimensions(
    id: RunId,
) -> Result<Vec<arbiter_domain::reports::dimensions::DimensionSummary>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    arbiter_engine::rubrics::run_dimensions(state.store.as_ref(), id)
        .await
        .map_err(service_error)
}

/// Agreement between the raters of a run's human items: on the verdict, then on each
/// dimension of the run's rubric.
#[server(endpoint = "run_agreement")]
pub async fn run_agreement(id: RunId) -> Result<Vec<AgreementView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    if state
        .store
        .run_progress(id)
        .await
        .map_err(store_error)?
        .is_none()
    {
        return Err(fail(404, format!("no run with id {id}")));
    }
    let report = arbiter_engine::annotation::agreement::run_agreement(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    Ok(report.iter().map(agreement_view).collect())
}

#[cfg(feature = "ssr")]
fn agreement_view(
    report: &arbiter_engine::annotation::agreement::AgreementReport,
) -> AgreementView {
    AgreementView {
        dimension: report.dimension.clone(),
        level: report.level.as_str().to_string(),
        items: report.items,
        labels: report.labels,
        alpha: statistic_view(&report.alpha),
        alpha_interval: report.alpha_interval,
        fleiss: statistic_view(&report.fleiss),
        pairs: report
            .pairs
            .iter()
            .map(|pair| PairView {
                first: pair.first.clone(),
                second: pair.second.clone(),
                shared_items: pair.shared_items,
                kappa: statistic_view(&pair.kappa),
            })
            .collect(),
    }
}

/// Invites a rater: creates the account with a first password (shown once) and emails it to
/// them when an address is given.
#[server(endpoint = "invite_rater")]
pub async fn invite_rater(
    username: String,
    #[server(default)] role: String,
    #[server(default)] email: String,
    #[server(default)] skills: String,
    #[server(default)] weekly_capacity_hours: String,
    #[server(default)] training: Option<String>,
) -> Result<InvitedView, ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    let invitation = arbiter_engine::annotation::raters::Invitation {
        username,
        role,
        email,
        skills,
        weekly_capacity_hours,
        training: training.is_some_and(|value| !value.is_empty()),
    };
    let invited = arbiter_engine::annotation::raters::invite_rater(
        state.store.as_ref(),
        &state.mailer,
        &invitation,
    )
    .await
    .map_err(service_error)?;
    Ok(InvitedView {
        username: invited.username,
        password: invited.password,
        emailed: invited.emailed,
    })
}

/// The lead's queue page: backlog, ages, forecast, tasks at risk, SLA attainment, availability,
/// agreement per queue, alerts, gold items and the QC rates.
#[server(endpoint = "queue_page")]
pub async fn queue_page() -> Result<QueuePageData, ServerFnError> {
    use arbiter_engine::annotation::queue::queue_report;
    let (state, _) = require(Permission::ManageUsers).await?;
    let store = state.store.as_ref();
    let report = queue_report(store, arbiter_store::now_ms(), true)
        .await
        .map_err(service_error)?;
    let settings = arbiter_engine::annotation::quality::queue_settings(store)
        .await
        .map_err(service_error)?;
    let gold = store.gold_items().await.map_err(store_error)?;
    let candidates = store.gold_candidates(10).await.map_err(store_error)?;
    let floor = report.agreement_floor;
    Ok(QueuePageData {
        backlog_tasks: report.backlog_tasks,
        backlog_labels: report.backlog_labels,
        ages: report
            .ages
            .into_iter()
            .map(|(label, count)| CountView { label, count })
            .collect(),
        breached: report.breached,
        at_risk: report.at_risk,
        at_risk_tasks: report.listed,
        labels_per_hour: report.labels_per_hour,
        velocity_basis: report.velocity_basis,
        forecast_hours: report.forecast_hours,
        sla_days: report.sla_days.clone(),
        attainment_7d: report.attainment_7d,
        inflow_labels_per_week: report.availability.inflow_labels_per_week,
        seconds_per_label: report.availability.seconds_per_label,
        needed_hours_per_week: report.availability.needed_hours_per_week,
        capacity_hours_per_week: report.availability.capacity_hours_per_week,
        availability: report.availability.covered,
        backlog_hours: report.availability.backlog_hours,
        queues: report
            .queues
            .iter()
            .map(|(queue, agreement)| QueueAgreementView {
                queue: queue.clone(),
                dimension: agreement.dimension.clone(),
                below_floor: agreement
                    .alpha
                    .statistic
                    .value()
                    .is_some_and(|alpha| alpha < floor),
                agreement: agreement_view(agreement),
            })
            .collect(),
        alerts: report.alerts,
        gold_rate: settings.gold_rate,
        review_check_rate: settings.review_check_rate,
        agreement_floor: settings.agreement_floor,
        gold,
        gold_candidates: candidates,
    })
}

/// The gold rate, the spot-check rate and the agreement floor, set together (shares or
/// percentages); nothing changes unless all three are valid.
#[server(endpoint = "set_queue_settings")]
pub async fn set_queue_settings(
    gold_rate: String,
    review_check_rate: String,
    agreement_floor: String,
) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    arbiter_engine::annotation::quality::set_queue_settings(
        state.store.as_ref(),
        &gold_rate,
        &review_check_rate,
        &agreement_floor,
    )
    .await
    .map_err(service_error)
}

/// Makes an annotation item gold with a known `answer` (pass or fail) and an optional note
/// shown to raters in training.
#[server(endpoint = "create_gold")]
pub async fn create_gold(
    task_id: TaskId,
    answer: String,
    #[server(default)] note: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    arbiter_engine::annotation::quality::create_gold(
        state.store.as_ref(),
        user.id,
        task_id,
        &answer,
        &note,
    )
    .await
    .map(|_| ())
    .map_err(service_error)
}

#[server(endpoint = "retire_gold")]
pub async fn retire_gold(gold_id: i64) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    state.store.retire_gold(gold_id).await.map_err(store_error)
}

/// How long an annotator holds an item before it returns to the queue.
#[cfg(feature = "ssr")]
const ANNOTATION_LEASE_MS: i64 = 10 * 60 * 1000;

/// The annotator's current item (or a newly leased one); `None` when the queue is empty.
#[server(endpoint = "next_task")]
pub async fn next_task() -> Result<Option<TaskView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let store = state.store.as_ref();
    let mut task = store
        .next_annotation_task(user.id, ANNOTATION_LEASE_MS)
        .await
        .map_err(store_error)?;
    if let Some(task) = task.as_mut() {
        arbiter_engine::runs::show_task_as_sent(store, task)
            .await
            .map_err(service_error)?;
        if let Some(rubric) = task.rubric.as_mut() {
            arbiter_engine::rubrics::render_guidelines(rubric);
        }
    }
    let counts = store.annotation_queue_counts().await.map_err(store_error)?;
    // Leads make gold items by item id, so they see it; raters never do (a gold item's id
    // would give it away).
    let shows_item_id = user.role.can(Permission::ManageUsers);
    Ok(task.map(|task| TaskView {
        item_id: shows_item_id.then_some(task.task_id),
        task,
        remaining: counts.open + counts.leased,
    }))
}

/// Records a label: `verdict` is `pass` or `fail`.
#[server(endpoint = "submit_label")]
pub async fn submit_label(
    handle: ClaimHandle,
    verdict: String,
    rationale: String,
) -> Result<Option<TrainingFeedbackView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let pass = arbiter_domain::annotation::task::parse_label(&verdict, &rationale)
        .map_err(|message| fail(400, message))?;
    let feedback = state
        .store
        .submit_label(&handle, user.id, pass, &rationale)
        .await
        .map_err(store_error)?;
    Ok(feedback.map(training_view))
}

#[cfg(feature = "ssr")]
pub(crate) fn training_view(feedback: TrainingFeedback) -> TrainingFeedbackView {
    TrainingFeedbackView {
        out_of: feedback
            .answered
            .min(arbiter_domain::annotation::gold::TRAINING_ITEMS as u64),
        feedback,
    }
}

/// Every rubric by name: newest version, older versions, newest guidelines.
#[server(endpoint = "rubrics_page")]
pub async fn rubrics_page() -> Result<RubricsPageData, ServerFnError> {
    let (state, user) = require(Permission::ViewResults).await?;
    let rubrics = arbiter_engine::rubrics::rubric_entries(state.store.as_ref())
        .await
        .map_err(service_error)?;
    Ok(RubricsPageData {
        rubrics,
        can_edit: user.role.can(Permission::ManageUsers),
    })
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RubricsPageData {
    pub rubrics: Vec<RubricEntry>,
    /// Leads and admins define rubrics and guidelines.
    pub can_edit: bool,
}

/// Saves a rubric (JSON, see the page's example) as the next version of `name`; returns its
/// version number.
#[server(endpoint = "create_rubric")]
pub async fn create_rubric(
    name: String,
    definition: String,
    #[server(default)] note: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    arbiter_engine::rubrics::create_rubric(
        state.store.as_ref(),
        &name,
        &definition,
        &note,
        Some(user.id),
    )
    .await
    .map(|stored| stored.version)
    .map_err(service_error)
}

/// Saves the next version of a rubric's guidelines (markdown); returns its version number.
#[server(endpoint = "add_guidelines")]
pub async fn add_guidelines(
    rubric_name: String,
    markdown: String,
    #[server(default)] note: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    arbiter_engine::rubrics::add_guidelines(
        state.store.as_ref(),
        &rubric_name,
        &markdown,
        &note,
        Some(user.id),
    )
    .await
    .map(|stored| stored.version)
    .map_err(service_error)
}

/// Records answers to the rubric of the item held under `handle`: `answers` is a JSON object
/// by dimension key; `guideline_version` the guidelines the rater was shown.
#[server(endpoint = "submit_rubric_label")]
pub async fn submit_rubric_label(
    handle: ClaimHandle,
    answers: String,
    #[server(default)] rationale: String,
    #[server(default)] guideline_version: Option<i64>,
) -> Result<Option<TrainingFeedbackView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    if rationale.chars().count() > arbiter_domain::annotation::task::MAX_RATIONALE_CHARS {
        return Err(fail(
            400,
            format!(
                "the rationale is longer than {} characters",
                arbiter_domain::annotation::task::MAX_RATIONALE_CHARS
            ),
        ));
    }
    let feedback = arbiter_engine::rubrics::submit_answers(
        state.store.as_ref(),
        &handle,
        user.id,
        &answers,
        &rationale,
        guideline_version,
    )
    .await
    .map_err(service_error)?;
    Ok(feedback.map(training_view))
}

/// How many of their latest labels a rater's feedback page shows.
#[cfg(feature = "ssr")]
const OWN_LABELS_SHOWN: i64 = 50;

/// The rater's feedback: their labels a reviewer corrected or rejected (with the reasons), and
/// those they may still change.
#[server(endpoint = "own_labels")]
pub async fn own_labels() -> Result<Vec<OwnLabel>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let store = state.store.as_ref();
    let mut labels = store
        .own_labels(user.id, OWN_LABELS_SHOWN)
        .await
        .map_err(store_error)?;
    for label in &mut labels {
        arbiter_engine::runs::show_own_label_as_sent(store, label)
            .await
            .map_err(service_error)?;
    }
    Ok(labels)
}

/// Changes the rater's own label while its item waits for other raters: a pass/fail label to
/// `verdict` (`pass` or `fail`), a rubric label to new `answers` (JSON by dimension key).
#[server(endpoint = "edit_label")]
pub async fn edit_label(
    label_id: i64,
    #[server(default)] verdict: String,
    #[server(default)] answers: String,
    #[server(default)] rationale: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    arbiter_engine::rubrics::edit_own_label(
        state.store.as_ref(),
        label_id,
        user.id,
        &verdict,
        &answers,
        &rationale,
    )
    .await
    .map_err(service_error)
}

#[server(endpoint = "skip_task")]
pub async fn skip_task(handle: ClaimHandle) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    state
        .store
        .skip_task(&handle, user.id)
        .await
        .map_err(store_error)
}

/// Open + leased items in the human queue, for the home page.
#[server(endpoint = "queue_size")]
pub async fn queue_size() -> Result<i64, ServerFnError> {
    let (state, _) = require(Permission::Annotate).await?;
    let counts = state
        .store
        .annotation_queue_counts()
        .await
        .map_err(store_error)?;
    Ok(counts.open + counts.leased)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatersPageData {
    pub raters: Vec<RaterStats>,
    pub threshold: f64,
    /// Admins may change admins' accounts; leads see those rows without controls.
    pub viewer_is_admin: bool,
}

/// An agreement statistic: its value, or why it is undefined, with percent agreement beside.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatisticView {
    pub value: Option<f64>,
    pub undefined_because: Option<String>,
    pub percent_agreement: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairView {
    pub first: String,
    pub second: String,
    pub shared_items: u64,
    pub kappa: StatisticView,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgreementView {
    /// The rubric dimension, or `verdict`.
    pub dimension: String,
    /// Its level of measurement (nominal, ordinal, interval).
    pub level: String,
    pub items: u64,
    pub labels: u64,
    pub alpha: StatisticView,
    pub alpha_interval: Option<(f64, f64)>,
    pub fleiss: StatisticView,
    pub pairs: Vec<PairView>,
}

/// A new rater's account, shown once to the lead who invited them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvitedView {
    pub username: String,
    pub password: String,
    pub emailed: String,
}

/// What an annotator sees: the task (blind to the model, the checkpoint and the machine's
/// verdict) and how many items wait.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    #[serde(flatten)]
    pub task: AnnotationTask,
    /// The item's id, for leads and admins only.
    pub item_id: Option<TaskId>,
    pub remaining: i64,
}

/// What a rater in training learns after each answer, with how many of the latest answers
/// count towards passing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingFeedbackView {
    #[serde(flatten)]
    pub feedback: TrainingFeedback,
    pub out_of: u64,
}

/// One bar of a small distribution: a label and a count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountView {
    pub label: String,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueAgreementView {
    pub queue: String,
    /// `verdict`, or `rubric: dimension`.
    pub dimension: String,
    pub agreement: AgreementView,
    pub below_floor: bool,
}

/// The lead's queue page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuePageData {
    pub backlog_tasks: u64,
    pub backlog_labels: u64,
    pub ages: Vec<CountView>,
    pub breached: u64,
    pub at_risk: u64,
    pub at_risk_tasks: Vec<AtRiskTask>,
    pub labels_per_hour: f64,
    pub velocity_basis: String,
    pub forecast_hours: Option<f64>,
    pub sla_days: Vec<SlaDay>,
    pub attainment_7d: Option<f64>,
    pub inflow_labels_per_week: f64,
    pub seconds_per_label: Option<f64>,
    pub needed_hours_per_week: Option<f64>,
    pub capacity_hours_per_week: f64,
    pub availability: Option<f64>,
    pub backlog_hours: Option<f64>,
    pub queues: Vec<QueueAgreementView>,
    pub alerts: Vec<Alert>,
    pub gold_rate: f64,
    pub review_check_rate: f64,
    pub agreement_floor: f64,
    pub gold: Vec<GoldItem>,
    pub gold_candidates: Vec<GoldCandidate>,
}

/// Alpha's 95% interval, or why there is none for a large set (see
/// `arbiter_engine::annotation::agreement::bootstrap_resamples`).
pub(crate) fn interval_text(interval: Option<(f64, f64)>, items: u64) -> String {
    match interval {
        Some((low, high)) => format!(" (95% CI {low:.3} to {high:.3})"),
        None if items > 25_000 => {
            " (no bootstrap interval above 25,000 items; it is narrow there)".into()
        }
        None => String::new(),
    }
}

pub(crate) fn statistic_text(statistic: &StatisticView) -> String {
    let agreement = statistic
        .percent_agreement
        .map(|share| format!(" · {:.0}% raw agreement", share * 100.0))
        .unwrap_or_default();
    match (statistic.value, &statistic.undefined_because) {
        (Some(value), _) => format!("{value:.3}{agreement}"),
        (None, Some(reason)) => format!("undefined ({reason}){agreement}"),
        (None, None) => format!("undefined{agreement}"),
    }
}
