//! Time to results as the platform's objective: from a checkpoint's registration to its
//! suites' results, each suite tier has a target (by default smoke within 1 hour, full within
//! 8 hours). A suite delivered on one checkpoint met or missed it; one still running is on
//! track, at risk (its pace will not finish it in time, or half its time passed without an
//! answer) or late. The System page shows attainment per tier, and the monitor raises an alert
//! for each suite at risk or late, as it does for annotation SLAs.

use serde::{Deserialize, Serialize};

use crate::suites::{TIER_FULL, TIER_SMOKE};

const HOUR_MS: f64 = 3_600_000.0;
/// A suite's pace is trusted once this share of its results is in, or this share of its time
/// has passed: a first answer after a wait in the queue would project a finish far away.
const PACE_AFTER_RESULTS: f64 = 0.1;
const PACE_AFTER_TIME: f64 = 0.25;
/// A projection must pass the deadline by this share of the target for the suite to be at
/// risk, so a pace wavering around the deadline does not raise and resolve alerts in turn.
const AT_RISK_MARGIN: f64 = 0.1;

/// One suite's runs on one checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteDelivery {
    pub suite: String,
    /// `smoke` or `full`.
    pub tier: String,
    pub checkpoint: String,
    /// When the clock starts: the checkpoint's registration, or the suite's launch when it was
    /// run on demand later.
    pub due_from: i64,
    /// When its first run was launched.
    pub started_at: i64,
    /// When its last run completed; `None` while any of them runs.
    pub finished_at: Option<i64>,
    pub done: i64,
    pub expected: i64,
}

/// Where a delivery stands against its tier's target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Standing {
    Met,
    Missed,
    OnTrack,
    /// Running, and its pace finishes it after the deadline (`projected_at`), or half its
    /// time passed without any answer (`None`).
    AtRisk {
        projected_at: Option<i64>,
    },
    /// Running past its deadline.
    Late,
}

impl SuiteDelivery {
    pub fn deadline(&self, target_ms: i64) -> i64 {
        self.due_from + target_ms
    }

    /// Where it stands at `now` against `target_ms`.
    pub fn standing(&self, target_ms: i64, now: i64) -> Standing {
        let deadline = self.deadline(target_ms);
        match self.finished_at {
            Some(at) if at <= deadline => Standing::Met,
            Some(_) => Standing::Missed,
            None if now > deadline => Standing::Late,
            None => {
                let share_of_time = (now - self.due_from) as f64 / target_ms.max(1) as f64;
                let share_done = self.done as f64 / self.expected.max(1) as f64;
                let trusted = self.done > 0
                    && (share_done >= PACE_AFTER_RESULTS || share_of_time >= PACE_AFTER_TIME);
                if trusted {
                    let elapsed = (now - self.started_at).max(1) as f64;
                    let remaining = (self.expected - self.done).max(0) as f64;
                    let at = now + (remaining * elapsed / self.done as f64).ceil() as i64;
                    let margin = (AT_RISK_MARGIN * target_ms as f64) as i64;
                    if at > deadline + margin {
                        Standing::AtRisk {
                            projected_at: Some(at),
                        }
                    } else {
                        Standing::OnTrack
                    }
                } else if share_of_time >= 0.5 {
                    Standing::AtRisk { projected_at: None }
                } else {
                    Standing::OnTrack
                }
            }
        }
    }

    /// What alerts name it by.
    pub fn subject(&self) -> String {
        format!(
            "{} suite `{}` on `{}`",
            self.tier, self.suite, self.checkpoint
        )
    }
}

/// The targets per tier, in hours (`None`: no objective for that tier).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Targets {
    pub smoke_hours: Option<f64>,
    pub full_hours: Option<f64>,
}

impl Targets {
    pub fn target_ms(&self, tier: &str) -> Option<i64> {
        let hours = match tier {
            TIER_SMOKE => self.smoke_hours,
            TIER_FULL => self.full_hours,
            _ => None,
        }?;
        Some((hours * HOUR_MS).round() as i64)
    }
}

