//! The queue monitor: every minute it escalates at-risk tasks (priority raised, senior raters
//! served them first), re-tunes triage policies from new human labels, raises and resolves
//! alerts (the queue's SLAs and agreement, benched judges, and the system's health rules), and
//! emails new alerts to the leads.

use crate::annotation::queue::{agreement_subject, low_agreement_message, queue_report};
use crate::clients::mail::Mailer;
use crate::error::ServiceResult;
use arbiter_domain::health::alert_title;
use arbiter_domain::health::ALERT_LOW_AGREEMENT;
use arbiter_domain::health::ALERT_SLA_AT_RISK;
use arbiter_domain::health::ALERT_SLA_BREACHED;
use arbiter_store::Store;
use std::sync::Arc;
use std::time::Duration;

/// What one monitor round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MonitorRound {
    pub escalated: u64,
    pub alerts_raised: u64,
    pub alerts_resolved: u64,
    pub emails_sent: u64,
    /// Triage policies re-tuned or whose judge was benched (see [`crate::tuning`]).
    pub policies_tuned: u64,
}

/// One round of the monitor at `now`.
pub async fn monitor_once(
    store: &dyn Store,
    mailer: &Mailer,
    now: i64,
) -> ServiceResult<MonitorRound> {
    // Servers a launcher that is gone will never start or stop: their runs must not wait.
    let abandoned = store
        .fail_abandoned_launches(now - arbiter_domain::serving::LAUNCHER_GONE_MS, now)
        .await?;
    if !abandoned.is_empty() {
        tracing::warn!(launches = ?abandoned, "launches of a launcher that stopped failed");
    }
    let report = queue_report(store, now, false).await?;
    let mut round = MonitorRound {
        // The report names at most `queue_scan::ESCALATIONS_NAMED`: a queue far behind is
        // escalated over several rounds rather than in one long burst of writes.
        escalated: store.escalate_tasks(&report.to_escalate, now).await?,
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
            let subject = agreement_subject(queue, agreement);
            round.alerts_raised += u64::from(
                store
                    .raise_alert(ALERT_LOW_AGREEMENT, &subject, &message, now)
                    .await?,
            );
            low_queues.push(subject);
        }
    }
    round.alerts_resolved += store
        .resolve_alerts(ALERT_LOW_AGREEMENT, &low_queues, now)
        .await?;
    // Re-tuning never stops the round: the system's alerts and mail still go out.
    match crate::tuning::tune_policies(store, now).await {
        Ok(tuning) => {
            round.policies_tuned = tuning.retuned + tuning.benched;
            round.alerts_raised += tuning.alerts_raised;
            round.alerts_resolved += tuning.alerts_resolved;
        }
        Err(err) => tracing::warn!(error = %err, "re-tuning failed this round"),
    }
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
        let see = if alert.kind == arbiter_domain::health::ALERT_REGRESSION {
            "See the trends page for the checkpoints, the baseline and the paired tests."
        } else if alert.kind == arbiter_domain::health::ALERT_JUDGE_BENCHED {
            "See the eval's page: its policy history says what changed and the data behind it."
        } else if alert.kind == arbiter_domain::health::ALERT_JUDGE_DRIFT {
            "See the judge's page: its drift report compares it with the previous version on the same items."
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

/// Runs a monitor round every `interval` until `shutdown` turns true.
pub async fn run(
    store: Arc<dyn Store>,
    mailer: Arc<Mailer>,
    interval: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let (store, mailer) = (store.as_ref(), mailer.as_ref());
    crate::jobs::every(interval, shutdown, move || async move {
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
