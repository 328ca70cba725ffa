//! Live system health for the platform team: queue depth and its trend, answer latency and
//! errors, spending per eval and team, endpoint saturation, workers, raters and SLAs — the
//! figures of the health page and of `/metrics` — and the monitor step that turns them into
//! alerts under editable rules.

use arbiter_domain::health::rules;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::annotation::queue::{queue_report, QueueReport};
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::health::results_objective::{attainment, SuiteDelivery, TierAttainment};
use arbiter_domain::health::{
    Alert, AnswerWindow, CostRow, EndpointLoad, HealthSample, WorkerStatus,
};
use arbiter_store::Store;
use rules::{evaluate, AlertRules, RuleInputs, RuleTexts, RULE_KINDS};

/// Bucket edges of answer latency, in milliseconds: fine enough that percentiles read from
/// them are within a bucket's width, and with the default 30 s threshold as an edge.
/// Every edge of the report's latency chart is one of these, so the page can draw that chart.
pub const LATENCY_EDGES_MS: [i64; 29] = [
    25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750, 1_000, 1_500, 2_000, 3_000, 4_000, 5_000,
    7_500, 10_000, 15_000, 20_000, 25_000, 30_000, 45_000, 60_000, 90_000, 120_000, 300_000,
    600_000,
];

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Samples kept for the page's charts and trend rules.
const SAMPLES_KEPT_MS: i64 = 7 * DAY_MS;
/// Samples the page charts.
const SAMPLES_SHOWN_MS: i64 = DAY_MS;
/// A worker whose last heartbeat is older than this is not counted live.
pub const WORKER_LIVE_MS: i64 = 60_000;

/// Everything the health page and `/metrics` show.
#[derive(Clone, Debug, Serialize)]
pub struct SystemHealth {
    pub now: i64,
    pub backend: String,
    /// Identities of running runs not claimed yet, and those claimed by workers.
    pub queue_depth: i64,
    pub claimed: i64,
    /// Change of the queue over the last hour of samples, per hour (`None` before an hour
    /// of samples).
    pub queue_change_per_hour: Option<f64>,
    /// The last hour's answers.
    pub last_hour: AnswerWindow,
    pub error_rate: Option<f64>,
    pub p50_latency_ms: Option<f64>,
    pub p99_latency_ms: Option<f64>,
    /// Spending over the last 24 hours per eval and team, largest first.
    pub costs_last_day: Vec<CostRow>,
    pub cost_last_day_usd: f64,
    /// (team, spending over the last 24 hours), largest first.
    pub cost_by_team: Vec<(String, f64)>,
    pub endpoints: Vec<EndpointLoad>,
    pub workers: Vec<WorkerStatus>,
    pub live_workers: usize,
    /// Share of the human queue's needed hours that raters' capacity covers.
    pub rater_availability: Option<f64>,
    pub rater_capacity_hours_per_week: f64,
    pub rater_needed_hours_per_week: Option<f64>,
    pub human_backlog_tasks: u64,
    pub sla_attainment_7d: Option<f64>,
    pub sla_breached: u64,
    pub sla_at_risk: u64,
    /// (queue, Krippendorff's alpha over the last week) where defined.
    pub agreement: Vec<(String, f64)>,
    pub agreement_floor: f64,
    /// The last day of monitor samples, oldest first.
    pub samples: Vec<HealthSample>,
    /// Suites on the last week's checkpoints, and each tier's time-to-results attainment.
    pub deliveries: Vec<SuiteDelivery>,
    pub results: Vec<TierAttainment>,
    pub rules: AlertRules,
    pub alerts: Vec<Alert>,
}

/// The latency below which `quantile` of the answers fall, read from bucket counts over
/// [`LATENCY_EDGES_MS`] with linear interpolation inside the bucket; `None` without answers.
/// Above the last edge it answers the last edge (a lower bound).
pub fn quantile_from_buckets(buckets: &[i64], quantile: f64) -> Option<f64> {
    let total: i64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let target = quantile.clamp(0.0, 1.0) * total as f64;
    let mut below = 0.0;
    for (index, &count) in buckets.iter().enumerate() {
        let count = count as f64;
        if count > 0.0 && below + count >= target {
            let low = if index == 0 {
                0
            } else {
                LATENCY_EDGES_MS[index - 1]
            } as f64;
            let Some(&high) = LATENCY_EDGES_MS.get(index) else {
                return Some(low);
            };
            let share = ((target - below) / count).clamp(0.0, 1.0);
            return Some(low + share * (high as f64 - low));
        }
        below += count;
    }
    None
}

