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
    calibrate_pairwise, combine_orders, render_pairwise_prompt, OrderReading, PairwiseCalibration,
};
use arbiter_domain::ids::IdentityId;
use arbiter_store::preferences::{NewPairJudgement, PairToJudge};
use arbiter_store::{now_ms, Store};
use serde::Serialize;

/// A pair claimed this long ago and not judged belongs to a process that died.
pub const STALE_PAIR_CLAIM_MS: i64 = 10 * 60 * 1000;
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
                match judge {
                    Ok(judge) => judge_pair(&store, &pool, &judge, pair).await,
                    Err(failure) => Ok(unjudged(&pair, failure)),
                }
            }
        })
        .collect();
    let judgements: Vec<ServiceResult<NewPairJudgement>> = futures::stream::iter(calls)
        .buffer_unordered(CONCURRENT_PAIRS)
        .collect()
        .await;
    let mut recorded = 0;
    for judgement in judgements {
        if store.record_pair_judgement(worker, &judgement?).await? {
            recorded += 1;
        }
    }
    Ok(recorded)
}

/// Asks the judge about one pair in both orders and decides what becomes of it.
async fn judge_pair(
    store: &Arc<dyn Store>,
    pool: &Arc<EndpointPool>,
    judge: &FrozenJudge,
    pair: PairToJudge,
) -> ServiceResult<NewPairJudgement> {
    let (spec, target) = judge;
    // The judge reads the question as the eval sent it (the pair's left answer's request).
    let question = match pair.identity_id {
        Some(identity) => crate::runs::question_as_sent(store.as_ref(), IdentityId(identity))
            .await?
            .unwrap_or_else(|| pair.input.clone()),
        None => pair.input.clone(),
    };
    let ask = |first: &str, second: &str| {
        let prompt = render_pairwise_prompt(&spec.rubric, &question, first, second);
        async move {
            match prompt {
                Ok(prompt) => judge_pair_order(pool, spec, target, prompt).await,
                Err(too_long) => Err(too_long),
            }
        }
    };
    let (left_first, right_first) = futures::join!(
        ask(&pair.left_output, &pair.right_output),
        ask(&pair.right_output, &pair.left_output)
    );
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
    Ok(NewPairJudgement {
        task_id: pair.task_id,
        judge_id: pair.judging.judge_id,
        left_first: record(&left_first),
        right_first: record(&right_first),
        verdict,
        decided,
        audited,
        failure,
    })
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
        let verdicts: Vec<_> = judged
            .iter()
            .filter(|pair| pair.judge_id == judge_id)
            .map(|pair| (pair.verdict.clone(), pair.human))
            .collect();
        let name = store
            .get_judge(judge_id)
            .await?
            .map_or_else(|| format!("judge {judge_id}"), |judge| judge.grader_id());
        calibrations.push((name, calibrate_pairwise(&verdicts)));
    }
    Ok(calibrations)
}
