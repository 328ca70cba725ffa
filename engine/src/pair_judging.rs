//! Pairwise judges in front of raters: a pair request that names a pairwise judge has each of
//! its pairs judged first, in both orders (see [`arbiter_domain::grading::pairwise`]). A pair the
//! judge decides (both orders agreeing, confident enough) needs no rater, except an audit
//! sample that raters label anyway to calibrate the judge; every other pair goes to raters.
//! Run by a background job; pairs are claimed in the store, so several processes never judge
//! the same pair, and a claim left by a process that died is taken over.

use std::sync::Arc;

use futures::StreamExt;

use crate::dispatch::{judge_pair_order, EndpointPool, RetryPolicy, Target};
use crate::error::ServiceResult;
use crate::grading::freeze_judge;
use arbiter_domain::annotation::adjudication::stable_draw;
use arbiter_domain::checkpoint::TokenPrices;
use arbiter_domain::grading::judge::JudgeSpec;
use arbiter_domain::grading::pairwise::{
    calibrate_pairwise, combine_orders, render_pairwise_prompt, CheckedPair, OrderReading,
    PairwiseCalibration,
};
use arbiter_domain::ids::IdentityId;
use arbiter_store::preferences::{NewPairJudgement, PairToJudge};
use arbiter_store::{now_ms, Store};
use serde::Serialize;

/// A pair claimed this long ago and not judged belongs to a process that died, or was left
/// to be tried again (its judge's endpoint failed): well above a round's longest calls.
pub const STALE_PAIR_CLAIM_MS: i64 = 30 * 60 * 1000;
/// A pair whose judge's endpoint has failed for this long since the pair was sent goes to
/// raters instead of waiting on.
pub const GIVE_UP_ON_JUDGE_MS: i64 = 2 * 3_600_000;
/// Pairs claimed per round.
const PAIRS_PER_ROUND: i64 = 32;
/// Pairs judged at once (each two calls).
const CONCURRENT_PAIRS: usize = 8;

/// A pairwise judge as asked this round: its frozen spec and its endpoints.
type FrozenJudge = (JudgeSpec, Target);

/// One order's reply as recorded beside the judgement.
#[derive(Serialize)]
struct OrderRecord<'a> {
    reply: &'a str,
    reading: &'a OrderReading,
}

/// Judges the next pairs waiting for their pairwise judge; how many were recorded.
pub async fn judge_waiting_pairs(store: &Arc<dyn Store>, worker: &str) -> ServiceResult<usize> {
    let now = now_ms();
    let pairs = store
        .claim_pairs_to_judge(worker, now, now - STALE_PAIR_CLAIM_MS, PAIRS_PER_ROUND)
        .await?;
    if pairs.is_empty() {
        return Ok(0);
    }
    let pool = EndpointPool::new(store.clone(), RetryPolicy::default());
    // Each judge frozen once per round (its served model probed once); one that cannot be
    // (its checkpoint is gone) sends its pairs to raters with the reason.
    let mut judges: Vec<(i64, Result<Arc<FrozenJudge>, String>)> = Vec::new();
    for pair in &pairs {
        let id = pair.judging.judge_id;
        if judges.iter().all(|(known, _)| *known != id) {
            let frozen = freeze_judge(store.as_ref(), id).await.map(|spec| {
                let target = Target {
                    endpoint_urls: spec.endpoint_urls.clone(),
                    fallback: None,
                    // Pair judging belongs to no run: its calls are priced into no run's costs.
                    prices: TokenPrices::default(),
                    fallback_prices: TokenPrices::default(),
                    load: None,
                };
                Arc::new((spec, target))
            });
            judges.push((id, frozen.map_err(|err| format!("judge failure: {err}"))));
        }
    }
    let calls: Vec<_> = pairs
        .into_iter()
        .map(|pair| {
            let judge = judges
                .iter()
                .find(|(id, _)| *id == pair.judging.judge_id)
                .map(|(_, judge)| judge.clone())
                .expect("every pair's judge is frozen above");
            let (store, pool) = (store.clone(), pool.clone());
            async move {
                let task_id = pair.task_id;
                let judged = match judge {
                    Ok(judge) => judge_pair(&store, &pool, &judge, pair).await,
                    Err(failure) => Ok(Judged::Record(unjudged(&pair, failure))),
                };
                // Each judgement recorded as soon as it is made, so a slow round loses none.
                let recorded = match judged {
                    Ok(Judged::Record(judgement)) => store
                        .record_pair_judgement(worker, &judgement)
                        .await
                        .map_err(|err| err.to_string()),
                    Ok(Judged::Later(why)) => {
                        tracing::info!(task_id, %why, "pair judging tried again later");
                        Ok(false)
                    }
                    Err(err) => Err(err.to_string()),
                };
                recorded.unwrap_or_else(|err| {
                    // Left claimed: the pair is tried again once the claim is stale.
                    tracing::warn!(task_id, error = %err, "judging a pair failed");
                    false
                })
            }
        })
        .collect();
    let recorded = futures::stream::iter(calls)
        .buffer_unordered(CONCURRENT_PAIRS)
        .filter(|recorded| std::future::ready(*recorded))
        .count()
        .await;
    Ok(recorded)
}

