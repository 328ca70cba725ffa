//! What a human rater is asked about an item: a rubric of one or more dimensions, each of one
//! kind (pass/fail, an ordinal scale with an anchored description per level, named categories,
//! a number, or free text) with the level of measurement its agreement is computed at. A rubric
//! is checked alone here; a rater's answer is checked against it. Versions are kept by the store
//! (a changed rubric is a new version); the content hash names exactly what was asked.
//!
//! A rubric used to decide items (an eval's triage policy names it) says which dimension
//! gives the item's pass or fail: a binary one, or an ordinal or numeric one with the point
//! from which an answer passes.
//!
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::agreement::{Level, Value};

/// Most dimensions one rubric asks about.
pub const MAX_DIMENSIONS: usize = 16;
/// Most points of an ordinal scale: each is picked by a digit key (1–9, then 0 for the tenth).
pub const MAX_SCALE_POINTS: usize = 10;
/// Most named options of a categorical dimension.
pub const MAX_OPTIONS: usize = 32;
/// Longest question, anchor description or option label, in bytes.
pub const MAX_TEXT_BYTES: usize = 2_000;
/// Longest free-text answer a dimension may allow, in characters.
pub const MAX_FREE_TEXT_CHARS: u32 = 20_000;

/// A rubric: the dimensions a rater answers, in the order they are shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rubric {
    pub dimensions: Vec<Dimension>,
    /// Which answer passes the item; needed when the rubric decides items sent to humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictRule>,
}

/// How a rater's (or the raters' consensus) answer becomes pass or fail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictRule {
    /// A required binary, ordinal or numeric dimension.
    pub dimension: String,
    /// For an ordinal (a point) or numeric dimension: answers at or above this pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_at_least: Option<f64>,
}

/// One question of a rubric. (Its kind's fields sit beside its own, so unknown fields cannot be
/// refused here: serde cannot deny them across a flattened enum.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dimension {
    /// Names the dimension in answers, reports and exports: lower-case letters, digits and `_`.
    pub key: String,
    /// What the rater is asked.
    pub question: String,
    #[serde(flatten)]
    pub kind: DimensionKind,
    /// A rater may leave an optional dimension unanswered.
    #[serde(default = "yes")]
    pub required: bool,
}

fn yes() -> bool {
    true
}

/// What kind of answer a dimension takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DimensionKind {
    /// Pass or fail, as the original question.
    Binary,
    /// One point of a scale, lowest first; each point has an anchor saying what it means.
    Ordinal { scale: Vec<Anchor> },
    /// One of the named options, or any number of them when `multiple`.
    Categorical {
        options: Vec<String>,
        #[serde(default)]
        multiple: bool,
    },
    /// A number within the bounds given.
    Numeric { min: f64, max: f64 },
    /// Written text, at most `max_chars` characters.
    FreeText { max_chars: u32 },
}

/// One point of an ordinal scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    /// Short name shown on the button ("Poor", "Excellent").
    pub label: String,
    /// What an answer at this point looks like.
    pub description: String,
}

/// A rater's answer to one dimension.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DimensionAnswer {
    /// Binary: pass (`true`) or fail.
    Binary(bool),
    /// Ordinal: the point, from 1 (lowest); numeric: the number.
    Number(f64),
    /// Categorical: the chosen options; free text: one entry, the text.
    Texts(Vec<String>),
}

/// A rater's answers, by dimension key.
pub type RubricAnswer = BTreeMap<String, DimensionAnswer>;

impl DimensionKind {
    /// The level of measurement agreement on this dimension is computed at; `None` for free
    /// text, which has no agreement statistic.
    pub fn level(&self) -> Option<Level> {
        match self {
            DimensionKind::Binary => Some(Level::Nominal),
            DimensionKind::Categorical { .. } => Some(Level::Nominal),
            DimensionKind::Ordinal { .. } => Some(Level::Ordinal),
            DimensionKind::Numeric { .. } => Some(Level::Interval),
            DimensionKind::FreeText { .. } => None,
        }
    }

