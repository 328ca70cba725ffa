//! IFEval's verifiable instructions: each id with its parameters, read from an item, and the
//! check of one response against it, as lm-evaluation-harness's reference implementation
//! (`lm_eval/tasks/ifeval/instructions.py`) decides it.
//!
//! Where the reference fills a missing parameter with a random value, the item is refused
//! instead: a verdict must not depend on a draw.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use super::text::{
    count_capitalised_words, count_sentences, count_words, is_known_language, is_lower, is_upper,
    known_languages, reads_as,
};

/// The instruction ids this grader knows: IFEval's 25.
pub const INSTRUCTION_IDS: [&str; 25] = [
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
    "startend:quotation",
];

/// The answers a constrained response must contain one of.
const CONSTRAINED_RESPONSES: [&str; 3] = [
    "My answer is yes.",
    "My answer is no.",
    "My answer is maybe.",
];

/// Longest keyword or marker pattern compiled, so an item cannot make grading slow.
const MAX_PATTERN_BYTES: usize = 1_000;

/// How a count compares with its threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    LessThan,
    AtLeast,
}

impl Relation {
    fn holds(self, count: usize, threshold: usize) -> bool {
        match self {
            Relation::LessThan => count < threshold,
            Relation::AtLeast => count >= threshold,
        }
    }
}

/// One instruction with its parameters.
#[derive(Clone, Debug)]
pub enum Instruction {
    /// Every keyword (a pattern, matched ignoring case) appears.
    Keywords(Vec<Regex>),
    KeywordFrequency {
        keyword: Regex,
        relation: Relation,
        frequency: usize,
    },
    /// None of the words appears as a whole word, ignoring case.
    ForbiddenWords(Vec<Regex>),
    LetterFrequency {
        letter: String,
        relation: Relation,
        frequency: usize,
    },
    ResponseLanguage(String),
    Sentences {
        relation: Relation,
        count: usize,
    },
    /// Exactly this many paragraphs separated by `***`.
    Paragraphs(usize),
    Words {
        relation: Relation,
        count: usize,
    },
    /// Exactly `paragraphs` paragraphs separated by blank lines, the `nth` starting with `word`.
    NthParagraphFirstWord {
        paragraphs: usize,
        nth: usize,
        word: String,
    },
    /// At least this many `[placeholders]`.
    Placeholders(usize),
    /// A postscript starting with the marker (`P.S.`).
    Postscript(Regex),
    /// Exactly this many Markdown bullet points.
    BulletPoints(usize),
    ConstrainedResponse,
    /// At least this many `*highlighted*` sections.
    HighlightedSections(usize),
    /// At least `count` sections, each starting with the splitter and a number (`Section 1`).
    Sections {
        splitter: Regex,
        count: usize,
    },
    JsonFormat,
    /// A title in double angle brackets (`<<title>>`).
    Title,
    /// Two different responses separated by six asterisks.
    TwoResponses,
    /// The response starts by repeating the request, word for word.
    RepeatPrompt(String),
    /// The response ends with the phrase.
    EndPhrase(String),
    CapitalWordFrequency {
        relation: Relation,
        frequency: usize,
    },
    EnglishCapital,
    EnglishLowercase,
    NoComma,
    /// The response is wrapped in double quotation marks.
    Quotation,
}

