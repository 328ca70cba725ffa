//! Runs: the list with a comparison picker, and one run's live progress and results.

use crate::annotation::api::interval_text;
use crate::annotation::api::statistic_text;
use crate::annotation::api::{run_agreement, run_dimensions, AgreementView};
use crate::components::ErrorNote;
use crate::format::route_id;
use crate::format::short_hash;
use crate::grading::api::run_costs;
use crate::reports::api::{run_report, ReportView};
use crate::reports::compare::ReportCard;
use crate::runs::api::{list_runs, run_detail, run_load, ChangeRun};
use arbiter_domain::health::run_load::RunLoadView;
use arbiter_domain::ids::RunId;
use arbiter_domain::run::{CostReport, IdentityResult, RunProgress, RunStatus, RunSummary};
use leptos::prelude::*;

#[component]
pub fn RunsPage() -> impl IntoView {
    let runs = Resource::new(|| (), |_| list_runs());
    view! {
        <h1>"Runs"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match runs.await {
                    Ok(runs) => {
                        let options = |runs: &[RunSummary]| runs.iter().map(|run| {
                            let label = format!("#{} {} on {}", run.id, run.eval_name, run.checkpoint_name);
                            view! { <option value=run.id.to_string()>{label}</option> }
                        }).collect_view();
                        view! {
                            <section class="card">
                                <h2>"Compare two runs of the same eval"</h2>
                                <form method="get" action="/compare" class="inline">
                                    <label>"Baseline " <select name="baseline">{options(&runs)}</select></label>
                                    <label>"Candidate " <select name="candidate">{options(&runs)}</select></label>
                                    <button type="submit">"Compare"</button>
                                </form>
                            </section>
                            <table>
                                <thead><tr><th>"Run"</th><th>"Eval"</th><th>"Checkpoint"</th><th>"Priority"</th><th>"Progress"</th><th>"Status"</th></tr></thead>
                                <tbody>
                                    {runs.iter().map(|run| view! {
                                        <tr>
                                            <td><a href=format!("/runs/{}", run.id)>"#" {run.id.get()}</a></td>
                                            <td>{run.eval_name.clone()}</td>
                                            <td>{run.checkpoint_name.clone()}</td>
                                            <td>{run.priority.label()}</td>
                                            <td>{run.done_count} " / " {run.expected_count}</td>
                                            <td>{run.status.as_str()} {run.checkpoint_retracted.then_some(" (checkpoint retracted)")}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The page's clock while a run is going: progress comes from the run's event stream, and the
/// results table and load charts are refreshed every `REFRESH_EVERY_TICKS` ticks (every tick
/// while the stream cannot be read).
const TICK_MS: u64 = 1000;
const REFRESH_EVERY_TICKS: u64 = 5;
/// After the run settles the load is read again every `LOAD_AFTER_SETTLED_EVERY` ticks, for
/// `LOAD_AFTER_SETTLED_TICKS` ticks: workers write their last samples up to a sample period
/// (two seconds) after the answers, later on a busy machine.
const LOAD_AFTER_SETTLED_EVERY: u64 = 3;
const LOAD_AFTER_SETTLED_TICKS: u64 = 12;

#[component]
pub fn RunPage() -> impl IntoView {
    let id = route_id();
    let tick = RwSignal::new(0u64);
    // Refreshes of the results and load (moved by the clock, or by a settled event).
    let refresh = RwSignal::new(0u64);
    let finished = RwSignal::new(false);
    let ticks_settled = RwSignal::new(0u64);
    // The latest progress from the run's event stream, and whether that stream failed.
    let live: RwSignal<Option<RunProgress>> = RwSignal::new(None);
    let stream_failed = RwSignal::new(false);
    let change = ServerAction::<ChangeRun>::new();
    let detail = Resource::new(
        move || (id(), refresh.get(), change.version().get()),
        |(id, _, _)| run_detail(id),
    );
    // Costs sum over the run's rows: read when the page opens and once more when the run
    // completes, not on every poll.
    let costs = Resource::new(move || (id(), finished.get()), |(id, _)| run_costs(id));
    let agreement = Resource::new(move || (id(), finished.get()), |(id, _)| run_agreement(id));
    let dimensions = Resource::new(move || (id(), finished.get()), |(id, _)| run_dimensions(id));
    // The report reads the tallies (cheap) and, when results moved, rebuilds the run's
    // snapshot (a scan): on open and at completion, like the costs.
    let report = Resource::new(move || (id(), finished.get()), |(id, _)| run_report(id));
    let load = Resource::new(
        move || {
            let late = ticks_settled.get() / LOAD_AFTER_SETTLED_EVERY;
            (id(), refresh.get(), finished.get(), late)
        },
        |(id, _, _, _)| run_load(id),
    );
    // Effects run only in the browser: follow the run's events, and refresh the rest on a
    // clock, until the run settles.
    // Reopened after a pause, resume or cancel: a stream ends once its run settles.
    Effect::new(move |_| {
        let run = id();
        change.version().track();
        live.set(None);
        stream_failed.set(false);
        #[cfg(feature = "hydrate")]
        follow_progress(run, live, stream_failed, refresh);
        #[cfg(not(feature = "hydrate"))]
        let _ = run;
    });
    Effect::new(move |_| {
        let handle = set_interval_with_handle(
            move || {
                if finished.get_untracked() {
                    if ticks_settled.get_untracked() < LOAD_AFTER_SETTLED_TICKS {
                        ticks_settled.update(|ticks| *ticks += 1);
                    }
                    return;
                }
                let next = tick.get_untracked() + 1;
                tick.set(next);
                if stream_failed.get_untracked() || next.is_multiple_of(REFRESH_EVERY_TICKS) {
                    refresh.update(|refresh| *refresh += 1);
                }
            },
            std::time::Duration::from_millis(TICK_MS),
        );
        if let Ok(handle) = handle {
            on_cleanup(move || handle.clear());
        }
    });
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(detail) => {
                        finished.set(detail.progress.status.is_settled());
                        let run_id = detail.progress.id;
                        let read = detail.progress;
                        // The stream's progress where it is newer than the page's reading.
                        let progress = Memo::new(move |_| match live.get() {
                            Some(live) if live.id == read.id && live.done >= read.done => live,
                            _ => read.clone(),
                        });
                        view! {
                            {move || view! { <Progress progress=progress.get()/> }}
                            {move || {
                                let status = progress.get().status;
                                view! { <RunControls run_id status change/> }
                            }}
                            <ReportSection report/>
                            <CostCard costs/>
                            <LoadCard load/>
                            <DimensionsCard dimensions/>
                            <AgreementCard agreement/>
                            <Results results=detail.results/>
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// The run's rubric dimension by dimension: each value's share of the decided items, and the
/// mean with its interval for ordinal and numeric dimensions.
#[component]
fn DimensionsCard(
    dimensions: Resource<
        Result<Vec<arbiter_domain::reports::dimensions::DimensionSummary>, ServerFnError>,
    >,
) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                dimensions.await.ok().filter(|dimensions| dimensions.iter().any(|dimension| dimension.decided + dimension.split > 0)).map(|dimensions| view! {
                    <section class="card" data-testid="run-dimensions">
                        <h2>"Human judgments by dimension"</h2>
                        <table>
                            <thead><tr><th>"Dimension"</th><th>"Items"</th><th>"Spread"</th><th>"Mean (95% interval)"</th></tr></thead>
                            <tbody>
                                {dimensions.into_iter().map(|dimension| {
                                    let total = dimension.decided.max(1) as f64;
                                    let spread = dimension.distribution.iter()
                                        .map(|(value, count)| format!("{value}: {count} ({:.0}%)", 100.0 * *count as f64 / total))
                                        .collect::<Vec<_>>()
                                        .join(" · ");
                                    let mean = match (dimension.mean, dimension.interval) {
                                        (Some(mean), Some(interval)) => format!("{mean:.2} ({:.2}–{:.2})", interval.lower, interval.upper),
                                        (Some(mean), None) => format!("{mean:.2}"),
                                        _ => String::new(),
                                    };
                                    view! {
                                        <tr data-testid=format!("dimension-{}", dimension.key)>
                                            <td>{dimension.question} " " <span class="hint">"(" {dimension.level} ")"</span></td>
                                            <td>{dimension.decided}
                                                {(dimension.split > 0).then(|| format!(", {} split", dimension.split))}
                                                {(dimension.open > 0).then(|| format!(", {} unanswered", dimension.open))}</td>
                                            <td>{spread}</td>
                                            <td>{mean}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </section>
                })
            })}
        </Transition>
    }
}

/// Agreement between the raters of the run's human items, when any item has two labels: on
/// the verdict, then on each dimension of the run's rubric at its level of measurement.
#[component]
fn AgreementCard(agreement: Resource<Result<Vec<AgreementView>, ServerFnError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                agreement.await.ok().filter(|reports| reports.first().is_some_and(|report| report.labels > 0)).map(|reports| view! {
                    <section class="card" data-testid="run-agreement">
                        <h2>"Agreement between raters"</h2>
                        {reports.into_iter().map(|report| view! {
                            <div class="agreement" data-testid=format!("agreement-{}", report.dimension)>
                                <h3>{report.dimension.clone()} " " <span class="hint">"(" {report.level.clone()} ")"</span></h3>
                                <p>{report.items} " items with two or more labels (" {report.labels} " labels)"</p>
                                <ul class="counts">
                                    <li>"Krippendorff's alpha: " <strong data-testid="alpha">{statistic_text(&report.alpha)}</strong>
                                        {interval_text(report.alpha_interval, report.items)}</li>
                                    <li>"Fleiss' kappa: " <strong>{statistic_text(&report.fleiss)}</strong></li>
                                </ul>
                                {(!report.pairs.is_empty()).then(|| view! {
                                    <table>
                                        <thead><tr><th>"Rater pair"</th><th>"Shared items"</th><th>"Cohen's kappa"</th></tr></thead>
                                        <tbody>
                                            {report.pairs.into_iter().map(|pair| view! {
                                                <tr><td>{pair.first} " · " {pair.second}</td><td>{pair.shared_items}</td><td>{statistic_text(&pair.kappa)}</td></tr>
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                })}
                            </div>
                        }).collect_view()}
                    </section>
                })
            })}
        </Transition>
    }
}

/// Who decided the run's items and what each stage cost.
#[component]
fn ReportSection(report: Resource<Result<ReportView, ServerFnError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                report.await.ok().map(|report| view! {
                    <section class="scores" data-testid="run-report">
                        <ReportCard title="Report" report=report.clone()/>
                    </section>
                    <p class="exports">
                        "Download results: "
                        {["csv", "jsonl", "parquet"].into_iter().map(|format| view! {
                            <a href=format!("/runs/{}/export/{format}", report.run_id) rel="external" download="">{format.to_uppercase()}</a>
                            " "
                        }).collect_view()}
                        " · human labels (leads): "
                        {["csv", "jsonl", "parquet"].into_iter().map(|format| view! {
                            <a href=format!("/runs/{}/labels/{format}", report.run_id) rel="external" download="" data-testid=format!("labels-{format}")>{format.to_uppercase()}</a>
                            " "
                        }).collect_view()}
                    </p>
                })
            })}
        </Transition>
    }
}

#[component]
fn CostCard(costs: Resource<Result<CostReport, ServerFnError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                costs.await.ok().map(|CostReport { costs, human_usd, total_usd, usd_per_item }| view! {
                    <section class="card" data-testid="run-costs">
                        <h2>"Triage and cost"</h2>
                        <p data-testid="decided-by">"Decided by: " {mix_text(&costs.decided_by)}</p>
                        <table>
                            <thead><tr><th>"Stage"</th><th>"Calls"</th><th>"Cost (USD)"</th></tr></thead>
                            <tbody>
                                <tr><td>"generation"</td><td>{costs.generation_calls} " (+" {costs.cached_generations} " cached)"</td><td>{format!("{:.4}", costs.generation_usd)}</td></tr>
                                <tr><td>"judging"</td><td>{costs.judge_grades - costs.cached_judge_grades} " (+" {costs.cached_judge_grades} " cached)"</td><td>{format!("{:.4}", costs.judging_usd)}</td></tr>
                                <tr><td>"human labels"</td><td>{costs.human_labels}</td><td>{format!("{:.4}", human_usd)}</td></tr>
                                <tr><th>"total"</th><td></td><th data-testid="cost-total">{format!("{:.4}", total_usd)}</th></tr>
                            </tbody>
                        </table>
                        <p class="hint">{format!("{:.6}", usd_per_item)} " USD per item"</p>
                    </section>
                })
            })}
        </Transition>
    }
}

/// Follows the run's progress events (`/runs/{id}/events`) into `live`. A settled run's
/// event closes the stream (it would otherwise reconnect) and refreshes the page once more;
/// a stream that cannot be read sets `failed`, and the page polls instead.
#[cfg(feature = "hydrate")]
fn follow_progress(
    id: RunId,
    live: RwSignal<Option<RunProgress>>,
    failed: RwSignal<bool>,
    refresh: RwSignal<u64>,
) {
    use leptos::wasm_bindgen::closure::Closure;
    use leptos::wasm_bindgen::JsCast;
    use leptos::web_sys::{Event, EventSource, MessageEvent};
    let Ok(source) = EventSource::new(&format!("/runs/{id}/events")) else {
        failed.set(true);
        return;
    };
    let closing = source.clone();
    let on_progress = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        let Some(text) = event.data().as_string() else {
            return;
        };
        if let Ok(progress) = serde_json::from_str::<RunProgress>(&text) {
            let settled = progress.status.is_settled();
            live.set(Some(progress));
            if settled {
                closing.close();
                refresh.update(|refresh| *refresh += 1);
            }
        }
    });
    let _ =
        source.add_event_listener_with_callback("progress", on_progress.as_ref().unchecked_ref());
    let closed_by_error = source.clone();
    let on_error = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
        // A stream the server ended after a settled event is closed already; any other error
        // (a proxy that buffers, the server gone) turns polling on.
        if closed_by_error.ready_state() != EventSource::CLOSED {
            closed_by_error.close();
        }
        failed.set(true);
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    let held = send_wrapper::SendWrapper::new((source, on_progress, on_error));
    on_cleanup(move || held.take().0.close());
}

