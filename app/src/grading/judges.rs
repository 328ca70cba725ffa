//! Judges: define one (a checkpoint plus a versioned rubric, answering PASS or FAIL or a point
//! of a rubric's scale) and see how each does against human labels — accuracy, Cohen's kappa,
//! calibration (a reliability diagram), a scale judge's points against the raters', and cost.

use crate::catalog::api::CheckpointView;
use crate::components::{ActionError, ErrorNote};
use crate::format::route_id;
use crate::grading::api::{judge_detail, judges_page, CreateJudge};
use arbiter_domain::grading::calibration::ReliabilityBin;
use arbiter_domain::grading::canary::JudgeCanary;
use arbiter_domain::grading::judge::JudgeReport;
use arbiter_domain::grading::scale::JudgeScale;
use arbiter_domain::grading::scale_calibration::ScaleCalibration;
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
            "which confidence is enough. A judge may instead score an ordinal dimension of a rubric, as raters "
            "do: it answers a point, and the probabilities of all points give its expected score and its "
            "probability of passing, which triage uses as a PASS/FAIL judge's confidence."
        </p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! {
                        <table>
                            <thead><tr><th>"Judge"</th><th>"Checkpoint"</th><th>"Answers"</th><th>"Max tokens"</th><th>"Drift canary"</th></tr></thead>
                            <tbody>
                                {data.judges.into_iter().map(|judge| {
                                    let canary = data
                                        .canaries
                                        .iter()
                                        .find(|canary| canary.judge_id == judge.id)
                                        .map(|canary| canary.note());
                                    view! {
                                    <tr>
                                        <td><a href=format!("/judges/{}", judge.id)>{judge.grader_id()}</a></td>
                                        <td>{judge.checkpoint_name}</td>
                                        <td>{match (&judge.scale, judge.pairwise) {
                                            (_, true) => "A, B or TIE on two answers".to_string(),
                                            (Some(scale), _) => scale.describe(),
                                            (None, _) if judge.batch_items > 1 => {
                                                format!("PASS or FAIL, {} per call", judge.batch_items)
                                            }
                                            (None, _) => "PASS or FAIL".to_string(),
                                        }}</td>
                                        <td>{judge.max_tokens}</td>
                                        <td data-testid="judge-canary">{canary.unwrap_or_else(|| "—".to_string())}</td>
                                    </tr>
                                    }
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
                                    <textarea name="rubric" rows="8">{data.default_rubric}</textarea>
                                </label>
                                <ScaleFields scales=data.scales/>
                                <label>
                                    <input type="checkbox" name="pairwise"/>
                                    " Pairwise: compares two answers (" <code>"{output_a}"</code> ", " <code>"{output_b}"</code>
                                    "), asked in both orders, before raters when pairs are sent from Compare. Left as it is, the prompt becomes the pairwise default."
                                </label>
                                <label>"Max tokens (per answer)" <input name="max_tokens" type="number" value="64" min="1" max="4096"/></label>
                                <label>
                                    "Answers per call (PASS/FAIL judges: up to 16 answers share one prompt, each read from its own "
                                    <code>"Item n: PASS"</code> " line; an answer the reply skips is asked alone)"
                                    <input name="batch_items" type="number" value="1" min="1" max="16"/>
                                </label>
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

/// The optional rubric dimension a new judge scores.
#[component]
fn ScaleFields(scales: Vec<(String, Vec<String>)>) -> impl IntoView {
    let dimensions: Vec<String> = scales
        .iter()
        .flat_map(|(_, keys)| keys.iter().cloned())
        .collect();
    view! {
        <fieldset>
            <legend>"Score a rubric dimension (optional)"</legend>
            <label>
                "Scale from"
                <select name="scale_rubric">
                    <option value="">"none: the judge answers PASS or FAIL"</option>
                    {scales.iter().map(|(name, keys)| view! {
                        <option value=name.clone()>{format!("{name} ({})", keys.join(", "))}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>
                "Dimension (an ordinal one, of 2 to 9 points)"
                <input name="scale_dimension" list="judged-dimensions" maxlength="64"/>
            </label>
            <datalist id="judged-dimensions">
                {dimensions.into_iter().map(|key| view! { <option value=key/> }).collect_view()}
            </datalist>
            <label>
                "Passes from point (empty: the verdict's own pass point)"
                <input name="scale_pass_at_least" type="number" min="2" max="9"/>
            </label>
            <p class="hint">
                "Leave the prompt as it is to start from one made of the dimension's question and anchors."
            </p>
        </fieldset>
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
    let scale = judge.scale.clone();
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
                <ReliabilityRows bins=report.bins/>
            </table>
        </section>
        {report.canary.map(|canary| view! { <CanaryCard canary/> })}
        {report.scale_calibration.zip(scale).map(|(calibration, scale)| {
            view! { <ScaleCalibrationCard scale calibration/> }
        })}
        <section class="card">
            <h2>"Rubric"</h2>
            <pre class="output">{judge.rubric}</pre>
        </section>
    }
}

/// A scale judge's points against the raters' consensus on the same dimension.
#[component]
fn ScaleCalibrationCard(scale: JudgeScale, calibration: ScaleCalibration) -> impl IntoView {
    let points = usize::from(scale.points);
    view! {
        <section class="card" data-testid="scale-calibration">
            <h2>{format!("On its scale: {}", scale.describe())}</h2>
            <ul class="counts">
                <li>"items the raters decided: " <strong data-testid="scale-items">{calibration.items}</strong></li>
                <li>
                    "weighted kappa (quadratic) with the raters: "
                    <strong data-testid="scale-kappa">{decimal(calibration.weighted_kappa)}</strong>
                    {calibration.kappa_undefined.map(|reason| view! { <span class="hint">{format!(" ({reason})")}</span> })}
                </li>
                <li>"same point: " <strong>{percent(calibration.exact)}</strong></li>
                <li>"within one point: " <strong>{percent(calibration.within_one)}</strong></li>
                <li>"mean absolute error of the expected score: " <strong data-testid="scale-mae">{decimal(calibration.mean_absolute_error)}</strong></li>
                <li>
                    "pass or fail from its probability of passing, against the raters': "
                    <strong data-testid="scale-pass-accuracy">{percent(calibration.pass_accuracy.accuracy)}</strong>
                    {format!(" of {} items with logprobs (ECE {})", calibration.pass_accuracy.items, decimal(calibration.pass_accuracy.expected_calibration_error))}
                </li>
            </ul>
            <p class="hint">
                "Humans label mostly the items the judge was unsure of (escalations), and a share of the rest "
                "(the audit): these point figures describe its uncertain cases more than its average one. The "
                "verdict follows the probability of passing, so a grade may show a passing point with a fail."
            </p>
            <table data-testid="scale-confusion">
                <caption>"Items by the judge's point (rows) and the raters' (columns)"</caption>
                <thead>
                    <tr>
                        <th>"judge ↓ raters →"</th>
                        {(1..=points).map(|point| view! { <th>{point}</th> }).collect_view()}
                    </tr>
                </thead>
                <tbody>
                    {calibration.confusion.into_iter().enumerate().map(|(row, counts)| view! {
                        <tr>
                            <th>{row + 1}</th>
                            {counts.into_iter().enumerate().map(|(column, count)| view! {
                                <td class=if row == column { "diagonal" } else { "" }>{count}</td>
                            }).collect_view()}
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <table>
                <caption>"Probability of passing against the raters' pass or fail"</caption>
                <thead><tr><th>"Confidence"</th><th>"Items"</th><th>"Mean confidence"</th><th>"Accuracy"</th></tr></thead>
                <ReliabilityRows bins=calibration.pass_bins.into_iter().filter(|bin| bin.count > 0).collect()/>
            </table>
        </section>
    }
}

/// What a version's drift canary found against its previous version on the same items.
#[component]
fn CanaryCard(canary: JudgeCanary) -> impl IntoView {
    let note = canary.note();
    view! {
        <section class="card" data-testid="canary">
            <h2>{format!("Drift canary against {}", canary.baseline)}</h2>
            <p data-testid="canary-note">{note}</p>
            {canary.error.map(|error| view! { <p class="error">{format!("The canary could not run: {error}")}</p> })}
            {canary.report.map(|report| view! {
                <ul class="counts">
                    <li>"reference items re-graded: " <strong data-testid="canary-items">{report.items}</strong></li>
                    <li>"agreement with the previous version: " <strong data-testid="canary-agreement">{percent(report.agreement_with_old)}</strong></li>
                    <li>"Cohen's kappa with it: " <strong>{decimal(report.kappa_with_old)}</strong></li>
                    <li>"accuracy against humans: " <strong>{percent(report.new_accuracy)}</strong> " (the previous version: " {percent(report.old_accuracy)} ")"</li>
                    <li>"judge failures: " <strong>{report.failures}</strong></li>
                </ul>
                <ul data-testid="canary-drift">
                    {report.drift.into_iter().map(|why| view! { <li>{format!("It {why}.")}</li> }).collect_view()}
                </ul>
            })}
            <p class="hint">
                "A new version re-grades the items its previous version graded that humans also labelled (at most "
                {arbiter_domain::grading::canary::REFERENCE_ITEMS} ", oldest first); falling below "
                {format!("{:.0}%", arbiter_domain::grading::canary::MIN_AGREEMENT_WITH_OLD * 100.0)}
                " agreement, or losing more than "
                {format!("{:.0}", arbiter_domain::grading::canary::MAX_ACCURACY_DROP * 100.0)}
                " points of accuracy, raises a Judge drift alert."
            </p>
        </section>
    }
}

/// A reliability diagram's numbers: one row per confidence bin.
#[component]
fn ReliabilityRows(bins: Vec<ReliabilityBin>) -> impl IntoView {
    view! {
        <tbody>
            {bins.into_iter().map(|bin| view! {
                <tr>
                    <td>{format!("{:.2}–{:.2}", bin.lower, bin.upper)}</td>
                    <td>{bin.count}</td>
                    <td>{decimal(bin.mean_confidence)}</td>
                    <td>{percent(bin.accuracy)}</td>
                </tr>
            }).collect_view()}
        </tbody>
    }
}
