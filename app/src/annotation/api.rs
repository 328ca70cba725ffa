//! Server functions for the human queue beyond labelling: senior review of labels and spot
//! checks, the rater pool, the lead's queue page (SLAs, alerts, gold items, QC rates), and
//! agreement between raters. Thin: check the role, call the engine, convert.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
};

/// The next label waiting for review (not the reviewer's own); `None` when there is none.
#[server(endpoint = "next_review")]
pub async fn next_review() -> Result<Option<ReviewView>, ServerFnError> {
    let (state, user) = require(Permission::Review).await?;
    let item = state
        .store
        .next_review(user.id)
        .await
        .map_err(store_error)?;
    Ok(item.map(|item| ReviewView {
        label_id: item.label_id,
        rater: item.rater,
        input: item.input,
        target: item.target,
        output: item.output,
        verdict: if item.pass { "pass" } else { "fail" }.into(),
        rationale: item.rationale,
        why: item.why,
        check: item.check.map(|check| ReviewCheckView {
            review_id: check.review_id,
            reviewer: check.reviewer,
            decision: match (check.decision.as_str(), check.corrected_to) {
                ("corrected", Some(true)) => "corrected it to pass".into(),
                ("corrected", _) => "corrected it to fail".into(),
                ("accepted", _) => "accepted the label".into(),
                _ => "rejected the label".into(),
            },
            reason: check.reason,
        }),
    }))
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

/// `decision` is `accept`, `correct` (with `verdict` pass or fail) or `reject` (with a reason).
#[server(endpoint = "review_label")]
pub async fn review_label(
    label_id: i64,
    decision: String,
    #[server(default)] verdict: String,
    #[server(default)] reason: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Review).await?;
    arbiter_engine::annotation::review::review(
        state.store.as_ref(),
        label_id,
        user.id,
        &decision,
        &verdict,
        &reason,
    )
    .await
    .map_err(service_error)
}

#[cfg(feature = "ssr")]
fn rater_view(rater: arbiter_domain::annotation::pool::RaterStats) -> RaterView {
    RaterView {
        id: rater.id,
        username: rater.username,
        role: rater.role,
        active: rater.active,
        paused: rater.paused,
        skills: rater.skills.join(", "),
        weekly_capacity_hours: rater.weekly_capacity_hours,
        items_per_day: rater.items_per_day,
        median_seconds_per_item: rater.median_seconds_per_item,
        review_acceptance: rater.review_acceptance,
        agreement_with_consensus: rater.agreement_with_consensus,
        gold_accuracy: rater.gold_accuracy,
        gold_answered: rater.gold_answered,
        reviews_upheld: rater.reviews_upheld,
        email: rater.email.unwrap_or_default(),
        in_training: rater.training_since.is_some(),
        labels_30d: rater.labels_30d,
        last_active: rater.last_active,
        flag: rater.flag,
    }
}

#[server(endpoint = "raters_page")]
pub async fn raters_page() -> Result<RatersPageData, ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    let (raters, threshold) = arbiter_engine::annotation::raters::rater_table(state.store.as_ref())
        .await
        .map_err(service_error)?;
    Ok(RatersPageData {
        raters: raters.into_iter().map(rater_view).collect(),
        threshold,
    })
}

