//! The lead's watch over the human queue: the queue report (backlog, ages, forecast, tasks at
//! risk, SLA attainment, availability, agreement per queue, alerts) and the monitor that acts
//! on it every minute: it escalates at-risk tasks (priority raised, senior raters served them
//! first), raises and resolves alerts, and emails new alerts to the leads.
//!
//! The arithmetic lives in [`arbiter_domain::annotation::sla`]; this module reads the store, writes the
//! escalations and alerts, and sends mail.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::human_queue::{queue_agreement, queue_settings, AgreementReport};
use crate::mail::Mailer;
use crate::service::ServiceResult;
use arbiter_domain::annotation::agreement::Statistic;
use arbiter_domain::annotation::sla::LabellingFlow;
use arbiter_domain::annotation::sla::{
    attainment, availability, AtRiskTask, Availability, QueueScan, SlaDay, AGE_BUCKETS, DAY_MS,
};
use arbiter_domain::health::Alert;
use arbiter_store::Store;

/// Agreement alerts wait for this many items with two or more labels in a queue.
pub const MIN_ITEMS_FOR_AGREEMENT_ALERT: u64 = 20;
/// Days of labels the agreement per queue covers.
const AGREEMENT_DAYS: i64 = 7;
/// Days of SLA attainment shown.
const SLA_HISTORY_DAYS: i64 = 14;
/// Resolved alerts shown under the open ones.
const RESOLVED_ALERTS_SHOWN: i64 = 20;
/// The rater pairs named in a low-agreement alert.
const PAIRS_NAMED: usize = 3;

pub const ALERT_SLA_AT_RISK: &str = "sla_at_risk";
pub const ALERT_SLA_BREACHED: &str = "sla_breached";
pub const ALERT_LOW_AGREEMENT: &str = "low_agreement";

/// Everything the lead's queue page shows.
#[derive(Clone, Debug, Serialize)]
pub struct QueueReport {
    pub now: i64,
    pub backlog_tasks: u64,
    pub backlog_labels: u64,
    /// (bucket, open tasks of that age).
    pub ages: Vec<(String, u64)>,
    pub breached: u64,
    pub at_risk: u64,
    pub listed: Vec<AtRiskTask>,
    pub flow: LabellingFlow,
    /// The velocity the forecast uses, and what it was measured over.
    pub labels_per_hour: f64,
    pub velocity_basis: String,
    pub forecast_hours: Option<f64>,
    pub sla_days: Vec<SlaDay>,
    /// Over the last 7 days.
    pub attainment_7d: Option<f64>,
    pub availability: Availability,
    pub agreement_floor: f64,
    pub queues: Vec<(String, AgreementReport)>,
    pub alerts: Vec<Alert>,
    /// Tasks the monitor escalates on its next round (at risk, not escalated yet).
    pub to_escalate: Vec<i64>,
    /// (queue, at risk, breached) for queues with either.
    pub queues_at_risk: Vec<(String, u64, u64)>,
}

/// Current velocity: the last hour when anyone labelled in it, else the day's or the week's
/// average, so a quiet hour does not read as a stopped queue.
fn velocity(flow: &LabellingFlow) -> (f64, String) {
    if flow.labels_last_hour > 0 {
        (flow.labels_last_hour as f64, "the last hour".into())
    } else if flow.labels_last_day > 0 {
        (
            flow.labels_last_day as f64 / 24.0,
            "the last 24 hours".into(),
        )
    } else {
        (
            flow.labels_last_week as f64 / 168.0,
            "the last 7 days".into(),
        )
    }
}