/// What judging a pair came to.
enum Judged {
    Record(NewPairJudgement),
    /// The judge's endpoint failed: the pair stays claimed and is tried again once the claim
    /// is stale (why it failed).
    Later(String),
}

/// Asks the judge about one pair in both orders and decides what becomes of it: decided by the
/// judge, sent to raters, or (its endpoint failing, for less than [`GIVE_UP_ON_JUDGE_MS`])
/// tried again later.
async fn judge_pair(
    store: &Arc<dyn Store>,
    pool: &Arc<EndpointPool>,
    judge: &FrozenJudge,
    pair: PairToJudge,
) -> ServiceResult<Judged> {
    let (spec, target) = judge;
    // The judge reads the question as the eval sent it (the pair's left answer's request).
    let question = match pair.identity_id {
        Some(identity) => crate::runs::question_as_sent(store.as_ref(), IdentityId(identity))
            .await?
            .unwrap_or_else(|| pair.input.clone()),
        None => pair.input.clone(),
    };
    // A prompt too long to send never will be; an endpoint that failed may answer later.
    let ask = |first: &str, second: &str| {
        let prompt = render_pairwise_prompt(&spec.rubric, &question, first, second);
        async move {
            match prompt {
                Ok(prompt) => judge_pair_order(pool, spec, target, prompt)
                    .await
                    .map_err(|failure| (true, failure)),
                Err(too_long) => Err((false, too_long)),
            }
        }
    };
    let (left_first, right_first) = futures::join!(
        ask(&pair.left_output, &pair.right_output),
        ask(&pair.right_output, &pair.left_output)
    );
    let endpoint_failed = [&left_first, &right_first]
        .into_iter()
        .any(|answer| matches!(answer, Err((true, _))));
    let waited = now_ms() - pair.sent_at;
    if endpoint_failed && waited < GIVE_UP_ON_JUDGE_MS {
        let why = [&left_first, &right_first]
            .into_iter()
            .find_map(|answer| answer.as_ref().err().map(|(_, why)| why.clone()))
            .unwrap_or_default();
        return Ok(Judged::Later(why));
    }
    let left_first = left_first.map_err(|(_, why)| why);
    let right_first = right_first.map_err(|(_, why)| why);
    let unread = OrderReading {
        choice: None,
        probabilities: None,
    };
    let failure = left_first
        .as_ref()
        .err()
        .or(right_first.as_ref().err())
        .cloned();
    let record = |answer: &Result<(String, OrderReading), String>| {
        let (reply, reading) = match answer {
            Ok((reply, reading)) => (reply.as_str(), reading),
            Err(why) => (why.as_str(), &unread),
        };
        serde_json::to_string(&OrderRecord { reply, reading }).expect("records always serialize")
    };
    let reading = |answer: &Result<(String, OrderReading), String>| {
        answer
            .as_ref()
            .map_or_else(|_| unread.clone(), |(_, reading)| reading.clone())
    };
    let verdict = combine_orders(&reading(&left_first), &reading(&right_first));
    let decided = failure.is_none() && verdict.decides(pair.judging.threshold);
    let audited = decided && stable_draw("pair-audit", pair.task_id) < pair.judging.audit_rate;
    Ok(Judged::Record(NewPairJudgement {
        task_id: pair.task_id,
        judge_id: pair.judging.judge_id,
        left_first: record(&left_first),
        right_first: record(&right_first),
        verdict,
        decided,
        audited,
        failure,
    }))
}

/// A pair the judge could not be asked about: it goes to raters, with the reason kept.
fn unjudged(pair: &PairToJudge, failure: String) -> NewPairJudgement {
    let unread = OrderReading {
        choice: None,
        probabilities: None,
    };
    let record = serde_json::to_string(&OrderRecord {
        reply: &failure,
        reading: &unread,
    })
    .expect("records always serialize");
    NewPairJudgement {
        task_id: pair.task_id,
        judge_id: pair.judging.judge_id,
        left_first: record.clone(),
        right_first: record,
        verdict: combine_orders(&unread, &unread),
        decided: false,
        audited: false,
        failure: Some(failure),
    }
}

/// Each pairwise judge's calibration against the raters' decided pairs, by grader id.
pub async fn pairwise_calibrations(
    store: &dyn Store,
) -> ServiceResult<Vec<(String, PairwiseCalibration)>> {
    let judged = store.judged_pairs(None).await?;
    let mut judge_ids: Vec<i64> = judged.iter().map(|pair| pair.judge_id).collect();
    judge_ids.sort_unstable();
    judge_ids.dedup();
    let mut calibrations = Vec::with_capacity(judge_ids.len());
    for judge_id in judge_ids {
        let checked: Vec<CheckedPair> = judged
            .iter()
            .filter(|pair| pair.judge_id == judge_id)
            .map(|pair| CheckedPair {
                verdict: pair.verdict.clone(),
                human: pair.human,
                // An audited pair stands for the ones the judge decided alone.
                weight: pair
                    .audited_at
                    .filter(|share| *share > 0.0)
                    .map_or(1.0, |share| 1.0 / share),
            })
            .collect();
        let name = store
            .get_judge(judge_id)
            .await?
            .map_or_else(|| format!("judge {judge_id}"), |judge| judge.grader_id());
        calibrations.push((name, calibrate_pairwise(&checked)));
    }
    Ok(calibrations)
}