    /// An answer as agreement statistics take it at [`Self::level`]: pass/fail and options as
    /// labels, points and numbers as numbers; a set of options is one label (raters agree when
    /// they chose the same set). `None` for free text or an answer of another kind.
    pub fn agreement_value(&self, answer: &DimensionAnswer) -> Option<Value> {
        match (self, answer) {
            (DimensionKind::Binary, DimensionAnswer::Binary(pass)) => {
                Some(Value::Label(if *pass { "pass" } else { "fail" }.into()))
            }
            (
                DimensionKind::Ordinal { .. } | DimensionKind::Numeric { .. },
                DimensionAnswer::Number(value),
            ) => Some(Value::Number(*value)),
            (DimensionKind::Categorical { .. }, DimensionAnswer::Texts(chosen)) => {
                let mut chosen = chosen.clone();
                chosen.sort();
                Some(Value::Label(chosen.join(" | ")))
            }
            _ => None,
        }
    }

    fn validate(&self) -> Result<(), String> {
        match self {
            DimensionKind::Binary => Ok(()),
            DimensionKind::Ordinal { scale } => {
                if !(2..=MAX_SCALE_POINTS).contains(&scale.len()) {
                    return Err(format!(
                        "an ordinal scale has 2 to {MAX_SCALE_POINTS} points, not {}",
                        scale.len()
                    ));
                }
                for (index, anchor) in scale.iter().enumerate() {
                    let point = index + 1;
                    text(&anchor.label, &format!("point {point}'s label"))?;
                    text(&anchor.description, &format!("point {point}'s description"))?;
                }
                distinct(scale.iter().map(|anchor| anchor.label.as_str()), "labels")
            }
            DimensionKind::Categorical { options, .. } => {
                if !(2..=MAX_OPTIONS).contains(&options.len()) {
                    return Err(format!(
                        "a categorical question has 2 to {MAX_OPTIONS} options, not {}",
                        options.len()
                    ));
                }
                for option in options {
                    text(option, "an option")?;
                }
                distinct(options.iter().map(String::as_str), "options")
            }
            DimensionKind::Numeric { min, max } => {
                if !(min.is_finite() && max.is_finite() && min < max) {
                    return Err(format!(
                        "a numeric question needs finite bounds with min below max, not {min} to {max}"
                    ));
                }
                Ok(())
            }
            DimensionKind::FreeText { max_chars } => {
                if !(1..=MAX_FREE_TEXT_CHARS).contains(max_chars) {
                    return Err(format!(
                        "free text allows 1 to {MAX_FREE_TEXT_CHARS} characters, not {max_chars}"
                    ));
                }
                Ok(())
            }
        }
    }

    /// Checks one answer; the error says what was expected.
    fn check(&self, answer: &DimensionAnswer) -> Result<(), String> {
        match (self, answer) {
            (DimensionKind::Binary, DimensionAnswer::Binary(_)) => Ok(()),
            (DimensionKind::Binary, _) => Err("expects pass or fail (true or false)".into()),
            (DimensionKind::Ordinal { scale }, DimensionAnswer::Number(point)) => {
                let whole = point.fract() == 0.0 && *point >= 1.0;
                if whole && *point as usize <= scale.len() {
                    Ok(())
                } else {
                    Err(format!(
                        "expects a point from 1 to {}, not {point}",
                        scale.len()
                    ))
                }
            }
            (DimensionKind::Ordinal { scale }, _) => {
                Err(format!("expects a point from 1 to {}", scale.len()))
            }
            (DimensionKind::Numeric { min, max }, DimensionAnswer::Number(value)) => {
                if (*min..=*max).contains(value) {
                    Ok(())
                } else {
                    Err(format!("expects a number from {min} to {max}, not {value}"))
                }
            }
            (DimensionKind::Numeric { min, max }, _) => {
                Err(format!("expects a number from {min} to {max}"))
            }
            (DimensionKind::Categorical { options, multiple }, DimensionAnswer::Texts(chosen)) => {
                if chosen.is_empty() || (!multiple && chosen.len() > 1) {
                    return Err(if *multiple {
                        "expects one or more of its options".into()
                    } else {
                        "expects exactly one of its options".into()
                    });
                }
                if let Some(unknown) = chosen.iter().find(|choice| !options.contains(choice)) {
                    return Err(format!("has no option `{unknown}`"));
                }
                distinct(chosen.iter().map(String::as_str), "choices")
            }
            (DimensionKind::Categorical { .. }, _) => Err("expects a list of its options".into()),
            (DimensionKind::FreeText { max_chars }, DimensionAnswer::Texts(texts)) => {
                match texts.as_slice() {
                    [written] if written.chars().count() <= *max_chars as usize => Ok(()),
                    [_] => Err(format!("allows at most {max_chars} characters")),
                    _ => Err("expects one text".into()),
                }
            }
            (DimensionKind::FreeText { .. }, _) => Err("expects one text".into()),
        }
    }
}

