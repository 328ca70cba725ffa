//! What a simulated model answers: a pure function of (model, prompt, seed). Every
//! random-looking choice is a stable xxh3 hash of that identity plus a purpose tag, never the
//! process-seeded std hasher. Answers come from the bundled sample dataset, so an answerer is
//! right, wrong or unparseable at its configured rates and a judge can tell a correct candidate
//! from a wrong one.

use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;
use xxhash_rust::xxh3::Xxh3Default;

use crate::{SimModel, SimModelKind};

/// The dataset the simulator can answer; the same file the demo offers for upload.
const SAMPLE_DATASET: &str = include_str!("../../public/samples/qa-basic.jsonl");
/// The code problems the simulator can complete (HumanEval's shape), as the demo uploads them.
const CODE_DATASET: &str = include_str!("../../public/samples/code-basic.jsonl");
const INSTRUCTIONS_DATASET: &str = include_str!("../../public/samples/instructions-basic.jsonl");

/// A wrong completion of a code problem: code that runs and fails the tests.
const WRONG_COMPLETIONS: [&str; 2] = ["    return None\n", "    raise NotImplementedError\n"];
/// A completion that is not code at all (the tests fail with a syntax error).
const NOT_CODE_COMPLETION: &str = "I would need more context to write this function.";

pub(crate) const PASS: &str = "PASS";

pub(crate) const FAIL: &str = "FAIL";

const UNKNOWN_QUESTION_REPLY: &str =
    "I do not recognise this question, so I cannot work it out.\nAnswer: unknown";

const UNDECIDED_VERDICT_REPLY: &str =
    "The response is partly right and partly unclear.\nI cannot give a firm verdict either way.";

/// Replies with no line starting with `Answer:`, so answer extraction must fail on them.
const RAMBLING_REPLIES: [&str; 3] = [
    "I am not completely sure.\nIt could be several things, depending on how the question is read.\nI would want to check a reference before committing to one.",
    "Let me think about this.\nThere are a few ways to approach it, and they point in different directions.\nI cannot settle on a single answer with confidence.",
    "Hmm, this is a tricky one.\nMy first instinct and my second thought disagree.\nPerhaps the question is asking about something slightly different.",
];

/// Plausible runner-up tokens for `top_logprobs`; more than `MAX_TOP_LOGPROBS` of them, so a
/// full list never runs out even after skipping the chosen token.
const ALTERNATIVE_TOKENS: [&str; 24] = [
    " the", " a", " is", " it", " answer", " of", " to", " and", "\n", " I", " so", " that", " be",
    " this", " we", " number", " about", " in", " not", " one", " two", " three", ".", ",",
];

/// One question of the bundled dataset, as far as the simulator cares.
#[derive(Debug, Deserialize)]
pub(crate) struct SampleItem {
    pub(crate) input: String,
    pub(crate) target: String,
    pub(crate) category: String,
}

pub(crate) fn sample_items() -> &'static [SampleItem] {
    static ITEMS: OnceLock<Vec<SampleItem>> = OnceLock::new();
    ITEMS.get_or_init(|| {
        // The file is compiled in and checked by a unit test, so a bad line is a build-time
        // mistake; skipping it keeps the simulator serving rather than panicking.
        SAMPLE_DATASET
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    })
}

/// One code problem, as far as the simulator cares: the stub it is asked to complete and the
/// body that passes its tests.
#[derive(Debug, Deserialize)]
struct CodeProblem {
    prompt: String,
    canonical_solution: String,
}

fn code_problems() -> &'static [CodeProblem] {
    static PROBLEMS: OnceLock<Vec<CodeProblem>> = OnceLock::new();
    PROBLEMS.get_or_init(|| {
        CODE_DATASET
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    })
}

/// The code problem whose stub the prompt holds; a docstring's quotes come first, so other
/// prompts cost one search.
fn find_code_problem(prompt: &str) -> Option<&'static CodeProblem> {
    if !prompt.contains("\"\"\"") {
        return None;
    }
    code_problems()
        .iter()
        .find(|problem| prompt.contains(problem.prompt.trim_end()))
}

/// The body completing a code problem's function: right at the model's accuracy, else code
/// that fails the tests (or, at its unparseable rate, prose that is no code at all).
fn complete_code(generation: Generation<'_>, problem: &CodeProblem) -> String {
    let model = generation.model;
    if generation.draw("unparseable", 0) < model.unparseable_rate {
        return NOT_CODE_COMPLETION.to_string();
    }
    if generation.draw("correct", 0) < model.accuracy {
        return problem.canonical_solution.clone();
    }
    pick(&WRONG_COMPLETIONS, generation.draw("wrong-pick", 0))
        .copied()
        .unwrap_or(WRONG_COMPLETIONS[0])
        .to_string()
}

/// One instruction-following item, as far as the simulator cares: its request, an answer
/// that follows every instruction, and one that misses some.
#[derive(Debug, Deserialize)]
struct InstructionItem {
    prompt: String,
    response: String,
    flawed: String,
}

fn instruction_items() -> &'static [InstructionItem] {
    static ITEMS: OnceLock<Vec<InstructionItem>> = OnceLock::new();
    ITEMS.get_or_init(|| {
        INSTRUCTIONS_DATASET
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    })
}

/// The answer to an instruction-following request: following every instruction at the
/// model's accuracy; at its unparseable rate, that answer after a chatty first line (which
/// IFEval's loose reading forgives, its strict one not); else the flawed answer.
fn follow_instructions(generation: Generation<'_>) -> Option<String> {
    let item = instruction_items()
        .iter()
        .find(|item| generation.prompt.contains(item.prompt.as_str()))?;
    let model = generation.model;
    Some(if generation.draw("correct", 0) < model.accuracy {
        if generation.draw("unparseable", 0) < model.unparseable_rate {
            format!("Sure! Here is my answer:\n{}", item.response)
        } else {
            item.response.clone()
        }
    } else {
        item.flawed.clone()
    })
}

/// The group of [`items_by_first_byte`] for text with no first byte.
const EMPTY_TEXT_GROUP: usize = 256;

/// The sample items grouped by the first byte of their question, each group in dataset order.
fn items_by_first_byte() -> &'static [Vec<&'static SampleItem>] {
    static GROUPS: OnceLock<Vec<Vec<&'static SampleItem>>> = OnceLock::new();
    GROUPS.get_or_init(|| {
        let mut groups = vec![Vec::new(); EMPTY_TEXT_GROUP + 1];
        for item in sample_items() {
            groups[first_byte_group(item.input.as_bytes())].push(item);
        }
        groups
    })
}

fn first_byte_group(text: &[u8]) -> usize {
    text.first()
        .map_or(EMPTY_TEXT_GROUP, |byte| usize::from(*byte))
}