/// One tier's deliveries over the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierAttainment {
    pub tier: String,
    pub target_hours: f64,
    pub met: u64,
    pub missed: u64,
    pub late: u64,
    pub at_risk: u64,
    pub on_track: u64,
    /// Met over those decided (met, missed and late); `None` before any.
    pub attainment: Option<f64>,
    /// The median time to results of the delivered ones, in milliseconds.
    pub median_ms: Option<i64>,
}

/// Attainment per tier with a target, smoke first.
pub fn attainment(
    deliveries: &[SuiteDelivery],
    targets: &Targets,
    now: i64,
) -> Vec<TierAttainment> {
    [TIER_SMOKE, TIER_FULL]
        .into_iter()
        .filter_map(|tier| {
            let target_ms = targets.target_ms(tier)?;
            let mut row = TierAttainment {
                tier: tier.to_string(),
                target_hours: target_ms as f64 / HOUR_MS,
                ..TierAttainment::default()
            };
            let mut delivered = Vec::new();
            for delivery in deliveries.iter().filter(|delivery| delivery.tier == tier) {
                match delivery.standing(target_ms, now) {
                    Standing::Met => row.met += 1,
                    Standing::Missed => row.missed += 1,
                    Standing::Late => row.late += 1,
                    Standing::AtRisk { .. } => row.at_risk += 1,
                    Standing::OnTrack => row.on_track += 1,
                }
                if let Some(at) = delivery.finished_at {
                    delivered.push(at - delivery.due_from);
                }
            }
            let decided = row.met + row.missed + row.late;
            row.attainment = (decided > 0).then(|| row.met as f64 / decided as f64);
            delivered.sort_unstable();
            row.median_ms = delivered.get(delivered.len() / 2).copied();
            Some(row)
        })
        .collect()
}

