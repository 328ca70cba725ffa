//! Evals: define one (prompt template, generation settings, exact-match grader, repetitions)
//! and launch it against a registered checkpoint.

use crate::catalog::api::LaunchRun;
use crate::catalog::api::{evals_page, CheckpointView, CreateEval};
use crate::components::{ActionError, ErrorNote};
use arbiter_domain::manifest::EvalSummary;
use leptos::prelude::*;

const DEFAULT_TEMPLATE: &str =
    "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {input}";

#[component]
pub fn EvalsPage() -> impl IntoView {
    let create = ServerAction::<CreateEval>::new();
    let launch = ServerAction::<LaunchRun>::new();
    let data = Resource::new(move || create.version().get(), |_| evals_page());
    view! {
        <h1>"Evals"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => {
                        let checkpoints = data.checkpoints.clone();
                        view! {
                            <section class="card">
                                <h2>"Launch a run"</h2>
                                <ActionError value=launch.value()/>
                                <table>
                                    <thead><tr><th>"Eval"</th><th>"Dataset"</th><th>"Settings"</th><th>"Launch against"</th></tr></thead>
                                    <tbody>
                                        {data.evals.into_iter().map(|eval| view! {
                                            <EvalRow eval checkpoints=checkpoints.clone() launch/>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            </section>
                            <section class="card">
                                <h2>"Define an eval"</h2>
                                <ActionForm action=create attr:class="stack">
                                    <label>"Name" <input name="name" required maxlength="200"/></label>
                                    <label>
                                        "Dataset"
                                        <select name="dataset_id" required>
                                            {data.datasets.into_iter().map(|dataset| view! {
                                                <option value=dataset.id.to_string()>{dataset.name}</option>
                                            }).collect_view()}
                                        </select>
                                    </label>
                                    <label>
                                        "Prompt template (" <code>"{input}"</code> " is replaced by each item's input)"
                                        <textarea name="prompt_template" rows="4" required>{DEFAULT_TEMPLATE}</textarea>
                                    </label>
                                    <div class="row">
                                        <label>"Max tokens" <input name="max_tokens" type="number" value="128" min="1"/></label>
                                        <label>"Temperature" <input name="temperature" type="number" value="0" min="0" max="2" step="0.1"/></label>
                                        <label>"Repetitions" <input name="repetitions" type="number" value="1" min="1" max="100"/></label>
                                        <label>"Seed" <input name="seed" type="number" value="0" min="0"/></label>
                                    </div>
                                    <label>
                                        "Deterministic grader as JSON (empty: exact match on the final " <code>"Answer:"</code> " line), e.g. "
                                        <code>"{\"kind\": \"numeric\", \"relative_tolerance\": 0.01}"</code>
                                        <textarea name="grader" rows="2" placeholder="{\"kind\": \"exact_match\"}"></textarea>
                                    </label>
                                    <p class="hint">"Kinds: exact_match, normalised_match, regex_match, numeric, multiple_choice, contains, not_contains, json_valid, json_schema, length, all_of, any_of. Answers it cannot decide go to the eval's judges (set on the eval's page), else to the human annotation queue."</p>
                                    <button type="submit">"Define eval"</button>
                                </ActionForm>
                                <ActionError value=create.value()/>
                            </section>
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn EvalRow(
    eval: EvalSummary,
    checkpoints: Vec<CheckpointView>,
    launch: ServerAction<LaunchRun>,
) -> impl IntoView {
    let settings = format!(
        "{} · max {} tokens · T={} · {} rep(s) · seed {}",
        eval.grader.id_version(),
        eval.max_tokens,
        eval.temperature,
        eval.repetitions,
        eval.seed
    );
    view! {
        <tr>
            <td><a href=format!("/evals/{}", eval.id)>{eval.name.clone()}</a></td>
            <td>{eval.dataset_name.clone()}</td>
            <td class="hint">{settings}</td>
            <td>
                <ActionForm action=launch attr:class="inline">
                    <input type="hidden" name="eval_id" value=eval.id.to_string()/>
                    <select name="checkpoint_id" aria-label=format!("checkpoint for {}", eval.name)>
                        {checkpoints.into_iter().map(|CheckpointView { checkpoint, .. }| view! {
                            <option value=checkpoint.id.to_string()>{checkpoint.name}</option>
                        }).collect_view()}
                    </select>
                    <select name="priority" aria-label=format!("priority for {}", eval.name)>
                        <option value="scheduled">"scheduled"</option>
                        <option value="promotion">"promotion decision"</option>
                        <option value="ablation">"ablation"</option>
                    </select>
                    <button type="submit">"Launch"</button>
                </ActionForm>
            </td>
        </tr>
    }
}
