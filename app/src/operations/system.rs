//! The System page: live health of the whole deployment — queue depth and its trend, answer
//! latency and errors, spending per eval and team, endpoint saturation, workers, raters and
//! SLAs — the alerts they raised, and the rules' thresholds (editable by leads). The same
//! figures are served to Prometheus at `/metrics`.

use crate::components::{ActionError, AlertList, ErrorNote};
use crate::format::format_time;
use crate::operations::system_api::{
    system_health, RulesView, SaveAlertRules, SaveRetention, SystemView,
};
use crate::operations::webhooks::WebhooksCard;
use leptos::prelude::*;

fn share(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |value| format!("{:.1}%", value * 100.0))
}

fn seconds(ms: Option<f64>) -> String {
    ms.map_or_else(|| "–".to_string(), |ms| format!("{:.2} s", ms / 1_000.0))
}

fn dollars(usd: f64) -> String {
    format!("${usd:.2}")
}

#[component]
pub fn SystemPage() -> impl IntoView {
    let save = ServerAction::<SaveAlertRules>::new();
    let health = Resource::new(move || save.version().get(), |_| system_health());
    view! {
        <h1>"System"</h1>
        <p class="hint">
            "Live figures for the whole deployment, read from the shared store (cached for 10 s). "
            "Prometheus can scrape the same figures at " <code>"/metrics"</code>
            " with an API token."
        </p>
        <Transition fallback=|| view! { <p>"Reading the figures…"</p> }>
            {move || Suspend::new(async move {
                match health.await {
                    Ok(data) => view! { <SystemFigures data save/> }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn SystemFigures(data: SystemView, save: ServerAction<SaveAlertRules>) -> impl IntoView {
    let trend = match data.queue_change_per_hour {
        Some(change) if change > 0.5 => format!("growing by {change:.0} per hour"),
        Some(change) if change < -0.5 => format!("shrinking by {:.0} per hour", -change),
        Some(_) => "steady".to_string(),
        None => "not enough samples yet".to_string(),
    };
    view! {
        <section class="card" data-testid="system-alerts">
            <h2>"Alerts"</h2>
            <AlertList alerts=data.alerts.clone()/>
        </section>

        <ResultsCard results=data.results.clone()/>

        <section class="card" data-testid="queue-health">
            <h2>"Queue"</h2>
            <ul class="counts">
                <li>"Waiting: " <strong data-testid="queue-depth">{data.queue_depth}</strong></li>
                <li>"Claimed by workers: " <strong>{data.claimed}</strong></li>
                <li>"Trend over the last hour: " <strong>{trend}</strong></li>
                <li>"Live workers: " <strong data-testid="live-workers">{data.live_workers}</strong></li>
            </ul>
            <div class="chart" inner_html=data.queue_chart_svg.clone()></div>
        </section>

        <section class="card" data-testid="answers-health">
            <h2>"Answers, last hour"</h2>
            <ul class="counts">
                <li>"Answers: " <strong data-testid="answers-last-hour">{data.answers_last_hour}</strong></li>
                <li>"Failed: " <strong>{data.errors_last_hour}</strong> " (" {share(data.error_rate)} ")"</li>
                <li>"Latency p50: " <strong>{seconds(data.p50_latency_ms)}</strong></li>
                <li>"p99: " <strong data-testid="p99">{seconds(data.p99_latency_ms)}</strong></li>
            </ul>
            <p class="hint">"Percentiles are read from latency buckets (within a bucket's width); retries are included."</p>
            {(!data.errors_by_category.is_empty()).then(|| view! {
                <table>
                    <thead><tr><th>"Error category"</th><th>"Answers"</th></tr></thead>
                    <tbody>
                        {data.errors_by_category.iter().map(|(category, count)| view! {
                            <tr><td>{category.clone()}</td><td>{*count}</td></tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
            <div class="chart" inner_html=data.latency_chart_svg.clone()></div>
        </section>

        <section class="card" data-testid="costs">
            <h2>"Spending, last 24 hours"</h2>
            <p>"Total: " <strong data-testid="cost-total">{dollars(data.cost_last_day_usd)}</strong>
                " · by team: "
                {data.cost_by_team.iter().map(|(team, usd)| format!("{team} {}", dollars(*usd))).collect::<Vec<_>>().join(", ")}
            </p>
            <table>
                <thead><tr><th>"Eval"</th><th>"Team"</th><th>"Answers"</th><th>"Model calls"</th><th>"Judge calls"</th></tr></thead>
                <tbody>
                    {data.costs.iter().map(|row| view! {
                        <tr>
                            <td>{row.eval_name.clone()}</td>
                            <td>{row.team.clone()}</td>
                            <td>{row.answers}</td>
                            <td>{dollars(row.answer_usd)}</td>
                            <td>{dollars(row.judge_usd)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>

        <section class="card" data-testid="endpoints">
            <h2>"Endpoints"</h2>
            <table>
                <thead><tr>
                    <th>"Endpoint"</th><th>"Checkpoints"</th><th>"Claimed / limit"</th>
                    <th>"Server waiting"</th><th>"Server running"</th><th>"Prefix cache hits"</th>
                </tr></thead>
                <tbody>
                    {data.endpoints.iter().map(|endpoint| {
                        let saturation = endpoint.claimed as f64 / endpoint.limit.max(1) as f64;
                        let reading = |value: Option<f64>| match (value, endpoint.observed_age_s) {
                            (Some(value), Some(age)) => format!("{value:.0} ({age} s ago)"),
                            _ => "not reported".to_string(),
                        };
                        view! {
                            <tr>
                                <td><code>{endpoint.url.clone()}</code></td>
                                <td>{endpoint.checkpoints.clone()}</td>
                                <td>
                                    {format!("{} / {} ({:.0}%)", endpoint.claimed, endpoint.limit, saturation * 100.0)}
                                    <meter min="0" max="1" value=saturation.min(1.0)></meter>
                                </td>
                                <td>{reading(endpoint.waiting)}</td>
                                <td>{reading(endpoint.running)}</td>
                                <td data-testid="prefix-cache">{match endpoint.prefix_cache {
                                    Some(cache) => match cache.queried_tokens {
                                        Some(tokens) => format!("{:.0}% of {tokens:.0} prompt tokens", cache.hit_rate * 100.0),
                                        None => format!("{:.0}%", cache.hit_rate * 100.0),
                                    },
                                    None => "not reported".to_string(),
                                }}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            <p class="hint">"Claimed identities include each worker's next batch; the server's own queue and its prefix cache (the share of prompt tokens found cached since it started) are read from vLLM-style " <code>"/metrics"</code> " where the endpoint has them."</p>
        </section>

        <section class="card" data-testid="workers">
            <h2>"Workers"</h2>
            {if data.workers.is_empty() {
                view! { <p>"No worker has sent a heartbeat in the last hour."</p> }.into_any()
            } else {
                view! {
                    <table>
                        <thead><tr><th>"Worker"</th><th>"Started"</th><th>"Last heartbeat"</th><th>"Holding"</th><th>"State"</th></tr></thead>
                        <tbody>
                            {data.workers.iter().map(|worker| view! {
                                <tr>
                                    <td><code>{worker.name.clone()}</code></td>
                                    <td>{format_time(worker.started_at)}</td>
                                    <td>{format!("{} s ago", worker.heartbeat_age_s)}</td>
                                    <td>{worker.in_flight}</td>
                                    <td>{if worker.live { "live" } else { "silent" }}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>

        <section class="card" data-testid="people">
            <h2>"Raters and SLAs"</h2>
            <ul class="counts">
                <li>"Rater availability: " <strong data-testid="rater-availability">{share(data.rater_availability)}</strong>
                    " (" {format!("{:.1}", data.rater_capacity_hours_per_week)} " h/week of "
                    {data.rater_needed_hours_per_week.map_or("–".to_string(), |hours| format!("{hours:.1}"))} " needed)"</li>
                <li>"Open human tasks: " <strong>{data.human_backlog_tasks}</strong></li>
                <li>"SLA attainment (7 days): " <strong>{share(data.sla_attainment_7d)}</strong></li>
                <li>"Breached: " <strong>{data.sla_breached}</strong> " · at risk: " <strong>{data.sla_at_risk}</strong></li>
            </ul>
            <p>"Agreement (Krippendorff's alpha, last week; floor " {format!("{:.2}", data.agreement_floor)} "): "
                {if data.agreement.is_empty() {
                    "not enough doubly-labelled items yet".to_string()
                } else {
                    data.agreement.iter().map(|(queue, alpha)| format!("{queue} {alpha:.2}")).collect::<Vec<_>>().join(", ")
                }}
            </p>
        </section>

        <AlertRulesCard rules=data.rules.clone() editable=data.can_edit_rules save/>
        <RetentionCard
            raw_days=data.retention_raw_days
            summary_days=data.retention_summary_days
            last=data.retention_last.clone()
            editable=data.can_edit_rules
        />
        <WebhooksCard/>
        <p class="hint">"Read at " {format_time(data.now)} " from " {data.backend.clone()} "."</p>
    }
}

#[component]
fn AlertRulesCard(
    rules: RulesView,
    editable: bool,
    save: ServerAction<SaveAlertRules>,
) -> impl IntoView {
    let field =
        move |name: &'static str, label: &'static str, value: String, unit: &'static str| {
            view! {
                <label>
                    {label} " "
                    <input name=name value=value size="8" disabled=!editable/>
                    " " {unit}
                </label>
            }
        };
    view! {
        <section class="card" data-testid="alert-rules">
            <h2>"Alert rules"</h2>
            <p class="hint">
                "Alerts are raised once, kept up to date while the condition holds, resolved when it clears, shown here and "
                "on the queue page, and emailed to the leads. Leave a field empty to switch its rule off. "
                "Low agreement and SLA breaches are judged on the queue page's settings."
            </p>
            <ActionForm action=save>
                <div class="rules">
                    {field("queue_growth_minutes", "Queue growing for more than", rules.queue_growth_minutes, "minutes")}
                    {field("max_error_rate", "Error rate above", rules.max_error_rate, "(share, or e.g. 5%)")}
                    {field("max_p99_latency_s", "p99 latency above", rules.max_p99_latency_s, "seconds")}
                    {field("daily_budget_usd", "Spending over 24 hours above", rules.daily_budget_usd, "USD")}
                    {field("min_rater_availability", "Rater availability below", rules.min_rater_availability, "(share)")}
                    {field("worker_silence_s", "Worker silent for more than", rules.worker_silence_s, "seconds")}
                    {field("smoke_results_hours", "Smoke suites' results within", rules.smoke_results_hours, "hours of the checkpoint")}
                    {field("full_results_hours", "Full suites' results within", rules.full_results_hours, "hours of the checkpoint")}
                    {field("min_answers", "Judge rates over at least", rules.min_answers, "answers")}
                </div>
                <Show when=move || editable>
                    <button type="submit">"Save thresholds"</button>
                </Show>
            </ActionForm>
            <ActionError value=save.value()/>
            {move || save.value().get().and_then(Result::ok).map(|_| view! {
                <p class="notice" role="status">"Thresholds saved; the monitor applies them on its next round."</p>
            })}
        </section>
    }
}

/// Time to results per suite tier: the target, how many suites on the last week's checkpoints
/// met it, and how many now running are on track, at risk or late.
#[component]
fn ResultsCard(
    results: Vec<arbiter_domain::health::results_objective::TierAttainment>,
) -> impl IntoView {
    let hours = |ms: Option<i64>| {
        ms.map_or_else(
            || "–".to_string(),
            |ms| format!("{:.1} h", ms as f64 / 3_600_000.0),
        )
    };
    view! {
        <section class="card" data-testid="time-to-results">
            <h2>"Time to results"</h2>
            <p class="hint">"From a checkpoint's registration to its suites' results, over the last week's checkpoints. Targets are set with the alert rules below."</p>
            <table>
                <thead><tr><th>"Tier"</th><th>"Target"</th><th>"Attainment"</th><th>"Met"</th><th>"Missed or late"</th><th>"Running: on track · at risk"</th><th>"Median"</th></tr></thead>
                <tbody>
                    {results.into_iter().map(|row| view! {
                        <tr data-testid=format!("results-{}", row.tier)>
                            <td>{row.tier.clone()}</td>
                            <td>{format!("{} h", row.target_hours)}</td>
                            <td>{share(row.attainment)}</td>
                            <td>{row.met}</td>
                            <td>{row.missed + row.late}</td>
                            <td>{row.on_track} " · " {row.at_risk}</td>
                            <td>{hours(row.median_ms)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn RetentionCard(
    raw_days: i64,
    summary_days: i64,
    last: Option<(i64, String)>,
    editable: bool,
) -> impl IntoView {
    let save = ServerAction::<SaveRetention>::new();
    view! {
        <section class="card" data-testid="retention">
            <h2>"Retention"</h2>
            <p class="hint">
                "Every 6 hours the server removes raw answers and logprobs of runs finished longer ago than the first "
                "period (verdicts, reports and comparisons stay), and deletes runs finished longer ago than the second. "
                "Archive first with " <code>"arbiter export --format parquet --out DIR"</code> "."
            </p>
            <ActionForm action=save attr:class="row">
                <label>"Raw answers and logprobs kept " <input name="raw_days" value=raw_days.to_string() size="6" disabled=!editable/> " days"</label>
                <label>"Summaries kept " <input name="summary_days" value=summary_days.to_string() size="6" disabled=!editable/> " days"</label>
                <Show when=move || editable><button type="submit">"Save"</button></Show>
            </ActionForm>
            <ActionError value=save.value()/>
            {move || save.value().get().and_then(Result::ok).map(|_| view! {
                <p class="notice" role="status">"Retention saved; it applies from the next round."</p>
            })}
            <p>{match last {
                Some((at, summary)) => format!("Last enforced {}: {summary}.", format_time(at)),
                None => "Not enforced yet.".to_string(),
            }}</p>
        </section>
    }
}