impl Rubric {
    /// The original question, as a rubric of one binary dimension.
    pub fn pass_fail(question: &str) -> Rubric {
        Rubric {
            dimensions: vec![Dimension {
                key: "correct".into(),
                question: question.into(),
                kind: DimensionKind::Binary,
                required: true,
            }],
            verdict: Some(VerdictRule {
                dimension: "correct".into(),
                pass_at_least: None,
            }),
        }
    }

    pub fn dimension(&self, key: &str) -> Option<&Dimension> {
        self.dimensions
            .iter()
            .find(|dimension| dimension.key == key)
    }

    /// Pass or fail for one answer to the verdict dimension; `None` when the rubric has no
    /// verdict rule or the answer is not of its kind.
    pub fn verdict_of(&self, answer: &DimensionAnswer) -> Option<bool> {
        let rule = self.verdict.as_ref()?;
        match (answer, rule.pass_at_least) {
            (DimensionAnswer::Binary(pass), None) => Some(*pass),
            (DimensionAnswer::Number(value), Some(threshold)) => Some(*value >= threshold),
            _ => None,
        }
    }

    /// A rater's pass or fail from their whole answer (checked against the rubric first).
    pub fn verdict_of_answer(&self, answer: &RubricAnswer) -> Option<bool> {
        let rule = self.verdict.as_ref()?;
        self.verdict_of(answer.get(&rule.dimension)?)
    }

    /// Checks the verdict rule: it names a required dimension that can pass or fail.
    fn validate_verdict(&self) -> Result<(), String> {
        let Some(rule) = &self.verdict else {
            return Ok(());
        };
        let Some(dimension) = self.dimension(&rule.dimension) else {
            return Err(format!(
                "the verdict comes from dimension `{}`, which the rubric does not have",
                rule.dimension
            ));
        };
        if !dimension.required {
            return Err(format!(
                "the verdict comes from dimension `{}`, which must be required",
                rule.dimension
            ));
        }
        match (&dimension.kind, rule.pass_at_least) {
            (DimensionKind::Binary, None) => Ok(()),
            (DimensionKind::Binary, Some(_)) => Err(format!(
                "dimension `{}` is pass or fail already: drop `pass_at_least`",
                rule.dimension
            )),
            (DimensionKind::Ordinal { scale }, Some(point))
                if point.fract() == 0.0 && point >= 2.0 && point <= scale.len() as f64 =>
            {
                Ok(())
            }
            (DimensionKind::Ordinal { scale }, _) => Err(format!(
                "the verdict from ordinal dimension `{}` needs `pass_at_least`, a point from 2 to {}",
                rule.dimension,
                scale.len()
            )),
            (DimensionKind::Numeric { min, max }, Some(value))
                if value.is_finite() && value > *min && value <= *max =>
            {
                Ok(())
            }
            (DimensionKind::Numeric { min, max }, _) => Err(format!(
                "the verdict from numeric dimension `{}` needs `pass_at_least` above {min} and at most {max}",
                rule.dimension
            )),
            (DimensionKind::Categorical { .. } | DimensionKind::FreeText { .. }, _) => Err(format!(
                "the verdict comes from a binary, ordinal or numeric dimension, and `{}` is none of these",
                rule.dimension
            )),
        }
    }

