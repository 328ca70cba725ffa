//! Answering one identity of a likelihood eval: every choice of the item scored at once, on the
//! same replica (so a server that can reuse the shared context's prefix does), each request
//! through the endpoint pool's load control and retries. The identity's answer is the chosen
//! choice's letter, with every choice's score kept beside it.
//!
//! No fallback checkpoint is tried: choices scored by two different models could not be
//! compared with one another.

use std::sync::Arc;

use super::{EndpointPool, RunSpec, Target};
use crate::clients::model::GenerationRequest;
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::expansion::estimated_cost;
use arbiter_domain::fields::choice_letter;
use arbiter_domain::likelihood::{ChoiceScores, ContinuationScore, LikelihoodSpec};
use arbiter_domain::prompt::request::RenderedPrompt;
use arbiter_store::ClaimedIdentity;

/// Scores every choice of the identity's item and reads the model's answer from the scores.
pub(super) async fn score_choices(
    job: &ClaimedIdentity,
    likelihood: &LikelihoodSpec,
    rendered: &RenderedPrompt,
    spec: &RunSpec,
    pool: &Arc<EndpointPool>,
) -> Generation {
    let scoring = match likelihood.item_scoring(rendered) {
        Ok(scoring) => scoring,
        Err(problem) => return not_sent(job, &problem),
    };
    let target = Target {
        fallback: None,
        ..spec.target.clone()
    };
    let affinity = Some(identity_affinity(job));
    let requests: Vec<GenerationRequest> = scoring
        .requests
        .iter()
        .map(|request| {
            GenerationRequest::scoring(
                &spec.manifest.served_model,
                request.text.clone(),
                request.continuation_chars,
            )
        })
        .collect();
    let answers = futures::future::join_all(scoring.requests.iter().zip(&requests).map(
        |(scored, request)| {
            // The planner's estimate for one scoring request (its text, one token).
            let cost = u64::try_from(estimated_cost(&scored.text, 1)).unwrap_or(0);
            pool.generate(&target, request, cost, affinity)
        },
    ))
    .await;
    combine(
        answers,
        &rendered.item.choices,
        &rendered.item.targets,
        likelihood,
    )
}

/// The replica preference of one identity's requests (case and repetition), so they meet the
/// same server's prefix cache and tokenizer.
pub(super) fn identity_affinity(job: &ClaimedIdentity) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{}\u{0}{}", job.case_id, job.repetition).as_bytes())
}

/// Not sent: the identity's item cannot be scored as the eval says.
pub(super) fn not_sent(job: &ClaimedIdentity, problem: &str) -> Generation {
    Generation {
        outcome: Outcome::EndpointError,
        error: Some(format!("not sent: item `{}` {problem}", job.case_id)),
        error_category: Some(ErrorCategory::BadRequest),
        ..Generation::default()
    }
}

/// One identity's answer from its choices' answers: the first failure if any failed, else the
/// chosen letter with every score. Time is the slowest request's (they ran side by side);
/// attempts, tokens and cost add up.
fn combine(
    answers: Vec<Generation>,
    choices: &[String],
    targets: &[String],
    likelihood: &LikelihoodSpec,
) -> Generation {
    let mut combined = totals(&answers);
    let scores = match scores_of(answers, &combined, |index| {
        format!("choice {}", choice_letter(index).unwrap_or('?'))
    }) {
        Ok(scores) => scores,
        Err(failed) => return *failed,
    };
    let (letter, scores) =
        likelihood.answer(ChoiceScores::new(choices, scores, Vec::new()), targets);
    combined.output = letter;
    combined.outcome = Outcome::Ok;
    combined.finish_reason = Some("scored".into());
    combined.choice_scores = Some(scores);
    combined
}

/// What requests sent side by side for one identity came to: the slowest one's time and the
/// longest wait for a slot; their attempts, tokens and cost added up.
pub(super) fn totals(answers: &[Generation]) -> Generation {
    Generation {
        latency_ms: answers
            .iter()
            .map(|answer| answer.latency_ms)
            .max()
            .unwrap_or(0),
        waited_ms: answers
            .iter()
            .map(|answer| answer.waited_ms)
            .max()
            .unwrap_or(0),
        attempts: answers.iter().map(|answer| answer.attempts).sum(),
        prompt_tokens: answers.iter().map(|answer| answer.prompt_tokens).sum(),
        completion_tokens: answers.iter().map(|answer| answer.completion_tokens).sum(),
        cost_usd: answers.iter().map(|answer| answer.cost_usd).sum(),
        served_by: answers.first().and_then(|answer| answer.served_by.clone()),
        model_used: answers.first().and_then(|answer| answer.model_used.clone()),
        ..Generation::default()
    }
}

