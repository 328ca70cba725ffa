//! Reading an lm-evaluation-harness task file (its YAML, already parsed into JSON values) into
//! what Arbiter makes of it: the data files of the evaluated split and of the few-shot split,
//! the prompt template, the target field, generation settings, and one grader per filter
//! pipeline; or, for `multiple_choice` tasks, the choices field and the likelihood scoring that
//! picks the answer. Only the declarative part is read. Anything Arbiter cannot express the
//! same way (`!function`, remote datasets, other likelihood output types, computed targets or
//! choices) is refused with the key named, so an imported task never scores differently
//! without saying so.
//!
//! The harness's rules followed here (lm-eval 0.4, `api/task.py`, `api/samplers.py`,
//! `filters/extraction.py`, `api/metrics.py`):
//! - the evaluated split is `test_split`, else `validation_split`; shots come from
//!   `fewshot_split`, else `training_split`, else `validation_split`;
//! - a prompt is the shots, each `doc_to_text + target_delimiter + doc_to_target`, joined and
//!   followed by `fewshot_delimiter`, then the document's `doc_to_text`;
//! - `doc_to_text` and `doc_to_target` name a field or are Jinja templates, rendered with
//!   trailing newlines kept;
//! - without `until`, generation stops at the few-shot delimiter; `max_gen_toks` defaults to
//!   256 and the temperature to 0;
//! - each filter pipeline scores the same answers once more: here each becomes its own eval
//!   over the same requests (served from the cache after the first).

use crate::grading::harness_match::{MatchFolding, RegexFilter};
use crate::grading::instructions::{DEFAULT_IDS_FIELD, DEFAULT_KWARGS_FIELD};
use crate::grading::GraderSpec;
use crate::likelihood::{LikelihoodSpec, Selection};
use crate::prompt::few_shot::MAX_SHOTS;
use crate::sampling::SamplingOptions;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The harness's defaults.
const DEFAULT_MAX_GEN_TOKS: u32 = 256;
const DEFAULT_FEWSHOT_DELIMITER: &str = "\n\n";
const DEFAULT_TARGET_DELIMITER: &str = " ";
/// The seed the harness sends with every generation request, and draws shots with.
pub const HARNESS_SEED: u64 = 1234;

/// The file format of a task's local data files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFormat {
    Json,
    Csv,
    Parquet,
}

/// Where a split's documents are: paths as the task file writes them (relative to it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitFiles {
    pub split: String,
    pub files: Vec<String>,
}

/// The few-shot part of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShotsPlan {
    pub source: SplitFiles,
    pub count: u32,
    /// The harness's `first_n` sampler: the split's first documents, in order. Otherwise its
    /// default sampler draws at random per document; Arbiter draws once, with the seed.
    pub in_order: bool,
    pub seed: u64,
    pub delimiter: String,
    pub target_delimiter: String,
    /// The shots come from the evaluated split itself (a document never sees itself).
    pub same_split: bool,
}

/// One filter pipeline and the grader that scores through it.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredPipeline {
    /// The pipeline's name (`strict-match`), or "" for the task without filters.
    pub name: String,
    pub grader: GraderSpec,
}

/// What Arbiter makes of a task.
#[derive(Clone, Debug, PartialEq)]
pub struct LmEvalTask {
    pub name: String,
    pub format: DataFormat,
    pub evaluated: SplitFiles,
    pub shots: Option<ShotsPlan>,
    /// A Jinja template over the document's fields.
    pub prompt_template: String,
    /// The field shown as an item's input (to raters, in diffs): the first the prompt uses.
    pub input_field: String,
    /// The field holding the reference answer; `None` for IFEval, whose items carry their
    /// instructions instead.
    pub target_field: Option<String>,
    pub max_tokens: u32,
    pub temperature: f64,
    pub repetitions: u32,
    pub sampling: SamplingOptions,
    pub pipelines: Vec<ScoredPipeline>,
    /// `multiple_choice` tasks: the field holding each document's choices, and how they are
    /// scored (the completions API, no generation). `None` for `generate_until`.
    pub choices: Option<(String, LikelihoodSpec)>,
    /// `loglikelihood_rolling` tasks: the prompt template's text is scored whole by rolling
    /// log-likelihood (the completions API, no generation, no grader).
    pub rolling: bool,
    /// What is translated with a difference the user should know of.
    pub notes: Vec<String>,
}

/// Keys read (or knowingly ignored: they change no request and no verdict).
const KNOWN_KEYS: &[&str] = &[
    "task",
    "tag",
    "group",
    "task_alias",
    "dataset_path",
    "dataset_name",
    "dataset_kwargs",
    "test_split",
    "validation_split",
    "training_split",
    "fewshot_split",
    "output_type",
    "doc_to_text",
    "doc_to_target",
    "doc_to_choice",
    "description",
    "target_delimiter",
    "fewshot_delimiter",
    "fewshot_config",
    "num_fewshot",
    "generation_kwargs",
    "filter_list",
    "metric_list",
    "repeats",
    "metadata",
    "should_decontaminate",
    "doc_to_decontamination_query",
];