/// Folds counts over [`LATENCY_EDGES_MS`] into the report chart's coarser buckets
/// ([`arbiter_domain::reports::latency::LATENCY_EDGES_MS`], all of whose edges are among ours).
pub fn chart_buckets(buckets: &[i64]) -> Vec<u64> {
    use arbiter_domain::reports::latency::{latency_bucket, LATENCY_BUCKETS};
    let mut folded = vec![0_u64; LATENCY_BUCKETS];
    for (index, count) in buckets.iter().enumerate() {
        let lower = if index == 0 {
            0
        } else {
            LATENCY_EDGES_MS[index - 1]
        };
        folded[latency_bucket(lower)] += (*count).max(0) as u64;
    }
    folded
}

/// Least-squares slope of queue depth over the last hour of samples (oldest first), per hour.
fn queue_change_per_hour(samples: &[HealthSample], now: i64) -> Option<f64> {
    let window = &samples[samples.partition_point(|sample| sample.taken_at <= now - HOUR_MS)..];
    let span = window.last()?.taken_at - window.first()?.taken_at;
    if window.len() < 3 || span < HOUR_MS / 2 {
        return None;
    }
    rules::queue_slope(window).map(|per_ms| per_ms * HOUR_MS as f64)
}

/// The alert rules as stored (defaults where unset).
pub async fn alert_rules(store: &dyn Store) -> ServiceResult<AlertRules> {
    let mut stored = BTreeMap::new();
    for (name, _) in AlertRules::default().settings() {
        if let Some(value) = store.setting(name).await? {
            stored.insert(name, value);
        }
    }
    Ok(AlertRules::from_settings(|name| stored.get(name).cloned()))
}

/// Stores new thresholds: all of them or, when any is invalid, none.
pub async fn set_alert_rules(store: &dyn Store, texts: &RuleTexts) -> ServiceResult<AlertRules> {
    let rules = AlertRules::parse(texts).map_err(ServiceError::Invalid)?;
    store.set_settings(&rules.settings()).await?;
    invalidate_cache();
    Ok(rules)
}

/// Reads every figure at `now`, with the queue report the monitor already made.
pub async fn system_health_with(
    store: &dyn Store,
    now: i64,
    report: &QueueReport,
) -> ServiceResult<SystemHealth> {
    let (queue_depth, claimed) = store.queue_depth().await?;
    let last_hour = store
        .answer_window(now - HOUR_MS, &LATENCY_EDGES_MS)
        .await?;
    let mut costs_last_day = store.costs_since(now - DAY_MS).await?;
    costs_last_day
        .sort_by(|a, b| (b.answer_usd + b.judge_usd).total_cmp(&(a.answer_usd + a.judge_usd)));
    let mut by_team: BTreeMap<String, f64> = BTreeMap::new();
    for row in &costs_last_day {
        *by_team.entry(row.team.clone()).or_default() += row.answer_usd + row.judge_usd;
    }
    let mut cost_by_team: Vec<(String, f64)> = by_team.into_iter().collect();
    cost_by_team.sort_by(|a, b| b.1.total_cmp(&a.1));
    let workers = store.worker_statuses().await?;
    let samples = store.health_samples(now - SAMPLES_SHOWN_MS).await?;
    let rules = alert_rules(store).await?;
    let deliveries = store.suite_deliveries(now - 7 * DAY_MS).await?;
    let results = attainment(&deliveries, &rules.results_targets(), now);
    // A queue's verdict agreement; its dimensions are on the Queue page.
    let agreement = report
        .queues
        .iter()
        .filter(|(_, agreement)| agreement.dimension == crate::annotation::agreement::VERDICT)
        .filter_map(|(queue, agreement)| match agreement.alpha.statistic {
            arbiter_domain::annotation::agreement::Statistic::Defined(alpha) => {
                Some((queue.clone(), alpha))
            }
            arbiter_domain::annotation::agreement::Statistic::Undefined { .. } => None,
        })
        .collect();
    Ok(SystemHealth {
        now,
        backend: store.backend().to_string(),
        queue_depth,
        claimed,
        queue_change_per_hour: queue_change_per_hour(&samples, now),
        error_rate: (last_hour.answers > 0)
            .then(|| last_hour.errors as f64 / last_hour.answers as f64),
        p50_latency_ms: quantile_from_buckets(&last_hour.latency_buckets, 0.5),
        p99_latency_ms: quantile_from_buckets(&last_hour.latency_buckets, 0.99),
        last_hour,
        cost_last_day_usd: cost_by_team.iter().map(|(_, usd)| usd).sum(),
        cost_by_team,
        costs_last_day,
        endpoints: store.endpoint_loads().await?,
        live_workers: workers
            .iter()
            .filter(|worker| worker.heartbeat_at > now - WORKER_LIVE_MS)
            .count(),
        workers,
        rater_availability: report.availability.covered,
        rater_capacity_hours_per_week: report.availability.capacity_hours_per_week,
        rater_needed_hours_per_week: report.availability.needed_hours_per_week,
        human_backlog_tasks: report.backlog_tasks,
        sla_attainment_7d: report.attainment_7d,
        sla_breached: report.breached,
        sla_at_risk: report.at_risk,
        agreement,
        agreement_floor: report.agreement_floor,
        samples,
        deliveries,
        results,
        rules,
        alerts: report.alerts.clone(),
    })
}

