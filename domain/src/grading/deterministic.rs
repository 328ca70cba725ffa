//! The deterministic grader library: graders described as data ([`GraderSpec`]), checked when an
//! eval is saved ([`GraderSpec::validate`]) and compiled once per run ([`GraderSpec::compile`]).
//!
//! Pure: no I/O. Every grader reads arbitrary model text and never panics. When it cannot decide
//! (no answer found, several different answers, a target it cannot read) it says `Uncertain`, so
//! triage escalates the item instead of guessing. User-supplied patterns, in regex graders and in
//! JSON-schema `pattern` keywords, run on the `regex` crate, whose single search is linear in the
//! output, so a hostile pattern cannot stall grading; schemas never fetch remote references.
//!
//! This module owns what a deterministic check decides, not when it runs (triage) nor where the
//! grade is stored (store).

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

use super::code_tests::{CodeExtraction, CodeTests, SandboxLimits};
use super::harness_match::{HarnessMatch, MatchFolding, RegexFilter};
use super::instructions::{
    InstructionFollowing, DEFAULT_IDS_FIELD, DEFAULT_KWARGS_FIELD, INSTRUCTIONS_GRADER,
};
use super::{extract_answer, grade_exact_match, normalise, Grade, Verdict, CODE_TESTS_GRADER};

/// Most combinators (`all_of`, `any_of`) allowed inside one another: deeper rubrics are a mistake
/// in practice, and the bound keeps compiling and grading free of deep recursion.
pub const MAX_NESTING_DEPTH: usize = 4;
/// Longest regex a grader accepts, in characters; answer-extraction patterns are short.
pub const MAX_PATTERN_CHARS: usize = 1_000;
/// Quoted model text in a reason is cut to this many characters, so a grade stays readable (and
/// small) when the model wrote megabytes. The full extracted answer is kept beside the reason.
const MAX_QUOTED_CHARS: usize = 200;
/// Schema violations spelled out in a reason; the rest are counted.
const MAX_REPORTED_VIOLATIONS: usize = 3;

/// A deterministic grader as stored in an eval definition: JSON tagged by `"kind"`, for example
/// `{"kind": "numeric", "absolute_tolerance": 0.01}`. Unknown fields are refused, so a misspelt
/// option is an error rather than a silently ignored setting; kinds without settings are empty
/// struct variants (`ExactMatch {}`) because serde would ignore extra fields on unit variants.
///
/// Graders that compare with the target read the final answer ([`extract_answer`]: the last
/// `Answer:` line, or a reply that is one short line) unless said otherwise; rubric checks
/// (contains, JSON, length) read the whole output and ignore the target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GraderSpec {
    /// The final answer equals the target after [`normalise`]: case, whitespace, surrounding
    /// quotes and a trailing full stop only. The original `exact_match@1`, unchanged.
    ExactMatch {},
    /// The final answer equals the target after [`normalise_loosely`] (case, punctuation,
    /// articles, whitespace, Unicode compatibility forms).
    NormalisedMatch {},
    /// The pattern's single capture group, taken from the whole output, equals the target after
    /// [`normalise`]. No match, or a match where the group took no part, is `Uncertain`.
    RegexMatch {
        /// A `regex` crate pattern with exactly one capture group: the answer.
        pattern: String,
        /// Which match to read when the pattern matches several times.
        #[serde(default)]
        occurrence: Occurrence,
    },
    /// The number in the final answer is within tolerance of the number in the target; with no
    /// tolerance they must be equal. Each side must hold one number (repeats of the same value
    /// are fine), whatever words, units or currency signs surround it: optional sign, comma
    /// thousands separators, decimals, exponents (`1e-3`) and simple fractions (`3/4`). A `%` is
    /// a unit and is ignored (`50%` reads as 50). `NaN`, `inf`, number words, several different
    /// numbers or none are `Uncertain`.
    /// Tolerances combine like Python's `math.isclose`, relative to the target:
    /// `|answer - target| <= max(absolute, relative * |target|)`.
    Numeric {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        absolute_tolerance: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relative_tolerance: Option<f64>,
    },
    /// The option letter (A to J) the reply chooses equals the target letter (`B`, `b`, `(B)`).
    /// The choice is the last letter stated after the word "answer" (`Answer: (B)`,
    /// `the answer is b`; "A" and "I" only in brackets or at the end of a clause, since they are
    /// also words), else a reply that is only a label (`B`, `**C.**`), else the one label opening
    /// lines (`B) Paris`). A reply that lists several options without choosing is `Uncertain`.
    MultipleChoice {},
    /// The output contains the strings (all of them, or any one).
    Contains {
        strings: Vec<String>,
        /// Off by default: case is compared after Unicode lower-casing, nothing else is folded.
        #[serde(default)]
        case_sensitive: bool,
        #[serde(default)]
        require: Require,
    },
    /// The output contains none of the strings.
    NotContains {
        strings: Vec<String>,
        /// Off by default: case is compared after Unicode lower-casing, nothing else is folded.
        #[serde(default)]
        case_sensitive: bool,
    },
    /// The output is one JSON document (optionally inside a single Markdown code fence).
    JsonValid {},
    /// The output is one JSON document that conforms to the schema (any draft the `jsonschema`
    /// crate knows; `$ref`s must resolve inside the schema).
    JsonSchema { schema: serde_json::Value },
    /// The output's length, surrounding whitespace excluded, is within the limits. Characters are
    /// Unicode scalar values; words are runs of non-whitespace.
    Length {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_chars: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_chars: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_words: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_words: Option<usize>,
    },
    /// Exact match as lm-evaluation-harness scores a generated answer (a task imported from
    /// it): the filter's reading of the whole output, folded as `folding` says, equals the
    /// folded target. Never uncertain: an answer the filter cannot read is its fallback, a miss.
    HarnessMatch {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter: Option<RegexFilter>,
        #[serde(default)]
        folding: MatchFolding,
    },
    /// The answer's program passes the item's tests, run in a sandbox: see [`CodeTests`]. The
    /// sandbox runs in the engine; compiled here, this grader only says so. Not allowed inside
    /// `all_of` or `any_of`.
    CodeTests {
        #[serde(default)]
        extract: CodeExtraction,
        /// The field put before the code (HumanEval's `prompt`, which a completion continues).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix_field: Option<String>,
        /// The field holding the tests, appended after the code.
        tests_field: String,
        /// The field naming the function under test; the program ends with `check(<it>)`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entry_point_field: Option<String>,
        #[serde(default)]
        limits: SandboxLimits,
    },
    /// The answer follows every instruction the item lists (IFEval's verifiable
    /// instructions, with their parameters in the item): see [`InstructionFollowing`]. Reads
    /// item fields, so it is graded where the item is at hand, never by [`Grader::grade`]; not
    /// allowed inside `all_of` or `any_of`.
    Instructions {
        #[serde(default = "default_ids_field")]
        ids_field: String,
        #[serde(default = "default_kwargs_field")]
        kwargs_field: String,
    },
    /// Passes when every grader passes; fails when any fails; otherwise uncertain.
    AllOf { graders: Vec<GraderSpec> },
    /// Passes when any grader passes; fails when all fail; otherwise uncertain.
    AnyOf { graders: Vec<GraderSpec> },
}

fn default_ids_field() -> String {
    DEFAULT_IDS_FIELD.into()
}

fn default_kwargs_field() -> String {
    DEFAULT_KWARGS_FIELD.into()
}

/// Which match a regex grader reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Occurrence {
    /// The first match: one linear-time search.
    #[default]
    First,
    /// The last match, for replies that revise their answer. Walks every match, which can cost
    /// more than linear time on huge outputs with patterns that match ambiguously.
    Last,
}

/// How many of a `contains` grader's strings must appear.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    #[default]
    All,
    Any,
}

