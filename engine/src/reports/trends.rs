//! Trends along a training run over the store: each checkpoint's latest run of an eval, its
//! report, and a paired comparison against the baseline its policy names; the prompts that
//! flip most across those checkpoints; and the watches that turn a regression into an alert
//! for the leads. Snapshots are read one at a time and only the baselines are kept, so memory
//! stays at a few snapshots whatever the number of checkpoints.

use crate::error::{ServiceError, ServiceResult};
use crate::reports::compare::compare_runs;
use crate::reports::runs::{manifest_of, report_and_snapshot, snapshot_of, RunView};
use arbiter_domain::health::ALERT_REGRESSION;
use arbiter_domain::ids::{CheckpointId, EvalId, IdentityId, RunId, UserId};
use arbiter_domain::reports::compare::{apply_correction, PairedCategory, PairedComparison};
use arbiter_domain::reports::sample_compare::SampleMetricTest;
use arbiter_domain::reports::trend::{
    baseline_index, BaselinePolicy, EarlierPoint, FlakyCase, FlakyTracker, MAX_TREND_POINTS,
};
use arbiter_domain::reports::trend::{TrendRun, TrendWatch};
use arbiter_domain::reports::{CategoryReport, Completeness, Report};
use arbiter_domain::stats::correction::Correction;
use arbiter_domain::stats::sampling::SampleMetricRow;
use arbiter_store::Store;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Instant;

/// Prompts listed in the flaky view.
pub const FLAKY_LIMIT: usize = 50;

/// One checkpoint of a trend.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrendPoint {
    pub run_id: RunId,
    pub checkpoint_id: CheckpointId,
    pub checkpoint_name: String,
    pub training_step: Option<i64>,
    pub completeness: Completeness,
    pub completed: u64,
    pub expected: u64,
    pub overall: CategoryReport,
    pub categories: Vec<CategoryReport>,
    /// With several samples per item: pass@k, pass^k and maj@k at every k.
    #[serde(default)]
    pub sample_metrics: Vec<SampleMetricRow>,
    /// The run it was compared against, and that comparison (Holm-corrected over its
    /// categories); `None` with `note` saying why when there was nothing to compare against.
    pub baseline: Option<(RunId, String)>,
    pub comparison: Option<PairedComparison>,
    pub note: String,
}

impl TrendPoint {
    /// Categories ("all" for the whole run) and metrics over samples ("pass@10") significantly
    /// worse than the baseline.
    pub fn regressions(&self) -> Vec<String> {
        self.findings(
            PairedCategory::is_regression,
            SampleMetricTest::is_regression,
        )
    }

    pub fn improvements(&self) -> Vec<String> {
        self.findings(
            PairedCategory::is_improvement,
            SampleMetricTest::is_improvement,
        )
    }