impl Instruction {
    /// The instruction `id` with its parameters from `kwargs` (null values count as absent, as
    /// the IFEval dataset pads every instruction's parameters with nulls).
    pub fn parse(id: &str, kwargs: &Map<String, Value>) -> Result<Instruction, String> {
        let args = Args { kwargs };
        let instruction = match id {
            "keywords:existence" => {
                Instruction::Keywords(args.patterns("keywords", |word| word.to_string())?)
            }
            "keywords:frequency" => Instruction::KeywordFrequency {
                keyword: pattern(args.text("keyword")?.trim())?,
                relation: args.relation("relation")?,
                frequency: args.count("frequency")?,
            },
            "keywords:forbidden_words" => Instruction::ForbiddenWords(
                args.patterns("forbidden_words", |word| format!(r"\b{word}\b"))?,
            ),
            "keywords:letter_frequency" => Instruction::LetterFrequency {
                letter: {
                    // One character. The reference draws a random letter for anything but a to
                    // z (IFEval has items asking for `#` and `!`); the character asked for is
                    // counted here instead, so the verdict does not depend on a draw.
                    let letter = args.text("letter")?.trim().to_lowercase();
                    if letter.chars().count() != 1 {
                        return Err(format!(
                            "has `letter` = `{letter}`; it must be one character"
                        ));
                    }
                    letter
                },
                relation: args.relation("let_relation")?,
                frequency: args.count("let_frequency")?,
            },
            "language:response_language" => {
                let language = args.text("language")?.trim();
                if !is_known_language(language) {
                    return Err(format!(
                        "has `language` = `{language}`, which is not an ISO 639-1 code the \
                         language detector knows ({})",
                        known_languages().join(", ")
                    ));
                }
                Instruction::ResponseLanguage(language.to_string())
            }
            "length_constraints:number_sentences" => Instruction::Sentences {
                relation: args.relation("relation")?,
                count: args.count("num_sentences")?,
            },
            "length_constraints:number_paragraphs" => {
                Instruction::Paragraphs(args.count("num_paragraphs")?)
            }
            "length_constraints:number_words" => Instruction::Words {
                relation: args.relation("relation")?,
                count: args.count("num_words")?,
            },
            "length_constraints:nth_paragraph_first_word" => {
                let paragraphs = args.count("num_paragraphs")?;
                let nth = args.count("nth_paragraph")?;
                if nth == 0 || nth > paragraphs {
                    return Err(format!(
                        "`nth_paragraph` is {nth}; it must be between 1 and `num_paragraphs` \
                         ({paragraphs})"
                    ));
                }
                Instruction::NthParagraphFirstWord {
                    paragraphs,
                    nth,
                    word: args.text("first_word")?.to_lowercase(),
                }
            }
            "detectable_content:number_placeholders" => {
                Instruction::Placeholders(args.count("num_placeholders")?)
            }
            "detectable_content:postscript" => {
                let marker = args.text("postscript_marker")?.trim();
                let source = match marker {
                    "P.P.S" => r"p\.\s?p\.\s?s".to_string(),
                    "P.S." => r"p\.\s?s\.".to_string(),
                    // The reference reads any other marker as a pattern.
                    other => other.to_lowercase(),
                };
                Instruction::Postscript(compile(&source, true, true)?)
            }
            "detectable_format:number_bullet_lists" => {
                Instruction::BulletPoints(args.count("num_bullets")?)
            }
            "detectable_format:constrained_response" => Instruction::ConstrainedResponse,
            "detectable_format:number_highlighted_sections" => {
                Instruction::HighlightedSections(args.count("num_highlights")?)
            }
            "detectable_format:multiple_sections" => {
                let splitter = args.text("section_spliter")?.trim();
                Instruction::Sections {
                    splitter: compile(&format!(r"\s?{splitter}\s?\d+\s?"), false, false)?,
                    count: args.count("num_sections")?,
                }
            }
            "detectable_format:json_format" => Instruction::JsonFormat,
            "detectable_format:title" => Instruction::Title,
            "combination:two_responses" => Instruction::TwoResponses,
            "combination:repeat_prompt" => {
                Instruction::RepeatPrompt(args.text("prompt_to_repeat")?.to_string())
            }
            "startend:end_checker" => {
                Instruction::EndPhrase(args.text("end_phrase")?.trim().to_lowercase())
            }
            "change_case:capital_word_frequency" => Instruction::CapitalWordFrequency {
                relation: args.relation("capital_relation")?,
                frequency: args.count("capital_frequency")?,
            },
            "change_case:english_capital" => Instruction::EnglishCapital,
            "change_case:english_lowercase" => Instruction::EnglishLowercase,
            "punctuation:no_comma" => Instruction::NoComma,
            "startend:quotation" => Instruction::Quotation,
            unknown => {
                return Err(format!(
                    "names the unknown instruction `{unknown}`; known ones are {}",
                    INSTRUCTION_IDS.join(", ")
                ))
            }
        };
        Ok(instruction)
    }