/// The dataset question asked in `prompt`. Few-shot prompts quote earlier questions first, so
/// the one that occurs last is the one being asked; when two start at the same place (one is
/// a prefix of the other), the later dataset item wins.
fn find_question(prompt: &str) -> Option<&'static SampleItem> {
    // Walking start positions back from the end stops at the asked question, usually a few
    // dozen bytes from the end, rather than running a substring search per dataset item over
    // the whole prompt, which was the costliest step of a simulated request. Scanning each
    // group backwards makes the later dataset item win a tie.
    let prompt = prompt.as_bytes();
    let groups = items_by_first_byte();
    (0..=prompt.len()).rev().find_map(|start| {
        let rest = &prompt[start..];
        groups[first_byte_group(rest)]
            .iter()
            .rev()
            .find(|item| rest.starts_with(item.input.as_bytes()))
            .copied()
    })
}

/// The identity of one generation; every draw hashes it, so a reply is a pure function of it.
#[derive(Clone, Copy)]
pub(crate) struct Generation<'a> {
    pub(crate) model: &'a SimModel,
    pub(crate) prompt: &'a str,
    pub(crate) seed: i64,
}

impl Generation<'_> {
    /// The hash state after this generation's model and prompt; every draw continues from it.
    pub(crate) fn identity(&self) -> HashedIdentity {
        let mut state = Xxh3Default::new();
        for part in [self.model.name.as_bytes(), self.prompt.as_bytes()] {
            hash_length_prefixed(&mut state, part);
        }
        HashedIdentity {
            state,
            seed: self.seed,
        }
    }

    pub(crate) fn hash(&self, purpose: &str, index: u64) -> u64 {
        self.identity().hash(purpose, index)
    }

    /// A uniform draw in `[0, 1)`, independent across purposes and indices.
    pub(crate) fn draw(&self, purpose: &str, index: u64) -> f64 {
        self.identity().draw(purpose, index)
    }
}

/// A generation's identity already fed to xxh3. Scoring draws several times per token;
/// cloning this state instead of rehashing the prompt for each draw gives the same hashes
/// (a streaming hash depends only on the bytes fed) for much less work.
#[derive(Clone)]
pub(crate) struct HashedIdentity {
    pub(crate) state: Xxh3Default,
    pub(crate) seed: i64,
}

impl HashedIdentity {
    pub(crate) fn hash(&self, purpose: &str, index: u64) -> u64 {
        let mut hasher = self.state.clone();
        hash_length_prefixed(&mut hasher, purpose.as_bytes());
        hasher.update(&self.seed.to_le_bytes());
        hasher.update(&index.to_le_bytes());
        hasher.digest()
    }