/// What the run's workers held and sent over time, with answer times at the endpoints apart
/// from the wait inside Arbiter; shown once a worker has sampled the run.
#[component]
fn LoadCard(load: Resource<Result<RunLoadView, ServerFnError>>) -> impl IntoView {
    let ms = |value: Option<f64>| value.map_or_else(|| "–".to_string(), |ms| format!("{ms:.0} ms"));
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                load.await.ok().filter(|load| load.latest.is_some()).map(|load| {
                    let latest = load.latest.clone().unwrap_or_default();
                    let server_waiting = latest.server_waiting.map_or_else(|| "not reported".to_string(), |waiting| format!("{waiting:.0}"));
                    view! {
                        <section class="card" data-testid="run-load">
                            <h2>"Load"</h2>
                            <p data-testid="load-now">
                                "Latest reading: " {format!("{:.0}", latest.claimed)} " claimed, "
                                {format!("{:.0}", latest.waiting)} " waiting in Arbiter, "
                                {format!("{:.0}", latest.sending)} " at the endpoints (limit " {format!("{:.0}", latest.request_limit)} "), "
                                {server_waiting} " waiting in the servers' queues."
                            </p>
                            <p data-testid="load-times">
                                {load.answers} " answers: " {ms(load.mean_latency_ms)} " mean at the endpoints, "
                                {ms(load.mean_waited_ms)} " mean wait in Arbiter for a request slot."
                            </p>
                            <div class="chart" inner_html=load.load_svg.clone()></div>
                            <div class="chart" inner_html=load.latency_svg.clone()></div>
                        </section>
                    }
                })
            })}
        </Transition>
    }
}