    /// Whether `response` follows the instruction.
    pub fn follows(&self, response: &str) -> bool {
        match self {
            Instruction::Keywords(keywords) => keywords.iter().all(|k| k.is_match(response)),
            Instruction::KeywordFrequency {
                keyword,
                relation,
                frequency,
            } => relation.holds(keyword.find_iter(response).count(), *frequency),
            Instruction::ForbiddenWords(words) => !words.iter().any(|w| w.is_match(response)),
            Instruction::LetterFrequency {
                letter,
                relation,
                frequency,
            } => {
                let mut letters = letter.chars();
                let count = match (letters.next(), letters.next()) {
                    // Python's `Counter(text)[letter]`: a longer "letter" is never counted.
                    (Some(letter), None) => response
                        .to_lowercase()
                        .chars()
                        .filter(|c| *c == letter)
                        .count(),
                    _ => 0,
                };
                relation.holds(count, *frequency)
            }
            // Finding no language to read counts as followed, as in the reference.
            Instruction::ResponseLanguage(language) => reads_as(response, language).unwrap_or(true),
            Instruction::Sentences { relation, count } => {
                relation.holds(count_sentences(response), *count)
            }
            Instruction::Paragraphs(count) => divider_paragraphs(response) == Some(*count),
            Instruction::Words { relation, count } => relation.holds(count_words(response), *count),
            Instruction::NthParagraphFirstWord {
                paragraphs,
                nth,
                word,
            } => nth_paragraph_first_word(response, *paragraphs, *nth, word),
            Instruction::Placeholders(count) => {
                static PLACEHOLDER: std::sync::LazyLock<Regex> =
                    std::sync::LazyLock::new(|| Regex::new(r"\[.*?\]").expect("compiles"));
                PLACEHOLDER.find_iter(response).count() >= *count
            }
            Instruction::Postscript(marker) => marker.is_match(&response.to_lowercase()),
            Instruction::BulletPoints(count) => bullet_points(response) == *count,
            Instruction::ConstrainedResponse => {
                let response = response.trim();
                CONSTRAINED_RESPONSES
                    .iter()
                    .any(|option| response.contains(option))
            }
            Instruction::HighlightedSections(count) => highlighted_sections(response) >= *count,
            Instruction::Sections { splitter, count } => {
                splitter.find_iter(response).count() >= *count
            }
            Instruction::JsonFormat => is_json(response),
            Instruction::Title => titles(response),
            Instruction::TwoResponses => two_responses(response),
            Instruction::RepeatPrompt(prompt) => response
                .trim()
                .to_lowercase()
                .starts_with(&prompt.trim().to_lowercase()),
            Instruction::EndPhrase(phrase) => response
                .trim()
                .trim_matches('"')
                .to_lowercase()
                .ends_with(phrase.as_str()),
            Instruction::CapitalWordFrequency {
                relation,
                frequency,
            } => relation.holds(count_capitalised_words(response), *frequency),
            Instruction::EnglishCapital => {
                is_upper(response) && reads_as(response, "en").unwrap_or(true)
            }
            Instruction::EnglishLowercase => {
                is_lower(response) && reads_as(response, "en").unwrap_or(true)
            }
            Instruction::NoComma => !response.contains(','),
            Instruction::Quotation => {
                let response = response.trim();
                response.chars().count() > 1 && response.starts_with('"') && response.ends_with('"')
            }
        }
    }
}

/// An instruction's parameters, read by name.
struct Args<'a> {
    kwargs: &'a Map<String, Value>,
}

impl Args<'_> {
    /// The parameter, unless it is missing or "falsy" (null, 0, `""`, `[]`, `{}`, false):
    /// the reference drops those and draws a random value in their place.
    fn present(&self, name: &str) -> Result<&Value, String> {
        let falsy = |value: &Value| match value {
            Value::Null => true,
            Value::Bool(flag) => !flag,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(text) => text.is_empty(),
            Value::Array(list) => list.is_empty(),
            Value::Object(map) => map.is_empty(),
        };
        match self.kwargs.get(name) {
            None => Err(format!("needs the parameter `{name}`")),
            Some(value) if falsy(value) => Err(format!(
                "has `{name}` = {value}, which IFEval's reference reads as missing (it would \
                 draw a random value); give a real one"
            )),
            Some(value) => Ok(value),
        }
    }

    fn text(&self, name: &str) -> Result<&str, String> {
        match self.present(name)? {
            Value::String(text) if !text.trim().is_empty() => Ok(text),
            Value::String(_) => Err(format!("has an empty `{name}`")),
            other => Err(format!("has `{name}` = {other}, which is not text")),
        }
    }

    /// A count: a whole number, zero or more (`3` or `3.0`).
    fn count(&self, name: &str) -> Result<usize, String> {
        let value = self.present(name)?;
        value
            .as_u64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= u32::MAX as f64)
                    .map(|n| n as u64)
            })
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("has `{name}` = {value}, which is not a whole number"))
    }

    fn relation(&self, name: &str) -> Result<Relation, String> {
        match self.text(name)? {
            "less than" => Ok(Relation::LessThan),
            "at least" => Ok(Relation::AtLeast),
            other => Err(format!(
                "has `{name}` = `{other}`; it must be `less than` or `at least`"
            )),
        }
    }

    /// A non-empty list of words, each made a pattern by `to_pattern` (matched ignoring case).
    fn patterns(
        &self,
        name: &str,
        to_pattern: impl Fn(&str) -> String,
    ) -> Result<Vec<Regex>, String> {
        let Value::Array(words) = self.present(name)? else {
            return Err(format!("has `{name}` that is not a list of words"));
        };
        if words.is_empty() {
            return Err(format!("has an empty `{name}` list"));
        }
        words
            .iter()
            .map(|word| match word {
                Value::String(word) if !word.is_empty() => pattern(&to_pattern(word)),
                other => Err(format!("has {other} in `{name}`, which is not a word")),
            })
            .collect()
    }
}