/// Pause, resume, deactivate, activate, `train` or `end-training` a rater (`action`), or set
/// their skills (comma-separated), weekly capacity in hours, role and email; fields left out
/// are unchanged.
#[server(endpoint = "update_rater")]
pub async fn update_rater(
    rater_id: i64,
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
fn statistic_view(agreement: &arbiter_domain::annotation::agreement::Agreement) -> StatisticView {
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

/// Agreement between the raters of a run's human items.
#[server(endpoint = "run_agreement")]
pub async fn run_agreement(id: i64) -> Result<AgreementView, ServerFnError> {
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
    Ok(agreement_view(&report))
}

#[cfg(feature = "ssr")]
fn agreement_view(
    report: &arbiter_engine::annotation::agreement::AgreementReport,
) -> AgreementView {
    AgreementView {
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
    use arbiter_domain::annotation::sla::DAY_MS;
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
        at_risk_tasks: report
            .listed
            .into_iter()
            .map(|task| AtRiskView {
                task_id: task.task_id,
                queue: task.queue,
                priority: task.priority,
                due_at: task.due_at,
                forecast_done_at: task.forecast_done_at,
                why: task.why,
            })
            .collect(),
        labels_per_hour: report.labels_per_hour,
        velocity_basis: report.velocity_basis,
        forecast_hours: report.forecast_hours,
        sla_days: report
            .sla_days
            .iter()
            .map(|day| SlaDayView {
                day_start: day.day * DAY_MS,
                completed: day.completed,
                on_time: day.on_time,
            })
            .collect(),
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
                below_floor: agreement
                    .alpha
                    .statistic
                    .value()
                    .is_some_and(|alpha| alpha < floor),
                agreement: agreement_view(agreement),
            })
            .collect(),
        alerts: report.alerts.into_iter().map(alert_view).collect(),
        gold_rate: settings.gold_rate,
        review_check_rate: settings.review_check_rate,
        agreement_floor: settings.agreement_floor,
        gold: gold
            .into_iter()
            .map(|item| GoldView {
                id: item.id,
                task_id: item.task_id,
                input: item.input,
                answer: if item.answer_pass { "pass" } else { "fail" }.into(),
                note: item.note,
                retired: item.retired_at.is_some(),
                answers: item.answers,
                right: item.right,
            })
            .collect(),
        gold_candidates: candidates
            .into_iter()
            .map(|candidate| GoldCandidateView {
                task_id: candidate.task_id,
                input: candidate.input,
                verdict: if candidate.verdict_pass {
                    "pass"
                } else {
                    "fail"
                }
                .into(),
                why: candidate.why,
            })
            .collect(),
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
    task_id: i64,
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

/// An alert as the queue and system pages show it.
#[cfg(feature = "ssr")]
pub(crate) fn alert_view(alert: arbiter_domain::health::Alert) -> AlertView {
    AlertView {
        id: alert.id,
        title: arbiter_engine::annotation::queue::alert_title(&alert.kind).into(),
        subject: alert.subject,
        message: alert.message,
        created_at: alert.created_at,
        updated_at: alert.updated_at,
        resolved_at: alert.resolved_at,
        emailed_at: alert.emailed_at,
    }
}

/// How long an annotator holds an item before it returns to the queue.
#[cfg(feature = "ssr")]
const ANNOTATION_LEASE_MS: i64 = 10 * 60 * 1000;

/// The annotator's current item (or a newly leased one); `None` when the queue is empty.
#[server(endpoint = "next_task")]
pub async fn next_task() -> Result<Option<TaskView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let store = state.store.as_ref();
    let task = store
        .next_annotation_task(user.id, ANNOTATION_LEASE_MS)
        .await
        .map_err(store_error)?;
    let counts = store.annotation_queue_counts().await.map_err(store_error)?;
    Ok(task.map(|task| TaskView {
        task_id: task.task_id,
        input: task.input,
        target: task.target,
        output: task.output,
        remaining: counts.open + counts.leased,
        training: task.training,
    }))
}

/// Records a label: `verdict` is `pass` or `fail`.
#[server(endpoint = "submit_label")]
pub async fn submit_label(
    task_id: i64,
    verdict: String,
    rationale: String,
) -> Result<Option<TrainingFeedbackView>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    let pass = match verdict.as_str() {
        "pass" => true,
        "fail" => false,
        other => {
            return Err(fail(
                400,
                format!("a label is `pass` or `fail`, not `{other}`"),
            ))
        }
    };
    if rationale.chars().count() > 5000 {
        return Err(fail(400, "the rationale is longer than 5000 characters"));
    }
    let feedback = state
        .store
        .submit_label(task_id, user.id, pass, &rationale)
        .await
        .map_err(store_error)?;
    Ok(feedback.map(|feedback| TrainingFeedbackView {
        correct: feedback.correct,
        answer: if feedback.answer_pass { "pass" } else { "fail" }.into(),
        note: feedback.note,
        answered: feedback.answered,
        latest_right: feedback.latest_right,
        out_of: feedback
            .answered
            .min(arbiter_domain::annotation::gold::TRAINING_ITEMS as u64),
        graduated: feedback.graduated,
    }))
}

