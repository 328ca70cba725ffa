//! Trends along a training run: an eval's pass rate per checkpoint (by training step) with
//! 95% bands, each checkpoint compared with the baseline its policy names (regressions flagged),
//! a watch that alerts the leads on regressions, and the prompts that flip most.

use crate::components::{ActionError, ErrorNote};
use crate::reports::trends_api::{
    flaky_prompts, trend, trend_options, FlakyView, TrendChoices, TrendView, UnwatchTrend,
    WatchTrend,
};
use arbiter_domain::ids::EvalId;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[derive(Clone, Debug, Default, PartialEq)]
struct Params {
    eval: EvalId,
    training_run: String,
    policy: String,
    pinned: String,
    focus: String,
}

#[component]
pub fn TrendsPage() -> impl IntoView {
    let query = use_query_map();
    let params = Memo::new(move |_| {
        let q = query.read();
        let text = |name: &str| q.get(name).unwrap_or_default();
        Params {
            eval: text("eval").parse().unwrap_or_default(),
            training_run: text("run"),
            policy: if text("policy").is_empty() {
                "previous".into()
            } else {
                text("policy")
            },
            pinned: text("pinned"),
            focus: text("focus"),
        }
    });
    let watch = ServerAction::<WatchTrend>::new();
    let unwatch = ServerAction::<UnwatchTrend>::new();
    let options = Resource::new(
        move || (watch.version().get(), unwatch.version().get()),
        |_| trend_options(),
    );
    let shown = Resource::new(
        move || (params.get(), watch.version().get(), unwatch.version().get()),
        |(p, _, _)| async move {
            if p.eval == EvalId::default() {
                return None;
            }
            Some(trend(p.eval, p.training_run, p.policy, p.pinned, p.focus).await)
        },
    );
    let flaky = Resource::new(
        move || params.get(),
        |p| async move {
            if p.eval == EvalId::default() {
                return None;
            }
            Some(flaky_prompts(p.eval, p.training_run).await)
        },
    );
    view! {
        <h1>"Trends"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let p = params.get_untracked();
                match options.await {
                    Ok(options) => view! { <TrendPicker options params=p/> }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
        <ActionError value=watch.value()/>
        <ActionError value=unwatch.value()/>
        <Suspense fallback=|| view! { <p>"Computing the trend…"</p> }>
            {move || Suspend::new(async move {
                let p = params.get_untracked();
                match shown.await {
                    None => view! { <p class="hint">"Pick an eval to see its pass rate over checkpoints."</p> }.into_any(),
                    Some(Ok(trend)) => view! { <TrendSection trend params=p watch unwatch/> }.into_any(),
                    Some(Err(error)) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Suspense>
        <Suspense fallback=|| view! { <p>"Looking for flaky prompts…"</p> }>
            {move || Suspend::new(async move {
                match flaky.await {
                    Some(Ok(flaky)) => view! { <FlakySection flaky/> }.into_any(),
                    // The trend above already explains a refusal.
                    _ => ().into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn TrendPicker(options: TrendChoices, params: Params) -> impl IntoView {
    let policies = [
        ("previous", "previous complete checkpoint"),
        ("first", "first complete checkpoint"),
        ("best", "best complete checkpoint so far"),
        ("pinned", "pinned checkpoint"),
    ];
    view! {
        <form method="get" action="/trends" class="card row">
            <label>
                "Eval "
                <select name="eval" required>
                    <option value="">"(pick one)"</option>
                    {options.evals.iter().map(|(id, name)| view! {
                        <option value=id.to_string() selected=*id == params.eval>{name.clone()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>
                "Training run "
                <select name="run">
                    <option value="" selected=params.training_run.is_empty()>"(all checkpoints)"</option>
                    {options.training_runs.iter().map(|run| view! {
                        <option value=run.clone() selected=*run == params.training_run>{run.clone()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>
                "Baseline "
                <select name="policy">
                    {policies.iter().map(|(value, label)| view! {
                        <option value=*value selected=*value == params.policy>{*label}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>
                "Pinned "
                <select name="pinned">
                    <option value="">"–"</option>
                    {options.checkpoints.iter().map(|(id, name)| view! {
                        <option value=id.to_string() selected=id.to_string() == params.pinned>{name.clone()}</option>
                    }).collect_view()}
                </select>
            </label>
            <button type="submit">"Show"</button>
        </form>
        {(!options.watches.is_empty()).then(|| view! {
            <p class="hint">
                "Watched: "
                {options.watches.iter().map(|w| {
                    let run = if w.training_run.is_empty() { "all checkpoints".to_string() } else { w.training_run.clone() };
                    view! {
                        <a href=format!("/trends?eval={}&run={}&policy={}", w.eval_id, urlencoding::encode(&w.training_run), w.policy)>
                            {format!("{} · {} · {}", w.eval_name, run, w.policy)}
                        </a>
                        " "
                    }
                }).collect_view()}
            </p>
        })}
    }
}

#[component]
fn TrendSection(
    trend: TrendView,
    params: Params,
    watch: ServerAction<WatchTrend>,
    unwatch: ServerAction<UnwatchTrend>,
) -> impl IntoView {
    let eval = trend.eval_id.to_string();
    let training_run = trend.training_run.clone();
    view! {
        <section class="card">
            <div class="chart" data-testid="trend-chart" inner_html=trend.chart_svg.clone()></div>
            <p class="hint">
                "Each checkpoint's latest run, compared on shared items with "
                {trend.policy_description.clone()}
                " (exact McNemar tests, or a paired bootstrap over cases when the runs have repetitions, which also compares pass@k, pass^k and maj@k; Holm-corrected over its categories and metrics). ▼ marks a significant regression. "
                {(trend.omitted > 0).then(|| format!("{} earlier checkpoints are not shown. ", trend.omitted))}
                "Computed in " {trend.elapsed_ms} " ms."
            </p>
            {if trend.watched {
                view! {
                    <ActionForm action=unwatch attr:class="inline">
                        <input type="hidden" name="eval" value=eval.clone()/>
                        <input type="hidden" name="training_run" value=training_run.clone()/>
                        <span>"Leads are alerted when the latest checkpoint regresses. "</span>
                        <button type="submit" class="secondary">"Stop watching"</button>
                    </ActionForm>
                }.into_any()
            } else {
                view! {
                    <ActionForm action=watch attr:class="inline">
                        <input type="hidden" name="eval" value=eval.clone()/>
                        <input type="hidden" name="training_run" value=training_run.clone()/>
                        <input type="hidden" name="policy" value=params.policy.clone()/>
                        <input type="hidden" name="pinned" value=params.pinned.clone()/>
                        <button type="submit">"Watch for regressions"</button>
                    </ActionForm>
                }.into_any()
            }}
            <table class="trend" data-testid="trend-table">
                <thead><tr>
                    <th>"Checkpoint"</th><th>"Step"</th><th>"Report"</th><th>"Pass rate"</th><th>"95% interval"</th>
                    {trend.categories.iter().map(|c| view! { <th>{c.clone()}</th> }).collect_view()}
                    {trend.sample_metrics.iter().map(|m| view! { <th>{m.clone()}</th> }).collect_view()}
                    <th>"Baseline"</th><th>"Δ"</th><th>"Finding"</th>
                </tr></thead>
                <tbody>
                    {trend.points.into_iter().map(|point| {
                        let finding = if !point.regressions.is_empty() {
                            format!("▼ regression: {}", point.regressions.join(", "))
                        } else if !point.improvements.is_empty() {
                            format!("▲ improvement: {}", point.improvements.join(", "))
                        } else if !point.note.is_empty() {
                            point.note.clone()
                        } else {
                            "no significant change".into()
                        };
                        let class = if point.regressions.is_empty() { "" } else { "regression" };
                        let compare = point.baseline_run_id.map(|base| format!("/compare?baseline={base}&candidate={}", point.run_id));
                        view! {
                            <tr class=class>
                                <td><a href=format!("/runs/{}", point.run_id)>{point.checkpoint_name.clone()}</a></td>
                                <td>{point.step.clone()}</td>
                                <td>
                                    <span class=format!("badge {}", point.completeness.to_lowercase())>{point.completeness.clone()}</span>
                                    " " {point.completed} "/" {point.expected}
                                </td>
                                <td>{point.rate.clone()}</td>
                                <td>{point.interval.clone()}</td>
                                {point.category_rates.iter().map(|r| view! { <td>{r.clone()}</td> }).collect_view()}
                                {point.sample_values.iter().map(|r| view! { <td>{r.clone()}</td> }).collect_view()}
                                <td>
                                    {match compare {
                                        Some(href) => view! { <a href=href>{point.baseline.clone()}</a> }.into_any(),
                                        None => view! { <span>"–"</span> }.into_any(),
                                    }}
                                </td>
                                <td>{point.delta.clone()}</td>
                                <td data-testid="finding">{finding}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
    .into_any()
}

#[component]
fn FlakySection(flaky: FlakyView) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Flaky prompts"</h2>
            <p class="hint">
                "Prompts whose verdict changes most across these checkpoints and their repetitions: "
                "flips between consecutive checkpoints, and checkpoints whose repetitions disagree. "
                "History per checkpoint: ✓ pass, ✗ fail, k/n passes of n repetitions, – no verdict. "
                "Computed in " {flaky.elapsed_ms} " ms."
            </p>
            {flaky.skipped.iter().map(|s| view! { <p class="hint">"Left out: " {s.clone()}</p> }).collect_view()}
            {if flaky.prompts.is_empty() {
                view! { <p>"No prompt changed its verdict across these checkpoints."</p> }.into_any()
            } else {
                view! {
                    <table class="flaky" data-testid="flaky-table">
                        <thead><tr>
                            <th>"Case"</th><th>"Category"</th><th>"Prompt"</th><th>"Flips"</th><th>"Split"</th><th>"Pass / fail"</th>
                            {flaky.checkpoints.iter().map(|c| view! { <th>{c.clone()}</th> }).collect_view()}
                        </tr></thead>
                        <tbody>
                            {flaky.prompts.into_iter().map(|p| view! {
                                <tr>
                                    <td>{p.case_id.clone()}</td>
                                    <td>{p.category.clone()}</td>
                                    <td class="text">{p.input.clone()}</td>
                                    <td>{p.flips}</td>
                                    <td>{p.split_checkpoints}</td>
                                    <td>{p.passes} " / " {p.fails}</td>
                                    {p.history.iter().map(|h| view! { <td>{h.clone()}</td> }).collect_view()}
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
    .into_any()
}