/// Reads a task. `Err` names the key (with its path, `generation_kwargs.until`) and why.
pub fn read_task(task: &Value) -> Result<LmEvalTask, String> {
    let task = task
        .as_object()
        .ok_or("the task file must be a mapping of keys (task, dataset_path, doc_to_text, …)")?;
    let ifeval = is_ifeval(task);
    let known = |key: &str| KNOWN_KEYS.contains(&key) || (ifeval && key == "process_results");
    if let Some(key) = task.keys().find(|key| !known(key)) {
        return Err(match key.as_str() {
            "include" => "`include`: the task includes another file; import a task file with every key written out".into(),
            "process_docs" | "process_results" | "custom_dataset" => format!(
                "`{key}` runs Python code of the task, which Arbiter does not run; put the processed documents in the data files instead"
            ),
            "use_prompt" => "`use_prompt` takes a prompt from promptsource, which needs the hub; write doc_to_text out".into(),
            _ => format!("`{key}` is not a task key Arbiter reads; remove it or import by hand"),
        });
    }
    let name = string(task, "task")?.ok_or("`task`: the task needs a name")?;
    let output_type = string(task, "output_type")?.unwrap_or_else(|| "generate_until".into());
    let (multiple_choice, rolling) = match output_type.as_str() {
        "generate_until" => (false, false),
        "multiple_choice" => (true, false),
        "loglikelihood_rolling" => (false, true),
        other => {
            return Err(format!(
                "`output_type: {other}` is not imported yet; generate_until, multiple_choice and loglikelihood_rolling tasks are"
            ))
        }
    };
    if task.contains_key("doc_to_choice") && !multiple_choice {
        return Err("`doc_to_choice`: choices in a generated-answer task are read by likelihood tasks; remove it (Arbiter maps choices in its eval form)".into());
    }
    let format = match string(task, "dataset_path")?.as_deref() {
        Some("json") => DataFormat::Json,
        Some("csv") => DataFormat::Csv,
        Some("parquet") => DataFormat::Parquet,
        Some(other) => {
            return Err(format!(
                "`dataset_path: {other}` is a remote dataset, which cannot be fetched here; use json, csv or parquet with local data_files"
            ))
        }
        None => return Err("`dataset_path`: say json, csv or parquet, with local data_files".into()),
    };
    if string(task, "dataset_name")?.is_some_and(|name| !name.is_empty()) {
        return Err(
            "`dataset_name` picks a configuration of a hub dataset; local files have none".into(),
        );
    }
    let splits = data_files(task)?;
    let split_files = |key: &str, split: &str| -> Result<SplitFiles, String> {
        splits
            .get(split)
            .map(|files| SplitFiles {
                split: split.to_string(),
                files: files.clone(),
            })
            .ok_or_else(|| {
                format!(
                    "`{key}: {split}` names a split the data_files do not list (they list {})",
                    splits.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })
    };
    let (evaluated_key, evaluated_split) = match (
        string(task, "test_split")?,
        string(task, "validation_split")?,
    ) {
        (Some(split), _) => ("test_split", split),
        (None, Some(split)) => ("validation_split", split),
        (None, None) => {
            return Err(
                "`test_split`: say which split is evaluated (test_split or validation_split)"
                    .into(),
            )
        }
    };
    let evaluated = split_files(evaluated_key, &evaluated_split)?;
    if rolling {
        return rolling_task(task, name, format, evaluated);
    }

    let mut notes = Vec::new();
    let description = string(task, "description")?.unwrap_or_default();
    let doc_to_text = template(task, "doc_to_text")?;
    // IFEval's target is a placeholder (`doc_to_target: 0`): its items' instructions decide.
    let target_field = if ifeval {
        None
    } else {
        Some(target_field(task)?)
    };
    if !ifeval {
        refuse_computed_aggregations(task)?;
    }
    let target_delimiter =
        string(task, "target_delimiter")?.unwrap_or_else(|| DEFAULT_TARGET_DELIMITER.into());
    let fewshot_delimiter =
        string(task, "fewshot_delimiter")?.unwrap_or_else(|| DEFAULT_FEWSHOT_DELIMITER.into());
    if multiple_choice {
        return multiple_choice_task(
            task,
            MultipleChoiceParts {
                name,
                format,
                evaluated,
                prompt_template: keep_trailing_newline(&format!("{description}{doc_to_text}")),
                input_field: first_field(&doc_to_text)
                    .ok_or("`doc_to_text` uses no field of the documents")?,
                target_field: target_field.ok_or("a multiple_choice task needs `doc_to_target`")?,
                target_delimiter,
            },
        );
    }
    let count = match task.get("num_fewshot") {
        None | Some(Value::Null) => 0,
        Some(value) => value
            .as_u64()
            .filter(|count| *count <= u64::from(MAX_SHOTS))
            .ok_or_else(|| format!("`num_fewshot` must be a whole number from 0 to {MAX_SHOTS}"))?
            as u32,
    };
    let shots = if count == 0 {
        None
    } else {
        if !description.is_empty() {
            return Err("`description` with few-shot: Arbiter's shots are not preceded by a description; drop it or fold it into doc_to_text".into());
        }
        let (key, split) = [
            ("fewshot_split", string(task, "fewshot_split")?),
            ("training_split", string(task, "training_split")?),
            ("validation_split", string(task, "validation_split")?),
        ]
        .into_iter()
        .find_map(|(key, split)| split.map(|split| (key, split)))
        .ok_or("`num_fewshot` needs a split to draw shots from: set fewshot_split")?;
        let (in_order, seed) = sampler(task, &mut notes)?;
        Some(ShotsPlan {
            same_split: split == evaluated.split,
            source: split_files(key, &split)?,
            count,
            in_order,
            seed,
            delimiter: fewshot_delimiter.clone(),
            target_delimiter,
        })
    };
    let input_field =
        first_field(&doc_to_text).ok_or("`doc_to_text` uses no field of the documents")?;
    let prompt_template = keep_trailing_newline(&format!("{description}{doc_to_text}"));
    let generation = generation(task, &fewshot_delimiter)?;
    let repetitions = match task.get("repeats") {
        None => 1,
        Some(value) => value
            .as_u64()
            .filter(|repeats| (1..=1000).contains(repeats))
            .ok_or("`repeats` must be a whole number from 1 to 1000")?
            as u32,
    };
    if ifeval && (repetitions > 1 || shots.is_some()) {
        return Err(
            "`repeats` and `num_fewshot` with IFEval's `process_results`: lm-eval scores \
                    only the first answer of a zero-shot prompt there; import it with neither"
                .into(),
        );
    }
    let pipelines = if ifeval {
        notes.push(
            "IFEval's `process_results` is Arbiter's instructions grader: each item's \
             instruction_id_list and kwargs checked strictly and loosely, with the four \
             accuracies in the report"
                .into(),
        );
        vec![ScoredPipeline {
            name: String::new(),
            grader: GraderSpec::Instructions {
                ids_field: DEFAULT_IDS_FIELD.into(),
                kwargs_field: DEFAULT_KWARGS_FIELD.into(),
            },
        }]
    } else {
        pipelines(task, repetitions, &mut notes)?
    };
    Ok(LmEvalTask {
        name,
        format,
        evaluated,
        shots,
        prompt_template,
        input_field,
        target_field,
        max_tokens: generation.max_tokens,
        temperature: generation.temperature,
        repetitions,
        sampling: generation.sampling,
        pipelines,
        choices: None,
        notes,
        rolling: false,
    })
}

/// What a `multiple_choice` task shares with a generated one, read before the paths part.
struct MultipleChoiceParts {
    name: String,
    format: DataFormat,
    evaluated: SplitFiles,
    prompt_template: String,
    input_field: String,
    target_field: String,
    target_delimiter: String,
}

/// A `multiple_choice` task: each choice scored by its likelihood after the prompt (with the
/// task's `target_delimiter` between them), the answer graded by the chosen letter against the
/// target's index. `metric_list` picks which reading grades (`acc`, `acc_norm` or
/// `acc_bytes`; every one is reported).
fn multiple_choice_task(
    task: &Map<String, Value>,
    parts: MultipleChoiceParts,
) -> Result<LmEvalTask, String> {
    refuse_set(
        task,
        &[
            ("num_fewshot", "few-shot multiple choice shows each shot's answer as its choice's text, which Arbiter's shots do not yet; import it zero-shot"),
            ("generation_kwargs", "a multiple_choice task generates nothing"),
            ("filter_list", "filters read generated answers; a multiple_choice task has none"),
            ("repeats", "likelihood scores are the same every time; a multiple_choice task is scored once"),
        ],
    )?;
    let choices_field = match task.get("doc_to_choice") {
        Some(Value::String(text)) => {
            let text = text.trim();
            let inner = text
                .strip_prefix("{{")
                .and_then(|rest| rest.strip_suffix("}}"))
                .map(str::trim)
                .unwrap_or(text);
            if inner.split('.').all(is_field_name) {
                inner.to_string()
            } else {
                return Err(format!(
                    "`doc_to_choice: {text}` computes the choices; Arbiter reads them from one field (a list), such as `choices` or `choices.text`"
                ));
            }
        }
        Some(Value::Array(_)) => {
            return Err("`doc_to_choice` lists the choices in the task; Arbiter reads them from a field of the documents, so add the list to each document".into())
        }
        _ => return Err("`doc_to_choice` is needed: the field holding each document's choices".into()),
    };
    let select_by = selection(task)?;
    Ok(LmEvalTask {
        choices: Some((
            choices_field,
            LikelihoodSpec {
                target_delimiter: parts.target_delimiter,
                select_by,
            },
        )),
        ..scoring_task(
            parts.name,
            parts.format,
            parts.evaluated,
            (parts.prompt_template, parts.input_field, Some(parts.target_field)),
            "scored by the likelihood of each choice on the completions API, as the harness's local-completions scores it; the endpoint must return prompt logprobs",
        )
    })
}

/// A task scored by likelihood rather than generated: one request of one token at temperature
/// 0, once, under an exact-match grader (which reads the chosen letter; rolling tasks grade
/// nothing). `prompt` is the template with its input and target fields.
fn scoring_task(
    name: String,
    format: DataFormat,
    evaluated: SplitFiles,
    (prompt_template, input_field, target_field): (String, String, Option<String>),
    note: &str,
) -> LmEvalTask {
    LmEvalTask {
        name,
        format,
        evaluated,
        shots: None,
        prompt_template,
        input_field,
        target_field,
        max_tokens: 1,
        temperature: 0.0,
        repetitions: 1,
        sampling: SamplingOptions::default(),
        pipelines: vec![ScoredPipeline {
            name: String::new(),
            grader: GraderSpec::ExactMatch {},
        }],
        choices: None,
        notes: vec![note.to_string()],
        rolling: false,
    }
}

/// A `loglikelihood_rolling` task (perplexity: WikiText, the Pile): each document's
/// `doc_to_target` scored whole by rolling log-likelihood, nothing generated, nothing graded.
/// The harness ignores `doc_to_text` there, and its `description` and shots too (the request
/// is the target alone), so a task that sets them is refused rather than read differently.
/// `metric_list` may name word_perplexity, byte_perplexity and bits_per_byte (all three are
/// reported), aggregated as the harness does.
fn rolling_task(
    task: &Map<String, Value>,
    name: String,
    format: DataFormat,
    evaluated: SplitFiles,
) -> Result<LmEvalTask, String> {
    refuse_set(
        task,
        &[
            (
                "num_fewshot",
                "loglikelihood_rolling scores each document alone",
            ),
            (
                "description",
                "loglikelihood_rolling scores the target alone, without the description",
            ),
            (
                "doc_to_choice",
                "loglikelihood_rolling scores one text per document",
            ),
            (
                "generation_kwargs",
                "loglikelihood_rolling generates nothing",
            ),
            (
                "filter_list",
                "filters read generated answers; loglikelihood_rolling has none",
            ),
            (
                "repeats",
                "rolling scores are the same every time; the task is scored once",
            ),
        ],
    )?;
    if string(task, "doc_to_text")?.is_some_and(|text| !text.trim().is_empty()) {
        return Err(
            "`doc_to_text`: loglikelihood_rolling scores doc_to_target alone (the harness ignores \
             doc_to_text there); leave it empty"
                .into(),
        );
    }
    if matches!(task.get("doc_to_target"), Some(Value::Number(_))) {
        return Err("`doc_to_target` must name the text to score, not a number".into());
    }
    let target = template(task, "doc_to_target")?;
    if target.trim_start().starts_with("!function") {
        return Err(format!(
            "`doc_to_target` is `{}`, which runs Python code of the task (WikiText's \
             detokenizer); put the text to score in the data files and name its field",
            target.trim()
        ));
    }
    let input_field =
        first_field(&target).ok_or("`doc_to_target` uses no field of the documents")?;
    for (at, metric, entry) in metric_list(task)? {
        let aggregation = match metric {
            "word_perplexity" | "byte_perplexity" => "weighted_perplexity",
            "bits_per_byte" => "bits_per_byte",
            other => {
                return Err(format!(
                    "`{at}.metric: {other}` is not reported for loglikelihood_rolling; \
                     word_perplexity, byte_perplexity and bits_per_byte are"
                ))
            }
        };
        match entry.get("aggregation").and_then(Value::as_str) {
            None => {}
            Some(given) if given == aggregation => {}
            Some(given) => {
                return Err(format!(
                    "`{at}.aggregation: {given}`: {metric} is aggregated as `{aggregation}` (the \
                     corpus's summed log-likelihood over its summed units)"
                ))
            }
        }
    }
    Ok(LmEvalTask {
        rolling: true,
        ..scoring_task(
            name,
            format,
            evaluated,
            (keep_trailing_newline(&target), input_field, None),
            "scored by rolling log-likelihood on the completions API, as the harness's \
             local-completions scores it (the server's /tokenize and prompt logprobs on token \
             prompts): word perplexity, byte perplexity and bits per byte in the report, no \
             grader asked",
        )
    })
}

/// Refuses the first of `keys` the task sets to more than its default (0 shots, 1 repeat, an
/// empty text, nothing else), with the reason given.
fn refuse_set(task: &Map<String, Value>, keys: &[(&str, &str)]) -> Result<(), String> {
    for (key, why) in keys {
        let set = match task.get(*key) {
            None | Some(Value::Null) => false,
            Some(Value::String(text)) => !text.is_empty(),
            Some(Value::Number(number)) => {
                number.as_u64() != Some(if *key == "repeats" { 1 } else { 0 })
            }
            Some(_) => true,
        };
        if set {
            return Err(format!("`{key}`: {why}"));
        }
    }
    Ok(())
}

/// The reading that grades a multiple-choice task: the first of `acc`, `acc_norm`,
/// `acc_bytes` in `metric_list` (`acc` without one); other metrics are refused.
fn selection(task: &Map<String, Value>) -> Result<Selection, String> {
    let mut chosen = None;
    for (at, name, metric) in metric_list(task)? {
        let selection = Selection::ALL
            .into_iter()
            .find(|selection| selection.metric() == name)
            .ok_or_else(|| format!("`{at}.metric: {name}` is not reported for multiple choice; acc, acc_norm and acc_bytes are"))?;
        if let Some(aggregation) = metric.get("aggregation").and_then(Value::as_str) {
            if aggregation != "mean" {
                return Err(format!(
                    "`{at}.aggregation: {aggregation}`: Arbiter reports the mean"
                ));
            }
        }
        chosen.get_or_insert(selection);
    }
    Ok(chosen.unwrap_or(Selection::Raw))
}

fn string(task: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match task.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Number(number)) => Ok(Some(number.to_string())),
        Some(_) => Err(format!("`{key}` must be text")),
    }
}

