//! An eval's field mapping: which of an item's fields is the input, the target, the choices,
//! the category and the metadata, and what one item reads as under it.
//!
//! A dataset item is a JSON object with any fields; the mapping belongs to the eval, so one
//! dataset can serve several evals (MMLU as lettered multiple choice, or as free answers).
//! The default mapping reads the four-field files Arbiter has always taken (`input`,
//! `target`, `category`), so those evals are unchanged. Pure: no I/O.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most choices an item may have: the letters A to Z.
pub const MAX_CHOICES: usize = 26;

/// Most user turns a conversation item may have (MT-Bench has two; long dialogues a few
/// dozen): each turn is its own request carrying every earlier one.
pub const MAX_TURNS: usize = 32;

/// Which fields of an item play which part. Field names are top-level keys of the item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldMapping {
    /// The input: a string, a list of chat messages (`{"role", "content"}`) sent as they are,
    /// or a list of strings: the user turns of a multi-turn conversation, each answered in
    /// its own request that carries the model's own earlier answers.
    #[serde(default = "default_input")]
    pub input: String,
    /// The target: a string, a list of acceptable answers, or (with choices) the index (from 0)
    /// or letter of the right choice. `None`: the eval has no reference answer.
    #[serde(default = "default_target")]
    pub target: Option<String>,
    /// A list of answer options, shown lettered A, B, C… .
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<String>,
    /// A grouping for per-category breakdowns.
    #[serde(default = "default_category")]
    pub category: Option<String>,
    /// Fields shown beside each item in diffs and result tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<String>,
    /// Present the choices in a per-item order drawn with this seed (the target follows its
    /// choice); `None` keeps the item's order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_choices: Option<u64>,
    /// A field holding the item's images (a data URL, or a list of them), sent with its input
    /// to chat endpoints as image parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<String>,
}

fn default_input() -> String {
    "input".into()
}

fn default_target() -> Option<String> {
    Some("target".into())
}

fn default_category() -> Option<String> {
    Some("category".into())
}

impl Default for FieldMapping {
    fn default() -> FieldMapping {
        FieldMapping {
            input: default_input(),
            target: default_target(),
            choices: None,
            category: default_category(),
            metadata: Vec::new(),
            shuffle_choices: None,
            images: None,
        }
    }
}

/// Who says a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of a conversation sent to a chat endpoint. Serialized in the OpenAI shape (see
/// [`crate::images`]): text content, or content parts when it carries images.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// Images shown with the text, as data URLs.
    pub images: Vec<String>,
}

/// An item's input under a mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappedInput {
    Text(String),
    Messages(Vec<ChatMessage>),
    /// User turns of a conversation, in order.
    Turns(Vec<String>),
}

impl MappedInput {
    /// Result identities the input makes per repetition: one per turn of a conversation.
    pub fn turn_count(&self) -> usize {
        match self {
            MappedInput::Turns(turns) => turns.len(),
            _ => 1,
        }
    }
}

/// One item as an eval reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedItem {
    pub input: MappedInput,
    /// Acceptable answers (empty without a target). With choices, the right choice's letter.
    /// For a conversation, those of its first turn.
    pub targets: Vec<String>,
    /// For a conversation: each turn's acceptable answers (empty where a turn has none).
    pub turn_targets: Vec<Vec<String>>,
    /// Answer options in the order presented.
    pub choices: Vec<String>,
    /// With shuffled choices: for each presented choice, its position in the item (so results
    /// map back); empty when the item's order is kept.
    pub choice_order: Vec<usize>,
    /// The right choice's position, when the target names one.
    pub target_index: Option<usize>,
    pub category: String,
    /// (field, value as text) for each metadata field the item has.
    pub metadata: Vec<(String, String)>,
    /// Images sent with the input (for a conversation, with its first turn), as data URLs.
    pub images: Vec<String>,
}

impl MappedItem {
    /// The target as one line for people and judges: the answers joined by " | ".
    pub fn target_text(&self) -> String {
        self.targets.join(" | ")
    }
}

