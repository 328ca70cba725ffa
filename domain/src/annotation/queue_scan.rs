//! The open queue against its deadlines: backlog, age distribution, a completion forecast from
//! current velocity, and which tasks are at risk or breached (and so escalate).
//!
//! Pure. A task's forecast counts the labels ahead of it in serving order (priority first,
//! then deadline, then id), so the scan takes the queue in that order. [`QueueScan::visit`]
//! takes it task by task, which defines the figures. A million-task queue is read as groups
//! instead ([`QueueScan::visit_group`]): open tasks of one queue sharing a priority and a
//! deadline, summed by the store. Within a *slot* (one priority and deadline, every queue) the
//! forecast only grows, so a slot is wholly late, wholly on time, or crosses its deadline
//! part-way; only a crossing slot, and the few tasks the page names or the monitor escalates,
//! are read task by task ([`SlotRequest`]). Both ways give the same figures (tested below).

use crate::annotation::sla::{DAY_MS, HOUR_MS};
use crate::ids::TaskId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A task with less than this share of its SLA window left (numerator, denominator) is at risk
/// whatever the forecast. Whole numbers, so that the store's SQL counts the same tasks as
/// [`short_of_window`].
pub const AT_RISK_SHARE_LEFT: (i64, i64) = (1, 4);
/// At-risk tasks listed by name on the lead's page (all of them are counted).
pub const AT_RISK_LISTED: usize = 50;
/// At-risk tasks one scan names for escalation (all of them are counted): a queue far behind
/// is escalated over several monitor rounds rather than in one long burst of writes.
pub const ESCALATIONS_NAMED: usize = 1_000;
/// Upper bounds of the age buckets, with their labels.
pub const AGE_BUCKETS: [(&str, i64); 6] = [
    ("under 1 h", HOUR_MS),
    ("1–6 h", 6 * HOUR_MS),
    ("6–24 h", DAY_MS),
    ("1–2 days", 2 * DAY_MS),
    ("2–4 days", 4 * DAY_MS),
    ("over 4 days", i64::MAX),
];

/// Whether a task has less than [`AT_RISK_SHARE_LEFT`] of its SLA window left at `now`.
pub fn short_of_window(created_at: i64, due_at: i64, now: i64) -> bool {
    let (share, whole) = AT_RISK_SHARE_LEFT;
    (due_at - now) * whole < (due_at - created_at).max(1) * share
}

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

/// Open tasks of one queue with the same priority and deadline, summed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenGroup {
    pub queue: String,
    pub priority: i64,
    pub due_at: i64,
    pub tasks: u64,
    /// Labels they still need (each task's shortfall, never below zero).
    pub labels_missing: u64,
    /// Tasks escalated already.
    pub escalated: u64,
    /// Tasks [`short_of_window`], and how many of those are escalated.
    pub short_of_window: u64,
    pub short_of_window_escalated: u64,
    /// Tasks younger than each [`AGE_BUCKETS`] bound but the last (so each count includes the
    /// one before it).
    pub younger_than: [u64; AGE_BUCKETS.len() - 1],
}

/// A task of a slot read one by one, with the labels missing on it and on the slot's tasks
/// before it (by id): its place in the forecast.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotTask {
    pub task: OpenTask,
    pub missing_through: u64,
}

/// A slot whose tasks the scan needs one by one, in serving order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRequest {
    pub priority: i64,
    pub due_at: i64,
    /// Labels missing on every task served before the slot.
    pub labels_ahead: u64,
    pub need: SlotNeed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotNeed {
    /// The forecast crosses the deadline inside the slot: every task, to classify.
    Every,
    /// Every task counted here is at risk (only those [`short_of_window`] when the flag is
    /// set); the first ones are wanted to name and to escalate. `unescalated` of them are not
    /// escalated yet.
    AtRisk {
        only_short_of_window: bool,
        unescalated: u64,
    },
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

/// A queue's tasks at risk of missing their deadline, and those past it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueRisk {
    pub at_risk: u64,
    pub breached: u64,
}

/// Why a task is at risk, if it is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Risk {
    Breached,
    ForecastLate,
    ShortOfWindow,
}

/// What the scan finds: the same whether it reads task by task or group by group.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueFigures {
    pub backlog_tasks: u64,
    pub backlog_labels: u64,
    /// Open tasks per [`AGE_BUCKETS`] entry.
    pub ages: [u64; AGE_BUCKETS.len()],
    pub breached: u64,
    pub at_risk: u64,
    /// At-risk or breached tasks not escalated yet.
    pub unescalated: u64,
    /// The first [`AT_RISK_LISTED`] at-risk or breached tasks in serving order.
    pub listed: Vec<AtRiskTask>,
    /// The first [`ESCALATIONS_NAMED`] at-risk or breached tasks not escalated yet.
    pub to_escalate: Vec<TaskId>,
    /// Queues (by name) with at-risk or breached tasks, and how many of each.
    pub queues_at_risk: BTreeMap<String, QueueRisk>,
}

