//! `GET /metrics`: the health page's figures in Prometheus' text format, for scraping into
//! Prometheus or Grafana and alerting there as well as here.
//!
//! The figures describe the whole deployment (read from the shared store), so any one
//! `arbiter serve` answers for all workers. A scrape needs either a personal API token of a
//! role that may view results, or the deployment's `ARBITER_METRICS_TOKEN`; both go in
//! `Authorization: Bearer …` (Prometheus' `authorization` scrape setting).

use crate::http::rest::{ApiError, ApiUser};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_engine::health::{system_health_cached, SystemHealth};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Compares without an early exit, so response times do not reveal a prefix of the secret.
fn same_secret(presented: &str, expected: &str) -> bool {
    presented.len() == expected.len()
        && presented
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

async fn authorised(parts: &mut Parts, state: &AppState) -> Result<(), ApiError> {
    if let Ok(secret) = std::env::var("ARBITER_METRICS_TOKEN") {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(arbiter_engine::accounts::api_tokens::bearer_token);
        if !secret.is_empty() && presented.is_some_and(|token| same_secret(token, &secret)) {
            return Ok(());
        }
    }
    ApiUser::from_request_parts(parts, state)
        .await?
        .require(Permission::ViewResults)
        .map(|_| ())
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let gauge = FloatGauge::default();
    gauge.set(value);
    registry.register(name, help, gauge);
}

fn family(
    registry: &mut Registry,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, f64)>,
) {
    let family = Family::<Labels, FloatGauge>::default();
    for (labels, value) in rows {
        family.get_or_create(&labels).set(value);
    }
    registry.register(name, help, family);
}

/// A label value escaped as the exposition format requires (the client library writes values
/// as given), so that a team or eval name with a quote or a line break cannot break the
/// scrape or forge a series.
fn escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), escaped(value)))
        .collect()
}