    fn findings(
        &self,
        keep_category: impl Fn(&PairedCategory) -> bool,
        keep_metric: impl Fn(&SampleMetricTest) -> bool,
    ) -> Vec<String> {
        let Some(comparison) = &self.comparison else {
            return Vec::new();
        };
        std::iter::once(&comparison.overall)
            .chain(&comparison.categories)
            .filter(|category| keep_category(category))
            .map(|category| category.category.clone())
            .chain(
                comparison
                    .sample_metrics
                    .iter()
                    .filter(|test| keep_metric(test))
                    .map(SampleMetricTest::label),
            )
            .collect()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Trend {
    pub eval_id: EvalId,
    pub training_run: String,
    pub policy: BaselinePolicy,
    /// Category names over all points, in first-seen order.
    pub categories: Vec<String>,
    pub points: Vec<TrendPoint>,
    /// Earlier checkpoints left out (only the latest [`MAX_TREND_POINTS`] are shown).
    pub omitted: usize,
    pub elapsed_ms: u64,
}

/// The latest runs of a trend, oldest first, and how many earlier ones were left out.
async fn latest_trend_runs(
    store: &dyn Store,
    eval_id: EvalId,
    training_run: &str,
) -> ServiceResult<(Vec<TrendRun>, usize)> {
    let mut runs = store.trend_runs(eval_id, training_run).await?;
    if runs.is_empty() {
        return Err(ServiceError::NotFound(if training_run.is_empty() {
            "this eval has no runs yet".into()
        } else {
            format!("this eval has no runs on checkpoints of training run `{training_run}`")
        }));
    }
    let omitted = runs.len().saturating_sub(MAX_TREND_POINTS);
    runs.drain(..omitted);
    Ok((runs, omitted))
}

/// The eval's trend along a training run ('' for every checkpoint), each point compared with
/// the baseline `policy` names.
pub async fn trend(
    store: &dyn Store,
    eval_id: EvalId,
    training_run: &str,
    policy: BaselinePolicy,
) -> ServiceResult<Trend> {
    let started = Instant::now();
    let (runs, omitted) = latest_trend_runs(store, eval_id, training_run).await?;
    // A pinned baseline may come later in training order (or sit outside the shown window of
    // the same trend); read it first.
    let mut pinned: Option<(RunId, String, RunView)> = None;
    if let BaselinePolicy::Pinned(checkpoint_id) = policy {
        let run = runs
            .iter()
            .find(|run| run.checkpoint_id == checkpoint_id)
            .ok_or_else(|| {
                ServiceError::Invalid(
                    "the pinned checkpoint has no run of this eval among the trend's checkpoints"
                        .into(),
                )
            })?;
        let view = report_and_snapshot(store, run.run_id).await?;
        if view.report.completeness != Completeness::Complete {
            return Err(ServiceError::Invalid(format!(
                "the pinned checkpoint `{}` has a {} report: pin a checkpoint whose run is complete",
                run.checkpoint_name,
                view.report.completeness.label()
            )));
        }
        pinned = Some((run.run_id, run.checkpoint_name.clone(), view));
    }
    let mut categories: Vec<String> = Vec::new();
    let mut earlier: Vec<EarlierPoint> = Vec::new();
    // Snapshots of earlier points a later point may still be compared against.
    let mut kept: HashMap<usize, RunView> = HashMap::new();
    let mut points = Vec::new();
    for run in &runs {
        let view = report_and_snapshot(store, run.run_id).await?;
        let report = &view.report;
        for category in &report.categories {
            if !categories.contains(&category.category) {
                categories.push(category.category.clone());
            }
        }
        let mut point = point_of(run, report);
        let baseline: Option<(RunId, String, &RunView)> = match &pinned {
            Some((run_id, name, snapshot)) => Some((*run_id, name.clone(), snapshot)),
            None => baseline_index(policy, &earlier).and_then(|index| {
                kept.get(&index).map(|snapshot| {
                    (
                        runs[index].run_id,
                        runs[index].checkpoint_name.clone(),
                        snapshot,
                    )
                })
            }),
        };
        match baseline {
            Some((baseline_run, _, _)) if baseline_run == run.run_id => {
                point.note = "this is the baseline".into();
            }
            Some((baseline_run, name, baseline_view)) => {
                match compare_runs(baseline_view, &view) {
                    Ok(comparison) => {
                        let mut comparisons = [comparison];
                        apply_correction(&mut comparisons, Correction::Holm);
                        let [comparison] = comparisons;
                        point.comparison = Some(comparison);
                    }
                    Err(reason) => point.note = reason,
                }
                point.baseline = Some((baseline_run, name));
            }
            None => {
                point.note = format!("no baseline yet: {}", policy.describe());
            }
        }
        earlier.push(EarlierPoint {
            checkpoint_id: run.checkpoint_id,
            complete: report.completeness == Completeness::Complete,
            overall_rate: report.overall.pass_rate,
        });
        kept.insert(earlier.len() - 1, view);
        // Every later point's baseline is the one the policy names now or a point not seen
        // yet (first stays first; previous and best only move forward), so keep just that.
        let needed = baseline_index(policy, &earlier).filter(|_| pinned.is_none());
        kept.retain(|index, _| Some(*index) == needed);
        points.push(point);
    }
    Ok(Trend {
        eval_id,
        training_run: training_run.to_string(),
        policy,
        categories,
        points,
        omitted,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

fn point_of(run: &TrendRun, report: &Report) -> TrendPoint {
    TrendPoint {
        run_id: run.run_id,
        checkpoint_id: run.checkpoint_id,
        checkpoint_name: run.checkpoint_name.clone(),
        training_step: run.training_step,
        completeness: report.completeness,
        completed: report.completed,
        expected: report.expected,
        overall: report.overall.clone(),
        categories: report.categories.clone(),
        sample_metrics: report.sample_metrics.clone(),
        baseline: None,
        comparison: None,
        note: String::new(),
    }
}

/// One prompt that flips often, with what it asks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlakyPrompt {
    pub case_id: String,
    pub category: String,
    pub input: String,
    pub record: FlakyCase,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlakyReport {
    /// Checkpoint names in trend order (the columns of each prompt's history).
    pub checkpoints: Vec<String>,
    pub prompts: Vec<FlakyPrompt>,
    /// Runs left out because they list other result identities than the first one.
    pub skipped: Vec<String>,
    pub elapsed_ms: u64,
}

/// Longest prompt text shown in the flaky view.
const FLAKY_INPUT_CHARS: usize = 300;

/// The prompts whose verdict flips most across the trend's checkpoints and repetitions.
pub async fn flaky_prompts(
    store: &dyn Store,
    eval_id: EvalId,
    training_run: &str,
    limit: usize,
) -> ServiceResult<FlakyReport> {
    let started = Instant::now();
    let (runs, _) = latest_trend_runs(store, eval_id, training_run).await?;
    let mut tracker: Option<FlakyTracker> = None;
    let mut first_ids: Vec<IdentityId> = Vec::new();
    let mut checkpoints = Vec::new();
    let mut skipped = Vec::new();
    for run in &runs {
        let snapshot = snapshot_of(store, run.run_id).await?;
        if tracker.is_none() {
            let repetitions = manifest_of(store, run.run_id).await?.eval.repetitions;
            first_ids = snapshot.identity_ids.clone();
            tracker = Some(FlakyTracker::new(&snapshot, repetitions.max(1) as usize));
        }
        let Some(tracker) = tracker.as_mut() else {
            continue;
        };
        if tracker.add(&snapshot) {
            checkpoints.push(run.checkpoint_name.clone());
        } else {
            skipped.push(format!(
                "run {} on `{}` lists other result identities (another dataset revision, case list or repetition count)",
                run.run_id, run.checkpoint_name
            ));
        }
    }
    let ranked = tracker
        .map(|tracker| tracker.most_flaky(limit))
        .unwrap_or_default();
    let ids: Vec<IdentityId> = ranked
        .iter()
        .filter_map(|case| first_ids.get(case.position).copied())
        .collect();
    let sides: HashMap<IdentityId, arbiter_domain::reports::diff::DiffSide> = store
        .diff_sides(&ids)
        .await?
        .into_iter()
        .map(|side| (side.identity_id, side))
        .collect();
    let prompts = ranked
        .into_iter()
        .filter_map(|record| {
            let side = sides.get(first_ids.get(record.position)?)?;
            Some(FlakyPrompt {
                case_id: side.case_id.clone(),
                category: side.category.clone(),
                input: side.input.chars().take(FLAKY_INPUT_CHARS).collect(),
                record,
            })
        })
        .collect();
    Ok(FlakyReport {
        checkpoints,
        prompts,
        skipped,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Saves a watch after checking that its trend can be computed as asked.
pub async fn watch_trend(
    store: &dyn Store,
    eval_id: EvalId,
    training_run: &str,
    policy: BaselinePolicy,
    created_by: Option<UserId>,
) -> ServiceResult<()> {
    trend(store, eval_id, training_run, policy).await?;
    let watch = TrendWatch {
        eval_id,
        eval_name: String::new(),
        training_run: training_run.to_string(),
        policy: policy.name().to_string(),
        pinned_checkpoint_id: policy.pinned_checkpoint(),
    };
    Ok(store.save_trend_watch(&watch, created_by).await?)
}

/// The alert subject of a watched trend.
pub fn watch_subject(watch: &TrendWatch) -> String {
    if watch.training_run.is_empty() {
        format!("eval `{}`", watch.eval_name)
    } else {
        format!(
            "eval `{}` on training run `{}`",
            watch.eval_name, watch.training_run
        )
    }
}

/// What a watched trend's latest complete checkpoint says: the alert message when it
/// regressed against its baseline.
pub fn regression_message(trend: &Trend) -> Option<String> {
    let point = trend
        .points
        .iter()
        .rev()
        .find(|point| point.completeness == Completeness::Complete)?;
    let regressions = point.regressions();
    let (_, baseline_name) = point.baseline.as_ref()?;
    if regressions.is_empty() {
        return None;
    }
    let comparison = point.comparison.as_ref()?;
    let overall = comparison
        .overall
        .delta
        .map(|delta| format!(" (overall {:+.1} points)", delta * 100.0))
        .unwrap_or_default();
    Some(format!(
        "checkpoint `{}` regressed against {} `{}` in: {}{overall}. Tests: {}, Holm-corrected.",
        point.checkpoint_name,
        trend.policy.describe(),
        baseline_name,
        regressions.join(", "),
        comparison.overall.method()
    ))
}

/// Checks every watched trend: raises an alert for each whose latest complete checkpoint
/// regressed and resolves those that no longer do. Returns (raised, resolved).
pub async fn check_watches(store: &dyn Store, now: i64) -> ServiceResult<(u64, u64)> {
    let mut raised = 0;
    let mut still_open = Vec::new();
    for watch in store.trend_watches().await? {
        let policy = match BaselinePolicy::parse(&watch.policy, watch.pinned_checkpoint_id) {
            Ok(policy) => policy,
            Err(_) => continue,
        };
        let trend = match trend(store, watch.eval_id, &watch.training_run, policy).await {
            Ok(trend) => trend,
            // A trend without runs yet has nothing to alert on.
            Err(ServiceError::NotFound(_) | ServiceError::Invalid(_)) => continue,
            Err(other) => return Err(other),
        };
        if let Some(message) = regression_message(&trend) {
            let subject = watch_subject(&watch);
            raised += u64::from(
                store
                    .raise_alert(ALERT_REGRESSION, &subject, &message, now)
                    .await?,
            );
            still_open.push(subject);
        }
    }
    let resolved = store
        .resolve_alerts(ALERT_REGRESSION, &still_open, now)
        .await?;
    Ok((raised, resolved))
}