/// Pause, resume and cancel buttons for the states where they apply.
#[component]
fn RunControls(run_id: RunId, status: RunStatus, change: ServerAction<ChangeRun>) -> impl IntoView {
    let actions: &[(&str, &str)] = match status {
        RunStatus::Running => &[("pause", "Pause"), ("cancel", "Cancel")],
        RunStatus::Paused => &[("resume", "Resume"), ("cancel", "Cancel")],
        RunStatus::Cancelled => &[("resume", "Resume")],
        RunStatus::Expanding | RunStatus::Completed => &[],
    };
    view! {
        <div class="row controls">
            {actions.iter().map(|(action, label)| view! {
                <ActionForm action=change attr:class="inline">
                    <input type="hidden" name="id" value=run_id.to_string()/>
                    <input type="hidden" name="action" value=*action/>
                    <button type="submit" class="secondary">{*label}</button>
                </ActionForm>
            }).collect_view()}
            <crate::components::ActionError value=change.value()/>
        </div>
    }
}

/// `name: count` pairs as one line.
fn mix_text(mix: &[(String, i64)]) -> String {
    mix.iter()
        .map(|(name, count)| format!("{name}: {count}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[component]
fn Progress(progress: RunProgress) -> impl IntoView {
    let percent = if progress.expected > 0 {
        100 * progress.done / progress.expected
    } else {
        100
    };
    let all_failed = progress.errors > 0 && progress.errors == progress.done;
    let state = if matches!(
        progress.status,
        RunStatus::Paused | RunStatus::Cancelled | RunStatus::Expanding
    ) {
        progress.status.as_str().to_string()
    } else if !progress.status.is_settled() {
        "running".to_string()
    } else if all_failed {
        "failed".to_string()
    } else if progress.errors > 0 {
        "completed with errors".to_string()
    } else {
        "completed".to_string()
    };
    let status_class = format!("status status-{}", state.replace(' ', "-"));
    view! {
        <h1>"Run #" {progress.id.get()} ": " {progress.eval_name.clone()} " on " {progress.checkpoint_name.clone()}</h1>
        <section class="card">
            <p class=status_class>
                "Status: " <strong data-testid="run-status">{state}</strong>
            </p>
            {progress.checkpoint_retracted.clone().map(|reason| view! {
                <p class="notice" data-testid="run-retracted">
                    "Its checkpoint was retracted: " {reason} ". These results stay readable but leave trends and are never a baseline."
                </p>
            })}
            <progress max=progress.expected.to_string() value=progress.done.to_string()></progress>
            <p data-testid="run-progress">
                <strong>{progress.done}</strong> " / " {progress.expected} " results (" {percent} "%), "
                {progress.in_flight} " in flight"
            </p>
            <ul class="counts">
                <li>"pass: " <strong data-testid="count-pass">{progress.passed}</strong></li>
                <li>"fail: " <strong data-testid="count-fail">{progress.failed}</strong></li>
                <li>"to human review: " <strong data-testid="count-uncertain">{progress.uncertain}</strong></li>
                <li>"errors: " <strong data-testid="count-errors">{progress.errors}</strong></li>
                {(progress.scored > 0).then(|| view! {
                    <li>"scored: " <strong data-testid="count-scored">{progress.scored}</strong></li>
                })}
            </ul>
            <p data-testid="run-telemetry">
                {format!("{:.1}", progress.throughput_per_s)} " results/s over the last minute"
                {progress.eta_seconds().map(|eta| format!(" · about {} left", crate::format::human_duration(eta)))}
                " · " {progress.from_cache} " answered from the cache · priority " {progress.priority.label()}
                " · team " {progress.team.clone()}
            </p>
            <p class="hint" data-testid="outcome-mix">"Outcomes: " {mix_text(&progress.outcome_mix)}</p>
            {(!progress.error_mix.is_empty()).then(|| view! {
                <p class="hint" data-testid="error-mix">"Errors by category: " {mix_text(&progress.error_mix)}</p>
            })}
            {progress.last_error.clone().map(|error| view! {
                <p class="error" role="alert" data-testid="run-error">"Endpoint error: " {error}</p>
            })}
            <p class="hint">
                "Endpoint " <code>{progress.endpoint_url.clone()}</code> " · dataset revision "
                <code>{short_hash(&progress.dataset_revision)}</code> " · manifest "
                <code>{short_hash(&progress.manifest_hash)}</code>
            </p>
        </section>
    }
}

#[component]
fn Results(results: Vec<IdentityResult>) -> impl IntoView {
    // Conversations show each turn's row with its number.
    let conversations = results.iter().any(|result| result.turn > 1);
    view! {
        <table class="results">
            <thead><tr><th>"Case"</th><th>"Rep"</th>{conversations.then(|| view! { <th>"Turn"</th> })}<th>"Input"</th><th>"Target"</th><th>"Output"</th><th>"Outcome"</th><th>"Verdict"</th></tr></thead>
            <tbody>
                {results.into_iter().map(|result| {
                    let verdict_class = format!("verdict verdict-{}", result.verdict);
                    let detail = result.error.clone().unwrap_or(result.grade_reason.clone());
                    let telemetry = telemetry(&result);
                    view! {
                        <tr>
                            <td><code>{result.case_id}</code></td>
                            <td>{result.repetition}</td>
                            {conversations.then(|| view! { <td data-testid="result-turn">{result.turn}</td> })}
                            <td>{result.input}</td>
                            <td>{result.target}</td>
                            <td><pre class="output">{result.output}</pre></td>
                            <td>{result.outcome} <br/><span class="hint">{telemetry}</span></td>
                            <td>
                                <span class=verdict_class title=detail.clone()>{result.verdict}</span>
                                {result.decided_by.map(|stage| view! { <br/><span class="hint">"by " {stage.replace('_', " ")}</span> })}
                                <details class="reason"><summary>"why"</summary><pre class="output">{detail}</pre></details>
                            </td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// "2 attempts · 130 ms · fallback sim-b", "from cache": how the answer was obtained.
fn telemetry(result: &IdentityResult) -> String {
    if result.from_cache {
        return "from cache".into();
    }
    let mut parts = vec![
        format!(
            "{} attempt{}",
            result.attempts,
            if result.attempts == 1 { "" } else { "s" }
        ),
        format!("{} ms", result.latency_ms),
    ];
    if result.fallback_used {
        parts.push(format!(
            "fallback {}",
            result.model_used.clone().unwrap_or_default()
        ));
    }
    parts.join(" · ")
}
