//! Reports and checkpoint comparisons: the views the browser receives and the server
//! functions that fill them (thin: check the role, call `arbiter_engine::reports`, convert).

use arbiter_domain::ids::{IdentityId, RunId};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{require, service_error},
    arbiter_domain::accounts::Permission,
};

/// One category's (or the whole run's) counts and pooled rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CategoryView {
    pub category: String,
    pub passed: u64,
    pub failed: u64,
    pub uncertain: u64,
    pub errors: u64,
    /// Scored without a verdict (rolling likelihood).
    pub scored: u64,
    /// Non-zero outcomes other than ok: ("truncated", 3), …
    pub outcome_mix: Vec<(String, u64)>,
    /// "63.3%" or "–".
    pub rate: String,
    /// "51.4–73.8%" or "".
    pub interval: String,
    pub interval_method: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportView {
    pub run_id: RunId,
    pub checkpoint_name: String,
    pub status: String,
    /// COMPLETE, PARTIAL or INVALID.
    pub completeness: String,
    pub completed: u64,
    pub expected: u64,
    pub problems: Vec<String>,
    pub overall: CategoryView,
    pub categories: Vec<CategoryView>,
    /// Checkpoint registration to the run's completion, e.g. "3.2 min"; empty until then.
    pub time_to_results: String,
    /// Pass rate by category with intervals (server-rendered SVG); empty without categories.
    pub chart_svg: String,
    /// Outcome mix by category (or of the whole run), SVG; its numbers are the table's.
    pub outcome_chart_svg: String,
    /// Answers per latency bucket: ("0.5–1 s", 120), …; empty before any answer.
    pub latency: Vec<(String, u64)>,
    pub latency_chart_svg: String,
    /// With several repetitions: pass@k and pass^k for each k.
    pub sample_metrics: Vec<arbiter_domain::stats::sampling::SampleMetricRow>,
    /// For conversations: each turn's results; empty when every item is one request.
    pub turns: Vec<arbiter_domain::reports::TurnReport>,
    /// For likelihood evals: acc, acc_norm, acc_bytes, the probability on the right answer.
    pub likelihood: Option<arbiter_domain::reports::likelihood::LikelihoodReport>,
    /// For rolling-likelihood evals: perplexities and bits per byte.
    pub rolling: Option<arbiter_domain::reports::rolling::RollingReport>,
    /// With a contamination check: scores with and without the items found in the corpus.
    pub contamination: Option<arbiter_domain::contamination::ContaminationReport>,
    /// For instruction-following evals: IFEval's four accuracies and each instruction's rates.
    pub instructions: Option<arbiter_domain::reports::instructions::InstructionsReport>,
}

/// One paired test of a candidate against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairedView {
    pub category: String,
    pub shared: u64,
    pub both_pass: u64,
    pub pass_to_fail: u64,
    pub fail_to_pass: u64,
    pub both_fail: u64,
    pub baseline_rate: String,
    pub candidate_rate: String,
    /// "+4.0 pts" with its interval "−1.2 to +9.1 pts".
    pub delta: String,
    pub interval: String,
    pub p_value: String,
    pub adjusted_p: String,
    /// "regression", "improvement" or "" (no significant change).
    pub finding: String,
    /// The test behind p and the interval: exact McNemar, or the paired bootstrap over cases
    /// when the runs have repetitions.
    pub method: String,
}