/// Why a grader spec cannot be used, in words a user can act on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraderSpecError {
    #[error("the regex `{pattern}` does not compile: {message}")]
    InvalidRegex { pattern: String, message: String },
    #[error(
        "the regex `{pattern}` must have exactly one capture group, around the answer; it has {found}"
    )]
    WrongCaptureGroupCount { pattern: String, found: usize },
    #[error("the regex is {chars} characters long; the limit is {MAX_PATTERN_CHARS}")]
    PatternTooLong { chars: usize },
    #[error("the JSON schema does not compile: {message}")]
    InvalidSchema { message: String },
    #[error("the {which} tolerance must be a finite number, zero or more, not {value}")]
    InvalidTolerance { which: &'static str, value: f64 },
    #[error("`{field}` must list at least one entry")]
    EmptyList { field: &'static str },
    #[error("`{field}` contains an empty string, which every output contains")]
    EmptyString { field: &'static str },
    #[error("the minimum {unit} ({min}) is greater than the maximum {unit} ({max})")]
    MinAboveMax {
        unit: &'static str,
        min: usize,
        max: usize,
    },
    #[error("a length grader needs at least one of min_chars, max_chars, min_words, max_words")]
    NoLengthLimit,
    #[error("{0}")]
    CodeTests(String),
    #[error("code_tests runs alone: it cannot be part of all_of or any_of")]
    CodeTestsNested,
    #[error("{0}")]
    Instructions(String),
    #[error("instructions runs alone: it cannot be part of all_of or any_of")]
    InstructionsNested,
    #[error("all_of and any_of may be nested at most {MAX_NESTING_DEPTH} deep")]
    NestingTooDeep,
    /// A problem inside a combinator; `position` counts from 1, as a user would.
    #[error("in {combinator} grader {position}: {problem}")]
    InCombinator {
        combinator: &'static str,
        position: usize,
        problem: Box<GraderSpecError>,
    },
}

impl GraderSpec {
    /// The grader's stable id and version, recorded in every grade it produces. Bump the version
    /// whenever a grader's behaviour changes, so cached grades from the old behaviour are not
    /// reused. It names the code, not the settings: a cache key also needs the spec itself.
    pub fn id_version(&self) -> &'static str {
        match self {
            GraderSpec::ExactMatch {} => crate::grading::EXACT_MATCH_GRADER,
            GraderSpec::NormalisedMatch {} => "normalised_match@1",
            GraderSpec::RegexMatch { .. } => "regex_match@1",
            GraderSpec::Numeric { .. } => "numeric@1",
            GraderSpec::MultipleChoice {} => "multiple_choice@1",
            GraderSpec::Contains { .. } => "contains@1",
            GraderSpec::NotContains { .. } => "not_contains@1",
            GraderSpec::JsonValid {} => "json_valid@1",
            GraderSpec::JsonSchema { .. } => "json_schema@1",
            GraderSpec::Length { .. } => "length@1",
            GraderSpec::HarnessMatch { .. } => "harness_match@1",
            GraderSpec::CodeTests { .. } => CODE_TESTS_GRADER,
            GraderSpec::Instructions { .. } => INSTRUCTIONS_GRADER,
            GraderSpec::AllOf { .. } => "all_of@1",
            GraderSpec::AnyOf { .. } => "any_of@1",
        }
    }

    /// The grader a settings-free id names (`exact_match@1`, `json_valid@1`, …), if any.
    pub fn without_settings(id_version: &str) -> Option<GraderSpec> {
        [
            GraderSpec::ExactMatch {},
            GraderSpec::NormalisedMatch {},
            GraderSpec::MultipleChoice {},
            GraderSpec::JsonValid {},
        ]
        .into_iter()
        .find(|spec| spec.id_version() == id_version)
    }

    /// Checks the spec as a UI would before storing it: the first problem, in plain words.
    pub fn validate(&self) -> Result<(), GraderSpecError> {
        self.compile().map(|_| ())
    }

    /// The grader ready to run, with its regex or schema compiled once.
    pub fn compile(&self) -> Result<Grader, GraderSpecError> {
        compile_nested(self, 0)
    }
}

/// Grades one output with a spec. A spec that does not compile (it should have been refused by
/// [`GraderSpec::validate`] when saved) yields `Uncertain` with the problem as the reason, so the
/// item reaches a human instead of failing silently. Compile once with [`GraderSpec::compile`]
/// to grade many outputs.
pub fn grade(spec: &GraderSpec, output: &str, target: &str) -> Grade {
    match spec.compile() {
        Ok(grader) => grader.grade(output, target),
        Err(problem) => Grade {
            grader: spec.id_version().to_string(),
            verdict: Verdict::Uncertain,
            extracted_answer: None,
            reason: format!("the grader is misconfigured: {problem}"),
        },
    }
}

/// A checked, compiled grader.
#[derive(Debug)]
pub struct Grader {
    id_version: &'static str,
    check: Check,
}

#[derive(Debug)]
enum Check {
    ExactMatch,
    NormalisedMatch,
    RegexMatch {
        regex: Regex,
        occurrence: Occurrence,
    },
    Numeric(Tolerance),
    MultipleChoice,
    Contains {
        needles: Needles,
        require: Require,
    },
    NotContains(Needles),
    JsonValid,
    // Boxed: a compiled schema is large and most graders are not schema graders.
    JsonSchema(Box<jsonschema::Validator>),
    Length(LengthLimits),
    HarnessMatch(Box<HarnessMatch>),
    CodeTests(Box<CodeTests>),
    Instructions(Box<InstructionFollowing>),
    AllOf(Vec<Grader>),
    AnyOf(Vec<Grader>),
}

#[derive(Debug)]
struct Tolerance {
    absolute: f64,
    relative: f64,
}

/// Strings to look for, lower-cased up front when the search ignores case.
#[derive(Debug)]
struct Needles {
    strings: Vec<String>,
    case_sensitive: bool,
}

#[derive(Debug)]
struct LengthLimits {
    min_chars: Option<usize>,
    max_chars: Option<usize>,
    min_words: Option<usize>,
    max_words: Option<usize>,
}

impl Grader {
    pub fn id_version(&self) -> &'static str {
        self.id_version
    }

    /// Grades one output against an item's acceptable answers: it passes when it passes
    /// against any of them; otherwise the grade against the first is kept, and with several
    /// answers its reason says none matched. An item without a target is graded against ''
    /// (rubric checks ignore it; comparing graders then cannot find it and say so).
    pub fn grade_any(&self, output: &str, targets: &[String]) -> Grade {
        let Some((first, others)) = targets.split_first() else {
            // No reference (a conversation turn without one, an eval mapping no target): a
            // check against the reference cannot decide, and says so rather than failing.
            if self.needs_target() {
                // Any-of passes on a member that needs no reference, if one passes.
                if let Check::AnyOf(graders) = &self.check {
                    let passed = graders
                        .iter()
                        .filter(|grader| !grader.needs_target())
                        .map(|grader| grader.grade(output, ""))
                        .find(|grade| grade.verdict == Verdict::Pass);
                    if let Some(passed) = passed {
                        return Grade {
                            grader: self.id_version.to_string(),
                            ..passed
                        };
                    }
                }
                return Grade {
                    grader: self.id_version.to_string(),
                    verdict: Verdict::Uncertain,
                    extracted_answer: None,
                    reason: "the item has no reference answer to compare with; left to \
                             judges or people"
                        .into(),
                };
            }
            return self.grade(output, "");
        };
        let first_grade = self.grade(output, first);
        if first_grade.verdict == Verdict::Pass || others.is_empty() {
            return first_grade;
        }
        for target in others {
            let grade = self.grade(output, target);
            if grade.verdict == Verdict::Pass {
                return grade;
            }
        }
        if first_grade.verdict == Verdict::Fail {
            return Grade {
                reason: format!(
                    "{} (and none of the other {} acceptable answers matched)",
                    first_grade.reason,
                    others.len()
                ),
                ..first_grade
            };
        }
        first_grade
    }

    /// The code tests this grader runs, when it is a `code_tests` grader: its answers are graded
    /// in the engine's sandbox, never by [`Grader::grade`].
    pub fn code_tests(&self) -> Option<&CodeTests> {
        match &self.check {
            Check::CodeTests(code) => Some(code),
            _ => None,
        }
    }

    /// The instructions this grader checks, when it is an `instructions` grader: it reads item
    /// fields, so its answers are graded by [`InstructionFollowing::grade`], never by
    /// [`Grader::grade`].
    pub fn instructions(&self) -> Option<&InstructionFollowing> {
        match &self.check {
            Check::Instructions(instructions) => Some(instructions),
            _ => None,
        }
    }

    /// Whether grading reads the item's own fields (code tests, instructions), not only the
    /// answer and the reference: such answers are graded where the item is at hand.
    pub fn reads_item_fields(&self) -> bool {
        matches!(self.check, Check::CodeTests(_) | Check::Instructions(_))
    }

    /// Whether the check compares the answer with the item's reference.
    fn needs_target(&self) -> bool {
        match &self.check {
            Check::ExactMatch
            | Check::NormalisedMatch
            | Check::RegexMatch { .. }
            | Check::Numeric(_)
            | Check::MultipleChoice
            | Check::HarnessMatch(_) => true,
            Check::Contains { .. }
            | Check::NotContains(_)
            | Check::JsonValid
            | Check::JsonSchema(_)
            | Check::Length(_)
            | Check::CodeTests(_)
            | Check::Instructions(_) => false,
            Check::AllOf(graders) | Check::AnyOf(graders) => {
                graders.iter().any(Grader::needs_target)
            }
        }
    }

    /// Grades one model output against the item's target (ignored by rubric checks).
    pub fn grade(&self, output: &str, target: &str) -> Grade {
        let decision = match &self.check {
            // The original grader keeps its exact behaviour and wording.
            Check::ExactMatch => return grade_exact_match(output, target),
            Check::NormalisedMatch => grade_normalised_match(output, target),
            Check::RegexMatch { regex, occurrence } => {
                grade_regex_match(regex, *occurrence, output, target)
            }
            Check::Numeric(tolerance) => grade_numeric(tolerance, output, target),
            Check::MultipleChoice => grade_multiple_choice(output, target),
            Check::Contains { needles, require } => grade_contains(needles, *require, output),
            Check::NotContains(needles) => grade_not_contains(needles, output),
            Check::JsonValid => grade_json_valid(output),
            Check::JsonSchema(validator) => grade_json_schema(validator, output),
            Check::Length(limits) => grade_length(limits, output),
            Check::HarnessMatch(check) => grade_harness_match(check, output, target),
            Check::CodeTests(_) => Decision {
                verdict: Verdict::Uncertain,
                extracted_answer: None,
                reason: "code tests run in the sandbox, which graded nothing here".into(),
            },
            Check::Instructions(_) => Decision {
                verdict: Verdict::Uncertain,
                extracted_answer: None,
                reason: "instructions are checked against the item's own list, which was not \
                         at hand here"
                    .into(),
            },
            Check::AllOf(graders) => grade_all_of(graders, output, target),
            Check::AnyOf(graders) => grade_any_of(graders, output, target),
        };
        Grade {
            grader: self.id_version.to_string(),
            verdict: decision.verdict,
            extracted_answer: decision.extracted_answer,
            reason: decision.reason,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compiling and validating specs

/// `depth` is the number of combinators around `spec`.
fn compile_nested(spec: &GraderSpec, depth: usize) -> Result<Grader, GraderSpecError> {
    let check = match spec {
        GraderSpec::ExactMatch {} => Check::ExactMatch,
        GraderSpec::NormalisedMatch {} => Check::NormalisedMatch,
        GraderSpec::RegexMatch {
            pattern,
            occurrence,
        } => Check::RegexMatch {
            regex: compile_answer_pattern(pattern)?,
            occurrence: *occurrence,
        },
        GraderSpec::Numeric {
            absolute_tolerance,
            relative_tolerance,
        } => Check::Numeric(Tolerance {
            absolute: checked_tolerance("absolute", *absolute_tolerance)?,
            relative: checked_tolerance("relative", *relative_tolerance)?,
        }),
        GraderSpec::MultipleChoice {} => Check::MultipleChoice,
        GraderSpec::Contains {
            strings,
            case_sensitive,
            require,
        } => Check::Contains {
            needles: Needles::new(strings, *case_sensitive)?,
            require: *require,
        },
        GraderSpec::NotContains {
            strings,
            case_sensitive,
        } => Check::NotContains(Needles::new(strings, *case_sensitive)?),
        GraderSpec::JsonValid {} => Check::JsonValid,
        GraderSpec::JsonSchema { schema } => Check::JsonSchema(Box::new(compile_schema(schema)?)),
        GraderSpec::Length {
            min_chars,
            max_chars,
            min_words,
            max_words,
        } => Check::Length(LengthLimits::new(
            *min_chars, *max_chars, *min_words, *max_words,
        )?),
        GraderSpec::HarnessMatch { filter, folding } => Check::HarnessMatch(Box::new(
            HarnessMatch::compile(filter.as_ref(), folding, compile_pattern)
                .map_err(|(pattern, message)| GraderSpecError::InvalidRegex { pattern, message })?,
        )),
        GraderSpec::CodeTests {
            extract,
            prefix_field,
            tests_field,
            entry_point_field,
            limits,
        } => {
            if depth > 0 {
                return Err(GraderSpecError::CodeTestsNested);
            }
            let code = CodeTests {
                extract: *extract,
                prefix_field: prefix_field.clone(),
                tests_field: tests_field.clone(),
                entry_point_field: entry_point_field.clone(),
                limits: limits.clone(),
            };
            code.validate().map_err(GraderSpecError::CodeTests)?;
            Check::CodeTests(Box::new(code))
        }
        GraderSpec::Instructions {
            ids_field,
            kwargs_field,
        } => {
            if depth > 0 {
                return Err(GraderSpecError::InstructionsNested);
            }
            let instructions = InstructionFollowing {
                ids_field: ids_field.clone(),
                kwargs_field: kwargs_field.clone(),
            };
            instructions
                .validate()
                .map_err(GraderSpecError::Instructions)?;
            Check::Instructions(Box::new(instructions))
        }
        GraderSpec::AllOf { graders } => Check::AllOf(compile_children("all_of", graders, depth)?),
        GraderSpec::AnyOf { graders } => Check::AnyOf(compile_children("any_of", graders, depth)?),
    };
    Ok(Grader {
        id_version: spec.id_version(),
        check,
    })
}

fn compile_children(
    combinator: &'static str,
    children: &[GraderSpec],
    depth: usize,
) -> Result<Vec<Grader>, GraderSpecError> {
    if depth >= MAX_NESTING_DEPTH {
        return Err(GraderSpecError::NestingTooDeep);
    }
    if children.is_empty() {
        return Err(GraderSpecError::EmptyList { field: "graders" });
    }
    children
        .iter()
        .enumerate()
        .map(|(index, child)| {
            compile_nested(child, depth + 1).map_err(|problem| GraderSpecError::InCombinator {
                combinator,
                position: index + 1,
                problem: Box::new(problem),
            })
        })
        .collect()
}

/// A pattern of any number of groups, within the length limit.
fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "it is {chars} characters long; the limit is {MAX_PATTERN_CHARS}"
        ));
    }
    Regex::new(pattern).map_err(|error| error.to_string())
}

