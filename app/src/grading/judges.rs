//! Judges: define one (a checkpoint plus a versioned rubric) and see how each does against
//! human labels — accuracy, Cohen's kappa, calibration (a reliability diagram) and cost.

use crate::catalog::api::CheckpointView;
use crate::components::{ActionError, ErrorNote};
use crate::format::route_id;
use crate::grading::api::{judge_detail, judges_page, CreateJudge};
use arbiter_domain::grading::judge::JudgeReport;
use leptos::prelude::*;

#[component]
pub fn JudgesPage() -> impl IntoView {
    let create = ServerAction::<CreateJudge>::new();
    let data = Resource::new(move || create.version().get(), |_| judges_page());
    view! {
        <h1>"Judges"</h1>
        <p class="hint">
            "A judge is a checkpoint asked to answer PASS or FAIL with a rubric prompt. Its confidence is the "
            "probability it puts on its verdict (from the endpoint's logprobs); each eval's triage policy says "
            "which confidence is enough."
        </p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! {
                        <table>
                            <thead><tr><th>"Judge"</th><th>"Checkpoint"</th><th>"Max tokens"</th></tr></thead>
                            <tbody>
                                {data.judges.into_iter().map(|judge| view! {
                                    <tr>
                                        <td><a href=format!("/judges/{}", judge.id)>{judge.grader_id()}</a></td>
                                        <td>{judge.checkpoint_name}</td>
                                        <td>{judge.max_tokens}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        <section class="card">
                            <h2>"Define a judge (or a new version of one)"</h2>
                            <ActionForm action=create attr:class="stack">
                                <label>"Name (saving an existing name adds a version)" <input name="name" required maxlength="100"/></label>
                                <label>
                                    "Checkpoint"
                                    <select name="checkpoint_id" required>
                                        {data.checkpoints.into_iter().map(|CheckpointView { checkpoint, .. }| view! {
                                            <option value=checkpoint.id.to_string()>{checkpoint.name}</option>
                                        }).collect_view()}
                                    </select>
                                </label>
                                <label>
                                    "Rubric (" <code>"{output}"</code> " is the answer judged; " <code>"{input}"</code> " and "
                                    <code>"{target}"</code> " are the item's question and reference)"
                                    <textarea name="rubric" rows="8" required>{data.default_rubric}</textarea>
                                </label>
                                <label>"Max tokens" <input name="max_tokens" type="number" value="64" min="1" max="4096"/></label>
                                <button type="submit">"Save judge"</button>
                            </ActionForm>
                            <ActionError value=create.value()/>
                        </section>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(
        || "undefined".to_string(),
        |value| format!("{:.1}%", value * 100.0),
    )
}

fn decimal(value: Option<f64>) -> String {
    value.map_or_else(|| "undefined".to_string(), |value| format!("{value:.3}"))
}

#[component]
pub fn JudgePage() -> impl IntoView {
    let id = route_id();
    let report = Resource::new(id, judge_detail);
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match report.await {
                    Ok(report) => view! { <JudgeReportCard report/> }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn JudgeReportCard(report: JudgeReport) -> impl IntoView {
    let judge = report.judge;
    view! {
        <h1>{judge.grader_id()}</h1>
        <section class="card">
            <p>"Checkpoint " <strong>{judge.checkpoint_name}</strong> " · up to " {judge.max_tokens} " tokens"</p>
            <ul class="counts">
                <li>"human-checked verdicts: " <strong data-testid="judge-labelled">{report.accuracy.items}</strong></li>
                <li>"accuracy: " <strong data-testid="judge-accuracy">{percent(report.accuracy.accuracy)}</strong></li>
                <li>"Cohen's kappa with humans: " <strong data-testid="judge-kappa">{decimal(report.accuracy.kappa)}</strong></li>
                <li>"calibration error (ECE): " <strong>{decimal(report.accuracy.expected_calibration_error)}</strong></li>
                <li>"grades given: " <strong>{report.grades}</strong></li>
                <li>"cost: " <strong data-testid="judge-cost">{format!("${:.4}", report.cost_usd)}</strong></li>
            </ul>
            <p class="hint">
                "Human labels come from escalated items and from the random audit of verdicts the judge was sure "
                "about, so accuracy is measured across the whole confidence range."
            </p>
        </section>
        <section class="card">
            <h2>"Reliability"</h2>
            // Rendered on the server by plotters; the only text in it is escaped.
            <div class="chart" data-testid="reliability-diagram" inner_html=report.reliability_svg></div>
            <table>
                <caption>"The diagram's numbers"</caption>
                <thead><tr><th>"Confidence"</th><th>"Verdicts"</th><th>"Mean confidence"</th><th>"Accuracy"</th></tr></thead>
                <tbody>
                    {report.bins.into_iter().map(|bin| view! {
                        <tr>
                            <td>{format!("{:.2}–{:.2}", bin.lower, bin.upper)}</td>
                            <td>{bin.count}</td>
                            <td>{decimal(bin.mean_confidence)}</td>
                            <td>{percent(bin.accuracy)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
        <section class="card">
            <h2>"Rubric"</h2>
            <pre class="output">{judge.rubric}</pre>
        </section>
    }
}