/// A keyword or marker, read as a pattern ignoring case, as the reference reads it.
fn pattern(source: &str) -> Result<Regex, String> {
    compile(source, true, false)
}

/// `multi_line`: `^` and `$` match at line ends (only the postscript check reads that way).
fn compile(source: &str, ignore_case: bool, multi_line: bool) -> Result<Regex, String> {
    if source.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "has a pattern of {} bytes; the limit is {MAX_PATTERN_BYTES}",
            source.len()
        ));
    }
    RegexBuilder::new(source)
        .case_insensitive(ignore_case)
        .multi_line(multi_line)
        .size_limit(1 << 20)
        .build()
        .map_err(|error| format!("has `{source}`, which does not read as a pattern: {error}"))
}

/// Paragraphs between `***` dividers; `None` when one between two dividers is empty.
fn divider_paragraphs(response: &str) -> Option<usize> {
    static DIVIDER: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"\s?\*\*\*\s?").expect("compiles"));
    let paragraphs: Vec<&str> = DIVIDER.split(response).collect();
    let last = paragraphs.len() - 1;
    let mut count = paragraphs.len();
    for (index, paragraph) in paragraphs.iter().enumerate() {
        if paragraph.trim().is_empty() {
            if index == 0 || index == last {
                count -= 1;
            } else {
                return None;
            }
        }
    }
    Some(count)
}

fn nth_paragraph_first_word(response: &str, expected: usize, nth: usize, word: &str) -> bool {
    let paragraphs: Vec<&str> = response.split("\n\n").collect();
    let count = paragraphs.iter().filter(|p| !p.trim().is_empty()).count();
    // The reference counts non-empty paragraphs but picks the nth of all of them.
    if nth > count {
        return false;
    }
    let paragraph = paragraphs[nth - 1].trim();
    let Some(first) = paragraph.split_whitespace().next() else {
        return false;
    };
    let first: String = first
        .trim_start_matches('\'')
        .trim_start_matches('"')
        .chars()
        .take_while(|c| !matches!(c, '.' | ',' | '?' | '!' | '\'' | '"'))
        .collect::<String>()
        .to_lowercase();
    count == expected && first == word
}

/// Markdown bullet points: lines starting with `* ` (not `**`) or `-`.
fn bullet_points(response: &str) -> usize {
    static STAR: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"(?m)^\s*\*[^\*].*$").expect("compiles"));
    static DASH: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"(?m)^\s*-.*$").expect("compiles"));
    STAR.find_iter(response).count() + DASH.find_iter(response).count()
}

/// `*highlighted*` and `**highlighted**` sections with some text inside.
fn highlighted_sections(response: &str) -> usize {
    static SINGLE: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"\*[^\n\*]*\*").expect("compiles"));
    static DOUBLE: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"\*\*[^\n\*]*\*\*").expect("compiles"));
    let single = SINGLE
        .find_iter(response)
        .filter(|m| !m.as_str().trim_matches('*').trim().is_empty())
        .count();
    let double = DOUBLE
        .find_iter(response)
        .filter(|m| {
            let inner = &m.as_str()[2..m.as_str().len() - 2];
            !inner.trim().is_empty()
        })
        .count();
    single + double
}

/// The whole response is one JSON document, optionally in a Markdown code fence.
fn is_json(response: &str) -> bool {
    let mut body = response.trim();
    // One after another, as the reference's chained `removeprefix` calls strip them.
    for fence in ["```json", "```Json", "```JSON", "```"] {
        body = body.strip_prefix(fence).unwrap_or(body);
    }
    let body = body.strip_suffix("```").unwrap_or(body).trim();
    serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
        || serde_json::from_str::<serde::de::IgnoredAny>(&without_non_finite_numbers(body)).is_ok()
}

