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
