//! Likelihood scoring of multiple choice, as lm-evaluation-harness's `multiple_choice` tasks
//! score it: no answer is generated; for each choice the endpoint is sent the context followed
//! by the choice and echoes the prompt's token logprobs, from which the choice's log-likelihood
//! (its tokens' summed logprobs), token count and greediness are read. The choice with the
//! highest log-likelihood (`acc`), or per character (`acc_norm`) or per byte (`acc_bytes`), is
//! the model's answer; ties go to the first choice, as numpy's `argmax`.
//!
//! The context/continuation boundary follows lm-eval: trailing whitespace of the context moves
//! into the continuation (so " Paris" is scored as one continuation, not "Paris" after a
//! dangling space). The server tokenises the whole text; the continuation's tokens are those
//! that end after the context, counted from the end of the echo, so a server that prepends a
//! BOS token, or reports offsets its own way, reads the same. When the first of them starts
//! inside the context (the boundary falls inside a token), that is recorded.
//!
//! Pure: no I/O. The engine sends the requests and hands the echoed arrays here.

use serde::{Deserialize, Serialize};

use crate::manifest::EndpointFingerprint;
use crate::prompt::request::RenderedPrompt;
use crate::prompt::PromptBody;

/// How an eval scores choices by likelihood (part of its prompt spec, so it is frozen in the
/// manifest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LikelihoodSpec {
    /// Put between the context and each choice (lm-eval's `target_delimiter`).
    #[serde(default = "default_delimiter")]
    pub target_delimiter: String,
    /// Which reading picks the answer that is graded; every reading is reported.
    #[serde(default)]
    pub select_by: Selection,
}

fn default_delimiter() -> String {
    " ".into()
}

impl Default for LikelihoodSpec {
    fn default() -> LikelihoodSpec {
        LikelihoodSpec {
            target_delimiter: default_delimiter(),
            select_by: Selection::default(),
        }
    }
}

/// How choices are compared: by log-likelihood, or by it per character or per byte of the
/// choice (the delimiter not counted, as in lm-eval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// lm-eval's `acc`.
    #[default]
    Raw,
    /// lm-eval's `acc_norm`: by Unicode characters.
    Chars,
    /// lm-eval's `acc_bytes`: by UTF-8 bytes.
    Bytes,
}

impl Selection {
    pub const ALL: [Selection; 3] = [Selection::Raw, Selection::Chars, Selection::Bytes];

    /// lm-eval's name for the accuracy this selection gives.
    pub fn metric(self) -> &'static str {
        match self {
            Selection::Raw => "acc",
            Selection::Chars => "acc_norm",
            Selection::Bytes => "acc_bytes",
        }
    }
}

/// Most choices one item may be scored over.
pub const MAX_CHOICES: usize = 26;

/// One scoring request: the text sent, and where in it the continuation starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContinuationRequest {
    /// Context and continuation, sent as one prompt.
    pub text: String,
    /// Characters (Unicode scalar values, as OpenAI's offsets count) of the continuation,
    /// the context's trailing whitespace included.
    pub continuation_chars: usize,
}

/// The text to score `continuation` after `context`, with lm-eval's boundary: the context's
/// trailing whitespace belongs to the continuation.
pub fn continuation_request(context: &str, continuation: &str) -> ContinuationRequest {
    let trimmed = context.trim_end();
    let moved = &context[trimmed.len()..];
    ContinuationRequest {
        text: format!("{context}{continuation}"),
        continuation_chars: moved.chars().count() + continuation.chars().count(),
    }
}

/// What the endpoint's echo says about one continuation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContinuationScore {
    /// The continuation's tokens' summed logprobs.
    pub logprob: f64,
    pub tokens: u32,
    /// Every continuation token was the most likely one at its position.
    pub greedy: bool,
    /// The first continuation token began inside the context.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_token: bool,
}

/// The logprobs part of an echoed completion, as OpenAI's legacy API writes it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct EchoedLogprobs {
    #[serde(default)]
    pub tokens: Vec<String>,
    #[serde(default)]
    pub token_logprobs: Vec<Option<f64>>,
    #[serde(default)]
    pub top_logprobs: Vec<Option<std::collections::BTreeMap<String, f64>>>,
}

