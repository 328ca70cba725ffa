//! Trends along a training run and flaky prompts: the views the browser receives and the
//! server functions that fill them (thin: check the role, call `arbiter_engine::reports::trends`,
//! convert).

use arbiter_domain::ids::{CheckpointId, EvalId, RunId};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{fail, require, service_error, store_error},
    crate::reports::api::percent,
    arbiter_domain::accounts::Permission,
    arbiter_domain::reports::trend::BaselinePolicy,
    arbiter_engine::reports::trends,
};

/// What the trend page's pickers offer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendChoices {
    /// (id, name) of every eval.
    pub evals: Vec<(EvalId, String)>,
    pub training_runs: Vec<String>,
    /// (id, name) of every checkpoint, for pinning a baseline.
    pub checkpoints: Vec<(CheckpointId, String)>,
    pub watches: Vec<WatchView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchView {
    pub eval_id: EvalId,
    pub eval_name: String,
    pub training_run: String,
    pub policy: String,
}

/// One checkpoint's row of the trend table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendPointView {
    pub run_id: RunId,
    pub checkpoint_name: String,
    /// "step 1000", or "" when the checkpoint has no step.
    pub step: String,
    pub completeness: String,
    pub completed: u64,
    pub expected: u64,
    pub rate: String,
    pub interval: String,
    /// Per category of the trend (same order): "63.3% (51.4–73.8%)" or "–".
    pub category_rates: Vec<String>,
    /// Per metric over samples of the trend (same order): "81.0% (74.2–86.9%)" or "–".
    pub sample_values: Vec<String>,
    pub baseline_run_id: Option<RunId>,
    pub baseline: String,
    /// Overall change against the baseline on shared items, "+2.0 pts", or "".
    pub delta: String,
    pub regressions: Vec<String>,
    pub improvements: Vec<String>,
    pub note: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendView {
    pub eval_id: EvalId,
    pub training_run: String,
    pub policy: String,
    pub policy_description: String,
    pub categories: Vec<String>,
    /// With several samples per item: the metrics the trend compares ("pass@10", "maj@10").
    pub sample_metrics: Vec<String>,
    pub points: Vec<TrendPointView>,
    pub omitted: usize,
    pub elapsed_ms: u64,
    /// Pass rate over checkpoints with 95% bands: the whole run and up to three categories
    /// (or the focused one).
    pub chart_svg: String,
    pub watched: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlakyPromptView {
    pub case_id: String,
    pub category: String,
    pub input: String,
    pub passes: u32,
    pub fails: u32,
    pub flips: u32,
    pub split_checkpoints: u32,
    /// Per checkpoint: "✓", "✗", "2/3" (passes of decided repetitions) or "–".
    pub history: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlakyView {
    pub checkpoints: Vec<String>,
    pub prompts: Vec<FlakyPromptView>,
    pub skipped: Vec<String>,
    pub elapsed_ms: u64,
}

#[cfg(feature = "ssr")]
fn policy_of(policy: &str, pinned: &str) -> Result<BaselinePolicy, ServerFnError> {
    let pinned = match pinned.trim() {
        "" => None,
        text => Some(
            text.parse::<CheckpointId>()
                .map_err(|_| fail(400, format!("`{text}` is not a checkpoint id")))?,
        ),
    };
    BaselinePolicy::parse(policy, pinned).map_err(|message| fail(400, message))
}

#[cfg(feature = "ssr")]
mod convert {
    use super::*;
    use arbiter_domain::reports::CategoryReport;
    use arbiter_domain::stats::sampling::{compared_ks, SampleMetric, SampleMetricRow};
    use arbiter_engine::reports::trends::{FlakyReport, Trend, TrendPoint};

    /// The metrics over samples a trend shows: at each point, the k its comparisons test
    /// (10, 100, … and the number of samples), pass@k first, then pass^k and maj@k.
    pub fn sample_metrics(trend: &Trend) -> Vec<(SampleMetric, u64)> {
        let mut shown: Vec<(SampleMetric, u64)> = Vec::new();
        for point in &trend.points {
            let most = point
                .sample_metrics
                .iter()
                .map(|row| row.k)
                .max()
                .unwrap_or(0);
            let ks = compared_ks(most);
            for row in &point.sample_metrics {
                if ks.contains(&row.k) && !shown.contains(&(row.metric, row.k)) {
                    shown.push((row.metric, row.k));
                }
            }
        }
        shown.sort();
        shown
    }

    fn sample_row(point: &TrendPoint, metric: SampleMetric, k: u64) -> Option<&SampleMetricRow> {
        point
            .sample_metrics
            .iter()
            .find(|row| row.metric == metric && row.k == k)
    }

    fn rate_with_interval(report: Option<&CategoryReport>) -> String {
        match report {
            Some(c) if c.pass_rate.is_some() => match c.interval {
                Some(i) => format!(
                    "{} ({:.1}–{:.1}%)",
                    percent(c.pass_rate),
                    i.lower * 100.0,
                    i.upper * 100.0
                ),
                None => percent(c.pass_rate),
            },
            _ => "–".into(),
        }
    }

    fn display(category: &str) -> String {
        if category.is_empty() {
            "(none)".into()
        } else {
            category.to_string()
        }
    }

    pub fn point(
        point: &TrendPoint,
        categories: &[String],
        metrics: &[(SampleMetric, u64)],
    ) -> TrendPointView {
        TrendPointView {
            run_id: point.run_id,
            checkpoint_name: point.checkpoint_name.clone(),
            step: point
                .training_step
                .map(|step| format!("step {step}"))
                .unwrap_or_default(),
            completeness: point.completeness.label().into(),
            completed: point.completed,
            expected: point.expected,
            rate: percent(point.overall.pass_rate),
            interval: point.overall.interval.map_or_else(String::new, |i| {
                format!("{:.1}–{:.1}%", i.lower * 100.0, i.upper * 100.0)
            }),
            category_rates: categories
                .iter()
                .map(|name| {
                    rate_with_interval(point.categories.iter().find(|c| &c.category == name))
                })
                .collect(),
            sample_values: metrics
                .iter()
                .map(|&(metric, k)| match sample_row(point, metric, k) {
                    Some(row) => match row.interval {
                        Some(i) => format!(
                            "{} ({:.1}–{:.1}%)",
                            percent(Some(row.value)),
                            i.lower * 100.0,
                            i.upper * 100.0
                        ),
                        None => percent(Some(row.value)),
                    },
                    None => "–".into(),
                })
                .collect(),
            baseline_run_id: point.baseline.as_ref().map(|(run, _)| *run),
            baseline: point
                .baseline
                .as_ref()
                .map(|(_, name)| name.clone())
                .unwrap_or_default(),
            delta: point
                .comparison
                .as_ref()
                .and_then(|c| c.overall.delta)
                .map(|d| format!("{:+.1} pts", d * 100.0))
                .unwrap_or_default(),
            regressions: point.regressions().iter().map(|c| display(c)).collect(),
            improvements: point.improvements().iter().map(|c| display(c)).collect(),
            note: point.note.clone(),
        }
    }

    /// The whole run, then the focused category or the first three.
    pub fn chart(trend: &Trend, focus: &str) -> String {
        use arbiter_engine::reports::charts::trend::{trend_svg, TrendSeries};
        let labels: Vec<String> = trend
            .points
            .iter()
            .map(|p| {
                p.training_step
                    .map(|step| step.to_string())
                    .unwrap_or_else(|| p.checkpoint_name.clone())
            })
            .collect();
        let flagged = |category: &str| -> Vec<usize> {
            trend
                .points
                .iter()
                .enumerate()
                .filter(|(_, p)| p.regressions().iter().any(|c| c == category))
                .map(|(index, _)| index)
                .collect()
        };
        let mut series = vec![TrendSeries {
            label: "all".into(),
            points: trend
                .points
                .iter()
                .map(|p| Some((p.overall.pass_rate?, p.overall.interval)))
                .collect(),
            regressions: flagged("all"),
        }];
        // The headline metric over samples: pass@k at the most samples compared.
        if let Some(&(metric, k)) = sample_metrics(trend)
            .iter()
            .filter(|(metric, _)| *metric == SampleMetric::PassAtK)
            .max_by_key(|(_, k)| *k)
        {
            let label = metric.label(k);
            series.push(TrendSeries {
                label: label.clone(),
                points: trend
                    .points
                    .iter()
                    .map(|p| {
                        let row = sample_row(p, metric, k)?;
                        Some((row.value, row.interval))
                    })
                    .collect(),
                regressions: flagged(&label),
            });
        }
        let chosen: Vec<&String> = if focus.is_empty() {
            trend
                .categories
                .iter()
                .filter(|c| !c.is_empty())
                .take(3)
                .collect()
        } else {
            trend.categories.iter().filter(|c| *c == focus).collect()
        };
        for category in chosen {
            series.push(TrendSeries {
                label: category.clone(),
                points: trend
                    .points
                    .iter()
                    .map(|p| {
                        let c = p.categories.iter().find(|c| &c.category == category)?;
                        Some((c.pass_rate?, c.interval))
                    })
                    .collect(),
                regressions: flagged(category),
            });
        }
        trend_svg("Pass rate over training", &labels, &series)
    }

    pub fn flaky(report: FlakyReport) -> FlakyView {
        FlakyView {
            checkpoints: report.checkpoints,
            prompts: report
                .prompts
                .into_iter()
                .map(|p| FlakyPromptView {
                    case_id: p.case_id,
                    category: p.category,
                    input: p.input,
                    passes: p.record.passes,
                    fails: p.record.fails,
                    flips: p.record.flips,
                    split_checkpoints: p.record.split_checkpoints,
                    history: p
                        .record
                        .history
                        .iter()
                        .map(|&(passes, decided)| match (passes, decided) {
                            (_, 0) => "–".to_string(),
                            (1, 1) => "✓".to_string(),
                            (0, 1) => "✗".to_string(),
                            (passes, decided) => format!("{passes}/{decided}"),
                        })
                        .collect(),
                })
                .collect(),
            skipped: report.skipped,
            elapsed_ms: report.elapsed_ms,
        }
    }
}

#[server(endpoint = "trend_options")]
pub async fn trend_options() -> Result<TrendChoices, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let store = state.store.as_ref();
    Ok(TrendChoices {
        evals: store
            .list_evals()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(|e| (e.id, e.name))
            .collect(),
        training_runs: store.training_runs().await.map_err(store_error)?,
        checkpoints: store
            .list_checkpoints()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(|c| (c.id, c.name))
            .collect(),
        watches: store
            .trend_watches()
            .await
            .map_err(store_error)?
            .into_iter()
            .map(|w| WatchView {
                eval_id: w.eval_id,
                eval_name: w.eval_name,
                training_run: w.training_run,
                policy: w.policy,
            })
            .collect(),
    })
}

/// The eval's trend along `training_run` ('' for every checkpoint) under a baseline policy
/// (`first`, `previous`, `best`, or `pinned` with `pinned` a checkpoint id); the chart shows
/// the whole run and `focus` (a category), or the first three categories.
#[server(endpoint = "trend")]
pub async fn trend(
    eval: EvalId,
    training_run: String,
    policy: String,
    #[server(default)] pinned: String,
    #[server(default)] focus: String,
) -> Result<TrendView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let policy = policy_of(&policy, &pinned)?;
    let store = state.store.as_ref();
    let trend = trends::trend(store, eval, &training_run, policy)
        .await
        .map_err(service_error)?;
    let watched = store
        .trend_watches()
        .await
        .map_err(store_error)?
        .iter()
        .any(|w| w.eval_id == eval && w.training_run == training_run);
    let sample_metrics = convert::sample_metrics(&trend);
    Ok(TrendView {
        eval_id: eval,
        training_run: trend.training_run.clone(),
        policy: policy.name().into(),
        policy_description: policy.describe().into(),
        categories: trend
            .categories
            .iter()
            .map(|c| {
                if c.is_empty() {
                    "(none)".into()
                } else {
                    c.clone()
                }
            })
            .collect(),
        sample_metrics: sample_metrics
            .iter()
            .map(|(metric, k)| metric.label(*k))
            .collect(),
        points: trend
            .points
            .iter()
            .map(|p| convert::point(p, &trend.categories, &sample_metrics))
            .collect(),
        omitted: trend.omitted,
        elapsed_ms: trend.elapsed_ms,
        chart_svg: convert::chart(&trend, &focus),
        watched,
    })
}