fn compile_answer_pattern(pattern: &str) -> Result<Regex, GraderSpecError> {
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(GraderSpecError::PatternTooLong { chars });
    }
    let regex = Regex::new(pattern).map_err(|error| GraderSpecError::InvalidRegex {
        pattern: pattern.to_string(),
        message: error.to_string(),
    })?;
    // `captures_len` counts the implicit whole-match group 0.
    let found = regex.captures_len() - 1;
    if found != 1 {
        return Err(GraderSpecError::WrongCaptureGroupCount {
            pattern: pattern.to_string(),
            found,
        });
    }
    Ok(regex)
}

fn compile_schema(schema: &serde_json::Value) -> Result<jsonschema::Validator, GraderSpecError> {
    jsonschema::options()
        // The default engine (fancy-regex) backtracks; `regex` keeps `pattern` linear-time.
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .map_err(|error| GraderSpecError::InvalidSchema {
            message: error.to_string(),
        })
}

/// An unset tolerance is zero. NaN is refused explicitly: every comparison with it is false, so
/// it would silently fail every answer.
fn checked_tolerance(which: &'static str, value: Option<f64>) -> Result<f64, GraderSpecError> {
    let value = value.unwrap_or(0.0);
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(GraderSpecError::InvalidTolerance { which, value })
    }
}

impl Needles {
    fn new(strings: &[String], case_sensitive: bool) -> Result<Self, GraderSpecError> {
        if strings.is_empty() {
            return Err(GraderSpecError::EmptyList { field: "strings" });
        }
        if strings.iter().any(|string| string.is_empty()) {
            return Err(GraderSpecError::EmptyString { field: "strings" });
        }
        let strings = if case_sensitive {
            strings.to_vec()
        } else {
            strings.iter().map(|string| string.to_lowercase()).collect()
        };
        Ok(Needles {
            strings,
            case_sensitive,
        })
    }

    /// The needles found in `output` (`true`) and missing (`false`), in the spec's order.
    fn presence<'a>(&'a self, output: &str) -> Vec<(&'a str, bool)> {
        let haystack = if self.case_sensitive {
            Cow::Borrowed(output)
        } else {
            Cow::Owned(output.to_lowercase())
        };
        self.strings
            .iter()
            .map(|needle| (needle.as_str(), haystack.contains(needle.as_str())))
            .collect()
    }
}

impl LengthLimits {
    fn new(
        min_chars: Option<usize>,
        max_chars: Option<usize>,
        min_words: Option<usize>,
        max_words: Option<usize>,
    ) -> Result<Self, GraderSpecError> {
        if [min_chars, max_chars, min_words, max_words]
            .iter()
            .all(Option::is_none)
        {
            return Err(GraderSpecError::NoLengthLimit);
        }
        check_min_not_above_max("characters", min_chars, max_chars)?;
        check_min_not_above_max("words", min_words, max_words)?;
        Ok(LengthLimits {
            min_chars,
            max_chars,
            min_words,
            max_words,
        })
    }
}

fn check_min_not_above_max(
    unit: &'static str,
    min: Option<usize>,
    max: Option<usize>,
) -> Result<(), GraderSpecError> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => Err(GraderSpecError::MinAboveMax { unit, min, max }),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Grading

/// What one grader decided, before it is stamped with the grader's id.
struct Decision {
    verdict: Verdict,
    extracted_answer: Option<String>,
    reason: String,
}

impl Decision {
    fn new(verdict: Verdict, extracted_answer: Option<String>, reason: String) -> Self {
        Decision {
            verdict,
            extracted_answer,
            reason,
        }
    }

    fn pass_or_fail(passed: bool, extracted_answer: Option<String>, reason: String) -> Self {
        let verdict = if passed { Verdict::Pass } else { Verdict::Fail };
        Decision::new(verdict, extracted_answer, reason)
    }

    fn uncertain(extracted_answer: Option<String>, reason: String) -> Self {
        Decision::new(Verdict::Uncertain, extracted_answer, reason)
    }
}

const NO_FINAL_ANSWER: &str =
    "no answer could be parsed from the output (no `Answer:` line and not a single short line)";

/// `text` in backticks, cut to [`MAX_QUOTED_CHARS`] characters.
fn quoted(text: &str) -> String {
    format!("`{}`", cut(text))
}

/// `text` cut to [`MAX_QUOTED_CHARS`] characters, on a character boundary.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// The looser normalisation of `normalised_match@1`, applied to answer and target alike, in this
/// order:
/// 1. Unicode NFKC, so full-width digits, ligatures and composed or decomposed accents compare
///    equal (`"４２"` is `"42"`, `"ﬁne"` is `"fine"`);
/// 2. Unicode lower case;
/// 3. punctuation deleted, as SQuAD's evaluation script does (`"U.S."` becomes `"us"`,
///    `"don't"` becomes `"dont"`): ASCII punctuation and symbols, including `$ % + -`;
///    Latin-1 `¡ § « ¶ · » ¿`; the General Punctuation block (dashes, curly quotes, ellipsis,
///    zero-width and other invisible characters); CJK punctuation and brackets. Letters, digits
///    and combining marks of every script are kept;
/// 4. the English articles "a", "an" and "the" dropped as whole words;
/// 5. whitespace collapsed to single spaces, none at the ends.
pub fn normalise_loosely(text: &str) -> String {
    let without_punctuation: String = text
        .nfkc()
        .flat_map(char::to_lowercase)
        .filter(|&c| !is_deleted_punctuation(c))
        .collect();
    without_punctuation
        .split_whitespace()
        .filter(|word| !matches!(*word, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_deleted_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c, '¡' | '§' | '«' | '¶' | '·' | '»' | '¿')
        // General Punctuation, less its spaces (U+2000 to U+200A, U+202F, U+205F), which are
        // whitespace and must keep separating words.
        || (('\u{2000}'..='\u{206F}').contains(&c) && !c.is_whitespace())
        // CJK punctuation and brackets: 、。〃 and 〈 to 】, 〔 to 〟; not 々 or 〇, which are
        // parts of words.
        || matches!(c, '\u{3001}'..='\u{3003}' | '\u{3008}'..='\u{3011}' | '\u{3014}'..='\u{301F}')
}

fn grade_normalised_match(output: &str, target: &str) -> Decision {
    let Some(answer) = extract_answer(output) else {
        return Decision::uncertain(None, NO_FINAL_ANSWER.into());
    };
    let wanted = normalise_loosely(target);
    if wanted.is_empty() {
        // An empty target would match any answer that is all punctuation and articles.
        return Decision::uncertain(
            Some(answer),
            format!("the target {} is empty once normalised", quoted(target)),
        );
    }
    let got = normalise_loosely(&answer);
    let reason = if got == wanted {
        format!(
            "answer {} matches the target once normalised",
            quoted(&answer)
        )
    } else {
        format!(
            "answer {} differs from the target {} once normalised (`{}` vs `{}`)",
            quoted(&answer),
            quoted(target),
            got,
            wanted
        )
    };
    Decision::pass_or_fail(got == wanted, Some(answer), reason)
}

fn grade_harness_match(check: &HarnessMatch, output: &str, target: &str) -> Decision {
    let answer = check.filtered(output);
    let matched = check.fold(&answer) == check.fold(target);
    let reason = if matched {
        format!("filtered answer {} matches the target", quoted(&answer))
    } else {
        format!(
            "filtered answer {} differs from the target {}",
            quoted(&answer),
            quoted(target)
        )
    };
    Decision::pass_or_fail(matched, Some(answer), reason)
}

fn grade_regex_match(
    regex: &Regex,
    occurrence: Occurrence,
    output: &str,
    target: &str,
) -> Decision {
    let captures = match occurrence {
        Occurrence::First => regex.captures(output),
        Occurrence::Last => regex.captures_iter(output).last(),
    };
    let Some(captures) = captures else {
        return Decision::uncertain(None, "the pattern does not match the output".into());
    };
    let Some(group) = captures.get(1) else {
        return Decision::uncertain(
            None,
            "the pattern matched but its capture group took no part in the match".into(),
        );
    };
    let answer = group.as_str().to_string();
    let matched = normalise(&answer) == normalise(target);
    let reason = if matched {
        format!("captured answer {} matches the target", quoted(&answer))
    } else {
        format!(
            "captured answer {} differs from the target {}",
            quoted(&answer),
            quoted(target)
        )
    };
    Decision::pass_or_fail(matched, Some(answer), reason)
}

/// A number as written: optional sign (ASCII or the Unicode minus), then a fraction `3/4`, or a
/// decimal with optional comma thousands separators (`1,234,567.5`, `.5`) and exponent (`1e-3`).
/// ASCII digits only; full-width digits become ASCII through NFKC before this runs.
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        (?P<sign>[-+\x{2212}])?
        (?:
            (?P<numerator>[0-9]+) \s* / \s* (?P<denominator>[0-9]+)
          | (?P<decimal> (?:[0-9]{1,3}(?:,[0-9]{3})+ | [0-9]+) (?:\.[0-9]+)? | \.[0-9]+ )
            (?P<exponent>[eE][-+]?[0-9]+)?
        )",
    )
    .expect("the number pattern is a valid regex")
});