/// Every request's score, in order; or the identity's failed answer (with its `totals`): the
/// first request that failed or returned no score, named by `which(index)`.
pub(super) fn scores_of(
    answers: Vec<Generation>,
    totals: &Generation,
    which: impl Fn(usize) -> String,
) -> Result<Vec<ContinuationScore>, Box<Generation>> {
    let mut scores = Vec::with_capacity(answers.len());
    for (index, answer) in answers.into_iter().enumerate() {
        if answer.outcome.is_error() {
            let error = answer
                .error
                .as_ref()
                .map(|error| format!("{}: {error}", which(index)));
            return Err(Box::new(Generation {
                error,
                ..answer_with_totals(answer, totals)
            }));
        }
        match answer.continuation {
            Some(score) => scores.push(score),
            None => {
                return Err(Box::new(Generation {
                    outcome: Outcome::EndpointError,
                    error: Some(format!("{}: the endpoint returned no score", which(index))),
                    error_category: Some(ErrorCategory::MalformedResponse),
                    ..totals.clone()
                }))
            }
        }
    }
    Ok(scores)
}

/// A failed request's answer, carrying the identity's totals so far.
fn answer_with_totals(answer: Generation, totals: &Generation) -> Generation {
    Generation {
        latency_ms: totals.latency_ms,
        waited_ms: totals.waited_ms,
        attempts: totals.attempts,
        prompt_tokens: totals.prompt_tokens,
        completion_tokens: totals.completion_tokens,
        cost_usd: totals.cost_usd,
        ..answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::likelihood::{ContinuationScore, Selection};

    fn scored(logprob: f64) -> Generation {
        Generation {
            outcome: Outcome::Ok,
            latency_ms: (-logprob * 10.0) as i64,
            attempts: 1,
            prompt_tokens: Some(5),
            continuation: Some(ContinuationScore {
                logprob,
                tokens: 2,
                greedy: false,
                split_token: false,
            }),
            ..Generation::default()
        }
    }

    fn choices() -> Vec<String> {
        ["Paris", "Lyon", "Marseille"].map(String::from).to_vec()
    }

    #[test]
    fn the_answer_is_the_chosen_letter_with_every_score() {
        let spec = LikelihoodSpec::default();
        let combined = combine(
            vec![scored(-1.0), scored(-3.0), scored(-5.0)],
            &choices(),
            &["A".to_string()],
            &spec,
        );
        assert_eq!(combined.output, "A");
        assert_eq!(combined.outcome, Outcome::Ok);
        assert_eq!(combined.latency_ms, 50, "the slowest request");
        assert_eq!((combined.attempts, combined.prompt_tokens), (3, Some(15)));
        let scores = combined.choice_scores.unwrap();
        assert_eq!(scores.choices.len(), 3);
        assert_eq!(scores.choices[2].chars, 9);
        // Per character, Marseille's -5 over 9 characters beats Paris's -1 over 5? No: -0.56
        // against -0.2; Lyon's -0.75 loses too.
        assert_eq!(scores.selected(Selection::Chars), Some(0));
    }

    #[test]
    fn one_failed_choice_fails_the_item_and_says_which() {
        let failed = Generation {
            outcome: Outcome::EndpointError,
            error: Some("HTTP 500".into()),
            error_category: Some(ErrorCategory::ServerError),
            attempts: 4,
            ..Generation::default()
        };
        let combined = combine(
            vec![scored(-1.0), failed, scored(-2.0)],
            &choices(),
            &["A".to_string()],
            &LikelihoodSpec::default(),
        );
        assert_eq!(combined.outcome, Outcome::EndpointError);
        assert_eq!(combined.error.as_deref(), Some("choice B: HTTP 500"));
        assert_eq!(combined.attempts, 6);
        assert!(combined.choice_scores.is_none());
    }
}
