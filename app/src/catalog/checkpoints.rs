//! Checkpoints: a name, an OpenAI-compatible endpoint URL and the served model name.

use crate::catalog::api::{
    key_bindings, list_checkpoints, list_endpoints, BindEndpointKey, CheckpointView, EndpointView,
    RegisterCheckpoint, RetractCheckpoint, SetCheckpointPrices, SetEndpointLimit,
};
use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use crate::operations::suites::SuitesSection;
use leptos::prelude::*;

#[component]
pub fn CheckpointsPage() -> impl IntoView {
    let register = ServerAction::<RegisterCheckpoint>::new();
    let set_prices = ServerAction::<SetCheckpointPrices>::new();
    let retract = ServerAction::<RetractCheckpoint>::new();
    let checkpoints = Resource::new(
        move || {
            (
                register.version().get(),
                set_prices.version().get(),
                retract.version().get(),
            )
        },
        |_| list_checkpoints(),
    );
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
                <div class="row">
                    <label>"Training run (optional)" <input name="options[training_run]" placeholder="pretrain-7b-v3"/></label>
                    <label>"Training step (optional)" <input name="options[training_step]" type="number" min="0" placeholder="1000"/></label>
                    <label>"Decision value (priority of its suites' runs)"
                        <select name="options[decision]">
                            <option value="scheduled">"scheduled"</option>
                            <option value="promotion">"promotion candidate"</option>
                            <option value="ablation">"ablation"</option>
                        </select>
                    </label>
                </div>
                <details>
                    <summary>"Replicas, fingerprint, limits, prices and fallback (optional)"</summary>
                    <div class="stack">
                        <label>
                            "Replica endpoint URLs (comma-separated; requests go to the least loaded)"
                            <input name="options[replica_urls]" placeholder="http://gpu-2:8000/v1, http://gpu-3:8000/v1"/>
                        </label>
                        <div class="row">
                            <label>"Engine build" <input name="options[engine_build]" placeholder="vllm 0.6.3"/></label>
                            <label>"Parallel layout" <input name="options[parallel_layout]" placeholder="tp=4,pp=1"/></label>
                            <label>"Max requests in flight" <input name="options[max_in_flight]" type="number" min="1" placeholder="256"/></label>
                        </div>
                        <div class="row">
                            <label>"USD per million prompt tokens" <input name="options[input_usd_per_mtok]" type="number" min="0" step="any" placeholder="0"/></label>
                            <label>"USD per million completion tokens" <input name="options[output_usd_per_mtok]" type="number" min="0" step="any" placeholder="0"/></label>
                        </div>
                        <label>
                            "API key (env:ARBITER_ENDPOINT_KEY_NAME to read it from the workers' environment, or the key itself: stored encrypted, never shown again; several keys separated by commas share the requests, each with its own rate limit)"
                            <input name="options[api_key]" type="password" autocomplete="off" placeholder="env:ARBITER_ENDPOINT_KEY_VLLM"/>
                        </label>
                        <label>
                            "Fallback checkpoint (tried once when retries run out)"
                            <input name="options[fallback_checkpoint]" placeholder="name of a registered checkpoint"/>
                        </label>
                        <p class="hint">"The served model (from /v1/models), engine build and layout form the endpoint fingerprint that keys the generation cache."</p>
                    </div>
                </details>
                <button type="submit">"Register"</button>
            </ActionForm>
            <ActionError value=register.value()/>
            <ActionError value=set_prices.value()/>
            <ActionError value=retract.value()/>
        </section>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match checkpoints.await {
                    Ok(checkpoints) => view! {
                        <table>
                            <thead><tr><th>"Name"</th><th>"Training run · step"</th><th>"Endpoints"</th><th>"Model"</th><th>"Fingerprint"</th><th>"API key"</th><th>"Limit"</th><th>"Price (USD / M tokens in · out)"</th><th>"Fallback"</th><th>"Rolled back?"</th></tr></thead>
                            <tbody>
                                {checkpoints.into_iter().map(|CheckpointView { checkpoint, fallback_name, api_key, may_change }| {
                                    let fingerprint = [checkpoint.engine_build.as_str(), checkpoint.parallel_layout.as_str()]
                                        .into_iter()
                                        .filter(|part| !part.is_empty())
                                        .collect::<Vec<_>>()
                                        .join(" · ");
                                    let training = match (checkpoint.training_run.as_str(), checkpoint.training_step) {
                                        ("", None) => String::new(),
                                        (run, None) => run.to_string(),
                                        ("", Some(step)) => format!("step {step}"),
                                        (run, Some(step)) => format!("{run} · step {step}"),
                                    };
                                    let retraction_id = format!("retraction-{}", checkpoint.name);
                                    let retract_label = format!("why {} is retracted", checkpoint.name);
                                    view! {
                                        <tr>
                                            <td>{checkpoint.name.clone()}</td>
                                            <td>{training}</td>
                                            <td>
                                                <code>{checkpoint.base_url}</code>
                                                {checkpoint.replica_urls.into_iter().map(|url| view! { <br/><code>{url}</code> }).collect_view()}
                                            </td>
                                            <td>{checkpoint.model}</td>
                                            <td>{fingerprint}</td>
                                            <td>{api_key}</td>
                                            <td>{checkpoint.max_in_flight} " in flight"</td>
                                            <td>
                                                {if may_change { view! {
                                                <ActionForm action=set_prices attr:class="inline">
                                                    <input type="hidden" name="checkpoint_id" value=checkpoint.id.to_string()/>
                                                    <input name="input_usd_per_mtok" type="number" min="0" step="any" size="6"
                                                        aria-label=format!("prompt price of {}", checkpoint.name) value=checkpoint.prices.input_usd_per_mtok.to_string()/>
                                                    <input name="output_usd_per_mtok" type="number" min="0" step="any" size="6"
                                                        aria-label=format!("completion price of {}", checkpoint.name) value=checkpoint.prices.output_usd_per_mtok.to_string()/>
                                                    <button type="submit" class="secondary">"Set"</button>
                                                </ActionForm>
                                                }.into_any() } else {
                                                    format!("{} · {}", checkpoint.prices.input_usd_per_mtok, checkpoint.prices.output_usd_per_mtok).into_any()
                                                }}
                                            </td>
                                            <td>{fallback_name.unwrap_or_default()}</td>
                                            <td data-testid=retraction_id>
                                                {match (checkpoint.retraction, may_change) {
                                                    (Some(retraction), _) => view! {
                                                        <strong>"retracted"</strong> ": " {retraction.reason}
                                                        <span class="hint">" (" {retraction.by.unwrap_or_else(|| "operator".into())} ", " {format_time(retraction.at)} ")"</span>
                                                    }.into_any(),
                                                    (None, true) => view! {
                                                        <ActionForm action=retract attr:class="inline">
                                                            <input type="hidden" name="checkpoint_id" value=checkpoint.id.to_string()/>
                                                            <input name="reason" required size="16" placeholder="why it is rolled back"
                                                                aria-label=retract_label/>
                                                            <button type="submit" class="secondary">"Retract"</button>
                                                        </ActionForm>
                                                    }.into_any(),
                                                    (None, false) => ().into_any(),
                                                }}
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
        <crate::catalog::served::ServeSection/>
        <EndpointsSection refresh=register.version()/>
        <KeyBindingsSection refresh=register.version()/>
        <SuitesSection refresh=register.version()/>
    }
}

/// The model servers checkpoints are registered on. Every checkpoint (and team) on one shares
/// its limit, so the limit changes here, by its owner or a lead, never by registering one more.
#[component]
fn EndpointsSection(#[prop(into)] refresh: Signal<usize>) -> impl IntoView {
    let set_limit = ServerAction::<SetEndpointLimit>::new();
    let endpoints = Resource::new(
        move || (refresh.get(), set_limit.version().get()),
        |_| list_endpoints(),
    );
    view! {
        <section class="card">
            <h2>"Endpoints"</h2>
            <p class="hint">"Requests in flight to each server from all workers together. Its owner (who first registered a checkpoint on it), leads and admins change the limit."</p>
            <ActionError value=set_limit.value()/>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match endpoints.await {
                        Ok(endpoints) => view! {
                            <table>
                                <thead><tr><th>"URL"</th><th>"Owner"</th><th>"Checkpoints"</th><th>"Max in flight"</th></tr></thead>
                                <tbody>
                                    {endpoints.into_iter().map(|EndpointView { endpoint, editable }| {
                                        let limit = endpoint.max_in_flight;
                                        view! {
                                            <tr>
                                                <td><code>{endpoint.base_url.clone()}</code></td>
                                                <td>{endpoint.owner.clone().unwrap_or_else(|| "operator".into())}</td>
                                                <td>{endpoint.checkpoints}</td>
                                                <td>
                                                    {if editable { view! {
                                                        <ActionForm action=set_limit attr:class="inline">
                                                            <input type="hidden" name="endpoint_id" value=endpoint.id.to_string()/>
                                                            <input name="max_in_flight" type="number" min="1" max="100000" size="6" required
                                                                aria-label=format!("max in flight of {}", endpoint.base_url) value=limit.to_string()/>
                                                            <button type="submit" class="secondary">"Set"</button>
                                                        </ActionForm>
                                                    }.into_any() } else { limit.to_string().into_any() }}
                                                </td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any(),
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

/// Operator keys (`env:ARBITER_ENDPOINT_KEY_…`) go only to the hosts they are bound to: the
/// operator's `…_HOSTS` variable, or else what a lead or admin sets here. Shown to leads and
/// admins only (others get nothing, and the section stays empty).
#[component]
fn KeyBindingsSection(#[prop(into)] refresh: Signal<usize>) -> impl IntoView {
    let bind = ServerAction::<BindEndpointKey>::new();
    let bindings = Resource::new(
        move || (refresh.get(), bind.version().get()),
        |_| key_bindings(),
    );
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                bindings.await.ok().map(|bindings| view! {
                    <section class="card" data-testid="key-bindings">
                        <h2>"Endpoint keys from the environment"</h2>
                        <p class="hint">"Each operator key is sent only to the hosts it is bound to (host or host:port, comma-separated). The operator's …_HOSTS variable wins when set; otherwise a lead or admin binds it here. An unbound key is never sent."</p>
                        <ActionError value=bind.value()/>
                        <table>
                            <thead><tr><th>"Variable"</th><th>"Bound to"</th><th>"Set by"</th></tr></thead>
                            <tbody>
                                {bindings.into_iter().map(|binding| view! {
                                    <tr>
                                        <td><code>{binding.variable.clone()}</code></td>
                                        <td>
                                            {if binding.editable { view! {
                                                <ActionForm action=bind attr:class="inline">
                                                    <input type="hidden" name="variable" value=binding.variable.clone()/>
                                                    <input name="hosts" size="40" placeholder="vllm.internal:8000"
                                                        aria-label=format!("hosts of {}", binding.variable) value=binding.hosts.clone()/>
                                                    <button type="submit" class="secondary">"Bind"</button>
                                                </ActionForm>
                                            }.into_any() } else { view! { <code>{binding.hosts.clone()}</code> }.into_any() }}
                                        </td>
                                        <td>{if binding.set_by.is_empty() { "unbound: never sent".to_string() } else { binding.set_by.clone() }}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    </section>
                })
            })}
        </Transition>
    }
}
