//! Server functions of the System page: live health figures with their charts, and the alert
//! rules' thresholds (leads and admins change them).

use arbiter_domain::health::Alert;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::guard::{require, service_error};
#[cfg(feature = "ssr")]
use arbiter_domain::accounts::Permission;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostView {
    pub eval_name: String,
    pub team: String,
    pub answers: i64,
    pub answer_usd: f64,
    pub judge_usd: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    pub url: String,
    pub checkpoints: String,
    pub claimed: i64,
    pub limit: i64,
    pub waiting: Option<f64>,
    pub running: Option<f64>,
    /// Seconds since the server's queue was read.
    pub observed_age_s: Option<i64>,
    /// The server's prefix cache since it started, when its `/metrics` say.
    pub prefix_cache: Option<arbiter_domain::health::PrefixCacheReading>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerView {
    pub name: String,
    pub started_at: i64,
    pub heartbeat_age_s: i64,
    pub in_flight: i64,
    pub live: bool,
}

/// The alert rules as the form shows them ('' for a rule switched off).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RulesView {
    pub queue_growth_minutes: String,
    pub max_error_rate: String,
    pub max_p99_latency_s: String,
    pub daily_budget_usd: String,
    pub min_rater_availability: String,
    pub worker_silence_s: String,
    pub smoke_results_hours: String,
    pub full_results_hours: String,
    pub min_answers: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemView {
    pub now: i64,
    pub backend: String,
    pub queue_depth: i64,
    pub claimed: i64,
    pub queue_change_per_hour: Option<f64>,
    pub answers_last_hour: i64,
    pub errors_last_hour: i64,
    pub error_rate: Option<f64>,
    pub errors_by_category: Vec<(String, i64)>,
    pub p50_latency_ms: Option<f64>,
    pub p99_latency_ms: Option<f64>,
    pub queue_chart_svg: String,
    pub latency_chart_svg: String,
    pub cost_last_day_usd: f64,
    pub costs: Vec<CostView>,
    pub cost_by_team: Vec<(String, f64)>,
    pub endpoints: Vec<EndpointView>,
    pub workers: Vec<WorkerView>,
    pub live_workers: usize,
    pub rater_availability: Option<f64>,
    pub rater_capacity_hours_per_week: f64,
    pub rater_needed_hours_per_week: Option<f64>,
    pub human_backlog_tasks: u64,
    pub sla_attainment_7d: Option<f64>,
    pub sla_breached: u64,
    pub sla_at_risk: u64,
    /// Time to results per suite tier over the last week.
    pub results: Vec<arbiter_domain::health::results_objective::TierAttainment>,
    pub agreement: Vec<(String, f64)>,
    pub agreement_floor: f64,
    pub rules: RulesView,
    pub can_edit_rules: bool,
    pub retention_raw_days: i64,
    pub retention_summary_days: i64,
    /// What the last enforcement removed, and when.
    pub retention_last: Option<(i64, String)>,
    pub alerts: Vec<Alert>,
}

#[cfg(feature = "ssr")]
fn rules_view(rules: &arbiter_domain::health::rules::AlertRules) -> RulesView {
    let texts = rules.texts();
    RulesView {
        queue_growth_minutes: texts.queue_growth_minutes,
        max_error_rate: texts.max_error_rate,
        max_p99_latency_s: texts.max_p99_latency_s,
        daily_budget_usd: texts.daily_budget_usd,
        min_rater_availability: texts.min_rater_availability,
        worker_silence_s: texts.worker_silence_s,
        smoke_results_hours: texts.smoke_results_hours,
        full_results_hours: texts.full_results_hours,
        min_answers: texts.min_answers,
    }
}

#[server(endpoint = "system_health")]
pub async fn system_health() -> Result<SystemView, ServerFnError> {
    use arbiter_engine::health::{chart_buckets, system_health_cached, WORKER_LIVE_MS};
    use arbiter_engine::reports::charts::latency::latency_histogram_svg;
    use arbiter_engine::reports::charts::series::{time_series_svg, TimeAxis, TimeSeries};
    let (state, user) = require(Permission::ViewResults).await?;
    let health = system_health_cached(&state.store)
        .await
        .map_err(service_error)?;
    let now = health.now;
    let retention = arbiter_engine::retention::policy(state.store.as_ref())
        .await
        .map_err(service_error)?;
    let series =
        |label: &str, value: fn(&arbiter_domain::health::HealthSample) -> i64| TimeSeries {
            label: label.into(),
            points: health
                .samples
                .iter()
                .map(|sample| (sample.taken_at, value(sample) as f64))
                .collect(),
        };
    Ok(SystemView {
        now,
        backend: health.backend.clone(),
        queue_depth: health.queue_depth,
        claimed: health.claimed,
        queue_change_per_hour: health.queue_change_per_hour,
        answers_last_hour: health.last_hour.answers,
        errors_last_hour: health.last_hour.errors,
        error_rate: health.error_rate,
        errors_by_category: health.last_hour.errors_by_category.clone(),
        p50_latency_ms: health.p50_latency_ms,
        p99_latency_ms: health.p99_latency_ms,
        queue_chart_svg: time_series_svg(
            "Identities waiting and claimed, last 24 hours",
            "identities",
            &TimeAxis::hours_before(now, 24.0),
            &[
                series("waiting", |sample| sample.queue_depth),
                series("claimed by workers", |sample| sample.claimed),
            ],
        ),
        latency_chart_svg: latency_histogram_svg(
            "Answer latency, last hour",
            &chart_buckets(&health.last_hour.latency_buckets),
        ),
        cost_last_day_usd: health.cost_last_day_usd,
        costs: health
            .costs_last_day
            .iter()
            .map(|row| CostView {
                eval_name: row.eval_name.clone(),
                team: row.team.clone(),
                answers: row.answers,
                answer_usd: row.answer_usd,
                judge_usd: row.judge_usd,
            })
            .collect(),
        cost_by_team: health.cost_by_team.clone(),
        endpoints: health
            .endpoints
            .iter()
            .map(|load| EndpointView {
                url: load.base_url.clone(),
                checkpoints: load.checkpoints.join(", "),
                claimed: load.claimed,
                limit: load.max_in_flight,
                waiting: load.server_waiting,
                running: load.server_running,
                observed_age_s: load.observed_at.map(|at| (now - at) / 1_000),
                prefix_cache: load.prefix_cache,
            })
            .collect(),
        workers: health
            .workers
            .iter()
            .map(|worker| WorkerView {
                name: worker.name.clone(),
                started_at: worker.started_at,
                heartbeat_age_s: (now - worker.heartbeat_at) / 1_000,
                in_flight: worker.in_flight,
                live: worker.heartbeat_at > now - WORKER_LIVE_MS,
            })
            .collect(),
        live_workers: health.live_workers,
        rater_availability: health.rater_availability,
        rater_capacity_hours_per_week: health.rater_capacity_hours_per_week,
        rater_needed_hours_per_week: health.rater_needed_hours_per_week,
        human_backlog_tasks: health.human_backlog_tasks,
        sla_attainment_7d: health.sla_attainment_7d,
        sla_breached: health.sla_breached,
        sla_at_risk: health.sla_at_risk,
        results: health.results.clone(),
        agreement: health.agreement.clone(),
        agreement_floor: health.agreement_floor,
        rules: rules_view(&health.rules),
        can_edit_rules: user.role.can(Permission::ManageUsers),
        retention_raw_days: retention.raw_days,
        retention_summary_days: retention.summary_days,
        retention_last: arbiter_engine::retention::last_report(state.store.as_ref())
            .await
            .map_err(service_error)?
            .map(|report| (report.ran_at, report.summary())),
        // Low-agreement alerts name raters and their kappas: for those who manage the pool.
        alerts: health
            .alerts
            .iter()
            .filter(|alert| {
                user.role.can(Permission::ManageUsers)
                    || alert.kind != arbiter_domain::health::ALERT_LOW_AGREEMENT
            })
            .cloned()
            .collect(),
    })
}

/// New thresholds for the alert rules; '' switches a rule off. All or nothing.
#[server(endpoint = "save_alert_rules")]
pub async fn save_alert_rules(
    queue_growth_minutes: String,
    max_error_rate: String,
    max_p99_latency_s: String,
    daily_budget_usd: String,
    min_rater_availability: String,
    worker_silence_s: String,
    min_answers: String,
    // Absent (a caller from before the objective): the stored targets are kept.
    #[server(default)] smoke_results_hours: Option<String>,
    #[server(default)] full_results_hours: Option<String>,
) -> Result<RulesView, ServerFnError> {
    use arbiter_domain::health::rules::RuleTexts;
    let (state, user) = require(Permission::ManageUsers).await?;
    let stored = arbiter_engine::health::alert_rules(state.store.as_ref())
        .await
        .map_err(service_error)?
        .texts();
    let smoke_results_hours = smoke_results_hours.unwrap_or(stored.smoke_results_hours);
    let full_results_hours = full_results_hours.unwrap_or(stored.full_results_hours);
    let rules = arbiter_engine::health::set_alert_rules(
        state.store.as_ref(),
        &RuleTexts {
            queue_growth_minutes,
            max_error_rate,
            max_p99_latency_s,
            daily_budget_usd,
            min_rater_availability,
            worker_silence_s,
            smoke_results_hours,
            full_results_hours,
            min_answers,
        },
    )
    .await
    .map_err(service_error)?;
    tracing::info!(user = %user.username, ?rules, "alert rules changed");
    Ok(rules_view(&rules))
}

/// The retention policy: days raw answers and logprobs are kept, and days summaries are.
#[server(endpoint = "save_retention")]
pub async fn save_retention(raw_days: String, summary_days: String) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    let policy =
        arbiter_engine::retention::set_policy(state.store.as_ref(), &raw_days, &summary_days)
            .await
            .map_err(service_error)?;
    tracing::info!(user = %user.username, ?policy, "retention policy changed");
    Ok(())
}
