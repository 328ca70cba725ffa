//! Reading a prompt in chunks gives the same next-token distribution as reading it in one
//! forward pass: the chunks' causal masks and positions line up with the KV cache; and a prompt
//! read on from a cached prefix's state answers as one read whole.

use crate::common;

use std::sync::atomic::AtomicBool;

use arbiter_model::generate::{generate, prefill, SamplingParams};
use arbiter_model::prefix_cache::{PrefixCache, BOUNDARIES};
use arbiter_model::weights;

#[test]
fn a_prompt_read_in_chunks_predicts_what_one_pass_does() {
    let Some(path) = common::model_file() else {
        return;
    };
    let model = weights::load(&path).unwrap();
    let text = "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(12)
        + "What animal jumps over the dog?";
    let prompt = model.tokenizer.encode(&text).unwrap();
    assert!(prompt.len() > 150, "{} tokens", prompt.len());
    let read = |chunk: usize| {
        let mut fresh = model.weights.clone();
        prefill(&mut fresh, &prompt, chunk)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let whole = read(prompt.len());
    for chunk in [64, 100] {
        let chunked = read(chunk);
        let largest_gap = whole
            .iter()
            .zip(&chunked)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            largest_gap < 1e-3,
            "chunks of {chunk}: logits differ by {largest_gap}"
        );
    }
}

/// Greedy answer with each token's logprob, through the server's generation path.
fn answer(model: &weights::LoadedModel, cache: &PrefixCache, prompt: &[u32]) -> (String, Vec<f32>) {
    let params = SamplingParams {
        max_tokens: 12,
        temperature: 0.0,
        top_p: 1.0,
        seed: 0,
        stop: Vec::new(),
        top_logprobs: Some(1),
    };
    let (mut text, mut logprobs) = (String::new(), Vec::new());
    generate(
        (&model.weights, cache),
        &model.tokenizer,
        prompt,
        &params,
        &AtomicBool::new(false),
        |piece| {
            text.push_str(&piece.text);
            logprobs.extend(piece.tokens.iter().map(|token| token.chosen.logprob));
            true
        },
    )
    .unwrap();
    (text, logprobs)
}

#[test]
fn a_prompt_read_from_a_cached_prefix_answers_as_one_read_whole() {
    let Some(path) = common::model_file() else {
        return;
    };
    let model = weights::load(&path).unwrap();
    let rubric = "You are grading an answer. Judge only the final line. An answer that names \
        the reference in other words is correct; one that gives several candidates is not. "
        .repeat(5);
    let prompt = |question: &str| {
        model
            .tokenizer
            .encode(&format!("{rubric}\nQuestion: {question}\nVerdict:"))
            .unwrap()
    };
    let (first, second) = (
        prompt("What is 2+2?"),
        prompt("Name the capital of France."),
    );
    assert!(first.len() > 130 && second.len() > 130);
    let uncached = answer(&model, &PrefixCache::new(0), &second);
    let cache = PrefixCache::new(4_096);
    answer(&model, &cache, &first);
    let (queried_first, found_first) = cache.counts();
    assert_eq!((queried_first, found_first), (first.len() as u64, 0));
    let cached = answer(&model, &cache, &second);
    let (_, found) = cache.counts();
    assert_eq!(
        found, 128,
        "the shared rubric, down to the boundary below it"
    );
    assert_eq!(cached.0, uncached.0, "the same greedy answer");
    let largest_gap = cached
        .1
        .iter()
        .zip(&uncached.1)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        largest_gap < 1e-3,
        "logprobs differ by {largest_gap} when the rubric's reading is reused"
    );
    // The same prompt again: everything but the part after its last boundary.
    answer(&model, &cache, &second);
    let (_, found_again) = cache.counts();
    let boundary_below = BOUNDARIES
        .iter()
        .copied()
        .filter(|boundary| *boundary < second.len())
        .max()
        .unwrap();
    assert_eq!(found_again - found, boundary_below as u64);
}