/// `dataset_kwargs.data_files`: one path or a list (the split `train`, as the `datasets`
/// loader names it), or a mapping of split names to a path or a list.
fn data_files(task: &Map<String, Value>) -> Result<BTreeMap<String, Vec<String>>, String> {
    let files = task
        .get("dataset_kwargs")
        .and_then(|kwargs| kwargs.get("data_files"))
        .ok_or("`dataset_kwargs.data_files`: list the local data files (a path, a list, or split: path)")?;
    if let Some(kwargs) = task.get("dataset_kwargs").and_then(Value::as_object) {
        if let Some(key) = kwargs.keys().find(|key| *key != "data_files") {
            return Err(format!(
                "`dataset_kwargs.{key}` is not read; only data_files is"
            ));
        }
    }
    let paths = |key: &str, value: &Value| -> Result<Vec<String>, String> {
        match value {
            Value::String(path) => Ok(vec![path.clone()]),
            Value::Array(paths) if !paths.is_empty() => paths
                .iter()
                .map(|path| {
                    path.as_str()
                        .map(String::from)
                        .ok_or_else(|| format!("`{key}` must list file paths"))
                })
                .collect(),
            _ => Err(format!("`{key}` must be a file path or a list of them")),
        }
    };
    let mut splits = BTreeMap::new();
    match files {
        Value::Object(by_split) => {
            for (split, value) in by_split {
                let key = format!("dataset_kwargs.data_files.{split}");
                splits.insert(split.clone(), paths(&key, value)?);
            }
        }
        other => {
            splits.insert(
                "train".to_string(),
                paths("dataset_kwargs.data_files", other)?,
            );
        }
    }
    for path in splits.values().flatten() {
        if path.contains("://") {
            return Err(format!(
                "`dataset_kwargs.data_files`: `{path}` is remote; only local files import"
            ));
        }
    }
    Ok(splits)
}

