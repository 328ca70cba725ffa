//! Reading a prompt in chunks gives the same next-token distribution as reading it in one
//! forward pass: the chunks' causal masks and positions line up with the KV cache.

use crate::common;

use arbiter_model::generate::prefill;
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
