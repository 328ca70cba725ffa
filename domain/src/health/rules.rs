//! Alert rules over the system's health: their editable thresholds, and which fire for a given
//! set of figures. Pure: the monitor reads the figures and keeps the alerts.

use serde::{Deserialize, Serialize};

use crate::health::results_objective::{self, SuiteDelivery, Targets};
use crate::health::HealthSample;

pub const ALERT_QUEUE_GROWING: &str = "queue_growing";
pub const ALERT_ERROR_RATE: &str = "error_rate";
pub const ALERT_P99_LATENCY: &str = "p99_latency";
pub const ALERT_DAILY_COST: &str = "daily_cost";
pub const ALERT_RATER_AVAILABILITY: &str = "rater_availability";
pub const ALERT_WORKER_SILENT: &str = "worker_silent";
/// A suite whose pace will not deliver its results within its tier's target.
pub const ALERT_RESULTS_AT_RISK: &str = "results_at_risk";
/// A suite still running past its tier's target.
pub const ALERT_RESULTS_LATE: &str = "results_late";

/// Every rule kind this module raises.
pub const RULE_KINDS: [&str; 8] = [
    ALERT_QUEUE_GROWING,
    ALERT_ERROR_RATE,
    ALERT_P99_LATENCY,
    ALERT_DAILY_COST,
    ALERT_RATER_AVAILABILITY,
    ALERT_WORKER_SILENT,
    ALERT_RESULTS_AT_RISK,
    ALERT_RESULTS_LATE,
];

/// The thresholds, each `None` when its rule is switched off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertRules {
    /// The queue of identities grew, without draining, for at least this many minutes.
    pub queue_growth_minutes: Option<i64>,
    /// Share of the last hour's answers that were endpoint errors or timeouts.
    pub max_error_rate: Option<f64>,
    /// The last hour's 99th percentile of answer latency, in seconds.
    pub max_p99_latency_s: Option<f64>,
    /// Spending over the last 24 hours (model and judge calls), in US dollars.
    pub daily_budget_usd: Option<f64>,
    /// Share of the human queue's needed hours that active raters' capacity covers.
    pub min_rater_availability: Option<f64>,
    /// A worker silent this many seconds (without having said goodbye) is reported lost.
    pub worker_silence_s: Option<i64>,
    /// Time to results: a smoke suite's and a full suite's target from the checkpoint's
    /// registration to its results, in hours.
    pub smoke_results_hours: Option<f64>,
    pub full_results_hours: Option<f64>,
    /// Rates (errors, latency) are judged only over at least this many answers, so one
    /// failure in three answers does not page anyone.
    pub min_answers: i64,
}

impl Default for AlertRules {
    fn default() -> AlertRules {
        AlertRules {
            queue_growth_minutes: Some(60),
            max_error_rate: Some(0.05),
            max_p99_latency_s: Some(30.0),
            daily_budget_usd: Some(1_000.0),
            min_rater_availability: Some(0.6),
            worker_silence_s: Some(180),
            smoke_results_hours: Some(1.0),
            full_results_hours: Some(8.0),
            min_answers: 50,
        }
    }
}

/// The settings rows the rules are kept in (names of the `settings` table).
pub const SETTING_QUEUE_GROWTH: &str = "alert_queue_growth_minutes";
pub const SETTING_ERROR_RATE: &str = "alert_max_error_rate";
pub const SETTING_P99_LATENCY: &str = "alert_max_p99_latency_s";
pub const SETTING_DAILY_BUDGET: &str = "alert_daily_budget_usd";
pub const SETTING_RATER_AVAILABILITY: &str = "alert_min_rater_availability";
pub const SETTING_WORKER_SILENCE: &str = "alert_worker_silence_s";
pub const SETTING_MIN_ANSWERS: &str = "alert_min_answers";
pub const SETTING_SMOKE_RESULTS: &str = "objective_smoke_results_hours";
pub const SETTING_FULL_RESULTS: &str = "objective_full_results_hours";

