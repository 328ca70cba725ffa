//! Server functions for grading: judges, each eval's triage policy and its recalibration, judge
//! calibration reports and a run's cost by stage. Thin: check the role, call the engine, convert.

use crate::catalog::api::CheckpointView;
use arbiter_domain::grading::canary::JudgeCanary;
use arbiter_domain::grading::judge::{Judge, JudgeReport};
use arbiter_domain::grading::triage::PolicyVersion;
use arbiter_domain::ids::{EvalId, RunId};
use arbiter_domain::manifest::EvalSummary;
use arbiter_domain::run::{CostReport, RunSummary};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::catalog::api::checkpoint_views,
    crate::guard::{fail, require, service_error, store_error},
    arbiter_domain::accounts::Permission,
    arbiter_engine::grading,
};

#[server(endpoint = "judges_page")]
pub async fn judges_page() -> Result<JudgesPageData, ServerFnError> {
    let (state, user) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    Ok(JudgesPageData {
        judges: store.list_judges().await.map_err(store_error)?,
        checkpoints: checkpoint_views(store.list_checkpoints().await.map_err(store_error)?, &user),
        default_rubric: arbiter_domain::grading::judge::DEFAULT_RUBRIC.to_string(),
        canaries: store.judge_canaries().await.map_err(store_error)?,
        scales: arbiter_engine::rubrics::judged_scales(store)
            .await
            .map_err(service_error)?,
    })
}

/// Saves a judge; an existing name gets its next version.
#[server(endpoint = "create_judge")]
pub async fn create_judge(
    name: String,
    checkpoint_id: String,
    rubric: String,
    max_tokens: String,
    // A PASS/FAIL judge's form (and older API callers) send none of these.
    #[server(default)] scale_rubric: String,
    #[server(default)] scale_dimension: String,
    #[server(default)] scale_pass_at_least: String,
    // A checkbox: "on" when ticked, absent otherwise.
    #[server(default)] pairwise: String,
    // Older API callers send none: one answer per call.
    #[server(default)] batch_items: String,
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
        scale_rubric,
        scale_dimension,
        scale_pass_at_least,
        pairwise: !pairwise.trim().is_empty(),
        batch_items: match batch_items.trim() {
            "" => 1,
            given => given.parse().map_err(|_| {
                fail(
                    400,
                    format!("answers per call must be a number, not `{given}`"),
                )
            })?,
        },
    };
    let judge = grading::define_judge(state.store.as_ref(), &form, Some(user.id))
        .await
        .map_err(service_error)?;
    Ok(judge.id)
}

#[server(endpoint = "judge_detail")]
pub async fn judge_detail(id: i64) -> Result<JudgeReport, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    grading::judge_report(state.store.as_ref(), id)
        .await
        .map_err(service_error)
}

#[server(endpoint = "eval_detail")]
pub async fn eval_detail(id: EvalId) -> Result<EvalPageData, ServerFnError> {
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
        runs.push(EvalRunCost { run, cost: report });
    }
    Ok(EvalPageData {
        eval,
        policies,
        default_policy: PolicyVersion {
            eval_id: id,
            version: 0,
            policy: arbiter_domain::grading::triage::TriagePolicy::default(),
            note: String::new(),
            calibration_json: None,
            created_by: None,
            created_at: 0,
        },
        judges: store.list_judges().await.map_err(store_error)?,
        canaries: store.judge_canaries().await.map_err(store_error)?,
        checkpoints: store
            .list_checkpoints()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(|checkpoint| (checkpoint.id, checkpoint.name))
            .collect(),
        runs,
    })
}

/// Saves the next version of an eval's triage policy. Judges are ids ('' for none).
#[server(endpoint = "save_policy")]
pub async fn save_policy(
    eval_id: EvalId,
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
    #[server(default)] rubric: String,
    #[server(default)] tune_target_error_percent: String,
    #[server(default)] tune_min_accept: String,
    #[server(default)] tune_max_accept: String,
    #[server(default)] tune_judge_floor_percent: String,
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
        rubric,
        tune_target_error_percent,
        tune_min_accept,
        tune_max_accept,
        tune_judge_floor_percent,
        note,
    };
    grading::check_eval_owner(state.store.as_ref(), &user, eval_id)
        .await
        .map_err(service_error)?;
    grading::save_policy(state.store.as_ref(), eval_id, &form, Some(user.id))
        .await
        .map_err(service_error)
}

/// Recalibrates the accept threshold from human labels for a target error rate in percent.
#[server(endpoint = "recalibrate_policy")]
pub async fn recalibrate_policy(
    eval_id: EvalId,
    target_error_percent: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    grading::check_eval_owner(state.store.as_ref(), &user, eval_id)
        .await
        .map_err(service_error)?;
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
pub async fn run_costs(id: RunId) -> Result<CostReport, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    grading::run_cost_report(state.store.as_ref(), id)
        .await
        .map_err(service_error)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JudgesPageData {
    pub judges: Vec<Judge>,
    pub checkpoints: Vec<CheckpointView>,
    pub default_rubric: String,
    /// The judge versions' drift canaries.
    pub canaries: Vec<JudgeCanary>,
    /// Rubrics with dimensions a judge can score: (name, ordinal dimension keys).
    pub scales: Vec<(String, Vec<String>)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPageData {
    pub eval: EvalSummary,
    /// Newest first; the first is what new runs use.
    pub policies: Vec<PolicyVersion>,
    /// What the policy form starts from when the eval has no policy yet (version 0).
    pub default_policy: PolicyVersion,
    pub judges: Vec<Judge>,
    /// The judge versions' drift canaries, shown as a version is chosen.
    pub canaries: Vec<JudgeCanary>,
    /// The eval's runs, newest first, with their cost by stage.
    pub runs: Vec<EvalRunCost>,
    /// Checkpoints a preview may name: (id, name).
    pub checkpoints: Vec<(arbiter_domain::ids::CheckpointId, String)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRunCost {
    pub run: RunSummary,
    pub cost: CostReport,
}