#[server(endpoint = "skip_task")]
pub async fn skip_task(task_id: i64) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    state
        .store
        .skip_task(task_id, user.id)
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

/// What an annotator sees: the question, the reference answer and the model's output as text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    pub task_id: i64,
    pub input: String,
    pub target: String,
    pub output: String,
    pub remaining: i64,
    /// The rater is in training: each answer is checked against a known answer at once.
    pub training: bool,
}

/// What a rater in training learns after each answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingFeedbackView {
    pub correct: bool,
    /// `pass` or `fail`.
    pub answer: String,
    pub note: String,
    pub answered: u64,
    pub latest_right: u64,
    /// Items of the latest that count towards passing.
    pub out_of: u64,
    pub graduated: bool,
}

/// A label up for review, as a senior reviewer sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewView {
    pub label_id: i64,
    pub rater: String,
    pub input: String,
    pub target: String,
    pub output: String,
    /// `pass` or `fail`.
    pub verdict: String,
    pub rationale: String,
    pub why: String,
    /// Set when the reviewer is spot-checking another reviewer's decision on this label.
    pub check: Option<ReviewCheckView>,
}

/// Another reviewer's decision, up for a spot check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewCheckView {
    pub review_id: i64,
    pub reviewer: String,
    /// In words: "accepted the label", "corrected it to fail", "rejected it".
    pub decision: String,
    pub reason: String,
}

/// One member of the rater pool with their figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaterView {
    pub id: i64,
    pub username: String,
    pub role: String,
    pub active: bool,
    pub paused: bool,
    pub skills: String,
    pub weekly_capacity_hours: f64,
    pub items_per_day: f64,
    pub median_seconds_per_item: Option<f64>,
    pub review_acceptance: Option<f64>,
    pub agreement_with_consensus: Option<f64>,
    pub gold_accuracy: Option<f64>,
    pub gold_answered: u64,
    pub reviews_upheld: Option<f64>,
    pub email: String,
    pub in_training: bool,
    pub labels_30d: u64,
    pub last_active: Option<i64>,
    pub flag: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatersPageData {
    pub raters: Vec<RaterView>,
    pub threshold: f64,
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

/// One bar of a small distribution: a label and a count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountView {
    pub label: String,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtRiskView {
    pub task_id: i64,
    pub queue: String,
    pub priority: i64,
    pub due_at: i64,
    pub forecast_done_at: Option<i64>,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlaDayView {
    /// Start of the UTC day, in Unix milliseconds.
    pub day_start: i64,
    pub completed: u64,
    pub on_time: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertView {
    pub id: i64,
    pub title: String,
    pub subject: String,
    pub message: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
    pub emailed_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueAgreementView {
    pub queue: String,
    pub agreement: AgreementView,
    pub below_floor: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldView {
    pub id: i64,
    pub task_id: i64,
    pub input: String,
    /// `pass` or `fail`.
    pub answer: String,
    pub note: String,
    pub retired: bool,
    pub answers: u64,
    pub right: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldCandidateView {
    pub task_id: i64,
    pub input: String,
    pub verdict: String,
    pub why: String,
}

/// The lead's queue page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueuePageData {
    pub backlog_tasks: u64,
    pub backlog_labels: u64,
    pub ages: Vec<CountView>,
    pub breached: u64,
    pub at_risk: u64,
    pub at_risk_tasks: Vec<AtRiskView>,
    pub labels_per_hour: f64,
    pub velocity_basis: String,
    pub forecast_hours: Option<f64>,
    pub sla_days: Vec<SlaDayView>,
    pub attainment_7d: Option<f64>,
    pub inflow_labels_per_week: f64,
    pub seconds_per_label: Option<f64>,
    pub needed_hours_per_week: Option<f64>,
    pub capacity_hours_per_week: f64,
    pub availability: Option<f64>,
    pub backlog_hours: Option<f64>,
    pub queues: Vec<QueueAgreementView>,
    pub alerts: Vec<AlertView>,
    pub gold_rate: f64,
    pub review_check_rate: f64,
    pub agreement_floor: f64,
    pub gold: Vec<GoldView>,
    pub gold_candidates: Vec<GoldCandidateView>,
}