/// Why an item cannot be read under a mapping; callers name the item.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("has no field `{0}`")]
    Missing(String),
    #[error("field `{field}` {problem}")]
    Invalid { field: String, problem: String },
}

fn invalid(field: &str, problem: impl Into<String>) -> FieldError {
    FieldError::Invalid {
        field: field.to_string(),
        problem: problem.into(),
    }
}

/// A mapped field: the item's field of that name, or else a dotted path into nested objects
/// (`metadata.subject`, as Inspect samples keep their metadata).
pub fn lookup<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(value) = fields.get(name) {
        return Some(value);
    }
    let mut parts = name.split('.');
    let mut value = fields.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    Some(value)
}

/// The letter of choice `index` (0 → `A`).
pub fn choice_letter(index: usize) -> Option<char> {
    (index < MAX_CHOICES).then(|| char::from(b'A' + index as u8))
}

/// A scalar as text: strings as they are, numbers and booleans as JSON writes them.
pub fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

impl FieldMapping {
    /// Checks the mapping itself: field names present and distinct where they must be.
    pub fn validate(&self) -> Result<(), String> {
        let names = [
            Some(&self.input),
            self.target.as_ref(),
            self.choices.as_ref(),
            self.images.as_ref(),
        ];
        for name in names.into_iter().flatten().chain(self.category.iter()) {
            if name.trim().is_empty() || name.len() > 200 {
                return Err("field names in the mapping must be 1 to 200 characters".into());
            }
        }
        if self.metadata.len() > 20 || self.metadata.iter().any(|name| name.trim().is_empty()) {
            return Err("the mapping names at most 20 metadata fields, none of them blank".into());
        }
        if self.target.is_some() && self.target == self.choices {
            return Err("the target and the choices must be different fields".into());
        }
        Ok(())
    }

    /// Reads one item's fields under this mapping (`case_id` draws its choice order).
    pub fn apply(
        &self,
        case_id: &str,
        fields: &Map<String, Value>,
    ) -> Result<MappedItem, FieldError> {
        let input = read_input(&self.input, fields)?;
        if let MappedInput::Turns(turns) = &input {
            return self.apply_to_turns(turns.len(), input.clone(), fields);
        }
        let mut choices = match &self.choices {
            Some(name) => read_choices(name, fields)?,
            None => Vec::new(),
        };
        let (mut targets, mut target_index) = match &self.target {
            Some(name) => {
                // Four-field files have always spelled the target `answer` too.
                let value = lookup(fields, name)
                    .or_else(|| (name == "target").then(|| fields.get("answer")).flatten())
                    .ok_or_else(|| FieldError::Missing(name.clone()))?;
                read_target(name, value, self.choices.is_some().then_some(&choices[..]))?
            }
            None => (Vec::new(), None),
        };
        let mut choice_order = Vec::new();
        if let (Some(seed), false) = (self.shuffle_choices, choices.is_empty()) {
            choice_order = choice_permutation(seed, case_id, choices.len());
            choices = choice_order
                .iter()
                .map(|&from| choices[from].clone())
                .collect();
            if let Some(index) = target_index {
                let moved = choice_order
                    .iter()
                    .position(|&from| from == index)
                    .expect("a permutation holds every index");
                target_index = Some(moved);
                targets = vec![choice_letter(moved)
                    .expect("choices are at most 26")
                    .to_string()];
            }
        }
        Ok(MappedItem {
            input,
            targets,
            turn_targets: Vec::new(),
            choices,
            choice_order,
            target_index,
            category: self.read_category(fields)?,
            metadata: self.read_metadata(fields),
            images: self.read_images(fields)?,
        })
    }

    /// The images the mapping names, checked.
    fn read_images(&self, fields: &Map<String, Value>) -> Result<Vec<String>, FieldError> {
        let Some(name) = &self.images else {
            return Ok(Vec::new());
        };
        let value = lookup(fields, name).ok_or_else(|| FieldError::Missing(name.clone()))?;
        crate::images::read_images(value).map_err(|problem| invalid(name, problem))
    }

