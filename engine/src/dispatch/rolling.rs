//! Answering one identity of a rolling-likelihood eval: the item's text is tokenised by the
//! server, cut into windows (`arbiter_domain::rolling::windows`), and every window sent at once
//! with its token ids echoed and their logprobs read back, all on one replica (so the
//! tokenisation and the scores come from the same server), each request through the endpoint
//! pool's load control and retries. The identity's answer is the document's score.
//!
//! No fallback checkpoint is tried: a document scored partly by another model means nothing.

use std::sync::Arc;

use super::likelihood::{identity_affinity, not_sent, scores_of, totals};
use super::{EndpointPool, RunSpec, Target};
use crate::clients::model::GenerationRequest;
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::expansion::estimated_cost;
use arbiter_domain::prompt::request::{rolled_text, RenderedPrompt};
use arbiter_domain::rolling::{
    check_window_total, scored_span, windows, RollingScore, RollingSpec,
};
use arbiter_store::ClaimedIdentity;
use futures::StreamExt;

/// Most windows of one document sent at once; the endpoint pool's limiter bounds them again.
const WINDOWS_IN_FLIGHT: usize = 64;

/// Scores the identity's text by rolling likelihood after the run's `prefix` token.
pub(super) async fn score_document(
    job: &ClaimedIdentity,
    rolling: &RollingSpec,
    prefix: Option<u32>,
    rendered: &RenderedPrompt,
    spec: &RunSpec,
    pool: &Arc<EndpointPool>,
) -> Generation {
    let text = match rolled_text(rendered) {
        Ok(text) => text,
        Err(problem) => return not_sent(job, &problem),
    };
    let Some(prefix) = prefix else {
        return not_sent(job, "has no prefix token: the run's manifest froze none");
    };
    let target = Target {
        fallback: None,
        ..spec.target.clone()
    };
    // An empty text scores nothing (lm-eval: no windows, log-likelihood 0, one word).
    if text.is_empty() {
        return combine(text, &Generation::default(), &[], Vec::new(), 0);
    }
    let affinity = Some(identity_affinity(job));
    let model = &spec.manifest.served_model;
    let tokenize = GenerationRequest::tokenize(model, text.to_string());
    let cost = u64::try_from(estimated_cost(text, 0)).unwrap_or(0);
    let tokenized = pool.generate(&target, &tokenize, cost, affinity).await;
    if tokenized.outcome.is_error() {
        let error = tokenized
            .error
            .as_ref()
            .map(|error| format!("tokenizing the text: {error}"));
        return Generation { error, ..tokenized };
    }
    let Some(ids) = &tokenized.token_ids else {
        return Generation {
            outcome: Outcome::EndpointError,
            error: Some("tokenizing the text: the endpoint returned no token ids".into()),
            error_category: Some(ErrorCategory::MalformedResponse),
            ..tokenized
        };
    };
    if let Err(problem) = check_window_total(ids.len(), rolling) {
        return not_sent(job, &problem);
    }
    let windows = windows(ids, rolling, prefix);
    let scored: Vec<usize> = windows.iter().map(|window| window.scored).collect();
    // A bounded number at a time, each started (and timed) only when it is sent; after a
    // failure the rest are not sent.
    let sends = windows.into_iter().map(|window| {
        let cost = window.tokens.len() as u64 + 1;
        let request = GenerationRequest::window(model, window.tokens, window.scored);
        let (pool, target) = (pool.clone(), target.clone());
        async move { pool.generate(&target, &request, cost, affinity).await }
    });
    let started = std::time::Instant::now();
    let mut sent = futures::stream::iter(sends).buffered(WINDOWS_IN_FLIGHT);
    let mut answers = Vec::with_capacity(scored.len());
    while let Some(answer) = sent.next().await {
        let failed = answer.outcome.is_error();
        answers.push(answer);
        if failed {
            break;
        }
    }
    let window_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    combine(text, &tokenized, &scored, answers, window_ms)
}

