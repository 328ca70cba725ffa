//! One launch of a checkpoint's servers: requested when the checkpoint is served (or a run
//! needs it again), started, healthy, restarted if a replica dies, then retired once its runs
//! are done and it has been idle a while; or failed, with its log's tail, when it never
//! became healthy. Its runs are worked only while it is healthy.

use super::plan::ServingPlan;
use crate::ids::CheckpointId;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LaunchState {
    /// Waiting for its launcher to start it.
    Requested,
    /// Started; not every replica answers `/health` yet.
    Starting,
    Healthy,
    /// A replica died and is being started again.
    Restarting,
    Retired,
    Failed,
    /// Its canary was far from its predecessor's: servers stopped, its runs paused.
    Held,
}

impl LaunchState {
    pub const ALL: [LaunchState; 7] = [
        LaunchState::Requested,
        LaunchState::Starting,
        LaunchState::Healthy,
        LaunchState::Restarting,
        LaunchState::Retired,
        LaunchState::Failed,
        LaunchState::Held,
    ];
    /// The states a launch holds its checkpoint's servers in (one such launch at a time).
    pub const LIVE: [LaunchState; 4] = [
        LaunchState::Requested,
        LaunchState::Starting,
        LaunchState::Healthy,
        LaunchState::Restarting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LaunchState::Requested => "requested",
            LaunchState::Starting => "starting",
            LaunchState::Healthy => "healthy",
            LaunchState::Restarting => "restarting",
            LaunchState::Retired => "retired",
            LaunchState::Failed => "failed",
            LaunchState::Held => "held",
        }
    }

    pub fn parse(text: &str) -> Option<LaunchState> {
        LaunchState::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
    }

    pub fn is_live(self) -> bool {
        LaunchState::LIVE.contains(&self)
    }
}

/// A launch as the Checkpoints page and the API show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Launch {
    pub id: i64,
    pub checkpoint_id: CheckpointId,
    pub checkpoint_name: String,
    pub launcher: String,
    pub plan: ServingPlan,
    pub urls: Vec<String>,
    pub state: LaunchState,
    pub requested_at: i64,
    pub started_at: Option<i64>,
    pub healthy_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub restarts: i64,
    /// Why it failed, or the last replica death it recovered from.
    pub failure: Option<String>,
    /// The last lines of the servers' logs, kept when it failed, restarted or retired.
    pub log_tail: Option<String>,
    /// The serving canary's reading, on a checkpoint's first launch.
    pub canary: Option<super::canary::CanaryReading>,
}

/// Where a launch's start-up time went, in milliseconds: waiting for its launcher, then
/// loading until every replica answered its health check. Generation time is apart: from
/// healthy to retired (or now).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StartupTimes {
    pub queue_ms: Option<i64>,
    pub load_ms: Option<i64>,
    pub startup_ms: Option<i64>,
    pub serving_ms: Option<i64>,
}

impl Launch {
    pub fn startup(&self, now: i64) -> StartupTimes {
        let queue_ms = self.started_at.map(|started| started - self.requested_at);
        let load_ms = self
            .started_at
            .zip(self.healthy_at)
            .map(|(started, healthy)| healthy - started);
        StartupTimes {
            queue_ms,
            load_ms,
            startup_ms: self.healthy_at.map(|healthy| healthy - self.requested_at),
            serving_ms: self
                .healthy_at
                .map(|healthy| self.ended_at.unwrap_or(now).max(healthy) - healthy),
        }
    }
}

/// A launch with where its start-up time went, as pages and the API show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LaunchView {
    #[serde(flatten)]
    pub launch: Launch,
    pub times: StartupTimes,
    /// The layout as recorded on the checkpoint (`tp=… dp=…`).
    pub layout: String,
    /// A live launch's work: at most this many tokens still to generate for its checkpoint's
    /// unfinished runs (answers left × each run's max_tokens).
    #[serde(default)]
    pub tokens_to_generate: Option<u64>,
    /// Seconds those tokens take at the plan's sustained rate on every replica (plus start-up
    /// while the servers are not yet healthy); `None` without a rate.
    #[serde(default)]
    pub expected_s: Option<f64>,
}

impl LaunchView {
    pub fn of(launch: Launch, now: i64) -> LaunchView {
        LaunchView {
            times: launch.startup(now),
            layout: launch.plan.layout(),
            launch,
            tokens_to_generate: None,
            expected_s: None,
        }
    }

    /// With the tokens a live launch's runs still generate, and the time they take.
    pub fn with_work(self, tokens: u64) -> LaunchView {
        let expected_s = match self.launch.state {
            LaunchState::Healthy => self
                .launch
                .plan
                .expected_seconds(tokens)
                .map(|seconds| seconds - self.launch.plan.startup_s),
            _ => self.launch.plan.expected_seconds(tokens),
        };
        LaunchView {
            tokens_to_generate: Some(tokens),
            expected_s,
            ..self
        }
    }
}

