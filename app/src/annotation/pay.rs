//! Rater hours and pay: the lead's Pay page (pay pools and their rates, raters' pools, and the
//! ledger for payroll with its CSV download) and a rater's own hours and pay on their labels
//! page.

use crate::components::{ActionError, ErrorNote};
use arbiter_domain::annotation::pay::{format_amount, Ledger, LedgerRow, PayAssignment, PaySetup};
use arbiter_domain::ids::UserId;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};
#[cfg(feature = "ssr")]
use {
    crate::guard::{require, service_error},
    arbiter_domain::accounts::Permission,
    arbiter_store::now_ms,
};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PayPageData {
    pub setup: PaySetup,
    pub ledger: Ledger,
}

/// The Pay page: pools, rates, raters' pools and the ledger from `from` to `until` (blank:
/// this month so far) by `period` (`week` or `month`).
#[server(endpoint = "pay_page")]
pub async fn pay_page(
    #[server(default)] from: String,
    #[server(default)] until: String,
    #[server(default)] period: String,
) -> Result<PayPageData, ServerFnError> {
    use arbiter_domain::annotation::pay::{format_day, PayPeriod, DAY_MS};
    let (state, _) = require(Permission::ManageUsers).await?;
    let store = state.store.as_ref();
    let now = now_ms();
    let today = now / DAY_MS;
    let blank_or = |text: String, default: String| {
        if text.trim().is_empty() {
            default
        } else {
            text
        }
    };
    let from = blank_or(from, format_day(PayPeriod::Month.of(today).0));
    let until = blank_or(until, format_day(today));
    let period = blank_or(period, "week".into());
    let ledger = arbiter_engine::annotation::pay::ledger(store, &from, &until, &period, None)
        .await
        .map_err(service_error)?;
    let setup = arbiter_engine::annotation::pay::pay_setup(store, now)
        .await
        .map_err(service_error)?;
    Ok(PayPageData { setup, ledger })
}

#[server(endpoint = "create_pay_pool")]
pub async fn create_pay_pool(name: String) -> Result<i64, ServerFnError> {
    let (state, _) = require(Permission::ManageUsers).await?;
    arbiter_engine::annotation::pay::create_pool(state.store.as_ref(), &name, now_ms())
        .await
        .map_err(service_error)
}

/// A pool's rate from a day on: `basis` `answer` or `hour`, `rate` like `12.50`, a currency
/// code, an idle cap in minutes (blank: 10) and `effective_from` (blank: today).
#[server(endpoint = "set_pay_rate")]
pub async fn set_pay_rate(
    pool_id: i64,
    basis: String,
    rate: String,
    currency: String,
    #[server(default)] idle_cap_minutes: String,
    #[server(default)] effective_from: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    let form = arbiter_engine::annotation::pay::RateForm {
        pool_id,
        basis,
        rate,
        currency,
        idle_cap_minutes,
        effective_from,
    };
    arbiter_engine::annotation::pay::set_rate(state.store.as_ref(), &form, user.id, now_ms())
        .await
        .map_err(service_error)
}

/// Puts a rater in a pool (`pool_id` 0: none, unpaid) from `effective_from` (blank: today).
#[server(endpoint = "assign_pay_pool")]
pub async fn assign_pay_pool(
    rater_id: UserId,
    pool_id: i64,
    #[server(default)] effective_from: String,
) -> Result<(), ServerFnError> {
    let (state, user) = require(Permission::ManageUsers).await?;
    arbiter_engine::annotation::pay::assign_pool(
        state.store.as_ref(),
        rater_id,
        pool_id,
        &effective_from,
        user.id,
        now_ms(),
    )
    .await
    .map_err(service_error)
}

/// The signed-in rater's own hours and pay: by week, then this month.
#[server(endpoint = "own_pay")]
pub async fn own_pay() -> Result<Vec<Ledger>, ServerFnError> {
    let (state, user) = require(Permission::Annotate).await?;
    arbiter_engine::annotation::pay::own_pay(state.store.as_ref(), user.id, now_ms())
        .await
        .map_err(service_error)
}

fn hours(ms: u64) -> String {
    format!("{:.2}", ms as f64 / 3_600_000.0)
}

fn amount(row: &LedgerRow) -> String {
    match &row.currency {
        Some(currency) => format_amount(row.amount_minor, currency),
        None => "unpaid".into(),
    }
}

fn rate_text(row: &LedgerRow) -> String {
    match (&row.pool, row.basis, row.rate_minor, &row.currency) {
        (Some(pool), Some(basis), Some(rate), Some(currency)) => format!(
            "{pool}: {} per {}",
            format_amount(rate, currency),
            basis.as_str()
        ),
        _ => "no pool or rate".into(),
    }
}