/// A threshold as typed: '' or `off` switches the rule off.
fn parse_threshold(text: &str, what: &str, low: f64, high: f64) -> Result<Option<f64>, String> {
    let text = text.trim();
    if text.is_empty() || text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match text.trim_end_matches('%').parse::<f64>() {
        // A share may be typed as a percentage.
        Ok(value) if text.ends_with('%') && (low..=high).contains(&(value / 100.0)) => {
            Ok(Some(value / 100.0))
        }
        Ok(value) if !text.ends_with('%') && (low..=high).contains(&value) => Ok(Some(value)),
        _ => Err(format!(
            "{what} must be a number from {low} to {high} (or empty to switch the rule off), not `{text}`"
        )),
    }
}

/// The rules' values as typed into the form (or stored), in field order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleTexts {
    pub queue_growth_minutes: String,
    pub max_error_rate: String,
    pub max_p99_latency_s: String,
    pub daily_budget_usd: String,
    pub min_rater_availability: String,
    pub worker_silence_s: String,
    #[serde(default)]
    pub smoke_results_hours: String,
    #[serde(default)]
    pub full_results_hours: String,
    pub min_answers: String,
}

impl AlertRules {
    /// Checks typed thresholds; every mistake is named, and nothing is half-applied.
    pub fn parse(texts: &RuleTexts) -> Result<AlertRules, String> {
        let whole = |value: Option<f64>| value.map(|value| value.round() as i64);
        let min_answers = match texts.min_answers.trim() {
            "" => AlertRules::default().min_answers,
            text => text
                .parse::<i64>()
                .ok()
                .filter(|count| (1..=1_000_000).contains(count))
                .ok_or_else(|| {
                    format!("the minimum number of answers must be a whole number from 1 to 1000000, not `{text}`")
                })?,
        };
        Ok(AlertRules {
            queue_growth_minutes: whole(parse_threshold(
                &texts.queue_growth_minutes,
                "the queue growth period (minutes)",
                5.0,
                10_080.0,
            )?),
            max_error_rate: parse_threshold(&texts.max_error_rate, "the error rate", 0.0, 1.0)?,
            max_p99_latency_s: parse_threshold(
                &texts.max_p99_latency_s,
                "the p99 latency (seconds)",
                0.1,
                3_600.0,
            )?,
            daily_budget_usd: parse_threshold(
                &texts.daily_budget_usd,
                "the daily budget (USD)",
                0.0,
                10_000_000.0,
            )?,
            min_rater_availability: parse_threshold(
                &texts.min_rater_availability,
                "the rater availability",
                0.0,
                1.0,
            )?,
            worker_silence_s: whole(parse_threshold(
                &texts.worker_silence_s,
                "the worker silence (seconds)",
                10.0,
                3_000.0,
            )?),
            smoke_results_hours: parse_threshold(
                &texts.smoke_results_hours,
                "the smoke suites' time to results (hours)",
                0.05,
                720.0,
            )?,
            full_results_hours: parse_threshold(
                &texts.full_results_hours,
                "the full suites' time to results (hours)",
                0.05,
                720.0,
            )?,
            min_answers,
        })
    }

    /// The rules as form texts (and stored settings): '' for a rule switched off.
    pub fn texts(&self) -> RuleTexts {
        let text = |value: Option<f64>| value.map(|value| value.to_string()).unwrap_or_default();
        RuleTexts {
            queue_growth_minutes: text(self.queue_growth_minutes.map(|v| v as f64)),
            max_error_rate: text(self.max_error_rate),
            max_p99_latency_s: text(self.max_p99_latency_s),
            daily_budget_usd: text(self.daily_budget_usd),
            min_rater_availability: text(self.min_rater_availability),
            worker_silence_s: text(self.worker_silence_s.map(|v| v as f64)),
            smoke_results_hours: text(self.smoke_results_hours),
            full_results_hours: text(self.full_results_hours),
            min_answers: self.min_answers.to_string(),
        }
    }

