//! Storage lifecycle: raw answers and logprobs are kept for a period (a year by default), a
//! run's aggregated results — verdicts, tallies, report snapshot, decisions — longer (three
//! years), then the run goes. A scheduled job enforces the policy and reports what it removed;
//! archives should be exported first (`arbiter export --format parquet`).
//!
//! Age counts from when a run completed; cancelled runs (which can be resumed) are kept.
//! Logprobs that a newer run's cached answer still reads are kept until that run expires too,
//! and a run is not deleted while another run still uses its answers or a promotion decision
//! ties it to a run that has not expired.

use arbiter_domain::ids::RunId;
use serde::{Deserialize, Serialize};

use crate::error::{ServiceError, ServiceResult};
use arbiter_store::Store;

pub const SETTING_RAW_DAYS: &str = "retention_raw_days";
pub const SETTING_SUMMARY_DAYS: &str = "retention_summary_days";
/// The last enforcement's report, as JSON, for the System page.
pub const SETTING_LAST_REPORT: &str = "retention_last_report";
const DAY_MS: i64 = 86_400_000;
/// Runs handled per step, each in its own transaction, so a backlog of expired runs is worked
/// off without one long lock.
const RUNS_PER_STEP: i64 = 50;
/// Finished webhook deliveries are kept this long for the System page's list.
const DELIVERIES_KEPT_MS: i64 = 30 * DAY_MS;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    /// Days a run's raw answers and logprobs are kept after it finished.
    pub raw_days: i64,
    /// Days a run's summaries (and the run) are kept after it finished.
    pub summary_days: i64,
}

impl Default for RetentionPolicy {
    fn default() -> RetentionPolicy {
        RetentionPolicy {
            raw_days: 365,
            summary_days: 3 * 365,
        }
    }
}

impl RetentionPolicy {
    /// Checks typed day counts: raw data at least a day, summaries at least as long as raw data.
    pub fn parse(raw_days: &str, summary_days: &str) -> Result<RetentionPolicy, String> {
        let days = |text: &str, what: &str| {
            text.trim()
                .parse::<i64>()
                .ok()
                .filter(|days| (1..=36_500).contains(days))
                .ok_or_else(|| {
                    format!(
                        "{what} must be a whole number of days from 1 to 36500, not `{}`",
                        text.trim()
                    )
                })
        };
        let policy = RetentionPolicy {
            raw_days: days(raw_days, "the raw answer retention")?,
            summary_days: days(summary_days, "the summary retention")?,
        };
        if policy.summary_days < policy.raw_days {
            return Err(format!(
                "summaries are kept at least as long as raw answers ({} days), not {} days",
                policy.raw_days, policy.summary_days
            ));
        }
        Ok(policy)
    }
}

/// What one enforcement removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionReport {
    pub ran_at: i64,
    pub policy: Option<RetentionPolicy>,
    /// Runs whose raw answers were removed.
    pub runs_raw_purged: u64,
    pub generations_cleared: u64,
    pub logprobs_deleted: u64,
    pub cache_entries_deleted: u64,
    pub logprobs_kept_in_use: u64,
    pub runs_deleted: u64,
    pub rows_deleted: u64,
    /// Expired runs kept because a newer run still uses them.
    pub runs_kept_in_use: u64,
    /// Finished webhook deliveries older than 30 days.
    #[serde(default)]
    pub webhook_deliveries_pruned: u64,
}

impl RetentionReport {
    pub fn summary(&self) -> String {
        format!(
            "raw answers removed from {} run(s) ({} answers cleared, {} logprob rows and {} cache entries deleted, {} logprob rows kept for newer runs); {} run(s) deleted ({} rows), {} kept because newer runs still use them; {} old webhook deliveries pruned",
            self.runs_raw_purged,
            self.generations_cleared,
            self.logprobs_deleted,
            self.cache_entries_deleted,
            self.logprobs_kept_in_use,
            self.runs_deleted,
            self.rows_deleted,
            self.runs_kept_in_use,
            self.webhook_deliveries_pruned
        )
    }
}