/// The figures as Prometheus text.
pub fn render(health: &SystemHealth) -> String {
    let mut registry = Registry::with_prefix("arbiter");
    let r = &mut registry;
    gauge(
        r,
        "queue_depth",
        "Identities of running runs waiting to be claimed",
        health.queue_depth as f64,
    );
    gauge(
        r,
        "queue_claimed",
        "Identities claimed by workers (in flight or next)",
        health.claimed as f64,
    );
    if let Some(change) = health.queue_change_per_hour {
        gauge(
            r,
            "queue_change_per_hour",
            "Least-squares change of the queue depth over the last hour, per hour",
            change,
        );
    }
    gauge(
        r,
        "answers_last_hour",
        "Model answers in the last hour (cache hits excluded)",
        health.last_hour.answers as f64,
    );
    family(
        r,
        "answer_errors_last_hour",
        "Answers that ended as endpoint errors or timeouts in the last hour, by category",
        health
            .last_hour
            .errors_by_category
            .iter()
            .map(|(category, count)| (label(&[("category", category)]), *count as f64)),
    );
    if let Some(rate) = health.error_rate {
        gauge(
            r,
            "error_rate_last_hour",
            "Share of the last hour's answers that failed",
            rate,
        );
    }
    family(
        r,
        "answer_latency_seconds",
        "Answer latency over the last hour (including retries), estimated from buckets",
        [
            ("0.5", health.p50_latency_ms),
            ("0.99", health.p99_latency_ms),
        ]
        .into_iter()
        .filter_map(|(quantile, ms)| Some((label(&[("quantile", quantile)]), ms? / 1_000.0))),
    );
    family(
        r,
        "cost_usd_last_day",
        "Spending over the last 24 hours by eval, team and kind of call",
        health.costs_last_day.iter().flat_map(|row| {
            [("answers", row.answer_usd), ("judges", row.judge_usd)]
                .into_iter()
                .map(|(kind, usd)| {
                    (
                        label(&[
                            ("eval", &row.eval_name),
                            ("team", &row.team),
                            ("kind", kind),
                        ]),
                        usd,
                    )
                })
        }),
    );
    let endpoint =
        |load: &arbiter_domain::health::EndpointLoad| label(&[("endpoint", &load.base_url)]);
    family(
        r,
        "endpoint_claimed",
        "Identities claimed for each endpoint",
        health
            .endpoints
            .iter()
            .map(|load| (endpoint(load), load.claimed as f64)),
    );
    family(
        r,
        "endpoint_in_flight_limit",
        "Each endpoint's in-flight limit, for all workers together",
        health
            .endpoints
            .iter()
            .map(|load| (endpoint(load), load.max_in_flight as f64)),
    );
    family(
        r,
        "endpoint_requests_waiting",
        "Requests waiting in the endpoint's own queue (vLLM), as last read",
        health
            .endpoints
            .iter()
            .filter_map(|load| Some((endpoint(load), load.server_waiting?))),
    );
    family(
        r,
        "endpoint_requests_running",
        "Requests running on the endpoint (vLLM), as last read",
        health
            .endpoints
            .iter()
            .filter_map(|load| Some((endpoint(load), load.server_running?))),
    );
    gauge(
        r,
        "workers_live",
        "Worker processes with a heartbeat in the last minute",
        health.live_workers as f64,
    );
    family(
        r,
        "worker_heartbeat_age_seconds",
        "Seconds since each worker's last heartbeat",
        health.workers.iter().map(|worker| {
            (
                label(&[("worker", &worker.name)]),
                (health.now - worker.heartbeat_at) as f64 / 1_000.0,
            )
        }),
    );
    family(
        r,
        "worker_in_flight",
        "Identities each worker holds",
        health
            .workers
            .iter()
            .map(|worker| (label(&[("worker", &worker.name)]), worker.in_flight as f64)),
    );
    if let Some(covered) = health.rater_availability {
        gauge(
            r,
            "rater_availability",
            "Share of the human queue's needed hours that raters' capacity covers",
            covered,
        );
    }
    gauge(
        r,
        "human_backlog_tasks",
        "Open human annotation tasks",
        health.human_backlog_tasks as f64,
    );
    if let Some(attainment) = health.sla_attainment_7d {
        gauge(
            r,
            "sla_attainment_7d",
            "Share of human tasks finished within their SLA over 7 days",
            attainment,
        );
    }
    gauge(
        r,
        "sla_breached_tasks",
        "Open human tasks past their SLA deadline",
        health.sla_breached as f64,
    );
    gauge(
        r,
        "sla_at_risk_tasks",
        "Open human tasks forecast to miss their SLA",
        health.sla_at_risk as f64,
    );
    family(
        r,
        "agreement_alpha",
        "Krippendorff's alpha between raters over the last week, by queue",
        health
            .agreement
            .iter()
            .map(|(queue, alpha)| (label(&[("queue", queue)]), *alpha)),
    );
    let mut open: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for alert in health
        .alerts
        .iter()
        .filter(|alert| alert.resolved_at.is_none())
    {
        *open.entry(alert.kind.as_str()).or_default() += 1.0;
    }
    family(
        r,
        "alerts_open",
        "Open alerts by kind",
        open.into_iter()
            .map(|(kind, count)| (label(&[("kind", kind)]), count)),
    );
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

pub async fn metrics(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let (mut parts, _) = request.into_parts();
    if let Err(refused) = authorised(&mut parts, &state).await {
        return refused.into_response();
    }
    match system_health_cached(&state.store).await {
        Ok(health) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            render(&health),
        )
            .into_response(),
        Err(err) => ApiError::new(
            StatusCode::from_u16(err.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            err.to_string(),
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_cannot_break_the_exposition_format() {
        assert_eq!(escaped(r#"a"b"#), r#"a\"b"#);
        assert_eq!(escaped("a\nb"), "a\\nb");
        assert_eq!(escaped(r"a\b"), r"a\\b");
        let rendered = {
            let mut registry = Registry::default();
            family(
                &mut registry,
                "cost",
                "spending",
                [(label(&[("team", "x\"} 1\nforged_metric 99\n")]), 1.0)],
            );
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            text
        };
        assert!(
            !rendered
                .lines()
                .any(|line| line.starts_with("forged_metric")),
            "{rendered}"
        );
    }
}
