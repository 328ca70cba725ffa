//! Comparing checkpoints: each run's report (complete or labelled partial), paired tests per
//! category against the baseline with a multiple-comparison correction, and the per-prompt
//! diff — changed items, regressions first, filterable, each opening both outputs side by side
//! with grades, human labels and the first diverging token.

use crate::annotation::preferences::SendPairsForm;
use crate::components::{ActionError, ErrorNote};
use crate::reports::api::{
    compare_checkpoints, diff_divergence, diff_page, promotion_decisions, CandidateView,
    DecidePromotion, DiffPageView, DiffRowView, PairedView, ReportView, SideView, TokenView,
};
use arbiter_domain::ids::{IdentityId, RunId};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

/// Rows per diff page (the server's `arbiter_engine::reports::diff::DIFF_PAGE`), for the Previous link.
const DIFF_PAGE_ROWS: usize = 50;

/// Query parameters, read once per render.
#[derive(Clone, Debug, Default, PartialEq)]
struct Params {
    baseline: RunId,
    candidates: String,
    correction: String,
    category: String,
    change: String,
    outcome: String,
    search: String,
    offset: usize,
}

impl Params {
    /// The candidate whose diff is shown: the first.
    fn diff_candidate(&self) -> RunId {
        self.candidates
            .split(',')
            .next()
            .and_then(|id| id.trim().parse().ok())
            .unwrap_or_default()
    }

    fn href(&self, offset: usize) -> String {
        let pairs = [
            ("baseline", self.baseline.to_string()),
            ("candidate", self.candidates.clone()),
            ("correction", self.correction.clone()),
            ("category", self.category.clone()),
            ("change", self.change.clone()),
            ("outcome", self.outcome.clone()),
            ("q", self.search.clone()),
            ("offset", offset.to_string()),
        ];
        let query: Vec<String> = pairs
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(key, value)| format!("{key}={}", urlencoding::encode(value)))
            .collect();
        format!("/compare?{}", query.join("&"))
    }
}

#[component]
pub fn ComparePage() -> impl IntoView {
    let query = use_query_map();
    let params = Memo::new(move |_| {
        let q = query.read();
        let text = |name: &str| q.get(name).unwrap_or_default();
        Params {
            baseline: text("baseline").parse().unwrap_or_default(),
            candidates: q.get_all("candidate").unwrap_or_default().join(","),
            correction: text("correction"),
            category: text("category"),
            change: text("change"),
            outcome: text("outcome"),
            search: text("q"),
            offset: text("offset").parse().unwrap_or(0),
        }
    });
    let summary = Resource::new(
        move || {
            let p = params.get();
            (p.baseline, p.candidates, p.correction)
        },
        |(baseline, candidates, correction)| compare_checkpoints(baseline, candidates, correction),
    );
    let diff = Resource::new(
        move || params.get(),
        |p| {
            let candidate = p.diff_candidate();
            diff_page(
                p.baseline, candidate, p.category, p.change, p.outcome, p.search, p.offset,
            )
        },
    );
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match summary.await {
                    Ok(summary) => view! {
                        <h1>"Comparison: " {summary.eval_name.clone()}</h1>
                        <section class="scores">
                            <ReportCard title="Baseline" report=summary.baseline.clone()/>
                            {summary.candidates.iter().map(|c| view! {
                                <ReportCard title="Candidate" report=c.report.clone()/>
                            }).collect_view()}
                        </section>
                        {(!summary.chart_svg.is_empty()).then(|| view! {
                            <section class="card">
                                <div class="chart" data-testid="rates-chart" inner_html=summary.chart_svg.clone()></div>
                                <p class="hint">"Each run's numbers are in its category table above."</p>
                            </section>
                        })}
                        <section class="card">
                            <div class="chart" data-testid="outcome-chart" inner_html=summary.outcome_chart_svg.clone()></div>
                            <p class="hint">"Each run's outcome counts are beside its score above."</p>
                        </section>
                        {(summary.candidates.len() == 1).then(|| view! {
                            <PromotionSection
                                baseline=summary.baseline.clone()
                                candidate=summary.candidates[0].report.clone()
                            />
                        })}
                        {summary.candidates.into_iter().map(|candidate| view! {
                            <PairedSection baseline=summary.baseline.run_id candidate correction=summary.correction.clone()/>
                        }).collect_view()}
                        <p class="hint">"Summary computed in " {summary.elapsed_ms} " ms."</p>
                    }.into_any(),
                    Err(error) => view! {
                        <h1>"Comparison"</h1>
                        <ErrorNote error/>
                        <p><a href="/runs">"Pick two runs"</a></p>
                    }.into_any(),
                }
            })}
        </Suspense>
        <Suspense fallback=|| view! { <p>"Loading the changed items…"</p> }>
            {move || Suspend::new(async move {
                let p = params.get_untracked();
                match diff.await {
                    Ok(page) => view! { <DiffSection page params=p/> }.into_any(),
                    // The summary above already explains a refused comparison.
                    Err(_) => ().into_any(),
                }
            })}
        </Suspense>
    }
}