/// The document's answer from its windows' answers (`scored`: how many tokens each window
/// scores): the first failure if any failed (naming the window and the tokens it scores), else
/// the summed score. Its time is the tokenisation's and then the windows' (`window_ms`, as they
/// were sent a number at a time).
fn combine(
    text: &str,
    tokenized: &Generation,
    scored: &[usize],
    answers: Vec<Generation>,
    window_ms: i64,
) -> Generation {
    let mut combined = totals(&answers);
    // The windows' longest wait for a slot is inside `window_ms` but not time at the endpoint.
    combined.latency_ms = tokenized.latency_ms + (window_ms - combined.waited_ms).max(0);
    combined.waited_ms += tokenized.waited_ms;
    combined.attempts += tokenized.attempts;
    if combined.served_by.is_none() {
        combined.served_by = tokenized.served_by.clone();
    }
    let scores = match scores_of(answers, &combined, |index| {
        let span = scored_span(scored, index);
        format!(
            "window {} of {} (tokens {} to {})",
            index + 1,
            scored.len(),
            span.start,
            span.end - 1
        )
    }) {
        Ok(scores) => scores,
        Err(failed) => return *failed,
    };
    let score = RollingScore::from_windows(text, &scores);
    combined.output = score.summary();
    combined.outcome = Outcome::Ok;
    combined.finish_reason = Some("scored".into());
    combined.rolling = Some(score);
    combined
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::likelihood::ContinuationScore;

    fn window_answer(logprob: f64, tokens: u32) -> Generation {
        Generation {
            outcome: Outcome::Ok,
            latency_ms: 10 * i64::from(tokens),
            attempts: 1,
            prompt_tokens: Some(i64::from(tokens) + 1),
            continuation: Some(ContinuationScore {
                logprob,
                tokens,
                greedy: false,
                split_token: false,
            }),
            ..Generation::default()
        }
    }

    /// Two windows: the first scores three tokens, the second one.
    const TWO_WINDOWS: [usize; 2] = [3, 1];

    #[test]
    fn the_windows_add_up_to_the_documents_score() {
        let tokenized = Generation {
            latency_ms: 5,
            attempts: 1,
            ..Generation::default()
        };
        let combined = combine(
            "a b c d",
            &tokenized,
            &TWO_WINDOWS,
            vec![window_answer(-3.0, 3), window_answer(-0.5, 1)],
            30,
        );
        assert_eq!(combined.outcome, Outcome::Ok);
        let score = combined.rolling.unwrap();
        assert_eq!((score.logprob, score.tokens, score.windows), (-3.5, 4, 2));
        assert_eq!((score.bytes, score.words), (7, 4));
        assert_eq!(
            combined.latency_ms, 35,
            "tokenizing, then the windows as they were sent"
        );
        assert_eq!((combined.attempts, combined.prompt_tokens), (3, Some(6)));
        assert!(combined.output.contains("over 4 tokens"));
    }

    #[test]
    fn an_empty_text_scores_nothing_as_lm_eval() {
        let combined = combine("", &Generation::default(), &[], Vec::new(), 0);
        assert_eq!(combined.outcome, Outcome::Ok);
        let score = combined.rolling.unwrap();
        assert_eq!(
            (
                score.logprob,
                score.tokens,
                score.windows,
                score.bytes,
                score.words
            ),
            (0.0, 0, 0, 0, 1)
        );
    }

    #[test]
    fn a_failed_window_fails_the_document_and_says_which_tokens() {
        let failed = Generation {
            outcome: Outcome::EndpointError,
            error: Some("HTTP 500".into()),
            error_category: Some(ErrorCategory::ServerError),
            attempts: 4,
            ..Generation::default()
        };
        let combined = combine(
            "a b c d",
            &Generation::default(),
            &TWO_WINDOWS,
            vec![window_answer(-3.0, 3), failed],
            30,
        );
        assert_eq!(combined.outcome, Outcome::EndpointError);
        assert_eq!(
            combined.error.as_deref(),
            Some("window 2 of 2 (tokens 3 to 3): HTTP 500")
        );
        assert!(combined.rolling.is_none());
    }
}
