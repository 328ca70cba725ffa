//! The landing page: where each role starts.

use crate::accounts::api::current_user;
use crate::annotation::api::queue_size;
use crate::components::ErrorNote;
use crate::runs::api::list_runs;
use arbiter_domain::accounts::Permission;
use leptos::prelude::*;

#[component]
pub fn HomePage() -> impl IntoView {
    let user = Resource::new(|| (), |_| current_user());
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match user.await {
                    Ok(Some(user)) => {
                        let researcher = user.role.can(Permission::ViewResults);
                        let annotator = user.role.can(Permission::Annotate);
                        view! {
                            <h1>"Welcome, " {user.username.clone()}</h1>
                            <Show when=move || annotator>
                                <AnnotatorHome/>
                            </Show>
                            <Show when=move || researcher>
                                <ResearcherHome/>
                            </Show>
                        }
                            .into_any()
                    }
                    Ok(None) => view! { <p><a href="/login">"Log in"</a> " to use Arbiter."</p> }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn AnnotatorHome() -> impl IntoView {
    let queue = Resource::new(|| (), |_| queue_size());
    view! {
        <section class="card">
            <h2>"Human annotation queue"</h2>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    queue.await.map(|size| view! { <p>{size} " items waiting for a label."</p> })
                })}
            </Suspense>
            <a class="button" href="/annotate">"Start annotating"</a>
        </section>
    }
}

#[component]
fn ResearcherHome() -> impl IntoView {
    let runs = Resource::new(|| (), |_| list_runs());
    view! {
        <section class="card">
            <h2>"Recent runs"</h2>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    runs.await.map(|runs| {
                        view! {
                            <ul>
                                {runs.into_iter().take(10).map(|run| view! {
                                    <li>
                                        <a href=format!("/runs/{}", run.id)>
                                            "Run " {run.id.get()} ": " {run.eval_name} " on " {run.checkpoint_name}
                                        </a>
                                        " — " {run.done_count} "/" {run.expected_count} " (" {run.status.as_str()} ")"
                                    </li>
                                }).collect_view()}
                            </ul>
                        }
                    })
                })}
            </Suspense>
            <p>
                <a href="/datasets">"Upload a dataset"</a> " · " <a href="/evals">"Define or launch an eval"</a>
                " · " <a href="/runs">"Compare runs"</a>
            </p>
        </section>
    }
}
