//! Suites on the Checkpoints page: the tiered sets of evals that each new checkpoint triggers
//! (smoke on every checkpoint, full every Nth or on demand), a form to add one, running a suite
//! on a checkpoint now, and the runs suites launched.

use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use crate::operations::suites_api::{suites_page, CreateSuite, DeleteSuite, RunSuite, SuitesData};
use leptos::prelude::*;

/// `refresh` changes when the page registered a checkpoint (which may have launched suites).
#[component]
pub fn SuitesSection(#[prop(into)] refresh: Signal<usize>) -> impl IntoView {
    let create = ServerAction::<CreateSuite>::new();
    let delete = ServerAction::<DeleteSuite>::new();
    let run = ServerAction::<RunSuite>::new();
    let page = Resource::new(
        move || {
            (
                refresh.get(),
                create.version().get(),
                delete.version().get(),
                run.version().get(),
            )
        },
        |_| suites_page(),
    );
    view! {
        <section class="card" data-testid="suites">
            <h2>"Suites"</h2>
            <p class="hint">
                "Each checkpoint registered here, through " <code>"POST /api/v1/checkpoints"</code>
                " or in the watched folder (" <code>"arbiter serve --watch-checkpoints DIR"</code>
                ") launches every smoke suite, and each full suite whose turn it is. Its decision value "
                "(promotion, scheduled, ablation) sets the runs' priority."
            </p>
            <ActionError value=create.value()/>
            <ActionError value=delete.value()/>
            <ActionError value=run.value()/>
            {move || run.value().get().and_then(Result::ok).map(|outcome| view! {
                <ul class="notice" role="status" data-testid="suite-outcome">
                    {outcome.lines.into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}
                </ul>
            })}
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match page.await {
                        Ok(data) => view! { <SuitesBody data create delete run/> }.into_any(),
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn SuitesBody(
    data: SuitesData,
    create: ServerAction<CreateSuite>,
    delete: ServerAction<DeleteSuite>,
    run: ServerAction<RunSuite>,
) -> impl IntoView {
    let suite_names: Vec<String> = data.suites.iter().map(|suite| suite.name.clone()).collect();
    view! {
        {if data.suites.is_empty() {
            view! { <p>"No suites yet: new checkpoints launch nothing by themselves."</p> }.into_any()
        } else {
            view! {
                <table>
                    <thead><tr><th>"Suite"</th><th>"Tier"</th><th>"Runs on"</th><th>"Training run"</th><th>"Team"</th><th>"Evals"</th><th></th></tr></thead>
                    <tbody>
                        {data.suites.into_iter().map(|suite| {
                            let id = suite.id;
                            view! {
                                <tr>
                                    <td>{suite.name}</td>
                                    <td>{suite.tier}</td>
                                    <td>{suite.schedule}</td>
                                    <td>{if suite.training_run.is_empty() { "any".to_string() } else { suite.training_run }}</td>
                                    <td>{suite.team}</td>
                                    <td>{suite.evals.join(", ")}</td>
                                    <td><button class="secondary" on:click=move |_| { delete.dispatch(DeleteSuite { id }); }>"Delete"</button></td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
        <details>
            <summary>"Add a suite"</summary>
            <ActionForm action=create attr:class="stack">
                <div class="row">
                    <label>"Suite name" <input name="name" required placeholder="nightly-smoke"/></label>
                    <label>"Suite tier"
                        <select name="tier">
                            <option value="smoke">"smoke: every checkpoint"</option>
                            <option value="full">"full: every Nth, or on demand"</option>
                        </select>
                    </label>
                    <label>"Full suites: every Nth checkpoint (0: on demand)" <input name="every_nth" type="number" min="0" placeholder="5"/></label>
                </div>
                <div class="row">
                    <label>"Suite training run (empty: any)" <input name="training_run" placeholder="pretrain-7b-v3"/></label>
                    <label>"Suite team (empty: yours)" <input name="team"/></label>
                </div>
                <fieldset>
                    <legend>"Evals"</legend>
                    {data.evals.into_iter().map(|(id, name)| view! {
                        <label class="inline"><input type="checkbox" name=format!("evals[{id}]")/> " " {name}</label>
                    }).collect_view()}
                </fieldset>
                <button type="submit">"Add suite"</button>
            </ActionForm>
        </details>
        {(!suite_names.is_empty()).then(|| view! {
            <h3>"Run a suite now"</h3>
            <ActionForm action=run attr:class="row">
                <label>"Suite"
                    <select name="suite">
                        {suite_names.into_iter().map(|name| view! { <option value=name.clone()>{name.clone()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"on checkpoint"
                    <select name="checkpoint_id">
                        {data.checkpoints.into_iter().map(|(id, name)| view! { <option value=id.to_string()>{name}</option> }).collect_view()}
                    </select>
                </label>
                <label>"priority"
                    <select name="priority">
                        <option value="scheduled">"scheduled"</option>
                        <option value="promotion">"promotion"</option>
                        <option value="ablation">"ablation"</option>
                    </select>
                </label>
                <button type="submit">"Run"</button>
            </ActionForm>
        })}
        {(!data.launches.is_empty()).then(|| view! {
            <h3>"Launched by suites"</h3>
            <table data-testid="suite-launches">
                <thead><tr><th>"When"</th><th>"Suite"</th><th>"Checkpoint"</th><th>"Run"</th><th>"Why"</th></tr></thead>
                <tbody>
                    {data.launches.into_iter().map(|launch| view! {
                        <tr>
                            <td>{format_time(launch.created_at)}</td>
                            <td>{launch.suite}</td>
                            <td>{launch.checkpoint}</td>
                            <td><a href=format!("/runs/{}", launch.run_id)>{format!("run {}", launch.run_id)}</a></td>
                            <td>{launch.reason}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        })}
    }
}
