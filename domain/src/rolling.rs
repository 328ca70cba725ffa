//! Rolling log-likelihood of whole documents, as lm-evaluation-harness's
//! `loglikelihood_rolling` computes it for perplexity tasks (WikiText, Pile, C4): nothing is
//! generated; each document is tokenised by the server, cut into windows that fit
//! `max_length` (with one token left for the one the server generates), each window sent with
//! the server echoing its tokens' logprobs, and the logprobs of every document token summed. The report turns the sums into
//! word perplexity, byte perplexity and bits per byte over the whole corpus.
//!
//! With the default stride the windows are lm-eval's for API models such as
//! `local-completions` (which keeps `max_length - 1` after reserving a generated token, then
//! calls `get_rolling_token_windows` with `max_seq_len` one less again and one token of
//! context, then `make_disjoint_window`): every token is scored once, the first after the prefix token,
//! each later window's first token after the one before it. A shorter stride scores fewer new tokens per window, each with
//! more context before it (the sliding-window perplexity of Hugging Face's guide).
//!
//! Pure: no I/O. The engine tokenises, sends the windows and hands the logprobs back here.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// lm-eval's default `max_length` for models served over an API.
pub const DEFAULT_MAX_LENGTH: u32 = 2048;
/// Longest window accepted (tokens of context a request may carry).
pub const MAX_MAX_LENGTH: u32 = 1 << 20;

/// How an eval scores documents by rolling likelihood (part of its prompt spec, so it is
/// frozen in the manifest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollingSpec {
    /// lm-eval's `max_length` for API models: a request holds at most `max_length - 1` tokens
    /// (one is left for the token the server generates), so a scored token is conditioned on
    /// at most `max_length - 2` before it.
    #[serde(default = "default_max_length")]
    pub max_length: u32,
    /// New tokens scored per window; at most `max_length - 2`, which is the default
    /// (lm-eval's windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stride: Option<u32>,
    /// The token the first token of each document is scored after (lm-eval's prefix token:
    /// the tokenizer's beginning-of-text token if it has one, else its end-of-text token).
    /// When unset, the launch reads it from the endpoint's `/tokenizer_info` and freezes it in
    /// the run's manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_token: Option<u32>,
}

fn default_max_length() -> u32 {
    DEFAULT_MAX_LENGTH
}

impl Default for RollingSpec {
    fn default() -> RollingSpec {
        RollingSpec {
            max_length: DEFAULT_MAX_LENGTH,
            stride: None,
            prefix_token: None,
        }
    }
}

impl RollingSpec {
    /// The most tokens a scored token is conditioned on.
    pub fn context(&self) -> u32 {
        self.max_length.saturating_sub(2)
    }

    pub fn stride(&self) -> u32 {
        self.stride.unwrap_or(self.context())
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(3..=MAX_MAX_LENGTH).contains(&self.max_length) {
            return Err(format!(
                "the rolling window's max_length must be from 3 to {MAX_MAX_LENGTH} tokens, not {}",
                self.max_length
            ));
        }
        let stride = self.stride();
        if stride == 0 || stride > self.context() {
            return Err(format!(
                "the rolling stride must be from 1 to max_length - 2 ({}) tokens, not {stride}",
                self.context()
            ));
        }
        Ok(())
    }
}

/// One request of a document: the token ids to send, of which the last `scored` are the
/// document's tokens this window scores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub tokens: Vec<u32>,
    pub scored: usize,
}

/// The windows that score every token of `document` once (its token ids, in order). The
/// first window starts with `prefix` so the document's first token is scored too.
pub fn windows(document: &[u32], spec: &RollingSpec, prefix: u32) -> Vec<Window> {
    let n = document.len();
    let context = (spec.context() as usize).max(1);
    let stride = (spec.stride() as usize).clamp(1, context);
    let mut windows = Vec::with_capacity(n.div_ceil(stride));
    let mut begin = 0;
    while begin < n {
        let end = (begin + stride).min(n);
        let window = if begin == 0 {
            let mut tokens = Vec::with_capacity(end + 1);
            tokens.push(prefix);
            tokens.extend_from_slice(&document[..end]);
            Window {
                tokens,
                scored: end,
            }
        } else {
            // The last scored token sees `context` tokens before it (fewer at the start).
            let start = end.saturating_sub(context + 1);
            Window {
                tokens: document[start..end].to_vec(),
                scored: end - begin,
            }
        };
        windows.push(window);
        begin = end;
    }
    windows
}

/// The document span one window scores, for messages.
pub fn scored_span(windows: &[Window], index: usize) -> Range<usize> {
    let begin: usize = windows[..index].iter().map(|w| w.scored).sum();
    begin..begin + windows[index].scored
}

/// What a document's rolling likelihood came to: the sum over its tokens, and the units
/// perplexities are taken over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RollingScore {
    /// Natural-log likelihood of the whole document.
    pub logprob: f64,
    /// Tokens scored (every token of the document).
    pub tokens: u64,
    /// UTF-8 bytes of the document.
    pub bytes: u64,
    /// Words, as lm-eval counts them for perplexity tasks: pieces between runs of whitespace.
    pub words: u64,
    /// Requests it took.
    pub windows: u64,
}

impl RollingScore {
    /// A document's score from its windows' scored logprobs.
    pub fn new(document: &str, logprobs: &[f64], windows: usize) -> RollingScore {
        RollingScore {
            logprob: logprobs.iter().sum(),
            tokens: logprobs.len() as u64,
            bytes: document.len() as u64,
            words: count_words(document),
            windows: windows as u64,
        }
    }

