//! Server functions for grading: judges, each eval's triage policy and its recalibration, judge
//! calibration reports and a run's cost by stage. Thin: check the role, call the engine, convert.

use crate::catalog::api::CheckpointView;
use arbiter_domain::manifest::EvalSummary;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::catalog::api::checkpoint_views,
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
    arbiter_engine::grading,
};

#[cfg(feature = "ssr")]
fn judge_view(judge: arbiter_domain::grading::judge::Judge) -> JudgeView {
    JudgeView {
        id: judge.id,
        grader_id: judge.grader_id(),
        name: judge.name,
        version: judge.version,
        checkpoint_name: judge.checkpoint_name,
        rubric: judge.rubric,
        max_tokens: judge.max_tokens,
    }
}

#[server(endpoint = "judges_page")]
pub async fn judges_page() -> Result<JudgesPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    Ok(JudgesPageData {
        judges: store
            .list_judges()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(judge_view)
            .collect(),
        checkpoints: checkpoint_views(store.list_checkpoints().await.map_err(store_error)?),
        default_rubric: arbiter_domain::grading::judge::DEFAULT_RUBRIC.to_string(),
    })
}

/// Saves a judge; an existing name gets its next version.
#[server(endpoint = "create_judge")]
pub async fn create_judge(
    name: String,
    checkpoint_id: String,
    rubric: String,
    max_tokens: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let form = grading::JudgeForm {
        name,
        checkpoint_id: checkpoint_id
            .trim()
            .parse()
            .map_err(|_| fail(400, "pick the judge's checkpoint"))?,
        rubric,
        max_tokens: max_tokens.trim().parse().map_err(|_| {
            fail(
                400,
                format!("max tokens must be a number, not `{max_tokens}`"),
            )
        })?,
    };
    let judge = grading::define_judge(state.store.as_ref(), &form, Some(user.id))
        .await
        .map_err(service_error)?;
    Ok(judge.id)
}

#[server(endpoint = "judge_detail")]
pub async fn judge_detail(id: i64) -> Result<JudgeReportView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let report = grading::judge_report(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    Ok(JudgeReportView {
        judge: judge_view(report.judge),
        labelled: report.accuracy.items,
        accuracy: report.accuracy.accuracy,
        kappa: report.accuracy.kappa,
        expected_calibration_error: report.accuracy.expected_calibration_error,
        bins: report
            .bins
            .into_iter()
            .map(|bin| BinView {
                lower: bin.lower,
                upper: bin.upper,
                count: bin.count,
                mean_confidence: bin.mean_confidence,
                accuracy: bin.accuracy,
            })
            .collect(),
        reliability_svg: report.reliability_svg,
        grades: report.grades,
        cost_usd: report.cost_usd,
    })
}

#[server(endpoint = "eval_detail")]
pub async fn eval_detail(id: i64) -> Result<EvalPageData, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    let eval = store
        .get_eval(id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| fail(404, format!("no eval with id {id}")))?;
    let policies = store.grading_policies(id).await.map_err(store_error)?;
    let mut runs = Vec::new();
    for run in store.list_runs().await.map_err(store_error)? {
        if run.eval_id != id {
            continue;
        }
        // One unreadable run must not take the eval's page down with it.
        let Ok(report) = grading::run_cost_report(store, run.id).await else {
            continue;
        };
        runs.push(EvalRunCost {
            run_id: run.id,
            checkpoint_name: run.checkpoint_name,
            status: run.status.to_string(),
            expected: run.expected_count,
            cost: cost_view(report),
        });
    }
    Ok(EvalPageData {
        eval,
        policies: policies.into_iter().map(policy_view).collect(),
        default_policy: policy_view(arbiter_domain::grading::triage::PolicyVersion {
            eval_id: id,
            version: 0,
            policy: arbiter_domain::grading::triage::TriagePolicy::default(),
            note: String::new(),
            calibration_json: None,
            created_by: None,
            created_at: 0,
        }),
        judges: store
            .list_judges()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(judge_view)
            .collect(),
        runs,
    })
}

#[cfg(feature = "ssr")]
fn policy_view(version: arbiter_domain::grading::triage::PolicyVersion) -> PolicyView {
    PolicyView {
        version: version.version,
        cheap_judge: version.policy.cheap_judge,
        strong_judge: version.policy.strong_judge,
        accept_threshold: version.policy.accept_threshold,
        escalate_threshold: version.policy.escalate_threshold,
        audit_rate: version.policy.audit_rate,
        judge_samples: version.policy.judge_samples,
        human_usd_per_label: version.policy.human_usd_per_label,
        human_overlap: version.policy.human_overlap,
        review_rate: version.policy.review_rate,
        required_skill: version.policy.required_skill.unwrap_or_default(),
        note: version.note,
        calibration_json: version.calibration_json,
        created_by: version.created_by,
        created_at: version.created_at,
    }
}

