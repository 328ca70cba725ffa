//! Rater hours and pay. Time on task runs from a claim to its submission, each answer's time
//! capped (a rater who leaves an item open over lunch is not paid for lunch). Work is priced
//! by the rater's pay pool in force on the day it was done: a pool pays per answer or per
//! payable hour, in a currency's minor units, and both a pool's rate and a rater's pool change
//! from a given day on, so a period already paid never changes when a rate does. The ledger
//! has a row per rater, period (ISO week or calendar month) and rate in force; leads export it
//! for payroll and raters see their own rows.
//!
//! Pure: the store sums each rater's work per day ([`WorkDay`]); this module prices it.

use crate::ids::UserId;
use crate::spreadsheet::quote_formulas;
use chrono::{Datelike, NaiveDate};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

pub const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;
/// Time on one answer beyond this is idle unless a pool says otherwise.
pub const DEFAULT_IDLE_CAP_MINUTES: i64 = 10;
/// The longest idle cap a pool may set.
const LONGEST_IDLE_CAP_MINUTES: i64 = 240;
/// The highest rate accepted, in major units (a typo guard: 100,000 per answer or hour).
const HIGHEST_RATE: i64 = 100_000;

/// What a pool pays for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayBasis {
    /// Each submitted answer (label, gold answer or pair preference).
    Answer,
    /// Each payable hour (time on task, idle time capped).
    Hour,
}

impl PayBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            PayBasis::Answer => "answer",
            PayBasis::Hour => "hour",
        }
    }

    pub fn parse(text: &str) -> Option<PayBasis> {
        match text.trim() {
            "answer" => Some(PayBasis::Answer),
            "hour" => Some(PayBasis::Hour),
            _ => None,
        }
    }
}

/// A pool's rate from `effective_day` on (days since 1970-01-01, UTC).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayRate {
    pub rate_id: i64,
    pub pool_id: i64,
    pub pool: String,
    pub basis: PayBasis,
    /// In the currency's minor units (cents) per answer or per hour.
    pub rate_minor: i64,
    /// ISO 4217 code.
    pub currency: String,
    pub idle_cap_minutes: i64,
    pub effective_day: i64,
}

/// A rater's pool from `effective_day` on (`None`: unpaid, such as staff).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayAssignment {
    pub rater_id: UserId,
    pub pool_id: Option<i64>,
    pub effective_day: i64,
}

/// What kind of answer a unit of work is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    Label,
    Gold,
    Pair,
}

/// One rater's answers of one kind on one day, with their time on task capped at the cap the
/// store was asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkDay {
    pub rater_id: UserId,
    pub rater: String,
    pub day: i64,
    pub kind: WorkKind,
    pub answers: u64,
    /// Answers without a recorded time on task (made before times were kept).
    pub untimed: u64,
    /// Labels a reviewer rejected (paid as work done; shown so leads can see it).
    pub rejected: u64,
    pub capped_ms: u64,
}

/// Ledger periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayPeriod {
    /// ISO weeks, Monday to Sunday.
    Week,
    Month,
}

impl PayPeriod {
    pub fn parse(text: &str) -> Option<PayPeriod> {
        match text.trim() {
            "week" => Some(PayPeriod::Week),
            "month" => Some(PayPeriod::Month),
            _ => None,
        }
    }

    /// The first day of the period holding `day`, and the period's name (`2026-W49`,
    /// `2026-12`).
    pub fn of(self, day: i64) -> (i64, String) {
        let date = date_of(day);
        match self {
            PayPeriod::Week => {
                let week = date.iso_week();
                (
                    day - i64::from(date.weekday().num_days_from_monday()),
                    format!("{}-W{:02}", week.year(), week.week()),
                )
            }
            PayPeriod::Month => (
                day - i64::from(date.day0()),
                format!("{}-{:02}", date.year(), date.month()),
            ),
        }
    }
}

/// One ledger row: a rater's work in a period at one rate (or unpaid).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerRow {
    pub rater_id: UserId,
    pub rater: String,
    pub period: String,
    pub period_start_day: i64,
    /// The pool and rate in force (`None`: no pool, or the pool had no rate yet).
    pub pool: Option<String>,
    pub basis: Option<PayBasis>,
    pub rate_minor: Option<i64>,
    pub currency: Option<String>,
    pub labels: u64,
    pub gold_answers: u64,
    pub pair_answers: u64,
    pub rejected: u64,
    pub untimed: u64,
    pub payable_ms: u64,
    pub amount_minor: i64,
}