pub async fn policy(store: &dyn Store) -> ServiceResult<RetentionPolicy> {
    let defaults = RetentionPolicy::default();
    let raw = store.setting(SETTING_RAW_DAYS).await?;
    let summary = store.setting(SETTING_SUMMARY_DAYS).await?;
    Ok(RetentionPolicy::parse(
        &raw.unwrap_or_else(|| defaults.raw_days.to_string()),
        &summary.unwrap_or_else(|| defaults.summary_days.to_string()),
    )
    .unwrap_or(defaults))
}

pub async fn set_policy(
    store: &dyn Store,
    raw_days: &str,
    summary_days: &str,
) -> ServiceResult<RetentionPolicy> {
    let policy = RetentionPolicy::parse(raw_days, summary_days).map_err(ServiceError::Invalid)?;
    store
        .set_settings(&[
            (SETTING_RAW_DAYS, policy.raw_days.to_string()),
            (SETTING_SUMMARY_DAYS, policy.summary_days.to_string()),
        ])
        .await?;
    Ok(policy)
}

/// Applies `policy` at `now` and keeps the report.
pub async fn enforce(
    store: &dyn Store,
    policy: RetentionPolicy,
    now: i64,
) -> ServiceResult<RetentionReport> {
    let raw_cutoff = now - policy.raw_days * DAY_MS;
    let summary_cutoff = now - policy.summary_days * DAY_MS;
    let mut report = RetentionReport {
        ran_at: now,
        policy: Some(policy),
        ..RetentionReport::default()
    };
    // Whole runs first, so their raw answers are not cleared just before they go.
    let mut kept = std::collections::HashSet::new();
    loop {
        let expired: Vec<RunId> = store
            .runs_finished_before(summary_cutoff, RUNS_PER_STEP + kept.len() as i64)
            .await?
            .into_iter()
            .filter(|run| !kept.contains(run))
            .collect();
        if expired.is_empty() {
            break;
        }
        for run in expired {
            if store.run_in_use(run, summary_cutoff).await? {
                kept.insert(run);
                report.runs_kept_in_use += 1;
                continue;
            }
            let deleted = store.delete_run(run).await?;
            if deleted > 0 {
                report.rows_deleted += deleted;
                report.runs_deleted += 1;
            } else {
                kept.insert(run);
            }
        }
    }
    loop {
        let runs = store
            .runs_with_raw_before(raw_cutoff, RUNS_PER_STEP)
            .await?;
        if runs.is_empty() {
            break;
        }
        for run in runs {
            let purged = store.purge_raw_outputs(run, raw_cutoff, now).await?;
            report.runs_raw_purged += 1;
            report.generations_cleared += purged.generations_cleared;
            report.logprobs_deleted += purged.logprobs_deleted;
            report.cache_entries_deleted += purged.cache_entries_deleted;
            report.logprobs_kept_in_use += purged.logprobs_kept_in_use;
        }
    }
    report.webhook_deliveries_pruned = store
        .prune_webhook_deliveries(now - DELIVERIES_KEPT_MS)
        .await?;
    let json = serde_json::to_string(&report).unwrap_or_default();
    store.set_setting(SETTING_LAST_REPORT, &json).await?;
    Ok(report)
}

/// The last enforcement's report, if any ran.
pub async fn last_report(store: &dyn Store) -> ServiceResult<Option<RetentionReport>> {
    Ok(store
        .setting(SETTING_LAST_REPORT)
        .await?
        .and_then(|json| serde_json::from_str(&json).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_keep_summaries_at_least_as_long_as_raw_answers() {
        assert_eq!(
            RetentionPolicy::default(),
            RetentionPolicy::parse("365", "1095").unwrap()
        );
        assert!(RetentionPolicy::parse("30", "10")
            .unwrap_err()
            .contains("at least as long"));
        assert!(RetentionPolicy::parse("0", "10")
            .unwrap_err()
            .contains("raw answer"));
        assert!(RetentionPolicy::parse("30", "x")
            .unwrap_err()
            .contains("summary"));
        assert_eq!(RetentionPolicy::parse(" 30 ", "30").unwrap().raw_days, 30);
    }
}