/// A metric over samples (pass@k, pass^k, maj@k) compared against the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleTestView {
    /// "pass@10".
    pub metric: String,
    pub items: u64,
    pub cases: u64,
    /// "1,200 / 1,180": the samples each side's scores rest on.
    pub samples: String,
    pub baseline: String,
    pub candidate: String,
    pub delta: String,
    pub interval: String,
    pub p_value: String,
    pub adjusted_p: String,
    /// "regression", "improvement" or "".
    pub finding: String,
    pub method: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateView {
    pub report: ReportView,
    pub overall: PairedView,
    pub categories: Vec<PairedView>,
    pub sample_tests: Vec<SampleTestView>,
    pub changed: u64,
    /// For likelihood evals: the paired t-test on the right answer's log-likelihood.
    pub likelihood: Option<arbiter_domain::reports::likelihood::PairedValueTest>,
    /// For rolling-likelihood evals: the paired bootstrap of bits per byte.
    pub rolling: Option<arbiter_domain::reports::rolling::PairedBitsPerByte>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointComparisonView {
    pub eval_name: String,
    pub baseline: ReportView,
    pub candidates: Vec<CandidateView>,
    pub correction: String,
    pub elapsed_ms: u64,
    /// Every run's pass rate by category with intervals, one marker shape per run.
    pub chart_svg: String,
    /// Each run's outcome mix, one bar per run (numbers in each report card).
    pub outcome_chart_svg: String,
}

/// A recorded promotion decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    pub id: i64,
    pub baseline_run_id: RunId,
    pub candidate_run_id: RunId,
    pub baseline_checkpoint: String,
    pub candidate_checkpoint: String,
    /// promote or reject.
    pub decision: String,
    pub note: String,
    pub decided_by: String,
    pub decided_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideView {
    pub identity_id: IdentityId,
    pub output: String,
    pub outcome: String,
    pub verdict: String,
    pub decided_by: String,
    /// "stage grader: verdict (confidence) — reason", oldest first.
    pub grades: Vec<String>,
    pub labels: Vec<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffRowView {
    /// regression, lost_pass, improvement or other.
    pub change: String,
    /// "pass → fail", …
    pub change_label: String,
    pub case_id: String,
    pub repetition: i64,
    /// The turn of a conversation (from 1; 1 for items that are not conversations).
    pub turn: i64,
    pub category: String,
    pub input: String,
    pub target: String,
    /// Images the item was sent with (data URLs).
    pub images: Vec<String>,
    pub baseline: SideView,
    pub candidate: SideView,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffPageView {
    pub rows: Vec<DiffRowView>,
    pub matching: u64,
    pub offset: usize,
    pub next_offset: Option<usize>,
    pub searched: usize,
    pub search_truncated: bool,
    /// Categories of the baseline, for the filter.
    pub categories: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenView {
    pub token: String,
    pub probability: String,
    pub alternatives: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergenceView {
    pub index: usize,
    pub shared_prefix: String,
    pub baseline: Option<TokenView>,
    pub candidate: Option<TokenView>,
    pub note: Option<String>,
}

pub fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{:.1}%", v * 100.0))
}

#[cfg(feature = "ssr")]
fn points(value: f64) -> String {
    let sign = if value > 0.0 {
        "+"
    } else if value < 0.0 {
        "−"
    } else {
        "±"
    };
    format!("{sign}{:.1} pts", value.abs() * 100.0)
}

#[cfg(feature = "ssr")]
fn p_text(p: f64) -> String {
    if p < 0.0001 {
        "<0.0001".to_string()
    } else {
        format!("{p:.4}")
    }
}

#[cfg(feature = "ssr")]
mod convert {
    use super::*;
    use arbiter_domain::answer::Outcome;
    use arbiter_domain::reports::compare::PairedCategory;
    use arbiter_domain::reports::diff::DiffSide;
    use arbiter_domain::reports::sample_compare::SampleMetricTest;
    use arbiter_domain::reports::{CategoryReport, Report};
    use arbiter_domain::run::RunProgress;
    use arbiter_engine::reports::diff::{DiffRow, TokenChoice};

    pub fn category(report: &CategoryReport) -> CategoryView {
        CategoryView {
            category: if report.category.is_empty() {
                "(none)".into()
            } else {
                report.category.clone()
            },
            passed: report.passed,
            failed: report.failed,
            uncertain: report.uncertain,
            errors: report.errors,
            scored: report.scored,
            outcome_mix: Outcome::ALL
                .iter()
                .zip(report.outcomes)
                .skip(1)
                .filter(|(_, count)| *count > 0)
                .map(|(outcome, count)| (outcome.as_str().to_string(), count))
                .collect(),
            rate: percent(report.pass_rate),
            interval: report.interval.map_or_else(String::new, |i| {
                format!("{:.1}–{:.1}%", i.lower * 100.0, i.upper * 100.0)
            }),
            interval_method: report.interval_method.clone(),
        }
    }

    /// A test's finding as the views name it.
    fn finding(regression: bool, improvement: bool) -> String {
        if regression {
            "regression".into()
        } else if improvement {
            "improvement".into()
        } else {
            String::new()
        }
    }

    pub fn report(run: &RunProgress, report: &Report) -> ReportView {
        ReportView {
            run_id: run.id,
            checkpoint_name: run.checkpoint_name.clone(),
            status: run.status.to_string(),
            completeness: report.completeness.label().to_string(),
            completed: report.completed,
            expected: report.expected,
            problems: report.explanations(),
            overall: category(&report.overall),
            categories: report.categories.iter().map(category).collect(),
            time_to_results: run
                .time_to_results_ms
                .map(|ms| crate::format::human_duration(ms as f64 / 1000.0))
                .unwrap_or_default(),
            chart_svg: String::new(),
            outcome_chart_svg: String::new(),
            latency: report
                .latency
                .iter()
                .enumerate()
                .map(|(bucket, &count)| {
                    (
                        arbiter_domain::reports::latency::bucket_label(bucket),
                        count,
                    )
                })
                .collect(),
            latency_chart_svg: String::new(),
            sample_metrics: report.sample_metrics.clone(),
            turns: report.turns.clone(),
            likelihood: report.likelihood.clone(),
            rolling: report.rolling.clone(),
            contamination: report.contamination.clone(),
            instructions: report.instructions.clone(),
        }
    }

    /// The outcome mix of each (label, outcome counts) row.
    pub fn outcome_chart(title: &str, rows: Vec<(String, [u64; 6])>) -> String {
        arbiter_engine::reports::charts::outcomes::outcome_mix_svg(title, &rows)
    }

    /// Outcome mix by category, or of the whole run when it has none.
    pub fn report_outcome_chart(report: &Report) -> String {
        let rows: Vec<(String, [u64; 6])> = if report.categories.is_empty() {
            vec![("all".into(), report.overall.outcomes)]
        } else {
            report
                .categories
                .iter()
                .map(|c| (c.category.clone(), c.outcomes))
                .collect()
        };
        outcome_chart("Outcome mix by category", rows)
    }

    pub fn latency_chart(report: &Report) -> String {
        if report.latency.iter().all(|&count| count == 0) {
            return String::new();
        }
        arbiter_engine::reports::charts::latency::latency_histogram_svg("Latency", &report.latency)
    }

    /// Pass rate by category for each (label, report), categories in the first report's order.
    pub fn rates_chart(reports: &[(String, &Report)]) -> String {
        use arbiter_engine::reports::charts::rates::{category_rates_svg, RateSeries};
        let categories: Vec<String> = reports
            .first()
            .map(|(_, r)| r.categories.iter().map(|c| c.category.clone()).collect())
            .unwrap_or_default();
        let series: Vec<RateSeries> = reports
            .iter()
            .map(|(label, report)| RateSeries {
                label: label.clone(),
                points: categories
                    .iter()
                    .map(|name| {
                        let c = report.categories.iter().find(|c| &c.category == name)?;
                        Some((c.pass_rate?, c.interval))
                    })
                    .collect(),
            })
            .collect();
        category_rates_svg("Pass rate by category", &categories, &series)
    }

    pub fn paired(test: &PairedCategory) -> PairedView {
        let t = test.table;
        PairedView {
            category: if test.category.is_empty() {
                "(none)".into()
            } else {
                test.category.clone()
            },
            shared: test.shared,
            both_pass: t.both_pass,
            pass_to_fail: t.pass_to_fail,
            fail_to_pass: t.fail_to_pass,
            both_fail: t.both_fail,
            baseline_rate: percent(test.baseline_rate),
            candidate_rate: percent(test.candidate_rate),
            delta: test.delta.map(points).unwrap_or_else(|| "–".into()),
            interval: test.interval.map_or_else(String::new, |i| {
                format!("{} to {}", points(i.lower), points(i.upper))
            }),
            p_value: p_text(test.p_value),
            adjusted_p: p_text(test.adjusted_p),
            method: test.method().to_string(),
            finding: finding(test.is_regression(), test.is_improvement()),
        }
    }

    pub fn sample_test(test: &SampleMetricTest) -> SampleTestView {
        SampleTestView {
            metric: test.label(),
            items: test.items,
            cases: test.cases,
            samples: format!("{} / {}", test.baseline_samples, test.candidate_samples),
            baseline: percent(Some(test.baseline)),
            candidate: percent(Some(test.candidate)),
            delta: points(test.difference()),
            interval: test.bootstrap.map_or_else(String::new, |b| {
                format!(
                    "{} to {}",
                    points(b.interval.lower),
                    points(b.interval.upper)
                )
            }),
            p_value: p_text(test.p_value),
            adjusted_p: p_text(test.adjusted_p),
            finding: finding(test.is_regression(), test.is_improvement()),
            method: test.method.clone(),
        }
    }

    pub fn side(side: &DiffSide) -> SideView {
        SideView {
            identity_id: side.identity_id,
            output: side.output.clone(),
            outcome: side.outcome.clone(),
            verdict: side.verdict.clone(),
            decided_by: side.decided_by.clone(),
            grades: side
                .grades
                .iter()
                .map(|g| {
                    let confidence = g
                        .confidence
                        .map(|c| format!(" ({:.0}% sure)", c * 100.0))
                        .unwrap_or_default();
                    format!(
                        "{} {}: {}{confidence} — {}",
                        g.stage, g.grader, g.verdict, g.reason
                    )
                })
                .collect(),
            labels: side.labels.clone(),
            error: side.error.clone(),
        }
    }

    pub fn row(row: &DiffRow) -> DiffRowView {
        DiffRowView {
            change: row.change.as_str().into(),
            change_label: row.change.label().into(),
            case_id: row.baseline.case_id.clone(),
            repetition: row.baseline.repetition,
            turn: row.baseline.turn,
            category: row.baseline.category.clone(),
            input: row.baseline.input.clone(),
            target: row.baseline.target.clone(),
            images: row.images.clone(),
            baseline: side(&row.baseline),
            candidate: side(&row.candidate),
        }
    }

    pub fn token(choice: &TokenChoice) -> TokenView {
        TokenView {
            token: choice.token.clone(),
            probability: format!("{:.1}%", choice.probability * 100.0),
            alternatives: choice
                .alternatives
                .iter()
                .map(|(t, p)| (t.clone(), format!("{:.1}%", p * 100.0)))
                .collect(),
        }
    }
}

/// Parses "2,3" into run ids; a clear error for anything else.
#[cfg(feature = "ssr")]
fn run_ids(text: &str) -> Result<Vec<RunId>, ServerFnError> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.parse::<RunId>()
                .map_err(|_| crate::guard::fail(400, format!("`{part}` is not a run id")))
        })
        .collect()
}

/// The baseline against one or more candidates (`candidates`: run ids separated by commas),
/// with the page's multiple-comparison correction (`holm`, `bh` or `none`).
#[server(endpoint = "compare_checkpoints")]
pub async fn compare_checkpoints(
    baseline: RunId,
    candidates: String,
    correction: String,
) -> Result<CheckpointComparisonView, ServerFnError> {
    use arbiter_domain::stats::correction::Correction;
    let (state, _) = require(Permission::ViewResults).await?;
    let correction = if correction.is_empty() {
        Correction::default()
    } else {
        Correction::parse(&correction).ok_or_else(|| {
            crate::guard::fail(
                400,
                format!("unknown correction `{correction}`: use holm, bh or none"),
            )
        })?
    };
    let candidates = run_ids(&candidates)?;
    let summary = arbiter_engine::reports::compare::compare_checkpoints(
        state.store.as_ref(),
        baseline,
        &candidates,
        correction,
    )
    .await
    .map_err(service_error)?;
    Ok(CheckpointComparisonView {
        eval_name: summary.baseline.eval_name.clone(),
        baseline: convert::report(&summary.baseline, &summary.baseline_report),
        candidates: summary
            .candidates
            .iter()
            .map(|c| CandidateView {
                report: convert::report(&c.run, &c.report),
                overall: convert::paired(&c.comparison.overall),
                categories: c
                    .comparison
                    .categories
                    .iter()
                    .map(convert::paired)
                    .collect(),
                sample_tests: c
                    .comparison
                    .sample_metrics
                    .iter()
                    .map(convert::sample_test)
                    .collect(),
                changed: c.comparison.changed,
                likelihood: c.comparison.likelihood.clone(),
                rolling: c.comparison.rolling.clone(),
            })
            .collect(),
        correction: summary.correction.label().to_string(),
        elapsed_ms: summary.elapsed_ms,
        outcome_chart_svg: convert::outcome_chart(
            "Outcome mix by run",
            std::iter::once((
                format!("baseline: {}", summary.baseline.checkpoint_name),
                summary.baseline_report.overall.outcomes,
            ))
            .chain(
                summary
                    .candidates
                    .iter()
                    .map(|c| (c.run.checkpoint_name.clone(), c.report.overall.outcomes)),
            )
            .collect(),
        ),
        chart_svg: if summary.baseline_report.categories.is_empty() {
            String::new()
        } else {
            let mut reports = vec![(
                format!("baseline: {}", summary.baseline.checkpoint_name),
                &summary.baseline_report,
            )];
            reports.extend(
                summary
                    .candidates
                    .iter()
                    .map(|c| (c.run.checkpoint_name.clone(), &c.report)),
            );
            convert::rates_chart(&reports)
        },
    })
}

/// A page of the items whose verdict changed, regressions first.
#[server(endpoint = "diff_page")]
pub async fn diff_page(
    baseline: RunId,
    candidate: RunId,
    category: String,
    change: String,
    outcome: String,
    search: String,
    offset: usize,
) -> Result<DiffPageView, ServerFnError> {
    use arbiter_domain::reports::compare::{Change, DiffFilter};
    let (state, _) = require(Permission::ViewResults).await?;
    let change = match change.as_str() {
        "" => None,
        name => Some(
            Change::parse(name)
                .ok_or_else(|| crate::guard::fail(400, format!("unknown change `{name}`")))?,
        ),
    };
    if !outcome.is_empty() && arbiter_domain::answer::Outcome::parse(&outcome).is_none() {
        return Err(crate::guard::fail(
            400,
            format!("unknown outcome `{outcome}`"),
        ));
    }
    let filter = DiffFilter {
        category: (!category.is_empty()).then_some(category),
        change,
        outcome: (!outcome.is_empty()).then_some(outcome),
    };
    let store = state.store.as_ref();
    let page = arbiter_engine::reports::diff::diff_page(
        store, baseline, candidate, &filter, &search, offset,
    )
    .await
    .map_err(service_error)?;
    Ok(DiffPageView {
        rows: page.rows.iter().map(convert::row).collect(),
        matching: page.matching,
        offset,
        next_offset: page.next_offset,
        searched: page.searched,
        search_truncated: page.search_truncated,
        categories: page
            .categories
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect(),
    })
}

/// Where two answers to one item first part, with the top alternatives on each side.
#[server(endpoint = "diff_divergence")]
pub async fn diff_divergence(
    baseline_item: IdentityId,
    candidate_item: IdentityId,
) -> Result<DivergenceView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let detail = arbiter_engine::reports::diff::diff_detail(
        state.store.as_ref(),
        baseline_item,
        candidate_item,
    )
    .await
    .map_err(service_error)?;
    Ok(match detail.divergence {
        Some(d) => DivergenceView {
            index: d.index,
            shared_prefix: d.shared_prefix,
            baseline: d.baseline.as_ref().map(convert::token),
            candidate: d.candidate.as_ref().map(convert::token),
            note: None,
        },
        None => DivergenceView {
            index: 0,
            shared_prefix: String::new(),
            baseline: None,
            candidate: None,
            note: detail.divergence_note,
        },
    })
}