/// What an echoed completion returned around its tokens.
#[derive(Clone, Copy, Debug)]
pub struct EchoedText<'a> {
    /// The returned text: the prompt and anything generated after it.
    pub text: &'a str,
    /// The prompt sent.
    pub prompt: &'a str,
    /// Tokens generated after the prompt, when the server's usage says (`completion_tokens`).
    pub generated_tokens: Option<usize>,
}

/// Reads one continuation's score from an echoed completion, its last `continuation_chars`
/// characters being the continuation. Tokens are counted back from the end: first those
/// generated after the prompt (by the usage's count, which also covers a stop token the text
/// leaves out; else by the generated text's length), then the continuation's. The tokens read
/// must spell the continuation, so a server whose echo does not line up with the prompt is an
/// error, never a wrong score.
pub fn score_continuation(
    echo: &EchoedLogprobs,
    echoed: EchoedText<'_>,
    continuation_chars: usize,
) -> Result<ContinuationScore, String> {
    let count = echo.tokens.len();
    if echo.token_logprobs.len() != count {
        return Err(format!(
            "the echo has {count} tokens but {} token logprobs",
            echo.token_logprobs.len()
        ));
    }
    if !echoed.text.starts_with(echoed.prompt) {
        return Err("the endpoint did not echo the prompt".into());
    }
    let length = |index: usize| echo.tokens[index].chars().count();
    // Tokens generated after the prompt (at most one is asked for) are not scored.
    let end = match echoed.generated_tokens {
        Some(generated) => count.checked_sub(generated).ok_or_else(|| {
            format!("the echo has {count} tokens, fewer than the {generated} generated")
        })?,
        None => {
            let generated_chars = echoed.text[echoed.prompt.len()..].chars().count();
            let mut end = count;
            let mut seen = 0;
            while seen < generated_chars && end > 0 {
                end -= 1;
                seen += length(end);
            }
            if seen != generated_chars {
                return Err("the echoed tokens do not add up to the returned text".into());
            }
            end
        }
    };
    let mut start = end;
    let mut covered = 0;
    while covered < continuation_chars && start > 0 {
        start -= 1;
        covered += length(start);
    }
    if covered < continuation_chars {
        return Err("the echo does not cover the continuation (no prompt logprobs?)".into());
    }
    if start == 0 {
        return Err(
            "the continuation begins at the prompt's first token, which has no logprob".into(),
        );
    }
    // The tokens read must end with the continuation's text. A token holding part of a
    // character (shown as U+FFFD) makes the character count unreliable, so such an echo is
    // refused: the item is an error, never a score of the wrong tokens.
    let read: String = echo.tokens[start..end].concat();
    let continuation: String = {
        let chars: Vec<char> = echoed.prompt.chars().collect();
        chars[chars.len().saturating_sub(continuation_chars)..]
            .iter()
            .collect()
    };
    if read.contains(char::REPLACEMENT_CHARACTER) {
        return Err(
            "the echoed tokens hold parts of characters, so where the continuation starts cannot \
             be told from them"
                .into(),
        );
    }
    if !read.ends_with(&continuation) {
        return Err(format!(
            "the echoed tokens do not end with the continuation `{continuation}`"
        ));
    }
    Ok(ContinuationScore {
        split_token: covered > continuation_chars,
        ..score_span(echo, start..end)?
    })
}

/// The echoed tokens in `span` scored: their logprobs summed in order, and whether each was
/// the likeliest at its position (as lm-eval: no alternative more likely than the token). Every
/// one must have a finite logprob.
pub(crate) fn score_span(
    echo: &EchoedLogprobs,
    span: std::ops::Range<usize>,
) -> Result<ContinuationScore, String> {
    let tokens = span.len() as u32;
    let mut logprob = 0.0;
    let mut greedy = true;
    for index in span {
        let Some(token_logprob) = echo.token_logprobs[index] else {
            return Err(format!("the echo has no logprob for prompt token {index}"));
        };
        if !token_logprob.is_finite() {
            return Err(format!("prompt token {index} has logprob {token_logprob}"));
        }
        logprob += token_logprob;
        let best = echo
            .top_logprobs
            .get(index)
            .and_then(Option::as_ref)
            .and_then(|top| top.values().copied().reduce(f64::max));
        if best.is_some_and(|best| best > token_logprob) {
            greedy = false;
        }
    }
    Ok(ContinuationScore {
        logprob,
        tokens,
        greedy,
        split_token: false,
    })
}

