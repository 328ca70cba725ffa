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

use crate::likelihood::{ContinuationScore, EchoedLogprobs};
use crate::manifest::EndpointFingerprint;

/// lm-eval's default `max_length` for models served over an API.
pub const DEFAULT_MAX_LENGTH: u32 = 2048;
/// Longest window accepted (tokens a request may carry): its echo, at about a hundred bytes
/// per token, must stay within what Arbiter reads of one answer.
pub const MAX_MAX_LENGTH: u32 = 1 << 17;
/// Most token ids one document's windows may send in all (a short stride over a long
/// document sends each token many times over); a document beyond it is an error naming it.
pub const MAX_DOCUMENT_IDS: usize = 1 << 24;

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

/// The windows that score every token of `document` once (its token ids, in order), as
/// lm-eval's `get_rolling_token_windows` with `context_len = max_length - 1 - stride` and
/// `make_disjoint_window` cut them: the first window starts with `prefix` and scores the first
/// `max_length - 2` tokens (so the document's first token is scored too); each later one scores
/// the next `stride` tokens after as many of the tokens before them as fit.
pub fn windows(document: &[u32], spec: &RollingSpec, prefix: u32) -> Vec<Window> {
    let n = document.len();
    let context = (spec.context() as usize).max(1);
    let stride = (spec.stride() as usize).clamp(1, context);
    let mut windows = Vec::with_capacity(1 + n.saturating_sub(context).div_ceil(stride));
    let mut begin = 0;
    while begin < n {
        let end = if begin == 0 { context } else { begin + stride }.min(n);
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

/// The token ids the windows of a document of `tokens` tokens send in all, worked out before
/// any window is built: the first window (the prefix and up to `max_length - 2` tokens), then
/// one full window (`max_length - 1` ids) per `stride` tokens left.
pub fn window_total(tokens: usize, spec: &RollingSpec) -> u64 {
    if tokens == 0 {
        return 0;
    }
    let context = (spec.context() as usize).max(1);
    let stride = (spec.stride() as usize).clamp(1, context);
    let first = tokens.min(context);
    let later = (tokens - first).div_ceil(stride) as u64;
    first as u64 + 1 + later * (context as u64 + 1)
}

/// Why a document of `tokens` tokens is too long to score under `spec`; `Ok` when it is not.
pub fn check_window_total(tokens: usize, spec: &RollingSpec) -> Result<(), String> {
    let total = window_total(tokens, spec);
    if total > MAX_DOCUMENT_IDS as u64 {
        return Err(format!(
            "has {tokens} tokens, whose windows would send {total} token ids, more than the \
             {MAX_DOCUMENT_IDS} one document may; split the text into shorter documents{}",
            if spec.stride() < spec.context() {
                format!(" or use a longer stride than {}", spec.stride())
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

/// The document span window `index` scores, from how many tokens each window scores; for
/// messages.
pub fn scored_span(scored: &[usize], index: usize) -> Range<usize> {
    let begin: usize = scored[..index].iter().sum();
    begin..begin + scored[index]
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
    /// A document's score from its windows' scores, in window order: each window's tokens
    /// summed first, then the windows, as lm-eval adds them (so the floating-point sums agree).
    pub fn from_windows(document: &str, windows: &[ContinuationScore]) -> RollingScore {
        RollingScore {
            logprob: windows.iter().map(|window| window.logprob).sum(),
            tokens: windows.iter().map(|window| u64::from(window.tokens)).sum(),
            bytes: document.len() as u64,
            words: count_words(document),
            windows: windows.len() as u64,
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

/// What a generation's `scores` column holds: a likelihood eval's choice scores or a rolling
/// eval's document score (told apart by their fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StoredScores {
    Rolling(RollingScore),
    Choices(crate::likelihood::ChoiceScores),
}

impl StoredScores {
    /// The column's JSON for a generation; `None` when it scored nothing.
    pub fn column(generation: &crate::answer::Generation) -> Option<String> {
        let json = match (&generation.rolling, &generation.choice_scores) {
            (Some(rolling), _) => serde_json::to_string(rolling),
            (None, Some(choices)) => serde_json::to_string(choices),
            (None, None) => return None,
        };
        Some(json.expect("scores always serialize"))
    }
}

/// Reads one window's score from the echo of its token prompt: the last `scored` of the `sent`
/// prompt tokens, summed in order (lm-eval's `sum(token_logprobs[ctxlen:-1])`). Tokens the
/// server generated after the prompt (`generated`, from the usage; else whatever follows the
/// prompt) are left out. An echo of a different length than the prompt sent (a server that
/// prepends a BOS token to token prompts, or echoes nothing) is an error, never a score of the
/// wrong tokens.
pub fn score_window(
    echo: &EchoedLogprobs,
    sent: usize,
    scored: usize,
    generated: Option<usize>,
) -> Result<ContinuationScore, String> {
    let count = echo.token_logprobs.len();
    if count == 0 {
        return Err("the response echoes no prompt logprobs".into());
    }
    let prompt = match generated {
        Some(generated) => count.checked_sub(generated).ok_or_else(|| {
            format!("the echo has {count} tokens, fewer than the {generated} generated")
        })?,
        // The prompt echoed, and at most the one token asked for after it.
        None if count == sent + 1 => sent,
        None => count,
    };
    if prompt != sent {
        return Err(format!(
            "the echo has {prompt} prompt tokens for a prompt of {sent} token ids (does the \
             server add a beginning-of-text token to token prompts?)"
        ));
    }
    if scored == 0 || scored >= sent {
        return Err(format!("{scored} of {sent} tokens cannot be scored"));
    }
    crate::likelihood::score_span(echo, sent - scored..sent)
}

/// lm-eval's prefix token for a remote tokenizer: the beginning-of-text token's id when the
/// tokenizer names one whose id is not 0 (the harness writes `bos_token_id or eos_token_id`,
/// so an id of 0 falls through), else the end-of-text token's. Each is the server's
/// tokenisation of the token's text, which must be exactly one id (the harness would silently
/// take the first of several).
pub fn lm_eval_prefix(
    bos: Option<(&str, &[u32])>,
    eos: Option<(&str, &[u32])>,
) -> Result<u32, String> {
    let single = |(text, ids): (&str, &[u32])| match ids {
        [id] => Ok(*id),
        _ => Err(format!(
            "the server tokenises its special token `{text}` as {} ids, not one; give the \
             eval's rolling prefix_token",
            ids.len()
        )),
    };
    if let Some(bos) = bos {
        let id = single(bos)?;
        if id != 0 {
            return Ok(id);
        }
    }
    match eos {
        Some(eos) => single(eos),
        None => Err(
            "the server's /tokenizer_info names no end-of-text token; give the eval's rolling \
             prefix_token"
                .into(),
        ),
    }
}

/// The generation-cache key of a document scored by rolling likelihood: the endpoint, the
/// text, the windowing and prefix, and the repetition.
pub fn rolling_key(
    fingerprint: &EndpointFingerprint,
    document: &str,
    spec: &RollingSpec,
    repetition: i64,
) -> String {
    let fingerprint = serde_json::to_vec(fingerprint).expect("fingerprints always serialize");
    let windowing = serde_json::to_vec(spec).expect("rolling specs always serialize");
    let repetition = repetition.to_le_bytes();
    let parts: [&[u8]; 5] = [
        b"arbiter-rolling-v1",
        &fingerprint,
        &windowing,
        document.as_bytes(),
        &repetition,
    ];
    crate::expansion::fields_hash(parts)
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

    /// lm-eval's `get_rolling_token_windows` then `make_disjoint_window`, written out as the
    /// harness does it, to compare with.
    fn lm_eval_windows(
        tokens: &[u32],
        prefix: u32,
        max_len: usize,
        context_len: usize,
    ) -> Vec<Window> {
        let mut out = Vec::new();
        if tokens.is_empty() {
            return out;
        }
        let pred_len = max_len - context_len + 1;
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
                // lm-eval's API models pass `max_seq_len = max_length - 2`, `context_len = 1`.
                let theirs = lm_eval_windows(&tokens, 0, max_length - 2, 1);
                assert_eq!(ours, theirs, "n {n}, max_length {max_length}");
                // A shorter stride is lm-eval's longer context: `context_len = M - stride + 1`.
                for stride in 1..max_length - 2 {
                    let ours = windows(&tokens, &spec(max_length as u32, Some(stride as u32)), 0);
                    let context_len = max_length - 2 - stride + 1;
                    let theirs = lm_eval_windows(&tokens, 0, max_length - 2, context_len);
                    assert_eq!(
                        ours, theirs,
                        "n {n}, max_length {max_length}, stride {stride}"
                    );
                }
            }
        }
        // The worked example: max_length 6 (four tokens of context), stride 2, eight tokens.
        let eight: Vec<u32> = (10..18).collect();
        let cut: Vec<(Vec<u32>, usize)> = windows(&eight, &spec(6, Some(2)), 0)
            .into_iter()
            .map(|window| (window.tokens, window.scored))
            .collect();
        assert_eq!(
            cut,
            vec![
                (vec![0, 10, 11, 12, 13], 4),
                (vec![11, 12, 13, 14, 15], 2),
                (vec![13, 14, 15, 16, 17], 2),
            ]
        );
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
                assert!(window.scored <= (max_length - 2) as usize);
                assert!(
                    window.scored < window.tokens.len(),
                    "each scored token has context"
                );
                scored.extend_from_slice(&window.tokens[window.tokens.len() - window.scored..]);
            }
            assert_eq!(scored, tokens, "L {max_length}, stride {stride}");
            let sent: usize = windows.iter().map(|window| window.tokens.len()).sum();
            assert_eq!(window_total(tokens.len(), &spec), sent as u64);
            assert_eq!(windows[0].tokens[0], 0, "the prefix opens the first window");
        }
        assert!(windows(&[], &spec(8, None), 0).is_empty());
        assert_eq!(window_total(0, &spec(8, None)), 0);
        // Stride 1 over a long document sends each token max_length - 1 times: refused.
        let long = spec(MAX_MAX_LENGTH, Some(1));
        assert!(check_window_total(200_000, &long)
            .unwrap_err()
            .contains("split the text into shorter documents or use a longer stride than 1"));
        assert!(check_window_total(200_000, &spec(MAX_MAX_LENGTH, None)).is_ok());
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
        let window = |logprob: f64, tokens: u32| ContinuationScore {
            logprob,
            tokens,
            greedy: false,
            split_token: false,
        };
        let score = RollingScore::from_windows("héllo world", &[window(-3.0, 2), window(-0.5, 1)]);
        assert_eq!((score.tokens, score.bytes, score.words), (3, 12, 2));
        assert!((score.logprob + 3.5).abs() < 1e-12);
        let bpb = bits_per_byte(-3.5, 12).unwrap();
        assert!((bpb - 3.5 / 12.0 / std::f64::consts::LN_2).abs() < 1e-12);
        assert!((perplexity(-3.5, 2).unwrap() - (1.75f64).exp()).abs() < 1e-12);
        assert_eq!(perplexity(-1.0, 0), None);
    }

    fn echo(logprobs: &[Option<f64>]) -> EchoedLogprobs {
        EchoedLogprobs {
            tokens: logprobs.iter().map(|_| "t".to_string()).collect(),
            token_logprobs: logprobs.to_vec(),
            top_logprobs: Vec::new(),
        }
    }

    #[test]
    fn a_window_scores_its_last_tokens_without_the_generated_one() {
        // Four ids sent, the last two scored, one generated after them (lm-eval's
        // `token_logprobs[ctxlen:-1]` with ctxlen 2).
        let echoed = echo(&[None, Some(-9.0), Some(-1.0), Some(-0.5), Some(-7.0)]);
        let score = score_window(&echoed, 4, 2, Some(1)).unwrap();
        assert_eq!((score.logprob, score.tokens), (-1.5, 2));
        assert_eq!(score_window(&echoed, 4, 2, None).unwrap(), score);
        let prompt_only = echo(&[None, Some(-9.0), Some(-1.0), Some(-0.5)]);
        assert_eq!(score_window(&prompt_only, 4, 2, None).unwrap(), score);
        // A server that adds a BOS to token prompts echoes one token more than was sent.
        let with_bos = echo(&[
            None,
            Some(-3.0),
            Some(-9.0),
            Some(-1.0),
            Some(-0.5),
            Some(-7.0),
        ]);
        assert!(score_window(&with_bos, 4, 2, Some(1))
            .unwrap_err()
            .contains("5 prompt tokens for a prompt of 4"));
        // Without usage, an echo longer than the prompt and one token is refused too.
        assert!(score_window(&with_bos, 4, 2, None)
            .unwrap_err()
            .contains("6 prompt tokens for a prompt of 4"));
        assert!(score_window(&echo(&[]), 4, 2, Some(1)).is_err());
        let missing = echo(&[None, Some(-9.0), None, Some(-0.5), Some(-7.0)]);
        assert!(score_window(&missing, 4, 2, Some(1))
            .unwrap_err()
            .contains("no logprob for prompt token 2"));
        let infinite = echo(&[None, Some(-9.0), Some(f64::NEG_INFINITY), Some(-0.5), None]);
        assert!(score_window(&infinite, 4, 2, Some(1)).is_err());
    }

    #[test]
    fn the_prefix_follows_lm_evals_remote_tokenizer_rule() {
        assert_eq!(
            lm_eval_prefix(Some(("<s>", &[1])), Some(("</s>", &[2]))),
            Ok(1)
        );
        // `bos_token_id or eos_token_id`: a BOS of id 0 falls through to the EOS.
        assert_eq!(
            lm_eval_prefix(Some(("<|endoftext|>", &[0])), Some(("<|im_end|>", &[2]))),
            Ok(2)
        );
        assert_eq!(lm_eval_prefix(None, Some(("<|endoftext|>", &[0]))), Ok(0));
        assert!(lm_eval_prefix(None, Some(("</s>", &[3, 4])))
            .unwrap_err()
            .contains("2 ids, not one"));
        assert!(lm_eval_prefix(None, None).is_err());
    }
}
