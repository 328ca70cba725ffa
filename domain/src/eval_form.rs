//! The eval form as a researcher fills it in: every optional field as text ('' is the
//! default), shared by the page and the server function that parses it (the engine's
//! `eval_form`), so a problem is named by its field.

use serde::{Deserialize, Serialize};

/// The optional fields of the eval form, as typed ('' everywhere means the default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalFormText {
    /// '' (detect), `jinja` or `placeholder`.
    pub template_syntax: String,
    pub system_prompt: String,
    /// The conversation as a message list instead of the template: a JSON array of
    /// `{"role", "content"}` templates ('' for none).
    pub messages: String,
    /// '' or `chat`, or `completions`.
    pub api: String,
    pub input_field: String,
    pub target_field: String,
    pub choices_field: String,
    pub category_field: String,
    /// The field holding each item's images ('' for none).
    pub images_field: String,
    /// Comma-separated.
    pub metadata_fields: String,
    /// '' keeps the items' order; a number shuffles choices with that seed.
    pub shuffle_seed: String,
    /// One stop sequence per line (`\n` written as the two characters).
    pub stop: String,
    pub top_p: String,
    /// A JSON object of engine sampling parameters.
    pub extra: String,
    /// '' for none, else the exemplar dataset's id.
    pub few_shot_dataset: String,
    pub few_shot_count: String,
    pub few_shot_seed: String,
    /// '' or `text`, or `turns`.
    pub few_shot_style: String,
    /// '' or `generate`, `likelihood` (score each choice), or `rolling` (score the whole text).
    pub scoring: String,
    /// Rolling: lm-eval's `max_length` ('' is 2048), the stride ('' is `max_length - 2`) and the
    /// prefix token id ('' reads it from the server).
    pub rolling_max_length: String,
    pub rolling_stride: String,
    pub rolling_prefix_token: String,
    /// Likelihood: put between the prompt and each choice ('' is one space; `\s` a space,
    /// `\n` a newline).
    pub target_delimiter: String,
    /// Likelihood: `acc` (the default), `acc_norm` or `acc_bytes`.
    pub select_by: String,
    /// A training corpus's n-gram index on the server ('' for no contamination check), and
    /// whether targets are checked too (any text: yes).
    pub contamination_index: String,
    pub contamination_targets: String,
    /// The grader picked from the list: '' (exact match), a kind, or `json` for the raw spec.
    pub grader_kind: String,
    /// `numeric`: relative tolerance.
    pub grader_tolerance: String,
    /// `regex_match`: the pattern.
    pub grader_pattern: String,
    /// `contains`, `not_contains`: one string per line.
    pub grader_strings: String,
    /// `length`: most words.
    pub grader_max_words: String,
    /// `code_tests`: the fields holding the tests, the function under test ('' for none) and
    /// the code put before the answer ('' for none), and `whole` when the answer is code as it
    /// is (a completion) rather than a fenced block.
    pub grader_tests_field: String,
    pub grader_entry_point_field: String,
    pub grader_prefix_field: String,
    pub grader_extract: String,
}
