//! The lead's rater pool: each rater's velocity, time per item, review acceptance and agreement
//! with the final verdicts, flagged below the lead's threshold; pause, resume, deactivate,
//! skills and weekly capacity; the table as CSV.

use crate::annotation_api::{raters_page, SetQualityThreshold, UpdateRater};
use crate::components::{ActionError, ErrorNote};
use crate::pages::format_time;
use crate::views::RaterView;
use leptos::prelude::*;

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |value| format!("{:.0}%", value * 100.0))
}

#[component]
pub fn RatersPage() -> impl IntoView {
    let update = ServerAction::<UpdateRater>::new();
    let threshold = ServerAction::<SetQualityThreshold>::new();
    let data = Resource::new(
        move || (update.version().get(), threshold.version().get()),
        |_| raters_page(),
    );
    view! {
        <h1>"Raters"</h1>
        <ActionError value=update.value()/>
        <ActionError value=threshold.value()/>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! {
                        <section class="card">
                            <ActionForm action=threshold attr:class="inline">
                                <label>
                                    "Flag raters whose review acceptance or agreement with consensus is below"
                                    <input name="threshold" type="number" min="0" max="1" step="0.05" value=data.threshold.to_string()/>
                                </label>
                                <button type="submit" class="secondary">"Set"</button>
                            </ActionForm>
                            <p class="hint">"Figures over the last 30 days; velocity over the last 7. " <a href="/raters.csv" download="raters.csv">"Download as CSV"</a></p>
                        </section>
                        <table data-testid="raters">
                            <thead><tr>
                                <th>"Rater"</th><th>"Status"</th><th>"Items / day"</th><th>"Median s / item"</th>
                                <th>"Review acceptance"</th><th>"Agreement with consensus"</th><th>"Labels (30 d)"</th>
                                <th>"Last active"</th><th>"Skills · hours / week"</th><th>"Actions"</th>
                            </tr></thead>
                            <tbody>
                                {data.raters.into_iter().map(|rater| view! { <RaterRow rater update/> }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn RaterRow(rater: RaterView, update: ServerAction<UpdateRater>) -> impl IntoView {
    let status = match (rater.active, rater.paused) {
        (false, _) => "deactivated",
        (true, true) => "paused",
        (true, false) => "active",
    };
    let actions: Vec<(&str, &str)> = match (rater.active, rater.paused) {
        (false, _) => vec![("activate", "Activate")],
        (true, true) => vec![("resume", "Resume"), ("deactivate", "Deactivate")],
        (true, false) => vec![("pause", "Pause"), ("deactivate", "Deactivate")],
    };
    let id = rater.id.to_string();
    let row_id = format!("rater-{}", rater.username);
    let skills_label = format!("skills of {}", rater.username);
    let hours_label = format!("weekly hours of {}", rater.username);
    let flagged = rater.flag.is_some();
    let action_forms = actions
        .into_iter()
        .map(|(action, label)| {
            let id = id.clone();
            view! {
                <ActionForm action=update attr:class="inline">
                    <input type="hidden" name="rater_id" value=id/>
                    <input type="hidden" name="action" value=action/>
                    <button type="submit" class="secondary">{label}</button>
                </ActionForm>
            }
        })
        .collect_view();
    view! {
        <tr data-testid=row_id class:flagged=flagged>
            <td>{rater.username.clone()} " " <span class="hint">"(" {rater.role.clone()} ")"</span>
                {rater.flag.clone().map(|flag| view! { <br/><span class="error" data-testid="rater-flag">"⚑ " {flag}</span> })}
            </td>
            <td data-testid="rater-status">{status}</td>
            <td>{format!("{:.1}", rater.items_per_day)}</td>
            <td>{rater.median_seconds_per_item.map_or_else(|| "–".to_string(), |s| format!("{s:.0}"))}</td>
            <td>{percent(rater.review_acceptance)}</td>
            <td>{percent(rater.agreement_with_consensus)}</td>
            <td>{rater.labels_30d}</td>
            <td>{rater.last_active.map(format_time).unwrap_or_else(|| "never".into())}</td>
            <td>
                <ActionForm action=update attr:class="inline">
                    <input type="hidden" name="rater_id" value=id/>
                    <input name="skills" value=rater.skills.clone() placeholder="code, math" size="12"
                        aria-label=skills_label/>
                    <input name="weekly_capacity_hours" type="number" min="0" max="168" step="0.5" size="4"
                        value=rater.weekly_capacity_hours.to_string() aria-label=hours_label/>
                    <button type="submit" class="secondary">"Save"</button>
                </ActionForm>
            </td>
            <td>{action_forms}</td>
        </tr>
    }
}