/// The one number written in `text`, whatever words, units or currency signs surround it
/// (`"$1,234.50"`, `"42 apples"`, `"x = -3/4"`). A `%` is a unit like any other: `"50%"` reads
/// as 50, because targets of "what percentage" questions are written as bare numbers. The same
/// number written several times (`"3/4 = 0.75"`) counts once.
///
/// `Err` says why there is no single number: none, several different ones (`"3 or 4"`, and
/// also European decimal commas `"3,5"` and dates `"1/2/2024"`, which would be misread), a
/// division by zero, or a value beyond `f64` (`"1e999"`). Words such as `NaN`, `inf` or
/// `twelve` are not numbers.
fn the_number_in(text: &str) -> Result<f64, String> {
    let text: String = text.nfkc().collect();
    let mut numbers: Vec<f64> = Vec::new();
    for found in NUMBER.captures_iter(&text) {
        let value = number_value(&found)?;
        if !numbers.contains(&value) {
            numbers.push(value);
        }
    }
    match numbers.as_slice() {
        [] => Err(format!("no number in {}", quoted(&text))),
        [number] => Ok(*number),
        several => Err(format!(
            "several different numbers in {}: {}",
            quoted(&text),
            several
                .iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn number_value(found: &regex::Captures<'_>) -> Result<f64, String> {
    let written = &found[0];
    let negative = found.name("sign").is_some_and(|sign| sign.as_str() != "+");
    let magnitude = if let Some(decimal) = found.name("decimal") {
        let exponent = found.name("exponent").map_or("", |e| e.as_str());
        format!("{}{exponent}", decimal.as_str().replace(',', ""))
            .parse::<f64>()
            .map_err(|_| format!("cannot read the number `{written}`"))?
    } else {
        let numerator = parse_digits(&found["numerator"]);
        let denominator = parse_digits(&found["denominator"]);
        if denominator == 0.0 {
            return Err(format!("`{written}` divides by zero"));
        }
        numerator / denominator
    };
    if !magnitude.is_finite() {
        return Err(format!("`{written}` is too large to compare"));
    }
    Ok(if negative { -magnitude } else { magnitude })
}

/// Digits matched by [`NUMBER`] always parse; a run too long for `f64` becomes infinity, which
/// the caller refuses.
fn parse_digits(digits: &str) -> f64 {
    digits.parse().unwrap_or(f64::INFINITY)
}

fn grade_numeric(tolerance: &Tolerance, output: &str, target: &str) -> Decision {
    let Some(answer) = extract_answer(output) else {
        return Decision::uncertain(None, NO_FINAL_ANSWER.into());
    };
    let wanted = match the_number_in(target) {
        Ok(wanted) => wanted,
        Err(problem) => return Decision::uncertain(Some(answer), format!("target: {problem}")),
    };
    let got = match the_number_in(&answer) {
        Ok(got) => got,
        Err(problem) => return Decision::uncertain(Some(answer), format!("answer: {problem}")),
    };
    let difference = (got - wanted).abs();
    let allowed = tolerance.absolute.max(tolerance.relative * wanted.abs());
    let reason = if difference <= allowed {
        format!("answer {got} is within {allowed} of the target {wanted}")
    } else {
        format!("answer {got} is {difference} away from the target {wanted}; allowed: {allowed}")
    };
    Decision::pass_or_fail(difference <= allowed, Some(answer), reason)
}

/// A choice stated after the word "answer": `Answer: (B)`, `the answer is b`,
/// `Final answer: **C**`, `answer - [D]`.
static ANSWER_PHRASE_CHOICE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)
        \banswer\b (?:\s+is)? \s* [:：\-]? \s* (?:\*\*)? \s*
        (?P<open>[(\[])? \s* (?P<letter>[a-j]) \b (?P<close>\s*[)\]])?",
    )
    .expect("the answer-phrase pattern is a valid regex")
});

/// A reply that is nothing but a label: `B`, `(b)`, `B.`, `[C]`, `**D**`.
static BARE_CHOICE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[(\[]?\s*(?P<letter>[A-Ja-j])\s*[)\].:]?$")
        .expect("the bare-choice pattern is a valid regex")
});

/// A line that opens with a label: `B) Paris`, `(C) Rome`, `D. Oslo`. Without brackets the
/// letter must be upper case and followed by `)`, `.` or `:`, so a line opening "A bit more" or
/// "b. the second point" is not a label.
static LINE_OPENING_CHOICE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?mx)
        ^ [\ \t]* (?:\*\*)? (?: [(\[] (?P<bracketed>[A-Ja-j]) [)\]] | (?P<plain>[A-J]) [).:] )
        (?:[\s*]|$)",
    )
    .expect("the line-opening-choice pattern is a valid regex")
});