    /// (setting name, value) pairs to store.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let texts = self.texts();
        // A switched-off rule is stored as `off`, so that it is not mistaken for "never set".
        let stored = |text: String| {
            if text.is_empty() {
                "off".to_string()
            } else {
                text
            }
        };
        vec![
            (SETTING_QUEUE_GROWTH, stored(texts.queue_growth_minutes)),
            (SETTING_ERROR_RATE, stored(texts.max_error_rate)),
            (SETTING_P99_LATENCY, stored(texts.max_p99_latency_s)),
            (SETTING_DAILY_BUDGET, stored(texts.daily_budget_usd)),
            (
                SETTING_RATER_AVAILABILITY,
                stored(texts.min_rater_availability),
            ),
            (SETTING_WORKER_SILENCE, stored(texts.worker_silence_s)),
            (SETTING_SMOKE_RESULTS, stored(texts.smoke_results_hours)),
            (SETTING_FULL_RESULTS, stored(texts.full_results_hours)),
            (SETTING_MIN_ANSWERS, texts.min_answers),
        ]
    }

    /// Rules from stored settings (`lookup` gives a setting's value when set); a setting that
    /// no longer parses falls back to its default rather than silencing every rule.
    pub fn from_settings(lookup: impl Fn(&str) -> Option<String>) -> AlertRules {
        let defaults = AlertRules::default().texts();
        let pick = |name: &str, default: String| lookup(name).unwrap_or(default);
        let texts = RuleTexts {
            queue_growth_minutes: pick(SETTING_QUEUE_GROWTH, defaults.queue_growth_minutes.clone()),
            max_error_rate: pick(SETTING_ERROR_RATE, defaults.max_error_rate.clone()),
            max_p99_latency_s: pick(SETTING_P99_LATENCY, defaults.max_p99_latency_s.clone()),
            daily_budget_usd: pick(SETTING_DAILY_BUDGET, defaults.daily_budget_usd.clone()),
            min_rater_availability: pick(
                SETTING_RATER_AVAILABILITY,
                defaults.min_rater_availability.clone(),
            ),
            worker_silence_s: pick(SETTING_WORKER_SILENCE, defaults.worker_silence_s.clone()),
            smoke_results_hours: pick(SETTING_SMOKE_RESULTS, defaults.smoke_results_hours.clone()),
            full_results_hours: pick(SETTING_FULL_RESULTS, defaults.full_results_hours.clone()),
            min_answers: pick(SETTING_MIN_ANSWERS, defaults.min_answers.clone()),
        };
        AlertRules::parse(&texts).unwrap_or_else(|problem| {
            tracing::warn!(%problem, "stored alert rules do not parse; using the defaults");
            AlertRules::default()
        })
    }
}

/// The figures the rules judge.
#[derive(Clone, Debug, Default)]
pub struct RuleInputs<'a> {
    pub now: i64,
    pub answers_last_hour: i64,
    pub errors_last_hour: i64,
    /// Error categories of the last hour, largest first.
    pub top_errors: &'a [(String, i64)],
    pub p99_latency_ms: Option<f64>,
    pub cost_last_day_usd: f64,
    /// (team, spending) over the last day, largest first.
    pub top_spenders: &'a [(String, f64)],
    pub rater_availability: Option<f64>,
    /// Monitor samples, oldest first.
    pub samples: &'a [HealthSample],
    /// (worker, last heartbeat).
    pub workers: &'a [(String, i64)],
    /// Suites on recent checkpoints, for the time-to-results objective.
    pub deliveries: &'a [SuiteDelivery],
}

impl AlertRules {
    /// The time-to-results targets per tier.
    pub fn results_targets(&self) -> Targets {
        Targets {
            smoke_hours: self.smoke_results_hours,
            full_hours: self.full_results_hours,
        }
    }
}

/// An alert that should be open: its kind, what it is about, and the message for the leads.
#[derive(Clone, Debug, PartialEq)]
pub struct Firing {
    pub kind: &'static str,
    pub subject: String,
    pub message: String,
}

/// The least-squares slope of queue depth against time (identities per millisecond) over
/// `samples`; `None` when they do not span any time.
pub fn queue_slope(samples: &[HealthSample]) -> Option<f64> {
    let n = samples.len() as f64;
    let mean_t = samples.iter().map(|s| s.taken_at as f64).sum::<f64>() / n;
    let mean_d = samples.iter().map(|s| s.queue_depth as f64).sum::<f64>() / n;
    let (mut covariance, mut variance) = (0.0, 0.0);
    for sample in samples {
        let dt = sample.taken_at as f64 - mean_t;
        covariance += dt * (sample.queue_depth as f64 - mean_d);
        variance += dt * dt;
    }
    (variance > 0.0).then(|| covariance / variance)
}

