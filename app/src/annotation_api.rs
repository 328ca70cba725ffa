//! Server functions for the human queue beyond labelling: senior review of labels, the rater
//! pool, and agreement between raters. Thin like [`crate::api`].

use crate::views::*;
use leptos::prelude::*;
#[cfg(feature = "ssr")]
use {
    crate::guard::{fail, require, service_error, store_error},
    arbiter_engine::auth::Permission,
    arbiter_engine::human_queue,
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
    }))
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
    human_queue::review(
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
fn rater_view(rater: arbiter_engine::annotation::pool::RaterStats) -> RaterView {
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
        labels_30d: rater.labels_30d,
        last_active: rater.last_active,
        flag: rater.flag,
    }
}

#[server(endpoint = "raters_page")]
pub async fn raters_page() -> Result<RatersPageData, ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    let (raters, threshold) = human_queue::rater_table(state.store.as_ref())
        .await
        .map_err(service_error)?;
    Ok(RatersPageData {
        raters: raters.into_iter().map(rater_view).collect(),
        threshold,
    })
}

/// Pause, resume, deactivate or activate a rater (`action`), or set their skills
/// (comma-separated) and weekly capacity in hours; fields left out are unchanged.
#[server(endpoint = "update_rater")]
pub async fn update_rater(
    rater_id: i64,
    #[server(default)] action: String,
    #[server(default)] skills: Option<String>,
    #[server(default)] weekly_capacity_hours: Option<String>,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    let form = human_queue::RaterForm {
        action,
        skills,
        weekly_capacity_hours,
    };
    human_queue::update_rater(state.store.as_ref(), user.id, rater_id, &form)
        .await
        .map_err(service_error)
}

/// The share (0 to 1) of review acceptance or agreement below which raters are flagged.
#[server(endpoint = "set_quality_threshold")]
pub async fn set_quality_threshold(threshold: String) -> Result<(), ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    human_queue::set_quality_threshold(state.store.as_ref(), &threshold)
        .await
        .map_err(service_error)
}

#[cfg(feature = "ssr")]
fn statistic_view(agreement: &arbiter_engine::annotation::agreement::Agreement) -> StatisticView {
    use arbiter_engine::annotation::agreement::Statistic;
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
    let report = human_queue::run_agreement(state.store.as_ref(), id)
        .await
        .map_err(service_error)?;
    Ok(AgreementView {
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
    })
}