impl LedgerRow {
    pub fn answers(&self) -> u64 {
        self.labels + self.gold_answers + self.pair_answers
    }

    pub fn payable_hours(&self) -> f64 {
        self.payable_ms as f64 / HOUR_MS as f64
    }
}

/// The ledger over a range of days, with totals per currency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub from: String,
    pub until: String,
    pub period: PayPeriod,
    pub rows: Vec<LedgerRow>,
    /// Per currency (`""` for unpaid work): answers, payable milliseconds, amount.
    pub totals: Vec<(String, u64, u64, i64)>,
}

/// What the lead's pay page shows besides the ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaySetup {
    pub pools: Vec<(i64, String)>,
    /// Every rate set, by pool and day.
    pub rates: Vec<PayRate>,
    /// Every rater's pool changes, by rater and day.
    pub assignments: Vec<PayAssignment>,
    /// Raters who can label: (id, name).
    pub raters: Vec<(UserId, String)>,
    pub today: String,
}

fn epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default()
}

/// The date of a day number.
pub fn date_of(day: i64) -> NaiveDate {
    epoch() + chrono::TimeDelta::days(day)
}

/// The day number of `YYYY-MM-DD`.
pub fn parse_day(text: &str) -> Result<i64, String> {
    let date = NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
        .map_err(|_| format!("`{}` is not a date like 2026-12-01", text.trim()))?;
    Ok((date - epoch()).num_days())
}

/// `YYYY-MM-DD` of a day number.
pub fn format_day(day: i64) -> String {
    date_of(day).format("%Y-%m-%d").to_string()
}

/// An amount in minor units as the currency writes it (two decimals).
pub fn format_amount(amount_minor: i64, currency: &str) -> String {
    let sign = if amount_minor < 0 { "-" } else { "" };
    let whole = amount_minor.unsigned_abs();
    format!("{sign}{}.{:02} {currency}", whole / 100, whole % 100)
}

/// A rate as a lead types it (`12.50`, at most two decimals) in minor units.
pub fn parse_rate(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let refuse = || {
        format!(
            "the rate `{text}` is not an amount like 12.50 (at most two decimals, not negative)"
        )
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || fraction.len() > 2
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(refuse());
    }
    let whole: i64 = whole.parse().map_err(|_| refuse())?;
    if whole > HIGHEST_RATE {
        return Err(format!(
            "the rate {text} is above {HIGHEST_RATE} per answer or hour; check the amount"
        ));
    }
    let cents: i64 = format!("{fraction:0<2}").parse().map_err(|_| refuse())?;
    Ok(whole * 100 + cents)
}

/// A currency code as ISO 4217 writes it: three letters, upper case.
pub fn parse_currency(text: &str) -> Result<String, String> {
    let code = text.trim().to_ascii_uppercase();
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(code)
    } else {
        Err(format!(
            "`{}` is not a currency code like USD or EUR",
            text.trim()
        ))
    }
}

/// An idle cap in whole minutes, 1 to 240.
pub fn parse_idle_cap(text: &str) -> Result<i64, String> {
    match text.trim().parse::<i64>() {
        Ok(minutes) if (1..=LONGEST_IDLE_CAP_MINUTES).contains(&minutes) => Ok(minutes),
        _ => Err(format!(
            "the idle cap `{}` is not a whole number of minutes from 1 to {LONGEST_IDLE_CAP_MINUTES}",
            text.trim()
        )),
    }
}

/// A pool name: 1 to 60 characters, no control characters.
pub fn parse_pool_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() || name.chars().count() > 60 || name.chars().any(char::is_control) {
        return Err("a pool's name is 1 to 60 characters without line breaks".into());
    }
    Ok(name.to_string())
}

/// The idle caps (in milliseconds) the ledger needs work summed under: every rate's, and the
/// default for unpaid work.
pub fn idle_caps_ms(rates: &[PayRate]) -> Vec<i64> {
    let mut caps: Vec<i64> = rates
        .iter()
        .map(|rate| rate.idle_cap_minutes)
        .chain([DEFAULT_IDLE_CAP_MINUTES])
        .map(|minutes| minutes * 60_000)
        .collect();
    caps.sort_unstable();
    caps.dedup();
    caps
}

