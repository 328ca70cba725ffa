//! The human queue's deadlines over time: SLA attainment by day, labelling velocity, and rater
//! availability against the queue's inflow. The open queue itself is scanned in
//! [`crate::annotation::queue_scan`].
//!
//! Pure.

use serde::{Deserialize, Serialize};

pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;

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
