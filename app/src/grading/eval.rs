//! One eval: its definition, its triage policy (edited as new versions, each kept with who
//! changed it and why) and recalibration of the accept threshold from human labels.

use crate::catalog::eval_prompt::{EvalPreview, EvalPrompt};
use crate::components::{ActionError, ErrorNote};
use crate::format::{format_time, route_id};
use crate::grading::api::{eval_detail, EvalPageData, RecalibratePolicy, SavePolicy};
use arbiter_domain::grading::judge::Judge;
use arbiter_domain::grading::triage::PolicyVersion;
use arbiter_domain::grading::tuning::{TuningRecord, DEFAULT_BOUNDS};
use leptos::prelude::*;

#[component]
pub fn EvalPage() -> impl IntoView {
    let id = route_id();
    let save = ServerAction::<SavePolicy>::new();
    let recalibrate = ServerAction::<RecalibratePolicy>::new();
    let data = Resource::new(
        move || (id(), save.version().get(), recalibrate.version().get()),
        |(id, _, _)| eval_detail(id),
    );
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! { <EvalDetail data save recalibrate/> }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

fn judge_name(judges: &[Judge], id: Option<i64>) -> String {
    match id {
        None => "none".into(),
        Some(id) => judges
            .iter()
            .find(|judge| judge.id == id)
            .map_or_else(|| format!("judge {id}"), |judge| judge.grader_id()),
    }
}

#[component]
fn EvalDetail(
    data: EvalPageData,
    save: ServerAction<SavePolicy>,
    recalibrate: ServerAction<RecalibratePolicy>,
) -> impl IntoView {
    let eval = data.eval;
    let current: PolicyVersion = data
        .policies
        .first()
        .cloned()
        .unwrap_or(data.default_policy.clone());
    let version = current.version;
    let current = current.policy;
    let tuning = current.auto_tuning.clone();
    let judges = data.judges.clone();
    let all_judges = data.judges.clone();
    let canaries = data.canaries.clone();
    // Each version is offered with what its drift canary found against the previous one.
    let judge_options = move |selected: Option<i64>| {
        let judges = all_judges.clone();
        let canaries = canaries.clone();
        view! {
            <option value="" selected=selected.is_none()>"none"</option>
            {judges.into_iter().map(|judge| {
                let label = match canaries.iter().find(|canary| canary.judge_id == judge.id) {
                    Some(canary) => format!("{} ({})", judge.grader_id(), canary.note()),
                    None => judge.grader_id(),
                };
                view! {
                    <option value=judge.id.to_string() selected=selected == Some(judge.id)>{label}</option>
                }
            }).collect_view()}
        }
    };
    view! {
        <h1>"Eval: " {eval.name.clone()}</h1>
        <section class="card">
            <p>"Dataset " <strong>{eval.dataset_name.clone()}</strong> " · max " {eval.max_tokens} " tokens · T="
               {eval.temperature} " · " {eval.repetitions} " rep(s) · seed " {eval.seed}</p>
            <p>"Deterministic grader " <code data-testid="eval-grader">{eval.grader.id_version()}</code> " " <code class="hint">{serde_json::to_string(&eval.grader).unwrap_or_default()}</code></p>
            <EvalPrompt eval=eval.clone()/>
            <h3>"Preview a request"</h3>
            <EvalPreview eval_id=eval.id checkpoints=data.checkpoints.clone()/>
        </section>
        <section class="card">
            <h2>"Triage policy"</h2>
            <p class="hint">
                "Deterministic graders decide what they can. The rest go to the cheap judge: at or above the accept "
                "threshold its verdict stands; between the thresholds the strong judge is asked; below, on a judge "
                "failure, or when judges disagree, a human decides. A random share of accepted verdicts is audited by humans."
            </p>
            <p data-testid="policy-current">
                {if version == 0 {
                    "No policy yet: items the grader cannot decide go straight to humans.".to_string()
                } else {
                    format!(
                        "Version {}: cheap judge {}, strong judge {}, accept ≥ {:.3}, escalate ≥ {:.3}, audit {:.1}%, {} sample(s), {} rater(s) per human item",
                        version,
                        judge_name(&judges, current.cheap_judge),
                        judge_name(&judges, current.strong_judge),
                        current.accept_threshold,
                        current.escalate_threshold,
                        current.audit_rate * 100.0,
                        current.judge_samples,
                        current.human_overlap,
                    ) + &tuning.as_ref().map(|bounds| format!(
                        "; re-tuned for at most {:.1}% errors within accept [{:.3}, {:.3}], judge floor {:.0}%",
                        bounds.target_error_rate * 100.0,
                        bounds.min_accept_threshold,
                        bounds.max_accept_threshold,
                        bounds.judge_floor * 100.0,
                    )).unwrap_or_default()
                }}
            </p>
            <ActionForm action=save attr:class="stack">
                <input type="hidden" name="eval_id" value=eval.id.to_string()/>
                <div class="row">
                    <label>"Cheap judge" <select name="cheap_judge">{judge_options(current.cheap_judge)}</select></label>
                    <label>"Strong judge" <select name="strong_judge">{judge_options(current.strong_judge)}</select></label>
                </div>
                <div class="row">
                    <label>"Accept threshold" <input name="accept_threshold" type="number" min="0" max="1" step="0.001" value=current.accept_threshold.to_string()/></label>
                    <label>"Escalate threshold" <input name="escalate_threshold" type="number" min="0" max="1" step="0.001" value=current.escalate_threshold.to_string()/></label>
                    <label>"Audit rate" <input name="audit_rate" type="number" min="0" max="1" step="0.001" value=current.audit_rate.to_string()/></label>
                    <label>"Judge samples" <input name="judge_samples" type="number" min="1" max="5" value=current.judge_samples.to_string()/></label>
                    <label>"USD per human label" <input name="human_usd_per_label" type="number" min="0" step="0.01" value=current.human_usd_per_label.to_string()/></label>
                </div>
                <div class="row">
                    <label>"Raters per human item" <input name="human_overlap" type="number" min="1" max="10" value=current.human_overlap.to_string()/></label>
                    <label>"QC review rate" <input name="review_rate" type="number" min="0" max="1" step="0.005" value=current.review_rate.to_string()/></label>
                    <label>"Skill raters need" <input name="required_skill" maxlength="40" placeholder="any rater" value=current.required_skill.clone().unwrap_or_default()/></label>
                    <label>"Rubric raters answer" <input name="rubric" maxlength="80" placeholder="pass or fail" value=current.rubric.clone().unwrap_or_default()/></label>
                </div>
                <fieldset data-testid="auto-tuning">
                    <legend>"Re-tune from human labels"</legend>
                    <p class="hint">"As human labels arrive, the accept threshold moves to the lowest confidence at which the cheap judge stays within the target error rate, held within the bounds; a cheap judge right on fewer human-checked verdicts than the floor is taken out of the first stage (the strong judge judges first, or humans decide) with an alert. Each change is a new version with the data behind it. Leave the target empty to change the policy only by hand."</p>
                    <div class="row">
                        // Shown rounded to each field's step, so a browser accepts the form as shown.
                        <label>"Target error rate (%)" <input name="tune_target_error_percent" type="number" min="0.1" max="50" step="0.1" placeholder="off"
                            value=tuning.as_ref().map(|bounds| format!("{:.1}", bounds.target_error_rate * 100.0)).unwrap_or_default()/></label>
                        <label>"Lowest threshold allowed" <input name="tune_min_accept" type="number" min="0" max="1" step="0.001"
                            value=format!("{:.3}", tuning.as_ref().map_or(DEFAULT_BOUNDS.0, |bounds| bounds.min_accept_threshold))/></label>
                        <label>"Highest threshold allowed" <input name="tune_max_accept" type="number" min="0" max="1" step="0.001"
                            value=format!("{:.3}", tuning.as_ref().map_or(DEFAULT_BOUNDS.1, |bounds| bounds.max_accept_threshold))/></label>
                        <label>"Judge floor (% right)" <input name="tune_judge_floor_percent" type="number" min="0" max="100" step="1"
                            value=format!("{:.0}", tuning.as_ref().map_or(DEFAULT_BOUNDS.2, |bounds| bounds.judge_floor) * 100.0)/></label>
                    </div>
                </fieldset>
                <label>"What changed and why" <input name="note" maxlength="1000"/></label>
                <button type="submit">"Save as a new version"</button>
            </ActionForm>
            <ActionError value=save.value()/>
            <h3>"Recalibrate from human labels"</h3>
            <ActionForm action=recalibrate attr:class="inline">
                <input type="hidden" name="eval_id" value=eval.id.to_string()/>
                <label>"Target error rate (%)" <input name="target_error_percent" type="number" min="0.1" max="50" step="0.1" value="2"/></label>
                <button type="submit" class="secondary">"Recalibrate"</button>
            </ActionForm>
            <ActionError value=recalibrate.value()/>
            <p class="hint">"Sets the accept threshold to the lowest confidence at which the cheap judge's human-checked verdicts stay within the target error rate (with at least 30 of them above it), as a new version recording the old and new thresholds."</p>
        </section>
        <section class="card">
            <h2>"Runs and cost by stage"</h2>
            <table data-testid="eval-costs">
                <thead><tr><th>"Run"</th><th>"Checkpoint"</th><th>"Status"</th><th>"Generation"</th><th>"Judging"</th><th>"Humans"</th><th>"Total (USD)"</th><th>"Per item"</th></tr></thead>
                <tbody>
                    {data.runs.into_iter().map(|run| view! {
                        <tr>
                            <td><a href=format!("/runs/{}", run.run.id)>"#" {run.run.id.get()}</a></td>
                            <td>{run.run.checkpoint_name}</td>
                            <td>{run.run.status.as_str()}</td>
                            <td>{format!("{:.4}", run.cost.costs.generation_usd)}</td>
                            <td>{format!("{:.4}", run.cost.costs.judging_usd)}</td>
                            <td>{format!("{:.2}", run.cost.human_usd)}</td>
                            <td>{format!("{:.4}", run.cost.total_usd)}</td>
                            <td>{format!("{:.6}", run.cost.usd_per_item)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
        <section class="card">
            <h2>"Policy history"</h2>
            <table data-testid="policy-history">
                <thead><tr><th>"Version"</th><th>"When"</th><th>"By"</th><th>"Thresholds"</th><th>"Note"</th></tr></thead>
                <tbody>
                    {data.policies.into_iter().map(|policy| view! {
                        <tr>
                            <td>{policy.version}</td>
                            <td>{format_time(policy.created_at)}</td>
                            <td>{policy.created_by.clone().unwrap_or_else(|| {
                                let tuned = TuningRecord::of_version(policy.calibration_json.as_deref()).is_some();
                                if tuned { "re-tuning".into() } else { String::new() }
                            })}</td>
                            <td>{format!("accept ≥ {:.3}, escalate ≥ {:.3}, audit {:.1}%", policy.policy.accept_threshold, policy.policy.escalate_threshold, policy.policy.audit_rate * 100.0)}</td>
                            <td>{policy.note}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