/// The option letter (upper case, A to J) a reply chooses, looked for in this order:
/// 1. the last letter stated after the word "answer" (see [`ANSWER_PHRASE_CHOICE`]); "A" and "I"
///    without brackets count only at the end of the reply, a line or a clause
///    (`the answer is a.`), because "the answer is a bit unclear" uses the article;
/// 2. a reply that is only a label (`B`, `(b)`, `**C.**`);
/// 3. the label opening a line (`B) Paris`), when the reply's lines open with only one label;
///    a reply that lists several options this way has not chosen.
///
/// `Err` says why no letter could be found.
fn chosen_letter(output: &str) -> Result<char, String> {
    if let Some(letter) = letter_after_answer_phrase(output) {
        return Ok(letter);
    }
    let bare = output.trim().trim_matches(|c: char| c == '*' || c == '`');
    if let Some(found) = BARE_CHOICE.captures(bare.trim()) {
        return Ok(upper_letter(&found["letter"]));
    }
    let mut line_labels: Vec<char> = Vec::new();
    for found in LINE_OPENING_CHOICE.captures_iter(output) {
        let label = found.name("bracketed").or_else(|| found.name("plain"));
        if let Some(label) = label.map(|label| upper_letter(label.as_str())) {
            if !line_labels.contains(&label) {
                line_labels.push(label);
            }
        }
    }
    match line_labels.as_slice() {
        [letter] => Ok(*letter),
        [] => Err("no option letter (A to J) found in the output".into()),
        several => Err(format!(
            "the output lists several options ({}) without saying which it chooses",
            several
                .iter()
                .map(char::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn letter_after_answer_phrase(output: &str) -> Option<char> {
    ANSWER_PHRASE_CHOICE
        .captures_iter(output)
        .filter(|found| {
            let end = found.get(0).map_or(output.len(), |whole| whole.end());
            is_unambiguous_choice(found, &output[end..])
        })
        .last()
        .map(|found| upper_letter(&found["letter"]))
}

/// "A" and "I" are also English words ("the answer is a bit unclear", "Answer: I think B"), so
/// without brackets they count only when nothing but punctuation follows them on their line.
/// Every other letter A to J counts whenever it stands alone.
fn is_unambiguous_choice(found: &regex::Captures<'_>, rest: &str) -> bool {
    let bracketed = found.name("open").is_some() || found.name("close").is_some();
    let is_english_word =
        found["letter"].eq_ignore_ascii_case("a") || found["letter"].eq_ignore_ascii_case("i");
    if bracketed || !is_english_word {
        return true;
    }
    let rest = rest.trim_start_matches([' ', '\t']);
    match rest.chars().next() {
        None | Some('\n' | '\r') => true,
        Some(next) => next.is_ascii_punctuation(),
    }
}

fn upper_letter(letter: &str) -> char {
    letter
        .chars()
        .next()
        .map_or('?', |c| c.to_ascii_uppercase())
}

/// The target's letter: `B`, `b`, `(B)` or `B.`.
fn target_letter(target: &str) -> Option<char> {
    BARE_CHOICE
        .captures(target.trim())
        .map(|found| upper_letter(&found["letter"]))
}

fn grade_multiple_choice(output: &str, target: &str) -> Decision {
    let Some(wanted) = target_letter(target) else {
        return Decision::uncertain(
            None,
            format!(
                "the target {} is not an option letter A to J",
                quoted(target)
            ),
        );
    };
    let got = match chosen_letter(output) {
        Ok(got) => got,
        Err(problem) => return Decision::uncertain(None, problem),
    };
    let reason = if got == wanted {
        format!("chose {got}, the target")
    } else {
        format!("chose {got}; the target is {wanted}")
    };
    Decision::pass_or_fail(got == wanted, Some(got.to_string()), reason)
}

fn quoted_list(strings: &[&str]) -> String {
    strings
        .iter()
        .map(|string| quoted(string))
        .collect::<Vec<_>>()
        .join(", ")
}

fn grade_contains(needles: &Needles, require: Require, output: &str) -> Decision {
    let presence = needles.presence(output);
    let found: Vec<&str> = presence
        .iter()
        .filter(|(_, present)| *present)
        .map(|(s, _)| *s)
        .collect();
    let missing: Vec<&str> = presence
        .iter()
        .filter(|(_, present)| !*present)
        .map(|(s, _)| *s)
        .collect();
    match require {
        Require::All if missing.is_empty() => Decision::pass_or_fail(
            true,
            None,
            format!("contains every required string: {}", quoted_list(&found)),
        ),
        Require::All => {
            Decision::pass_or_fail(false, None, format!("missing {}", quoted_list(&missing)))
        }
        Require::Any if found.is_empty() => Decision::pass_or_fail(
            false,
            None,
            format!("contains none of {}", quoted_list(&missing)),
        ),
        Require::Any => {
            Decision::pass_or_fail(true, None, format!("contains {}", quoted_list(&found)))
        }
    }
}

fn grade_not_contains(needles: &Needles, output: &str) -> Decision {
    let forbidden: Vec<&str> = needles
        .presence(output)
        .into_iter()
        .filter(|(_, present)| *present)
        .map(|(string, _)| string)
        .collect();
    if forbidden.is_empty() {
        let reason = format!(
            "contains none of the forbidden strings {}",
            quoted_list(
                &needles
                    .strings
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
            )
        );
        Decision::pass_or_fail(true, None, reason)
    } else {
        let reason = format!("contains the forbidden {}", quoted_list(&forbidden));
        Decision::pass_or_fail(false, None, reason)
    }
}

/// The JSON text of an output: the output trimmed, or the inside of a single Markdown code fence
/// around it (```` ```json ... ``` ````), because chat models fence JSON even when told not to.
fn json_text(output: &str) -> &str {
    let trimmed = output.trim();
    let Some(inside) = trimmed
        .strip_prefix("```")
        .and_then(|rest| rest.strip_suffix("```"))
    else {
        return trimmed;
    };
    // The opening fence's line may carry a language tag such as `json`.
    match inside.split_once('\n') {
        Some((tag, body)) if tag.trim().chars().all(char::is_alphanumeric) => body.trim(),
        _ => inside.trim(),
    }
}

/// serde_json refuses trailing text and nesting deeper than 128 levels, so neither a second
/// document nor a hostile `[[[[...` gets through or exhausts the stack.
fn parse_json_output(output: &str) -> Result<serde_json::Value, String> {
    let text = json_text(output);
    if text.is_empty() {
        return Err("the output is empty, not JSON".into());
    }
    serde_json::from_str(text).map_err(|error| format!("the output is not valid JSON: {error}"))
}

fn grade_json_valid(output: &str) -> Decision {
    match parse_json_output(output) {
        Ok(_) => Decision::pass_or_fail(true, None, "the output is valid JSON".into()),
        Err(problem) => Decision::pass_or_fail(false, None, problem),
    }
}

fn grade_json_schema(validator: &jsonschema::Validator, output: &str) -> Decision {
    let document = match parse_json_output(output) {
        Ok(document) => document,
        Err(problem) => return Decision::pass_or_fail(false, None, problem),
    };
    let mut violations = validator.iter_errors(&document);
    // Only the reported few are formatted: each message quotes the offending value, and a huge
    // output can break a schema in millions of places.
    let described: Vec<String> = violations
        .by_ref()
        .take(MAX_REPORTED_VIOLATIONS)
        .map(|violation| {
            let location = violation.instance_path().to_string();
            let location = if location.is_empty() { "/" } else { &location };
            // Violation messages quote the offending value, which may be the whole output.
            format!("at `{location}`: {}", cut(&violation.to_string()))
        })
        .collect();
    if described.is_empty() {
        return Decision::pass_or_fail(true, None, "the output conforms to the schema".into());
    }
    let total = described.len() + violations.count();
    let mut reason = format!(
        "{total} schema violation{}: {}",
        if total == 1 { "" } else { "s" },
        described.join("; ")
    );
    if total > described.len() {
        reason.push_str(&format!("; and {} more", total - described.len()));
    }
    Decision::pass_or_fail(false, None, reason)
}

fn grade_length(limits: &LengthLimits, output: &str) -> Decision {
    let text = output.trim();
    let chars = text.chars().count();
    let words = text.split_whitespace().count();
    let problems: Vec<String> = [
        below("characters", chars, limits.min_chars),
        above("characters", chars, limits.max_chars),
        below("words", words, limits.min_words),
        above("words", words, limits.max_words),
    ]
    .into_iter()
    .flatten()
    .collect();
    if problems.is_empty() {
        let reason = format!("{chars} characters and {words} words, within the limits");
        Decision::pass_or_fail(true, None, reason)
    } else {
        Decision::pass_or_fail(false, None, problems.join("; "))
    }
}

fn below(unit: &str, count: usize, min: Option<usize>) -> Option<String> {
    min.filter(|&min| count < min)
        .map(|min| format!("{count} {unit}, below the minimum of {min}"))
}

fn above(unit: &str, count: usize, max: Option<usize>) -> Option<String> {
    max.filter(|&max| count > max)
        .map(|max| format!("{count} {unit}, above the maximum of {max}"))
}

/// Every child's verdict and reason, for the combinator's own reason.
fn child_summaries(grades: &[Grade]) -> String {
    grades
        .iter()
        .map(|grade| {
            format!(
                "[{} {}: {}]",
                grade.grader,
                grade.verdict.as_str(),
                grade.reason
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn count_verdicts(grades: &[Grade], verdict: Verdict) -> usize {
    grades
        .iter()
        .filter(|grade| grade.verdict == verdict)
        .count()
}

/// The answer a combinator reports: the first one any of its graders extracted.
fn first_extracted_answer(grades: &[Grade]) -> Option<String> {
    grades
        .iter()
        .find_map(|grade| grade.extracted_answer.clone())
}

/// Three-valued AND: one failure decides; otherwise any uncertainty leaves it undecided.
fn grade_all_of(graders: &[Grader], output: &str, target: &str) -> Decision {
    let grades: Vec<Grade> = graders.iter().map(|g| g.grade(output, target)).collect();
    let (failed, uncertain) = (
        count_verdicts(&grades, Verdict::Fail),
        count_verdicts(&grades, Verdict::Uncertain),
    );
    let (verdict, summary) = if failed > 0 {
        (
            Verdict::Fail,
            format!("{failed} of {} checks failed", grades.len()),
        )
    } else if uncertain > 0 {
        let summary = format!("none failed, {uncertain} of {} undecided", grades.len());
        (Verdict::Uncertain, summary)
    } else {
        (Verdict::Pass, format!("all {} checks passed", grades.len()))
    };
    let reason = format!("{summary}: {}", child_summaries(&grades));
    Decision::new(verdict, first_extracted_answer(&grades), reason)
}

/// Three-valued OR: one pass decides; otherwise any uncertainty leaves it undecided.
fn grade_any_of(graders: &[Grader], output: &str, target: &str) -> Decision {
    let grades: Vec<Grade> = graders.iter().map(|g| g.grade(output, target)).collect();
    let (passed, uncertain) = (
        count_verdicts(&grades, Verdict::Pass),
        count_verdicts(&grades, Verdict::Uncertain),
    );
    let (verdict, summary) = if passed > 0 {
        (
            Verdict::Pass,
            format!("{passed} of {} checks passed", grades.len()),
        )
    } else if uncertain > 0 {
        let summary = format!("none passed, {uncertain} of {} undecided", grades.len());
        (Verdict::Uncertain, summary)
    } else {
        (Verdict::Fail, format!("all {} checks failed", grades.len()))
    };
    let reason = format!("{summary}: {}", child_summaries(&grades));
    Decision::new(verdict, first_extracted_answer(&grades), reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn without_a_reference_only_checks_that_need_none_decide() {
        let exact = GraderSpec::ExactMatch {}.compile().unwrap();
        let undecided = exact.grade_any("Answer: 4", &[]);
        assert_eq!(undecided.verdict, Verdict::Uncertain);
        assert!(
            undecided.reason.contains("no reference answer"),
            "{}",
            undecided.reason
        );
        // An empty reference is still a reference (four-field files have always had them).
        assert_eq!(
            exact.grade_any("Answer: 4", &[String::new()]).verdict,
            Verdict::Fail
        );
        let json_valid = GraderSpec::JsonValid {}.compile().unwrap();
        assert_eq!(json_valid.grade_any("{}", &[]).verdict, Verdict::Pass);
        let combined = GraderSpec::AllOf {
            graders: vec![GraderSpec::JsonValid {}, GraderSpec::ExactMatch {}],
        }
        .compile()
        .unwrap();
        assert_eq!(combined.grade_any("{}", &[]).verdict, Verdict::Uncertain);
        let either = GraderSpec::AnyOf {
            graders: vec![GraderSpec::ExactMatch {}, GraderSpec::JsonValid {}],
        }
        .compile()
        .unwrap();
        assert_eq!(either.grade_any("{}", &[]).verdict, Verdict::Pass);
        assert_eq!(
            either.grade_any("not json", &[]).verdict,
            Verdict::Uncertain
        );
    }

    #[test]
    fn any_acceptable_answer_passes() {
        let grader = GraderSpec::ExactMatch {}.compile().unwrap();
        let answers = vec!["NYC".to_string(), "New York".to_string()];
        assert_eq!(
            grader.grade_any("Answer: new york", &answers).verdict,
            Verdict::Pass
        );
        let failed = grader.grade_any("Answer: Boston", &answers);
        assert_eq!(failed.verdict, Verdict::Fail);
        assert!(
            failed
                .reason
                .ends_with("(and none of the other 1 acceptable answers matched)"),
            "{}",
            failed.reason
        );
        assert_eq!(
            grader.grade_any("Answer: NYC", &answers[..1]),
            grader.grade("Answer: NYC", "NYC")
        );
    }

    /// Specs are written as the JSON a user would store, so the tests pin the data format too.
    fn spec(definition: serde_json::Value) -> GraderSpec {
        serde_json::from_value(definition).expect("test spec parses")
    }

    fn verdict(definition: serde_json::Value, output: &str, target: &str) -> Verdict {
        grade(&spec(definition), output, target).verdict
    }

    fn spec_error(definition: serde_json::Value) -> GraderSpecError {
        spec(definition)
            .validate()
            .expect_err("spec should be refused")
    }

    fn every_kind_of_spec() -> Vec<GraderSpec> {
        [
            json!({"kind": "exact_match"}),
            json!({"kind": "normalised_match"}),
            json!({"kind": "regex_match", "pattern": r"answer is (\w+)", "occurrence": "last"}),
            json!({"kind": "numeric", "absolute_tolerance": 0.5, "relative_tolerance": 0.01}),
            json!({"kind": "multiple_choice"}),
            json!({"kind": "contains", "strings": ["paris"], "require": "any"}),
            json!({"kind": "not_contains", "strings": ["as an ai"]}),
            json!({"kind": "json_valid"}),
            json!({"kind": "json_schema", "schema": {"type": "object", "required": ["a"]}}),
            json!({"kind": "length", "max_words": 100}),
            json!({"kind": "all_of", "graders": [{"kind": "json_valid"}, {"kind": "length", "min_chars": 1}]}),
            json!({"kind": "any_of", "graders": [{"kind": "exact_match"}, {"kind": "numeric"}]}),
        ]
        .into_iter()
        .map(spec)
        .collect()
    }

    // --- The data format and ids ---------------------------------------------------------------

    #[test]
    fn specs_round_trip_through_json_tagged_by_kind() {
        let numeric = spec(json!({"kind": "numeric", "absolute_tolerance": 0.01}));
        assert_eq!(
            numeric,
            GraderSpec::Numeric {
                absolute_tolerance: Some(0.01),
                relative_tolerance: None
            }
        );
        assert_eq!(
            serde_json::to_value(&numeric).unwrap(),
            json!({"kind": "numeric", "absolute_tolerance": 0.01})
        );
        let regex = spec(json!({"kind": "regex_match", "pattern": "(x)"}));
        assert_eq!(
            serde_json::to_value(&regex).unwrap(),
            json!({"kind": "regex_match", "pattern": "(x)", "occurrence": "first"})
        );
        for spec in every_kind_of_spec() {
            let text = serde_json::to_string(&spec).unwrap();
            assert_eq!(serde_json::from_str::<GraderSpec>(&text).unwrap(), spec);
        }
    }

    #[test]
    fn misspelt_options_and_unknown_kinds_are_refused() {
        let misspelt = json!({"kind": "numeric", "absolute_tolerence": 0.1});
        assert!(serde_json::from_value::<GraderSpec>(misspelt).is_err());
        assert!(serde_json::from_value::<GraderSpec>(json!({"kind": "fuzzy"})).is_err());
        let extra_on_unit_kind = json!({"kind": "json_valid", "strict": true});
        assert!(serde_json::from_value::<GraderSpec>(extra_on_unit_kind).is_err());
        assert!(serde_json::from_value::<GraderSpec>(json!({"pattern": "(x)"})).is_err());
        let negative_length = json!({"kind": "length", "max_chars": -1});
        assert!(serde_json::from_value::<GraderSpec>(negative_length).is_err());
    }

    #[test]
    fn every_kind_has_a_distinct_stable_id_and_version() {
        let ids: Vec<&str> = every_kind_of_spec()
            .iter()
            .map(GraderSpec::id_version)
            .collect();
        assert_eq!(
            ids,
            [
                "exact_match@1",
                "normalised_match@1",
                "regex_match@1",
                "numeric@1",
                "multiple_choice@1",
                "contains@1",
                "not_contains@1",
                "json_valid@1",
                "json_schema@1",
                "length@1",
                "all_of@1",
                "any_of@1",
            ]
        );
        assert_eq!(
            GraderSpec::ExactMatch {}.id_version(),
            crate::grading::EXACT_MATCH_GRADER
        );
        let grader = spec(json!({"kind": "json_valid"})).compile().unwrap();
        assert_eq!(grader.id_version(), "json_valid@1");
        assert_eq!(grader.grade("{}", "").grader, "json_valid@1");
    }

    // --- Exact and normalised match ------------------------------------------------------------

    #[test]
    fn exact_match_spec_grades_exactly_like_the_original_grader() {
        let cases = [
            ("Answer: Paris.", "paris"),
            ("Answer: Paris, France", "Paris"),
            ("Hmm.\nHard to say.", "Paris"),
            ("", "Paris"),
            ("Tokyo", "tokyo"),
        ];
        let grader = GraderSpec::ExactMatch {}.compile().unwrap();
        for (output, target) in cases {
            assert_eq!(
                grader.grade(output, target),
                grade_exact_match(output, target)
            );
        }
    }

    #[test]
    fn loose_normalisation_folds_case_punctuation_articles_and_unicode_forms() {
        assert_eq!(normalise_loosely("The U.S.A."), "usa");
        assert_eq!(normalise_loosely("  Don’t   STOP!  "), "dont stop");
        assert_eq!(normalise_loosely("an apple a day"), "apple day");
        assert_eq!(normalise_loosely("Theory"), "theory");
        // Full-width digits and a ligature become their plain forms (NFKC).
        assert_eq!(normalise_loosely("４２"), "42");
        assert_eq!(normalise_loosely("ﬁne"), "fine");
        // Composed é and e + combining acute compare equal.
        assert_eq!(
            normalise_loosely("Caf\u{e9}"),
            normalise_loosely("Cafe\u{301}")
        );
        // A zero-width space is deleted; an em space still separates words.
        assert_eq!(normalise_loosely("Pa\u{200B}ris"), "paris");
        assert_eq!(normalise_loosely("New\u{2003}York"), "new york");
        assert_eq!(normalise_loosely("«Tōkyō» — 東京。"), "tōkyō 東京");
        // Combining marks of other scripts are letters, not punctuation.
        assert_eq!(normalise_loosely("हिन्दी"), "हिन्दी");
        assert_eq!(normalise_loosely("the a an ..."), "");
    }

    #[test]
    fn normalised_match_passes_fails_and_doubts() {
        let normalised = json!({"kind": "normalised_match"});
        let passed = grade(
            &spec(normalised.clone()),
            "Let me think.\nAnswer: The Eiffel-Tower!",
            "eiffel tower",
        );
        assert_eq!(passed.verdict, Verdict::Fail, "hyphen deletion joins words");
        assert_eq!(
            verdict(
                normalised.clone(),
                "Answer: The Eiffel Tower!",
                "eiffel tower"
            ),
            Verdict::Pass
        );
        let failed = grade(&spec(normalised.clone()), "Answer: Paris, France", "Paris");
        assert_eq!(failed.verdict, Verdict::Fail);
        assert_eq!(failed.extracted_answer.as_deref(), Some("Paris, France"));
        assert!(failed.reason.contains("`paris france` vs `paris`"));
        let empty_target = grade(&spec(normalised.clone()), "Answer: the", "The.");
        assert_eq!(empty_target.verdict, Verdict::Uncertain);
        assert!(empty_target.reason.contains("empty once normalised"));
        assert_eq!(
            verdict(normalised.clone(), "I could not say.\nSorry.", "x"),
            Verdict::Uncertain
        );
        assert_eq!(verdict(normalised, "", "x"), Verdict::Uncertain);
    }

    // --- Regex extraction ----------------------------------------------------------------------

    #[test]
    fn regex_match_reads_the_chosen_occurrence_of_its_group() {
        let output = "First try: #### 12\nNo, wait.\n#### 13";
        let first = json!({"kind": "regex_match", "pattern": r"####\s*(\d+)"});
        let last = json!({"kind": "regex_match", "pattern": r"####\s*(\d+)", "occurrence": "last"});
        let graded = grade(&spec(first.clone()), output, "12");
        assert_eq!(graded.verdict, Verdict::Pass);
        assert_eq!(graded.extracted_answer.as_deref(), Some("12"));
        assert_eq!(verdict(first, output, "13"), Verdict::Fail);
        let graded = grade(&spec(last), output, "12");
        assert_eq!(graded.verdict, Verdict::Fail);
        assert_eq!(graded.extracted_answer.as_deref(), Some("13"));
        // The capture is compared after the exact-match normalisation.
        let named = json!({"kind": "regex_match", "pattern": r"(?i)capital is (?P<city>[\w ]+)\."});
        assert_eq!(
            verdict(named, "The capital is  PARIS.", "paris"),
            Verdict::Pass
        );
    }

    #[test]
    fn regex_match_is_uncertain_without_a_capture() {
        let no_match = grade(
            &spec(json!({"kind": "regex_match", "pattern": r"#### (\d+)"})),
            "The answer is 12",
            "12",
        );
        assert_eq!(no_match.verdict, Verdict::Uncertain);
        assert_eq!(no_match.extracted_answer, None);
        assert!(no_match.reason.contains("does not match"));
        let idle_group = grade(
            &spec(json!({"kind": "regex_match", "pattern": "done|result: (\\d+)"})),
            "done",
            "12",
        );
        assert_eq!(idle_group.verdict, Verdict::Uncertain);
        assert!(idle_group.reason.contains("took no part"));
    }

    #[test]
    fn regex_match_stays_fast_on_a_huge_output_with_a_backtracking_pattern() {
        // `(a+)+b` takes exponential time in backtracking engines; `regex` is linear.
        let output = "a".repeat(1_000_000);
        let graded = grade(
            &spec(json!({"kind": "regex_match", "pattern": "(a+)+b"})),
            &output,
            "a",
        );
        assert_eq!(graded.verdict, Verdict::Uncertain);
    }

    #[test]
    fn bad_regexes_are_refused_with_a_clear_message() {
        let unbalanced = spec_error(json!({"kind": "regex_match", "pattern": "(\\d+"}));
        assert!(matches!(unbalanced, GraderSpecError::InvalidRegex { .. }));
        assert!(unbalanced
            .to_string()
            .starts_with("the regex `(\\d+` does not compile"));
        // Look-around is a backtracking feature the linear-time engine does not offer.
        let lookahead = spec_error(json!({"kind": "regex_match", "pattern": "(?=a)(a)"}));
        assert!(matches!(lookahead, GraderSpecError::InvalidRegex { .. }));
        assert_eq!(
            spec_error(json!({"kind": "regex_match", "pattern": "\\d+"})),
            GraderSpecError::WrongCaptureGroupCount {
                pattern: "\\d+".into(),
                found: 0
            }
        );
        assert_eq!(
            spec_error(json!({"kind": "regex_match", "pattern": "(a)(b)"})).to_string(),
            "the regex `(a)(b)` must have exactly one capture group, around the answer; it has 2"
        );
        assert_eq!(
            spec_error(
                json!({"kind": "regex_match", "pattern": format!("({})", "a".repeat(1_000))})
            ),
            GraderSpecError::PatternTooLong { chars: 1_002 }
        );
        assert!(
            spec(json!({"kind": "regex_match", "pattern": "(?:x|y)(z)"}))
                .validate()
                .is_ok()
        );
    }

    // --- Numeric -------------------------------------------------------------------------------

    #[test]
    fn numbers_are_read_with_separators_signs_fractions_and_units() {
        let read = |text: &str| the_number_in(text).unwrap();
        assert_eq!(read("$1,234.50"), 1234.5);
        assert_eq!(read("1,234,567"), 1_234_567.0);
        assert_eq!(read("-3/4"), -0.75);
        assert_eq!(read("x = 3 / 4"), 0.75);
        assert_eq!(read("\u{2212}2 degrees"), -2.0);
        assert_eq!(read("+7"), 7.0);
        assert_eq!(read("50%"), 50.0);
        assert_eq!(read("1.5e3 m"), 1500.0);
        assert_eq!(read(".5"), 0.5);
        assert_eq!(read("42."), 42.0);
        assert_eq!(read("3/4 = 0.75"), 0.75);
        assert_eq!(read("４２ apples"), 42.0);
    }

    #[test]
    fn unreadable_or_ambiguous_numbers_are_refused() {
        for no_number in ["NaN", "inf", "-Infinity", "twelve", "", "   "] {
            let problem = the_number_in(no_number).unwrap_err();
            assert!(problem.starts_with("no number"), "{no_number}: {problem}");
        }
        for ambiguous in ["3 or 4", "3,5", "1/2/2024", "2024-01-05", "1,2345"] {
            let problem = the_number_in(ambiguous).unwrap_err();
            assert!(problem.starts_with("several"), "{ambiguous}: {problem}");
        }
        assert_eq!(the_number_in("1/0").unwrap_err(), "`1/0` divides by zero");
        assert_eq!(
            the_number_in("1e999").unwrap_err(),
            "`1e999` is too large to compare"
        );
        let huge_integer = "9".repeat(400);
        assert!(the_number_in(&huge_integer)
            .unwrap_err()
            .contains("too large"));
        assert!(the_number_in(&format!("{huge_integer}/{huge_integer}"))
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn numeric_grading_applies_absolute_and_relative_tolerance() {
        let exact = json!({"kind": "numeric"});
        assert_eq!(verdict(exact.clone(), "Answer: 0.75", "3/4"), Verdict::Pass);
        assert_eq!(
            verdict(exact.clone(), "Answer: 1,000", "1000"),
            Verdict::Pass
        );
        assert_eq!(
            verdict(exact.clone(), "Answer: 0.76", "0.75"),
            Verdict::Fail
        );
        assert_eq!(verdict(exact, "Answer: 1/3", "0.3333"), Verdict::Fail);
        let absolute = json!({"kind": "numeric", "absolute_tolerance": 0.001});
        assert_eq!(
            verdict(absolute.clone(), "Answer: 1/3", "0.3333"),
            Verdict::Pass
        );
        assert_eq!(verdict(absolute, "Answer: 0.335", "1/3"), Verdict::Fail);
        let relative = json!({"kind": "numeric", "relative_tolerance": 0.1});
        assert_eq!(
            verdict(relative.clone(), "Answer: $105", "100"),
            Verdict::Pass
        );
        assert_eq!(
            verdict(relative.clone(), "Answer: -110", "-100"),
            Verdict::Pass
        );
        assert_eq!(verdict(relative, "Answer: 111", "100"), Verdict::Fail);
        // The looser of the two wins: 5 absolute beats 1% of 100; 1% of 1000 beats 5.
        let both =
            json!({"kind": "numeric", "absolute_tolerance": 5.0, "relative_tolerance": 0.01});
        assert_eq!(verdict(both.clone(), "Answer: 104", "100"), Verdict::Pass);
        assert_eq!(verdict(both.clone(), "Answer: 1009", "1000"), Verdict::Pass);
        let failed = grade(&spec(both), "Answer: 1011", "1000");
        assert_eq!(failed.verdict, Verdict::Fail);
        assert_eq!(failed.extracted_answer.as_deref(), Some("1011"));
        assert_eq!(
            failed.reason,
            "answer 1011 is 11 away from the target 1000; allowed: 10"
        );
    }

    #[test]
    fn numeric_grading_is_uncertain_when_a_side_has_no_single_number() {
        let numeric = json!({"kind": "numeric"});
        let bad_target = grade(&spec(numeric.clone()), "Answer: 12", "twelve");
        assert_eq!(bad_target.verdict, Verdict::Uncertain);
        assert!(bad_target.reason.starts_with("target: no number"));
        for output in [
            "Answer: NaN",
            "Answer: inf",
            "Answer: 12 or 13",
            "thinking...\n...",
        ] {
            assert_eq!(
                verdict(numeric.clone(), output, "12"),
                Verdict::Uncertain,
                "{output}"
            );
        }
    }

    #[test]
    fn bad_tolerances_are_refused() {
        assert_eq!(
            spec_error(json!({"kind": "numeric", "absolute_tolerance": -0.1})),
            GraderSpecError::InvalidTolerance {
                which: "absolute",
                value: -0.1
            }
        );
        for value in [f64::NAN, f64::INFINITY] {
            let problem = GraderSpec::Numeric {
                absolute_tolerance: None,
                relative_tolerance: Some(value),
            }
            .validate()
            .unwrap_err();
            assert!(problem
                .to_string()
                .starts_with("the relative tolerance must be a finite number"));
        }
    }

    // --- Multiple choice -----------------------------------------------------------------------

    #[test]
    fn the_chosen_letter_is_found_in_common_forms() {
        let cases = [
            ("Answer: (B)", 'B'),
            ("B)", 'B'),
            ("the answer is b", 'B'),
            ("The answer is (c). It fits best.", 'C'),
            ("**D**", 'D'),
            ("Let me reason.\nFinal answer: **E**", 'E'),
            ("answer - [f]", 'F'),
            ("B) Paris, because the capital...", 'B'),
            ("(j) none of the above", 'J'),
            ("The answer is a bit unclear.\nAnswer: C", 'C'),
            ("Answer: A\nHmm, no. The correct answer is G.", 'G'),
            ("I pick a.\nthe answer is h.", 'H'),
            ("the answer is a.", 'A'),
            ("Answer: B because Paris is the capital", 'B'),
            ("the answer is c since it fits", 'C'),
        ];
        for (output, letter) in cases {
            assert_eq!(chosen_letter(output), Ok(letter), "{output}");
        }
    }

    #[test]
    fn no_letter_is_invented_from_prose_or_option_lists() {
        assert!(chosen_letter("The answer is a bit unclear to me").is_err());
        // The pronoun is not option I; a bracketed letter mid-sentence is not looked for.
        assert!(chosen_letter("Answer: I am not sure").is_err());
        assert!(chosen_letter("Answer: I think it is (D)").is_err());
        assert!(chosen_letter("").is_err());
        assert!(chosen_letter("K").is_err());
        assert!(chosen_letter("The answer is K").is_err());
        assert_eq!(
            chosen_letter("A) Paris\nB) London\nC) Rome"),
            Err(
                "the output lists several options (A, B, C) without saying which it chooses".into()
            )
        );
    }

    #[test]
    fn multiple_choice_grading_compares_letters() {
        let choice = json!({"kind": "multiple_choice"});
        let passed = grade(&spec(choice.clone()), "Answer: B", "(b)");
        assert_eq!(passed.verdict, Verdict::Pass);
        assert_eq!(passed.extracted_answer.as_deref(), Some("B"));
        let failed = grade(&spec(choice.clone()), "I think the answer is (C).", "B");
        assert_eq!(failed.verdict, Verdict::Fail);
        assert_eq!(failed.reason, "chose C; the target is B");
        let bad_target = grade(&spec(choice.clone()), "Answer: B", "Paris");
        assert_eq!(bad_target.verdict, Verdict::Uncertain);
        assert!(bad_target.reason.contains("not an option letter"));
        assert_eq!(
            verdict(choice, "It is hard to say.", "A"),
            Verdict::Uncertain
        );
    }

    // --- Contains and not-contains -------------------------------------------------------------

    #[test]
    fn contains_checks_all_or_any_strings_with_optional_case() {
        let output = "The Eiffel Tower is in Paris.";
        assert_eq!(
            verdict(
                json!({"kind": "contains", "strings": ["eiffel", "PARIS"]}),
                output,
                ""
            ),
            Verdict::Pass
        );
        let case_sensitive = grade(
            &spec(
                json!({"kind": "contains", "strings": ["eiffel", "Paris", "tower"], "case_sensitive": true}),
            ),
            output,
            "",
        );
        assert_eq!(case_sensitive.verdict, Verdict::Fail);
        assert_eq!(case_sensitive.reason, "missing `eiffel`, `tower`");
        let any = json!({"kind": "contains", "strings": ["London", "Paris"], "require": "any"});
        assert_eq!(verdict(any.clone(), output, ""), Verdict::Pass);
        assert_eq!(verdict(any, "Rome", ""), Verdict::Fail);
        // Unicode case folding, not just ASCII.
        assert_eq!(
            verdict(
                json!({"kind": "contains", "strings": ["école"]}),
                "L'ÉCOLE",
                ""
            ),
            Verdict::Pass
        );
        assert_eq!(
            verdict(json!({"kind": "contains", "strings": ["x"]}), "", ""),
            Verdict::Fail
        );
    }

    #[test]
    fn not_contains_fails_on_any_forbidden_string() {
        let refusal = json!({"kind": "not_contains", "strings": ["as an AI", "I cannot"]});
        let failed = grade(&spec(refusal.clone()), "As an AI language model, I...", "");
        assert_eq!(failed.verdict, Verdict::Fail);
        assert_eq!(failed.reason, "contains the forbidden `as an ai`");
        assert_eq!(verdict(refusal.clone(), "Paris.", ""), Verdict::Pass);
        assert_eq!(verdict(refusal, "", ""), Verdict::Pass);
    }

    #[test]
    fn empty_string_lists_are_refused() {
        assert_eq!(
            spec_error(json!({"kind": "contains", "strings": []})),
            GraderSpecError::EmptyList { field: "strings" }
        );
        assert_eq!(
            spec_error(json!({"kind": "not_contains", "strings": ["ok", ""]})).to_string(),
            "`strings` contains an empty string, which every output contains"
        );
    }

    // --- JSON ----------------------------------------------------------------------------------

    #[test]
    fn json_validity_accepts_one_document_optionally_fenced() {
        let json_valid = json!({"kind": "json_valid"});
        for valid in [
            r#"{"a": 1}"#,
            "  [1, 2]\n",
            "\"just a string\"",
            "```json\n{\"a\": [1, 2]}\n```",
            "```\n{}\n```",
        ] {
            assert_eq!(
                verdict(json_valid.clone(), valid, ""),
                Verdict::Pass,
                "{valid}"
            );
        }
        for invalid in [
            "{\"a\": 1} and more",
            "{'a': 1}",
            "NaN",
            "```json\n{\"a\": }\n```",
            "Sure! ```json\n{}\n```",
        ] {
            assert_eq!(
                verdict(json_valid.clone(), invalid, ""),
                Verdict::Fail,
                "{invalid}"
            );
        }
        let empty = grade(&spec(json_valid.clone()), "  ", "");
        assert_eq!(empty.verdict, Verdict::Fail);
        assert_eq!(empty.reason, "the output is empty, not JSON");
        // Nesting far beyond serde_json's limit fails cleanly instead of overflowing the stack.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let deep = grade(&spec(json_valid), &deep, "");
        assert_eq!(deep.verdict, Verdict::Fail);
        assert!(deep.reason.contains("recursion limit"));
    }

    fn person_schema() -> serde_json::Value {
        json!({
            "kind": "json_schema",
            "schema": {
                "type": "object",
                "required": ["name", "age"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Z]"},
                    "age": {"type": "integer", "minimum": 0}
                }
            }
        })
    }

    #[test]
    fn json_schema_conformance_reports_the_first_violations() {
        assert_eq!(
            verdict(person_schema(), r#"{"name": "Ada", "age": 36}"#, ""),
            Verdict::Pass
        );
        let failed = grade(&spec(person_schema()), r#"{"name": "ada", "age": -1}"#, "");
        assert_eq!(failed.verdict, Verdict::Fail);
        assert!(
            failed.reason.starts_with("2 schema violations: "),
            "{}",
            failed.reason
        );
        assert!(failed
            .reason
            .contains("at `/age`: -1 is less than the minimum of 0"));
        assert!(failed.reason.contains("at `/name`"));
        let missing = grade(&spec(person_schema()), "{}", "");
        assert!(missing
            .reason
            .contains("at `/`: \"name\" is a required property"));
        let not_json = grade(&spec(person_schema()), "name: Ada", "");
        assert_eq!(not_json.verdict, Verdict::Fail);
        assert!(not_json.reason.starts_with("the output is not valid JSON"));
    }

    #[test]
    fn json_schema_counts_violations_beyond_those_it_spells_out() {
        let integers = json!({"kind": "json_schema", "schema": {"type": "array", "items": {"type": "integer"}}});
        let output = serde_json::to_string(&vec!["x"; 10]).unwrap();
        let failed = grade(&spec(integers), &output, "");
        assert_eq!(failed.verdict, Verdict::Fail);
        assert!(failed.reason.starts_with("10 schema violations: at `/0`"));
        assert!(failed.reason.ends_with("; and 7 more"), "{}", failed.reason);
    }

    #[test]
    fn schemas_that_do_not_compile_are_refused() {
        let bad_type = spec_error(json!({"kind": "json_schema", "schema": {"type": 12}}));
        assert!(matches!(bad_type, GraderSpecError::InvalidSchema { .. }));
        assert!(bad_type
            .to_string()
            .starts_with("the JSON schema does not compile: "));
        let bad_pattern =
            spec_error(json!({"kind": "json_schema", "schema": {"pattern": "(unclosed"}}));
        assert!(matches!(bad_pattern, GraderSpecError::InvalidSchema { .. }));
        // Nothing is fetched: a remote reference cannot resolve.
        let remote = spec_error(
            json!({"kind": "json_schema", "schema": {"$ref": "https://example.com/schema.json"}}),
        );
        assert!(matches!(remote, GraderSpecError::InvalidSchema { .. }));
        assert!(spec(json!({"kind": "json_schema", "schema": true}))
            .validate()
            .is_ok());
    }

    #[test]
    fn schema_patterns_run_in_linear_time() {
        let backtracking =
            json!({"kind": "json_schema", "schema": {"type": "string", "pattern": "^(a+)+$"}});
        let output = format!("\"{}b\"", "a".repeat(100_000));
        assert_eq!(verdict(backtracking, &output, ""), Verdict::Fail);
    }

    // --- Length --------------------------------------------------------------------------------

    #[test]
    fn length_limits_count_characters_and_words_after_trimming() {
        let max_chars = json!({"kind": "length", "max_chars": 5});
        assert_eq!(verdict(max_chars.clone(), "  héllo \n", ""), Verdict::Pass);
        assert_eq!(verdict(max_chars.clone(), "👍👍👍👍👍", ""), Verdict::Pass);
        let too_long = grade(&spec(max_chars), "héllo!", "");
        assert_eq!(too_long.verdict, Verdict::Fail);
        assert_eq!(too_long.reason, "6 characters, above the maximum of 5");
        let words = json!({"kind": "length", "min_words": 3, "max_words": 4});
        let short = grade(&spec(words.clone()), "one\ttwo", "");
        assert_eq!(short.reason, "2 words, below the minimum of 3");
        assert_eq!(verdict(words.clone(), "one two  three", ""), Verdict::Pass);
        assert_eq!(verdict(words, "a b c d e", ""), Verdict::Fail);
        let both = grade(
            &spec(json!({"kind": "length", "min_chars": 1, "min_words": 1})),
            "   ",
            "",
        );
        assert_eq!(
            both.reason,
            "0 characters, below the minimum of 1; 0 words, below the minimum of 1"
        );
    }

    #[test]
    fn impossible_length_limits_are_refused() {
        assert_eq!(
            spec_error(json!({"kind": "length"})),
            GraderSpecError::NoLengthLimit
        );
        assert_eq!(
            spec_error(json!({"kind": "length", "min_words": 10, "max_words": 3})).to_string(),
            "the minimum words (10) is greater than the maximum words (3)"
        );
        assert_eq!(
            spec_error(json!({"kind": "length", "min_chars": 2, "max_chars": 1})),
            GraderSpecError::MinAboveMax {
                unit: "characters",
                min: 2,
                max: 1
            }
        );
        assert!(
            spec(json!({"kind": "length", "min_chars": 3, "max_chars": 3}))
                .validate()
                .is_ok()
        );
    }

    // --- Combinators ---------------------------------------------------------------------------

    const PASSES: &str = r#"{"kind": "contains", "strings": ["paris"]}"#;
    const FAILS: &str = r#"{"kind": "length", "max_chars": 3}"#;
    const UNDECIDED: &str = r#"{"kind": "numeric"}"#;

    fn combined(kind: &str, children: &[&str]) -> serde_json::Value {
        let graders: Vec<serde_json::Value> = children
            .iter()
            .map(|child| serde_json::from_str(child).unwrap())
            .collect();
        json!({"kind": kind, "graders": graders})
    }

    #[test]
    fn all_of_and_any_of_follow_three_valued_logic() {
        // The output mentions Paris, is longer than 3 characters and has no number.
        let output = "Paris";
        let cases = [
            ("all_of", vec![PASSES, PASSES], Verdict::Pass),
            ("all_of", vec![PASSES, UNDECIDED], Verdict::Uncertain),
            ("all_of", vec![UNDECIDED, FAILS], Verdict::Fail),
            ("any_of", vec![FAILS, PASSES], Verdict::Pass),
            ("any_of", vec![FAILS, UNDECIDED], Verdict::Uncertain),
            ("any_of", vec![FAILS, FAILS], Verdict::Fail),
        ];
        for (kind, children, expected) in cases {
            assert_eq!(
                verdict(combined(kind, &children), output, "12"),
                expected,
                "{kind} {children:?}"
            );
        }
        let graded = grade(&spec(combined("all_of", &[PASSES, FAILS])), output, "12");
        assert_eq!(graded.grader, "all_of@1");
        assert_eq!(
            graded.reason,
            "1 of 2 checks failed: [contains@1 pass: contains every required string: `paris`] \
             [length@1 fail: 5 characters, above the maximum of 3]"
        );
    }

    #[test]
    fn combinators_report_the_first_extracted_answer() {
        let rubric = json!({"kind": "all_of", "graders": [
            {"kind": "not_contains", "strings": ["sorry"]},
            {"kind": "numeric", "absolute_tolerance": 0.5},
            {"kind": "multiple_choice"}
        ]});
        let graded = grade(&spec(rubric), "Answer: 12.3", "12");
        assert_eq!(graded.extracted_answer.as_deref(), Some("12.3"));
        assert_eq!(graded.verdict, Verdict::Uncertain);
    }

    #[test]
    fn nested_combinators_grade_and_are_bounded() {
        // any_of [contains paris, at most 3 characters], then alternately wrapped in
        // all_of [.., not containing london] and any_of [.., at most 3 characters].
        let mut nested = combined("any_of", &[PASSES, FAILS]);
        for level in 1..MAX_NESTING_DEPTH {
            let (kind, sibling) = if level % 2 == 1 {
                (
                    "all_of",
                    json!({"kind": "not_contains", "strings": ["london"]}),
                )
            } else {
                ("any_of", serde_json::from_str(FAILS).unwrap())
            };
            nested = json!({"kind": kind, "graders": [nested, sibling]});
        }
        assert_eq!(verdict(nested.clone(), "Paris", ""), Verdict::Pass);
        assert_eq!(verdict(nested.clone(), "Rom", ""), Verdict::Pass);
        assert_eq!(verdict(nested.clone(), "Rome", ""), Verdict::Fail);
        assert_eq!(
            verdict(nested.clone(), "Paris or London", ""),
            Verdict::Fail
        );
        let too_deep = json!({"kind": "all_of", "graders": [nested]});
        assert_eq!(
            spec_error(too_deep).to_string(),
            "in all_of grader 1: in all_of grader 1: in any_of grader 1: in all_of grader 1: \
             all_of and any_of may be nested at most 4 deep"
        );
    }

    #[test]
    fn problems_inside_combinators_say_where_they_are() {
        let rubric = json!({"kind": "any_of", "graders": [
            {"kind": "json_valid"},
            {"kind": "all_of", "graders": [
                {"kind": "length", "max_words": 10},
                {"kind": "regex_match", "pattern": "("}
            ]}
        ]});
        let problem = spec_error(rubric);
        let GraderSpecError::InCombinator {
            combinator,
            position,
            problem: inner,
        } = &problem
        else {
            panic!("expected a located problem, got {problem:?}");
        };
        assert_eq!((*combinator, *position), ("any_of", 2));
        assert!(inner
            .to_string()
            .starts_with("in all_of grader 2: the regex `(` does not compile"));
        assert_eq!(
            spec_error(json!({"kind": "all_of", "graders": []})),
            GraderSpecError::EmptyList { field: "graders" }
        );
    }

    #[test]
    fn a_misconfigured_spec_grades_uncertain_instead_of_failing() {
        let graded = grade(
            &spec(json!({"kind": "regex_match", "pattern": "[oops"})),
            "anything",
            "x",
        );
        assert_eq!(graded.grader, "regex_match@1");
        assert_eq!(graded.verdict, Verdict::Uncertain);
        assert!(graded
            .reason
            .starts_with("the grader is misconfigured: the regex"));
    }

    // --- Adversarial outputs -------------------------------------------------------------------

    #[test]
    fn no_grader_panics_on_hostile_outputs() {
        let huge_answer = format!("{}\nAnswer: 42", "blah ".repeat(200_000));
        let outputs = [
            String::new(),
            " \n\t ".into(),
            "Answer:".into(),
            "Answer: NaN".into(),
            "Answer: -inf / 0".into(),
            "Answer: 1/0".into(),
            "```".into(),
            "[[[[[[".into(),
            "\u{0}\u{1}\u{7f}".into(),
            "\u{202E}rewsnA: B\u{202C}".into(),
            "e\u{301}\u{301}\u{301}\u{301}".into(),
            "🤖".repeat(1_000),
            "é".repeat(MAX_QUOTED_CHARS + 1),
            huge_answer.clone(),
        ];
        let long_target = "é".repeat(MAX_QUOTED_CHARS * 2);
        let targets = ["", "42", "B", long_target.as_str()];
        for spec in every_kind_of_spec() {
            let grader = spec.compile().unwrap();
            for output in &outputs {
                for target in &targets {
                    let graded = grader.grade(output, target);
                    assert_eq!(graded.grader, spec.id_version());
                    assert!(!graded.reason.is_empty());
                }
            }
        }
        // Quoted text is cut on a character boundary.
        let long = grade(
            &GraderSpec::NormalisedMatch {},
            &format!("Answer: {}", "é".repeat(300)),
            "x",
        );
        assert!(long
            .reason
            .contains(&format!("`{}…`", "é".repeat(MAX_QUOTED_CHARS))));
    }

    #[test]
    fn huge_outputs_still_yield_their_final_answer() {
        let output = format!("{}\nAnswer: 42", "reasoning ".repeat(500_000));
        assert_eq!(
            verdict(json!({"kind": "numeric"}), &output, "42"),
            Verdict::Pass
        );
        assert_eq!(
            verdict(json!({"kind": "normalised_match"}), &output, "42"),
            Verdict::Pass
        );
        let choice = format!("{}\nThe answer is (D).", "reasoning ".repeat(500_000));
        assert_eq!(
            verdict(json!({"kind": "multiple_choice"}), &choice, "D"),
            Verdict::Pass
        );
    }
}