/// `doc_to_text` as a Jinja template: a field name becomes `{{ field }}`.
fn template(task: &Map<String, Value>, key: &str) -> Result<String, String> {
    let text = string(task, key)?.ok_or_else(|| format!("`{key}` is needed"))?;
    Ok(if is_field_name(&text) {
        format!("{{{{ {text} }}}}")
    } else {
        text
    })
}

/// The harness renders with `keep_trailing_newline`; Arbiter's templates drop one final
/// newline as Jinja's default does, so one more keeps the text the same.
fn keep_trailing_newline(text: &str) -> String {
    if text.ends_with('\n') {
        format!("{text}\n")
    } else {
        text.to_string()
    }
}

/// The first variable a template prints (`{{ question }}`, `{{ question.strip() }}`).
fn first_field(template: &str) -> Option<String> {
    template.split("{{").skip(1).find_map(|rest| {
        let rest = rest.trim_start_matches('-').trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        is_field_name(&name).then_some(name)
    })
}

fn is_field_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first.is_alphabetic() || first == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// `doc_to_target`: a field name or `{{ field }}`. A computed target has no field to map.
fn target_field(task: &Map<String, Value>) -> Result<String, String> {
    let text = match task.get("doc_to_target") {
        Some(Value::String(text)) => text.trim().to_string(),
        Some(Value::Number(_)) => {
            return Err(
                "`doc_to_target` is a choice index, which needs doc_to_choice (likelihood tasks)"
                    .into(),
            )
        }
        _ => {
            return Err("`doc_to_target` is needed: the field holding the reference answer".into())
        }
    };
    let inner = text
        .strip_prefix("{{")
        .and_then(|rest| rest.strip_suffix("}}"))
        .map(str::trim)
        .unwrap_or(&text);
    if is_field_name(inner) {
        Ok(inner.to_string())
    } else {
        Err(format!(
            "`doc_to_target: {text}` computes the target; Arbiter reads it from one field. Add the computed answer to the data files as a field and name it here"
        ))
    }
}

/// `fewshot_config.sampler`: `first_n` keeps the split's order; the default sampler draws at
/// random, differently for each document, which Arbiter does once for the whole run.
fn sampler(task: &Map<String, Value>, notes: &mut Vec<String>) -> Result<(bool, u64), String> {
    let config = match task.get("fewshot_config") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(config)) => config.clone(),
        Some(_) => return Err("`fewshot_config` must be a mapping".into()),
    };
    if let Some(key) = config
        .keys()
        .find(|key| !["sampler", "samples"].contains(&key.as_str()))
    {
        return Err(format!(
            "`fewshot_config.{key}` is not read; only sampler is"
        ));
    }
    if config.contains_key("samples") {
        return Err("`fewshot_config.samples` lists shots inline (or in Python); put them in a split of the data files".into());
    }
    let sampler = match config.get("sampler") {
        None | Some(Value::Null) => "default",
        Some(Value::String(sampler)) => sampler.as_str(),
        Some(_) => return Err("`fewshot_config.sampler` must name a sampler".into()),
    };
    match sampler {
        "first_n" => Ok((true, HARNESS_SEED)),
        "default" => {
            notes.push(
                "the harness draws shots at random for each document; Arbiter draws one set for the run with seed 1234, so the shots differ from the harness's (use fewshot_config.sampler: first_n for the same shots)"
                    .into(),
            );
            Ok((false, HARNESS_SEED))
        }
        other => Err(format!(
            "`fewshot_config.sampler: {other}` is not a sampler Arbiter follows (first_n or default)"
        )),
    }
}

