//! Checkpoints Arbiter serves: the form that plans and registers one (its servers started by
//! a launcher, its suites run once they are healthy), and the launches with their start-up
//! time split from serving time, restarts, failures and log tails.

use crate::catalog::api::{serving_launches, ServeCheckpoint, ServeOutcome};
use crate::components::{ActionError, ErrorNote};
use crate::format::{format_time, human_duration};
use arbiter_domain::serving::launch::LaunchView;
use leptos::prelude::*;

fn seconds(ms: Option<i64>) -> String {
    ms.map(|ms| human_duration(ms as f64 / 1000.0))
        .unwrap_or_else(|| "–".into())
}

#[component]
pub(crate) fn ServeSection() -> impl IntoView {
    let serve = ServerAction::<ServeCheckpoint>::new();
    let launches = Resource::new(move || serve.version().get(), |_| serving_launches());
    view! {
        <section class="card" data-testid="served-checkpoints">
            <h2>"Serve a checkpoint"</h2>
            <p class="hint">"Arbiter starts its servers on a launcher (`arbiter serve --launchers FILE`), with the smallest tensor-parallel group that leaves a large KV cache and as many replicas as the GPUs hold. Its suites and later runs share one launch and wait until every replica is healthy; the servers retire once its runs are done."</p>
            <ActionForm action=serve attr:class="stack">
                <div class="row">
                    <label>"Checkpoint to serve" <input name="name" required placeholder="sft-7b-step-2000"/></label>
                    <label>"Model name to serve it under" <input name="model" required placeholder="sft-7b"/></label>
                    <label>"Engine"
                        <select name="serve[engine]">
                            <option value="vllm">"vLLM"</option>
                            <option value="sglang">"SGLang"</option>
                            <option value="arbiter_model">"arbiter model serve (CPU)"</option>
                            <option value="simulator">"simulator (SIMULATED)"</option>
                        </select>
                    </label>
                </div>
                <label>"Weights (path the engine loads)" <input name="serve[path]" required placeholder="/models/sft-7b/step-2000"/></label>
                <div class="row">
                    <label>"Parameters (billions)" <input name="serve[params_billions]" type="number" min="0" step="any" placeholder="7"/></label>
                    <label>"Bytes per parameter" <input name="serve[bytes_per_param]" type="number" min="0" step="any" placeholder="2 (bf16)"/></label>
                    <label>"GPUs per node" <input name="serve[gpus_per_node]" type="number" min="1" placeholder="8"/></label>
                    <label>"GPU memory (GiB)" <input name="serve[gpu_memory_gib]" type="number" min="1" step="any" placeholder="80"/></label>
                </div>
                <div class="row">
                    <label>"Nodes" <input name="serve[nodes]" type="number" min="1" placeholder="1"/></label>
                    <label>"Replicas (at most; CPU engines: how many)" <input name="serve[replicas]" type="number" min="1"/></label>
                    <label>"Sustained tokens/s per replica" <input name="serve[sustained_tokens_per_s]" type="number" min="0" step="any" placeholder="for the expected time"/></label>
                </div>
                <div class="row">
                    <label>"Its training run" <input name="training_run"/></label>
                    <label>"Its training step" <input name="training_step" type="number" min="0"/></label>
                    <label>"Priority of its runs"
                        <select name="decision">
                            <option value="scheduled">"scheduled"</option>
                            <option value="promotion">"promotion candidate"</option>
                            <option value="ablation">"ablation"</option>
                        </select>
                    </label>
                </div>
                <div class="row">
                    <button type="submit" name="preview" value="1" class="secondary">"Preview the plan"</button>
                    <button type="submit">"Serve"</button>
                </div>
            </ActionForm>
            <ActionError value=serve.value()/>
            {move || serve.value().get().and_then(Result::ok).map(|outcome| view! { <PlanNote outcome/> })}
            <h3>"Launches"</h3>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match launches.await {
                        Ok(launches) if launches.is_empty() => view! { <p class="hint">"No checkpoint has been served yet."</p> }.into_any(),
                        Ok(launches) => view! { <LaunchTable launches/> }.into_any(),
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn PlanNote(outcome: ServeOutcome) -> impl IntoView {
    let plan = outcome.plan;
    let memory = match (plan.weights_gib, plan.kv_cache_gib_per_gpu) {
        (Some(weights), Some(cache)) => {
            format!(" · weights {weights:.1} GiB, {cache:.1} GiB per GPU left for the KV cache")
        }
        _ => String::new(),
    };
    let rate = plan
        .sustained_tokens_per_s
        .map(|rate| format!(" · {:.0} tokens/s in all", rate * f64::from(plan.replicas)))
        .unwrap_or_default();
    let done = match outcome.registered {
        None => "Plan only: nothing was registered.".to_string(),
        Some((id, 0)) => {
            format!("Registered as checkpoint {id}: its servers start with its first run.")
        }
        Some((id, runs)) => {
            format!(
                "Registered as checkpoint {id}: its servers start now for its {runs} suite runs."
            )
        }
    };
    view! {
        <p data-testid="serving-plan">
            <strong>{format!("tp={} dp={}", plan.tensor_parallel, plan.replicas)}</strong>
            {format!(" on {} · start-up about {}{memory}{rate}. ", plan.engine.as_str(), human_duration(plan.startup_s))}
            {done}
            {outcome.trigger_error.map(|error| format!(" Its suites: {error}"))}
        </p>
    }
}

#[component]
fn LaunchTable(launches: Vec<LaunchView>) -> impl IntoView {
    view! {
        <table>
            <thead><tr><th>"Checkpoint"</th><th>"Layout"</th><th>"State"</th><th>"Servers"</th><th>"Requested"</th><th>"Start-up (queue · load)"</th><th>"Serving"</th><th>"Still to generate"</th><th>"Restarts"</th><th>"Problem"</th></tr></thead>
            <tbody>
                {launches.into_iter().map(|LaunchView { launch, times, layout, tokens_to_generate, expected_s }| {
                    let work = match (tokens_to_generate, expected_s) {
                        (None, _) => String::new(),
                        (Some(tokens), None) => format!("≤ {tokens} tokens"),
                        (Some(tokens), Some(seconds)) => format!("≤ {tokens} tokens, about {}", human_duration(seconds)),
                    };
                    let test_id = format!("launch-{}", launch.checkpoint_name);
                    view! {
                        <tr data-testid=test_id>
                            <td>{launch.checkpoint_name.clone()}</td>
                            <td>{layout} " · " {launch.plan.engine.as_str()}</td>
                            <td>{launch.state.as_str()}</td>
                            <td>{launch.urls.into_iter().map(|url| view! { <code>{url}</code><br/> }).collect_view()}</td>
                            <td>{format_time(launch.requested_at)}</td>
                            <td>{format!("{} ({} · {})", seconds(times.startup_ms), seconds(times.queue_ms), seconds(times.load_ms))}</td>
                            <td>{seconds(times.serving_ms)}</td>
                            <td>{work}</td>
                            <td>{launch.restarts}</td>
                            <td>
                                {launch.failure.unwrap_or_default()}
                                {launch.log_tail.filter(|tail| !tail.is_empty()).map(|tail| view! {
                                    <details><summary>"Log tail"</summary><pre>{tail}</pre></details>
                                })}
                            </td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}
