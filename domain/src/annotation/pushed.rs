//! Items pushed from outside into a labelling queue (`POST /api/v1/annotation/items`):
//! production traces or another tool's outputs, each an input with one output (labelled pass
//! or fail, or by a rubric) or two (compared side by side), and the pusher's metadata.
//!
//! An item is named by the SHA-256 of its content, so pushing it again (a retried request, an
//! exporter that runs twice) finds the item already queued instead of asking raters twice. A
//! pair's sides are drawn from that hash: fixed for the item, so a retry cannot redraw them,
//! yet spread evenly over items, so raters do not always see the first output as A.
//!
//! Pure: no I/O.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::annotation::decided::{DecidedLabel, PushedOrigin};
use crate::annotation::preference::Preference;
use crate::prompt::{describe_bytes, MAX_PROMPT_BYTES};

/// Most items one push may carry: all are queued in one transaction, or none.
pub const MAX_ITEMS_PER_PUSH: usize = 1_000;
/// Longest metadata object, as JSON.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// What the lead's queue report calls the items pushed from outside, all queues together.
pub const PUSHED_QUEUE: &str = "pushed items";
/// Longest queue name.
pub const MAX_QUEUE_NAME_CHARS: usize = 100;

/// One item as pushed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushedItem {
    /// What the model was asked.
    pub input: String,
    /// The model's output, or two outputs to compare.
    pub outputs: Vec<String>,
    /// A reference answer shown to raters, if any.
    #[serde(default)]
    pub target: String,
    /// The pusher's own fields (a trace id, a model name…), returned with the labels.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl PushedItem {
    /// Checks the item; the message names what is wrong (the caller adds which item).
    pub fn check(&self) -> Result<(), String> {
        match self.outputs.len() {
            1 | 2 => {}
            n => {
                return Err(format!(
                    "has {n} outputs; give one output to label, or two to compare"
                ))
            }
        }
        if self.input.trim().is_empty() {
            return Err("has an empty input".into());
        }
        let texts = [("input", &self.input), ("target", &self.target)]
            .into_iter()
            .chain(self.outputs.iter().map(|output| ("output", output)));
        for (what, text) in texts {
            if text.len() > MAX_PROMPT_BYTES {
                return Err(format!(
                    "has an {what} of {}; the limit is {}",
                    describe_bytes(text.len()),
                    describe_bytes(MAX_PROMPT_BYTES)
                ));
            }
        }
        let mut texts = [&self.input, &self.target].into_iter().chain(&self.outputs);
        if texts.any(|text| text.contains('\0')) {
            // PostgreSQL cannot store it; refused alike on both stores.
            return Err("holds a NUL character".into());
        }
        if self.outputs.iter().any(|output| output.trim().is_empty()) {
            return Err("has an empty output".into());
        }
        if !self.metadata.is_object() {
            return Err("has metadata that is not a JSON object".into());
        }
        let metadata_bytes = self.metadata.to_string().len();
        if metadata_bytes > MAX_METADATA_BYTES {
            return Err(format!(
                "has metadata of {}; the limit is {}",
                describe_bytes(metadata_bytes),
                describe_bytes(MAX_METADATA_BYTES)
            ));
        }
        Ok(())
    }

    /// Whether raters compare two outputs.
    pub fn is_pair(&self) -> bool {
        self.outputs.len() == 2
    }

    /// The SHA-256 (hex) of the item's content: input, outputs in order, target and metadata.
    /// Each part is length-prefixed, so no two different items share the bytes hashed; the
    /// metadata is hashed as serde_json writes it, with its keys in order (this crate does not
    /// enable `preserve_order`), so key order as sent does not matter.
    pub fn content_hash(&self) -> String {
        let mut hasher = Sha256::new();
        let metadata = self.metadata.to_string();
        let parts = [self.input.as_str(), self.target.as_str(), metadata.as_str()]
            .into_iter()
            .chain(self.outputs.iter().map(String::as_str));
        hasher.update((self.outputs.len() as u64).to_le_bytes());
        for part in parts {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        format!("{:x}", hasher.finalize())
    }
}

/// Whether a pair's first output is shown on the left (as A), drawn from its content hash.
pub fn first_on_left(content_hash: &str) -> bool {
    content_hash
        .as_bytes()
        .first()
        .and_then(|digit| (*digit as char).to_digit(16))
        .is_none_or(|digit| digit % 2 == 0)
}

/// The output a pair's raters preferred, in the order pushed (0 the first, 1 the second);
/// `None` for a tie, both bad, or a split.
pub fn preferred_output(choice: Preference, first_on_left: bool) -> Option<usize> {
    let left = usize::from(!first_on_left);
    match choice {
        Preference::A => Some(left),
        Preference::B => Some(1 - left),
        Preference::Tie | Preference::BothBad => None,
    }
}

