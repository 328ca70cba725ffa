//! The drift canary: each new version of a judge re-grades its previous version's reference set
//! (see [`arbiter_domain::grading::canary`]) before anyone relies on it, and a version that
//! drifted raises an alert. Run by a background job; each canary is claimed in the store, so
//! several processes never run the same one.

use std::sync::Arc;

use futures::StreamExt;

use crate::dispatch::{judge_verdict, EndpointPool, RetryPolicy, Target};
use crate::error::{ServiceError, ServiceResult};
use crate::grading::freeze_judge;
use arbiter_domain::checkpoint::TokenPrices;
use arbiter_domain::grading::canary::{
    drift_report, CanaryItem, DriftReport, ReferenceItem, REFERENCE_ITEMS,
};
use arbiter_domain::grading::judge::Judge;
use arbiter_domain::health::ALERT_JUDGE_DRIFT;
use arbiter_store::grading::CanaryEnd;
use arbiter_store::{now_ms, Store};

/// A canary claimed this long ago and not finished belongs to a process that died.
pub const STALE_CANARY_MS: i64 = 30 * 60 * 1000;
/// Reference items asked at once.
const CONCURRENT_CALLS: usize = 8;
/// Share of the reference calls that may fail at the endpoint before the canary fails instead
/// of reporting: an outage is not drift.
const MAX_OUTAGE_SHARE: f64 = 0.1;

/// What one canary round did.
#[derive(Clone, Debug, PartialEq)]
pub enum CanaryRound {
    /// No judge version waits for its canary.
    Idle,
    Done {
        judge_id: i64,
        report: DriftReport,
    },
    Failed {
        judge_id: i64,
        error: String,
    },
}

/// Runs the next waiting canary, if any, to its end.
pub async fn run_next_canary(store: &Arc<dyn Store>, worker: &str) -> ServiceResult<CanaryRound> {
    let now = now_ms();
    let Some((judge_id, baseline_id)) = store
        .claim_judge_canary(worker, now, now - STALE_CANARY_MS)
        .await?
    else {
        return Ok(CanaryRound::Idle);
    };
    let (end, round) = match regrade_reference_set(store, judge_id, baseline_id).await {
        Ok((baseline_judge_id, reference_items, report)) => (
            CanaryEnd::Done {
                baseline_judge_id,
                reference_items,
                report: report.clone(),
            },
            CanaryRound::Done { judge_id, report },
        ),
        Err(err) => {
            let error = err.to_string();
            (
                CanaryEnd::Failed {
                    error: error.clone(),
                },
                CanaryRound::Failed { judge_id, error },
            )
        }
    };
    let finished = now_ms();
    // The alert first (raising it again is harmless): a failure after the finish would lose it.
    if let (
        CanaryRound::Done { report, .. },
        CanaryEnd::Done {
            baseline_judge_id, ..
        },
    ) = (&round, &end)
    {
        if report.drifted() {
            let name = |id: i64| async move {
                Ok::<_, ServiceError>(
                    store
                        .get_judge(id)
                        .await?
                        .map_or_else(|| format!("judge {id}"), |judge| judge.grader_id()),
                )
            };
            let (subject, baseline) = (name(judge_id).await?, name(*baseline_judge_id).await?);
            let message = format!(
                "{subject} drifted from {baseline}: it {}. On {} reference items: {} failed to answer.",
                report.drift.join("; and it "),
                report.items,
                report.failures
            );
            store
                .raise_alert(ALERT_JUDGE_DRIFT, &subject, &message, finished)
                .await?;
        }
    }
    if !store
        .finish_judge_canary(judge_id, worker, &end, finished)
        .await?
    {
        // Another process took it over meanwhile; its result stands.
        return Ok(CanaryRound::Idle);
    }
    Ok(round)
}

/// The baseline a version is compared with: the newest earlier version of the judge whose
/// verdicts humans checked (a version never used in a run has no reference set), with its
/// reference set; the previous version and no items when none was checked.
async fn baseline_of(
    store: &Arc<dyn Store>,
    previous_id: i64,
) -> ServiceResult<(i64, Vec<ReferenceItem>)> {
    let previous = store
        .get_judge(previous_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no judge with id {previous_id}")))?;
    let mut earlier: Vec<Judge> = store
        .list_judges()
        .await?
        .into_iter()
        .filter(|judge| judge.name == previous.name && judge.version <= previous.version)
        .collect();
    earlier.sort_by_key(|judge| std::cmp::Reverse(judge.version));
    for judge in earlier {
        let reference = store
            .judge_reference_items(&judge.grader_id(), REFERENCE_ITEMS as i64)
            .await?;
        if !reference.is_empty() {
            return Ok((judge.id, reference));
        }
    }
    Ok((previous_id, Vec::new()))
}

/// Asks the new version about every reference item of its baseline; the baseline's id, the
/// items' ids and the drift report.
async fn regrade_reference_set(
    store: &Arc<dyn Store>,
    judge_id: i64,
    previous_id: i64,
) -> ServiceResult<(i64, Vec<i64>, DriftReport)> {
    let spec = freeze_judge(store.as_ref(), judge_id).await?;
    let (baseline_id, reference) = baseline_of(store, previous_id).await?;
    let pool = EndpointPool::new(store.clone(), RetryPolicy::default());
    let target = Target {
        endpoint_urls: spec.endpoint_urls.clone(),
        fallback: None,
        // The canary's calls are not a run's: they are not priced into any report.
        prices: TokenPrices::default(),
        fallback_prices: TokenPrices::default(),
        load: None,
    };
    // Each call owns what it needs, so the stream of calls is `Send` for the job's task.
    let (spec, target) = (Arc::new(spec), Arc::new(target));
    let calls: Vec<_> = reference
        .iter()
        .map(|item| {
            let (store, pool, spec, target) =
                (store.clone(), pool.clone(), spec.clone(), target.clone());
            let (input, output, answer_key) =
                (item.input.clone(), item.output.clone(), item.target.clone());
            async move {
                judge_verdict(
                    &store,
                    &pool,
                    &spec,
                    &target,
                    (&input, &output, &answer_key),
                )
                .await
            }
        })
        .collect();
    let answers: Vec<Result<Option<bool>, String>> = futures::stream::iter(calls)
        .buffered(CONCURRENT_CALLS)
        .collect()
        .await;
    // An endpoint that failed on more than a few items is down, not drifted: the canary fails
    // with the reason (and is tried again later) rather than reporting.
    let outages: Vec<&String> = answers
        .iter()
        .filter_map(|answer| answer.as_ref().err())
        .collect();
    if outages.len() as f64 > MAX_OUTAGE_SHARE * reference.len() as f64 {
        return Err(ServiceError::Invalid(format!(
            "{}'s endpoint failed on {} of {} reference items ({}); the canary is tried again later",
            spec.grader_id(),
            outages.len(),
            reference.len(),
            outages[0]
        )));
    }
    // A few calls lost to the endpoint leave their items out; an unreadable reply is the new
    // version's own failure and counts against it.
    let items: Vec<CanaryItem> = reference
        .iter()
        .zip(&answers)
        .filter_map(|(item, answer)| {
            Some(CanaryItem {
                old_pass: item.old_pass,
                new_pass: *answer.as_ref().ok()?,
                human_pass: item.human_pass,
            })
        })
        .collect();
    Ok((
        baseline_id,
        reference.iter().map(|item| item.work_item_id).collect(),
        drift_report(&items),
    ))
}