/// How the queue moved over the last `minutes`: `Some((from, to))` when it grew without
/// draining over the whole period — samples cover it, none is empty, it ends higher than it
/// began and its least-squares slope is upward.
pub fn queue_growth(samples: &[HealthSample], now: i64, minutes: i64) -> Option<(i64, i64)> {
    let start = now - minutes * 60_000;
    // Samples come once a monitor round; allow one round's slack at the start of the window.
    let first_index = samples
        .iter()
        .rposition(|sample| sample.taken_at <= start)?;
    let window = &samples[first_index..];
    if window.len() < 3 || window.iter().any(|sample| sample.queue_depth == 0) {
        return None;
    }
    let first = window.first()?.queue_depth;
    let last = window.last()?.queue_depth;
    if last <= first {
        return None;
    }
    (queue_slope(window)? > 0.0).then_some((first, last))
}

/// A time `delta_ms` from now in words: "in 5 min", "2.5 h ago", "in 3.0 days".
fn relative_time(delta_ms: i64) -> String {
    let span = delta_ms.unsigned_abs();
    let amount = if span < 90 * 60_000 {
        format!("{} min", (span + 30_000) / 60_000)
    } else if span < 48 * 3_600_000 {
        format!("{:.1} h", span as f64 / 3_600_000.0)
    } else {
        format!("{:.1} days", span as f64 / 86_400_000.0)
    };
    if delta_ms >= 0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// The alerts the figures call for under these rules.
pub fn evaluate(rules: &AlertRules, inputs: &RuleInputs<'_>) -> Vec<Firing> {
    let mut firing = Vec::new();
    let mut fire = |kind: &'static str, subject: &str, message: String| {
        firing.push(Firing {
            kind,
            subject: subject.to_string(),
            message,
        })
    };
    if let Some(minutes) = rules.queue_growth_minutes {
        if let Some((from, to)) = queue_growth(inputs.samples, inputs.now, minutes) {
            fire(
                ALERT_QUEUE_GROWING,
                "identities",
                format!(
                    "The queue of identities has grown for over {minutes} minutes without draining: from {from} to {to}. Workers are not keeping up; add workers or endpoint capacity, or pause low-priority runs."
                ),
            );
        }
    }
    let enough_answers = inputs.answers_last_hour >= rules.min_answers;
    if let (Some(max), true) = (rules.max_error_rate, enough_answers) {
        let rate = inputs.errors_last_hour as f64 / inputs.answers_last_hour as f64;
        if rate > max {
            let causes: Vec<String> = inputs
                .top_errors
                .iter()
                .take(3)
                .map(|(category, count)| format!("{category} {count}"))
                .collect();
            fire(
                ALERT_ERROR_RATE,
                "answers",
                format!(
                    "{} of the last hour's {} answers failed ({}, above {}): {}.",
                    inputs.errors_last_hour,
                    inputs.answers_last_hour,
                    percent(rate),
                    percent(max),
                    causes.join(", ")
                ),
            );
        }
    }
    if let (Some(max_s), Some(p99), true) = (
        rules.max_p99_latency_s,
        inputs.p99_latency_ms,
        enough_answers,
    ) {
        if p99 > max_s * 1_000.0 {
            fire(
                ALERT_P99_LATENCY,
                "answers",
                format!(
                    "The 99th percentile of answer latency over the last hour is about {:.1} s, above {max_s} s ({} answers). Endpoints are saturated or slow; see endpoint saturation on the health page.",
                    p99 / 1_000.0,
                    inputs.answers_last_hour
                ),
            );
        }
    }
    if let Some(budget) = rules.daily_budget_usd {
        if inputs.cost_last_day_usd > budget {
            let spenders: Vec<String> = inputs
                .top_spenders
                .iter()
                .take(3)
                .map(|(team, usd)| format!("{team} ${usd:.2}"))
                .collect();
            fire(
                ALERT_DAILY_COST,
                "all teams",
                format!(
                    "Spending over the last 24 hours is ${:.2}, above the daily budget of ${budget:.2}; largest teams: {}.",
                    inputs.cost_last_day_usd,
                    spenders.join(", ")
                ),
            );
        }
    }
    if let (Some(min), Some(covered)) = (rules.min_rater_availability, inputs.rater_availability) {
        if covered < min {
            fire(
                ALERT_RATER_AVAILABILITY,
                "raters",
                format!(
                    "Active raters' weekly capacity covers {} of the hours the human queue needs, below {}. Invite raters, raise capacities, or unpause raters.",
                    percent(covered),
                    percent(min)
                ),
            );
        }
    }
    if let Some(silence) = rules.worker_silence_s {
        for (worker, heartbeat_at) in inputs.workers {
            let silent_s = (inputs.now - heartbeat_at) / 1_000;
            if silent_s > silence {
                fire(
                    ALERT_WORKER_SILENT,
                    worker,
                    format!(
                        "Worker `{worker}` has sent no heartbeat for {silent_s} s (more than {silence} s) and did not shut down cleanly; its identities return to the queue when their leases expire."
                    ),
                );
            }
        }
    }
    let targets = rules.results_targets();
    let clock = |at: i64| relative_time(at - inputs.now);
    for (late, subject, message) in
        results_objective::alerts(inputs.deliveries, &targets, inputs.now, clock)
    {
        let kind = if late {
            ALERT_RESULTS_LATE
        } else {
            ALERT_RESULTS_AT_RISK
        };
        fire(kind, &subject, message);
    }
    firing
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const MINUTE: i64 = 60_000;

    fn sample(minutes_ago: i64, depth: i64) -> HealthSample {
        HealthSample {
            taken_at: NOW - minutes_ago * MINUTE,
            queue_depth: depth,
            claimed: 0,
            answers_last_hour: 0,
            errors_last_hour: 0,
            p99_latency_ms: None,
            live_workers: 1,
        }
    }

    #[test]
    fn a_queue_grows_only_when_it_rose_over_the_whole_period_without_draining() {
        let rising: Vec<HealthSample> = (0..=70)
            .rev()
            .map(|ago| sample(ago, 1_000 + (70 - ago) * 10))
            .collect();
        assert_eq!(queue_growth(&rising, NOW, 60), Some((1_100, 1_700)));
        // Not covered for long enough yet.
        assert_eq!(queue_growth(&rising[30..], NOW, 60), None);
        // Drained once in the hour.
        let mut drained = rising.clone();
        drained[40].queue_depth = 0;
        assert_eq!(queue_growth(&drained, NOW, 60), None);
        // Ends lower than it began.
        let falling: Vec<HealthSample> = (0..=70)
            .rev()
            .map(|ago| sample(ago, 1_000 + ago * 10))
            .collect();
        assert_eq!(queue_growth(&falling, NOW, 60), None);
        // A spike at the end of a falling hour is not a trend.
        let mut spike = falling.clone();
        spike.last_mut().unwrap().queue_depth = 2_000;
        assert_eq!(queue_growth(&spike, NOW, 60), None);
    }

    #[test]
    fn times_read_in_minutes_hours_or_days_before_or_after_now() {
        assert_eq!(relative_time(59_000), "in 1 min");
        assert_eq!(relative_time(-20_000), "0 min ago");
        assert_eq!(relative_time(-61 * MINUTE), "61 min ago");
        assert_eq!(relative_time(150 * MINUTE), "in 2.5 h");
        assert_eq!(relative_time(-72 * 60 * MINUTE), "3.0 days ago");
    }

    fn inputs<'a>(samples: &'a [HealthSample], workers: &'a [(String, i64)]) -> RuleInputs<'a> {
        RuleInputs {
            now: NOW,
            answers_last_hour: 1_000,
            errors_last_hour: 10,
            top_errors: &[],
            p99_latency_ms: Some(4_000.0),
            cost_last_day_usd: 10.0,
            top_spenders: &[],
            rater_availability: Some(0.9),
            samples,
            workers,
            deliveries: &[],
        }
    }

    #[test]
    fn defaults_fire_on_each_documented_threshold() {
        let rules = AlertRules::default();
        let workers = vec![("w1".to_string(), NOW - 5_000)];
        assert!(evaluate(&rules, &inputs(&[], &workers)).is_empty());

        let errors = [
            ("rate_limited".to_string(), 50),
            ("connect".to_string(), 11),
        ];
        let fired = evaluate(
            &rules,
            &RuleInputs {
                errors_last_hour: 61,
                top_errors: &errors,
                ..inputs(&[], &workers)
            },
        );
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].kind, ALERT_ERROR_RATE);
        assert!(
            fired[0].message.contains("6.1%") && fired[0].message.contains("rate_limited 50"),
            "{}",
            fired[0].message
        );
        // Exactly at the threshold does not fire.
        assert!(evaluate(
            &rules,
            &RuleInputs {
                errors_last_hour: 50,
                ..inputs(&[], &workers)
            }
        )
        .is_empty());
        // Too few answers to judge a rate.
        assert!(evaluate(
            &rules,
            &RuleInputs {
                answers_last_hour: 20,
                errors_last_hour: 20,
                ..inputs(&[], &workers)
            }
        )
        .is_empty());

        let slow = evaluate(
            &rules,
            &RuleInputs {
                p99_latency_ms: Some(31_000.0),
                ..inputs(&[], &workers)
            },
        );
        assert_eq!(slow[0].kind, ALERT_P99_LATENCY);
        let spenders = [("vision".to_string(), 900.0), ("text".to_string(), 200.0)];
        let costly = evaluate(
            &rules,
            &RuleInputs {
                cost_last_day_usd: 1_100.0,
                top_spenders: &spenders,
                ..inputs(&[], &workers)
            },
        );
        assert_eq!(costly[0].kind, ALERT_DAILY_COST);
        assert!(costly[0].message.contains("vision $900.00"));
        let short = evaluate(
            &rules,
            &RuleInputs {
                rater_availability: Some(0.55),
                ..inputs(&[], &workers)
            },
        );
        assert_eq!(short[0].kind, ALERT_RATER_AVAILABILITY);
        let lost = vec![("w1".to_string(), NOW - 200_000)];
        let silent = evaluate(&rules, &inputs(&[], &lost));
        assert_eq!(
            (silent[0].kind, silent[0].subject.as_str()),
            (ALERT_WORKER_SILENT, "w1")
        );
    }

    #[test]
    fn rules_switch_off_and_round_trip_through_settings() {
        let texts = RuleTexts {
            queue_growth_minutes: "90".into(),
            max_error_rate: "2%".into(),
            max_p99_latency_s: "off".into(),
            daily_budget_usd: "250".into(),
            min_rater_availability: "0.5".into(),
            worker_silence_s: "".into(),
            smoke_results_hours: "0.5".into(),
            full_results_hours: "off".into(),
            min_answers: "100".into(),
        };
        let rules = AlertRules::parse(&texts).unwrap();
        assert_eq!(rules.max_error_rate, Some(0.02));
        assert_eq!(
            (rules.smoke_results_hours, rules.full_results_hours),
            (Some(0.5), None)
        );
        let slow = RuleTexts {
            smoke_results_hours: "0".into(),
            ..texts.clone()
        };
        assert!(AlertRules::parse(&slow)
            .unwrap_err()
            .contains("smoke suites' time to results"));
        assert_eq!(rules.max_p99_latency_s, None);
        assert_eq!(rules.worker_silence_s, None);
        let stored: std::collections::HashMap<&str, String> =
            rules.settings().into_iter().collect();
        assert_eq!(stored[SETTING_P99_LATENCY], "off");
        let back = AlertRules::from_settings(|name| stored.get(name).cloned());
        assert_eq!(back, rules);
        // Nothing stored: the defaults.
        assert_eq!(AlertRules::from_settings(|_| None), AlertRules::default());
        // A switched-off rule never fires.
        let never = evaluate(
            &rules,
            &RuleInputs {
                p99_latency_ms: Some(1e9),
                ..inputs(&[], &[])
            },
        );
        assert!(never.is_empty());
    }

    #[test]
    fn bad_thresholds_are_refused_with_their_names() {
        for (field, value, words) in [
            ("error", "1.5", "the error rate"),
            ("error", "abc", "the error rate"),
            ("latency", "-3", "the p99 latency"),
            ("growth", "1", "queue growth"),
            ("answers", "0", "minimum number of answers"),
        ] {
            let mut texts = AlertRules::default().texts();
            match field {
                "error" => texts.max_error_rate = value.into(),
                "latency" => texts.max_p99_latency_s = value.into(),
                "growth" => texts.queue_growth_minutes = value.into(),
                _ => texts.min_answers = value.into(),
            }
            let problem = AlertRules::parse(&texts).unwrap_err();
            assert!(problem.contains(words), "{problem}");
        }
    }
}
