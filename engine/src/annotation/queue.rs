//! The lead's view of the human queue: backlog, ages, forecast, tasks at risk, SLA
//! attainment, availability, agreement per queue and alerts. The arithmetic lives in
//! [`arbiter_domain::annotation::sla`]; the monitor that acts on it is
//! [`crate::jobs::queue_monitor`].

use crate::annotation::agreement::{queue_agreement, AgreementReport, PREFERENCE, VERDICT};
use crate::annotation::quality::queue_settings;
use crate::error::ServiceResult;
use arbiter_domain::annotation::agreement::Statistic;
use arbiter_domain::annotation::queue_scan::{AtRiskTask, QueueScan, SlotNeed, AGE_BUCKETS};
use arbiter_domain::annotation::sla::{
    attainment, availability, Availability, LabellingFlow, SlaDay, DAY_MS,
};
use arbiter_domain::health::Alert;
use arbiter_domain::ids::TaskId;
use arbiter_store::{SlotFilter, Store};
use serde::Serialize;

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
    /// At-risk or breached tasks not escalated yet.
    pub unescalated: u64,
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
    /// Tasks the monitor escalates on its next round: the first at-risk ones not escalated yet,
    /// at most `queue_scan::ESCALATIONS_NAMED`.
    pub to_escalate: Vec<TaskId>,
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
    let scan = scan_open_queue(store, now, labels_per_hour).await?;
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
        backlog_tasks: scan.figures.backlog_tasks,
        backlog_labels: scan.figures.backlog_labels,
        ages: AGE_BUCKETS
            .iter()
            .zip(scan.figures.ages)
            .map(|((label, _), count)| (label.to_string(), count))
            .collect(),
        breached: scan.figures.breached,
        at_risk: scan.figures.at_risk,
        unescalated: scan.figures.unescalated,
        forecast_hours: scan.forecast_hours(),
        availability: availability(
            flow.labels_needed_last_week as f64,
            scan.figures.backlog_labels,
            flow.median_label_ms.map(|ms| ms / 1000.0),
            flow.capacity_hours_per_week,
        ),
        listed: scan.figures.listed,
        to_escalate: scan.figures.to_escalate,
        queues_at_risk: scan
            .figures
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

/// The open queue against its deadlines: the store's sums by serving slot, then the few slots
/// the scan must read task by task (see `queue_scan`).
pub async fn scan_open_queue(
    store: &dyn Store,
    now: i64,
    labels_per_hour: f64,
) -> ServiceResult<QueueScan> {
    let mut scan = QueueScan::new(now, labels_per_hour);
    store
        .scan_open_groups(now, &mut |group| scan.visit_group(group))
        .await?;
    for request in scan.finish_groups() {
        match request.need {
            SlotNeed::Every => {
                let every = store
                    .open_slot_tasks(now, &request, SlotFilter::default())
                    .await?;
                scan.take_slot(&request, &every);
            }
            SlotNeed::AtRisk {
                only_short_of_window,
                unescalated,
            } => {
                let (to_name, to_escalate) = scan.still_named();
                if to_name > 0 {
                    let first = SlotFilter {
                        only_short_of_window,
                        only_unescalated: false,
                        limit: Some(to_name),
                    };
                    let first = store.open_slot_tasks(now, &request, first).await?;
                    scan.name_at_risk(&request, &first);
                }
                if to_escalate > 0 && unescalated > 0 {
                    let first = SlotFilter {
                        only_short_of_window,
                        only_unescalated: true,
                        limit: Some(to_escalate),
                    };
                    let first = store.open_slot_tasks(now, &request, first).await?;
                    let ids: Vec<TaskId> = first.iter().map(|slot| slot.task.id).collect();
                    scan.name_for_escalation(&ids);
                }
            }
        }
    }
    Ok(scan)
}

/// The same scan task by task: the reference the sums are checked against (see
/// `OpenQueueStore::scan_open_tasks`).
pub async fn scan_task_by_task(
    store: &dyn Store,
    now: i64,
    labels_per_hour: f64,
) -> ServiceResult<QueueScan> {
    let mut scan = QueueScan::new(now, labels_per_hour);
    store.scan_open_tasks(&mut |task| scan.visit(&task)).await?;
    Ok(scan)
}

/// Why a queue's agreement on the verdict or a rubric dimension is low enough to alert on,
/// naming the dimension and the rater pairs with the lowest kappa; `None` when it is fine or there is too little to say.
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
    let on = match report.dimension.as_str() {
        VERDICT => "pass/fail verdicts".to_string(),
        PREFERENCE => "pairs' preferences".to_string(),
        dimension => format!("rubric dimension `{dimension}`"),
    };
    Some(format!(
        "Agreement on queue `{queue}` ({on}) is alpha {alpha:.2}, below the floor of {floor:.2}, over {} items; {drivers}.",
        report.items
    ))
}

/// What a low-agreement alert is about: the queue for its verdicts, `queue · dimension` for a
/// rubric dimension (one alert each, raised and resolved apart).
pub fn agreement_subject(queue: &str, report: &AgreementReport) -> String {
    if report.dimension == VERDICT {
        queue.to_string()
    } else {
        format!("{queue} · {}", report.dimension)
    }
}