/// What is in force on `day` among entries that each take effect on a day: the latest one
/// that has.
fn in_force<T>(entries: &[T], day: i64, effective: impl Fn(&T) -> i64) -> Option<&T> {
    entries
        .iter()
        .filter(|entry| effective(entry) <= day)
        .max_by_key(|entry| effective(entry))
}

/// The ledger: `work` holds each rater's work per day summed under each idle cap of
/// [`idle_caps_ms`] (by cap in milliseconds); each day is priced by the rate in force for the
/// rater's pool that day. Rows are in rater, period and rate order.
pub fn pay_ledger(
    rates: &[PayRate],
    assignments: &[PayAssignment],
    work: &BTreeMap<i64, Vec<WorkDay>>,
    period: PayPeriod,
) -> Vec<LedgerRow> {
    let mut assignments_of: BTreeMap<UserId, Vec<&PayAssignment>> = BTreeMap::new();
    for assignment in assignments {
        assignments_of
            .entry(assignment.rater_id)
            .or_default()
            .push(assignment);
    }
    let mut rates_of: BTreeMap<i64, Vec<&PayRate>> = BTreeMap::new();
    for rate in rates {
        rates_of.entry(rate.pool_id).or_default().push(rate);
    }
    let rate_on = |rater: UserId, day: i64| -> Option<&PayRate> {
        let assignment = in_force(assignments_of.get(&rater)?, day, |a| a.effective_day)?;
        let pool_rates = rates_of.get(&assignment.pool_id?)?;
        in_force(pool_rates, day, |rate| rate.effective_day).copied()
    };
    let default_cap = DEFAULT_IDLE_CAP_MINUTES * 60_000;
    type DayKey = (UserId, i64, WorkKind);
    let by_cap: BTreeMap<i64, HashMap<DayKey, &WorkDay>> = work
        .iter()
        .map(|(cap, days)| {
            let days = days
                .iter()
                .map(|day| ((day.rater_id, day.day, day.kind), day))
                .collect();
            (*cap, days)
        })
        .collect();
    // Every (rater, day, kind) once, from the sums under the cap that applies to it.
    let mut rows: BTreeMap<(String, UserId, i64, Option<i64>), LedgerRow> = BTreeMap::new();
    let mut seen: HashSet<DayKey> = HashSet::new();
    for worked in work.values().flatten() {
        let key = (worked.rater_id, worked.day, worked.kind);
        if !seen.insert(key) {
            continue;
        }
        let rate = rate_on(worked.rater_id, worked.day);
        let cap = rate.map_or(default_cap, |rate| rate.idle_cap_minutes * 60_000);
        let Some(capped) = by_cap.get(&cap).and_then(|days| days.get(&key)) else {
            continue;
        };
        let (start, name) = period.of(worked.day);
        let row = rows
            .entry((
                worked.rater.clone(),
                worked.rater_id,
                start,
                rate.map(|rate| rate.rate_id),
            ))
            .or_insert_with(|| LedgerRow {
                rater_id: worked.rater_id,
                rater: worked.rater.clone(),
                period: name,
                period_start_day: start,
                pool: rate.map(|rate| rate.pool.clone()),
                basis: rate.map(|rate| rate.basis),
                rate_minor: rate.map(|rate| rate.rate_minor),
                currency: rate.map(|rate| rate.currency.clone()),
                labels: 0,
                gold_answers: 0,
                pair_answers: 0,
                rejected: 0,
                untimed: 0,
                payable_ms: 0,
                amount_minor: 0,
            });
        match capped.kind {
            WorkKind::Label => row.labels += capped.answers,
            WorkKind::Gold => row.gold_answers += capped.answers,
            WorkKind::Pair => row.pair_answers += capped.answers,
        }
        row.rejected += capped.rejected;
        row.untimed += capped.untimed;
        row.payable_ms += capped.capped_ms;
    }
    let mut ledger: Vec<LedgerRow> = rows.into_values().collect();
    for row in &mut ledger {
        row.amount_minor = match (row.basis, row.rate_minor) {
            (Some(PayBasis::Answer), Some(rate)) => row.answers() as i64 * rate,
            // Rounded to the nearest minor unit once per row, not per answer.
            (Some(PayBasis::Hour), Some(rate)) => {
                ((row.payable_ms as i128 * rate as i128 + HOUR_MS as i128 / 2) / HOUR_MS as i128)
                    as i64
            }
            _ => 0,
        };
    }
    ledger
}

