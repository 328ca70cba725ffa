//! Importing an lm-evaluation-harness task file: its local data files become dataset
//! revisions and each of its filter pipelines an eval, prompts checked against every document
//! before anything is stored.

use super::{check_documents, refuse_taken_names, stream, upload, ImportOptions, Imported};
use crate::catalog::{self, EvalForm, EvalOptions};
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::dataset::{DatasetError, DatasetFormat, ItemSink};
use arbiter_domain::fields::FieldMapping;
use arbiter_domain::grading::GraderSpec;
use arbiter_domain::ids::{DatasetId, UserId};
use arbiter_domain::import::lm_eval::{read_task, DataFormat, LmEvalTask, SplitFiles};
use arbiter_domain::prompt::few_shot::{ExemplarDraw, Exemplars, FewShotSpec, FewShotStyle};
use arbiter_domain::prompt::TemplateSyntax;
use arbiter_store::Store;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Largest task file read (they are a few kilobytes).
const MAX_TASK_FILE_BYTES: u64 = 1024 * 1024;

/// Imports the task file at `path` (its data files are read relative to it).
pub async fn import_lm_eval_task(
    store: &dyn Store,
    path: &Path,
    options: &ImportOptions,
    created_by: Option<UserId>,
) -> ServiceResult<Imported> {
    let task = read_task_file(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let name = match options.name.trim() {
        "" => task.name.clone(),
        name => name.to_string(),
    };
    let evaluated_file = one_file(base, &task.evaluated)?;
    let shots_file = match &task.shots {
        Some(shots) if !shots.same_split => Some(one_file(base, &shots.source)?),
        _ => None,
    };
    let shots_name = task
        .shots
        .as_ref()
        .map(|shots| format!("{name} ({} split)", shots.source.split));
    let eval_names: Vec<String> = task
        .pipelines
        .iter()
        .map(
            |pipeline| match (task.pipelines.len(), pipeline.name.as_str()) {
                (1, _) | (_, "") => name.clone(),
                (_, pipeline) => format!("{name} ({pipeline})"),
            },
        )
        .collect();
    let mut dataset_names = vec![name.clone()];
    dataset_names.extend(shots_name.clone().filter(|_| shots_file.is_some()));
    refuse_taken_names(store, &eval_names, &dataset_names).await?;

    // Everything is checked before anything is stored: shots drawn from their file, every
    // document rendered with them.
    let placeholder = |dataset: i64| DatasetId(dataset);
    let forms: Vec<EvalForm> = task
        .pipelines
        .iter()
        .zip(&eval_names)
        .map(|(pipeline, eval_name)| {
            eval_form(
                &task,
                options,
                eval_name,
                &pipeline.grader,
                placeholder(1),
                placeholder(2),
            )
        })
        .collect::<ServiceResult<_>>()?;
    let specs = forms
        .iter()
        .map(catalog::eval_spec)
        .collect::<ServiceResult<Vec<_>>>()?;
    let Some(first) = specs.first() else {
        return Err(ServiceError::Invalid("the task scores nothing".into()));
    };
    let prompt = first.prompt.clone();
    let format = file_format(task.format, &evaluated_file);
    let exemplars = match (&task.shots, &shots_file) {
        (Some(_), Some(file)) => Some(draw_from_file(
            file,
            file_format(task.format, file),
            &prompt,
            placeholder(2),
        )?),
        (Some(_), None) => Some(draw_from_file(
            &evaluated_file,
            format,
            &prompt,
            placeholder(1),
        )?),
        (None, _) => None,
    };
    let renderer = crate::prompts::renderer(&prompt, exemplars.as_ref(), placeholder(1))?;
    let graders: Vec<GraderSpec> = task
        .pipelines
        .iter()
        .map(|pipeline| pipeline.grader.clone())
        .collect();
    check_documents(&evaluated_file, format, renderer, &graders)?;

    let mut imported = Imported {
        datasets: Vec::new(),
        evals: Vec::new(),
        notes: task.notes.clone(),
    };
    // Only a store failure can stop what follows half-way.
    let evaluated = upload(
        store,
        &name,
        &evaluated_file,
        format,
        created_by,
        &mut imported.datasets,
    )
    .await?;
    let shots_dataset = match (&shots_file, &shots_name) {
        (Some(file), Some(shots_name)) => {
            upload(
                store,
                shots_name,
                file,
                file_format(task.format, file),
                created_by,
                &mut imported.datasets,
            )
            .await?
        }
        _ => evaluated,
    };
    for (pipeline, eval_name) in task.pipelines.iter().zip(&eval_names) {
        let form = eval_form(
            &task,
            options,
            eval_name,
            &pipeline.grader,
            evaluated,
            shots_dataset,
        )?;
        let id = catalog::define_eval(store, &form, created_by).await?;
        imported.evals.push((id, eval_name.clone()));
    }
    Ok(imported)
}

/// Reads and parses the YAML, refusing a tagged value (`!function …`) by its key.
fn read_task_file(path: &Path) -> ServiceResult<LmEvalTask> {
    let shown = path.display();
    let unreadable =
        |err: std::io::Error| ServiceError::Invalid(format!("{shown} could not be read: {err}"));
    let size = std::fs::metadata(path).map_err(unreadable)?.len();
    if size > MAX_TASK_FILE_BYTES {
        return Err(ServiceError::Invalid(format!(
            "{shown} is {size} bytes; a task file is at most {MAX_TASK_FILE_BYTES}"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)
        .map_err(|err| ServiceError::Invalid(format!("{shown} is not valid YAML: {err}")))?;
    let json = yaml_to_json(&yaml, "")
        .map_err(|problem| ServiceError::Invalid(format!("{shown}: {problem}")))?;
    read_task(&json).map_err(|problem| ServiceError::Invalid(format!("{shown}: {problem}")))
}

/// The YAML as JSON. Tags run code (`!function utils.doc_to_text`) or build Python objects in
/// the harness: refused with the key that holds one.
fn yaml_to_json(value: &serde_yaml_ng::Value, at: &str) -> Result<serde_json::Value, String> {
    use serde_yaml_ng::Value as Yaml;
    let key_path = |key: &str| {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    Ok(match value {
        Yaml::Null => serde_json::Value::Null,
        Yaml::Bool(flag) => serde_json::Value::Bool(*flag),
        Yaml::Number(number) => serde_json::to_value(number).map_err(|err| err.to_string())?,
        Yaml::String(text) => serde_json::Value::String(text.clone()),
        Yaml::Sequence(items) => serde_json::Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(index, item)| yaml_to_json(item, &format!("{at}[{index}]")))
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Mapping(mapping) => {
            let mut object = serde_json::Map::new();
            for (key, item) in mapping {
                let key = match key {
                    Yaml::String(key) => key.clone(),
                    Yaml::Number(number) => number.to_string(),
                    Yaml::Bool(flag) => flag.to_string(),
                    _ => return Err(format!("`{at}` has a key that is not text")),
                };
                let value = yaml_to_json(item, &key_path(&key))?;
                object.insert(key, value);
            }
            serde_json::Value::Object(object)
        }
        // IFEval's scoring and aggregation functions pass as text; the task reader accepts
        // them for IFEval alone (Arbiter's instructions grader does what they do).
        Yaml::Tagged(tagged) if tagged.tag == "!function" && may_name_a_function(at) => {
            match &tagged.value {
                Yaml::String(code) => serde_json::Value::String(format!("!function {code}")),
                _ => {
                    return Err(format!(
                        "`{at}` is a `!function` tag without a function name"
                    ))
                }
            }
        }
        Yaml::Tagged(tagged) => {
            let place = if at.is_empty() { "the task" } else { at };
            return Err(format!(
                "`{place}` is `{} …`, which runs Python code of the task; Arbiter imports only what the YAML declares",
                tagged.tag
            ));
        }
    })
}

/// Whether a `!function` tag may stand at `at`: exactly `process_results`, or exactly
/// `metric_list[<n>].aggregation` (the task reader then accepts IFEval's own alone).
fn may_name_a_function(at: &str) -> bool {
    if at == "process_results" {
        return true;
    }
    at.strip_prefix("metric_list[")
        .and_then(|rest| rest.strip_suffix("].aggregation"))
        .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
}

/// A split's one data file: relative to the task file, or (as the harness reads it) to the
/// working directory when the task file's folder has no such file.
fn one_file(base: &Path, split: &SplitFiles) -> ServiceResult<PathBuf> {
    match split.files.as_slice() {
        [file] => {
            let beside_task = base.join(file);
            Ok(if beside_task.exists() || !Path::new(file).exists() {
                beside_task
            } else {
                PathBuf::from(file)
            })
        }
        files => Err(ServiceError::Invalid(format!(
            "`dataset_kwargs.data_files.{}` lists {} files; list one file per split (join them first)",
            split.split,
            files.len()
        ))),
    }
}

/// The format of a data file: by its extension, within the task's `dataset_path` (the
/// `datasets` json loader reads JSON Lines whatever the extension).
fn file_format(format: DataFormat, path: &Path) -> DatasetFormat {
    let by_name = DatasetFormat::from_file_name(&path.to_string_lossy());
    match (format, by_name) {
        (DataFormat::Json, DatasetFormat::JsonlGzip) => DatasetFormat::JsonlGzip,
        (DataFormat::Json, _) => DatasetFormat::Jsonl,
        (DataFormat::Csv, DatasetFormat::CsvGzip) => DatasetFormat::CsvGzip,
        (DataFormat::Csv, _) => DatasetFormat::Csv,
        (DataFormat::Parquet, _) => DatasetFormat::Parquet,
    }
}

/// The eval form of one pipeline over the stored (or, while checking, placeholder) datasets.
fn eval_form(
    task: &LmEvalTask,
    options: &ImportOptions,
    name: &str,
    grader: &arbiter_domain::grading::GraderSpec,
    evaluated: DatasetId,
    shots_dataset: DatasetId,
) -> ServiceResult<EvalForm> {
    let grader = serde_json::to_string(grader).map_err(|_| ServiceError::Internal)?;
    Ok(EvalForm {
        name: name.to_string(),
        dataset_id: evaluated,
        prompt_template: task.prompt_template.clone(),
        max_tokens: task.max_tokens,
        temperature: task.temperature,
        repetitions: task.repetitions,
        seed: arbiter_domain::import::lm_eval::HARNESS_SEED,
        grader,
        options: EvalOptions {
            template_syntax: Some(TemplateSyntax::Jinja),
            system_prompt: String::new(),
            messages: Vec::new(),
            // Likelihood scoring reads prompt logprobs, which only the completions API has.
            api: match (&task.choices, task.rolling) {
                (Some(_), _) | (None, true) => arbiter_domain::prompt::Api::Completions,
                (None, false) => options.api,
            },
            mapping: Some(FieldMapping {
                input: task.input_field.clone(),
                target: task.target_field.clone(),
                choices: task.choices.as_ref().map(|(field, _)| field.clone()),
                category: None,
                metadata: Vec::new(),
                shuffle_choices: None,
                images: None,
            }),
            few_shot: task.shots.as_ref().map(|shots| FewShotSpec {
                dataset_id: shots_dataset,
                count: shots.count,
                seed: shots.seed,
                style: FewShotStyle::Text,
                delimiter: shots.delimiter.clone(),
                target_delimiter: shots.target_delimiter.clone(),
                in_order: shots.in_order,
            }),
            sampling: task.sampling.clone(),
            likelihood: task
                .choices
                .as_ref()
                .map(|(_, likelihood)| likelihood.clone()),
            rolling: task.rolling.then(|| arbiter_domain::rolling::RollingSpec {
                max_length: options
                    .max_length
                    .unwrap_or(arbiter_domain::rolling::DEFAULT_MAX_LENGTH),
                ..arbiter_domain::rolling::RollingSpec::default()
            }),
            contamination: None,
        },
    })
}

/// The shots as a launch would draw them, from the file instead of the store.
fn draw_from_file(
    path: &Path,
    format: DatasetFormat,
    prompt: &arbiter_domain::prompt::PromptSpec,
    dataset_id: DatasetId,
) -> ServiceResult<Exemplars> {
    let Some(few_shot) = &prompt.few_shot else {
        return Err(ServiceError::Internal);
    };
    let draw = Arc::new(Mutex::new(ExemplarDraw::new(few_shot)));
    let offered = draw.clone();
    let sink: ItemSink = Box::new(move |chunk| {
        let mut draw = offered.lock().map_err(|_| poisoned())?;
        for item in &chunk {
            draw.offer(item);
        }
        Ok(())
    });
    stream(path, format, sink)?;
    let draw = Arc::into_inner(draw)
        .and_then(|draw| draw.into_inner().ok())
        .ok_or(ServiceError::Internal)?;
    let items = draw.finish();
    crate::prompts::check_exemplar_size(&items)?;
    if items.len() < few_shot.count as usize {
        return Err(ServiceError::Invalid(format!(
            "{} has {} documents; num_fewshot asks for {}",
            path.display(),
            items.len(),
            few_shot.count
        )));
    }
    Ok(Exemplars {
        dataset_id,
        dataset_revision: String::new(),
        items,
    })
}

fn poisoned() -> DatasetError {
    DatasetError::At {
        place: "the import".into(),
        message: "failed while drawing shots".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_tags_pass_only_at_the_two_places_ifeval_uses() {
        assert!(may_name_a_function("process_results"));
        assert!(may_name_a_function("metric_list[3].aggregation"));
        for at in [
            "doc_to_text",
            "metric_list[0].x].aggregation",
            "metric_list[0][0].aggregation",
            "metric_list[].aggregation",
            "metric_list[0].aggregation.x",
            "x.process_results",
        ] {
            assert!(!may_name_a_function(at), "{at}");
        }
    }
}