    /// Checks the rubric alone; the error names the dimension.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_DIMENSIONS).contains(&self.dimensions.len()) {
            return Err(format!(
                "a rubric has 1 to {MAX_DIMENSIONS} dimensions, not {}",
                self.dimensions.len()
            ));
        }
        let mut keys = BTreeSet::new();
        for dimension in &self.dimensions {
            let key = &dimension.key;
            let well_formed = !key.is_empty()
                && key.len() <= 64
                && key.starts_with(|c: char| c.is_ascii_lowercase())
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !well_formed {
                return Err(format!(
                    "dimension key `{key}` must start with a lower-case letter and hold only \
                     lower-case letters, digits and `_` (at most 64)"
                ));
            }
            if key == "verdict" {
                return Err(
                    "the dimension key `verdict` is kept for the item's pass or fail; choose another".into(),
                );
            }
            if !keys.insert(key.as_str()) {
                return Err(format!("two dimensions share the key `{key}`"));
            }
            text(&dimension.question, "the question")
                .and_then(|()| dimension.kind.validate())
                .map_err(|problem| format!("dimension `{key}`: {problem}"))?;
        }
        self.validate_verdict()
    }

    /// Checks a rater's answer: every required dimension answered, every answer of its
    /// dimension's kind, no answer to a dimension the rubric does not have.
    pub fn check_answer(&self, answer: &RubricAnswer) -> Result<(), String> {
        if let Some(key) = answer
            .keys()
            .find(|key| !self.dimensions.iter().any(|d| &d.key == *key))
        {
            return Err(format!("the rubric has no dimension `{key}`"));
        }
        for dimension in &self.dimensions {
            match answer.get(&dimension.key) {
                Some(given) => dimension
                    .kind
                    .check(given)
                    .map_err(|problem| format!("dimension `{}` {problem}", dimension.key))?,
                None if dimension.required => {
                    return Err(format!("dimension `{}` needs an answer", dimension.key))
                }
                None => {}
            }
        }
        Ok(())
    }

    /// The SHA-256 of the rubric's canonical JSON: what a label records it was made under.
    pub fn content_hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("rubrics always serialize");
        crate::expansion::fields_hash([&json[..]])
    }
}

/// One stored version of a rubric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RubricVersion {
    pub id: i64,
    pub name: String,
    pub version: i64,
    pub rubric: Rubric,
    pub content_hash: String,
    /// What changed and why.
    pub note: String,
    pub created_by: Option<String>,
    pub created_at: i64,
}

/// One version of a rubric's guidelines: markdown shown to raters beside the item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Guidelines {
    pub rubric_name: String,
    pub version: i64,
    pub markdown: String,
    pub note: String,
    pub created_by: Option<String>,
    pub created_at: i64,
}

/// A rubric name with its newest version and guidelines, and its older versions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RubricEntry {
    pub latest: RubricVersion,
    pub older: Vec<RubricVersion>,
    pub guidelines: Option<Guidelines>,
    /// The guidelines rendered and sanitised.
    pub guidelines_html: String,
}

/// Longest guidelines, in bytes.
pub const MAX_GUIDELINES_BYTES: usize = 200_000;
/// Longest rubric name.
pub const MAX_NAME_CHARS: usize = 80;

/// Checks a rubric's name: 1 to 80 characters, letters, digits, spaces and `-_./`.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.trim().is_empty()
        && name.trim() == name
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.' | '/'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "a rubric name is 1 to {MAX_NAME_CHARS} letters, digits, spaces or `-_./`, without spaces at either end; `{name}` is not"
        ))
    }
}

/// Reads a rubric from the JSON a lead wrote and checks it; the error says what is wrong.
pub fn parse_rubric(json: &str) -> Result<Rubric, String> {
    let rubric: Rubric =
        serde_json::from_str(json).map_err(|err| format!("the rubric is not valid: {err}"))?;
    rubric.validate()?;
    Ok(rubric)
}

/// Checks guidelines before they are stored.
pub fn check_guidelines(markdown: &str) -> Result<(), String> {
    if markdown.trim().is_empty() {
        return Err("the guidelines are empty".into());
    }
    if markdown.len() > MAX_GUIDELINES_BYTES {
        return Err(format!(
            "the guidelines are longer than {MAX_GUIDELINES_BYTES} bytes"
        ));
    }
    Ok(())
}

/// A required piece of text: not blank, not too long.
fn text(value: &str, what: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("{what} is empty"));
    }
    if value.len() > MAX_TEXT_BYTES {
        return Err(format!("{what} is longer than {MAX_TEXT_BYTES} bytes"));
    }
    Ok(())
}