/// Totals per currency (unpaid rows under `""`): answers, payable hours' milliseconds, amount.
pub fn ledger_totals(ledger: &[LedgerRow]) -> BTreeMap<String, (u64, u64, i64)> {
    let mut totals: BTreeMap<String, (u64, u64, i64)> = BTreeMap::new();
    for row in ledger {
        let total = totals
            .entry(row.currency.clone().unwrap_or_default())
            .or_default();
        total.0 += row.answers();
        total.1 += row.payable_ms;
        total.2 += row.amount_minor;
    }
    totals
}

/// The ledger as CSV for payroll, one row per ledger row.
pub fn ledger_csv(ledger: &[LedgerRow]) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record([
        "rater",
        "period",
        "period_start",
        "pool",
        "basis",
        "rate",
        "currency",
        "labels",
        "gold_answers",
        "pair_answers",
        "rejected_labels",
        "untimed_answers",
        "payable_hours",
        "amount",
    ]);
    for row in ledger {
        let mut record = [
            row.rater.clone(),
            row.period.clone(),
            format_day(row.period_start_day),
            row.pool.clone().unwrap_or_default(),
            row.basis.map(PayBasis::as_str).unwrap_or("").to_string(),
            row.rate_minor
                .map(|rate| format!("{}.{:02}", rate / 100, rate % 100))
                .unwrap_or_default(),
            row.currency.clone().unwrap_or_default(),
            row.labels.to_string(),
            row.gold_answers.to_string(),
            row.pair_answers.to_string(),
            row.rejected.to_string(),
            row.untimed.to_string(),
            format!("{:.4}", row.payable_hours()),
            format!("{}.{:02}", row.amount_minor / 100, row.amount_minor % 100),
        ];
        // Names are typed by people: nothing in them runs in a spreadsheet.
        quote_formulas(&mut record);
        let _ = writer.write_record(&record);
    }
    String::from_utf8(writer.into_inner().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> i64 {
        parse_day(text).unwrap()
    }

    fn rate(rate_id: i64, basis: PayBasis, rate_minor: i64, cap: i64, from: &str) -> PayRate {
        PayRate {
            rate_id,
            pool_id: 1,
            pool: "vendor".into(),
            basis,
            rate_minor,
            currency: "EUR".into(),
            idle_cap_minutes: cap,
            effective_day: day(from),
        }
    }

    fn worked(rater: i64, on: &str, kind: WorkKind, answers: u64, capped_ms: u64) -> WorkDay {
        WorkDay {
            rater_id: UserId(rater),
            rater: format!("rater{rater}"),
            day: day(on),
            kind,
            answers,
            untimed: 0,
            rejected: 0,
            capped_ms,
        }
    }

    #[test]
    fn days_periods_and_amounts_read_as_people_write_them() {
        assert_eq!(day("1970-01-01"), 0);
        assert_eq!(format_day(day("2026-12-03")), "2026-12-03");
        // 2026-12-03 is a Thursday of ISO week 49, which starts on Monday 2026-11-30.
        let (start, name) = PayPeriod::Week.of(day("2026-12-03"));
        assert_eq!(
            (format_day(start).as_str(), name.as_str()),
            ("2026-11-30", "2026-W49")
        );
        // 2027-01-01 is a Friday in ISO week 53 of 2026.
        assert_eq!(PayPeriod::Week.of(day("2027-01-01")).1, "2026-W53");
        let (start, name) = PayPeriod::Month.of(day("2026-12-31"));
        assert_eq!(
            (format_day(start).as_str(), name.as_str()),
            ("2026-12-01", "2026-12")
        );
        assert_eq!(parse_rate("12.5"), Ok(1250));
        assert_eq!(parse_rate("0.07"), Ok(7));
        assert_eq!(parse_rate("3"), Ok(300));
        for bad in ["", "-1", "1.234", "1,50", "abc", ".5", "100001"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_currency(" eur "), Ok("EUR".into()));
        assert!(parse_currency("euro").is_err());
        assert!(parse_idle_cap("0").is_err() && parse_idle_cap("241").is_err());
        assert!(parse_day("2026-13-01").is_err());
        assert_eq!(format_amount(123_456, "USD"), "1234.56 USD");
    }

    #[test]
    fn work_is_priced_by_the_rate_in_force_on_its_day_with_idle_time_capped() {
        // Per answer at 0.40 until 2026-12-02, then per hour at 18.00 with a 5-minute cap.
        let rates = [
            rate(1, PayBasis::Answer, 40, 10, "2026-11-01"),
            rate(2, PayBasis::Hour, 1_800, 5, "2026-12-02"),
        ];
        let assignments = [
            PayAssignment {
                rater_id: UserId(7),
                pool_id: Some(1),
                effective_day: day("2026-11-15"),
            },
            // Rater 8 joins the pool on the 2nd, then leaves it for staff on the 3rd.
            PayAssignment {
                rater_id: UserId(8),
                pool_id: Some(1),
                effective_day: day("2026-12-02"),
            },
            PayAssignment {
                rater_id: UserId(8),
                pool_id: None,
                effective_day: day("2026-12-03"),
            },
        ];
        // The store's sums under each cap: 10 minutes (answers' times up to 10 min each) and
        // 5 minutes (less).
        let work = BTreeMap::from([
            (
                300_000,
                vec![
                    worked(7, "2026-12-01", WorkKind::Label, 30, 3_000_000),
                    worked(7, "2026-12-02", WorkKind::Label, 20, 2_400_000),
                    worked(7, "2026-12-02", WorkKind::Gold, 2, 300_000),
                    worked(8, "2026-12-02", WorkKind::Pair, 6, 1_200_000),
                    worked(8, "2026-12-03", WorkKind::Label, 4, 600_000),
                ],
            ),
            (
                600_000,
                vec![
                    worked(7, "2026-12-01", WorkKind::Label, 30, 4_000_000),
                    worked(7, "2026-12-02", WorkKind::Label, 20, 3_000_000),
                    worked(7, "2026-12-02", WorkKind::Gold, 2, 400_000),
                    worked(8, "2026-12-02", WorkKind::Pair, 6, 1_500_000),
                    worked(8, "2026-12-03", WorkKind::Label, 4, 700_000),
                ],
            ),
        ]);
        assert_eq!(idle_caps_ms(&rates), vec![300_000, 600_000]);
        let ledger = pay_ledger(&rates, &assignments, &work, PayPeriod::Week);
        let summary: Vec<(&str, Option<PayBasis>, u64, u64, i64)> = ledger
            .iter()
            .map(|row| {
                (
                    row.rater.as_str(),
                    row.basis,
                    row.answers(),
                    row.payable_ms,
                    row.amount_minor,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                // 30 answers at 0.40, their time under the old 10-minute cap.
                ("rater7", Some(PayBasis::Answer), 30, 4_000_000, 1_200),
                // 22 answers over 2,700,000 ms (45 min) at 18.00 an hour = 13.50.
                ("rater7", Some(PayBasis::Hour), 22, 2_700_000, 1_350),
                // Unpaid from the 3rd: counted under the default cap, priced at nothing.
                ("rater8", None, 4, 700_000, 0),
                // 1,200,000 ms (20 min) at 18.00 an hour = 6.00.
                ("rater8", Some(PayBasis::Hour), 6, 1_200_000, 600),
            ]
        );
        assert!(ledger.iter().all(|row| row.period == "2026-W49"));
        let monthly = pay_ledger(&rates, &assignments, &work, PayPeriod::Month);
        assert_eq!(monthly.len(), 4, "the rate changes inside the month too");
        let totals = ledger_totals(&ledger);
        assert_eq!(totals["EUR"], (58, 7_900_000, 3_150));
        assert_eq!(totals[""], (4, 700_000, 0));
        let csv = ledger_csv(&ledger);
        assert!(csv.starts_with("rater,period,period_start,pool,basis,rate"));
        assert!(csv
            .contains("rater7,2026-W49,2026-11-30,vendor,hour,18.00,EUR,20,2,0,0,0,0.7500,13.50"));
    }
}