    /// A uniform draw in `[0, 1)`, independent across purposes and indices.
    pub(crate) fn draw(&self, purpose: &str, index: u64) -> f64 {
        // The top 53 bits fill an f64 mantissa exactly, so every value is equally likely.
        (self.hash(purpose, index) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Length prefixes keep ("ab", "c") and ("a", "bc") from hashing alike.
fn hash_length_prefixed(hasher: &mut Xxh3Default, part: &[u8]) {
    hasher.update(&(part.len() as u64).to_le_bytes());
    hasher.update(part);
}

/// The element of `choices` that a uniform draw `u` in `[0, 1)` lands on.
fn pick<T>(choices: &[T], u: f64) -> Option<&T> {
    let index = (u * choices.len() as f64) as usize;
    choices.get(index.min(choices.len().saturating_sub(1)))
}

/// A reply before the request's limits (`max_tokens`, `stop`) are applied.
pub(crate) struct Reply {
    pub(crate) text: String,
    /// A judge's probability for its verdict token, which the logprobs report.
    pub(crate) verdict_confidence: Option<f64>,
    /// A judge asked for a point of a scale, or for A, B or TIE: each answer its first token
    /// may spell with its probability, which the logprobs at that token report.
    pub(crate) first_token_probabilities: Option<Vec<(String, f64)>>,
    /// A batch judge's reply: the probability of each line's verdict token, in order.
    pub(crate) line_verdicts: Vec<f64>,
}

pub(crate) fn generate_reply(generation: Generation<'_>) -> Reply {
    match generation.model.kind {
        SimModelKind::Answerer => Reply {
            line_verdicts: Vec::new(),
            text: answer(generation),
            verdict_confidence: None,
            first_token_probabilities: None,
        },
        SimModelKind::Judge => judge(generation),
    }
}

fn answer(generation: Generation<'_>) -> String {
    if let Some(problem) = find_code_problem(generation.prompt) {
        return complete_code(generation, problem);
    }
    let Some(item) = find_question(generation.prompt) else {
        return follow_instructions(generation)
            .unwrap_or_else(|| UNKNOWN_QUESTION_REPLY.to_string());
    };
    let model = generation.model;
    if generation.draw("unparseable", 0) < model.unparseable_rate {
        let rambling = pick(&RAMBLING_REPLIES, generation.draw("rambling", 0));
        return rambling.copied().unwrap_or(RAMBLING_REPLIES[0]).to_string();
    }
    let final_answer = if generation.draw("correct", 0) < model.accuracy {
        item.target.clone()
    } else {
        wrong_answer(generation, item)
    };
    let final_answer = as_letter(generation.prompt, item, &final_answer).unwrap_or(final_answer);
    // Right and wrong replies share the reasoning line, so only the answer tells them apart.
    format!("{}\nAnswer: {final_answer}", reasoning_line(&item.category))
}

/// With lettered options in the prompt (`A. Paris`, as a multiple-choice eval shows them), the
/// answer as a letter: that of the option the answer is, or else of an option that is not the
/// right one (a wrong answer stays wrong). The last block of options is the question's.
fn as_letter(prompt: &str, item: &SampleItem, answer: &str) -> Option<String> {
    let mut options: Vec<(char, &str)> = Vec::new();
    for line in prompt.lines() {
        let mut chars = line.chars();
        let (Some(letter), Some('.'), Some(' ')) = (chars.next(), chars.next(), chars.next())
        else {
            continue;
        };
        if !letter.is_ascii_uppercase() {
            continue;
        }
        if letter == 'A' {
            options.clear();
        }
        options.push((letter, line[3..].trim()));
    }
    if options.len() < 2 {
        return None;
    }
    options
        .iter()
        .find(|(_, text)| *text == answer)
        .or_else(|| options.iter().find(|(_, text)| *text != item.target))
        .map(|(letter, _)| letter.to_string())
}

fn reasoning_line(category: &str) -> &'static str {
    match category {
        "arithmetic" => "Working through the arithmetic step by step.",
        "capitals" => "Recalling the seat of government of that country.",
        "units" => "Applying the standard conversion factor.",
        _ => "Thinking it through carefully.",
    }
}

/// A mistake a model could plausibly make: a number slightly off, or a real answer to a
/// different question of the same kind.
fn wrong_answer(generation: Generation<'_>, item: &SampleItem) -> String {
    if let Ok(target) = item.target.parse::<i64>() {
        let offset = (1 + (generation.draw("wrong-offset", 0) * 5.0) as i64).min(5);
        let wrong = if generation.draw("wrong-sign", 0) < 0.5 {
            target - offset
        } else {
            target + offset
        };
        return wrong.to_string();
    }
    let others: Vec<&SampleItem> = sample_items()
        .iter()
        .filter(|other| other.category == item.category && other.target != item.target)
        .collect();
    pick(&others, generation.draw("wrong-pick", 0))
        .map_or_else(|| "unknown".to_string(), |other| other.target.clone())
}

fn judge(generation: Generation<'_>) -> Reply {
    let model = generation.model;
    if let Some(sides) = pairwise_asked(generation.prompt) {
        return pairwise_judge(generation, sides);
    }
    if let Some(items) = batch_asked(generation.prompt) {
        return batch_judge(generation, &items);
    }
    if generation.draw("unparseable", 0) < model.unparseable_rate {
        return Reply {
            line_verdicts: Vec::new(),
            text: UNDECIDED_VERDICT_REPLY.to_string(),
            verdict_confidence: None,
            first_token_probabilities: None,
        };
    }
    // Real judges are rarely certain and rarely coin-flips; [0.55, 0.99) looks like one.
    let (low, high) = model.calibrated_confidence.unwrap_or((0.55, 0.99));
    let confidence = low + (high - low) * generation.draw("confidence", 0);
    // A calibrated judge is right exactly as often as it says.
    let accuracy = match model.calibrated_confidence {
        Some(_) => confidence,
        None => model.accuracy,
    };
    let pass = match candidate_is_correct(generation.prompt) {
        Some(correct) if generation.draw("verdict", 0) < accuracy => correct,
        Some(correct) => !correct,
        None => generation.draw("verdict", 0) < 0.5,
    };
    if let Some(points) = scale_asked(generation.prompt) {
        // A good answer gets one of the top two points, a bad one one of the bottom two.
        let high = generation.draw("point", 0) < 0.5;
        let point = match (pass, high) {
            (true, true) => points,
            (true, false) => points - 1,
            (false, true) => 2,
            (false, false) => 1,
        };
        return Reply {
            line_verdicts: Vec::new(),
            text: point.to_string(),
            verdict_confidence: None,
            first_token_probabilities: Some(
                point_distribution(points, point, confidence)
                    .into_iter()
                    .enumerate()
                    .map(|(index, p)| ((index + 1).to_string(), p))
                    .collect(),
            ),
        };
    }
    Reply {
        line_verdicts: Vec::new(),
        text: if pass { PASS } else { FAIL }.to_string(),
        verdict_confidence: Some(confidence),
        first_token_probabilities: None,
    }
}

/// Arbiter's batch judge prompts (its `domain/src/grading/batch.rs`): the rubric once under
/// `=== Instructions ===`, its placeholders standing as these markers, then `=== Item n ===`
/// sections with the fields the rubric uses, then `=== How to reply ===`.
const BATCH_INSTRUCTIONS: &str = "=== Instructions ===\n";
const BATCH_ITEM: &str = "\n=== Item ";
const BATCH_REPLY: &str = "\n=== How to reply ===";
const BATCH_FIELDS: [(&str, &str); 3] = [
    ("Question:\n", "[the item's question]"),
    ("Reference answer:\n", "[the item's reference answer]"),
    ("Reply to grade:\n", "[the item's reply to grade]"),
];

/// A batch judge prompt's items, each as the one-item prompt the same rubric makes for it
/// (the instructions with each marker replaced by the item's field).
fn batch_asked(prompt: &str) -> Option<Vec<String>> {
    let instructions_at = prompt.find(BATCH_INSTRUCTIONS)? + BATCH_INSTRUCTIONS.len();
    let reply_at = prompt.rfind(BATCH_REPLY)?;
    let first_item = prompt[instructions_at..].find(BATCH_ITEM)? + instructions_at;
    // The instructions end with a line break of their own before the first item's.
    let instructions = prompt[instructions_at..first_item].strip_suffix('\n')?;
    let items = prompt[first_item..reply_at]
        .split(BATCH_ITEM)
        .filter(|section| !section.is_empty())
        .map(|section| {
            // After `n ===\n`: `Label:\nvalue\n` per field, a blank line between.
            let body = section.split_once(" ===\n").map_or("", |(_, body)| body);
            let mut one_item = instructions.to_string();
            for (index, (label, marker)) in BATCH_FIELDS.iter().enumerate() {
                let Some(start) = body.find(label).map(|at| at + label.len()) else {
                    continue;
                };
                let end = BATCH_FIELDS[index + 1..]
                    .iter()
                    .filter_map(|(next, _)| body[start..].find(&format!("\n\n{next}")))
                    .min()
                    .map_or(body.len().saturating_sub(1).max(start), |at| start + at);
                one_item = one_item.replace(marker, &body[start..end]);
            }
            one_item
        })
        .collect::<Vec<_>>();
    (!items.is_empty()).then_some(items)
}

/// A batch judge: each item judged exactly as it would be alone (the simulator is a
/// consistent judge, so only the batching itself can make verdicts differ), one
/// `Item n: VERDICT …` line each; an item it could not decide alone gets no line.
fn batch_judge(generation: Generation<'_>, items: &[String]) -> Reply {
    let mut lines = Vec::new();
    let mut line_verdicts = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let alone = judge(Generation {
            prompt: item,
            ..generation
        });
        // The verdict alone, as its one-item reply is.
        if let Some(confidence) = alone.verdict_confidence {
            lines.push(format!("Item {}: {}", index + 1, alone.text));
            line_verdicts.push(confidence);
        }
    }
    Reply {
        text: lines.join("\n"),
        verdict_confidence: None,
        first_token_probabilities: None,
        line_verdicts,
    }
}

/// What a pairwise judge prompt asks to compare (`… Answer A: … Answer B: … Reply A, B or
/// TIE …`): the two answers' texts.
fn pairwise_asked(prompt: &str) -> Option<(&str, &str)> {
    const ASK: &str = "A, B or TIE";
    let asked = prompt.find(ASK)?;
    let first = prompt.find("Answer A:")?;
    let second = prompt.find("Answer B:")?;
    (first < second && second < asked).then(|| {
        (
            &prompt[first + "Answer A:".len()..second],
            &prompt[second + "Answer B:".len()..asked],
        )
    })
}

/// A pairwise judge: the answer whose final line is right is better, both right or both wrong
/// are a tie; as often as the judge is wrong it picks another choice. It looks only at the
/// answers, never their order, so both orders of a pair agree.
fn pairwise_judge(generation: Generation<'_>, (first, second): (&str, &str)) -> Reply {
    let right = |answer: &str| {
        let item = find_question(generation.prompt)?;
        let expected = format!("Answer: {}", item.target);
        Some(
            answer
                .lines()
                .any(|line| line.trim().eq_ignore_ascii_case(&expected)),
        )
    };
    // The draws are keyed by the two answers' final lines as a set, not the prompt (whose
    // second section also runs into the instructions), so the judge's confidence and mistakes
    // do not depend on which answer is shown first.
    let final_line = |section: &str| -> String {
        // An answer without a final line is keyed by its text up to the first blank line.
        let answer = section.trim().split("\n\n").next().unwrap_or_default();
        answer
            .lines()
            .map(str::trim)
            .rfind(|line| line.starts_with("Answer:"))
            .unwrap_or(answer)
            .to_string()
    };
    let (first, second) = (final_line(first), final_line(second));
    let mut sides = [first.as_str(), second.as_str()];
    sides.sort_unstable();
    let pair = format!("{}\u{0}{}", sides[0], sides[1]);
    let by_pair = Generation {
        prompt: &pair,
        ..generation
    };
    let model = generation.model;
    // Unreadable in both orders alike.
    if by_pair.draw("unparseable", 0) < model.unparseable_rate {
        return Reply {
            line_verdicts: Vec::new(),
            text: UNDECIDED_VERDICT_REPLY.to_string(),
            verdict_confidence: None,
            first_token_probabilities: None,
        };
    }
    let (low, high) = model.calibrated_confidence.unwrap_or((0.55, 0.99));
    let confidence = low + (high - low) * by_pair.draw("confidence", 0);
    let accuracy = match model.calibrated_confidence {
        Some(_) => confidence,
        None => model.accuracy,
    };
    // Choices about the sorted sides: 0 the first is better, 1 the second, 2 a tie.
    let truth = match (right(sides[0]), right(sides[1])) {
        (Some(true), Some(false)) => 0,
        (Some(false), Some(true)) => 1,
        _ => 2,
    };
    // Two answers ending alike are a tie for it however it errs (a mistake naming a side
    // could not name the same answer in both orders).
    let chosen = if sides[0] == sides[1] || by_pair.draw("verdict", 0) < accuracy {
        truth
    } else {
        let wrong: Vec<usize> = (0..3).filter(|at| *at != truth).collect();
        wrong[usize::from(by_pair.draw("mistake", 0) >= 0.5)]
    };
    // As shown: A is the answer shown first.
    let shown_first_is_sorted_first = first == sides[0];
    const CHOICES: [&str; 3] = ["A", "B", "TIE"];
    let shown = match chosen {
        2 => 2,
        side if shown_first_is_sorted_first => side,
        side => 1 - side,
    };
    let rest = (1.0 - confidence) / 2.0;
    Reply {
        line_verdicts: Vec::new(),
        text: match shown {
            2 => "TIE because both are as good.".to_string(),
            side => format!("{} is better.", CHOICES[side]),
        },
        verdict_confidence: None,
        first_token_probabilities: Some(
            CHOICES
                .iter()
                .enumerate()
                .map(|(at, label)| {
                    (
                        label.to_string(),
                        if at == shown { confidence } else { rest },
                    )
                })
                .collect(),
        ),
    }
}

/// The points of the scale a judge prompt asks for (`… on a scale of 1 to 5 …`), 2 to 9.
fn scale_asked(prompt: &str) -> Option<usize> {
    const ASK: &str = "on a scale of 1 to ";
    let at = prompt.find(ASK)? + ASK.len();
    let digits: String = prompt[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .ok()
        .filter(|points| (2..=9).contains(points))
}

/// `confidence` on `point`, the rest on the other points, halving with each step away.
fn point_distribution(points: usize, point: usize, confidence: f64) -> Vec<f64> {
    let away = |other: usize| 0.5f64.powi(other.abs_diff(point) as i32);
    let spread: f64 = (1..=points).filter(|&p| p != point).map(away).sum();
    (1..=points)
        .map(|p| {
            if p == point {
                confidence
            } else {
                (1.0 - confidence) * away(p) / spread
            }
        })
        .collect()
}

/// Whether the candidate quoted in a judge prompt answered a known question correctly: the
/// prompt must contain the question and a line `Answer: <target>` (the answerer's final line).
/// `None` when the prompt quotes no known question.
fn candidate_is_correct(prompt: &str) -> Option<bool> {
    let item = find_question(prompt)?;
    let expected = format!("Answer: {}", item.target);
    Some(
        prompt
            .lines()
            .any(|line| line.trim().eq_ignore_ascii_case(&expected)),
    )
}

/// Splits text into words that carry their leading space, with each newline its own token;
/// concatenating the tokens gives back the text.
pub(crate) fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    for character in text.chars() {
        if character == '\n' {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            tokens.push("\n".to_string());
        } else if character == ' ' && current.chars().any(|c| c != ' ') {
            tokens.push(std::mem::take(&mut current));
            current.push(character);
        } else {
            current.push(character);
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// The request's limits on one generation.
pub(crate) struct Limits {
    pub(crate) max_tokens: usize,
    pub(crate) stop: Vec<String>,
    /// An injected truncation fault: stop after half the tokens.
    pub(crate) force_truncate: bool,
}

/// The tokens a request gets back and why generation ended.
pub(crate) struct Finished {
    pub(crate) tokens: Vec<String>,
    pub(crate) finish_reason: &'static str,
}

pub(crate) fn apply_limits(text: &str, limits: &Limits) -> Finished {
    // A real model checks stop sequences as it goes, so a stop that comes before the token
    // limit wins and one after it never happens.
    let mut tokens = tokenize(cut_at_stop(text, &limits.stop));
    let mut finish_reason = "stop";
    if limits.force_truncate {
        tokens.truncate(tokens.len() / 2);
        finish_reason = "length";
    }
    if tokens.len() > limits.max_tokens {
        tokens.truncate(limits.max_tokens);
        finish_reason = "length";
    }
    Finished {
        tokens,
        finish_reason,
    }
}

/// `text` up to (not including) the earliest stop string; empty stop strings are ignored.
fn cut_at_stop<'a>(text: &'a str, stop: &[String]) -> &'a str {
    stop.iter()
        .filter(|stop| !stop.is_empty())
        .filter_map(|stop| text.find(stop.as_str()))
        .min()
        .map_or(text, |end| &text[..end])
}

/// One returned token with its logprob and its `top_logprobs` list (chosen token first).
pub(crate) struct ScoredToken {
    pub(crate) text: String,
    pub(crate) logprob: f64,
    pub(crate) top: Vec<(String, f64)>,
}

pub(crate) fn score_tokens(
    generation: Generation<'_>,
    reply: &Reply,
    tokens: Vec<String>,
    top_count: usize,
) -> Vec<ScoredToken> {
    let identity = generation.identity();
    let mut line_verdicts = reply.line_verdicts.iter();
    tokens
        .into_iter()
        .enumerate()
        .map(|(index, text)| match (reply.verdict_confidence, index) {
            _ if !reply.line_verdicts.is_empty() && [PASS, FAIL].contains(&text.trim()) => {
                match line_verdicts.next() {
                    Some(confidence) => {
                        score_line_verdict(&identity, index as u64, text, *confidence, top_count)
                    }
                    None => score_token(&identity, index as u64, text, top_count),
                }
            }
            (Some(confidence), 0) if text == PASS || text == FAIL => {
                score_verdict(&identity, text, confidence, top_count)
            }
            (None, 0) if reply.first_token_probabilities.is_some() => {
                let probabilities = reply
                    .first_token_probabilities
                    .as_deref()
                    .unwrap_or_default();
                score_first_token(&identity, text, probabilities, top_count)
            }
            _ => score_token(&identity, index as u64, text, top_count),
        })
        .collect()
}

fn score_token(
    identity: &HashedIdentity,
    index: u64,
    text: String,
    top_count: usize,
) -> ScoredToken {
    // In (-2.5, -0.01]: sure enough to look like a tuned model, never exactly certain.
    let logprob = -0.01 - 2.49 * identity.draw("logprob", index);
    let top = top_alternatives(identity, index, vec![(text.clone(), logprob)], top_count);
    ScoredToken { text, logprob, top }
}

fn score_verdict(
    identity: &HashedIdentity,
    text: String,
    confidence: f64,
    top_count: usize,
) -> ScoredToken {
    let logprob = confidence.ln();
    let other = if text == PASS { FAIL } else { PASS };
    let leaders = vec![
        (text.clone(), logprob),
        (other.to_string(), (1.0 - confidence).ln()),
    ];
    // Graders read a judge's confidence from the PASS/FAIL pair, so both are always listed.
    let top = top_alternatives(identity, 0, leaders, top_count.max(2));
    ScoredToken { text, logprob, top }
}

/// A batch reply's verdict token (` PASS` after `Item n:`), with the other verdict, spelled
/// with the same leading space, as its listed alternative.
fn score_line_verdict(
    identity: &HashedIdentity,
    index: u64,
    text: String,
    confidence: f64,
    top_count: usize,
) -> ScoredToken {
    let word = text.trim();
    let other = text.replace(word, if word == PASS { FAIL } else { PASS });
    let logprob = confidence.ln();
    let leaders = vec![(text.clone(), logprob), (other, (1.0 - confidence).ln())];
    let top = top_alternatives(identity, index, leaders, top_count.max(2));
    ScoredToken { text, logprob, top }
}

/// A point or choice token: every answer listed by its probability, likeliest first (as many
/// as asked).
fn score_first_token(
    identity: &HashedIdentity,
    text: String,
    probabilities: &[(String, f64)],
    top_count: usize,
) -> ScoredToken {
    let mut leaders: Vec<(String, f64)> = probabilities
        .iter()
        .map(|(answer, p)| (answer.clone(), p.max(1e-12).ln()))
        .collect();
    leaders.sort_by(|a, b| b.1.total_cmp(&a.1));
    let logprob = leaders
        .iter()
        .find(|(token, _)| *token == text)
        .map_or(-0.01, |(_, logprob)| *logprob);
    let top = top_alternatives(identity, 0, leaders, top_count);
    ScoredToken { text, logprob, top }
}

/// The echoed prompt's tokens with their logprobs (the first, which follows nothing, has
/// none), as a server returns them for `echo` with `logprobs`.
///
/// Each token's logprob is a draw keyed by the text before it, so the shared context of an
/// item's choices scores alike in every request. When the prompt ends with the answer to a
/// question the simulator knows, that answer's tokens are likely (near 0) if the model knows
/// the question (at its accuracy, drawn per question, so the same for every choice) and
/// unlikely (below -4) if not; any other ending draws in (-2.5, -0.01] per token. So a
/// likelihood eval scores a checkpoint close to its accuracy, and an item's verdict is the
/// same whichever order its choices come in.
pub(crate) fn score_prompt(generation: Generation<'_>, top_count: usize) -> Vec<ScoredToken> {
    let tokens = tokenize(generation.prompt);
    let total = tokens.len();
    let answer_tokens = find_question(generation.prompt)
        .filter(|item| generation.prompt.trim_end().ends_with(item.target.as_str()))
        .map(|item| {
            let knows = Generation {
                prompt: &item.input,
                seed: 0,
                ..generation
            }
            .draw("likelihood-knows", 0)
                < generation.model.accuracy;
            let mut covered = 0;
            let target_chars = item.target.chars().count();
            let count = tokens
                .iter()
                .rev()
                .take_while(|token| {
                    let inside = covered < target_chars;
                    covered += token.trim_start().chars().count();
                    inside
                })
                .count();
            (count, knows)
        });
    let mut before = 0usize;
    tokens
        .into_iter()
        .enumerate()
        .map(|(index, text)| {
            // Keyed by everything before the token, never by what follows it.
            let prefix = Generation {
                prompt: &generation.prompt[..before],
                seed: 0,
                ..generation
            };
            before += text.len();
            let identity = prefix.identity();
            let draw = identity.draw("prompt-logprob", 0);
            let in_answer = answer_tokens
                .filter(|(count, _)| index + count >= total)
                .map(|(_, knows)| knows);
            let logprob = match in_answer {
                Some(true) => -0.01 - 0.09 * draw,
                Some(false) => -4.0 - 2.0 * draw,
                None => -0.01 - 2.49 * draw,
            };
            let leaders = match in_answer {
                // A token the model does not expect: something else was likelier.
                Some(false) => vec![(" the".to_string(), -0.7), (text.clone(), logprob)],
                _ => vec![(text.clone(), logprob)],
            };
            let top = top_alternatives(&identity, 0, leaders, top_count.max(1));
            ScoredToken {
                text,
                logprob: if index == 0 { f64::NAN } else { logprob },
                top,
            }
        })
        .collect()
}

/// The echo of a prompt sent as token ids (rolling likelihood): each token's logprob depends on
/// the token before it alone (a bigram model), so a document scores the same however it is cut
/// into windows, as long as every scored token follows another; and a model that knows more
/// (higher accuracy) finds text likelier, so perplexity ranks checkpoints as their accuracy
/// does. The first token follows nothing and has no logprob.
pub(crate) fn score_id_prompt(
    generation: Generation<'_>,
    tokens: Vec<String>,
    top_count: usize,
) -> Vec<ScoredToken> {
    let spread = 3.0 * (1.2 - generation.model.accuracy).max(0.05);
    let mut previous = String::new();
    tokens
        .into_iter()
        .enumerate()
        .map(|(index, text)| {
            let pair = format!("{previous}\u{0}{text}");
            let identity = Generation {
                prompt: &pair,
                seed: 0,
                ..generation
            }
            .identity();
            let logprob = -0.05 - spread * identity.draw("rolling-bigram", 0);
            let top = top_alternatives(
                &identity,
                0,
                vec![(text.clone(), logprob)],
                top_count.max(1),
            );
            previous.clone_from(&text);
            ScoredToken {
                text,
                logprob: if index == 0 { f64::NAN } else { logprob },
                top,
            }
        })
        .collect()
}

/// Extends `leaders` (most likely first) with filler tokens, each strictly less likely than
/// the one before, up to `count` entries in all; no token appears twice.
fn top_alternatives(
    identity: &HashedIdentity,
    index: u64,
    mut leaders: Vec<(String, f64)>,
    count: usize,
) -> Vec<(String, f64)> {
    let start =
        (identity.draw("alternative-start", index) * ALTERNATIVE_TOKENS.len() as f64) as usize;
    let candidates = ALTERNATIVE_TOKENS
        .iter()
        .cycle()
        .skip(start)
        .take(ALTERNATIVE_TOKENS.len());
    for candidate in candidates {
        if leaders.len() >= count {
            break;
        }
        if leaders.iter().any(|(token, _)| token == candidate) {
            continue;
        }
        let previous = leaders.last().map_or(0.0, |(_, logprob)| *logprob);
        // Room for MAX_TOP_LOGPROBS positions per token keeps each gap's draw independent.
        let position = index * (MAX_TOP_LOGPROBS as u64 + 1) + leaders.len() as u64;
        let gap = 0.05 + 0.95 * identity.draw("alternative-gap", position);
        leaders.push(((*candidate).to_string(), previous - gap));
    }
    leaders.truncate(count);
    leaders
}

/// A delay in `[min_ms, max_ms]` (a reversed range means `min_ms`).
pub(crate) fn latency(generation: Generation<'_>, min_ms: u64, max_ms: u64) -> Duration {
    let span = max_ms.saturating_sub(min_ms);
    let offset = (generation.draw("latency", 0) * (span as f64 + 1.0)) as u64;
    Duration::from_millis(min_ms + offset.min(span))
}

/// OpenAI's documented upper bound for `top_logprobs`.
pub(crate) const MAX_TOP_LOGPROBS: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{answerer, judge_model, TEMPLATE};

    fn reply_for(model: &SimModel, prompt: &str, seed: i64) -> Reply {
        generate_reply(Generation {
            model,
            prompt,
            seed,
        })
    }

    fn final_answer(text: &str) -> Option<&str> {
        text.lines().find_map(|line| line.strip_prefix("Answer: "))
    }

    fn limits(max_tokens: usize, stop: &[&str]) -> Limits {
        Limits {
            max_tokens,
            stop: stop.iter().map(|stop| (*stop).to_string()).collect(),
            force_truncate: false,
        }
    }

    /// The summed logprob of the echoed prompt's tokens after `context`.
    fn continuation_logprob(model: &SimModel, context: &str, continuation: &str) -> f64 {
        let text = format!("{context}{continuation}");
        let tokens = score_prompt(
            Generation {
                model,
                prompt: &text,
                seed: 0,
            },
            1,
        );
        let context_tokens = tokenize(context).len();
        tokens[context_tokens..]
            .iter()
            .map(|token| token.logprob)
            .sum()
    }

    #[test]
    fn echoed_prompts_make_the_right_choice_likely_at_the_models_accuracy() {
        let context = "Question: What is 17 + 25?\nAnswer:";
        let choices = [" 37", " 127", " 42", " 117"];
        let best = |model: &SimModel| {
            let scores: Vec<f64> = choices
                .iter()
                .map(|choice| continuation_logprob(model, context, choice))
                .collect();
            (0..choices.len())
                .max_by(|a, b| scores[*a].total_cmp(&scores[*b]))
                .unwrap()
        };
        assert_eq!(best(&answerer(1.0, 0.0)), 2);
        assert_ne!(best(&answerer(0.0, 0.0)), 2);
        // The first token follows nothing; the shared context scores alike for every choice.
        let text = format!("{context}{}", choices[0]);
        let model = answerer(0.5, 0.0);
        let generation = Generation {
            model: &model,
            prompt: &text,
            seed: 0,
        };
        let first = score_prompt(generation, 1);
        assert!(first[0].logprob.is_nan());
        let other = format!("{context}{}", choices[1]);
        let second = score_prompt(
            Generation {
                prompt: &other,
                ..generation
            },
            1,
        );
        assert_eq!(first[1].logprob, second[1].logprob);
        // Over many questions, right about as often as the model's accuracy.
        let items: Vec<&SampleItem> = sample_items().iter().take(60).collect();
        let model = answerer(0.7, 0.0);
        let right = items
            .iter()
            .filter(|item| {
                let context = format!("Question: {}\nAnswer:", item.input);
                let right = continuation_logprob(&model, &context, &format!(" {}", item.target));
                let wrong = continuation_logprob(&model, &context, " banana");
                right > wrong
            })
            .count();
        assert!((30..=54).contains(&right), "{right} of 60 at 0.7");
    }

    #[test]
    fn code_stubs_are_completed_right_at_the_models_accuracy() {
        let problems = code_problems();
        assert_eq!(problems.len(), 8, "every line of code-basic.jsonl parses");
        let problem = &problems[0];
        // A base model's prompt is the stub itself; a chat prompt wraps it.
        let prompts = [
            problem.prompt.clone(),
            format!("Complete this function.\n\n{}", problem.prompt),
        ];
        for prompt in &prompts {
            let right = reply_for(&answerer(1.0, 0.0), prompt, 1).text;
            assert_eq!(right, problem.canonical_solution);
            let wrong = reply_for(&answerer(0.0, 0.0), prompt, 1).text;
            assert!(WRONG_COMPLETIONS.contains(&wrong.as_str()), "{wrong}");
            let prose = reply_for(&answerer(1.0, 1.0), prompt, 1).text;
            assert_eq!(prose, NOT_CODE_COMPLETION);
        }
        let right = (0..400)
            .filter(|seed| {
                reply_for(&answerer(0.7, 0.0), &problem.prompt, *seed).text
                    == problem.canonical_solution
            })
            .count();
        assert!((240..=320).contains(&right), "{right} of 400 right at 0.7");
    }

    #[test]
    fn instruction_requests_are_followed_at_the_models_accuracy() {
        let items = instruction_items();
        assert_eq!(
            items.len(),
            14,
            "every line of instructions-basic.jsonl parses"
        );
        let item = &items[0];
        let prompt = format!("System: be brief.\n{}", item.prompt);
        assert_eq!(
            reply_for(&answerer(1.0, 0.0), &prompt, 1).text,
            item.response
        );
        assert_eq!(reply_for(&answerer(0.0, 0.0), &prompt, 1).text, item.flawed);
        let chatty = reply_for(&answerer(1.0, 1.0), &prompt, 1).text;
        assert_eq!(
            chatty,
            format!("Sure! Here is my answer:\n{}", item.response)
        );
        let right = (0..400)
            .filter(|seed| {
                reply_for(&answerer(0.7, 0.0), &item.prompt, *seed).text == item.response
            })
            .count();
        assert!((240..=320).contains(&right), "{right} of 400 right at 0.7");
    }

    #[test]
    fn bundled_dataset_has_sixty_items_in_three_categories() {
        let items = sample_items();
        assert_eq!(items.len(), 60);
        for category in ["arithmetic", "capitals", "units"] {
            let count = items
                .iter()
                .filter(|item| item.category == category)
                .count();
            assert_eq!(count, 20, "category {category}");
        }
    }

    #[test]
    fn every_question_is_found_in_its_prompt() {
        for item in sample_items() {
            let prompt = format!("{TEMPLATE}{}", item.input);
            let found = find_question(&prompt).map(|found| found.input.as_str());
            assert_eq!(found, Some(item.input.as_str()));
        }
    }

    #[test]
    fn few_shot_prompts_answer_the_last_question() {
        let prompt = format!(
            "{TEMPLATE}What is 17 + 25?\nAnswer: 42\n\n{TEMPLATE}What is the capital of Japan?"
        );
        assert_eq!(
            find_question(&prompt).map(|item| item.target.as_str()),
            Some("Tokyo")
        );
    }

    #[test]
    fn question_lookup_agrees_with_a_search_per_item() {
        // The plain definition: the item whose question occurs last, the later item on a tie.
        let by_search = |prompt: &str| {
            sample_items()
                .iter()
                .filter_map(|item| prompt.rfind(&item.input).map(|position| (position, item)))
                .max_by_key(|(position, _)| *position)
                .map(|(_, item)| item.input.as_str())
        };
        let items = sample_items();
        let mut prompts = vec![
            String::new(),
            "Who painted the ceiling?".to_string(),
            "Ünïcödé What is 17 + 25? ✓".to_string(),
        ];
        for (index, item) in items.iter().enumerate() {
            let other = &items[(index * 7 + 3) % items.len()].input;
            prompts.push(format!("{}{TEMPLATE}{other}\nAnswer: 1\n\n", item.input));
            prompts.push(format!(
                "{other} {} {other}{}",
                item.input,
                &item.input[..5]
            ));
            prompts.push(format!(
                "Question: {}\nResponse:\nAnswer: {}",
                item.input, item.target
            ));
        }
        for prompt in &prompts {
            let found = find_question(prompt).map(|item| item.input.as_str());
            assert_eq!(found, by_search(prompt), "{prompt}");
        }
    }

    #[test]
    fn same_model_prompt_and_seed_give_the_same_reply() {
        let model = answerer(0.5, 0.2);
        for item in sample_items() {
            let prompt = format!("{TEMPLATE}{}", item.input);
            assert_eq!(
                reply_for(&model, &prompt, 7).text,
                reply_for(&model, &prompt, 7).text
            );
        }
    }

    #[test]
    fn different_seeds_can_give_different_replies() {
        let model = answerer(0.5, 0.2);
        let prompt = format!("{TEMPLATE}What is 48 + 37?");
        let replies: std::collections::HashSet<String> = (0..20)
            .map(|seed| reply_for(&model, &prompt, seed).text)
            .collect();
        assert!(replies.len() > 1);
    }

    #[test]
    fn accuracy_lands_near_the_configured_rate() {
        let model = answerer(0.8, 0.0);
        let correct = sample_items()
            .iter()
            .filter(|item| {
                let reply = reply_for(&model, &format!("{TEMPLATE}{}", item.input), 0);
                final_answer(&reply.text) == Some(item.target.as_str())
            })
            .count();
        // 60 Bernoulli(0.8) draws: mean 48, standard deviation about 3.1.
        assert!((36..=58).contains(&correct), "{correct} of 60 correct");
    }

    #[test]
    fn wrong_answers_are_plausible_and_never_the_target() {
        let model = answerer(0.0, 0.0);
        for item in sample_items() {
            let reply = reply_for(&model, &format!("{TEMPLATE}{}", item.input), 3);
            let answer = final_answer(&reply.text).expect("a wrong reply still has an answer");
            assert_ne!(answer, item.target);
            match item.target.parse::<i64>() {
                Ok(target) => {
                    let wrong: i64 = answer.parse().expect("a numeric wrong answer");
                    assert!(
                        (1..=5).contains(&(wrong - target).abs()),
                        "{answer} vs {target}"
                    );
                }
                Err(_) => assert!(sample_items()
                    .iter()
                    .any(|other| other.category == item.category && other.target == answer)),
            }
        }
    }

    #[test]
    fn unparseable_replies_have_no_answer_line() {
        let model = answerer(1.0, 1.0);
        for item in sample_items() {
            let reply = reply_for(&model, &format!("{TEMPLATE}{}", item.input), 1);
            assert!(reply.text.lines().count() > 1);
            assert!(!reply.text.lines().any(|line| line.starts_with("Answer:")));
        }
    }

    #[test]
    fn unknown_prompts_get_a_generic_answer() {
        let reply = reply_for(&answerer(1.0, 0.0), "Who painted the ceiling?", 0);
        assert_eq!(final_answer(&reply.text), Some("unknown"));
    }

    #[test]
    fn tokens_concatenate_back_to_the_text() {
        let text = "Working through  it.\nAnswer: 42";
        let tokens = tokenize(text);
        assert_eq!(tokens.concat(), text);
        assert!(tokens.contains(&"\n".to_string()));
        assert_eq!(tokens.last().map(String::as_str), Some(" 42"));
    }

    #[test]
    fn max_tokens_truncates_with_finish_reason_length() {
        let text = "Working through the arithmetic step by step.\nAnswer: 42";
        let cut = apply_limits(text, &limits(3, &[]));
        assert_eq!(cut.tokens.concat(), "Working through the");
        assert_eq!(cut.finish_reason, "length");
        let whole = apply_limits(text, &limits(256, &[]));
        assert_eq!(whole.tokens.concat(), text);
        assert_eq!(whole.finish_reason, "stop");
    }

    #[test]
    fn a_pairwise_judge_prefers_the_right_answer_in_both_orders() {
        let model = judge_model();
        let ask = |first: &str, second: &str| {
            format!(
                "Question:\nWhat is 17 + 25?\n\nAnswer A:\nWorking.\nAnswer: {first}\n\nAnswer B:\nWorking.\nAnswer: {second}\n\nReply A, B or TIE first."
            )
        };
        let choice = |prompt: &str| {
            reply_for(&model, prompt, 0)
                .text
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        };
        // The demo judge is right most of the time; whatever it says, both orders name the
        // same answer.
        let (right_first, right_second) = (choice(&ask("42", "43")), choice(&ask("43", "42")));
        let swapped = match right_second.as_str() {
            "A" => "B",
            "B" => "A",
            other => other,
        };
        assert_eq!(right_first, swapped);
        let generation = Generation {
            model: &model,
            prompt: &ask("42", "42"),
            seed: 0,
        };
        let reply = generate_reply(generation);
        let labels: Vec<String> = reply
            .first_token_probabilities
            .clone()
            .unwrap()
            .into_iter()
            .map(|(label, _)| label)
            .collect();
        assert_eq!(labels, ["A", "B", "TIE"]);
        let scored = score_tokens(generation, &reply, tokenize(&reply.text), 5);
        let listed: Vec<&str> = scored[0]
            .top
            .iter()
            .map(|(text, _)| text.as_str())
            .collect();
        for label in ["A", "B", "TIE"] {
            assert!(listed.contains(&label), "{listed:?}");
        }
    }

    #[test]
    fn a_judge_asked_for_a_point_answers_one_with_every_points_probability() {
        let model = judge_model();
        let ask = |answer: &str| {
            format!(
                "Rate it on a scale of 1 to 5:\nQuestion: What is 17 + 25?\nResponse:\nWorking.\nAnswer: {answer}"
            )
        };
        let (right, wrong) = (ask("42"), ask("43"));
        let point = |prompt: &str| reply_for(&model, prompt, 0).text.parse::<usize>().unwrap();
        assert!(point(&right) >= 4, "{}", point(&right));
        assert!(point(&wrong) <= 2, "{}", point(&wrong));
        let generation = Generation {
            model: &model,
            prompt: &right,
            seed: 0,
        };
        let reply = generate_reply(generation);
        let probabilities: Vec<f64> = reply
            .first_token_probabilities
            .clone()
            .unwrap()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        assert!((probabilities.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let scored = score_tokens(generation, &reply, tokenize(&reply.text), 10);
        // Every point is listed, likeliest first, the chosen one with its own probability.
        let listed: Vec<&str> = scored[0]
            .top
            .iter()
            .map(|(text, _)| text.as_str())
            .collect();
        for point in ["1", "2", "3", "4", "5"] {
            assert!(listed.contains(&point), "{listed:?}");
        }
        let chosen: usize = reply.text.parse().unwrap();
        assert!((scored[0].logprob.exp() - probabilities[chosen - 1]).abs() < 1e-9);
        assert_eq!(scale_asked("on a scale of 1 to 12"), None);
    }

    #[test]
    fn stop_strings_cut_at_the_earliest_match() {
        let text = "Working through it.\nAnswer: 42";
        let cut = apply_limits(text, &limits(256, &["Answer:", "through"]));
        assert_eq!(cut.tokens.concat(), "Working ");
        assert_eq!(cut.finish_reason, "stop");
    }

    #[test]
    fn truncation_fault_keeps_half_the_tokens() {
        let text = "one two three four\nfive";
        let mut fault_limits = limits(256, &[]);
        fault_limits.force_truncate = true;
        let cut = apply_limits(text, &fault_limits);
        assert_eq!(cut.tokens.len(), tokenize(text).len() / 2);
        assert_eq!(cut.finish_reason, "length");
    }

    #[test]
    fn token_logprobs_are_in_range_with_decreasing_alternatives() {
        let model = answerer(1.0, 0.0);
        let generation = Generation {
            model: &model,
            prompt: "What is 7 * 8?",
            seed: 0,
        };
        let reply = generate_reply(generation);
        let scored = score_tokens(generation, &reply, tokenize(&reply.text), MAX_TOP_LOGPROBS);
        for token in &scored {
            assert!(token.logprob > -2.5 && token.logprob <= -0.01);
            assert_eq!(token.top.len(), MAX_TOP_LOGPROBS);
            assert_eq!(token.top[0], (token.text.clone(), token.logprob));
            assert!(token.top.windows(2).all(|pair| pair[1].1 < pair[0].1));
            let distinct: std::collections::HashSet<&str> =
                token.top.iter().map(|(text, _)| text.as_str()).collect();
            assert_eq!(distinct.len(), token.top.len());
        }
    }

    #[test]
    fn judge_gives_a_verdict_with_both_tokens_listed() {
        let model = judge_model();
        let right =
            "Question: What is 17 + 25?\nResponse:\nWorking.\nAnswer: 42\nReply PASS or FAIL.";
        let wrong =
            "Question: What is 17 + 25?\nResponse:\nWorking.\nAnswer: 43\nReply PASS or FAIL.";
        assert_eq!(reply_for(&model, right, 0).text, PASS);
        assert_eq!(reply_for(&model, wrong, 0).text, FAIL);
        let generation = Generation {
            model: &model,
            prompt: right,
            seed: 0,
        };
        let reply = generate_reply(generation);
        let confidence = reply
            .verdict_confidence
            .expect("a verdict has a confidence");
        assert!((0.55..0.99).contains(&confidence));
        let scored = score_tokens(generation, &reply, tokenize(&reply.text), 0);
        let tokens: Vec<&str> = scored[0]
            .top
            .iter()
            .map(|(text, _)| text.as_str())
            .collect();
        assert_eq!(tokens, [PASS, FAIL]);
        assert!((scored[0].logprob.exp() - confidence).abs() < 1e-9);
    }

    #[test]
    fn latency_stays_within_bounds() {
        let model = answerer(1.0, 0.0);
        for seed in 0..50 {
            let generation = Generation {
                model: &model,
                prompt: "anything",
                seed,
            };
            let delay = latency(generation, 20, 120);
            assert!((20..=120).contains(&delay.as_millis()));
        }
    }

    #[test]
    fn lettered_options_are_answered_with_a_letter() {
        let item = sample_items()
            .iter()
            .find(|item| item.input == "What is 17 + 25?")
            .unwrap();
        let prompt = "What is 17 + 25?\nA. 37\nB. 42\nC. 127\nAnswer with the letter.";
        assert_eq!(as_letter(prompt, item, "42").as_deref(), Some("B"));
        assert_eq!(
            as_letter(prompt, item, "41").as_deref(),
            Some("A"),
            "wrong stays wrong"
        );
        assert_eq!(as_letter("What is 17 + 25?", item, "42"), None);
    }
}