/// Reads every figure at `now`.
pub async fn system_health(store: &dyn Store, now: i64) -> ServiceResult<SystemHealth> {
    let report = queue_report(store, now, false).await?;
    system_health_with(store, now, &report).await
}

/// How long the page and `/metrics` reuse one reading: scrapers and open pages then cost the
/// database one set of queries per interval, however many there are.
const CACHE_FOR: Duration = Duration::from_secs(10);

type Cached = Option<(usize, Instant, Arc<SystemHealth>)>;

fn cache() -> &'static Mutex<Cached> {
    static CACHE: OnceLock<Mutex<Cached>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(None))
}

fn invalidate_cache() {
    if let Ok(mut cached) = cache().lock() {
        *cached = None;
    }
}

/// [`system_health`], reused for up to ten seconds per store.
pub async fn system_health_cached(store: &Arc<dyn Store>) -> ServiceResult<Arc<SystemHealth>> {
    let key = Arc::as_ptr(store) as *const () as usize;
    if let Ok(cached) = cache().lock() {
        if let Some((cached_key, at, health)) = cached.as_ref() {
            if *cached_key == key && at.elapsed() < CACHE_FOR {
                return Ok(health.clone());
            }
        }
    }
    let health = Arc::new(system_health(store.as_ref(), arbiter_store::now_ms()).await?);
    if let Ok(mut cached) = cache().lock() {
        *cached = Some((key, Instant::now(), health.clone()));
    }
    Ok(health)
}

/// What one monitor step did with the system rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulesRound {
    pub raised: u64,
    pub resolved: u64,
}

