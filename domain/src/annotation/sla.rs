//! The human queue against its deadlines: backlog, age distribution, a completion forecast from
//! current velocity, which tasks are at risk or breached (and so escalate), SLA attainment by
//! day, and rater availability against the queue's inflow.
//!
//! Pure. [`QueueScan`] takes open tasks one at a time in queue order, so a queue of a million
//! tasks is summarised without holding it in memory.

use crate::ids::TaskId;
use serde::{Deserialize, Serialize};

const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;
/// A task with less than this share of its SLA window left is at risk whatever the forecast.
pub const AT_RISK_SHARE_LEFT: f64 = 0.25;
/// At-risk tasks listed by name on the lead's page (all of them are counted).
const AT_RISK_LISTED: usize = 50;
/// Upper bounds of the age buckets, with their labels.
pub const AGE_BUCKETS: [(&str, i64); 6] = [
    ("under 1 h", HOUR_MS),
    ("1–6 h", 6 * HOUR_MS),
    ("6–24 h", DAY_MS),
    ("1–2 days", 2 * DAY_MS),
    ("2–4 days", 4 * DAY_MS),
    ("over 4 days", i64::MAX),
];

/// An open task as the scan sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenTask {
    pub id: TaskId,
    /// The queue it belongs to (its eval's name).
    pub queue: String,
    pub priority: i64,
    pub created_at: i64,
    pub due_at: i64,
    /// Labels it still needs (overlap minus standing labels).
    pub labels_missing: i64,
    pub escalated: bool,
}

/// A task named on the lead's page: breached, or forecast to miss its deadline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtRiskTask {
    pub task_id: TaskId,
    pub queue: String,
    pub priority: i64,
    pub due_at: i64,
    /// When the forecast says its last label arrives (`None`: nobody is labelling).
    pub forecast_done_at: Option<i64>,
    pub why: String,
}

/// The running summary of the open queue.
#[derive(Clone, Debug)]
pub struct QueueScan {
    now: i64,
    labels_per_hour: f64,
    labels_ahead: f64,
    pub backlog_tasks: u64,
    pub backlog_labels: u64,
    /// Open tasks per [`AGE_BUCKETS`] entry.
    pub ages: [u64; AGE_BUCKETS.len()],
    pub breached: u64,
    pub at_risk: u64,
    /// The first at-risk or breached tasks in queue order.
    pub listed: Vec<AtRiskTask>,
    /// At-risk or breached tasks not escalated yet.
    pub to_escalate: Vec<TaskId>,
    /// Queues (by name) with at-risk or breached tasks, and how many of each.
    pub queues_at_risk: std::collections::BTreeMap<String, QueueRisk>,
}

/// A queue's tasks at risk of missing their deadline, and those past it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueRisk {
    pub at_risk: u64,
    pub breached: u64,
}

impl QueueScan {
    /// A scan at `now` with the queue's current velocity in labels per hour.
    pub fn new(now: i64, labels_per_hour: f64) -> QueueScan {
        QueueScan {
            now,
            labels_per_hour: labels_per_hour.max(0.0),
            labels_ahead: 0.0,
            backlog_tasks: 0,
            backlog_labels: 0,
            ages: [0; AGE_BUCKETS.len()],
            breached: 0,
            at_risk: 0,
            listed: Vec::new(),
            to_escalate: Vec::new(),
            queues_at_risk: Default::default(),
        }
    }

    /// Takes the next open task. Tasks must come in the order raters are served them (priority
    /// first, then deadline), because a task's forecast counts the labels ahead of it.
    pub fn visit(&mut self, task: &OpenTask) {
        let missing = task.labels_missing.max(0);
        self.backlog_tasks += 1;
        self.backlog_labels += missing as u64;
        self.labels_ahead += missing as f64;
        let age = (self.now - task.created_at).max(0);
        let bucket = AGE_BUCKETS
            .iter()
            .position(|(_, upper)| age < *upper)
            .unwrap_or(AGE_BUCKETS.len() - 1);
        self.ages[bucket] += 1;
        let forecast_done_at = (self.labels_per_hour > 0.0).then(|| {
            self.now + (self.labels_ahead / self.labels_per_hour * HOUR_MS as f64).ceil() as i64
        });
        let window = (task.due_at - task.created_at).max(1) as f64;
        let left = (task.due_at - self.now) as f64 / window;
        let (why, breached) = if task.due_at <= self.now {
            ("past its deadline".to_string(), true)
        } else if forecast_done_at.is_some_and(|done| done > task.due_at) {
            (
                "forecast to finish after its deadline at the current velocity".to_string(),
                false,
            )
        } else if left < AT_RISK_SHARE_LEFT {
            (
                format!("{:.0}% of its SLA window left", left * 100.0),
                false,
            )
        } else {
            return;
        };
        let risk = self.queues_at_risk.entry(task.queue.clone()).or_default();
        if breached {
            self.breached += 1;
            risk.breached += 1;
        } else {
            self.at_risk += 1;
            risk.at_risk += 1;
        }
        if !task.escalated {
            self.to_escalate.push(task.id);
        }
        if self.listed.len() < AT_RISK_LISTED {
            self.listed.push(AtRiskTask {
                task_id: task.id,
                queue: task.queue.clone(),
                priority: task.priority,
                due_at: task.due_at,
                forecast_done_at,
                why,
            });
        }
    }

    /// Hours until the backlog is labelled at the current velocity (`None`: nobody labels).
    pub fn forecast_hours(&self) -> Option<f64> {
        if self.backlog_labels == 0 {
            return Some(0.0);
        }
        (self.labels_per_hour > 0.0).then(|| self.backlog_labels as f64 / self.labels_per_hour)
    }
}