    /// A conversation of `turns` user turns: its target, when the item has one, lists one
    /// entry per turn (a string, a list of acceptable answers, or null where the turn has no
    /// reference); a conversation without one (as MT-Bench's are) has no targets.
    fn apply_to_turns(
        &self,
        turns: usize,
        input: MappedInput,
        fields: &Map<String, Value>,
    ) -> Result<MappedItem, FieldError> {
        if let Some(name) = &self.choices {
            return Err(invalid(
                name,
                "cannot be combined with an input of several turns; map the choices of a \
                 multiple-choice item whose input is one text",
            ));
        }
        let turn_targets = match &self.target {
            Some(name) => match lookup(fields, name) {
                None | Some(Value::Null) => vec![Vec::new(); turns],
                Some(Value::Array(entries)) if entries.len() == turns => entries
                    .iter()
                    .map(|entry| match entry {
                        Value::Null => Ok(Vec::new()),
                        other => read_target(name, other, None).map(|(answers, _)| answers),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => {
                    return Err(invalid(
                        name,
                        format!(
                            "must list one entry per turn ({turns} here): a string, a list of \
                             acceptable answers, or null where a turn has no reference"
                        ),
                    ))
                }
            },
            None => vec![Vec::new(); turns],
        };
        Ok(MappedItem {
            input,
            targets: turn_targets.first().cloned().unwrap_or_default(),
            turn_targets,
            choices: Vec::new(),
            choice_order: Vec::new(),
            target_index: None,
            category: self.read_category(fields)?,
            metadata: self.read_metadata(fields),
            images: self.read_images(fields)?,
        })
    }

    fn read_category(&self, fields: &Map<String, Value>) -> Result<String, FieldError> {
        Ok(match &self.category {
            // A missing category is no category, as in four-field files.
            Some(name) => match lookup(fields, name) {
                None | Some(Value::Null) => String::new(),
                Some(value) => scalar_text(value)
                    .ok_or_else(|| invalid(name, "must be a string or a number"))?
                    .trim()
                    .to_string(),
            },
            None => String::new(),
        })
    }

    fn read_metadata(&self, fields: &Map<String, Value>) -> Vec<(String, String)> {
        self.metadata
            .iter()
            .filter_map(|name| {
                let value = lookup(fields, name)?;
                Some((
                    name.clone(),
                    scalar_text(value).unwrap_or_else(|| value.to_string()),
                ))
            })
            .collect()
    }
}

fn read_input(name: &str, fields: &Map<String, Value>) -> Result<MappedInput, FieldError> {
    match lookup(fields, name) {
        None | Some(Value::Null) => Err(FieldError::Missing(name.to_string())),
        Some(Value::Array(entries)) if entries.iter().any(Value::is_string) => {
            read_turns(name, entries).map(MappedInput::Turns)
        }
        Some(Value::Array(messages)) => read_messages(name, messages).map(MappedInput::Messages),
        Some(value) => scalar_text(value)
            .map(MappedInput::Text)
            .ok_or_else(|| invalid(name, "must be a string or a list of chat messages")),
    }
}

/// User turns: a list of 1 to [`MAX_TURNS`] strings, none blank.
fn read_turns(name: &str, entries: &[Value]) -> Result<Vec<String>, FieldError> {
    if entries.len() > MAX_TURNS {
        return Err(invalid(
            name,
            format!(
                "has {} turns; a conversation has at most {MAX_TURNS}",
                entries.len()
            ),
        ));
    }
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| match entry {
            Value::String(text) if !text.trim().is_empty() => Ok(text.clone()),
            Value::String(_) => Err(invalid(name, format!("turn {} is blank", index + 1))),
            _ => Err(invalid(
                name,
                format!(
                    "turn {} is not a string; a list of turns holds the user's messages as \
                     strings (a list of chat messages holds objects with a role and content)",
                    index + 1
                ),
            )),
        })
        .collect()
}

/// A conversation: `{"role": "system"|"user"|"assistant", "content": "…"}` objects, the last
/// one from the user (the model answers it).
pub fn read_messages(name: &str, messages: &[Value]) -> Result<Vec<ChatMessage>, FieldError> {
    if messages.is_empty() {
        return Err(invalid(name, "is an empty list of messages"));
    }
    let read: Vec<ChatMessage> = messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            serde_json::from_value::<ChatMessage>(message.clone()).map_err(|err| {
                invalid(
                    name,
                    format!(
                        "message {} must be {{\"role\": \"system\", \"user\" or \"assistant\", \"content\": text or parts}}: {err}",
                        index + 1
                    ),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    if read.last().map(|message| message.role) != Some(Role::User) {
        return Err(invalid(
            name,
            "must end with a user message, which the model answers",
        ));
    }
    Ok(read)
}

fn read_choices(name: &str, fields: &Map<String, Value>) -> Result<Vec<String>, FieldError> {
    let value = lookup(fields, name).ok_or_else(|| FieldError::Missing(name.to_string()))?;
    let Value::Array(options) = value else {
        return Err(invalid(name, "must be a list of answer options"));
    };
    if options.len() < 2 || options.len() > MAX_CHOICES {
        return Err(invalid(
            name,
            format!(
                "has {} options; between 2 and {MAX_CHOICES} are needed",
                options.len()
            ),
        ));
    }
    options
        .iter()
        .map(|option| {
            scalar_text(option).ok_or_else(|| invalid(name, "must hold strings or numbers"))
        })
        .collect()
}

/// Targets from a target value: with choices, an index or a letter naming the right one
/// (read as its letter); otherwise the value as text, or a list of acceptable answers.
fn read_target(
    name: &str,
    value: &Value,
    choices: Option<&[String]>,
) -> Result<(Vec<String>, Option<usize>), FieldError> {
    if let Some(choices) = choices {
        let index = match value {
            Value::Number(number) => {
                number.as_u64().map(|index| index as usize).ok_or_else(|| {
                    invalid(
                        name,
                        format!("is {number}; a choice index is a whole number from 0"),
                    )
                })?
            }
            Value::String(text) => letter_index(text).ok_or_else(|| {
                invalid(
                    name,
                    format!("is `{text}`; with choices it must be an index or a letter"),
                )
            })?,
            _ => return Err(invalid(name, "must be a choice index or letter")),
        };
        if index >= choices.len() {
            return Err(invalid(
                name,
                format!(
                    "is {index}, out of range for {} choices (indices start at 0)",
                    choices.len()
                ),
            ));
        }
        let letter = choice_letter(index).expect("choices are at most 26");
        return Ok((vec![letter.to_string()], Some(index)));
    }
    match value {
        Value::Array(answers) => {
            if answers.is_empty() {
                return Err(invalid(name, "is an empty list of answers"));
            }
            let answers = answers
                .iter()
                .map(|answer| {
                    scalar_text(answer).ok_or_else(|| invalid(name, "must list strings or numbers"))
                })
                .collect::<Result<_, _>>()?;
            Ok((answers, None))
        }
        other => scalar_text(other)
            .map(|text| (vec![text], None))
            .ok_or_else(|| invalid(name, "must be a string, a number or a list of answers")),
    }
}

/// The order an item's `count` choices are shown in under `seed`: for each position, the
/// choice's index in the item. A pure function of the seed and the item's id, so the order is
/// the same at every render and can be recomputed to map a result back.
pub fn choice_permutation(seed: u64, case_id: &str, count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|index| {
        xxhash_rust::xxh3::xxh3_64_with_seed(format!("{case_id}\u{0}{index}").as_bytes(), seed)
    });
    order
}

/// `B` or `b` (trimmed, optionally `(B)` or `B.`) → 1.
fn letter_index(text: &str) -> Option<usize> {
    let trimmed = text
        .trim()
        .trim_start_matches('(')
        .trim_end_matches([')', '.']);
    let mut chars = trimmed.chars();
    let letter = chars.next()?.to_ascii_uppercase();
    (chars.next().is_none() && letter.is_ascii_uppercase()).then(|| (letter as u8 - b'A') as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn the_default_mapping_reads_four_field_items() {
        let mapped = FieldMapping::default()
            .apply(
                "t",
                &object(json!({"input": "2+2?", "target": "4", "category": "math"})),
            )
            .unwrap();
        assert_eq!(mapped.input, MappedInput::Text("2+2?".into()));
        assert_eq!(mapped.targets, vec!["4"]);
        assert_eq!(mapped.category, "math");
        let without_category = FieldMapping::default()
            .apply("t", &object(json!({"input": "x", "target": 4})))
            .unwrap();
        assert_eq!(without_category.category, "");
        assert_eq!(without_category.targets, vec!["4"]);
    }

    #[test]
    fn mmlu_as_published_reads_as_lettered_choices() {
        let mapping = FieldMapping {
            input: "question".into(),
            target: Some("answer".into()),
            choices: Some("choices".into()),
            category: Some("subject".into()),
            metadata: vec!["subject".into()],
            shuffle_choices: None,
            images: None,
        };
        let item = object(json!({
            "question": "Capital of France?",
            "choices": ["Berlin", "Paris", "Rome", "Madrid"],
            "answer": 1,
            "subject": "geography"
        }));
        let mapped = mapping.apply("t", &item).unwrap();
        assert_eq!(mapped.targets, vec!["B"]);
        assert_eq!(mapped.target_index, Some(1));
        assert_eq!(mapped.choices.len(), 4);
        assert_eq!(
            mapped.metadata,
            vec![("subject".into(), "geography".into())]
        );
        let mut by_letter = item.clone();
        by_letter.insert("answer".into(), json!("(c)"));
        assert_eq!(mapping.apply("t", &by_letter).unwrap().targets, vec!["C"]);
        let mut out_of_range = item.clone();
        out_of_range.insert("answer".into(), json!(7));
        assert_eq!(
            mapping.apply("t", &out_of_range).unwrap_err().to_string(),
            "field `answer` is 7, out of range for 4 choices (indices start at 0)"
        );
        let mut missing = item;
        missing.remove("question");
        assert_eq!(
            mapping.apply("t", &missing).unwrap_err().to_string(),
            "has no field `question`"
        );
    }

    #[test]
    fn shuffled_choices_keep_the_target_on_its_choice() {
        let mapping = FieldMapping {
            input: "question".into(),
            target: Some("answer".into()),
            choices: Some("choices".into()),
            shuffle_choices: Some(3),
            ..FieldMapping::default()
        };
        let item =
            object(json!({"question": "q", "choices": ["w", "x", "right", "z"], "answer": 2}));
        let mut orders = std::collections::HashSet::new();
        for case_id in ["a", "b", "c", "d", "e", "f"] {
            let mapped = mapping.apply(case_id, &item).unwrap();
            let position = mapped.target_index.unwrap();
            assert_eq!(mapped.choices[position], "right", "{case_id}");
            assert_eq!(
                mapped.targets,
                vec![choice_letter(position).unwrap().to_string()]
            );
            assert_eq!(
                mapped.choice_order[position], 2,
                "maps back to the item's choice"
            );
            assert_eq!(
                mapped,
                mapping.apply(case_id, &item).unwrap(),
                "the same every time"
            );
            orders.insert(mapped.choice_order);
        }
        assert!(orders.len() > 1, "items get different orders");
    }

    /// An Inspect AI sample as its JSONL files hold it: `input`, `target` (a letter),
    /// `choices`, and `metadata` with nested fields.
    #[test]
    fn inspect_samples_read_with_dotted_metadata_paths() {
        let mapping = FieldMapping {
            choices: Some("choices".into()),
            category: Some("metadata.subject".into()),
            metadata: vec!["metadata.source".into()],
            ..FieldMapping::default()
        };
        let sample = object(json!({
            "input": "Capital of France?",
            "target": "B",
            "choices": ["Berlin", "Paris"],
            "metadata": {"subject": "geography", "source": "atlas"}
        }));
        let mapped = mapping.apply("s1", &sample).unwrap();
        assert_eq!(mapped.targets, vec!["B"]);
        assert_eq!(mapped.category, "geography");
        assert_eq!(
            mapped.metadata,
            vec![("metadata.source".into(), "atlas".into())]
        );
        let missing = FieldMapping {
            category: None,
            input: "metadata.question".into(),
            ..mapping
        };
        assert_eq!(
            missing.apply("s1", &sample).unwrap_err().to_string(),
            "has no field `metadata.question`"
        );
    }

    #[test]
    fn targets_may_list_acceptable_answers() {
        let mapped = FieldMapping::default()
            .apply(
                "t",
                &object(json!({"input": "x", "target": ["NYC", "New York", 10001]})),
            )
            .unwrap();
        assert_eq!(mapped.targets, vec!["NYC", "New York", "10001"]);
        assert_eq!(mapped.target_text(), "NYC | New York | 10001");
    }

    #[test]
    fn conversations_are_messages_ending_with_the_user() {
        let mapped = FieldMapping::default()
            .apply(
                "t",
                &object(json!({"input": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"}
            ], "target": "hello"})),
            )
            .unwrap();
        let MappedInput::Messages(messages) = mapped.input else {
            panic!("a conversation")
        };
        assert_eq!(messages[0].role, Role::System);
        let ends_with_assistant = FieldMapping::default().apply(
            "t",
            &object(json!({"input": [
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}
        ], "target": "x"})),
        );
        assert!(ends_with_assistant
            .unwrap_err()
            .to_string()
            .contains("must end with a user message"));
        let bad_role = FieldMapping::default().apply(
            "t",
            &object(json!({"input": [{"role": "tool", "content": "x"}], "target": "x"})),
        );
        assert!(bad_role
            .unwrap_err()
            .to_string()
            .contains("message 1 must be"));
    }

    #[test]
    fn a_list_of_strings_is_a_conversation_of_turns_with_a_target_per_turn() {
        let mapping = FieldMapping {
            input: "turns".into(),
            target: Some("reference".into()),
            ..FieldMapping::default()
        };
        let mt_bench = object(json!({
            "question_id": 81,
            "category": "math",
            "turns": ["What is 2+2?", "Now double it."],
            "reference": ["4", ["8", "eight"]]
        }));
        let mapped = mapping.apply("81", &mt_bench).unwrap();
        assert_eq!(
            mapped.input,
            MappedInput::Turns(vec!["What is 2+2?".into(), "Now double it.".into()])
        );
        assert_eq!(mapped.input.turn_count(), 2);
        assert_eq!(mapped.turn_targets, vec![vec!["4"], vec!["8", "eight"]]);
        assert_eq!(mapped.targets, vec!["4"]);
        assert_eq!(mapped.category, "math");

        let mut without_reference = mt_bench.clone();
        without_reference.remove("reference");
        let mapped = mapping.apply("81", &without_reference).unwrap();
        assert_eq!(mapped.turn_targets, vec![Vec::<String>::new(); 2]);

        let mut one_reference = mt_bench.clone();
        one_reference.insert("reference".into(), json!("4"));
        assert_eq!(
            mapping.apply("81", &one_reference).unwrap_err().to_string(),
            "field `reference` must list one entry per turn (2 here): a string, a list of \
             acceptable answers, or null where a turn has no reference"
        );
        let mut mixed = mt_bench.clone();
        mixed.insert(
            "turns".into(),
            json!(["Hi", {"role": "user", "content": "x"}]),
        );
        assert!(mapping
            .apply("81", &mixed)
            .unwrap_err()
            .to_string()
            .contains("turn 2 is not a string"));
        let mut blank = mt_bench.clone();
        blank.insert("turns".into(), json!(["Hi", "  "]));
        assert_eq!(
            mapping.apply("81", &blank).unwrap_err().to_string(),
            "field `turns` turn 2 is blank"
        );
        let mut long = mt_bench;
        long.insert("turns".into(), json!(vec!["x"; MAX_TURNS + 1]));
        long.remove("reference");
        assert!(mapping
            .apply("81", &long)
            .unwrap_err()
            .to_string()
            .contains("a conversation has at most 32"));
    }

    #[test]
    fn mappings_name_distinct_fields() {
        assert!(FieldMapping::default().validate().is_ok());
        let same = FieldMapping {
            choices: Some("target".into()),
            ..FieldMapping::default()
        };
        assert!(same.validate().is_err());
        assert_eq!(choice_letter(25), Some('Z'));
        assert_eq!(choice_letter(26), None);
    }
}