/// Checks a queue's name: 1 to 100 characters of letters, digits, `-`, `_`, `.` and `/`.
pub fn check_queue_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_QUEUE_NAME_CHARS {
        return Err(format!(
            "the queue name must be 1 to {MAX_QUEUE_NAME_CHARS} characters"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
    {
        return Err(format!(
            "the queue name `{name}` holds `{bad}`; use letters, digits, `-`, `_`, `.` and `/`"
        ));
    }
    Ok(())
}

/// What a push did with one item, in the order pushed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PushReceipt {
    pub task_id: i64,
    pub content_hash: String,
    /// `false`: the same content was in the queue already; nothing was added.
    pub created: bool,
}

/// A pushed item read back: where it stands, its outcome once decided, and every label.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PushedRecord {
    pub task_id: i64,
    /// `pushed` (one output) or `pair` (two).
    pub kind: String,
    #[serde(flatten)]
    pub origin: PushedOrigin,
    /// `open` (waiting for labels), `awaiting_review` (the raters split; a reviewer decides)
    /// or `decided`.
    pub state: String,
    pub labels_needed: i64,
    pub labels_done: i64,
    pub pushed_at: i64,
    pub decided_at: Option<i64>,
    /// `pass` or `fail` as the humans decided a single output.
    pub verdict: Option<String>,
    /// A rubric item's value per dimension, or a pair's `{"choice": …}` (or `{"split": true}`).
    pub consensus: Option<serde_json::Value>,
    pub rubric: Option<String>,
    pub rubric_version: Option<i64>,
    pub labels: Vec<DecidedLabel>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(outputs: &[&str]) -> PushedItem {
        PushedItem {
            input: "What is 2+2?".into(),
            outputs: outputs.iter().map(|text| text.to_string()).collect(),
            target: String::new(),
            metadata: json!({"trace": "t-1", "model": "m"}),
        }
    }

    #[test]
    fn one_or_two_nonempty_outputs_are_accepted() {
        assert!(item(&["4"]).check().is_ok());
        assert!(item(&["4", "5"]).check().is_ok());
        assert!(item(&[]).check().unwrap_err().contains("0 outputs"));
        assert!(item(&["1", "2", "3"])
            .check()
            .unwrap_err()
            .contains("3 outputs"));
        assert!(item(&["4", "  "])
            .check()
            .unwrap_err()
            .contains("empty output"));
        let mut no_input = item(&["4"]);
        no_input.input = " ".into();
        assert!(no_input.check().unwrap_err().contains("empty input"));
    }

    #[test]
    fn metadata_must_be_a_small_object() {
        let mut listed = item(&["4"]);
        listed.metadata = json!([1, 2]);
        assert!(listed.check().unwrap_err().contains("not a JSON object"));
        let mut large = item(&["4"]);
        large.metadata = json!({"blob": "x".repeat(MAX_METADATA_BYTES)});
        assert!(large.check().unwrap_err().contains("metadata of"));
    }

    #[test]
    fn the_hash_ignores_key_order_but_not_content() {
        let a: PushedItem = serde_json::from_str(
            r#"{"input": "q", "outputs": ["x"], "metadata": {"a": 1, "b": 2}}"#,
        )
        .unwrap();
        let b: PushedItem = serde_json::from_str(
            r#"{"metadata": {"b": 2, "a": 1}, "outputs": ["x"], "input": "q"}"#,
        )
        .unwrap();
        assert_eq!(a.content_hash(), b.content_hash());
        let mut other = a.clone();
        other.outputs = vec!["y".into()];
        assert_ne!(a.content_hash(), other.content_hash());
        // Moving text between parts changes the hash (parts are length-prefixed).
        let (mut left, mut right) = (a.clone(), a.clone());
        left.input = "qx".into();
        left.outputs = vec![String::new()];
        right.input = "q".into();
        right.outputs = vec!["x".into()];
        assert_ne!(left.content_hash(), right.content_hash());
        // The outputs' order matters: it says which output is the first.
        let (ab, ba) = (item(&["4", "5"]), item(&["5", "4"]));
        assert_ne!(ab.content_hash(), ba.content_hash());
    }

    #[test]
    fn sides_are_spread_over_items_and_choices_map_back() {
        let lefts = (0..200)
            .map(|n| {
                let mut pair = item(&["4", "5"]);
                pair.input = format!("question {n}");
                first_on_left(&pair.content_hash())
            })
            .filter(|left| *left)
            .count();
        assert!(
            (70..=130).contains(&lefts),
            "first on the left {lefts} of 200"
        );
        assert_eq!(preferred_output(Preference::A, true), Some(0));
        assert_eq!(preferred_output(Preference::A, false), Some(1));
        assert_eq!(preferred_output(Preference::B, false), Some(0));
        assert_eq!(preferred_output(Preference::Tie, true), None);
    }

    #[test]
    fn queue_names_are_checked() {
        assert!(check_queue_name("support/prod-traces_v2.1").is_ok());
        assert!(check_queue_name("").is_err());
        assert!(check_queue_name("has space").unwrap_err().contains("` `"));
        assert!(check_queue_name(&"q".repeat(101)).is_err());
    }
}