/// How long a launcher waits for health and how it treats deaths and idleness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchPolicy {
    /// From start to every replica healthy, before the launch fails.
    pub health_timeout_ms: i64,
    /// With no unfinished run on its checkpoint for this long, a launch is retired.
    pub idle_ms: i64,
    /// Restarts after a replica died, before the launch fails instead.
    pub max_restarts: i64,
}

impl Default for LaunchPolicy {
    fn default() -> Self {
        LaunchPolicy {
            health_timeout_ms: 15 * 60 * 1000,
            idle_ms: 5 * 60 * 1000,
            max_restarts: 3,
        }
    }
}

impl LaunchPolicy {
    /// Whether a launch started at `started_at` has waited too long for its health checks.
    pub fn health_overdue(&self, started_at: i64, now: i64) -> bool {
        now - started_at > self.health_timeout_ms
    }

    /// Whether a healthy launch is idle long enough to retire: no unfinished run on its
    /// checkpoint, and none finished (nor the launch became healthy) within the idle period.
    pub fn idle_enough(&self, unfinished_runs: i64, last_activity: i64, now: i64) -> bool {
        unfinished_runs == 0 && now - last_activity >= self.idle_ms
    }
}

/// The most of a log a launch keeps.
pub const LOG_TAIL_LINES: usize = 40;
const LOG_TAIL_BYTES: usize = 8 * 1024;

/// The last [`LOG_TAIL_LINES`] lines of `log` (at most 8 KiB, cut at a character boundary).
pub fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.len() <= LOG_TAIL_BYTES {
        return tail;
    }
    let mut start = tail.len() - LOG_TAIL_BYTES;
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    tail[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::ServingEngine;

    fn launch() -> Launch {
        Launch {
            id: 1,
            checkpoint_id: CheckpointId(1),
            checkpoint_name: "c".into(),
            launcher: "local".into(),
            plan: crate::serving::plan::plan(ServingEngine::Simulator, &Default::default())
                .unwrap(),
            urls: vec![],
            state: LaunchState::Healthy,
            requested_at: 1_000,
            started_at: Some(1_500),
            healthy_at: Some(4_000),
            ended_at: None,
            restarts: 0,
            failure: None,
            log_tail: None,
            canary: None,
        }
    }

    #[test]
    fn start_up_is_split_into_queue_and_load_and_kept_apart_from_serving() {
        let times = launch().startup(10_000);
        assert_eq!(times.queue_ms, Some(500));
        assert_eq!(times.load_ms, Some(2_500));
        assert_eq!(times.startup_ms, Some(3_000));
        assert_eq!(times.serving_ms, Some(6_000));
        let retired = Launch {
            ended_at: Some(8_000),
            ..launch()
        };
        assert_eq!(retired.startup(10_000).serving_ms, Some(4_000));
        let waiting = Launch {
            started_at: None,
            healthy_at: None,
            ..launch()
        };
        assert_eq!(waiting.startup(10_000), StartupTimes::default());
    }

    #[test]
    fn a_live_launch_expects_its_remaining_tokens_at_the_plans_rate() {
        let mut plan = launch().plan;
        plan.sustained_tokens_per_s = Some(100.0);
        plan.replicas = 2;
        plan.startup_s = 30.0;
        let healthy = LaunchView::of(
            Launch {
                plan: plan.clone(),
                ..launch()
            },
            10_000,
        )
        .with_work(2_000);
        assert_eq!(
            (healthy.tokens_to_generate, healthy.expected_s),
            (Some(2_000), Some(10.0))
        );
        let starting = LaunchView::of(
            Launch {
                plan,
                state: LaunchState::Starting,
                ..launch()
            },
            10_000,
        )
        .with_work(2_000);
        assert_eq!(
            starting.expected_s,
            Some(40.0),
            "start-up counts until healthy"
        );
        assert_eq!(LaunchView::of(launch(), 0).with_work(5).expected_s, None);
    }

    #[test]
    fn idleness_and_health_deadlines() {
        let policy = LaunchPolicy {
            health_timeout_ms: 1_000,
            idle_ms: 500,
            max_restarts: 1,
        };
        assert!(!policy.health_overdue(0, 1_000));
        assert!(policy.health_overdue(0, 1_001));
        assert!(policy.idle_enough(0, 100, 600));
        assert!(!policy.idle_enough(0, 200, 600));
        assert!(!policy.idle_enough(1, 0, 10_000));
        for state in LaunchState::ALL {
            assert_eq!(LaunchState::parse(state.as_str()), Some(state));
        }
        assert!(!LaunchState::Failed.is_live() && LaunchState::Restarting.is_live());
    }

    #[test]
    fn a_log_tail_keeps_the_last_lines_within_its_size() {
        let log: String = (0..100).map(|line| format!("line {line}\n")).collect();
        let tail = log_tail(&log);
        assert!(tail.starts_with("line 60\n") && tail.ends_with("line 99"));
        let long = "é".repeat(10_000);
        let tail = log_tail(&long);
        assert!(tail.len() <= 8 * 1024 && tail.chars().all(|c| c == 'é'));
    }
}