/// Tasks finished on one UTC day, and how many by their deadline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlaDay {
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    pub completed: u64,
    pub on_time: u64,
}

/// Share of tasks finished by their deadline over the given days (`None` when none finished).
pub fn attainment(days: &[SlaDay]) -> Option<f64> {
    let completed: u64 = days.iter().map(|day| day.completed).sum();
    let on_time: u64 = days.iter().map(|day| day.on_time).sum();
    (completed > 0).then(|| on_time as f64 / completed as f64)
}

/// Rater-hours the queue needs against the hours active raters offer, per week.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// Labels the queue asked for over the last week (its inflow).
    pub inflow_labels_per_week: f64,
    /// Median time raters take per label.
    pub seconds_per_label: Option<f64>,
    /// Inflow times time per label.
    pub needed_hours_per_week: Option<f64>,
    /// Weekly capacity of active raters who are not paused or in training.
    pub capacity_hours_per_week: f64,
    /// Share of the needed hours the capacity covers, at most 1 (`None`: nothing needed yet,
    /// or no labelling times to cost it with).
    pub covered: Option<f64>,
    /// Hours to clear the current backlog, on top of the inflow.
    pub backlog_hours: Option<f64>,
}

pub fn availability(
    inflow_labels_per_week: f64,
    backlog_labels: u64,
    seconds_per_label: Option<f64>,
    capacity_hours_per_week: f64,
) -> Availability {
    let hours = |labels: f64| seconds_per_label.map(|seconds| labels * seconds / 3_600.0);
    let needed_hours_per_week = hours(inflow_labels_per_week);
    let covered = needed_hours_per_week
        .filter(|needed| *needed > 0.0)
        .map(|needed| (capacity_hours_per_week / needed).min(1.0));
    Availability {
        inflow_labels_per_week,
        seconds_per_label,
        needed_hours_per_week,
        capacity_hours_per_week,
        covered,
        backlog_hours: hours(backlog_labels as f64),
    }
}

/// Labelling velocity and inflow, for the forecast and availability.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LabellingFlow {
    pub labels_last_hour: u64,
    pub labels_last_day: u64,
    pub labels_last_week: u64,
    /// Labels asked for by tasks created in the last week (inflow).
    pub labels_needed_last_week: u64,
    /// Median time per label over the latest labels (`None` before any).
    pub median_label_ms: Option<f64>,
    /// Weekly hours of active raters who are not paused or in training.
    pub capacity_hours_per_week: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn task(id: i64, age_hours: i64, window_hours: i64, missing: i64) -> OpenTask {
        let created_at = NOW - age_hours * HOUR_MS;
        OpenTask {
            id: TaskId(id),
            queue: "qa".into(),
            priority: 1,
            created_at,
            due_at: created_at + window_hours * HOUR_MS,
            labels_missing: missing,
            escalated: false,
        }
    }

    #[test]
    fn the_forecast_counts_the_labels_ahead_of_each_task() {
        // Ten labels an hour; each task needs ten labels, so task k is done after k hours.
        let mut scan = QueueScan::new(NOW, 10.0);
        for id in 1..=5 {
            scan.visit(&task(id, 0, 3, 10));
        }
        assert_eq!(scan.backlog_tasks, 5);
        assert_eq!(scan.backlog_labels, 50);
        assert_eq!(scan.forecast_hours(), Some(5.0));
        // Deadlines three hours out: tasks 4 and 5 will be late.
        assert_eq!(scan.at_risk, 2);
        assert_eq!(scan.to_escalate, vec![TaskId(4), TaskId(5)]);
        assert_eq!(scan.breached, 0);
        assert!(scan.listed[0].why.contains("forecast"));
    }

    #[test]
    fn little_time_left_or_a_passed_deadline_is_at_risk_without_a_forecast() {
        let mut scan = QueueScan::new(NOW, 0.0);
        scan.visit(&task(1, 47, 48, 1)); // 1 hour of 48 left
        scan.visit(&task(2, 50, 48, 1)); // past its deadline
        scan.visit(&task(3, 1, 48, 1)); // plenty of time
        let mut escalated = task(4, 60, 48, 1);
        escalated.escalated = true;
        scan.visit(&escalated);
        assert_eq!((scan.at_risk, scan.breached), (1, 2));
        assert_eq!(
            scan.to_escalate,
            vec![TaskId(1), TaskId(2)],
            "escalated tasks are not raised twice"
        );
        assert_eq!(scan.forecast_hours(), None, "nobody is labelling");
        assert_eq!(
            scan.queues_at_risk.get("qa"),
            Some(&QueueRisk {
                at_risk: 1,
                breached: 2
            })
        );
        assert_eq!(scan.ages, [0, 1, 0, 1, 2, 0]);
    }

    #[test]
    fn attainment_pools_days_and_availability_costs_the_inflow() {
        let days = [
            SlaDay {
                day: 1,
                completed: 10,
                on_time: 9,
            },
            SlaDay {
                day: 2,
                completed: 30,
                on_time: 21,
            },
        ];
        assert_eq!(
            attainment(&days),
            Some(0.75),
            "30 of 40, not the mean of 90% and 70%"
        );
        assert_eq!(attainment(&[]), None);
        // 700 labels a week at 36 s each: 7 hours needed; 3.5 hours offered covers half.
        let half = availability(700.0, 100, Some(36.0), 3.5);
        assert_eq!(half.needed_hours_per_week, Some(7.0));
        assert_eq!(half.covered, Some(0.5));
        assert_eq!(half.backlog_hours, Some(1.0));
        assert_eq!(availability(700.0, 0, Some(36.0), 70.0).covered, Some(1.0));
        assert_eq!(availability(0.0, 0, Some(36.0), 10.0).covered, None);
        assert_eq!(availability(700.0, 0, None, 10.0).covered, None);
    }
}