struct Generation {
    max_tokens: u32,
    temperature: f64,
    sampling: SamplingOptions,
}

/// `generation_kwargs`: `until` → stop sequences, `max_gen_toks` → max tokens, `do_sample:
/// false` → temperature 0, and engine sampling parameters as they are.
fn generation(task: &Map<String, Value>, fewshot_delimiter: &str) -> Result<Generation, String> {
    let kwargs = match task.get("generation_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(kwargs)) => kwargs.clone(),
        Some(_) => return Err("`generation_kwargs` must be a mapping".into()),
    };
    let mut sampling = SamplingOptions::default();
    let mut max_tokens = DEFAULT_MAX_GEN_TOKS;
    let mut temperature = 0.0;
    let mut do_sample = None;
    for (key, value) in &kwargs {
        let path = format!("generation_kwargs.{key}");
        match key.as_str() {
            "until" => {
                sampling.stop = match value {
                    Value::String(stop) => vec![stop.clone()],
                    Value::Array(stops) => stops
                        .iter()
                        .map(|stop| {
                            stop.as_str()
                                .map(String::from)
                                .ok_or_else(|| format!("`{path}` must list strings"))
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(format!("`{path}` must be a string or a list of them")),
                }
            }
            "max_gen_toks" => {
                max_tokens = value
                    .as_u64()
                    .and_then(|tokens| u32::try_from(tokens).ok())
                    .filter(|tokens| *tokens > 0)
                    .ok_or_else(|| format!("`{path}` must be a positive whole number"))?
            }
            "temperature" => {
                temperature = value
                    .as_f64()
                    .filter(|t| (0.0..=2.0).contains(t))
                    .ok_or_else(|| format!("`{path}` must be a number from 0 to 2"))?
            }
            "do_sample" => {
                do_sample = Some(
                    value
                        .as_bool()
                        .ok_or_else(|| format!("`{path}` must be true or false"))?,
                )
            }
            "top_p" => {
                sampling.top_p = Some(
                    value
                        .as_f64()
                        .ok_or_else(|| format!("`{path}` must be a number"))?,
                )
            }
            _ => {
                sampling.extra.insert(key.clone(), value.clone());
            }
        }
    }
    if !kwargs.contains_key("until") {
        sampling.stop = vec![fewshot_delimiter.to_string()];
    }
    if do_sample == Some(false) && temperature > 0.0 {
        return Err(
            "`generation_kwargs`: do_sample is false but the temperature is above 0".into(),
        );
    }
    sampling
        .validate()
        .map_err(|problem| format!("`generation_kwargs`: {problem}"))?;
    Ok(Generation {
        max_tokens,
        temperature,
        sampling,
    })
}

/// One grader per filter pipeline (`filter_list`), from the `exact_match` metric's options.
fn pipelines(
    task: &Map<String, Value>,
    repetitions: u32,
    notes: &mut Vec<String>,
) -> Result<Vec<ScoredPipeline>, String> {
    let folding = folding(task)?;
    let filter_list = match task.get("filter_list") {
        None | Some(Value::Null) => {
            return Ok(vec![ScoredPipeline {
                name: String::new(),
                grader: GraderSpec::HarnessMatch {
                    filter: None,
                    folding,
                },
            }])
        }
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(_) => return Err("`filter_list` must list filter pipelines".into()),
    };
    let mut pipelines = Vec::new();
    for (index, pipeline) in filter_list.iter().enumerate() {
        let at = format!("filter_list[{index}]");
        let name = pipeline
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("`{at}.name` is needed"))?
            .to_string();
        let steps = pipeline
            .get("filter")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("`{at}.filter` must list filter steps"))?;
        let mut regex = None;
        for (step_index, step) in steps.iter().enumerate() {
            let step_at = format!("{at}.filter[{step_index}]");
            match step.get("function").and_then(Value::as_str) {
                Some("regex") if regex.is_none() => {
                    regex = Some(RegexFilter {
                        pattern: step
                            .get("regex_pattern")
                            .and_then(Value::as_str)
                            .ok_or_else(|| format!("`{step_at}.regex_pattern` is needed"))?
                            .to_string(),
                        group_select: match step.get("group_select") {
                            None => 0,
                            Some(value) => value
                                .as_i64()
                                .ok_or_else(|| format!("`{step_at}.group_select` must be a whole number"))?,
                        },
                        fallback: match step.get("fallback") {
                            None => "[invalid]".into(),
                            Some(value) => value
                                .as_str()
                                .ok_or_else(|| format!("`{step_at}.fallback` must be text"))?
                                .to_string(),
                        },
                    })
                }
                Some("take_first") if repetitions > 1 => notes.push(format!(
                    "`{step_at}`: take_first scores only the first of the {repetitions} samples in the harness; Arbiter grades every sample (pass@1 over all of them) and reports pass@k and maj@k"
                )),
                Some("take_first") => {}
                Some("majority_vote") => notes.push(format!(
                    "`{step_at}`: majority_vote is reported as maj@k over the run's {repetitions} samples per item"
                )),
                Some(other) => {
                    return Err(format!(
                        "`{step_at}.function: {other}` is not a filter Arbiter follows (regex, take_first, majority_vote)"
                    ))
                }
                None => return Err(format!("`{step_at}.function` is needed")),
            }
        }
        pipelines.push(ScoredPipeline {
            name,
            grader: GraderSpec::HarnessMatch {
                filter: regex,
                folding: folding.clone(),
            },
        });
    }
    for pipeline in &pipelines {
        pipeline
            .grader
            .validate()
            .map_err(|problem| format!("`filter_list` pipeline `{}`: {problem}", pipeline.name))?;
    }
    Ok(pipelines)
}

