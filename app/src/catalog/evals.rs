//! Evals: define one (the form is [`DefineEval`]) and launch it against a registered
//! checkpoint.

use crate::catalog::api::LaunchRun;
use crate::catalog::api::{evals_page, CheckpointView, CreateEval};
use crate::catalog::eval_form::DefineEval;
use crate::components::{ActionError, ErrorNote};
use arbiter_domain::manifest::EvalSummary;
use leptos::prelude::*;

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
                                <DefineEval datasets=data.datasets create/>
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