/// The running summary of the open queue.
#[derive(Clone, Debug)]
pub struct QueueScan {
    now: i64,
    labels_per_hour: f64,
    labels_ahead: u64,
    pub figures: QueueFigures,
    /// The groups of the slot being summed.
    slot: Vec<OpenGroup>,
    /// Slots to read task by task, in serving order.
    requests: Vec<SlotRequest>,
    /// At-risk tasks, and unescalated ones, in the requested wholly-at-risk slots: once they
    /// cover what is named, later such slots need not be read.
    requested_at_risk: u64,
    requested_unescalated: u64,
}

impl QueueScan {
    /// A scan at `now` with the queue's current velocity in labels per hour.
    pub fn new(now: i64, labels_per_hour: f64) -> QueueScan {
        QueueScan {
            now,
            labels_per_hour: labels_per_hour.max(0.0),
            labels_ahead: 0,
            figures: QueueFigures::default(),
            slot: Vec::new(),
            requests: Vec::new(),
            requested_at_risk: 0,
            requested_unescalated: 0,
        }
    }

    /// Takes the next open task, in serving order.
    pub fn visit(&mut self, task: &OpenTask) {
        let missing = task.labels_missing.max(0) as u64;
        self.figures.backlog_tasks += 1;
        self.figures.backlog_labels += missing;
        self.labels_ahead += missing;
        let age = (self.now - task.created_at).max(0);
        let bucket = AGE_BUCKETS
            .iter()
            .position(|(_, upper)| age < *upper)
            .unwrap_or(AGE_BUCKETS.len() - 1);
        self.figures.ages[bucket] += 1;
        self.judge(task, self.labels_ahead);
    }

    /// Takes the next group, in serving order (then by queue). Slots are settled as they end;
    /// [`QueueScan::finish_groups`] settles the last.
    pub fn visit_group(&mut self, group: OpenGroup) {
        if self
            .slot
            .first()
            .is_some_and(|first| (first.priority, first.due_at) != (group.priority, group.due_at))
        {
            self.settle_slot();
        }
        self.slot.push(group);
    }

    /// Settles the last slot and returns the slots to read task by task, in serving order:
    /// pass each one's tasks to [`QueueScan::take_slot`] (every task) or to
    /// [`QueueScan::name_at_risk`] and [`QueueScan::name_for_escalation`] (as many as
    /// [`QueueScan::still_named`] says), in that order.
    pub fn finish_groups(&mut self) -> Vec<SlotRequest> {
        self.settle_slot();
        std::mem::take(&mut self.requests)
    }

    /// How many more at-risk tasks are named on the page, and for escalation.
    pub fn still_named(&self) -> (usize, usize) {
        (
            AT_RISK_LISTED.saturating_sub(self.figures.listed.len()),
            ESCALATIONS_NAMED.saturating_sub(self.figures.to_escalate.len()),
        )
    }

    /// Every task of a crossing slot ([`SlotNeed::Every`]), in id order.
    pub fn take_slot(&mut self, request: &SlotRequest, tasks: &[SlotTask]) {
        for slot_task in tasks {
            self.judge(
                &slot_task.task,
                request.labels_ahead + slot_task.missing_through,
            );
        }
    }

    /// The first tasks of a wholly-at-risk slot (those short of window when the request says
    /// so), in id order: named on the page, already counted.
    pub fn name_at_risk(&mut self, request: &SlotRequest, tasks: &[SlotTask]) {
        for slot_task in tasks {
            let ahead = request.labels_ahead + slot_task.missing_through;
            if let Some(risk) = self.risk(&slot_task.task, ahead) {
                self.name(&slot_task.task, risk, ahead);
            }
        }
    }

    /// The first unescalated tasks of a wholly-at-risk slot, in id order.
    pub fn name_for_escalation(&mut self, tasks: &[TaskId]) {
        let room = ESCALATIONS_NAMED.saturating_sub(self.figures.to_escalate.len());
        self.figures.to_escalate.extend(tasks.iter().take(room));
    }