/// How the YAML reader passes on the one kind of code it lets through: IFEval's own
/// `process_results` and aggregations, which Arbiter's instructions grader replaces.
const IFEVAL_PROCESS_RESULTS: &str = "!function utils.process_results";
const IFEVAL_INSTRUCTION_AGGREGATION: &str = "!function utils.agg_inst_level_acc";
const IFEVAL_METRICS: [&str; 4] = [
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
];

/// Whether the task is IFEval as lm-eval ships it: its `process_results` with exactly its four
/// metrics, aggregated as it aggregates them (the mean at prompt level, its own pooling at
/// instruction level), and no filters: anything else its Python would do differently.
fn is_ifeval(task: &Map<String, Value>) -> bool {
    let Ok(metrics) = metric_list(task) else {
        return false;
    };
    let as_shipped = |(_, name, metric): &(String, &str, &Value)| {
        let aggregation = match *name {
            "prompt_level_strict_acc" | "prompt_level_loose_acc" => "mean",
            "inst_level_strict_acc" | "inst_level_loose_acc" => IFEVAL_INSTRUCTION_AGGREGATION,
            _ => return false,
        };
        let Some(entry) = metric.as_object() else {
            return false;
        };
        entry.get("aggregation").and_then(Value::as_str) == Some(aggregation)
            && entry
                .keys()
                .all(|key| matches!(key.as_str(), "metric" | "aggregation" | "higher_is_better"))
    };
    let mut names: Vec<&str> = metrics.iter().map(|(_, name, _)| *name).collect();
    names.sort_unstable();
    let mut expected = IFEVAL_METRICS;
    expected.sort_unstable();
    task.get("process_results").and_then(Value::as_str) == Some(IFEVAL_PROCESS_RESULTS)
        && names == expected
        && metrics.iter().all(as_shipped)
        && !task.contains_key("filter_list")
}

/// A metric aggregated by the task's own Python (`!function …`) is refused, by its place.
fn refuse_computed_aggregations(task: &Map<String, Value>) -> Result<(), String> {
    for (at, _, metric) in metric_list(task)? {
        if let Some(code) = metric
            .get("aggregation")
            .and_then(Value::as_str)
            .filter(|text| text.starts_with("!function"))
        {
            return Err(format!(
                "`{at}.aggregation` is `{code}`, which runs Python code of the task; Arbiter \
                 imports only what the YAML declares"
            ));
        }
    }
    Ok(())
}

/// `metric_list`'s entries: (where, for messages; the metric's name; the entry). Empty when
/// the task lists none.
fn metric_list(task: &Map<String, Value>) -> Result<Vec<(String, &str, &Value)>, String> {
    let metrics = match task.get("metric_list") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(metrics)) => metrics,
        Some(_) => return Err("`metric_list` must list metrics".into()),
    };
    metrics
        .iter()
        .enumerate()
        .map(|(index, metric)| {
            let at = format!("metric_list[{index}]");
            let name = metric
                .get("metric")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("`{at}.metric` must name a metric"))?;
            Ok((at, name, metric))
        })
        .collect()
}