/// `body` with Python's non-standard JSON numbers (`NaN`, `Infinity`, `-Infinity`, which the
/// reference's `json.loads` accepts) outside strings replaced by `null`, which cannot merge
/// with a neighbouring number (`1NaN` stays invalid).
fn without_non_finite_numbers(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = body;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let word = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|word| rest.starts_with(word));
        match word {
            Some(word) => {
                out.push_str("null");
                rest = &rest[word.len()..];
            }
            None => {
                in_string = c == '"';
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

/// Some `<<title>>` with text inside.
fn titles(response: &str) -> bool {
    static TITLE: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"<<[^\n]+>>").expect("compiles"));
    TITLE.find_iter(response).any(|title| {
        !title
            .as_str()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim()
            .is_empty()
    })
}

/// Exactly two different, non-empty responses separated by `******`.
fn two_responses(response: &str) -> bool {
    let parts: Vec<&str> = response.split("******").collect();
    let last = parts.len() - 1;
    let mut answers = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        if part.trim().is_empty() {
            if index != 0 && index != last {
                return false;
            }
        } else {
            answers.push(part.trim());
        }
    }
    answers.len() == 2 && answers[0] != answers[1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn instruction(id: &str, kwargs: Value) -> Instruction {
        let Value::Object(kwargs) = kwargs else {
            panic!("kwargs are an object")
        };
        Instruction::parse(id, &kwargs).unwrap()
    }

    #[test]
    fn every_known_id_parses_with_its_parameters() {
        let kwargs = json!({
            "keywords": ["cat"], "keyword": "dog", "frequency": 2, "relation": "at least",
            "forbidden_words": ["bad"], "letter": "a", "let_frequency": 3,
            "let_relation": "less than", "language": "en", "num_sentences": 2,
            "num_paragraphs": 2, "num_words": 10, "nth_paragraph": 1, "first_word": "Hello",
            "num_placeholders": 1, "postscript_marker": "P.S.", "num_bullets": 2,
            "num_highlights": 1, "section_spliter": "Section", "num_sections": 2,
            "prompt_to_repeat": "Say hi", "end_phrase": "Bye.", "capital_frequency": 2,
            "capital_relation": "at least"
        });
        for id in INSTRUCTION_IDS {
            instruction(id, kwargs.clone());
        }
    }

    #[test]
    fn items_that_would_need_a_draw_are_refused() {
        let refuse = |id: &str, kwargs: Value| {
            let Value::Object(kwargs) = kwargs else {
                unreachable!()
            };
            Instruction::parse(id, &kwargs).unwrap_err()
        };
        assert!(refuse("keywords:existence", json!({"keywords": null})).contains("`keywords`"));
        assert!(refuse("keywords:existence", json!({"keywords": []})).contains("reads as missing"));
        assert!(refuse(
            "length_constraints:number_words",
            json!({"num_words": 5, "relation": "more than"})
        )
        .contains("`less than` or `at least`"));
        assert!(refuse(
            "length_constraints:nth_paragraph_first_word",
            json!({"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "x"})
        )
        .contains("between 1 and"));
        assert!(refuse(
            "keywords:frequency",
            json!({"keyword": "(", "frequency": 1, "relation": "at least"})
        )
        .contains("does not read as a pattern"));
        assert!(refuse("detectable_format:rhyme", json!({})).contains("unknown instruction"));
        assert!(refuse(
            "detectable_format:number_bullet_lists",
            json!({"num_bullets": 0})
        )
        .contains("reads as missing"));
        assert!(refuse(
            "keywords:letter_frequency",
            json!({"letter": "ab", "let_frequency": 2, "let_relation": "at least"})
        )
        .contains("must be one character"));
        assert!(refuse(
            "length_constraints:number_words",
            json!({"num_words": 2.5, "relation": "at least"})
        )
        .contains("not a whole number"));
    }

    #[test]
    fn keyword_checks_ignore_case_and_forbidden_words_need_whole_words() {
        let keywords = instruction("keywords:existence", json!({"keywords": ["Cat", "dog"]}));
        assert!(keywords.follows("A CAT and a Dog."));
        assert!(!keywords.follows("A cat alone."));
        let forbidden = instruction(
            "keywords:forbidden_words",
            json!({"forbidden_words": ["cat"]}),
        );
        assert!(forbidden.follows("Concatenate the strings."));
        assert!(!forbidden.follows("The Cat sat."));
        let frequency = instruction(
            "keywords:frequency",
            json!({"keyword": "the", "frequency": 3, "relation": "at least"}),
        );
        assert!(frequency.follows("The then other"));
        assert!(!frequency.follows("The one"));
    }

    #[test]
    fn format_checks() {
        let bullets = instruction(
            "detectable_format:number_bullet_lists",
            json!({"num_bullets": 2}),
        );
        assert!(bullets.follows("Intro\n* one\n- two\n**bold** line"));
        assert!(!bullets.follows("* one"));
        let highlights = instruction(
            "detectable_format:number_highlighted_sections",
            json!({"num_highlights": 2}),
        );
        assert!(highlights.follows("*one* and **two**"));
        assert!(!highlights.follows("** ** and *one*"));
        let json_format = instruction("detectable_format:json_format", json!({}));
        assert!(json_format.follows("```json\n{\"a\": 1}\n```"));
        assert!(!json_format.follows("Here: {\"a\": 1}"));
        assert!(json_format.follows("{\"a\": NaN, \"b\": [-Infinity], \"c\": \"NaN \\\" x\"}"));
        assert!(!json_format.follows("{\"a\": NaNx}"));
        assert!(!json_format.follows("[1NaN]") && !json_format.follows("[-NaN]"));
        assert!(json_format.follows("```json```{}"));
        let title = instruction("detectable_format:title", json!({}));
        assert!(title.follows("<<My Poem>>\nRoses"));
        assert!(!title.follows("<<  >> nothing"));
        let paragraphs = instruction(
            "length_constraints:number_paragraphs",
            json!({"num_paragraphs": 2}),
        );
        assert!(paragraphs.follows("One\n***\nTwo\n***"));
        assert!(!paragraphs.follows("One\n***\n\n***\nTwo"));
        let nth = instruction(
            "length_constraints:nth_paragraph_first_word",
            json!({"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Then"}),
        );
        assert!(nth.follows("First part.\n\n\"Then, the rest.\""));
        assert!(!nth.follows("First part.\n\nAnd then."));
        let two = instruction("combination:two_responses", json!({}));
        assert!(two.follows("Yes.\n******\nNo."));
        assert!(!two.follows("Yes.\n******\nYes."));
        let sections = instruction(
            "detectable_format:multiple_sections",
            json!({"section_spliter": "Section", "num_sections": 2}),
        );
        assert!(sections.follows("Section 1\nA\nSection 2\nB"));
        assert!(!sections.follows("SECTION 1\nA\nSection 2\nB"));
    }

    #[test]
    fn start_end_and_case_checks() {
        let end = instruction(
            "startend:end_checker",
            json!({"end_phrase": "Any other questions?"}),
        );
        assert!(end.follows("Done. any other questions?\"  "));
        let quotation = instruction("startend:quotation", json!({}));
        assert!(quotation.follows(" \"quoted\" "));
        assert!(!quotation.follows("\""));
        let repeat = instruction(
            "combination:repeat_prompt",
            json!({"prompt_to_repeat": "Write a poem."}),
        );
        assert!(repeat.follows("write a poem. Roses are red."));
        let postscript = instruction(
            "detectable_content:postscript",
            json!({"postscript_marker": "P.P.S"}),
        );
        assert!(postscript.follows("Body\n\nP. P. S. more"));
        assert!(!postscript.follows("Body\nPS more"));
        let capital = instruction("change_case:english_capital", json!({}));
        assert!(capital.follows("THIS IS AN ANSWER WRITTEN IN ENGLISH, ALL IN CAPITALS."));
        assert!(!capital.follows("This is not."));
        let lower = instruction("change_case:english_lowercase", json!({}));
        assert!(lower.follows("this is an answer written in english, all in lower case."));
        let letters = instruction(
            "keywords:letter_frequency",
            json!({"letter": "Z", "let_frequency": 2, "let_relation": "at least"}),
        );
        assert!(letters.follows("Zebras zoom"));
        assert!(!letters.follows("Zebra"));
        let hashes = instruction(
            "keywords:letter_frequency",
            json!({"letter": "#", "let_frequency": 2, "let_relation": "at least"}),
        );
        assert!(hashes.follows("## Title #tag") && !hashes.follows("# Title"));
    }
}