    /// Hours until the backlog is labelled at the current velocity (`None`: nobody labels).
    pub fn forecast_hours(&self) -> Option<f64> {
        if self.figures.backlog_labels == 0 {
            return Some(0.0);
        }
        (self.labels_per_hour > 0.0)
            .then(|| self.figures.backlog_labels as f64 / self.labels_per_hour)
    }

    /// When the labels ahead (including a task's own) are done at the current velocity.
    fn forecast_done_at(&self, labels_ahead: u64) -> Option<i64> {
        (self.labels_per_hour > 0.0).then(|| {
            self.now + (labels_ahead as f64 / self.labels_per_hour * HOUR_MS as f64).ceil() as i64
        })
    }

    fn forecast_late(&self, labels_ahead: u64, due_at: i64) -> bool {
        self.forecast_done_at(labels_ahead)
            .is_some_and(|done| done > due_at)
    }

    fn risk(&self, task: &OpenTask, labels_ahead: u64) -> Option<Risk> {
        if task.due_at <= self.now {
            Some(Risk::Breached)
        } else if self.forecast_late(labels_ahead, task.due_at) {
            Some(Risk::ForecastLate)
        } else if short_of_window(task.created_at, task.due_at, self.now) {
            Some(Risk::ShortOfWindow)
        } else {
            None
        }
    }

    /// Counts, names and marks for escalation one task, `labels_ahead` of the queue's labels
    /// (its own included) before it is done.
    fn judge(&mut self, task: &OpenTask, labels_ahead: u64) {
        let Some(risk) = self.risk(task, labels_ahead) else {
            return;
        };
        let breached = u64::from(risk == Risk::Breached);
        self.count_at_risk(&task.queue, 1 - breached, breached);
        if !task.escalated {
            self.figures.unescalated += 1;
            self.name_for_escalation(&[task.id]);
        }
        self.name(task, risk, labels_ahead);
    }

    fn count_at_risk(&mut self, queue: &str, at_risk: u64, breached: u64) {
        if at_risk + breached == 0 {
            return;
        }
        self.figures.at_risk += at_risk;
        self.figures.breached += breached;
        let counts = self
            .figures
            .queues_at_risk
            .entry(queue.to_string())
            .or_default();
        counts.at_risk += at_risk;
        counts.breached += breached;
    }

    fn name(&mut self, task: &OpenTask, risk: Risk, labels_ahead: u64) {
        if self.figures.listed.len() >= AT_RISK_LISTED {
            return;
        }
        let why = match risk {
            Risk::Breached => "past its deadline".to_string(),
            Risk::ForecastLate => {
                "forecast to finish after its deadline at the current velocity".to_string()
            }
            Risk::ShortOfWindow => {
                let window = (task.due_at - task.created_at).max(1) as f64;
                let left = (task.due_at - self.now) as f64 / window;
                format!("{:.0}% of its SLA window left", left * 100.0)
            }
        };
        self.figures.listed.push(AtRiskTask {
            task_id: task.id,
            queue: task.queue.clone(),
            priority: task.priority,
            due_at: task.due_at,
            forecast_done_at: self.forecast_done_at(labels_ahead),
            why,
        });
    }