pub async fn queue_report(
    store: &dyn Store,
    now: i64,
    agreement_intervals: bool,
) -> ServiceResult<QueueReport> {
    let flow = store.labelling_flow(now).await?;
    let (labels_per_hour, velocity_basis) = velocity(&flow);
    let mut scan = QueueScan::new(now, labels_per_hour);
    store.scan_open_tasks(&mut |task| scan.visit(&task)).await?;
    let sla_days = store
        .sla_days((now / DAY_MS - SLA_HISTORY_DAYS + 1) * DAY_MS)
        .await?;
    let this_week: Vec<SlaDay> = sla_days
        .iter()
        .filter(|day| day.day > now / DAY_MS - 7)
        .cloned()
        .collect();
    let agreement_floor = queue_settings(store).await?.agreement_floor;
    Ok(QueueReport {
        now,
        backlog_tasks: scan.backlog_tasks,
        backlog_labels: scan.backlog_labels,
        ages: AGE_BUCKETS
            .iter()
            .zip(scan.ages)
            .map(|((label, _), count)| (label.to_string(), count))
            .collect(),
        breached: scan.breached,
        at_risk: scan.at_risk,
        forecast_hours: scan.forecast_hours(),
        availability: availability(
            flow.labels_needed_last_week as f64,
            scan.backlog_labels,
            flow.median_label_ms.map(|ms| ms / 1000.0),
            flow.capacity_hours_per_week,
        ),
        listed: scan.listed,
        to_escalate: scan.to_escalate,
        queues_at_risk: scan
            .queues_at_risk
            .into_iter()
            .map(|(queue, risk)| (queue, risk.at_risk, risk.breached))
            .collect(),
        flow,
        labels_per_hour,
        velocity_basis,
        attainment_7d: attainment(&this_week),
        sla_days,
        agreement_floor,
        queues: queue_agreement(store, AGREEMENT_DAYS, agreement_intervals).await?,
        alerts: store.alerts(RESOLVED_ALERTS_SHOWN).await?,
    })
}

/// Why a queue's agreement is low enough to alert on, naming the rubric and the rater pairs
/// with the lowest kappa; `None` when it is fine or there is too little to say.
pub fn low_agreement_message(queue: &str, report: &AgreementReport, floor: f64) -> Option<String> {
    let Statistic::Defined(alpha) = report.alpha.statistic else {
        return None;
    };
    if report.items < MIN_ITEMS_FOR_AGREEMENT_ALERT || alpha >= floor {
        return None;
    }
    let mut pairs: Vec<(f64, String)> = report
        .pairs
        .iter()
        .filter_map(|pair| match pair.kappa.statistic {
            Statistic::Defined(kappa) => Some((
                kappa,
                format!(
                    "{} and {} (kappa {kappa:.2} over {} items)",
                    pair.first, pair.second, pair.shared_items
                ),
            )),
            Statistic::Undefined { .. } => None,
        })
        .collect();
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let named: Vec<String> = pairs
        .into_iter()
        .take(PAIRS_NAMED)
        .map(|(_, pair)| pair)
        .collect();
    let drivers = if named.is_empty() {
        "no rater pair shares enough items to single out".to_string()
    } else {
        format!("lowest pairs: {}", named.join("; "))
    };
    Some(format!(
        "Agreement on queue `{queue}` (rubric: correctness, pass/fail) is alpha {alpha:.2}, below the floor of {floor:.2}, over {} items; {drivers}.",
        report.items
    ))
}

/// Tasks one round escalates at most: a queue far behind is escalated over several rounds
/// rather than in one long burst of writes.
const MAX_ESCALATIONS_PER_ROUND: usize = 1_000;

/// What one monitor round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MonitorRound {
    pub escalated: u64,
    pub alerts_raised: u64,
    pub alerts_resolved: u64,
    pub emails_sent: u64,
}

/// One round of the monitor at `now`.
pub async fn monitor_once(
    store: &dyn Store,
    mailer: &Mailer,
    now: i64,
) -> ServiceResult<MonitorRound> {
    let report = queue_report(store, now, false).await?;
    let mut round = MonitorRound {
        escalated: store
            .escalate_tasks(
                &report.to_escalate[..report.to_escalate.len().min(MAX_ESCALATIONS_PER_ROUND)],
                now,
            )
            .await?,
        ..MonitorRound::default()
    };
    // Each SLA alert kind, whether it counts overdue tasks (or at-risk ones), and what it says.
    let sla_alerts = [
        (
            ALERT_SLA_AT_RISK,
            false,
            "are forecast to miss their SLA deadline at the current velocity",
        ),
        (ALERT_SLA_BREACHED, true, "are past their SLA deadline"),
    ];
    for (kind, overdue, what) in sla_alerts {
        let mut queues = Vec::new();
        for (queue, at_risk, breached) in &report.queues_at_risk {
            let count = if overdue { *breached } else { *at_risk };
            if count == 0 {
                continue;
            }
            let message = format!(
                "{count} open task(s) in queue `{queue}` {what} ({:.1} labels/hour over {}). They were escalated: priority raised and offered to senior raters first.",
                report.labels_per_hour, report.velocity_basis
            );
            round.alerts_raised += u64::from(store.raise_alert(kind, queue, &message, now).await?);
            queues.push(queue.clone());
        }
        round.alerts_resolved += store.resolve_alerts(kind, &queues, now).await?;
    }
    let mut low_queues = Vec::new();
    for (queue, agreement) in &report.queues {
        if let Some(message) = low_agreement_message(queue, agreement, report.agreement_floor) {
            round.alerts_raised += u64::from(
                store
                    .raise_alert(ALERT_LOW_AGREEMENT, queue, &message, now)
                    .await?,
            );
            low_queues.push(queue.clone());
        }
    }
    round.alerts_resolved += store
        .resolve_alerts(ALERT_LOW_AGREEMENT, &low_queues, now)
        .await?;
    let system = crate::health::check_rules(store, now, &report).await?;
    round.alerts_raised += system.raised;
    round.alerts_resolved += system.resolved;
    round.emails_sent = email_new_alerts(store, mailer, now).await?;
    Ok(round)
}