/// A run's report: its score with interval, completeness, outcome mix and categories.
#[component]
pub fn ReportCard(title: &'static str, report: ReportView) -> impl IntoView {
    let badge_class = format!("badge {}", report.completeness.to_lowercase());
    let overall = report.overall.clone();
    view! {
        <div class="card score" data-testid=format!("score-{}", title.to_lowercase())>
            <h2>{title} ": " <a href=format!("/runs/{}", report.run_id)>{report.checkpoint_name.clone()}</a></h2>
            <p>
                <span class=badge_class data-testid="completeness">{report.completeness.clone()}</span>
                " " {report.completed} " / " {report.expected} " results · run " {report.status.clone()}
            </p>
            {match report.rolling.as_ref().and_then(|rolling| rolling.bits_per_byte.map(|bits| (bits, rolling.bits_per_byte_interval))) {
                Some((bits, interval)) => view! {
                    <p class="big" data-testid="bits-per-byte">{format!("{bits:.4}")} " bits per byte"</p>
                    <p class="hint">{interval.map(|i| format!("95% interval {:.4}–{:.4} (bootstrap over documents)", i.lower, i.upper))}</p>
                }.into_any(),
                None => view! {
                    <p class="big">{overall.rate.clone()}</p>
                    <p class="hint">
                        {if overall.interval.is_empty() { String::new() } else {
                            format!("95% interval {} ({})", overall.interval, overall.interval_method)
                        }}
                    </p>
                }.into_any(),
            }}
            <p>
                {(overall.scored > 0).then(|| format!("{} scored · ", overall.scored))}
                {overall.passed} " passed of " {overall.passed + overall.failed} " graded · "
                {overall.uncertain} " awaiting human review · " {overall.errors} " errors"
                {overall.outcome_mix.iter().map(|(outcome, count)| format!(" · {count} {outcome}")).collect::<String>()}
            </p>
            {(!report.time_to_results.is_empty()).then(|| view! {
                <p class="hint">"Results visible " {report.time_to_results.clone()} " after the checkpoint was registered."</p>
            })}
            {(!report.problems.is_empty()).then(|| view! {
                <ul class="problems">
                    {report.problems.iter().map(|problem| view! { <li>{problem.clone()}</li> }).collect_view()}
                </ul>
            })}
            {(!report.chart_svg.is_empty()).then(|| view! {
                <div class="chart" inner_html=report.chart_svg.clone()></div>
            })}
            {(!report.outcome_chart_svg.is_empty() || !report.latency_chart_svg.is_empty()).then(|| view! {
                <details>
                    <summary>"Outcome mix and latency"</summary>
                    <div class="chart" data-testid="outcome-mix" inner_html=report.outcome_chart_svg.clone()></div>
                    {(!report.latency_chart_svg.is_empty()).then(|| view! {
                        <div class="chart" data-testid="latency-chart" inner_html=report.latency_chart_svg.clone()></div>
                        <table class="latency">
                            <thead><tr><th>"Time to answer"</th><th>"Answers"</th></tr></thead>
                            <tbody>
                                {report.latency.iter().filter(|(_, count)| *count > 0).map(|(bucket, count)| view! {
                                    <tr><td>{bucket.clone()}</td><td>{*count}</td></tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    })}
                </details>
            })}
            {(!report.sample_metrics.is_empty()).then(|| view! {
                <table class="sample-metrics" data-testid="sample-metrics">
                    <thead><tr><th>"Metric"</th><th>"Value"</th><th>"95% interval (bootstrap over cases)"</th><th>"Cases"</th><th>"Samples used"</th><th>"Cases with fewer samples"</th></tr></thead>
                    <tbody>
                        {report.sample_metrics.iter().map(|row| view! {
                            <tr>
                                <td>{row.metric.label(row.k)}{row.ties.filter(|ties| *ties > 0).map(|ties| format!(" ({ties} tied votes)"))}</td>
                                <td>{format!("{:.1}%", row.value * 100.0)}</td>
                                <td>{percent_interval(row.interval)}</td>
                                <td>{row.items}</td>
                                <td>{row.samples}</td>
                                <td>{row.short_items}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
            {report.likelihood.clone().map(|likelihood| view! { <LikelihoodTable likelihood/> })}
            {report.rolling.clone().map(|rolling| view! { <RollingTable rolling/> })}
            {report.contamination.clone().map(|contamination| view! { <ContaminationTable contamination/> })}
            {report.instructions.clone().map(|instructions| view! { <InstructionsTable instructions/> })}
            {(!report.turns.is_empty()).then(|| view! {
                <table class="turns" data-testid="turn-results">
                    <caption>"By turn of the conversations (a turn after one that got no answer is stopped: never sent)"</caption>
                    <thead><tr><th>"Turn"</th><th>"Pass rate"</th><th>"95% interval"</th><th>"Passed / graded"</th><th>"Uncertain"</th><th>"Errors"</th><th>"Stopped"</th></tr></thead>
                    <tbody>
                        {report.turns.iter().map(|turn| view! {
                            <tr>
                                <td>{turn.turn}</td>
                                <td>{turn.pass_rate.map(|rate| format!("{:.1}%", rate * 100.0)).unwrap_or_else(|| "–".into())}</td>
                                <td>{percent_interval(turn.interval)}</td>
                                <td>{turn.counts.passed} " / " {turn.counts.passed + turn.counts.failed}</td>
                                <td>{turn.counts.uncertain}</td>
                                <td>{turn.counts.errors}</td>
                                <td>{turn.counts.stopped}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
            {(!report.categories.is_empty()).then(|| view! {
                <table class="categories">
                    <thead><tr><th>"Category"</th><th>"Pass rate"</th><th>"95% interval"</th><th>"Passed / graded"</th><th>"Uncertain"</th><th>"Errors"</th></tr></thead>
                    <tbody>
                        {report.categories.iter().map(|c| view! {
                            <tr>
                                <td>{c.category.clone()}</td>
                                <td>{c.rate.clone()}</td>
                                <td>{c.interval.clone()}</td>
                                <td>{c.passed} " / " {c.passed + c.failed}</td>
                                <td>{c.uncertain}</td>
                                <td>{c.errors}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
        </div>
    }
    .into_any()
}

/// Promote or reject the candidate, with a note: refused (with the reason) unless both reports
/// are complete; the decisions already made on the candidate are listed.
#[component]
fn PromotionSection(baseline: ReportView, candidate: ReportView) -> impl IntoView {
    let decide = ServerAction::<DecidePromotion>::new();
    let candidate_run = candidate.run_id;
    let decisions = Resource::new(
        move || decide.version().get(),
        move |_| promotion_decisions(candidate_run),
    );
    let both_complete = baseline.completeness == "COMPLETE" && candidate.completeness == "COMPLETE";
    view! {
        <section class="card" data-testid="promotion">
            <h2>"Promotion decision"</h2>
            {(!both_complete).then(|| view! {
                <p class="hint">"Both reports must be COMPLETE before a decision can be recorded."</p>
            })}
            <ActionForm action=decide attr:class="stack">
                <input type="hidden" name="baseline" value=baseline.run_id.to_string()/>
                <input type="hidden" name="candidate" value=candidate.run_id.to_string()/>
                <label>"Note" <textarea name="note" rows="2" placeholder="why (kept with the comparison)"></textarea></label>
                <div class="row">
                    <label><input type="radio" name="decision" value="promote" required/> "Promote " {candidate.checkpoint_name.clone()}</label>
                    <label><input type="radio" name="decision" value="reject"/> "Reject it"</label>
                    <button type="submit">"Record decision"</button>
                </div>
            </ActionForm>
            <ActionError value=decide.value()/>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    match decisions.await {
                        Ok(list) if list.is_empty() => view! { <p class="hint">"No decision recorded yet."</p> }.into_any(),
                        Ok(list) => view! {
                            <ul data-testid="decisions">
                                {list.into_iter().map(|d| view! {
                                    <li>
                                        <strong>{d.decision.clone()}</strong> " " {d.candidate_checkpoint.clone()}
                                        " against " {d.baseline_checkpoint.clone()} " by " {d.decided_by.clone()}
                                        ", " {crate::format::format_time(d.decided_at)}
                                        {(!d.note.is_empty()).then(|| format!(" — {}", d.note))}
                                    </li>
                                }).collect_view()}
                            </ul>
                        }.into_any(),
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
    .into_any()
}

#[component]
fn PairedSection(baseline: RunId, candidate: CandidateView, correction: String) -> impl IntoView {
    let overall = candidate.overall.clone();
    view! {
        <section class="card">
            <h2>"Baseline → " {candidate.report.checkpoint_name.clone()}</h2>
            <SendPairsForm baseline candidate=candidate.report.run_id/>
            <p>
                {overall.shared} " shared items; "
                <strong data-testid="pass-to-fail">{overall.pass_to_fail}</strong> " pass→fail, "
                <strong data-testid="fail-to-pass">{overall.fail_to_pass}</strong> " fail→pass; "
                {candidate.changed} " items changed in any way. Tests: "
                {overall.method.clone()}
                {(overall.method != "exact McNemar").then_some(" (the runs have repetitions: each case is resampled with all its repetitions)")}
                ", " {correction} "."
            </p>
            <table class="paired">
                <thead><tr>
                    <th>"Category"</th><th>"Baseline"</th><th>"Candidate"</th><th>"Δ"</th><th>"95% interval"</th>
                    <th>"pass→fail"</th><th>"fail→pass"</th><th>"both pass"</th><th>"both fail"</th>
                    <th>"p"</th><th>"adjusted p"</th><th>"Finding"</th>
                </tr></thead>
                <tbody>
                    <PairedRow test=overall.clone() strong=true/>
                    {candidate.categories.into_iter().map(|test| view! { <PairedRow test strong=false/> }).collect_view()}
                </tbody>
            </table>
            {candidate.likelihood.clone().map(|test| view! {
                <p class="hint" data-testid="likelihood-test">
                    "Log-likelihood of the right answer, candidate − baseline, per item ("
                    {test.items} " items, paired t-test): "
                    <strong>{format!("{:+.3}", test.mean_difference)}</strong>
                    {test.interval.map(|interval| format!(" (95% interval {:+.3} to {:+.3})", interval.lower, interval.upper))}
                    {test.p_value.map(|p| format!(", p = {p:.3}"))}
                    "."
                </p>
            })}
            {candidate.rolling.clone().map(|test| view! {
                <p class="hint" data-testid="rolling-test">
                    "Bits per byte over the " {test.documents} " documents both runs scored: "
                    {format!("{:.4} → {:.4}, ", test.baseline, test.candidate)}
                    <strong>{format!("{:+.4}", test.difference)}</strong>
                    {test.interval.map(|interval| format!(" (95% interval {:+.4} to {:+.4}, paired bootstrap over documents)", interval.lower, interval.upper))}
                    {test.p_value.map(|p| format!(", p = {p:.3}"))}
                    {format!("; the candidate is likelier on {} of them. Lower is better.", test.candidate_better)}
                </p>
            })}
            {(!candidate.sample_tests.is_empty()).then(|| view! {
                <table class="paired" data-testid="sample-tests">
                    <caption>"Metrics over samples, on the items both runs can score at k (interval: bootstrap over cases; corrected with the tests above)"</caption>
                    <thead><tr>
                        <th>"Metric"</th><th>"Baseline"</th><th>"Candidate"</th><th>"Δ"</th><th>"95% interval"</th>
                        <th>"Items (cases)"</th><th>"Samples (baseline / candidate)"</th><th>"Test"</th><th>"p"</th><th>"adjusted p"</th><th>"Finding"</th>
                    </tr></thead>
                    <tbody>
                        {candidate.sample_tests.iter().map(|test| view! {
                            <tr class=test.finding.clone()>
                                <td>{test.metric.clone()}</td>
                                <td>{test.baseline.clone()}</td>
                                <td>{test.candidate.clone()}</td>
                                <td>{test.delta.clone()}</td>
                                <td>{test.interval.clone()}</td>
                                <td>{test.items} " (" {test.cases} ")"</td>
                                <td>{test.samples.clone()}</td>
                                <td>{test.method.clone()}</td>
                                <td>{test.p_value.clone()}</td>
                                <td>{test.adjusted_p.clone()}</td>
                                <td>{finding_text(&test.finding)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
        </section>
    }
    .into_any()
}

/// A finding in words.
fn finding_text(finding: &str) -> &'static str {
    match finding {
        "regression" => "▼ significant regression",
        "improvement" => "▲ significant improvement",
        _ => "no significant change",
    }
}

#[component]
fn PairedRow(test: PairedView, strong: bool) -> impl IntoView {
    let class = match test.finding.as_str() {
        "regression" => "regression",
        "improvement" => "improvement",
        _ => "",
    };
    let finding = finding_text(&test.finding);
    let name = if strong {
        "all items".to_string()
    } else {
        test.category.clone()
    };
    view! {
        <tr class=class>
            <td>{if strong { view! { <strong>{name}</strong> }.into_any() } else { name.into_any() }}</td>
            <td>{test.baseline_rate}</td>
            <td>{test.candidate_rate}</td>
            <td>{test.delta}</td>
            <td>{test.interval}</td>
            <td>{test.pass_to_fail}</td>
            <td>{test.fail_to_pass}</td>
            <td>{test.both_pass}</td>
            <td>{test.both_fail}</td>
            <td>{test.p_value}</td>
            <td>{test.adjusted_p}</td>
            <td>{finding}</td>
        </tr>
    }
    .into_any()
}

#[component]
fn DiffSection(page: DiffPageView, params: Params) -> impl IntoView {
    let option = |value: &str, label: &str, current: &str| {
        let selected = value == current;
        view! { <option value=value.to_string() selected=selected>{label.to_string()}</option> }
    };
    let next = page.next_offset.map(|offset| params.href(offset));
    let previous =
        (page.offset > 0).then(|| params.href(page.offset.saturating_sub(DIFF_PAGE_ROWS)));
    view! {
        <section class="card">
            <h2>"Per-prompt diff"</h2>
            <form method="get" action="/compare" class="inline diff-filter">
                <input type="hidden" name="baseline" value=params.baseline.to_string()/>
                <input type="hidden" name="candidate" value=params.candidates.clone()/>
                {(!params.correction.is_empty()).then(|| view! { <input type="hidden" name="correction" value=params.correction.clone()/> })}
                <label>"Change "
                    <select name="change">
                        {option("", "any change", &params.change)}
                        {option("regression", "pass → fail", &params.change)}
                        {option("lost_pass", "pass → not graded", &params.change)}
                        {option("improvement", "fail → pass", &params.change)}
                        {option("other", "other change", &params.change)}
                    </select>
                </label>
                <label>"Category "
                    <select name="category">
                        {option("", "all", &params.category)}
                        {page.categories.iter().map(|c| option(c, c, &params.category)).collect_view()}
                    </select>
                </label>
                <label>"Outcome "
                    <select name="outcome">
                        {option("", "any", &params.outcome)}
                        {["ok", "truncated", "empty", "refused", "endpoint_error", "timeout"].iter().map(|o| option(o, o, &params.outcome)).collect_view()}
                    </select>
                </label>
                <label>"Text " <input type="search" name="q" value=params.search.clone() placeholder="input, target or output"/></label>
                <button type="submit">"Filter"</button>
            </form>
            <p data-testid="diff-count">
                {page.matching} " changed items match"
                {(!params.search.is_empty()).then(|| format!("; text search read {} of them", page.searched))}
                {page.search_truncated.then_some(" and stopped (narrow the filter to search further)")}
                "."
            </p>
            <table class="flips">
                <thead><tr><th>"Change"</th><th>"Case"</th><th>"Rep"</th><th>"Category"</th><th>"Input and both outputs"</th></tr></thead>
                <tbody>
                    {page.rows.into_iter().map(|row| view! { <DiffRow row/> }).collect_view()}
                </tbody>
            </table>
            <p class="pager">
                {previous.map(|href| view! { <a href=href>"← Previous"</a> " " })}
                {next.map(|href| view! { <a href=href>"Next →"</a> })}
            </p>
        </section>
    }
    .into_any()
}

#[component]
fn DiffRow(row: DiffRowView) -> impl IntoView {
    let class = format!("flip {}", row.change);
    let (baseline_item, candidate_item) = (row.baseline.identity_id, row.candidate.identity_id);
    view! {
        <tr class=class>
            <td><strong>{row.change_label.clone()}</strong></td>
            <td><code>{row.case_id.clone()}</code></td>
            <td>{row.repetition}{(row.turn > 1).then(|| format!(" · turn {}", row.turn))}</td>
            <td>{row.category.clone()}</td>
            <td>
                <details>
                    <summary>{row.input.clone()} " (target: " {row.target.clone()} ")"</summary>
                    <crate::components::ItemImages images=row.images.clone()/>
                    <div class="side-by-side">
                        <Side title="Baseline" side=row.baseline.clone()/>
                        <Side title="Candidate" side=row.candidate.clone()/>
                    </div>
                    <Divergence baseline_item candidate_item/>
                </details>
            </td>
        </tr>
    }
    .into_any()
}

/// An interval of rates as percentages ("71.2–80.4%"); empty without one.
fn percent_interval(interval: Option<arbiter_domain::stats::Interval>) -> String {
    interval
        .map(|i| format!("{:.1}–{:.1}%", i.lower * 100.0, i.upper * 100.0))
        .unwrap_or_default()
}

/// A run's pass rate with and without the items found in the training corpus.
#[component]
fn ContaminationTable(
    contamination: arbiter_domain::contamination::ContaminationReport,
) -> impl IntoView {
    let rate = |rate: Option<f64>| {
        rate.map(|rate| format!("{:.1}%", rate * 100.0))
            .unwrap_or_else(|| "–".into())
    };
    view! {
        <table class="contamination" data-testid="contamination">
            <caption>
                "Contamination: " {contamination.flagged_items} " items share a " {contamination.n}
                "-gram with the training corpus (index " <code>{contamination.index_hash.chars().take(19).collect::<String>()}</code> ")"
            </caption>
            <thead><tr><th>"Items"</th><th>"Pass rate"</th><th>"95% interval"</th><th>"Decided answers"</th></tr></thead>
            <tbody>
                <tr><td>"all"</td><td>{rate(contamination.pass_rate)}</td><td></td><td>{contamination.clean_answers + contamination.flagged_answers}</td></tr>
                <tr><td>"not found in the corpus"</td><td>{rate(contamination.clean_pass_rate)}</td><td>{percent_interval(contamination.clean_interval)}</td><td>{contamination.clean_answers}</td></tr>
                <tr><td>"found in the corpus"</td><td>{rate(contamination.flagged_pass_rate)}</td><td>{percent_interval(contamination.flagged_interval)}</td><td>{contamination.flagged_answers}</td></tr>
            </tbody>
        </table>
    }
}

/// An instruction-following eval's accuracies (IFEval's four) and each instruction's rates.
#[component]
fn InstructionsTable(
    instructions: arbiter_domain::reports::instructions::InstructionsReport,
) -> impl IntoView {
    let percent = |followed: u64, of: u64| {
        if of == 0 {
            "–".to_string()
        } else {
            format!("{:.1}%", followed as f64 * 100.0 / of as f64)
        }
    };
    view! {
        <table class="instructions" data-testid="instruction-accuracies">
            <caption>
                "Instruction following: " {instructions.answers} " answers. Strict reads the answer as it is; "
                "loose also without its first or last line and without Markdown asterisks."
            </caption>
            <thead><tr><th>"Metric"</th><th>"What it counts"</th><th>"Value"</th><th>"95% interval (clustered by item)"</th><th>"Followed / asked"</th></tr></thead>
            <tbody>
                {instructions.accuracies.into_iter().map(|accuracy| view! {
                    <tr>
                        <td><code>{accuracy.name.clone()}</code></td>
                        <td>{accuracy.what.clone()}</td>
                        <td>{percent(accuracy.followed, accuracy.of)}</td>
                        <td>{percent_interval(accuracy.interval)}</td>
                        <td>{accuracy.followed} " / " {accuracy.of}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <table class="instructions" data-testid="instruction-rows">
            <caption>"By instruction, the least followed first"</caption>
            <thead><tr><th>"Instruction"</th><th>"Strict"</th><th>"Loose"</th><th>"Asked"</th></tr></thead>
            <tbody>
                {instructions.instructions.into_iter().map(|row| view! {
                    <tr>
                        <td><code>{row.id.clone()}</code></td>
                        <td>{percent(row.strict, row.asked)}</td>
                        <td>{percent(row.loose, row.asked)}</td>
                        <td>{row.asked}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// A likelihood eval's metrics: lm-eval's accuracies and the probability on the right answer.
#[component]
fn LikelihoodTable(
    likelihood: arbiter_domain::reports::likelihood::LikelihoodReport,
) -> impl IntoView {
    let percent = |name: &str| name != "right_logprob";
    view! {
        <table class="likelihood" data-testid="likelihood-metrics">
            <caption>
                "Scored by likelihood: " {likelihood.scored} " answers; verdicts follow " <code>{likelihood.graded_by.clone()}</code>
                {(likelihood.split_tokens > 0).then(|| format!("; {} choices began inside a token of the prompt", likelihood.split_tokens))}
            </caption>
            <thead><tr><th>"Metric"</th><th>"What it is"</th><th>"Value"</th><th>"95% interval (± 1.96 standard errors)"</th><th>"Items"</th></tr></thead>
            <tbody>
                {likelihood.metrics.into_iter().map(|metric| {
                    let as_percent = percent(&metric.name);
                    let shown = move |value: f64| if as_percent { format!("{:.1}%", value * 100.0) } else { format!("{value:.3}") };
                    view! {
                        <tr>
                            <td><code>{metric.name.clone()}</code></td>
                            <td>{metric.what.clone()}</td>
                            <td>{metric.mean.map(shown).unwrap_or_else(|| "–".into())}</td>
                            <td>{metric.interval.map(|interval| format!("{} – {}", shown(interval.lower), shown(interval.upper))).unwrap_or_default()}</td>
                            <td>{metric.items}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// A rolling-likelihood eval's corpus metrics, as lm-eval names them.
#[component]
fn RollingTable(rolling: arbiter_domain::reports::rolling::RollingReport) -> impl IntoView {
    let number =
        |value: Option<f64>| value.map_or_else(|| "–".to_string(), |value| format!("{value:.4}"));
    let rows = [
        (
            "bits_per_byte",
            "−log₂ likelihood per UTF-8 byte (lower is better)",
            number(rolling.bits_per_byte),
        ),
        (
            "byte_perplexity",
            "exp(−log-likelihood per byte)",
            number(rolling.byte_perplexity),
        ),
        (
            "word_perplexity",
            "exp(−log-likelihood per word, words split at whitespace)",
            number(rolling.word_perplexity),
        ),
        (
            "token_perplexity",
            "exp(−log-likelihood per token): depends on the tokenizer",
            number(rolling.token_perplexity),
        ),
    ];
    view! {
        <table class="likelihood" data-testid="rolling-metrics">
            <caption>
                "Scored by rolling likelihood: " {rolling.documents} " documents, " {rolling.tokens} " tokens, "
                {rolling.words} " words, " {rolling.bytes} " bytes in " {rolling.windows} " windows; total log-likelihood "
                {format!("{:.2}", rolling.logprob)}
            </caption>
            <thead><tr><th>"Metric"</th><th>"What it is"</th><th>"Value"</th></tr></thead>
            <tbody>
                {rows.into_iter().map(|(name, what, value)| view! {
                    <tr><td><code>{name}</code></td><td>{what}</td><td>{value}</td></tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn Side(title: &'static str, side: SideView) -> impl IntoView {
    view! {
        <div>
            <h3>{title}</h3>
            <p class="hint">{side.verdict.clone()} " · " {side.outcome.clone()} " · decided by " {side.decided_by.clone()}</p>
            <pre class="output">{side.output.clone()}</pre>
            {side.error.clone().map(|error| view! { <p class="error">{error}</p> })}
            <ul class="reasons">
                {side.grades.iter().map(|g| view! { <li>{g.clone()}</li> }).collect_view()}
                {side.labels.iter().map(|l| view! { <li>"human " {l.clone()}</li> }).collect_view()}
            </ul>
        </div>
    }
    .into_any()
}

/// The first token where the answers part, loaded on request (it reads both logprob blobs).
#[component]
fn Divergence(baseline_item: IdentityId, candidate_item: IdentityId) -> impl IntoView {
    let load = Action::new(move |_: &()| diff_divergence(baseline_item, candidate_item));
    let token = |label: &'static str, token: Option<TokenView>| {
        token.map(|t| view! {
            <p>
                {label} ": " <code>{format!("{:?}", t.token)}</code> " at " {t.probability.clone()}
                {(!t.alternatives.is_empty()).then_some(" · next best: ")}
                {t.alternatives.iter().map(|(alt, p)| format!("{alt:?} {p}")).collect::<Vec<_>>().join(", ")}
            </p>
        })
    };
    view! {
        <div class="divergence">
            <button type="button" on:click=move |_| { load.dispatch(()); }>"Show the first diverging token"</button>
            {move || load.value().get().map(|result| match result {
                Ok(d) => match d.note {
                    Some(note) => view! { <p class="hint">{note}</p> }.into_any(),
                    None => view! {
                        <div>
                            <p class="hint">"Token " {d.index + 1} ", after " <code>{format!("{:?}", d.shared_prefix)}</code></p>
                            {token("Baseline", d.baseline)}
                            {token("Candidate", d.candidate)}
                        </div>
                    }.into_any(),
                },
                Err(error) => view! { <ErrorNote error/> }.into_any(),
            })}
        </div>
    }
    .into_any()
}