/// A delivery the monitor alerts on: (late, subject, message); `false` for one at risk.
pub fn alerts(
    deliveries: &[SuiteDelivery],
    targets: &Targets,
    now: i64,
    clock: impl Fn(i64) -> String,
) -> Vec<(bool, String, String)> {
    deliveries
        .iter()
        .filter_map(|delivery| {
            let target_ms = targets.target_ms(&delivery.tier)?;
            let due = clock(delivery.deadline(target_ms));
            let hours = target_ms as f64 / HOUR_MS;
            let done = format!("{} of {} results", delivery.done, delivery.expected);
            let subject = delivery.subject();
            match delivery.standing(target_ms, now) {
                Standing::Late => Some((
                    true,
                    subject.clone(),
                    format!("The {subject} was due {due} ({hours} h after the checkpoint) and is still running: {done}. Raise its priority, add workers or endpoint capacity, or cancel it."),
                )),
                Standing::AtRisk { projected_at } => {
                    let pace = match projected_at {
                        Some(at) => format!("at its pace it finishes {}", clock(at)),
                        None => "too few results to tell, half its time gone".to_string(),
                    };
                    Some((
                        false,
                        subject.clone(),
                        format!("The {subject} is due {due} ({hours} h after the checkpoint): {done}; {pace}."),
                    ))
                }
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    const T0: i64 = 1_800_000_000_000;

    fn delivery(
        tier: &str,
        done: i64,
        expected: i64,
        finished_after_h: Option<f64>,
    ) -> SuiteDelivery {
        SuiteDelivery {
            suite: "core".into(),
            tier: tier.into(),
            checkpoint: "step-1000".into(),
            due_from: T0,
            started_at: T0,
            finished_at: finished_after_h.map(|hours| T0 + (hours * HOUR as f64) as i64),
            done,
            expected,
        }
    }

    const TARGETS: Targets = Targets {
        smoke_hours: Some(1.0),
        full_hours: Some(8.0),
    };

    #[test]
    fn a_delivery_is_met_missed_on_track_at_risk_or_late() {
        let hour = TARGETS.target_ms(TIER_SMOKE).unwrap();
        assert_eq!(
            delivery(TIER_SMOKE, 10, 10, Some(0.5)).standing(hour, T0 + HOUR),
            Standing::Met
        );
        assert_eq!(
            delivery(TIER_SMOKE, 10, 10, Some(1.5)).standing(hour, T0 + 2 * HOUR),
            Standing::Missed
        );
        // Half done in a quarter of the hour: finishes at half an hour.
        let running = delivery(TIER_SMOKE, 50, 100, None);
        assert_eq!(running.standing(hour, T0 + HOUR / 4), Standing::OnTrack);
        // A tenth done in half the hour: projected at five hours.
        let slow = delivery(TIER_SMOKE, 10, 100, None);
        assert_eq!(
            slow.standing(hour, T0 + HOUR / 2),
            Standing::AtRisk {
                projected_at: Some(T0 + 5 * HOUR)
            }
        );
        // A first answer after a wait in the queue does not yet make a pace.
        let first = delivery(TIER_SMOKE, 1, 1000, None);
        assert_eq!(first.standing(hour, T0 + HOUR / 6), Standing::OnTrack);
        // A projection just past the deadline is within the margin.
        let close = delivery(TIER_SMOKE, 48, 100, None);
        assert_eq!(close.standing(hour, T0 + HOUR / 2), Standing::OnTrack);
        // Nothing answered: on track early, at risk once half the time is gone.
        let idle = delivery(TIER_SMOKE, 0, 100, None);
        assert_eq!(idle.standing(hour, T0 + HOUR / 4), Standing::OnTrack);
        assert_eq!(
            idle.standing(hour, T0 + HOUR / 2),
            Standing::AtRisk { projected_at: None }
        );
        assert_eq!(idle.standing(hour, T0 + HOUR + 1), Standing::Late);
    }

    #[test]
    fn attainment_counts_late_as_missed_and_keeps_running_ones_apart() {
        let deliveries = vec![
            delivery(TIER_SMOKE, 10, 10, Some(0.5)),
            delivery(TIER_SMOKE, 10, 10, Some(0.9)),
            delivery(TIER_SMOKE, 10, 10, Some(2.0)),
            delivery(TIER_SMOKE, 1, 10, None),
            delivery(TIER_FULL, 5, 10, None),
            delivery("nightly", 5, 10, None),
        ];
        let rows = attainment(&deliveries, &TARGETS, T0 + 3 * HOUR);
        assert_eq!(rows.len(), 2);
        let smoke = &rows[0];
        assert_eq!((smoke.met, smoke.missed, smoke.late), (2, 1, 1));
        assert_eq!(smoke.attainment, Some(0.5));
        assert_eq!(smoke.median_ms, Some(9 * HOUR / 10));
        let full = &rows[1];
        assert_eq!(
            (full.on_track, full.attainment, full.target_hours),
            (1, None, 8.0)
        );
        let none = Targets {
            smoke_hours: None,
            full_hours: Some(8.0),
        };
        assert_eq!(
            attainment(&deliveries, &none, T0).len(),
            1,
            "no target, no row"
        );
    }

    #[test]
    fn alerts_name_the_suite_its_due_time_and_its_pace() {
        let deliveries = vec![
            delivery(TIER_SMOKE, 10, 100, None),
            delivery(TIER_FULL, 90, 100, None),
            delivery(TIER_SMOKE, 10, 10, Some(0.5)),
        ];
        let clock = |at: i64| format!("at +{}h", (at - T0) / HOUR);
        let fired = alerts(&deliveries, &TARGETS, T0 + HOUR / 2, clock);
        assert_eq!(fired.len(), 1, "{fired:?}");
        let (late, subject, message) = &fired[0];
        assert!(!late);
        assert_eq!(subject, "smoke suite `core` on `step-1000`");
        assert!(
            message.contains("due at +1h") && message.contains("10 of 100 results"),
            "{message}"
        );
        assert!(message.contains("finishes at +5h"), "{message}");
        let later = alerts(&deliveries, &TARGETS, T0 + 2 * HOUR, clock);
        assert!(later
            .iter()
            .any(|(late, subject, _)| *late && subject.starts_with("smoke")));
    }
}
