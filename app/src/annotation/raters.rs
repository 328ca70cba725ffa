//! The lead's rater pool: each rater's velocity, time per item, review acceptance, gold
//! accuracy, agreement with the final verdicts and spot-check record, flagged below the lead's
//! threshold; invitations; pause, resume, deactivate, training, role, email, skills and weekly
//! capacity; the table sorted by any figure (click a column's heading) and as CSV.

use crate::annotation::api::{raters_page, InviteRater, SetQualityThreshold, UpdateRater};
use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use arbiter_domain::annotation::pool::RaterStats;
use leptos::prelude::*;

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |value| format!("{:.0}%", value * 100.0))
}

#[component]
pub fn RatersPage() -> impl IntoView {
    let update = ServerAction::<UpdateRater>::new();
    let threshold = ServerAction::<SetQualityThreshold>::new();
    let invite = ServerAction::<InviteRater>::new();
    // Flagged raters first until the lead picks a column.
    let sort = RwSignal::new((SortBy::Flagged, true));
    let data = Resource::new(
        move || {
            (
                update.version().get(),
                threshold.version().get(),
                invite.version().get(),
            )
        },
        |_| raters_page(),
    );
    view! {
        <h1>"Raters"</h1>
        <ActionError value=update.value()/>
        <ActionError value=threshold.value()/>
        <ActionError value=invite.value()/>
        {move || invite.value().get().and_then(Result::ok).map(|invited| view! {
            <p class="notice" role="status" data-testid="invited">
                "Invited " <strong>{invited.username}</strong> ". First password (shown once): "
                <code data-testid="invited-password">{invited.password}</code> " — " {invited.emailed}
            </p>
        })}
        <details class="card">
            <summary>"Invite a rater"</summary>
            <ActionForm action=invite attr:class="stack">
                <label>"Username" <input name="username" required/></label>
                <label>"Role" <RoleSelect selected="annotator".into() label="role of the new rater".into()/></label>
                <label>"Email (the first password is sent there)" <input name="email" type="email"/></label>
                <label>"Skills" <input name="skills" placeholder="code, math"/></label>
                <label>"Hours per week" <input name="weekly_capacity_hours" type="number" min="0" max="168" step="0.5"/></label>
                <label><input type="checkbox" name="training" value="on" checked/> " Start with training items"</label>
                <button type="submit">"Invite"</button>
            </ActionForm>
        </details>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! {
                        <section class="card">
                            <ActionForm action=threshold attr:class="inline">
                                <label>
                                    "Flag raters whose gold accuracy, review acceptance, agreement with consensus or upheld reviews are below"
                                    <input name="threshold" type="number" min="0" max="1" step="0.05" value=data.threshold.to_string()/>
                                </label>
                                <button type="submit" class="secondary">"Set"</button>
                            </ActionForm>
                            <p class="hint">"Figures over the last 30 days; velocity over the last 7. " <a href="/raters.csv" download="raters.csv">"Download as CSV"</a></p>
                        </section>
                        <table data-testid="raters">
                            <thead><tr>
                                <SortHeader label="Rater" column=SortBy::Name sort/><th>"Status"</th>
                                <SortHeader label="Items / day" column=SortBy::ItemsPerDay sort/>
                                <SortHeader label="Median s / item" column=SortBy::SecondsPerItem sort/>
                                <SortHeader label="Gold accuracy" column=SortBy::GoldAccuracy sort/>
                                <SortHeader label="Review acceptance" column=SortBy::ReviewAcceptance sort/>
                                <SortHeader label="Agreement with consensus" column=SortBy::Agreement sort/>
                                <SortHeader label="Reviews upheld" column=SortBy::ReviewsUpheld sort/>
                                <SortHeader label="Labels (30 d)" column=SortBy::Labels sort/>
                                <SortHeader label="Last active" column=SortBy::LastActive sort/>
                                <th>"Role · email · skills · hours / week"</th><th>"Actions"</th>
                            </tr></thead>
                            <tbody>
                                {move || {
                                    let mut raters = data.raters.clone();
                                    let (column, descending) = sort.get();
                                    sort_raters(&mut raters, column, descending);
                                    let viewer_is_admin = data.viewer_is_admin;
                                    raters.into_iter().map(|rater| view! { <RaterRow rater update viewer_is_admin/> }).collect_view()
                                }}
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
fn RaterRow(
    rater: RaterStats,
    update: ServerAction<UpdateRater>,
    viewer_is_admin: bool,
) -> impl IntoView {
    // Only admins change an admin's account (the server refuses leads too); an admin's role
    // is changed with `arbiter user`, so their row has no role choice.
    let is_admin = rater.role == "admin";
    let editable = viewer_is_admin || !is_admin;
    let in_training = rater.training_since.is_some();
    let status = match (rater.active, rater.paused, in_training) {
        (false, _, _) => "deactivated",
        (true, true, _) => "paused",
        (true, false, true) => "in training",
        (true, false, false) => "active",
    };
    let mut actions: Vec<(&str, &str)> = match (rater.active, rater.paused) {
        (false, _) => vec![("activate", "Activate")],
        (true, true) => vec![("resume", "Resume"), ("deactivate", "Deactivate")],
        (true, false) => vec![("pause", "Pause"), ("deactivate", "Deactivate")],
    };
    if rater.active {
        actions.push(if in_training {
            ("end-training", "End training")
        } else {
            ("train", "Send to training")
        });
    }
    let id = rater.id.to_string();
    let row_id = format!("rater-{}", rater.username);
    let skills_label = format!("skills of {}", rater.username);
    let hours_label = format!("weekly hours of {}", rater.username);
    let email_label = format!("email of {}", rater.username);
    let role_label = format!("role of {}", rater.username);
    let gold = match rater.gold_accuracy {
        Some(_) => format!("{} ({})", percent(rater.gold_accuracy), rater.gold_answered),
        None => "–".to_string(),
    };
    let flagged = rater.flag.is_some();
    let action_forms = actions
        .into_iter()
        .filter(|_| editable)
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
            <td data-testid="gold-accuracy">{gold}</td>
            <td>{percent(rater.review_acceptance)}</td>
            <td data-testid="rater-agreement">{percent(rater.agreement_with_consensus)}
                {rater.agreement_by_dimension.iter().map(|(key, share, count)| view! {
                    <br/><span class="hint" data-testid="rater-dimension">{format!("{key}: {:.0}% of {count}", share * 100.0)}</span>
                }).collect_view()}
            </td>
            <td>{percent(rater.reviews_upheld)}</td>
            <td>{rater.labels_30d}</td>
            <td>{rater.last_active.map(format_time).unwrap_or_else(|| "never".into())}</td>
            <td>
                {(!editable).then(|| view! { <span class="hint" data-testid="admin-only">"changed by an admin"</span> })}
                {editable.then(|| view! {
                <ActionForm action=update attr:class="inline">
                    <input type="hidden" name="rater_id" value=id/>
                    {(!is_admin).then(|| view! { <RoleSelect selected=rater.role.clone() label=role_label/> })}
                    <input name="email" type="email" value=rater.email.clone().unwrap_or_default() placeholder="email" size="14"
                        aria-label=email_label/>
                    <input name="skills" value=rater.skills.join(", ") placeholder="code, math" size="12"
                        aria-label=skills_label/>
                    <input name="weekly_capacity_hours" type="number" min="0" max="168" step="0.5" size="4"
                        value=rater.weekly_capacity_hours.to_string() aria-label=hours_label/>
                    <button type="submit" class="secondary">"Save"</button>
                </ActionForm>
                })}
            </td>
            <td>{action_forms}</td>
        </tr>
    }
}

/// The roles a lead may give from the pool (admins are made with `arbiter user`).
#[component]
fn RoleSelect(selected: String, label: String) -> impl IntoView {
    let options = ["annotator", "reviewer", "researcher", "lead"]
        .into_iter()
        .map(|role| {
            let is_selected = role == selected;
            view! { <option value=role selected=is_selected>{role}</option> }
        })
        .collect_view();
    let admin =
        (selected == "admin").then(|| view! { <option value="" selected=true>"admin"</option> });
    view! { <select name="role" aria-label=label>{admin}{options}</select> }
}

/// A column the rater table can be sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SortBy {
    /// Flagged raters first, then by name (the default).
    Flagged,
    Name,
    ItemsPerDay,
    SecondsPerItem,
    GoldAccuracy,
    ReviewAcceptance,
    Agreement,
    ReviewsUpheld,
    Labels,
    LastActive,
}

/// Sorts by one column; raters without a figure go last either way, ties by name.
fn sort_raters(raters: &mut [RaterStats], column: SortBy, descending: bool) {
    let figure = |rater: &RaterStats| -> Option<f64> {
        match column {
            SortBy::Flagged | SortBy::Name => None,
            SortBy::ItemsPerDay => Some(rater.items_per_day),
            SortBy::SecondsPerItem => rater.median_seconds_per_item,
            SortBy::GoldAccuracy => rater.gold_accuracy,
            SortBy::ReviewAcceptance => rater.review_acceptance,
            SortBy::Agreement => rater.agreement_with_consensus,
            SortBy::ReviewsUpheld => rater.reviews_upheld,
            SortBy::Labels => Some(rater.labels_30d as f64),
            SortBy::LastActive => rater.last_active.map(|at| at as f64),
        }
    };
    raters.sort_by(|a, b| {
        let order = match column {
            SortBy::Flagged => b.flag.is_some().cmp(&a.flag.is_some()),
            SortBy::Name => {
                let by_name = a.username.cmp(&b.username);
                if descending {
                    by_name.reverse()
                } else {
                    by_name
                }
            }
            _ => match (figure(a), figure(b)) {
                (Some(x), Some(y)) if descending => y.total_cmp(&x),
                (Some(x), Some(y)) => x.total_cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            },
        };
        order.then_with(|| a.username.cmp(&b.username))
    });
}

/// A column heading that sorts the table by its column; a second click reverses the order.
#[component]
fn SortHeader(
    label: &'static str,
    column: SortBy,
    sort: RwSignal<(SortBy, bool)>,
) -> impl IntoView {
    let state = move || {
        let (current, descending) = sort.get();
        match (current == column, descending) {
            (false, _) => "none",
            (true, true) => "descending",
            (true, false) => "ascending",
        }
    };
    let arrow = move || match state() {
        "descending" => " ▼",
        "ascending" => " ▲",
        _ => "",
    };
    view! {
        <th aria-sort=state>
            <button type="button" class="link" on:click=move |_| {
                sort.update(|(current, descending)| {
                    // Names read best A to Z; figures best largest first.
                    *descending = if *current == column { !*descending } else { column != SortBy::Name };
                    *current = column;
                });
            }>{label}{arrow}</button>
        </th>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::ids::UserId;

    fn rater(name: &str, gold: Option<f64>, flagged: bool) -> RaterStats {
        RaterStats {
            id: UserId(0),
            username: name.into(),
            role: "annotator".into(),
            active: true,
            paused: false,
            skills: Vec::new(),
            weekly_capacity_hours: 0.0,
            items_per_day: 0.0,
            median_seconds_per_item: None,
            review_acceptance: None,
            agreement_with_consensus: None,
            agreement_by_dimension: Vec::new(),
            gold_accuracy: gold,
            gold_answered: 0,
            reviews_upheld: None,
            email: None,
            training_since: None,
            labels_30d: 0,
            last_active: None,
            flag: flagged.then(|| "low".to_string()),
        }
    }

    fn names(raters: &[RaterStats]) -> Vec<&str> {
        raters.iter().map(|rater| rater.username.as_str()).collect()
    }

    #[test]
    fn raters_sort_by_a_figure_with_missing_figures_last() {
        let mut raters = vec![
            rater("cy", Some(0.5), false),
            rater("al", None, true),
            rater("bo", Some(0.9), false),
        ];
        sort_raters(&mut raters, SortBy::GoldAccuracy, true);
        assert_eq!(names(&raters), ["bo", "cy", "al"]);
        sort_raters(&mut raters, SortBy::GoldAccuracy, false);
        assert_eq!(names(&raters), ["cy", "bo", "al"]);
        sort_raters(&mut raters, SortBy::Flagged, true);
        assert_eq!(names(&raters), ["al", "bo", "cy"]);
        sort_raters(&mut raters, SortBy::Name, true);
        assert_eq!(names(&raters), ["cy", "bo", "al"]);
    }
}
