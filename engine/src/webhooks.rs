//! Webhooks: an HTTP POST to a receiver when a run completes, when an alert opens or
//! resolves, and when humans decide an item (`label.completed`), for chat bots, CI systems,
//! training schedulers and the systems that pushed items to raters.
//!
//! Events are found by scanning the store past each webhook's cursor (so every code path that
//! finishes a run or raises an alert is covered, in any process) and queued in an outbox
//! keyed by (webhook, event), so an event is queued once however many servers scan. Any server
//! delivers: it claims a due delivery, POSTs it with a 10 s timeout, and on failure tries again
//! with exponential backoff (30 s doubling, at most an hour apart) up to 8 attempts. Deliveries
//! may arrive more than once (a crash between sending and recording); receivers should
//! de-duplicate on `X-Arbiter-Delivery`.
//!
//! Signed webhooks carry `X-Arbiter-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
//! "<t>.<body>">` under the secret shown once at creation.

use arbiter_domain::accounts::User;
use arbiter_domain::ids::{RunId, UserId};
use std::collections::HashSet;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::clients::egress::{self, GuardedClient};
use crate::error::{ServiceError, ServiceResult};
use crate::secrets::SecretBox;
use arbiter_domain::annotation::decided::DecidedItem;
use arbiter_domain::health::Alert;
use arbiter_domain::webhooks::{redacted_url, DeliveryRecord, Webhook};
use arbiter_store::{DeliveryAttempt, Store};

pub const EVENT_RUN_COMPLETED: &str = "run.completed";
pub const EVENT_ALERT_RAISED: &str = "alert.raised";
pub const EVENT_ALERT_RESOLVED: &str = "alert.resolved";
/// An item's human outcome was decided (again, when a reviewer changed it): the item, the
/// outcome and every label behind it.
pub const EVENT_LABEL_COMPLETED: &str = "label.completed";
pub const EVENTS: [&str; 4] = [
    EVENT_RUN_COMPLETED,
    EVENT_ALERT_RAISED,
    EVENT_ALERT_RESOLVED,
    EVENT_LABEL_COMPLETED,
];

/// Attempts before a delivery is given up.
pub const MAX_ATTEMPTS: i64 = 8;
const FIRST_RETRY_MS: i64 = 30_000;
const LONGEST_RETRY_MS: i64 = 3_600_000;
/// How long a claimed delivery is this sender's before another may try it.
const CLAIM_MS: i64 = 60_000;
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Events are queued only once they are this old, so that most runs finished by a transaction
/// still committing elsewhere are seen on the first scan.
const SETTLE_MS: i64 = 5_000;
/// Each scan also looks this far behind its cursor, for events stamped before a long commit
/// (a million-item run's completion) became visible; already queued ones are skipped.
const OVERLAP_MS: i64 = 10 * 60_000;
/// Most deliveries one round sends.
const DELIVERIES_PER_ROUND: i64 = 100;
/// Decided items read per page while queueing `label.completed` events.
const DECIDED_PAGE: i64 = 500;

/// Checks and stores a webhook. With `sign`, a secret is made, sealed for the store and
/// returned for the person to copy; signing needs `ARBITER_SECRET_KEY`. Alert and label events
/// (which name raters) go only to webhooks made by those who manage the rater pool
/// (`may_receive_alerts`).
#[allow(clippy::too_many_arguments)]
pub async fn create_webhook(
    store: &dyn Store,
    secrets: &SecretBox,
    url: &str,
    events: &[String],
    sign: bool,
    may_receive_alerts: bool,
    created_by: Option<UserId>,
    now: i64,
) -> ServiceResult<(Webhook, Option<String>)> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ServiceError::Invalid(format!(
            "a webhook URL is http:// or https:// with a host, not `{url}`"
        )));
    }
    crate::clients::egress::process()
        .check_webhook_url(url)
        .map_err(|refusal| ServiceError::Invalid(format!("the webhook URL: {refusal}")))?;
    let mut chosen: Vec<String> = Vec::new();
    for event in events {
        let event = event.trim();
        if !EVENTS.contains(&event) {
            return Err(ServiceError::Invalid(format!(
                "unknown event `{event}`; choose from {}",
                EVENTS.join(", ")
            )));
        }
        if !chosen.iter().any(|known| known == event) {
            chosen.push(event.to_string());
        }
    }
    if chosen.is_empty() {
        return Err(ServiceError::Invalid(
            "choose at least one event to send".into(),
        ));
    }
    if !may_receive_alerts && chosen.iter().any(|event| event != EVENT_RUN_COMPLETED) {
        return Err(ServiceError::Forbidden(
            "alert and label events name raters: only leads and admins may send them to a webhook"
                .into(),
        ));
    }
    let (secret, sealed) = if sign {
        let secret = format!(
            "whsec_{}",
            rand::distributions::DistString::sample_string(
                &rand::distributions::Alphanumeric,
                &mut rand::rngs::OsRng,
                32
            )
        );
        let sealed = secrets.seal(&secret).map_err(|problem| {
            ServiceError::Invalid(format!("cannot sign deliveries: {problem}"))
        })?;
        (Some(secret), Some(sealed))
    } else {
        (None, None)
    };
    let webhook = store
        .create_webhook(url, &chosen, sealed.as_deref(), created_by, now)
        .await?;
    Ok((webhook, secret))
}