/// One choice's score with its lengths, for the normalised readings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChoiceScore {
    #[serde(flatten)]
    pub score: ContinuationScore,
    /// The choice's length (without the delimiter) in characters and in UTF-8 bytes.
    pub chars: u32,
    pub bytes: u32,
}

/// Every choice of one item, as scored, with the right ones: what a likelihood eval records per
/// result identity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChoiceScores {
    /// In the order presented.
    pub choices: Vec<ChoiceScore>,
    /// Positions of the right choices (empty when the item names none).
    pub gold: Vec<usize>,
}

impl ChoiceScores {
    /// Scores for `choices` (the texts, for their lengths) with the right positions.
    pub fn new(
        choices: &[String],
        scores: Vec<ContinuationScore>,
        gold: Vec<usize>,
    ) -> ChoiceScores {
        ChoiceScores {
            choices: choices
                .iter()
                .zip(scores)
                .map(|(text, score)| ChoiceScore {
                    score,
                    chars: text.chars().count() as u32,
                    bytes: text.len() as u32,
                })
                .collect(),
            gold,
        }
    }

    /// The chosen position under a selection: the highest reading, the first on ties.
    pub fn selected(&self, by: Selection) -> Option<usize> {
        let reading = |choice: &ChoiceScore| {
            let length = match by {
                Selection::Raw => 1.0,
                Selection::Chars => f64::from(choice.chars.max(1)),
                Selection::Bytes => f64::from(choice.bytes.max(1)),
            };
            choice.score.logprob / length
        };
        let mut best: Option<(usize, f64)> = None;
        for (index, choice) in self.choices.iter().enumerate() {
            let value = reading(choice);
            if best.is_none_or(|(_, top)| value > top) {
                best = Some((index, value));
            }
        }
        best.map(|(index, _)| index)
    }

    /// Whether the chosen position is a right one (`None` without a right one).
    pub fn correct(&self, by: Selection) -> Option<bool> {
        if self.gold.is_empty() {
            return None;
        }
        Some(
            self.selected(by)
                .is_some_and(|chosen| self.gold.contains(&chosen)),
        )
    }

    /// The probability the model puts on the right answer among the choices: the softmax of
    /// the log-likelihoods over the choices, summed over the right ones. Arbiter's definition
    /// (lm-eval has no working metric for it).
    pub fn gold_probability(&self) -> Option<f64> {
        if self.gold.is_empty() || self.choices.is_empty() {
            return None;
        }
        let max = self
            .choices
            .iter()
            .map(|choice| choice.score.logprob)
            .fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = self
            .choices
            .iter()
            .map(|choice| (choice.score.logprob - max).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        Some(
            self.gold
                .iter()
                .filter_map(|&index| weights.get(index))
                .sum::<f64>()
                / total,
        )
    }

    /// The log-likelihood of the (first) right answer.
    pub fn gold_logprob(&self) -> Option<f64> {
        let first = *self.gold.first()?;
        self.choices.get(first).map(|choice| choice.score.logprob)
    }

    /// Whether the right answer's continuation is what the model would generate greedily
    /// (lm-eval's `exact_match` for multiple choice).
    pub fn gold_greedy(&self) -> Option<bool> {
        let first = *self.gold.first()?;
        self.choices.get(first).map(|choice| choice.score.greedy)
    }
}

/// The right choices' positions: with choices, each acceptable answer is a choice's letter.
pub fn gold_positions(targets: &[String], choices: usize) -> Vec<usize> {
    targets
        .iter()
        .filter_map(|target| {
            let mut letters = target.chars();
            match (letters.next(), letters.next()) {
                (Some(letter @ 'A'..='Z'), None) => Some(letter as usize - 'A' as usize),
                _ => None,
            }
        })
        .filter(|&index| index < choices)
        .collect()
}

/// What scoring one item takes: the context (the rendered prompt), one request per choice,
/// and the right choices' positions.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemScoring {
    pub context: String,
    /// The delimiter and each choice, in the order presented.
    pub continuations: Vec<String>,
    pub requests: Vec<ContinuationRequest>,
    pub gold: Vec<usize>,
}