    /// Counts the slot summed so far and, where its tasks must be read, asks for them.
    fn settle_slot(&mut self) {
        let groups = std::mem::take(&mut self.slot);
        let Some(first) = groups.first() else {
            return;
        };
        let (priority, due_at) = (first.priority, first.due_at);
        let labels_ahead = self.labels_ahead;
        for group in &groups {
            self.figures.backlog_tasks += group.tasks;
            self.figures.backlog_labels += group.labels_missing;
            self.labels_ahead += group.labels_missing;
            let mut younger = 0;
            for (bucket, &count) in group.younger_than.iter().enumerate() {
                self.figures.ages[bucket] += count.saturating_sub(younger);
                younger = younger.max(count);
            }
            self.figures.ages[AGE_BUCKETS.len() - 1] += group.tasks.saturating_sub(younger);
        }
        let request = |need| SlotRequest {
            priority,
            due_at,
            labels_ahead,
            need,
        };
        // The first task's forecast counts at least the labels ahead of the slot, the last
        // one's every label through the slot.
        let (breached, wholly_late) =
            (due_at <= self.now, self.forecast_late(labels_ahead, due_at));
        if !breached && !wholly_late && self.forecast_late(self.labels_ahead, due_at) {
            self.requests.push(request(SlotNeed::Every));
            return;
        }
        let only_short_of_window = !breached && !wholly_late;
        let (mut at_risk, mut unescalated) = (0, 0);
        for group in &groups {
            let (tasks, escalated) = if only_short_of_window {
                (group.short_of_window, group.short_of_window_escalated)
            } else {
                (group.tasks, group.escalated)
            };
            if breached {
                self.count_at_risk(&group.queue, 0, tasks);
            } else {
                self.count_at_risk(&group.queue, tasks, 0);
            }
            at_risk += tasks;
            unescalated += tasks.saturating_sub(escalated);
        }
        self.figures.unescalated += unescalated;
        let named_already = self.requested_at_risk >= AT_RISK_LISTED as u64
            && self.requested_unescalated >= ESCALATIONS_NAMED as u64;
        if at_risk > 0 && !named_already {
            self.requested_at_risk += at_risk;
            self.requested_unescalated += unescalated;
            self.requests.push(request(SlotNeed::AtRisk {
                only_short_of_window,
                unescalated,
            }));
        }
    }
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
        assert_eq!(scan.figures.backlog_tasks, 5);
        assert_eq!(scan.figures.backlog_labels, 50);
        assert_eq!(scan.forecast_hours(), Some(5.0));
        // Deadlines three hours out: tasks 4 and 5 will be late.
        assert_eq!(scan.figures.at_risk, 2);
        assert_eq!(scan.figures.to_escalate, vec![TaskId(4), TaskId(5)]);
        assert_eq!(scan.figures.breached, 0);
        assert!(scan.figures.listed[0].why.contains("forecast"));
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
        assert_eq!((scan.figures.at_risk, scan.figures.breached), (1, 2));
        assert_eq!(
            scan.figures.to_escalate,
            vec![TaskId(1), TaskId(2)],
            "escalated tasks are not raised twice"
        );
        assert_eq!(scan.figures.unescalated, 2);
        assert_eq!(scan.forecast_hours(), None, "nobody is labelling");
        assert_eq!(
            scan.figures.queues_at_risk.get("qa"),
            Some(&QueueRisk {
                at_risk: 1,
                breached: 2
            })
        );
        assert_eq!(scan.figures.ages, [0, 1, 0, 1, 2, 0]);
        assert!(scan.figures.listed[0]
            .why
            .starts_with("2% of its SLA window"));
    }

    #[test]
    fn short_of_window_is_under_a_quarter_left() {
        let created = NOW - 36 * HOUR_MS;
        assert!(!short_of_window(created, NOW + 12 * HOUR_MS, NOW));
        assert!(short_of_window(created, NOW + 12 * HOUR_MS - 1, NOW));
        assert!(short_of_window(NOW, NOW, NOW), "a zero window is past");
    }

    /// A small deterministic generator (xorshift), so the test needs no crate.
    struct Draw(u64);
    impl Draw {
        fn below(&mut self, bound: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % bound
        }
    }

    fn serving_order(tasks: &mut [OpenTask]) {
        tasks.sort_by_key(|task| (-task.priority, task.due_at, task.id));
    }

    /// What the store's group query returns for `tasks`.
    fn groups_of(tasks: &[OpenTask]) -> Vec<OpenGroup> {
        let mut groups: BTreeMap<(i64, i64, String), OpenGroup> = BTreeMap::new();
        for task in tasks {
            let group = groups
                .entry((-task.priority, task.due_at, task.queue.clone()))
                .or_insert_with(|| OpenGroup {
                    queue: task.queue.clone(),
                    priority: task.priority,
                    due_at: task.due_at,
                    ..OpenGroup::default()
                });
            let short = short_of_window(task.created_at, task.due_at, NOW);
            group.tasks += 1;
            group.labels_missing += task.labels_missing.max(0) as u64;
            group.escalated += u64::from(task.escalated);
            group.short_of_window += u64::from(short);
            group.short_of_window_escalated += u64::from(short && task.escalated);
            for (bucket, (_, upper)) in AGE_BUCKETS[..AGE_BUCKETS.len() - 1].iter().enumerate() {
                group.younger_than[bucket] += u64::from(NOW - task.created_at < *upper);
            }
        }
        groups.into_values().collect()
    }

    /// What the store's slot query returns: the slot's tasks in id order with their running
    /// shortfall, filtered after it is summed, at most `limit`.
    fn slot_tasks(
        tasks: &[OpenTask],
        request: &SlotRequest,
        only_short: bool,
        only_unescalated: bool,
        limit: usize,
    ) -> Vec<SlotTask> {
        let mut through = 0;
        tasks
            .iter()
            .filter(|task| (task.priority, task.due_at) == (request.priority, request.due_at))
            .map(|task| {
                through += task.labels_missing.max(0) as u64;
                SlotTask {
                    task: task.clone(),
                    missing_through: through,
                }
            })
            .filter(|slot_task| {
                let task = &slot_task.task;
                (!only_short || short_of_window(task.created_at, task.due_at, NOW))
                    && (!only_unescalated || !task.escalated)
            })
            .take(limit)
            .collect()
    }

    /// The grouped scan the way the engine drives it against the store.
    fn grouped_scan(tasks: &[OpenTask], labels_per_hour: f64) -> QueueScan {
        let mut scan = QueueScan::new(NOW, labels_per_hour);
        for group in groups_of(tasks) {
            scan.visit_group(group);
        }
        for request in scan.finish_groups() {
            match request.need {
                SlotNeed::Every => {
                    let every = slot_tasks(tasks, &request, false, false, usize::MAX);
                    scan.take_slot(&request, &every);
                }
                SlotNeed::AtRisk {
                    only_short_of_window,
                    unescalated,
                } => {
                    let (listed, escalated) = scan.still_named();
                    if listed > 0 {
                        let first =
                            slot_tasks(tasks, &request, only_short_of_window, false, listed);
                        scan.name_at_risk(&request, &first);
                    }
                    if escalated > 0 && unescalated > 0 {
                        let first =
                            slot_tasks(tasks, &request, only_short_of_window, true, escalated);
                        let ids: Vec<TaskId> = first.iter().map(|t| t.task.id).collect();
                        scan.name_for_escalation(&ids);
                    }
                }
            }
        }
        scan
    }

    #[test]
    fn groups_give_the_figures_of_the_task_by_task_scan() {
        let mut draw = Draw(0x2545_F491_4F6C_DD1D);
        for round in 0..300 {
            let count = 1 + draw.below(if round % 10 == 0 { 3_000 } else { 200 }) as i64;
            // Few priorities and deadlines, so slots hold many tasks of several queues.
            let mut tasks: Vec<OpenTask> = (1..=count)
                .map(|id| {
                    let due_at = NOW + (draw.below(12) as i64 - 3) * 4 * HOUR_MS;
                    OpenTask {
                        id: TaskId(id),
                        queue: ["qa", "code", "chat"][draw.below(3) as usize].into(),
                        priority: 1 + draw.below(3) as i64,
                        created_at: due_at - draw.below(96) as i64 * HOUR_MS,
                        due_at,
                        labels_missing: draw.below(4) as i64 - 1,
                        escalated: draw.below(4) == 0,
                    }
                })
                .collect();
            serving_order(&mut tasks);
            let labels_per_hour = [0.0, 0.5, 3.0, 40.0][draw.below(4) as usize];
            let mut reference = QueueScan::new(NOW, labels_per_hour);
            for task in &tasks {
                reference.visit(task);
            }
            let grouped = grouped_scan(&tasks, labels_per_hour);
            assert_eq!(grouped.figures, reference.figures, "round {round}");
            assert_eq!(grouped.forecast_hours(), reference.forecast_hours());
        }
    }

    #[test]
    fn only_slots_that_cross_their_deadline_or_name_tasks_are_read() {
        // 10,000 tasks in 100 slots of 100, one label each, deadlines an hour apart; at 60
        // labels an hour slot k starts after 100 k / 60 hours against a deadline k + 1 hours
        // out. Slots 0 and 1 cross their deadlines (60 and 20 tasks on time), every later one
        // is late: the next ten escalate 1,000 tasks, and none after those are read.
        let tasks: Vec<OpenTask> = (0..10_000)
            .map(|index| {
                let due_at = NOW + (index / 100 + 1) * HOUR_MS;
                OpenTask {
                    id: TaskId(index + 1),
                    queue: "qa".into(),
                    priority: 1,
                    created_at: NOW,
                    due_at,
                    labels_missing: 1,
                    escalated: false,
                }
            })
            .collect();
        let mut scan = QueueScan::new(NOW, 60.0);
        for group in groups_of(&tasks) {
            scan.visit_group(group);
        }
        let requests = scan.finish_groups();
        assert_eq!(
            scan.figures.at_risk, 9_800,
            "the crossing slots are counted once read"
        );
        assert_eq!(
            (requests[0].need, requests[1].need),
            (SlotNeed::Every, SlotNeed::Every)
        );
        assert!(
            requests.len() <= 12,
            "{} slots asked for, of 100",
            requests.len()
        );
        let grouped = grouped_scan(&tasks, 60.0);
        assert_eq!(grouped.figures.at_risk, 10_000 - 80);
        assert_eq!(grouped.figures.to_escalate.len(), ESCALATIONS_NAMED);
    }
}