/// The webhooks as `viewer` may see them: whole URLs only on the ones they manage (their own,
/// or all for leads and admins), the host alone on the rest.
pub async fn webhooks_seen_by(store: &dyn Store, viewer: &User) -> ServiceResult<Vec<Webhook>> {
    Ok(store
        .webhooks()
        .await?
        .into_iter()
        .map(|mut webhook| {
            if !webhook.managed_by(viewer.id, viewer.role) {
                webhook.url = redacted_url(&webhook.url);
            }
            webhook
        })
        .collect())
}

/// The latest deliveries, their receivers' URLs shown as `webhooks_seen_by` shows them.
pub async fn deliveries_seen_by(
    store: &dyn Store,
    viewer: &User,
    limit: i64,
) -> ServiceResult<Vec<DeliveryRecord>> {
    let managed: HashSet<i64> = store
        .webhooks()
        .await?
        .into_iter()
        .filter(|webhook| webhook.managed_by(viewer.id, viewer.role))
        .map(|webhook| webhook.id)
        .collect();
    Ok(store
        .recent_deliveries(limit)
        .await?
        .into_iter()
        .map(|mut delivery| {
            if !managed.contains(&delivery.webhook_id) {
                delivery.url = redacted_url(&delivery.url);
                // Refusals and transport errors can quote the whole URL.
                if delivery.last_error.is_some() {
                    delivery.last_error = Some(
                        "not delivered (the reason is shown to its creator and the leads)".into(),
                    );
                }
            }
            delivery
        })
        .collect())
}

/// Deletes a webhook with its pending deliveries: only its creator, leads and admins may.
pub async fn delete_webhook(store: &dyn Store, viewer: &User, id: i64) -> ServiceResult<()> {
    let missing = || ServiceError::NotFound(format!("no webhook with id {id}"));
    let webhook = store
        .webhooks()
        .await?
        .into_iter()
        .find(|webhook| webhook.id == id)
        .ok_or_else(missing)?;
    if !webhook.managed_by(viewer.id, viewer.role) {
        return Err(ServiceError::Forbidden(format!(
            "webhook {id} is not yours: only its creator, leads and admins delete it"
        )));
    }
    if store.delete_webhook(id).await? {
        Ok(())
    } else {
        Err(missing())
    }
}

/// The signature header's value for `body` sent at `timestamp` (Unix seconds).
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(format!("{timestamp}.{body}").as_bytes());
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// When to try again after `attempts` failed attempts; `None` to give up.
pub fn retry_delay_ms(attempts: i64) -> Option<i64> {
    (attempts < MAX_ATTEMPTS)
        .then(|| (FIRST_RETRY_MS << (attempts - 1).clamp(0, 20)).min(LONGEST_RETRY_MS))
}

async fn run_payload(store: &dyn Store, run_id: RunId, now: i64) -> ServiceResult<String> {
    let (run, report) = crate::reports::runs::run_report(store, run_id).await?;
    Ok(json!({
        "event": EVENT_RUN_COMPLETED,
        "sent_at": now,
        "run": {
            "id": run.id,
            "eval": run.eval_name,
            "eval_id": run.eval_id,
            "checkpoint": run.checkpoint_name,
            "status": run.status,
            "expected": run.expected,
            "done": run.done,
            "errors": run.errors,
            "scored": run.scored,
            "manifest_hash": run.manifest_hash,
            "finished_at": run.finished_at,
            "path": format!("/runs/{}", run.id),
        },
        "report": {
            "completeness": report.completeness.label(),
            "completed": report.completed,
            "expected": report.expected,
            "pass_rate": report.overall.pass_rate,
            "interval": report.overall.interval,
            "problems": report.explanations(),
            "rolling": report.rolling.as_ref().map(|rolling| json!({
                "documents": rolling.documents,
                "bits_per_byte": rolling.bits_per_byte,
                "word_perplexity": rolling.word_perplexity,
                "byte_perplexity": rolling.byte_perplexity,
            })),
        },
    })
    .to_string())
}