impl LikelihoodSpec {
    /// The answer scores give under this spec, for an item with these acceptable answers: the
    /// chosen letter, and the scores with the right choices set from the item. Scores come from
    /// the endpoint or the cache; the cache's key covers the context and the choices but not
    /// the selection or the answer key, so both are applied here, never taken from the cache.
    pub fn answer(&self, mut scores: ChoiceScores, targets: &[String]) -> (String, ChoiceScores) {
        scores.gold = gold_positions(targets, scores.choices.len());
        let letter = scores
            .selected(self.select_by)
            .and_then(crate::fields::choice_letter)
            .map(String::from)
            .unwrap_or_default();
        (letter, scores)
    }

    /// A stored answer (a cached one) read under this spec for an item with these acceptable
    /// answers: its scores kept, its letter and right choices set afresh.
    pub fn reanswer(&self, generation: &mut crate::answer::Generation, targets: &[String]) {
        if let Some(scores) = generation.choice_scores.take() {
            let (letter, scores) = self.answer(scores, targets);
            generation.output = letter;
            generation.choice_scores = Some(scores);
        }
    }

    /// The requests that score a rendered item; the error says what the item lacks.
    pub fn item_scoring(&self, rendered: &RenderedPrompt) -> Result<ItemScoring, String> {
        let PromptBody::Completion(context) = &rendered.body else {
            return Err("is not a completions prompt, which likelihood scoring needs".into());
        };
        let item = &rendered.item;
        if item.input.turn_count() > 1 {
            return Err("is a conversation; likelihood scoring scores one prompt".into());
        }
        if item.choices.is_empty() {
            return Err("has no choices to score".into());
        }
        if item.choices.len() > MAX_CHOICES {
            return Err(format!(
                "has {} choices; likelihood scoring takes at most {MAX_CHOICES}",
                item.choices.len()
            ));
        }
        let continuations: Vec<String> = item
            .choices
            .iter()
            .map(|choice| format!("{}{choice}", self.target_delimiter))
            .collect();
        let requests = continuations
            .iter()
            .map(|continuation| continuation_request(context, continuation))
            .collect();
        let gold = gold_positions(&item.targets, item.choices.len());
        Ok(ItemScoring {
            context: context.clone(),
            continuations,
            requests,
            gold,
        })
    }
}

#[cfg(test)]
impl ChoiceScores {
    /// Scores of one-token choices with these log-likelihoods (greedy when above -1).
    pub(crate) fn for_tests(logprobs: &[f64], texts: &[&str], gold: Vec<usize>) -> ChoiceScores {
        let texts: Vec<String> = texts.iter().map(|text| text.to_string()).collect();
        let scores = logprobs
            .iter()
            .map(|&logprob| ContinuationScore {
                logprob,
                tokens: 1,
                greedy: logprob > -1.0,
                split_token: false,
            })
            .collect();
        ChoiceScores::new(&texts, scores, gold)
    }
}