/// The prompts whose verdict flips most across the trend's checkpoints and repetitions.
#[server(endpoint = "flaky_prompts")]
pub async fn flaky_prompts(eval: EvalId, training_run: String) -> Result<FlakyView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let report = trends::flaky_prompts(
        state.store.as_ref(),
        eval,
        &training_run,
        trends::FLAKY_LIMIT,
    )
    .await
    .map_err(service_error)?;
    Ok(convert::flaky(report))
}

/// Alerts the leads whenever the trend's latest complete checkpoint regresses against the
/// policy's baseline (checked as runs finish).
#[server(endpoint = "watch_trend")]
pub async fn watch_trend(
    eval: EvalId,
    training_run: String,
    policy: String,
    #[server(default)] pinned: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    arbiter_engine::grading::check_eval_owner(state.store.as_ref(), &user, eval)
        .await
        .map_err(service_error)?;
    let policy = policy_of(&policy, &pinned)?;
    trends::watch_trend(
        state.store.as_ref(),
        eval,
        &training_run,
        policy,
        Some(user.id),
    )
    .await
    .map_err(service_error)
}

#[server(endpoint = "unwatch_trend")]
pub async fn unwatch_trend(eval: EvalId, training_run: String) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    // Watches raise the leads' regression alerts: the eval's team (or a lead) removes them.
    arbiter_engine::grading::check_eval_owner(state.store.as_ref(), &user, eval)
        .await
        .map_err(service_error)?;
    state
        .store
        .delete_trend_watch(eval, &training_run)
        .await
        .map_err(store_error)
}
