//! The lead's queue page: alerts; backlog, age distribution and the completion forecast from
//! current velocity; tasks at risk of missing their SLA deadline (escalated by the monitor);
//! SLA attainment by day; rater availability against the inflow; agreement per queue; the QC
//! rates; and gold items (made from finished items, or by id, and retired).

use crate::annotation::api::interval_text;
use crate::annotation::api::statistic_text;
use crate::annotation::api::{queue_page, CreateGold, QueuePageData, RetireGold, SetQueueSettings};
use crate::components::{ActionError, AlertList, ErrorNote};
use crate::format::format_time;
use arbiter_domain::annotation::sla::DAY_MS;
use leptos::prelude::*;

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |value| format!("{:.0}%", value * 100.0))
}

fn hours(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |hours| format!("{hours:.1} h"))
}

#[component]
pub fn QueuePage() -> impl IntoView {
    let settings = ServerAction::<SetQueueSettings>::new();
    let create_gold = ServerAction::<CreateGold>::new();
    let retire_gold = ServerAction::<RetireGold>::new();
    let data = Resource::new(
        move || {
            (
                settings.version().get(),
                create_gold.version().get(),
                retire_gold.version().get(),
            )
        },
        |_| queue_page(),
    );
    view! {
        <h1>"Human queue"</h1>
        <ActionError value=settings.value()/>
        <ActionError value=create_gold.value()/>
        <ActionError value=retire_gold.value()/>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! { <QueueReport data settings create_gold retire_gold/> }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn QueueReport(
    data: QueuePageData,
    settings: ServerAction<SetQueueSettings>,
    create_gold: ServerAction<CreateGold>,
    retire_gold: ServerAction<RetireGold>,
) -> impl IntoView {
    let largest_age = data
        .ages
        .iter()
        .map(|age| age.count)
        .max()
        .unwrap_or(0)
        .max(1);
    let forecast = match data.forecast_hours {
        Some(hours) if hours <= 0.0 => "nothing waiting".to_string(),
        Some(hours) => format!("about {hours:.1} hours"),
        None => "unknown: nobody has labelled in the last 7 days".to_string(),
    };
    view! {
        <section class="card" data-testid="alerts">
            <h2>"Alerts"</h2>
            <AlertList alerts=data.alerts/>
        </section>

        <section class="card" data-testid="backlog">
            <h2>"Backlog and forecast"</h2>
            <ul class="counts">
                <li>"Open tasks: " <strong data-testid="backlog-tasks">{data.backlog_tasks}</strong></li>
                <li>"Labels still needed: " <strong>{data.backlog_labels}</strong></li>
                <li>"Velocity: " <strong>{format!("{:.1}", data.labels_per_hour)}</strong> " labels/hour (" {data.velocity_basis} ")"</li>
                <li>"Backlog done in: " <strong data-testid="forecast">{forecast}</strong></li>
            </ul>
            <ul class="counts">
                <li>"At risk: " <strong data-testid="at-risk">{data.at_risk}</strong></li>
                <li>"Past deadline: " <strong data-testid="breached">{data.breached}</strong></li>
                <li>"SLA attainment, last 7 days: " <strong data-testid="attainment">{percent(data.attainment_7d)}</strong></li>
            </ul>
            <h3>"Age of open tasks"</h3>
            <table data-testid="ages">
                <thead><tr><th>"Age"</th><th>"Tasks"</th><th></th></tr></thead>
                <tbody>
                    {data.ages.into_iter().map(|age| {
                        let width = format!("width: {:.0}%", age.count as f64 / largest_age as f64 * 100.0);
                        view! {
                            <tr><td>{age.label}</td><td>{age.count}</td>
                                <td class="bar-cell"><span class="bar" style=width></span></td></tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>

        <section class="card" data-testid="availability">
            <h2>"Rater availability"</h2>
            <ul class="counts">
                <li>"Covered: " <strong data-testid="covered">{percent(data.availability)}</strong></li>
                <li>"Needed: " <strong>{hours(data.needed_hours_per_week)}</strong> " / week"</li>
                <li>"Offered by active raters: " <strong>{format!("{:.1} h", data.capacity_hours_per_week)}</strong> " / week"</li>
                <li>"Backlog: " <strong>{hours(data.backlog_hours)}</strong></li>
            </ul>
            <p class="hint">
                "Needed hours: the labels the queue asked for in the last 7 days ("
                {format!("{:.0}", data.inflow_labels_per_week)} ") times the median time per label ("
                {data.seconds_per_label.map_or_else(|| "no labels yet".to_string(), |s| format!("{s:.0} s"))}
                "). Offered hours: weekly capacity of active raters who are neither paused nor in training."
            </p>
        </section>

        <section class="card" data-testid="at-risk-tasks">
            <h2>"Tasks at risk"</h2>
            <p class="hint">"At-risk and overdue tasks are escalated each minute: their priority is raised and senior raters are served them first; leads with an email address are told once per alert."</p>
            {if data.at_risk_tasks.is_empty() {
                view! { <p>"None: every open task is forecast to meet its deadline."</p> }.into_any()
            } else {
                view! {
                    <table>
                        <thead><tr><th>"Task"</th><th>"Queue"</th><th>"Priority"</th><th>"Due"</th><th>"Forecast done"</th><th>"Why"</th></tr></thead>
                        <tbody>
                            {data.at_risk_tasks.into_iter().map(|task| view! {
                                <tr><td>{task.task_id.get()}</td><td>{task.queue}</td><td>{task.priority}</td>
                                    <td>{format_time(task.due_at)}</td>
                                    <td>{task.forecast_done_at.map_or_else(|| "–".to_string(), format_time)}</td>
                                    <td>{task.why}</td></tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>

        <section class="card" data-testid="sla-days">
            <h2>"SLA attainment by day"</h2>
            {if data.sla_days.is_empty() {
                view! { <p>"No tasks finished in the last 14 days."</p> }.into_any()
            } else {
                view! {
                    <table>
                        <thead><tr><th>"Day (UTC)"</th><th>"Finished"</th><th>"On time"</th><th>"Attainment"</th></tr></thead>
                        <tbody>
                            {data.sla_days.into_iter().map(|day| {
                                let share = (day.completed > 0).then(|| day.on_time as f64 / day.completed as f64);
                                view! {
                                    <tr><td>{format_time(day.day * DAY_MS)[..10].to_string()}</td><td>{day.completed}</td>
                                        <td>{day.on_time}</td><td>{percent(share)}</td></tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>

        <section class="card" data-testid="queue-agreement">
            <h2>"Agreement per queue (last 7 days)"</h2>
            <p class="hint">"On the pass/fail verdict of every label, and on each dimension of the rubrics raters answered, at its level of measurement. Below the floor of "
                {format!("{:.2}", data.agreement_floor)} " a queue's verdict or dimension raises an alert naming its weakest rater pairs."</p>
            {if data.queues.is_empty() {
                view! { <p>"No labels in the last 7 days."</p> }.into_any()
            } else {
                view! {
                    <table>
                        <thead><tr><th>"Queue"</th><th>"On"</th><th>"Items (2+ labels)"</th><th>"Krippendorff's alpha"</th><th>"Fleiss' kappa"</th><th>"Lowest rater pairs (Cohen's kappa)"</th></tr></thead>
                        <tbody>
                            {data.queues.into_iter().map(|queue| {
                                let mut pairs = queue.agreement.pairs.clone();
                                pairs.sort_by(|a, b| a.kappa.value.unwrap_or(f64::INFINITY).total_cmp(&b.kappa.value.unwrap_or(f64::INFINITY)));
                                let pairs_text = pairs.iter().take(3)
                                    .map(|pair| format!("{} · {}: {}", pair.first, pair.second, statistic_text(&pair.kappa)))
                                    .collect::<Vec<_>>().join("; ");
                                let interval = interval_text(queue.agreement.alpha_interval, queue.agreement.items);
                                view! {
                                    <tr class:flagged=queue.below_floor>
                                        <td>{queue.queue}</td><td>{queue.dimension}</td><td>{queue.agreement.items}</td>
                                        <td>{statistic_text(&queue.agreement.alpha)} {interval} {queue.below_floor.then_some(" ⚑ below the floor")}</td>
                                        <td>{statistic_text(&queue.agreement.fleiss)}</td>
                                        <td>{if pairs_text.is_empty() { "no pair shares 5 items yet".to_string() } else { pairs_text }}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>

        <section class="card" data-testid="qc-settings">
            <h2>"Quality control"</h2>
            <ActionForm action=settings attr:class="row">
                <label>"Gold rate (share of items that are gold)"
                    <input name="gold_rate" value=data.gold_rate.to_string() size="6"/></label>
                <label>"Spot-check rate (share of review decisions checked)"
                    <input name="review_check_rate" value=data.review_check_rate.to_string() size="6"/></label>
                <label>"Agreement floor (alpha)"
                    <input name="agreement_floor" value=data.agreement_floor.to_string() size="6"/></label>
                <button type="submit" class="secondary">"Save"</button>
            </ActionForm>
            <p class="hint">"Shares from 0 to 1, or percentages such as 5%. The share of labels sent to reviewers is set per eval in its grading policy."</p>
        </section>

        <section class="card" data-testid="gold">
            <h2>"Gold items"</h2>
            <p class="hint">"Gold items are served to raters like any other item; their answers measure the rater (gold accuracy on the Raters page and their weight in adjudication) and never count as labels. Raters in training get only gold items, with feedback."</p>
            <ActionForm action=create_gold attr:class="row">
                <label>"Item id" <input name="task_id" type="number" min="1" required size="6"/></label>
                <label>"Answer" <select name="answer">
                    <option value="pass">"pass"</option><option value="fail">"fail"</option>
                    <option value="a">"a pair: A is better"</option><option value="b">"a pair: B is better"</option>
                    <option value="tie">"a pair: tie"</option><option value="both_bad">"a pair: both bad"</option>
                </select></label>
                <label>"Note for trainees" <input name="note" size="30"/></label>
                <button type="submit">"Make gold"</button>
            </ActionForm>
            {(!data.gold_candidates.is_empty()).then(|| view! {
                <h3>"Candidates (recently finished, settled items)"</h3>
                <table data-testid="gold-candidates">
                    <thead><tr><th>"Item"</th><th>"Question"</th><th>"Answer"</th><th>"Why"</th><th></th></tr></thead>
                    <tbody>
                        {data.gold_candidates.into_iter().map(|candidate| view! {
                            <tr>
                                <td>{candidate.task_id.get()}</td><td>{candidate.input}</td><td>{candidate.answer.words()}</td><td>{candidate.why}</td>
                                <td>
                                    <ActionForm action=create_gold attr:class="inline">
                                        <input type="hidden" name="task_id" value=candidate.task_id.to_string()/>
                                        <input type="hidden" name="answer" value=candidate.answer.as_str()/>
                                        <button type="submit" class="secondary">"Make gold"</button>
                                    </ActionForm>
                                </td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
            <h3>"Gold set"</h3>
            {if data.gold.is_empty() {
                view! { <p>"No gold items yet."</p> }.into_any()
            } else {
                view! {
                    <table data-testid="gold-items">
                        <thead><tr><th>"Item"</th><th>"Question"</th><th>"Answer"</th><th>"Raters right"</th><th>"Status"</th><th></th></tr></thead>
                        <tbody>
                            {data.gold.into_iter().map(|gold| {
                                let right = if gold.answers == 0 { "no answers yet".to_string() } else { format!("{} of {}", gold.right, gold.answers) };
                                view! {
                                    <tr data-testid="gold-item">
                                        <td>{gold.task_id.get()}</td><td>{gold.input}</td><td>{gold.answer.words()}</td><td>{right}</td>
                                        <td>{if gold.retired_at.is_some() { "retired" } else { "live" }}</td>
                                        <td>{gold.retired_at.is_none().then(|| view! {
                                            <ActionForm action=retire_gold attr:class="inline">
                                                <input type="hidden" name="gold_id" value=gold.id.to_string()/>
                                                <button type="submit" class="secondary">"Retire"</button>
                                            </ActionForm>
                                        })}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}