/// Emails each open alert not emailed yet to the leads; an alert counts as emailed only once
/// it was sent, so a mail server that is down is tried again next round.
async fn email_new_alerts(store: &dyn Store, mailer: &Mailer, now: i64) -> ServiceResult<u64> {
    let leads = store.lead_emails().await?;
    if leads.is_empty() {
        return Ok(0);
    }
    let mut sent = 0;
    for alert in store.alerts(0).await? {
        if alert.resolved_at.is_some() || alert.emailed_at.is_some() {
            continue;
        }
        let subject = format!("[Arbiter] {}: {}", alert_title(&alert.kind), alert.subject);
        let see = if alert.kind == crate::trends::ALERT_REGRESSION {
            "See the trends page for the checkpoints, the baseline and the paired tests."
        } else if arbiter_domain::health::rules::RULE_KINDS.contains(&alert.kind.as_str()) {
            "See the system page for queue depth, latency, errors, spending, endpoints and workers; leads can change the thresholds there."
        } else {
            "See the queue page for the tasks at risk, the forecast and agreement by rater pair."
        };
        let body = format!("{}\n\n{see}", alert.message);
        // Claim first: of several servers' monitors, only the one that claims it sends it.
        if !store.claim_alert_email(alert.id, now).await? {
            continue;
        }
        match mailer.send(&leads, &subject, &body).await {
            Ok(()) => sent += 1,
            Err(err) => {
                store.release_alert_email(alert.id).await?;
                tracing::warn!(alert = alert.id, error = %format!("{err:#}"), "alert email not sent; retrying next round");
            }
        }
    }
    Ok(sent)
}

/// An alert kind in words.
pub fn alert_title(kind: &str) -> &'static str {
    match kind {
        ALERT_SLA_AT_RISK => "SLA at risk",
        ALERT_SLA_BREACHED => "SLA breached",
        ALERT_LOW_AGREEMENT => "Low agreement",
        crate::trends::ALERT_REGRESSION => "Regression",
        arbiter_domain::health::rules::ALERT_QUEUE_GROWING => "Queue growing",
        arbiter_domain::health::rules::ALERT_ERROR_RATE => "Error rate",
        arbiter_domain::health::rules::ALERT_P99_LATENCY => "Slow answers",
        arbiter_domain::health::rules::ALERT_DAILY_COST => "Over budget",
        arbiter_domain::health::rules::ALERT_RATER_AVAILABILITY => "Rater availability",
        arbiter_domain::health::rules::ALERT_WORKER_SILENT => "Worker lost",
        _ => "Alert",
    }
}

/// Runs a monitor round every `interval` until `shutdown` turns true.
pub async fn run_monitor(
    store: Arc<dyn Store>,
    mailer: Arc<Mailer>,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let (store, mailer) = (store.as_ref(), mailer.as_ref());
    crate::periodic::every(interval, shutdown, move || async move {
        match monitor_once(store, mailer, arbiter_store::now_ms()).await {
            Ok(round) if round != MonitorRound::default() => {
                tracing::info!(?round, "queue monitor round");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "queue monitor round failed"),
        }
    })
    .await;
}