fn distinct<'a>(values: impl Iterator<Item = &'a str>, what: &str) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for value in values {
        if !seen.insert(value) {
            return Err(format!("its {what} repeat `{value}`"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn helpfulness() -> Rubric {
        serde_json::from_value(json!({"dimensions": [
            {"key": "correct", "question": "Is the final answer correct?", "kind": "binary"},
            {"key": "helpful", "question": "How helpful is the answer?", "kind": "ordinal", "scale": [
                {"label": "Poor", "description": "Misses the question"},
                {"label": "Fair", "description": "Partly answers it"},
                {"label": "Good", "description": "Answers it fully"}]},
            {"key": "issues", "question": "What is wrong?", "kind": "categorical",
             "options": ["factual error", "unsafe", "off topic"], "multiple": true, "required": false},
            {"key": "confidence", "question": "How sure are you (0-100)?", "kind": "numeric", "min": 0, "max": 100},
            {"key": "why", "question": "Why?", "kind": "free_text", "max_chars": 20, "required": false},
        ]}))
        .unwrap()
    }

    #[test]
    fn each_kind_has_its_level_of_measurement() {
        let rubric = helpfulness();
        rubric.validate().unwrap();
        let levels: Vec<Option<Level>> = rubric.dimensions.iter().map(|d| d.kind.level()).collect();
        assert_eq!(
            levels,
            vec![
                Some(Level::Nominal),
                Some(Level::Ordinal),
                Some(Level::Nominal),
                Some(Level::Interval),
                None
            ]
        );
        assert!(Rubric::pass_fail("Is it right?").validate().is_ok());
    }

    #[test]
    fn answers_are_checked_against_their_dimensions() {
        let rubric = helpfulness();
        let answer =
            |value: serde_json::Value| -> RubricAnswer { serde_json::from_value(value).unwrap() };
        let good = answer(
            json!({"correct": true, "helpful": 3, "issues": ["unsafe"], "confidence": 72.5}),
        );
        assert_eq!(rubric.check_answer(&good), Ok(()));
        let refused = |value: serde_json::Value| rubric.check_answer(&answer(value)).unwrap_err();
        assert_eq!(
            refused(json!({"correct": true, "confidence": 1})),
            "dimension `helpful` needs an answer"
        );
        assert!(
            refused(json!({"correct": true, "helpful": 4, "confidence": 1}))
                .contains("`helpful` expects a point from 1 to 3, not 4")
        );
        assert!(
            refused(json!({"correct": true, "helpful": 1.5, "confidence": 1}))
                .contains("from 1 to 3")
        );
        assert!(
            refused(json!({"correct": 1, "helpful": 1, "confidence": 1}))
                .contains("`correct` expects pass or fail")
        );
        assert!(
            refused(json!({"correct": true, "helpful": 1, "confidence": 101}))
                .contains("from 0 to 100, not 101")
        );
        assert!(refused(
            json!({"correct": true, "helpful": 1, "confidence": 1, "issues": ["rude"]})
        )
        .contains("no option `rude`"));
        assert!(
            refused(json!({"correct": true, "helpful": 1, "confidence": 1, "issues": []}))
                .contains("one or more")
        );
        assert!(refused(
            json!({"correct": true, "helpful": 1, "confidence": 1, "why": ["a".repeat(21)]})
        )
        .contains("at most 20 characters"));
        assert!(
            refused(json!({"correct": true, "helpful": 1, "confidence": 1, "tone": 2}))
                .contains("no dimension `tone`")
        );
    }

    #[test]
    fn a_malformed_rubric_is_refused_naming_the_dimension() {
        let with = |edit: fn(&mut Rubric)| {
            let mut rubric = helpfulness();
            edit(&mut rubric);
            rubric.validate().unwrap_err()
        };
        assert!(
            with(|r| r.dimensions[1].key = "correct".into()).contains("share the key `correct`")
        );
        assert!(with(|r| r.dimensions[0].key = "Correct".into()).contains("lower-case"));
        assert!(
            with(|r| r.dimensions[1].kind = DimensionKind::Ordinal { scale: vec![] })
                .contains("dimension `helpful`: an ordinal scale has 2 to 10 points, not 0")
        );
        assert!(
            with(|r| r.dimensions[3].kind = DimensionKind::Numeric { min: 5.0, max: 5.0 })
                .contains("dimension `confidence`")
        );
        assert!(with(|r| r.dimensions[2].kind = DimensionKind::Categorical {
            options: vec!["a".into(), "a".into()],
            multiple: false
        })
        .contains("repeat `a`"));
        assert!(with(|r| r.dimensions.clear()).contains("1 to 16 dimensions"));
        assert!(serde_json::from_value::<Rubric>(json!({"dimensions": [
            {"key": "x", "question": "?", "kind": "likert"}]}))
        .is_err());
    }

    #[test]
    fn the_content_hash_names_exactly_what_was_asked() {
        let rubric = helpfulness();
        assert_eq!(rubric.content_hash(), helpfulness().content_hash());
        let mut reworded = helpfulness();
        reworded.dimensions[1].question = "How useful is the answer?".into();
        assert_ne!(rubric.content_hash(), reworded.content_hash());
    }
}
