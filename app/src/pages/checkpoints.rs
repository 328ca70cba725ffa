//! Checkpoints: a name, an OpenAI-compatible endpoint URL and the served model name.

use crate::api::{list_checkpoints, RegisterCheckpoint};
use crate::components::{ActionError, ErrorNote};
use leptos::prelude::*;

#[component]
pub fn CheckpointsPage() -> impl IntoView {
    let register = ServerAction::<RegisterCheckpoint>::new();
    let checkpoints = Resource::new(move || register.version().get(), |_| list_checkpoints());
    view! {
        <h1>"Checkpoints"</h1>
        <section class="card">
            <h2>"Register a checkpoint"</h2>
            <ActionForm action=register attr:class="stack">
                <label>"Name" <input name="name" required placeholder="my-model-step-1000"/></label>
                <label>
                    "Endpoint URL (OpenAI-compatible)"
                    <input name="endpoint_url" required placeholder="http://127.0.0.1:8000/v1"/>
                </label>
                <label>"Served model name" <input name="model" required placeholder="my-model"/></label>
                <button type="submit">"Register"</button>
            </ActionForm>
            <ActionError value=register.value()/>
        </section>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match checkpoints.await {
                    Ok(checkpoints) => view! {
                        <table>
                            <thead><tr><th>"Name"</th><th>"Endpoint"</th><th>"Model"</th></tr></thead>
                            <tbody>
                                {checkpoints.into_iter().map(|checkpoint| view! {
                                    <tr>
                                        <td>{checkpoint.name}</td>
                                        <td><code>{checkpoint.base_url}</code></td>
                                        <td>{checkpoint.model}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}
