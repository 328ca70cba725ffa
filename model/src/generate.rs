//! One generation: prompt ids in, scored tokens and text out, until a stop token, a stop
//! string, the token limit or the context runs out.
//!
//! Runs on a blocking thread with its own copy of the model (shared weights, private KV cache)
//! and hands text to the caller piece by piece, so the server can stream it. Text is held back
//! while it could still be the start of a stop string or of an unfinished UTF-8 character.

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::quantized_llama::ModelWeights;

use crate::prefix_cache::{PrefixCache, Restored, BOUNDARIES};
use crate::scoring::{score, ScoredToken};
use crate::tokenizer::TextTokenizer;

/// How to sample and when to stop.
#[derive(Clone, Debug)]
pub struct SamplingParams {
    pub max_tokens: usize,
    /// 0 picks the most likely token every time.
    pub temperature: f64,
    /// Nucleus sampling: sample from the smallest set of tokens whose probability reaches this.
    pub top_p: f64,
    pub seed: u64,
    pub stop: Vec<String>,
    /// Alternatives reported per token; `None` when logprobs were not asked for.
    pub top_logprobs: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens` or the model's context length.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// Prompt tokens per forward pass while reading the prompt.
const PREFILL_CHUNK: usize = 256;

/// Temperatures below this sample greedily: dividing logits by a near-zero temperature
/// overflows to infinities and the sampler's weights become NaN.
const GREEDY_BELOW: f64 = 1e-5;

/// Text ready to send, with the tokens it came from (when logprobs were asked for).
#[derive(Debug, Default)]
pub struct Piece {
    pub text: String,
    pub tokens: Vec<ScoredToken>,
}

impl Piece {
    /// Nothing to send: no text became final and no token finished.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.tokens.is_empty()
    }
}

#[derive(Debug)]
pub struct Finished {
    pub finish_reason: FinishReason,
    pub prompt_tokens: usize,
    /// Every token sampled, including a final stop token and tokens cut by a stop string.
    pub completion_tokens: usize,
}

/// Why a generation ended early without an answer.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the request was cancelled")]
    Cancelled,
    #[error(transparent)]
    Model(#[from] candle_core::Error),
}

/// Runs one generation. `emit` receives each piece of text as it becomes final and returns
/// `false` when nobody is listening any more, which stops the generation like `cancel` does.
/// The prompt is read from where `cache` holds its longest kept prefix, and the prefixes it
/// passes are kept there.
pub fn generate(
    (weights, cache): (&ModelWeights, &PrefixCache),
    tokenizer: &TextTokenizer,
    prompt: &[u32],
    params: &SamplingParams,
    cancel: &AtomicBool,
    mut emit: impl FnMut(Piece) -> bool,
) -> Result<Finished, GenerateError> {
    let mut sampler = sampler_for(params);
    let mut text = TextAssembler::new(&params.stop);
    let mut completion_tokens = 0;
    if cancel.load(Ordering::Relaxed) {
        return Err(GenerateError::Cancelled);
    }
    let Restored { mut model, start } = cache.restore(weights, prompt);
    let mut logits = prefill_from(&mut model, prompt, start, |read, model| {
        if BOUNDARIES.contains(&read) {
            cache.keep(&prompt[..read], model);
        }
    })?;
    let mut position = prompt.len();
    let finish_reason = loop {
        if completion_tokens == params.max_tokens {
            break FinishReason::Length;
        }
        if cancel.load(Ordering::Relaxed) {
            return Err(GenerateError::Cancelled);
        }
        let next = sampler.sample(&logits)?;
        completion_tokens += 1;
        if tokenizer.stop_tokens.contains(&next) {
            break FinishReason::Stop;
        }
        let scored = match params.top_logprobs {
            Some(top) => Some(score(&logits.to_vec1::<f32>()?, next, top, tokenizer)),
            None => None,
        };
        let step = text.push(tokenizer.token_bytes(next), scored);
        if !step.piece.is_empty() && !emit(step.piece) {
            return Err(GenerateError::Cancelled);
        }
        if step.stopped {
            return Ok(Finished {
                finish_reason: FinishReason::Stop,
                prompt_tokens: prompt.len(),
                completion_tokens,
            });
        }
        let ids = Tensor::new(&[next], &Device::Cpu)?.unsqueeze(0)?;
        logits = model.forward(&ids, position)?.squeeze(0)?;
        position += 1;
    };
    let rest = text.finish();
    if !rest.is_empty() && !emit(rest) {
        return Err(GenerateError::Cancelled);
    }
    Ok(Finished {
        finish_reason,
        prompt_tokens: prompt.len(),
        completion_tokens,
    })
}

/// The sampler a request's settings ask for (greedy below a tiny temperature).
pub fn sampler_for(params: &SamplingParams) -> LogitsProcessor {
    let sampling = if params.temperature < GREEDY_BELOW {
        Sampling::ArgMax
    } else if params.top_p < 1.0 {
        Sampling::TopP {
            p: params.top_p,
            temperature: params.temperature,
        }
    } else {
        Sampling::All {
            temperature: params.temperature,
        }
    };
    LogitsProcessor::from_sampling(params.seed, sampling)
}

/// The prompt's tokens, each scored against the model's distribution after the tokens before
/// it (with `top` alternatives); the first, which follows nothing, has a NaN logprob (sent as
/// null). candle's llama returns only the last position's logits, so the prompt is read one
/// token per forward pass: as slow as generating it.
/// Also returns the logits after the whole prompt, for the token that would come next.
pub fn score_prompt(
    weights: &ModelWeights,
    tokenizer: &TextTokenizer,
    prompt: &[u32],
    top: usize,
    cancel: &AtomicBool,
) -> Result<(Vec<ScoredToken>, Tensor), GenerateError> {
    let mut model = weights.clone();
    let mut scored = Vec::with_capacity(prompt.len());
    let Some(&first) = prompt.first() else {
        return Err(GenerateError::Model(candle_core::Error::Msg(
            "an empty prompt has no logprobs".into(),
        )));
    };
    scored.push(ScoredToken {
        chosen: crate::scoring::TokenLogprob {
            label: tokenizer.token_label(first),
            bytes: tokenizer.token_bytes(first).to_vec(),
            logprob: f32::NAN,
        },
        top: Vec::new(),
    });
    let mut next = None;
    for (position, &id) in prompt.iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            return Err(GenerateError::Cancelled);
        }
        let ids = Tensor::new(&[id], &Device::Cpu)?.unsqueeze(0)?;
        let logits = model.forward(&ids, position)?.squeeze(0)?;
        if let Some(&following) = prompt.get(position + 1) {
            scored.push(score(&logits.to_vec1::<f32>()?, following, top, tokenizer));
        }
        next = Some(logits);
    }
    let next = next.expect("the prompt is not empty");
    Ok((scored, next))
}

/// Reads `prompt` (not empty) into the model's KV cache `chunk` tokens per forward pass and
/// returns the logits for the token after it. Attention over a whole long prompt at once would
/// hold a heads × length × length matrix: gigabytes at a few thousand tokens.
pub fn prefill(
    model: &mut ModelWeights,
    prompt: &[u32],
    chunk: usize,
) -> candle_core::Result<Tensor> {
    let mut position = 0;
    let mut logits = None;
    for piece in prompt.chunks(chunk.max(1)) {
        let ids = Tensor::new(piece, &Device::Cpu)?.unsqueeze(0)?;
        logits = Some(model.forward(&ids, position)?.squeeze(0)?);
        position += piece.len();
    }
    logits.ok_or_else(|| candle_core::Error::Msg("an empty prompt has no next token".into()))
}

/// Reads `prompt` from `start` (the model has read what is before it) up to its end, in
/// pieces of at most [`PREFILL_CHUNK`] tokens that end on the prefix cache's boundaries, calling
/// `passed` with the tokens read and the model after each piece; returns the logits for the
/// token after the prompt.
pub fn prefill_from(
    model: &mut ModelWeights,
    prompt: &[u32],
    start: usize,
    mut passed: impl FnMut(usize, &ModelWeights),
) -> candle_core::Result<Tensor> {
    let mut position = start;
    let mut logits = None;
    while position < prompt.len() {
        let next_boundary = BOUNDARIES
            .iter()
            .copied()
            .find(|boundary| *boundary > position)
            .unwrap_or(usize::MAX);
        let end = prompt
            .len()
            .min(position + PREFILL_CHUNK)
            .min(next_boundary);
        let ids = Tensor::new(&prompt[position..end], &Device::Cpu)?.unsqueeze(0)?;
        logits = Some(model.forward(&ids, position)?.squeeze(0)?);
        position = end;
        passed(position, model);
    }
    logits.ok_or_else(|| candle_core::Error::Msg("an empty prompt has no next token".into()))
}

/// What one more token changed: text now final, and whether a stop string was reached.
struct Step {
    piece: Piece,
    stopped: bool,
}

/// Turns token bytes into text, holding back an unfinished UTF-8 character and any tail that
/// could still grow into a stop string, and cutting the answer where a stop string begins.
struct TextAssembler<'s> {
    stops: &'s [String],
    /// Bytes of tokens not yet decoded (an unfinished character).
    undecoded: Vec<u8>,
    /// Decoded text not yet sent.
    held: String,
    /// Tokens whose text is not yet sent, each with the byte offset in `held` where it ends.
    held_tokens: Vec<(ScoredToken, usize)>,
}

impl<'s> TextAssembler<'s> {
    fn new(stops: &'s [String]) -> TextAssembler<'s> {
        TextAssembler {
            stops,
            undecoded: Vec::new(),
            held: String::new(),
            held_tokens: Vec::new(),
        }
    }

    fn push(&mut self, bytes: &[u8], token: Option<ScoredToken>) -> Step {
        self.undecoded.extend_from_slice(bytes);
        self.decode_complete_characters();
        if let Some(token) = token {
            self.held_tokens.push((token, self.held.len()));
        }
        if let Some(cut) = self.first_stop() {
            let piece = self.release(cut, true);
            return Step {
                piece,
                stopped: true,
            };
        }
        let keep = self.longest_stop_prefix_suffix();
        let releasable = self.held.len() - keep;
        Step {
            piece: self.release(releasable, false),
            stopped: false,
        }
    }

    /// Everything still held, at the end of the generation.
    fn finish(&mut self) -> Piece {
        if !self.undecoded.is_empty() {
            let rest = String::from_utf8_lossy(&self.undecoded).into_owned();
            self.held.push_str(&rest);
            self.undecoded.clear();
        }
        let everything = self.held.len();
        self.release(everything, true)
    }

    fn decode_complete_characters(&mut self) {
        loop {
            match std::str::from_utf8(&self.undecoded) {
                Ok(text) => {
                    self.held.push_str(text);
                    self.undecoded.clear();
                    return;
                }
                Err(error) => {
                    let valid = error.valid_up_to();
                    let text = std::str::from_utf8(&self.undecoded[..valid]).expect("valid prefix");
                    self.held.push_str(text);
                    match error.error_len() {
                        // An unfinished character at the end: wait for its next bytes.
                        None => {
                            self.undecoded.drain(..valid);
                            return;
                        }
                        // Bytes that can never form a character show as U+FFFD, as decoders
                        // do; what follows them is decoded on its own.
                        Some(invalid) => {
                            self.held.push(char::REPLACEMENT_CHARACTER);
                            self.undecoded.drain(..valid + invalid);
                        }
                    }
                }
            }
        }
    }

    /// Where the earliest stop string starts in the held text.
    fn first_stop(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter(|stop| !stop.is_empty())
            .filter_map(|stop| self.held.find(stop.as_str()))
            .min()
    }

    /// The length of the longest tail of the held text that begins some stop string.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let mut longest = 0;
        for stop in self.stops {
            for (end, _) in stop.char_indices().skip(1) {
                if end > longest && self.held.ends_with(&stop[..end]) {
                    longest = end;
                }
            }
        }
        longest
    }

    /// Sends the first `length` bytes of held text. Tokens go with the text they end in; when
    /// `all_tokens_started`, a token whose text starts before the cut goes too (a stop string
    /// can begin inside a token, and that token was still generated).
    fn release(&mut self, length: usize, all_tokens_started: bool) -> Piece {
        let text: String = self.held.drain(..length).collect();
        let mut tokens = Vec::new();
        let mut kept = Vec::new();
        let mut start = 0;
        for (token, end) in self.held_tokens.drain(..) {
            let sent = end <= length || (all_tokens_started && start < length.max(1));
            if sent {
                tokens.push(token);
            } else {
                kept.push((token, end - length.min(end)));
            }
            start = end;
        }
        self.held_tokens = kept;
        Piece { text, tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::TokenLogprob;

    fn token(label: &str) -> Option<ScoredToken> {
        Some(ScoredToken {
            chosen: TokenLogprob {
                label: label.into(),
                bytes: label.as_bytes().to_vec(),
                logprob: -0.5,
            },
            top: Vec::new(),
        })
    }

    fn feed(stops: &[&str], tokens: &[&str]) -> (Vec<String>, bool, Vec<String>) {
        let stops: Vec<String> = stops.iter().map(|stop| stop.to_string()).collect();
        let mut assembler = TextAssembler::new(&stops);
        let mut texts = Vec::new();
        let mut labels = Vec::new();
        for text in tokens {
            let step = assembler.push(text.as_bytes(), token(text));
            texts.push(step.piece.text);
            labels.extend(step.piece.tokens.into_iter().map(|t| t.chosen.label));
            if step.stopped {
                return (texts, true, labels);
            }
        }
        let rest = assembler.finish();
        texts.push(rest.text);
        labels.extend(rest.tokens.into_iter().map(|t| t.chosen.label));
        (texts, false, labels)
    }

    #[test]
    fn text_passes_straight_through_without_stop_strings() {
        let (texts, stopped, labels) = feed(&[], &["Par", "is", "."]);
        assert_eq!(texts, ["Par", "is", ".", ""]);
        assert!(!stopped);
        assert_eq!(labels, ["Par", "is", "."]);
    }

    #[test]
    fn a_possible_stop_prefix_is_held_until_it_resolves() {
        let (texts, stopped, labels) = feed(&["\n\n"], &["A", "\n", "B"]);
        assert_eq!(texts, ["A", "", "\nB", ""]);
        assert!(!stopped);
        assert_eq!(labels, ["A", "\n", "B"]);
    }

    #[test]
    fn the_answer_is_cut_where_a_stop_string_begins() {
        let (texts, stopped, labels) = feed(&["END"], &["one", " two E", "ND three"]);
        assert_eq!(texts.concat(), "one two ");
        assert!(stopped);
        // The token that began the stop string was generated, so it is reported.
        assert_eq!(labels, ["one", " two E"]);
    }

    #[test]
    fn a_stop_string_inside_one_token_is_found() {
        let (texts, stopped, labels) = feed(&["."], &["Paris. And"]);
        assert_eq!(texts.concat(), "Paris");
        assert!(stopped);
        assert_eq!(labels, ["Paris. And"]);
    }

    #[test]
    fn an_unfinished_character_waits_for_its_last_byte() {
        let stops: Vec<String> = Vec::new();
        let mut assembler = TextAssembler::new(&stops);
        let snowman = "☃".as_bytes();
        assert_eq!(assembler.push(&snowman[..1], None).piece.text, "");
        assert_eq!(assembler.push(&snowman[1..], None).piece.text, "☃");
        assert_eq!(assembler.push(&[0xE2], None).piece.text, "");
        assert_eq!(assembler.finish().text, "\u{FFFD}");
        // A byte that can never start a character does not spoil an unfinished one after it.
        assert_eq!(
            assembler.push(&[0xFF, snowman[0]], None).piece.text,
            "\u{FFFD}"
        );
        assert_eq!(assembler.push(&snowman[1..], None).piece.text, "☃");
    }
}