    /// The answer an identity records: what was scored, for tables and diffs.
    pub fn summary(&self) -> String {
        format!(
            "log-likelihood {:.4} over {} tokens ({:.4} bits per byte)",
            self.logprob,
            self.tokens,
            bits_per_byte(self.logprob, self.bytes).unwrap_or(f64::NAN)
        )
    }
}

/// lm-eval's word count for perplexity (`len(re.split(r"\s+", doc))`): the pieces between runs
/// of whitespace, counting an empty piece at either end when the text starts or ends with
/// whitespace.
pub fn count_words(document: &str) -> u64 {
    let mut pieces = 1u64;
    let mut in_space = false;
    for c in document.chars() {
        // Python's `\s` also takes the information separators U+001C to U+001F.
        let space = c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
        if space && !in_space {
            pieces += 1;
        }
        in_space = space;
    }
    pieces
}

/// `-logprob / bytes / ln 2`; `None` without bytes.
pub fn bits_per_byte(logprob: f64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| -logprob / bytes as f64 / std::f64::consts::LN_2)
}

/// `exp(-logprob / units)`; `None` without units.
pub fn perplexity(logprob: f64, units: u64) -> Option<f64> {
    (units > 0).then(|| (-logprob / units as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(max_length: u32, stride: Option<u32>) -> RollingSpec {
        RollingSpec {
            max_length,
            stride,
            prefix_token: Some(0),
        }
    }

    /// lm-eval's `get_rolling_token_windows(context_len=1)` then `make_disjoint_window`,
    /// written out as the harness does it, to compare with.
    fn lm_eval_windows(tokens: &[u32], prefix: u32, max_len: usize) -> Vec<Window> {
        let mut out = Vec::new();
        if tokens.is_empty() {
            return out;
        }
        let pred_len = max_len;
        let first = max_len.min(tokens.len());
        let disjoint = |input: Vec<u32>, pred: &[u32]| {
            let context = input[..input.len() - (pred.len() - 1)].to_vec();
            let mut all = context;
            all.extend_from_slice(pred);
            Window {
                tokens: all,
                scored: pred.len(),
            }
        };
        let mut input = vec![prefix];
        input.extend_from_slice(&tokens[..first - 1]);
        out.push(disjoint(input, &tokens[..first]));
        let mut predicted = first;
        while predicted < tokens.len() {
            let window_pred = (tokens.len() - predicted).min(pred_len);
            let end = predicted + window_pred;
            let input = tokens[end - max_len - 1..end - 1].to_vec();
            out.push(disjoint(input, &tokens[end - window_pred..end]));
            predicted += window_pred;
        }
        out
    }

    #[test]
    fn default_windows_are_lm_evals() {
        for n in [1usize, 2, 5, 7, 8, 9, 16, 17, 33] {
            let tokens: Vec<u32> = (1..=n as u32).collect();
            for max_length in [3usize, 4, 6, 10] {
                let ours = windows(&tokens, &spec(max_length as u32, None), 0);
                // lm-eval's API models pass `max_seq_len = max_length - 2`.
                let theirs = lm_eval_windows(&tokens, 0, max_length - 2);
                assert_eq!(ours, theirs, "n {n}, max_length {max_length}");
            }
        }
    }

    #[test]
    fn every_token_is_scored_once_in_windows_of_at_most_max_length() {
        let tokens: Vec<u32> = (1..=23).collect();
        for (max_length, stride) in [(8, 3), (8, 6), (5, 1), (6, 4), (3, 1)] {
            let spec = spec(max_length, Some(stride));
            let windows = windows(&tokens, &spec, 0);
            let mut scored = Vec::new();
            for window in &windows {
                assert!(
                    window.tokens.len() < max_length as usize,
                    "a token left to generate"
                );
                assert!(window.scored <= stride as usize);
                assert!(
                    window.scored < window.tokens.len(),
                    "each scored token has context"
                );
                scored.extend_from_slice(&window.tokens[window.tokens.len() - window.scored..]);
            }
            assert_eq!(scored, tokens, "L {max_length}, stride {stride}");
            assert_eq!(windows[0].tokens[0], 0, "the prefix opens the first window");
        }
        assert!(windows(&[], &spec(8, None), 0).is_empty());
    }

    #[test]
    fn the_spec_bounds_its_stride() {
        assert!(spec(8, Some(7))
            .validate()
            .unwrap_err()
            .contains("from 1 to max_length - 2"));
        assert!(spec(8, Some(0)).validate().is_err());
        assert!(spec(2, None).validate().is_err());
        assert!(spec(8, Some(6)).validate().is_ok());
        assert!(spec(8, None).validate().is_ok());
    }

    #[test]
    fn words_bytes_and_perplexities_follow_lm_eval() {
        assert_eq!(count_words("a b  c"), 3);
        assert_eq!(count_words(" a b\n"), 4, "re.split keeps empty ends");
        assert_eq!(count_words(""), 1);
        assert_eq!(count_words("a\u{1f}b"), 2);
        let score = RollingScore::new("héllo world", &[-1.0, -2.0, -0.5], 2);
        assert_eq!((score.tokens, score.bytes, score.words), (3, 12, 2));
        assert!((score.logprob + 3.5).abs() < 1e-12);
        let bpb = bits_per_byte(-3.5, 12).unwrap();
        assert!((bpb - 3.5 / 12.0 / std::f64::consts::LN_2).abs() < 1e-12);
        assert!((perplexity(-3.5, 2).unwrap() - (1.75f64).exp()).abs() < 1e-12);
        assert_eq!(perplexity(-1.0, 0), None);
    }
}