#[cfg(feature = "ssr")]
fn cost_view(report: grading::CostReport) -> CostView {
    CostView {
        generation_usd: report.costs.generation_usd,
        judging_usd: report.costs.judging_usd,
        human_usd: report.human_usd,
        total_usd: report.total_usd,
        usd_per_item: report.usd_per_item,
        generation_calls: report.costs.generation_calls,
        cached_generations: report.costs.cached_generations,
        judge_grades: report.costs.judge_grades,
        cached_judge_grades: report.costs.cached_judge_grades,
        human_labels: report.costs.human_labels,
        decided_by: report.costs.decided_by,
    }
}

/// Saves the next version of an eval's triage policy. Judges are ids ('' for none).
#[server(endpoint = "save_policy")]
pub async fn save_policy(
    eval_id: i64,
    cheap_judge: String,
    #[server(default)] strong_judge: String,
    accept_threshold: String,
    escalate_threshold: String,
    audit_rate: String,
    judge_samples: String,
    human_usd_per_label: String,
    #[server(default)] human_overlap: String,
    #[server(default)] review_rate: String,
    #[server(default)] required_skill: String,
    #[server(default)] note: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let form = grading::PolicyForm {
        cheap_judge,
        strong_judge,
        accept_threshold,
        escalate_threshold,
        audit_rate,
        judge_samples,
        human_usd_per_label,
        human_overlap,
        review_rate,
        required_skill,
        note,
    };
    grading::save_policy(state.store.as_ref(), eval_id, &form, Some(user.id))
        .await
        .map_err(service_error)
}

/// Recalibrates the accept threshold from human labels for a target error rate in percent.
#[server(endpoint = "recalibrate_policy")]
pub async fn recalibrate_policy(
    eval_id: i64,
    target_error_percent: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let percent: f64 = target_error_percent.trim().parse().map_err(|_| {
        fail(
            400,
            format!("the target error rate must be a percentage, not `{target_error_percent}`"),
        )
    })?;
    let (version, _) = grading::recalibrate(
        state.store.as_ref(),
        eval_id,
        percent / 100.0,
        Some(user.id),
    )
    .await
    .map_err(service_error)?;
    Ok(version)
}

#[server(endpoint = "run_costs")]
pub async fn run_costs(id: i64) -> Result<CostView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let report = grading::run_cost_report(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    Ok(cost_view(report))
}

/// A judge version with how it has done so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgeView {
    pub id: i64,
    /// `judge:name@version`, as on its grades.
    pub grader_id: String,
    pub name: String,
    pub version: i64,
    pub checkpoint_name: String,
    pub rubric: String,
    pub max_tokens: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgesPageData {
    pub judges: Vec<JudgeView>,
    pub checkpoints: Vec<CheckpointView>,
    pub default_rubric: String,
}

/// One bin of a reliability diagram.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BinView {
    pub lower: f64,
    pub upper: f64,
    pub count: u64,
    pub mean_confidence: Option<f64>,
    pub accuracy: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgeReportView {
    pub judge: JudgeView,
    /// Human-checked verdicts the figures are computed from.
    pub labelled: u64,
    pub accuracy: Option<f64>,
    pub kappa: Option<f64>,
    pub expected_calibration_error: Option<f64>,
    pub bins: Vec<BinView>,
    /// Server-rendered SVG of the reliability diagram (no user text inside but the judge id,
    /// which the renderer escapes).
    pub reliability_svg: String,
    pub grades: i64,
    pub cost_usd: f64,
}

/// One version of an eval's triage policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    pub version: i64,
    pub cheap_judge: Option<i64>,
    pub strong_judge: Option<i64>,
    pub accept_threshold: f64,
    pub escalate_threshold: f64,
    pub audit_rate: f64,
    pub judge_samples: u32,
    pub human_usd_per_label: f64,
    pub human_overlap: u32,
    pub review_rate: f64,
    /// '' when any rater may label.
    pub required_skill: String,
    pub note: String,
    pub calibration_json: Option<String>,
    pub created_by: Option<String>,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPageData {
    pub eval: EvalSummary,
    /// Newest first; the first is what new runs use.
    pub policies: Vec<PolicyView>,
    /// What the policy form starts from when the eval has no policy yet (version 0).
    pub default_policy: PolicyView,
    pub judges: Vec<JudgeView>,
    /// The eval's runs, newest first, with their cost by stage.
    pub runs: Vec<EvalRunCost>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRunCost {
    pub run_id: i64,
    pub checkpoint_name: String,
    pub status: String,
    pub expected: i64,
    pub cost: CostView,
}

/// A run's cost by stage and who decided its items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostView {
    pub generation_usd: f64,
    pub judging_usd: f64,
    pub human_usd: f64,
    pub total_usd: f64,
    pub usd_per_item: f64,
    pub generation_calls: i64,
    pub cached_generations: i64,
    pub judge_grades: i64,
    pub cached_judge_grades: i64,
    pub human_labels: i64,
    pub decided_by: Vec<(String, i64)>,
}
