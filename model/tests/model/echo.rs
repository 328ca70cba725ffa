//! Prompt logprobs (what `echo` returns and likelihood scoring reads): each prompt token scored
//! after the tokens before it, one forward pass per token, agrees with the distribution the
//! chunked prefill gives at the same position, and ranks a right continuation above a wrong one.

use crate::common;

use std::sync::atomic::AtomicBool;

use arbiter_model::generate::{prefill, score_prompt};
use arbiter_model::scoring::log_sum_exp;
use arbiter_model::weights;

#[test]
fn echoed_prompt_logprobs_match_the_prefills_distribution() {
    let Some(path) = common::model_file() else {
        return;
    };
    let model = weights::load(&path).unwrap();
    let cancel = AtomicBool::new(false);
    let prompt = model
        .tokenizer
        .encode("The capital of France is Paris")
        .unwrap();
    let (scored, _) = score_prompt(&model.weights, &model.tokenizer, &prompt, 1, &cancel).unwrap();
    assert_eq!(scored.len(), prompt.len());
    assert!(
        scored[0].chosen.logprob.is_nan(),
        "the first token follows nothing"
    );
    let text: String = scored
        .iter()
        .map(|token| token.chosen.label.as_str())
        .collect();
    assert_eq!(text, "The capital of France is Paris");
    // Every later position against the chunked prefill of the tokens before it.
    for end in 1..prompt.len() {
        let mut fresh = model.weights.clone();
        let logits = prefill(&mut fresh, &prompt[..end], 256)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let expected = logits[prompt[end] as usize] - log_sum_exp(&logits);
        let got = scored[end].chosen.logprob;
        assert!(
            (got - expected).abs() < 1e-3,
            "token {end}: {got} against {expected}"
        );
        assert!(got <= 0.0);
    }
    // The right capital is likelier than a wrong one after the same context.
    let score_of = |text: &str| {
        let ids = model.tokenizer.encode(text).unwrap();
        let (scored, _) = score_prompt(&model.weights, &model.tokenizer, &ids, 1, &cancel).unwrap();
        scored.last().unwrap().chosen.logprob
    };
    let paris = score_of("The capital of France is Paris");
    let london = score_of("The capital of France is London");
    assert!(paris > london, "Paris {paris} vs London {london}");
}

/// Against an independent implementation of the same model on the same file: transformers'
/// logprobs for three prompts (scripts/peer-check/transformers-logprobs made them), to 1e-3 per
/// token (1.6e-5 when measured), with the same token ids.
#[test]
fn echoed_logprobs_match_transformers_on_the_same_file() {
    let Some(path) = common::model_file() else {
        return;
    };
    let model = weights::load(&path).unwrap();
    let cancel = AtomicBool::new(false);
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("transformers_logprobs.json")).unwrap();
    for prompt in reference["prompts"].as_array().unwrap() {
        let text = prompt["text"].as_str().unwrap();
        let ids = model.tokenizer.encode(text).unwrap();
        let expected_ids: Vec<u32> = prompt["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(ids, expected_ids, "{text:?}: token ids");
        let (scored, _) = score_prompt(&model.weights, &model.tokenizer, &ids, 1, &cancel).unwrap();
        for (position, (token, expected)) in scored
            .iter()
            .zip(prompt["logprobs"].as_array().unwrap())
            .enumerate()
            .skip(1)
        {
            let expected = expected.as_f64().unwrap() as f32;
            assert!(
                (token.chosen.logprob - expected).abs() < 1e-3,
                "{text:?} token {position}: {} against transformers' {expected}",
                token.chosen.logprob
            );
        }
    }
}