fn decided_payload(item: &DecidedItem, now: i64) -> String {
    json!({
        "event": EVENT_LABEL_COMPLETED,
        "sent_at": now,
        "item": item,
        // A pushed item has no run page; its queue is read back through the API.
        "path": item.run_id.map(|run_id| format!("/runs/{run_id}")),
    })
    .to_string()
}

fn alert_payload(alert: &Alert, event: &str, now: i64) -> String {
    json!({
        "event": event,
        "sent_at": now,
        "alert": {
            "id": alert.id,
            "kind": alert.kind,
            "title": arbiter_domain::health::alert_title(&alert.kind),
            "subject": alert.subject,
            "message": alert.message,
            "created_at": alert.created_at,
            "resolved_at": alert.resolved_at,
        },
    })
    .to_string()
}

/// Queues every event past each webhook's cursor (and in the overlap behind it); returns how
/// many were queued. An event whose payload cannot be built is logged and skipped, never a
/// reason to stop the others.
pub async fn enqueue_new_events(store: &dyn Store, now: i64) -> ServiceResult<u64> {
    let webhooks = store.webhooks().await?;
    if webhooks.is_empty() {
        return Ok(0);
    }
    let upto = now - SETTLE_MS;
    let mut queued = 0;
    for webhook in &webhooks {
        let from = (webhook.cursor_ms - OVERLAP_MS).max(webhook.created_at);
        if from >= upto {
            continue;
        }
        let known: std::collections::HashSet<String> = store
            .webhook_event_keys(webhook.id, now - 2 * OVERLAP_MS - SETTLE_MS)
            .await?
            .into_iter()
            .collect();
        let wants = |event: &str| webhook.events.iter().any(|wanted| wanted == event);
        let mut events: Vec<(&'static str, String, ServiceResult<String>)> = Vec::new();
        if wants(EVENT_RUN_COMPLETED) {
            for run_id in store.runs_finished_between(from, upto).await? {
                let key = format!("{EVENT_RUN_COMPLETED}:{run_id}");
                if !known.contains(&key) {
                    events.push((
                        EVENT_RUN_COMPLETED,
                        key,
                        run_payload(store, run_id, now).await,
                    ));
                }
            }
        }
        if wants(EVENT_ALERT_RAISED) || wants(EVENT_ALERT_RESOLVED) {
            for alert in store.alerts_changed_between(from, upto).await? {
                let in_window = |at: i64| at > from && at <= upto;
                let mut kinds = Vec::new();
                if wants(EVENT_ALERT_RAISED) && in_window(alert.created_at) {
                    kinds.push(EVENT_ALERT_RAISED);
                }
                if wants(EVENT_ALERT_RESOLVED) && alert.resolved_at.is_some_and(in_window) {
                    kinds.push(EVENT_ALERT_RESOLVED);
                }
                for event in kinds {
                    let key = format!("{event}:{}", alert.id);
                    if !known.contains(&key) {
                        events.push((event, key, Ok(alert_payload(&alert, event, now))));
                    }
                }
            }
        }
        for (event, key, payload) in events {
            match payload {
                Ok(payload) => {
                    queued += u64::from(
                        store
                            .enqueue_delivery(webhook.id, event, &key, &payload, now)
                            .await?,
                    );
                }
                Err(err) => {
                    tracing::warn!(webhook = webhook.id, event = %key, error = %err, "webhook event skipped: its payload could not be built");
                }
            }
        }
        // Queued a page at a time: a busy queue decides thousands of items between scans.
        if wants(EVENT_LABEL_COMPLETED) {
            let mut after = (from, i64::MAX);
            loop {
                let page = store.decided_items(after, upto, DECIDED_PAGE).await?;
                let Some(last) = page.last() else { break };
                after = (last.decided_at, last.task_id);
                let full = page.len() as i64 == DECIDED_PAGE;
                for item in page {
                    let key = format!(
                        "{EVENT_LABEL_COMPLETED}:{}:{}",
                        item.task_id, item.decided_at
                    );
                    if !known.contains(&key) {
                        let payload = decided_payload(&item, now);
                        queued += u64::from(
                            store
                                .enqueue_delivery(
                                    webhook.id,
                                    EVENT_LABEL_COMPLETED,
                                    &key,
                                    &payload,
                                    now,
                                )
                                .await?,
                        );
                    }
                }
                if !full {
                    break;
                }
            }
        }
        store.set_webhook_cursor(webhook.id, upto).await?;
    }
    Ok(queued)
}

/// What one delivery round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryRound {
    pub queued: u64,
    pub delivered: u64,
    pub failed_attempts: u64,
    pub given_up: u64,
}

