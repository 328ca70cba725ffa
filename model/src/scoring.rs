//! Log-probabilities of a sampled token and of the most likely alternatives, as OpenAI's
//! `logprobs` report them: from the model's raw distribution, before temperature or top-p.

use crate::tokenizer::TextTokenizer;

/// One token's entry in a `logprobs` list.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token's text (control tokens by name).
    pub label: String,
    /// The token's raw bytes; several tokens may each hold part of one character.
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// The chosen token and its `top` most likely alternatives, most likely first.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredToken {
    pub chosen: TokenLogprob,
    pub top: Vec<TokenLogprob>,
}

/// Scores `chosen` against the full distribution given by `logits`.
pub fn score(logits: &[f32], chosen: u32, top: usize, tokenizer: &TextTokenizer) -> ScoredToken {
    let log_normaliser = log_sum_exp(logits);
    let entry = |id: u32| TokenLogprob {
        label: tokenizer.token_label(id),
        bytes: tokenizer.token_bytes(id).to_vec(),
        logprob: logits[id as usize] - log_normaliser,
    };
    ScoredToken {
        chosen: entry(chosen),
        top: most_likely(logits, top).into_iter().map(entry).collect(),
    }
}

/// `ln Σ exp(x)`, shifted by the maximum so that nothing overflows.
pub fn log_sum_exp(values: &[f32]) -> f32 {
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = values.iter().map(|x| f64::from(x - max).exp()).sum();
    max + sum.ln() as f32
}

/// The ids of the `count` largest values, largest first; ties go to the lower id.
pub fn most_likely(values: &[f32], count: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..values.len() as u32).collect();
    let order = |a: &u32, b: &u32| {
        values[*b as usize]
            .total_cmp(&values[*a as usize])
            .then(a.cmp(b))
    };
    if count < ids.len() && count > 0 {
        ids.select_nth_unstable_by(count - 1, order);
    }
    ids.truncate(count);
    ids.sort_by(order);
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sum_exp_matches_the_direct_sum() {
        let values = [0.5f32, -1.0, 2.0, 0.0];
        let direct: f32 = values.iter().map(|x| x.exp()).sum::<f32>().ln();
        assert!((log_sum_exp(&values) - direct).abs() < 1e-6);
        // Large logits do not overflow.
        assert!((log_sum_exp(&[1000.0, 1000.0]) - (1000.0 + 2f32.ln())).abs() < 1e-3);
    }

    #[test]
    fn the_most_likely_ids_come_largest_first_with_ties_to_the_lower_id() {
        let values = [0.1f32, 3.0, 2.0, 3.0, -1.0];
        assert_eq!(most_likely(&values, 3), [1, 3, 2]);
        assert_eq!(most_likely(&values, 0), Vec::<u32>::new());
        assert_eq!(most_likely(&values, 9), [1, 3, 2, 0, 4]);
    }
}