/// A run's report: complete or labelled partial, per category, with intervals.
#[server(endpoint = "run_report")]
pub async fn run_report(run: RunId) -> Result<ReportView, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let (progress, report) = arbiter_engine::reports::runs::run_report(state.store.as_ref(), run)
        .await
        .map_err(service_error)?;
    let mut view = convert::report(&progress, &report);
    if !report.categories.is_empty() {
        view.chart_svg = convert::rates_chart(&[(progress.checkpoint_name.clone(), &report)]);
    }
    if report.overall.outcomes.iter().any(|&count| count > 0) {
        view.outcome_chart_svg = convert::report_outcome_chart(&report);
    }
    view.latency_chart_svg = convert::latency_chart(&report);
    Ok(view)
}

/// Records a decision to promote (`decision` = promote) or reject the candidate; refused unless
/// both runs' reports are complete.
#[server(endpoint = "decide_promotion")]
pub async fn decide_promotion(
    baseline: RunId,
    candidate: RunId,
    decision: String,
    #[server(default)] note: String,
) -> Result<i64, ServerFnError> {
    let (state, user) = require(Permission::ManageEvals).await?;
    let promote = match decision.as_str() {
        "promote" => true,
        "reject" => false,
        other => {
            return Err(crate::guard::fail(
                400,
                format!("unknown decision `{other}`: use promote or reject"),
            ))
        }
    };
    // A promotion decision is recorded on the candidate run: its team's (or a lead's) to make.
    arbiter_engine::runs::require_run_team(state.store.as_ref(), &user, candidate, "decide on")
        .await
        .map_err(service_error)?;
    arbiter_engine::reports::compare::decide_promotion(
        state.store.as_ref(),
        baseline,
        candidate,
        promote,
        &note,
        Some(user.id),
    )
    .await
    .map_err(service_error)
}

/// Promotion decisions that involve the run (as baseline or candidate), newest first.
#[server(endpoint = "promotion_decisions")]
pub async fn promotion_decisions(run: RunId) -> Result<Vec<DecisionView>, ServerFnError> {
    let (state, _) = require(Permission::ViewResults).await?;
    let decisions = state
        .store
        .promotion_decisions(run)
        .await
        .map_err(crate::guard::store_error)?;
    Ok(decisions
        .into_iter()
        .map(|d| DecisionView {
            id: d.id,
            baseline_run_id: d.baseline_run_id,
            candidate_run_id: d.candidate_run_id,
            baseline_checkpoint: d.baseline_checkpoint,
            candidate_checkpoint: d.candidate_checkpoint,
            decision: d.decision,
            note: d.note,
            decided_by: d.decided_by.unwrap_or_default(),
            decided_at: d.decided_at,
        })
        .collect())
}