/// Queues new events, then sends every due delivery once.
pub async fn deliver_due(
    store: &dyn Store,
    secrets: &SecretBox,
    http: &GuardedClient,
    now: i64,
) -> ServiceResult<DeliveryRound> {
    let mut round = DeliveryRound {
        queued: enqueue_new_events(store, now).await?,
        ..DeliveryRound::default()
    };
    let due = store.due_deliveries(now, DELIVERIES_PER_ROUND).await?;
    if due.is_empty() {
        return Ok(round);
    }
    let webhooks = store.webhooks().await?;
    let round_started = std::time::Instant::now();
    for delivery in due {
        // A round may take minutes (100 deliveries at up to 10 s): each delivery's lease,
        // signature time and backoff count from its own moment, not the round's start.
        let now = now + round_started.elapsed().as_millis() as i64;
        if !store
            .claim_delivery(delivery.id, delivery.next_attempt_at, now + CLAIM_MS)
            .await?
        {
            continue;
        }
        let Some(webhook) = webhooks
            .iter()
            .find(|webhook| webhook.id == delivery.webhook_id)
        else {
            continue;
        };
        let request = match http.post_webhook(&webhook.url) {
            Ok(request) => request,
            // Refused by the egress policy: retrying cannot help.
            Err(refusal) => {
                round.given_up += 1;
                store
                    .finish_delivery(
                        delivery.id,
                        &DeliveryAttempt {
                            delivered: false,
                            status: None,
                            error: Some(format!("not sent: {refusal}")),
                            retry_at: None,
                        },
                        now,
                    )
                    .await?;
                continue;
            }
        };
        let mut request = request
            .timeout(SEND_TIMEOUT)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::USER_AGENT, "Arbiter-Webhook/1")
            .header("X-Arbiter-Event", &delivery.event)
            .header("X-Arbiter-Delivery", delivery.id.to_string())
            .body(delivery.payload.clone());
        let mut refusal = None;
        match secrets.resolve(webhook.secret_ref.as_deref()) {
            Ok(Some(secret)) => {
                request = request.header(
                    "X-Arbiter-Signature",
                    signature(&secret, now / 1_000, &delivery.payload),
                );
            }
            Ok(None) => {}
            // Never send a signed webhook unsigned.
            Err(problem) => refusal = Some(format!("not sent: {problem}")),
        }
        let (status, error) = match refusal {
            Some(problem) => (None, Some(problem)),
            None => match request.send().await {
                Ok(response) if response.status().is_success() => {
                    (Some(i64::from(response.status().as_u16())), None)
                }
                Ok(response) => (
                    Some(i64::from(response.status().as_u16())),
                    Some(format!(
                        "the receiver answered HTTP {}",
                        response.status().as_u16()
                    )),
                ),
                Err(err) => match egress::refusal_in(&err) {
                    Some(refusal) => (None, Some(format!("not sent: {refusal}"))),
                    None if err.is_timeout() => (
                        None,
                        Some("the receiver did not answer in time".to_string()),
                    ),
                    None => (None, Some("could not reach the receiver".to_string())),
                },
            },
        };
        let delivered = error.is_none();
        let attempts = delivery.attempts + 1;
        let retry_at = if delivered {
            None
        } else {
            retry_delay_ms(attempts).map(|delay| now + delay)
        };
        if delivered {
            round.delivered += 1;
        } else if retry_at.is_some() {
            round.failed_attempts += 1;
        } else {
            round.given_up += 1;
            tracing::warn!(
                webhook = webhook.id,
                delivery = delivery.id,
                "webhook delivery given up after {attempts} attempts"
            );
        }
        store
            .finish_delivery(
                delivery.id,
                &DeliveryAttempt {
                    delivered,
                    status,
                    error,
                    retry_at,
                },
                now,
            )
            .await?;
    }
    Ok(round)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_follow_the_documented_recipe() {
        // HMAC-SHA256(key = "key", "1700000000.{}") computed independently with Python's hmac.
        let header = signature("key", 1_700_000_000, "{}");
        assert_eq!(
            header,
            "t=1700000000,v1=9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae"
        );
        assert_ne!(signature("key", 1_700_000_000, "{ }"), header);
        assert_ne!(signature("other", 1_700_000_000, "{}"), header);
    }

    #[test]
    fn retries_back_off_to_an_hour_and_stop_after_eight_attempts() {
        assert_eq!(retry_delay_ms(1), Some(30_000));
        assert_eq!(retry_delay_ms(2), Some(60_000));
        assert_eq!(retry_delay_ms(7), Some(1_920_000));
        assert_eq!(retry_delay_ms(8), None);
        assert!((1..8).all(|attempts| retry_delay_ms(attempts).unwrap() <= 3_600_000));
    }
}