/// The generation-cache key of one item scored by likelihood: the endpoint, the context, every
/// continuation in order, and the repetition. Two items with the same context and choices are
/// one request set; a changed choice is another.
pub fn scoring_key(
    fingerprint: &EndpointFingerprint,
    context: &str,
    continuations: &[String],
    repetition: i64,
) -> String {
    let fingerprint = serde_json::to_vec(fingerprint).expect("fingerprints always serialize");
    let count = (continuations.len() as u64).to_le_bytes();
    let repetition = repetition.to_le_bytes();
    let head: [&[u8]; 4] = [
        b"arbiter-likelihood-v1",
        &fingerprint,
        context.as_bytes(),
        &count,
    ];
    crate::expansion::fields_hash(
        head.into_iter()
            .chain(continuations.iter().map(String::as_bytes))
            .chain(std::iter::once(&repetition[..])),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn text<'a>(text: &'a str, prompt: &'a str, generated_tokens: Option<usize>) -> EchoedText<'a> {
        EchoedText {
            text,
            prompt,
            generated_tokens,
        }
    }

    fn echo(tokens: &[(&str, Option<f64>, f64)]) -> EchoedLogprobs {
        EchoedLogprobs {
            tokens: tokens.iter().map(|(text, _, _)| text.to_string()).collect(),
            token_logprobs: tokens.iter().map(|(_, logprob, _)| *logprob).collect(),
            top_logprobs: tokens
                .iter()
                .map(|(_, _, best)| Some(BTreeMap::from([("x".to_string(), *best)])))
                .collect(),
        }
    }

    #[test]
    fn trailing_whitespace_of_the_context_moves_into_the_continuation() {
        let request = continuation_request("Q: capital of France?\nA:", " Paris");
        assert_eq!(request.text, "Q: capital of France?\nA: Paris");
        assert_eq!(request.continuation_chars, 6);
        let request = continuation_request("Answer: ", "Paris");
        assert_eq!(request.text, "Answer: Paris");
        assert_eq!(
            request.continuation_chars, 6,
            "the space is the continuation's"
        );
        let request = continuation_request("Réponse\n\n", "Zürich");
        assert_eq!(request.continuation_chars, 8);
    }

    #[test]
    fn the_continuation_is_read_back_from_the_end_of_the_echo() {
        // "A: Paris" then one generated token "." (max_tokens 1).
        let echoed = echo(&[
            ("A", None, -1.0),
            (":", Some(-0.5), -0.5),
            (" Par", Some(-1.25), -1.0),
            ("is", Some(-0.25), -0.25),
            (".", Some(-2.0), -0.1),
        ]);
        let score = score_continuation(&echoed, text("A: Paris.", "A: Paris", None), 6).unwrap();
        assert_eq!(score.tokens, 2);
        assert!((score.logprob - -1.5).abs() < 1e-12);
        assert!(!score.greedy, "' Par' was not the most likely token");
        assert!(!score.split_token);
        // Nothing generated (max_tokens 0): the same reading.
        let mut without = echoed.clone();
        without.tokens.pop();
        without.token_logprobs.pop();
        without.top_logprobs.pop();
        assert_eq!(
            score_continuation(&without, text("A: Paris", "A: Paris", None), 6).unwrap(),
            score
        );
        // A stop token generated after the prompt, left out of the text but counted in the
        // usage (as vLLM reports `<|im_end|>`).
        let mut stopped = without.clone();
        stopped.tokens.push("<|im_end|>".into());
        stopped.token_logprobs.push(Some(-0.3));
        stopped.top_logprobs.push(None);
        assert_eq!(
            score_continuation(&stopped, text("A: Paris", "A: Paris", Some(1)), 6).unwrap(),
            score
        );
        // Tokens that do not spell the continuation are refused, not scored.
        let mut shifted = without.clone();
        shifted.tokens[3] = "IS".into();
        assert!(
            score_continuation(&shifted, text("A: Paris", "A: Paris", None), 6)
                .unwrap_err()
                .contains("do not end with the continuation")
        );
        // Nor are tokens holding parts of a character (decoded as U+FFFD).
        let mut partial = without.clone();
        partial.tokens[3] = "\u{FFFD}\u{FFFD}".into();
        assert!(
            score_continuation(&partial, text("A: Paris", "A: Paris", None), 6)
                .unwrap_err()
                .contains("parts of characters")
        );
    }

    #[test]
    fn a_boundary_inside_a_token_is_recorded() {
        // Context "A:" with continuation "P" + "aris" tokenised as ":P" + "aris".
        let echoed = echo(&[
            ("A", None, -1.0),
            (":P", Some(-0.5), -0.5),
            ("aris", Some(-0.25), -0.25),
        ]);
        let score = score_continuation(&echoed, text("A:Paris", "A:Paris", None), 5).unwrap();
        assert_eq!(score.tokens, 2);
        assert!(score.split_token);
        assert!(score.greedy);
    }

    #[test]
    fn echoes_without_prompt_logprobs_are_refused() {
        // Only the generated token came back: no echo.
        let generated = echo(&[(".", Some(-0.1), -0.1)]);
        assert!(score_continuation(&generated, text(".", "A: Paris", None), 6).is_err());
        // Echoed tokens without logprobs.
        let empty = echo(&[("A", None, -1.0), (": Paris", None, -1.0)]);
        assert!(
            score_continuation(&empty, text("A: Paris", "A: Paris", None), 6)
                .unwrap_err()
                .contains("no logprob")
        );
        // The continuation reaching the first token.
        let whole = echo(&[("A: Paris", None, -1.0)]);
        assert!(score_continuation(&whole, text("A: Paris", "A: Paris", None), 6).is_err());
    }

    fn scored(logprobs: &[f64], texts: &[&str], gold: Vec<usize>) -> ChoiceScores {
        ChoiceScores::for_tests(logprobs, texts, gold)
    }

    #[test]
    fn selections_follow_lm_evals_acc_acc_norm_and_acc_bytes() {
        // Raw prefers the short choice; per character, the long one.
        let scores = scored(&[-4.0, -6.0], &["ab", "abcdef"], vec![1]);
        assert_eq!(scores.selected(Selection::Raw), Some(0));
        assert_eq!(scores.selected(Selection::Chars), Some(1));
        assert_eq!(scores.correct(Selection::Raw), Some(false));
        assert_eq!(scores.correct(Selection::Chars), Some(true));
        // Bytes differ from characters for non-ASCII text: "é" is one char, two bytes.
        let accented = scored(&[-3.0, -3.0], &["éé", "abc"], vec![0]);
        assert_eq!(
            accented.selected(Selection::Chars),
            Some(1),
            "-1.5 per char vs -1"
        );
        assert_eq!(
            accented.selected(Selection::Bytes),
            Some(0),
            "-0.75 per byte vs -1"
        );
        let ties = scored(&[-1.0, -1.0, -1.0], &["a", "b", "c"], vec![2]);
        assert_eq!(
            ties.selected(Selection::Raw),
            Some(0),
            "ties go to the first"
        );
        assert_eq!(
            scored(&[-1.0], &["a"], vec![]).correct(Selection::Raw),
            None
        );
    }

    #[test]
    fn the_gold_probability_is_the_softmax_over_choices() {
        let scores = scored(&[0.0, 0.0, (2.0f64).ln()], &["a", "b", "c"], vec![2]);
        assert!((scores.gold_probability().unwrap() - 0.5).abs() < 1e-12);
        let two = scored(&[0.0, 0.0, (2.0f64).ln()], &["a", "b", "c"], vec![0, 1]);
        assert!((two.gold_probability().unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(scores.gold_logprob(), Some((2.0f64).ln()));
    }

    #[test]
    fn scoring_keys_cover_context_choices_and_repetition() {
        let fingerprint = EndpointFingerprint {
            served_model: Some("m".into()),
            engine_build: String::new(),
            parallel_layout: String::new(),
            probe_error: None,
        };
        let choices = vec![" a".to_string(), " b".to_string()];
        let key = scoring_key(&fingerprint, "Q", &choices, 0);
        assert_eq!(key, scoring_key(&fingerprint, "Q", &choices, 0));
        assert_ne!(key, scoring_key(&fingerprint, "Q", &choices[..1], 0));
        assert_ne!(key, scoring_key(&fingerprint, "Q ", &choices, 0));
        assert_ne!(key, scoring_key(&fingerprint, "Q", &choices, 1));
        let joined = vec![" a b".to_string()];
        assert_ne!(key, scoring_key(&fingerprint, "Q", &joined, 0));
    }
}
