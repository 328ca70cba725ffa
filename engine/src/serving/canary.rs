//! Reads the serving canary ([`arbiter_domain::serving::canary`]) from a new server: the
//! fixed text's perplexity through `/tokenize` and prompt logprobs (as rolling likelihood
//! scores a document), greedy answers to the fixed prompts, and one chat completion. Every
//! request is deterministic (temperature 0, seed 0), so a reading repeats.

use crate::clients::model::{GenerationRequest, ModelClient, Scoring};
use arbiter_domain::manifest::SamplingOptions;
use arbiter_domain::prompt::PromptBody;
use arbiter_domain::serving::canary::{
    perplexity, CanaryReading, CANARY_MAX_TOKENS, CANARY_PROMPTS, CANARY_TEXT,
};
use std::time::Duration;

/// One canary request's wait: a CPU server answers sixteen tokens in a few seconds.
const CANARY_TIMEOUT: Duration = Duration::from_secs(120);

/// The canary's reading from the server at `base_url` serving `model`.
pub async fn read_canary(base_url: &str, model: &str) -> CanaryReading {
    let client = ModelClient::new();
    let (perplexity, perplexity_error) = match text_perplexity(&client, base_url, model).await {
        Ok(perplexity) => (Some(perplexity), None),
        Err(error) => (None, Some(error)),
    };
    let mut answers = Vec::with_capacity(CANARY_PROMPTS.len());
    for prompt in CANARY_PROMPTS {
        let request = GenerationRequest {
            model: model.to_string(),
            body: PromptBody::Completion(prompt.to_string()),
            max_tokens: CANARY_MAX_TOKENS,
            temperature: 0.0,
            seed: 0,
            sampling: SamplingOptions::default(),
            scoring: Scoring::Generate,
            top_logprobs: None,
        };
        let answer = client
            .attempt(base_url, None, &request, CANARY_TIMEOUT)
            .await
            .map(|generation| generation.output)
            .unwrap_or_default();
        answers.push(answer);
    }
    let chat = GenerationRequest::user_message(
        model,
        CANARY_PROMPTS[0].to_string(),
        CANARY_MAX_TOKENS,
        0.0,
        0,
    );
    let chat_error = client
        .attempt(base_url, None, &chat, CANARY_TIMEOUT)
        .await
        .err()
        .map(|failure| failure.message);
    CanaryReading {
        perplexity,
        perplexity_error,
        answers,
        chat_error,
    }
}

/// Perplexity per token of the canary text: its tokens after the first, each scored after
/// all before it.
async fn text_perplexity(client: &ModelClient, base_url: &str, model: &str) -> Result<f64, String> {
    let tokenized = client
        .attempt(
            base_url,
            None,
            &GenerationRequest::tokenize(model, CANARY_TEXT.to_string()),
            CANARY_TIMEOUT,
        )
        .await
        .map_err(|failure| failure.message)?;
    let ids = tokenized
        .token_ids
        .ok_or_else(|| "its /tokenize returned no token ids".to_string())?;
    if ids.len() < 2 {
        return Err(format!(
            "its /tokenize made {} tokens of the canary text",
            ids.len()
        ));
    }
    let scored = ids.len() - 1;
    let generation = client
        .attempt(
            base_url,
            None,
            &GenerationRequest::window(model, ids, scored),
            CANARY_TIMEOUT,
        )
        .await
        .map_err(|failure| failure.message)?;
    let score = generation
        .continuation
        .ok_or_else(|| "it returned no prompt logprobs for the canary text".to_string())?;
    perplexity(score.logprob, u64::from(score.tokens))
        .ok_or_else(|| "no token of the canary text was scored".to_string())
}