#[component]
pub fn PayPage() -> impl IntoView {
    let create = ServerAction::<CreatePayPool>::new();
    let set_rate = ServerAction::<SetPayRate>::new();
    let assign = ServerAction::<AssignPayPool>::new();
    let range = RwSignal::new((String::new(), String::new(), "week".to_string()));
    let data = Resource::new(
        move || {
            (
                range.get(),
                create.version().get(),
                set_rate.version().get(),
                assign.version().get(),
            )
        },
        |((from, until, period), ..)| pay_page(from, until, period),
    );
    view! {
        <h1>"Rater pay"</h1>
        <p class="hint">
            "Time on task runs from a claim to its submission, each answer's time capped by its pool's idle cap. "
            "Work is priced by the rater's pool and rate in force on the day it was done, so a period paid stays the same when a rate changes."
        </p>
        <ActionError value=create.value()/>
        <ActionError value=set_rate.value()/>
        <ActionError value=assign.value()/>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(data) => view! {
                        <LedgerSection ledger=data.ledger range/>
                        <PoolsSection setup=data.setup.clone() create set_rate/>
                        <RaterPoolsSection setup=data.setup assign/>
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn LedgerSection(ledger: Ledger, range: RwSignal<(String, String, String)>) -> impl IntoView {
    let (from, until) = (
        RwSignal::new(ledger.from.clone()),
        RwSignal::new(ledger.until.clone()),
    );
    let period = RwSignal::new(match ledger.period {
        arbiter_domain::annotation::pay::PayPeriod::Week => "week".to_string(),
        arbiter_domain::annotation::pay::PayPeriod::Month => "month".to_string(),
    });
    let csv = format!(
        "/pay/ledger.csv?from={}&until={}&period={}",
        ledger.from,
        ledger.until,
        period.get_untracked()
    );
    view! {
        <section class="card" data-testid="pay-ledger">
            <h2>"Ledger"</h2>
            <form class="row" on:submit=move |event| {
                event.prevent_default();
                range.set((from.get_untracked(), until.get_untracked(), period.get_untracked()));
            }>
                <label>"From" <input type="date" name="from" prop:value=from on:input=move |e| from.set(event_target_value(&e))/></label>
                <label>"Until" <input type="date" name="until" prop:value=until on:input=move |e| until.set(event_target_value(&e))/></label>
                <label>"By"
                    <select name="period" prop:value=period on:change=move |e| period.set(event_target_value(&e))>
                        <option value="week">"ISO week"</option>
                        <option value="month">"month"</option>
                    </select>
                </label>
                <button type="submit">"Show"</button>
                <a href=csv download data-testid="ledger-csv">"Download CSV"</a>
            </form>
            {if ledger.rows.is_empty() {
                view! { <p class="notice" data-testid="ledger-empty">"No answers in this range."</p> }.into_any()
            } else {
                view! { <LedgerTable rows=ledger.rows.clone() show_rater=true/> }.into_any()
            }}
            <ul class="totals" data-testid="ledger-totals">
                {ledger.totals.iter().map(|(currency, answers, ms, amount)| {
                    let paid = if currency.is_empty() {
                        "unpaid".to_string()
                    } else {
                        format_amount(*amount, currency)
                    };
                    view! { <li>{format!("{answers} answers, {} payable hours: {paid}", hours(*ms))}</li> }
                }).collect_view()}
            </ul>
        </section>
    }
}

#[component]
fn LedgerTable(rows: Vec<LedgerRow>, show_rater: bool) -> impl IntoView {
    view! {
        <table class="ledger">
            <thead><tr>
                {show_rater.then(|| view! { <th>"Rater"</th> })}
                <th>"Period"</th><th>"Pool and rate"</th><th>"Labels"</th><th>"Gold"</th>
                <th>"Pairs"</th><th>"Rejected"</th><th>"Payable hours"</th><th>"Amount"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|row| view! {
                    <tr data-testid="ledger-row" data-rater=row.rater.clone()>
                        {show_rater.then(|| view! { <td>{row.rater.clone()}</td> })}
                        <td>{row.period.clone()}</td>
                        <td>{rate_text(&row)}</td>
                        <td>{row.labels}</td>
                        <td>{row.gold_answers}</td>
                        <td>{row.pair_answers}</td>
                        <td>{row.rejected}</td>
                        <td>{hours(row.payable_ms)}
                            {(row.untimed > 0).then(|| format!(" ({} untimed)", row.untimed))}</td>
                        <td data-testid="ledger-amount">{amount(&row)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn PoolsSection(
    setup: PaySetup,
    create: ServerAction<CreatePayPool>,
    set_rate: ServerAction<SetPayRate>,
) -> impl IntoView {
    let pools = setup.pools.clone();
    view! {
        <section class="card" data-testid="pay-pools">
            <h2>"Pools and rates"</h2>
            <table>
                <thead><tr><th>"Pool"</th><th>"From"</th><th>"Rate"</th><th>"Idle cap"</th></tr></thead>
                <tbody>
                    {setup.rates.iter().map(|rate| view! {
                        <tr data-testid="pay-rate">
                            <td>{rate.pool.clone()}</td>
                            <td>{arbiter_domain::annotation::pay::format_day(rate.effective_day)}</td>
                            <td>{format!("{} per {}", format_amount(rate.rate_minor, &rate.currency), rate.basis.as_str())}</td>
                            <td>{format!("{} min", rate.idle_cap_minutes)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <ActionForm action=create attr:class="row">
                <label>"New pool" <input name="name" maxlength="60" required/></label>
                <button type="submit">"Create pool"</button>
            </ActionForm>
            <ActionForm action=set_rate attr:class="row" attr:data-testid="rate-form">
                <label>"Pool"
                    <select name="pool_id">
                        {pools.into_iter().map(|(id, name)| view! { <option value=id.to_string()>{name}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Per"
                    <select name="basis">
                        <option value="answer">"answer"</option>
                        <option value="hour">"hour"</option>
                    </select>
                </label>
                <label>"Rate" <input name="rate" placeholder="12.50" size="8" required/></label>
                <label>"Currency" <input name="currency" value="USD" size="4" required/></label>
                <label>"Idle cap (min)" <input name="idle_cap_minutes" placeholder="10" size="4"/></label>
                <label>"From" <input type="date" name="effective_from" value=setup.today.clone()/></label>
                <button type="submit">"Set rate"</button>
            </ActionForm>
        </section>
    }
}

/// The pool in force today for each rater, from the assignments in day order.
fn current_pools(assignments: &[PayAssignment], today: &str) -> Vec<(UserId, Option<i64>)> {
    let today = arbiter_domain::annotation::pay::parse_day(today).unwrap_or(i64::MAX);
    let mut current: std::collections::BTreeMap<UserId, Option<i64>> = Default::default();
    for assignment in assignments.iter().filter(|a| a.effective_day <= today) {
        current.insert(assignment.rater_id, assignment.pool_id);
    }
    current.into_iter().collect()
}

#[component]
fn RaterPoolsSection(setup: PaySetup, assign: ServerAction<AssignPayPool>) -> impl IntoView {
    let current = current_pools(&setup.assignments, &setup.today);
    let pool_name = |pool: Option<i64>| {
        pool.and_then(|pool| setup.pools.iter().find(|(id, _)| *id == pool))
            .map_or_else(|| "none (unpaid)".to_string(), |(_, name)| name.clone())
    };
    let rows: Vec<(String, String)> = setup
        .raters
        .iter()
        .map(|(id, name)| {
            let pool = current
                .iter()
                .find(|(rater, _)| rater == id)
                .and_then(|(_, pool)| *pool);
            (name.clone(), pool_name(pool))
        })
        .collect();
    view! {
        <section class="card" data-testid="rater-pools">
            <h2>"Raters' pools"</h2>
            <table>
                <thead><tr><th>"Rater"</th><th>"Pool today"</th></tr></thead>
                <tbody>
                    {rows.into_iter().map(|(rater, pool)| {
                        let shown = rater.clone();
                        view! {
                            <tr data-testid="rater-pool" data-rater=rater><td>{shown}</td><td>{pool}</td></tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            <ActionForm action=assign attr:class="row" attr:data-testid="assign-form">
                <label>"Rater"
                    <select name="rater_id">
                        {setup.raters.iter().map(|(id, name)| view! { <option value=id.to_string()>{name.clone()}</option> }).collect_view()}
                    </select>
                </label>
                <label>"Pool"
                    <select name="pool_id">
                        {setup.pools.iter().map(|(id, name)| view! { <option value=id.to_string()>{name.clone()}</option> }).collect_view()}
                        <option value="0">"none (unpaid)"</option>
                    </select>
                </label>
                <label>"From" <input type="date" name="effective_from" value=setup.today.clone()/></label>
                <button type="submit">"Assign"</button>
            </ActionForm>
        </section>
    }
}

/// The signed-in rater's own hours and pay, on their labels page.
#[component]
pub fn OwnPay() -> impl IntoView {
    let ledgers = Resource::new(|| (), |_| own_pay());
    view! {
        <section class="card" data-testid="own-pay">
            <h2>"My hours and pay"</h2>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match ledgers.await {
                        Ok(ledgers) => {
                            let rows: Vec<LedgerRow> = ledgers.into_iter().flat_map(|ledger| ledger.rows).collect();
                            if rows.is_empty() {
                                view! { <p class="notice">"No answers in the last five weeks."</p> }.into_any()
                            } else {
                                view! { <LedgerTable rows show_rater=false/> }.into_any()
                            }
                        }
                        Err(error) => view! { <ErrorNote error/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}