/// One monitor step: keeps a sample of the figures, raises the alerts the rules call for and
/// resolves the rest (the monitor emails new ones to the leads afterwards).
pub async fn check_rules(
    store: &dyn Store,
    now: i64,
    report: &QueueReport,
) -> ServiceResult<RulesRound> {
    let mut health = system_health_with(store, now, report).await?;
    let sample = HealthSample {
        taken_at: now,
        queue_depth: health.queue_depth,
        claimed: health.claimed,
        answers_last_hour: health.last_hour.answers,
        errors_last_hour: health.last_hour.errors,
        p99_latency_ms: health.p99_latency_ms.map(|ms| ms.round() as i64),
        live_workers: health.live_workers as i64,
    };
    store
        .record_health_sample(&sample, now - SAMPLES_KEPT_MS)
        .await?;
    // The trend rule reads the day of samples already read for the page, and this round's;
    // only a growth period longer than that day needs the older ones from the store.
    let longest = health.rules.queue_growth_minutes.unwrap_or(0) * 60_000;
    let samples = if longest + 5 * 60_000 > SAMPLES_SHOWN_MS {
        store.health_samples(now - longest - 5 * 60_000).await?
    } else {
        let mut samples = std::mem::take(&mut health.samples);
        // A round at the very same millisecond kept nothing new (the store ignores it).
        if samples.last().is_none_or(|last| last.taken_at < now) {
            samples.push(sample);
        }
        samples
    };
    let workers: Vec<(String, i64)> = health
        .workers
        .iter()
        .map(|worker| (worker.name.clone(), worker.heartbeat_at))
        .collect();
    let firing = evaluate(
        &health.rules,
        &RuleInputs {
            now,
            answers_last_hour: health.last_hour.answers,
            errors_last_hour: health.last_hour.errors,
            top_errors: &health.last_hour.errors_by_category,
            p99_latency_ms: health.p99_latency_ms,
            cost_last_day_usd: health.cost_last_day_usd,
            top_spenders: &health.cost_by_team,
            rater_availability: health.rater_availability,
            samples: &samples,
            workers: &workers,
            deliveries: &health.deliveries,
        },
    );
    let mut round = RulesRound::default();
    for kind in RULE_KINDS {
        let mut open = Vec::new();
        for fired in firing.iter().filter(|fired| fired.kind == kind) {
            round.raised += u64::from(
                store
                    .raise_alert(kind, &fired.subject, &fired.message, now)
                    .await?,
            );
            open.push(fired.subject.clone());
        }
        round.resolved += store.resolve_alerts(kind, &open, now).await?;
    }
    invalidate_cache();
    Ok(round)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let mut buckets = vec![0_i64; LATENCY_EDGES_MS.len() + 1];
        assert_eq!(quantile_from_buckets(&buckets, 0.5), None);
        // 100 answers between 100 and 150 ms: the median is halfway.
        buckets[4] = 100;
        assert_eq!((LATENCY_EDGES_MS[3], LATENCY_EDGES_MS[4]), (100, 150));
        assert_eq!(quantile_from_buckets(&buckets, 0.5), Some(125.0));
        // Two answers of 100 over 30 s: p99 falls in the 30–45 s bucket.
        buckets[23] = 2;
        let p99 = quantile_from_buckets(&buckets, 0.99).unwrap();
        assert!((30_000.0..45_000.0).contains(&p99), "{p99}");
        // Beyond the last edge only a lower bound is known.
        let mut slow = vec![0_i64; LATENCY_EDGES_MS.len() + 1];
        *slow.last_mut().unwrap() = 5;
        assert_eq!(quantile_from_buckets(&slow, 0.99), Some(600_000.0));
    }

    #[test]
    fn fine_buckets_fold_exactly_into_the_chart_buckets() {
        for edge in arbiter_domain::reports::latency::LATENCY_EDGES_MS {
            assert!(LATENCY_EDGES_MS.contains(&edge), "{edge}");
        }
        let mut fine = vec![0_i64; LATENCY_EDGES_MS.len() + 1];
        fine[0] = 1; // < 25 ms
        fine[6] = 2; // 200–250 ms
        fine[7] = 3; // 250–300 ms
        *fine.last_mut().unwrap() = 4; // ≥ 600 s
        let folded = chart_buckets(&fine);
        assert_eq!(folded[0], 1); // < 100 ms
        assert_eq!(folded[1], 2); // 100–250 ms
        assert_eq!(folded[2], 3); // 250–500 ms
        assert_eq!(*folded.last().unwrap(), 4); // ≥ 120 s
        assert_eq!(folded.iter().sum::<u64>(), 10);
    }

    #[test]
    fn the_queue_trend_is_a_slope_per_hour() {
        let now = 1_800_000_000_000;
        let samples: Vec<HealthSample> = (0..60)
            .map(|minute| HealthSample {
                taken_at: now - (59 - minute) * 60_000,
                queue_depth: 1_000 + minute * 10,
                claimed: 0,
                answers_last_hour: 0,
                errors_last_hour: 0,
                p99_latency_ms: None,
                live_workers: 1,
            })
            .collect();
        let slope = queue_change_per_hour(&samples, now).unwrap();
        assert!((slope - 600.0).abs() < 1e-6, "{slope}");
        assert_eq!(queue_change_per_hour(&samples[50..], now), None);
    }
}