/// The `exact_match` metric's options; other metrics are refused.
fn folding(task: &Map<String, Value>) -> Result<MatchFolding, String> {
    let mut folding = None;
    for (at, name, metric) in metric_list(task)? {
        if name != "exact_match" {
            return Err(format!(
                "`{at}.metric: {name}` is not a metric Arbiter computes the harness's way; only exact_match imports"
            ));
        }
        let mut options = MatchFolding::default();
        for (key, value) in metric.as_object().into_iter().flatten() {
            let flag = || {
                value
                    .as_bool()
                    .ok_or_else(|| format!("`{at}.{key}` must be true or false"))
            };
            match key.as_str() {
                "metric" | "aggregation" | "higher_is_better" => {}
                "ignore_case" => options.ignore_case = flag()?,
                "ignore_punctuation" => options.ignore_punctuation = flag()?,
                "ignore_numbers" => options.ignore_numbers = flag()?,
                "regexes_to_ignore" => {
                    options.regexes_to_ignore = value
                        .as_array()
                        .ok_or_else(|| format!("`{at}.regexes_to_ignore` must list patterns"))?
                        .iter()
                        .map(|pattern| {
                            pattern.as_str().map(String::from).ok_or_else(|| {
                                format!("`{at}.regexes_to_ignore` must list patterns")
                            })
                        })
                        .collect::<Result<_, _>>()?
                }
                other => return Err(format!("`{at}.{other}` is not an exact_match option")),
            }
        }
        if let Some(aggregation) = metric.get("aggregation").and_then(Value::as_str) {
            if aggregation != "mean" {
                return Err(format!(
                    "`{at}.aggregation: {aggregation}`: Arbiter reports the mean (pass rate)"
                ));
            }
        }
        folding = Some(options);
    }
    Ok(folding.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A GSM8K-style task as the harness writes it, with local files.
    fn gsm8k_like() -> Value {
        json!({
            "task": "arith",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": "test.jsonl", "train": ["train.jsonl"]}},
            "output_type": "generate_until",
            "test_split": "test",
            "fewshot_split": "train",
            "num_fewshot": 3,
            "fewshot_config": {"sampler": "first_n"},
            "doc_to_text": "Question: {{question}}\nAnswer:",
            "doc_to_target": "{{answer}}",
            "generation_kwargs": {"until": ["\n\n", "Question:"], "do_sample": false, "temperature": 0.0, "max_gen_toks": 32},
            "filter_list": [
                {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"}, {"function": "take_first"}]},
                {"name": "flexible-extract", "filter": [{"function": "regex", "group_select": -1, "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"}, {"function": "take_first"}]}
            ],
            "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": true, "ignore_case": true, "regexes_to_ignore": [",", "\\$"]}],
            "metadata": {"version": 3.0}
        })
    }

    #[test]
    fn a_declarative_task_reads_whole() {
        let task = read_task(&gsm8k_like()).unwrap();
        assert_eq!(task.name, "arith");
        assert_eq!(task.format, DataFormat::Json);
        assert_eq!(
            task.evaluated,
            SplitFiles {
                split: "test".into(),
                files: vec!["test.jsonl".into()]
            }
        );
        let shots = task.shots.clone().unwrap();
        assert_eq!(shots.source.files, vec!["train.jsonl"]);
        assert!(shots.in_order && !shots.same_split);
        assert_eq!(
            (
                shots.count,
                shots.delimiter.as_str(),
                shots.target_delimiter.as_str()
            ),
            (3, "\n\n", " ")
        );
        assert_eq!(task.prompt_template, "Question: {{question}}\nAnswer:");
        assert_eq!(task.input_field, "question");
        assert_eq!(task.target_field.as_deref(), Some("answer"));
        assert_eq!(
            (task.max_tokens, task.temperature, task.repetitions),
            (32, 0.0, 1)
        );
        assert_eq!(task.sampling.stop, vec!["\n\n", "Question:"]);
        assert!(task.sampling.extra.is_empty(), "do_sample is not sent");
        let names: Vec<&str> = task.pipelines.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["strict-match", "flexible-extract"]);
        let GraderSpec::HarnessMatch { filter, folding } = &task.pipelines[1].grader else {
            panic!("{:?}", task.pipelines[1]);
        };
        assert_eq!(filter.as_ref().unwrap().group_select, -1);
        assert!(folding.ignore_case && folding.regexes_to_ignore.len() == 2);
        assert!(task.notes.is_empty());
        // With repeats, the harness scores the first sample only: said in a note.
        let mut repeated = gsm8k_like();
        repeated["repeats"] = json!(4);
        let task = read_task(&repeated).unwrap();
        assert_eq!(task.repetitions, 4);
        assert!(
            task.notes.iter().any(|note| note.contains("take_first")),
            "{:?}",
            task.notes
        );
    }

    #[test]
    fn defaults_follow_the_harness() {
        let mut doc = gsm8k_like();
        let task = doc.as_object_mut().unwrap();
        for key in [
            "generation_kwargs",
            "filter_list",
            "metric_list",
            "fewshot_config",
            "fewshot_split",
        ] {
            task.remove(key);
        }
        task.insert("training_split".into(), json!("train"));
        task.insert("doc_to_text".into(), json!("question"));
        task.insert("doc_to_target".into(), json!("answer"));
        let task = read_task(&doc).unwrap();
        assert_eq!(task.prompt_template, "{{ question }}");
        assert_eq!(task.target_field.as_deref(), Some("answer"));
        assert_eq!(task.max_tokens, 256);
        assert_eq!(
            task.sampling.stop,
            vec!["\n\n"],
            "until defaults to the shot delimiter"
        );
        assert_eq!(task.pipelines.len(), 1);
        let shots = task.shots.unwrap();
        assert!(!shots.in_order && shots.seed == HARNESS_SEED);
        assert_eq!(task.notes.len(), 1, "the random sampler is noted");
    }

    /// An MMLU-style task as the harness writes it, with local files.
    fn mmlu_like() -> Value {
        json!({
            "task": "mmlu_local",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": "test.jsonl"}},
            "test_split": "test",
            "output_type": "multiple_choice",
            "description": "The following are multiple choice questions.\n\n",
            "doc_to_text": "{{question.strip()}}\nAnswer:",
            "doc_to_choice": "{{choices}}",
            "doc_to_target": "answer",
            "metric_list": [{"metric": "acc_norm", "aggregation": "mean", "higher_is_better": true},
                            {"metric": "acc", "aggregation": "mean"}],
        })
    }

    fn wikitext_like() -> Value {
        json!({
            "task": "prose_local",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": "test.jsonl"}},
            "test_split": "test",
            "output_type": "loglikelihood_rolling",
            "doc_to_text": "",
            "doc_to_target": "{{text}}",
            "metric_list": [
                {"metric": "word_perplexity"},
                {"metric": "byte_perplexity", "aggregation": "weighted_perplexity"},
                {"metric": "bits_per_byte", "aggregation": "bits_per_byte", "higher_is_better": false},
            ],
        })
    }

    #[test]
    fn rolling_tasks_score_their_target_whole() {
        let task = read_task(&wikitext_like()).unwrap();
        assert!(task.rolling);
        assert_eq!(task.prompt_template, "{{text}}");
        assert_eq!(
            (task.input_field.as_str(), task.target_field),
            ("text", None)
        );
        assert!(task.choices.is_none() && task.shots.is_none());
        let mut field = wikitext_like();
        field["doc_to_target"] = json!("page");
        assert_eq!(read_task(&field).unwrap().prompt_template, "{{ page }}");
        let refused = |key: &str, value: Value| {
            let mut doc = wikitext_like();
            doc.as_object_mut().unwrap().insert(key.into(), value);
            read_task(&doc).unwrap_err()
        };
        assert!(refused("doc_to_text", json!("{{title}}")).contains("`doc_to_text`"));
        assert!(refused("num_fewshot", json!(2)).contains("`num_fewshot`"));
        assert!(refused("description", json!("Text:")).contains("`description`"));
        assert!(refused("metric_list", json!([{"metric": "acc"}]))
            .contains("`metric_list[0].metric: acc`"));
        assert!(refused(
            "metric_list",
            json!([{"metric": "bits_per_byte", "aggregation": "mean"}])
        )
        .contains("aggregated as `bits_per_byte`"));
        assert!(refused(
            "doc_to_target",
            json!("!function preprocess_wikitext.wikitext_detokenizer")
        )
        .contains("runs Python code"));
        assert!(refused(
            "process_results",
            json!("!function preprocess_wikitext.process_results")
        )
        .contains("`process_results`"));
    }

    #[test]
    fn multiple_choice_tasks_are_scored_by_likelihood() {
        let task = read_task(&mmlu_like()).unwrap();
        let (field, likelihood) = task.choices.clone().unwrap();
        assert_eq!(field, "choices");
        assert_eq!(likelihood.target_delimiter, " ");
        assert_eq!(
            likelihood.select_by,
            Selection::Chars,
            "the first metric listed grades"
        );
        assert_eq!(task.target_field.as_deref(), Some("answer"));
        assert_eq!(task.input_field, "question");
        assert_eq!(
            task.prompt_template,
            "The following are multiple choice questions.\n\n{{question.strip()}}\nAnswer:"
        );
        assert_eq!(task.pipelines[0].grader, GraderSpec::ExactMatch {});
        assert!(task.shots.is_none());
        // A dotted path reads a nested list (ARC's `choices.text`).
        let mut arc = mmlu_like();
        arc["doc_to_choice"] = json!("{{choices.text}}");
        assert_eq!(read_task(&arc).unwrap().choices.unwrap().0, "choices.text");
        let refused = |key: &str, value: Value| {
            let mut doc = mmlu_like();
            doc.as_object_mut().unwrap().insert(key.into(), value);
            read_task(&doc).unwrap_err()
        };
        assert!(refused("doc_to_choice", json!(["A", "B", "C", "D"])).contains("add the list"));
        assert!(refused("doc_to_choice", json!("{{choices.label}} + x")).contains("computes"));
        assert!(refused("num_fewshot", json!(5)).contains("zero-shot"));
        assert!(refused("metric_list", json!([{"metric": "brier_score"}])).contains("brier_score"));
        assert!(read_task(&{
            let mut zero = mmlu_like();
            zero["num_fewshot"] = json!(0);
            zero
        })
        .is_ok());
    }

    /// lm-eval's `ifeval.yaml` as the YAML reader passes it on, with its data made local.
    fn ifeval_like() -> Value {
        json!({
            "task": "ifeval",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"train": "input_data.jsonl"}},
            "output_type": "generate_until",
            "test_split": "train",
            "num_fewshot": 0,
            "doc_to_text": "prompt",
            "doc_to_target": 0,
            "generation_kwargs": {"until": [], "do_sample": false, "temperature": 0.0, "max_gen_toks": 1280},
            "process_results": "!function utils.process_results",
            "metric_list": [
                {"metric": "prompt_level_strict_acc", "aggregation": "mean", "higher_is_better": true},
                {"metric": "inst_level_strict_acc", "aggregation": "!function utils.agg_inst_level_acc", "higher_is_better": true},
                {"metric": "prompt_level_loose_acc", "aggregation": "mean", "higher_is_better": true},
                {"metric": "inst_level_loose_acc", "aggregation": "!function utils.agg_inst_level_acc", "higher_is_better": true}
            ],
            "metadata": {"version": 4.0}
        })
    }

    #[test]
    fn ifeval_imports_as_the_instructions_grader() {
        let task = read_task(&ifeval_like()).unwrap();
        assert_eq!(task.target_field, None);
        assert_eq!(task.input_field, "prompt");
        assert_eq!(task.max_tokens, 1280);
        assert_eq!(
            task.pipelines,
            vec![ScoredPipeline {
                name: String::new(),
                grader: GraderSpec::Instructions {
                    ids_field: "instruction_id_list".into(),
                    kwargs_field: "kwargs".into(),
                },
            }]
        );
        assert!(task
            .notes
            .iter()
            .any(|note| note.contains("instructions grader")));
        // Another task's Python scoring, or IFEval's without its four metrics, is refused.
        let mut other = ifeval_like();
        other["process_results"] = json!("!function utils.my_scorer");
        assert!(read_task(&other).unwrap_err().contains("`process_results`"));
        let mut fewer = ifeval_like();
        fewer["metric_list"].as_array_mut().unwrap().truncate(2);
        assert!(read_task(&fewer).unwrap_err().contains("`process_results`"));
        // Its aggregations as shipped, no other keys, no filters, one zero-shot answer.
        let mut median = ifeval_like();
        median["metric_list"][0]["aggregation"] = json!("median");
        assert!(read_task(&median)
            .unwrap_err()
            .contains("`process_results`"));
        let mut extra = ifeval_like();
        extra["metric_list"][1]["kwargs"] = json!({"x": 1});
        assert!(read_task(&extra).unwrap_err().contains("`process_results`"));
        let mut filtered = ifeval_like();
        filtered["filter_list"] = json!([{"name": "x", "filter": [{"function": "take_first"}]}]);
        assert!(read_task(&filtered)
            .unwrap_err()
            .contains("`process_results`"));
        let mut repeated = ifeval_like();
        repeated["repeats"] = json!(3);
        assert!(read_task(&repeated).unwrap_err().contains("`repeats`"));
        // A computed aggregation outside IFEval is refused by its place.
        let mut gsm = gsm8k_like();
        gsm["metric_list"] =
            json!([{"metric": "exact_match", "aggregation": "!function utils.mine"}]);
        assert!(read_task(&gsm)
            .unwrap_err()
            .contains("`metric_list[0].aggregation` is `!function utils.mine`"));
    }

    #[test]
    fn what_cannot_be_expressed_is_refused_with_its_key() {
        let refused = |key: &str, value: Value| {
            let mut doc = gsm8k_like();
            doc.as_object_mut().unwrap().insert(key.into(), value);
            read_task(&doc).unwrap_err()
        };
        assert!(
            refused("process_docs", json!("!function utils.process_docs"))
                .contains("`process_docs`")
        );
        assert!(refused("dataset_path", json!("gsm8k")).contains("remote dataset"));
        assert!(refused("output_type", json!("loglikelihood")).contains("not imported yet"));
        assert!(
            refused("doc_to_target", json!("{{answer.split('####')[-1]}}"))
                .contains("`doc_to_target")
        );
        assert!(refused("doc_to_choice", json!(["A", "B"])).contains("`doc_to_choice`"));
        assert!(refused("num_fewshot", json!(500)).contains("`num_fewshot`"));
        assert!(refused("test_split", json!("dev")).contains("`test_split: dev`"));
        assert!(refused("fewshot_config", json!({"sampler": "balanced"})).contains("balanced"));
        assert!(
            refused("fewshot_config", json!({"sampler": 3})).contains("`fewshot_config.sampler`")
        );
        assert!(refused("metric_list", json!([{"metric": "bleu"}]))
            .contains("metric_list[0].metric: bleu"));
        assert!(refused(
            "filter_list",
            json!([{"name": "x", "filter": [{"function": "lowercase"}]}])
        )
        .contains("filter_list[0].filter[0].function: lowercase"));
        assert!(refused(
            "filter_list",
            json!([{"name": "x", "filter": [{"function": "regex", "regex_pattern": "(?<=a)b"}]}])
        )
        .contains("pipeline `x`"));
        assert!(refused(
            "dataset_kwargs",
            json!({"data_files": "https://example.com/x.jsonl"})
        )
        .contains("remote"));
        assert!(refused("include", json!("_default.yaml")).contains("`include`"));
        assert!(
            refused("generation_kwargs", json!({"until": 5})).contains("`generation_kwargs.until`")
        );
        assert!(refused("description", json!("Solve:\n")).contains("`description`"));
    }

    #[test]
    fn a_trailing_newline_survives_the_template() {
        let mut doc = gsm8k_like();
        doc["doc_to_text"] = json!("Q: {{question}}\n");
        doc["num_fewshot"] = json!(0);
        doc["description"] = json!("Solve these.\n\n");
        let task = read_task(&doc).unwrap();
        assert_eq!(task.prompt_template, "Solve these.\n\nQ: {{question}}\n\n");
        assert!(task.shots.is_none());
    }
}
