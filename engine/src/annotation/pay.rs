//! Rater hours and pay: the lead's pay pools and rates, raters' pools, the ledger for payroll
//! (a row per rater, period and rate in force) and a rater's own totals. The pricing is
//! [`arbiter_domain::annotation::pay`]; who may call what is decided by the caller (leads
//! manage pay and read the ledger; a rater reads only their own rows).

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::annotation::pay::{
    format_day, idle_caps_ms, ledger_totals, parse_currency, parse_day, parse_idle_cap,
    parse_pool_name, parse_rate, pay_ledger, Ledger, PayBasis, PayPeriod, PaySetup, DAY_MS,
    DEFAULT_IDLE_CAP_MINUTES,
};
use arbiter_domain::ids::UserId;
use arbiter_store::{NewPayRate, Store};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The longest range one ledger covers, so one request cannot sum years of labels.
const LONGEST_LEDGER_DAYS: i64 = 366;
/// A rater's own rows cover the current month and the five weeks before it.
const OWN_DAYS: i64 = 35;

/// A rate as a lead types it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RateForm {
    pub pool_id: i64,
    /// `answer` or `hour`.
    pub basis: String,
    /// `12.50`.
    pub rate: String,
    pub currency: String,
    /// Blank for the default.
    pub idle_cap_minutes: String,
    /// `YYYY-MM-DD`; blank for today.
    pub effective_from: String,
}

/// The day a form names, or `today` when blank.
fn day_or_today(text: &str, today: i64, what: &str) -> ServiceResult<i64> {
    if text.trim().is_empty() {
        return Ok(today);
    }
    parse_day(text).map_err(|why| ServiceError::Invalid(format!("{what}: {why}")))
}

pub async fn create_pool(store: &dyn Store, name: &str, now: i64) -> ServiceResult<i64> {
    let name = parse_pool_name(name).map_err(ServiceError::Invalid)?;
    Ok(store.create_pay_pool(&name, now).await?)
}

pub async fn set_rate(
    store: &dyn Store,
    form: &RateForm,
    set_by: UserId,
    now: i64,
) -> ServiceResult<()> {
    let basis = PayBasis::parse(&form.basis).ok_or_else(|| {
        ServiceError::Invalid(format!(
            "pay per `answer` or per `hour`, not `{}`",
            form.basis.trim()
        ))
    })?;
    let idle_cap_minutes = if form.idle_cap_minutes.trim().is_empty() {
        DEFAULT_IDLE_CAP_MINUTES
    } else {
        parse_idle_cap(&form.idle_cap_minutes).map_err(ServiceError::Invalid)?
    };
    let rate = NewPayRate {
        pool_id: form.pool_id,
        basis,
        rate_minor: parse_rate(&form.rate).map_err(ServiceError::Invalid)?,
        currency: parse_currency(&form.currency).map_err(ServiceError::Invalid)?,
        idle_cap_minutes,
        effective_day: day_or_today(&form.effective_from, now / DAY_MS, "effective from")?,
    };
    Ok(store.set_pay_rate(&rate, set_by, now).await?)
}

/// Puts a rater in a pool (`pool_id` 0 for none) from a day on.
pub async fn assign_pool(
    store: &dyn Store,
    rater_id: UserId,
    pool_id: i64,
    effective_from: &str,
    set_by: UserId,
    now: i64,
) -> ServiceResult<()> {
    let day = day_or_today(effective_from, now / DAY_MS, "effective from")?;
    let pool = (pool_id != 0).then_some(pool_id);
    Ok(store
        .assign_pay_pool(rater_id, pool, day, set_by, now)
        .await?)
}

pub async fn pay_setup(store: &dyn Store, now: i64) -> ServiceResult<PaySetup> {
    use arbiter_domain::accounts::Permission;
    let raters = store
        .list_users()
        .await?
        .into_iter()
        .filter(|user| user.active && user.role.can(Permission::Annotate))
        .map(|user| (user.id, user.username))
        .collect();
    Ok(PaySetup {
        pools: store.pay_pools().await?,
        rates: store.pay_rates().await?,
        assignments: store.pay_assignments(None).await?,
        raters,
        today: format_day(now / DAY_MS),
    })
}

/// The ledger from `from` to `until` (`YYYY-MM-DD`, both included) by `period`; one rater's
/// rows with `rater`.
pub async fn ledger(
    store: &dyn Store,
    from: &str,
    until: &str,
    period: &str,
    rater: Option<UserId>,
) -> ServiceResult<Ledger> {
    let period = PayPeriod::parse(period).ok_or_else(|| {
        ServiceError::Invalid(format!(
            "a ledger is by `week` or `month`, not `{}`",
            period.trim()
        ))
    })?;
    let from_day = parse_day(from).map_err(|why| ServiceError::Invalid(format!("from: {why}")))?;
    let until_day =
        parse_day(until).map_err(|why| ServiceError::Invalid(format!("until: {why}")))?;
    if until_day < from_day {
        return Err(ServiceError::Invalid(format!(
            "the ledger's range ends ({}) before it starts ({})",
            format_day(until_day),
            format_day(from_day)
        )));
    }
    if until_day - from_day >= LONGEST_LEDGER_DAYS {
        return Err(ServiceError::Invalid(format!(
            "a ledger covers at most {LONGEST_LEDGER_DAYS} days; export a long range in parts"
        )));
    }
    let rates = store.pay_rates().await?;
    let assignments = store.pay_assignments(rater).await?;
    let mut work = BTreeMap::new();
    for cap in idle_caps_ms(&rates) {
        let days = store.work_days(from_day, until_day + 1, cap, rater).await?;
        work.insert(cap, days);
    }
    let rows = pay_ledger(&rates, &assignments, &work, period);
    let totals = ledger_totals(&rows)
        .into_iter()
        .map(|(currency, (answers, ms, amount))| (currency, answers, ms, amount))
        .collect();
    Ok(Ledger {
        from: format_day(from_day),
        until: format_day(until_day),
        period,
        rows,
        totals,
    })
}

/// A rater's own rows: by week over the last five weeks, and by month for this month.
pub async fn own_pay(store: &dyn Store, rater: UserId, now: i64) -> ServiceResult<Vec<Ledger>> {
    let today = now / DAY_MS;
    let (month_start, _) = PayPeriod::Month.of(today);
    let (week_start, _) = PayPeriod::Week.of(today - OWN_DAYS + 7);
    let mut ledgers = Vec::new();
    for (from, period) in [(week_start, "week"), (month_start, "month")] {
        ledgers.push(
            ledger(
                store,
                &format_day(from),
                &format_day(today),
                period,
                Some(rater),
            )
            .await?,
        );
    }
    Ok(ledgers)
}
